/* ibp/store.h - a read-only CPU store over a `.ibp` container, with gather.
 *
 * A store opens a container (ibp/container.h) and serves random-access
 * reads of decoded rows: ibp_store_gather decodes the rows named by an id
 * array, in request order, into one output buffer, on a persistent pool of
 * worker threads. The pool is created on the first multi-threaded gather
 * (one worker per CPU the opening thread may run on, less the calling
 * thread, which works too) and
 * shut down by ibp_store_close; a gather itself allocates nothing.
 *
 * Rows of IBP containers are located through the container's row index
 * (the compact index of format 1.2 is read in place: a group base plus the
 * lengths of at most 63 rows before it). Every codec is served. Rows of
 * exp-rows containers (IBP_CODEC_EXP_ROWS) are found through their u64
 * row offsets and decoded one by one, each looked up and prefetched
 * IBP_GATHER_PREFETCH positions ahead. Exp and fp8 containers hold blocks of many
 * rows (ibp/container.h): a row is read by decoding its whole block into a
 * scratch buffer ("slot") and copying the row out. The slots are allocated
 * when the store is opened: one per thread that may gather at once, at most
 * one per block, fewer if together they would exceed 1 GiB (at least one),
 * each min(block rows, rows) * row_bytes bytes. A slot keeps the block it
 * last decoded, so ids that fall in the same block as their predecessor
 * cost only a copy; random ids over many blocks cost a block decode each.
 *
 * Threads: accessors may be called from any thread. Gathers from several
 * threads at once are allowed: those with nthreads == 1 run fully in
 * parallel on their callers' threads (for exp/fp8, as long as a slot is
 * free; otherwise they wait for one); multi-threaded ones share the pool
 * and take turns.
 *
 * fork(): a store opened before a fork keeps working in the child (and in
 * its children). Threads are not copied by fork(), so the first call in
 * the child that uses the store starts over with a new pool and new locks
 * (made by that call; found through pthread_atfork, nothing is checked per
 * row). The parent's pool is untouched, and closing the store in the
 * child frees only the child's copy. A fork while another thread of the
 * parent is inside a call on the store is safe for the child too.
 */
#ifndef IBP_STORE_H
#define IBP_STORE_H

#include <stdint.h>
#include "status.h"
#include "types.h"
#include "codec.h"
#include "container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ibp_store ibp_store_t;

/* Opens the container at `path` (flags as ibp_container_open: IBP_OPEN_READ
 * or IBP_OPEN_MMAP, optionally | IBP_OPEN_VERIFY or | IBP_OPEN_TRUSTED)
 * and wraps it in a store. Reads are verified by default: the payload
 * checksums are checked at open, so a gather returns the file's original
 * rows or fails (ibp/container.h, "Verified reads"); IBP_OPEN_TRUSTED
 * skips that for files verified before.
 * Errors are those of ibp_container_open, plus IBP_ERR_NOMEM (also for
 * the block slots of exp/fp8 containers). On success *out owns the store;
 * close it with ibp_store_close. */
ibp_status_t ibp_store_open(const char *path, unsigned flags, ibp_store_t **out);

/* Wraps an already open container. On success the store owns `c` (it is
 * closed by ibp_store_close); on failure the caller still owns it. */
ibp_status_t ibp_store_from_container(ibp_container_t *c, ibp_store_t **out);

/* Stops and joins the worker pool, closes the container and frees the
 * store. NULL is a no-op. No gather may be running on `s`. */
void ibp_store_close(ibp_store_t *s);

/* Decodes rows ids[0..n) into out, row ids[i] at out + i * row_bytes
 * (out holds n * row_bytes bytes). Duplicates are allowed; n == 0 does
 * nothing (ids and out may then be NULL). Every id is checked before any
 * work starts: a negative id or one >= nrows returns IBP_ERR_OUT_OF_RANGE
 * and the detail names its position and value. `nthreads`: 0 = all of the
 * pool (the CPU count), 1 = the calling thread only, larger values are
 * capped at ibp_store_max_threads() (and, for exp/fp8, at the number of
 * slots). Returns IBP_ERR_INVALID_ARG for NULL ids/out with n > 0 or
 * nthreads < 0, IBP_ERR_CORRUPT if a row (or its block) fails to decode
 * (the detail names the position and row; out is then partly written).
 * Allocates no buffers; see the file comment for threading. Each thread
 * looks rows up and prefetches their payload ahead of decoding them: IBP
 * rows in batches (4 rows when the mean encoded row is at most 160 bytes,
 * else 64; IBP_GATHER_BATCH=N in the environment at open sets it, 1 to
 * 64), exp-rows rows in bursts of 8, or 16 where the AVX-512 decoder
 * runs (the next burst's payload, the one after it their offsets; of each
 * row the lines a row with 8 escapes
 * spans, its last line always: IBP_XR_LINES=N at open sets N lines a
 * row, at most 16; 0 every line of it), other rows 8 positions ahead
 * (IBP_GATHER_PREFETCH=N at open sets the distance and the burst, at most
 * 64; 0 turns all look-ahead off). Ids of an IBP
 * store whose rows are at most 4 KiB go in staged batches instead, except
 * runs of at least 64 consecutive ids (or a thread's whole share in
 * order):
 * up to 64 rows looked up, prefetched and their bytes copied into a 16 KiB
 * buffer on the thread's stack (about 21 KiB of stack in all, on the
 * calling thread and the pool's), then decoded from there
 * (IBP_GATHER_STAGE=N at open: N rows a batch, at most 128, for any
 * table; 0 off). An IBP store looks rows up in a row map built
 * at open (about 4.1 bytes per row; docs/FORMAT.md "In-memory row map"),
 * unless it would take more than the larger of 64 MiB and a quarter of the
 * payload (IBP_ROW_MAP_MAX=BYTES at open sets the cap, 0 = no map); a file
 * read into memory is given transparent huge pages (IBP_NO_HUGEPAGES=1
 * leaves them off). */
ibp_status_t ibp_store_gather(ibp_store_t *s, const int64_t *ids, uint64_t n, void *out,
			      int nthreads);

/* Decodes every row, in order, into out (nrows * row_bytes bytes), as
 * ibp_store_gather with ids 0, 1, ..., nrows - 1. Exp/fp8 blocks are
 * decoded straight into `out`, one block per thread, or with all threads
 * inside each block when there are fewer blocks than threads. */
ibp_status_t ibp_store_decode_all(ibp_store_t *s, void *out, int nthreads);

/* Full payload check of the underlying container (ibp_container_verify). */
ibp_status_t ibp_store_verify(const ibp_store_t *s, int nthreads);

/* Accessors. */
uint64_t ibp_store_nrows(const ibp_store_t *s);
uint64_t ibp_store_row_bytes(const ibp_store_t *s);
ibp_dtype_t ibp_store_dtype(const ibp_store_t *s);
unsigned ibp_store_ndim(const ibp_store_t *s);
/* The ndim dimensions (owned by the store). */
const uint64_t *ibp_store_shape(const ibp_store_t *s);
/* The IBP codec (owned by the store); NULL for exp and fp8 containers. */
const ibp_codec_t *ibp_store_codec(const ibp_store_t *s);
/* The container (owned by the store). */
const ibp_container_t *ibp_store_container(const ibp_store_t *s);
/* Most threads a gather uses: the CPUs this process may run on. */
int ibp_store_max_threads(const ibp_store_t *s);

#ifdef __cplusplus
}
#endif
#endif /* IBP_STORE_H */
