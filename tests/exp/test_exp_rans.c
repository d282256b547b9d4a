/* test_exp_rans.c - the exponent codec's rANS mode (IBP_EXP_TABLE_RANS,
 * block mode 2): byte-exact round trips on every dtype and special value,
 * blocks equal to an independent encoder written from docs/CODECS.md, a
 * known small block, the per-block choice against HISTOGRAM and raw,
 * damaged and truncated blocks, split decodes, the ratio target, and the
 * older modes still decoding beside it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "exp/exp_split.h"
#include "fp8/fp8_impl.h"
#include "testutil.h"

static const ibp_dtype_t DTS[3] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};

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

enum { G_GAUSS, G_SPECIAL, G_RANDOM, G_CONST, G_COUNT };

/* G_SPECIAL: +-0, subnormals, +-Inf, NaNs with any payload, the largest
 * finite values, among Gaussian values. */
static void gen(tu_rng_t *r, int kind, ibp_dtype_t dt, uint8_t *p, uint64_t n)
{
	size_t es = esize_of(dt);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t pick = tu_below(r, 10);
		uint32_t rnd = (uint32_t)tu_next(r), u;
		if (kind == G_GAUSS || (kind == G_SPECIAL && pick < 4)) {
			put_value(p, dt, i, (float)(tu_gauss(r) * 0.02));
			continue;
		}
		if (kind == G_RANDOM) {
			memcpy(p + es * i, &rnd, es);
			continue;
		}
		if (kind == G_CONST) {
			put_value(p, dt, i, 1.5f);
			continue;
		}
		if (dt == IBP_DTYPE_F32) {
			static const uint32_t sp[6] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
						       0x00000001u};
			u = pick < 6 ? sp[rnd % 6] : pick < 8 ? (rnd & 0x807fffffu) : (0x7f800001u | (rnd & 0x807fffffu));
			memcpy(p + 4 * i, &u, 4);
		} else {
			uint32_t ef = dt == IBP_DTYPE_BF16 ? 0x7f80u : 0x7c00u, mm = dt == IBP_DTYPE_BF16 ? 0x7fu : 0x3ffu;
			uint16_t sp[6] = {0x0000u, 0x8000u, (uint16_t)ef, (uint16_t)(0x8000u | ef), (uint16_t)(ef - 1u),
					  0x0001u};
			uint16_t h = pick < 6 ? sp[rnd % 6]
				   : pick < 8 ? (uint16_t)(rnd & (0x8000u | mm))
					      : (uint16_t)(ef | 1u | (rnd & (0x8000u | mm)));
			memcpy(p + 2 * i, &h, 2);
		}
	}
}

static void rans_opts(ibp_exp_opts_t *o, int nthreads, int checksum)
{
	ibp_exp_opts_default(o);
	o->table_mode = IBP_EXP_TABLE_RANS;
	o->nthreads = nthreads;
	o->checksum = checksum;
}

/* Encodes, decodes (and checks bytes); returns the block (caller frees). */
static uint8_t *round_trip(const uint8_t *src, ibp_dtype_t dt, uint64_t n, const ibp_exp_opts_t *o, uint64_t *size)
{
	uint64_t cap = 0;
	size_t es = esize_of(dt);
	cr_assert_eq(ibp_exp_encode_bound(dt, n, &cap), IBP_OK);
	uint8_t *blk = tu_xcalloc(cap + 1);
	uint8_t *out = tu_xcalloc(n * es + 1);
	cr_assert_eq(ibp_exp_encode(src, dt, n, o, blk, cap, size), IBP_OK, "encode: %s", ibp_last_error());
	cr_assert(*size <= cap && *size % 128 == 0);
	cr_assert_eq(ibp_exp_decode(blk, *size, dt, n, out, o->nthreads), IBP_OK, "decode %s n=%llu: %s",
		     ibp_dtype_name(dt), (unsigned long long)n, ibp_last_error());
	cr_assert(memcmp(src, out, n * es) == 0, "round trip differs: %s n=%llu", ibp_dtype_name(dt),
		  (unsigned long long)n);
	free(out);
	return blk;
}

