/* test_dynamiq.c - DynamiQ: the collective on the in-process transport
 * against the one-process simulation (same bytes), the bit budget, vNMSE
 * against worker count and against the paper's baselines (stale scales,
 * THC-style fixed 4-bit, an MXFP8-like format), corrupt payloads, and the
 * vector kernels (AVX2, AVX-512) against the scalar reference, byte for byte.
 * IBP_DQ_MAX_WORKERS (default 8) raises the worker sweep up to 64. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/dynamiq.h"
#include "coll/dynamiq_simd.h"
#include "fp8/fp8_impl.h"
#include "util/mix.h"
#include "ibp/coll.h"
#include "ibp/status.h"
#include "ranks.h"
#include "testutil.h"

static double gauss(tu_rng_t *r)
{
	double u = tu_uniform(r), v = tu_uniform(r);
	return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* Gradient-like buffers: a log-normal scale per 256 elements (layers
 * differ by orders of magnitude), 30% of them near zero (embedding rows
 * of tokens not in the batch), a signal shared by the workers plus
 * per-worker noise, heavy-ish tails. */
static double g_sigma = 1.5, g_zero = 0.3;

static float **make_grads(int n, uint64_t d, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	float **x = malloc((size_t)n * sizeof *x);
	float *sig = malloc(d * sizeof(float)), *sc = malloc((d / 256 + 1) * sizeof(float));
	for (uint64_t j = 0; j <= d / 256; j++)
		sc[j] = (float)(exp(g_sigma * gauss(&r)) * (tu_uniform(&r) < g_zero ? 1e-3 : 1));
	for (uint64_t i = 0; i < d; i++)
		sig[i] = (float)(gauss(&r) * (tu_uniform(&r) < 0.05 ? 4 : 1));
	for (int w = 0; w < n; w++) {
		x[w] = malloc(d * sizeof(float));
		for (uint64_t i = 0; i < d; i++)
			x[w][i] = sc[i / 256] * (0.5f * sig[i] + (float)gauss(&r));
	}
	free(sig);
	free(sc);
	return x;
}

static void free_grads(float **x, int n)
{
	for (int w = 0; w < n; w++)
		free(x[w]);
	free(x);
}

static double vnmse(float *const *x, int n, uint64_t d, const float *est)
{
	double e = 0, s = 0;
	for (uint64_t i = 0; i < d; i++) {
		double t = 0;
		for (int w = 0; w < n; w++)
			t += x[w][i];
		e += (t - est[i]) * (t - est[i]);
		s += t * t;
	}
	return e / s;
}

static double dq_vnmse(float *const *x, int n, uint64_t d, const dq_cfg_t *cfg, uint64_t *bits)
{
	float *out = malloc(d * sizeof(float));
	cr_assert_eq(ibpi_dq_simulate((const float *const *)x, n, d, cfg, 7, out, bits), IBP_OK, "%s", ibp_last_error());
	double v = vnmse(x, n, d, out);
	free(out);
	return v;
}

/* E4M3 round to nearest of v in [0, 448]. */
static float e4m3(float v)
{
	if (v <= 0)
		return 0;
	int e = (int)floor(log2(v));
	if (e < -6)
		e = -6;
	float step = ldexpf(1.0f, e - 3), q = nearbyintf(v / step) * step;
	return q > 448 ? 448 : q;
}

/* MXFP8-like ring: blocks of 32 with a BF16 scale (rounded up), E4M3
 * elements, fresh scales re-computed at every hop (kinder to the baseline
 * than the paper's global-max multiplier). */
static double mxfp8_vnmse(float *const *x, int n, uint64_t d)
{
	float *out = malloc(d * sizeof(float)), *acc = malloc(d * sizeof(float));
	for (int k = 0; k < n; k++) {
		uint64_t a = d * (uint64_t)k / (uint64_t)n, b = d * (uint64_t)(k + 1) / (uint64_t)n;
		for (uint64_t i = a; i < b; i++)
			acc[i] = 0;
		for (int t = 1; t <= n; t++) {
			int w = (k + t) % n;
			for (uint64_t i = a; i < b; i++)
				acc[i] += x[w][i];
			for (uint64_t blk = a; blk < b; blk += 32) {
				uint64_t e = blk + 32 < b ? blk + 32 : b;
				float m = 0;
				for (uint64_t i = blk; i < e; i++)
					m = fmaxf(m, fabsf(acc[i]));
				uint16_t sb = fp8i_f32_to_bf16(m / 448);
				if (fp8i_bf16_to_f32(sb) < m / 448)
					sb++;
				float s = fp8i_bf16_to_f32(sb);
				for (uint64_t i = blk; i < e; i++)
					acc[i] = s > 0 ? copysignf(e4m3(fabsf(acc[i]) / s) * s, acc[i]) : 0;
			}
		}
		for (uint64_t i = a; i < b; i++)
			out[i] = acc[i];
	}
	double v = vnmse(x, n, d, out);
	free(out);
	free(acc);
	return v;
}

/* THC-style: one global range (max |x| over all workers), 4-bit uniform
 * stochastic quantization at the leaf, integer lanes summed exactly. */
static double thc_vnmse(float *const *x, int n, uint64_t d)
{
	float M = 0;
	for (int w = 0; w < n; w++)
		for (uint64_t i = 0; i < d; i++)
			M = fmaxf(M, fabsf(x[w][i]));
	tu_rng_t r;
	tu_rng_seed(&r, 99);
	float *out = calloc(d, sizeof(float));
	for (int w = 0; w < n; w++)
		for (uint64_t i = 0; i < d; i++) {
			double t = (x[w][i] / M + 1) * 7.5, f = floor(t);
			out[i] += (float)(((f + (tu_uniform(&r) < t - f)) / 7.5 - 1) * M);
		}
	double v = vnmse(x, n, d, out);
	free(out);
	return v;
}

