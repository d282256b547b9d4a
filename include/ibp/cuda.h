/* ibp/cuda.h - the GPU data path: training counters, batched encode, and
 * gather + decode of rows straight from pinned host memory or device memory.
 *
 * Every kernel is the twin of a CPU function and produces exactly what the
 * CPU produces (docs/FORMAT.md; docs/GPU.md describes the kernels):
 *   ibp_train_count_cuda  <-> ibp_train_count   (bit counters)
 *   ibp_train_mask_cuda   <-> ibp_train_mask    (byte-level Mask/Bitval at T)
 *   ibp_encode_batch_cuda <-> ibp_encode_batch  (same offsets, flags, clusters, bytes)
 *   ibp_gather_cuda       <-> ibp_decode_row on rows picked by id (same bytes,
 *                             same accept/reject decision per row)
 *   ibp_store_embedding_bag_cuda <-> ibp_store_embedding_bag (float32 bitwise
 *                             equal, 16-bit outputs too; ibp/bag.h)
 *
 * Conventions.
 * - A `stream` is a cudaStream_t passed as void * so that C users need no
 *   CUDA headers; NULL is the legacy default stream. Calls marked "async"
 *   only enqueue work on it and return; their results are ready once the
 *   stream reaches that point. Argument errors are returned synchronously;
 *   per-row problems found by a kernel go to the per-row status array.
 * - "Device-accessible" memory is device memory of the current device, or
 *   pinned host memory mapped into the device's address space
 *   (ibp_pinned_alloc, cudaHostAlloc(cudaHostAllocMapped), cudaHostRegister
 *   with cudaHostRegisterMapped). Kernels read such host memory directly
 *   over PCIe (zero-copy).
 * - No call allocates device memory behind the caller's back: object
 *   creation allocates (and says so), per-call scratch is a caller
 *   workspace whose size is queried first.
 * - A CUDA failure returns IBP_ERR_CUDA with CUDA's message in
 *   ibp_last_error(). Without a usable GPU (no device, no driver, or a
 *   build without CUDA) calls return IBP_ERR_NO_DEVICE; ibp_cuda_built()
 *   tells the two apart.
 * - Sizes, counts and row ids are 64-bit everywhere.
 * - Objects are bound to the device that was current when they were made;
 *   call them with that device current (IBP_ERR_INVALID_ARG otherwise).
 */
#ifndef IBP_CUDA_H
#define IBP_CUDA_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "alloc.h"
#include "codec.h"
#include "store.h"
#include "bag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- availability ------------------------------------------------------ */

/* 1 if this libibp was built with the CUDA kernels, 0 if not. */
int ibp_cuda_built(void);

/* Number of usable CUDA devices in *count (0 when none).
 * Returns IBP_OK when at least one exists, IBP_ERR_NO_DEVICE otherwise (no
 * device, no driver, or built without CUDA; the detail says which). */
ibp_status_t ibp_cuda_device_count(int *count);

/* ---- device memory, for callers without CUDA headers ------------------- */

/* cudaMalloc of `bytes` (0 gives NULL and IBP_OK) on the current device.
 * Errors: IBP_ERR_INVALID_ARG, IBP_ERR_CUDA (out of memory included),
 * IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_cuda_malloc(uint64_t bytes, void **out);

/* cudaFree (waits for the device); NULL is a no-op. */
void ibp_cuda_free(void *p);

/* cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream): any mix of
 * host and device pointers. Async (synchronous for pageable host memory,
 * as CUDA defines). Errors: IBP_ERR_INVALID_ARG, IBP_ERR_CUDA,
 * IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_cuda_memcpy(void *dst, const void *src, uint64_t bytes, void *stream);

/* cudaMemsetAsync(dst, value, bytes, stream). */
ibp_status_t ibp_cuda_memset(void *dst, int value, uint64_t bytes, void *stream);

/* Waits for `stream`; returns IBP_ERR_CUDA with CUDA's message if work on
 * it failed. */
ibp_status_t ibp_cuda_sync(void *stream);

/* ---- the codec on the device ------------------------------------------- */

/* A codec's tables (Mask, Bitval, static bit offsets) copied to the current
 * device. Immutable; usable from any stream. */
