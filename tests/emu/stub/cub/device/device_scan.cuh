/* Host-emulation stub of cub::DeviceScan::ExclusiveSum: device memory is
 * host memory and every earlier launch has completed, so the scan runs
 * here, in stream order. The temporary-storage protocol is CUB's. */
#pragma once
#include <cuda_runtime.h>
namespace cub {
struct DeviceScan {
	template <class In, class Out>
	static cudaError_t ExclusiveSum(void *tmp, size_t &bytes, In in, Out out, uint64_t n, cudaStream_t = 0)
	{
		if (!tmp) {
			bytes = 768;
			return cudaSuccess;
		}
		if (bytes < 768)
			return cudaErrorInvalidValue;
		uint64_t s = 0;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t v = in[i];
			out[i] = s;
			s += v;
		}
		return cudaSuccess;
	}
};
} // namespace cub
