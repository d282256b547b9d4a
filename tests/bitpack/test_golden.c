/* test_golden.c - golden row vectors, derived by hand from docs/FORMAT.md §1
 * (see tests/golden/README.md and FORMAT.md §1.4 for the derivations).
 * The same vectors are in tests/golden/rows.txt for other decoders; this
 * suite checks the file against the arrays below, then checks both CPU
 * implementations encode each row to exactly these bytes and decode them
 * back. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "ibp/unstable.h"
#include "util/cpu.h"

typedef struct golden {
	const char *name;
	uint64_t R;
	unsigned C;
	const uint8_t *mask, *bitval; /* D*C bytes each */
	const uint8_t *xval;          /* D*C bytes, or NULL: no Xvals */
	const uint8_t *row;           /* R bytes */
	uint8_t flags;
	const uint8_t *enc;
	uint64_t enc_len;
} golden_t;

/* Codec A: R = 5, C = 2, D = 3, W = 16.
 *   m0 = 0xFFFF b0 = 0x3C12   s0 = 0   e0 = 16
 *   m1 = 0xF000 b1 = 0x5000   s1 = 12  e1 = 4
 *   m2 = 0xFF0F b2 = 0x0005   s2 = 4   e2 = 12 (bits 8..15: padding)
 * S = 16, L = max(1, bitlen(2)) = 2. */
static const uint8_t a_mask[] = { 0xff, 0xff, 0x00, 0xf0, 0x0f, 0xff };
static const uint8_t a_bitval[] = { 0x12, 0x3c, 0x00, 0x50, 0x05, 0x00 };
/* every chunk matches: CLEAN, static 0xA3B (chunk 1) and 0x9 (chunk 2) */
static const uint8_t a_clean_row[] = { 0x12, 0x3c, 0x3b, 0x5a, 0x95 };
static const uint8_t a_clean_enc[] = { 0x3b, 0x9a };
/* chunk 1 = 0x6A3B is an exception: bitmap 0x02, static 0x9A3B, exception 0x6 */
static const uint8_t a_bitmap_row[] = { 0x12, 0x3c, 0x3b, 0x6a, 0x95 };
static const uint8_t a_bitmap_enc[] = { 0x02, 0x3b, 0x9a, 0x06 };
/* chunk 0 is an exception: 1 + ceil((16 + 16) / 8) = 5, not < R: RAW */
static const uint8_t a_raw_row[] = { 0x13, 0x3c, 0x3b, 0x5a, 0x95 };
static const uint8_t a_raw_enc[] = { 0x13, 0x3c, 0x3b, 0x5a, 0x95 };

/* Codec B: R = 20, C = 1, D = 20, every Mask 0xF0, every Bitval 0x00;
 * s = e = 4, S = 80, L = bitlen(19) = 5. */
static const uint8_t b_mask[20] = { 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0,
				    0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0 };
static const uint8_t b_bitval[20] = { 0 };
/* one exception (chunk 17 = 0xC1): LIST 2 + 11 = 13 bytes < BITMAP 3 + 11 */
static const uint8_t b_list_row[] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
				      0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00, 0xc1, 0x02, 0x03 };
static const uint8_t b_list_enc[] = { 0x20, 0x02, 0x10, 0x32, 0x54, 0x76, 0x98,
				      0xba, 0xdc, 0xfe, 0x10, 0x32, 0x0c };
/* three exceptions (chunks 1, 8, 19): LIST ceil(20/8) = 3 ties BITMAP 3: BITMAP */
static const uint8_t b_bitmap_row[] = { 0x00, 0x21, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x58, 0x09,
					0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00, 0x01, 0x02, 0xf3 };
static const uint8_t b_bitmap_enc[] = { 0x02, 0x01, 0x08, 0x10, 0x32, 0x54, 0x76, 0x98,
					0xba, 0xdc, 0xfe, 0x10, 0x32, 0x52, 0x0f };

/* Codec C: R = 16, C = 8, D = 2: m0 = 0xFFF0000000000000 (sign and exponent
 * of a double) b0 = 0x3FF0000000000000 (s0 = 52), m1 = 0 (s1 = 64: a full
 * 64-bit static field). S = 116. Row: 1.5, 0x0123456789ABCDEF. */
static const uint8_t c_mask[] = { 0, 0, 0, 0, 0, 0, 0xf0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0 };
static const uint8_t c_bitval[] = { 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0 };
static const uint8_t c_row[] = { 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,
				 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01 };
static const uint8_t c_enc[] = { 0, 0, 0, 0, 0, 0, 0xf8, 0xde, 0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12, 0x00 };