typedef struct ibp_cuda_codec ibp_cuda_codec_t;

/* Copies `codec` (which may be freed afterwards) to the current device.
 * Allocates device memory (cudaMalloc) and synchronises `stream`.
 * Errors: IBP_ERR_INVALID_ARG, IBP_ERR_NOMEM, IBP_ERR_CUDA,
 * IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_cuda_codec_create(const ibp_codec_t *codec, void *stream, ibp_cuda_codec_t **out);

/* Frees a device codec (waits for the device to finish with it first);
 * NULL is a no-op. */
void ibp_cuda_codec_free(ibp_cuda_codec_t *c);

/* The host codec this device codec was made from (an internal copy, valid
 * until ibp_cuda_codec_free). */
const ibp_codec_t *ibp_cuda_codec_host(const ibp_cuda_codec_t *c);

/* ---- training (twins of src/bitpack/train.c) ----------------------------------- */

/* counts[8*p + b] = number of the n rows rows[idx[i]] (idx NULL: rows
 * 0..n-1) with bit b of byte p set; counts has 8 * row_bytes entries and is
 * overwritten. `rows` (n rows of row_bytes bytes, or the rows idx names) is
 * device-accessible; `idx` (n entries, each a row index) and `counts` are
 * device memory. The same counts as the CPU's ibp_train_count. Async on
 * `stream`; no workspace. Errors: IBP_ERR_INVALID_ARG, IBP_ERR_CUDA,
 * IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_train_count_cuda(const void *rows, uint64_t row_bytes, const uint64_t *idx,
				  uint64_t n, uint64_t *counts, void *stream);

/* Byte-level Mask/Bitval (row_bytes bytes each, device memory) of n rows at
 * threshold t in [0.5, 1] from device `counts`, with the CPU's rule
 * (ibp_train_mask): bit invariant 1 when count >= need, invariant 0 when
 * n - count >= need, need = the smallest integer >= t*n computed exactly as
 * the CPU does; n = 0 gives empty masks. ibp_codec_create then pads them
 * to chunks as training does. Async. Errors: IBP_ERR_INVALID_ARG,
 * IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_train_mask_cuda(const uint64_t *counts, uint64_t n, uint64_t row_bytes,
				 double t, uint8_t *mask, uint8_t *bitval, void *stream);

/* ---- encoding (twin of ibp_encode_batch) ------------------------------- */

/* Workspace bytes that ibp_encode_batch_cuda / ibp_encode_sizes_cuda /
 * ibp_encode_write_cuda need for `nrows` rows with codec `c` (device memory,
 * 256-byte aligned, reusable across calls on one stream). */
ibp_status_t ibp_encode_workspace_cuda(const ibp_cuda_codec_t *c, uint64_t nrows, uint64_t *bytes);

/* Encodes nrows rows (back to back at device-accessible `rows`) into the
 * packed layout, byte for byte what ibp_encode_batch writes: row i goes to
 * dst[offsets[i], offsets[i+1]), offsets has nrows + 1 entries (offsets[0]
 * = 0, offsets[nrows] = total), flags[i] gets the mode and, with more than
 * one cluster, clusters[i] the cluster ibp_choose_cluster would pick
 * (`clusters` may be NULL only for one cluster; it is zero-filled then).
 * `dst` is device-accessible; offsets, flags, clusters are device-accessible.
 * dst_cap must be >= ibp_batch_bound(codec, nrows) (IBP_ERR_BUFFER_TOO_SMALL
 * otherwise; use the two calls below to size dst exactly). Async; the
 * total size is offsets[nrows] once the stream gets there.
 * Errors: IBP_ERR_INVALID_ARG, IBP_ERR_BUFFER_TOO_SMALL (dst or workspace),
 * IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_encode_batch_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   void *dst, uint64_t dst_cap, uint64_t *offsets, uint8_t *flags,
				   uint8_t *clusters, void *workspace, uint64_t workspace_bytes,
				   void *stream);

/* The first half of ibp_encode_batch_cuda: fills offsets, flags and clusters
 * (as above) without writing any row. Async. */