Test(dynamiq, budget_and_widths)
{
	uint64_t d = 40000; /* not a multiple of 256: a short last super-group */
	float **x = make_grads(4, d, 1);
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	for (double b = 3; b <= 8; b += 1) {
		cfg.budget = b;
		uint64_t bits = 0;
		dq_vnmse(x, 4, d, &cfg, &bits);
		cr_assert_leq((double)bits, b * (double)d, "budget %g: %llu bits", b, (unsigned long long)bits);
		/* Tight: within one SG's step up (2 -> 4 or 4 -> 8 bits) of the budget. */
		cr_assert_geq((double)bits, b * (double)d - 8.0 * 256 * 4 - 8, "budget %g: only %llu bits", b,
			      (unsigned long long)bits);
	}
	/* Widths grow with the super-group's energy. */
	uint64_t J = (d + 255) / 256;
	float *st = calloc(2 * J, sizeof(float));
	ibpi_dq_local_stats(x[0], d, st);
	dq_plan_t pl;
	ibpi_dq_cfg_default(&cfg);
	cr_assert_eq(ibpi_dq_plan_make(&pl, &cfg, 4, d, 1, st), IBP_OK);
	int seen[9] = { 0 };
	for (uint64_t a = 0; a < J; a++) {
		seen[pl.q[a]] = 1;
		for (uint64_t b = 0; b < J; b++)
			if (st[J + a] < st[J + b])
				cr_assert_leq(pl.q[a], pl.q[b]);
	}
	cr_assert(seen[2] && seen[4] && seen[8], "all three widths are used on log-normal data");
	/* Levels: 0 and 1 at the ends, increasing, denser near 0. */
	for (int w = 1; w < 3; w++) {
		int R = (1 << ((2 << w) - 1)) - 1;
		cr_assert_eq(pl.lv[w][0], 0.0f);
		cr_assert_eq(pl.lv[w][R], 1.0f);
		for (int r = 0; r < R; r++)
			cr_assert_lt(pl.lv[w][r], pl.lv[w][r + 1]);
		cr_assert_lt(pl.lv[w][1] - pl.lv[w][0], pl.lv[w][R] - pl.lv[w][R - 1]);
	}
	ibpi_dq_plan_free(&pl);
	free(st);
	free_grads(x, 4);
}

Test(dynamiq, vnmse_vs_workers_and_baselines)
{
	int maxw = 8;
	const char *e = getenv("IBP_DQ_MAX_WORKERS");
	if (e && atoi(e) >= 2)
		maxw = atoi(e) > 64 ? 64 : atoi(e);
	uint64_t d = 1 << 15;
	for (int n = 2; n <= maxw; n = n < 8 ? n + 1 : n * 2) {
		/* Means over 3 data sets: one is dominated by its few largest super-groups. */
		double dq = 0, corr = 0, uni4 = 0, stale = 0, mx = 0, thc = 0, bpc = 0;
		for (uint64_t k = 0; k < 3; k++) {
			float **x = make_grads(n, d, 100 * k + (uint64_t)n);
			dq_cfg_t cfg;
			ibpi_dq_cfg_default(&cfg);
			uint64_t bits;
			dq += dq_vnmse(x, n, d, &cfg, &bits) / 3;
			cr_assert_leq((double)bits, 5.0 * (double)d);
			bpc = fmax(bpc, (double)bits / (double)d);
			cfg.fresh = 0;
			stale += dq_vnmse(x, n, d, &cfg, NULL) / 3;
			ibpi_dq_cfg_default(&cfg);
			cfg.correlated = 1;
			corr += dq_vnmse(x, n, d, &cfg, NULL) / 3;
			ibpi_dq_cfg_default(&cfg);
			cfg.fixed_q = 4;
			cfg.nonuniform = 0;
			cfg.budget = 8.6;
			uni4 += dq_vnmse(x, n, d, &cfg, NULL) / 3;
			mx += mxfp8_vnmse(x, n, d) / 3;
			thc += thc_vnmse(x, n, d) / 3;
			free_grads(x, n);
		}
		cr_log_info("n=%d bits/coord %.3f vNMSE: dynamiq %.5f, correlated rounding %.5f, uniform 4-bit %.5f, "
			    "stale scales %.5f, MXFP8-like %.5f, THC-style %.5f",
			    n, bpc, dq, corr, uni4, stale, mx, thc);
		/* The paper's ordering: DynamiQ well below MXFP8, far below THC and stale scales. */
		cr_assert_lt(dq * 1.25, mx, "n=%d: dynamiq %.5f vs MXFP8-like %.5f", n, dq, mx);
		cr_assert_lt(mx, thc, "n=%d: MXFP8-like %.5f vs THC-style %.5f", n, mx, thc);
		cr_assert_lt(dq, stale, "n=%d: dynamiq %.5f vs stale scales %.5f", n, dq, stale);
		cr_assert_lt(dq, uni4, "n=%d: dynamiq %.5f vs uniform 4-bit %.5f", n, dq, uni4);
		cr_assert_lt(dq, 0.0005 * n, "n=%d: dynamiq %.5f", n, dq);
	}
}

