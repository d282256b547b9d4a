/* bag.c - embedding bags pooled straight from a compressed store (ibp/bag.h).
 *
 * One pass per bag: the bag's first row goes into its output row (float32)
 * or is widened into a float32 accumulator (16-bit dtypes), and every later
 * row is folded into the accumulator from per-thread scratch (a chunk of
 * decoded rows, about 64 KiB, or one row), which stays in cache. Nothing
 * the size of [indices, dim] is ever written.
 *
 * The reduction reproduces PyTorch's CPU embedding_bag bit for bit on
 * float32: the accumulator starts at +0 (so a lone -0 row sums to +0, as
 * 0 + (-0) does), weighted rows go through fmaf (or, with
 * IBP_BAG_UNFUSED_WEIGHTS, a product and a sum rounded apart), mean divides
 * by the count.
 * The float kernels are compiled twice, portable and AVX2+FMA (picked at
 * run time; IBP_FORCE_PORTABLE=1 forces the portable ones), from one body,
 * so both give the same bits: fmaf is exact either way (libm's or the
 * instruction), and C11 mode forbids contracting the other operations.
 *
 * Rows: the IBP rows of a store are decoded in chunks of consecutive id
 * positions by the store's own gather (store/store_rows.h: its row map and
 * look-ahead, IBP_GATHER_PREFETCH), across bag boundaries, and pooled from
 * the chunk; see chunk_row. Exp rows decode one by one where they are
 * pooled (xr_row). Block codecs (exp, fp8) decode a whole block per miss
 * into a slot; the rows of plain arrays one by one.
 *
 * Threads: bags are cut into contiguous ranges of about the same number of
 * ids plus bags (an empty bag still costs a row of zeros), PARTS_PER_THREAD
 * per thread, which the tasks run on the store's worker pool
 * (ibpi_store_run, store/pool.h: no thread is started per call) claim in
 * order from a shared cursor: a thread that gets less of a core (a shared
 * machine) takes fewer ranges instead of holding up the call.
 *
 * The same engine pools the rows of a host-fallback device store
 * (ibpi_bag_pool_rows, store/bag_rows.h) for ibp_store_embedding_bag_cuda:
 * rows from plain arrays instead of a container, on the calling thread,
 * and with the device's per-bag status (a failed bag is zeros) instead of
 * a failed call.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/bag.h"
#include "ibp/alloc.h"
#include "ibp/container.h"
#include "util/error.h"
#include "util/cpu.h"
#include "util/ids.h"
#include "bitpack/codec_internal.h"
#include "fp8/fp8_impl.h"
#include "store/store_rows.h"
#include "store/pool.h"
#include "store/bag_rows.h"
#include "exp/exp_rows.h"
#include "io/container_internal.h"

typedef unsigned long long ull;

#define NO_BLOCK UINT64_MAX
#define SCRATCH_MAX (1ull << 30) /* all threads' scratch together, beyond one thread's */
#define PARTS_PER_THREAD 4
#define MAX_TASKS 256 /* the store's threads at most */

/* ---- float32 kernels: one body, two compilations ---------------------- */

#define BAG_BODY static inline __attribute__((always_inline))

BAG_BODY void k_add(float *restrict a, const float *restrict r, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = a[i] + r[i];
}

BAG_BODY void k_fma(float *restrict a, const float *restrict r, float w, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = __builtin_fmaf(w, r[i], a[i]);
}

BAG_BODY void k_max(float *restrict a, const float *restrict r, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = r[i] > a[i] ? r[i] : a[i];
}

/* a = 0 + r: the first row of a sum (turns -0 into +0, as PyTorch's +0 start).
 * a may be r (float32: the row was decoded into the accumulator). */
BAG_BODY void k_first(float *a, const float *r, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = 0.0f + r[i];
}

/* a = fma(w, r, 0): the first row of a weighted sum (a may be r) */
BAG_BODY void k_first_w(float *a, const float *r, float w, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = __builtin_fmaf(w, r[i], 0.0f);
}

/* a = a + w * r, rounded twice (PyTorch's kernel for bags with padding_idx) */
BAG_BODY void k_axpy(float *restrict a, const float *restrict r, float w, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = a[i] + w * r[i];
}

/* a = 0 + w * r: its first row (a may be r) */
BAG_BODY void k_first_axpy(float *a, const float *r, float w, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = 0.0f + w * r[i];
}

BAG_BODY void k_div(float *a, float n, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = a[i] / n;
}

/* 16-bit rows widened to float32: exact for every value (NaNs quieted,
 * payload kept, as fp8i_f16_to_f32 and the F16C instruction both do) */
BAG_BODY void k_widen_bf16(float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++) {
		uint32_t u = (uint32_t)h[i] << 16;
		memcpy(&a[i], &u, 4);
	}
}

static void widen_f16_portable(float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = fp8i_f16_to_f32(h[i]);
}

static inline uint16_t narrow1(ibp_dtype_t dt, float v)
{
	return dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(v) : fp8i_f32_to_f16(v);
}

static inline float widen1(ibp_dtype_t dt, uint16_t h)
{
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

/* 16-bit rows (dt float16 or bfloat16; a constant where inlined). The
 * float32 accumulator back to dt: the bag's sum rounded, or (mean) the sum
 * rounded, widened and divided by n, rounded again, as PyTorch does. */
BAG_BODY void k_narrow16(ibp_dtype_t dt, uint16_t *restrict h, const float *restrict a, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		h[i] = narrow1(dt, a[i]);
}

BAG_BODY void k_mean16(ibp_dtype_t dt, uint16_t *restrict h, const float *restrict a, float n, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		h[i] = narrow1(dt, widen1(dt, narrow1(dt, a[i])) / n);
}

/* a = a + widen(h), and the first row a = 0 + widen(h): the widen and the
 * add in one pass instead of through a widened copy of the row. */
BAG_BODY void k_add16(ibp_dtype_t dt, float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = a[i] + widen1(dt, h[i]);
}

BAG_BODY void k_first16(ibp_dtype_t dt, float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++)
		a[i] = 0.0f + widen1(dt, h[i]);
}

