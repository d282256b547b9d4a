/* codec_avx512.c - row kernels with AVX-512 (F, BW, VL, VBMI) and BMI2.
 *
 * Compiled with the AVX-512 flags (CMake, by file name) plus VBMI (below);
 * only called when the CPU has AVX-512 VBMI and BMI2 (codec.c checks).
 *
 * The static part of a row is decoded G chunks at a time (16 for C <= 2,
 * 8 for C = 4) from the per-codec tables of ibp_vgroup_t (built by
 * codec.c): one masked 64-byte load of the group's window (bytes past the
 * row's readable length are masked off, never touched), a byte permute
 * (vpermb) that gives each lane the bytes of its field, variable shifts
 * and masks for the (at most two) runs of ~m_j, OR the Bitval, narrow to
 * the chunk size, store. Chunks with more than two static runs are patched
 * after with pdep; C = 8, the last chunk and the chunks past the last full
 * group use the scalar (BMI2) template loop. Encoding and the exception
 * part are the BMI2 template kernels.
 */
/* Built with -mavx512vbmi (CMakeLists.txt): the dispatcher checks the CPU for VBMI. */
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

#define IBP_K(name) ibp_avx512_##name
#define IBP_CODEC_KERNEL_BODY
#include "bitpack/codec_internal.h"
#undef IBP_K

/* The group's 64-byte window; body[base, avail) is readable, base <= avail. */
IBP_INLINE __m512i ibp_avx512_window(const uint8_t *body, uint64_t avail, uint64_t base,
				     const ibp_vgroup_t *q)
{
	const uint64_t rem = avail - base;
	const __mmask64 k = rem >= 64 ? ~0ull : _bzhi_u64(~0ull, (unsigned)rem);
	const __m512i w = _mm512_maskz_loadu_epi8(k, body + base);
	return _mm512_permutexvar_epi8(_mm512_load_si512((const void *)q->idx), w);
}

/* (A & B) | C */
#define IBP_TL_ANDOR 0xEA

static void ibp_avx512_static_c4(const ibp_cluster_t *cl, const uint8_t *body, uint64_t avail,
				 uint8_t *dst)
{
	const ibp_vgroup_t *q = cl->vg;
	const uint64_t *vb = cl->vbase;
	const uint64_t nvg = cl->nvg;
	for (uint64_t g = 0; g < nvg; g++, q++) {
		const __m512i w = ibp_avx512_window(body, avail, vb[g], q);
		const __m512i sh = _mm512_load_si512((const void *)q->sh);
		const __m512i p0 = _mm512_load_si512((const void *)q->p0);
		const __m512i q1 = _mm512_load_si512((const void *)q->q1);
		const __m512i p1 = _mm512_load_si512((const void *)q->p1);
		const __m512i t0 = _mm512_sllv_epi64(_mm512_srlv_epi64(w, sh), p0);
		const __m512i t1 = _mm512_sllv_epi64(_mm512_srlv_epi64(w, q1), p1);
		__m512i r = _mm512_ternarylogic_epi64(t0, _mm512_load_si512((const void *)q->m0),
						      _mm512_load_si512((const void *)q->b), IBP_TL_ANDOR);
		r = _mm512_ternarylogic_epi64(t1, _mm512_load_si512((const void *)q->m1), r,
					      IBP_TL_ANDOR);
		_mm256_storeu_si256((__m256i *)(dst + g * 32), _mm512_cvtepi64_epi32(r));
	}
}

IBP_INLINE void ibp_avx512_static_c12(const ibp_cluster_t *cl, const uint8_t *body, uint64_t avail,
				      uint8_t *dst, const unsigned C)
{
	const ibp_vgroup_t *q = cl->vg;
	const uint64_t *vb = cl->vbase;
	const uint64_t nvg = cl->nvg;
	for (uint64_t g = 0; g < nvg; g++, q++) {
		const __m512i w = ibp_avx512_window(body, avail, vb[g], q);
		const __m512i sh = _mm512_load_si512((const void *)q->sh);
		const __m512i p0 = _mm512_load_si512((const void *)q->p0);
		const __m512i q1 = _mm512_load_si512((const void *)q->q1);
		const __m512i p1 = _mm512_load_si512((const void *)q->p1);
		const __m512i t0 = _mm512_sllv_epi32(_mm512_srlv_epi32(w, sh), p0);
		const __m512i t1 = _mm512_sllv_epi32(_mm512_srlv_epi32(w, q1), p1);
		__m512i r = _mm512_ternarylogic_epi32(t0, _mm512_load_si512((const void *)q->m0),
						      _mm512_load_si512((const void *)q->b), IBP_TL_ANDOR);
		r = _mm512_ternarylogic_epi32(t1, _mm512_load_si512((const void *)q->m1), r,
					      IBP_TL_ANDOR);
		if (C == 2)
			_mm256_storeu_si256((__m256i *)(dst + g * 32), _mm512_cvtepi32_epi16(r));
		else
			_mm_storeu_si128((__m128i *)(dst + g * 16), _mm512_cvtepi32_epi8(r));
	}
}

static void ibp_avx512_decode_static_v(const ibp_codec_t *c, const ibp_cluster_t *cl,
				     const uint8_t *body, uint64_t avail, uint8_t *dst)
{
	const uint64_t nvg = cl->nvg;
	if (nvg == 0) {
		ibp_avx512_decode_static_from(c, cl, body, avail, dst, 0);
		return;
	}
	const unsigned C = c->C;
	uint64_t G;
	switch (C) {
	case 1:
		ibp_avx512_static_c12(cl, body, avail, dst, 1);
		G = 16;
		break;
	case 2:
		ibp_avx512_static_c12(cl, body, avail, dst, 2);
		G = 16;
		break;
	default: /* 4: nvg = 0 for C = 8 */
		ibp_avx512_static_c4(cl, body, avail, dst);
		G = 8;
		break;
	}
	/* chunks with more than two static runs: pdep (fields lie within avail) */
	for (uint64_t i = 0; i < cl->nvfix; i++) {
		const uint64_t j = cl->vfix[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * C, _pdep_u64(v, cl->nm[j]) | cl->b[j], C);
	}
	ibp_avx512_decode_static_from(c, cl, body, avail, dst, nvg * G);
}

const ibp_kernels_t ibp_kernels_avx512 = {
	IBP_IMPL_AVX512,
	ibp_avx512_encode,
	ibp_avx512_decode_static_v,
	ibp_avx512_decode_exc,
};
