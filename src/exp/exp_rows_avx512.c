/* exp_rows_avx512.c - the row form's AVX-512 decoder (exp_rows.h): 64
 * elements a step, the codes' exponents by one vpermb, the escapes by a
 * load within the row and one vpexpandb (VBMI2). Rows whose length is not a
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

/* The 64 bytes from esc, of which the word's escapes are the first; the
 * row ends at end. Plain loads within the row (a row of 64 elements or
 * more is longer than 64 bytes): the 64 bytes from esc, or when fewer are
 * left the row's last 64, rotated by vpermb to start at esc. A masked
 * load of just the escapes, as this decoder first had, cost 40 ns more a
 * random row than the AVX2 decoder on a Zen 5 VM (2026-12-02): it seems to
 * wait on the line after the row. */
T512 static inline __m512i esc64(const uint8_t *esc, const uint8_t *end)
{
	static const uint8_t iota[64] = { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
					  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
					  32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
					  48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63 };
	const uint8_t *base = end - esc >= 64 ? esc : end - 64;
	const __m512i idx = _mm512_add_epi8(_mm512_loadu_si512(iota), _mm512_set1_epi8((char)(esc - base)));
	return _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(base)); /* vpermb: index bits 0-5 */
}

/* The 64 exponent fields of word w of the row ending at end; *esc moves
 * past its escapes. */
T512 static inline __m512i fields64(const uint8_t *src, uint64_t P, uint64_t w, __m512i tab, const uint8_t **esc,
				    const uint8_t *end)
{
	const uint64_t p0 = ld64(src + 8 * w), p1 = ld64(src + P + 8 * w), p2 = ld64(src + 2 * P + 8 * w);
	const __m512i c = _mm512_or_si512(_mm512_or_si512(_mm512_maskz_mov_epi8(p0, _mm512_set1_epi8(1)),
							  _mm512_maskz_mov_epi8(p1, _mm512_set1_epi8(2))),
					  _mm512_maskz_mov_epi8(p2, _mm512_set1_epi8(4)));
	__m512i f = _mm512_permutexvar_epi8(c, tab);
	const uint64_t em = p0 & p1 & p2;
	if (em) {
		f = _mm512_mask_expand_epi8(f, em, esc64(*esc, end));
		*esc += __builtin_popcountll(em);
	}
	return f;
}

/* float32: 16 elements (a group of the word) from their fields e (bytes),
 * hi bytes (sign << 7 | mantissa bits 16-22) and lo halves */
T512 static inline __m512i f32x16(__m128i e, const uint8_t *hi, const uint8_t *lo)
{
	const __m512i m7f = _mm512_set1_epi32(0x7f0000), sg = _mm512_set1_epi32(0x800000);
	const __m512i h =
		_mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)hi)), 16);
	const __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)lo));
	/* h: sign at bit 23, mantissa 16-22; sign to bit 31 */
	__m512i v = _mm512_or_si512(_mm512_and_si512(h, m7f), _mm512_slli_epi32(_mm512_and_si512(h, sg), 8));
	return _mm512_or_si512(_mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(e), 23)), l);
}

/* 16-bit rows: elements 32hf .. 32hf + 31 of a word from its fields f,
 * its lo bytes l8 and (float16) its planes 3-5 (s8, s9, sgn) */