/* Codec X: R = 24 (six float32), C = 2, D = 12: every m_j = 0xFFFF, b_j = 0
 * (s_j = 0, e_j = 16, S = 0); x̂_j = 0x3F80 (upper half of 1.0f) for odd j,
 * 0 (disabled) for even j. L = bitlen(11) = 4. */
static const uint8_t x_mask[24] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
static const uint8_t x_bitval[24] = { 0 };
static const uint8_t x_xval[24] = { 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f,
				    0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f };
/* 0, 1.0f, 0 ...: chunk 3 = 0x3F80 is a hit (1 bit). LIST 1 + 1 < BITMAP 2 + 1:
 * header n-1 = 0, index 3 (4 bits each) = 0x30; body: the hit bit. */
static const uint8_t x_list_row[24] = { 0, 0, 0, 0, 0, 0, 0x80, 0x3f };
static const uint8_t x_list_enc[] = { 0x30, 0x01 };
/* 1.0f, 2.0f, 0, 0x00000001, 0, 0: chunk 1 hit (1 bit), chunk 3 = 0x4000 miss
 * (0 then 16 bits), chunk 6 = 0x0001 not enabled (16 bits): E = 34, body 5
 * bytes; BITMAP 2 + 5 ties LIST 2 + 5: BITMAP, bits 1, 3, 6 = 0x4A. */
static const uint8_t x_mix_row[24] = { 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0, 0, 0x01 };
static const uint8_t x_mix_enc[] = { 0x4a, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00 };

#define G(name, R, C, m, b, row, fl, enc) { name, R, C, m, b, NULL, row, fl, enc, sizeof(enc) }
#define GX(name, R, C, m, b, x, row, fl, enc) { name, R, C, m, b, x, row, fl, enc, sizeof(enc) }
static const golden_t goldens[] = {
	G("a-clean", 5, 2, a_mask, a_bitval, a_clean_row, IBP_ROW_CLEAN, a_clean_enc),
	G("a-bitmap", 5, 2, a_mask, a_bitval, a_bitmap_row, IBP_ROW_BITMAP, a_bitmap_enc),
	G("a-raw", 5, 2, a_mask, a_bitval, a_raw_row, IBP_ROW_RAW, a_raw_enc),
	G("b-list", 20, 1, b_mask, b_bitval, b_list_row, IBP_ROW_LIST, b_list_enc),
	G("b-bitmap", 20, 1, b_mask, b_bitval, b_bitmap_row, IBP_ROW_BITMAP, b_bitmap_enc),
	G("c-clean64", 16, 8, c_mask, c_bitval, c_row, IBP_ROW_CLEAN, c_enc),
	GX("x-list-hit", 24, 2, x_mask, x_bitval, x_xval, x_list_row, IBP_ROW_LIST, x_list_enc),
	GX("x-bitmap-mix", 24, 2, x_mask, x_bitval, x_xval, x_mix_row, IBP_ROW_BITMAP, x_mix_enc),
};
#define NGOLDEN (sizeof(goldens) / sizeof(goldens[0]))

static void check_golden(const golden_t *g, ibp_impl_t impl)
{
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create_ex(g->R, g->C, 1, g->mask, g->bitval, g->xval, &c), IBP_OK,
		     "%s: %s", g->name, ibp_last_error());
	cr_assert_eq(ibp_codec_has_xval(c), g->xval != NULL, "%s", g->name);
	cr_assert_eq(ibp_codec_set_impl(c, impl), IBP_OK);
	uint8_t dst[64], back[64];
	uint64_t len, slen;
	uint8_t fl, smode;
	cr_assert_eq(ibp_row_size(c, g->row, 0, &slen, &smode), IBP_OK);
	cr_assert_eq(slen, g->enc_len, "%s: row_size %llu", g->name, (unsigned long long)slen);
	cr_assert_eq(smode, g->flags, "%s", g->name);
	cr_assert_eq(ibp_encode_row(c, g->row, 0, dst, sizeof(dst), &len, &fl), IBP_OK);
	cr_assert_eq(fl, g->flags, "%s: mode %u, expected %u", g->name, fl, g->flags);
	cr_assert_eq(len, g->enc_len, "%s: %llu bytes, expected %llu", g->name, (unsigned long long)len,
		     (unsigned long long)g->enc_len);
	cr_assert_arr_eq(dst, g->enc, len, "%s: encoded bytes differ", g->name);
	memset(back, 0, sizeof(back));
	cr_assert_eq(ibp_decode_row(c, g->enc, g->enc_len, g->flags, 0, back), IBP_OK, "%s: %s",
		     g->name, ibp_last_error());
	cr_assert_arr_eq(back, g->row, g->R, "%s: decoded row differs", g->name);
	ibp_codec_free(c);
}

