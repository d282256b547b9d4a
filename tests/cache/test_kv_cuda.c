/* test_kv_cuda.c - KV offload through a device stream (ibp_kv_stream_t,
 * cache/kv_cuda.c) on a machine without a GPU: the host-fallback stream runs
 * the same orchestration with the CPU twins. A paged layer cache built from
 * the committed MiniLM K/V sample (bf16): stored blocks equal the CPU
 * packer's bytes (ibp_encode_batch + ibp_kv_pack_blocks), EXP blocks equal
 * ibp_exp_encode's, loads restore every bit into other blocks, RAW and EXP
 * blocks, pins released at wait, and the
 * error paths (evicted, corrupt header, corrupt payload reported by wait,
 * bad or repeated destinations, a full pool: nothing kept). One test needs
 * a GPU and skips without one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "ibp/alloc.h"
#include "ibp/cache.h"
#include "ibp/codec.h"
#include "ibp/cuda.h"
#include "ibp/exp.h"
#include "ibp/npy.h"
#include "testutil.h"
#include "util/copy.h"

#define OK(x) cr_assert_eq((x), IBP_OK, "%s", ibp_last_error())

#define TOK 4        /* tokens per block */
#define NB 48        /* blocks in the layer cache */

typedef struct layer {
	uint8_t *kv;   /* [2, NB, R]: K of block d is row d, V row NB + d */
	uint64_t R;
	ibp_codec_t *codec;
} layer_t;

#define NEED_NO_GPU()                                                                                  \
	do {                                                                                           \
		if (tu_have_gpu())                                                                        \
			cr_skip_test("a GPU is present: these tests drive the host-fallback stream"); \
	} while (0)

/* The sample's first 2 * NB * TOK token rows as a layer cache of NB blocks. */
static layer_t load_layer(void)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/datasets/sample/minilm_kv_bf16.npy", IBP_SOURCE_DIR);
	ibp_npy_info_t info;
	void *data = NULL;
	OK(ibp_npy_load(path, IBP_NPY_BF16, &info, &data));
	uint64_t tok_bytes = info.data_bytes / info.shape[0];
	cr_assert(info.shape[0] >= 2 * NB * TOK);
	layer_t L = { NULL, TOK * tok_bytes, NULL };
	L.kv = xcalloc(2 * NB * L.R);
	memcpy(L.kv, data, 2 * NB * L.R);
	ibp_npy_free(data);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	OK(ibp_codec_train(L.kv, 2 * NB, L.R, &o, &L.codec));
	return L;
}

static void free_layer(layer_t *L)
{
	free(L->kv);
	ibp_codec_free(L->codec);
}

static ibp_slab_pool_t *pool_of(uint64_t cap, uint64_t max_block, ibp_cache_policy_t pol)
{
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = cap;
	o.max_block_bytes = max_block;
	o.policy = pol;
	o.flags = IBP_SLAB_POOL_HOST;
	ibp_slab_pool_t *p = NULL;
	OK(ibp_slab_pool_create(&o, &p));
	return p;
}

static ibp_kv_stream_t *fallback_stream(const ibp_codec_t *c, uint64_t R)
{
	ibp_kv_stream_t *s = NULL;
	ibp_status_t st = ibp_kv_stream_create(c, R, IBP_DTYPE_BF16, IBP_CUDA_HOST_FALLBACK, NULL, &s);
	cr_assert(st == IBP_ERR_NO_DEVICE && s && !ibp_kv_stream_on_device(s), "status %d: %s", (int)st,
		  ibp_last_error());
	return s;
}

static uint64_t pinned_blocks(ibp_slab_pool_t *p)
{
	ibp_slab_pool_stats_t st;
	OK(ibp_slab_pool_stats(p, &st, 0));
	return st.pinned_blocks;
}

/* What the CPU path stores for `ids`: the rows encoded by ibp_encode_batch
 * and packed by ibp_kv_pack_blocks; block b at stage + bo[b]. */
static uint8_t *cpu_blocks(const layer_t *L, const int64_t *ids, uint64_t n, uint64_t *bo)
{
	const uint64_t R = L->R;
	uint8_t *rows = xcalloc(2 * n * R), *pay = xcalloc(2 * n * R), *stage = xcalloc(2 * n * R + 12 * n);
	uint64_t *off = xcalloc((2 * n + 1) * 8);
	uint8_t *fl = xcalloc(2 * n), *cl = xcalloc(2 * n);
	for (uint64_t b = 0; b < n; b++) {
		memcpy(rows + 2 * b * R, L->kv + (uint64_t)ids[b] * R, R);
		memcpy(rows + (2 * b + 1) * R, L->kv + (NB + (uint64_t)ids[b]) * R, R);
	}
	OK(ibp_encode_batch(L->codec, rows, 2 * n, pay, 2 * n * R, off, fl, cl, 1));
	OK(ibp_kv_pack_blocks(pay, off, fl, cl, n, stage, 2 * n * R + 12 * n, bo));
	free(rows), free(pay), free(off), free(fl), free(cl);
	return stage;
}

static void assert_block(const layer_t *L, const uint8_t *kv, int64_t dst, int64_t src)
{
	const uint64_t R = L->R;
	cr_assert_eq(memcmp(kv + (uint64_t)dst * R, L->kv + (uint64_t)src * R, R), 0, "K of block %lld", (long long)dst);
	cr_assert_eq(memcmp(kv + (NB + (uint64_t)dst) * R, L->kv + (NB + (uint64_t)src) * R, R), 0, "V of block %lld",
		     (long long)dst);
}

