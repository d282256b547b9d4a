/* ibp/coll.h - compressed collectives: AllGather, ReduceScatter, AllReduce,
 * AllToAll(v) with a codec chosen per call.
 *
 * Codecs: NONE (the dtype's bytes), EXP (lossless exponent codec, ibp/exp.h)
 * and FP8 (lossy TACO FP8 E4M3 + Hadamard, ibp/fp8.h, block 256).
 * Reductions (sum) decode each incoming partial, add in FP32, round to the
 * dtype and re-encode at every hop, so EXP gives results bit-identical to
 * the same call with NONE. FP8 in AllGather (and the gather half of
 * AllReduce) encodes each shard once; every rank, its owner included,
 * decodes the same bytes, so all ranks end with identical tensors.
 *
 * Algorithms, each written once against a transport (below):
 *   AllGather      ring, P-1 steps, compressed blocks forwarded unchanged
 *                  (a block of 32 KiB or more coded is decoded on the
 *                  communicator's helper thread, made on first use and
 *                  joined by ibp_coll_comm_free, while the next step
 *                  forwards it)
 *   ReduceScatter  ring, P-1 steps; chunk c is summed in the order
 *                  c+1, c+2, ..., c (ranks mod P), whatever the codec
 *   AllReduce      ring ReduceScatter on chunks of ceil/floor(count / P)
 *                  elements, then ring AllGather
 *   AllToAll(v)    pairwise: step s sends to rank+s, receives from rank-s;
 *                  a rank's own block is copied, never encoded
 * On host memory over a transport with nonblocking messages (async below)
 * the rings (and AllToAll's exchanges of equal blocks; not AllToAllv's)
 * send each chunk in pieces of at most IBP_COLL_PIECE_BYTES raw
 * bytes (environment, read at creation; default 61440 over MPI, 1 MiB
 * otherwise, 0 = whole chunks; all ranks must agree; DynamiQ's pieces: of
 * coded bytes), all in flight at once, encoded, sent, received and
 * decoded overlapped (docs/COLLECTIVES.md "Pipelined rings"); results are
 * the bits of whole chunks.
 * Every message carries a 32-byte header (operation, requested codec,
 * dtype, count, elements, chunk, call sequence number). A receiver that
 * finds any of them different from its own call returns
 * IBP_ERR_INVALID_ARG ("mismatch" in the detail); corrupt payloads give
 * IBP_ERR_CORRUPT. Every wait is bounded by the communicator's timeout:
 * a peer that never sends gives IBP_ERR_IO ("timeout" in the detail).
 * After any failed collective the communicator is broken: later calls
 * return IBP_ERR_IO at once (peers are in an unknown state).
 *
 * Adaptive switcher (policy AUTO, the default): when the communicator is
 * made, the link (latency alpha, bandwidth beta, by timed ring exchanges
 * with the neighbours, throttle included) and the codecs' CPU throughput
 * are measured. Per call, an alpha-beta model compares the plain time with
 * the compressed time (fewer bytes plus encode and decode time), the ratio
 * estimated on a sample of the send buffer; the codec is used only when
 * it pays, and never when the sample would not shrink by 5% (e.g. random
 * exponents). When not even the codec's best possible ratio would pay (a
 * fast link, a small call), the call goes plain without the sample encode,
 * so the switcher costs such calls nothing measurable. Each message says how it was encoded, so ranks need not
 * agree on the decision. Decisions and achieved ratios are in the stats.
 *
 * DYNAMIQ (paper "DynamiQ", docs/COLLECTIVES.md) is an AllReduce codec
 * (other collectives give IBP_ERR_INVALID_ARG). A call first all-gathers
 * 2 FP32 statistics (mean, sum of squares) per super-group of 256
 * elements; every rank derives the same bit width (2, 4 or 8) per
 * super-group within a budget of 5 bits per element, scales included.
 * The ring then carries quantized partial sums: each hop decodes, adds its
 * centred contribution in FP32 and re-quantizes with fresh scales
 * (non-uniform levels, a BF16 scale per 256 and a UINT8 scale per 16
 * elements, unbiased stochastic rounding keyed by a fixed shared seed and
 * the call number; the paper's rounding correlated across ranks is built
 * but off, as it biases multi-hop sums). The sink's bytes are forwarded
 * unchanged in the gather half, so every rank ends with the same result.
 * Unbiased but lossy; the policy switcher is not consulted (NEVER sends
 * plain bytes; one rank copies). NaN/Inf input gives IBP_ERR_INVALID_ARG on all ranks.
 *
 * LSQ and PTS (paper "RCMoE", docs/COLLECTIVES.md), lossy and unbiased,
 * used whenever requested (policy NEVER sends plain bytes). LSQ is a
 * per-message encoding for the dispatch/combine AllToAll(v) of MoE layers
 * (AllToAll and AllToAllv only; others give IBP_ERR_INVALID_ARG): rows of
 * 256 elements, each with
 * its max as scale, entries stochastically rounded to B-bit sign +
 * magnitude codes (2^(B-1) - 1 levels; B = 4 by default, 2 or 8 with
 * ibp_coll_comm_set_lsq_bits), row scales stochastically rounded to 4 bits
 * (8 at B = 8) of the message's FP32 max: about B + 0.02 bits per element. PTS is an
 * AllReduce only: each rank keeps g_i with probability |g_i| / max|g|
 * (sigma 1) as sign(g_i) * max|g| (a presence bitmap and one sign bit per
 * kept element), the streams are all-gathered round the ring and every
 * rank adds them in rank order, so all ranks get the same result. Non-
 * finite input gives IBP_ERR_INVALID_ARG on the rank that has it (PTS,
 * LSQ); its peers then time out.
 *
 * Buffers are host memory by default, and `stream` must then be NULL (a
 * non-NULL stream gives IBP_ERR_UNSUPPORTED).
 *
 * Device buffers (ibp_coll_comm_set_memory(comm, IBP_COLL_MEM_DEVICE)):
 * send/recv are CUDA device pointers and `stream` a cudaStream_t (NULL =
 * the default stream). The same algorithms run with their buffer steps
 * on the device: EXP and FP8 encode/decode with ibp_exp_*_cuda /
 * ibp_fp8_*_cuda (one chunk per message, bytes as on the host), the
 * reductions' FP32 add + rounding in a kernel bit-identical to the CPU's,
 * copies with cudaMemcpyAsync. Results equal the host path's bit for bit
 * (EXP and NONE equal each other; FP8 equals the host FP8 result).
 * Messages carry the same header (in a 128-byte slot) and receivers check
 * it as on the host. Each step drains the stream before the transport
 * runs (the transport has its own stream); working buffers are kept by the
 * communicator and grown. Codecs NONE, EXP and FP8 only (others:
 * IBP_ERR_UNSUPPORTED); the switcher does not sample device data: under
 * policy AUTO the requested codec is used, and EXP's exponents are coded
 * with rANS where the calibrated model, with this rank's device codec
 * speeds timed on the first such call (docs/COLLECTIVES.md), says the
 * smaller messages pay. The transport must carry
 * device memory: the NCCL transport sends and receives such messages in
 * place (no host staging). IBP_COLL_MEM_HOST_FALLBACK runs the same
 * orchestration on host buffers with the kernels' CPU twins (any
 * transport), which is how it is tested without a GPU: the device path
 * has been compiled (nvcc sm_90) and its kernel run in the emulator, but
 * it has never run on a GPU.
 *
 * A communicator is used by
 * one thread at a time; different communicators are independent.
 * Element counts are uint64_t; one message is at most 2^31 - 1 bytes on
 * MPI (IBP_ERR_UNSUPPORTED beyond).
 *
 * Transports. An algorithm needs one primitive, sendrecv: send a byte
 * message to one rank while receiving one from another, bounded by a
 * timeout. Two ship here: in-process (threads of one process as ranks,
 * with queues; for tests and single-node benchmarks) and MPI
 * (libibp_coll_mpi, Isend/Irecv polled with MPI_Test until the deadline).
 * NCCL (ibp_coll_nccl_transport, below; built with CUDA and NCCL)
 * implements sendrecv as grouped ncclSend/ncclRecv pairs (a fixed-size
 * first part carrying the size, as NCCL receives need the exact count) on
 * a device stream; the codec steps
 * still run on the CPU (GPU codecs in the collectives are future work).
 * torch.distributed implements it in Python (python/src/ibp/torch/ddp.py:
 * isend/irecv and Work.wait(timeout)). Each only fills an
 * ibp_coll_transport_t; the algorithms do not change.
 */
