/* fixtures.c - see fixtures.h. */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "testutil.h"

uint64_t rnd(rng_t *r)
{
	return tu_splitmix64(&r->s);
}

void *xcalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	cr_assert_not_null(p, "out of memory (%zu bytes)", n);
	return p;
}

uint64_t wmask(unsigned C)
{
	return C == 8 ? ~0ull : (1ull << (8 * C)) - 1;
}

uint64_t word_get(const uint8_t *a, unsigned C, uint64_t j)
{
	uint64_t v = 0;
	memcpy(&v, a + j * C, C);
	return v;
}

void word_set(uint8_t *a, unsigned C, uint64_t j, uint64_t v)
{
	memcpy(a + j * C, &v, C);
}

uint64_t inrow(uint64_t R, unsigned C, uint64_t j)
{
	uint64_t have = R - j * C < C ? R - j * C : C;
	return have >= 8 ? ~0ull : (1ull << (8 * have)) - 1;
}

ibp_codec_t *make_codec(uint64_t R, unsigned C, unsigned k, uint64_t seed)
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

uint8_t *make_rows(const ibp_codec_t *codec, uint64_t n, uint64_t seed)
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

uint8_t *graded_rows(uint64_t seed, uint64_t n, uint64_t R)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *rows = tu_xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t p = 0; p < R; p++) {
			uint8_t x = 0;
			for (unsigned b = 0; b < 8; b++) {
				/* Bit (p, b) is 1 with probability q: from near-constant to random. */
				double q = 0.5 * (double)((p * 8 + b) % 23) / 22.0;
				x |= (uint8_t)((tu_uniform(&r) < q) << b);
			}
			rows[i * R + p] = x;
		}
	return rows;
}

char tmpdir[96];

void make_tmpdir(void)
{
	/* the program's name keeps the suites apart: /tmp/ibp_test_store_XXXXXX */
	snprintf(tmpdir, sizeof(tmpdir), "%s/ibp_%.32s_XXXXXX", tu_tmp_root(), program_invocation_short_name);
	cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp %s: %s", tmpdir, strerror(errno));
}

void remove_tmpdir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

const char *tmpdir_path(const char *name)
{
	static char bufs[4][160];
	static int i;
	char *b = bufs[i++ % 4];
	snprintf(b, sizeof(bufs[0]), "%s/%s", tmpdir, name);
	return b;
}

uint8_t *read_whole_file(const char *path, uint64_t *size)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0, "%s", path);
	long n = ftell(f);
	cr_assert_geq(n, 0, "%s", path);
	cr_assert_eq(fseek(f, 0, SEEK_SET), 0, "%s", path);
	uint8_t *p = xcalloc((size_t)n + 1);
	cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n, "%s: short read", path);
	fclose(f);
	*size = (uint64_t)n;
	return p;
}

void write_whole_file(const char *path, const void *p, uint64_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(p, 1, (size_t)n, f), (size_t)n, "%s: short write", path);
	cr_assert_eq(fclose(f), 0, "%s", path);
}
