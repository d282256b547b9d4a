/* test_exp.c - the lossless exponent codec (ibp/exp.h): byte-exact round
 * trips over distributions, special values, dtypes and odd sizes; sizes and
 * layout exactly as docs/CODECS.md says (checked by an independent decoder
 * written from the document); raw passthrough; corrupt blocks; the sigma
 * window derivation against histograms; the mean-square order; the ratio
 * target on BF16 N(0, sigma). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "exp/exp_split.h"
#include "fp8/fp8_impl.h"
#include "testutil.h"

#define DT_COUNT 3
static const ibp_dtype_t DTS[DT_COUNT] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};

static size_t esize_of(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 4 : 2;
}

static void put_value(uint8_t *p, ibp_dtype_t dt, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32) {
		memcpy(p + 4 * i, &f, 4);
	} else {
		uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
		memcpy(p + 2 * i, &h, 2);
	}
}

typedef enum dist { D_GAUSS, D_LOGNORMAL, D_UNIFORM_EXP, D_SPECIAL, D_ZEROS, D_COUNT } dist_t;

/* Fills n elements of dt. D_UNIFORM_EXP: random bits (every exponent field
 * equally likely). D_SPECIAL: +-0, denormals, +-Inf, NaN payloads, max
 * values mixed with Gaussian values. */
static void gen(tu_rng_t *r, dist_t d, ibp_dtype_t dt, double sigma, uint8_t *p, uint64_t n)
{
	size_t es = esize_of(dt);
	for (uint64_t i = 0; i < n; i++) {
		switch (d) {
		case D_GAUSS:
			put_value(p, dt, i, (float)(tu_gauss(r) * sigma));
			break;
		case D_LOGNORMAL:
			put_value(p, dt, i, (float)exp(tu_gauss(r) * 2.0 - 3.0) * (tu_next(r) & 1 ? -1.0f : 1.0f));
			break;
		case D_UNIFORM_EXP: {
			uint64_t v = tu_next(r);
			memcpy(p + es * i, &v, es);
			break;
		}
		case D_SPECIAL: {
			uint32_t u;
			uint64_t pick = tu_below(r, 10);
			if (pick < 4) {
				put_value(p, dt, i, (float)(tu_gauss(r) * sigma));
				continue;
			}
			uint32_t rnd = (uint32_t)tu_next(r);
			if (dt == IBP_DTYPE_F32) {
				static const uint32_t sp[6] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
							       0x7f7fffffu, 0x00000001u};
				u = pick < 6 ? sp[rnd % 6]
				  : pick < 8 ? (rnd & 0x807fffffu) /* denormal or zero, any sign */
					     : (0x7f800001u | (rnd & 0x807fffffu)); /* NaN, any payload */
				memcpy(p + 4 * i, &u, 4);
			} else {
				uint16_t h;
				uint32_t ef = dt == IBP_DTYPE_BF16 ? 0x7f80u : 0x7c00u, mm = dt == IBP_DTYPE_BF16 ? 0x7fu : 0x3ffu;
				uint16_t sp[6] = {0x0000u, 0x8000u, (uint16_t)ef, (uint16_t)(0x8000u | ef),
						  (uint16_t)(ef - 1u), 0x0001u};
				h = pick < 6 ? sp[rnd % 6]
				  : pick < 8 ? (uint16_t)(rnd & (0x8000u | mm))
					     : (uint16_t)(ef | 1u | (rnd & (0x8000u | mm)));
				memcpy(p + 2 * i, &h, 2);
			}
			break;
		}
		case D_ZEROS:
		case D_COUNT:
			memset(p + es * i, 0, es);
			break;
		}
	}
}

/* Encodes with opts, decodes, compares bytes; returns the block size. */
static uint64_t round_trip(const uint8_t *src, ibp_dtype_t dt, uint64_t n, const ibp_exp_opts_t *o,
			   uint8_t **block_out)
{
	uint64_t cap = 0, size = 0;
	size_t es = esize_of(dt);
	cr_assert_eq(ibp_exp_encode_bound(dt, n, &cap), IBP_OK);
	uint8_t *blk = tu_xcalloc(cap + 1);
	uint8_t *out = tu_xcalloc(n * es + 1);
	ibp_status_t st = ibp_exp_encode(src, dt, n, o, blk, cap, &size);
	cr_assert_eq(st, IBP_OK, "encode %s n=%llu: %s", ibp_dtype_name(dt), (unsigned long long)n, ibp_last_error());
	cr_assert(size <= cap && size % 128 == 0);
	st = ibp_exp_decode(blk, size, dt, n, out, o ? o->nthreads : 0);
	cr_assert_eq(st, IBP_OK, "decode %s n=%llu: %s", ibp_dtype_name(dt), (unsigned long long)n, ibp_last_error());
	cr_assert(memcmp(src, out, n * es) == 0, "round trip differs: %s n=%llu", ibp_dtype_name(dt),
		  (unsigned long long)n);
	free(out);
	if (block_out)
		*block_out = blk;
	else
		free(blk);
	return size;
}

/* ------------------------------------------------------------ round trips */

Test(exp, round_trip_all_sizes_0_to_1000)
{
	tu_rng_t r;
	tu_rng_seed(&r, 1);
	uint8_t *src = tu_xcalloc(4 * 1001);
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = 1;
	for (uint64_t n = 0; n <= 1000; n++) {
		for (int d = 0; d < DT_COUNT; d++) {
			dist_t dist = (dist_t)(n % D_COUNT);
			gen(&r, dist, DTS[d], 0.01, src, n);
			o.table_mode = (ibp_exp_table_mode_t)(n % 2 ? IBP_EXP_TABLE_SIGMA : IBP_EXP_TABLE_HISTOGRAM);
			round_trip(src, DTS[d], n, &o, NULL);
		}
	}
	free(src);
}

Test(exp, round_trip_distributions_and_modes)
{
	static const uint64_t sizes[] = {4095, 4096, 4097, 8191, 12289, 65537, (1u << 20) + 3};
	tu_rng_t r;
	tu_rng_seed(&r, 2);
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint64_t n = sizes[si];
		for (int d = 0; d < DT_COUNT; d++) {
			uint8_t *src = tu_xcalloc(n * esize_of(DTS[d]));
			for (int dist = 0; dist < D_COUNT; dist++) {
				if (n > 100000 && dist != D_GAUSS && dist != D_SPECIAL)
					continue;
				gen(&r, (dist_t)dist, DTS[d], 0.05, src, n);
				for (int mode = 0; mode < 3; mode++) {
					ibp_exp_opts_t o;
					ibp_exp_opts_default(&o);
					o.table_mode = (ibp_exp_table_mode_t)mode;
					o.nthreads = 1;
					if (mode == IBP_EXP_TABLE_GIVEN) {
						for (int k = 0; k < 7; k++)
							o.table.field[k] = (uint8_t)(3 * k + 1);
					}
					round_trip(src, DTS[d], n, &o, NULL);
				}
				ibp_exp_opts_t o;
				ibp_exp_opts_default(&o);
				o.sigma = 0.05; /* sigma given */
				round_trip(src, DTS[d], n, &o, NULL);
			}
			free(src);
		}
	}
}