#ifndef IBP_COLL_H
#define IBP_COLL_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ibp_coll_codec {
	IBP_COLL_CODEC_NONE = 0, /* plain dtype bytes */
	IBP_COLL_CODEC_EXP = 1,  /* lossless exponent codec */
	IBP_COLL_CODEC_FP8 = 2,  /* lossy FP8 E4M3 + Hadamard (TACO) */
	IBP_COLL_CODEC_DYNAMIQ = 3, /* lossy DynamiQ, AllReduce only (see below) */
	IBP_COLL_CODEC_LSQ = 4,     /* lossy RCMoE LSQ, for AllToAll(v) payloads (see below) */
	IBP_COLL_CODEC_PTS = 5      /* lossy RCMoE PTS sparse AllReduce (see below) */
} ibp_coll_codec_t;

typedef enum ibp_coll_redop {
	IBP_COLL_SUM = 0 /* the only reduction in this release */
} ibp_coll_redop_t;

/* When the requested codec is applied. */
typedef enum ibp_coll_policy {
	IBP_COLL_POLICY_AUTO = 0,   /* the switcher decides per call (default) */
	IBP_COLL_POLICY_ALWAYS = 1, /* always encode with the requested codec */
	IBP_COLL_POLICY_NEVER = 2   /* always send plain bytes */
} ibp_coll_policy_t;

