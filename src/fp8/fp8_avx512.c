/* fp8_avx512.c - AVX-512 kernels of the TACO block codec (fp8_simd.h):
 * sixteen floats per vector, masked tails, bit-identical to the scalar
 * steps of fp8.c (fp8_avx2.c is the same algorithm at eight lanes). */
#include <immintrin.h>
#include <string.h>

#include "ibp/types.h"
#include "fp8/fp8_impl.h"
#include "fp8/fp8_simd.h"

#define I32(c) _mm512_set1_epi32((int)(c))

static inline __mmask16 tail_mask(uint32_t n)
{
	return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* ---- widening and narrowing, per lane as fp8_impl.h ---- */

/* The first n (<= 16) elements, zeros after. */
static inline __m512 load16(const uint8_t *p, uint32_t dt, __mmask16 mk)
{
	if (dt == IBP_DTYPE_F32)
		return _mm512_maskz_loadu_ps(mk, p);
	__m256i h = _mm256_maskz_loadu_epi16(mk, p);
	if (dt == IBP_DTYPE_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	/* vcvtph2ps: exact for every finite half, subnormals included, whatever
	 * MXCSR says (DAZ is for float inputs); Inf and NaN stay >= 0x7f800000,
	 * all the encoder looks at before it gives such a block up */
	return _mm512_cvtph_ps(h);
}

/* The subnormal code of |f| below the target's normal range: |f| * 2^sh
 * is exact (f normal) and below the smallest normal's step count, so
 * rounding it to an integer, to nearest even whatever MXCSR says, is the
 * scalar rne shift; a float denormal gives 0 (as with DAZ/FTZ). */
static inline __m512i sub_code(__m512i a, float pow2sh)
{
	__m512 v = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(pow2sh));
	return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline __mmask16 gt(__m512i a, uint32_t c)
{
	return _mm512_cmpgt_epi32_mask(a, I32(c));
}

static inline __mmask16 lt(__m512i a, uint32_t c)
{
	return _mm512_cmplt_epi32_mask(a, I32(c));
}

static inline __m512i to_bf16(__m512 f)
{
	__m512i u = _mm512_castps_si512(f), a = _mm512_and_si512(u, I32(0x7fffffff));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, I32(0x7fff)), _mm512_and_si512(_mm512_srli_epi32(u, 16), I32(1)));
	r = _mm512_srli_epi32(r, 16);
	__m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), I32(0x40));
	return _mm512_mask_blend_epi32(gt(a, 0x7f800000u), r, nan);
}

static inline __m512i to_fp8(__m512 f, uint32_t fmt)
{
	__m512i u = _mm512_castps_si512(f), a = _mm512_and_si512(u, I32(0x7fffffff));
	__m512i sgn = _mm512_and_si512(_mm512_srli_epi32(u, 24), I32(0x80));
	__m512i r;
	if (fmt == FP8_E4M3) {
		__m512i nor = _mm512_add_epi32(_mm512_add_epi32(a, I32(0x7ffff)), _mm512_and_si512(_mm512_srli_epi32(a, 20), I32(1)));
		nor = _mm512_sub_epi32(_mm512_srli_epi32(nor, 20), I32(960));
		r = _mm512_mask_blend_epi32(lt(a, 0x3c800000u), nor, sub_code(a, 0x1p9f));
		r = _mm512_mask_blend_epi32(gt(a, 0x43e80000u), r, I32(0x7e));
	} else {
		__m512i nor = _mm512_add_epi32(_mm512_add_epi32(a, I32(0xfffff)), _mm512_and_si512(_mm512_srli_epi32(a, 21), I32(1)));
		nor = _mm512_sub_epi32(_mm512_srli_epi32(nor, 21), I32(448));
		r = _mm512_mask_blend_epi32(lt(a, 0x38800000u), nor, sub_code(a, 0x1p16f));
		r = _mm512_mask_blend_epi32(gt(a, 0x476fffffu), r, I32(0x7b));
	}
	r = _mm512_or_si512(r, sgn);
	return _mm512_mask_blend_epi32(gt(a, 0x7f800000u), r, I32(0x7f));
}

