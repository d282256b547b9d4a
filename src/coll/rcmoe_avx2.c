/* rcmoe_avx2.c - LSQ and PTS kernels in AVX2 and BMI2: 8 elements per
 * vector. Every element goes through the same IEEE operations as the
 * scalar reference (rcmoe.c), so the bytes are the same (dynamiq_simd.h).
 * pext/pdep only where they are fast (ibpi_cpu()->fast_pdep). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/dynamiq_simd_avx2.h"
#include "fp8/fp8_impl.h"
#include "util/cpu.h"

static inline uint32_t lim_bits(void)
{
	float l = 3.4e38f;
	uint32_t b;
	memcpy(&b, &l, 4);
	return b;
}

static inline __m256 absf(__m256 v)
{
	return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

static inline __m256 load8(const void *src, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return _mm256_loadu_ps((const float *)src + i);
	if (dt == IBP_DTYPE_BF16) {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	float t[8];
	for (int l = 0; l < 8; l++)
		t[l] = fp8i_f16_to_f32(((const uint16_t *)src)[i + l]);
	return _mm256_loadu_ps(t);
}

static inline void store8(void *dst, ibp_dtype_t dt, uint64_t i, __m256 v)
{
	if (dt == IBP_DTYPE_F32) {
		_mm256_storeu_ps((float *)dst + i, v);
		return;
	}
	uint16_t *d = (uint16_t *)dst + i;
	if (dt == IBP_DTYPE_BF16) {
		__m256i u = _mm256_castps_si256(v);
		__m256i r = _mm256_add_epi32(
			u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
					    _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
		r = _mm256_srli_epi32(r, 16);
		__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
						 _mm256_set1_epi32(0x7f800000));
		r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
		/* low 16 bits of each lane, in order */
		__m256i s = _mm256_shuffle_epi8(r, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
								    0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
		uint64_t a = (uint64_t)_mm256_extract_epi64(s, 0), b = (uint64_t)_mm256_extract_epi64(s, 2);
		memcpy(d, &a, 8);
		memcpy(d + 4, &b, 8);
		return;
	}
	float t[8];
	_mm256_storeu_ps(t, v);
	for (int l = 0; l < 8; l++)
		d[l] = fp8i_f32_to_f16(t[l]);
}

static inline uint32_t hmax_u32(__m256i v)
{
	__m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(m);
}

static int lsq_max(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float *m)
{
	__m256i acc = _mm256_setzero_si256();
	const __m256i am = _mm256_set1_epi32(0x7fffffff);
	for (uint64_t i = i0; i < i0 + len; i += 8)
		acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(load8(src, dt, i)), am));
	uint32_t r = hmax_u32(acc);
	if (r > lim_bits())
		return 0;
	memcpy(m, &r, 4);
	return 1;
}

