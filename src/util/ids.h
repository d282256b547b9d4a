/* ids.h - scans of a gather's row ids: the range check and the runs of
 * consecutive ids. Together they were a fifth of a sequential gather of
 * 16-byte rows (docs/BENCHMARKS.md "Tiny BITMAP rows and the id scans"),
 * so both take AVX2 where the CPU has it. Thread-safe. */
#ifndef IBP_IDS_H
#define IBP_IDS_H

#include <stdint.h>

/* The first position i < n whose ids[i] lies outside [0, nrows), n when
 * every id lies inside (nrows 0: 0 for n > 0). */
uint64_t ibpi_ids_first_bad(const int64_t *ids, uint64_t n, uint64_t nrows);

/* ibpi_ids_first_bad by a given implementation (tests): avx2 0 portable,
 * 1 AVX2 (the CPU must have it). */
uint64_t ibpi_ids_first_bad_isa(const int64_t *ids, uint64_t n, uint64_t nrows, int avx2);

/* ibpi_ids_run_end past its first compare: avx2 < 0 the CPU's best, else
 * as ibpi_ids_first_bad_isa. */
uint64_t ibpi_ids_run_scan(const int64_t *ids, uint64_t b, uint64_t e, int avx2);

static inline uint64_t ibpi_ids_run_end_isa(const int64_t *ids, uint64_t b, uint64_t e, int avx2)
{
	/* random ids: one compare, inline (a gather asks once an id) */
	if (b + 1 < e && (uint64_t)ids[b + 1] != (uint64_t)ids[b] + 1)
		return b + 1;
	return ibpi_ids_run_scan(ids, b, e, avx2);
}

/* The end of the run of consecutive ids starting at position b < e: the
 * first k in (b, e) with ids[k] != ids[k - 1] + 1 (modulo 2^64), else e. */
static inline uint64_t ibpi_ids_run_end(const int64_t *ids, uint64_t b, uint64_t e)
{
	return ibpi_ids_run_end_isa(ids, b, e, -1);
}

#endif /* IBP_IDS_H */
