/* test_rcmoe.c - RCMoE's LSQ and PTS: unbiasedness and variance against
 * their formulas (fixed seeds, stated tolerances), PTS sparsity against
 * error, corrupt streams, both inside the collectives (in-process
 * transport), and the vector kernels (AVX2, AVX-512) against the scalar
 * reference, byte for byte. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/rcmoe.h"
#include "fp8/fp8_impl.h"
#include "ibp/coll.h"
#include "ibp/status.h"
#include "ranks.h"
#include "testutil.h"

static double gauss(tu_rng_t *r)
{
	double u = tu_uniform(r), v = tu_uniform(r);
	return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* rows x 64 floats, row scales spread over 3 decades; one zero row. */
static float *make_rows(uint64_t rows, uint64_t row, uint64_t seed)
{
	tu_rng_t r;
	tu_rng_seed(&r, seed);
	float *x = malloc(rows * row * sizeof(float));
	for (uint64_t i = 0; i < rows; i++) {
		double s = i == 2 ? 0 : pow(10, 3 * tu_uniform(&r) - 1.5);
		for (uint64_t j = 0; j < row; j++)
			x[i * row + j] = (float)(s * gauss(&r));
	}
	return x;
}

/* Mean and variance of T decodes against x and the exact variance
 * s^2 v_q + v_s (f^2 + v_q): every entry's mean within 5 standard errors,
 * the summed variance within 3% of the formula. */
static void lsq_check(int B, int K, uint64_t T)
{
	uint64_t rows = 6, row = 64, n = rows * row;
	float *x = make_rows(rows, row, 11), *y = malloc(n * sizeof(float));
	double *sum = calloc(n, sizeof(double)), *sq = calloc(n, sizeof(double));
	uint64_t cap = ibpi_lsq_bytes(n, row, B, K), size;
	uint8_t *buf = malloc(cap);
	for (uint64_t t = 0; t < T; t++) {
		cr_assert_eq(ibpi_lsq_encode(x, IBP_DTYPE_F32, n, row, B, K, t * 7919 + 1, buf, cap, &size), IBP_OK);
		cr_assert_eq(size, cap);
		cr_assert_eq(ibpi_lsq_decode(buf, size, IBP_DTYPE_F32, n, y), IBP_OK);
		for (uint64_t i = 0; i < n; i++) {
			sum[i] += y[i];
			sq[i] += (double)y[i] * y[i];
		}
	}
	double S = 0, Lm = (1 << (B - 1)) - 1, Ls = K ? (1 << K) - 1 : 0, vemp = 0, vform = 0;
	for (uint64_t i = 0; i < n; i++)
		S = fmax(S, fabs(x[i]));
	for (uint64_t r = 0; r < rows; r++) {
		double s = 0;
		for (uint64_t j = 0; j < row; j++)
			s = fmax(s, fabs(x[r * row + j]));
		double ts = K && S > 0 ? s / S * Ls : 0, ds = ts - floor(ts);
		double vs = K ? (S / Ls) * (S / Ls) * ds * (1 - ds) : 0;
		for (uint64_t j = 0; j < row; j++) {
			uint64_t i = r * row + j;
			double f = s > 0 ? fabs(x[i]) / s : 0, t = f * Lm, de = t - floor(t), vq = de * (1 - de) / (Lm * Lm);
			double var = s * s * vq + vs * (f * f + vq);
			double mean = sum[i] / (double)T, ev = sq[i] / (double)T - mean * mean;
			double se = sqrt(var / (double)T);
			cr_assert_leq(fabs(mean - x[i]), 5 * se + 1e-6 * fabs(x[i]) + 1e-30,
				      "B=%d K=%d entry %llu: mean %g vs %g (se %g)", B, K, (unsigned long long)i, mean,
				      (double)x[i], se);
			vemp += ev;
			vform += var;
		}
	}
	cr_log_info("LSQ B=%d K=%d: summed variance %.6g, formula %.6g (ratio %.4f)", B, K, vemp, vform, vemp / vform);
	cr_assert(fabs(vemp / vform - 1) < 0.03, "B=%d K=%d: variance %g vs formula %g", B, K, vemp, vform);
	free(x);
	free(y);
	free(sum);
	free(sq);
	free(buf);
}

