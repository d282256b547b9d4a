/* dynamiq_avx512.c - DynamiQ's super-group kernels in AVX-512 (F, BW, VL,
 * DQ): one 16-lane vector is one group of 16 entries. Every entry goes
 * through the same IEEE operations as the scalar reference (dynamiq.c),
 * so the bytes are the same (dynamiq_simd.h). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/dynamiq_simd_avx512.h"

/* Levels of width q as 1 (q <= 4: entries 0..15) or 8 (q = 8) vectors. */
static inline void load_levels(const float *lv, int q, __m512 *L)
{
	for (int t = 0; t < (q == 8 ? 8 : 1); t++)
		L[t] = _mm512_loadu_ps(lv + 16 * t);
}

/* lv[idx] per lane (idx <= 7 for q <= 4, <= 127 for q = 8). */
static inline __m512 level(int q, const __m512 *L, __m512i idx)
{
	if (q != 8)
		return _mm512_permutexvar_ps(idx, L[0]);
	__m512 t0 = _mm512_permutex2var_ps(L[0], idx, L[1]);
	__m512 t1 = _mm512_permutex2var_ps(L[2], idx, L[3]);
	__m512 t2 = _mm512_permutex2var_ps(L[4], idx, L[5]);
	__m512 t3 = _mm512_permutex2var_ps(L[6], idx, L[7]);
	__mmask16 b5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
	__mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
	return _mm512_mask_blend_ps(b6, _mm512_mask_blend_ps(b5, t0, t1), _mm512_mask_blend_ps(b5, t2, t3));
}

static void dq_decode(const float *lv, const uint8_t *code, int q, const float *gs, const float *x, float add,
		      float *y)
{
	__m512 L[8];
	load_levels(lv, q, L);
	const __m512i mask = _mm512_set1_epi32((1 << (q - 1)) - 1);
	const __m512 va = _mm512_set1_ps(add);
	for (int g = 0; g < 16; g++) {
		__m512i v = avx512_unpack16(code + g * 2 * q, q);
		__m512 m = _mm512_mul_ps(level(q, L, _mm512_and_si512(v, mask)), _mm512_set1_ps(gs[g]));
		m = _mm512_castsi512_ps(
			_mm512_xor_si512(_mm512_castps_si512(m), _mm512_slli_epi32(_mm512_srli_epi32(v, q - 1), 31)));
		__m512 t = x ? _mm512_sub_ps(_mm512_loadu_ps(x + 16 * g), va) : va;
		_mm512_storeu_ps(y + 16 * g, _mm512_add_ps(m, t));
	}
}

static int dq_gmax(const float *y, float *gmax)
{
	const __m512i am = _mm512_set1_epi32(0x7fffffff);
	__m512i all = _mm512_setzero_si512();
	for (int g = 0; g < 16; g++) {
		__m512i v = _mm512_and_si512(_mm512_loadu_si512(y + 16 * g), am);
		all = _mm512_max_epu32(all, v);
		uint32_t m = (uint32_t)_mm512_reduce_max_epu32(v);
		memcpy(&gmax[g], &m, 4);
	}
	return (uint32_t)_mm512_reduce_max_epu32(all) < 0x7f800000u;
}

static void dq_rg(const float *gmax, float sf, uint64_t hb, uint64_t g0, uint8_t *rg)
{
	__m512 gm = _mm512_loadu_ps(gmax);
	__m512 t = sf > 0 ? _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(255.0f), gm), _mm512_set1_ps(sf))
			  : _mm512_setzero_ps();
	__m512 fl = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	__mmask16 up = _mm512_cmp_ps_mask(avx512_u01x16(hb, g0, DQ_K_GRP), _mm512_sub_ps(t, fl), _CMP_LT_OQ);
	__m512 r = _mm512_mask_add_ps(fl, up, fl, _mm512_set1_ps(1.0f));
	r = _mm512_min_ps(r, _mm512_set1_ps(255.0f));
	_mm_storeu_si128((__m128i *)rg, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
}

