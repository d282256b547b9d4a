/* test_format12.c - container format 1.2 (docs/FORMAT.md 2): the compact
 * row index, run-coded metadata, small alignment, optional PAYLOAD_SUMS;
 * golden 1.1 files written by the 1.1 writer still decode byte-exactly;
 * structural lies in 1.2 sections (with consistent checksums) are caught
 * by the checks themselves. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ibp.h"
#include "fixtures.h"

static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static const char *src_dir(void)
{
	const char *d = getenv("IBP_SOURCE_DIR");
	return d ? d : IBP_SOURCE_DIR;
}

/* Section `id` of an image: table index, or -1. */
static int find_section(const uint8_t *f, uint32_t id)
{
	uint32_t ns = ld32(f + 124);
	uint64_t toff = ld64(f + 128);
	for (uint32_t i = 0; i < ns; i++)
		if (ld32(f + toff + 32 * i) == id)
			return (int)i;
	return -1;
}

static uint64_t sec_off(const uint8_t *f, int i) { return ld64(f + ld64(f + 128) + 32 * (uint64_t)i + 8); }
static uint64_t sec_len(const uint8_t *f, int i) { return ld64(f + ld64(f + 128) + 32 * (uint64_t)i + 16); }

/* Recomputes every section checksum, the table's and the header's. */
static void refresh(uint8_t *f)
{
	uint32_t ns = ld32(f + 124), hs = ld32(f + 12);
	uint64_t toff = ld64(f + 128);
	for (uint32_t i = 0; i < ns; i++) {
		uint8_t *e = f + toff + 32 * i;
		st64(e + 24, XXH3_64bits(f + ld64(e + 8), ld64(e + 16)));
	}
	st64(f + 136, XXH3_64bits(f + toff, 32 * ns));
	st64(f + hs - 8, XXH3_64bits(f, hs - 8));
}

/* ---- golden 1.1 files ---------------------------------------------------- */

/* tests/golden/v1.1/: written by the 1.1 writer (before 1.2 existed) with
 * `ibp pack`; NAME.expect holds the decoded bytes it produced (the input
 * array for the lossless codecs). They must still open and decode. */
Test(format12, golden_1_1_files_decode)
{
	static const struct {
		const char *name;
		ibp_codec_id_t codec;
		ibp_layout_t layout;
		uint64_t rows, R;
	} g[] = {
		{ "ibp_packed_k2", IBP_CODEC_IBP, IBP_LAYOUT_PACKED, 24, 24 },
		{ "ibp_inplace", IBP_CODEC_IBP, IBP_LAYOUT_INPLACE, 24, 24 },
		{ "exp_bf16", IBP_CODEC_EXP, IBP_LAYOUT_PACKED, 16, 16 },
		{ "fp8_f32", IBP_CODEC_FP8, IBP_LAYOUT_PACKED, 16, 64 },
	};
	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
		char path[512];
		uint64_t esize, fsize;
		snprintf(path, sizeof(path), "%s/tests/golden/v1.1/%s.expect", src_dir(), g[i].name);
		uint8_t *expect = read_whole_file(path, &esize);
		cr_assert_eq(esize, g[i].rows * g[i].R, "%s", path);
		snprintf(path, sizeof(path), "%s/tests/golden/v1.1/%s.ibp", src_dir(), g[i].name);
		uint8_t *file = read_whole_file(path, &fsize);
		cr_assert_eq(ld32(file + 8) & 0xffff, 1, "%s: major", path);
		cr_assert_eq(ld32(file + 8) >> 16, 1, "%s: minor", path);
		const unsigned modes[] = { IBP_OPEN_READ, IBP_OPEN_MMAP, IBP_OPEN_VERIFY };
		for (unsigned mi = 0; mi < 3; mi++) {
			ibp_store_t *s = NULL;
			cr_assert_eq(ibp_store_open(path, modes[mi], &s), IBP_OK, "%s: %s", path, ibp_last_error());
			const ibp_container_t *c = ibp_store_container(s);
			cr_assert_eq(ibp_container_version_minor(c), 1);
			cr_assert_eq(ibp_container_codec_id(c), g[i].codec);
			cr_assert_eq(ibp_container_layout(c), g[i].layout);
			cr_assert_eq(ibp_container_compact_index(c), 0);
			cr_assert_eq(ibp_container_nrows(c), g[i].rows);
			cr_assert_eq(ibp_container_row_bytes(c), g[i].R);
			uint8_t *out = xcalloc(esize);
			cr_assert_eq(ibp_store_decode_all(s, out, 1), IBP_OK, "%s", ibp_last_error());
			cr_assert(memcmp(out, expect, esize) == 0, "%s decodes differently", path);
			memset(out, 0, esize);
			for (uint64_t r = 0; r < g[i].rows; r++)
				cr_assert_eq(ibp_container_decode_row(c, r, out + r * g[i].R), IBP_OK);
			cr_assert(memcmp(out, expect, esize) == 0, "%s decodes differently row by row", path);
			cr_assert_eq(ibp_container_verify(c, 1), IBP_OK);
			free(out);
			ibp_store_close(s);
		}
		/* a 1.1 file has no padding that may differ: flipping it is refused */
		uint8_t *bad = xcalloc(fsize);
		memcpy(bad, file, fsize);
		int pi = find_section(bad, 5);
		cr_assert_geq(pi, 0);
		uint64_t gap = sec_off(bad, pi) - 1; /* 1.1 payloads follow page padding */
		cr_assert_eq(bad[gap], 0);
		bad[gap] = 1;
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open_memory(bad, fsize, 0, &c), IBP_ERR_CORRUPT, "%s", path);
		free(bad);
		free(file);
		free(expect);
	}
}