/* ------------------------------------------- independent reference encoder
 * From docs/CODECS.md ("rANS blocks"), with plain division: the block the
 * library must write for these frequencies. */
static uint64_t al(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static uint32_t ref_sym(uint32_t b, ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F16 ? b >> 8 : dt == IBP_DTYPE_BF16 ? (b >> 7) & 0xff : (b >> 23) & 0xff;
}

static uint64_t ref_block(const uint8_t *src, ibp_dtype_t dt, uint64_t n, const uint16_t *freq, uint8_t *out)
{
	size_t es = esize_of(dt);
	uint32_t rb = dt == IBP_DTYPE_F32 ? 3 : 1, cum[256], nsym = 0;
	for (uint32_t k = 0, c = 0; k < 256; k++) {
		cum[k] = c;
		c += freq[k];
		nsym += freq[k] != 0;
	}
	uint64_t nseg = (n + 65535) / 65536;
	uint64_t off_dir = al(96 + 2 * nsym, 8), off_rest = al(off_dir + 40 * nseg, 128);
	uint64_t stat = al(off_rest + n * rb, 128);
	uint8_t *streams = tu_xcalloc(4 * n + 64 * nseg + 16);
	memset(out + off_dir, 0, 40 * nseg);
	uint64_t at = 0;
	uint8_t *lane = tu_xcalloc(2 * 65536 + 16);
	for (uint64_t g = 0; g < nseg; g++) {
		uint64_t m = n - g * 65536 < 65536 ? n - g * 65536 : 65536;
		for (uint32_t j = 0; j < 16; j++) {
			uint64_t x = 65536, len = 0, at0 = at; /* words, pushed in encode order */
			uint64_t last = j < m ? j + (m - 1 - j) / 16 * 16 : 0;
			for (uint64_t i = last + 16; j < m && i >= j + 16; i -= 16) {
				uint32_t b = 0;
				memcpy(&b, src + (g * 65536 + i - 16) * es, es);
				uint32_t s = ref_sym(b, dt), f = freq[s];
				if (x >= ((uint64_t)f << 20)) {
					lane[len++] = (uint8_t)x;
					lane[len++] = (uint8_t)(x >> 8);
					x >>= 16;
				}
				x = (x / f) * 4096 + x % f + cum[s];
			}
			for (int b = 0; b < 4; b++)
				streams[at++] = (uint8_t)(x >> (8 * b));
			for (uint64_t w = len; w >= 2; w -= 2) { /* last pushed word first */
				streams[at++] = lane[w - 2];
				streams[at++] = lane[w - 1];
			}
			out[off_dir + 40 * g + 8 + 2 * j] = (uint8_t)(at - at0);
			out[off_dir + 40 * g + 9 + 2 * j] = (uint8_t)((at - at0) >> 8);
		}
		for (int b = 0; b < 8; b++)
			out[off_dir + 40 * g + b] = (uint8_t)(at >> (8 * b));
	}
	uint64_t block = al(stat + at, 128);
	memset(out, 0, 96);
	memcpy(out, "IBPE", 4);
	out[4] = 2;
	out[5] = (uint8_t)dt;
	out[6] = 2;
	out[7] = 3;
	for (int b = 0; b < 8; b++) {
		out[8 + b] = (uint8_t)(n >> (8 * b));
		out[24 + b] = (uint8_t)(at >> (8 * b));
		out[32 + b] = (uint8_t)(block >> (8 * b));
		out[40 + b] = (uint8_t)(stat >> (8 * b));
	}
	out[16] = 4;
	out[17] = 12;
	out[23] = 12;
	uint64_t fa = 96;
	for (uint32_t k = 0; k < 256; k++)
		if (freq[k]) {
			out[64 + k / 8] |= (uint8_t)(1u << (k % 8));
			out[fa++] = (uint8_t)freq[k];
			out[fa++] = (uint8_t)(freq[k] >> 8);
		}
	memset(out + fa, 0, off_dir - fa);
	memset(out + off_dir + 40 * nseg, 0, off_rest - off_dir - 40 * nseg);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t b = 0, r;
		memcpy(&b, src + i * es, es);
		r = dt == IBP_DTYPE_F16 ? b & 0xff : dt == IBP_DTYPE_BF16 ? ((b >> 8) & 0x80) | (b & 0x7f)
									: ((b >> 31) << 23) | (b & 0x7fffff);
		for (uint32_t k = 0; k < rb; k++)
			out[off_rest + rb * i + k] = (uint8_t)(r >> (8 * k));
	}
	memset(out + off_rest + n * rb, 0, stat - off_rest - n * rb);
	memcpy(out + stat, streams, at);
	memset(out + stat + at, 0, block - stat - at);
	free(lane);
	free(streams);
	return block;
}

