/* exp_rows_avx2.c - the row form's AVX2 decoder (exp_rows.h): 64 elements
 * a step; the plane bits spread to code bytes by a shuffle and a compare,
 * the table by pshufb, the escapes patched in one by one (a few in a
 * hundred elements). Rows whose length is not a multiple of 64 elements
 * are the portable decoder's (ibpi_exprows_decode sends them there). */
#include <immintrin.h>

#include "exp/exp_rows_impl.h"

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* 32 bytes, byte i 0xff when bit i of m is set */
static inline __m256i bits_to_bytes(uint32_t m)
{
	const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m),
						_mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
								   0x0303030303030303ll));
	const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	return _mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel);
}

/* The exponent fields of elements 32h .. 32h + 31 of word w, in bytes;
 * escapes (code 7) give 0, filled in by patch_escapes after the stores. */
static inline __m256i fields32(const uint8_t *src, uint64_t P, uint64_t w, unsigned h, __m256i tab)
{
	const uint32_t p0 = (uint32_t)(ld64(src + 8 * w) >> (32 * h));
	const uint32_t p1 = (uint32_t)(ld64(src + P + 8 * w) >> (32 * h));
	const uint32_t p2 = (uint32_t)(ld64(src + 2 * P + 8 * w) >> (32 * h));
	const __m256i c = _mm256_or_si256(
		_mm256_or_si256(_mm256_and_si256(bits_to_bytes(p0), _mm256_set1_epi8(1)),
				_mm256_and_si256(bits_to_bytes(p1), _mm256_set1_epi8(2))),
		_mm256_and_si256(bits_to_bytes(p2), _mm256_set1_epi8(4)));
	return _mm256_shuffle_epi8(tab, c);
}

/* 8 bytes of v (group g of 4) widened to 32-bit lanes / 16 bytes to 16-bit lanes */
static inline __m128i half_of(__m256i v, unsigned hi)
{
	return hi ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
}

/* float32: the upper 16 bits of 16 elements (sign, field, top 7 mantissa
 * bits) from their hi bytes (sign << 7 | mantissa) and fields, widened */
static inline __m256i f32_upper(__m256i hv, __m256i e)
{
	const __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
	return _mm256_or_si256(
		_mm256_or_si256(_mm256_and_si256(hv, m7f), _mm256_slli_epi16(_mm256_and_si256(hv, m80), 8)),
		_mm256_slli_epi16(e, 7));
}

/* 16-bit rows: the upper and lower bytes of 32 elements from their fields
 * f, their lo bytes l and (float16) the bits m8, m9 and sign of the
 * word's planes 3-5 */
static inline void bytes16(int f16, __m256i f, __m256i l, uint32_t m8, uint32_t m9, uint32_t sg, __m256i *up,
			   __m256i *low)
{
	const __m256i b01 = _mm256_set1_epi8(1), b02 = _mm256_set1_epi8(2), b7f = _mm256_set1_epi8(0x7f),
		      b80 = _mm256_set1_epi8((char)0x80);
	if (f16) {
		/* fields < 32: the 16-bit shift keeps each byte's bits in it */
		*up = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(f, 2), _mm256_and_si256(bits_to_bytes(m8), b01)),
				      _mm256_or_si256(_mm256_and_si256(bits_to_bytes(m9), b02),
						      _mm256_and_si256(bits_to_bytes(sg), b80)));
		*low = l;
	} else {
		*up = _mm256_or_si256(_mm256_and_si256(l, b80), _mm256_and_si256(_mm256_srli_epi16(f, 1), b7f));
		*low = _mm256_or_si256(_mm256_and_si256(l, b7f), _mm256_slli_epi16(_mm256_and_si256(f, b01), 7));
	}
}

/* The escapes of word w: their fields ORed into the elements written with
 * field 0 (esize 4: float32, shift 23; else 16-bit, shift 10 or 7). */