/* Unbiased: the mean over many calls (different seeds) approaches the sum. */
Test(dynamiq, unbiased)
{
	/* the scalar reference's statistics; the vector kernels give its bytes (dynamiq/simd_same_bytes) */
	cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
	int n = 3;
	uint64_t d = 512, T = 400;
	float **x = make_grads(n, d, 5);
	double *mean = calloc(d, sizeof(double));
	float *out = malloc(d * sizeof(float));
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	cfg.budget = 3; /* coarse, so the bias would show */
	double e1 = 0;
	for (uint64_t t = 0; t < T; t++) {
		cr_assert_eq(ibpi_dq_simulate((const float *const *)x, n, d, &cfg, t, out, NULL), IBP_OK);
		for (uint64_t i = 0; i < d; i++)
			mean[i] += out[i] / (double)T;
		e1 += vnmse(x, n, d, out) / (double)T;
	}
	float *m = malloc(d * sizeof(float));
	for (uint64_t i = 0; i < d; i++)
		m[i] = (float)mean[i];
	double em = vnmse(x, n, d, m);
	/* Independent errors shrink like 1/T (ratio 1); a bias would not
	 * (correlated rounding gives about 20 here). */
	cr_assert_lt(em, 2 * e1 / (double)T, "mean of %llu calls: vNMSE %.6f, one call %.6f", (unsigned long long)T,
		     em, e1);
	free(m);
	free(mean);
	free(out);
	free_grads(x, n);
}

/* Constant super-groups centre to zero and come back exactly. */
Test(dynamiq, mean_added_back)
{
	int n = 4;
	uint64_t d = 1000;
	float *x[4], out[1000];
	for (int w = 0; w < n; w++) {
		x[w] = malloc(d * sizeof(float));
		for (uint64_t i = 0; i < d; i++)
			x[w][i] = (float)((int)(i / 256) * 3 - 2 + w);
	}
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	cr_assert_eq(ibpi_dq_simulate((const float *const *)x, n, d, &cfg, 1, out, NULL), IBP_OK);
	for (uint64_t i = 0; i < d; i++)
		cr_assert_eq(out[i], (float)(4 * ((int)(i / 256) * 3 - 2) + 6), "element %llu: %g", (unsigned long long)i,
			     out[i]);
	for (int w = 0; w < n; w++)
		free(x[w]);
}

/* ---- the collective ---- */

/* Rank 1 of 2 (ranks.h custom): valid statistics, then a bad chunk 0
 * (fake 1: one byte short; 2: a NaN scale). */
static void fake_rank(rank_job_t *j, ibp_coll_transport_t *tp)
{
	ibp_coll_transport_t t = *tp;
	uint64_t J = (j->n + 255) / 256, rb, cap = ((uint64_t)1 << 20) + COLL_HDR;
	uint8_t *m = calloc(1, cap), *in = malloc(cap);
	coll_hdr_t h = { COLL_MAGIC, COLL_OP_AR, (uint8_t)j->codec, (uint8_t)j->dt, COLL_ENC_RAW, j->n, 2 * J, 1, 1 };
	memcpy(m, &h, sizeof h);
	j->st = t.sendrecv(t.ctx, 0, m, COLL_HDR + 2 * J * 4, 0, in, cap, &rb, 5000);
	/* The plan rank 0 makes: its statistics plus this rank's zeros. */
	dq_plan_t pl;
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	cr_assert_eq(ibpi_dq_plan_make(&pl, &cfg, 2, j->n, 1, (const float *)(in + COLL_HDR)), IBP_OK);
	uint64_t e = (pl.lo[1] * 256 < j->n ? pl.lo[1] * 256 : j->n) - pl.lo[0] * 256;
	h.enc = COLL_ENC_DQ;
	h.chunk = 0;
	h.elems = e;
	memcpy(m, &h, sizeof h);
	uint64_t size = pl.cbytes[0] - (j->fake == 1); /* 1: one byte short; 2: a NaN scale */
	memset(m + COLL_HDR, 0, size);
	m[COLL_HDR] = 0xc1;
	m[COLL_HDR + 1] = 0x7f;
	t.sendrecv(t.ctx, 0, m, COLL_HDR + size, -1, NULL, 0, &rb, 5000);
	ibpi_dq_plan_free(&pl);
	free(m);
	free(in);
	if (t.destroy)
		t.destroy(t.ctx);
}

Test(dynamiq, collective_matches_simulation)
{
	int p = 4;
	uint64_t d = 5000;
	float **x = make_grads(p, d, 42), *ref = malloc(d * sizeof(float));
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	/* The first call on a fresh communicator is call 1. */
	cr_assert_eq(ibpi_dq_simulate((const float *const *)x, p, d, &cfg, 1, ref, NULL), IBP_OK);
	rank_job_t jobs[4];
	memset(jobs, 0, sizeof jobs);
	for (int r = 0; r < p; r++) {
		jobs[r].dt = IBP_DTYPE_F32;
		jobs[r].codec = IBP_COLL_CODEC_DYNAMIQ;
		jobs[r].n = d;
		jobs[r].in = x[r];
		jobs[r].out = malloc(d * sizeof(float));
	}
	ranks_run(jobs, p);
	for (int r = 0; r < p; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(memcmp(jobs[r].out, ref, d * sizeof(float)), 0, "rank %d differs from the simulation", r);
		cr_assert_eq(jobs[r].stats.compressed, 1);
		/* Wire: about 5/32 of FP32 on the main ring plus the statistics. */
		cr_assert_lt(jobs[r].stats.wire_bytes * 4, jobs[r].stats.logical_bytes, "ratio %.2f",
			     (double)jobs[r].stats.logical_bytes / (double)jobs[r].stats.wire_bytes);
		free(jobs[r].out);
	}
	free(ref);
	free_grads(x, p);
}

