/* algo.c - the collectives, written once against the transport: ring
 * AllGather, ring ReduceScatter, AllReduce = ReduceScatter + AllGather,
 * pairwise AllToAll(v). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/dynamiq.h"
#include "coll/flow.h"
#include "coll/rcmoe.h"
#include "util/error.h"

typedef coll_bufs_t bufs_t;

static int mod(int a, int p)
{
	return ((a % p) + p) % p;
}

/* ---- pipelined rings (host memory, transports with async) ----
 *
 * A chunk of a ring step travels as np pieces, each its own message (header
 * chunk = piece << 16 | chunk), all in flight at once (flow.c), so that
 * encoding, the link and decoding overlap instead of adding up. np comes
 * from the call's largest chunk and the communicator's piece size, the same
 * on every rank whatever each rank's encoding; pieces of a chunk split it
 * as evenly as chunks split a call. */

static uint64_t max_len(const ibp_coll_comm_t *c, const uint64_t *len)
{
	uint64_t maxn = 0;
	for (int i = 0; i < c->nranks; i++)
		maxn = len[i] > maxn ? len[i] : maxn;
	return maxn;
}

static uint64_t ring_pieces(const ibp_coll_comm_t *c, const uint64_t *len, uint64_t esz)
{
	const uint64_t maxn = max_len(c, len);
	if (c->mem != &ibpi_coll_mem_host || !c->t.async || c->piece_bytes == 0 || c->nranks >= (1 << 16))
		return 1;
	const uint64_t per = c->piece_bytes / esz ? c->piece_bytes / esz : 1;
	uint64_t np = maxn / per + (maxn % per != 0); /* no piece over piece_bytes */
	return np < FLOW_PIECES_MIN ? 1 : np > FLOW_PIECES_MAX ? FLOW_PIECES_MAX : np;
}

/* The codec side of a pipelined ring step (flow_t.u): what is encoded,
 * where received pieces are decoded or summed. */
typedef struct ring_u {
	uint64_t slen, rlen;    /* elements of the chunks sent and received */
	const uint8_t *esrc;    /* chunk sc to encode (NULL: forwarded) */
	uint8_t *own_dst;       /* AllGather's FP8 own chunk (else NULL) */
	int red;
	uint8_t *dst;           /* received chunk rc decoded (AllGather) or summed (ReduceScatter) here */
	const uint8_t *loc;     /* ReduceScatter: the local addend of chunk rc */
	float *f[2];            /* ReduceScatter: a piece's scratch, the helper's and this thread's */
	uint8_t *tmp[2];
} ring_u_t;

static uint64_t ring_elems(const flow_t *w, int recv, uint64_t k)
{
	const ring_u_t *u = w->u;
	uint64_t o, n;
	ibpi_flow_piece(recv ? u->rlen : u->slen, w->np, k, &o, &n);
	return n;
}

static ibp_status_t ring_enc(flow_t *w, uint64_t k, uint64_t *bytes)
{
	const ring_u_t *u = w->u;
	ibp_coll_comm_t *c = w->c;
	uint64_t po, pn;
	ibpi_flow_piece(u->slen, w->np, k, &po, &pn);
	coll_hdr_t eh = w->h;
	eh.elems = pn;
	eh.chunk = ibpi_flow_chunk_id(k, w->sc);
	eh.enc = pn ? w->h.enc : COLL_ENC_RAW;
	uint8_t *msg = w->sbuf + k * w->pcap;
	IBP_TRY(ibpi_coll_encode(&eh, u->esrc + po * w->esz, msg, w->pcap, c->o.nthreads, c->lsq_bits, c->exp_table, bytes));
	if (u->own_dst && eh.enc == COLL_ENC_FP8) /* lossy: the owner keeps what the others get */
		IBP_TRY(ibpi_coll_decode(&eh, msg, *bytes, u->own_dst + po * w->esz, c->o.nthreads));
	return IBP_OK;
}

static ibp_status_t ring_dec(flow_t *w, uint64_t k, int th)
{
	const ring_u_t *u = w->u;
	ibp_coll_comm_t *c = w->c;
	const coll_hdr_t *dh = &w->got[k];
	const uint8_t *msg = w->rbuf + k * w->pcap;
	uint64_t qo, qn;
	ibpi_flow_piece(u->rlen, w->np, k, &qo, &qn);
	if (!u->red)
		return ibpi_coll_decode(dh, msg, w->rsz[k], u->dst + qo * w->esz, c->o.nthreads);
	IBP_TRY(ibpi_coll_decode_f32(dh, msg, w->rsz[k], u->f[th], u->tmp[th], c->o.nthreads));
	ibpi_coll_add_round(u->f[th], u->loc + qo * w->esz, (ibp_dtype_t)dh->dtype, dh->elems, u->dst + qo * w->esz);
	return IBP_OK;
}

static const flow_ops_t ring_ops = { ring_enc, ring_dec, ring_elems };

/* The pipelined ring: AllGather (red = 0: own chunk `rank` at `own`,
 * received chunks decoded into recv) or ReduceScatter (red = 1: `own` is
 * the whole send buffer; at the end b->acc holds the sum of chunk rank).
 * Steps run one after the other, each a flow step (flow.c). */
