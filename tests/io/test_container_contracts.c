/* test_container_contracts.c - documented behaviours of ibp/container.h,
 * ibp/codec.h and ibp/status.h that no other suite pins down: argument and
 * range errors of the row/block accessors and decoders, "on failure `path`
 * is left as it was", unknown status codes, per-thread error details, and
 * the exp/fp8 codecs on unaligned buffers. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ibp.h"
#include "testutil.h"
#include "fixtures.h"

static uint8_t *f32_values(uint64_t n, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *d = tu_xcalloc(4 * n + 8);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)((tu_uniform(&r) - 0.5) * 3.0);
		memcpy(d + 4 * i, &f, 4);
	}
	return d;
}

/* ibp_container_row / _block / decode_row / decode_block: OUT_OF_RANGE
 * past the end, INVALID_ARG or UNSUPPORTED for the other kind of codec. */
Test(contracts, row_and_block_ranges, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t rows = 30, cols = 16, shape[2] = { rows, cols };
	uint8_t *d = f32_values(rows * cols, 3);
	cr_assert_eq(ibp_pack(tmpdir_path("i.ibp"), d, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK, "%s",
		     ibp_last_error());
	cr_assert_eq(ibp_pack_exp(tmpdir_path("e.ibp"), d, IBP_DTYPE_F32, 2, shape, NULL, 8), IBP_OK, "%s",
		     ibp_last_error());
	ibp_container_t *ci = NULL, *ce = NULL;
	cr_assert_eq(ibp_container_open(tmpdir_path("i.ibp"), 0, &ci), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_open(tmpdir_path("e.ibp"), 0, &ce), IBP_OK, "%s", ibp_last_error());
	const uint8_t *src = NULL;
	uint64_t len = 0;
	uint8_t row[64], *blk = tu_xcalloc(8 * 64);

	/* IBP: rows */
	cr_assert_eq(ibp_container_row(ci, rows - 1, &src, &len), IBP_OK);
	cr_assert_not_null(src);
	cr_assert_eq(ibp_container_row(ci, rows, &src, &len), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_row(ci, UINT64_MAX, &src, &len), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_decode_row(ci, rows - 1, row), IBP_OK, "%s", ibp_last_error());
	cr_assert_arr_eq(row, d + (rows - 1) * 64, 64);
	cr_assert_eq(ibp_container_decode_row(ci, rows, row), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_decode_row(ci, UINT64_MAX, row), IBP_ERR_OUT_OF_RANGE);
	/* IBP: no blocks */
	cr_assert_eq(ibp_container_block(ci, 0, &src, &len), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_decode_block(ci, 0, blk, 1), IBP_ERR_INVALID_ARG);

	/* exp: 4 blocks of 8, 8, 8, 6 rows */
	cr_assert_eq(ibp_container_nblocks(ce), 4);
	cr_assert_eq(ibp_container_block(ce, 3, &src, &len), IBP_OK);
	cr_assert_gt(len, 0);
	/* the blocks tile the payload, at the recorded offsets */
	uint64_t plen = 0, sum = 0;
	const uint8_t *pl = ibp_container_payload(ce, &plen);
	const uint64_t *bo = ibp_container_block_offsets(ce);
	for (uint64_t b = 0; b < 4; b++) {
		cr_assert_eq(ibp_container_block(ce, b, &src, &len), IBP_OK);
		if (bo) {
			cr_assert_eq(src, pl + bo[b], "block %llu", (unsigned long long)b);
			cr_assert_eq(len, bo[b + 1] - bo[b], "block %llu", (unsigned long long)b);
		}
		sum += len;
	}
	cr_assert_leq(sum, plen);
	cr_assert_gt(sum + 128 * 4, plen, "the blocks leave more than their alignment unused");
	cr_assert_eq(ibp_container_block(ce, 4, &src, &len), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_block(ce, UINT64_MAX, &src, &len), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_decode_block(ce, 3, blk, 1), IBP_OK, "%s", ibp_last_error());
	cr_assert_arr_eq(blk, d + 24 * 64, 6 * 64);
	cr_assert_eq(ibp_container_decode_block(ce, 4, blk, 1), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_decode_row(ce, rows - 1, row), IBP_OK, "%s", ibp_last_error());
	cr_assert_arr_eq(row, d + (rows - 1) * 64, 64);
	cr_assert_eq(ibp_container_decode_row(ce, rows, row), IBP_ERR_OUT_OF_RANGE);
	/* exp: rows are not encoded one by one */
	cr_assert_eq(ibp_container_row(ce, 0, &src, &len), IBP_ERR_UNSUPPORTED);
	ibp_container_close(ci);
	ibp_container_close(ce);
	free(blk);
	free(d);
}

/* ibp_decode_row: a cluster id past the codec's and reserved flag bits are
 * refused (CORRUPT: they come from files), the encoder's row decodes. */
Test(contracts, decode_row_refuses, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 64, R = 32;
	tu_rng_t r;
	tu_rng_seed(&r, 8);
	uint8_t *rows = tu_xcalloc(n * R);
	tu_gen_rows(&r, TU_F32_SMOOTH, rows, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	ibp_codec_t *c = NULL;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK, "%s", ibp_last_error());
	uint8_t enc[64], out[32];
	uint64_t len;
	uint8_t fl;
	cr_assert_eq(ibp_encode_row(c, rows, 0, enc, sizeof(enc), &len, &fl), IBP_OK);
	cr_assert_eq(ibp_decode_row(c, enc, len, fl, 0, out), IBP_OK, "%s", ibp_last_error());
	cr_assert_arr_eq(out, rows, R);
	unsigned k = ibp_codec_nclusters(c);
	cr_assert_eq(ibp_decode_row(c, enc, len, fl, k, out), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, enc, len, (uint8_t)(fl | 4), 0, out), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, enc, R - 1, 0, 0, out), IBP_ERR_CORRUPT); /* raw, one byte short */
	ibp_codec_free(c);
	free(rows);
}

