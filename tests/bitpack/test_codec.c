/* test_codec.c - the row codec: every chunk size and row length 1..300 plus
 * a spread up to 4099, adversarial rows, trained-like and random masks,
 * with and without Xvals (enabled/disabled mixes, hits and misses), every
 * mode, BMI2 == portable == an independent bit-by-bit reference encoder
 * (written from docs/FORMAT.md), corrupt input, batches, creation errors,
 * the paper layout size and the parallel-for helper. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "ibp/unstable.h"
#include "bitpack/codec_internal.h"
#include "util/cpu.h"
#include "util/parallel.h"
#include "testutil.h"

/* Criterion reports every passing assertion to its runner; in hot loops
 * only failures go through it. */
#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond))                          \
			cr_assert_fail(__VA_ARGS__);  \
	} while (0)

static int have_bmi2(void)
{
#if defined(__x86_64__)
	return ibpi_cpu()->bmi2;
#else
	return 0;
#endif
}

static int have_avx512(void)
{
#if defined(__x86_64__)
	return ibpi_cpu()->avx512vbmi && ibpi_cpu()->bmi2;
#else
	return 0;
#endif
}

static int have_avx2(void)
{
#if defined(__x86_64__)
	return ibpi_cpu()->avx2 && ibpi_cpu()->bmi2;
#else
	return 0;
#endif
}

/* ------------------------------------------------------------------ */
/* reference encoder: bit by bit, straight from FORMAT.md §1            */
/* ------------------------------------------------------------------ */

static void put_bits(uint8_t *p, uint64_t *k, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++, (*k)++)
		if ((v >> i) & 1)
			p[*k / 8] |= (uint8_t)(1u << (*k % 8));
}

static unsigned bitlen(uint64_t v)
{
	unsigned n = 0;
	while (v) {
		n++;
		v >>= 1;
	}
	return n;
}

/* Xval hits and misses the reference encoder wrote (coverage checks). */
static uint64_t g_xhits, g_xmisses;

/* Encodes `row` with mask/bitval/xval of one cluster (xval NULL = none);
 * out must hold R bytes (zeroed here). Returns the length and sets *mode. */
static uint64_t ref_encode(const uint8_t *row, uint64_t R, unsigned C, const uint8_t *mask,
			   const uint8_t *bitval, const uint8_t *xval, uint8_t *out, uint8_t *mode)
{
	const uint64_t D = (R + C - 1) / C, W = 8 * C;
	uint8_t *padded = tu_xcalloc(D * C);
	memcpy(padded, row, R);
	uint64_t S = 0, E = 0, n = 0;
	for (uint64_t j = 0; j < D; j++) {
		uint64_t x = tu_word(padded, C, j), m = tu_word(mask, C, j), b = tu_word(bitval, C, j);
		uint64_t xh = xval ? tu_word(xval, C, j) : b;
		unsigned e = (unsigned)__builtin_popcountll(m);
		S += W - e;
		if ((x & m) != b) {
			n++;
			if (xh != b) /* enabled: hit bit, then e bits on a miss */
				E += 1 + ((x & m) == xh ? 0 : e);
			else
				E += e;
		}
	}
	unsigned L = D > 1 ? bitlen(D - 1) : 1;
	if (L == 0)
		L = 1;
	uint64_t body = (S + E + 7) / 8, size;
	unsigned md;
	if (n == 0) {
		md = 1;
		size = (S + 7) / 8;
	} else {
		uint64_t bm = (D + 7) / 8 + body, li = (L * (n + 1) + 7) / 8 + body;
		md = li < bm ? 3 : 2;
		size = li < bm ? li : bm;
	}
	memset(out, 0, R);
	if (size >= R) {
		memcpy(out, row, R);
		*mode = 0;
		free(padded);
		return R;
	}
	uint64_t hdr = md == 1 ? 0 : md == 2 ? (D + 7) / 8 : (L * (n + 1) + 7) / 8;
	uint64_t hk = 0;
	if (md == 3)
		put_bits(out, &hk, n - 1, L);
	/* static part */
	uint64_t k = 8 * hdr;
	for (uint64_t j = 0; j < D; j++) {
		uint64_t x = tu_word(padded, C, j), m = tu_word(mask, C, j);
		for (unsigned i = 0; i < W; i++)
			if (!((m >> i) & 1))
				put_bits(out, &k, (x >> i) & 1, 1);
	}
	/* exception part and header */
	for (uint64_t j = 0; j < D; j++) {
		uint64_t x = tu_word(padded, C, j), m = tu_word(mask, C, j), b = tu_word(bitval, C, j);
		uint64_t xh = xval ? tu_word(xval, C, j) : b;
		if ((x & m) == b)
			continue;
		if (md == 2)
			out[j / 8] |= (uint8_t)(1u << (j % 8));
		else
			put_bits(out, &hk, j, L);
		if (xh != b) {
			unsigned h = (x & m) == xh;
			put_bits(out, &k, h, 1);
			g_xhits += h;
			g_xmisses += !h;
			if (h)
				continue;
		}
		for (unsigned i = 0; i < W; i++)
			if ((m >> i) & 1)
				put_bits(out, &k, (x >> i) & 1, 1);
	}
	if (k != 8 * hdr + S + E)
		abort();
	*mode = (uint8_t)md;
	free(padded);
	return size;
}

/* ------------------------------------------------------------------ */
/* round trip of one row under one cluster, every implementation        */
/* ------------------------------------------------------------------ */

static uint64_t g_modes[4];

static void check_row(ibp_codec_t *c, const uint8_t *row, unsigned cluster, const char *what)
{
	const uint64_t R = ibp_codec_row_bytes(c);
	const unsigned C = ibp_codec_chunk_bytes(c);
	uint8_t *ref = tu_xcalloc(R), *enc = tu_xcalloc(R), *dec = tu_xcalloc(R);
	uint8_t rmode;
	uint64_t rlen = ref_encode(row, R, C, ibp_codec_mask(c, cluster), ibp_codec_bitval(c, cluster),
				   ibp_codec_has_xval(c) ? ibp_codec_xval(c, cluster) : NULL, ref, &rmode);
	g_modes[rmode]++;

	uint64_t slen;
	uint8_t smode;
	CHECK(ibp_row_size(c, row, cluster, &slen, &smode) == IBP_OK, "row_size");
	CHECK(slen == rlen && smode == rmode, "%s R=%llu C=%u k=%u: row_size %llu/%u, reference %llu/%u",
	      what, (unsigned long long)R, C, cluster, (unsigned long long)slen, smode,
	      (unsigned long long)rlen, rmode);

	ibp_impl_t impls[4] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX512, IBP_IMPL_AVX2 };
	for (int ii = 0; ii < 4; ii++) {
		if (impls[ii] == IBP_IMPL_BMI2 && !have_bmi2())
			continue;
		if (impls[ii] == IBP_IMPL_AVX2 && !have_avx2())
			continue;
		if (impls[ii] == IBP_IMPL_AVX512 && !have_avx512())
			continue;
		CHECK(ibp_codec_set_impl(c, impls[ii]) == IBP_OK, "set_impl");
		/* the sizing pass of this path (SIMD on AVX2 and AVX-512) */
		CHECK(ibp_row_size(c, row, cluster, &slen, &smode) == IBP_OK, "row_size");
		CHECK(slen == rlen && smode == rmode, "%s R=%llu C=%u k=%u impl=%d: row_size %llu/%u, reference %llu/%u",
		      what, (unsigned long long)R, C, cluster, impls[ii], (unsigned long long)slen, smode,
		      (unsigned long long)rlen, rmode);
		uint64_t len = ~0ull;
		uint8_t fl = 0xFF;
		/* exact-size heap buffer: ASan builds catch any overrun */
		uint8_t *dst = malloc(rlen ? rlen : 1);
		ibp_status_t st = ibp_encode_row(c, row, cluster, dst, rlen, &len, &fl);
		CHECK(st == IBP_OK, "%s: encode_row: %s", what, ibp_last_error());
		CHECK(len == rlen && fl == rmode, "%s R=%llu C=%u k=%u impl=%d: len %llu mode %u, reference %llu mode %u",
		      what, (unsigned long long)R, C, cluster, impls[ii], (unsigned long long)len, fl,
		      (unsigned long long)rlen, rmode);
		CHECK(memcmp(dst, ref, rlen) == 0, "%s R=%llu C=%u k=%u impl=%d mode %u: bytes differ from the reference\n got %s",
		      what, (unsigned long long)R, C, cluster, impls[ii], fl, tu_hex(dst, rlen < 64 ? rlen : 64));
		memcpy(enc, dst, rlen);
		/* decode from the exact-size buffer */
		memset(dec, 0xA5, R);
		st = ibp_decode_row(c, dst, rlen, fl, cluster, dec);
		CHECK(st == IBP_OK, "%s R=%llu C=%u: decode: %s", what, (unsigned long long)R, C, ibp_last_error());
		CHECK(memcmp(dec, row, R) == 0, "%s R=%llu C=%u k=%u impl=%d mode %u: round trip differs",
		      what, (unsigned long long)R, C, cluster, impls[ii], fl);
		free(dst);
		if (rlen > 0) {
			uint64_t small;
			uint8_t sfl;
			uint8_t *tmp = malloc(rlen);
			CHECK(ibp_encode_row(c, row, cluster, tmp, rlen - 1, &small, &sfl) ==
				      IBP_ERR_BUFFER_TOO_SMALL,
			      "%s: buffer too small not reported", what);
			free(tmp);
		}
	}
	/* fixed-stride layout: trailing garbage is ignored */
	uint8_t *stride = malloc(R + 16);
	memcpy(stride, enc, rlen);
	memset(stride + rlen, 0xEE, R + 16 - rlen);
	memset(dec, 0, R);
	CHECK(ibp_decode_row(c, stride, R + 16, rmode, cluster, dec) == IBP_OK &&
		      memcmp(dec, row, R) == 0,
	      "%s: stride decode", what);
	/* truncations are rejected */
	for (uint64_t cut = rlen / 2; rlen > 0 && cut < rlen; cut += (rlen - cut + 1) / 2) {
		uint8_t *tr = malloc(cut ? cut : 1);
		memcpy(tr, enc, cut);
		CHECK(ibp_decode_row(c, tr, cut, rmode, cluster, dec) == IBP_ERR_CORRUPT,
		      "%s R=%llu C=%u: truncated row (%llu of %llu) not rejected", what,
		      (unsigned long long)R, C, (unsigned long long)cut, (unsigned long long)rlen);
		free(tr);
	}
	free(stride);
	free(ref);
	free(enc);
	free(dec);
	ibp_codec_set_impl(c, IBP_IMPL_AUTO);
}

/* A codec with 5 clusters for rows of pattern p: trained-like masks
 * (threshold 0.9 and 0.6), random masks (density 0.5 and 0.95), empty and
 * full masks; one per cluster (6 clusters). */
#define NMASK 6
static ibp_codec_t *make_codec(tu_rng_t *r, tu_pattern_t p, uint64_t R, unsigned C)
{
	const uint64_t D = tu_nchunks(R, C);
	uint8_t *m = tu_xcalloc(NMASK * D * C), *b = tu_xcalloc(NMASK * D * C);
	uint8_t *rows = tu_xcalloc(8 * R);
	tu_gen_rows(r, p, rows, 8, R);
	tu_mask_count(rows, 8, R, C, 0.9, m, b);
	tu_mask_count(rows, 8, R, C, 0.6, m + D * C, b + D * C);
	tu_mask_random(r, 0.5, m + 2 * D * C, b + 2 * D * C, R, C);
	tu_mask_random(r, 0.95, m + 3 * D * C, b + 3 * D * C, R, C);
	tu_fix_padding(m + 4 * D * C, b + 4 * D * C, R, C); /* empty */
	memset(m + 5 * D * C, 0xFF, D * C);                 /* full */
	tu_fill_random(r, b + 5 * D * C, D * C);
	tu_fix_padding(m + 5 * D * C, b + 5 * D * C, R, C);
	ibp_codec_t *c = NULL;
	ibp_status_t st = ibp_codec_create(R, C, NMASK, m, b, &c);
	cr_assert_eq(st, IBP_OK, "codec_create R=%llu C=%u: %s", (unsigned long long)R, C,
		     ibp_last_error());
	free(m);
	free(b);
	free(rows);
	return c;
}

/* Random Xvals for the clusters of c (same Masks/Bitvals): per chunk,
 * disabled (x = b), the invariant bits of a row of pattern p (what training
 * would pick), or random bits inside the mask; padding bits stay clear. */
static ibp_codec_t *make_xcodec(tu_rng_t *r, const ibp_codec_t *c, tu_pattern_t p)
{
	const uint64_t R = ibp_codec_row_bytes(c), D = ibp_codec_nchunks(c);
	const unsigned C = ibp_codec_chunk_bytes(c), K = ibp_codec_nclusters(c);
	uint8_t *m = tu_xcalloc(K * D * C), *b = tu_xcalloc(K * D * C), *x = tu_xcalloc(K * D * C);
	uint8_t *pr = tu_xcalloc(D * C), *rnd = tu_xcalloc(D * C);
	for (unsigned k = 0; k < K; k++) {
		uint64_t o = (uint64_t)k * D * C;
		memcpy(m + o, ibp_codec_mask(c, k), D * C);
		memcpy(b + o, ibp_codec_bitval(c, k), D * C);
		tu_gen_row(r, p, pr, R); /* pr is zero past R */
		tu_fill_random(r, rnd, R);
		uint64_t mode = tu_below(r, 4); /* 0: mixed, 1: all from the row, 2: all random, 3: none */
		for (uint64_t j = 0; j < D; j++) {
			uint64_t mj = tu_word(m + o, C, j), pick = mode == 0 ? tu_below(r, 3) : mode;
			uint64_t v = pick == 1 ? tu_word(pr, C, j) & mj
				   : pick == 2 ? tu_word(rnd, C, j) & mj : tu_word(b + o, C, j);
			tu_set_word(x + o, C, j, v);
		}
	}
	ibp_codec_t *cx = NULL;
	ibp_status_t st = ibp_codec_create_ex(R, C, K, m, b, x, &cx);
	cr_assert_eq(st, IBP_OK, "codec_create_ex R=%llu C=%u: %s", (unsigned long long)R, C,
		     ibp_last_error());
	for (unsigned k = 0; k < K; k++)
		CHECK(memcmp(ibp_codec_xval(cx, k), x + (uint64_t)k * D * C, D * C) == 0, "xval accessor");
	free(m);
	free(b);
	free(x);
	free(pr);
	free(rnd);
	return cx;
}

static void check_pattern(tu_rng_t *r, tu_pattern_t p, uint64_t R, unsigned C, int variants)
{
	ibp_codec_t *c0 = make_codec(r, p, R, C);
	ibp_codec_t *cx = make_xcodec(r, c0, p);
	const uint64_t D = tu_nchunks(R, C);
	uint8_t *row = tu_xcalloc(R), *v = tu_xcalloc(R);
	tu_gen_row(r, p, row, R);
	char what[64];
	for (unsigned k = 0; k < 2 * NMASK; k++) {
		/* clusters 0..NMASK-1 without Xvals, then the same with Xvals */
		ibp_codec_t *c = k < NMASK ? c0 : cx;
		const unsigned kk = k % NMASK;
		const uint8_t *m = ibp_codec_mask(c, kk), *b = ibp_codec_bitval(c, kk);
		const uint8_t *xv = ibp_codec_xval(c, kk);
		snprintf(what, sizeof(what), "%s%s", tu_pattern_name(p), k < NMASK ? "" : "/xval");
		check_row(c, row, kk, what);
		if (k >= NMASK) {
			/* every chunk a hit where enabled, a match elsewhere */
			memcpy(v, row, R);
			for (uint64_t j = 0; j < D; j++)
				tu_make_match(v, m, xv, R, C, j);
			snprintf(what, sizeof(what), "%s/xval-hits", tu_pattern_name(p));
			check_row(c, v, kk, what);
			/* hits and misses: some chunks never match (they may still hit) */
			uint8_t *nv = tu_xcalloc(R);
			memcpy(nv, v, R);
			tu_make_never_match(nv, m, b, R, C);
			for (uint64_t j = tu_below(r, 2); j < D; j += 1 + tu_below(r, 3))
				memcpy(v + j * C, nv + j * C, (j + 1) * C <= R ? C : R - j * C);
			free(nv);
			snprintf(what, sizeof(what), "%s/xval-mix", tu_pattern_name(p));
			check_row(c, v, kk, what);
		}
		if (!variants)
			continue;
		/* every chunk matches: CLEAN (or RAW when S >= 8R) */
		memcpy(v, row, R);
		for (uint64_t j = 0; j < D; j++)
			tu_make_match(v, m, b, R, C, j);
		snprintf(what, sizeof(what), "%s/all-match", tu_pattern_name(p));
		check_row(c, v, kk, what);
		/* a few exceptions: LIST */
		uint64_t ne = 1 + tu_below(r, 3);
		for (uint64_t e = 0; e < ne; e++) {
			uint64_t j = tu_below(r, D);
			uint8_t *one = tu_xcalloc(R);
			memcpy(one, v, R);
			tu_make_never_match(one, m, b, R, C);
			memcpy(v + j * C, one + j * C, (j + 1) * C <= R ? C : R - j * C);
			free(one);
		}
		snprintf(what, sizeof(what), "%s/few-exc", tu_pattern_name(p));
		check_row(c, v, kk, what);
		/* no chunk matches */
		memcpy(v, row, R);
		tu_make_never_match(v, m, b, R, C);
		snprintf(what, sizeof(what), "%s/never", tu_pattern_name(p));
		check_row(c, v, kk, what);
	}
	free(row);
	free(v);
	ibp_codec_free(c0);
	ibp_codec_free(cx);
}

