/* ibp/kv.h - KV-cache offload: the block format (a layer's K and V rows
 * encoded and packed into one slab-pool block) and the device streams that
 * encode and decode whole layers on a GPU (ibp.torch.KVOffloader). */
#include "slab_pool.h" /* before the guard: see ibp/slab_pool.h */
#ifndef IBP_KV_H
#define IBP_KV_H

#include <stdint.h>
#include "codec.h"
#include "status.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- KV offload block format (ibp.torch.KVOffloader, IBP codec) ----
 * A block is a 12-byte header (u32 len0, u32 len1 little-endian, u8 flag0,
 * u8 flag1, u8 cluster0, u8 cluster1) then row 0's (K) and row 1's (V)
 * encoded payloads. Both functions are pure and thread-safe. */
#define IBP_KV_BLOCK_HEADER 12

/* Packs an encoded batch of 2 * nblocks rows (ibp_encode_batch's payload,
 * offsets[2 * nblocks + 1], flags and clusters (NULL: zero) per row), block
 * b = rows 2b and 2b + 1, back to back into stage[0..stage_bytes);
 * block_offsets[0..nblocks] (nblocks + 1 entries) get each block's start
 * and the end. Errors: IBP_ERR_INVALID_ARG (NULL, decreasing offsets, a row
 * over 4 GiB), IBP_ERR_BUFFER_TOO_SMALL (stage too small); nothing is
 * written on error. */
ibp_status_t ibp_kv_pack_blocks(const uint8_t *payload, const uint64_t *offsets, const uint8_t *flags,
				const uint8_t *clusters, uint64_t nblocks, uint8_t *stage, uint64_t stage_bytes,
				uint64_t *block_offsets);

/* Validates an (untrusted) block of `bytes` bytes and reads its header:
 * len[2] the rows' payload lengths, flags[2], clusters[2]. Errors:
 * IBP_ERR_INVALID_ARG (NULL), IBP_ERR_CORRUPT (shorter than the header, or
 * the lengths do not add up to the block). */
ibp_status_t ibp_kv_block_parse(const uint8_t *block, uint64_t bytes, uint64_t len[2], uint8_t flags[2],
				uint8_t clusters[2]);

/* Indexes a stage of nblocks stored blocks back to back (block b is
 * stage[block_offsets[b] .. block_offsets[b + 1]), nblocks + 1 entries) for
 * a staged decode: the host-side validation of the load path, run on the
 * (untrusted) bytes BEFORE anything is copied to a device or decoded. Every
 * block is checked with ibp_kv_block_parse first; then row r = 2b (K) and
 * 2b + 1 (V) get row_start[r] (its payload's offset in the stage), row_len[r],
 * flags[r] and clusters[r] (each array 2 * nblocks entries). Errors:
 * IBP_ERR_INVALID_ARG (NULL, decreasing offsets or past stage_bytes),
 * IBP_ERR_CORRUPT (a block that does not parse: the detail names it);
 * nothing is written on error. Pure and thread-safe. */
ibp_status_t ibp_kv_index_blocks(const uint8_t *stage, uint64_t stage_bytes, const uint64_t *block_offsets,
				 uint64_t nblocks, uint64_t *row_start, uint64_t *row_len, uint8_t *flags,
				 uint8_t *clusters);

/* ---- KV offload through a device (ibp.torch.KVOffloader(device="cuda")) ----
 * A layer's paged cache is vLLM's [2, num_blocks, block_size, heads,
 * head_size]: rows of row_bytes bytes, K of block d is row d and V is row
 * num_blocks + d. An ibp_kv_stream_t is one layer's state: its codec on the
 * device, a CUDA stream and staging buffers reused across calls. Stores
 * encode blocks on the device and copy them asynchronously into pool slots
 * (pinned host memory, the KV block format above; a RAW block is its K row
 * then its V row, 2 * row_bytes bytes); loads validate the slots' headers on
 * the host, copy the payloads to a device stage and decode them straight
 * into the destination blocks with the staged gather kernel. One call is in
 * flight per stream: each call first finishes the previous one (a stream
 * sync); ibp_kv_stream_wait finishes the last. Slots being written or read
 * stay pinned in their pool (not evictable, freed at the last unpin) until
 * then. Calls on one stream must not overlap (the caller serialises them);
 * different streams are independent. With IBP_CUDA_HOST_FALLBACK and no
 * GPU, or with IBP_KV_HOST, the same orchestration runs with the CPU twins
 * on host memory (all pointers host memory, every call complete on return;
 * IBP rows decode straight from their slots, with the staged kernel's
 * rules). */
typedef struct ibp_kv_stream ibp_kv_stream_t;

/* Block kinds of ibp_kv_encode_cuda / ibp_kv_decode_cuda. */
#define IBP_KV_IBP 0u /* the layer's IBP codec, KV block format */
#define IBP_KV_RAW 1u /* uncompressed: K row then V row */
#define IBP_KV_EXP 2u /* one exponent-codec block (ibp/exp.h) of the K then V elements, default options */

/* ibp_kv_stream_create flag: run on the CPU on host memory even where a GPU
 * could be used (the CPU path of a KV offloader); returns IBP_OK. */
#define IBP_KV_HOST 2u