/* a = max(a, widen(h)) as k_max: a NaN row value leaves a as it is */
BAG_BODY void k_max16(ibp_dtype_t dt, float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	for (uint64_t i = 0; i < d; i++) {
		const float w = widen1(dt, h[i]);
		a[i] = w > a[i] ? w : a[i];
	}
}

static void max_f16_portable(float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	k_max16(IBP_DTYPE_F16, a, h, d);
}

static void narrow_f16_portable(uint16_t *restrict h, const float *restrict a, uint64_t d)
{
	k_narrow16(IBP_DTYPE_F16, h, a, d);
}

static void mean_f16_portable(uint16_t *restrict h, const float *restrict a, float n, uint64_t d)
{
	k_mean16(IBP_DTYPE_F16, h, a, n, d);
}

static void add_f16_portable(float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	k_add16(IBP_DTYPE_F16, a, h, d);
}

static void first_f16_portable(float *restrict a, const uint16_t *restrict h, uint64_t d)
{
	k_first16(IBP_DTYPE_F16, a, h, d);
}

static void narrow_bf16_portable(uint16_t *restrict h, const float *restrict a, uint64_t d)
{
	k_narrow16(IBP_DTYPE_BF16, h, a, d);
}

static void mean_bf16_portable(uint16_t *restrict h, const float *restrict a, float n, uint64_t d)
{
	k_mean16(IBP_DTYPE_BF16, h, a, n, d);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* bfloat16 of 8 floats, as fp8i_f32_to_bf16: rounded to nearest even, a
 * NaN quieted with its top payload bits (all in 32-bit lanes, then
 * packed; the values fit 16 bits, so the unsigned pack never saturates). */
__attribute__((target("avx2"))) static inline __m128i bf16_of8(__m256 f)
{
	const __m256i u = _mm256_castps_si256(f);
	const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
					       _mm256_set1_epi32(0x7f800000));
	const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
	const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
	const __m256i v = _mm256_blendv_epi8(r, q, nan);
	const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
	return _mm256_castsi256_si128(p);
}

__attribute__((target("avx2"))) static void narrow_bf16_avx2(uint16_t *restrict h, const float *restrict a,
							      uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(h + i), bf16_of8(_mm256_loadu_ps(a + i)));
	narrow_bf16_portable(h + i, a + i, d - i);
}

__attribute__((target("avx2"))) static void mean_bf16_avx2(uint16_t *restrict h, const float *restrict a, float n,
							    uint64_t d)
{
	const __m256 vn = _mm256_set1_ps(n);
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		const __m128i b = bf16_of8(_mm256_loadu_ps(a + i));
		const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
		_mm_storeu_si128((__m128i *)(void *)(h + i), bf16_of8(_mm256_div_ps(s, vn)));
	}
	mean_bf16_portable(h + i, a + i, n, d - i);
}

/* F16C rounds to nearest even, gives infinities from 65520 up and
 * subnormals below 2^-14, and quiets a NaN keeping its payload's top bits:
 * the bits of fp8i_f32_to_f16 (test_bag: float16_sums_round_exactly). */
#define F16C_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx2,f16c"))) static void narrow_f16_f16c(uint16_t *restrict h, const float *restrict a,
								  uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(a + i), F16C_RNE));
	narrow_f16_portable(h + i, a + i, d - i);
}

__attribute__((target("avx2,f16c"))) static void mean_f16_f16c(uint16_t *restrict h, const float *restrict a,
								float n, uint64_t d)
{
	const __m256 vn = _mm256_set1_ps(n);
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		const __m256 s = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(a + i), F16C_RNE));
		_mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(_mm256_div_ps(s, vn), F16C_RNE));
	}
	mean_f16_portable(h + i, a + i, n, d - i);
}

__attribute__((target("avx2,f16c"))) static void add_f16_f16c(float *restrict a, const uint16_t *restrict h,
							       uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		const __m256 r = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
		_mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), r));
	}
	add_f16_portable(a + i, h + i, d - i);
}

__attribute__((target("avx2,f16c"))) static void first_f16_f16c(float *restrict a, const uint16_t *restrict h,
								 uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		const __m256 r = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
		_mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_setzero_ps(), r));
	}
	first_f16_portable(a + i, h + i, d - i);
}

/* maxps(r, a) is r > a ? r : a, k_max's choice, NaNs included */
__attribute__((target("avx2,f16c"))) static void max_f16_f16c(float *restrict a, const uint16_t *restrict h,
							       uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8) {
		const __m256 r = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
		_mm256_storeu_ps(a + i, _mm256_max_ps(r, _mm256_loadu_ps(a + i)));
	}
	max_f16_portable(a + i, h + i, d - i);
}

/* F16C: 8 halves per instruction, the same bits as the portable loop (a
 * test widens all 65,536 values both ways: test_bag) */
