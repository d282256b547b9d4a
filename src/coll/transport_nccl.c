/* transport_nccl.c - the NCCL transport (built when CMake finds CUDA and
 * NCCL; transport_nccl_stub.c otherwise).
 *
 * An NCCL receive needs its exact count, so a message travels as a fixed
 * NCCL_EAGER-byte first part (its 8-byte size, then as much of the payload
 * as fits) and, only when the payload does not fit, a second exchange of
 * the rest: one round trip for every message up to NCCL_EAGER - 8 bytes,
 * two above (where the transfer dwarfs the latency). Each exchange is one
 * grouped ncclSend/ncclRecv pair on the transport's own stream. Host
 * messages are staged through device buffers that grow in stream order
 * (cudaMallocAsync / cudaFreeAsync on that stream: no device-wide
 * synchronisation while NCCL kernels are in flight; a device without
 * memory pools falls back to cudaMalloc, documented); device messages (the
 * collectives on IBP_COLL_MEM_DEVICE communicators) are sent and received
 * in place beyond the first part. Every wait is a poll of cudaStreamQuery
 * and ncclCommGetAsyncError against the deadline.
 *
 * Any failed call aborts the transport's communicator (ncclCommAbort: its
 * kernels end, so no peer waits forever on a half-done exchange) and
 * drains the stream before returning, so no copy of that call still reads
 * or writes the pinned buffers; later calls fail at once. The caller's
 * current CUDA device is restored on return.
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
#include "util/opts.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the NCCL transport needs NCCL 2.18 or newer (ncclCommSplit, non-blocking communicators)"
#endif

/* The first part of every message: size + the payload's head. */
#define NCCL_EAGER 16384u

typedef struct nctx {
	ncclComm_t comm; /* ours, split from the caller's; non-blocking */
	int dev;
	int pools;       /* the device has stream-ordered memory pools */
	cudaStream_t stream;
	uint8_t *d_first[2], *h_first[2]; /* first parts: [0] sent, [1] received (device, pinned host) */
	void *d_buf[2];            /* staging of the rest: [0] send, [1] receive */
	uint64_t d_cap[2];
	int aborted;
	int rank, nranks;
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
	ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
	ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
				      cudaStream_t);
	ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
} nc;
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;
static char nc_error[256]; /* empty: loaded */

static void nc_load(void)
{
	/* the process's own NCCL first (symbols already loaded), else the
	 * library. RTLD_DEFAULT is a null handle: "found" is its own flag. */
	const int own = dlsym(RTLD_DEFAULT, "ncclCommSplit") != NULL;
	void *h = own ? RTLD_DEFAULT : dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!own && !h) {
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
	NC_SYM(Recv); NC_SYM(Send); NC_SYM(AllGather); NC_SYM(ReduceScatter); NC_SYM(AllReduce);
#undef NC_SYM
}

/* IBP_OK when NCCL's functions are available; else IBP_ERR_UNSUPPORTED. */
static ibp_status_t nc_ready(void)
{
	if (pthread_once(&nc_once, nc_load) != 0)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: nccl: pthread_once failed");
	if (nc_error[0])
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: nccl: %s", nc_error);
	return IBP_OK;
}

