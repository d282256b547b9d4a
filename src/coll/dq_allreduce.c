/* dq_allreduce.c - DynamiQ's ring all-reduce on a communicator: the
 * statistics all-gather, the plan (dynamiq.c), then a ring whose every hop
 * decodes, adds and re-quantizes (ibpi_dq_hop_sgs), pipelined in pieces on
 * transports with async (flow.h), whole chunks otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/dynamiq.h"
#include "coll/flow.h"
#include "util/error.h"

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

static int mod(int a, int p)
{
	return ((a % p) + p) % p;
}

static uint64_t chunk_elems(const dq_plan_t *pl, int k)
{
	uint64_t a = pl->lo[k] * DQ_S, b = pl->lo[k + 1] * DQ_S;
	return (b < pl->d ? b : pl->d) - (a < pl->d ? a : pl->d);
}

/* Every rank gets every rank's statistics; all sum them in rank order, so
 * all derive the same plan bit for bit. */
static ibp_status_t stats_allgather(ibp_coll_comm_t *c, coll_hdr_t h, const float *mine, uint64_t n2, float *all)
{
	int r = c->rank, p = c->nranks, right = mod(r + 1, p), left = mod(r - 1, p);
	uint64_t bytes = n2 * sizeof(float), cap = COLL_HDR + bytes;
	uint8_t *m = malloc(cap);
	if (!m)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory");
	if (n2)
		memcpy(all + (uint64_t)r * n2, mine, bytes);
	ibp_status_t s = IBP_OK;
	h.enc = COLL_ENC_RAW;
	h.elems = n2;
	for (int t = 0; t < p - 1 && s == IBP_OK; t++) {
		int so = mod(r - t, p), ro = mod(r - 1 - t, p);
		coll_hdr_t sh = h, want = h, got;
		sh.chunk = (uint32_t)so;
		want.chunk = (uint32_t)ro;
		memcpy(m, &sh, sizeof sh);
		uint64_t rb = 0;
		uint8_t *rbuf = (uint8_t *)(all + (uint64_t)ro * n2);
		/* Receive straight after the header: send from a copy, receive into m. */
		if (n2)
			memcpy(m + COLL_HDR, all + (uint64_t)so * n2, bytes);
		uint8_t *in = malloc(cap);
		if (!in) {
			s = ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory");
			break;
		}
		s = ibpi_coll_sendrecv(c, right, m, cap, bytes, left, in, cap, &rb);
		if (s == IBP_OK)
			s = ibpi_coll_check(in, rb, &want, left, &got);
		if (s == IBP_OK && (got.enc != COLL_ENC_RAW || rb != cap))
			s = ibpi_fail(IBP_ERR_CORRUPT, "coll: dynamiq: statistics message from rank %d is malformed",
				     left);
		if (s == IBP_OK && n2)
			memcpy(rbuf, in + COLL_HDR, bytes);
		free(in);
	}
	free(m);
	return s;
}



/* Receives chunk `ck` from `left` into m and checks its header and size. */
static ibp_status_t recv_chunk(ibp_coll_comm_t *c, const dq_plan_t *pl, coll_hdr_t h, int ck, int left,
			       const uint8_t *sbuf, uint64_t sbytes, uint64_t slogical, uint8_t *m, uint64_t cap)
{
	coll_hdr_t want = h, got;
	want.elems = chunk_elems(pl, ck);
	want.chunk = (uint32_t)ck;
	uint64_t rb = 0;
	IBP_TRY(ibpi_coll_sendrecv(c, mod(c->rank + 1, c->nranks), sbuf, sbytes, slogical, left, m, cap, &rb));
	IBP_TRY(ibpi_coll_check(m, rb, &want, left, &got));
	if (got.enc != COLL_ENC_DQ || rb != COLL_HDR + pl->cbytes[ck])
		return ibpi_fail(IBP_ERR_CORRUPT,
				"coll: dynamiq: chunk %d from rank %d has %llu payload bytes (encoding %u), expected %llu",
				ck, left, (unsigned long long)(rb - COLL_HDR), got.enc,
				(unsigned long long)pl->cbytes[ck]);
	return IBP_OK;
}