/* ---- sizes ----------------------------------------------------------------- */

/* A 64-byte array in any shape packs to at most 512 bytes (1.1: 4 KiB). */
Test(format12, small_arrays_stay_small, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static const struct {
		ibp_dtype_t dt;
		unsigned ndim;
		uint64_t shape[2];
	} a[] = {
		{ IBP_DTYPE_F32, 1, { 16, 0 } }, { IBP_DTYPE_F32, 2, { 4, 4 } }, { IBP_DTYPE_F32, 2, { 1, 16 } },
		{ IBP_DTYPE_U8, 1, { 64, 0 } },  { IBP_DTYPE_U8, 2, { 8, 8 } },
	};
	uint8_t data[64];
	rng_t r = { 77 };
	for (int i = 0; i < 64; i++)
		data[i] = (uint8_t)rnd(&r);
	for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++) {
		const char *p = tmpdir_path("tiny.ibp");
		cr_assert_eq(ibp_pack(p, data, a[i].dt, a[i].ndim, a[i].shape, NULL, IBP_LAYOUT_PACKED), IBP_OK, "%s",
			     ibp_last_error());
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK, "%s", ibp_last_error());
		cr_assert_leq(ibp_container_file_bytes(c), 512, "case %zu: %llu bytes", i,
			      (unsigned long long)ibp_container_file_bytes(c));
		cr_assert_eq(ibp_container_version_minor(c), 2);
		uint64_t R = ibp_container_row_bytes(c);
		uint8_t out[64];
		for (uint64_t row = 0; row < ibp_container_nrows(c); row++)
			cr_assert_eq(ibp_container_decode_row(c, row, out + row * R), IBP_OK);
		cr_assert(memcmp(out, data, 64) == 0);
		ibp_container_close(c);
	}
	/* the exponent codec too */
	uint64_t shape[1] = { 32 };
	cr_assert_eq(ibp_pack_exp(tmpdir_path("tiny_exp.ibp"), data, IBP_DTYPE_BF16, 1, shape, NULL, 0), IBP_OK);
	uint64_t size;
	free(read_whole_file(tmpdir_path("tiny_exp.ibp"), &size));
	cr_assert_leq(size, 512);
}