static const uint64_t spread[] = { 301, 317, 383, 384, 385, 511, 512, 513, 640, 777, 1000,
				   1023, 1024, 1025, 1500, 2047, 2048, 2049, 3001, 4093,
				   4095, 4096, 4097, 4098, 4099 };

static void roundtrip_chunk(unsigned C, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	memset(g_modes, 0, sizeof(g_modes));
	g_xhits = g_xmisses = 0;
	for (uint64_t R = 1; R <= 300; R++)
		for (int p = 0; p < TU_PATTERN_COUNT; p++)
			check_pattern(&r, (tu_pattern_t)p, R, C, p == TU_RANDOM || p == TU_F32_SMOOTH ||
								    p == TU_SPARSE_BITS || R % 7 == 0);
	for (size_t i = 0; i < sizeof(spread) / sizeof(spread[0]); i++)
		for (int p = 0; p < TU_PATTERN_COUNT; p++)
			check_pattern(&r, (tu_pattern_t)p, spread[i], C,
				      p == TU_RANDOM || p == TU_F32_SMOOTH || p == TU_SPARSE_BITS);
	for (int m = 0; m < 4; m++)
		cr_assert_gt(g_modes[m], 0, "C=%u: mode %d never reached", C, m);
	cr_assert_gt(g_xhits, 1000, "C=%u: %llu Xval hits written", C, (unsigned long long)g_xhits);
	cr_assert_gt(g_xmisses, 1000, "C=%u: %llu Xval misses written", C,
		     (unsigned long long)g_xmisses);
	cr_log_info("C=%u modes raw/clean/bitmap/list: %llu %llu %llu %llu, xval hits/misses %llu %llu",
		    C, (unsigned long long)g_modes[0], (unsigned long long)g_modes[1],
		    (unsigned long long)g_modes[2], (unsigned long long)g_modes[3],
		    (unsigned long long)g_xhits, (unsigned long long)g_xmisses);
}

Test(codec, roundtrip_c1) { roundtrip_chunk(1, 101); }
Test(codec, roundtrip_c2) { roundtrip_chunk(2, 102); }
Test(codec, roundtrip_c4) { roundtrip_chunk(4, 104); }
Test(codec, roundtrip_c8) { roundtrip_chunk(8, 108); }

/* ------------------------------------------------------------------ */
/* mode choice on hand-made cases                                       */
/* ------------------------------------------------------------------ */

/* R = 64, C = 1: mask 0xF0 on every chunk, bitval 0 (high nibble zero). */
static ibp_codec_t *nibble_codec(uint64_t R)
{
	uint8_t *m = tu_xcalloc(R), *b = tu_xcalloc(R);
	memset(m, 0xF0, R);
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(R, 1, 1, m, b, &c), IBP_OK);
	free(m);
	free(b);
	return c;
}

Test(codec, modes_by_hand)
{
	const uint64_t R = 64;
	ibp_codec_t *c = nibble_codec(R);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 64 * 4);
	uint8_t row[64], dst[64], back[64];
	uint64_t len;
	uint8_t fl;
	/* all low nibbles: CLEAN, 32 bytes */
	for (int i = 0; i < 64; i++)
		row[i] = (uint8_t)(i & 15);
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, IBP_ROW_CLEAN);
	cr_assert_eq(len, 32);
	/* one exception: LIST, L = 6, header ceil(12/8) = 2, body ceil(260/8) = 33 */
	row[5] = 0x35;
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, IBP_ROW_LIST);
	cr_assert_eq(len, 2 + 33);
	cr_assert_eq(dst[0], (5 << 6) & 0xFF); /* n-1 = 0 in 6 bits, then index 5 */
	cr_assert_eq(dst[1], 5 >> 2);
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 64);
	/* 9 exceptions: LIST header ceil(60/8) = 8 = bitmap size 8: tie -> BITMAP */
	row[5] = 5;
	for (int i = 0; i < 9; i++)
		row[i * 7] = 0x80;
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, IBP_ROW_BITMAP);
	cr_assert_eq(len, 8 + (256 + 36 + 7) / 8);
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 64);
	/* 8 exceptions: LIST header ceil(54/8) = 7 < 8 */
	row[0] = 0;
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, IBP_ROW_LIST);
	cr_assert_eq(len, 7 + (256 + 32 + 7) / 8);
	/* all exceptions: 8 + 64 = 72 >= 64: RAW */
	memset(row, 0xFF, 64);
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, IBP_ROW_RAW);
	cr_assert_eq(len, 64);
	cr_assert_arr_eq(dst, row, 64);
	ibp_codec_free(c);
}

Test(codec, empty_static_part)
{
	/* full masks: a matching row encodes to 0 bytes */
	uint8_t m[12], b[12], row[12], back[12];
	memset(m, 0xFF, 12);
	for (int i = 0; i < 12; i++)
		b[i] = row[i] = (uint8_t)(i * 37);
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(12, 4, 1, m, b, &c), IBP_OK);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 0);
	uint64_t len = 99;
	uint8_t fl;
	cr_assert_eq(ibp_encode_row(c, row, 0, NULL, 0, &len, &fl), IBP_OK);
	cr_assert_eq(len, 0);
	cr_assert_eq(fl, IBP_ROW_CLEAN);
	memset(back, 0, 12);
	cr_assert_eq(ibp_decode_row(c, NULL, 0, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 12);
	ibp_codec_free(c);
}

/* ------------------------------------------------------------------ */
/* corrupt input                                                        */
/* ------------------------------------------------------------------ */

/* R = 100, C = 1, mask 0xF0: D = 100, L = 7. */
static void encode_or_die(ibp_codec_t *c, const uint8_t *row, uint8_t *dst, uint64_t *len,
			  uint8_t *fl, uint8_t want)
{
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, ibp_row_bound(c), len, fl), IBP_OK);
	cr_assert_eq(*fl, want, "mode %u, wanted %u", *fl, want);
}

Test(codec, corrupt_flags_and_raw)
{
	ibp_codec_t *c = nibble_codec(100);
	uint8_t row[100] = { 0 }, dst[100], back[100];
	uint64_t len;
	uint8_t fl;
	encode_or_die(c, row, dst, &len, &fl, IBP_ROW_CLEAN);
	for (unsigned f = 4; f < 256; f++)
		cr_assert_eq(ibp_decode_row(c, dst, len, (uint8_t)f, 0, back), IBP_ERR_CORRUPT, "flags %u", f);
	/* raw rows shorter than R */
	for (uint64_t l = 0; l < 100; l += 9)
		cr_assert_eq(ibp_decode_row(c, dst, l, IBP_ROW_RAW, 0, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, 100, IBP_ROW_RAW, 0, back), IBP_OK);
	/* clean row shorter than its body */
	cr_assert_eq(ibp_decode_row(c, dst, 49, IBP_ROW_CLEAN, 0, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, 50, IBP_ROW_CLEAN, 0, back), IBP_OK);
	/* cluster out of range */
	cr_assert_eq(ibp_decode_row(c, dst, 50, IBP_ROW_CLEAN, 1, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, 50, IBP_ROW_CLEAN, 200, back), IBP_ERR_CORRUPT);
	ibp_codec_free(c);
}

Test(codec, corrupt_list)
{
	ibp_codec_t *c = nibble_codec(100);
	uint8_t row[100] = { 0 }, dst[100], bad[100], back[100];
	uint64_t len;
	uint8_t fl;
	row[10] = 0x10;
	row[20] = 0x20;
	row[30] = 0x30;
	encode_or_die(c, row, dst, &len, &fl, IBP_ROW_LIST);
	/* L = 7: n-1 = 2 in bits 0..6, indices at 7, 14, 21; header 4 bytes */
	cr_assert_eq(len, 4 + (400 + 12 + 7) / 8);
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 100);
	uint64_t hdr = 0;
	memcpy(&hdr, dst, 4);
	cr_assert_eq(hdr & 127, 2);
	cr_assert_eq((hdr >> 7) & 127, 10);
	cr_assert_eq((hdr >> 14) & 127, 20);
	cr_assert_eq((hdr >> 21) & 127, 30);
#define WITH_HDR(h)                                  \
	do {                                         \
		memcpy(bad, dst, len);               \
		uint64_t hh_ = (h);                  \
		memcpy(bad, &hh_, 4);                \
	} while (0)
	/* index >= D (100..127 fit in 7 bits) */
	WITH_HDR((hdr & ~(127ull << 21)) | (100ull << 21));
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	WITH_HDR((hdr & ~(127ull << 21)) | (127ull << 21));
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* unsorted: 20, 10, 30 */
	WITH_HDR((hdr & ~(127ull << 7) & ~(127ull << 14)) | (20ull << 7) | (10ull << 14));
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* duplicate: 10, 10, 30 */
	WITH_HDR((hdr & ~(127ull << 14)) | (10ull << 14));
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* count too large: n = 101 > D */
	WITH_HDR((hdr & ~127ull) | 100ull);
	cr_assert_eq(ibp_decode_row(c, bad, 100, fl, 0, back), IBP_ERR_CORRUPT);
	/* count larger: header + body past the end */
	WITH_HDR((hdr & ~127ull) | 60ull);
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* too short for the count field / the header / the body */
	cr_assert_eq(ibp_decode_row(c, dst, 0, fl, 0, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, 3, fl, 0, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, len - 1, fl, 0, back), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	ibp_codec_free(c);
}

Test(codec, corrupt_bitmap)
{
	ibp_codec_t *c = nibble_codec(100);
	uint8_t row[100] = { 0 }, dst[100], bad[100], back[100];
	uint64_t len;
	uint8_t fl;
	for (int i = 0; i < 100; i += 5)
		row[i] = 0x40;
	encode_or_die(c, row, dst, &len, &fl, IBP_ROW_BITMAP);
	cr_assert_eq(len, 13 + (400 + 80 + 7) / 8);
	cr_assert_eq(dst[0], 0x21); /* chunks 0 and 5 */
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 100);
	/* bits past D = 100: byte 12 holds chunks 96..103 */
	for (int bit = 4; bit < 8; bit++) {
		memcpy(bad, dst, len);
		bad[12] |= (uint8_t)(1u << bit);
		cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT, "bit %d", bit);
	}
	/* no bit set */
	memcpy(bad, dst, len);
	memset(bad, 0, 13);
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* more bits set: body past the end */
	memcpy(bad, dst, len);
	memset(bad, 0xFF, 12);
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* truncated */
	for (uint64_t l = 0; l < len; l++)
		cr_assert_eq(ibp_decode_row(c, dst, l, fl, 0, back), IBP_ERR_CORRUPT, "len %llu",
			     (unsigned long long)l);
	ibp_codec_free(c);
}

Test(codec, random_garbage_never_crashes)
{
	tu_rng_t r;
	tu_rng_seed(&r, 7);
	unsigned Cs[4] = { 1, 2, 4, 8 };
	uint64_t ok = 0, bad = 0;
	for (int ci = 0; ci < 4; ci++)
		for (uint64_t R = 1; R < 80; R += 3) {
			uint64_t D = tu_nchunks(R, Cs[ci]);
			uint8_t *m = tu_xcalloc(2 * D * Cs[ci]), *b = tu_xcalloc(2 * D * Cs[ci]);
			tu_mask_random(&r, 0.7, m, b, R, Cs[ci]);
			tu_mask_random(&r, 0.3, m + D * Cs[ci], b + D * Cs[ci], R, Cs[ci]);
			ibp_codec_t *c;
			cr_assert_eq(ibp_codec_create(R, Cs[ci], 2, m, b, &c), IBP_OK);
			if (R % 2) { /* Xvals: hit bits change every field's position */
				ibp_codec_t *cx = make_xcodec(&r, c, TU_RANDOM);
				ibp_codec_free(c);
				c = cx;
			}
			uint8_t *dec = tu_xcalloc(R);
			for (int it = 0; it < 200; it++) {
				uint64_t len = tu_below(&r, R + 8);
				uint8_t *src = malloc(len ? len : 1);
				tu_fill_random(&r, src, len);
				if (it & 1)
					memset(src, 0, len / 2); /* small list counts */
				uint8_t fl = (uint8_t)(it % 17 == 0 ? tu_next(&r) : tu_below(&r, 4));
				ibp_status_t st0 = IBP_OK;
				uint8_t *dec0 = tu_xcalloc(R);
				for (int impl = 1; impl <= 4; impl++) {
					if (ibp_codec_set_impl(c, (ibp_impl_t)impl) != IBP_OK)
						continue;
					ibp_status_t st = ibp_decode_row(c, src, len, fl, (unsigned)(it & 1), dec);
					CHECK(st == IBP_OK || st == IBP_ERR_CORRUPT, "status %d", st);
					/* every implementation agrees on the status and the row */
					if (impl == 1) {
						st0 = st;
						memcpy(dec0, dec, R);
					} else {
						CHECK(st == st0, "impl %d: status %d, portable %d", impl, st, st0);
						CHECK(st != IBP_OK || memcmp(dec, dec0, R) == 0,
						      "impl %d: decoded row differs from portable", impl);
					}
					if (st == IBP_OK)
						ok++;
					else
						bad++;
				}
				free(dec0);
				free(src);
			}
			free(dec);
			free(m);
			free(b);
			ibp_codec_free(c);
		}
	cr_assert_gt(ok, 0);
	cr_assert_gt(bad, 0);
}

/* BITMAP rows of codecs with D <= 64 chunks (issue 29: the SIMD walks
 * take such a header with one 8-byte load where 8 bytes are readable,
 * the bytes past it masked off): random headers followed by random bodies
 * (so the bytes after the header are not zeros), every row length from 0
 * to past the row's end (fewer than 8 bytes readable included), decoded
 * from exact-size heap buffers (ASan catches a read past them) by every
 * implementation, each giving portable's status and, when it decodes, its
 * bytes. Headers with a bit past D set are corrupt everywhere. C = 1, 2,
 * 4; with and without Xvals; masks dense enough for the fused AVX-512
 * rows (C = 2, 4). */
