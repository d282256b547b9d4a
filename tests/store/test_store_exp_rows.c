/* test_store_exp_rows.c - containers of the exponent codec's row form
 * (codec 4, ibp_pack_exp_rows) through the container and the store: every
 * row back byte for byte by gather, decode_all and decode_row on every
 * decoder build; embedding bags bitwise equal to those of an IBP store of
 * the same table; damaged rows refused at the position that holds them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "exp/exp_rows.h"
#include "fp8/fp8_impl.h"
#include "io/container_format.h"
#include "util/cpu.h"
#include "testutil.h"
#include "fixtures.h"

static uint32_t esz(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 4 : 2;
}

/* Trained-weight-like values (normal * 0.05) with a few specials. */
static uint8_t *table_of(ibp_dtype_t dt, uint64_t n, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *a = tu_xcalloc(n * esz(dt));
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)(0.05 * tu_gauss(&r));
		if (i % 997 == 5)
			f = i % 2 ? -0.0f : 1e30f;
		if (dt == IBP_DTYPE_F32) {
			memcpy(a + 4 * i, &f, 4);
		} else {
			uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
			memcpy(a + 2 * i, &h, 2);
		}
	}
	return a;
}

static const ibp_dtype_t DTS[3] = { IBP_DTYPE_F32, IBP_DTYPE_F16, IBP_DTYPE_BF16 };
static const char *const ISAS[3] = { "portable", "avx2", NULL };

Test(store_exp_rows, gather_decode_all_verify, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t dims[] = { 64, 128, 40 }, n = 700;
	for (int t = 0; t < 3; t++)
		for (int k = 0; k < 3; k++) {
			const uint64_t d = dims[k], R = d * esz(DTS[t]), shape[2] = { n, d };
			uint8_t *a = table_of(DTS[t], n * d, 7 + (uint64_t)k);
			const char *p = tmpdir_path("t.ibp");
			cr_assert_eq(ibp_pack_exp_rows(p, a, DTS[t], 2, shape, 2), IBP_OK, "%s", ibp_last_error());
			for (int isa = 0; isa < 3; isa++) {
				if (ISAS[isa])
					setenv("IBP_EXP_ISA", ISAS[isa], 1);
				else
					unsetenv("IBP_EXP_ISA");
				for (unsigned fl = 0; fl < 2; fl++) {
					ibp_store_t *s = NULL;
					cr_assert_eq(ibp_store_open(p, fl ? IBP_OPEN_MMAP : IBP_OPEN_READ, &s), IBP_OK, "%s",
						     ibp_last_error());
					const ibp_container_t *c = ibp_store_container(s);
					cr_assert_eq(ibp_container_codec_id(c), IBP_CODEC_EXP_ROWS);
					cr_assert_eq(ibp_store_codec(s), NULL);
					if (DTS[t] != IBP_DTYPE_F16 || d >= 64)
						cr_assert_lt(ibp_container_file_bytes(c), n * R, "%s d %llu",
							     ibp_dtype_name(DTS[t]), (unsigned long long)d);
					uint8_t *all = tu_xcalloc(n * R), *g = tu_xcalloc(3000 * R);
					cr_assert_eq(ibp_store_decode_all(s, all, 0), IBP_OK, "%s", ibp_last_error());
					cr_assert(memcmp(all, a, n * R) == 0);
					int64_t ids[3000];
					tu_rng_t r;
					tu_rng_seed(&r, 99);
					for (int i = 0; i < 3000; i++)
						ids[i] = (int64_t)tu_below(&r, n);
					const int threads[] = { 1, 2, 0 };
					for (int th = 0; th < 3; th++) {
						memset(g, 0xa5, 3000 * R);
						cr_assert_eq(ibp_store_gather(s, ids, 3000, g, threads[th]), IBP_OK, "%s",
							     ibp_last_error());
						for (int i = 0; i < 3000; i++)
							cr_assert(memcmp(g + (uint64_t)i * R, a + (uint64_t)ids[i] * R, R) == 0,
								  "%s d %llu position %d", ibp_dtype_name(DTS[t]),
								  (unsigned long long)d, i);
					}
					cr_assert_eq(ibp_container_decode_row(c, 123, g), IBP_OK);
					cr_assert(memcmp(g, a + 123 * R, R) == 0);
					cr_assert_eq(ibp_store_verify(s, 0), IBP_OK, "%s", ibp_last_error());
					/* rows, not blocks */
					cr_assert_eq(ibp_container_decode_block(c, 0, g, 1), IBP_ERR_INVALID_ARG);
					const uint8_t *src;
					uint64_t len;
					cr_assert_eq(ibp_container_row(c, 5, &src, &len), IBP_OK);
					cr_assert_eq(len, ibp_container_offsets(c)[6] - ibp_container_offsets(c)[5]);
					int64_t bad = (int64_t)n;
					cr_assert_eq(ibp_store_gather(s, &bad, 1, g, 1), IBP_ERR_OUT_OF_RANGE);
					free(all);
					free(g);
					ibp_store_close(s);
				}
			}
			unsetenv("IBP_EXP_ISA");
			free(a);
		}
}

