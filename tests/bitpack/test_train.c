/* test_train.c - ibp_codec_train: Mask/Bitval on hand-built data, T = 1.0,
 * the threshold and chunk-size searches against brute force, Xvals (brute
 * force, sparse binary rows, when they do not pay), sample determinism, odd
 * row lengths, tiny inputs, clusters, invalid options. Every trained codec
 * must round-trip the data byte-exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "ibp/unstable.h"
#include "fixtures.h"
#include "testutil.h"

static const double SWEEP[7] = { 0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00 };
static const unsigned CHUNKS[4] = { 1, 2, 4, 8 };

static ibp_codec_t *train(const void *rows, uint64_t n, uint64_t R, unsigned C, double T,
			  unsigned k)
{
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.chunk_bytes = C;
	o.threshold = T;
	o.clusters = k;
	o.xval = 2; /* Xvals wherever they pay: the rule under test; xval_min_gain checks 1 */
	ibp_codec_t *c = NULL;
	ibp_status_t st = ibp_codec_train(rows, n, R, &o, &c);
	cr_assert_eq(st, IBP_OK, "train failed: %s", ibp_last_error());
	cr_assert_not_null(c);
	return c;
}

/* Encodes all rows with ibp_encode_batch, decodes them back, checks they are
 * byte-exact and returns the encoded bytes (rows only). */
static uint64_t roundtrip(const ibp_codec_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	uint8_t *enc = tu_xcalloc(ibp_batch_bound(c, n) + 1);
	uint64_t *off = tu_xcalloc((n + 1) * sizeof(uint64_t));
	uint8_t *flags = tu_xcalloc(n + 1), *cl = tu_xcalloc(n + 1);
	uint8_t *dec = tu_xcalloc(n * R + 1);
	cr_assert_eq(ibp_encode_batch(c, rows, n, enc, ibp_batch_bound(c, n), off, flags, cl, 1),
		     IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_decode_batch(c, enc, off[n], off, flags, cl, n, dec, 1), IBP_OK, "%s",
		     ibp_last_error());
	cr_assert(n == 0 || memcmp(dec, rows, n * R) == 0, "round trip differs");
	uint64_t total = off[n];
	/* The batch size is the sum of per-row sizes under the chosen clusters. */
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t len;
		uint8_t mode;
		unsigned k = ibp_choose_cluster(c, rows + i * R);
		cr_assert_eq(k, ibp_codec_nclusters(c) > 1 ? cl[i] : 0u);
		cr_assert_eq(ibp_row_size(c, rows + i * R, k, &len, &mode), IBP_OK);
		sum += len;
	}
	cr_assert_eq(sum, total);
	free(enc);
	free(off);
	free(flags);
	free(cl);
	free(dec);
	return total;
}

/* What training minimises when it sees every row: rows + 1 flags byte a row
 * + 1 cluster byte a row when k > 1 + Mask and Bitval (+ Xval if any). */
static uint64_t total_size(const ibp_codec_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	unsigned k = ibp_codec_nclusters(c);
	uint64_t meta = (2ull + (uint64_t)ibp_codec_has_xval(c)) * k * ibp_codec_nchunks(c) *
			ibp_codec_chunk_bytes(c);
	return roundtrip(c, rows, n, R) + n * (k > 1 ? 2 : 1) + meta;
}

/* Expected byte-level Mask/Bitval by brute force: bit invariant with value
 * v when at least ceil(T * n) rows have value v (the 1 test first). */
static void expect_mask(const uint8_t *rows, uint64_t n, uint64_t R, double T, uint8_t *m,
			uint8_t *v)
{
	uint64_t need = (uint64_t)ceil(T * (double)n - 1e-9);
	for (uint64_t p = 0; p < R; p++) {
		m[p] = v[p] = 0;
		for (unsigned b = 0; b < 8; b++) {
			uint64_t ones = 0;
			for (uint64_t i = 0; i < n; i++)
				ones += (rows[i * R + p] >> b) & 1;
			if (n && ones >= need) {
				m[p] |= (uint8_t)(1u << b);
				v[p] |= (uint8_t)(1u << b);
			} else if (n && n - ones >= need) {
				m[p] |= (uint8_t)(1u << b);
			}
		}
	}
}

/* Checks the codec's Mask/Bitval of cluster k: the first R bytes equal
 * (m, v) and the padding of the last chunk is invariant zero. */
static void check_mask(const ibp_codec_t *c, unsigned k, const uint8_t *m, const uint8_t *v,
		       uint64_t R)
{
	uint64_t W = ibp_codec_nchunks(c) * ibp_codec_chunk_bytes(c);
	const uint8_t *cm = ibp_codec_mask(c, k), *cv = ibp_codec_bitval(c, k);
	cr_assert_not_null(cm);
	cr_assert_not_null(cv);
	for (uint64_t p = 0; p < R; p++) {
		cr_assert_eq(cm[p], m[p], "mask byte %llu: %02x, expected %02x", (unsigned long long)p,
			     cm[p], m[p]);
		cr_assert_eq(cv[p], v[p], "bitval byte %llu: %02x, expected %02x",
			     (unsigned long long)p, cv[p], v[p]);
	}
	for (uint64_t p = R; p < W; p++) {
		cr_assert_eq(cm[p], 0xff);
		cr_assert_eq(cv[p], 0x00);
	}
}