/* The frequencies a block's header holds. */
static void block_freqs(const uint8_t *blk, uint16_t *freq)
{
	uint32_t a = 96;
	for (uint32_t k = 0; k < 256; k++) {
		freq[k] = 0;
		if ((blk[64 + k / 8] >> (k % 8)) & 1) {
			freq[k] = (uint16_t)(blk[a] | blk[a + 1] << 8);
			a += 2;
		}
	}
}

/* ------------------------------------------------------------------ tests */

Test(exp_rans, round_trips_every_dtype_and_special_value)
{
	static const uint64_t sizes[] = {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096, 65535, 65536, 65537, 200003};
	tu_rng_t r;
	tu_rng_seed(&r, 40);
	int rans_blocks = 0;
	for (int d = 0; d < 3; d++)
		for (int kind = 0; kind < G_COUNT; kind++)
			for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
				uint64_t n = sizes[si], s1 = 0, s4 = 0;
				ibp_dtype_t dt = DTS[d];
				uint8_t *src = tu_xcalloc(n * 4 + 1);
				gen(&r, kind, dt, src, n);
				ibp_exp_opts_t o;
				rans_opts(&o, 1, 1);
				uint8_t *b1 = round_trip(src, dt, n, &o, &s1);
				rans_opts(&o, 4, 1);
				uint8_t *b4 = round_trip(src, dt, n, &o, &s4);
				cr_assert(s1 == s4 && memcmp(b1, b4, s1) == 0, "threads change the bytes");
				ibp_exp_info_t info;
				cr_assert_eq(ibp_exp_block_info(b1, s1, &info), IBP_OK);
				if (!info.raw && info.table_mode == IBP_EXP_TABLE_RANS)
					rans_blocks++;
				/* large Gaussian and special blocks must pick rANS */
				if (n >= 65536 && kind != G_RANDOM)
					cr_assert(!info.raw && info.table_mode == IBP_EXP_TABLE_RANS,
						  "%s kind %d n=%llu: not a rANS block", ibp_dtype_name(dt), kind,
						  (unsigned long long)n);
				if (kind == G_RANDOM)
					cr_assert(info.raw, "random bits must stay raw");
				free(b1);
				free(b4);
				free(src);
			}
	cr_assert_gt(rans_blocks, 30);
}

Test(exp_rans, every_bf16_and_f16_bit_pattern_round_trips)
{
	for (int d = 0; d < 2; d++) {
		ibp_dtype_t dt = DTS[d];
		uint64_t n = 65536 * 4, size = 0;
		uint16_t *src = tu_xcalloc(n * 2);
		/* all 2^16 patterns once (40503 is odd), then one exponent's
		 * neighbourhood so rANS wins */
		for (uint64_t i = 0; i < n; i++)
			src[i] = i < 65536 ? (uint16_t)(i * 40503u) : (uint16_t)(0x3c00u | (i & 0xff));
		ibp_exp_opts_t o;
		rans_opts(&o, 2, 0);
		uint8_t *b = round_trip((uint8_t *)src, dt, n, &o, &size);
		cr_assert_eq(b[6], 2, "%s: mode %u", ibp_dtype_name(dt), b[6]);
		free(b);
		free(src);
	}
}