static inline void patch_escapes(const uint8_t *src, uint64_t P, uint64_t w, const uint8_t **esc, uint8_t *o,
				 unsigned esize, unsigned shift)
{
	uint64_t em = ld64(src + 8 * w) & ld64(src + P + 8 * w) & ld64(src + 2 * P + 8 * w);
	for (; em; em &= em - 1) {
		const unsigned i = (unsigned)__builtin_ctzll(em);
		const uint32_t f = *(*esc)++;
		if (esize == 4) {
			uint32_t v;
			memcpy(&v, o + 4 * i, 4);
			v |= f << shift;
			memcpy(o + 4 * i, &v, 4);
		} else {
			uint16_t v;
			memcpy(&v, o + 2 * i, 2);
			v = (uint16_t)(v | f << shift);
			memcpy(o + 2 * i, &v, 2);
		}
	}
}

int ibpi_exprows_decode_avx2(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst)
{
	if (x->d % 64 != 0)
		return -1; /* ibpi_exprows_decode sends such rows to the portable decoder */
	const uint8_t *esc;
	if (exprows_check(x, src, len, &esc) != 0)
		return -1;
	const uint64_t P = x->P, nw = x->d / 64;
	/* from the struct, not a copy on the stack: a 16-byte load of two
	 * fresh smaller stores waits for them (about a fifth of a row's time) */
	const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)x->table));
	uint8_t *o = dst;
	if (x->dt == IBP_DTYPE_F32) {
		/* the upper 16 bits of 16 elements at a time (sign, field, top 7
		 * mantissa bits, as bfloat16 rows), interleaved with the lower 16 */
		const uint8_t *lo = src + x->off_lo, *hi = src + x->off_hi;
		for (uint64_t w = 0; w < nw; w++) {
			for (unsigned h = 0; h < 2; h++) {
				const __m256i f = fields32(src, P, w, h, tab);
				for (unsigned g = 0; g < 2; g++) {
					const unsigned k = 2 * h + g; /* group of 16 in the word */
					const __m256i hv = _mm256_cvtepu8_epi16(
						_mm_loadu_si128((const __m128i *)(const void *)(hi + 64 * w + 16 * k)));
					const __m256i up = f32_upper(hv, _mm256_cvtepu8_epi16(half_of(f, g)));
					const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 128 * w + 32 * k));
					const __m256i a = _mm256_unpacklo_epi16(l, up), b = _mm256_unpackhi_epi16(l, up);
					uint8_t *d = o + 256 * w + 64 * k;
					_mm256_storeu_si256((__m256i *)(void *)d, _mm256_permute2x128_si256(a, b, 0x20));
					_mm256_storeu_si256((__m256i *)(void *)(d + 32), _mm256_permute2x128_si256(a, b, 0x31));
				}
			}
			patch_escapes(src, P, w, &esc, o + 256 * w, 4, 23);
		}
		return 0;
	}
	/* 16-bit rows, 32 elements at a time in bytes: the upper byte of each
	 * (float16: sign, field, mantissa bits 9 and 8; bfloat16: sign and the
	 * field's top 7 bits) and the lower one, interleaved */
	const uint8_t *lo = src + x->off_lo;
	const int f16 = x->dt == IBP_DTYPE_F16;
	for (uint64_t w = 0; w < nw; w++) {
		for (unsigned h = 0; h < 2; h++) {
			const __m256i f = fields32(src, P, w, h, tab);
			const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 64 * w + 32 * h));
			__m256i up, low;
			/* planes 3-5 (float16 only: bfloat16 rows have three planes) */
			const uint32_t m8 = f16 ? (uint32_t)(ld64(src + 3 * P + 8 * w) >> (32 * h)) : 0;
			const uint32_t m9 = f16 ? (uint32_t)(ld64(src + 4 * P + 8 * w) >> (32 * h)) : 0;
			const uint32_t sg = f16 ? (uint32_t)(ld64(src + 5 * P + 8 * w) >> (32 * h)) : 0;
			bytes16(f16, f, l, m8, m9, sg, &up, &low);
			const __m256i a = _mm256_unpacklo_epi8(low, up), b = _mm256_unpackhi_epi8(low, up);
			uint8_t *d = o + 128 * w + 64 * h;
			_mm256_storeu_si256((__m256i *)(void *)d, _mm256_permute2x128_si256(a, b, 0x20));
			_mm256_storeu_si256((__m256i *)(void *)(d + 32), _mm256_permute2x128_si256(a, b, 0x31));
		}
		patch_escapes(src, P, w, &esc, o + 128 * w, 2, f16 ? 10 : 7);
	}
	return 0;
}

