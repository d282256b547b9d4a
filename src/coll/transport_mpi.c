/* transport_mpi.c - the MPI transport (libibp_coll_mpi): sendrecv is an
 * Irecv + Isend pair polled with MPI_Testall until both finish or the
 * deadline passes, on a duplicate of the caller's communicator whose
 * errors return instead of aborting. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
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
	return ibp_fail(IBP_ERR_IO, "coll: mpi: %s failed: %s", what, msg);
}

static ibp_status_t m_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
			       uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	mctx_t *m = ctx;
	MPI_Request req[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
	MPI_Status st[2];
	int rc;
	if (dst >= 0 && sbytes > INT_MAX)
		return ibp_fail(IBP_ERR_UNSUPPORTED, "coll: mpi: a %llu-byte message exceeds MPI's int count",
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
				return ibp_fail(IBP_ERR_INVALID_ARG,
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
			return ibp_fail(IBP_ERR_IO, "coll: mpi: timeout after %lld ms (send to %d, receive from %d)",
					(long long)timeout_ms, dst, src);
		}
		/* Yield for the first 10 ms (latency; yielding lets ranks that
		 * share a core run), then nap so a long wait costs no CPU. */
		if (ms < 10)
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
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_mpi: NULL argument");
	*out = NULL;
	int init = 0, fin = 0, rc;
	if (MPI_Initialized(&init) != MPI_SUCCESS || !init || MPI_Finalized(&fin) != MPI_SUCCESS || fin)
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_mpi: MPI is not initialised (or finalised)");
	mctx_t *m = calloc(1, sizeof *m);
	if (!m)
		return ibp_fail(IBP_ERR_NOMEM, "coll: comm_from_mpi: out of memory");
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
	return ibp_coll_comm_create(&t, opts, out);
}