Test(lsq, unbiased_variance_formula)
{
	lsq_check(4, 4, 20000);
	lsq_check(4, 0, 5000);
	lsq_check(8, 8, 5000);
	lsq_check(2, 4, 5000);
	lsq_check(8, 4, 5000); /* the collective's scale width at the other entry widths */
	lsq_check(2, 0, 5000);
}

Test(lsq, bounds_and_size)
{
	uint64_t rows = 5, row = 64, n = rows * row - 7; /* a short last row */
	float *x = make_rows(rows, row, 3), y[320];
	uint64_t cap = ibpi_lsq_bytes(n, row, 4, 0), size;
	cr_assert_eq(cap, 8 + rows * 4 + (n + 1) / 2);
	cr_assert_eq(ibpi_lsq_bytes(1000, 256, 4, 4), 8 + 2 + 500);
	uint8_t *buf = malloc(cap);
	cr_assert_eq(ibpi_lsq_encode(x, IBP_DTYPE_F32, n, row, 4, 0, 5, buf, cap, &size), IBP_OK);
	cr_assert_eq(ibpi_lsq_decode(buf, size, IBP_DTYPE_F32, n, y), IBP_OK);
	for (uint64_t r = 0; r < rows; r++) {
		float s = 0;
		for (uint64_t i = r * row; i < n && i < (r + 1) * row; i++)
			s = fmaxf(s, fabsf(x[i]));
		for (uint64_t i = r * row; i < n && i < (r + 1) * row; i++) {
			/* Without scale quantization: within one level, the row max exact. */
			cr_assert_leq(fabsf(y[i] - x[i]), s / 7 * 1.0001f, "entry %llu", (unsigned long long)i);
			if (fabsf(x[i]) == s)
				cr_assert_eq(y[i], x[i]);
			if (s == 0)
				cr_assert_eq(y[i], 0);
		}
	}
	/* Corrupt streams: errors, never crashes. */
	cr_assert_eq(ibpi_lsq_decode(buf, size - 1, IBP_DTYPE_F32, n, y), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_lsq_decode(buf, size, IBP_DTYPE_F32, n + 2, y), IBP_ERR_CORRUPT);
	buf[4] = 3;
	cr_assert_eq(ibpi_lsq_decode(buf, size, IBP_DTYPE_F32, n, y), IBP_ERR_CORRUPT);
	buf[4] = 4;
	float nan = NAN;
	memcpy(buf, &nan, 4);
	cr_assert_eq(ibpi_lsq_decode(buf, size, IBP_DTYPE_F32, n, y), IBP_ERR_CORRUPT);
	x[9] = INFINITY;
	cr_assert_eq(ibpi_lsq_encode(x, IBP_DTYPE_F32, n, row, 4, 0, 5, buf, cap, &size), IBP_ERR_INVALID_ARG);
	tu_rng_t r;
	tu_rng_seed(&r, 1);
	for (int t = 0; t < 500; t++) {
		tu_fill_random(&r, buf, cap);
		ibp_status_t s = ibpi_lsq_decode(buf, cap, IBP_DTYPE_F32, n, y);
		cr_assert(s == IBP_OK || s == IBP_ERR_CORRUPT);
	}
	free(buf);
	free(x);
}

/* PTS: E[nnz] = sigma |g|_1 / |g|_inf, unbiased, variance sum(|g| m / sigma - g^2);
 * lower sigma: sparser and noisier. */
