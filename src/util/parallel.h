/* parallel.h - a small pthread parallel-for.
 *
 * ibpi_parallel_for(nthreads, n, fn, ctx) splits [0, n) into contiguous,
 * nearly equal ranges, one per thread, and calls fn(ctx, begin, end, tid)
 * once per non-empty range; tid runs over 0 .. ibpi_parallel_threads(nthreads,
 * n) - 1 and the caller's thread runs tid 0. It returns when every range is
 * done. fn returns nothing: record failures in ctx (e.g. one slot per tid)
 * and report them from the calling thread (ibpi_fail's detail is per thread).
 *
 * nthreads 0 means the number of online CPUs; never more threads than n.
 * Returns IBP_ERR_INVALID_ARG for nthreads < 0 or fn NULL. If a thread cannot
 * be started its range runs on the calling thread, so the work is always
 * done when IBP_OK is returned. n == 0 calls nothing.
 *
 * The other ranges run on the process's workers, started by the first call
 * that needs them and kept (parallel.c); a call while another holds them,
 * or from inside a range (nested), starts threads of its own for the call.
 * A fork() child starts over with none. Ranges may wait for each other
 * (every tid runs at once) except when a thread could not be started.
 */
#ifndef IBP_PARALLEL_H
#define IBP_PARALLEL_H

#include <stdint.h>
#include "ibp/status.h"

#define IBP_MAX_THREADS 256

typedef void (*ibp_parallel_fn)(void *ctx, uint64_t begin, uint64_t end, int tid);

/* Number of threads (and tids) ibpi_parallel_for will use for these
 * arguments: at least 1, at most min(n, IBP_MAX_THREADS); nthreads <= 0:
 * the CPUs the calling thread may run on (ibpi_cpus_allowed). */
int ibpi_parallel_threads(int nthreads, uint64_t n);

ibp_status_t ibpi_parallel_for(int nthreads, uint64_t n, ibp_parallel_fn fn, void *ctx);

#endif /* IBP_PARALLEL_H */
