/* ibp_train.cu - training on the GPU: the bit counters of ibp_train_count
 * and the Mask/Bitval rule of ibp_train_mask (src/bitpack/train.c), with the same
 * results.
 *
 * Counting: a thread owns 4 byte positions (32 counters) of a slice of
 * rows. Per row it adds (word >> b) & 0x01010101 into acc[b], which keeps
 * 4 byte-lane counters of bit b; lanes are flushed into 32-bit counters
 * before they can pass 255, and those into the global 64-bit counts with
 * atomics when the slice ends (or every 2^24 rows).
 */
#include <stdlib.h>

#include "ibp_device.cuh"
#include "bitpack/mask_rule.h"
extern "C" {
#include "bitpack/train_internal.h"
}

#define IBP_COUNT_THREADS 256u
#define IBP_COUNT_FLUSH (1ull << 24) /* rows between flushes of the 32-bit counters */

/* The 4 bytes of the row at p (avail of them inside the row), zero-padded. */
__device__ __forceinline__ uint32_t ibp_load4(const uint8_t *p, uint64_t avail)
{
	if (avail >= 4 && ((uintptr_t)p & 3) == 0)
		return *reinterpret_cast<const uint32_t *>(p);
	uint32_t v = 0;
	for (uint64_t i = 0; i < 4 && i < avail; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

__global__ void __launch_bounds__(IBP_COUNT_THREADS)
	ibp_count_kernel(const uint8_t *rows, uint64_t R, const uint64_t *idx, uint64_t n,
			 uint64_t rows_per_slice, unsigned long long *counts)
{
	const uint64_t p0 = 4 * ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x);
	if (p0 >= R)
		return;
	const uint64_t r0 = (uint64_t)blockIdx.y * rows_per_slice;
	if (r0 >= n)
		return;
	const uint64_t r1 = n - r0 < rows_per_slice ? n : r0 + rows_per_slice;
	const uint64_t avail = R - p0;
	uint32_t cnt[32];
#pragma unroll
	for (int i = 0; i < 32; i++)
		cnt[i] = 0;
	uint64_t since_flush = 0;
	for (uint64_t r = r0; r < r1;) {
		const uint64_t stop = r1 - r < 255 ? r1 : r + 255;
		uint32_t acc[8];
#pragma unroll
		for (int b = 0; b < 8; b++)
			acc[b] = 0;
		for (; r < stop; r++) {
			const uint64_t row = idx ? idx[r] : r;
			const uint32_t w = ibp_load4(rows + row * R + p0, avail);
#pragma unroll
			for (int b = 0; b < 8; b++)
				acc[b] += (w >> b) & 0x01010101u;
		}
#pragma unroll
		for (int q = 0; q < 4; q++)
#pragma unroll
			for (int b = 0; b < 8; b++)
				cnt[8 * q + b] += (acc[b] >> (8 * q)) & 0xffu;
		since_flush += 255;
		if (since_flush >= IBP_COUNT_FLUSH || r >= r1) {
			/* counter 8*q + b is bit b of byte p0 + q: counts[8*(p0+q) + b] */
#pragma unroll
			for (int i = 0; i < 32; i++) {
				if (cnt[i] && p0 + (uint64_t)(i / 8) < R)
					atomicAdd(counts + 8 * p0 + i, (unsigned long long)cnt[i]);
				cnt[i] = 0;
			}
			since_flush = 0;
		}
	}
}

__global__ void ibp_mask_kernel(const unsigned long long *counts, uint64_t n, uint64_t R, uint64_t need,
				uint8_t *mask, uint8_t *bitval)
{
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t p = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; p < R; p += stride)
		ibp_mask_rule(reinterpret_cast<const uint64_t *>(counts) + 8 * p, n, need, &mask[p], &bitval[p]);
}

static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "64-bit counters");

ibp_status_t ibp_train_count_cuda(const void *rows, uint64_t row_bytes, const uint64_t *idx,
				  uint64_t n, uint64_t *counts, void *stream)
{
	if (row_bytes == 0 || row_bytes > IBP_MAX_ROW_BYTES || !counts || (n && !rows))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train_count_cuda: bad argument (row_bytes %llu)",
				(unsigned long long)row_bytes);
	if (!idx && n > UINT64_MAX / row_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train_count_cuda: n * row_bytes overflows");
	int dev = 0;
	IBP_TRY(ibp_cu_current(&dev));
	cudaStream_t cs = (cudaStream_t)stream;
	IBP_CU(cudaMemsetAsync(counts, 0, 8 * row_bytes * sizeof(uint64_t), cs), "train_count_cuda: memset");
	if (n == 0)
		return IBP_OK;
	int nsm = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
	const uint64_t threads_x = (row_bytes + 3) / 4;
	const uint64_t bx = (threads_x + IBP_COUNT_THREADS - 1) / IBP_COUNT_THREADS;
	if (bx > 0x7fffffffull)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train_count_cuda: rows of %llu bytes are too long",
				(unsigned long long)row_bytes);
	/* enough slices of rows to fill the device a few times over */
	const uint64_t target = (uint64_t)nsm * 8 * 4;
	uint64_t by = (target + bx - 1) / bx;
	if (by > 65535)
		by = 65535;
	if (by > n)
		by = n;
	const uint64_t rps = (n + by - 1) / by;
	by = (n + rps - 1) / rps;
	dim3 grid((unsigned)bx, (unsigned)by);
	IBP_CUDA_LAUNCH("train_count_cuda: kernel launch", ibp_count_kernel, grid, IBP_COUNT_THREADS, 0, cs,
			(const uint8_t *)rows, row_bytes, idx, n, rps, (unsigned long long *)counts);
	return IBP_OK;
}

ibp_status_t ibp_train_mask_cuda(const uint64_t *counts, uint64_t n, uint64_t row_bytes, double t,
				 uint8_t *mask, uint8_t *bitval, void *stream)
{
	if (!counts || !mask || !bitval || row_bytes == 0 || row_bytes > IBP_MAX_ROW_BYTES ||
	    !(t >= 0.5 && t <= 1.0))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train_mask_cuda: bad argument (t %g, row_bytes %llu)", t,
				(unsigned long long)row_bytes);
	int dev = 0;
	IBP_TRY(ibp_cu_current(&dev));
	int nsm = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
	const uint64_t need = ibpi_train_need(t, n); /* the CPU's exact threshold count */
	uint64_t blocks = (row_bytes + 255) / 256, cap = (uint64_t)nsm * 8;
	if (blocks > cap)
		blocks = cap;
	IBP_CUDA_LAUNCH("train_mask_cuda: kernel launch", ibp_mask_kernel, (unsigned)blocks, 256, 0,
			(cudaStream_t)stream, (const unsigned long long *)counts, n, row_bytes, need, mask,
			bitval);
	return IBP_OK;
}
