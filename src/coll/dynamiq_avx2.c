/* dynamiq_avx2.c - DynamiQ's super-group kernels in AVX2: two 8-lane
 * vectors per group of 16 entries, the levels of 8-bit codes and the
 * search table by gathers. Same IEEE operations per entry as the scalar
 * reference (dynamiq.c), so the same bytes (dynamiq_simd.h). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/dynamiq_simd_avx2.h"

/* lv[idx] per lane (idx <= 7 for q <= 4: a permute; q = 8: a gather). */
static inline __m256 level(int q, const float *lv, __m256 L0, __m256i idx)
{
	return q != 8 ? _mm256_permutevar8x32_ps(L0, idx) : _mm256_i32gather_ps(lv, idx, 4);
}

static inline __m256 absf(__m256 v)
{
	return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

static void dq_decode(const float *lv, const uint8_t *code, int q, const float *gs, const float *x, float add,
		      float *y)
{
	const __m256 L0 = _mm256_loadu_ps(lv), va = _mm256_set1_ps(add);
	const __m256i mask = _mm256_set1_epi32((1 << (q - 1)) - 1);
	for (int h = 0; h < 32; h++) { /* 8 entries: group h / 2 */
		__m256i v = avx2_unpack8(code + h * q, q);
		__m256 m = _mm256_mul_ps(level(q, lv, L0, _mm256_and_si256(v, mask)), _mm256_set1_ps(gs[h >> 1]));
		m = _mm256_castsi256_ps(
			_mm256_xor_si256(_mm256_castps_si256(m), _mm256_slli_epi32(_mm256_srli_epi32(v, q - 1), 31)));
		__m256 t = x ? _mm256_sub_ps(_mm256_loadu_ps(x + 8 * h), va) : va;
		_mm256_storeu_ps(y + 8 * h, _mm256_add_ps(m, t));
	}
}

static inline uint32_t hmax_u32(__m256i v)
{
	__m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(m);
}

static int dq_gmax(const float *y, float *gmax)
{
	const __m256i am = _mm256_set1_epi32(0x7fffffff);
	__m256i all = _mm256_setzero_si256();
	for (int g = 0; g < 16; g++) {
		__m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(y + 16 * g)), am);
		__m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(y + 16 * g + 8)), am);
		__m256i v = _mm256_max_epu32(a, b);
		all = _mm256_max_epu32(all, v);
		uint32_t m = hmax_u32(v);
		memcpy(&gmax[g], &m, 4);
	}
	return hmax_u32(all) < 0x7f800000u;
}

static void dq_rg(const float *gmax, float sf, uint64_t hb, uint64_t g0, uint8_t *rg)
{
	for (int h = 0; h < 2; h++) {
		__m256 gm = _mm256_loadu_ps(gmax + 8 * h);
		__m256 t = sf > 0 ? _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(255.0f), gm), _mm256_set1_ps(sf))
				  : _mm256_setzero_ps();
		__m256 fl = _mm256_floor_ps(t);
		__m256 up = _mm256_cmp_ps(avx2_u01x8(hb, g0 + 8 * (uint64_t)h, DQ_K_GRP), _mm256_sub_ps(t, fl), _CMP_LT_OQ);
		__m256 r = _mm256_add_ps(fl, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
		r = _mm256_min_ps(r, _mm256_set1_ps(255.0f));
		avx2_pack8(_mm256_cvttps_epi32(r), 8, rg + 8 * h);
	}
}

