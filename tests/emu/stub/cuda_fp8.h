/* Host-emulation stub of cuda_fp8.h: the float -> FP8 conversion of
 * __nv_cvt_float_to_fp8, written from the formats' definition (nearest
 * representable value, ties to the even code, __NV_SATFINITE clamps to
 * the largest finite value, NaN gives 0x7F) - independent of the
 * library's own fp8_impl.h, which the kernels use for the reverse. */
#pragma once
#include <math.h>
#include <stdint.h>
typedef unsigned char __nv_fp8_storage_t;
typedef enum { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;
typedef enum { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;

/* Value of the positive code c (0..0x7f) of a format; NAN/INFINITY codes
 * are reported as such. */
static inline double emu_fp8_value(unsigned c, int e5m2)
{
	const unsigned mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
	unsigned e = c >> mbits, m = c & ((1u << mbits) - 1);
	if (e5m2 && e == 31)
		return m ? NAN : INFINITY;
	if (!e5m2 && c == 0x7f)
		return NAN;
	if (e == 0)
		return ldexp((double)m, 1 - (int)bias - (int)mbits);
	return ldexp((double)((1u << mbits) | m), (int)e - (int)bias - (int)mbits);
}

static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
							 __nv_fp8_interpretation_t fmt)
{
	const int e5 = fmt == __NV_E5M2;
	if (isnan(x))
		return 0x7f;
	const unsigned sgn = signbit(x) ? 0x80u : 0u;
	const double a = fabs((double)x);
	const unsigned maxc = e5 ? 0x7bu : 0x7eu;
	if (a >= emu_fp8_value(maxc, e5)) {
		if (sat == __NV_SATFINITE || !isinf(x)) {
			/* beyond max: rounds to max unless past max + half an ulp */
			double ulp = emu_fp8_value(maxc, e5) - emu_fp8_value(maxc - 1, e5);
			if (sat == __NV_SATFINITE || a < emu_fp8_value(maxc, e5) + ulp / 2)
				return (__nv_fp8_storage_t)(sgn | maxc);
		}
		return (__nv_fp8_storage_t)(sgn | (e5 ? 0x7cu : 0x7fu));
	}
	unsigned lo = 0, hi = maxc; /* value(lo) <= a < value(hi) */
	while (hi - lo > 1) {
		unsigned mid = (lo + hi) / 2;
		if (emu_fp8_value(mid, e5) <= a)
			lo = mid;
		else
			hi = mid;
	}
	double dl = a - emu_fp8_value(lo, e5), dh = emu_fp8_value(hi, e5) - a;
	unsigned c = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
	return (__nv_fp8_storage_t)(sgn | c);
}
