/* exp_codec.c - CPU reference of the lossless exponent codec (ibp/exp.h).
 *
 * Work is done 64 elements at a time: one 64-bit word per bit-plane. The
 * code of an element is found by comparing its exponent with the 7 table
 * fields (no table lookup, so the compiler vectorises it), and the planes
 * are gathered 8 bytes at a time with a multiply. Escapes are rare and are
 * written by walking the zero-code mask. Groups of 4096 elements carry
 * their escape prefix, so threads take disjoint group ranges on both sides.
 * The hot loops live in exp_codec_impl.h (portable and AVX2 builds of the
 * same C, picked at run time; IBP_FORCE_PORTABLE=1 forces the portable one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/exp.h"
#include "util/checksum.h"
#include "util/error.h"
#include "util/opts.h"
#include "util/cpu.h"

#define EXP_VARIANT portable
#include "exp/exp_codec_impl.h"
#include "exp/exp_split.h"
#include "exp/exp_rans.h"

/* Below this many groups per thread, threads cost more than they save. */
#define MIN_GROUPS_PER_THREAD 64u

/* ---------------------------------------------------------------- helpers */

static ibp_status_t shape_for(ibp_dtype_t dt, uint64_t n, expf_shape_t *s, const char *fn)
{
	memset(s, 0, sizeof(*s));
	if (!expf_shape_of((uint32_t)dt, s))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dtype %s is not bf16, f16 or f32", fn, ibp_dtype_name(dt));
	if (n > EXPF_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu elements exceed the limit 2^56", fn,
				(unsigned long long)n);
	return IBP_OK;
}




static int all_zero(const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i])
			return 0;
	return 1;
}

static inline uint32_t fmax_of(const expf_shape_t *s)
{
	return (1u << s->ebits) - 1u;
}

/* 1 when the AVX2 build of the hot loops should run (checked per call so
 * tests can flip IBP_FORCE_PORTABLE). */
static int use_avx2(void)
{
#if EXP_HAVE_AVX2_BUILD
	const char *e = getenv("IBP_FORCE_PORTABLE");
	if (e && e[0] == '1')
		return 0;
	return ibpi_cpu()->avx2;
#else
	return 0;
#endif
}

/* The encoder's and decoder's build: 2 AVX-512 (BW + VBMI), 1 AVX2, 0
 * portable; tests hold it to AVX2 with IBP_EXP_ISA=avx2
 * (IBP_FORCE_PORTABLE=1: portable). The mean square follows it. Read once
 * per API call and passed down, not per block (the KV store's blocks are
 * small: issue 33), so tests may still flip it between calls. */
static int exp_isa(void)
{
	int v = use_avx2();
#if EXP_HAVE_AVX2_BUILD
	if (v && ibpi_cpu()->avx512vbmi) {
		const char *isa = getenv("IBP_EXP_ISA");
		if (!(isa && strcmp(isa, "avx2") == 0))
			v = 2;
	}
#endif
	return v;
}

/* The highest build this CPU runs (no environment read). */
static int isa_max(void)
{
#if EXP_HAVE_AVX2_BUILD
	return ibpi_cpu()->avx2 ? (ibpi_cpu()->avx512vbmi ? 2 : 1) : 0;
#else
	return 0;
#endif
}

int ibpi_exp_isa(void)
{
	return exp_isa();
}

static double ms_group(const uint8_t *p, uint32_t dt, uint64_t *nonfinite, int avx2)
{
#if EXP_HAVE_AVX2_BUILD
	if (avx2 == 2)
		return ibpi_exp_ms_group_avx512(p, dt, nonfinite);
	if (avx2)
		return ibpi_exp_ms_group_avx2(p, dt, nonfinite);
#endif
	(void)avx2;
	return ibpi_exp_ms_group_portable(p, dt, nonfinite);
}

void ibp_exp_opts_default(ibp_exp_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->table_mode = IBP_EXP_TABLE_SIGMA;
	o->sigma = 0.0;
	o->nthreads = 0;
	o->checksum = 1;
}

/* ------------------------------------------------------------------ sizes */

ibp_status_t ibp_exp_static_size(ibp_dtype_t dt, uint64_t n, uint64_t *bytes)
{
	expf_shape_t s;
	expf_layout_t L;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_static_size: bytes is NULL");
	IBP_TRY(shape_for(dt, n, &s, "exp_static_size"));
	expf_layout_of(&s, n, &L);
	*bytes = L.static_bytes;
	return IBP_OK;
}

ibp_status_t ibp_exp_coded_size(ibp_dtype_t dt, uint64_t n, uint64_t escapes, uint64_t *bytes)
{
	expf_shape_t s;
	expf_layout_t L;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_coded_size: bytes is NULL");
	IBP_TRY(shape_for(dt, n, &s, "exp_coded_size"));
	if (escapes > n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_coded_size: %llu escapes > %llu elements",
				(unsigned long long)escapes, (unsigned long long)n);
	expf_layout_of(&s, n, &L);
	*bytes = expf_coded_bytes(&L, escapes);
	return IBP_OK;
}

ibp_status_t ibp_exp_raw_size(ibp_dtype_t dt, uint64_t n, uint64_t *bytes)
{
	expf_shape_t s;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_raw_size: bytes is NULL");
	IBP_TRY(shape_for(dt, n, &s, "exp_raw_size"));
	*bytes = expf_raw_bytes(&s, n);
	return IBP_OK;
}

static uint64_t bound_of(const expf_shape_t *s, uint64_t n)
{
	expf_layout_t L;
	expf_layout_of(s, n, &L);
	uint64_t coded = expf_coded_bytes(&L, n), raw = expf_raw_bytes(s, n);
	return coded > raw ? coded : raw;
}

ibp_status_t ibp_exp_encode_bound(ibp_dtype_t dt, uint64_t n, uint64_t *bytes)
{
	expf_shape_t s;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_bound: bytes is NULL");
	IBP_TRY(shape_for(dt, n, &s, "exp_encode_bound"));
	*bytes = bound_of(&s, n);
	return IBP_OK;
}