/* Sparse rows: the index costs about 2 bytes per row, not 9. */
Test(format12, index_is_compact_on_sparse_rows, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 1000, cols = 300, shape[2] = { n, cols };
	float *v = xcalloc(n * cols * sizeof(float));
	rng_t r = { 11 };
	for (uint64_t i = 0; i < n * cols; i++)
		v[i] = rnd(&r) % 100 == 0 ? 1.0f : 0.0f;
	const char *p = tmpdir_path("sparse.ibp");
	cr_assert_eq(ibp_pack(p, v, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK, "%s",
		     ibp_last_error());
	uint64_t size;
	uint8_t *f = read_whole_file(p, &size);
	int ii = find_section(f, 8);
	cr_assert_geq(ii, 0, "no INDEX section");
	cr_assert_lt(find_section(f, 2), 0, "FLAGS beside INDEX");
	cr_assert_lt(find_section(f, 4), 0, "OFFSETS beside INDEX");
	cr_assert_leq(sec_len(f, ii), 2 * n + 8 + 12 * (n / 64 + 2), "index of %llu bytes for %llu rows",
		      (unsigned long long)sec_len(f, ii), (unsigned long long)n);
	/* run-coded metadata: far below the 2 x 1200-byte plain tables */
	int mi = find_section(f, 1);
	cr_assert_eq(ld32(f + sec_off(f, mi) + 4), 1, "metadata not run-coded");
	cr_assert_lt(sec_len(f, mi), 400);
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(p, 0, &s), IBP_OK);
	float *out = xcalloc(n * cols * sizeof(float));
	cr_assert_eq(ibp_store_decode_all(s, out, 2), IBP_OK);
	cr_assert(memcmp(out, v, n * cols * sizeof(float)) == 0);
	ibp_store_close(s);
	free(out);
	free(f);
	free(v);
}

/* ---- the compact index against the encoder's arrays ----------------------- */

