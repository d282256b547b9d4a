/* codec.c - the IBP row codec: codec creation, the public encode/decode API,
 * row validation, batch paths and the portable kernels.
 *
 * docs/FORMAT.md §1 is the specification. The kernels (static part,
 * exception part) come from the template at the end of codec_internal.h,
 * instantiated here with run-based extract/deposit and in codec_bmi2.c
 * with pext/pdep.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/codec.h"
#include "bitpack/codec_internal.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

/* ---------------------------------------------------------------------- */
/* portable kernels                                                        */
/* ---------------------------------------------------------------------- */

IBP_INLINE uint64_t ibp_dep_runs(const ibp_run_t *r, const ibp_run_t *e, uint64_t v)
{
	uint64_t x = 0;
	for (; r < e; r++)
		x |= ((v >> r->src) << r->pos) & r->mask;
	return x;
}

IBP_INLINE uint64_t ibp_ext_runs(const ibp_run_t *r, const ibp_run_t *e, uint64_t x)
{
	uint64_t v = 0;
	for (; r < e; r++)
		v |= ((x & r->mask) >> r->pos) << r->src;
	return v;
}

IBP_INLINE uint64_t ibp_k_dep_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	const ibp_run2_t *r = &cl->nr2[j];
	if (__builtin_expect(!r->more, 1))
		return ((v << r->p0) & r->m0) | (((v >> r->s1) << r->p1) & r->m1);
	return ibp_dep_runs(cl->runs + cl->nrun[j], cl->runs + cl->nrun[j + 1], v);
}
IBP_INLINE uint64_t ibp_k_dep_m(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	return ibp_dep_runs(cl->runs + cl->mrun[j], cl->runs + cl->mrun[j + 1], v);
}
IBP_INLINE uint64_t ibp_k_ext_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	const ibp_run2_t *r = &cl->nr2[j];
	if (__builtin_expect(!r->more, 1))
		return ((x & r->m0) >> r->p0) | (((x & r->m1) >> r->p1) << r->s1);
	return ibp_ext_runs(cl->runs + cl->nrun[j], cl->runs + cl->nrun[j + 1], x);
}
IBP_INLINE uint64_t ibp_k_ext_m(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	return ibp_ext_runs(cl->runs + cl->mrun[j], cl->runs + cl->mrun[j + 1], x);
}

#define IBP_K(name) ibp_portable_##name
#define IBP_CODEC_KERNEL_BODY
#include "bitpack/codec_internal.h"
#undef IBP_K

const ibp_kernels_t ibpi_kernels_portable = {
	IBP_IMPL_PORTABLE,
	ibp_portable_encode,
	ibp_portable_decode_static,
	ibp_portable_decode_exc,
	ibpi_row_stats,
	NULL,
	NULL,
	NULL,
};

/* ---------------------------------------------------------------------- */
/* creation                                                                */
/* ---------------------------------------------------------------------- */

static unsigned ibp_bitlen(uint64_t v)
{
	return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

static unsigned ibp_count_runs(uint64_t x)
{
	/* runs of ones = number of 0->1 transitions scanning upward */
	return (unsigned)__builtin_popcountll(x & ~(x << 1));
}

/* Appends the runs of x (from bit 0 up) to r, returns the new end. */
static ibp_run_t *ibp_make_runs(uint64_t x, ibp_run_t *r)
{
	unsigned src = 0;
	while (x) {
		unsigned pos = (unsigned)__builtin_ctzll(x);
		uint64_t y = x >> pos;
		unsigned len = (~y == 0) ? 64u - pos : (unsigned)__builtin_ctzll(~y);
		r->mask = ibp_lowmask(len) << pos;
		r->pos = (uint8_t)pos;
		r->src = (uint8_t)src;
		r++;
		src += len;
		x &= ~(ibp_lowmask(len) << pos);
	}
	return r;
}

/* 1 if this build and CPU can run the AVX-512 kernels. */
static int ibp_avx512_ok(void)
{
#ifdef IBP_HAVE_BMI2_KERNELS
	const ibp_cpu_features_t *f = ibpi_cpu();
	return f->avx512vbmi && f->bmi2;
#else
	return 0;
#endif
}

/* 1 if this build and CPU can run the AVX2 kernels. */
static int ibp_avx2_ok(void)
{
#ifdef IBP_HAVE_BMI2_KERNELS
	const ibp_cpu_features_t *f = ibpi_cpu();
	return f->avx2 && f->bmi2;
#else
	return 0;
#endif
}

static ibp_impl_t ibp_auto_impl(void)
{
	const char *e = getenv("IBP_FORCE_PORTABLE");
	if (e && strcmp(e, "1") == 0)
		return IBP_IMPL_PORTABLE;
#ifdef IBP_HAVE_BMI2_KERNELS
	if (ibpi_cpu()->fast_pdep)
		return ibp_avx512_ok() ? IBP_IMPL_AVX512 : ibp_avx2_ok() ? IBP_IMPL_AVX2 : IBP_IMPL_BMI2;
#endif
	return IBP_IMPL_PORTABLE;
}

static const ibp_kernels_t *ibp_impl_kernels(ibp_impl_t impl)
{
#ifdef IBP_HAVE_BMI2_KERNELS
	if (impl == IBP_IMPL_BMI2)
		return &ibpi_kernels_bmi2;
	if (impl == IBP_IMPL_AVX512)
		return &ibpi_kernels_avx512;
	if (impl == IBP_IMPL_AVX2)
		return &ibpi_kernels_avx2;
#endif
	(void)impl;
	return &ibpi_kernels_portable;
}

/* Builds the SIMD static-part tables (ibp_cluster_t.vg, ibp_vgroup_t) of
 * every cluster when the AVX-512 or AVX2 kernels can run (both read them);
 * returns 0 on no memory. */
static int ibp_build_vec(ibp_codec_t *c)
{
	const uint64_t D = c->D, C = c->C;
	if (!(ibp_avx512_ok() || ibp_avx2_ok()) || C == 8 || D < 2)
		return 1;
	const uint64_t G = C <= 2 ? 16 : 8, LB = C <= 2 ? 4 : 8;
	/* a partial last chunk stays scalar, a full one is a lane */
	const uint64_t nvg = c->last_bytes == C ? D / G : (D - 1) / G;
	if (nvg == 0)
		return 1;
	const uint64_t K = c->K;
	if (K * nvg > SIZE_MAX / sizeof(ibp_vgroup_t) / 2)
		return 0;
	ibp_vgroup_t *vg = aligned_alloc(64, K * nvg * sizeof(ibp_vgroup_t));
	uint64_t *v64 = malloc((K * nvg + K * nvg * G) * sizeof(uint64_t));
	c->mem[5] = vg;
	c->mem[6] = v64;
	if (!vg || !v64)
		return 0;
	memset(vg, 0, K * nvg * sizeof(ibp_vgroup_t));
	uint64_t *vbase = v64, *vfix = v64 + K * nvg;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		ibp_vgroup_t *g0 = vg + k * nvg;
		uint64_t *vb = vbase + k * nvg, *fx = vfix + k * nvg * G, nfix = 0;
		for (uint64_t g = 0; g < nvg; g++) {
			ibp_vgroup_t *q = &g0[g];
			vb[g] = cl->soff[g * G] >> 3;
			for (uint64_t l = 0; l < G; l++) {
				const uint64_t j = g * G + l, o = cl->soff[j];
				const uint64_t rel = (o >> 3) - vb[g]; /* <= 30 */
				for (uint64_t t = 0; t < LB; t++)
					q->idx[l * LB + t] = (uint8_t)(rel + t);
				const ibp_run_t *r = cl->runs + cl->nrun[j];
				const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j];
				uint64_t m0 = 0, m1 = 0;
				unsigned sh = (unsigned)(o & 7), p0 = 0, q1 = 0, p1 = 0;
				if (nr > 2) {
					fx[nfix++] = j;
				} else {
					if (nr >= 1) {
						m0 = r[0].mask;
						p0 = r[0].pos;
					}
					if (nr == 2) {
						m1 = r[1].mask;
						p1 = r[1].pos;
						q1 = sh + r[1].src;
					}
				}
				memcpy(q->m0 + l * LB, &m0, LB);
				memcpy(q->m1 + l * LB, &m1, LB);
				memcpy(q->b + l * LB, &cl->b[j], LB);
				q->sh[l * LB] = (uint8_t)sh; /* lanes little-endian, rest 0 */
				q->p0[l * LB] = (uint8_t)p0;
				q->q1[l * LB] = (uint8_t)q1;
				q->p1[l * LB] = (uint8_t)p1;
			}
		}
		cl->vg = g0;
		cl->vbase = vb;
		cl->nvg = nvg;
		cl->vfix = fx;
		cl->nvfix = nfix;
		if (nfix > nvg * G / 4) /* mostly fix-ups: the scalar loop is faster */
			cl->nvg = cl->nvfix = 0;
	}
	return 1;
}