Test(dynamiq, collective_bf16_identical_ranks)
{
	int p = 3;
	uint64_t d = 3000;
	float **x = make_grads(p, d, 43);
	uint16_t *in[3], *out[3];
	rank_job_t jobs[3];
	memset(jobs, 0, sizeof jobs);
	for (int r = 0; r < p; r++) {
		in[r] = malloc(d * 2);
		out[r] = malloc(d * 2);
		for (uint64_t i = 0; i < d; i++)
			in[r][i] = fp8i_f32_to_bf16(x[r][i]);
		jobs[r] = (rank_job_t){ .dt = IBP_DTYPE_BF16, .codec = IBP_COLL_CODEC_DYNAMIQ, .n = d, .in = in[r], .out = out[r] };
	}
	ranks_run(jobs, p);
	double e = 0, s = 0;
	for (int r = 0; r < p; r++) {
		cr_assert_eq(jobs[r].st, IBP_OK, "rank %d: %s", r, jobs[r].err);
		cr_assert_eq(memcmp(out[r], out[0], d * 2), 0, "rank %d's result differs from rank 0's", r);
	}
	for (uint64_t i = 0; i < d; i++) {
		double t = 0;
		for (int r = 0; r < p; r++)
			t += fp8i_bf16_to_f32(in[r][i]);
		double g = fp8i_bf16_to_f32(out[0][i]);
		e += (g - t) * (g - t);
		s += t * t;
	}
	cr_assert_lt(e / s, 0.01, "vNMSE %.5f", e / s);
	for (int r = 0; r < p; r++) {
		free(in[r]);
		free(out[r]);
	}
	free_grads(x, p);
}

static int simd_impls(coll_simd_impl_t *out);

/* The randomness CPU codecs and CUDA kernels share (util/mix.h): splitmix64's
 * known outputs, and the uniform's ends (a change here would move CPU and GPU
 * together, so only known values can catch it). */