static ibp_status_t ring_pipe(ibp_coll_comm_t *c, coll_hdr_t h, const uint8_t *own, uint8_t *recv,
			      const uint64_t *off, const uint64_t *len, bufs_t *b, uint64_t np, int red)
{
	const int r = c->rank, p = c->nranks;
	const uint64_t esz = ibp_dtype_size((ibp_dtype_t)h.dtype), maxn = max_len(c, len);
	uint64_t pcap = 0;
	IBP_TRY(ibpi_coll_msg_cap((ibp_dtype_t)h.dtype, maxn / np + 1, &pcap));
	const uint64_t pmax = maxn / np + 1; /* elements of the largest piece */
	static const enum coll_ws slots[2] = { COLL_WS_PIPE0, COLL_WS_PIPE1 };
	flow_bufs_t fb;
	IBP_TRY(ibpi_flow_bufs_get(c, slots, 2, np, pcap, "pipelined chunks", &fb));
	uint8_t **mb = fb.slot;
	uint64_t *sz = fb.sz;
	uint8_t *accs[2] = { b->acc, red ? ibpi_coll_ws(c, COLL_WS_PACC, maxn * esz) : NULL };
	uint8_t *scr = red ? ibpi_coll_ws(c, COLL_WS_SCRATCH, 2 * pmax * (sizeof(float) + esz)) : NULL;
	ibp_status_t st = IBP_OK;
	int leak = 0, ab = 0;
	if (red && (!accs[1] || !scr))
		st = ibpi_fail(IBP_ERR_NOMEM, "coll: no memory for pipelined %llu-element chunks",
			      (unsigned long long)maxn);
	if (st == IBP_OK && !red) /* the owner's chunk in place (FP8: what the others get, when encoded) */
		st = c->mem->copy(c, recv + off[r] * esz, own, len[r] * esz);
	for (int s = 0; s < p - 1 && st == IBP_OK; s++) {
		ring_u_t u = { .red = red };
		flow_t w = { .c = c, .ops = &ring_ops, .u = &u, .h = h, .np = np, .pcap = pcap, .esz = esz,
			     .right = mod(r + 1, p), .left = mod(r - 1, p), .got = fb.got, .req = fb.req };
		if (red) { /* floats first: aligned */
			u.f[0] = (float *)(void *)scr, u.f[1] = u.f[0] + pmax;
			u.tmp[0] = scr + 2 * pmax * sizeof(float), u.tmp[1] = u.tmp[0] + pmax * esz;
		}
		w.sc = red ? mod(r - 1 - s, p) : mod(r - s, p);
		w.rc = red ? mod(r - 2 - s, p) : mod(r - 1 - s, p);
		u.slen = len[w.sc];
		u.rlen = len[w.rc];
		if (red) { /* encodes its data, then each step's sum */
			u.esrc = s == 0 ? own + off[w.sc] * esz : accs[1 - ab];
			w.sbuf = mb[0], w.rbuf = mb[1], w.ssz = sz, w.rsz = sz + np;
			u.dst = accs[ab];
			u.loc = own + off[w.rc] * esz;
		} else { /* encodes its own chunk, then forwards what it received */
			u.esrc = s == 0 ? own : NULL;
			u.own_dst = s == 0 ? recv + off[r] * esz : NULL;
			w.sbuf = mb[s & 1], w.rbuf = mb[1 - (s & 1)];
			w.ssz = sz + (s & 1) * np, w.rsz = sz + (1 - (s & 1)) * np;
			u.dst = recv + off[w.rc] * esz;
		}
		w.enc = u.esrc != NULL;
		st = ibpi_flow_step(&w, &leak);
		ab = 1 - ab;
	}
	if (st == IBP_OK && red && accs[1 - ab] != b->acc)
		memcpy(b->acc, accs[1 - ab], len[r] * esz);
	ibpi_flow_bufs_put(c, &fb, leak);
	return st;
}

/* Ring ReduceScatter over chunks (off, len): at the end b->acc holds the
 * sum of chunk `rank`. Step s sends chunk rank-1-s (own data at s = 0,
 * then the partial just made) and receives chunk rank-2-s. */
static ibp_status_t ring_rs(ibp_coll_comm_t *c, coll_hdr_t h, const uint8_t *send, const uint64_t *off,
			    const uint64_t *len, bufs_t *b)
{
	int r = c->rank, p = c->nranks, right = mod(r + 1, p), left = mod(r - 1, p);
	uint64_t esz = ibp_dtype_size((ibp_dtype_t)h.dtype);
	if (p == 1)
		return c->mem->copy(c, b->acc, send + off[0] * esz, len[0] * esz);
	const uint64_t np = ring_pieces(c, len, esz);
	if (np > 1)
		return ring_pipe(c, h, send, NULL, off, len, b, np, 1);
	uint8_t enc = h.enc;
	for (int s = 0; s < p - 1; s++) {
		int sc = mod(r - 1 - s, p), rc = mod(r - 2 - s, p);
		coll_hdr_t sh = h, want = h, got;
		sh.elems = len[sc];
		sh.chunk = (uint32_t)sc;
		sh.enc = len[sc] ? enc : COLL_ENC_RAW;
		want.elems = len[rc];
		want.chunk = (uint32_t)rc;
		uint64_t sbytes = 0, rbytes = 0;
		IBP_TRY(c->mem->encode(c, &sh, s == 0 ? send + off[sc] * esz : b->acc, b->m[0], b->cap, &sbytes));
		IBP_TRY(ibpi_coll_sendrecv(c, right, b->m[0], sbytes, len[sc] * esz, left, b->m[1], b->cap, &rbytes));
		IBP_TRY(c->mem->check(c, b->m[1], rbytes, &want, left, &got));
		IBP_TRY(c->mem->reduce(c, &got, b->m[1], rbytes, send + off[rc] * esz, b));
	}
	return IBP_OK;
}