/* FP8 codes (finite) -> float, exact (see fp8_avx2.c). */
static inline __m512 from_fp8(const uint8_t *q, uint32_t fmt)
{
	__m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
	__m512i a = _mm512_and_si512(c, I32(0x7f)), sgn = _mm512_slli_epi32(_mm512_and_si512(c, I32(0x80)), 24);
	__m512i r;
	if (fmt == FP8_E4M3) {
		__m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(a, I32(7))), _mm512_set1_ps(0x1p-9f)));
		r = _mm512_mask_blend_epi32(lt(a, 8), _mm512_add_epi32(_mm512_slli_epi32(a, 20), I32(120u << 23)), sub);
	} else {
		__m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(a, I32(3))), _mm512_set1_ps(0x1p-16f)));
		r = _mm512_mask_blend_epi32(lt(a, 4), _mm512_add_epi32(_mm512_slli_epi32(a, 21), I32(112u << 23)), sub);
	}
	return _mm512_castsi512_ps(_mm512_or_si512(r, sgn));
}

/* ---- Walsh-Hadamard butterflies, stage by stage as hadamard.c ---- */

/* Lanes j get x[j] + x[j + h], lanes j + h (in mask) x[j] - x[j + h]; p holds the partners. */
#define STAGE_IN(v, p, mask) _mm512_mask_sub_ps(_mm512_add_ps(v, p), mask, p, v)

static inline __m512 fwht16(__m512 v)
{
	v = STAGE_IN(v, _mm512_permute_ps(v, 0xb1), 0xaaaa);
	v = STAGE_IN(v, _mm512_permute_ps(v, 0x4e), 0xcccc);
	v = STAGE_IN(v, _mm512_shuffle_f32x4(v, v, 0xb1), 0xf0f0);
	v = STAGE_IN(v, _mm512_shuffle_f32x4(v, v, 0x4e), 0xff00);
	return v;
}

#define BFLY(r, i, j)                                  \
	do {                                           \
		__m512 a_ = r[i], b_ = r[j];           \
		r[i] = _mm512_add_ps(a_, b_);          \
		r[j] = _mm512_sub_ps(a_, b_);          \
	} while (0)

static inline __attribute__((always_inline)) void fwht_regs(__m512 *r, uint32_t n)
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

/* Stages h = 128 .. B/2 of x[0, B), up to three per pass. */
/* max(|v|, m) as the scalar loop's a > m ? a : m: a NaN never enters */
static inline __m512 max_abs(__m512 v, __m512 m)
{
	return _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), I32(0x7fffffff))), m);
}

/* Stages lh .. lh + log2 R - 1 of x[0, B) in one pass over the block (R
 * a constant after inlining); the last pass (fin) also multiplies by post
 * and takes the maximum magnitude, saving the encoder a pass. */
static inline __attribute__((always_inline)) void fwht_pass(float *x, uint32_t B, uint32_t lh, uint32_t R, int fin,
							    __m512 post, __m512 *mz)
{
	uint32_t h = 1u << lh;
	for (uint32_t base = 0; base < B; base += h * R)
		for (uint32_t j = base; j < base + h; j += 16) {
			__m512 r[8];
#pragma GCC unroll 8
			for (uint32_t t = 0; t < R; t++)
				r[t] = _mm512_load_ps(x + j + t * h);
			fwht_regs(r, R);
#pragma GCC unroll 8
			for (uint32_t t = 0; t < R; t++) {
				if (fin) {
					r[t] = _mm512_mul_ps(r[t], post);
					*mz = max_abs(r[t], *mz);
				}
				_mm512_store_ps(x + j + t * h, r[t]);
			}
		}
}

/* Stages h = 128 .. B/2 of x[0, B), up to three per pass over the block. */
static inline __attribute__((always_inline)) void fwht_rest(float *x, uint32_t log2b, int fin, __m512 post, __m512 *mz)
{
	uint32_t B = 1u << log2b;
	for (uint32_t lh = 7; lh < log2b;) {
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

/* The first stages (h < 128) in registers, nv vectors at a time (nv a
 * constant after inlining): encode multiplies by alpha first, decode
 * starts from the codes times s. */
static inline __attribute__((always_inline)) void enc_chunks(float *x, uint32_t B, uint32_t nv, int scale_x, __m512 alpha,
							     int fin, __m512 post, __m512 *mz)
{
	for (uint32_t c = 0; c < B; c += nv * 16) {
		__m512 r[8];
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++) {
			r[v] = _mm512_load_ps(x + c + 16 * v);
			if (scale_x)
				r[v] = _mm512_mul_ps(r[v], alpha);
			r[v] = fwht16(r[v]);
		}
		fwht_regs(r, nv);
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++) {
			if (fin) {
				r[v] = _mm512_mul_ps(r[v], post);
				*mz = max_abs(r[v], *mz);
			}
			_mm512_store_ps(x + c + 16 * v, r[v]);
		}
	}
}

