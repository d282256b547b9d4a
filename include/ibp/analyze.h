/* ibp/analyze.h - how invariant a data set's bits are and what IBP would
 * make of it at each chunk size and threshold (what `ibp analyze` prints).
 *
 * Typical use:
 *   ibp_train_opts_t o; ibp_train_opts_default(&o);
 *   ibp_analysis_t *a; ibp_analyze(rows, n, R, &o, &a);
 *   ... a->cells[a->best], a->bit_majority[8 * p + b] ...
 *   ibp_analysis_free(a);
 *
 * The analysis uses the same deterministic row sample, counts, Mask/Bitval
 * rule, Xvals (unless opts->xval = 0) and size accounting as
 * ibp_codec_train (one cluster). The sample:
 * opts->sample = f takes round(f * nrows) rows (at least 1); auto (0) takes
 * all rows when nrows * row_bytes <= 64 MiB, else about 64 MiB of rows.
 * Rows are drawn one per equal stratum of [0, nrows) from opts->seed, so the
 * same data and seed always give the same report.
 */
#ifndef IBP_ANALYZE_H
#define IBP_ANALYZE_H

#include <stdint.h>
#include "codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One (chunk size, threshold) pair with a single cluster, measured on the
 * sample. */
typedef struct ibp_analysis_cell {
	unsigned chunk_bytes;    /* C */
	double threshold;        /* T */
	uint64_t invariant_bits; /* Mask bits set among the row's 8 * row_bytes bits
				    (padding bits of a partial last chunk not counted) */
	uint64_t sample_bytes;   /* actual: sum of ibp_row_size over the sample rows,
				    with the Xvals training fits for this Mask */
	uint64_t sample_nonraw;  /* sample rows stored smaller than raw */
	uint64_t metadata_bytes; /* Mask + Bitval: 2 * D * C, + Xval: D * C when
				    the cell's codec has Xvals */
	/* Predicted size of the whole data set: sample_bytes * nrows /
	 * sample_rows, + 1 flags byte per row, + metadata_bytes. This is the
	 * quantity ibp_codec_train minimises (with clusters = 1). */
	double predicted_bytes;
} ibp_analysis_cell_t;

typedef struct ibp_analysis {
	uint64_t nrows;       /* rows analysed (the whole data set) */
	uint64_t row_bytes;   /* R */
	uint64_t sample_rows; /* rows the statistics come from */
	/* Threshold of the per-bit report below: opts->threshold when given,
	 * else the threshold of cells[best]. */
	double threshold;
	/* 8 * row_bytes entries; entry 8*p + b is about bit b of byte p:
	 * bit_ones = fraction of sample rows with the bit set, bit_majority =
	 * fraction holding the bit's majority value (0.5 .. 1; 1 = constant).
	 * The bit is invariant at T when bit_majority >= T (ibp_codec_train's
	 * rule; exact in `mask`). Both 0 when the sample is empty. */
	double *bit_ones;
	double *bit_majority;
	/* Mask / Bitval at `threshold`, row_bytes bytes each (byte p, bit b). */
	uint8_t *mask;
	uint8_t *bitval;
	uint64_t invariant_bits;   /* bits set in mask */
	double invariant_fraction; /* invariant_bits / (8 * row_bytes) */
	/* Chunk sizes 1, 2, 4, 8 (major) x thresholds ascending (minor): the
	 * sweep 0.70, 0.75 ... 1.00, plus opts->threshold when given and not
	 * one of them. */
	unsigned nthresholds;
	unsigned ncells; /* 4 * nthresholds */
	ibp_analysis_cell_t *cells;
	/* Index of the smallest predicted_bytes (ties: larger C, then larger T). */
	unsigned best;
} ibp_analysis_t;

/* Analyses `nrows` rows of `row_bytes` bytes at `rows`. opts (NULL =
 * defaults) gives sample, seed, nthreads, xval and optionally a threshold;
 * chunk_bytes and clusters are validated but every chunk size is reported
 * and the analysis uses one cluster. On success *out owns a new report
 * (free with ibp_analysis_free). Errors: IBP_ERR_INVALID_ARG (as
 * ibp_codec_train, or out NULL), IBP_ERR_NOMEM. Thread-safe. */
ibp_status_t ibp_analyze(const void *rows, uint64_t nrows, uint64_t row_bytes,
			 const ibp_train_opts_t *opts, ibp_analysis_t **out);

/* Frees a report; NULL is a no-op. */
void ibp_analysis_free(ibp_analysis_t *a);

/* Per bit of an element of `elem_bytes` bytes (1..16, little-endian, e.g. 4
 * for f32: index 31 is the sign bit): frac[i] = fraction of the row's
 * elements whose bit i is invariant at a->threshold. frac has
 * 8 * elem_bytes entries; a trailing partial element counts for the bits it
 * has. Errors: IBP_ERR_INVALID_ARG. */
ibp_status_t ibp_analysis_lane_fraction(const ibp_analysis_t *a, unsigned elem_bytes,
					double *frac);

#ifdef __cplusplus
}
#endif
#endif /* IBP_ANALYZE_H */