__attribute__((target("avx2,f16c"))) static void widen_f16_f16c(float *restrict a, const uint16_t *restrict h,
								 uint64_t d)
{
	uint64_t i = 0;
	for (; i + 8 <= d; i += 8)
		_mm256_storeu_ps(a + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
	for (; i < d; i++)
		a[i] = fp8i_f16_to_f32(h[i]);
}
#endif

typedef struct bag_kernels {
	void (*add)(float *restrict, const float *restrict, uint64_t);
	void (*fma)(float *restrict, const float *restrict, float, uint64_t);
	void (*max)(float *restrict, const float *restrict, uint64_t);
	void (*first)(float *, const float *, uint64_t);
	void (*first_w)(float *, const float *, float, uint64_t);
	void (*axpy)(float *restrict, const float *restrict, float, uint64_t);
	void (*first_axpy)(float *, const float *, float, uint64_t);
	void (*div)(float *, float, uint64_t);
	void (*widen_bf16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*widen_f16)(float *restrict, const uint16_t *restrict, uint64_t);
	/* 16-bit rows: the accumulator's row out, and rows added as they are */
	void (*narrow_f16)(uint16_t *restrict, const float *restrict, uint64_t);
	void (*mean_f16)(uint16_t *restrict, const float *restrict, float, uint64_t);
	void (*add_f16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*first_f16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*max_f16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*narrow_bf16)(uint16_t *restrict, const float *restrict, uint64_t);
	void (*mean_bf16)(uint16_t *restrict, const float *restrict, float, uint64_t);
	void (*add_bf16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*first_bf16)(float *restrict, const uint16_t *restrict, uint64_t);
	void (*max_bf16)(float *restrict, const uint16_t *restrict, uint64_t);
} bag_kernels_t;

#define BAG_VARIANT(SFX, ATTR, WF16, F16, BF16)                                                                      \
	ATTR static void add_##SFX(float *restrict a, const float *restrict r, uint64_t d) { k_add(a, r, d); } \
	ATTR static void fma_##SFX(float *restrict a, const float *restrict r, float w, uint64_t d)          \
	{                                                                                               \
		k_fma(a, r, w, d);                                                                      \
	}                                                                                               \
	ATTR static void max_##SFX(float *restrict a, const float *restrict r, uint64_t d) { k_max(a, r, d); } \
	ATTR static void first_##SFX(float *a, const float *r, uint64_t d)                                \
	{                                                                                               \
		k_first(a, r, d);                                                                       \
	}                                                                                               \
	ATTR static void first_w_##SFX(float *a, const float *r, float w, uint64_t d)                     \
	{                                                                                               \
		k_first_w(a, r, w, d);                                                                  \
	}                                                                                               \
	ATTR static void axpy_##SFX(float *restrict a, const float *restrict r, float w, uint64_t d)        \
	{                                                                                               \
		k_axpy(a, r, w, d);                                                                     \
	}                                                                                               \
	ATTR static void first_axpy_##SFX(float *a, const float *r, float w, uint64_t d)                  \
	{                                                                                               \
		k_first_axpy(a, r, w, d);                                                               \
	}                                                                                               \
	ATTR static void div_##SFX(float *a, float n, uint64_t d) { k_div(a, n, d); }                     \
	ATTR static void widen_bf16_##SFX(float *restrict a, const uint16_t *restrict h, uint64_t d)        \
	{                                                                                               \
		k_widen_bf16(a, h, d);                                                                  \
	}                                                                                               \
	ATTR static void add_bf16_##SFX(float *restrict a, const uint16_t *restrict h, uint64_t d)          \
	{                                                                                               \
		k_add16(IBP_DTYPE_BF16, a, h, d);                                                       \
	}                                                                                               \
	ATTR static void first_bf16_##SFX(float *restrict a, const uint16_t *restrict h, uint64_t d)        \
	{                                                                                               \
		k_first16(IBP_DTYPE_BF16, a, h, d);                                                     \
	}                                                                                               \
	ATTR static void max_bf16_##SFX(float *restrict a, const uint16_t *restrict h, uint64_t d)          \
	{                                                                                               \
		k_max16(IBP_DTYPE_BF16, a, h, d);                                                       \
	}                                                                                               \
	static const bag_kernels_t kernels_##SFX = { add_##SFX,   fma_##SFX,     max_##SFX,  first_##SFX,   \
						     first_w_##SFX, axpy_##SFX, first_axpy_##SFX, div_##SFX, \
						     widen_bf16_##SFX, WF16, F16, BF16, add_bf16_##SFX,    \
						     first_bf16_##SFX, max_bf16_##SFX };

#define F16_PORTABLE narrow_f16_portable, mean_f16_portable, add_f16_portable, first_f16_portable, max_f16_portable
#define BF16_PORTABLE narrow_bf16_portable, mean_bf16_portable
BAG_VARIANT(portable, , widen_f16_portable, F16_PORTABLE, BF16_PORTABLE)
#if defined(__x86_64__) && defined(__GNUC__)
#define BF16_AVX2 narrow_bf16_avx2, mean_bf16_avx2
BAG_VARIANT(avx2, __attribute__((target("avx2,fma"))), widen_f16_portable, F16_PORTABLE, BF16_AVX2)
#define F16_F16C narrow_f16_f16c, mean_f16_f16c, add_f16_f16c, first_f16_f16c, max_f16_f16c
BAG_VARIANT(avx2f16c, __attribute__((target("avx2,fma,f16c"))), widen_f16_f16c, F16_F16C, BF16_AVX2)
#endif

static const bag_kernels_t *pick_kernels(void)
{
	const char *e = getenv("IBP_FORCE_PORTABLE");
	if (e && *e && strcmp(e, "0") != 0)
		return &kernels_portable;
#if defined(__x86_64__) && defined(__GNUC__)
	if (ibpi_cpu()->avx2 && __builtin_cpu_supports("fma"))
		return ibpi_cpu()->f16c ? &kernels_avx2f16c : &kernels_avx2; /* clang has no "f16c" in __builtin_cpu_supports */
#endif
	return &kernels_portable;
}

/* ---- the job ------------------------------------------------------------ */

typedef struct bag_tls {
	uint8_t *row;  /* R bytes: a decoded row */
	float *accf;   /* dim floats: accumulator (16-bit dtypes) */
	float *rowf;   /* dim floats: a row widened (16-bit dtypes) */
	uint8_t *slot; /* exp/fp8: one block of rows */
	uint64_t block; /* block held in slot, or NO_BLOCK */
	uint8_t *chunk; /* IBP rows of a store: the rows of positions c0 .. c1-1 (cap at most) */
	int64_t *cids;  /* int32 ids widened for the chunk's gather */
	uint64_t c0, c1, cap;
	ibpi_xr_ahead_t xa; /* exp rows: the part's rows ahead (reset per part) */
} __attribute__((aligned(64))) bag_tls_t; /* a line of its own: written per row or batch by its thread alone */

typedef struct bag_job {
	const ibp_container_t *c; /* or NULL: rows from the arrays of `rows` */
	const ibp_bag_rows_t *rows;
	uint64_t nrows;
	const ibp_codec_t *codec;
	const bag_kernels_t *k;
	int packed, block_codec;
	const ibp_store_t *store; /* IBP rows of a store: decoded in chunks by its gather; else NULL */
	/* exp rows (codec 4): decoded one by one straight where they are pooled */
	const ibpi_exprows_t *xr;
	const uint8_t *xpay, *xovf; /* the slots, the overflow area */
	uint64_t xovf_len;
	int xisa;
	uint64_t xahead; /* exp rows: burst size of the look-ahead (the store's), 0 = none */
	int xsum;        /* exp rows of 64k elements, sum or mean without weights: pool_bag_xsum */
	ibp_dtype_t dt;
	uint64_t R, dim, block_rows;
	ibp_bag_mode_t mode;
	int unfused; /* IBP_BAG_UNFUSED_WEIGHTS */
	const int32_t *ids32;
	const int64_t *ids64;
	const int64_t *offsets;
	const float *weights;
	int64_t padding;
	uint8_t *out;
	int per_bag;      /* the device's contract: a failed bag is zeros and a status, not a failed call */
	int32_t *status;  /* per_bag: NULL or n_bags statuses */
	uint64_t nfailed; /* bags failed (with status; atomic) */
	uint64_t part[MAX_TASKS + 1]; /* bag ranges part[p] .. part[p+1] */
	uint64_t nparts, next;        /* ranges; the next one to claim (atomic) */
	bag_tls_t tls[MAX_TASKS];
	pthread_mutex_t mu; /* guards the first failure */
	int failed;
	ibp_status_t err;
	uint64_t err_bag;
	char err_msg[256];
} bag_job_t;

static inline int64_t id_at(const bag_job_t *j, uint64_t k)
{
	return j->ids64 ? j->ids64[k] : (int64_t)j->ids32[k];
}

/* Exp rows: the row at position i decoded into dst (the bag's output row
 * for its first float32 row, else the thread's row), the rows ahead inside
 * the part prefetched in bursts as the gather does (ibpi_xr_ahead; a row
 * decodes in about 15-25 ns, so the chunk round trip of IBP rows, decode
 * 64 KiB then pool from L2, is not needed). */
static const uint8_t *xr_row(const bag_job_t *j, bag_tls_t *t, uint64_t i, uint64_t end, uint8_t *dst,
			     ibp_status_t *st)
{
	if (j->xahead)
		ibpi_xr_ahead(&t->xa, j->xahead, j->xr->slot, j->xpay, j->ids64, j->ids32, i, end);
	const uint64_t r = (uint64_t)id_at(j, i);
	*st = ibpi_exprows_decode_slot(j->xr, j->xisa, j->xpay + r * j->xr->slot, j->xovf, j->xovf_len, dst);
	return *st == IBP_OK ? dst : NULL;
}

/* Rows per chunk: about 64 KiB of them (the chunk stays in L2 while
 * pooled; several of the gather's batches per chunk), 8 to 512. */
static uint64_t chunk_rows(uint64_t R)
{
	const uint64_t n = (64u << 10) / R;
	return n < 8 ? 8 : n > 512 ? 512 : n;
}

/* The IBP rows of a store come in chunks: the rows of up to t->cap
 * consecutive id positions decoded together into the thread's chunk by the
 * store's own gather (ibpi_store_decode_rows: its row map and look-ahead
 * pipeline), then pooled from there. Interleaving one row's decode with
 * its pooling, with a look-ahead of its own, ran at 0.55x of the gather of
 * the same ids (2026-11-28, 8M x 64 f32: 27 against 15 ms); in chunks it
 * runs at the gather's speed. A chunk never crosses the end of the part
 * (`end`). Padding ids are decoded too (ids were checked: valid rows) and
 * skipped by the pooling. */
static const uint8_t *chunk_row(const bag_job_t *j, bag_tls_t *t, uint64_t i, uint64_t end, ibp_status_t *st)
{
	if (i < t->c0 || i >= t->c1) {
		const uint64_t m = end - i < t->cap ? end - i : t->cap;
		const int64_t *ids = j->ids64 ? j->ids64 + i : t->cids;
		if (!j->ids64)
			for (uint64_t k = 0; k < m; k++)
				t->cids[k] = j->ids32[i + k];
		uint64_t got = ibpi_store_decode_rows(j->store, ids, m, t->chunk, st);
		t->c0 = i;
		t->c1 = i + got;
		if (got == 0)
			return NULL; /* row i failed; its detail is in this thread's slot */
	}
	*st = IBP_OK;
	return t->chunk + (i - t->c0) * j->R;
}

/* Row `row` decoded: into `dst` (IBP rows of plain arrays) or in the
 * thread's block slot (exp, fp8); NULL on failure with *st set (the detail
 * is in this thread's slot). IBP rows of a store come from chunk_row. */
static const uint8_t *row_at(const bag_job_t *j, bag_tls_t *t, uint64_t row, uint8_t *dst, ibp_status_t *st)
{
	if (j->block_codec) {
		uint64_t blk = row / j->block_rows;
		if (t->block != blk) {
			t->block = NO_BLOCK; /* a failed decode leaves nothing cached */
			*st = ibp_container_decode_block(j->c, blk, t->slot, 1);
			if (*st != IBP_OK)
				return NULL;
			t->block = blk;
		}
		return t->slot + (row - blk * j->block_rows) * j->R;
	}
	/* plain arrays (a host-fallback device store): packed rows fill their
	 * extent (FORMAT.md §1.3, as in the gather), inplace rows may end early */
	static const uint8_t none[1];
	const ibp_bag_rows_t *a = j->rows;
	const uint64_t o = a->offsets ? a->offsets[row] : row * j->R;
	const uint64_t len = a->offsets ? a->offsets[row + 1] - o : j->R;
	uint64_t used = 0;
	*st = ibpi_decode_row_ext(j->codec, a->payload ? a->payload + o : none, len, a->flags[row],
				 a->clusters ? a->clusters[row] : 0, dst, &used);
	if (*st == IBP_OK && j->packed && used != len)
		*st = ibpi_fail(IBP_ERR_CORRUPT, "row %llu: encoded row is %llu bytes, its extent %llu", (ull)row,
			       (ull)used, (ull)len);
	return *st == IBP_OK ? dst : NULL;
}

static void widen(const bag_job_t *j, const uint8_t *src, float *dst)
{
	const uint16_t *h = (const uint16_t *)(const void *)src;
	if (j->dt == IBP_DTYPE_BF16)
		j->k->widen_bf16(dst, h, j->dim);
	else
		j->k->widen_f16(dst, h, j->dim);
}

/* Bag b's output from its accumulator of cnt rows: zeros for none, the
 * mean's division, 16-bit rows narrowed. */
static ibp_status_t finish_bag(const bag_job_t *j, uint8_t *o, float *acc, uint64_t cnt)
{
	const bag_kernels_t *k = j->k;
	if (cnt == 0) {
		memset(o, 0, (size_t)j->R);
		return IBP_OK;
	}
	if (j->dt == IBP_DTYPE_F32) {
		if (j->mode == IBP_BAG_MEAN)
			k->div(acc, (float)cnt, j->dim);
		return IBP_OK;
	}
	uint16_t *h = (uint16_t *)o;
	const int f16 = j->dt == IBP_DTYPE_F16;
	if (j->mode == IBP_BAG_MEAN) /* PyTorch rounds the sum, then the quotient */
		(f16 ? k->mean_f16 : k->mean_bf16)(h, acc, (float)cnt, j->dim);
	else
		(f16 ? k->narrow_f16 : k->narrow_bf16)(h, acc, j->dim);
	return IBP_OK;
}

#define XSUM_ROWS 16u

/* Exp rows of whole 64-element words, sum or mean without weights
 * (j->xsum): the bag's rows located and looked ahead as xr_row does, then
 * summed up to 16 at a time by ibpi_exprows_sum64, with no decoded row
 * written or read back (from cache, 34 ns a float16 row decoded then added
 * against 16-24 summed so on a Zen 3 VM). A row it does not take goes
 * through the general decoder and the add kernels, in its place in the
 * order: the sums are those of pool_bag, bit for bit. */
static ibp_status_t pool_bag_xsum(const bag_job_t *j, bag_tls_t *t, uint64_t end, uint64_t b)
{
	const bag_kernels_t *k = j->k;
	const int f32 = j->dt == IBP_DTYPE_F32;
	uint8_t *o = j->out + b * j->R;
	float *acc = f32 ? (float *)o : t->accf;
	const uint8_t *src[XSUM_ROWS];
	uint64_t len[XSUM_ROWS], cnt = 0;
	unsigned m = 0;
	const uint64_t i1 = (uint64_t)j->offsets[b + 1];
	for (uint64_t i = (uint64_t)j->offsets[b]; i < i1 || m > 0;) {
		if (i < i1 && m < XSUM_ROWS) {
			const int64_t id = id_at(j, i);
			if (j->per_bag && (id < 0 || (uint64_t)id >= j->nrows))
				return IBP_ERR_OUT_OF_RANGE;
			if (id != j->padding) {
				if (j->xahead)
					ibpi_xr_ahead(&t->xa, j->xahead, j->xr->slot, j->xpay, j->ids64, j->ids32, i, end);
				/* a row with its escapes in its slot is summed where it is;
				 * one with them in the overflow area (length 0: the kernel
				 * does not take it) is decoded below */
				src[m] = j->xpay + (uint64_t)id * j->xr->slot;
				const uint64_t ne = ibpi_exprows_slot_nesc(j->xr, j->xisa, src[m]);
				len[m] = ne <= j->xr->K ? j->xr->fixed + ne : 0;
				m++;
			}
			i++;
			continue;
		}
		/* m rows gathered (16, or the bag's last): summed */
		for (unsigned d = 0; d < m;) {
			const uint64_t got = ibpi_exprows_sum64(j->xr, j->xisa, src + d, len + d, m - d, acc, cnt == 0);
			cnt += got;
			d += (unsigned)got;
			if (d == m)
				break;
			/* the row the kernel did not take: its error, or its sum */
			ibp_status_t st = ibpi_exprows_decode_slot(j->xr, j->xisa, src[d], j->xovf, j->xovf_len, t->row);
			if (st != IBP_OK)
				return st;
			if (f32) {
				(cnt ? k->add : k->first)(acc, (const float *)(const void *)t->row, j->dim);
			} else {
				const int f16 = j->dt == IBP_DTYPE_F16;
				(cnt ? (f16 ? k->add_f16 : k->add_bf16) : (f16 ? k->first_f16 : k->first_bf16))(
					acc, (const uint16_t *)(const void *)t->row, j->dim);
			}
			cnt++;
			d++;
		}
		m = 0;
	}
	return finish_bag(j, o, acc, cnt);
}

/* Pools bag b; returns IBP_OK or the failing status. */
static ibp_status_t pool_bag(const bag_job_t *j, bag_tls_t *t, uint64_t end, uint64_t b)
{
	const bag_kernels_t *k = j->k;
	const int f32 = j->dt == IBP_DTYPE_F32;
	uint8_t *o = j->out + b * j->R;
	float *acc = f32 ? (float *)o : t->accf;
	uint64_t cnt = 0;
	ibp_status_t st = IBP_OK;
	for (uint64_t i = (uint64_t)j->offsets[b]; i < (uint64_t)j->offsets[b + 1]; i++) {
		int64_t id = id_at(j, i);
		/* with per-bag status ids are checked here, as on the device */
		if (j->per_bag && (id < 0 || (uint64_t)id >= j->nrows))
			return IBP_ERR_OUT_OF_RANGE;
		if (id == j->padding)
			continue;
		const float *r;
		if (f32) {
			/* a plain-array row is decoded straight into the bag's output
			 * row when it is the first; chunk and block rows are read where
			 * they are (the first-row kernels take r == acc or not) */
			const uint8_t *p = j->xr ? xr_row(j, t, i, end, cnt ? t->row : o, &st)
					   : j->store ? chunk_row(j, t, i, end, &st)
						      : row_at(j, t, (uint64_t)id, cnt ? t->row : o, &st);
			if (!p)
				return st;
			r = (const float *)p;
		} else {
			const uint8_t *p = j->xr ? xr_row(j, t, i, end, t->row, &st)
					   : j->store ? chunk_row(j, t, i, end, &st)
						      : row_at(j, t, (uint64_t)id, t->row, &st);
			if (!p)
				return st;
			if (j->mode != IBP_BAG_MAX && !j->weights) {
				/* a plain sum: widened and added in one pass */
				const uint16_t *h = (const uint16_t *)(const void *)p;
				const int f16 = j->dt == IBP_DTYPE_F16;
				if (cnt == 0)
					(f16 ? k->first_f16 : k->first_bf16)(acc, h, j->dim);
				else
					(f16 ? k->add_f16 : k->add_bf16)(acc, h, j->dim);
				cnt++;
				continue;
			}
			if (j->mode == IBP_BAG_MAX) {
				/* widened into the accumulator (the first row) or folded in as widened */
				const uint16_t *h = (const uint16_t *)(const void *)p;
				if (cnt == 0)
					widen(j, p, acc);
				else
					(j->dt == IBP_DTYPE_F16 ? k->max_f16 : k->max_bf16)(acc, h, j->dim);
				cnt++;
				continue;
			}
			widen(j, p, t->rowf);
			r = t->rowf;
		}
		if (cnt == 0) {
			if (j->mode == IBP_BAG_MAX) {
				if (r != acc)
					memcpy(acc, r, (size_t)j->dim * sizeof(float));
			} else if (j->weights && j->unfused)
				k->first_axpy(acc, r, j->weights[i], j->dim);
			else if (j->weights)
				k->first_w(acc, r, j->weights[i], j->dim);
			else
				k->first(acc, r, j->dim);
		} else if (j->mode == IBP_BAG_MAX)
			k->max(acc, r, j->dim);
		else if (j->weights && j->unfused)
			k->axpy(acc, r, j->weights[i], j->dim);
		else if (j->weights)
			k->fma(acc, r, j->weights[i], j->dim);
		else
			k->add(acc, r, j->dim);
		cnt++;
	}
	return finish_bag(j, o, acc, cnt);
}

static void run_part(void *ctx, int tid)
{
	bag_job_t *j = ctx;
	bag_tls_t *t = &j->tls[tid];
	for (;;) {
		uint64_t p = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (p >= j->nparts)
			return;
		const uint64_t end = (uint64_t)j->offsets[j->part[p + 1]]; /* the part's last id position + 1 */
		t->xa = (ibpi_xr_ahead_t){ 0, 0 };
		for (uint64_t b = j->part[p]; b < j->part[p + 1]; b++) {
			if (__atomic_load_n(&j->failed, __ATOMIC_RELAXED))
				return;
			ibp_status_t st = j->xsum ? pool_bag_xsum(j, t, end, b) : pool_bag(j, t, end, b);
			if (j->per_bag) {
				/* the device's contract: the bag is zeros, the call goes on */
				if (st != IBP_OK && st != IBP_ERR_OUT_OF_RANGE)
					st = IBP_ERR_CORRUPT;
				if (st != IBP_OK) {
					memset(j->out + b * j->R, 0, (size_t)j->R);
					__atomic_fetch_add(&j->nfailed, 1, __ATOMIC_RELAXED);
				}
				if (j->status)
					j->status[b] = (int32_t)st;
				continue;
			}
			if (st == IBP_OK)
				continue;
			pthread_mutex_lock(&j->mu);
			if (!j->failed || b < j->err_bag) {
				j->err = st;
				j->err_bag = b;
				snprintf(j->err_msg, sizeof(j->err_msg), "%s", ibp_last_error());
			}
			__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&j->mu);
			return;
		}
	}
}

