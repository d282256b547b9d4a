/* test_fp8.c - FP8 conversion (exhaustive over all 2^32 float32 inputs
 * against a straightforward reference written here; IBP_TEST_QUICK=1 tests
 * a strided subset), the Walsh-Hadamard transform, and the TACO block
 * codec: error bounds of docs/CODECS.md (the scalar reference and every
 * vector path), sizes, ablation switches, NaN blocks, scale invariance,
 * block locality, determinism, corrupt streams. test_fp8_simd.c compares
 * the vector paths with the scalar one byte for byte. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fp8/fp8_simd.h"
#include "fp8/hadamard.h"
#include "testutil.h"

static int quick(void)
{
	const char *e = getenv("IBP_TEST_QUICK");
	return e && e[0] == '1';
}

/* ---------------------------------------------------- reference conversion */

/* Straightforward reference: the value in double, the ULP of its binade
 * (or of the denormal range), round to nearest even by the 2^52 trick,
 * saturate anything above the max (Inf included), NaN -> 0x7F. */
typedef struct fmt_desc {
	int m, emin, bias;
	double max;
	uint8_t maxcode;
} fmt_desc_t;

static const fmt_desc_t FMT[2] = {{3, -6, 7, 448.0, 0x7e}, {2, -14, 15, 57344.0, 0x7b}};

/* 2^i for i in [-200, 200), built once with ldexp */
static double pow2_tab[400];

static double pow2(int i)
{
	return pow2_tab[i + 200];
}

static void pow2_init(void)
{
	for (int i = 0; i < 400; i++)
		pow2_tab[i] = ldexp(1.0, i - 200);
}

static uint8_t ref_encode(float x, int f)
{
	const fmt_desc_t *d = &FMT[f];
	uint32_t u;
	memcpy(&u, &x, 4);
	uint8_t sgn = (uint8_t)((u >> 24) & 0x80);
	if (x != x)
		return 0x7f;
	double a = fabs((double)x);
	if (a >= d->max)
		return sgn | d->maxcode;
	int e = 0;
	(void)frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
	e -= 1;
	if (a == 0.0 || e < d->emin)
		e = d->emin;
	double ulp = pow2(e - d->m);
	volatile double y = a * pow2(d->m - e) + 4503599627370496.0; /* a / ulp, exactly */
	double q = y - 4503599627370496.0; /* round to nearest, ties to even */
	if (q * ulp > d->max)
		return sgn | d->maxcode;
	int one = 1 << d->m;
	if (e == d->emin && q < one)
		return sgn | (uint8_t)q; /* denormal or zero: the multiple of the smallest step */
	if (q == 2 * one) { /* rounded up into the next binade */
		e++;
		q = one;
	}
	return sgn | (uint8_t)((e + d->bias) << d->m) | (uint8_t)((int)q - one);
}

static double ref_decode(uint8_t c, int f)
{
	const fmt_desc_t *d = &FMT[f];
	int e = (c & 0x7f) >> d->m, mant = c & ((1 << d->m) - 1);
	double s = (c & 0x80) ? -1.0 : 1.0;
	if (f == 0 && e == 15 && mant == 7)
		return NAN;
	if (f == 1 && e == 31)
		return mant ? NAN : s * INFINITY;
	if (e == 0)
		return s * ldexp((double)mant, d->emin - d->m);
	return s * ldexp(1.0 + (double)mant / (1 << d->m), e - d->bias);
}

typedef struct ex_job {
	uint64_t lo, hi, stride;
	uint64_t bad[2];
	uint32_t first_bad[2];
} ex_job_t;

