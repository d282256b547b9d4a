/* transport_nccl.c - the NCCL transport (built when CMake finds CUDA and
 * NCCL; transport_nccl_stub.c otherwise).
 *
 * sendrecv = two grouped ncclSend/ncclRecv pairs on the transport's own
 * stream and device buffers: first the 8-byte sizes (an NCCL receive needs
 * its exact count), then the payloads. Host messages are staged through
 * device buffers that grow to the largest message; device messages (the
 * collectives on IBP_COLL_MEM_DEVICE communicators) are sent and received
 * in place. Every wait is a poll of
 * cudaStreamQuery and ncclCommGetAsyncError against the deadline; on a
 * timeout the transport aborts its communicator (ncclCommAbort), so no
 * kernel waits forever on a dead peer, and later calls fail at once.
 *
 * The communicator is our own: ncclCommSplit of the caller's with a
 * non-blocking config, so an abort never touches the caller's and even
 * group ends and connection setup return within the deadline. Every CUDA
 * and NCCL call is checked; the detail carries cudaGetErrorString or
 * ncclGetErrorString plus ncclGetLastError. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "coll/coll_internal.h"
#include "util/error.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the NCCL transport needs NCCL 2.18 or newer (ncclCommSplit, non-blocking communicators)"
#endif

typedef struct nctx {
	ncclComm_t comm; /* ours, split from the caller's; non-blocking */
	int dev;
	cudaStream_t stream;
	uint64_t *d_size, *h_size; /* [0] size sent, [1] size received (device, pinned host) */
	void *d_buf[2];            /* staging: [0] send, [1] receive */
	uint64_t d_cap[2];
	int aborted;
} nctx_t;

/* NCCL is found at run time, not linked: the NCCL a process already has
 * (PyTorch's wheel ships its own libnccl.so.2, often newer than the system's)
 * is used as it is, and libibp never drags a second libnccl.so.2 into a
 * process (whichever loads first would serve both, and a framework built
 * against a newer NCCL then fails to load with undefined symbols). */
static struct {
	ncclResult_t (*CommAbort)(ncclComm_t);
	ncclResult_t (*CommCount)(const ncclComm_t, int *);
	ncclResult_t (*CommCuDevice)(const ncclComm_t, int *);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*CommFinalize)(ncclComm_t);
	ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
	ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
	ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
	const char *(*GetErrorString)(ncclResult_t);
	const char *(*GetLastError)(ncclComm_t);
	ncclResult_t (*GroupEnd)(void);
	ncclResult_t (*GroupStart)(void);
	ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
	ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} nc;
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;
static char nc_error[256]; /* empty: loaded */

static void nc_load(void)
{
	/* the process's own NCCL first (symbols already loaded), else the library */
	void *h = dlsym(RTLD_DEFAULT, "ncclCommSplit") ? RTLD_DEFAULT : dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(nc_error, sizeof(nc_error), "cannot load libnccl.so.2 (%s)", e ? e : "not found");
		return;
	}
