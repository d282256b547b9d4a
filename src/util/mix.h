/* mix.h - the counter-based randomness of the lossy collectives' codecs
 * (DynamiQ's and LSQ's stochastic rounding, PTS's draws), one definition
 * compiled by the CPU codecs (src/coll) and their CUDA kernels
 * (kernels/dynamiq.cu, kernels/rcmoe.cu), so both draw the same numbers. A
 * uniform is ibp_u01(ibp_mix64(base ^ (index * C))): any thread (or GPU
 * lane) computes the uniform of any coordinate. */
#ifndef IBP_UTIL_MIX_H
#define IBP_UTIL_MIX_H

#include <stdint.h>

#include "util/hd.h"

/* The splitmix64 finaliser. */
static inline IBP_HD uint64_t ibp_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A uniform in [0, 1) from the top 24 bits of h: exact in FP32 (a 24-bit
 * integer times 2^-24), so host and device agree without rounding modes. */
static inline IBP_HD float ibp_u01(uint64_t h)
{
	return (float)(uint32_t)(h >> 40) * (1.0f / 16777216.0f);
}

#endif /* IBP_UTIL_MIX_H */