/* Bytes do not depend on the thread count or on the ISA variant. */
Test(exp, threads_and_isa_give_identical_bytes)
{
	uint64_t n = (3u << 20) + 17;
	tu_rng_t r;
	tu_rng_seed(&r, 3);
	for (int d = 0; d < DT_COUNT; d++) {
		uint8_t *src = tu_xcalloc(n * esize_of(DTS[d]));
		gen(&r, D_GAUSS, DTS[d], 0.3, src, n);
		uint8_t *b1, *b2, *b3;
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.nthreads = 1;
		uint64_t s1 = round_trip(src, DTS[d], n, &o, &b1);
		o.nthreads = 5;
		uint64_t s2 = round_trip(src, DTS[d], n, &o, &b2);
		setenv("IBP_FORCE_PORTABLE", "1", 1);
		o.nthreads = 3;
		uint64_t s3 = round_trip(src, DTS[d], n, &o, &b3);
		unsetenv("IBP_FORCE_PORTABLE");
		cr_assert(s1 == s2 && s1 == s3);
		cr_assert(memcmp(b1, b2, s1) == 0, "%s: 1 vs 5 threads differ", ibp_dtype_name(DTS[d]));
		cr_assert(memcmp(b1, b3, s1) == 0, "%s: portable differs", ibp_dtype_name(DTS[d]));
		free(b1);
		free(b2);
		free(b3);
		free(src);
	}
}

/* The exponent codec's loops for v = 0 (the best the CPU has: AVX-512 with
 * BW + VBMI), 1 (AVX2) or 2 (portable); -1 puts the environment back. */
static void use_isa(int v)
{
	if (v == 2)
		setenv("IBP_FORCE_PORTABLE", "1", 1);
	else
		unsetenv("IBP_FORCE_PORTABLE");
	if (v == 1)
		setenv("IBP_EXP_ISA", "avx2", 1);
	else
		unsetenv("IBP_EXP_ISA");
}

/* The three decoders (AVX-512 where the CPU has BW + VBMI, AVX2, portable)
 * agree on every input: valid blocks of every dtype with tail words and
 * many escapes decode to the same values, and blocks with one random byte
 * changed (thousands of them, header, planes, escapes and payload) get the
 * same status from each, and the same values when a change goes unnoticed
 * (a payload byte is data). */
Test(exp, decoders_agree_on_valid_and_damaged_blocks)
{
	int coded = 0;
	tu_rng_t r;
	tu_rng_seed(&r, 2026);
	const uint64_t ns[] = { 64, 4096 + 64, 3 * 4096 + 77, 12288 };
	for (int d = 0; d < DT_COUNT; d++)
		for (unsigned k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
			const uint64_t n = ns[k];
			const size_t es = esize_of(DTS[d]);
			uint8_t *src = tu_xcalloc(n * es), *blk = NULL;
			gen(&r, D_GAUSS, DTS[d], 3.0, src, n); /* coded, with escapes in the tails */
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.checksum = 0; /* else the checksum refuses every change before a decoder sees it */
			uint64_t size = round_trip(src, DTS[d], n, &o, &blk);
			uint8_t *bad = tu_xcalloc(size), *out[3];
			int fails = 0;
			for (int v = 0; v < 3; v++)
				out[v] = tu_xcalloc(n * es);
			for (int trial = 0; trial < 400; trial++) {
				memcpy(bad, blk, size);
				if (trial) /* trial 0: the block as it is; odd trials in the first eighth (header, prefixes, planes) */
					bad[tu_next(&r) % (trial & 1 ? size / 8 : size)] ^= (uint8_t)(1 + tu_next(&r) % 255);
				ibp_status_t st[3];
				for (int v = 0; v < 3; v++) {
					use_isa(v);
					memset(out[v], 0, n * es);
					st[v] = ibp_exp_decode(bad, size, DTS[d], n, out[v], 1);
				}
				cr_assert(st[0] == st[1] && st[0] == st[2], "%s n=%llu trial %d: statuses %d %d %d",
					  ibp_dtype_name(DTS[d]), (unsigned long long)n, trial, st[0], st[1], st[2]);
				if (st[0] == IBP_OK)
					cr_assert(!memcmp(out[0], out[1], n * es) && !memcmp(out[0], out[2], n * es),
						  "%s n=%llu trial %d: values differ", ibp_dtype_name(DTS[d]),
						  (unsigned long long)n, trial);
				if (trial == 0)
					cr_assert(st[0] == IBP_OK && !memcmp(out[0], src, n * es));
				fails += st[0] != IBP_OK;
			}
			ibp_exp_info_t info;
			cr_assert_eq(ibp_exp_block_info(blk, size, &info), IBP_OK);
			cr_assert(info.raw || fails > 20,
				  "%s n=%llu: only %d of 400 changes were refused: the test reaches no decoder check",
				  ibp_dtype_name(DTS[d]), (unsigned long long)n, fails);
			coded += !info.raw;
			use_isa(-1);
			for (int v = 0; v < 3; v++)
				free(out[v]);
			free(bad);
			free(blk);
			free(src);
		}
	cr_assert_geq(coded, 9, "every block over 64 elements must be coded (escapes, planes), not raw: %d", coded);
}

/* The three encoders (AVX-512 where the CPU has BW + VBMI + VBMI2, AVX2, portable)
 * write the same bytes, and their mean squares are the same doubles, for
 * every distribution (escapes, specials, raw fallbacks), both table modes
 * and sizes with and without tail words and partial groups. */
