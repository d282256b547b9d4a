/* train.c - Mask/Bitval training (paper §4.1), Xvals (docs/FORMAT.md §1)
 * and the search over chunk size, threshold T and clusters (§6.5), by
 * actual encoded size.
 *
 * Outline of ibp_codec_train:
 * 1. Sample: all rows when the data is <= 64 MiB, else about 64 MiB of rows
 *    (at least 1); opts.sample = f takes round(f * N) rows instead. The
 *    sample is stratified: the m picked rows are one uniform row from each
 *    of m equal strata of [0, N), drawn from opts.seed, so it is
 *    deterministic and spread over the whole data set.
 * 2. Counts: per byte position p and bit b, the number of sample rows with
 *    the bit set. Chunk words are little-endian, so bit (8*i + b) of chunk
 *    j at chunk size C is bit b of byte j*C + i: one byte-level count (and
 *    one byte-level Mask per T) serves every chunk size.
 * 3. Mask/Bitval per T (see ibp_train_mask), codecs per (C, T), their Xvals
 *    (fit_xvals: per chunk position the majority value of the invariant
 *    bits among the sample's exceptions, enabled where its hits save more
 *    bits than the hit bits cost), and the sum of ibp_row_size over the
 *    sample rows for each: T and C with the smallest estimated total (rows
 *    scaled to the data set + flags + cluster ids + masks, Xvals included)
 *    win; ties go to the larger C and the larger T.
 * 4. Clusters (k > 1), fit on an evenly strided part of the sample of at
 *    most ~16 MiB and 2M rows (every step below is a pass per row): k-means
 *    on bit vectors (Hamming distance, centroids are per-bit majorities,
 *    k-means++ seeding from opts.seed, 8 rounds), then per-cluster counts
 *    and per-cluster T sweeps, then rows move to the cluster
 *    ibp_choose_cluster would pick and the clusters are refit (at most 2
 *    rounds, kept while the total shrinks). The total then counts each row
 *    under its best cluster plus a cluster id byte per row. clusters = 0
 *    tries k = 1, 2, 4, 8 (at most the sample's rows); k > 1 keep the chunk
 *    size k = 1 chose. Fewer distinct rows than k give fewer clusters.
 *    The codec's single threshold is the T of the cluster with most rows.
 *
 * Everything is deterministic for a given seed and independent of the
 * thread count (threads only split integer sums).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/codec.h"
#include "bitpack/mask_rule.h"
#include "bitpack/codec_internal.h"
#include "util/error.h"
#include "util/opts.h"
#include "util/parallel.h"
#include "bitpack/train_internal.h"

#define CL_BYTES (16ull << 20) /* clusters (k > 1) are fit on at most ~16 MiB */
#define CL_ROWS (1ull << 21)   /* ... and 2M rows of the sample (per-row costs) */
#define KM_BYTES (16ull << 20) /* k-means fits on at most ~16 MiB of the sample */
#define KM_ROUNDS 8u
#define REFIT_ROUNDS 2u
#define COUNT_COLS_MIN 4096u  /* rows this long: threads split columns, not rows */
#define CODEC_BUDGET (256ull << 20) /* rough cap on codec tables alive in one size pass */

void ibp_train_opts_default(ibp_train_opts_t *o)
{
	if (!o)
		return;
	o->size = sizeof(*o);
	o->chunk_bytes = 0;
	o->threshold = -1.0;
	o->sample = 0.0;
	o->seed = 0x1B9;
	o->clusters = 1;
	o->nthreads = 0;
	o->xval = 1;
}