static inline __attribute__((always_inline)) void dec_chunks(const uint8_t *q, float *z, uint32_t B, uint32_t nv,
							     uint32_t fmt, __m512 sv)
{
	for (uint32_t c = 0; c < B; c += nv * 16) {
		__m512 r[8];
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++)
			r[v] = fwht16(_mm512_mul_ps(from_fp8(q + c + 16 * v, fmt), sv));
		fwht_regs(r, nv);
#pragma GCC unroll 8
		for (uint32_t v = 0; v < nv; v++)
			_mm512_store_ps(z + c + 16 * v, r[v]);
	}
}

/* ---- block kernels ---- */

/* Sum-of-squares tree steps h = 8, 4, 2, 1 inside one vector; lane 0 is the root. */
static inline float tree16(__m512 v)
{
	v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
	v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
	v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
	v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
	return _mm512_cvtss_f32(v);
}

/* x = the full block src widened; returns the lanes' max |x| bits. */
static inline __attribute__((always_inline)) __m512i widen_full(const uint8_t *src, uint32_t B, uint32_t dt, float *x)
{
	const uint32_t esz = dt == IBP_DTYPE_F32 ? 4u : 2u;
	__m512i mx = _mm512_setzero_si512();
	for (uint32_t i = 0; i < B; i += 16) {
		__m512 v = load16(src + (uint64_t)i * esz, dt, (__mmask16)0xffff);
		_mm512_store_ps(x + i, v);
		mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(v), I32(0x7fffffff)));
	}
	return mx;
}

/* q = fp8(x / s) for a block; fmt a constant after inlining, so the loop
 * keeps its constants in registers (q may alias anything: a format read
 * through p was loaded and tested again every vector). */
static inline __attribute__((always_inline)) void quantise(const float *x, uint32_t B, float s, uint32_t fmt,
							   uint8_t *q)
{
	const __m512 sv = _mm512_set1_ps(s);
	for (uint32_t i = 0; i < B; i += 16)
		_mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(to_fp8(_mm512_div_ps(_mm512_load_ps(x + i), sv), fmt)));
}

