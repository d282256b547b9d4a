/* test_cuda_ibp.c - the GPU data path (ibp/cuda.h) against the CPU codec.
 *
 * Every GPU result is compared with its CPU twin on the same seeded input:
 * training counters and masks (ibp_train_count / ibp_train_mask), encoded
 * bytes, offsets, flags and clusters (ibp_encode_batch), gathered rows and
 * per-row statuses (ibpi_decode_row_ext with the packed extent rule), for
 * chunk sizes 1/2/4/8, one and three clusters, rows of 1..65536 bytes (and
 * one larger than shared memory), every gather kernel and payload place.
 * GPU tests skip with a message when no device is usable. The test
 * `cuda.no_device_path` runs everywhere: without a GPU it checks that every
 * entry point reports IBP_ERR_NO_DEVICE and that the host fallbacks work.
 * Seeds are fixed; a failing case names its parameters.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "ibp/unstable.h"
#include "bitpack/codec_internal.h"
#include "bitpack/train_internal.h"
#include "testutil.h"
#include "gpu_main.h"

/* exits 77 (ctest: skipped) when no device is usable */
IBP_GPU_TEST_MAIN()

/* ---- helpers ---------------------------------------------------------- */

/* IBP_TEST_QUICK=1 (tools/gpu-check.sh, the sanitizers): every third size of
 * a sweep, so that a short device window covers every test. */
static size_t sweep_step(void)
{
	const char *e = getenv("IBP_TEST_QUICK");
	return e && e[0] == '1' ? 3 : 1;
}

#define REQUIRE_GPU()                                                                          \
	do {                                                                                   \
		if (!tu_have_gpu())                                                               \
			cr_skip_test("no usable CUDA device (%s): GPU test skipped",           \
				     ibp_cuda_built() ? "CUDA build, but no device or driver"  \
						      : "libibp built without CUDA");          \
	} while (0)

#define OK(expr)                                                                                \
	do {                                                                                    \
		ibp_status_t st_ = (expr);                                                      \
		cr_assert_eq(st_, IBP_OK, "%s -> %s: %s", #expr, ibp_status_string(st_),        \
			     ibp_last_error());                                                 \
	} while (0)

static void *dmalloc(uint64_t n)
{
	void *p = NULL;
	OK(ibp_cuda_malloc(n ? n : 1, &p));
	return p;
}

static void *to_dev(const void *h, uint64_t n)
{
	void *d = dmalloc(n);
	if (n) {
		OK(ibp_cuda_memcpy(d, h, n, NULL));
		OK(ibp_cuda_sync(NULL));
	}
	return d;
}

static void *to_host(const void *d, uint64_t n)
{
	void *h = tu_xcalloc(n ? n : 1);
	if (n) {
		OK(ibp_cuda_memcpy(h, d, n, NULL));
		OK(ibp_cuda_sync(NULL));
	}
	return h;
}

static void *pinned_copy(const void *h, uint64_t n)
{
	void *p = NULL;
	OK(ibp_pinned_alloc(n ? n : 1, 0, 0, &p));
	if (n)
		memcpy(p, h, n);
	return p;
}

/* A codec with K clusters of random masks (density per cluster in
 * [0.3, 0.95]), Xvals enabled at ~30% of the chunk positions of about half
 * of the clusters, and rows that hit every mode: per row an exception rate
 * from {0, 0.1%, 2%, 20%, 100%} (100% under a dense mask stores it raw), and
 * half of the exceptions carrying the Xval (hits where it is enabled). */
typedef struct tcase {
	uint64_t R, D, nrows;
	unsigned C, K;
	uint8_t *masks, *bitvals, *xvals; /* K * D * C */
	uint8_t *rows;            /* nrows * R */
	ibp_codec_t *codec;
	/* CPU encoding */
	uint8_t *enc;
	uint64_t *offsets;
	uint8_t *flags, *clusters;
} tcase_t;

static void tcase_make(tcase_t *t, tu_rng_t *r, uint64_t R, unsigned C, unsigned K, uint64_t nrows)
{
	memset(t, 0, sizeof(*t));
	t->R = R;
	t->C = C;
	t->K = K;
	t->D = tu_nchunks(R, C);
	t->nrows = nrows;
	const uint64_t DC = t->D * C;
	t->masks = tu_xcalloc(K * DC);
	t->bitvals = tu_xcalloc(K * DC);
	for (unsigned k = 0; k < K; k++)
		tu_mask_random(r, 0.3 + 0.65 * tu_uniform(r), t->masks + k * DC, t->bitvals + k * DC, R, C);
	t->xvals = tu_xcalloc(K * DC);
	memcpy(t->xvals, t->bitvals, K * DC);
	for (unsigned k = 0; k < K; k++) {
		if (tu_below(r, 2))
			continue;
		for (uint64_t j = 0; j < t->D; j++) {
			if (tu_uniform(r) >= 0.3)
				continue;
			for (unsigned q = 0; q < C; q++) {
				uint64_t i = k * DC + j * C + q;
				t->xvals[i] = j * C + q >= R ? 0 : (uint8_t)(tu_next(r) & t->masks[i]);
			}
		}
	}
	OK(ibp_codec_create_ex(R, C, K, t->masks, t->bitvals, t->xvals, &t->codec));
	static const double rates[5] = { 0.0, 0.001, 0.02, 0.2, 1.0 };
	t->rows = tu_xcalloc(nrows * R);
	for (uint64_t i = 0; i < nrows; i++) {
		uint8_t *row = t->rows + i * R;
		tu_fill_random(r, row, R);
		unsigned k = (unsigned)tu_below(r, K);
		double p = rates[(i + tu_below(r, 2)) % 5];
		for (uint64_t j = 0; j < t->D; j++) {
			if (p >= 1.0)
				continue;
			if (tu_uniform(r) >= p)
				tu_make_match(row, t->masks + k * DC, t->bitvals + k * DC, R, C, j);
			else if (tu_below(r, 2))
				tu_make_match(row, t->masks + k * DC, t->xvals + k * DC, R, C, j);
		}
	}
	t->enc = tu_xcalloc(nrows * R);
	t->offsets = tu_xcalloc((nrows + 1) * 8);
	t->flags = tu_xcalloc(nrows);
	t->clusters = tu_xcalloc(nrows);
	OK(ibp_encode_batch(t->codec, t->rows, nrows, t->enc, nrows * R, t->offsets, t->flags,
			    t->clusters, 1));
}

static void tcase_free(tcase_t *t)
{
	ibp_codec_free(t->codec);
	free(t->masks);
	free(t->bitvals);
	free(t->xvals);
	free(t->rows);
	free(t->enc);
	free(t->offsets);
	free(t->flags);
	free(t->clusters);
}

