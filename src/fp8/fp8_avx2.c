/* fp8_avx2.c - AVX2 kernels of the TACO block codec (fp8_simd.h): eight
 * floats per vector, bit-identical to the scalar steps of fp8.c. */
#include <immintrin.h>
#include <string.h>

#include "ibp/types.h"
#include "fp8/fp8_impl.h"
#include "fp8/fp8_simd.h"

#define I32(c) _mm256_set1_epi32((int)(c))

/* ---- widening and narrowing, per lane as fp8_impl.h ---- */

/* F16C's vcvtph2ps widens halves (fp8_avx512.c says why that is exact
 * here); the dispatch runs these kernels only where the CPU has F16C. */
#define F16C __attribute__((target("f16c")))

static inline F16C __m256 load8(const uint8_t *p, uint32_t dt)
{
	if (dt == IBP_DTYPE_F32)
		return _mm256_loadu_ps((const float *)p);
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	if (dt == IBP_DTYPE_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	return _mm256_cvtph_ps(h);
}

/* The subnormal code of |f| below the target's normal range: |f| * 2^sh
 * is exact (f normal) and below the smallest normal's step count, so
 * rounding it to an integer, to nearest even whatever MXCSR says, is the
 * scalar rne shift; a float denormal gives 0 (as with DAZ/FTZ). */
static inline __m256i sub_code(__m256i a, float pow2sh)
{
	__m256 v = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(pow2sh));
	return _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* a > c for a, c in [0, 2^31) */
static inline __m256i gt(__m256i a, uint32_t c)
{
	return _mm256_cmpgt_epi32(a, I32(c));
}

/* float -> bf16 in the low half of each lane (fp8i_f32_to_bf16). */
static inline __m256i to_bf16(__m256 f)
{
	__m256i u = _mm256_castps_si256(f), a = _mm256_and_si256(u, I32(0x7fffffff));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, I32(0x7fff)), _mm256_and_si256(_mm256_srli_epi32(u, 16), I32(1)));
	r = _mm256_srli_epi32(r, 16);
	__m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), I32(0x40));
	return _mm256_blendv_epi8(r, nan, gt(a, 0x7f800000u));
}

/* float -> FP8 code in the low byte of each lane (fp8_e4m3_from_f32 /
 * fp8_e5m2_from_f32). */
static inline __m256i to_fp8(__m256 f, uint32_t fmt)
{
	__m256i u = _mm256_castps_si256(f), a = _mm256_and_si256(u, I32(0x7fffffff));
	__m256i sgn = _mm256_and_si256(_mm256_srli_epi32(u, 24), I32(0x80));
	__m256i r;
	if (fmt == FP8_E4M3) {
		__m256i nor = _mm256_add_epi32(_mm256_add_epi32(a, I32(0x7ffff)), _mm256_and_si256(_mm256_srli_epi32(a, 20), I32(1)));
		nor = _mm256_sub_epi32(_mm256_srli_epi32(nor, 20), I32(960));
		r = _mm256_blendv_epi8(nor, sub_code(a, 0x1p9f), _mm256_cmpgt_epi32(I32(0x3c800000), a));
		r = _mm256_blendv_epi8(r, I32(0x7e), gt(a, 0x43e80000u));
	} else {
		__m256i nor = _mm256_add_epi32(_mm256_add_epi32(a, I32(0xfffff)), _mm256_and_si256(_mm256_srli_epi32(a, 21), I32(1)));
		nor = _mm256_sub_epi32(_mm256_srli_epi32(nor, 21), I32(448));
		r = _mm256_blendv_epi8(nor, sub_code(a, 0x1p16f), _mm256_cmpgt_epi32(I32(0x38800000), a));
		r = _mm256_blendv_epi8(r, I32(0x7b), gt(a, 0x476fffffu));
	}
	r = _mm256_or_si256(r, sgn);
	return _mm256_blendv_epi8(r, I32(0x7f), gt(a, 0x7f800000u));
}

/* Low bytes of the eight lanes, in order. */
static inline void store_bytes8(uint8_t *q, __m256i r)
{
	const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
					      -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	r = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(r, pick), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
	_mm_storel_epi64((__m128i *)q, _mm256_castsi256_si128(r));
}

/* Low halves of the eight lanes, in order. */
static inline void store_halves8(uint8_t *d, __m256i r)
{
	r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
	_mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(r));
}