/* Creates a layer's stream state for rows of row_bytes bytes of `dtype`
 * elements. `codec` (copied; NULL: no IBP blocks) must have row_bytes bytes
 * per row; EXP blocks need dtype IBP_DTYPE_BF16, F16 or F32 (another dtype:
 * RAW and IBP blocks only).
 * `stream` is a cudaStream_t (NULL: the default stream), unused on the host.
 * flags: 0, IBP_CUDA_HOST_FALLBACK (ibp/alloc.h) or IBP_KV_HOST (always the
 * CPU: the host orchestration, IBP_OK). Without a usable GPU:
 * IBP_ERR_NO_DEVICE and *out = NULL, unless IBP_CUDA_HOST_FALLBACK: then
 * *out is valid (host memory, CPU codecs) and the call still returns
 * IBP_ERR_NO_DEVICE with a detail saying so. Errors: IBP_ERR_INVALID_ARG,
 * IBP_ERR_NOMEM, IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_kv_stream_create(const ibp_codec_t *codec, uint64_t row_bytes, ibp_dtype_t dtype, unsigned flags,
				  void *stream, ibp_kv_stream_t **out);

/* Finishes the stream's work and frees it; NULL is a no-op. */
void ibp_kv_stream_free(ibp_kv_stream_t *s);

/* 1 if the stream runs on a GPU, 0 for the host fallback (or NULL). */
int ibp_kv_stream_on_device(const ibp_kv_stream_t *s);

/* The sigma of the stream's later IBP_KV_EXP stores (ibp_exp_opts_t.sigma):
 * 0 (the default) measures each block's mean square, as ibp_exp_encode's
 * defaults do; sigma > 0 takes the window from it and skips that pass
 * (about 40% of a block's encode on the CPU). Any sigma round-trips; one
 * far from the blocks' own only costs ratio (escapes, or raw blocks).
 * Errors: IBP_ERR_INVALID_ARG (NULL stream, sigma negative or not finite).
 * Not thread-safe with the stream's other calls. */
ibp_status_t ibp_kv_stream_set_exp_sigma(ibp_kv_stream_t *s, double sigma);

/* Stores blocks block_ids[0..n) (host array, each in [0, num_blocks)) of
 * the layer cache `kv` (2 * num_blocks rows; device memory, host memory for
 * the host fallback) into new blocks of `pool` as `kind` (IBP_KV_IBP needs
 * the codec, IBP_KV_EXP a float dtype): handles[b] and bytes[b] (host arrays, n entries) get each
 * block's pool handle and stored length. Encodes on the device (gathering
 * the K and V rows into a device buffer first), synchronises once to learn
 * the sizes, allocates every slot (the pool may evict), writes the headers
 * and queues the copies into the slots; `kv` must stay unchanged until the
 * copies are done (the next call or ibp_kv_stream_wait). On the host the
 * same steps run in batches of about 4 MiB of rows (the stream's
 * workspace stays that small whatever n), but for EXP blocks: those go in
 * one pass on every core, each thread encoding a block in its own stage and
 * copying it into its slot, the slots taken in block order (the handles and
 * evictions of a serial store). All or nothing:
 * on error no block is kept and handles are -1. Errors: IBP_ERR_INVALID_ARG
 * (NULL, a block id out of range, IBP_KV_IBP without a codec, unknown
 * kind), IBP_ERR_NOMEM (the pool has no room: nothing evictable), and the
 * previous call's IBP_ERR_CUDA, IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_kv_encode_cuda(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, const void *kv, uint64_t num_blocks,
				const int64_t *block_ids, uint64_t n, unsigned kind, int64_t *handles,
				uint64_t *bytes);

/* Loads n stored blocks into the layer cache `kv` (2 * num_blocks rows, as
 * above): block k is handles[k] of pools[k], of kinds[k] (NULL: all
 * IBP_KV_IBP), and goes to block dst_blocks[k] (distinct, in [0,
 * num_blocks)); all arrays are host arrays. Every slot is pinned and its
 * header checked on the host before anything is queued: IBP_ERR_OUT_OF_RANGE
 * (a handle evicted or removed), IBP_ERR_CORRUPT (a header that does not
 * parse, a row longer than row_bytes, a RAW block not 2 * row_bytes long,
 * an EXP block whose header is not of 2 rows of dtype or not its length),
 * IBP_ERR_INVALID_ARG (NULL, bad or repeated destination, unknown kind)
 * leave `kv` untouched. A row whose payload the decoder rejects is
 * zero-filled and reported by ibp_kv_stream_wait (IBP_ERR_CORRUPT).
 * EXP blocks are decoded together with one status: if any fails, all the
 * call's EXP rows are zeroed and counted. Errors also: IBP_ERR_NOMEM, the
 * previous call's IBP_ERR_CUDA, IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_kv_decode_cuda(ibp_kv_stream_t *s, ibp_slab_pool_t *const *pools, const int64_t *handles,
				const uint8_t *kinds, uint64_t n, void *kv, uint64_t num_blocks,
				const int64_t *dst_blocks);

/* Finishes the stream's last call: synchronises the stream, unpins its
 * slots and returns IBP_ERR_CORRUPT (the detail counts them) if rows of
 * loads since the previous wait failed to decode (those rows are zero);
 * the count is reset. Errors: IBP_ERR_INVALID_ARG (NULL), IBP_ERR_CUDA,
 * IBP_ERR_CORRUPT. */
ibp_status_t ibp_kv_stream_wait(ibp_kv_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif /* IBP_KV_H */
