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
 * group use the scalar (BMI2) template loop. A C = 4 cluster whose fields
 * all fit 32-bit lanes takes 16 chunks per group (the vg16 tables).
 * Rows with exceptions of C = 2 and 4 clusters with the fused tables
 * (ibp_vbmi_t.fg) decode static part and exceptions in one pass of 64-byte
 * groups, the partial last group included (ibp_avx512_row_f), except C = 2
 * rows under two exceptions a group: the multishift static part, then the
 * scalar walk. Rows too sparse for the SIMD walks take the walks shared
 * with AVX2 (codec_internal.h: xscalar, and for BITMAP rows with Xvals the
 * run walk xruns: runs of hits by a count of ones, their patches by
 * masked vector ops; its chunk indices by vpcompressw, VBMI2, else the
 * AVX2 kernel's).
 * Encoding is the BMI2 template kernel, with the exceptions of 8 chunks
 * found by one compare (IBP_K_MISS8) and, in the one-pass encoder (C < 8,
 * no Xvals), those of 64 chunks and their words' exception masks by C
 * compares (IBP_K_XBLOCK); the encoder's sizing pass (row_stats) is SIMD
 * too.
 */
/* Built with -mavx512vbmi (CMakeLists.txt): the dispatcher checks the CPU for VBMI. */
#include <immintrin.h>

#include "bitpack/codec_internal.h"
#include "util/cpu.h"

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

/* Exceptions among the 8 full chunks [j, j + 8) as bits 0..7. */
IBP_INLINE __m512i ibp_avx512_ld8(const uint8_t *p, const unsigned C)
{
	switch (C) {
	case 1: return _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)p));
	case 2: return _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)p));
	case 4: return _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)p));
	default: return _mm512_loadu_si512(p);
	}
}
IBP_INLINE unsigned ibp_avx512_miss8(const ibp_cluster_t *cl, const uint8_t *row, uint64_t j,
				     const unsigned C)
{
	__m512i xm = _mm512_and_si512(ibp_avx512_ld8(row + j * C, C), _mm512_loadu_si512(cl->m + j));
	return _mm512_cmpneq_epu64_mask(xm, _mm512_loadu_si512(cl->b + j));
}
#define IBP_K_MISS8(cl, row, j, C) ibp_avx512_miss8(cl, row, j, C)
/* The encoder's block of 64 full chunks (see the template's scalar
 * xblock): a compare per 64 bytes gives the miss bits, and a masked move
 * the words' exception masks. */
IBP_INLINE uint64_t ibp_avx512_xblock(const uint8_t *row, const uint8_t *mk, const uint8_t *bk,
				      uint64_t *mm, const unsigned C)
{
	uint64_t miss = 0;
	for (unsigned v = 0; v < C; v++) {
		const __m512i m = _mm512_loadu_si512(mk + 64 * v);
		const __m512i xm = _mm512_and_si512(_mm512_loadu_si512(row + 64 * v), m);
		const __m512i b = _mm512_loadu_si512(bk + 64 * v);
		if (C == 1) {
			const __mmask64 k = _mm512_cmpneq_epi8_mask(xm, b);
			_mm512_storeu_si512(mm, _mm512_maskz_mov_epi8(k, m));
			miss = k;
		} else if (C == 2) {
			const __mmask32 k = _mm512_cmpneq_epi16_mask(xm, b);
			_mm512_storeu_si512(mm + 8 * v, _mm512_maskz_mov_epi16(k, m));
			miss |= (uint64_t)k << (32 * v);
		} else {
			const __mmask16 k = _mm512_cmpneq_epi32_mask(xm, b);
			_mm512_storeu_si512(mm + 8 * v, _mm512_maskz_mov_epi32(k, m));
			miss |= (uint64_t)k << (16 * v);
		}
	}
	return miss;
}
#define IBP_K_XBLOCK(row, mk, bk, mm, C) ibp_avx512_xblock(row, mk, bk, mm, C)
/* The chunk indices of w's set bits (base + bit, base + 63 < 65536), in
 * order, by two compresses of 32 16-bit lanes (VBMI2): out needs room
 * for the count plus 32. */
__attribute__((target("avx512vbmi2"))) IBP_INLINE uint64_t ibp_avx512_idx64(uint64_t w, uint32_t base, uint16_t *out)
{
	const __m512i b = _mm512_add_epi16(_mm512_set1_epi16((short)base),
					   _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15,
							    14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
	const __mmask32 k0 = (__mmask32)w, k1 = (__mmask32)(w >> 32);
	const uint64_t n0 = (uint64_t)__builtin_popcount(k0);
	_mm512_storeu_si512(out, _mm512_maskz_compress_epi16(k0, b));
	_mm512_storeu_si512(out + n0, _mm512_maskz_compress_epi16(k1, _mm512_add_epi16(b, _mm512_set1_epi16(32))));
	return n0 + (uint64_t)__builtin_popcount(k1);
}

/* dst's 64 chunks from chunk 64 wi ^= their hit patches under hm. */
IBP_INLINE void ibp_avx512_xr_hits(uint8_t *dst, const uint8_t *xbc, uint64_t wi, uint64_t hm, const unsigned C)
{
	uint8_t *d = dst + wi * 64 * C;
	const uint8_t *x = xbc + wi * 64 * C;
	if (C == 1) {
		_mm512_mask_storeu_epi8(d, hm, _mm512_xor_si512(_mm512_maskz_loadu_epi8(hm, d), _mm512_maskz_loadu_epi8(hm, x)));
	} else if (C == 2) {
		for (unsigned h = 0; h < 2; h++) {
			const __mmask32 k = (__mmask32)(hm >> (32 * h));
			_mm512_mask_storeu_epi16(d + 64 * h, k, _mm512_xor_si512(_mm512_maskz_loadu_epi16(k, d + 64 * h),
										  _mm512_maskz_loadu_epi16(k, x + 64 * h)));
		}
	} else {
		for (unsigned q = 0; q < 4; q++) {
			const __mmask16 k = (__mmask16)(hm >> (16 * q));
			_mm512_mask_storeu_epi32(d + 64 * q, k, _mm512_xor_si512(_mm512_maskz_loadu_epi32(k, d + 64 * q),
										  _mm512_maskz_loadu_epi32(k, x + 64 * q)));
		}
	}
}

/* The field widths of w's set bits' chunks (ew + 64 words), in order:
 * out needs room for the count plus 64. ew's bytes past D are not read. */
__attribute__((target("avx512vbmi2"))) IBP_INLINE void ibp_avx512_ew64(uint64_t w, const uint8_t *ew, uint8_t *out)
{
	_mm512_storeu_si512(out, _mm512_maskz_compress_epi8(w, _mm512_maskz_loadu_epi8(w, ew)));
}
#define IBP_K_XR_EW64(w, ew, out) ibp_avx512_ew64(w, ew, out)
#define IBP_K_XR_IDX64(w, base, out) ibp_avx512_idx64(w, base, out)
#define IBP_K_XR_HITS(dst, xbc, wi, hm, R, C) ibp_avx512_xr_hits(dst, xbc, wi, hm, C)
#define IBP_K_XR_ATTR __attribute__((target("avx512vbmi2")))
#define IBP_K(name) ibp_avx512_##name
#define IBP_K_WIDE_PEXT /* the template may call _pext_u64 */
#define IBP_CODEC_KERNEL_BODY
#include "bitpack/codec_internal.h"
#undef IBP_K

/* The 64 bytes at p, or its first rem bytes and zeros when fewer are
 * readable: a plain load where all 64 are. Masked loads of rows decoded
 * where they lie (not from a copy) left sequential f32 rows 25% slower on
 * Zen 5 (docs/BENCHMARKS.md "Runs in order, plain loads"). */
IBP_INLINE __m512i ibp_avx512_load_upto(const uint8_t *p, uint64_t rem)
{
	if (rem >= 64)
		return _mm512_loadu_si512(p);
	return _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, (unsigned)rem), p);
}

