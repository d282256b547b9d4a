/* exp_rows_impl.h - helpers shared by the row form's decoders (internal). */
#ifndef IBP_EXP_ROWS_IMPL_H
#define IBP_EXP_ROWS_IMPL_H

#include <stdint.h>
#include <string.h>

#include "exp/exp_rows_layout.h"

/* Element i's bits. */
static inline uint32_t exprows_ld(const void *p, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32) {
		uint32_t v;
		memcpy(&v, (const uint8_t *)p + 4 * i, 4);
		return v;
	}
	uint16_t h;
	memcpy(&h, (const uint8_t *)p + 2 * i, 2);
	return h;
}

static inline uint32_t exprows_field(ibp_dtype_t dt, uint32_t v)
{
	return dt == IBP_DTYPE_F32 ? v >> 23 & 0xff : dt == IBP_DTYPE_F16 ? v >> 10 & 0x1f : v >> 7 & 0xff;
}

/* Code-7 elements of the row at src (its 3P plane bytes are readable). */
static inline uint64_t exprows_nesc(const ibpi_exprows_t *x, const uint8_t *src)
{
	const uint64_t P = x->P;
	uint64_t n = 0, B = 0;
	for (; B + 8 <= P; B += 8) {
		uint64_t a, b, c;
		memcpy(&a, src + B, 8);
		memcpy(&b, src + P + B, 8);
		memcpy(&c, src + 2 * P + B, 8);
		n += (uint64_t)__builtin_popcountll(a & b & c);
	}
	for (; B < P; B++)
		n += (uint64_t)__builtin_popcount((unsigned)(src[B] & src[P + B] & src[2 * P + B]));
	return n;
}

/* 0 when the row at src (len bytes) is well formed: len is its length,
 * plane padding bits are clear, float16 escapes are fields; *esc then
 * points at its escapes. -1 otherwise (ibpi_exprows_why says why). */
static inline int exprows_check(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, const uint8_t **esc)
{
	if (len < x->fixed)
		return -1;
	const uint64_t P = x->P;
	const unsigned pad = (unsigned)(P * 8 - x->d);
	if (pad) {
		const unsigned nplanes = x->dt == IBP_DTYPE_F16 ? 6 : 3;
		unsigned any = 0;
		for (unsigned k = 0; k < nplanes; k++)
			any |= src[k * P + P - 1];
		if (any >> (8 - pad))
			return -1;
	}
	const uint64_t ne = exprows_nesc(x, src);
	if (len != x->fixed + ne)
		return -1;
	*esc = src + x->fixed;
	if (x->field_max < 255) {
		unsigned any = 0;
		for (uint64_t i = 0; i < ne; i++)
			any |= (*esc)[i];
		if (any > x->field_max)
			return -1;
	}
	return 0;
}

#endif /* IBP_EXP_ROWS_IMPL_H */