Test(codec, bitmap_header_small_d)
{
	tu_rng_t r;
	tu_rng_seed(&r, 29);
	static const unsigned Cs[3] = { 1, 2, 4 };
	static const uint64_t Ds[] = { 1, 5, 8, 9, 16, 31, 32, 33, 48, 63, 64 };
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	uint64_t ok = 0, bad = 0, past = 0;
	for (int ci = 0; ci < 3; ci++)
		for (size_t di = 0; di < sizeof(Ds) / sizeof(Ds[0]); di++)
			for (int xv = 0; xv < 2; xv++) {
				const unsigned C = Cs[ci];
				const uint64_t D = Ds[di], R = D * C - (C > 1 && (di & 1) ? 1 : 0), hb = (D + 7) / 8; /* a partial last chunk too */
				uint8_t *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C);
				tu_mask_random(&r, 0.8, m, b, R, C);
				ibp_codec_t *c;
				cr_assert_eq(ibp_codec_create(R, C, 1, m, b, &c), IBP_OK);
				cr_assert_eq(ibp_codec_nchunks(c), D);
				if (xv) {
					ibp_codec_t *cx = make_xcodec(&r, c, TU_RANDOM);
					ibp_codec_free(c);
					c = cx;
				}
				uint8_t *dec = tu_xcalloc(R), *dec0 = tu_xcalloc(R);
				const uint64_t maxlen = hb + 4 * R + 16;
				for (int it = 0; it < 60; it++) {
					const uint64_t len = it < 12 ? (uint64_t)it : tu_below(&r, maxlen + 1);
					uint8_t *src = malloc(len ? len : 1);
					tu_fill_random(&r, src, len);
					/* a few exceptions (short bodies decode), then dense headers */
					for (uint64_t i = 0; i < hb && i < len; i++)
						src[i] &= it % 3 == 0 ? 0xFF : (uint8_t)tu_next(&r);
					const int past_d = (D & 7) && len >= hb && (src[hb - 1] >> (D & 7)) != 0;
					ibp_status_t st0 = IBP_OK;
					for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
						if (ibp_codec_set_impl(c, impls[ii]) != IBP_OK)
							continue;
						memset(dec, 0xA5, R);
						ibp_status_t st = ibp_decode_row(c, src, len, IBP_ROW_BITMAP, 0, dec);
						CHECK(st == IBP_OK || st == IBP_ERR_CORRUPT, "status %d", st);
						CHECK(!past_d || st == IBP_ERR_CORRUPT,
						      "C=%u D=%llu impl %d: a bit past D decoded", C, (unsigned long long)D,
						      impls[ii]);
						if (ii == 0) {
							st0 = st;
							memcpy(dec0, dec, R);
						} else {
							CHECK(st == st0, "C=%u D=%llu xv=%d len %llu impl %d: status %d, portable %d",
							      C, (unsigned long long)D, xv, (unsigned long long)len, impls[ii],
							      st, st0);
							CHECK(st != IBP_OK || memcmp(dec, dec0, R) == 0,
							      "C=%u D=%llu xv=%d len %llu impl %d: row differs from portable", C,
							      (unsigned long long)D, xv, (unsigned long long)len, impls[ii]);
						}
					}
					ok += st0 == IBP_OK;
					bad += st0 != IBP_OK;
					past += past_d;
					free(src);
				}
				ibp_codec_set_impl(c, IBP_IMPL_AUTO);
				free(dec);
				free(dec0);
				free(m);
				free(b);
				ibp_codec_free(c);
			}
	cr_assert_gt(ok, 100, "%llu rows decoded", (unsigned long long)ok);
	cr_assert_gt(bad, 100);
	cr_assert_gt(past, 10);
}

/* A BITMAP header dense enough for AVX2's SIMD walk (8 exceptions a
 * group) at the end of fewer than 8 readable bytes: ibp_exc_bitmap loads
 * its last word in part. Such a row never decodes (8 exceptions hold
 * 8 C bytes), but one whose header lost its last byte would decode as a
 * clean row of S bits, which the short body holds here (few variant bits
 * a chunk): every implementation must refuse it as portable does. The
 * header's other bytes, the body and the length vary. Random rows of
 * bitmap_header_small_d are rarely this dense. */
Test(codec, bitmap_header_dense_short)
{
	tu_rng_t r;
	tu_rng_seed(&r, 2938);
	static const ibp_impl_t impls[] = { IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	uint64_t refused = 0, walked = 0;
	for (int shape = 0; shape < 4; shape++) {
		/* C = 4, D = 8 (one header byte) or C = 2, D = 16 (two); the last chunk whole or partial */
		const unsigned C = shape < 2 ? 4 : 2;
		const uint64_t D = 32 / C, R = 32 - (shape & 1), hb = D / 8;
		uint8_t m[32], b[32];
		for (unsigned i = 0; i < 32; i++) {
			/* S = 4 (C = 4) or 1 (C = 2) bits a chunk; past R invariant zeros */
			m[i] = i % C == 0 && i < R ? (C == 4 ? 0xF0 : 0xFE) : 0xFF;
			b[i] = i < R ? (uint8_t)tu_next(&r) & m[i] : 0;
		}
		ibp_codec_t *c;
		const ibp_status_t cs = ibp_codec_create(R, C, 1, m, b, &c);
		cr_assert_eq(cs, IBP_OK, "C=%u R=%llu: %s", C, (unsigned long long)R, ibp_last_error());
		cr_assert_eq(ibp_codec_nchunks(c), D);
		const uint64_t sbytes = (c->cl[0].S + 7) / 8;
		cr_assert_lt(hb + sbytes, 8, "C=%u: the clean row fits in 8 bytes", C);
		uint8_t dec[32], dec0[32];
		ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
		for (int it = 0; it < 200; it++) {
			const uint64_t len = hb + tu_below(&r, 8 - hb); /* fewer than 8 bytes readable */
			uint8_t *src = malloc(len);
			tu_fill_random(&r, src, len);
			src[hb - 1] = 0xFF; /* 8 exceptions in the last byte */
			if (hb == 2 && it % 2 == 0)
				src[0] = 0; /* only those */
			memset(dec0, 0x5A, R);
			const ibp_status_t st0 = ibp_decode_row(c, src, len, IBP_ROW_BITMAP, 0, dec0);
			cr_assert_eq(st0, IBP_ERR_CORRUPT, "C=%u R=%llu len %llu: portable decoded", C,
				     (unsigned long long)R, (unsigned long long)len);
			refused++;
			for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
				if (ibp_codec_set_impl(c, impls[ii]) != IBP_OK)
					continue;
				walked += impls[ii] == IBP_IMPL_AVX2;
				memset(dec, 0x5A, R);
				const ibp_status_t st = ibp_decode_row(c, src, len, IBP_ROW_BITMAP, 0, dec);
				CHECK(st == IBP_ERR_CORRUPT, "C=%u R=%llu len %llu impl %d: status %d, not corrupt", C,
				      (unsigned long long)R, (unsigned long long)len, impls[ii], st);
			}
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			free(src);
		}
		/* the AVX2 SIMD walk takes these rows: its tables exist */
		cr_assert(!have_avx2() || c->cl[0].nxg > 0, "C=%u: no AVX2 walk tables", C);
		ibp_codec_free(c);
	}
	cr_assert_eq(refused, 800);
	if (have_avx2())
		cr_assert_eq(walked, 800);
}

/* A codec of rows of R <= 16 bytes in C-byte chunks with two random
 * clusters of invariant-bit densities d0 and d1, with random Xvals when
 * xv; it has the tiny tables. */
static ibp_codec_t *tiny_codec(tu_rng_t *r, uint64_t R, unsigned C, double d0, double d1, int xv)
{
	const uint64_t D = (R + C - 1) / C;
	uint8_t *m = tu_xcalloc(2 * D * C), *b = tu_xcalloc(2 * D * C);
	tu_mask_random(r, d0, m, b, R, C);
	tu_mask_random(r, d1, m + D * C, b + D * C, R, C);
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(R, C, 2, m, b, &c), IBP_OK);
	free(m);
	free(b);
	if (xv) {
		ibp_codec_t *cx = make_xcodec(r, c, TU_RANDOM);
		ibp_codec_free(c);
		c = cx;
	}
	cr_assert(c->tiny != NULL, "C=%u R=%llu: no tiny tables", C, (unsigned long long)R);
	return c;
}

/* Rows of at most 16 chunk bytes (the tiny tables, ibp_tiny_t: C = 1, 2,
 * 4, 8 with 1..16 / C chunks, whole or partial last chunk), with and
 * without Xvals, CLEAN, BITMAP and LIST rows: every implementation gives
 * portable's status, bytes and extent for the row, every truncation of
 * it (0 .. its length - 1 bytes, exact-size heap buffers: ASan sees a
 * read past them), the row with bytes after it, and random bytes under
 * every flag. Through ibpi_decode_row_ext_i, the store's entry (its
 * inline CLEAN path, then ibpi_decode_row_ext). */
static void tiny_decode_all(ibp_codec_t *c, const uint8_t *src, uint64_t len, uint8_t fl, unsigned k,
			    const uint8_t *want, const char *what)
{
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	const uint64_t R = ibp_codec_row_bytes(c);
	uint8_t dec[17], dec0[16];
	uint64_t ext0 = 0;
	ibp_status_t st0 = IBP_OK;
	for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
		if (ibp_codec_set_impl(c, impls[ii]) != IBP_OK)
			continue;
		uint8_t *s = malloc(len ? len : 1);
		memcpy(s, src, len);
		memset(dec, 0xA5, sizeof(dec));
		uint64_t ext = 0;
		const ibp_status_t st = ibpi_decode_row_ext_i(c, s, len, fl, k, dec, &ext);
		free(s);
		CHECK(st == IBP_OK || st == IBP_ERR_CORRUPT, "%s: status %d", what, st);
		if (ii == 0) {
			st0 = st;
			ext0 = ext;
			memcpy(dec0, dec, R);
			CHECK(!want || (st == IBP_OK && memcmp(dec, want, R) == 0), "%s: portable round trip", what);
			continue;
		}
		CHECK(st == st0, "%s len %llu impl %d: status %d, portable %d", what, (unsigned long long)len,
		      impls[ii], st, st0);
		CHECK(st != IBP_OK || (memcmp(dec, dec0, R) == 0 && ext == ext0),
		      "%s len %llu impl %d: row or extent differs from portable", what, (unsigned long long)len,
		      impls[ii]);
		CHECK(dec[R] == 0xA5, "%s impl %d: wrote past the row", what, impls[ii]);
	}
	ibp_codec_set_impl(c, IBP_IMPL_AUTO);
}

Test(codec, tiny_rows)
{
	tu_rng_t r;
	tu_rng_seed(&r, 33);
	static const unsigned Cs[4] = { 1, 2, 4, 8 };
	static const double dens[3] = { 0.3, 0.7, 0.97 };
	uint64_t modes[4] = { 0 };
	for (int ci = 0; ci < 4; ci++)
		for (uint64_t D = 1; D * Cs[ci] <= 16; D++)
			for (int part = 0; part < (Cs[ci] > 1 ? 2 : 1); part++)
				for (int xv = 0; xv < 2; xv++)
					for (int di = 0; di < 3; di++) {
		const unsigned C = Cs[ci];
		const uint64_t R = D * C - (uint64_t)part;
		ibp_codec_t *c = tiny_codec(&r, R, C, dens[di], dens[(di + 1) % 3], xv);
		char what[96];
		snprintf(what, sizeof(what), "C=%u D=%llu R=%llu xv=%d d=%.2f", C, (unsigned long long)D,
			 (unsigned long long)R, xv, dens[di]);
		uint8_t row[16], enc[64], src[80];
		for (int it = 0; it < 24; it++) {
			const unsigned k = (unsigned)(it & 1);
			const uint8_t *mk = ibp_codec_mask(c, k), *bk = ibp_codec_bitval(c, k);
			const uint8_t *xk = ibp_codec_xval(c, k);
			/* random static bits; a chunk keeps random invariant bits
			 * (likely an exception) with probability it / 24, else takes
			 * its Bitval or (a hit) its Xval */
			memset(row, 0, sizeof(row));
			tu_fill_random(&r, row, R);
			for (uint64_t j = 0; j < D; j++) {
				const uint64_t mj = tu_word(mk, C, j), x = tu_word(row, C, j);
				if (tu_below(&r, 24) < (uint64_t)it)
					continue;
				const uint64_t inv = tu_below(&r, 2) ? tu_word(xk, C, j) : tu_word(bk, C, j);
				tu_set_word(row, C, j, (x & ~mj) | inv);
			}
			for (uint64_t i = R; i < 16; i++)
				row[i] = 0;
			uint64_t len = 0;
			uint8_t fl = 0;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, row, k, enc, sizeof(enc), &len, &fl), IBP_OK);
			modes[fl & 3]++;
			tiny_decode_all(c, enc, len, fl, k, row, what);
			for (uint64_t t = 0; t < len; t++) /* every truncation */
				tiny_decode_all(c, enc, t, fl, k, NULL, what);
			memcpy(src, enc, len); /* bytes after the row */
			tu_fill_random(&r, src + len, 8);
			tiny_decode_all(c, src, len + 1 + tu_below(&r, 8), fl, k, NULL, what);
			/* random bytes under every flag (LIST entries out of order or
			 * past D, bitmap bits past D, short bodies) */
			const uint64_t glen = tu_below(&r, 2 * R + 4);
			tu_fill_random(&r, src, glen);
			if (it & 2)
				memset(src, 0, glen / 2);
			tiny_decode_all(c, src, glen, (uint8_t)(it % 4), k, NULL, what);
		}
		ibp_codec_free(c);
	}
	cr_assert_gt(modes[IBP_ROW_CLEAN], 100);
	cr_assert_gt(modes[IBP_ROW_BITMAP], 100);
	cr_assert_gt(modes[IBP_ROW_LIST], 20);
}

/* ------------------------------------------------------------------ */
/* batches                                                              */
/* ------------------------------------------------------------------ */

/* Every implementation's encode_batch (their own sizing pass) gives the
 * portable one's offsets, flags, clusters and bytes; dst/off/fl/cls hold
 * the default implementation's result. */
static void batch_cross_paths(ibp_codec_t *c, const uint8_t *rows, uint64_t nrows, const uint8_t *dst,
			      const uint64_t *off, const uint8_t *fl, const uint8_t *cls, int nthreads)
{
	const uint64_t cap = ibp_batch_bound(c, nrows);
	uint8_t *pd = malloc(cap ? cap : 1), *d2 = malloc(cap ? cap : 1);
	uint64_t *po = tu_xcalloc((nrows + 1) * 8), *o2 = tu_xcalloc((nrows + 1) * 8);
	uint8_t *pf = tu_xcalloc(nrows), *pc = tu_xcalloc(nrows), *f2 = tu_xcalloc(nrows),
		*c2 = tu_xcalloc(nrows);
	cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_PORTABLE), IBP_OK);
	cr_assert_eq(ibp_encode_batch(c, rows, nrows, pd, cap, po, pf, pc, nthreads), IBP_OK);
	cr_assert(memcmp(po, off, (nrows + 1) * 8) == 0 && memcmp(pf, fl, nrows) == 0 &&
		  memcmp(pc, cls, nrows) == 0 && memcmp(pd, dst, po[nrows]) == 0,
		  "default implementation's batch differs from portable");
	const ibp_impl_t impls[3] = { IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	for (int i = 0; i < 3; i++) {
		if (ibp_codec_set_impl(c, impls[i]) != IBP_OK)
			continue;
		cr_assert_eq(ibp_encode_batch(c, rows, nrows, d2, cap, o2, f2, c2, nthreads), IBP_OK);
		cr_assert(memcmp(po, o2, (nrows + 1) * 8) == 0, "impl %d: offsets differ", impls[i]);
		cr_assert(memcmp(pf, f2, nrows) == 0, "impl %d: flags differ", impls[i]);
		cr_assert(memcmp(pc, c2, nrows) == 0, "impl %d: clusters differ", impls[i]);
		cr_assert(memcmp(pd, d2, po[nrows]) == 0, "impl %d: bytes differ", impls[i]);
	}
	ibp_codec_set_impl(c, IBP_IMPL_AUTO);
	free(pd);
	free(d2);
	free(po);
	free(o2);
	free(pf);
	free(pc);
	free(f2);
	free(c2);
}

