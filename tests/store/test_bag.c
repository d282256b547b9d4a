/* test_bag.c - ibp_store_embedding_bag: every mode against a plain reference
 * written here (bitwise, float32 and 16-bit rows), empty and all-padding
 * bags, int32 and int64 ids, thread-count invariance, the +0 start of a sum
 * (a lone -0 row), fused and unfused weights, block codecs agreeing with the
 * row codec, every look-ahead distance giving the same bits, every
 * argument error before any work, and bags run on the store's worker pool
 * (no thread started per call; concurrent bags and gathers on one store). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fixtures.h"
#include "fp8/fp8_impl.h"

#define DIM 37 /* odd: the vector loops' tails run too */
#define NROWS 600
#define PAD 7

/* Every pthread_create of this binary (the library's included) is counted,
 * so a test can tell that the bag starts no thread per call. */
static unsigned long threads_started;

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	*(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
	__atomic_fetch_add(&threads_started, 1, __ATOMIC_RELAXED);
	return real(th, attr, fn, arg);
}

/* float rows with a row of -0 (row 3) and a row of +0 (row 4) */
static float *make_table(uint64_t seed)
{
	float *t = xcalloc(NROWS * DIM * sizeof(float));
	rng_t r = { seed };
	for (uint64_t i = 0; i < NROWS * DIM; i++)
		t[i] = (float)((int64_t)(rnd(&r) % 20001) - 10000) / 7919.0f;
	for (int j = 0; j < DIM; j++) {
		t[3 * DIM + j] = -0.0f;
		t[4 * DIM + j] = 0.0f;
	}
	return t;
}

static void narrow(ibp_dtype_t dt, const float *src, uint16_t *dst, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(src[i]) : fp8i_f32_to_f16(src[i]);
}

static float widen1(ibp_dtype_t dt, uint16_t h)
{
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

/* A store of `rows` (float32 values, stored as dt) with codec ibp or exp. */
static ibp_store_t *open_table(const float *rows, ibp_dtype_t dt, int exp, const char *name)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s.ibp", tmpdir, name);
	uint64_t shape[2] = { NROWS, DIM };
	void *data = (void *)rows;
	uint16_t *h = NULL;
	if (dt != IBP_DTYPE_F32) {
		h = xcalloc(NROWS * DIM * 2);
		narrow(dt, rows, h, NROWS * DIM);
		data = h;
	}
	if (exp == 2)
		cr_assert_eq(ibp_pack_exp_rows(path, data, dt, 2, shape, 1), IBP_OK, "%s", ibp_last_error());
	else if (exp)
		cr_assert_eq(ibp_pack_exp(path, data, dt, 2, shape, NULL, 16), IBP_OK, "%s", ibp_last_error());
	else
		cr_assert_eq(ibp_pack(path, data, dt, 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK, "%s",
			     ibp_last_error());
	free(h);
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(path, 0, &s), IBP_OK, "%s", ibp_last_error());
	return s;
}

/* The reference: PyTorch's CPU rules written the plain way. `rows` are the
 * stored values as float32 (16-bit ones widened). Output in dt. */
static void reference(const float *rows, ibp_dtype_t dt, ibp_bag_mode_t mode, unsigned flags, const int64_t *ids,
		      const int64_t *off, uint64_t n_bags, const float *w, int64_t pad, void *out)
{
	for (uint64_t b = 0; b < n_bags; b++) {
		float acc[DIM] = { 0 };
		uint64_t cnt = 0;
		for (int64_t i = off[b]; i < off[b + 1]; i++) {
			if (ids[i] == pad)
				continue;
			const float *r = rows + ids[i] * DIM;
			for (int j = 0; j < DIM; j++) {
				if (mode == IBP_BAG_MAX)
					acc[j] = cnt == 0 || r[j] > acc[j] ? r[j] : acc[j];
				else if (w && (flags & IBP_BAG_UNFUSED_WEIGHTS))
					acc[j] = acc[j] + w[i] * r[j];
				else if (w)
					acc[j] = fmaf(w[i], r[j], acc[j]);
				else
					acc[j] = acc[j] + r[j];
			}
			cnt++;
		}
		if (cnt && mode == IBP_BAG_MEAN && dt != IBP_DTYPE_F32) {
			uint16_t s[DIM];
			narrow(dt, acc, s, DIM);
			for (int j = 0; j < DIM; j++)
				acc[j] = widen1(dt, s[j]) / (float)cnt;
		} else if (cnt && mode == IBP_BAG_MEAN)
			for (int j = 0; j < DIM; j++)
				acc[j] = acc[j] / (float)cnt;
		if (dt == IBP_DTYPE_F32)
			memcpy((float *)out + b * DIM, acc, sizeof(acc));
		else
			narrow(dt, acc, (uint16_t *)out + b * DIM, DIM);
	}
}