/* FP8 codes (finite) -> float, exact: normal codes by moving the bits,
 * subnormal ones as m * 2^-9 (E4M3) or m * 2^-16 (E5M2). */
static inline __m256 from_fp8(const uint8_t *q, uint32_t fmt)
{
	__m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
	__m256i a = _mm256_and_si256(c, I32(0x7f)), sgn = _mm256_slli_epi32(_mm256_and_si256(c, I32(0x80)), 24);
	__m256i nor, sub, e0;
	if (fmt == FP8_E4M3) {
		nor = _mm256_add_epi32(_mm256_slli_epi32(a, 20), I32(120u << 23));
		sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(a, I32(7))), _mm256_set1_ps(0x1p-9f)));
		e0 = _mm256_cmpgt_epi32(I32(8), a);
	} else {
		nor = _mm256_add_epi32(_mm256_slli_epi32(a, 21), I32(112u << 23));
		sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(a, I32(3))), _mm256_set1_ps(0x1p-16f)));
		e0 = _mm256_cmpgt_epi32(I32(4), a);
	}
	return _mm256_castsi256_ps(_mm256_or_si256(_mm256_blendv_epi8(nor, sub, e0), sgn));
}

/* ---- Walsh-Hadamard butterflies, stage by stage as hadamard.c ---- */

/* One stage inside the vector: lanes j (bit h clear) get x[j] + x[j + h],
 * lanes j + h get x[j] - x[j + h]; p holds the partner lanes. */
#define STAGE_IN(v, p, mask) _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), mask)

static inline __m256 fwht8(__m256 v)
{
	v = STAGE_IN(v, _mm256_permute_ps(v, 0xb1), 0xaa);
	v = STAGE_IN(v, _mm256_permute_ps(v, 0x4e), 0xcc);
	v = STAGE_IN(v, _mm256_permute2f128_ps(v, v, 0x01), 0xf0);
	return v;
}

#define BFLY(r, i, j)                                  \
	do {                                           \
		__m256 a_ = r[i], b_ = r[j];           \
		r[i] = _mm256_add_ps(a_, b_);          \
		r[j] = _mm256_sub_ps(a_, b_);          \
	} while (0)

/* Stages across n vectors r[0, n) (n = 1, 2, 4 or 8), strides 1, 2, 4 vectors. */
static inline __attribute__((always_inline)) void fwht_regs(__m256 *r, uint32_t n)
{
	if (n >= 2)
#pragma GCC unroll 8
		for (uint32_t i = 0; i < n; i += 2)
			BFLY(r, i, i + 1);
	if (n >= 4)
#pragma GCC unroll 8
		for (uint32_t i = 0; i < n; i += 4) {
			BFLY(r, i, i + 2);
			BFLY(r, i + 1, i + 3);
		}
	if (n >= 8) {
		BFLY(r, 0, 4);
		BFLY(r, 1, 5);
		BFLY(r, 2, 6);
		BFLY(r, 3, 7);
	}
}

/* Stages h = 64 .. B/2 of x[0, B), up to three per pass over the block. */
/* max(|v|, m) as the scalar loop's a > m ? a : m: a NaN never enters */
static inline __m256 max_abs(__m256 v, __m256 m)
{
	return _mm256_max_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), I32(0x7fffffff))), m);
}

/* Stages lh .. lh + log2 R - 1 of x[0, B) in one pass over the block (R
 * a constant after inlining); the last pass (fin) also multiplies by post
 * and takes the maximum magnitude, saving the encoder a pass. */
static inline __attribute__((always_inline)) void fwht_pass(float *x, uint32_t B, uint32_t lh, uint32_t R, int fin,
							    __m256 post, __m256 *mz)
{
	uint32_t h = 1u << lh;
	for (uint32_t base = 0; base < B; base += h * R)
		for (uint32_t j = base; j < base + h; j += 8) {
			__m256 r[8];
#pragma GCC unroll 8
			for (uint32_t t = 0; t < R; t++)
				r[t] = _mm256_load_ps(x + j + t * h);
			fwht_regs(r, R);
#pragma GCC unroll 8
			for (uint32_t t = 0; t < R; t++) {
				if (fin) {
					r[t] = _mm256_mul_ps(r[t], post);
					*mz = max_abs(r[t], *mz);
				}
				_mm256_store_ps(x + j + t * h, r[t]);
			}
		}
}

