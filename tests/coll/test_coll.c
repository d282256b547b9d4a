/* test_coll.c - the collectives on the in-process transport (2, 3 and 4
 * ranks as threads): every collective x codec x dtype x size against a
 * reference computed here in the algorithm's reduction order (NONE and
 * EXP bit-exact), FP8 within TACO's per-block bound, mismatches, a dead
 * peer, and the switcher's decisions. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity */
#endif
#include <criterion/criterion.h>
#include <sched.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "ibp/exp.h"
#include "coll/helper.h"
#include "util/error.h"
#include "coll_ref.h"

typedef struct job {
	ibp_coll_inproc_t *w;
	int rank, nranks, op, policy, silent, calibrate;
	ibp_dtype_t dt;
	ibp_coll_codec_t codec;
	uint64_t n;        /* count argument (AllToAllv: the vcount parameter) */
	int64_t timeout_ms;
	double rate;
	void *in, *out;
	uint64_t *sc, *sd, *rc, *rd;
	ibp_status_t st;
	char err[512];
	ibp_coll_stats_t stats;
	int helper; /* the comm had started its helper thread */
	int repeat; /* calls of the same collective */
	int native; /* the transport offers natives (exchange, allgather: nat_* below) */
	int native_calls;
	int piece; /* > 0: this rank's communicator pipelines in pieces of that many bytes; < 0: never */
} job_t;

/* ---- a transport with natives, for the native path's plumbing ----
 * exchange and allgather are ring gathers over the in-process transport
 * (what MPI_Allgather gives); the other entries are NULL (those calls keep
 * the algorithms). It counts the native allgathers. */
typedef struct nat {
	ibp_coll_transport_t inner;
	int *calls;
} nat_t;

static ibp_status_t nat_gather(nat_t *x, const void *mine, void *all, uint64_t bytes, int64_t timeout_ms)
{
	int r = x->inner.rank, p = x->inner.nranks;
	uint8_t *a = all;
	memmove(a + (uint64_t)r * bytes, mine, bytes);
	for (int s = 0; s < p - 1; s++) {
		int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
		uint64_t got = 0;
		IBP_TRY(x->inner.sendrecv(x->inner.ctx, (r + 1) % p, a + (uint64_t)sb * bytes, bytes, (r + p - 1) % p,
					   a + (uint64_t)rb * bytes, bytes, &got, timeout_ms));
		if (got != bytes)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "nat: %llu bytes, want %llu", (unsigned long long)got,
					(unsigned long long)bytes);
	}
	return IBP_OK;
}

static ibp_status_t nat_exchange(void *ctx, const void *mine, void *all, uint64_t bytes, int64_t timeout_ms)
{
	return nat_gather(ctx, mine, all, bytes, timeout_ms);
}

static ibp_status_t nat_allgather(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				  int64_t timeout_ms)
{
	nat_t *x = ctx;
	(*x->calls)++;
	return nat_gather(x, send, recv, count * ibp_dtype_size(dt), timeout_ms);
}

static ibp_status_t nat_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				 uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	nat_t *x = ctx;
	return x->inner.sendrecv(x->inner.ctx, dst, sbuf, sbytes, src, rbuf, rcap, rbytes, timeout_ms);
}

static void nat_destroy(void *ctx)
{
	nat_t *x = ctx;
	if (x->inner.destroy)
		x->inner.destroy(x->inner.ctx);
	free(x);
}

static const ibp_coll_native_t nat_table = { nat_exchange, nat_allgather, NULL, NULL, NULL, NULL };

static void nat_wrap(ibp_coll_transport_t *t, int *calls)
{
	nat_t *x = calloc(1, sizeof *x);
	cr_assert(x);
	x->inner = *t;
	x->calls = calls;
	*t = (ibp_coll_transport_t){ t->rank, t->nranks, x, nat_sendrecv, nat_destroy, &nat_table };
}

static void *run_job(void *arg)
{
	job_t *j = arg;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = NULL;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = j->calibrate;
	o.policy = (ibp_coll_policy_t)j->policy;
	o.timeout_ms = j->timeout_ms ? j->timeout_ms : 20000;
	o.rate = j->rate;
	j->st = ibp_coll_inproc_transport(j->w, j->rank, &t);
	if (j->st == IBP_OK && j->native)
		nat_wrap(&t, &j->native_calls);
	if (j->st == IBP_OK)
		j->st = ibp_coll_comm_create(&t, &o, &c);
	if (c && j->piece)
		c->piece_bytes = j->piece > 0 ? (uint64_t)j->piece : 0;
	/* Repeated calls go on after a failure (a broken comm must refuse them). */
	for (int k = 0; k < (j->repeat ? j->repeat : 1) && c && !j->silent; k++) {
		switch (j->op) {
		case AG: j->st = ibp_coll_allgather(j->in, j->out, j->n, j->dt, j->codec, c, NULL); break;
		case RS:
			j->st = ibp_coll_reducescatter(j->in, j->out, j->n, j->dt, IBP_COLL_SUM, j->codec, c, NULL);
			break;
		case AR: j->st = ibp_coll_allreduce(j->in, j->out, j->n, j->dt, IBP_COLL_SUM, j->codec, c, NULL); break;
		case A2A: j->st = ibp_coll_alltoall(j->in, j->out, j->n, j->dt, j->codec, c, NULL); break;
		case A2AV:
			j->st = ibp_coll_alltoallv(j->in, j->sc, j->sd, j->out, j->rc, j->rd, j->dt, j->codec, c, NULL);
			break;
		}
	}
	snprintf(j->err, sizeof j->err, "%s", ibp_last_error());
	if (c)
		ibp_coll_comm_stats(c, &j->stats);
	j->helper = c && c->helper;
	ibp_coll_comm_free(c);
	return NULL;
}

static void run_all(job_t *jobs, int p)
{
	pthread_t th[8];
	for (int r = 0; r < p; r++)
		cr_assert_eq(pthread_create(&th[r], NULL, run_job, &jobs[r]), 0);
	for (int r = 0; r < p; r++)
		pthread_join(th[r], NULL);
}

/* One collective on p ranks; leaves inputs and outputs in jobs. */
static void run_case(job_t *jobs, int p, int op, ibp_dtype_t dt, ibp_coll_codec_t codec, uint64_t n)
{
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(p, &w), IBP_OK);
	for (int r = 0; r < p; r++) {
		job_t *j = &jobs[r];
		memset(j, 0, sizeof *j);
		j->w = w;
		j->rank = r;
		j->nranks = p;
		j->op = op;
		j->dt = dt;
		j->codec = codec;
		j->n = n;
		j->policy = IBP_COLL_POLICY_ALWAYS;
		j->in = make_input(r, dt, in_elems(op, n, p, r), n * 31 + (uint64_t)op);
		j->out = calloc(1, out_elems(op, n, p, r) * ibp_dtype_size(dt) + 1);
		cr_assert(j->out);
		if (op == A2AV) {
			j->sc = calloc((size_t)p, 8);
			j->sd = calloc((size_t)p, 8);
			j->rc = calloc((size_t)p, 8);
			j->rd = calloc((size_t)p, 8);
			uint64_t so = 0, ro = 0;
			for (int q = 0; q < p; q++) {
				j->sc[q] = vcount(r, q, n);
				j->sd[q] = so;
				so += j->sc[q];
				j->rc[q] = vcount(q, r, n);
				j->rd[q] = ro;
				ro += j->rc[q];
			}
		}
	}
	run_all(jobs, p);
	for (int r = 0; r < p; r++)
		cr_assert_eq(jobs[r].st, IBP_OK, "%s p=%d %s %s n=%llu rank %d: %s", op_names[op], p, ibp_dtype_name(dt),
			     ibp_coll_codec_name(codec), (unsigned long long)n, r, jobs[r].err);
	ibp_coll_inproc_free(w);
}

