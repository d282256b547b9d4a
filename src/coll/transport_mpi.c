/* transport_mpi.c - the MPI transport (libibp_coll_mpi): sendrecv is an
 * Irecv + Isend pair polled with MPI_Testall until both finish or the
 * deadline passes, on a duplicate of the caller's communicator whose
 * errors return instead of aborting. Its native collectives (ibp/coll.h)
 * are MPI's own nonblocking collectives, polled the same way: a plain
 * call runs at MPI's speed. BF16/F16 sums use one commutative user MPI_Op
 * per dtype that adds in float32 and rounds as the algorithms do (MPI has
 * no 16-bit float types); F32 sums are MPI_SUM on MPI_FLOAT. A large
 * AllReduce below 4 ranks asks Open MPI's libnbc for its ring for that
 * call (nbc_ring: an MPI_T control variable, set and put back). */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "coll/coll_internal.h"
#include "util/error.h"

#define TAG 0x1b9c

typedef struct mctx {
	MPI_Comm comm;
} mctx_t;

static ibp_status_t mpi_fail(int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		len = 0;
	msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
	return ibpi_fail(IBP_ERR_IO, "coll: mpi: %s failed: %s", what, msg);
}

static ibp_status_t m_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
			       uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Request req[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
	MPI_Status st[2];
	int rc;
	if (dst >= 0 && sbytes > INT_MAX)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: mpi: a %llu-byte message exceeds MPI's int count",
				(unsigned long long)sbytes);
	if (src >= 0 && (rc = MPI_Irecv(rbuf, rcap > INT_MAX ? INT_MAX : (int)rcap, MPI_BYTE, src, TAG, m->comm,
					&req[0])) != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Irecv");
	if (dst >= 0 && (rc = MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, dst, TAG, m->comm, &req[1])) != MPI_SUCCESS) {
		/* Cleanup on the way out of a failure: the Isend error is what the
		 * caller gets; a failing cancel or free adds nothing to it. */
		if (req[0] != MPI_REQUEST_NULL) {
			(void)MPI_Cancel(&req[0]);
			(void)MPI_Request_free(&req[0]);
		}
		return mpi_fail(rc, "MPI_Isend");
	}
	struct timespec t0, now, nap = { 0, 20000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int done = 0;
		rc = MPI_Testall(2, req, &done, st);
		if (rc != MPI_SUCCESS) {
			if (rc == MPI_ERR_IN_STATUS && src >= 0 && st[0].MPI_ERROR == MPI_ERR_TRUNCATE)
				return ibpi_fail(IBP_ERR_INVALID_ARG,
						"coll: mpi: mismatch: message from rank %d exceeds the expected %llu bytes",
						src, (unsigned long long)rcap);
			return mpi_fail(rc == MPI_ERR_IN_STATUS ? st[src >= 0 ? 0 : 1].MPI_ERROR : rc, "MPI_Testall");
		}
		if (done)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t ms = (int64_t)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms > timeout_ms) {
			/* The communicator is broken from here on; MPI may still
			 * complete the requests, which nobody waits for. */
			for (int i = 0; i < 2; i++)
				if (req[i] != MPI_REQUEST_NULL) {
					if (i == 0) /* results ignored: the timeout is the error */
						(void)MPI_Cancel(&req[i]);
					(void)MPI_Request_free(&req[i]);
				}
			return ibpi_fail(IBP_ERR_IO, "coll: mpi: timeout after %lld ms (send to %d, receive from %d)",
					(long long)timeout_ms, dst, src);
		}
		/* Yield for the first second (Open MPI moves TCP bytes only inside
		 * MPI_Test: a nap stalls a long transfer; yielding lets ranks that
		 * share a core run), then nap so a long wait costs no CPU. */
		if (ms < 1000)
			sched_yield();
		else
			nanosleep(&nap, NULL);
	}
	if (src >= 0) {
		int cnt = 0;
		if ((rc = MPI_Get_count(&st[0], MPI_BYTE, &cnt)) != MPI_SUCCESS)
			return mpi_fail(rc, "MPI_Get_count");
		*rbytes = (uint64_t)cnt;
	}
	return IBP_OK;
}