/* A received AllGather message decoded on the communicator's helper thread. */
typedef struct dec_job {
	coll_hdr_t h;
	const uint8_t *msg;
	uint64_t bytes;
	uint8_t *dst;
	int nthreads;
	ibp_status_t st;
	char err[256]; /* the helper's detail (ibpi_fail's message is per thread) */
} dec_job_t;

#ifndef AG_OVERLAP_MIN /* -DAG_OVERLAP_MIN=UINT64_MAX turns the overlap off (A/B runs) */
#define AG_OVERLAP_MIN (32u << 10) /* coded bytes (~50 KB of BF16): below, a handoff costs about a decode */
#endif

static void dec_run(void *arg)
{
	dec_job_t *j = arg;
	j->st = ibpi_coll_decode(&j->h, j->msg, j->bytes, j->dst, j->nthreads);
	if (j->st != IBP_OK)
		snprintf(j->err, sizeof j->err, "%s", ibp_last_error());
}

/* Waits for the helper; the job's failure is re-recorded on this thread. */
static ibp_status_t dec_join(ibp_coll_comm_t *c, dec_job_t *j)
{
	IBP_TRY(ibpi_coll_helper_wait(c->helper));
	return j->st == IBP_OK ? IBP_OK : ibpi_fail(j->st, "%s", j->err);
}

/* Ring AllGather over chunks (off, len): own (chunk `rank`, in dt) is
 * encoded once; received messages are decoded and forwarded unchanged. */
static ibp_status_t ring_ag(ibp_coll_comm_t *c, coll_hdr_t h, const uint8_t *own, uint8_t *recv,
			    const uint64_t *off, const uint64_t *len, bufs_t *b)
{
	int r = c->rank, p = c->nranks, right = mod(r + 1, p), left = mod(r - 1, p);
	uint64_t esz = ibp_dtype_size((ibp_dtype_t)h.dtype), bytes = 0;
	const uint64_t np = p > 1 ? ring_pieces(c, len, esz) : 1;
	if (np > 1)
		return ring_pipe(c, h, own, recv, off, len, b, np, 0);
	coll_hdr_t sh = h;
	sh.elems = len[r];
	sh.chunk = (uint32_t)r;
	if (!len[r])
		sh.enc = COLL_ENC_RAW;
	IBP_TRY(c->mem->encode(c, &sh, own, b->m[0], b->cap, &bytes));
	if (sh.enc == COLL_ENC_FP8) /* lossy: the owner keeps what the others get */
		IBP_TRY(c->mem->decode(c, &sh, b->m[0], bytes, recv + off[r] * esz));
	else
		IBP_TRY(c->mem->copy(c, recv + off[r] * esz, own, len[r] * esz));
	/* Step s forwards the message received at step s-1 while the helper
	 * thread decodes that same message (both only read it); the next
	 * receive goes to the other buffer, whose decode was joined before. */
	int cur = 0, running = 0;
	dec_job_t job;
	ibp_status_t st = IBP_OK;
	for (int s = 0; s < p - 1 && st == IBP_OK; s++) {
		int sc = mod(r - s, p), rc = mod(r - 1 - s, p);
		coll_hdr_t want = h, got;
		want.elems = len[rc];
		want.chunk = (uint32_t)rc;
		uint64_t rbytes = 0;
		st = ibpi_coll_sendrecv(c, right, b->m[cur], bytes, len[sc] * esz, left, b->m[1 - cur], b->cap, &rbytes);
		if (running) {
			ibp_status_t ds = dec_join(c, &job);
			st = st != IBP_OK ? st : ds;
			running = 0;
		}
		if (st == IBP_OK)
			st = c->mem->check(c, b->m[1 - cur], rbytes, &want, left, &got);
		if (st != IBP_OK)
			break;
		job = (dec_job_t){ got, b->m[1 - cur], rbytes, recv + off[rc] * esz, c->o.nthreads, IBP_OK, "" };
		/* Overlap only when a next step exists and the decode outweighs a handoff. */
		if (s < p - 2 && got.enc != COLL_ENC_RAW && rbytes >= AG_OVERLAP_MIN && c->mem == &ibpi_coll_mem_host) {
			if (!c->helper)
				st = ibpi_coll_helper_start(&c->helper);
			if (st == IBP_OK && (st = ibpi_coll_helper_post(c->helper, dec_run, &job)) == IBP_OK)
				running = 1;
		} else
			st = c->mem->decode(c, &got, b->m[1 - cur], rbytes, recv + off[rc] * esz);
		cur = 1 - cur;
		bytes = rbytes;
	}
	if (running) {
		ibp_status_t ds = dec_join(c, &job);
		st = st != IBP_OK ? st : ds;
	}
	return st;
}

