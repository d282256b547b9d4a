/* dynamiq.c - DynamiQ's quantizer (paper 001; decisions in
 * docs/COLLECTIVES.md), knowing nothing of communicators: local
 * statistics, widths per super-group by a bisection on the shared threshold
 * offset u (the plan), and the hop that decodes, adds in FP32 and
 * re-quantizes in one pass per SG; the all-reduce that sends them is
 * dq_allreduce.c. The scalar code here is the reference; full super-groups
 * go through the vector kernels of dynamiq_simd.h when the CPU has them
 * (same bytes, coll_simd.c chooses). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_convert.h"
#include "coll/dynamiq.h"
#include "coll/dynamiq_simd.h"
#include "fp8/fp8_impl.h"
#include "util/cpu.h"
#include "util/error.h"

void ibpi_dq_cfg_default(dq_cfg_t *cfg)
{
	cfg->budget = 5.0;
	cfg->fixed_q = 0;
	cfg->nonuniform = 1;
	cfg->eps4 = 0.3; /* levels' non-uniformity per width (q = 2 has {0, 1}) */
	cfg->eps8 = 0.05;
	cfg->correlated = 0; /* biases multi-hop sums: docs/COLLECTIVES.md */
	cfg->fresh = 1;
	cfg->seed = 0x44796e616d695121ull;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

uint64_t ibpi_dq_sg_bytes(uint64_t c, int q)
{
	return 2 + ceil_div(c, DQ_G) + ceil_div(c * (uint64_t)q, 8);
}

static int qidx(int q)
{
	return q == 2 ? 0 : q == 4 ? 1 : 2;
}

/* max without fmaxf's NaN rules (inputs here are checked or finite), so it inlines. */
static inline float maxf(float a, float b)
{
	return a > b ? a : b;
}

/* Elements of SG j. */
static uint64_t sg_len(const dq_plan_t *pl, uint64_t j)
{
	uint64_t a = j * DQ_S;
	return a + DQ_S <= pl->d ? DQ_S : pl->d - a;
}

/* Elements [a, a + c) of src (dt) as floats: in place for FP32, else widened into xs. */
static const float *sg_x(const void *src, ibp_dtype_t dt, uint64_t a, uint64_t c, float *xs)
{
	if (dt == IBP_DTYPE_F32)
		return (const float *)src + a;
	ibpi_coll_widen((const uint16_t *)src + a, dt, c, xs);
	return xs;
}

/* Sum and sum of squares of c <= DQ_S entries in 16 lanes (lane l takes
 * the entries i = l mod 16), then the lanes pairwise: the same bits every
 * time, and the compiler vectorizes it without reordering a sum (a serial
 * sum made the statistics a sixth of a DynamiQ call). */
static void sg_sums(const float *x, uint64_t c, float *s, float *s2)
{
	float a[16] = { 0 }, b[16] = { 0 };
	uint64_t i = 0;
	for (; i + 16 <= c; i += 16)
		for (int l = 0; l < 16; l++) {
			a[l] += x[i + l];
			b[l] += x[i + l] * x[i + l];
		}
	for (; i < c; i++) {
		a[i % 16] += x[i];
		b[i % 16] += x[i] * x[i];
	}
	for (int w = 8; w; w >>= 1)
		for (int l = 0; l < w; l++) {
			a[l] += a[l + w];
			b[l] += b[l + w];
		}
	*s = a[0];
	*s2 = b[0];
}

void ibpi_dq_local_stats_dt(const void *src, ibp_dtype_t dt, uint64_t d, float *st)
{
	uint64_t J = ceil_div(d, DQ_S), esz = ibp_dtype_size(dt);
	float xs[DQ_S];
	const dq_kern_t *K = dt == IBP_DTYPE_F16 ? NULL : ibpi_dq_kern(); /* F16: the scalar widening */
	for (uint64_t j = 0; j < J; j++) {
		uint64_t a = j * DQ_S, b = a + DQ_S < d ? a + DQ_S : d;
		float s, s2;
		if (K && b - a == DQ_S)
			K->stats((const uint8_t *)src + a * esz, dt, &s, &s2);
		else
			sg_sums(sg_x(src, dt, a, b - a, xs), b - a, &s, &s2);
		st[j] = s / (float)(b - a);
		st[J + j] = s2;
	}
}

