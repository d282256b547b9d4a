/* inproc.c - the in-process transport: ranks are threads of one process,
 * each ordered pair (src, dst) a FIFO of heap-copied messages. A send
 * never blocks, so a ring step is "enqueue, then wait for the left";
 * nonblocking receives wait on their endpoint's list until a test finds
 * their message. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/coll_internal.h"
#include "util/error.h"

typedef struct msg {
	struct msg *next;
	uint64_t bytes;
	uint8_t data[];
} msg_t;

typedef struct queue {
	msg_t *head, *tail;
} queue_t;

struct ibp_coll_inproc {
	int n;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* broadcast on every enqueue */
	queue_t *q;        /* q[src * n + dst] */
};

/* A nonblocking request: sends finish at once (the message is copied);
 * receives wait on the endpoint's list, matched in the order posted. */
typedef struct ireq {
	struct ireq *next;
	int recv, src, done;
	void *buf;
	uint64_t cap, bytes;
} ireq_t;

typedef struct ep {
	ibp_coll_inproc_t *w;
	int rank;
	ireq_t *pend; /* unfinished receives, oldest first (this rank's thread only) */
} ep_t;

ibp_status_t ibp_coll_inproc_create(int nranks, ibp_coll_inproc_t **out)
{
	if (!out || nranks < 1 || nranks > 4096)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc_create: nranks %d (1..4096)", nranks);
	ibp_coll_inproc_t *w = calloc(1, sizeof *w);
	if (!w || !(w->q = calloc((size_t)nranks * (size_t)nranks, sizeof *w->q))) {
		free(w);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc_create: out of memory");
	}
	w->n = nranks;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	*out = w;
	return IBP_OK;
}

void ibp_coll_inproc_free(ibp_coll_inproc_t *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < (size_t)w->n * (size_t)w->n; i++)
		for (msg_t *m = w->q[i].head, *nx; m; m = nx) {
			nx = m->next;
			free(m);
		}
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->q);
	free(w);
}

void ibp_coll_inproc_destroy(ibp_coll_inproc_t *w) /* deprecated alias */
{
	ibp_coll_inproc_free(w);
}

static ibp_status_t msg_new(const void *sbuf, uint64_t sbytes, msg_t **out)
{
	msg_t *m = malloc(sizeof *m + sbytes);
	if (!m)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc: out of memory for a %llu-byte message",
				(unsigned long long)sbytes);
	m->next = NULL;
	m->bytes = sbytes;
	if (sbytes)
		memcpy(m->data, sbuf, sbytes);
	*out = m;
	return IBP_OK;
}

/* Appends m to the (src, dst) queue; the lock is held. */
static void enqueue(ibp_coll_inproc_t *w, int src, int dst, msg_t *m)
{
	queue_t *q = &w->q[(size_t)src * (size_t)w->n + (size_t)dst];
	if (q->tail)
		q->tail->next = m;
	else
		q->head = m;
	q->tail = m;
	pthread_cond_broadcast(&w->cv);
}

/* Takes the head of the (src, e->rank) queue into rbuf if there is one;
 * the lock is held. *got = 0: nothing yet. An oversized head stays queued
 * (the call fails, the communicator is broken). */
static ibp_status_t take(ep_t *e, int src, void *rbuf, uint64_t rcap, uint64_t *rbytes, int *got)
{
	ibp_coll_inproc_t *w = e->w;
	queue_t *q = &w->q[(size_t)src * (size_t)w->n + (size_t)e->rank];
	msg_t *r = q->head;
	*got = 0;
	if (!r)
		return IBP_OK;
	if (r->bytes > rcap)
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"coll: inproc: mismatch: %llu-byte message from rank %d exceeds the expected %llu bytes",
				(unsigned long long)r->bytes, src, (unsigned long long)rcap);
	q->head = r->next;
	if (!q->head)
		q->tail = NULL;
	if (r->bytes)
		memcpy(rbuf, r->data, r->bytes);
	*rbytes = r->bytes;
	free(r);
	*got = 1;
	return IBP_OK;
}

/* Delivers queued messages to the pending receives in their order; the
 * lock is held. Stops at the first failure (that receive's). */
static ibp_status_t deliver(ep_t *e, ireq_t **failed)
{
	for (ireq_t *q = e->pend; q; q = q->next) {
		int got = 0;
		if (q->done)
			continue;
		ibp_status_t s = take(e, q->src, q->buf, q->cap, &q->bytes, &got);
		if (s != IBP_OK) {
			*failed = q;
			return s;
		}
		q->done = got;
	}
	return IBP_OK;
}

static void unlink_req(ep_t *e, ireq_t *r)
{
	for (ireq_t **pp = &e->pend; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			return;
		}
}