/* ----------------------------------------------------------------- tables */

/* Value of element bits as a double (exact for all three formats). */
static inline double elem_value(uint32_t bits, uint32_t dt)
{
	float f;
	if (dt == EXPF_DT_BF16) {
		uint32_t u = bits << 16;
		memcpy(&f, &u, 4);
		return f;
	}
	if (dt == EXPF_DT_F32) {
		memcpy(&f, &bits, 4);
		return f;
	}
	/* FP16: sign, 5-bit exponent, 10-bit mantissa */
	uint32_t e = (bits >> 10) & 31u, m = bits & 0x3ffu;
	double v;
	if (e == 0)
		v = (double)m * 0x1p-24;
	else
		v = (double)(m | 0x400u) * (double)(1ull << e) * 0x1p-25;
	return (bits & 0x8000u) ? -v : v;
}

/* Mean square in the documented order: per group, 256 lanes (lane t sums
 * elements k*256 + t, k = 0..15, in k order) reduced by a halving tree;
 * groups combined by a pairwise tree (power-of-two aligned). x*x is exact
 * in double for all three formats, so contraction cannot change anything. */
static double mean_square_block(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n, int isa)
{
	double stack[64];
	uint64_t stack_size[64];
	int sp = 0;
	uint64_t finite = 0, nonfinite = 0;
	uint32_t fmax = fmax_of(s);
	uint64_t ng = (n + EXPF_GROUP - 1) >> EXPF_GROUP_LOG2;
	const int avx2 = isa;
	for (uint64_t g = 0; g < ng; g++) {
		uint64_t base = g << EXPF_GROUP_LOG2, len = expf_group_len(n, g);
		const uint8_t *p = src + base * s->esize;
		double part;
		if (len == EXPF_GROUP) {
			part = ms_group(p, dt, &nonfinite, avx2);
			finite += EXPF_GROUP;
		} else {
			/* partial group: absent elements are +0 terms, which change nothing */
			double acc[256];
			for (int t = 0; t < 256; t++)
				acc[t] = 0.0;
			for (uint64_t i = 0; i < len; i++) {
				uint32_t bits = exp_ld_elem(p + i * s->esize, s->esize);
				finite++;
				if (expf_field(bits, s) == fmax) {
					nonfinite++;
					continue;
				}
				double d = elem_value(bits, dt);
				acc[i & 255] = acc[i & 255] + d * d;
			}
			for (int h = 128; h >= 1; h >>= 1)
				for (int t = 0; t < h; t++)
					acc[t] = acc[t] + acc[t + h];
			part = acc[0];
		}
		/* pairwise tree over groups, as a binary counter */
		stack[sp] = part;
		stack_size[sp] = 1;
		sp++;
		while (sp >= 2 && stack_size[sp - 1] == stack_size[sp - 2]) {
			stack[sp - 2] = stack[sp - 2] + stack[sp - 1];
			stack_size[sp - 2] *= 2;
			sp--;
		}
	}
	finite -= nonfinite;
	if (sp == 0 || finite == 0)
		return 0.0;
	while (sp >= 2) {
		stack[sp - 2] = stack[sp - 2] + stack[sp - 1];
		sp--;
	}
	return stack[0] / (double)finite;
}