static void lsq_enc(const void *src, ibp_dtype_t dt, uint64_t i0, uint64_t len, float s, int B, uint64_t key,
		    uint8_t *code)
{
	const int Lm = (1 << (B - 1)) - 1;
	const __m256 vs = _mm256_set1_ps(s), vL = _mm256_set1_ps((float)Lm), zero = _mm256_setzero_ps();
	const __m256i vLm = _mm256_set1_epi32(Lm), sgn = _mm256_set1_epi32(1 << (B - 1));
	for (uint64_t i = i0; i < i0 + len; i += 8) {
		__m256 x = load8(src, dt, i);
		__m256 t = s > 0 ? _mm256_mul_ps(_mm256_div_ps(absf(x), vs), vL) : zero;
		__m256 fl = _mm256_floor_ps(t);
		__m256 up = _mm256_cmp_ps(avx2_u01x8(key, i, DQ_K_IDX), _mm256_sub_ps(t, fl), _CMP_LT_OQ);
		__m256i m = _mm256_sub_epi32(_mm256_cvttps_epi32(fl), _mm256_castps_si256(up));
		m = _mm256_min_epu32(m, vLm);
		__m256i neg = _mm256_andnot_si256(_mm256_cmpeq_epi32(m, _mm256_setzero_si256()),
						  _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
		avx2_pack8(_mm256_or_si256(m, _mm256_and_si256(neg, sgn)), B, code + i * (uint64_t)B / 8);
	}
}

static void lsq_dec(const uint8_t *code, int B, float s, uint64_t i0, uint64_t len, ibp_dtype_t dt, void *dst)
{
	const int Lm = (1 << (B - 1)) - 1;
	const __m256 vs = _mm256_set1_ps(s), vL = _mm256_set1_ps((float)Lm);
	const __m256i vLm = _mm256_set1_epi32(Lm);
	for (uint64_t i = i0; i < i0 + len; i += 8) {
		__m256i v = avx2_unpack8(code + i * (uint64_t)B / 8, B);
		__m256 m = _mm256_div_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, vLm)), vs), vL);
		m = _mm256_castsi256_ps(
			_mm256_xor_si256(_mm256_castps_si256(m), _mm256_slli_epi32(_mm256_srli_epi32(v, B - 1), 31)));
		store8(dst, dt, i, m);
	}
}

static int pts_max(const float *g, uint64_t k, float *m)
{
	__m256i acc = _mm256_setzero_si256();
	const __m256i am = _mm256_set1_epi32(0x7fffffff);
	uint64_t i = 0;
	for (; i + 8 <= k; i += 8)
		acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(g + i)), am));
	uint32_t r = hmax_u32(acc);
	for (; i < k; i++) {
		uint32_t b;
		memcpy(&b, g + i, 4);
		b &= 0x7fffffffu;
		r = b > r ? b : r;
	}
	if (r > lim_bits())
		return 0;
	memcpy(m, &r, 4);
	return 1;
}

/* pext/pdep, or their loops where the instructions are microcoded (AMD before Zen 3). */
static inline uint64_t pext64(uint64_t x, uint64_t m, int fast)
{
	if (fast)
		return _pext_u64(x, m);
	uint64_t r = 0;
	for (unsigned j = 0; m; m &= m - 1, j++)
		r |= (x >> __builtin_ctzll(m) & 1) << j;
	return r;
}

static inline uint64_t pdep64(uint64_t x, uint64_t m, int fast)
{
	if (fast)
		return _pdep_u64(x, m);
	uint64_t r = 0;
	for (unsigned j = 0; m; m &= m - 1, j++)
		r |= (x >> j & 1) << __builtin_ctzll(m);
	return r;
}

typedef struct bitw {
	uint8_t *p;
	uint64_t acc;
	unsigned fill;
} bitw_t;

static inline void bitw_put(bitw_t *w, uint64_t s, unsigned c)
{
	if (!c)
		return;
	w->acc |= s << w->fill;
	if (w->fill + c >= 64) {
		memcpy(w->p, &w->acc, 8);
		w->p += 8;
		w->acc = w->fill ? s >> (64 - w->fill) : 0;
		w->fill = w->fill + c - 64;
	} else
		w->fill += c;
}