/* What the switcher did on a call. */
typedef enum ibp_coll_decision {
	IBP_COLL_DECIDED_PLAIN = 0,          /* codec NONE requested or policy NEVER */
	IBP_COLL_DECIDED_COMPRESS = 1,       /* encoded with the requested codec */
	IBP_COLL_DECIDED_NOT_WORTH = 2,      /* model: compression would be slower */
	IBP_COLL_DECIDED_INCOMPRESSIBLE = 3  /* sample would not shrink by 5% */
} ibp_coll_decision_t;

/* Byte transport between the ranks of a communicator.
 *
 * sendrecv sends sbytes at sbuf to rank dst (dst < 0: send nothing) and
 * receives one message from rank src (src < 0: receive nothing) into rbuf
 * of rcap bytes, storing its size in *rbytes. Both may run concurrently
 * (a ring step sends right while receiving from the left) and it returns
 * when both are done. Messages between a pair of ranks arrive in order.
 * It must return within about timeout_ms: IBP_ERR_IO with "timeout" in
 * the detail when a peer does not answer, IBP_ERR_INVALID_ARG when an
 * incoming message exceeds rcap. destroy (may be NULL) frees ctx.
 *
 * native (may be NULL) points to the transport's own collectives: a call
 * that goes uncompressed (codec none, or the switcher's plain decision on
 * every rank) then runs on them instead of the algorithms above, over host
 * buffers, without a throttle (opts.rate 0). ABI: the field was added after
 * release 0.1 (zero-initialise the struct; a transport compiled against the
 * older header must be rebuilt).
 *
 * async (may be NULL, added after 0.2 like native) points to nonblocking
 * sends and receives: with them the rings on host memory travel in pieces,
 * many messages in flight, so that encoding, the link and decoding overlap
 * (ibp_coll_opts_t has no setting for it: IBP_COLL_PIECE_BYTES, docs/API.md).
 * Every rank of a communicator must have async or none. */
struct ibp_coll_native;
struct ibp_coll_async;
typedef struct ibp_coll_transport {
	int rank, nranks;
	void *ctx;
	ibp_status_t (*sendrecv)(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				 uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms);
	void (*destroy)(void *ctx);
	const struct ibp_coll_native *native;
	const struct ibp_coll_async *async;
} ibp_coll_transport_t;

/* A transport's nonblocking messages. Requests are opaque to the library;
 * one thread (the caller's) uses them, between calls of one communicator.
 *
 * isend starts sending `bytes` at buf to rank dst: buf stays untouched by
 * the caller until the request is done. irecv starts receiving one message
 * from rank src into buf of `cap` bytes. Messages between a pair of ranks
 * arrive in the order they were sent, and receives from one source take
 * them in the order the receives were posted (MPI's rule), whether sent by
 * isend or sendrecv. Both fail with the transport's error (no memory:
 * IBP_ERR_NOMEM) and then leave *req unset.
 *
 * test makes progress and sets *done = 1 once req has finished (a receive:
 * *bytes = the message's size); the request is released then and must not
 * be used again. An incoming message over its receive's cap fails test
 * with IBP_ERR_INVALID_ARG ("mismatch" in the detail), other failures with
 * the transport's error; the request is released on any failure. test
 * never blocks: the library keeps the deadline.
 *
 * cancel abandons an unfinished request after a failure and releases it.
 * It returns 1 when the request's buffer is free again (finished or
 * cancelled), 0 when the transport may still read or write it (the
 * library then never frees that buffer). */
