/* dynamiq_simd.h - vector kernels of the DynamiQ, LSQ and PTS codecs
 * (dynamiq_avx2.c, dynamiq_avx512.c, rcmoe_avx2.c, rcmoe_avx512.c) and
 * their run-time dispatch (coll_simd.c). The scalar code in dynamiq.c and
 * rcmoe.c is the reference: every kernel produces the same bytes and the
 * same floats, bit for bit (the same IEEE operations in the same order per
 * element; only reductions that are exact in any order, maxima, are
 * reordered). Cases a kernel does not cover (a short last super-group or
 * row, kept scales, correlated rounding, non-finite values) take the
 * scalar path. tests/coll/test_dynamiq.c and test_rcmoe.c compare every
 * implementation with the scalar one byte for byte. */
#ifndef IBP_COLL_DYNAMIQ_SIMD_H
#define IBP_COLL_DYNAMIQ_SIMD_H

#include <stdint.h>

#include "ibp/types.h"
#include "util/mix.h"
#include "util/quant_rules.h"

#define DQ_G IBPQ_DQ_G /* DynamiQ group: entries sharing one UINT8 scale */
#define DQ_S IBPQ_DQ_S /* DynamiQ super-group: entries sharing one BF16 scale */

typedef enum coll_simd_impl {
	COLL_SIMD_AUTO = 0,
	COLL_SIMD_SCALAR = 1, /* the reference, any CPU */
	COLL_SIMD_AVX2 = 2,   /* x86-64 AVX2 + BMI2 */
	COLL_SIMD_AVX512 = 3  /* x86-64 AVX-512 F, BW, VL, DQ + BMI2 */
} coll_simd_impl_t;

/* The randomness every codec's rounding goes through (util/mix.h, shared
 * with the CUDA kernels): coll_mix is the splitmix64 finaliser, coll_u01
 * the uniform in [0, 1) of its top 24 bits. */
static inline uint64_t coll_mix(uint64_t z)
{
	return ibp_mix64(z);
}

static inline float coll_u01(uint64_t h)
{
	return ibp_u01(h);
}

/* Packs 8 values < 16 held one per byte of x (byte 0 first) into 4 bytes
 * of nibbles, element 0 in the low nibble; and 8 values < 4 into 2 bytes. */
static inline uint32_t coll_pack_nib(uint64_t x)
{
	x = (x | x >> 4) & 0x00ff00ff00ff00ffull;
	x = (x | x >> 8) & 0x0000ffff0000ffffull;
	return (uint32_t)(x | x >> 16);
}

static inline uint16_t coll_pack_crumb(uint64_t x)
{
	x = (x | x >> 6) & 0x000f000f000f000full;
	x = (x | x >> 12) & 0x000000ff000000ffull;
	return (uint16_t)(x | x >> 24);
}

/* The hash multipliers (util/quant_rules.h, shared with kernels/dynamiq.cu). */
#define DQ_K_IDX IBPQ_K_IDX     /* coordinate */
#define DQ_K_RANK IBPQ_K_RANK   /* rank, entry rounding */
#define DQ_K_GRP IBPQ_K_GRP     /* group index, group-scale rounding */
#define DQ_K_GRANK IBPQ_K_GRANK /* rank, group-scale rounding */
#define DQ_K_GTAG IBPQ_K_GTAG   /* group-scale stream tag */

typedef struct ibpi_dq_kern {
	/* One full super-group (256 entries, 16 groups of 16). */
	/* y[i] = decoded[i] + (x ? x[i] - add : add); gs: the 16 group scales. */
	void (*decode)(const float *lv, const uint8_t *code, int q, const float *gs, const float *x, float add,
		       float *y);
	/* gmax[g] = max |y| over group g; returns 0 when some y is not finite. */
	int (*gmax)(const float *y, float *gmax);
	/* rg[g] = min(255, floor(t) + (u < t - floor(t))), t = 255 gmax[g] / sf (0 if sf is 0), u of hash
	 * base hb and group index g0 + g. */
	void (*rg)(const float *gmax, float sf, uint64_t hb, uint64_t g0, uint8_t *rg);
	/* The codes of the 256 entries at width q (levels lv, search table tab, exact group maxima gmax),
	 * the uniforms of hash base hb and coordinate i0 + i. */
	void (*codes)(const float *lv, const uint8_t *tab, int q, const float *y, const float *gmax, uint64_t hb,
		      uint64_t i0, uint8_t *code);
	/* The statistics of one full SG of src (BF16 or F32): *s = the sum, *s2 = the sum of squares, each in
	 * 16 lanes (lane l: entries l, l + 16, ...; a mul then an add) reduced pairwise (8, 4, 2, 1). */
	void (*stats)(const void *src, ibp_dtype_t dt, float *s, float *s2);
} dq_kern_t;

typedef struct ibpi_rc_kern {
	/* LSQ, elements [i0, i0 + len) of one row (i0 and len multiples of 16). */
	/* *m = max |x| over them; returns 0 when one is not finite. */
	int (*lsq_max)(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float *m);
	/* Their B-bit codes at code + i0 * B / 8 (row scale s >= 0). */
	void (*lsq_enc)(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float s, int B, uint64_t key,
			uint8_t *code);
	/* Their values (row scale s) into dst[i0, i0 + len). */
	void (*lsq_dec)(const uint8_t *code, int B, float s, uint64_t i0, uint64_t len, ibp_dtype_t dt, void *dst);
	/* PTS over k elements. *m = max |g|; returns 0 when one is not finite. */
	int (*pts_max)(const float *g, uint64_t k, float *m);
	/* Presence bitmap (zeroed by the caller) and sign bits; returns the count kept. */
	uint64_t (*pts_keep)(const float *g, uint64_t k, float m, float ps, uint64_t key, uint8_t *pres,
			     uint8_t *sgn);
	/* acc[i] += +-mag where present (a checked stream). */
	void (*pts_add)(const uint8_t *pres, const uint8_t *sgn, uint64_t k, float mag, float *acc);
} rc_kern_t;

/* The kernels in use, or NULL for the scalar reference (AUTO: the best this
 * CPU runs; IBP_FORCE_PORTABLE=1 in the environment forces scalar). */
const rc_kern_t *ibpi_rc_kern(void);
const dq_kern_t *ibpi_dq_kern(void);

/* Chooses the implementation for the whole process (tests, benchmarks);
 * returns 0 when this build or CPU cannot run it. Not thread-safe against
 * codec calls in flight. */
int ibpi_coll_simd_set(coll_simd_impl_t impl);
const char *ibpi_coll_simd_name(coll_simd_impl_t impl);

#if defined(__x86_64__) || defined(_M_X64)
#define COLL_HAVE_SIMD 1
extern const dq_kern_t ibpi_dq_kern_avx2, ibpi_dq_kern_avx512;
extern const rc_kern_t ibpi_rc_kern_avx2, ibpi_rc_kern_avx512;
#endif

#endif /* IBP_COLL_DYNAMIQ_SIMD_H */