static uint64_t pts_keep(const float *g, uint64_t k, float m, float ps, uint64_t key, uint8_t *pres, uint8_t *sgn)
{
	const __m256 vps = _mm256_set1_ps(ps), vm = _mm256_set1_ps(m), zero = _mm256_setzero_ps();
	const int fast = ibpi_cpu()->fast_pdep;
	bitw_t w = { sgn, 0, 0 };
	uint64_t nnz = 0;
	for (uint64_t b = 0; b < k; b += 64) {
		uint64_t P = 0, N = 0;
		for (unsigned l = 0; l < 8 && b + 8 * l < k; l++) {
			uint64_t i = b + 8 * l;
			__m256 x;
			unsigned in = 0xff;
			if (k - i >= 8)
				x = _mm256_loadu_ps(g + i);
			else {
				float t[8] = { 0 };
				memcpy(t, g + i, (k - i) * 4);
				x = _mm256_loadu_ps(t);
				in = (1u << (k - i)) - 1;
			}
			__m256 p = m > 0 ? _mm256_div_ps(_mm256_mul_ps(vps, absf(x)), vm) : zero;
			unsigned kp = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(avx2_u01x8(key, i, DQ_K_IDX), p, _CMP_LT_OQ));
			P |= (uint64_t)(kp & in) << (8 * l);
			N |= (uint64_t)_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ)) << (8 * l);
		}
		unsigned nb = k - b >= 64 ? 8 : (unsigned)((k - b + 7) / 8);
		memcpy(pres + b / 8, &P, nb);
		unsigned c = (unsigned)__builtin_popcountll(P);
		bitw_put(&w, pext64(N, P, fast), c);
		nnz += c;
	}
	memcpy(w.p, &w.acc, (w.fill + 7) / 8);
	return nnz;
}

typedef struct bitr {
	const uint8_t *p;
	uint64_t pos, end, acc;
	unsigned have;
} bitr_t;

static inline uint64_t bitr_take(bitr_t *r, unsigned c)
{
	if (!c)
		return 0;
	if (r->have >= c) {
		uint64_t out = c == 64 ? r->acc : r->acc & ((1ull << c) - 1);
		r->acc = c == 64 ? 0 : r->acc >> c;
		r->have -= c;
		return out;
	}
	uint64_t out = r->acc, nb = 0;
	unsigned got = r->have, need = c - got, bytes = r->end - r->pos >= 8 ? 8 : (unsigned)(r->end - r->pos);
	memcpy(&nb, r->p + r->pos, bytes);
	r->pos += bytes;
	out |= (need == 64 ? nb : nb & ((1ull << need) - 1)) << got;
	r->acc = need == 64 ? 0 : nb >> need;
	r->have = bytes * 8 - need;
	return out;
}

static void pts_add(const uint8_t *pres, const uint8_t *sgn, uint64_t k, float mag, float *acc)
{
	const __m256 pos = _mm256_set1_ps(mag), neg = _mm256_set1_ps(-mag);
	const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	const int fast = ibpi_cpu()->fast_pdep;
	bitr_t r = { sgn, 0, 0, 0, 0 };
	uint64_t nnz = 0;
	for (uint64_t b = 0; b < k; b += 64) {
		uint64_t P = 0;
		unsigned nb = k - b >= 64 ? 8 : (unsigned)((k - b + 7) / 8);
		memcpy(&P, pres + b / 8, nb);
		nnz += (uint64_t)__builtin_popcountll(P);
		r.end = (nnz + 7) / 8;
		if (!P)
			continue;
		uint64_t N = pdep64(bitr_take(&r, (unsigned)__builtin_popcountll(P)), P, fast);
		for (unsigned l = 0; l < 8; l++) {
			unsigned pm = (unsigned)(P >> (8 * l)) & 0xff, nm = (unsigned)(N >> (8 * l)) & 0xff;
			if (!pm)
				continue;
			float *a = acc + b + 8 * l;
			if (k - (b + 8 * l) < 8) { /* the last few: one at a time */
				for (unsigned j = 0; j < 8; j++)
					if (pm >> j & 1)
						a[j] += (nm >> j & 1) ? -mag : mag;
				continue;
			}
			__m256i pmv = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)pm), bit), bit);
			__m256i nmv = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)nm), bit), bit);
			__m256 v = _mm256_loadu_ps(a);
			__m256 s = _mm256_add_ps(v, _mm256_blendv_ps(pos, neg, _mm256_castsi256_ps(nmv)));
			_mm256_storeu_ps(a, _mm256_blendv_ps(v, s, _mm256_castsi256_ps(pmv)));
		}
	}
}

const rc_kern_t ibpi_rc_kern_avx2 = { lsq_max, lsq_enc, lsq_dec, pts_max, pts_keep, pts_add };