ibp_status_t ibp_exp_mean_square(const void *src, ibp_dtype_t dt, uint64_t n, double *ms)
{
	expf_shape_t s;
	if (!ms || (!src && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_mean_square: NULL argument");
	IBP_TRY(shape_for(dt, n, &s, "exp_mean_square"));
	*ms = mean_square_block(src, &s, (uint32_t)dt, n, exp_isa());
	return IBP_OK;
}

/* The window table of ms as one word: byte k field k, byte 7 zero. One
 * store of it lets encode_block's 8-byte load forward from it (seven byte
 * stores stalled every small block's setup). */
static uint64_t window_word(const expf_shape_t *s, double ms)
{
	uint64_t start = expf_window_start(ms, s), w = 0;
	for (uint32_t k = 0; k < EXPF_NCODES; k++)
		w |= (uint64_t)(uint8_t)(start + k) << (8 * k);
	return w;
}

static void window_table(const expf_shape_t *s, double ms, uint8_t *t)
{
	uint64_t w = window_word(s, ms);
	memcpy(t, &w, EXPF_NCODES);
}

ibp_status_t ibp_exp_table_from_mean_square(ibp_dtype_t dt, double ms, ibp_exp_table_t *t)
{
	expf_shape_t s;
	if (!t)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_table_from_mean_square: t is NULL");
	IBP_TRY(shape_for(dt, 0, &s, "exp_table_from_mean_square"));
	if (!(ms >= 0.0) || ms > 1.7976931348623157e308)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_table_from_mean_square: mean square %g is not finite and >= 0",
				ms);
	window_table(&s, ms, t->field);
	return IBP_OK;
}

/* The table of a finite sigma >= 0 (window_word). */
static uint64_t sigma_word(const expf_shape_t *s, double sigma)
{
	double ms = sigma * sigma;
	if (ms > 1.7976931348623157e308)
		ms = 1.7976931348623157e308; /* huge sigma: top window */
	return window_word(s, ms);
}

ibp_status_t ibp_exp_table_from_sigma(ibp_dtype_t dt, double sigma, ibp_exp_table_t *t)
{
	expf_shape_t s;
	if (!(sigma >= 0.0) || sigma > 1.7976931348623157e308)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_table_from_sigma: sigma %g is not finite and >= 0", sigma);
	if (!t)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_table_from_sigma: t is NULL");
	IBP_TRY(shape_for(dt, 0, &s, "exp_table_from_sigma"));
	uint64_t w = sigma_word(&s, sigma);
	memcpy(t->field, &w, EXPF_NCODES);
	return IBP_OK;
}

static void histogram_block(const uint8_t *src, const expf_shape_t *s, uint64_t n, uint64_t *hist)
{
	uint32_t h[4][256];
	memset(h, 0, sizeof(h));
	memset(hist, 0, 256 * sizeof(uint64_t));
	uint64_t i = 0;
	while (i < n) {
		/* flush before a u32 bin could overflow */
		uint64_t end = n - i > (1ull << 30) ? i + (1ull << 30) : n;
		for (; i + 4 <= end; i += 4)
			for (int j = 0; j < 4; j++)
				h[j][expf_field(exp_ld_elem(src + (i + j) * s->esize, s->esize), s)]++;
		for (; i < end; i++)
			h[0][expf_field(exp_ld_elem(src + i * s->esize, s->esize), s)]++;
		for (int f = 0; f < 256; f++) {
			hist[f] += (uint64_t)h[0][f] + h[1][f] + h[2][f] + h[3][f];
			h[0][f] = h[1][f] = h[2][f] = h[3][f] = 0;
		}
	}
}

ibp_status_t ibp_exp_histogram(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t hist[256])
{
	expf_shape_t s;
	if (!hist || (!src && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_histogram: NULL argument");
	IBP_TRY(shape_for(dt, n, &s, "exp_histogram"));
	histogram_block(src, &s, n, hist);
	return IBP_OK;
}

ibp_status_t ibp_exp_table_from_histogram(ibp_dtype_t dt, const uint64_t hist[256], ibp_exp_table_t *t)
{
	expf_shape_t s;
	if (!hist || !t)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_table_from_histogram: NULL argument");
	IBP_TRY(shape_for(dt, 0, &s, "exp_table_from_histogram"));
	expf_table_from_hist(hist, fmax_of(&s), t->field);
	return IBP_OK;
}

static int table_valid(const expf_shape_t *s, const uint8_t *t)
{
	for (uint32_t k = 0; k < EXPF_NCODES; k++) {
		if (t[k] > fmax_of(s))
			return 0;
		if (k && t[k] <= t[k - 1])
			return 0;
	}
	return 1;
}

/* Resolves the table of one block per opts into t (8 bytes). */
static ibp_status_t resolve_table(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
				  const ibp_exp_opts_t *o, int isa, uint8_t *t)
{
	switch (o->table_mode) {
	case IBP_EXP_TABLE_SIGMA:
		if (o->sigma > 0.0) {
			/* one 8-byte store (window_word), not a copy of a table
			 * written bytewise: the KV store's blocks are small */
			if (o->sigma > 1.7976931348623157e308) {
				ibp_exp_table_t tt;
				return ibp_exp_table_from_sigma((ibp_dtype_t)dt, o->sigma, &tt); /* its error */
			}
			uint64_t w = sigma_word(s, o->sigma);
			memcpy(t, &w, 8);
		} else if (o->sigma == 0.0) {
			uint64_t w = window_word(s, mean_square_block(src, s, dt, n, isa));
			memcpy(t, &w, 8);
		} else {
			return ibpi_fail(IBP_ERR_INVALID_ARG, "exp: sigma %g must be >= 0 (0 = measure)", o->sigma);
		}
		return IBP_OK;
	case IBP_EXP_TABLE_HISTOGRAM: {
		uint64_t hist[256];
		histogram_block(src, s, n, hist);
		expf_table_from_hist(hist, fmax_of(s), t);
		return IBP_OK;
	}
	case IBP_EXP_TABLE_GIVEN:
		if (!table_valid(s, o->table.field))
			return ibpi_fail(IBP_ERR_INVALID_ARG,
					"exp: given table must hold 7 strictly ascending fields <= %u", fmax_of(s));
		memcpy(t, o->table.field, EXPF_NCODES);
		return IBP_OK;
	case IBP_EXP_TABLE_RANS:
		break; /* encode_one takes it before */
	}
	return ibpi_fail(IBP_ERR_INVALID_ARG, "exp: unknown table mode %d", (int)o->table_mode);
}

/* ----------------------------------------------------------------- encode */

/* Encodes a group range; escapes are staged at the escape area +
 * begin * GROUP (their final place when begin == 0), compacted later. */
static void enc_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	exp_enc_block_t *b = ctx;
	uint8_t *esc = b->dst + b->L.static_bytes + (begin << EXPF_GROUP_LOG2);
	b->range_begin[tid] = begin;
	b->range_end[tid] = end;
#if EXP_HAVE_AVX2_BUILD
	if (b->isa) {
		b->range_esc[tid] = b->isa == 2 ? ibpi_exp_enc_groups_avx512(b, begin, end, esc)
						: ibpi_exp_enc_groups_avx2(b, begin, end, esc);
		return;
	}
#endif
	b->range_esc[tid] = ibpi_exp_enc_groups_portable(b, begin, end, esc);
}

/* Where a block's elements come from: [0, split) at src, the rest at src2. */
typedef struct enc_in {
	const uint8_t *src, *src2;
	uint64_t split;
	int prefetch; /* the source is likely not cached */
} enc_in_t;

static enc_in_t whole(const uint8_t *src)
{
	return (enc_in_t){ src, NULL, UINT64_MAX, 0 };
}

static void write_raw(enc_in_t in, const expf_shape_t *s, uint32_t dt, uint64_t n, uint8_t *dst, uint64_t *size)
{
	uint64_t raw = expf_raw_bytes(s, n);
	expf_write_header(dst, dt, EXPF_MODE_RAW, 0, n, NULL, 0, raw, raw);
	const uint64_t n0 = in.split < n ? in.split : n;
	if (n0)
		memcpy(dst + EXPF_HEADER_BYTES, in.src, n0 * s->esize);
	if (n > n0)
		memcpy(dst + EXPF_HEADER_BYTES + n0 * s->esize, in.src2, (n - n0) * s->esize);
	memset(dst + EXPF_HEADER_BYTES + n * s->esize, 0, raw - EXPF_HEADER_BYTES - n * s->esize);
	*size = raw;
}

/* One block; the table (8 bytes) is resolved; nt threads at most; isa: exp_isa()'s. */
static ibp_status_t encode_block(enc_in_t in, const expf_shape_t *s, uint32_t dt, uint64_t n,
				 const uint8_t *table, uint32_t tsrc, int nthreads, int isa, uint8_t *dst,
				 uint64_t *size)
{
	/* on the stack, its per-thread arrays too for a few threads: a
	 * malloc of them a block was 5% of a KV store's time */
	exp_enc_block_t blk, *b = &blk;
	b->src = in.src;
	b->src2 = in.src2;
	b->split = in.split;
	b->prefetch = in.prefetch;
	b->dst = dst;
	/* dt's shape (*s) made in place: a copy of the caller's, written just
	 * before, stalled on store forwarding in every small block */
	(void)expf_shape_of(dt, &b->s);
	b->dt = dt;
	/* the AVX-512 encoder packs escapes with vpcompressb (VBMI2); without
	 * it the AVX2 encoder writes the same bytes */
	b->isa = isa == 2 && !ibpi_cpu()->avx512vbmi2 ? 1 : isa;
	memcpy(b->table, table, 8); /* callers' tables are 8 bytes: one load */
	b->table[7] = 0;
	expf_layout_of(s, n, &b->L);
	const expf_layout_t *L = &b->L;
	uint64_t raw = expf_raw_bytes(s, n);
	if (L->static_bytes >= raw) {
		/* even with no escape the coded block cannot be smaller */
		write_raw(in, s, dt, n, dst, size);
		return IBP_OK;
	}
	uint64_t per = L->ngroups / MIN_GROUPS_PER_THREAD;
	int nt = ibpi_parallel_threads(nthreads, per ? per : 1);
	enum { FEW = 8 };
	uint64_t few[3 * FEW], *ranges = nt <= FEW ? few : malloc(3 * sizeof(uint64_t) * (size_t)nt);
	if (!ranges)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_encode: no memory for %d threads' ranges", nt);
	b->range_begin = ranges, b->range_end = ranges + nt, b->range_esc = ranges + 2 * nt;
	ibp_status_t st = ibpi_parallel_for(nt, L->ngroups, enc_task, b);
	if (st != IBP_OK) {
		if (ranges != few)
			free(ranges);
		return st;
	}
	nt = ibpi_parallel_threads(nt, L->ngroups);
	/* compact the staged escapes (left moves in order never overlap a
	 * range not yet moved) and turn counts into prefixes */
	uint64_t esc = 0;
	for (int i = 0; i < nt; i++) {
		if (b->range_begin[i] != 0 && b->range_esc[i])
			memmove(dst + L->static_bytes + esc, dst + L->static_bytes + (b->range_begin[i] << EXPF_GROUP_LOG2),
				b->range_esc[i]);
		esc += b->range_esc[i];
	}
	uint64_t run = 0;
	for (uint64_t g = 0; g < L->ngroups; g++) {
		uint64_t c = exp_ld64(dst + L->off_prefix + 8 * g);
		exp_st64(dst + L->off_prefix + 8 * g, run);
		run += c;
	}
	if (ranges != few)
		free(ranges);
	uint64_t coded = expf_coded_bytes(L, esc);
	if (coded >= raw) {
		write_raw(in, s, dt, n, dst, size);
		return IBP_OK;
	}
	/* zero every gap so the block is canonical */
	uint64_t pend = L->off_prefix + 8 * L->ngroups;
	memset(dst + pend, 0, L->off_planes - pend);
	uint64_t used = (n + 63) / 64 * 8;
	for (uint32_t p = 0; p < L->nplanes; p++)
		memset(dst + L->off_planes + p * L->plane_bytes + used, 0, L->plane_bytes - used);
	pend = L->off_planes + L->nplanes * L->plane_bytes;
	memset(dst + pend, 0, L->off_lo - pend);
	if (s->hi_bytes) {
		pend = L->off_lo + n * s->lo_bytes;
		memset(dst + pend, 0, L->off_hi - pend);
		pend = L->off_hi + n * s->hi_bytes;
	} else {
		pend = L->off_lo + n * s->lo_bytes;
	}
	memset(dst + pend, 0, L->static_bytes - pend);
	memset(dst + L->static_bytes + esc, 0, coded - L->static_bytes - esc);
	expf_write_header(dst, dt, EXPF_MODE_CODED, tsrc, n, table, esc, coded, L->static_bytes);
	*size = coded;
	return IBP_OK;
}

/* Seals a finished block of `size` bytes with its checksum. */
static void seal_block(uint8_t *dst, uint64_t size)
{
	dst[EXPF_OFF_FLAGS] |= EXPF_FLAG_CHECKSUM;
	expf_st64(dst + EXPF_OFF_SUM, ibpi_block_sum(dst, size));
}

/* RANS mode: a rANS block when it is smaller than the block HISTOGRAM mode
 * writes (sized from the same histogram), else that block. */
static ibp_status_t encode_rans(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n, int nthreads,
				int isa, uint8_t *dst, uint64_t *size)
{
	uint64_t sh[256];
	uint8_t table[8] = {0};
	ibpi_exp_rans_hist(src, dt, n, sh);
	uint64_t limit = expf_rans_fallback(sh, s, dt, n, table);
	IBP_TRY(ibpi_exp_rans_encode(src, s, dt, n, sh, limit, nthreads, dst, size));
	if (*size)
		return IBP_OK;
	return encode_block(whole(src), s, dt, n, table, IBP_EXP_TABLE_HISTOGRAM, nthreads, isa, dst, size);
}

/* One block per opts (the table resolved here). */
static ibp_status_t encode_one(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
			       const ibp_exp_opts_t *o, int nthreads, int isa, uint8_t *dst, uint64_t *size)
{
	uint8_t table[8] = {0};
	if (o->table_mode == IBP_EXP_TABLE_RANS)
		return encode_rans(src, s, dt, n, nthreads, isa, dst, size);
	IBP_TRY(resolve_table(src, s, dt, n, o, isa, table));
	return encode_block(whole(src), s, dt, n, table, (uint32_t)o->table_mode, nthreads, isa, dst, size);
}

ibp_status_t ibp_exp_encode(const void *src, ibp_dtype_t dt, uint64_t n, const ibp_exp_opts_t *opts, void *dst,
			    uint64_t dst_cap, uint64_t *dst_size)
{
	expf_shape_t s;
	ibp_exp_opts_t def;
	if (!dst || !dst_size || (!src && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode: NULL argument");
	IBP_TRY(shape_for(dt, n, &s, "exp_encode"));
	IBP_TRY(IBPI_OPTS_CHECK(opts, "exp_encode", "ibp_exp_opts_t"));
	if (!opts) {
		ibp_exp_opts_default(&def);
		opts = &def;
	}
	if (opts->nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode: nthreads %d < 0", opts->nthreads);
	uint64_t bound = bound_of(&s, n);
	if (dst_cap < bound)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "exp_encode: dst_cap %llu < bound %llu",
				(unsigned long long)dst_cap, (unsigned long long)bound);
	IBP_TRY(encode_one(src, &s, (uint32_t)dt, n, opts, opts->nthreads, exp_isa(), dst, dst_size));
	if (opts->checksum)
		seal_block(dst, *dst_size);
	return IBP_OK;
}

/* ----------------------------------------------------------------- decode */

static ibp_status_t parse_header(const uint8_t *h, uint64_t src_size, ibp_exp_info_t *info, expf_shape_t *s,
				 expf_layout_t *L)
{
	if (src_size < EXPF_HEADER_BYTES)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu bytes, header needs 64", (unsigned long long)src_size);
	if (expf_ld32(h + EXPF_OFF_MAGIC) != EXPF_MAGIC)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: bad magic 0x%08x", expf_ld32(h + EXPF_OFF_MAGIC));
	if (h[EXPF_OFF_VERSION] != EXPF_VERSION && h[EXPF_OFF_VERSION] != EXPF_VERSION_1)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: version %u, expected 1 or 2", h[EXPF_OFF_VERSION]);
	if (!expf_shape_of(h[EXPF_OFF_DTYPE], s))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: dtype %u is not bf16/f16/f32", h[EXPF_OFF_DTYPE]);
	uint32_t mode = h[EXPF_OFF_MODE], tsrc = h[EXPF_OFF_TSRC];
	if (mode > EXPF_MODE_RANS)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: mode %u", mode);
	if (h[EXPF_OFF_GLOG2] != EXPF_GROUP_LOG2)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: group log2 %u, expected 12", h[EXPF_OFF_GLOG2]);
	if (!expf_reserved_ok(h))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: flags or reserved header bytes not as version %u requires",
				h[EXPF_OFF_VERSION]);
	uint64_t n = expf_ld64(h + EXPF_OFF_N), esc = expf_ld64(h + EXPF_OFF_ESC);
	uint64_t block = expf_ld64(h + EXPF_OFF_BLOCK), stat = expf_ld64(h + EXPF_OFF_STATIC);
	if (n > EXPF_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu elements", (unsigned long long)n);
	expf_layout_of(s, n, L);
	info->dtype = (ibp_dtype_t)h[EXPF_OFF_DTYPE];
	info->n = n;
	info->raw = mode == EXPF_MODE_RAW;
	info->table_mode = (ibp_exp_table_mode_t)tsrc;
	memcpy(info->table.field, h + EXPF_OFF_TABLE, EXPF_NCODES);
	info->escapes = esc;
	info->static_bytes = stat;
	info->block_bytes = block;
	if (mode == EXPF_MODE_RAW) {
		uint64_t raw = expf_raw_bytes(s, n);
		if (tsrc || esc || !all_zero(h + EXPF_OFF_TABLE, EXPF_NCODES) || block != raw || stat != raw)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: raw header fields inconsistent");
	} else if (mode == EXPF_MODE_RANS) {
		IBP_TRY(ibpi_exp_rans_parse(h, src_size, s, n, esc, stat, block));
	} else {
		if (tsrc > IBP_EXP_TABLE_GIVEN)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: table source %u", tsrc);
		if (!table_valid(s, h + EXPF_OFF_TABLE))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: table not strictly ascending within the field range");
		if (esc > n)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu escapes > %llu elements",
					(unsigned long long)esc, (unsigned long long)n);
		if (stat != L->static_bytes || block != expf_coded_bytes(L, esc))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: sizes %llu/%llu do not match n=%llu, escapes=%llu",
					(unsigned long long)stat, (unsigned long long)block, (unsigned long long)n,
					(unsigned long long)esc);
	}
	if (block > src_size)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu bytes claimed, %llu available",
				(unsigned long long)block, (unsigned long long)src_size);
	return IBP_OK;
}

ibp_status_t ibp_exp_block_info(const void *src, uint64_t src_size, ibp_exp_info_t *info)
{
	expf_shape_t s;
	expf_layout_t L;
	if (!src || !info)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_block_info: NULL argument");
	return parse_header(src, src_size, info, &s, &L);
}

static void dec_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	exp_dec_block_t *b = ctx;
	int ok;
#if EXP_HAVE_AVX2_BUILD
	if (b->isa == 2)
		ok = ibpi_exp_dec_groups_avx512(b, begin, end, &b->bad_group[tid]);
	else if (b->isa)
		ok = ibpi_exp_dec_groups_avx2(b, begin, end, &b->bad_group[tid]);
	else
#endif
		ok = ibpi_exp_dec_groups_portable(b, begin, end, &b->bad_group[tid]);
	b->bad[tid] = !ok;
}

