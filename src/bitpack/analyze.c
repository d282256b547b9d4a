/* analyze.c - the `ibp analyze` report: per-bit invariance and the encoded
 * size at every chunk size x threshold, from the training sample. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/analyze.h"
#include "ibp/codec.h"
#include "util/error.h"
#include "bitpack/train_internal.h"

#define ANALYZE_CODEC_BUDGET (256ull << 20) /* rough cap on live codec tables */

void ibp_analysis_free(ibp_analysis_t *a)
{
	if (!a)
		return;
	free(a->bit_ones);
	free(a->bit_majority);
	free(a->mask);
	free(a->bitval);
	free(a->cells);
	free(a);
}

static uint64_t popc8(uint8_t v)
{
	uint64_t n = 0;
	for (; v; v &= (uint8_t)(v - 1))
		n++;
	return n;
}

/* Mask bits inside the row (the codec's padding bits are not in `mask`). */
static uint64_t mask_bits(const uint8_t *mask, uint64_t R)
{
	uint64_t n = 0;
	for (uint64_t p = 0; p < R; p++)
		n += popc8(mask[p]);
	return n;
}

/* Sizes of every threshold at chunk size C, with the Xvals training would
 * give each Mask (when xval), codecs built in batches so that their tables
 * stay within ANALYZE_CODEC_BUDGET. Thresholds whose Mask equals the
 * previous one's reuse its sizes. hx[i]: the codec of threshold i has Xvals. */
static ibp_status_t sizes_at(const uint8_t *rows, uint64_t R, uint64_t nrows,
			     const ibp_sample_t *s, unsigned C, const uint8_t *bm, const uint8_t *bv,
			     const unsigned *uq, unsigned nT, int nthreads, int xval, uint64_t *sz,
			     uint64_t *nr, uint8_t *hx)
{
	const uint64_t D = (R + C - 1) / C;
	uint64_t tb = ANALYZE_CODEC_BUDGET / (D * 112 + 5 * D * C);
	if (tb < 1)
		tb = 1;
	ibp_codec_t *cod[IBP_SWEEP_N + 1];
	unsigned at[IBP_SWEEP_N + 1];
	uint64_t qs[IBP_SWEEP_N + 1], qn[IBP_SWEEP_N + 1];
	uint8_t qh[IBP_SWEEP_N + 1] = { 0 };
	ibp_status_t st = IBP_OK;
	for (unsigned i0 = 0; i0 < nT && st == IBP_OK; i0 += (unsigned)tb) {
		unsigned i1 = i0 + tb < nT ? i0 + (unsigned)tb : nT, nq = 0;
		for (unsigned i = i0; i < i1 && st == IBP_OK; i++) {
			if (uq[i] != i)
				continue;
			st = ibpi_train_make_codec(R, C, 1, bm + (uint64_t)i * R, bv + (uint64_t)i * R,
						  NULL, &cod[nq]);
			if (st == IBP_OK)
				at[i] = nq++;
		}
		if (st == IBP_OK && xval)
			st = ibpi_train_xvals(rows, R, s, nrows, cod, nq, nthreads, qh);
		if (st == IBP_OK)
			st = ibpi_train_sizes(rows, R, s, cod, nq, nthreads, qs, qn);
		for (unsigned q = 0; q < nq; q++)
			ibp_codec_free(cod[q]);
		for (unsigned i = i0; i < i1 && st == IBP_OK; i++) {
			sz[i] = uq[i] == i ? qs[at[i]] : sz[uq[i]];
			nr[i] = uq[i] == i ? qn[at[i]] : nr[uq[i]];
			hx[i] = uq[i] == i ? qh[at[i]] : hx[uq[i]];
		}
	}
	return st;
}

