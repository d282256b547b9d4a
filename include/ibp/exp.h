/* ibp/exp.h - lossless exponent codec for BF16, FP16 and FP32 tensors.
 *
 * Each value is split into its exponent field and its sign+mantissa bits.
 * A table of 7 exponent field values maps each exponent to a 3-bit code
 * 1..7; code 0 escapes, and the full exponent field is stored aside. A
 * block (the encoding of n elements) has a static part whose size depends
 * only on n (header, per-group escape prefix counts, the three code
 * bit-planes, sign+mantissa at a fixed stride) and a dynamic part (one byte
 * per escaped exponent). Blocks are 128-byte aligned in size; a block that
 * would not shrink is stored raw. docs/CODECS.md specifies every byte.
 *
 * Checksums: a block is written with an XXH3-64 checksum over its header
 * and payload (opts.checksum, the default), which the decoders verify
 * before they interpret anything else in the header (IBP_ERR_CHECKSUM on a
 * mismatch). Formats that protect the block themselves (the .ibp
 * container's section checksums) or keep it in memory for a moment (the
 * collectives' wire messages, the KV offloader's blocks) write it without
 * (opts.checksum = 0; a header flag says which); callers that verified the
 * bytes already skip the check with IBP_EXP_TRUSTED (the *_ext decoders).
 * Blocks of format version 1 (before checksums) still decode.
 *
 * The table comes from sigma (ZipCCL §4.1: the 7-exponent window starting
 * near log2(sigma) - 5.36; the default, with sigma measured as the RMS of
 * the block's finite values), from an exact exponent histogram (top 7), or
 * from the caller. Table mode RANS (opt-in) instead codes each element's
 * exponent byte (FP16: high byte) with interleaved rANS (block mode 2,
 * docs/CODECS.md "rANS block") where that block is smaller than the
 * histogram mode's, and writes the histogram mode's block otherwise.
 * ibp_exp_encode_cuda (table mode RANS too) and ibp_exp_decode_cuda write
 * and read the same blocks.
 *
 * Typical use:
 *   ibp_exp_opts_t o; ibp_exp_opts_default(&o);
 *   uint64_t cap, size; ibp_exp_encode_bound(IBP_DTYPE_BF16, n, &cap);
 *   ibp_exp_encode(src, IBP_DTYPE_BF16, n, &o, dst, cap, &size);
 *   ibp_exp_decode(dst, size, IBP_DTYPE_BF16, n, out, 0);
 *
 * Every function is thread-safe (no shared state). All sizes are 64-bit.
 * Element buffers need no alignment. The *_cuda functions exist in every
 * build; without CUDA they return IBP_ERR_UNSUPPORTED, and without a usable
 * GPU IBP_ERR_NO_DEVICE.
 */
#ifndef IBP_EXP_H
#define IBP_EXP_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IBP_EXP_NCODES 7u      /* table entries (codes 1..7) */
#define IBP_EXP_GROUP 4096u    /* elements per escape group (one prefix count each) */
#define IBP_EXP_ALIGN 128u     /* block sizes and section offsets are multiples of this */
#define IBP_EXP_MAX_ELEMS (1ull << 56)

/* Where the exponent table comes from (stored in the block header). */
typedef enum ibp_exp_table_mode {
	IBP_EXP_TABLE_SIGMA = 0,     /* window derived from sigma (default) */
	IBP_EXP_TABLE_HISTOGRAM = 1, /* 7 most frequent exponents of the block */
	IBP_EXP_TABLE_GIVEN = 2,     /* ibp_exp_opts_t.table */
	IBP_EXP_TABLE_RANS = 3       /* entropy-coded symbols (rANS) when smaller, else HISTOGRAM */
} ibp_exp_table_mode_t;

/* 7 biased exponent field values, strictly ascending, each at most
 * 2^ebits - 1 (ebits = 8 for BF16/FP32, 5 for FP16). Code k is field[k-1]. */
typedef struct ibp_exp_table {
	uint8_t field[7];
} ibp_exp_table_t;

/* Encoder options. Always initialise with ibp_exp_opts_default(). */
typedef struct ibp_exp_opts {
	uint64_t size; /* sizeof this struct: set by ibp_exp_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	ibp_exp_table_mode_t table_mode;
	double sigma;          /* SIGMA mode: > 0 use this sigma; 0 = measure (RMS) per block */
	ibp_exp_table_t table; /* GIVEN mode only */
	int nthreads;          /* CPU worker threads; 0 = every CPU the calling thread may run on */
	int checksum;          /* 1 (default): an XXH3-64 checksum in the header; 0: none (see above) */
} ibp_exp_opts_t;

/* Decoder flags (ibp_exp_decode_ext, ibp_exp_decode_batch_ext). */
#define IBP_EXP_TRUSTED 1u /* skip the checksum: the caller verified the bytes already */

