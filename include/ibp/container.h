/* ibp/container.h - the `.ibp` file: a compressed tensor on disk.
 *
 * A container holds one tensor of `shape` (dim 0 = rows) and `dtype`,
 * encoded with one of three codecs, plus everything needed to decode it.
 * docs/FORMAT.md section 2 is the byte-level specification.
 *
 *   IBP_CODEC_IBP  row by row with the IBP row codec (ibp/codec.h): codec
 *                  metadata (Masks, Bitvals, Xvals), per-row flags and
 *                  cluster ids, row offsets (packed layout) and the payload.
 *                  Any row decodes on its own. Lossless, any dtype.
 *   IBP_CODEC_EXP  the exponent codec (ibp/exp.h): the tensor's elements cut
 *                  into blocks of whole rows (about 4 Mi elements each),
 *                  block offsets and the blocks. Lossless; bf16/f16/f32.
 *   IBP_CODEC_FP8  the FP8 block codec (ibp/fp8.h): the same cut into
 *                  streams at a fixed stride. LOSSY; bf16/f16/f32. Files
 *                  carry a required feature bit so older readers refuse them.
 *   IBP_CODEC_EXP_ROWS  the exponent codec's row form: one table of the
 *                  tensor's seven most common exponents, each row encoded
 *                  on its own (3-bit codes, the sign and mantissa bits
 *                  as they are, an escape byte per other exponent), row i
 *                  in a slot of fixed size at i * slot (no row offsets;
 *                  the rare row with more escapes than its slot holds
 *                  keeps them in an overflow area). Lossless;
 *                  bf16/f16/f32. For random rows
 *                  (gathers, embedding bags): a row costs a few ns to
 *                  decode. Older readers refuse it (unknown codec).
 * A row of an exp or fp8 container is read by decoding its whole block.
 *
 * Two layouts (IBP codec; exp and fp8 are always packed):
 *   IBP_LAYOUT_PACKED   rows back to back; a compact row index (format 1.2:
 *                       a u64 base per 64 rows plus a few bits per row for
 *                       mode, cluster and length; 1.1 files: a u64 offset
 *                       per row) says where each starts. Smallest file.
 *   IBP_LAYOUT_INPLACE  row i starts at i * row_bytes, zero-filled to the
 *                       stride (the IBP paper's layout). No offsets; a row's
 *                       address is known without any lookup.
 *
 * Writing: ibp_pack() trains an IBP codec and writes in one call;
 * ibp_pack_with_codec() encodes with a given codec; ibp_pack_exp() and
 * ibp_pack_fp8() encode with the value codecs; ibp_container_write*()
 * store data that is already encoded. Every writer writes a temporary
 * file beside `path` and renames it over `path` only when complete, so a
 * crash never leaves a partial file under the final name. A section of
 * 256 MiB or more (a large payload) is written with O_DIRECT where the
 * file system takes it (else through the page cache as the rest): it does
 * not stay in the page cache, so a first read after writing comes from
 * the disk.
 *
 * Reading: ibp_container_open() validates the header, the section table,
 * the metadata and the row index (structure and checksums) so that no
 * later access can read outside the file.
 *
 * Verified reads (the default): open also checks the payload checksums
 * (every 1 MiB block, in parallel), and every other byte of the file is
 * covered by a checksum or must be zero, so after a successful open every
 * byte is the one the writer wrote: a read (decode_row, decode_block, the
 * store's gather and decode_all) returns the original data or fails with
 * IBP_ERR_CORRUPT, never wrong data. Checking at open was chosen over
 * checking the 1 MiB blocks under each row on every read: on a 1 GiB
 * container the open-time check costs about one XXH3 pass over the file
 * (0.2-0.5 s on a 2-core VM, a fraction of reading it), while per-read
 * checks of random 4 KiB rows cost ~300x the gather itself
 * (docs/BENCHMARKS.md, "Container 1.2"). IBP_OPEN_TRUSTED skips the
 * payload checksums for callers that verified the file once; reads then
 * still never leave the file, but a damaged payload may decode to wrong
 * bytes. ibp_container_verify() additionally decodes every row or block.
 * The guarantee holds for the bytes seen at open: with IBP_OPEN_MMAP the
 * file must not change while open, and an image given to
 * ibp_container_open_memory must not change either.
 * For fast gathers use ibp/store.h on top of this.
 *
 * A container is immutable after open; every const accessor,
 * ibp_container_decode_row and ibp_container_decode_block may be called
 * from any number of threads.
 */