Test(exp, encoders_agree_on_every_distribution)
{
	tu_rng_t r;
	tu_rng_seed(&r, 4242);
	const uint64_t ns[] = { 64, 4096 + 64, 12288, 100000 + 13 };
	for (int d = 0; d < DT_COUNT; d++)
		for (int dist = 0; dist < D_COUNT; dist++)
			for (unsigned k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
				for (int mode = 0; mode < 2; mode++) {
					const uint64_t n = ns[k];
					uint8_t *src = tu_xcalloc(n * esize_of(DTS[d])), *blk[3];
					gen(&r, (dist_t)dist, DTS[d], 0.5, src, n);
					ibp_exp_opts_t o;
					ibp_exp_opts_default(&o);
					o.table_mode = (ibp_exp_table_mode_t)mode;
					o.nthreads = 1;
					uint64_t size[3];
					double ms[3];
					for (int v = 0; v < 3; v++) {
						use_isa(v);
						size[v] = round_trip(src, DTS[d], n, &o, &blk[v]);
						cr_assert_eq(ibp_exp_mean_square(src, DTS[d], n, &ms[v]), IBP_OK);
					}
					cr_assert(!memcmp(&ms[0], &ms[1], sizeof(double)) && !memcmp(&ms[0], &ms[2], sizeof(double)),
						  "%s dist %d n=%llu: mean squares %.17g %.17g %.17g", ibp_dtype_name(DTS[d]), dist,
						  (unsigned long long)n, ms[0], ms[1], ms[2]);
					cr_assert(size[0] == size[1] && size[0] == size[2] && !memcmp(blk[0], blk[1], size[0]) &&
						  !memcmp(blk[0], blk[2], size[0]),
						  "%s dist %d n=%llu mode %d: the encoders' bytes differ", ibp_dtype_name(DTS[d]),
						  dist, (unsigned long long)n, mode);
					for (int v = 0; v < 3; v++)
						free(blk[v]);
					free(src);
				}
	use_isa(-1);
}

/* ------------------------------------------------------- layout and sizes */

static uint64_t al(uint64_t x)
{
	return (x + 127) / 128 * 128;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* docs/CODECS.md, "Coded block", restated independently. */
typedef struct doc_layout {
	uint64_t ngroups, off_planes, plane_bytes, nplanes, off_lo, off_hi, stat;
} doc_layout_t;

static doc_layout_t doc_layout(ibp_dtype_t dt, uint64_t n)
{
	doc_layout_t L;
	L.ngroups = (n + 4095) / 4096;
	L.off_planes = al(64 + 8 * L.ngroups);
	L.plane_bytes = (n + 127) / 128 * 16;
	L.nplanes = dt == IBP_DTYPE_F16 ? 6 : 3;
	L.off_lo = al(L.off_planes + L.nplanes * L.plane_bytes);
	if (dt == IBP_DTYPE_F32) {
		L.off_hi = al(L.off_lo + 2 * n);
		L.stat = al(L.off_hi + n);
	} else {
		L.off_hi = L.off_lo;
		L.stat = al(L.off_lo + n);
	}
	return L;
}

static int bit(const uint8_t *plane, uint64_t i)
{
	return (plane[i / 8] >> (i % 8)) & 1;
}

/* A decoder written from the document only (element by element). */
static void doc_decode(const uint8_t *blk, ibp_dtype_t dt, uint64_t n, uint8_t *out)
{
	doc_layout_t L = doc_layout(dt, n);
	const uint8_t *tab = blk + 16;
	uint64_t esc_seen = 0;
	for (uint64_t i = 0; i < n; i++) {
		const uint8_t *pl = blk + L.off_planes;
		uint32_t code = (uint32_t)(bit(pl, i) | bit(pl + L.plane_bytes, i) << 1 | bit(pl + 2 * L.plane_bytes, i) << 2);
		uint32_t field;
		if (i % 4096 == 0) /* a group's prefix counts the escapes before it */
			cr_assert_eq(rd64(blk + 64 + 8 * (i / 4096)), esc_seen);
		field = code ? tab[code - 1] : blk[L.stat + esc_seen++];
		if (dt == IBP_DTYPE_BF16) {
			uint32_t s = blk[L.off_lo + i];
			uint16_t v = (uint16_t)((s >> 7) << 15 | field << 7 | (s & 0x7f));
			memcpy(out + 2 * i, &v, 2);
		} else if (dt == IBP_DTYPE_F16) {
			uint32_t s = blk[L.off_lo + i] | (uint32_t)bit(pl + 3 * L.plane_bytes, i) << 8 |
				     (uint32_t)bit(pl + 4 * L.plane_bytes, i) << 9 | (uint32_t)bit(pl + 5 * L.plane_bytes, i) << 10;
			uint16_t v = (uint16_t)((s >> 10) << 15 | field << 10 | (s & 0x3ff));
			memcpy(out + 2 * i, &v, 2);
		} else {
			uint32_t s = (uint32_t)blk[L.off_lo + 2 * i] | (uint32_t)blk[L.off_lo + 2 * i + 1] << 8 |
				     (uint32_t)blk[L.off_hi + i] << 16;
			uint32_t v = (s >> 23) << 31 | field << 23 | (s & 0x7fffff);
			memcpy(out + 4 * i, &v, 4);
		}
	}
	cr_assert_eq(esc_seen, rd64(blk + 24));
}

Test(exp, sizes_and_layout_as_documented)
{
	static const uint64_t sizes[] = {1, 63, 64, 65, 127, 128, 129, 1000, 4096, 4097, 20000, 100003};
	tu_rng_t r;
	tu_rng_seed(&r, 4);
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint64_t n = sizes[si];
		for (int d = 0; d < DT_COUNT; d++) {
			ibp_dtype_t dt = DTS[d];
			size_t es = esize_of(dt);
			doc_layout_t L = doc_layout(dt, n);
			uint64_t stat = 0, raw = 0, coded = 0, bound = 0;
			cr_assert_eq(ibp_exp_static_size(dt, n, &stat), IBP_OK);
			cr_assert_eq(stat, L.stat, "%s n=%llu static %llu != documented %llu", ibp_dtype_name(dt),
				     (unsigned long long)n, (unsigned long long)stat, (unsigned long long)L.stat);
			cr_assert_eq(ibp_exp_raw_size(dt, n, &raw), IBP_OK);
			cr_assert_eq(raw, al(64 + n * es));
			uint64_t e5 = n < 5 ? n : 5;
			cr_assert_eq(ibp_exp_coded_size(dt, n, e5, &coded), IBP_OK);
			cr_assert_eq(coded, al(L.stat + e5));
			cr_assert_eq(ibp_exp_coded_size(dt, n, n + 1, &coded), IBP_ERR_INVALID_ARG);
			cr_assert_eq(ibp_exp_encode_bound(dt, n, &bound), IBP_OK);
			cr_assert_eq(bound, al(L.stat + n) > raw ? al(L.stat + n) : raw);

			uint8_t *src = tu_xcalloc(n * es), *blk, *out = tu_xcalloc(n * es);
			gen(&r, D_GAUSS, dt, 1.0, src, n);
			/* given table -> the escape count is known independently */
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.table_mode = IBP_EXP_TABLE_GIVEN;
			uint8_t base = dt == IBP_DTYPE_F16 ? 12 : 124;
			for (int k = 0; k < 7; k++)
				o.table.field[k] = (uint8_t)(base + k);
			uint64_t size = round_trip(src, dt, n, &o, &blk);
			uint64_t esc = 0;
			for (uint64_t i = 0; i < n; i++) {
				uint32_t bits = 0;
				memcpy(&bits, src + es * i, es);
				uint32_t f = dt == IBP_DTYPE_F32 ? (bits >> 23) & 255 : dt == IBP_DTYPE_BF16 ? (bits >> 7) & 255 : (bits >> 10) & 31;
				esc += f < base || f >= base + 7u;
			}
			ibp_exp_info_t info;
			cr_assert_eq(ibp_exp_block_info(blk, size, &info), IBP_OK);
			if (!info.raw) {
				cr_assert_eq(info.escapes, esc);
				cr_assert_eq(info.static_bytes, L.stat);
				cr_assert_eq(size, al(L.stat + esc));
				cr_assert_eq(info.block_bytes, size);
				cr_assert_eq(blk[5], (uint8_t)dt);
				cr_assert_eq(blk[6], 1);
				cr_assert_eq(blk[7], IBP_EXP_TABLE_GIVEN);
				cr_assert(memcmp(blk + 16, o.table.field, 7) == 0);
				cr_assert_eq(blk[23], 12);
				doc_decode(blk, dt, n, out);
				cr_assert(memcmp(out, src, n * es) == 0, "documented decoder disagrees: %s n=%llu",
					  ibp_dtype_name(dt), (unsigned long long)n);
			} else {
				cr_assert_eq(size, raw);
				cr_assert(memcmp(blk + 64, src, n * es) == 0);
			}
			free(blk);
			free(out);
			free(src);
		}
	}
}

Test(exp, raw_passthrough_on_uniform_exponents)
{
	tu_rng_t r;
	tu_rng_seed(&r, 5);
	uint64_t n = 100000;
	for (int d = 0; d < DT_COUNT; d++) {
		uint8_t *src = tu_xcalloc(n * 4), *blk;
		gen(&r, D_UNIFORM_EXP, DTS[d], 1.0, src, n);
		for (int mode = 0; mode < 2; mode++) {
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.table_mode = (ibp_exp_table_mode_t)mode;
			uint64_t size = round_trip(src, DTS[d], n, &o, &blk), raw = 0;
			ibp_exp_info_t info;
			cr_assert_eq(ibp_exp_block_info(blk, size, &info), IBP_OK);
			cr_assert_eq(ibp_exp_raw_size(DTS[d], n, &raw), IBP_OK);
			cr_assert(info.raw, "%s: uniform exponents must be stored raw", ibp_dtype_name(DTS[d]));
			cr_assert_eq(size, raw);
			cr_assert_eq(blk[6], 0);
			free(blk);
		}
		free(src);
	}
}

/* ibpi_exp_decode_split (the KV offloader's host loads: K half and V half
 * of a block into their own rows) writes exactly what ibp_exp_decode
 * writes, cut at the split, for coded and raw blocks, every dtype, on the
 * AVX2 and the portable loops; a split that is no multiple of 64 or a
 * missing second destination is refused; damaged blocks stay errors. */
Test(exp, split_decode_equals_whole)
{
	tu_rng_t r;
	tu_rng_seed(&r, 77);
	const uint64_t ns[] = { 64, 128, 4096, 12288, 12288 + 17, 3 * 4096 + 100 };
	for (int portable = 0; portable < 2; portable++) {
		setenv("IBP_FORCE_PORTABLE", portable ? "1" : "0", 1);
		for (int d = 0; d < DT_COUNT; d++)
			for (int dist = 0; dist < 2; dist++)
				for (unsigned i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
					const uint64_t n = ns[i];
					const size_t es = esize_of(DTS[d]);
					uint8_t *src = tu_xcalloc(n * es), *blk = NULL;
					gen(&r, dist ? D_UNIFORM_EXP : D_GAUSS, DTS[d], 1.0, src, n);
					uint64_t size = round_trip(src, DTS[d], n, NULL, &blk);
					const uint64_t splits[] = { 0, 64, n / 2 / 64 * 64, (n - 1) / 64 * 64, n, n + 64 };
					for (unsigned k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) {
						const uint64_t sp = splits[k], n0 = sp < n ? sp : n;
						uint8_t *a = tu_xcalloc(n * es + 1), *b = tu_xcalloc(n * es + 1);
						memset(a, 0xA5, n * es + 1), memset(b, 0x5A, n * es + 1);
						cr_assert_eq(ibpi_exp_decode_split(blk, size, DTS[d], n, a, sp, b), IBP_OK,
							     "%s n=%llu split %llu: %s", ibp_dtype_name(DTS[d]),
							     (unsigned long long)n, (unsigned long long)sp, ibp_last_error());
						cr_assert(memcmp(a, src, n0 * es) == 0 && memcmp(b, src + n0 * es, (n - n0) * es) == 0,
							  "%s n=%llu split %llu differs", ibp_dtype_name(DTS[d]),
							  (unsigned long long)n, (unsigned long long)sp);
						cr_assert(a[n0 * es] == 0xA5 && b[(n - n0) * es] == 0x5A,
							  "split %llu wrote past a destination", (unsigned long long)sp);
						free(a);
						free(b);
					}
					uint8_t *a = tu_xcalloc(n * es), *b = tu_xcalloc(n * es);
					if (n > 65) /* splits at or past n put everything in the first */
						cr_assert_eq(ibpi_exp_decode_split(blk, size, DTS[d], n, a, 65, b),
							     IBP_ERR_INVALID_ARG);
					cr_assert_eq(ibpi_exp_decode_split(blk, size, DTS[d], n, a, 0, NULL), IBP_ERR_INVALID_ARG);
					cr_assert_neq(ibpi_exp_decode_split(blk, size - 128, DTS[d], n, a, 64, b), IBP_OK);
					cr_assert_neq(ibpi_exp_decode_split(blk, size, DTS[d], n + 1, a, 64, b), IBP_OK);
					free(a);
					free(b);
					free(blk);
					free(src);
				}
	}
	unsetenv("IBP_FORCE_PORTABLE");
}

/* ibpi_exp_encode_split (the KV offloader's host stores: a block's K row
 * and V row encoded where they lie) writes exactly the bytes
 * ibp_exp_encode writes for the two parts side by side: coded and raw
 * blocks, sigma and given tables, with and without prefetching and a
 * checksum, every dtype, on the AVX-512, AVX2 and portable loops; tables
 * that need the elements first, bad splits, an isa outside 0..2 and short
 * buffers are refused. */
Test(exp, split_encode_equals_whole)
{
	tu_rng_t r;
	tu_rng_seed(&r, 78);
	const uint64_t ns[] = { 1, 64, 130, 4096, 12288, 12288 + 17, 3 * 4096 + 100 };
	for (int portable = 0; portable < 2; portable++) {
		setenv("IBP_FORCE_PORTABLE", portable ? "1" : "0", 1);
		const int isa = ibpi_exp_isa(); /* what ibp_exp_encode below reads too */
		cr_assert(portable ? isa == 0 : isa >= 0 && isa <= 2);
		for (int d = 0; d < DT_COUNT; d++)
			for (int dist = 0; dist < 2; dist++)
				for (unsigned i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
					const ibp_dtype_t dt = DTS[d];
					const uint64_t n = ns[i];
					const size_t es = esize_of(dt);
					uint8_t *src = tu_xcalloc(n * es);
					gen(&r, dist ? D_UNIFORM_EXP : D_GAUSS, dt, 1.0, src, n);
					uint64_t cap = 0;
					cr_assert_eq(ibp_exp_encode_bound(dt, n, &cap), IBP_OK);
					uint8_t *want = tu_xcalloc(cap), *got = tu_xcalloc(cap);
					ibp_exp_opts_t o;
					ibp_exp_opts_default(&o);
					o.nthreads = 1;
					o.sigma = 0.7 + 0.1 * (double)i;
					if (i % 3 == 2) { /* a given table */
						o.table_mode = IBP_EXP_TABLE_GIVEN;
						cr_assert_eq(ibp_exp_table_from_sigma(dt, 1.0, &o.table), IBP_OK);
					}
					o.checksum = (int)(i % 2);
					uint64_t wsize = 0;
					cr_assert_eq(ibp_exp_encode(src, dt, n, &o, want, cap, &wsize), IBP_OK);
					const uint64_t splits[] = { 0, 64, n / 2 / 64 * 64, (n - 1) / 64 * 64, n, n + 64 };
					for (unsigned k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) {
						const uint64_t sp = splits[k], n0 = sp < n ? sp : n;
						/* the parts in buffers of their own, so a read across the cut is an ASan error */
						uint8_t *a = tu_xcalloc(n0 * es + 1), *b = tu_xcalloc((n - n0) * es + 1);
						memcpy(a, src, n0 * es), memcpy(b, src + n0 * es, (n - n0) * es);
						for (int pf = 0; pf < 2; pf++) {
							uint64_t gsize = 0;
							memset(got, 0xEE, cap);
							cr_assert_eq(ibpi_exp_encode_split(a, sp, b, dt, n, &o, pf, isa,
												   got, cap,
											   &gsize),
								     IBP_OK, "%s n=%llu split %llu: %s", ibp_dtype_name(dt),
								     (unsigned long long)n, (unsigned long long)sp, ibp_last_error());
							cr_assert(gsize == wsize && memcmp(got, want, wsize) == 0,
								  "%s n=%llu split %llu prefetch %d: %llu bytes against %llu, or "
								  "others", ibp_dtype_name(dt), (unsigned long long)n,
								  (unsigned long long)sp, pf, (unsigned long long)gsize,
								  (unsigned long long)wsize);
						}
						free(a);
						free(b);
					}
					uint64_t sz = 0;
					if (n > 65)
						cr_assert_eq(ibpi_exp_encode_split(src, 65, src + 65 * es, dt, n, &o, 0,
										   isa, got, cap, &sz),
							     IBP_ERR_INVALID_ARG, "a split inside a word");
					cr_assert_eq(ibpi_exp_encode_split(src, 0, NULL, dt, n, &o, 0, isa,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "no second part");
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &o, 0, isa,
										   got, cap - 1, &sz),
						     IBP_ERR_BUFFER_TOO_SMALL);
					ibp_exp_opts_t m = o;
					m.table_mode = IBP_EXP_TABLE_SIGMA, m.sigma = 0.0;
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &m, 0, isa,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "sigma measured from the elements");
					m.table_mode = IBP_EXP_TABLE_HISTOGRAM;
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &m, 0, isa,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "a histogram of the elements");
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &o, 0, -1,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "isa -1");
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &o, 0, 3,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "isa 3");
					m.table_mode = IBP_EXP_TABLE_RANS;
					cr_assert_eq(ibpi_exp_encode_split(src, n, NULL, dt, n, &m, 0, isa,
										   got, cap, &sz),
						     IBP_ERR_INVALID_ARG, "rANS");
					free(want);
					free(got);
					free(src);
				}
	}
	unsetenv("IBP_FORCE_PORTABLE");
}