void ibpi_dq_local_stats(const float *x, uint64_t d, float *st)
{
	ibpi_dq_local_stats_dt(x, IBP_DTYPE_F32, d, st);
}

void ibpi_dq_plan_free(dq_plan_t *pl)
{
	free(pl->q);
	free(pl->mu);
	free(pl->boff);
	free(pl->lo);
	free(pl->cbytes);
	memset(pl, 0, sizeof *pl);
}

static int width_of(double lf, double u, int fixed)
{
	if (fixed)
		return fixed;
	/* c = 4 / log2(512/17) makes T48/T24 = 512/17 (equal marginal benefit per bit). */
	double z = 0.8142430 * lf + u;
	return !(z >= 4) ? 2 : z < 8 ? 4 : 8;
}

/* The wire bits of the widths width_of gives at offset u. The full SGs are
 * counted per width without branches (the bisection calls this 32 times
 * per call, so it is vectorized); the same z, so the same widths. */
static uint64_t plan_bits(const double *lf, uint64_t J, uint64_t d, double u, int fixed)
{
	uint64_t full = d / DQ_S, bits;
	if (fixed)
		bits = 8 * full * ibpi_dq_sg_bytes(DQ_S, fixed);
	else {
		uint64_t n4 = 0, n8 = 0;
		for (uint64_t j = 0; j < full; j++) {
			double z = 0.8142430 * lf[j] + u;
			n4 += (z >= 4) & (z < 8);
			n8 += z >= 8;
		}
		bits = 8 * ((full - n4 - n8) * ibpi_dq_sg_bytes(DQ_S, 2) + n4 * ibpi_dq_sg_bytes(DQ_S, 4) +
			    n8 * ibpi_dq_sg_bytes(DQ_S, 8));
	}
	if (full < J)
		bits += 8 * ibpi_dq_sg_bytes(d - full * DQ_S, width_of(lf[full], u, fixed));
	return bits;
}