Test(kv_cuda, store_equals_cpu_packer_and_load_round_trips, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t R = L.R;
	ibp_slab_pool_t *pool = pool_of(64 * 2 * R, 2 * R + 64, IBP_CACHE_LRU);
	ibp_kv_stream_t *s = fallback_stream(L.codec, R);
	const int64_t ids[6] = { 5, 0, 47, 12, 12, 30 };
	int64_t h[6], hr[2];
	uint64_t bytes[6], rbytes[2], bo[7];
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 6, IBP_KV_IBP, h, bytes));
	cr_assert_eq(pinned_blocks(pool), 6, "slots stay pinned until the copies are done");
	OK(ibp_kv_stream_wait(s));
	cr_assert_eq(pinned_blocks(pool), 0);
	uint8_t *ref = cpu_blocks(&L, ids, 6, bo);
	uint64_t total = 0;
	for (int b = 0; b < 6; b++) {
		uint8_t got[2 * 4096 + 64];
		uint64_t len = 0;
		cr_assert(bytes[b] <= sizeof got);
		OK(ibp_slab_pool_get(pool, h[b], got, sizeof got, &len));
		cr_assert_eq(len, bytes[b]);
		cr_assert_eq(len, bo[b + 1] - bo[b], "block %d: %llu bytes, the CPU packer %llu", b,
			     (unsigned long long)len, (unsigned long long)(bo[b + 1] - bo[b]));
		cr_assert_eq(memcmp(got, ref + bo[b], len), 0, "block %d differs from the CPU packer's", b);
		total += len;
	}
	cr_assert_lt(total, 6 * 2 * R, "the sample K/V compresses");
	free(ref);
	/* RAW blocks: K row then V row. */
	const int64_t rid[2] = { 7, 46 };
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, rid, 2, IBP_KV_RAW, hr, rbytes));
	cr_assert(rbytes[0] == 2 * R && rbytes[1] == 2 * R);
	/* Load everything into other blocks of a fresh cache. */
	uint8_t *kv = xcalloc(2 * NB * R);
	ibp_slab_pool_t *pools[8];
	int64_t hall[8] = { h[0], h[1], h[2], h[3], h[4], h[5], hr[0], hr[1] };
	const uint8_t kinds[8] = { 0, 0, 0, 0, 0, 0, IBP_KV_RAW, IBP_KV_RAW };
	const int64_t dst[8] = { 40, 1, 2, 3, 0, 17, 9, 47 };
	const int64_t src[8] = { 5, 0, 47, 12, 12, 30, 7, 46 };
	for (int k = 0; k < 8; k++)
		pools[k] = pool;
	OK(ibp_kv_decode_cuda(s, pools, hall, kinds, 8, kv, NB, dst));
	cr_assert_eq(pinned_blocks(pool), 8);
	OK(ibp_kv_stream_wait(s));
	cr_assert_eq(pinned_blocks(pool), 0);
	for (int k = 0; k < 8; k++)
		assert_block(&L, kv, dst[k], src[k]);
	for (uint64_t d = 0; d < NB; d++) { /* untouched blocks stay zero */
		int listed = 0;
		for (int k = 0; k < 8; k++)
			listed |= dst[k] == (int64_t)d;
		for (uint64_t j = 0; !listed && j < R; j++)
			cr_assert(kv[d * R + j] == 0 && kv[(NB + d) * R + j] == 0, "block %llu written", (unsigned long long)d);
	}
	/* kinds NULL: all IBP. */
	memset(kv, 0, 2 * NB * R);
	OK(ibp_kv_decode_cuda(s, pools, h, NULL, 6, kv, NB, dst));
	OK(ibp_kv_stream_wait(s));
	for (int k = 0; k < 6; k++)
		assert_block(&L, kv, dst[k], src[k]);
	free(kv);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