/* Checks shared by every call; starts the call's bookkeeping. */
static ibp_status_t begin(ibp_coll_comm_t *c, const char *what, ibp_dtype_t dt, ibp_coll_codec_t codec,
			  void *stream)
{
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %s: comm is NULL", what);
	c->st.calls++;
	if (c->broken != IBP_OK)
		return ibpi_fail(IBP_ERR_IO, "coll: %s: the communicator is broken by an earlier failure", what);
	if (stream && c->mem_kind == IBP_COLL_MEM_HOST)
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				"coll: %s: a stream needs device buffers (ibp_coll_comm_set_memory)", what);
	if (c->mem_kind != IBP_COLL_MEM_HOST && (unsigned)codec > IBP_COLL_CODEC_FP8 &&
	    (unsigned)codec <= IBP_COLL_CODEC_PTS)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: %s: codec %s on device buffers (none, exp, fp8 only)",
				what, ibp_coll_codec_name(codec));
	c->stream = stream;
	if (dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16 && dt != IBP_DTYPE_F32)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %s: dtype %s (bf16, f16 or f32 only)", what,
				ibp_dtype_name(dt));
	if ((unsigned)codec > IBP_COLL_CODEC_PTS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %s: unknown codec %d", what, (int)codec);
	if ((codec == IBP_COLL_CODEC_DYNAMIQ || codec == IBP_COLL_CODEC_PTS) && strcmp(what, "allreduce"))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %s: codec %s is for allreduce only", what,
				ibp_coll_codec_name(codec));
	/* LSQ's rounding is keyed per message, not per hop: chained re-encoding would reuse it. */
	if (codec == IBP_COLL_CODEC_LSQ && strncmp(what, "alltoall", 8))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %s: codec lsq is for alltoall(v) only", what);
	c->seq++;
	return IBP_OK;
}

static ibp_status_t finish(ibp_coll_comm_t *c, ibp_status_t s, uint64_t wire0, uint64_t logical0)
{
	ibp_status_t f = c->mem->finish(c); /* the device table's stream drained */
	ibpi_coll_ws_trim(c);
	s = s != IBP_OK ? s : f;
	uint64_t w = c->st.wire_bytes - wire0, l = c->st.logical_bytes - logical0;
	c->st.last_ratio = w ? (double)l / (double)w : 1.0;
	if (s != IBP_OK)
		c->broken = s;
	return s;
}

static coll_hdr_t header(ibp_coll_comm_t *c, enum coll_op op, ibp_coll_codec_t codec, ibp_dtype_t dt,
			 uint64_t count, enum coll_enc enc)
{
	coll_hdr_t h = { COLL_MAGIC, (uint8_t)op, (uint8_t)codec, (uint8_t)dt, (uint8_t)enc, count, 0, 0, c->seq };
	return h;
}

