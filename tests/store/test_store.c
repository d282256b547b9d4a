/* test_store.c - the CPU store: gather semantics (request order, duplicates,
 * empty requests, bounds checks before any work), thread-count invariance,
 * pool reuse and shutdown, concurrent callers, decode_all, corrupt rows. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ibp.h"
#include "ibp/unstable.h"
#include "fixtures.h"
#include "io/container_internal.h"
#include "util/cpu.h"
#include "util/ids.h"
#include "util/parallel.h"

/* ---- helpers ------------------------------------------------------------ */

/* A store over a freshly written container. */
typedef struct fixture {
	ibp_store_t *s;
	uint8_t *rows;
	uint64_t n, R;
} fixture_t;

static fixture_t open_fixture(uint64_t n, uint64_t R, unsigned C, unsigned k, ibp_layout_t layout,
			      unsigned flags)
{
	fixture_t fx = { NULL, NULL, n, R };
	ibp_codec_t *codec = make_codec(R, C, k, 100 + R + k);
	fx.rows = make_rows(codec, n, 200 + n);
	char path[128];
	snprintf(path, sizeof(path), "%s/s%llu_%d.ibp", tmpdir, (unsigned long long)R, (int)layout);
	uint64_t shape[2] = { n, R };
	cr_assert_eq(ibp_pack_with_codec(path, codec, fx.rows, IBP_DTYPE_U8, 2, shape, layout, 0), IBP_OK,
		     "%s", ibp_last_error());
	ibp_codec_free(codec);
	cr_assert_eq(ibp_store_open(path, flags, &fx.s), IBP_OK, "%s", ibp_last_error());
	return fx;
}

static void close_fixture(fixture_t *fx)
{
	ibp_store_close(fx->s);
	free(fx->rows);
}

static void check_gather(const fixture_t *fx, const int64_t *ids, uint64_t n, const uint8_t *out)
{
	for (uint64_t i = 0; i < n; i++)
		cr_assert(memcmp(out + i * fx->R, fx->rows + (uint64_t)ids[i] * fx->R, fx->R) == 0,
			  "position %llu (row %lld) differs", (unsigned long long)i, (long long)ids[i]);
}

/* ---- tests -------------------------------------------------------------- */

Test(store, accessors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(300, 40, 4, 2, IBP_LAYOUT_PACKED, IBP_OPEN_MMAP);
	cr_assert_eq(ibp_store_nrows(fx.s), 300);
	cr_assert_eq(ibp_store_row_bytes(fx.s), 40);
	cr_assert_eq(ibp_store_dtype(fx.s), IBP_DTYPE_U8);
	cr_assert_eq(ibp_store_ndim(fx.s), 2);
	cr_assert_eq(ibp_store_shape(fx.s)[0], 300);
	cr_assert_eq(ibp_store_shape(fx.s)[1], 40);
	cr_assert_eq(ibp_codec_row_bytes(ibp_store_codec(fx.s)), 40);
	cr_assert_eq(ibp_codec_nclusters(ibp_store_codec(fx.s)), 2);
	cr_assert_not_null(ibp_store_container(fx.s));
	cr_assert_geq(ibp_store_max_threads(fx.s), 1);
	cr_assert_eq(ibp_store_verify(fx.s, 0), IBP_OK);
	close_fixture(&fx);
}

Test(store, request_order_and_duplicates, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int layout = 0; layout < 2; layout++) {
		fixture_t fx = open_fixture(500, 33, 4, 3, (ibp_layout_t)layout, IBP_OPEN_READ);
		uint64_t n = 2000;
		int64_t *ids = xcalloc(n * sizeof(int64_t));
		rng_t r = { 9 };
		for (uint64_t i = 0; i < n; i++)
			ids[i] = (int64_t)(rnd(&r) % 500);
		ids[0] = 499;
		ids[1] = 0;
		ids[2] = 0;
		ids[3] = 499;
		uint8_t *out = xcalloc(n * 33);
		for (int t = 0; t <= 3; t++) {
			memset(out, 0xEE, n * 33);
			cr_assert_eq(ibp_store_gather(fx.s, ids, n, out, t), IBP_OK, "%s", ibp_last_error());
			check_gather(&fx, ids, n, out);
		}
		/* every row, reversed */
		int64_t *rev = xcalloc(500 * sizeof(int64_t));
		for (int64_t i = 0; i < 500; i++)
			rev[i] = 499 - i;
		cr_assert_eq(ibp_store_gather(fx.s, rev, 500, out, 2), IBP_OK);
		check_gather(&fx, rev, 500, out);
		/* one row repeated */
		for (uint64_t i = 0; i < 64; i++)
			rev[i] = 17;
		cr_assert_eq(ibp_store_gather(fx.s, rev, 64, out, 2), IBP_OK);
		check_gather(&fx, rev, 64, out);
		free(rev);
		free(out);
		free(ids);
		close_fixture(&fx);
	}
}

Test(store, empty_request, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(10, 8, 2, 1, IBP_LAYOUT_PACKED, 0);
	cr_assert_eq(ibp_store_gather(fx.s, NULL, 0, NULL, 0), IBP_OK);
	cr_assert_eq(ibp_store_gather(fx.s, NULL, 0, NULL, 2), IBP_OK);
	int64_t id = 3;
	uint8_t out[8];
	cr_assert_eq(ibp_store_gather(fx.s, &id, 0, out, 1), IBP_OK);
	close_fixture(&fx);
}

