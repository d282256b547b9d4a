/* exp_rans_avx2.h - the rANS decoder's vector inner loops (exp_rans_avx2.c,
 * exp_rans_avx512.c), used by exp_rans.c on CPUs with AVX2 / AVX-512. */
#ifndef IBP_EXP_RANS_AVX2_H
#define IBP_EXP_RANS_AVX2_H

#include <stdint.h>

#include "exp/exp_format.h"

/* The 16 lanes of a segment being decoded: states, read positions, stream
 * ends; elements [0, i) of its m are decoded. */
typedef struct exp_rans_lanes {
	uint32_t x[EXPF_RANS_LANES];
	const uint8_t *p[EXPF_RANS_LANES], *e[EXPF_RANS_LANES];
	uint64_t i, m;
} exp_rans_lanes_t;

/* AVX2 (exp_rans_avx2.c): `steps` steps (a symbol per lane) of each of k
 * (<= 4) segments' lanes, symbols to sym[s] + i. The caller guarantees
 * that every lane keeps a word to spare through them (loads are 4 bytes)
 * and that every position is below base + 2^31. tab: symbol | (f - 1) << 8 | (slot - cum) << 20. */
void ibpi_exp_rans_steps_avx2(exp_rans_lanes_t *st, int k, uint64_t steps, const uint32_t *tab, uint8_t **sym,
			      const uint8_t *base);

/* The same on AVX-512 (exp_rans_avx512.c; taken with the codec's AVX-512
 * build), a segment's 16 lanes a vector, up to 8 segments (AVX2: 4). */
void ibpi_exp_rans_steps_avx512(exp_rans_lanes_t *st, int k, uint64_t steps, const uint32_t *tab, uint8_t **sym,
				const uint8_t *base);

#endif /* IBP_EXP_RANS_AVX2_H */
