/* rcmoe_avx512.c - LSQ and PTS kernels in AVX-512 (F, BW, VL, DQ) and BMI2:
 * 16 elements per vector. Every element goes through the same IEEE
 * operations as the scalar reference (rcmoe.c), so the bytes are the same
 * (dynamiq_simd.h). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/dynamiq_simd_avx512.h"
#include "fp8/fp8_impl.h"

/* The encoders' limit on |x| (3.4e38f, below FLT_MAX) as bits. */
static inline uint32_t lim_bits(void)
{
	float l = 3.4e38f;
	uint32_t b;
	memcpy(&b, &l, 4);
	return b;
}

/* 16 elements of dt at src[i] as floats (exact). */
static inline __m512 load16(const void *src, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return _mm512_loadu_ps((const float *)src + i);
	__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
	if (dt == IBP_DTYPE_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	float t[16];
	for (int l = 0; l < 16; l++)
		t[l] = fp8i_f16_to_f32(((const uint16_t *)src)[i + l]);
	return _mm512_loadu_ps(t);
}

/* Rounds 16 floats to dt (fp8i_f32_to_bf16 / _f16's rules) at dst[i]. */
static inline void store16(void *dst, ibp_dtype_t dt, uint64_t i, __m512 v)
{
	if (dt == IBP_DTYPE_F32) {
		_mm512_storeu_ps((float *)dst + i, v);
		return;
	}
	uint16_t *d = (uint16_t *)dst + i;
	if (dt == IBP_DTYPE_BF16) {
		__m512i u = _mm512_castps_si512(v);
		__m512i r = _mm512_add_epi32(
			u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
					    _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
		r = _mm512_srli_epi32(r, 16);
		__mmask16 nan = _mm512_cmp_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						      _mm512_set1_epi32(0x7f800000), _MM_CMPINT_NLE);
		r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
		_mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(r));
		return;
	}
	float t[16];
	_mm512_storeu_ps(t, v);
	for (int l = 0; l < 16; l++)
		d[l] = fp8i_f32_to_f16(t[l]);
}

static int lsq_max(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float *m)
{
	__m512i acc = _mm512_setzero_si512();
	const __m512i am = _mm512_set1_epi32(0x7fffffff);
	for (uint64_t i = i0; i < i0 + len; i += 16)
		acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_castps_si512(load16(src, dt, i)), am));
	uint32_t r = (uint32_t)_mm512_reduce_max_epu32(acc);
	if (r > lim_bits())
		return 0;
	memcpy(m, &r, 4);
	return 1;
}

static void lsq_enc(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float s, int B, uint64_t key,
		    uint8_t *code)
{
	const int Lm = (1 << (B - 1)) - 1;
	const __m512 vs = _mm512_set1_ps(s), vL = _mm512_set1_ps((float)Lm), zero = _mm512_setzero_ps();
	const __m512i vLm = _mm512_set1_epi32(Lm), sgn = _mm512_set1_epi32(1 << (B - 1)), one = _mm512_set1_epi32(1);
	for (uint64_t i = i0; i < i0 + len; i += 16) {
		__m512 x = load16(src, dt, i);
		__m512 t = s > 0 ? _mm512_mul_ps(_mm512_div_ps(_mm512_abs_ps(x), vs), vL) : zero;
		__m512 fl = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
		__mmask16 up = _mm512_cmp_ps_mask(avx512_u01x16(key, i, DQ_K_IDX), _mm512_sub_ps(t, fl), _CMP_LT_OQ);
		__m512i m = _mm512_cvttps_epi32(fl);
		m = _mm512_min_epu32(_mm512_mask_add_epi32(m, up, m, one), vLm);
		__mmask16 neg = _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ) & _mm512_test_epi32_mask(m, m);
		avx512_pack16(_mm512_mask_or_epi32(m, neg, m, sgn), B, code + i * (uint64_t)B / 8);
	}
}

static void lsq_dec(const uint8_t *code, int B, float s, uint64_t i0, uint64_t len, ibp_dtype_t dt, void *dst)
{
	const int Lm = (1 << (B - 1)) - 1;
	const __m512 vs = _mm512_set1_ps(s), vL = _mm512_set1_ps((float)Lm);
	const __m512i vLm = _mm512_set1_epi32(Lm);
	for (uint64_t i = i0; i < i0 + len; i += 16) {
		__m512i v = avx512_unpack16(code + i * (uint64_t)B / 8, B);
		__m512 m = _mm512_div_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, vLm)), vs), vL);
		m = _mm512_castsi512_ps(
			_mm512_xor_si512(_mm512_castps_si512(m), _mm512_slli_epi32(_mm512_srli_epi32(v, B - 1), 31)));
		store16(dst, dt, i, m);
	}
}

static int pts_max(const float *g, uint64_t k, float *m)
{
	__m512i acc = _mm512_setzero_si512();
	const __m512i am = _mm512_set1_epi32(0x7fffffff);
	uint64_t i = 0;
	for (; i + 16 <= k; i += 16)
		acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(g + i), am));
	if (i < k)
		acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_maskz_loadu_epi32((__mmask16)((1u << (k - i)) - 1), g + i), am));
	uint32_t r = (uint32_t)_mm512_reduce_max_epu32(acc);
	if (r > lim_bits())
		return 0;
	memcpy(m, &r, 4);
	return 1;
}