/* Bags of sizes 0..12, some empty, some all padding; ids include rows 3
 * (-0), 4 (+0) and PAD. */
typedef struct bags {
	int64_t *ids, *off;
	int32_t *ids32;
	float *w;
	uint64_t n_ids, n_bags;
} bags_t;

static bags_t make_bags(uint64_t n_bags, uint64_t seed)
{
	bags_t g = { 0 };
	rng_t r = { seed };
	g.n_bags = n_bags;
	g.off = xcalloc((n_bags + 1) * sizeof(int64_t));
	g.ids = xcalloc((n_bags * 12 + 1) * sizeof(int64_t));
	g.ids32 = xcalloc((n_bags * 12 + 1) * sizeof(int32_t));
	g.w = xcalloc((n_bags * 12 + 1) * sizeof(float));
	for (uint64_t b = 0; b < n_bags; b++) {
		uint64_t len = rnd(&r) % 13;
		for (uint64_t k = 0; k < len; k++) {
			uint64_t x = rnd(&r);
			int64_t id = (int64_t)(x % NROWS);
			if (b % 11 == 5)
				id = PAD; /* a bag of padding only */
			else if (x % 17 == 0)
				id = 3 + (int64_t)(x % 2); /* -0 or +0 */
			else if (x % 23 == 0)
				id = PAD;
			g.ids[g.n_ids] = id;
			g.ids32[g.n_ids] = (int32_t)id;
			g.w[g.n_ids] = (float)(rnd(&r) % 1000) / 331.0f - 1.0f;
			g.n_ids++;
		}
		g.off[b + 1] = (int64_t)g.n_ids;
	}
	g.off[0] = 0;
	g.ids[0] = 3; /* the first bag starts with -0 (if it has rows) */
	g.ids32[0] = 3;
	return g;
}

static void free_bags(bags_t *g)
{
	free(g->ids);
	free(g->ids32);
	free(g->off);
	free(g->w);
}

/* Every mode, weights, padding, id width and thread count against the
 * reference, bitwise, for one dtype and codec. */
static void check_all(ibp_dtype_t dt, int exp)
{
	float *t = make_table(41);
	ibp_store_t *s = open_table(t, dt, exp, exp == 2 ? "exprows" : exp ? "exp" : "ibp");
	if (dt != IBP_DTYPE_F32) { /* the reference sees the stored values */
		uint16_t *h = xcalloc(NROWS * DIM * 2);
		narrow(dt, t, h, NROWS * DIM);
		for (uint64_t i = 0; i < NROWS * DIM; i++)
			t[i] = widen1(dt, h[i]);
		free(h);
	}
	bags_t g = make_bags(257, 5);
	size_t esz = dt == IBP_DTYPE_F32 ? 4 : 2, obytes = g.n_bags * DIM * esz;
	uint8_t *want = xcalloc(obytes), *got = xcalloc(obytes);
	const int threads[] = { 1, 2, 3, 0 };
	for (int mode = 0; mode < 3; mode++)
		for (int weighted = 0; weighted < (mode == IBP_BAG_SUM ? 3 : 1); weighted++)
			for (int pad = 0; pad < 2; pad++) {
				const float *w = weighted ? g.w : NULL;
				unsigned flags = weighted == 2 ? IBP_BAG_UNFUSED_WEIGHTS : 0;
				int64_t padding = pad ? PAD : -1;
				reference(t, dt, (ibp_bag_mode_t)mode, flags, g.ids, g.off, g.n_bags, w, padding, want);
				for (size_t k = 0; k < 5; k++)
					for (int wide = 0; wide < 2; wide++) {
						/* k == 4: one thread with the portable kernels forced */
						cr_assert_eq(setenv("IBP_FORCE_PORTABLE", k == 4 ? "1" : "0", 1), 0);
						memset(got, 0xA5, obytes);
						ibp_status_t st = ibp_store_embedding_bag(
							s, (ibp_bag_mode_t)mode, flags, wide ? (void *)g.ids : (void *)g.ids32,
							wide ? IBP_DTYPE_I64 : IBP_DTYPE_I32, g.n_ids, g.off, g.n_bags, w,
							padding, got, k == 4 ? 1 : threads[k]);
						cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
						for (uint64_t b = 0; b < g.n_bags; b++)
							cr_assert(memcmp(got + b * DIM * esz, want + b * DIM * esz,
									 DIM * esz) == 0,
								  "dtype %d exp %d mode %d weighted %d pad %d threads %d "
								  "int%d: bag %llu differs",
								  (int)dt, exp, mode, weighted, pad, k == 4 ? -1 : threads[k],
								  wide ? 64 : 32,
								  (unsigned long long)b);
					}
			}
	unsetenv("IBP_FORCE_PORTABLE");
	free(want);
	free(got);
	free_bags(&g);
	ibp_store_close(s);
	free(t);
}