Test(kv_cuda, errors_leave_the_cache_untouched, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t R = L.R;
	ibp_slab_pool_t *pool = pool_of(64 * 2 * R, 2 * R + 64, IBP_CACHE_LRU);
	ibp_kv_stream_t *s = fallback_stream(L.codec, R);
	const int64_t ids[4] = { 1, 2, 3, 4 };
	int64_t h[4];
	uint64_t bytes[4];
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 4, IBP_KV_IBP, h, bytes));
	OK(ibp_kv_stream_wait(s));
	ibp_slab_pool_t *pools[4] = { pool, pool, pool, pool };
	uint8_t *kv = xcalloc(2 * NB * R), *zero = xcalloc(2 * NB * R);
	int64_t dst[4] = { 10, 11, 12, 13 };

	/* Arguments. */
	const int64_t bad_id[1] = { NB };
	int64_t h1[1] = { 99 };
	uint64_t b1[1];
	cr_assert_eq(ibp_kv_encode_cuda(s, pool, L.kv, NB, bad_id, 1, IBP_KV_IBP, h1, b1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(h1[0], -1);
	cr_assert_eq(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 1, 7, h1, b1), IBP_ERR_INVALID_ARG);
	int64_t rep[4] = { 10, 11, 10, 13 }, neg[4] = { 10, -1, 12, 13 };
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, NULL, 4, kv, NB, rep), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "twice"), "%s", ibp_last_error());
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, NULL, 4, kv, NB, neg), IBP_ERR_INVALID_ARG);
	ibp_kv_stream_t *raw_only = fallback_stream(NULL, R);
	cr_assert_eq(ibp_kv_encode_cuda(raw_only, pool, L.kv, NB, ids, 1, IBP_KV_IBP, h1, b1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_kv_decode_cuda(raw_only, pools, h, NULL, 1, kv, NB, dst), IBP_ERR_INVALID_ARG);
	ibp_kv_stream_free(raw_only);
	ibp_kv_stream_t *other = NULL;
	cr_assert_eq(ibp_kv_stream_create(L.codec, R + 2, IBP_DTYPE_BF16, IBP_CUDA_HOST_FALLBACK, NULL, &other), IBP_ERR_INVALID_ARG);
	cr_assert_null(other);

	/* An evicted (removed) block: nothing written, nothing left pinned. */
	OK(ibp_slab_pool_remove(pool, h[2]));
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, NULL, 4, kv, NB, dst), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(pinned_blocks(pool), 0);
	cr_assert_eq(memcmp(kv, zero, 2 * NB * R), 0);
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids + 2, 1, IBP_KV_IBP, &h[2], &bytes[2]));
	OK(ibp_kv_stream_wait(s));

	/* A header whose lengths do not add up: CORRUPT before anything runs. */
	void *p = NULL;
	uint64_t len = 0;
	OK(ibp_slab_pool_pin(pool, h[1], &p, &len));
	uint8_t *hd = p, save0 = hd[0];
	hd[0] ^= 1;
	OK(ibp_slab_pool_unpin(pool, p));
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, NULL, 4, kv, NB, dst), IBP_ERR_CORRUPT);
	cr_assert_eq(memcmp(kv, zero, 2 * NB * R), 0);
	cr_assert_eq(pinned_blocks(pool), 0);
	hd[0] = save0;
	/* A header naming a row longer than a raw row (its slot in the stage). */
	{
		uint8_t *big = xcalloc(IBP_KV_BLOCK_HEADER + R + 1);
		big[0] = (uint8_t)(R + 1), big[1] = (uint8_t)((R + 1) >> 8), big[2] = (uint8_t)((R + 1) >> 16);
		int64_t hb[1];
		OK(ibp_slab_pool_put(pool, big, IBP_KV_BLOCK_HEADER + R + 1, hb));
		cr_assert_eq(ibp_kv_decode_cuda(s, pools, hb, NULL, 1, kv, NB, dst), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "longer than a raw row"), "%s", ibp_last_error());
		cr_assert_eq(memcmp(kv, zero, 2 * NB * R), 0);
		OK(ibp_slab_pool_remove(pool, hb[0]));
		free(big);
	}
	/* A RAW load of an IBP block: wrong length. */
	const uint8_t kinds[4] = { 0, IBP_KV_RAW, 0, 0 };
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, kinds, 4, kv, NB, dst), IBP_ERR_CORRUPT);
	cr_assert_eq(memcmp(kv, zero, 2 * NB * R), 0);

	/* A bad mode byte parses but does not decode: that row is zero, the
	 * others restored, and wait reports it once. */
	uint8_t save8 = hd[8];
	hd[8] = 0x7F;
	OK(ibp_kv_decode_cuda(s, pools, h, NULL, 4, kv, NB, dst));
	ibp_status_t st = ibp_kv_stream_wait(s);
	cr_assert_eq(st, IBP_ERR_CORRUPT, "wait: %d", (int)st);
	cr_assert(strstr(ibp_last_error(), "1 K/V rows"), "%s", ibp_last_error());
	OK(ibp_kv_stream_wait(s)); /* reported once */
	for (uint64_t j = 0; j < R; j++)
		cr_assert_eq(kv[11 * R + j], 0, "the corrupt K row is zero-filled");
	cr_assert_eq(memcmp(kv + (NB + 11) * R, L.kv + (NB + 2) * R, R), 0, "its V row decodes");
	for (int k = 0; k < 4; k++)
		if (k != 1)
			assert_block(&L, kv, dst[k], ids[k]);
	hd[8] = save8;
	cr_assert_eq(pinned_blocks(pool), 0);

	free(kv), free(zero);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