ibp_status_t ibpi_train_check(const void *rows, uint64_t nrows, uint64_t row_bytes,
			     const ibp_train_opts_t *opts, ibp_train_opts_t *o)
{
	IBP_TRY(IBPI_OPTS_CHECK(opts, "train", "ibp_train_opts_t"));
	if (opts)
		*o = *opts;
	else
		ibp_train_opts_default(o);
	if (row_bytes == 0 || row_bytes > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: row_bytes %llu not in [1, 2^40]",
				(unsigned long long)row_bytes);
	if (nrows > 0 && !rows)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: rows is NULL with nrows %llu",
				(unsigned long long)nrows);
	if (nrows > UINT64_MAX / row_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: nrows * row_bytes overflows");
	unsigned c = o->chunk_bytes;
	if (c != 0 && c != 1 && c != 2 && c != 4 && c != 8)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: chunk_bytes %u not 0, 1, 2, 4 or 8", c);
	double t = o->threshold;
	if (isnan(t) || (!(t < 0) && (t < 0.5 || t > 1.0)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: threshold %g not in [0.5, 1] (or < 0 = auto)", t);
	if (isnan(o->sample) || o->sample < 0 || o->sample > 1.0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: sample %g not in (0, 1] (or 0 = auto)",
				o->sample);
	if (o->clusters > IBP_MAX_CLUSTERS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: clusters %u above %u", o->clusters,
				IBP_MAX_CLUSTERS);
	if (o->nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: nthreads %d < 0", o->nthreads);
	if (o->xval < 0 || o->xval > 2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: xval %d not 0, 1 or 2", o->xval);
	return IBP_OK;
}

/* Thread count for `bytes` of work under opts.nthreads (0 = online CPUs):
 * small jobs run on fewer threads. */
static int ibpi_train_threads(int nthreads, uint64_t bytes)
{
	uint64_t cap = bytes >> 18; /* at least ~256 KiB of rows a thread */
	return ibpi_parallel_threads(nthreads, cap ? cap : 1);
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Start of stratum i of m over [0, n): floor(i * n / m) without overflow. */
static uint64_t stratum(uint64_t i, uint64_t n, uint64_t m)
{
	return (uint64_t)(((unsigned __int128)i * n) / m);
}

ibp_status_t ibpi_train_sample(uint64_t nrows, uint64_t row_bytes, double frac, uint64_t seed,
			      ibp_sample_t *s)
{
	s->n = 0;
	s->idx = NULL;
	if (nrows == 0)
		return IBP_OK;
	uint64_t m;
	if (frac <= 0) {
		uint64_t fit = IBP_SAMPLE_AUTO_BYTES / row_bytes;
		m = nrows <= fit ? nrows : (fit ? fit : 1);
	} else {
		double x = nearbyint(frac * (double)nrows);
		m = x < 1 ? 1 : x >= (double)nrows ? nrows : (uint64_t)x;
	}
	s->n = m;
	if (m == nrows)
		return IBP_OK;
	s->idx = malloc(m * sizeof(uint64_t));
	if (!s->idx)
		return ibpi_fail(IBP_ERR_NOMEM, "train: sample of %llu rows", (unsigned long long)m);
	/* Each stratum has >= 1 row since m < nrows. */
	for (uint64_t i = 0; i < m; i++) {
		uint64_t lo = stratum(i, nrows, m), hi = stratum(i + 1, nrows, m);
		s->idx[i] = lo + splitmix64(seed ^ splitmix64(i)) % (hi - lo);
	}
	return IBP_OK;
}

/* ---- bit counting ---------------------------------------------------- */

typedef struct count_ctx {
	const uint8_t *rows;
	uint64_t R;
	const uint64_t *idx;
	uint64_t n;
	uint64_t tab[256]; /* bit b of v -> byte lane b: adds count 8 bits at once */
	uint64_t *acc;     /* R lane words (8 counters of 8 bits) per thread, or shared */
	uint64_t *cnt;     /* 8R counts per thread, or the shared result */
} count_ctx_t;

static void count_flush(uint64_t *acc, uint64_t *cnt, uint64_t R)
{
	for (uint64_t p = 0; p < R; p++) {
		uint64_t a = acc[p];
		if (!a)
			continue;
		acc[p] = 0;
		uint64_t *c = cnt + 8 * p;
		for (unsigned b = 0; b < 8; b++)
			c[b] += (a >> (8 * b)) & 0xff;
	}
}

/* Counts rows [beg, end) over byte columns [p0, p1) into acc/cnt (which
 * are indexed from p0). */
static void count_rows(const count_ctx_t *x, uint64_t beg, uint64_t end, uint64_t p0,
		       uint64_t p1, uint64_t *acc, uint64_t *cnt)
{
	const uint64_t R = x->R, w = p1 - p0, *tab = x->tab, *idx = x->idx;
	unsigned pend = 0; /* rows in the lanes: flushed before a lane can pass 255 */
	uint64_t i = beg;
#define ROW(i) (x->rows + (idx ? idx[i] : (i)) * R + p0)
	for (; i + 4 <= end; i += 4) {
		const uint8_t *r0 = ROW(i), *r1 = ROW(i + 1), *r2 = ROW(i + 2), *r3 = ROW(i + 3);
		for (uint64_t p = 0; p < w; p++)
			acc[p] += tab[r0[p]] + tab[r1[p]] + tab[r2[p]] + tab[r3[p]];
		pend += 4;
		if (pend >= 252) {
			count_flush(acc, cnt, w);
			pend = 0;
		}
	}
	for (; i < end; i++) {
		const uint8_t *r0 = ROW(i);
		for (uint64_t p = 0; p < w; p++)
			acc[p] += tab[r0[p]];
	}
#undef ROW
	count_flush(acc, cnt, w);
}

/* Short rows: threads split the rows, each with its own counters. */
static void count_by_rows(void *vx, uint64_t beg, uint64_t end, int tid)
{
	count_ctx_t *x = vx;
	count_rows(x, beg, end, 0, x->R, x->acc + (uint64_t)tid * x->R,
		   x->cnt + (uint64_t)tid * 8 * x->R);
}

/* Long rows: threads split the byte columns and count straight into the
 * shared result (disjoint), so memory does not grow with threads. */
static void count_by_cols(void *vx, uint64_t beg, uint64_t end, int tid)
{
	count_ctx_t *x = vx;
	(void)tid;
	count_rows(x, 0, x->n, beg, end, x->acc + beg, x->cnt + 8 * beg);
}

ibp_status_t ibp_train_count(const uint8_t *rows, uint64_t row_bytes, const uint64_t *idx,
			     uint64_t n, int nthreads, uint64_t *counts)
{
	const uint64_t R = row_bytes;
	memset(counts, 0, 8 * R * sizeof(uint64_t));
	if (n == 0)
		return IBP_OK;
	int nt = ibpi_train_threads(nthreads, n * R);
	int by_cols = nt > 1 && R >= COUNT_COLS_MIN;
	if (!by_cols && (uint64_t)nt > n)
		nt = (int)n;
	count_ctx_t *x = malloc(sizeof(*x));
	if (!x)
		return ibpi_fail(IBP_ERR_NOMEM, "train: count context");
	x->rows = rows;
	x->R = R;
	x->idx = idx;
	x->n = n;
	for (unsigned v = 0; v < 256; v++) {
		uint64_t w = 0;
		for (unsigned b = 0; b < 8; b++)
			w |= (uint64_t)((v >> b) & 1) << (8 * b);
		x->tab[v] = w;
	}
	ibp_status_t st = IBP_OK;
	x->acc = calloc(by_cols ? R : (uint64_t)nt * R, sizeof(uint64_t));
	x->cnt = by_cols ? counts : calloc((uint64_t)nt * 8 * R, sizeof(uint64_t));
	if (!x->acc || !x->cnt) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: counters for %d threads x %llu bytes", nt,
			      (unsigned long long)R);
		goto out;
	}
	if (by_cols) {
		st = ibpi_parallel_for(nt, R, count_by_cols, x);
		goto out;
	}
	st = ibpi_parallel_for(nt, n, count_by_rows, x);
	for (int t = 0; st == IBP_OK && t < nt; t++) {
		const uint64_t *c = x->cnt + (uint64_t)t * 8 * R;
		for (uint64_t j = 0; j < 8 * R; j++)
			counts[j] += c[j];
	}
out:
	free(x->acc);
	if (!by_cols)
		free(x->cnt);
	free(x);
	return st;
}

/* ---- Mask / Bitval ---------------------------------------------------- */

uint64_t ibpi_train_need(double t, uint64_t n)
{
	double pct = t * 100.0, r = nearbyint(pct);
	/* Percent thresholds (the sweep, 0.8, 1.0 ...) in integers: T*n in
	 * doubles can land just above an integer and drop a bit. */
	if (fabs(pct - r) < 1e-9 && n <= UINT64_MAX / 128)
		return ((uint64_t)r * n + 99) / 100;
	double x = ceil(t * (double)n);
	return x >= (double)n ? n : (uint64_t)x;
}

/* Paper §4.1 with non-strict inequalities: of the n rows, a bit is
 * invariant with Bitval 1 when count >= T*n, and invariant with Bitval 0
 * when n - count >= T*n (i.e. count <= (1-T)*n); i.e. when at least a
 * fraction T of the rows agree on it. T = 1.0 thus selects exactly the bits
 * constant over all n rows (the paper's strict "> T" would select none).
 * For T = 0.5 and count = n/2 the 1 test wins. n = 0: nothing is invariant. */
void ibp_train_mask(const uint64_t *counts, uint64_t n, uint64_t row_bytes, double t,
		    uint8_t *mask, uint8_t *bitval)
{
	const uint64_t need = ibpi_train_need(t, n);
	for (uint64_t p = 0; p < row_bytes; p++)
		ibp_mask_rule(counts + 8 * p, n, need, &mask[p], &bitval[p]); /* shared with the CUDA trainer */
}

ibp_status_t ibpi_train_make_codec(uint64_t row_bytes, unsigned c, unsigned nclusters,
				  const uint8_t *mask, const uint8_t *bitval, const uint8_t *xval,
				  ibp_codec_t **out)
{
	const uint64_t R = row_bytes, W = (R + c - 1) / c * c;
	uint8_t *m = malloc(2 * nclusters * W);
	if (!m)
		return ibpi_fail(IBP_ERR_NOMEM, "train: masks of %u clusters", nclusters);
	uint8_t *v = m + nclusters * W;
	for (unsigned k = 0; k < nclusters; k++) {
		/* Padding bytes of the last chunk: invariant zeros, as the codec requires. */
		memcpy(m + k * W, mask + k * R, R);
		memset(m + k * W + R, 0xff, W - R);
		memcpy(v + k * W, bitval + k * R, R);
		memset(v + k * W + R, 0, W - R);
	}
	ibp_status_t st = ibp_codec_create_ex(R, c, nclusters, m, v, xval, out);
	free(m);
	return st;
}

double ibpi_train_total(uint64_t sample_bytes, uint64_t sample_rows, uint64_t nrows,
		       uint64_t row_bytes, unsigned c, unsigned nclusters, int xval)
{
	double rows = 0;
	if (sample_rows)
		rows = sample_rows == nrows ? (double)sample_bytes
					    : (double)sample_bytes * ((double)nrows / (double)sample_rows);
	double meta = (xval ? 3.0 : 2.0) * nclusters * (double)((row_bytes + c - 1) / c * c);
	return rows + (double)nrows * (nclusters > 1 ? 2 : 1) + meta;
}

/* ---- size passes ------------------------------------------------------ */

/* Sample positions [0, n), cluster-major: positions [gb[g], gb[g+1]) hold
 * the rows of cluster g; ids maps a position to a row id (NULL: itself). */
typedef struct evalset {
	uint64_t n;
	const uint64_t *ids;
	unsigned k;
	uint64_t gb[IBP_MAX_CLUSTERS + 1];
} evalset_t;

typedef struct sizes_ctx {
	const uint8_t *rows;
	uint64_t R;
	const evalset_t *es;
	ibp_codec_t *const *codecs;
	const unsigned *qb; /* codecs of cluster g: [qb[g], qb[g+1]) */
	unsigned nq;
	uint64_t stride;    /* per thread: nq sizes, nq non-raw counts, padding */
	uint64_t *sz;
	ibp_status_t *st;   /* per thread */
} sizes_ctx_t;

static void sizes_worker(void *vx, uint64_t beg, uint64_t end, int tid)
{
	sizes_ctx_t *x = vx;
	const evalset_t *es = x->es;
	uint64_t *sz = x->sz + (uint64_t)tid * x->stride, *nr = sz + x->nq;
	unsigned g = 0;
	while (es->gb[g + 1] <= beg)
		g++;
	for (uint64_t i = beg; i < end; i++) {
		while (i >= es->gb[g + 1])
			g++;
		const uint8_t *row = x->rows + (es->ids ? es->ids[i] : i) * x->R;
		for (unsigned q = x->qb[g]; q < x->qb[g + 1]; q++) {
			uint64_t len;
			uint8_t mode;
			ibp_status_t s = ibp_row_size(x->codecs[q], row, 0, &len, &mode);
			if (s != IBP_OK) {
				x->st[tid] = s;
				return;
			}
			sz[q] += len;
			nr[q] += mode != IBP_ROW_RAW;
		}
	}
}

static ibp_status_t run_sizes(const uint8_t *rows, uint64_t R, const evalset_t *es,
			      ibp_codec_t *const *codecs, const unsigned *qb, int nthreads,
			      uint64_t *sizes, uint64_t *nonraw)
{
	unsigned nq = qb[es->k];
	memset(sizes, 0, nq * sizeof(uint64_t));
	if (nonraw)
		memset(nonraw, 0, nq * sizeof(uint64_t));
	if (es->n == 0 || nq == 0)
		return IBP_OK;
	int nt = ibpi_train_threads(nthreads, es->n * R * (nq / es->k + 1));
	/* Thread slots a cache line apart: they are written for every row. */
	sizes_ctx_t x = { rows, R, es, codecs, qb, nq, (2 * (uint64_t)nq + 15) / 8 * 8, NULL, NULL };
	x.sz = calloc((uint64_t)nt * x.stride, sizeof(uint64_t));
	x.st = calloc((uint64_t)nt, sizeof(ibp_status_t));
	ibp_status_t st = IBP_OK;
	if (!x.sz || !x.st) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: size sums");
		goto out;
	}
	st = ibpi_parallel_for(nt, es->n, sizes_worker, &x);
	for (int t = 0; st == IBP_OK && t < nt; t++) {
		if (x.st[t] != IBP_OK) {
			st = ibpi_fail(x.st[t], "train: ibp_row_size failed: %s", ibp_status_string(x.st[t]));
			goto out;
		}
		for (unsigned q = 0; q < nq; q++) {
			sizes[q] += x.sz[(uint64_t)t * x.stride + q];
			if (nonraw)
				nonraw[q] += x.sz[(uint64_t)t * x.stride + nq + q];
		}
	}
out:
	free(x.sz);
	free(x.st);
	return st;
}

ibp_status_t ibpi_train_sizes(const uint8_t *rows, uint64_t row_bytes, const ibp_sample_t *s,
			     ibp_codec_t *const *codecs, unsigned ncodecs, int nthreads,
			     uint64_t *sizes, uint64_t *nonraw)
{
	evalset_t es = { .n = s->n, .ids = s->idx, .k = 1, .gb = { 0, s->n } };
	unsigned qb[2] = { 0, ncodecs };
	return run_sizes(rows, row_bytes, &es, codecs, qb, nthreads, sizes, nonraw);
}

/* ---- exception values (Xval) ------------------------------------------ */

/* For each codec (one cluster, all with the same chunk size) and chunk
 * position j, x̂_j is the majority value of (x_j & m_j) over the sample rows
 * where chunk j is an exception: a Boyer-Moore vote (pass 1, which also
 * counts the exceptions), then a pass that counts the candidate's hits.
 * The vote leaves cnt copies of the candidate beside pairs of different
 * values, so hits >= cnt: where cnt * e_j > exceptions the chunk pays for
 * sure and pass 2 need not count it; it counts the others (and skips
 * everything when nothing is left to confirm). Rows are split into blocks
 * fixed by the data sizes (never by the thread count) whose votes merge in
 * block order, so the result is deterministic; columns are split too, which
 * keeps long rows parallel. */
#define XV_BUDGET (128ull << 20) /* vote state of all blocks together */
#define XV_BLOCKS 16u            /* at most this many row blocks ... */
#define XV_BLOCK_ROWS 2048u      /* ... of at least this many rows */
#define XV_COLS 4096u            /* chunks per column range */

typedef struct xv_ctx {
	const uint8_t *rows;
	uint64_t R, D;
	unsigned C;
	const evalset_t *es;
	ibp_codec_t *const *codecs;
	const unsigned *qb; /* codecs of group g: [qb[g], qb[g+1]) */
	unsigned nq;
	uint64_t nb, ncr;   /* row blocks per group, column ranges */
	uint64_t *cand, *cnt, *exc; /* [b][q][j]; pass 2: cnt holds the hits */
	const uint64_t *fin;        /* pass 2: [q][j] the merged candidates */
	const uint64_t *lst;        /* pass 2: chunks to count, by codec ... */
	const uint64_t *lb;         /* ... lst[lb[q * ncr + r] .. lb[q * ncr + r + 1]) in range r */
	int pass;
} xv_ctx_t;

/* One vote of pass 1. */
IBP_INLINE void xv_vote(uint64_t xm, uint64_t b, uint64_t *cand, uint64_t *cnt, uint64_t *exc)
{
	if (xm == b)
		return;
	uint64_t n = *cnt, c = *cand;
	*exc += 1;
	if (n == 0) {
		*cand = xm;
		*cnt = 1;
	} else {
		*cnt = n + (c == xm ? 1 : (uint64_t)-1);
	}
}

IBP_INLINE void xv_task_c(const xv_ctx_t *x, uint64_t t, const unsigned C)
{
	const uint64_t D = x->D, nb = x->nb, ncr = x->ncr;
	const uint64_t cr = t % ncr, b = (t / ncr) % nb, g = t / (ncr * nb);
	const evalset_t *es = x->es;
	const uint64_t ng = es->gb[g + 1] - es->gb[g];
	const uint64_t lo = es->gb[g] + stratum(b, ng, nb), hi = es->gb[g] + stratum(b + 1, ng, nb);
	const uint64_t j0 = cr * XV_COLS, j1 = j0 + XV_COLS < D ? j0 + XV_COLS : D;
	const uint64_t jf = j1 < D ? j1 : D - 1; /* [j0, jf): full chunks */
	const uint64_t last_bytes = x->R - (D - 1) * C;
	for (uint64_t i = lo; i < hi; i++) {
		const uint8_t *row = x->rows + (es->ids ? es->ids[i] : i) * x->R;
		for (unsigned q = x->qb[g]; q < x->qb[g + 1]; q++) {
			const ibp_cluster_t *cl = &x->codecs[q]->cl[0];
			const uint64_t *m = cl->m, *bv = cl->b;
			const uint64_t o = ((uint64_t)b * x->nq + q) * D;
			uint64_t *cnt = x->cnt + o;
			if (x->pass == 2) {
				const uint64_t *fin = x->fin + (uint64_t)q * D;
				const uint64_t *l = x->lst + x->lb[q * ncr + cr], *le = x->lst + x->lb[q * ncr + cr + 1];
				for (; l < le; l++) {
					uint64_t j = *l;
					uint64_t v = j + 1 < D ? ibp_ld_chunk(row + j * C, C)
							       : ibp_ld_partial(row + j * C, last_bytes);
					cnt[j] += (v & m[j]) == fin[j]; /* fin_j != b_j: a hit is an exception */
				}
				continue;
			}
			uint64_t *cand = x->cand + o, *exc = x->exc + o;
			for (uint64_t j = j0; j < jf; j++)
				xv_vote(ibp_ld_chunk(row + j * C, C) & m[j], bv[j], cand + j, cnt + j, exc + j);
			if (j1 == D)
				xv_vote(ibp_ld_partial(row + (D - 1) * C, last_bytes) & m[D - 1], bv[D - 1],
					cand + D - 1, cnt + D - 1, exc + D - 1);
		}
	}
}

static void xv_worker(void *vx, uint64_t beg, uint64_t end, int tid)
{
	const xv_ctx_t *x = vx;
	(void)tid;
	for (uint64_t t = beg; t < end; t++) {
		switch (x->C) {
		case 1: xv_task_c(x, t, 1); break;
		case 2: xv_task_c(x, t, 2); break;
		case 4: xv_task_c(x, t, 4); break;
		default: xv_task_c(x, t, 8); break;
		}
	}
}

/* Fits the Xvals of codecs[q] (one cluster each, the same chunk size) on
 * the rows of their group of es and replaces each codec that gets one by a
 * codec made with them. xv (may be NULL) receives each codec's D * C bytes
 * of Xval words (the Bitval where none), hasx[q] whether it has Xvals.
 * Chunk j is enabled iff hits_j * e_j > exceptions_j (the hit bits cost
 * less than the e_j bits they save); a codec keeps its Xvals only when the
 * bits saved (at least), scaled from the sample to the nrows of the data
 * set, exceed the D * C bytes of its Xval table. */
static ibp_status_t fit_xvals(const uint8_t *rows, uint64_t R, const evalset_t *es,
			      ibp_codec_t **codecs, const unsigned *qb, uint64_t nrows,
			      int nthreads, uint8_t *xv, uint8_t *hasx)
{
	const unsigned nq = qb[es->k];
	if (nq == 0)
		return IBP_OK;
	const unsigned C = ibp_codec_chunk_bytes(codecs[0]);
	const uint64_t D = ibp_codec_nchunks(codecs[0]), DC = D * C;
	uint64_t maxg = 0;
	for (unsigned g = 0; g < es->k; g++)
		if (es->gb[g + 1] - es->gb[g] > maxg)
			maxg = es->gb[g + 1] - es->gb[g];
	uint64_t nb = maxg / XV_BLOCK_ROWS, cap = XV_BUDGET / (24 * (uint64_t)nq * D);
	nb = nb < cap ? nb : cap;
	nb = nb > XV_BLOCKS ? XV_BLOCKS : nb < 1 ? 1 : nb;
	xv_ctx_t x = { .rows = rows, .R = R, .D = D, .C = C, .es = es, .codecs = codecs, .qb = qb,
		       .nq = nq, .nb = nb, .ncr = (D + XV_COLS - 1) / XV_COLS, .pass = 1 };
	const uint64_t ns = nb * nq * D, nqd = (uint64_t)nq * D;
	ibp_status_t st = IBP_OK;
	uint64_t *fin = NULL, *tot = NULL, *lst = NULL, *lb = NULL;
	uint8_t *xw = NULL;
	if (ns > SIZE_MAX / 24 || nqd > SIZE_MAX / 24)
		return ibpi_fail(IBP_ERR_NOMEM, "train: Xval votes for %u codecs", nq);
	x.cand = malloc(ns * sizeof(uint64_t));
	x.cnt = calloc(ns, sizeof(uint64_t));
	x.exc = calloc(ns, sizeof(uint64_t));
	fin = malloc(nqd * sizeof(uint64_t));
	tot = malloc(2 * nqd * sizeof(uint64_t)); /* merged cnt, then exceptions */
	lst = malloc(nqd * sizeof(uint64_t));
	lb = malloc(((uint64_t)nq * x.ncr + 1) * sizeof(uint64_t));
	xw = malloc(DC ? DC : 1);
	if (!x.cand || !x.cnt || !x.exc || !fin || !tot || !lst || !lb || !xw) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: Xval votes for %u codecs", nq);
		goto out;
	}
	uint64_t ntask = (uint64_t)es->k * nb * x.ncr;
	int nt = ibpi_train_threads(nthreads, es->n * R * (nq / es->k + 1));
	st = ibpi_parallel_for(nt, ntask, xv_worker, &x);
	if (st != IBP_OK)
		goto out;
	/* Merge the votes in block order: a pair (cand, cnt) absorbs the next
	 * one, cancelling pairs of different values. Chunks whose candidate is
	 * not yet known to pay go to pass 2's lists. */
	uint64_t nl = 0;
	for (unsigned q = 0; q < nq; q++) {
		const uint8_t *ew = codecs[q]->cl[0].ew;
		for (uint64_t j = 0; j < D; j++) {
			uint64_t c = 0, n = 0, e = 0;
			if (j % XV_COLS == 0)
				lb[q * x.ncr + j / XV_COLS] = nl;
			for (uint64_t b = 0; b < nb; b++) {
				uint64_t o = ((uint64_t)b * nq + q) * D + j, c2 = x.cand[o], n2 = x.cnt[o];
				e += x.exc[o];
				if (n2 == 0)
					continue;
				if (n == 0 || c == c2) {
					c = c2;
					n += n2;
				} else if (n >= n2) {
					n -= n2;
				} else {
					c = c2;
					n = n2 - n;
				}
			}
			fin[(uint64_t)q * D + j] = c;
			tot[(uint64_t)q * D + j] = n;
			tot[nqd + (uint64_t)q * D + j] = e;
			if (n && (unsigned __int128)n * ew[j] <= e)
				lst[nl++] = j;
		}
	}
	lb[(uint64_t)nq * x.ncr] = nl;
	memset(x.cnt, 0, ns * sizeof(uint64_t));
	if (nl) {
		x.fin = fin;
		x.lst = lst;
		x.lb = lb;
		x.pass = 2;
		st = ibpi_parallel_for(nt, ntask, xv_worker, &x);
		if (st != IBP_OK)
			goto out;
	}
	for (unsigned q = 0; q < nq; q++) {
		const ibp_codec_t *cq = codecs[q];
		const ibp_cluster_t *cl = &cq->cl[0];
		memcpy(xw, ibp_codec_bitval(cq, 0), DC);
		uint64_t saved = 0, any = 0;
		const uint64_t *l = lst + lb[q * x.ncr], *le = lst + lb[(q + 1) * x.ncr];
		for (uint64_t j = 0; j < D; j++) {
			uint64_t n = tot[(uint64_t)q * D + j], exc = tot[nqd + (uint64_t)q * D + j];
			uint64_t hits = n; /* a lower bound, exact where pass 2 counted */
			if (l < le && *l == j) {
				l++;
				hits = 0;
				for (uint64_t b = 0; b < nb; b++)
					hits += x.cnt[((uint64_t)b * nq + q) * D + j];
			}
			unsigned __int128 gain = (unsigned __int128)hits * cl->ew[j];
			if (n == 0 || gain <= exc)
				continue;
			ibp_st_partial(xw + j * C, fin[(uint64_t)q * D + j], C);
			gain -= exc;
			saved = gain > UINT64_MAX - saved ? UINT64_MAX : saved + (uint64_t)gain;
			any = 1;
		}
		/* bytes saved on the whole data set vs the Xval table's bytes */
		double scale = es->n ? (double)nrows / (double)es->n : 0.0;
		int keep = any && (double)saved / 8.0 * scale > (double)DC;
		if (hasx)
			hasx[q] = (uint8_t)keep;
		if (!keep)
			memcpy(xw, ibp_codec_bitval(cq, 0), DC);
		if (xv)
			memcpy(xv + (uint64_t)q * DC, xw, DC);
		if (!keep)
			continue;
		ibp_codec_t *nc = NULL;
		st = ibp_codec_create_ex(R, C, 1, ibp_codec_mask(cq, 0), ibp_codec_bitval(cq, 0), xw, &nc);
		if (st != IBP_OK)
			goto out;
		ibpi_codec_set_threshold(nc, ibp_codec_threshold(cq));
		ibp_codec_free(codecs[q]);
		codecs[q] = nc;
	}
out:
	free(x.cand);
	free(x.cnt);
	free(x.exc);
	free(fin);
	free(tot);
	free(lst);
	free(lb);
	free(xw);
	return st;
}

ibp_status_t ibpi_train_xvals(const uint8_t *rows, uint64_t row_bytes, const ibp_sample_t *s,
			     uint64_t nrows, ibp_codec_t **codecs, unsigned ncodecs, int nthreads,
			     uint8_t *hasx)
{
	evalset_t es = { .n = s->n, .ids = s->idx, .k = 1, .gb = { 0, s->n } };
	unsigned qb[2] = { 0, ncodecs };
	return fit_xvals(rows, row_bytes, &es, codecs, qb, nrows, nthreads, NULL, hasx);
}

/* Per sample position: the cluster ibp_choose_cluster picks (smallest
 * ibp_row_size, lowest id on ties) and the sum of those sizes. */
typedef struct choose_ctx {
	const uint8_t *rows;
	uint64_t R;
	const uint64_t *ids;
	const ibp_codec_t *codec;
	unsigned k;
	uint8_t *assign;
	uint64_t *sum;
	ibp_status_t *st;
} choose_ctx_t;

static void choose_worker(void *vx, uint64_t beg, uint64_t end, int tid)
{
	choose_ctx_t *x = vx;
	uint64_t sum = 0;
	for (uint64_t i = beg; i < end; i++) {
		const uint8_t *row = x->rows + (x->ids ? x->ids[i] : i) * x->R;
		uint64_t best = UINT64_MAX;
		unsigned bc = 0;
		for (unsigned c = 0; c < x->k; c++) {
			uint64_t len;
			uint8_t mode;
			ibp_status_t s = ibp_row_size(x->codec, row, c, &len, &mode);
			if (s != IBP_OK) {
				x->st[tid] = s;
				return;
			}
			if (len < best) {
				best = len;
				bc = c;
			}
		}
		x->assign[i] = (uint8_t)bc;
		sum += best;
	}
	x->sum[tid] = sum;
}

static ibp_status_t run_choose(const uint8_t *rows, uint64_t R, const ibp_sample_t *s,
			       const ibp_codec_t *codec, unsigned k, int nthreads, uint8_t *assign,
			       uint64_t *total)
{
	*total = 0;
	if (s->n == 0)
		return IBP_OK;
	int nt = ibpi_train_threads(nthreads, s->n * R * k);
	choose_ctx_t x = { rows, R, s->idx, codec, k, assign, NULL, NULL };
	x.sum = calloc((uint64_t)nt, sizeof(uint64_t));
	x.st = calloc((uint64_t)nt, sizeof(ibp_status_t));
	ibp_status_t st = IBP_OK;
	if (!x.sum || !x.st) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: cluster sums");
		goto out;
	}
	st = ibpi_parallel_for(nt, s->n, choose_worker, &x);
	for (int t = 0; st == IBP_OK && t < nt; t++) {
		if (x.st[t] != IBP_OK)
			st = ibpi_fail(x.st[t], "train: ibp_row_size failed: %s", ibp_status_string(x.st[t]));
		*total += x.sum[t];
	}
out:
	free(x.sum);
	free(x.st);
	return st;
}