typedef struct ibp_coll_async {
	ibp_status_t (*isend)(void *ctx, int dst, const void *buf, uint64_t bytes, void **req);
	ibp_status_t (*irecv)(void *ctx, int src, void *buf, uint64_t cap, void **req);
	ibp_status_t (*test)(void *ctx, void *req, int *done, uint64_t *bytes);
	int (*cancel)(void *ctx, void *req);
} ibp_coll_async_t;

/* A transport's native collectives (any entry may be NULL: that operation
 * keeps the algorithms over sendrecv). Buffers are host memory; counts and
 * displacements are elements of dt (BF16, F16 or F32), each at most
 * INT32_MAX (larger calls keep the algorithms); send == recv asks for the
 * operation in place (for allgather: send == recv + rank * count). Sums
 * of BF16/F16 add in float32 and round to the dtype after each addition,
 * as the algorithms do. Each returns within about timeout_ms (IBP_ERR_IO
 * with "timeout" in the detail), else IBP_OK or the transport's error.
 * exchange gathers every rank's `bytes`-byte blob into all (rank r's at
 * all + r * bytes): before a native call the ranks swap what they were
 * asked and decided, so a mismatched call fails with IBP_ERR_INVALID_ARG on
 * every rank and all ranks take the same path. No exchange: no natives. */
typedef struct ibp_coll_native {
	ibp_status_t (*exchange)(void *ctx, const void *mine, void *all, uint64_t bytes, int64_t timeout_ms);
	ibp_status_t (*allgather)(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				  int64_t timeout_ms);
	ibp_status_t (*reducescatter)(void *ctx, const void *send, void *recv, uint64_t recvcount, ibp_dtype_t dt,
				      int64_t timeout_ms);
	ibp_status_t (*allreduce)(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				  int64_t timeout_ms);
	ibp_status_t (*alltoall)(void *ctx, const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				 int64_t timeout_ms);
	ibp_status_t (*alltoallv)(void *ctx, const void *send, const uint64_t *sendcounts, const uint64_t *sdispls,
				  void *recv, const uint64_t *recvcounts, const uint64_t *rdispls, ibp_dtype_t dt,
				  int64_t timeout_ms);
} ibp_coll_native_t;

/* Where a communicator's collectives find their buffers
 * (ibp_coll_comm_set_memory). */
typedef enum ibp_coll_memory {
	IBP_COLL_MEM_HOST = 0,         /* host memory, codecs on the CPU (default) */
	IBP_COLL_MEM_DEVICE = 1,       /* CUDA device memory, codec kernels on the call's stream */
	IBP_COLL_MEM_HOST_FALLBACK = 2 /* host memory through the device orchestration, CPU twins of
					* the kernels (tests; the IBP_CUDA_HOST_FALLBACK convention) */
} ibp_coll_memory_t;

/* Communicator options. Always initialise with ibp_coll_opts_default(). */
typedef struct ibp_coll_opts {
	uint64_t size; /* sizeof this struct: set by ibp_coll_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	int64_t timeout_ms;       /* bound on every wait; default 60000 */
	ibp_coll_policy_t policy; /* default AUTO */
	int calibrate;            /* 1 (default): measure link and codecs at creation (collective) */
	double rate;              /* > 0: throttle this rank's sends to rate bytes/s (token bucket) */
	int nthreads;             /* codec threads per rank; default 1 */
} ibp_coll_opts_t;