Test(store, out_of_range_before_any_work, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(100, 16, 4, 1, IBP_LAYOUT_INPLACE, 0);
	int64_t ids[6] = { 0, 5, 99, 7, 100, 1 };
	uint8_t out[6 * 16];
	for (int t = 1; t <= 2; t++) {
		memset(out, 0xEE, sizeof(out));
		cr_assert_eq(ibp_store_gather(fx.s, ids, 6, out, t), IBP_ERR_OUT_OF_RANGE);
		const char *msg = ibp_last_error();
		cr_assert(strstr(msg, "ids[4]") != NULL && strstr(msg, "100") != NULL, "message: %s", msg);
		for (size_t i = 0; i < sizeof(out); i++)
			cr_assert_eq(out[i], 0xEE, "output written before the bounds check");
	}
	ids[4] = -1;
	cr_assert_eq(ibp_store_gather(fx.s, ids, 6, out, 2), IBP_ERR_OUT_OF_RANGE);
	cr_assert(strstr(ibp_last_error(), "ids[4] = -1") != NULL, "%s", ibp_last_error());
	ids[4] = INT64_MIN;
	cr_assert_eq(ibp_store_gather(fx.s, ids, 6, out, 1), IBP_ERR_OUT_OF_RANGE);
	ids[4] = INT64_MAX;
	cr_assert_eq(ibp_store_gather(fx.s, ids, 6, out, 0), IBP_ERR_OUT_OF_RANGE);
	/* bad arguments */
	cr_assert_eq(ibp_store_gather(fx.s, NULL, 3, out, 1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_store_gather(fx.s, ids, 3, NULL, 1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_store_gather(fx.s, ids, 3, out, -1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_store_gather(NULL, ids, 3, out, 1), IBP_ERR_INVALID_ARG);
	close_fixture(&fx);
}

typedef unsigned long long ull;

/* The id scans (util/ids.h) by each implementation against the plain
 * loops: the first id out of range at every position, runs broken at
 * every position and in every way. */
static uint64_t first_bad_ref(const int64_t *ids, uint64_t n, uint64_t nrows)
{
	for (uint64_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint64_t)ids[i] >= nrows)
			return i;
	return n;
}

static uint64_t run_end_ref(const int64_t *ids, uint64_t b, uint64_t e)
{
	uint64_t k = b + 1;
	while (k < e && (uint64_t)ids[k] == (uint64_t)ids[k - 1] + 1)
		k++;
	return k;
}

Test(store, id_scans)
{
	const int isas = ibpi_cpu()->avx2 ? 2 : 1;
	enum { N = 41 };
	int64_t ids[N];
	static const int64_t bads[] = { 100, 101, 1000000, -1, INT64_MIN, INT64_MAX };
	for (int isa = 0; isa < isas; isa++) {
		for (uint64_t n = 0; n <= N; n++) {
			for (uint64_t i = 0; i < n; i++)
				ids[i] = (int64_t)((i * 37) % 100);
			cr_assert_eq(ibpi_ids_first_bad_isa(ids, n, 100, isa), n, "isa %d n %llu", isa, (ull)n);
			cr_assert_eq(ibpi_ids_first_bad_isa(ids, n, 0, isa), first_bad_ref(ids, n, 0), "nrows 0");
			for (uint64_t p = 0; p < n; p++)
				for (size_t v = 0; v < sizeof(bads) / sizeof(bads[0]); v++) {
					const int64_t keep = ids[p];
					ids[p] = bads[v];
					cr_assert_eq(ibpi_ids_first_bad_isa(ids, n, 100, isa), p, "isa %d n %llu at %llu id %lld",
						     isa, (ull)n, (ull)p, (long long)bads[v]);
					if (p + 3 < n) { /* a second bad id after it */
						const int64_t k2 = ids[p + 3];
						ids[p + 3] = -5;
						cr_assert_eq(ibpi_ids_first_bad_isa(ids, n, 100, isa), p);
						ids[p + 3] = k2;
					}
					ids[p] = keep;
				}
			/* every id of [0, 2^63) is inside the largest nrows */
			cr_assert_eq(ibpi_ids_first_bad_isa(ids, n, UINT64_MAX, isa), n);
		}
		/* runs: consecutive ids (through the wrap of 2^64), broken at p by
		 * a gap, a repeat, a step back */
		static const int64_t starts[] = { 0, 7, INT64_MAX - 20, -3 };
		static const int64_t breaks[] = { 2, 0, -1, 100 };
		for (size_t s0 = 0; s0 < sizeof(starts) / sizeof(starts[0]); s0++)
			for (int p = -1; p < N; p++)
				for (size_t w = 0; w < sizeof(breaks) / sizeof(breaks[0]); w++) {
					for (int i = 0; i < N; i++)
						ids[i] = (int64_t)((uint64_t)starts[s0] + (uint64_t)i +
								   (p >= 0 && i >= p ? (uint64_t)breaks[w] - 1 : 0));
					for (uint64_t b = 0; b < N; b++)
						for (uint64_t e = b + 1; e <= N; e += 1 + (e > b + 12) * 3) {
							const uint64_t got = ibpi_ids_run_end_isa(ids, b, e, isa);
							cr_assert_eq(got, run_end_ref(ids, b, e),
								     "isa %d start %lld break %d by %lld [%llu, %llu): %llu",
								     isa, (long long)starts[s0], p, (long long)breaks[w],
								     (ull)b, (ull)e, (ull)got);
						}
				}
	}
	/* the default implementation is one of them */
	for (int i = 0; i < N; i++)
		ids[i] = i == 30 ? 9 : i;
	cr_assert_eq(ibpi_ids_run_end(ids, 0, N), 30);
	cr_assert_eq(ibpi_ids_first_bad(ids, N, 30), 31); /* ids[30] = 9 is inside */
}

/* Threads "0 = all" follow the thread's affinity (a process held to one
 * CPU ran a thread per online CPU on it). */
Test(store, threads_follow_affinity)
{
	cpu_set_t all, one;
	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	const int n = CPU_COUNT(&all);
	if (n < 2)
		cr_skip_test("one CPU allowed: nothing to restrict");
	cr_assert_eq(ibpi_parallel_threads(0, 1000), n);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			break;
		}
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	const int got = ibpi_parallel_threads(0, 1000), explicit3 = ibpi_parallel_threads(3, 1000);
	cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
	cr_assert_eq(got, 1, "nthreads 0 under a one-CPU affinity: %d threads", got);
	cr_assert_eq(explicit3, 3, "an explicit count is kept");
	cr_assert_eq(ibpi_parallel_threads(0, 1000), n);
}

Test(store, thread_counts_agree, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int layout = 0; layout < 2; layout++) {
		fixture_t fx = open_fixture(3000, 57, 8, 2, (ibp_layout_t)layout, IBP_OPEN_MMAP);
		uint64_t n = 5000;
		int64_t *ids = xcalloc(n * sizeof(int64_t));
		rng_t r = { 77 };
		for (uint64_t i = 0; i < n; i++)
			ids[i] = (int64_t)(rnd(&r) % 3000);
		uint8_t *a = xcalloc(n * 57), *b = xcalloc(n * 57);
		cr_assert_eq(ibp_store_gather(fx.s, ids, n, a, 1), IBP_OK);
		const int ts[] = { 2, 0, 3, 1000 };
		for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
			memset(b, 0, n * 57);
			cr_assert_eq(ibp_store_gather(fx.s, ids, n, b, ts[i]), IBP_OK);
			cr_assert(memcmp(a, b, n * 57) == 0, "nthreads %d differs from 1", ts[i]);
		}
		check_gather(&fx, ids, n, a);
		free(a);
		free(b);
		free(ids);
		close_fixture(&fx);
	}
}

