/* ibp/slab_pool.h - the slab cache's allocator as a pool of variable-size
 * blocks (the KV offloader's store): create, alloc, pin, put, get, remove,
 * stats. It shares the cache's policies and class statistics
 * (ibp/cache.h), which it includes. */
#include "cache.h" /* before the guard: ibp/cache.h includes this header back */
#ifndef IBP_SLAB_POOL_H
#define IBP_SLAB_POOL_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- slab pool: the same allocator for variable-size blocks ----
 *
 * "One slab allocator, two uses": a pool of variable-size blocks (such as
 * compressed KV-cache blocks) in host memory, carved by the cache's
 * allocator (slabs of size classes, class_step apart up to the largest
 * block, a bitmap per slab, slabs moved between classes as the size
 * histogram drifts) and managed by its policies. The memory is pinned and
 * mapped (ibp_pinned_alloc: a GPU reads it at the same address) when CUDA
 * can pin it, otherwise ordinary host memory (stats.pinned_memory says
 * which); IBP_SLAB_POOL_HOST asks for host memory.
 *
 * A block is named by a handle: 0, 1, 2, ... in allocation order, never
 * reused, so a stale handle is reported, never aliased. When a block does
 * not fit, the policy picks an unpinned victim of its size class (or a
 * whole slab of another class: every block on it is evicted), and
 * opts.on_evict(user, handle, data, len) is called for each victim before
 * its slot is reused: under the pool's lock, with the bytes still in
 * place; the callback must not call the pool. A freed or evicted slot is
 * reused by the next block of its class. Blocks being written or read are
 * pinned (a per-slot count) and never evicted. Thread-safe: every call
 * takes the pool's lock for its bookkeeping only; copies run outside it.
 * No call allocates except ibp_slab_pool_create. */
typedef struct ibp_slab_pool ibp_slab_pool_t;

/* Called for each evicted block (see above). */
typedef void (*ibp_slab_pool_evict_fn)(void *user, int64_t handle, const void *data, uint64_t len);

/* opts.flags */
#define IBP_SLAB_POOL_HOST 1u /* ordinary host memory even where CUDA could pin it */

/* Options. Always initialise with ibp_slab_pool_opts_default(). */
typedef struct ibp_slab_pool_opts {
	uint64_t size; /* sizeof this struct: set by ibp_slab_pool_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	uint64_t capacity_bytes;  /* bytes of slabs (required, at least one slot of max_block_bytes) */
	uint64_t max_block_bytes; /* largest block (required, 1..IBP_CACHE_MAX_ROW_BYTES) */
	uint64_t slab_bytes;      /* 0 = auto, as ibp_cache_opts_t */
	uint64_t class_step;      /* 0 = auto, as ibp_cache_opts_t */
	ibp_cache_policy_t policy; /* victims; IBP_CACHE_STATIC: never evict (a full pool refuses) */
	uint32_t flags;           /* IBP_SLAB_POOL_HOST */
	ibp_slab_pool_evict_fn on_evict; /* NULL: none */
	void *user;               /* passed to on_evict */
} ibp_slab_pool_opts_t;

typedef struct ibp_slab_pool_stats {
	uint64_t allocs;          /* blocks allocated (ibp_slab_pool_put included) */
	uint64_t frees;           /* blocks removed by ibp_slab_pool_remove */
	uint64_t evictions;       /* blocks evicted to make room */
	uint64_t failed;          /* allocations refused (IBP_ERR_NOMEM) */
	uint64_t reads;           /* pins (ibp_slab_pool_get included) */
	uint64_t slab_moves;      /* slabs moved between classes (their blocks evicted) */
	/* state now */
	uint64_t blocks;          /* blocks held */
	uint64_t bytes;           /* their exact lengths */
	uint64_t slot_bytes_used; /* their slot sizes: <= capacity_bytes always */
	uint64_t pinned_blocks;   /* blocks pinned now (being written or read) */
	uint64_t capacity_bytes, max_block_bytes, slab_bytes, nslabs, free_slabs;
	uint64_t meta_bytes;      /* index and per-slot metadata, outside capacity_bytes */
	uint64_t class_step;
	int64_t next_handle;      /* the handle the next allocation gets */
	uint32_t nclasses;
	int32_t pinned_memory;    /* 1: the slabs are pinned, mapped host memory; 0: ordinary host memory */
} ibp_slab_pool_stats_t;

/* Defaults: capacity 0 and max_block_bytes 0 (to be set), policy default
 * (S3-FIFO), everything else 0 (auto, pinned, no callback). */
