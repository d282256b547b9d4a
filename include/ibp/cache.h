/* ibp/cache.h - a slab cache of compressed rows in front of a store.
 *
 * The cache keeps hot rows of one table (an ibp_store_t) still compressed,
 * so the same bytes hold about `ratio` times more rows than a cache of
 * decoded rows. ibp_cache_gather serves each id from the cache (a decode
 * from cache memory) or from the store (a decode of the store's bytes, the
 * PCIe path on a GPU), and admits the misses.
 *
 * Storage. `capacity_bytes` is carved into slabs of `slab_bytes`; each slab
 * serves one size class. Class c (0 <= c < nclasses - 1) holds rows whose
 * compressed length fits its slot (ibp_cache_class_stats().slot_bytes) and
 * not the slot below: with class_step set, slots are (c + 1) * class_step
 * bytes; by default a ladder from 32 bytes, 16 apart up to 128, then about
 * 1.125x apart with gaps of at most the automatic class_step (so a 28-byte
 * row of a 5.7 KB table takes a 32-byte slot, not a 128-byte one); the last class,
 * the raw class, holds decoded rows (row_bytes each): rows stored RAW by the
 * codec, rows whose class slot would exceed raw_threshold of a raw slot,
 * rows of inplace containers and of the exp and fp8 codecs. Each slab has a
 * bitmap of its slots. Slabs go to classes on demand from the free pool;
 * once none is free, classes below their share of the observed (decayed)
 * histogram of admitted bytes take whole slabs from classes above theirs
 * (evicting those slabs' rows), so the split follows the drift. A cache
 * with fewer slabs than classes in use (a budget of a few slabs) gives
 * each slab to the class whose slots the most rows can use, and a row
 * whose class has no free slot may take a free slot (or, with no slab
 * of its own, a policy victim's slot) of a larger class whose slots are at
 * most 1.5x its own; its entry then names that class.
 * An index maps id -> one 64-bit entry (slab, slot, class, exact length,
 * state); a key is never stored twice. Metadata (index, per-slot state) is
 * kept outside capacity_bytes; ibp_cache_stats reports its size. The host
 * index starts sized for capacity / max(256, row_bytes / 4) rows and
 * doubles when filled (16 bytes a position, at most 4 positions per id it
 * holds), so it follows what is resident; per-slot state (36 bytes) and
 * the S3-FIFO ghost ring (8 bytes) are sized for the most slots a slab
 * can have (slab_bytes / smallest slot), times the slabs. A GPU cache's
 * device table is sized for that most (2 positions a slot) and never
 * rehashed, so it cannot overflow.
 *
 * Policy, per size class, separate from storage: IBP_CACHE_CLOCK,
 * IBP_CACHE_S3FIFO (small/main FIFOs and a ghost list of recently evicted
 * ids), IBP_CACHE_LRU (an approximation: the least recently used of a
 * window of 8 candidates), and IBP_CACHE_STATIC (filled by
 * ibp_cache_preload or ibp_cache_prefetch while space is free; gathers never
 * admit and nothing is evicted). docs/BENCHMARKS.md ("Slab cache") compares
 * them; the default is IBP_CACHE_S3FIFO. Every decision is deterministic
 * for a given sequence of calls (single caller).
 *
 * A gather runs in phases: validate and deduplicate ids; probe the index
 * and pin every hit (a per-slot count: a pinned slot is never evicted or
 * reused); decode misses from the store; allocate slots for the misses
 * (evicting unpinned rows of the same class), entered as FILLING, which
 * other callers read as a miss; copy the compressed bytes in; publish
 * (READY); decode the hits; unpin.
 *
 * Where it lives. opts.device = -1: host memory; ibp_cache_gather & co.
 * take host pointers and ignore `stream`. opts.device >= 0: a GPU cache,
 * used with ibp_cache_gather_cuda and a device store (ibp/cuda.h): the
 * host keeps a mirror of the index and slot state that makes every
 * decision (the code above, unchanged), and the device holds the slabs
 * and a copy of the index on which the device steps (probe, erase,
 * insert, gather-from-slab: kernels/slab_cache.cu) replay them; hits are
 * decoded from the slabs by the store's gather kernel, misses straight
 * from the store. Without a usable GPU, IBP_CACHE_HOST_FALLBACK makes the
 * same cache with its table in host memory (the CPU twins of the steps),
 * used with host-fallback stores: that is what the tests run. The device
 * path has run only on the emulator (tests/emu), never on a GPU.
 *
 * Threads: one cache may be used by up to opts.max_callers threads at once
 * (more wait for a free workspace); gathers, prefetches, invalidations and
 * stats of one cache serialise on an internal lock only for their index
 * phases; copies and decodes run in parallel. ibp_cache_free must not race
 * with anything. Calls allocate nothing except ibp_cache_create and
 * ibp_cache_preload (which says so).
 */
