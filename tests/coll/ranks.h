/* ranks.h - runs one collective call per rank, each rank a thread of this
 * process on the in-process transport (shared by test_dynamiq.c and
 * test_rcmoe.c). */
#ifndef IBP_TEST_COLL_RANKS_H
#define IBP_TEST_COLL_RANKS_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>

#include "ibp/coll.h"

enum { RJ_ALLREDUCE = 0, RJ_ALLTOALL = 1 };

typedef struct rank_job {
	ibp_coll_inproc_t *w; /* set by ranks_run */
	int rank;             /* set by ranks_run */
	int op;               /* RJ_ALLREDUCE (sum) or RJ_ALLTOALL */
	ibp_dtype_t dt;
	ibp_coll_codec_t codec;
	uint64_t n;
	const void *in;
	void *out;
	int lsq_bits; /* 0: the communicator's default */
	int fake;     /* passed to custom */
	int calls;    /* the call made this many times on one communicator (0: once); out: the last */
	/* Non-NULL: runs instead of making a communicator and calling (a rank
	 * that misbehaves on the raw transport); it owns t (destroys it). */
	void (*custom)(struct rank_job *j, ibp_coll_transport_t *t);
	ibp_status_t st;
	ibp_coll_stats_t stats;
	char err[256];
} rank_job_t;

/* The tests' communicator options: no calibration, 5 s timeout, policy ALWAYS. */
static inline void ranks_opts(ibp_coll_opts_t *o)
{
	ibp_coll_opts_default(o);
	o->calibrate = 0;
	o->timeout_ms = 5000;
	o->policy = IBP_COLL_POLICY_ALWAYS;
}

/* One rank: communicator (ranks_opts), the call, the status, its detail
 * and the statistics. */
static void *rank_job_run(void *arg)
{
	rank_job_t *j = arg;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = NULL;
	ibp_coll_opts_t o;
	ranks_opts(&o);
	j->st = ibp_coll_inproc_transport(j->w, j->rank, &t);
	if (j->st == IBP_OK && j->custom) {
		j->custom(j, &t);
		return NULL;
	}
	if (j->st == IBP_OK)
		j->st = ibp_coll_comm_create(&t, &o, &c);
	if (j->st == IBP_OK && j->lsq_bits)
		j->st = ibp_coll_comm_set_lsq_bits(c, j->lsq_bits);
	for (int k = 0; j->st == IBP_OK && k < (j->calls > 1 ? j->calls : 1); k++)
		j->st = j->op == RJ_ALLTOALL ? ibp_coll_alltoall(j->in, j->out, j->n, j->dt, j->codec, c, NULL)
					     : ibp_coll_allreduce(j->in, j->out, j->n, j->dt, IBP_COLL_SUM, j->codec, c, NULL);
	snprintf(j->err, sizeof j->err, "%s", ibp_last_error());
	if (c)
		ibp_coll_comm_stats(c, &j->stats);
	ibp_coll_comm_free(c);
	return NULL;
}

/* Runs jobs[0, p) (p <= 8) as the ranks of a fresh world; returns when all have. */
static void ranks_run(rank_job_t *jobs, int p)
{
	cr_assert(p >= 1 && p <= 8);
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(p, &w), IBP_OK);
	pthread_t th[8];
	for (int r = 0; r < p; r++) {
		jobs[r].w = w;
		jobs[r].rank = r;
		cr_assert_eq(pthread_create(&th[r], NULL, rank_job_run, &jobs[r]), 0);
	}
	for (int r = 0; r < p; r++)
		cr_assert_eq(pthread_join(th[r], NULL), 0);
	ibp_coll_inproc_free(w);
}

#endif /* IBP_TEST_COLL_RANKS_H */
