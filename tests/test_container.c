/* test_container.c - the `.ibp` container: round trips in both layouts and
 * every open mode, header fields, every single-byte flip and every
 * truncation of a small file, versioning rules, writer argument checks.
 *
 * Codecs are built with ibp_codec_create from seeded random masks, and rows
 * are generated to match them with some exceptions, so every row mode
 * (raw, clean, bitmap, list) appears without depending on training. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ibp.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct rng {
	uint64_t s;
} rng_t;

static uint64_t rnd(rng_t *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static void *xcalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	cr_assert_not_null(p);
	return p;
}

static uint64_t wmask(unsigned C)
{
	return C == 8 ? ~0ull : (1ull << (8 * C)) - 1;
}

static uint64_t word_get(const uint8_t *a, unsigned C, uint64_t j)
{
	uint64_t v = 0;
	memcpy(&v, a + j * C, C);
	return v;
}

static void word_set(uint8_t *a, unsigned C, uint64_t j, uint64_t v)
{
	memcpy(a + j * C, &v, C);
}

/* Bits of chunk j that lie inside the row (not padding). */
static uint64_t inrow(uint64_t R, unsigned C, uint64_t j)
{
	uint64_t have = R - j * C < C ? R - j * C : C;
	return have >= 8 ? ~0ull : (1ull << (8 * have)) - 1;
}

/* A codec with k clusters of random masks (density about 3/4). */
static ibp_codec_t *make_codec(uint64_t R, unsigned C, unsigned k, uint64_t seed)
{
	rng_t r = { seed };
	uint64_t D = (R + C - 1) / C;
	uint8_t *m = xcalloc(k * D * C), *b = xcalloc(k * D * C);
	for (unsigned c = 0; c < k; c++)
		for (uint64_t j = 0; j < D; j++) {
			uint64_t in = inrow(R, C, j) & wmask(C);
			uint64_t mm = ((rnd(&r) | rnd(&r)) & in) | (wmask(C) & ~in);
			uint64_t bb = rnd(&r) & mm & in;
			word_set(m + c * D * C, C, j, mm);
			word_set(b + c * D * C, C, j, bb);
		}
	ibp_codec_t *codec = NULL;
	ibp_status_t st = ibp_codec_create(R, C, k, m, b, &codec);
	cr_assert_eq(st, IBP_OK, "codec_create: %s", ibp_last_error());
	free(m);
	free(b);
	return codec;
}

/* Rows that mostly match a random cluster of `codec`: a mix of clean rows,
 * rows with a few exceptions, rows with many, and random rows. */
static uint8_t *make_rows(const ibp_codec_t *codec, uint64_t n, uint64_t seed)
{
	rng_t r = { seed };
	uint64_t R = ibp_codec_row_bytes(codec), D = ibp_codec_nchunks(codec);
	unsigned C = ibp_codec_chunk_bytes(codec), k = ibp_codec_nclusters(codec);
	uint8_t *rows = xcalloc(n * R);
	uint8_t *tmp = xcalloc(D * C);
	for (uint64_t i = 0; i < n; i++) {
		unsigned cl = (unsigned)(rnd(&r) % k), kind = (unsigned)(rnd(&r) % 8);
		const uint8_t *m = ibp_codec_mask(codec, cl), *b = ibp_codec_bitval(codec, cl);
		for (uint64_t j = 0; j < D; j++) {
			uint64_t x = rnd(&r) & wmask(C), mm = word_get(m, C, j), bb = word_get(b, C, j);
			if (kind != 0) {
				x = (x & ~mm) | bb;
				uint64_t cand = mm & inrow(R, C, j);
				uint64_t odds = kind == 1 ? 0 : kind < 6 ? 16 : 2;
				if (cand && odds && rnd(&r) % odds == 0)
					x ^= cand & (0 - cand); /* flip the lowest mask bit: an exception */
			}
			word_set(tmp, C, j, x);
		}
		memcpy(rows + i * R, tmp, R);
	}
	free(tmp);
	return rows;
}

static char tmpdir[64];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/ibp_test_container_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

static char *path_in_tmp(const char *name)
{
	static char p[160];
	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	return p;
}

static uint8_t *read_file(const char *path, uint64_t *size)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = xcalloc((size_t)n);
	cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*size = (uint64_t)n;
	return p;
}