static const uint64_t row_sizes[] = {
	1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257,
	511, 1000, 1023, 1024, 1025, 2047, 4095, 4096, 4097, 5000, 8191, 8192, 10007, 16384, 32768,
	40000, 65535, 65536,
};
#define N_ROW_SIZES (sizeof(row_sizes) / sizeof(row_sizes[0]))
static const unsigned chunk_sizes[4] = { 1, 2, 4, 8 };

static uint64_t rows_for(uint64_t R)
{
	uint64_t n = (2u << 20) / R; /* about 2 MiB of rows a case */
	return n < 6 ? 6 : n > 96 ? 96 : n;
}

/* The CPU's verdict and bytes for row `id` of a store (packed if offsets). */
static ibp_status_t cpu_row(const ibp_codec_t *c, const uint8_t *payload, const uint64_t *offsets,
			    const uint8_t *flags, const uint8_t *clusters, uint64_t nrows, int64_t id,
			    uint8_t *dst)
{
	const uint64_t R = ibp_codec_row_bytes(c);
	if (id < 0 || (uint64_t)id >= nrows) {
		memset(dst, 0, R);
		return IBP_ERR_OUT_OF_RANGE;
	}
	uint64_t o = offsets ? offsets[id] : (uint64_t)id * R;
	uint64_t len = offsets ? offsets[id + 1] - o : R, ext = 0;
	static const uint8_t none[1];
	ibp_status_t st = ibpi_decode_row_ext(c, len ? payload + o : none, len, flags[id],
					     clusters ? clusters[id] : 0, dst, &ext);
	if (st == IBP_OK && offsets && ext != len)
		st = IBP_ERR_CORRUPT;
	if (st != IBP_OK)
		memset(dst, 0, R);
	return st;
}

/* Gathers n ids (random with duplicates, plus out-of-range ones) from a
 * store made of the given arrays, and checks every row and status. */
static void check_gather(const char *what, const ibp_codec_t *codec, const uint8_t *payload,
			 uint64_t payload_bytes, const uint64_t *offsets, const uint8_t *flags,
			 const uint8_t *clusters, uint64_t nrows, ibp_cuda_payload_t kind,
			 ibp_cuda_kernel_t kernel, int scatter, tu_rng_t *r)
{
	const uint64_t R = ibp_codec_row_bytes(codec);
	/* place the payload as `kind` expects */
	void *place = NULL;
	const void *src = payload;
	if (kind == IBP_CUDA_PAYLOAD_MAPPED)
		src = place = pinned_copy(payload, payload_bytes);
	else if (kind == IBP_CUDA_PAYLOAD_DEVICE)
		src = place = to_dev(payload, payload_bytes);
	ibp_cuda_store_desc_t d = { codec, src, payload_bytes, offsets, flags, clusters, nrows, kind };
	ibp_cuda_store_t *s = NULL;
	OK(ibp_cuda_store_create(&d, 0, NULL, &s));
	OK(ibp_cuda_store_set_kernel(s, kernel));
	cr_assert_eq(ibp_cuda_store_on_device(s), 1);
	cr_assert_eq(ibp_cuda_store_nrows(s), nrows);

	const uint64_t n = 2 * nrows + 7;
	int64_t *ids = tu_xcalloc(n * 8), *orows = tu_xcalloc(n * 8);
	for (uint64_t k = 0; k < n; k++)
		ids[k] = (int64_t)tu_below(r, nrows);
	/* out-of-range ids at random places */
	static const int64_t bad[4] = { -1, INT64_MIN, INT64_MAX, 0 };
	for (int q = 0; q < 4; q++)
		ids[tu_below(r, n)] = q == 3 ? (int64_t)nrows : bad[q];
	for (uint64_t k = 0; k < n; k++)
		orows[k] = (int64_t)k;
	if (scatter) /* a random permutation of the output slots */
		for (uint64_t k = n - 1; k > 0; k--) {
			uint64_t j = tu_below(r, k + 1);
			int64_t x = orows[k];
			orows[k] = orows[j];
			orows[j] = x;
		}
	uint8_t *out_d = dmalloc(n * R);
	OK(ibp_cuda_memset(out_d, 0xA5, n * R, NULL)); /* poison: every row must be written */
	int64_t *ids_d = to_dev(ids, n * 8), *orows_d = to_dev(orows, n * 8);
	int32_t *st_d = dmalloc(n * 4);
	OK(ibp_cuda_memset(st_d, 0x7f, n * 4, NULL));
	OK(ibp_gather_cuda(s, ids_d, n, out_d, scatter ? orows_d : NULL, st_d, NULL));
	OK(ibp_cuda_sync(NULL));
	uint8_t *out = to_host(out_d, n * R);
	int32_t *sts = to_host(st_d, n * 4);
	uint8_t *ref = tu_xcalloc(R);
	uint64_t nbad = 0;
	for (uint64_t k = 0; k < n; k++) {
		ibp_status_t want = cpu_row(codec, payload, offsets, flags, clusters, nrows, ids[k], ref);
		nbad += want != IBP_OK;
		cr_assert_eq(sts[k], (int32_t)want, "%s kind %d kernel %d scatter %d: request %llu (id %lld): "
			     "status %d, CPU %d", what, (int)kind, (int)kernel, scatter,
			     (unsigned long long)k, (long long)ids[k], sts[k], (int)want);
		const uint8_t *got = out + (uint64_t)orows[k] * R;
		if (memcmp(got, ref, R) != 0) {
			uint64_t at = 0;
			while (got[at] == ref[at])
				at++;
			cr_assert_fail("%s kind %d kernel %d scatter %d: request %llu (id %lld, status %d): "
				       "byte %llu is %02x, CPU %02x", what, (int)kind, (int)kernel, scatter,
				       (unsigned long long)k, (long long)ids[k], sts[k],
				       (unsigned long long)at, got[at], ref[at]);
		}
	}
	uint64_t nerr = 0;
	OK(ibp_cuda_store_errors(s, &nerr, NULL));
	cr_assert_eq(nerr, nbad, "%s: error count %llu, expected %llu", what, (unsigned long long)nerr,
		     (unsigned long long)nbad);
	free(ref);
	free(out);
	free(sts);
	free(ids);
	free(orows);
	ibp_cuda_free(out_d);
	ibp_cuda_free(ids_d);
	ibp_cuda_free(orows_d);
	ibp_cuda_free(st_d);
	ibp_cuda_store_free(s);
	if (kind == IBP_CUDA_PAYLOAD_MAPPED)
		ibp_pinned_free(place);
	else if (kind == IBP_CUDA_PAYLOAD_DEVICE)
		ibp_cuda_free(place);
}

/* ---- runs everywhere -------------------------------------------------- */

