/* coll_internal.h - the communicator, the message header and the codec
 * steps shared by the collective algorithms (src/coll). */
#ifndef IBP_COLL_INTERNAL_H
#define IBP_COLL_INTERNAL_H

#include <stdint.h>

#include "coll/coll_convert.h"
#include "coll/coll_mem.h"
#include "coll/helper.h"
#include "ibp/coll.h"

#define COLL_MAGIC 0x43504249u /* "IBPC" little-endian */
#define COLL_HDR 32u
#define IBP_COLL_MAX_V (1ull << 56) /* bound on counts and displacements (the codecs' limit) */

/* What a message's payload is. */
enum coll_enc { COLL_ENC_RAW = 0, COLL_ENC_EXP = 1, COLL_ENC_FP8 = 2, COLL_ENC_DQ = 3, COLL_ENC_LSQ = 4, COLL_ENC_PTS = 5 };

enum coll_op { COLL_OP_CALIB = 0, COLL_OP_AG = 1, COLL_OP_RS = 2, COLL_OP_AR = 3, COLL_OP_A2A = 4, COLL_OP_A2AV = 5 };

/* The header every message starts with (host byte order: ranks of one
 * communicator share an architecture). */
typedef struct coll_hdr {
	uint32_t magic;
	uint8_t op, codec, dtype, enc;
	uint64_t count;  /* the call's count argument (0 for AllToAllv) */
	uint64_t elems;  /* elements in this message */
	uint32_t chunk;  /* which chunk (ring) or source rank (all-to-all); a pipelined
			  * ring's piece k of chunk c: k << 16 | c (algo.c) */
	uint32_t seq;    /* the communicator's call number */
} coll_hdr_t;

/* Host working buffers a communicator keeps between calls, so that a
 * repeated call does not fault in fresh pages (on this VM a first touch
 * costs more than the codecs). */
enum coll_ws {
	COLL_WS_MSG0, COLL_WS_MSG1, COLL_WS_F, COLL_WS_TMP, COLL_WS_ACC, /* mem_host.c */
	COLL_WS_PIPE0, COLL_WS_PIPE1, COLL_WS_PACC, COLL_WS_SCRATCH,     /* algo.c, pipelined rings */
	COLL_WS_PIPE2,                                                   /* dynamiq.c: the hops' output */
	COLL_WS_N
};
#define COLL_WS_KEEP (64ull << 20) /* larger buffers are freed at the end of their call */

struct ibp_coll_comm {
	ibp_coll_transport_t t;
	ibp_coll_opts_t o;
	int rank, nranks;
	uint32_t seq;
	ibp_status_t broken; /* IBP_OK, or the failure that broke it */
	double pace_next;    /* token bucket: time (s) the link is free again */
	ibp_coll_stats_t st;
	coll_helper_t *helper; /* AllGather's decode thread; NULL until first needed */
	int lsq_bits;          /* LSQ entry width (2, 4 or 8) */
	int exp_table;         /* this call's exp table mode: SIGMA, or RANS where the switcher found the
				  slower, smaller rANS exponents pay (any exp block decodes) */
	double rans_enc_Bps, rans_dec_Bps; /* calibrated rANS speeds (the slowest rank's); 0: unknown */
	struct {
		int done;              /* measured (or tried) on this memory kind */
		double enc[2], dec[2]; /* [0] the table code, [1] rANS; input bytes/s, 0: unknown */
		double r[2];           /* their coded/raw ratios on the calibration message */
	} dcal;                        /* this rank's exp codings on its device path (comm.c, dev_calibrate) */
	ibp_coll_memory_t mem_kind; /* where the buffers are (ibp_coll_comm_set_memory) */
	const coll_mem_ops_t *mem;  /* the buffer steps for mem_kind */
	void *stream;               /* the current call's stream (device table) */
	coll_dev_t dev;             /* the device table's buffers */
	uint64_t piece_bytes;       /* pipelined rings: raw bytes a piece (0: whole chunks); algo.c */
	int flow_solo;              /* pipelined steps without the helper thread (comm.c, flow_solo) */
	struct {
		void *p;
		uint64_t cap;
	} ws[COLL_WS_N];   /* host working buffers kept between calls (ibpi_coll_ws) */
	int ws_lent;       /* a failed call left a transport request on them: never freed */
};

/* Raw bytes of a piece of the pipelined rings: IBP_COLL_PIECE_BYTES from
 * the environment (0 turns pipelining off; every rank must agree, else
 * their calls fail as mismatched), else dflt, else the library's default
 * (1 MiB; comm.c says why). Read when a communicator is made. */