static void write_file(const char *path, const void *p, uint64_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, (size_t)n, f), (size_t)n);
	cr_assert_eq(fclose(f), 0);
}

static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Recomputes every section checksum, the table checksum and the header
 * checksum (FORMAT.md 2.2, 2.3), so a test can change a field on purpose. */
static void refresh_checksums(uint8_t *f, uint64_t size)
{
	uint32_t hs = ld32(f + 12), n = ld32(f + 124);
	uint64_t toff = ld64(f + 128);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = f + toff + 32 * i;
		uint64_t off = ld64(e + 8), len = ld64(e + 16);
		if (off <= size && len <= size - off)
			st64(e + 24, XXH3_64bits(f + off, len));
	}
	st64(f + 136, XXH3_64bits(f + toff, 32 * n));
	st64(f + hs - 8, XXH3_64bits(f, hs - 8));
}

/* Index of the section-table entry with `id`, or -1. */
static int find_section(const uint8_t *f, uint32_t id)
{
	uint32_t n = ld32(f + 124);
	uint64_t toff = ld64(f + 128);
	for (uint32_t i = 0; i < n; i++)
		if (ld32(f + toff + 32 * i) == id)
			return (int)i;
	return -1;
}

/* Gathers every row of an open container through a store and compares. */
static void check_rows(ibp_container_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	uint8_t *out = xcalloc(n * R + 1);
	for (uint64_t i = 0; i < n; i++) {
		ibp_status_t st = ibp_container_decode_row(c, i, out + i * R);
		cr_assert_eq(st, IBP_OK, "row %llu: %s", (unsigned long long)i, ibp_last_error());
	}
	cr_assert(n == 0 || memcmp(out, rows, n * R) == 0, "decoded rows differ from the original");
	free(out);
}

/* Same through a store (takes ownership of c). */
static void check_store(ibp_container_t *c, const uint8_t *rows, uint64_t n, uint64_t R)
{
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_from_container(c, &s), IBP_OK);
	int64_t *ids = xcalloc(n * sizeof(int64_t) + 8);
	for (uint64_t i = 0; i < n; i++)
		ids[i] = (int64_t)i;
	uint8_t *out = xcalloc(n * R + 1);
	ibp_status_t st = ibp_store_gather(s, ids, n, out, 1);
	cr_assert_eq(st, IBP_OK, "gather: %s", ibp_last_error());
	cr_assert(n == 0 || memcmp(out, rows, n * R) == 0, "gathered rows differ from the original");
	free(out);
	free(ids);
	ibp_store_close(s);
}

/* ---- round trips ---------------------------------------------------------- */

typedef struct rt_case {
	ibp_dtype_t dtype;
	unsigned ndim;
	uint64_t shape[4];
	unsigned C, k;
} rt_case_t;

static const rt_case_t cases[] = {
	{ IBP_DTYPE_U8, 2, { 100, 1 }, 1, 1 },          /* 1-byte rows */
	{ IBP_DTYPE_BOOL, 1, { 77 }, 2, 2 },            /* 1-byte rows, padded chunk, 2 clusters */
	{ IBP_DTYPE_F32, 3, { 257, 3, 5 }, 4, 1 },      /* 60-byte rows */
	{ IBP_DTYPE_BF16, 2, { 64, 37 }, 8, 1 },        /* 74 bytes: partial last chunk */
	{ IBP_DTYPE_F64, 2, { 33, 7 }, 2, 3 },          /* 3 clusters */
	{ IBP_DTYPE_BYTES, 2, { 50, 13 }, 4, 2 },       /* odd row length */
	{ IBP_DTYPE_I16, 1, { 1000 }, 8, 1 },           /* 2-byte rows in an 8-byte chunk */
	{ IBP_DTYPE_U16, 4, { 9, 2, 3, 5 }, 4, 4 },     /* 4-d */
	{ IBP_DTYPE_F32, 2, { 0, 16 }, 4, 1 },          /* no rows */
	{ IBP_DTYPE_I64, 2, { 3000, 129 }, 8, 2 },      /* > 1 MiB payload: several checksum blocks */
};