Test(pts, sparsity_against_error)
{
	/* the scalar reference's statistics; the vector kernels give its bytes (pts/simd_same_bytes) */
	cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
	uint64_t k = 4096, T = 2000;
	tu_rng_t r;
	tu_rng_seed(&r, 21);
	float *g = malloc(k * sizeof(float));
	double l1 = 0, m = 0, g2 = 0;
	for (uint64_t i = 0; i < k; i++) {
		g[i] = (float)(gauss(&r) * (tu_uniform(&r) < 0.1 ? 5 : 1));
		l1 += fabs(g[i]);
		m = fmax(m, fabs(g[i]));
		g2 += (double)g[i] * g[i];
	}
	uint8_t *buf = malloc(ibpi_pts_max_bytes(k));
	float *acc = malloc(k * sizeof(float));
	double *mean = calloc(k, sizeof(double)), last_err = 0, last_nnz = 1e30;
	static const double sig[3] = { 1.0, 0.5, 0.25 };
	for (int si = 0; si < 3; si++) {
		double sigma = sig[si], nnz = 0, err = 0, varf = 0, pvar = 0;
		memset(mean, 0, k * sizeof(double));
		for (uint64_t i = 0; i < k; i++) {
			double p = sigma * fabs(g[i]) / m;
			varf += fabs(g[i]) * m / sigma - (double)g[i] * g[i];
			pvar += p * (1 - p);
		}
		for (uint64_t t = 0; t < T; t++) {
			uint64_t size, kept;
			cr_assert_eq(ibpi_pts_encode(g, k, sigma, t * 104729 + 3, buf, ibpi_pts_max_bytes(k), &size), IBP_OK);
			memcpy(&kept, buf + 4, 8);
			nnz += (double)kept / (double)T;
			memset(acc, 0, k * sizeof(float));
			cr_assert_eq(ibpi_pts_decode_add(buf, size, k, acc), IBP_OK);
			for (uint64_t i = 0; i < k; i++) {
				cr_assert(acc[i] == 0 || fabsf(fabsf(acc[i]) - (float)(m / sigma)) <= 1e-6f * (float)m / (float)sigma);
				err += ((double)acc[i] - g[i]) * ((double)acc[i] - g[i]) / (double)T;
				mean[i] += acc[i] / (double)T;
			}
		}
		double enz = sigma * l1 / m;
		cr_log_info("PTS sigma %.2f: density %.4f (formula %.4f), vNMSE %.4f (formula %.4f)", sigma,
			    nnz / (double)k, enz / (double)k, err / g2, varf / g2);
		cr_assert_leq(fabs(nnz - enz), 5 * sqrt(pvar / (double)T), "sigma %g: nnz %g vs %g", sigma, nnz, enz);
		cr_assert(fabs(err / varf - 1) < 0.05, "sigma %g: variance %g vs formula %g", sigma, err, varf);
		cr_assert_leq(err, l1 * m / sigma, "the paper's bound");
		double bias = 0;
		for (uint64_t i = 0; i < k; i++)
			bias += (mean[i] - g[i]) * (mean[i] - g[i]);
		/* An unbiased mean's squared error is about (total variance) / T. */
		cr_assert_lt(bias, 1.5 * varf / (double)T, "sigma %g: squared bias %g vs %g", sigma, bias, varf / (double)T);
		cr_assert_lt(nnz, last_nnz);
		cr_assert_gt(err, last_err);
		last_nnz = nnz;
		last_err = err;
	}
	/* Corrupt: a header count that disagrees with the bitmap, bits past k. */
	uint64_t size, bad = 3;
	cr_assert_eq(ibpi_pts_encode(g, 1001, 1.0, 9, buf, ibpi_pts_max_bytes(1001), &size), IBP_OK);
	memcpy(buf + 4, &bad, 8);
	cr_assert_eq(ibpi_pts_decode_add(buf, size, 1001, acc), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_pts_encode(g, 1001, 1.0, 9, buf, ibpi_pts_max_bytes(1001), &size), IBP_OK);
	buf[12 + 125] |= 0x80;
	cr_assert_eq(ibpi_pts_decode_add(buf, size, 1001, acc), IBP_ERR_CORRUPT);
	cr_assert_eq(ibpi_pts_encode(g, k, 1.5, 9, buf, ibpi_pts_max_bytes(k), &size), IBP_ERR_INVALID_ARG);
	free(g);
	free(buf);
	free(acc);
	free(mean);
}

/* ---- in the collectives ---- */