/* ---- nonblocking messages (ibp_coll_async_t) ---- */

typedef struct mreq {
	MPI_Request r;
	int recv, src;
	uint64_t cap;
} mreq_t;

static ibp_status_t m_post(mctx_t *m, int peer, void *buf, uint64_t bytes, int recv, void **req)
{
	if (bytes > INT_MAX && !recv)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: mpi: a %llu-byte message exceeds MPI's int count",
				(unsigned long long)bytes);
	mreq_t *q = malloc(sizeof *q);
	if (!q)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: mpi: out of memory for a request");
	q->recv = recv;
	q->src = peer;
	q->cap = bytes;
	int n = bytes > INT_MAX ? INT_MAX : (int)bytes;
	int rc = recv ? MPI_Irecv(buf, n, MPI_BYTE, peer, TAG, m->comm, &q->r)
		      : MPI_Isend(buf, n, MPI_BYTE, peer, TAG, m->comm, &q->r);
	if (rc != MPI_SUCCESS) {
		free(q);
		return mpi_fail(rc, recv ? "MPI_Irecv" : "MPI_Isend");
	}
	*req = q;
	return IBP_OK;
}

static ibp_status_t m_isend(void *ctx, int dst, const void *buf, uint64_t bytes, void **req)
{
	return m_post(ctx, dst, (void *)buf, bytes, 0, req); /* MPI_Isend's buffer is const in MPI-3 */
}

static ibp_status_t m_irecv(void *ctx, int src, void *buf, uint64_t cap, void **req)
{
	return m_post(ctx, src, buf, cap, 1, req);
}

static ibp_status_t m_test(void *ctx, void *req, int *done, uint64_t *bytes)
{
	(void)ctx;
	mreq_t *q = req;
	MPI_Status st;
	int rc = MPI_Test(&q->r, done, &st), cnt = 0;
	ibp_status_t s = IBP_OK;
	if (rc != MPI_SUCCESS) {
		/* Open MPI reports a truncated receive in the status or as the return value */
		int e = rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc, cls = e;
		(void)MPI_Error_class(e, &cls);
		if (q->recv && cls == MPI_ERR_TRUNCATE)
			s = ibpi_fail(IBP_ERR_INVALID_ARG,
				     "coll: mpi: mismatch: message from rank %d exceeds the expected %llu bytes", q->src,
				     (unsigned long long)q->cap);
		else
			s = mpi_fail(e, q->recv ? "MPI_Test (receive)" : "MPI_Test (send)");
		if (q->r != MPI_REQUEST_NULL) /* results ignored: the failure is what the caller gets */
			(void)MPI_Request_free(&q->r);
		free(q);
		return s;
	}
	if (!*done)
		return IBP_OK;
	if (q->recv && (rc = MPI_Get_count(&st, MPI_BYTE, &cnt)) != MPI_SUCCESS)
		s = mpi_fail(rc, "MPI_Get_count");
	else if (q->recv)
		*bytes = (uint64_t)cnt;
	free(q);
	return s;
}

/* A receive is cancelled and waited for (briefly); a send cannot be
 * recalled (MPI-4 deprecates cancelling sends): given a moment to finish,
 * else left to MPI with its buffer. */
