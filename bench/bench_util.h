/* bench_util.h - what the C benchmarks share: wall and thread-CPU clocks,
 * a fatal-error exit naming the libibp status (benchmarks are programs: they
 * may exit), a splitmix64 generator and the median of a run's timings. Define BENCH_NAME before including. */
#ifndef IBP_BENCH_UTIL_H
#define IBP_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ibp.h"

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU time of this thread: on a loaded machine it leaves out the time
 * the thread waited for a core, which wall time counts. */
static inline double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void die(const char *what, ibp_status_t st)
{
	fprintf(stderr, BENCH_NAME ": %s: %s (%s)\n", what, ibp_status_string(st), ibp_last_error());
	exit(1);
}

static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static inline double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
