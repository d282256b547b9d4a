/* test_analyze.c - ibp_analyze: per-bit statistics on hand-built data, cell
 * sizes against brute force, agreement with ibp_codec_train, thresholds
 * outside the sweep, element lanes, tiny inputs and invalid arguments. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fixtures.h"
#include "testutil.h"

static const unsigned CHUNKS[4] = { 1, 2, 4, 8 };

static ibp_analysis_t *analyze(const void *rows, uint64_t n, uint64_t R, double T, double sample)
{
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.threshold = T;
	o.sample = sample;
	ibp_analysis_t *a = NULL;
	cr_assert_eq(ibp_analyze(rows, n, R, &o, &a), IBP_OK, "%s", ibp_last_error());
	cr_assert_not_null(a);
	return a;
}

static ibp_codec_t *train(const void *rows, uint64_t n, uint64_t R, unsigned C, double T)
{
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.chunk_bytes = C;
	o.threshold = T;
	o.xval = 2; /* analysis cells fit Xvals wherever they pay */
	ibp_codec_t *c = NULL;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK, "%s", ibp_last_error());
	return c;
}

/* Sum of ibp_row_size over all rows and the number not stored raw. */
static uint64_t row_sizes(const ibp_codec_t *c, const uint8_t *rows, uint64_t n, uint64_t R,
			  uint64_t *nonraw)
{
	uint64_t sum = 0;
	*nonraw = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t len;
		uint8_t mode;
		cr_assert_eq(ibp_row_size(c, rows + i * R, 0, &len, &mode), IBP_OK);
		sum += len;
		*nonraw += mode != IBP_ROW_RAW;
	}
	return sum;
}

Test(analyze, bits_hand_built)
{
	/* Byte 0 bit b set in ones[b] of 10 rows; byte 1 = 0x0f | (odd rows: 0x80). */
	static const unsigned ones[8] = { 10, 8, 2, 5, 0, 9, 1, 7 };
	uint8_t rows[20];
	for (unsigned i = 0; i < 10; i++) {
		uint8_t b0 = 0;
		for (unsigned b = 0; b < 8; b++)
			if (i < ones[b])
				b0 |= (uint8_t)(1u << b);
		rows[2 * i] = b0;
		rows[2 * i + 1] = (uint8_t)(0x0f | (i & 1) << 7);
	}
	ibp_analysis_t *a = analyze(rows, 10, 2, 0.8, 0);
	cr_assert_eq(a->nrows, 10u);
	cr_assert_eq(a->row_bytes, 2u);
	cr_assert_eq(a->sample_rows, 10u);
	cr_assert_eq(a->threshold, 0.8);
	for (unsigned b = 0; b < 8; b++) {
		double f = ones[b] / 10.0;
		cr_assert_float_eq(a->bit_ones[b], f, 1e-12);
		cr_assert_float_eq(a->bit_majority[b], f >= 0.5 ? f : 1 - f, 1e-12);
		double g = b < 4 ? 1.0 : b < 7 ? 0.0 : 0.5;
		cr_assert_float_eq(a->bit_ones[8 + b], g, 1e-12);
	}
	cr_assert_eq(a->mask[0], 0x77);
	cr_assert_eq(a->bitval[0], 0x23);
	cr_assert_eq(a->mask[1], 0x7f);
	cr_assert_eq(a->bitval[1], 0x0f);
	cr_assert_eq(a->invariant_bits, 13u);
	cr_assert_float_eq(a->invariant_fraction, 13 / 16.0, 1e-12);
	/* 0.8 is in the sweep: 7 thresholds, 28 cells. */
	cr_assert_eq(a->nthresholds, 7u);
	cr_assert_eq(a->ncells, 28u);
	ibp_analysis_free(a);
}

