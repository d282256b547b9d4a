/* test_container.c - the `.ibp` container: round trips in both layouts and
 * every open mode, header fields, every single-byte flip and every
 * truncation of a small file, versioning rules, writer argument checks.
 *
 * Codecs are built with ibp_codec_create from seeded random masks, and rows
 * are generated to match them with some exceptions, so every row mode
 * (raw, clean, bitmap, list) appears without depending on training. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ibp.h"
#include "fixtures.h"
#include "io/container_internal.h"

/* ---- helpers ------------------------------------------------------------ */

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
	const char *path = tmpdir_path("rt.ibp");
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
		cr_assert_eq((uintptr_t)pl % 8, 0, "payload is 8-byte aligned (1.2)");
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
	const char *path = tmpdir_path("modes.ibp");
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

/* A payload written with O_DIRECT (the writer's path for large sections,
 * forced here from 1 byte) gives the file the buffered writer gives, byte
 * for byte: payloads shorter than the gap to the next 4096-byte boundary,
 * a few blocks with a head and a tail, and one past a 32 MiB write piece.
 * The tmp directory is on a disk file system here, so the direct path runs;
 * where O_DIRECT is refused, the fallback must give the same bytes too. */
Test(container, direct_write_same_bytes, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static const uint64_t nrows[] = { 1, 3, 700, 1500000 };
	for (size_t t = 0; t < sizeof(nrows) / sizeof(nrows[0]); t++) {
		uint64_t n = nrows[t], R = 24, shape[2] = { n, R };
		ibp_codec_t *codec = make_codec(R, 4, 1, 31 + t);
		uint8_t *rows = make_rows(codec, n, 32 + t);
		if (n == 1500000) { /* random rows: raw, so the payload passes 32 MiB */
			uint64_t x = 0x9E3779B97F4A7C15ull;
			for (uint64_t i = 0; i < n * R; i++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				rows[i] = (uint8_t)x;
			}
		}
		char pb[200], pd[200];
		snprintf(pb, sizeof(pb), "%s", tmpdir_path("buffered.ibp"));
		snprintf(pd, sizeof(pd), "%s", tmpdir_path("direct.ibp"));
		cr_assert_eq(ibp_pack_with_codec(pb, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, 0),
			     IBP_OK);
		ibpi_container_write_direct_min_set(1);
		ibp_status_t st = ibp_pack_with_codec(pd, codec, rows, IBP_DTYPE_U8, 2, shape,
						      IBP_LAYOUT_PACKED, 0);
		ibpi_container_write_direct_min_set(0);
		cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
		uint64_t nb, nd;
		uint8_t *fb = read_whole_file(pb, &nb), *fd = read_whole_file(pd, &nd);
		cr_assert_eq(nd, nb, "%llu rows: %llu bytes direct, %llu buffered", (unsigned long long)n,
			     (unsigned long long)nd, (unsigned long long)nb);
		cr_assert(!memcmp(fd, fb, nb), "%llu rows: the files differ", (unsigned long long)n);
		if (n == 1500000)
			cr_assert_gt(nb, 33ull << 20, "the last case must pass a write piece");
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(pd, IBP_OPEN_VERIFY, &c), IBP_OK, "%s", ibp_last_error());
		ibp_container_close(c);
		free(fb);
		free(fd);
		free(rows);
		ibp_codec_free(codec);
	}
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
	snprintf(a, sizeof(a), "%s", tmpdir_path("a.ibp"));
	snprintf(b, sizeof(b), "%s", tmpdir_path("b.ibp"));
	cr_assert_eq(ibp_container_write(a, codec, IBP_DTYPE_F32, 3, shape, IBP_LAYOUT_PACKED, dst, off[n],
					 off, flags, cl), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_pack_with_codec(b, codec, rows, IBP_DTYPE_F32, 3, shape, IBP_LAYOUT_PACKED, 2),
		     IBP_OK);
	uint64_t sa, sb;
	uint8_t *fa = read_whole_file(a, &sa), *fb = read_whole_file(b, &sb);
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
	const char *p = tmpdir_path("bad.ibp");
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
	const char *p = tmpdir_path("o.ibp");
	write_whole_file(p, "junk", 4);
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
	const char *p = tmpdir_path("t.ibp");
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
	const char *p = tmpdir_path("small.ibp");
	/* 1.1 layout: these tests edit its FLAGS/CLUSTERS/OFFSETS sections
	 * (1.2 files: tests/io/test_format12.c) */
	ibpi_container_write_minor_set(1);
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, layout, 1), IBP_OK);
	ibpi_container_write_minor_set(0);
	ibp_codec_free(codec);
	*rows_out = rows;
	*n_out = n;
	*R_out = R;
	return read_whole_file(p, size);
}

/* Flips every byte of the container image f (three ways): each result is
 * refused as corrupt or bad checksum, or, when only padding changed,
 * decodes to exactly `expect` (n rows of R bytes) row by row and through
 * a store. */
static void flip_all(const uint8_t *f, uint64_t size, const uint8_t *expect, uint64_t n, uint64_t R)
{
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
			check_rows(c, expect, n, R);
			check_store(c, expect, n, R);
			harmless++;
		}
	cr_assert_gt(rejected, 0);
	/* padding must be zero (FORMAT.md 2.1): no flip anywhere is harmless */
	cr_assert_eq(harmless, 0, "a flip of a padding byte was accepted");
	free(covered);
	free(g);
}

/* Every truncation of f, in memory and through files, is corrupt; so are
 * trailing bytes. */
static void truncate_all(const uint8_t *f, uint64_t size)
{
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
	const uint64_t lens[] = { 0, 1, 23, 100, 255, 256, 300, size / 2, size - 1 };
	const char *p = tmpdir_path("trunc.ibp");
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (unsigned mode = 0; mode < 2; mode++) {
			write_whole_file(p, f, lens[i]);
			ibp_container_t *c = NULL;
			ibp_status_t st = ibp_container_open(p, mode ? IBP_OPEN_MMAP : IBP_OPEN_READ, &c);
			cr_assert_eq(st, IBP_ERR_CORRUPT, "file truncated to %llu: %d (%s)",
				     (unsigned long long)lens[i], st, ibp_last_error());
			cr_assert(strstr(ibp_last_error(), p) != NULL, "message names the file");
		}
	uint8_t *longer = xcalloc(size + 64);
	memcpy(longer, f, size);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open_memory(longer, size + 64, 0, &c), IBP_ERR_CORRUPT);
	free(longer);
}