/* Stages h = 64 .. B/2 of x[0, B), up to three per pass over the block. */
static inline __attribute__((always_inline)) void fwht_rest(float *x, uint32_t log2b, int fin, __m256 post, __m256 *mz)
{
	uint32_t B = 1u << log2b;
	for (uint32_t lh = 6; lh < log2b;) {
		uint32_t st = log2b - lh < 3 ? log2b - lh : 3;
		int f = fin && lh + st == log2b;
		if (st == 3)
			fwht_pass(x, B, lh, 8, f, post, mz);
		else if (st == 2)
			fwht_pass(x, B, lh, 4, f, post, mz);
		else
			fwht_pass(x, B, lh, 2, f, post, mz);
		lh += st;
	}
}

/* The first stages (h < 64) in registers, nv vectors at a time (nv a
 * constant after inlining): encode multiplies by alpha first, decode
 * starts from the codes times s. */
static inline __attribute__((always_inline)) void enc_chunks(float *x, uint32_t B, uint32_t nv, int scale_x, __m256 alpha,
							     int fin, __m256 post, __m256 *mz)
{
	for (uint32_t c = 0; c < B; c += nv * 8) {
		__m256 r[8];
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++) {
			r[v] = _mm256_load_ps(x + c + 8 * v);
			if (scale_x)
				r[v] = _mm256_mul_ps(r[v], alpha);
			r[v] = fwht8(r[v]);
		}
		fwht_regs(r, nv);
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++) {
			if (fin) {
				r[v] = _mm256_mul_ps(r[v], post);
				*mz = max_abs(r[v], *mz);
			}
			_mm256_store_ps(x + c + 8 * v, r[v]);
		}
	}
}

static inline __attribute__((always_inline)) void dec_chunks(const uint8_t *q, float *z, uint32_t B, uint32_t nv,
							     uint32_t fmt, __m256 sv)
{
	for (uint32_t c = 0; c < B; c += nv * 8) {
		__m256 r[8];
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++)
			r[v] = fwht8(_mm256_mul_ps(from_fp8(q + c + 8 * v, fmt), sv));
		fwht_regs(r, nv);
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++)
			_mm256_store_ps(z + c + 8 * v, r[v]);
	}
}

/* ---- block kernels ---- */

/* max over lanes of non-negative, non-NaN floats */
static inline float hmax8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* x = the full block src widened; returns the lanes' max |x| bits. */
static inline F16C __attribute__((always_inline)) __m256i widen_full(const uint8_t *src, uint32_t B, uint32_t dt,
								      float *x)
{
	const uint32_t esz = dt == IBP_DTYPE_F32 ? 4u : 2u;
	__m256i mx = _mm256_setzero_si256();
	for (uint32_t i = 0; i < B; i += 8) {
		__m256 v = load8(src + (uint64_t)i * esz, dt);
		_mm256_store_ps(x + i, v);
		mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_castps_si256(v), I32(0x7fffffff)));
	}
	return mx;
}

/* q = fp8(x / s) for a block, fmt a constant after inlining (fp8_avx512.c). */
static inline __attribute__((always_inline)) void quantise(const float *x, uint32_t B, float s, uint32_t fmt,
							   uint8_t *q)
{
	const __m256 sv = _mm256_set1_ps(s);
	for (uint32_t i = 0; i < B; i += 8)
		store_bytes8(q + i, to_fp8(_mm256_div_ps(_mm256_load_ps(x + i), sv), fmt));
}

