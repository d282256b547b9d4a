/* cache.c - the slab cache's policies (CLOCK, S3-FIFO, sampled LRU,
 * static) and its API: create, gather in phases, prefetch, preload,
 * invalidate, stats. Storage and index are in slab.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"
#include "cache_internal.h"
#include "ibp/codec.h"
#include "ibp/container.h"
#include "util/error.h"

#define LRU_WINDOW 8u
#define HIST_WINDOW 8192u /* admissions between halvings of the histogram */


/* ---- policy lists: circular, doubly linked through prev/next ---- */

static void list_push_tail(ibp_cache_t *c, cache_class_t *k, int q, uint64_t g)
{
	uint32_t h = k->head[q], x = (uint32_t)g;
	if (h == NIL) {
		c->prev[x] = c->next[x] = x;
		k->head[q] = x;
	} else {
		uint32_t t = c->prev[h];
		c->prev[x] = t;
		c->next[x] = h;
		c->next[t] = x;
		c->prev[h] = x;
	}
	k->count[q]++;
}

static void list_remove(ibp_cache_t *c, cache_class_t *k, int q, uint64_t g)
{
	uint32_t x = (uint32_t)g;
	if (c->next[x] == x) {
		k->head[q] = NIL;
	} else {
		c->next[c->prev[x]] = c->next[x];
		c->prev[c->next[x]] = c->prev[x];
		if (k->head[q] == x)
			k->head[q] = c->next[x];
	}
	k->count[q]--;
}

static int queue_of(const ibp_cache_t *c, uint64_t g)
{
	return (c->sflag[g] & SF_MAIN) ? 1 : 0;
}

void ibpi_cache_policy_insert(ibp_cache_t *c, uint64_t g, int was_ghost)
{
	cache_class_t *k = &c->cls[c->scls[g / c->spp]];
	c->sfreq[g] = 0;
	c->stamp[g] = ++c->tick;
	if (c->o.policy == IBP_CACHE_S3FIFO && was_ghost)
		c->sflag[g] |= SF_MAIN;
	list_push_tail(c, k, queue_of(c, g), g);
}

void ibpi_cache_policy_hit(ibp_cache_t *c, uint64_t g)
{
	c->sflag[g] |= SF_REF;
	c->stamp[g] = ++c->tick;
	if (c->sfreq[g] < 3)
		c->sfreq[g]++;
}

static void policy_remove(ibp_cache_t *c, uint64_t g)
{
	list_remove(c, &c->cls[c->scls[g / c->spp]], queue_of(c, g), g);
}

/* Records `id` as a ghost (S3-FIFO): the ring's oldest ghost is dropped. */
static void ghost_add(ibp_cache_t *c, int64_t id)
{
	uint64_t pos = c->gseq % c->gcap;
	if (c->gseq >= c->gcap) {
		uint64_t p = ibpi_cache_ix_find(&c->ix, c->gring[pos]);
		if (p != UINT64_MAX && ENT_STATE(c->ix.vals[p]) == ENT_GHOST &&
		    ENT_GHOST_SEQ(c->ix.vals[p]) == c->gseq - c->gcap)
			ibpi_cache_ix_erase(&c->ix, p);
	}
	c->gring[pos] = id;
	(void)ibpi_cache_ix_insert(&c->ix, id, (ENT_GHOST << 62) | c->gseq); /* no memory: no ghost */
	c->gseq++;
}

/* Takes slot g out of the policy and the index (its id becomes a ghost
 * when asked); the slot is freed now, or at its last unpin when pinned. */