static void batch_case_x(uint64_t R, unsigned C, unsigned K, uint64_t nrows, int nthreads, int xval)
{
	tu_rng_t r;
	tu_rng_seed(&r, R * 31 + C * 7 + K);
	const uint64_t D = tu_nchunks(R, C);
	uint8_t *rows = tu_xcalloc(nrows * R);
	for (uint64_t i = 0; i < nrows; i++)
		tu_gen_row(&r, (tu_pattern_t)(i % TU_PATTERN_COUNT), rows + i * R, R);
	uint8_t *m = tu_xcalloc(K * D * C), *b = tu_xcalloc(K * D * C);
	for (unsigned k = 0; k < K; k++) {
		uint8_t *tr = tu_xcalloc(16 * R);
		tu_gen_rows(&r, (tu_pattern_t)(k % TU_PATTERN_COUNT), tr, 16, R);
		tu_mask_count(tr, 16, R, C, 0.8, m + k * D * C, b + k * D * C);
		free(tr);
	}
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(R, C, K, m, b, &c), IBP_OK);
	if (xval) {
		ibp_codec_t *cx = make_xcodec(&r, c, TU_SPARSE_BITS);
		ibp_codec_free(c);
		c = cx;
	}
	uint64_t cap = ibp_batch_bound(c, nrows);
	uint8_t *dst = malloc(cap ? cap : 1);
	uint64_t *off = tu_xcalloc((nrows + 1) * 8);
	uint8_t *fl = tu_xcalloc(nrows), *cls = tu_xcalloc(nrows), *back = tu_xcalloc(nrows * R);
	cr_assert_eq(ibp_encode_batch(c, rows, nrows, dst, cap, off, fl, cls, nthreads), IBP_OK,
		     "%s", ibp_last_error());
	cr_assert_eq(off[0], 0);
	/* each row matches the single-row API */
	uint8_t *one = tu_xcalloc(R);
	for (uint64_t i = 0; i < nrows; i++) {
		const uint8_t *row = rows + i * R;
		cr_assert_eq(cls[i], ibp_choose_cluster(c, row));
		uint64_t len;
		uint8_t f;
		cr_assert_eq(ibp_encode_row(c, row, cls[i], one, R, &len, &f), IBP_OK);
		CHECK(len == off[i + 1] - off[i] && f == fl[i], "row %llu", (unsigned long long)i);
		CHECK(memcmp(one, dst + off[i], len) == 0, "row %llu bytes", (unsigned long long)i);
		/* the chosen cluster is the smallest */
		for (unsigned k = 0; k < K; k++) {
			uint64_t s;
			cr_assert_eq(ibp_row_size(c, row, k, &s, NULL), IBP_OK);
			CHECK(s >= len && (s > len || k >= cls[i]), "cluster choice");
		}
	}
	free(one);
	cr_assert_eq(ibp_decode_batch(c, dst, off[nrows], off, fl, K > 1 ? cls : NULL, nrows, back,
				      nthreads),
		     IBP_OK, "%s", ibp_last_error());
	cr_assert(memcmp(back, rows, nrows * R) == 0);
	batch_cross_paths(c, rows, nrows, dst, off, fl, cls, nthreads);
	/* too small */
	if (off[nrows] > 0)
		cr_assert_eq(ibp_encode_batch(c, rows, nrows, dst, off[nrows] - 1, off, fl, cls, nthreads),
			     IBP_ERR_BUFFER_TOO_SMALL);
	/* K > 1 without a clusters array */
	if (K > 1)
		cr_assert_eq(ibp_encode_batch(c, rows, nrows, dst, cap, off, fl, NULL, nthreads),
			     IBP_ERR_INVALID_ARG);
	free(rows);
	free(m);
	free(b);
	free(dst);
	free(off);
	free(fl);
	free(cls);
	free(back);
	ibp_codec_free(c);
}

static void batch_case(uint64_t R, unsigned C, unsigned K, uint64_t nrows, int nthreads)
{
	batch_case_x(R, C, K, nrows, nthreads, 0);
	batch_case_x(R, C, K, nrows, nthreads, 1);
}

Test(codec, batch_roundtrip)
{
	batch_case(1024, 4, 1, 777, 0);
	batch_case(1024, 4, 1, 777, 1);
	batch_case(1024, 4, 1, 777, 3);
	batch_case(333, 2, 3, 500, 2);
	batch_case(5, 8, 4, 1000, 4);
	batch_case(4099, 1, 2, 64, 0);
	batch_case(64, 8, 1, 1, 8);
	/* group tails of the SIMD sizing pass: D - 1 not a multiple of 8, a partial last chunk */
	batch_case(4 * 37 + 2, 4, 1, 300, 1);
	batch_case(2 * 41 + 1, 2, 2, 300, 1);
	batch_case(8 * 19 + 5, 8, 1, 300, 1);
	batch_case(67, 1, 1, 300, 1);
	batch_case(36, 4, 1, 300, 1);
}

Test(codec, batch_empty)
{
	ibp_codec_t *c = nibble_codec(16);
	uint64_t off[1] = { 5 };
	cr_assert_eq(ibp_encode_batch(c, NULL, 0, NULL, 0, off, NULL, NULL, 0), IBP_OK);
	cr_assert_eq(off[0], 0);
	cr_assert_eq(ibp_decode_batch(c, NULL, 0, off, NULL, NULL, 0, NULL, 0), IBP_OK);
	ibp_codec_free(c);
}

Test(codec, batch_corrupt_offsets)
{
	ibp_codec_t *c = nibble_codec(16);
	uint8_t rows[4 * 16], dst[4 * 16], back[4 * 16], fl[4];
	uint64_t off[5];
	for (int i = 0; i < 64; i++)
		rows[i] = (uint8_t)(i < 16 ? 0xFF : i % 16);
	cr_assert_eq(ibp_encode_batch(c, rows, 4, dst, sizeof(dst), off, fl, NULL, 2), IBP_OK);
	cr_assert_eq(fl[0], IBP_ROW_RAW);
	cr_assert_eq(fl[1], IBP_ROW_CLEAN);
	cr_assert_eq(off[1], 16);
	cr_assert_eq(off[4], 16 + 3 * 8);
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], off, fl, NULL, 4, back, 2), IBP_OK);
	cr_assert_arr_eq(back, rows, 64);
	uint64_t bad[5];
	/* offsets[0] != 0 */
	memcpy(bad, off, sizeof(off));
	bad[0] = 1;
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], bad, fl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	/* decreasing */
	memcpy(bad, off, sizeof(off));
	bad[2] = 10;
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], bad, fl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	/* past src_len */
	cr_assert_eq(ibp_decode_batch(c, dst, off[4] - 1, off, fl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	/* a row longer than its extent (fixed-stride bytes are not allowed here) */
	memcpy(bad, off, sizeof(off));
	bad[2] += 1;
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], bad, fl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	/* shorter */
	memcpy(bad, off, sizeof(off));
	bad[3] -= 1;
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], bad, fl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	/* bad flags, bad cluster */
	uint8_t bfl[4];
	memcpy(bfl, fl, 4);
	bfl[3] |= 0x80;
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], off, bfl, NULL, 4, back, 2), IBP_ERR_CORRUPT);
	uint8_t cls[4] = { 0, 0, 1, 0 };
	cr_assert_eq(ibp_decode_batch(c, dst, off[4], off, fl, cls, 4, back, 2), IBP_ERR_CORRUPT);
	ibp_codec_free(c);
}

/* ------------------------------------------------------------------ */
/* creation                                                             */
/* ------------------------------------------------------------------ */

Test(codec, create_rejects)
{
	uint8_t m[64], b[64];
	memset(m, 0xFF, sizeof(m));
	memset(b, 0, sizeof(b));
	ibp_codec_t *c = (ibp_codec_t *)1;
	unsigned badC[] = { 0, 3, 5, 6, 7, 9, 16 };
	for (size_t i = 0; i < sizeof(badC) / sizeof(badC[0]); i++)
		cr_assert_eq(ibp_codec_create(8, badC[i], 1, m, b, &c), IBP_ERR_CORRUPT);
	cr_assert_null(c);
	cr_assert_eq(ibp_codec_create(8, 1, 0, m, b, &c), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_codec_create(8, 1, IBP_MAX_CLUSTERS + 1, m, b, &c), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_codec_create(0, 1, 1, m, b, &c), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_codec_create(IBP_MAX_ROW_BYTES + 1, 1, 1, m, b, &c), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_codec_create(8, 1, 1, NULL, b, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_create(8, 1, 1, m, NULL, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_create(8, 1, 1, m, b, NULL), IBP_ERR_INVALID_ARG);
	/* bitval outside the mask */
	m[3] = 0x0F;
	b[3] = 0x10;
	cr_assert_eq(ibp_codec_create(8, 1, 1, m, b, &c), IBP_ERR_CORRUPT);
	b[3] = 0x0F;
	cr_assert_eq(ibp_codec_create(8, 1, 1, m, b, &c), IBP_OK);
	ibp_codec_free(c);
	/* padding: R = 5, C = 4: chunk 1 has bytes 5..7 as padding */
	memset(m, 0, sizeof(m));
	memset(b, 0, sizeof(b));
	cr_assert_eq(ibp_codec_create(5, 4, 1, m, b, &c), IBP_ERR_CORRUPT);
	m[5] = m[6] = 0xFF;
	cr_assert_eq(ibp_codec_create(5, 4, 1, m, b, &c), IBP_ERR_CORRUPT);
	m[7] = 0x7F;
	cr_assert_eq(ibp_codec_create(5, 4, 1, m, b, &c), IBP_ERR_CORRUPT);
	m[7] = 0xFF;
	cr_assert_eq(ibp_codec_create(5, 4, 1, m, b, &c), IBP_OK);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 32 + 8);
	ibp_codec_free(c);
	b[6] = 0x01; /* padding bitval set */
	cr_assert_eq(ibp_codec_create(5, 4, 1, m, b, &c), IBP_ERR_CORRUPT);
	b[6] = 0;
	/* second cluster bad */
	uint8_t m2[16], b2[16];
	memcpy(m2, m, 8);
	memcpy(b2, b, 8);
	memcpy(m2 + 8, m, 8);
	memcpy(b2 + 8, b, 8);
	m2[15] = 0;
	cr_assert_eq(ibp_codec_create(5, 4, 2, m2, b2, &c), IBP_ERR_CORRUPT);
	m2[15] = 0xFF;
	cr_assert_eq(ibp_codec_create(5, 4, 2, m2, b2, &c), IBP_OK);
	cr_assert_eq(ibp_codec_nclusters(c), 2);
	cr_assert_eq(ibp_codec_nchunks(c), 2);
	cr_assert_eq(ibp_codec_chunk_bytes(c), 4);
	cr_assert_eq(ibp_codec_row_bytes(c), 5);
	cr_assert_eq(ibp_codec_threshold(c), -1.0);
	cr_assert_eq(ibp_row_bound(c), 5);
	cr_assert_eq(ibp_batch_bound(c, 10), 50);
	cr_assert_arr_eq(ibp_codec_mask(c, 1), m2 + 8, 8);
	cr_assert_arr_eq(ibp_codec_bitval(c, 1), b2 + 8, 8);
	cr_assert_null(ibp_codec_mask(c, 2));
	cr_assert_null(ibp_codec_bitval(c, 2));
	cr_assert_arr_eq(ibp_codec_xval(c, 1), b2 + 8, 8); /* no Xvals: the Bitvals */
	cr_assert_null(ibp_codec_xval(c, 2));
	cr_assert_eq(ibp_codec_has_xval(c), 0);
	ibp_codec_free(c);
	ibp_codec_free(NULL);
	cr_assert_null(ibp_codec_xval(NULL, 0));
	cr_assert_eq(ibp_codec_has_xval(NULL), 0);
}

Test(codec, create_ex_rejects)
{
	/* R = 5, C = 4, D = 2: chunk 1 has bytes 5..7 as padding. */
	uint8_t m[8] = { 0xF0, 0xFF, 0x00, 0x0F, 0xFF, 0xFF, 0xFF, 0xFF };
	uint8_t b[8] = { 0x10, 0x02, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00 };
	uint8_t x[8];
	ibp_codec_t *c = (ibp_codec_t *)1;
	/* x = b: nothing enabled, the same codec as ibp_codec_create */
	memcpy(x, b, 8);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, x, &c), IBP_OK);
	cr_assert_eq(ibp_codec_has_xval(c), 0);
	cr_assert_arr_eq(ibp_codec_xval(c, 0), b, 8);
	ibp_codec_free(c);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, NULL, &c), IBP_OK);
	cr_assert_eq(ibp_codec_has_xval(c), 0);
	cr_assert_arr_eq(ibp_codec_xval(c, 0), b, 8);
	ibp_codec_free(c);
	/* x̂ bits outside the mask, in each chunk */
	const struct {
		unsigned byte;
		uint8_t v;
	} bad[] = { { 0, 0x01 }, { 0, 0x1F }, { 2, 0x80 }, { 3, 0x10 }, { 3, 0xFF } };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(x, b, 8);
		x[bad[i].byte] = bad[i].v;
		c = (ibp_codec_t *)1;
		cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, x, &c), IBP_ERR_CORRUPT, "case %u", i);
		cr_assert_null(c);
	}
	/* x̂ bits among the padding bits of the last chunk (inside the mask) */
	for (unsigned p = 5; p < 8; p++) {
		memcpy(x, b, 8);
		x[p] = 0x40;
		cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, x, &c), IBP_ERR_CORRUPT, "byte %u", p);
	}
	/* valid and enabled: chunk 0 (x̂ = 0x...02E0 != b) and chunk 1 (byte 4) */
	memcpy(x, b, 8);
	x[0] = 0xE0;
	x[4] = 0x77;
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, x, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(c), 1);
	cr_assert_arr_eq(ibp_codec_xval(c, 0), x, 8);
	cr_assert_arr_eq(ibp_codec_bitval(c, 0), b, 8);
	ibp_codec_free(c);
	/* a bad second cluster */
	uint8_t m2[16], b2[16], x2[16];
	memcpy(m2, m, 8);
	memcpy(m2 + 8, m, 8);
	memcpy(b2, b, 8);
	memcpy(b2 + 8, b, 8);
	memcpy(x2, x, 8);
	memcpy(x2 + 8, b, 8);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 2, m2, b2, x2, &c), IBP_OK);
	cr_assert_eq(ibp_codec_has_xval(c), 1);
	cr_assert_arr_eq(ibp_codec_xval(c, 1), b, 8);
	ibp_codec_free(c);
	x2[10] = 0x01; /* byte 2 of cluster 1: mask 0x00 */
	cr_assert_eq(ibp_codec_create_ex(5, 4, 2, m2, b2, x2, &c), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, NULL, b, x, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, NULL, x, &c), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_create_ex(5, 4, 1, m, b, x, NULL), IBP_ERR_INVALID_ARG);
}

/* R = 24 f32 0/1-like rows, C = 2, full masks, b = 0, x̂ = 0x3F80 on odd
 * chunks (golden codec X): hit bits that lie past the end, flipped hit bits,
 * every truncation. */