/* Checks everything but the group contents: prefixes, padding, plane tails. */
static ibp_status_t check_coded_frame(const uint8_t *src, const expf_shape_t *s, const expf_layout_t *L,
				      uint64_t esc)
{
	uint64_t n = L->n, prev = 0;
	for (uint64_t g = 0; g < L->ngroups; g++) {
		uint64_t p = exp_ld64(src + L->off_prefix + 8 * g);
		if (g == 0 ? p != 0 : (p < prev || p - prev > EXPF_GROUP))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: escape prefix of group %llu is %llu",
					(unsigned long long)g, (unsigned long long)p);
		prev = p;
	}
	if (L->ngroups && (esc < prev || esc - prev > expf_group_len(n, L->ngroups - 1)))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: escape total %llu inconsistent with prefixes",
				(unsigned long long)esc);
	uint64_t pend = L->off_prefix + 8 * L->ngroups;
	if (!all_zero(src + pend, L->off_planes - pend))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after prefixes is not zero");
	uint64_t full = n / 64, tail = n % 64;
	for (uint32_t p = 0; p < L->nplanes; p++) {
		const uint8_t *pl = src + L->off_planes + p * L->plane_bytes;
		uint64_t from = full * 8;
		if (tail) {
			if (exp_ld64(pl + from) >> tail)
				return ibpi_fail(IBP_ERR_CORRUPT, "exp block: plane %u has bits past element %llu", p,
						(unsigned long long)n);
			from += 8;
		}
		if (!all_zero(pl + from, L->plane_bytes - from))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: plane %u padding is not zero", p);
	}
	pend = L->off_planes + L->nplanes * L->plane_bytes;
	if (!all_zero(src + pend, L->off_lo - pend))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after planes is not zero");
	pend = L->off_lo + n * s->lo_bytes;
	if (s->hi_bytes) {
		if (!all_zero(src + pend, L->off_hi - pend))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after the low section is not zero");
		pend = L->off_hi + n * s->hi_bytes;
	}
	if (!all_zero(src + pend, L->static_bytes - pend))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding of the static part is not zero");
	uint64_t end = expf_coded_bytes(L, esc);
	if (!all_zero(src + L->static_bytes + esc, end - L->static_bytes - esc))
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after escapes is not zero");
	return IBP_OK;
}

