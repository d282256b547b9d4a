/* flow.c - one step of a pipelined ring (flow.h). Every piece of the step
 * is in flight at once: the receives are posted first, each piece is sent
 * as soon as it is made (or at once when forwarded), each received piece
 * is checked and decoded as it arrives, so a message costs no round trip
 * of its own (a rendezvous protocol's handshakes overlap). One helper job
 * per step makes every piece in order, publishing how many are ready, then
 * decodes; this thread polls the transport, publishes how many pieces have
 * arrived and decodes too when it has nothing else to do. Decodes are
 * claimed from one counter, so each piece is decoded once, by either
 * thread. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "coll/flow.h"
#include "util/error.h"

/* Claims the next received, undecoded piece: 1 and *k, or 0 (none now). */
static int flow_claim(flow_t *w, uint64_t *k)
{
	uint64_t d = atomic_load(&w->claim);
	while (d < atomic_load_explicit(&w->recvd, memory_order_acquire))
		if (atomic_compare_exchange_weak(&w->claim, &d, d + 1)) {
			*k = d;
			return 1;
		}
	return 0;
}

/* Decodes piece k on thread th. */
static ibp_status_t flow_decode(flow_t *w, uint64_t k, int th)
{
	IBP_TRY(w->ops->dec(w, k, th));
	atomic_fetch_add(&w->decoded, 1);
	return IBP_OK;
}

/* The helper's job: make every piece (piece 0 is done), then decode
 * until every piece is claimed or the caller stops the step. */
static void flow_helper(void *arg)
{
	flow_t *w = arg;
	ibp_status_t st = IBP_OK;
	uint64_t k = atomic_load(&w->ready), bytes = 0;
	for (; w->enc && k < w->np && !atomic_load(&w->stop); k++) {
		if ((st = w->ops->enc(w, k, &bytes)) != IBP_OK)
			goto failed;
		w->ssz[k] = bytes;
		atomic_store_explicit(&w->ready, k + 1, memory_order_release);
	}
	while (!atomic_load(&w->stop) && atomic_load(&w->claim) < w->np) {
		if (flow_claim(w, &k)) {
			if ((st = flow_decode(w, k, 0)) != IBP_OK)
				goto failed;
		} else {
			static const struct timespec nap = { 0, 20000 }; /* a piece arrives every ~0.5 ms at 1 Gbit/s */
			nanosleep(&nap, NULL);
		}
	}
	return;
failed:
	w->hst = st;
	snprintf(w->herr, sizeof w->herr, "%s", ibp_last_error()); /* the message is per thread */
	atomic_store_explicit(&w->hfailed, 1, memory_order_release);
}

/* Starts the sends of the pieces the helper has made. */
static ibp_status_t flow_send(flow_t *w, uint64_t *sent, int *moved)
{
	const uint64_t ready = atomic_load_explicit(&w->ready, memory_order_acquire);
	for (; *sent < ready; ++*sent, *moved = 1) {
		const uint64_t k = *sent;
		IBP_TRY(ibpi_coll_isend(w->c, w->right, w->sbuf + k * w->pcap, w->ssz[k],
					w->ops->elems(w, 0, k) * w->esz, &w->req[k]));
	}
	return IBP_OK;
}

/* Retires finished sends in order. */
static ibp_status_t flow_sent(flow_t *w, uint64_t sent, uint64_t *sdone, int *moved)
{
	const ibp_coll_async_t *as = w->c->t.async;
	while (*sdone < sent) {
		int done = 0;
		uint64_t nb = 0;
		ibp_status_t st = as->test(w->c->t.ctx, w->req[*sdone], &done, &nb);
		if (st != IBP_OK || done)
			w->req[*sdone] = NULL; /* released either way */
		IBP_TRY(st);
		if (!done)
			break;
		++*sdone;
		*moved = 1;
	}
	return IBP_OK;
}

/* Checks arrived pieces in order and publishes them to the decoders. */
static ibp_status_t flow_recv(flow_t *w, uint64_t *recvd, int *moved)
{
	const ibp_coll_async_t *as = w->c->t.async;
	void **rreq = w->req + w->np;
	while (*recvd < w->np) {
		const uint64_t k = *recvd;
		int done = 0;
		uint64_t nb = 0;
		ibp_status_t st = as->test(w->c->t.ctx, rreq[k], &done, &nb);
		if (st != IBP_OK || done)
			rreq[k] = NULL;
		IBP_TRY(st);
		if (!done)
			break;
		coll_hdr_t want = w->h;
		want.elems = w->ops->elems(w, 1, k);
		want.chunk = ibpi_flow_chunk_id(k, w->rc);
		w->rsz[k] = nb;
		*moved = 1;
		IBP_TRY(w->c->mem->check(w->c, w->rbuf + k * w->pcap, nb, &want, w->left, &w->got[k]));
		atomic_store_explicit(&w->recvd, ++*recvd, memory_order_release);
	}
	return IBP_OK;
}