Test(dynamiq, mix_known_values)
{
	cr_assert_eq(ibp_mix64(0), 0xe220a8397b1dcdafull);
	cr_assert_eq(ibp_mix64(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
	cr_assert_eq(ibp_mix64(12345), 0x22118258a9d111a0ull);
	cr_assert_eq(ibp_u01(0), 0.0f);
	cr_assert_eq(ibp_u01(1ull << 40), 1.0f / 16777216.0f);
	cr_assert_eq(ibp_u01(~0ull), 1.0f - 1.0f / 16777216.0f);
	cr_assert_eq(fp8i_bf16_up(1.0f), 0x3f80);
	cr_assert_eq(fp8i_bf16_up(1.00390625f), 0x3f81); /* 1 + 2^-8: bf16 rounds it down to 1, up is 0x3f81 */
	cr_assert_eq(fp8i_bf16_up(0.0f), 0x0000);
}

/* util/quant_rules.h, the arithmetic the CPU codecs and the kernels share:
 * hand-computed values (a change moves CPU and GPU together, so the
 * emulator's CPU = GPU checks cannot see it). */
Test(dynamiq, quant_rules_known_values)
{
	/* group code: 255 * 1 / 2 = 127.5 rounds up when u < 0.5; capped at 255 */
	cr_assert_eq(ibpq_dq_group_code(1.0f, 2.0f, 0.4f), 128);
	cr_assert_eq(ibpq_dq_group_code(1.0f, 2.0f, 0.6f), 127);
	cr_assert_eq(ibpq_dq_group_code(3.0f, 2.0f, 0.0f), 255);
	cr_assert_eq(ibpq_dq_group_code(1.0f, 0.0f, 0.0f), 0);
	cr_assert_eq(ibpq_dq_group_scale(255, 0.75f), 0.75f);
	cr_assert_eq(ibpq_dq_group_scale(51, 1.0f), 0.2f);
	/* levels 0, 0.25, 0.5, 1 (q = 3: R = 3): |y| / m = 0.375 lies halfway from 0.25 to 0.5 */
	const float lv[4] = {0.0f, 0.25f, 0.5f, 1.0f};
	uint8_t tab[1024];
	for (int b = 0; b < 1024; b++)
		tab[b] = b < 256 ? 0 : b < 512 ? 1 : 2;
	cr_assert_eq(ibpq_dq_code(0.375f, 1.0f, lv, tab, 3, 0.49f), 2u);
	cr_assert_eq(ibpq_dq_code(0.375f, 1.0f, lv, tab, 3, 0.51f), 1u);
	cr_assert_eq(ibpq_dq_code(-0.375f, 1.0f, lv, tab, 3, 0.49f), 2u | 4u);
	cr_assert_eq(ibpq_dq_code(-0.01f, 1.0f, lv, tab, 3, 0.99f), 0u); /* level 0 carries no sign */
	cr_assert_eq(ibpq_dq_code(2.0f, 1.0f, lv, tab, 3, 0.0f), 3u);    /* above the scale: the top level */
	cr_assert_eq(ibpq_dq_value(2u | 4u, 3, lv, 2.0f), -1.0f);
	cr_assert_eq(ibpq_dq_value(3u, 3, lv, 2.0f), 2.0f);
	cr_assert_eq(ibpq_dq_u_correlated(0, 0, 0, 1, 0.25f), 0.25f);
	/* LSQ: 4 bits (Lm = 7), scale 1: 0.5 -> 3.5, rounded by the coordinate's uniform */
	const uint64_t key = 99;
	for (uint64_t i = 0; i < 64; i++) {
		float u = ibp_u01(ibp_mix64(key ^ (i * IBPQ_K_IDX)));
		cr_assert_eq(ibpq_lsq_code(-0.5f, 1.0f, 4, key, i), (u < 0.5f ? 4u : 3u) | 8u);
		cr_assert_eq(ibpq_pts_keep(0.5f, 1.0f, 1.0f, key, i), u < 0.5f);
	}
	cr_assert_eq(ibpq_lsq_code(9.0f, 1.0f, 4, key, 0), 7u); /* capped */
	cr_assert_eq(ibpq_lsq_value(3u | 8u, 4, 7.0f), -3.0f);
	cr_assert_eq(ibpq_lsq_scale(15, 4, 2.0f), 2.0f);
	cr_assert_eq(ibpq_lsq_bytes(100, 10, 4, 4), 8u + 5u + 50u);
	cr_assert_eq(ibpq_lsq_bytes(100, 10, 2, 0), 8u + 40u + 25u);
	cr_assert(ibpq_lsq_params_ok(65535, 8, 0) && !ibpq_lsq_params_ok(0, 4, 4) && !ibpq_lsq_params_ok(16, 3, 4) &&
		  !ibpq_lsq_params_ok(16, 4, 5));
}

/* The shared float32 -> dt narrow (DynamiQ's and PTS's results): known
 * values, nearest even on ties, Inf and NaN kept, FP32 copied. */
Test(dynamiq, narrow_known_values)
{
	const uint32_t f[] = { 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80c000u, 0xbf808001u,
			       0x7f800000u, 0x7fc00001u, 0x00000001u, 0x477ff000u, 0x33000000u };
	const uint16_t bf[] = { 0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xbf81, 0x7f80, 0x7fc0, 0x0000, 0x4780, 0x3300 };
	const uint16_t hf[] = { 0x3c00, 0x3c04, 0x3c0c, 0x3c06, 0xbc04, 0x7c00, 0x7e00, 0x0000, 0x7c00, 0x0000 };
	const uint64_t n = sizeof f / sizeof f[0];
	float x[10];
	uint16_t y[10];
	uint32_t z[10];
	memcpy(x, f, sizeof x);
	ibpi_coll_narrow(x, IBP_DTYPE_BF16, n, y);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(y[i], bf[i], "bf16 of %08x: %04x, want %04x", f[i], y[i], bf[i]);
	ibpi_coll_narrow(x, IBP_DTYPE_F16, n, y);
	for (uint64_t i = 0; i < n; i++) {
		if (hf[i] == 0x7e00) /* a NaN: any quiet NaN with the sign */
			cr_assert(((y[i] & 0x7c00) == 0x7c00) && (y[i] & 0x3ff), "f16 of %08x: %04x, want a NaN", f[i], y[i]);
		else
			cr_assert_eq(y[i], hf[i], "f16 of %08x: %04x, want %04x", f[i], y[i], hf[i]);
	}
	ibpi_coll_narrow(x, IBP_DTYPE_F32, n, z);
	cr_assert_eq(memcmp(z, f, sizeof z), 0);
}

/* The local statistics: the mean and sum of squares of every SG (a short
 * last one included) within FP32 rounding of a double sum, and the BF16
 * input widened SG by SG gives the bits of its FP32 copy; every vector
 * implementation gives the scalar bits, for FP32, BF16 and F16 input. */
Test(dynamiq, local_stats)
{
	uint64_t d = 3 * 256 + 77, J = 4;
	float **x = make_grads(1, d, 5), st[8], st2[8];
	uint16_t *b = malloc(d * 2);
	float *xb = malloc(d * 4);
	ibpi_dq_local_stats(x[0], d, st);
	for (uint64_t j = 0; j < J; j++) {
		uint64_t a = j * 256, e = a + 256 < d ? a + 256 : d;
		double s = 0, s2 = 0;
		for (uint64_t i = a; i < e; i++) {
			s += x[0][i];
			s2 += (double)x[0][i] * x[0][i];
		}
		cr_assert_leq(fabs(st[j] - s / (double)(e - a)), 1e-5 * (fabs(s2) + 1), "SG %llu mean %g, want %g",
			      (unsigned long long)j, st[j], s / (double)(e - a));
		cr_assert_leq(fabs(st[J + j] - s2), 1e-5 * s2, "SG %llu sum of squares %g, want %g",
			      (unsigned long long)j, st[J + j], s2);
	}
	for (uint64_t i = 0; i < d; i++) {
		b[i] = fp8i_f32_to_bf16(x[0][i]);
		xb[i] = fp8i_bf16_to_f32(b[i]);
	}
	ibpi_dq_local_stats(xb, d, st);
	ibpi_dq_local_stats_dt(b, IBP_DTYPE_BF16, d, st2);
	cr_assert_eq(memcmp(st, st2, sizeof st), 0);
	/* the vector kernels against the scalar sums, on a larger call */
	uint64_t n = 40 * 256 + 100, JJ = (n + 255) / 256;
	float **y = make_grads(1, n, 6);
	uint16_t *yb = malloc(n * 2), *yh = malloc(n * 2);
	for (uint64_t i = 0; i < n; i++) {
		yb[i] = fp8i_f32_to_bf16(y[0][i]);
		yh[i] = fp8i_f32_to_f16(y[0][i]);
	}
	const void *srcs[3] = { y[0], yb, yh };
	const ibp_dtype_t dts[3] = { IBP_DTYPE_F32, IBP_DTYPE_BF16, IBP_DTYPE_F16 };
	float *ref = malloc(2 * JJ * 4), *got = malloc(2 * JJ * 4);
	coll_simd_impl_t impls[2];
	int ni = simd_impls(impls);
	for (int k = 0; k < 3; k++) {
		cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
		ibpi_dq_local_stats_dt(srcs[k], dts[k], n, ref);
		for (int m = 0; m < ni; m++) {
			cr_assert(ibpi_coll_simd_set(impls[m]));
			ibpi_dq_local_stats_dt(srcs[k], dts[k], n, got);
			cr_assert_eq(memcmp(ref, got, 2 * JJ * 4), 0, "%s statistics of %s differ from the scalar ones",
				     ibpi_coll_simd_name(impls[m]), ibp_dtype_name(dts[k]));
		}
	}
	ibpi_coll_simd_set(COLL_SIMD_AUTO);
	cr_log_info("local_stats: %d vector implementation(s) checked", ni);
	free(ref);
	free(got);
	free(yb);
	free(yh);
	free_grads(y, 1);
	free(b);
	free(xb);
	free_grads(x, 1);
}

/* The pipelined ring (pieces on SG boundaries, in flight at once) makes
 * the bytes of the whole-chunk ring: FP32 equal to the one-thread
 * simulation, BF16 in place (recv == send) equal to the whole-chunk call,
 * for 2 to 5 ranks and piece sizes from one SG a piece to a few. */
Test(dynamiq, pipelined_matches_whole_chunks)
{
	static const char *const pieces[] = { "64", "200" }; /* 200: 4 pieces a chunk at 5 ranks */
	for (int p = 2; p <= 5; p++)
		for (int pi = 0; pi < 2; pi++) {
			uint64_t d = 7000 + 333 * (uint64_t)p; /* a short last SG */
			float **x = make_grads(p, d, 60 + (uint64_t)p), *ref = malloc(d * sizeof(float));
			dq_cfg_t cfg;
			ibpi_dq_cfg_default(&cfg);
			cr_assert_eq(ibpi_dq_simulate((const float *const *)x, p, d, &cfg, 1, ref, NULL), IBP_OK);
			rank_job_t jobs[5];
			uint16_t *bf[2][5];
			uint64_t wire_whole[5] = { 0 };
			for (int mode = 0; mode < 3; mode++) { /* FP32 pipelined; BF16 whole; BF16 pipelined in place */
				setenv("IBP_COLL_PIECE_BYTES", mode == 1 ? "0" : pieces[pi], 1);
				memset(jobs, 0, sizeof jobs);
				for (int r = 0; r < p; r++) {
					if (mode == 0) {
						jobs[r] = (rank_job_t){ .dt = IBP_DTYPE_F32, .codec = IBP_COLL_CODEC_DYNAMIQ,
									.n = d, .in = x[r], .out = malloc(d * 4) };
						continue;
					}
					uint16_t *b = bf[mode - 1][r] = malloc(d * 2);
					for (uint64_t i = 0; i < d; i++)
						b[i] = fp8i_f32_to_bf16(x[r][i]);
					jobs[r] = (rank_job_t){ .dt = IBP_DTYPE_BF16, .codec = IBP_COLL_CODEC_DYNAMIQ, .n = d,
								.in = b, .out = mode == 2 ? (void *)b : malloc(d * 2) };
				}
				ranks_run(jobs, p);
				for (int r = 0; r < p; r++) {
					cr_assert_eq(jobs[r].st, IBP_OK, "p=%d mode %d rank %d: %s", p, mode, r, jobs[r].err);
					if (mode == 0) {
						cr_assert_eq(memcmp(jobs[r].out, ref, d * 4), 0,
							     "p=%d pieces %s rank %d: differs from the simulation", p,
							     pieces[pi], r);
						free(jobs[r].out);
					} else if (mode == 1) {
						free(bf[0][r]);
						bf[0][r] = jobs[r].out; /* the whole-chunk result */
						wire_whole[r] = jobs[r].stats.wire_bytes;
					} else {
						/* pieces really travelled: at least 3 more headers a step */
						cr_assert_geq(jobs[r].stats.wire_bytes,
							      wire_whole[r] + 3 * COLL_HDR * 2 * (uint64_t)(p - 1),
							      "p=%d pieces %s rank %d: %llu wire bytes, %llu whole", p,
							      pieces[pi], r, (unsigned long long)jobs[r].stats.wire_bytes,
							      (unsigned long long)wire_whole[r]);
						cr_assert_eq(memcmp(bf[1][r], bf[0][r], d * 2), 0,
							     "p=%d pieces %s rank %d: in-place pipelined BF16 differs from "
							     "whole chunks", p, pieces[pi], r);
					}
				}
			}
			for (int r = 0; r < p; r++) {
				free(bf[0][r]);
				free(bf[1][r]);
			}
			free(ref);
			free_grads(x, p);
		}
}

Test(dynamiq, errors)
{
	/* NaN input: every rank refuses (they share the statistics). */
	int p = 2;
	uint64_t d = 600;
	float *in[2], *out[2];
	rank_job_t jobs[2];
	memset(jobs, 0, sizeof jobs);
	for (int r = 0; r < p; r++) {
		in[r] = calloc(d, sizeof(float));
		out[r] = malloc(d * sizeof(float));
		jobs[r] = (rank_job_t){ .dt = IBP_DTYPE_F32, .codec = IBP_COLL_CODEC_DYNAMIQ, .n = d, .in = in[r], .out = out[r] };
	}
	in[1][300] = NAN;
	ranks_run(jobs, p);
	for (int r = 0; r < p; r++) {
		cr_assert_eq(jobs[r].st, IBP_ERR_INVALID_ARG, "rank %d: %d %s", r, jobs[r].st, jobs[r].err);
		cr_assert(strstr(jobs[r].err, "non-finite"), "%s", jobs[r].err);
	}
	/* A peer sending a malformed chunk (short; NaN scale): corrupt, not a crash or a hang. */
	in[1][300] = 0;
	for (int f = 1; f <= 2; f++) {
		memset(jobs, 0, sizeof jobs);
		for (int r = 0; r < p; r++)
			jobs[r] = (rank_job_t){ .dt = IBP_DTYPE_F32, .codec = IBP_COLL_CODEC_DYNAMIQ, .n = d, .in = in[r],
					   .out = out[r], .fake = r == 1 ? f : 0,
						.custom = r == 1 ? fake_rank : NULL };
		ranks_run(jobs, p);
		cr_assert_eq(jobs[0].st, IBP_ERR_CORRUPT, "fake %d: %d %s", f, jobs[0].st, jobs[0].err);
		cr_assert(strstr(jobs[0].err, f == 1 ? "payload bytes" : "scale"), "%s", jobs[0].err);
	}
	for (int r = 0; r < p; r++) {
		free(in[r]);
		free(out[r]);
	}
}

/* Corrupt chunk bytes: a bad scale is IBP_ERR_CORRUPT, any other byte
 * decodes to finite values (every code is valid). */
Test(dynamiq, corrupt_payloads)
{
	int n = 2;
	uint64_t d = 2000, J = (d + 255) / 256;
	float **x = make_grads(n, d, 9);
	float *st = calloc(2 * J, sizeof(float)), *y = malloc(d * sizeof(float));
	ibpi_dq_local_stats(x[0], d, st);
	dq_plan_t pl;
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	cr_assert_eq(ibpi_dq_plan_make(&pl, &cfg, n, d, 1, st), IBP_OK);
	uint8_t *a = malloc(pl.cbytes[0]), *b = malloc(pl.cbytes[0]);
	cr_assert_eq(ibpi_dq_hop(&pl, 0, NULL, x[0], 0, a), IBP_OK);
	tu_rng_t r;
	tu_rng_seed(&r, 3);
	int corrupt = 0;
	for (int t = 0; t < 300; t++) {
		memcpy(b, a, pl.cbytes[0]);
		for (int k = 0; k < 4; k++)
			b[tu_below(&r, pl.cbytes[0])] = (uint8_t)tu_next(&r);
		if (t % 3 == 0) { /* the first SG's scale: +Inf, NaN or negative */
			static const uint16_t bad[3] = { 0x7f80, 0x7fc1, 0xbf80 };
			b[0] = (uint8_t)bad[t / 3 % 3];
			b[1] = (uint8_t)(bad[t / 3 % 3] >> 8);
		}
		ibp_status_t s = ibpi_dq_decode_chunk(&pl, 0, b, y);
		if (t % 3 == 0) {
			cr_assert_eq(s, IBP_ERR_CORRUPT);
			cr_assert(strstr(ibp_last_error(), "scale"), "%s", ibp_last_error());
			corrupt++;
		} else if (s == IBP_OK) {
			for (uint64_t i = pl.lo[0] * 256; i < pl.lo[1] * 256 && i < d; i++)
				cr_assert(isfinite(y[i]));
		}
		s = ibpi_dq_hop(&pl, 0, b, x[1], 1, a + 0);
		cr_assert(s == IBP_OK || s == IBP_ERR_CORRUPT);
		cr_assert_eq(ibpi_dq_hop(&pl, 0, NULL, x[0], 0, a), IBP_OK);
	}
	cr_assert_eq(corrupt, 100);
	free(a);
	free(b);
	free(y);
	free(st);
	ibpi_dq_plan_free(&pl);
	free_grads(x, n);
}

Test(dynamiq, other_collectives_refuse)
{
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_OK);
	float a[4] = { 1, 2, 3, 4 }, b[4];
	cr_assert_eq(ibp_coll_allgather(a, b, 4, IBP_DTYPE_F32, IBP_COLL_CODEC_DYNAMIQ, c, NULL), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "allreduce only"));
	/* One rank: the sum is the input. */
	cr_assert_eq(ibp_coll_allreduce(a, b, 4, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_DYNAMIQ, c, NULL), IBP_OK);
	cr_assert_eq(memcmp(a, b, sizeof a), 0);
	cr_assert_str_eq(ibp_coll_codec_name(IBP_COLL_CODEC_DYNAMIQ), "dynamiq");
	ibp_coll_comm_free(c);
	ibp_coll_inproc_free(w);
}