static void free_case(job_t *jobs, int p)
{
	for (int r = 0; r < p; r++) {
		free(jobs[r].in);
		free(jobs[r].out);
		free(jobs[r].sc);
		free(jobs[r].sd);
		free(jobs[r].rc);
		free(jobs[r].rd);
	}
}

static float expect(job_t *jobs, int p, int r, uint64_t i, double *exact)
{
	void *ins[4];
	for (int s = 0; s < p; s++)
		ins[s] = jobs[s].in;
	return ref_expect(jobs[r].op, ins, p, r, jobs[r].dt, jobs[r].n, i, exact);
}

static void check_case(job_t *jobs, int p)
{
	job_t *j0 = &jobs[0];
	int op = j0->op;
	for (int r = 0; r < p; r++) {
		job_t *j = &jobs[r];
		uint64_t m = out_elems(op, j->n, p, r);
		double err2 = 0, ref2 = 0;
		for (uint64_t i = 0; i < m; i++) {
			double exact;
			float e = expect(jobs, p, r, i, &exact), g = get(j->out, j->dt, i);
			if (j->codec != IBP_COLL_CODEC_FP8)
				cr_assert_eq(ref_bits(g), ref_bits(e), "%s p=%d %s %s n=%llu rank %d elem %llu: got %g want %g",
					     op_names[op], p, ibp_dtype_name(j->dt), ibp_coll_codec_name(j->codec),
					     (unsigned long long)j->n, r, (unsigned long long)i, g, e);
			err2 += (g - exact) * (g - exact);
			ref2 += exact * exact;
		}
		if (j->codec == IBP_COLL_CODEC_FP8 && ref2 > 0) {
			/* Reductions quantise a partial at each of P-1 hops (+1 in
			 * AllReduce's gather); errors of independent hops add. */
			double hops = op == RS ? p - 1 : op == AR ? p : 1;
			double rel = sqrt(err2 / ref2);
			cr_assert_leq(rel, FP8_BOUND * hops, "%s p=%d %s n=%llu rank %d: fp8 rel-L2 %g", op_names[op], p,
				      ibp_dtype_name(j->dt), (unsigned long long)j->n, r, rel);
			if (j->n >= 255) /* one-element blocks are exact (the max lands on Qmax) */
				cr_assert_gt(rel, 0.0, "fp8 should not be exact on Gaussian data");
			/* TACO's typical single round trip on Gaussian data: rel-L2 ~0.026. */
			if (j->n >= 1000 && (op == AG || op == A2A))
				cr_assert_leq(rel, 0.035, "%s p=%d %s n=%llu rank %d: fp8 rel-L2 %g (typical 0.026)",
					      op_names[op], p, ibp_dtype_name(j->dt), (unsigned long long)j->n, r, rel);
		}
		/* Gathered results are identical on every rank, FP8 included. */
		if ((op == AG || op == AR) && r > 0)
			cr_assert_eq(memcmp(j->out, j0->out, m * ibp_dtype_size(j->dt)), 0,
				     "%s p=%d: rank %d differs from rank 0", op_names[op], p, r);
	}
}

static void sweep(int op)
{
	static const uint64_t sizes[] = { 0, 1, 5, 255, 1000, 4097 };
	job_t jobs[4];
	for (int p = 2; p <= 4; p++)
		for (size_t d = 0; d < 3; d++)
			for (size_t k = 0; k < 3; k++)
				for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
					run_case(jobs, p, op, dtypes[d], codecs[k], sizes[s]);
					check_case(jobs, p);
					free_case(jobs, p);
				}
}

/* The pipelined rings (pieces of 16 bytes: hundreds of pieces, uneven
 * splits, empty pieces when a chunk has fewer elements than pieces) give
 * the bits of whole chunks: the same references. */
Test(coll, pipelined_allgather) { setenv("IBP_COLL_PIECE_BYTES", "16", 1); sweep(AG); }
Test(coll, pipelined_reducescatter) { setenv("IBP_COLL_PIECE_BYTES", "16", 1); sweep(RS); }
Test(coll, pipelined_allreduce) { setenv("IBP_COLL_PIECE_BYTES", "16", 1); sweep(AR); }
Test(coll, pipelined_alltoall) { setenv("IBP_COLL_PIECE_BYTES", "16", 1); sweep(A2A); }
/* The same with no helper thread: the caller makes the pieces between its
 * polls, as on a rank of one CPU (flow.c, flow_solo) */
#define SOLO() (setenv("IBP_COLL_PIECE_BYTES", "16", 1), setenv("IBP_COLL_FLOW_HELPER", "0", 1))
Test(coll, pipelined_solo_allgather) { SOLO(); sweep(AG); }
Test(coll, pipelined_solo_reducescatter) { SOLO(); sweep(RS); }
Test(coll, pipelined_solo_allreduce) { SOLO(); sweep(AR); }
Test(coll, pipelined_solo_alltoall) { SOLO(); sweep(A2A); }

/* A process allowed one CPU takes the solo path by itself (no helper
 * thread started), two CPUs the helper's; both give the reference bits. */
Test(coll, pipelined_one_cpu_no_helper)
{
	cpu_set_t all, one;
	CPU_ZERO(&all);
	cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
	if (CPU_COUNT(&all) < 2)
		cr_skip_test("one CPU only: the helper's side cannot be shown");
	unsetenv("IBP_COLL_FLOW_HELPER");
	setenv("IBP_COLL_PIECE_BYTES", "64", 1);
	job_t jobs[4];
	for (int k = 0; k < 2; k++) {
		CPU_ZERO(&one);
		for (int i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &all)) {
				CPU_SET(i, &one);
				break;
			}
		/* the ranks' threads inherit this thread's mask */
		cr_assert_eq(sched_setaffinity(0, sizeof(cpu_set_t), k ? &all : &one), 0);
		run_case(jobs, 2, A2A, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, 4096);
		check_case(jobs, 2);
		cr_assert_eq(jobs[0].helper, k, "%s CPU(s): helper thread %s", k ? "two" : "one",
			     jobs[0].helper ? "started" : "not started");
		free_case(jobs, 2);
	}
}

/* AllToAllv keeps whole blocks (its pairs' counts differ, pieces could not agree) */
Test(coll, pipelined_alltoallv_whole) { setenv("IBP_COLL_PIECE_BYTES", "16", 1); sweep(A2AV); }

/* Pieces really travel (each its own message, its own header: more wire
 * bytes than whole chunks), and ranks that disagree on pipelining fail as
 * mismatched on both sides instead of hanging or mixing pieces up. */