Test(codec, xval_corrupt)
{
	uint8_t m[24], b[24] = { 0 }, x[24] = { 0 };
	memset(m, 0xFF, 24);
	for (int j = 1; j < 12; j += 2)
		x[2 * j + 1] = 0x3F, x[2 * j] = 0x80;
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create_ex(24, 2, 1, m, b, x, &c), IBP_OK);
	uint8_t row[24] = { 0 }, dst[24], bad[24], back[24];
	uint64_t len;
	uint8_t fl;
	/* one hit: LIST 30 01 */
	row[6] = 0x80;
	row[7] = 0x3F;
	encode_or_die(c, row, dst, &len, &fl, IBP_ROW_LIST);
	cr_assert_eq(len, 2);
	cr_assert_eq(dst[0], 0x30);
	cr_assert_eq(dst[1], 0x01);
	cr_assert_eq(ibp_decode_row(c, dst, 1, fl, 0, back), IBP_ERR_CORRUPT); /* hit bit past the end */
	cr_assert_eq(ibp_decode_row(c, dst, 0, fl, 0, back), IBP_ERR_CORRUPT);
	/* h = 0: a miss needs 17 bits, 3 body bytes */
	memcpy(bad, dst, 2);
	bad[1] = 0x00;
	cr_assert_eq(ibp_decode_row(c, bad, 2, fl, 0, back), IBP_ERR_CORRUPT);
	memset(bad + 2, 0, 2);
	cr_assert_eq(ibp_decode_row(c, bad, 4, fl, 0, back), IBP_OK); /* 0000: decodes as written */
	/* BITMAP: hit, miss, disabled exception (golden x-bitmap-mix) */
	memset(row, 0, 24);
	row[2] = 0x80, row[3] = 0x3F, row[7] = 0x40, row[12] = 0x01;
	encode_or_die(c, row, dst, &len, &fl, IBP_ROW_BITMAP);
	cr_assert_eq(len, 7);
	cr_assert_eq(ibp_decode_row(c, dst, len, fl, 0, back), IBP_OK);
	cr_assert_arr_eq(back, row, 24);
	for (uint64_t l = 0; l < len; l++)
		cr_assert_eq(ibp_decode_row(c, dst, l, fl, 0, back), IBP_ERR_CORRUPT, "len %llu",
			     (unsigned long long)l);
	/* chunk 1's hit bit cleared: its field becomes 17 bits, the row needs 9 bytes */
	memcpy(bad, dst, len);
	bad[2] &= 0xFE;
	cr_assert_eq(ibp_decode_row(c, bad, len, fl, 0, back), IBP_ERR_CORRUPT);
	/* an enabled chunk whose hit bit would sit past the end: bit 11 (chunk 11) */
	memcpy(bad, dst, len);
	bad[1] = 0x08;
	memset(bad + 2, 0, 5);
	cr_assert_eq(ibp_decode_row(c, bad, 6, fl, 0, back), IBP_ERR_CORRUPT);
	/* packed batch: a row shorter than its extent says is caught */
	uint64_t off[2] = { 0, len };
	cr_assert_eq(ibp_decode_batch(c, dst, len, off, &fl, NULL, 1, back, 1), IBP_OK);
	memcpy(bad, dst, len);
	bad[2] |= 0x02; /* chunk 3 now a hit: the fields after it move up */
	cr_assert_eq(ibp_decode_batch(c, bad, len, off, &fl, NULL, 1, back, 1), IBP_ERR_CORRUPT);
	ibp_codec_free(c);
}

Test(codec, encode_args)
{
	ibp_codec_t *c = nibble_codec(16);
	uint8_t row[16] = { 0 }, dst[16];
	uint64_t len;
	uint8_t fl;
	cr_assert_eq(ibp_encode_row(c, row, 1, dst, 16, &len, &fl), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_encode_row(c, NULL, 0, dst, 16, &len, &fl), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, 7, &len, &fl), IBP_ERR_BUFFER_TOO_SMALL);
	cr_assert_eq(ibp_encode_row(c, row, 0, dst, 8, &len, &fl), IBP_OK);
	cr_assert_eq(ibp_row_size(c, row, 1, &len, &fl), IBP_ERR_INVALID_ARG);
	ibp_codec_free(c);
}

/* ------------------------------------------------------------------ */
/* implementations                                                      */
/* ------------------------------------------------------------------ */

Test(codec, impl_selection)
{
	ibp_codec_t *c = nibble_codec(16);
	const char *e = getenv("IBP_FORCE_PORTABLE");
	int forced = e && strcmp(e, "1") == 0;
	ibp_impl_t got = ibp_codec_impl(c);
	cr_assert_neq(got, IBP_IMPL_AUTO);
	if (forced || !ibpi_cpu()->fast_pdep)
		cr_assert_eq(got, IBP_IMPL_PORTABLE);
	else if (have_avx512())
		cr_assert_eq(got, IBP_IMPL_AVX512);
	else if (have_avx2())
		cr_assert_eq(got, IBP_IMPL_AVX2);
	else
		cr_assert_eq(got, IBP_IMPL_BMI2);
	cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_PORTABLE), IBP_OK);
	cr_assert_eq(ibp_codec_impl(c), IBP_IMPL_PORTABLE);
	if (have_bmi2()) {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_BMI2), IBP_OK);
		cr_assert_eq(ibp_codec_impl(c), IBP_IMPL_BMI2);
	} else {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_BMI2), IBP_ERR_UNSUPPORTED);
	}
	if (have_avx512()) {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_AVX512), IBP_OK);
		cr_assert_eq(ibp_codec_impl(c), IBP_IMPL_AVX512);
	} else {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_AVX512), IBP_ERR_UNSUPPORTED);
	}
	if (have_avx2()) {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_AVX2), IBP_OK);
		cr_assert_eq(ibp_codec_impl(c), IBP_IMPL_AVX2);
	} else {
		cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_AVX2), IBP_ERR_UNSUPPORTED);
	}
	cr_assert_eq(ibp_codec_set_impl(c, (ibp_impl_t)7), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_codec_set_impl(c, IBP_IMPL_AUTO), IBP_OK);
	cr_assert_eq(ibp_codec_impl(c), got);
	ibp_codec_free(c);
}

/* Decodes src (len bytes, flags fl) into ref with the portable kernel and
 * into back with each of impls[0, n) the machine runs: each must give the
 * portable status, and its bytes where it decodes. Returns that status. */
static ibp_status_t impls_agree(ibp_codec_t *c, const uint8_t *src, uint64_t len, uint8_t fl, uint64_t R,
				const ibp_impl_t *impls, size_t n, uint8_t *ref, uint8_t *back, const char *what)
{
	ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
	memset(ref, 0, R);
	const ibp_status_t s0 = ibp_decode_row(c, src, len, fl, 0, ref);
	for (size_t k = 0; k < n; k++) {
		if (ibp_codec_set_impl(c, impls[k]) != IBP_OK)
			continue;
		memset(back, 0, R);
		const ibp_status_t s1 = ibp_decode_row(c, src, len, fl, 0, back);
		cr_assert_eq(s1, s0, "%s impl %d: status %d, portable %d", what, (int)impls[k], s1, s0);
		if (s0 == IBP_OK)
			cr_assert(memcmp(back, ref, R) == 0, "%s impl %d: bytes", what, (int)impls[k]);
	}
	return s0;
}

Test(codec, bmi2_equals_portable_large)
{
	if (!have_bmi2())
		cr_skip_test("this CPU has no BMI2");
	tu_rng_t r;
	tu_rng_seed(&r, 99);
	for (unsigned C = 1; C <= 8; C *= 2) {
		const uint64_t R = 65536 + 3, D = tu_nchunks(R, C), N = 8;
		uint8_t *rows = tu_xcalloc(N * R), *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C);
		tu_gen_rows(&r, TU_F32_SMOOTH, rows, N, R);
		tu_mask_count(rows, N, R, C, 0.75, m, b);
		ibp_codec_t *c;
		cr_assert_eq(ibp_codec_create(R, C, 1, m, b, &c), IBP_OK);
		if (C != 2) { /* Xvals too (at C = 2 the plain codec) */
			ibp_codec_t *cx = make_xcodec(&r, c, TU_F32_SMOOTH);
			ibp_codec_free(c);
			c = cx;
		}
		uint8_t *e1 = tu_xcalloc(R), *e2 = tu_xcalloc(R), *back = tu_xcalloc(R);
		for (uint64_t i = 0; i < N; i++) {
			uint64_t l1, l2;
			uint8_t f1, f2;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, e1, R, &l1, &f1), IBP_OK);
			ibp_codec_set_impl(c, IBP_IMPL_BMI2);
			cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, e2, R, &l2, &f2), IBP_OK);
			cr_assert_eq(l1, l2);
			cr_assert_eq(f1, f2);
			cr_assert(memcmp(e1, e2, l1) == 0);
			cr_assert_eq(ibp_decode_row(c, e1, l1, f1, 0, back), IBP_OK);
			cr_assert(memcmp(back, rows + i * R, R) == 0);
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			memset(back, 0, R);
			cr_assert_eq(ibp_decode_row(c, e2, l2, f2, 0, back), IBP_OK);
			cr_assert(memcmp(back, rows + i * R, R) == 0);
			if (have_avx512()) { /* SIMD static part over many groups */
				ibp_codec_set_impl(c, IBP_IMPL_AVX512);
				uint64_t l3;
				uint8_t f3;
				cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, e2, R, &l3, &f3), IBP_OK);
				cr_assert(l3 == l1 && f3 == f1 && memcmp(e1, e2, l1) == 0);
				memset(back, 0, R);
				cr_assert_eq(ibp_decode_row(c, e1, l1, f1, 0, back), IBP_OK);
				cr_assert(memcmp(back, rows + i * R, R) == 0);
			}
			if (have_avx2()) { /* AVX2 gathers over many groups */
				ibp_codec_set_impl(c, IBP_IMPL_AVX2);
				uint64_t l3;
				uint8_t f3;
				cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, e2, R, &l3, &f3), IBP_OK);
				cr_assert(l3 == l1 && f3 == f1 && memcmp(e1, e2, l1) == 0);
				memset(back, 0, R);
				cr_assert_eq(ibp_decode_row(c, e1, l1, f1, 0, back), IBP_OK);
				cr_assert(memcmp(back, rows + i * R, R) == 0);
			}
		}
		free(rows);
		free(m);
		free(b);
		free(e1);
		free(e2);
		free(back);
		ibp_codec_free(c);
	}
}

/* C = 4 in 16 lanes of 32 bits, with masks mk[0..3] (chunk j takes mk[3]
 * when j % 17 == 9, mk[2] when j % 13 == 5, mk[1] when j % 3 == 1):
 * ~m_j and m_j of one to seven runs. With mk_fit (static fields <= 23
 * bits, exceptions <= 17): the AVX-512 and AVX2 static parts run in the
 * vg16 tables and the AVX-512 rows with exceptions in the fused tables
 * (fg4, three static runs, more patched after). With mk_wide and mk_wide2
 * (25-27-bit static fields at every bit offset: no 16-lane static part,
 * but two fit a qword): fused rows with and without a third static run,
 * the 8-lane static part for clean rows, and on AVX2 the qword-pair
 * static part (q2, up to three runs, more patched after). With mk_qword (29-31-bit static
 * fields: two do not fit a qword): the 16-lane exception walk (xg4) after
 * the 8-lane static part. With mk_xwide (26-bit exceptions): the 8-lane
 * walk after the vg16 static part. A full or a partial last chunk, rows
 * with and without exceptions, and every truncation of each row: every
 * path gives the same status and bytes. */
enum { HAS_VG16 = 1, HAS_XG4 = 2, HAS_FG4 = 4, HAS_THREE = 8, HAS_FFIX4 = 16, HAS_Q2 = 32, HAS_UNI = 64 };
static void c4_lanes_case(const uint32_t mk[4], unsigned has, uint64_t seed)
{
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	static const uint64_t sizes[] = { 4 * 100, 4 * 100 + 2, 4 * 64, 4 * 33 + 1 };
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		const uint64_t R = sizes[si], D = (R + 3) / 4, N = 24;
		uint8_t *m = tu_xcalloc(D * 4), *b = tu_xcalloc(D * 4), *rows = tu_xcalloc(N * R);
		for (uint64_t j = 0; j < D; j++) {
			const uint32_t mj = mk[j % 17 == 9 ? 3 : j % 13 == 5 ? 2 : j % 3 == 1 ? 1 : 0];
			const uint32_t bj = (uint32_t)tu_next(&r) & mj;
			memcpy(m + 4 * j, &mj, 4);
			memcpy(b + 4 * j, &bj, 4);
		}
		memset(m + R, 0xFF, 4 * D - R); /* padding: invariant zeros */
		memset(b + R, 0, 4 * D - R);
		for (uint64_t i = 0; i < N; i++) {
			uint8_t *row = rows + i * R;
			for (uint64_t j = 0; j < D; j++) {
				uint32_t mj, bj, x = (uint32_t)tu_next(&r);
				memcpy(&mj, m + 4 * j, 4);
				memcpy(&bj, b + 4 * j, 4);
				x = (x & ~mj) | bj;
				if (tu_below(&r, 100) < i * 4) /* row i: about 4i% exceptions */
					x ^= mj & (uint32_t)tu_next(&r);
				uint64_t nb = R - 4 * j < 4 ? R - 4 * j : 4;
				memcpy(row + 4 * j, &x, nb);
			}
		}
		ibp_codec_t *c;
		cr_assert_eq(ibp_codec_create(R, 4, 1, m, b, &c), IBP_OK);
		const ibp_cluster_t *cl = &c->cl[0];
		cr_assert_eq(cl->nvg16 > 0, (has & HAS_VG16) != 0, "R=%llu: %llu 16-lane groups", (unsigned long long)R,
			     (unsigned long long)cl->nvg16);
		if (has & HAS_VG16)
			cr_assert_gt(cl->nvfix16, 0, "R=%llu: no three-run chunk", (unsigned long long)R);
		cr_assert(cl->xfix || !have_avx2(), "R=%llu: no m_j of three runs", (unsigned long long)R);
		cr_assert_eq(cl->q2 != NULL, (has & HAS_Q2) != 0, "R=%llu: AVX2 qword-pair tables", (unsigned long long)R);
		if (cl->q2) {
			cr_assert_eq(cl->q2->three, (has & HAS_THREE) != 0, "R=%llu: q2 third run", (unsigned long long)R);
			cr_assert_eq(cl->q2->nfix > 0, (has & HAS_FFIX4) != 0, "R=%llu: q2 fix-ups", (unsigned long long)R);
		}
		if (have_avx512()) {
			const uint64_t nxg4 = cl->vbmi ? cl->vbmi->nxg4 : 0, nfg4 = cl->vbmi ? cl->vbmi->nfg : 0;
			cr_assert_eq(nxg4 > 0, (has & HAS_XG4) != 0, "R=%llu: 16-lane walk %llu", (unsigned long long)R,
				     (unsigned long long)nxg4);
			cr_assert_eq(nfg4, has & HAS_FG4 ? (D + 15) / 16 : 0, "R=%llu: %llu fused groups",
				     (unsigned long long)R, (unsigned long long)nfg4);
			if (has & HAS_FG4) {
				cr_assert_eq(cl->vbmi->fthree, (has & HAS_THREE) != 0, "R=%llu: third static run",
					     (unsigned long long)R);
				cr_assert_eq(cl->vbmi->nffix > 0, (has & HAS_FFIX4) != 0, "R=%llu: %llu fused fix-ups",
					     (unsigned long long)R, (unsigned long long)cl->vbmi->nffix);
				/* one exception width in every group: ranks for prefix sums
				 * (VPOPCNTDQ); a partial last chunk's padding widens its mask */
				cr_assert_eq(cl->vbmi->funi, (has & HAS_UNI) && R % 4 == 0 && ibpi_cpu()->avx512popcnt,
					     "R=%llu: fused groups by rank %d", (unsigned long long)R, cl->vbmi->funi);
			}
		}
		uint8_t *enc = tu_xcalloc(R), *ref = tu_xcalloc(R), *back = tu_xcalloc(R);
		for (uint64_t i = 0; i < N; i++) {
			uint64_t len;
			uint8_t f;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, enc, R, &len, &f), IBP_OK);
			/* every truncation, then the whole row (len + 1 > len) */
			for (uint64_t t = 0; t <= len; t++) {
				ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
				uint8_t *cut = tu_guarded_copy(enc, t);
				memset(ref, 0, R);
				const ibp_status_t s0 = ibp_decode_row(c, cut, t, f, 0, ref);
				if (t == len) {
					cr_assert_eq(s0, IBP_OK);
					cr_assert(memcmp(ref, rows + i * R, R) == 0, "R=%llu row %llu",
						  (unsigned long long)R, (unsigned long long)i);
				}
				for (size_t k = 1; k < sizeof(impls) / sizeof(impls[0]); k++) {
					if (ibp_codec_set_impl(c, impls[k]) != IBP_OK)
						continue;
					memset(back, 0, R);
					const ibp_status_t s1 = ibp_decode_row(c, cut, t, f, 0, back);
					cr_assert_eq(s1, s0, "R=%llu row %llu len %llu of %llu impl %d",
						     (unsigned long long)R, (unsigned long long)i,
						     (unsigned long long)t, (unsigned long long)len, (int)impls[k]);
					if (s0 == IBP_OK)
						cr_assert(memcmp(back, ref, R) == 0, "R=%llu row %llu impl %d",
							  (unsigned long long)R, (unsigned long long)i, (int)impls[k]);
				}
				tu_guarded_free(cut, t);
			}
		}
		free(m);
		free(b);
		free(rows);
		free(enc);
		free(ref);
		free(back);
		ibp_codec_free(c);
	}
}

