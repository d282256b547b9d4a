/* ids.c - see ids.h. */
#include "util/ids.h"

#include "util/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define IBP_IDS_X86 1
#endif

static uint64_t first_bad_portable(const int64_t *ids, uint64_t n, uint64_t nrows)
{
	for (uint64_t i = 0; i < n; i++)
		if ((uint64_t)ids[i] >= nrows) /* a negative id is >= 2^63 */
			return i;
	return n;
}

static uint64_t run_end_portable(const int64_t *ids, uint64_t b, uint64_t e)
{
	const uint64_t *u = (const uint64_t *)ids;
	uint64_t k = b + 1;
	/* four ids a branch */
	while (k + 4 <= e && ((u[k] - u[k - 1] - 1) | (u[k + 1] - u[k] - 1) | (u[k + 2] - u[k + 1] - 1) |
			      (u[k + 3] - u[k + 2] - 1)) == 0)
		k += 4;
	while (k < e && u[k] == u[k - 1] + 1)
		k++;
	return k;
}

#ifdef IBP_IDS_X86
/* Whether any of the n ids is >= nrows unsigned (nrows >= 1): a signed
 * compare after flipping the sign bits, 16 ids a step. */
__attribute__((target("avx2"))) static int any_bad_avx2(const int64_t *ids, uint64_t n, uint64_t nrows)
{
	const __m256i flip = _mm256_set1_epi64x(INT64_MIN);
	const __m256i lim = _mm256_set1_epi64x((int64_t)((nrows - 1) ^ (1ull << 63)));
	__m256i bad = _mm256_setzero_si256();
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m256i a = _mm256_loadu_si256((const __m256i *)(ids + i));
		const __m256i b = _mm256_loadu_si256((const __m256i *)(ids + i + 4));
		const __m256i c = _mm256_loadu_si256((const __m256i *)(ids + i + 8));
		const __m256i d = _mm256_loadu_si256((const __m256i *)(ids + i + 12));
		const __m256i ab = _mm256_or_si256(_mm256_cmpgt_epi64(_mm256_xor_si256(a, flip), lim),
						   _mm256_cmpgt_epi64(_mm256_xor_si256(b, flip), lim));
		const __m256i cd = _mm256_or_si256(_mm256_cmpgt_epi64(_mm256_xor_si256(c, flip), lim),
						   _mm256_cmpgt_epi64(_mm256_xor_si256(d, flip), lim));
		bad = _mm256_or_si256(bad, _mm256_or_si256(ab, cd));
	}
	int any = !_mm256_testz_si256(bad, bad);
	for (; i < n; i++)
		any |= (uint64_t)ids[i] >= nrows;
	return any;
}

/* Eight ids a step: each minus the one before it, compared with 1. */
__attribute__((target("avx2"))) static uint64_t run_end_avx2(const int64_t *ids, uint64_t b, uint64_t e)
{
	const __m256i one = _mm256_set1_epi64x(1);
	uint64_t k = b + 1;
	for (; k + 8 <= e; k += 8) {
		const __m256i x0 = _mm256_loadu_si256((const __m256i *)(ids + k));
		const __m256i p0 = _mm256_loadu_si256((const __m256i *)(ids + k - 1));
		const __m256i x1 = _mm256_loadu_si256((const __m256i *)(ids + k + 4));
		const __m256i p1 = _mm256_loadu_si256((const __m256i *)(ids + k + 3));
		const unsigned m = (unsigned)_mm256_movemask_pd(
					   _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_sub_epi64(x0, p0), one))) |
				   (unsigned)_mm256_movemask_pd(
					   _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_sub_epi64(x1, p1), one)))
					   << 4;
		if (m != 0xFF)
			return k + (uint64_t)__builtin_ctz(~m);
	}
	const uint64_t *u = (const uint64_t *)ids;
	while (k < e && u[k] == u[k - 1] + 1)
		k++;
	return k;
}
#endif

uint64_t ibpi_ids_first_bad_isa(const int64_t *ids, uint64_t n, uint64_t nrows, int avx2)
{
#ifdef IBP_IDS_X86
	/* the scan proves the common case; the first bad id is found again */
	if (avx2 && nrows && !any_bad_avx2(ids, n, nrows))
		return n;
#else
	(void)avx2;
#endif
	return first_bad_portable(ids, n, nrows);
}

uint64_t ibpi_ids_run_scan(const int64_t *ids, uint64_t b, uint64_t e, int avx2)
{
#ifdef IBP_IDS_X86
	if (avx2 < 0 ? ibpi_cpu()->avx2 : avx2)
		return run_end_avx2(ids, b, e);
#else
	(void)avx2;
#endif
	return run_end_portable(ids, b, e);
}

uint64_t ibpi_ids_first_bad(const int64_t *ids, uint64_t n, uint64_t nrows)
{
	return ibpi_ids_first_bad_isa(ids, n, nrows, ibpi_cpu()->avx2);
}