static ibp_status_t chunks(int p, uint64_t **off, uint64_t **len)
{
	*off = calloc((size_t)p, sizeof **off);
	*len = calloc((size_t)p, sizeof **len);
	if (!*off || !*len) {
		free(*off);
		free(*len);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: out of memory");
	}
	return IBP_OK;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

#define SAMPLE 16384u

/* ---- the transport's native collectives ----
 * Before a call that may run natively every rank publishes what it was
 * asked and what it decided (one small exchange): a mismatched call fails
 * on every rank, and the call runs natively only when every rank can and
 * goes plain; otherwise every rank runs the algorithms above (mixed
 * encodings are fine there). */
typedef struct native_blob {
	uint32_t magic, seq;
	uint8_t op, dtype, codec, ok; /* ok: this rank can and will run plain natively */
	uint32_t pad;
	uint64_t count;
} native_blob_t;

#define NATIVE_MAX 0x7fffffffull /* the natives' count and displacement bound (ibp/coll.h) */

/* Whether the call runs natively (*native), after the exchange; a
 * mismatch is IBP_ERR_INVALID_ARG. counts (AllToAllv: 2p u64, this rank's
 * sendcounts then recvcounts) travel with the blob and are cross-checked. */
static ibp_status_t native_agree(ibp_coll_comm_t *c, const char *what, enum coll_op op, ibp_dtype_t dt,
				 ibp_coll_codec_t codec, uint64_t count, int can, const uint64_t *counts,
				 int *native)
{
	*native = 0;
	const ibp_coll_native_t *nt = c->t.native;
	const int p = c->nranks;
	const uint64_t extra = counts ? 16 * (uint64_t)p : 0, bytes = sizeof(native_blob_t) + extra;
	uint8_t *mine = malloc(bytes), *all = malloc(bytes * (uint64_t)p);
	if (!mine || !all) {
		free(mine);
		free(all);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: %s: out of memory", what);
	}
	native_blob_t b = { COLL_MAGIC, c->seq, (uint8_t)op, (uint8_t)dt, (uint8_t)codec, (uint8_t)(can != 0), 0, count };
	memcpy(mine, &b, sizeof b);
	if (counts)
		memcpy(mine + sizeof b, counts, extra);
	ibp_status_t s = nt->exchange(c->t.ctx, mine, all, bytes, c->o.timeout_ms);
	int every = 1;
	for (int r = 0; r < p && s == IBP_OK; r++) {
		native_blob_t o;
		memcpy(&o, all + (uint64_t)r * bytes, sizeof o);
		if (o.magic != COLL_MAGIC || o.seq != b.seq || o.op != b.op || o.dtype != b.dtype || o.codec != b.codec ||
		    o.count != b.count)
			s = ibpi_fail(IBP_ERR_INVALID_ARG,
				     "coll: %s: mismatch: rank %d called op %u, %s, codec %s, count %llu (call %u); this "
				     "rank op %u, %s, codec %s, count %llu (call %u)", what, r, o.op,
				     ibp_dtype_name((ibp_dtype_t)o.dtype), ibp_coll_codec_name((ibp_coll_codec_t)o.codec),
				     (unsigned long long)o.count, o.seq, b.op, ibp_dtype_name(dt), ibp_coll_codec_name(codec),
				     (unsigned long long)count, b.seq);
		every &= o.ok;
		/* AllToAllv: what rank r sends this rank is what this rank expects from r */
		if (s == IBP_OK && counts) {
			uint64_t sent = 0;
			memcpy(&sent, all + (uint64_t)r * bytes + sizeof b + 8 * (uint64_t)c->rank, 8);
			if (sent != counts[p + r])
				s = ibpi_fail(IBP_ERR_INVALID_ARG,
					     "coll: %s: mismatch: rank %d sends this rank %llu elements, it expects %llu", what,
					     r, (unsigned long long)sent, (unsigned long long)counts[p + r]);
		}
	}
	free(mine);
	free(all);
	*native = s == IBP_OK && every;
	return s;
}

/* The bookkeeping of a native call: as a plain call of the algorithms
 * would count it (logical = wire: nothing compressed). */
static void native_done(ibp_coll_comm_t *c, uint64_t sent_bytes)
{
	c->st.native++;
	c->st.wire_bytes += sent_bytes;
	c->st.logical_bytes += sent_bytes;
}

/* A call in the form the transport's natives take. */
typedef struct native_call {
	enum coll_op op;
	const void *send;
	void *recv;
	uint64_t count;                    /* per rank (AllToAllv: 0) */
	const uint64_t *sc, *sd, *rc, *rd; /* AllToAllv's counts and displacements */
} native_call_t;

/* Runs the call on the transport's native collective when every rank
 * agrees to (the exchange above): 1, with its outcome in *s (a failed
 * exchange included), or 0: run the algorithms. enc is this rank's
 * decision (COLL_ENC_RAW: plain). */
static int try_native(ibp_coll_comm_t *c, const char *what, const native_call_t *a, ibp_dtype_t dt,
		      ibp_coll_codec_t codec, enum coll_enc enc, ibp_status_t *s)
{
	const ibp_coll_native_t *nt = c->t.native;
	if (!nt || !nt->exchange || c->o.rate > 0 || c->mem_kind != IBP_COLL_MEM_HOST)
		return 0;
	const int p = c->nranks;
	const uint64_t esz = ibp_dtype_size(dt);
	int has = 0, native = 0;
	uint64_t sent = 0, *cv = NULL; /* AllToAllv: sendcounts then recvcounts, for the check */
	switch (a->op) {
	case COLL_OP_AG: has = nt->allgather != NULL; break;
	case COLL_OP_RS: has = nt->reducescatter != NULL; break;
	case COLL_OP_AR: has = nt->allreduce != NULL; break;
	case COLL_OP_A2A: has = nt->alltoall != NULL; break;
	default: has = nt->alltoallv != NULL; break;
	}
	int fits = a->count <= NATIVE_MAX;
	if (a->op == COLL_OP_A2AV) {
		if (!(cv = malloc(16 * (uint64_t)p))) {
			*s = ibpi_fail(IBP_ERR_NOMEM, "coll: %s: out of memory", what);
			return 1;
		}
		for (int i = 0; i < p; i++) {
			cv[i] = a->sc[i];
			cv[p + i] = a->rc[i];
			fits &= a->sc[i] <= NATIVE_MAX && a->rc[i] <= NATIVE_MAX && a->sd[i] <= NATIVE_MAX &&
				a->rd[i] <= NATIVE_MAX;
			sent += i == c->rank ? 0 : a->sc[i];
		}
	}
	*s = native_agree(c, what, a->op, dt, codec, a->count, enc == COLL_ENC_RAW && has && fits, cv, &native);
	free(cv);
	if (*s != IBP_OK)
		return 1;
	if (!native)
		return 0;
	const int64_t tmo = c->o.timeout_ms;
	switch (a->op) {
	case COLL_OP_AG:
		*s = nt->allgather(c->t.ctx, a->send, a->recv, a->count, dt, tmo);
		sent = (uint64_t)(p - 1) * a->count;
		break;
	case COLL_OP_RS:
		*s = nt->reducescatter(c->t.ctx, a->send, a->recv, a->count, dt, tmo);
		sent = (uint64_t)(p - 1) * a->count;
		break;
	case COLL_OP_AR: /* what the ring sends: 2 (p - 1) chunks of count / p */
		*s = nt->allreduce(c->t.ctx, a->send, a->recv, a->count, dt, tmo);
		sent = 2 * (uint64_t)(p - 1) * (a->count / (uint64_t)p);
		break;
	case COLL_OP_A2A:
		*s = nt->alltoall(c->t.ctx, a->send, a->recv, a->count, dt, tmo);
		sent = (uint64_t)(p - 1) * a->count;
		break;
	default:
		*s = nt->alltoallv(c->t.ctx, a->send, a->sc, a->sd, a->recv, a->rc, a->rd, dt, tmo);
		break;
	}
	if (*s == IBP_OK)
		native_done(c, sent * esz);
	return 1;
}

ibp_status_t ibp_coll_allgather(const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
				ibp_coll_codec_t codec, ibp_coll_comm_t *c, void *stream)
{
	IBP_TRY(begin(c, "allgather", dt, codec, stream));
	if (count && (!send || !recv))
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: allgather: NULL buffer"), 0, 0);
	if (count > IBP_COLL_MAX_V / (uint64_t)c->nranks)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: allgather: count too large"), 0, 0);
	uint64_t w0 = c->st.wire_bytes, l0 = c->st.logical_bytes, *off, *len;
	int p = c->nranks;
	enum coll_enc enc = ibpi_coll_decide(c, codec, dt, send, min_u64(count, SAMPLE), count, (uint64_t)p - 1, 1,
					(uint64_t)p - 1);
	const native_call_t na = { COLL_OP_AG, send, recv, count, NULL, NULL, NULL, NULL };
	ibp_status_t s = IBP_OK;
	if (try_native(c, "allgather", &na, dt, codec, enc, &s))
		return finish(c, s, w0, l0);
	IBP_TRY(chunks(p, &off, &len));
	for (int i = 0; i < p; i++) {
		off[i] = (uint64_t)i * count;
		len[i] = count;
	}
	bufs_t b;
	s = c->mem->bufs_get(c, dt, count, 0, &b);
	if (s == IBP_OK)
		s = ring_ag(c, header(c, COLL_OP_AG, codec, dt, count, enc), send, recv, off, len, &b);
	c->mem->bufs_put(c, &b);
	free(off);
	free(len);
	return finish(c, s, w0, l0);
}

ibp_status_t ibp_coll_reducescatter(const void *send, void *recv, uint64_t recvcount, ibp_dtype_t dt,
				    ibp_coll_redop_t op, ibp_coll_codec_t codec, ibp_coll_comm_t *c, void *stream)
{
	IBP_TRY(begin(c, "reducescatter", dt, codec, stream));
	if (op != IBP_COLL_SUM)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: reducescatter: only SUM"), 0, 0);
	if (recvcount && (!send || !recv))
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: reducescatter: NULL buffer"), 0, 0);
	if (recvcount > IBP_COLL_MAX_V / (uint64_t)c->nranks)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: reducescatter: count too large"), 0, 0);
	uint64_t w0 = c->st.wire_bytes, l0 = c->st.logical_bytes, *off, *len, esz = ibp_dtype_size(dt);
	int p = c->nranks;
	enum coll_enc enc = ibpi_coll_decide(c, codec, dt, send, min_u64(recvcount, SAMPLE), recvcount, (uint64_t)p - 1,
					(uint64_t)p - 1, (uint64_t)p - 1);
	const native_call_t na = { COLL_OP_RS, send, recv, recvcount, NULL, NULL, NULL, NULL };
	ibp_status_t s = IBP_OK;
	if (try_native(c, "reducescatter", &na, dt, codec, enc, &s))
		return finish(c, s, w0, l0);
	IBP_TRY(chunks(p, &off, &len));
	for (int i = 0; i < p; i++) {
		off[i] = (uint64_t)i * recvcount;
		len[i] = recvcount;
	}
	bufs_t b;
	s = c->mem->bufs_get(c, dt, recvcount, 1, &b);
	if (s == IBP_OK)
		s = ring_rs(c, header(c, COLL_OP_RS, codec, dt, recvcount, enc), send, off, len, &b);
	if (s == IBP_OK)
		s = c->mem->copy(c, recv, b.acc, recvcount * esz);
	c->mem->bufs_put(c, &b);
	free(off);
	free(len);
	return finish(c, s, w0, l0);
}

ibp_status_t ibp_coll_allreduce(const void *send, void *recv, uint64_t count, ibp_dtype_t dt, ibp_coll_redop_t op,
				ibp_coll_codec_t codec, ibp_coll_comm_t *c, void *stream)
{
	IBP_TRY(begin(c, "allreduce", dt, codec, stream));
	if (op != IBP_COLL_SUM)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: allreduce: only SUM"), 0, 0);
	if (count && (!send || !recv))
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: allreduce: NULL buffer"), 0, 0);
	if (count > IBP_COLL_MAX_V)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: allreduce: count too large"), 0, 0);
	uint64_t w0 = c->st.wire_bytes, l0 = c->st.logical_bytes, *off, *len;
	int p = c->nranks;
	uint64_t q = count / (uint64_t)p, rem = count % (uint64_t)p, maxn = q + (rem != 0);
	enum coll_enc enc = COLL_ENC_RAW;
	if (codec == IBP_COLL_CODEC_DYNAMIQ || codec == IBP_COLL_CODEC_PTS) { /* lossy by request: not weighed */
		int use = c->o.policy != IBP_COLL_POLICY_NEVER && p > 1;
		c->st.last_decision = use ? IBP_COLL_DECIDED_COMPRESS : IBP_COLL_DECIDED_PLAIN;
		if (use) {
			c->st.compressed++;
			coll_hdr_t h = header(c, COLL_OP_AR, codec, dt, count, COLL_ENC_RAW);
			return finish(c, codec == IBP_COLL_CODEC_PTS ? ibpi_pts_allreduce(c, h, send, recv, count)
								     : ibpi_dq_allreduce(c, h, send, recv, count),
				      w0, l0);
		}
		c->st.plain++;
	} else
		enc = ibpi_coll_decide(c, codec, dt, send, min_u64(count, SAMPLE), maxn, 2 * ((uint64_t)p - 1), (uint64_t)p,
				  2 * ((uint64_t)p - 1));
	const native_call_t na = { COLL_OP_AR, send, recv, count, NULL, NULL, NULL, NULL };
	ibp_status_t s = IBP_OK;
	if (try_native(c, "allreduce", &na, dt, codec, enc, &s))
		return finish(c, s, w0, l0);
	IBP_TRY(chunks(p, &off, &len));
	for (int i = 0; i < p; i++) {
		len[i] = q + ((uint64_t)i < rem);
		off[i] = (uint64_t)i * q + min_u64((uint64_t)i, rem);
	}
	bufs_t b;
	s = c->mem->bufs_get(c, dt, maxn, 1, &b);
	coll_hdr_t h = header(c, COLL_OP_AR, codec, dt, count, enc);
	if (s == IBP_OK)
		s = ring_rs(c, h, send, off, len, &b);
	if (s == IBP_OK)
		s = ring_ag(c, h, b.acc, recv, off, len, &b);
	c->mem->bufs_put(c, &b);
	free(off);
	free(len);
	return finish(c, s, w0, l0);
}

/* Pairwise exchange: step s sends to rank+s and receives from rank-s. */
/* Step k of a pipelined AllToAll (every block `count` elements, so both
 * ends of each pair derive the same pieces): the block to dst leaves in
 * pieces as they are encoded while the block from src arrives and is
 * decoded piece by piece (flow.c, algo.c's codec steps). */
static ibp_status_t a2a_pipe_step(ibp_coll_comm_t *c, coll_hdr_t h, const uint8_t *sblock, uint8_t *rblock, int dst,
				  int src, uint64_t count, uint64_t np, int *leak)
{
	const uint64_t esz = ibp_dtype_size((ibp_dtype_t)h.dtype);
	uint64_t pcap = 0;
	IBP_TRY(ibpi_coll_msg_cap((ibp_dtype_t)h.dtype, count / np + 1, &pcap));
	static const enum coll_ws slots[2] = { COLL_WS_PIPE0, COLL_WS_PIPE1 };
	flow_bufs_t fb;
	IBP_TRY(ibpi_flow_bufs_get(c, slots, 2, np, pcap, "a pipelined block", &fb));
	ring_u_t u = { .slen = count, .rlen = count, .esrc = sblock, .dst = rblock };
	flow_t w = { .c = c, .ops = &ring_ops, .u = &u, .h = h, .np = np, .pcap = pcap, .esz = esz, .right = dst,
		     .left = src, .sc = c->rank, .rc = src, .enc = 1, .sbuf = fb.slot[0], .rbuf = fb.slot[1],
		     .ssz = fb.sz, .rsz = fb.sz + np, .got = fb.got, .req = fb.req };
	ibp_status_t st = ibpi_flow_step(&w, leak);
	ibpi_flow_bufs_put(c, &fb, 0); /* the caller marks a leak once, after every step */
	return st;
}

/* equal: every block has the same count on every rank (AllToAll, not
 * AllToAllv), the condition for pieces. */
static ibp_status_t a2a(ibp_coll_comm_t *c, coll_hdr_t h, const uint8_t *send, const uint64_t *sc,
			const uint64_t *sd, uint8_t *recv, const uint64_t *rc, const uint64_t *rd, int equal)
{
	int r = c->rank, p = c->nranks;
	uint64_t esz = ibp_dtype_size((ibp_dtype_t)h.dtype), maxn = 0;
	for (int i = 0; i < p; i++) {
		maxn = sc[i] > maxn ? sc[i] : maxn;
		maxn = rc[i] > maxn ? rc[i] : maxn;
	}
	if (sc[r] != rc[r])
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: alltoallv: rank %d sends itself %llu elements but expects %llu",
				r, (unsigned long long)sc[r], (unsigned long long)rc[r]);
	/* In place (send and recv overlap): a received block would overwrite
	 * a block still to be sent, so the sends read a copy (host buffers). */
	uint64_t send_end = 0, recv_end = 0;
	for (int i = 0; i < p; i++) {
		send_end = sd[i] + sc[i] > send_end ? sd[i] + sc[i] : send_end;
		recv_end = rd[i] + rc[i] > recv_end ? rd[i] + rc[i] : recv_end;
	}
	uint8_t *staged = NULL;
	if (c->mem_kind == IBP_COLL_MEM_HOST && send_end && recv_end && send < recv + recv_end * esz &&
	    recv < send + send_end * esz) {
		if (!(staged = malloc(send_end * esz)))
			return ibpi_fail(IBP_ERR_NOMEM, "coll: alltoall: out of memory to stage an in-place call");
		memcpy(staged, send, send_end * esz);
		send = staged;
	}
	ibp_status_t cs = c->mem->copy(c, recv + rd[r] * esz, send + sd[r] * esz, sc[r] * esz);
	if (cs != IBP_OK) {
		free(staged);
		return cs;
	}
	const uint64_t np = equal && p > 1 ? ring_pieces(c, sc, esz) : 1;
	if (np > 1) {
		ibp_status_t s = IBP_OK;
		int leak = 0;
		for (int k = 1; k < p && s == IBP_OK; k++) {
			int dst = mod(r + k, p), src = mod(r - k, p);
			s = a2a_pipe_step(c, h, send + sd[dst] * esz, recv + rd[src] * esz, dst, src, sc[dst], np, &leak);
		}
		if (leak) /* the transport may still use them: a broken communicator never frees them */
			c->ws_lent = 1;
		free(staged);
		return s;
	}
	bufs_t b;
	ibp_status_t s = c->mem->bufs_get(c, (ibp_dtype_t)h.dtype, maxn, 0, &b);
	if (s != IBP_OK) {
		free(staged);
		return s;
	}
	for (int k = 1; k < p && s == IBP_OK; k++) {
		int dst = mod(r + k, p), src = mod(r - k, p);
		coll_hdr_t sh = h, want = h, got;
		sh.elems = sc[dst];
		sh.chunk = (uint32_t)r;
		if (!sc[dst])
			sh.enc = COLL_ENC_RAW;
		want.elems = rc[src];
		want.chunk = (uint32_t)src;
		uint64_t sbytes = 0, rbytes = 0;
		if ((s = c->mem->encode(c, &sh, send + sd[dst] * esz, b.m[0], b.cap, &sbytes)) != IBP_OK ||
		    (s = ibpi_coll_sendrecv(c, dst, b.m[0], sbytes, sc[dst] * esz, src, b.m[1], b.cap, &rbytes)) !=
			    IBP_OK ||
		    (s = c->mem->check(c, b.m[1], rbytes, &want, src, &got)) != IBP_OK)
			break;
		s = c->mem->decode(c, &got, b.m[1], rbytes, recv + rd[src] * esz);
	}
	c->mem->bufs_put(c, &b);
	free(staged);
	return s;
}