static void flip_every_byte(ibp_layout_t layout, unsigned k)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(layout, k, &size, &rows, &n, &R);
	cr_assert_lt(size, 8192);
	flip_all(f, size, rows, n, R);
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
		truncate_all(f, size);
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
	const char *p = tmpdir_path("magic.ibp");
	write_whole_file(p, f, size);
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), p) != NULL);
	cr_assert_eq(ibp_container_open(tmpdir_path("missing.ibp"), 0, &c), IBP_ERR_IO);
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

	/* unknown codec ids are unsupported; ids 2, 3 and 4 (exp, fp8, exp rows) on an IBP
	 * file contradict its chunk size, parameters and feature bits */
	for (uint32_t id = 0; id < 6; id++) {
		if (id == 1)
			continue;
		memcpy(g, f, size);
		st32(g + 112, id);
		refresh_checksums(g, size);
		cr_assert_eq(ibp_container_open_memory(g, size, 0, &c),
			     id >= 2 && id <= 4 ? IBP_ERR_CORRUPT : IBP_ERR_UNSUPPORTED, "codec %u: %s", id,
			     ibp_last_error());
	}
	/* the LOSSY feature bit belongs to fp8 files only */
	memcpy(g, f, size);
	st32(g + 24, 0x1u);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT, "%s", ibp_last_error());

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

/* After one payload byte at `at` (an address in the image c was opened
 * from) changed with every checksum fixed: the rows (IBP) or blocks (exp,
 * fp8) that do not hold it decode to `ref` exactly; verify fails exactly
 * when the one that holds it does not decode to its extent (the detail
 * names it), and a verified container decodes every row. */
