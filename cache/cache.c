/* cache.c - the slab cache's API: create, gather and prefetch (a pass per
 * batch, cache_pass.c), preload, invalidate, stats. Policies and slots are
 * in cache_policy.c, storage and index in slab.c, the device gather in
 * cache_cuda.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"
#include "cache_internal.h"
#include "ibp/codec.h"
#include "ibp/container.h"
#include "util/error.h"
#include "util/ids.h"
#include "util/opts.h"



/* ---- create / free ---- */

void ibp_cache_opts_default(ibp_cache_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->raw_threshold = 0.95;
	o->policy = IBP_CACHE_POLICY_DEFAULT;
	o->device = -1;
}

const char *ibp_cache_policy_name(ibp_cache_policy_t p)
{
	switch (p) {
	case IBP_CACHE_POLICY_DEFAULT:
	case IBP_CACHE_S3FIFO:
		return "s3fifo";
	case IBP_CACHE_STATIC:
		return "static";
	case IBP_CACHE_CLOCK:
		return "clock";
	case IBP_CACHE_LRU:
		return "lru";
	}
	return "?";
}

static void ws_free(cache_ws_t *w)
{
	free(w->uid);
	free(w->ufirst);
	free(w->rep);
	free(w->ucnt);
	free(w->dkey);
	free(w->dval);
	free(w->ukind);
	free(w->ustat);
	free((void *)w->usrc);
	free(w->ulen);
	free(w->ug);
	free(w->uclen);
	free(w->ufl);
	free(w->uclu);
	free(w->ucls);
	free(w->scratch);
}

static int ws_alloc(cache_ws_t *w, uint64_t b, uint64_t rb)
{
	w->dcap = 64;
	while (w->dcap < 2 * b)
		w->dcap <<= 1;
	w->uid = malloc(b * sizeof(int64_t));
	w->ufirst = malloc(b * sizeof(uint64_t));
	w->rep = malloc(b * sizeof(uint32_t));
	w->ucnt = malloc(b * sizeof(uint32_t));
	w->dkey = malloc(w->dcap * sizeof(int64_t));
	w->dval = malloc(w->dcap * sizeof(uint32_t));
	w->ukind = malloc(b);
	w->ustat = malloc(b * sizeof(int32_t));
	w->usrc = malloc(b * sizeof(*w->usrc));
	w->ulen = malloc(b * sizeof(uint64_t));
	w->ug = malloc(b * sizeof(uint64_t));
	w->uclen = malloc(b * sizeof(uint64_t));
	w->ufl = malloc(b);
	w->uclu = malloc(b);
	w->ucls = malloc(b * sizeof(uint32_t));
	w->scratch = malloc(rb);
	if (!w->uid || !w->ufirst || !w->rep || !w->ucnt || !w->dkey || !w->dval || !w->ukind || !w->ustat || !w->usrc ||
	    !w->ulen || !w->ug || !w->uclen || !w->ufl || !w->uclu || !w->ucls || !w->scratch)
		return 0;
	for (uint64_t i = 0; i < w->dcap; i++)
		w->dkey[i] = KEY_EMPTY;
	for (uint64_t i = 0; i < b; i++)
		w->ug[i] = UINT64_MAX;
	return 1;
}