static float normal(tu_rng_t *r)
{
	double u1 = tu_uniform(r), u2 = tu_uniform(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void gen_normal(tu_rng_t *r, uint8_t *rows, uint64_t n, uint64_t R)
{
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p += 4) {
			float f = normal(r);
			uint8_t b[4];
			memcpy(b, &f, 4);
			memcpy(rows + i * R + p, b, R - p < 4 ? R - p : 4);
		}
}

Test(train, defaults)
{
	ibp_train_opts_t o;
	memset(&o, 0x5a, sizeof(o));
	ibp_train_opts_default(&o);
	cr_assert_eq(o.chunk_bytes, 0u);
	cr_assert(o.threshold < 0);
	cr_assert_eq(o.sample, 0.0);
	cr_assert_eq(o.seed, 0x1B9u);
	cr_assert_eq(o.clusters, 1u);
	cr_assert_eq(o.nthreads, 0);
	cr_assert_eq(o.xval, 1);
}

/* 10 rows of 2 bytes; byte 0 bit b is set in ones[b] of the rows. */
Test(train, mask_hand_built)
{
	static const unsigned ones[8] = { 10, 8, 2, 5, 0, 9, 1, 7 };
	uint8_t rows[10 * 2];
	for (unsigned i = 0; i < 10; i++) {
		uint8_t b0 = 0;
		for (unsigned b = 0; b < 8; b++)
			if (i < ones[b])
				b0 |= (uint8_t)(1u << b);
		rows[2 * i] = b0;
		rows[2 * i + 1] = (uint8_t)(0x0f | (i & 1) << 7); /* bit 7 half set */
	}
	/* At T = 0.8: counts >= 8 -> 1 (bits 0, 1, 5), <= 2 -> 0 (bits 2, 4, 6).
	 * At T = 0.9: >= 9 -> 1 (bits 0, 5), <= 1 -> 0 (bits 4, 6).
	 * At T = 0.7: >= 7 adds bit 7 as 1; <= 3 adds nothing new. Bit 3 (5 of
	 * 10) never. Byte 1: bits 0-3 always 1, 4-6 always 0, bit 7 never. */
	static const struct {
		double T;
		uint8_t m0, v0;
	} exp[] = {
		{ 0.7, 0xf7, 0xa3 }, { 0.8, 0x77, 0x23 }, { 0.9, 0x71, 0x21 }, { 1.0, 0x11, 0x01 },
	};
	for (unsigned e = 0; e < sizeof(exp) / sizeof(exp[0]); e++)
		for (unsigned ci = 0; ci < 4; ci++) {
			ibp_codec_t *c = train(rows, 10, 2, CHUNKS[ci], exp[e].T, 1);
			uint8_t m[2] = { exp[e].m0, 0x7f }, v[2] = { exp[e].v0, 0x0f };
			check_mask(c, 0, m, v, 2);
			cr_assert_eq(ibp_codec_threshold(c), exp[e].T);
			cr_assert_eq(ibp_codec_chunk_bytes(c), CHUNKS[ci]);
			roundtrip(c, rows, 10, 2);
			ibp_codec_free(c);
		}
}

Test(train, threshold_one_is_exactly_invariant)
{
	tu_rng_t r;
	tu_rng_seed(&r, 11);
	const uint64_t n = 300, R = 37;
	uint8_t *rows = tu_xcalloc(n * R);
	/* Random rows with fixed bits forced: constant 1 bits, constant 0 bits,
	 * and bits that differ in exactly one row. */
	tu_fill_random(&r, rows, n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p++) {
			uint8_t *x = &rows[i * R + p];
			*x = (uint8_t)((*x | (p % 3 == 0 ? 0x81 : 0)) & (p % 5 == 0 ? 0xd7 : 0xff));
			if (p % 7 == 0)
				*x = (uint8_t)((*x & ~0x06) | (i == n / 2 ? 0x06 : 0));
		}
	uint8_t and_[37], or_[37], m[37], v[37];
	memset(and_, 0xff, R);
	memset(or_, 0, R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p++) {
			and_[p] &= rows[i * R + p];
			or_[p] |= rows[i * R + p];
		}
	for (uint64_t p = 0; p < R; p++) {
		m[p] = (uint8_t)(and_[p] | ~or_[p]);
		v[p] = and_[p];
	}
	for (unsigned ci = 0; ci < 4; ci++) {
		ibp_codec_t *c = train(rows, n, R, CHUNKS[ci], 1.0, 1);
		check_mask(c, 0, m, v, R);
		cr_assert_eq(ibp_codec_threshold(c), 1.0);
		roundtrip(c, rows, n, R);
		ibp_codec_free(c);
	}
	free(rows);
}

Test(train, sweep_picks_smallest_size)
{
	const uint64_t n = 2000, R = 96;
	uint8_t *rows = graded_rows(5, n, R);
	for (unsigned ci = 0; ci < 4; ci++) {
		uint64_t sizes[7], best = UINT64_MAX;
		double best_t = -1;
		for (unsigned i = 0; i < 7; i++) {
			ibp_codec_t *c = train(rows, n, R, CHUNKS[ci], SWEEP[i], 1);
			sizes[i] = roundtrip(c, rows, n, R);
			if (sizes[i] <= best) { /* ties: the larger T */
				best = sizes[i];
				best_t = SWEEP[i];
			}
			uint8_t m[96], v[96];
			expect_mask(rows, n, R, SWEEP[i], m, v);
			check_mask(c, 0, m, v, R);
			ibp_codec_free(c);
		}
		ibp_codec_t *a = train(rows, n, R, CHUNKS[ci], -1, 1);
		cr_assert_eq(roundtrip(a, rows, n, R), best, "C=%u", CHUNKS[ci]);
		cr_assert_eq(ibp_codec_threshold(a), best_t, "C=%u: T %g, expected %g", CHUNKS[ci],
			     ibp_codec_threshold(a), best_t);
		ibp_codec_free(a);
		/* The data must make the choice non-trivial somewhere. */
		if (ci == 2)
			cr_assert(best_t > 0.70 && best_t < 1.0, "C=4 best T %g at an end", best_t);
	}
	free(rows);
}

Test(train, chunk_auto_picks_smallest_total)
{
	const uint64_t n = 1500, R = 101; /* odd R: padding differs per C */
	tu_rng_t r;
	tu_rng_seed(&r, 3);
	uint8_t *rows[3] = { graded_rows(7, n, R), tu_xcalloc(n * R), tu_xcalloc(n * R) };
	gen_normal(&r, rows[1], n, R);
	tu_gen_rows(&r, TU_SPARSE_BITS, rows[2], n, R);
	for (unsigned d = 0; d < 3; d++) {
		uint64_t best = UINT64_MAX;
		unsigned best_c = 0;
		for (unsigned ci = 0; ci < 4; ci++) {
			ibp_codec_t *c = train(rows[d], n, R, CHUNKS[ci], -1, 1);
			uint64_t t = total_size(c, rows[d], n, R);
			if (t <= best) { /* ties: the larger C */
				best = t;
				best_c = CHUNKS[ci];
			}
			ibp_codec_free(c);
		}
		ibp_codec_t *a = train(rows[d], n, R, 0, -1, 1);
		cr_assert_eq(ibp_codec_chunk_bytes(a), best_c, "data %u: C %u, expected %u", d,
			     ibp_codec_chunk_bytes(a), best_c);
		cr_assert_eq(total_size(a, rows[d], n, R), best);
		ibp_codec_free(a);
		free(rows[d]);
	}
}

static int same_codec(const ibp_codec_t *a, const ibp_codec_t *b)
{
	if (ibp_codec_chunk_bytes(a) != ibp_codec_chunk_bytes(b) ||
	    ibp_codec_nclusters(a) != ibp_codec_nclusters(b) ||
	    ibp_codec_threshold(a) != ibp_codec_threshold(b))
		return 0;
	uint64_t W = ibp_codec_nchunks(a) * ibp_codec_chunk_bytes(a);
	for (unsigned k = 0; k < ibp_codec_nclusters(a); k++)
		if (memcmp(ibp_codec_mask(a, k), ibp_codec_mask(b, k), W) ||
		    memcmp(ibp_codec_bitval(a, k), ibp_codec_bitval(b, k), W) ||
		    memcmp(ibp_codec_xval(a, k), ibp_codec_xval(b, k), W))
			return 0;
	return ibp_codec_has_xval(a) == ibp_codec_has_xval(b);
}

Test(train, sample_is_deterministic)
{
	/* Large enough for 2 worker threads: the thread count must not matter. */
	const uint64_t n = 20000, R = 64;
	uint8_t *rows = graded_rows(9, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.sample = 0.5;
	o.seed = 1234;
	o.clusters = 0;
	ibp_codec_t *a, *b, *c, *d;
	o.nthreads = 1;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &a), IBP_OK);
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &b), IBP_OK);
	o.nthreads = 2;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK);
	cr_assert(same_codec(a, b), "same seed, different codec");
	cr_assert(same_codec(a, c), "thread count changed the codec");
	roundtrip(a, rows, n, R);
	ibp_codec_free(a);
	ibp_codec_free(b);
	ibp_codec_free(c);
	/* A 1% sample sees few rows: another seed sees other rows and, with
	 * these graded bits, other masks for at least one of a few seeds. */
	o.sample = 0.01;
	o.seed = 1234;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &a), IBP_OK);
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &b), IBP_OK);
	cr_assert(same_codec(a, b), "same seed, different codec (1%% sample)");
	int differs = 0;
	for (uint64_t s = 1; s <= 4 && !differs; s++) {
		o.seed = 1234 + s;
		cr_assert_eq(ibp_codec_train(rows, n, R, &o, &d), IBP_OK);
		differs = !same_codec(a, d);
		roundtrip(d, rows, n, R);
		ibp_codec_free(d);
	}
	cr_assert(differs, "the seed does not change the sample");
	ibp_codec_free(a);
	ibp_codec_free(b);
	free(rows);
}

