/* quant_rules.h - the per-element arithmetic of the lossy collectives'
 * quantizers (DynamiQ, LSQ, PTS), one definition compiled by the scalar CPU code
 * (src/coll/dynamiq.c, src/coll/rcmoe.c) and the CUDA kernels
 * (kernels/dynamiq.cu, kernels/rcmoe.cu), so both write the same bytes and
 * decode the same floats. The SIMD kernels of src/coll are checked against
 * the scalar code byte for byte (tests/coll/test_dynamiq.c, test_rcmoe.c).
 *
 * Every float operation goes through IBPQ_MUL/DIV/ADD/SUB: nvcc's _rn
 * intrinsics on the device (never contracted into FMAs), plain C on the
 * host (C11 without extensions: no contraction either), the same IEEE
 * operations in the same order. */
#ifndef IBP_UTIL_QUANT_RULES_H
#define IBP_UTIL_QUANT_RULES_H

#include <math.h>
#include <stdint.h>

#include "util/hd.h"
#include "util/mix.h"

#if defined(__CUDA_ARCH__)
#define IBPQ_MUL(a, b) __fmul_rn((a), (b))
#define IBPQ_DIV(a, b) __fdiv_rn((a), (b))
#define IBPQ_ADD(a, b) __fadd_rn((a), (b))
#define IBPQ_SUB(a, b) __fsub_rn((a), (b))
#else
#define IBPQ_MUL(a, b) ((a) * (b))
#define IBPQ_DIV(a, b) ((a) / (b))
#define IBPQ_ADD(a, b) ((a) + (b))
#define IBPQ_SUB(a, b) ((a) - (b))
#endif

/* DynamiQ: a group of 16 entries shares one UINT8 scale, a super-group
 * (SG) of 256 one BF16 scale. */
#define IBPQ_DQ_G 16u
#define IBPQ_DQ_S 256u

/* The hash multipliers of the stochastic rounding: coordinate; rank
 * (entry rounding); group index and rank (group-scale rounding); the
 * group-scale stream's tag; LSQ's row-scale stream's tag. */
#define IBPQ_K_IDX 0x9e3779b97f4a7c15ull
#define IBPQ_K_RANK 0xd6e8feb86659fd93ull
#define IBPQ_K_GRP 0xd1b54a32d192ed03ull
#define IBPQ_K_GRANK 0x8cb92ba72f3d8dd7ull
#define IBPQ_K_GTAG 0x5ca1e5ull
#define IBPQ_K_LSQ_STAG 0x736361ull

/* LSQ's stream: 8 header bytes (S as FP32, bits B, scale bits K, row as u16). */
#define IBPQ_LSQ_HDR 8u

/* The key every uniform of one call derives from. */
static inline IBP_HD uint64_t ibpq_call_key(uint64_t seed, uint64_t seq)
{
	return ibp_mix64(seed ^ ibp_mix64(seq));
}

/* DynamiQ's uniform for entry `gi` (global coordinate) on rank w. */
static inline IBP_HD float ibpq_dq_u_entry(uint64_t key, uint64_t gi, int w)
{
	return ibp_u01(ibp_mix64(key ^ (gi * IBPQ_K_IDX) ^ ((uint64_t)(w + 1) * IBPQ_K_RANK)));
}

/* DynamiQ's uniform for group `gidx` (global group index) on rank w. */
static inline IBP_HD float ibpq_dq_u_group(uint64_t key, uint64_t gidx, int w)
{
	return ibp_u01(ibp_mix64(key ^ IBPQ_K_GTAG ^ (gidx * IBPQ_K_GRP) ^ ((uint64_t)(w + 1) * IBPQ_K_GRANK)));
}

/* The correlated variant's uniform: rank w draws in its own slice
 * [k/n, (k+1)/n), shifted by a random offset per coordinate. */
static inline IBP_HD float ibpq_dq_u_correlated(uint64_t key, uint64_t gi, int w, int n, float g)
{
	uint64_t k = ((uint64_t)w + ibp_mix64(key ^ gi) % (uint64_t)n) % (uint64_t)n;
	return IBPQ_DIV(IBPQ_ADD((float)k, g), (float)n);
}

/* A group's UINT8 scale code: 255 * gmax / sf rounded stochastically by
 * uniform us (unbiased), capped at 255. */
static inline IBP_HD uint8_t ibpq_dq_group_code(float gmax, float sf, float us)
{
	float t = sf > 0 ? IBPQ_DIV(IBPQ_MUL(255.0f, gmax), sf) : 0.0f, fl = floorf(t);
	float r = IBPQ_ADD(fl, us < IBPQ_SUB(t, fl) ? 1.0f : 0.0f);
	return (uint8_t)(r > 255 ? 255 : r);
}

/* The decoded scale of a group: code * sf / 255 (exact for 255). */
static inline IBP_HD float ibpq_dq_group_scale(uint8_t code, float sf)
{
	return IBPQ_DIV(IBPQ_MUL((float)code, sf), 255.0f);
}