/* Magnitudes [lo, hi) of float bit patterns; each is checked with both signs. */
static void *ex_run(void *arg)
{
	ex_job_t *j = arg;
	enum { CH = 1 << 16 };
	float *x = malloc(2 * CH * sizeof(float));
	uint8_t *o = malloc(2 * CH);
	uint8_t ref[CH];
	for (int f = 0; f < 2; f++) {
		for (uint64_t a0 = j->lo; a0 < j->hi; a0 += (uint64_t)CH * j->stride) {
			uint64_t cnt = 0;
			for (uint64_t a = a0; a < j->hi && cnt < CH; a += j->stride, cnt++) {
				uint32_t p = (uint32_t)a, q = p | 0x80000000u;
				memcpy(&x[2 * cnt], &p, 4);
				memcpy(&x[2 * cnt + 1], &q, 4);
				ref[cnt] = ref_encode(x[2 * cnt], f);
			}
			ibp_fp8_convert(x, 2 * cnt, (ibp_fp8_format_t)f, o);
			for (uint64_t i = 0; i < cnt; i++) {
				uint8_t rn = ref[i] == 0x7f ? 0x7f : (uint8_t)(ref[i] | 0x80);
				if (o[2 * i] != ref[i] || o[2 * i + 1] != rn) {
					if (!j->bad[f])
						memcpy(&j->first_bad[f], &x[o[2 * i] != ref[i] ? 2 * i : 2 * i + 1], 4);
					j->bad[f]++;
				}
			}
		}
	}
	free(x);
	free(o);
	return NULL;
}

Test(fp8, conversion_exhaustive_against_reference, .timeout = 600)
{
	uint64_t stride = quick() ? 4099 : 1;
	ex_job_t jobs[2];
	pow2_init();
	pthread_t th;
	memset(jobs, 0, sizeof(jobs));
	jobs[0].lo = 0;
	jobs[0].hi = 0x40000000u;
	jobs[1].lo = 0x40000000u;
	jobs[1].hi = 0x80000000u;
	jobs[0].stride = jobs[1].stride = stride;
	cr_assert_eq(pthread_create(&th, NULL, ex_run, &jobs[1]), 0);
	ex_run(&jobs[0]);
	pthread_join(th, NULL);
	for (int f = 0; f < 2; f++) {
		uint32_t fb = jobs[0].bad[f] ? jobs[0].first_bad[f] : jobs[1].first_bad[f];
		cr_assert_eq(jobs[0].bad[f] + jobs[1].bad[f], 0, "%s: %llu mismatches, first at 0x%08x",
			     f ? "E5M2" : "E4M3", (unsigned long long)(jobs[0].bad[f] + jobs[1].bad[f]), fb);
	}
}

Test(fp8, conversion_spot_values)
{
	struct {
		float x;
		uint8_t e4, e5;
	} v[] = {
		{448.0f, 0x7e, 0x5f},   {464.0f, 0x7e, 0x5f},   {465.0f, 0x7e, 0x5f},  {-1e30f, 0xfe, 0xfb},
		{INFINITY, 0x7e, 0x7b}, {-INFINITY, 0xfe, 0xfb}, {NAN, 0x7f, 0x7f},    {-NAN, 0x7f, 0x7f},
		{0.0f, 0x00, 0x00},     {-0.0f, 0x80, 0x80},    {0x1p-10f, 0x00, 0x14}, {0x1.8p-10f, 0x01, 0x16},
		{0x1p-9f, 0x01, 0x18},  {61440.0f, 0x7e, 0x7b}, {57344.0f, 0x7e, 0x7b}, {1.0f, 0x38, 0x3c},
		{0x1p-149f, 0x00, 0x00}, {0x1p-17f, 0x00, 0x00}, {0x1.8p-17f, 0x00, 0x01},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		cr_assert_eq(ibp_fp8_from_f32(v[i].x, IBP_FP8_E4M3), v[i].e4, "E4M3(%a) = 0x%02x", (double)v[i].x,
			     ibp_fp8_from_f32(v[i].x, IBP_FP8_E4M3));
		cr_assert_eq(ibp_fp8_from_f32(v[i].x, IBP_FP8_E5M2), v[i].e5, "E5M2(%a) = 0x%02x", (double)v[i].x,
			     ibp_fp8_from_f32(v[i].x, IBP_FP8_E5M2));
	}
}

Test(fp8, decode_all_codes)
{
	for (int f = 0; f < 2; f++) {
		uint8_t c[256];
		float out[256];
		for (int i = 0; i < 256; i++)
			c[i] = (uint8_t)i;
		cr_assert_eq(ibp_fp8_expand(c, 256, (ibp_fp8_format_t)f, out), IBP_OK);
		for (int i = 0; i < 256; i++) {
			double r = ref_decode((uint8_t)i, f);
			cr_assert_eq(ibp_fp8_to_f32((uint8_t)i, (ibp_fp8_format_t)f) == out[i] || (r != r), 1);
			if (r != r) {
				cr_assert(out[i] != out[i], "code 0x%02x must be NaN", i);
			} else {
				cr_assert(out[i] == r && !!signbit(out[i]) == !!signbit(r), "fmt %d code 0x%02x: %a vs %a", f, i,
					  (double)out[i], r);
				/* and every finite value converts back to its own code */
				if (isfinite(r))
					cr_assert_eq(ibp_fp8_from_f32(out[i], (ibp_fp8_format_t)f), (uint8_t)i);
			}
		}
	}
}