/* Per-communicator statistics (this rank's view). */
typedef struct ibp_coll_stats {
	uint64_t calls;                     /* collectives called */
	uint64_t compressed;                /* calls run with the codec */
	uint64_t plain;                     /* calls with codec NONE or policy NEVER */
	uint64_t not_worth;                 /* passthrough: the model said it would not pay */
	uint64_t incompressible;            /* passthrough: the data would not shrink */
	uint64_t logical_bytes;             /* bytes this rank sent, counted uncompressed */
	uint64_t wire_bytes;                /* bytes this rank sent, as sent (headers included) */
	double alpha_s;                     /* calibrated per-message latency (s); 0 = not calibrated */
	double beta_Bps;                    /* calibrated link bandwidth (bytes/s) */
	double exp_enc_Bps, exp_dec_Bps;    /* calibrated EXP codec throughput (input bytes/s) */
	double fp8_enc_Bps, fp8_dec_Bps;    /* calibrated FP8 codec throughput (input bytes/s) */
	ibp_coll_decision_t last_decision;  /* of the latest call */
	double last_ratio;                  /* latest call: logical / wire bytes sent (1 = plain) */
	uint64_t native;                    /* calls run on the transport's native collective */
} ibp_coll_stats_t;

typedef struct ibp_coll_comm ibp_coll_comm_t;
typedef struct ibp_coll_inproc ibp_coll_inproc_t;

/* Fills `o` with the defaults above. */
void ibp_coll_opts_default(ibp_coll_opts_t *o);

/* Short name of a codec ("none", "exp", "fp8", "dynamiq", "lsq", "pts") or
 * "unknown". */
const char *ibp_coll_codec_name(ibp_coll_codec_t c);

/* Makes a communicator over transport `t` (copied; the communicator owns
 * t->ctx and calls t->destroy at ibp_coll_comm_free, also when this call
 * fails). Collective: every rank calls it (calibration exchanges messages).
 * opts NULL = defaults. IBP_ERR_INVALID_ARG on a bad transport or options,
 * IBP_ERR_NOMEM, or a transport error from calibration. */
ibp_status_t ibp_coll_comm_create(const ibp_coll_transport_t *t, const ibp_coll_opts_t *opts,
				  ibp_coll_comm_t **out);

/* Makes a communicator from an MPI communicator: mpi_comm points to an
 * MPI_Comm (void * keeps mpi.h out of this header); it is duplicated, so
 * the caller's is untouched. MPI must be initialised (else
 * IBP_ERR_INVALID_ARG); MPI failures give IBP_ERR_IO with MPI's message.
 * Collective over mpi_comm; its MPI_Comm_dup is MPI's own blocking call
 * (the one wait not bounded by timeout_ms), calibration is bounded.
 * Defined in libibp_coll_mpi (built when CMake finds MPI; link it and
 * MPI); the MPI library must have been initialised with
 * MPI_THREAD_SERIALIZED or better if other threads call MPI. */
ibp_status_t ibp_coll_comm_from_mpi(const void *mpi_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out);

/* ---- NCCL transport (libibp built with CUDA and NCCL; else both answer
 * IBP_ERR_UNSUPPORTED) ----
 * nccl_comm points to an ncclComm_t (void * keeps nccl.h out of this
 * header). The transport splits it (ncclCommSplit, non-blocking config:
 * collective over the NCCL communicator, bounded by timeout_ms), so the
 * caller's communicator is untouched and a timeout aborts only the split.
 * sendrecv copies each host message to a device buffer and runs grouped
 * ncclSend/ncclRecv on its own stream (a 16 KiB first part with the size
 * and the payload's head: one exchange for messages up to 16 KiB - 8, a
 * second for the rest of larger ones), polled until the deadline; a failed
 * call aborts the split communicator (later calls fail at once). Host
 * messages (the default, codecs on the CPU,
 * `stream` NULL) are staged through device buffers; device messages
 * (ibp_coll_comm_set_memory(IBP_COLL_MEM_DEVICE): codec kernels on the
 * call's stream, see "Device buffers" above) are sent and received in
 * place.
 * Call from a thread; the calls set CUDA's current device to the
 * communicator's and restore the caller's before returning.
 * IBP_ERR_INVALID_ARG (NULL, timeout_ms <= 0), IBP_ERR_IO (NCCL failure,
 * with ncclGetErrorString and ncclGetLastError; timeout), IBP_ERR_CUDA,
 * IBP_ERR_NOMEM, IBP_ERR_UNSUPPORTED (built without NCCL, or libnccl.so.2
 * neither in the process nor loadable: libibp loads NCCL at run time and
 * uses the one the process already has, e.g. PyTorch's). */
