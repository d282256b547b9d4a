/* test_fp8_simd.c - the FP8 codec's vector kernels (src/fp8/fp8_avx2.c,
 * fp8_avx512.c) against the scalar reference, on every implementation this
 * CPU runs: the same stream bytes on encode and the same output bytes on
 * decode, for f32, bf16 and f16, both FP8 formats, every block size, the
 * Hadamard and adaptive steps on and off, odd lengths, and data built to
 * reach every branch (NaN, Inf, -0, subnormals of each dtype, FP8 rounding
 * ties, saturation, overflow in the rotation, scales that overflow the
 * decode). Also crafted streams: random finite codes and scales, NaN codes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fp8/fp8_impl.h"
#include "fp8/fp8_simd.h"
#include "testutil.h"

static int quick(void)
{
	const char *e = getenv("IBP_TEST_QUICK");
	return e && e[0] == '1';
}

static const ibp_dtype_t DT[3] = {IBP_DTYPE_F32, IBP_DTYPE_BF16, IBP_DTYPE_F16};
static const char *DTN[3] = {"f32", "bf16", "f16"};
static const fp8_simd_impl_t IMPL[2] = {FP8_SIMD_AVX2, FP8_SIMD_AVX512};
static const char *IMPLN[2] = {"avx2", "avx512"};

static double gauss(tu_rng_t *r)
{
	double u1 = (double)(tu_next(r) >> 11) * 0x1p-53 + 0x1p-54, u2 = tu_uniform(r);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* Writes element i of dtype dt from float bits (narrowed as the decoder does, or raw 16-bit patterns). */
static void put(uint8_t *buf, ibp_dtype_t dt, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32) {
		memcpy(buf + 4 * i, &f, 4);
		return;
	}
	uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
	memcpy(buf + 2 * i, &h, 2);
}

static void put_raw(uint8_t *buf, ibp_dtype_t dt, uint64_t i, uint32_t bits)
{
	if (dt == IBP_DTYPE_F32)
		memcpy(buf + 4 * i, &bits, 4);
	else {
		uint16_t h = (uint16_t)bits;
		memcpy(buf + 2 * i, &h, 2);
	}
}

/* Finite random bit pattern of dtype dt (subnormals included). */
static uint32_t finite_bits(tu_rng_t *r, ibp_dtype_t dt)
{
	for (;;) {
		uint32_t b = (uint32_t)tu_next(r);
		if (dt == IBP_DTYPE_F32 && (b & 0x7f800000u) != 0x7f800000u)
			return b;
		if (dt == IBP_DTYPE_BF16 && (b & 0x7f80u) != 0x7f80u)
			return b & 0xffffu;
		if (dt == IBP_DTYPE_F16 && (b & 0x7c00u) != 0x7c00u)
			return b & 0xffffu;
	}
}

/* The largest finite value of dt, as float bits. */
static uint32_t dt_max(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 0x7f7fffffu : dt == IBP_DTYPE_BF16 ? 0x7f7f0000u : 0x477fe000u;
}