/* --------------------------------------------------------------- Hadamard */

Test(fp8, hadamard_orthogonal_and_invertible)
{
	tu_rng_t r;
	tu_rng_seed(&r, 11);
	for (uint32_t L = 4; L <= 12; L++) {
		uint32_t n = 1u << L;
		if (L <= 9) {
			/* columns of the normalised matrix: H e_j */
			float *M = tu_xcalloc((size_t)n * n * sizeof(float));
			for (uint32_t j = 0; j < n; j++) {
				M[(size_t)j * n + j] = 1.0f;
				ibpi_hadamard_f32(M + (size_t)j * n, L);
			}
			double inv = 1.0 / sqrt((double)n);
			for (uint32_t i = 0; i < n; i++) {
				for (uint32_t j = 0; j < n; j++) {
					double want = (__builtin_popcount(i & j) & 1) ? -inv : inv;
					cr_assert(fabs(M[(size_t)j * n + i] - want) <= 1e-7 * inv, "H[%u][%u] B=%u", i, j, n);
				}
			}
			/* H H^T = I */
			for (uint32_t i = 0; i < n; i += (L > 7 ? 7 : 1))
				for (uint32_t j = 0; j < n; j++) {
					double s = 0;
					for (uint32_t k = 0; k < n; k++)
						s += (double)M[(size_t)k * n + i] * M[(size_t)k * n + j];
					cr_assert(fabs(s - (i == j)) < 1e-6, "(H H^T)[%u][%u] = %.9f, B=%u", i, j, s, n);
				}
			free(M);
		}
		/* round trip, Parseval */
		float *x = tu_xcalloc(n * sizeof(float)), *y = tu_xcalloc(n * sizeof(float));
		double e2 = 0, x2 = 0, y2 = 0;
		for (uint32_t i = 0; i < n; i++)
			x[i] = y[i] = (float)(tu_uniform(&r) * 2 - 1);
		ibpi_hadamard_f32(y, L);
		for (uint32_t i = 0; i < n; i++) {
			x2 += (double)x[i] * x[i];
			y2 += (double)y[i] * y[i];
		}
		cr_assert(fabs(y2 / x2 - 1) < 1e-5, "Parseval B=%u", n);
		ibpi_hadamard_f32(y, L);
		for (uint32_t i = 0; i < n; i++)
			e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
		cr_assert(sqrt(e2 / x2) < 1e-6 * L, "inverse B=%u: rel err %.3g", n, sqrt(e2 / x2));
		/* integers: the unnormalised transform is exact, and applied twice gives n x */
		for (uint32_t i = 0; i < n; i++)
			x[i] = y[i] = (float)(int)tu_below(&r, 201) - 100.0f;
		ibpi_fwht_f32(y, L);
		ibpi_fwht_f32(y, L);
		for (uint32_t i = 0; i < n; i++)
			cr_assert_eq(y[i], x[i] * (float)n);
		free(x);
		free(y);
	}
}

/* ------------------------------------------------------------ block codec */