Test(exp_rans, blocks_equal_the_documented_encoder)
{
	static const uint64_t sizes[] = {4096, 5000, 65536, 65537, 140001};
	tu_rng_t r;
	int compared = 0;
	tu_rng_seed(&r, 41);
	for (int d = 0; d < 3; d++)
		for (int kind = 0; kind < G_COUNT; kind++)
			for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
				uint64_t n = sizes[si], size = 0;
				ibp_dtype_t dt = DTS[d];
				if (kind == G_RANDOM)
					continue;
				uint8_t *src = tu_xcalloc(n * 4);
				gen(&r, kind, dt, src, n);
				ibp_exp_opts_t o;
				rans_opts(&o, 3, 0);
				uint8_t *blk = round_trip(src, dt, n, &o, &size);
				if (blk[6] != 2) { /* a small block HISTOGRAM codes smaller */
					cr_assert(n < 65536, "%s kind %d n=%llu: mode %u", ibp_dtype_name(dt), kind, (unsigned long long)n, blk[6]);
					free(blk);
					free(src);
					continue;
				}
				compared++;
				uint16_t freq[256];
				uint32_t sum = 0;
				block_freqs(blk, freq);
				for (int k = 0; k < 256; k++)
					sum += freq[k];
				cr_assert_eq(sum, 4096);
				uint8_t *ref = tu_xcalloc(size + 4 * n + 4096);
				uint64_t rs = ref_block(src, dt, n, freq, ref);
				cr_assert_eq(rs, size, "%s n=%llu: size %llu, reference %llu", ibp_dtype_name(dt),
					     (unsigned long long)n, (unsigned long long)size, (unsigned long long)rs);
				for (uint64_t i = 0; i < size; i++)
					cr_assert_eq(blk[i], ref[i], "%s kind %d n=%llu: byte %llu is %u, reference %u",
						     ibp_dtype_name(dt), kind, (unsigned long long)n, (unsigned long long)i,
						     blk[i], ref[i]);
				free(ref);
				free(blk);
				free(src);
			}
	cr_assert_geq(compared, 44);
}

/* 4096 BF16 values 1 + k/128 (exponent 127, one symbol): header, map,
 * frequency 4096, directory (end 64, 16 lanes of 4 bytes), rest bytes = the
 * mantissas, and 16 lanes of the bare initial state 0x00010000. */
Test(exp_rans, known_small_block)
{
	uint64_t n = 4096, size = 0;
	uint16_t src[4096];
	for (uint64_t i = 0; i < n; i++)
		src[i] = (uint16_t)(0x3f80u | (i & 0x7f));
	ibp_exp_opts_t o;
	rans_opts(&o, 1, 0);
	uint8_t *b = round_trip((uint8_t *)src, IBP_DTYPE_BF16, n, &o, &size);
	static const uint8_t head[48] = {'I', 'B', 'P', 'E', 2, 10, 2, 3, 0x00, 0x10, 0, 0, 0, 0, 0, 0,
					 4, 12, 0, 0, 0, 0, 0, 12, 64, 0, 0, 0, 0, 0, 0, 0,
					 0x80, 0x11, 0, 0, 0, 0, 0, 0, 0x00, 0x11, 0, 0, 0, 0, 0, 0};
	cr_assert_eq(size, 4480);
	cr_assert(memcmp(b, head, 48) == 0, "header %s", tu_hex(b, 48));
	for (int i = 48; i < 64; i++)
		cr_assert_eq(b[i], 0);
	for (int i = 64; i < 96; i++)
		cr_assert_eq(b[i], i == 64 + 15 ? 0x80 : 0, "map byte %d", i);
	cr_assert(b[96] == 0x00 && b[97] == 0x10);
	for (int i = 98; i < 104; i++)
		cr_assert_eq(b[i], 0);
	cr_assert_eq(b[104], 64);
	for (int i = 105; i < 112; i++)
		cr_assert_eq(b[i], 0);
	for (int k = 0; k < 16; k++)
		cr_assert(b[112 + 2 * k] == 4 && b[113 + 2 * k] == 0, "lane %d", k);
	for (int i = 144; i < 256; i++)
		cr_assert_eq(b[i], 0);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(b[256 + i], i & 0x7f);
	for (int k = 0; k < 16; k++) {
		static const uint8_t st[4] = {0, 0, 1, 0};
		cr_assert(memcmp(b + 4352 + 4 * k, st, 4) == 0);
	}
	for (uint64_t i = 4416; i < 4480; i++)
		cr_assert_eq(b[i], 0);
	free(b);
}