static int enc_avx512(const fp8_blk_t *p, const uint8_t *src, uint32_t len, float *x, float *t, uint8_t *q,
		      float *s_out, int *k_out)
{
	const uint32_t B = 1u << p->log2b, esz = p->dt == IBP_DTYPE_F32 ? 4u : 2u;
	__m512i mx;
	uint32_t i = 0;
	if (len == B) /* a full block: the dtype a constant in the loop */
		mx = p->dt == IBP_DTYPE_BF16 ? widen_full(src, B, IBP_DTYPE_BF16, x)
		     : p->dt == IBP_DTYPE_F16 ? widen_full(src, B, IBP_DTYPE_F16, x)
					      : widen_full(src, B, IBP_DTYPE_F32, x);
	else
		for (mx = _mm512_setzero_si512(); i < B; i += 16) {
			__m512 v = i < len ? load16(src + (uint64_t)i * esz, p->dt, tail_mask(len - i)) : _mm512_setzero_ps();
			_mm512_store_ps(x + i, v);
			mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(v), I32(0x7fffffff)));
		}
	uint32_t mbits = _mm512_reduce_max_epu32(mx); /* >= 0x7f800000 iff some x is not finite */
	if (mbits >= 0x7f800000u)
		return 0;
	int k = 0, scale_x = 0;
	__m512 alpha = _mm512_set1_ps(1.0f);
	if ((p->flags & TACO_FLAG_ADAPTIVE) && mbits) {
		float f1, f2, ss;
		int e = fp8i_ilog2(ibp_f32_from_bits(mbits));
		taco_prescale_factors(e, &f1, &f2);
		const __m512 v1 = _mm512_set1_ps(f1), v2 = _mm512_set1_ps(f2);
		uint32_t h = B / 2;
		if (h < 16) { /* B = 16: the whole tree in one vector */
			__m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(x), v1), v2);
			ss = tree16(_mm512_mul_ps(y, y));
		} else {
			for (i = 0; i < h; i += 16) { /* first level: t[i] = y[i]^2 + y[i + h]^2 */
				__m512 ya = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(x + i), v1), v2);
				__m512 yb = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(x + i + h), v1), v2);
				_mm512_store_ps(t + i, _mm512_add_ps(_mm512_mul_ps(ya, ya), _mm512_mul_ps(yb, yb)));
			}
			for (h >>= 1; h >= 16; h >>= 1)
				for (i = 0; i < h; i += 16)
					_mm512_store_ps(t + i, _mm512_add_ps(_mm512_load_ps(t + i), _mm512_load_ps(t + i + h)));
			ss = tree16(_mm512_load_ps(t));
		}
		k = taco_alpha_exp(e, ss, len, taco_qmax(p->fmt));
		alpha = _mm512_set1_ps(ibp_pow2f(k));
		scale_x = 1;
	}
	__m512 post = alpha, mz = _mm512_setzero_ps();
	if (p->flags & TACO_FLAG_HADAMARD) {
		uint32_t nv = B >= 128 ? 8u : B / 16u;
		post = _mm512_set1_ps(ibp_hadamard_norm(p->log2b));
		if (nv == 8 && B > nv * 16) {
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
	for (i = 0; i < B && !(p->flags & TACO_FLAG_HADAMARD); i += 16) {
		__m512 v = _mm512_load_ps(x + i);
		if (scale_x) {
			v = _mm512_mul_ps(v, post);
			_mm512_store_ps(x + i, v);
		}
		mz = max_abs(v, mz); /* a > mz ? a : mz: NaN never enters */
	}
	float m = _mm512_reduce_max_ps(mz);
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

/* Halves by vcvtps2ph (fp8_avx2.c's store8 says why that is exact). */
static inline void store16(uint8_t *dst, uint32_t dt, __m512 v, __mmask16 mk)
{
	if (dt == IBP_DTYPE_F32)
		_mm512_mask_storeu_ps(dst, mk, v);
	else if (dt == IBP_DTYPE_F16)
		_mm256_mask_storeu_epi16(dst, mk, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	else
		_mm512_mask_cvtepi32_storeu_epi16(dst, mk, to_bf16(v));
}

/* The last step of a full Hadamard block, the dtype a constant after inlining. */
static inline __attribute__((always_inline)) void out_full(const float *z, uint32_t B, __m512 inv, __m512 ia,
							   uint32_t dt, uint8_t *dst)
{
	const uint32_t esz = dt == IBP_DTYPE_F32 ? 4u : 2u;
	for (uint32_t i = 0; i < B; i += 16)
		store16(dst + (uint64_t)i * esz, dt, _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(z + i), inv), ia),
			(__mmask16)0xffff);
}

static void dec_avx512(const fp8_blk_t *p, const uint8_t *q, float s, int k, uint32_t len, uint8_t *dst, float *z)
{
	const uint32_t B = 1u << p->log2b, esz = p->dt == IBP_DTYPE_F32 ? 4u : 2u;
	const __m512 sv = _mm512_set1_ps(s), ia = _mm512_set1_ps(ibp_pow2f(-k));
	int had = (p->flags & TACO_FLAG_HADAMARD) != 0;
	if (had) {
		uint32_t nv = B >= 128 ? 8u : B / 16u;
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
	const __m512 inv = _mm512_set1_ps(ibp_hadamard_norm(p->log2b));
	if (had && len == B) {
		if (p->dt == IBP_DTYPE_BF16)
			out_full(z, B, inv, ia, IBP_DTYPE_BF16, dst);
		else if (p->dt == IBP_DTYPE_F16)
			out_full(z, B, inv, ia, IBP_DTYPE_F16, dst);
		else
			out_full(z, B, inv, ia, IBP_DTYPE_F32, dst);
		return;
	}
	for (uint32_t i = 0; i < len; i += 16) {
		__m512 v = had ? _mm512_mul_ps(_mm512_load_ps(z + i), inv) : _mm512_mul_ps(from_fp8(q + i, p->fmt), sv);
		store16(dst + (uint64_t)i * esz, p->dt, _mm512_mul_ps(v, ia), tail_mask(len - i));
	}
}

static int codes_finite_avx512(const uint8_t *q, uint32_t n, uint32_t fmt)
{
	const __m512i lo = _mm512_set1_epi8(0x7f), lim = _mm512_set1_epi8(fmt == FP8_E4M3 ? 0x7e : 0x7b);
	__mmask64 bad = 0;
	for (uint32_t i = 0; i < n; i += 64) {
		__mmask64 mk = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
		__m512i c = _mm512_and_si512(_mm512_maskz_loadu_epi8(mk, q + i), lo);
		bad |= _mm512_cmpgt_epi8_mask(c, lim);
	}
	return bad == 0;
}

const fp8_kern_t ibpi_fp8_kern_avx512 = {enc_avx512, dec_avx512, codes_finite_avx512};