static ibp_status_t cuda_fail(cudaError_t e, const char *what)
{
	return ibpi_fail(IBP_ERR_CUDA, "coll: nccl: %s failed: %s (%s)", what, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

static ibp_status_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *what)
{
	const char *last = comm ? nc.GetLastError(comm) : nc.GetLastError(NULL);
	return ibpi_fail(IBP_ERR_IO, "coll: nccl: %s failed: %s%s%s", what, nc.GetErrorString(r),
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
		return ibpi_fail(IBP_ERR_IO, "coll: nccl: timeout after %lld ms %s; ncclCommAbort then failed: %s",
				(long long)timeout_ms, what, nc.GetErrorString(r));
	return ibpi_fail(IBP_ERR_IO, "coll: nccl: timeout after %lld ms %s (communicator aborted)",
			(long long)timeout_ms, what);
}

/* Completes a non-blocking NCCL call that returned r (ncclInProgress: poll). */
static ibp_status_t wait_comm(nctx_t *x, ncclResult_t r, const char *what, double t0, double deadline,
			      int64_t timeout_ms)
{
	while (r == ncclInProgress) {
		double now = ibpi_coll_now();
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
		double now = ibpi_coll_now();
		if (now > deadline)
			return timeout_fail(x, what, timeout_ms);
		nap(now - t0);
	}
}

/* Posts one grouped exchange on the stream: send sb bytes at device sbuf
 * to dst (dst < 0 or sb == 0: nothing), receive rb bytes from src into
 * rbuf. Returns once NCCL has the group (the transfer itself is stream
 * work: the caller waits for the stream). */
static ibp_status_t post(nctx_t *x, int dst, const void *sbuf, uint64_t sb, int src, void *rbuf, uint64_t rb,
			 double t0, double deadline, int64_t timeout_ms)
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
	return wait_comm(x, nc.GroupEnd(), "ncclGroupEnd", t0, deadline, timeout_ms);
}

/* Staging buffer i holds at least `bytes`: grown in stream order (the old
 * buffer is freed after the work already on the stream), never with a
 * device-wide synchronisation, except on devices without memory pools. */
static ibp_status_t reserve(nctx_t *x, int i, uint64_t bytes)
{
	if (bytes <= x->d_cap[i])
		return IBP_OK;
	uint64_t cap = x->d_cap[i] + x->d_cap[i] / 2;
	if (cap < bytes)
		cap = bytes;
	cap = (cap + 65535) & ~(uint64_t)65535;
	void *p = NULL;
	if (x->pools) {
		CU(cudaMallocAsync(&p, (size_t)cap, x->stream), "cudaMallocAsync (staging buffer)");
		if (x->d_buf[i]) {
			cudaError_t e = cudaFreeAsync(x->d_buf[i], x->stream);
			if (e != cudaSuccess) {
				(void)cudaFreeAsync(p, x->stream);
				return cuda_fail(e, "cudaFreeAsync (staging buffer)");
			}
		}
	} else {
		/* no pools: the stream is idle here, but cudaFree/cudaMalloc still
		 * wait for the whole device (documented in docs/COLLECTIVES.md) */
		CU(cudaMalloc(&p, (size_t)cap), "cudaMalloc (staging buffer)");
		if (x->d_buf[i])
			(void)cudaFree(x->d_buf[i]);
	}
	x->d_buf[i] = p;
	x->d_cap[i] = cap;
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

static ibp_status_t sendrecv_on_device(nctx_t *x, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				       uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	const uint64_t head_cap = NCCL_EAGER - 8;
	double t0 = ibpi_coll_now(), deadline = t0 + (double)timeout_ms / 1000.0;
	char what[96];
	snprintf(what, sizeof what, "(send to %d, receive from %d)", dst, src);
	/* 1: the first parts, one exchange (the whole message when it fits) */
	const uint64_t sb = dst >= 0 ? sbytes : 0, shead = sb < head_cap ? sb : head_cap;
	const int sdev = sb && on_device(sbuf);
	if (dst >= 0) {
		memcpy(x->h_first[0], &sb, 8);
		if (shead && !sdev)
			memcpy(x->h_first[0] + 8, sbuf, (size_t)shead);
		CU(cudaMemcpyAsync(x->d_first[0], x->h_first[0], sdev ? 8 : 8 + (size_t)shead, cudaMemcpyHostToDevice,
				   x->stream), "cudaMemcpyAsync (first part to the device)");
		if (shead && sdev)
			CU(cudaMemcpyAsync(x->d_first[0] + 8, sbuf, (size_t)shead, cudaMemcpyDeviceToDevice, x->stream),
			   "cudaMemcpyAsync (first part)");
	}
	IBP_TRY(post(x, dst, x->d_first[0], NCCL_EAGER, src, x->d_first[1], NCCL_EAGER, t0, deadline, timeout_ms));
	const int rdev_maybe = src >= 0 && rcap && on_device(rbuf);
	if (src >= 0) /* the size, and the head a host destination takes from it */
		CU(cudaMemcpyAsync(x->h_first[1], x->d_first[1], 8 + (size_t)(rdev_maybe ? 0 : rcap < head_cap ? rcap : head_cap),
				   cudaMemcpyDeviceToHost, x->stream), "cudaMemcpyAsync (first part to the host)");
	IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
	uint64_t n = 0;
	if (src >= 0) {
		memcpy(&n, x->h_first[1], 8);
		if (n > rcap)
			return ibpi_fail(IBP_ERR_INVALID_ARG,
					"coll: nccl: mismatch: %llu-byte message from rank %d exceeds the expected %llu bytes",
					(unsigned long long)n, src, (unsigned long long)rcap);
	}
	const uint64_t rhead = n < head_cap ? n : head_cap;
	const int rdev = n && rdev_maybe;
	if (rhead && rdev)
		CU(cudaMemcpyAsync(rbuf, x->d_first[1] + 8, (size_t)rhead, cudaMemcpyDeviceToDevice, x->stream),
		   "cudaMemcpyAsync (first part)");
	else if (rhead)
		memcpy(rbuf, x->h_first[1] + 8, (size_t)rhead);
	/* 2: the rest, only where a payload did not fit its first part */
	const uint64_t srest = sb - shead, rrest = n - rhead;
	if (srest || rrest) {
		const uint8_t *s2 = sdev ? (const uint8_t *)sbuf + shead : NULL;
		uint8_t *r2 = rdev ? (uint8_t *)rbuf + rhead : NULL;
		if (srest && !sdev) {
			IBP_TRY(reserve(x, 0, srest));
			CU(cudaMemcpyAsync(x->d_buf[0], (const uint8_t *)sbuf + shead, (size_t)srest, cudaMemcpyHostToDevice,
					   x->stream), "cudaMemcpyAsync (payload to the device)");
			s2 = x->d_buf[0];
		}
		if (rrest && !rdev) {
			IBP_TRY(reserve(x, 1, rrest));
			r2 = x->d_buf[1];
		}
		IBP_TRY(post(x, dst, s2, srest, src, r2, rrest, t0, deadline, timeout_ms));
		if (rrest && !rdev) {
			/* received first: a copy to pageable memory blocks the host
			 * until done, which behind the receive has no deadline */
			IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
			CU(cudaMemcpyAsync((uint8_t *)rbuf + rhead, x->d_buf[1], (size_t)rrest, cudaMemcpyDeviceToHost,
					   x->stream), "cudaMemcpyAsync (payload to the host)");
		}
	}
	if ((rdev && rhead) || srest || rrest)
		IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms)); /* in before the caller reads it */
	if (src >= 0)
		*rbytes = n;
	return IBP_OK;
}