/* The group's 64-byte window; body[base, avail) is readable, base <= avail. */
IBP_INLINE __m512i ibp_avx512_window(const uint8_t *body, uint64_t avail, uint64_t base,
				     const ibp_vgroup_t *q)
{
	const __m512i w = ibp_avx512_load_upto(body + base, avail - base);
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

/* C = 4 in 16 lanes of 32 bits (the vg16 tables: every field fits its
 * lane), then the fix-ups and the scalar rest as below. */
static void ibp_avx512_static_c4w(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				  uint64_t avail, uint8_t *dst)
{
	const ibp_vgroup_t *q = cl->vg16;
	const uint64_t *vb = cl->vbase16;
	const uint64_t nvg = cl->nvg16;
	for (uint64_t g = 0; g < nvg; g++, q++) {
		const __m512i w = ibp_avx512_window(body, avail, vb[g], q);
		const __m512i t0 = _mm512_sllv_epi32(_mm512_srlv_epi32(w, _mm512_load_si512((const void *)q->sh)),
						     _mm512_load_si512((const void *)q->p0));
		const __m512i t1 = _mm512_sllv_epi32(_mm512_srlv_epi32(w, _mm512_load_si512((const void *)q->q1)),
						     _mm512_load_si512((const void *)q->p1));
		__m512i r = _mm512_ternarylogic_epi32(t0, _mm512_load_si512((const void *)q->m0),
						      _mm512_load_si512((const void *)q->b), IBP_TL_ANDOR);
		r = _mm512_ternarylogic_epi32(t1, _mm512_load_si512((const void *)q->m1), r, IBP_TL_ANDOR);
		_mm512_storeu_si512((void *)(dst + g * 64), r);
	}
	for (uint64_t i = 0; i < cl->nvfix16; i++) {
		const uint64_t j = cl->vfix16[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * 4, _pdep_u64(v, cl->nm[j]) | cl->b[j], 4);
	}
	ibp_avx512_decode_static_from(c, cl, body, avail, dst, nvg * 16);
}

/* C <= 2, 64 / C chunks per group by multishift (the vgm tables): one
 * permute, two multishifts and two ternary ops per 64 output bytes, with
 * no variable shifts or narrowing; then the fix-ups and the scalar rest. */
static void ibp_avx512_static_ms(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				 uint64_t avail, uint8_t *dst)
{
	const ibp_vbmi_t *vt = cl->vbmi;
	const ibp_msgroup_t *q = vt->vgm;
	const uint64_t *vb = vt->vbasem;
	const uint64_t nvg = vt->nvgm, C = c->C;
	for (uint64_t g = 0; g < nvg; g++, q++) {
		const __m512i win = ibp_avx512_load_upto(body + vb[g], avail - vb[g]);
		const __m512i w = _mm512_permutexvar_epi8(_mm512_load_si512((const void *)q->idx), win);
		const __m512i t0 = _mm512_multishift_epi64_epi8(_mm512_load_si512((const void *)q->c0), w);
		const __m512i t1 = _mm512_multishift_epi64_epi8(_mm512_load_si512((const void *)q->c1), w);
		__m512i r = _mm512_ternarylogic_epi64(t0, _mm512_load_si512((const void *)q->m0),
						      _mm512_load_si512((const void *)q->b), IBP_TL_ANDOR);
		r = _mm512_ternarylogic_epi64(t1, _mm512_load_si512((const void *)q->m1), r, IBP_TL_ANDOR);
		/* two halves: the exception walk XORs 32-byte halves, and stores
		 * of its loads' size forward to them */
		_mm256_storeu_si256((__m256i *)(dst + g * 64), _mm512_castsi512_si256(r));
		_mm256_storeu_si256((__m256i *)(dst + g * 64 + 32), _mm512_extracti64x4_epi64(r, 1));
	}
	for (uint64_t i = 0; i < vt->nvfixm; i++) {
		const uint64_t j = vt->vfixm[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * C, _pdep_u64(v, cl->nm[j]) | cl->b[j], (unsigned)C);
	}
	if (nvg * (64 / C) < c->D) /* a call, and a copy of the cluster in it */
		ibp_avx512_decode_static_from(c, cl, body, avail, dst, nvg * (64 / C));
}

static void ibp_avx512_decode_static_v(const ibp_codec_t *c, const ibp_cluster_t *cl,
				     const uint8_t *body, uint64_t avail, uint8_t *dst)
{
	const uint64_t nvg = cl->nvg;
	if (cl->vbmi && cl->vbmi->nvgm) {
		ibp_avx512_static_ms(c, cl, body, avail, dst);
		return;
	}
	if (cl->nvg16) {
		ibp_avx512_static_c4w(c, cl, body, avail, dst);
		return;
	}
	if (nvg == 0) {
		/* C = 4 clusters without lane tables: AVX2's qword pairs or two
		 * windows a lane where it built them, faster than the scalar
		 * loop (CLEAN rows of the k384 weights) */
		if (c->C == 4 && (cl->w2 || cl->q2))
			ibpi_kernels_avx2.decode_static(c, cl, body, avail, dst);
		else
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

/* ---- the exception walk, G chunks at a time ----------------------------
 *
 * Without Xvals an exception's width is e_j, known from the chunk alone,
 * so the field positions of a group's exceptions are S plus an exclusive
 * prefix sum of the widths of the chunks marked in the row's bitmap (a
 * LIST header is expanded into one first). For each group of G chunks
 * with exceptions: the marked widths (others 0) are prefix-summed across
 * the lanes, the group's fields (at most G * W + 7 bits) lie in one
 * 64-byte window loaded masked at the first field's byte, a byte permute
 * gives each lane the LB bytes at its field, a variable shift and mask
 * extract the field, the two runs of m_j deposit it, XOR b_j gives the
 * delta to the matched chunk, and the marked deltas are XORed into the
 * row (bytes past R masked off). Chunks whose m_j has more than two runs
 * are patched with pdep after. A group's total width is checked against
 * the readable bits before anything of it is read, which is what the
 * scalar walk's per-field checks amount to. */

IBP_INLINE uint64_t ibp_avx512_fix(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				   uint64_t avail, uint64_t j, uint64_t bit, uint8_t *dst, const unsigned C)
{
	const uint64_t v = ibp_read_bits(body, avail, bit, cl->ew[j]);
	ibp_avx512_patch_delta(c, j, _pdep_u64(v, cl->m[j]) ^ cl->b[j], dst, C);
	return 0;
}

/* Inclusive prefix sums of 16 lanes of 32 bits */
IBP_INLINE __m512i ibp_avx512_psum32(__m512i w)
{
	const __m512i zero = _mm512_setzero_si512();
	__m512i s = _mm512_add_epi32(w, _mm512_alignr_epi32(w, zero, 15));
	s = _mm512_add_epi32(s, _mm512_alignr_epi32(s, zero, 14));
	s = _mm512_add_epi32(s, _mm512_alignr_epi32(s, zero, 12));
	return _mm512_add_epi32(s, _mm512_alignr_epi32(s, zero, 8));
}

/* Inclusive prefix sums of 32 lanes of 16 bits: within 128-bit blocks,
 * then the earlier blocks' totals added */
IBP_INLINE __m512i ibp_avx512_psum16(__m512i w)
{
	const __m512i zero = _mm512_setzero_si512();
	/* the last lane of each 128-bit block to all its lanes */
	const __m512i blast = _mm512_set1_epi16(0x0F0E);
	__m512i s = _mm512_add_epi16(w, _mm512_bslli_epi128(w, 2));
	s = _mm512_add_epi16(s, _mm512_bslli_epi128(s, 4));
	s = _mm512_add_epi16(s, _mm512_bslli_epi128(s, 8));
	/* block totals T, their inclusive scan P; s + P - T */
	const __m512i t = _mm512_shuffle_epi8(s, blast);
	__m512i p = _mm512_add_epi16(t, _mm512_alignr_epi64(t, zero, 6));
	p = _mm512_add_epi16(p, _mm512_alignr_epi64(p, zero, 4));
	return _mm512_add_epi16(s, _mm512_sub_epi16(p, t));
}

/* 16 lanes of 32 bits: C = 1, 2 (the xg tables) and C = 4 (xg4: every
 * field fits its lane at its bit offset, no narrowing) */
IBP_INLINE uint64_t ibp_avx512_xwalk_w32(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
					 const ibp_xgroup_t *q, uint64_t nxg, const uint8_t *body,
					 uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst, const unsigned C)
{
	const uint64_t R = c->R;
	const __m512i one = _mm512_set1_epi32(1), seven = _mm512_set1_epi32(7);
	/* each lane's byte 0 to all its four bytes, plus 0, 1, 2, 3 */
	const __m512i bc = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
	const __m512i inc = _mm512_set1_epi32(0x03020100);
	for (uint64_t g = 0; g < nxg; g++, q++) {
		/* no branch on empty groups: a row's groups with and without
		 * exceptions alternate unpredictably */
		const __mmask16 mk = (__mmask16)(bm[g >> 2] >> (16 * (g & 3)));
		const __m512i w = _mm512_maskz_load_epi32(mk, q->w);
		const __m512i s = ibp_avx512_psum32(w);
		const uint64_t tot = (uint32_t)_mm_extract_epi32(_mm512_extracti32x4_epi32(s, 3), 3);
		if (tot > lim - e)
			return UINT64_MAX;
		/* field bit of each lane, from byte b0 of the body */
		const uint64_t b0 = e >> 3, rem = avail - b0; /* e <= lim: b0 <= avail */
		const __m512i rel = _mm512_add_epi32(_mm512_sub_epi32(s, w), _mm512_set1_epi32((int)(e & 7)));
		const __m512i win = ibp_avx512_load_upto(body + b0, rem);
		const __m512i bi = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi32(rel, 3), bc), inc);
		const __m512i word = _mm512_permutexvar_epi8(bi, win);
		const __m512i v = _mm512_and_si512(_mm512_srlv_epi32(word, _mm512_and_si512(rel, seven)),
						   _mm512_sub_epi32(_mm512_sllv_epi32(one, w), one));
		const __m512i t0 = _mm512_and_si512(_mm512_sllv_epi32(v, _mm512_load_si512((const void *)q->p0)),
						    _mm512_load_si512((const void *)q->m0));
		const __m512i t1 = _mm512_and_si512(
			_mm512_sllv_epi32(_mm512_srlv_epi32(v, _mm512_load_si512((const void *)q->s1)),
					  _mm512_load_si512((const void *)q->p1)),
			_mm512_load_si512((const void *)q->m1));
		/* t0 ^ t1 ^ b: the runs are disjoint, so ^ is | */
		const __mmask16 fx = cl->xfix ? (__mmask16)(cl->xfix[g >> 2] >> (16 * (g & 3))) : 0;
		const __m512i d = _mm512_maskz_ternarylogic_epi32((__mmask16)(mk & ~fx), t0, t1,
								  _mm512_load_si512((const void *)q->b), 0x96);
		const uint64_t at = g * 16 * C, nb = R - at < 16 * C ? R - at : 16 * C;
		if (C == 4 && nb == 64) {
			_mm512_storeu_si512((void *)(dst + at), _mm512_xor_si512(_mm512_loadu_si512(dst + at), d));
		} else if (C == 4) {
			const __mmask64 kb = _bzhi_u64(~0ull, (unsigned)nb);
			const __m512i o = _mm512_maskz_loadu_epi8(kb, dst + at);
			_mm512_mask_storeu_epi8(dst + at, kb, _mm512_xor_si512(o, d));
		} else if (C == 2 && nb == 32) {
			__m256i *p = (__m256i *)(void *)(dst + at);
			_mm256_storeu_si256(p, _mm256_xor_si256(_mm256_loadu_si256(p), _mm512_cvtepi32_epi16(d)));
		} else if (C == 2) {
			const __mmask32 kb = (__mmask32)_bzhi_u64(~0ull, (unsigned)nb);
			const __m256i o = _mm256_maskz_loadu_epi8(kb, dst + at);
			_mm256_mask_storeu_epi8(dst + at, kb, _mm256_xor_si256(o, _mm512_cvtepi32_epi16(d)));
		} else if (nb == 16) {
			__m128i *p = (__m128i *)(void *)(dst + at);
			_mm_storeu_si128(p, _mm_xor_si128(_mm_loadu_si128(p), _mm512_cvtepi32_epi8(d)));
		} else {
			const __mmask16 kb = (__mmask16)_bzhi_u64(~0ull, (unsigned)nb);
			const __m128i o = _mm_maskz_loadu_epi8(kb, dst + at);
			_mm_mask_storeu_epi8(dst + at, kb, _mm_xor_si128(o, _mm512_cvtepi32_epi8(d)));
		}
		if (mk & fx) {
			uint32_t r[16];
			_mm512_storeu_si512((void *)r, rel);
			for (unsigned f = mk & fx; f; f &= f - 1) {
				const unsigned l = (unsigned)__builtin_ctz(f);
				ibp_avx512_fix(c, cl, body, avail, g * 16 + l, 8 * b0 + r[l], dst, C);
			}
		}
		e += tot;
	}
	return e;
}

/* C = 2: 32 lanes of 16 bits (the xg2 tables), half the groups of the
 * 16-lane walk. The prefix sum runs within 128-bit blocks, then adds the
 * earlier blocks' totals; fields are extracted and deposited by two
 * multishifts (ibp_xgroup2_t). Out of line: inlined, it seemed to slow
 * the other chunk sizes' walks in decode_exc_v a little (f32 -1..2%). */
static __attribute__((noinline)) uint64_t ibp_avx512_xwalk_c2w(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
				     const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst)
{
	const uint64_t R = c->R, nxg = cl->vbmi->nxg2;
	const ibp_xgroup2_t *q = cl->vbmi->xg2;
	/* each qword's first lane to its 4 lanes; its low byte to the
	 * qword's 8 bytes; each lane's low byte to both its bytes */
	const __m512i qfirst = _mm512_set4_epi32(0x09080908, 0x09080908, 0x01000100, 0x01000100);
	const __m512i qbyte = _mm512_set4_epi32(0x08080808, 0x08080808, 0x00000000, 0x00000000);
	const __m512i lbyte = _mm512_set4_epi32(0x0E0E0C0C, 0x0A0A0808, 0x06060404, 0x02020000);
	const __m512i inc = _mm512_set1_epi64(0x0706050403020100ll);
	const __m512i not7 = _mm512_set1_epi16(~7);
	for (uint64_t g = 0; g < nxg; g++, q++) {
		const __mmask32 mk = (__mmask32)(bm[g >> 1] >> (32 * (g & 1)));
		const __m512i w = _mm512_maskz_loadu_epi16(mk, q->w);
		const __m512i s = ibp_avx512_psum16(w);
		const uint64_t tot = (uint16_t)_mm_extract_epi16(_mm512_extracti32x4_epi32(s, 3), 7);
		if (tot > lim - e)
			return UINT64_MAX;
		const uint64_t b0 = e >> 3, rem = avail - b0; /* e <= lim: b0 <= avail */
		const __m512i rel = _mm512_add_epi16(_mm512_sub_epi16(s, w), _mm512_set1_epi16((short)(e & 7)));
		const __m512i win = ibp_avx512_load_upto(body + b0, rem);
		const __m512i bi = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi16(rel, 3), qbyte), inc);
		const __m512i word = _mm512_permutexvar_epi8(bi, win);
		/* field bit within its qword, to both bytes of the lane */
		const __m512i f = _mm512_shuffle_epi8(
			_mm512_sub_epi16(rel, _mm512_and_si512(_mm512_shuffle_epi8(rel, qfirst), not7)), lbyte);
		const __m512i t0 = _mm512_multishift_epi64_epi8(
			_mm512_add_epi8(f, _mm512_load_si512((const void *)q->c0)), word);
		const __m512i t1 = _mm512_multishift_epi64_epi8(
			_mm512_add_epi8(f, _mm512_load_si512((const void *)q->c1)), word);
		/* (t0 & m0) ^ (t1 & m1) ^ b: the runs are disjoint */
		__m512i d = _mm512_ternarylogic_epi64(t0, _mm512_load_si512((const void *)q->m0),
						      _mm512_load_si512((const void *)q->b), 0x6A);
		d = _mm512_ternarylogic_epi64(t1, _mm512_load_si512((const void *)q->m1), d, 0x6A);
		const __mmask32 fx = cl->xfix ? (__mmask32)(cl->xfix[g >> 1] >> (32 * (g & 1))) : 0;
		d = _mm512_maskz_mov_epi16((__mmask32)(mk & ~fx), d);
		const uint64_t at = g * 64, nb = R - at < 64 ? R - at : 64;
		if (nb == 64) {
			_mm512_storeu_si512((void *)(dst + at), _mm512_xor_si512(_mm512_loadu_si512(dst + at), d));
		} else {
			const __mmask64 kb = _bzhi_u64(~0ull, (unsigned)nb);
			const __m512i o = _mm512_maskz_loadu_epi8(kb, dst + at);
			_mm512_mask_storeu_epi8(dst + at, kb, _mm512_xor_si512(o, d));
		}
		if (mk & fx) {
			uint16_t r[32];
			_mm512_storeu_si512((void *)r, rel);
			for (uint32_t x = mk & fx; x; x &= x - 1) {
				const unsigned l = (unsigned)__builtin_ctz(x);
				ibp_avx512_fix(c, cl, body, avail, g * 32 + l, 8 * b0 + r[l], dst, 2);
			}
		}
		e += tot;
	}
	return e;
}