Test(store, decode_all, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int layout = 0; layout < 2; layout++) {
		fixture_t fx = open_fixture(1234, 21, 1, 2, (ibp_layout_t)layout, IBP_OPEN_READ);
		uint8_t *out = xcalloc(1234 * 21);
		for (int t = 0; t < 3; t++) {
			memset(out, 0, 1234 * 21);
			cr_assert_eq(ibp_store_decode_all(fx.s, out, t), IBP_OK, "%s", ibp_last_error());
			cr_assert(memcmp(out, fx.rows, 1234 * 21) == 0);
		}
		cr_assert_eq(ibp_store_decode_all(fx.s, NULL, 1), IBP_ERR_INVALID_ARG);
		free(out);
		close_fixture(&fx);
	}
}

/* Tiny rows (R <= 16) in runs (store.c decode_rows_tiny, the codec's
 * decode_tiny_run): whole-store reads and runs of 15-130 consecutive ids
 * among random ones (one ending at the last row, whose payload ends the
 * file), every row mode, both layouts, one and two threads, on every
 * implementation the CPU has: the rows written. */
Test(store, tiny_runs, .init = make_tmpdir, .fini = remove_tmpdir)
{
	/* every C for R = 16 and 8 and the generic R (the BITMAP rows' kernel
	 * per C and R) */
	static const uint64_t Rs[] = { 16, 16, 12, 8, 5, 15, 16, 16, 8, 8, 8, 10, 12 };
	static const unsigned Cs[] = { 2, 8, 4, 1, 1, 4, 1, 4, 2, 4, 8, 2, 8 };
	static const ibp_impl_t impls[] = { IBP_IMPL_AUTO, IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2,
					    IBP_IMPL_AVX512 };
	const uint64_t n = 1000, m = 900;
	for (int q = 0; q < (int)(sizeof(Rs) / sizeof(Rs[0])); q++)
		for (int layout = 0; layout < 2; layout++) {
			const uint64_t R = Rs[q];
			fixture_t fx = open_fixture(n, R, Cs[q], 3, (ibp_layout_t)layout, IBP_OPEN_READ);
			int64_t *mix = xcalloc(m * sizeof(int64_t));
			rng_t g = { 5 + R };
			for (uint64_t i = 0; i < m; i++)
				mix[i] = (int64_t)(rnd(&g) % n);
			static const uint64_t at[] = { 0, 40, 100, 200, 300, 450, 700, 885 },
					      len[] = { 16, 15, 17, 63, 64, 65, 130, 15 };
			for (int k = 0; k < 8; k++) {
				const uint64_t r0 = k == 7 ? n - len[k] : rnd(&g) % (n - len[k]);
				for (uint64_t i = 0; i < len[k]; i++)
					mix[at[k] + i] = (int64_t)(r0 + i);
			}
			uint8_t *out = xcalloc(n * R);
			for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
				ibp_codec_t *c = (ibp_codec_t *)(uintptr_t)ibp_store_codec(fx.s);
				if (ibp_codec_set_impl(c, impls[ii]) != IBP_OK)
					continue;
				for (int t = 1; t <= 2; t++) {
					memset(out, 0, n * R);
					cr_assert_eq(ibp_store_decode_all(fx.s, out, t), IBP_OK, "%s", ibp_last_error());
					cr_assert(memcmp(out, fx.rows, n * R) == 0, "R %llu C %u layout %d impl %d: decode_all",
						  (unsigned long long)R, Cs[q], layout, impls[ii]);
					memset(out, 0, m * R);
					cr_assert_eq(ibp_store_gather(fx.s, mix, m, out, t), IBP_OK, "%s", ibp_last_error());
					check_gather(&fx, mix, m, out);
				}
			}
			ibp_codec_set_impl((ibp_codec_t *)(uintptr_t)ibp_store_codec(fx.s), IBP_IMPL_AUTO);
			free(out);
			free(mix);
			close_fixture(&fx);
		}
}

