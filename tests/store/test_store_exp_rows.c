/* test_store_exp_rows.c - containers of the exponent codec's row form
 * (codec 4, ibp_pack_exp_rows) through the container and the store: every
 * row back byte for byte by gather, decode_all and decode_row on every
 * decoder build; embedding bags bitwise equal to those of an IBP store of
 * the same table; damaged rows refused at the position that holds them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "exp/exp_rows.h"
#include "fp8/fp8_impl.h"
#include "io/container_format.h"
#include "io/container_internal.h"
#include "util/cpu.h"
#include "testutil.h"
#include "fixtures.h"

static uint32_t esz(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 4 : 2;
}

/* Element i of a (dtype dt) set to f, rounded to nearest even. */
static void put(ibp_dtype_t dt, uint8_t *a, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32) {
		memcpy(a + 4 * i, &f, 4);
	} else {
		uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
		memcpy(a + 2 * i, &h, 2);
	}
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
		put(dt, a, i, f);
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
					cr_assert_eq(len, c->xr.slot); /* the row's slot */
					cr_assert(src == ibp_container_payload(c, NULL) + 5 * c->xr.slot);
					cr_assert_eq(ibp_container_offsets(c), NULL);
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

/* Bug caught: a row whose escapes are in the overflow area read from
 * its slot. Row 20 has 12 escapes (more than K = 8: in the overflow area);
 * its overflow reference moved past the area's end is refused by the
 * gather (at its position), the bag, verify and a verified open, while
 * the rows around it still decode. A row carries no length in the slot
 * form: damage elsewhere in it is the payload checksums' to catch. */
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
		/* row 20: 12 elements with a field outside the table */
		unsigned fo = 0;
		while (x.code[fo] != 7)
			fo++;
		for (uint64_t i = 0; i < 12; i++) {
			uint8_t *e = a + 20 * R + 5 * i * esz(DTS[t]);
			if (DTS[t] == IBP_DTYPE_F32) {
				uint32_t v;
				memcpy(&v, e, 4);
				v = (v & ~(0xffu << 23)) | fo << 23;
				memcpy(e, &v, 4);
			} else {
				uint16_t v;
				memcpy(&v, e, 2);
				const unsigned sh = DTS[t] == IBP_DTYPE_F16 ? 10 : 7, m = DTS[t] == IBP_DTYPE_F16 ? 0x1f : 0xff;
				v = (uint16_t)((v & ~(m << sh)) | fo << sh);
				memcpy(e, &v, 2);
			}
		}
		cr_assert_eq(ibpi_exprows_set_slot(&x, 8, 0), IBP_OK);
		uint8_t *tmp = tu_xcalloc(x.fixed + d), *pay = tu_xcalloc(n * x.slot + n * d);
		uint64_t ovf = 0, ne20 = 0, o20 = 0;
		for (uint64_t i = 0; i < n; i++) {
			const uint64_t ne = ibpi_exprows_encode_slot(&x, a + i * R, pay + i * x.slot, tmp, pay + n * x.slot, ovf);
			if (i == 20)
				ne20 = ne, o20 = ovf;
			if (ne > x.K)
				ovf += ne;
		}
		cr_assert_geq(ne20, 12);
		const uint64_t plen = n * x.slot + ovf;
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("ok.ibp"), &x, 2, shape, pay, plen), IBP_OK, "%s",
			     ibp_last_error());
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("ok.ibp"), IBP_OPEN_VERIFY, &s), IBP_OK, "%s", ibp_last_error());
		uint8_t *g = tu_xcalloc(3 * R);
		int64_t ids[3] = { 3, 20, 4 };
		cr_assert_eq(ibp_store_gather(s, ids, 3, g, 1), IBP_OK, "%s", ibp_last_error());
		for (int i = 0; i < 3; i++)
			cr_assert(memcmp(g + i * R, a + (uint64_t)ids[i] * R, R) == 0, "%s position %d",
				  ibp_dtype_name(DTS[t]), i);
		if (DTS[t] == IBP_DTYPE_F32) {
			/* a bag of row 20 alone is row 20 */
			int64_t one[1] = { 20 }, bo1[2] = { 0, 1 };
			cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, one, IBP_DTYPE_I64, 1, bo1, 1, NULL, -1, g, 1),
				     IBP_OK, "%s", ibp_last_error());
			cr_assert(memcmp(g, a + 20 * R, R) == 0);
		}
		ibp_store_close(s);
		/* row 20's escapes moved to end 1 byte past the overflow area */
		const uint64_t bad = ovf - ne20 + 1;
		memcpy(pay + 20 * x.slot + x.fixed, &bad, 8);
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("bad.ibp"), &x, 2, shape, pay, plen), IBP_OK, "%s",
			     ibp_last_error());
		s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
		/* only the decoders this CPU runs (the AVX-512 one is SIGILL on AVX2 hosts) */
		const int nisa = ibpi_cpu()->avx512vbmi && ibpi_cpu()->avx512vbmi2 ? 3 : ibpi_cpu()->avx2 ? 2 : 1;
		for (int isa = 0; isa < nisa; isa++) {
			cr_assert_eq(ibpi_exprows_decode_slot(&x, isa, pay + 20 * x.slot, pay + n * x.slot, ovf, g),
				     IBP_ERR_CORRUPT);
			/* at its place it decodes */
			memcpy(pay + 20 * x.slot + x.fixed, &o20, 8);
			cr_assert_eq(ibpi_exprows_decode_slot(&x, isa, pay + 20 * x.slot, pay + n * x.slot, ovf, g), IBP_OK);
			cr_assert(memcmp(g, a + 20 * R, R) == 0);
			memcpy(pay + 20 * x.slot + x.fixed, &bad, 8);
		}
		cr_assert_eq(ibp_store_gather(s, ids, 3, g, 1), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "ids[1]") || strstr(ibp_last_error(), "position 1"), "%s",
			  ibp_last_error());
		cr_assert_eq(ibp_store_gather(s, ids + 2, 1, g, 1), IBP_OK);
		cr_assert(memcmp(g, a + 4 * R, R) == 0);
		cr_assert_eq(ibp_store_verify(s, 1), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "row 20"), "%s", ibp_last_error());
		int64_t bo[2] = { 0, 3 };
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, 3, bo, 1, NULL, -1, g, 1),
			     IBP_ERR_CORRUPT);
		ibp_store_close(s);
		s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), IBP_OPEN_VERIFY, &s), IBP_ERR_CORRUPT);
		/* the writer refuses a payload shorter than the slots, and a form without K */
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("w.ibp"), &x, 2, shape, pay, n * x.slot - 1),
			     IBP_ERR_INVALID_ARG);
		cr_assert(strstr(ibp_last_error(), "slots"), "%s", ibp_last_error());
		ibpi_exprows_t nok = x;
		nok.K = 0;
		cr_assert_eq(ibpi_ctr_write_exp_rows(tmpdir_path("w.ibp"), &nok, 2, shape, pay, plen), IBP_ERR_INVALID_ARG);
		free(g);
		free(tmp);
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