Test(cuda, no_device_path)
{
	if (tu_have_gpu()) {
		cr_assert_eq(ibp_cuda_built(), 1);
		int n = 0;
		OK(ibp_cuda_device_count(&n));
		cr_assert_gt(n, 0);
		return;
	}
	/* Without a GPU every entry point says IBP_ERR_NO_DEVICE, with a detail. */
	int n = 7;
	cr_assert_eq(ibp_cuda_device_count(&n), IBP_ERR_NO_DEVICE);
	cr_assert_eq(n, 0);
	cr_assert_neq(ibp_last_error()[0], '\0');
	void *p = (void *)1;
	cr_assert_eq(ibp_cuda_malloc(64, &p), IBP_ERR_NO_DEVICE);
	cr_assert_null(p);
	uint8_t hbuf[64] = { 0 };
	cr_assert_eq(ibp_cuda_memcpy(hbuf, hbuf + 32, 16, NULL), IBP_ERR_NO_DEVICE);
	cr_assert_eq(ibp_cuda_sync(NULL), IBP_ERR_NO_DEVICE);
	p = (void *)1;
	cr_assert_eq(ibp_pinned_alloc(100, 0, 0, &p), IBP_ERR_NO_DEVICE);
	cr_assert_null(p);

	tu_rng_t r;
	tu_rng_seed(&r, 0xC0DA);
	tcase_t t;
	tcase_make(&t, &r, 100, 4, 2, 40);
	ibp_cuda_codec_t *dc = (ibp_cuda_codec_t *)1;
	cr_assert_eq(ibp_cuda_codec_create(t.codec, NULL, &dc), IBP_ERR_NO_DEVICE);
	cr_assert_null(dc);
	uint64_t counts[8 * 100];
	cr_assert_eq(ibp_train_count_cuda(t.rows, 100, NULL, 40, counts, NULL), IBP_ERR_NO_DEVICE);
	cr_assert_eq(ibp_train_mask_cuda(counts, 40, 100, 0.8, hbuf, hbuf, NULL), IBP_ERR_NO_DEVICE);
	int64_t ids[3] = { 0, 1, 2 };
	cr_assert_eq(ibp_gather_plain_cuda(t.rows, 40, 100, ids, 3, t.enc, NULL, NULL, NULL),
		     IBP_ERR_NO_DEVICE);

	/* pinned memory falls back to ordinary memory when asked to */
	p = NULL;
	cr_assert_eq(ibp_pinned_alloc(1000, 64, IBP_CUDA_HOST_FALLBACK, &p), IBP_ERR_NO_DEVICE);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 64, 0);
	cr_assert(strstr(ibp_last_error(), "ordinary") != NULL, "detail: %s", ibp_last_error());
	memset(p, 0x5a, 1000);
	cr_assert_eq(ibp_pinned_owns(p), 0);
	ibp_pinned_free(p);
	/* ... and the stream-ordered free takes it too (freed at once: no device) */
	p = NULL;
	cr_assert_eq(ibp_pinned_alloc(1000, 64, IBP_CUDA_HOST_FALLBACK, &p), IBP_ERR_NO_DEVICE);
	cr_assert_not_null(p);
	OK(ibp_pinned_free_async(p, NULL));
	OK(ibp_pinned_free_async(NULL, NULL));

	/* the store: refused, or kept in host memory and decoded on the CPU */
	ibp_cuda_store_desc_t d = { t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags, t.clusters,
				    t.nrows, IBP_CUDA_PAYLOAD_COPY_DEVICE };
	ibp_cuda_store_t *s = (ibp_cuda_store_t *)1;
	cr_assert_eq(ibp_cuda_store_create(&d, 0, NULL, &s), IBP_ERR_NO_DEVICE);
	cr_assert_null(s);
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &s), IBP_ERR_NO_DEVICE);
	cr_assert_not_null(s);
	cr_assert(strstr(ibp_last_error(), "host memory") != NULL, "detail: %s", ibp_last_error());
	cr_assert_eq(ibp_cuda_store_on_device(s), 0);
	cr_assert_eq(ibp_cuda_store_nrows(s), t.nrows);
	cr_assert_eq(ibp_cuda_store_row_bytes(s), 100);
	int64_t gid[6] = { 3, 39, 3, -1, 40, 0 };
	int64_t slot[6] = { 5, 4, 3, 2, 1, 0 };
	uint8_t out[6 * 100], ref[100];
	int32_t sts[6];
	memset(out, 0xA5, sizeof(out));
	OK(ibp_gather_cuda(s, gid, 6, out, slot, sts, NULL));
	for (int k = 0; k < 6; k++) {
		ibp_status_t want = cpu_row(t.codec, t.enc, t.offsets, t.flags, t.clusters, t.nrows, gid[k], ref);
		cr_assert_eq(sts[k], (int32_t)want, "request %d", k);
		cr_assert_arr_eq(out + slot[k] * 100, ref, 100, "request %d", k);
	}
	uint64_t nerr = 0;
	OK(ibp_cuda_store_errors(s, &nerr, NULL));
	cr_assert_eq(nerr, 2);
	ibp_cuda_store_free(s);
	/* a device payload cannot fall back */
	d.payload_kind = IBP_CUDA_PAYLOAD_DEVICE;
	s = (ibp_cuda_store_t *)1;
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &s), IBP_ERR_NO_DEVICE);
	cr_assert_null(s);
	tcase_free(&t);
}

Test(cuda, store_desc_checks)
{
	/* descriptor validation happens before any device work, in both builds */
	tu_rng_t r;
	tu_rng_seed(&r, 77);
	tcase_t t;
	tcase_make(&t, &r, 64, 8, 1, 10);
	ibp_cuda_store_t *s = NULL;
	cr_assert_eq(ibp_cuda_store_create(NULL, 0, NULL, &s), IBP_ERR_INVALID_ARG);
	ibp_cuda_store_desc_t d = { t.codec, t.enc, t.offsets[10], t.offsets, t.flags, NULL, 10,
				    IBP_CUDA_PAYLOAD_COPY_DEVICE };
	d.payload_bytes = t.offsets[10] - 1; /* rows end past the payload */
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &s), IBP_ERR_CORRUPT);
	cr_assert_null(s);
	d.payload_bytes = t.offsets[10];
	uint64_t saved = t.offsets[5];
	t.offsets[5] = t.offsets[6] + 1; /* decreasing */
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &s), IBP_ERR_CORRUPT);
	t.offsets[5] = saved;
	d.payload_kind = (ibp_cuda_payload_t)99;
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &s), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_gather_cuda(NULL, NULL, 0, NULL, NULL, NULL, NULL), IBP_ERR_INVALID_ARG);
	tcase_free(&t);
}

/* ---- training ----------------------------------------------------------- */