/* The pool is reused across many gathers and small requests. */
Test(store, pool_reuse, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(200, 12, 4, 1, IBP_LAYOUT_PACKED, 0);
	int64_t ids[64];
	uint8_t out[64 * 12];
	rng_t r = { 5 };
	for (int it = 0; it < 2000; it++) {
		uint64_t n = 1 + rnd(&r) % 64;
		for (uint64_t i = 0; i < n; i++)
			ids[i] = (int64_t)(rnd(&r) % 200);
		cr_assert_eq(ibp_store_gather(fx.s, ids, n, out, (int)(it % 4)), IBP_OK);
		check_gather(&fx, ids, n, out);
	}
	close_fixture(&fx);
}

/* Stores opened and closed with and without a pool, over and over: joins
 * cleanly (a hang or leak here shows up under the sanitizers). */
Test(store, open_close_cycles, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(50, 10, 2, 1, IBP_LAYOUT_INPLACE, 0);
	char path[128];
	snprintf(path, sizeof(path), "%s/s10_1.ibp", tmpdir);
	int64_t ids[50];
	for (int i = 0; i < 50; i++)
		ids[i] = 49 - i;
	uint8_t out[50 * 10];
	for (int it = 0; it < 50; it++) {
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_open(path, it % 2 ? IBP_OPEN_MMAP : 0, &s), IBP_OK);
		if (it % 3) {
			memset(out, 0xEE, sizeof(out));
			cr_assert_eq(ibp_store_gather(s, ids, 50, out, it % 3 == 1 ? 1 : 2), IBP_OK);
			check_gather(&fx, ids, 50, out);
		}
		ibp_store_close(s);
	}
	ibp_store_close(NULL);
	close_fixture(&fx);
}

typedef struct conc_arg {
	const fixture_t *fx;
	int nthreads;
	uint64_t seed;
	int ok;
} conc_arg_t;

static void *conc_main(void *p)
{
	conc_arg_t *a = p;
	int64_t ids[300];
	uint8_t *out = malloc(300 * a->fx->R);
	rng_t r = { a->seed };
	a->ok = out != NULL;
	for (int it = 0; it < 200 && a->ok; it++) {
		uint64_t n = 1 + rnd(&r) % 300;
		for (uint64_t i = 0; i < n; i++)
			ids[i] = (int64_t)(rnd(&r) % a->fx->n);
		if (ibp_store_gather(a->fx->s, ids, n, out, a->nthreads) != IBP_OK)
			a->ok = 0;
		for (uint64_t i = 0; i < n && a->ok; i++)
			if (memcmp(out + i * a->fx->R, a->fx->rows + (uint64_t)ids[i] * a->fx->R, a->fx->R))
				a->ok = 0;
	}
	free(out);
	return NULL;
}

/* Several threads gather from one store at once, pooled and not. */
Test(store, concurrent_callers, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_fixture(700, 30, 4, 2, IBP_LAYOUT_PACKED, 0);
	pthread_t th[4];
	conc_arg_t args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (conc_arg_t){ &fx, i % 2 ? 2 : 1, 1000 + (uint64_t)i, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, conc_main, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert(args[i].ok, "caller %d saw wrong rows or an error", i);
	}
	close_fixture(&fx);
}

/* A row whose flags lie about its encoding (checksums made consistent)
 * fails the gather with IBP_ERR_CORRUPT naming its position; the other rows
 * still gather. */
Test(store, corrupt_row_reported, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibpi_container_write_minor_set(1); /* a 1.1 file: its FLAGS section is edited below */
	fixture_t fx = open_fixture(64, 20, 4, 1, IBP_LAYOUT_PACKED, 0);
	ibpi_container_write_minor_set(0);
	const ibp_container_t *c = ibp_store_container(fx.s);
	uint64_t fsize = ibp_container_file_bytes(c);
	char path[128];
	snprintf(path, sizeof(path), "%s/s20_0.ibp", tmpdir);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	uint8_t *img = xcalloc(fsize);
	cr_assert_eq(fread(img, 1, fsize, f), fsize);
	fclose(f);
	/* find a non-raw row shorter than R and mark it raw */
	const uint8_t *flags = ibp_container_flags(c);
	const uint64_t *off = ibp_container_offsets(c);
	uint64_t bad = 64;
	for (uint64_t i = 0; i < 64; i++)
		if ((flags[i] & 3) && off[i + 1] - off[i] < 20) {
			bad = i;
			break;
		}
	cr_assert_lt(bad, 64);
	/* locate the flags section through the table (FORMAT.md 2.3) */
	uint32_t ns, hs;
	uint64_t toff;
	memcpy(&hs, img + 12, 4);
	memcpy(&ns, img + 124, 4);
	memcpy(&toff, img + 128, 8);
	for (uint32_t i = 0; i < ns; i++) {
		uint8_t *e = img + toff + 32 * i;
		uint32_t id;
		uint64_t o, l, h;
		memcpy(&id, e, 4);
		memcpy(&o, e + 8, 8);
		memcpy(&l, e + 16, 8);
		if (id == 2)
			img[o + bad] = 0;
		h = XXH3_64bits(img + o, l);
		memcpy(e + 24, &h, 8);
	}
	uint64_t h = XXH3_64bits(img + toff, 32 * ns);
	memcpy(img + 136, &h, 8);
	h = XXH3_64bits(img, hs - 8);
	memcpy(img + hs - 8, &h, 8);

	ibp_container_t *cc = NULL;
	cr_assert_eq(ibp_container_open_memory(img, fsize, 0, &cc), IBP_OK, "%s", ibp_last_error());
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_from_container(cc, &s), IBP_OK);
	int64_t ids[8] = { 0, 1, 2, 3, (int64_t)bad, 5, 6, 7 };
	if (bad <= 7)
		ids[0] = ids[1] = ids[2] = ids[3] = ids[5] = ids[6] = ids[7] = (int64_t)(bad + 1) % 64;
	uint8_t out[8 * 20];
	for (int t = 1; t <= 2; t++) {
		cr_assert_eq(ibp_store_gather(s, ids, 8, out, t), IBP_ERR_CORRUPT);
		char want[64];
		snprintf(want, sizeof(want), "position 4 (row %llu)", (unsigned long long)bad);
		cr_assert(strstr(ibp_last_error(), want) != NULL, "%s", ibp_last_error());
	}
	cr_assert_eq(ibp_store_verify(s, 2), IBP_ERR_CORRUPT);
	/* the good rows alone are fine */
	int64_t good = (int64_t)(bad + 1) % 64;
	cr_assert_eq(ibp_store_gather(s, &good, 1, out, 2), IBP_OK);
	ibp_store_close(s);
	free(img);
	close_fixture(&fx);
}