/* ---- k-means on bit vectors ------------------------------------------- */

static uint64_t popc64(uint64_t x)
{
	x = x - ((x >> 1) & 0x5555555555555555ull);
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (x * 0x0101010101010101ull) >> 56;
}

/* Hamming distance of two rows; may stop early once it reaches `stop`
 * (the caller only needs to know it is not below `stop`). */
static uint64_t hamming(const uint8_t *a, const uint8_t *b, uint64_t R, uint64_t stop)
{
	uint64_t d = 0, p = 0;
	while (p + 8 <= R) {
		uint64_t lim = R - p >= 512 ? p + 512 : (R - p) / 8 * 8 + p;
		for (; p < lim; p += 8) {
			uint64_t x, y;
			memcpy(&x, a + p, 8);
			memcpy(&y, b + p, 8);
			d += popc64(x ^ y);
		}
		if (d >= stop)
			return d;
	}
	for (; p < R; p++)
		d += popc64((uint64_t)(a[p] ^ b[p]));
	return d;
}

typedef struct km_ctx {
	const uint8_t *rows;
	uint64_t R;
	const uint64_t *ids; /* position -> row id (NULL: itself) */
	const uint8_t *cen;
	unsigned k;
	unsigned newc;       /* km_mind: the centroid just added */
	uint8_t *assign;
	uint64_t *dist;
	uint64_t *changed;   /* per thread */
} km_ctx_t;