/* Cuts bags [0, n_bags) into t ranges (t <= MAX_TASKS) of about equal cost, cost(b) =
 * ids before bag b + b (so runs of empty bags are shared out too). */
static void partition(bag_job_t *j, uint64_t n_bags, int t)
{
	const int64_t *off = j->offsets;
	uint64_t total = (uint64_t)(off[n_bags] - off[0]) + n_bags;
	j->part[0] = 0;
	for (int p = 1; p < t; p++) {
		uint64_t target = total / (uint64_t)t * (uint64_t)p + total % (uint64_t)t * (uint64_t)p / (uint64_t)t;
		uint64_t lo = j->part[p - 1], hi = n_bags; /* first b with cost(b) >= target */
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;
			if ((uint64_t)(off[mid] - off[0]) + mid < target)
				lo = mid + 1;
			else
				hi = mid;
		}
		j->part[p] = lo;
	}
	j->part[t] = n_bags;
}

static uint64_t align64(uint64_t n)
{
	return (n + 63) & ~(uint64_t)63;
}

/* Checks shared by both entry points; ids only when check_ids. */
static ibp_status_t check_args(const char *fn, ibp_bag_mode_t mode, unsigned flags, const void *ids,
			       ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets, uint64_t n_bags,
			       const float *weights, int64_t padding_idx, const void *out, ibp_dtype_t dt,
			       uint64_t nrows, const char *name)
{
	if (mode != IBP_BAG_SUM && mode != IBP_BAG_MEAN && mode != IBP_BAG_MAX)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: mode %d is not sum (0), mean (1) or max (2)", fn, (int)mode);
	if (id_dtype != IBP_DTYPE_I32 && id_dtype != IBP_DTYPE_I64)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: ids must be int32 or int64, not dtype %d", fn, (int)id_dtype);
	if (!offsets)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL offsets", fn);
	if (n_ids > 0 && !ids)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL ids for %llu ids", fn, (ull)n_ids);
	if (n_bags > 0 && !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL output for %llu bags", fn, (ull)n_bags);
	if (flags & ~(unsigned)IBP_BAG_UNFUSED_WEIGHTS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, flags);
	if (weights && mode != IBP_BAG_SUM)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: per-id weights need mode sum", fn);
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_F16 && dt != IBP_DTYPE_BF16)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: %s: rows of dtype %s cannot be pooled (float32, float16 "
				"or bfloat16 only)", fn, name, ibp_dtype_name(dt));
	if (padding_idx < -1 || (padding_idx >= 0 && (uint64_t)padding_idx >= nrows))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: padding_idx %lld is not -1 or a row below %llu", fn,
				(long long)padding_idx, (ull)nrows);
	for (uint64_t b = 0; b < n_bags; b++)
		if (offsets[b] > offsets[b + 1])
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: offsets[%llu] = %lld > offsets[%llu] = %lld", fn,
					(ull)b, (long long)offsets[b], (ull)b + 1, (long long)offsets[b + 1]);
	if (offsets[0] < 0 || (uint64_t)offsets[n_bags] > n_ids)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: offsets span [%lld, %lld), outside the %llu ids", fn,
				(long long)offsets[0], (long long)offsets[n_bags], (ull)n_ids);
	return IBP_OK;
}