ibp_status_t ibp_encode_sizes_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   uint64_t *offsets, uint8_t *flags, uint8_t *clusters,
				   void *workspace, uint64_t workspace_bytes, void *stream);

/* The second half: writes every row as offsets/flags/clusters (from
 * ibp_encode_sizes_cuda on the same rows) say. The kernel never writes
 * outside dst[0, dst_cap): a row that would end past dst_cap is not
 * written (size dst_cap >= offsets[nrows]). Async. */
ibp_status_t ibp_encode_write_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   const uint64_t *offsets, const uint8_t *flags,
				   const uint8_t *clusters, void *dst, uint64_t dst_cap,
				   void *workspace, uint64_t workspace_bytes, void *stream);

/* ---- the device store and gathers -------------------------------------- */

/* Where a store's payload (the encoded rows) lives. */
typedef enum ibp_cuda_payload {
	IBP_CUDA_PAYLOAD_MAPPED = 0,      /* borrowed: pinned mapped host memory (zero-copy) */
	IBP_CUDA_PAYLOAD_DEVICE = 1,      /* borrowed: device memory of the current device */
	IBP_CUDA_PAYLOAD_COPY_PINNED = 2, /* copied from host memory into ibp_pinned_alloc memory */
	IBP_CUDA_PAYLOAD_COPY_DEVICE = 3, /* copied from host memory into device memory */
	IBP_CUDA_PAYLOAD_REGISTER = 4     /* host memory pinned in place (cudaHostRegister,
					     mapped, read-only) for the store's life */
} ibp_cuda_payload_t;

/* Which gather kernel a store uses (for tuning and tests). */
typedef enum ibp_cuda_kernel {
	IBP_CUDA_KERNEL_AUTO = 0,  /* warp per row when every row encodes to at most 4 KiB (a packed
				      store's longest row; an inplace store's row size), else block per row */
	IBP_CUDA_KERNEL_WARP = 1,  /* one warp per row, rows staged in shared memory */
	IBP_CUDA_KERNEL_BLOCK = 2, /* one thread block per row */
	IBP_CUDA_KERNEL_DIRECT = 3 /* block per row decoding straight from the payload,
				      no staging (what rows too large for shared memory use) */
} ibp_cuda_kernel_t;

/* What a device store is built from: a codec and the arrays of
 * ibp_encode_batch, of a container (ibp_container_payload & co.) or of a
 * CPU store. Two layouts, as in ibp/container.h:
 *   packed  (offsets != NULL): row i is payload[offsets[i], offsets[i+1])
 *           and must use exactly that extent;
 *   inplace (offsets == NULL): row i starts at i * row_bytes, occupies at
 *           most row_bytes, and bytes after its own length are ignored. */
typedef struct ibp_cuda_store_desc {
	const ibp_codec_t *codec;       /* copied; may be freed after creation */
	const void *payload;            /* encoded rows; where it lives: payload_kind */
	uint64_t payload_bytes;         /* packed: >= offsets[nrows]; inplace: >= nrows * row_bytes */
	const uint64_t *offsets;        /* host, nrows + 1 entries, or NULL (inplace); copied */
	const uint8_t *flags;           /* host, nrows; copied to the device */
	const uint8_t *clusters;        /* host, nrows, or NULL (all cluster 0); copied */
	uint64_t nrows;
	ibp_cuda_payload_t payload_kind;
} ibp_cuda_store_desc_t;

typedef struct ibp_cuda_store ibp_cuda_store_t;