/* ------------------------------------------------------------- checksums */

/* A checksummed block: every bit of the header and 1000 random payload
 * bits, flipped one at a time, and every truncation, are refused
 * (IBP_ERR_CHECKSUM or IBP_ERR_CORRUPT); IBP_EXP_TRUSTED skips only the
 * checksum; the same block without one, or in the version-1 format,
 * decodes to the same values. */
Test(exp, checksum_rejects_every_flip)
{
	tu_rng_t r;
	tu_rng_seed(&r, 61);
	for (int d = 0; d < DT_COUNT; d++) {
		ibp_dtype_t dt = DTS[d];
		const uint64_t n = 5000;
		size_t es = esize_of(dt);
		uint8_t *src = tu_xcalloc(n * es), *blk, *plain, *out = tu_xcalloc(n * es);
		gen(&r, D_GAUSS, dt, 0.02, src, n);
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		cr_assert_eq(o.checksum, 1, "checksums are the default");
		uint64_t size = round_trip(src, dt, n, &o, &blk);
		o.checksum = 0;
		uint64_t psize = round_trip(src, dt, n, &o, &plain);
		cr_assert_eq(size, psize, "a checksum costs no bytes (reserved header space)");
		cr_assert_eq(blk[4], 2, "version 2");
		cr_assert_eq(blk[48], 1, "the checksum flag");
		cr_assert_eq(plain[48], 0);
		cr_assert(memcmp(blk + 64, plain + 64, size - 64) == 0 && memcmp(blk, plain, 48) == 0);
		uint8_t *c = tu_xcalloc(size);
		for (uint64_t k = 0; k < 64 * 8 + 1000; k++) {
			uint64_t bitpos = k < 64 * 8 ? k : 64 * 8 + tu_below(&r, (size - 64) * 8);
			memcpy(c, blk, size);
			c[bitpos / 8] ^= (uint8_t)(1u << (bitpos % 8));
			ibp_status_t st = ibp_exp_decode(c, size, dt, n, out, 1);
			cr_assert(st == IBP_ERR_CHECKSUM || st == IBP_ERR_CORRUPT, "%s: bit %llu flipped: status %d",
				  ibp_dtype_name(dt), (unsigned long long)bitpos, st);
		}
		for (uint64_t len = 0; len < size; len++)
			cr_assert_neq(ibp_exp_decode(blk, len, dt, n, out, 1), IBP_OK, "truncated to %llu",
				      (unsigned long long)len);
		/* a sign+mantissa bit flipped is structurally fine: only the
		 * checksum catches it, and TRUSTED skips exactly that */
		ibp_exp_info_t info;
		cr_assert_eq(ibp_exp_block_info(blk, size, &info), IBP_OK);
		memcpy(c, blk, size);
		c[info.raw ? 64 : doc_layout(dt, n).off_lo] ^= 1;
		cr_assert_eq(ibp_exp_decode(c, size, dt, n, out, 1), IBP_ERR_CHECKSUM);
		cr_assert_eq(ibp_exp_decode_ext(c, size, dt, n, out, 1, IBP_EXP_TRUSTED), IBP_OK);
		memset(out, 0, n * es);
		cr_assert_eq(ibp_exp_decode_ext(blk, size, dt, n, out, 1, IBP_EXP_TRUSTED), IBP_OK);
		cr_assert(memcmp(out, src, n * es) == 0);
		cr_assert_eq(ibp_exp_decode_ext(blk, size, dt, n, out, 1, 2u), IBP_ERR_INVALID_ARG);
		/* the old format: no flags byte, no sum, version 1 */
		plain[4] = 1;
		memset(out, 0, n * es);
		cr_assert_eq(ibp_exp_decode(plain, size, dt, n, out, 1), IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(out, src, n * es) == 0, "a version-1 block decodes as before");
		uint64_t offs[2] = { 0, size };
		memset(out, 0, n * es);
		cr_assert_eq(ibp_exp_decode_batch(blk, size, offs, dt, n, n, out, 1), IBP_OK);
		cr_assert(memcmp(out, src, n * es) == 0);
		cr_assert_eq(ibp_exp_decode_batch(c, size, offs, dt, n, n, out, 1), IBP_ERR_CHECKSUM);
		cr_assert_eq(ibp_exp_decode_batch_ext(c, size, offs, dt, n, n, out, 1, IBP_EXP_TRUSTED), IBP_OK);
		free(c);
		free(blk);
		free(plain);
		free(out);
		free(src);
	}
}