Test(codec, simd_c4_wide_lanes)
{
	if (!have_avx2())
		cr_skip_test("this CPU has no AVX2");
	static const uint32_t mk_fit[4] = { 0xFF800000u, 0xFF80FF00u, 0xFF8F0F00u, 0xF8888888u };
	static const uint32_t mk_wide[4] = { 0xF8000000u, 0xF0000001u, 0xE0100401u, 0xE2100401u };
	static const uint32_t mk_wide2[4] = { 0xF8000000u, 0xF0000001u, 0xE0000401u, 0xE0000401u };
	static const uint32_t mk_qword[4] = { 0x80000000u, 0x80000001u, 0x80010001u, 0x80010001u };
	static const uint32_t mk_xwide[4] = { 0xFFFFFFC0u, 0xFFFFF03Fu, 0x7FFE3FDEu, 0x7FFE3FDEu };
	c4_lanes_case(mk_fit, HAS_VG16 | HAS_XG4 | HAS_FG4 | HAS_THREE | HAS_FFIX4, 1616);
	const unsigned q2 = have_avx2() ? HAS_Q2 : 0;
	c4_lanes_case(mk_wide, HAS_XG4 | HAS_FG4 | HAS_THREE | HAS_FFIX4 | q2, 1618);
	c4_lanes_case(mk_wide2, HAS_XG4 | HAS_FG4 | HAS_UNI | q2, 1617); /* exceptions 5 bits wide (but a partial last chunk's) */
	c4_lanes_case(mk_qword, HAS_XG4, 1620);
	c4_lanes_case(mk_xwide, HAS_VG16, 1619);
}

/* The AVX-512 multishift static part for C = 1, 2 (the vgm tables, 64 /
 * C chunks a group), the 32-lane exception walk for C = 2 (xg2) and the
 * fused C = 2 rows (fg: both in one pass, the partial last group
 * included): masks mk[0..3] (chunk j takes mk[3] when j % 17 == 9, mk[2]
 * when j % 29 == 5, mk[1] when j % 3 == 1), ~m_j and m_j of one to five
 * runs (those past two or three patched after the lanes), runs at bit 0
 * and above, a full or a partial last chunk, chunks past the last full
 * group (a partial last walk group), rows from no to ~92% exceptions, and
 * every truncation of each row: every path gives the same status and
 * bytes. With mk2_wide (14-15-bit static fields: four do not fit a qword)
 * neither vgm nor fg: the 16-lane static part, then the 32-lane walk. */
enum { HAS_VGM = 1, HAS_XG2 = 2, HAS_FG = 4, HAS_FTHREE = 8 };
static void ms_case(unsigned C, uint64_t R, const uint16_t mk[4], unsigned has, tu_rng_t *r)
{
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	const uint64_t D = (R + C - 1) / C, N = 24;
	{
		uint8_t *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C), *rows = tu_xcalloc(N * R);
		for (uint64_t j = 0; j < D; j++) {
			const uint16_t mj = mk[j % 17 == 9 ? 3 : j % 29 == 5 ? 2 : j % 3 == 1 ? 1 : 0];
			const uint16_t bj = (uint16_t)(tu_next(r) & mj);
			memcpy(m + C * j, &mj, C);
			memcpy(b + C * j, &bj, C);
		}
		memset(m + R, 0xFF, C * D - R); /* padding: invariant zeros */
		memset(b + R, 0, C * D - R);
		for (uint64_t i = 0; i < N; i++) {
			uint8_t *row = rows + i * R;
			for (uint64_t j = 0; j < D; j++) {
				uint16_t mj = 0, bj = 0, x = (uint16_t)tu_next(r);
				memcpy(&mj, m + C * j, C);
				memcpy(&bj, b + C * j, C);
				x = (uint16_t)((x & ~mj) | bj);
				if (tu_below(r, 100) < i * 4) /* row i: about 4i% exceptions */
					x ^= (uint16_t)(mj & tu_next(r));
				uint64_t nb = R - C * j < C ? R - C * j : C;
				memcpy(row + C * j, &x, nb);
			}
		}
		ibp_codec_t *c;
		cr_assert_eq(ibp_codec_create(R, C, 1, m, b, &c), IBP_OK);
		const ibp_vbmi_t *v = c->cl[0].vbmi;
		if (!have_avx512())
			has = 0; /* no VBMI plan: the rows still go through every other implementation */
		cr_assert_eq(v && v->nvgm > 0, (has & HAS_VGM) != 0, "C=%u R=%llu: multishift groups", C,
			     (unsigned long long)R);
		if (has & HAS_VGM)
			cr_assert_gt(v->nvfixm, 0, "C=%u R=%llu: no three-run chunk", C, (unsigned long long)R);
		cr_assert_eq(v && v->nxg2 > 0, (has & HAS_XG2) != 0, "C=%u R=%llu: 32-lane walk", C,
			     (unsigned long long)R);
		cr_assert_eq(v ? v->nfg : 0, has & HAS_FG ? (D + 31) / 32 : 0, "C=%u R=%llu: fused groups", C,
			     (unsigned long long)R);
		if (has & HAS_FG) {
			cr_assert_eq(v->fthree, (has & HAS_FTHREE) != 0, "R=%llu: third static run", (unsigned long long)R);
			cr_assert_gt(v->nffix, 0, "R=%llu: no fused fix-ups", (unsigned long long)R);
		}
		cr_assert(C != 2 || c->cl[0].xfix, "R=%llu: no m_j of more than two runs", (unsigned long long)R);
		uint8_t *enc = tu_xcalloc(R), *ref = tu_xcalloc(R), *back = tu_xcalloc(R);
		for (uint64_t i = 0; i < N; i++) {
			uint64_t len;
			uint8_t f;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, enc, R, &len, &f), IBP_OK);
			/* every truncation, then the whole row (len + 1 > len) */
			for (uint64_t t = 0; t <= len; t++) {
				uint8_t *cut = tu_guarded_copy(enc, t);
				char what[96];
				snprintf(what, sizeof(what), "C=%u R=%llu row %llu len %llu of %llu", C, (unsigned long long)R,
					 (unsigned long long)i, (unsigned long long)t, (unsigned long long)len);
				const ibp_status_t s0 = impls_agree(c, cut, t, f, R, impls + 1,
								    sizeof(impls) / sizeof(impls[0]) - 1, ref, back, what);
				if (t == len) {
					cr_assert_eq(s0, IBP_OK);
					cr_assert(memcmp(ref, rows + i * R, R) == 0, "C=%u R=%llu row %llu", C,
						  (unsigned long long)R, (unsigned long long)i);
				}
				tu_guarded_free(cut, t);
			}
		}
		free(m);
		free(b);
		free(rows);
		free(enc);
		free(ref);
		free(back);
		ibp_codec_free(c);
	}
}

/* Without AVX-512 VBMI the same rows check the AVX2 and BMI2 decoders
 * against the portable one (the AVX2 static groups near a row's end). */
Test(codec, simd_multishift_static)
{
	if (!have_avx2())
		cr_skip_test("this CPU has no AVX2");
	static const uint16_t mk2[4] = { 0xF003u, 0xC038u, 0x8924u, 0x8924u }; /* 1, 2, 5 runs of ~m */
	static const uint16_t mk2t[4] = { 0xF003u, 0xC038u, 0x8924u, 0x8421u }; /* and 3 */
	static const uint16_t mk2_wide[4] = { 0x8000u, 0x8001u, 0x8101u, 0x8101u }; /* m: 1, 2, 3 runs */
	static const uint16_t mk1[4] = { 0xE1u, 0x18u, 0x52u, 0x52u };           /* 1, 2, 4 */
	tu_rng_t r;
	tu_rng_seed(&r, 1617);
	static const uint64_t R2[] = { 512, 2 * 70 + 1, 2 * 32, 2 * 100 };
	for (size_t i = 0; i < sizeof(R2) / sizeof(R2[0]); i++) {
		ms_case(2, R2[i], mk2, HAS_VGM | HAS_XG2 | HAS_FG, &r);
		ms_case(2, R2[i], mk2t, HAS_VGM | HAS_XG2 | HAS_FG | HAS_FTHREE, &r);
		ms_case(2, R2[i], mk2_wide, HAS_XG2, &r);
	}
	ms_case(1, 256, mk1, HAS_VGM, &r);
	ms_case(1, 64 * 2 + 7, mk1, HAS_VGM, &r);
}

/* Decodes src[0, len) with every implementation: each gives portable's
 * status and, when it decodes, its bytes; returns portable's status. */
static ibp_status_t decode_all_agree(ibp_codec_t *c, const uint8_t *src, uint64_t len, uint8_t fl, uint8_t *ref,
				     uint8_t *back, const char *what, uint64_t a, uint64_t b)
{
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	const uint64_t R = ibp_codec_row_bytes(c);
	uint8_t *cut = tu_guarded_copy(src, len); /* a read past it crashes */
	ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
	memset(ref, 0, R);
	const ibp_status_t s0 = ibp_decode_row(c, cut, len, fl, 0, ref);
	for (size_t k = 1; k < sizeof(impls) / sizeof(impls[0]); k++) {
		if (ibp_codec_set_impl(c, impls[k]) != IBP_OK)
			continue;
		memset(back, 0, R);
		const ibp_status_t s1 = ibp_decode_row(c, cut, len, fl, 0, back);
		CHECK(s1 == s0, "%s %llu %llu len %llu impl %d: status %d, portable %d", what, (unsigned long long)a,
		      (unsigned long long)b, (unsigned long long)len, (int)impls[k], s1, s0);
		CHECK(s0 != IBP_OK || memcmp(back, ref, R) == 0, "%s %llu %llu impl %d: bytes differ", what,
		      (unsigned long long)a, (unsigned long long)b, (int)impls[k]);
	}
	tu_guarded_free(cut, len);
	return s0;
}

/* LIST rows of a byte an entry (L = 8: 128 < D <= 256), taken by the
 * branch-free list expansion (ibp_exc_bitmap) and the scalar walk (xone
 * with its padded copy of the body's last 8 bytes): C = 2 with the fused
 * tables (AVX-512: rows under two exceptions a fused group take the
 * multishift static part and the scalar walk, denser ones the fused
 * groups), C = 2 without them (mk2_wide) and C = 1; a full or a partial
 * last chunk; rows of 1 to 28 exceptions at random chunks (the last one
 * included), every truncation, and each entry of the list set to values
 * around its neighbours (a duplicate, unsorted, >= D when D < 256): every
 * implementation gives portable's status and bytes. Dense rows (5
 * chunks of every 8 exceptions) are BITMAP rows; written again as LIST rows,
 * no encoder's choice, they reach AVX2's SIMD walk (8 exceptions a group
 * of 16 chunks and more) and go through the same checks. */
Test(codec, list_l8_rows)
{
	static const uint16_t mk2[4] = { 0xF003u, 0xC038u, 0x8924u, 0x8924u };
	static const uint16_t mk2_wide[4] = { 0x8000u, 0x8001u, 0x8101u, 0x8101u };
	static const uint16_t mk1[4] = { 0xE1u, 0x18u, 0x52u, 0x52u };
	static const struct {
		unsigned C;
		uint64_t R;
		const uint16_t *mk;
		int fused;
	} cases[] = { { 2, 512, mk2, 1 },      { 2, 400, mk2, 1 }, { 2, 2 * 200 - 1, mk2, 1 }, { 2, 2 * 129, mk2, 1 },
		      { 2, 2 * 256, mk2_wide, 0 }, { 1, 256, mk1, 0 }, { 1, 201, mk1, 0 } };
	static const uint64_t nexc[] = { 1, 2, 5, 9, 14, 15, 16, 17, 20, 24, 28, 0 };
	tu_rng_t r;
	tu_rng_seed(&r, 3333);
	uint64_t lists = 0, corrupt = 0, dense = 0;
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const unsigned C = cases[ci].C;
		const uint64_t R = cases[ci].R, D = (R + C - 1) / C;
		uint8_t *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C), *row = tu_xcalloc(R);
		for (uint64_t j = 0; j < D; j++) {
			const uint16_t mj = cases[ci].mk[j % 17 == 9 ? 3 : j % 29 == 5 ? 2 : j % 3 == 1 ? 1 : 0];
			const uint16_t bj = (uint16_t)(tu_next(&r) & mj);
			memcpy(m + C * j, &mj, C);
			memcpy(b + C * j, &bj, C);
		}
		memset(m + R, 0xFF, C * D - R); /* padding: invariant zeros */
		memset(b + R, 0, C * D - R);
		ibp_codec_t *c;
		cr_assert_eq(ibp_codec_create(R, C, 1, m, b, &c), IBP_OK);
		cr_assert_eq(c->L, 8u, "D=%llu", (unsigned long long)D);
		if (have_avx512()) {
			const ibp_vbmi_t *v = c->cl[0].vbmi;
			cr_assert_eq(v && v->nfg > 0 && v->nvgm > 0, cases[ci].fused, "case %zu: fused tables", ci);
		}
		/* room for a dense row's LIST header (up to 257 bytes for a bitmap's 17..32) */
		uint8_t *enc = tu_xcalloc(ibp_row_bound(c) + 256), *bad = tu_xcalloc(ibp_row_bound(c) + 256);
		uint8_t *ref = tu_xcalloc(R), *back = tu_xcalloc(R);
		for (size_t ni = 0; ni < sizeof(nexc) / sizeof(nexc[0]); ni++) {
			/* the static part, then nexc[ni] chunks changed in m_j */
			for (uint64_t j = 0; j < D; j++) {
				uint16_t mj = 0, bj = 0, x = (uint16_t)tu_next(&r);
				memcpy(&mj, m + C * j, C);
				memcpy(&bj, b + C * j, C);
				x = (uint16_t)((x & ~mj) | bj);
				memcpy(row + C * j, &x, R - C * j < C ? R - C * j : C);
			}
			const int dense_row = nexc[ni] == 0; /* 5 chunks of 8 and the last */
			for (uint64_t k = 0; k < (dense_row ? D : nexc[ni]); k++) {
				if (dense_row && k % 8 >= 5 && k != D - 1)
					continue;
				const uint64_t j = dense_row ? k : k == 0 ? D - 1 : tu_below(&r, D);
				const uint64_t nb = R - C * j < C ? R - C * j : C;
				uint16_t mj = 0, x = 0;
				memcpy(&mj, m + C * j, C);
				memcpy(&x, row + C * j, nb);
				mj &= (uint16_t)(nb == 2 ? 0xFFFFu : 0xFFu);
				uint16_t f = (uint16_t)(mj & tu_next(&r));
				x ^= f ? f : (uint16_t)(mj & (0u - mj));
				memcpy(row + C * j, &x, nb);
			}
			uint64_t len;
			uint8_t fl;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, row, 0, enc, ibp_row_bound(c), &len, &fl), IBP_OK);
			for (uint64_t t = 0; t <= len; t++) {
				const ibp_status_t s0 = decode_all_agree(c, enc, t, fl, ref, back, "trunc", ci, ni);
				if (t == len) {
					cr_assert_eq(s0, IBP_OK);
					cr_assert(memcmp(ref, row, R) == 0, "case %zu row %zu", ci, ni);
				}
			}
			if (fl == IBP_ROW_BITMAP && dense_row) {
				/* the same row as a LIST (the body as it is): 8 exceptions a
				 * group of 16 and more, which AVX2's walk takes */
				const uint64_t hb = (D + 7) / 8;
				uint64_t n = 0;
				for (uint64_t j = 0; j < D; j++)
					if (enc[j / 8] >> (j % 8) & 1)
						bad[1 + n++] = (uint8_t)j;
				cr_assert(n >= 8 * ((D + 15) / 16) && n <= 256, "case %zu: %llu exceptions", ci,
					  (unsigned long long)n);
				bad[0] = (uint8_t)(n - 1);
				memmove(enc + 1 + n, enc + hb, len - hb);
				memcpy(enc, bad, 1 + n);
				len = len - hb + 1 + n;
				fl = IBP_ROW_LIST;
				for (uint64_t t = 0; t < len; t++)
					decode_all_agree(c, enc, t, fl, ref, back, "dense list cut", ci, t);
				cr_assert_eq(decode_all_agree(c, enc, len, fl, ref, back, "dense list", ci, n), IBP_OK);
				cr_assert(memcmp(ref, row, R) == 0, "case %zu: the dense LIST row", ci);
				dense++;
			}
			if (fl != IBP_ROW_LIST)
				continue;
			lists++;
			const uint64_t n = (uint64_t)enc[0] + 1;
			for (uint64_t k = 0; k < n; k++) {
				const uint64_t prev = k ? enc[k] : 0, next = k + 1 < n ? enc[k + 2] : D - 1;
				const uint64_t vals[] = { prev, prev + 1, enc[k + 1] - 1, next, next + 1, D - 1, D, 255, 0 };
				for (size_t vi = 0; vi < sizeof(vals) / sizeof(vals[0]); vi++) {
					if (vals[vi] > 255 || vals[vi] == enc[k + 1])
						continue;
					memcpy(bad, enc, len);
					bad[k + 1] = (uint8_t)vals[vi];
					if (decode_all_agree(c, bad, len, fl, ref, back, "entry", k, vals[vi]) != IBP_OK)
						corrupt++;
				}
			}
		}
		free(m);
		free(b);
		free(row);
		free(enc);
		free(bad);
		free(ref);
		free(back);
		ibp_codec_free(c);
	}
	cr_assert_gt(lists, 20);
	cr_assert_gt(corrupt, 100);
	cr_assert_gt(dense, 4);
}