/* Builds a device store: the codec tables, offsets, flags and cluster ids go
 * to device memory, the payload stays where payload_kind says (borrowed
 * payloads must outlive the store and stay unchanged). Packed offsets are
 * validated here (offsets[0] = 0, non-decreasing, offsets[nrows] <=
 * payload_bytes: IBP_ERR_CORRUPT otherwise), so gathers never read outside
 * the payload; flags, cluster ids and row bytes are checked per row by the
 * gathers, as the CPU decoder does. For the inplace layout a kernel finds
 * each row's own length once here, so that gathers read only those bytes.
 * Allocates device memory and synchronises `stream`.
 * Without a usable GPU: IBP_ERR_NO_DEVICE and *out = NULL, unless `flags`
 * has IBP_CUDA_HOST_FALLBACK: then the store is kept in ordinary host
 * memory (MAPPED/REGISTER payloads are borrowed as plain host memory, COPY_*
 * payloads are copied; DEVICE payloads cannot fall back), *out is valid,
 * the call still returns IBP_ERR_NO_DEVICE with a detail saying so, and
 * ibp_gather_cuda on it decodes on the CPU (ibp_store_embedding_bag_cuda
 * pools on the CPU).
 * Errors: IBP_ERR_INVALID_ARG, IBP_ERR_CORRUPT, IBP_ERR_NOMEM, IBP_ERR_CUDA,
 * IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_cuda_store_create(const ibp_cuda_store_desc_t *desc, unsigned flags, void *stream,
				   ibp_cuda_store_t **out);

/* A device store from a CPU store (ibp/store.h): its codec and its
 * container's arrays (either layout), payload placed as `payload_kind`
 * says: COPY_PINNED, COPY_DEVICE or REGISTER for a store opened from a file
 * (its payload is ordinary memory), MAPPED only if the container image was
 * opened from pinned memory (ibp_container_open_memory). The CPU store must
 * outlive a store that borrows its payload (MAPPED, REGISTER). `flags` and
 * errors as ibp_cuda_store_create, plus IBP_ERR_UNSUPPORTED for a container
 * of another codec (exp, FP8). */
ibp_status_t ibp_cuda_store_from_store(const ibp_store_t *s, ibp_cuda_payload_t payload_kind,
				       unsigned flags, void *stream, ibp_cuda_store_t **out);

/* Frees a store (waits for the device first; unregisters / frees what the
 * store owns); NULL is a no-op. */
void ibp_cuda_store_free(ibp_cuda_store_t *s);

/* 1 if the store is on a GPU, 0 for a host-fallback store. */
int ibp_cuda_store_on_device(const ibp_cuda_store_t *s);

uint64_t ibp_cuda_store_nrows(const ibp_cuda_store_t *s);
uint64_t ibp_cuda_store_row_bytes(const ibp_cuda_store_t *s);
/* The store's device codec (NULL for a host-fallback store). */
const ibp_cuda_codec_t *ibp_cuda_store_codec(const ibp_cuda_store_t *s);


/* Number of rows that failed (any non-OK row status) in gathers on this
 * store since the previous call, and resets the count. Synchronises
 * `stream`. Useful when gathers ran without a status array. */
ibp_status_t ibp_cuda_store_errors(ibp_cuda_store_t *s, uint64_t *count, void *stream);

/* Gathers and decodes rows: for k in [0, n), row ids[k] of the store goes
 * to output row out_rows[k] (out_rows NULL: row k) of `out`, whose rows are
 * row_bytes bytes apart. ids may come in any order and repeat. Every output
 * row written equals what ibp_decode_row gives for that row on the CPU.
 * `status` (NULL allowed) gets one ibp_status_t per request: IBP_OK;
 * IBP_ERR_OUT_OF_RANGE for an id outside [0, nrows) (the output row is
 * zero-filled); IBP_ERR_CORRUPT for a row the CPU decoder would reject or
 * whose length differs from its extent (zero-filled); IBP_ERR_INVALID_ARG
 * for a negative out_rows[k] (nothing written). No read ever leaves the
 * row's extent [offsets[id], offsets[id+1]) (inplace: its own length); no
 * kernel hangs on bad bytes.
 * ids, out_rows, status: device memory (or mapped); out: device-accessible.
 * Output rows must not overlap between requests (distinct out_rows).
 * Compressed bytes are read by the warps themselves from the payload (pinned
 * host memory over PCIe, or device memory) in aligned, bounded transfers,
 * double-buffered through shared memory; docs/GPU.md has the details.
 * Async on `stream`; no workspace, no allocation.
 * Host-fallback store: runs on the CPU now, all pointers are host memory,
 * `stream` is ignored.
 * Errors (synchronous): IBP_ERR_INVALID_ARG, IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_gather_cuda(const ibp_cuda_store_t *store, const int64_t *ids, uint64_t n,
			     void *out, const int64_t *out_rows, int32_t *status, void *stream);

/* Uncompressed gather, the baseline and the path for raw tensors: row
 * ids[k] of the nrows x row_bytes array at device-accessible `src` (e.g.
 * pinned mapped host memory) goes to output row out_rows[k] (NULL: k) of
 * `out`. Warps read 128-byte-aligned pieces, never outside the row. status
 * as ibp_gather_cuda (NULL allowed). Async. Errors: IBP_ERR_INVALID_ARG,
 * IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_gather_plain_cuda(const void *src, uint64_t nrows, uint64_t row_bytes,
				   const int64_t *ids, uint64_t n, void *out,
				   const int64_t *out_rows, int32_t *status, void *stream);

/* ---- embedding bags (twin of ibp_store_embedding_bag, ibp/bag.h) ------- */

