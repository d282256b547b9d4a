/* slab.c - the cache's storage: capacity carved into slabs, one size class
 * per slab, a bitmap of slots per slab, the split of slabs among classes by
 * the observed size histogram; and the id -> entry index (open addressing,
 * linear probing, tombstones). Policy-free: cache.c decides what to evict. */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "ibp/alloc.h"
#include "util/error.h"

static uint64_t pow2_at_least(uint64_t x)
{
	uint64_t p = 1;
	while (p < x)
		p <<= 1;
	return p;
}

static uint64_t slab_len(const ibp_cache_t *c, uint64_t s)
{
	uint64_t off = s * c->slab_bytes, cap = c->o.capacity_bytes;
	return cap - off < c->slab_bytes ? cap - off : c->slab_bytes;
}

/* The automatic ladder of compressed slot sizes (multiples of 16), from
 * 32 bytes: 16 bytes apart up to 128, then about 1.125x apart, the gap
 * never above `step` (so classes are step apart from about 8 * step up).
 * Tiny compressed rows (sparse rows of a multi-KiB table) get slots near
 * their size instead of a step-sized floor; relative waste stays under
 * ~12%. The smallest slot is raised so a slab has at most CACHE_MAX_SPP
 * slots. Fills c->cls[0..n) (n <= IBP_CACHE_MAX_CLASSES; more means the
 * caller must coarsen `step`) and returns n. */
static uint64_t ladder(ibp_cache_t *c, uint64_t step, uint64_t slab, double limit, uint64_t raw_slot)
{
	uint64_t s = 32, n = 0;
	while (slab / s > CACHE_MAX_SPP)
		s += 16;
	while ((double)s <= limit && s < raw_slot) {
		if (n == IBP_CACHE_MAX_CLASSES)
			return n + 1;
		c->cls[n++].slot_bytes = s;
		uint64_t gap = (s / 8 + 15) / 16 * 16;
		if (gap < 16)
			gap = 16;
		if (gap > step)
			gap = step;
		s += gap;
	}
	return n;
}