/* ---- rows summed without writing them out (ibpi_exprows_sum64) -------- */

/* The escape fields of one half word (32 elements, escape bits em) as
 * bytes at their elements, 0 elsewhere: the escapes esc[0, popcount(em))
 * picked by a shuffle indexed by each element's escape rank. At most 16
 * escapes (the caller checks), esc + popcount(em) <= end; reads the 16
 * bytes from esc, or the last 16 before end when fewer are left (a row is
 * longer than 16 bytes). */
static inline __m256i escapes32(uint32_t em, const uint8_t *esc, const uint8_t *end)
{
	const uint8_t *base = end - esc >= 16 ? esc : end - 16;
	const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)base);
	const __m256i m = bits_to_bytes(em);
	/* inclusive rank of each escape within its 16-byte lane, then the low
	 * lane's count added to the high lane's */
	__m256i r = _mm256_and_si256(m, _mm256_set1_epi8(1));
	r = _mm256_add_epi8(r, _mm256_slli_si256(r, 1));
	r = _mm256_add_epi8(r, _mm256_slli_si256(r, 2));
	r = _mm256_add_epi8(r, _mm256_slli_si256(r, 4));
	r = _mm256_add_epi8(r, _mm256_slli_si256(r, 8));
	const int lowc = __builtin_popcount(em & 0xffffu);
	const int shift = (int)(esc - base) - 1; /* inclusive rank 1 = esc[0] */
	r = _mm256_add_epi8(r, _mm256_setr_m128i(_mm_set1_epi8((char)shift), _mm_set1_epi8((char)(lowc + shift))));
	return _mm256_and_si256(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(v), r), m);
}

/* 8 bfloat16 as float32 (exact: the upper halves) */
static inline __m256 bf16x8(__m128i h)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The fields of word w (elements 64w .. 64w + 63) of the row at src, its
 * escapes from esc patched in (f[0] elements 0-31, f[1] 32-63); the
 * escapes ORed into *bad. Returns the escapes taken. The row was checked
 * (at most 16 escapes a half). */
static inline __attribute__((always_inline)) uint32_t word_fields(uint64_t P, __m256i tab, const uint8_t *src,
								  uint64_t w, const uint8_t *esc, const uint8_t *end,
								  __m256i f[2], __m256i *bad)
{
	const uint64_t q0 = ld64(src + 8 * w), q1 = ld64(src + P + 8 * w), q2 = ld64(src + 2 * P + 8 * w);
	uint32_t took = 0;
#pragma GCC unroll 2
	for (unsigned h = 0; h < 2; h++) {
		const uint32_t p0 = (uint32_t)(q0 >> (32 * h)), p1 = (uint32_t)(q1 >> (32 * h)),
			       p2 = (uint32_t)(q2 >> (32 * h)), e = p0 & p1 & p2;
		const __m256i c = _mm256_or_si256(
			_mm256_or_si256(_mm256_and_si256(bits_to_bytes(p0), _mm256_set1_epi8(1)),
					_mm256_and_si256(bits_to_bytes(p1), _mm256_set1_epi8(2))),
			_mm256_and_si256(bits_to_bytes(p2), _mm256_set1_epi8(4)));
		/* no branch on whether there are escapes: rows mix both, and the
		 * branch cost more than the vector work (20.8-22.5 against
		 * 23.7-24.4 ns a row from cache, Zen 3; a branch-free shuffle of
		 * one or two escapes by position was slower still) */
		const __m256i E = escapes32(e, esc + took, end);
		*bad = _mm256_or_si256(*bad, E);
		f[h] = _mm256_or_si256(_mm256_shuffle_epi8(tab, c), E); /* escapes: field 0 (table[7]) + E */
		took += (uint32_t)__builtin_popcount(e);
	}
	return took;
}