/* Two symbols of frequency 2048 each, one per lane parity: lane j of a
 * segment holds 256 equal symbols of one bit each. */
Test(exp_rans, known_two_symbol_block)
{
	uint64_t n = 4096, size = 0;
	uint16_t src[4096];
	for (uint64_t i = 0; i < n; i++)
		src[i] = (uint16_t)((i % 2 ? 0x3f00u : 0x3f80u) | (i & 0x7f));
	ibp_exp_opts_t o;
	rans_opts(&o, 1, 0);
	uint8_t *b = round_trip((uint8_t *)src, IBP_DTYPE_BF16, n, &o, &size);
	cr_assert_eq(b[6], 2);
	/* symbols 126 (odd lanes) and 127 (even lanes), 2048 each */
	cr_assert(b[64 + 15] == 0xc0 && b[96] == 0x00 && b[97] == 0x08 && b[98] == 0x00 && b[99] == 0x08);
	/* 256 symbols of probability 1/2: 256 bits = 16 words + the state */
	cr_assert_eq(b[104] | b[105] << 8, 16 * 36);
	for (int k = 0; k < 16; k++)
		cr_assert_eq(b[112 + 2 * k] | b[113 + 2 * k] << 8, 36, "lane %d", k);
	free(b);
}

Test(exp_rans, per_block_choice_against_histogram_and_raw)
{
	/* chunks: small Gaussian (HISTOGRAM's coded block is smaller), large
	 * Gaussian (rANS), random bits (raw) */
	const uint64_t chunk = 65536, n = 4 * chunk;
	tu_rng_t r;
	tu_rng_seed(&r, 42);
	uint8_t *src = tu_xcalloc(n * 2);
	gen(&r, G_GAUSS, IBP_DTYPE_BF16, src, 2 * chunk);
	gen(&r, G_RANDOM, IBP_DTYPE_BF16, src + 4 * chunk, chunk);
	gen(&r, G_GAUSS, IBP_DTYPE_BF16, src + 6 * chunk, chunk);
	uint64_t cap = 0, off[5];
	cr_assert_eq(ibp_exp_batch_bound(IBP_DTYPE_BF16, n, chunk, &cap), IBP_OK);
	uint8_t *blk = tu_xcalloc(cap), *out = tu_xcalloc(n * 2);
	ibp_exp_opts_t o;
	rans_opts(&o, 2, 1);
	cr_assert_eq(ibp_exp_encode_batch(src, IBP_DTYPE_BF16, n, chunk, &o, blk, cap, off), IBP_OK);
	cr_assert_eq(ibp_exp_decode_batch(blk, off[4], off, IBP_DTYPE_BF16, n, chunk, out, 2), IBP_OK);
	cr_assert(memcmp(src, out, n * 2) == 0);
	int want[4] = {2, 2, 0, 2};
	for (int i = 0; i < 4; i++)
		cr_assert_eq(blk[off[i] + 6], want[i], "chunk %d: mode %u", i, blk[off[i] + 6]);
	/* each rANS block is smaller than HISTOGRAM's block of its chunk */
	ibp_exp_opts_t h;
	ibp_exp_opts_default(&h);
	h.table_mode = IBP_EXP_TABLE_HISTOGRAM;
	uint64_t hcap = 0, hs = 0;
	cr_assert_eq(ibp_exp_encode_bound(IBP_DTYPE_BF16, chunk, &hcap), IBP_OK);
	uint8_t *hb = tu_xcalloc(hcap);
	cr_assert_eq(ibp_exp_encode(src, IBP_DTYPE_BF16, chunk, &h, hb, hcap, &hs), IBP_OK);
	cr_assert_lt(off[1] - off[0], hs);
	/* 7 equally likely exponents (2.81 bits against 3): HISTOGRAM's coded
	 * block is smaller at this size, and is written byte for byte */
	uint64_t sn = 4096, s1 = 0;
	for (uint64_t i = 0; i < sn; i++) {
		uint16_t v = (uint16_t)(((120 + tu_below(&r, 7)) << 7) | tu_below(&r, 0x8000) >> 7 << 15 | tu_below(&r, 128));
		memcpy(src + 2 * i, &v, 2);
	}
	uint8_t *rb = round_trip(src, IBP_DTYPE_BF16, sn, &o, &s1);
	cr_assert_eq(ibp_exp_encode(src, IBP_DTYPE_BF16, sn, &h, hb, hcap, &hs), IBP_OK);
	cr_assert_eq(rb[6], 1);
	cr_assert_eq(rb[7], IBP_EXP_TABLE_HISTOGRAM);
	cr_assert(s1 == hs && memcmp(rb, hb, hs) == 0, "the fallback is not HISTOGRAM's block");
	free(rb);
	free(hb);
	free(blk);
	free(out);
	free(src);
}

