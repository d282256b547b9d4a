/* flow.h - one step of a pipelined ring: a chunk travels as np pieces,
 * each its own message (header chunk = piece << 16 | chunk), all in
 * flight at once, so that encoding, the link and decoding overlap instead
 * of adding up. The codec work comes from a table of operations: algo.c's
 * rings (raw, exp, FP8) and DynamiQ's (dynamiq.c) share the step. Host
 * memory and transports with an async table only. */
#ifndef IBP_COLL_FLOW_H
#define IBP_COLL_FLOW_H

#include <stdatomic.h>
#include <stdint.h>

#include "coll/coll_internal.h"

typedef struct flow flow_t;

typedef struct flow_ops {
	/* Writes piece k of the sent chunk (header and payload) into its slot
	 * of sbuf; *bytes = the message's size. */
	ibp_status_t (*enc)(flow_t *w, uint64_t k, uint64_t *bytes);
	/* Decodes received piece k (its slot of rbuf, rsz[k] bytes, header
	 * checked into got[k]); th: 0 the helper thread, 1 the caller. */
	ibp_status_t (*dec)(flow_t *w, uint64_t k, int th);
	/* Elements of piece k of the chunk sent (recv 0) or received (1). */
	uint64_t (*elems)(const flow_t *w, int recv, uint64_t k);
} flow_ops_t;

/* The caller fills the fields up to `req`; ibpi_flow_step the rest. */
struct flow {
	ibp_coll_comm_t *c;
	const flow_ops_t *ops;
	void *u;                 /* the ops' state */
	coll_hdr_t h;            /* the call's header (chunk and elems are per piece) */
	uint64_t np, pcap, esz;  /* pieces, bytes a slot, bytes an element */
	int right, left, sc, rc; /* neighbours; chunks sent and received */
	int enc;                 /* 1: ops->enc makes the pieces; 0: sbuf holds them, ssz their sizes */
	uint8_t *sbuf, *rbuf;    /* piece k in slot k (k * pcap) */
	uint64_t *ssz, *rsz;     /* sizes of the messages sent and received */
	coll_hdr_t *got;         /* received headers */
	void **req;              /* 2 * np: sends, then receives; NULL once finished */
	_Atomic uint64_t ready;  /* pieces encoded (ssz[k] set before k + 1 is published) */
	_Atomic uint64_t recvd;  /* pieces received and checked (rsz, got set before) */
	_Atomic uint64_t claim;  /* next piece to decode */
	_Atomic uint64_t decoded;
	_Atomic int stop;        /* the caller gave up: the helper leaves */
	_Atomic int hfailed;     /* the helper failed: hst, herr */
	ibp_status_t hst;
	char herr[256];
};

/* Runs one step: posts every receive, sends each piece as soon as it is
 * made, checks and decodes each piece as it arrives, on this thread and
 * the communicator's helper. Returns the first failure (a timeout after
 * the communicator's timeout without progress). *leak = 1 when a request
 * could not be cancelled: the transport may still write the buffers. */
ibp_status_t ibpi_flow_step(flow_t *w, int *leak);

/* The buffers of a run of flow steps: nslot workspace slots of np pieces
 * of pcap bytes (the communicator's, kept between calls), nslot * np
 * message sizes (slot i's at sz + i * np), np received headers, 2 * np
 * requests. */
typedef struct flow_bufs {
	uint8_t *slot[3];
	uint64_t *sz;
	coll_hdr_t *got;
	void **req;
} flow_bufs_t;

/* Takes the buffers: slots ws[0 .. nslot-1] (nslot <= 3). IBP_ERR_NOMEM
 * (naming `what`) with every buffer released. */
ibp_status_t ibpi_flow_bufs_get(ibp_coll_comm_t *c, const enum coll_ws *ws, int nslot, uint64_t np, uint64_t pcap,
				const char *what, flow_bufs_t *fb);
/* Releases them; leak: a request could not be cancelled, so the transport
 * may still write the slots and the communicator never frees them. */
void ibpi_flow_bufs_put(ibp_coll_comm_t *c, flow_bufs_t *fb, int leak);

/* Piece k of np splitting len elements as evenly as chunks split a call. */
static inline void ibpi_flow_piece(uint64_t len, uint64_t np, uint64_t k, uint64_t *o, uint64_t *n)
{
	uint64_t q = len / np, rem = len % np;
	*o = k * q + (k < rem ? k : rem);
	*n = q + (k < rem);
}

/* The message header of piece k of chunk ck. */
static inline uint32_t ibpi_flow_chunk_id(uint64_t k, int ck)
{
	return (uint32_t)(k << 16 | (uint64_t)ck);
}

#define FLOW_PIECES_MIN 4u    /* fewer pieces than this: whole chunks */
#define FLOW_PIECES_MAX 4096u /* < 2^16: the piece index shares the header's chunk field */

#endif /* IBP_COLL_FLOW_H */
