/* ibp/codec.h - the Invariant Bit Packing (IBP) row codec on the CPU.
 *
 * A data set is N rows of R bytes. Each row is cut into D = ceil(R / C)
 * chunks of C bytes (C = 1, 2, 4 or 8; a trailing partial chunk is padded
 * with zero bytes). Training finds, per cluster and per chunk position, a
 * Mask of bit positions that are (nearly) invariant across rows, their
 * usual values (Bitval) and, where it pays, the usual value of those bits
 * in the rows where they differ from the Bitval (Xval). A row is then
 * stored as one of four modes
 * (raw / clean / bitmap / list); docs/FORMAT.md specifies every bit.
 *
 * Typical use:
 *   ibp_train_opts_t o; ibp_train_opts_default(&o);
 *   ibp_codec_t *c; ibp_codec_train(rows, n, R, &o, &c);
 *   ibp_encode_batch(c, rows, n, dst, cap, offsets, flags, clusters, 0);
 *   ibp_decode_batch(c, dst, offsets[n], offsets, flags, clusters, n, out, 0);
 *   ibp_codec_free(c);
 *
 * A codec is immutable after creation and may be shared by any number of
 * threads. All sizes and indices are 64-bit.
 */
#ifndef IBP_CODEC_H
#define IBP_CODEC_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row modes, stored in bits 0-1 of a row's flags byte. Bits 2-7 are
 * reserved and must be zero (a decoder rejects them as corrupt). */
#define IBP_ROW_RAW 0u    /* the row's R bytes verbatim */
#define IBP_ROW_CLEAN 1u  /* every chunk matched: static part only */
#define IBP_ROW_BITMAP 2u /* exception bitmap, static part, exception part */
#define IBP_ROW_LIST 3u   /* exception index list, static part, exception part */
#define IBP_ROW_MODE_MASK 3u

#define IBP_MAX_CLUSTERS 64u   /* cluster ids are stored as one byte */
#define IBP_MAX_ROW_BYTES (1ull << 40)

/* CPU implementation choice. AUTO picks the fastest the CPU supports,
 * unless the environment variable IBP_FORCE_PORTABLE=1 is set. */
typedef enum ibp_impl {
	IBP_IMPL_AUTO = 0,
	IBP_IMPL_PORTABLE = 1, /* plain C, any CPU */
	IBP_IMPL_BMI2 = 2,     /* x86-64 pext/pdep */
	IBP_IMPL_AVX512 = 3,   /* x86-64 AVX-512 (F, BW, VL, VBMI) and BMI2 */
	IBP_IMPL_AVX2 = 4      /* x86-64 AVX2 and BMI2 (AUTO's choice without AVX-512) */
} ibp_impl_t;

typedef struct ibp_codec ibp_codec_t;

/* Training options. Always initialise with ibp_train_opts_default(). */
typedef struct ibp_train_opts {
	uint64_t size; /* sizeof this struct: set by ibp_train_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	unsigned chunk_bytes; /* 1, 2, 4, 8; 0 = auto (smallest actual size) */
	double threshold;     /* T in [0.5, 1.0]; < 0 = auto sweep 0.70..1.00 step 0.05 */
	double sample;        /* fraction of rows used for statistics, (0, 1]; 0 = auto */
	uint64_t seed;        /* seed of the deterministic row sample and k-means init */
	unsigned clusters;    /* k in 1..IBP_MAX_CLUSTERS; 0 = auto (tries a few k) */
	int nthreads;         /* worker threads; 0 = every CPU the calling thread may run on */
	int xval;             /* 1 = fit Xvals when they save >= 5% of the total
				 size (they slow the decode of exception-heavy
				 dense rows), 2 = wherever they pay at all,
				 0 = none */
} ibp_train_opts_t;

/* Fills `o` with the defaults: chunk auto, threshold auto, sample auto,
 * seed 0x1B9, clusters 1, nthreads 0, xval 1. */
void ibp_train_opts_default(ibp_train_opts_t *o);