/* Every cell's sizes equal brute force over a codec trained at that C, T. */
Test(analyze, cells_match_brute_force)
{
	const uint64_t n = 600, R = 45;
	uint8_t *rows = graded_rows(4, n, R);
	ibp_analysis_t *a = analyze(rows, n, R, -1, 0);
	cr_assert_eq(a->sample_rows, n);
	cr_assert_eq(a->ncells, 28u);
	unsigned nx = 0;
	for (unsigned ci = 0; ci < 4; ci++)
		for (unsigned i = 0; i < 7; i++) {
			const ibp_analysis_cell_t *x = &a->cells[ci * 7 + i];
			double T = (70 + 5 * i) / 100.0;
			cr_assert_eq(x->chunk_bytes, CHUNKS[ci]);
			cr_assert_eq(x->threshold, T);
			ibp_codec_t *c = train(rows, n, R, CHUNKS[ci], T);
			uint64_t nonraw, sum = row_sizes(c, rows, n, R, &nonraw);
			uint64_t W = ibp_codec_nchunks(c) * CHUNKS[ci];
			cr_assert_eq(x->sample_bytes, sum, "C=%u T=%g", CHUNKS[ci], T);
			cr_assert_eq(x->sample_nonraw, nonraw);
			/* the Xval table counts when training gave the codec one */
			uint64_t meta = (2 + (uint64_t)ibp_codec_has_xval(c)) * W;
			cr_assert_eq(x->metadata_bytes, meta);
			cr_assert_float_eq(x->predicted_bytes, (double)(sum + n + meta), 1e-6);
			nx += ibp_codec_has_xval(c);
			uint64_t inv = 0;
			const uint8_t *m = ibp_codec_mask(c, 0);
			for (uint64_t p = 0; p < R; p++)
				inv += (uint64_t)__builtin_popcount(m[p]);
			cr_assert_eq(x->invariant_bits, inv);
			ibp_codec_free(c);
		}
	/* these graded bits give both kinds of cell */
	cr_assert(nx > 0 && nx < 28, "%u of 28 cells with Xvals", nx);
	free(rows);
	ibp_analysis_free(a);
}

/* The best cell is what ibp_codec_train (one cluster) picks. */
Test(analyze, best_matches_training)
{
	const uint64_t n = 800, R = 64;
	tu_rng_t r;
	tu_rng_seed(&r, 8);
	uint8_t *rows[2] = { graded_rows(6, n, R), tu_xcalloc(n * R) };
	tu_gen_rows(&r, TU_F32_SMOOTH, rows[1], n, R);
	for (unsigned d = 0; d < 2; d++) {
		ibp_analysis_t *a = analyze(rows[d], n, R, -1, 0);
		ibp_codec_t *c = train(rows[d], n, R, 0, -1);
		const ibp_analysis_cell_t *b = &a->cells[a->best];
		cr_assert_eq(b->chunk_bytes, ibp_codec_chunk_bytes(c));
		cr_assert_eq(b->threshold, ibp_codec_threshold(c));
		cr_assert_eq(a->threshold, b->threshold);
		for (unsigned q = 0; q < a->ncells; q++)
			cr_assert_geq(a->cells[q].predicted_bytes, b->predicted_bytes);
		cr_assert_eq(memcmp(a->mask, ibp_codec_mask(c, 0), R), 0);
		cr_assert_eq(memcmp(a->bitval, ibp_codec_bitval(c, 0), R), 0);
		ibp_codec_free(c);
		ibp_analysis_free(a);
		free(rows[d]);
	}
}

/* xval = 0: no cell counts an Xval table, and the sizes are those of
 * codecs without Xvals. */
Test(analyze, xval_off)
{
	const uint64_t n = 600, R = 45;
	uint8_t *rows = graded_rows(4, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.xval = 0;
	ibp_analysis_t *a = NULL;
	cr_assert_eq(ibp_analyze(rows, n, R, &o, &a), IBP_OK, "%s", ibp_last_error());
	for (unsigned q = 0; q < a->ncells; q++) {
		const ibp_analysis_cell_t *x = &a->cells[q];
		o.chunk_bytes = x->chunk_bytes;
		o.threshold = x->threshold;
		ibp_codec_t *c;
		cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK);
		cr_assert_eq(ibp_codec_has_xval(c), 0);
		uint64_t W = ibp_codec_nchunks(c) * x->chunk_bytes, nonraw;
		cr_assert_eq(x->metadata_bytes, 2 * W);
		cr_assert_eq(x->sample_bytes, row_sizes(c, rows, n, R, &nonraw));
		ibp_codec_free(c);
	}
	ibp_analysis_free(a);
	free(rows);
}

Test(analyze, threshold_outside_sweep)
{
	const uint64_t n = 300, R = 16;
	uint8_t *rows = graded_rows(1, n, R);
	ibp_analysis_t *a = analyze(rows, n, R, 0.82, 0);
	cr_assert_eq(a->nthresholds, 8u);
	cr_assert_eq(a->ncells, 32u);
	cr_assert_eq(a->threshold, 0.82);
	for (unsigned ci = 0; ci < 4; ci++)
		for (unsigned i = 0; i < 8; i++) {
			double T = a->cells[ci * 8 + i].threshold;
			double want = i < 3 ? (70 + 5 * i) / 100.0 : i == 3 ? 0.82 : (70 + 5 * (i - 1)) / 100.0;
			cr_assert_eq(T, want, "cell %u: %g", i, T);
		}
	ibp_codec_t *c = train(rows, n, R, 1, 0.82);
	cr_assert_eq(memcmp(a->mask, ibp_codec_mask(c, 0), R), 0);
	ibp_codec_free(c);
	ibp_analysis_free(a);
	a = analyze(rows, n, R, 0.5, 0); /* below the sweep: first */
	cr_assert_eq(a->cells[0].threshold, 0.5);
	ibp_analysis_free(a);
	free(rows);
}

