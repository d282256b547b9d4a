/* ibp/unstable.h - test, tuning and expert calls outside the stable API:
 * they may change or go in any release, without deprecated aliases.
 * <ibp.h> does not include this header; include it by name:
 *
 *   #include <ibp/unstable.h>
 *
 * The symbols are exported by every libibp build (the CLI, the benchmarks
 * and the Python package use them). The library declares each one a second
 * time in its internal headers; tests/abi/test_api_rules.c includes both, so
 * the two declarations cannot drift apart. */
#ifndef IBP_UNSTABLE_H
#define IBP_UNSTABLE_H

#include "ibp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IBP codec (ibp/codec.h) ---- */

/* Selects the CPU implementation for this codec (for tests and benchmarks).
 * Returns IBP_ERR_UNSUPPORTED if this CPU or build lacks it. This changes
 * the codec: do not call it while other threads use the codec. */
ibp_status_t ibp_codec_set_impl(ibp_codec_t *c, ibp_impl_t impl);

/* Size in bytes of the same rows in the IBP paper's original layout
 * (participation bitmap of D bits rounded up to a chunk word, then the
 * payload rounded up to a chunk word; raw when not smaller), for the
 * layout comparison in benchmarks. Each row uses its best cluster. */
uint64_t ibp_paper_layout_size(const ibp_codec_t *c, const void *rows, uint64_t nrows);

/* ---- CUDA stores (ibp/cuda.h) ---- */

/* Chooses the gather kernel (default AUTO). Not thread-safe with gathers
 * running on other threads. Errors: IBP_ERR_INVALID_ARG. */
ibp_status_t ibp_cuda_store_set_kernel(ibp_cuda_store_t *s, ibp_cuda_kernel_t k);

/* ---- slab cache (ibp/cache.h) ---- */

/* ibp_cache_gather that also reports the rows it evicted, so that a caller
 * keeping copies of cached rows elsewhere can write them back or
 * invalidate them. evicted != NULL: at most evicted_cap rows are evicted by
 * this call (a miss whose admission would need more is not admitted, and
 * counts in stats.rejected; evicted_cap 0 admits into free space only),
 * and their ids go to evicted[0..*n_evicted) in the order they were
 * evicted: no gaps, no id twice, each a row that was resident (READY) and
 * no longer is unless a later pass of the same call (n > max_batch)
 * admitted it again. evicted == NULL: no limit (evicted_cap must be 0);
 * *n_evicted (NULL allowed) gets the count. Evictions of other callers
 * running at the same time are theirs, never reported here. *n_evicted is
 * set (0 on an argument error) whatever the status. Errors as
 * ibp_cache_gather, plus IBP_ERR_INVALID_ARG for evicted without
 * n_evicted or evicted_cap > 0 without evicted. No allocation. */
ibp_status_t ibp_cache_gather_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				    void *out, const int64_t *out_rows, int32_t *status, uint32_t flags,
				    int64_t *evicted, uint64_t evicted_cap, uint64_t *n_evicted, void *stream);

/* ibp_cache_prefetch with the evicted-row output of ibp_cache_gather_evict. */
ibp_status_t ibp_cache_prefetch_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				      int64_t *evicted, uint64_t evicted_cap, uint64_t *n_evicted, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* IBP_UNSTABLE_H */
