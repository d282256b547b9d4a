/* parallel.c - static-partition parallel-for on pthreads. */
#include <pthread.h>
#include <unistd.h>

#include "util/parallel.h"
#include "util/error.h"

int ibpi_parallel_threads(int nthreads, uint64_t n)
{
	long t = nthreads;
	if (t <= 0) {
		t = sysconf(_SC_NPROCESSORS_ONLN);
		if (t < 1)
			t = 1;
	}
	if (t > IBP_MAX_THREADS)
		t = IBP_MAX_THREADS;
	if ((uint64_t)t > n)
		t = n == 0 ? 1 : (long)n;
	return (int)t;
}

typedef struct ibp_pf_task {
	ibp_parallel_fn fn;
	void *ctx;
	uint64_t begin, end;
	int tid;
} ibp_pf_task_t;

static void *ibp_pf_main(void *arg)
{
	ibp_pf_task_t *t = arg;
	t->fn(t->ctx, t->begin, t->end, t->tid);
	return NULL;
}

ibp_status_t ibpi_parallel_for(int nthreads, uint64_t n, ibp_parallel_fn fn, void *ctx)
{
	if (nthreads < 0 || !fn)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "parallel_for: nthreads %d, fn %p", nthreads,
				(void *)(uintptr_t)fn);
	if (n == 0)
		return IBP_OK;
	int t = ibpi_parallel_threads(nthreads, n);
	if (t == 1) {
		fn(ctx, 0, n, 0);
		return IBP_OK;
	}
	ibp_pf_task_t task[IBP_MAX_THREADS];
	pthread_t th[IBP_MAX_THREADS];
	int started[IBP_MAX_THREADS];
	uint64_t q = n / (uint64_t)t, r = n % (uint64_t)t, at = 0;
	for (int i = 0; i < t; i++) {
		uint64_t len = q + ((uint64_t)i < r ? 1 : 0);
		task[i] = (ibp_pf_task_t){ fn, ctx, at, at + len, i };
		at += len;
	}
	for (int i = 1; i < t; i++)
		started[i] = pthread_create(&th[i], NULL, ibp_pf_main, &task[i]) == 0;
	fn(ctx, task[0].begin, task[0].end, 0);
	for (int i = 1; i < t; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		else
			fn(ctx, task[i].begin, task[i].end, i);
	}
	return IBP_OK;
}