/* C = 4: 8 lanes of 64 bits */
static uint64_t ibp_avx512_xwalk_c4(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
				    const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst)
{
	const uint64_t R = c->R, nxg = cl->nxg;
	const ibp_xgroup_t *q = cl->xg;
	const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi64(1), seven = _mm512_set1_epi64(7);
	const __m512i bc = _mm512_set4_epi32(0x08080808, 0x08080808, 0x00000000, 0x00000000);
	const __m512i inc = _mm512_set1_epi64(0x0706050403020100ll);
	for (uint64_t g = 0; g < nxg; g++, q++) {
		const __mmask8 mk = (__mmask8)(bm[g >> 3] >> (8 * (g & 7)));
		const __m512i w = _mm512_maskz_load_epi64(mk, q->w);
		__m512i s = _mm512_add_epi64(w, _mm512_alignr_epi64(w, zero, 7));
		s = _mm512_add_epi64(s, _mm512_alignr_epi64(s, zero, 6));
		s = _mm512_add_epi64(s, _mm512_alignr_epi64(s, zero, 4));
		const uint64_t tot = (uint64_t)_mm_extract_epi64(_mm512_extracti32x4_epi32(s, 3), 1);
		if (tot > lim - e)
			return UINT64_MAX;
		const uint64_t b0 = e >> 3, rem = avail - b0;
		const __m512i rel = _mm512_add_epi64(_mm512_sub_epi64(s, w), _mm512_set1_epi64((long long)(e & 7)));
		const __m512i win = ibp_avx512_load_upto(body + b0, rem);
		const __m512i bi = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi64(rel, 3), bc), inc);
		const __m512i word = _mm512_permutexvar_epi8(bi, win);
		const __m512i v = _mm512_and_si512(_mm512_srlv_epi64(word, _mm512_and_si512(rel, seven)),
						   _mm512_sub_epi64(_mm512_sllv_epi64(one, w), one));
		const __m512i t0 = _mm512_and_si512(_mm512_sllv_epi64(v, _mm512_load_si512((const void *)q->p0)),
						    _mm512_load_si512((const void *)q->m0));
		const __m512i t1 = _mm512_and_si512(
			_mm512_sllv_epi64(_mm512_srlv_epi64(v, _mm512_load_si512((const void *)q->s1)),
					  _mm512_load_si512((const void *)q->p1)),
			_mm512_load_si512((const void *)q->m1));
		const __mmask8 fx = cl->xfix ? (__mmask8)(cl->xfix[g >> 3] >> (8 * (g & 7))) : 0;
		const __m512i d = _mm512_maskz_ternarylogic_epi64((__mmask8)(mk & ~fx), t0, t1,
								  _mm512_load_si512((const void *)q->b), 0x96);
		const uint64_t at = g * 32, nb = R - at < 32 ? R - at : 32;
		if (nb == 32) {
			__m256i *p = (__m256i *)(void *)(dst + at);
			_mm256_storeu_si256(p, _mm256_xor_si256(_mm256_loadu_si256(p), _mm512_cvtepi64_epi32(d)));
		} else {
			const __mmask32 kb = (__mmask32)_bzhi_u64(~0ull, (unsigned)nb);
			const __m256i o = _mm256_maskz_loadu_epi8(kb, dst + at);
			_mm256_mask_storeu_epi8(dst + at, kb, _mm256_xor_si256(o, _mm512_cvtepi64_epi32(d)));
		}
		if (mk & fx) {
			uint64_t r[8];
			_mm512_storeu_si512((void *)r, rel);
			for (unsigned f = mk & fx; f; f &= f - 1) {
				const unsigned l = (unsigned)__builtin_ctz(f);
				ibp_avx512_fix(c, cl, body, avail, g * 8 + l, 8 * b0 + r[l], dst, 4);
			}
		}
		e += tot;
	}
	return e;
}