/* A job for n_bags > 0 bags with everything but the row source and the
 * scratch filled in; NULL when out of memory. */
static bag_job_t *new_job(ibp_bag_mode_t mode, unsigned flags, const void *ids, ibp_dtype_t id_dtype,
			  const int64_t *offsets, const float *weights, int64_t padding_idx, void *out,
			  ibp_dtype_t dt, uint64_t R, uint64_t nrows)
{
	/* 64-byte aligned: each thread's bag_tls_t in lines of its own, which
	 * its thread alone writes (per chunk, block or batch of rows) */
	bag_job_t *j = aligned_alloc(64, sizeof(*j));
	if (!j)
		return NULL;
	memset(j, 0, sizeof(*j));
	j->k = pick_kernels();
	j->nrows = nrows;
	j->dt = dt;
	j->R = R;
	j->dim = R / (dt == IBP_DTYPE_F32 ? 4 : 2);
	j->mode = mode;
	j->unfused = (flags & IBP_BAG_UNFUSED_WEIGHTS) != 0;
	j->ids64 = id_dtype == IBP_DTYPE_I64 ? ids : NULL;
	j->ids32 = id_dtype == IBP_DTYPE_I32 ? ids : NULL;
	j->offsets = offsets;
	j->weights = weights;
	j->padding = padding_idx;
	j->out = out;
	return j;
}