ibp_status_t ibp_coll_alltoall(const void *send, void *recv, uint64_t count, ibp_dtype_t dt,
			       ibp_coll_codec_t codec, ibp_coll_comm_t *c, void *stream)
{
	IBP_TRY(begin(c, "alltoall", dt, codec, stream));
	if (count && (!send || !recv))
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: alltoall: NULL buffer"), 0, 0);
	if (count > IBP_COLL_MAX_V / (uint64_t)c->nranks)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: alltoall: count too large"), 0, 0);
	uint64_t w0 = c->st.wire_bytes, l0 = c->st.logical_bytes, *cnt, *dis;
	int p = c->nranks;
	enum coll_enc enc = ibpi_coll_decide(c, codec, dt, send, min_u64(count * (uint64_t)p, SAMPLE), count,
					(uint64_t)p - 1, (uint64_t)p - 1, (uint64_t)p - 1);
	const native_call_t na = { COLL_OP_A2A, send, recv, count, NULL, NULL, NULL, NULL };
	ibp_status_t ns = IBP_OK;
	if (try_native(c, "alltoall", &na, dt, codec, enc, &ns))
		return finish(c, ns, w0, l0);
	IBP_TRY(chunks(p, &cnt, &dis));
	for (int i = 0; i < p; i++) {
		cnt[i] = count;
		dis[i] = (uint64_t)i * count;
	}
	ibp_status_t s = a2a(c, header(c, COLL_OP_A2A, codec, dt, count, enc), send, cnt, dis, recv, cnt, dis, 1);
	free(cnt);
	free(dis);
	return finish(c, s, w0, l0);
}