static int m_cancel(void *ctx, void *req)
{
	(void)ctx;
	mreq_t *q = req;
	if (q->recv)
		(void)MPI_Cancel(&q->r); /* a failure shows as a request that does not finish */
	struct timespec t0, now, nap = { 0, 50000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int done = 0;
		if (MPI_Test(&q->r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) {
			free(q);
			return 1; /* finished, cancelled or failed: MPI holds the buffer no more */
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > 100) {
			(void)MPI_Request_free(&q->r);
			free(q);
			return 0;
		}
		nanosleep(&nap, NULL);
	}
}

static const ibp_coll_async_t mpi_async = { m_isend, m_irecv, m_test, m_cancel };

/* Waits for a nonblocking collective until the deadline. A nonblocking
 * collective can be neither cancelled nor freed: after a timeout the
 * request is left to MPI and the communicator is broken (the caller's
 * communicator records it). */
static ibp_status_t wait_req(MPI_Request *req, const char *what, int64_t timeout_ms)
{
	struct timespec t0, now, nap = { 0, 20000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int done = 0;
		MPI_Status st;
		int rc = MPI_Test(req, &done, &st);
		if (rc != MPI_SUCCESS)
			return mpi_fail(rc, what);
		if (done)
			return IBP_OK;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t ms = (int64_t)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms > timeout_ms)
			return ibpi_fail(IBP_ERR_IO, "coll: mpi: timeout after %lld ms in %s (a peer did not join)",
					(long long)timeout_ms, what);
		/* MPI's nonblocking collectives advance only inside MPI_Test: a
		 * nap would stall every round of the schedule, so yield for the
		 * first second (a whole large call), then nap (a peer is late) */
		if (ms < 1000)
			sched_yield();
		else
			nanosleep(&nap, NULL);
	}
}

/* BF16 and F16 sums: in float32, rounded to the dtype (ibpi_coll_add_round). */
static void sum16(const void *in, void *inout, int n, ibp_dtype_t dt)
{
	float acc[256];
	const uint16_t *a = in;
	uint16_t *b = inout;
	for (int i = 0; i < n; i += 256) {
		int k = n - i < 256 ? n - i : 256;
		ibpi_coll_widen(a + i, dt, (uint64_t)k, acc);
		ibpi_coll_add_round(acc, b + i, dt, (uint64_t)k, b + i);
	}
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	(void)type;
	sum16(in, inout, *len, IBP_DTYPE_BF16);
}

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	(void)type;
	sum16(in, inout, *len, IBP_DTYPE_F16);
}

static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static MPI_Op op_bf16 = MPI_OP_NULL, op_f16 = MPI_OP_NULL;
static int ops_rc = MPI_SUCCESS;

static void make_ops(void)
{
	/* process-wide, never freed: MPI frees user ops at MPI_Finalize */
	ops_rc = MPI_Op_create(sum_bf16, 1, &op_bf16);
	if (ops_rc == MPI_SUCCESS)
		ops_rc = MPI_Op_create(sum_f16, 1, &op_f16);
}

/* The element type and the sum for dt. */
static ibp_status_t mpi_type(ibp_dtype_t dt, MPI_Datatype *type, MPI_Op *sum)
{
	if (dt == IBP_DTYPE_F32) {
		*type = MPI_FLOAT;
		*sum = MPI_SUM;
		return IBP_OK;
	}
	if (dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: mpi: dtype %s", ibp_dtype_name(dt));
	if (pthread_once(&ops_once, make_ops) != 0)
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: mpi: pthread_once failed");
	if (ops_rc != MPI_SUCCESS)
		return mpi_fail(ops_rc, "MPI_Op_create");
	*type = MPI_UINT16_T;
	*sum = dt == IBP_DTYPE_BF16 ? op_bf16 : op_f16;
	return IBP_OK;
}

/* A nonblocking collective's start (rc) and its wait. */
static ibp_status_t started(int rc, MPI_Request *req, const char *what, int64_t timeout_ms)
{
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, what);
	return wait_req(req, what, timeout_ms);
}

static ibp_status_t n_exchange(void *ctx, const void *mine, void *all, uint64_t bytes, int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Request req;
	if (bytes > INT_MAX)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: mpi: exchange of %llu bytes", (unsigned long long)bytes);
	int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, m->comm, &req);
	return started(rc, &req, "MPI_Iallgather (call check)", timeout_ms);
}