Test(cuda, train_counts_and_masks)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x7EA1);
	static const uint64_t Rs[] = { 1, 3, 4, 17, 64, 1000, 4097 };
	static const uint64_t Ns[] = { 0, 1, 5, 255, 256, 600 };
	static const double Ts[] = { 0.5, 0.7, 0.73, 0.8, 0.95, 1.0 };
	for (size_t a = 0; a < sizeof(Rs) / sizeof(Rs[0]); a++)
		for (size_t b = 0; b < sizeof(Ns) / sizeof(Ns[0]); b++) {
			const uint64_t R = Rs[a], n = Ns[b];
			uint8_t *rows = tu_xcalloc(n * R);
			tu_gen_rows(&r, (tu_pattern_t)((a + b) % TU_PATTERN_COUNT), rows, n, R);
			/* a subset of rows by index, as the CPU sample does */
			uint64_t ns = n / 2, *idx = tu_xcalloc((ns ? ns : 1) * 8);
			for (uint64_t i = 0; i < ns; i++)
				idx[i] = 2 * i + (uint64_t)(tu_below(&r, 2) && 2 * i + 1 < n);
			uint64_t *cc = tu_xcalloc(8 * R * 8), *cg = NULL;
			uint64_t *counts_d = dmalloc(8 * R * 8);
			const void *rows_d = (a % 2) ? pinned_copy(rows, n * R) : to_dev(rows, n * R);
			uint64_t *idx_d = to_dev(idx, (ns ? ns : 1) * 8);
			for (int sub = 0; sub < 2; sub++) {
				uint64_t nn = sub ? ns : n;
				OK(ibp_train_count(rows, R, sub ? idx : NULL, nn, 1, cc));
				OK(ibp_train_count_cuda(rows_d, R, sub ? idx_d : NULL, nn, counts_d, NULL));
				OK(ibp_cuda_sync(NULL));
				cg = to_host(counts_d, 8 * R * 8);
				cr_assert_arr_eq(cg, cc, 8 * R * 8, "counts R %llu n %llu sub %d",
						 (unsigned long long)R, (unsigned long long)nn, sub);
				free(cg);
				for (size_t q = 0; q < sizeof(Ts) / sizeof(Ts[0]); q++) {
					uint8_t *mc = tu_xcalloc(2 * R), *mg;
					uint8_t *mask_d = dmalloc(2 * R);
					ibp_train_mask(cc, nn, R, Ts[q], mc, mc + R);
					OK(ibp_train_mask_cuda(counts_d, nn, R, Ts[q], mask_d, mask_d + R, NULL));
					OK(ibp_cuda_sync(NULL));
					mg = to_host(mask_d, 2 * R);
					cr_assert_arr_eq(mg, mc, 2 * R, "mask R %llu n %llu T %g",
							 (unsigned long long)R, (unsigned long long)nn, Ts[q]);
					free(mc);
					free(mg);
					ibp_cuda_free(mask_d);
				}
			}
			if (a % 2)
				ibp_pinned_free((void *)rows_d);
			else
				ibp_cuda_free((void *)rows_d);
			ibp_cuda_free(idx_d);
			ibp_cuda_free(counts_d);
			free(cc);
			free(rows);
			free(idx);
		}
}

/* ---- encoding ------------------------------------------------------------ */

static void check_encode(tcase_t *t, int pinned_rows, int split)
{
	const uint64_t n = t->nrows, R = t->R;
	ibp_cuda_codec_t *dc = NULL;
	OK(ibp_cuda_codec_create(t->codec, NULL, &dc));
	cr_assert_eq(ibp_cuda_codec_host(dc) != NULL, 1);
	uint64_t ws_bytes = 0;
	OK(ibp_encode_workspace_cuda(dc, n, &ws_bytes));
	void *ws = dmalloc(ws_bytes);
	const void *rows_d = pinned_rows ? pinned_copy(t->rows, n * R) : to_dev(t->rows, n * R);
	uint64_t *off_d = dmalloc((n + 1) * 8);
	uint8_t *fl_d = dmalloc(n), *cl_d = dmalloc(n);
	const uint64_t total = t->offsets[n];
	uint8_t *dst_d;
	uint64_t cap;
	if (split) {
		/* exact-size destination: sizes first, then write */
		OK(ibp_encode_sizes_cuda(dc, rows_d, n, off_d, fl_d, cl_d, ws, ws_bytes, NULL));
		OK(ibp_cuda_sync(NULL));
		uint64_t *off = to_host(off_d, (n + 1) * 8);
		cap = off[n];
		free(off);
		dst_d = dmalloc(cap + 1);
		OK(ibp_cuda_memset(dst_d, 0xEE, cap + 1, NULL));
		OK(ibp_encode_write_cuda(dc, rows_d, n, off_d, fl_d, cl_d, dst_d, cap, ws, ws_bytes, NULL));
	} else {
		cap = n * R;
		dst_d = dmalloc(cap + 1);
		OK(ibp_cuda_memset(dst_d, 0xEE, cap + 1, NULL));
		cr_assert_eq(ibp_encode_batch_cuda(dc, rows_d, n, dst_d, cap - 1, off_d, fl_d, cl_d, ws,
						   ws_bytes, NULL),
			     n ? IBP_ERR_BUFFER_TOO_SMALL : IBP_OK);
		OK(ibp_encode_batch_cuda(dc, rows_d, n, dst_d, cap, off_d, fl_d, cl_d, ws, ws_bytes, NULL));
	}
	OK(ibp_cuda_sync(NULL));
	uint64_t *off = to_host(off_d, (n + 1) * 8);
	uint8_t *fl = to_host(fl_d, n), *cl = to_host(cl_d, n), *dst = to_host(dst_d, cap + 1);
#define CASE (unsigned long long)R, t->C, t->K, pinned_rows, split
	for (uint64_t i = 0; i <= n; i++)
		cr_assert_eq(off[i], t->offsets[i], "offset %llu: %llu, CPU %llu; R %llu C %u K %u",
			     (unsigned long long)i, (unsigned long long)off[i],
			     (unsigned long long)t->offsets[i], (unsigned long long)R, t->C, t->K);
	cr_assert_arr_eq(fl, t->flags, n, "flags; R %llu C %u K %u pinned %d split %d", CASE);
	/* clusters: zero-filled for K = 1, as the CPU does */
	cr_assert_arr_eq(cl, t->clusters, n, "clusters; R %llu C %u K %u pinned %d split %d", CASE);
	for (uint64_t i = 0; i < n; i++) {
		const uint8_t *a = dst + t->offsets[i], *b = t->enc + t->offsets[i];
		uint64_t len = t->offsets[i + 1] - t->offsets[i];
		if (memcmp(a, b, len) != 0) {
			uint64_t at = 0;
			while (a[at] == b[at])
				at++;
			cr_assert_fail("row %llu (mode %u, %llu bytes): byte %llu is %02x, CPU %02x; R %llu C %u "
				       "K %u pinned %d split %d", (unsigned long long)i, t->flags[i],
				       (unsigned long long)len, (unsigned long long)at, a[at], b[at], CASE);
		}
	}
	cr_assert_eq(dst[cap], 0xEE, "byte past dst_cap written; R %llu C %u K %u pinned %d split %d",
		     CASE);
	cr_assert_eq(off[n], total);
#undef CASE
	free(off);
	free(fl);
	free(cl);
	free(dst);
	ibp_cuda_free(dst_d);
	ibp_cuda_free(off_d);
	ibp_cuda_free(fl_d);
	ibp_cuda_free(cl_d);
	ibp_cuda_free(ws);
	if (pinned_rows)
		ibp_pinned_free((void *)rows_d);
	else
		ibp_cuda_free((void *)rows_d);
	ibp_cuda_codec_free(dc);
}