Test(bag, float32_matches_reference, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_all(IBP_DTYPE_F32, 0);
}

Test(bag, float16_matches_reference, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_all(IBP_DTYPE_F16, 0);
}

Test(bag, bfloat16_matches_reference, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_all(IBP_DTYPE_BF16, 0);
}

/* A store of `rows` x `dim` 16-bit values h (IBP rows, packed layout). */
static ibp_store_t *open_raw16(const uint16_t *h, ibp_dtype_t dt, uint64_t rows, uint64_t dim, const char *name)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s.ibp", tmpdir, name);
	uint64_t shape[2] = { rows, dim };
	cr_assert_eq(ibp_pack(path, h, dt, 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK, "%s", ibp_last_error());
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(path, 0, &s), IBP_OK, "%s", ibp_last_error());
	return s;
}

/* Every 16-bit pattern (NaNs, infinities, subnormals, -0) through a bag of
 * one row, sum and max, with the vector widening (F16C for float16 where
 * the CPU has it) and with the portable kernels forced: the same bits as
 * the scalar reference. Bug caught: none yet (issue 29 added the F16C
 * widening; this pins it to the scalar conversion). */
Test(bag, every_16bit_value_widens_exactly, .init = make_tmpdir, .fini = remove_tmpdir)
{
	enum { R16 = 1024, D16 = 64 };
	uint16_t *h = xcalloc(R16 * D16 * 2);
	for (uint32_t v = 0; v < R16 * D16; v++)
		h[v] = (uint16_t)v;
	int64_t *ids = xcalloc(R16 * 8), *off = xcalloc((R16 + 1) * 8);
	for (int64_t i = 0; i <= R16; i++) {
		off[i] = i;
		if (i < R16)
			ids[i] = (R16 - 1 - i) * 7 % R16; /* a permutation */
	}
	uint16_t *got = xcalloc(R16 * D16 * 2), *want = xcalloc(R16 * D16 * 2);
	const ibp_dtype_t dts[2] = { IBP_DTYPE_F16, IBP_DTYPE_BF16 };
	for (int d = 0; d < 2; d++) {
		ibp_store_t *s = open_raw16(h, dts[d], R16, D16, d ? "all1" : "all0");
		for (int mode = 0; mode < 3; mode += 2) { /* sum, max */
			for (int64_t b = 0; b < R16; b++)
				for (int j = 0; j < D16; j++) {
					/* sum: 0 + x; max: x; then rounded back (NaNs quieted) */
					float x = widen1(dts[d], h[ids[b] * D16 + j]);
					float a = mode == IBP_BAG_SUM ? 0.0f + x : x;
					narrow(dts[d], &a, &want[b * D16 + j], 1);
				}
			for (int portable = 0; portable < 2; portable++) {
				cr_assert_eq(setenv("IBP_FORCE_PORTABLE", portable ? "1" : "0", 1), 0);
				memset(got, 0xA5, R16 * D16 * 2);
				cr_assert_eq(ibp_store_embedding_bag(s, (ibp_bag_mode_t)mode, 0, ids, IBP_DTYPE_I64, R16, off, R16,
								     NULL, -1, got, 1),
					     IBP_OK, "%s", ibp_last_error());
				for (int64_t k = 0; k < R16 * D16; k++)
					cr_assert_eq(got[k], want[k], "dtype %d mode %d portable %d: value 0x%04x -> 0x%04x, want 0x%04x",
						     (int)dts[d], mode, portable, h[ids[k / D16] * D16 + k % D16], got[k], want[k]);
			}
		}
		ibp_store_close(s);
	}
	unsetenv("IBP_FORCE_PORTABLE");
	free(h), free(ids), free(off), free(got), free(want);
}

