/* mask_rule.h - training's Mask/Bitval rule for one byte position (paper
 * §4.1 with non-strict inequalities, docs in train.c), one definition
 * compiled by the host (ibp_train_mask, src/bitpack/train.c) and the CUDA
 * trainer (kernels/ibp_train.cu), so both give the same codec. */
#ifndef IBP_BITPACK_MASK_RULE_H
#define IBP_BITPACK_MASK_RULE_H

#include <stdint.h>

#include "util/hd.h"

/* c[b]: how many of the n rows have bit b of this byte set; need: the
 * smallest count that makes a bit invariant (ibpi_train_need). Bit b is
 * invariant with Bitval 1 when c[b] >= need, with Bitval 0 when
 * n - c[b] >= need (the 1 test first); n = 0: nothing is invariant. */
static inline IBP_HD void ibp_mask_rule(const uint64_t *c, uint64_t n, uint64_t need, uint8_t *mask,
					  uint8_t *bitval)
{
	unsigned m = 0, v = 0;
	if (n) {
		for (unsigned b = 0; b < 8; b++) {
			if (c[b] >= need) {
				m |= 1u << b;
				v |= 1u << b;
			} else if (n - c[b] >= need) {
				m |= 1u << b;
			}
		}
	}
	*mask = (uint8_t)m;
	*bitval = (uint8_t)v;
}

#endif /* IBP_BITPACK_MASK_RULE_H */