Test(coll, pipelined_pieces_and_mismatch)
{
	job_t jobs[4];
	const uint64_t n = 8192;
	uint64_t wire[2];
	for (int op = AG; op <= A2A; op += A2A - AG) { /* a ring and the pairwise exchange */
		for (int k = 0; k < 2; k++) {
			setenv("IBP_COLL_PIECE_BYTES", k ? "256" : "0", 1);
			run_case(jobs, 2, op, IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, op == AG ? n : n / 2);
			check_case(jobs, 2);
			wire[k] = jobs[0].stats.wire_bytes;
			free_case(jobs, 2);
		}
		/* 4096 elements a chunk (block) in pieces of 128: 32 headers instead of one */
		cr_assert_geq(wire[1], wire[0] + 31 * COLL_HDR, "%s: wire bytes %llu pipelined, %llu whole", op_names[op],
			      (unsigned long long)wire[1], (unsigned long long)wire[0]);
	}
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(2, &w), IBP_OK);
	for (int r = 0; r < 2; r++) {
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = 2, .op = AR, .dt = IBP_DTYPE_F32,
				   .codec = IBP_COLL_CODEC_EXP, .n = n, .policy = IBP_COLL_POLICY_ALWAYS,
				   .timeout_ms = 5000, .piece = r ? -1 : 256 };
		jobs[r].in = make_input(r, IBP_DTYPE_F32, n, 3);
		jobs[r].out = calloc(n, 4);
	}
	run_all(jobs, 2);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_INVALID_ARG, "rank %d: %s", r, jobs[r].err);
		cr_assert(strstr(jobs[r].err, "mismatch"), "rank %d: %s", r, jobs[r].err);
	}
	free_case(jobs, 2);
	ibp_coll_inproc_free(w);
}

Test(coll, allgather) { sweep(AG); }
Test(coll, reducescatter) { sweep(RS); }
Test(coll, allreduce) { sweep(AR); }
Test(coll, alltoall) { sweep(A2A); }
Test(coll, alltoallv) { sweep(A2AV); }

/* EXP must equal NONE bit for bit on the same inputs (the contract users
 * rely on to switch it on), also on data whose exponents do not fit the
 * table (escapes) and through the switcher's passthrough. */
Test(coll, exp_bit_identical_to_none)
{
	job_t a[4], b[4];
	for (int op = AG; op < NOPS; op++) {
		run_case(a, 4, op, IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, 30001);
		run_case(b, 4, op, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, 30001);
		for (int r = 0; r < 4; r++)
			cr_assert_eq(memcmp(a[r].out, b[r].out, out_elems(op, 30001, 4, r) * 2), 0, "%s rank %d",
				     op_names[op], r);
		/* A compressed call sent fewer bytes than it carried. */
		cr_assert_gt(b[0].stats.last_ratio, 1.05, "%s ratio %g", op_names[op], b[0].stats.last_ratio);
		cr_assert_eq(b[0].stats.compressed, 1);
		cr_assert_eq(a[0].stats.plain, 1);
		free_case(a, 4);
		free_case(b, 4);
	}
}

static void mismatch(ibp_dtype_t dt1, ibp_coll_codec_t c1, uint64_t n1)
{
	ibp_coll_inproc_t *w;
	job_t jobs[2];
	cr_assert_eq(ibp_coll_inproc_create(2, &w), IBP_OK);
	for (int r = 0; r < 2; r++) {
		memset(&jobs[r], 0, sizeof jobs[r]);
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = 2, .op = AG, .dt = r ? dt1 : IBP_DTYPE_BF16,
				   .codec = r ? c1 : IBP_COLL_CODEC_EXP, .n = r ? n1 : 100, .timeout_ms = 3000 };
		jobs[r].in = make_input(r, jobs[r].dt, jobs[r].n, 5);
		jobs[r].out = calloc(1, 2 * jobs[r].n * 4 + 1);
	}
	run_all(jobs, 2);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_INVALID_ARG, "rank %d: status %d: %s", r, jobs[r].st, jobs[r].err);
		cr_assert(strstr(jobs[r].err, "mismatch"), "rank %d: %s", r, jobs[r].err);
	}
	free_case(jobs, 2);
	ibp_coll_inproc_free(w);
}

Test(coll, mismatch_count) { mismatch(IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, 101); }
Test(coll, mismatch_count_smaller) { mismatch(IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, 99); }
Test(coll, mismatch_dtype) { mismatch(IBP_DTYPE_F16, IBP_COLL_CODEC_EXP, 100); }
Test(coll, mismatch_codec) { mismatch(IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, 100); }

Test(coll, mismatch_op)
{
	ibp_coll_inproc_t *w;
	job_t jobs[2];
	cr_assert_eq(ibp_coll_inproc_create(2, &w), IBP_OK);
	for (int r = 0; r < 2; r++) {
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = 2, .op = r ? AR : AG, .dt = IBP_DTYPE_F32,
				   .codec = IBP_COLL_CODEC_NONE, .n = 64, .timeout_ms = 3000 };
		jobs[r].in = make_input(r, IBP_DTYPE_F32, 64, 5);
		jobs[r].out = calloc(1, 64 * 4 * 2);
	}
	run_all(jobs, 2);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_INVALID_ARG, "rank %d: %s", r, jobs[r].err);
		cr_assert(strstr(jobs[r].err, "mismatch"), "rank %d: %s", r, jobs[r].err);
	}
	free_case(jobs, 2);
	ibp_coll_inproc_free(w);
}

/* Rank 2 never sends: the others time out instead of hanging, and the
 * broken communicator refuses the next call. */
/* ---- the native path ---- */

/* p ranks, one call each, every rank with the given native/policy/count
 * (rank 0's count and policy may differ). */
static void native_case(job_t *jobs, int p, int op, ibp_coll_codec_t codec, int policy0, uint64_t n0, uint64_t n)
{
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(p, &w), IBP_OK);
	for (int r = 0; r < p; r++) {
		uint64_t cnt = r ? n : n0;
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = p, .op = op, .dt = IBP_DTYPE_BF16, .codec = codec,
				   .n = cnt, .timeout_ms = 3000, .native = 1,
				   .policy = r ? IBP_COLL_POLICY_ALWAYS : policy0 };
		jobs[r].in = make_input(r, IBP_DTYPE_BF16, in_elems(op, cnt, p, r), cnt * 31 + (uint64_t)op);
		jobs[r].out = calloc(1, out_elems(op, cnt, p, r) * 2 + 1);
	}
	run_all(jobs, p);
	ibp_coll_inproc_free(w);
}

/* codec none on every rank: the transport's allgather runs, once per rank,
 * and the result is the algorithms' (bit for bit) */
Test(coll, native_allgather_when_every_rank_goes_plain)
{
	job_t jobs[3];
	native_case(jobs, 3, AG, IBP_COLL_CODEC_NONE, IBP_COLL_POLICY_ALWAYS, 1001, 1001);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(jobs[r].native_calls, 1, "rank %d: %d native calls", r, jobs[r].native_calls);
		cr_assert_eq(jobs[r].stats.native, 1);
		cr_assert_eq(jobs[r].stats.wire_bytes, 2 * 1001 * 2, "a native call counts what it sends");
	}
	check_case(jobs, 3);
	free_case(jobs, 3);
}

/* a transport without that native (allreduce here): the algorithms */
Test(coll, native_entry_missing_keeps_the_algorithms)
{
	job_t jobs[3];
	native_case(jobs, 3, AR, IBP_COLL_CODEC_NONE, IBP_COLL_POLICY_ALWAYS, 999, 999);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(jobs[r].stats.native, 0);
	}
	check_case(jobs, 3);
	free_case(jobs, 3);
}

/* one rank plain (policy never), the others compressing: not every rank
 * plain, so every rank runs the algorithms (mixed encodings) */
Test(coll, native_needs_every_rank_plain)
{
	job_t jobs[3];
	native_case(jobs, 3, AG, IBP_COLL_CODEC_EXP, IBP_COLL_POLICY_NEVER, 30001, 30001);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(jobs[r].native_calls, 0, "rank %d", r);
	}
	cr_assert_eq(jobs[0].stats.plain, 1);
	cr_assert_eq(jobs[1].stats.compressed, 1);
	check_case(jobs, 3);
	free_case(jobs, 3);
}

/* a mismatched call is refused on every rank by the check before the
 * native call (no rank runs it) */
