/* helper.c - the communicator's persistent helper thread (helper.h). */
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coll/helper.h"
#include "util/error.h"

enum { H_IDLE = 0, H_POSTED = 1, H_DONE = 2 }; /* DONE: finished, not yet waited for */

struct coll_helper {
	pthread_mutex_t mu;
	pthread_cond_t job;  /* signalled on post and on stop */
	pthread_cond_t done; /* signalled when a job returns */
	pthread_t th;
	int state, quit;
	atomic_int dead; /* the thread met a pthread failure and left */
	void (*fn)(void *);
	void *arg;
};

static ibp_status_t pt_fail(int e, const char *what)
{
	return ibpi_fail(e == ENOMEM || e == EAGAIN ? IBP_ERR_NOMEM : IBP_ERR_INTERNAL, "coll: helper thread: %s: %s",
			what, strerror(e));
}

/* Leaves on any pthread failure with `dead` set, waking a waiter. */
static void *helper_main(void *p)
{
	coll_helper_t *h = p;
	if (pthread_mutex_lock(&h->mu) != 0)
		goto die;
	for (;;) {
		while (h->state != H_POSTED && !h->quit)
			if (pthread_cond_wait(&h->job, &h->mu) != 0)
				goto die_locked;
		if (h->state != H_POSTED) /* quit with nothing to do */
			break;
		void (*fn)(void *) = h->fn;
		void *arg = h->arg;
		if (pthread_mutex_unlock(&h->mu) != 0)
			goto die;
		fn(arg); /* runs unlocked: the poster only reads arg after wait */
		if (pthread_mutex_lock(&h->mu) != 0)
			goto die;
		h->state = H_DONE;
		if (pthread_cond_signal(&h->done) != 0)
			goto die_locked;
	}
	(void)pthread_mutex_unlock(&h->mu); /* exiting either way */
	return NULL;
die_locked:
	atomic_store(&h->dead, 1);
	(void)pthread_mutex_unlock(&h->mu);
	(void)pthread_cond_broadcast(&h->done);
	return NULL;
die:
	atomic_store(&h->dead, 1);
	(void)pthread_cond_broadcast(&h->done); /* best effort: the lock is not ours */
	return NULL;
}

ibp_status_t ibpi_coll_helper_start(coll_helper_t **out)
{
	*out = NULL;
	coll_helper_t *h = calloc(1, sizeof *h);
	if (!h)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: helper thread: out of memory");
	int e;
	if ((e = pthread_mutex_init(&h->mu, NULL)) != 0) {
		free(h);
		return pt_fail(e, "pthread_mutex_init");
	}
	if ((e = pthread_cond_init(&h->job, NULL)) != 0) {
		(void)pthread_mutex_destroy(&h->mu);
		free(h);
		return pt_fail(e, "pthread_cond_init");
	}
	if ((e = pthread_cond_init(&h->done, NULL)) != 0) {
		(void)pthread_cond_destroy(&h->job);
		(void)pthread_mutex_destroy(&h->mu);
		free(h);
		return pt_fail(e, "pthread_cond_init");
	}
	if ((e = pthread_create(&h->th, NULL, helper_main, h)) != 0) {
		(void)pthread_cond_destroy(&h->done);
		(void)pthread_cond_destroy(&h->job);
		(void)pthread_mutex_destroy(&h->mu);
		free(h);
		return pt_fail(e, "pthread_create");
	}
	*out = h;
	return IBP_OK;
}

ibp_status_t ibpi_coll_helper_post(coll_helper_t *h, void (*fn)(void *), void *arg)
{
	int e;
	if (atomic_load(&h->dead))
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: helper thread: it has stopped after a pthread failure");
	if ((e = pthread_mutex_lock(&h->mu)) != 0)
		return pt_fail(e, "pthread_mutex_lock");
	if (h->state != H_IDLE) {
		(void)pthread_mutex_unlock(&h->mu);
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: helper thread: the last job was not waited for");
	}
	h->fn = fn;
	h->arg = arg;
	h->state = H_POSTED;
	if ((e = pthread_cond_signal(&h->job)) != 0) {
		h->state = H_IDLE;
		(void)pthread_mutex_unlock(&h->mu);
		return pt_fail(e, "pthread_cond_signal");
	}
	if ((e = pthread_mutex_unlock(&h->mu)) != 0)
		return pt_fail(e, "pthread_mutex_unlock");
	return IBP_OK;
}

ibp_status_t ibpi_coll_helper_wait(coll_helper_t *h)
{
	int e;
	if ((e = pthread_mutex_lock(&h->mu)) != 0)
		return pt_fail(e, "pthread_mutex_lock");
	while (h->state == H_POSTED && !atomic_load(&h->dead))
		if ((e = pthread_cond_wait(&h->done, &h->mu)) != 0) {
			(void)pthread_mutex_unlock(&h->mu);
			return pt_fail(e, "pthread_cond_wait");
		}
	int lost = h->state == H_POSTED; /* the thread died before finishing the job */
	if (!lost)
		h->state = H_IDLE;
	if ((e = pthread_mutex_unlock(&h->mu)) != 0)
		return pt_fail(e, "pthread_mutex_unlock");
	if (lost || atomic_load(&h->dead))
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: helper thread: it stopped after a pthread failure");
	return IBP_OK;
}

ibp_status_t ibpi_coll_helper_stop(coll_helper_t *h)
{
	if (!h)
		return IBP_OK;
	ibp_status_t s = IBP_OK;
	int e;
	if ((e = pthread_mutex_lock(&h->mu)) != 0)
		s = pt_fail(e, "pthread_mutex_lock");
	else {
		h->quit = 1; /* a posted job still runs first (helper_main checks state before quit) */
		if ((e = pthread_cond_signal(&h->job)) != 0)
			s = pt_fail(e, "pthread_cond_signal");
		if ((e = pthread_mutex_unlock(&h->mu)) != 0 && s == IBP_OK)
			s = pt_fail(e, "pthread_mutex_unlock");
	}
	if (s != IBP_OK && !atomic_load(&h->dead))
		return s; /* the thread may still be waiting: leak h rather than free it under the thread */
	if ((e = pthread_join(h->th, NULL)) != 0)
		return pt_fail(e, "pthread_join");
	(void)pthread_cond_destroy(&h->done); /* no thread uses them now: cannot fail */
	(void)pthread_cond_destroy(&h->job);
	(void)pthread_mutex_destroy(&h->mu);
	free(h);
	return s;
}