/* Appends the low c bits of s to a bit stream (64-bit words, then the last bytes). */
typedef struct bitw {
	uint8_t *p;
	uint64_t acc;
	unsigned fill;
} bitw_t;

static inline void bitw_put(bitw_t *w, uint64_t s, unsigned c)
{
	if (!c)
		return;
	w->acc |= s << w->fill;
	if (w->fill + c >= 64) {
		memcpy(w->p, &w->acc, 8);
		w->p += 8;
		w->acc = w->fill ? s >> (64 - w->fill) : 0;
		w->fill = w->fill + c - 64;
	} else
		w->fill += c;
}

static inline void bitw_end(bitw_t *w)
{
	memcpy(w->p, &w->acc, (w->fill + 7) / 8);
}

static uint64_t pts_keep(const float *g, uint64_t k, float m, float ps, uint64_t key, uint8_t *pres, uint8_t *sgn)
{
	const __m512 vps = _mm512_set1_ps(ps), vm = _mm512_set1_ps(m), zero = _mm512_setzero_ps();
	bitw_t w = { sgn, 0, 0 };
	uint64_t nnz = 0;
	for (uint64_t b = 0; b < k; b += 64) {
		uint64_t P = 0, N = 0;
		for (unsigned l = 0; l < 4 && b + 16 * l < k; l++) {
			uint64_t i = b + 16 * l;
			__mmask16 in = k - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - i)) - 1);
			__m512 x = _mm512_maskz_loadu_ps(in, g + i);
			__m512 p = m > 0 ? _mm512_div_ps(_mm512_mul_ps(vps, _mm512_abs_ps(x)), vm) : zero;
			P |= (uint64_t)(_mm512_cmp_ps_mask(avx512_u01x16(key, i, DQ_K_IDX), p, _CMP_LT_OQ) & in) << (16 * l);
			N |= (uint64_t)_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ) << (16 * l);
		}
		unsigned nb = k - b >= 64 ? 8 : (unsigned)((k - b + 7) / 8);
		memcpy(pres + b / 8, &P, nb);
		unsigned c = (unsigned)__builtin_popcountll(P);
		bitw_put(&w, _pext_u64(N, P), c);
		nnz += c;
	}
	bitw_end(&w);
	return nnz;
}

/* Reads c <= 64 bits at a time from a stream of `end` bytes. */
typedef struct bitr {
	const uint8_t *p;
	uint64_t pos, end, acc;
	unsigned have;
} bitr_t;

static inline uint64_t bitr_take(bitr_t *r, unsigned c)
{
	if (!c)
		return 0;
	if (r->have >= c) {
		uint64_t out = c == 64 ? r->acc : r->acc & ((1ull << c) - 1);
		r->acc = c == 64 ? 0 : r->acc >> c;
		r->have -= c;
		return out;
	}
	uint64_t out = r->acc, nb = 0;
	unsigned got = r->have, need = c - got, bytes = r->end - r->pos >= 8 ? 8 : (unsigned)(r->end - r->pos);
	memcpy(&nb, r->p + r->pos, bytes);
	r->pos += bytes;
	out |= (need == 64 ? nb : nb & ((1ull << need) - 1)) << got;
	r->acc = need == 64 ? 0 : nb >> need;
	r->have = bytes * 8 - need;
	return out;
}

static void pts_add(const uint8_t *pres, const uint8_t *sgn, uint64_t k, float mag, float *acc)
{
	const __m512 pos = _mm512_set1_ps(mag), neg = _mm512_set1_ps(-mag);
	bitr_t r = { sgn, 0, 0, 0, 0 };
	uint64_t nnz = 0;
	for (uint64_t b = 0; b < k; b += 64) {
		uint64_t P = 0;
		unsigned nb = k - b >= 64 ? 8 : (unsigned)((k - b + 7) / 8);
		memcpy(&P, pres + b / 8, nb);
		nnz += (uint64_t)__builtin_popcountll(P);
		r.end = (nnz + 7) / 8; /* never past the signs of the kept (a checked stream) */
		if (!P)
			continue;
		uint64_t N = _pdep_u64(bitr_take(&r, (unsigned)__builtin_popcountll(P)), P);
		for (unsigned l = 0; l < 4; l++) {
			__mmask16 pm = (__mmask16)(P >> (16 * l)), nm = (__mmask16)(N >> (16 * l));
			if (!pm)
				continue;
			float *a = acc + b + 16 * l;
			__m512 v = _mm512_mask_loadu_ps(_mm512_setzero_ps(), pm, a);
			v = _mm512_mask_add_ps(v, pm, v, _mm512_mask_blend_ps(nm, pos, neg));
			_mm512_mask_storeu_ps(a, pm, v);
		}
	}
}

const rc_kern_t ibpi_rc_kern_avx512 = { lsq_max, lsq_enc, lsq_dec, pts_max, pts_keep, pts_add };
