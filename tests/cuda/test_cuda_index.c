/* test_cuda_index.c - ibp_cuda_store_from_store on format 1.2 containers:
 * the adapter expands the compact row index into the offsets/flags/
 * clusters arrays the device store takes. Without a GPU the store falls
 * back to host memory (IBP_CUDA_HOST_FALLBACK) and ibp_gather_cuda decodes
 * on the CPU from those expanded arrays, so the expansion is checked in
 * every build; with a GPU this test skips (tests/cuda/test_cuda_ibp.c,
 * store_from_cpu_store, covers the device). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "fixtures.h"

static void adapter_round_trip(ibp_layout_t layout, unsigned k)
{
	uint64_t n = 300, R = 36, shape[2] = { n, R };
	ibp_codec_t *codec = make_codec(R, 4, k, 60 + k);
	uint8_t *rows = make_rows(codec, n, 61);
	char path[160];
	snprintf(path, sizeof(path), "%s/cuda_ix_%d_%u.ibp", tmpdir, (int)layout, k);
	cr_assert_eq(ibp_pack_with_codec(path, codec, rows, IBP_DTYPE_U8, 2, shape, layout, 1), IBP_OK, "%s",
		     ibp_last_error());
	ibp_store_t *cs = NULL;
	cr_assert_eq(ibp_store_open(path, IBP_OPEN_READ, &cs), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_compact_index(ibp_store_container(cs)), 1);
	ibp_cuda_store_t *s = NULL;
	ibp_status_t st = ibp_cuda_store_from_store(cs, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_HOST_FALLBACK,
						    NULL, &s);
	if (st == IBP_OK) {
		ibp_cuda_store_free(s);
		ibp_store_close(cs);
		free(rows);
		ibp_codec_free(codec);
		cr_skip_test("a GPU is present: test_cuda_ibp covers the device store");
	}
	cr_assert_eq(st, IBP_ERR_NO_DEVICE, "%s", ibp_last_error());
	cr_assert_not_null(s);
	cr_assert_eq(ibp_cuda_store_on_device(s), 0);
	cr_assert_eq(ibp_cuda_store_nrows(s), n);
	const uint64_t m = 500;
	int64_t *ids = xcalloc(m * sizeof(int64_t));
	int32_t *sts = xcalloc(m * sizeof(int32_t));
	uint8_t *out = xcalloc(m * R);
	rng_t r = { 62 };
	for (uint64_t i = 0; i < m; i++)
		ids[i] = (int64_t)(rnd(&r) % n);
	cr_assert_eq(ibp_gather_cuda(s, ids, m, out, NULL, sts, NULL), IBP_OK, "%s", ibp_last_error());
	for (uint64_t i = 0; i < m; i++) {
		cr_assert_eq(sts[i], 0, "position %llu: status %d", (unsigned long long)i, sts[i]);
		cr_assert(memcmp(out + i * R, rows + (uint64_t)ids[i] * R, R) == 0, "position %llu (row %lld)",
			  (unsigned long long)i, (long long)ids[i]);
	}
	ibp_cuda_store_free(s);
	ibp_store_close(cs);
	free(ids);
	free(sts);
	free(out);
	free(rows);
	ibp_codec_free(codec);
}

Test(cuda_index, adapter_expands_compact_index, .init = make_tmpdir, .fini = remove_tmpdir)
{
	adapter_round_trip(IBP_LAYOUT_PACKED, 1);
	adapter_round_trip(IBP_LAYOUT_PACKED, 3);
	adapter_round_trip(IBP_LAYOUT_INPLACE, 1);
	adapter_round_trip(IBP_LAYOUT_INPLACE, 2);
}

/* exp and fp8 containers have no device store */
Test(cuda_index, adapter_refuses_value_codecs, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t shape[2] = { 8, 16 };
	uint16_t v[128];
	for (int i = 0; i < 128; i++)
		v[i] = (uint16_t)(0x3f80 + (i % 7));
	char path[160];
	snprintf(path, sizeof(path), "%s/cuda_exp.ibp", tmpdir);
	cr_assert_eq(ibp_pack_exp(path, v, IBP_DTYPE_BF16, 2, shape, NULL, 0), IBP_OK, "%s", ibp_last_error());
	ibp_store_t *cs = NULL;
	cr_assert_eq(ibp_store_open(path, 0, &cs), IBP_OK);
	ibp_cuda_store_t *s = (ibp_cuda_store_t *)1;
	cr_assert_eq(ibp_cuda_store_from_store(cs, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_HOST_FALLBACK, NULL, &s),
		     IBP_ERR_UNSUPPORTED);
	cr_assert_null(s);
	ibp_store_close(cs);
}
