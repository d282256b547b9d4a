/* cuda_stub.cpp - the CUDA runtime calls of the kernels' host code,
 * answered as one H100 (sm_90: 132 SMs, 227 KiB opt-in shared memory per
 * block) on the host emulator. Errors behave as the runtime's: a refused
 * launch sets the last error, which cudaGetLastError returns and clears
 * and cudaPeekAtLastError returns and keeps. Asynchronous work goes to the
 * emulator's streams (emu.h): it runs later, in stream order. */
#include "emu.h"
#include <cuda_runtime.h>

#include <map>
#include <mutex>

static thread_local cudaError_t last_error = cudaSuccess; /* per host thread, as the runtime's */
static std::map<const void *, int> max_dyn; /* cudaFuncAttributeMaxDynamicSharedMemorySize */
static std::mutex max_dyn_mu;
int emu_stub_no_device;                     /* tests: pretend there is no device */
static const int H100_SMS = 132, H100_OPTIN = 227 * 1024, DEFAULT_DYN = 48 * 1024;

static cudaError_t set(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	default: return "emulated CUDA error";
	}
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	default: return "cudaErrorUnknown";
	}
}

int emu_stub_devices = 1; /* tests: how many H100s (ranks of the NCCL stand-in have one each) */

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = emu_stub_no_device ? 0 : emu_stub_devices;
	return emu_stub_no_device ? set(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
	*d = emu_get_device();
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
	if (emu_stub_no_device)
		return set(cudaErrorNoDevice);
	if (d < 0 || d >= emu_stub_devices)
		return set(cudaErrorInvalidDevice);
	emu_set_device(d);
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev)
{
	if (dev < 0 || dev >= emu_stub_devices)
		return set(cudaErrorInvalidDevice);
	switch (a) {
	case cudaDevAttrMultiProcessorCount: *v = H100_SMS; return cudaSuccess;
	case cudaDevAttrMaxSharedMemoryPerBlock: *v = DEFAULT_DYN; return cudaSuccess;
	case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = H100_OPTIN; return cudaSuccess;
	case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess;
	case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
	case cudaDevAttrHostRegisterReadOnlySupported: *v = 1; return cudaSuccess;
	case cudaDevAttrMemoryPoolsSupported: *v = 1; return cudaSuccess;
	}
	return set(cudaErrorInvalidValue);
}

emu_stream *emu_stub_stream(cudaStream_t s)
{
	return s == cudaStreamLegacy || s == cudaStreamPerThread ? nullptr : (emu_stream *)s;
}

__attribute__((noinline)) cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	if (n && !p)
		return set(cudaErrorInvalidValue);
	emu_enqueue_memset(emu_stub_stream(s), p, v, n, __builtin_return_address(0));
	return cudaSuccess;
}

cudaError_t emu_func_set_attr(const void *f, enum cudaFuncAttribute a, int v)
{
	if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > H100_OPTIN)
		return set(cudaErrorInvalidValue);
	std::lock_guard<std::mutex> g(max_dyn_mu);
	max_dyn[f] = v;
	return cudaSuccess;
}

cudaError_t emu_func_get_attr(struct cudaFuncAttributes *fa, const void *)
{
	fa->sharedSizeBytes = 1024; /* a guess at the static __shared__ of any kernel */
	fa->maxThreadsPerBlock = 1024;
	fa->numRegs = 64;
	return cudaSuccess;
}

cudaError_t emu_launch_error(const void *k, emu_dim3 g, emu_dim3 b, size_t smem)
{
	unsigned bt = b.x * b.y * b.z;
	if (bt == 0 || bt > 1024 || g.x == 0 || g.y == 0 || g.y > 65535 || g.z != 1)
		return set(cudaErrorInvalidConfiguration);
	size_t cap = DEFAULT_DYN;
	{
		std::lock_guard<std::mutex> g(max_dyn_mu);
		auto it = max_dyn.find(k);
		if (it != max_dyn.end())
			cap = (size_t)it->second;
	}
	if (smem > cap) {
		fprintf(stderr, "emu: launch refused: %zu bytes of dynamic shared memory, the kernel allows %zu\n", smem, cap);
		return set(cudaErrorInvalidValue);
	}
	return cudaSuccess;
}

bool emu_launch_refused(const void *k, emu_dim3 g, emu_dim3 b, size_t smem)
{
	return emu_launch_error(k, g, b, smem) != cudaSuccess;
}

int emu_stub_device_syncs;

void emu_stub_plant_error(cudaError_t e)
{
	last_error = e;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	*p = emu_dev_alloc(n, 0, "cudaMalloc");
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	if (!p)
		return cudaSuccess;
	if (!emu_is_device_memory(p))
		return set(cudaErrorInvalidValue);
	emu_device_sync(); /* cudaFree waits for the device's work */
	emu_dev_free(p);
	return cudaSuccess;
}

/* Stream-ordered allocation: the memory exists at once (a use before the
 * stream reaches the allocation is not modelled). */
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t)
{
	*p = emu_dev_alloc(n, 0, "cudaMallocAsync");
	return cudaSuccess;
}

__attribute__((noinline)) cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	if (!p)
		return cudaSuccess;
	if (!emu_is_device_memory(p))
		return set(cudaErrorInvalidValue);
	emu_enqueue_free(emu_stub_stream(s), p, __builtin_return_address(0)); /* freed when the stream gets there */
	return cudaSuccess;
}

