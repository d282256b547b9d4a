/* test_train.c - ibp_codec_train: Mask/Bitval on hand-built data, T = 1.0,
 * the threshold and chunk-size searches against brute force, sample
 * determinism, odd row lengths, tiny inputs, clusters, invalid options.
 * Every trained codec must round-trip the data byte-exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
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
 * + 1 cluster byte a row when k > 1 + Mask and Bitval. */
static uint64_t total_size(const ibp_codec_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	unsigned k = ibp_codec_nclusters(c);
	uint64_t meta = 2ull * k * ibp_codec_nchunks(c) * ibp_codec_chunk_bytes(c);
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

/* Rows whose bits are invariant with graded probabilities, so that the best
 * T lies inside the sweep. */
static uint8_t *graded_rows(uint64_t seed, uint64_t n, uint64_t R)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p++) {
			uint8_t x = 0;
			for (unsigned b = 0; b < 8; b++) {
				/* Bit (p, b) is 1 with probability q: from near-constant to random. */
				double q = 0.5 * (double)((p * 8 + b) % 23) / 22.0;
				x |= (uint8_t)((tu_uniform(&r) < q) << b);
			}
			rows[i * R + p] = x;
		}
	return rows;
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
		    memcmp(ibp_codec_bitval(a, k), ibp_codec_bitval(b, k), W))
			return 0;
	return 1;
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
		{ 0, -1, 0, 65, 0 },  { 0, -1, 0, 1, -1 },
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ibp_train_opts_default(&o);
		o.chunk_bytes = bad[i].chunk;
		o.threshold = bad[i].t;
		o.sample = bad[i].sample;
		o.clusters = bad[i].k;
		o.nthreads = bad[i].nt;
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