#ifndef IBP_CONTAINER_H
#define IBP_CONTAINER_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"
#include "codec.h"
#include "exp.h"
#include "fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest number of dimensions of a stored tensor. */
#define IBP_MAX_NDIM 8u

/* Format version written by this library. Readers accept any minor
 * version of their major (docs/FORMAT.md 2.9). 1.1 added Xvals, the
 * exponent and FP8 codecs and the LOSSY feature bit. */
#define IBP_FORMAT_MAJOR 1u
#define IBP_FORMAT_MINOR 2u

/* Elements per block the exp/fp8 packers aim for when given block_rows 0
 * (ibp_block_rows_default). */
#define IBP_BLOCK_ELEMS_DEFAULT (1ull << 22)

/* Row layouts. Values are stored in files: stable. */
typedef enum ibp_layout {
	IBP_LAYOUT_PACKED = 0,
	IBP_LAYOUT_INPLACE = 1
} ibp_layout_t;

/* Codec ids. Values are stored in files: stable. Files naming another
 * codec open with IBP_ERR_UNSUPPORTED. */
typedef enum ibp_codec_id {
	IBP_CODEC_IBP = 1, /* Invariant Bit Packing rows (ibp/codec.h), lossless */
	IBP_CODEC_EXP = 2, /* exponent codec blocks (ibp/exp.h), lossless */
	IBP_CODEC_FP8 = 3, /* FP8 block codec streams (ibp/fp8.h), lossy */
	IBP_CODEC_EXP_ROWS = 4 /* exponent codec, row by row (ibp_pack_exp_rows), lossless */
} ibp_codec_id_t;

/* Flags of ibp_container_open / ibp_store_open. */
#define IBP_OPEN_READ 0u   /* read the whole file into libibp's host arena (ibp/alloc.h) */
#define IBP_OPEN_MMAP 1u   /* map the file read-only; the payload is used in place */
#define IBP_OPEN_VERIFY 2u /* also run ibp_container_verify (a decode of every row) before returning */
#define IBP_OPEN_TRUSTED 4u /* skip the payload checksums at open (see "Verified reads") */

typedef struct ibp_container ibp_container_t;

/* ---- writing ---------------------------------------------------------- */

/* Writes a container to `path` from rows already encoded with `codec`
 * (an IBP codec; its Xvals are stored when ibp_codec_has_xval). The tensor is `ndim` (1..IBP_MAX_NDIM) dimensions given
 * by `shape`; rows = shape[0], and the row length shape[1] * ... *
 * ibp_dtype_size(dtype) must equal ibp_codec_row_bytes(codec).
 *
 * `flags` (nrows bytes) holds each row's mode byte; `clusters` (nrows
 * bytes) its cluster id, required when the codec has more than one
 * cluster and ignored otherwise.
 *   PACKED:  `payload` holds payload_len = offsets[nrows] bytes; row i is
 *            payload[offsets[i], offsets[i+1]); `offsets` has nrows + 1
 *            entries, offsets[0] = 0, non-decreasing, each row at most
 *            row_bytes long (ibp_encode_batch output fits as is).
 *   INPLACE: `payload` holds payload_len = nrows * row_bytes bytes, row i
 *            at i * row_bytes; `offsets` must be NULL.
 * These arguments are checked (IBP_ERR_INVALID_ARG; in the packed layout
 * a RAW row must be exactly row_bytes long, as decoding requires); the
 * rows themselves are not decoded. Writes format 1.2 (docs/FORMAT.md 2). Errors: IBP_ERR_INVALID_ARG, IBP_ERR_IO (the detail
 * names the file and errno), IBP_ERR_NOMEM. On failure `path` is left as
 * it was. Thread-safe (distinct paths). */