/* Word w of the row at src, its fields f (word_fields), widened to float32
 * and added into a[8], 8 elements at a time as they come (a[8] takes half
 * the registers). */
static inline __attribute__((always_inline, target("avx2,f16c"))) void word_add(const ibpi_exprows_t *x, uint64_t P,
										  const uint8_t *src, uint64_t w,
										  const __m256i f[2], __m256 a[8])
{
	const ibp_dtype_t dt = x->dt;
	if (dt == IBP_DTYPE_F32) {
		const uint8_t *lo = src + x->off_lo + 128 * w, *hi = src + x->off_hi + 64 * w;
#pragma GCC unroll 4
		for (unsigned k = 0; k < 4; k++) {
			const __m256i hv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(hi + 16 * k)));
			const __m256i up = f32_upper(hv, _mm256_cvtepu8_epi16(half_of(f[k >> 1], k & 1)));
			const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 32 * k));
			const __m256i u = _mm256_unpacklo_epi16(l, up), v = _mm256_unpackhi_epi16(l, up);
			a[2 * k] = _mm256_add_ps(a[2 * k], _mm256_castsi256_ps(_mm256_permute2x128_si256(u, v, 0x20)));
			a[2 * k + 1] = _mm256_add_ps(a[2 * k + 1], _mm256_castsi256_ps(_mm256_permute2x128_si256(u, v, 0x31)));
		}
		return;
	}
	const uint8_t *lo = src + x->off_lo + 64 * w;
	const int f16 = dt == IBP_DTYPE_F16;
#pragma GCC unroll 2
	for (unsigned h = 0; h < 2; h++) {
		const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 32 * h));
		__m256i up, low;
		const uint32_t m8 = f16 ? (uint32_t)(ld64(src + 3 * P + 8 * w) >> (32 * h)) : 0;
		const uint32_t m9 = f16 ? (uint32_t)(ld64(src + 4 * P + 8 * w) >> (32 * h)) : 0;
		const uint32_t sg = f16 ? (uint32_t)(ld64(src + 5 * P + 8 * w) >> (32 * h)) : 0;
		bytes16(f16, f[h], l, m8, m9, sg, &up, &low);
		/* u: elements 0-7 | 16-23 of the half, v: 8-15 | 24-31 */
		const __m256i u = _mm256_unpacklo_epi8(low, up), v = _mm256_unpackhi_epi8(low, up);
		if (f16) {
			a[4 * h] = _mm256_add_ps(a[4 * h], _mm256_cvtph_ps(_mm256_castsi256_si128(u)));
			a[4 * h + 1] = _mm256_add_ps(a[4 * h + 1], _mm256_cvtph_ps(_mm256_castsi256_si128(v)));
			a[4 * h + 2] = _mm256_add_ps(a[4 * h + 2], _mm256_cvtph_ps(_mm256_extracti128_si256(u, 1)));
			a[4 * h + 3] = _mm256_add_ps(a[4 * h + 3], _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)));
		} else {
			a[4 * h] = _mm256_add_ps(a[4 * h], bf16x8(_mm256_castsi256_si128(u)));
			a[4 * h + 1] = _mm256_add_ps(a[4 * h + 1], bf16x8(_mm256_castsi256_si128(v)));
			a[4 * h + 2] = _mm256_add_ps(a[4 * h + 2], bf16x8(_mm256_extracti128_si256(u, 1)));
			a[4 * h + 3] = _mm256_add_ps(a[4 * h + 3], bf16x8(_mm256_extracti128_si256(v, 1)));
		}
	}
}

