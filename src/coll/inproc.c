/* inproc.c - the in-process transport: ranks are threads of one process,
 * each ordered pair (src, dst) a FIFO of heap-copied messages. A send
 * never blocks, so a ring step is "enqueue, then wait for the left". */
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

typedef struct ep {
	ibp_coll_inproc_t *w;
	int rank;
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

void ibp_coll_inproc_destroy(ibp_coll_inproc_t *w)
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

static ibp_status_t ep_sendrecv(void *ctx, int dst, const void *sbuf, uint64_t sbytes, int src, void *rbuf,
				uint64_t rcap, uint64_t *rbytes, int64_t timeout_ms)
{
	ep_t *e = ctx;
	ibp_coll_inproc_t *w = e->w;
	if (dst >= w->n || src >= w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc: peer out of range");
	msg_t *m = NULL;
	if (dst >= 0) {
		if (!(m = malloc(sizeof *m + sbytes)))
			return ibpi_fail(IBP_ERR_NOMEM, "coll: inproc: out of memory for a %llu-byte message",
					(unsigned long long)sbytes);
		m->next = NULL;
		m->bytes = sbytes;
		if (sbytes)
			memcpy(m->data, sbuf, sbytes);
	}
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)(timeout_ms / 1000);
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->mu);
	if (m) {
		queue_t *q = &w->q[(size_t)e->rank * (size_t)w->n + (size_t)dst];
		if (q->tail)
			q->tail->next = m;
		else
			q->head = m;
		q->tail = m;
		pthread_cond_broadcast(&w->cv);
	}
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
		if (s == IBP_OK) {
			msg_t *r = q->head;
			if (r->bytes > rcap) /* left queued: the call failed, the comm is broken */
				s = ibpi_fail(IBP_ERR_INVALID_ARG,
					     "coll: inproc: mismatch: %llu-byte message from rank %d exceeds the "
					     "expected %llu bytes",
					     (unsigned long long)r->bytes, src, (unsigned long long)rcap);
			else {
				q->head = r->next;
				if (!q->head)
					q->tail = NULL;
				if (r->bytes)
					memcpy(rbuf, r->data, r->bytes);
				*rbytes = r->bytes;
				free(r);
			}
		}
	}
	pthread_mutex_unlock(&w->mu);
	return s;
}

static void ep_destroy(void *ctx)
{
	free(ctx);
}

ibp_status_t ibp_coll_inproc_transport(ibp_coll_inproc_t *w, int rank, ibp_coll_transport_t *t)
{
	if (!w || !t || rank < 0 || rank >= w->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: inproc_transport: bad argument (rank %d)", rank);
	ep_t *e = malloc(sizeof *e);
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
	return IBP_OK;
}
