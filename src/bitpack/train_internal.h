/* train_internal.h - training pieces shared by train.c and analyze.c. */
#ifndef IBP_TRAIN_INTERNAL_H
#define IBP_TRAIN_INTERNAL_H

#include <stdint.h>
#include "ibp/codec.h"

/* Sweep of the automatic threshold: T = pct / 100 for pct = 70, 75 ... 100
 * (integer steps, so 1.00 is reached exactly). */
#define IBP_SWEEP_FIRST 70u
#define IBP_SWEEP_STEP 5u
#define IBP_SWEEP_N 7u

/* Automatic sample: all rows up to this many bytes, else about this much. */
#define IBP_SAMPLE_AUTO_BYTES (64ull << 20)

/* Rows used for statistics: n rows, idx[i] their row ids (increasing), or
 * idx == NULL for rows 0..n-1. */
typedef struct ibp_sample {
	uint64_t n;
	uint64_t *idx;
} ibp_sample_t;

/* Validates rows/nrows/row_bytes/opts (NULL opts = defaults) and returns
 * the options to use in *o. */
ibp_status_t ibpi_train_check(const void *rows, uint64_t nrows, uint64_t row_bytes,
			     const ibp_train_opts_t *opts, ibp_train_opts_t *o);

/* Picks the deterministic row sample (rule in include/ibp/codec.h's
 * ibp_codec_train comment and train.c). Free s->idx with free(). */
ibp_status_t ibpi_train_sample(uint64_t nrows, uint64_t row_bytes, double frac, uint64_t seed,
			      ibp_sample_t *s);

/* counts[8*p + b] = number of the n rows rows[idx[i]] (idx NULL: rows 0..n-1)
 * with bit b of byte p set. counts has 8 * row_bytes entries. */
ibp_status_t ibp_train_count(const uint8_t *rows, uint64_t row_bytes, const uint64_t *idx,
			     uint64_t n, int nthreads, uint64_t *counts);

/* Smallest integer count c with c >= t * n (exact for t = k/100). */
uint64_t ibpi_train_need(double t, uint64_t n);

/* Byte-level Mask/Bitval (row_bytes bytes each) of n rows at threshold t. */
void ibp_train_mask(const uint64_t *counts, uint64_t n, uint64_t row_bytes, double t,
		    uint8_t *mask, uint8_t *bitval);

/* Creates a codec for chunk size c from byte-level masks of `nclusters`
 * clusters (each row_bytes bytes, cluster-major), padding the last chunk.
 * xval: NULL (no Xvals) or nclusters * D * c bytes of chunk words, padding
 * included (ibp_codec_create_ex's array). */
ibp_status_t ibpi_train_make_codec(uint64_t row_bytes, unsigned c, unsigned nclusters,
				  const uint8_t *mask, const uint8_t *bitval, const uint8_t *xval,
				  ibp_codec_t **out);

/* Fits Xvals for each of `ncodecs` one-cluster codecs without Xvals (all
 * of one chunk size) on the sample rows, and replaces each codec that gets
 * some by one made with them (train.c: majority vote over the exceptions,
 * chunk j enabled iff hits * e_j > exceptions, kept only when the saving
 * scaled to the `nrows` of the data set exceeds the D * C bytes of the
 * Xval table). hasx[q] (may be NULL): 1 iff codecs[q] now has Xvals. The
 * result does not depend on nthreads. */
ibp_status_t ibpi_train_xvals(const uint8_t *rows, uint64_t row_bytes, const ibp_sample_t *s,
			     uint64_t nrows, ibp_codec_t **codecs, unsigned ncodecs, int nthreads,
			     uint8_t *hasx);

/* Sums ibp_row_size over the sample rows under cluster 0 of each of
 * `ncodecs` codecs: sizes[q] = total bytes, nonraw[q] (may be NULL) = rows
 * not stored raw. */
ibp_status_t ibpi_train_sizes(const uint8_t *rows, uint64_t row_bytes, const ibp_sample_t *s,
			     ibp_codec_t *const *codecs, unsigned ncodecs, int nthreads,
			     uint64_t *sizes, uint64_t *nonraw);

/* Estimated encoded bytes of all nrows rows: sample_bytes scaled from the
 * sample_rows to nrows, plus flags (1 byte a row), cluster ids (1 byte a
 * row when nclusters > 1) and Mask + Bitval (2 * nclusters * D * C), + the
 * Xvals (nclusters * D * C) when xval is nonzero. */
double ibpi_train_total(uint64_t sample_bytes, uint64_t sample_rows, uint64_t nrows,
		       uint64_t row_bytes, unsigned c, unsigned nclusters, int xval);

#endif /* IBP_TRAIN_INTERNAL_H */