static void index_matches(ibp_layout_t layout, unsigned k, uint64_t n)
{
	uint64_t R = 40, shape[2] = { n, R };
	ibp_codec_t *codec = make_codec(R, 4, k, 90 + k);
	uint8_t *rows = make_rows(codec, n, 91);
	uint8_t *enc = xcalloc(n * R + 1), *flags = xcalloc(n + 1), *cl = xcalloc(n + 1);
	uint64_t *off = xcalloc((n + 1) * 8);
	cr_assert_eq(ibp_encode_batch(codec, rows, n, enc, n * R, off, flags, k > 1 ? cl : NULL, 1), IBP_OK);
	const char *p = tmpdir_path("ix.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, layout, 1), IBP_OK);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, IBP_OPEN_MMAP, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_compact_index(c), 1);
	uint64_t *xo = xcalloc((n + 1) * 8);
	uint8_t *xf = xcalloc(n + 1), *xc = xcalloc(n + 1);
	int packed = layout == IBP_LAYOUT_PACKED;
	cr_assert_eq(ibp_container_index_expand(c, packed ? xo : NULL, xf, xc), IBP_OK);
	if (!packed)
		cr_assert_eq(ibp_container_index_expand(c, xo, NULL, NULL), IBP_ERR_INVALID_ARG);
	uint64_t plen;
	const uint8_t *pl = ibp_container_payload(c, &plen);
	for (uint64_t i = 0; i < n; i++) {
		cr_assert_eq(xf[i], flags[i], "row %llu", (unsigned long long)i);
		cr_assert_eq(xc[i], k > 1 ? cl[i] : 0);
		const uint8_t *src;
		uint64_t len;
		uint8_t m;
		unsigned cc;
		cr_assert_eq(ibp_container_row_meta(c, i, &src, &len, &m, &cc), IBP_OK);
		cr_assert_eq(m, flags[i]);
		cr_assert_eq(cc, k > 1 ? cl[i] : 0u);
		if (packed) {
			cr_assert_eq(xo[i], off[i]);
			cr_assert_eq(src, pl + off[i]);
			cr_assert_eq(len, off[i + 1] - off[i]);
			cr_assert(memcmp(src, enc + off[i], len) == 0);
		} else {
			cr_assert_eq(src, pl + i * R);
			cr_assert_eq(len, R);
		}
	}
	if (packed)
		cr_assert_eq(xo[n], off[n]);
	/* the 1.1-style accessors see the same arrays */
	cr_assert(memcmp(ibp_container_flags(c), flags, n) == 0);
	if (packed)
		cr_assert(memcmp(ibp_container_offsets(c), off, (n + 1) * 8) == 0);
	else
		cr_assert_null(ibp_container_offsets(c));
	if (k > 1)
		cr_assert(memcmp(ibp_container_clusters(c), cl, n) == 0);
	else
		cr_assert_null(ibp_container_clusters(c));
	cr_assert_eq(ibp_container_row_meta(c, n, NULL, NULL, NULL, NULL), IBP_ERR_INVALID_ARG);
	const uint8_t *src;
	uint64_t len;
	cr_assert_eq(ibp_container_row_meta(c, n, &src, &len, NULL, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_container_verify(c, 2), IBP_OK, "%s", ibp_last_error());
	ibp_container_close(c);
	free(xo);
	free(xf);
	free(xc);
	free(off);
	free(enc);
	free(flags);
	free(cl);
	free(rows);
	ibp_codec_free(codec);
}

/* Row counts around the 64-row groups; 1 to 40 clusters (0 to 6 bits). */
Test(format12, index_matches_encoder, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static const uint64_t ns[] = { 0, 1, 63, 64, 65, 200 };
	static const unsigned ks[] = { 1, 2, 5, 40 };
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++) {
			index_matches(IBP_LAYOUT_PACKED, ks[b], ns[a]);
			index_matches(IBP_LAYOUT_INPLACE, ks[b], ns[a]);
		}
}

/* The packed index cannot describe a raw row that is not R bytes: the
 * writer refuses it instead of writing an undecodable file. */
Test(format12, writer_refuses_short_raw_row, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t R = 8, shape[2] = { 2, R };
	ibp_codec_t *codec = make_codec(R, 4, 1, 3);
	uint8_t payload[16] = { 0 }, flags[2] = { IBP_ROW_RAW, IBP_ROW_RAW };
	uint64_t off[3] = { 0, 8, 15 };
	cr_assert_eq(ibp_container_write(tmpdir_path("r.ibp"), codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED,
					 payload, 15, off, flags, NULL),
		     IBP_ERR_INVALID_ARG);
	off[2] = 16;
	cr_assert_eq(ibp_container_write(tmpdir_path("r.ibp"), codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED,
					 payload, 16, off, flags, NULL),
		     IBP_OK, "%s", ibp_last_error());
	ibp_codec_free(codec);
}

/* The worked example of docs/FORMAT.md 2.4.2, byte for byte. */
Test(format12, index_worked_example, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t R = 20, shape[2] = { 4, R };
	ibp_codec_t *codec = make_codec(R, 4, 2, 12);
	uint8_t payload[37] = { 0 };
	const uint8_t flags[4] = { 3, 0, 1, 2 }, clusters[4] = { 0, 1, 1, 0 };
	const uint64_t off[5] = { 0, 5, 25, 28, 37 };
	const char *p = tmpdir_path("ex.ibp");
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, payload, 37, off,
					 flags, clusters),
		     IBP_OK, "%s", ibp_last_error());
	static const uint8_t want[31] = { 0x06, 0x01, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					  0x25, 0, 0, 0, 0, 0, 0, 0, 0x03, 0, 0, 0, 0x13, 0x51, 0xc8 };
	uint64_t size;
	uint8_t *f = read_whole_file(p, &size);
	int ii = find_section(f, 8);
	cr_assert_geq(ii, 0);
	cr_assert_eq(sec_len(f, ii), sizeof(want));
	cr_assert(memcmp(f + sec_off(f, ii), want, sizeof(want)) == 0);
	/* the rows are zeros, not real encodings: open trusts nothing but
	 * structure, and row 3 is found at 28, 9 bytes */
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK, "%s", ibp_last_error());
	const uint8_t *src;
	uint64_t len;
	uint8_t m;
	unsigned cl;
	cr_assert_eq(ibp_container_row_meta(c, 3, &src, &len, &m, &cl), IBP_OK);
	cr_assert_eq(src - ibp_container_payload(c, NULL), 28);
	cr_assert_eq(len, 9);
	cr_assert_eq(m, 2);
	cr_assert_eq(cl, 0);
	ibp_container_close(c);
	free(f);
	ibp_codec_free(codec);
}

/* ---- structural lies with consistent checksums ------------------------------ */