#define NC_SYM(f)                                                                                  \
	do {                                                                                       \
		*(void **)&nc.f = dlsym(h, "nccl" #f);                                             \
		if (!nc.f) {                                                                       \
			snprintf(nc_error, sizeof(nc_error), "libnccl.so.2 lacks nccl" #f " (NCCL >= 2.18 needed)"); \
			return;                                                                    \
		}                                                                                  \
	} while (0)
	NC_SYM(CommAbort); NC_SYM(CommCount); NC_SYM(CommCuDevice); NC_SYM(CommDestroy);
	NC_SYM(CommFinalize); NC_SYM(CommGetAsyncError); NC_SYM(CommSplit); NC_SYM(CommUserRank);
	NC_SYM(GetErrorString); NC_SYM(GetLastError); NC_SYM(GroupEnd); NC_SYM(GroupStart);
	NC_SYM(Recv); NC_SYM(Send);
#undef NC_SYM
}

/* IBP_OK when NCCL's functions are available; else IBP_ERR_UNSUPPORTED. */
static ibp_status_t nc_ready(void)
{
	if (pthread_once(&nc_once, nc_load) != 0)
		return ibp_fail(IBP_ERR_UNSUPPORTED, "coll: nccl: pthread_once failed");
	if (nc_error[0])
		return ibp_fail(IBP_ERR_UNSUPPORTED, "coll: nccl: %s", nc_error);
	return IBP_OK;
}

static ibp_status_t cuda_fail(cudaError_t e, const char *what)
{
	return ibp_fail(IBP_ERR_CUDA, "coll: nccl: %s failed: %s (%s)", what, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

static ibp_status_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *what)
{
	const char *last = comm ? nc.GetLastError(comm) : nc.GetLastError(NULL);
	return ibp_fail(IBP_ERR_IO, "coll: nccl: %s failed: %s%s%s", what, nc.GetErrorString(r),
			last && *last ? ": " : "", last ? last : "");
}

#define CU(call, what)                                   \
	do {                                             \
		cudaError_t e_ = (call);                 \
		if (e_ != cudaSuccess)                   \
			return cuda_fail(e_, what);      \
	} while (0)

static void nap(double waited)
{
	/* Yield for the first 10 ms (latency), then sleep so a long wait is cheap. */
	if (waited < 0.01) {
		sched_yield();
		return;
	}
	struct timespec ts = { 0, 20000 };
	nanosleep(&ts, NULL);
}

/* The deadline passed: abort our communicator (its kernels end) and break. */
static ibp_status_t timeout_fail(nctx_t *x, const char *what, int64_t timeout_ms)
{
	ncclResult_t r = nc.CommAbort(x->comm);
	x->aborted = 1;
	if (r != ncclSuccess)
		return ibp_fail(IBP_ERR_IO, "coll: nccl: timeout after %lld ms %s; ncclCommAbort then failed: %s",
				(long long)timeout_ms, what, nc.GetErrorString(r));
	return ibp_fail(IBP_ERR_IO, "coll: nccl: timeout after %lld ms %s (communicator aborted)",
			(long long)timeout_ms, what);
}

/* Completes a non-blocking NCCL call that returned r (ncclInProgress: poll). */
static ibp_status_t wait_comm(nctx_t *x, ncclResult_t r, const char *what, double t0, double deadline,
			      int64_t timeout_ms)
{
	while (r == ncclInProgress) {
		double now = coll_now();
		if (now > deadline)
			return timeout_fail(x, what, timeout_ms);
		nap(now - t0);
		ncclResult_t q = nc.CommGetAsyncError(x->comm, &r);
		if (q != ncclSuccess)
			return nccl_fail(x->comm, q, "ncclCommGetAsyncError");
	}
	if (r != ncclSuccess)
		return nccl_fail(x->comm, r, what);
	return IBP_OK;
}

/* Waits for the stream's work, watching NCCL's asynchronous errors. */
static ibp_status_t wait_stream(nctx_t *x, const char *what, double t0, double deadline, int64_t timeout_ms)
{
	for (;;) {
		cudaError_t e = cudaStreamQuery(x->stream);
		if (e == cudaSuccess)
			return IBP_OK;
		if (e != cudaErrorNotReady)
			return cuda_fail(e, "cudaStreamQuery");
		ncclResult_t a = ncclSuccess, q = nc.CommGetAsyncError(x->comm, &a);
		if (q != ncclSuccess)
			return nccl_fail(x->comm, q, "ncclCommGetAsyncError");
		if (a != ncclSuccess && a != ncclInProgress)
			return nccl_fail(x->comm, a, what);
		double now = coll_now();
		if (now > deadline)
			return timeout_fail(x, what, timeout_ms);
		nap(now - t0);
	}
}

/* One grouped exchange on the stream: send sb bytes at device sbuf to dst
 * (dst < 0 or sb == 0: nothing), receive rb bytes from src into rbuf. */
static ibp_status_t exchange(nctx_t *x, int dst, const void *sbuf, uint64_t sb, int src, void *rbuf, uint64_t rb,
			     const char *what, double t0, double deadline, int64_t timeout_ms)
{
	ncclResult_t r = nc.GroupStart();
	if (r != ncclSuccess)
		return nccl_fail(x->comm, r, "ncclGroupStart");
	if (dst >= 0 && sb && (r = nc.Send(sbuf, (size_t)sb, ncclUint8, dst, x->comm, x->stream)) != ncclSuccess &&
	    r != ncclInProgress) {
		(void)nc.GroupEnd(); /* closes the group; the ncclSend error is what the caller gets */
		return nccl_fail(x->comm, r, "ncclSend");
	}
	if (src >= 0 && rb && (r = nc.Recv(rbuf, (size_t)rb, ncclUint8, src, x->comm, x->stream)) != ncclSuccess &&
	    r != ncclInProgress) {
		(void)nc.GroupEnd(); /* as above */
		return nccl_fail(x->comm, r, "ncclRecv");
	}
	IBP_TRY(wait_comm(x, nc.GroupEnd(), "ncclGroupEnd", t0, deadline, timeout_ms));
	return wait_stream(x, what, t0, deadline, timeout_ms);
}

static ibp_status_t reserve(nctx_t *x, int i, uint64_t bytes)
{
	if (bytes <= x->d_cap[i])
		return IBP_OK;
	if (x->d_buf[i]) {
		CU(cudaFree(x->d_buf[i]), "cudaFree");
		x->d_buf[i] = NULL;
		x->d_cap[i] = 0;
	}
	CU(cudaMalloc(&x->d_buf[i], (size_t)bytes), "cudaMalloc (staging buffer)");
	x->d_cap[i] = bytes;
	return IBP_OK;
}

/* Whether p is device (or managed) memory: such messages skip the staging. */
static int on_device(const void *p)
{
	struct cudaPointerAttributes a;
	if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError(); /* plain host memory on old runtimes: not an error */
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static ibp_status_t n_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
			       uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	nctx_t *x = ctx;
	if (x->aborted)
		return ibp_fail(IBP_ERR_IO, "coll: nccl: the communicator was aborted by an earlier timeout");
	double t0 = coll_now(), deadline = t0 + (double)timeout_ms / 1000.0;
	char what[96];
	snprintf(what, sizeof what, "(send to %d, receive from %d)", dst, src);
	CU(cudaSetDevice(x->dev), "cudaSetDevice");
	/* 1: sizes */
	x->h_size[0] = sbytes;
	x->h_size[1] = 0;
	if (dst >= 0)
		CU(cudaMemcpyAsync(x->d_size, x->h_size, 8, cudaMemcpyHostToDevice, x->stream), "cudaMemcpyAsync (size)");
	IBP_TRY(exchange(x, dst, x->d_size, 8, src, x->d_size + 1, 8, what, t0, deadline, timeout_ms));
	uint64_t n = 0;
	if (src >= 0) {
		CU(cudaMemcpyAsync(x->h_size + 1, x->d_size + 1, 8, cudaMemcpyDeviceToHost, x->stream),
		   "cudaMemcpyAsync (size)");
		IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
		n = x->h_size[1];
		if (n > rcap) {
			/* The peer will send n bytes nobody receives: abort so it fails instead of hanging. */
			ibp_status_t s = ibp_fail(IBP_ERR_INVALID_ARG,
						  "coll: nccl: mismatch: %llu-byte message from rank %d exceeds the "
						  "expected %llu bytes",
						  (unsigned long long)n, src, (unsigned long long)rcap);
			(void)nc.CommAbort(x->comm); /* the mismatch is the error reported */
			x->aborted = 1;
			return s;
		}
	}
	/* 2: payloads (a zero-byte message has no payload on either side) */
	uint64_t sb = dst >= 0 ? sbytes : 0;
	int sdev = sb && on_device(sbuf), rdev = n && on_device(rbuf);
	IBP_TRY(reserve(x, 0, sdev ? 0 : sb));
	IBP_TRY(reserve(x, 1, rdev ? 0 : n));
	if (sb && !sdev)
		CU(cudaMemcpyAsync(x->d_buf[0], sbuf, (size_t)sb, cudaMemcpyHostToDevice, x->stream),
		   "cudaMemcpyAsync (payload to the device)");
	if (sb || n)
		IBP_TRY(exchange(x, dst, sdev ? sbuf : x->d_buf[0], sb, src, rdev ? rbuf : x->d_buf[1], n, what, t0,
				 deadline, timeout_ms));
	if (rdev)
		IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms)); /* the message is in before the caller reads it */
	else if (n) {
		/* The stream is idle here, so this copy cannot wait on a peer. */
		CU(cudaMemcpyAsync(rbuf, x->d_buf[1], (size_t)n, cudaMemcpyDeviceToHost, x->stream),
		   "cudaMemcpyAsync (payload to the host)");
		IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
	}
	if (src >= 0)
		*rbytes = n;
	return IBP_OK;
}