static F16C int enc_avx2(const fp8_blk_t *p, const uint8_t *src, uint32_t len, float *x, float *t, uint8_t *q, float *s_out,
		    int *k_out)
{
	const uint32_t B = 1u << p->log2b, esz = p->dt == IBP_DTYPE_F32 ? 4u : 2u;
	/* widen, and max |x| on the bits: order-free, and >= 0x7f800000 iff some x is not finite */
	__m256i mx = _mm256_setzero_si256();
	uint32_t i = 0;
	if (len == B) { /* a full block: the dtype a constant in the loop */
		mx = p->dt == IBP_DTYPE_BF16 ? widen_full(src, B, IBP_DTYPE_BF16, x)
		     : p->dt == IBP_DTYPE_F16 ? widen_full(src, B, IBP_DTYPE_F16, x)
					      : widen_full(src, B, IBP_DTYPE_F32, x);
		i = B;
	}
	for (; i + 8 <= len; i += 8) {
		__m256 v = load8(src + (uint64_t)i * esz, p->dt);
		_mm256_store_ps(x + i, v);
		mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_castps_si256(v), I32(0x7fffffff)));
	}
	if (i < len) {
		uint8_t tail[8 * 4] = {0};
		memcpy(tail, src + (uint64_t)i * esz, (uint64_t)(len - i) * esz);
		__m256 v = load8(tail, p->dt);
		_mm256_store_ps(x + i, v);
		mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_castps_si256(v), I32(0x7fffffff)));
		i += 8;
	}
	for (; i < B; i += 8)
		_mm256_store_ps(x + i, _mm256_setzero_ps());
	__m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
	m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
	m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
	uint32_t mbits = (uint32_t)_mm_cvtsi128_si32(m4);
	if (mbits >= 0x7f800000u)
		return 0;
	int k = 0, scale_x = 0;
	__m256 alpha = _mm256_set1_ps(1.0f);
	if ((p->flags & TACO_FLAG_ADAPTIVE) && mbits) {
		float f1, f2;
		int e = fp8i_ilog2(ibp_f32_from_bits(mbits));
		taco_prescale_factors(e, &f1, &f2);
		const __m256 v1 = _mm256_set1_ps(f1), v2 = _mm256_set1_ps(f2);
		uint32_t h = B / 2;
		for (i = 0; i < h; i += 8) { /* the tree's first level, t[i] = y[i]^2 + y[i + h]^2 */
			__m256 ya = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(x + i), v1), v2);
			__m256 yb = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(x + i + h), v1), v2);
			_mm256_store_ps(t + i, _mm256_add_ps(_mm256_mul_ps(ya, ya), _mm256_mul_ps(yb, yb)));
		}
		for (h >>= 1; h >= 8; h >>= 1)
			for (i = 0; i < h; i += 8)
				_mm256_store_ps(t + i, _mm256_add_ps(_mm256_load_ps(t + i), _mm256_load_ps(t + i + h)));
		__m256 v = _mm256_load_ps(t); /* h = 4, 2, 1 in lanes 0.. */
		v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x01));
		v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4e));
		v = _mm256_add_ps(v, _mm256_permute_ps(v, 0xb1));
		k = taco_alpha_exp(e, _mm256_cvtss_f32(v), len, taco_qmax(p->fmt));
		alpha = _mm256_set1_ps(ibp_pow2f(k));
		scale_x = 1;
	}
	/* the multiply after the rotation: alpha without it, 1/sqrt(B) with it */
	__m256 post = alpha, mz = _mm256_setzero_ps();
	if (p->flags & TACO_FLAG_HADAMARD) {
		uint32_t nv = B >= 64 ? 8u : B / 8u;
		post = _mm256_set1_ps(ibp_hadamard_norm(p->log2b));
		if (nv == 8 && B > nv * 8) {
			enc_chunks(x, B, 8, scale_x, alpha, 0, post, &mz);
			fwht_rest(x, p->log2b, 1, post, &mz);
		} else if (nv == 8)
			enc_chunks(x, B, 8, scale_x, alpha, 1, post, &mz);
		else if (nv == 4)
			enc_chunks(x, B, 4, scale_x, alpha, 1, post, &mz);
		else if (nv == 2)
			enc_chunks(x, B, 2, scale_x, alpha, 1, post, &mz);
		else
			enc_chunks(x, B, 1, scale_x, alpha, 1, post, &mz);
	}
	for (i = 0; i < B && !(p->flags & TACO_FLAG_HADAMARD); i += 8) {
		__m256 v = _mm256_load_ps(x + i);
		if (scale_x) {
			v = _mm256_mul_ps(v, post);
			_mm256_store_ps(x + i, v);
		}
		mz = max_abs(v, mz); /* a > mz ? a : mz, as the scalar loop: NaN never enters */
	}
	float m = hmax8(mz);
	if (!(ibp_f32_bits(m) < 0x7f800000u))
		return 0;
	float s = taco_scale(m, p->fmt);
	if (s == 0.0f)
		memset(q, 0, B);
	else if (p->fmt == FP8_E4M3)
		quantise(x, B, s, FP8_E4M3, q);
	else
		quantise(x, B, s, FP8_E5M2, q);
	*s_out = s;
	*k_out = k;
	return 1;
}