static void km_mind_worker(void *vx, uint64_t beg, uint64_t end, int tid)
{
	km_ctx_t *x = vx;
	(void)tid;
	const uint8_t *c = x->cen + (uint64_t)x->newc * x->R;
	for (uint64_t i = beg; i < end; i++) {
		const uint8_t *row = x->rows + (x->ids ? x->ids[i] : i) * x->R;
		uint64_t d = hamming(row, c, x->R, x->dist[i]);
		if (d < x->dist[i])
			x->dist[i] = d;
	}
}

static void km_assign_worker(void *vx, uint64_t beg, uint64_t end, int tid)
{
	km_ctx_t *x = vx;
	uint64_t changed = 0;
	for (uint64_t i = beg; i < end; i++) {
		const uint8_t *row = x->rows + (x->ids ? x->ids[i] : i) * x->R;
		uint64_t best = UINT64_MAX;
		unsigned bc = 0;
		for (unsigned c = 0; c < x->k; c++) {
			uint64_t d = hamming(row, x->cen + (uint64_t)c * x->R, x->R, best);
			if (d < best) {
				best = d;
				bc = c;
			}
		}
		changed += x->assign[i] != bc;
		x->assign[i] = (uint8_t)bc;
	}
	x->changed[tid] = changed;
}


/* Sorts positions [0, n) by assign[] (stable) into ids (their row ids via
 * src, NULL = identity) with bounds gb. keep_empty = 0 drops empty clusters
 * and renumbers the rest in order; returns the number of clusters in gb. */