/* Scratch for t threads (fewer when it would pass SCRATCH_MAX), the bags
 * partitioned; then the job runs (on the store's pool when `pool`, else on
 * this thread). Frees the job; *nfailed (if not NULL) gets its failed bags. */
static ibp_status_t run_job(bag_job_t *j, const ibp_store_t *pool, int t, uint64_t n_bags, const char *fn,
			    const char *name, uint64_t *nfailed)
{
	/* scratch per thread: a row, two float rows (16-bit dtypes), a block
	 * (exp, fp8) or a chunk of rows and their ids (IBP rows of a store) */
	const uint64_t cap = j->store ? chunk_rows(j->R) : 0;
	uint64_t per = align64(j->R) + align64(cap * j->R) + align64(cap * 8);
	if (j->dt != IBP_DTYPE_F32)
		per += 2 * align64(j->dim * sizeof(float));
	if (j->block_codec)
		per += align64((j->block_rows < j->nrows ? j->block_rows : j->nrows) * j->R);
	if (t > MAX_TASKS)
		t = MAX_TASKS;
	while (t > 1 && (uint64_t)t * per > SCRATCH_MAX)
		t--;
	uint8_t *scratch = ibp_host_alloc((uint64_t)t * per, 64);
	if (!scratch || pthread_mutex_init(&j->mu, NULL) != 0) {
		ibp_host_free(scratch);
		free(j);
		return ibpi_fail(IBP_ERR_NOMEM, "%s: no memory for %d x %llu bytes of scratch", fn, t, (ull)per);
	}
	for (int i = 0; i < t; i++) {
		uint8_t *p = scratch + (uint64_t)i * per;
		bag_tls_t *tl = &j->tls[i];
		tl->row = p;
		p += align64(j->R);
		if (j->dt != IBP_DTYPE_F32) {
			tl->accf = (float *)p;
			p += align64(j->dim * sizeof(float));
			tl->rowf = (float *)p;
			p += align64(j->dim * sizeof(float));
		}
		tl->chunk = cap ? p : NULL;
		p += align64(cap * j->R);
		tl->cids = cap ? (int64_t *)(void *)p : NULL;
		p += align64(cap * 8);
		tl->c0 = tl->c1 = 0;
		tl->cap = cap;
		tl->slot = j->block_codec ? p : NULL;
		tl->block = NO_BLOCK;
	}
	j->nparts = t == 1 ? 1 : (uint64_t)t * PARTS_PER_THREAD;
	if (j->nparts > MAX_TASKS)
		j->nparts = MAX_TASKS;
	partition(j, n_bags, (int)j->nparts);
	if (pool)
		ibpi_store_run(pool, t, run_part, j);
	else
		run_part(j, 0);
	ibp_status_t st = IBP_OK;
	if (j->failed)
		st = ibpi_fail(j->err, "%s: %s: bag %llu: %s", fn, name, (ull)j->err_bag, j->err_msg);
	if (nfailed)
		*nfailed = j->nfailed;
	pthread_mutex_destroy(&j->mu);
	ibp_host_free(scratch);
	free(j);
	return st;
}

