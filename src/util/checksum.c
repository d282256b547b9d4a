/* checksum.c - XXH3-64 for the formats (ibp/checksum.h, util/checksum.h). */
#include <xxhash.h>

#include "ibp/checksum.h"
#include "util/checksum.h"

uint64_t ibp_checksum64(const void *data, uint64_t n, uint64_t seed)
{
	return XXH3_64bits_withSeed(n ? data : "", (size_t)n, seed);
}

uint64_t ibpi_block_sum(const uint8_t *b, uint64_t bytes)
{
	/* the header up to the sum seeds the rest: one pass, no copy */
	return XXH3_64bits_withSeed(b + 64, (size_t)(bytes - 64), XXH3_64bits(b, IBP_BLOCK_SUM_OFF));
}