static unsigned group_rows(const uint8_t *assign, uint64_t n, const uint64_t *src, unsigned k,
			   int keep_empty, uint64_t *ids, uint64_t *gb)
{
	uint64_t cnt[IBP_MAX_CLUSTERS] = { 0 }, at[IBP_MAX_CLUSTERS];
	for (uint64_t i = 0; i < n; i++)
		cnt[assign[i]]++;
	unsigned kk = 0;
	uint64_t pos = 0;
	for (unsigned c = 0; c < k; c++) {
		at[c] = pos;
		if (cnt[c] || keep_empty) {
			gb[kk++] = pos;
			pos += cnt[c];
		}
	}
	gb[kk] = pos;
	for (uint64_t i = 0; i < n; i++)
		ids[at[assign[i]]++] = src ? src[i] : i;
	return kk;
}

/* k-means with Hamming distance over the sample; fills es with up to k
 * non-empty clusters, its ids owned by the caller through *ids_out. */
static ibp_status_t kmeans(const uint8_t *rows, uint64_t R, const ibp_sample_t *s, unsigned k,
			   uint64_t seed, int nthreads, evalset_t *es, uint64_t **ids_out)
{
	const uint64_t n = s->n;
	/* Fit on an evenly strided part of the sample (~KM_BYTES), assign all. */
	uint64_t stride = (n * R + KM_BYTES - 1) / KM_BYTES;
	if (stride < 1 || n / stride < k)
		stride = 1;
	uint64_t kn = (n + stride - 1) / stride;
	ibp_status_t st = IBP_OK;
	uint64_t *kid = malloc(kn * sizeof(uint64_t));
	uint64_t *dist = malloc(kn * sizeof(uint64_t));
	uint64_t *tmp = malloc(kn * sizeof(uint64_t));
	uint8_t *cen = malloc((uint64_t)k * R);
	uint8_t *ka = malloc(kn);
	uint8_t *sa = malloc(n);
	uint64_t *counts = malloc(8 * R * sizeof(uint64_t));
	uint64_t *ids = malloc(n * sizeof(uint64_t));
	uint64_t changed[IBP_MAX_THREADS];
	if (!kid || !dist || !tmp || !cen || !ka || !sa || !counts || !ids) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: k-means buffers");
		goto out;
	}
	for (uint64_t j = 0; j < kn; j++) {
		uint64_t p = j * stride;
		kid[j] = s->idx ? s->idx[p] : p;
		dist[j] = UINT64_MAX;
	}
	int nt = ibpi_train_threads(nthreads, kn * R);
	km_ctx_t x = { rows, R, kid, cen, 1, 0, ka, dist, changed };

	/* k-means++: first centroid uniform, then rows drawn with weight d^2
	 * (sequential double sums: the same for every thread count). */
	uint64_t rng = splitmix64(seed ^ 0x6b6d65616e73ull);
	memcpy(cen, rows + kid[splitmix64(rng) % kn] * R, R);
	unsigned kk = 1;
	st = ibpi_parallel_for(nt, kn, km_mind_worker, &x);
	while (st == IBP_OK && kk < k) {
		double total = 0;
		for (uint64_t j = 0; j < kn; j++)
			total += (double)dist[j] * (double)dist[j];
		if (total <= 0)
			break; /* fewer distinct rows than k */
		double r = (double)(splitmix64(rng + kk) >> 11) * 0x1.0p-53 * total, acc = 0;
		uint64_t pick = 0;
		for (uint64_t j = 0; j < kn; j++) {
			if (!dist[j])
				continue;
			pick = j;
			acc += (double)dist[j] * (double)dist[j];
			if (acc > r)
				break;
		}
		memcpy(cen + (uint64_t)kk * R, rows + kid[pick] * R, R);
		x.newc = kk++;
		st = ibpi_parallel_for(nt, kn, km_mind_worker, &x);
	}
	if (st != IBP_OK)
		goto out;
	x.k = kk;

	/* Lloyd rounds; a centroid bit is the majority bit of its rows (ties 0);
	 * an empty cluster keeps its centroid. */
	memset(ka, 0xff, kn);
	for (unsigned round = 0; round < KM_ROUNDS; round++) {
		memset(changed, 0, sizeof(changed));
		st = ibpi_parallel_for(nt, kn, km_assign_worker, &x);
		if (st != IBP_OK)
			goto out;
		uint64_t ch = 0;
		for (int t = 0; t < nt; t++)
			ch += changed[t];
		if (round > 0 && ch == 0)
			break;
		uint64_t gb[IBP_MAX_CLUSTERS + 1];
		group_rows(ka, kn, kid, kk, 1, tmp, gb);
		for (unsigned c = 0; c < kk; c++) {
			uint64_t nc = gb[c + 1] - gb[c];
			if (!nc)
				continue;
			st = ibp_train_count(rows, R, tmp + gb[c], nc, nthreads, counts);
			if (st != IBP_OK)
				goto out;
			uint8_t *cp = cen + (uint64_t)c * R;
			for (uint64_t p = 0; p < R; p++) {
				unsigned v = 0;
				for (unsigned b = 0; b < 8; b++)
					v |= (unsigned)(2 * counts[8 * p + b] > nc) << b;
				cp[p] = (uint8_t)v;
			}
		}
	}

	/* Every sample row goes to its nearest centroid. */
	x.ids = s->idx;
	x.assign = sa;
	memset(sa, 0xff, n);
	nt = ibpi_train_threads(nthreads, n * R);
	st = ibpi_parallel_for(nt, n, km_assign_worker, &x);
	if (st != IBP_OK)
		goto out;
	es->n = n;
	es->k = group_rows(sa, n, s->idx, kk, 0, ids, es->gb);
	es->ids = ids;
	*ids_out = ids;
	ids = NULL;