static void check_damaged(const ibp_container_t *c, const uint8_t *at, const uint8_t *ref)
{
	const uint64_t R = ibp_container_row_bytes(c), n = ibp_container_nrows(c);
	uint8_t *row = xcalloc(R);
	ibp_status_t vst = ibp_container_verify(c, 1);
	cr_assert(vst == IBP_OK || vst == IBP_ERR_CORRUPT, "status %d", vst);
	char why[256];
	snprintf(why, sizeof(why), "%s", ibp_last_error());
	if (ibp_container_codec_id(c) == IBP_CODEC_IBP) {
		uint64_t hit = n;
		for (uint64_t j = 0; j < n; j++) {
			const uint8_t *src;
			uint64_t len;
			cr_assert_eq(ibp_container_row(c, j, &src, &len), IBP_OK);
			ibp_status_t st = ibp_container_decode_row(c, j, row);
			if (at >= src && at < src + len) {
				hit = j;
				if (vst == IBP_OK)
					cr_assert_eq(st, IBP_OK, "verified, but row %llu fails", (unsigned long long)j);
				continue;
			}
			cr_assert_eq(st, IBP_OK, "row %llu, not damaged: %s", (unsigned long long)j, ibp_last_error());
			cr_assert_arr_eq(row, ref + j * R, R, "row %llu, not damaged, decodes to other data",
					 (unsigned long long)j);
		}
		cr_assert_lt(hit, n, "the damaged byte is in no row");
		if (vst != IBP_OK) {
			char want[48];
			snprintf(want, sizeof(want), "row %llu", (unsigned long long)hit);
			cr_assert(strstr(why, want) != NULL, "verify names another row: %s", why);
		}
	} else {
		const uint64_t nb = ibp_container_nblocks(c), br = ibp_container_block_rows(c);
		uint8_t *blk = xcalloc(br * R);
		uint64_t hit = nb;
		for (uint64_t b = 0; b < nb; b++) {
			const uint8_t *src;
			uint64_t len, rows = n - b * br < br ? n - b * br : br;
			cr_assert_eq(ibp_container_block(c, b, &src, &len), IBP_OK);
			ibp_status_t st = ibp_container_decode_block(c, b, blk, 1);
			if (at >= src && at < src + len) {
				hit = b;
				cr_assert_eq(vst == IBP_OK, st == IBP_OK, "verify %d, block %llu decodes with %d", vst,
					     (unsigned long long)b, st);
				continue;
			}
			cr_assert_eq(st, IBP_OK, "block %llu, not damaged: %s", (unsigned long long)b, ibp_last_error());
			cr_assert_arr_eq(blk, ref + b * br * R, rows * R, "block %llu, not damaged, decodes to other data",
					 (unsigned long long)b);
		}
		if (hit == nb) /* padding between blocks: must be zero, so caught */
			cr_assert_eq(vst, IBP_ERR_CORRUPT, "a changed byte outside every block passed verify");
		free(blk);
	}
	free(row);
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
	/* a payload byte changed with its checksums fixed (every byte in turn):
	 * only its row can change, and verify fails exactly when that row no
	 * longer fills its extent (check_damaged) */
	for (uint64_t i = poff; i < size; i++) {
		memcpy(g, f, size);
		g[i] ^= 0x21;
		refresh_checksums(g, size);
		/* the sections' checksums fixed, the per-MiB table not: the
		 * payload block's checksum is found wrong (by open, or by verify) */
		ibp_status_t ost = ibp_container_open_memory(g, size, 0, &c);
		if (ost == IBP_OK) {
			cr_assert_eq(ibp_container_verify(c, 1), IBP_ERR_CHECKSUM, "byte %llu", (unsigned long long)i);
			ibp_container_close(c);
		} else {
			cr_assert_eq(ost, IBP_ERR_CHECKSUM, "byte %llu: %s", (unsigned long long)i, ibp_last_error());
		}
		/* the per-MiB table needs fixing too */
		st64(g + ld64(g + toff + 32 * find_section(g, 6) + 8), XXH3_64bits(g + poff, size - poff));
		refresh_checksums(g, size);
		cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK);
		check_damaged(c, g + i, rows);
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
	const char *p = tmpdir_path("extent.ibp");
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

/* ibp_container_image gives the file's bytes whichever way the container
 * was opened (read, mapped, borrowed, realigned copy), and they open again
 * as the same container (how Python pickles a store). */
Test(container, image_is_the_file, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_file(IBP_LAYOUT_PACKED, 2, &size, &rows, &n, &R);
	uint8_t *g = xcalloc(size + 8);
	memcpy(g + 3, f, size);
	for (int how = 0; how < 4; how++) {
		ibp_container_t *c = NULL;
		ibp_status_t st = how == 0   ? ibp_container_open(tmpdir_path("small.ibp"), IBP_OPEN_READ, &c)
				  : how == 1 ? ibp_container_open(tmpdir_path("small.ibp"), IBP_OPEN_MMAP, &c)
				  : how == 2 ? ibp_container_open_memory(f, size, 0, &c)
					     : ibp_container_open_memory(g + 3, size, 0, &c);
		cr_assert_eq(st, IBP_OK, "open %d: %s", how, ibp_last_error());
		uint64_t got = 0;
		const uint8_t *img = ibp_container_image(c, &got);
		cr_assert_eq(got, size, "open %d: %llu bytes, the file has %llu", how, (unsigned long long)got,
			     (unsigned long long)size);
		cr_assert(memcmp(img, f, size) == 0, "open %d: the image differs from the file", how);
		cr_assert_eq(ibp_container_image(c, NULL), img);
		uint8_t *copy = xcalloc(size);
		memcpy(copy, img, size);
		ibp_container_t *c2 = NULL;
		cr_assert_eq(ibp_container_open_memory(copy, size, IBP_OPEN_VERIFY, &c2), IBP_OK, "%s", ibp_last_error());
		check_rows(c2, rows, n, R);
		ibp_container_close(c2);
		free(copy);
		ibp_container_close(c);
	}
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

/* ---- exception values (Xvals) -------------------------------------------- */

/* Sparse 0/1 float32 rows: at C = 2 the upper half of 1.0f (3F80) is the
 * usual exception of every odd chunk, so training enables Xvals. */
static float *sparse_binary(uint64_t n, uint64_t cols, double p, uint64_t seed)
{
	rng_t r = { seed };
	float *x = xcalloc(n * cols * sizeof(float));
	for (uint64_t i = 0; i < n * cols; i++)
		x[i] = (double)(rnd(&r) >> 11) / 9007199254740992.0 < p ? 1.0f : 0.0f;
	return x;
}

static void check_xvals_equal(const ibp_codec_t *a, const ibp_codec_t *b)
{
	cr_assert_eq(ibp_codec_has_xval(a), ibp_codec_has_xval(b));
	uint64_t words = ibp_codec_nchunks(a) * ibp_codec_chunk_bytes(a);
	for (unsigned k = 0; k < ibp_codec_nclusters(a); k++) {
		cr_assert(memcmp(ibp_codec_mask(a, k), ibp_codec_mask(b, k), words) == 0);
		cr_assert(memcmp(ibp_codec_bitval(a, k), ibp_codec_bitval(b, k), words) == 0);
		cr_assert(memcmp(ibp_codec_xval(a, k), ibp_codec_xval(b, k), words) == 0, "cluster %u Xvals", k);
	}
}

Test(container, xval_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 800, cols = 300, R = cols * 4, shape[2] = { n, cols };
	float *x = sparse_binary(n, cols, 0.02, 7);
	for (unsigned k = 1; k <= 2; k++) {
		ibp_train_opts_t o;
		ibp_train_opts_default(&o);
		o.chunk_bytes = 2;
		o.clusters = k;
		o.nthreads = 2;
		ibp_codec_t *codec = NULL;
		cr_assert_eq(ibp_codec_train(x, n, R, &o, &codec), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(ibp_codec_has_xval(codec), 1, "sparse binary rows enable Xvals");
		for (int layout = 0; layout < 2; layout++) {
			const char *p = tmpdir_path("x.ibp");
			cr_assert_eq(ibp_pack_with_codec(p, codec, x, IBP_DTYPE_F32, 2, shape, (ibp_layout_t)layout, 2),
				     IBP_OK, "%s", ibp_last_error());
			uint64_t size;
			uint8_t *f = read_whole_file(p, &size);
			int xi = find_section(f, 7);
			cr_assert_geq(xi, 0, "Xval section written");
			cr_assert_eq(ld32(f + ld64(f + 128) + 32 * xi + 4) & 1, 1u, "and REQUIRED");
			free(f);
			ibp_container_t *c = NULL;
			cr_assert_eq(ibp_container_open(p, IBP_OPEN_MMAP | IBP_OPEN_VERIFY, &c), IBP_OK, "%s",
				     ibp_last_error());
			cr_assert_eq(ibp_codec_has_xval(ibp_container_codec(c)), 1);
			check_xvals_equal(codec, ibp_container_codec(c));
			check_rows(c, (const uint8_t *)x, n, R);
			check_store(c, (const uint8_t *)x, n, R);
		}
		ibp_codec_free(codec);
	}
	/* without Xvals no section is written: 1.0 readers still read the file */
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.chunk_bytes = 2;
	o.xval = 0;
	ibp_codec_t *codec = NULL;
	cr_assert_eq(ibp_codec_train(x, n, R, &o, &codec), IBP_OK);
	cr_assert_eq(ibp_codec_has_xval(codec), 0);
	const char *p = tmpdir_path("nox.ibp");
	cr_assert_eq(ibp_pack_with_codec(p, codec, x, IBP_DTYPE_F32, 2, shape, IBP_LAYOUT_PACKED, 2), IBP_OK);
	uint64_t size;
	uint8_t *f = read_whole_file(p, &size);
	cr_assert_eq(find_section(f, 7), -1);
	free(f);
	ibp_codec_free(codec);
	free(x);
}

/* A small file whose codec (made with ibp_codec_create_ex) has Xvals, and
 * rows with hits, misses and plain exceptions. */
static uint8_t *small_xval_file(uint64_t *size, uint8_t **rows_out, uint64_t *n_out, uint64_t *R_out)
{
	const uint64_t n = 40, R = 14, shape[2] = { n, R };
	const unsigned C = 2, k = 2;
	uint64_t D = (R + C - 1) / C;
	rng_t r = { 99 };
	uint8_t *m = xcalloc(k * D * C), *b = xcalloc(k * D * C), *xv = xcalloc(k * D * C);
	for (unsigned c = 0; c < k; c++)
		for (uint64_t j = 0; j < D; j++) {
			uint64_t in = inrow(R, C, j) & wmask(C);
			uint64_t mm = ((rnd(&r) | rnd(&r)) & in) | (wmask(C) & ~in);
			uint64_t bb = rnd(&r) & mm & in, xx = j % 2 ? rnd(&r) & mm & in : bb;
			word_set(m + c * D * C, C, j, mm);
			word_set(b + c * D * C, C, j, bb);
			word_set(xv + c * D * C, C, j, xx);
		}
	ibp_codec_t *codec = NULL;
	cr_assert_eq(ibp_codec_create_ex(R, C, k, m, b, xv, &codec), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(codec), 1);
	uint8_t *rows = make_rows(codec, n, 5);
	/* turn some chunks into hits: their masked bits take the Xval */
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t j = 1; j < D; j += 2)
			if (rnd(&r) % 3 == 0) {
				unsigned cl = (unsigned)(rnd(&r) % k);
				uint64_t mm = word_get(m + cl * D * C, C, j), xx = word_get(xv + cl * D * C, C, j);
				uint64_t v = 0, have = R - j * C < C ? R - j * C : C;
				memcpy(&v, rows + i * R + j * C, have);
				v = (v & ~mm) | xx;
				memcpy(rows + i * R + j * C, &v, have);
			}
	const char *p = tmpdir_path("xsmall.ibp");
	ibpi_container_write_minor_set(1); /* 1.1 layout, as small_file */
	cr_assert_eq(ibp_pack_with_codec(p, codec, rows, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, 1), IBP_OK,
		     "%s", ibp_last_error());
	ibpi_container_write_minor_set(0);
	ibp_codec_free(codec);
	free(m);
	free(b);
	free(xv);
	*rows_out = rows;
	*n_out = n;
	*R_out = R;
	return read_whole_file(p, size);
}

Test(container, xval_damaged, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t size, n, R;
	uint8_t *rows;
	uint8_t *f = small_xval_file(&size, &rows, &n, &R);
	cr_assert_lt(size, 8192);
	cr_assert_geq(find_section(f, 7), 0);
	flip_all(f, size, rows, n, R);
	truncate_all(f, size);

	uint8_t *g = xcalloc(size);
	ibp_container_t *c = NULL;
	uint64_t toff = ld64(f + 128);
	int xi = find_section(f, 7);
	uint64_t xoff = ld64(f + toff + 32 * xi + 8), mi = (uint64_t)find_section(f, 1);
	uint64_t moff = ld64(f + toff + 32 * mi + 8);
	/* an Xval bit outside the Mask, checksums fixed: corrupt */
	memcpy(g, f, size);
	uint64_t D = (R + 1) / 2;
	int found = 0;
	for (uint64_t j = 0; j < D && !found; j++) {
		uint64_t mm = word_get(g + moff + 16, 2, j);
		uint64_t out = ~mm & inrow(R, 2, j) & 0xFFFF;
		if (out) {
			word_set(g + xoff, 2, j, word_get(g + xoff, 2, j) | (out & (0 - out)));
			found = 1;
		}
	}
	cr_assert(found);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "metadata") != NULL, "%s", ibp_last_error());
	/* an Xval section of the wrong length */
	memcpy(g, f, size);
	st64(g + toff + 32 * xi + 16, ld64(g + toff + 32 * xi + 16) - 2);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_ERR_CORRUPT);
	/* an optional (unknown, skipped) id instead: rows with hits no longer
	 * decode to the original, but nothing reads out of bounds */
	memcpy(g, f, size);
	st32(g + toff + 32 * xi, 77);
	st32(g + toff + 32 * xi + 4, 0);
	refresh_checksums(g, size);
	cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(ibp_container_codec(c)), 0);
	ibp_container_close(c);
	free(g);
	free(f);
	free(rows);
}

