/* row_mode.h - the mode rule of docs/FORMAT.md §1 (which of CLEAN, LIST,
 * BITMAP and RAW a row is written in, and its size), one definition
 * compiled by the host encoder (codec_internal.h, ibp_choose_mode) and the
 * CUDA encoder (kernels/ibp_encode.cu), so that both pick the same mode
 * for the same row. */
#ifndef IBP_BITPACK_ROW_MODE_H
#define IBP_BITPACK_ROW_MODE_H

#include <stdint.h>

#include "ibp/codec.h"

#include "util/hd.h"

/* A row of R bytes with n exceptions whose fields take E bits, under a
 * cluster of S static bits, in a codec of D chunks whose list entries take
 * L bits (bitmap_bytes = ceil(D / 8)): the smallest of the rule's modes,
 * RAW when nothing is shorter than the row. */
static inline IBP_HD void ibp_row_mode(uint64_t R, uint64_t bitmap_bytes, unsigned L, uint64_t S, uint64_t n,
					 uint64_t E, unsigned *mode, uint64_t *size)
{
	uint64_t best;
	unsigned m;
	if (n == 0) {
		best = (S + 7) >> 3;
		m = IBP_ROW_CLEAN;
	} else {
		const uint64_t body = (S + E + 7) >> 3;
		const uint64_t bm = bitmap_bytes + body;
		const uint64_t li = (((uint64_t)L * (n + 1) + 7) >> 3) + body;
		if (li < bm) {
			best = li;
			m = IBP_ROW_LIST;
		} else {
			best = bm;
			m = IBP_ROW_BITMAP;
		}
	}
	if (best >= R) {
		best = R;
		m = IBP_ROW_RAW;
	}
	*mode = m;
	*size = best;
}

#endif /* IBP_BITPACK_ROW_MODE_H */
