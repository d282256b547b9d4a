/* codec_avx2.c - row kernels with AVX2 and BMI2, for CPUs without AVX-512.
 *
 * Compiled with -mavx2 -mbmi2 (CMake, by file name); only called when the
 * CPU has AVX2 and fast BMI2 (codec.c checks).
 *
 * The static part is decoded from the same group tables as the AVX-512
 * kernel (ibp_vgroup_t, built by codec.c): AVX2 has no byte permute across
 * the 64-byte window, so each lane gathers its field's bytes from the body
 * (vpgatherdd / vpgatherqq at the window base plus the lane's offset),
 * then the same variable shifts and masks for the (at most two) runs of
 * ~m_j, OR the Bitval, narrow, store. A gather reads LB bytes per lane, so
 * only groups whose whole window (31 + LB bytes past its base at most) is
 * readable run vectorised; the rest of the row, the fix-up chunks (more
 * than two static runs), C = 8, encoding and the exception part are the
 * BMI2 template kernels.
 */
#include <immintrin.h>

#include "bitpack/codec_internal.h"

IBP_INLINE uint64_t ibp_k_dep_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	return _pdep_u64(v, cl->nm[j]);
}
IBP_INLINE uint64_t ibp_k_dep_m(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	return _pdep_u64(v, cl->m[j]);
}
IBP_INLINE uint64_t ibp_k_ext_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	return _pext_u64(x, cl->nm[j]);
}
IBP_INLINE uint64_t ibp_k_ext_m(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	return _pext_u64(x, cl->m[j]);
}

#define IBP_K(name) ibp_avx2_##name
#define IBP_CODEC_KERNEL_BODY
#include "bitpack/codec_internal.h"
#undef IBP_K

/* Window bytes past vbase a group may read: offsets are <= 30 (codec.c),
 * plus the lane's LB bytes. */
#define IBP_AVX2_REACH(LB) (31u + (LB))

IBP_INLINE __m256i ibp_avx2_ld(const uint8_t *p)
{
	return _mm256_load_si256((const __m256i *)(const void *)p);
}

/* Groups [0, ng) of C <= 2 (16 lanes of 32 bits, two halves of 8). */
IBP_INLINE void ibp_avx2_static_c12(const ibp_cluster_t *cl, const uint8_t *body, uint64_t ng,
				    uint8_t *dst, const unsigned C)
{
	const ibp_vgroup_t *q = cl->vg;
	const uint64_t *vb = cl->vbase;
	const __m256i lo8 = _mm256_set1_epi32(0xFF);
	for (uint64_t g = 0; g < ng; g++, q++) {
		const int *base = (const int *)(const void *)(body + vb[g]);
		__m256i r[2];
		for (unsigned h = 0; h < 2; h++) {
			const unsigned o = 32 * h;
			/* lane l's offset is its first idx byte */
			const __m256i ix = _mm256_and_si256(ibp_avx2_ld(q->idx + o), lo8);
			const __m256i w = _mm256_i32gather_epi32(base, ix, 1);
			const __m256i t0 = _mm256_sllv_epi32(_mm256_srlv_epi32(w, ibp_avx2_ld(q->sh + o)),
							     ibp_avx2_ld(q->p0 + o));
			const __m256i t1 = _mm256_sllv_epi32(_mm256_srlv_epi32(w, ibp_avx2_ld(q->q1 + o)),
							     ibp_avx2_ld(q->p1 + o));
			r[h] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(t0, ibp_avx2_ld(q->m0 + o)),
							       _mm256_and_si256(t1, ibp_avx2_ld(q->m1 + o))),
					       ibp_avx2_ld(q->b + o));
		}
		/* lanes hold values < 2^(8C): unsigned saturation narrows exactly;
		 * packs work per 128-bit half, the permute puts the halves in order */
		const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
		if (C == 2) {
			_mm256_storeu_si256((__m256i *)(void *)(dst + g * 32), p16);
		} else {
			const __m128i p8 = _mm_packus_epi16(_mm256_castsi256_si128(p16),
							    _mm256_extracti128_si256(p16, 1));
			_mm_storeu_si128((__m128i *)(void *)(dst + g * 16), p8);
		}
	}
}

/* Groups [0, ng) of C = 4 (8 lanes of 64 bits, two halves of 4). */
static void ibp_avx2_static_c4(const ibp_cluster_t *cl, const uint8_t *body, uint64_t ng, uint8_t *dst)
{
	const ibp_vgroup_t *q = cl->vg;
	const uint64_t *vb = cl->vbase;
	const __m256i lo8 = _mm256_set1_epi64x(0xFF);
	const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	for (uint64_t g = 0; g < ng; g++, q++) {
		const long long *base = (const long long *)(const void *)(body + vb[g]);
		for (unsigned h = 0; h < 2; h++) {
			const unsigned o = 32 * h;
			const __m256i ix = _mm256_and_si256(ibp_avx2_ld(q->idx + o), lo8);
			const __m256i w = _mm256_i64gather_epi64(base, ix, 1);
			const __m256i t0 = _mm256_sllv_epi64(_mm256_srlv_epi64(w, ibp_avx2_ld(q->sh + o)),
							     ibp_avx2_ld(q->p0 + o));
			const __m256i t1 = _mm256_sllv_epi64(_mm256_srlv_epi64(w, ibp_avx2_ld(q->q1 + o)),
							     ibp_avx2_ld(q->p1 + o));
			const __m256i r = _mm256_or_si256(
				_mm256_or_si256(_mm256_and_si256(t0, ibp_avx2_ld(q->m0 + o)),
						_mm256_and_si256(t1, ibp_avx2_ld(q->m1 + o))),
				ibp_avx2_ld(q->b + o));
			/* the low 32 bits of each 64-bit lane, in order */
			const __m256i n = _mm256_permutevar8x32_epi32(r, even);
			_mm_storeu_si128((__m128i *)(void *)(dst + g * 32 + 16 * h), _mm256_castsi256_si128(n));
		}
	}
}

static void ibp_avx2_decode_static_v(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				     uint64_t avail, uint8_t *dst)
{
	const unsigned C = c->C;
	const uint64_t G = C <= 2 ? 16 : 8, reach = C <= 2 ? IBP_AVX2_REACH(4) : IBP_AVX2_REACH(8);
	/* groups whose whole window is readable (vbase is non-decreasing) */
	uint64_t ng = 0;
	while (ng < cl->nvg && cl->vbase[ng] <= avail && avail - cl->vbase[ng] >= reach)
		ng++;
	if (ng == 0) {
		ibp_avx2_decode_static_from(c, cl, body, avail, dst, 0);
		return;
	}
	if (C == 4)
		ibp_avx2_static_c4(cl, body, ng, dst);
	else if (C == 2)
		ibp_avx2_static_c12(cl, body, ng, dst, 2);
	else
		ibp_avx2_static_c12(cl, body, ng, dst, 1);
	/* chunks with more than two static runs: pdep (fields lie within
	 * avail); the list is ascending, later ones are decoded below */
	for (uint64_t i = 0; i < cl->nvfix && cl->vfix[i] < ng * G; i++) {
		const uint64_t j = cl->vfix[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * C, _pdep_u64(v, cl->nm[j]) | cl->b[j], C);
	}
	ibp_avx2_decode_static_from(c, cl, body, avail, dst, ng * G);
}

const ibp_kernels_t ibp_kernels_avx2 = {
	IBP_IMPL_AVX2,
	ibp_avx2_encode,
	ibp_avx2_decode_static_v,
	ibp_avx2_decode_exc,
};