/* The two runs of ~m_j as a 32-bit static lane at bit sh of its 4
 * bytes (ibp_vgroup_t): masks, positions and the second run's shift;
 * returns 0 (lane left 0) when ~m_j has more than two runs. */
static int ibp_static_lane32(const ibp_cluster_t *cl, uint64_t j, unsigned sh, uint32_t *m0, uint32_t *m1,
			     unsigned *p0, unsigned *q1, unsigned *p1)
{
	const ibp_run_t *r = cl->runs + cl->nrun[j];
	const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j];
	*m0 = *m1 = 0;
	*p0 = *q1 = *p1 = 0;
	if (nr > 2)
		return 0;
	if (nr >= 1) {
		*m0 = (uint32_t)r[0].mask;
		*p0 = r[0].pos;
	}
	if (nr == 2) {
		*m1 = (uint32_t)r[1].mask;
		*p1 = r[1].pos;
		*q1 = sh + r[1].src; /* < sh + s_j <= 32 */
	}
	return 1;
}

/* Builds the 16-lane static tables for C = 4 (ibp_cluster_t.vg16; the
 * AVX-512 and AVX2 kernels read them) of every cluster whose fields all
 * fit 32-bit lanes; returns 0 on no memory. Chunks whose ~m_j has more
 * than two runs are listed in vfix16, as for vg. */
static int ibp_build_vec16(ibp_codec_t *c)
{
	const uint64_t D = c->D, K = c->K, G = 16, LB = 4;
	if (!(ibp_avx512_ok() || ibp_avx2_ok()) || c->C != 4)
		return 1;
	const uint64_t nvg = c->last_bytes == 4 ? D / G : (D - 1) / G;
	if (nvg == 0)
		return 1;
	if (K * nvg > SIZE_MAX / sizeof(ibp_vgroup_t) / 2)
		return 0;
	/* one allocation: the groups (64-byte aligned), then vbase and vfix */
	const size_t gbytes = K * nvg * sizeof(ibp_vgroup_t);
	const size_t bytes = gbytes + (K * nvg + K * nvg * G) * sizeof(uint64_t);
	uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	c->mem[9] = mem;
	if (!mem)
		return 0;
	memset(mem, 0, gbytes);
	ibp_vgroup_t *vg = (ibp_vgroup_t *)(void *)mem;
	uint64_t *vbase = (uint64_t *)(void *)(mem + gbytes), *vfix = vbase + K * nvg;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		ibp_vgroup_t *g0 = vg + k * nvg;
		uint64_t *vb = vbase + k * nvg, *fx = vfix + k * nvg * G, nfix = 0;
		int fits = 1;
		for (uint64_t g = 0; g < nvg && fits; g++) {
			ibp_vgroup_t *q = &g0[g];
			vb[g] = cl->soff[g * G] >> 3;
			for (uint64_t l = 0; l < G; l++) {
				const uint64_t j = g * G + l, o = cl->soff[j];
				const uint64_t rel = (o >> 3) - vb[g];
				const unsigned sh = (unsigned)(o & 7);
				if (rel + LB > 64 || sh + cl->sw[j] > 32) {
					fits = 0;
					break;
				}
				for (uint64_t t = 0; t < LB; t++)
					q->idx[l * LB + t] = (uint8_t)(rel + t);
				uint32_t m0, m1, bj = (uint32_t)cl->b[j];
				unsigned p0, q1, p1;
				if (!ibp_static_lane32(cl, j, sh, &m0, &m1, &p0, &q1, &p1))
					fx[nfix++] = j;
				memcpy(q->m0 + l * LB, &m0, LB);
				memcpy(q->m1 + l * LB, &m1, LB);
				memcpy(q->b + l * LB, &bj, LB);
				q->sh[l * LB] = (uint8_t)sh;
				q->p0[l * LB] = (uint8_t)p0;
				q->q1[l * LB] = (uint8_t)q1;
				q->p1[l * LB] = (uint8_t)p1;
			}
		}
		if (!fits || nfix > nvg * G / 4)
			continue;
		cl->vg16 = g0;
		cl->vbase16 = vb;
		cl->nvg16 = nvg;
		cl->vfix16 = fx;
		cl->nvfix16 = nfix;
	}
	return 1;
}

/* Cluster k's VBMI tables, allocated (for all clusters) on first use;
 * NULL on no memory. */
static ibp_vbmi_t *ibp_vbmi_at(ibp_codec_t *c, uint64_t k)
{
	if (!c->mem[13])
		c->mem[13] = calloc(c->K, sizeof(ibp_vbmi_t));
	if (!c->mem[13])
		return NULL;
	ibp_vbmi_t *v = (ibp_vbmi_t *)c->mem[13] + k;
	c->cl[k].vbmi = v;
	return v;
}

/* Builds the multishift static tables (ibp_vbmi_t.vgm, ibp_msgroup_t)
 * for C <= 2 of every cluster whose qwords fit (see below) when the
 * AVX-512 VBMI kernels can run; returns 0 on no memory. */
static int ibp_build_vecms(ibp_codec_t *c)
{
	const uint64_t D = c->D, C = c->C, K = c->K;
	/* C = 4 keeps the vg16 lanes: measured no faster this way */
	if (!ibp_avx512_ok() || C > 2)
		return 1;
	const uint64_t G = 64 / C, Q = 8 / C; /* chunks per group, per qword */
	const uint64_t nvg = c->last_bytes == C ? D / G : (D - 1) / G;
	if (nvg == 0)
		return 1;
	if (K * nvg > SIZE_MAX / sizeof(ibp_msgroup_t) / 2)
		return 0;
	/* one allocation: the groups (64-byte aligned), then vbasem and vfixm */
	const size_t gbytes = K * nvg * sizeof(ibp_msgroup_t);
	const size_t bytes = gbytes + (K * nvg + K * nvg * G) * sizeof(uint64_t);
	uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	c->mem[11] = mem;
	if (!mem)
		return 0;
	memset(mem, 0, gbytes);
	ibp_msgroup_t *vg = (ibp_msgroup_t *)(void *)mem;
	uint64_t *vbase = (uint64_t *)(void *)(mem + gbytes), *vfix = vbase + K * nvg;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		ibp_msgroup_t *g0 = vg + k * nvg;
		uint64_t *vb = vbase + k * nvg, *fx = vfix + k * nvg * G, nfix = 0;
		int fits = 1;
		for (uint64_t g = 0; g < nvg && fits; g++) {
			ibp_msgroup_t *q = &g0[g];
			vb[g] = cl->soff[g * G] >> 3;
			for (uint64_t l = 0; l < G && fits; l++) {
				const uint64_t j = g * G + l, j0 = j - l % Q;
				/* the qword of chunk j starts at the byte of its first
				 * chunk's field; every field of it must end within it */
				const uint64_t qb = (cl->soff[j0] >> 3) - vb[g];
				const uint64_t o = cl->soff[j] - 8 * (vb[g] + qb);
				if (qb + 8 > 64 || o + cl->sw[j] > 64) {
					fits = 0;
					break;
				}
				if (l % Q == 0)
					for (uint64_t t = 0; t < 8; t++)
						q->idx[l * C + t] = (uint8_t)(qb + t);
				const ibp_run_t *r = cl->runs + cl->nrun[j];
				const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j];
				uint64_t m0 = 0, m1 = 0, s0 = o, s1 = o;
				if (nr > 2) {
					fx[nfix++] = j;
				} else {
					if (nr >= 1) {
						m0 = r[0].mask;
						s0 = o - r[0].pos; /* mod 64 below */
					}
					if (nr == 2) {
						m1 = r[1].mask;
						s1 = o + r[1].src - r[1].pos;
					}
				}
				for (uint64_t t = 0; t < C; t++) {
					q->c0[l * C + t] = (uint8_t)((s0 + 8 * t) & 63);
					q->c1[l * C + t] = (uint8_t)((s1 + 8 * t) & 63);
				}
				memcpy(q->m0 + l * C, &m0, C);
				memcpy(q->m1 + l * C, &m1, C);
				memcpy(q->b + l * C, &cl->b[j], C);
			}
		}
		if (!fits || nfix > nvg * G / 4) /* mostly fix-ups: the older paths */
			continue;
		ibp_vbmi_t *v = ibp_vbmi_at(c, k);
		if (!v)
			return 0;
		v->vgm = g0;
		v->vbasem = vb;
		v->nvgm = nvg;
		v->vfixm = fx;
		v->nvfixm = nfix;
	}
	return 1;
}