/* ---- fused rows (ibp_vbmi_t.fg, C = 2 and 4) ---------------------------
 *
 * Per group of 64 / C chunks: the static lanes by multishift as in
 * static_ms (up to three runs; the third only when some chunk has one) and
 * the exception lanes as in xwalk_c2w / xwalk_w32, combined as static |
 * (exception ? deposit : b) and stored once (the partial last group masked
 * to R). Then the chunks of ffix get their static bits (their lanes have
 * none) and those of xfix their exception bits (their lanes have b_j).
 * bm: the row's exceptions; e = S <= lim. The exception part's end is
 * checked once, after the groups: a window past avail reads zeros
 * (masked), and a corrupt row may leave dst partly written (decode_exc's
 * contract). */

/* r | the static runs of group q, whose fields lie in the window at fb */
IBP_INLINE __m512i ibp_avx512_fstatic(const ibp_fstatic_t *q, const uint8_t *body, uint64_t avail, uint64_t fb,
				      __m512i r, const int three)
{
	/* fb <= S / 8 < avail */
	const __m512i sw = _mm512_permutexvar_epi8(_mm512_load_si512((const void *)q->idx),
						  ibp_avx512_load_upto(body + fb, avail - fb));
	const __m512i s0 = _mm512_multishift_epi64_epi8(_mm512_load_si512((const void *)q->c0), sw);
	const __m512i s1 = _mm512_multishift_epi64_epi8(_mm512_load_si512((const void *)q->c1), sw);
	r = _mm512_ternarylogic_epi64(s0, _mm512_load_si512((const void *)q->sm0), r, IBP_TL_ANDOR);
	r = _mm512_ternarylogic_epi64(s1, _mm512_load_si512((const void *)q->sm1), r, IBP_TL_ANDOR);
	if (three) {
		const __m512i s2 = _mm512_multishift_epi64_epi8(_mm512_load_si512((const void *)q->c2), sw);
		r = _mm512_ternarylogic_epi64(s2, _mm512_load_si512((const void *)q->sm2), r, IBP_TL_ANDOR);
	}
	return r;
}