out:
	free(kid);
	free(dist);
	free(tmp);
	free(cen);
	free(ka);
	free(sa);
	free(counts);
	free(ids);
	return st;
}

/* ---- the search ------------------------------------------------------- */

typedef struct trainer {
	const uint8_t *rows;
	uint64_t N, R;
	ibp_sample_t s;
	double thr[IBP_SWEEP_N];
	unsigned nthr;
	int nthreads;
	int xval; /* fit Xvals */
} trainer_t;

typedef struct fit {
	unsigned C, k;
	double total;                      /* estimated bytes of the data set */
	double t[IBP_MAX_CLUSTERS];        /* chosen T per cluster */
	uint64_t nrows[IBP_MAX_CLUSTERS];  /* sample rows per cluster */
	ibp_codec_t *codec;
} fit_t;

/* Fits Mask/Bitval for each cluster of es at each chunk size cs[] (larger
 * first) and each T, by the sizes of each cluster's own rows; keeps the
 * smallest estimated total (ties: larger C, larger T) and its codec. */
static ibp_status_t fit_groups(const trainer_t *tr, const evalset_t *es, const unsigned *cs,
			       unsigned ncs, fit_t *f)
{
	const uint64_t R = tr->R;
	const unsigned k = es->k, nT = tr->nthr, nkt = k * nT;
	ibp_status_t st = IBP_OK;
	memset(f, 0, sizeof(*f));
	f->total = INFINITY;
	uint64_t *counts = malloc(8 * R * sizeof(uint64_t));
	uint8_t *bm = malloc(2 * (uint64_t)nkt * R), *bv = bm ? bm + (uint64_t)nkt * R : NULL;
	uint8_t *fm = malloc(2 * (uint64_t)k * R), *fv = fm ? fm + (uint64_t)k * R : NULL;
	unsigned *uq = malloc(nkt * sizeof(unsigned)), *qmap = malloc(nkt * sizeof(unsigned));
	ibp_codec_t **cod = calloc(nkt, sizeof(ibp_codec_t *));
	uint64_t *sz = malloc(nkt * sizeof(uint64_t)), *tsz = malloc(nkt * sizeof(uint64_t));
	unsigned qb[IBP_MAX_CLUSTERS + 1], best_ti[IBP_MAX_CLUSTERS], ti[IBP_MAX_CLUSTERS];
	/* Xval words (D * C <= R + 7 bytes) of each (cluster, T) at the current
	 * C, as fit_xvals wrote them (xq, per codec) and kept (xvb); fx holds
	 * those of the best C's choice. hx/hq: whether each has Xvals. */
	const uint64_t XW = R + 8;
	uint8_t *xq = malloc((uint64_t)nkt * XW), *xvb = malloc((uint64_t)nkt * XW);
	uint8_t *fx = malloc((uint64_t)k * XW), *hq = malloc(nkt), *hx = malloc(nkt);
	int fhas = 0;
	if (!counts || !bm || !fm || !uq || !qmap || !cod || !sz || !tsz || !xq || !xvb || !fx ||
	    !hq || !hx) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: masks for %u clusters x %u thresholds", k, nT);
		goto out;
	}
	/* Counts once per cluster; a T whose Mask equals the previous T's is
	 * not evaluated again (uq points at the first T with that Mask). */
	for (unsigned c = 0; c < k; c++) {
		uint64_t nc = es->gb[c + 1] - es->gb[c];
		f->nrows[c] = nc;
		st = ibp_train_count(tr->rows, R, es->ids ? es->ids + es->gb[c] : NULL, nc,
				     tr->nthreads, counts);
		if (st != IBP_OK)
			goto out;
		for (unsigned i = 0; i < nT; i++) {
			uint64_t o = ((uint64_t)c * nT + i) * R;
			ibp_train_mask(counts, nc, R, tr->thr[i], bm + o, bv + o);
			uq[c * nT + i] = i;
			if (i > 0 && !memcmp(bm + o - R, bm + o, R) && !memcmp(bv + o - R, bv + o, R))
				uq[c * nT + i] = uq[c * nT + i - 1];
		}
	}
	for (unsigned ci = 0; ci < ncs; ci++) {
		const unsigned C = cs[ci];
		const uint64_t D = (R + C - 1) / C;
		/* Bound live codec tables: T values go in batches if need be. */
		uint64_t per = (uint64_t)k * (D * 112 + 5 * D * C);
		uint64_t tb = per ? CODEC_BUDGET / per : nT;
		if (tb < 1)
			tb = 1;
		for (unsigned i0 = 0; i0 < nT; i0 += (unsigned)tb) {
			unsigned i1 = i0 + tb < nT ? i0 + (unsigned)tb : nT, nq = 0;
			for (unsigned c = 0; c < k; c++) {
				qb[c] = nq;
				for (unsigned i = i0; i < i1; i++) {
					if (uq[c * nT + i] != i)
						continue;
					uint64_t o = ((uint64_t)c * nT + i) * R;
					st = ibpi_train_make_codec(R, C, 1, bm + o, bv + o, NULL, &cod[nq]);
					if (st != IBP_OK)
						goto out;
					qmap[c * nT + i] = nq++;
				}
			}
			qb[k] = nq;
			/* Xvals for each Mask/Bitval, then the actual sizes with them */
			if (tr->xval)
				st = fit_xvals(tr->rows, R, es, cod, qb, tr->N, tr->nthreads, xq, hq);
			else
				memset(hq, 0, nq);
			if (st == IBP_OK)
				st = run_sizes(tr->rows, R, es, cod, qb, tr->nthreads, sz, NULL);
			for (unsigned q = 0; q < nq; q++) {
				ibp_codec_free(cod[q]);
				cod[q] = NULL;
			}
			if (st != IBP_OK)
				goto out;
			for (unsigned c = 0; c < k; c++)
				for (unsigned i = i0; i < i1; i++) {
					unsigned u = uq[c * nT + i];
					tsz[c * nT + i] = u == i ? sz[qmap[c * nT + i]] : tsz[c * nT + u];
					if (u != i)
						continue;
					unsigned q = qmap[c * nT + i];
					hx[c * nT + i] = hq[q];
					if (tr->xval) /* fit_xvals wrote them all (b where none) */
						memcpy(xvb + ((uint64_t)c * nT + i) * XW, xq + (uint64_t)q * D * C,
						       D * C);
				}
		}
		uint64_t sum = 0;
		int has = 0;
		for (unsigned c = 0; c < k; c++) {
			uint64_t b = UINT64_MAX;
			for (unsigned i = 0; i < nT; i++)
				if (tsz[c * nT + i] <= b) { /* ties: the larger T */
					b = tsz[c * nT + i];
					ti[c] = i;
				}
			sum += b;
			has |= hx[c * nT + uq[c * nT + ti[c]]];
		}
		double total = ibpi_train_total(sum, es->n, tr->N, R, C, k, has);
		if (total < f->total) { /* ties: the larger C, tried first */
			f->total = total;
			f->C = C;
			memcpy(best_ti, ti, sizeof(ti));
			fhas = has;
			for (unsigned c = 0; c < k && has; c++)
				memcpy(fx + (uint64_t)c * D * C,
				       xvb + ((uint64_t)c * nT + uq[c * nT + ti[c]]) * XW, D * C);
		}
	}
	f->k = k;
	for (unsigned c = 0; c < k; c++) {
		uint64_t o = ((uint64_t)c * nT + best_ti[c]) * R;
		memcpy(fm + (uint64_t)c * R, bm + o, R);
		memcpy(fv + (uint64_t)c * R, bv + o, R);
		f->t[c] = tr->thr[best_ti[c]];
	}
	st = ibpi_train_make_codec(R, f->C, k, fm, fv, fhas ? fx : NULL, &f->codec);