static void round_trip(const rt_case_t *tc, ibp_layout_t layout)
{
	uint64_t R = ibp_dtype_size(tc->dtype);
	for (unsigned i = 1; i < tc->ndim; i++)
		R *= tc->shape[i];
	uint64_t n = tc->shape[0];
	ibp_codec_t *codec = make_codec(R, tc->C, tc->k, 1000 + R * 7 + tc->k);
	uint8_t *rows = make_rows(codec, n, 77 + n);
	const char *path = path_in_tmp("rt.ibp");
	ibp_status_t st = ibp_pack_with_codec(path, codec, rows, tc->dtype, tc->ndim, tc->shape, layout, 2);
	cr_assert_eq(st, IBP_OK, "pack: %s", ibp_last_error());

	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	const unsigned modes[] = { IBP_OPEN_READ, IBP_OPEN_MMAP, IBP_OPEN_READ | IBP_OPEN_VERIFY,
				   IBP_OPEN_MMAP | IBP_OPEN_VERIFY };
	for (unsigned mi = 0; mi < 4; mi++) {
		ibp_container_t *c = NULL;
		st = ibp_container_open(path, modes[mi], &c);
		cr_assert_eq(st, IBP_OK, "open mode %u: %s", modes[mi], ibp_last_error());
		cr_assert_eq(ibp_container_nrows(c), n);
		cr_assert_eq(ibp_container_row_bytes(c), R);
		cr_assert_eq(ibp_container_dtype(c), tc->dtype);
		cr_assert_eq(ibp_container_ndim(c), tc->ndim);
		for (unsigned d = 0; d < tc->ndim; d++)
			cr_assert_eq(ibp_container_shape(c)[d], tc->shape[d]);
		cr_assert_eq(ibp_container_layout(c), layout);
		cr_assert_eq(ibp_container_codec_id(c), IBP_CODEC_IBP);
		cr_assert_eq(ibp_container_chunk_bytes(c), tc->C);
		cr_assert_eq(ibp_container_version_major(c), IBP_FORMAT_MAJOR);
		cr_assert_eq(ibp_container_version_minor(c), IBP_FORMAT_MINOR);
		cr_assert_eq(ibp_container_file_bytes(c), (uint64_t)sb.st_size);
		cr_assert(ibp_container_threshold(c) == -1.0);
		const ibp_codec_t *cc = ibp_container_codec(c);
		cr_assert_eq(ibp_codec_nclusters(cc), tc->k);
		uint64_t words = ibp_codec_nchunks(codec) * tc->C;
		for (unsigned k = 0; k < tc->k; k++) {
			cr_assert(memcmp(ibp_codec_mask(cc, k), ibp_codec_mask(codec, k), words) == 0);
			cr_assert(memcmp(ibp_codec_bitval(cc, k), ibp_codec_bitval(codec, k), words) == 0);
		}
		cr_assert_eq(ibp_container_offsets(c) == NULL, layout == IBP_LAYOUT_INPLACE);
		cr_assert_eq(ibp_container_clusters(c) == NULL, tc->k == 1);
		uint64_t plen = 0;
		const uint8_t *pl = ibp_container_payload(c, &plen);
		cr_assert_eq((uintptr_t)pl % 4096, 0, "payload is page-aligned");
		if (layout == IBP_LAYOUT_INPLACE)
			cr_assert_eq(plen, n * R);
		else
			cr_assert_eq(plen, ibp_container_offsets(c)[n]);
		cr_assert_eq(ibp_container_verify(c, 0), IBP_OK, "verify: %s", ibp_last_error());
		cr_assert_eq(ibp_container_verify(c, 1), IBP_OK, "verify: %s", ibp_last_error());
		check_rows(c, rows, n, R);
		if (mi == 0) {
			ibp_container_close(c);
		} else {
			check_store(c, rows, n, R);
		}
	}
	free(rows);
	ibp_codec_free(codec);
}

Test(container, round_trip_packed, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		round_trip(&cases[i], IBP_LAYOUT_PACKED);
}

Test(container, round_trip_inplace, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		round_trip(&cases[i], IBP_LAYOUT_INPLACE);
}

/* Every row mode must occur in the generated data, or the round trips
 * above would not cover them. */
