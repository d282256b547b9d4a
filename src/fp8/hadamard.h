/* hadamard.h - in-place fast Walsh-Hadamard transform on float32 blocks
 * (Sylvester order, entry (i, j) = (-1)^popcount(i & j)), the rotation of
 * the FP8 codec. Butterflies (a, b) -> (a + b, a - b) run at strides 1, 2,
 * ..., n/2 in that order, a fixed order the CUDA kernel repeats exactly. */
#ifndef IBP_HADAMARD_H
#define IBP_HADAMARD_H

#include <stdint.h>
#include "util/fpmath.h"

/* The normalising factor 1/sqrt(B): exact for even log2 B; for odd log2 B,
 * float(1/sqrt(2)) (0x3f3504f3) times an exact power of two. */
static inline IBP_HD float ibp_hadamard_norm(uint32_t log2b)
{
	if ((log2b & 1u) == 0)
		return ibp_pow2f(-(int)(log2b / 2));
	return ibp_f32_from_bits(0x3f3504f3u - ((log2b - 1u) / 2u << 23));
}

/* Unnormalised transform of x[0, 2^log2n): x <- H x. log2n <= 16. */
void ibpi_fwht_f32(float *x, uint32_t log2n);

/* Orthonormal transform x <- (1/sqrt(n)) H x (self-inverse up to rounding);
 * 1/sqrt(n) is exact for even log2n and float(1/sqrt 2) * 2^-k otherwise. */
void ibpi_hadamard_f32(float *x, uint32_t log2n);

#endif /* IBP_HADAMARD_H */
