/* checksum.h - the checksum of exp blocks and FP8 streams (docs/FORMAT.md):
 * XXH3-64 of the block from byte 64 on, seeded with the XXH3-64 of header
 * bytes [0, 56); the 8 bytes at 56 hold it. */
#ifndef IBP_UTIL_CHECKSUM_H
#define IBP_UTIL_CHECKSUM_H

#include <stdint.h>

#define IBP_BLOCK_SUM_OFF 56u

/* The checksum of a block of `bytes` >= 64 bytes. */
uint64_t ibpi_block_sum(const uint8_t *b, uint64_t bytes);

#endif