Test(lsq, alltoall)
{
	int p = 4;
	uint64_t cnt = 1000; /* per peer: 3 full rows and a short one */
	uint16_t *in[4], *out[4];
	rank_job_t jobs[4];
	tu_rng_t r;
	tu_rng_seed(&r, 4);
	for (int k = 0; k < p; k++) {
		in[k] = malloc(cnt * (uint64_t)p * 2);
		out[k] = malloc(cnt * (uint64_t)p * 2);
		for (uint64_t i = 0; i < cnt * (uint64_t)p; i++)
			in[k][i] = fp8i_f32_to_bf16((float)gauss(&r));
		jobs[k] = (rank_job_t){ .op = 1, .dt = IBP_DTYPE_BF16, .codec = IBP_COLL_CODEC_LSQ, .n = cnt, .in = in[k],
				   .out = out[k] };
	}
	ranks_run(jobs, p);
	for (int k = 0; k < p; k++) {
		cr_assert_eq(jobs[k].st, IBP_OK, "rank %d: %s", k, jobs[k].err);
		cr_assert_eq(jobs[k].stats.compressed, 1);
		/* BF16 at ~4.1 bits: 3.5x or better on the wire, headers included. */
		cr_assert_gt(jobs[k].stats.last_ratio, 3.5, "ratio %g", jobs[k].stats.last_ratio);
		double e = 0, s = 0;
		for (int src = 0; src < p; src++)
			for (uint64_t i = 0; i < cnt; i++) {
				double want = fp8i_bf16_to_f32(in[src][(uint64_t)k * cnt + i]);
				double got = fp8i_bf16_to_f32(out[k][(uint64_t)src * cnt + i]);
				if (src == k) /* a rank's own block is copied */
					cr_assert_eq(got, want);
				e += (got - want) * (got - want);
				s += want * want;
			}
		cr_assert_lt(e / s, 0.05, "rank %d: vNMSE %g", k, e / s);
		cr_assert_gt(e, 0);
	}
	/* Other collectives refuse LSQ (and AllToAll refuses PTS). */
	for (int k = 0; k < p; k++)
		jobs[k] = (rank_job_t){ .op = k % 2, .dt = IBP_DTYPE_BF16,
				   .codec = k % 2 ? IBP_COLL_CODEC_PTS : IBP_COLL_CODEC_LSQ, .n = cnt, .in = in[k],
				   .out = out[k] };
	ibp_coll_inproc_t *w;
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	for (int k = 0; k < 2; k++) {
		jobs[k].w = w;
		jobs[k].rank = 0;
		rank_job_run(&jobs[k]);
		cr_assert_eq(jobs[k].st, IBP_ERR_INVALID_ARG, "%s", jobs[k].err);
		cr_assert(strstr(jobs[k].err, k ? "allreduce only" : "alltoall(v) only"), "%s", jobs[k].err);
	}
	ibp_coll_inproc_free(w);
	for (int k = 0; k < p; k++) {
		free(in[k]);
		free(out[k]);
	}
}

/* LSQ at 2, 4 and 8 bits through AllToAll (ibp_coll_comm_set_lsq_bits):
 * the wire ratio follows the width, the error falls as it grows; ranks may
 * send different widths (each message names its own), and a sender's
 * width sets the error of its blocks only. */
static void lsq_bits_run(const int *bits, uint16_t **in, uint16_t **out, double *err_from, double *ratio)
{
	int p = 4;
	uint64_t cnt = 2048;
	rank_job_t jobs[4];
	for (int k = 0; k < p; k++)
		jobs[k] = (rank_job_t){ .op = RJ_ALLTOALL, .dt = IBP_DTYPE_BF16, .codec = IBP_COLL_CODEC_LSQ, .n = cnt,
					.in = in[k], .out = out[k], .lsq_bits = bits[k] };
	ranks_run(jobs, p);
	double e[4] = { 0 }, s[4] = { 0 };
	for (int k = 0; k < p; k++) {
		cr_assert_eq(jobs[k].st, IBP_OK, "rank %d (%d bits): %s", k, bits[k], jobs[k].err);
		cr_assert_eq(jobs[k].stats.compressed, 1);
		ratio[k] = jobs[k].stats.last_ratio;
		for (int src = 0; src < p; src++)
			for (uint64_t i = 0; i < cnt; i++) {
				double want = fp8i_bf16_to_f32(in[src][(uint64_t)k * cnt + i]);
				double got = fp8i_bf16_to_f32(out[k][(uint64_t)src * cnt + i]);
				if (src == k)
					cr_assert_eq(got, want);
				else {
					e[src] += (got - want) * (got - want);
					s[src] += want * want;
				}
			}
	}
	for (int src = 0; src < p; src++)
		err_from[src] = e[src] / s[src];
}