/* Stores group r at byte at of the row (the partial last group masked) */
IBP_INLINE void ibp_avx512_fstore(uint8_t *dst, uint64_t R, uint64_t at, __m512i r)
{
	if (R - at >= 64)
		_mm512_storeu_si512((void *)(dst + at), r);
	else
		_mm512_mask_storeu_epi8(dst + at, _bzhi_u64(~0ull, (unsigned)(R - at)), r);
}

/* The end check and the ffix chunks' static bits (their lanes have none) */
IBP_INLINE uint64_t ibp_avx512_fend(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				    uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst, const unsigned C)
{
	const ibp_vbmi_t *vt = cl->vbmi;
	if (e > lim) /* the exception part passes the row's end */
		return UINT64_MAX;
	for (uint64_t i = 0; i < vt->nffix; i++) {
		const uint64_t j = vt->ffix[i];
		const uint64_t sv = _pdep_u64(ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]), cl->nm[j]);
		ibp_avx512_patch_delta(c, j, sv, dst, C);
	}
	return e;
}

/* The 64-byte window of the exception fields from body bit e on, bytes
 * past avail masked to zeros (a window wholly past it too: the walk's end
 * check catches that row); *b0 = e / 8. */
IBP_INLINE __m512i ibp_avx512_xwindow(const uint8_t *body, uint64_t avail, uint64_t e, uint64_t *b0)
{
	const uint64_t b = e >> 3, at = b < avail ? b : avail, rem = avail - at;
	*b0 = b;
	return ibp_avx512_load_upto(body + at, rem);
}