Test(cuda, encode_matches_cpu, .timeout = 900)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0xE1C0);
	uint64_t modes[4] = { 0 };
	for (size_t a = 0; a < N_ROW_SIZES + 6; a += sweep_step())
		for (int ci = 0; ci < 4; ci++)
			for (unsigned K = 1; K <= 3; K += 2) {
				/* the table, then a few random lengths in [1, 65536] */
				uint64_t R = a < N_ROW_SIZES ? row_sizes[a] : 1 + tu_below(&r, 65536);
				tcase_t t;
				tcase_make(&t, &r, R, chunk_sizes[ci], K, rows_for(R));
				for (uint64_t i = 0; i < t.nrows; i++)
					modes[t.flags[i] & 3]++;
				check_encode(&t, (int)(a % 3 == 1), (int)(a % 2));
				tcase_free(&t);
			}
	for (int m = 0; m < 4; m++)
		cr_assert_gt(modes[m], 0, "mode %d never produced: the test lost coverage", m);
}

Test(cuda, encode_edge_cases)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0xED6E);
	/* zero rows, one row, and a row larger than shared memory (global stage) */
	tcase_t t;
	tcase_make(&t, &r, 64, 4, 1, 1);
	check_encode(&t, 0, 0);
	tcase_free(&t);
	tcase_make(&t, &r, 300000, 4, 2, 4);
	check_encode(&t, 0, 1);
	check_encode(&t, 1, 0);
	tcase_free(&t);
	ibp_cuda_codec_t *dc = NULL;
	tcase_make(&t, &r, 10, 1, 1, 1);
	OK(ibp_cuda_codec_create(t.codec, NULL, &dc));
	uint64_t ws_bytes = 0;
	OK(ibp_encode_workspace_cuda(dc, 0, &ws_bytes));
	void *ws = dmalloc(ws_bytes);
	uint64_t *off_d = dmalloc(8);
	OK(ibp_cuda_memset(off_d, 0xff, 8, NULL));
	OK(ibp_encode_batch_cuda(dc, NULL, 0, NULL, 0, off_d, NULL, NULL, ws, ws_bytes, NULL));
	OK(ibp_cuda_sync(NULL));
	uint64_t *off = to_host(off_d, 8);
	cr_assert_eq(off[0], 0);
	cr_assert_eq(ibp_encode_sizes_cuda(dc, t.rows, 1, off_d, (uint8_t *)off_d, NULL, ws, 0, NULL),
		     IBP_ERR_BUFFER_TOO_SMALL);
	free(off);
	ibp_cuda_free(off_d);
	ibp_cuda_free(ws);
	ibp_cuda_codec_free(dc);
	tcase_free(&t);
}

/* ---- gathering ------------------------------------------------------------ */

Test(cuda, gather_matches_cpu, .timeout = 900)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x6A7E);
	static const ibp_cuda_kernel_t kernels[4] = { IBP_CUDA_KERNEL_AUTO, IBP_CUDA_KERNEL_WARP,
						      IBP_CUDA_KERNEL_BLOCK, IBP_CUDA_KERNEL_DIRECT };
	for (size_t a = 0; a < N_ROW_SIZES + 4; a += sweep_step())
		for (int ci = 0; ci < 4; ci++)
			for (unsigned K = 1; K <= 3; K += 2) {
				uint64_t R = a < N_ROW_SIZES ? row_sizes[a] : 1 + tu_below(&r, 65536);
				tcase_t t;
				tcase_make(&t, &r, R, chunk_sizes[ci], K, rows_for(R));
				char what[96];
				snprintf(what, sizeof(what), "R %llu C %u K %u", (unsigned long long)R, t.C, K);
				const uint8_t *cl = K > 1 ? t.clusters : NULL;
				for (int k = 0; k < 4; k++) {
					ibp_cuda_payload_t kind = (k + (int)a) % 2 ? IBP_CUDA_PAYLOAD_COPY_PINNED
										  : IBP_CUDA_PAYLOAD_COPY_DEVICE;
					check_gather(what, t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags,
						     cl, t.nrows, kind, kernels[k], (k + ci) % 2, &r);
				}
				tcase_free(&t);
			}
}

Test(cuda, gather_payload_kinds)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x9A1D);
	tcase_t t;
	tcase_make(&t, &r, 1000, 4, 3, 80);
	static const ibp_cuda_payload_t kinds[5] = { IBP_CUDA_PAYLOAD_MAPPED, IBP_CUDA_PAYLOAD_DEVICE,
						     IBP_CUDA_PAYLOAD_COPY_PINNED,
						     IBP_CUDA_PAYLOAD_COPY_DEVICE, IBP_CUDA_PAYLOAD_REGISTER };
	for (int k = 0; k < 5; k++) {
		const uint8_t *payload = t.enc;
		uint8_t *own = NULL;
		if (kinds[k] == IBP_CUDA_PAYLOAD_REGISTER) {
			/* page-aligned host memory of its own, so that registering it is clean */
			own = aligned_alloc(4096, (t.offsets[t.nrows] + 4095) / 4096 * 4096);
			memcpy(own, t.enc, t.offsets[t.nrows]);
			payload = own;
		}
		check_gather("kinds", t.codec, payload, t.offsets[t.nrows], t.offsets, t.flags, t.clusters,
			     t.nrows, kinds[k], IBP_CUDA_KERNEL_AUTO, k % 2, &r);
		free(own);
	}
	/* a plain host pointer is not mapped memory */
	ibp_cuda_store_desc_t d = { t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags, t.clusters,
				    t.nrows, IBP_CUDA_PAYLOAD_MAPPED };
	ibp_cuda_store_t *s = NULL;
	cr_assert_eq(ibp_cuda_store_create(&d, 0, NULL, &s), IBP_ERR_INVALID_ARG);
	cr_assert_null(s);
	d.payload_kind = IBP_CUDA_PAYLOAD_DEVICE;
	cr_assert_eq(ibp_cuda_store_create(&d, 0, NULL, &s), IBP_ERR_INVALID_ARG);
	tcase_free(&t);
}