ibp_status_t ibp_coll_nccl_transport(const void *nccl_comm, int64_t timeout_ms, ibp_coll_transport_t *t);

/* ibp_coll_nccl_transport (timeout opts->timeout_ms) + ibp_coll_comm_create.
 * Collective over the NCCL communicator. */
ibp_status_t ibp_coll_comm_from_nccl(const void *nccl_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out);

/* Frees a communicator (NULL is a no-op); not collective. Joins the
 * communicator's helper thread if one was started, and frees the host
 * working buffers it keeps between calls (each at most 64 MiB; larger ones
 * are freed when their call returns; a communicator broken while a
 * transport request was in flight keeps them allocated rather than free
 * memory the transport may still use). */
void ibp_coll_comm_free(ibp_coll_comm_t *comm);
/* The name before 0.2 (docs/API.md "Names"). */
void ibp_coll_comm_destroy(ibp_coll_comm_t *comm) IBP_DEPRECATED("use ibp_coll_comm_free");

/* Rank and number of ranks. */
int ibp_coll_comm_rank(const ibp_coll_comm_t *comm);
int ibp_coll_comm_nranks(const ibp_coll_comm_t *comm);

/* Copies the communicator's statistics to *st. */
ibp_status_t ibp_coll_comm_stats(const ibp_coll_comm_t *comm, ibp_coll_stats_t *st);

/* The collectives ibp_coll_comm_plain answers for. */
typedef enum ibp_coll_op {
	IBP_COLL_OP_ALLGATHER = 0,
	IBP_COLL_OP_REDUCESCATTER = 1,
	IBP_COLL_OP_ALLREDUCE = 2,
	IBP_COLL_OP_ALLTOALL = 3
} ibp_coll_op_t;

/* Whether a call of `op` with `count` elements of dt and `codec` (count
 * as the call takes it: AllGather's per-rank count, ReduceScatter's
 * recvcount, AllReduce's count, AllToAll's per-rank block) goes plain on
 * every rank whatever the data. *plain = 1 when the codec is NONE, the
 * policy NEVER, the communicator has one rank, or the calibrated model
 * (one for all ranks, agreed at creation) says not even the exponent
 * codec's best size ratio would pay; 0 when the data decide (the switcher
 * samples them) or the call is compressed by request (policy ALWAYS,
 * DynamiQ, PTS, LSQ, device buffers). The answer is the same on every rank
 * for the same arguments and policy, so a caller may send plain calls its
 * own way (a framework's native collective, asynchronously) without asking
 * the other ranks. Counts no call, changes no statistic. Errors:
 * IBP_ERR_INVALID_ARG for NULL comm or plain, an unknown op, dtype or
 * codec, or a codec the op does not take (DynamiQ, PTS: AllReduce only;
 * LSQ: AllToAll only). Threads: as the collectives (the thread using the
 * communicator). */
ibp_status_t ibp_coll_comm_plain(const ibp_coll_comm_t *comm, ibp_coll_op_t op, uint64_t count, ibp_dtype_t dt,
				 ibp_coll_codec_t codec, int *plain);

/* Changes the policy or the send throttle (rate <= 0: none) of a
 * communicator; local to this rank. */
ibp_status_t ibp_coll_comm_set_policy(ibp_coll_comm_t *comm, ibp_coll_policy_t policy);
ibp_status_t ibp_coll_comm_set_rate(ibp_coll_comm_t *comm, double rate);

/* Sets the width B of the LSQ codes this rank sends: 2, 4 (the default) or
 * 8 bits per element, sign included (3 is refused: codes never straddle a
 * byte). Local to this rank: every LSQ message names its width, so ranks
 * may differ. IBP_ERR_INVALID_ARG on a NULL comm or another width. Same
 * threading as the collectives (the thread using the communicator). */
ibp_status_t ibp_coll_comm_set_lsq_bits(ibp_coll_comm_t *comm, int bits);

