/* exp_rans_avx2.c - the rANS decoder's inner loop on AVX2 (compiled with
 * -mavx2): 8 lane states per vector, the vectors of several segments side
 * by side so their table gathers overlap. Same arithmetic as the scalar
 * loop in exp_rans.c, so the same symbols. */
#include <immintrin.h>
#include <string.h>

#include "exp/exp_rans_avx2.h"

#define MAXK 4
#define VPS (EXPF_RANS_LANES / 8) /* vectors per segment */

void ibpi_exp_rans_steps_avx2(exp_rans_lanes_t *st, int k, uint64_t steps, const uint32_t *tab, uint8_t **sym,
			      const uint8_t *base)
{
	__m256i x[MAXK * VPS], off[MAXK * VPS];
	const __m256i m12 = _mm256_set1_epi32(EXPF_RANS_SCALE - 1), m8 = _mm256_set1_epi32(0xfff);
	const __m256i one = _mm256_set1_epi32(1), lo16 = _mm256_set1_epi32(0xffff), zero = _mm256_setzero_si256();
	/* byte 0 of each 32-bit lane to the low 4 bytes of each 128-bit half */
	const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8,
					      12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	if (k > MAXK)
		k = MAXK;
	const int nv = k * VPS;
	for (int v = 0; v < nv; v++) {
		const exp_rans_lanes_t *s = &st[v / VPS];
		const int j0 = 8 * (v % VPS);
		int32_t o[8];
		for (int j = 0; j < 8; j++)
			o[j] = (int32_t)(s->p[j0 + j] - base);
		x[v] = _mm256_loadu_si256((const __m256i *)(const void *)(s->x + j0));
		off[v] = _mm256_loadu_si256((const __m256i *)(const void *)o);
	}
	for (uint64_t t = 0; t < steps; t++)
		for (int v = 0; v < nv; v++) {
			/* the next word of every lane, loaded before it is known to be needed */
			__m256i w = _mm256_i32gather_epi32((const int *)(const void *)base, off[v], 1);
			__m256i e = _mm256_i32gather_epi32((const int *)(const void *)tab, _mm256_and_si256(x[v], m12), 4);
			__m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), m8), one);
			__m256i xn = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], EXPF_RANS_SCALE_BITS)),
						      _mm256_srli_epi32(e, 20));
			__m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(xn, 16), zero);
			__m256i xr = _mm256_or_si256(_mm256_slli_epi32(xn, 16), _mm256_and_si256(w, lo16));
			x[v] = _mm256_blendv_epi8(xn, xr, need);
			off[v] = _mm256_sub_epi32(off[v], _mm256_add_epi32(need, need));
			__m256i b = _mm256_shuffle_epi8(e, pick);
			uint64_t sy = (uint32_t)_mm256_extract_epi32(b, 0) | (uint64_t)(uint32_t)_mm256_extract_epi32(b, 4) << 32;
			memcpy(sym[v / VPS] + st[v / VPS].i + EXPF_RANS_LANES * t + 8 * (v % VPS), &sy, 8);
		}
	for (int v = 0; v < nv; v++) {
		exp_rans_lanes_t *s = &st[v / VPS];
		const int j0 = 8 * (v % VPS);
		int32_t o[8];
		_mm256_storeu_si256((__m256i *)(void *)(s->x + j0), x[v]);
		_mm256_storeu_si256((__m256i *)(void *)o, off[v]);
		for (int j = 0; j < 8; j++)
			s->p[j0 + j] = base + o[j];
	}
	for (int s = 0; s < k; s++)
		st[s].i += EXPF_RANS_LANES * steps;
}