/* The row map (io/container_internal.h) gives every row the extent, mode
 * and cluster the index walk gives, for 1.2 and 1.1 files, both layouts,
 * a partial last group; gathers through it (look-ahead 0, 1, 8, 64) and
 * through the index walk (IBP_ROW_MAP_MAX=0) return the same rows. */
Test(store, row_map_matches_index_walk, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 1000, R = 37; /* 15 full groups of 64 and one of 40 */
	for (int minor = 0; minor < 2; minor++)
		for (int layout = 0; layout < 2; layout++) {
			ibpi_container_write_minor_set(minor ? 1 : 0);
			setenv("IBP_ROW_MAP_MAX", "0", 1);
			fixture_t fx = open_fixture(n, R, 4, 3, (ibp_layout_t)layout, IBP_OPEN_READ);
			unsetenv("IBP_ROW_MAP_MAX");
			ibpi_container_write_minor_set(0);
			const ibp_container_t *c = ibp_store_container(fx.s);
			/* the walk's answers, before any map exists */
			const uint8_t **src = xcalloc(n * sizeof(*src));
			uint64_t *len = xcalloc(n * 8);
			uint8_t *mode = xcalloc(n);
			unsigned *cl = xcalloc(n * sizeof(unsigned)), seen_cl = 0;
			for (uint64_t i = 0; i < n; i++) {
				cr_assert_eq(ibp_container_row_meta(c, i, &src[i], &len[i], &mode[i], &cl[i]), IBP_OK);
				seen_cl |= 1u << cl[i];
			}
			cr_assert_gt(seen_cl & ~1u, 0, "rows of more than one cluster");
			/* gathers without the map (this store; the walk), later with it */
			const uint64_t k = 3000;
			int64_t *ids = xcalloc(k * sizeof(int64_t));
			rng_t r = { 77 };
			for (uint64_t i = 0; i < k; i++)
				ids[i] = i % 5 == 0 ? (int64_t)(63 + (i / 5) % 3 * 64) % (int64_t)n /* group edges */
					: (int64_t)(rnd(&r) % n);
			ids[k - 1] = (int64_t)n - 1;
			uint8_t *out = xcalloc(k * R);
			for (int t = 1; t <= 2; t++) {
				memset(out, 0, k * R);
				cr_assert_eq(ibp_store_gather(fx.s, ids, k, out, t), IBP_OK, "%s", ibp_last_error());
				check_gather(&fx, ids, k, out);
			}
			const ibp_rowmap_t *m = NULL;
			cr_assert_eq(ibpi_container_rowmap(c, 1000, &m), IBP_ERR_UNSUPPORTED, "over the cap");
			cr_assert_null(m);
			cr_assert_eq(ibpi_container_rowmap(c, UINT64_MAX, &m), IBP_OK, "%s", ibp_last_error());
			cr_assert_not_null(m);
			/* 16 groups: 17 bases, 16 x 65 records, a 64-byte header, rounded to 64 */
			cr_assert_leq(m->bytes, 64 + 17 * 8 + 16 * 65 * 4 + 63);
			const ibp_rowmap_t *again = NULL;
			cr_assert_eq(ibpi_container_rowmap(c, 0, &again), IBP_OK, "built once, then kept");
			cr_assert_eq(again, m);
			for (uint64_t i = 0; i < n; i++) {
				const uint8_t *s2;
				uint64_t l2;
				uint8_t m2;
				unsigned c2;
				ibp_rowmap_get(m, i, &s2, &l2, &m2, &c2);
				cr_assert(s2 == src[i] && l2 == len[i] && m2 == mode[i] && c2 == cl[i],
					  "v1.%d layout %d row %llu: map %p+%llu mode %u cluster %u, walk %p+%llu %u %u",
					  minor ? 1 : 2, layout, (unsigned long long)i, (const void *)s2,
					  (unsigned long long)l2, m2, c2, (const void *)src[i],
					  (unsigned long long)len[i], mode[i], cl[i]);
				/* row_meta answers from the map now, the same */
				cr_assert_eq(ibp_container_row_meta(c, i, &s2, &l2, &m2, &c2), IBP_OK);
				cr_assert(s2 == src[i] && l2 == len[i] && m2 == mode[i] && c2 == cl[i]);
			}
			char path[128];
			snprintf(path, sizeof(path), "%s/s%llu_%d.ibp", tmpdir, (unsigned long long)R, layout);
			/* look-ahead distances (64: the most) and batches (1; 4 and 8:
			 * whole-row bursts; 9 and 64: first lines, the rest d rows
			 * ahead, d clamped to the batch; 1000: clamped to 64) */
			static const char *const pf[] = { "0", "1", "8", "64", "3", "8", "64", "2" };
			static const char *const batch[] = { "64", "1", "4", "8", "9", "64", "1000", "" };
			for (int p = 0; p < 8; p++) {
				setenv("IBP_GATHER_PREFETCH", pf[p], 1);
				setenv("IBP_GATHER_BATCH", batch[p], 1); /* "": the default */
				setenv("IBP_GATHER_STAGE", "0", 1); /* the pipeline, not staged batches */
				ibp_store_t *s = NULL;
				cr_assert_eq(ibp_store_open(path, IBP_OPEN_READ, &s), IBP_OK, "%s", ibp_last_error());
				unsetenv("IBP_GATHER_PREFETCH");
				unsetenv("IBP_GATHER_BATCH");
				unsetenv("IBP_GATHER_STAGE");
				for (int t = 1; t <= 2; t++) {
					memset(out, 0, k * R);
					cr_assert_eq(ibp_store_gather(s, ids, k, out, t), IBP_OK, "%s", ibp_last_error());
					check_gather(&fx, ids, k, out);
				}
				cr_assert_eq(ibp_store_decode_all(s, out, 2), IBP_OK);
				cr_assert(memcmp(out, fx.rows, n * R) == 0, "decode_all through the map");
				ibp_store_close(s);
			}
			free(ids);
			free(out);
			free(src);
			free(len);
			free(mode);
			free(cl);
			close_fixture(&fx);
		}
}

