/* exp_codec_internal.h - state shared by the exponent codec's driver
 * (exp_codec.c) and its hot loops, which exp_codec_impl.h compiles twice:
 * portable (exp_codec.c) and AVX2 (exp_codec_avx2.c). Both variants run
 * the same C, so their output is identical by construction. */
#ifndef IBP_EXP_CODEC_INTERNAL_H
#define IBP_EXP_CODEC_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "exp/exp_format.h"
#include "util/parallel.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the exponent codec assumes a little-endian host"
#endif

/* One element's bits (2 or 4 bytes, unaligned), and back. */
static inline uint32_t exp_ld_elem(const uint8_t *p, uint32_t esize)
{
	if (esize == 2) {
		uint16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline void exp_st_elem(uint8_t *p, uint32_t v, uint32_t esize)
{
	if (esize == 2) {
		uint16_t h = (uint16_t)v;
		memcpy(p, &h, 2);
	} else {
		memcpy(p, &v, 4);
	}
}

typedef struct exp_enc_block {
	const uint8_t *src;
	const uint8_t *src2; /* elements from split on come from src2 (split a multiple of 64; else ~0) */
	uint64_t split;
	uint8_t *dst;
	expf_shape_t s;
	expf_layout_t L;
	uint32_t dt;
	uint8_t table[8];
	/* per tid: its group range and escapes (arrays of the call's threads) */
	uint64_t *range_begin, *range_end, *range_esc;
	int isa; /* the encoder's build: 0 portable, 1 AVX2, 2 AVX-512 (BW + VBMI) */
	int prefetch; /* 1: the source is not in cache (prefetched EXP_ENC_PF_BYTES ahead) */
} exp_enc_block_t;

/* How far ahead the encoder prefetches an uncached source, in bytes: a
 * page, about half a microsecond of encoding. 2 KiB left the warm KV store
 * waiting on its loads; 4 KiB took a tenth off it, 6 and 8 KiB less
 * (docs/BENCHMARKS.md, 2026-12-01). */
#define EXP_ENC_PF_BYTES 4096u

typedef struct exp_dec_block {
	const uint8_t *src;
	uint8_t *dst;
	uint8_t *dst2;  /* elements from split on go to dst2 (split a multiple of 64; else ~0) */
	uint64_t split;
	expf_shape_t s;
	expf_layout_t L;
	uint32_t dt;
	uint8_t table[8];
	uint8_t in_table[256]; /* 1 where a field is a table entry */
	uint64_t escapes;
	int isa; /* the decoder's build: 0 portable, 1 AVX2, 2 AVX-512 (BW + VBMI) */
	int bad[IBP_MAX_THREADS];
	uint64_t bad_group[IBP_MAX_THREADS];
} exp_dec_block_t;

/* spread8[b]: byte j is bit j of b (exp_tables.c). */
extern const uint64_t ibpi_exp_spread8[256];

/* Lane sums of one full group (4096 elements) as the mean-square order
 * defines them, reduced by the halving tree; *nonfinite += Inf/NaN count. */
double ibpi_exp_ms_group_portable(const uint8_t *p, uint32_t dt, uint64_t *nonfinite);
double ibpi_exp_ms_group_avx2(const uint8_t *p, uint32_t dt, uint64_t *nonfinite);

/* Encodes groups [g0, g1); escapes go to esc in order; per-group counts to
 * the prefix slots. Returns the escapes written. */
uint64_t ibpi_exp_enc_groups_portable(const exp_enc_block_t *b, uint64_t g0, uint64_t g1, uint8_t *esc);
uint64_t ibpi_exp_enc_groups_avx2(const exp_enc_block_t *b, uint64_t g0, uint64_t g1, uint8_t *esc);

/* Decodes groups [g0, g1); returns 1, or 0 with *bad = the corrupt group. */
int ibpi_exp_dec_groups_portable(const exp_dec_block_t *b, uint64_t g0, uint64_t g1, uint64_t *bad);
int ibpi_exp_dec_groups_avx2(const exp_dec_block_t *b, uint64_t g0, uint64_t g1, uint64_t *bad);
int ibpi_exp_dec_groups_avx512(const exp_dec_block_t *b, uint64_t g0, uint64_t g1, uint64_t *bad);
uint64_t ibpi_exp_enc_groups_avx512(const exp_enc_block_t *b, uint64_t g0, uint64_t g1, uint8_t *esc);
double ibpi_exp_ms_group_avx512(const uint8_t *p, uint32_t dt, uint64_t *nonfinite);

#if defined(__x86_64__) || defined(_M_X64)
#define EXP_HAVE_AVX2_BUILD 1
#else
#define EXP_HAVE_AVX2_BUILD 0
#endif

#endif /* IBP_EXP_CODEC_INTERNAL_H */
