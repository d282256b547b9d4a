/* test_verified_reads.c - the read guarantee of docs/FORMAT.md 2.8: for
 * every single-byte change and every truncation of a container, of every
 * codec (ibp, exp, fp8) and both IBP layouts, a read either fails as
 * corrupt (IBP_ERR_CORRUPT, or IBP_ERR_CHECKSUM for a checksum that does
 * not match) or returns the original bytes. Never wrong data with IBP_OK.
 * Also: the checks happen at open by default, IBP_OPEN_TRUSTED skips the
 * payload ones, and files opened from disk (read and mapped) behave the
 * same as images in memory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fixtures.h"

static int is_corrupt(ibp_status_t st) { return st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM; }

/* A small container and what every read of it must return. */
typedef struct img {
	const char *what;
	uint8_t *file;
	uint64_t size;
	uint8_t *expect; /* nrows * R decoded bytes */
	uint64_t n, R;
} img_t;

/* Reads every row through every read path of an open container: row by
 * row, a store gather in reverse order, decode_all (the store owns c and
 * closes it). Returns IBP_OK with out == expect, or the first failure,
 * which must be a corruption status. */
static ibp_status_t read_all(ibp_container_t *c, const img_t *m, const char *ctx)
{
	uint8_t *out = xcalloc((size_t)(m->n * m->R + 1));
	ibp_status_t st = IBP_OK;
	cr_assert_eq(ibp_container_nrows(c), m->n, "%s: %s", m->what, ctx);
	cr_assert_eq(ibp_container_row_bytes(c), m->R, "%s: %s", m->what, ctx);
	for (uint64_t i = 0; st == IBP_OK && i < m->n; i++)
		st = ibp_container_decode_row(c, i, out + i * m->R);
	if (st == IBP_OK)
		cr_assert(memcmp(out, m->expect, (size_t)(m->n * m->R)) == 0,
			  "%s: %s: decode_row gave wrong data with IBP_OK", m->what, ctx);
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_from_container(c, &s), IBP_OK);
	if (st == IBP_OK) {
		int64_t *ids = xcalloc((size_t)(m->n + 1) * sizeof(int64_t));
		for (uint64_t i = 0; i < m->n; i++)
			ids[i] = (int64_t)(m->n - 1 - i);
		memset(out, 0xA5, (size_t)(m->n * m->R));
		st = ibp_store_gather(s, ids, m->n, out, 1);
		for (uint64_t i = 0; st == IBP_OK && i < m->n; i++)
			cr_assert(memcmp(out + i * m->R, m->expect + (m->n - 1 - i) * m->R, (size_t)m->R) == 0,
				  "%s: %s: gather gave wrong data with IBP_OK", m->what, ctx);
		free(ids);
	}
	if (st == IBP_OK) {
		memset(out, 0x5A, (size_t)(m->n * m->R));
		st = ibp_store_decode_all(s, out, 2);
		if (st == IBP_OK)
			cr_assert(memcmp(out, m->expect, (size_t)(m->n * m->R)) == 0,
				  "%s: %s: decode_all gave wrong data with IBP_OK", m->what, ctx);
	}
	ibp_store_close(s);
	free(out);
	if (st != IBP_OK)
		cr_assert(is_corrupt(st), "%s: %s: read failed with status %d: %s", m->what, ctx, st,
			  ibp_last_error());
	return st;
}

/* Opens an image (default flags: verified) and reads it all; returns the
 * open or read status. */
static ibp_status_t open_and_read(const uint8_t *p, uint64_t size, const img_t *m, const char *ctx)
{
	ibp_container_t *c = NULL;
	ibp_status_t st = ibp_container_open_memory(p, size, 0, &c);
	if (st != IBP_OK) {
		cr_assert(is_corrupt(st), "%s: %s: open failed with status %d: %s", m->what, ctx, st,
			  ibp_last_error());
		cr_assert_null(c);
		return st;
	}
	return read_all(c, m, ctx);
}