/* A zeroed, 64-byte-aligned table of n entries of `size` bytes, owned by
 * the codec (mem[slot]); NULL on no memory or a size past SIZE_MAX / 2. */
static void *ibp_table_alloc(ibp_codec_t *c, unsigned slot, uint64_t n, size_t size)
{
	if (n > SIZE_MAX / size / 2)
		return NULL;
	void *t = aligned_alloc(64, (n * size + 63) & ~(size_t)63);
	c->mem[slot] = t;
	if (t)
		memset(t, 0, n * size);
	return t;
}

/* Builds the 32-lane exception-walk tables (ibp_vbmi_t.xg2) for C = 2
 * of every cluster that has xg and whose groups fit (ibp_xgroup2_t) when
 * the AVX-512 VBMI kernels can run; returns 0 on no memory. */
static int ibp_build_xvec2(ibp_codec_t *c)
{
	const uint64_t D = c->D, K = c->K, G = 32;
	if (!ibp_avx512_ok() || c->C != 2)
		return 1;
	const uint64_t nxg = (D + G - 1) / G;
	ibp_xgroup2_t *xg = ibp_table_alloc(c, 12, K * nxg, sizeof(ibp_xgroup2_t));
	if (!xg)
		return 0;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (cl->nxg == 0) /* Xvals: the scalar walk */
			continue;
		ibp_xgroup2_t *g0 = xg + k * nxg;
		int fits = 1;
		for (uint64_t g = 0; g < nxg && fits; g++) {
			uint64_t sum = 0, quad = 0;
			for (uint64_t l = 0; l < G; l++) {
				const uint64_t j = g * G + l;
				const uint64_t e = j < D ? cl->ew[j] : 0;
				quad = (l % 4 ? quad : 0) + e;
				if (l < 28)
					sum += e;
				if (quad > 57 || sum > 441)
					fits = 0;
			}
		}
		if (!fits)
			continue;
		for (uint64_t j = 0; j < D; j++) {
			ibp_xgroup2_t *q = &g0[j / G];
			const uint64_t l = j % G;
			const ibp_run_t *r = cl->runs + cl->mrun[j];
			const uint64_t nr = cl->mrun[j + 1] - cl->mrun[j];
			uint16_t m0 = 0, m1 = 0, bj = (uint16_t)cl->b[j];
			uint64_t s0 = 0, s1 = 0;
			if (nr <= 2) { /* else in xfix: pdep after the lanes */
				if (nr >= 1) {
					m0 = (uint16_t)r[0].mask;
					s0 = 0 - (uint64_t)r[0].pos; /* r[0].src == 0; mod 64 below */
				}
				if (nr == 2) {
					m1 = (uint16_t)r[1].mask;
					s1 = (uint64_t)r[1].src - r[1].pos;
				}
			}
			q->w[2 * l] = cl->ew[j];
			memcpy(q->m0 + 2 * l, &m0, 2);
			memcpy(q->m1 + 2 * l, &m1, 2);
			memcpy(q->b + 2 * l, &bj, 2);
			for (uint64_t t = 0; t < 2; t++) {
				q->c0[2 * l + t] = (uint8_t)((s0 + 8 * t) & 63);
				q->c1[2 * l + t] = (uint8_t)((s1 + 8 * t) & 63);
			}
		}
		ibp_vbmi_t *v = ibp_vbmi_at(c, k);
		if (!v)
			return 0;
		v->xg2 = g0;
		v->nxg2 = nxg;
	}
	return 1;
}

/* Builds the 16-lane exception-walk tables (ibp_vbmi_t.xg4) for C = 4
 * of every cluster that has xg and whose groups fit (see ibp_vbmi_t) when
 * the AVX-512 VBMI kernels can run; returns 0 on no memory. */
static int ibp_build_xvec4(ibp_codec_t *c)
{
	const uint64_t D = c->D, K = c->K, G = 16;
	if (!ibp_avx512_ok() || c->C != 4)
		return 1;
	const uint64_t nxg = (D + G - 1) / G;
	ibp_xgroup_t *xg = ibp_table_alloc(c, 14, K * nxg, sizeof(ibp_xgroup_t));
	if (!xg)
		return 0;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (cl->nxg == 0) /* Xvals: the scalar walk */
			continue;
		int fits = 1;
		for (uint64_t g = 0; g < nxg && fits; g++) {
			uint64_t sum = 0;
			for (uint64_t l = 0; l + 1 < G; l++) {
				const uint64_t j = g * G + l;
				sum += j < D ? cl->ew[j] : 0;
			}
			for (uint64_t l = 0; l < G; l++) {
				const uint64_t j = g * G + l;
				if (j < D && cl->ew[j] > 25)
					fits = 0;
			}
			if (sum > 473)
				fits = 0;
		}
		if (!fits)
			continue;
		ibp_xgroup_t *g0 = xg + k * nxg;
		for (uint64_t j = 0; j < D; j++) {
			ibp_xgroup_t *q = &g0[j / G];
			const uint64_t l = j % G;
			const ibp_run_t *r = cl->runs + cl->mrun[j];
			const uint64_t nr = cl->mrun[j + 1] - cl->mrun[j];
			uint32_t m0 = 0, m1 = 0, bj = (uint32_t)cl->b[j];
			unsigned p0 = 0, s1 = 0, p1 = 0;
			if (nr <= 2) { /* else in xfix: pdep after the lanes */
				if (nr >= 1) {
					m0 = (uint32_t)r[0].mask;
					p0 = r[0].pos; /* r[0].src == 0 */
				}
				if (nr == 2) {
					m1 = (uint32_t)r[1].mask;
					s1 = r[1].src;
					p1 = r[1].pos;
				}
			}
			q->w[4 * l] = cl->ew[j];
			memcpy(q->m0 + 4 * l, &m0, 4);
			memcpy(q->m1 + 4 * l, &m1, 4);
			memcpy(q->b + 4 * l, &bj, 4);
			q->p0[4 * l] = (uint8_t)p0;
			q->s1[4 * l] = (uint8_t)s1;
			q->p1[4 * l] = (uint8_t)p1;
		}
		ibp_vbmi_t *v = ibp_vbmi_at(c, k);
		if (!v)
			return 0;
		v->xg4 = g0;
		v->nxg4 = nxg;
	}
	return 1;
}

/* Builds the fused row-decode tables (ibp_vbmi_t.fg) for C = 2 and 4 of
 * every cluster with xg2 / xg4 whose static fields fit their qwords (see
 * ibp_vbmi_t); returns 0 on no memory. */