Test(kv_cuda, exp_blocks_equal_the_cpu_codec_and_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t R = L.R, n2 = 2 * R / 2; /* bf16 elements of a block */
	ibp_slab_pool_t *pool = pool_of(64 * 2 * R, 2 * R + 4096, IBP_CACHE_LRU);
	ibp_kv_stream_t *s = fallback_stream(NULL, R); /* no IBP codec needed */
	const int64_t ids[5] = { 9, 3, 3, 44, 0 }, dst[5] = { 20, 21, 22, 23, 24 };
	int64_t h[5];
	uint64_t bytes[5];
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 5, IBP_KV_EXP, h, bytes));
	OK(ibp_kv_stream_wait(s));
	uint8_t *row2 = xcalloc(2 * R), *ref = NULL, *got = NULL;
	uint64_t bound = 0;
	OK(ibp_exp_encode_bound(IBP_DTYPE_BF16, n2, &bound));
	ref = xcalloc(bound), got = xcalloc(bound);
	ibp_exp_opts_t eo;
	ibp_exp_opts_default(&eo);
	eo.nthreads = 1;
	eo.checksum = 0; /* in-memory blocks carry none */
	for (int b = 0; b < 5; b++) {
		memcpy(row2, L.kv + (uint64_t)ids[b] * R, R);
		memcpy(row2 + R, L.kv + (NB + (uint64_t)ids[b]) * R, R);
		uint64_t rs = 0, len = 0;
		OK(ibp_exp_encode(row2, IBP_DTYPE_BF16, n2, &eo, ref, bound, &rs));
		OK(ibp_slab_pool_get(pool, h[b], got, bound, &len));
		cr_assert(len == rs && len == bytes[b] && !memcmp(got, ref, len), "EXP block %d: %llu bytes, the CPU codec's %llu",
			  b, (unsigned long long)len, (unsigned long long)rs);
		cr_assert_lt(len, 2 * R, "the sample K/V compresses by exponent");
	}
	uint8_t *kv = xcalloc(2 * NB * R);
	ibp_slab_pool_t *pools[5] = { pool, pool, pool, pool, pool };
	const uint8_t kinds[5] = { IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP };
	OK(ibp_kv_decode_cuda(s, pools, h, kinds, 5, kv, NB, dst));
	OK(ibp_kv_stream_wait(s));
	for (int k = 0; k < 5; k++)
		assert_block(&L, kv, dst[k], ids[k]);
	/* A header of another length: refused before anything runs. */
	void *p = NULL;
	uint64_t len = 0;
	OK(ibp_slab_pool_pin(pool, h[1], &p, &len));
	uint8_t save[64];
	memcpy(save, p, 64);
	memset(kv, 0, 2 * NB * R);
	((uint8_t *)p)[0] ^= 0xFF;
	cr_assert_eq(ibp_kv_decode_cuda(s, pools, h, kinds, 5, kv, NB, dst), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "block 1"), "%s", ibp_last_error());
	memcpy(p, save, 64);
	/* A valid exponent block of other rows (fewer elements): refused. */
	{
		uint64_t sz = 0;
		int64_t hs[1];
		OK(ibp_exp_encode(L.kv, IBP_DTYPE_BF16, n2 - 64, &eo, ref, bound, &sz));
		OK(ibp_slab_pool_put(pool, ref, sz, hs));
		cr_assert_eq(ibp_kv_decode_cuda(s, pools, hs, kinds, 1, kv, NB, dst), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "expected"), "%s", ibp_last_error());
		OK(ibp_slab_pool_remove(pool, hs[0]));
	}
	/* A damaged body: the header passes, the decode fails; the wait reports
	 * all EXP rows of the call (zeroed). */
	((uint8_t *)p)[len - 1] ^= 0x5A;
	OK(ibp_slab_pool_unpin(pool, p));
	memset(kv, 0x33, 2 * NB * R);
	OK(ibp_kv_decode_cuda(s, pools, h, kinds, 5, kv, NB, dst));
	ibp_status_t st = ibp_kv_stream_wait(s);
	cr_assert_eq(st, IBP_ERR_CORRUPT, "%s", ibp_last_error());
	cr_assert(strstr(ibp_last_error(), "10 K/V rows"), "%s", ibp_last_error());
	for (int k = 0; k < 5; k++)
		for (uint64_t j = 0; j < R; j++)
			cr_assert(kv[(uint64_t)dst[k] * R + j] == 0 && kv[(NB + (uint64_t)dst[k]) * R + j] == 0,
				  "block %d not zeroed", k);
	cr_assert_eq(kv[0], 0x33, "other blocks untouched");
	/* A stream of another dtype cannot take EXP blocks. */
	ibp_kv_stream_t *u8 = NULL;
	cr_assert_eq(ibp_kv_stream_create(NULL, R, IBP_DTYPE_U8, IBP_CUDA_HOST_FALLBACK, NULL, &u8), IBP_ERR_NO_DEVICE);
	int64_t h1[1];
	uint64_t b1[1];
	cr_assert_eq(ibp_kv_encode_cuda(u8, pool, L.kv, NB, ids, 1, IBP_KV_EXP, h1, b1), IBP_ERR_INVALID_ARG);
	ibp_kv_stream_free(u8);
	free(kv), free(row2), free(ref), free(got);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

/* The host decodes EXP blocks straight into their K and V rows when a row
 * is a multiple of 64 elements (above: 1536), else through one block's
 * rows: rows of 1535 and 64 elements (the layer's bytes seen as shorter
 * rows) round-trip through both kinds of stream, bit for bit. */
Test(kv_cuda, exp_blocks_of_any_row_length, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t lens[2] = { L.R - 2, 128 };
	for (int i = 0; i < 2; i++)
		for (int host = 0; host < 2; host++) {
			const uint64_t R = lens[i];
			ibp_slab_pool_t *pool = pool_of(64 * 2 * R + (1 << 20), 2 * R + 4096, IBP_CACHE_LRU);
			ibp_kv_stream_t *s = NULL;
			if (host)
				OK(ibp_kv_stream_create(NULL, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
			else
				s = fallback_stream(NULL, R);
			const int64_t ids[4] = { 7, 0, 31, 47 }, dst[4] = { 3, 40, 0, 12 };
			int64_t h[4];
			uint64_t bytes[4];
			OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 4, IBP_KV_EXP, h, bytes));
			OK(ibp_kv_stream_wait(s));
			uint8_t *kv = xcalloc(2 * NB * R);
			memset(kv, 0x77, 2 * NB * R);
			ibp_slab_pool_t *pools[4] = { pool, pool, pool, pool };
			const uint8_t kinds[4] = { IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP };
			OK(ibp_kv_decode_cuda(s, pools, h, kinds, 4, kv, NB, dst));
			OK(ibp_kv_stream_wait(s));
			for (int k = 0; k < 4; k++) {
				cr_assert(!memcmp(kv + (uint64_t)dst[k] * R, L.kv + (uint64_t)ids[k] * R, R) &&
					  !memcmp(kv + (NB + (uint64_t)dst[k]) * R, L.kv + (NB + (uint64_t)ids[k]) * R, R),
					  "rows of %llu bytes (%s stream): block %d", (unsigned long long)R,
					  host ? "host" : "fallback", k);
			}
			cr_assert_eq(kv[(uint64_t)1 * R], 0x77, "other rows untouched");
			free(kv);
			ibp_kv_stream_free(s);
			ibp_slab_pool_free(pool);
		}
	free_layer(&L);
}

Test(kv_cuda, full_pool_keeps_nothing, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t R = L.R;
	/* A static pool with room for about two raw blocks: five do not fit. */
	ibp_slab_pool_t *pool = pool_of(5 * R, 2 * R, IBP_CACHE_STATIC);
	ibp_kv_stream_t *s = fallback_stream(L.codec, R);
	const int64_t ids[5] = { 0, 1, 2, 3, 4 };
	int64_t h[5];
	uint64_t bytes[5];
	cr_assert_eq(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 5, IBP_KV_RAW, h, bytes), IBP_ERR_NOMEM);
	for (int b = 0; b < 5; b++)
		cr_assert_eq(h[b], -1);
	ibp_slab_pool_stats_t st;
	OK(ibp_slab_pool_stats(pool, &st, 0));
	cr_assert_eq(st.blocks, 0, "all or nothing: %llu blocks kept", (unsigned long long)st.blocks);
	cr_assert_eq(st.pinned_blocks, 0);
	OK(ibp_kv_stream_wait(s));
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