/* Fills `o` with the defaults: SIGMA mode, sigma 0 (measured), table
 * zeroed, nthreads 0, checksum 1. */
void ibp_exp_opts_default(ibp_exp_opts_t *o);

/* What a block header says (ibp_exp_block_info). */
typedef struct ibp_exp_info {
	ibp_dtype_t dtype;
	uint64_t n;                      /* elements */
	int raw;                         /* 1 = raw passthrough block */
	ibp_exp_table_mode_t table_mode; /* coded blocks: where the table came from */
	ibp_exp_table_t table;           /* coded blocks (rANS blocks: {4, 12, 0, ...}) */
	uint64_t escapes;                /* coded blocks: escaped exponents; rANS blocks: stream bytes */
	uint64_t static_bytes;           /* size of the static part (raw: == block_bytes) */
	uint64_t block_bytes;            /* total size of the block */
} ibp_exp_info_t;

/* ---- sizes (exact; dt must be IBP_DTYPE_BF16, F16 or F32, n <= IBP_EXP_MAX_ELEMS,
 * else IBP_ERR_INVALID_ARG) ---- */

/* Static part of a coded block of n elements: header, prefix counts,
 * bit-planes and sign+mantissa sections, 128-aligned. */
ibp_status_t ibp_exp_static_size(ibp_dtype_t dt, uint64_t n, uint64_t *bytes);

/* Total size of a coded block of n elements with `escapes` escapes
 * (escapes <= n): align128(static + escapes). */
ibp_status_t ibp_exp_coded_size(ibp_dtype_t dt, uint64_t n, uint64_t escapes, uint64_t *bytes);

/* Size of a raw block: align128(64 + n * element size). */
ibp_status_t ibp_exp_raw_size(ibp_dtype_t dt, uint64_t n, uint64_t *bytes);

/* Destination capacity ibp_exp_encode needs: max(raw, coded with n escapes). */
ibp_status_t ibp_exp_encode_bound(ibp_dtype_t dt, uint64_t n, uint64_t *bytes);

/* ---- tables ---- */

/* Mean square of the finite values of src[0, n) (NaN/Inf skipped; 0 when
 * none), summed in the fixed order of docs/CODECS.md so the CPU and the GPU
 * agree bit for bit. SIGMA mode with sigma 0 uses this value as sigma^2. */
ibp_status_t ibp_exp_mean_square(const void *src, ibp_dtype_t dt, uint64_t n, double *ms);

/* Table of SIGMA mode for a known mean square (sigma^2 >= 0, finite). */
ibp_status_t ibp_exp_table_from_mean_square(ibp_dtype_t dt, double ms, ibp_exp_table_t *t);

/* Table of SIGMA mode for sigma >= 0 (uses sigma * sigma). */
ibp_status_t ibp_exp_table_from_sigma(ibp_dtype_t dt, double sigma, ibp_exp_table_t *t);

/* Exponent field histogram of src[0, n): hist[f] = count of field f
 * (256 entries; FP16 uses 0..31). */
ibp_status_t ibp_exp_histogram(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t hist[256]);

/* Table of HISTOGRAM mode: the 7 most frequent fields (ties to the smaller
 * field; unused fields fill up), ascending. */
ibp_status_t ibp_exp_table_from_histogram(ibp_dtype_t dt, const uint64_t hist[256], ibp_exp_table_t *t);

/* ---- one block on the CPU ---- */

/* Encodes src[0, n) (n elements of dt, any alignment) into one block at dst.
 * dst_cap must be at least ibp_exp_encode_bound(dt, n) (the bound is also
 * used as scratch), else IBP_ERR_BUFFER_TOO_SMALL. On success *dst_size is
 * the block size. opts NULL = defaults. GIVEN tables are validated
 * (IBP_ERR_INVALID_ARG). Output bytes depend only on the data and the
 * table, never on nthreads. */
ibp_status_t ibp_exp_encode(const void *src, ibp_dtype_t dt, uint64_t n, const ibp_exp_opts_t *opts,
			    void *dst, uint64_t dst_cap, uint64_t *dst_size);

/* Decodes one block of src_size available bytes (untrusted) into dst, which
 * must hold n elements of dt. A checksummed block is verified first
 * (IBP_ERR_CHECKSUM on a mismatch). The header must say dtype dt and n
 * elements, and the block must be canonical (zero padding, consistent
 * counts); anything else gives IBP_ERR_CORRUPT and dst contents are
 * unspecified. Bytes after the block are ignored. nthreads 0 = every CPU
 * the calling thread may run on. */
ibp_status_t ibp_exp_decode(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
			    int nthreads);

/* ibp_exp_decode with decoder flags: IBP_EXP_TRUSTED skips the checksum
 * (every other check stays). Unknown flag bits: IBP_ERR_INVALID_ARG. */