/* ---- exponent codec (2) and FP8 (3) containers ------------------------- */

static double gauss(rng_t *r)
{
	double u = ((double)(rnd(r) >> 11) + 0.5) / 9007199254740992.0;
	double v = (double)(rnd(r) >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* n Gaussian values (sigma `sd`) as dt (f32; bf16 by truncation; f16 bit
 * patterns built from sign, a small exponent range and random mantissa). */
static uint8_t *value_data(ibp_dtype_t dt, uint64_t n, double sd, uint64_t seed)
{
	rng_t r = { seed };
	size_t es = ibp_dtype_size(dt);
	uint8_t *d = xcalloc(n * es);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)(gauss(&r) * sd);
		uint32_t u;
		memcpy(&u, &f, 4);
		if (dt == IBP_DTYPE_F32) {
			memcpy(d + 4 * i, &f, 4);
		} else if (dt == IBP_DTYPE_BF16) {
			uint16_t h = (uint16_t)(u >> 16);
			memcpy(d + 2 * i, &h, 2);
		} else {
			uint16_t h = (uint16_t)((rnd(&r) & 0x8000) | ((10 + rnd(&r) % 8) << 10) | (rnd(&r) & 0x3FF));
			memcpy(d + 2 * i, &h, 2);
		}
	}
	return d;
}

