/* cache_internal.h - the slab cache's storage (slabs, classes, bitmaps),
 * index and per-class policy state, shared by slab.c (storage and index)
 * and cache.c (policies and the API). Everything here is plain data so
 * the GPU cache can mirror it; all decisions are deterministic. */
#ifndef IBP_CACHE_INTERNAL_H
#define IBP_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "cuda/slab_cache.h"
#include "ibp/cache.h"

/* Declared for users in ibp/unstable.h (the library does not include it). */
#ifdef __cplusplus
extern "C" {
#endif
ibp_status_t ibp_cache_gather_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				    void *out, const int64_t *out_rows, int32_t *status, uint32_t flags,
				    int64_t *evicted, uint64_t evicted_cap, uint64_t *n_evicted, void *stream);
ibp_status_t ibp_cache_prefetch_evict(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				      int64_t *evicted, uint64_t evicted_cap, uint64_t *n_evicted, void *stream);
#ifdef __cplusplus
}
#endif

/* ---- 64-bit index entry: cuda/slab_cache.h, shared with the GPU kernels ----
 * A GHOST entry (an id S3-FIFO evicted lately; host index only) keeps its
 * ring sequence in the low 62 bits instead. */
#define ENT_FILLING IBP_SLAB_FILLING
#define ENT_READY IBP_SLAB_READY
#define ENT_GHOST IBP_SLAB_GHOST
#define ENT_STATE(e) IBP_SLAB_STATE(e)
#define ENT_CLASS(e) IBP_SLAB_CLASS(e)
#define ENT_LEN(e) IBP_SLAB_LEN(e)
#define ENT_SLAB(e) IBP_SLAB_SLAB(e)
#define ENT_SLOT(e) IBP_SLAB_SLOT(e)
#define ENT_MAKE(st, cls, len, slab, slot) IBP_SLAB_ENTRY(st, cls, len, slab, slot)
#define ENT_GHOST_SEQ(e) ((e) & ((1ull << 62) - 1))
#define CACHE_MAX_SLABS (1ull << 17)
#define CACHE_MAX_SPP (1ull << 13) /* slots per slab */

#define KEY_EMPTY IBP_SLAB_KEY_EMPTY
#define KEY_TOMB IBP_SLAB_KEY_TOMB
#define NIL UINT32_MAX
#define SLAB_FREE 0xFFFFu

/* slot flags (sflag) */
#define SF_FILLING 1u
#define SF_ZOMBIE 2u  /* invalidated while pinned: freed at the last unpin */
#define SF_MAIN 4u    /* S3-FIFO: in the main queue */
#define SF_REF 8u     /* CLOCK reference bit */
#define SF_DECODED 16u /* the slot holds the decoded row */

typedef struct cache_index {
	int64_t *keys;
	uint64_t *vals;
	uint64_t cap, used, tombs;
} cache_index_t;

typedef struct cache_class {
	uint64_t slot_bytes;
	uint64_t slabs, slots, used;
	uint32_t partial; /* first slab of this class with a free slot (list through snext) */
	uint32_t head[2]; /* policy lists: [0] CLOCK/LRU ring or S3-FIFO small, [1] S3-FIFO main */
	uint64_t count[2];
	uint64_t hist, target;
	uint64_t hits, insertions, evictions, bytes_resident;
} cache_class_t;

/* Where the evictions of the call allocating now go (set under the lock
 * for its allocation phase): ids[0..n) when ids is not NULL, at most cap
 * evictions in all (UINT64_MAX: no limit), and fn (the slab pool's
 * callback) for each, with the row's bytes still in place. */
typedef struct cache_sink {
	int64_t *ids;
	uint64_t cap, n;
	void (*fn)(void *user, int64_t id, const void *data, uint64_t len);
	void *user;
} cache_sink_t;

/* One batch of a gather or prefetch: what it asks for, where its results
 * go, and the first failure (the phases of cache_pass.c take it whole). */