Test(lsq, alltoall_bits)
{
	int p = 4;
	uint64_t cnt = 2048;
	uint16_t *in[4], *out[4];
	tu_rng_t r;
	tu_rng_seed(&r, 8);
	for (int k = 0; k < p; k++) {
		in[k] = malloc(cnt * (uint64_t)p * 2);
		out[k] = malloc(cnt * (uint64_t)p * 2);
		for (uint64_t i = 0; i < cnt * (uint64_t)p; i++)
			in[k][i] = fp8i_f32_to_bf16((float)gauss(&r));
	}
	static const int widths[3] = { 2, 4, 8 };
	double last = 1e30, err[4], ratio[4];
	for (int b = 0; b < 3; b++) {
		int B = widths[b], bits[4] = { B, B, B, B };
		lsq_bits_run(bits, in, out, err, ratio);
		for (int k = 0; k < p; k++) {
			/* 16-bit BF16 over B + ~0.02 bits, 32-byte headers: at least 90% of 16 / B. */
			cr_assert_gt(ratio[k], 0.9 * 16.0 / B, "%d bits: ratio %g", B, ratio[k]);
			cr_assert_lt(ratio[k], 16.0 / B, "%d bits: ratio %g", B, ratio[k]);
			cr_assert_gt(err[k], 0);
			cr_assert_lt(err[k], last * 0.5, "%d bits: vNMSE %g (narrower: %g)", B, err[k], last);
			if (B == 8) /* 8-bit row scales: 4-bit ones alone give ~1.4e-3 */
				cr_assert_lt(err[k], 3e-4, "8 bits: vNMSE %g", err[k]);
		}
		last = err[0];
		cr_log_info("LSQ all-to-all %d bits: ratio %.3f, vNMSE %.5f", B, ratio[0], err[0]);
	}
	/* Mixed widths: the 2-bit sender's blocks are the noisiest, the 8-bit one's the cleanest. */
	int mixed[4] = { 2, 8, 4, 4 };
	lsq_bits_run(mixed, in, out, err, ratio);
	cr_assert_gt(err[0], 2 * err[2]);
	cr_assert_gt(err[2], 2 * err[1]);
	cr_assert_gt(ratio[0], 2 * ratio[1]);
	/* Widths the format does not take; a NULL communicator. */
	ibp_coll_inproc_t *w;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &c), IBP_OK);
	static const int bad[5] = { 0, 1, 3, 5, 16 };
	for (int k = 0; k < 5; k++) {
		cr_assert_eq(ibp_coll_comm_set_lsq_bits(c, bad[k]), IBP_ERR_INVALID_ARG, "%d bits", bad[k]);
		cr_assert(strstr(ibp_last_error(), "2, 4 or 8"), "%s", ibp_last_error());
	}
	cr_assert_eq(ibp_coll_comm_set_lsq_bits(c, 8), IBP_OK);
	cr_assert_eq(ibp_coll_comm_set_lsq_bits(NULL, 4), IBP_ERR_INVALID_ARG);
	ibp_coll_comm_free(c);
	ibp_coll_inproc_free(w);
	for (int k = 0; k < p; k++) {
		free(in[k]);
		free(out[k]);
	}
}

/* p ranks' PTS all-reduce of n Gaussian floats, `calls` times on each
 * communicator (later calls reuse its working buffers), against the exact
 * sum. The keys the collective makes are internal, so the ranks are
 * compared with each other and the error with the formula's scale: one
 * draw of a sum of independent errors, within a factor 1.5 of its
 * expectation. */
static void pts_run(int p, uint64_t n, uint64_t seed, int calls)
{
	float *in[8], *out[8];
	rank_job_t jobs[8];
	tu_rng_t r;
	cr_assert(p <= 8);
	tu_rng_seed(&r, seed);
	for (int k = 0; k < p; k++) {
		in[k] = malloc(n * 4);
		out[k] = malloc(n * 4);
		for (uint64_t i = 0; i < n; i++)
			in[k][i] = (float)gauss(&r);
		jobs[k] = (rank_job_t){ .dt = IBP_DTYPE_F32, .codec = IBP_COLL_CODEC_PTS, .n = n, .in = in[k], .out = out[k],
					.calls = calls };
	}
	ranks_run(jobs, p);
	double e = 0, varf = 0;
	for (int k = 0; k < p; k++) {
		cr_assert_eq(jobs[k].st, IBP_OK, "rank %d: %s", k, jobs[k].err);
		cr_assert_eq(memcmp(out[k], out[0], n * 4), 0, "rank %d differs", k);
		double m = 0;
		for (uint64_t i = 0; i < n; i++)
			m = fmax(m, fabs(in[k][i]));
		for (uint64_t i = 0; i < n; i++)
			varf += fabs(in[k][i]) * m - (double)in[k][i] * in[k][i];
	}
	for (uint64_t i = 0; i < n; i++) {
		double t = 0;
		for (int k = 0; k < p; k++)
			t += in[k][i];
		e += (out[0][i] - t) * (out[0][i] - t);
	}
	cr_assert(e > varf / 1.5 && e < varf * 1.5, "error %g vs expected %g", e, varf);
	cr_assert_eq(jobs[0].stats.compressed, (uint64_t)calls);
	for (int k = 0; k < p; k++) {
		free(in[k]);
		free(out[k]);
	}
}