ibp_status_t ibp_container_write(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				 unsigned ndim, const uint64_t *shape, ibp_layout_t layout,
				 const void *payload, uint64_t payload_len, const uint64_t *offsets,
				 const uint8_t *flags, const uint8_t *clusters);

/* Encodes the tensor `data` (shape[0] rows of row_bytes bytes, back to
 * back, as for ibp_container_write) with `codec` using ibp_encode_batch
 * (`nthreads` workers, 0 = all CPUs) and writes it to `path` in `layout`.
 * Needs about nrows * row_bytes bytes of temporary memory. Errors as
 * ibp_container_write, plus whatever encoding reports. */
ibp_status_t ibp_pack_with_codec(const char *path, const ibp_codec_t *codec, const void *data,
				 ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, int nthreads);

/* One call: trains a codec on `data` with ibp_codec_train(`opts`, NULL =
 * defaults), then does ibp_pack_with_codec with opts->nthreads. */
ibp_status_t ibp_pack(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
		      const uint64_t *shape, const ibp_train_opts_t *opts, ibp_layout_t layout);

/* Rows per block the exp/fp8 packers use for block_rows 0: about
 * IBP_BLOCK_ELEMS_DEFAULT elements of whole rows, at least 1 row and at
 * most max(nrows, 1). row_elems >= 1. */
uint64_t ibp_block_rows_default(uint64_t row_elems, uint64_t nrows);

/* Encodes the tensor `data` (dtype IBP_DTYPE_BF16, F16 or F32; shape as
 * for ibp_container_write) with the exponent codec, one block per
 * `block_rows` rows (0 = ibp_block_rows_default), using
 * ibp_exp_encode_batch with `opts` (NULL = defaults; opts->nthreads
 * workers), and writes it to `path` (codec IBP_CODEC_EXP, packed).
 * Lossless. Needs about the tensor's size in temporary memory. Errors:
 * IBP_ERR_INVALID_ARG (dtype, shape, options), IBP_ERR_IO, IBP_ERR_NOMEM.
 * Thread-safe (distinct paths). */
ibp_status_t ibp_pack_exp(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			  const uint64_t *shape, const ibp_exp_opts_t *opts, uint64_t block_rows);

/* Encodes the tensor `data` (dtype IBP_DTYPE_BF16, F16 or F32; shape as
 * for ibp_container_write) with the exponent codec's row form and writes
 * it to `path` (codec IBP_CODEC_EXP_ROWS, packed): the table of the seven
 * most common exponent fields, then every row on its own (docs/FORMAT.md
 * 2.6.1, "Codec 4"): each row in a slot of fixed size, K escape bytes
 * beyond its fixed part, K chosen to make the file smallest (at least 8);
 * a row with more escapes keeps them in the overflow area. Lossless;
 * about 0.88 (float32), 0.94 (float16) or 0.75 (bfloat16) of the raw
 * size for trained weights in rows of 64. `nthreads` workers (0 = all
 * CPUs). Needs the encoded tensor plus 8 bytes a row in temporary
 * memory. Errors:
 * IBP_ERR_INVALID_ARG (NULL path, shape or data with rows, dtype, shape,
 * nthreads < 0), IBP_ERR_IO, IBP_ERR_NOMEM. Thread-safe (distinct paths). */
ibp_status_t ibp_pack_exp_rows(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			       const uint64_t *shape, int nthreads);

/* As ibp_pack_exp with the LOSSY FP8 block codec (ibp_fp8_encode per
 * block of `block_rows` rows, `opts` NULL = defaults). Decoding gives the
 * quantised values (error bounds in docs/CODECS.md 3.3), in `dtype`. */
ibp_status_t ibp_pack_fp8(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			  const uint64_t *shape, const ibp_fp8_opts_t *opts, uint64_t block_rows);

