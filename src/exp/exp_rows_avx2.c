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
		const __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
		for (uint64_t w = 0; w < nw; w++) {
			for (unsigned h = 0; h < 2; h++) {
				const __m256i f = fields32(src, P, w, h, tab);
				for (unsigned g = 0; g < 2; g++) {
					const unsigned k = 2 * h + g; /* group of 16 in the word */
					const __m256i hv = _mm256_cvtepu8_epi16(
						_mm_loadu_si128((const __m128i *)(const void *)(hi + 64 * w + 16 * k)));
					const __m256i e = _mm256_cvtepu8_epi16(half_of(f, g));
					const __m256i up = _mm256_or_si256(
						_mm256_or_si256(_mm256_and_si256(hv, m7f), _mm256_slli_epi16(_mm256_and_si256(hv, m80), 8)),
						_mm256_slli_epi16(e, 7));
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
	const __m256i b01 = _mm256_set1_epi8(1), b02 = _mm256_set1_epi8(2), b7f = _mm256_set1_epi8(0x7f),
		      b80 = _mm256_set1_epi8((char)0x80);
	for (uint64_t w = 0; w < nw; w++) {
		for (unsigned h = 0; h < 2; h++) {
			const __m256i f = fields32(src, P, w, h, tab);
			const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 64 * w + 32 * h));
			__m256i up, low;
			if (f16) {
				/* fields < 32: the 16-bit shift keeps each byte's bits in it */
				const uint32_t m8 = (uint32_t)(ld64(src + 3 * P + 8 * w) >> (32 * h));
				const uint32_t m9 = (uint32_t)(ld64(src + 4 * P + 8 * w) >> (32 * h));
				const uint32_t sg = (uint32_t)(ld64(src + 5 * P + 8 * w) >> (32 * h));
				up = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(f, 2),
								     _mm256_and_si256(bits_to_bytes(m8), b01)),
						     _mm256_or_si256(_mm256_and_si256(bits_to_bytes(m9), b02),
								     _mm256_and_si256(bits_to_bytes(sg), b80)));
				low = l;
			} else {
				up = _mm256_or_si256(_mm256_and_si256(l, b80),
						     _mm256_and_si256(_mm256_srli_epi16(f, 1), b7f));
				low = _mm256_or_si256(_mm256_and_si256(l, b7f),
						      _mm256_slli_epi16(_mm256_and_si256(f, b01), 7));
			}
			const __m256i a = _mm256_unpacklo_epi8(low, up), b = _mm256_unpackhi_epi8(low, up);
			uint8_t *d = o + 128 * w + 64 * h;
			_mm256_storeu_si256((__m256i *)(void *)d, _mm256_permute2x128_si256(a, b, 0x20));
			_mm256_storeu_si256((__m256i *)(void *)(d + 32), _mm256_permute2x128_si256(a, b, 0x31));
		}
		patch_escapes(src, P, w, &esc, o + 128 * w, 2, f16 ? 10 : 7);
	}
	return 0;
}