static int ibp_build_fused(ibp_codec_t *c)
{
	const uint64_t D = c->D, K = c->K, C = c->C;
	if (!ibp_avx512_ok() || (C != 2 && C != 4) || D > IBP_XWALK_MAXD)
		return 1;
	const uint64_t G = 64 / C, Q = 8 / C, ng = (D + G - 1) / G;
	const size_t gsize = C == 4 ? sizeof(ibp_f4group_t) : sizeof(ibp_f2group_t);
	if (K * ng > SIZE_MAX / gsize / 4)
		return 0;
	/* one allocation: the groups (64-byte aligned), then fbase and ffix */
	const size_t gbytes = K * ng * gsize;
	const size_t bytes = gbytes + (K * ng + K * D) * sizeof(uint64_t);
	uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	c->mem[15] = mem;
	if (!mem)
		return 0;
	memset(mem, 0, gbytes);
	uint64_t *fbase = (uint64_t *)(void *)(mem + gbytes), *ffix = fbase + K * ng;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (!cl->vbmi || (C == 4 ? cl->vbmi->nxg4 : cl->vbmi->nxg2) == 0)
			continue;
		uint8_t *g0 = mem + k * ng * gsize;
		uint64_t *fb = fbase + k * ng, *fx = ffix + k * D, nfix = 0;
		int fits = 1, three = 0;
		for (uint64_t j = 0; j < D && fits; j++) {
			uint8_t *gq = g0 + (j / G) * gsize;
			ibp_fstatic_t *q = (ibp_fstatic_t *)(void *)gq;
			const uint64_t l = j % G, j0 = j - l % Q;
			if (l == 0)
				fb[j / G] = cl->soff[j] >> 3;
			/* the qword of chunks j0 .. j0 + Q - 1 starts at the byte of
			 * j0's field; every field of it must end within it (as for
			 * vgm) */
			const uint64_t qb = (cl->soff[j0] >> 3) - fb[j / G];
			const uint64_t o = cl->soff[j] - 8 * (fb[j / G] + qb);
			if (qb + 8 > 64 || o + cl->sw[j] > 64) {
				fits = 0;
				break;
			}
			if (l % Q == 0)
				for (uint64_t t = 0; t < 8; t++)
					q->idx[l * C + t] = (uint8_t)(qb + t);
			/* up to three runs of ~m_j (two f16 values in a chunk have
			 * three); chunks with more are patched after */
			const ibp_run_t *r = cl->runs + cl->nrun[j];
			const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j];
			uint64_t sm[3] = { 0, 0, 0 }, sc[3] = { o, o, o };
			if (nr > 3)
				fx[nfix++] = j;
			else
				for (uint64_t i = 0; i < nr; i++) {
					sm[i] = r[i].mask;
					sc[i] = o + r[i].src - r[i].pos; /* mod 64 below */
				}
			three |= nr == 3;
			for (uint64_t t = 0; t < C; t++) {
				q->c0[l * C + t] = (uint8_t)((sc[0] + 8 * t) & 63);
				q->c1[l * C + t] = (uint8_t)((sc[1] + 8 * t) & 63);
				q->c2[l * C + t] = (uint8_t)((sc[2] + 8 * t) & 63);
			}
			memcpy(q->sm0 + l * C, &sm[0], C); /* little-endian */
			memcpy(q->sm1 + l * C, &sm[1], C);
			memcpy(q->sm2 + l * C, &sm[2], C);
			memcpy(q->b + l * C, &cl->b[j], C);
			/* the exception lane: xg4's or xg2's */
			if (C == 4) {
				ibp_f4group_t *f = (ibp_f4group_t *)(void *)gq;
				const ibp_xgroup_t *x = &cl->vbmi->xg4[j / G];
				f->w[l * C] = x->w[l * C];
				memcpy(f->xm0 + l * C, x->m0 + l * C, C);
				memcpy(f->xm1 + l * C, x->m1 + l * C, C);
				f->xp0[l * C] = x->p0[l * C];
				f->xs1[l * C] = x->s1[l * C];
				f->xp1[l * C] = x->p1[l * C];
			} else {
				ibp_f2group_t *f = (ibp_f2group_t *)(void *)gq;
				const ibp_xgroup2_t *x = &cl->vbmi->xg2[j / G];
				f->w[l * C] = x->w[l * C];
				memcpy(f->xm0 + l * C, x->m0 + l * C, C);
				memcpy(f->xm1 + l * C, x->m1 + l * C, C);
				memcpy(f->xc0 + l * C, x->c0 + l * C, C);
				memcpy(f->xc1 + l * C, x->c1 + l * C, C);
			}
		}
		if (!fits || nfix > D / 4)
			continue;
		/* C = 4 with VPOPCNTDQ: one exception width in each group (over
		 * its chunks below D)? */
		int uni = C == 4 && ibpi_cpu()->avx512popcnt;
		for (uint64_t g = 0; g < ng && uni; g++) {
			ibp_f4group_t *f = (ibp_f4group_t *)(void *)(g0 + g * gsize);
			for (uint64_t l = 1; l < G && g * G + l < D; l++)
				uni &= f->w[l * C] == f->w[0];
		}
		ibp_vbmi_t *v = ibp_vbmi_at(c, k); /* allocated: xg2 / xg4 is there */
		v->funi = uni;
		v->fg = g0;
		v->fbase = fb;
		v->nfg = ng;
		v->fthree = three;
		v->ffix = fx;
		v->nffix = nfix;
	}
	return 1;
}

/* Builds the AVX2 qword-pair static tables (ibp_cluster_t.q2) of every
 * C = 4 cluster without vg16 whose qwords fit (see ibp_q2group_t) when the
 * AVX2 kernels can run; returns 0 on no memory. */
static int ibp_build_q2(ibp_codec_t *c)
{
	const uint64_t D = c->D, K = c->K, G = 8;
	/* full groups, the last chunk's only when it is whole */
	const uint64_t ng = c->last_bytes == 4 ? D / G : (D - 1) / G;
	if (!ibp_avx2_ok() || c->C != 4 || ng == 0)
		return 1;
	if (K * ng > SIZE_MAX / sizeof(ibp_q2group_t) / 4 || K * D > SIZE_MAX / 64)
		return 0;
	/* one allocation: the groups (32-byte aligned), the fix lists, the
	 * per-cluster headers */
	const size_t gbytes = K * ng * sizeof(ibp_q2group_t);
	const size_t bytes = gbytes + K * D * sizeof(uint64_t) + K * sizeof(ibp_q2_t);
	uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	c->mem[16] = mem;
	if (!mem)
		return 0;
	memset(mem, 0, bytes);
	ibp_q2group_t *qg = (ibp_q2group_t *)(void *)mem;
	uint64_t *fixes = (uint64_t *)(void *)(mem + gbytes);
	ibp_q2_t *hdr = (ibp_q2_t *)(void *)(mem + gbytes + K * D * sizeof(uint64_t));
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (cl->nvg16) /* the 16-lane tables serve */
			continue;
		ibp_q2group_t *g0 = qg + k * ng;
		uint64_t *fx = fixes + k * D, nfix = 0;
		int fits = 1, three = 0;
		for (uint64_t j = 0; j < ng * G && fits; j++) {
			ibp_q2group_t *q = &g0[j / G];
			const uint64_t l = j % G, lane = l / 2, j0 = j - l % 2;
			const uint64_t qb = cl->soff[j0] >> 3, o = cl->soff[j] - 8 * qb;
			if (o + cl->sw[j] > 64) {
				fits = 0;
				break;
			}
			q->qo[lane] = qb;
			const ibp_run_t *r = cl->runs + cl->nrun[j];
			const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j], hi = 32 * (l % 2);
			if (nr > 3) {
				fx[nfix++] = j;
			} else {
				for (uint64_t i = 0; i < nr; i++) {
					const uint64_t slot = 3 * (l % 2) + i;
					q->sr[slot][lane] = o + r[i].src;
					q->sl[slot][lane] = r[i].pos + hi;
					q->m[slot][lane] = r[i].mask << hi;
				}
			}
			three |= nr == 3;
			q->b[lane] |= cl->b[j] << hi;
		}
		if (!fits || nfix > D / 4)
			continue;
		hdr[k] = (ibp_q2_t){ .g = g0, .ng = ng, .fix = fx, .nfix = nfix, .three = three };
		cl->q2 = &hdr[k];
	}
	return 1;
}

/* Builds the SIMD exception-walk tables (ibp_cluster_t.xg) of every
 * cluster without Xvals when the AVX-512 or AVX2 kernels can run; returns
 * 0 on no memory. */