ibp_status_t ibp_exp_decode_ext(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				int nthreads, unsigned flags);

/* Parses and checks the header of the block at src (untrusted; the body is
 * not checked). IBP_ERR_CORRUPT on a bad header. */
ibp_status_t ibp_exp_block_info(const void *src, uint64_t src_size, ibp_exp_info_t *info);

/* ---- batches: n elements cut into ceil(n / chunk_elems) chunks, one block each ---- */

/* Sum of the chunks' encode bounds. chunk_elems > 0. */
ibp_status_t ibp_exp_batch_bound(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes);

/* Encodes each chunk (its own table in SIGMA-measured and HISTOGRAM modes)
 * into blocks packed back to back at dst; offsets[0..nchunks] receives the
 * block boundaries (offsets[0] = 0, offsets[nchunks] = total bytes).
 * dst_cap >= ibp_exp_batch_bound(). Threads work on different chunks. */
ibp_status_t ibp_exp_encode_batch(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				  const ibp_exp_opts_t *opts, void *dst, uint64_t dst_cap, uint64_t *offsets);

/* Decodes the blocks at src + offsets[i] (offsets untrusted: they must be
 * non-decreasing and within src_size) into dst (n elements). */
ibp_status_t ibp_exp_decode_batch(const void *src, uint64_t src_size, const uint64_t *offsets, ibp_dtype_t dt,
				  uint64_t n, uint64_t chunk_elems, void *dst, int nthreads);

/* ibp_exp_decode_batch with decoder flags (IBP_EXP_TRUSTED). */
ibp_status_t ibp_exp_decode_batch_ext(const void *src, uint64_t src_size, const uint64_t *offsets, ibp_dtype_t dt,
				      uint64_t n, uint64_t chunk_elems, void *dst, int nthreads, unsigned flags);

/* ---- CUDA: device memory to device memory, stream-ordered ----
 * `stream` is a cudaStream_t (NULL = the default stream). Calls return once
 * the work is enqueued. No call allocates device memory. */

/* Workspace bytes ibp_exp_encode_cuda needs for this batch shape, any
 * table mode: with C = ceil(n / chunk_elems) chunks, G = C *
 * ceil(chunk_elems / 4096) groups and S = C * ceil(min(chunk_elems, n) /
 * 65536) segments, the sum of al(2n + 64 S), al(8 G) three times,
 * al(8 C), al(2048 C), al(512 C), al(16 C) and al(32 S), al = rounded up to
 * 128 (about 2 bytes per element). */
ibp_status_t ibp_exp_encode_workspace_cuda(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes);
/* The name before 0.2 (docs/API.md "Names"). */
ibp_status_t ibp_exp_cuda_encode_workspace(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes)
	IBP_DEPRECATED("use ibp_exp_encode_workspace_cuda");

/* Encodes the chunks of d_src (n elements, chunk_elems per chunk) into the
 * blocks d_dst + i * dst_stride and writes each block's size to
 * d_sizes[i] (device u64). The blocks carry no checksum (the device
 * writes wire and in-memory blocks): bytes are identical to
 * ibp_exp_encode_batch's blocks for the same options with checksum = 0;
 * opts.checksum and opts.nthreads are ignored. dst_stride must be a
 * multiple of 128 and at least ibp_exp_encode_bound(dt, chunk_elems); d_dst
 * and d_workspace must be 128-byte aligned; workspace_bytes >=
 * ibp_exp_encode_workspace_cuda(). */
ibp_status_t ibp_exp_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_exp_opts_t *opts, void *d_dst, uint64_t dst_stride, uint64_t *d_sizes,
				 void *d_workspace, uint64_t workspace_bytes, void *stream);

/* Decodes the blocks d_src + d_offsets[i] of d_sizes[i] bytes (device
 * arrays, untrusted; offsets multiples of 128, d_src 128-byte aligned) of
 * the src_bytes bytes at d_src into d_dst (n elements). The blocks are
 * validated on the device, all but a checksum (blocks of either format
 * version, with or without one: verify a checksummed block on the host
 * first when its bytes are untrusted): *d_status (device int32, set to 0 by this call)
 * receives an ibp_status_t value, non-zero if any block is corrupt or lies
 * outside src_bytes (IBP_ERR_CORRUPT) or is misaligned
 * (IBP_ERR_INVALID_ARG); read it after the stream has synchronised. */
ibp_status_t ibp_exp_decode_cuda(const void *d_src, uint64_t src_bytes, const uint64_t *d_offsets,
				 const uint64_t *d_sizes,
				 ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, void *d_dst, int32_t *d_status,
				 void *stream);

#ifdef __cplusplus
}
#endif
#endif /* IBP_EXP_H */