/* Narrows (or copies) eight floats to dst. */
/* Halves by vcvtps2ph, rounding to nearest even by its immediate: MXCSR's
 * FTZ does not apply to it, and DAZ only turns float denormals (far below
 * the smallest half) into the zero they round to anyway. */
static inline F16C void store8(uint8_t *dst, uint32_t dt, __m256 v)
{
	if (dt == IBP_DTYPE_F32)
		_mm256_storeu_ps((float *)dst, v);
	else if (dt == IBP_DTYPE_F16)
		_mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
	else
		store_halves8(dst, to_bf16(v));
}

/* The last step of a full Hadamard block: dst = z * inv * ia, the dtype a
 * constant after inlining (dst may alias anything: p was read again every
 * vector). */
static inline F16C __attribute__((always_inline)) void out_full(const float *z, uint32_t B, __m256 inv, __m256 ia,
								 uint32_t dt, uint8_t *dst)
{
	const uint32_t esz = dt == IBP_DTYPE_F32 ? 4u : 2u;
	for (uint32_t i = 0; i < B; i += 8)
		store8(dst + (uint64_t)i * esz, dt, _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(z + i), inv), ia));
}

static F16C void dec_avx2(const fp8_blk_t *p, const uint8_t *q, float s, int k, uint32_t len, uint8_t *dst, float *z)
{
	const uint32_t B = 1u << p->log2b, esz = p->dt == IBP_DTYPE_F32 ? 4u : 2u;
	const __m256 sv = _mm256_set1_ps(s), ia = _mm256_set1_ps(ibp_pow2f(-k));
	int had = (p->flags & TACO_FLAG_HADAMARD) != 0;
	if (had) {
		uint32_t nv = B >= 64 ? 8u : B / 8u;
		if (nv == 8)
			dec_chunks(q, z, B, 8, p->fmt, sv);
		else if (nv == 4)
			dec_chunks(q, z, B, 4, p->fmt, sv);
		else if (nv == 2)
			dec_chunks(q, z, B, 2, p->fmt, sv);
		else
			dec_chunks(q, z, B, 1, p->fmt, sv);
		fwht_rest(z, p->log2b, 0, sv, NULL);
	}
	const __m256 inv = _mm256_set1_ps(ibp_hadamard_norm(p->log2b));
	if (had && len == B) {
		if (p->dt == IBP_DTYPE_BF16)
			out_full(z, B, inv, ia, IBP_DTYPE_BF16, dst);
		else if (p->dt == IBP_DTYPE_F16)
			out_full(z, B, inv, ia, IBP_DTYPE_F16, dst);
		else
			out_full(z, B, inv, ia, IBP_DTYPE_F32, dst);
		return;
	}
	uint32_t i = 0;
	for (; i < len; i += 8) {
		__m256 v = had ? _mm256_mul_ps(_mm256_load_ps(z + i), inv) : _mm256_mul_ps(from_fp8(q + i, p->fmt), sv);
		v = _mm256_mul_ps(v, ia);
		if (i + 8 <= len) {
			store8(dst + (uint64_t)i * esz, p->dt, v);
		} else {
			uint8_t tail[8 * 4];
			store8(tail, p->dt, v);
			memcpy(dst + (uint64_t)i * esz, tail, (uint64_t)(len - i) * esz);
		}
	}
}

static int codes_finite_avx2(const uint8_t *q, uint32_t n, uint32_t fmt)
{
	/* E4M3: |c| == 0x7f; E5M2: |c| >= 0x7c; as signed bytes after the sign is dropped */
	const __m256i lo = _mm256_set1_epi8(0x7f), lim = _mm256_set1_epi8(fmt == FP8_E4M3 ? 0x7e : 0x7b);
	__m256i bad = _mm256_setzero_si256();
	uint32_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i c = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(q + i)), lo);
		bad = _mm256_or_si256(bad, _mm256_cmpgt_epi8(c, lim));
	}
	for (; i < n; i++) {
		uint32_t a = q[i] & 0x7fu;
		if (fmt == FP8_E4M3 ? a == 0x7fu : a >= 0x7cu)
			return 0;
	}
	return _mm256_testz_si256(bad, bad);
}

const fp8_kern_t ibpi_fp8_kern_avx2 = {enc_avx2, dec_avx2, codes_finite_avx2};