static int ibp_build_xvec(ibp_codec_t *c)
{
	const uint64_t D = c->D, C = c->C, K = c->K;
	if (!(ibp_avx512_ok() || ibp_avx2_ok()) || C == 8)
		return 1;
	const uint64_t G = C <= 2 ? 16 : 8, LB = C <= 2 ? 4 : 8;
	const uint64_t nxg = (D + G - 1) / G, nw = (D + 63) / 64;
	if (K * nxg > SIZE_MAX / sizeof(ibp_xgroup_t) / 2 || K * nw > SIZE_MAX / 16)
		return 0;
	ibp_xgroup_t *xg = aligned_alloc(64, K * nxg * sizeof(ibp_xgroup_t));
	uint64_t *fix = calloc(K * nw, 8);
	c->mem[7] = xg;
	c->mem[8] = fix;
	if (!xg || !fix)
		return 0;
	memset(xg, 0, K * nxg * sizeof(ibp_xgroup_t));
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (cl->has_x)
			continue;
		ibp_xgroup_t *g0 = xg + k * nxg;
		uint64_t *fx = fix + k * nw, nfix = 0;
		for (uint64_t j = 0; j < D; j++) {
			ibp_xgroup_t *q = &g0[j / G];
			const uint64_t l = j % G;
			const ibp_run_t *r = cl->runs + cl->mrun[j];
			const uint64_t nr = cl->mrun[j + 1] - cl->mrun[j];
			uint64_t m0 = 0, m1 = 0;
			unsigned p0 = 0, s1 = 0, p1 = 0;
			if (nr > 2) {
				fx[j / 64] |= 1ull << (j % 64);
				nfix++;
			} else {
				if (nr >= 1) {
					m0 = r[0].mask;
					p0 = r[0].pos; /* r[0].src == 0 */
				}
				if (nr == 2) {
					m1 = r[1].mask;
					s1 = r[1].src;
					p1 = r[1].pos;
				}
			}
			q->w[l * LB] = cl->ew[j];
			memcpy(q->m0 + l * LB, &m0, LB);
			memcpy(q->m1 + l * LB, &m1, LB);
			memcpy(q->b + l * LB, &cl->b[j], LB);
			q->p0[l * LB] = (uint8_t)p0;
			q->s1[l * LB] = (uint8_t)s1;
			q->p1[l * LB] = (uint8_t)p1;
		}
		cl->xg = g0;
		cl->nxg = nxg;
		cl->xfix = nfix ? fx : NULL;
	}
	return 1;
}

void ibp_codec_free(ibp_codec_t *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < sizeof(c->mem) / sizeof(c->mem[0]); i++)
		free(c->mem[i]);
	free(c);
}

ibp_status_t ibp_codec_create(uint64_t row_bytes, unsigned chunk_bytes, unsigned nclusters,
			      const void *masks, const void *bitvals, ibp_codec_t **out)
{
	return ibp_codec_create_ex(row_bytes, chunk_bytes, nclusters, masks, bitvals, NULL, out);
}

ibp_status_t ibp_codec_create_ex(uint64_t row_bytes, unsigned chunk_bytes, unsigned nclusters,
				 const void *masks, const void *bitvals, const void *xvals,
				 ibp_codec_t **out)
{
	if (!out || !masks || !bitvals)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "codec_create: NULL argument");
	*out = NULL;
	if (chunk_bytes != 1 && chunk_bytes != 2 && chunk_bytes != 4 && chunk_bytes != 8)
		return ibpi_fail(IBP_ERR_CORRUPT, "codec_create: chunk size %u is not 1, 2, 4 or 8",
				chunk_bytes);
	if (nclusters < 1 || nclusters > IBP_MAX_CLUSTERS)
		return ibpi_fail(IBP_ERR_CORRUPT, "codec_create: %u clusters (1..%u)", nclusters,
				IBP_MAX_CLUSTERS);
	if (row_bytes < 1 || row_bytes > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_CORRUPT, "codec_create: row size %llu (1..2^40)",
				(unsigned long long)row_bytes);
	const unsigned C = chunk_bytes, W = 8 * C, K = nclusters;
	const uint64_t R = row_bytes, D = (R + C - 1) / C;
	const uint64_t KD = (uint64_t)K * D;
	const uint64_t full = ibp_lowmask(W);
	const uint64_t last_bytes = R - (D - 1) * C;
	const uint64_t pad = full & ~ibp_lowmask((unsigned)(8 * last_bytes));
	const uint8_t *mb = masks, *bb = bitvals;
	const uint8_t *xb = xvals ? (const uint8_t *)xvals : bb; /* none: x̂ = b everywhere */

	/* validate, count runs */
	uint64_t nruns = 0;
	for (uint64_t i = 0; i < KD; i++) {
		uint64_t j = i % D;
		uint64_t m = ibp_ld_partial(mb + i * C, C), b = ibp_ld_partial(bb + i * C, C);
		uint64_t x = ibp_ld_partial(xb + i * C, C);
		if (b & ~m)
			return ibpi_fail(IBP_ERR_CORRUPT,
					"codec_create: cluster %llu chunk %llu: bitval bits outside the mask",
					(unsigned long long)(i / D), (unsigned long long)j);
		if (x & ~m)
			return ibpi_fail(IBP_ERR_CORRUPT,
					"codec_create: cluster %llu chunk %llu: xval bits outside the mask",
					(unsigned long long)(i / D), (unsigned long long)j);
		if (j == D - 1 && ((m & pad) != pad || (b & pad) != 0 || (x & pad) != 0))
			return ibpi_fail(IBP_ERR_CORRUPT,
					"codec_create: cluster %llu: padding bits of the last chunk are "
					"not invariant zeros", (unsigned long long)(i / D));
		nruns += ibp_count_runs(m) + ibp_count_runs(~m & full);
	}

	ibp_codec_t *c = calloc(1, sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "codec_create: out of memory");
	uint64_t *w64 = NULL;
	uint8_t *w8 = NULL;
	ibp_run_t *runs = NULL;
	ibp_cluster_t *cls = NULL;
	ibp_run2_t *r2 = NULL;
	/* 64-bit tables: m, b, nm, x (KD each), soff, nrun, mrun (K(D+1) each) */
	const uint64_t n64 = 4 * KD + 3 * (KD + K);
	if (n64 > SIZE_MAX / 8 || KD * C > SIZE_MAX / 4 || nruns > SIZE_MAX / sizeof(ibp_run_t))
		goto nomem;
	w64 = malloc(n64 * 8);
	/* 8-bit tables: sw, ew, xen (KD each), then the mask, bitval, xval bytes */
	w8 = malloc(3 * KD + 3 * KD * C);
	runs = malloc((nruns ? nruns : 1) * sizeof(ibp_run_t));
	cls = calloc(K, sizeof(*cls));
	r2 = calloc(KD, sizeof(*r2));
	c->mem[0] = w64;
	c->mem[1] = w8;
	c->mem[2] = runs;
	c->mem[3] = cls;
	c->mem[4] = r2;
	if (!w64 || !w8 || !runs || !cls || !r2)
		goto nomem;

	c->R = R;
	c->D = D;
	c->C = C;
	c->W = W;
	c->K = K;
	c->L = D > 1 ? ibp_bitlen(D - 1) : 1;
	c->last_bytes = last_bytes;
	c->full = full;
	c->bitmap_bytes = (D + 7) / 8;
	c->threshold = -1.0;
	c->mask_bytes = w8 + 3 * KD;
	c->bitval_bytes = w8 + 3 * KD + KD * C;
	c->xval_bytes = w8 + 3 * KD + 2 * KD * C;
	memcpy(c->mask_bytes, mb, KD * C);
	memcpy(c->bitval_bytes, bb, KD * C);
	memcpy(c->xval_bytes, xb, KD * C);
	c->cl = cls;

	ibp_run_t *r = runs;
	uint64_t ridx = 0;
	for (unsigned k = 0; k < K; k++) {
		uint64_t *m = w64 + (uint64_t)k * D;
		uint64_t *b = w64 + KD + (uint64_t)k * D;
		uint64_t *nm = w64 + 2 * KD + (uint64_t)k * D;
		uint64_t *soff = w64 + 3 * KD + (uint64_t)k * (D + 1);
		uint64_t *nrun = w64 + 4 * KD + K + (uint64_t)k * (D + 1);
		uint64_t *mrun = w64 + 5 * KD + 2 * K + (uint64_t)k * (D + 1);
		uint64_t *xw = w64 + 6 * KD + 3 * K + (uint64_t)k * D;
		uint8_t *sw = w8 + (uint64_t)k * D;
		uint8_t *ew = w8 + KD + (uint64_t)k * D;
		uint8_t *xen = w8 + 2 * KD + (uint64_t)k * D;
		uint64_t off = 0;
		unsigned has_x = 0;
		for (uint64_t j = 0; j < D; j++) {
			uint64_t i = (uint64_t)k * D + j;
			m[j] = ibp_ld_partial(mb + i * C, C);
			b[j] = ibp_ld_partial(bb + i * C, C);
			xw[j] = ibp_ld_partial(xb + i * C, C);
			xen[j] = xw[j] != b[j];
			has_x |= xen[j];
			nm[j] = ~m[j] & full;
			ew[j] = (uint8_t)__builtin_popcountll(m[j]);
			sw[j] = (uint8_t)(W - ew[j]);
			soff[j] = off;
			off += sw[j];
			nrun[j] = ridx;
			r = ibp_make_runs(nm[j], r);
			ridx = (uint64_t)(r - runs);
			ibp_run2_t *q = &r2[(uint64_t)k * D + j];
			uint64_t nr = ridx - nrun[j];
			const ibp_run_t *first = runs + nrun[j];
			q->more = nr > 2;
			if (nr >= 1) {
				q->m0 = first[0].mask;
				q->p0 = first[0].pos; /* first[0].src == 0 */
			}
			if (nr >= 2) {
				q->m1 = first[1].mask;
				q->p1 = first[1].pos;
				q->s1 = first[1].src;
			}
		}
		soff[D] = off;
		nrun[D] = ridx;
		for (uint64_t j = 0; j < D; j++) {
			mrun[j] = ridx;
			r = ibp_make_runs(m[j], r);
			ridx = (uint64_t)(r - runs);
		}
		mrun[D] = ridx;
		cls[k] = (ibp_cluster_t){ .m = m, .b = b, .nm = nm, .soff = soff, .sw = sw, .ew = ew,
					  .nrun = nrun, .mrun = mrun, .runs = runs,
					  .nr2 = r2 + (uint64_t)k * D, .S = off, .nclean = (off + 7) / 8,
					  .x = xw, .xen = xen, .has_x = has_x };
		c->has_xval |= (int)has_x;
	}
	if (c->has_xval) { /* the run walk's tables of the clusters with Xvals: xen bits, hit patches */
		const uint64_t nw = D / 64 + 1, per = nw * 8 + (D * C + 7) / 8 * 8;
		uint8_t *xt = calloc(K, per);
		c->mem[19] = xt;
		if (!xt)
			goto nomem;
		for (unsigned k = 0; k < K; k++) {
			ibp_cluster_t *cl = &cls[k];
			if (!cl->has_x)
				continue;
			uint64_t *xenb = (uint64_t *)(void *)(xt + (uint64_t)k * per);
			uint8_t *xbc = xt + (uint64_t)k * per + nw * 8;
			for (uint64_t j = 0; j < D; j++) {
				xenb[j / 64] |= (uint64_t)cl->xen[j] << (j % 64);
				ibp_st_chunk(xbc + j * C, cl->x[j] ^ cl->b[j], C);
			}
			cl->xenb = xenb;
			cl->xbc = xbc;
		}
	}
	if (!ibp_build_vec(c) || !ibp_build_xvec(c) || !ibp_build_vec16(c) || !ibp_build_vecms(c) ||
	    !ibp_build_xvec2(c) || !ibp_build_xvec4(c) || !ibp_build_fused(c) || !ibp_build_q2(c) ||
	    !ibpi_build_base_rows(c, &ibpi_kernels_portable) || !ibpi_build_w2(c, ibp_avx2_ok()) ||
	    !ibpi_build_tiny(c))
		goto nomem;
	c->impl = ibp_auto_impl();
	c->k = ibp_impl_kernels(c->impl);
	*out = c;
	return IBP_OK;