ibp_status_t ibpi_flow_step(flow_t *w, int *leak)
{
	ibp_coll_comm_t *c = w->c;
	const ibp_coll_async_t *as = c->t.async;
	const uint64_t np = w->np;
	void **rreq = w->req + np;
	uint64_t sent = 0, sdone = 0, recvd = 0, k, bytes = 0, made = 1;
	const int solo = c->flow_solo; /* no helper: this thread makes the pieces between its polls */
	int posted = 0;
	ibp_status_t st = IBP_OK;
	atomic_init(&w->ready, w->enc ? 0 : np);
	atomic_init(&w->recvd, 0);
	atomic_init(&w->claim, 0);
	atomic_init(&w->decoded, 0);
	atomic_init(&w->stop, 0);
	atomic_init(&w->hfailed, 0);
	w->hst = IBP_OK;
	w->herr[0] = 0;
	for (k = 0; k < 2 * np; k++)
		w->req[k] = NULL;
	if (!c->helper && !solo)
		st = ibpi_coll_helper_start(&c->helper);
	for (k = 0; k < np && st == IBP_OK; k++)
		st = as->irecv(c->t.ctx, w->left, w->rbuf + k * w->pcap, w->pcap, &rreq[k]);
	/* Piece 0 leaves before any received piece is looked at: a peer that
	 * expects other messages then fails as mismatched, not timed out. */
	if (st == IBP_OK && w->enc && (st = w->ops->enc(w, 0, &bytes)) == IBP_OK) {
		w->ssz[0] = bytes;
		atomic_store(&w->ready, 1);
	}
	if (st == IBP_OK && !solo && (st = ibpi_coll_helper_post(c->helper, flow_helper, w)) == IBP_OK)
		posted = 1;
	double last = ibpi_coll_now();
	while (st == IBP_OK && (sdone < np || atomic_load(&w->decoded) < np)) {
		int moved = 0;
		if (atomic_load_explicit(&w->hfailed, memory_order_acquire))
			break;
		if ((st = flow_send(w, &sent, &moved)) != IBP_OK || (st = flow_sent(w, sent, &sdone, &moved)) != IBP_OK ||
		    (st = flow_recv(w, &recvd, &moved)) != IBP_OK)
			break;
		if (solo && w->enc && made < np) { /* the next piece, then poll again */
			if ((st = w->ops->enc(w, made, &bytes)) != IBP_OK)
				break;
			w->ssz[made] = bytes;
			atomic_store_explicit(&w->ready, ++made, memory_order_release);
			moved = 1;
		} else if (!moved && flow_claim(w, &k)) { /* nothing to poll for: decode here too */
			if ((st = flow_decode(w, k, 1)) != IBP_OK)
				break;
			moved = 1;
		}
		double now = ibpi_coll_now();
		if (moved)
			last = now;
		else if (now - last > (double)c->o.timeout_ms / 1000.0)
			st = ibpi_fail(IBP_ERR_IO, "coll: timeout after %lld ms in a pipelined ring step (send to %d, "
					"receive from %d; %llu of %llu pieces sent, %llu received)",
				      (long long)c->o.timeout_ms, w->right, w->left, (unsigned long long)sdone,
				      (unsigned long long)np, (unsigned long long)recvd);
		else
			ibpi_coll_idle(now - last);
	}
	atomic_store(&w->stop, 1);
	if (posted) { /* nothing may run past the return */
		ibp_status_t js = ibpi_coll_helper_wait(c->helper);
		st = st != IBP_OK ? st : js;
		if (st == IBP_OK && atomic_load_explicit(&w->hfailed, memory_order_acquire))
			st = ibpi_fail(w->hst, "%s", w->herr);
	}
	for (k = 0; k < 2 * np; k++)
		if (w->req[k] && !as->cancel(c->t.ctx, w->req[k]))
			*leak = 1;
	return st;
}

ibp_status_t ibpi_flow_bufs_get(ibp_coll_comm_t *c, const enum coll_ws *ws, int nslot, uint64_t np, uint64_t pcap,
				const char *what, flow_bufs_t *fb)
{
	*fb = (flow_bufs_t){ 0 };
	int ok = nslot >= 1 && nslot <= 3 && pcap && np <= UINT64_MAX / pcap;
	for (int i = 0; i < nslot && ok; i++)
		ok = (fb->slot[i] = ibpi_coll_ws(c, ws[i], pcap * np)) != NULL;
	if (ok) {
		fb->sz = calloc((size_t)nslot * np, sizeof *fb->sz);
		fb->got = calloc(np, sizeof *fb->got);
		fb->req = calloc(2 * np, sizeof *fb->req);
		ok = fb->sz && fb->got && fb->req;
	}
	if (ok)
		return IBP_OK;
	ibpi_flow_bufs_put(c, fb, 0);
	return ibpi_fail(IBP_ERR_NOMEM, "coll: no memory for %s (%llu pieces of %llu bytes)", what,
			 (unsigned long long)np, (unsigned long long)pcap);
}

void ibpi_flow_bufs_put(ibp_coll_comm_t *c, flow_bufs_t *fb, int leak)
{
	if (leak)
		c->ws_lent = 1;
	free(fb->sz);
	free(fb->got);
	free(fb->req);
	*fb = (flow_bufs_t){ 0 };
}