/* The fix-ups of a group's xfix lanes (C-byte lanes of rel: each field's
 * bit from byte b0), chunks j0 + lane; their fields must lie within avail. */
IBP_INLINE void ibp_avx512_fixlanes(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				    uint64_t avail, __m512i rel, uint64_t lanes, uint64_t j0, uint64_t b0,
				    uint8_t *dst, const unsigned C)
{
	uint8_t rr[64];
	_mm512_storeu_si512((void *)rr, rel);
	for (; lanes; lanes &= lanes - 1) {
		const unsigned l = (unsigned)__builtin_ctzll(lanes);
		uint64_t r = 0;
		memcpy(&r, rr + C * l, C); /* little-endian */
		ibp_avx512_fix(c, cl, body, avail, j0 + l, 8 * b0 + r, dst, C);
	}
}

/* vpopcntd (AVX-512 VPOPCNTDQ) as inline assembly: the file is built for
 * VBMI only, and only codecs built on a CPU with VPOPCNTDQ
 * (ibp_vbmi_t.funi) take the path that runs it. */
IBP_INLINE __m512i ibp_avx512_popcnt32(__m512i x)
{
	__m512i r;
	__asm__("vpopcntd %1, %0" : "=v"(r) : "v"(x));
	return r;
}

/* C = 4: 16 lanes of 32 bits. uni (ibp_vbmi_t.funi): the exception lanes'
 * offsets are w times their rank (the popcount of the exceptions below
 * them), the group's total w times its count, in place of the prefix sum
 * (docs/BENCHMARKS.md, "Ranks for prefix sums": about 9% on 400-byte f32
 * rows on Zen 4). */
IBP_INLINE uint64_t ibp_avx512_row_f4_x(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
					const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst,
					const int has_fix, const int three, const int uni)
{
	const ibp_vbmi_t *vt = cl->vbmi;
	const ibp_f4group_t *q = (const ibp_f4group_t *)vt->fg;
	const uint64_t R = c->R, ng = vt->nfg, *fb = vt->fbase, *xfix = cl->xfix;
	const __m512i seven = _mm512_set1_epi32(7);
	const __m512i bc = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
	const __m512i inc = _mm512_set1_epi32(0x03020100);
	/* lane l: the bits of the lanes below it */
	const __m512i below = _mm512_set_epi32(0x7fff, 0x3fff, 0x1fff, 0xfff, 0x7ff, 0x3ff, 0x1ff, 0xff, 0x7f, 0x3f, 0x1f,
					       0xf, 7, 3, 1, 0);
	for (uint64_t g = 0; g < ng; g++, q++) {
		const __mmask16 mk = (__mmask16)(bm[g >> 2] >> (16 * (g & 3)));
		__m512i rel; /* an exception lane's field, in bits from byte e / 8 */
		uint64_t tot;
		if (uni) {
			/* rank <= 15, w <= 25: the product fits the lane's low 16 bits;
			 * the exception lanes' widths are all w0: w, not a broadcast */
			const uint32_t w0 = q->w[0];
			const __m512i rank = ibp_avx512_popcnt32(_mm512_and_si512(_mm512_set1_epi32((int)mk), below));
			rel = _mm512_add_epi32(_mm512_mullo_epi16(rank, _mm512_load_si512((const void *)q->w)),
					       _mm512_set1_epi32((int)(e & 7)));
			tot = (uint64_t)__builtin_popcount(mk) * w0;
		} else {
			const __m512i w = _mm512_maskz_load_epi32(mk, q->w);
			const __m512i s = ibp_avx512_psum32(w);
			tot = (uint32_t)_mm_extract_epi32(_mm512_extracti32x4_epi32(s, 3), 3);
			rel = _mm512_add_epi32(_mm512_sub_epi32(s, w), _mm512_set1_epi32((int)(e & 7)));
		}
		uint64_t b0;
		const __m512i win = ibp_avx512_xwindow(body, avail, e, &b0);
		const __m512i bi = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi32(rel, 3), bc), inc);
		const __m512i v = _mm512_srlv_epi32(_mm512_permutexvar_epi8(bi, win), _mm512_and_si512(rel, seven));
		const __m512i t0 = _mm512_sllv_epi32(v, _mm512_load_si512((const void *)q->xp0));
		const __m512i t1 = _mm512_sllv_epi32(_mm512_srlv_epi32(v, _mm512_load_si512((const void *)q->xs1)),
						     _mm512_load_si512((const void *)q->xp1));
		const __m512i x0 = _mm512_and_si512(t1, _mm512_load_si512((const void *)q->xm1));
		const __m512i x = _mm512_ternarylogic_epi32(t0, _mm512_load_si512((const void *)q->xm0), x0, IBP_TL_ANDOR);
		const __mmask16 fx = has_fix ? (__mmask16)(xfix[g >> 2] >> (16 * (g & 3))) : 0;
		/* exception lanes: the deposit; the others (and xfix's): b */
		__m512i r = _mm512_mask_mov_epi32(_mm512_load_si512((const void *)q->s.b), (__mmask16)(mk & ~fx), x);
		r = ibp_avx512_fstatic(&q->s, body, avail, fb[g], r, three);
		ibp_avx512_fstore(dst, R, g * 64, r);
		if (has_fix && (mk & fx)) {
			if (e + tot > lim) /* the fix-ups read fields: check first */
				return UINT64_MAX;
			ibp_avx512_fixlanes(c, cl, body, avail, rel, mk & fx, g * 16, b0, dst, 4);
		}
		e += tot;
	}
	return ibp_avx512_fend(c, cl, body, avail, e, lim, dst, 4);
}