ibp_status_t ibp_coll_alltoallv(const void *send, const uint64_t *sendcounts, const uint64_t *sdispls, void *recv,
				const uint64_t *recvcounts, const uint64_t *rdispls, ibp_dtype_t dt,
				ibp_coll_codec_t codec, ibp_coll_comm_t *c, void *stream)
{
	IBP_TRY(begin(c, "alltoallv", dt, codec, stream));
	if (!sendcounts || !sdispls || !recvcounts || !rdispls)
		return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: alltoallv: NULL count or displacement array"),
			      0, 0);
	int p = c->nranks;
	uint64_t maxn = 0;
	for (int i = 0; i < p; i++) {
		if ((sendcounts[i] && !send) || (recvcounts[i] && !recv) || sendcounts[i] > IBP_COLL_MAX_V ||
		    recvcounts[i] > IBP_COLL_MAX_V || sdispls[i] > IBP_COLL_MAX_V || rdispls[i] > IBP_COLL_MAX_V)
			return finish(c, ibpi_fail(IBP_ERR_INVALID_ARG, "coll: alltoallv: bad entry for rank %d", i), 0,
				      0);
		maxn = sendcounts[i] > maxn ? sendcounts[i] : maxn;
	}
	uint64_t w0 = c->st.wire_bytes, l0 = c->st.logical_bytes;
	const uint8_t *sample = sendcounts[0] ? (const uint8_t *)send + sdispls[0] * ibp_dtype_size(dt) : NULL;
	enum coll_enc enc = ibpi_coll_decide(c, codec, dt, sample, min_u64(sendcounts[0], SAMPLE), maxn, (uint64_t)p - 1,
					(uint64_t)p - 1, (uint64_t)p - 1);
	const native_call_t na = { COLL_OP_A2AV, send, recv, 0, sendcounts, sdispls, recvcounts, rdispls };
	ibp_status_t s = IBP_OK;
	if (try_native(c, "alltoallv", &na, dt, codec, enc, &s))
		return finish(c, s, w0, l0);
	s = a2a(c, header(c, COLL_OP_A2AV, codec, dt, 0, enc), send, sendcounts, sdispls, recv,
			     recvcounts, rdispls, 0);
	return finish(c, s, w0, l0);
}
