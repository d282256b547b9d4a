/* test_bag_host.c - ibp_store_embedding_bag_cuda on a host-fallback device
 * store (IBP_CUDA_HOST_FALLBACK, no GPU): bit for bit
 * ibp_store_embedding_bag on the same rows (every mode, weights fused and
 * unfused, padding, int32 and int64 ids, float32/16-bit rows, packed and
 * inplace layouts), the device's per-bag status (a bad id or a corrupt row
 * zeros its bag only and counts in ibp_cuda_store_errors), and the
 * synchronous argument errors. Runs in both builds (with and without CUDA);
 * on a machine with a GPU the store is made on the device and these tests
 * skip (the GPU twin is checked by the emulator and tools/gpu-check.sh). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fixtures.h"
#include "fp8/fp8_impl.h"

#define DIM 37
#define NROWS 500
#define NBAGS 64

typedef struct tab {
	ibp_store_t *cpu;
	ibp_cuda_store_t *dev;
	ibp_dtype_t dt;
	uint64_t R;
} tab_t;

/* A CPU store of random rows as dt and its host-fallback device twin;
 * skips the test where the device store lands on a GPU. */
static void open_tab(tab_t *t, ibp_dtype_t dt, ibp_layout_t layout, uint64_t seed, const char *name)
{
	rng_t r = { seed };
	float *f = xcalloc(NROWS * DIM * sizeof(float));
	for (uint64_t i = 0; i < NROWS * DIM; i++)
		f[i] = (float)((int64_t)(rnd(&r) % 4001) - 2000) / 331.0f;
	for (uint64_t i = 0; i < 40 * DIM; i++) /* repeated rows: a trained codec finds patterns */
		f[(100 + i / DIM) * DIM + i % DIM] = f[i % DIM];
	void *data = f;
	uint16_t *h = NULL;
	if (dt != IBP_DTYPE_F32) {
		h = xcalloc(NROWS * DIM * 2);
		for (uint64_t i = 0; i < NROWS * DIM; i++)
			h[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f[i]) : fp8i_f32_to_f16(f[i]);
		data = h;
	}
	uint64_t shape[2] = { NROWS, DIM };
	char path[200];
	snprintf(path, sizeof(path), "%s/%s.ibp", tmpdir, name);
	cr_assert_eq(ibp_pack(path, data, dt, 2, shape, NULL, layout), IBP_OK, "%s", ibp_last_error());
	free(f);
	free(h);
	t->cpu = NULL;
	cr_assert_eq(ibp_store_open(path, 0, &t->cpu), IBP_OK, "%s", ibp_last_error());
	t->dev = NULL;
	ibp_status_t st = ibp_cuda_store_from_store(t->cpu, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_HOST_FALLBACK,
						    NULL, &t->dev);
	cr_assert_not_null(t->dev, "%s", ibp_last_error());
	if (st == IBP_OK && ibp_cuda_store_on_device(t->dev)) {
		ibp_cuda_store_free(t->dev);
		ibp_store_close(t->cpu);
		cr_skip_test("a GPU is present: the store is on the device, no host fallback to test");
	}
	cr_assert_eq(st, IBP_ERR_NO_DEVICE);
	cr_assert_eq(ibp_cuda_store_on_device(t->dev), 0);
	t->dt = dt;
	t->R = ibp_store_row_bytes(t->cpu);
}

static void close_tab(tab_t *t)
{
	ibp_cuda_store_free(t->dev);
	ibp_store_close(t->cpu);
}

/* Random bags (some empty, some long) over n_ids ids, padding row 7 among them. */
static uint64_t make_bags(uint64_t seed, int64_t *ids, int32_t *ids32, int64_t *off, float *w)
{
	rng_t r = { seed };
	uint64_t n = 0;
	off[0] = 0;
	for (int b = 0; b < NBAGS; b++) {
		uint64_t len = b % 9 == 4 ? 0 : rnd(&r) % (b % 5 == 0 ? 40 : 9);
		for (uint64_t k = 0; k < len; k++, n++) {
			ids[n] = rnd(&r) % 6 == 0 ? 7 : (int64_t)(rnd(&r) % NROWS);
			ids32[n] = (int32_t)ids[n];
			w[n] = (float)((int64_t)(rnd(&r) % 201) - 100) / 37.0f;
		}
		off[b + 1] = (int64_t)n;
	}
	return n;
}

#define MAX_IDS (NBAGS * 40)