/* A checksummed block's checksum, checked before anything else in its
 * header is believed: only the magic, the version, the flag and the block
 * size (bounded by src_size) are read first. */
static ibp_status_t verify_block(const uint8_t *h, uint64_t src_size, unsigned flags)
{
	if (src_size < EXPF_HEADER_BYTES || expf_ld32(h + EXPF_OFF_MAGIC) != EXPF_MAGIC ||
	    h[EXPF_OFF_VERSION] != EXPF_VERSION || !(h[EXPF_OFF_FLAGS] & EXPF_FLAG_CHECKSUM) ||
	    (flags & IBP_EXP_TRUSTED))
		return IBP_OK; /* nothing to verify: parse_header judges the rest */
	uint64_t block = expf_ld64(h + EXPF_OFF_BLOCK);
	if (block < EXPF_HEADER_BYTES || block > src_size)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu bytes claimed, %llu available",
				(unsigned long long)block, (unsigned long long)src_size);
	if (ibpi_block_sum(h, block) != expf_ld64(h + EXPF_OFF_SUM))
		return ibpi_fail(IBP_ERR_CHECKSUM, "exp block: checksum mismatch (%llu bytes)", (unsigned long long)block);
	return IBP_OK;
}

static ibp_status_t decode_block(const uint8_t *src, uint64_t src_size, uint32_t dt, uint64_t n, uint8_t *dst,
				 int nthreads, unsigned flags, uint64_t split, uint8_t *dst2)
{
	ibp_exp_info_t info;
	expf_shape_t s;
	expf_layout_t L;
	IBP_TRY(verify_block(src, src_size, flags));
	IBP_TRY(parse_header(src, src_size, &info, &s, &L));
	if ((uint32_t)info.dtype != dt || info.n != n)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: holds %llu %s, expected %llu %s",
				(unsigned long long)info.n, ibp_dtype_name(info.dtype), (unsigned long long)n,
				ibp_dtype_name((ibp_dtype_t)dt));
	if (info.raw) {
		if (!all_zero(src + EXPF_HEADER_BYTES + n * s.esize, info.block_bytes - EXPF_HEADER_BYTES - n * s.esize))
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block: raw padding is not zero");
		const uint64_t n0 = split < n ? split : n;
		if (n0)
			memcpy(dst, src + EXPF_HEADER_BYTES, n0 * s.esize);
		if (n > n0)
			memcpy(dst2, src + EXPF_HEADER_BYTES + n0 * s.esize, (n - n0) * s.esize);
		return IBP_OK;
	}
	if (src[EXPF_OFF_MODE] == EXPF_MODE_RANS)
		return ibpi_exp_rans_decode(src, &s, dt, n, info.escapes, dst, split, dst2, nthreads, exp_isa());
	IBP_TRY(check_coded_frame(src, &s, &L, info.escapes));
	exp_dec_block_t *b = malloc(sizeof(*b));
	if (!b)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_decode: no memory for %zu bytes", sizeof(*b));
	b->src = src;
	b->dst = dst;
	b->dst2 = dst2;
	b->split = split;
	b->s = s;
	b->L = L;
	b->dt = dt;
	b->escapes = info.escapes;
	b->isa = exp_isa();
	memcpy(b->table, info.table.field, EXPF_NCODES);
	b->table[7] = 0;
	memset(b->in_table, 0, sizeof(b->in_table));
	for (uint32_t k = 0; k < EXPF_NCODES; k++)
		b->in_table[b->table[k]] = 1;
	uint64_t per = L.ngroups / MIN_GROUPS_PER_THREAD;
	int nt = ibpi_parallel_threads(nthreads, per ? per : 1);
	ibp_status_t st = ibpi_parallel_for(nt, L.ngroups, dec_task, b);
	nt = ibpi_parallel_threads(nt, L.ngroups);
	for (int i = 0; st == IBP_OK && i < nt; i++)
		if (b->bad[i])
			st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: group %llu: escapes do not match its zero codes",
				      (unsigned long long)b->bad_group[i]);
	free(b);
	return st;
}