/* ---- the vector kernels (dynamiq_simd.h) against the scalar reference ---- */

/* The implementations this CPU runs besides the scalar one. */
static int simd_impls(coll_simd_impl_t *out)
{
	int n = 0;
	if (ibpi_coll_simd_set(COLL_SIMD_AVX2))
		out[n++] = COLL_SIMD_AVX2;
	if (ibpi_coll_simd_set(COLL_SIMD_AVX512))
		out[n++] = COLL_SIMD_AVX512;
	ibpi_coll_simd_set(COLL_SIMD_AUTO);
	return n;
}

/* One plan's leaf, hop and decode of every chunk under impl: all bytes and
 * floats into one buffer, statuses into st (3 per chunk). */
static void dq_paths(coll_simd_impl_t impl, const dq_plan_t *pl, float *const *x, const uint8_t *in, uint8_t *leaf,
		     uint8_t *hop, float *dec, ibp_status_t *st)
{
	cr_assert(ibpi_coll_simd_set(impl));
	uint64_t off = 0;
	for (int k = 0; k < pl->n; k++) {
		st[3 * k] = ibpi_dq_hop(pl, (uint64_t)k, NULL, x[k], k, leaf + off);
		/* the hop decodes `in` (the scalar leaf, possibly corrupted), adds and re-quantizes */
		st[3 * k + 1] = ibpi_dq_hop(pl, (uint64_t)k, in + off, x[(k + 1) % pl->n], (k + 1) % pl->n, hop + off);
		st[3 * k + 2] = ibpi_dq_decode_chunk(pl, (uint64_t)k, in + off, dec);
		off += pl->cbytes[k];
	}
	ibpi_coll_simd_set(COLL_SIMD_AUTO);
}