typedef struct cache_req {
	const int64_t *ids;      /* n ids */
	uint64_t n;
	uint64_t nrows;          /* the store's rows (ids must be below) */
	int gather;              /* 0: a prefetch */
	void *out;               /* gather on the host: the rows (NULL: none here) */
	const int64_t *out_rows; /* NULL: request k to row k */
	int32_t *status;         /* NULL: none */
	uint32_t flags;          /* IBP_CACHE_NO_ADMIT */
	uint64_t base;           /* position of ids[0] in the whole call */
	ibp_status_t first;      /* the first failure (IBP_OK: none yet) ... */
	uint64_t first_pos;      /* ... at this position of the call */
} cache_req_t;

typedef struct cache_ws {
	int busy;
	int64_t *uid;     /* unique ids of a pass */
	uint64_t *ufirst; /* first request of each */
	uint32_t *rep;    /* request -> unique (NIL: none) */
	uint32_t *ucnt;   /* requests of each unique id */
	int64_t *dkey;    /* dedupe table, dcap entries */
	uint32_t *dval;
	uint64_t dcap;
	uint8_t *ukind;
	int32_t *ustat;
	const uint8_t **usrc;
	uint64_t *ulen, *ug, *uclen;
	uint8_t *ufl, *uclu;
	uint32_t *ucls;
	uint8_t *scratch; /* one row */
} cache_ws_t;

struct ibp_cache {
	ibp_cache_opts_t o;
	uint64_t rb, step, slab_bytes, nslabs, spp; /* spp: slot capacity of a slab (smallest class) */
	uint32_t nclasses, raw;                     /* raw = nclasses - 1 */
	uint8_t *mem;
	/* slabs */
	uint16_t *scls;
	uint32_t *snslots, *sused, *spinned, *snext, *sprev;
	uint64_t *bitmap, words; /* words per slab */
	uint32_t free_slab;      /* pool of unassigned slabs (list through snext) */
	uint64_t nfree_slabs;
	cache_class_t cls[IBP_CACHE_MAX_CLASSES];
	uint64_t hist_total;
	/* 1: the class targets are recomputed before their next read (a pool
	 * allocation sets it: only one that finds no free slot reads them) */
	int targets_stale;
	/* slots, g = slab * spp + slot */
	uint64_t nslots;
	int64_t *sid;
	uint32_t *pin, *prev, *next, *slen;
	uint64_t *stamp;
	uint8_t *sflag, *sfl, *sclu, *sfreq;
	uint64_t tick;
	cache_index_t ix;
	int64_t *gring;
	uint64_t gcap, gseq;
	/* binding */
	const ibp_store_t *store;
	/* threads */
	pthread_mutex_t mu;
	pthread_cond_t ws_cv;
	cache_ws_t *ws;
	uint32_t nws;
	ibp_cache_stats_t st;
	uint64_t meta_bytes;
	cache_sink_t *sink; /* evictions of the allocating call, or NULL */
	int pool;           /* a slab pool (pool.c): memory from ibp_pinned_alloc, no ghosts, and a class
			       without a free slot may take any unpinned slab */
	int pinned;         /* pool: the slabs are pinned host memory */
	struct cache_dev *dev; /* a GPU cache's device side (cache_cuda.c), or NULL */
};

/* ---- slab.c: storage and index ---- */
ibp_status_t ibpi_cache_storage_init(ibp_cache_t *c);
void ibpi_cache_storage_free(ibp_cache_t *c);
void ibpi_cache_storage_reset(ibp_cache_t *c);
/* Class of a row stored in `len` bytes (compressed), or c->raw. */
uint32_t ibpi_cache_class_of(const ibp_cache_t *c, uint64_t len);
/* A free slot of class `cls` from its slabs or the free pool: global slot
 * index, or UINT64_MAX when none (no eviction here). */
uint64_t ibpi_cache_slot_take(ibp_cache_t *c, uint32_t cls);
void ibpi_cache_slot_release(ibp_cache_t *c, uint64_t g);
uint8_t *ibpi_cache_slot_ptr(const ibp_cache_t *c, uint64_t g);
/* Classes [cls + 1, end) a row of class `cls` may borrow a free slot of:
 * larger ones (the raw class too) with slots at most 1.5x its own; a
 * cache, not a pool (end = cls + 1). */
uint32_t ibpi_cache_borrow_end(const ibp_cache_t *c, uint32_t cls);
/* Recomputes every class's slab target from the histogram (clears
 * targets_stale). */
