/* fpmath.h - float arithmetic that rounds the same on the host and on the
 * device: every operation goes through FP_ADD/FP_MUL/..., which are
 * __fadd_rn & co. on the device and plain operators on the host (C11 mode:
 * no FMA contraction). Shared by the FP8 codec, the Hadamard transform and
 * their CUDA kernels, so that CPU and GPU produce the same bits. */
#ifndef IBP_UTIL_FPMATH_H
#define IBP_UTIL_FPMATH_H

#include <stdint.h>

#include "util/hd.h"

#if defined(__CUDA_ARCH__)
#define FP_ADD(a, b) __fadd_rn((a), (b))
#define FP_SUB(a, b) __fsub_rn((a), (b))
#define FP_MUL(a, b) __fmul_rn((a), (b))
#define FP_DIV(a, b) __fdiv_rn((a), (b))
#define FP_SQRT(a) __fsqrt_rn(a)
#else
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#define FP_ADD(a, b) ((a) + (b))
#define FP_SUB(a, b) ((a) - (b))
#define FP_MUL(a, b) ((a) * (b))
#define FP_DIV(a, b) ((a) / (b))
#define FP_SQRT(a) ibp_sqrtf(a)
#endif

#ifndef __CUDA_ARCH__
#include <string.h>
/* IEEE sqrt (correctly rounded); avoids <math.h> errno handling. */
static inline float ibp_sqrtf(float x)
{
	return __builtin_sqrtf(x);
}
#endif

static inline IBP_HD uint32_t ibp_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
#endif
}

static inline IBP_HD float ibp_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

/* 2^k as a float for k in [-126, 127]. */
static inline IBP_HD float ibp_pow2f(int k)
{
	return ibp_f32_from_bits((uint32_t)(k + 127) << 23);
}

#endif /* IBP_UTIL_FPMATH_H */