/* After a failed call: abort the communicator (its kernels end), then wait
 * for the stream, so that no copy of the failed call still uses the pinned
 * first parts when a later call (which fails at once) or the destroy comes. */
static void fail_drain(nctx_t *x)
{
	if (!x->aborted) {
		(void)nc.CommAbort(x->comm); /* the call's own error is what the caller gets */
		x->aborted = 1;
	}
	double t0 = ibpi_coll_now();
	while (cudaStreamQuery(x->stream) == cudaErrorNotReady && ibpi_coll_now() - t0 < 30.0)
		nap(ibpi_coll_now() - t0);
	(void)cudaGetLastError();
}

/* Every call's entry: refused after an abort; the communicator's device
 * made current (the caller's saved in *prev, for leave). */
static ibp_status_t enter(nctx_t *x, int *prev)
{
	if (x->aborted)
		return ibpi_fail(IBP_ERR_IO, "coll: nccl: the communicator was aborted by an earlier failure");
	CU(cudaGetDevice(prev), "cudaGetDevice");
	if (*prev != x->dev)
		CU(cudaSetDevice(x->dev), "cudaSetDevice");
	return IBP_OK;
}

/* Every call's exit with its outcome s: a failure aborts and drains
 * (fail_drain), and the caller's device is current again. */
static ibp_status_t leave(nctx_t *x, int prev, ibp_status_t s)
{
	if (s != IBP_OK) {
		char msg[512]; /* fail_drain's calls may overwrite the detail */
		snprintf(msg, sizeof msg, "%s", ibp_last_error());
		fail_drain(x);
		s = ibpi_fail(s, "%s", msg);
	}
	if (prev != x->dev) {
		cudaError_t e = cudaSetDevice(prev);
		if (e != cudaSuccess && s == IBP_OK)
			return cuda_fail(e, "cudaSetDevice (restoring the caller's device)");
	}
	return s;
}

static ibp_status_t n_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
			       uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	nctx_t *x = ctx;
	int prev = -1;
	IBP_TRY(enter(x, &prev));
	return leave(x, prev, sendrecv_on_device(x, dst, sbuf, sbytes, src, rbuf, rcap, rbytes, timeout_ms));
}