/* Calls after the first reuse the communicator's working buffers: none
 * may carry the last call's sums (issue 38: PTS took them instead of fresh
 * allocations). */
Test(pts, repeated_calls)
{
	pts_run(3, 2003, 9, 3);
}

Test(pts, allreduce)
{
	pts_run(4, 3001, 8, 1);
}

/* ---- the vector kernels (dynamiq_simd.h) against the scalar reference ---- */

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

/* n values of dt: Gaussian with row scales over decades, zeros, -0, the
 * encoder's limit (3.4e38) and, when bad, one value past it at `bad_at`. */
static void *rc_data(tu_rng_t *r, ibp_dtype_t dt, uint64_t n, uint64_t bad_at)
{
	uint8_t *p = malloc(n * 4 + 4);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)(gauss(r) * pow(10.0, (double)((i / 100) % 7) - 3));
		uint64_t pick = tu_below(r, 200);
		if (pick == 0)
			f = 0.0f;
		else if (pick == 1)
			f = -0.0f;
		else if (pick == 2 && dt == IBP_DTYPE_F32)
			f = 3.4e38f;
		if (i == bad_at)
			f = dt == IBP_DTYPE_F32 ? 3.401e38f : INFINITY;
		if (dt == IBP_DTYPE_F32)
			memcpy(p + 4 * i, &f, 4);
		else {
			uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
			memcpy(p + 2 * i, &h, 2);
		}
	}
	return p;
}

Test(lsq, simd_same_bytes)
{
	coll_simd_impl_t im[2];
	int ni = simd_impls(im);
	if (!ni)
		cr_skip("no vector implementation on this CPU");
	static const ibp_dtype_t dts[3] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	static const uint64_t ns[] = { 0, 5, 16, 300, 1000, 4096, 5003 };
	static const uint64_t rowsz[] = { 16, 48, 256, 100, 1024 };
	static const int Bs[3] = { 2, 4, 8 }, Ks[3] = { 0, 4, 8 };
	tu_rng_t r;
	tu_rng_seed(&r, 777);
	int cases = 0;
	for (int di = 0; di < 3; di++)
		for (size_t ni_ = 0; ni_ < sizeof ns / sizeof ns[0]; ni_++)
			for (size_t ri = 0; ri < sizeof rowsz / sizeof rowsz[0]; ri++)
				for (int bi = 0; bi < 3; bi++) {
					ibp_dtype_t dt = dts[di];
					uint64_t n = ns[ni_], row = rowsz[ri], es = ibp_dtype_size(dt);
					int B = Bs[bi], K = Ks[(bi + ri) % 3];
					uint64_t bad = (bi == 1 && n > 20) ? tu_below(&r, n) : UINT64_MAX;
					void *src = rc_data(&r, dt, n, bad);
					uint64_t cap = ibpi_lsq_bytes(n, row, B, K), z0 = 0, z1 = 0;
					uint8_t *e0 = malloc(cap + 1), *e1 = malloc(cap + 1);
					uint8_t *o0 = malloc(n * es + 1), *o1 = malloc(n * es + 1);
					uint64_t key = tu_next(&r);
					cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
					ibp_status_t s0 = ibpi_lsq_encode(src, dt, n, row, B, K, key, e0, cap, &z0);
					char msg0[256];
					snprintf(msg0, sizeof msg0, "%s", ibp_last_error());
					if (s0 == IBP_OK)
						cr_assert_eq(ibpi_lsq_decode(e0, z0, dt, n, o0), IBP_OK);
					for (int q = 0; q < ni; q++) {
						cr_assert(ibpi_coll_simd_set(im[q]));
						ibp_status_t s1 = ibpi_lsq_encode(src, dt, n, row, B, K, key, e1, cap, &z1);
						cr_assert_eq(s0, s1, "%s n %llu row %llu: status", ibpi_coll_simd_name(im[q]),
							     (unsigned long long)n, (unsigned long long)row);
						if (s0 != IBP_OK) {
							cr_assert_str_eq(msg0, ibp_last_error());
							continue;
						}
						cr_assert_eq(z0, z1);
						cr_assert_arr_eq(e0, e1, z0, "%s %s n %llu row %llu B %d K %d: bytes differ",
								 ibpi_coll_simd_name(im[q]), ibp_dtype_name(dt), (unsigned long long)n,
								 (unsigned long long)row, B, K);
						memset(o1, 0x5a, n * es + 1);
						cr_assert_eq(ibpi_lsq_decode(e0, z0, dt, n, o1), IBP_OK);
						cr_assert_arr_eq(o0, o1, n * es, "%s %s n %llu row %llu B %d: decoded values differ",
								 ibpi_coll_simd_name(im[q]), ibp_dtype_name(dt), (unsigned long long)n,
								 (unsigned long long)row, B);
						cases++;
					}
					free(src);
					free(e0);
					free(e1);
					free(o0);
					free(o1);
				}
	ibpi_coll_simd_set(COLL_SIMD_AUTO);
	cr_assert_geq(cases, 250 * ni); /* every (dtype, n, row, B) without a bad element */
}

