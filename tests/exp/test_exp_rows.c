/* test_exp_rows.c - the exponent codec's row form (src/exp/exp_rows.h):
 * round trips byte for byte on every decoder the CPU has (random bits,
 * Gaussian rows, special values, odd lengths, rows of escapes only), a
 * known vector, the table choice, and damaged rows refused by every
 * decoder without reading past the row. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "exp/exp_rows.h"
#include "fp8/fp8_impl.h"
#include "util/cpu.h"
#include "testutil.h"

static const ibp_dtype_t DTS[3] = { IBP_DTYPE_F32, IBP_DTYPE_F16, IBP_DTYPE_BF16 };

static uint32_t esz(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 4 : 2;
}

static void put(uint8_t *p, ibp_dtype_t dt, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32) {
		memcpy(p + 4 * i, &f, 4);
	} else {
		uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
		memcpy(p + 2 * i, &h, 2);
	}
}

/* The decoder builds this CPU runs. */
static int isas(int out[3])
{
	int n = 0;
	out[n++] = 0;
	if (ibpi_cpu()->avx2)
		out[n++] = 1;
	if (ibpi_cpu()->avx512vbmi && ibpi_cpu()->avx512vbmi2)
		out[n++] = 2;
	return n;
}

/* Encodes nrows rows and checks every decoder gives them back exactly;
 * each encoded row sits at the end of its own exact-size heap block so
 * that ASan catches a read past it. Returns the total encoded bytes. */
static uint64_t round_trip(ibp_dtype_t dt, const uint8_t *data, uint64_t nrows, uint64_t d)
{
	const uint64_t R = d * esz(dt);
	uint8_t table[7];
	ibpi_exprows_pick_table(data, dt, nrows * d, 1, table);
	ibpi_exprows_t x;
	cr_assert_eq(ibpi_exprows_init(&x, dt, R, table, 0), IBP_OK, "%s", ibp_last_error());
	uint8_t *enc = malloc(x.fixed + d), *dec = malloc(R);
	int is[3], ni = isas(is);
	uint64_t total = 0;
	for (uint64_t r = 0; r < nrows; r++) {
		const uint64_t len = ibpi_exprows_encode(&x, data + r * R, enc);
		cr_assert(len >= x.fixed && len <= x.fixed + d);
		total += len;
		uint8_t *exact = malloc(len ? len : 1);
		memcpy(exact, enc, len);
		for (int k = 0; k < ni; k++) {
			memset(dec, 0xa5, R);
			ibp_status_t st = ibpi_exprows_decode(&x, is[k], exact, len, dec);
			cr_assert_eq(st, IBP_OK, "isa %d: %s", is[k], ibp_last_error());
			cr_assert(memcmp(dec, data + r * R, R) == 0, "%s d %llu row %llu isa %d differs",
				  ibp_dtype_name(dt), (unsigned long long)d, (unsigned long long)r, is[k]);
		}
		free(exact);
		/* the slot form with K = 8: a row with more escapes takes them
		 * from the overflow area (exact-size blocks again) */
		ibpi_exprows_t xs = x;
		cr_assert_eq(ibpi_exprows_set_slot(&xs, 8, 0), IBP_OK);
		const uint64_t ne = len - x.fixed;
		uint8_t *slot = malloc(xs.slot), *tmp = malloc(x.fixed + d), *ovf = malloc(ne + 3);
		memset(ovf, 0xee, ne + 3);
		cr_assert_eq(ibpi_exprows_encode_slot(&xs, data + r * R, slot, tmp, ovf, 3), ne);
		uint8_t *ov = ne > 8 ? ovf : NULL; /* no overflow area for rows that fit */
		const uint64_t ovl = ov ? ne + 3 : 0;
		if (ne > 8) {
			uint64_t o;
			memcpy(&o, slot + x.fixed, 8);
			cr_assert_eq(o, 3);
			cr_assert(memcmp(ovf + 3, enc + x.fixed, ne) == 0);
		} else {
			cr_assert(memcmp(slot, enc, len) == 0);
			for (uint64_t b = 0; b < ne + 3; b++)
				cr_assert(ovf[b] == 0xee); /* untouched */
		}
		for (uint64_t b = x.fixed + (ne > 8 ? 8 : ne); b < xs.slot; b++)
			cr_assert_eq(slot[b], 0, "padding byte %llu", (unsigned long long)b);
		for (int k = 0; k < ni; k++) {
			memset(dec, 0xa5, R);
			cr_assert_eq(ibpi_exprows_decode_slot(&xs, is[k], slot, ov, ovl, dec), IBP_OK, "%s",
				     ibp_last_error());
			cr_assert(memcmp(dec, data + r * R, R) == 0, "slot: %s d %llu row %llu isa %d differs",
				  ibp_dtype_name(dt), (unsigned long long)d, (unsigned long long)r, is[k]);
			/* the overflow area one byte short of the row's escapes */
			if (ne > 8)
				cr_assert_eq(ibpi_exprows_decode_slot(&xs, is[k], slot, ov, ovl - 1, dec),
					     IBP_ERR_CORRUPT);
		}
		free(slot);
		free(tmp);
		free(ovf);
	}
	free(enc);
	free(dec);
	return total;
}