/* A sample of 1 row makes every bit invariant at any T; all rows still
 * round-trip (they become exceptions or raw). */
Test(train, sample_fraction_tiny)
{
	const uint64_t n = 100, R = 16;
	uint8_t *rows = graded_rows(2, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.sample = 1e-9;
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK);
	uint64_t W = ibp_codec_nchunks(c) * ibp_codec_chunk_bytes(c);
	for (uint64_t p = 0; p < W; p++)
		cr_assert_eq(ibp_codec_mask(c, 0)[p], 0xff);
	roundtrip(c, rows, n, R);
	ibp_codec_free(c);
	free(rows);
}

Test(train, odd_row_lengths)
{
	static const uint64_t lens[] = { 1, 3, 7, 4099 };
	tu_rng_t r;
	tu_rng_seed(&r, 17);
	for (unsigned li = 0; li < 4; li++) {
		const uint64_t R = lens[li], n = R > 1000 ? 200 : 500;
		uint8_t *rows = tu_xcalloc(n * R);
		gen_normal(&r, rows, n, R);
		for (unsigned k = 1; k <= 2; k++) {
			ibp_codec_t *c = train(rows, n, R, 0, -1, k);
			unsigned C = ibp_codec_chunk_bytes(c);
			cr_assert_eq(ibp_codec_nchunks(c), (R + C - 1) / C);
			cr_assert_eq(ibp_codec_row_bytes(c), R);
			for (unsigned kk = 0; kk < ibp_codec_nclusters(c); kk++) {
				const uint8_t *m = ibp_codec_mask(c, kk), *v = ibp_codec_bitval(c, kk);
				for (uint64_t p = R; p < ibp_codec_nchunks(c) * C; p++)
					cr_assert(m[p] == 0xff && v[p] == 0, "padding of R=%llu",
						  (unsigned long long)R);
			}
			uint64_t size = roundtrip(c, rows, n, R);
			cr_assert_leq(size, n * R);
			ibp_codec_free(c);
			/* Each fixed chunk size too. */
			for (unsigned ci = 0; ci < 4; ci++) {
				c = train(rows, n, R, CHUNKS[ci], -1, k);
				roundtrip(c, rows, n, R);
				ibp_codec_free(c);
			}
		}
		free(rows);
	}
}

