/* cuda_check.h - CUDA error -> ibp_status_t for the host side of kernels.
 *
 * Every CUDA runtime call in kernels/ goes through IBP_CUDA_CHECK, which
 * returns IBP_ERR_CUDA (IBP_ERR_NO_DEVICE when there is no usable device)
 * with cudaGetErrorName/String and the call's text in the detail message,
 * and clears CUDA's last-error slot so a later call does not report it
 * again (sticky errors stay: the context is then unusable). */
#ifndef IBP_CUDA_CHECK_H
#define IBP_CUDA_CHECK_H

#include <cuda_runtime.h>

extern "C" {
#include "util/error.h"
}

static inline ibp_status_t ibp_cuda_status(cudaError_t e, const char *what, const char *file, int line)
{
	if (e == cudaSuccess)
		return IBP_OK;
	(void)cudaGetLastError();
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e),
				cudaGetErrorName(e));
	return ibpi_fail(IBP_ERR_CUDA, "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

#define IBP_CUDA_CHECK(call)                                                              \
	do {                                                                              \
		cudaError_t ibp_cuda_e_ = (call);                                         \
		if (ibp_cuda_e_ != cudaSuccess)                                           \
			return ibp_cuda_status(ibp_cuda_e_, #call, __FILE__, __LINE__);   \
	} while (0)

/* Launches kernel k and returns THIS launch's error (a bad configuration,
 * too much shared memory): cudaLaunchKernelEx reports it directly, where
 * <<<...>>> followed by cudaGetLastError() would also report an unrelated
 * earlier error left in the runtime's last-error slot by other code. */
template <class... KArgs, class... Args>
static inline cudaError_t ibp_cuda_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
					  Args &&...args)
{
	cudaLaunchConfig_t cfg = cudaLaunchConfig_t(); /* no attributes */
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	return cudaLaunchKernelEx(&cfg, k, static_cast<Args &&>(args)...);
}

/* Launches and returns IBP_ERR_CUDA naming the kernel when the launch fails. */
#define IBP_CUDA_LAUNCH(name, k, grid, block, smem, stream, ...)                                    \
	do {                                                                                      \
		cudaError_t ibp_cuda_le_ = ibp_cuda_launch(k, grid, block, smem, stream, __VA_ARGS__); \
		if (ibp_cuda_le_ != cudaSuccess)                                                  \
			return ibp_cuda_status(ibp_cuda_le_, name, __FILE__, __LINE__);        \
	} while (0)

/* IBP_OK when the calling thread's current device is usable, else
 * IBP_ERR_NO_DEVICE (no device or no driver). */
static inline ibp_status_t ibp_cuda_require_device(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return ibpi_fail(IBP_ERR_NO_DEVICE, "no usable CUDA device: cudaGetDeviceCount: %s (%s)",
				cudaGetErrorString(e), cudaGetErrorName(e));
	}
	if (n <= 0)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "no CUDA device (cudaGetDeviceCount = 0)");
	return IBP_OK;
}

/* A grid for `items` independent work items with grid-stride loops: at
 * most 8 blocks per SM (the loops cover the rest). */
static inline ibp_status_t ibp_cuda_grid(uint64_t items, unsigned *grid)
{
	int dev = 0, sms = 0;
	IBP_CUDA_CHECK(cudaGetDevice(&dev));
	IBP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	uint64_t cap = (uint64_t)(sms > 0 ? sms : 1) * 8u;
	*grid = (unsigned)(items < cap ? (items ? items : 1) : cap);
	return IBP_OK;
}

#endif /* IBP_CUDA_CHECK_H */