/* ---- the pipelined ring (transports with async, flow.h) ----
 * Chunk k travels as np pieces on SG boundaries, split by bytes as the
 * plan splits the call into chunks; every rank derives the same pieces
 * from the plan, so a piece's exact size is known before it arrives. The
 * reduce-scatter's hops work piece by piece as pieces arrive (decode, add,
 * re-quantize, and at the sink decode the sum into recv), the all-gather
 * forwards and decodes piece by piece. No FP32 copy of the call: the
 * input is widened and the sum narrowed one SG at a time. */

/* First SG of piece k of chunk ck (np: the end). */
static uint64_t piece_sg(const dq_plan_t *pl, int ck, uint64_t np, uint64_t k)
{
	uint64_t lo = pl->lo[ck], hi = pl->lo[ck + 1], cb = pl->cbytes[ck];
	if (k == 0 || k >= np)
		return k == 0 ? lo : hi;
	uint64_t target = cb / np * k + cb % np * k / np; /* floor(cb * k / np) without overflow */
	while (lo < hi) { /* first SG at or past target */
		uint64_t mid = lo + (hi - lo) / 2;
		if (pl->boff[mid] < target)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

typedef struct dq_piece {
	uint64_t j0, j1, bytes, elems;
} dq_piece_t;

static dq_piece_t piece_of(const dq_plan_t *pl, int ck, uint64_t np, uint64_t k)
{
	dq_piece_t pc;
	pc.j0 = piece_sg(pl, ck, np, k);
	pc.j1 = piece_sg(pl, ck, np, k + 1);
	uint64_t hi = pl->lo[ck + 1];
	pc.bytes = (pc.j1 < hi ? pl->boff[pc.j1] : pl->cbytes[ck]) - (pc.j0 < hi ? pl->boff[pc.j0] : pl->cbytes[ck]);
	uint64_t e0 = pc.j0 * DQ_S, e1 = pc.j1 * DQ_S;
	pc.elems = (e1 < pl->d ? e1 : pl->d) - (e0 < pl->d ? e0 : pl->d);
	return pc;
}

typedef struct dq_u {
	const dq_plan_t *pl;
	const void *src; /* the rank's input (dt) */
	void *recv;      /* the sum (dt) */
	ibp_dtype_t dt;
	int rank;
	int hop, sink;   /* received pieces: re-quantized into obuf (and decoded at the sink), else decoded */
	uint8_t *obuf;
	uint64_t *osz;
} dq_u_t;

static uint64_t dq_elems(const flow_t *w, int recv, uint64_t k)
{
	const dq_u_t *u = w->u;
	return piece_of(u->pl, recv ? w->rc : w->sc, w->np, k).elems;
}

/* Piece header in front of the piece's bytes. */
static void dq_hdr(const flow_t *w, int ck, uint64_t k, uint64_t elems, uint8_t *msg)
{
	coll_hdr_t h = w->h;
	h.elems = elems;
	h.chunk = ibpi_flow_chunk_id(k, ck);
	memcpy(msg, &h, sizeof h);
}

/* The leaf (reduce-scatter step 0) quantizes its own chunk sc. */
static ibp_status_t dq_enc(flow_t *w, uint64_t k, uint64_t *bytes)
{
	const dq_u_t *u = w->u;
	const dq_piece_t pc = piece_of(u->pl, w->sc, w->np, k);
	uint8_t *msg = w->sbuf + k * w->pcap;
	dq_hdr(w, w->sc, k, pc.elems, msg);
	IBP_TRY(ibpi_dq_hop_sgs(u->pl, pc.j0, pc.j1, NULL, u->src, u->dt, u->rank, msg + COLL_HDR));
	*bytes = COLL_HDR + pc.bytes;
	return IBP_OK;
}

static ibp_status_t dq_dec(flow_t *w, uint64_t k, int th)
{
	(void)th; /* no per-thread scratch: the SG buffers are on the stack */
	const dq_u_t *u = w->u;
	const dq_piece_t pc = piece_of(u->pl, w->rc, w->np, k);
	const uint8_t *in = w->rbuf + k * w->pcap + COLL_HDR;
	if (w->got[k].enc != COLL_ENC_DQ || w->rsz[k] != COLL_HDR + pc.bytes)
		return ibpi_fail(IBP_ERR_CORRUPT,
				"coll: dynamiq: piece %llu of chunk %d from rank %d has %llu payload bytes (encoding %u), "
				"expected %llu",
				(unsigned long long)k, w->rc, w->left, (unsigned long long)(w->rsz[k] - COLL_HDR),
				w->got[k].enc, (unsigned long long)pc.bytes);
	if (!u->hop)
		return ibpi_dq_decode_sgs(u->pl, pc.j0, pc.j1, in, u->dt, u->recv);
	uint8_t *out = u->obuf + k * w->pcap;
	dq_hdr(w, w->rc, k, pc.elems, out);
	IBP_TRY(ibpi_dq_hop_sgs(u->pl, pc.j0, pc.j1, in, u->src, u->dt, u->rank, out + COLL_HDR));
	u->osz[k] = COLL_HDR + pc.bytes;
	/* The sink's own input for these SGs was read just above: recv may be send. */
	return u->sink ? ibpi_dq_decode_sgs(u->pl, pc.j0, pc.j1, out + COLL_HDR, u->dt, u->recv) : IBP_OK;
}

static const flow_ops_t dq_ops = { dq_enc, dq_dec, dq_elems };

/* Pieces a chunk of this plan travels in (1: whole chunks). */
static uint64_t dq_pieces(const ibp_coll_comm_t *c, const dq_plan_t *pl)
{
	if (!c->t.async || c->piece_bytes == 0 || c->nranks >= (1 << 16))
		return 1;
	uint64_t np = ceil_div(ibpi_dq_max_chunk(pl), c->piece_bytes);
	return np < FLOW_PIECES_MIN ? 1 : np > FLOW_PIECES_MAX ? FLOW_PIECES_MAX : np;
}

static ibp_status_t dq_ring_pipe(ibp_coll_comm_t *c, coll_hdr_t h, const dq_plan_t *pl, uint64_t np,
				 const void *send, void *recv)
{
	const int r = c->rank, p = c->nranks;
	/* A piece holds at most its share of the chunk's bytes plus one SG (the split is on SG boundaries). */
	const uint64_t pcap = COLL_HDR + ceil_div(ibpi_dq_max_chunk(pl), np) + ibpi_dq_sg_bytes(DQ_S, 8);
	static const enum coll_ws slots[3] = { COLL_WS_PIPE0, COLL_WS_PIPE1, COLL_WS_PIPE2 };
	flow_bufs_t fb;
	IBP_TRY(ibpi_flow_bufs_get(c, slots, 3, np, pcap, "DynamiQ's pipelined chunks", &fb));
	uint8_t **buf = fb.slot;
	uint64_t *sz = fb.sz;
	ibp_status_t st = IBP_OK;
	int leak = 0, is = 0, ir = 1, io = 2; /* which buffer sends, receives, holds the hops' output */
	h.enc = COLL_ENC_DQ;
	/* Reduce-scatter steps t < p - 1, then all-gather steps. */
	for (int t = 0; t < 2 * (p - 1) && st == IBP_OK; t++) {
		const int rs = t < p - 1, g = rs ? t : t - (p - 1);
		dq_u_t u = { .pl = pl, .src = send, .recv = recv, .dt = (ibp_dtype_t)h.dtype, .rank = r, .hop = rs,
			     .sink = t == p - 2, .obuf = buf[io], .osz = sz + io * np };
		flow_t w = { .c = c, .ops = &dq_ops, .u = &u, .h = h, .np = np, .pcap = pcap,
			     .esz = ibp_dtype_size((ibp_dtype_t)h.dtype), .right = mod(r + 1, p), .left = mod(r - 1, p),
			     .enc = t == 0, .sbuf = buf[is], .rbuf = buf[ir], .ssz = sz + is * np, .rsz = sz + ir * np,
			     .got = fb.got, .req = fb.req };
		w.sc = rs ? mod(r - 1 - g, p) : mod(r - g, p);
		w.rc = rs ? mod(r - 2 - g, p) : mod(r - 1 - g, p);
		st = ibpi_flow_step(&w, &leak);
		int o = is;
		if (rs) /* the hops' output is sent next; the sent buffer takes the next output */
			is = io, io = o;
		else /* what arrived is forwarded next */
			is = ir, ir = o;
	}
	ibpi_flow_bufs_put(c, &fb, leak);
	return st;
}

/* The whole-chunk ring (transports without async): the rank's input
 * widened into x, one sendrecv per step. */
static ibp_status_t dq_ring_whole(ibp_coll_comm_t *c, coll_hdr_t h, const dq_plan_t *pl, const void *send,
				  void *recv, uint64_t count)
{
	int r = c->rank, p = c->nranks, left = mod(r - 1, p);
	ibp_dtype_t dt = (ibp_dtype_t)h.dtype;
	uint64_t esz = ibp_dtype_size(dt), cap = COLL_HDR + ibpi_dq_max_chunk(pl);
	float *x = malloc((count ? count : 1) * sizeof(float));
	uint8_t *m[2] = { malloc(cap), malloc(cap) };
	ibp_status_t s = IBP_OK;
	if (!x || !m[0] || !m[1]) {
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory for %llu elements", (unsigned long long)count);
		goto out;
	}
	ibpi_coll_widen(send, dt, count, x);
	h.enc = COLL_ENC_DQ;
	/* Reduce-scatter: the leaf sends chunk r-1; each hop decodes, adds and re-quantizes. */
	for (int t = 0; t < p - 1; t++) {
		int sc = mod(r - 1 - t, p), rc = mod(r - 2 - t, p);
		coll_hdr_t sh = h;
		sh.elems = chunk_elems(pl, sc);
		sh.chunk = (uint32_t)sc;
		memcpy(m[0], &sh, sizeof sh);
		if (t == 0 && (s = ibpi_dq_hop(pl, (uint64_t)sc, NULL, x, r, m[0] + COLL_HDR)) != IBP_OK)
			goto out;
		if ((s = recv_chunk(c, pl, h, rc, left, m[0], COLL_HDR + pl->cbytes[sc], sh.elems * esz, m[1], cap)) !=
		    IBP_OK)
			goto out;
		if ((s = ibpi_dq_hop(pl, (uint64_t)rc, m[1] + COLL_HDR, x, r, m[0] + COLL_HDR)) != IBP_OK)
			goto out;
	}
	/* m[0] holds chunk r as this rank (its sink) made it; all-gather forwards bytes unchanged. */
	coll_hdr_t oh = h;
	oh.elems = chunk_elems(pl, r);
	oh.chunk = (uint32_t)r;
	memcpy(m[0], &oh, sizeof oh);
	if ((s = ibpi_dq_decode_chunk(pl, (uint64_t)r, m[0] + COLL_HDR, x)) != IBP_OK)
		goto out;
	int cur = 0;
	for (int t = 0; t < p - 1; t++) {
		int sc = mod(r - t, p), rc = mod(r - 1 - t, p);
		if ((s = recv_chunk(c, pl, h, rc, left, m[cur], COLL_HDR + pl->cbytes[sc], chunk_elems(pl, sc) * esz,
				    m[1 - cur], cap)) != IBP_OK)
			goto out;
		if ((s = ibpi_dq_decode_chunk(pl, (uint64_t)rc, m[1 - cur] + COLL_HDR, x)) != IBP_OK)
			goto out;
		cur = 1 - cur;
	}
	ibpi_coll_narrow(x, dt, count, recv);
out:
	free(x);
	free(m[0]);
	free(m[1]);
	return s;
}

ibp_status_t ibpi_dq_allreduce(ibp_coll_comm_t *c, coll_hdr_t h, const void *send, void *recv, uint64_t count)
{
	int p = c->nranks;
	ibp_dtype_t dt = (ibp_dtype_t)h.dtype;
	uint64_t J = ceil_div(count, DQ_S), n2 = 2 * J;
	float *all = malloc(((uint64_t)p * n2 + 1) * sizeof(float)), *gst = calloc(n2 + 1, sizeof(float));
	dq_plan_t pl;
	memset(&pl, 0, sizeof pl);
	ibp_status_t s = IBP_OK;
	if (!all || !gst) {
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory for %llu elements", (unsigned long long)count);
		goto out;
	}
	ibpi_dq_local_stats_dt(send, dt, count, gst);
	if ((s = stats_allgather(c, h, gst, n2, all)) != IBP_OK)
		goto out;
	memset(gst, 0, n2 * sizeof(float));
	for (int o = 0; o < p; o++)
		for (uint64_t i = 0; i < n2; i++)
			gst[i] += all[(uint64_t)o * n2 + i];
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	if ((s = ibpi_dq_plan_make(&pl, &cfg, p, count, h.seq, gst)) != IBP_OK)
		goto out;
	const uint64_t np = dq_pieces(c, &pl);
	s = np > 1 ? dq_ring_pipe(c, h, &pl, np, send, recv) : dq_ring_whole(c, h, &pl, send, recv, count);
out:
	free(all);
	free(gst);
	ibpi_dq_plan_free(&pl);
	return s;
}