/* One block of len elements at element offset base, in one of several modes. */
static void fill_block(tu_rng_t *r, uint8_t *buf, ibp_dtype_t dt, uint32_t fmt, uint64_t base, uint32_t len, int mode)
{
	double qmax = fmt == FP8_E4M3 ? 448.0 : 57344.0;
	int emax = dt == IBP_DTYPE_F16 ? 14 : 120, emin = dt == IBP_DTYPE_F16 ? -24 : dt == IBP_DTYPE_F32 ? -149 : -133;
	double sc = ldexp(1.0, emin + 10 + (int)tu_below(r, (uint64_t)(emax - emin - 10)));
	for (uint32_t i = 0; i < len; i++) {
		uint64_t u = base + i;
		switch (mode) {
		case 0: /* gaussian at a random scale */
			put(buf, dt, u, (float)(sc * gauss(r)));
			break;
		case 1: /* gaussian with finite specials: +-0, subnormals, the max */
		{
			uint64_t c = tu_below(r, 10);
			if (c == 0)
				put_raw(buf, dt, u, fbits(-0.0f) >> (dt == IBP_DTYPE_F32 ? 0 : 16));
			else if (c == 1)
				put_raw(buf, dt, u, 0);
			else if (c == 2) {
				uint32_t t = (uint32_t)tu_below(r, 1024) | 1u;
				put_raw(buf, dt, u, (dt == IBP_DTYPE_F32 ? t : t & 0x7fu) | (tu_next(r) & 1 ? (dt == IBP_DTYPE_F32 ? 0x80000000u : 0x8000u) : 0));
			} else if (c == 3) {
				uint32_t m = dt_max(dt);
				put_raw(buf, dt, u, dt == IBP_DTYPE_F32 ? m : dt == IBP_DTYPE_BF16 ? m >> 16 : 0x7bffu);
			} else
				put(buf, dt, u, (float)(sc * gauss(r)));
			break;
		}
		case 2: /* one NaN or Inf among gaussians */
			put(buf, dt, u, (float)gauss(r));
			break;
		case 3: /* zeros of both signs */
			put(buf, dt, u, tu_next(r) & 1 ? -0.0f : 0.0f);
			break;
		case 4: /* any finite bit pattern */
			put_raw(buf, dt, u, finite_bits(r, dt));
			break;
		case 5: /* near the dtype's max: the rotation overflows without the adaptive step */
			put_raw(buf, dt, u, dt == IBP_DTYPE_F32 ? (dt_max(dt) - (uint32_t)tu_below(r, 1000)) | (uint32_t)(tu_next(r) & 1) << 31
					    : dt == IBP_DTYPE_BF16 ? (0x7f7fu - (uint32_t)tu_below(r, 8)) | (uint32_t)(tu_next(r) & 1) << 15
								   : (0x7bffu - (uint32_t)tu_below(r, 8)) | (uint32_t)(tu_next(r) & 1) << 15);
			break;
		case 6: /* FP8 grid values and midpoints with max = Qmax: s = 1, so rounding ties reach the conversion */
		{
			uint8_t c = (uint8_t)tu_below(r, 256);
			float v = fp8_to_f32(c, fmt), w = fp8_to_f32((uint8_t)(c + 1), fmt);
			if (v != v || w != w || isinf(v) || isinf(w) || fabsf(v) > (float)qmax || fabsf(w) > (float)qmax)
				v = 0.5f;
			else if (tu_next(r) & 1)
				v = (float)(0.5 * ((double)v + (double)w)); /* exact in f32 */
			put(buf, dt, u, i == 0 ? (float)qmax : v);
			break;
		}
		default: /* tiny values: dtype subnormals and the smallest normals */
			put_raw(buf, dt, u, (uint32_t)tu_below(r, 4) + (tu_next(r) & 1 ? (dt == IBP_DTYPE_F32 ? 0x80000000u : 0x8000u) : 0));
			if (dt != IBP_DTYPE_F32 && tu_below(r, 2))
				put_raw(buf, dt, u, (uint32_t)tu_below(r, 0x100) | (dt == IBP_DTYPE_BF16 ? 0x80u : 0x400u));
			break;
		}
	}
	if (mode == 2) {
		static const uint32_t sp32[4] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x7f800001u};
		static const uint16_t spbf[4] = {0x7fc0u, 0xff80u, 0x7f80u, 0xffc1u};
		static const uint16_t sph[4] = {0x7e00u, 0xfc00u, 0x7c00u, 0x7c01u};
		uint64_t c = tu_below(r, 4), at = base + tu_below(r, len);
		put_raw(buf, dt, at, dt == IBP_DTYPE_F32 ? sp32[c] : dt == IBP_DTYPE_BF16 ? spbf[c] : sph[c]);
	}
}

static int runs(fp8_simd_impl_t impl)
{
	int ok = ibpi_fp8_simd_set(impl);
	ibpi_fp8_simd_set(FP8_SIMD_AUTO);
	return ok;
}

static void encode_with(fp8_simd_impl_t impl, const void *src, ibp_dtype_t dt, uint64_t n, const ibp_fp8_opts_t *o,
			uint8_t *dst, uint64_t cap)
{
	uint64_t size = 0;
	cr_assert(ibpi_fp8_simd_set(impl));
	ibp_status_t st = ibp_fp8_encode(src, dt, n, o, dst, cap, &size);
	ibpi_fp8_simd_set(FP8_SIMD_AUTO);
	cr_assert_eq(st, IBP_OK, "encode: %s", ibp_last_error());
	cr_assert_eq(size, cap);
}

static ibp_status_t decode_with(fp8_simd_impl_t impl, const uint8_t *s, uint64_t size, ibp_dtype_t dt, uint64_t n,
				void *dst)
{
	cr_assert(ibpi_fp8_simd_set(impl));
	ibp_status_t st = ibp_fp8_decode(s, size, dt, n, dst, 1);
	ibpi_fp8_simd_set(FP8_SIMD_AUTO);
	return st;
}