/* Entry y's q-bit code against its group scale m: the level below |y|/m
 * (the table `tab` of 1024 buckets gives a start, levels lv[0..R]), rounded
 * up with probability (a - lv[lo]) / (lv[lo+1] - lv[lo]) by uniform u; the
 * sign in the top bit (none for level 0). */
static inline IBP_HD unsigned ibpq_dq_code(float y, float m, const float *lv, const uint8_t *tab, int q, float u)
{
	const int R = (1 << (q - 1)) - 1;
	float a = m > 0 ? IBPQ_DIV(fabsf(y), m) : 0.0f;
	if (a > 1)
		a = 1; /* only with kept scales: the partial sum outgrew them */
	int lo = tab[a < 1 ? (int)IBPQ_MUL(a, 1024.0f) : 1023]; /* then the largest r < R with lv[r] <= a */
	while (lo < R - 1 && lv[lo + 1] <= a)
		lo++;
	float pu = IBPQ_DIV(IBPQ_SUB(a, lv[lo]), IBPQ_SUB(lv[lo + 1], lv[lo]));
	unsigned k = (unsigned)lo + (u < pu ? 1u : 0u);
	return k | ((y < 0 && k ? 1u : 0u) << (q - 1));
}

/* The value of q-bit code v in a group of scale gs. */
static inline IBP_HD float ibpq_dq_value(unsigned v, int q, const float *lv, float gs)
{
	float m = IBPQ_MUL(lv[v & ((1u << (q - 1)) - 1)], gs);
	return (v >> (q - 1)) ? -m : m;
}

/* LSQ's stream size for n entries, rows of `row`, B bits per entry, K bits
 * per row scale (0: FP32 scales). */
static inline IBP_HD uint64_t ibpq_lsq_bytes(uint64_t n, uint64_t row, int B, int K)
{
	uint64_t rows = (n + row - 1) / row;
	return IBPQ_LSQ_HDR + (K ? (rows * (uint64_t)K + 7) / 8 : rows * 4) + (n * (uint64_t)B + 7) / 8;
}

/* The parameters a stream may carry. */
static inline IBP_HD int ibpq_lsq_params_ok(uint64_t row, int B, int K)
{
	return row >= 1 && row <= 65535 && (B == 2 || B == 4 || B == 8) && (K == 0 || K == 4 || K == 8);
}

/* Row r's K-bit scale code: s / S * (2^K - 1), rounded stochastically
 * (unbiased), capped. */
static inline IBP_HD unsigned ibpq_lsq_scale_code(float s, float S, int K, uint64_t key, uint64_t r)
{
	const unsigned Ls = (1u << K) - 1;
	float t = S > 0 ? IBPQ_MUL(IBPQ_DIV(s, S), (float)Ls) : 0.0f, fl = floorf(t);
	unsigned v = (unsigned)fl + (ibp_u01(ibp_mix64(key ^ IBPQ_K_LSQ_STAG ^ (r * IBPQ_K_GRP))) < IBPQ_SUB(t, fl));
	return v > Ls ? Ls : v;
}

/* The decoded row scale of K-bit code c. */
static inline IBP_HD float ibpq_lsq_scale(unsigned c, int K, float S)
{
	return IBPQ_MUL(IBPQ_DIV((float)c, (float)((1u << K) - 1)), S);
}

/* Entry i (value x) of a row of scale s: |x| / s * (2^(B-1) - 1) rounded
 * stochastically, capped; the sign in the top bit (none for 0). */
static inline IBP_HD unsigned ibpq_lsq_code(float x, float s, int B, uint64_t key, uint64_t i)
{
	const unsigned Lm = (1u << (B - 1)) - 1;
	float t = s > 0 ? IBPQ_MUL(IBPQ_DIV(fabsf(x), s), (float)Lm) : 0.0f, fl = floorf(t);
	unsigned m = (unsigned)fl + (ibp_u01(ibp_mix64(key ^ (i * IBPQ_K_IDX))) < IBPQ_SUB(t, fl) ? 1u : 0u);
	if (m > Lm)
		m = Lm;
	return m | (x < 0 && m ? 1u << (B - 1) : 0u);
}

/* The value of B-bit code v in a row of scale s. */
static inline IBP_HD float ibpq_lsq_value(unsigned v, int B, float s)
{
	const unsigned Lm = (1u << (B - 1)) - 1;
	float m = IBPQ_DIV(IBPQ_MUL((float)(v & Lm), s), (float)Lm);
	return (v >> (B - 1)) ? -m : m;
}

/* PTS: whether entry i (value x) survives: with probability ps * |x| / m
 * (m the largest |x|), by the coordinate's uniform. */
static inline IBP_HD int ibpq_pts_keep(float x, float m, float ps, uint64_t key, uint64_t i)
{
	float p = m > 0 ? IBPQ_DIV(IBPQ_MUL(ps, fabsf(x)), m) : 0.0f;
	return ibp_u01(ibp_mix64(key ^ (i * IBPQ_K_IDX))) < p;
}

#endif /* IBP_UTIL_QUANT_RULES_H */
