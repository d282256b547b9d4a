/* coll_reduce.cu - the reduction step of the collectives on device buffers
 * (ibpi_coll_reduce_add_cuda), twin of ibpi_coll_reduce_add (src/coll/coll_codec.c):
 * dst[i] = round_dt(float(part[i]) + float(local[i])), one FP32 add with
 * round-to-nearest (__fadd_rn: no contraction; NaNs as x86 makes them,
 * see crk_addf), then the same rounding to
 * BF16/F16 as the CPU (fp8/fp8_impl.h), so the bits are identical. The
 * partial was decoded into dt by the codec kernel; grid-stride loop, one
 * element per thread, no shared memory, no atomics. */
#include <stdint.h>

#include "cuda_check.h"
extern "C" {
#include "ibp/types.h"
}
#include "fp8/fp8_impl.h"

#define CRK_THREADS 256u

/* __fadd_rn with x86's NaN rule (ibpi_coll_reduce_add's add_nan): a NaN operand
 * quieted, the first one first; Inf - Inf gives 0xffc00000. */
static __device__ __forceinline__ float crk_addf(float a, float b)
{
	if (a != a || b != b)
		return __uint_as_float(__float_as_uint(a != a ? a : b) | 0x00400000u);
	float r = __fadd_rn(a, b);
	return r == r ? r : __uint_as_float(0xffc00000u);
}

template <int DT>
static __global__ void crk_add(const void *__restrict__ part, const void *__restrict__ local, uint64_t n,
			       void *__restrict__ dst)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
		if (DT == IBP_DTYPE_F32) {
			((float *)dst)[i] = crk_addf(((const float *)part)[i], ((const float *)local)[i]);
		} else if (DT == IBP_DTYPE_BF16) {
			float s = crk_addf(fp8i_bf16_to_f32(((const uint16_t *)part)[i]),
					    fp8i_bf16_to_f32(((const uint16_t *)local)[i]));
			((uint16_t *)dst)[i] = fp8i_f32_to_bf16(s);
		} else {
			float s = crk_addf(fp8i_f16_to_f32(((const uint16_t *)part)[i]),
					    fp8i_f16_to_f32(((const uint16_t *)local)[i]));
			((uint16_t *)dst)[i] = fp8i_f32_to_f16(s);
		}
	}
}

/* Declared in src/coll/coll_mem.h (the coll layer, above this one). */
extern "C" ibp_status_t ibpi_coll_reduce_add_cuda(const void *d_part, const void *d_local, ibp_dtype_t dt, uint64_t n,
					     void *d_dst, void *stream)
{
	if (dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16 && dt != IBP_DTYPE_F32)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_coll_reduce_add_cuda: dtype %s (bf16, f16 or f32)",
				ibp_dtype_name(dt));
	if (!n)
		return IBP_OK;
	if (!d_part || !d_local || !d_dst)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_coll_reduce_add_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	unsigned grid = 1;
	IBP_TRY(ibp_cuda_grid((n + CRK_THREADS - 1) / CRK_THREADS, &grid));
	if (dt == IBP_DTYPE_F32)
		IBP_CUDA_LAUNCH("launch crk_add<f32>", crk_add<IBP_DTYPE_F32>, grid, CRK_THREADS, 0, st, d_part, d_local,
				n, d_dst);
	else if (dt == IBP_DTYPE_BF16)
		IBP_CUDA_LAUNCH("launch crk_add<bf16>", crk_add<IBP_DTYPE_BF16>, grid, CRK_THREADS, 0, st, d_part,
				d_local, n, d_dst);
	else
		IBP_CUDA_LAUNCH("launch crk_add<f16>", crk_add<IBP_DTYPE_F16>, grid, CRK_THREADS, 0, st, d_part,
				d_local, n, d_dst);
	return IBP_OK;
}