ibp_status_t ibpi_dq_plan_make(dq_plan_t *pl, const dq_cfg_t *cfg, int n, uint64_t d, uint64_t seq, const float *gst)
{
	memset(pl, 0, sizeof *pl);
	pl->cfg = *cfg;
	pl->n = n;
	pl->d = d;
	pl->J = ceil_div(d, DQ_S);
	pl->seq = seq;
	uint64_t J = pl->J, J1 = J ? J : 1;
	pl->q = malloc(J1);
	pl->mu = malloc(J1 * sizeof(float));
	pl->boff = malloc(J1 * sizeof(uint64_t));
	pl->lo = malloc(((size_t)n + 1) * sizeof(uint64_t));
	pl->cbytes = malloc((size_t)n * sizeof(uint64_t));
	double *lf = calloc(J1, sizeof(double));
	if (!pl->q || !pl->mu || !pl->boff || !pl->lo || !pl->cbytes || !lf) {
		free(lf);
		ibpi_dq_plan_free(pl);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory for %llu super-groups",
				(unsigned long long)J);
	}
	for (uint64_t j = 0; j < J; j++) {
		if (!isfinite(gst[j]) || !isfinite(gst[J + j])) {
			free(lf);
			ibpi_dq_plan_free(pl);
			return ibpi_fail(IBP_ERR_INVALID_ARG,
					"coll: dynamiq: non-finite input (NaN or Inf) in super-group %llu",
					(unsigned long long)j);
		}
		pl->mu[j] = gst[j] / (float)n;
		lf[j] = gst[J + j] > 0 ? log2((double)gst[J + j]) : -INFINITY;
	}
	/* Largest u whose widths fit the budget: a fixed bisection, identical on
	 * every rank. 32 steps put u within 2e-7 of it (800 / 2^32); a width
	 * boundary closer than that can only leave one SG narrower, within the
	 * budget (60 steps were a quarter of the time before the ring). */
	int fixed = cfg->fixed_q;
	double budget = cfg->budget * (double)d, lo = -400, hi = 400, u;
	if ((double)plan_bits(lf, J, d, hi, fixed) <= budget)
		u = hi;
	else if ((double)plan_bits(lf, J, d, lo, fixed) > budget)
		u = lo;
	else {
		for (int it = 0; it < 32; it++) {
			double mid = 0.5 * (lo + hi);
			if ((double)plan_bits(lf, J, d, mid, fixed) <= budget)
				lo = mid;
			else
				hi = mid;
		}
		u = lo;
	}
	uint64_t total = 0;
	for (uint64_t j = 0; j < J; j++) {
		uint64_t c = (j + 1) * DQ_S <= d ? DQ_S : d - j * DQ_S;
		pl->q[j] = (uint8_t)width_of(lf[j], u, fixed);
		pl->boff[j] = total; /* prefix for now */
		total += ibpi_dq_sg_bytes(c, pl->q[j]);
	}
	free(lf);
	pl->total_bytes = total;
	/* Chunks on SG boundaries, balanced by bytes (the slowest chunk paces the ring). */
	pl->lo[0] = 0;
	uint64_t j = 0;
	for (int k = 1; k < n; k++) {
		uint64_t target = total / (uint64_t)n * (uint64_t)k + total % (uint64_t)n * (uint64_t)k / (uint64_t)n;
		while (j < J && pl->boff[j] < target)
			j++;
		pl->lo[k] = j;
	}
	pl->lo[n] = J;
	for (int k = 0; k < n; k++) {
		uint64_t base = pl->lo[k] < J ? pl->boff[pl->lo[k]] : total;
		uint64_t end = pl->lo[k + 1] < J ? pl->boff[pl->lo[k + 1]] : total;
		pl->cbytes[k] = end - base;
	}
	/* Offsets restart at every chunk. */
	for (int k = 0; k < n; k++) {
		uint64_t base = 0;
		for (uint64_t i = pl->lo[k]; i < pl->lo[k + 1]; i++) {
			uint64_t c = (i + 1) * DQ_S <= d ? DQ_S : d - i * DQ_S;
			pl->boff[i] = base;
			base += ibpi_dq_sg_bytes(c, pl->q[i]);
		}
	}
	for (int w = 0; w < 3; w++) {
		int q = 2 << w, R = (1 << (q - 1)) - 1;
		double eps = q == 4 ? cfg->eps4 : cfg->eps8, a = 1 + 2 * eps * eps;
		for (int r = 0; r <= R; r++)
			pl->lv[w][r] = cfg->nonuniform && R > 1 && eps > 0 ? (float)((pow(a, r) - 1) / (pow(a, R) - 1))
								: (float)r / (float)R;
		pl->lv[w][R] = 1.0f;
		for (int b = 0, r = 0; b < 1024; b++) {
			while (r < R - 1 && pl->lv[w][r + 1] <= (float)b / 1024.0f)
				r++;
			pl->tab[w][b] = (uint8_t)r;
		}
	}
	return IBP_OK;
}

/* Decodes one SG of c entries at width q: y[i] = decoded + (x ? x[i] - add : add). */
static ibp_status_t sg_decode(const dq_plan_t *pl, const uint8_t *p, uint64_t c, int q, const float *x, float add,
			      float *y)
{
	float sf = fp8i_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
	if (!(sf >= 0) || isinf(sf))
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: dynamiq: super-group scale is not a finite non-negative number");
	const uint8_t *rg = p + 2, *code = p + 2 + ceil_div(c, DQ_G);
	const float *lv = pl->lv[qidx(q)];
	float gs[DQ_S / DQ_G];
	for (uint64_t g = 0; g < ceil_div(c, DQ_G); g++)
		gs[g] = ibpq_dq_group_scale(rg[g], sf); /* exact for r = 255: constant data stays exact */
	const dq_kern_t *K = ibpi_dq_kern();
	if (K && c == DQ_S) {
		K->decode(lv, code, q, gs, x, add, y);
		return IBP_OK;
	}
	for (uint64_t i = 0; i < c; i++) {
		uint64_t bit = i * (uint64_t)q;
		unsigned v = (code[bit >> 3] >> (bit & 7)) & ((1u << q) - 1);
		y[i] = ibpq_dq_value(v, q, lv, gs[i / DQ_G]) + (x ? x[i] - add : add);
	}
	return IBP_OK;
}