/* 1 when the kernel takes the row at src (len bytes): the decoder's
 * checks (its length is the fixed part plus the planes' escapes; d is
 * whole words, so no padding bits) and at most 16 escapes in each half
 * word. Float16 escapes are checked apart. Reads only the fixed part. */
static inline __attribute__((always_inline)) int row_taken(const ibpi_exprows_t *x, uint64_t P, const uint8_t *src,
							   uint64_t len, uint64_t nw)
{
	if (len < x->fixed)
		return 0; /* shorter than its planes: the decoder's error */
	uint64_t ne = 0;
	for (uint64_t w = 0; w < nw; w++) {
		const uint64_t em = ld64(src + 8 * w) & ld64(src + P + 8 * w) & ld64(src + 2 * P + 8 * w);
		if (__builtin_popcount((uint32_t)em) > 16 || __builtin_popcount((uint32_t)(em >> 32)) > 16)
			return 0; /* too many escapes for a shuffle: the decoder's */
		ne += (uint64_t)__builtin_popcountll(em);
	}
	return len == x->fixed + ne;
}

__attribute__((target("avx2,f16c"))) uint64_t ibpi_exprows_sum64_avx2(const ibpi_exprows_t *x,
								     const uint8_t *const *srcs, const uint64_t *lens,
								     uint64_t n, float *acc, int first)
{
	if (x->d % 64 != 0 || x->d > 64 * IBPI_EXPROWS_SUM_WORDS || n == 0)
		return 0;
	const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)x->table));
	const __m256i over = _mm256_set1_epi8((char)0xe0); /* float16 escapes above 31 */
	const int f16 = x->dt == IBP_DTYPE_F16;
	const uint64_t fixed = x->fixed, nw = x->d / 64;
	uint64_t r = 0;
	if (nw == 1) {
		/* one word: the accumulators stay in registers across the rows */
		__m256 a[8];
#pragma GCC unroll 8
		for (unsigned k = 0; k < 8; k++) /* the first row added to +0, as the bag's kernels and PyTorch do */
			a[k] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 8 * k);
		for (; r < n; r++) {
			const uint8_t *src = srcs[r];
			/* P = 8 as a constant: the plane loads fold */
			if (!row_taken(x, 8, src, lens[r], 1))
				break;
			__m256i f[2], bad = _mm256_setzero_si256();
			word_fields(8, tab, src, 0, src + fixed, src + lens[r], f, &bad);
			if (f16 && !_mm256_testz_si256(bad, over))
				break; /* a float16 escape above 31: the decoder's error */
			word_add(x, 8, src, 0, f, a);
		}
		if (r > 0)
#pragma GCC unroll 8
			for (unsigned k = 0; k < 8; k++)
				_mm256_storeu_ps(acc + 8 * k, a[k]);
		return r;
	}
	/* several words: each row checked whole first (acc is written only
	 * for rows taken), then word by word through acc */
	for (; r < n; r++) {
		const uint8_t *src = srcs[r], *end = src + lens[r];
		if (!row_taken(x, x->P, src, lens[r], nw))
			break;
		if (f16) {
			unsigned any = 0;
			for (const uint8_t *e = src + fixed; e < end; e++)
				any |= *e;
			if (any > 31)
				break;
		}
		const uint8_t *esc = src + fixed;
		for (uint64_t w = 0; w < nw; w++) {
			__m256 a[8];
			__m256i f[2], bad = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (unsigned k = 0; k < 8; k++)
				a[k] = first && r == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 64 * w + 8 * k);
			esc += word_fields(x->P, tab, src, w, esc, end, f, &bad);
			word_add(x, x->P, src, w, f, a);
#pragma GCC unroll 8
			for (unsigned k = 0; k < 8; k++)
				_mm256_storeu_ps(acc + 64 * w + 8 * k, a[k]);
		}
	}
	return r;
}