/* ------------------------------------------------------------- corruption */

static ibp_status_t dec(const uint8_t *blk, uint64_t size, ibp_dtype_t dt, uint64_t n, uint8_t *out)
{
	return ibp_exp_decode(blk, size, dt, n, out, 1);
}

Test(exp, corrupt_blocks_rejected)
{
	tu_rng_t r;
	tu_rng_seed(&r, 6);
	for (int d = 0; d < DT_COUNT; d++) {
		ibp_dtype_t dt = DTS[d];
		uint64_t n = 9000; /* 3 groups, last partial */
		size_t es = esize_of(dt);
		uint8_t *src = tu_xcalloc(n * es), *blk, *out = tu_xcalloc(n * es);
		gen(&r, D_GAUSS, dt, 0.02, src, n);
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.checksum = 0; /* the structure's own checks (the checksum's: checksum_rejects_every_flip) */
		uint64_t size = round_trip(src, dt, n, &o, &blk);
		ibp_exp_info_t info;
		cr_assert_eq(ibp_exp_block_info(blk, size, &info), IBP_OK);
		cr_assert(!info.raw && info.escapes > 0);
		doc_layout_t L = doc_layout(dt, n);
		uint8_t *c = tu_xcalloc(size);
#define MUTATE(stmt, what)                                                                      \
	do {                                                                                    \
		memcpy(c, blk, size);                                                           \
		stmt;                                                                           \
		cr_assert_eq(dec(c, size, dt, n, out), IBP_ERR_CORRUPT, "%s: %s accepted", ibp_dtype_name(dt), what); \
	} while (0)
		MUTATE(c[0] ^= 1, "magic");
		MUTATE(c[4] = 3, "version");
		MUTATE(c[4] = 0, "version 0");
		MUTATE(c[5] = (uint8_t)(dt == IBP_DTYPE_F32 ? IBP_DTYPE_BF16 : IBP_DTYPE_F32), "dtype");
		MUTATE(c[6] = 2, "mode");
		MUTATE(c[7] = 3, "table source");
		MUTATE(c[8] ^= 1, "element count");
		MUTATE(c[16] = c[17], "table not ascending");
		if (dt == IBP_DTYPE_F16)
			MUTATE(c[22] = 32, "table field > fmax");
		MUTATE(c[23] = 11, "group log2");
		MUTATE(c[24] ^= 1, "escape total");
		MUTATE(c[32] ^= 128, "block size");
		MUTATE(c[40] ^= 128, "static size");
		MUTATE(c[50] = 1, "reserved");
		MUTATE(c[48] = 2, "unknown flag");
		MUTATE(c[60] = 1, "a sum without the checksum flag");
		MUTATE((c[4] = 1, c[48] = 1), "a flag in version 1");
		MUTATE(c[64] = 1, "first prefix not 0");
		MUTATE(c[64 + 8] ^= 1, "second prefix");
		MUTATE(c[64 + 8 * L.ngroups] = 1, "padding after prefixes");
		MUTATE(c[L.off_planes + (n - 1) / 8 + 1] = 0x80, "plane bits past n");
		MUTATE(c[L.off_planes + L.plane_bytes - 1] = 1, "plane padding");
		MUTATE(c[L.off_lo - 1] = 1, "padding before sign+mantissa");
		MUTATE(c[L.stat - 1] = 1, "static padding");
		if ((L.stat + info.escapes) % 128)
			MUTATE(c[size - 1] = 1, "padding after escapes");
		MUTATE(c[L.stat] = c[16], "escape equal to a table entry");
		if (dt == IBP_DTYPE_F16)
			MUTATE(c[L.stat] = 40, "FP16 escape > 31");
		/* turn an escape into a coded element: counts disagree */
		memcpy(c, blk, size);
		for (uint64_t i = 0; i < n; i++) {
			const uint8_t *pl = c + L.off_planes;
			if (!bit(pl, i) && !bit(pl + L.plane_bytes, i) && !bit(pl + 2 * L.plane_bytes, i)) {
				c[L.off_planes + i / 8] |= (uint8_t)(1u << (i % 8));
				break;
			}
		}
		cr_assert_eq(dec(c, size, dt, n, out), IBP_ERR_CORRUPT, "zero codes != escapes accepted");
		/* and a coded element into an escape */
		memcpy(c, blk, size);
		for (uint64_t i = 0; i < n; i++) {
			uint8_t *pl = c + L.off_planes;
			if (bit(pl, i) && !bit(pl + L.plane_bytes, i) && !bit(pl + 2 * L.plane_bytes, i)) {
				pl[i / 8] &= (uint8_t)~(1u << (i % 8));
				break;
			}
		}
		cr_assert_eq(dec(c, size, dt, n, out), IBP_ERR_CORRUPT, "extra zero code accepted");
		/* truncated input, wrong expectations */
		cr_assert_eq(dec(blk, size - 1, dt, n, out), IBP_ERR_CORRUPT);
		cr_assert_eq(dec(blk, 63, dt, n, out), IBP_ERR_CORRUPT);
		cr_assert_eq(dec(blk, size, dt, n - 1, out), IBP_ERR_CORRUPT);
		/* random single-byte damage anywhere: OK or CORRUPT (CHECKSUM when
		 * the damage sets the checksum flag), never a crash */
		for (int it = 0; it < 2000; it++) {
			memcpy(c, blk, size);
			c[tu_below(&r, size)] ^= (uint8_t)(1u + tu_below(&r, 255));
			ibp_status_t st = dec(c, size, dt, n, out);
			cr_assert(st == IBP_OK || st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM);
		}
#undef MUTATE
		free(c);
		free(blk);
		free(out);
		free(src);
	}
	/* raw blocks: nonzero padding, bad fields */
	uint16_t v[3] = {1, 2, 3};
	uint8_t blk[1024], out[8];
	uint64_t size = 0;
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.checksum = 0; /* the raw frame's own checks */
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_BF16, 3, &o, blk, sizeof(blk), &size), IBP_OK);
	cr_assert_eq(size, 128);
	cr_assert_eq(blk[6], 0);
	blk[127] = 1;
	cr_assert_eq(dec(blk, size, IBP_DTYPE_BF16, 3, out), IBP_ERR_CORRUPT);
	blk[127] = 0;
	blk[16] = 1;
	cr_assert_eq(dec(blk, size, IBP_DTYPE_BF16, 3, out), IBP_ERR_CORRUPT);
	blk[16] = 0;
	cr_assert_eq(dec(blk, size, IBP_DTYPE_BF16, 3, out), IBP_OK);
	cr_assert(memcmp(out, v, 6) == 0);
}