uint64_t ibpi_coll_piece_bytes(uint64_t dflt);
/* ibp_coll_comm_create with the transport's own default piece size
 * (piece_dflt bytes; 0: the default; IBP_COLL_PIECE_BYTES still wins). */
ibp_status_t ibpi_coll_comm_create(const ibp_coll_transport_t *t, const ibp_coll_opts_t *opts, uint64_t piece_dflt,
				   ibp_coll_comm_t **out);

/* Working buffer `slot` of at least `bytes` (contents undefined), kept
 * for the next call; NULL with IBP_ERR_NOMEM recorded. */
void *ibpi_coll_ws(ibp_coll_comm_t *c, enum coll_ws slot, uint64_t bytes);

/* End of a call: frees the buffers over COLL_WS_KEEP (unless lent). */
void ibpi_coll_ws_trim(ibp_coll_comm_t *c);

/* Monotonic seconds. */
double ibpi_coll_now(void);

/* Sends/receives through the transport with the throttle, the stats and
 * the timeout applied. */
ibp_status_t ibpi_coll_sendrecv(ibp_coll_comm_t *c, int dst, const void *sbuf, uint64_t sbytes, uint64_t logical,
			   int src, void *rbuf, uint64_t rcap, uint64_t *rbytes);

/* A polling loop's pause after `waited` seconds without progress: a yield
 * for the first 200 us, then a 20 us nap. Transports such as Open MPI's
 * TCP move bytes only while polled, but the kernel's socket buffers carry
 * a link through a nap; a yield-spinning poller starves the codec threads
 * of ranks that share cores. */
void ibpi_coll_idle(double waited);

/* Starts a nonblocking send through the transport's async table (which
 * the caller has checked) with the throttle and the stats applied. */
ibp_status_t ibpi_coll_isend(ibp_coll_comm_t *c, int dst, const void *buf, uint64_t bytes, uint64_t logical,
			void **req);

/* ---- codec steps (coll_codec.c) ---- */

/* Capacity of a message holding n elements of dt under any encoding. */
ibp_status_t ibpi_coll_msg_cap(ibp_dtype_t dt, uint64_t n, uint64_t *cap);

/* Writes header + payload of src[0, n) encoded as `enc` at msg (capacity
 * cap; LSQ entries of lsq_bits bits; exp blocks with table mode exp_table);
 * *bytes = total size. */
ibp_status_t ibpi_coll_encode(const coll_hdr_t *h, const void *src, void *msg, uint64_t cap, int nthreads,
			 int lsq_bits, int exp_table, uint64_t *bytes);

/* Checks a received message's header against what this rank expects
 * (op, codec, dtype, count, elems, chunk, seq) and copies it to *h. */
ibp_status_t ibpi_coll_check(const void *msg, uint64_t bytes, const coll_hdr_t *want, int from, coll_hdr_t *h);

/* Decodes a checked message's payload into n elements of dt at dst. */
ibp_status_t ibpi_coll_decode(const coll_hdr_t *h, const void *msg, uint64_t bytes, void *dst, int nthreads);

/* Decodes into float32 (dst: n floats; scratch: n elements of dt). */
ibp_status_t ibpi_coll_decode_f32(const coll_hdr_t *h, const void *msg, uint64_t bytes, float *dst, void *scratch,
			     int nthreads);

/* widen / narrow: coll_convert.h */

/* dst[i] = round_dt(acc[i] + src[i]) for n elements of dt (src, dst in dt). */
void ibpi_coll_add_round(const float *acc, const void *src, ibp_dtype_t dt, uint64_t n, void *dst);

/* Encoding this rank uses for a call: decides with the switcher and
 * records the decision. nsteps messages of about msg_elems elements
 * each, n_enc / n_dec codec passes over msg_elems. */
enum coll_enc ibpi_coll_decide(ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, const void *sample,
			  uint64_t sample_n, uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec);

/* ---- all-reduces of the lossy codecs (algorithms on the quantizers) ---- */
/* DynamiQ (dq_allreduce.c) and PTS (pts_allreduce.c): the whole call, h
 * its header (enc RAW: each fills in its own). */
ibp_status_t ibpi_dq_allreduce(ibp_coll_comm_t *c, coll_hdr_t h, const void *send, void *recv, uint64_t count);
ibp_status_t ibpi_pts_allreduce(ibp_coll_comm_t *c, coll_hdr_t h, const void *send, void *recv, uint64_t count);

/* Measures the link and the codecs (collective). */

#endif /* IBP_COLL_INTERNAL_H */