static ibp_status_t dec(const uint8_t *b, uint64_t size, ibp_dtype_t dt, uint64_t n, uint8_t *out)
{
	return ibp_exp_decode_ext(b, size, dt, n, out, 1, IBP_EXP_TRUSTED);
}

Test(exp_rans, damaged_and_truncated_blocks_rejected)
{
	tu_rng_t r;
	tu_rng_seed(&r, 43);
	for (int d = 0; d < 3; d++) {
		ibp_dtype_t dt = DTS[d];
		uint64_t n = 70001, size = 0;
		size_t es = esize_of(dt);
		uint8_t *src = tu_xcalloc(n * es), *out = tu_xcalloc(n * es);
		gen(&r, G_SPECIAL, dt, src, n);
		ibp_exp_opts_t o;
		rans_opts(&o, 1, 0);
		uint8_t *b = round_trip(src, dt, n, &o, &size);
		cr_assert_eq(b[6], 2);
		uint64_t stat = 0, nsym = 0, streams = 0;
		memcpy(&stat, b + 40, 8);
		memcpy(&streams, b + 24, 8);
		for (int i = 0; i < 32; i++)
			nsym += (uint64_t)__builtin_popcount(b[64 + i]);
		uint64_t off_rest = al(al(96 + 2 * nsym, 8) + 40 * 2, 128);
		/* truncations */
		for (uint64_t cut = 0; cut < size; cut += cut < 256 ? 1 : 97)
			cr_assert_eq(dec(b, cut, dt, n, out), IBP_ERR_CORRUPT, "cut at %llu", (unsigned long long)cut);
		/* single-bit flips everywhere but the rest bytes (raw data): the
		 * prologue is checked in full; a stream flip almost always breaks
		 * a final state or a length, but rANS can resynchronise, so
		 * without a checksum a few decode (to wrong data) */
		uint64_t sflips = 0, scaught = 0;
		for (uint64_t i = 0; i < size; i += i < 512 ? 1 : 61) {
			if (i >= off_rest && i < off_rest + n * (es == 4 ? 3 : 1))
				continue;
			if (i >= 48 && i < 64)
				continue; /* flags and checksum: tested by the checksum suite */
			for (int bit = 0; bit < 8; bit += (i < stat ? 1 : 3)) {
				b[i] ^= (uint8_t)(1u << bit);
				ibp_status_t st = dec(b, size, dt, n, out);
				if (i >= stat && i < stat + streams) {
					cr_assert(st == IBP_ERR_CORRUPT || st == IBP_OK);
					sflips++;
					scaught += st == IBP_ERR_CORRUPT;
				} else {
					cr_assert_eq(st, IBP_ERR_CORRUPT, "%s: flip of byte %llu bit %d: %d",
						     ibp_dtype_name(dt), (unsigned long long)i, bit, st);
				}
				b[i] ^= (uint8_t)(1u << bit);
			}
		}
		cr_assert_gt(sflips, 1000);
		cr_assert_geq(scaught * 100, sflips * 95, "%s: %llu of %llu stream flips caught", ibp_dtype_name(dt),
			      (unsigned long long)scaught, (unsigned long long)sflips);
		cr_assert_eq(dec(b, size, dt, n, out), IBP_OK);
		/* a frequency of 0, a sum off by one (each refused for that reason,
		 * not by a later check), one above the scale */
		uint8_t keep[2] = {b[96], b[97]};
		b[96] = b[97] = 0;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		cr_assert(strstr(ibp_last_error(), "rANS frequency 0 of symbol"), "%s", ibp_last_error());
		uint16_t f0 = (uint16_t)(keep[0] | keep[1] << 8);
		if (f0 > 1) {
			b[96] = (uint8_t)(f0 - 1);
			b[97] = (uint8_t)((f0 - 1) >> 8);
			cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
			cr_assert(strstr(ibp_last_error(), "frequencies sum to 4095"), "%s", ibp_last_error());
		}
		b[96] = (uint8_t)(keep[0] + 1);
		b[97] = keep[1];
		if (b[96] == 0)
			b[97]++;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[96] = 0x01;
		b[97] = 0x10;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[96] = keep[0];
		b[97] = keep[1];
		/* mode 2 in a version 1 header; another table source; the mode 1 */
		b[4] = 1;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[4] = 2;
		b[7] = 1;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[7] = 3;
		b[6] = 1;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[6] = 3;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_ERR_CORRUPT);
		b[6] = 2;
		cr_assert_eq(dec(b, size, dt, n, out), IBP_OK);
		cr_assert(memcmp(out, src, n * es) == 0);
		/* the checksummed block: every flip found before decoding */
		rans_opts(&o, 1, 1);
		free(b);
		b = round_trip(src, dt, n, &o, &size);
		for (uint64_t i = 0; i < size; i += 37) {
			b[i] ^= 4;
			ibp_status_t st = ibp_exp_decode(b, size, dt, n, out, 1);
			cr_assert(st == IBP_ERR_CHECKSUM || st == IBP_ERR_CORRUPT, "byte %llu: %d", (unsigned long long)i, st);
			b[i] ^= 4;
		}
		free(b);
		free(out);
		free(src);
	}
}