Test(exp, api_errors)
{
	uint8_t buf[4096];
	uint64_t size = 0, b = 0;
	uint16_t v[4] = {0};
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_I16, 4, &o, buf, sizeof(buf), &size), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_exp_encode_bound(IBP_DTYPE_BF16, 4, &b), IBP_OK);
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_BF16, 4, &o, buf, b - 1, &size), IBP_ERR_BUFFER_TOO_SMALL);
	o.table_mode = IBP_EXP_TABLE_GIVEN;
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_BF16, 4, &o, buf, sizeof(buf), &size), IBP_ERR_INVALID_ARG);
	for (int k = 0; k < 7; k++)
		o.table.field[k] = (uint8_t)(26 + k);
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_F16, 4, &o, buf, sizeof(buf), &size), IBP_ERR_INVALID_ARG,
		     "FP16 fields stop at 31");
	o.table_mode = (ibp_exp_table_mode_t)7;
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_BF16, 4, &o, buf, sizeof(buf), &size), IBP_ERR_INVALID_ARG);
	ibp_exp_opts_default(&o);
	o.sigma = -1.0;
	cr_assert_eq(ibp_exp_encode(v, IBP_DTYPE_BF16, 4, &o, buf, sizeof(buf), &size), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_exp_static_size(IBP_DTYPE_BF16, IBP_EXP_MAX_ELEMS + 1, &b), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_exp_decode(buf, 10, IBP_DTYPE_BF16, 4, v, -1), IBP_ERR_INVALID_ARG);
	ibp_exp_table_t t;
	cr_assert_eq(ibp_exp_table_from_sigma(IBP_DTYPE_BF16, NAN, &t), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_exp_table_from_sigma(IBP_DTYPE_BF16, 0.0, &t), IBP_OK);
	cr_assert_eq(t.field[0], 0, "sigma 0: the lowest window");
	cr_assert_eq(ibp_exp_table_from_sigma(IBP_DTYPE_BF16, 1e300, &t), IBP_OK);
	cr_assert_eq(t.field[6], 254, "huge sigma: the highest window below Inf/NaN");
	cr_assert_eq(ibp_exp_table_from_sigma(IBP_DTYPE_F16, 1e300, &t), IBP_OK);
	cr_assert_eq(t.field[6], 30);
}