/* Max bags of two rows over every 16-bit pattern against every other
 * (NaNs, infinities, -0 and +0 on either side), the vector kernels (F16C
 * for float16) and the portable ones: a = x0, then x1 > a ? x1 : a, as
 * the float32 max. Bug caught: none yet (issue 29 folded 16-bit rows into
 * the max accumulator without the widened copy). */
Test(bag, max_of_two_16bit_rows_exactly, .init = make_tmpdir, .fini = remove_tmpdir)
{
	enum { R16 = 1024, D16 = 64, NB = 2 * R16 + 2 };
	uint16_t *h = xcalloc(R16 * D16 * 2);
	for (uint32_t v = 0; v < R16 * D16; v++)
		h[v] = (uint16_t)v;
	int64_t *ids = xcalloc(2 * NB * 8), *off = xcalloc((NB + 1) * 8);
	for (int64_t b = 0; b <= NB; b++) {
		off[b] = 2 * b;
		if (b < 2 * R16) { /* each row first once and second once, against different rows */
			ids[2 * b] = b % R16;
			ids[2 * b + 1] = (b * 389 + (b >= R16 ? 1 : 0) + 5) % R16;
		} else if (b < NB) { /* +0 against -0 (rows 0 and 512, column 0) both ways */
			ids[2 * b] = b == 2 * R16 ? 0 : 512;
			ids[2 * b + 1] = b == 2 * R16 ? 512 : 0;
		}
	}
	uint16_t *got = xcalloc(NB * D16 * 2), *want = xcalloc(NB * D16 * 2);
	const ibp_dtype_t dts[2] = { IBP_DTYPE_F16, IBP_DTYPE_BF16 };
	for (int d = 0; d < 2; d++) {
		ibp_store_t *s = open_raw16(h, dts[d], R16, D16, d ? "max1" : "max0");
		for (int64_t b = 0; b < NB; b++)
			for (int j = 0; j < D16; j++) {
				float a = widen1(dts[d], h[ids[2 * b] * D16 + j]);
				const float x = widen1(dts[d], h[ids[2 * b + 1] * D16 + j]);
				a = x > a ? x : a;
				narrow(dts[d], &a, &want[b * D16 + j], 1);
			}
		for (int portable = 0; portable < 2; portable++) {
			cr_assert_eq(setenv("IBP_FORCE_PORTABLE", portable ? "1" : "0", 1), 0);
			memset(got, 0xA5, NB * D16 * 2);
			cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_MAX, 0, ids, IBP_DTYPE_I64, 2 * NB, off, NB, NULL,
							     -1, got, 1),
				     IBP_OK, "%s", ibp_last_error());
			for (int64_t k = 0; k < NB * D16; k++)
				cr_assert_eq(got[k], want[k],
					     "dtype %d portable %d: max(0x%04x, 0x%04x) -> 0x%04x, want 0x%04x", (int)dts[d],
					     portable, h[ids[2 * (k / D16)] * D16 + k % D16],
					     h[ids[2 * (k / D16) + 1] * D16 + k % D16], got[k], want[k]);
		}
		ibp_store_close(s);
	}
	unsetenv("IBP_FORCE_PORTABLE");
	free(h), free(ids), free(off), free(got), free(want);
}

/* Sums of 16-bit rows rounded back to their dtype (float16 and
 * bfloat16, sum and mean, the vector narrowing and the portable one):
 * rows of random bit patterns of every magnitude (subnormals, near the
 * largest finite, infinities; no NaNs, whose payload in a NaN + NaN sum
 * depends on the operand order), bags of 1 to 6 rows, so the rounding
 * meets ties, subnormal and overflowing sums. Against the scalar
 * reference, bit for bit. */
