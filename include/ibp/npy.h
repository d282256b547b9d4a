/* ibp/npy.h - reading and writing NumPy .npy files.
 *
 * Supported: format versions 1.0, 2.0 and 3.0; C order only; element types
 * f2 f4 f8, i1 i2 i4 i8, u1 u2 u4 u8, b1, little-endian ('<') or, for
 * one-byte types, '|'. bfloat16 has no NumPy type: it is read from `<u2` or
 * `|V2` when the caller passes IBP_NPY_BF16, and written as `<u2`.
 * Fortran order, big-endian data and any other type are refused with
 * IBP_ERR_UNSUPPORTED; malformed headers with IBP_ERR_CORRUPT.
 *
 * Headers are untrusted input: the parser never reads past the bytes it is
 * given, caps the header at IBP_NPY_HEADER_MAX bytes and checks the element
 * count and byte size for 64-bit overflow.
 *
 * All functions are thread-safe (no shared state); a writer handle is used by
 * one thread at a time.
 */
#ifndef IBP_NPY_H
#define IBP_NPY_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IBP_NPY_MAX_DIMS 64            /* NumPy 2's limit */
#define IBP_NPY_HEADER_MAX (1u << 20)  /* largest header accepted (magic to data) */

/* Flags for the readers. */
#define IBP_NPY_BF16 1u /* read `<u2` and `|V2` arrays as IBP_DTYPE_BF16 */

/* What a .npy header says. */
typedef struct ibp_npy_info {
	ibp_dtype_t dtype;
	unsigned ndim;                     /* 0 for a scalar array */
	uint64_t shape[IBP_NPY_MAX_DIMS];  /* shape[0..ndim) */
	uint64_t count;                    /* elements: product of the shape (1 if ndim == 0) */
	uint64_t elem_bytes;               /* bytes per element */
	uint64_t data_bytes;               /* count * elem_bytes */
	uint64_t data_offset;              /* file offset of the array data */
	unsigned version;                  /* format major version: 1, 2 or 3 */
	char descr[16];                    /* the header's descr string, e.g. "<f4" */
} ibp_npy_info_t;

/* Parses the header at buf[0, len) (a file's first bytes, or all of it).
 * `len` must reach at least the end of the header (info->data_offset);
 * the data itself need not be present. Returns IBP_ERR_CORRUPT for a bad or
 * truncated header, IBP_ERR_UNSUPPORTED for a valid array this library
 * cannot take (Fortran order, big-endian, other dtypes). */
ibp_status_t ibp_npy_parse_header(const void *buf, uint64_t len, unsigned flags,
				  ibp_npy_info_t *info);

/* Reads and checks the header of the file at `path`; the file's size must
 * be exactly data_offset + data_bytes (IBP_ERR_CORRUPT otherwise). Callers
 * may then mmap or read the data at info->data_offset themselves. */
ibp_status_t ibp_npy_read_header(const char *path, unsigned flags, ibp_npy_info_t *info);

/* Reads the whole array at `path` into memory. On success *data (64-byte
 * aligned, release with ibp_npy_free) holds info->data_bytes bytes;
 * *data may be NULL when data_bytes is 0. */
ibp_status_t ibp_npy_load(const char *path, unsigned flags, ibp_npy_info_t *info, void **data);

/* Releases memory returned by ibp_npy_load; NULL is a no-op. */
void ibp_npy_free(void *data);

/* The NumPy descr written for `dt` ("<f4", "|u1", bf16 -> "<u2", bytes ->
 * "|u1"), or NULL for an unknown value. */
const char *ibp_npy_descr(ibp_dtype_t dt);

/* Formats a version 1.0 header (2.0 when it does not fit in 64 KiB) for an
 * array of dtype `dt` and shape[0..ndim), padded so that the data starts on
 * a 64-byte boundary. Writes it to buf[0, cap) and its length to *len.
 * IBP_ERR_BUFFER_TOO_SMALL if cap is short (IBP_NPY_HEADER_MAX always
 * suffices), IBP_ERR_INVALID_ARG for a bad dtype, ndim or overflowing shape. */
ibp_status_t ibp_npy_format_header(ibp_dtype_t dt, unsigned ndim, const uint64_t *shape,
				   void *buf, uint64_t cap, uint64_t *len);

/* Streaming writer: create, append the data in any number of pieces, then
 * finish. The file is created (or truncated) by ibp_npy_create. */
typedef struct ibp_npy_writer ibp_npy_writer_t;

/* Creates `path` and writes the header for dtype `dt` and shape[0..ndim).
 * On success *out owns a writer that expects exactly the array's byte size. */
ibp_status_t ibp_npy_create(const char *path, ibp_dtype_t dt, unsigned ndim,
			    const uint64_t *shape, ibp_npy_writer_t **out);

/* Appends `n` bytes of array data. Writing more than the array's size is
 * IBP_ERR_INVALID_ARG; write errors are IBP_ERR_IO. */
ibp_status_t ibp_npy_append(ibp_npy_writer_t *w, const void *data, uint64_t n);

/* Closes the file and frees `w` (always). Fails with IBP_ERR_INVALID_ARG if
 * fewer bytes than the array's size were appended, or IBP_ERR_IO; on any
 * failure (including an earlier failed append) the file is removed. */
ibp_status_t ibp_npy_finish(ibp_npy_writer_t *w);

/* Closes and removes the partial file and frees `w`; NULL is a no-op. */
void ibp_npy_abort(ibp_npy_writer_t *w);

/* Writes a whole array (data holds the product of shape times the element
 * size of `dt` bytes) to `path`. Same errors as the streaming calls. */
ibp_status_t ibp_npy_write(const char *path, ibp_dtype_t dt, unsigned ndim,
			   const uint64_t *shape, const void *data);

#ifdef __cplusplus
}
#endif
#endif /* IBP_NPY_H */