Test(coll, native_mismatch_refused_everywhere)
{
	job_t jobs[3];
	native_case(jobs, 3, AG, IBP_COLL_CODEC_NONE, IBP_COLL_POLICY_ALWAYS, 1000, 1001);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_INVALID_ARG, "rank %d: %d %s", r, jobs[r].st, jobs[r].err);
		cr_assert(strstr(jobs[r].err, "mismatch") && strstr(jobs[r].err, "count 1000"), "rank %d: %s", r,
			  jobs[r].err);
		cr_assert_eq(jobs[r].native_calls, 0);
	}
	free_case(jobs, 3);
}

/* AllToAll in place (send == recv) on the algorithms: the result of the
 * out-of-place call (a received block must not overwrite one still to be
 * sent) */
Test(coll, alltoall_in_place)
{
	job_t a[3], b[3];
	run_case(a, 3, A2A, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, 3001);
	check_case(a, 3);
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(3, &w), IBP_OK);
	for (int r = 0; r < 3; r++) {
		b[r] = (job_t){ .w = w, .rank = r, .nranks = 3, .op = A2A, .dt = IBP_DTYPE_BF16,
				.codec = IBP_COLL_CODEC_EXP, .n = 3001, .policy = IBP_COLL_POLICY_ALWAYS };
		b[r].in = malloc(3 * 3001 * 2);
		memcpy(b[r].in, a[r].in, 3 * 3001 * 2);
		b[r].out = b[r].in; /* in place */
	}
	run_all(b, 3);
	for (int r = 0; r < 3; r++) {
		cr_assert_eq(b[r].st, IBP_OK, "rank %d: %s", r, b[r].err);
		cr_assert_eq(memcmp(b[r].in, a[r].out, 3 * 3001 * 2), 0, "rank %d: in place differs", r);
		free(b[r].in);
	}
	ibp_coll_inproc_free(w);
	free_case(a, 3);
}

Test(coll, dead_peer_times_out)
{
	ibp_coll_inproc_t *w;
	job_t jobs[3];
	cr_assert_eq(ibp_coll_inproc_create(3, &w), IBP_OK);
	for (int r = 0; r < 3; r++) {
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = 3, .op = AR, .dt = IBP_DTYPE_BF16,
				   .codec = IBP_COLL_CODEC_EXP, .n = 1000, .timeout_ms = 200, .silent = r == 2,
				   .repeat = 2 };
		jobs[r].in = make_input(r, IBP_DTYPE_BF16, 1000, 5);
		jobs[r].out = calloc(1, 2000);
	}
	run_all(jobs, 3);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_IO, "rank %d: %s", r, jobs[r].err);
		/* The second call is refused at once. */
		cr_assert(strstr(jobs[r].err, "broken"), "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(jobs[r].stats.calls, 2);
	}
	free_case(jobs, 3);
	ibp_coll_inproc_free(w);
}

Test(coll, dead_peer_timeout_detail)
{
	ibp_coll_inproc_t *w;
	job_t jobs[2];
	cr_assert_eq(ibp_coll_inproc_create(2, &w), IBP_OK);
	for (int r = 0; r < 2; r++) {
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = 2, .op = AG, .dt = IBP_DTYPE_F32,
				   .codec = IBP_COLL_CODEC_FP8, .n = 10, .timeout_ms = 100, .silent = r == 1 };
		jobs[r].in = make_input(r, IBP_DTYPE_F32, 10, 5);
		jobs[r].out = calloc(1, 80);
	}
	run_all(jobs, 2);
	cr_assert_eq(jobs[0].st, IBP_ERR_IO, "%s", jobs[0].err);
	cr_assert(strstr(jobs[0].err, "timeout"), "%s", jobs[0].err);
	free_case(jobs, 2);
	ibp_coll_inproc_free(w);
}

static job_t auto_run(int p, uint64_t n, double rate, int random_bits, ibp_coll_codec_t codec)
{
	ibp_coll_inproc_t *w;
	job_t jobs[4];
	cr_assert_eq(ibp_coll_inproc_create(p, &w), IBP_OK);
	for (int r = 0; r < p; r++) {
		jobs[r] = (job_t){ .w = w, .rank = r, .nranks = p, .op = AG, .dt = IBP_DTYPE_BF16, .codec = codec,
				   .n = n, .calibrate = 1, .policy = IBP_COLL_POLICY_AUTO, .rate = rate };
		jobs[r].in = make_input(r, IBP_DTYPE_BF16, n, 9);
		if (random_bits) {
			tu_rng_t g;
			tu_rng_seed(&g, (uint64_t)r);
			tu_fill_random(&g, jobs[r].in, n * 2);
		}
		jobs[r].out = calloc(1, n * 2 * (uint64_t)p);
	}
	run_all(jobs, p);
	for (int r = 0; r < p; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		for (int s = 0; s < p; s++)
			cr_assert_eq(memcmp((uint8_t *)jobs[r].out + (uint64_t)s * n * 2, jobs[s].in, n * 2), 0);
	}
	job_t j = jobs[0];
	free_case(jobs, p);
	ibp_coll_inproc_free(w);
	return j;
}

/* A slow link (250 KB/s): compression pays on Gaussian BF16 by a wide
 * margin, even with the codecs under ASan on a loaded machine (a 64 KiB
 * message: about 50 ms saved on the wire against 15 ms of coding at 7 and
 * 11 MB/s; at 1 MB/s and 256 KiB the coding cost more than it saved on a
 * loaded 2-core machine, and the model rightly said so); the model was
 * calibrated (latency, bandwidth near the throttle, codec speeds). */
Test(coll, switcher_compresses_on_slow_link)
{
	job_t j = auto_run(2, 1 << 15, 2.5e5, 0, IBP_COLL_CODEC_EXP);
	cr_assert_gt(j.stats.alpha_s, 0.0);
	cr_assert(j.stats.beta_Bps > 1.25e5 && j.stats.beta_Bps < 5e5, "beta %g", j.stats.beta_Bps);
	cr_assert_gt(j.stats.exp_enc_Bps, 0.0);
	cr_assert_gt(j.stats.fp8_dec_Bps, 0.0);
	cr_assert_eq(j.stats.last_decision, IBP_COLL_DECIDED_COMPRESS,
		     "decision %d: alpha %g s, beta %g B/s, exp enc %g dec %g B/s, ratio %g", (int)j.stats.last_decision,
		     j.stats.alpha_s, j.stats.beta_Bps, j.stats.exp_enc_Bps, j.stats.exp_dec_Bps, j.stats.last_ratio);
	cr_assert_eq(j.stats.compressed, 1);
	cr_assert_gt(j.stats.last_ratio, 1.1);
	cr_assert_lt(j.stats.wire_bytes, j.stats.logical_bytes);
}

/* Random bits do not compress: passthrough, whatever the link. The model
 * first asks whether the best BF16 ratio (11/16) could pay at all: on a
 * 4 MB/s link it does, unless the codecs are very slow (sanitizer builds),
 * and then the call is passed through as not worth it without sampling. */
Test(coll, switcher_passthrough_incompressible)
{
	const uint64_t n = 1 << 15;
	job_t j = auto_run(2, n, 4e6, 1, IBP_COLL_CODEC_EXP);
	const ibp_coll_stats_t m = j.stats;
	const double bytes = 2.0 * (double)n, plain = m.alpha_s + bytes / m.beta_Bps;
	const double best = m.alpha_s + bytes * 11.0 / 16.0 / m.beta_Bps + bytes / m.exp_enc_Bps + bytes / m.exp_dec_Bps;
	if (best < plain) {
		cr_assert_eq(m.last_decision, IBP_COLL_DECIDED_INCOMPRESSIBLE, "plain %g best %g", plain, best);
		cr_assert_eq(m.incompressible, 1);
	} else {
		cr_assert_eq(m.last_decision, IBP_COLL_DECIDED_NOT_WORTH, "plain %g best %g", plain, best);
		cr_assert_eq(m.not_worth, 1);
	}
	cr_assert_eq(j.stats.compressed, 0);
}