/* Tests: called before each copy, so that a test can run other calls
 * between an asynchronous step and the copy that follows it. */
void (*emu_stub_copy_hook)(void *dst, const void *src, size_t n, int kind);

static cudaError_t copy(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st, const void *site)
{
	if (n && (!d || !s))
		return set(cudaErrorInvalidValue);
	if (emu_stub_copy_hook)
		emu_stub_copy_hook(d, s, n, (int)k);
	emu_enqueue_copy(emu_stub_stream(st), d, s, n, site);
	return cudaSuccess;
}

__attribute__((noinline)) cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
						      cudaStream_t st)
{
	return copy(d, s, n, k, st, __builtin_return_address(0));
}

/* Synchronous: a copy on the legacy stream (after the blocking streams'
 * work), and the host waits for it. */
__attribute__((noinline)) cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
	cudaError_t e = copy(d, s, n, k, nullptr, __builtin_return_address(0));
	if (e == cudaSuccess)
		emu_stream_sync(nullptr);
	return e;
}

/* Asynchronous with respect to the host, as the runtime documents. */
__attribute__((noinline)) cudaError_t cudaMemset(void *p, int v, size_t n)
{
	if (n && !p)
		return set(cudaErrorInvalidValue);
	emu_enqueue_memset(nullptr, p, v, n, __builtin_return_address(0));
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	emu_stream_sync(emu_stub_stream(s));
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	emu_stub_device_syncs++;
	emu_device_sync();
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	if (!s || (flags & ~cudaStreamNonBlocking))
		return set(cudaErrorInvalidValue);
	*s = (cudaStream_t)emu_stream_new((flags & cudaStreamNonBlocking) != 0);
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return set(cudaErrorInvalidResourceHandle);
	emu_stream_destroy((emu_stream *)s);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	return emu_stream_query(emu_stub_stream(s)) ? cudaSuccess : cudaErrorNotReady; /* not a sticky error */
}

__attribute__((noinline)) cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	if (!e || flags)
		return set(e ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
	emu_stream_wait_event(emu_stub_stream(s), (emu_event *)e, __builtin_return_address(0));
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	if (!e || (flags & ~cudaEventDisableTiming))
		return set(cudaErrorInvalidValue);
	*e = (cudaEvent_t)emu_event_new();
	return cudaSuccess;
}

__attribute__((noinline)) cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!e)
		return set(cudaErrorInvalidResourceHandle);
	emu_event_record((emu_event *)e, emu_stub_stream(s), __builtin_return_address(0));
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	if (!e)
		return set(cudaErrorInvalidResourceHandle);
	return emu_event_query((emu_event *)e) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	if (!e)
		return set(cudaErrorInvalidResourceHandle);
	emu_event_sync((emu_event *)e);
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (!e)
		return set(cudaErrorInvalidResourceHandle);
	emu_event_destroy((emu_event *)e); /* the runtime defers it past the recorded work; so does its record */
	return cudaSuccess;
}

/* Tests: cudaHostAlloc refuses after this many more calls (-1: never). */
int emu_stub_host_alloc_fail_after = -1;

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
	if (!p || (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
		return set(cudaErrorInvalidValue);
	if (emu_stub_host_alloc_fail_after == 0) {
		*p = nullptr;
		return set(cudaErrorMemoryAllocation);
	}
	if (emu_stub_host_alloc_fail_after > 0)
		emu_stub_host_alloc_fail_after--;
	*p = emu_pinned_alloc(n ? n : 1, "pinned host memory (cudaHostAlloc)");
	return *p ? cudaSuccess : set(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
	return cudaHostAlloc(p, n, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *p)
{
	if (!p)
		return cudaSuccess;
	return emu_pinned_free(p) ? cudaSuccess : set(cudaErrorInvalidValue);
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags)
{
	if (!d || flags || !emu_is_pinned(h))
		return set(cudaErrorInvalidValue);
	*d = h; /* one address space, as with unified addressing */
	return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	memset(a, 0, sizeof(*a));
	if (emu_is_device_memory(p)) {
		a->type = cudaMemoryTypeDevice;
		a->devicePointer = (void *)p;
	} else if (emu_is_pinned(p)) {
		a->type = cudaMemoryTypeHost;
		a->devicePointer = a->hostPointer = (void *)p;
	} else {
		a->type = cudaMemoryTypeUnregistered; /* pageable host memory */
	}
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags)
{
	if (!p || !n || (flags & ~(cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterReadOnly)))
		return set(cudaErrorInvalidValue);
	const int r = emu_host_register(p, n);
	return r == 0 ? cudaSuccess : set(r == 1 ? cudaErrorHostMemoryAlreadyRegistered : cudaErrorInvalidValue);
}

cudaError_t cudaHostUnregister(void *p)
{
	return emu_host_unregister(p) ? cudaSuccess : set(cudaErrorHostMemoryNotRegistered);
}

cudaError_t emu_occupancy(int *n, const void *, int threads, size_t smem)
{
	/* sm_90: 2048 threads, 32 blocks, 228 KiB shared memory (1 KiB reserved per block) per SM */
	int by_threads = 2048 / (threads > 0 ? threads : 1);
	int by_smem = (int)((228 * 1024) / (smem + 1024 + 1024));
	*n = by_threads < by_smem ? by_threads : by_smem;
	if (*n > 32)
		*n = 32;
	return cudaSuccess;
}