Test(exp_rans, split_decode_equals_whole)
{
	tu_rng_t r;
	tu_rng_seed(&r, 44);
	uint64_t n = 3 * 65536 + 1000, size = 0;
	uint8_t *src = tu_xcalloc(n * 4);
	gen(&r, G_SPECIAL, IBP_DTYPE_F32, src, n);
	ibp_exp_opts_t o;
	rans_opts(&o, 2, 1);
	uint8_t *b = round_trip(src, IBP_DTYPE_F32, n, &o, &size);
	cr_assert_eq(b[6], 2);
	static const uint64_t splits[] = {0, 64, 65536, 65536 + 640, 2 * 65536, 3 * 65536 + 960, 1ull << 40};
	for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) {
		uint64_t sp = splits[k], n0 = sp < n ? sp : n;
		uint8_t *a = tu_xcalloc(n0 * 4 + 1), *c = tu_xcalloc((n - n0) * 4 + 1);
		cr_assert_eq(ibpi_exp_decode_split(b, size, IBP_DTYPE_F32, n, a, sp, c), IBP_OK, "split %llu",
			     (unsigned long long)sp);
		cr_assert(memcmp(a, src, n0 * 4) == 0 && memcmp(c, src + n0 * 4, (n - n0) * 4) == 0);
		free(a);
		free(c);
	}
	free(b);
	free(src);
}

Test(exp_rans, bf16_gaussian_ratio_at_least_1_51)
{
	tu_rng_t r;
	tu_rng_seed(&r, 45);
	uint64_t n = 1 << 22, size = 0;
	uint8_t *src = tu_xcalloc(n * 2);
	gen(&r, G_GAUSS, IBP_DTYPE_BF16, src, n);
	ibp_exp_opts_t o;
	rans_opts(&o, 0, 1);
	uint8_t *b = round_trip(src, IBP_DTYPE_BF16, n, &o, &size);
	double ratio = (double)(2 * n) / (double)size;
	cr_assert_geq(ratio, 1.51, "ratio %.4f", ratio);
	free(b);
	free(src);
}

/* The default is unchanged, and SIGMA/HISTOGRAM blocks (and version 1
 * headers) still decode beside rANS blocks in one batch. */