/* "On failure `path` is left as it was": a writer refusing its arguments
 * or failing to write keeps the old file byte for byte, and leaves no
 * temporary file beside it. */
Test(contracts, failed_write_leaves_path, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t shape[2] = { 10, 4 }, bad[2] = { 10, 5 };
	uint8_t *d = f32_values(40, 4);
	const char *p = tmpdir_path("keep.ibp");
	FILE *f = fopen(p, "wb");
	cr_assert_not_null(f);
	fputs("the old contents", f);
	fclose(f);
	/* exp with a block size that is no whole number of rows */
	cr_assert_neq(ibp_container_write_exp(p, IBP_DTYPE_F32, 2, shape, 3, IBP_EXP_TABLE_SIGMA, d, NULL), IBP_OK);
	/* IBP codec whose row size disagrees with the shape */
	tu_rng_t r;
	tu_rng_seed(&r, 1);
	ibp_codec_t *c = NULL;
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	cr_assert_eq(ibp_codec_train(d, 10, 16, &o, &c), IBP_OK);
	cr_assert_neq(ibp_pack_with_codec(p, c, d, IBP_DTYPE_F32, 2, bad, IBP_LAYOUT_PACKED, 1), IBP_OK);
	ibp_codec_free(c);
	cr_assert_neq(ibp_pack_exp(p, d, IBP_DTYPE_U8, 2, shape, NULL, 0), IBP_OK);
	char buf[64] = { 0 };
	f = fopen(p, "rb");
	cr_assert_not_null(f);
	size_t got = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	cr_assert_eq(got, strlen("the old contents"));
	cr_assert_str_eq(buf, "the old contents");
	/* nothing else in the directory */
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", tmpdir);
	cr_assert_eq(system(cmd), 0, "a temporary file was left beside the target");
	/* an unwritable directory: IBP_ERR_IO, nothing created */
	cr_assert_eq(ibp_pack_exp(tmpdir_path("nodir/x.ibp"), d, IBP_DTYPE_F32, 2, shape, NULL, 0), IBP_ERR_IO);
	free(d);
}