/* Geometry: step, classes, slab size, slot counts. */
static ibp_status_t geometry(ibp_cache_t *c)
{
	const ibp_cache_opts_t *o = &c->o;
	uint64_t rb = o->row_bytes, cap = o->capacity_bytes;
	c->rb = rb;
	if (o->flags & IBP_CACHE_UNCOMPRESSED) {
		/* The fixed-width baseline: one class of exactly row_bytes. */
		c->step = rb;
		c->nclasses = 1;
		c->raw = 0;
		c->cls[0].slot_bytes = rb;
		uint64_t spp = o->slab_bytes ? o->slab_bytes / rb : cap / rb / 64;
		if (spp < 1)
			spp = 1;
		if (spp > CACHE_MAX_SPP)
			spp = CACHE_MAX_SPP;
		if (o->slab_bytes && o->slab_bytes % rb)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "cache: slab_bytes %llu is not a multiple of row_bytes %llu",
					(unsigned long long)o->slab_bytes, (unsigned long long)rb);
		c->spp = spp;
		c->slab_bytes = spp * rb;
	} else {
		uint64_t raw_slot = (rb + 15) / 16 * 16;
		uint64_t step = o->class_step;
		/* auto (a cache, not a pool): a ladder of slot sizes, not multiples of
		 * one step (see ladder()) */
		int lad = !step && !c->pool;
		if (!step) {
			/* 128 (a GPU cache line); finer for rows under 2 KiB, so that a
			 * class step stays below what compression saves on dense rows. */
			step = 128;
			while (step > 16 && step * 16 > raw_slot)
				step >>= 1;
		}
		uint64_t slab = o->slab_bytes;
		if (!slab) {
			/* About capacity / 64 (16 KiB..1 MiB), a whole number of raw
			 * slots (at least 4), so the raw class wastes nothing. */
			uint64_t want = pow2_at_least(cap / 64);
			if (want < (16u << 10))
				want = 16u << 10;
			if (want > (1u << 20))
				want = 1u << 20;
			uint64_t k = (want + raw_slot / 2) / raw_slot;
			if (k < 4)
				k = 4;
			while ((cap + k * raw_slot - 1) / (k * raw_slot) > CACHE_MAX_SLABS)
				k <<= 1;
			slab = k * raw_slot;
		}
		if (slab < raw_slot)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "cache: slab_bytes %llu is below one raw row (%llu bytes)",
					(unsigned long long)slab, (unsigned long long)raw_slot);
		/* Compressed classes: slots up to raw_threshold of the raw slot; a
		 * row that needs a larger one is kept decoded in the raw class. */
		double limit = o->raw_threshold * (double)raw_slot;
		for (;;) {
			uint64_t n = lad ? ladder(c, step, slab, limit, raw_slot) : 0;
			if (!lad) {
				while ((double)((n + 1) * step) <= limit && (n + 1) * step < raw_slot &&
				       n < IBP_CACHE_MAX_CLASSES)
					n++;
				for (uint64_t i = 0; i < n && i < IBP_CACHE_MAX_CLASSES; i++)
					c->cls[i].slot_bytes = (i + 1) * step;
			}
			uint64_t small = n ? c->cls[0].slot_bytes : raw_slot;
			if (n + 1 <= IBP_CACHE_MAX_CLASSES && slab / small <= CACHE_MAX_SPP) {
				c->nclasses = (uint32_t)(n + 1);
				break;
			}
			step <<= 1;
		}
		c->step = step;
		c->raw = c->nclasses - 1;
		c->cls[c->raw].slot_bytes = raw_slot;
		c->slab_bytes = slab;
		c->spp = slab / c->cls[0].slot_bytes;
		if (c->spp > CACHE_MAX_SPP)
			c->spp = CACHE_MAX_SPP;
	}
	c->nslabs = (cap + c->slab_bytes - 1) / c->slab_bytes;
	if (c->nslabs > CACHE_MAX_SLABS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cache: %llu slabs of %llu bytes exceed the 2^17 an entry can name",
				(unsigned long long)c->nslabs, (unsigned long long)c->slab_bytes);
	if (cap < c->cls[c->raw].slot_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cache: capacity %llu is below one row slot (%llu bytes)",
				(unsigned long long)cap, (unsigned long long)c->cls[c->raw].slot_bytes);
	return IBP_OK;
}