Test(exp_rans, older_modes_still_decode)
{
	ibp_exp_opts_t d;
	ibp_exp_opts_default(&d);
	cr_assert_eq(d.table_mode, IBP_EXP_TABLE_SIGMA);
	tu_rng_t r;
	tu_rng_seed(&r, 46);
	uint64_t n = 65536, s0 = 0, s1 = 0;
	uint8_t *src = tu_xcalloc(n * 2), *out = tu_xcalloc(n * 2);
	gen(&r, G_GAUSS, IBP_DTYPE_BF16, src, n);
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.checksum = 0;
	uint8_t *b0 = round_trip(src, IBP_DTYPE_BF16, n, &o, &s0);
	cr_assert_eq(b0[6], 1);
	b0[4] = 1; /* version 1: the same bytes, no flags */
	cr_assert_eq(ibp_exp_decode(b0, s0, IBP_DTYPE_BF16, n, out, 1), IBP_OK);
	cr_assert(memcmp(out, src, n * 2) == 0);
	rans_opts(&o, 1, 0);
	uint8_t *b1 = round_trip(src, IBP_DTYPE_BF16, n, &o, &s1);
	cr_assert_eq(b1[6], 2);
	cr_assert_lt(s1, s0);
	uint8_t *both = tu_xcalloc(s0 + s1);
	memcpy(both, b0, s0);
	memcpy(both + s0, b1, s1);
	uint64_t off[3] = {0, s0, s0 + s1};
	uint8_t *out2 = tu_xcalloc(4 * n);
	uint8_t *src2 = tu_xcalloc(4 * n);
	memcpy(src2, src, 2 * n);
	memcpy(src2 + 2 * n, src, 2 * n);
	cr_assert_eq(ibp_exp_decode_batch(both, s0 + s1, off, IBP_DTYPE_BF16, 2 * n, n, out2, 2), IBP_OK);
	cr_assert(memcmp(out2, src2, 4 * n) == 0);
	ibp_exp_info_t info;
	cr_assert_eq(ibp_exp_block_info(b1, s1, &info), IBP_OK);
	cr_assert(!info.raw && info.table_mode == IBP_EXP_TABLE_RANS && info.block_bytes == s1);
	free(both);
	free(out2);
	free(src2);
	free(b0);
	free(b1);
	free(out);
	free(src);
}

static char g_path[256];

static void remove_path(void)
{
	if (g_path[0])
		remove(g_path); /* on failure too (the mutation check makes many) */
}

/* A container of RANS blocks: written (rANS blocks keep version 2, the
 * others go to version 1), opened with verification, read back. */
Test(exp_rans, container_of_rans_blocks, .fini = remove_path)
{
	tu_rng_t r;
	tu_rng_seed(&r, 47);
	const uint64_t rows = 1024, cols = 256, n = rows * cols; /* 4 blocks of 256 rows */
	uint8_t *src = tu_xcalloc(n * 2), *out = tu_xcalloc(256 * cols * 2);
	gen(&r, G_GAUSS, IBP_DTYPE_BF16, src, n - 256 * cols);
	gen(&r, G_RANDOM, IBP_DTYPE_BF16, src + 2 * (n - 256 * cols), 256 * cols); /* last block raw */
	char *path = g_path;
	snprintf(path, sizeof(g_path), "/tmp/ibp_test_exp_rans_%d.ibp", (int)getpid());
	uint64_t shape[2] = {rows, cols};
	ibp_exp_opts_t o;
	rans_opts(&o, 1, 1);
	cr_assert_eq(ibp_pack_exp(path, src, IBP_DTYPE_BF16, 2, shape, &o, 256), IBP_OK, "%s", ibp_last_error());
	ibp_container_t *c = NULL;
	cr_assert_eq(ibp_container_open(path, IBP_OPEN_VERIFY, &c), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_container_exp_table_mode(c), IBP_EXP_TABLE_RANS);
	for (uint64_t b = 0; b < 4; b++) {
		cr_assert_eq(ibp_container_decode_block(c, b, out, 1), IBP_OK, "block %llu: %s", (unsigned long long)b,
			     ibp_last_error());
		cr_assert(memcmp(out, src + b * 256 * cols * 2, 256 * cols * 2) == 0, "block %llu differs",
			  (unsigned long long)b);
	}
	ibp_container_close(c);
	free(out);
	free(src);
}
