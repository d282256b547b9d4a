/* exp_rows_avx2.c - the row form's AVX2 decoder (exp_rows.h): 64 elements
 * a step; the plane bits spread to code bytes by a shuffle and a compare,
 * the table by pshufb, the escapes patched in one by one (a few in a
 * hundred elements). Rows whose length is not a multiple of 64 elements
 * take the portable decoder. */
#include <immintrin.h>

#include "exp/exp_rows.h"
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

/* The 64 exponent fields of word w into f; *esc moves past its escapes. */
static inline void fields64(const uint8_t *src, uint64_t P, uint64_t w, __m256i tab, const uint8_t **esc,
			    uint8_t f[64])
{
	const uint64_t p0 = ld64(src + 8 * w), p1 = ld64(src + P + 8 * w), p2 = ld64(src + 2 * P + 8 * w);
	for (unsigned h = 0; h < 2; h++) {
		const __m256i c = _mm256_or_si256(
			_mm256_or_si256(_mm256_and_si256(bits_to_bytes((uint32_t)(p0 >> (32 * h))), _mm256_set1_epi8(1)),
					_mm256_and_si256(bits_to_bytes((uint32_t)(p1 >> (32 * h))), _mm256_set1_epi8(2))),
			_mm256_and_si256(bits_to_bytes((uint32_t)(p2 >> (32 * h))), _mm256_set1_epi8(4)));
		_mm256_storeu_si256((__m256i *)(void *)(f + 32 * h), _mm256_shuffle_epi8(tab, c));
	}
	for (uint64_t em = p0 & p1 & p2; em; em &= em - 1)
		f[__builtin_ctzll(em)] = *(*esc)++;
}

int ibpi_exprows_decode_avx2(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst)
{
	if (x->d % 64 != 0)
		return ibpi_exprows_decode_portable(x, src, len, dst);
	const uint8_t *esc;
	if (exprows_check(x, src, len, &esc) != 0)
		return -1;
	const uint64_t P = x->P, nw = x->d / 64;
	uint8_t t16[16] = { 0 };
	memcpy(t16, x->table, 8);
	const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t16));
	uint8_t *o = dst;
	uint8_t f[64];
	if (x->dt == IBP_DTYPE_F32) {
		const uint8_t *lo = src + x->off_lo, *hi = src + x->off_hi;
		const __m256i m7f = _mm256_set1_epi32(0x7f0000), sg = _mm256_set1_epi32(0x800000);
		for (uint64_t w = 0; w < nw; w++) {
			fields64(src, P, w, tab, &esc, f);
			for (unsigned g = 0; g < 8; g++) {
				const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(f + 8 * g)));
				const __m256i h = _mm256_slli_epi32(
					_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(hi + 64 * w + 8 * g))), 16);
				const __m256i l = _mm256_cvtepu16_epi32(
					_mm_loadu_si128((const __m128i *)(const void *)(lo + 128 * w + 16 * g)));
				__m256i v = _mm256_or_si256(_mm256_and_si256(h, m7f), _mm256_slli_epi32(_mm256_and_si256(h, sg), 8));
				v = _mm256_or_si256(_mm256_or_si256(v, _mm256_slli_epi32(e, 23)), l);
				_mm256_storeu_si256((__m256i *)(void *)(o + 256 * w + 32 * g), v);
			}
		}
		return 0;
	}
	const uint8_t *lo = src + x->off_lo;
	for (uint64_t w = 0; w < nw; w++) {
		fields64(src, P, w, tab, &esc, f);
		for (unsigned g = 0; g < 4; g++) {
			const __m256i l = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(lo + 64 * w + 16 * g)));
			const __m256i e = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(f + 16 * g)));
			__m256i v;
			if (x->dt == IBP_DTYPE_F16) {
				v = _mm256_or_si256(l, _mm256_slli_epi16(e, 10));
				/* the three sign/mantissa planes: 16 bits each, to 0/0xffff words */
				const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
								     8192, 16384, (short)0x8000);
				const unsigned sh = 16 * g;
				const __m256i b8 = _mm256_set1_epi16((short)(uint16_t)(ld64(src + 3 * P + 8 * w) >> sh));
				const __m256i b9 = _mm256_set1_epi16((short)(uint16_t)(ld64(src + 4 * P + 8 * w) >> sh));
				const __m256i bs = _mm256_set1_epi16((short)(uint16_t)(ld64(src + 5 * P + 8 * w) >> sh));
				v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(b8, bit), bit),
									 _mm256_set1_epi16(0x100)));
				v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(b9, bit), bit),
									 _mm256_set1_epi16(0x200)));
				v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(bs, bit), bit),
									 _mm256_set1_epi16((short)0x8000)));
			} else {
				v = _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi16(0x7f)),
						    _mm256_slli_epi16(_mm256_and_si256(l, _mm256_set1_epi16(0x80)), 8));
				v = _mm256_or_si256(v, _mm256_slli_epi16(e, 7));
			}
			_mm256_storeu_si256((__m256i *)(void *)(o + 128 * w + 32 * g), v);
		}
	}
	return 0;
}