Test(train, zero_and_one_rows)
{
	static const uint64_t lens[] = { 1, 5, 64 };
	for (unsigned li = 0; li < 3; li++) {
		const uint64_t R = lens[li];
		/* nrows = 0 (rows may be NULL): empty masks (padding only), any clusters. */
		for (unsigned k = 0; k <= 4; k += 4) {
			ibp_codec_t *c = train(NULL, 0, R, 0, -1, k);
			cr_assert_eq(ibp_codec_nclusters(c), 1u);
			unsigned C = ibp_codec_chunk_bytes(c);
			for (uint64_t p = 0; p < ibp_codec_nchunks(c) * C; p++)
				cr_assert_eq(ibp_codec_mask(c, 0)[p], p < R ? 0 : 0xff);
			cr_assert(ibp_codec_threshold(c) >= 0.7 && ibp_codec_threshold(c) <= 1.0);
			roundtrip(c, NULL, 0, R);
			ibp_codec_free(c);
		}
		/* nrows = 1: every bit is invariant; the row is CLEAN (or raw if tiny). */
		uint8_t row[64];
		for (unsigned i = 0; i < R; i++)
			row[i] = (uint8_t)(i * 37 + 5);
		for (unsigned k = 0; k <= 3; k++) {
			ibp_codec_t *c = train(row, 1, R, 0, -1, k);
			cr_assert_eq(ibp_codec_nclusters(c), 1u);
			uint8_t m[64], v[64];
			memset(m, 0xff, R);
			memcpy(v, row, R);
			check_mask(c, 0, m, v, R);
			cr_assert_eq(roundtrip(c, row, 1, R), 0u); /* CLEAN with S = 0 */
			ibp_codec_free(c);
		}
	}
}

/* Half float32 N(0,1) rows, half sparse binary rows, interleaved: two
 * clusters beat one by total size with metadata counted. */
