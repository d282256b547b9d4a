/* ibp_cuda_cudahost.c - thin CUDA runtime wrappers of ibp/cuda.h (device
 * count, device memory, copies) for callers without CUDA headers. */
#include <cuda_runtime_api.h>

#include "ibp/cuda.h"
#include "util/error.h"

static ibp_status_t cu_fail(cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "%s: %s", what, cudaGetErrorString(e));
	return ibpi_fail(IBP_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int ibp_cuda_built(void)
{
	return 1;
}

ibp_status_t ibp_cuda_device_count(int *count)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (count)
		*count = e == cudaSuccess ? n : 0;
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return ibpi_fail(IBP_ERR_NO_DEVICE, "no usable CUDA device: %s", cudaGetErrorString(e));
	}
	if (n <= 0)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "no CUDA device found");
	return IBP_OK;
}

ibp_status_t ibp_cuda_malloc(uint64_t bytes, void **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_malloc: NULL out");
	*out = NULL;
	if (bytes == 0)
		return IBP_OK;
	cudaError_t e = cudaMalloc(out, bytes);
	if (e != cudaSuccess) {
		*out = NULL;
		return cu_fail(e, "cudaMalloc");
	}
	return IBP_OK;
}

void ibp_cuda_free(void *p)
{
	if (p && cudaFree(p) != cudaSuccess)
		(void)cudaGetLastError();
}

ibp_status_t ibp_cuda_memcpy(void *dst, const void *src, uint64_t bytes, void *stream)
{
	if (bytes == 0)
		return IBP_OK;
	if (!dst || !src)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_memcpy: NULL pointer");
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
	return e == cudaSuccess ? IBP_OK : cu_fail(e, "cudaMemcpyAsync");
}

ibp_status_t ibp_cuda_memset(void *dst, int value, uint64_t bytes, void *stream)
{
	if (bytes == 0)
		return IBP_OK;
	if (!dst)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_memset: NULL pointer");
	cudaError_t e = cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream);
	return e == cudaSuccess ? IBP_OK : cu_fail(e, "cudaMemsetAsync");
}

ibp_status_t ibp_cuda_sync(void *stream)
{
	cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
	return e == cudaSuccess ? IBP_OK : cu_fail(e, "cudaStreamSynchronize");
}