Test(container, data_covers_every_mode, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t shape[2] = { 400, 60 };
	ibp_codec_t *codec = make_codec(60, 4, 2, 5);
	uint8_t *rows = make_rows(codec, 400, 6);
	const char *path = path_in_tmp("modes.ibp");
	cr_assert_eq(ibp_pack_with_codec(path, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, 1),
		     IBP_OK);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(path, 0, &c), IBP_OK);
	unsigned seen[4] = { 0 };
	for (uint64_t i = 0; i < 400; i++)
		seen[ibp_container_flags(c)[i] & 3]++;
	for (int m = 0; m < 4; m++)
		cr_assert_gt(seen[m], 0, "mode %d never used", m);
	ibp_container_close(c);
	free(rows);
	ibp_codec_free(codec);
}

/* ibp_container_write from ibp_encode_batch output gives the same file as
 * ibp_pack_with_codec, and reads back. */
Test(container, write_from_encoded_arrays, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 120, R = 24, shape[3] = { n, 2, 3 };
	ibp_codec_t *codec = make_codec(R, 4, 2, 11);
	uint8_t *rows = make_rows(codec, n, 12);
	uint8_t *dst = xcalloc(n * R), *flags = xcalloc(n), *cl = xcalloc(n);
	uint64_t *off = xcalloc((n + 1) * 8);
	cr_assert_eq(ibp_encode_batch(codec, rows, n, dst, n * R, off, flags, cl, 1), IBP_OK);
	char a[160], b[160];
	snprintf(a, sizeof(a), "%s", path_in_tmp("a.ibp"));
	snprintf(b, sizeof(b), "%s", path_in_tmp("b.ibp"));
	cr_assert_eq(ibp_container_write(a, codec, IBP_DTYPE_F32, 3, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, cl), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_pack_with_codec(b, codec, rows, IBP_DTYPE_F32, 3, shape, IBP_LAYOUT_PACKED, 2),
		     IBP_OK);
	uint64_t sa, sb;
	uint8_t *fa = read_file(a, &sa), *fb = read_file(b, &sb);
	cr_assert_eq(sa, sb);
	cr_assert(memcmp(fa, fb, sa) == 0, "writers disagree");
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(a, IBP_OPEN_VERIFY, &c), IBP_OK);
	check_rows(c, rows, n, R);
	ibp_container_close(c);

	/* no temporary files are left behind */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "test $(ls '%s' | wc -l) -eq 2", tmpdir);
	cr_assert_eq(system(cmd), 0);
	free(fa);
	free(fb);
	free(dst);
	free(flags);
	free(cl);
	free(off);
	free(rows);
	ibp_codec_free(codec);
}

Test(container, writer_rejects_bad_arguments, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 10, R = 8, shape[2] = { n, 8 };
	ibp_codec_t *codec = make_codec(R, 4, 1, 3);
	uint8_t *rows = make_rows(codec, n, 4);
	uint8_t *dst = xcalloc(n * R), *flags = xcalloc(n);
	uint64_t *off = xcalloc((n + 1) * 8);
	cr_assert_eq(ibp_encode_batch(codec, rows, n, dst, n * R, off, flags, NULL, 1), IBP_OK);
	const char *p = path_in_tmp("bad.ibp");
	/* shape that disagrees with the codec's row size */
	uint64_t wrong[2] = { n, 9 };
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, wrong, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U16, 2, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 0, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, (ibp_layout_t)7, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	/* payload length that disagrees with the offsets */
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, dst,
					 off[n] + 1, off, flags, NULL), IBP_ERR_INVALID_ARG);
	/* decreasing offsets */
	uint64_t save = off[3];
	off[3] = off[2] > 0 ? off[2] - 1 : off[4] + 1;
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	off[3] = save;
	/* reserved flag bits */
	flags[1] |= 0x10;
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	flags[1] &= 3;
	/* inplace takes no offsets and needs n * R bytes */
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_INPLACE, dst, n * R,
					 off, flags, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_INPLACE, dst,
					 n * R - 1, NULL, flags, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(access(p, F_OK), -1, "a failed write left a file");
	/* an unwritable place reports IBP_ERR_IO */
	cr_assert_eq(ibp_container_write("/nonexistent-dir/x.ibp", codec, IBP_DTYPE_U8, 2, shape,
					 IBP_LAYOUT_PACKED, dst, off[n], off, flags, NULL), IBP_ERR_IO);
	cr_assert(strstr(ibp_last_error(), "/nonexistent-dir/x.ibp") != NULL, "%s", ibp_last_error());
	free(dst);
	free(flags);
	free(off);
	free(rows);
	ibp_codec_free(codec);
}

