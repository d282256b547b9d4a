/* ibp/checksum.h - the checksum every libibp format uses (XXH3-64), for
 * callers that frame libibp's buffers in formats of their own (the Python
 * package's compressed-tensor frame does). */
#ifndef IBP_CHECKSUM_H
#define IBP_CHECKSUM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XXH3-64 of data[0, n) with `seed` (XXH3_64bits_withSeed; seed 0 is plain
 * XXH3-64). Chain ranges by passing one result as the next seed. data may
 * be NULL when n is 0. Thread-safe, no errors. */
uint64_t ibp_checksum64(const void *data, uint64_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CHECKSUM_H */
