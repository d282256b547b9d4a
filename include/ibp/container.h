/* ibp/container.h - the `.ibp` file: a compressed tensor on disk.
 *
 * A container holds one tensor of `shape` (dim 0 = rows) and `dtype`,
 * encoded row by row with a codec, plus everything needed to decode any
 * row on its own: codec metadata, per-row flags and cluster ids, row
 * offsets (packed layout) and the payload. docs/FORMAT.md section 2 is the
 * byte-level specification.
 *
 * Two layouts:
 *   IBP_LAYOUT_PACKED   rows back to back; a uint64 offset table says where
 *                       each starts. Smallest file.
 *   IBP_LAYOUT_INPLACE  row i starts at i * row_bytes, zero-filled to the
 *                       stride (the IBP paper's layout). No offsets; a row's
 *                       address is known without any lookup.
 *
 * Writing: ibp_pack() trains a codec and writes in one call;
 * ibp_pack_with_codec() encodes with a given codec; ibp_container_write()
 * stores rows that are already encoded. Every writer writes a temporary
 * file beside `path` and renames it over `path` only when complete, so a
 * crash never leaves a partial file under the final name.
 *
 * Reading: ibp_container_open() validates the header, the section table,
 * the metadata, flags, cluster ids and offsets (structure and checksums)
 * so that no later access can read outside the file. The payload is
 * checked only by ibp_container_verify() (per-MiB checksums, then a decode
 * of every row). For fast gathers use ibp/store.h on top of this.
 *
 * A container is immutable after open; every const accessor and
 * ibp_container_decode_row may be called from any number of threads.
 */
#ifndef IBP_CONTAINER_H
#define IBP_CONTAINER_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"
#include "codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest number of dimensions of a stored tensor. */
#define IBP_MAX_NDIM 8u

/* Format version written by this library. Readers accept any minor
 * version of their major (docs/FORMAT.md 2.8). */
#define IBP_FORMAT_MAJOR 1u
#define IBP_FORMAT_MINOR 0u

/* Row layouts. Values are stored in files: stable. */
typedef enum ibp_layout {
	IBP_LAYOUT_PACKED = 0,
	IBP_LAYOUT_INPLACE = 1
} ibp_layout_t;

/* Codec ids. Values are stored in files: stable. Only IBP_CODEC_IBP is
 * implemented; files naming another codec open with IBP_ERR_UNSUPPORTED. */
typedef enum ibp_codec_id {
	IBP_CODEC_IBP = 1, /* Invariant Bit Packing (ibp/codec.h) */
	IBP_CODEC_EXP = 2, /* reserved: exponent codec */
	IBP_CODEC_FP8 = 3  /* reserved: FP8 codec */
} ibp_codec_id_t;

/* Flags of ibp_container_open / ibp_store_open. */
#define IBP_OPEN_READ 0u   /* read the whole file into libibp's host arena (ibp/alloc.h) */
#define IBP_OPEN_MMAP 1u   /* map the file read-only; the payload is used in place */
#define IBP_OPEN_VERIFY 2u /* also run ibp_container_verify before returning */

typedef struct ibp_container ibp_container_t;

/* ---- writing ---------------------------------------------------------- */

/* Writes a container to `path` from rows already encoded with `codec`
 * (an IBP codec). The tensor is `ndim` (1..IBP_MAX_NDIM) dimensions given
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
 * These arguments are checked (IBP_ERR_INVALID_ARG); the rows themselves
 * are not decoded. Errors: IBP_ERR_INVALID_ARG, IBP_ERR_IO (the detail
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

/* ---- reading ---------------------------------------------------------- */

/* Opens and validates the container at `path`. `flags`: IBP_OPEN_READ
 * (default) or IBP_OPEN_MMAP, optionally | IBP_OPEN_VERIFY. Checks
 * magic, version, header/section-table/metadata/flags/clusters/offsets/
 * payload-checksum-table checksums, and that every size agrees with the
 * shape and every offset lies inside the payload.
 * Errors: IBP_ERR_IO (open/read/mmap failed), IBP_ERR_CORRUPT (a
 * structural check failed: the detail names the file and field),
 * IBP_ERR_CHECKSUM, IBP_ERR_UNSUPPORTED (newer major version, unknown
 * required feature or section, codec not built in), IBP_ERR_NOMEM.
 * With IBP_OPEN_MMAP the file must not be truncated while open (the
 * kernel would raise SIGBUS). On success *out owns the container. */