out:
	if (cod)
		for (unsigned q = 0; q < nkt; q++)
			ibp_codec_free(cod[q]);
	free(counts);
	free(bm);
	free(fm);
	free(uq);
	free(qmap);
	free(cod);
	free(sz);
	free(tsz);
	free(xq);
	free(xvb);
	free(fx);
	free(hq);
	free(hx);
	return st;
}

/* For k > 1: the actual total with rows on ibp_choose_cluster's cluster,
 * then refits on those clusters while the total shrinks. */
static ibp_status_t refine(const trainer_t *tr, fit_t *f)
{
	const ibp_sample_t *s = &tr->s;
	ibp_status_t st = IBP_OK;
	uint8_t *a = malloc(s->n ? s->n : 1), *a2 = malloc(s->n ? s->n : 1);
	uint64_t *ids = malloc((s->n ? s->n : 1) * sizeof(uint64_t));
	uint64_t sum;
	if (!a || !a2 || !ids) {
		st = ibpi_fail(IBP_ERR_NOMEM, "train: cluster assignment");
		goto out;
	}
	st = run_choose(tr->rows, tr->R, s, f->codec, f->k, tr->nthreads, a, &sum);
	if (st != IBP_OK)
		goto out;
	f->total = ibpi_train_total(sum, s->n, tr->N, tr->R, f->C, f->k, ibp_codec_has_xval(f->codec));
	for (unsigned round = 0; round < REFIT_ROUNDS; round++) {
		evalset_t es = { .n = s->n, .ids = ids };
		es.k = group_rows(a, s->n, s->idx, f->k, 0, ids, es.gb);
		fit_t g;
		st = fit_groups(tr, &es, &f->C, 1, &g);
		if (st == IBP_OK && g.k > 1) {
			st = run_choose(tr->rows, tr->R, s, g.codec, g.k, tr->nthreads, a2, &sum);
			g.total = ibpi_train_total(sum, s->n, tr->N, tr->R, g.C, g.k,
						  ibp_codec_has_xval(g.codec));
		}
		if (st != IBP_OK) {
			ibp_codec_free(g.codec);
			goto out;
		}
		if (!(g.total < f->total)) {
			ibp_codec_free(g.codec);
			break;
		}
		ibp_codec_free(f->codec);
		*f = g;
		uint8_t *t = a;
		a = a2;
		a2 = t;
		if (g.k == 1)
			break;
	}
out:
	free(a);
	free(a2);
	free(ids);
	return st;
}