ibp_status_t ibp_exp_decode_ext(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				int nthreads, unsigned flags)
{
	expf_shape_t s;
	if (!src || (!dst && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode: NULL argument");
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode: nthreads %d < 0", nthreads);
	if (flags & ~IBP_EXP_TRUSTED)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode: unknown flags 0x%x", flags);
	IBP_TRY(shape_for(dt, n, &s, "exp_decode"));
	return decode_block(src, src_size, (uint32_t)dt, n, dst, nthreads, flags, UINT64_MAX, NULL);
}

ibp_status_t ibp_exp_decode(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst, int nthreads)
{
	return ibp_exp_decode_ext(src, src_size, dt, n, dst, nthreads, 0);
}

/* ---------------------------------------------------------------- batches */

static ibp_status_t batch_shape(ibp_dtype_t dt, uint64_t n, uint64_t chunk, expf_shape_t *s, uint64_t *nchunks,
				const char *fn)
{
	IBP_TRY(shape_for(dt, n, s, fn));
	if (chunk == 0 || chunk > EXPF_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: chunk_elems %llu not in 1..2^56", fn, (unsigned long long)chunk);
	*nchunks = (n + chunk - 1) / chunk;
	return IBP_OK;
}

ibp_status_t ibp_exp_batch_bound(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes)
{
	expf_shape_t s;
	uint64_t nc = 0;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_batch_bound: bytes is NULL");
	IBP_TRY(batch_shape(dt, n, chunk_elems, &s, &nc, "exp_batch_bound"));
	uint64_t full = n / chunk_elems, rest = n % chunk_elems;
	*bytes = full * bound_of(&s, chunk_elems) + (rest ? bound_of(&s, rest) : 0);
	return IBP_OK;
}

typedef struct batch_ctx {
	const uint8_t *src;
	uint8_t *dst;
	expf_shape_t s;
	uint32_t dt;
	uint64_t n, chunk, stride;
	const ibp_exp_opts_t *opts;
	const uint64_t *offsets;
	uint64_t src_size;
	uint64_t *sizes;
	int inner_threads; /* threads inside one block (one chunk only) */
	int isa;           /* encoder: exp_isa() of the call */
	unsigned flags;    /* decoder flags */
	ibp_status_t st[IBP_MAX_THREADS];
	char msg[IBP_MAX_THREADS][160];
} batch_ctx_t;

static void batch_enc_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	batch_ctx_t *c = ctx;
	c->st[tid] = IBP_OK;
	for (uint64_t i = begin; i < end; i++) {
		uint64_t len = c->n - i * c->chunk < c->chunk ? c->n - i * c->chunk : c->chunk;
		const uint8_t *src = c->src + i * c->chunk * c->s.esize;
		ibp_status_t st = encode_one(src, &c->s, c->dt, len, c->opts, c->inner_threads, c->isa,
					     c->dst + i * c->stride, &c->sizes[i]);
		if (st == IBP_OK && c->opts->checksum)
			seal_block(c->dst + i * c->stride, c->sizes[i]);
		if (st != IBP_OK) {
			c->st[tid] = st;
			snprintf(c->msg[tid], sizeof(c->msg[tid]), "chunk %llu: %s", (unsigned long long)i,
				 ibp_last_error());
			return;
		}
	}
}

ibp_status_t ibp_exp_encode_batch(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				  const ibp_exp_opts_t *opts, void *dst, uint64_t dst_cap, uint64_t *offsets)
{
	expf_shape_t s;
	uint64_t nc = 0, need = 0;
	ibp_exp_opts_t def;
	if (!dst || !offsets || (!src && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_batch: NULL argument");
	IBP_TRY(batch_shape(dt, n, chunk_elems, &s, &nc, "exp_encode_batch"));
	IBP_TRY(IBPI_OPTS_CHECK(opts, "exp_encode_batch", "ibp_exp_opts_t"));
	if (!opts) {
		ibp_exp_opts_default(&def);
		opts = &def;
	}
	if (opts->nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_batch: nthreads %d < 0", opts->nthreads);
	IBP_TRY(ibp_exp_batch_bound(dt, n, chunk_elems, &need));
	if (dst_cap < need)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "exp_encode_batch: dst_cap %llu < bound %llu",
				(unsigned long long)dst_cap, (unsigned long long)need);
	offsets[0] = 0;
	if (nc == 0)
		return IBP_OK;
	/* each chunk encodes into its bound-sized slot, then slots are packed */
	batch_ctx_t *c = calloc(1, sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_encode_batch: no memory");
	c->sizes = malloc(nc * sizeof(uint64_t));
	if (!c->sizes) {
		free(c);
		return ibpi_fail(IBP_ERR_NOMEM, "exp_encode_batch: no memory for %llu sizes", (unsigned long long)nc);
	}
	c->src = src;
	c->dst = dst;
	c->s = s;
	c->dt = (uint32_t)dt;
	c->n = n;
	c->chunk = chunk_elems;
	c->stride = bound_of(&s, chunk_elems);
	c->opts = opts;
	c->inner_threads = nc == 1 ? opts->nthreads : 1;
	c->isa = exp_isa();
	int nt = ibpi_parallel_threads(opts->nthreads, nc);
	ibp_status_t st = ibpi_parallel_for(nt, nc, batch_enc_task, c);
	for (int i = 0; st == IBP_OK && i < nt; i++)
		if (c->st[i] != IBP_OK)
			st = ibpi_fail(c->st[i], "exp_encode_batch: %s", c->msg[i]);
	if (st == IBP_OK) {
		uint64_t at = 0;
		for (uint64_t i = 0; i < nc; i++) {
			if (at != i * c->stride)
				memmove((uint8_t *)dst + at, (uint8_t *)dst + i * c->stride, c->sizes[i]);
			at += c->sizes[i];
			offsets[i + 1] = at;
		}
	}
	free(c->sizes);
	free(c);
	return st;
}

static void batch_dec_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	batch_ctx_t *c = ctx;
	c->st[tid] = IBP_OK;
	for (uint64_t i = begin; i < end; i++) {
		uint64_t len = c->n - i * c->chunk < c->chunk ? c->n - i * c->chunk : c->chunk;
		uint64_t off = c->offsets[i], end_off = c->offsets[i + 1];
		ibp_status_t st = decode_block(c->src + off, end_off - off, c->dt, len,
					       c->dst + i * c->chunk * c->s.esize, 1, c->flags, UINT64_MAX, NULL);
		if (st != IBP_OK) {
			c->st[tid] = st;
			snprintf(c->msg[tid], sizeof(c->msg[tid]), "chunk %llu: %s", (unsigned long long)i,
				 ibp_last_error());
			return;
		}
	}
}

ibp_status_t ibp_exp_decode_batch(const void *src, uint64_t src_size, const uint64_t *offsets, ibp_dtype_t dt,
				  uint64_t n, uint64_t chunk_elems, void *dst, int nthreads)
{
	return ibp_exp_decode_batch_ext(src, src_size, offsets, dt, n, chunk_elems, dst, nthreads, 0);
}

ibp_status_t ibp_exp_decode_batch_ext(const void *src, uint64_t src_size, const uint64_t *offsets, ibp_dtype_t dt,
				      uint64_t n, uint64_t chunk_elems, void *dst, int nthreads, unsigned flags)
{
	expf_shape_t s;
	uint64_t nc = 0;
	if (!src || !offsets || (!dst && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_batch: NULL argument");
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_batch: nthreads %d < 0", nthreads);
	if (flags & ~IBP_EXP_TRUSTED)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_batch: unknown flags 0x%x", flags);
	IBP_TRY(batch_shape(dt, n, chunk_elems, &s, &nc, "exp_decode_batch"));
	for (uint64_t i = 0; i < nc; i++)
		if (offsets[i] > offsets[i + 1] || offsets[i + 1] > src_size)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp_decode_batch: offsets[%llu..%llu] = %llu..%llu outside %llu bytes",
					(unsigned long long)i, (unsigned long long)i + 1, (unsigned long long)offsets[i],
					(unsigned long long)offsets[i + 1], (unsigned long long)src_size);
	if (nc == 0)
		return IBP_OK;
	batch_ctx_t *c = calloc(1, sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_decode_batch: no memory");
	c->src = src;
	c->dst = dst;
	c->s = s;
	c->dt = (uint32_t)dt;
	c->n = n;
	c->chunk = chunk_elems;
	c->offsets = offsets;
	c->src_size = src_size;
	c->flags = flags;
	int nt = ibpi_parallel_threads(nthreads, nc);
	ibp_status_t st = ibpi_parallel_for(nt, nc, batch_dec_task, c);
	for (int i = 0; st == IBP_OK && i < nt; i++)
		if (c->st[i] != IBP_OK)
			st = ibpi_fail(c->st[i], "exp_decode_batch: %s", c->msg[i]);
	free(c);
	return st;
}

ibp_status_t ibpi_exp_encode_split(const void *src, uint64_t split, const void *src2, ibp_dtype_t dt, uint64_t n,
				   const ibp_exp_opts_t *opts, int prefetch, int isa, void *dst, uint64_t dst_cap,
				   uint64_t *dst_size)
{
	expf_shape_t s;
	if (!dst || !dst_size || !opts || (!src && n) || (split < n && (!src2 || split % 64)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_split: NULL argument or split %llu not a multiple "
				"of 64", (unsigned long long)split);
	if (isa < 0 || isa > isa_max()) /* a build this CPU cannot run */
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_split: isa %d, not one of 0..%d", isa, isa_max());
	IBP_TRY(shape_for(dt, n, &s, "exp_encode_split"));
	IBP_TRY(IBPI_OPTS_CHECK(opts, "exp_encode_split", "ibp_exp_opts_t"));
	/* only tables that need no pass over the elements */
	if (!(opts->table_mode == IBP_EXP_TABLE_SIGMA && opts->sigma > 0.0) && opts->table_mode != IBP_EXP_TABLE_GIVEN)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_split: table mode %d%s reads the elements first",
				(int)opts->table_mode, opts->table_mode == IBP_EXP_TABLE_SIGMA ? " with sigma 0" : "");
	uint64_t bound = bound_of(&s, n);
	if (dst_cap < bound)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "exp_encode_split: dst_cap %llu < bound %llu",
				(unsigned long long)dst_cap, (unsigned long long)bound);
	uint8_t table[8] = {0};
	IBP_TRY(resolve_table(src, &s, (uint32_t)dt, n, opts, isa, table));
	IBP_TRY(encode_block((enc_in_t){ src, src2, split, prefetch != 0 }, &s, (uint32_t)dt, n, table,
			     (uint32_t)opts->table_mode, 1, isa, dst, dst_size));
	if (opts->checksum != 0) /* sealed as ibp_exp_encode seals */
		seal_block(dst, *dst_size);
	return IBP_OK;
}

ibp_status_t ibpi_exp_decode_split(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				   uint64_t split, void *dst2)
{
	expf_shape_t s;
	if (!src || (!dst && n) || (split < n && (!dst2 || split % 64)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_split: NULL argument or split %llu not a multiple "
				"of 64", (unsigned long long)split);
	IBP_TRY(shape_for(dt, n, &s, "exp_decode_split"));
	return decode_block(src, src_size, (uint32_t)dt, n, dst, 1, 0, split, dst2);
}