typedef struct lie {
	const char *what;
	void (*edit)(uint8_t *f, uint64_t ix, uint64_t ixlen, uint64_t meta);
} lie_t;

static void ix_shift(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)l, (void)m, f[ix] = 17; }
static void ix_cbits(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)l, (void)m, f[ix + 1] ^= 1; }
static void ix_wbits(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)l, (void)m, f[ix + 2] = 42; }
static void ix_resv(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)l, (void)m, f[ix + 5] = 1; }
static void ix_base0(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)l, (void)m, st64(f + ix + 8, 1); }
static void ix_base1(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)l, (void)m;
	st64(f + ix + 16, ld64(f + ix + 16) + 1);
}
static void ix_ref(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)l, (void)m;
	/* 100 rows: 2 groups, refs after 3 bases */
	st32(f + ix + 8 + 24, ld32(f + ix + 8 + 24) + 1);
}
static void ix_ref_huge(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)l, (void)m;
	st32(f + ix + 8 + 24, 0xFFFFFFF0u);
}
static void ix_tailbits(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)m, f[ix + l - 1] |= 0x80; }
static void ix_entry0(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)l, (void)m;
	f[ix + 8 + 24 + 8] |= 0x0C; /* row 0's cluster: 3, of 3 clusters */
}
static void meta_coding(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m) { (void)ix, (void)l, st32(f + m + 4, 2); }
static void meta_run0(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)ix, (void)l;
	st32(f + m + 16, 0); /* a run of no words */
}
static void meta_runlong(uint8_t *f, uint64_t ix, uint64_t l, uint64_t m)
{
	(void)ix, (void)l;
	st32(f + m + 16, (ld32(f + m + 16) & 0x80000000u) | 0x7fffffffu);
}

static const lie_t lies[] = {
	{ "group shift 17", ix_shift },
	{ "cluster bits", ix_cbits },
	{ "length bits 42", ix_wbits },
	{ "reserved index bytes", ix_resv },
	{ "group 0 not at 0", ix_base0 },
	{ "group end disagrees", ix_base1 },
	{ "reference length", ix_ref },
	{ "reference length past R", ix_ref_huge },
	{ "padding bits after the entries", ix_tailbits },
	{ "cluster id past the clusters", ix_entry0 },
	{ "unknown metadata coding", meta_coding },
	{ "empty run", meta_run0 },
	{ "run past the table", meta_runlong },
};

Test(format12, structural_lies_are_corrupt, .init = make_tmpdir, .fini = remove_tmpdir)
{
	/* 100 rows of 40 bytes, 3 clusters, repetitive masks: run-coded */
	uint64_t n = 100, R = 40, shape[2] = { n, R };
	uint32_t masks[30], bitvals[30];
	for (int i = 0; i < 30; i++) {
		masks[i] = 0xFFFF0000u;
		bitvals[i] = (uint32_t)(i / 10) << 16; /* per cluster */
	}
	ibp_codec_t *codec = NULL;
	cr_assert_eq(ibp_codec_create(R, 4, 3, masks, bitvals, &codec), IBP_OK, "%s", ibp_last_error());
	uint8_t *rows = make_rows(codec, n, 8);
	const char *p = tmpdir_path("lie.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, 1), IBP_OK);
	uint64_t size;
	uint8_t *f = read_whole_file(p, &size), *g = xcalloc(size);
	int ii = find_section(f, 8), mi = find_section(f, 1);
	cr_assert_geq(ii, 0);
	uint64_t ix = sec_off(f, ii), ixlen = sec_len(f, ii), meta = sec_off(f, mi);
	cr_assert_eq(f[ix + 1], 2, "3 clusters take 2 bits");
	cr_assert_eq(ld32(f + meta + 4), 1, "metadata not run-coded");
	ibp_container_t *c = NULL;
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		memcpy(g, f, size);
		lies[i].edit(g, ix, ixlen, meta);
		refresh(g);
		ibp_status_t st = ibp_container_open_memory(g, size, 0, &c);
		cr_assert_eq(st, IBP_ERR_CORRUPT, "%s: status %d (%s)", lies[i].what, st, ibp_last_error());
		cr_assert_null(c);
	}
	/* run-coded tables may not expand beyond the bound: a 40-byte row
	 * claiming 2^30-byte rows is refused before anything is allocated */
	memcpy(g, f, size);
	refresh(g);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK);
	ibp_container_close(c);
	free(g);
	free(f);
	free(rows);
	ibp_codec_free(codec);
}

