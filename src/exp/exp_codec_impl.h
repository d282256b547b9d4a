/* exp_codec_impl.h - the exponent codec's hot loops. Included by
 * exp_codec.c (EXP_VARIANT portable), exp_codec_avx2.c (EXP_VARIANT avx2,
 * compiled with -mavx2) and exp_codec_avx512.c (EXP_VARIANT avx512, whose
 * encoder's and decoder's whole words use intrinsics: EXP_AVX512), so the compiler
 * vectorises the same C for each ISA. Loops are written branch-free on fixed 64-element words so they
 * vectorise; no floating-point reassociation is needed or allowed. */
#ifndef EXP_VARIANT
#error "define EXP_VARIANT before including exp_codec_impl.h"
#endif

#include "exp/exp_codec_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(EXP_AVX512)
#include <immintrin.h>
#endif

#define EXP_CAT2(a, b) a##_##b
#define EXP_CAT(a, b) EXP_CAT2(a, b)
#define EXP_FN(name) EXP_CAT(name, EXP_VARIANT)

static inline uint64_t exp_ld64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline void exp_st64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* ------------------------------------------------------------ mean square */

#if defined(EXP_AVX512)
/* 16 elements of dt from p as two vectors of 8 doubles (lanes 0-7, 8-15),
 * Inf/NaN as +0; *bad += their count. Values exact: squares need no care. */
static inline __attribute__((always_inline)) void ms_load16(const uint8_t *p, uint32_t dt, __m512d *lo, __m512d *hi,
							    uint32_t *bad)
{
	__m512 f;
	if (dt == EXPF_DT_F32) {
		const __m512i x = _mm512_loadu_si512(p);
		const __m512i ex = _mm512_set1_epi32(0x7f800000);
		const __mmask16 nf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, ex), ex);
		f = _mm512_castsi512_ps(_mm512_maskz_mov_epi32((__mmask16)~nf, x));
		*bad += (uint32_t)__builtin_popcount(nf);
	} else {
		const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
		const __m256i ex = _mm256_set1_epi16(dt == EXPF_DT_BF16 ? 0x7f80 : 0x7c00);
		const __mmask16 nf = _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, ex), ex);
		const __m256i hz = _mm256_maskz_mov_epi16((__mmask16)~nf, h);
		*bad += (uint32_t)__builtin_popcount(nf);
		if (dt == EXPF_DT_BF16)
			f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hz), 16));
		else /* FP16: the exact value (the portable loop takes |x|: the same square) */
			f = _mm512_cvtph_ps(hz);
	}
	*lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
	*hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

/* The portable loop's lane sums in the same order: lane t adds its 16
 * elements (t, t + 256, ...) in turn, then the same halving tree; each
 * square is exact in double, so the fused multiply-add rounds as the
 * portable add does. */