/* A file written over an existing one replaces it whole. */
Test(container, overwrite_replaces, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const char *p = path_in_tmp("o.ibp");
	write_file(p, "junk", 4);
	uint64_t shape[2] = { 5, 3 };
	ibp_codec_t *codec = make_codec(3, 1, 1, 8);
	uint8_t *rows = make_rows(codec, 5, 9);
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_INPLACE, 1),
		     IBP_OK);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, IBP_OPEN_VERIFY, &c), IBP_OK);
	check_rows(c, rows, 5, 3);
	ibp_container_close(c);
	free(rows);
	ibp_codec_free(codec);
}

/* ibp_pack trains and writes in one call. */
Test(container, pack_trains, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 300, shape[2] = { n, 32 };
	float *x = xcalloc(n * 32 * sizeof(float));
	rng_t r = { 42 };
	for (uint64_t i = 0; i < n * 32; i++)
		x[i] = 0.5f + (float)(rnd(&r) % 1000) / 4000.0f;
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 2;
	const char *p = path_in_tmp("t.ibp");
	for (int layout = 0; layout < 2; layout++) {
		ibp_status_t st = ibp_pack(p, x, IBP_DTYPE_F32, 2, shape, &o, (ibp_layout_t)layout);
		cr_assert_eq(st, IBP_OK, "pack: %s", ibp_last_error());
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(p, IBP_OPEN_MMAP | IBP_OPEN_VERIFY, &c), IBP_OK, "%s",
			     ibp_last_error());
		double t = ibp_container_threshold(c);
		cr_assert(t >= 0.5 && t <= 1.0, "trained threshold %f recorded", t);
		uint64_t plen;
		ibp_container_payload(c, &plen);
		if (layout == IBP_LAYOUT_PACKED)
			cr_assert_lt(plen, n * 32 * sizeof(float), "smooth floats compress");
		check_rows(c, (const uint8_t *)x, n, 32 * sizeof(float));
		ibp_container_close(c);
	}
	free(x);
}

/* ---- damaged files ------------------------------------------------------- */

/* A small container (a few KB) in memory. */
static uint8_t *small_file(ibp_layout_t layout, unsigned k, uint64_t *size, uint8_t **rows_out,
			   uint64_t *n_out, uint64_t *R_out)
{
	uint64_t n = 40, R = 12, shape[2] = { n, 12 };
	ibp_codec_t *codec = make_codec(R, 4, k, 21 + k);
	uint8_t *rows = make_rows(codec, n, 22);
	const char *p = path_in_tmp("small.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, layout, 1), IBP_OK);
	ibp_codec_free(codec);
	*rows_out = rows;
	*n_out = n;
	*R_out = R;
	return read_file(p, size);
}

static void flip_every_byte(ibp_layout_t layout, unsigned k)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(layout, k, &size, &rows, &n, &R);
	cr_assert_lt(size, 8192);
	/* bytes under a checksum: the header, the table, every section */
	uint8_t *covered = xcalloc(size);
	memset(covered, 1, ld32(f + 12));
	uint32_t ns = ld32(f + 124);
	uint64_t toff = ld64(f + 128);
	memset(covered + toff, 1, 32 * ns);
	for (uint32_t i = 0; i < ns; i++)
		memset(covered + ld64(f + toff + 32 * i + 8), 1, ld64(f + toff + 32 * i + 16));
	uint8_t *g = xcalloc(size);
	unsigned rejected = 0, harmless = 0;
	const uint8_t xors[] = { 0xFF, 0x01, 0x80 };
	for (uint64_t pos = 0; pos < size; pos++)
		for (unsigned x = 0; x < sizeof(xors); x++) {
			memcpy(g, f, size);
			g[pos] ^= xors[x];
			ibp_container_t *c = NULL;
			ibp_status_t st = ibp_container_open_memory(g, size, 0, &c);
			if (st == IBP_OK) {
				st = ibp_container_verify(c, 1);
				if (st != IBP_OK)
					ibp_container_close(c);
			}
			if (st != IBP_OK) {
				cr_assert(st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM,
					  "flip of byte %llu gave status %d (%s)", (unsigned long long)pos, st,
					  ibp_last_error());
				rejected++;
				continue;
			}
			/* accepted: only padding may change, and the data must be exact */
			cr_assert(!covered[pos], "flip of checksummed byte %llu was accepted",
				  (unsigned long long)pos);
			check_rows(c, rows, n, R);
			check_store(c, rows, n, R);
			harmless++;
		}
	cr_assert_gt(rejected, 0);
	cr_assert_gt(harmless, 0, "the padding before the page-aligned payload is not checked");
	free(covered);
	free(g);
	free(f);
	free(rows);
}