/* Row i of d elements with about (i % 9) / 8 of its elements far from
 * the common exponents (escapes: none up to all 32 of each half word),
 * some rows of -0, NaNs, infinities and subnormals. */
static uint8_t *escape_table(ibp_dtype_t dt, uint64_t n, uint64_t d, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *a = tu_xcalloc(n * d * esz(dt));
	for (uint64_t i = 0; i < n * d; i++) {
		const uint64_t row = i / d;
		float f = (float)(0.05 * tu_gauss(&r));
		if (tu_below(&r, 8) < row % 9)
			f = ldexpf(f, (int)tu_below(&r, dt == IBP_DTYPE_F16 ? 24 : 120) - (dt == IBP_DTYPE_F16 ? 12 : 60));
		if (row % 50 == 7)
			f = (i % 4 == 0) ? -0.0f : (i % 4 == 1) ? NAN : (i % 4 == 2) ? -INFINITY : 1e-41f;
		put(dt, a, i, f);
	}
	return a;
}

/* Sums and means of exp rows of 64, 128 and 192 elements go through
 * ibpi_exprows_sum64 (no decoded rows written): bitwise
 * equal to the decode-then-add path (IBP_EXP_BAG_FUSED=0), to the
 * portable one and (on an AVX-512 machine) to the AVX2 one, on rows of 0
 * to 64 escapes (over 16 in a half: the AVX2 kernel hands the row to the
 * decoder), bags of 0 to 40 ids with padding, one and two threads. Each
 * kernel build the CPU runs is checked row by row too: what it returns,
 * and its sums against decode + add. */