static void n_destroy(void *ctx)
{
	nctx_t *x = ctx;
	if (!x)
		return;
	/* A destructor has no one to report to: failures here are ignored (void). */
	int prev = -1;
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	(void)cudaSetDevice(x->dev);
	if (x->comm && !x->aborted) {
		/* Finalize flushes pending work; bounded like every wait, then abort. */
		ncclResult_t r = nc.CommFinalize(x->comm);
		double t0 = ibpi_coll_now();
		while (r == ncclInProgress && ibpi_coll_now() - t0 < 10.0) {
			nap(ibpi_coll_now() - t0);
			if (nc.CommGetAsyncError(x->comm, &r) != ncclSuccess)
				break;
		}
		if (r == ncclSuccess)
			(void)nc.CommDestroy(x->comm);
		else
			(void)nc.CommAbort(x->comm);
	}
	if (x->stream) {
		(void)cudaStreamSynchronize(x->stream); /* stream-ordered frees and copies done */
		(void)cudaStreamDestroy(x->stream);
	}
	for (int i = 0; i < 2; i++) {
		if (x->d_buf[i])
			(void)cudaFree(x->d_buf[i]);
		if (x->d_first[i])
			(void)cudaFree(x->d_first[i]);
		if (x->h_first[i])
			(void)cudaFreeHost(x->h_first[i]);
	}
	(void)cudaGetLastError();
	if (prev >= 0)
		(void)cudaSetDevice(prev);
	free(x);
}

/* ---- native collectives (ibp/coll.h): NCCL's own, on host buffers staged
 * through the device buffers (d_buf[0] in, d_buf[1] out), in stream order;
 * a failure aborts and drains as sendrecv's does. Compiled everywhere NCCL
 * is; run on a GPU, and in the emulator against its NCCL stand-in. ---- */

enum nat_op { NAT_AG, NAT_RS, NAT_AR, NAT_A2A };

static ncclDataType_t nccl_type(ibp_dtype_t dt)
{
	switch (dt) {
	case IBP_DTYPE_BF16: return ncclBfloat16;
	case IBP_DTYPE_F16: return ncclFloat16;
	case IBP_DTYPE_F32: return ncclFloat32;
	default: return ncclUint8; /* the exchange's blobs */
	}
}

/* One collective: in_bytes of send up, the call, out_bytes of the result
 * down into recv. counts/displs (elements) for AllToAllv, else NULL. */
static ibp_status_t nat_run(nctx_t *x, enum nat_op op, const void *send, uint64_t in_bytes, void *recv,
			    uint64_t out_bytes, uint64_t count, ibp_dtype_t dt, const uint64_t *sc, const uint64_t *sd,
			    const uint64_t *rc, const uint64_t *rd, int64_t timeout_ms)
{
	const uint64_t esz = ibp_dtype_size(dt);
	double t0 = ibpi_coll_now(), deadline = t0 + (double)timeout_ms / 1000.0;
	IBP_TRY(reserve(x, 0, in_bytes ? in_bytes : 1));
	IBP_TRY(reserve(x, 1, out_bytes ? out_bytes : 1));
	uint8_t *din = x->d_buf[0], *dout = x->d_buf[1];
	if (in_bytes)
		CU(cudaMemcpyAsync(din, send, (size_t)in_bytes, cudaMemcpyHostToDevice, x->stream),
		   "cudaMemcpyAsync (native input)");
	ncclResult_t r = ncclSuccess;
	const char *what = "ncclAllGather";
	switch (op) {
	case NAT_AG: r = nc.AllGather(din, dout, (size_t)count, nccl_type(dt), x->comm, x->stream); break;
	case NAT_RS:
		what = "ncclReduceScatter";
		r = nc.ReduceScatter(din, dout, (size_t)count, nccl_type(dt), ncclSum, x->comm, x->stream);
		break;
	case NAT_AR:
		what = "ncclAllReduce";
		r = nc.AllReduce(din, dout, (size_t)count, nccl_type(dt), ncclSum, x->comm, x->stream);
		break;
	case NAT_A2A:
		what = "ncclSend/ncclRecv (alltoall)";
		if ((r = nc.GroupStart()) != ncclSuccess)
			return nccl_fail(x->comm, r, "ncclGroupStart");
		for (int p = 0; p < x->nranks && (r == ncclSuccess || r == ncclInProgress); p++) {
			uint64_t s_n = sc ? sc[p] : count, s_d = sd ? sd[p] : (uint64_t)p * count;
			uint64_t r_n = rc ? rc[p] : count, r_d = rd ? rd[p] : (uint64_t)p * count;
			if (s_n)
				r = nc.Send(din + s_d * esz, (size_t)(s_n * esz), ncclUint8, p, x->comm, x->stream);
			if (r_n && (r == ncclSuccess || r == ncclInProgress))
				r = nc.Recv(dout + r_d * esz, (size_t)(r_n * esz), ncclUint8, p, x->comm, x->stream);
		}
		if (r != ncclSuccess && r != ncclInProgress) {
			(void)nc.GroupEnd(); /* the send/receive error is what the caller gets */
			return nccl_fail(x->comm, r, what);
		}
		r = nc.GroupEnd();
		break;
	}
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(x->comm, r, what);
	IBP_TRY(wait_comm(x, r, what, t0, deadline, timeout_ms));
	/* the collective done first: the copy to (pageable) recv would block
	 * the host behind it without a deadline */
	IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
	if (out_bytes)
		CU(cudaMemcpyAsync(recv, dout, (size_t)out_bytes, cudaMemcpyDeviceToHost, x->stream),
		   "cudaMemcpyAsync (native output)");
	return wait_stream(x, what, t0, deadline, timeout_ms);
}