/* Rows whose flags, cluster ids, extents or bytes were damaged: the GPU must
 * reach the CPU's verdict on every one, and never fault or hang. */
Test(cuda, gather_corrupt_rows, .timeout = 900)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0xBAD0);
	static const uint64_t Rs[] = { 1, 7, 33, 256, 1000, 4096, 5000, 40000 };
	static const ibp_cuda_kernel_t kernels[3] = { IBP_CUDA_KERNEL_WARP, IBP_CUDA_KERNEL_BLOCK,
						      IBP_CUDA_KERNEL_DIRECT };
	for (size_t a = 0; a < sizeof(Rs) / sizeof(Rs[0]); a += sweep_step())
		for (int ci = 0; ci < 4; ci++)
			for (int round = 0; round < 3; round++) {
				const unsigned K = round == 2 ? 3 : 1;
				tcase_t t;
				tcase_make(&t, &r, Rs[a], chunk_sizes[ci], K, rows_for(Rs[a]));
				const uint64_t n = t.nrows;
				uint8_t *cl = t.clusters;
				for (uint64_t i = 0; i < n; i++) {
					switch (tu_below(&r, 8)) {
					case 0: /* another mode, or reserved bits */
						t.flags[i] = (uint8_t)tu_below(&r, 256);
						break;
					case 1:
						t.flags[i] = (uint8_t)((t.flags[i] + 1 + tu_below(&r, 3)) & 3);
						break;
					case 2: /* a cluster id out of range or another cluster */
						cl[i] = (uint8_t)tu_below(&r, K + 2);
						break;
					case 3: { /* flip bytes of the row */
						uint64_t len = t.offsets[i + 1] - t.offsets[i];
						for (int q = 0; len && q < 3; q++)
							t.enc[t.offsets[i] + tu_below(&r, len)] ^=
								(uint8_t)(1 + tu_below(&r, 255));
						break;
					}
					case 4: /* move the boundary with the next row */
						if (i + 1 < n) {
							uint64_t lo = t.offsets[i], hi = t.offsets[i + 2];
							t.offsets[i + 1] = lo + tu_below(&r, hi - lo + 1);
						}
						break;
					default:
						break;
					}
				}
				char what[96];
				snprintf(what, sizeof(what), "corrupt R %llu C %u K %u round %d",
					 (unsigned long long)Rs[a], t.C, K, round);
				check_gather(what, t.codec, t.enc, t.offsets[n], t.offsets, t.flags,
					     K > 1 ? cl : (round == 1 ? cl : NULL), n,
					     round % 2 ? IBP_CUDA_PAYLOAD_COPY_PINNED : IBP_CUDA_PAYLOAD_COPY_DEVICE,
					     kernels[round], round == 1, &r);
				tcase_free(&t);
			}
}

/* The inplace layout: row i at i * R, bytes after its own length ignored. */
Test(cuda, gather_inplace)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x1A91);
	static const uint64_t Rs[] = { 3, 64, 300, 4096, 9000 };
	for (size_t a = 0; a < sizeof(Rs) / sizeof(Rs[0]); a++)
		for (int ci = 0; ci < 4; ci++) {
			tcase_t t;
			tcase_make(&t, &r, Rs[a], chunk_sizes[ci], 2, rows_for(Rs[a]));
			const uint64_t n = t.nrows, R = t.R;
			uint8_t *fixed = tu_xcalloc(n * R);
			for (uint64_t i = 0; i < n; i++) {
				memcpy(fixed + i * R, t.enc + t.offsets[i], t.offsets[i + 1] - t.offsets[i]);
				if (i % 7 == 3) /* damage some rows: a bad mode or random tail bytes */
					t.flags[i] ^= (uint8_t)(1 + tu_below(&r, 3));
				if (i % 5 == 2 && t.offsets[i + 1] - t.offsets[i] < R)
					fixed[i * R + R - 1] = 0x5c; /* past the row's own length: ignored */
			}
			char what[64];
			snprintf(what, sizeof(what), "inplace R %llu C %u", (unsigned long long)R, t.C);
			check_gather(what, t.codec, fixed, n * R, NULL, t.flags, t.clusters, n,
				     ci % 2 ? IBP_CUDA_PAYLOAD_COPY_PINNED : IBP_CUDA_PAYLOAD_COPY_DEVICE,
				     ci < 2 ? IBP_CUDA_KERNEL_AUTO : IBP_CUDA_KERNEL_BLOCK, ci % 2, &r);
			free(fixed);
			tcase_free(&t);
		}
}

/* Rows larger than any shared-memory stage are decoded in place. */
Test(cuda, gather_large_rows, .timeout = 900)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x1A26E);
	for (int ci = 0; ci < 4; ci += 3) {
		tcase_t t;
		tcase_make(&t, &r, 300001, chunk_sizes[ci], 2, 6);
		check_gather("large", t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags, t.clusters,
			     t.nrows, IBP_CUDA_PAYLOAD_COPY_DEVICE, IBP_CUDA_KERNEL_AUTO, 0, &r);
		check_gather("large", t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags, t.clusters,
			     t.nrows, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_KERNEL_WARP, 1, &r);
		tcase_free(&t);
	}
}

Test(cuda, gather_plain)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x91A1);
	static const uint64_t Rs[] = { 1, 3, 16, 100, 1024, 4097, 65536, 250000 };
	for (size_t a = 0; a < sizeof(Rs) / sizeof(Rs[0]); a++) {
		const uint64_t R = Rs[a], nrows = rows_for(R), n = 2 * nrows + 3;
		uint8_t *rows = tu_xcalloc(nrows * R);
		tu_fill_random(&r, rows, nrows * R);
		void *src = pinned_copy(rows, nrows * R);
		int64_t *ids = tu_xcalloc(n * 8);
		for (uint64_t k = 0; k < n; k++)
			ids[k] = (int64_t)tu_below(&r, nrows);
		ids[n / 2] = -5;
		ids[n - 1] = (int64_t)nrows;
		int64_t *ids_d = to_dev(ids, n * 8);
		uint8_t *out_d = dmalloc(n * R);
		int32_t *st_d = dmalloc(n * 4);
		OK(ibp_cuda_memset(out_d, 0xA5, n * R, NULL));
		OK(ibp_gather_plain_cuda(src, nrows, R, ids_d, n, out_d, NULL, st_d, NULL));
		OK(ibp_cuda_sync(NULL));
		uint8_t *out = to_host(out_d, n * R);
		int32_t *sts = to_host(st_d, n * 4);
		uint8_t *zero = tu_xcalloc(R);
		for (uint64_t k = 0; k < n; k++) {
			int bad = ids[k] < 0 || (uint64_t)ids[k] >= nrows;
			cr_assert_eq(sts[k], bad ? IBP_ERR_OUT_OF_RANGE : IBP_OK, "R %llu request %llu",
				     (unsigned long long)R, (unsigned long long)k);
			cr_assert_arr_eq(out + k * R, bad ? zero : rows + (uint64_t)ids[k] * R, R,
					 "R %llu request %llu", (unsigned long long)R, (unsigned long long)k);
		}
		free(zero);
		free(out);
		free(sts);
		free(ids);
		free(rows);
		ibp_cuda_free(ids_d);
		ibp_cuda_free(out_d);
		ibp_cuda_free(st_d);
		ibp_pinned_free(src);
	}
}

