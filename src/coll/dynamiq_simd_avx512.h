/* dynamiq_simd_avx512.h - AVX-512 helpers of the collectives' codec kernels
 * (dynamiq_avx512.c, rcmoe_avx512.c; compiled with -mavx512f/bw/vl/dq):
 * the counter-based uniforms, and packing of 2/4/8-bit codes. */
#ifndef IBP_COLL_DYNAMIQ_SIMD_AVX512_H
#define IBP_COLL_DYNAMIQ_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"

/* coll_mix on 8 lanes. */
static inline __m512i avx512_mix8(__m512i z)
{
	z = _mm512_add_epi64(z, _mm512_set1_epi64((long long)0x9e3779b97f4a7c15ull));
	z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
			       _mm512_set1_epi64((long long)0xbf58476d1ce4e5b9ull));
	z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
			       _mm512_set1_epi64((long long)0x94d049bb133111ebull));
	return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

/* coll_u01(coll_mix(hb ^ ((i0 + l) * C))) for lanes l = 0..15. */
static inline __m512 avx512_u01x16(uint64_t hb, uint64_t i0, uint64_t C)
{
	const __m512i l = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
	__m512i c = _mm512_set1_epi64((long long)C);
	__m512i m0 = _mm512_add_epi64(_mm512_set1_epi64((long long)(i0 * C)), _mm512_mullo_epi64(l, c));
	__m512i m1 = _mm512_add_epi64(m0, _mm512_set1_epi64((long long)(8 * C)));
	__m512i b = _mm512_set1_epi64((long long)hb);
	__m256i h0 = _mm512_cvtepi64_epi32(_mm512_srli_epi64(avx512_mix8(_mm512_xor_si512(b, m0)), 40));
	__m256i h1 = _mm512_cvtepi64_epi32(_mm512_srli_epi64(avx512_mix8(_mm512_xor_si512(b, m1)), 40));
	__m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
	return _mm512_mul_ps(_mm512_cvtepi32_ps(h), _mm512_set1_ps(1.0f / 16777216.0f));
}

/* Stores 16 codes (lanes < 2^q, q in {2, 4, 8}) as 2q bytes, LSB first. */
static inline void avx512_pack16(__m512i v, int q, uint8_t *out)
{
	__m128i b = _mm512_cvtepi32_epi8(v);
	if (q == 8) {
		_mm_storeu_si128((__m128i *)out, b);
		return;
	}
	uint64_t lo = (uint64_t)_mm_cvtsi128_si64(b), hi = (uint64_t)_mm_extract_epi64(b, 1);
	if (q == 4) {
		uint32_t w[2] = { coll_pack_nib(lo), coll_pack_nib(hi) };
		memcpy(out, w, 8);
	} else {
		uint16_t w[2] = { coll_pack_crumb(lo), coll_pack_crumb(hi) };
		memcpy(out, w, 4);
	}
}

/* Loads 16 codes of q bits (2q bytes at p). */
static inline __m512i avx512_unpack16(const uint8_t *p, int q)
{
	if (q == 8)
		return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
	if (q == 4) {
		__m128i b = _mm_loadl_epi64((const __m128i *)p);
		b = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
		__m512i v = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(b),
					      _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
		return _mm512_and_si512(v, _mm512_set1_epi32(15));
	}
	uint32_t w;
	memcpy(&w, p, 4);
	__m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w),
				     _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
	__m512i v = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(b),
				      _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6));
	return _mm512_and_si512(v, _mm512_set1_epi32(3));
}

#endif /* IBP_COLL_DYNAMIQ_SIMD_AVX512_H */