double EXP_FN(ibpi_exp_ms_group)(const uint8_t *p, uint32_t dt, uint64_t *nonfinite)
{
	double acc[256] __attribute__((aligned(64)));
	uint32_t bad = 0;
	const uint64_t esz = dt == EXPF_DT_F32 ? 4 : 2;
	for (int t = 0; t < 256; t += 16) {
		__m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
		for (int k = 0; k < 16; k++) {
			__m512d d0, d1;
			ms_load16(p + ((uint64_t)k * 256 + (uint64_t)t) * esz, dt, &d0, &d1, &bad);
			a0 = _mm512_fmadd_pd(d0, d0, a0);
			a1 = _mm512_fmadd_pd(d1, d1, a1);
		}
		_mm512_store_pd(acc + t, a0);
		_mm512_store_pd(acc + t + 8, a1);
	}
	for (int h = 128; h >= 8; h >>= 1)
		for (int t = 0; t < h; t += 8)
			_mm512_store_pd(acc + t, _mm512_add_pd(_mm512_load_pd(acc + t), _mm512_load_pd(acc + t + h)));
	for (int h = 4; h >= 1; h >>= 1)
		for (int t = 0; t < h; t++)
			acc[t] = acc[t] + acc[t + h];
	*nonfinite += bad;
	return acc[0];
}
#else
double EXP_FN(ibpi_exp_ms_group)(const uint8_t *p, uint32_t dt, uint64_t *nonfinite)
{
	double acc[256];
	uint32_t bad = 0;
	for (int t = 0; t < 256; t++)
		acc[t] = 0.0;
	/* branch-free so it vectorises; Inf/NaN contribute +0 (acc + 0 == acc) */
	if (dt == EXPF_DT_BF16) {
		for (int k = 0; k < 16; k++) {
			uint16_t v[256];
			memcpy(v, p + (uint64_t)k * 512, 512);
			for (int t = 0; t < 256; t++) {
				uint32_t x = v[t], nf = ((x & 0x7f80u) + 0x80u) >> 15;
				uint32_t u = (x << 16) & (nf - 1u);
				float f;
				memcpy(&f, &u, 4);
				double d = f;
				acc[t] = acc[t] + d * d;
				bad += nf;
			}
		}
	} else if (dt == EXPF_DT_F32) {
		for (int k = 0; k < 16; k++) {
			uint32_t v[256];
			memcpy(v, p + (uint64_t)k * 1024, 1024);
			for (int t = 0; t < 256; t++) {
				uint32_t x = v[t], nf = ((x & 0x7f800000u) + 0x800000u) >> 31;
				uint32_t u = x & (nf - 1u);
				float f;
				memcpy(&f, &u, 4);
				double d = f;
				acc[t] = acc[t] + d * d;
				bad += nf;
			}
		}
	} else {
		/* FP16: |x| = mm * 2^(ee - 25), mm and the power of two exact in float */
		for (int k = 0; k < 16; k++) {
			uint16_t v[256];
			memcpy(v, p + (uint64_t)k * 512, 512);
			for (int t = 0; t < 256; t++) {
				uint32_t x = v[t] & 0x7fffu, e = x >> 10, m = x & 0x3ffu;
				uint32_t nf = (x + 0x400u) >> 15;
				uint32_t isn = (e + 31u) >> 5; /* 1 when e != 0 */
				uint32_t mm = (m | (isn << 10)) & (nf - 1u);
				uint32_t ee = e + (isn ^ 1u);
				uint32_t pb = (ee - 25u + 127u) << 23;
				float pw;
				memcpy(&pw, &pb, 4);
				double d = (double)((float)mm * pw);
				acc[t] = acc[t] + d * d;
				bad += nf;
			}
		}
	}
	for (int h = 128; h >= 1; h >>= 1)
		for (int t = 0; t < h; t++)
			acc[t] = acc[t] + acc[t + h];
	*nonfinite += bad;
	return acc[0];
}
#endif

/* ----------------------------------------------------------------- encode */

/* The AVX-512 encoder alone also uses vpcompressb (VBMI2): exp_codec.c
 * runs that build only where the CPU has it. */
#if defined(EXP_AVX512)
#define EXP_ENC_TARGET __attribute__((target("avx512vbmi2")))
#else
#define EXP_ENC_TARGET
#endif

/* Bits 0, 1, 2 of 64 bytes (values 0..7) as three plane words (bit i =
 * element i). SSE2: shift the wanted bit to the byte's top, movemask. */
static inline void pack_planes(const uint8_t *c, uint64_t *p0, uint64_t *p1, uint64_t *p2)
{
#if defined(__SSE2__)
	uint64_t r0 = 0, r1 = 0, r2 = 0;
	for (int j = 0; j < 4; j++) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(c + 16 * j));
		r0 |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_slli_epi16(v, 7)) << (16 * j);
		r1 |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_slli_epi16(v, 6)) << (16 * j);
		r2 |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_slli_epi16(v, 5)) << (16 * j);
	}
	*p0 = r0;
	*p1 = r1;
	*p2 = r2;