/* The scalar exception walks of AVX2 and AVX-512 (codec_internal.h:
 * xscalar's unchecked fields before the body's last 8 bytes and its
 * checked finish, the Xval walk from a bit buffer) and AVX2's two-window
 * C = 4 static part (the w2 tables with and without fix-ups; the test's
 * name is older than the shared walk): chunk j takes mk[3] when j % 16 is 8
 * or 9, mk[2] when j % 29 == 5, mk[1] when j % 3 == 1, else mk[0];
 * with xv, Xvals on 4 of 5 chunks. Rows from no to every chunk an
 * exception (hits on 4 of 5 enabled ones), and rows whose exceptions are
 * only the last chunk, the last three, or the chunks in the row's last 8
 * bytes; every truncation of each: every implementation gives the
 * portable decoder's status and bytes. w2: 0 none expected, 1 with
 * fix-ups (no q2), 2 without (q2 beside it). */
static void walk_case(unsigned C, uint64_t R, const uint32_t mk[4], int xv, int w2, tu_rng_t *r)
{
	static const ibp_impl_t impls[] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	const uint64_t D = (R + C - 1) / C, N = 30;
	uint8_t *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C), *x = tu_xcalloc(D * C), *rows = tu_xcalloc(N * R);
	for (uint64_t j = 0; j < D; j++) {
		const uint32_t mj = mk[j % 16 == 8 || j % 16 == 9 ? 3 : j % 29 == 5 ? 2 : j % 3 == 1 ? 1 : 0];
		const uint32_t bj = (uint32_t)tu_next(r) & mj, xj = xv && j % 5 ? (uint32_t)tu_next(r) & mj : bj;
		memcpy(m + C * j, &mj, C);
		memcpy(b + C * j, &bj, C);
		memcpy(x + C * j, &xj, C);
	}
	memset(m + R, 0xFF, C * D - R); /* padding: invariant zeros */
	memset(b + R, 0, C * D - R);
	memset(x + R, 0, C * D - R);
	for (uint64_t i = 0; i < N; i++) {
		uint8_t *row = rows + i * R;
		for (uint64_t j = 0; j < D; j++) {
			uint32_t mj = 0, bj = 0, xj = 0, v = (uint32_t)tu_next(r);
			memcpy(&mj, m + C * j, C);
			memcpy(&bj, b + C * j, C);
			memcpy(&xj, x + C * j, C);
			v = (v & ~mj) | bj;
			const int exc = i < 26 ? tu_below(r, 25) < i : i == 26 ? j + 1 == D
				      : i == 27 ? j + 3 >= D : i == 28 ? (j + 1) * C + 8 > R : 1;
			if (exc) {
				if (xj != bj && tu_below(r, 5))
					v = (v & ~mj) | xj; /* a hit */
				else
					v ^= mj & (uint32_t)tu_next(r);
			}
			memcpy(row + C * j, &v, R - C * j < C ? R - C * j : C);
		}
	}
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create_ex(R, C, 1, m, b, x, &c), IBP_OK);
	const ibp_cluster_t *cl = &c->cl[0];
	cr_assert_eq(cl->has_x, (unsigned)(xv != 0), "C=%u R=%llu: Xvals", C, (unsigned long long)R);
	if (have_avx2() && C == 4) {
		cr_assert_eq(cl->w2 != NULL, w2 != 0, "R=%llu: w2 tables", (unsigned long long)R);
		if (w2) {
			cr_assert_eq(cl->w2->nfix > 0, w2 == 1, "R=%llu: %llu w2 fix-ups", (unsigned long long)R,
				     (unsigned long long)cl->w2->nfix);
			cr_assert_eq(cl->q2 != NULL, w2 == 2, "R=%llu: q2 beside w2", (unsigned long long)R);
			cr_assert(cl->w2->three, "R=%llu: no third run", (unsigned long long)R);
		}
	}
	uint8_t *enc = tu_xcalloc(2 * R + 16), *ref = tu_xcalloc(R), *back = tu_xcalloc(R);
	uint64_t nbitmap = 0;
	for (uint64_t i = 0; i < N; i++) {
		uint64_t len;
		uint8_t f;
		ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
		cr_assert_eq(ibp_encode_row(c, rows + i * R, 0, enc, 2 * R + 16, &len, &f), IBP_OK);
		nbitmap += (f & 3) == IBP_ROW_BITMAP;
		for (uint64_t t = 0; t <= len; t++) {
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			uint8_t *cut = tu_guarded_copy(enc, t);
			memset(ref, 0, R);
			const ibp_status_t s0 = ibp_decode_row(c, cut, t, f, 0, ref);
			if (t == len) {
				cr_assert_eq(s0, IBP_OK);
				cr_assert(memcmp(ref, rows + i * R, R) == 0, "C=%u R=%llu row %llu", C,
					  (unsigned long long)R, (unsigned long long)i);
			}
			for (size_t k = 1; k < sizeof(impls) / sizeof(impls[0]); k++) {
				if (ibp_codec_set_impl(c, impls[k]) != IBP_OK)
					continue;
				memset(back, 0, R);
				const ibp_status_t s1 = ibp_decode_row(c, cut, t, f, 0, back);
				cr_assert_eq(s1, s0, "C=%u R=%llu xv %d row %llu len %llu of %llu impl %d", C,
					     (unsigned long long)R, xv, (unsigned long long)i, (unsigned long long)t,
					     (unsigned long long)len, (int)impls[k]);
				if (s0 == IBP_OK)
					cr_assert(memcmp(back, ref, R) == 0, "C=%u R=%llu xv %d row %llu impl %d", C,
						  (unsigned long long)R, xv, (unsigned long long)i, (int)impls[k]);
			}
			tu_guarded_free(cut, t);
		}
	}
	cr_assert_gt(nbitmap, 10, "C=%u R=%llu: %llu BITMAP rows", C, (unsigned long long)R,
		     (unsigned long long)nbitmap);
	free(m);
	free(b);
	free(x);
	free(rows);
	free(enc);
	free(ref);
	free(back);
	ibp_codec_free(c);
}

Test(codec, avx2_walk)
{
	if (!have_avx2())
		cr_skip_test("this CPU has no AVX2");
	/* f16 pairs: ~m of three runs (0x83FF83FF) or two; a wide mask of no
	 * invariant bits at j % 16 = 8, 9 (its field fits slot 0 only at bit
	 * 0, and two of them no qword) */
	static const uint32_t mk4[4] = { 0x7C007C00u, 0xFC00FC00u, 0x7E007C00u, 0x7C007C00u };
	/* (chunks 8 and 9 start at bit 7: a 32-bit run there fits neither window) */
	static const uint32_t mk4f[4] = { 0x7C007C00u, 0x7C007C00u, 0x7E007C00u, 0x00000000u };
	/* 0x55005500 (j % 29 == 5): many runs, a w2 fix-up each: q2 serves */
	static const uint32_t mk4r[4] = { 0x7C007C00u, 0x7C007C00u, 0x55005500u, 0xF000F000u };
	static const uint32_t mk2[4] = { 0x7F80u, 0xFF80u, 0x7FC0u, 0x5A5Au };
	static const uint32_t mk1[4] = { 0xF0u, 0xE0u, 0xF8u, 0xA5u };
	tu_rng_t r;
	tu_rng_seed(&r, 3301);
	for (int xv = 0; xv < 2; xv++) {
		for (uint64_t R = 4 * 61; R <= 4 * 61 + 2; R += 2) {
			walk_case(4, R, mk4, xv, 2, &r);
			walk_case(4, R, mk4f, xv, 1, &r);
			walk_case(4, R, mk4r, xv, 0, &r);
		}
		walk_case(4, 4 * 8 + 1, mk4, xv, 2, &r); /* one group, a partial chunk past it */
		walk_case(2, 2 * 150, mk2, xv, 0, &r);
		walk_case(2, 2 * 150 + 1, mk2, xv, 0, &r);
		walk_case(2, 2 * 7, mk2, xv, 0, &r); /* a body of a few bytes */
		walk_case(1, 150, mk1, xv, 0, &r);
		walk_case(1, 70 + 3, mk1, xv, 0, &r);
	}
}

/* ------------------------------------------------------------------ */
/* paper layout                                                         */
/* ------------------------------------------------------------------ */

/* The one-pass encoder (C < 8, no Xvals: blocks of 64 chunks with SIMD
 * compares, then words of 8 / C chunks, then single chunks): D around the
 * block and word boundaries, a full or a partial last chunk, the second
 * of two clusters (its Mask bytes start D * C in), and from one missed
 * chunk (LIST) to every chunk (BITMAP): every path writes the reference's
 * bytes (check_row). */
Test(codec, encode_dense_blocks)
{
	tu_rng_t r;
	tu_rng_seed(&r, 1616);
	static const uint64_t Ds[] = { 1, 7, 63, 64, 65, 127, 128, 129, 191, 192, 384, 449 };
	static const unsigned rate[] = { 0, 3, 40, 100 }; /* % of chunks missed; 0: one */
	for (unsigned C = 1; C <= 4; C *= 2) {
		for (size_t d = 0; d < sizeof(Ds) / sizeof(Ds[0]); d++) {
			for (unsigned part = 0; part < (C > 1 ? 2u : 1u); part++) {
				const uint64_t R = Ds[d] * C - part, D = tu_nchunks(R, C);
				uint8_t *m = tu_xcalloc(2 * D * C), *b = tu_xcalloc(2 * D * C);
				uint8_t *row = tu_xcalloc(R), *nv = tu_xcalloc(R);
				tu_mask_random(&r, 0.9, m, b, R, C);
				tu_mask_random(&r, 0.5, m + D * C, b + D * C, R, C);
				ibp_codec_t *c = NULL;
				cr_assert_eq(ibp_codec_create(R, C, 2, m, b, &c), IBP_OK);
				for (unsigned k = 0; k < 2; k++) {
					const uint8_t *mk = m + k * D * C, *bk = b + k * D * C;
					for (size_t q = 0; q < sizeof(rate) / sizeof(rate[0]); q++) {
						tu_fill_random(&r, row, R);
						memcpy(nv, row, R);
						tu_make_never_match(nv, mk, bk, R, C);
						for (uint64_t j = 0; j < D; j++) {
							if (rate[q] ? tu_below(&r, 100) < rate[q] : j == D / 2)
								memcpy(row + j * C, nv + j * C,
								       (j + 1) * C <= R ? C : R - j * C);
							else
								tu_make_match(row, mk, bk, R, C, j);
						}
						check_row(c, row, k, "dense");
					}
				}
				ibp_codec_free(c);
				free(m);
				free(b);
				free(row);
				free(nv);
			}
		}
	}
}

Test(codec, paper_layout_size)
{
	/* R = 64, C = 4, D = 16; mask 0xFFFF0000 (16 static bits per chunk).
	 * Bitmap: 16 bits = 2 bytes -> 4. Clean row payload 16*16 bits = 32
	 * bytes -> 32: 36. One exception: 15*16 + 32 = 272 bits = 34 bytes ->
	 * 36: 40. All exceptions: 4 + 64 = 68 >= 64: raw 64. */
	uint8_t m[64], b[64], rows[3 * 64];
	for (int j = 0; j < 16; j++) {
		uint32_t mm = 0xFFFF0000u, bb = 0x3F800000u & mm;
		memcpy(m + 4 * j, &mm, 4);
		memcpy(b + 4 * j, &bb, 4);
	}
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(64, 4, 1, m, b, &c), IBP_OK);
	memcpy(rows, b, 64);
	memcpy(rows + 64, b, 64);
	rows[64 + 7] ^= 0x40;
	memset(rows + 128, 0x77, 64);
	cr_assert_eq(ibp_paper_layout_size(c, rows, 1), 36);
	cr_assert_eq(ibp_paper_layout_size(c, rows + 64, 1), 40);
	cr_assert_eq(ibp_paper_layout_size(c, rows + 128, 1), 64);
	cr_assert_eq(ibp_paper_layout_size(c, rows, 3), 36 + 40 + 64);
	cr_assert_eq(ibp_paper_layout_size(c, rows, 0), 0);
	ibp_codec_free(c);
	/* Xvals are not part of the paper's layout: the same sizes */
	uint8_t x[64];
	memcpy(x, b, 64);
	x[7] ^= 0x40; /* chunk 1: x̂ = the exception of rows[1] */
	cr_assert_eq(ibp_codec_create_ex(64, 4, 1, m, b, x, &c), IBP_OK);
	cr_assert_eq(ibp_paper_layout_size(c, rows, 3), 36 + 40 + 64);
	uint64_t len;
	cr_assert_eq(ibp_row_size(c, rows + 64, 0, &len, NULL), IBP_OK);
	cr_assert_eq(len, 1 + 33); /* LIST (L = 4): 1 hit bit after 256 static bits */
	ibp_codec_free(c);
}

/* ------------------------------------------------------------------ */
/* parallel-for                                                         */
/* ------------------------------------------------------------------ */

typedef struct pf_ctx {
	uint8_t *hits;
	int bad_tid;
	int maxt;
} pf_ctx_t;

static void pf_fn(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	pf_ctx_t *x = ctx;
	if (tid < 0 || tid >= x->maxt)
		x->bad_tid = 1;
	for (uint64_t i = begin; i < end; i++)
		x->hits[i]++;
}