/* Bags over exp rows equal, bit for bit, the bags over an IBP store of the
 * same table (whose bags test_bag holds to PyTorch's rules), on every
 * decoder build, one and two threads, int32 and int64 ids. */
Test(store_exp_rows, bags_equal_ibp_store, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 2000, d = 64, nb = 300, per = 20;
	tu_rng_t r;
	tu_rng_seed(&r, 5);
	int64_t *ids = tu_xcalloc(nb * per * 8), *off = tu_xcalloc((nb + 1) * 8);
	int32_t *ids32 = tu_xcalloc(nb * per * 4);
	float *w = tu_xcalloc(nb * per * 4);
	for (uint64_t i = 0; i < nb * per; i++) {
		ids[i] = (int64_t)tu_below(&r, n);
		ids32[i] = (int32_t)ids[i];
		w[i] = (float)tu_uniform(&r);
	}
	for (uint64_t b = 0; b <= nb; b++)
		off[b] = (int64_t)(b * per - (b > 0 && b < nb && b % 7 == 0 ? 3 : 0));
	for (int t = 0; t < 3; t++) {
		const uint64_t R = d * esz(DTS[t]), shape[2] = { n, d };
		uint8_t *a = table_of(DTS[t], n * d, 3);
		cr_assert_eq(ibp_pack(tmpdir_path("i.ibp"), a, DTS[t], 2, shape, NULL, IBP_LAYOUT_PACKED), IBP_OK);
		cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("x.ibp"), a, DTS[t], 2, shape, 0), IBP_OK);
		ibp_store_t *si = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("i.ibp"), 0, &si), IBP_OK);
		uint8_t *want = tu_xcalloc(nb * R), *got = tu_xcalloc(nb * R);
		for (int isa = 0; isa < 3; isa++) {
			if (ISAS[isa])
				setenv("IBP_EXP_ISA", ISAS[isa], 1);
			else
				unsetenv("IBP_EXP_ISA");
			ibp_store_t *sx = NULL;
			cr_assert_eq(ibp_store_open(tmpdir_path("x.ibp"), 0, &sx), IBP_OK);
			for (int mode = 0; mode < 3; mode++)
				for (int wt = 0; wt < (mode == 0 ? 2 : 1); wt++)
					for (int th = 1; th <= 2; th++)
						for (int wide = 0; wide < 2; wide++) {
							const void *id = wide ? (const void *)ids : (const void *)ids32;
							const ibp_dtype_t idt = wide ? IBP_DTYPE_I64 : IBP_DTYPE_I32;
							const float *ww = wt ? w : NULL;
							cr_assert_eq(ibp_store_embedding_bag(si, (ibp_bag_mode_t)mode, 0, id, idt,
											     nb * per, off, nb, ww, -1, want, th),
								     IBP_OK);
							memset(got, 0x5a, nb * R);
							cr_assert_eq(ibp_store_embedding_bag(sx, (ibp_bag_mode_t)mode, 0, id, idt,
											     nb * per, off, nb, ww, -1, got, th),
								     IBP_OK, "%s", ibp_last_error());
							cr_assert(memcmp(got, want, nb * R) == 0, "%s isa %d mode %d w %d th %d",
								  ibp_dtype_name(DTS[t]), isa, mode, wt, th);
						}
			ibp_store_close(sx);
		}
		unsetenv("IBP_EXP_ISA");
		ibp_store_close(si);
		free(want);
		free(got);
		free(a);
	}
	free(ids), free(ids32), free(off), free(w);
}

/* Bug caught: a decoder that trusts a row's offsets instead of its planes
 * (or the store not checking): row 9 is written with one more escape in
 * its planes than its bytes hold, with right checksums. The open succeeds
 * (checksums), a gather of it fails at its position with
 * IBP_ERR_CORRUPT on every build, other rows still decode, verify names
 * row 9, and IBP_OPEN_VERIFY refuses the file. */