ibp_status_t ibp_analyze(const void *rows, uint64_t nrows, uint64_t row_bytes,
			 const ibp_train_opts_t *opts, ibp_analysis_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "analyze: out is NULL");
	*out = NULL;
	ibp_train_opts_t o;
	IBP_TRY(ibpi_train_check(rows, nrows, row_bytes, opts, &o));
	const uint64_t R = row_bytes;

	/* Thresholds: the sweep, plus the given T (kept ascending). */
	double thr[IBP_SWEEP_N + 1];
	unsigned nT = 0;
	int have = o.threshold < 0;
	for (unsigned i = 0; i < IBP_SWEEP_N; i++) {
		double t = (IBP_SWEEP_FIRST + IBP_SWEEP_STEP * i) / 100.0;
		if (!have && o.threshold < t) {
			thr[nT++] = o.threshold;
			have = 1;
		}
		if (o.threshold == t)
			have = 1;
		thr[nT++] = t;
	}
	if (!have)
		thr[nT++] = o.threshold;

	ibp_sample_t s = { 0, NULL };
	ibp_status_t st = IBP_OK;
	ibp_analysis_t *a = calloc(1, sizeof(*a));
	uint64_t *counts = malloc(8 * R * sizeof(uint64_t));
	uint8_t *bm = malloc(2 * (uint64_t)nT * R), *bv = bm ? bm + (uint64_t)nT * R : NULL;
	if (!a || !counts || !bm) {
		st = ibpi_fail(IBP_ERR_NOMEM, "analyze: report for %llu-byte rows", (unsigned long long)R);
		goto out;
	}
	a->nrows = nrows;
	a->row_bytes = R;
	a->nthresholds = nT;
	a->ncells = 4 * nT;
	a->bit_ones = calloc(8 * R, sizeof(double));
	a->bit_majority = calloc(8 * R, sizeof(double));
	a->mask = malloc(R);
	a->bitval = malloc(R);
	a->cells = calloc(a->ncells, sizeof(ibp_analysis_cell_t));
	if (!a->bit_ones || !a->bit_majority || !a->mask || !a->bitval || !a->cells) {
		st = ibpi_fail(IBP_ERR_NOMEM, "analyze: report for %llu-byte rows", (unsigned long long)R);
		goto out;
	}

	st = ibpi_train_sample(nrows, R, o.sample, o.seed, &s);
	if (st != IBP_OK)
		goto out;
	a->sample_rows = s.n;
	st = ibp_train_count(rows, R, s.idx, s.n, o.nthreads, counts);
	if (st != IBP_OK)
		goto out;
	for (uint64_t j = 0; j < 8 * R && s.n; j++) {
		double f = (double)counts[j] / (double)s.n;
		a->bit_ones[j] = f;
		a->bit_majority[j] = f >= 0.5 ? f : 1.0 - f;
	}

	unsigned uq[IBP_SWEEP_N + 1];
	for (unsigned i = 0; i < nT; i++) {
		uint64_t off = (uint64_t)i * R;
		ibp_train_mask(counts, s.n, R, thr[i], bm + off, bv + off);
		uq[i] = i;
		if (i > 0 && !memcmp(bm + off - R, bm + off, R) && !memcmp(bv + off - R, bv + off, R))
			uq[i] = uq[i - 1];
	}
	static const unsigned cs[4] = { 1, 2, 4, 8 };
	for (unsigned ci = 0; ci < 4; ci++) {
		uint64_t sz[IBP_SWEEP_N + 1], nr[IBP_SWEEP_N + 1];
		uint8_t hx[IBP_SWEEP_N + 1];
		st = sizes_at(rows, R, nrows, &s, cs[ci], bm, bv, uq, nT, o.nthreads, o.xval, sz, nr, hx);
		if (st != IBP_OK)
			goto out;
		for (unsigned i = 0; i < nT; i++) {
			ibp_analysis_cell_t *c = &a->cells[ci * nT + i];
			c->chunk_bytes = cs[ci];
			c->threshold = thr[i];
			c->invariant_bits = mask_bits(bm + (uint64_t)i * R, R);
			c->sample_bytes = sz[i];
			c->sample_nonraw = nr[i];
			c->metadata_bytes = (2u + hx[i]) * ((R + cs[ci] - 1) / cs[ci] * cs[ci]);
			c->predicted_bytes = ibpi_train_total(sz[i], s.n, nrows, R, cs[ci], 1, hx[i]);
		}
	}
	/* Cells run C ascending, T ascending: <= keeps the later (larger) on ties. */
	a->best = 0;
	for (unsigned q = 1; q < a->ncells; q++)
		if (a->cells[q].predicted_bytes <= a->cells[a->best].predicted_bytes)
			a->best = q;

	a->threshold = o.threshold < 0 ? a->cells[a->best].threshold : o.threshold;
	unsigned ti = 0;
	while (ti + 1 < nT && thr[ti] != a->threshold)
		ti++;
	memcpy(a->mask, bm + (uint64_t)ti * R, R);
	memcpy(a->bitval, bv + (uint64_t)ti * R, R);
	a->invariant_bits = mask_bits(a->mask, R);
	a->invariant_fraction = (double)a->invariant_bits / (8.0 * (double)R);
out:
	free(s.idx);
	free(counts);
	free(bm);
	if (st != IBP_OK) {
		ibp_analysis_free(a);
		return st;
	}
	*out = a;
	return IBP_OK;
}

ibp_status_t ibp_analysis_lane_fraction(const ibp_analysis_t *a, unsigned elem_bytes,
					double *frac)
{
	if (!a || !frac || elem_bytes < 1 || elem_bytes > 16)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "analysis_lane_fraction: elem_bytes %u not in 1..16",
				elem_bytes);
	for (unsigned i = 0; i < 8 * elem_bytes; i++) {
		uint64_t inv = 0, tot = 0;
		for (uint64_t p = i / 8; p < a->row_bytes; p += elem_bytes) {
			tot++;
			inv += (a->mask[p] >> (i % 8)) & 1;
		}
		frac[i] = tot ? (double)inv / (double)tot : 0.0;
	}
	return IBP_OK;
}