Test(container, every_byte_flip_packed, .init = make_tmpdir, .fini = remove_tmpdir)
{
	flip_every_byte(IBP_LAYOUT_PACKED, 2);
}

Test(container, every_byte_flip_inplace, .init = make_tmpdir, .fini = remove_tmpdir)
{
	flip_every_byte(IBP_LAYOUT_INPLACE, 1);
}

Test(container, every_truncation_rejected, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int layout = 0; layout < 2; layout++) {
		uint64_t size, n, R;
		uint8_t *rows;
		uint8_t *f = small_file((ibp_layout_t)layout, 2, &size, &rows, &n, &R);
		for (uint64_t len = 0; len < size; len++) {
			/* a fresh exact-size copy, so reads past `len` are caught by ASan */
			uint8_t *g = malloc(len ? len : 1);
			memcpy(g, f, len);
			ibp_container_t *c = NULL;
			ibp_status_t st = ibp_container_open_memory(g, len, 0, &c);
			cr_assert_eq(st, IBP_ERR_CORRUPT, "truncation to %llu bytes gave %d (%s)",
				     (unsigned long long)len, st, ibp_last_error());
			cr_assert_null(c);
			free(g);
		}
		/* and through real files, both open modes */
		const uint64_t lens[] = { 0, 1, 23, 100, 255, 256, 300, size / 2, size - 1 };
		const char *p = path_in_tmp("trunc.ibp");
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
			for (unsigned mode = 0; mode < 2; mode++) {
				write_file(p, f, lens[i]);
				ibp_container_t *c = NULL;
				ibp_status_t st = ibp_container_open(p, mode ? IBP_OPEN_MMAP : IBP_OPEN_READ, &c);
				cr_assert_eq(st, IBP_ERR_CORRUPT, "file truncated to %llu: %d (%s)",
					     (unsigned long long)lens[i], st, ibp_last_error());
				cr_assert(strstr(ibp_last_error(), p) != NULL, "message names the file");
			}
		/* trailing bytes are rejected too */
		uint8_t *longer = xcalloc(size + 64);
		memcpy(longer, f, size);
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open_memory(longer, size + 64, 0, &c), IBP_ERR_CORRUPT);
		free(longer);
		free(f);
		free(rows);
	}
}

Test(container, wrong_magic, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(IBP_LAYOUT_PACKED, 1, &size, &rows, &n, &R);
	ibp_container_t *c = NULL;
	f[1] = 'X';
	cr_assert_eq(ibp_container_open_memory(f, size, 0, &c), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "magic") != NULL, "%s", ibp_last_error());
	const char *p = path_in_tmp("magic.ibp");
	write_file(p, f, size);
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), p) != NULL);
	cr_assert_eq(ibp_container_open(path_in_tmp("missing.ibp"), 0, &c), IBP_ERR_IO);
	free(f);
	free(rows);
}