void ibpi_cache_drop_slot(ibp_cache_t *c, uint64_t g, int ghost)
{
	cache_class_t *k = &c->cls[c->scls[g / c->spp]];
	int64_t id = c->sid[g];
	if (!(c->sflag[g] & SF_ZOMBIE)) {
		policy_remove(c, g);
		uint64_t p = ibpi_cache_ix_find(&c->ix, id);
		if (p != UINT64_MAX)
			ibpi_cache_ix_erase(&c->ix, p);
		if (!(c->sflag[g] & SF_FILLING)) {
			c->st.rows_resident--;
			c->st.bytes_resident -= c->slen[g];
			c->st.slot_bytes_used -= k->slot_bytes;
			k->bytes_resident -= c->slen[g];
		}
		if (ghost && c->gcap)
			ghost_add(c, id);
	}
	if (c->pin[g])
		c->sflag[g] |= SF_ZOMBIE;
	else
		ibpi_cache_slot_release(c, g);
}

/* Evicts unpinned slot g (its id becomes a ghost when asked), reported to
 * the allocating call's sink. */
static void evict_ghost(ibp_cache_t *c, uint64_t g, int ghost)
{
	cache_sink_t *k = c->sink;
	if (k) {
		if (k->ids)
			k->ids[k->n] = c->sid[g]; /* n < cap: the callers checked the budget */
		if (k->fn)
			k->fn(k->user, c->sid[g], ibpi_cache_slot_ptr(c, g), c->slen[g]);
		k->n++;
	}
	c->cls[c->scls[g / c->spp]].evictions++;
	c->st.evictions++;
	ibpi_cache_drop_slot(c, g, ghost);
}

static void evict_slot(ibp_cache_t *c, uint64_t g)
{
	evict_ghost(c, g, 0);
}

static int evictable(const ibp_cache_t *c, uint64_t g)
{
	return !c->pin[g] && !(c->sflag[g] & (SF_FILLING | SF_ZOMBIE));
}

/* One victim of class `cls` by the policy, evicted; 0 when none can go. */
static int policy_evict(ibp_cache_t *c, uint32_t cls)
{
	cache_class_t *k = &c->cls[cls];
	uint64_t n = k->count[0] + k->count[1];
	if (!n || c->o.policy == IBP_CACHE_STATIC)
		return 0;
	if (c->o.policy == IBP_CACHE_CLOCK) {
		for (uint64_t i = 0; i < 2 * n + 1; i++) {
			uint32_t g = k->head[0];
			k->head[0] = c->next[g];
			if (!evictable(c, g))
				continue;
			if (c->sflag[g] & SF_REF) {
				c->sflag[g] &= (uint8_t)~SF_REF;
				continue;
			}
			evict_slot(c, g);
			return 1;
		}
		return 0;
	}
	if (c->o.policy == IBP_CACHE_LRU) {
		/* The least recent of the next LRU_WINDOW evictable entries. */
		uint32_t best = NIL, g = k->head[0];
		unsigned seen = 0;
		for (uint64_t i = 0; i < n && seen < LRU_WINDOW; i++, g = c->next[g])
			if (evictable(c, g)) {
				seen++;
				if (best == NIL || c->stamp[g] < c->stamp[best])
					best = g;
			}
		if (best == NIL)
			return 0;
		k->head[0] = g;
		if (k->head[0] == best)
			k->head[0] = c->next[best];
		evict_slot(c, best);
		return 1;
	}
	/* S3-FIFO: a small FIFO (a tenth of the class) filters one-hit rows,
	 * which go to the ghost list; rows hit while small move to main, which
	 * is a FIFO with reinsertion while their frequency lasts. */
	uint64_t small_target = k->slots / 10 ? k->slots / 10 : 1;
	for (uint64_t i = 0; i < 4 * n + 4; i++) {
		int q = k->count[0] && (k->count[0] >= small_target || !k->count[1]) ? 0 : 1;
		if (!k->count[q])
			return 0;
		uint32_t g = k->head[q];
		if (!evictable(c, g)) {
			k->head[q] = c->next[g]; /* rotate past it */
			continue;
		}
		if (q == 0 && c->sfreq[g] > 0) {
			list_remove(c, k, 0, g);
			c->sflag[g] |= SF_MAIN;
			c->sfreq[g] = 0;
			list_push_tail(c, k, 1, g);
			continue;
		}
		if (q == 1 && c->sfreq[g] > 0) {
			c->sfreq[g]--;
			k->head[1] = c->next[g];
			continue;
		}
		evict_ghost(c, g, q == 0);
		return 1;
	}
	return 0;
}