Test(store_exp_rows, bags_summed_in_registers, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 450, nb = 120;
	const int native = ibpi_exprows_isa(); /* before any variable below is set */
	tu_rng_t r;
	tu_rng_seed(&r, 12);
	int64_t *ids = tu_xcalloc(nb * 40 * 8), *off = tu_xcalloc((nb + 1) * 8);
	uint64_t nid = 0;
	for (uint64_t b = 0; b < nb; b++) {
		const uint64_t len = tu_below(&r, 41);
		for (uint64_t k = 0; k < len; k++)
			ids[nid++] = (int64_t)tu_below(&r, n);
		off[b + 1] = (int64_t)nid;
	}
	for (int t = 0; t < 9; t++) {
		const ibp_dtype_t dt = DTS[t % 3];
		const uint64_t d = 64 * (1 + (uint64_t)t / 3), R = d * esz(dt), shape[2] = { n, d }, P = d / 8;
		uint8_t *a = escape_table(dt, n, d, 20 + (uint64_t)t);
		cr_assert_eq(ibp_pack_exp_rows(tmpdir_path("x.ibp"), a, dt, 2, shape, 0), IBP_OK, "%s",
			     ibp_last_error());
		uint8_t *want = tu_xcalloc(nb * R), *got = tu_xcalloc(nb * R);
		for (int mode = 0; mode < 2; mode++)
			for (int pad = 0; pad < 2; pad++)
				for (int th = 1; th <= 2; th++) {
					const int64_t padding = pad ? ids[5] : -1;
					/* the reference: each row decoded, then added */
					setenv("IBP_EXP_BAG_FUSED", "0", 1);
					ibp_store_t *s = NULL;
					cr_assert_eq(ibp_store_open(tmpdir_path("x.ibp"), 0, &s), IBP_OK);
					cr_assert_eq(ibp_store_embedding_bag(s, (ibp_bag_mode_t)mode, 0, ids, IBP_DTYPE_I64,
									     nid, off, nb, NULL, padding, want, th),
						     IBP_OK, "%s", ibp_last_error());
					unsetenv("IBP_EXP_BAG_FUSED");
					for (int v = 0; v < 3; v++) {
						/* v = 1: the portable decoder and kernels forced; 2:
						 * the AVX2 ones (where the machine has AVX-512) */
						if (v == 2 && native < 2)
							continue;
						setenv("IBP_FORCE_PORTABLE", v == 1 ? "1" : "0", 1);
						if (v == 2)
							setenv("IBP_EXP_ISA", "avx2", 1);
						memset(got, 0x5a, nb * R);
						cr_assert_eq(ibp_store_embedding_bag(s, (ibp_bag_mode_t)mode, 0, ids,
										     IBP_DTYPE_I64, nid, off, nb, NULL, padding,
										     got, th),
							     IBP_OK, "%s", ibp_last_error());
						unsetenv("IBP_EXP_ISA");
						for (uint64_t b = 0; b < nb; b++)
							cr_assert(memcmp(got + b * R, want + b * R, R) == 0,
								  "%s mode %d pad %d th %d portable %d: bag %llu differs",
								  ibp_dtype_name(dt), mode, pad, th, v,
								  (unsigned long long)b);
					}
					unsetenv("IBP_FORCE_PORTABLE");
					ibp_store_close(s);
				}
		/* the kernel itself, where it runs: rows in runs of 1 to 16 */
		ibp_container_t *c = NULL;
		cr_assert_eq(ibp_container_open(tmpdir_path("x.ibp"), 0, &c), IBP_OK);
		const ibpi_exprows_t *x = ibpi_container_exprows(c);
		/* the rows in the row form, one after another (the container
		 * keeps them in slots, some escapes in its overflow area) */
		uint8_t *pay = tu_xcalloc(n * (x->fixed + d));
		uint64_t *ro = tu_xcalloc((n + 1) * 8);
		for (uint64_t i = 0; i < n; i++)
			ro[i + 1] = ro[i] + ibpi_exprows_encode(x, a + i * R, pay + ro[i]);
		/* each build this CPU runs: AVX2 (1), AVX-512 (2) */
		for (int isa = 1; isa <= ibpi_exprows_isa(); isa++) {
			if (!ibpi_exprows_sum64_ok(x, isa))
				continue;
			float acc[192], ref[192];
			uint8_t row[768];
			uint64_t taken = 0, refused = 0;
			for (uint64_t i = 0; i < n;) {
				const uint64_t want_m = 1 + tu_below(&r, 16), m = want_m < n - i ? want_m : n - i;
				const uint8_t *src[16];
				uint64_t len[16];
				for (uint64_t k = 0; k < m; k++) {
					src[k] = pay + ro[i + k];
					len[k] = ro[i + k + 1] - ro[i + k];
				}
				for (uint64_t j = 0; j < d; j++)
					acc[j] = ref[j] = (float)j - 20.5f;
				const int first = (int)(i % 2);
				const uint64_t got_n = ibpi_exprows_sum64(x, isa, src, len, m, acc, first);
				/* the reference: rows summed until (AVX2) the first one with
				 * over 16 escapes in a half */
				uint64_t k = 0;
				for (; k < m; k++) {
					uint64_t most = 0; /* escapes of the fullest half word */
					for (uint64_t h = 0; h < d / 32; h++) {
						uint64_t e = 0;
						for (uint64_t j = 32 * h; j < 32 * h + 32; j++)
							e += (src[k][j / 8] & src[k][P + j / 8] & src[k][2 * P + j / 8]) >> (j % 8) & 1;
						most = e > most ? e : most;
					}
					if (isa == 1 && most > 16)
						break;
					cr_assert_eq(ibpi_exprows_decode(x, 0, src[k], len[k], row), IBP_OK);
					for (uint64_t j = 0; j < d; j++) {
						float v;
						if (dt == IBP_DTYPE_F32)
							memcpy(&v, row + 4 * j, 4);
						else {
							uint16_t h;
							memcpy(&h, row + 2 * j, 2);
							v = dt == IBP_DTYPE_F16 ? fp8i_f16_to_f32(h) : fp8i_bf16_to_f32(h);
						}
						ref[j] = (first && k == 0 ? 0.0f : ref[j]) + v;
					}
				}
				cr_assert_eq(got_n, k, "%s rows %llu..: took %llu of %llu, expected %llu",
					     ibp_dtype_name(dt), (unsigned long long)i, (unsigned long long)got_n,
					     (unsigned long long)m, (unsigned long long)k);
				cr_assert(memcmp(acc, ref, d * sizeof(float)) == 0, "%s d %llu rows %llu..: sums differ",
					  ibp_dtype_name(dt), (unsigned long long)d, (unsigned long long)i);
				taken += got_n;
				refused += got_n < m;
				i += got_n < m ? got_n + 1 : m;
			}
			cr_assert_gt(taken, n / 4, "%llu rows summed", (unsigned long long)taken);
			if (isa == 1)
				cr_assert_gt(refused, 5, "%llu refused", (unsigned long long)refused);
			else
				cr_assert_eq(refused, 0, "%llu refused", (unsigned long long)refused);
			cr_log_info("%s d %llu isa %d: %llu rows summed, %llu refused", ibp_dtype_name(dt),
				    (unsigned long long)d, isa, (unsigned long long)taken, (unsigned long long)refused);
		}
		ibp_container_close(c);
		free(pay);
		free(ro);
		free(want);
		free(got);
		free(a);
	}
	free(ids), free(off);
}