T512 static inline __m512i half16(int f16, __m512i f, __m512i l8, uint64_t s8, uint64_t s9, uint64_t sgn,
				  unsigned hf)
{
	const __m512i l = _mm512_cvtepu8_epi16(hf ? _mm512_extracti64x4_epi64(l8, 1) : _mm512_castsi512_si256(l8));
	const __m512i e = _mm512_cvtepu8_epi16(hf ? _mm512_extracti64x4_epi64(f, 1) : _mm512_castsi512_si256(f));
	__m512i v;
	if (f16) {
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
	return v;
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
		for (uint64_t w = 0; w < nw; w++) {
			const __m512i f = fields64(src, P, w, tab, &esc, src + len);
			/* four groups of 16 (extract needs a constant index) */
#define F32_GROUP(G)                                                                                       \
	_mm512_storeu_si512(o + 256 * w + 64 * G,                                                          \
			    f32x16(_mm512_extracti32x4_epi32(f, G), hi + 64 * w + 16 * G, lo + 128 * w + 32 * G))
			F32_GROUP(0);
			F32_GROUP(1);
			F32_GROUP(2);
			F32_GROUP(3);
#undef F32_GROUP
		}
		return 0;
	}
	const uint8_t *lo = src + x->off_lo;
	const int f16 = x->dt == IBP_DTYPE_F16;
	for (uint64_t w = 0; w < nw; w++) {
		const __m512i f = fields64(src, P, w, tab, &esc, src + len);
		const __m512i l8 = _mm512_loadu_si512(lo + 64 * w);
		uint64_t s8 = 0, s9 = 0, sgn = 0;
		if (f16) {
			s8 = ld64(src + 3 * P + 8 * w);
			s9 = ld64(src + 4 * P + 8 * w);
			sgn = ld64(src + 5 * P + 8 * w);
		}
		for (unsigned hf = 0; hf < 2; hf++)
			_mm512_storeu_si512(o + 128 * w + 64 * hf, half16(f16, f, l8, s8, s9, sgn, hf));
	}
	return 0;
}

/* ---- rows summed without writing them out (ibpi_exprows_sum64) -------- */

/* Word w of the row at src, its 64 fields f, widened to float32 and added
 * into a[4] (elements 16k .. 16k + 15 in a[k]). */
T512 static inline __attribute__((always_inline)) void word_add512(const ibpi_exprows_t *x, uint64_t P,
								   const uint8_t *src, uint64_t w, __m512i f,
								   __m512 a[4])
{
	if (x->dt == IBP_DTYPE_F32) {
		const uint8_t *lo = src + x->off_lo + 128 * w, *hi = src + x->off_hi + 64 * w;
#define SUM_GROUP(G)                                                                                       \
	a[G] = _mm512_add_ps(a[G], _mm512_castsi512_ps(f32x16(_mm512_extracti32x4_epi32(f, G), hi + 16 * G, \
							      lo + 32 * G)))
		SUM_GROUP(0);
		SUM_GROUP(1);
		SUM_GROUP(2);
		SUM_GROUP(3);
#undef SUM_GROUP
		return;
	}
	const int f16 = x->dt == IBP_DTYPE_F16;
	const __m512i l8 = _mm512_loadu_si512(src + x->off_lo + 64 * w);
	uint64_t s8 = 0, s9 = 0, sgn = 0;
	if (f16) {
		s8 = ld64(src + 3 * P + 8 * w);
		s9 = ld64(src + 4 * P + 8 * w);
		sgn = ld64(src + 5 * P + 8 * w);
	}
#pragma GCC unroll 2
	for (unsigned hf = 0; hf < 2; hf++) {
		const __m512i v = half16(f16, f, l8, s8, s9, sgn, hf);
		const __m256i u = _mm512_castsi512_si256(v), t = _mm512_extracti64x4_epi64(v, 1);
		if (f16) {
			a[2 * hf] = _mm512_add_ps(a[2 * hf], _mm512_cvtph_ps(u));
			a[2 * hf + 1] = _mm512_add_ps(a[2 * hf + 1], _mm512_cvtph_ps(t));
		} else {
			/* bfloat16 to float32: the 16 bits as the upper half */
			const __m512i bu = _mm512_slli_epi32(_mm512_cvtepu16_epi32(u), 16),
				      bt = _mm512_slli_epi32(_mm512_cvtepu16_epi32(t), 16);
			a[2 * hf] = _mm512_add_ps(a[2 * hf], _mm512_castsi512_ps(bu));
			a[2 * hf + 1] = _mm512_add_ps(a[2 * hf + 1], _mm512_castsi512_ps(bt));
		}
	}
}