Test(contracts, status_strings)
{
	for (int s = IBP_OK; s <= IBP_ERR_INTERNAL; s++) {
		const char *t = ibp_status_string((ibp_status_t)s);
		cr_assert_not_null(t);
		cr_assert_gt(strlen(t), 0);
		for (int u = IBP_OK; u < s; u++)
			cr_assert_str_neq(t, ibp_status_string((ibp_status_t)u), "codes %d and %d share a name", u, s);
	}
	const int unknown[] = { -1, IBP_ERR_INTERNAL + 1, 1000, 0x7fffffff };
	for (size_t i = 0; i < 4; i++) {
		const char *t = ibp_status_string((ibp_status_t)unknown[i]);
		cr_assert_not_null(t, "code %d", unknown[i]);
		cr_assert_gt(strlen(t), 0);
		for (int u = IBP_OK; u <= IBP_ERR_INTERNAL; u++)
			cr_assert_str_neq(t, ibp_status_string((ibp_status_t)u), "unknown %d named as %d", unknown[i], u);
	}
}

typedef struct err_arg {
	int which;
	char seen[256];
	int ok;
} err_arg_t;

static pthread_barrier_t barrier;

static void *err_main(void *p)
{
	err_arg_t *a = p;
	ibp_clear_error();
	a->ok = ibp_last_error()[0] == '\0';
	ibp_container_t *c = NULL;
	/* each thread fails a different way */
	ibp_status_t st = a->which ? ibp_container_open("/nonexistent/thread1.ibp", 0, &c)
				   : ibp_container_open(NULL, 0x100, &c);
	a->ok &= st != IBP_OK;
	pthread_barrier_wait(&barrier); /* both have failed before either reads */
	snprintf(a->seen, sizeof(a->seen), "%s", ibp_last_error());
	pthread_barrier_wait(&barrier);
	ibp_clear_error();
	a->ok &= ibp_last_error()[0] == '\0';
	return NULL;
}

/* Error details are per thread: two threads failing at once each read
 * their own, and clearing one leaves the other's. */
Test(contracts, error_detail_per_thread)
{
	ibp_clear_error();
	cr_assert_str_eq(ibp_last_error(), "");
	cr_assert_eq(ibp_container_open("/nonexistent/main.ibp", 0, &(ibp_container_t *){ NULL }), IBP_ERR_IO);
	char mine[256];
	snprintf(mine, sizeof(mine), "%s", ibp_last_error());
	cr_assert(strstr(mine, "main.ibp") != NULL, "%s", mine);
	pthread_barrier_init(&barrier, NULL, 2);
	err_arg_t a[2] = { { 0, "", 0 }, { 1, "", 0 } };
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, err_main, &a[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&barrier);
	cr_assert(a[0].ok && a[1].ok);
	cr_assert(strstr(a[1].seen, "thread1.ibp") != NULL, "thread 1 read: %s", a[1].seen);
	cr_assert(strstr(a[0].seen, "thread1.ibp") == NULL && a[0].seen[0], "thread 0 read: %s", a[0].seen);
	cr_assert_str_eq(ibp_last_error(), mine, "the other threads changed this thread's detail");
}

/* The exp and fp8 codecs take element arrays and streams at any address:
 * the same bytes encode and decode alike at every misalignment. */