/* Quantizes y (c entries, SG starting at global coordinate g0) at width q
 * into p. keep: scales to reuse (the no-fresh-scales baseline), else NULL. */
static void sg_encode(const dq_plan_t *pl, const float *y, uint64_t c, int q, uint64_t g0, int w,
		      const uint8_t *keep, uint8_t *p)
{
	uint64_t key = ibpq_call_key(pl->cfg.seed, pl->seq);
	uint64_t ng = ceil_div(c, DQ_G);
	uint8_t *rg = p + 2, *code = p + 2 + ng;
	float gmax[DQ_S / DQ_G], sf;
	const dq_kern_t *K = ibpi_dq_kern();
	/* The vector path: full SGs, fresh scales, independent rounding, finite values. */
	if (K && c == DQ_S && !keep && !pl->cfg.correlated && K->gmax(y, gmax)) {
		float M = 0;
		for (uint64_t g = 0; g < ng; g++)
			M = maxf(M, gmax[g]);
		uint16_t sb = fp8i_bf16_up(M);
		p[0] = (uint8_t)sb;
		p[1] = (uint8_t)(sb >> 8);
		sf = fp8i_bf16_to_f32(sb);
		K->rg(gmax, sf, key ^ DQ_K_GTAG ^ ((uint64_t)(w + 1) * DQ_K_GRANK), g0 / DQ_G, rg);
		K->codes(pl->lv[qidx(q)], pl->tab[qidx(q)], q, y, gmax, key ^ ((uint64_t)(w + 1) * DQ_K_RANK), g0,
			 code);
		return;
	}
	for (uint64_t g = 0; g < ng; g++) {
		float m = 0;
		for (uint64_t i = g * DQ_G; i < c && i < (g + 1) * DQ_G; i++)
			m = maxf(m, fabsf(y[i]));
		gmax[g] = m;
	}
	if (keep) {
		memcpy(p, keep, 2 + ng);
		sf = fp8i_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
		for (uint64_t g = 0; g < ng; g++)
			gmax[g] = ibpq_dq_group_scale(rg[g], sf);
	} else {
		float M = 0;
		for (uint64_t g = 0; g < ng; g++)
			M = maxf(M, gmax[g]);
		uint16_t sb = fp8i_bf16_up(M);
		p[0] = (uint8_t)sb;
		p[1] = (uint8_t)(sb >> 8);
		sf = fp8i_bf16_to_f32(sb);
		for (uint64_t g = 0; g < ng; g++)
			rg[g] = ibpq_dq_group_code(gmax[g], sf, ibpq_dq_u_group(key, g0 / DQ_G + g, w));
	}
	const float *lv = pl->lv[qidx(q)];
	const uint8_t *tab = pl->tab[qidx(q)];
	memset(code, 0, ceil_div(c * (uint64_t)q, 8));
	for (uint64_t i = 0; i < c; i++) {
		uint64_t gi = g0 + i;
		float u = ibpq_dq_u_entry(key, gi, w);
		if (pl->cfg.correlated) /* one rank per slice [k/n, (k+1)/n): a random shift per coordinate */
			u = ibpq_dq_u_correlated(key, gi, w, pl->n, u);
		unsigned v = ibpq_dq_code(y[i], gmax[i / DQ_G], lv, tab, q, u);
		uint64_t bit = i * (uint64_t)q;
		code[bit >> 3] |= (uint8_t)(v << (bit & 7));
	}
}

ibp_status_t ibpi_dq_hop_sgs(const dq_plan_t *pl, uint64_t j0, uint64_t j1, const uint8_t *in, const void *src,
			     ibp_dtype_t dt, int w, uint8_t *out)
{
	float y[DQ_S], xs[DQ_S];
	const uint64_t b0 = j0 < j1 ? pl->boff[j0] : 0;
	for (uint64_t j = j0; j < j1; j++) {
		uint64_t a = j * DQ_S, c = sg_len(pl, j);
		const float *x = sg_x(src, dt, a, c, xs);
		const uint8_t *ij = in ? in + (pl->boff[j] - b0) : NULL;
		int q = pl->q[j];
		float mu = pl->mu[j];
		if (ij)
			IBP_TRY(sg_decode(pl, ij, c, q, x, mu, y));
		else
			for (uint64_t i = 0; i < c; i++)
				y[i] = 0.0f + (x[i] - mu);
		sg_encode(pl, y, c, q, a, w, ij && !pl->cfg.fresh ? ij : NULL, out + (pl->boff[j] - b0));
	}
	return IBP_OK;
}

