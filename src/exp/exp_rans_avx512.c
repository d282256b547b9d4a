/* exp_rans_avx512.c - the rANS decoder's inner loop on AVX-512 (built with
 * the *_avx512.c flags, taken where the exponent codec runs its AVX-512
 * build): a segment's 16 lane states in one vector, the vectors of several
 * segments side by side so their table gathers overlap. The same
 * arithmetic as the AVX2 and scalar loops (exp_rans_avx2.c, exp_rans.c),
 * so the same symbols. */
#include <immintrin.h>

#include "exp/exp_rans_avx2.h"

#define MAXK 8

void ibpi_exp_rans_steps_avx512(exp_rans_lanes_t *st, int k, uint64_t steps, const uint32_t *tab, uint8_t **sym,
				const uint8_t *base)
{
	__m512i x[MAXK], off[MAXK];
	const __m512i m12 = _mm512_set1_epi32(EXPF_RANS_SCALE - 1), m8 = _mm512_set1_epi32(0xfff);
	const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2), lo16 = _mm512_set1_epi32(0xffff);
	const __m512i renorm = _mm512_set1_epi32(1 << 16);
	if (k > MAXK)
		k = MAXK;
	for (int v = 0; v < k; v++) {
		int32_t o[EXPF_RANS_LANES];
		for (unsigned j = 0; j < EXPF_RANS_LANES; j++)
			o[j] = (int32_t)(st[v].p[j] - base);
		x[v] = _mm512_loadu_si512((const void *)st[v].x);
		off[v] = _mm512_loadu_si512((const void *)o);
	}
	for (uint64_t t = 0; t < steps; t++)
		for (int v = 0; v < k; v++) {
			/* the next word of every lane, loaded before it is known to be needed */
			const __m512i w = _mm512_i32gather_epi32(off[v], (const void *)base, 1);
			const __m512i e = _mm512_i32gather_epi32(_mm512_and_si512(x[v], m12), (const void *)tab, 4);
			const __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), m8), one);
			const __m512i xn = _mm512_add_epi32(
				_mm512_mullo_epi32(f, _mm512_srli_epi32(x[v], EXPF_RANS_SCALE_BITS)), _mm512_srli_epi32(e, 20));
			const __mmask16 need = _mm512_cmplt_epu32_mask(xn, renorm);
			x[v] = _mm512_mask_or_epi32(xn, need, _mm512_slli_epi32(xn, 16), _mm512_and_si512(w, lo16));
			off[v] = _mm512_mask_add_epi32(off[v], need, off[v], two);
			/* the symbol is each entry's low byte */
			_mm_storeu_si128((__m128i *)(void *)(sym[v] + st[v].i + EXPF_RANS_LANES * t), _mm512_cvtepi32_epi8(e));
		}
	for (int v = 0; v < k; v++) {
		int32_t o[EXPF_RANS_LANES];
		_mm512_storeu_si512((void *)st[v].x, x[v]);
		_mm512_storeu_si512((void *)o, off[v]);
		for (unsigned j = 0; j < EXPF_RANS_LANES; j++)
			st[v].p[j] = base + o[j];
		st[v].i += EXPF_RANS_LANES * steps;
	}
}