static ibp_status_t n_allgather(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Datatype type = MPI_BYTE;
	MPI_Op sum = MPI_OP_NULL;
	MPI_Request req;
	IBP_TRY(mpi_type(dt, &type, &sum));
	int rank = 0, rc = MPI_Comm_rank(m->comm, &rank);
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Comm_rank");
	const void *s = send == (const uint8_t *)recv + (uint64_t)rank * count * ibp_dtype_size(dt) ? MPI_IN_PLACE : send;
	rc = MPI_Iallgather(s, (int)count, type, recv, (int)count, type, m->comm, &req);
	return started(rc, &req, "MPI_Iallgather", timeout_ms);
}

static ibp_status_t n_reducescatter(void *ctx, const void *send, void *recv, uint64_t recvcount, ibp_dtype_t dt,
				    int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Datatype type = MPI_BYTE;
	MPI_Op sum = MPI_OP_NULL;
	MPI_Request req;
	IBP_TRY(mpi_type(dt, &type, &sum));
	int rc = MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, (int)recvcount, type, sum,
					   m->comm, &req);
	return started(rc, &req, "MPI_Ireduce_scatter_block", timeout_ms);
}

/* Open MPI's nonblocking AllReduce (libnbc) picks a binomial tree (reduce
 * to a root, then broadcast) below 4 ranks whatever the size: at 64 MiB
 * over a 10 Gbit/s link that took 1.4-1.8x MPI_Allreduce's time, where
 * its ring (the same bytes each way, overlapped) takes 0.8x
 * (docs/BENCHMARKS.md, "Native AllReduce below 4 ranks"). Its algorithm is
 * a control variable read at every call, so a large call below 4 ranks
 * asks for the ring when nobody chose another (the variable is 0, "auto"),
 * and puts it back right after the call starts. Other MPI libraries (no
 * such variable) are left alone. */
#define RING_MIN_BYTES (1u << 20)

/* A pipelined ring's piece over MPI: 60 KiB raw, so that a piece with its
 * headers stays under Open MPI's 64 KiB TCP eager limit (algo.c). */
#define MPI_PIECE_BYTES 61440u
static pthread_once_t nbc_once = PTHREAD_ONCE_INIT;
static int nbc_ok;
static MPI_T_cvar_handle nbc_alg;

static void nbc_find(void)
{
	int provided = 0, idx = -1, n = 0;
	if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) /* process-wide, never finalized */
		return;
	nbc_ok = MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &idx) == MPI_SUCCESS &&
		 MPI_T_cvar_handle_alloc(idx, NULL, &nbc_alg, &n) == MPI_SUCCESS && n == 1;
}

/* 1 when it switched the algorithm to the ring (put back with nbc_auto). */
static int nbc_ring(int nranks, uint64_t bytes)
{
	int cur = -1, ring = 1;
	if (nranks >= 4 || bytes < RING_MIN_BYTES || pthread_once(&nbc_once, nbc_find) != 0 || !nbc_ok)
		return 0;
	return MPI_T_cvar_read(nbc_alg, &cur) == MPI_SUCCESS && cur == 0 &&
	       MPI_T_cvar_write(nbc_alg, &ring) == MPI_SUCCESS;
}

static void nbc_auto(void)
{
	int zero = 0;
	MPI_T_cvar_write(nbc_alg, &zero); /* cannot fail after a write that worked; nothing to report */
}

static ibp_status_t n_allreduce(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Datatype type = MPI_BYTE;
	MPI_Op sum = MPI_OP_NULL;
	MPI_Request req;
	int p = 0;
	IBP_TRY(mpi_type(dt, &type, &sum));
	int rc = MPI_Comm_size(m->comm, &p);
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Comm_size");
	const int ring = nbc_ring(p, count * ibp_dtype_size(dt));
	rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, type, sum, m->comm, &req);
	if (ring)
		nbc_auto();
	return started(rc, &req, "MPI_Iallreduce", timeout_ms);
}

static ibp_status_t n_alltoall(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
			       int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Datatype type = MPI_BYTE;
	MPI_Op sum = MPI_OP_NULL;
	MPI_Request req;
	IBP_TRY(mpi_type(dt, &type, &sum));
	int rc = MPI_Ialltoall(send == recv ? MPI_IN_PLACE : send, (int)count, type, recv, (int)count, type, m->comm,
			       &req);
	return started(rc, &req, "MPI_Ialltoall", timeout_ms);
}