nomem:
	ibp_codec_free(c);
	return ibpi_fail(IBP_ERR_NOMEM, "codec_create: out of memory (%llu chunks, %u clusters)",
			(unsigned long long)D, K);
}

void ibpi_codec_set_threshold(ibp_codec_t *c, double threshold)
{
	if (c)
		c->threshold = threshold;
}

/* ---------------------------------------------------------------------- */
/* accessors                                                               */
/* ---------------------------------------------------------------------- */

uint64_t ibp_codec_row_bytes(const ibp_codec_t *c) { return c ? c->R : 0; }
unsigned ibp_codec_chunk_bytes(const ibp_codec_t *c) { return c ? c->C : 0; }
uint64_t ibp_codec_nchunks(const ibp_codec_t *c) { return c ? c->D : 0; }
unsigned ibp_codec_nclusters(const ibp_codec_t *c) { return c ? c->K : 0; }
double ibp_codec_threshold(const ibp_codec_t *c) { return c ? c->threshold : -1.0; }

const uint8_t *ibp_codec_mask(const ibp_codec_t *c, unsigned cluster)
{
	if (!c || cluster >= c->K)
		return NULL;
	return c->mask_bytes + (uint64_t)cluster * c->D * c->C;
}

const uint8_t *ibp_codec_bitval(const ibp_codec_t *c, unsigned cluster)
{
	if (!c || cluster >= c->K)
		return NULL;
	return c->bitval_bytes + (uint64_t)cluster * c->D * c->C;
}

const uint8_t *ibp_codec_xval(const ibp_codec_t *c, unsigned cluster)
{
	if (!c || cluster >= c->K)
		return NULL;
	return c->xval_bytes + (uint64_t)cluster * c->D * c->C;
}

int ibp_codec_has_xval(const ibp_codec_t *c)
{
	return c ? c->has_xval : 0;
}

uint64_t ibp_codec_static_bits(const ibp_codec_t *c, unsigned cluster)
{
	if (!c || cluster >= c->K)
		return 0;
	return c->cl[cluster].S;
}

ibp_status_t ibp_codec_set_impl(ibp_codec_t *c, ibp_impl_t impl)
{
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "codec_set_impl: NULL codec");
	switch (impl) {
	case IBP_IMPL_AUTO:
		c->impl = ibp_auto_impl();
		c->k = ibp_impl_kernels(c->impl);
		return IBP_OK;
	case IBP_IMPL_AVX512:
		if (ibp_avx512_ok()) {
			c->impl = IBP_IMPL_AVX512;
			c->k = &ibpi_kernels_avx512;
			return IBP_OK;
		}
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				"codec_set_impl: this CPU or build has no AVX-512 VBMI");
	case IBP_IMPL_AVX2:
		if (ibp_avx2_ok()) {
			c->impl = IBP_IMPL_AVX2;
			c->k = ibp_impl_kernels(IBP_IMPL_AVX2);
			return IBP_OK;
		}
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "codec_set_impl: this CPU or build has no AVX2");
	case IBP_IMPL_PORTABLE:
		c->impl = IBP_IMPL_PORTABLE;
		c->k = &ibpi_kernels_portable;
		return IBP_OK;
	case IBP_IMPL_BMI2:
#ifdef IBP_HAVE_BMI2_KERNELS
		if (ibpi_cpu()->bmi2) {
			c->impl = IBP_IMPL_BMI2;
			c->k = &ibpi_kernels_bmi2;
			return IBP_OK;
		}
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "codec_set_impl: this CPU has no BMI2");
#else
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "codec_set_impl: BMI2 kernels not built");
#endif
	}
	return ibpi_fail(IBP_ERR_INVALID_ARG, "codec_set_impl: unknown implementation %d", (int)impl);
}

ibp_impl_t ibp_codec_impl(const ibp_codec_t *c)
{
	return c ? c->impl : IBP_IMPL_PORTABLE;
}

uint64_t ibp_row_bound(const ibp_codec_t *c)
{
	return c ? c->R : 0;
}

uint64_t ibp_batch_bound(const ibp_codec_t *c, uint64_t nrows)
{
	return c ? c->R * nrows : 0;
}

/* ---------------------------------------------------------------------- */
/* row statistics, sizes                                                   */
/* ---------------------------------------------------------------------- */

static uint64_t ibp_size_under(const ibp_codec_t *c, unsigned k, const uint8_t *row,
			       unsigned *mode)
{
	uint64_t n, E, size;
	/* the codec's own sizing pass (SIMD on AVX-512): training sizes every
	 * sampled row under each candidate codec through here */
	c->k->row_stats(c, &c->cl[k], row, &n, &E);
	ibp_choose_mode(c, &c->cl[k], n, E, mode, &size);
	return size;
}