#ifndef IBP_CACHE_H
#define IBP_CACHE_H

#include <stdint.h>
#include "status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ibp_cache ibp_cache_t;

typedef enum ibp_cache_policy {
	IBP_CACHE_POLICY_DEFAULT = 0, /* IBP_CACHE_S3FIFO */
	IBP_CACHE_STATIC = 1,
	IBP_CACHE_CLOCK = 2,
	IBP_CACHE_S3FIFO = 3,
	IBP_CACHE_LRU = 4
} ibp_cache_policy_t;

/* opts.flags */
#define IBP_CACHE_UNCOMPRESSED 1u /* keep decoded rows only: one class of exactly row_bytes
				     (the fixed-width cache, the baseline of `ibp cache-sim`) */
#define IBP_CACHE_NO_RAW 2u       /* do not admit rows that would go to the raw class */
#define IBP_CACHE_HOST_FALLBACK 4u /* device >= 0 without a usable GPU: keep the device table in
				      host memory (see ibp_cache_create) */

/* gather flags */
#define IBP_CACHE_ADMIT 0u    /* admit the misses (the default) */
#define IBP_CACHE_NO_ADMIT 1u /* serve misses from the store without admitting them */

/* Most size classes (the raw class included). */
#define IBP_CACHE_MAX_CLASSES 256u
/* Largest row a cache takes (the 24-bit length of an entry). */
#define IBP_CACHE_MAX_ROW_BYTES ((1ull << 24) - 1)

/* Options. Always initialise with ibp_cache_opts_default(). */
typedef struct ibp_cache_opts {
	uint64_t size; /* sizeof this struct: set by ibp_cache_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	uint64_t capacity_bytes; /* bytes of slabs (required, > 0) */
	uint64_t row_bytes;      /* decoded row size of the table (required, 1..IBP_CACHE_MAX_ROW_BYTES) */
	uint64_t slab_bytes;     /* 0 = auto: about capacity / 64 (16 KiB..1 MiB), a whole number (>= 4)
				    of raw slots */
	uint64_t class_step;     /* class granularity, a power of two 16..65536: slots (c + 1) * step;
				    0 = auto: the ladder above (32, 48, .. 128, then ~1.125x apart),
				    gaps at most 128, halved (down to 16) while above raw slot / 16;
				    raised until the classes fit IBP_CACHE_MAX_CLASSES; the smallest
				    slot is raised until a slab has at most 8192 slots. A slab pool
				    with 0 uses the automatic step, without the ladder */
	double raw_threshold;    /* (0, 1]: rows whose class slot would exceed this fraction of the raw
				    slot go to the raw class; default 0.95 */
	uint64_t max_batch;      /* ids one workspace takes per pass (larger calls loop); 0 = 65536 */
	uint32_t max_callers;    /* workspaces = threads served at once; 0 = 4 */
	ibp_cache_policy_t policy;
	uint32_t flags;          /* IBP_CACHE_UNCOMPRESSED, IBP_CACHE_NO_RAW, IBP_CACHE_HOST_FALLBACK */
	int device;              /* -1 = host memory; >= 0: a GPU cache on this CUDA device, which must
				    be the current one */
} ibp_cache_opts_t;

/* Counters since creation (or the last reset), per cache. */
typedef struct ibp_cache_stats {
	uint64_t requests;       /* ids asked for (gather), duplicates included */
	uint64_t hits;           /* requests found READY in the cache */
	uint64_t misses;         /* requests served from the store (in range) */
	uint64_t store_rows;     /* distinct rows read from the store (misses after dedupe, prefetches) */
	uint64_t store_bytes;    /* their stored (compressed) bytes: what crosses PCIe on a GPU */
	uint64_t hit_bytes;      /* stored bytes of the rows served by hits (PCIe bytes saved) */
	uint64_t insertions;     /* rows admitted */
	uint64_t evictions;      /* rows evicted to make room (policy or slab rebalance) */
	uint64_t rejected;       /* misses not admitted: no unpinned victim, NO_RAW, static policy */
	uint64_t invalidations;  /* rows removed by ibp_cache_invalidate */
	uint64_t bytes_copied;   /* bytes written into slots */
	uint64_t slab_moves;     /* slabs moved between classes by rebalancing */
	/* state now */
	uint64_t rows_resident;  /* READY rows */
	uint64_t bytes_resident; /* their exact lengths */
	uint64_t slot_bytes_used;/* their slot sizes: <= capacity_bytes always */
	uint64_t raw_bytes_resident; /* rows_resident * row_bytes: what they hold decoded */
	uint64_t capacity_bytes, slab_bytes, nslabs, free_slabs;
	uint64_t meta_bytes;     /* index (as grown now), per-slot metadata and workspaces, outside
				    capacity_bytes */
	uint64_t class_step;     /* the step in use (auto: the ladder's largest gap) */
	uint32_t nclasses;
} ibp_cache_stats_t;