static void check_equal(ibp_dtype_t dt, ibp_layout_t layout, const char *name)
{
	tab_t t;
	open_tab(&t, dt, layout, 11 + (uint64_t)dt, name);
	int64_t *ids = xcalloc(MAX_IDS * 8), off[NBAGS + 1];
	int32_t *ids32 = xcalloc(MAX_IDS * 4), sts[NBAGS];
	float *w = xcalloc(MAX_IDS * 4);
	uint64_t n = make_bags(5, ids, ids32, off, w);
	uint8_t *want = xcalloc(NBAGS * t.R), *got = xcalloc(NBAGS * t.R);
	int cases = 0;
	for (int mode = 0; mode < 3; mode++)
		for (int weighted = 0; weighted < (mode == IBP_BAG_SUM ? 3 : 1); weighted++)
			for (int64_t pad = -1; pad <= 7; pad += 8)
				for (int i32 = 0; i32 < 2; i32++) {
					unsigned flags = weighted == 2 ? IBP_BAG_UNFUSED_WEIGHTS : 0;
					const float *wt = weighted ? w : NULL;
					const void *id = i32 ? (const void *)ids32 : (const void *)ids;
					ibp_dtype_t idt = i32 ? IBP_DTYPE_I32 : IBP_DTYPE_I64;
					memset(want, 0x5A, NBAGS * t.R);
					memset(got, 0xA5, NBAGS * t.R);
					memset(sts, 0x7F, sizeof(sts));
					cr_assert_eq(ibp_store_embedding_bag(t.cpu, (ibp_bag_mode_t)mode, flags, id, idt, n,
									     off, NBAGS, wt, pad, want, 2),
						     IBP_OK, "%s", ibp_last_error());
					cr_assert_eq(ibp_store_embedding_bag_cuda(t.dev, (ibp_bag_mode_t)mode, flags, id,
										  idt, n, off, NBAGS, wt, pad, dt, got,
										  sts, NULL),
						     IBP_OK, "%s", ibp_last_error());
					for (int b = 0; b < NBAGS; b++)
						cr_assert_eq(sts[b], IBP_OK, "bag %d", b);
					cr_assert_arr_eq(got, want, NBAGS * t.R, "mode %d weighted %d pad %lld i32 %d",
							 mode, weighted, (long long)pad, i32);
					cases++;
				}
	cr_assert_eq(cases, 20);
	uint64_t nerr = 1;
	cr_assert_eq(ibp_cuda_store_errors(t.dev, &nerr, NULL), IBP_OK);
	cr_assert_eq(nerr, 0);
	free(ids), free(ids32), free(w), free(want), free(got);
	close_tab(&t);
}

Test(bag_host, float32_packed_equals_cpu_bag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_equal(IBP_DTYPE_F32, IBP_LAYOUT_PACKED, "f32p");
}

Test(bag_host, float32_inplace_equals_cpu_bag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_equal(IBP_DTYPE_F32, IBP_LAYOUT_INPLACE, "f32i");
}

Test(bag_host, float16_equals_cpu_bag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_equal(IBP_DTYPE_F16, IBP_LAYOUT_PACKED, "f16");
}

Test(bag_host, bfloat16_equals_cpu_bag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	check_equal(IBP_DTYPE_BF16, IBP_LAYOUT_PACKED, "bf16");
}

/* A bad id fails its bag only: zeros, IBP_ERR_OUT_OF_RANGE, one error
 * counted; the other bags are the CPU's. Counts add up over calls. */
Test(bag_host, bad_id_fails_its_bag_only, .init = make_tmpdir, .fini = remove_tmpdir)
{
	tab_t t;
	open_tab(&t, IBP_DTYPE_F32, IBP_LAYOUT_PACKED, 3, "bad");
	int64_t ids[8] = { 1, 2, 3, NROWS, 4, 5, -1, 6 }, off[5] = { 0, 2, 5, 6, 8 };
	int64_t good[8] = { 1, 2, 3, 0, 4, 5, 0, 6 };
	float want[4 * DIM], got[4 * DIM];
	int32_t sts[4];
	cr_assert_eq(ibp_store_embedding_bag(t.cpu, IBP_BAG_SUM, 0, good, IBP_DTYPE_I64, 8, off, 4, NULL, -1, want, 1),
		     IBP_OK);
	for (int call = 0; call < 2; call++) {
		memset(got, 0xA5, sizeof(got));
		cr_assert_eq(ibp_store_embedding_bag_cuda(t.dev, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, 8, off, 4, NULL, -1,
							  IBP_DTYPE_F32, got, call ? NULL : sts, NULL),
			     IBP_OK, "%s", ibp_last_error());
		if (!call) {
			cr_assert_eq(sts[0], IBP_OK);
			cr_assert_eq(sts[1], IBP_ERR_OUT_OF_RANGE);
			cr_assert_eq(sts[2], IBP_OK);
			cr_assert_eq(sts[3], IBP_ERR_OUT_OF_RANGE);
		}
		cr_assert_arr_eq(got, want, DIM * sizeof(float));
		cr_assert_arr_eq(got + 2 * DIM, want + 2 * DIM, DIM * sizeof(float));
		for (int j = 0; j < DIM; j++)
			cr_assert(got[DIM + j] == 0.0f && got[3 * DIM + j] == 0.0f, "failed bags are zeros");
	}
	uint64_t nerr = 0;
	cr_assert_eq(ibp_cuda_store_errors(t.dev, &nerr, NULL), IBP_OK);
	cr_assert_eq(nerr, 4, "two failed bags in each of two calls, got %llu", (unsigned long long)nerr);
	close_tab(&t);
}