void ibpi_cache_targets(ibp_cache_t *c);
/* Moves one slab to `cls` from the class furthest above its target (with
 * `any`, from any other class), its rows first evicted through `evict`:
 * the donor's least used slab with nothing pinned, if it holds at most
 * `max_evict` rows. Nonzero on success. */
int ibpi_cache_slab_steal(ibp_cache_t *c, uint32_t cls, void (*evict)(ibp_cache_t *, uint64_t), uint64_t max_evict,
		     int any);

/* ---- cache_policy.c: policy and slot life, shared with pool.c (under the lock) ---- */
/* A slot of class `cls` for a new row: free, a slab from the pool or from
 * a class above its share, else a policy victim (reported to c->sink).
 * UINT64_MAX when none. */
uint64_t ibpi_cache_alloc_slot(ibp_cache_t *c, uint32_t cls);
void ibpi_cache_policy_insert(ibp_cache_t *c, uint64_t g, int was_ghost);
void ibpi_cache_policy_hit(ibp_cache_t *c, uint64_t g);
/* Out of the policy and the index; freed now, or at the last unpin. */
void ibpi_cache_drop_slot(ibp_cache_t *c, uint64_t g, int ghost);
void ibpi_cache_pin_slot(ibp_cache_t *c, uint64_t g);
void ibpi_cache_unpin_slot(ibp_cache_t *c, uint64_t g);
void ibpi_cache_hist_add(ibp_cache_t *c, uint32_t cls);
/* meta_bytes with the index as it is now (it grows). */
uint64_t ibpi_cache_meta_bytes(const ibp_cache_t *c);

/* ---- cache_pass.c: the phases of a pass (cache_cuda.c drives them too) ----
 * `gather` 0: a prefetch. Kinds of a pass's unique ids: */
enum { K_HIT = 1, K_MISS, K_ADMIT, K_ALLOC, K_FILLED, K_BADFILL, K_ERR };
/* 1. Validates requests (q->status and q->first for the bad ones; q->out not
 * NULL: out-of-range rows zero-filled there) and deduplicates: returns the
 * unique ids (w->uid, ufirst, ucnt; w->rep per request, NIL: none). */
uint64_t ibpi_cache_pass_dedupe(ibp_cache_t *c, cache_ws_t *w, cache_req_t *q);
/* 2. Probes the index (locked): K_HIT (pinned, w->ug), K_ADMIT or K_MISS. */
void ibpi_cache_pass_probe(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, int admit);
/* A miss's class and kept length from w->ulen/ufl (packed: its bytes can be
 * kept compressed); ufl 0xFF marks a row kept decoded. */
void ibpi_cache_miss_class(ibp_cache_t *c, cache_ws_t *w, uint64_t u, int packed);
/* 4. Slots for the K_ADMIT misses (locked): K_ALLOC (FILLING, pinned) or
 * K_MISS; evictions go to `sink`. */
void ibpi_cache_pass_alloc(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, cache_sink_t *sink);
/* 6. Publishes K_FILLED rows, drops K_BADFILL ones and hits whose decode
 * failed (w->ustat), unpins, and counts (locked). */
void ibpi_cache_pass_publish(ibp_cache_t *c, cache_ws_t *w, uint64_t n, uint64_t nu, int gather, uint64_t srows,
			uint64_t sbytes, uint64_t copied, uint64_t hit_bytes);
/* One host pass over at most max_batch requests (q), every phase above;
 * statuses and the first failure as dedupe reports them. */
void ibpi_cache_pass(ibp_cache_t *c, cache_ws_t *w, ibp_store_t *store, cache_req_t *q, cache_sink_t *sink);

uint64_t ibpi_cache_hash(int64_t id);
/* Position of `id` or UINT64_MAX. */
uint64_t ibpi_cache_ix_find(const cache_index_t *ix, int64_t id);
/* Inserts `id` (known absent), rehashing first when needed (into new
 * arrays, doubled while over half full: the host index grows). -1 when
 * no memory and the table has no room: the caller skips the row. */
int ibpi_cache_ix_insert(cache_index_t *ix, int64_t id, uint64_t val);
void ibpi_cache_ix_erase(cache_index_t *ix, uint64_t pos);

#endif /* IBP_CACHE_INTERNAL_H */