/* nat_run between enter and leave, as n_sendrecv. */
static ibp_status_t nat_call(nctx_t *x, enum nat_op op, const void *send, uint64_t in_bytes, void *recv,
			     uint64_t out_bytes, uint64_t count, ibp_dtype_t dt, const uint64_t *sc, const uint64_t *sd,
			     const uint64_t *rc, const uint64_t *rd, int64_t timeout_ms)
{
	int prev = -1;
	IBP_TRY(enter(x, &prev));
	return leave(x, prev, nat_run(x, op, send, in_bytes, recv, out_bytes, count, dt, sc, sd, rc, rd, timeout_ms));
}

static ibp_status_t n_exchange(void *ctx, const void *mine, void *all, uint64_t bytes, int64_t timeout_ms)
{
	nctx_t *x = ctx;
	return nat_call(x, NAT_AG, mine, bytes, all, bytes * (uint64_t)x->nranks, bytes, IBP_DTYPE_U8, NULL, NULL,
			NULL, NULL, timeout_ms);
}

static ibp_status_t n_allgather(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	nctx_t *x = ctx;
	const uint64_t b = count * ibp_dtype_size(dt);
	return nat_call(x, NAT_AG, send, b, recv, b * (uint64_t)x->nranks, count, dt, NULL, NULL, NULL, NULL,
			timeout_ms);
}

static ibp_status_t n_reducescatter(void *ctx, const void *send, void *recv, uint64_t recvcount, ibp_dtype_t dt,
				    int64_t timeout_ms)
{
	nctx_t *x = ctx;
	const uint64_t b = recvcount * ibp_dtype_size(dt);
	return nat_call(x, NAT_RS, send, b * (uint64_t)x->nranks, recv, b, recvcount, dt, NULL, NULL, NULL, NULL,
			timeout_ms);
}

static ibp_status_t n_allreduce(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	const uint64_t b = count * ibp_dtype_size(dt);
	return nat_call(ctx, NAT_AR, send, b, recv, b, count, dt, NULL, NULL, NULL, NULL, timeout_ms);
}

static ibp_status_t n_alltoall(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
			       int64_t timeout_ms)
{
	nctx_t *x = ctx;
	const uint64_t b = count * ibp_dtype_size(dt) * (uint64_t)x->nranks;
	return nat_call(x, NAT_A2A, send, b, recv, b, count, dt, NULL, NULL, NULL, NULL, timeout_ms);
}

static ibp_status_t n_alltoallv(void *ctx, const void *send, const uint64_t *sendcounts, const uint64_t *sdispls,
				void *recv, const uint64_t *recvcounts, const uint64_t *rdispls, ibp_dtype_t dt,
				int64_t timeout_ms)
{
	nctx_t *x = ctx;
	uint64_t in = 0, out = 0;
	for (int p = 0; p < x->nranks; p++) {
		in = sdispls[p] + sendcounts[p] > in ? sdispls[p] + sendcounts[p] : in;
		out = rdispls[p] + recvcounts[p] > out ? rdispls[p] + recvcounts[p] : out;
	}
	const uint64_t esz = ibp_dtype_size(dt);
	return nat_call(x, NAT_A2A, send, in * esz, recv, out * esz, 0, dt, sendcounts, sdispls, recvcounts, rdispls,
			timeout_ms);
}

