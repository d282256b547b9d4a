/* exp_tables.c - constant tables of the exponent codec, shared by its
 * portable, AVX2 and AVX-512 decoders (a file of their own, so that the
 * vector kernels depend on it and not on exp_codec.c, which dispatches to
 * them: no cycle, tools/check-cycles.py). */
#include "exp/exp_codec_internal.h"

/* spread8[b]: byte j is bit j of b */
#define EXPT_S(b)                                                                                      \
	((uint64_t)((b) & 1) | (uint64_t)(((b) >> 1) & 1) << 8 | (uint64_t)(((b) >> 2) & 1) << 16 |   \
	 (uint64_t)(((b) >> 3) & 1) << 24 | (uint64_t)(((b) >> 4) & 1) << 32 |                          \
	 (uint64_t)(((b) >> 5) & 1) << 40 | (uint64_t)(((b) >> 6) & 1) << 48 | (uint64_t)(((b) >> 7) & 1) << 56)
#define EXPT_4(b) EXPT_S(b), EXPT_S((b) + 1), EXPT_S((b) + 2), EXPT_S((b) + 3)
#define EXPT_16(b) EXPT_4(b), EXPT_4((b) + 4), EXPT_4((b) + 8), EXPT_4((b) + 12)
#define EXPT_64(b) EXPT_16(b), EXPT_16((b) + 16), EXPT_16((b) + 32), EXPT_16((b) + 48)

const uint64_t ibpi_exp_spread8[256] = { EXPT_64(0), EXPT_64(64), EXPT_64(128), EXPT_64(192) };
