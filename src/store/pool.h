/* pool.h - other jobs on a store's worker pool (internal).
 *
 * The store's gather runs on a pool of threads started once per store
 * (store.c). ibpi_store_run lends that pool to another job of the store
 * layer (the embedding bag), so that no thread is started per call.
 */
#ifndef IBP_STORE_POOL_H
#define IBP_STORE_POOL_H

#include "ibp/store.h"

/* One task of a pooled job: tid in [0, ntasks). */
typedef void (*ibp_store_task_fn)(void *ctx, int tid);

/* How many tasks ibpi_store_run should be given for `nthreads` (0 = all
 * the store's threads, n = at most n) and `n` units of work: between 1 and
 * min(n, the store's thread count) (1 when n is 0). */
int ibpi_store_pool_width(const ibp_store_t *s, int nthreads, uint64_t n);

/* Runs fn(ctx, tid) exactly once for every tid in [0, ntasks), the calling
 * thread taking part, and returns when all have returned. ntasks <= 1 runs
 * on the calling thread alone, with no pool and no lock (concurrent callers
 * run in parallel). Otherwise the store's pool (started on first use; if
 * fewer threads start, they take several tasks each) runs it, one pooled
 * job per store at a time: a concurrent gather or job waits. fn must not
 * start a pooled job on the same store. The pool is the store's internal
 * state, hence the const store. Cannot fail. */
void ibpi_store_run(const ibp_store_t *s, int ntasks, ibp_store_task_fn fn, void *ctx);

#endif /* IBP_STORE_POOL_H */