/* Trains a codec on `nrows` rows of `row_bytes` bytes stored back to back at
 * `rows`. Chooses chunk size, threshold and clusters as `opts` says (NULL =
 * defaults) by the smallest actual encoded size, metadata counted. On
 * success *out owns a new codec (free with ibp_codec_free). nrows may be 0.
 *
 * Sample: with sample = 0 (auto) all rows when the data is <= 64 MiB, else
 * about 64 MiB of rows; sample = f takes round(f * nrows) rows (at least 1),
 * one from each equal slice of the data, picked by `seed`: the result does
 * not depend on nthreads. sample = 1.0 is a full pass (`ibp pack --sample
 * 1`): on the 144 MiB and 1 GiB tables of docs/BENCHMARKS.md it was 0.09%
 * and 0% smaller and trained 2.5x and 10x slower. Rule: a bit is invariant with Bitval 1 when
 * count >= T*N and with Bitval 0 when N - count >= T*N, so T = 1.0 keeps
 * exactly the constant bits. With xval, each candidate Mask/Bitval gets
 * its Xvals: per chunk position the most common invariant bits among the
 * sample's exceptions (a majority vote), enabled where hits * e_j >
 * exceptions, and kept only when their saving on the data set exceeds the
 * D * C bytes of the Xval table; sizes and totals count them. Ties between
 * candidates go to the larger chunk, then the larger T. With k > 1
 * clusters, k-means runs on an evenly spaced subset of the sample
 * (<= 16 MiB), each cluster sweeps its own T, and ibp_codec_threshold
 * reports the T of the largest cluster; fewer than k clusters come back
 * when the sample has fewer distinct rows.
 * Thread-safe: it touches only its arguments. */
ibp_status_t ibp_codec_train(const void *rows, uint64_t nrows, uint64_t row_bytes,
			     const ibp_train_opts_t *opts, ibp_codec_t **out);

/* Creates a codec from stored metadata (as read from a container):
 * `masks` and `bitvals` each hold nclusters * D chunk words of chunk_bytes
 * bytes, little-endian, cluster-major. Validates everything (bitval bits
 * must lie inside the mask, padding bits of the last chunk must be
 * invariant zeros) and returns IBP_ERR_CORRUPT otherwise. */
ibp_status_t ibp_codec_create(uint64_t row_bytes, unsigned chunk_bytes, unsigned nclusters,
			      const void *masks, const void *bitvals, ibp_codec_t **out);

/* As ibp_codec_create, with exception values (Xval, docs/FORMAT.md §1):
 * `xvals` holds nclusters * D chunk words like `bitvals`, one x̂ per cluster
 * and chunk position. Chunk j uses its Xval (an exception whose invariant
 * bits equal x̂_j costs one hit bit) iff x̂_j != b_j; NULL = none (x̂ = b),
 * exactly ibp_codec_create. x̂ bits outside the mask, or set among the
 * padding bits of the last chunk, give IBP_ERR_CORRUPT. */
ibp_status_t ibp_codec_create_ex(uint64_t row_bytes, unsigned chunk_bytes, unsigned nclusters,
				 const void *masks, const void *bitvals, const void *xvals,
				 ibp_codec_t **out);

/* Frees a codec; NULL is a no-op. */
void ibp_codec_free(ibp_codec_t *c);

/* Accessors. */
uint64_t ibp_codec_row_bytes(const ibp_codec_t *c);
unsigned ibp_codec_chunk_bytes(const ibp_codec_t *c);
uint64_t ibp_codec_nchunks(const ibp_codec_t *c);
unsigned ibp_codec_nclusters(const ibp_codec_t *c);
/* Threshold the codec was trained with (the chosen one under auto), or -1
 * for a codec made by ibp_codec_create. */
double ibp_codec_threshold(const ibp_codec_t *c);
/* Mask / Bitval of `cluster` as D little-endian chunk words (D * C bytes),
 * owned by the codec; NULL if cluster is out of range. */
