/* pool.c - the slab pool: the cache's size-class allocator and policy
 * (slab.c, cache.c) over pinned host memory, for variable-size blocks that
 * callers write and read themselves (compressed KV-cache blocks). A pool is
 * an ibp_cache_t in pool mode: handles are its keys (0, 1, 2, ... in
 * allocation order, never reused), every block is READY from its
 * allocation on and pinned until its writer unpins it, and no ghosts are
 * kept (a handle never comes back). */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "util/error.h"
#include "util/opts.h"

struct ibp_slab_pool {
	ibp_cache_t c;
	ibp_slab_pool_opts_t o;
	int64_t next; /* next handle */
	uint64_t allocs, frees, failed, reads;
};

void ibp_slab_pool_opts_default(ibp_slab_pool_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->policy = IBP_CACHE_POLICY_DEFAULT;
}

ibp_status_t ibp_slab_pool_create(const ibp_slab_pool_opts_t *opts, ibp_slab_pool_t **out)
{
	if (!opts || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: NULL %s", opts ? "out" : "opts");
	*out = NULL;
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_slab_pool_create", "ibp_slab_pool_opts_t"));
	const ibp_slab_pool_opts_t *o = opts;
	if (!o->capacity_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: capacity_bytes is 0");
	if (!o->max_block_bytes || o->max_block_bytes > IBP_CACHE_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: max_block_bytes %llu outside [1, %llu]",
				(unsigned long long)o->max_block_bytes, (unsigned long long)IBP_CACHE_MAX_ROW_BYTES);
	if (o->class_step && (o->class_step < 16 || o->class_step > 65536 || (o->class_step & (o->class_step - 1))))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: class_step %llu is not a power of two in "
				"[16, 65536]", (unsigned long long)o->class_step);
	if (o->policy > IBP_CACHE_LRU)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: unknown policy %d", (int)o->policy);
	if (o->flags & ~IBP_SLAB_POOL_HOST)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_create: unknown flag bits 0x%x", o->flags);
	ibp_slab_pool_t *p = calloc(1, sizeof(*p));
	if (!p)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_slab_pool_create: out of memory");
	p->o = *o;
	ibp_cache_t *c = &p->c;
	ibp_cache_opts_default(&c->o);
	c->o.capacity_bytes = o->capacity_bytes;
	c->o.row_bytes = o->max_block_bytes; /* the raw class: slots of the largest block */
	c->o.slab_bytes = o->slab_bytes;
	c->o.class_step = o->class_step;
	c->o.raw_threshold = 1.0; /* every class below the largest block is a class of its own */
	c->o.policy = o->policy == IBP_CACHE_POLICY_DEFAULT ? IBP_CACHE_S3FIFO : o->policy;
	c->pool = (o->flags & IBP_SLAB_POOL_HOST) ? 2 : 1;
	ibp_status_t s = ibpi_cache_storage_init(c);
	if (s != IBP_OK) {
		ibpi_cache_storage_free(c);
		free(p);
		return s;
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = p;
	return IBP_OK;
}

void ibp_slab_pool_free(ibp_slab_pool_t *p)
{
	if (!p)
		return;
	ibpi_cache_storage_free(&p->c);
	pthread_mutex_destroy(&p->c.mu);
	free(p);
}

/* The slot of a pointer from ibp_slab_pool_alloc / _pin, or UINT64_MAX. */
static uint64_t slot_of(const ibp_cache_t *c, const void *ptr)
{
	const uint8_t *q = ptr;
	if (!q || q < c->mem || q >= c->mem + c->o.capacity_bytes)
		return UINT64_MAX;
	uint64_t off = (uint64_t)(q - c->mem), s = off / c->slab_bytes, in = off % c->slab_bytes;
	if (c->scls[s] == SLAB_FREE)
		return UINT64_MAX;
	uint64_t sb = c->cls[c->scls[s]].slot_bytes;
	if (in % sb || in / sb >= c->snslots[s])
		return UINT64_MAX;
	return s * c->spp + in / sb;
}

ibp_status_t ibp_slab_pool_alloc(ibp_slab_pool_t *p, uint64_t len, int64_t *handle, void **ptr)
{
	if (handle)
		*handle = -1;
	if (ptr)
		*ptr = NULL;
	if (!p || !handle || !ptr)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_alloc: NULL %s", !p ? "pool" : !handle ? "handle" : "ptr");
	ibp_cache_t *c = &p->c;
	if (len > p->o.max_block_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_alloc: a block of %llu bytes is above max_block_bytes %llu",
				(unsigned long long)len, (unsigned long long)p->o.max_block_bytes);
	uint32_t cls = ibpi_cache_class_of(c, len);
	cache_sink_t sink = { NULL, UINT64_MAX, 0, p->o.on_evict, p->o.user };
	pthread_mutex_lock(&c->mu);
	/* The targets are those of the histogram before this block, computed
	 * only if the allocation reads them (a class with no free slot), not
	 * on every block (issue 33); the block is counted after, as nothing
	 * before reads the histogram. */
	c->targets_stale = 1;
	c->sink = &sink;
	uint64_t g = ibpi_cache_alloc_slot(c, cls);
	c->sink = NULL;
	ibpi_cache_hist_add(c, cls);
	if (g == UINT64_MAX) {
		p->failed++;
		c->st.rejected++;
		pthread_mutex_unlock(&c->mu);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_slab_pool_alloc: no room for a block of %llu bytes (%s)",
				(unsigned long long)len,
				c->o.policy == IBP_CACHE_STATIC ? "the pool is full and its policy is static"
								: "every block that could make room is pinned");
	}
	cache_class_t *k = &c->cls[cls];
	int64_t h = p->next++;
	if (ibpi_cache_ix_insert(&c->ix, h, ENT_MAKE(ENT_READY, cls, len, g / c->spp, g % c->spp))) {
		ibpi_cache_slot_release(c, g);
		p->next--;
		p->failed++;
		c->st.rejected++;
		pthread_mutex_unlock(&c->mu);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_slab_pool_alloc: cannot grow the index");
	}
	/* the next handle's index position, while the caller writes this block:
	 * the writes stream past the cache, so it missed every time */
	__builtin_prefetch(&c->ix.keys[ibpi_cache_hash(p->next) & (c->ix.cap - 1)], 1, 3);
	c->sid[g] = h;
	c->sflag[g] = 0;
	c->slen[g] = (uint32_t)len;
	c->sfl[g] = 0;
	c->sclu[g] = 0;
	ibpi_cache_pin_slot(c, g); /* until the writer unpins it */
	ibpi_cache_policy_insert(c, g, 0);
	p->allocs++;
	c->st.insertions++;
	k->insertions++;
	c->st.rows_resident++;
	c->st.bytes_resident += len;
	c->st.slot_bytes_used += k->slot_bytes;
	k->bytes_resident += len;
	*ptr = ibpi_cache_slot_ptr(c, g);
	pthread_mutex_unlock(&c->mu);
	*handle = h;
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_pin(ibp_slab_pool_t *p, int64_t handle, void **ptr, uint64_t *len)
{
	if (ptr)
		*ptr = NULL;
	if (!p || !ptr)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_pin: NULL %s", p ? "ptr" : "pool");
	ibp_cache_t *c = &p->c;
	pthread_mutex_lock(&c->mu);
	uint64_t pos = handle < 0 ? UINT64_MAX : ibpi_cache_ix_find(&c->ix, handle);
	if (pos == UINT64_MAX) {
		pthread_mutex_unlock(&c->mu);
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "ibp_slab_pool_pin: no block %lld (evicted, removed or never "
				"allocated)", (long long)handle);
	}
	uint64_t e = c->ix.vals[pos], g = ENT_SLAB(e) * c->spp + ENT_SLOT(e);
	ibpi_cache_pin_slot(c, g);
	ibpi_cache_policy_hit(c, g);
	c->cls[ENT_CLASS(e)].hits++;
	p->reads++;
	*ptr = ibpi_cache_slot_ptr(c, g);
	if (len)
		*len = ENT_LEN(e);
	pthread_mutex_unlock(&c->mu);
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_unpin(ibp_slab_pool_t *p, const void *ptr)
{
	if (!p)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_unpin: NULL pool");
	ibp_cache_t *c = &p->c;
	pthread_mutex_lock(&c->mu);
	uint64_t g = slot_of(c, ptr);
	if (g == UINT64_MAX || !c->pin[g]) {
		pthread_mutex_unlock(&c->mu);
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_unpin: %p is not a pinned block of this pool", ptr);
	}
	ibpi_cache_unpin_slot(c, g);
	pthread_mutex_unlock(&c->mu);
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_put(ibp_slab_pool_t *p, const void *data, uint64_t len, int64_t *handle)
{
	if (len && !data) {
		if (handle)
			*handle = -1;
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_put: NULL data with len = %llu", (unsigned long long)len);
	}
	void *ptr;
	IBP_TRY(ibp_slab_pool_alloc(p, len, handle, &ptr));
	if (len)
		memcpy(ptr, data, len);
	return ibp_slab_pool_unpin(p, ptr);
}

ibp_status_t ibp_slab_pool_get(ibp_slab_pool_t *p, int64_t handle, void *dst, uint64_t cap, uint64_t *len)
{
	if (len)
		*len = 0;
	if (!p || (!dst && cap))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_get: NULL %s", p ? "dst" : "pool");
	void *ptr;
	uint64_t n;
	IBP_TRY(ibp_slab_pool_pin(p, handle, &ptr, &n));
	if (len)
		*len = n;
	ibp_status_t s = IBP_OK;
	if (n > cap)
		s = ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "ibp_slab_pool_get: block %lld has %llu bytes, the buffer %llu",
			     (long long)handle, (unsigned long long)n, (unsigned long long)cap);
	else if (n)
		memcpy(dst, ptr, n);
	ibp_slab_pool_unpin(p, ptr);
	return s;
}

ibp_status_t ibp_slab_pool_size(ibp_slab_pool_t *p, int64_t handle, uint64_t *len)
{
	if (len)
		*len = 0;
	if (!p)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_size: NULL pool");
	ibp_cache_t *c = &p->c;
	pthread_mutex_lock(&c->mu);
	uint64_t pos = handle < 0 ? UINT64_MAX : ibpi_cache_ix_find(&c->ix, handle);
	uint64_t n = pos == UINT64_MAX ? 0 : ENT_LEN(c->ix.vals[pos]);
	pthread_mutex_unlock(&c->mu);
	if (pos == UINT64_MAX)
		return IBP_ERR_OUT_OF_RANGE; /* a question, not a failure: no detail */
	if (len)
		*len = n;
	return IBP_OK;
}

/* Frees block `handle` under the pool's lock; 0 when there is none. */
static int remove_locked(ibp_slab_pool_t *p, int64_t handle)
{
	ibp_cache_t *c = &p->c;
	uint64_t pos = handle < 0 ? UINT64_MAX : ibpi_cache_ix_find(&c->ix, handle);
	if (pos == UINT64_MAX)
		return 0;
	uint64_t e = c->ix.vals[pos];
	/* out of the index now; a pinned block's slot is freed at its last unpin */
	ibpi_cache_drop_slot(c, ENT_SLAB(e) * c->spp + ENT_SLOT(e), 0);
	p->frees++;
	c->st.invalidations++;
	return 1;
}

ibp_status_t ibp_slab_pool_remove(ibp_slab_pool_t *p, int64_t handle)
{
	if (!p)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_remove: NULL pool");
	pthread_mutex_lock(&p->c.mu);
	const int found = remove_locked(p, handle);
	pthread_mutex_unlock(&p->c.mu);
	if (!found)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "ibp_slab_pool_remove: no block %lld (evicted, removed or never "
				"allocated)", (long long)handle);
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_remove_many(ibp_slab_pool_t *p, const int64_t *handles, uint64_t n, uint64_t *removed)
{
	if (removed)
		*removed = 0;
	if (!p || (n && !handles))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_remove_many: NULL %s", p ? "handles" : "pool");
	uint64_t done = 0, missing = UINT64_MAX;
	pthread_mutex_lock(&p->c.mu);
	const uint64_t m = p->c.ix.cap - 1;
	for (uint64_t k = 0; k < n; k++) {
		if (k + 8 < n) /* index positions a few handles ahead: one miss each otherwise */
			__builtin_prefetch(&p->c.ix.keys[ibpi_cache_hash(handles[k + 8]) & m], 0, 3);
		if (remove_locked(p, handles[k]))
			done++;
		else
			missing = missing == UINT64_MAX ? k : missing;
	}
	pthread_mutex_unlock(&p->c.mu);
	if (removed)
		*removed = done;
	if (missing != UINT64_MAX)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "ibp_slab_pool_remove_many: no block %lld (handles[%llu]: evicted, "
				"removed or never allocated)", (long long)handles[missing], (unsigned long long)missing);
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_stats(ibp_slab_pool_t *p, ibp_slab_pool_stats_t *st, int reset)
{
	if (!p || !st)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_stats: NULL %s", p ? "stats" : "pool");
	ibp_cache_t *c = &p->c;
	pthread_mutex_lock(&c->mu);
	memset(st, 0, sizeof(*st));
	st->allocs = p->allocs;
	st->frees = p->frees;
	st->evictions = c->st.evictions;
	st->failed = p->failed;
	st->reads = p->reads;
	st->slab_moves = c->st.slab_moves;
	st->blocks = c->st.rows_resident;
	st->bytes = c->st.bytes_resident;
	st->slot_bytes_used = c->st.slot_bytes_used;
	for (uint64_t sl = 0; sl < c->nslabs; sl++) /* a slab without pins has none to count */
		for (uint64_t g = sl * c->spp, e = c->spinned[sl] ? g + c->spp : g; g < e; g++)
			if (c->pin[g] && !(c->sflag[g] & SF_ZOMBIE))
				st->pinned_blocks++;
	st->capacity_bytes = c->o.capacity_bytes;
	st->max_block_bytes = p->o.max_block_bytes;
	st->slab_bytes = c->slab_bytes;
	st->nslabs = c->nslabs;
	st->free_slabs = c->nfree_slabs;
	st->meta_bytes = ibpi_cache_meta_bytes(c);
	st->class_step = c->step;
	st->next_handle = p->next;
	st->nclasses = c->nclasses;
	st->pinned_memory = c->pinned;
	if (reset) {
		p->allocs = p->frees = p->failed = p->reads = 0;
		c->st.evictions = c->st.insertions = c->st.invalidations = c->st.rejected = c->st.slab_moves = 0;
		for (uint32_t i = 0; i < c->nclasses; i++)
			c->cls[i].hits = c->cls[i].insertions = c->cls[i].evictions = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return IBP_OK;
}

ibp_status_t ibp_slab_pool_class_stats(ibp_slab_pool_t *p, uint32_t cls, ibp_cache_class_stats_t *st)
{
	if (!p)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_slab_pool_class_stats: NULL pool");
	return ibp_cache_class_stats(&p->c, cls, st);
}