static float to_f32(const uint8_t *p, ibp_dtype_t dt)
{
	if (dt == IBP_DTYPE_F32) {
		float f;
		memcpy(&f, p, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, p, 2);
	if (dt == IBP_DTYPE_BF16) {
		uint32_t u = (uint32_t)h << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	/* f16 (finite, as value_data makes them) */
	int e = (h >> 10) & 31;
	double m = e ? 1.0 + (h & 0x3FF) / 1024.0 : (h & 0x3FF) / 1024.0;
	double v = ldexp(m, e ? e - 15 : -14);
	return (float)(h & 0x8000 ? -v : v);
}

/* Opens `p` every way and checks what every codec must satisfy: the
 * decoded tensor equals `expect` row by row, by blocks and through a
 * store (gather in a shuffled order with duplicates, decode_all). */
static void check_value_container(const char *p, ibp_codec_id_t id, ibp_dtype_t dt, unsigned ndim,
				  const uint64_t *shape, uint64_t block_rows, const uint8_t *expect)
{
	uint64_t n = shape[0], R = ibp_dtype_size(dt);
	for (unsigned i = 1; i < ndim; i++)
		R *= shape[i];
	const unsigned modes[] = { IBP_OPEN_READ, IBP_OPEN_MMAP | IBP_OPEN_VERIFY };
	for (unsigned mi = 0; mi < 2; mi++) {
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(p, modes[mi], &c), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(ibp_container_codec_id(c), id);
		cr_assert_eq(ibp_container_lossy(c), id == IBP_CODEC_FP8);
		cr_assert_eq(ibp_container_dtype(c), dt);
		cr_assert_eq(ibp_container_nrows(c), n);
		cr_assert_eq(ibp_container_row_bytes(c), R);
		cr_assert_eq(ibp_container_ndim(c), ndim);
		cr_assert_null(ibp_container_codec(c));
		cr_assert_null(ibp_container_flags(c));
		cr_assert_null(ibp_container_offsets(c));
		cr_assert_eq(ibp_container_chunk_bytes(c), 0);
		cr_assert_eq(ibp_container_version_minor(c), IBP_FORMAT_MINOR);
		cr_assert_eq(ibp_container_block_rows(c), block_rows);
		uint64_t nb = ibp_container_nblocks(c);
		cr_assert_eq(nb, (n + block_rows - 1) / block_rows);
		cr_assert_eq(ibp_container_chunk_elems(c), block_rows * (R / ibp_dtype_size(dt)));
		cr_assert_eq(ibp_container_block_offsets(c) == NULL, id == IBP_CODEC_FP8);
		uint64_t plen;
		const uint8_t *pl = ibp_container_payload(c, &plen);
		cr_assert_eq((uintptr_t)pl % 8, 0);
		const uint8_t *src;
		uint64_t len;
		cr_assert_eq(ibp_container_row(c, 0, &src, &len), IBP_ERR_UNSUPPORTED);
		cr_assert_eq(ibp_container_decode_block(c, nb, NULL, 1), IBP_ERR_OUT_OF_RANGE);
		cr_assert_eq(ibp_container_verify(c, 2), IBP_OK, "%s", ibp_last_error());
		/* by blocks */
		uint8_t *out = xcalloc(n * R + 1);
		for (uint64_t b = 0; b < nb; b++) {
			cr_assert_eq(ibp_container_block(c, b, &src, &len), IBP_OK);
			cr_assert(src >= pl && src + len <= pl + plen);
			cr_assert_eq(ibp_container_decode_block(c, b, out + b * block_rows * R, b % 2),
				     IBP_OK, "%s", ibp_last_error());
		}
		cr_assert(n == 0 || memcmp(out, expect, n * R) == 0, "blocks decode to the expected data");
		/* row by row */
		check_rows(c, expect, n, R);
		if (mi == 0) {
			ibp_container_close(c);
			free(out);
			continue;
		}
		/* through a store: shuffled ids with duplicates, 1 and 3 threads */
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_from_container(c, &s), IBP_OK, "%s", ibp_last_error());
		cr_assert_null(ibp_store_codec(s));
		uint64_t m = 2 * n + 3;
		int64_t *ids = xcalloc(m * sizeof(int64_t));
		rng_t r = { n + 3 };
		for (uint64_t i = 0; n && i < m; i++)
			ids[i] = (int64_t)(i % 3 == 0 ? rnd(&r) % n : (i * 7) % n);
		uint8_t *g = xcalloc(m * R + 1);
		for (int t = 1; t <= 3 && n; t += 2) {
			memset(g, 0, m * R);
			cr_assert_eq(ibp_store_gather(s, ids, m, g, t), IBP_OK, "%s", ibp_last_error());
			for (uint64_t i = 0; i < m; i++)
				cr_assert(memcmp(g + i * R, expect + (uint64_t)ids[i] * R, R) == 0,
					  "gather position %llu (row %lld), %d threads", (unsigned long long)i,
					  (long long)ids[i], t);
		}
		for (int t = 0; t <= 2; t++) {
			memset(out, 0, n * R);
			cr_assert_eq(ibp_store_decode_all(s, out, t), IBP_OK, "%s", ibp_last_error());
			cr_assert(n == 0 || memcmp(out, expect, n * R) == 0, "decode_all, %d threads", t);
		}
		int64_t bad = (int64_t)n;
		cr_assert_eq(ibp_store_gather(s, &bad, 1, g, 1), IBP_ERR_OUT_OF_RANGE);
		cr_assert_eq(ibp_store_verify(s, 0), IBP_OK);
		ibp_store_close(s);
		free(ids);
		free(g);
		free(out);
	}
}

typedef struct vcase {
	ibp_dtype_t dt;
	unsigned ndim;
	uint64_t shape[3];
	uint64_t block_rows; /* 0 = default */
} vcase_t;

static const vcase_t vcases[] = {
	{ IBP_DTYPE_BF16, 2, { 300, 64 }, 0 },     /* one block */
	{ IBP_DTYPE_BF16, 2, { 301, 96 }, 40 },    /* several, a short last one */
	{ IBP_DTYPE_F16, 3, { 50, 8, 16 }, 7 },
	{ IBP_DTYPE_F32, 2, { 129, 33 }, 16 },
	{ IBP_DTYPE_F32, 1, { 5000 }, 1024 },      /* one element per row */
	{ IBP_DTYPE_BF16, 2, { 0, 16 }, 0 },       /* no rows */
	{ IBP_DTYPE_BF16, 2, { 3, 20000 }, 1 },    /* rows longer than a table group */
};

static uint64_t vcase_R(const vcase_t *v)
{
	uint64_t R = ibp_dtype_size(v->dt);
	for (unsigned i = 1; i < v->ndim; i++)
		R *= v->shape[i];
	return R;
}

Test(container, exp_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (size_t ci = 0; ci < sizeof(vcases) / sizeof(vcases[0]); ci++)
		for (int tm = 0; tm < 2; tm++) {
			const vcase_t *v = &vcases[ci];
			uint64_t R = vcase_R(v), n = v->shape[0];
			uint8_t *d = value_data(v->dt, n * R / ibp_dtype_size(v->dt), 0.02, 11 + ci);
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.table_mode = tm ? IBP_EXP_TABLE_HISTOGRAM : IBP_EXP_TABLE_SIGMA;
			o.nthreads = 2;
			const char *p = tmpdir_path("e.ibp");
			cr_assert_eq(ibp_pack_exp(p, d, v->dt, v->ndim, v->shape, &o, v->block_rows), IBP_OK,
				     "case %zu: %s", ci, ibp_last_error());
			uint64_t br = v->block_rows ? v->block_rows
						    : ibp_block_rows_default(R / ibp_dtype_size(v->dt), n);
			check_value_container(p, IBP_CODEC_EXP, v->dt, v->ndim, v->shape, br, d);
			ibp_container_t *c = NULL;
			cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK);
			cr_assert_eq(ibp_container_exp_table_mode(c), o.table_mode);
			uint64_t plen;
			ibp_container_payload(c, &plen);
			if (n * R >= 1 << 16)
				cr_assert_lt(plen, n * R * 9 / 10, "case %zu: Gaussian data compresses", ci);
			ibp_fp8_opts_t fo;
			cr_assert_eq(ibp_container_fp8_opts(c, &fo), IBP_ERR_INVALID_ARG);
			ibp_container_close(c);
			free(d);
		}
}

/* The FP8 container decodes to exactly what ibp_fp8_decode makes of each
 * block's stream, and that lies within the bound of docs/CODECS.md 3.3. */