Test(train, two_clusters_beat_one)
{
	const uint64_t n = 4000, R = 256;
	tu_rng_t r;
	tu_rng_seed(&r, 21);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++) {
		if (i % 2)
			gen_normal(&r, rows + i * R, 1, R);
		else
			tu_gen_rows(&r, TU_SPARSE_BITS, rows + i * R, 1, R);
	}
	ibp_codec_t *c1 = train(rows, n, R, 4, -1, 1);
	ibp_codec_t *c2 = train(rows, n, R, 4, -1, 2);
	cr_assert_eq(ibp_codec_nclusters(c2), 2u);
	uint64_t t1 = total_size(c1, rows, n, R), t2 = total_size(c2, rows, n, R);
	cr_assert_lt(t2, t1, "k=2 total %llu, k=1 total %llu", (unsigned long long)t2,
		     (unsigned long long)t1);
	cr_assert_lt((double)t2, 0.9 * (double)t1, "k=2 should win clearly: %llu vs %llu",
		     (unsigned long long)t2, (unsigned long long)t1);
	/* Each kind of row lands in one cluster. */
	unsigned kind0 = ibp_choose_cluster(c2, rows), kind1 = ibp_choose_cluster(c2, rows + R);
	cr_assert_neq(kind0, kind1);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(ibp_choose_cluster(c2, rows + i * R), i % 2 ? kind1 : kind0);
	/* Auto clusters: at least as good as k = 1 at the same chunk size. */
	ibp_codec_t *ca = train(rows, n, R, 4, -1, 0);
	cr_assert_gt(ibp_codec_nclusters(ca), 1u);
	cr_assert_leq(total_size(ca, rows, n, R), t1);
	ibp_codec_free(c1);
	ibp_codec_free(c2);
	ibp_codec_free(ca);
	free(rows);
}

/* More rows than the cluster fit uses (2M rows): the strided cluster
 * sample path, still deterministic and still better than k = 1. */
Test(train, clusters_on_a_large_sample)
{
	const uint64_t n = 2500000, R = 8;
	tu_rng_t r;
	tu_rng_seed(&r, 33);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++) {
		if (i % 3)
			gen_normal(&r, rows + i * R, 1, R);
		else
			tu_gen_rows(&r, TU_SPARSE_BITS, rows + i * R, 1, R);
	}
	ibp_codec_t *c1 = train(rows, n, R, 0, -1, 1);
	ibp_codec_t *c2 = train(rows, n, R, 0, -1, 2);
	ibp_codec_t *c3 = train(rows, n, R, 0, -1, 2);
	cr_assert(same_codec(c2, c3));
	cr_assert_eq(ibp_codec_nclusters(c2), 2u);
	uint64_t t1 = total_size(c1, rows, n, R), t2 = total_size(c2, rows, n, R);
	cr_assert_lt(t2, t1, "k=2 total %llu, k=1 total %llu", (unsigned long long)t2,
		     (unsigned long long)t1);
	ibp_codec_free(c1);
	ibp_codec_free(c2);
	ibp_codec_free(c3);
	free(rows);
}

/* Fixed k on data with fewer distinct rows than k: fewer clusters come back
 * and everything still round-trips; k above the row count is capped. */
Test(train, clusters_capped)
{
	const uint64_t R = 24;
	uint8_t rows[6 * 24];
	for (unsigned i = 0; i < 6; i++)
		memset(rows + i * R, i % 2 ? 0xf0 : 0x0f, R);
	ibp_codec_t *c = train(rows, 6, R, 0, -1, 8);
	cr_assert_leq(ibp_codec_nclusters(c), 2u);
	roundtrip(c, rows, 6, R);
	ibp_codec_free(c);
	c = train(rows, 3, R, 0, -1, 64);
	cr_assert_leq(ibp_codec_nclusters(c), 3u);
	roundtrip(c, rows, 3, R);
	ibp_codec_free(c);
}