#else
	/* 8 bytes at a time: isolate the bit, gather it with a carry-free multiply */
	uint64_t r[3] = {0, 0, 0};
	for (int j = 0; j < 8; j++) {
		uint64_t w = exp_ld64(c + 8 * j);
		for (int b = 0; b < 3; b++)
			r[b] |= ((((w >> b) & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56) << (8 * j);
	}
	*p0 = r[0];
	*p1 = r[1];
	*p2 = r[2];
#endif
}

/* Encodes words [w0, w0 + nw) of 64 elements (cnt valid in the last) into
 * the static sections and appends escapes at *esc; returns escapes written.
 * dt is a constant at each call site so each format gets its own loop. */
#if defined(EXP_AVX512)
/* Two zmm of 32 16-bit lanes narrowed to one zmm of 64 bytes. */
static inline __m512i narrow16x2(__m512i a, __m512i b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(a)), _mm512_cvtepi16_epi8(b), 1);
}

/* One whole word (64 elements) of the encoder with AVX-512 BW: fields and
 * low bits split in 16- or 32-bit lanes and narrowed, the low bits stored,
 * each plane word the OR of the table compares whose code has that bit
 * (code k + 1 for table[k], as the portable loop ORs them), the escapes (no
 * code) appended in order. Same bytes as the portable loop; returns the
 * new escape count. */
static inline __attribute__((always_inline)) EXP_ENC_TARGET uint64_t enc_word_avx512(const exp_enc_block_t *b, uint32_t dt, uint64_t w,
								  const uint8_t *src, const __m512i *tv, uint8_t *esc,
								  uint64_t nesc)
{
	const expf_layout_t *L = &b->L;
	uint8_t *planes = b->dst + L->off_planes;
	const uint64_t i0 = w * 64;
	__m512i f;
	if (dt == EXPF_DT_BF16 || dt == EXPF_DT_F16) {
		const __m512i v0 = _mm512_loadu_si512(src), v1 = _mm512_loadu_si512(src + 64);
		const __m512i ff = _mm512_set1_epi16(0xff);
		if (dt == EXPF_DT_BF16) {
			f = narrow16x2(_mm512_and_si512(_mm512_srli_epi16(v0, 7), ff),
				       _mm512_and_si512(_mm512_srli_epi16(v1, 7), ff));
			const __m512i m80 = _mm512_set1_epi16(0x80), m7f = _mm512_set1_epi16(0x7f);
			_mm512_storeu_si512(b->dst + L->off_lo + i0,
					    narrow16x2(_mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v0, 8), m80),
										 v0, m7f, 0xf8),
						       _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v1, 8), m80),
										 v1, m7f, 0xf8)));
		} else {
			const __m512i m31 = _mm512_set1_epi16(31);
			f = narrow16x2(_mm512_and_si512(_mm512_srli_epi16(v0, 10), m31),
				       _mm512_and_si512(_mm512_srli_epi16(v1, 10), m31));
			_mm512_storeu_si512(b->dst + L->off_lo + i0,
					    narrow16x2(_mm512_and_si512(v0, ff), _mm512_and_si512(v1, ff)));
			const __m512i m3 = _mm512_set1_epi16(3), m4 = _mm512_set1_epi16(4);
			const __m512i h3 = narrow16x2(
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v0, 8), m3),
						_mm512_and_si512(_mm512_srli_epi16(v0, 13), m4)),
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 8), m3),
						_mm512_and_si512(_mm512_srli_epi16(v1, 13), m4)));
			exp_st64(planes + 3 * L->plane_bytes + 8 * w, _mm512_test_epi8_mask(h3, _mm512_set1_epi8(1)));
			exp_st64(planes + 4 * L->plane_bytes + 8 * w, _mm512_test_epi8_mask(h3, _mm512_set1_epi8(2)));
			exp_st64(planes + 5 * L->plane_bytes + 8 * w, _mm512_test_epi8_mask(h3, _mm512_set1_epi8(4)));
		}
	} else {
		__m128i fq[4];
		const __m512i ff = _mm512_set1_epi32(0xff), m80 = _mm512_set1_epi32(0x80), m7f = _mm512_set1_epi32(0x7f);
		for (int q = 0; q < 4; q++) {
			const __m512i u = _mm512_loadu_si512(src + 64 * q);
			fq[q] = _mm512_cvtepi32_epi8(_mm512_and_si512(_mm512_srli_epi32(u, 23), ff));
			_mm256_storeu_si256((__m256i *)(void *)(b->dst + L->off_lo + 2 * i0 + 32 * q), _mm512_cvtepi32_epi16(u));
			const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 24), m80),
							   _mm512_and_si512(_mm512_srli_epi32(u, 16), m7f));
			_mm_storeu_si128((__m128i *)(void *)(b->dst + L->off_hi + i0 + 16 * q), _mm512_cvtepi32_epi8(hi));
		}
		f = _mm512_inserti64x4(
			_mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(fq[0]), fq[1], 1)),
			_mm256_inserti128_si256(_mm256_castsi128_si256(fq[2]), fq[3], 1), 1);
	}
	uint64_t m[7];
	for (int k = 0; k < 7; k++)
		m[k] = _mm512_cmpeq_epi8_mask(f, tv[k]);
	const uint64_t p0 = m[0] | m[2] | m[4] | m[6], p1 = m[1] | m[2] | m[5] | m[6], p2 = m[3] | m[4] | m[5] | m[6];
	exp_st64(planes + 8 * w, p0);
	exp_st64(planes + L->plane_bytes + 8 * w, p1);
	exp_st64(planes + 2 * L->plane_bytes + 8 * w, p2);
	/* The escapes (fields without a code) packed in order by vpcompressb
	 * and stored under a mask of exactly their count: no branch per
	 * escape (a loop of them, its exit mispredicted in most words, was a
	 * third of the KV store's encode). */
	const uint64_t z = ~(p0 | p1 | p2);
	const uint64_t ne = (uint64_t)__builtin_popcountll(z);
	_mm512_mask_storeu_epi8(esc + nesc, _bzhi_u64(~0ull, (unsigned)ne), _mm512_maskz_compress_epi8(z, f));
	return nesc + ne;
}
#endif