Test(container, fp8_round_trip, .init = make_tmpdir, .fini = remove_tmpdir)
{
	static const struct {
		ibp_fp8_format_t fmt;
		uint32_t B;
		int had, ada;
	} opts[] = { { IBP_FP8_E4M3, 256, 1, 1 }, { IBP_FP8_E5M2, 16, 1, 0 }, { IBP_FP8_E4M3, 64, 0, 1 },
		     { IBP_FP8_E5M2, 1024, 0, 0 } };
	for (size_t ci = 0; ci < sizeof(vcases) / sizeof(vcases[0]); ci++) {
		const vcase_t *v = &vcases[ci];
		const size_t oi = ci % 4;
		uint64_t R = vcase_R(v), n = v->shape[0], es = ibp_dtype_size(v->dt), row_elems = R / es;
		uint64_t elems = n * row_elems;
		uint8_t *d = value_data(v->dt, elems, 0.02, 31 + ci);
		ibp_fp8_opts_t o;
		ibp_fp8_opts_default(&o);
		o.format = opts[oi].fmt;
		o.block = opts[oi].B;
		o.hadamard = opts[oi].had;
		o.adaptive = opts[oi].ada;
		o.nthreads = 2;
		const char *p = tmpdir_path("f.ibp");
		cr_assert_eq(ibp_pack_fp8(p, d, v->dt, v->ndim, v->shape, &o, v->block_rows), IBP_OK, "case %zu: %s",
			     ci, ibp_last_error());
		uint64_t br = v->block_rows ? v->block_rows : ibp_block_rows_default(row_elems, n);
		/* reference: each block encoded and decoded by the codec itself */
		uint64_t chunk = br * row_elems, cap = 0;
		cr_assert_eq(ibp_fp8_encoded_size(&o, chunk, &cap), IBP_OK);
		uint8_t *stream = xcalloc(cap), *ref = xcalloc(elems * es + 1);
		for (uint64_t b = 0; b * chunk < elems; b++) {
			uint64_t k = elems - b * chunk < chunk ? elems - b * chunk : chunk, got;
			cr_assert_eq(ibp_fp8_encode(d + b * chunk * es, v->dt, k, &o, stream, cap, &got), IBP_OK);
			cr_assert_eq(ibp_fp8_decode(stream, got, v->dt, k, ref + b * chunk * es, 1), IBP_OK);
		}
		check_value_container(p, IBP_CODEC_FP8, v->dt, v->ndim, v->shape, br, ref);
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK);
		ibp_fp8_opts_t got;
		cr_assert_eq(ibp_container_fp8_opts(c, &got), IBP_OK);
		cr_assert(got.format == o.format && got.block == o.block && got.hadamard == o.hadamard &&
			  got.adaptive == o.adaptive);
		ibp_container_close(c);
		/* error bound per B-element block of each stream (f32 exactly as
		 * documented; bf16/f16 output adds half an ULP of the narrow type) */
		double m = o.format == IBP_FP8_E4M3 ? 3 : 2, qmax = o.format == IBP_FP8_E4M3 ? 448 : 57344;
		double minsub = o.format == IBP_FP8_E4M3 ? ldexp(1, -9) : ldexp(1, -16);
		double rel = ldexp(1, -(int)(m + 1)) + minsub * sqrt((double)o.block) / (2 * qmax) + 1e-4;
		if (v->dt == IBP_DTYPE_BF16)
			rel += ldexp(1, -8);
		else if (v->dt == IBP_DTYPE_F16)
			rel += ldexp(1, -11) + 1e-3; /* and f16 denormals near zero */
		for (uint64_t b = 0; b * chunk < elems; b++)
			for (uint64_t q = b * chunk; q < elems && q < (b + 1) * chunk; q += o.block) {
				double e2 = 0, g2 = 0;
				for (uint64_t i = q; i < q + o.block && i < (b + 1) * chunk && i < elems; i++) {
					double a = to_f32(d + i * es, v->dt), r = to_f32(ref + i * es, v->dt);
					e2 += (r - a) * (r - a);
					g2 += a * a;
				}
				cr_assert_leq(sqrt(e2), sqrt(g2) * rel + 1e-30, "case %zu block at %llu: error %g of %g",
					      ci, (unsigned long long)q, sqrt(e2), sqrt(g2));
			}
		uint64_t plen = 0;
		cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK);
		ibp_container_payload(c, &plen);
		if (elems >= 4096)
			cr_assert_lt(plen, elems * es * 3 / 4, "case %zu: fp8 is about 1 byte per element", ci);
		ibp_container_close(c);
		free(stream);
		free(ref);
		free(d);
	}
}

/* A small exp file: 2 coded blocks of 1024 bf16 elements (and a raw one). */
static uint8_t *small_exp_file(uint64_t *size, uint8_t **data, uint64_t *n, uint64_t *R)
{
	const uint64_t shape[2] = { 36, 64 };
	uint8_t *d = value_data(IBP_DTYPE_BF16, 36 * 64, 1.0, 5);
	const char *p = tmpdir_path("esmall.ibp");
	ibpi_container_write_minor_set(1); /* 1.1 layout, as small_file */
	cr_assert_eq(ibp_pack_exp(p, d, IBP_DTYPE_BF16, 2, shape, NULL, 16), IBP_OK, "%s", ibp_last_error());
	ibpi_container_write_minor_set(0);
	*data = d;
	*n = 36;
	*R = 128;
	return read_whole_file(p, size);
}

/* A small fp8 file: 3 streams, the last one short; `ref` gets the decoded
 * values. */
static uint8_t *small_fp8_file(uint64_t *size, uint8_t **ref, uint64_t *n, uint64_t *R)
{
	const uint64_t shape[2] = { 20, 32 };
	uint8_t *d = value_data(IBP_DTYPE_F32, 20 * 32, 1.0, 6);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.block = 16;
	const char *p = tmpdir_path("fsmall.ibp");
	ibpi_container_write_minor_set(1); /* 1.1 layout, as small_file */
	cr_assert_eq(ibp_pack_fp8(p, d, IBP_DTYPE_F32, 2, shape, &o, 8), IBP_OK, "%s", ibp_last_error());
	ibpi_container_write_minor_set(0);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(p, 0, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_nblocks(c), 3);
	uint8_t *out = xcalloc(20 * 128);
	for (uint64_t b = 0; b < 3; b++)
		cr_assert_eq(ibp_container_decode_block(c, b, out + b * 8 * 128, 1), IBP_OK);
	check_rows(c, out, 20, 128); /* each row alone: its block's values */
	ibp_container_close(c);
	free(d);
	*ref = out;
	*n = 20;
	*R = 128;
	return read_whole_file(p, size);
}