/* One training run with checked options `o`; *total is the predicted
 * encoded size of all rows, metadata counted. */
static ibp_status_t train_one(const void *rows, uint64_t nrows, uint64_t row_bytes,
			      ibp_train_opts_t o, ibp_codec_t **out, double *total)
{
	trainer_t tr = { .rows = rows, .N = nrows, .R = row_bytes, .nthreads = o.nthreads,
			 .xval = o.xval };
	if (o.threshold < 0) {
		for (unsigned i = 0; i < IBP_SWEEP_N; i++)
			tr.thr[i] = (IBP_SWEEP_FIRST + IBP_SWEEP_STEP * i) / 100.0;
		tr.nthr = IBP_SWEEP_N;
	} else {
		tr.thr[0] = o.threshold;
		tr.nthr = 1;
	}
	IBP_TRY(ibpi_train_sample(nrows, row_bytes, o.sample, o.seed, &tr.s));

	static const unsigned all_cs[4] = { 8, 4, 2, 1 };
	const unsigned *cs = all_cs;
	unsigned ncs = 4;
	if (o.chunk_bytes) {
		cs = &o.chunk_bytes;
		ncs = 1;
	}
	/* k candidates, never more than the sample has rows. */
	uint64_t kmax = tr.s.n ? tr.s.n : 1;
	unsigned ks[4], nks = 0;
	if (o.clusters == 0) {
		for (unsigned k = 1; k <= 8; k *= 2)
			if (k <= kmax)
				ks[nks++] = k;
	} else {
		ks[nks++] = o.clusters <= kmax ? o.clusters : (unsigned)kmax;
	}

	ibp_status_t st = IBP_OK;
	fit_t best = { .total = INFINITY };
	/* Clusters are fit and compared on an evenly strided part of the
	 * sample: k-means, k sweeps and refits cost many passes per row. */
	trainer_t ctr = tr;
	if (ks[nks - 1] > 1) {
		uint64_t n = tr.s.n, st1 = (n * row_bytes + CL_BYTES - 1) / CL_BYTES;
		uint64_t st2 = (n + CL_ROWS - 1) / CL_ROWS, stride = st1 > st2 ? st1 : st2;
		if (stride > 1 && n / stride >= ks[nks - 1]) {
			ctr.s.n = (n + stride - 1) / stride;
			ctr.s.idx = malloc(ctr.s.n * sizeof(uint64_t));
			if (!ctr.s.idx) {
				free(tr.s.idx);
				return ibpi_fail(IBP_ERR_NOMEM, "train: cluster sample");
			}
			for (uint64_t j = 0; j < ctr.s.n; j++)
				ctr.s.idx[j] = tr.s.idx ? tr.s.idx[j * stride] : j * stride;
		}
	}
	for (unsigned ki = 0; ki < nks; ki++) {
		evalset_t es = { .n = tr.s.n, .ids = tr.s.idx, .k = 1, .gb = { 0, tr.s.n } };
		const trainer_t *t = &tr;
		uint64_t *own = NULL;
		if (ks[ki] > 1) {
			t = &ctr;
			st = kmeans(t->rows, row_bytes, &t->s, ks[ki], o.seed, o.nthreads, &es, &own);
			if (st != IBP_OK)
				break;
			if (es.k == 1) { /* no distinct clusters: plain k = 1 */
				free(own);
				if (ki > 0)
					continue;
				own = NULL;
				es = (evalset_t){ .n = tr.s.n, .ids = tr.s.idx, .k = 1, .gb = { 0, tr.s.n } };
				t = &tr;
			}
		}
		/* Auto clusters: larger k keep the chunk size k = 1 chose. */
		const unsigned *kcs = cs;
		unsigned nkcs = ncs;
		if (o.clusters == 0 && ki > 0 && best.codec) {
			kcs = &best.C;
			nkcs = 1;
		}
		unsigned c1 = kcs[0];
		fit_t f;
		st = fit_groups(t, &es, nkcs == 1 ? &c1 : kcs, nkcs, &f);
		free(own);
		if (st == IBP_OK && f.k > 1)
			st = refine(t, &f);
		if (st != IBP_OK) {
			ibp_codec_free(f.codec);
			break;
		}
		if (f.total < best.total) { /* ties: the smaller k, tried first */
			ibp_codec_free(best.codec);
			best = f;
		} else {
			ibp_codec_free(f.codec);
		}
	}
	if (ctr.s.idx != tr.s.idx)
		free(ctr.s.idx);
	free(tr.s.idx);
	if (st != IBP_OK) {
		ibp_codec_free(best.codec);
		return st;
	}
	/* One T per codec: that of the cluster with the most sample rows. */
	unsigned big = 0;
	for (unsigned c = 1; c < best.k; c++)
		if (best.nrows[c] > best.nrows[big])
			big = c;
	ibpi_codec_set_threshold(best.codec, best.t[big]);
	*out = best.codec;
	*total = best.total;
	return IBP_OK;
}

/* Xvals make each exception's decode branchier: on dense rows, where they
 * save 1-3%, they cost up to a third of the decode speed (measured on the
 * MiniLM embedding and KV samples), while on sparse rows they halve the
 * size. Keep them only when they save at least this fraction. */
#define XVAL_MIN_GAIN 0.05

ibp_status_t ibp_codec_train(const void *rows, uint64_t nrows, uint64_t row_bytes,
			     const ibp_train_opts_t *opts, ibp_codec_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "train: out is NULL");
	*out = NULL;
	ibp_train_opts_t o;
	IBP_TRY(ibpi_train_check(rows, nrows, row_bytes, opts, &o));
	ibp_codec_t *with = NULL, *without = NULL;
	double t_with = 0, t_without = 0;
	IBP_TRY(train_one(rows, nrows, row_bytes, o, &with, &t_with));
	if (o.xval != 1 || !ibp_codec_has_xval(with)) {
		*out = with;
		return IBP_OK;
	}
	o.xval = 0;
	ibp_status_t st = train_one(rows, nrows, row_bytes, o, &without, &t_without);
	if (st != IBP_OK) {
		ibp_codec_free(with);
		return st;
	}
	if (t_with <= t_without * (1.0 - XVAL_MIN_GAIN)) {
		ibp_codec_free(without);
		*out = with;
	} else {
		ibp_codec_free(with);
		*out = without;
	}
	return IBP_OK;
}
