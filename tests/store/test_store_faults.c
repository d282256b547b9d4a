/* test_store_faults.c - the store under damaged payloads, built with the
 * public writers (so every checksum is right and only the encoding lies):
 * a failed block decode leaves nothing cached, packed rows must fill their
 * extent in a gather, the first failing position is the one reported,
 * IBP_OPEN_VERIFY is honoured by ibp_store_open. Each test names the bug it
 * is there to catch (tests/mutations.txt plants them). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "bitpack/codec_internal.h"
#include "store/first_failure.h"
#include "testutil.h"
#include "fixtures.h"

/* bf16 values of a smooth distribution (exp codes most exponents). */
static uint8_t *bf16_data(uint64_t n, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	uint8_t *d = tu_xcalloc(2 * n);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)((tu_uniform(&r) - 0.5) * 0.1);
		uint32_t u;
		memcpy(&u, &f, 4);
		uint16_t h = (uint16_t)(u >> 16);
		memcpy(d + 2 * i, &h, 2);
	}
	return d;
}

/* ---- exp: a failed block decode is not left cached ------------------- */

/* Bug caught: store.c keeping `sl->block` when the block decode fails
 * after writing into the slot: the next gather of the slot's old block then
 * returns the failed decode's bytes with IBP_OK. Block 2's body (not its
 * header) is damaged, the file rewritten with right checksums; a row of
 * block 0, then one of block 2 (fails), then block 0 again must give block
 * 0's rows. Tried at several damage places that make block 2 fail after
 * the decoder wrote some of its output. */