/* The V12 required feature marks the 1.2 layout: set on every file this
 * library writes; a 1.2 layout without it breaks the 1.1 rules (8-byte
 * sections, no PAYLOAD_SUMS), and the bit on a file claiming 1.1 is a lie. */
Test(format12, v12_feature_bit, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 30, R = 16, shape[2] = { n, R };
	ibp_codec_t *codec = make_codec(R, 4, 1, 44);
	uint8_t *rows = make_rows(codec, n, 45);
	const char *p = tmpdir_path("v12.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, 1), IBP_OK);
	uint64_t size;
	uint8_t *f = read_whole_file(p, &size), *g = xcalloc(size);
	cr_assert_eq(ld32(f + 24), 2, "V12 set, LOSSY clear");
	cr_assert_eq(ld32(f + 8) >> 16, 2, "minor 2");
	cr_assert_lt(find_section(f, 6), 0, "one payload block: no PAYLOAD_SUMS");
	ibp_container_t *c = NULL;
	memcpy(g, f, size);
	st32(g + 24, 0);
	refresh(g);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT, "%s", ibp_last_error());
	memcpy(g, f, size);
	st32(g + 8, 1u | (1u << 16));
	refresh(g);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT, "%s", ibp_last_error());
	/* an unknown required feature next to it is still unsupported */
	memcpy(g, f, size);
	st32(g + 24, 2 | 8);
	refresh(g);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_UNSUPPORTED, "%s", ibp_last_error());
	free(g);
	free(f);
	free(rows);
	ibp_codec_free(codec);
}

/* A run-coded table that would expand far beyond its bytes: refused as
 * corrupt, not allocated. The shape says 2^36-byte rows of 1 row; the
 * metadata is one 12-byte run per table. */
Test(format12, run_expansion_is_bounded)
{
	uint8_t f[1024];
	memset(f, 0, sizeof(f));
	static const uint8_t magic[8] = { 0x89, 'I', 'B', 'P', 0x0D, 0x0A, 0x1A, 0x0A };
	memcpy(f, magic, 8);
	st32(f + 8, 1u | (2u << 16));
	st32(f + 12, 256);
	st32(f + 24, 2); /* V12 */
	st32(f + 32, IBP_DTYPE_U8);
	st32(f + 36, 2);
	st64(f + 40, 1);
	st64(f + 48, 1ull << 36);
	st64(f + 104, 1ull << 36);
	st32(f + 112, 1);
	st32(f + 116, IBP_LAYOUT_INPLACE);
	st32(f + 120, 8);
	st32(f + 124, 3);
	st64(f + 128, 256);
	st64(f + 144, 1u << 20);
	/* META at 352: k = 1, runs, threshold -1, two repeat runs of 2^33 words? (max 2^31 - 1) */
	uint64_t meta = 352, ix = 352 + 40, pay = ix + 16;
	st32(f + meta, 1);
	st32(f + meta + 4, 1);
	double thr = -1.0;
	memcpy(f + meta + 8, &thr, 8);
	st32(f + meta + 16, 0x7fffffffu);
	st32(f + meta + 28, 0x7fffffffu);
	/* the sections */
	uint8_t *t = f + 256;
	st32(t, 1), st32(t + 4, 1), st64(t + 8, meta), st64(t + 16, 40);
	st32(t + 32, 8), st32(t + 36, 1), st64(t + 40, ix), st64(t + 48, 9);
	st32(t + 64, 5), st32(t + 68, 1), st64(t + 72, pay), st64(t + 80, 0);
	st64(f + 16, pay);
	refresh(f);
	ibp_container_t *c = NULL;
	ibp_status_t st = ibp_container_open_memory(f, pay, 0, &c);
	cr_assert_eq(st, IBP_ERR_CORRUPT, "status %d: %s", st, ibp_last_error());
	cr_assert(strstr(ibp_last_error(), "run-coded") != NULL, "%s", ibp_last_error());
}