/* Staged batches (store.c decode_rows_staged: rows copied into a stack
 * buffer, then decoded): every batch size (1, 3, 64, the most, clamped
 * from 1000, the default, off), rows of 37 bytes (hundreds a stage),
 * 6,000 (two a stage) and 20,000 (larger than the stage: decoded in
 * place), the payload's last row (copied exactly), duplicates, one and
 * two threads, random and consecutive ids: the same rows. */
Test(store, staged_rows, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static const uint64_t Rs[] = { 37, 6000, 20000 }, ns[] = { 300, 40, 12 };
	static const char *const stage[] = { "0", "1", "3", "64", "128", "1000", "" };
	for (int r = 0; r < 3; r++) {
		const uint64_t R = Rs[r], n = ns[r], k = 3 * n;
		fixture_t fx = open_fixture(n, R, 4, 3, IBP_LAYOUT_PACKED, IBP_OPEN_READ);
		uint64_t big = 0; /* the longest encoded row: past the 16 KiB stage for the last R */
		for (uint64_t i = 0; i < n; i++) {
			const uint8_t *src;
			uint64_t len;
			uint8_t mode;
			unsigned cl;
			cr_assert_eq(ibp_container_row_meta(ibp_store_container(fx.s), i, &src, &len, &mode, &cl), IBP_OK);
			big = len > big ? len : big;
		}
		cr_assert(r < 2 || big > 16384, "R %llu: longest row %llu bytes", (unsigned long long)R,
			  (unsigned long long)big);
		int64_t *ids = xcalloc(k * sizeof(int64_t));
		rng_t g = { 91 + R };
		for (uint64_t i = 0; i < k; i++)
			ids[i] = i % 7 == 3 ? (int64_t)n - 1 : (int64_t)(rnd(&g) % n);
		ids[1] = ids[0];
		uint8_t *out = xcalloc(k * R);
		char path[128];
		snprintf(path, sizeof(path), "%s/s%llu_%d.ibp", tmpdir, (unsigned long long)R, (int)IBP_LAYOUT_PACKED);
		for (int p = 0; p < 7; p++) {
			setenv("IBP_GATHER_STAGE", stage[p], 1);
			ibp_store_t *s = NULL;
			cr_assert_eq(ibp_store_open(path, IBP_OPEN_READ, &s), IBP_OK, "%s", ibp_last_error());
			unsetenv("IBP_GATHER_STAGE");
			const fixture_t v = { s, fx.rows, n, R };
			for (int t = 1; t <= 2; t++) {
				memset(out, 0, k * R);
				cr_assert_eq(ibp_store_gather(s, ids, k, out, t), IBP_OK, "%s", ibp_last_error());
				check_gather(&v, ids, k, out);
			}
			int64_t *seq = xcalloc(n * sizeof(int64_t));
			for (uint64_t i = 0; i < n; i++)
				seq[i] = (int64_t)i;
			memset(out, 0, n * R);
			cr_assert_eq(ibp_store_gather(s, seq, n, out, 1), IBP_OK, "%s", ibp_last_error());
			cr_assert(memcmp(out, fx.rows, n * R) == 0, "consecutive ids, stage %s", stage[p]);
			free(seq);
			if (n >= 200) {
				/* runs in order among random ids (the pipeline's, at least 64
				 * long; one of 63 staged), one at the start and one at the end */
				static const uint64_t run_at[] = { 0, 90, 200, 400, 480 }, run_len[] = { 70, 63, 64, 1, 80 };
				const uint64_t m = 560;
				int64_t *mix = xcalloc(m * sizeof(int64_t));
				for (uint64_t i = 0; i < m; i++)
					mix[i] = (int64_t)(rnd(&g) % n);
				for (int q = 0; q < 5; q++)
					for (uint64_t i = 0; i < run_len[q]; i++)
						mix[run_at[q] + i] = (int64_t)((run_at[q] / 3 + i) % n);
				uint8_t *mo = xcalloc(m * R);
				for (int t = 1; t <= 2; t++) {
					memset(mo, 0, m * R);
					cr_assert_eq(ibp_store_gather(s, mix, m, mo, t), IBP_OK, "%s", ibp_last_error());
					check_gather(&v, mix, m, mo);
				}
				free(mo);
				free(mix);
			}
			ibp_store_close(s);
		}
		free(ids);
		free(out);
		close_fixture(&fx);
	}
}