ibp_status_t ibp_store_embedding_bag(const ibp_store_t *s, ibp_bag_mode_t mode, unsigned flags,
				     const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets,
				     uint64_t n_bags, const float *weights, int64_t padding_idx, void *out,
				     int nthreads)
{
	const char *fn = "embedding_bag";
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL store", fn);
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: nthreads %d < 0", fn, nthreads);
	const ibp_container_t *c = ibp_store_container(s);
	uint64_t nrows = ibp_store_nrows(s), R = ibp_store_row_bytes(s);
	ibp_dtype_t dt = ibp_store_dtype(s);
	IBP_TRY(check_args(fn, mode, flags, ids, id_dtype, n_ids, offsets, n_bags, weights, padding_idx, out, dt,
			   nrows, ibp_container_name(c)));
	const uint64_t i0 = (uint64_t)offsets[0], i1 = (uint64_t)offsets[n_bags];
	uint64_t bad = i1;
	if (id_dtype == IBP_DTYPE_I64) {
		bad = i0 + ibpi_ids_first_bad((const int64_t *)ids + i0, i1 - i0, nrows);
	} else {
		for (uint64_t i = i0; i < i1 && bad == i1; i++)
			if ((uint64_t)(int64_t)((const int32_t *)ids)[i] >= nrows)
				bad = i;
	}
	if (bad < i1) {
		const int64_t id = id_dtype == IBP_DTYPE_I64 ? ((const int64_t *)ids)[bad] : ((const int32_t *)ids)[bad];
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: %s: ids[%llu] = %lld is outside the %llu rows", fn,
				ibp_container_name(c), (ull)bad, (long long)id, (ull)nrows);
	}
	if (n_bags == 0)
		return IBP_OK;

	bag_job_t *j = new_job(mode, flags, ids, id_dtype, offsets, weights, padding_idx, out, dt, R, nrows);
	if (!j)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory", fn);
	j->c = c;
	j->codec = ibp_store_codec(s);
	j->packed = ibp_container_layout(c) == IBP_LAYOUT_PACKED;
	j->block_codec = ibp_container_codec_id(c) == IBP_CODEC_EXP || ibp_container_codec_id(c) == IBP_CODEC_FP8;
	j->xr = ibpi_container_exprows(c);
	if (j->xr) {
		j->xpay = ibp_container_payload(c, NULL);
		j->xovf = ibpi_container_exprows_overflow(c, &j->xovf_len);
		j->xisa = ibpi_exprows_isa();
		j->xahead = ibpi_store_ahead(s);
		const char *fz = getenv("IBP_EXP_BAG_FUSED"); /* 0: decode each row, then add (A/B and tests) */
		j->xsum = (mode == IBP_BAG_SUM || mode == IBP_BAG_MEAN) && !weights && !(fz && strcmp(fz, "0") == 0) &&
			  ibpi_exprows_sum64_ok(j->xr, j->xisa);
	}
	j->store = j->block_codec || j->xr ? NULL : s; /* IBP rows in chunks (chunk_row) */
	if (j->block_codec)
		j->block_rows = ibp_container_block_rows(c);
	return run_job(j, s, ibpi_store_pool_width(s, nthreads, n_bags), n_bags, fn, ibp_container_name(c), NULL);
}