/* C = 2: 32 lanes of 16 bits */
IBP_INLINE uint64_t ibp_avx512_row_f2_x(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
					const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst,
					const int has_fix, const int three)
{
	const ibp_vbmi_t *vt = cl->vbmi;
	const ibp_f2group_t *q = (const ibp_f2group_t *)vt->fg;
	const uint64_t R = c->R, ng = vt->nfg, *fb = vt->fbase, *xfix = cl->xfix;
	/* as in xwalk_c2w */
	const __m512i qfirst = _mm512_set4_epi32(0x09080908, 0x09080908, 0x01000100, 0x01000100);
	const __m512i qbyte = _mm512_set4_epi32(0x08080808, 0x08080808, 0x00000000, 0x00000000);
	const __m512i lbyte = _mm512_set4_epi32(0x0E0E0C0C, 0x0A0A0808, 0x06060404, 0x02020000);
	const __m512i inc = _mm512_set1_epi64(0x0706050403020100ll);
	const __m512i not7 = _mm512_set1_epi16(~7);
	for (uint64_t g = 0; g < ng; g++, q++) {
		const __mmask32 mk = (__mmask32)(bm[g >> 1] >> (32 * (g & 1)));
		const __m512i w = _mm512_maskz_loadu_epi16(mk, q->w);
		const __m512i s = ibp_avx512_psum16(w);
		const uint64_t tot = (uint16_t)_mm_extract_epi16(_mm512_extracti32x4_epi32(s, 3), 7);
		uint64_t b0;
		const __m512i win = ibp_avx512_xwindow(body, avail, e, &b0);
		const __m512i rel = _mm512_add_epi16(_mm512_sub_epi16(s, w), _mm512_set1_epi16((short)(e & 7)));
		const __m512i bi = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi16(rel, 3), qbyte), inc);
		const __m512i word = _mm512_permutexvar_epi8(bi, win);
		const __m512i f = _mm512_shuffle_epi8(
			_mm512_sub_epi16(rel, _mm512_and_si512(_mm512_shuffle_epi8(rel, qfirst), not7)), lbyte);
		const __m512i t0 = _mm512_multishift_epi64_epi8(
			_mm512_add_epi8(f, _mm512_load_si512((const void *)q->xc0)), word);
		const __m512i t1 = _mm512_multishift_epi64_epi8(
			_mm512_add_epi8(f, _mm512_load_si512((const void *)q->xc1)), word);
		const __m512i x0 = _mm512_and_si512(t1, _mm512_load_si512((const void *)q->xm1));
		const __m512i x = _mm512_ternarylogic_epi64(t0, _mm512_load_si512((const void *)q->xm0), x0, IBP_TL_ANDOR);
		const __mmask32 fx = has_fix ? (__mmask32)(xfix[g >> 1] >> (32 * (g & 1))) : 0;
		__m512i r = _mm512_mask_mov_epi16(_mm512_load_si512((const void *)q->s.b), (__mmask32)(mk & ~fx), x);
		r = ibp_avx512_fstatic(&q->s, body, avail, fb[g], r, three);
		ibp_avx512_fstore(dst, R, g * 64, r);
		if (has_fix && (mk & fx)) {
			if (e + tot > lim) /* the fix-ups read fields: check first */
				return UINT64_MAX;
			ibp_avx512_fixlanes(c, cl, body, avail, rel, mk & fx, g * 32, b0, dst, 2);
		}
		e += tot;
	}
	return ibp_avx512_fend(c, cl, body, avail, e, lim, dst, 2);
}

static uint64_t ibp_avx512_row_f(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
				 const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst)
{
	const int fix = cl->xfix != NULL, three = cl->vbmi->fthree;
#define IBP_ROW_F4(F, T, U) return ibp_avx512_row_f4_x(c, cl, bm, body, avail, e, lim, dst, F, T, U)
#define IBP_ROW_F2(F, T, U) return ibp_avx512_row_f2_x(c, cl, bm, body, avail, e, lim, dst, F, T)
/* R's instance for this row's fix-ups and third run (U: ranks, C = 4) */
#define IBP_ROW_BY(R, U)                      \
	do {                                  \
		if (three) {                  \
			if (fix)              \
				R(1, 1, U);   \
			R(0, 1, U);           \
		}                             \
		if (fix)                      \
			R(1, 0, U);           \
		R(0, 0, U);                   \
	} while (0)
	if (c->C == 4) {
		if (cl->vbmi->funi)
			IBP_ROW_BY(IBP_ROW_F4, 1);
		IBP_ROW_BY(IBP_ROW_F4, 0);
	}
	IBP_ROW_BY(IBP_ROW_F2, 0);
#undef IBP_ROW_BY
#undef IBP_ROW_F2
#undef IBP_ROW_F4
}