/* The CPU path (IBP_KV_HOST) decodes a load's EXP blocks on every core:
 * 48 blocks round-trip into permuted slots, and a damaged block late in
 * the call (another thread's range) still zeroes all the call's EXP rows
 * and is reported. */
Test(kv_cuda, host_exp_load_on_every_core, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	layer_t L = load_layer();
	const uint64_t R = 1536; /* 768 bf16, a multiple of 64: the split decode */
	ibp_slab_pool_t *pool = pool_of(NB * 2 * R * 4 + (1 << 20), 2 * R + 4096, IBP_CACHE_LRU);
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(NULL, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
	int64_t ids[NB], dst[NB], h[NB];
	uint64_t bytes[NB];
	uint8_t kinds[NB];
	ibp_slab_pool_t *pools[NB];
	for (int b = 0; b < NB; b++)
		ids[b] = b, dst[b] = (b * 7 + 3) % NB, kinds[b] = IBP_KV_EXP, pools[b] = pool;
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, NB, IBP_KV_EXP, h, bytes));
	OK(ibp_kv_stream_wait(s));
	uint8_t *kv = xcalloc(2 * NB * R);
	OK(ibp_kv_decode_cuda(s, pools, h, kinds, NB, kv, NB, dst));
	OK(ibp_kv_stream_wait(s));
	for (int b = 0; b < NB; b++)
		cr_assert(!memcmp(kv + (uint64_t)dst[b] * R, L.kv + (uint64_t)b * R, R) &&
			  !memcmp(kv + (NB + (uint64_t)dst[b]) * R, L.kv + (NB + (uint64_t)b) * R, R), "block %d", b);
	void *p = NULL;
	uint64_t len = 0;
	OK(ibp_slab_pool_pin(pool, h[NB - 3], &p, &len));
	ibp_exp_info_t info;
	OK(ibp_exp_block_info(p, len, &info));
	cr_assert(!info.raw, "a coded block, so a damaged body is caught");
	((uint8_t *)p)[len - 1] ^= 0x5A;
	OK(ibp_slab_pool_unpin(pool, p));
	memset(kv, 0x33, 2 * NB * R);
	OK(ibp_kv_decode_cuda(s, pools, h, kinds, NB, kv, NB, dst));
	cr_assert_eq(ibp_kv_stream_wait(s), IBP_ERR_CORRUPT, "%s", ibp_last_error());
	for (uint64_t j = 0; j < 2 * NB * R; j++)
		cr_assert(kv[j] == 0, "byte %llu not zeroed", (unsigned long long)j);
	free(kv);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

/* The host encodes a store in batches of about 4 MiB of rows: with rows of
 * 1 MiB that is 2 blocks a batch, so 5 blocks take 3 batches. Every kind
 * round-trips and equals the CPU codec's bytes (EXP), and a pool that runs
 * out in the last batch keeps none of the earlier batches' blocks. */