static double gauss(tu_rng_t *r)
{
	double u = tu_uniform(r), v = tu_uniform(r);
	if (u < 1e-300)
		u = 1e-300;
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint8_t *enc(const float *x, uint64_t n, const ibp_fp8_opts_t *o, uint64_t *size)
{
	uint64_t cap = 0;
	cr_assert_eq(ibp_fp8_encoded_size(o, n, &cap), IBP_OK);
	uint8_t *s = tu_xcalloc(cap + 16);
	cr_assert_eq(ibp_fp8_encode(x, IBP_DTYPE_F32, n, o, s, cap, size), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(*size, cap);
	return s;
}

static float *dec(const uint8_t *s, uint64_t size, uint64_t n, int nthreads)
{
	float *y = tu_xcalloc(n * sizeof(float) + 4);
	cr_assert_eq(ibp_fp8_decode(s, size, IBP_DTYPE_F32, n, y, nthreads), IBP_OK, "%s", ibp_last_error());
	return y;
}

/* The documented per-block bound: ||G' - G|| <= ||G|| (2^-(m+1) + minsub sqrt(B) / (2 Qmax)) (1 + 1e-4). */
static double block_bound(int f, uint32_t B)
{
	return (f == 0 ? 0.0625 + 0x1p-9 * sqrt(B) / (2 * 448.0) : 0.125 + 0x1p-16 * sqrt(B) / (2 * 57344.0)) * (1 + 1e-4);
}

/* Checks every block against the bound; returns the overall relative L2 error. */
static double check_bound(const float *x, const float *y, uint64_t n, uint32_t B, int f)
{
	double e2t = 0, x2t = 0;
	for (uint64_t b0 = 0; b0 < n; b0 += B) {
		double e2 = 0, x2 = 0;
		for (uint64_t i = b0; i < n && i < b0 + B; i++) {
			double d = (double)y[i] - x[i];
			e2 += d * d;
			x2 += (double)x[i] * x[i];
		}
		cr_assert(sqrt(e2) <= block_bound(f, B) * sqrt(x2) + 1e-30, "block %llu: rel err %.4f > bound %.4f",
			  (unsigned long long)(b0 / B), sqrt(e2 / x2), block_bound(f, B));
		e2t += e2;
		x2t += x2;
	}
	return sqrt(e2t / x2t);
}

Test(fp8, gaussian_error_and_size_targets)
{
	uint64_t n = 1u << 20;
	tu_rng_t r;
	tu_rng_seed(&r, 12);
	float *x = tu_xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		x[i] = (float)(gauss(&r) * 0.02);
	/* the scalar reference and every vector path this CPU runs (fp8_simd.h) */
	for (int impl = FP8_SIMD_SCALAR; impl <= FP8_SIMD_AVX512; impl++) {
		if (!ibpi_fp8_simd_set((fp8_simd_impl_t)impl))
			continue;
		for (int f = 0; f < 2; f++) {
			for (uint32_t B = 16; B <= 4096; B *= 4) {
				ibp_fp8_opts_t o;
				ibp_fp8_opts_default(&o);
				o.format = (ibp_fp8_format_t)f;
				o.block = B;
				uint64_t size = 0;
				uint8_t *s = enc(x, n, &o, &size);
				float *y = dec(s, size, n, 0);
				double rel = check_bound(x, y, n, B, f);
				if (f == 0)
					cr_assert(rel <= 0.03, "impl %d E4M3 B=%u: rel L2 %.4f > 3%%", impl, B, rel);
				else
					cr_assert(rel <= 0.06, "impl %d E5M2 B=%u: rel L2 %.4f", impl, B, rel);
				free(s);
				free(y);
			}
		}
	}
	ibpi_fp8_simd_set(FP8_SIMD_AUTO);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	uint64_t size = 0;
	cr_assert_eq(ibp_fp8_encoded_size(&o, n, &size), IBP_OK);
	cr_assert_eq(size, 64 + n + 5 * (n / 256));
	cr_assert((double)size / n <= 1.04, "%.4f bytes per element", (double)size / n);
	cr_assert_eq(ibp_fp8_encoded_size(&o, 1000, &size), IBP_OK);
	cr_assert_eq(size, (64 + 1024 + 5 * 4 + 15) / 16 * 16);
	free(x);
}

/* Ablations and outlier-heavy data: every variant meets the same bound. */
Test(fp8, ablations_and_outliers_within_bound)
{
	uint64_t n = 1u << 18;
	tu_rng_t r;
	tu_rng_seed(&r, 13);
	float *x = tu_xcalloc(n * sizeof(float));
	for (int data = 0; data < 3; data++) {
		for (uint64_t i = 0; i < n; i++) {
			double g = gauss(&r);
			if (data == 0)
				x[i] = (float)g;
			else if (data == 1) /* heavy tail: one 100x outlier every ~100 values */
				x[i] = (float)(g * (tu_below(&r, 100) == 0 ? 100.0 : 1.0));
			else /* per-block scales from 1e-6 to 1e3 */
				x[i] = (float)(g * pow(10.0, (double)((i / 256) % 10) - 6.0));
		}
		for (int h = 0; h < 2; h++)
			for (int a = 0; a < 2; a++) {
				ibp_fp8_opts_t o;
				ibp_fp8_opts_default(&o);
				o.hadamard = h;
				o.adaptive = a;
				uint64_t size = 0;
				uint8_t *s = enc(x, n, &o, &size);
				float *y = dec(s, size, n, 1);
				check_bound(x, y, n, o.block, 0);
				free(s);
				free(y);
			}
	}
	free(x);
}

Test(fp8, tails_zeros_and_specials)
{
	tu_rng_t r;
	tu_rng_seed(&r, 14);
	static const uint64_t sizes[] = {0, 1, 15, 255, 256, 257, 1000, 4097};
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint64_t n = sizes[si], size = 0;
		float *x = tu_xcalloc(n * sizeof(float) + 4);
		for (uint64_t i = 0; i < n; i++)
			x[i] = (float)gauss(&r);
		ibp_fp8_opts_t o;
		ibp_fp8_opts_default(&o);
		uint8_t *s = enc(x, n, &o, &size);
		float *y = dec(s, size, n, 1);
		if (n)
			check_bound(x, y, n, 256, 0);
		free(s);
		free(y);
		free(x);
	}
	/* zero block, NaN block, Inf block, next to normal blocks */
	uint64_t n = 1024, size = 0;
	float *x = tu_xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		x[i] = i < 256 ? 0.0f : (float)gauss(&r);
	x[300] = NAN;
	x[600] = -INFINITY;
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	uint8_t *s = enc(x, n, &o, &size);
	float *y = dec(s, size, n, 1);
	for (uint64_t i = 0; i < 256; i++)
		cr_assert(y[i] == 0.0f, "zero block must decode to zeros");
	for (uint64_t i = 256; i < 768; i++)
		cr_assert(y[i] != y[i], "a block holding NaN/Inf decodes to NaN (element %llu)", (unsigned long long)i);
	check_bound(x + 768, y + 768, 256, 256, 0);
	for (uint64_t i = 0; i < 256; i++)
		cr_assert_eq(s[64 + 256 + i], 0x7f);
	free(s);
	free(y);
	free(x);
}

/* Scaling the input by 2^j leaves codes and s unchanged and shifts k by -j;
 * a change in one block changes no other block's bytes; threads do not
 * change bytes; bf16/f16 outputs are the f32 output rounded. */
Test(fp8, invariances_and_determinism)
{
	uint64_t n = 5000, size = 0, size2 = 0;
	tu_rng_t r;
	tu_rng_seed(&r, 15);
	float *x = tu_xcalloc(n * sizeof(float)), *x2 = tu_xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++) {
		x[i] = (float)(gauss(&r) * 0.01);
		x2[i] = x[i] * 0x1p-20f;
	}
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.nthreads = 1;
	uint8_t *s = enc(x, n, &o, &size), *s2 = enc(x2, n, &o, &size2);
	uint64_t m = (n + 255) / 256, codes = m * 256;
	cr_assert(memcmp(s + 64, s2 + 64, codes + 4 * m) == 0, "codes and s must not depend on a 2^j scale");
	for (uint64_t b = 0; b < m; b++)
		cr_assert_eq((int8_t)s2[64 + codes + 4 * m + b], (int8_t)s[64 + codes + 4 * m + b] + 20);
	/* locality */
	x2[0] = x[0];
	for (uint64_t i = 0; i < n; i++)
		x2[i] = x[i];
	x2[700] = 3.0f;
	free(s2);
	s2 = enc(x2, n, &o, &size2);
	for (uint64_t b = 0; b < m; b++) {
		int same = memcmp(s + 64 + b * 256, s2 + 64 + b * 256, 256) == 0 &&
			   memcmp(s + 64 + codes + 4 * b, s2 + 64 + codes + 4 * b, 4) == 0;
		cr_assert_eq(same, b != 2, "block %llu", (unsigned long long)b);
	}
	/* threads */
	o.nthreads = 4;
	uint8_t *s4 = enc(x, n, &o, &size2);
	cr_assert(memcmp(s, s4, size) == 0);
	/* narrowing outputs */
	float *y = dec(s, size, n, 2);
	uint16_t *hb = tu_xcalloc(n * 2), *hh = tu_xcalloc(n * 2);
	cr_assert_eq(ibp_fp8_decode(s, size, IBP_DTYPE_BF16, n, hb, 2), IBP_OK);
	cr_assert_eq(ibp_fp8_decode(s, size, IBP_DTYPE_F16, n, hh, 2), IBP_OK);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &y[i], 4);
		cr_assert_eq(hb[i], (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
		float back;
		uint32_t e = (hh[i] >> 10) & 31, mm = hh[i] & 0x3ff;
		back = (float)ldexp(e ? (double)(mm | 0x400) : (double)mm, (e ? (int)e : 1) - 25) * ((hh[i] & 0x8000) ? -1.0f : 1.0f);
		cr_assert(fabsf(back - y[i]) <= fabsf(y[i]) * 0x1p-11f + 0x1p-25f, "f16 of %a", (double)y[i]);
	}
	/* bf16 input encodes like its f32 widening */
	uint16_t *xb = tu_xcalloc(n * 2);
	float *xw = tu_xcalloc(n * 4);
	for (uint64_t i = 0; i < n; i++) {
		xb[i] = hb[i];
		uint32_t u = (uint32_t)hb[i] << 16;
		memcpy(&xw[i], &u, 4);
	}
	uint64_t cap = 0, sz = 0;
	cr_assert_eq(ibp_fp8_encoded_size(&o, n, &cap), IBP_OK);
	uint8_t *sb = tu_xcalloc(cap), *sw = enc(xw, n, &o, &size2);
	cr_assert_eq(ibp_fp8_encode(xb, IBP_DTYPE_BF16, n, &o, sb, cap, &sz), IBP_OK);
	/* all but the source dtype and the checksum over it */
	cr_assert(memcmp(sb + 17, sw + 17, 56 - 17) == 0 && memcmp(sb + 64, sw + 64, cap - 64) == 0 &&
		  sb[16] == IBP_DTYPE_BF16);
	free(sb);
	free(sw);
	free(xb);
	free(xw);
	free(hb);
	free(hh);
	free(y);
	free(s4);
	free(s);
	free(s2);
	free(x);
	free(x2);
}