/* Negative output slots are refused per request; nothing is written. */
Test(cuda, gather_bad_slots)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x5107);
	tcase_t t;
	tcase_make(&t, &r, 200, 2, 1, 20);
	ibp_cuda_store_desc_t d = { t.codec, t.enc, t.offsets[20], t.offsets, t.flags, NULL, 20,
				    IBP_CUDA_PAYLOAD_COPY_DEVICE };
	ibp_cuda_store_t *s = NULL;
	OK(ibp_cuda_store_create(&d, 0, NULL, &s));
	int64_t ids[4] = { 1, 2, 3, 4 }, slots[4] = { 0, -1, 2, INT64_MIN };
	int64_t *ids_d = to_dev(ids, 32), *slots_d = to_dev(slots, 32);
	uint8_t *out_d = dmalloc(4 * 200);
	int32_t *st_d = dmalloc(16);
	OK(ibp_cuda_memset(out_d, 0xA5, 800, NULL));
	OK(ibp_gather_cuda(s, ids_d, 4, out_d, slots_d, st_d, NULL));
	OK(ibp_cuda_sync(NULL));
	int32_t *sts = to_host(st_d, 16);
	uint8_t *out = to_host(out_d, 800), ref[200];
	cr_assert_eq(sts[0], IBP_OK);
	cr_assert_eq(sts[1], IBP_ERR_INVALID_ARG);
	cr_assert_eq(sts[2], IBP_OK);
	cr_assert_eq(sts[3], IBP_ERR_INVALID_ARG);
	OK(ibp_decode_row(t.codec, t.enc + t.offsets[1], t.offsets[2] - t.offsets[1], t.flags[1], 0, ref));
	cr_assert_arr_eq(out, ref, 200);
	for (int i = 0; i < 200; i++) /* slots 1 and 3 untouched */
		cr_assert(out[200 + i] == 0xA5 && out[600 + i] == 0xA5);
	/* API argument errors */
	cr_assert_eq(ibp_gather_cuda(s, NULL, 4, out_d, NULL, NULL, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cuda_store_set_kernel(s, (ibp_cuda_kernel_t)9), IBP_ERR_INVALID_ARG);
	OK(ibp_gather_cuda(s, NULL, 0, NULL, NULL, NULL, NULL)); /* n = 0: nothing to do */
	free(sts);
	free(out);
	ibp_cuda_free(ids_d);
	ibp_cuda_free(slots_d);
	ibp_cuda_free(out_d);
	ibp_cuda_free(st_d);
	ibp_cuda_store_free(s);
	tcase_free(&t);
}

/* The adapter from a CPU store opened from a .ibp file, both layouts. */
Test(cuda, store_from_cpu_store)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x5702);
	tcase_t t;
	tcase_make(&t, &r, 400, 4, 1, 300);
	for (int layout = 0; layout < 2; layout++) {
		char path[256];
		snprintf(path, sizeof(path), "/tmp/test_cuda_ibp_%d_%d.ibp", (int)getpid(), layout);
		uint64_t shape[2] = { t.nrows, 100 };
		OK(ibp_pack_with_codec(path, t.codec, t.rows, IBP_DTYPE_F32, 2, shape, (ibp_layout_t)layout, 1));
		ibp_store_t *cs = NULL;
		OK(ibp_store_open(path, IBP_OPEN_READ, &cs));
		for (int kind = 0; kind < 3; kind++) {
			static const ibp_cuda_payload_t kinds[3] = { IBP_CUDA_PAYLOAD_COPY_DEVICE,
								     IBP_CUDA_PAYLOAD_COPY_PINNED,
								     IBP_CUDA_PAYLOAD_REGISTER };
			ibp_cuda_store_t *s = NULL;
			OK(ibp_cuda_store_from_store(cs, kinds[kind], 0, NULL, &s));
			const uint64_t n = 500;
			int64_t *ids = tu_xcalloc(n * 8);
			for (uint64_t k = 0; k < n; k++)
				ids[k] = (int64_t)tu_below(&r, t.nrows);
			uint8_t *ref = tu_xcalloc(n * 400);
			OK(ibp_store_gather(cs, ids, n, ref, 1));
			int64_t *ids_d = to_dev(ids, n * 8);
			uint8_t *out_d = dmalloc(n * 400);
			int32_t *st_d = dmalloc(n * 4);
			OK(ibp_gather_cuda(s, ids_d, n, out_d, NULL, st_d, NULL));
			OK(ibp_cuda_sync(NULL));
			uint8_t *out = to_host(out_d, n * 400);
			int32_t *sts = to_host(st_d, n * 4);
			for (uint64_t k = 0; k < n; k++)
				cr_assert_eq(sts[k], IBP_OK, "layout %d kind %d request %llu", layout, kind,
					     (unsigned long long)k);
			cr_assert_arr_eq(out, ref, n * 400, "layout %d kind %d", layout, kind);
			free(ids);
			free(ref);
			free(out);
			free(sts);
			ibp_cuda_free(ids_d);
			ibp_cuda_free(out_d);
			ibp_cuda_free(st_d);
			ibp_cuda_store_free(s);
		}
		ibp_store_close(cs);
		unlink(path);
	}
	tcase_free(&t);
}

/* The committed sample rows (datasets/sample) with codecs trained by
 * ibp_codec_train's defaults (Xvals included where they pay): GPU encode
 * and gather against the CPU. */