Test(kv_cuda, host_store_in_batches, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	const uint64_t R = 1 << 20, nb = 6, nel = 2 * R / 2;
	uint8_t *kv = xcalloc(2 * nb * R);
	tu_rng_t r;
	tu_rng_seed(&r, 9);
	for (uint64_t i = 0; i < nb * R; i++) { /* bf16 of a narrow range of exponents: compresses */
		uint16_t v = (uint16_t)(0x3C00u + (tu_next(&r) & 0x03FFu)) ^ (uint16_t)((tu_next(&r) & 1) << 15);
		memcpy(kv + 2 * i, &v, 2);
	}
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(NULL, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
	const int64_t ids[5] = { 4, 0, 5, 2, 1 }, dst[5] = { 0, 1, 2, 3, 4 };
	const uint8_t kinds_exp[5] = { IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP, IBP_KV_EXP };
	const uint8_t kinds_raw[5] = { IBP_KV_RAW, IBP_KV_RAW, IBP_KV_RAW, IBP_KV_RAW, IBP_KV_RAW };
	uint64_t bound = 0;
	OK(ibp_exp_encode_bound(IBP_DTYPE_BF16, nel, &bound));
	uint8_t *ref = xcalloc(bound), *got = xcalloc(bound), *row2 = xcalloc(2 * R);
	ibp_exp_opts_t eo;
	ibp_exp_opts_default(&eo);
	eo.checksum = 0;
	for (int k = 0; k < 2; k++) {
		const unsigned kind = k ? IBP_KV_RAW : IBP_KV_EXP;
		ibp_slab_pool_t *pool = pool_of(16 * R, 2 * R + 4096, IBP_CACHE_LRU);
		int64_t h[5];
		uint64_t bytes[5];
		OK(ibp_kv_encode_cuda(s, pool, kv, nb, ids, 5, kind, h, bytes));
		OK(ibp_kv_stream_wait(s));
		for (int b = 0; b < 5 && kind == IBP_KV_EXP; b++) {
			memcpy(row2, kv + (uint64_t)ids[b] * R, R);
			memcpy(row2 + R, kv + (nb + (uint64_t)ids[b]) * R, R);
			uint64_t rs = 0, len = 0;
			OK(ibp_exp_encode(row2, IBP_DTYPE_BF16, nel, &eo, ref, bound, &rs));
			OK(ibp_slab_pool_get(pool, h[b], got, bound, &len));
			cr_assert(len == rs && len == bytes[b] && len < 2 * R && !memcmp(got, ref, len), "block %d", b);
		}
		uint8_t *back = xcalloc(2 * nb * R);
		ibp_slab_pool_t *pools[5] = { pool, pool, pool, pool, pool };
		OK(ibp_kv_decode_cuda(s, pools, h, k ? kinds_raw : kinds_exp, 5, back, nb, dst));
		OK(ibp_kv_stream_wait(s));
		for (int b = 0; b < 5; b++)
			cr_assert(!memcmp(back + (uint64_t)dst[b] * R, kv + (uint64_t)ids[b] * R, R) &&
				  !memcmp(back + (nb + (uint64_t)dst[b]) * R, kv + (nb + (uint64_t)ids[b]) * R, R),
				  "kind %u block %d", kind, b);
		free(back);
		ibp_slab_pool_free(pool);
	}
	/* Room for 4 raw blocks: the third batch fails, the first two are undone. */
	ibp_slab_pool_t *small = pool_of(9 * R, 2 * R, IBP_CACHE_STATIC);
	int64_t h[5];
	uint64_t bytes[5];
	cr_assert_eq(ibp_kv_encode_cuda(s, small, kv, nb, ids, 5, IBP_KV_RAW, h, bytes), IBP_ERR_NOMEM);
	ibp_slab_pool_stats_t st;
	OK(ibp_slab_pool_stats(small, &st, 0));
	cr_assert_eq(st.blocks, 0, "all or nothing across batches: %llu blocks kept", (unsigned long long)st.blocks);
	for (int b = 0; b < 5; b++)
		cr_assert_eq(h[b], -1);
	OK(ibp_kv_stream_wait(s));
	ibp_slab_pool_free(small);
	ibp_kv_stream_free(s);
	free(kv), free(ref), free(got), free(row2);
}

/* The host's EXP store runs on every core, each thread encoding a block and
 * copying it into its slot; slots are allocated in block order (handles
 * ascending with the blocks, as a serial store gives them), each block's
 * bytes equal the CPU codec's, and a pool that runs out part way keeps
 * nothing, pins nothing and names the block. */
Test(kv_cuda, host_exp_store_on_every_core, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	const uint64_t R = 64 << 10, nb = 24, n = 20, nel = 2 * R / 2; /* 4 blocks a 256 KiB task: 2 threads */
	uint8_t *kv = xcalloc(2 * nb * R);
	tu_rng_t r;
	tu_rng_seed(&r, 33);
	for (uint64_t i = 0; i < nb * R; i++) {
		uint16_t v = (uint16_t)(0x3C00u + (tu_next(&r) & 0x03FFu)) ^ (uint16_t)((tu_next(&r) & 1) << 15);
		memcpy(kv + 2 * i, &v, 2);
	}
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(NULL, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
	int64_t ids[20], h[20];
	uint64_t bytes[20];
	for (uint64_t b = 0; b < n; b++)
		ids[b] = (int64_t)((b * 7 + 5) % nb);
	ibp_slab_pool_t *pool = pool_of(64 * R, 2 * R + 4096, IBP_CACHE_LRU);
	OK(ibp_kv_encode_cuda(s, pool, kv, nb, ids, n, IBP_KV_EXP, h, bytes));
	cr_assert_eq(pinned_blocks(pool), n, "pinned until the call finishes");
	OK(ibp_kv_stream_wait(s));
	cr_assert_eq(pinned_blocks(pool), 0);
	uint64_t bound = 0, total = 0;
	OK(ibp_exp_encode_bound(IBP_DTYPE_BF16, nel, &bound));
	uint8_t *ref = xcalloc(bound), *got = xcalloc(bound), *row2 = xcalloc(2 * R);
	ibp_exp_opts_t eo;
	ibp_exp_opts_default(&eo);
	eo.checksum = 0;
	for (uint64_t b = 0; b < n; b++) {
		cr_assert_eq(h[b], h[0] + (int64_t)b, "block %llu: handle %lld after %lld", (unsigned long long)b,
			     (long long)h[b], (long long)h[0]);
		memcpy(row2, kv + (uint64_t)ids[b] * R, R);
		memcpy(row2 + R, kv + (nb + (uint64_t)ids[b]) * R, R);
		uint64_t rs = 0, len = 0;
		OK(ibp_exp_encode(row2, IBP_DTYPE_BF16, nel, &eo, ref, bound, &rs));
		OK(ibp_slab_pool_get(pool, h[b], got, bound, &len));
		cr_assert(len == rs && len == bytes[b] && len < 2 * R && !memcmp(got, ref, len), "block %llu",
			  (unsigned long long)b);
		total += len;
	}
	/* a given sigma: the bytes of ibp_exp_encode with that sigma */
	cr_assert_eq(ibp_kv_stream_set_exp_sigma(s, -1.0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_kv_stream_set_exp_sigma(s, 1.0 / 0.0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_kv_stream_set_exp_sigma(NULL, 1.0), IBP_ERR_INVALID_ARG);
	/* (encoded from the rows where they lie: coded and raw blocks) */
	const double sigmas[] = { 0.004, 0.5, 1e30 };
	int seen_raw = 0, seen_coded = 0;
	for (unsigned k = 0; k < 3; k++) {
		OK(ibp_kv_stream_set_exp_sigma(s, sigmas[k]));
		OK(ibp_kv_encode_cuda(s, pool, kv, nb, ids, n, IBP_KV_EXP, h, bytes));
		OK(ibp_kv_stream_wait(s));
		eo.sigma = sigmas[k];
		for (uint64_t b = 0; b < n; b++) {
			memcpy(row2, kv + (uint64_t)ids[b] * R, R);
			memcpy(row2 + R, kv + (nb + (uint64_t)ids[b]) * R, R);
			uint64_t rs = 0, len = 0;
			OK(ibp_exp_encode(row2, IBP_DTYPE_BF16, nel, &eo, ref, bound, &rs));
			OK(ibp_slab_pool_get(pool, h[b], got, bound, &len));
			cr_assert(len == rs && len == bytes[b] && !memcmp(got, ref, len), "sigma %g: block %llu",
				  sigmas[k], (unsigned long long)b);
			ibp_exp_info_t info;
			OK(ibp_exp_block_info(got, len, &info));
			cr_assert(info.raw || info.table_mode == IBP_EXP_TABLE_SIGMA);
			seen_raw |= info.raw, seen_coded |= !info.raw;
		}
	}
	cr_assert(seen_raw && seen_coded, "raw %d, coded %d", seen_raw, seen_coded);
	OK(ibp_kv_stream_set_exp_sigma(s, 0.0));
	ibp_slab_pool_free(pool);
	/* room for about half of them: refused part way, nothing kept */
	ibp_slab_pool_t *small = pool_of(total / 2 + 2 * R + 4096, 2 * R + 4096, IBP_CACHE_STATIC);
	cr_assert_eq(ibp_kv_encode_cuda(s, small, kv, nb, ids, n, IBP_KV_EXP, h, bytes), IBP_ERR_NOMEM);
	cr_assert(strstr(ibp_last_error(), "exponent block"), "%s", ibp_last_error());
	ibp_slab_pool_stats_t st;
	OK(ibp_slab_pool_stats(small, &st, 0));
	cr_assert(st.blocks == 0 && st.pinned_blocks == 0 && st.allocs > 0, "%llu blocks kept, %llu pinned",
		  (unsigned long long)st.blocks, (unsigned long long)st.pinned_blocks);
	for (uint64_t b = 0; b < n; b++)
		cr_assert_eq(h[b], -1);
	OK(ibp_kv_stream_wait(s));
	ibp_slab_pool_free(small);
	ibp_kv_stream_free(s);
	free(kv), free(ref), free(got), free(row2);
}

/* Many small blocks on every core, several times: threads whose block is
 * not yet its turn encode their next one meanwhile (two held a thread);
 * every block's bytes and handle are those of a serial store. */
Test(kv_cuda, host_exp_store_many_small_blocks, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	const uint64_t R = 2048, nb = 600, n = 512, nel = 2 * R / 2;
	uint8_t *kv = xcalloc(2 * nb * R);
	tu_rng_t r;
	tu_rng_seed(&r, 34);
	for (uint64_t i = 0; i < nb * R; i++) {
		/* exponents spread per block: blocks of different sizes and times */
		uint16_t v = (uint16_t)((0x3C00u - ((i / R) % 7) * 0x0400u) + (tu_next(&r) & 0x03FFu));
		memcpy(kv + 2 * i, &v, 2);
	}
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(NULL, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
	int64_t *ids = xcalloc(n * sizeof(int64_t)), *h = xcalloc(n * sizeof(int64_t));
	uint64_t *bytes = xcalloc(n * sizeof(uint64_t)), bound = 0;
	OK(ibp_exp_encode_bound(IBP_DTYPE_BF16, nel, &bound));
	uint8_t *ref = xcalloc(bound), *got = xcalloc(bound), *row2 = xcalloc(2 * R);
	ibp_exp_opts_t eo;
	ibp_exp_opts_default(&eo);
	eo.checksum = 0;
	ibp_slab_pool_t *pool = pool_of(2 * n * (2 * R + 4096), 2 * R + 4096, IBP_CACHE_LRU);
	for (int pass = 0; pass < 4; pass++) {
		for (uint64_t b = 0; b < n; b++)
			ids[b] = (int64_t)((b * 13 + (uint64_t)pass * 5) % nb);
		OK(ibp_kv_stream_set_exp_sigma(s, pass & 1 ? 0.05 : 0.0));
		OK(ibp_kv_encode_cuda(s, pool, kv, nb, ids, n, IBP_KV_EXP, h, bytes));
		OK(ibp_kv_stream_wait(s));
		eo.sigma = pass & 1 ? 0.05 : 0.0;
		for (uint64_t b = 0; b < n; b++) {
			cr_assert_eq(h[b], h[0] + (int64_t)b, "pass %d block %llu: handle %lld after %lld", pass,
				     (unsigned long long)b, (long long)h[b], (long long)h[0]);
			memcpy(row2, kv + (uint64_t)ids[b] * R, R);
			memcpy(row2 + R, kv + (nb + (uint64_t)ids[b]) * R, R);
			uint64_t rs = 0, len = 0;
			OK(ibp_exp_encode(row2, IBP_DTYPE_BF16, nel, &eo, ref, bound, &rs));
			OK(ibp_slab_pool_get(pool, h[b], got, bound, &len));
			cr_assert(len == rs && len == bytes[b] && !memcmp(got, ref, len), "pass %d block %llu", pass,
				  (unsigned long long)b);
		}
		for (uint64_t b = 0; b < n; b++)
			OK(ibp_slab_pool_remove(pool, h[b]));
	}
	ibp_slab_pool_free(pool);
	ibp_kv_stream_free(s);
	free(kv), free(ids), free(h), free(bytes), free(ref), free(got), free(row2);
}

Test(kv_cuda, host_flag_runs_on_the_cpu_everywhere, .init = make_tmpdir, .fini = remove_tmpdir)
{
	/* IBP_KV_HOST (the CPU path of KVOffloader): IBP_OK, never on a GPU,
	 * whether or not one exists; the same bytes as the CPU packer. */
	layer_t L = load_layer();
	const uint64_t R = L.R;
	ibp_slab_pool_t *pool = pool_of(64 * 2 * R, 2 * R + 4096, IBP_CACHE_LRU);
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(L.codec, R, IBP_DTYPE_BF16, IBP_KV_HOST, NULL, &s));
	cr_assert(!ibp_kv_stream_on_device(s));
	const int64_t ids[3] = { 2, 40, 2 }, dst[3] = { 0, 1, 2 };
	int64_t h[3];
	uint64_t bytes[3], bo[4];
	OK(ibp_kv_encode_cuda(s, pool, L.kv, NB, ids, 3, IBP_KV_IBP, h, bytes));
	OK(ibp_kv_stream_wait(s));
	uint8_t *ref = cpu_blocks(&L, ids, 3, bo);
	for (int b = 0; b < 3; b++) {
		uint8_t got[2 * 4096 + 64];
		uint64_t len = 0;
		OK(ibp_slab_pool_get(pool, h[b], got, sizeof got, &len));
		cr_assert(len == bo[b + 1] - bo[b] && !memcmp(got, ref + bo[b], len), "block %d", b);
	}
	uint8_t *kv = xcalloc(2 * NB * R);
	ibp_slab_pool_t *pools[3] = { pool, pool, pool };
	OK(ibp_kv_decode_cuda(s, pools, h, NULL, 3, kv, NB, dst));
	OK(ibp_kv_stream_wait(s));
	for (int k = 0; k < 3; k++)
		assert_block(&L, kv, dst[k], ids[k]);
	ibp_kv_stream_t *bad = NULL;
	cr_assert_eq(ibp_kv_stream_create(L.codec, R, IBP_DTYPE_BF16, 8, NULL, &bad), IBP_ERR_INVALID_ARG);
	free(kv), free(ref);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

Test(kv_cuda, gpu_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
	if (!tu_have_gpu())
		cr_skip_test("no CUDA device: the device KV stream is tested through its host fallback only");
	layer_t L = load_layer();
	const uint64_t R = L.R;
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = 64 * 2 * R;
	o.max_block_bytes = 2 * R + 64;
	ibp_slab_pool_t *pool = NULL;
	OK(ibp_slab_pool_create(&o, &pool)); /* pinned */
	ibp_kv_stream_t *s = NULL;
	OK(ibp_kv_stream_create(L.codec, R, IBP_DTYPE_BF16, 0, NULL, &s));
	cr_assert(ibp_kv_stream_on_device(s));
	void *dkv = NULL, *dout = NULL;
	OK(ibp_cuda_malloc(2 * NB * R, &dkv));
	OK(ibp_cuda_malloc(2 * NB * R, &dout));
	OK(ibp_cuda_memcpy(dkv, L.kv, 2 * NB * R, NULL));
	OK(ibp_cuda_memset(dout, 0, 2 * NB * R, NULL));
	const int64_t ids[5] = { 5, 0, 47, 12, 30 }, dst[5] = { 1, 2, 3, 4, 5 };
	int64_t h[5];
	uint64_t bytes[5], bo[6];
	OK(ibp_kv_encode_cuda(s, pool, dkv, NB, ids, 5, IBP_KV_IBP, h, bytes));
	OK(ibp_kv_stream_wait(s));
	uint8_t *ref = cpu_blocks(&L, ids, 5, bo);
	for (int b = 0; b < 5; b++) {
		uint8_t got[2 * 4096 + 64];
		uint64_t len = 0;
		OK(ibp_slab_pool_get(pool, h[b], got, sizeof got, &len));
		cr_assert(len == bo[b + 1] - bo[b] && !memcmp(got, ref + bo[b], len), "block %d: GPU != CPU bytes", b);
	}
	ibp_slab_pool_t *pools[5] = { pool, pool, pool, pool, pool };
	OK(ibp_kv_decode_cuda(s, pools, h, NULL, 5, dout, NB, dst));
	OK(ibp_kv_stream_wait(s));
	uint8_t *kv = xcalloc(2 * NB * R);
	OK(ibp_cuda_memcpy(kv, dout, 2 * NB * R, NULL));
	OK(ibp_cuda_sync(NULL));
	for (int k = 0; k < 5; k++)
		assert_block(&L, kv, dst[k], ids[k]);
	free(kv), free(ref);
	ibp_cuda_free(dkv), ibp_cuda_free(dout);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	free_layer(&L);
}

/* The host store's slot copy (util/copy.h): every destination and source
 * alignment, sizes around the streaming threshold, equal bytes and nothing
 * written past either end. */
Test(kv_cuda, stream_copy_every_alignment)
{
	const uint64_t sizes[] = { 0, 1, 63, IBPI_COPY_STREAM_MIN - 1, IBPI_COPY_STREAM_MIN, IBPI_COPY_STREAM_MIN + 1,
				   IBPI_COPY_STREAM_MIN + 47, 24576 + 13 };
	tu_rng_t r;
	tu_rng_seed(&r, 5);
	uint8_t *src = xcalloc(32768 + 128), *dst = xcalloc(32768 + 256);
	for (uint64_t i = 0; i < 32768 + 128; i++)
		src[i] = (uint8_t)tu_next(&r);
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (unsigned da = 0; da < 64; da += 3)
			for (unsigned sa = 0; sa < 64; sa += 7) {
				const uint64_t n = sizes[k];
				memset(dst, 0xC3, 32768 + 256);
				ibpi_copy_stream(dst + 64 + da, src + sa, n);
				cr_assert(!memcmp(dst + 64 + da, src + sa, n), "n %llu, dst +%u, src +%u",
					  (unsigned long long)n, da, sa);
				for (uint64_t i = 0; i < 64 + da; i++)
					cr_assert_eq(dst[i], 0xC3, "wrote before the destination");
				for (uint64_t i = 64 + da + n; i < 32768 + 256; i++)
					cr_assert_eq(dst[i], 0xC3, "wrote past the destination (n %llu)", (unsigned long long)n);
			}
	free(src), free(dst);
}