Test(exp_rows, random_bits_every_length)
{
	tu_rng_t r;
	tu_rng_seed(&r, 11);
	const uint64_t ds[] = { 1, 7, 8, 9, 63, 64, 65, 128, 192, 200, 256 };
	for (int t = 0; t < 3; t++)
		for (size_t k = 0; k < sizeof(ds) / sizeof(ds[0]); k++) {
			const uint64_t d = ds[k], n = 20, R = d * esz(DTS[t]);
			uint8_t *a = malloc(n * R);
			tu_fill_random(&r, a, n * R);
			round_trip(DTS[t], a, n, d);
			free(a);
		}
}

Test(exp_rows, gaussian_rows_compress)
{
	tu_rng_t r;
	tu_rng_seed(&r, 12);
	for (int t = 0; t < 3; t++) {
		const uint64_t d = 64, n = 512, R = d * esz(DTS[t]);
		uint8_t *a = malloc(n * R);
		for (uint64_t i = 0; i < n * d; i++)
			put(a, DTS[t], i, (float)(0.05 * tu_gauss(&r)));
		const uint64_t total = round_trip(DTS[t], a, n, d);
		/* float32 216 + escapes of 256, float16 112 + of 128, bfloat16 88 + of 128 */
		const double limit = DTS[t] == IBP_DTYPE_F32 ? 0.87 : DTS[t] == IBP_DTYPE_F16 ? 0.91 : 0.72;
		cr_assert(total < (uint64_t)(limit * (double)(n * R)), "%s: %llu of %llu bytes", ibp_dtype_name(DTS[t]),
			  (unsigned long long)total, (unsigned long long)(n * R));
		free(a);
	}
}

Test(exp_rows, special_values)
{
	const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, -1e-45f, 3.4e38f, 65504.0f,
			     6e-8f, 1.0f, -2.0f, 0.5f };
	for (int t = 0; t < 3; t++) {
		const uint64_t d = 128, R = d * esz(DTS[t]);
		uint8_t *a = malloc(4 * R);
		for (uint64_t i = 0; i < 4 * d; i++)
			put(a, DTS[t], i, sp[i % (sizeof(sp) / sizeof(sp[0]))]);
		round_trip(DTS[t], a, 4, d);
		free(a);
	}
}

/* A table that matches nothing: every element escapes. */
Test(exp_rows, all_escapes)
{
	tu_rng_t r;
	tu_rng_seed(&r, 13);
	for (int t = 0; t < 3; t++) {
		const uint64_t d = 128, R = d * esz(DTS[t]);
		uint8_t *a = malloc(R), enc[1024], dec[512];
		for (uint64_t i = 0; i < d; i++)
			put(a, DTS[t], i, (float)(1 + i)); /* exponent fields 127.. (f32) */
		const uint8_t table[7] = { 1, 2, 3, 4, 5, 6, 7 };
		ibpi_exprows_t x;
		cr_assert_eq(ibpi_exprows_init(&x, DTS[t], R, table, 0), IBP_OK);
		const uint64_t len = ibpi_exprows_encode(&x, a, enc);
		cr_assert_eq(len, x.fixed + d);
		int is[3], ni = isas(is);
		for (int k = 0; k < ni; k++) {
			cr_assert_eq(ibpi_exprows_decode(&x, is[k], enc, len, dec), IBP_OK);
			cr_assert(memcmp(dec, a, R) == 0);
		}
		free(a);
		(void)r;
	}
}

