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

/* Exp rows: lines prefetched a row by ibpi_xr_ahead (its `nl`). */
unsigned ibpi_store_xr_lines(const ibp_store_t *s);

/* Exp rows (codec 4) ahead of their decode, in bursts: when position i
 * starts a new batch of B = `batch` positions, the row offsets of the batch
 * two on and the lines of the rows of the next batch are prefetched
 * together, in a short loop (nl lines a row: the first nl - 1 and the
 * last; nl = 0: every line, at most 16). Spread one row at a time through
 * the decode loop (the offset 2d positions on, the lines d on) the same
 * prefetches hid almost nothing on a Zen 3 VM: 230-264 ns an id at any d
 * against 146-180 in bursts of 16 or 32, float16 and float32 rows of 64,
 * one thread (2026-12-02, docs/BENCHMARKS.md). The ids at positions below `e`
 * must be valid rows: their offsets are read. */
typedef struct ibpi_xr_ahead {
	uint64_t next; /* first position of the next batch */
	uint64_t po;   /* offsets prefetched below this position */
	uint64_t pl;   /* lines prefetched below this position */
} ibpi_xr_ahead_t;

static inline __attribute__((always_inline)) void ibpi_xr_ahead(ibpi_xr_ahead_t *a, uint64_t batch, unsigned nl,
								const uint64_t *off, const uint8_t *pay,
								const int64_t *ids64, const int32_t *ids32,
								uint64_t i, uint64_t e)
{
	if (i < a->next)
		return;
	const uint64_t be = e - i > batch ? i + batch : e;
	const uint64_t le = e - be > batch ? be + batch : e, oe = e - le > batch ? le + batch : e;
	a->next = be;
	for (uint64_t k = a->po > i ? a->po : i; k < oe; k++)
		__builtin_prefetch(&off[ids64 ? ids64[k] : ids32[k]]);
	a->po = oe;
	for (uint64_t k = a->pl > i ? a->pl : i; k < le; k++) {
		const uint64_t r = (uint64_t)(ids64 ? ids64[k] : ids32[k]);
		const uint8_t *p = pay + off[r], *q = pay + off[r + 1];
		if (nl) {
			/* nl - 1 lines from the row's first, the last one clamped to
			 * the row's last byte, then that byte's line: a loop of the
			 * same length for every row (one that stops at the row's end
			 * mispredicts its exit when rows span 2 or 3 lines) */
			const uint64_t len = (uint64_t)(q - p);
			for (unsigned n = 0; n + 1 < nl; n++)
				__builtin_prefetch(p + (64u * n < len ? 64u * n : len - 1));
			__builtin_prefetch(q - 1);
			continue;
		}
		const uint8_t *line = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)63);
		for (unsigned n = 0; n < 16 && line < q; n++, line += 64) /* as the gather's PF_LINES */
			__builtin_prefetch(line);
	}
	a->pl = le;
}

#endif /* IBP_STORE_ROWS_H */