/* Element i0's bytes in the source (i0 a multiple of 64: a word is in one
 * part). */
static inline const uint8_t *enc_src(const exp_enc_block_t *b, uint64_t i0)
{
	return i0 < b->split ? b->src + i0 * b->s.esize : b->src2 + (i0 - b->split) * b->s.esize;
}

static inline __attribute__((always_inline)) EXP_ENC_TARGET uint64_t enc_words(const exp_enc_block_t *b, uint32_t dt, uint64_t w0,
								   uint64_t nw, uint64_t n, uint8_t *esc)
{
	const expf_shape_t *s = &b->s;
	const expf_layout_t *L = &b->L;
	const uint8_t *t = b->table;
	uint8_t *planes = b->dst + L->off_planes;
	uint64_t nesc = 0;
	const uint64_t pfe = EXP_ENC_PF_BYTES / s->esize; /* a multiple of 64 elements */
#if defined(EXP_AVX512)
	__m512i tv[7]; /* once: the stores below may alias b->table for the compiler */
	for (int k = 0; k < 7; k++)
		tv[k] = _mm512_set1_epi8((char)t[k]);
#endif
	for (uint64_t w = w0; w < w0 + nw; w++) {
		uint64_t i0 = w * 64;
		uint32_t cnt = n - i0 < 64 ? (uint32_t)(n - i0) : 64u;
		const uint8_t *src = enc_src(b, i0);
		if (b->prefetch && i0 + pfe < n) { /* a source in DRAM: its lines asked for early */
			const uint8_t *pf = enc_src(b, i0 + pfe);
			for (uint32_t k = 0; k < s->esize; k++)
				__builtin_prefetch(pf + 64 * k, 0, 3);
		}
#if defined(EXP_AVX512)
		if (cnt == 64) {
			nesc = enc_word_avx512(b, dt, w, src, tv, esc, nesc);
			continue;
		}
#endif
		uint8_t f[64], c[64], h3[64];
		if (cnt == 64) {
			if (dt == EXPF_DT_BF16) {
				uint8_t *lo = b->dst + L->off_lo + i0;
				for (int i = 0; i < 64; i++) {
					uint16_t v;
					memcpy(&v, src + 2 * i, 2);
					f[i] = (uint8_t)(v >> 7);
					lo[i] = (uint8_t)(((v >> 8) & 0x80u) | (v & 0x7fu));
				}
			} else if (dt == EXPF_DT_F16) {
				uint8_t *lo = b->dst + L->off_lo + i0;
				for (int i = 0; i < 64; i++) {
					uint16_t v;
					memcpy(&v, src + 2 * i, 2);
					f[i] = (uint8_t)((v >> 10) & 31u);
					lo[i] = (uint8_t)v;
					h3[i] = (uint8_t)(((v >> 8) & 3u) | ((v >> 13) & 4u));
				}
			} else {
				uint8_t *lo = b->dst + L->off_lo + 2 * i0, *hi = b->dst + L->off_hi + i0;
				for (int i = 0; i < 64; i++) {
					uint32_t u;
					memcpy(&u, src + 4 * i, 4);
					f[i] = (uint8_t)(u >> 23);
					uint16_t l16 = (uint16_t)u;
					memcpy(lo + 2 * i, &l16, 2);
					hi[i] = (uint8_t)(((u >> 24) & 0x80u) | ((u >> 16) & 0x7fu));
				}
			}
			for (int i = 0; i < 64; i++) {
				uint8_t x = f[i], r = 0;
				for (int k = 0; k < 7; k++)
					r |= x == t[k] ? (uint8_t)(k + 1) : 0;
				c[i] = r;
			}
		} else {
			/* tail word: scalar, zero-padded */
			memset(f, 0, sizeof(f));
			memset(c, 0, sizeof(c));
			memset(h3, 0, sizeof(h3));
			for (uint32_t i = 0; i < cnt; i++) {
				uint32_t bits = exp_ld_elem(src + (uint64_t)i * s->esize, s->esize);
				uint32_t sm = expf_sm(bits, s);
				f[i] = (uint8_t)expf_field(bits, s);
				if (dt == EXPF_DT_F32) {
					uint16_t l16 = (uint16_t)sm;
					memcpy(b->dst + L->off_lo + 2 * (i0 + i), &l16, 2);
					b->dst[L->off_hi + i0 + i] = (uint8_t)(sm >> 16);
				} else {
					b->dst[L->off_lo + i0 + i] = (uint8_t)sm;
					h3[i] = (uint8_t)(sm >> 8);
				}
				uint8_t r = 0;
				for (int k = 0; k < 7; k++)
					r |= f[i] == t[k] ? (uint8_t)(k + 1) : 0;
				c[i] = r;
			}
		}
		uint64_t p0, p1, p2;
		pack_planes(c, &p0, &p1, &p2);
		exp_st64(planes + 8 * w, p0);
		exp_st64(planes + L->plane_bytes + 8 * w, p1);
		exp_st64(planes + 2 * L->plane_bytes + 8 * w, p2);
		if (dt == EXPF_DT_F16) {
			uint64_t q0, q1, q2;
			pack_planes(h3, &q0, &q1, &q2);
			exp_st64(planes + 3 * L->plane_bytes + 8 * w, q0);
			exp_st64(planes + 4 * L->plane_bytes + 8 * w, q1);
			exp_st64(planes + 5 * L->plane_bytes + 8 * w, q2);
		}
		uint64_t valid = cnt == 64 ? ~0ull : (1ull << cnt) - 1;
		uint64_t z = ~(p0 | p1 | p2) & valid;
		while (z) {
			int i = __builtin_ctzll(z);
			esc[nesc++] = f[i];
			z &= z - 1;
		}
	}
	return nesc;
}