Test(pts, simd_same_bytes)
{
	coll_simd_impl_t im[2];
	int ni = simd_impls(im);
	if (!ni)
		cr_skip("no vector implementation on this CPU");
	static const uint64_t ks[] = { 0, 1, 7, 63, 64, 65, 1000, 4097, 20000 };
	static const double sig[] = { 1.0, 0.5, 0.01 };
	tu_rng_t r;
	tu_rng_seed(&r, 31337);
	for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
		for (int si = 0; si < 3; si++)
			for (int bad = 0; bad < 2; bad++) {
				uint64_t k = ks[ki];
				float *g = rc_data(&r, IBP_DTYPE_F32, k, bad && k ? tu_below(&r, k) : UINT64_MAX);
				if (ki == 4 && si == 1) /* all zero: nothing kept */
					memset(g, 0, k * 4);
				uint64_t cap = ibpi_pts_max_bytes(k), z0 = 0, z1 = 0, key = tu_next(&r);
				uint8_t *e0 = malloc(cap), *e1 = malloc(cap);
				float *a0 = malloc(k * 4 + 4), *a1 = malloc(k * 4 + 4);
				for (uint64_t i = 0; i < k; i++)
					a0[i] = (i % 5 == 0) ? -0.0f : (float)gauss(&r);
				cr_assert(ibpi_coll_simd_set(COLL_SIMD_SCALAR));
				ibp_status_t s0 = ibpi_pts_encode(g, k, sig[si], key, e0, cap, &z0);
				char msg0[256];
				snprintf(msg0, sizeof msg0, "%s", ibp_last_error());
				memcpy(a1, a0, k * 4);
				/* (max |g| / sigma past FLT_MAX makes a stream the decoder refuses: both paths alike) */
				ibp_status_t d0 = s0 == IBP_OK ? ibpi_pts_decode_add(e0, z0, k, a0) : IBP_OK;
				for (int q = 0; q < ni; q++) {
					cr_assert(ibpi_coll_simd_set(im[q]));
					memset(e1, 0x77, cap);
					ibp_status_t s1 = ibpi_pts_encode(g, k, sig[si], key, e1, cap, &z1);
					cr_assert_eq(s0, s1);
					if (s0 != IBP_OK) {
						cr_assert_str_eq(msg0, ibp_last_error());
						continue;
					}
					cr_assert_eq(z0, z1, "%s k %llu: size %llu vs %llu", ibpi_coll_simd_name(im[q]),
						     (unsigned long long)k, (unsigned long long)z1, (unsigned long long)z0);
					cr_assert_arr_eq(e0, e1, z0, "%s k %llu sigma %g: bytes differ", ibpi_coll_simd_name(im[q]),
							 (unsigned long long)k, sig[si]);
					float *a2 = malloc(k * 4 + 4);
					memcpy(a2, a1, k * 4);
					cr_assert_eq(ibpi_pts_decode_add(e0, z0, k, a2), d0);
					cr_assert_arr_eq(a0, a2, k * 4, "%s k %llu: sums differ", ibpi_coll_simd_name(im[q]),
							 (unsigned long long)k);
					free(a2);
				}
				free(g);
				free(e0);
				free(e1);
				free(a0);
				free(a1);
			}
	ibpi_coll_simd_set(COLL_SIMD_AUTO);
}