/* The kernel refuses what the decoder refuses: a row whose planes count
 * one escape more than it holds, and a float16 row with an escape above
 * 31 (a field 5 bits wide), a row shorter than its fixed part, a row a
 * byte longer than its escapes; it sums the rows before it and stops
 * there. Each kernel build the CPU runs.
 * (A bag of such a row fails: store_exp_rows/damaged_row_refused.) */
Test(store_exp_rows, summed_rows_checked, .init = make_tmpdir, .fini = remove_tmpdir)
{
	for (int t = 0; t < 6; t++) {
		const ibp_dtype_t dt = DTS[t % 3];
		const uint64_t d = 64 * (1 + (uint64_t)t / 3), R = d * esz(dt);
		uint8_t *a = escape_table(dt, 4, d, 30);
		uint8_t table[7];
		ibpi_exprows_pick_table(a, dt, 4 * d, 1, table);
		ibpi_exprows_t x;
		cr_assert_eq(ibpi_exprows_init(&x, dt, R, table, 0), IBP_OK);
		if (!ibpi_exprows_sum64_ok(&x, ibpi_exprows_isa())) {
			free(a);
			cr_skip_test("no AVX2 and F16C here: the kernel does not run");
		}
		for (int isa = 1; isa <= ibpi_exprows_isa(); isa++) {
			const uint64_t P = x.P;
			uint8_t row[3][1024];
			uint64_t len[3];
			len[0] = ibpi_exprows_encode(&x, a + 3 * R, row[0]); /* row 3: 3 / 8 of it escapes */
			cr_assert_gt(len[0], x.fixed);
			/* one more escape in the planes than the row holds, in its last word */
			memcpy(row[1], row[0], len[0]);
			len[1] = len[0];
			uint64_t e = d - 64;
			while ((row[1][e / 8] & row[1][P + e / 8] & row[1][2 * P + e / 8]) >> (e % 8) & 1)
				e++;
			for (unsigned k = 0; k < 3; k++)
				row[1][k * P + e / 8] |= (uint8_t)(1u << (e % 8));
			/* the last escape out of range: refused for float16 only */
			memcpy(row[2], row[0], len[0]);
			len[2] = len[0];
			row[2][len[2] - 1] = 32;
			float acc[128], one[128];
			uint8_t out[512];
			const uint8_t *first_row[1] = { row[0] };
			cr_assert_eq(ibpi_exprows_sum64(&x, isa, first_row, len, 1, one, 1), 1u);
			for (int k = 1; k < 3; k++) {
				const uint8_t *src[2] = { row[0], row[k] };
				const uint64_t l2[2] = { len[0], len[k] };
				const int refused = k == 1 || dt == IBP_DTYPE_F16;
				cr_assert_eq(ibpi_exprows_sum64(&x, isa, src, l2, 2, acc, 1), refused ? 1u : 2u,
					     "%s d %llu row %d isa %d", ibp_dtype_name(dt), (unsigned long long)d, k, isa);
				if (refused) /* the row before it summed, nothing of it */
					cr_assert(memcmp(acc, one, d * sizeof(float)) == 0, "%s d %llu row %d isa %d",
						  ibp_dtype_name(dt), (unsigned long long)d, k, isa);
				cr_assert_eq(ibpi_exprows_decode(&x, 0, row[k], len[k], out),
					     refused ? IBP_ERR_CORRUPT : IBP_OK);
			}
			/* rows shorter than the fixed part, from exact-size copies (ASan:
			 * the planes are not read past them) */
			const uint64_t shorts[6] = { 0, 1, 8, 23, 24, x.fixed - 1 };
			for (int k = 0; k < 6; k++) {
				uint8_t *cut = tu_xcalloc(shorts[k] ? shorts[k] : 1);
				memcpy(cut, row[0], shorts[k]);
				const uint8_t *src[1] = { cut };
				cr_assert_eq(ibpi_exprows_sum64(&x, isa, src, &shorts[k], 1, acc, 1), 0u, "%llu bytes",
					     (unsigned long long)shorts[k]);
				cr_assert_eq(ibpi_exprows_decode(&x, 0, cut, shorts[k], out), IBP_ERR_CORRUPT);
				free(cut);
			}
			/* a row with a byte more than its escapes: refused too */
			{
				uint8_t *longer = tu_xcalloc(len[0] + 1);
				memcpy(longer, row[0], len[0]);
				const uint8_t *src[1] = { longer };
				const uint64_t l1 = len[0] + 1;
				cr_assert_eq(ibpi_exprows_sum64(&x, isa, src, &l1, 1, acc, 1), 0u, "isa %d", isa);
				cr_assert_eq(ibpi_exprows_decode(&x, 0, longer, l1, out), IBP_ERR_CORRUPT);
				free(longer);
			}
		}
		free(a);
	}
}
