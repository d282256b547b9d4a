/* row_ahead.h - look-ahead over a stream of IBP row ids (internal).
 *
 * A random row's index entry and payload are cache misses, and a row
 * decode is long enough that the core cannot overlap the next row's misses
 * with it unless they are started early. A reader keeps a ring of the
 * next `dist` rows' places in the payload (index entry read, first lines
 * prefetched) and takes each row's place from the ring when it decodes it.
 * The same scheme, distance and environment variable as the store's gather
 * (src/store/store.c, decode_rows_ibp); used by the embedding bag.
 */
#ifndef IBP_STORE_ROW_AHEAD_H
#define IBP_STORE_ROW_AHEAD_H

#include <stdint.h>
#include <stdlib.h>

#include "ibp/container.h"

#define IBP_AHEAD_DEFAULT 8u /* the gather's default distance */
#define IBP_AHEAD_MAX 64u    /* ring size, a power of two */
#define IBP_AHEAD_LINES 16u  /* cache lines prefetched per row at most */

/* A row's place in the payload, read ahead of its decode. */
typedef struct ibp_rowref {
	const uint8_t *src;
	uint64_t len;
	uint8_t mode;
	unsigned cl;
	int ok; /* the index lookup succeeded (else it is redone in order) */
} ibp_rowref_t;

/* The look-ahead distance: IBP_GATHER_PREFETCH (0 = off, capped at
 * IBP_AHEAD_MAX) or the default. */
static inline uint64_t ibp_ahead_distance(void)
{
	const char *pf = getenv("IBP_GATHER_PREFETCH");
	if (pf && *pf >= '0' && *pf <= '9') {
		unsigned long v = strtoul(pf, NULL, 10);
		return v > IBP_AHEAD_MAX ? IBP_AHEAD_MAX : v;
	}
	return IBP_AHEAD_DEFAULT;
}

/* Prefetches the first lines of [src, src + len), at most max_lines (the
 * hardware prefetcher follows a long row once it is being read). */
static inline void ibp_prefetch_lines(const uint8_t *src, uint64_t len, uint64_t max_lines)
{
	const uintptr_t p0 = (uintptr_t)src & ~(uintptr_t)63;
	const uint64_t lines = (((uintptr_t)src & 63) + len + 63) / 64;
	for (uint64_t k = 0; k < lines && k < max_lines; k++)
		__builtin_prefetch((const void *)(p0 + 64 * k), 0, 3);
}

/* Reads row `row`'s index entry into *r and prefetches its first lines. */
static inline void ibp_row_ahead(const ibp_container_t *c, uint64_t row, ibp_rowref_t *r, uint64_t max_lines)
{
	r->ok = ibp_container_row_meta(c, row, &r->src, &r->len, &r->mode, &r->cl) == IBP_OK;
	if (r->ok)
		ibp_prefetch_lines(r->src, r->len, max_lines);
}

#endif /* IBP_STORE_ROW_AHEAD_H */