Test(cuda, real_sample_data, .timeout = 900)
{
	REQUIRE_GPU();
	static const char *files[3] = { "minilm_tok_emb_f32.npy", "debian_bow_f32.npy",
					"minilm_kv_bf16.npy" };
	tu_rng_t r;
	tu_rng_seed(&r, 0x5A3E);
	int done = 0;
	for (int f = 0; f < 3; f++) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/datasets/sample/%s", IBP_SOURCE_DIR, files[f]);
		ibp_npy_info_t info;
		void *data = NULL;
		if (ibp_npy_load(path, IBP_NPY_BF16, &info, &data) != IBP_OK)
			continue;
		cr_assert_geq(info.ndim, 2);
		tcase_t t;
		memset(&t, 0, sizeof(t));
		t.nrows = info.shape[0];
		t.R = info.data_bytes / t.nrows;
		t.rows = data;
		for (unsigned K = 1; K <= 2; K++) {
			ibp_train_opts_t o;
			ibp_train_opts_default(&o);
			o.clusters = K;
			OK(ibp_codec_train(t.rows, t.nrows, t.R, &o, &t.codec));
			t.C = ibp_codec_chunk_bytes(t.codec);
			t.K = ibp_codec_nclusters(t.codec);
			t.enc = tu_xcalloc(t.nrows * t.R);
			t.offsets = tu_xcalloc((t.nrows + 1) * 8);
			t.flags = tu_xcalloc(t.nrows);
			t.clusters = tu_xcalloc(t.nrows);
			OK(ibp_encode_batch(t.codec, t.rows, t.nrows, t.enc, t.nrows * t.R, t.offsets, t.flags,
					    t.clusters, 1));
			check_encode(&t, 0, K == 2);
			check_gather(files[f], t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags,
				     t.K > 1 ? t.clusters : NULL, t.nrows, IBP_CUDA_PAYLOAD_COPY_PINNED,
				     IBP_CUDA_KERNEL_AUTO, K == 2, &r);
			check_gather(files[f], t.codec, t.enc, t.offsets[t.nrows], t.offsets, t.flags,
				     t.K > 1 ? t.clusters : NULL, t.nrows, IBP_CUDA_PAYLOAD_COPY_DEVICE,
				     IBP_CUDA_KERNEL_BLOCK, K == 1, &r);
			ibp_codec_free(t.codec);
			free(t.enc);
			free(t.offsets);
			free(t.flags);
			free(t.clusters);
		}
		ibp_npy_free(data);
		done++;
	}
	if (!done)
		cr_skip_test("no sample .npy files under %s/datasets/sample", IBP_SOURCE_DIR);
}

/* The stream calls below, from the CUDA runtime when the test links it. */
extern int cudaStreamCreate(void **s) __attribute__((weak));
extern int cudaStreamDestroy(void *s) __attribute__((weak));
extern int cudaStreamSynchronize(void *s) __attribute__((weak));
extern int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user) __attribute__((weak));

static int gate_open;

/* Holds its stream until the test opens the gate: work after it is in flight. */
static void gate(void *user)
{
	(void)user;
	while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
		usleep(200);
}

/* A block freed with ibp_pinned_free_async is not handed out again while
 * its stream is busy (jemalloc would return it first), and is reclaimed
 * once the stream has passed the free. */
Test(cuda, pinned_free_async_waits_for_the_stream)
{
	REQUIRE_GPU();
	if (!cudaStreamCreate || !cudaStreamDestroy || !cudaStreamSynchronize || !cudaLaunchHostFunc)
		cr_skip_test("the CUDA runtime's stream calls are not linked into this test");
	const uint64_t sz = 1u << 20;
	void *stream = NULL;
	cr_assert_eq(cudaStreamCreate(&stream), 0);
	uint64_t base = 0, used = 0;
	ibp_pinned_stats(NULL, &base);
	void *a = NULL, *b[8], *c = NULL;
	OK(ibp_pinned_alloc(sz, 4096, 0, &a));
	__atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
	cr_assert_eq(cudaLaunchHostFunc(stream, gate, NULL), 0);
	OK(ibp_pinned_free_async(a, stream));
	for (int i = 0; i < 8; i++) {
		OK(ibp_pinned_alloc(sz, 4096, 0, &b[i]));
		cr_assert_neq(b[i], a, "a block was handed out again while its stream was still busy");
	}
	for (int i = 0; i < 8; i++)
		ibp_pinned_free(b[i]);
	ibp_pinned_stats(NULL, &used);
	cr_assert_eq(used, base + sz, "the pending block counts as in use (%llu, base %llu)",
		     (unsigned long long)used, (unsigned long long)base);
	__atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
	cr_assert_eq(cudaStreamSynchronize(stream), 0);
	OK(ibp_pinned_alloc(sz, 4096, 0, &c)); /* reclaims a */
	ibp_pinned_free(c);
	ibp_pinned_stats(NULL, &used);
	cr_assert_eq(used, base, "the block was not reclaimed (%llu, base %llu)", (unsigned long long)used,
		     (unsigned long long)base);
	cr_assert_eq(cudaStreamDestroy(stream), 0);
}

Test(cuda, pinned_allocator)
{
	REQUIRE_GPU();
	tu_rng_t r;
	tu_rng_seed(&r, 0x9177);
	enum { N = 400 };
	void *ps[N];
	uint64_t sizes[N];
	for (int i = 0; i < N; i++) {
		sizes[i] = i % 50 == 0 ? (uint64_t)tu_below(&r, 8u << 20) : 1 + tu_below(&r, 20000);
		uint64_t align = 1ull << tu_below(&r, 13);
		OK(ibp_pinned_alloc(sizes[i], align, 0, &ps[i]));
		cr_assert_eq((uintptr_t)ps[i] % align, 0);
		cr_assert_eq(ibp_pinned_owns(ps[i]), 1);
		memset(ps[i], i & 0xff, sizes[i]);
		void *dev = NULL;
		OK(ibp_pinned_device_ptr(ps[i], &dev));
		cr_assert_not_null(dev);
	}
	for (int i = 0; i < N; i++) {
		const uint8_t *p = ps[i];
		for (uint64_t k = 0; k < sizes[i]; k += 1 + sizes[i] / 7)
			cr_assert_eq(p[k], (uint8_t)(i & 0xff), "allocation %d overlaps another", i);
	}
	uint64_t reserved = 0, in_use = 0;
	ibp_pinned_stats(&reserved, &in_use);
	cr_assert_geq(reserved, in_use);
	cr_assert_gt(in_use, 0);
	/* the device sees what the host wrote, through the mapping */
	uint8_t *back = tu_xcalloc(sizes[1]);
	OK(ibp_cuda_memcpy(back, ps[1], sizes[1], NULL));
	OK(ibp_cuda_sync(NULL));
	for (uint64_t k = 0; k < sizes[1]; k++)
		cr_assert_eq(back[k], 1);
	free(back);
	for (int i = 0; i < N; i++)
		ibp_pinned_free(ps[i]);
	int stack_var = 0;
	cr_assert_eq(ibp_pinned_owns(&stack_var), 0);
	void *p = NULL;
	cr_assert_eq(ibp_pinned_alloc(10, 3, 0, &p), IBP_ERR_INVALID_ARG);
}