EXP_ENC_TARGET uint64_t EXP_FN(ibpi_exp_enc_groups)(const exp_enc_block_t *b, uint64_t g0, uint64_t g1, uint8_t *esc)
{
	const expf_layout_t *L = &b->L;
	uint64_t total = 0;
	for (uint64_t g = g0; g < g1; g++) {
		uint64_t w0 = g * (EXPF_GROUP / 64);
		uint64_t nw = (expf_group_len(L->n, g) + 63) / 64;
		uint64_t c;
		if (b->dt == EXPF_DT_BF16)
			c = enc_words(b, EXPF_DT_BF16, w0, nw, L->n, esc + total);
		else if (b->dt == EXPF_DT_F16)
			c = enc_words(b, EXPF_DT_F16, w0, nw, L->n, esc + total);
		else
			c = enc_words(b, EXPF_DT_F32, w0, nw, L->n, esc + total);
		exp_st64(b->dst + L->off_prefix + 8 * g, c);
		total += c;
	}
	return total;
}

/* ----------------------------------------------------------------- decode */

/* Codes of 64 elements from their three plane words. */
static inline void unpack_codes(uint64_t p0, uint64_t p1, uint64_t p2, uint8_t *c)
{
	for (int j = 0; j < 8; j++) {
		uint64_t v = ibpi_exp_spread8[(p0 >> (8 * j)) & 255] | ibpi_exp_spread8[(p1 >> (8 * j)) & 255] << 1 |
			     ibpi_exp_spread8[(p2 >> (8 * j)) & 255] << 2;
		memcpy(c + 8 * j, &v, 8);
	}
}