ibp_status_t ibpi_cache_storage_init(ibp_cache_t *c)
{
	IBP_TRY(geometry(c));
	uint64_t ns = c->nslabs;
	c->nslots = ns * c->spp;
	c->words = (c->spp + 63) / 64;
	c->gcap = c->o.policy == IBP_CACHE_S3FIFO && !c->pool ? c->nslots : 0;
	/* The host index starts sized for the rows of a typical slot (a cache:
	 * the larger of 256 bytes and a quarter raw slot; a pool: every slot)
	 * and grows when filled (ibpi_cache_ix_insert), so its size follows what is
	 * resident, not the most rows the smallest class could hold. */
	uint64_t rows = c->nslots;
	if (!c->pool) {
		uint64_t typ = c->cls[c->raw].slot_bytes / 4 > 256 ? c->cls[c->raw].slot_bytes / 4 : 256;
		if (c->o.capacity_bytes / typ + 1 < rows)
			rows = c->o.capacity_bytes / typ + 1;
	}
	uint64_t want = (rows + (c->gcap < rows ? c->gcap : rows)) * 4 / 3 + 64;
	c->ix.cap = pow2_at_least(want);
	if (c->pool) {
		/* Pinned host memory when CUDA can pin it, else (IBP_ERR_NO_DEVICE
		 * with the fallback flag, or a pool asked for host memory) ordinary
		 * host memory from the same allocator. */
		void *m = NULL;
		ibp_status_t s = c->pool > 1 ? IBP_ERR_NO_DEVICE
					     : ibp_pinned_alloc(c->o.capacity_bytes, 4096, IBP_CUDA_HOST_FALLBACK, &m);
		if (s == IBP_OK) {
			c->pinned = 1;
		} else {
			if (m)
				ibp_pinned_free(m);
			m = ibp_host_alloc(c->o.capacity_bytes, 4096);
			c->pinned = 0;
		}
		c->mem = m;
	} else {
		c->mem = malloc(c->o.capacity_bytes);
	}
	c->scls = calloc(ns, sizeof(uint16_t));
	c->snslots = calloc(ns, sizeof(uint32_t));
	c->sused = calloc(ns, sizeof(uint32_t));
	c->spinned = calloc(ns, sizeof(uint32_t));
	c->snext = calloc(ns, sizeof(uint32_t));
	c->sprev = calloc(ns, sizeof(uint32_t));
	c->bitmap = calloc(ns * c->words, sizeof(uint64_t));
	c->sid = malloc(c->nslots * sizeof(int64_t));
	c->pin = calloc(c->nslots, sizeof(uint32_t));
	c->prev = calloc(c->nslots, sizeof(uint32_t));
	c->next = calloc(c->nslots, sizeof(uint32_t));
	c->slen = calloc(c->nslots, sizeof(uint32_t));
	c->stamp = calloc(c->nslots, sizeof(uint64_t));
	c->sflag = calloc(c->nslots, 1);
	c->sfl = calloc(c->nslots, 1);
	c->sclu = calloc(c->nslots, 1);
	c->sfreq = calloc(c->nslots, 1);
	c->gring = c->gcap ? malloc(c->gcap * sizeof(int64_t)) : NULL;
	c->ix.keys = malloc(c->ix.cap * sizeof(int64_t));
	c->ix.vals = malloc(c->ix.cap * sizeof(uint64_t));
	if (!c->mem || !c->scls || !c->snslots || !c->sused || !c->spinned || !c->snext || !c->sprev ||
	    !c->bitmap || !c->sid || !c->pin || !c->prev || !c->next || !c->slen || !c->stamp || !c->sflag ||
	    !c->sfl || !c->sclu || !c->sfreq || (c->gcap && !c->gring) || !c->ix.keys || !c->ix.vals)
		return ibpi_fail(IBP_ERR_NOMEM, "cache: cannot allocate %llu bytes of slabs and their metadata",
				(unsigned long long)c->o.capacity_bytes);
	/* without the index, which grows: ibpi_cache_meta_bytes() adds it */
	c->meta_bytes = ns * (2 + 5 * 4 + c->words * 8) + c->nslots * (8 + 4 * 4 + 8 + 4) + c->gcap * 8;
	ibpi_cache_storage_reset(c);
	return IBP_OK;
}

void ibpi_cache_storage_free(ibp_cache_t *c)
{
	if (!c->pool)
		free(c->mem);
	else if (c->pinned)
		ibp_pinned_free(c->mem);
	else
		ibp_host_free(c->mem);
	free(c->scls);
	free(c->snslots);
	free(c->sused);
	free(c->spinned);
	free(c->snext);
	free(c->sprev);
	free(c->bitmap);
	free(c->sid);
	free(c->pin);
	free(c->prev);
	free(c->next);
	free(c->slen);
	free(c->stamp);
	free(c->sflag);
	free(c->sfl);
	free(c->sclu);
	free(c->sfreq);
	free(c->gring);
	free(c->ix.keys);
	free(c->ix.vals);
}

void ibpi_cache_storage_reset(ibp_cache_t *c)
{
	uint64_t ns = c->nslabs;
	/* Every slab back in the pool, in order. */
	for (uint64_t s = 0; s < ns; s++) {
		c->scls[s] = SLAB_FREE;
		c->snslots[s] = c->sused[s] = c->spinned[s] = 0;
		c->snext[s] = s + 1 < ns ? (uint32_t)(s + 1) : NIL;
		c->sprev[s] = s ? (uint32_t)(s - 1) : NIL;
	}
	c->free_slab = 0;
	c->nfree_slabs = ns;
	memset(c->bitmap, 0, ns * c->words * sizeof(uint64_t));
	for (uint32_t i = 0; i < c->nclasses; i++) {
		cache_class_t *k = &c->cls[i];
		uint64_t sb = k->slot_bytes;
		memset(k, 0, sizeof(*k));
		k->slot_bytes = sb;
		k->partial = k->head[0] = k->head[1] = NIL;
	}
	c->hist_total = 0;
	for (uint64_t g = 0; g < c->nslots; g++)
		c->sid[g] = KEY_EMPTY;
	memset(c->pin, 0, c->nslots * sizeof(uint32_t));
	memset(c->sflag, 0, c->nslots);
	memset(c->sfreq, 0, c->nslots);
	c->tick = 0;
	c->gseq = 0;
	for (uint64_t i = 0; i < c->ix.cap; i++)
		c->ix.keys[i] = KEY_EMPTY;
	c->ix.used = c->ix.tombs = 0;
}

