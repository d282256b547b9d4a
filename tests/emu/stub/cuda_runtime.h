/* Host-emulation stub of the CUDA runtime (tests/emu/cuda_stub.cpp): what
 * the kernels' host code calls, answering as one H100 (sm_90). Device
 * memory is host memory from emu_dev_alloc; streams and events are
 * emulated (emu.h: work runs later, in stream order). */
#pragma once
#include <stddef.h>
#include <stdint.h>
/* C sources (src/mem/pinned_cudahost.c) see the plain C declarations;
 * C++ adds default arguments and the templates. */
#ifdef __cplusplus
#define EMU_DFLT(x) = x
extern "C" {
#else
#define EMU_DFLT(x)
#endif
typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInsufficientDriver = 35,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorHostMemoryNotRegistered = 713,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorLaunchOutOfResources = 701,
	cudaErrorNotSupported = 801,
} cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0u
#define cudaStreamNonBlocking 1u
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u
#define cudaHostAllocDefault 0u
#define cudaHostAllocPortable 1u
#define cudaHostAllocMapped 2u
#define cudaHostAllocWriteCombined 4u
enum cudaDeviceAttr {
	cudaDevAttrMaxSharedMemoryPerBlock = 8,
	cudaDevAttrMultiProcessorCount = 16,
	cudaDevAttrComputeCapabilityMajor = 75,
	cudaDevAttrComputeCapabilityMinor = 76,
	cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
	cudaDevAttrHostRegisterReadOnlySupported = 113,
	cudaDevAttrMemoryPoolsSupported = 115,
};
enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
	enum cudaMemoryType type;
	int device;
	void *devicePointer, *hostPointer;
};
#define cudaHostRegisterPortable 1u
#define cudaHostRegisterMapped 2u
#define cudaHostRegisterReadOnly 8u
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
	size_t sharedSizeBytes;
	int maxThreadsPerBlock, numRegs;
};
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t);
const char *cudaGetErrorName(cudaError_t);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaDeviceGetAttribute(int *, enum cudaDeviceAttr, int);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t EMU_DFLT(0));
/* device memory: emu_dev_alloc (bounds and races checked in kernels) */
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t EMU_DFLT(0));
cudaError_t cudaMemcpy(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned EMU_DFLT(0));
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *, unsigned);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t EMU_DFLT(0));
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
/* pinned, mapped host memory (emu_pinned_alloc) */
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaHostGetDevicePointer(void **, void *, unsigned);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *, const void *);
cudaError_t cudaHostRegister(void *, size_t, unsigned);
cudaError_t cudaHostUnregister(void *);
cudaError_t emu_occupancy(int *, const void *, int, size_t);
/* tests: calls made so far, and a stale error planted as other code would leave it */
extern int emu_stub_device_syncs;
extern int emu_stub_host_alloc_fail_after; /* cudaHostAlloc refuses after this many more calls (-1: never) */
void emu_stub_plant_error(cudaError_t e);
extern void (*emu_stub_copy_hook)(void *dst, const void *src, size_t n, int kind);
cudaError_t emu_func_set_attr(const void *f, enum cudaFuncAttribute a, int v);
cudaError_t emu_func_get_attr(struct cudaFuncAttributes *fa, const void *f);
#ifdef __cplusplus
} /* extern "C" */
template <class F> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F f, int threads, size_t smem)
{
	return emu_occupancy(n, (const void *)f, threads, smem);
}
/* Launches (kernels/cuda_check.h's ibp_cuda_launch): the launch's own
 * error is returned and also left in the last-error slot, as the runtime
 * does; a good launch is queued on its stream (emu.h). */
struct cudaLaunchConfig_t {
	dim3 gridDim, blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	void *attrs;
	unsigned numAttrs;
};
cudaError_t emu_launch_error(const void *k, dim3 g, dim3 b, size_t smem);
emu_stream *emu_stub_stream(cudaStream_t s);
template <class... E, class... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*k)(E...), A &&...a)
{
	cudaError_t e = emu_launch_error((const void *)k, c->gridDim, c->blockDim, c->dynamicSmemBytes);
	if (e != cudaSuccess)
		return e;
	emu_enqueue_launch(emu_stub_stream(c->stream), new emu_job_t<void (*)(E...), E...>(k, E(a)...), c->gridDim,
			   c->blockDim, c->dynamicSmemBytes, __PRETTY_FUNCTION__, __builtin_return_address(0), (const void *)k);
	return cudaSuccess;
}
template <class F> cudaError_t cudaFuncSetAttribute(F f, enum cudaFuncAttribute a, int v)
{
	return emu_func_set_attr((const void *)f, a, v);
}
template <class F> cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *fa, F f)
{
	return emu_func_get_attr(fa, (const void *)f);
}
#endif /* __cplusplus */