Test(bag, float16_sums_round_exactly, .init = make_tmpdir, .fini = remove_tmpdir)
{
	enum { RH = 2048, DH = 67, NB = 3000 };
	uint16_t *h = xcalloc(RH * DH * 2);
	float *f = xcalloc(RH * DH * sizeof(float));
	int64_t *ids = xcalloc(NB * 6 * 8), *off = xcalloc((NB + 1) * 8);
	uint16_t *got = xcalloc(NB * DH * 2), *want = xcalloc(NB * DH * 2);
	const ibp_dtype_t dts[2] = { IBP_DTYPE_F16, IBP_DTYPE_BF16 };
	for (int d = 0; d < 2; d++) {
		const ibp_dtype_t dt = dts[d];
		const uint16_t expo = dt == IBP_DTYPE_F16 ? 0x7c00u : 0x7f80u;
		uint64_t x = 0x243F6A8885A308D3ull + (uint64_t)d;
		for (uint64_t v = 0; v < RH * DH; v++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			uint16_t b = (uint16_t)(x >> 48);
			if ((b & expo) == expo) /* NaN or Inf: an infinity now and then, else a finite value */
				b = (x >> 20) % 8 == 0 ? (uint16_t)(b & (0x8000u | expo)) : (uint16_t)(b & ~(expo & (expo >> 1)));
			h[v] = b;
			f[v] = widen1(dt, b);
		}
		uint64_t n = 0;
		for (uint64_t b = 0; b < NB; b++) {
			off[b] = (int64_t)n;
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			for (uint64_t k = 0; k < 1 + (x >> 40) % 6; k++)
				ids[n++] = (int64_t)((x >> (k * 5)) % RH);
		}
		off[NB] = (int64_t)n;
		ibp_store_t *s = open_raw16(h, dt, RH, DH, d ? "sums1" : "sums0");
		for (int mode = 0; mode < 2; mode++) { /* sum, mean */
			for (uint64_t b = 0; b < NB; b++) {
				float acc[DH] = { 0 };
				uint64_t cnt = (uint64_t)(off[b + 1] - off[b]);
				for (int64_t i = off[b]; i < off[b + 1]; i++)
					for (int j = 0; j < DH; j++)
						acc[j] = acc[j] + f[ids[i] * DH + j];
				uint16_t *w = want + b * DH;
				narrow(dt, acc, w, DH);
				if (mode == IBP_BAG_MEAN)
					for (int j = 0; j < DH; j++) {
						float q = widen1(dt, w[j]) / (float)cnt;
						narrow(dt, &q, &w[j], 1);
					}
			}
			for (int portable = 0; portable < 2; portable++) {
				cr_assert_eq(setenv("IBP_FORCE_PORTABLE", portable ? "1" : "0", 1), 0);
				memset(got, 0xA5, NB * DH * 2);
				cr_assert_eq(ibp_store_embedding_bag(s, (ibp_bag_mode_t)mode, 0, ids, IBP_DTYPE_I64, n, off, NB,
								     NULL, -1, got, 1),
					     IBP_OK, "%s", ibp_last_error());
				for (uint64_t k = 0; k < NB * DH; k++)
					cr_assert_eq(got[k], want[k],
						     "dtype %d mode %d portable %d: bag %llu dim %llu: 0x%04x, want 0x%04x", (int)dt,
						     mode, portable, (unsigned long long)(k / DH), (unsigned long long)(k % DH),
						     got[k], want[k]);
			}
		}
		ibp_store_close(s);
	}
	unsetenv("IBP_FORCE_PORTABLE");
	free(h), free(f), free(ids), free(off), free(got), free(want);
}

Test(bag, exp_blocks_match_reference, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_all(IBP_DTYPE_F32, 1);
	check_all(IBP_DTYPE_BF16, 1);
}

/* Rows of the exponent codec's row form (37 elements: the portable
 * decoder), every mode, weight and padding case, as the reference. */
Test(bag, exp_rows_match_reference, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_all(IBP_DTYPE_F32, 2);
	check_all(IBP_DTYPE_F16, 2);
	check_all(IBP_DTYPE_BF16, 2);
}

/* A sum starts at +0: a bag of one -0 row gives +0, its max gives -0, and
 * the weighted sum of it gives +0 too (fma(w, -0, +0) = +0). */