/* Chooses where this rank's collectives take their buffers (see "Device
 * buffers" above): IBP_COLL_MEM_HOST (the default), IBP_COLL_MEM_DEVICE
 * (send/recv are device pointers, work is enqueued on the call's `stream`,
 * a cudaStream_t, NULL = the default stream, and the call returns after
 * the stream has drained; the transport must carry device memory: the
 * NCCL transport does) or IBP_COLL_MEM_HOST_FALLBACK (host buffers, the
 * device orchestration with the kernels' CPU twins; any transport). Every
 * rank of the communicator must choose the same space. Working buffers
 * are kept by the communicator and grown, freed by ibp_coll_comm_free
 * or by a change of space. Errors: IBP_ERR_INVALID_ARG (NULL comm,
 * unknown space), IBP_ERR_NO_DEVICE (DEVICE in a build without CUDA, or
 * no device). Same threading as the collectives. */
ibp_status_t ibp_coll_comm_set_memory(ibp_coll_comm_t *comm, ibp_coll_memory_t mem);

/* ---- in-process transport: nranks threads of one process ---- */

/* Makes a world of nranks (1..4096) ranks joined by in-memory queues. */
ibp_status_t ibp_coll_inproc_create(int nranks, ibp_coll_inproc_t **out);

/* Fills *t with rank `rank`'s transport of world w (w must outlive the
 * communicator made from it). Then, from that rank's thread,
 * ibp_coll_comm_create(t, ...). */
ibp_status_t ibp_coll_inproc_transport(ibp_coll_inproc_t *w, int rank, ibp_coll_transport_t *t);

/* Frees the world (NULL is a no-op) after every communicator on it is
 * destroyed; undelivered messages are dropped. */
void ibp_coll_inproc_free(ibp_coll_inproc_t *w);
/* The name before 0.2 (docs/API.md "Names"). */
void ibp_coll_inproc_destroy(ibp_coll_inproc_t *w) IBP_DEPRECATED("use ibp_coll_inproc_free");

/* ---- collectives (NCCL's argument order; host buffers; sum only) ----
 * dt: IBP_DTYPE_BF16, F16 or F32 (IBP_ERR_INVALID_ARG otherwise). Counts
 * may be 0. Errors: IBP_ERR_INVALID_ARG (arguments, mismatch across
 * ranks), IBP_ERR_IO (transport, timeout, broken communicator),
 * IBP_ERR_CORRUPT (a payload failed validation), IBP_ERR_NOMEM,
 * IBP_ERR_UNSUPPORTED (non-NULL stream on a host communicator; a codec
 * other than NONE, EXP, FP8 on device buffers), IBP_ERR_CUDA (device
 * buffers: a CUDA call failed). */

/* recv[r*count, (r+1)*count) = rank r's send[0, count). In place when
 * send == recv + rank*count. */
ibp_status_t ibp_coll_allgather(const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				ibp_coll_codec_t codec, ibp_coll_comm_t *comm, void *stream);

/* recv[0, recvcount) = sum over ranks of send[rank*recvcount, ...). send
 * holds nranks * recvcount elements and must not overlap recv. */
ibp_status_t ibp_coll_reducescatter(const void *send, void *recv, uint64_t recvcount, ibp_dtype_t dt,
				    ibp_coll_redop_t op, ibp_coll_codec_t codec, ibp_coll_comm_t *comm,
				    void *stream);

/* recv[0, count) = sum over ranks of send[0, count). In place when
 * send == recv. */
ibp_status_t ibp_coll_allreduce(const void *send, void *recv, uint64_t count, ibp_dtype_t dt, ibp_coll_redop_t op,
				ibp_coll_codec_t codec, ibp_coll_comm_t *comm, void *stream);

/* recv[r*count, ...) = rank r's send[rank*count, ...) (count elements per
 * peer). send and recv must not overlap. */
ibp_status_t ibp_coll_alltoall(const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
			       ibp_coll_codec_t codec, ibp_coll_comm_t *comm, void *stream);

/* MPI_Alltoallv in elements: rank r's send + sdispls[p] (sendcounts[p]
 * elements) lands in rank p's recv + rdispls[r] (recvcounts[r] elements,
 * which must equal; a difference is a mismatch). Arrays have nranks
 * entries. send and recv must not overlap. */
ibp_status_t ibp_coll_alltoallv(const void *send, const uint64_t *sendcounts, const uint64_t *sdispls, void *recv,
				const uint64_t *recvcounts, const uint64_t *rdispls, ibp_dtype_t dt,
				ibp_coll_codec_t codec, ibp_coll_comm_t *comm, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* IBP_COLL_H */
