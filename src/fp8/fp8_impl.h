/* fp8_impl.h - FP8 conversions and the per-block scalar steps of the TACO
 * codec, shared by the CPU reference (src/fp8/fp8.c) and the CUDA kernels
 * (kernels/fp8.cu). Every float operation goes through FP_ADD/FP_MUL/...,
 * which are __fadd_rn & co. on the device and plain operators on the host
 * (C11 mode: no FMA contraction), so both round identically.
 * docs/CODECS.md gives the rules in words. */
#ifndef IBP_FP8_IMPL_H
#define IBP_FP8_IMPL_H

#include <stdint.h>

#include "util/fpmath.h"
#include "fp8/hadamard.h"

#define FP8_E4M3 0u
#define FP8_E5M2 1u
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
#define FP8_QNAN_BITS 0x7fc00000u

/* v >> k rounded to nearest, ties to even; 0 when k >= 32. */
static inline IBP_HD uint32_t fp8i_rne_shift(uint32_t v, uint32_t k)
{
	if (k >= 32)
		return 0;
	uint32_t q = v >> k, rem = v & ((1u << k) - 1u), half = 1u << (k - 1);
	return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

/* float -> E4M3 as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3):
 * round to nearest even on the float bits; |x| past the max (and +-Inf)
 * saturates to +-448; any NaN gives 0x7F; float denormals give +-0. */
static inline IBP_HD uint8_t fp8_e4m3_from_f32(float x)
{
	uint32_t u = ibp_f32_bits(x), a = u & 0x7fffffffu, sgn = (u >> 24) & 0x80u;
	if (a > 0x7f800000u)
		return 0x7f;
	if (a > 0x43e80000u) /* 464 = 448 + half an ULP; 464 itself ties down to 448 */
		return (uint8_t)(sgn | 0x7eu);
	if (a < 0x3c800000u) { /* below 2^-6: subnormal result m * 2^-9 */
		uint32_t e = a >> 23;
		if (e == 0)
			return (uint8_t)sgn;
		uint32_t sig = (a & 0x7fffffu) | 0x800000u;
		return (uint8_t)(sgn | fp8i_rne_shift(sig, 141u - e));
	}
	uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
	return (uint8_t)(sgn | (r - 960u));
}

/* float -> E5M2, __NV_SATFINITE: as above with max 57344 (61440 ties up and
 * saturates), subnormals m * 2^-16. */
static inline IBP_HD uint8_t fp8_e5m2_from_f32(float x)
{
	uint32_t u = ibp_f32_bits(x), a = u & 0x7fffffffu, sgn = (u >> 24) & 0x80u;
	if (a > 0x7f800000u)
		return 0x7f;
	if (a >= 0x47700000u) /* 61440 */
		return (uint8_t)(sgn | 0x7bu);
	if (a < 0x38800000u) { /* below 2^-14 */
		uint32_t e = a >> 23;
		if (e == 0)
			return (uint8_t)sgn;
		uint32_t sig = (a & 0x7fffffu) | 0x800000u;
		return (uint8_t)(sgn | fp8i_rne_shift(sig, 134u - e));
	}
	uint32_t r = (a + 0xfffffu + ((a >> 21) & 1u)) >> 21;
	return (uint8_t)(sgn | (r - 448u));
}

static inline IBP_HD uint8_t fp8_from_f32(float x, uint32_t fmt)
{
	return fmt == FP8_E4M3 ? fp8_e4m3_from_f32(x) : fp8_e5m2_from_f32(x);
}

/* Exact FP8 -> float (every FP8 value is a float). NaN codes give the
 * quiet NaN with the code's sign; E5M2 Inf codes give +-Inf. */
static inline IBP_HD float fp8_to_f32(uint8_t c, uint32_t fmt)
{
	uint32_t sgn = (uint32_t)(c & 0x80u) << 24, bits;
	if (fmt == FP8_E4M3) {
		uint32_t e = (c >> 3) & 15u, m = c & 7u;
		if (e == 15 && m == 7)
			bits = 0x7fc00000u;
		else if (e == 0) {
			if (m == 0)
				bits = 0;
			else { /* m * 2^-9, normalised */
				uint32_t sh = m >= 4 ? 0u : (m >= 2 ? 1u : 2u);
				bits = ((127u - 7u - sh) << 23) | (((m << sh) & 3u) << 21);
			}
		} else
			bits = ((e + 120u) << 23) | (m << 20);
	} else {
		uint32_t e = (c >> 2) & 31u, m = c & 3u;
		if (e == 31)
			bits = m ? 0x7fc00000u : 0x7f800000u;
		else if (e == 0) {
			if (m == 0)
				bits = 0;
			else { /* m * 2^-16 */
				uint32_t sh = m >= 2 ? 0u : 1u;
				bits = ((127u - 15u - sh) << 23) | (((m << sh) & 1u) << 22);
			}
		} else
			bits = ((e + 112u) << 23) | (m << 21);
	}
	return ibp_f32_from_bits(sgn | bits);
}

/* ---- 16-bit float conversions (exact widening, RNE narrowing) ---- */

static inline IBP_HD float fp8i_bf16_to_f32(uint16_t h)
{
	return ibp_f32_from_bits((uint32_t)h << 16);
}

static inline IBP_HD float fp8i_f16_to_f32(uint16_t h)
{
	uint32_t sgn = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu, bits;
	if (e == 31)
		bits = 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
	else if (e == 0) {
		if (m == 0)
			bits = 0;
		else {
			uint32_t sh = 0;
			while (!(m & 0x400u)) {
				m <<= 1;
				sh++;
			}
			bits = ((113u - sh) << 23) | ((m & 0x3ffu) << 13);
		}
	} else
		bits = ((e + 112u) << 23) | (m << 13);
	return ibp_f32_from_bits(sgn | bits);
}

/* float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN. */
static inline IBP_HD uint16_t fp8i_f32_to_bf16(float f)
{
	uint32_t u = ibp_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* BF16 of v >= 0 rounded up (never below v): DynamiQ's super-group scales,
 * on the CPU (src/coll/dynamiq.c) and the GPU (kernels/dynamiq.cu). */
static inline IBP_HD uint16_t fp8i_bf16_up(float v)
{
	uint16_t b = fp8i_f32_to_bf16(v);
	if (fp8i_bf16_to_f32(b) < v)
		b++;
	return b;
}

/* float -> IEEE half, round to nearest even, overflow to Inf, NaN quiet. */
static inline IBP_HD uint16_t fp8i_f32_to_f16(float f)
{
	uint32_t u = ibp_f32_bits(f), a = u & 0x7fffffffu, sgn = (u >> 16) & 0x8000u;
	if (a > 0x7f800000u)
		return (uint16_t)(sgn | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520 rounds to Inf */
		return (uint16_t)(sgn | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: subnormal m * 2^-24 */
		uint32_t e = a >> 23;
		if (e == 0)
			return (uint16_t)sgn;
		uint32_t sig = (a & 0x7fffffu) | 0x800000u;
		return (uint16_t)(sgn | fp8i_rne_shift(sig, 126u - e));
	}
	uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
	return (uint16_t)(sgn | (r - ((127u - 15u) << 10)));
}

/* ---- TACO block steps ---- */

#define TACO_MAGIC 0x38504249u /* "IBP8" little-endian */
#define TACO_VERSION 2u   /* written; 1 (no checksum flag) still decodes */
#define TACO_VERSION_1 1u
#define TACO_HEADER_BYTES 64u
#define TACO_FLAG_HADAMARD 1u
#define TACO_FLAG_ADAPTIVE 2u
#define TACO_FLAG_CHECKSUM 4u /* version 2: header bytes 56..63 hold the checksum (util/checksum.h) */
#define TACO_OFF_SUM 56u

/* Version and flags of a stream header agree: the checksum flag only in
 * version 2. */
static inline IBP_HD int taco_header_flags_ok(const uint8_t *h)
{
	uint32_t allowed = TACO_FLAG_HADAMARD | TACO_FLAG_ADAPTIVE | (h[4] == TACO_VERSION ? TACO_FLAG_CHECKSUM : 0u);
	return (h[4] == TACO_VERSION || h[4] == TACO_VERSION_1) && !(h[6] & ~allowed);
}

/* Version, flags and reserved bytes 17..63 of a stream header agree: the
 * checksum flag only in version 2, and a sum only with it. */
static inline IBP_HD int taco_header_rest_ok(const uint8_t *h)
{
	if (!taco_header_flags_ok(h))
		return 0;
	for (uint32_t i = 17; i < TACO_HEADER_BYTES; i++)
		if (h[i] && (i < TACO_OFF_SUM || !(h[6] & TACO_FLAG_CHECKSUM)))
			return 0;
	return 1;
}
#define TACO_MIN_LOG2B 4u
#define TACO_MAX_LOG2B 12u
#define TACO_K_MAX 126
#define TACO_MAX_ELEMS (1ull << 56)

static inline IBP_HD float taco_qmax(uint32_t fmt)
{
	return fmt == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX;
}

/* The normalising factor 1/sqrt(B) of a B = 2^log2b block (fp8/hadamard.h). */
#define taco_inv_sqrt_b ibp_hadamard_norm

/* floor(log2 m) of a positive finite float (normal or denormal). */
static inline IBP_HD int fp8i_ilog2(float m)
{
	uint32_t a = ibp_f32_bits(m) & 0x7fffffffu, e = a >> 23;
	if (e)
		return (int)e - 127;
	int hb = 31;
	while (!((a >> hb) & 1u))
		hb--;
	return hb - 149;
}

/* First pre-scale of the adaptive step: x * 2^-e done as two exact-as-can-be
 * multiplies (2^-e may not be a float for denormal maxima). */
static inline IBP_HD void taco_prescale_factors(int e, float *f1, float *f2)
{
	int a = -e, a1 = a > 127 ? 127 : (a < -126 ? -126 : a);
	*f1 = ibp_pow2f(a1);
	*f2 = ibp_pow2f(a - a1);
}

/* Adaptive exponent k (alpha = 2^k): the power of two nearest (in log
 * terms) to tau / RMS. e = floor(log2 max|x|), ss = sum of (x * 2^-e)^2
 * over the block by the fixed tree, len = real elements. Clamped to
 * [-126, 126] so alpha and 1/alpha are normal floats. */
static inline IBP_HD int taco_alpha_exp(int e, float ss, uint32_t len, float tau)
{
	float ms = FP_DIV(ss, (float)len);
	float r = FP_DIV(tau, FP_SQRT(ms));
	uint32_t rb = ibp_f32_bits(r);
	int kr = (int)((rb >> 23) & 255u) - 127 + ((rb & 0x7fffffu) >= 0x3504f3u ? 1 : 0); /* mantissa >= sqrt(2) */
	int k = kr - e;
	if (k > TACO_K_MAX)
		k = TACO_K_MAX;
	if (k < -TACO_K_MAX)
		k = -TACO_K_MAX;
	return k;
}

/* Quantisation scale s = max|Z| / Qmax; 0 for an all-zero block; the
 * smallest denormal if the division underflows (only without the adaptive
 * step), so Z / s never divides by zero. */
static inline IBP_HD float taco_scale(float mz, uint32_t fmt)
{
	if (mz == 0.0f)
		return 0.0f;
	float s = FP_DIV(mz, taco_qmax(fmt));
	if (s == 0.0f)
		s = ibp_f32_from_bits(1u);
	return s;
}

#endif /* IBP_FP8_IMPL_H */