static ibp_status_t ep_isend(void *ctx, int dst, const void *buf, uint64_t bytes, void **req)
{
	ep_t *e = ctx;
	if (dst < 0 || dst >= e->w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc: peer out of range");
	ireq_t *r = calloc(1, sizeof *r);
	if (!r)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc: out of memory for a request");
	msg_t *m = NULL;
	ibp_status_t s = msg_new(buf, bytes, &m);
	if (s != IBP_OK) {
		free(r);
		return s;
	}
	pthread_mutex_lock(&e->w->mu);
	enqueue(e->w, e->rank, dst, m);
	pthread_mutex_unlock(&e->w->mu);
	r->done = 1;
	*req = r;
	return IBP_OK;
}

static ibp_status_t ep_irecv(void *ctx, int src, void *buf, uint64_t cap, void **req)
{
	ep_t *e = ctx;
	if (src < 0 || src >= e->w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc: peer out of range");
	ireq_t *r = calloc(1, sizeof *r);
	if (!r)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc: out of memory for a request");
	r->recv = 1;
	r->src = src;
	r->buf = buf;
	r->cap = cap;
	pthread_mutex_lock(&e->w->mu);
	ireq_t **pp = &e->pend;
	while (*pp)
		pp = &(*pp)->next;
	*pp = r;
	pthread_mutex_unlock(&e->w->mu);
	*req = r;
	return IBP_OK;
}

static ibp_status_t ep_test(void *ctx, void *req, int *done, uint64_t *bytes)
{
	ep_t *e = ctx;
	ireq_t *r = req, *failed = NULL;
	ibp_status_t s = IBP_OK;
	*done = 0;
	if (r->recv) {
		pthread_mutex_lock(&e->w->mu);
		s = deliver(e, &failed);
		if (r->done || failed == r)
			unlink_req(e, r);
		pthread_mutex_unlock(&e->w->mu);
		if (failed == r) {
			free(r);
			return s;
		}
		s = IBP_OK; /* another receive's failure is reported by its own test */
	}
	if (!r->done)
		return IBP_OK;
	*done = 1;
	if (r->recv)
		*bytes = r->bytes;
	free(r);
	return s;
}

static int ep_cancel(void *ctx, void *req)
{
	ep_t *e = ctx;
	ireq_t *r = req;
	if (r->recv) {
		pthread_mutex_lock(&e->w->mu);
		unlink_req(e, r);
		pthread_mutex_unlock(&e->w->mu);
	}
	free(r);
	return 1;
}

static const ibp_coll_async_t inproc_async = { ep_isend, ep_irecv, ep_test, ep_cancel };

static ibp_status_t ep_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	ep_t *e = ctx;
	ibp_coll_inproc_t *w = e->w;
	if (dst >= w->n || src >= w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc: peer out of range");
	msg_t *m = NULL;
	if (dst >= 0)
		IBP_TRY(msg_new(sbuf, sbytes, &m));
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)(timeout_ms / 1000);
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->mu);
	if (m)
		enqueue(w, e->rank, dst, m);
	ibp_status_t s = IBP_OK;
	if (src >= 0) {
		queue_t *q = &w->q[(size_t)src * (size_t)w->n + (size_t)e->rank];
		while (!q->head) {
			int rc = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
			if (rc == ETIMEDOUT && !q->head) {
				s = ibpi_fail(IBP_ERR_IO, "coll: inproc: timeout after %lld ms waiting for rank %d",
					     (long long)timeout_ms, src);
				break;
			}
		}
		int got = 0;
		if (s == IBP_OK)
			s = take(e, src, rbuf, rcap, rbytes, &got);
	}
	pthread_mutex_unlock(&w->mu);
	return s;
}

static void ep_destroy(void *ctx)
{
	ep_t *e = ctx;
	for (ireq_t *r = e->pend, *nx; r; r = nx) { /* receives nobody tested or cancelled */
		nx = r->next;
		free(r);
	}
	free(e);
}

ibp_status_t ibp_coll_inproc_transport(ibp_coll_inproc_t *w, int rank, ibp_coll_transport_t *t)
{
	if (!w || !t || rank < 0 || rank >= w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc_transport: bad argument (rank %d)", rank);
	ep_t *e = calloc(1, sizeof *e);
	if (!e)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc_transport: out of memory");
	e->w = w;
	e->rank = rank;
	t->rank = rank;
	t->nranks = w->n;
	t->ctx = e;
	t->sendrecv = ep_sendrecv;
	t->destroy = ep_destroy;
	t->native = NULL; /* the algorithms over sendrecv */
	t->async = &inproc_async;
	return IBP_OK;
}