ibp_status_t ibpi_dq_hop(const dq_plan_t *pl, uint64_t k, const uint8_t *in, const float *x, int w, uint8_t *out)
{
	return ibpi_dq_hop_sgs(pl, pl->lo[k], pl->lo[k + 1], in, x, IBP_DTYPE_F32, w, out);
}


ibp_status_t ibpi_dq_decode_sgs(const dq_plan_t *pl, uint64_t j0, uint64_t j1, const uint8_t *in, ibp_dtype_t dt,
				void *dst)
{
	float y[DQ_S];
	const uint64_t b0 = j0 < j1 ? pl->boff[j0] : 0, esz = ibp_dtype_size(dt);
	for (uint64_t j = j0; j < j1; j++) {
		uint64_t a = j * DQ_S, c = sg_len(pl, j);
		float nm = (float)pl->n * pl->mu[j];
		float *yj = dt == IBP_DTYPE_F32 ? (float *)dst + a : y;
		IBP_TRY(sg_decode(pl, in + (pl->boff[j] - b0), c, pl->q[j], NULL, nm, yj));
		if (yj == y)
			ibpi_coll_narrow(y, dt, c, (uint8_t *)dst + a * esz);
	}
	return IBP_OK;
}

ibp_status_t ibpi_dq_decode_chunk(const dq_plan_t *pl, uint64_t k, const uint8_t *in, float *y)
{
	return ibpi_dq_decode_sgs(pl, pl->lo[k], pl->lo[k + 1], in, IBP_DTYPE_F32, y);
}

uint64_t ibpi_dq_max_chunk(const dq_plan_t *pl)
{
	uint64_t m = 1;
	for (int k = 0; k < pl->n; k++)
		m = pl->cbytes[k] > m ? pl->cbytes[k] : m;
	return m;
}

ibp_status_t ibpi_dq_simulate(const float *const *x, int n, uint64_t d, const dq_cfg_t *cfg, uint64_t seq, float *out,
			 uint64_t *wire_bits)
{
	uint64_t J = ceil_div(d, DQ_S), J1 = J ? J : 1;
	float *st = calloc(2 * J1, sizeof(float)), *gst = calloc(2 * J1, sizeof(float));
	if (!st || !gst) {
		free(st);
		free(gst);
		return ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory");
	}
	for (int r = 0; r < n; r++) { /* summed in rank order, as the collective does */
		ibpi_dq_local_stats(x[r], d, st);
		for (uint64_t i = 0; i < 2 * J; i++)
			gst[i] += st[i];
	}
	free(st);
	dq_plan_t pl;
	ibp_status_t s = ibpi_dq_plan_make(&pl, cfg, n, d, seq, gst);
	free(gst);
	if (s != IBP_OK)
		return s;
	uint64_t mc = ibpi_dq_max_chunk(&pl);
	uint8_t *a = malloc(mc), *b = malloc(mc);
	if (!a || !b)
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: dynamiq: out of memory");
	/* Chunk k: leaf k+1, then k+2, ..., sink k (the ring's order). */
	for (int k = 0; k < n && s == IBP_OK; k++) {
		s = ibpi_dq_hop(&pl, (uint64_t)k, NULL, x[(k + 1) % n], (k + 1) % n, a);
		for (int t = 2; t <= n && s == IBP_OK; t++) {
			int w = (k + t) % n;
			s = ibpi_dq_hop(&pl, (uint64_t)k, a, x[w], w, b);
			uint8_t *tmp = a;
			a = b;
			b = tmp;
		}
		if (s == IBP_OK)
			s = ibpi_dq_decode_chunk(&pl, (uint64_t)k, a, out);
	}
	if (wire_bits)
		*wire_bits = pl.total_bytes * 8;
	free(a);
	free(b);
	ibpi_dq_plan_free(&pl);
	return s;
}