ibp_status_t ibp_cache_create(const ibp_cache_opts_t *opts, ibp_cache_t **out)
{
	if (!opts || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: NULL %s", opts ? "out" : "opts");
	*out = NULL;
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_cache_create", "ibp_cache_opts_t"));
	ibp_cache_opts_t o = *opts;
	if (!o.capacity_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: capacity_bytes is 0");
	if (!o.row_bytes || o.row_bytes > IBP_CACHE_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: row_bytes %llu outside [1, %llu]",
				(unsigned long long)o.row_bytes, (unsigned long long)IBP_CACHE_MAX_ROW_BYTES);
	if (o.class_step && (o.class_step < 16 || o.class_step > 65536 || (o.class_step & (o.class_step - 1))))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: class_step %llu is not a power of two in "
				"[16, 65536]", (unsigned long long)o.class_step);
	if (!(o.raw_threshold > 0 && o.raw_threshold <= 1))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: raw_threshold %g outside (0, 1]",
				o.raw_threshold);
	if (o.policy > IBP_CACHE_LRU)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: unknown policy %d", (int)o.policy);
	if (o.flags & ~(IBP_CACHE_UNCOMPRESSED | IBP_CACHE_NO_RAW | IBP_CACHE_HOST_FALLBACK))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: unknown flag bits 0x%x", o.flags);
	if (o.policy == IBP_CACHE_POLICY_DEFAULT)
		o.policy = IBP_CACHE_S3FIFO;
	if (!o.max_batch)
		o.max_batch = 65536;
	if (o.max_batch > (1ull << 30))
		o.max_batch = 1ull << 30;
	if (!o.max_callers)
		o.max_callers = 4;
	if (o.max_callers > 1024)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: max_callers %u above 1024", o.max_callers);
	ibp_cache_t *c = calloc(1, sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: out of memory");
	c->o = o;
	ibp_status_t s = ibpi_cache_storage_init(c);
	if (s == IBP_OK) {
		c->nws = o.max_callers;
		c->ws = calloc(c->nws, sizeof(cache_ws_t));
		if (!c->ws)
			s = ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: out of memory");
		for (uint32_t i = 0; s == IBP_OK && i < c->nws; i++)
			if (!ws_alloc(&c->ws[i], o.max_batch, o.row_bytes))
				s = ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: cannot allocate workspaces of %llu ids",
					     (unsigned long long)o.max_batch);
	}
	if (s != IBP_OK) {
		if (c->ws)
			for (uint32_t i = 0; i < c->nws; i++)
				ws_free(&c->ws[i]);
		free(c->ws);
		ibpi_cache_storage_free(c);
		free(c);
		return s;
	}
	c->meta_bytes += c->nws * (o.max_batch * 64 + (c->ws[0].dcap * 12));
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->ws_cv, NULL);
	if (o.device >= 0) { /* the GPU cache's device side (cache_cuda.c) */
		s = ibpi_cache_cuda_init(c);
		if (!c->dev) {
			ibp_cache_free(c);
			return s;
		}
	}
	*out = c;
	return s; /* IBP_ERR_NO_DEVICE: a host-fallback device cache */
}

void ibp_cache_free(ibp_cache_t *c)
{
	if (!c)
		return;
	ibpi_cache_cuda_free(c);
	for (uint32_t i = 0; i < c->nws; i++)
		ws_free(&c->ws[i]);
	free(c->ws);
	ibpi_cache_storage_free(c);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->ws_cv);
	free(c);
}

/* ---- the phases ---- */

static cache_ws_t *ws_get(ibp_cache_t *c)
{
	pthread_mutex_lock(&c->mu);
	for (;;) {
		for (uint32_t i = 0; i < c->nws; i++)
			if (!c->ws[i].busy) {
				c->ws[i].busy = 1;
				pthread_mutex_unlock(&c->mu);
				return &c->ws[i];
			}
		pthread_cond_wait(&c->ws_cv, &c->mu);
	}
}

static void ws_put(ibp_cache_t *c, cache_ws_t *w)
{
	pthread_mutex_lock(&c->mu);
	w->busy = 0;
	pthread_cond_signal(&c->ws_cv);
	pthread_mutex_unlock(&c->mu);
}

/* Binds the cache to `store` (under the lock). */
static ibp_status_t bind(ibp_cache_t *c, const ibp_store_t *store, const char *fn)
{
	if (c->store == store)
		return IBP_OK;
	if (c->store)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the cache holds rows of another store (empty it with "
			       "ibp_cache_invalidate(c, NULL, 0) first)", fn);
	if (ibp_store_row_bytes(store) != c->rb)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: store rows are %llu bytes, the cache's %llu", fn,
				(unsigned long long)ibp_store_row_bytes(store), (unsigned long long)c->rb);
	c->store = store;
	return IBP_OK;
}