Test(train, invalid_options)
{
	uint8_t rows[16] = { 0 };
	ibp_codec_t *c = (ibp_codec_t *)rows;
	ibp_train_opts_t o;
	struct {
		unsigned chunk;
		double t, sample;
		unsigned k;
		int nt;
	} bad[] = {
		{ 3, -1, 0, 1, 0 },   { 16, -1, 0, 1, 0 }, { 0, 0.4, 0, 1, 0 }, { 0, 1.01, 0, 1, 0 },
		{ 0, NAN, 0, 1, 0 },  { 0, -1, -0.1, 1, 0 }, { 0, -1, 1.5, 1, 0 }, { 0, -1, NAN, 1, 0 },
		{ 0, -1, 0, 65, 0 },  { 0, -1, 0, 1, -1 },  { 0, -1, 0, 1, 0 },
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ibp_train_opts_default(&o);
		o.chunk_bytes = bad[i].chunk;
		o.threshold = bad[i].t;
		o.sample = bad[i].sample;
		o.clusters = bad[i].k;
		o.nthreads = bad[i].nt;
		if (i == sizeof(bad) / sizeof(bad[0]) - 1)
			o.xval = 3; /* the last case: only xval is wrong */
		c = (ibp_codec_t *)rows;
		cr_assert_eq(ibp_codec_train(rows, 4, 4, &o, &c), IBP_ERR_INVALID_ARG, "case %u", i);
		cr_assert_null(c, "case %u: out not cleared", i);
		cr_assert_neq(ibp_last_error()[0], '\0');
	}
	ibp_train_opts_default(&o);
	cr_assert_eq(ibp_codec_train(rows, 4, 0, &o, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_train(NULL, 4, 4, &o, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_train(rows, 4, 4, &o, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_train(rows, UINT64_MAX / 2, 4, &o, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_train(rows, 1, IBP_MAX_ROW_BYTES + 1, &o, &c), IBP_ERR_INVALID_ARG);
	/* Edge values that are valid. */
	o.threshold = 0.5;
	o.sample = 1.0;
	o.clusters = IBP_MAX_CLUSTERS;
	cr_assert_eq(ibp_codec_train(rows, 4, 4, &o, &c), IBP_OK, "%s", ibp_last_error());
	roundtrip(c, rows, 4, 4);
	ibp_codec_free(c);
	cr_assert_eq(ibp_codec_train(rows, 4, 4, NULL, &c), IBP_OK); /* NULL opts = defaults */
	ibp_codec_free(c);
}

/* ---- Xvals ---------------------------------------------------------- */

/* float32 rows of 0.0 and 1.0 (a fraction p of ones), like bag-of-words. */
static void gen_binary_f32(tu_rng_t *r, uint8_t *rows, uint64_t n, uint64_t R, double p)
{
	memset(rows, 0, n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t q = 0; q + 4 <= R; q += 4)
			if (tu_uniform(r) < p) {
				float one = 1.0f;
				memcpy(rows + i * R + q, &one, 4);
			}
}

/* Checks the Xvals of cluster 0 against the rule, by brute force over all
 * rows: an enabled chunk's hits * e_j > exceptions_j, and a strict majority
 * value among the exceptions that pays is enabled with that value. */
static uint64_t check_xval_rule(const ibp_codec_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	const unsigned C = ibp_codec_chunk_bytes(c);
	const uint64_t D = ibp_codec_nchunks(c);
	const uint8_t *m = ibp_codec_mask(c, 0), *b = ibp_codec_bitval(c, 0), *x = ibp_codec_xval(c, 0);
	uint8_t *pad = tu_xcalloc(D * C);
	uint64_t *vals = tu_xcalloc(n * sizeof(uint64_t)), enabled = 0;
	for (uint64_t j = 0; j < D; j++) {
		uint64_t mj = tu_word(m, C, j), bj = tu_word(b, C, j), xj = tu_word(x, C, j);
		unsigned e = (unsigned)__builtin_popcountll(mj);
		uint64_t exc = 0, hits = 0;
		for (uint64_t i = 0; i < n; i++) {
			memset(pad, 0, D * C);
			memcpy(pad + j * C, rows + i * R + j * C, (j + 1) * C <= R ? C : R - j * C);
			uint64_t v = tu_word(pad, C, j) & mj;
			if (v == bj)
				continue;
			vals[exc++] = v;
			hits += v == xj;
		}
		if (xj != bj) {
			enabled++;
			cr_assert_gt(hits * e, exc, "chunk %llu enabled: %llu hits, %llu exceptions, e %u",
				     (unsigned long long)j, (unsigned long long)hits,
				     (unsigned long long)exc, e);
		}
		/* a strict majority that pays must be the chunk's Xval */
		for (uint64_t a = 0; a < exc; a++) {
			uint64_t cnt = 0;
			for (uint64_t q = 0; q < exc; q++)
				cnt += vals[q] == vals[a];
			if (2 * cnt > exc && cnt * e > exc && ibp_codec_has_xval(c))
				cr_assert_eq(xj, vals[a], "chunk %llu: Xval %llx, majority %llx",
					     (unsigned long long)j, (unsigned long long)xj,
					     (unsigned long long)vals[a]);
			if (2 * cnt > exc)
				break;
		}
	}
	free(pad);
	free(vals);
	return enabled;
}

/* Sparse 0/1 float32 rows at C = 2: the upper halves (3F80 when the value
 * is 1.0f) get Xval 3F80; the rows shrink and still decode byte-exact. */
Test(train, xval_pays_on_sparse_binary)
{
	const uint64_t n = 3000, R = 4 * 500;
	tu_rng_t r;
	tu_rng_seed(&r, 41);
	uint8_t *rows = tu_xcalloc(n * R);
	gen_binary_f32(&r, rows, n, R, 0.012);
	ibp_codec_t *c = train(rows, n, R, 2, -1, 1);
	cr_assert_eq(ibp_codec_has_xval(c), 1);
	const uint64_t D = ibp_codec_nchunks(c);
	uint64_t up = 0;
	for (uint64_t j = 0; j < D; j++) {
		uint64_t x = tu_word(ibp_codec_xval(c, 0), 2, j), b = tu_word(ibp_codec_bitval(c, 0), 2, j);
		if (j % 2) { /* upper half of a float */
			cr_assert_eq(x, 0x3F80u, "chunk %llu: Xval %llx", (unsigned long long)j,
				     (unsigned long long)x);
			up++;
		} else {
			cr_assert_eq(x, b, "lower half %llu enabled", (unsigned long long)j);
		}
	}
	cr_assert_eq(up, D / 2);
	cr_assert_eq(check_xval_rule(c, rows, n, R), D / 2);
	uint64_t with = roundtrip(c, rows, n, R);
	/* the same Mask/Bitval without Xvals */
	ibp_codec_t *p;
	cr_assert_eq(ibp_codec_create(R, 2, 1, ibp_codec_mask(c, 0), ibp_codec_bitval(c, 0), &p), IBP_OK);
	uint64_t without = roundtrip(p, rows, n, R);
	cr_assert_lt((double)with, 0.75 * (double)without, "with Xvals %llu, without %llu",
		     (unsigned long long)with, (unsigned long long)without);
	/* and with the Xval table counted, the whole set is still smaller */
	cr_assert_lt(total_size(c, rows, n, R), total_size(p, rows, n, R));
	/* chunk auto keeps Xvals and beats the paper layout by far */
	ibp_codec_t *a = train(rows, n, R, 0, -1, 1);
	cr_assert_eq(ibp_codec_has_xval(a), 1);
	uint64_t ta = total_size(a, rows, n, R);
	cr_assert_leq(ta, total_size(c, rows, n, R));
	uint64_t paper = ibp_paper_layout_size(a, rows, n);
	cr_assert_lt(5 * roundtrip(a, rows, n, R), paper, "rows %llu, paper layout %llu",
		     (unsigned long long)roundtrip(a, rows, n, R), (unsigned long long)paper);
	/* portable and BMI2 give the same bytes: checked by roundtrip's
	 * batch == per-row sizes; decode through both paths here */
	for (int impl = IBP_IMPL_PORTABLE; impl <= IBP_IMPL_BMI2; impl++)
		if (ibp_codec_set_impl(c, (ibp_impl_t)impl) == IBP_OK)
			cr_assert_eq(roundtrip(c, rows, n, R), with);
	ibp_codec_free(a);
	ibp_codec_free(p);
	ibp_codec_free(c);
	free(rows);
}

/* Brute force of the vote and the enabling rule on data with values that
 * sometimes have a majority and sometimes not; chunk sizes 1..8. */
Test(train, xval_rule_brute_force)
{
	const uint64_t n = 4000, R = 24;
	tu_rng_t r;
	tu_rng_seed(&r, 43);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p++) {
			double u = tu_uniform(&r);
			/* byte p: mostly 0; else a favourite value (share rising with p),
			 * else random */
			uint8_t fav = (uint8_t)(0x11 * (p % 15 + 1));
			double pe = 0.04 + 0.01 * (double)(p % 5), pf = (double)(p % 8) / 8.0;
			rows[i * R + p] = u >= pe ? 0 : tu_uniform(&r) < pf ? fav : (uint8_t)tu_next(&r);
		}
	uint64_t en = 0;
	for (unsigned ci = 0; ci < 4; ci++) {
		ibp_codec_t *c = train(rows, n, R, CHUNKS[ci], -1, 1);
		en += check_xval_rule(c, rows, n, R);
		roundtrip(c, rows, n, R);
		ibp_codec_free(c);
	}
	cr_assert_gt(en, 0);
	free(rows);
}

/* A few rows with a single 1.0f each and long rows: the Xval table (D * C
 * bytes) would cost more than the hits save, so training keeps none. */
Test(train, xval_not_worth_its_table)
{
	const uint64_t n = 8, R = 4 * 2048;
	uint8_t *rows = tu_xcalloc(n * R);
	float one = 1.0f;
	for (uint64_t i = 0; i < n; i++)
		memcpy(rows + i * R + 4 * (i * 97 % 2048), &one, 4);
	ibp_codec_t *c = train(rows, n, R, 2, 0.8, 1);
	cr_assert_eq(ibp_codec_has_xval(c), 0);
	cr_assert_arr_eq(ibp_codec_xval(c, 0), ibp_codec_bitval(c, 0), R);
	roundtrip(c, rows, n, R);
	ibp_codec_free(c);
	free(rows);
}

/* Clusters fit their own Xvals: a binary half and a float half. */
Test(train, xval_with_clusters)
{
	const uint64_t n = 4000, R = 256;
	tu_rng_t r;
	tu_rng_seed(&r, 45);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++) {
		if (i % 2)
			gen_normal(&r, rows + i * R, 1, R);
		else
			gen_binary_f32(&r, rows + i * R, 1, R, 0.05);
	}
	ibp_codec_t *c = train(rows, n, R, 2, -1, 2);
	cr_assert_eq(ibp_codec_nclusters(c), 2u);
	cr_assert_eq(ibp_codec_has_xval(c), 1);
	unsigned kb = ibp_choose_cluster(c, rows);
	const uint8_t *x = ibp_codec_xval(c, kb);
	cr_assert_eq(tu_word(x, 2, 1), 0x3F80u);
	roundtrip(c, rows, n, R);
	ibp_codec_free(c);
	free(rows);
}

/* The vote runs in row blocks merged in order: the same Xvals for any
 * thread count, also where exceptions have no majority. */
Test(train, xval_deterministic)
{
	const uint64_t n = 20000, R = 256;
	tu_rng_t r;
	tu_rng_seed(&r, 47);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t q = 0; q + 4 <= R; q += 4) {
			double u = tu_uniform(&r);
			/* mostly 0; then 1.0f, or (on later columns ever more often)
			 * one of a few other values */
			float v = u < 0.9 ? 0.0f
				  : tu_uniform(&r) < 0.3 + (double)q / (double)R ? 1.0f
				  : (float)(2 + tu_below(&r, 3));
			memcpy(rows + i * R + q, &v, 4);
		}
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	ibp_codec_t *c[3];
	for (int t = 0; t < 3; t++) {
		o.nthreads = t + 1;
		cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c[t]), IBP_OK, "%s", ibp_last_error());
	}
	cr_assert_eq(ibp_codec_has_xval(c[0]), 1);
	cr_assert(same_codec(c[0], c[1]) && same_codec(c[0], c[2]), "thread count changed the codec");
	check_xval_rule(c[0], rows, n, R);
	roundtrip(c[0], rows, n, R);
	for (int t = 0; t < 3; t++)
		ibp_codec_free(c[t]);
	free(rows);
}