Test(codec, parallel_for)
{
	uint64_t ns[] = { 0, 1, 2, 3, 7, 100, 1001 };
	int ts[] = { 0, 1, 2, 3, 5, 64 };
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
		for (size_t t = 0; t < sizeof(ts) / sizeof(ts[0]); t++) {
			pf_ctx_t x = { tu_xcalloc(ns[a] + 1), 0, ibpi_parallel_threads(ts[t], ns[a]) };
			cr_assert_geq(x.maxt, 1);
			cr_assert_leq((uint64_t)x.maxt, ns[a] ? ns[a] : 1);
			cr_assert_eq(ibpi_parallel_for(ts[t], ns[a], pf_fn, &x), IBP_OK);
			for (uint64_t i = 0; i < ns[a]; i++)
				cr_assert_eq(x.hits[i], 1, "n=%llu t=%d i=%llu", (unsigned long long)ns[a], ts[t],
					     (unsigned long long)i);
			cr_assert_eq(x.bad_tid, 0);
			free(x.hits);
		}
	cr_assert_eq(ibpi_parallel_for(-1, 10, pf_fn, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibpi_parallel_for(1, 10, NULL, NULL), IBP_ERR_INVALID_ARG);
}

/* The process's worker pool behind ibpi_parallel_for: tids above 0 run on
 * threads other than the caller's, the same ones call after call (kept,
 * not started again); a call from inside a job, calls from several
 * threads at once and calls in a fork() child all finish with every range
 * done once. */
typedef struct pool_ctx {
	_Atomic uint32_t *hits;
	pthread_t caller, on[8];
	_Atomic int bad;
	int inner; /* run a nested parallel-for in each range */
	int slow;  /* this tid takes 2 ms before its range: the caller must wait for it */
} pool_ctx_t;

static void pool_fn(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	pool_ctx_t *x = ctx;
	if (tid < 0 || tid >= 8 || (tid == 0) != (pthread_equal(pthread_self(), x->caller) != 0))
		atomic_store(&x->bad, 1);
	else
		x->on[tid] = pthread_self();
	if (tid && tid == x->slow)
		usleep(2000);
	for (uint64_t i = begin; i < end; i++) {
		if (x->inner) {
			pf_ctx_t y = { tu_xcalloc(50), 0, ibpi_parallel_threads(3, 50) };
			if (ibpi_parallel_for(3, 50, pf_fn, &y) != IBP_OK || y.bad_tid)
				atomic_store(&x->bad, 1);
			for (int k = 0; k < 50; k++)
				if (y.hits[k] != 1)
					atomic_store(&x->bad, 1);
			free(y.hits);
		}
		atomic_fetch_add(&x->hits[i], 1);
	}
}

static int pool_round(int t, uint64_t n, int inner, pthread_t *on)
{
	static _Atomic int round;
	const int r = atomic_fetch_add(&round, 1);
	pool_ctx_t x = { tu_xcalloc(n * sizeof(uint32_t)), pthread_self(), { 0 }, 0, inner,
			 r % 16 == 0 ? 1 + (r / 16) % (t > 1 ? t - 1 : 1) : 0 };
	int ok = ibpi_parallel_for(t, n, pool_fn, &x) == IBP_OK && !atomic_load(&x.bad);
	for (uint64_t i = 0; i < n; i++)
		ok = ok && atomic_load(&x.hits[i]) == 1;
	if (on)
		memcpy(on, x.on, sizeof(x.on));
	free((void *)x.hits);
	return ok;
}

static void *pool_thread(void *arg)
{
	int ok = 1;
	for (int r = 0; r < 300 && ok; r++)
		ok = pool_round(2 + r % 3, 97 + (uint64_t)r, 0, NULL);
	*(int *)arg = ok;
	return NULL;
}

Test(codec, parallel_for_pool, .timeout = 15)
{
	pthread_t first[8], on[8];
	cr_assert(pool_round(4, 1000, 0, first));
	for (int r = 0; r < 2000; r++) {
		cr_assert(pool_round(4, 1000, 0, on), "round %d", r);
		for (int k = 1; k < 4; k++)
			cr_assert(pthread_equal(on[k], first[k]), "round %d: tid %d on a new thread", r, k);
	}
	cr_assert(pool_round(3, 10, 1, NULL), "nested");
	pthread_t th[4];
	int ok[4] = { 0 };
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, pool_thread, &ok[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert(ok[i], "caller thread %d", i);
	}
	for (int f = 0; f < 2; f++) { /* a child (and its child) has no workers until it asks */
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			alarm(10); /* a child that hangs dies (and fails the test) */
			int good = 1;
			for (int r = 0; r < 200 && good; r++)
				good = pool_round(4, 333, 0, NULL);
			if (good && f) {
				pid_t g = fork();
				if (g == 0) {
					alarm(10);
					_exit(pool_round(3, 77, 0, NULL) ? 0 : 1);
				}
				int gs = 0;
				good = g > 0 && waitpid(g, &gs, 0) == g && WIFEXITED(gs) && WEXITSTATUS(gs) == 0;
			}
			_exit(good ? 0 : 1);
		}
		int status = 0;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child %d", f);
		cr_assert(pool_round(4, 1000, 0, NULL), "the parent after fork %d", f);
	}
}

/* decode_tiny_run (the store's runs of tiny rows): rows laid out as the
 * row map describes them (records offset << sh | cluster << 2 | mode),
 * valid rows of every mode mixed with rows too short or too long, random
 * bytes under every mode and a cluster past K, the payload ending 0-20
 * bytes after the last row at a PROT_NONE page. For every implementation
 * with the kernel, exact and not, from several first rows: it decodes
 * exactly the rows before the first one it must not take (not CLEAN or,
 * Xvals aside, BITMAP; failing the checked path; its length not its
 * extent, or short of it when not exact; less than 18 bytes before the
 * end), each as the checked path does, and writes nothing past them. */
Test(codec, tiny_run)
{
	tu_rng_t r;
	tu_rng_seed(&r, 71);
	static const unsigned Cs[4] = { 1, 2, 4, 8 };
	static const ibp_impl_t impls[] = { IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	uint64_t taken = 0, tested = 0, modes[4] = { 0 };
	for (int ci = 0; ci < 4; ci++)
		for (uint64_t D = 1; D * Cs[ci] <= 16; D++)
			for (int part = 0; part < (Cs[ci] > 1 ? 2 : 1); part++)
				for (int xv = 0; xv < 2; xv++) {
		const unsigned C = Cs[ci], sh = 4; /* cluster bits 2 (cmask 3): a cluster past K fits */
		const uint64_t R = D * C - (uint64_t)part, N = 48;
		ibp_codec_t *c = tiny_codec(&r, R, C, 0.5 + 0.45 * (double)tu_below(&r, 2), 0.3, xv);
		uint8_t *pay = tu_xcalloc(N * 40 + 32);
		uint32_t rec[49];
		uint64_t off = 0;
		for (uint64_t i = 0; i < N; i++) {
			uint8_t row[16] = { 0 }, enc[64];
			unsigned k = (unsigned)tu_below(&r, 2);
			const uint8_t *mk = ibp_codec_mask(c, k), *bk = ibp_codec_bitval(c, k);
			tu_fill_random(&r, row, R);
			const uint64_t keep = tu_below(&r, 4); /* chunks left random: 0 (a CLEAN row) .. */
			for (uint64_t j = 0; j < D; j++)
				if (tu_below(&r, 8) >= keep)
					tu_set_word(row, C, j, (tu_word(row, C, j) & ~tu_word(mk, C, j)) | tu_word(bk, C, j));
			uint64_t len = 0;
			uint8_t fl = 0;
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			cr_assert_eq(ibp_encode_row(c, row, k, enc, sizeof(enc), &len, &fl), IBP_OK);
			const uint64_t how = tu_below(&r, 16);
			if (how == 0 && len > 0) {
				len--; /* short */
			} else if (how == 1) {
				enc[len++] = (uint8_t)tu_below(&r, 256); /* long */
			} else if (how == 2) {
				len = tu_below(&r, 2 * R + 3); /* random bytes, random mode */
				tu_fill_random(&r, enc, len);
				if (tu_below(&r, 2))
					enc[0] = 0; /* an empty bitmap */
				fl = (uint8_t)tu_below(&r, 4);
			} else if (how == 3) {
				k = 2 + (unsigned)tu_below(&r, 2); /* a cluster past K */
			}
			modes[fl & 3]++;
			memcpy(pay + off, enc, len);
			rec[i] = (uint32_t)(off << sh | (uint64_t)k << 2 | (fl & 3u));
			off += len;
		}
		rec[N] = (uint32_t)(off << sh);
		const uint64_t size = off + tu_below(&r, 21);
		uint8_t *g = tu_guarded_copy(pay, size);
		for (int exact = 0; exact < 2; exact++) {
			/* the rows the kernel must take */
			int take[48];
			uint8_t want[48 * 16];
			for (uint64_t i = 0; i < N; i++) {
				const uint64_t o = rec[i] >> sh, len = (rec[i + 1] >> sh) - o;
				const unsigned k = (rec[i] >> 2) & 3u, mode = rec[i] & 3u;
				uint64_t ext = 0;
				ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
				const ibp_status_t st = k < 2 ? ibpi_decode_row_ext(c, g + o, len, (uint8_t)mode, k,
										   want + i * R, &ext)
							      : IBP_ERR_CORRUPT;
				take[i] = st == IBP_OK && (exact ? ext == len : ext <= len) && size - o >= 18 &&
					  (mode == IBP_ROW_CLEAN || (mode == IBP_ROW_BITMAP && !c->cl[k].has_x));
			}
			for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
				if (ibp_codec_set_impl(c, impls[ii]) != IBP_OK)
					continue;
				cr_assert_not_null(c->k->decode_tiny_run);
				for (uint64_t s = 0; s < N; s += 1 + tu_below(&r, s + 7 < N ? 7 : 1)) {
					uint64_t first = s;
					while (first < N && take[first])
						first++;
					/* records from the first row's offset (a group's base): near
					 * the end, fewer than 18 bytes lie past the base */
					uint32_t rb[49];
					const uint32_t o0 = rec[s] >> sh << sh;
					for (uint64_t i = s; i <= N; i++)
						rb[i - s] = rec[i] - o0;
					const ibp_tiny_run_t run = { .base = g + (o0 >> sh), .rec = rb, .end = g + size,
								     .sh = sh, .cmask = 3, .exact = exact };
					uint8_t out[48 * 16 + 16];
					memset(out, 0xA5, sizeof(out));
					const uint64_t got = c->k->decode_tiny_run(c, &run, N - s, out);
					CHECK(got == first - s, "C=%u R=%llu xv=%d exact=%d impl %d from row %llu: took %llu rows, want %llu",
					      C, (unsigned long long)R, xv, exact, impls[ii], (unsigned long long)s,
					      (unsigned long long)got, (unsigned long long)(first - s));
					CHECK(memcmp(out, want + s * R, got * R) == 0, "C=%u R=%llu impl %d: rows differ from the checked path",
					      C, (unsigned long long)R, impls[ii]);
					CHECK(out[got * R] == 0xA5, "C=%u R=%llu impl %d: wrote past the rows taken", C,
					      (unsigned long long)R, impls[ii]);
					taken += got;
					tested++;
				}
			}
		}
		ibp_codec_set_impl(c, IBP_IMPL_AUTO);
		tu_guarded_free(g, size);
		free(pay);
		ibp_codec_free(c);
	}
	cr_assert_gt(modes[IBP_ROW_CLEAN], 200);
	cr_assert_gt(modes[IBP_ROW_BITMAP], 200);
	if (tested) /* none under IBP_FORCE_PORTABLE */
		cr_assert_gt(taken, tested, "runs taken: %llu rows in %llu calls", (unsigned long long)taken,
			     (unsigned long long)tested);
}

/* BITMAP rows of clusters with Xvals, C = 1, 2, 4 (the AVX-512 run walk,
 * ibp_avx512_xruns; the scalar walks elsewhere): chunks static, hits (the
 * Xval), misses and disabled chunks (x = b) in every mix, from all hits
 * (runs past 64, across bitmap words) to all misses; rows of up to 1,100
 * exceptions (batches of 256) and of more than 32 words of few exceptions
 * each; whole and partial last chunks. Every row round trips; its
 * truncations, trailing bytes and changed bytes give every
 * implementation the portable one's status, and its bytes when it
 * decodes. */
Test(codec, xval_runs)
{
	tu_rng_t r;
	tu_rng_seed(&r, 1536);
	static const ibp_impl_t impls[] = { IBP_IMPL_BMI2, IBP_IMPL_AVX2, IBP_IMPL_AVX512 };
	static const unsigned Cs[3] = { 1, 2, 4 };
	uint64_t bitmap_rows = 0, long_runs = 0;
	for (int ci = 0; ci < 3; ci++)
		for (int shape = 0; shape < 4; shape++) {
			const unsigned C = Cs[ci];
			/* D: 200 (a few words), 1,100 (batches), 2,600 (many words), 64 */
			const uint64_t D = shape == 0 ? 200 : shape == 1 ? 1100 : shape == 2 ? 2600 : 64;
			const uint64_t R = D * C - (C > 1 && shape % 2 ? 1 : 0);
			uint8_t *m = tu_xcalloc(D * C), *b = tu_xcalloc(D * C), *x = tu_xcalloc(D * C);
			const uint64_t dis_pct = shape == 3 ? 50 : tu_below(&r, 3) * 5; /* disabled chunks: 0-10%, 50% */
			for (uint64_t j = 0; j < D; j++) {
				const uint64_t full = C == 8 ? ~0ull : (1ull << (8 * C)) - 1;
				uint64_t mj = tu_next(&r) & full & (tu_below(&r, 2) ? 0x00FF00FF00FF00FFull : ~0ull);
				if (!mj)
					mj = 1;
				if (j == D - 1 && R < D * C) /* padding bits: invariant zeros */
					mj |= full & ~((1ull << (8 * (R - (D - 1) * C))) - 1);
				const uint64_t bj = tu_next(&r) & mj & (j == D - 1 ? ((1ull << (8 * (R - (D - 1) * C))) - 1) : full);
				uint64_t xj = bj;
				if (tu_below(&r, 100) >= dis_pct)
					xj = (tu_next(&r) & mj & (j == D - 1 ? ((1ull << (8 * (R - (D - 1) * C))) - 1) : full)) ^ 0;
				tu_set_word(m, C, j, mj);
				tu_set_word(b, C, j, bj);
				tu_set_word(x, C, j, xj);
			}
			ibp_codec_t *c;
			cr_assert_eq(ibp_codec_create_ex(R, C, 1, m, b, x, &c), IBP_OK, "%s", ibp_last_error());
			const uint64_t cap = ibp_row_bound(c);
			uint8_t *row = tu_xcalloc(D * C), *enc = tu_xcalloc(cap + 8), *ref = tu_xcalloc(R), *back = tu_xcalloc(R);
			for (int t = 0; t < 12; t++) {
				/* exceptions: 30-100% of the chunks (shape 2: 6-12%); hits among them 0-100% */
				const uint64_t exc_pct = shape == 2 ? 6 + tu_below(&r, 7) : 30 + tu_below(&r, 71);
				const uint64_t hit_pct = t % 4 == 0 ? 100 : t % 4 == 1 ? 0 : 50 + tu_below(&r, 50);
				tu_fill_random(&r, row, D * C);
				for (uint64_t j = 0; j < D; j++) {
					const uint64_t mj = tu_word(m, C, j), bj = tu_word(b, C, j), xj = tu_word(x, C, j);
					uint64_t vj = (tu_word(row, C, j) & ~mj) | bj;
					if (tu_below(&r, 100) < exc_pct) {
						if (xj != bj && tu_below(&r, 100) < hit_pct)
							vj = (vj & ~mj) | xj;
						else
							vj ^= mj & (tu_next(&r) | 1);
					}
					tu_set_word(row, C, j, vj);
				}
				memset(row + R, 0, D * C - R);
				uint64_t len = 0;
				uint8_t fl = 0;
				ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
				cr_assert_eq(ibp_encode_row(c, row, 0, enc, cap, &len, &fl), IBP_OK);
				bitmap_rows += fl == IBP_ROW_BITMAP;
				long_runs += fl == IBP_ROW_BITMAP && hit_pct == 100 && exc_pct > 64;
				/* the row, some truncations, a trailing byte, changed bytes */
				for (int k = 0; k < 40; k++) {
					uint64_t l = len;
					uint8_t *in = tu_xcalloc(len + 1);
					memcpy(in, enc, len);
					if (k >= 1 && k < 12)
						l = k < 6 ? len - 1 - tu_below(&r, len < 8 ? len : 8) : tu_below(&r, len + 1);
					else if (k == 12)
						in[l++] = (uint8_t)tu_next(&r);
					else if (k > 12 && len)
						in[tu_below(&r, len)] ^= (uint8_t)(1u << tu_below(&r, 8));
					if (l > len + 1)
						l = 0;
					uint8_t *cut = tu_guarded_copy(in, l);
					char what[64];
					snprintf(what, sizeof(what), "C=%u D=%llu row %d case %d", C, (unsigned long long)D, t, k);
					const ibp_status_t s0 = impls_agree(c, cut, l, fl, R, impls, sizeof(impls) / sizeof(impls[0]),
									    ref, back, what);
					if (k == 0) {
						cr_assert_eq(s0, IBP_OK);
						cr_assert(!memcmp(ref, row, R), "C=%u D=%llu row %d: not the row", C,
							  (unsigned long long)D, t);
					}
					tu_guarded_free(cut, l);
					free(in);
				}
			}
			free(m), free(b), free(x), free(row), free(enc), free(ref), free(back);
			ibp_codec_free(c);
		}
	cr_assert_gt(bitmap_rows, 60, "only %llu BITMAP rows", (unsigned long long)bitmap_rows);
	cr_assert_gt(long_runs, 4, "only %llu rows of hits alone", (unsigned long long)long_runs);
}