/* Open errors propagate through the store. */
Test(store, open_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibp_store_t *s = (ibp_store_t *)1;
	cr_assert_eq(ibp_store_open("/nonexistent/x.ibp", 0, &s), IBP_ERR_IO);
	cr_assert_null(s);
	char path[128];
	snprintf(path, sizeof(path), "%s/junk.ibp", tmpdir);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	for (int i = 0; i < 1000; i++)
		fputc(i & 0xFF, f);
	fclose(f);
	cr_assert_eq(ibp_store_open(path, IBP_OPEN_MMAP, &s), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_store_open(path, 0x100, &s), IBP_ERR_INVALID_ARG);
}

/* ---- exp and fp8 containers (blocks of rows) --------------------------- */

/* Normal-ish f32 values (sum of uniforms), or their bf16 upper halves. */
static uint8_t *float_data(ibp_dtype_t dt, uint64_t n, uint64_t seed)
{
	rng_t r = { seed };
	uint8_t *d = xcalloc(n * ibp_dtype_size(dt));
	for (uint64_t i = 0; i < n; i++) {
		double s = 0;
		for (int k = 0; k < 4; k++)
			s += (double)(rnd(&r) >> 11) / 9007199254740992.0 - 0.5;
		float f = (float)(s * 0.05);
		if (dt == IBP_DTYPE_F32) {
			memcpy(d + 4 * i, &f, 4);
		} else {
			uint32_t u;
			memcpy(&u, &f, 4);
			uint16_t h = (uint16_t)(u >> 16);
			memcpy(d + 2 * i, &h, 2);
		}
	}
	return d;
}

/* A store over an exp (fp8 = 0) or fp8 (fp8 = 1) container of n rows of
 * `cols` elements in blocks of `block_rows`; fx.rows holds what the codec
 * itself decodes block by block (for exp: the data). */
static fixture_t open_block_fixture(int fp8, ibp_dtype_t dt, uint64_t n, uint64_t cols, uint64_t block_rows,
				    unsigned flags)
{
	size_t es = ibp_dtype_size(dt);
	fixture_t fx = { NULL, NULL, n, cols * es };
	uint64_t elems = n * cols, chunk = block_rows * cols;
	uint8_t *d = float_data(dt, elems, 7 + n + (uint64_t)fp8);
	char path[128];
	snprintf(path, sizeof(path), "%s/b%d_%llu.ibp", tmpdir, fp8, (unsigned long long)n);
	uint64_t shape[2] = { n, cols };
	uint8_t *ref = xcalloc(elems * es + 1);
	if (!fp8) {
		cr_assert_eq(ibp_pack_exp(path, d, dt, 2, shape, NULL, block_rows), IBP_OK, "%s", ibp_last_error());
		/* the reference: ibp_exp_decode_batch over the container's blocks */
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(path, 0, &c), IBP_OK);
		uint64_t plen;
		const uint8_t *pl = ibp_container_payload(c, &plen);
		cr_assert_eq(ibp_exp_decode_batch(pl, plen, ibp_container_block_offsets(c), dt, elems, chunk, ref, 1),
			     IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(ref, d, elems * es) == 0, "exp is lossless");
		ibp_container_close(c);
	} else {
		ibp_fp8_opts_t o;
		ibp_fp8_opts_default(&o);
		o.block = 64;
		cr_assert_eq(ibp_pack_fp8(path, d, dt, 2, shape, &o, block_rows), IBP_OK, "%s", ibp_last_error());
		uint64_t cap;
		cr_assert_eq(ibp_fp8_encoded_size(&o, chunk, &cap), IBP_OK);
		uint8_t *st = xcalloc(cap);
		for (uint64_t b = 0; b * chunk < elems; b++) {
			uint64_t k = elems - b * chunk < chunk ? elems - b * chunk : chunk, got;
			cr_assert_eq(ibp_fp8_encode(d + b * chunk * es, dt, k, &o, st, cap, &got), IBP_OK);
			cr_assert_eq(ibp_fp8_decode(st, got, dt, k, ref + b * chunk * es, 1), IBP_OK);
		}
		free(st);
	}
	free(d);
	fx.rows = ref;
	cr_assert_eq(ibp_store_open(path, flags, &fx.s), IBP_OK, "%s", ibp_last_error());
	return fx;
}