Test(dynamiq, simd_same_bytes)
{
	coll_simd_impl_t im[2];
	int ni = simd_impls(im);
	if (!ni)
		cr_skip("no vector implementation on this CPU");
	static const struct {
		int n;
		uint64_t d;
		double budget;
		int fixed, nonuni, fresh, corr;
	} cs[] = {
		{ 4, 32768, 5, 0, 1, 1, 0 }, { 3, 10000, 3, 0, 1, 1, 0 }, { 5, 8300, 8, 0, 1, 1, 0 },
		{ 2, 4096, 5, 2, 1, 1, 0 },  { 2, 4096, 5, 4, 1, 1, 0 },  { 2, 4096, 5, 8, 1, 1, 0 },
		{ 4, 9000, 5, 0, 0, 1, 0 },  { 4, 9000, 5, 8, 0, 1, 0 },  { 4, 9000, 5, 0, 1, 0, 0 },
		{ 4, 9000, 5, 0, 1, 1, 1 },  { 2, 256, 5, 0, 1, 1, 0 },   { 6, 100000, 4, 0, 1, 1, 0 },
	};
	tu_rng_t r;
	tu_rng_seed(&r, 4242);
	for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
		int n = cs[c].n;
		uint64_t d = cs[c].d;
		float **x = make_grads(n, d, 100 + c);
		/* exact zeros, a constant group, -0 and huge values where they change the paths */
		for (uint64_t i = 0; i < 64 && i < d; i++)
			x[0][i] = 0.0f;
		if (d > 600) {
			x[1][300] = -0.0f;
			x[0][512] = 3e18f;
		}
		uint64_t J = (d + 255) / 256;
		float *st = calloc(2 * J, sizeof(float)), *gst = calloc(2 * J, sizeof(float));
		for (int w = 0; w < n; w++) {
			ibpi_dq_local_stats(x[w], d, st);
			for (uint64_t i = 0; i < 2 * J; i++)
				gst[i] += st[i];
		}
		dq_cfg_t cfg;
		ibpi_dq_cfg_default(&cfg);
		cfg.budget = cs[c].budget;
		cfg.fixed_q = cs[c].fixed;
		cfg.nonuniform = cs[c].nonuni;
		cfg.fresh = cs[c].fresh;
		cfg.correlated = cs[c].corr;
		dq_plan_t pl;
		cr_assert_eq(ibpi_dq_plan_make(&pl, &cfg, n, d, 3 + c, gst), IBP_OK);
		uint64_t T = pl.total_bytes;
		uint8_t *in = malloc(T), *l0 = malloc(T), *h0 = malloc(T), *l1 = malloc(T), *h1 = malloc(T);
		float *d0 = malloc(d * sizeof(float)), *d1 = malloc(d * sizeof(float));
		ibp_status_t s0[3 * 64], s1[3 * 64];
		for (int round = 0; round < 3; round++) {
			/* round 0: the scalar leaf; 1: random bytes; 2: huge SG scales (Inf and NaN sums) */
			cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
			uint64_t off = 0;
			for (int k = 0; k < n; k++) {
				cr_assert_eq(ibpi_dq_hop(&pl, (uint64_t)k, NULL, x[(k + 3) % n], (k + 3) % n, in + off), IBP_OK);
				off += pl.cbytes[k];
			}
			if (round == 1)
				for (int f = 0; f < 40; f++)
					in[tu_below(&r, T)] = (uint8_t)tu_next(&r);
			if (round == 2)
				for (int k = 0; k < n; k++)
					for (uint64_t j = pl.lo[k]; j < pl.lo[k + 1]; j += 2) {
						uint64_t base = 0;
						for (int kk = 0; kk < k; kk++)
							base += pl.cbytes[kk];
						uint8_t *p = in + base + pl.boff[j];
						p[0] = 0x7f; /* BF16 0x7f7f: 3.39e38 */
						p[1] = 0x7f;
					}
			memset(l0, 0xa5, T);
			memset(h0, 0xa5, T);
			memset(l1, 0xa5, T);
			memset(h1, 0xa5, T);
			dq_paths(COLL_SIMD_SCALAR, &pl, x, in, l0, h0, d0, s0);
			for (int q = 0; q < ni; q++) {
				dq_paths(im[q], &pl, x, in, l1, h1, d1, s1);
				cr_assert_arr_eq(s0, s1, 3 * (size_t)n * sizeof(ibp_status_t), "case %zu round %d %s: statuses",
						 c, round, ibpi_coll_simd_name(im[q]));
				cr_assert_arr_eq(l0, l1, T, "case %zu round %d %s: leaf bytes differ", c, round,
						 ibpi_coll_simd_name(im[q]));
				cr_assert_arr_eq(h0, h1, T, "case %zu round %d %s: hop bytes differ", c, round,
						 ibpi_coll_simd_name(im[q]));
				cr_assert_arr_eq(d0, d1, d * sizeof(float), "case %zu round %d %s: decoded floats differ", c,
						 round, ibpi_coll_simd_name(im[q]));
			}
		}
		/* and the whole ring */
		float *o0 = malloc(d * sizeof(float)), *o1 = malloc(d * sizeof(float));
		cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
		cr_assert_eq(ibpi_dq_simulate((const float *const *)x, n, d, &cfg, 9, o0, NULL), IBP_OK);
		for (int q = 0; q < ni; q++) {
			cr_assert(ibpi_coll_simd_set(im[q]));
			cr_assert_eq(ibpi_dq_simulate((const float *const *)x, n, d, &cfg, 9, o1, NULL), IBP_OK);
			cr_assert_arr_eq(o0, o1, d * sizeof(float), "case %zu %s: ring results differ", c, ibpi_coll_simd_name(im[q]));
		}
		ibpi_coll_simd_set(COLL_SIMD_AUTO);
		free(o0);
		free(o1);
		free(in);
		free(l0);
		free(h0);
		free(l1);
		free(h1);
		free(d0);
		free(d1);
		free(st);
		free(gst);
		ibpi_dq_plan_free(&pl);
		free_grads(x, n);
	}
}