Test(container, versions_and_features, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(IBP_LAYOUT_PACKED, 1, &size, &rows, &n, &R);
	uint8_t *g = xcalloc(size + 64);
	ibp_container_t *c = NULL;

	/* a future major version is refused as unsupported */
	memcpy(g, f, size);
	st16(g + 8, 2);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_UNSUPPORTED);
	cr_assert(strstr(ibp_last_error(), "version") != NULL, "%s", ibp_last_error());
	/* ... and the same change without the checksum is a checksum error */
	memcpy(g, f, size);
	st16(g + 8, 2);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CHECKSUM);

	/* a newer minor version opens; its reserved bytes are ignored */
	memcpy(g, f, size);
	st16(g + 10, 7);
	g[230] = 0x55;
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, IBP_OPEN_VERIFY, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_version_minor(c), 7);
	check_rows(c, rows, n, R);
	ibp_container_close(c);
	/* reserved bytes set in a 1.0 file are corrupt */
	memcpy(g, f, size);
	g[230] = 0x55;
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);

	/* unknown optional feature bits are ignored, unknown required ones refused */
	memcpy(g, f, size);
	st32(g + 28, 0x80000001u);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK);
	ibp_container_close(c);
	memcpy(g, f, size);
	st32(g + 24, 0x4u);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_UNSUPPORTED);

	/* codec ids 2 and 3 are reserved for later codecs; others are unknown */
	for (uint32_t id = 0; id < 6; id++) {
		if (id == 1)
			continue;
		memcpy(g, f, size);
		st32(g + 112, id);
		refresh_checksums(g, size);
		cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_UNSUPPORTED, "codec %u", id);
	}

	/* an unknown section: skipped when optional, refused when required.
	 * Packed, one cluster: 5 entries, so the table has room for a sixth. */
	uint32_t ns = ld32(f + 124);
	cr_assert_eq(ns, 5);
	for (int required = 0; required < 2; required++) {
		memcpy(g, f, size);
		uint8_t *e = g + ld64(g + 128) + 32 * ns;
		st32(e, 200);
		st32(e + 4, required ? 1 : 0);
		st64(e + 8, ld64(g + ld64(g + 128) + 8)); /* an empty section overlaps nothing */
		st64(e + 16, 0);
		st32(g + 124, ns + 1);
		refresh_checksums(g, size);
		ibp_status_t st = ibp_container_open_memory(g, size, IBP_OPEN_VERIFY, &c);
		if (required) {
			cr_assert_eq(st, IBP_ERR_UNSUPPORTED, "%s", ibp_last_error());
		} else {
			cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
			check_rows(c, rows, n, R);
			ibp_container_close(c);
		}
	}

	/* a required section missing or doubled is corrupt */
	memcpy(g, f, size);
	int fi = find_section(g, 2);
	cr_assert_geq(fi, 0);
	st32(g + ld64(g + 128) + 32 * fi, 201);
	st32(g + ld64(g + 128) + 32 * fi + 4, 0); /* optional, so it is skipped, not refused */
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	memcpy(g, f, size);
	st32(g + ld64(g + 128) + 32 * find_section(g, 6), 2);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	free(g);
	free(f);
	free(rows);
}

/* Structural lies with valid checksums are caught by the checks, not by
 * luck: each must give IBP_ERR_CORRUPT and never an out-of-bounds access. */
Test(container, consistent_checksums_bad_structure, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(IBP_LAYOUT_PACKED, 2, &size, &rows, &n, &R);
	uint8_t *g = xcalloc(size);
	ibp_container_t *c = NULL;
	uint64_t toff = ld64(f + 128);
	int oi = find_section(f, 4), pi = find_section(f, 5), fi = find_section(f, 2),
	    ci = find_section(f, 3);
	uint64_t ooff = ld64(f + toff + 32 * oi + 8), poff = ld64(f + toff + 32 * pi + 8);
	uint64_t foff = ld64(f + toff + 32 * fi + 8), coff = ld64(f + toff + 32 * ci + 8);

	/* an offset past the payload */
	memcpy(g, f, size);
	st64(g + ooff + 8 * 5, 1ull << 40);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* decreasing offsets */
	memcpy(g, f, size);
	st64(g + ooff + 8 * 5, ld64(g + ooff + 8 * 4) > 0 ? ld64(g + ooff + 8 * 4) - 1 : 0);
	st64(g + ooff + 8 * 4, ld64(g + ooff + 8 * 6));
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* reserved flag bits */
	memcpy(g, f, size);
	g[foff + 3] |= 0x40;
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* cluster id past the cluster count */
	memcpy(g, f, size);
	g[coff + 7] = 2;
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* a section running past the end of the file */
	memcpy(g, f, size);
	st64(g + toff + 32 * pi + 16, size - poff + 1);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* overlapping sections */
	memcpy(g, f, size);
	st64(g + toff + 32 * ci + 8, foff);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* a shape that disagrees with the row size */
	memcpy(g, f, size);
	st64(g + 40 + 8, 13);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* a row count that disagrees with the flags section */
	memcpy(g, f, size);
	st64(g + 40, n + 1);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* a row claiming RAW mode in less than R bytes: open accepts (the flags
	 * are plausible), decode and verify reject it */
	memcpy(g, f, size);
	uint64_t row = n;
	for (uint64_t i = 0; i < n; i++)
		if ((g[foff + i] & 3) != 0 && ld64(g + ooff + 8 * (i + 1)) - ld64(g + ooff + 8 * i) < R) {
			row = i;
			break;
		}
	cr_assert_lt(row, n);
	g[foff + row] = 0;
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK);
	uint8_t buf[12];
	cr_assert_eq(ibp_container_decode_row(c, row, buf), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_container_verify(c, 2), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "row") != NULL, "%s", ibp_last_error());
	ibp_container_close(c);
	/* a payload byte changed with its checksums fixed decodes to other data
	 * or is caught by verify; never a crash (exercised over every byte) */
	for (uint64_t i = poff; i < size; i++) {
		memcpy(g, f, size);
		g[i] ^= 0x21;
		refresh_checksums(g, size);
		/* the per-MiB table needs fixing too */
		st64(g + ld64(g + toff + 32 * find_section(g, 6) + 8), XXH3_64bits(g + poff, size - poff));
		refresh_checksums(g, size);
		cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK);
		ibp_status_t st = ibp_container_verify(c, 1);
		cr_assert(st == IBP_OK || st == IBP_ERR_CORRUPT, "status %d", st);
		ibp_container_close(c);
	}
	free(g);
	free(f);
	free(rows);
}