/* Unthrottled: the decision follows the calibrated model (on a quiet
 * machine shared memory beats the codec and the call goes plain; under
 * load the measured link can be slow enough for compression to pay, so
 * the test checks the model's verdict, not a fixed outcome). */
Test(coll, switcher_follows_model_unthrottled)
{
	uint64_t n = 1 << 18;
	job_t j = auto_run(2, n, 0, 0, IBP_COLL_CODEC_EXP);
	ibp_coll_stats_t m = j.stats;
	cr_assert(m.beta_Bps > 0 && m.exp_enc_Bps > 0 && m.exp_dec_Bps > 0);
	double bytes = 2.0 * (double)n, plain = m.alpha_s + bytes / m.beta_Bps;
	/* AllGather on 2 ranks: 1 step, 1 encode, 1 decode; ratio 1.40-1.45 on this data. */
	double comp_hi = m.alpha_s + bytes / 1.40 / m.beta_Bps + bytes / m.exp_enc_Bps + bytes / m.exp_dec_Bps;
	double comp_lo = m.alpha_s + bytes / 1.45 / m.beta_Bps + bytes / m.exp_enc_Bps + bytes / m.exp_dec_Bps;
	if (comp_lo >= plain)
		cr_assert_eq(m.last_decision, IBP_COLL_DECIDED_NOT_WORTH, "plain %g comp %g", plain, comp_lo);
	else if (comp_hi < plain)
		cr_assert_eq(m.last_decision, IBP_COLL_DECIDED_COMPRESS, "plain %g comp %g", plain, comp_hi);
	else
		cr_assert(m.last_decision == IBP_COLL_DECIDED_COMPRESS || m.last_decision == IBP_COLL_DECIDED_NOT_WORTH);
	cr_assert_eq(m.compressed + m.not_worth, 1);
}

/* Rank 0's communicator of a p-rank in-process world, not calibrated (the
 * tests set its model by hand); the other ranks make none. */
static ibp_coll_comm_t *rank0_comm(int p, ibp_coll_inproc_t **w)
{
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = NULL;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	cr_assert_eq(ibp_coll_inproc_create(p, w), IBP_OK);
	cr_assert_eq(ibp_coll_inproc_transport(*w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_OK);
	return c;
}

/* The switcher against a model set by hand (deterministic): when not even
 * the exponent codec's best ratio would pay, the call goes plain WITHOUT
 * the sample encode (random bits would otherwise read "incompressible");
 * when it could pay, the sample decides. */
Test(coll, switcher_skips_sample_when_codec_cannot_pay)
{
	ibp_coll_inproc_t *w;
	ibp_coll_comm_t *c = rank0_comm(2, &w);
	const uint64_t n = 1 << 15;
	uint16_t *noise = malloc(n * 2);
	tu_rng_t g;
	tu_rng_seed(&g, 5);
	tu_fill_random(&g, noise, n * 2);
	void *gauss = make_input(0, IBP_DTYPE_BF16, n, 9);
	c->st.alpha_s = 1e-6;
	c->st.exp_enc_Bps = c->st.exp_dec_Bps = 2e9;
	/* A fast link (20 GB/s): bf16 at best 11/16 of the bytes saves 5/16 x 32 KiB / 20 GB/s = 0.5 us
	 * per step, the codec costs 2 x 16 us. */
	c->st.beta_Bps = 2e10;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, noise, n / 2, n, 1, 1, 1), COLL_ENC_RAW);
	cr_assert_eq(c->st.last_decision, IBP_COLL_DECIDED_NOT_WORTH);
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n / 2, n, 1, 1, 1), COLL_ENC_RAW);
	cr_assert_eq(c->st.last_decision, IBP_COLL_DECIDED_NOT_WORTH);
	/* A slow link (10 MB/s): it could pay, so the sample decides. */
	c->st.beta_Bps = 1e7;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, noise, n / 2, n, 1, 1, 1), COLL_ENC_RAW);
	cr_assert_eq(c->st.last_decision, IBP_COLL_DECIDED_INCOMPRESSIBLE);
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n / 2, n, 1, 1, 1), COLL_ENC_EXP);
	cr_assert_eq(c->st.last_decision, IBP_COLL_DECIDED_COMPRESS);
	cr_assert_eq(c->st.not_worth, 2);
	cr_assert_eq(c->st.incompressible, 1);
	cr_assert_eq(c->st.compressed, 1);
	free(noise);
	free(gauss);
	ibp_coll_comm_free(c);
	ibp_coll_inproc_free(w);
}

/* The exponents' coding (issue 40) against a model set by hand: rANS where
 * its smaller messages outweigh its slower codec (a slow link), the table
 * code on a fast one, never without calibrated rANS speeds, never for
 * device buffers; decided per call. A message coded either way decodes
 * to the same bytes, rANS's about 5% smaller. */
Test(coll, switcher_picks_rans_exponents_on_slow_links)
{
	ibp_coll_inproc_t *w;
	ibp_coll_comm_t *c = rank0_comm(2, &w);
	const uint64_t n = 1 << 15;
	void *gauss = make_input(0, IBP_DTYPE_BF16, n, 9);
	c->st.alpha_s = 1e-6;
	c->st.exp_enc_Bps = 4e9;
	c->st.exp_dec_Bps = 8e9;
	c->rans_enc_Bps = 8e8;
	c->rans_dec_Bps = 1.3e9;
	/* 1 MB/s: rANS saves about 5% of 45 KiB (2.3 ms) for 0.1 ms more codec time */
	c->st.beta_Bps = 1e6;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n, n, 1, 1, 1), COLL_ENC_EXP);
	cr_assert_eq(c->exp_table, IBP_EXP_TABLE_RANS);
	/* 300 MB/s: the exp code pays (saves 65 us for 24), rANS does not (7 us for 110 more) */
	c->st.beta_Bps = 3e8;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n, n, 1, 1, 1), COLL_ENC_EXP);
	cr_assert_eq(c->exp_table, IBP_EXP_TABLE_SIGMA);
	/* no rANS speeds (not calibrated for it): the table code */
	c->st.beta_Bps = 1e6;
	c->rans_enc_Bps = 0;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n, n, 1, 1, 1), COLL_ENC_EXP);
	cr_assert_eq(c->exp_table, IBP_EXP_TABLE_SIGMA);
	c->rans_enc_Bps = 8e8;
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, gauss, n, n, 1, 1, 1), COLL_ENC_EXP);
	cr_assert_eq(c->exp_table, IBP_EXP_TABLE_RANS);
	/* FP8 calls: the exponents' coding is reset, whatever came before */
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_FP8, IBP_DTYPE_BF16, gauss, n, n, 1, 1, 1), COLL_ENC_FP8);
	cr_assert_eq(c->exp_table, IBP_EXP_TABLE_SIGMA);

	/* both codings through the message layer: same bytes back, rANS smaller */
	uint64_t cap = 0, b_tab = 0, b_rans = 0;
	cr_assert_eq(ibpi_coll_msg_cap(IBP_DTYPE_BF16, n, &cap), IBP_OK);
	uint8_t *m1 = malloc(cap), *m2 = malloc(cap);
	uint16_t *back = malloc(n * 2);
	coll_hdr_t h = { COLL_MAGIC, COLL_OP_AG, IBP_COLL_CODEC_EXP, IBP_DTYPE_BF16, COLL_ENC_EXP, n, n, 0, 0 };
	cr_assert_eq(ibpi_coll_encode(&h, gauss, m1, cap, 1, 4, IBP_EXP_TABLE_SIGMA, &b_tab), IBP_OK);
	cr_assert_eq(ibpi_coll_encode(&h, gauss, m2, cap, 1, 4, IBP_EXP_TABLE_RANS, &b_rans), IBP_OK);
	cr_assert_lt((double)b_rans, 0.98 * (double)b_tab, "rANS %llu bytes, table %llu", (unsigned long long)b_rans,
		     (unsigned long long)b_tab);
	cr_assert_eq(ibpi_coll_decode(&h, m2, b_rans, back, 1), IBP_OK);
	cr_assert_eq(memcmp(back, gauss, n * 2), 0);
	free(m1);
	free(m2);
	free(back);
	free(gauss);
	ibp_coll_comm_free(c);
	ibp_coll_inproc_free(w);
}