/* A row that does not decode fails its bag with IBP_ERR_CORRUPT. */
Test(bag_host, corrupt_row_fails_its_bag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	tab_t t;
	open_tab(&t, IBP_DTYPE_F32, IBP_LAYOUT_PACKED, 4, "cor");
	const ibp_container_t *c = ibp_store_container(t.cpu);
	uint64_t plen = 0;
	const uint8_t *payload = ibp_container_payload(c, &plen);
	uint8_t *flags = xcalloc(NROWS);
	memcpy(flags, ibp_container_flags(c), NROWS);
	flags[9] = 0xFF; /* no such row mode */
	ibp_cuda_store_desc_t d = { ibp_store_codec(t.cpu), payload, plen, ibp_container_offsets(c), flags,
				    ibp_container_clusters(c), NROWS, IBP_CUDA_PAYLOAD_COPY_PINNED };
	ibp_cuda_store_t *bad = NULL;
	cr_assert_eq(ibp_cuda_store_create(&d, IBP_CUDA_HOST_FALLBACK, NULL, &bad), IBP_ERR_NO_DEVICE);
	cr_assert_not_null(bad);
	int64_t ids[4] = { 1, 9, 2, 3 }, off[3] = { 0, 2, 4 };
	float want[2 * DIM], got[2 * DIM];
	int32_t sts[2] = { 99, 99 };
	cr_assert_eq(ibp_store_embedding_bag(t.cpu, IBP_BAG_MAX, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1, want, 1),
		     IBP_OK);
	memset(got, 0xA5, sizeof(got));
	cr_assert_eq(ibp_store_embedding_bag_cuda(bad, IBP_BAG_MAX, 0, ids, IBP_DTYPE_I64, 4, off, 2, NULL, -1,
						  IBP_DTYPE_F32, got, sts, NULL),
		     IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(sts[0], IBP_ERR_CORRUPT);
	cr_assert_eq(sts[1], IBP_OK);
	for (int j = 0; j < DIM; j++)
		cr_assert(got[j] == 0.0f);
	cr_assert_arr_eq(got + DIM, want + DIM, DIM * sizeof(float));
	ibp_cuda_store_free(bad);
	free(flags);
	close_tab(&t);
}

/* Arguments are checked before anything is written, as on the device. */
Test(bag_host, argument_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	tab_t t;
	open_tab(&t, IBP_DTYPE_F32, IBP_LAYOUT_PACKED, 5, "arg");
	int64_t ids[4] = { 1, 2, 3, 4 }, off[3] = { 0, 2, 4 }, dec[3] = { 0, 3, 2 }, past[3] = { 0, 2, 5 };
	float w[4] = { 1, 1, 1, 1 }, out[2 * DIM];
	ibp_cuda_store_t *s = t.dev;
#define BAG(S, MODE, FL, IDT, OFF, W, PAD, DT, OUT)                                                         \
	ibp_store_embedding_bag_cuda(S, MODE, FL, ids, IDT, 4, OFF, 2, W, PAD, DT, OUT, NULL, NULL)
	memset(out, 0xA5, sizeof(out));
	cr_assert_eq(BAG(NULL, IBP_BAG_SUM, 0, IBP_DTYPE_I64, off, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, (ibp_bag_mode_t)3, 0, IBP_DTYPE_I64, off, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 4, IBP_DTYPE_I64, off, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_F32, off, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_MEAN, 0, IBP_DTYPE_I64, off, w, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, off, NULL, NROWS, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, dec, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, past, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, NULL, NULL, -1, IBP_DTYPE_F32, out), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, off, NULL, -1, IBP_DTYPE_F32, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(BAG(s, IBP_BAG_SUM, 0, IBP_DTYPE_I64, off, NULL, -1, IBP_DTYPE_I32, out), IBP_ERR_UNSUPPORTED);
	for (int j = 0; j < 2 * DIM; j++)
		cr_assert_eq(((uint32_t *)out)[j], 0xA5A5A5A5u, "nothing written");
#undef BAG
	close_tab(&t);
}