/* xval = 0: the same search without Xvals (what training did before them). */
Test(train, xval_off)
{
	const uint64_t n = 3000, R = 4 * 500;
	tu_rng_t r;
	tu_rng_seed(&r, 41);
	uint8_t *rows = tu_xcalloc(n * R);
	gen_binary_f32(&r, rows, n, R, 0.012);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.xval = 0;
	o.chunk_bytes = 2;
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK);
	cr_assert_eq(ibp_codec_has_xval(c), 0);
	/* the same Masks as with Xvals at the same T, by brute force */
	uint8_t *m = tu_xcalloc(R), *v = tu_xcalloc(R);
	expect_mask(rows, n, R, ibp_codec_threshold(c), m, v);
	check_mask(c, 0, m, v, R);
	uint64_t without = roundtrip(c, rows, n, R);
	ibp_codec_t *x = train(rows, n, R, 2, -1, 1);
	cr_assert_lt(roundtrip(x, rows, n, R), without);
	ibp_codec_free(x);
	ibp_codec_free(c);
	free(m);
	free(v);
	free(rows);
}

/* xval = 1 (the default) keeps Xvals only when they save >= 5%: a tiny gain
 * on dense rows is dropped, the large gain on sparse 0/1 rows is kept. */
Test(train, xval_min_gain)
{
	const uint64_t n = 4000, R = 64;
	tu_rng_t r;
	tu_rng_seed(&r, 47);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++) {
		for (uint64_t p = 0; p < 32; p++)
			rows[i * R + p] = (uint8_t)tu_next(&r);
		if (tu_below(&r, 100) < 3)
			rows[i * R + 32] = 0x55;
	}
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	cr_assert_eq(o.xval, 1);
	o.chunk_bytes = 1;
	ibp_codec_t *c1 = NULL, *c2 = NULL;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c1), IBP_OK, "%s", ibp_last_error());
	o.xval = 2;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c2), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(c2), 1, "xval=2 fits the 0x55 exceptions");
	cr_assert_eq(ibp_codec_has_xval(c1), 0, "a gain far below 5%% is dropped");
	/* both round-trip; the Xvals xval=2 keeps make no row larger and save under 5% */
	uint64_t s1 = roundtrip(c1, rows, n, R), s2 = roundtrip(c2, rows, n, R);
	cr_assert_leq(s2, s1, "xval=2 sizes %llu, xval=1 %llu", (unsigned long long)s2, (unsigned long long)s1);
	cr_assert_lt((s1 - s2) * 20, s1, "a gain of %llu of %llu is not below 5%%", (unsigned long long)(s1 - s2),
		     (unsigned long long)s1);
	ibp_codec_free(c1);
	ibp_codec_free(c2);

	const uint64_t n2 = 3000, R2 = 4 * 500;
	uint8_t *sparse = tu_xcalloc(n2 * R2);
	gen_binary_f32(&r, sparse, n2, R2, 0.012);
	o.xval = 1;
	o.chunk_bytes = 0;
	cr_assert_eq(ibp_codec_train(sparse, n2, R2, &o, &c1), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(c1), 1, "sparse 0/1 rows keep their Xvals");
	ibp_codec_free(c1);
	free(sparse);
	free(rows);
}