ibp_status_t ibpi_bag_pool_rows(const ibp_bag_rows_t *rows, ibp_bag_mode_t mode, unsigned flags, const void *ids,
			       ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets, uint64_t n_bags,
			       const float *weights, int64_t padding_idx, void *out, int32_t *status,
			       uint64_t *nfailed)
{
	const char *fn = "embedding_bag_cuda";
	if (nfailed)
		*nfailed = 0;
	if (!rows || !rows->codec)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL rows or codec", fn);
	const uint64_t R = rows->row_bytes;
	if (R % (rows->dtype == IBP_DTYPE_F32 ? 4u : 2u) != 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of %llu bytes are not whole %s elements", fn, (ull)R,
				ibp_dtype_name(rows->dtype));
	IBP_TRY(check_args(fn, mode, flags, ids, id_dtype, n_ids, offsets, n_bags, weights, padding_idx, out,
			   rows->dtype, rows->nrows, "host-fallback store"));
	if (n_bags == 0)
		return IBP_OK;
	bag_job_t *j = new_job(mode, flags, ids, id_dtype, offsets, weights, padding_idx, out, rows->dtype, R,
			       rows->nrows);
	if (!j)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory", fn);
	j->rows = rows;
	j->codec = rows->codec;
	j->packed = rows->offsets != NULL;
	j->per_bag = 1;
	j->status = status;
	return run_job(j, NULL, 1, n_bags, fn, "host-fallback store", nfailed);
}