/* ibp_coll_comm_plain against a model set by hand, 3 ranks (the ops'
 * step and codec counts differ only from 3 on): with bf16 at best 11/16 of
 * the bytes and both codecs at E, AllGather (2 steps, 1 encode, 2 decodes)
 * could pay below beta = 0.208 E, ReduceScatter and AllToAll (2, 2, 2)
 * below 0.156 E, AllReduce (4, 3, 4) below 0.179 E. At 0.19 E only
 * AllGather may compress. Counts nothing; its answer is the sampled
 * switcher's for a call that goes plain. */
Test(coll, plain_answers_without_the_data)
{
	ibp_coll_inproc_t *w;
	ibp_coll_comm_t *c = rank0_comm(3, &w);
	const ibp_dtype_t bf = IBP_DTYPE_BF16;
	int pl = -1;
	/* not calibrated: the data decide (exp), or nothing to decide (none) */
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLREDUCE, 1000, bf, IBP_COLL_CODEC_EXP, &pl), IBP_OK);
	cr_assert_eq(pl, 0);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLREDUCE, 1000, bf, IBP_COLL_CODEC_NONE, &pl), IBP_OK);
	cr_assert_eq(pl, 1);
	c->st.alpha_s = 1e-5;
	c->st.exp_enc_Bps = c->st.exp_dec_Bps = 1e9;
	c->st.beta_Bps = 1.9e8;
	const ibp_coll_op_t ops[4] = { IBP_COLL_OP_ALLGATHER, IBP_COLL_OP_REDUCESCATTER, IBP_COLL_OP_ALLREDUCE,
				       IBP_COLL_OP_ALLTOALL };
	const int want[4] = { 0, 1, 1, 1 };
	for (int k = 0; k < 4; k++) {
		pl = -1;
		cr_assert_eq(ibp_coll_comm_plain(c, ops[k], 3000, bf, IBP_COLL_CODEC_EXP, &pl), IBP_OK);
		cr_assert_eq(pl, want[k], "op %d", k);
	}
	/* the switcher agrees: a call plain() calls plain is not worth it whatever its data */
	void *gauss = make_input(0, bf, 3000, 9);
	cr_assert_eq(ibpi_coll_decide(c, IBP_COLL_CODEC_EXP, bf, gauss, 1000, 1000, 4, 3, 4), COLL_ENC_RAW);
	cr_assert_eq(c->st.last_decision, IBP_COLL_DECIDED_NOT_WORTH);
	c->st.not_worth = 0;
	/* a slower link: every op may compress */
	c->st.beta_Bps = 1e8;
	for (int k = 0; k < 4; k++) {
		cr_assert_eq(ibp_coll_comm_plain(c, ops[k], 3000, bf, IBP_COLL_CODEC_EXP, &pl), IBP_OK);
		cr_assert_eq(pl, 0, "op %d", k);
	}
	/* lossy codecs by request: never plain, unless the policy says so */
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLREDUCE, 3000, bf, IBP_COLL_CODEC_DYNAMIQ, &pl), IBP_OK);
	cr_assert_eq(pl, 0);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLTOALL, 3000, bf, IBP_COLL_CODEC_LSQ, &pl), IBP_OK);
	cr_assert_eq(pl, 0);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 3000, bf, IBP_COLL_CODEC_FP8, &pl), IBP_OK);
	cr_assert_eq(pl, 0);
	cr_assert_eq(ibp_coll_comm_set_policy(c, IBP_COLL_POLICY_NEVER), IBP_OK);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLREDUCE, 3000, bf, IBP_COLL_CODEC_DYNAMIQ, &pl), IBP_OK);
	cr_assert_eq(pl, 1);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 3000, bf, IBP_COLL_CODEC_EXP, &pl), IBP_OK);
	cr_assert_eq(pl, 1);
	/* policy ALWAYS on the fast link: compressed */
	c->st.beta_Bps = 1e12;
	cr_assert_eq(ibp_coll_comm_set_policy(c, IBP_COLL_POLICY_ALWAYS), IBP_OK);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 3000, bf, IBP_COLL_CODEC_EXP, &pl), IBP_OK);
	cr_assert_eq(pl, 0);
	/* bad arguments */
	cr_assert_eq(ibp_coll_comm_plain(NULL, IBP_COLL_OP_ALLGATHER, 1, bf, IBP_COLL_CODEC_EXP, &pl),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 1, bf, IBP_COLL_CODEC_EXP, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, (ibp_coll_op_t)9, 1, bf, IBP_COLL_CODEC_EXP, &pl), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 1, IBP_DTYPE_F64, IBP_COLL_CODEC_EXP, &pl),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 1, bf, (ibp_coll_codec_t)6, &pl),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLGATHER, 1, bf, IBP_COLL_CODEC_DYNAMIQ, &pl),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_plain(c, IBP_COLL_OP_ALLREDUCE, 1, bf, IBP_COLL_CODEC_LSQ, &pl), IBP_ERR_INVALID_ARG);
	ibp_coll_stats_t st;
	cr_assert_eq(ibp_coll_comm_stats(c, &st), IBP_OK);
	cr_assert_eq(st.calls + st.plain + st.compressed + st.not_worth + st.incompressible, 0, "plain() counts nothing");
	free(gauss);
	ibp_coll_comm_free(c);
	ibp_coll_inproc_free(w);
}

Test(coll, bad_arguments)
{
	ibp_coll_inproc_t *w;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c;
	cr_assert_eq(ibp_coll_inproc_create(0, &w), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	cr_assert_eq(ibp_coll_inproc_transport(w, 1, &t), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, NULL, &c), IBP_OK);
	float x[4] = { 1, 2, 3, 4 }, y[4];
	int stream;
	cr_assert_eq(ibp_coll_allgather(x, y, 4, IBP_DTYPE_F32, IBP_COLL_CODEC_EXP, c, &stream), IBP_ERR_UNSUPPORTED);
	cr_assert_eq(ibp_coll_allgather(x, y, 4, IBP_DTYPE_I32, IBP_COLL_CODEC_EXP, c, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_allgather(x, y, 4, IBP_DTYPE_F32, (ibp_coll_codec_t)7, c, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_allgather(NULL, y, 4, IBP_DTYPE_F32, IBP_COLL_CODEC_EXP, c, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_set_policy(c, (ibp_coll_policy_t)9), IBP_ERR_INVALID_ARG);
	ibp_coll_comm_free(c);
	/* One rank: a copy (fresh comm; the failed call above broke the old one). */
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, NULL, &c), IBP_OK);
	cr_assert_eq(ibp_coll_allreduce(x, y, 4, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_FP8, c, NULL), IBP_OK);
	cr_assert_eq(memcmp(x, y, sizeof x), 0);
	ibp_coll_comm_free(c);
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.timeout_ms = 0;
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_ERR_INVALID_ARG);
	cr_assert_null(c);
	/* an async table without all four functions */
	ibp_coll_async_t half = *t.async;
	half.cancel = NULL;
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	t.async = &half;
	cr_assert_eq(ibp_coll_comm_create(&t, NULL, &c), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "async"), "%s", ibp_last_error());
	cr_assert_null(c);
	ibp_coll_inproc_free(w);
}