uint32_t ibpi_cache_class_of(const ibp_cache_t *c, uint64_t len)
{
	/* the first class whose slot holds len (slot sizes ascend) */
	uint32_t lo = 0, hi = c->raw;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (c->cls[mid].slot_bytes >= len)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

uint8_t *ibpi_cache_slot_ptr(const ibp_cache_t *c, uint64_t g)
{
	uint64_t s = g / c->spp, b = g % c->spp;
	return c->mem + s * c->slab_bytes + b * c->cls[c->scls[s]].slot_bytes;
}

/* Doubly linked lists of slabs through snext/sprev: the free pool and
 * each class's slabs that have a free slot. */
static void slab_unlink(ibp_cache_t *c, uint32_t *head, uint32_t s)
{
	uint32_t p = c->sprev[s], n = c->snext[s];
	if (p != NIL)
		c->snext[p] = n;
	else
		*head = n;
	if (n != NIL)
		c->sprev[n] = p;
	c->snext[s] = c->sprev[s] = NIL;
}

static void slab_push(ibp_cache_t *c, uint32_t *head, uint32_t s)
{
	c->sprev[s] = NIL;
	c->snext[s] = *head;
	if (*head != NIL)
		c->sprev[*head] = s;
	*head = s;
}

static void slab_assign(ibp_cache_t *c, uint32_t s, uint32_t cls)
{
	cache_class_t *k = &c->cls[cls];
	uint64_t n = slab_len(c, s) / k->slot_bytes;
	if (n > c->spp)
		n = c->spp;
	c->scls[s] = (uint16_t)cls;
	c->snslots[s] = (uint32_t)n;
	c->sused[s] = 0;
	memset(c->bitmap + (uint64_t)s * c->words, 0, c->words * sizeof(uint64_t));
	k->slabs++;
	k->slots += n;
	slab_push(c, &k->partial, s);
}

uint64_t ibpi_cache_slot_take(ibp_cache_t *c, uint32_t cls)
{
	cache_class_t *k = &c->cls[cls];
	uint32_t s = k->partial;
	if (s == NIL) {
		/* A slab from the pool that holds at least one slot of this class
		 * (only the last, shorter slab may not). */
		for (s = c->free_slab; s != NIL; s = c->snext[s])
			if (slab_len(c, s) >= k->slot_bytes)
				break;
		if (s == NIL)
			return UINT64_MAX;
		slab_unlink(c, &c->free_slab, s);
		c->nfree_slabs--;
		slab_assign(c, s, cls);
	}
	uint64_t *bm = c->bitmap + (uint64_t)s * c->words;
	uint64_t n = c->snslots[s];
	for (uint64_t w = 0; w < c->words; w++) {
		if (bm[w] == UINT64_MAX)
			continue;
		uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(~bm[w]);
		if (b >= n)
			break;
		bm[w] |= 1ull << (b % 64);
		k->used++;
		if (++c->sused[s] == n)
			slab_unlink(c, &k->partial, s);
		return (uint64_t)s * c->spp + b;
	}
	return UINT64_MAX; /* not reached: a partial slab has a free bit */
}

void ibpi_cache_slot_release(ibp_cache_t *c, uint64_t g)
{
	uint32_t s = (uint32_t)(g / c->spp);
	uint64_t b = g % c->spp;
	cache_class_t *k = &c->cls[c->scls[s]];
	c->bitmap[(uint64_t)s * c->words + b / 64] &= ~(1ull << (b % 64));
	if (c->sused[s] == c->snslots[s])
		slab_push(c, &k->partial, s);
	c->sused[s]--;
	k->used--;
	c->sid[g] = KEY_EMPTY;
	c->sflag[g] = 0;
}

uint32_t ibpi_cache_borrow_end(const ibp_cache_t *c, uint32_t cls)
{
	if (c->pool || cls >= c->raw)
		return cls + 1;
	uint32_t j = cls + 1;
	while (j < c->nclasses && c->cls[j].slot_bytes * 2 <= c->cls[cls].slot_bytes * 3)
		j++;
	return j;
}

void ibpi_cache_targets(ibp_cache_t *c)
{
	double total = 0;
	uint64_t nhist = 0;
	c->targets_stale = 0;
	for (uint32_t i = 0; i < c->nclasses; i++) {
		total += (double)c->cls[i].hist * (double)c->cls[i].slot_bytes;
		nhist += c->cls[i].hist != 0;
		c->cls[i].target = 0;
	}
	if (total <= 0)
		return;
	if (nhist > c->nslabs && !c->pool) {
		/* Fewer slabs than classes in use (a tiny cache): no class is
		 * promised a slab. Each slab goes to the class whose slots the most
		 * admissions not yet served could use (its own and those of the
		 * smaller classes that borrow its slots: ibpi_cache_alloc_slot), so a
		 * few slabs serve rows of several classes instead of the classes
		 * taking them from each other. */
		uint64_t left[IBP_CACHE_MAX_CLASSES];
		for (uint64_t t = 0; t < c->nslabs; t++) {
			if (t % nhist == 0)
				for (uint32_t i = 0; i < c->nclasses; i++)
					left[i] = c->cls[i].hist;
			uint32_t best = NIL;
			uint64_t bw = 0;
			for (uint32_t j = 0; j < c->nclasses; j++) {
				uint64_t w = 0;
				for (uint32_t i = 0; i <= j; i++)
					if (ibpi_cache_borrow_end(c, i) > j)
						w += left[i];
				if (w > bw) {
					bw = w;
					best = j;
				}
			}
			if (best == NIL)
				break;
			c->cls[best].target++;
			for (uint32_t i = 0; i <= best; i++)
				if (ibpi_cache_borrow_end(c, i) > best)
					left[i] = 0;
		}
		return;
	}
	for (uint32_t i = 0; i < c->nclasses; i++) {
		cache_class_t *k = &c->cls[i];
		if (!k->hist)
			continue;
		double share = (double)k->hist * (double)k->slot_bytes / total;
		k->target = (uint64_t)(share * (double)c->nslabs);
		if (!k->target)
			k->target = 1;
	}
}

int ibpi_cache_slab_steal(ibp_cache_t *c, uint32_t cls, void (*evict)(ibp_cache_t *, uint64_t), uint64_t max_evict,
		     int any)
{
	uint32_t d = NIL;
	uint64_t over = 0;
	for (uint32_t i = 0; i < c->nclasses; i++) {
		cache_class_t *k = &c->cls[i];
		if (i != cls && k->slabs > k->target && k->slabs - k->target > over) {
			over = k->slabs - k->target;
			d = i;
		}
	}
	if (d == NIL && !any)
		return 0;
	/* The donor's least used slab with nothing pinned (any: of any other
	 * class, the least used). */
	uint32_t best = NIL;
	for (int pass = 0; pass < 2 && best == NIL; pass++) {
		/* any: when every slab of the donor is pinned, look at all classes */
		if (pass && (!any || d == NIL))
			break;
		for (uint64_t s = 0; s < c->nslabs; s++)
			if (c->scls[s] != SLAB_FREE && c->scls[s] != cls && (pass || d == NIL || c->scls[s] == d) &&
			    !c->spinned[s] && slab_len(c, s) >= c->cls[cls].slot_bytes &&
			    (best == NIL || c->sused[s] < c->sused[best]))
				best = (uint32_t)s;
	}
	if (best == NIL || c->sused[best] > max_evict)
		return 0;
	d = c->scls[best];
	uint64_t *bm = c->bitmap + (uint64_t)best * c->words;
	/* A pool evicts the slab's blocks least recently used first (its
	 * callers see victims in policy order); the cache in slot order. */
	while (c->pool && c->sused[best]) {
		uint64_t g = UINT64_MAX;
		for (uint64_t w = 0; w < c->words; w++)
			for (uint64_t m = bm[w]; m; m &= m - 1) {
				uint64_t x = (uint64_t)best * c->spp + w * 64 + (uint64_t)__builtin_ctzll(m);
				if (g == UINT64_MAX || c->stamp[x] < c->stamp[g])
					g = x;
			}
		evict(c, g);
	}
	for (uint64_t w = 0; w < c->words; w++)
		while (bm[w]) {
			uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(bm[w]);
			evict(c, (uint64_t)best * c->spp + b); /* clears the bit */
		}
	cache_class_t *k = &c->cls[d];
	slab_unlink(c, &k->partial, best); /* empty now, so on the partial list */
	k->slabs--;
	k->slots -= c->snslots[best];
	slab_assign(c, best, cls);
	c->st.slab_moves++;
	return 1;
}

/* ---- index ---- */

uint64_t ibpi_cache_hash(int64_t id)
{
	return ibp_slab_hash(id); /* the GPU table's hash (cuda/slab_cache.h) */
}

uint64_t ibpi_cache_ix_find(const cache_index_t *ix, int64_t id)
{
	uint64_t m = ix->cap - 1;
	/* Past tombstones to the first empty key, so a key is found wherever a
	 * later insert put it (the cuCollections #606 trap). */
	for (uint64_t p = ibpi_cache_hash(id) & m, i = 0; i < ix->cap; p = (p + 1) & m, i++) {
		int64_t k = ix->keys[p];
		if (k == id)
			return p;
		if (k == KEY_EMPTY)
			return UINT64_MAX;
	}
	return UINT64_MAX;
}

static void ix_put(int64_t *keys, uint64_t *vals, uint64_t cap, int64_t id, uint64_t val)
{
	uint64_t m = cap - 1, p = ibpi_cache_hash(id) & m;
	while (keys[p] >= 0)
		p = (p + 1) & m;
	keys[p] = id;
	vals[p] = val;
}

/* Into new arrays of `cap` positions: drops the tombstones. 0, or -1
 * (the index unchanged) when they cannot be allocated. */
static int ix_rehash(cache_index_t *ix, uint64_t cap)
{
	int64_t *k = malloc(cap * sizeof(int64_t));
	uint64_t *v = malloc(cap * sizeof(uint64_t));
	if (!k || !v) {
		free(k);
		free(v);
		return -1;
	}
	for (uint64_t i = 0; i < cap; i++)
		k[i] = KEY_EMPTY;
	for (uint64_t i = 0; i < ix->cap; i++)
		if (ix->keys[i] >= 0)
			ix_put(k, v, cap, ix->keys[i], ix->vals[i]);
	free(ix->keys);
	free(ix->vals);
	ix->keys = k;
	ix->vals = v;
	ix->cap = cap;
	ix->tombs = 0;
	return 0;
}

int ibpi_cache_ix_insert(cache_index_t *ix, int64_t id, uint64_t val)
{
	if ((ix->used + ix->tombs + 1) * 8 > ix->cap * 7) {
		/* Rehash, doubled while over half full: drops the tombstones. */
		uint64_t cap = ix->cap;
		while ((ix->used + 1) * 2 > cap)
			cap *= 2;
		if (ix_rehash(ix, cap) && ix->used + ix->tombs + 2 > ix->cap)
			return -1; /* no memory and no empty position left */
	}
	uint64_t m = ix->cap - 1, p = ibpi_cache_hash(id) & m;
	while (ix->keys[p] >= 0) /* first tombstone or empty key: the caller checked `id` is absent */
		p = (p + 1) & m;
	if (ix->keys[p] == KEY_TOMB)
		ix->tombs--;
	ix->keys[p] = id;
	ix->vals[p] = val;
	ix->used++;
	return 0;
}

void ibpi_cache_ix_erase(cache_index_t *ix, uint64_t pos)
{
	ix->keys[pos] = KEY_TOMB;
	ix->used--;
	ix->tombs++;
}