static ibp_status_t run(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n, void *out,
			const int64_t *out_rows, int32_t *status, uint32_t flags, int gather, int64_t *evicted,
			uint64_t evicted_cap, uint64_t *n_evicted, const char *fn)
{
	if (n_evicted)
		*n_evicted = 0;
	if (!c || !store)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s", fn, c ? "store" : "cache");
	if (c->dev)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: a device cache (opts.device %d) is filled by "
				"ibp_cache_gather_cuda only", fn, c->o.device);
	if (n && (!ids || (gather && !out)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s with n = %llu", fn, ids ? "out" : "ids",
				(unsigned long long)n);
	if (flags & ~IBP_CACHE_NO_ADMIT)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown flag bits 0x%x", fn, flags);
	if ((evicted && !n_evicted) || (!evicted && evicted_cap))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %s", fn,
				evicted ? "evicted ids without n_evicted" : "evicted_cap > 0 with NULL evicted");
	cache_sink_t sink = { evicted, evicted ? evicted_cap : UINT64_MAX, 0, NULL, NULL };
	pthread_mutex_lock(&c->mu);
	ibp_status_t s = bind(c, store, fn);
	pthread_mutex_unlock(&c->mu);
	if (s != IBP_OK || !n)
		return s;
	if (!out) { /* prefetch: every id checked before anything is admitted */
		const uint64_t nrows = ibp_store_nrows(store), k = ibpi_ids_first_bad(ids, n, nrows);
		if (k < n)
			return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: id %lld at position %llu is outside [0, %llu)",
					fn, (long long)ids[k], (unsigned long long)k, (unsigned long long)nrows);
	}
	cache_ws_t *w = ws_get(c);
	cache_req_t q = { 0 };
	q.flags = flags;
	q.first = IBP_OK;
	for (uint64_t a = 0; a < n; a += c->o.max_batch) {
		uint64_t k = n - a < c->o.max_batch ? n - a : c->o.max_batch;
		q.ids = ids + a;
		q.n = k;
		q.out = out;
		q.out_rows = out_rows ? out_rows + a : NULL;
		q.status = status ? status + a : NULL;
		q.base = a;
		ibpi_cache_pass(c, w, store, &q, &sink);
		if (out && out_rows == NULL)
			out = (uint8_t *)out + k * c->rb;
	}
	ws_put(c, w);
	const ibp_status_t first = q.first;
	const uint64_t first_pos = q.first_pos;
	if (n_evicted)
		*n_evicted = sink.n;
	if (first != IBP_OK && out)
		return ibpi_fail(first, "%s: request %llu (id %lld): %s", fn, (unsigned long long)first_pos,
				(long long)ids[first_pos],
				first == IBP_ERR_INVALID_ARG ? "negative output row"
				: first == IBP_ERR_OUT_OF_RANGE ? "id outside the store"
								: "row failed to decode");
	return first;
}

ibp_status_t ibp_cache_gather(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n, void *out,
			      const int64_t *out_rows, int32_t *status, uint32_t flags, void *stream)
{
	(void)stream;
	return run(c, store, ids, n, out, out_rows, status, flags, 1, NULL, 0, NULL, "ibp_cache_gather");
}

ibp_status_t ibp_cache_gather_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n, void *out,
				    const int64_t *out_rows, int32_t *status, uint32_t flags, int64_t *evicted,
				    uint64_t evicted_cap, uint64_t *n_evicted, void *stream)
{
	(void)stream;
	return run(c, store, ids, n, out, out_rows, status, flags, 1, evicted, evicted_cap, n_evicted,
		   "ibp_cache_gather_evict");
}

ibp_status_t ibp_cache_prefetch(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				void *stream)
{
	(void)stream;
	return run(c, store, ids, n, NULL, NULL, NULL, 0, 0, NULL, 0, NULL, "ibp_cache_prefetch");
}

ibp_status_t ibp_cache_prefetch_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				      int64_t *evicted, uint64_t evicted_cap, uint64_t *n_evicted, void *stream)
{
	(void)stream;
	return run(c, store, ids, n, NULL, NULL, NULL, 0, 0, evicted, evicted_cap, n_evicted,
		   "ibp_cache_prefetch_evict");
}

static const float *sort_score;
static int by_score(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	float sx = sort_score[x], sy = sort_score[y];
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return x < y ? -1 : x > y;
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

ibp_status_t ibp_cache_preload(ibp_cache_t *c, ibp_store_t *store, const float *score, uint64_t n,
			       void *stream)
{
	if (!c || !store || !score)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_preload: NULL %s",
				!c ? "cache" : !store ? "store" : "score");
	if (n != ibp_store_nrows(store))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_preload: %llu scores for %llu rows",
				(unsigned long long)n, (unsigned long long)ibp_store_nrows(store));
	for (uint64_t i = 0; i < n; i++)
		if (isnan(score[i]))
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_preload: score[%llu] is NaN",
					(unsigned long long)i);
	int64_t *order = malloc((n ? n : 1) * sizeof(int64_t));
	if (!order)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_preload: out of memory");
	for (uint64_t i = 0; i < n; i++)
		order[i] = (int64_t)i;
	pthread_mutex_lock(&sort_mu); /* qsort has no context argument */
	sort_score = score;
	qsort(order, n, sizeof(int64_t), by_score);
	pthread_mutex_unlock(&sort_mu);
	/* In slices, stopping once a slice admits nothing and no slab is free. */
	ibp_status_t s = IBP_OK;
	uint64_t slice = c->o.max_batch < 4096 ? c->o.max_batch : 4096;
	for (uint64_t a = 0; a < n && s == IBP_OK; a += slice) {
		ibp_cache_stats_t before, after;
		ibp_cache_stats(c, &before, 0);
		s = ibp_cache_prefetch(c, store, order + a, n - a < slice ? n - a : slice, stream);
		ibp_cache_stats(c, &after, 0);
		if (after.insertions == before.insertions && !after.free_slabs && c->o.policy != IBP_CACHE_STATIC)
			break;
	}
	free(order);
	return s;
}