static const ibp_coll_native_t nccl_native = {
	n_exchange, n_allgather, n_reducescatter, n_allreduce, n_alltoall, n_alltoallv,
};

ibp_status_t ibp_coll_nccl_transport(const void *nccl_comm, int64_t timeout_ms, ibp_coll_transport_t *t)
{
	if (!nccl_comm || !t)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: NULL argument");
	if (timeout_ms <= 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: timeout_ms must be > 0");
	ncclComm_t user = *(const ncclComm_t *)nccl_comm;
	if (!user)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: nccl_transport: the ncclComm_t is NULL");
	IBP_TRY(nc_ready());
	int rank = 0, n = 0, dev = 0;
	ncclResult_t r;
	if ((r = nc.CommUserRank(user, &rank)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommUserRank");
	if ((r = nc.CommCount(user, &n)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommCount");
	if ((r = nc.CommCuDevice(user, &dev)) != ncclSuccess)
		return nccl_fail(user, r, "ncclCommCuDevice");
	int prev = -1;
	CU(cudaGetDevice(&prev), "cudaGetDevice");
	CU(cudaSetDevice(dev), "cudaSetDevice");
	nctx_t *x = calloc(1, sizeof *x);
	if (!x) {
		(void)cudaSetDevice(prev);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: nccl_transport: out of memory");
	}
	x->dev = dev;
	x->rank = rank;
	x->nranks = n;
	int pools = 0;
	if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		pools = 0;
	}
	x->pools = pools != 0;
	ibp_status_t s = IBP_OK;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	double t0 = ibpi_coll_now();
	r = nc.CommSplit(user, 0, rank, &x->comm, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		s = nccl_fail(user, r, "ncclCommSplit");
		x->comm = NULL;
	} else
		s = wait_comm(x, r, "ncclCommSplit", t0, t0 + (double)timeout_ms / 1000.0, timeout_ms);
	cudaError_t e = cudaSuccess;
	if (s == IBP_OK && (e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess)
		s = cuda_fail(e, "cudaStreamCreateWithFlags");
	for (int i = 0; i < 2 && s == IBP_OK; i++) {
		if ((e = cudaMalloc((void **)&x->d_first[i], NCCL_EAGER)) != cudaSuccess)
			s = cuda_fail(e, "cudaMalloc (first parts)");
		/* sent whole: no stale bytes. On our stream: a cudaMemset would run on
		 * the legacy stream, which our non-blocking stream does not wait for */
		else if ((e = cudaMemsetAsync(x->d_first[i], 0, NCCL_EAGER, x->stream)) != cudaSuccess)
			s = cuda_fail(e, "cudaMemsetAsync (first parts)");
		else if ((e = cudaMallocHost((void **)&x->h_first[i], NCCL_EAGER)) != cudaSuccess)
			s = cuda_fail(e, "cudaMallocHost (first parts)");
	}
	if (s != IBP_OK) {
		n_destroy(x);
		(void)cudaSetDevice(prev);
		return s;
	}
	(void)cudaSetDevice(prev);
	memset(t, 0, sizeof *t);
	t->rank = rank;
	t->nranks = n;
	t->ctx = x;
	t->sendrecv = n_sendrecv;
	t->destroy = n_destroy;
	/* IBP_COLL_NCCL_NATIVE=0: the algorithms on every call (A/B runs) */
	const char *env = getenv("IBP_COLL_NCCL_NATIVE");
	t->native = env && env[0] == '0' ? NULL : &nccl_native;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_from_nccl(const void *nccl_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_from_nccl: out is NULL");
	*out = NULL;
	IBP_TRY(IBPI_OPTS_CHECK(opts, "coll: comm_from_nccl", "ibp_coll_opts_t"));
	ibp_coll_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_coll_opts_default(&o);
	ibp_coll_transport_t t;
	IBP_TRY(ibp_coll_nccl_transport(nccl_comm, o.timeout_ms, &t));
	return ibp_coll_comm_create(&t, &o, out);
}
