/* fp8_simd.h - vector kernels of the TACO block codec (fp8_avx2.c,
 * fp8_avx512.c) and their run-time dispatch (fp8.c).
 *
 * The scalar block steps in fp8.c are the reference: every kernel writes the
 * same codes, scale and exponent and decodes the same floats, bit for bit.
 * Each element goes through the same IEEE operations in the same order
 * (separate mul and add intrinsics, no FMA); the Walsh-Hadamard butterflies
 * run stage by stage as in hadamard.c (the order inside a stage is free);
 * the sum of squares keeps the pairwise tree; only maxima, exact in any
 * order, are regrouped. The FP8 and 16-bit conversions are the integer
 * formulas of fp8_impl.h per lane; widening uses no denormal arithmetic,
 * so DAZ/FTZ settings cannot change a result the scalar code would not. */
#ifndef IBP_FP8_SIMD_H
#define IBP_FP8_SIMD_H

#include <stdint.h>

typedef enum fp8_simd_impl {
	FP8_SIMD_AUTO = 0,
	FP8_SIMD_SCALAR = 1, /* the reference, any CPU */
	FP8_SIMD_AVX2 = 2,   /* x86-64 AVX2 */
	FP8_SIMD_AVX512 = 3  /* x86-64 AVX-512 F, BW, VL, VBMI (the flags *_avx512.c are built with) */
} fp8_simd_impl_t;

/* What every block of one call shares. */
typedef struct fp8_blk {
	uint32_t dt;    /* ibp_dtype_t of the tensor: F32, BF16 or F16 */
	uint32_t fmt;   /* FP8_E4M3 or FP8_E5M2 */
	uint32_t log2b; /* 4..12 */
	uint32_t flags; /* TACO_FLAG_HADAMARD | TACO_FLAG_ADAPTIVE */
} fp8_blk_t;

/* Scratch buffers (x, t, z) are 64-byte aligned. */
typedef struct fp8_kern {
	/* Encodes one block: src holds its len (1..B) elements, x and t are B
	 * floats of scratch. Writes q[0, B), *s and *k and returns 1; returns 0
	 * for a block the scalar code turns into a NaN block (non-finite input
	 * or an overflow in the rotation), q then undefined. */
	int (*enc)(const fp8_blk_t *p, const uint8_t *src, uint32_t len, float *x, float *t, uint8_t *q, float *s,
		   int *k);
	/* Decodes one checked block with a finite scale s (block_ok: no NaN or
	 * Inf codes) into dst's len elements; z is B floats of scratch. */
	void (*dec)(const fp8_blk_t *p, const uint8_t *q, float s, int k, uint32_t len, uint8_t *dst, float *z);
	/* 1 when none of q[0, n) is a NaN or Inf code of fmt (n a multiple of 16). */
	int (*codes_finite)(const uint8_t *q, uint32_t n, uint32_t fmt);
} fp8_kern_t;

/* The kernels for this call, or NULL for the scalar reference. AUTO picks
 * the best this CPU runs; the environment can lower it (read per call):
 * IBP_FORCE_PORTABLE=1 gives scalar, IBP_FP8_SIMD=scalar|avx2|avx512 caps
 * the choice (benchmarks, which see only the public API). */
const fp8_kern_t *ibpi_fp8_kern(void);

/* Chooses the implementation for the whole process (tests); returns 0 when
 * this build or CPU cannot run it. AUTO restores the default. Not
 * thread-safe against codec calls in flight. */
int ibpi_fp8_simd_set(fp8_simd_impl_t impl);

#if defined(__x86_64__) && defined(__GNUC__)
#define FP8_HAVE_SIMD 1
extern const fp8_kern_t ibpi_fp8_kern_avx2, ibpi_fp8_kern_avx512;
#endif

#endif /* IBP_FP8_SIMD_H */