/* A device cache: the same removal on its table, then its lock released. */
static ibp_status_t invalidate_dev(ibp_cache_t *c, const int64_t *ids, uint64_t n)
{
	ibp_status_t s = ibpi_cache_cuda_invalidate(c, ids, n);
	pthread_mutex_unlock(&c->dev->mu);
	return s;
}

ibp_status_t ibp_cache_invalidate(ibp_cache_t *c, const int64_t *ids, uint64_t n, void *stream)
{
	(void)stream;
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_invalidate: NULL cache");
	if (!ids) {
		if (n)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_invalidate: NULL ids with n = %llu",
					(unsigned long long)n);
		if (c->dev)
			pthread_mutex_lock(&c->dev->mu);
		pthread_mutex_lock(&c->mu);
		c->st.invalidations += c->st.rows_resident;
		ibpi_cache_storage_reset(c);
		c->st.rows_resident = c->st.bytes_resident = c->st.slot_bytes_used = 0;
		c->store = NULL;
		pthread_mutex_unlock(&c->mu);
		return c->dev ? invalidate_dev(c, NULL, 0) : IBP_OK;
	}
	for (uint64_t k = 0; k < n; k++)
		if (ids[k] < 0)
			return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "ibp_cache_invalidate: id %lld at position %llu is negative",
					(long long)ids[k], (unsigned long long)k);
	if (c->dev)
		pthread_mutex_lock(&c->dev->mu);
	pthread_mutex_lock(&c->mu);
	for (uint64_t k = 0; k < n; k++) {
		uint64_t p = ibpi_cache_ix_find(&c->ix, ids[k]);
		if (p == UINT64_MAX)
			continue;
		uint64_t e = c->ix.vals[p];
		if (ENT_STATE(e) == ENT_GHOST) {
			ibpi_cache_ix_erase(&c->ix, p);
			continue;
		}
		uint64_t g = ENT_SLAB(e) * c->spp + ENT_SLOT(e);
		if (ENT_STATE(e) == ENT_READY)
			c->st.invalidations++;
		/* A row being read or filled leaves the index now; its slot goes at
		 * the last unpin. */
		ibpi_cache_drop_slot(c, g, 0);
	}
	pthread_mutex_unlock(&c->mu);
	return c->dev ? invalidate_dev(c, ids, n) : IBP_OK;
}

ibp_status_t ibp_cache_stats(ibp_cache_t *c, ibp_cache_stats_t *st, int reset)
{
	if (!c || !st)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_stats: NULL %s", c ? "stats" : "cache");
	pthread_mutex_lock(&c->mu);
	c->st.raw_bytes_resident = c->st.rows_resident * c->rb;
	c->st.capacity_bytes = c->o.capacity_bytes;
	c->st.slab_bytes = c->slab_bytes;
	c->st.nslabs = c->nslabs;
	c->st.free_slabs = c->nfree_slabs;
	c->st.meta_bytes = ibpi_cache_meta_bytes(c);
	c->st.class_step = c->step;
	c->st.nclasses = c->nclasses;
	*st = c->st;
	if (reset) {
		ibp_cache_stats_t keep = c->st;
		memset(&c->st, 0, sizeof(c->st));
		c->st.rows_resident = keep.rows_resident;
		c->st.bytes_resident = keep.bytes_resident;
		c->st.slot_bytes_used = keep.slot_bytes_used;
		for (uint32_t i = 0; i < c->nclasses; i++)
			c->cls[i].hits = c->cls[i].insertions = c->cls[i].evictions = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return IBP_OK;
}

ibp_status_t ibp_cache_class_stats(ibp_cache_t *c, uint32_t cls, ibp_cache_class_stats_t *st)
{
	if (!c || !st)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_class_stats: NULL %s", c ? "stats" : "cache");
	if (cls >= c->nclasses)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "ibp_cache_class_stats: class %u of %u", cls, c->nclasses);
	pthread_mutex_lock(&c->mu);
	const cache_class_t *k = &c->cls[cls];
	st->slot_bytes = k->slot_bytes;
	st->slabs = k->slabs;
	st->slots = k->slots;
	st->used = k->used;
	st->hits = k->hits;
	st->insertions = k->insertions;
	st->evictions = k->evictions;
	st->bytes_resident = k->bytes_resident;
	st->bytes_saved = k->used * c->rb > k->used * k->slot_bytes ? k->used * (c->rb - k->slot_bytes) : 0;
	st->hist = k->hist;
	pthread_mutex_unlock(&c->mu);
	return IBP_OK;
}