unsigned ibp_choose_cluster(const ibp_codec_t *c, const void *row)
{
	if (!c || !row || c->K == 1)
		return 0;
	unsigned best = 0, mode;
	uint64_t bs = ibp_size_under(c, 0, row, &mode);
	for (unsigned k = 1; k < c->K; k++) {
		uint64_t s = ibp_size_under(c, k, row, &mode);
		if (s < bs) {
			bs = s;
			best = k;
		}
	}
	return best;
}

ibp_status_t ibp_row_size(const ibp_codec_t *c, const void *row, unsigned cluster,
			  uint64_t *len, uint8_t *mode)
{
	if (!c || !row)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "row_size: NULL argument");
	if (cluster >= c->K)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "row_size: cluster %u of %u", cluster, c->K);
	unsigned m;
	uint64_t s = ibp_size_under(c, cluster, row, &m);
	if (len)
		*len = s;
	if (mode)
		*mode = (uint8_t)m;
	return IBP_OK;
}

/* ---------------------------------------------------------------------- */
/* encode                                                                  */
/* ---------------------------------------------------------------------- */

/* Encodes one row (arguments already checked). */
static ibp_status_t ibp_encode_one(const ibp_codec_t *c, const uint8_t *row, unsigned cluster,
				   uint8_t *dst, uint64_t dst_cap, uint64_t *len, uint8_t *flags)
{
	const ibp_cluster_t *cl = &c->cl[cluster];
	uint64_t n, E, size;
	unsigned mode;
	c->k->row_stats(c, cl, row, &n, &E);
	ibp_choose_mode(c, cl, n, E, &mode, &size);
	if (dst_cap < size)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "encode_row: needs %llu bytes, have %llu",
				(unsigned long long)size, (unsigned long long)dst_cap);
	if (mode == IBP_ROW_RAW)
		memcpy(dst, row, c->R);
	else
		c->k->encode(c, cl, row, mode, n, dst);
	*len = size;
	*flags = (uint8_t)mode;
	return IBP_OK;
}

ibp_status_t ibp_encode_row(const ibp_codec_t *c, const void *row, unsigned cluster,
			    void *dst, uint64_t dst_cap, uint64_t *len, uint8_t *flags)
{
	if (!c || !row || !len || !flags || (!dst && dst_cap))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_row: NULL argument");
	if (cluster >= c->K)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_row: cluster %u of %u", cluster, c->K);
	static uint8_t none[8]; /* dst may be NULL when the row encodes to 0 bytes */
	return ibp_encode_one(c, row, cluster, dst ? dst : none, dst_cap, len, flags);
}

/* ---------------------------------------------------------------------- */
/* decode                                                                  */
/* ---------------------------------------------------------------------- */

ibp_status_t ibpi_decode_row_ext(const ibp_codec_t *c, const uint8_t *src, uint64_t src_len,
				uint8_t flags, unsigned cluster, uint8_t *dst, uint64_t *extent)
{
	if (flags & ~IBP_ROW_MODE_MASK)
		return ibpi_fail(IBP_ERR_CORRUPT, "decode: reserved flag bits set (0x%02x)", flags);
	if (cluster >= c->K)
		return ibpi_fail(IBP_ERR_CORRUPT, "decode: cluster %u of %u", cluster, c->K);
	const ibp_cluster_t *cl = &c->cl[cluster];
	const unsigned mode = flags & IBP_ROW_MODE_MASK;
	const uint64_t D = c->D;
	uint64_t hdr = 0, n = 0;

	switch (mode) {
	case IBP_ROW_RAW:
		if (src_len < c->R)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: raw row of %llu bytes, needs %llu",
					(unsigned long long)src_len, (unsigned long long)c->R);
		memcpy(dst, src, c->R);
		*extent = c->R;
		return IBP_OK;
	case IBP_ROW_CLEAN:
		break;
	case IBP_ROW_BITMAP: {
		hdr = c->bitmap_bytes;
		if (hdr > src_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: bitmap of %llu bytes past the row end (%llu)",
					(unsigned long long)hdr, (unsigned long long)src_len);
		if ((D & 7) && (src[hdr - 1] >> (D & 7)))
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: bitmap bits set past chunk %llu",
					(unsigned long long)D);
		uint64_t any = 0;
		for (uint64_t i = 0; i < hdr; i += 8) {
			uint64_t left = hdr - i;
			any |= left >= 8 ? ibp_load64(src + i) : ibp_ld_partial(src + i, left);
		}
		if (any == 0)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: bitmap row without exceptions");
		n = 1; /* the walk takes the exceptions from the bitmap */
		break;
	}
	case IBP_ROW_LIST: {
		const unsigned L = c->L;
		if ((L + 7) / 8 > src_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: list count past the row end");
		n = ibp_read_bits(src, src_len, 0, L) + 1;
		if (n > D)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: list of %llu exceptions, %llu chunks",
					(unsigned long long)n, (unsigned long long)D);
		hdr = ((uint64_t)L * (n + 1) + 7) / 8;
		if (hdr > src_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "decode: list of %llu bytes past the row end (%llu)",
					(unsigned long long)hdr, (unsigned long long)src_len);
		/* the walk checks the entries (< D, strictly increasing) */
		break;
	}
	}
	const uint8_t *bp = src + hdr;
	const uint64_t avail = src_len - hdr;
	if ((cl->S + 7) / 8 > avail)
		return ibpi_fail(IBP_ERR_CORRUPT, "decode: static part past the row end (%llu)",
				(unsigned long long)avail);
	uint64_t end;
	if (c->tiny && c->k->decode_tiny && (n == 0 || !cl->has_x)) {
		/* rows of one or two words: a pdep or two a word (ibp_tiny_t) */
		end = c->k->decode_tiny(c, cl, mode, src, hdr, n, bp, avail, dst);
	} else if (n && c->k->decode_row && !cl->base_row) {
		/* static part and exceptions in one pass, with the same checks */
		end = c->k->decode_row(c, cl, mode, src, hdr, n, bp, avail, dst);
	} else {
		if (cl->base_row && c->k != &ibpi_kernels_portable)
			memcpy(dst, cl->base_row, c->R); /* S = 0: every row's static part */
		else
			c->k->decode_static(c, cl, bp, avail, dst);
		if (n == 0) {
			*extent = hdr + (cl->S + 7) / 8;
			return IBP_OK;
		}
		/* One walk: it checks each exception field against avail (their
		 * widths depend on the hit bits with Xvals) and each list entry. */
		end = c->k->decode_exc(c, cl, mode, src, hdr, n, bp, avail, dst);
	}
	if (end == UINT64_MAX)
		return ibpi_fail(IBP_ERR_CORRUPT,
				"decode: bad exception list or exception part past the row end (%llu)",
				(unsigned long long)avail);
	*extent = hdr + (end + 7) / 8;
	return IBP_OK;
}

ibp_status_t ibp_decode_row(const ibp_codec_t *c, const void *src, uint64_t src_len,
			    uint8_t flags, unsigned cluster, void *dst)
{
	if (!c || !dst || (!src && src_len))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "decode_row: NULL argument");
	uint64_t extent;
	static const uint8_t none[1];
	return ibpi_decode_row_ext_i(c, src ? src : none, src_len, flags, cluster, dst, &extent);
}

/* ---------------------------------------------------------------------- */
/* batches                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct ibp_batch_err {
	ibp_status_t st;
	uint64_t row;
	char msg[200];
} ibp_batch_err_t;

typedef struct ibp_batch_ctx {
	const ibp_codec_t *c;
	const uint8_t *rows;
	const uint8_t *src;
	uint8_t *dst;
	uint64_t *offsets;
	const uint64_t *coffsets;
	uint8_t *flags;
	const uint8_t *cflags;
	uint8_t *clusters;
	const uint8_t *cclusters;
	uint64_t *nexc; /* encode: exceptions of each row, from phase 1 */
	ibp_batch_err_t err[]; /* one per thread (decode) */
} ibp_batch_ctx_t;

