/* cache_policy.c - the slab cache's slots and policies (CLOCK, S3-FIFO,
 * sampled LRU, static): the lists, ghosts, eviction, allocation, pins and
 * the size histogram. Called by the passes (cache_pass.c) and the API
 * (cache.c); calls only the storage (slab.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

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
	if (c->targets_stale) /* the targets are read from here on */
		ibpi_cache_targets(c);
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