/* Writes an exponent-codec container from blocks already encoded, e.g. by
 * ibp_exp_encode_batch(data, dtype, n, chunk_elems, ...) with n =
 * shape[0] * row elements: `payload` holds offsets[nblocks] bytes, block b
 * at payload[offsets[b], offsets[b+1]), nblocks = ceil(n / chunk_elems)
 * (0 when n = 0; `offsets` has nblocks + 1 entries, offsets[0] = 0).
 * chunk_elems must be a positive whole number of rows; offsets must be
 * non-decreasing multiples of 128 and each block's size plausible for its
 * element count (the blocks are not decoded). `table_mode` is recorded for
 * information. Errors as ibp_container_write. */
ibp_status_t ibp_container_write_exp(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     ibp_exp_table_mode_t table_mode, const void *payload,
				     const uint64_t *offsets);

/* Writes an FP8 container from streams already encoded with `opts`
 * (format, block, hadamard, adaptive; nthreads ignored): stream b holds
 * elements [b * chunk_elems, ...) and starts at b * S, S =
 * ibp_fp8_encoded_size(opts, chunk_elems); the last, possibly shorter one
 * ends the payload, so payload_len = (nblocks - 1) * S + its size (0 for
 * an empty tensor). The layout of ibp_fp8_encode_cuda, cut after the last
 * stream. chunk_elems must be a positive whole number of rows. The
 * streams are not decoded. Errors as ibp_container_write. */
ibp_status_t ibp_container_write_fp8(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     const ibp_fp8_opts_t *opts, const void *payload,
				     uint64_t payload_len);

/* ---- reading ---------------------------------------------------------- */

/* Opens and validates the container at `path`. `flags`: IBP_OPEN_READ
 * (default) or IBP_OPEN_MMAP, optionally | IBP_OPEN_VERIFY or
 * | IBP_OPEN_TRUSTED. Checks magic, version, the checksums of the header,
 * section table and every section, that padding bytes are zero, that
 * every size agrees with the shape (before anything is allocated from
 * it) and every row or block lies inside the payload; then, unless
 * IBP_OPEN_TRUSTED, the payload checksums ("Verified reads" above).
 * Errors: IBP_ERR_INVALID_ARG (unknown flag bits), IBP_ERR_IO
 * (open/read/mmap failed), IBP_ERR_CORRUPT (a structural check failed:
 * the detail names the file and field), IBP_ERR_CHECKSUM (a checksum did
 * not match: the bytes are corrupt), IBP_ERR_UNSUPPORTED (newer major
 * version, unknown required feature or section, codec not built in),
 * IBP_ERR_NOMEM.
 * With IBP_OPEN_MMAP the file must not be truncated while open (the
 * kernel would raise SIGBUS). On success *out owns the container. */
ibp_status_t ibp_container_open(const char *path, unsigned flags, ibp_container_t **out);

/* As ibp_container_open, for a container image in memory. `data` is
 * borrowed, not copied: it must stay valid and unchanged until
 * ibp_container_close. Only IBP_OPEN_VERIFY and IBP_OPEN_TRUSTED are
 * meaningful in `flags` (IBP_OPEN_MMAP is ignored; unknown bits give
 * IBP_ERR_INVALID_ARG). */
ibp_status_t ibp_container_open_memory(const void *data, uint64_t size, unsigned flags,
				       ibp_container_t **out);

/* Full payload check: the XXH3-64 of every payload block (1 MiB) and of
 * the whole payload, then a decode of every row (IBP: packed rows must use
 * their extent exactly) or every exp block / fp8 stream (each must fill
 * its extent exactly; for fp8 this checks decodability, not the values).
 * `nthreads` workers (0 = all CPUs). Returns IBP_OK, IBP_ERR_CHECKSUM or
 * IBP_ERR_CORRUPT (the detail names the row or block), or IBP_ERR_NOMEM. */
ibp_status_t ibp_container_verify(const ibp_container_t *c, int nthreads);

/* Closes a container (unmaps or frees its memory, frees its codec);
 * NULL is a no-op. */
void ibp_container_close(ibp_container_t *c);