ibp_status_t ibp_container_open(const char *path, unsigned flags, ibp_container_t **out);

/* As ibp_container_open, for a container image in memory. `data` is
 * borrowed, not copied: it must stay valid and unchanged until
 * ibp_container_close. Only IBP_OPEN_VERIFY is meaningful in `flags`. */
ibp_status_t ibp_container_open_memory(const void *data, uint64_t size, unsigned flags,
				       ibp_container_t **out);

/* Full payload check: the XXH3-64 of every payload block (1 MiB) and of
 * the whole payload, then a decode of every row (packed rows must use
 * their extent exactly). `nthreads` workers (0 = all CPUs). Returns
 * IBP_OK, IBP_ERR_CHECKSUM or IBP_ERR_CORRUPT (the detail names the row
 * or block), or IBP_ERR_NOMEM. */
ibp_status_t ibp_container_verify(const ibp_container_t *c, int nthreads);

/* Closes a container (unmaps or frees its memory, frees its codec);
 * NULL is a no-op. */
void ibp_container_close(ibp_container_t *c);

/* Decodes row `row` into dst (row_bytes bytes). Returns
 * IBP_ERR_OUT_OF_RANGE for row >= nrows, IBP_ERR_CORRUPT for a row that
 * fails to decode (never reads outside the row's extent). */
ibp_status_t ibp_container_decode_row(const ibp_container_t *c, uint64_t row, void *dst);

/* ---- accessors (valid until ibp_container_close) ---------------------- */

uint64_t ibp_container_nrows(const ibp_container_t *c);     /* shape[0] */
uint64_t ibp_container_row_bytes(const ibp_container_t *c); /* bytes of one decoded row */
ibp_dtype_t ibp_container_dtype(const ibp_container_t *c);
unsigned ibp_container_ndim(const ibp_container_t *c);
/* The ndim dimensions (owned by the container). */
const uint64_t *ibp_container_shape(const ibp_container_t *c);
ibp_layout_t ibp_container_layout(const ibp_container_t *c);
ibp_codec_id_t ibp_container_codec_id(const ibp_container_t *c);
unsigned ibp_container_chunk_bytes(const ibp_container_t *c);
/* The codec built from the stored metadata (owned by the container). */
const ibp_codec_t *ibp_container_codec(const ibp_container_t *c);
/* Training threshold recorded by the writer, or -1 when unknown. */
double ibp_container_threshold(const ibp_container_t *c);
/* Format version of the file (the minor may exceed IBP_FORMAT_MINOR). */
unsigned ibp_container_version_major(const ibp_container_t *c);
unsigned ibp_container_version_minor(const ibp_container_t *c);
/* Size of the whole file in bytes. */
uint64_t ibp_container_file_bytes(const ibp_container_t *c);
/* The path it was opened from, or "<memory>" (for messages). */
const char *ibp_container_name(const ibp_container_t *c);

/* Raw arrays, for decoders that work on the encoded data directly (GPU
 * upload, benchmarks). The payload has *len bytes; offsets has nrows + 1
 * entries and is NULL in the inplace layout; clusters is NULL when the
 * codec has one cluster. All were validated at open, except the payload
 * bytes (see ibp_container_verify). */
const uint8_t *ibp_container_payload(const ibp_container_t *c, uint64_t *len);
const uint64_t *ibp_container_offsets(const ibp_container_t *c);
const uint8_t *ibp_container_flags(const ibp_container_t *c);
const uint8_t *ibp_container_clusters(const ibp_container_t *c);

/* Encoded extent of row `row`: *src points into the payload, *len is its
 * length (packed: offsets[row+1] - offsets[row]; inplace: row_bytes).
 * IBP_ERR_OUT_OF_RANGE for row >= nrows. */
ibp_status_t ibp_container_row(const ibp_container_t *c, uint64_t row, const uint8_t **src,
			       uint64_t *len);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CONTAINER_H */