/* ---- corrupt payloads: a transport that damages what rank 0 receives ---- */

typedef struct evil {
	ibp_coll_transport_t inner;
	tu_rng_t g;
	int mode; /* 0 flip a byte, 1 truncate, 2 flip a header byte */
	uint64_t damaged_async; /* receives damaged through the async table */
	int async_only;         /* blocking receives (DynamiQ's statistics) arrive intact, and only the
				 * first nonblocking one is damaged (one piece, not every piece) */
} evil_t;

static void damage(evil_t *e, uint8_t *b, uint64_t *rbytes)
{
	if (e->mode == 0)
		b[tu_below(&e->g, *rbytes)] ^= (uint8_t)(1u << tu_below(&e->g, 8));
	else if (e->mode == 1)
		*rbytes = tu_below(&e->g, *rbytes);
	else
		b[tu_below(&e->g, *rbytes < 32 ? *rbytes : 32)] ^= (uint8_t)(1u + tu_below(&e->g, 255));
}

static ibp_status_t evil_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				  uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	evil_t *e = ctx;
	ibp_status_t s = e->inner.sendrecv(e->inner.ctx, dst, sbuf, sbytes, src, rbuf, rcap, rbytes, timeout_ms);
	if (s != IBP_OK || src < 0 || *rbytes == 0 || e->async_only)
		return s;
	damage(e, rbuf, rbytes);
	return IBP_OK;
}

/* The same damage on nonblocking receives (the pipelined rings). */
typedef struct evil_req {
	void *inner;
	uint8_t *buf; /* a receive's buffer; NULL: a send */
} evil_req_t;

static ibp_status_t evil_post(evil_t *e, int peer, void *buf, uint64_t bytes, int recv, void **req)
{
	evil_req_t *q = calloc(1, sizeof *q);
	cr_assert(q);
	q->buf = recv ? buf : NULL;
	ibp_status_t s = recv ? e->inner.async->irecv(e->inner.ctx, peer, buf, bytes, &q->inner)
			      : e->inner.async->isend(e->inner.ctx, peer, buf, bytes, &q->inner);
	if (s != IBP_OK)
		free(q);
	else
		*req = q;
	return s;
}

static ibp_status_t evil_isend(void *ctx, int dst, const void *buf, uint64_t bytes, void **req)
{
	return evil_post(ctx, dst, (void *)buf, bytes, 0, req);
}

static ibp_status_t evil_irecv(void *ctx, int src, void *buf, uint64_t cap, void **req)
{
	return evil_post(ctx, src, buf, cap, 1, req);
}

static ibp_status_t evil_test(void *ctx, void *req, int *done, uint64_t *bytes)
{
	evil_t *e = ctx;
	evil_req_t *q = req;
	ibp_status_t s = e->inner.async->test(e->inner.ctx, q->inner, done, bytes);
	if (s != IBP_OK || *done) {
		if (s == IBP_OK && q->buf && *bytes && !(e->async_only && e->damaged_async)) {
			damage(e, q->buf, bytes);
			e->damaged_async++;
		}
		free(q);
	}
	return s;
}

static int evil_cancel(void *ctx, void *req)
{
	evil_t *e = ctx;
	evil_req_t *q = req;
	int r = e->inner.async->cancel(e->inner.ctx, q->inner);
	free(q);
	return r;
}

static const ibp_coll_async_t evil_async = { evil_isend, evil_irecv, evil_test, evil_cancel };

static void evil_destroy(void *ctx)
{
	evil_t *e = ctx;
	e->inner.destroy(e->inner.ctx);
	free(e);
}

typedef struct evil_job {
	ibp_coll_inproc_t *w;
	int rank, mode, op, pipelined;
	uint64_t seed;
	ibp_coll_codec_t codec;
	ibp_status_t st;
} evil_job_t;

static void *evil_run(void *arg)
{
	evil_job_t *j = arg;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = NULL;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	o.policy = IBP_COLL_POLICY_ALWAYS;
	/* Rank 1 times out once rank 0 has given up; keep that short. */
	o.timeout_ms = j->rank ? 150 : 2000;
	cr_assert_eq(ibp_coll_inproc_transport(j->w, j->rank, &t), IBP_OK);
	evil_t *e = NULL;
	if (j->rank == 0) {
		e = calloc(1, sizeof *e);
		cr_assert(e);
		e->inner = t;
		e->mode = j->mode;
		e->async_only = j->pipelined && j->codec == IBP_COLL_CODEC_DYNAMIQ;
		tu_rng_seed(&e->g, j->seed);
		t.ctx = e;
		t.sendrecv = evil_sendrecv;
		t.destroy = evil_destroy;
		t.async = j->pipelined ? &evil_async : NULL;
	}
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_OK);
	uint64_t n = 777;
	void *in = make_input(j->rank, IBP_DTYPE_BF16, 2 * n, j->seed), *out = calloc(2 * n, 2);
	if (j->op == AG)
		j->st = ibp_coll_allgather(in, out, n, IBP_DTYPE_BF16, j->codec, c, NULL);
	else
		j->st = ibp_coll_allreduce(in, out, 2 * n, IBP_DTYPE_BF16, IBP_COLL_SUM, j->codec, c, NULL);
	if (e) /* the pipelined sweep really takes the nonblocking path */
		cr_assert(j->pipelined ? e->damaged_async > 0 : e->damaged_async == 0, "%llu receives damaged async",
			  (unsigned long long)e->damaged_async);
	free(in);
	free(out);
	ibp_coll_comm_free(c);
	return NULL;
}

/* Whatever the damage, rank 0 returns a status (never crashes, never reads
 * out of bounds under ASan); damage to the header or a truncation is
 * always caught. */
static void corrupt_sweep(int pipelined, int dq)
{
	int caught[3] = { 0 }, runs[3] = { 0 };
	/* 777 elements a chunk in pieces of 32 bf16: 25 pieces (whole chunks otherwise) */
	setenv("IBP_COLL_PIECE_BYTES", pipelined ? "64" : "0", 1);
	for (int it = 0; it < 72; it++) {
		ibp_coll_inproc_t *w;
		cr_assert_eq(ibp_coll_inproc_create(2, &w), IBP_OK);
		evil_job_t j[2];
		pthread_t th[2];
		int mode = it % 3;
		for (int r = 0; r < 2; r++) {
			j[r] = (evil_job_t){ w, r, mode, dq || (it / 3) % 2 ? AR : AG, pipelined, (uint64_t)it,
					     dq ? IBP_COLL_CODEC_DYNAMIQ : codecs[(it / 6) % 3], IBP_OK };
			cr_assert_eq(pthread_create(&th[r], NULL, evil_run, &j[r]), 0);
		}
		for (int r = 0; r < 2; r++)
			pthread_join(th[r], NULL);
		ibp_status_t s = j[0].st;
		cr_assert(s == IBP_OK || s == IBP_ERR_CORRUPT || s == IBP_ERR_INVALID_ARG || s == IBP_ERR_IO,
			  "iteration %d: status %d", it, s);
		runs[mode]++;
		caught[mode] += s != IBP_OK;
		if (mode == 1 || mode == 2)
			cr_assert_neq(s, IBP_OK, "iteration %d (mode %d, %s, codec %s): damage not caught", it, mode,
				      op_names[j[0].op], ibp_coll_codec_name(j[0].codec));
		ibp_coll_inproc_free(w);
	}
	cr_assert_eq(caught[1], runs[1]);
	cr_assert_eq(caught[2], runs[2]);
}