/* ------------------------------------------------------------------ batch */

Test(exp, batch_equals_single_blocks)
{
	tu_rng_t r;
	tu_rng_seed(&r, 7);
	uint64_t n = 50000, chunk = 12000;
	for (int d = 0; d < DT_COUNT; d++) {
		ibp_dtype_t dt = DTS[d];
		size_t es = esize_of(dt);
		uint8_t *src = tu_xcalloc(n * es), *out = tu_xcalloc(n * es);
		gen(&r, D_GAUSS, dt, 0.1, src, n);
		/* one chunk of raw-looking data so batches mix modes */
		gen(&r, D_UNIFORM_EXP, dt, 1.0, src + 2 * chunk * es, chunk);
		uint64_t cap = 0;
		cr_assert_eq(ibp_exp_batch_bound(dt, n, chunk, &cap), IBP_OK);
		uint8_t *dst = tu_xcalloc(cap);
		uint64_t off[6];
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.table_mode = IBP_EXP_TABLE_HISTOGRAM;
		cr_assert_eq(ibp_exp_encode_batch(src, dt, n, chunk, &o, dst, cap, off), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(off[0], 0);
		for (int i = 0; i < 5; i++) {
			uint64_t len = n - i * chunk < chunk ? n - i * chunk : chunk, size = 0;
			uint8_t *one;
			size = round_trip(src + i * chunk * es, dt, len, &o, &one);
			cr_assert_eq(off[i + 1] - off[i], size);
			cr_assert(memcmp(dst + off[i], one, size) == 0, "chunk %d differs", i);
			free(one);
		}
		ibp_exp_info_t info;
		cr_assert_eq(ibp_exp_block_info(dst + off[2], off[3] - off[2], &info), IBP_OK);
		cr_assert(info.raw);
		cr_assert_eq(ibp_exp_decode_batch(dst, off[5], off, dt, n, chunk, out, 0), IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(src, out, n * es) == 0);
		uint64_t bad[6];
		memcpy(bad, off, sizeof(bad));
		bad[3] = off[5] + 1;
		cr_assert_eq(ibp_exp_decode_batch(dst, off[5], bad, dt, n, chunk, out, 0), IBP_ERR_CORRUPT);
		free(dst);
		free(out);
		free(src);
	}
}

/* --------------------------------------------------------- sigma and ratio */

/* Mean square by the documented order, written level by level. */
static double doc_mean_square(const uint16_t *x, uint64_t n)
{
	uint64_t ng = (n + 4095) / 4096, finite = 0;
	double *part = tu_xcalloc((ng ? ng : 1) * sizeof(double));
	for (uint64_t g = 0; g < ng; g++) {
		double acc[256] = {0};
		for (uint64_t k = 0; k < 16; k++)
			for (uint64_t t = 0; t < 256; t++) {
				uint64_t i = g * 4096 + k * 256 + t;
				if (i >= n || ((x[i] >> 7) & 255) == 255)
					continue;
				finite++;
				double v = fp8i_bf16_to_f32(x[i]);
				acc[t] += v * v;
			}
		for (int h = 128; h >= 1; h /= 2)
			for (int t = 0; t < h; t++)
				acc[t] += acc[t + h];
		part[g] = acc[0];
	}
	for (uint64_t s = 1; s < ng; s *= 2)
		for (uint64_t i = 0; i + s < ng; i += 2 * s)
			part[i] += part[i + s];
	double r = ng && finite ? part[0] / (double)finite : 0.0;
	free(part);
	return r;
}

Test(exp, mean_square_order_is_the_documented_one)
{
	static const uint64_t sizes[] = {1, 255, 4096, 4097, 3 * 4096 + 5, 7 * 4096, 13 * 4096 + 4095, 200000};
	tu_rng_t r;
	tu_rng_seed(&r, 8);
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint64_t n = sizes[si];
		uint16_t *x = tu_xcalloc(n * 2);
		gen(&r, D_SPECIAL, IBP_DTYPE_BF16, 3.0, (uint8_t *)x, n);
		for (int portable = 0; portable < 2; portable++) {
			if (portable)
				setenv("IBP_FORCE_PORTABLE", "1", 1);
			double ms = -1;
			cr_assert_eq(ibp_exp_mean_square(x, IBP_DTYPE_BF16, n, &ms), IBP_OK);
			double ref = doc_mean_square(x, n);
			cr_assert(memcmp(&ms, &ref, 8) == 0, "n=%llu: %.17g vs documented %.17g", (unsigned long long)n, ms, ref);
			unsetenv("IBP_FORCE_PORTABLE");
		}
		free(x);
	}
}