static uint64_t ibp_avx512_decode_exc_v(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
					const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
					uint64_t avail, uint8_t *dst)
{
	uint64_t bm[IBP_XWALK_MAXD / 64 + 1];
	if (mode == IBP_ROW_BITMAP) /* n is a placeholder: count the bitmap (bits >= D are clear) */
		n = ibp_bitmap_count(hdr, hdr_len);
	/* A group costs about as much as two scalar exceptions (measured on
	 * the sample KV and f32 tables, docs/BENCHMARKS.md): sparser rows keep
	 * the scalar walk. */
	const uint64_t ng = cl->vbmi && cl->vbmi->nxg4 ? cl->vbmi->nxg4 : cl->nxg;
	if (cl->nxg == 0 || c->D > IBP_XWALK_MAXD || n < IBP_XWALK_PER_GROUP * ng) {
		if (c->C > 4 || (cl->has_x && mode != IBP_ROW_BITMAP))
			return ibp_avx512_decode_exc(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
		if (cl->xbc && c->D <= 65536) /* BITMAP rows with Xvals: the run walk (16-bit chunk indices) */
			return ibpi_cpu()->avx512vbmi2 ? ibp_avx512_xruns(c, cl, hdr, hdr_len, body, avail, dst)
						       : ibpi_kernels_avx2.decode_exc(c, cl, mode, hdr, hdr_len, n, body,
										     avail, dst);
		return ibp_avx512_xscalar_v(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
	}
	if (!ibp_exc_bitmap(c, mode, hdr, hdr_len, ibp_hdr_readable(hdr, hdr_len, body, avail), n, bm))
		return UINT64_MAX;
	const uint64_t lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail, e = cl->S;
	if (e > lim)
		return UINT64_MAX;
	switch (c->C) {
	case 1: return ibp_avx512_xwalk_w32(c, cl, bm, cl->xg, cl->nxg, body, avail, e, lim, dst, 1);
	case 2:
		if (cl->vbmi && cl->vbmi->nxg2)
			return ibp_avx512_xwalk_c2w(c, cl, bm, body, avail, e, lim, dst);
		return ibp_avx512_xwalk_w32(c, cl, bm, cl->xg, cl->nxg, body, avail, e, lim, dst, 2);
	default:
		if (cl->vbmi && cl->vbmi->nxg4)
			return ibp_avx512_xwalk_w32(c, cl, bm, cl->vbmi->xg4, cl->vbmi->nxg4, body, avail, e,
						    lim, dst, 4);
		return ibp_avx512_xwalk_c4(c, cl, bm, body, avail, e, lim, dst);
	}
}

/* ibpi_row_stats, 8 chunks per step in 64-bit lanes: the encoder's sizing
 * pass was a third of pack time with the scalar loop. The last chunk (it
 * may be partial) and the chunks past the last full group are scalar. */
IBP_INLINE void ibp_avx512_row_stats_c(const ibp_codec_t *c, const ibp_cluster_t *cl,
				       const uint8_t *row, uint64_t *pn, uint64_t *pE,
				       const unsigned C, const int xv)
{
	const uint64_t D = c->D;
	uint64_t n = 0, j = 0;
	__m512i acc = _mm512_setzero_si512();
	const __m512i one = _mm512_set1_epi64(1);
	/* chunks [j, j + 8) all full: j + 8 <= D - 1 */
	for (; j + 9 <= D; j += 8) {
		__m512i x = ibp_avx512_ld8(row + j * C, C);
		__m512i xm = _mm512_and_si512(x, _mm512_loadu_si512(cl->m + j));
		__mmask8 miss = _mm512_cmpneq_epu64_mask(xm, _mm512_loadu_si512(cl->b + j));
		n += (uint64_t)__builtin_popcount(miss);
		__m512i ew = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(cl->ew + j)));
		if (xv) {
			/* hit on a miss: 1 bit; else e_j + the hit bit (xen) */
			__m512i xe = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(cl->xen + j)));
			__mmask8 hit = _mm512_cmpeq_epu64_mask(xm, _mm512_loadu_si512(cl->x + j));
			ew = _mm512_mask_mov_epi64(_mm512_add_epi64(ew, xe), hit, one);
		}
		acc = _mm512_mask_add_epi64(acc, miss, acc, ew);
	}
	uint64_t E = (uint64_t)_mm512_reduce_add_epi64(acc);
	for (; j < D; j++) {
		uint64_t x = j + 1 < D ? ibp_ld_chunk(row + j * C, C)
				       : ibp_ld_partial(row + j * C, c->last_bytes);
		uint64_t xm = x & cl->m[j];
		if (xm == cl->b[j])
			continue;
		n++;
		if (xv && xm == cl->x[j])
			E += 1;
		else
			E += (uint64_t)cl->ew[j] + (xv ? cl->xen[j] : 0);
	}
	*pn = n;
	*pE = E;
}

static void ibp_avx512_row_stats(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
				 uint64_t *n, uint64_t *E)
{
	if (cl->has_x) {
		switch (c->C) {
		case 1: ibp_avx512_row_stats_c(c, cl, row, n, E, 1, 1); break;
		case 2: ibp_avx512_row_stats_c(c, cl, row, n, E, 2, 1); break;
		case 4: ibp_avx512_row_stats_c(c, cl, row, n, E, 4, 1); break;
		default: ibp_avx512_row_stats_c(c, cl, row, n, E, 8, 1); break;
		}
	} else {
		switch (c->C) {
		case 1: ibp_avx512_row_stats_c(c, cl, row, n, E, 1, 0); break;
		case 2: ibp_avx512_row_stats_c(c, cl, row, n, E, 2, 0); break;
		case 4: ibp_avx512_row_stats_c(c, cl, row, n, E, 4, 0); break;
		default: ibp_avx512_row_stats_c(c, cl, row, n, E, 8, 0); break;
		}
	}
}

/* Rows with exceptions of a cluster with the fused tables; others as
 * decode_static_v, decode_exc_v. */
/* A row by the fused tables. Out of line: inlined beside the other paths
 * (the scalar walk), random f32 rows were 2-3% slower. */
static __attribute__((noinline)) uint64_t ibp_avx512_row_fused(const ibp_codec_t *c, const ibp_cluster_t *cl,
							       unsigned mode, const uint8_t *hdr, uint64_t hdr_len,
							       uint64_t n, const uint8_t *body, uint64_t avail,
							       uint8_t *dst)
{
	uint64_t bm[IBP_XWALK_MAXD / 64 + 1];
	if (mode == IBP_ROW_BITMAP && hdr_len > 8 && hdr_len <= 16) {
		/* as ibp_exc_bitmap (64 < D <= 128: bm[0, 2] hold it) without a
		 * memcpy call: two 8-byte loads within the header (a masked
		 * 64-byte load reached into the next line: random rows 3%
		 * slower) */
		bm[0] = ibp_load64(hdr);
		bm[1] = ibp_load64(hdr + hdr_len - 8) >> (8 * (16 - hdr_len));
		bm[2] = 0;
	} else if (!ibp_exc_bitmap(c, mode, hdr, hdr_len, ibp_hdr_readable(hdr, hdr_len, body, avail), n, bm)) {
		return UINT64_MAX;
	}
	const uint64_t lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	return ibp_avx512_row_f(c, cl, bm, body, avail, cl->S, lim, dst);
}

static uint64_t ibp_avx512_decode_row_v(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
					const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
					uint64_t avail, uint8_t *dst)
{
	/* C = 2 rows under IBP_XWALK_PER_GROUP exceptions a fused group: the
	 * static part by multishift (static_ms, a third of a fused group's
	 * vector operations) and the scalar walk (docs/BENCHMARKS.md,
	 * "AVX-512 decode": bf16 rows 9% faster); C = 4's static part has no
	 * multishift tables and stays fused. */
	if (cl->vbmi && cl->vbmi->nfg &&
	    (c->C != 2 || !cl->vbmi->nvgm ||
	     (mode == IBP_ROW_BITMAP ? ibp_bitmap_count(hdr, hdr_len) : n) >= IBP_XWALK_PER_GROUP * cl->vbmi->nfg)) {
		return ibp_avx512_row_fused(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
	}
	ibp_avx512_decode_static_v(c, cl, body, avail, dst);
	return ibp_avx512_decode_exc_v(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
}

const ibp_kernels_t ibpi_kernels_avx512 = {
	IBP_IMPL_AVX512,
	ibp_avx512_encode,
	ibp_avx512_decode_static_v,
	ibp_avx512_decode_exc_v,
	ibp_avx512_row_stats,
	ibp_avx512_decode_row_v,
	ibp_avx512_decode_tiny,
	ibp_avx512_decode_tiny_run,
};
