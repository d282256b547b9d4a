/* hadamard.h - in-place fast Walsh-Hadamard transform on float32 blocks
 * (Sylvester order, entry (i, j) = (-1)^popcount(i & j)), the rotation of
 * the FP8 codec. Butterflies (a, b) -> (a + b, a - b) run at strides 1, 2,
 * ..., n/2 in that order, a fixed order the CUDA kernel repeats exactly. */
#ifndef IBP_HADAMARD_H
#define IBP_HADAMARD_H

#include <stdint.h>

/* Unnormalised transform of x[0, 2^log2n): x <- H x. log2n <= 16. */
void ibp_fwht_f32(float *x, uint32_t log2n);

/* Orthonormal transform x <- (1/sqrt(n)) H x (self-inverse up to rounding);
 * 1/sqrt(n) is exact for even log2n and float(1/sqrt 2) * 2^-k otherwise. */
void ibp_hadamard_f32(float *x, uint32_t log2n);

#endif /* IBP_HADAMARD_H */