uint64_t ibpi_cache_alloc_slot(ibp_cache_t *c, uint32_t cls)
{
	uint64_t g = ibpi_cache_slot_take(c, cls);
	if (g != UINT64_MAX)
		return g;
	/* a free slot of a slightly larger class (its slab stays that class);
	 * static: of any larger class, as nothing else would ever use it */
	uint32_t end = c->o.policy == IBP_CACHE_STATIC && !c->pool ? c->nclasses : ibpi_cache_borrow_end(c, cls);
	for (uint32_t j = cls + 1; j < end; j++)
		if (c->cls[j].partial != NIL)
			return ibpi_cache_slot_take(c, j);
	if (c->o.policy == IBP_CACHE_STATIC) /* nothing is evicted; a static pool may take an emptied slab */
		return c->pool && ibpi_cache_slab_steal(c, cls, evict_slot, 0, 1) ? ibpi_cache_slot_take(c, cls) : UINT64_MAX;
	/* evictions this call may still make */
	uint64_t budget = c->sink ? c->sink->cap - c->sink->n : UINT64_MAX;
	cache_class_t *k = &c->cls[cls];
	if (k->slabs < k->target && ibpi_cache_slab_steal(c, cls, evict_slot, budget, 0))
		return ibpi_cache_slot_take(c, cls);
	if (budget && policy_evict(c, cls))
		return ibpi_cache_slot_take(c, cls);
	/* A class with no slab promised (a tiny cache: ibpi_cache_targets) evicts in
	 * the next larger class that has rows and takes that slot. */
	if (budget && !k->slabs && !k->target)
		for (uint32_t j = cls + 1; j < end; j++)
			if (c->cls[j].count[0] + c->cls[j].count[1] && policy_evict(c, j))
				return ibpi_cache_slot_take(c, j);
	/* A pool must serve every block while anything can go: a class
	 * without a slab, or whose rows are all pinned, takes the least used
	 * unpinned slab of any other class. */
	if ((!k->slabs || c->pool) && ibpi_cache_slab_steal(c, cls, evict_slot, budget, c->pool))
		return ibpi_cache_slot_take(c, cls);
	return UINT64_MAX;
}

void ibpi_cache_pin_slot(ibp_cache_t *c, uint64_t g)
{
	if (c->pin[g]++ == 0)
		c->spinned[g / c->spp]++;
}

void ibpi_cache_unpin_slot(ibp_cache_t *c, uint64_t g)
{
	if (--c->pin[g] == 0) {
		c->spinned[g / c->spp]--;
		if (c->sflag[g] & SF_ZOMBIE)
			ibpi_cache_slot_release(c, g);
	}
}

uint64_t ibpi_cache_meta_bytes(const ibp_cache_t *c)
{
	return c->meta_bytes + c->ix.cap * 16;
}

void ibpi_cache_hist_add(ibp_cache_t *c, uint32_t cls)
{
	c->cls[cls].hist++;
	if (++c->hist_total >= HIST_WINDOW) {
		c->hist_total = 0;
		for (uint32_t i = 0; i < c->nclasses; i++) {
			c->cls[i].hist /= 2;
			c->hist_total += c->cls[i].hist;
		}
	}
}

/* ---- create / free ---- */

