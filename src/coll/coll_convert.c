/* coll_convert.c - the collectives' dtype conversions: BF16/FP16 widened
 * to float32 (exact) and float32 rounded back, one loop per type so the
 * compiler vectorizes them. No communicator, no wire format: the
 * quantizers (dynamiq.c) and the algorithms use them alike. */
#include <string.h>

#include "coll/coll_convert.h"
#include "fp8/fp8_impl.h"

void ibpi_coll_widen(const void *src, ibp_dtype_t dt, uint64_t n, float *dst)
{
	if (dt == IBP_DTYPE_F32) {
		if (n)
			memcpy(dst, src, n * 4);
		return;
	}
	const uint16_t *s = src;
	if (dt == IBP_DTYPE_BF16) /* one loop per type, so the compiler vectorizes them */
		for (uint64_t i = 0; i < n; i++)
			dst[i] = fp8i_bf16_to_f32(s[i]);
	else
		for (uint64_t i = 0; i < n; i++)
			dst[i] = fp8i_f16_to_f32(s[i]);
}

void ibpi_coll_narrow(const float *src, ibp_dtype_t dt, uint64_t n, void *dst)
{
	if (dt == IBP_DTYPE_F32) {
		if (n)
			memcpy(dst, src, n * 4);
		return;
	}
	uint16_t *d = dst;
	if (dt == IBP_DTYPE_BF16) /* one loop per type, as in ibpi_coll_widen */
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_bf16(src[i]);
	else
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_f16(src[i]);
}