/* Per size class. */
typedef struct ibp_cache_class_stats {
	uint64_t slot_bytes;     /* bytes of one slot of this class */
	uint64_t slabs, slots, used; /* slabs held, slots in them, slots in use */
	uint64_t hits;           /* gather requests served from this class (as ibp_cache_stats_t.hits) */
	uint64_t insertions, evictions;
	uint64_t bytes_resident; /* exact lengths of the resident rows */
	uint64_t bytes_saved;    /* used * row_bytes - used * slot_bytes: memory saved against decoded rows */
	uint64_t hist;           /* decayed count of admissions asked for (drives the split) */
} ibp_cache_class_stats_t;

/* Defaults: capacity 0 and row_bytes 0 (to be set), policy default,
 * raw_threshold 0.95, device -1, everything else 0 (auto). */
void ibp_cache_opts_default(ibp_cache_opts_t *o);

/* Creates a cache. Allocates the slabs (capacity_bytes), the index and the
 * per-slot metadata (ibp_cache_stats().meta_bytes) and the workspaces.
 * Errors: IBP_ERR_INVALID_ARG (NULL, capacity 0 or below one raw slot,
 * row_bytes 0 or too large, class_step not a power of two in range,
 * raw_threshold outside (0, 1], unknown policy or flag bits, a slab
 * geometry beyond 2^17 slabs or 2^13 slots per slab, device >= 0 past the
 * last device), IBP_ERR_NOMEM.
 * device >= 0 also allocates, on the device: the slabs (capacity_bytes),
 * the index copy (16 bytes x twice the slots, rounded to a power of two),
 * 6 bytes per slot, and per-pass buffers of about max_batch x (largest
 * slot + 80) bytes; in pinned host memory about max_batch x 100 bytes;
 * meta_bytes counts all but the slabs. Errors then also: IBP_ERR_CUDA;
 * IBP_ERR_NO_DEVICE without a usable GPU (no device, no driver, a build
 * without CUDA) and *out NULL, unless opts.flags has
 * IBP_CACHE_HOST_FALLBACK: then *out is a valid cache whose device table
 * lives in host memory (used with host-fallback stores, on the CPU) and the
 * call still returns IBP_ERR_NO_DEVICE with a detail saying so (as
 * ibp_cuda_store_create does). Thread-safe. */
ibp_status_t ibp_cache_create(const ibp_cache_opts_t *opts, ibp_cache_t **out);

/* Frees the cache (and its device memory); NULL is a no-op. No call may be
 * running on it. */
void ibp_cache_free(ibp_cache_t *c);

struct ibp_cuda_store; /* ibp_cuda_store_t, ibp/cuda.h */

/* ibp_cache_gather of a GPU cache (opts.device >= 0) in front of a device
 * store (ibp_cuda_store_create / ibp_cuda_store_from_store): row ids[k] goes
 * to output row out_rows[k] (NULL: k) of `out`, equal to what
 * ibp_gather_cuda and ibp_store_gather give, with the same decisions,
 * counters and statuses as a host cache fed the same calls (see
 * ibp_cache_gather: IBP_OK, IBP_ERR_OUT_OF_RANGE and IBP_ERR_CORRUPT
 * zero-filled, IBP_ERR_INVALID_ARG for a negative out row, nothing
 * written; the first failing status returned after serving the others).
 * Hits are decoded from the device slabs; misses from the store (over PCIe
 * for a pinned payload), and admitted: their compressed bytes copied from
 * the store's payload into their slots (decoded rows from `out`) and
 * published after a fence. Memory: ids, out_rows, status (NULL allowed) and
 * out are device memory (or mapped) of the cache's device; for a
 * host-fallback cache and store all are host memory. Runs on `stream` and
 * synchronises it (twice a pass of max_batch ids: the statuses of the
 * misses decide what is admitted); no allocation. The first call binds the
 * cache to `store` (another store: IBP_ERR_INVALID_ARG until
 * ibp_cache_invalidate(c, NULL, 0)). Errors: IBP_ERR_INVALID_ARG (NULL
 * c/store, NULL ids/out with n > 0, unknown flag bits, a host cache, a
 * host-fallback store with a GPU cache or the reverse, other row_bytes),
 * IBP_ERR_CUDA, IBP_ERR_NO_DEVICE; after a failed device step the cache
 * refuses gathers (IBP_ERR_CUDA) until ibp_cache_invalidate(c, NULL, 0).
 * ibp_cache_gather, _prefetch and _preload refuse a GPU cache
 * (IBP_ERR_INVALID_ARG); ibp_cache_invalidate removes rows from the device
 * table too, and ibp_cache_stats / _class_stats work as for a host cache.
 * Threads: calls on one GPU cache (gathers, invalidations) run one at a
 * time (an internal lock); stats may be read at any time. */
