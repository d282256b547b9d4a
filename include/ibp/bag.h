/* ibp/bag.h - embedding bags pooled straight from a compressed store.
 *
 * ibp_store_embedding_bag is nn.EmbeddingBag's forward (PyTorch's
 * torch.nn.functional.embedding_bag) over the rows of an ibp_store_t: for
 * every bag it reads the bag's rows and reduces them (sum, weighted sum,
 * mean or max) into the bag's output row. Gather and pooling are fused: no
 * [indices, dim] array of gathered rows exists at any time. Each thread
 * decodes the rows of its next ids (about 64 KiB of rows, across bag
 * boundaries) with the store's own gather pipeline into a chunk of scratch
 * that stays in cache, and adds (or maxes) them into the bags' output rows
 * from there; the gather reads rows ahead as ibp_store_gather does
 * (IBP_GATHER_BATCH, IBP_GATHER_PREFETCH and IBP_GATHER_STAGE are read
 * when the store is opened; ibp_store_gather). Exp-rows stores
 * (IBP_CODEC_EXP_ROWS) decode each row on its own straight where it is
 * pooled, the rows ahead prefetched in bursts as the gather does; rows of
 * 64, 128, ... 1,024 elements in sum and mean bags without weights are
 * widened and added as they are decoded (AVX-512, or AVX2 and F16C; no
 * decoded row is written), the same float32 operations in the same order
 * (IBP_EXP_BAG_FUSED=0, read per call, turns that off). Exp and fp8
 * stores decode a block per miss instead.
 * Bags are cut into ranges of about equal numbers of ids, four per thread,
 * which the threads claim in turn: the calling thread and the store's
 * worker pool (the one its gathers use, started with the store's first
 * pooled job; no thread is started per call).
 *
 * Arithmetic is PyTorch's CPU kernel's, so float32 results are bitwise
 * equal to nn.EmbeddingBag on the same rows: sum accumulates in float32 in
 * id order starting from +0 (0 + r0 + r1 + ...); weighted sum is
 * fma(w, r, acc) in id order from +0 (PyTorch's fbgemm kernel), or with
 * IBP_BAG_UNFUSED_WEIGHTS acc + (w * r) with both operations rounded
 * (PyTorch's kernel for bags with a padding_idx); mean is that sum divided by the
 * number of rows pooled; max keeps the first of equal values (a later row
 * replaces the running value only when it is greater). float16 and
 * bfloat16 rows accumulate in float32 and are rounded (to nearest even)
 * once at the end; mean rounds the sum first and then the quotient, as
 * PyTorch does for float16 (PyTorch's bfloat16 path rounds differently:
 * results can differ from it by a few bfloat16 units in the last place).
 */
#ifndef IBP_BAG_H
#define IBP_BAG_H

#include <stdint.h>
#include "status.h"
#include "types.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reduction of a bag (values pinned). */
typedef enum ibp_bag_mode {
	IBP_BAG_SUM = 0,  /* sum of the rows; with weights, sum of weight * row */
	IBP_BAG_MEAN = 1, /* sum / number of rows pooled */
	IBP_BAG_MAX = 2   /* elementwise maximum */
} ibp_bag_mode_t;

/* Flags of ibp_store_embedding_bag. */
#define IBP_BAG_UNFUSED_WEIGHTS 1u /* weighted rows as acc + (w * r), rounded twice, not fma */

/* Pools the rows of `s` into `n_bags` bags.
 *
 * Bag b holds the rows ids[offsets[b]] .. ids[offsets[b + 1] - 1]:
 * `offsets` has n_bags + 1 non-decreasing entries, offsets[n_bags] <=
 * n_ids (ids outside [offsets[0], offsets[n_bags]) are not read). `ids`
 * are `n_ids` row ids of dtype `id_dtype`, IBP_DTYPE_I32 or IBP_DTYPE_I64,
 * each in [0, nrows) (duplicates allowed). `weights` (NULL or n_ids
 * float32 values, one per id) scale the rows; only with IBP_BAG_SUM.
 * `padding_idx` is a row id whose occurrences are skipped (not pooled, not
 * counted by MEAN), or -1 for none.
 *
 * `out` receives n_bags rows of the store's row size and dtype (float32,
 * float16 or bfloat16), bag b at out + b * row_bytes. A bag with no rows
 * pooled (empty, or only padding) gives zeros.
 *
 * `nthreads`: 0 = all the store's threads (its CPUs), 1 = the calling
 * thread only (no pool, no lock), n = at most n. With more than one, the
 * call runs on the store's pool, one pooled job (gather or bag) per store
 * at a time: concurrent callers on one store take turns.
 * Every argument, offset and id is checked before any work starts.
 * `flags`: 0 or IBP_BAG_UNFUSED_WEIGHTS.
 * Returns IBP_ERR_INVALID_ARG for NULL s, ids (n_ids > 0), offsets or out
 * (n_bags > 0), a bad mode, flag or id_dtype, weights with MEAN or MAX, offsets
 * that decrease or pass n_ids, padding_idx < -1 or >= nrows, or
 * nthreads < 0; IBP_ERR_OUT_OF_RANGE for an id outside [0, nrows) (the
 * detail names its position and value); IBP_ERR_UNSUPPORTED for a store
 * whose dtype is not float32, float16 or bfloat16; IBP_ERR_NOMEM when the
 * per-thread scratch (one row, plus a float32 row for 16-bit dtypes, plus
 * one block for exp and fp8 containers) cannot be allocated;
 * IBP_ERR_CORRUPT when a row fails to decode (out is then partly written).
 * Rows of exp and fp8 containers are read by decoding their block into the
 * thread's scratch (kept while the following ids fall in the same block),
 * so those codecs suit bags only with small blocks; IBP and exp-rows
 * containers decode row by row (exp rows: the codec made for bags,
 * ibp_pack_exp_rows). Any number of threads may call this on one store at once
 * (pooled calls take turns, see nthreads).
 */
ibp_status_t ibp_store_embedding_bag(const ibp_store_t *s, ibp_bag_mode_t mode, unsigned flags,
				     const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets,
				     uint64_t n_bags, const float *weights, int64_t padding_idx, void *out,
				     int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* IBP_BAG_H */