static uint64_t first_diff(const uint8_t *a, const uint8_t *b, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return n;
}

/* Every dtype, format, block size, flag pair and a few lengths: stream and decode bytes equal scalar's. */
Test(fp8_simd, encode_decode_match_scalar, .timeout = 600)
{
	int any = 0;
	for (int ii = 0; ii < 2; ii++) {
		if (!runs(IMPL[ii])) {
			cr_log_info("%s: not run on this CPU", IMPLN[ii]);
			continue;
		}
		any = 1;
		tu_rng_t r;
		tu_rng_seed(&r, 3300 + (uint64_t)ii);
		for (int d = 0; d < 3; d++)
			for (uint32_t fmt = 0; fmt < 2; fmt++)
				for (uint32_t lb = 4; lb <= 12; lb++)
					for (int fl = 0; fl < 4; fl++) {
						uint32_t B = 1u << lb;
						uint64_t lens[3] = {(quick() ? 4 : 16) * (uint64_t)B + 1 + tu_below(&r, B - 1), B,
								    1 + tu_below(&r, 15)};
						for (int li = 0; li < 3; li++) {
							uint64_t n = lens[li], m = (n + B - 1) / B;
							size_t es = ibp_dtype_size(DT[d]);
							uint8_t *src = tu_xcalloc(n * es);
							for (uint64_t b = 0; b < m; b++) {
								uint32_t len = (uint32_t)(n - b * B < B ? n - b * B : B);
								fill_block(&r, src, DT[d], fmt, b * B, len, (int)((b + tu_below(&r, 2)) % 8));
							}
							ibp_fp8_opts_t o;
							ibp_fp8_opts_default(&o);
							o.format = (ibp_fp8_format_t)fmt;
							o.block = B;
							o.hadamard = fl & 1;
							o.adaptive = (fl >> 1) & 1;
							o.nthreads = 1;
							o.checksum = 0;
							uint64_t cap = 0;
							cr_assert_eq(ibp_fp8_encoded_size(&o, n, &cap), IBP_OK);
							uint8_t *ref = tu_xcalloc(cap), *got = tu_xcalloc(cap);
							encode_with(FP8_SIMD_SCALAR, src, DT[d], n, &o, ref, cap);
							encode_with(IMPL[ii], src, DT[d], n, &o, got, cap);
							uint64_t at = first_diff(ref, got, cap);
							cr_assert_eq(at, cap, "%s encode %s fmt %u B %u had %d adapt %d n %llu: byte %llu "
									      "0x%02x vs scalar 0x%02x",
								     IMPLN[ii], DTN[d], fmt, B, fl & 1, fl >> 1, (unsigned long long)n,
								     (unsigned long long)at, got[at], ref[at]);
							uint8_t *dref = tu_xcalloc(n * es), *dgot = tu_xcalloc(n * es);
							cr_assert_eq(decode_with(FP8_SIMD_SCALAR, ref, cap, DT[d], n, dref), IBP_OK);
							cr_assert_eq(decode_with(IMPL[ii], ref, cap, DT[d], n, dgot), IBP_OK);
							at = first_diff(dref, dgot, n * es);
							cr_assert_eq(at, n * es, "%s decode %s fmt %u B %u had %d adapt %d n %llu: byte %llu",
								     IMPLN[ii], DTN[d], fmt, B, fl & 1, fl >> 1, (unsigned long long)n,
								     (unsigned long long)at);
							free(src), free(ref), free(got), free(dref), free(dgot);
						}
					}
	}
	if (!any)
		cr_log_warn("no vector implementation runs on this CPU: nothing compared");
}

/* Crafted streams: every finite code under random scales (denormal to near
 * FLT_MAX, so the rotation and the narrowing overflow, and NaN appears) and
 * exponents decode to the same bytes; a NaN or Inf code is rejected by all. */