void ibp_cache_opts_default(ibp_cache_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
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

/* Where a missed row's bytes come from and which class it would take.
 * Compressed bytes are kept for packed IBP rows that are not RAW and not
 * near raw; everything else is kept decoded in the raw class. */
static ibp_status_t miss_meta(ibp_cache_t *c, const ibp_container_t *ct, cache_ws_t *w, uint64_t u)
{
	w->usrc[u] = NULL;
	w->ulen[u] = c->rb; /* what crosses PCIe: the stored length */
	w->ufl[u] = 0;
	w->uclu[u] = 0;
	if (ibp_container_codec_id(ct) == IBP_CODEC_IBP) {
		unsigned clu = 0;
		ibp_status_t s = ibp_container_row_meta(ct, (uint64_t)w->uid[u], &w->usrc[u], &w->ulen[u], &w->ufl[u],
							&clu);
		if (s != IBP_OK)
			return s;
		w->uclu[u] = (uint8_t)clu;
	}
	ibpi_cache_miss_class(c, w, u, w->usrc[u] && ibp_container_layout(ct) == IBP_LAYOUT_PACKED);
	return IBP_OK;
}

void ibpi_cache_miss_class(ibp_cache_t *c, cache_ws_t *w, uint64_t u, int packed)
{
	int compressed = !(c->o.flags & IBP_CACHE_UNCOMPRESSED) && packed &&
			 (w->ufl[u] & IBP_ROW_MODE_MASK) != IBP_ROW_RAW;
	uint32_t cls = compressed ? ibpi_cache_class_of(c, w->ulen[u]) : c->raw;
	if (cls == c->raw)
		compressed = 0;
	w->ucls[u] = cls;
	w->uclen[u] = compressed ? w->ulen[u] : c->rb;
	if (!compressed)
		w->ufl[u] = 0xFF; /* decoded */
}

/* Decodes row id from the store into dst. */
static ibp_status_t store_row(ibp_store_t *store, const ibp_container_t *ct, const cache_ws_t *w, uint64_t u,
			      void *dst)
{
	if (ibp_container_codec_id(ct) == IBP_CODEC_IBP) {
		uint8_t fl;
		unsigned clu;
		const uint8_t *src;
		uint64_t len;
		IBP_TRY(ibp_container_row_meta(ct, (uint64_t)w->uid[u], &src, &len, &fl, &clu));
		return ibp_decode_row(ibp_store_codec(store), src, len, fl, clu, dst);
	}
	return ibp_store_gather(store, &w->uid[u], 1, dst, 1);
}

/* Decodes a resident slot into dst. */
static ibp_status_t slot_row(const ibp_cache_t *c, const ibp_store_t *store, uint64_t g, void *dst)
{
	const uint8_t *p = ibpi_cache_slot_ptr(c, g);
	if (c->sfl[g] == 0xFF) {
		memcpy(dst, p, c->rb);
		return IBP_OK;
	}
	return ibp_decode_row(ibp_store_codec(store), p, c->slen[g], c->sfl[g], c->sclu[g], dst);
}

static uint8_t *out_row(const ibp_cache_t *c, void *out, const int64_t *out_rows, uint64_t k)
{
	return (uint8_t *)out + (uint64_t)(out_rows ? out_rows[k] : (int64_t)k) * c->rb;
}

/* One pass over at most max_batch requests. `out` NULL: prefetch. */
static void pass(ibp_cache_t *c, cache_ws_t *w, ibp_store_t *store, const int64_t *ids, uint64_t n, void *out,
		 const int64_t *out_rows, int32_t *status, uint32_t flags, cache_sink_t *sink, uint64_t base,
		 ibp_status_t *first, uint64_t *first_pos)
{
	const ibp_container_t *ct = ibp_store_container(store);
	uint64_t nu = ibpi_cache_pass_dedupe(c, w, ids, n, ibp_store_nrows(store), out != NULL, out, out_rows, status, base,
					first, first_pos);
	int admit = !(flags & IBP_CACHE_NO_ADMIT);
	ibpi_cache_pass_probe(c, w, nu, out != NULL, admit);

	/* 3. misses: where their bytes are, and (gather) decode them from the store */
	uint64_t srows = 0, sbytes = 0;
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_HIT || (!out && w->ukind[u] != K_ADMIT))
			continue;
		ibp_status_t s = miss_meta(c, ct, w, u);
		if (s == IBP_OK && out)
			s = store_row(store, ct, w, u, out_row(c, out, out_rows, w->ufirst[u]));
		if (s == IBP_OK) {
			srows++;
			sbytes += w->ulen[u];
		}
		if (s != IBP_OK) {
			w->ustat[u] = s == IBP_ERR_NOMEM ? s : IBP_ERR_CORRUPT;
			w->ukind[u] = K_ERR;
			if (out)
				memset(out_row(c, out, out_rows, w->ufirst[u]), 0, c->rb);
		}
	}

	ibpi_cache_pass_alloc(c, w, nu, out != NULL, sink);

	/* 5. copy into the slots; decode the hits */
	uint64_t copied = 0, hit_bytes = 0;
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_ALLOC) {
			uint8_t *dst = ibpi_cache_slot_ptr(c, w->ug[u]);
			ibp_status_t s = IBP_OK;
			if (!out) /* prefetch: decode once to check the bytes */
				s = store_row(store, ct, w, u, w->scratch);
			if (s == IBP_OK) {
				if (w->ufl[u] == 0xFF)
					memcpy(dst, out ? out_row(c, out, out_rows, w->ufirst[u]) : w->scratch, c->rb);
				else
					memcpy(dst, w->usrc[u], w->uclen[u]);
				copied += w->uclen[u];
				w->ukind[u] = K_FILLED;
				if (!out) {
					srows++;
					sbytes += w->ulen[u];
				}
			} else {
				w->ukind[u] = K_BADFILL; /* prefetch: skipped, not an error */
			}
		} else if (w->ukind[u] == K_HIT && out) {
			uint8_t *dst = out_row(c, out, out_rows, w->ufirst[u]);
			ibp_status_t s = slot_row(c, store, w->ug[u], dst);
			hit_bytes += c->slen[w->ug[u]];
			if (s != IBP_OK) {
				memset(dst, 0, c->rb);
				w->ustat[u] = IBP_ERR_CORRUPT;
			}
		}
	}

	ibpi_cache_pass_publish(c, w, n, nu, out != NULL, srows, sbytes, copied, hit_bytes);

	/* 7. statuses and duplicates */
	for (uint64_t k = 0; k < n; k++) {
		uint32_t u = w->rep[k];
		if (u == NIL)
			continue;
		ibp_status_t s = (ibp_status_t)w->ustat[u];
		if (out && w->ufirst[u] != k)
			memcpy(out_row(c, out, out_rows, k), out_row(c, out, out_rows, w->ufirst[u]), c->rb);
		if (status)
			status[k] = s;
		if (s != IBP_OK && *first == IBP_OK) {
			*first = s;
			*first_pos = base + k;
		}
	}
}