static void dq_codes(const float *lv, const uint8_t *tab, int q, const float *y, const float *gmax, uint64_t hb,
		     uint64_t i0, uint8_t *code)
{
	const __m256 L0 = _mm256_loadu_ps(lv);
	const int R = (1 << (q - 1)) - 1;
	const __m256i one = _mm256_set1_epi32(1), rm1 = _mm256_set1_epi32(R - 1), b1023 = _mm256_set1_epi32(1023);
	const __m256i sgn = _mm256_set1_epi32(1 << (q - 1)), bytemask = _mm256_set1_epi32(0xff);
	const __m256 onef = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps(), k1024 = _mm256_set1_ps(1024.0f);
	const __m256 lv0 = _mm256_set1_ps(lv[0]), lv1 = _mm256_set1_ps(lv[1]);
	for (int h = 0; h < 32; h++) {
		__m256 yv = _mm256_loadu_ps(y + 8 * h);
		float m = gmax[h >> 1];
		__m256 a = m > 0 ? _mm256_div_ps(absf(yv), _mm256_set1_ps(m)) : zero;
		a = _mm256_min_ps(a, onef);
		__m256i lo = _mm256_setzero_si256();
		__m256 lvl = lv0, lvn = lv1;
		if (q != 2) {
			__m256 lt1 = _mm256_cmp_ps(a, onef, _CMP_LT_OQ);
			__m256i b = _mm256_castps_si256(_mm256_blendv_ps(
				_mm256_castsi256_ps(b1023),
				_mm256_castsi256_ps(_mm256_cvttps_epi32(_mm256_mul_ps(a, k1024))), lt1));
			lo = _mm256_and_si256(_mm256_i32gather_epi32((const int *)(const void *)tab, b, 1), bytemask);
			for (;;) {
				lvn = level(q, lv, L0, _mm256_add_epi32(lo, one));
				__m256i st = _mm256_and_si256(_mm256_cmpgt_epi32(rm1, lo),
							      _mm256_castps_si256(_mm256_cmp_ps(lvn, a, _CMP_LE_OQ)));
				if (_mm256_testz_si256(st, st))
					break;
				lo = _mm256_sub_epi32(lo, st); /* st is -1 where the search steps */
			}
			lvl = level(q, lv, L0, lo);
		}
		__m256 pu = _mm256_div_ps(_mm256_sub_ps(a, lvl), _mm256_sub_ps(lvn, lvl));
		__m256 up = _mm256_cmp_ps(avx2_u01x8(hb, i0 + 8 * (uint64_t)h, DQ_K_IDX), pu, _CMP_LT_OQ);
		__m256i k = _mm256_sub_epi32(lo, _mm256_castps_si256(up));
		__m256i neg = _mm256_andnot_si256(_mm256_cmpeq_epi32(k, _mm256_setzero_si256()),
						  _mm256_castps_si256(_mm256_cmp_ps(yv, zero, _CMP_LT_OQ)));
		avx2_pack8(_mm256_or_si256(k, _mm256_and_si256(neg, sgn)), q, code + h * q);
	}
}

/* Lanes 0-7 in lo, 8-15 in hi; the pairwise steps halve them (the scalar sg_sums). */
static float lanes_sum(__m256 lo, __m256 hi)
{
	__m256 h = _mm256_add_ps(lo, hi);
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
	return _mm_cvtss_f32(q);
}

static inline __m256 load8(const void *src, ibp_dtype_t dt, int i)
{
	if (dt == IBP_DTYPE_F32)
		return _mm256_loadu_ps((const float *)src + i);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static void dq_stats(const void *src, ibp_dtype_t dt, float *s, float *s2)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
	for (int i = 0; i < (int)DQ_S; i += 16) {
		__m256 x0 = load8(src, dt, i), x1 = load8(src, dt, i + 8);
		a0 = _mm256_add_ps(a0, x0);
		a1 = _mm256_add_ps(a1, x1);
		b0 = _mm256_add_ps(b0, _mm256_mul_ps(x0, x0));
		b1 = _mm256_add_ps(b1, _mm256_mul_ps(x1, x1));
	}
	*s = lanes_sum(a0, a1);
	*s2 = lanes_sum(b0, b1);
}

const dq_kern_t ibpi_dq_kern_avx2 = { dq_decode, dq_gmax, dq_rg, dq_codes, dq_stats };