Test(golden, portable)
{
	for (size_t i = 0; i < NGOLDEN; i++)
		check_golden(&goldens[i], IBP_IMPL_PORTABLE);
}

Test(golden, bmi2)
{
#if defined(__x86_64__)
	if (!ibpi_cpu()->bmi2)
		cr_skip_test("this CPU has no BMI2");
	for (size_t i = 0; i < NGOLDEN; i++)
		check_golden(&goldens[i], IBP_IMPL_BMI2);
#else
	cr_skip_test("BMI2 kernels exist on x86-64 only");
#endif
}

Test(golden, static_bits)
{
	const golden_t *ga = &goldens[0], *gb = &goldens[3], *gc = &goldens[5];
	ibp_codec_t *c;
	cr_assert_eq(ibp_codec_create(ga->R, ga->C, 1, ga->mask, ga->bitval, &c), IBP_OK);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 16);
	cr_assert_eq(ibp_codec_nchunks(c), 3);
	ibp_codec_free(c);
	cr_assert_eq(ibp_codec_create(gb->R, gb->C, 1, gb->mask, gb->bitval, &c), IBP_OK);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 80);
	ibp_codec_free(c);
	cr_assert_eq(ibp_codec_create(gc->R, gc->C, 1, gc->mask, gc->bitval, &c), IBP_OK);
	cr_assert_eq(ibp_codec_static_bits(c, 0), 116);
	ibp_codec_free(c);
}

/* ---- tests/golden/rows.txt holds the same vectors ---- */

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
	if (strcmp(s, "-") == 0)
		return 0;
	size_t n = strlen(s);
	cr_assert_eq(n % 2, 0, "odd hex string %s", s);
	cr_assert_leq(n / 2, cap);
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		cr_assert_eq(sscanf(s + 2 * i, "%2x", &v), 1, "bad hex %s", s);
		out[i] = (uint8_t)v;
	}
	return n / 2;
}

Test(golden, file_matches)
{
	const char *dir = getenv("IBP_SOURCE_DIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/tests/golden/rows.txt", dir ? dir : IBP_SOURCE_DIR);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "cannot open %s", path);
	char line[4096];
	size_t seen = 0;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		char name[64], m[512], b[512], row[512], fl[8], enc[512], x[512];
		unsigned long long R;
		unsigned C;
		/* the 9th field (xval) is optional: absent = no Xvals */
		int nf = sscanf(line, "%63s %llu %u %511s %511s %511s %7s %511s %511s", name, &R, &C, m,
				b, row, fl, enc, x);
		cr_assert(nf == 8 || nf == 9, "bad line: %s", line);
		const golden_t *g = NULL;
		for (size_t i = 0; i < NGOLDEN; i++)
			if (strcmp(goldens[i].name, name) == 0)
				g = &goldens[i];
		cr_assert_not_null(g, "vector %s is not in test_golden.c", name);
		cr_assert_eq(R, g->R, "%s", name);
		cr_assert_eq(C, g->C, "%s", name);
		uint8_t buf[256];
		uint64_t D = (R + C - 1) / C;
		cr_assert_eq(unhex(m, buf, sizeof(buf)), D * C, "%s mask", name);
		cr_assert_arr_eq(buf, g->mask, D * C, "%s mask", name);
		cr_assert_eq(unhex(b, buf, sizeof(buf)), D * C, "%s bitval", name);
		cr_assert_arr_eq(buf, g->bitval, D * C, "%s bitval", name);
		cr_assert_eq(unhex(row, buf, sizeof(buf)), R, "%s row", name);
		cr_assert_arr_eq(buf, g->row, R, "%s row", name);
		cr_assert_eq(unhex(fl, buf, sizeof(buf)), 1, "%s flags", name);
		cr_assert_eq(buf[0], g->flags, "%s flags", name);
		cr_assert_eq(unhex(enc, buf, sizeof(buf)), g->enc_len, "%s encoded", name);
		cr_assert_arr_eq(buf, g->enc, g->enc_len, "%s encoded", name);
		cr_assert_eq(nf == 9, g->xval != NULL, "%s: xval field", name);
		if (nf == 9) {
			cr_assert_eq(unhex(x, buf, sizeof(buf)), D * C, "%s xval", name);
			cr_assert_arr_eq(buf, g->xval, D * C, "%s xval", name);
		}
		seen++;
	}
	fclose(f);
	cr_assert_eq(seen, NGOLDEN, "rows.txt has %zu vectors, test_golden.c %zu", seen, NGOLDEN);
}