/* A checksummed stream: every header bit and 1000 random payload bits,
 * flipped one at a time, and every truncation, are refused; TRUSTED skips
 * only the checksum; the unchecked and version-1 forms decode alike. */
Test(fp8, checksum_rejects_every_flip)
{
	uint64_t n = 3000, size = 0, psize = 0;
	tu_rng_t r;
	tu_rng_seed(&r, 161);
	float *x = tu_xcalloc(n * sizeof(float)), *y = tu_xcalloc(n * sizeof(float)),
	      *ref = tu_xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		x[i] = (float)gauss(&r);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	cr_assert_eq(o.checksum, 1, "checksums are the default");
	uint8_t *s = enc(x, n, &o, &size);
	o.checksum = 0;
	uint8_t *p = enc(x, n, &o, &psize), *c = tu_xcalloc(size);
	cr_assert_eq(size, psize);
	cr_assert(s[4] == 2 && (s[6] & 4) && !(p[6] & 4));
	cr_assert(memcmp(s + 64, p + 64, size - 64) == 0);
	cr_assert_eq(ibp_fp8_decode(s, size, IBP_DTYPE_F32, n, ref, 1), IBP_OK);
	for (uint64_t k = 0; k < 64 * 8 + 1000; k++) {
		uint64_t bitpos = k < 64 * 8 ? k : 64 * 8 + tu_below(&r, (size - 64) * 8);
		memcpy(c, s, size);
		c[bitpos / 8] ^= (uint8_t)(1u << (bitpos % 8));
		ibp_status_t st = ibp_fp8_decode(c, size, IBP_DTYPE_F32, n, y, 1);
		cr_assert(st == IBP_ERR_CHECKSUM || st == IBP_ERR_CORRUPT, "bit %llu flipped: status %d",
			  (unsigned long long)bitpos, st);
	}
	for (uint64_t len = 0; len < size; len++)
		cr_assert_neq(ibp_fp8_decode(s, len, IBP_DTYPE_F32, n, y, 1), IBP_OK, "truncated to %llu",
			      (unsigned long long)len);
	memcpy(c, s, size);
	c[64] ^= 2; /* an FP8 code: structurally fine */
	cr_assert_eq(ibp_fp8_decode(c, size, IBP_DTYPE_F32, n, y, 1), IBP_ERR_CHECKSUM);
	cr_assert_eq(ibp_fp8_decode_ext(c, size, IBP_DTYPE_F32, n, y, 1, IBP_FP8_TRUSTED), IBP_OK);
	cr_assert_eq(ibp_fp8_decode_ext(s, size, IBP_DTYPE_F32, n, y, 1, 2u), IBP_ERR_INVALID_ARG);
	for (int v1 = 0; v1 < 2; v1++) {
		if (v1)
			p[4] = 1; /* the old format */
		memset(y, 0, n * sizeof(float));
		cr_assert_eq(ibp_fp8_decode(p, size, IBP_DTYPE_F32, n, y, 1), IBP_OK, "%s", ibp_last_error());
		cr_assert(memcmp(y, ref, n * sizeof(float)) == 0, "version %d: values differ", v1 ? 1 : 2);
	}
	free(c);
	free(p);
	free(s);
	free(ref);
	free(y);
	free(x);
}

