/* store_rows.h - the store's row decoder for other jobs of the store
 * layer (internal): the embedding bag decodes its rows in chunks with it.
 */
#ifndef IBP_STORE_ROWS_H
#define IBP_STORE_ROWS_H

#include <stdint.h>

#include "ibp/store.h"

/* Decodes rows ids[0 .. n-1] of an IBP store into out (n rows of
 * ibp_store_row_bytes bytes each) on the calling thread, with the gather's
 * row map and look-ahead; the ids must be valid rows (the caller checked).
 * Returns the number of rows decoded: n, or the position of the first row
 * that failed, with *st its status and the detail in this thread's error
 * slot. Not for block codecs (exp, fp8): returns 0 with
 * IBP_ERR_UNSUPPORTED. Thread-safe: any number of threads at once. */
uint64_t ibpi_store_decode_rows(const ibp_store_t *s, const int64_t *ids, uint64_t n, uint8_t *out,
			       ibp_status_t *st);

/* Rows the store's gather looks ahead (IBP_GATHER_PREFETCH, read at open;
 * 0 = none). */
uint64_t ibpi_store_ahead(const ibp_store_t *s);

/* Exp rows (codec 4, slots of S bytes) ahead of their decode, in bursts:
 * when position i starts a new batch of B = `batch` positions, the slots
 * of the rows of the next batch are prefetched together in a short loop
 * (every line of a slot: a loop of the same length for every row).
 * Spread one row at a time through the decode loop the same prefetches hid
 * almost nothing on a Zen 3 VM (rows behind offsets: 230-264 ns an id at
 * any distance against 146-180 in bursts, 2026-12-02, docs/BENCHMARKS.md).
 * The ids at positions below `e` must be valid rows. */
typedef struct ibpi_xr_ahead {
	uint64_t next; /* first position of the next batch */
	uint64_t pl;   /* slots prefetched below this position */
} ibpi_xr_ahead_t;

static inline __attribute__((always_inline)) void ibpi_xr_ahead(ibpi_xr_ahead_t *a, uint64_t batch, uint64_t S,
								const uint8_t *slots, const int64_t *ids64,
								const int32_t *ids32, uint64_t i, uint64_t e)
{
	if (i < a->next)
		return;
	const uint64_t be = e - i > batch ? i + batch : e;
	const uint64_t le = e - be > batch ? be + batch : e;
	a->next = be;
	for (uint64_t k = a->pl > i ? a->pl : i; k < le; k++) {
		const uint8_t *p = slots + (uint64_t)(ids64 ? ids64[k] : ids32[k]) * S;
		for (uint64_t n = 0; 64 * n < S; n++)
			__builtin_prefetch(p + 64 * n);
		__builtin_prefetch(p + S - 1);
	}
	a->pl = le;
}

#endif /* IBP_STORE_ROWS_H */