uint64_t ibpi_cache_pass_dedupe(ibp_cache_t *c, cache_ws_t *w, const int64_t *ids, uint64_t n, uint64_t nrows, int gather,
			   void *out, const int64_t *out_rows, int32_t *status, uint64_t base, ibp_status_t *first,
			   uint64_t *first_pos)
{
	uint64_t nu = 0, m = w->dcap - 1;
	/* 1. validate and deduplicate */
	for (uint64_t k = 0; k < n; k++) {
		w->rep[k] = NIL;
		ibp_status_t s = IBP_OK;
		if (gather && out_rows && out_rows[k] < 0)
			s = IBP_ERR_INVALID_ARG;
		else if (ids[k] < 0 || (uint64_t)ids[k] >= nrows)
			s = IBP_ERR_OUT_OF_RANGE;
		if (s != IBP_OK) {
			if (out && s == IBP_ERR_OUT_OF_RANGE)
				memset(out_row(c, out, out_rows, k), 0, c->rb);
			if (status)
				status[k] = s;
			if (*first == IBP_OK) {
				*first = s;
				*first_pos = base + k;
			}
			continue;
		}
		uint64_t p = ibpi_cache_hash(ids[k]) & m;
		while (w->dkey[p] != KEY_EMPTY && w->dkey[p] != ids[k])
			p = (p + 1) & m;
		if (w->dkey[p] == KEY_EMPTY) {
			w->dkey[p] = ids[k];
			w->dval[p] = (uint32_t)nu;
			w->uid[nu] = ids[k];
			w->ufirst[nu] = k;
			w->ucnt[nu] = 0;
			nu++;
		}
		w->rep[k] = w->dval[p];
		w->ucnt[w->rep[k]]++;
	}
	for (uint64_t u = 0; u < nu; u++) { /* clear the table by its keys */
		uint64_t p = ibpi_cache_hash(w->uid[u]) & m;
		while (w->dkey[p] != w->uid[u])
			p = (p + 1) & m;
		w->dkey[p] = KEY_EMPTY;
	}
	return nu;
}