const uint8_t *ibp_codec_mask(const ibp_codec_t *c, unsigned cluster);
const uint8_t *ibp_codec_bitval(const ibp_codec_t *c, unsigned cluster);
/* Xval of `cluster` as D little-endian chunk words (D * C bytes), owned by
 * the codec: x̂_j where chunk j's Xval is enabled, b_j elsewhere (all of it
 * equals the Bitval for a codec without Xvals); NULL if cluster is out of
 * range. Store these with the Masks/Bitvals when ibp_codec_has_xval. */
const uint8_t *ibp_codec_xval(const ibp_codec_t *c, unsigned cluster);
/* 1 if any chunk of any cluster has its Xval enabled (x̂_j != b_j), else 0
 * (rows are then encoded exactly as without Xvals). */
int ibp_codec_has_xval(const ibp_codec_t *c);
/* Size of the static part of a non-raw row of `cluster`, in bits. */
uint64_t ibp_codec_static_bits(const ibp_codec_t *c, unsigned cluster);

/* The implementation this codec currently uses (never AUTO). */
ibp_impl_t ibp_codec_impl(const ibp_codec_t *c);

/* Largest encoded size of one row: row_bytes (the raw fallback). */
uint64_t ibp_row_bound(const ibp_codec_t *c);
/* Largest total encoded size of `nrows` rows: nrows * row_bytes. */
uint64_t ibp_batch_bound(const ibp_codec_t *c, uint64_t nrows);

/* Picks the cluster whose encoding of `row` is smallest (ties: lowest id). */
unsigned ibp_choose_cluster(const ibp_codec_t *c, const void *row);

/* Exact encoded size and mode of `row` under `cluster`, without writing. */
ibp_status_t ibp_row_size(const ibp_codec_t *c, const void *row, unsigned cluster,
			  uint64_t *len, uint8_t *mode);

/* Encodes one row under `cluster` into dst[0, dst_cap). Writes the encoded
 * length to *len and the flags byte (mode) to *flags. Fails with
 * IBP_ERR_BUFFER_TOO_SMALL if dst_cap is below the exact size. */
ibp_status_t ibp_encode_row(const ibp_codec_t *c, const void *row, unsigned cluster,
			    void *dst, uint64_t dst_cap, uint64_t *len, uint8_t *flags);

/* Decodes one encoded row of `src_len` bytes with flags byte `flags` and
 * cluster id `cluster` into dst (row_bytes bytes). Every count, index and
 * length is checked against src_len: corrupt input returns IBP_ERR_CORRUPT
 * and never reads outside src[0, src_len). A cluster id >= nclusters is
 * IBP_ERR_CORRUPT too. Bytes of src beyond the row's own extent are
 * ignored (fixed-stride layout). */
ibp_status_t ibp_decode_row(const ibp_codec_t *c, const void *src, uint64_t src_len,
			    uint8_t flags, unsigned cluster, void *dst);

/* Encodes nrows rows (back to back at `rows`) into dst, packed layout: row i
 * occupies dst[offsets[i], offsets[i+1]), offsets[0] = 0, so `offsets`
 * has nrows + 1 entries. flags[i] receives the mode. With more than one
 * cluster each row takes ibp_choose_cluster's cluster and its id goes to
 * clusters[i] (`clusters` may be NULL only when nclusters == 1).
 * dst_cap >= ibp_batch_bound() always suffices. nthreads 0 = all CPUs. */
ibp_status_t ibp_encode_batch(const ibp_codec_t *c, const void *rows, uint64_t nrows,
			      void *dst, uint64_t dst_cap, uint64_t *offsets, uint8_t *flags,
			      uint8_t *clusters, int nthreads);

/* Decodes nrows packed rows described by offsets/flags/clusters (clusters
 * NULL means all rows are cluster 0) from src[0, src_len) into dst
 * (nrows * row_bytes bytes). Offsets are validated (monotone, within
 * src_len) and each row must use exactly its extent. */
ibp_status_t ibp_decode_batch(const ibp_codec_t *c, const void *src, uint64_t src_len,
			      const uint64_t *offsets, const uint8_t *flags,
			      const uint8_t *clusters, uint64_t nrows, void *dst, int nthreads);


#ifdef __cplusplus
}
#endif
#endif /* IBP_CODEC_H */