static void ibp_batch_note(ibp_batch_ctx_t *x, int tid, ibp_status_t st, uint64_t row)
{
	if (x->err[tid].st == IBP_OK) {
		x->err[tid].st = st;
		x->err[tid].row = row;
		snprintf(x->err[tid].msg, sizeof(x->err[tid].msg), "%s", ibp_last_error());
	}
}

/* Reports the failure of the lowest row, if any, on the calling thread. */
static ibp_status_t ibp_batch_result(ibp_batch_ctx_t *x, int nt, const char *what)
{
	int at = -1;
	for (int t = 0; t < nt; t++)
		if (x->err[t].st != IBP_OK && (at < 0 || x->err[t].row < x->err[at].row))
			at = t;
	if (at < 0)
		return IBP_OK;
	return ibpi_fail(x->err[at].st, "%s: row %llu: %s", what,
			(unsigned long long)x->err[at].row, x->err[at].msg);
}

/* phase 1: cluster, size and mode of each row; size goes to offsets[i+1] */
static void ibp_enc_size_fn(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	ibp_batch_ctx_t *x = ctx;
	const ibp_codec_t *c = x->c;
	(void)tid;
	for (uint64_t i = begin; i < end; i++) {
		const uint8_t *row = x->rows + i * c->R;
		unsigned k = ibp_choose_cluster(c, row), mode;
		uint64_t n, E;
		c->k->row_stats(c, &c->cl[k], row, &n, &E);
		ibp_choose_mode(c, &c->cl[k], n, E, &mode, &x->offsets[i + 1]);
		x->nexc[i] = n;
		x->flags[i] = (uint8_t)mode;
		if (x->clusters)
			x->clusters[i] = (uint8_t)k;
	}
}

/* phase 2: write each row at its offset (mode and size known) */
static void ibp_enc_write_fn(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	ibp_batch_ctx_t *x = ctx;
	const ibp_codec_t *c = x->c;
	(void)tid;
	for (uint64_t i = begin; i < end; i++) {
		const uint8_t *row = x->rows + i * c->R;
		uint8_t *d = x->dst + x->offsets[i];
		if (x->flags[i] == IBP_ROW_RAW)
			memcpy(d, row, c->R);
		else
			c->k->encode(c, &c->cl[x->clusters ? x->clusters[i] : 0], row, x->flags[i],
				     x->nexc[i], d);
	}
}

ibp_status_t ibp_encode_batch(const ibp_codec_t *c, const void *rows, uint64_t nrows,
			      void *dst, uint64_t dst_cap, uint64_t *offsets, uint8_t *flags,
			      uint8_t *clusters, int nthreads)
{
	if (!c || !offsets || (nrows && (!rows || !flags)) || (!dst && dst_cap) || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_batch: invalid argument");
	if (c->K > 1 && !clusters)
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"encode_batch: %u clusters need a clusters array", c->K);
	offsets[0] = 0;
	if (nrows == 0)
		return IBP_OK;
	ibp_batch_ctx_t *x = calloc(1, sizeof(*x));
	if (!x)
		return ibpi_fail(IBP_ERR_NOMEM, "encode_batch: out of memory");
	x->c = c;
	static uint8_t none[8]; /* dst may be NULL when every row encodes to 0 bytes */
	x->rows = rows;
	x->dst = dst ? dst : none;
	x->offsets = offsets;
	x->flags = flags;
	x->clusters = c->K > 1 ? clusters : NULL;
	x->nexc = nrows <= SIZE_MAX / sizeof(uint64_t) ? malloc(nrows * sizeof(uint64_t)) : NULL;
	if (!x->nexc) {
		free(x->nexc);
		free(x);
		return ibpi_fail(IBP_ERR_NOMEM, "encode_batch: out of memory");
	}
	ibp_status_t st = ibpi_parallel_for(nthreads, nrows, ibp_enc_size_fn, x);
	if (st == IBP_OK) {
		for (uint64_t i = 0; i < nrows; i++)
			offsets[i + 1] += offsets[i];
		if (offsets[nrows] > dst_cap)
			st = ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "encode_batch: needs %llu bytes, have %llu",
				      (unsigned long long)offsets[nrows], (unsigned long long)dst_cap);
	}
	if (st == IBP_OK)
		st = ibpi_parallel_for(nthreads, nrows, ibp_enc_write_fn, x);
	if (st == IBP_OK && clusters && c->K == 1)
		memset(clusters, 0, nrows);
	free(x->nexc);
	free(x);
	return st;
}

static void ibp_dec_fn(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	ibp_batch_ctx_t *x = ctx;
	const ibp_codec_t *c = x->c;
	for (uint64_t i = begin; i < end; i++) {
		uint64_t o = x->coffsets[i], len = x->coffsets[i + 1] - o, extent;
		unsigned k = x->cclusters ? x->cclusters[i] : 0;
		ibp_status_t st = ibpi_decode_row_ext_i(c, x->src + o, len, x->cflags[i], k,
						     x->dst + i * c->R, &extent);
		if (st == IBP_OK && extent != len)
			st = ibpi_fail(IBP_ERR_CORRUPT, "row uses %llu of its %llu bytes",
				      (unsigned long long)extent, (unsigned long long)len);
		if (st != IBP_OK)
			ibp_batch_note(x, tid, st, i);
	}
}

ibp_status_t ibp_decode_batch(const ibp_codec_t *c, const void *src, uint64_t src_len,
			      const uint64_t *offsets, const uint8_t *flags,
			      const uint8_t *clusters, uint64_t nrows, void *dst, int nthreads)
{
	if (!c || !offsets || (nrows && (!flags || !dst)) || (!src && src_len) || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "decode_batch: invalid argument");
	if (offsets[0] != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "decode_batch: offsets[0] = %llu, not 0",
				(unsigned long long)offsets[0]);
	for (uint64_t i = 0; i < nrows; i++)
		if (offsets[i + 1] < offsets[i])
			return ibpi_fail(IBP_ERR_CORRUPT, "decode_batch: offsets decrease at row %llu",
					(unsigned long long)i);
	if (offsets[nrows] > src_len)
		return ibpi_fail(IBP_ERR_CORRUPT, "decode_batch: rows end at %llu, past %llu bytes",
				(unsigned long long)offsets[nrows], (unsigned long long)src_len);
	if (nrows == 0)
		return IBP_OK;
	int nt = ibpi_parallel_threads(nthreads, nrows);
	ibp_batch_ctx_t *x = calloc(1, sizeof(*x) + (size_t)nt * sizeof(ibp_batch_err_t));
	if (!x)
		return ibpi_fail(IBP_ERR_NOMEM, "decode_batch: out of memory");
	static const uint8_t none[1];
	x->c = c;
	x->src = src ? src : none;
	x->dst = dst;
	x->coffsets = offsets;
	x->cflags = flags;
	x->cclusters = clusters;
	ibp_status_t st = ibpi_parallel_for(nthreads, nrows, ibp_dec_fn, x);
	if (st == IBP_OK)
		st = ibp_batch_result(x, nt, "decode_batch");
	free(x);
	return st;
}

/* ---------------------------------------------------------------------- */
/* the paper's layout, for comparisons                                     */
/* ---------------------------------------------------------------------- */

uint64_t ibp_paper_layout_size(const ibp_codec_t *c, const void *rows, uint64_t nrows)
{
	if (!c || !rows)
		return 0;
	const uint64_t C = c->C, D = c->D, R = c->R;
	const uint64_t pbits = ((D + 7) / 8 + C - 1) / C * C;
	uint64_t total = 0;
	for (uint64_t i = 0; i < nrows; i++) {
		const uint8_t *row = (const uint8_t *)rows + i * R;
		unsigned k = ibp_choose_cluster(c, row);
		const ibp_cluster_t *cl = &c->cl[k];
		uint64_t n, E;
		ibpi_row_stats_xv(c, cl, row, &n, &E, 0); /* the paper has no Xvals */
		/* matched chunks: s_j bits; exceptions: W bits. Σ over exceptions
		 * of s_j = W·n − E, so the payload is S − (W·n − E) + W·n = S + E. */
		uint64_t payload = (cl->S + E + 7) / 8;
		payload = (payload + C - 1) / C * C;
		uint64_t size = pbits + payload;
		total += size < R ? size : R;
	}
	return total;
}