/* f32 values in [1, 2): sign and exponent constant, mantissa random. */
Test(analyze, lane_fraction_f32)
{
	const uint64_t n = 500, R = 4 * 33 + 2; /* a trailing half element */
	tu_rng_t r;
	tu_rng_seed(&r, 2);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p += 4) {
			float f = (float)(1.0 + tu_uniform(&r));
			memcpy(rows + i * R + p, &f, R - p < 4 ? R - p : 4);
		}
	ibp_analysis_t *a = analyze(rows, n, R, 1.0, 0);
	double frac[32];
	cr_assert_eq(ibp_analysis_lane_fraction(a, 4, frac), IBP_OK);
	for (unsigned b = 0; b < 32; b++)
		cr_assert_float_eq(frac[b], b >= 23 ? 1.0 : 0.0, 1e-12, "bit %u: %g", b, frac[b]);
	double f8[8];
	cr_assert_eq(ibp_analysis_lane_fraction(a, 1, f8), IBP_OK);
	cr_assert_gt(f8[7], 0.4);
	cr_assert_eq(ibp_analysis_lane_fraction(a, 0, f8), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_analysis_lane_fraction(a, 17, f8), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_analysis_lane_fraction(NULL, 4, frac), IBP_ERR_INVALID_ARG);
	ibp_analysis_free(a);
	free(rows);
}

Test(analyze, sampled)
{
	const uint64_t n = 4000, R = 32;
	uint8_t *rows = graded_rows(3, n, R);
	ibp_analysis_t *a = analyze(rows, n, R, -1, 0.1);
	cr_assert_eq(a->sample_rows, 400u);
	for (unsigned q = 0; q < a->ncells; q++) {
		const ibp_analysis_cell_t *x = &a->cells[q];
		double want = (double)x->sample_bytes * 10.0 + (double)n + (double)x->metadata_bytes;
		cr_assert_float_eq(x->predicted_bytes, want, 1e-6 * want);
	}
	ibp_analysis_free(a);
	free(rows);
}

Test(analyze, zero_rows)
{
	ibp_analysis_t *a = analyze(NULL, 0, 7, -1, 0);
	cr_assert_eq(a->sample_rows, 0u);
	cr_assert_eq(a->invariant_bits, 0u);
	for (unsigned j = 0; j < 56; j++)
		cr_assert_eq(a->bit_majority[j], 0.0);
	for (unsigned q = 0; q < a->ncells; q++) {
		cr_assert_eq(a->cells[q].sample_bytes, 0u);
		cr_assert_float_eq(a->cells[q].predicted_bytes, (double)a->cells[q].metadata_bytes, 1e-9);
	}
	ibp_analysis_free(a);
	ibp_analysis_free(NULL);
}

Test(analyze, invalid_arguments)
{
	uint8_t rows[8] = { 0 };
	ibp_analysis_t *a = (ibp_analysis_t *)rows;
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	cr_assert_eq(ibp_analyze(rows, 2, 4, &o, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_analyze(NULL, 2, 4, &o, &a), IBP_ERR_INVALID_ARG);
	cr_assert_null(a);
	cr_assert_eq(ibp_analyze(rows, 2, 0, &o, &a), IBP_ERR_INVALID_ARG);
	o.threshold = 0.3;
	cr_assert_eq(ibp_analyze(rows, 2, 4, &o, &a), IBP_ERR_INVALID_ARG);
	ibp_train_opts_default(&o);
	o.sample = 2;
	cr_assert_eq(ibp_analyze(rows, 2, 4, &o, &a), IBP_ERR_INVALID_ARG);
	ibp_train_opts_default(&o);
	o.chunk_bytes = 5;
	cr_assert_eq(ibp_analyze(rows, 2, 4, &o, &a), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_analyze(rows, 2, 4, NULL, &a), IBP_OK); /* NULL opts = defaults */
	ibp_analysis_free(a);
}
