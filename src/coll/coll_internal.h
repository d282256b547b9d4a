/* coll_internal.h - the communicator, the message header and the codec
 * steps shared by the collective algorithms (src/coll). */
#ifndef IBP_COLL_INTERNAL_H
#define IBP_COLL_INTERNAL_H

#include <stdint.h>

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
	ibp_coll_memory_t mem_kind; /* where the buffers are (ibp_coll_comm_set_memory) */
	const coll_mem_ops_t *mem;  /* the buffer steps for mem_kind */
	void *stream;               /* the current call's stream (device table) */
	coll_dev_t dev;             /* the device table's buffers */
	uint64_t piece_bytes;       /* pipelined rings: raw bytes a piece (0: whole chunks); algo.c */
};

/* Raw bytes of a piece of the pipelined rings: IBP_COLL_PIECE_BYTES from
 * the environment (0 turns pipelining off; every rank must agree, else
 * their calls fail as mismatched), else 0 (off; algo.c says why). Read
 * at creation. */
uint64_t ibpi_coll_piece_bytes(void);

/* Monotonic seconds. */
double ibpi_coll_now(void);

/* Sends/receives through the transport with the throttle, the stats and
 * the timeout applied. */
ibp_status_t ibpi_coll_sendrecv(ibp_coll_comm_t *c, int dst, const void *sbuf, uint64_t sbytes, uint64_t logical,
			   int src, void *rbuf, uint64_t rcap, uint64_t *rbytes);

/* ---- codec steps (coll_codec.c) ---- */

/* Capacity of a message holding n elements of dt under any encoding. */
ibp_status_t ibpi_coll_msg_cap(ibp_dtype_t dt, uint64_t n, uint64_t *cap);

/* Writes header + payload of src[0, n) encoded as `enc` at msg (capacity
 * cap; LSQ entries of lsq_bits bits); *bytes = total size. */
ibp_status_t ibpi_coll_encode(const coll_hdr_t *h, const void *src, void *msg, uint64_t cap, int nthreads,
			 int lsq_bits, uint64_t *bytes);

/* Checks a received message's header against what this rank expects
 * (op, codec, dtype, count, elems, chunk, seq) and copies it to *h. */
ibp_status_t ibpi_coll_check(const void *msg, uint64_t bytes, const coll_hdr_t *want, int from, coll_hdr_t *h);

/* Decodes a checked message's payload into n elements of dt at dst. */
ibp_status_t ibpi_coll_decode(const coll_hdr_t *h, const void *msg, uint64_t bytes, void *dst, int nthreads);

/* Decodes into float32 (dst: n floats; scratch: n elements of dt). */
ibp_status_t ibpi_coll_decode_f32(const coll_hdr_t *h, const void *msg, uint64_t bytes, float *dst, void *scratch,
			     int nthreads);

/* n elements of dt widened to float32 (exact). */
void ibpi_coll_widen(const void *src, ibp_dtype_t dt, uint64_t n, float *dst);

/* dst[i] = round_dt(acc[i] + src[i]) for n elements of dt (src, dst in dt). */
void ibpi_coll_add_round(const float *acc, const void *src, ibp_dtype_t dt, uint64_t n, void *dst);

/* Encoding this rank uses for a call: decides with the switcher and
 * records the decision. nsteps messages of about msg_elems elements
 * each, n_enc / n_dec codec passes over msg_elems. */
enum coll_enc ibpi_coll_decide(ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, const void *sample,
			  uint64_t sample_n, uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec);

/* Measures the link and the codecs (collective). */

#endif /* IBP_COLL_INTERNAL_H */