void ibpi_cache_pass_probe(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, int admit)
{
	/* 2. probe and pin (locked) */
	pthread_mutex_lock(&c->mu);
	for (uint64_t u = 0; u < nu; u++) {
		uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		uint64_t e = p == UINT64_MAX ? 0 : c->ix.vals[p];
		w->ustat[u] = IBP_OK;
		if (p != UINT64_MAX && ENT_STATE(e) == ENT_READY) {
			uint64_t g = ENT_SLAB(e) * c->spp + ENT_SLOT(e);
			w->ukind[u] = K_HIT;
			w->ug[u] = g;
			ibpi_cache_pin_slot(c, g);
			if (gather) {
				ibpi_cache_policy_hit(c, g);
				c->cls[ENT_CLASS(e)].hits += w->ucnt[u];
			}
		} else {
			w->ukind[u] = admit && (p == UINT64_MAX || ENT_STATE(e) == ENT_GHOST) ? K_ADMIT : K_MISS;
		}
	}
	pthread_mutex_unlock(&c->mu);
}

void ibpi_cache_pass_alloc(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, cache_sink_t *sink)
{
	/* 4. allocate slots for the admitted misses (locked) */
	pthread_mutex_lock(&c->mu);
	c->sink = sink;
	ibpi_cache_targets(c);
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] != K_ADMIT)
			continue;
		w->ukind[u] = K_MISS;
		if (c->o.policy == IBP_CACHE_STATIC && gather) {
			c->st.rejected++; /* static: gathers never admit */
			continue;
		}
		if (w->ucls[u] == c->raw && (c->o.flags & IBP_CACHE_NO_RAW) && !(c->o.flags & IBP_CACHE_UNCOMPRESSED)) {
			c->st.rejected++;
			continue;
		}
		uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		int ghost = p != UINT64_MAX && ENT_STATE(c->ix.vals[p]) == ENT_GHOST;
		if (p != UINT64_MAX && !ghost)
			continue; /* another caller holds it: never a key twice */
		ibpi_cache_hist_add(c, w->ucls[u]);
		uint64_t g = ibpi_cache_alloc_slot(c, w->ucls[u]);
		if (g == UINT64_MAX) {
			c->st.rejected++;
			continue;
		}
		if (ghost) /* the ghost may have gone while evicting: look again */
			p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		w->ucls[u] = c->scls[g / c->spp]; /* a borrowed slot: its slab's class */
		uint64_t e = ENT_MAKE(ENT_FILLING, w->ucls[u], w->uclen[u], g / c->spp, g % c->spp);
		if (p != UINT64_MAX) {
			c->ix.vals[p] = e;
		} else if (ibpi_cache_ix_insert(&c->ix, w->uid[u], e)) {
			ibpi_cache_slot_release(c, g); /* no memory to grow the index: not admitted */
			c->st.rejected++;
			continue;
		}
		c->sid[g] = w->uid[u];
		c->sflag[g] = SF_FILLING;
		c->slen[g] = (uint32_t)w->uclen[u];
		c->sfl[g] = w->ufl[u];
		c->sclu[g] = w->uclu[u];
		ibpi_cache_pin_slot(c, g);
		ibpi_cache_policy_insert(c, g, ghost);
		w->ug[u] = g;
		w->ukind[u] = K_ALLOC;
	}
	c->sink = NULL;
	pthread_mutex_unlock(&c->mu);
}