static ibp_status_t n_alltoallv(void *ctx, const void *send, const uint64_t *sendcounts, const uint64_t *sdispls,
				void *recv, const uint64_t *recvcounts, const uint64_t *rdispls, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Datatype type = MPI_BYTE;
	MPI_Op sum = MPI_OP_NULL;
	MPI_Request req;
	IBP_TRY(mpi_type(dt, &type, &sum));
	int p = 0, rc = MPI_Comm_size(m->comm, &p);
	if (rc != MPI_SUCCESS)
		return mpi_fail(rc, "MPI_Comm_size");
	int *v = malloc(4 * sizeof(int) * (size_t)p);
	if (!v)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: mpi: out of memory");
	for (int i = 0; i < p; i++) { /* each <= INT32_MAX (ibp/coll.h) */
		v[i] = (int)sendcounts[i];
		v[p + i] = (int)sdispls[i];
		v[2 * p + i] = (int)recvcounts[i];
		v[3 * p + i] = (int)rdispls[i];
	}
	/* the arrays must live until the request completes: they do (we wait here) */
	rc = send == recv ? MPI_Ialltoallv(MPI_IN_PLACE, NULL, NULL, type, recv, v + 2 * p, v + 3 * p, type, m->comm,
					   &req)
			  : MPI_Ialltoallv(send, v, v + p, type, recv, v + 2 * p, v + 3 * p, type, m->comm, &req);
	ibp_status_t s = rc == MPI_SUCCESS ? wait_req(&req, "MPI_Ialltoallv", timeout_ms) : mpi_fail(rc, "MPI_Ialltoallv");
	if (s == IBP_OK || rc != MPI_SUCCESS)
		free(v);
	/* else (a timeout) MPI may still read v: it is leaked with the request */
	return s;
}

static const ibp_coll_native_t mpi_native = {
	n_exchange, n_allgather, n_reducescatter, n_allreduce, n_alltoall, n_alltoallv,
};

static void m_destroy(void *ctx)
{
	mctx_t *m = ctx;
	if (!m)
		return;
	int fin = 0;
	if (MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
		(void)MPI_Comm_free(&m->comm); /* a destructor has no one to tell */
	free(m);
}

ibp_status_t ibp_coll_comm_from_mpi(const void *mpi_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out)
{
	if (!out || !mpi_comm)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_mpi: NULL argument");
	*out = NULL;
	int init = 0, fin = 0, rc;
	if (MPI_Initialized(&init) != MPI_SUCCESS || !init || MPI_Finalized(&fin) != MPI_SUCCESS || fin)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_mpi: MPI is not initialised (or finalised)");
	mctx_t *m = calloc(1, sizeof *m);
	if (!m)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: comm_from_mpi: out of memory");
	if ((rc = MPI_Comm_dup(*(const MPI_Comm *)mpi_comm, &m->comm)) != MPI_SUCCESS) {
		free(m);
		return mpi_fail(rc, "MPI_Comm_dup");
	}
	ibp_coll_transport_t t = { 0 };
	if ((rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_rank(m->comm, &t.rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(m->comm, &t.nranks)) != MPI_SUCCESS) {
		m_destroy(m);
		return mpi_fail(rc, "MPI_Comm_set_errhandler/rank/size");
	}
	t.ctx = m;
	t.sendrecv = m_sendrecv;
	t.destroy = m_destroy;
	/* IBP_COLL_MPI_NATIVE=0: the algorithms on every call (A/B runs, tests) */
	const char *e = getenv("IBP_COLL_MPI_NATIVE");
	t.native = e && e[0] == '0' ? NULL : &mpi_native;
	t.async = &mpi_async;
	return ibpi_coll_comm_create(&t, opts, MPI_PIECE_BYTES, out);
}