Test(bag, sum_starts_at_positive_zero, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(3);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "z");
	int64_t ids[1] = { 3 }, off[2] = { 0, 1 };
	float w[1] = { 2.0f }, out[DIM];
	for (int mode = 0; mode < 3; mode++) {
		ibp_status_t st = ibp_store_embedding_bag(s, (ibp_bag_mode_t)mode, 0, ids, IBP_DTYPE_I64, 1, off, 1,
							  NULL, -1, out, 1);
		cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
		for (int j = 0; j < DIM; j++)
			cr_assert_eq(signbit(out[j]) != 0, mode == IBP_BAG_MAX, "mode %d: element %d is %g", mode, j,
				     (double)out[j]);
	}
	cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, 1, off, 1, w, -1, out, 1), IBP_OK);
	for (int j = 0; j < DIM; j++)
		cr_assert(!signbit(out[j]));
	ibp_store_close(s);
	free(t);
}

Test(bag, empty_requests, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(4);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "e");
	int64_t off[4] = { 0, 0, 0, 0 };
	cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, NULL, IBP_DTYPE_I64, 0, off, 0, NULL, -1, NULL, 0),
		     IBP_OK);
	float out[3 * DIM];
	memset(out, 0xA5, sizeof(out));
	cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_MAX, 0, NULL, IBP_DTYPE_I32, 0, off, 3, NULL, -1, out, 0),
		     IBP_OK, "%s", ibp_last_error());
	for (int j = 0; j < 3 * DIM; j++)
		cr_assert(out[j] == 0.0f && !signbit(out[j]));
	ibp_store_close(s);
	free(t);
}

/* Every argument error is reported before anything is written. */
Test(bag, argument_errors_before_any_work, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(5);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "a");
	int64_t ids[4] = { 1, 2, NROWS - 1, 0 }, off[3] = { 0, 2, 4 }, dec[3] = { 0, 3, 2 }, past[3] = { 0, 2, 5 };
	int32_t ids32[4] = { 1, 2, NROWS, 0 };
	int64_t neg[4] = { 1, 2, -1, 0 };
	float w[4] = { 1, 1, 1, 1 }, out[2 * DIM];
	const ibp_bag_mode_t SUM = IBP_BAG_SUM;
	memset(out, 0xA5, sizeof(out));
#define BAG(st, ...) cr_assert_eq(ibp_store_embedding_bag(__VA_ARGS__), st, "%s", ibp_last_error())
	BAG(IBP_ERR_OUT_OF_RANGE, s, SUM, 0, ids32, IBP_DTYPE_I32, 4, off, 2, NULL, -1, out, 0);
	cr_assert(strstr(ibp_last_error(), "ids[2] = 600") != NULL, "%s", ibp_last_error());
	BAG(IBP_ERR_OUT_OF_RANGE, s, SUM, 0, neg, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, 2);
	cr_assert(strstr(ibp_last_error(), "ids[2] = -1") != NULL, "%s", ibp_last_error());
	const int64_t from1[3] = { 1, 2, 4 }; /* the position counts from ids[0], not offsets[0] */
	BAG(IBP_ERR_OUT_OF_RANGE, s, SUM, 0, neg, IBP_DTYPE_I64, 4, from1, 2, NULL, -1, out, 1);
	cr_assert(strstr(ibp_last_error(), "ids[2] = -1") != NULL, "%s", ibp_last_error());
	BAG(IBP_ERR_INVALID_ARG, NULL, SUM, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, (ibp_bag_mode_t)3, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 2, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_U64, 4, off, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, NULL, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, NULL, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, NULL, 0);
	BAG(IBP_ERR_INVALID_ARG, s, IBP_BAG_MEAN, 0, ids, IBP_DTYPE_I64, 4, off, 2, w, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, IBP_BAG_MAX, 0, ids, IBP_DTYPE_I64, 4, off, 2, w, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, dec, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, past, 2, NULL, -1, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -2, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, NROWS, out, 0);
	BAG(IBP_ERR_INVALID_ARG, s, SUM, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, out, -1);
	for (size_t i = 0; i < sizeof(out) / 4; i++) {
		uint32_t u;
		memcpy(&u, &out[i], 4);
		cr_assert_eq(u, 0xA5A5A5A5u, "out written at %zu", i);
	}
	/* ids outside the offsets' span are not read */
	BAG(IBP_OK, s, SUM, 0, neg, IBP_DTYPE_I64, 4, off, 1, NULL, -1, out, 0);
	ibp_store_close(s);

	/* rows that are not floats cannot be pooled */
	char path[160];
	snprintf(path, sizeof(path), "%s/u8.ibp", tmpdir);
	uint8_t bytes[64 * 8] = { 0 };
	uint64_t shape[2] = { 64, 8 };
	cr_assert_eq(ibp_pack(path, bytes, IBP_DTYPE_U8, 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK);
	cr_assert_eq(ibp_store_open(path, 0, &s), IBP_OK);
	BAG(IBP_ERR_UNSUPPORTED, s, SUM, 0, ids, IBP_DTYPE_I64, 1, off, 0, NULL, -1, out, 0);
#undef BAG
	ibp_store_close(s);
	free(t);
}