/* The ne escapes at esc, the row's last bytes, against the dtype: 1 when
 * every one is a field (float16: at most 31). Plain loads within the row
 * (see esc64). */
T512 static inline int escapes_ok(const ibpi_exprows_t *x, const uint8_t *esc, uint64_t ne)
{
	if (x->field_max >= 255 || ne == 0)
		return 1;
	const __m512i fm = _mm512_set1_epi8((char)x->field_max);
	uint64_t i = 0;
	for (; i + 64 <= ne; i += 64)
		if (_mm512_cmpgt_epu8_mask(_mm512_loadu_si512(esc + i), fm))
			return 0;
	if (i == ne)
		return 1;
	/* the rest (1 to 63): the last lanes of the row's last 64 bytes */
	const __mmask64 last = ~0ull << (64 - (ne - i));
	return !_mm512_mask_cmpgt_epu8_mask(last, _mm512_loadu_si512(esc + ne - 64), fm);
}

/* 1 when the kernel takes the row at src (len bytes): the decoder's
 * checks (its length is the fixed part plus the planes' escapes; d is
 * whole words, so no padding bits; float16 escapes at most 31). Reads
 * only the row's bytes. */
T512 static inline __attribute__((always_inline)) int row_taken512(const ibpi_exprows_t *x, uint64_t P,
								   const uint8_t *src, uint64_t len, uint64_t nw)
{
	if (len < x->fixed)
		return 0; /* shorter than its planes: the decoder's error */
	uint64_t ne = 0;
	for (uint64_t w = 0; w < nw; w++) {
		const uint64_t em = ld64(src + 8 * w) & ld64(src + P + 8 * w) & ld64(src + 2 * P + 8 * w);
		ne += (uint64_t)__builtin_popcountll(em);
	}
	return len == x->fixed + ne && escapes_ok(x, src + x->fixed, ne);
}

T512 uint64_t ibpi_exprows_sum64_avx512(const ibpi_exprows_t *x, const uint8_t *const *srcs, const uint64_t *lens,
					uint64_t n, float *acc, int first)
{
	if (x->d % 64 != 0 || x->d > 64 * IBPI_EXPROWS_SUM_WORDS || n == 0)
		return 0;
	const __m512i tab = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)x->table));
	const uint64_t nw = x->d / 64;
	uint64_t r = 0;
	if (nw == 1) {
		/* one word: the accumulators stay in registers across the rows */
		__m512 a[4];
		for (unsigned k = 0; k < 4; k++) /* the first row added to +0, as the bag's kernels and PyTorch do */
			a[k] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 16 * k);
		for (; r < n; r++) {
			const uint8_t *src = srcs[r], *esc = src + x->fixed;
			/* P = 8 as a constant: the plane loads fold */
			if (!row_taken512(x, 8, src, lens[r], 1))
				break;
			word_add512(x, 8, src, 0, fields64(src, 8, 0, tab, &esc, src + lens[r]), a);
		}
		if (r > 0)
			for (unsigned k = 0; k < 4; k++)
				_mm512_storeu_ps(acc + 16 * k, a[k]);
		return r;
	}
	/* several words: each row checked whole first (acc is written only
	 * for rows taken), then word by word through acc */
	const uint64_t P = x->P;
	for (; r < n; r++) {
		const uint8_t *src = srcs[r], *esc = src + x->fixed;
		if (!row_taken512(x, P, src, lens[r], nw))
			break;
		for (uint64_t w = 0; w < nw; w++) {
			__m512 a[4];
			for (unsigned k = 0; k < 4; k++)
				a[k] = first && r == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + 64 * w + 16 * k);
			word_add512(x, P, src, w, fields64(src, P, w, tab, &esc, src + lens[r]), a);
			for (unsigned k = 0; k < 4; k++)
				_mm512_storeu_ps(acc + 64 * w + 16 * k, a[k]);
		}
	}
	return r;
}