ibp_status_t ibp_cache_gather_cuda(ibp_cache_t *c, const struct ibp_cuda_store *store, const int64_t *ids,
				   uint64_t n, void *out, const int64_t *out_rows, int32_t *status, uint32_t flags,
				   void *stream);

/* Gathers rows: for k in [0, n), row ids[k] of `store` goes to output row
 * out_rows[k] (out_rows NULL: row k) of `out`, rows row_bytes apart, equal
 * to what ibp_store_gather gives. Duplicates are read once. Misses are
 * admitted unless `flags` has IBP_CACHE_NO_ADMIT (or the policy is static).
 * `status` (NULL allowed) gets one status per request: IBP_OK;
 * IBP_ERR_OUT_OF_RANGE for an id outside [0, nrows) (output row zero-
 * filled); IBP_ERR_CORRUPT for a row that fails to decode (zero-filled,
 * not cached); IBP_ERR_INVALID_ARG for a negative out_rows[k] (nothing
 * written). Output rows must be distinct. Returns IBP_OK when every request
 * is, else the status of the first failing one (its position in the detail)
 * after serving all the others. The first gather, prefetch or preload binds
 * the cache to `store`; another store (or one with other row_bytes) is
 * IBP_ERR_INVALID_ARG until ibp_cache_invalidate(c, NULL, 0) empties it.
 * Also IBP_ERR_INVALID_ARG for NULL c/store, or NULL ids/out with n > 0, and
 * unknown flag bits. `stream` is ignored in host memory. No allocation. */
ibp_status_t ibp_cache_gather(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
			      void *out, const int64_t *out_rows, int32_t *status, uint32_t flags,
			      void *stream);


/* Admits rows ids[0..n) that are not resident, as a gather would, without
 * output (a row that fails to decode is skipped, not an error).
 * Under the static policy it fills free space only. Returns IBP_OK, or
 * IBP_ERR_OUT_OF_RANGE / IBP_ERR_INVALID_ARG as ibp_cache_gather (checked
 * before anything is admitted). No allocation. */
ibp_status_t ibp_cache_prefetch(ibp_cache_t *c, ibp_store_t *store, const int64_t *ids, uint64_t n,
				void *stream);


/* The static fill: admits rows in decreasing score[id] (ties: smaller id
 * first) while they fit, for id in [0, n); n must equal the store's rows.
 * Allocates n * 8 bytes of temporary memory (IBP_ERR_NOMEM). Errors as
 * ibp_cache_prefetch, plus IBP_ERR_INVALID_ARG for n != nrows or NULL
 * score. Scores must not be NaN (IBP_ERR_INVALID_ARG). */
ibp_status_t ibp_cache_preload(ibp_cache_t *c, ibp_store_t *store, const float *score, uint64_t n,
			       void *stream);

/* Removes ids[0..n) from the cache (ids not resident are ignored; a row
 * being read is removed from the index now and its slot freed when its
 * last reader unpins it). ids NULL with n 0 removes everything and unbinds
 * the store (then no call may be running). Negative ids are
 * IBP_ERR_OUT_OF_RANGE (nothing removed). */
ibp_status_t ibp_cache_invalidate(ibp_cache_t *c, const int64_t *ids, uint64_t n, void *stream);

/* Copies the counters into *st; `reset` nonzero zeroes the counters (not
 * the state). IBP_ERR_INVALID_ARG for NULL. */
ibp_status_t ibp_cache_stats(ibp_cache_t *c, ibp_cache_stats_t *st, int reset);

/* Class `cls` (< stats.nclasses; the last is the raw class) into *st.
 * IBP_ERR_OUT_OF_RANGE for a class past the end, IBP_ERR_INVALID_ARG for
 * NULL. Counters are reset with ibp_cache_stats(.., 1). */
ibp_status_t ibp_cache_class_stats(ibp_cache_t *c, uint32_t cls, ibp_cache_class_stats_t *st);

/* "static", "clock", "s3fifo", "lru" (the default resolved), or "?". */
const char *ibp_cache_policy_name(ibp_cache_policy_t p);

/* The slab pool (ibp/slab_pool.h) and the KV offload blocks and streams
 * (ibp/kv.h) had their declarations here until they got headers of their
 * own; they are still included, so code that includes ibp/cache.h for them
 * keeps compiling. */
#include "slab_pool.h"
#include "kv.h"

#ifdef __cplusplus
}
#endif
#endif /* IBP_CACHE_H */