/* Bags far larger than a thread's share, and many more bags than threads:
 * the partition balances and covers every bag exactly once. */
Test(bag, skewed_bags_all_threads, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(6);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "k");
	const uint64_t n_bags = 1000, big = 5000;
	int64_t *off = xcalloc((n_bags + 1) * sizeof(int64_t));
	int64_t *ids = xcalloc((big + n_bags) * sizeof(int64_t));
	rng_t r = { 77 };
	uint64_t n = 0;
	for (uint64_t b = 0; b < n_bags; b++) {
		uint64_t len = b == 1 ? big : b % 3 == 0 ? 0 : 1;
		for (uint64_t k = 0; k < len; k++)
			ids[n++] = (int64_t)(rnd(&r) % NROWS);
		off[b + 1] = (int64_t)n;
	}
	float *want = xcalloc(n_bags * DIM * 4), *got = xcalloc(n_bags * DIM * 4);
	reference(t, IBP_DTYPE_F32, IBP_BAG_SUM, 0, ids, off, n_bags, NULL, -1, want);
	for (int th = 1; th <= 8; th++) {
		memset(got, 0xA5, n_bags * DIM * 4);
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, n, off, n_bags, NULL, -1,
						     got, th),
			     IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(got, want, n_bags * DIM * 4) == 0, "%d threads", th);
	}
	free(want);
	free(got);
	free(ids);
	free(off);
	ibp_store_close(s);
	free(t);
}

/* The look-ahead ring (rows read IBP_GATHER_PREFETCH ids ahead, across bag
 * boundaries and padding ids) decodes the same rows at every distance,
 * none included, for every thread count. Bug caught: a ring that falls out
 * of step with the ids (a slot not refilled, padding positions skipped). */
Test(bag, lookahead_distances_agree, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(9);
	bags_t g = make_bags(301, 12);
	size_t obytes = g.n_bags * DIM * 4;
	float *want = xcalloc(obytes), *got = xcalloc(obytes);
	const char *dist[] = { "0", "1", "7", "8", "63", "64", "1000" };
	for (int pad = 0; pad < 2; pad++) {
		int64_t padding = pad ? PAD : -1;
		reference(t, IBP_DTYPE_F32, IBP_BAG_SUM, 0, g.ids, g.off, g.n_bags, NULL, padding, want);
		for (size_t d = 0; d < sizeof(dist) / sizeof(dist[0]); d++) {
			/* the store reads the distance at open; its bags decode with its gather */
			cr_assert_eq(setenv("IBP_GATHER_PREFETCH", dist[d], 1), 0);
			/* batches of whole rows and of first lines */
			cr_assert_eq(setenv("IBP_GATHER_BATCH", d % 2 ? "3" : "64", 1), 0);
			ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "la");
			for (int th = 1; th <= 3; th += 2) {
				memset(got, 0xA5, obytes);
				cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, g.ids, IBP_DTYPE_I64, g.n_ids, g.off,
								     g.n_bags, NULL, padding, got, th),
					     IBP_OK, "%s", ibp_last_error());
				cr_assert(memcmp(got, want, obytes) == 0, "distance %s, %d threads, padding %d", dist[d],
					  th, pad);
			}
			ibp_store_close(s);
		}
	}
	unsetenv("IBP_GATHER_PREFETCH");
	unsetenv("IBP_GATHER_BATCH");
	free(want);
	free(got);
	free_bags(&g);
	free(t);
}

