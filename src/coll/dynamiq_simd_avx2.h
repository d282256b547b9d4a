/* dynamiq_simd_avx2.h - AVX2 helpers of the collectives' codec kernels
 * (dynamiq_avx2.c, rcmoe_avx2.c; compiled with -mavx2 -mbmi2): the
 * counter-based uniforms (64-bit multiplies from 32-bit ones), and packing
 * of 2/4/8-bit codes, 8 lanes at a time. */
#ifndef IBP_COLL_DYNAMIQ_SIMD_AVX2_H
#define IBP_COLL_DYNAMIQ_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"

/* x * C mod 2^64 on 4 lanes. */
static inline __m256i avx2_mul64c(__m256i x, uint64_t C)
{
	const __m256i cl = _mm256_set1_epi64x((long long)(C & 0xffffffffu)), ch = _mm256_set1_epi64x((long long)(C >> 32));
	__m256i lo = _mm256_mul_epu32(x, cl);
	__m256i mid = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), cl), _mm256_mul_epu32(x, ch));
	return _mm256_add_epi64(lo, _mm256_slli_epi64(mid, 32));
}

/* coll_mix on 4 lanes. */
static inline __m256i avx2_mix4(__m256i z)
{
	z = _mm256_add_epi64(z, _mm256_set1_epi64x((long long)0x9e3779b97f4a7c15ull));
	z = avx2_mul64c(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ull);
	z = avx2_mul64c(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebull);
	return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

/* coll_u01(coll_mix(hb ^ ((i0 + l) * C))) for lanes l = 0..7. */
static inline __m256 avx2_u01x8(uint64_t hb, uint64_t i0, uint64_t C)
{
	uint64_t b0 = i0 * C;
	__m256i m0 = _mm256_setr_epi64x((long long)b0, (long long)(b0 + C), (long long)(b0 + 2 * C), (long long)(b0 + 3 * C));
	__m256i m1 = _mm256_add_epi64(m0, _mm256_set1_epi64x((long long)(4 * C)));
	__m256i b = _mm256_set1_epi64x((long long)hb);
	__m256i h0 = _mm256_srli_epi64(avx2_mix4(_mm256_xor_si256(b, m0)), 40);
	__m256i h1 = _mm256_srli_epi64(avx2_mix4(_mm256_xor_si256(b, m1)), 40);
	/* both < 2^24: interleave the low dwords, then order them 0..7 */
	__m256i h = _mm256_blend_epi32(h0, _mm256_slli_epi64(h1, 32), 0xaa);
	h = _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
	return _mm256_mul_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(1.0f / 16777216.0f));
}

/* Stores 8 codes (lanes < 2^q, q in {2, 4, 8}) as q bytes, LSB first. */
static inline void avx2_pack8(__m256i v, int q, uint8_t *out)
{
	const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
					      -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	__m256i s = _mm256_shuffle_epi8(v, pick);
	uint64_t x = (uint64_t)(uint32_t)_mm256_cvtsi256_si32(s) | (uint64_t)(uint32_t)_mm256_extract_epi32(s, 4) << 32;
	if (q == 8) {
		memcpy(out, &x, 8);
	} else if (q == 4) {
		uint32_t w = coll_pack_nib(x);
		memcpy(out, &w, 4);
	} else {
		uint16_t w = coll_pack_crumb(x);
		memcpy(out, &w, 2);
	}
}

/* Loads 8 codes of q bits (q bytes at p). */
static inline __m256i avx2_unpack8(const uint8_t *p, int q)
{
	if (q == 8)
		return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
	if (q == 4) {
		uint32_t w;
		memcpy(&w, p, 4);
		__m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w),
					     _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
		__m256i v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(b), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
		return _mm256_and_si256(v, _mm256_set1_epi32(15));
	}
	uint16_t w;
	memcpy(&w, p, 2);
	__m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w),
				     _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1));
	__m256i v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(b), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
	return _mm256_and_si256(v, _mm256_set1_epi32(3));
}

#endif /* IBP_COLL_DYNAMIQ_SIMD_AVX2_H */