Test(fp8_simd, crafted_streams_decode_as_scalar)
{
	tu_rng_t r;
	tu_rng_seed(&r, 3333);
	for (int ii = 0; ii < 2; ii++) {
		if (!runs(IMPL[ii]))
			continue;
		for (int d = 0; d < 3; d++)
			for (uint32_t fmt = 0; fmt < 2; fmt++)
				for (uint32_t lb = 4; lb <= 12; lb++)
					for (int fl = 0; fl < 4; fl++) {
						uint32_t B = 1u << lb;
						uint64_t n = 3 * (uint64_t)B - (lb & 1 ? 5 : 0), m = 3;
						size_t es = ibp_dtype_size(DT[d]);
						ibp_fp8_opts_t o;
						ibp_fp8_opts_default(&o);
						o.format = (ibp_fp8_format_t)fmt;
						o.block = B;
						o.hadamard = fl & 1;
						o.adaptive = (fl >> 1) & 1;
						o.nthreads = 1;
						o.checksum = 0;
						uint64_t cap = 0;
						cr_assert_eq(ibp_fp8_encoded_size(&o, n, &cap), IBP_OK);
						float *zero = tu_xcalloc(n * 4);
						uint8_t *s8 = tu_xcalloc(cap), *dref = tu_xcalloc(n * es), *dgot = tu_xcalloc(n * es);
						encode_with(FP8_SIMD_SCALAR, zero, IBP_DTYPE_F32, n, &o, s8, cap);
						uint8_t *codes = s8 + TACO_HEADER_BYTES, *scales = codes + m * B, *kexp = scales + 4 * m;
						for (uint64_t i = 0; i < m * B; i++) {
							uint8_t c;
							do
								c = (uint8_t)tu_next(&r);
							while (fmt == FP8_E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7f) >= 0x7c);
							codes[i] = c;
						}
						for (uint64_t b = 0; b < m; b++) {
							/* a normal or denormal finite positive scale */
							uint32_t sb = (uint32_t)tu_below(&r, 0x7f800000u - 1) + 1;
							if (b == 1)
								sb = 0x7f000000u + (uint32_t)tu_below(&r, 0x800000u); /* huge: Inf and NaN */
							memcpy(scales + 4 * b, &sb, 4);
							kexp[b] = o.adaptive ? (uint8_t)(int8_t)((int)tu_below(&r, 253) - 126) : 0;
						}
						cr_assert_eq(decode_with(FP8_SIMD_SCALAR, s8, cap, DT[d], n, dref), IBP_OK, "%s",
							     ibp_last_error());
						cr_assert_eq(decode_with(IMPL[ii], s8, cap, DT[d], n, dgot), IBP_OK);
						uint64_t at = first_diff(dref, dgot, n * es);
						cr_assert_eq(at, n * es, "%s crafted %s fmt %u B %u had %d adapt %d: byte %llu", IMPLN[ii],
							     DTN[d], fmt, B, fl & 1, fl >> 1, (unsigned long long)at);
						/* one NaN (or Inf) code anywhere in block 2: corrupt for every implementation */
						codes[2 * B + tu_below(&r, B)] = (uint8_t)(fmt == FP8_E4M3 ? 0x7f : 0x7c + tu_below(&r, 4)) |
										 (uint8_t)(tu_next(&r) & 0x80);
						cr_assert_eq(decode_with(FP8_SIMD_SCALAR, s8, cap, DT[d], n, dref), IBP_ERR_CORRUPT);
						cr_assert_eq(decode_with(IMPL[ii], s8, cap, DT[d], n, dgot), IBP_ERR_CORRUPT);
						free(zero), free(s8), free(dref), free(dgot);
					}
	}
}

/* The choice itself: scalar always runs; an implementation the CPU lacks is refused; AUTO is restored. */
Test(fp8_simd, dispatch)
{
	cr_assert(ibpi_fp8_simd_set(FP8_SIMD_SCALAR));
	cr_assert_null(ibpi_fp8_kern());
	const fp8_kern_t *got[2] = {NULL, NULL};
	for (int ii = 0; ii < 2; ii++)
		if (ibpi_fp8_simd_set(IMPL[ii]))
			cr_assert_not_null(got[ii] = ibpi_fp8_kern());
	cr_assert(!got[0] || got[0] != got[1], "AVX2 and AVX-512 give the same kernels");
	cr_assert(ibpi_fp8_simd_set(FP8_SIMD_AUTO));
	setenv("IBP_FORCE_PORTABLE", "1", 1);
	cr_assert_null(ibpi_fp8_kern());
	unsetenv("IBP_FORCE_PORTABLE");
	setenv("IBP_FP8_SIMD", "scalar", 1);
	cr_assert_null(ibpi_fp8_kern());
	setenv("IBP_FP8_SIMD", "avx2", 1);
	if (runs(FP8_SIMD_AVX2)) {
		cr_assert(ibpi_fp8_simd_set(FP8_SIMD_AVX2));
		const fp8_kern_t *k2 = ibpi_fp8_kern();
		cr_assert(ibpi_fp8_simd_set(FP8_SIMD_AUTO));
		cr_assert_eq(ibpi_fp8_kern(), k2);
	}
	unsetenv("IBP_FP8_SIMD");
}