/* The bag runs on the store's pool: threads start once per store (with the
 * first pooled job), never per call, and results do not change. Bug caught:
 * threads started per call (the bag's former ibpi_parallel_for). */
Test(bag, no_thread_started_per_call, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(12);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "pool");
	if (ibp_store_max_threads(s) < 2) {
		ibp_store_close(s);
		free(t);
		cr_skip_test("one CPU: the bag runs on the calling thread, no pool to check");
	}
	rng_t r = { 5 };
	enum { NB = 300, PER = 5 };
	int64_t ids[NB * PER], off[NB + 1];
	for (int i = 0; i < NB * PER; i++)
		ids[i] = (int64_t)(rnd(&r) % NROWS);
	for (int b = 0; b <= NB; b++)
		off[b] = b * PER;
	float *want = xcalloc(NB * DIM * 4), *got = xcalloc(NB * DIM * 4);
	reference(t, IBP_DTYPE_F32, IBP_BAG_SUM, 0, ids, off, NB, NULL, -1, want);
	unsigned long before = __atomic_load_n(&threads_started, __ATOMIC_RELAXED), first = 0;
	for (int call = 0; call < 20; call++) {
		memset(got, 0xA5, NB * DIM * 4);
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, NB * PER, off, NB, NULL, -1,
						     got, 0),
			     IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(got, want, NB * DIM * 4) == 0, "call %d", call);
		if (call == 0)
			first = __atomic_load_n(&threads_started, __ATOMIC_RELAXED) - before;
	}
	unsigned long total = __atomic_load_n(&threads_started, __ATOMIC_RELAXED) - before;
	/* the first call starts the pool (which shows the count sees the library's threads) */
	cr_assert(first >= 1 && first <= (unsigned long)ibp_store_max_threads(s) - 1, "the pool: %lu threads", first);
	cr_assert_eq(total, first, "%lu threads started after the pool's %lu", total - first, first);
	free(want);
	free(got);
	ibp_store_close(s);
	free(t);
}

typedef struct racer {
	ibp_store_t *s;
	const int64_t *ids, *off;
	const float *want;
	const uint8_t *rows; /* the store's rows 0 .. 63, to check gathers */
	int gather;
	int bad;
} racer_t;

static void *race(void *arg)
{
	racer_t *a = arg;
	float *got = xcalloc(200 * DIM * 4);
	for (int k = 0; k < 25 && !a->bad; k++) {
		if (a->gather) {
			int64_t g[64];
			for (int i = 0; i < 64; i++)
				g[i] = 63 - i;
			if (ibp_store_gather(a->s, g, 64, got, 2) != IBP_OK)
				a->bad = 1;
			for (int i = 0; i < 64 && !a->bad; i++)
				a->bad = memcmp((uint8_t *)got + i * DIM * 4, a->rows + (63 - i) * DIM * 4, DIM * 4) != 0;
		} else {
			if (ibp_store_embedding_bag(a->s, IBP_BAG_SUM, 0, a->ids, IBP_DTYPE_I64, 200 * 3, a->off, 200,
						    NULL, -1, got, 0) != IBP_OK ||
			    memcmp(got, a->want, 200 * DIM * 4) != 0)
				a->bad = 1;
		}
	}
	free(got);
	return NULL;
}

/* Bags and gathers called at once on one store share its pool, one pooled
 * job at a time: all finish, all correct. */
Test(bag, concurrent_bags_and_gathers, .init = make_tmpdir, .fini = remove_tmpdir)
{
	float *t = make_table(13);
	ibp_store_t *s = open_table(t, IBP_DTYPE_F32, 0, "conc");
	int64_t ids[600], off[201];
	rng_t r = { 8 };
	for (int i = 0; i < 600; i++)
		ids[i] = (int64_t)(rnd(&r) % NROWS);
	for (int b = 0; b <= 200; b++)
		off[b] = b * 3;
	float *want = xcalloc(200 * DIM * 4);
	reference(t, IBP_DTYPE_F32, IBP_BAG_SUM, 0, ids, off, 200, NULL, -1, want);
	racer_t a[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		a[i] = (racer_t){ s, ids, off, want, (const uint8_t *)t, i == 3, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, race, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(a[i].bad, 0, "caller %d", i);
	}
	free(want);
	ibp_store_close(s);
	free(t);
}