Test(contracts, value_codecs_unaligned)
{
	const uint64_t n = 1000;
	uint8_t *ref = f32_values(n, 9);
	for (int codec = 0; codec < 2; codec++) {
		uint64_t cap = 0;
		ibp_fp8_opts_t fo;
		ibp_fp8_opts_default(&fo);
		fo.block = 32;
		ibp_exp_opts_t eo;
		ibp_exp_opts_default(&eo);
		eo.nthreads = 1;
		if (codec)
			cr_assert_eq(ibp_fp8_encoded_size(&fo, n, &cap), IBP_OK);
		else
			cr_assert_eq(ibp_exp_encode_bound(IBP_DTYPE_F32, n, &cap), IBP_OK);
		uint8_t *enc0 = tu_xcalloc(cap), *out0 = tu_xcalloc(4 * n);
		uint64_t len0 = 0;
		ibp_status_t st = codec ? ibp_fp8_encode(ref, IBP_DTYPE_F32, n, &fo, enc0, cap, &len0)
					: ibp_exp_encode(ref, IBP_DTYPE_F32, n, &eo, enc0, cap, &len0);
		cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
		st = codec ? ibp_fp8_decode(enc0, len0, IBP_DTYPE_F32, n, out0, 1)
			   : ibp_exp_decode(enc0, len0, IBP_DTYPE_F32, n, out0, 1);
		cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
		if (!codec)
			cr_assert_arr_eq(out0, ref, 4 * n, "exp is lossless");
		for (unsigned mis = 1; mis < 8; mis++) {
			uint8_t *in = tu_xcalloc(4 * n + 8), *enc = tu_xcalloc(cap + 8), *out = tu_xcalloc(4 * n + 8);
			memcpy(in + mis, ref, 4 * n);
			uint64_t len = 0;
			st = codec ? ibp_fp8_encode(in + mis, IBP_DTYPE_F32, n, &fo, enc + mis, cap, &len)
				   : ibp_exp_encode(in + mis, IBP_DTYPE_F32, n, &eo, enc + mis, cap, &len);
			cr_assert_eq(st, IBP_OK, "codec %d, offset %u: %s", codec, mis, ibp_last_error());
			cr_assert_eq(len, len0);
			cr_assert_arr_eq(enc + mis, enc0, len0, "codec %d, offset %u: other bytes", codec, mis);
			st = codec ? ibp_fp8_decode(enc + mis, len, IBP_DTYPE_F32, n, out + mis, 1)
				   : ibp_exp_decode(enc + mis, len, IBP_DTYPE_F32, n, out + mis, 1);
			cr_assert_eq(st, IBP_OK, "codec %d, offset %u: %s", codec, mis, ibp_last_error());
			cr_assert_arr_eq(out + mis, out0, 4 * n, "codec %d, offset %u: other values", codec, mis);
			free(in);
			free(enc);
			free(out);
		}
		free(enc0);
		free(out0);
	}
	free(ref);
}

/* An fp8 stream header with unknown flag bits or a block size outside
 * 2^4..2^12 is refused (ibp_fp8_stream_info and ibp_fp8_decode). */
/* Containers keep their section checksums: their exp blocks and FP8
 * streams carry none and are written in format version 1, so files stay
 * byte-identical to the ones libibp wrote before block checksums existed
 * (and readable by it). */