Test(store, block_codecs_gather, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int fp8 = 0; fp8 < 2; fp8++)
		for (int f32 = 0; f32 < 2; f32++) {
			ibp_dtype_t dt = f32 ? IBP_DTYPE_F32 : IBP_DTYPE_BF16;
			fixture_t fx = open_block_fixture(fp8, dt, 777, 48, 50, f32 ? IBP_OPEN_MMAP : 0);
			cr_assert_eq(ibp_store_nrows(fx.s), 777);
			cr_assert_eq(ibp_store_dtype(fx.s), dt);
			cr_assert_null(ibp_store_codec(fx.s));
			const uint64_t m = 2000;
			int64_t *ids = xcalloc(m * sizeof(int64_t));
			rng_t r = { 5 + (uint64_t)fp8 };
			for (uint64_t i = 0; i < m; i++)
				ids[i] = (int64_t)(i < 500 ? (i * 3) % 777            /* runs in one block */
							   : i < 600 ? 776 - i % 7    /* the short last block */
							   : rnd(&r) % 777);          /* random */
			uint8_t *out = xcalloc(m * fx.R);
			const int threads[] = { 1, 2, 3, 0 };
			for (size_t t = 0; t < 4; t++) {
				memset(out, 0xAB, m * fx.R);
				cr_assert_eq(ibp_store_gather(fx.s, ids, m, out, threads[t]), IBP_OK, "%s",
					     ibp_last_error());
				check_gather(&fx, ids, m, out);
			}
			uint8_t *all = xcalloc(777 * fx.R);
			for (int t = 0; t < 3; t++) {
				memset(all, 0, 777 * fx.R);
				cr_assert_eq(ibp_store_decode_all(fx.s, all, t), IBP_OK, "%s", ibp_last_error());
				cr_assert(memcmp(all, fx.rows, 777 * fx.R) == 0, "decode_all, %d threads", t);
			}
			cr_assert_eq(ibp_store_verify(fx.s, 0), IBP_OK, "%s", ibp_last_error());
			int64_t bad[2] = { 3, -1 };
			cr_assert_eq(ibp_store_gather(fx.s, bad, 2, out, 1), IBP_ERR_OUT_OF_RANGE);
			free(all);
			free(out);
			free(ids);
			close_fixture(&fx);
		}
}

/* More callers than block slots (two blocks, so two slots): callers wait
 * for a slot and every result is right. */
Test(store, block_codecs_concurrent_callers, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int fp8 = 0; fp8 < 2; fp8++) {
		fixture_t fx = open_block_fixture(fp8, IBP_DTYPE_BF16, 300, 40, 150, 0);
		pthread_t th[6];
		conc_arg_t args[6];
		for (int i = 0; i < 6; i++) {
			args[i] = (conc_arg_t){ &fx, i % 3 ? 1 : 2, 77 + (uint64_t)i, 0 };
			cr_assert_eq(pthread_create(&th[i], NULL, conc_main, &args[i]), 0);
		}
		for (int i = 0; i < 6; i++) {
			pthread_join(th[i], NULL);
			cr_assert(args[i].ok, "caller %d saw wrong rows or an error", i);
		}
		close_fixture(&fx);
	}
}

/* A damaged exp block (checksums made consistent) fails the gathers that
 * touch it, naming position and row; other blocks still gather, and the
 * failed block is not left cached. */
Test(store, block_corrupt_reported, .init = make_tmpdir, .fini = remove_tmpdir)
{
	fixture_t fx = open_block_fixture(0, IBP_DTYPE_BF16, 400, 64, 100, 0);
	const ibp_container_t *c = ibp_store_container(fx.s);
	uint64_t fsize = ibp_container_file_bytes(c), plen;
	ibp_container_payload(c, &plen);
	/* the file image; the payload is its last plen bytes */
	char path[128];
	snprintf(path, sizeof(path), "%s/b0_400.ibp", tmpdir);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	uint8_t *img = xcalloc(fsize);
	cr_assert_eq(fread(img, 1, fsize, f), fsize);
	fclose(f);
	uint64_t poff = fsize - plen;
	/* damage block 2's header (its magic): it can no longer decode */
	uint64_t b2 = ibp_container_block_offsets(c)[2];
	img[poff + b2] ^= 0x5A;
	uint32_t ns, hs;
	uint64_t toff;
	memcpy(&hs, img + 12, 4);
	memcpy(&ns, img + 124, 4);
	memcpy(&toff, img + 128, 8);
	uint64_t sums_off = 0;
	for (uint32_t i = 0; i < ns; i++) {
		uint32_t id;
		memcpy(&id, img + toff + 32 * i, 4);
		if (id == 6)
			memcpy(&sums_off, img + toff + 32 * i + 8, 8);
	}
	uint64_t h = XXH3_64bits(img + poff, plen);
	if (sums_off) /* 1.2 writes no PAYLOAD_SUMS for a payload of one block */
		memcpy(img + sums_off, &h, 8);
	for (uint32_t i = 0; i < ns; i++) {
		uint8_t *e = img + toff + 32 * i;
		uint64_t o, l;
		memcpy(&o, e + 8, 8);
		memcpy(&l, e + 16, 8);
		h = XXH3_64bits(img + o, l);
		memcpy(e + 24, &h, 8);
	}
	h = XXH3_64bits(img + toff, 32 * ns);
	memcpy(img + 136, &h, 8);
	h = XXH3_64bits(img, hs - 8);
	memcpy(img + hs - 8, &h, 8);

	ibp_container_t *cc = NULL;
	cr_assert_eq(ibp_container_open_memory(img, fsize, 0, &cc), IBP_OK, "%s", ibp_last_error());
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_from_container(cc, &s), IBP_OK);
	int64_t ids[6] = { 0, 150, 399, 250, 5, 260 };
	uint8_t *out = xcalloc(6 * fx.R);
	for (int t = 1; t <= 2; t++) {
		cr_assert_eq(ibp_store_gather(s, ids, 6, out, t), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "position 3 (row 250)") != NULL, "%s", ibp_last_error());
		cr_assert(strstr(ibp_last_error(), "block 2") != NULL, "%s", ibp_last_error());
		cr_assert_eq(ibp_store_gather(s, ids, 3, out, t), IBP_OK, "%s", ibp_last_error());
		check_gather(&fx, ids, 3, out);
		cr_assert_eq(ibp_store_gather(s, ids + 3, 1, out, t), IBP_ERR_CORRUPT);
	}
	uint8_t *all = xcalloc(400 * fx.R);
	cr_assert_eq(ibp_store_decode_all(s, all, 1), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_store_verify(s, 2), IBP_ERR_CORRUPT);
	ibp_store_close(s);
	free(all);
	free(out);
	free(img);
	close_fixture(&fx);
}