/* Decodes row `row` into dst (row_bytes bytes). Returns
 * IBP_ERR_OUT_OF_RANGE for row >= nrows, IBP_ERR_CORRUPT for a row that
 * fails to decode (never reads outside the row's extent). For exp and fp8
 * containers this decodes the row's whole block into a temporary buffer
 * (allocated per call: IBP_ERR_NOMEM possible); use ibp/store.h to read
 * many rows. */
ibp_status_t ibp_container_decode_row(const ibp_container_t *c, uint64_t row, void *dst);

/* Exp and fp8 containers: decodes block `block` (< ibp_container_nblocks)
 * into dst, which receives the block's rows (ibp_container_block_rows, or
 * fewer for the last block) times row_bytes bytes, in the file's dtype.
 * The block must fill its extent exactly and agree with the header's
 * parameters. `nthreads` threads inside the block (0 = all CPUs).
 * IBP_ERR_OUT_OF_RANGE for a block past the end, IBP_ERR_INVALID_ARG for
 * an IBP container, IBP_ERR_CORRUPT for a block that fails to decode. */
ibp_status_t ibp_container_decode_block(const ibp_container_t *c, uint64_t block, void *dst,
					int nthreads);

/* ---- accessors (valid until ibp_container_close) ---------------------- */

uint64_t ibp_container_nrows(const ibp_container_t *c);     /* shape[0] */
uint64_t ibp_container_row_bytes(const ibp_container_t *c); /* bytes of one decoded row */
ibp_dtype_t ibp_container_dtype(const ibp_container_t *c);
unsigned ibp_container_ndim(const ibp_container_t *c);
/* The ndim dimensions (owned by the container). */
const uint64_t *ibp_container_shape(const ibp_container_t *c);
ibp_layout_t ibp_container_layout(const ibp_container_t *c);
ibp_codec_id_t ibp_container_codec_id(const ibp_container_t *c);
/* 1 for a lossy codec (fp8), else 0. */
int ibp_container_lossy(const ibp_container_t *c);
/* IBP chunk size C (1, 2, 4, 8); 0 for exp and fp8. */
unsigned ibp_container_chunk_bytes(const ibp_container_t *c);
/* The IBP codec built from the stored metadata (owned by the container);
 * NULL for exp and fp8 containers. */
const ibp_codec_t *ibp_container_codec(const ibp_container_t *c);
/* Training threshold recorded by the writer, or -1 when unknown (and for
 * exp and fp8). */
double ibp_container_threshold(const ibp_container_t *c);

/* Exp and fp8 containers (0 / NULL for IBP): the number of blocks (exp)
 * or streams (fp8), the elements per block (a whole number of rows; the
 * last block may hold fewer), the rows per block, and for exp the
 * nblocks + 1 block offsets into the payload (NULL for fp8, whose block
 * b starts at b * ibp_fp8_encoded_size(opts, chunk_elems)). */
uint64_t ibp_container_nblocks(const ibp_container_t *c);
uint64_t ibp_container_chunk_elems(const ibp_container_t *c);
uint64_t ibp_container_block_rows(const ibp_container_t *c);
const uint64_t *ibp_container_block_offsets(const ibp_container_t *c);
/* Encoded extent of block `block` in the payload (exp and fp8).
 * IBP_ERR_OUT_OF_RANGE past the end, IBP_ERR_INVALID_ARG for IBP. */
ibp_status_t ibp_container_block(const ibp_container_t *c, uint64_t block, const uint8_t **src,
				 uint64_t *len);
/* Exp containers: the table mode the writer recorded (informational;
 * each block says its own). IBP_EXP_TABLE_SIGMA for other codecs. */
ibp_exp_table_mode_t ibp_container_exp_table_mode(const ibp_container_t *c);
/* Fp8 containers: the stored options (format, block, hadamard, adaptive;
 * nthreads 0) into *o. IBP_ERR_INVALID_ARG for other codecs or NULL. */