Test(contracts, value_blocks_are_version_1_without_checksums, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t rows = 30, cols = 16, shape[2] = { rows, cols };
	uint8_t *d = f32_values(rows * cols, 5);
	cr_assert_eq(ibp_pack_exp(tmpdir_path("e.ibp"), d, IBP_DTYPE_F32, 2, shape, NULL, 8), IBP_OK, "%s",
		     ibp_last_error());
	cr_assert_eq(ibp_pack_fp8(tmpdir_path("f.ibp"), d, IBP_DTYPE_F32, 2, shape, NULL, 8), IBP_OK, "%s",
		     ibp_last_error());
	const char *files[2] = { tmpdir_path("e.ibp"), tmpdir_path("f.ibp") };
	for (int k = 0; k < 2; k++) {
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(files[k], 0, &c), IBP_OK, "%s", ibp_last_error());
		for (uint64_t b = 0; b < 4; b++) {
			const uint8_t *src = NULL;
			uint64_t len = 0;
			cr_assert_eq(ibp_container_block(c, b, &src, &len), IBP_OK);
			cr_assert_eq(src[4], 1, "%s block %llu: version %u", k ? "fp8" : "exp", (unsigned long long)b, src[4]);
			for (int i = 48; i < 64; i++)
				cr_assert_eq(src[i], 0, "%s block %llu: byte %d", k ? "fp8" : "exp", (unsigned long long)b, i);
			cr_assert_eq(src[6] & (k ? 4 : 0), 0, "fp8: no checksum flag");
		}
		uint8_t *out = tu_xcalloc(rows * cols * 4);
		cr_assert_eq(ibp_container_decode_block(c, 0, out, 1), IBP_OK, "%s", ibp_last_error());
		free(out);
		ibp_container_close(c);
	}
	free(d);
}

Test(contracts, fp8_header_fields)
{
	const uint64_t n = 200;
	uint8_t *d = f32_values(n, 12);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.block = 32;
	o.checksum = 0; /* the header fields' own checks (0x04 is then a claimed checksum that fails) */
	uint64_t cap = 0, len = 0;
	cr_assert_eq(ibp_fp8_encoded_size(&o, n, &cap), IBP_OK);
	uint8_t *s = tu_xcalloc(cap), *g = tu_xcalloc(cap);
	float *out = tu_xcalloc(4 * n);
	cr_assert_eq(ibp_fp8_encode(d, IBP_DTYPE_F32, n, &o, s, cap, &len), IBP_OK, "%s", ibp_last_error());
	ibp_fp8_info_t info;
	cr_assert_eq(ibp_fp8_stream_info(s, len, &info), IBP_OK);
	cr_assert_eq(info.block, 32);
	cr_assert_eq(ibp_fp8_decode(s, len, IBP_DTYPE_F32, n, out, 1), IBP_OK);
	/* byte 6: flags (Hadamard 1, adaptive 2, checksum 4); byte 7: log2 of the block */
	const struct { int at; uint8_t v; } bad[] = { { 6, 0x08 }, { 6, 0x80 }, { 7, 3 }, { 7, 0 }, { 7, 13 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(g, s, len);
		g[bad[i].at] = bad[i].at == 6 ? (uint8_t)(g[6] | bad[i].v) : bad[i].v;
		cr_assert_eq(ibp_fp8_stream_info(g, len, &info), IBP_ERR_CORRUPT, "byte %d = 0x%02x", bad[i].at, g[bad[i].at]);
		cr_assert_eq(ibp_fp8_decode(g, len, IBP_DTYPE_F32, n, out, 1), IBP_ERR_CORRUPT, "byte %d = 0x%02x",
			     bad[i].at, g[bad[i].at]);
	}
	/* the checksum flag on a stream without a checksum: the check fails */
	memcpy(g, s, len);
	g[6] |= 0x04;
	cr_assert_eq(ibp_fp8_decode(g, len, IBP_DTYPE_F32, n, out, 1), IBP_ERR_CHECKSUM);
	/* 8 elements in blocks of 16 are 85 bytes; read with blocks of 8 they
	 * would need only 77: the size alone does not refuse log2 3 */
	o.block = 16;
	cr_assert_eq(ibp_fp8_encode(d, IBP_DTYPE_F32, 8, &o, s, cap, &len), IBP_OK, "%s", ibp_last_error());
	memcpy(g, s, len);
	g[7] = 3;
	cr_assert_eq(ibp_fp8_stream_info(g, len, &info), IBP_ERR_CORRUPT, "a block of 8 elements accepted");
	cr_assert_eq(ibp_fp8_decode(g, len, IBP_DTYPE_F32, 8, out, 1), IBP_ERR_CORRUPT);
	free(out);
	free(g);
	free(s);
	free(d);
}