static void dq_codes(const float *lv, const uint8_t *tab, int q, const float *y, const float *gmax, uint64_t hb,
		     uint64_t i0, uint8_t *code)
{
	__m512 L[8];
	load_levels(lv, q, L);
	const int R = (1 << (q - 1)) - 1;
	const __m512i one = _mm512_set1_epi32(1), rm1 = _mm512_set1_epi32(R - 1), b1023 = _mm512_set1_epi32(1023);
	const __m512i sgn = _mm512_set1_epi32(1 << (q - 1)), bytemask = _mm512_set1_epi32(0xff);
	const __m512 onef = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps(), k1024 = _mm512_set1_ps(1024.0f);
	const __m512 lv0 = _mm512_set1_ps(lv[0]), lv1 = _mm512_set1_ps(lv[1]);
	for (int g = 0; g < 16; g++) {
		__m512 yv = _mm512_loadu_ps(y + 16 * g);
		float m = gmax[g];
		__m512 a = m > 0 ? _mm512_div_ps(_mm512_abs_ps(yv), _mm512_set1_ps(m)) : zero;
		a = _mm512_min_ps(a, onef);
		__m512i lo = _mm512_setzero_si512();
		__m512 lvl = lv0, lvn = lv1;
		if (q != 2) { /* q = 2: one step, lo = 0 */
			__mmask16 lt1 = _mm512_cmp_ps_mask(a, onef, _CMP_LT_OQ);
			__m512i b = _mm512_mask_blend_epi32(lt1, b1023, _mm512_cvttps_epi32(_mm512_mul_ps(a, k1024)));
			lo = _mm512_and_si512(_mm512_i32gather_epi32(b, (const void *)tab, 1), bytemask);
			for (;;) {
				lvn = level(q, L, _mm512_add_epi32(lo, one));
				__mmask16 st = _mm512_cmp_epi32_mask(lo, rm1, _MM_CMPINT_LT) &
					       _mm512_cmp_ps_mask(lvn, a, _CMP_LE_OQ);
				if (!st)
					break;
				lo = _mm512_mask_add_epi32(lo, st, lo, one);
			}
			lvl = level(q, L, lo);
		}
		__m512 pu = _mm512_div_ps(_mm512_sub_ps(a, lvl), _mm512_sub_ps(lvn, lvl));
		__mmask16 up = _mm512_cmp_ps_mask(avx512_u01x16(hb, i0 + 16 * (uint64_t)g, DQ_K_IDX), pu, _CMP_LT_OQ);
		__m512i k = _mm512_mask_add_epi32(lo, up, lo, one);
		__mmask16 neg = _mm512_cmp_ps_mask(yv, zero, _CMP_LT_OQ) & _mm512_test_epi32_mask(k, k);
		avx512_pack16(_mm512_mask_or_epi32(k, neg, k, sgn), q, code + g * 2 * q);
	}
}

/* 16 lanes in one vector; the pairwise steps halve it (the scalar sg_sums). */
static float lanes_sum(__m512 a)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
	return _mm_cvtss_f32(q);
}

static void dq_stats(const void *src, ibp_dtype_t dt, float *s, float *s2)
{
	__m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
	for (int i = 0; i < (int)DQ_S; i += 16) {
		__m512 x = dt == IBP_DTYPE_F32
				   ? _mm512_loadu_ps((const float *)src + i)
				   : _mm512_castsi512_ps(_mm512_slli_epi32(
					     _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i))),
					     16));
		a = _mm512_add_ps(a, x);
		b = _mm512_add_ps(b, _mm512_mul_ps(x, x));
	}
	*s = lanes_sum(a);
	*s2 = lanes_sum(b);
}

const dq_kern_t ibpi_dq_kern_avx512 = { dq_decode, dq_gmax, dq_rg, dq_codes, dq_stats };