/* A packed row with a stray byte after its encoding decodes (the decoder
 * ignores it) but verify rejects it: rows must fill their extent exactly. */
Test(container, verify_requires_exact_extent, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t n = 30, R = 40, shape[2] = { n, R };
	ibp_codec_t *codec = make_codec(R, 4, 1, 31);
	uint8_t *rows = make_rows(codec, n, 32);
	uint8_t *dst = xcalloc(n * R), *flags = xcalloc(n);
	uint64_t *off = xcalloc((n + 1) * 8);
	cr_assert_eq(ibp_encode_batch(codec, rows, n, dst, n * R, off, flags, NULL, 1), IBP_OK);
	uint64_t row = n;
	for (uint64_t i = 0; i < n; i++)
		if ((flags[i] & 3) != 0 && off[i + 1] - off[i] < R) {
			row = i;
			break;
		}
	cr_assert_lt(row, n);
	uint8_t *pay = xcalloc(off[n] + 1);
	memcpy(pay, dst, off[row + 1]);
	pay[off[row + 1]] = 0;
	memcpy(pay + off[row + 1] + 1, dst + off[row + 1], off[n] - off[row + 1]);
	for (uint64_t i = row + 1; i <= n; i++)
		off[i]++;
	const char *p = path_in_tmp("extent.ibp");
	cr_assert_eq(ibp_container_write(p, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, pay, off[n],
					 off, flags, NULL), IBP_OK, "%s", ibp_last_error());
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK, "%s", ibp_last_error());
	check_rows(c, rows, n, R);
	cr_assert_eq(ibp_container_verify(c, 2), IBP_ERR_CORRUPT);
	char want[32];
	snprintf(want, sizeof(want), "row %llu", (unsigned long long)row);
	cr_assert(strstr(ibp_last_error(), want) != NULL, "%s", ibp_last_error());
	ibp_container_close(c);
	cr_assert_eq(ibp_container_open(p, IBP_OPEN_VERIFY, &c), IBP_ERR_CORRUPT);
	free(pay);
	free(dst);
	free(flags);
	free(off);
	free(rows);
	ibp_codec_free(codec);
}

/* A misaligned memory image is copied and still opens. */
Test(container, open_memory_misaligned, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(IBP_LAYOUT_PACKED, 2, &size, &rows, &n, &R);
	uint8_t *g = xcalloc(size + 8);
	memcpy(g + 3, f, size);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open_memory(g + 3, size, IBP_OPEN_VERIFY, &c), IBP_OK, "%s",
		     ibp_last_error());
	memset(g, 0, size + 8); /* the container holds its own copy */
	check_rows(c, rows, n, R);
	ibp_container_close(c);
	free(g);
	free(f);
	free(rows);
}

Test(container, host_alloc)
{
	void *p = ibp_host_alloc(1000, 4096);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 4096, 0);
	memset(p, 0xAB, 1000);
	ibp_host_free(p);
	p = ibp_host_alloc(0, 0);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % IBP_HOST_ALIGN_DEFAULT, 0);
	ibp_host_free(p);
	ibp_host_free(NULL);
	cr_assert_null(ibp_host_alloc(16, 3));
	cr_assert_null(ibp_host_alloc(UINT64_MAX - 8, 64));
}