/* Four float32 values, worked by hand from exp_rows.h's layout. */
Test(exp_rows, known_vector_f32)
{
	const float v[4] = { 1.0f, -1.5f, 0.25f, 3.0f }; /* fields 127, 127, 125, 128 */
	const uint8_t table[7] = { 120, 125, 126, 127, 130, 131, 132 };
	ibpi_exprows_t x;
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_F32, 16, table, 0), IBP_OK);
	cr_assert_eq(x.fixed, 3 + 8 + 4);
	uint8_t enc[32];
	const uint64_t len = ibpi_exprows_encode(&x, v, enc);
	/* codes 3, 3, 1, 7: plane0 = 1011b, plane1 = 1011b... by element:
	 * e0 3 (011), e1 3 (011), e2 1 (001), e3 7 (111) */
	const uint8_t want[] = {
		0x0f,			/* plane 0: bits of 3,3,1,7 -> 1,1,1,1 */
		0x0b,			/* plane 1: 1,1,0,1 */
		0x08,			/* plane 2: 0,0,0,1 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* lo 16 bits: all zero */
		0x00, 0xc0, 0x00, 0x40, /* hi: sign<<7 | mantissa 16-22: 1.5 = 0x3fc00000 -> 0x40 | sign */
		128,			/* the escape: 3.0f's field */
	};
	cr_assert_eq(len, sizeof(want));
	cr_assert(memcmp(enc, want, sizeof(want)) == 0);
}

Test(exp_rows, table_most_common_sorted)
{
	float v[100];
	for (int i = 0; i < 100; i++)
		v[i] = (float)ldexp(1.0, i < 50 ? 0 : i < 70 ? 3 : i < 80 ? -2 : i < 85 ? 5 : i < 89 ? 7 : i < 92 ? 9 :
					  i < 94 ? 11 : i < 95 ? 13 : 15);
	uint8_t t[7];
	ibpi_exprows_pick_table(v, IBP_DTYPE_F32, 100, 1, t);
	const uint8_t want[7] = { 125, 127, 130, 132, 134, 136, 142 };
	cr_assert(memcmp(t, want, 7) == 0, "%u %u %u %u %u %u %u", t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
	/* fewer than seven fields: the rest are the smallest unused */
	ibpi_exprows_pick_table(v, IBP_DTYPE_F32, 50, 1, t);
	const uint8_t want2[7] = { 0, 1, 2, 3, 4, 5, 127 };
	cr_assert(memcmp(t, want2, 7) == 0);
}

/* K: the smallest slots plus overflow, ties to the smaller K, 8 at least */
Test(exp_rows, slot_choice)
{
	ibpi_exprows_t x;
	const uint8_t tab[7] = { 120, 121, 122, 123, 124, 125, 126 };
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_F32, 64 * 4, tab, 0), IBP_OK);
	uint64_t h[65] = { 0 };
	h[0] = 100, h[64] = 1; /* 101 * 8 + 64 against 101 * 64 */
	cr_assert_eq(ibpi_exprows_pick_slot(&x, h), 8);
	memset(h, 0, sizeof(h));
	h[20] = 10; /* 10 * 20 against 10 * 8 + 200 */
	cr_assert_eq(ibpi_exprows_pick_slot(&x, h), 20);
	memset(h, 0, sizeof(h));
	h[0] = 1, h[9] = 1; /* K = 8: 16 + 9; K = 9: 18 */
	cr_assert_eq(ibpi_exprows_pick_slot(&x, h), 9);
	memset(h, 0, sizeof(h));
	h[10] = 1, h[0] = 2; /* K = 8: 24 + 10 = 34; K = 10: 30; K = 9: 27 + 10 */
	cr_assert_eq(ibpi_exprows_pick_slot(&x, h), 10);
	memset(h, 0, sizeof(h));
	h[12] = 1, h[0] = 2; /* K = 8: 24 + 12 = 36; K = 12: 36 (a tie: the smaller); K = 9 .. 11 more */
	cr_assert_eq(ibpi_exprows_pick_slot(&x, h), 8);
	/* K out of [8, max(d, 8)] */
	cr_assert_eq(ibpi_exprows_set_slot(&x, 7, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibpi_exprows_set_slot(&x, 65, 1), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_exprows_set_slot(&x, 64, 1), IBP_OK);
	cr_assert_eq(x.slot, x.fixed + 64);
	ibpi_exprows_t y;
	cr_assert_eq(ibpi_exprows_init(&y, IBP_DTYPE_BF16, 2 * 3, tab, 0), IBP_OK);
	cr_assert_eq(ibpi_exprows_set_slot(&y, 8, 1), IBP_OK); /* d = 3 < 8: 8 still */
	uint64_t h3[4] = { 5, 0, 0, 1 };
	cr_assert_eq(ibpi_exprows_pick_slot(&y, h3), 8);
}