/* nn.EmbeddingBag's forward over a device store: bag b pools the rows
 * ids[offsets[b]] .. ids[offsets[b + 1] - 1] of `s` (sum, weighted sum,
 * mean or max; `flags`, `weights`, `padding_idx` and the arithmetic exactly
 * as ibp_store_embedding_bag, so every output equals the CPU's bit for bit,
 * NaN payloads aside: a GPU's arithmetic returns its canonical NaN)
 * into out + b * row_bytes. `dtype` is the rows' element type (the device
 * store does not know it): IBP_DTYPE_F32, IBP_DTYPE_F16 or IBP_DTYPE_BF16;
 * row_bytes must be whole elements. `ids` (n_ids of id_dtype, IBP_DTYPE_I32
 * or IBP_DTYPE_I64), `offsets` (n_bags + 1), `weights` (NULL or n_ids
 * floats), `out` (n_bags rows) and `status` (NULL or n_bags entries) are
 * device memory or pinned mapped host memory (their device address).
 * One warp per bag decodes the bag's rows in id order into shared memory
 * and accumulates in float32; no [n_ids, dim] array is written, nothing is
 * allocated.
 * Per bag (the kernel decides; async): status[b] = IBP_OK;
 * IBP_ERR_OUT_OF_RANGE for a bag with an id outside [0, nrows);
 * IBP_ERR_INVALID_ARG for offsets[b] < 0, offsets[b + 1] < offsets[b] or
 * offsets[b + 1] > n_ids; IBP_ERR_CORRUPT for a row the decoder rejects.
 * A failed bag's output row is zeros (as is a bag with no rows pooled) and
 * counts once in ibp_cuda_store_errors. Offsets in pinned host memory are
 * also read and checked by the host before the launch (so they must be
 * ready when this is called).
 * Async on `stream`; the store's device must be current. Any number of
 * threads may call this on one store at once (distinct outputs).
 * Errors (synchronous): IBP_ERR_INVALID_ARG (NULL store, offsets, out, or
 * ids with n_ids > 0; bad mode, flags or id_dtype; weights with MEAN or
 * MAX; padding_idx < -1 or >= nrows; row bytes not whole elements; a
 * pageable host pointer; a pointer not aligned to its element size;
 * pinned offsets that decrease or pass n_ids; the
 * store made on another device), IBP_ERR_UNSUPPORTED (another dtype, or
 * rows too large for a warp's row and float32 accumulator in shared
 * memory), IBP_ERR_CUDA, IBP_ERR_NO_DEVICE.
 * Host-fallback store (IBP_CUDA_HOST_FALLBACK, both builds): the bags are
 * pooled on the CPU now, on the calling thread, by ibp_store_embedding_bag's
 * engine (bit for bit its results); every pointer is host memory, `stream`
 * is ignored, offsets are checked before any work (IBP_ERR_INVALID_ARG),
 * and ids and rows per bag with the status and error count above. */
ibp_status_t ibp_store_embedding_bag_cuda(const ibp_cuda_store_t *s, ibp_bag_mode_t mode, unsigned flags,
					  const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids,
					  const int64_t *offsets, uint64_t n_bags, const float *weights,
					  int64_t padding_idx, ibp_dtype_t dtype, void *out, int32_t *status,
					  void *stream);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CUDA_H */