/* Every byte changed three ways, every truncation, one appended byte. */
static void every_flip_and_truncation(const img_t *m)
{
	char ctx[96];
	cr_assert_eq(open_and_read(m->file, m->size, m, "intact"), IBP_OK, "%s: %s", m->what, ibp_last_error());
	uint8_t *g = xcalloc((size_t)m->size + 1);
	static const uint8_t xors[] = { 0x01, 0x80, 0xFF };
	uint64_t accepted = 0;
	for (uint64_t pos = 0; pos < m->size; pos++)
		for (unsigned x = 0; x < sizeof(xors); x++) {
			memcpy(g, m->file, (size_t)m->size);
			g[pos] ^= xors[x];
			snprintf(ctx, sizeof(ctx), "byte %llu ^ 0x%02x", (unsigned long long)pos, xors[x]);
			if (open_and_read(g, m->size, m, ctx) == IBP_OK)
				accepted++;
		}
	/* every byte is checksummed or must be zero: nothing is harmless */
	cr_assert_eq(accepted, 0, "%s: %llu changed images read as intact", m->what,
		     (unsigned long long)accepted);
	for (uint64_t len = 0; len < m->size; len++) {
		snprintf(ctx, sizeof(ctx), "truncated to %llu bytes", (unsigned long long)len);
		cr_assert_neq(open_and_read(m->file, len, m, ctx), IBP_OK, "%s: %s", m->what, ctx);
	}
	memcpy(g, m->file, (size_t)m->size);
	g[m->size] = 0;
	cr_assert_neq(open_and_read(g, m->size + 1, m, "one byte appended"), IBP_OK);
	free(g);
}

static void free_img(img_t *m)
{
	free(m->file);
	free(m->expect);
}

static img_t ibp_img(ibp_layout_t layout, unsigned k)
{
	uint64_t n = 40, R = 12, shape[2] = { n, R };
	ibp_codec_t *codec = make_codec(R, 4, k, 31 + k);
	uint8_t *rows = make_rows(codec, n, 32);
	const char *p = tmpdir_path("v.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, layout, 1), IBP_OK, "%s",
		     ibp_last_error());
	ibp_codec_free(codec);
	img_t m = { layout == IBP_LAYOUT_PACKED ? "ibp packed" : "ibp inplace", NULL, 0, rows, n, R };
	m.file = read_whole_file(p, &m.size);
	return m;
}

Test(verified_reads, ibp_packed_one_cluster, .init = make_tmpdir, .fini = remove_tmpdir)
{
	img_t m = ibp_img(IBP_LAYOUT_PACKED, 1);
	every_flip_and_truncation(&m);
	free_img(&m);
}

Test(verified_reads, ibp_packed_clusters, .init = make_tmpdir, .fini = remove_tmpdir)
{
	img_t m = ibp_img(IBP_LAYOUT_PACKED, 3);
	every_flip_and_truncation(&m);
	free_img(&m);
}

Test(verified_reads, ibp_inplace_clusters, .init = make_tmpdir, .fini = remove_tmpdir)
{
	img_t m = ibp_img(IBP_LAYOUT_INPLACE, 2);
	every_flip_and_truncation(&m);
	free_img(&m);
}

/* A trained codec on sparse 0/1 float rows: Xvals and run-coded tables. */
Test(verified_reads, ibp_trained_xvals, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 48, cols = 40, shape[2] = { n, cols };
	float *v = xcalloc(n * cols * sizeof(float));
	rng_t r = { 5 };
	for (uint64_t i = 0; i < n * cols; i++)
		v[i] = rnd(&r) % 23 == 0 ? 1.0f : 0.0f;
	const char *p = tmpdir_path("x.ibp");
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	cr_assert_eq(ibp_pack(p, v, IBP_DTYPE_F32, 2, shape, &o, IBP_LAYOUT_PACKED), IBP_OK, "%s",
		     ibp_last_error());
	img_t m = { "ibp trained", NULL, 0, (uint8_t *)v, n, cols * 4 };
	m.file = read_whole_file(p, &m.size);
	every_flip_and_truncation(&m);
	free_img(&m);
}

static uint8_t *gauss_bits(ibp_dtype_t dt, uint64_t count, uint64_t seed)
{
	size_t es = ibp_dtype_size(dt);
	uint8_t *p = xcalloc(count * es);
	rng_t r = { seed };
	for (uint64_t i = 0; i < count; i++) {
		/* sum of uniforms: roughly normal, varied exponents */
		double x = 0;
		for (int k = 0; k < 4; k++)
			x += (double)(rnd(&r) % 100000) / 50000.0 - 1.0;
		float f = (float)x;
		uint32_t u;
		memcpy(&u, &f, 4);
		if (es == 4)
			memcpy(p + 4 * i, &u, 4);
		else {
			uint16_t h = (uint16_t)(u >> 16);
			memcpy(p + 2 * i, &h, 2);
		}
	}
	return p;
}

