/* exp_rows_avx512.c - the row form's AVX-512 decoder (exp_rows.h): 64
 * elements a step, the codes' exponents by one vpermb, the escapes by a
 * masked load and one vpexpandb (VBMI2). Rows whose length is not a
 * multiple of 64 elements take the portable decoder. */
#include <immintrin.h>

#include "exp/exp_rows_impl.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi2,popcnt")))

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* The 64 exponent fields of word w; *esc moves past its escapes. */
T512 static inline __m512i fields64(const uint8_t *src, uint64_t P, uint64_t w, __m512i tab, const uint8_t **esc)
{
	const uint64_t p0 = ld64(src + 8 * w), p1 = ld64(src + P + 8 * w), p2 = ld64(src + 2 * P + 8 * w);
	const __m512i c = _mm512_or_si512(_mm512_or_si512(_mm512_maskz_mov_epi8(p0, _mm512_set1_epi8(1)),
							  _mm512_maskz_mov_epi8(p1, _mm512_set1_epi8(2))),
					  _mm512_maskz_mov_epi8(p2, _mm512_set1_epi8(4)));
	__m512i f = _mm512_permutexvar_epi8(c, tab);
	const uint64_t em = p0 & p1 & p2;
	if (em) {
		const unsigned ne = (unsigned)__builtin_popcountll(em);
		/* only the row's own escape bytes are read (masked load) */
		const __m512i e = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, ne), *esc);
		f = _mm512_mask_expand_epi8(f, em, e);
		*esc += ne;
	}
	return f;
}

T512 int ibpi_exprows_decode_avx512(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst)
{
	if (x->d % 64 != 0)
		return -1; /* ibpi_exprows_decode sends such rows to the portable decoder */
	const uint8_t *esc;
	if (exprows_check(x, src, len, &esc) != 0)
		return -1;
	const uint64_t P = x->P, nw = x->d / 64;
	/* codes are 0..7: only the table's first 8 bytes are indexed */
	const __m512i tab = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)x->table));
	uint8_t *o = dst;
	if (x->dt == IBP_DTYPE_F32) {
		const uint8_t *lo = src + x->off_lo, *hi = src + x->off_hi;
		const __m512i m7f = _mm512_set1_epi32(0x7f0000), sg = _mm512_set1_epi32(0x800000);
		for (uint64_t w = 0; w < nw; w++) {
			const __m512i f = fields64(src, P, w, tab, &esc);
			/* four groups of 16 (extract needs a constant index) */
#define F32_GROUP(G)                                                                                        \
	do {                                                                                                \
		const __m512i e = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(f, G));                     \
		const __m512i h = _mm512_slli_epi32(                                                         \
			_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(hi + 64 * w + 16 * G))), \
			16);                                                                                 \
		const __m512i l = _mm512_cvtepu16_epi32(                                                     \
			_mm256_loadu_si256((const __m256i *)(const void *)(lo + 128 * w + 32 * G)));            \
		/* h: sign at bit 23, mantissa 16-22; sign to bit 31 */                                     \
		__m512i v = _mm512_or_si512(_mm512_and_si512(h, m7f), _mm512_slli_epi32(_mm512_and_si512(h, sg), 8)); \
		v = _mm512_or_si512(_mm512_or_si512(v, _mm512_slli_epi32(e, 23)), l);                       \
		_mm512_storeu_si512(o + 256 * w + 64 * G, v);                                              \
	} while (0)
			F32_GROUP(0);
			F32_GROUP(1);
			F32_GROUP(2);
			F32_GROUP(3);
#undef F32_GROUP
		}
		return 0;
	}
	const uint8_t *lo = src + x->off_lo;
	for (uint64_t w = 0; w < nw; w++) {
		const __m512i f = fields64(src, P, w, tab, &esc);
		const __m512i l8 = _mm512_loadu_si512(lo + 64 * w);
		uint64_t s8 = 0, s9 = 0, sgn = 0;
		if (x->dt == IBP_DTYPE_F16) {
			s8 = ld64(src + 3 * P + 8 * w);
			s9 = ld64(src + 4 * P + 8 * w);
			sgn = ld64(src + 5 * P + 8 * w);
		}
		for (unsigned hf = 0; hf < 2; hf++) {
			const __m512i l = _mm512_cvtepu8_epi16(hf ? _mm512_extracti64x4_epi64(l8, 1)
								    : _mm512_castsi512_si256(l8));
			const __m512i e = _mm512_cvtepu8_epi16(hf ? _mm512_extracti64x4_epi64(f, 1)
								    : _mm512_castsi512_si256(f));
			__m512i v;
			if (x->dt == IBP_DTYPE_F16) {
				v = _mm512_or_si512(l, _mm512_slli_epi16(e, 10));
				const __mmask32 k8 = (__mmask32)(s8 >> (32 * hf)), k9 = (__mmask32)(s9 >> (32 * hf)),
						ks = (__mmask32)(sgn >> (32 * hf));
				v = _mm512_mask_mov_epi16(v, k8, _mm512_or_si512(v, _mm512_set1_epi16(0x100)));
				v = _mm512_mask_mov_epi16(v, k9, _mm512_or_si512(v, _mm512_set1_epi16(0x200)));
				v = _mm512_mask_mov_epi16(v, ks, _mm512_or_si512(v, _mm512_set1_epi16((short)0x8000)));
			} else {
				/* lo: sign at bit 7, mantissa 0-6 */
				v = _mm512_or_si512(_mm512_and_si512(l, _mm512_set1_epi16(0x7f)),
						    _mm512_slli_epi16(_mm512_and_si512(l, _mm512_set1_epi16(0x80)), 8));
				v = _mm512_or_si512(v, _mm512_slli_epi16(e, 7));
			}
			_mm512_storeu_si512(o + 128 * w + 64 * hf, v);
		}
	}
	return 0;
}