Test(fp8, corrupt_streams_rejected)
{
	uint64_t n = 1000, size = 0;
	tu_rng_t r;
	tu_rng_seed(&r, 16);
	float *x = tu_xcalloc(n * sizeof(float)), *y = tu_xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		x[i] = (float)gauss(&r);
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.checksum = 0; /* the structure's own checks (the checksum's: checksum_rejects_every_flip) */
	uint8_t *s = enc(x, n, &o, &size), *c = tu_xcalloc(size);
	uint64_t m = 4, sc = 64 + 1024, ke = sc + 16;
#define MUT(stmt, what)                                                                               \
	do {                                                                                          \
		memcpy(c, s, size);                                                                   \
		stmt;                                                                                 \
		cr_assert_eq(ibp_fp8_decode(c, size, IBP_DTYPE_F32, n, y, 1), IBP_ERR_CORRUPT, "%s accepted", what); \
	} while (0)
	MUT(c[0] ^= 1, "magic");
	MUT(c[4] = 9, "version");
	MUT(c[5] = 2, "format");
	MUT(c[6] = 8, "flags");
	MUT(c[4] = 0, "version 0");
	MUT(c[60] = 1, "a sum without the checksum flag");
	MUT((c[4] = 1, c[6] |= 4), "the checksum flag in version 1");
	MUT(c[7] = 3, "log2 block");
	MUT(c[7] = 9, "log2 block (size mismatch)");
	MUT(c[8] ^= 1, "element count");
	MUT(c[16] = 5, "source dtype");
	MUT(c[40] = 1, "reserved");
	MUT(c[ke] = 127, "k out of range");
	MUT(c[sc + 3] |= 0x80, "negative scale");
	MUT((c[sc] = 0, c[sc + 1] = 0, c[sc + 2] = 0x80, c[sc + 3] = 0x7f), "infinite scale");
	MUT(c[64 + 5] = 0x7f, "NaN code in a finite block");
	MUT(memset(c + sc, 0, 4), "zero scale with nonzero codes");
	MUT(c[size - 1] = 1, "padding");
	MUT((c[6] = 1, c[ke] = 3), "k != 0 without the adaptive step");
	cr_assert_eq(ibp_fp8_decode(s, size - 1, IBP_DTYPE_F32, n, y, 1), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_fp8_decode(s, size, IBP_DTYPE_F32, n + 1, y, 1), IBP_ERR_CORRUPT);
	for (int it = 0; it < 3000; it++) {
		memcpy(c, s, size);
		c[tu_below(&r, size)] ^= (uint8_t)(1 + tu_below(&r, 255));
		ibp_status_t st = ibp_fp8_decode(c, size, IBP_DTYPE_F32, n, y, 1);
		cr_assert(st == IBP_OK || st == IBP_ERR_CORRUPT || st == IBP_ERR_CHECKSUM);
	}
#undef MUT
	(void)m;
	ibp_fp8_opts_t bad = o;
	bad.block = 100;
	cr_assert_eq(ibp_fp8_encoded_size(&bad, n, &size), IBP_ERR_INVALID_ARG);
	bad.block = 8192;
	cr_assert_eq(ibp_fp8_encoded_size(&bad, n, &size), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_fp8_encode(x, IBP_DTYPE_I32, n, &o, c, size, &size), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_fp8_encode(x, IBP_DTYPE_F32, n, &o, c, 10, &size), IBP_ERR_BUFFER_TOO_SMALL);
	free(c);
	free(s);
	free(x);
	free(y);
}