void ibpi_cache_pass_publish(ibp_cache_t *c, cache_ws_t *w, uint64_t n, uint64_t nu, int gather, uint64_t srows,
			uint64_t sbytes, uint64_t copied, uint64_t hit_bytes)
{
	/* 6. publish and unpin (locked) */
	pthread_mutex_lock(&c->mu);
	for (uint64_t u = 0; u < nu; u++) {
		uint64_t g = w->ug[u];
		w->ug[u] = UINT64_MAX;
		if (w->ukind[u] == K_FILLED || w->ukind[u] == K_BADFILL) {
			if (!(c->sflag[g] & SF_ZOMBIE)) {
				if (w->ukind[u] == K_FILLED) {
					uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
					cache_class_t *k = &c->cls[c->scls[g / c->spp]];
					c->sflag[g] &= (uint8_t)~SF_FILLING;
					c->ix.vals[p] = (c->ix.vals[p] & ~(3ull << 62)) | (ENT_READY << 62);
					c->st.insertions++;
					k->insertions++;
					c->st.rows_resident++;
					c->st.bytes_resident += c->slen[g];
					c->st.slot_bytes_used += k->slot_bytes;
					k->bytes_resident += c->slen[g];
				} else {
					ibpi_cache_drop_slot(c, g, 0); /* pinned: freed by the unpin below */
				}
			}
			ibpi_cache_unpin_slot(c, g);
		} else if (w->ukind[u] == K_HIT) {
			if (w->ustat[u] != IBP_OK && !(c->sflag[g] & SF_ZOMBIE)) {
				c->st.invalidations++; /* bad bytes in the cache: drop them */
				ibpi_cache_drop_slot(c, g, 0);
			}
			ibpi_cache_unpin_slot(c, g);
		}
	}
	c->st.store_rows += srows;
	c->st.store_bytes += sbytes;
	c->st.bytes_copied += copied;
	c->st.hit_bytes += hit_bytes;
	if (gather) {
		c->st.requests += n;
		for (uint64_t k = 0; k < n; k++)
			if (w->rep[k] != NIL) {
				if (w->ukind[w->rep[k]] == K_HIT)
					c->st.hits++;
				else
					c->st.misses++;
			}
	}
	pthread_mutex_unlock(&c->mu);
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
		uint64_t nrows = ibp_store_nrows(store);
		for (uint64_t k = 0; k < n; k++)
			if (ids[k] < 0 || (uint64_t)ids[k] >= nrows)
				return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: id %lld at position %llu is outside [0, %llu)",
						fn, (long long)ids[k], (unsigned long long)k, (unsigned long long)nrows);
	}
	cache_ws_t *w = ws_get(c);
	ibp_status_t first = IBP_OK;
	uint64_t first_pos = 0;
	for (uint64_t a = 0; a < n; a += c->o.max_batch) {
		uint64_t k = n - a < c->o.max_batch ? n - a : c->o.max_batch;
		pass(c, w, store, ids + a, k, out, out_rows ? out_rows + a : NULL, status ? status + a : NULL, flags,
		     &sink, a, &first, &first_pos);
		if (out && out_rows == NULL)
			out = (uint8_t *)out + k * c->rb;
	}
	ws_put(c, w);
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