Test(container, exp_fp8_damaged, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int codec = 0; codec < 2; codec++) {
		uint64_t size, n, R;
		uint8_t *expect;
		uint8_t *f = codec ? small_fp8_file(&size, &expect, &n, &R) : small_exp_file(&size, &expect, &n, &R);
		cr_assert_lt(size, 12288);
		flip_all(f, size, expect, n, R);
		truncate_all(f, size);
		free(f);
		free(expect);
	}
}

/* Header fields and sections that lie, with every checksum fixed. */
Test(container, exp_fp8_bad_structure, .init = make_tmpdir, .fini = remove_tmpdir)
{
	uint64_t esize, fsize, n, R;
	uint8_t *e_data, *f_ref;
	uint8_t *e = small_exp_file(&esize, &e_data, &n, &R);
	uint8_t *f = small_fp8_file(&fsize, &f_ref, &n, &R);
	uint8_t *g = xcalloc(esize > fsize ? esize : fsize);
	ibp_container_t *c = NULL;
#define TRY_E(expect_st, edit)                                                                          \
	do {                                                                                            \
		memcpy(g, e, esize);                                                                    \
		edit;                                                                                   \
		refresh_checksums(g, esize);                                                            \
		ibp_status_t st_ = ibp_container_open_memory(g, esize, 0, &c);                          \
		cr_assert_eq(st_, (expect_st), "exp: %s: %d (%s)", #edit, st_, ibp_last_error());      \
		if (st_ == IBP_OK)                                                                      \
			ibp_container_close(c);                                                         \
	} while (0)
#define TRY_F(expect_st, edit)                                                                          \
	do {                                                                                            \
		memcpy(g, f, fsize);                                                                    \
		edit;                                                                                   \
		refresh_checksums(g, fsize);                                                            \
		ibp_status_t st_ = ibp_container_open_memory(g, fsize, 0, &c);                          \
		cr_assert_eq(st_, (expect_st), "fp8: %s: %d (%s)", #edit, st_, ibp_last_error());      \
		if (st_ == IBP_OK)                                                                      \
			ibp_container_close(c);                                                         \
	} while (0)
	TRY_E(IBP_OK, (void)0);
	TRY_F(IBP_OK, (void)0);
	cr_assert_eq(ld32(f + 24), 1u, "fp8 sets LOSSY");
	cr_assert_eq(ld32(e + 24), 0u);
	/* LOSSY must match the codec */
	TRY_F(IBP_ERR_CORRUPT, st32(g + 24, 0));
	TRY_E(IBP_ERR_CORRUPT, st32(g + 24, 1));
	/* parameters: a later version is unsupported, nonsense is corrupt */
	TRY_E(IBP_ERR_UNSUPPORTED, st32(g + 160, 2));
	TRY_F(IBP_ERR_UNSUPPORTED, st32(g + 160, 2));
	TRY_E(IBP_ERR_CORRUPT, st32(g + 164, 4));                   /* table mode (3: rANS) */
	TRY_E(IBP_ERR_CORRUPT, st64(g + 168, 64 * 16 + 1));          /* chunk not whole rows */
	TRY_E(IBP_ERR_CORRUPT, st64(g + 168, 0));
	TRY_E(IBP_ERR_CORRUPT, st64(g + 176, 2));                   /* block count */
	TRY_E(IBP_ERR_CORRUPT, g[200] = 1);                         /* reserved params */
	TRY_F(IBP_ERR_CORRUPT, st32(g + 164, 2));                   /* format */
	TRY_F(IBP_ERR_CORRUPT, st32(g + 168, 48));                  /* block size */
	TRY_F(IBP_ERR_CORRUPT, st32(g + 168, 8));
	TRY_F(IBP_ERR_CORRUPT, st32(g + 172, 4));                   /* flags */
	TRY_F(IBP_ERR_CORRUPT, st64(g + 184, 4));                   /* stream count */
	TRY_F(IBP_ERR_CORRUPT, st64(g + 176, 16 * 32));             /* chunk: other payload length */
	TRY_F(IBP_ERR_CORRUPT, g[210] = 1);
	TRY_F(IBP_ERR_CORRUPT, st32(g + 168, 32));                  /* other block: other length */
	/* header fields that these codecs fix */
	TRY_E(IBP_ERR_CORRUPT, st32(g + 116, 1));                   /* inplace */
	TRY_E(IBP_ERR_CORRUPT, st32(g + 120, 2));                   /* a chunk size */
	TRY_E(IBP_ERR_UNSUPPORTED, st32(g + 32, IBP_DTYPE_U16));    /* dtype the codec does not take */
	TRY_F(IBP_ERR_UNSUPPORTED, st32(g + 32, IBP_DTYPE_I32));
	TRY_E(IBP_ERR_CORRUPT, st64(g + 40, 37));                   /* rows: other block count */
	TRY_E(IBP_ERR_CORRUPT, st64(g + 40, 1ull << 60));            /* absurd rows */
	TRY_F(IBP_ERR_CORRUPT, st64(g + 40, 21));
	/* exp block offsets */
	uint64_t toff = ld64(e + 128);
	int oi = find_section(e, 4);
	cr_assert_geq(oi, 0);
	uint64_t ooff = ld64(e + toff + 32 * oi + 8);
	TRY_E(IBP_ERR_CORRUPT, st64(g + ooff + 8, ld64(g + ooff + 8) + 64));   /* not 128-aligned */
	/* a boundary moved within the plausible sizes: open accepts it, the
	 * blocks no longer fill their extents, so decode and verify refuse */
	TRY_E(IBP_OK, st64(g + ooff + 8, ld64(g + ooff + 8) + 128));
	cr_assert_eq(ibp_container_open_memory(g, esize, 0, &c), IBP_OK);
	cr_assert_eq(ibp_container_verify(c, 1), IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "exp block 0") != NULL, "%s", ibp_last_error());
	uint8_t rowbuf[128];
	cr_assert_eq(ibp_container_decode_row(c, 0, rowbuf), IBP_ERR_CORRUPT);
	ibp_container_close(c);
	TRY_E(IBP_ERR_CORRUPT, st64(g + ooff + 8, ld64(g + ooff + 8) + 2048));
	TRY_E(IBP_ERR_CORRUPT, st64(g + ooff, 128));
	TRY_E(IBP_ERR_CORRUPT, st64(g + ooff + 8, 0));
	/* offsets missing (an optional unknown id is skipped) */
	TRY_E(IBP_ERR_CORRUPT, (st32(g + toff + 32 * oi, 200), st32(g + toff + 32 * oi + 4, 0)));
	cr_assert(strstr(ibp_last_error(), "offsets") != NULL, "%s", ibp_last_error());
	/* sections these codecs do not use: metadata, flags, Xvals */
	for (uint32_t id = 1; id <= 7; id += 6) {
		TRY_E(IBP_ERR_CORRUPT, st32(g + toff + 32 * oi, id));
		cr_assert(strstr(ibp_last_error(), "the exp codec has none") != NULL, "%s", ibp_last_error());
	}
	TRY_F(IBP_ERR_CORRUPT, st32(g + ld64(g + 128) + 32 * find_section(g, 6), 2));
	/* block payload bytes changed with all checksums fixed: only their
	 * block can change, and verify fails exactly when it does not decode
	 * (check_damaged) */
	for (int codec = 0; codec < 2; codec++) {
		const uint8_t *src = codec ? f : e;
		uint64_t size = codec ? fsize : esize;
		uint64_t t = ld64(src + 128);
		int pi = find_section(src, 5), si = find_section(src, 6);
		uint64_t poff = ld64(src + t + 32 * pi + 8), plen = ld64(src + t + 32 * pi + 16);
		for (uint64_t i = poff; i < poff + plen; i++) {
			memcpy(g, src, size);
			g[i] ^= (uint8_t)(0x21 + i);
			st64(g + ld64(g + t + 32 * si + 8), XXH3_64bits(g + poff, plen));
			refresh_checksums(g, size);
			cr_assert_eq(ibp_container_open_memory(g, size, 0, &c), IBP_OK, "%s", ibp_last_error());
			check_damaged(c, g + i, codec ? f_ref : e_data);
			ibp_container_close(c);
		}
	}
#undef TRY_E
#undef TRY_F
	free(g);
	free(e);
	free(f);
	free(e_data);
	free(f_ref);
}

Test(container, exp_fp8_writer_rejects_bad_arguments, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const char *p = tmpdir_path("w.ibp");
	uint64_t shape[2] = { 10, 8 };
	uint8_t *d = value_data(IBP_DTYPE_F32, 80, 1.0, 3);
	/* dtypes the value codecs do not take */
	cr_assert_eq(ibp_pack_exp(p, d, IBP_DTYPE_U32, 2, shape, NULL, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_pack_fp8(p, d, IBP_DTYPE_I16, 2, shape, NULL, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_pack_exp(p, NULL, IBP_DTYPE_F32, 2, shape, NULL, 0), IBP_ERR_INVALID_ARG);
	ibp_fp8_opts_t fo;
	ibp_fp8_opts_default(&fo);
	fo.block = 100;
	cr_assert_eq(ibp_pack_fp8(p, d, IBP_DTYPE_F32, 2, shape, &fo, 0), IBP_ERR_INVALID_ARG);
	/* encoded writers: chunk not whole rows, bad offsets, wrong payload size */
	uint64_t off[3] = { 0, 128, 256 };
	uint8_t blocks[256] = { 0 };
	cr_assert_eq(ibp_container_write_exp(p, IBP_DTYPE_F32, 2, shape, 12, IBP_EXP_TABLE_SIGMA, blocks, off),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write_exp(p, IBP_DTYPE_F32, 2, shape, 0, IBP_EXP_TABLE_SIGMA, blocks, off),
		     IBP_ERR_INVALID_ARG);
	off[1] = 100;
	cr_assert_eq(ibp_container_write_exp(p, IBP_DTYPE_F32, 2, shape, 40, IBP_EXP_TABLE_SIGMA, blocks, off),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write_exp(p, IBP_DTYPE_F32, 2, shape, 40, (ibp_exp_table_mode_t)9, blocks,
					     off), IBP_ERR_INVALID_ARG);
	ibp_fp8_opts_default(&fo);
	cr_assert_eq(ibp_container_write_fp8(p, IBP_DTYPE_F32, 2, shape, 40, &fo, blocks, 100),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_container_write_fp8(p, IBP_DTYPE_F64, 2, shape, 40, &fo, blocks, 100),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(access(p, F_OK), -1, "a failed write left a file");
	/* the writers' own blocks pass the same checks */
	cr_assert_eq(ibp_pack_exp(p, d, IBP_DTYPE_F32, 2, shape, NULL, 3), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_pack_fp8(p, d, IBP_DTYPE_F32, 2, shape, NULL, 3), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_pack_exp("/nonexistent-dir/x.ibp", d, IBP_DTYPE_F32, 2, shape, NULL, 0), IBP_ERR_IO);
	free(d);
}

/* Default blocks: whole rows, about 4 Mi elements, never more rows than
 * there are. */
Test(container, block_rows_default)
{
	cr_assert_eq(ibp_block_rows_default(384, 1000000), (1u << 22) / 384);
	cr_assert_eq(ibp_block_rows_default(384, 10), 10);
	cr_assert_eq(ibp_block_rows_default(1u << 23, 10), 1);
	cr_assert_eq(ibp_block_rows_default(1, 0), 1u << 22);
}

/* A file of the first exp-rows layout (rows behind u64 offsets, K = 0 in
 * its codec parameters) is refused as unsupported with what to do, not as
 * corrupt; K below 8 is corrupt. */
Test(container, exp_rows_old_layout_refused, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t shape[2] = { 16, 64 };
	float a[16 * 64];
	for (unsigned i = 0; i < 16 * 64; i++)
		a[i] = (float)i * 0.01f - 3.0f;
	cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("x.ibp"), a, IBP_DTYPE_F32, 2, shape, 0), IBP_OK, "%s",
		     ibp_last_error());
	FILE *fp = fopen(tmpdir_path("x.ibp"), "rb");
	cr_assert(fp);
	fseek(fp, 0, SEEK_END);
	const uint64_t size = (uint64_t)ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *f = malloc(size);
	cr_assert_eq(fread(f, 1, size, fp), size);
	fclose(fp);
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open_memory(f, size, IBP_OPEN_VERIFY, &c), IBP_OK, "%s", ibp_last_error());
	ibp_container_close(c);
	cr_assert_geq(ld64(f + 160 + 16), 8); /* K */
	st64(f + 160 + 16, 0);
	refresh_checksums(f, size);
	c = NULL;
	cr_assert_eq(ibp_container_open_memory(f, size, 0, &c), IBP_ERR_UNSUPPORTED);
	cr_assert(strstr(ibp_last_error(), "row-offset layout") && strstr(ibp_last_error(), "pack it again"), "%s",
		  ibp_last_error());
	st64(f + 160 + 16, 7);
	refresh_checksums(f, size);
	cr_assert_eq(ibp_container_open_memory(f, size, 0, &c), IBP_ERR_CORRUPT);
	free(f);
}