void ibp_slab_pool_opts_default(ibp_slab_pool_opts_t *o);

/* Creates a pool: allocates its memory (capacity_bytes) and metadata.
 * Errors: IBP_ERR_INVALID_ARG (NULL, capacity 0 or below one slot of the
 * largest block, max_block_bytes 0 or too large, class_step, policy or
 * flags as ibp_cache_create), IBP_ERR_NOMEM. Thread-safe. */
ibp_status_t ibp_slab_pool_create(const ibp_slab_pool_opts_t *opts, ibp_slab_pool_t **out);

/* Frees the pool and its memory; NULL is a no-op. No call may be running. */
void ibp_slab_pool_free(ibp_slab_pool_t *p);

/* Allocates a block of `len` bytes (0..max_block_bytes), evicting victims
 * when full: *handle names it, *ptr is its memory (uninitialised). The
 * block is pinned: write it, then ibp_slab_pool_unpin(p, *ptr). Errors:
 * IBP_ERR_INVALID_ARG (NULL, len > max_block_bytes), IBP_ERR_NOMEM (no
 * room: everything that could make room is pinned, or the policy is
 * static and the pool is full; a refused allocation evicts nothing).
 * *handle = -1 and *ptr = NULL on error. */
ibp_status_t ibp_slab_pool_alloc(ibp_slab_pool_t *p, uint64_t len, int64_t *handle, void **ptr);

/* Pins block `handle` for reading or rewriting in place (a use, for the
 * policy): *ptr its memory, *len (NULL allowed) its length. Unpin with
 * ibp_slab_pool_unpin(p, *ptr). IBP_ERR_OUT_OF_RANGE when there is no such
 * block (evicted, removed, never allocated). */
ibp_status_t ibp_slab_pool_pin(ibp_slab_pool_t *p, int64_t handle, void **ptr, uint64_t *len);

/* Drops one pin of the block at `ptr` (from _alloc or _pin). A removed
 * block's slot is freed at its last unpin. IBP_ERR_INVALID_ARG when ptr is
 * not a pinned block of this pool. */
ibp_status_t ibp_slab_pool_unpin(ibp_slab_pool_t *p, const void *ptr);

/* alloc + copy of data[0..len) + unpin. Errors as ibp_slab_pool_alloc
 * (and NULL data with len > 0). */
ibp_status_t ibp_slab_pool_put(ibp_slab_pool_t *p, const void *data, uint64_t len, int64_t *handle);

/* Copies block `handle` into dst[0..cap) (a use, for the policy); *len
 * (NULL allowed) gets its length. IBP_ERR_OUT_OF_RANGE (no such block),
 * IBP_ERR_BUFFER_TOO_SMALL (cap below the length: nothing copied, *len
 * set). */
ibp_status_t ibp_slab_pool_get(ibp_slab_pool_t *p, int64_t handle, void *dst, uint64_t cap, uint64_t *len);

/* *len = the length of block `handle`: IBP_OK, or IBP_ERR_OUT_OF_RANGE
 * (no such block; no error detail is recorded). Not a use. */
ibp_status_t ibp_slab_pool_size(ibp_slab_pool_t *p, int64_t handle, uint64_t *len);

/* Frees block `handle` (its slot is reused; a pinned block's at its last
 * unpin). IBP_ERR_OUT_OF_RANGE when there is no such block. */
ibp_status_t ibp_slab_pool_remove(ibp_slab_pool_t *p, int64_t handle);

/* ibp_slab_pool_remove of handles[0..n) under one lock: every block present
 * is freed, then IBP_ERR_OUT_OF_RANGE names the first handle that had no
 * block (a repeated handle counts as missing the second time). *removed
 * (NULL allowed) gets the number freed. IBP_ERR_INVALID_ARG for a NULL
 * pool, or NULL handles with n > 0. Thread-safe. */
ibp_status_t ibp_slab_pool_remove_many(ibp_slab_pool_t *p, const int64_t *handles, uint64_t n, uint64_t *removed);

/* Counters and state into *st; `reset` zeroes the counters. */
ibp_status_t ibp_slab_pool_stats(ibp_slab_pool_t *p, ibp_slab_pool_stats_t *st, int reset);

/* Class `cls` (< stats.nclasses) as ibp_cache_class_stats (hits: pins). */
ibp_status_t ibp_slab_pool_class_stats(ibp_slab_pool_t *p, uint32_t cls, ibp_cache_class_stats_t *st);

#ifdef __cplusplus
}
#endif
#endif /* IBP_SLAB_POOL_H */
