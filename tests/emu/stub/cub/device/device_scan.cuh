/* Host-emulation stub of cub::DeviceScan::ExclusiveSum: the scan is a
 * one-thread launch on the caller's stream, so it runs in stream order
 * with the emulator's checks (emu.h). The temporary-storage protocol is
 * CUB's. */
#pragma once
#include <cuda_runtime.h>
namespace cub {
template <class In, class Out> void emu_exclusive_sum_kernel(In in, Out out, uint64_t n)
{
	uint64_t s = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = in[i];
		out[i] = s;
		s += v;
	}
}
struct DeviceScan {
	template <class In, class Out>
	static cudaError_t ExclusiveSum(void *tmp, size_t &bytes, In in, Out out, uint64_t n, cudaStream_t s = 0)
	{
		if (!tmp) {
			bytes = 768;
			return cudaSuccess;
		}
		if (bytes < 768)
			return cudaErrorInvalidValue;
		emu_kcall(dim3(1), dim3(1), 0, s).run(emu_exclusive_sum_kernel<In, Out>, in, out, n);
		return cudaSuccess;
	}
};
} // namespace cub