ibp_status_t ibp_container_fp8_opts(const ibp_container_t *c, ibp_fp8_opts_t *o);
/* Format version of the file (the minor may exceed IBP_FORMAT_MINOR). */
unsigned ibp_container_version_major(const ibp_container_t *c);
unsigned ibp_container_version_minor(const ibp_container_t *c);
/* Size of the whole file in bytes. */
uint64_t ibp_container_file_bytes(const ibp_container_t *c);
/* The path it was opened from, or "<memory>" (for messages). */
const char *ibp_container_name(const ibp_container_t *c);
/* The whole container as the reader uses it: the file image read at open
 * (IBP_OPEN_READ), the mapping (IBP_OPEN_MMAP), or the memory given to
 * ibp_container_open_memory (or libibp's aligned copy of it). *size (if
 * not NULL) gets ibp_container_file_bytes. Owned by the container, valid
 * until ibp_container_close; saving these bytes and opening them again
 * (ibp_container_open_memory) gives the same container. */
const uint8_t *ibp_container_image(const ibp_container_t *c, uint64_t *size);

/* Raw arrays, for decoders that work on the encoded data directly (GPU
 * upload, benchmarks). The payload has *len bytes; offsets has nrows + 1
 * entries and is NULL in the inplace layout; clusters is NULL when the
 * codec has one cluster. All were validated at open (the payload too,
 * unless opened with IBP_OPEN_TRUSTED). Offsets, flags and clusters are
 * NULL for exp, fp8 and exp-rows containers (see
 * ibp_container_block_offsets).
 * Format 1.2 files store a compact index instead of these arrays: the
 * first call expands it (10 bytes per row at most, kept until close; NULL
 * if that allocation fails). Row readers should prefer
 * ibp_container_row_meta, which reads the compact index directly. */
const uint8_t *ibp_container_payload(const ibp_container_t *c, uint64_t *len);
const uint64_t *ibp_container_offsets(const ibp_container_t *c);
const uint8_t *ibp_container_flags(const ibp_container_t *c);
const uint8_t *ibp_container_clusters(const ibp_container_t *c);

/* Encoded extent of row `row`: *src points into the payload, *len is its
 * length (packed: offsets[row+1] - offsets[row]; inplace: row_bytes;
 * exp-rows: the row's slot, whose escapes may lie in the overflow area).
 * IBP_ERR_OUT_OF_RANGE for row >= nrows; IBP_ERR_UNSUPPORTED for exp and
 * fp8 containers, whose rows are not encoded one by one. */
ibp_status_t ibp_container_row(const ibp_container_t *c, uint64_t row, const uint8_t **src,
			       uint64_t *len);

/* As ibp_container_row, plus the row's mode byte (*flags, for
 * ibp_decode_row) and cluster id (*cluster, 0 with one cluster); either
 * may be NULL. Works on both index kinds; with the compact index (1.2)
 * the cost is one group base plus at most 63 entries. Also
 * IBP_ERR_INVALID_ARG for NULL c, src or len. Thread-safe. */
ibp_status_t ibp_container_row_meta(const ibp_container_t *c, uint64_t row, const uint8_t **src,
				    uint64_t *len, uint8_t *flags, unsigned *cluster);

/* 1 when the file stores the compact row index of format 1.2 (INDEX
 * section), 0 for the 1.0/1.1 flags/offsets arrays or a non-IBP codec. */
int ibp_container_compact_index(const ibp_container_t *c);

/* Writes the 1.1-style row arrays of an IBP container into caller memory,
 * whichever index the file has: offsets (nrows + 1 entries, packed layout
 * only, else pass NULL), flags (nrows mode bytes) and clusters (nrows
 * cluster ids, 0 with one cluster); each may be NULL. For GPU upload
 * (ibp_cuda_store_from_store) and tools. IBP_ERR_INVALID_ARG for a
 * non-IBP container or offsets with the inplace layout. O(nrows). */
ibp_status_t ibp_container_index_expand(const ibp_container_t *c, uint64_t *offsets, uint8_t *flags,
					uint8_t *clusters);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CONTAINER_H */
