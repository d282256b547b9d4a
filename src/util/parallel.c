/* parallel.c - static-partition parallel-for on pthreads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "util/cpu.h"
#include "util/fork.h"
#include "util/parallel.h"
#include "util/error.h"

int ibpi_parallel_threads(int nthreads, uint64_t n)
{
	long t = nthreads;
	if (t <= 0) /* the thread's affinity: a process held to fewer CPUs (taskset, a
		     * cgroup's cpuset, a DataLoader worker) ran twice the threads
		     * on them, each waiting for the other */
		t = ibpi_cpus_allowed();
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

/* The process's workers: started on the first call that wants them and
 * kept, so a call costs a wake-up, not a thread start (about 25 us each on
 * the 2-core VM: a KV store of 96 blocks lost a tenth of its time to it).
 * One job at a time: a call finding the pool busy, or made from inside a
 * job (nested), starts threads of its own as before. A fork() child starts
 * with no workers (only the forking thread is copied). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	int nworkers; /* started, tids 1 .. nworkers */
	int busy;     /* a job is out */
	_Atomic uint64_t gen; /* jobs handed out (written under mu; read by spinners without it) */
	int t;        /* this job's tids */
	_Atomic int pending;  /* its worker tasks not finished (the same) */
	ibp_pf_task_t task[IBP_MAX_THREADS];
	uint64_t born[IBP_MAX_THREADS + 1]; /* gen when worker i was started: its first job is the next */
	_Atomic uint64_t fork_gen;          /* ibpi_fork_generation() the workers belong to */
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, { { 0 } }, { 0 }, 0 };

static _Thread_local int in_job; /* a worker, or a caller running its job: nested calls spawn */

/* A fork() child (util/fork.h): the workers, and any job's caller, did
 * not come along, and the lock may be held by a thread of the parent.
 * Starts over with a fresh lock and no workers, as the store does. */
static void pool_after_fork(void)
{
	ibpi_fork_lock();
	const uint64_t g = ibpi_fork_generation();
	if (atomic_load_explicit(&pool.fork_gen, memory_order_relaxed) != g) {
		pthread_mutex_init(&pool.mu, NULL);
		pthread_cond_init(&pool.go, NULL);
		pthread_cond_init(&pool.done, NULL);
		pool.nworkers = 0, pool.busy = 0, pool.pending = 0;
		atomic_store_explicit(&pool.fork_gen, g, memory_order_release);
	}
	ibpi_fork_unlock();
}

/* How long a worker looks for the next job, and a caller for its workers'
 * end, before sleeping on the condition variable: a KV store is 24 calls
 * about 30 us apart, and a futex wake-up costs tens of us on a VM (both
 * ends of every call). Bounded, so an idle process sleeps. */
#define POOL_SPIN_NS 50000

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Spin while *v == x (spin_wait_u64) or *v != 0 (spin_wait_zero), for
 * POOL_SPIN_NS at most; the caller rechecks under the lock either way. */
static void spin_wait_u64(_Atomic uint64_t *v, uint64_t x)
{
	const uint64_t t0 = mono_ns();
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(v, memory_order_relaxed) != x)
			return;
		cpu_relax();
		if (i % 64 == 0 && mono_ns() - t0 > POOL_SPIN_NS)
			return;
	}
}

static void spin_wait_zero(_Atomic int *v)
{
	const uint64_t t0 = mono_ns();
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(v, memory_order_relaxed) == 0)
			return;
		cpu_relax();
		if (i % 64 == 0 && mono_ns() - t0 > POOL_SPIN_NS)
			return;
	}
}

static void *pool_worker(void *arg)
{
	const int id = (int)(intptr_t)arg;
	in_job = 1;
	pthread_mutex_lock(&pool.mu);
	uint64_t seen = pool.born[id]; /* not pool.gen: the job it was started for may be out already */
	for (;;) {
		if (pool.gen == seen) {
			pthread_mutex_unlock(&pool.mu);
			spin_wait_u64(&pool.gen, seen);
			pthread_mutex_lock(&pool.mu);
		}
		while (pool.gen == seen)
			pthread_cond_wait(&pool.go, &pool.mu);
		seen = pool.gen;
		if (id >= pool.t)
			continue; /* not in this job */
		ibp_pf_task_t t = pool.task[id];
		pthread_mutex_unlock(&pool.mu);
		t.fn(t.ctx, t.begin, t.end, t.tid);
		pthread_mutex_lock(&pool.mu);
		if (--pool.pending == 0)
			pthread_cond_signal(&pool.done);
	}
	return NULL;
}

/* Runs task[0 .. t) with the pool; 0 when the pool cannot take the job. */
static int pool_run(const ibp_pf_task_t *task, int t)
{
	if (in_job || ibpi_fork_watch() != IBP_OK) /* without fork counting, no kept threads */
		return 0;
	if (atomic_load_explicit(&pool.fork_gen, memory_order_acquire) != ibpi_fork_generation())
		pool_after_fork();
	pthread_mutex_lock(&pool.mu);
	if (pool.busy) {
		pthread_mutex_unlock(&pool.mu);
		return 0;
	}
	while (pool.nworkers < t - 1) {
		pthread_t th;
		pthread_attr_t a;
		int ok = pthread_attr_init(&a) == 0;
		pool.born[pool.nworkers + 1] = pool.gen;
		ok = ok && pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
		     pthread_create(&th, &a, pool_worker, (void *)(intptr_t)(pool.nworkers + 1)) == 0;
		pthread_attr_destroy(&a);
		if (!ok)
			break; /* fewer workers: the caller runs the rest */
		pool.nworkers++;
	}
	const int w = pool.nworkers < t - 1 ? pool.nworkers : t - 1; /* tids 1 .. w go to workers */
	pool.busy = 1;
	pool.t = w + 1;
	pool.pending = w;
	for (int i = 0; i <= w; i++)
		pool.task[i] = task[i];
	pool.gen++;
	pthread_cond_broadcast(&pool.go);
	pthread_mutex_unlock(&pool.mu);
	in_job = 1;
	task[0].fn(task[0].ctx, task[0].begin, task[0].end, task[0].tid);
	for (int i = w + 1; i < t; i++) /* workers that could not start */
		task[i].fn(task[i].ctx, task[i].begin, task[i].end, task[i].tid);
	in_job = 0;
	spin_wait_zero(&pool.pending);
	pthread_mutex_lock(&pool.mu);
	while (pool.pending > 0)
		pthread_cond_wait(&pool.done, &pool.mu);
	pool.busy = 0;
	pthread_mutex_unlock(&pool.mu);
	return 1;
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
	uint64_t q = n / (uint64_t)t, r = n % (uint64_t)t, at = 0;
	for (int i = 0; i < t; i++) {
		uint64_t len = q + ((uint64_t)i < r ? 1 : 0);
		task[i] = (ibp_pf_task_t){ fn, ctx, at, at + len, i };
		at += len;
	}
	if (pool_run(task, t))
		return IBP_OK;
	pthread_t th[IBP_MAX_THREADS];
	int started[IBP_MAX_THREADS];
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