Test(store_exp_rows, damaged_row_refused, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 40, d = 64, shape[2] = { n, d };
	for (int t = 0; t < 3; t++) {
		const uint64_t R = d * esz(DTS[t]);
		uint8_t *a = table_of(DTS[t], n * d, 8);
		uint8_t table[7];
		ibpi_exprows_pick_table(a, DTS[t], n * d, 1, table);
		ibpi_exprows_t x;
		cr_assert_eq(ibpi_exprows_init(&x, DTS[t], R, table, 0), IBP_OK);
		uint8_t *pay = tu_xcalloc(n * (x.fixed + d));
		uint64_t off[41] = { 0 };
		for (uint64_t i = 0; i < n; i++) {
			uint8_t *row = pay + off[i];
			off[i + 1] = off[i] + ibpi_exprows_encode(&x, a + i * R, row);
			if (i == 9) {
				/* element e of row 9: a non-escape turned into an escape */
				uint64_t e = 0;
				while ((row[e / 8] & row[x.P + e / 8] & row[2 * x.P + e / 8]) >> (e % 8) & 1)
					e++;
				for (unsigned k = 0; k < 3; k++)
					row[k * x.P + e / 8] |= (uint8_t)(1u << (e % 8));
			}
		}
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("bad.ibp"), &x, 2, shape, pay, off), IBP_OK, "%s",
			     ibp_last_error());
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
		uint8_t *g = tu_xcalloc(3 * R);
		/* only the decoders this CPU runs (the AVX-512 one is SIGILL on AVX2 hosts) */
		const int nisa = ibpi_cpu()->avx512vbmi && ibpi_cpu()->avx512vbmi2 ? 3 : ibpi_cpu()->avx2 ? 2 : 1;
		for (int isa = 0; isa < nisa; isa++)
			cr_assert_eq(ibpi_exprows_decode(&x, isa, pay + off[9], off[10] - off[9], g), IBP_ERR_CORRUPT);
		int64_t ids[3] = { 3, 9, 4 };
		cr_assert_eq(ibp_store_gather(s, ids, 3, g, 1), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "ids[1]") || strstr(ibp_last_error(), "position 1"), "%s",
			  ibp_last_error());
		cr_assert_eq(ibp_store_gather(s, ids + 2, 1, g, 1), IBP_OK);
		cr_assert(memcmp(g, a + 4 * R, R) == 0);
		cr_assert_eq(ibp_store_verify(s, 1), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "row 9"), "%s", ibp_last_error());
		int64_t bo[2] = { 0, 3 };
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, 3, bo, 1, NULL, -1, g, 1),
			     IBP_ERR_CORRUPT);
		ibp_store_close(s);
		s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), IBP_OPEN_VERIFY, &s), IBP_ERR_CORRUPT);
		/* the writer refuses a row outside [fixed, fixed + d]: row 4 one
		 * byte short of its fixed part, row 5 as much longer (in range) */
		off[5] = off[4] + x.fixed - 1;
		cr_assert(off[6] - off[5] <= x.fixed + d);
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("w.ibp"), &x, 2, shape, pay, off), IBP_ERR_INVALID_ARG);
		cr_assert(strstr(ibp_last_error(), "row 4 "), "%s", ibp_last_error());
		free(g);
		free(pay);
		free(a);
	}
}

Test(store_exp_rows, pack_refuses, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t shape[2] = { 4, 8 };
	uint8_t a[64] = { 0 };
	cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("a.ibp"), a, IBP_DTYPE_U8, 2, shape, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("a.ibp"), NULL, IBP_DTYPE_BF16, 2, shape, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("a.ibp"), a, IBP_DTYPE_BF16, 2, shape, -1), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_pack_exp_rows(NULL, a, IBP_DTYPE_BF16, 2, shape, 0), IBP_ERR_INVALID_ARG);
	/* an empty tensor round-trips */
	const uint64_t empty[2] = { 0, 8 };
	cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("e.ibp"), NULL, IBP_DTYPE_BF16, 2, empty, 0), IBP_OK, "%s",
		     ibp_last_error());
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(tmpdir_path("e.ibp"), IBP_OPEN_VERIFY, &s), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_store_nrows(s), 0);
	ibp_store_close(s);
}