/* Decodes group g; returns 0 on corrupt input. Per 64 elements: codes from
 * the planes, codes to fields by compare-select (vectorised), escapes
 * patched into the fields, then the values assembled (vectorised). */
#if defined(EXP_AVX512)
/* One whole word (64 elements) with AVX-512 BW + VBMI: the three plane
 * bits of each element into its code by mask-to-bytes, the codes to fields
 * by one byte permute of the table (code 0 -> 0, c -> table[c - 1]), the
 * escapes patched in order as the portable loop does, then the values
 * assembled in 16- or 32-bit lanes. Same bytes and the same checks as the
 * portable loop; returns 0 on corrupt input. */
static inline __attribute__((always_inline)) int dec_word_avx512(const exp_dec_block_t *b, uint32_t dt, uint64_t w,
								 uint64_t p0, uint64_t p1, uint64_t p2, __m512i tab,
								 const uint8_t *esc, uint64_t *used, uint64_t have,
								 uint32_t fmax, uint8_t *d)
{
	const expf_layout_t *L = &b->L;
	const uint8_t *planes = b->src + L->off_planes;
	const uint64_t i0 = w * 64;
	const __m512i c = _mm512_or_si512(
		_mm512_or_si512(_mm512_and_si512(_mm512_movm_epi8(p0), _mm512_set1_epi8(1)),
				_mm512_and_si512(_mm512_movm_epi8(p1), _mm512_set1_epi8(2))),
		_mm512_and_si512(_mm512_movm_epi8(p2), _mm512_set1_epi8(4)));
	__m512i fb = _mm512_permutexvar_epi8(c, tab);
	uint64_t z = ~(p0 | p1 | p2);
	if (z) { /* in the register: a byte store then a 64-byte load would stall on the forwarding */
		uint64_t u = *used;
		while (z) {
			if (u >= have)
				return 0;
			uint8_t e = esc[u++];
			if (e > fmax || b->in_table[e])
				return 0;
			fb = _mm512_mask_set1_epi8(fb, z & (0 - z), (char)e);
			z &= z - 1;
		}
		*used = u;
	}
	if (dt == EXPF_DT_BF16 || dt == EXPF_DT_F16) {
		const __m512i lo = _mm512_loadu_si512(b->src + L->off_lo + i0);
		__m512i h3 = _mm512_setzero_si512();
		if (dt == EXPF_DT_F16) {
			uint64_t q0 = exp_ld64(planes + 3 * L->plane_bytes + 8 * w),
				 q1 = exp_ld64(planes + 4 * L->plane_bytes + 8 * w),
				 q2 = exp_ld64(planes + 5 * L->plane_bytes + 8 * w);
			h3 = _mm512_or_si512(
				_mm512_or_si512(_mm512_and_si512(_mm512_movm_epi8(q0), _mm512_set1_epi8(1)),
						_mm512_and_si512(_mm512_movm_epi8(q1), _mm512_set1_epi8(2))),
				_mm512_and_si512(_mm512_movm_epi8(q2), _mm512_set1_epi8(4)));
		}
		for (int h = 0; h < 2; h++) {
			const __m512i f16 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(fb, 1)
								   : _mm512_castsi512_si256(fb));
			const __m512i l16 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(lo, 1)
								   : _mm512_castsi512_si256(lo));
			__m512i o;
			if (dt == EXPF_DT_BF16) {
				o = _mm512_or_si512(_mm512_slli_epi16(f16, 7),
						    _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(l16, _mm512_set1_epi16(0x80)), 8),
								    _mm512_and_si512(l16, _mm512_set1_epi16(0x7f))));
			} else {
				const __m512i x3 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(h3, 1)
									  : _mm512_castsi512_si256(h3));
				o = _mm512_or_si512(
					_mm512_or_si512(_mm512_slli_epi16(f16, 10),
							_mm512_slli_epi16(_mm512_and_si512(x3, _mm512_set1_epi16(4)), 13)),
					_mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(x3, _mm512_set1_epi16(3)), 8), l16));
			}
			_mm512_storeu_si512(d + 64 * h, o);
		}
	} else {
		const __m512i hi = _mm512_loadu_si512(b->src + L->off_hi + i0);
		for (int q = 0; q < 4; q++) {
			__m128i fq, hq;
			switch (q) { /* the extract's lane must be a constant */
			case 0: fq = _mm512_extracti32x4_epi32(fb, 0), hq = _mm512_extracti32x4_epi32(hi, 0); break;
			case 1: fq = _mm512_extracti32x4_epi32(fb, 1), hq = _mm512_extracti32x4_epi32(hi, 1); break;
			case 2: fq = _mm512_extracti32x4_epi32(fb, 2), hq = _mm512_extracti32x4_epi32(hi, 2); break;
			default: fq = _mm512_extracti32x4_epi32(fb, 3), hq = _mm512_extracti32x4_epi32(hi, 3); break;
			}
			const __m512i f32 = _mm512_cvtepu8_epi32(fq), h32 = _mm512_cvtepu8_epi32(hq);
			const __m512i l32 = _mm512_cvtepu16_epi32(
				_mm256_loadu_si256((const __m256i *)(const void *)(b->src + L->off_lo + 2 * i0 + 32 * q)));
			const __m512i o = _mm512_or_si512(
				_mm512_or_si512(_mm512_slli_epi32(f32, 23),
						_mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x80)), 24)),
				_mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x7f)), 16), l32));
			_mm512_storeu_si512(d + 64 * q, o);
		}
	}
	return 1;
}
#endif