Test(coll, corrupt_messages) { corrupt_sweep(0, 0); }
Test(coll, corrupt_messages_pipelined) { corrupt_sweep(1, 0); }
/* DynamiQ's AllReduce: its statistics, then pieces of SGs (7 SGs a call,
 * pieces of 64 bytes: 1 SG or none each) or whole chunks. */
Test(coll, corrupt_messages_dynamiq) { corrupt_sweep(0, 1); }
Test(coll, corrupt_messages_dynamiq_pipelined) { corrupt_sweep(1, 1); }

/* The persistent helper thread (src/coll/helper.c): many jobs through one
 * thread in order, each finished when wait returns; a second post before
 * wait is refused; stop runs a job still posted, then joins. */
typedef struct hjob {
	int n;
	pthread_t seen;
} hjob_t;

static void hjob_run(void *arg)
{
	hjob_t *j = arg;
	j->n++;
	j->seen = pthread_self();
}

Test(coll, helper_thread_handoff)
{
	coll_helper_t *h;
	cr_assert_eq(ibpi_coll_helper_start(&h), IBP_OK, "%s", ibp_last_error());
	hjob_t j = { 0 };
	pthread_t first = pthread_self(); /* replaced by the helper's id at job 0 */
	for (int k = 0; k < 1000; k++) {
		cr_assert_eq(ibpi_coll_helper_post(h, hjob_run, &j), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(ibpi_coll_helper_wait(h), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(j.n, k + 1, "job %d not finished when wait returned", k);
		if (k == 0)
			first = j.seen;
		cr_assert(pthread_equal(j.seen, first), "job %d ran on another thread", k);
		cr_assert(!pthread_equal(j.seen, pthread_self()));
	}
	cr_assert_eq(ibpi_coll_helper_wait(h), IBP_OK); /* nothing posted: returns at once */
	cr_assert_eq(ibpi_coll_helper_post(h, hjob_run, &j), IBP_OK);
	cr_assert_eq(ibpi_coll_helper_post(h, hjob_run, &j), IBP_ERR_INTERNAL);
	cr_assert_eq(ibpi_coll_helper_stop(h), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(j.n, 1001, "stop dropped the posted job");
	cr_assert_eq(ibpi_coll_helper_stop(NULL), IBP_OK);
}

/* One communicator, calls of changing sizes and ops: the working buffers it
 * keeps between calls (ibpi_coll_ws) hold the last call's bytes, which no
 * call may read. EXP against NONE on the same communicator, pipelined
 * (pieces of 256 bytes) and whole. */
typedef struct reuse_job {
	ibp_coll_inproc_t *w;
	int rank;
	ibp_status_t st;
	char err[256];
} reuse_job_t;

static void *reuse_run(void *arg)
{
	reuse_job_t *j = arg;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = NULL;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	o.policy = IBP_COLL_POLICY_ALWAYS;
	cr_assert_eq(ibp_coll_inproc_transport(j->w, j->rank, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_OK);
	const uint64_t sizes[] = { 30000, 301, 60000, 7, 4099 };
	for (int k = 0; k < 10 && j->st == IBP_OK; k++) {
		uint64_t n = sizes[k % 5];
		void *in = make_input(j->rank, IBP_DTYPE_BF16, 3 * n, n + (uint64_t)k);
		uint16_t *a = calloc(3 * n, 2), *b = calloc(3 * n, 2);
		cr_assert(a && b);
		if (k < 5) {
			j->st = ibp_coll_allreduce(in, a, n, IBP_DTYPE_BF16, IBP_COLL_SUM, IBP_COLL_CODEC_NONE, c, NULL);
			if (j->st == IBP_OK)
				j->st = ibp_coll_allreduce(in, b, n, IBP_DTYPE_BF16, IBP_COLL_SUM, IBP_COLL_CODEC_EXP, c, NULL);
			if (j->st == IBP_OK)
				cr_assert_eq(memcmp(a, b, n * 2), 0, "rank %d: allreduce of %llu", j->rank, (unsigned long long)n);
		} else {
			j->st = ibp_coll_allgather(in, a, n, IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, c, NULL);
			if (j->st == IBP_OK)
				j->st = ibp_coll_allgather(in, b, n, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, c, NULL);
			if (j->st == IBP_OK)
				cr_assert_eq(memcmp(a, b, 3 * n * 2), 0, "rank %d: allgather of %llu", j->rank,
					     (unsigned long long)n);
		}
		if (j->st != IBP_OK)
			snprintf(j->err, sizeof j->err, "%s", ibp_last_error());
		free(in);
		free(a);
		free(b);
	}
	ibp_coll_comm_free(c);
	return NULL;
}

static void reuse_sweep(const char *piece)
{
	setenv("IBP_COLL_PIECE_BYTES", piece, 1);
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(3, &w), IBP_OK);
	reuse_job_t j[3];
	pthread_t th[3];
	for (int r = 0; r < 3; r++) {
		j[r] = (reuse_job_t){ .w = w, .rank = r };
		cr_assert_eq(pthread_create(&th[r], NULL, reuse_run, &j[r]), 0);
	}
	for (int r = 0; r < 3; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < 3; r++)
		cr_assert_eq(j[r].st, IBP_OK, "rank %d: %s", r, j[r].err);
	ibp_coll_inproc_free(w);
}

Test(coll, buffers_reused_across_calls) { reuse_sweep("0"); }
Test(coll, pipelined_buffers_reused_across_calls) { reuse_sweep("256"); }

/* Repeated AllGathers on one communicator whose blocks are decoded on the
 * helper (4 ranks, EXP blocks over 32 KiB coded): the same bytes as NONE
 * every time (the helper is made once and reused). */
Test(coll, allgather_overlap_repeated_bit_identical)
{
	job_t a[4], b[4];
	uint64_t n = 40000;
	run_case(a, 4, AG, IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, n);
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(4, &w), IBP_OK);
	for (int r = 0; r < 4; r++) {
		b[r] = (job_t){ .w = w, .rank = r, .nranks = 4, .op = AG, .dt = IBP_DTYPE_BF16,
				.codec = IBP_COLL_CODEC_EXP, .n = n, .policy = IBP_COLL_POLICY_ALWAYS, .repeat = 5 };
		b[r].in = make_input(r, IBP_DTYPE_BF16, n, n * 31 + (uint64_t)AG);
		b[r].out = calloc(1, 4 * n * 2 + 1);
		cr_assert(b[r].out);
	}
	run_all(b, 4);
	for (int r = 0; r < 4; r++) {
		cr_assert_eq(b[r].st, IBP_OK, "rank %d: %s", r, b[r].err);
		cr_assert_eq(memcmp(a[r].out, b[r].out, 4 * n * 2), 0, "rank %d differs from NONE", r);
		cr_assert_eq(b[r].stats.compressed, 5);
		cr_assert_gt(b[r].stats.wire_bytes * 1.05, 0);
		cr_assert_lt(b[r].stats.wire_bytes * 1.05, (double)b[r].stats.logical_bytes, "rank %d: not compressed",
			     r);
	}
	ibp_coll_inproc_free(w);
	free_case(a, 4);
	free_case(b, 4);
}
