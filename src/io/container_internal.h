/* container_internal.h - library-internal container calls (not public):
 * the writer's test hook and the in-memory row map of the CPU store. */
#ifndef IBP_CONTAINER_INTERNAL_H
#define IBP_CONTAINER_INTERNAL_H

#include <stdint.h>

#include "ibp/container.h"

/* Makes every writer in the process produce format 1.<minor>: 1 gives the
 * 1.1 layout (64-byte sections, page-aligned payload, plain metadata,
 * FLAGS/CLUSTERS/OFFSETS, PAYLOAD_SUMS always), anything else the current
 * IBP_FORMAT_MINOR. Only for tests of the reader's 1.1 path; not
 * thread-safe with respect to writers running meanwhile. */
void ibpi_container_write_minor_set(unsigned minor);

/* Sections of at least `bytes` bytes are written with O_DIRECT where the
 * file system allows it (default, and for 0: 256 MiB). For tests of that
 * path; not thread-safe with respect to writers running meanwhile. */
void ibpi_container_write_direct_min_set(uint64_t bytes);

/* The row form of an exp-rows container (codec 4), NULL for others; row
 * i is in its slot at payload + i * slot. */
struct ibpi_exprows;
const struct ibpi_exprows *ibpi_container_exprows(const ibp_container_t *c);

/* An exp-rows container's overflow area (after the slots; checked at
 * open): its start, and its length in *len. NULL and 0 for others. */
const uint8_t *ibpi_container_exprows_overflow(const ibp_container_t *c, uint64_t *len);

/* ---- the row map ---------------------------------------------------------
 *
 * A decoded copy of an IBP container's row index for O(1) random lookups
 * (the 1.2 compact index needs a group's base plus the lengths of up to 63
 * entries before the row, ~1000 instructions; FORMAT.md §2.4.2). Rows are
 * cut into groups of 64: base[g] is the payload offset of group g's first
 * row, and group g owns 65 u32 records at rec[65 g]: record r (< rows in
 * the group) is row 64 g + r's offset from base[g] << sh | cluster << 2 |
 * mode, the one after the group's last row holds the group's end offset
 * << sh. So a row is two neighbouring records and one base, and its length
 * is the difference of the two offsets: no per-row loop, no branch.
 * Memory: 8 (ng + 1) + 260 ng bytes for ng = ceil(rows / 64) groups, about
 * 4.2 bytes per row (docs/FORMAT.md "In-memory row map"). */
#define IBP_ROWMAP_GROUP_SHIFT 6u
#define IBP_ROWMAP_STRIDE 65u /* records per group */

typedef struct ibp_rowmap {
	const uint8_t *payload;
	const uint64_t *base; /* ng + 1 */
	const uint32_t *rec;  /* 65 ng */
	unsigned sh;          /* 2 + cluster bits */
	uint32_t cmask;       /* cluster id mask, after >> 2 */
	uint64_t bytes;       /* memory taken (base, rec and this header) */
} ibp_rowmap_t;

/* The row map of IBP container c, built on the first call (one pass over
 * the validated index) and kept until ibp_container_close; concurrent first
 * calls may each build one, one is kept. The row map is refused, and no
 * memory taken, with IBP_ERR_UNSUPPORTED when c is not an IBP container,
 * when its offsets within a group do not fit the records (64 R >= 2^(32 -
 * sh)) or when it would take more than max_bytes; IBP_ERR_NOMEM when it
 * cannot be allocated. Once built, ibp_container_row_meta uses it too. */
ibp_status_t ibpi_container_rowmap(const ibp_container_t *c, uint64_t max_bytes, const ibp_rowmap_t **out);

/* Prefetches what ibp_rowmap_get(m, row) reads. Always inlined: a call
 * of a function that only prefetches has no effect gcc must keep, and gcc
 * 12 deletes such calls where it does not inline them first. */
static inline __attribute__((always_inline)) void ibp_rowmap_prefetch(const ibp_rowmap_t *m, uint64_t row)
{
	const uint64_t g = row >> IBP_ROWMAP_GROUP_SHIFT;
	const uint32_t *r = m->rec + g * IBP_ROWMAP_STRIDE + (row & 63);
	__builtin_prefetch(r, 0, 3);
	__builtin_prefetch(r + 1, 0, 3);
	__builtin_prefetch(m->base + g, 0, 3);
}

/* Row `row` (< the container's rows: the caller checks) of the map:
 * start, encoded length, mode and cluster. */
static inline void ibp_rowmap_get(const ibp_rowmap_t *m, uint64_t row, const uint8_t **src, uint64_t *len,
				  uint8_t *mode, unsigned *cl)
{
	const uint64_t g = row >> IBP_ROWMAP_GROUP_SHIFT;
	const uint32_t *r = m->rec + g * IBP_ROWMAP_STRIDE + (row & 63);
	const uint32_t a = r[0], b = r[1];
	*src = m->payload + m->base[g] + (a >> m->sh);
	*len = (b >> m->sh) - (a >> m->sh);
	*mode = (uint8_t)(a & 3u);
	*cl = (a >> 2) & m->cmask;
}

#endif /* IBP_CONTAINER_INTERNAL_H */