/* cnt elements of `size` bytes: a fixed-size copy for whole words of 64
 * (inlined as vector moves; a call per word cost a fifth of the decode). */
#define COPY_CNT(dst, src, size)                                                                           \
	do {                                                                                               \
		if (cnt == 64)                                                                             \
			memcpy((dst), (src), 64 * (size));                                                 \
		else                                                                                       \
			memcpy((dst), (src), (size_t)cnt * (size));                                        \
	} while (0)

static inline __attribute__((always_inline)) int dec_group(const exp_dec_block_t *b, uint32_t dt, uint64_t g)
{
	const expf_layout_t *L = &b->L;
	const uint8_t *planes = b->src + L->off_planes;
	const uint8_t *t = b->table;
	uint64_t n = L->n;
	uint64_t pfx = exp_ld64(b->src + L->off_prefix + 8 * g);
	uint64_t pnext = g + 1 < L->ngroups ? exp_ld64(b->src + L->off_prefix + 8 * (g + 1)) : b->escapes;
	uint64_t have = pnext - pfx, used = 0; /* validated: pnext >= pfx */
	const uint8_t *esc = b->src + L->static_bytes + pfx;
	uint32_t fmax = (1u << b->s.ebits) - 1u;
	uint64_t w0 = g * (EXPF_GROUP / 64), nw = (expf_group_len(n, g) + 63) / 64;
#if defined(EXP_AVX512)
	uint8_t tb[64] = { 0 };
	memcpy(tb + 1, t, 7);
	const __m512i tab = _mm512_loadu_si512(tb);
#endif
	for (uint64_t w = w0; w < w0 + nw; w++) {
		uint64_t i0 = w * 64;
		uint32_t cnt = n - i0 < 64 ? (uint32_t)(n - i0) : 64u;
		uint64_t p0 = exp_ld64(planes + 8 * w), p1 = exp_ld64(planes + L->plane_bytes + 8 * w),
			 p2 = exp_ld64(planes + 2 * L->plane_bytes + 8 * w);
#if defined(EXP_AVX512)
		if (cnt == 64) {
			uint8_t *dw = i0 < b->split ? b->dst + i0 * b->s.esize : b->dst2 + (i0 - b->split) * b->s.esize;
			if (!dec_word_avx512(b, dt, w, p0, p1, p2, tab, esc, &used, have, fmax, dw))
				return 0;
			continue;
		}
#endif
		uint8_t c[64], fb[64], h3[64], lo8[64], hi8[64];
		uint16_t lo16[64];
		unpack_codes(p0, p1, p2, c);
		for (int i = 0; i < 64; i++) {
			uint8_t x = c[i], r = 0;
			for (int k = 0; k < 7; k++)
				r |= (uint8_t)(0u - (uint32_t)(x == k + 1)) & t[k];
			fb[i] = r;
		}
		uint64_t valid = cnt == 64 ? ~0ull : (1ull << cnt) - 1;
		uint64_t z = ~(p0 | p1 | p2) & valid;
		while (z) {
			int i = __builtin_ctzll(z);
			if (used >= have)
				return 0;
			uint8_t e = esc[used++];
			if (e > fmax || b->in_table[e])
				return 0;
			fb[i] = e;
			z &= z - 1;
		}
		uint8_t *d = i0 < b->split ? b->dst + i0 * b->s.esize : b->dst2 + (i0 - b->split) * b->s.esize;
		if (dt == EXPF_DT_BF16) {
			uint16_t o[64];
			COPY_CNT(lo8, b->src + L->off_lo + i0, 1);
			for (int i = 0; i < 64; i++)
				o[i] = (uint16_t)((uint32_t)fb[i] << 7 | (uint32_t)(lo8[i] & 0x80u) << 8 | (lo8[i] & 0x7fu));
			COPY_CNT(d, o, 2);
		} else if (dt == EXPF_DT_F16) {
			uint16_t o[64];
			uint64_t q0 = exp_ld64(planes + 3 * L->plane_bytes + 8 * w),
				 q1 = exp_ld64(planes + 4 * L->plane_bytes + 8 * w),
				 q2 = exp_ld64(planes + 5 * L->plane_bytes + 8 * w);
			unpack_codes(q0, q1, q2, h3);
			COPY_CNT(lo8, b->src + L->off_lo + i0, 1);
			for (int i = 0; i < 64; i++)
				o[i] = (uint16_t)((uint32_t)fb[i] << 10 | (uint32_t)(h3[i] & 4u) << 13 |
						  (uint32_t)(h3[i] & 3u) << 8 | lo8[i]);
			COPY_CNT(d, o, 2);
		} else {
			uint32_t o[64];
			COPY_CNT(lo16, b->src + L->off_lo + 2 * i0, 2);
			COPY_CNT(hi8, b->src + L->off_hi + i0, 1);
			for (int i = 0; i < 64; i++)
				o[i] = (uint32_t)fb[i] << 23 | (uint32_t)(hi8[i] & 0x80u) << 24 |
				       (uint32_t)(hi8[i] & 0x7fu) << 16 | lo16[i];
			COPY_CNT(d, o, 4);
		}
	}
	return used == have;
}

#undef COPY_CNT

int EXP_FN(ibpi_exp_dec_groups)(const exp_dec_block_t *b, uint64_t g0, uint64_t g1, uint64_t *bad)
{
	for (uint64_t g = g0; g < g1; g++) {
		int ok;
		if (b->dt == EXPF_DT_BF16)
			ok = dec_group(b, EXPF_DT_BF16, g);
		else if (b->dt == EXPF_DT_F16)
			ok = dec_group(b, EXPF_DT_F16, g);
		else
			ok = dec_group(b, EXPF_DT_F32, g);
		if (!ok) {
			*bad = g;
			return 0;
		}
	}
	return 1;
}