Test(exp_rows, init_refuses)
{
	ibpi_exprows_t x;
	const uint8_t ok[7] = { 1, 2, 3, 4, 5, 6, 7 }, big[7] = { 1, 2, 3, 4, 5, 6, 40 };
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_U8, 64, ok, 0), IBP_ERR_UNSUPPORTED);
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_F32, 6, ok, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_F32, 0, ok, 1), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_F16, 64, big, 1), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_exprows_init(&x, IBP_DTYPE_BF16, 64, big, 1), IBP_OK);
}

/* Every damaged form of a row is refused by every decoder, reading only
 * the row's bytes (each copy is an exact-size heap block). */
Test(exp_rows, damaged_rows_refused)
{
	tu_rng_t r;
	tu_rng_seed(&r, 14);
	for (int t = 0; t < 3; t++) {
		for (uint64_t d = 60; d <= 64; d += 4) {
			const uint64_t R = d * esz(DTS[t]);
			uint8_t a[256], enc[512], dec[256];
			for (uint64_t i = 0; i < d; i++)
				put(a, DTS[t], i, (float)(0.05 * tu_gauss(&r)));
			put(a, DTS[t], 3, 1e4f); /* at least one escape */
			uint8_t table[7];
			ibpi_exprows_pick_table(a, DTS[t], d, 1, table);
			ibpi_exprows_t x;
			cr_assert_eq(ibpi_exprows_init(&x, DTS[t], R, table, 0), IBP_OK);
			const uint64_t len = ibpi_exprows_encode(&x, a, enc);
			cr_assert_gt(len, x.fixed);
			int is[3], ni = isas(is);
			for (int k = 0; k < ni; k++) {
				/* one byte short, one byte long, empty */
				for (int dl = -1; dl <= 1; dl += 2) {
					uint8_t *c = malloc(len + 1);
					memcpy(c, enc, len + 1);
					cr_assert_eq(ibpi_exprows_decode(&x, is[k], c, len + (uint64_t)(int64_t)dl, dec),
						     IBP_ERR_CORRUPT, "%s isa %d dl %d", ibp_dtype_name(DTS[t]), is[k], dl);
					free(c);
				}
				cr_assert_eq(ibpi_exprows_decode(&x, is[k], enc, 0, dec), IBP_ERR_CORRUPT);
				/* a code bit turned into an escape (or back): the length no longer fits */
				uint8_t *c = malloc(len);
				memcpy(c, enc, len);
				c[0] ^= 1;
				c[x.P] |= 1;
				c[2 * x.P] |= 1;
				ibp_status_t st = ibpi_exprows_decode(&x, is[k], c, len, dec);
				const int c0 = (enc[0] & 1) | (enc[x.P] & 1) << 1 | (enc[2 * x.P] & 1) << 2;
				const int c1 = ((c0 & 1) ^ 1) | 6;
				if ((c0 == 7) != (c1 == 7))
					cr_assert_eq(st, IBP_ERR_CORRUPT, "isa %d", is[k]);
				free(c);
				/* padding bits of a plane */
				if (d % 8) {
					c = malloc(len);
					memcpy(c, enc, len);
					c[x.P - 1] |= 0x80;
					cr_assert_eq(ibpi_exprows_decode(&x, is[k], c, len, dec), IBP_ERR_CORRUPT);
					free(c);
				}
				/* a float16 escape that is no field */
				if (DTS[t] == IBP_DTYPE_F16) {
					c = malloc(len);
					memcpy(c, enc, len);
					c[x.fixed] = 32;
					cr_assert_eq(ibpi_exprows_decode(&x, is[k], c, len, dec), IBP_ERR_CORRUPT);
					cr_assert(strstr(ibp_last_error(), "escape") != NULL, "%s", ibp_last_error());
					free(c);
				}
			}
		}
	}
}