static void n_destroy(void *ctx)
{
	nctx_t *x = ctx;
	if (!x)
		return;
	/* A destructor has no one to report to: failures here are ignored (void). */
	(void)cudaSetDevice(x->dev);
	if (x->comm && !x->aborted) {
		/* Finalize flushes pending work; bounded like every wait, then abort. */
		ncclResult_t r = nc.CommFinalize(x->comm);
		double t0 = coll_now();
		while (r == ncclInProgress && coll_now() - t0 < 10.0) {
			nap(coll_now() - t0);
			if (nc.CommGetAsyncError(x->comm, &r) != ncclSuccess)
				break;
		}
		if (r == ncclSuccess)
			(void)nc.CommDestroy(x->comm);
		else
			(void)nc.CommAbort(x->comm);
	}
	if (x->stream)
		(void)cudaStreamDestroy(x->stream);
	for (int i = 0; i < 2; i++)
		if (x->d_buf[i])
			(void)cudaFree(x->d_buf[i]);
	if (x->d_size)
		(void)cudaFree(x->d_size);
	if (x->h_size)
		(void)cudaFreeHost(x->h_size);
	free(x);
}

ibp_status_t ibp_coll_nccl_transport(const void *nccl_comm, int64_t timeout_ms, ibp_coll_transport_t *t)
{
	if (!nccl_comm || !t)
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: NULL argument");
	if (timeout_ms <= 0)
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: timeout_ms must be > 0");
	ncclComm_t user = *(const ncclComm_t *)nccl_comm;
	if (!user)
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: the ncclComm_t is NULL");
	IBP_TRY(nc_ready());
	int rank = 0, n = 0, dev = 0;
	ncclResult_t r;
	if ((r = nc.CommUserRank(user, &rank)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommUserRank");
	if ((r = nc.CommCount(user, &n)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommCount");
	if ((r = nc.CommCuDevice(user, &dev)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommCuDevice");
	CU(cudaSetDevice(dev), "cudaSetDevice");
	nctx_t *x = calloc(1, sizeof *x);
	if (!x)
		return ibp_fail(IBP_ERR_NOMEM, "coll: nccl_transport: out of memory");
	x->dev = dev;
	ibp_status_t s = IBP_OK;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	double t0 = coll_now();
	r = nc.CommSplit(user, 0, rank, &x->comm, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		s = nccl_fail(user, r, "ncclCommSplit");
		x->comm = NULL;
	} else
		s = wait_comm(x, r, "ncclCommSplit", t0, t0 + (double)timeout_ms / 1000.0, timeout_ms);
	cudaError_t e = cudaSuccess;
	if (s == IBP_OK && (e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess)
		s = cuda_fail(e, "cudaStreamCreateWithFlags");
	if (s == IBP_OK && (e = cudaMalloc((void **)&x->d_size, 16)) != cudaSuccess)
		s = cuda_fail(e, "cudaMalloc (sizes)");
	if (s == IBP_OK && (e = cudaMallocHost((void **)&x->h_size, 16)) != cudaSuccess)
		s = cuda_fail(e, "cudaMallocHost (sizes)");
	if (s != IBP_OK) {
		n_destroy(x);
		return s;
	}
	memset(t, 0, sizeof *t);
	t->rank = rank;
	t->nranks = n;
	t->ctx = x;
	t->sendrecv = n_sendrecv;
	t->destroy = n_destroy;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_from_nccl(const void *nccl_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out)
{
	if (!out)
		return ibp_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_nccl: out is NULL");
	*out = NULL;
	ibp_coll_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_coll_opts_default(&o);
	ibp_coll_transport_t t;
	IBP_TRY(ibp_coll_nccl_transport(nccl_comm, o.timeout_ms, &t));
	return ibp_coll_comm_create(&t, &o, out);
}