Test(store_faults, failed_block_not_cached, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t rows = 400, cols = 64, brows = 100, R = cols * 2;
	const uint64_t shape[2] = { rows, cols };
	uint8_t *d = bf16_data(rows * cols, 11);
	cr_assert_eq(ibp_pack_exp(tmpdir_path("e.ibp"), d, IBP_DTYPE_BF16, 2, shape, NULL, brows), IBP_OK, "%s",
		     ibp_last_error());
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(tmpdir_path("e.ibp"), 0, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_nblocks(c), 4);
	uint64_t plen;
	const uint8_t *pl = ibp_container_payload(c, &plen);
	uint64_t off[5];
	for (uint64_t b = 0; b < 4; b++) {
		const uint8_t *src;
		uint64_t len;
		cr_assert_eq(ibp_container_block(c, b, &src, &len), IBP_OK);
		off[b] = (uint64_t)(src - pl);
		off[b + 1] = off[b] + len;
	}
	uint8_t *pay = tu_xcalloc(plen);
	memcpy(pay, pl, plen);
	ibp_container_close(c);

	uint8_t *blk = tu_xcalloc(brows * R), *out = tu_xcalloc(4 * R);
	int tried = 0;
	/* only damage that fails after the decoder wrote into its output (a
	 * group fails, not the header or frame checks) tells the bug */
	for (uint64_t at = off[2] + 64; at < off[3] && tried < 4; at += 13) {
		uint8_t keep = pay[at];
		pay[at] ^= 0xA5;
		cr_assert_eq(ibp_container_write_exp(tmpdir_path("d.ibp"), IBP_DTYPE_BF16, 2, shape, brows * cols,
						     IBP_EXP_TABLE_SIGMA, pay, off),
			     IBP_OK, "%s", ibp_last_error());
		pay[at] = keep;
		cr_assert_eq(ibp_container_open(tmpdir_path("d.ibp"), 0, &c), IBP_OK, "%s", ibp_last_error());
		memset(blk, 0xEE, brows * R);
		ibp_status_t bst = ibp_container_decode_block(c, 2, blk, 1);
		ibp_container_close(c);
		uint64_t untouched = 0;
		while (untouched < brows * R && blk[untouched] == 0xEE)
			untouched++;
		if (bst == IBP_OK || untouched == brows * R)
			continue; /* still decodes, or fails before writing: not the case */
		tried++;
		ibp_store_t *s = NULL;
		cr_assert_eq(ibp_store_open(tmpdir_path("d.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
		for (int t = 1; t <= 2; t++) {
			int64_t a = 3, b = 250, a2 = 10;
			cr_assert_eq(ibp_store_gather(s, &a, 1, out, 1), IBP_OK, "%s", ibp_last_error());
			cr_assert_arr_eq(out, d + a * R, R);
			ibp_status_t st = ibp_store_gather(s, &b, 1, out, 1);
			cr_assert(st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM, "damage at %llu: status %d",
				  (unsigned long long)at, st);
			memset(out, 0xEE, R);
			cr_assert_eq(ibp_store_gather(s, &a2, 1, out, 1), IBP_OK, "%s", ibp_last_error());
			cr_assert_arr_eq(out, d + a2 * R, R, "damage at %llu: block 0 row after a failed block 2",
					 (unsigned long long)at);
			/* a request mixing both: fails, then block 0 is still right */
			int64_t mix[4] = { 5, 6, 260, 7 };
			st = ibp_store_gather(s, mix, 4, out, t);
			cr_assert(st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM);
			cr_assert_eq(ibp_store_gather(s, mix, 2, out, 1), IBP_OK, "%s", ibp_last_error());
			cr_assert_arr_eq(out, d + 5 * R, 2 * R);
		}
		ibp_store_close(s);
	}
	cr_assert_geq(tried, 3, "only %d damage places made block 2 fail after writing", tried);
	free(out);
	free(blk);
	free(pay);
	free(d);
}

/* ---- IBP rows written with the public writer ------------------------- */

typedef struct ibp_file {
	uint64_t n, R;
	uint8_t *rows;
	ibp_codec_t *codec;
	uint8_t *pay, *flags, *cl;
	uint64_t *off;
} ibp_file_t;

/* n rows of smooth f32 data, a codec trained on them, the batch encoding. */
static ibp_file_t make_ibp(uint64_t n, uint64_t R, uint64_t seed)
{
	ibp_file_t f = { n, R, NULL, NULL, NULL, NULL, NULL, NULL };
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	f.rows = tu_xcalloc(n * R);
	tu_gen_rows(&r, TU_F32_SMOOTH, f.rows, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	o.chunk_bytes = 4;
	cr_assert_eq(ibp_codec_train(f.rows, n, R, &o, &f.codec), IBP_OK, "%s", ibp_last_error());
	uint64_t cap = ibp_batch_bound(f.codec, n) + 16 * n;
	f.pay = tu_xcalloc(cap);
	f.off = tu_xcalloc((n + 1) * 8);
	f.flags = tu_xcalloc(n);
	f.cl = tu_xcalloc(n);
	cr_assert_eq(ibp_encode_batch(f.codec, f.rows, n, f.pay, cap, f.off, f.flags, f.cl, 1), IBP_OK, "%s",
		     ibp_last_error());
	return f;
}

static void free_ibp(ibp_file_t *f)
{
	free(f->rows);
	free(f->pay);
	free(f->off);
	free(f->flags);
	free(f->cl);
	ibp_codec_free(f->codec);
}

static void write_ibp(const ibp_file_t *f, const char *p)
{
	uint64_t shape[2] = { f->n, f->R };
	cr_assert_eq(ibp_container_write(p, f->codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, f->pay,
					 f->off[f->n], f->off, f->flags, f->cl),
		     IBP_OK, "%s", ibp_last_error());
}

/* A row that is not raw and shorter than R, from `from` on. */
static uint64_t coded_row(const ibp_file_t *f, uint64_t from)
{
	for (uint64_t i = from; i < f->n; i++)
		if ((f->flags[i] & 3) && f->off[i + 1] - f->off[i] < f->R)
			return i;
	cr_assert_fail("no coded row from %llu", (unsigned long long)from);
	return 0;
}

/* Changes one payload byte of row k so that the row no longer decodes to
 * exactly its extent (a checked decode fails or uses other bytes). */
static void spoil_row(ibp_file_t *f, uint64_t k)
{
	uint8_t *tmp = tu_xcalloc(f->R);
	uint64_t len = f->off[k + 1] - f->off[k], used = 0;
	/* another mode first: the same bytes read another way */
	for (uint8_t m = 1; m <= 3; m++) {
		if (m == (f->flags[k] & 3))
			continue;
		ibp_status_t st = ibpi_decode_row_ext(f->codec, f->pay + f->off[k], len, m, f->cl[k], tmp, &used);
		if (st != IBP_OK || used != len) {
			f->flags[k] = m;
			free(tmp);
			return;
		}
	}
	for (uint64_t i = 0; i < len; i++)
		for (unsigned bit = 0; bit < 8; bit++) {
			uint8_t *p = f->pay + f->off[k] + i;
			*p ^= (uint8_t)(1u << bit);
			ibp_status_t st = ibpi_decode_row_ext(f->codec, f->pay + f->off[k], len, f->flags[k], f->cl[k],
							     tmp, &used);
			if (st != IBP_OK || used != len) {
				free(tmp);
				return;
			}
			*p ^= (uint8_t)(1u << bit);
		}
	cr_assert_fail("row %llu: no single bit flip spoils it", (unsigned long long)k);
}

/* Bug caught: store.c's gather not checking that a packed row fills its
 * extent (FORMAT.md 1.3): a stray byte after row k's encoding. */
Test(store_faults, gather_requires_exact_extent, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibp_file_t f = make_ibp(200, 64, 21);
	uint64_t k = coded_row(&f, 50), n = f.n;
	/* shift every row after k by one byte, a zero after row k */
	uint8_t *pay = tu_xcalloc(f.off[n] + 1);
	memcpy(pay, f.pay, f.off[k + 1]);
	memcpy(pay + f.off[k + 1] + 1, f.pay + f.off[k + 1], f.off[n] - f.off[k + 1]);
	for (uint64_t i = k + 1; i <= n; i++)
		f.off[i]++;
	free(f.pay);
	f.pay = pay;
	write_ibp(&f, tmpdir_path("x.ibp"));
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(tmpdir_path("x.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
	uint8_t *out = tu_xcalloc(4 * f.R);
	int64_t ids[4] = { 0, (int64_t)k + 1, (int64_t)k, 3 };
	for (int t = 1; t <= 2; t++) {
		cr_assert_eq(ibp_store_gather(s, ids, 4, out, t), IBP_ERR_CORRUPT, "stray byte accepted (%d threads)",
			     t);
		char want[64];
		snprintf(want, sizeof(want), "position 2 (row %llu)", (unsigned long long)k);
		cr_assert(strstr(ibp_last_error(), want) != NULL, "%s", ibp_last_error());
		cr_assert_eq(ibp_store_gather(s, ids, 2, out, t), IBP_OK, "%s", ibp_last_error());
		cr_assert_arr_eq(out, f.rows, f.R);
		cr_assert_arr_eq(out + f.R, f.rows + (k + 1) * f.R, f.R);
	}
	uint8_t *all = tu_xcalloc(f.n * f.R);
	cr_assert_eq(ibp_store_decode_all(s, all, 1), IBP_ERR_CORRUPT);
	free(all);
	free(out);
	ibp_store_close(s);
	free_ibp(&f);
}

/* Bug caught (mutation check): a chunk of the bag's rows that failed to
 * decode pooled as if it had not (issue 29: bags decode their rows in
 * chunks with the store's gather). The bag holding the corrupt row is named;
 * bags of other rows still pool. */
Test(store_faults, bag_reports_a_corrupt_row, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibp_file_t f = make_ibp(400, 64, 31);
	uint64_t k = coded_row(&f, 150);
	spoil_row(&f, k);
	uint64_t shape[2] = { f.n, f.R / 4 };
	cr_assert_eq(ibp_container_write(tmpdir_path("b.ibp"), f.codec, IBP_DTYPE_F32, 2, shape, IBP_LAYOUT_PACKED,
					 f.pay, f.off[f.n], f.off, f.flags, f.cl),
		     IBP_OK, "%s", ibp_last_error());
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(tmpdir_path("b.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
	enum { NB = 100, L = 3 };
	int64_t ids[NB * L], off[NB + 1];
	for (uint64_t i = 0; i < NB * L; i++)
		ids[i] = (int64_t)((i * 7) % f.n == k ? (k + 1) % f.n : (i * 7) % f.n);
	for (uint64_t b = 0; b <= NB; b++)
		off[b] = (int64_t)(b * L);
	float *out = tu_xcalloc(NB * f.R);
	for (int t = 1; t <= 2; t++)
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, NB * L, off, NB, NULL, -1, out,
						     t),
			     IBP_OK, "%s", ibp_last_error());
	ids[200] = (int64_t)k; /* bag 66 */
	for (int t = 1; t <= 2; t++) {
		cr_assert_eq(ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, NB * L, off, NB, NULL, -1, out,
						     t),
			     IBP_ERR_CORRUPT, "a corrupt row pooled (%d threads)", t);
		cr_assert(strstr(ibp_last_error(), "bag 66") != NULL, "%s", ibp_last_error());
	}
	free(out);
	ibp_store_close(s);
	free_ibp(&f);
}

/* Bug caught: keeping any failure but the one at the smallest position.
 * The rule on its own, over failures found in every order (the pooled
 * test below depends on the helper thread running in time). */
Test(store_faults, earliest_failure_kept)
{
	static const uint64_t found[][4] = { { 9, 3, 7, 5 }, { 3, 9, 7, 5 }, { 7, 5, 9, 3 }, { 5, 5, 2, 8 } };
	for (size_t k = 0; k < sizeof(found) / sizeof(found[0]); k++) {
		int have = 0;
		uint64_t at = 0, least = UINT64_MAX;
		for (int i = 0; i < 4; i++) {
			if (ibp_failure_replaces(have, found[k][i], at))
				at = found[k][i];
			have = 1;
			least = found[k][i] < least ? found[k][i] : least;
		}
		cr_assert_eq(at, least, "order %zu: kept %llu, first is %llu", k, (unsigned long long)at,
			     (unsigned long long)least);
	}
	cr_assert(ibp_failure_replaces(0, 100, 0), "the first failure is always recorded");
	cr_assert(!ibp_failure_replaces(1, 4, 4), "an equal position keeps the first message");
}

/* Bug caught: the pooled gather reporting the last failing position (or
 * any but the first). Rows k1 < k2 are spoiled (spoil_row). With 4-byte
 * rows and 140000 positions, a 2-thread gather works in grains of 16384
 * positions (small rows: a grain takes long enough, per-row costs, for the
 * helper thread to be running before it ends, even with the row map's fast
 * lookups): the first grain holds valid rows and k1 at its end, every
 * later position is k2. The first grain is always decoded up to k1 (a
 * thread stops only between grains), while the helper, taking the second
 * grain meanwhile, fails at once on k2: both failures are recorded, and the
 * first by position must win. */
Test(store_faults, first_failing_position_reported, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibp_file_t f = make_ibp(300, 4, 22);
	uint64_t k1 = coded_row(&f, 10), k2 = coded_row(&f, k1 + 1);
	spoil_row(&f, k1);
	spoil_row(&f, k2);
	write_ibp(&f, tmpdir_path("p.ibp"));
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(tmpdir_path("p.ibp"), 0, &s), IBP_OK, "%s", ibp_last_error());
	const uint64_t m = 140000, first = 16384; /* 65536 / R; m / (4 * 2) is larger */
	int64_t *ids = tu_xcalloc(m * sizeof(int64_t));
	uint8_t *out = tu_xcalloc(m * f.R);
	for (uint64_t i = 0; i < m; i++) {
		uint64_t v = i % 300;
		ids[i] = (int64_t)(i + 1 < first ? (v == k1 || v == k2 ? 0 : v) : i + 1 == first ? k1 : k2);
	}
	char want[64];
	snprintf(want, sizeof(want), "position %llu (row %llu)", (unsigned long long)(first - 1),
		 (unsigned long long)k1);
	for (int it = 0; it < 40; it++) {
		int t = it % 4 ? 2 : 1;
		cr_assert_eq(ibp_store_gather(s, ids, m, out, t), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), want) != NULL, "%d threads: %s", t, ibp_last_error());
	}
	free(out);
	free(ids);
	ibp_store_close(s);
	free_ibp(&f);
}

/* Bug caught: ibp_store_open ignoring IBP_OPEN_VERIFY (with it, a file
 * whose rows do not decode is refused at open; without it, it opens and
 * only the gather of the bad row fails). */
Test(store_faults, open_verify_flag, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ibp_file_t f = make_ibp(100, 48, 23);
	uint64_t k = coded_row(&f, 0);
	write_ibp(&f, tmpdir_path("good.ibp"));
	spoil_row(&f, k);
	write_ibp(&f, tmpdir_path("bad.ibp"));
	ibp_store_t *s = NULL;
	for (unsigned mm = 0; mm < 2; mm++) {
		unsigned flags = mm ? IBP_OPEN_MMAP : IBP_OPEN_READ;
		cr_assert_eq(ibp_store_open(tmpdir_path("good.ibp"), flags | IBP_OPEN_VERIFY, &s), IBP_OK, "%s",
			     ibp_last_error());
		ibp_store_close(s);
		s = (ibp_store_t *)1;
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), flags | IBP_OPEN_VERIFY, &s), IBP_ERR_CORRUPT,
			     "IBP_OPEN_VERIFY ignored");
		cr_assert_null(s);
		cr_assert_eq(ibp_store_open(tmpdir_path("bad.ibp"), flags, &s), IBP_OK, "%s", ibp_last_error());
		int64_t id = (int64_t)k;
		uint8_t *out = tu_xcalloc(f.R);
		cr_assert_eq(ibp_store_gather(s, &id, 1, out, 1), IBP_ERR_CORRUPT);
		free(out);
		ibp_store_close(s);
	}
	free_ibp(&f);
}