Test(verified_reads, exp_blocks, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 24, cols = 32, shape[2] = { n, cols };
	uint8_t *d = gauss_bits(IBP_DTYPE_BF16, n * cols, 8);
	const char *p = tmpdir_path("e.ibp");
	cr_assert_eq(ibp_pack_exp(p, d, IBP_DTYPE_BF16, 2, shape, NULL, 10), IBP_OK, "%s", ibp_last_error());
	img_t m = { "exp", NULL, 0, d, n, cols * 2 };
	m.file = read_whole_file(p, &m.size);
	every_flip_and_truncation(&m);
	free_img(&m);
}

Test(verified_reads, fp8_streams, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 12, cols = 32, shape[2] = { n, cols };
	uint8_t *d = gauss_bits(IBP_DTYPE_F32, n * cols, 9);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.block = 16;
	o.nthreads = 1;
	const char *p = tmpdir_path("f.ibp");
	cr_assert_eq(ibp_pack_fp8(p, d, IBP_DTYPE_F32, 2, shape, &o, 5), IBP_OK, "%s", ibp_last_error());
	/* lossy: the reference is what the intact file decodes to */
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK, "%s", ibp_last_error());
	uint8_t *ref = xcalloc(n * cols * 4);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(ibp_container_decode_row(c, i, ref + i * cols * 4), IBP_OK);
	ibp_container_close(c);
	free(d);
	img_t m = { "fp8", NULL, 0, ref, n, cols * 4 };
	m.file = read_whole_file(p, &m.size);
	every_flip_and_truncation(&m);
	free_img(&m);
}

/* From disk: a flipped payload byte fails at open, read or mapped, with
 * IBP_ERR_CHECKSUM naming the payload; IBP_OPEN_TRUSTED opens it (the
 * caller vouched for the bytes) and reads stay in bounds. */
Test(verified_reads, payload_checked_at_open, .init = make_tmpdir, .fini = remove_tmpdir)
{
	img_t m = ibp_img(IBP_LAYOUT_PACKED, 2);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(tmpdir_path("v.ibp"), IBP_OPEN_TRUSTED, &c), IBP_OK);
	uint64_t plen = 0;
	const uint8_t *pl = ibp_container_payload(c, &plen);
	uint64_t poff = m.size - plen; /* the payload ends the file */
	(void)pl;
	ibp_container_close(c);
	cr_assert_gt(plen, 4);
	uint8_t *g = xcalloc(m.size);
	memcpy(g, m.file, m.size);
	g[poff + plen / 2] ^= 0x10;
	write_whole_file(tmpdir_path("bad.ibp"), g, m.size);
	const unsigned modes[] = { IBP_OPEN_READ, IBP_OPEN_MMAP };
	for (unsigned i = 0; i < 2; i++) {
		c = NULL;
		cr_assert_eq(ibp_container_open(tmpdir_path("bad.ibp"), modes[i], &c), IBP_ERR_CHECKSUM);
		cr_assert_null(c);
		cr_assert(strstr(ibp_last_error(), "payload") != NULL, "%s", ibp_last_error());
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), modes[i], &s), IBP_ERR_CHECKSUM);
		cr_assert_null(s);
		/* opted out: opens; a read decodes or fails, never leaves the file */
		cr_assert_eq(ibp_container_open(tmpdir_path("bad.ibp"), modes[i] | IBP_OPEN_TRUSTED, &c), IBP_OK);
		uint8_t row[12];
		for (uint64_t r = 0; r < m.n; r++) {
			ibp_status_t st = ibp_container_decode_row(c, r, row);
			cr_assert(st == IBP_OK || st == IBP_ERR_CORRUPT);
		}
		cr_assert_eq(ibp_container_verify(c, 1), IBP_ERR_CHECKSUM);
		ibp_container_close(c);
	}
	/* the intact file opens the same ways */
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(ibp_container_open(tmpdir_path("v.ibp"), modes[i], &c), IBP_OK);
		cr_assert_eq(read_all(c, &m, "intact from disk"), IBP_OK);
	}
	cr_assert_eq(ibp_container_open(tmpdir_path("v.ibp"), 8u, &c), IBP_ERR_INVALID_ARG, "unknown flag");
	free(g);
	free_img(&m);
}