/* Exact Gaussian coverage of the 7 exponents x .. x+6 (|v| in [2^x, 2^(x+7))). */
static double p_win(int x, double sigma)
{
	return erf(ldexp(1.0, x + 7) / (sigma * sqrt(2.0))) - erf(ldexp(1.0, x) / (sigma * sqrt(2.0)));
}

/* §4.1 check, part 1: the window start the library derives from sigma is
 * the integer maximising the exact coverage, for 1200 sigmas over 10
 * octaves; the continuous optimum log2(sigma) - 5.36 lies inside that
 * window's start +- 1. */
Test(exp, sigma_window_is_the_coverage_maximum)
{
	for (int i = 0; i <= 1200; i++) {
		double l = -12.0 + i / 100.0, sigma = exp2(l);
		ibp_exp_table_t t;
		cr_assert_eq(ibp_exp_table_from_sigma(IBP_DTYPE_BF16, sigma, &t), IBP_OK);
		int start = (int)t.field[0] - 127, best = start;
		for (int x = start - 3; x <= start + 3; x++)
			if (p_win(x, sigma) > p_win(best, sigma) + 1e-12)
				best = x;
		cr_assert_eq(best, start, "log2 sigma %.2f: derived %d, best %d", l, start, best);
		double xc = l + 0.5 * log2(14.0 * log(2.0) / 16383.0);
		cr_assert(fabs(xc - start) <= 1.0, "continuous optimum %.3f vs %d", xc, start);
		for (int k = 0; k < 7; k++)
			cr_assert_eq(t.field[k], t.field[0] + k);
	}
}

/* §4.1 check, part 2: against histograms of real BF16 samples, the sigma
 * window covers within 0.5% of the best 7-window and of the exact top-7,
 * for sigma from 1e-4 to 10. */
Test(exp, sigma_window_against_histograms)
{
	tu_rng_t r;
	tu_rng_seed(&r, 9);
	uint64_t n = 200000;
	uint16_t *x = tu_xcalloc(n * 2);
	for (double l = -13.3; l <= 3.4; l += 0.37) {
		double sigma = exp2(l);
		gen(&r, D_GAUSS, IBP_DTYPE_BF16, sigma, (uint8_t *)x, n);
		uint64_t h[256];
		cr_assert_eq(ibp_exp_histogram(x, IBP_DTYPE_BF16, n, h), IBP_OK);
		double ms = 0;
		cr_assert_eq(ibp_exp_mean_square(x, IBP_DTYPE_BF16, n, &ms), IBP_OK);
		ibp_exp_table_t ts, th;
		cr_assert_eq(ibp_exp_table_from_mean_square(IBP_DTYPE_BF16, ms, &ts), IBP_OK);
		cr_assert_eq(ibp_exp_table_from_histogram(IBP_DTYPE_BF16, h, &th), IBP_OK);
		uint64_t cs = 0, ch = 0, best = 0;
		for (int k = 0; k < 7; k++) {
			cs += h[ts.field[k]];
			ch += h[th.field[k]];
		}
		for (int s = 0; s + 7 <= 255; s++) {
			uint64_t c = 0;
			for (int k = 0; k < 7; k++)
				c += h[s + k];
			best = c > best ? c : best;
		}
		cr_assert(ch >= best, "top-7 covers at least the best window");
		cr_assert((double)cs >= (double)best - 0.005 * n, "sigma %.3g: window %llu vs best %llu", sigma,
			  (unsigned long long)cs, (unsigned long long)best);
		cr_assert((double)cs >= (double)ch - 0.005 * n);
		cr_assert((double)cs / n > 0.965, "sigma %.3g: coverage %.4f", sigma, (double)cs / n);
	}
	free(x);
}

/* The target, a property of the format on deterministic data. */
Test(exp, bf16_gaussian_ratio_at_least_1_40)
{
	static const double sig[] = {1e-3, 1e-2, 1e-1, 1.0};
	uint64_t n = 1u << 20;
	tu_rng_t r;
	tu_rng_seed(&r, 10);
	uint8_t *x = tu_xcalloc(n * 2);
	for (int i = 0; i < 4; i++) {
		gen(&r, D_GAUSS, IBP_DTYPE_BF16, sig[i], x, n);
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		uint64_t size = round_trip(x, IBP_DTYPE_BF16, n, &o, NULL);
		double ratio = (double)(2 * n) / (double)size;
		cr_assert(ratio >= 1.40, "sigma %g: ratio %.4f < 1.40", sig[i], ratio);
		o.table_mode = IBP_EXP_TABLE_HISTOGRAM;
		size = round_trip(x, IBP_DTYPE_BF16, n, &o, NULL);
		cr_assert((double)(2 * n) / (double)size >= 1.40);
	}
	free(x);
}
