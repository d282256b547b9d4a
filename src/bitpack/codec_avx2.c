/* codec_avx2.c - row kernels with AVX2 and BMI2, for CPUs without AVX-512.
 *
 * Compiled with -mavx2 -mbmi2 (CMake, by file name); only called when the
 * CPU has AVX2 and fast BMI2 (codec.c checks).
 *
 * The static part is decoded from the same group tables as the AVX-512
 * kernel (ibp_vgroup_t, built by codec.c): AVX2 has no byte permute across
 * the 64-byte window, but every 4 lanes' bytes lie within 16 bytes, so
 * each 4 lanes take one 16-byte load and a byte shuffle (lanes8; no
 * gathers), then the same variable shifts and masks for the (at most two)
 * runs of ~m_j, OR the Bitval, narrow, store. Groups whose window runs
 * past the row's readable bytes decode from a zero-padded copy. The
 * chunks past the last group, the fix-up chunks (more than two static
 * runs) and C = 8 are scalar (pdep); so is the exception walk of rows
 * under 8 exceptions a group (the template's xscalar and, for BITMAP rows
 * with Xvals, the run walk xruns, shared with AVX-512 in codec_internal.h;
 * denser rows take 8 or 4 lanes
 * with gathers, xwalk_c12 / xwalk_c4), and encoding is the BMI2 template
 * kernel's, except that the encoder finds the exceptions of 8
 * chunks with two 4-lane compares (IBP_K_MISS8), those of 64 chunks with
 * 2 C compares in the one-pass encoder (IBP_K_XBLOCK), and its sizing
 * pass (row_stats) takes 4 chunks per step. C = 4 clusters whose fields all
 * fit 32-bit lanes use the 16-lane tables (vg16, windows of 64 bytes);
 * other C = 4 clusters the two-window tables where their runs fit (w2:
 * 8 lanes of 32 bits, each run from the field's 4 bytes or those one byte
 * on, as f16 pairs), else the qword-pair tables (q2: two chunks a 64-bit
 * lane, four loads a group, no gathers), else the scalar static loop (8
 * lanes of 64 bits with gathers measured slower than it).
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

/* Chunks j .. j + 3 (all full) in 64-bit lanes. */
IBP_INLINE __m256i ibp_avx2_ld4(const uint8_t *p, const unsigned C)
{
	switch (C) {
	case 1: {
		uint32_t v;
		memcpy(&v, p, 4);
		return _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)v));
	}
	case 2: return _mm256_cvtepu16_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p));
	case 4: return _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(const void *)p));
	default: return _mm256_loadu_si256((const __m256i *)(const void *)p);
	}
}
/* Lanes of chunks j .. j + 3 whose invariant bits match (x & m_j == b_j). */
IBP_INLINE __m256i ibp_avx2_match4(const ibp_cluster_t *cl, const uint8_t *row, uint64_t j,
				   const unsigned C)
{
	const __m256i xm = _mm256_and_si256(ibp_avx2_ld4(row + j * C, C),
					    _mm256_loadu_si256((const __m256i *)(const void *)(cl->m + j)));
	return _mm256_cmpeq_epi64(xm, _mm256_loadu_si256((const __m256i *)(const void *)(cl->b + j)));
}
/* The exceptions of 8 full chunks as a bit mask (as AVX-512's). */
IBP_INLINE unsigned ibp_avx2_miss8(const ibp_cluster_t *cl, const uint8_t *row, uint64_t j,
				   const unsigned C)
{
	const unsigned lo = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(ibp_avx2_match4(cl, row, j, C)));
	const unsigned hi = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(ibp_avx2_match4(cl, row, j + 4, C)));
	return ~(lo | hi << 4) & 0xFFu;
}
#define IBP_K_MISS8(cl, row, j, C) ibp_avx2_miss8(cl, row, j, C)
/* The encoder's block of 64 full chunks (see the template's scalar
 * xblock): a compare per 32 bytes, the words' exception masks m & ~eq. */
IBP_INLINE uint64_t ibp_avx2_xblock(const uint8_t *row, const uint8_t *mk, const uint8_t *bk,
				    uint64_t *mm, const unsigned C)
{
	uint64_t miss = 0;
	for (unsigned v = 0; v < 2 * C; v++) {
		const __m256i m = _mm256_loadu_si256((const __m256i *)(const void *)(mk + 32 * v));
		const __m256i xm = _mm256_and_si256(
			_mm256_loadu_si256((const __m256i *)(const void *)(row + 32 * v)), m);
		const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(bk + 32 * v));
		const __m256i eq = C == 1 ? _mm256_cmpeq_epi8(xm, b)
				 : C == 2 ? _mm256_cmpeq_epi16(xm, b)
					  : _mm256_cmpeq_epi32(xm, b);
		_mm256_storeu_si256((__m256i *)(void *)(mm + 4 * v), _mm256_andnot_si256(eq, m));
		/* a bit per byte: keep one per chunk */
		const uint64_t ne = ~(uint64_t)(uint32_t)_mm256_movemask_epi8(eq) & 0xFFFFFFFFull;
		const uint64_t bits = C == 1 ? ne : C == 2 ? _pext_u64(ne, 0x55555555ull)
							   : _pext_u64(ne, 0x11111111ull);
		miss |= bits << (v * 32 / C);
	}
	return miss;
}
#define IBP_K_XBLOCK(row, mk, bk, mm, C) ibp_avx2_xblock(row, mk, bk, mm, C)
/* The run walk's pieces (IBP_K_XR_*, codec_internal.h): a bitmap word's
 * chunk indices a byte at a time (the offsets of its set bits packed by a
 * pext of 0x0706..00 under the byte's bits spread to bytes), and a word's
 * hit patches XORed in under lane masks made from the bits, by whole
 * vectors where its chunks lie inside the row (else one by one). */
IBP_INLINE uint64_t ibp_avx2_idx64(uint64_t w, uint32_t base, uint16_t *out)
{
	uint64_t n = 0;
	for (unsigned q = 0; q < 8; q++) {
		const uint64_t byte = (w >> (8 * q)) & 0xFF;
		const uint64_t off = _pext_u64(0x0706050403020100ull, _pdep_u64(byte, 0x0101010101010101ull) * 0xFF);
		const __m128i v = _mm_add_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)off)),
						_mm_set1_epi16((short)(base + 8 * q)));
		_mm_storeu_si128((__m128i *)(void *)(out + n), v);
		n += (uint64_t)__builtin_popcountll(byte);
	}
	return n;
}

IBP_INLINE void ibp_avx2_xr_hits(uint8_t *dst, const uint8_t *xbc, uint64_t wi, uint64_t hm, uint64_t R,
				 const unsigned C)
{
	if (!hm)
		return;
	uint8_t *d = dst + wi * 64 * C;
	const uint8_t *x = xbc + wi * 64 * C;
	if ((wi + 1) * 64 * C > R) { /* the row's last word: chunk by chunk, nothing past the row */
		for (; hm; hm &= hm - 1) {
			const unsigned t = (unsigned)__builtin_ctzll(hm);
			ibp_st_chunk(d + t * C, ibp_ld_chunk(d + t * C, C) ^ ibp_ld_chunk(x + t * C, C), C);
		}
		return;
	}
	for (unsigned v = 0; v < 2 * C; v++) { /* 32 bytes: 32 / C chunks */
		const uint64_t bits = hm >> (v * 32 / C);
		__m256i lane;
		if (C == 1) { /* byte i: bit i */
			const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)(uint32_t)bits),
							      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
									       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
			const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
			lane = _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
		} else if (C == 2) {
			const __m256i sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
							      8192, 16384, (short)0x8000);
			lane = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)bits), sel), sel);
		} else {
			const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
			lane = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(bits & 0xFF)), sel), sel);
		}
		const __m256i dv = _mm256_loadu_si256((const __m256i *)(const void *)(d + 32 * v));
		const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32 * v));
		_mm256_storeu_si256((__m256i *)(void *)(d + 32 * v), _mm256_xor_si256(dv, _mm256_and_si256(xv, lane)));
	}
}
#define IBP_K_XR_IDX64(w, base, out) ibp_avx2_idx64(w, base, out)
#define IBP_K_XR_HITS(dst, xbc, wi, hm, R, C) ibp_avx2_xr_hits(dst, xbc, wi, hm, R, C)
#define IBP_K_XR_ATTR
#define IBP_K(name) ibp_avx2_##name
#define IBP_K_WIDE_PEXT /* the template may call _pext_u64 */
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

/* Lanes [8h, 8h + 8) of a group (o = 32 h) of 32-bit lanes from its
 * window at base, where every 4 lanes' bytes lie within 16 from the
 * first one's byte: one 16-byte load per 4 lanes, and a byte shuffle (idx
 * minus those lanes' first idx byte, < 16) gives each lane its 4 bytes
 * (no gather). Reads 16 bytes from base + idx[o], base + idx[o + 16]. */
IBP_INLINE __m256i ibp_avx2_lanes8(const ibp_vgroup_t *q, const uint8_t *base, const unsigned o)
{
	const __m256i ix = ibp_avx2_ld(q->idx + o);
	const __m256i w = _mm256_shuffle_epi8(
		_mm256_loadu2_m128i((const __m128i *)(const void *)(base + q->idx[o + 16]),
				    (const __m128i *)(const void *)(base + q->idx[o])),
		_mm256_sub_epi8(ix, _mm256_shuffle_epi8(ix, _mm256_setzero_si256())));
	const __m256i t0 = _mm256_sllv_epi32(_mm256_srlv_epi32(w, ibp_avx2_ld(q->sh + o)), ibp_avx2_ld(q->p0 + o));
	const __m256i t1 = _mm256_sllv_epi32(_mm256_srlv_epi32(w, ibp_avx2_ld(q->q1 + o)), ibp_avx2_ld(q->p1 + o));
	return _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(t0, ibp_avx2_ld(q->m0 + o)),
					       _mm256_and_si256(t1, ibp_avx2_ld(q->m1 + o))),
			       ibp_avx2_ld(q->b + o));
}

/* One group of C <= 2 (16 lanes, two halves of 8) from its window at
 * base (47 bytes readable: offsets <= 30; the fields of 4 lanes span
 * <= 7 + 4 * 16 bits, within 16 bytes of the first lane's byte). */
IBP_INLINE void ibp_avx2_group_c12(const ibp_vgroup_t *q, const uint8_t *base, uint8_t *dst, const unsigned C)
{
	__m256i r[2];
	for (unsigned h = 0; h < 2; h++)
		r[h] = ibp_avx2_lanes8(q, base, 32 * h);
	/* lanes hold values < 2^(8C): unsigned saturation narrows exactly;
	 * packs work per 128-bit half, the permute puts the halves in order */
	const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
	if (C == 2) {
		_mm256_storeu_si256((__m256i *)(void *)dst, p16);
	} else {
		const __m128i p8 = _mm_packus_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
		_mm_storeu_si128((__m128i *)(void *)dst, p8);
	}
}

/* The static fields of chunks [j0, D) one by one (the few past the last
 * group: no search for the row's fast chunks). */
IBP_INLINE void ibp_avx2_static_rest(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				     uint64_t avail, uint8_t *dst, uint64_t j0, const unsigned C)
{
	const uint64_t D = c->D;
	for (uint64_t j = j0; j < D; j++) {
		const uint64_t v = _pdep_u64(ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]), cl->nm[j]) | cl->b[j];
		if (j + 1 < D)
			ibp_st_chunk(dst + j * C, v, C);
		else
			ibp_st_partial(dst + j * C, v, c->last_bytes);
	}
}

/* One vg16 group (C = 4) as group_c12 (lanes8, no gathers): a lane's
 * field fits its 32 bits from bit sh of its first byte (codec.c), so 4
 * lanes' fields span <= 7 + 3 * 32 bits before the last one's byte
 * (<= 12 bytes past the first lane's), and its 4 bytes end within 16.
 * Reads up to 60 + 16 bytes past base. */
#define IBP_AVX2_REACH16 76u
IBP_INLINE void ibp_avx2_group_c4(const ibp_vgroup_t *q, const uint8_t *base, uint8_t *dst)
{
	for (unsigned o = 0; o < 64; o += 32)
		_mm256_storeu_si256((__m256i *)(void *)(dst + o), ibp_avx2_lanes8(q, base, o));
}

/* Groups [0, nvg) of C <= 2 (vg) or C = 4 (vg16): those whose whole
 * window is readable from the body, the last few (near the row's end)
 * from a zero-padded copy of their readable bytes (vb[g] <= S / 8 <=
 * avail, checked by the caller; the fields lie within avail, so the
 * padding only fills bits the masks drop). */
IBP_INLINE void ibp_avx2_static_groups(const ibp_vgroup_t *q, const uint64_t *vb, uint64_t nvg,
				       const uint8_t *body, uint64_t avail, uint8_t *dst, const unsigned C)
{
	const uint64_t reach = C == 4 ? IBP_AVX2_REACH16 : IBP_AVX2_REACH(16);
	uint64_t g = 0;
	for (; g < nvg && vb[g] <= avail && avail - vb[g] >= reach; g++) {
		if (C == 4)
			ibp_avx2_group_c4(q + g, body + vb[g], dst + g * 64);
		else
			ibp_avx2_group_c12(q + g, body + vb[g], dst + g * 16 * C, C);
	}
	if (g == nvg)
		return;
	/* from here vb[g] > avail - reach: the body's last 80 bytes (a fixed
	 * copy, no call) and zeros hold every window */
	uint8_t t[160];
	uint64_t t0 = 0;
	if (avail >= 80) {
		t0 = avail - 80;
		memcpy(t, body + t0, 80);
		memset(t + 80, 0, 80);
	} else {
		memcpy(t, body, avail);
		memset(t + avail, 0, 160 - avail);
	}
	for (; g < nvg && vb[g] <= avail; g++) {
		if (C == 4)
			ibp_avx2_group_c4(q + g, t + (vb[g] - t0), dst + g * 64);
		else
			ibp_avx2_group_c12(q + g, t + (vb[g] - t0), dst + g * 16 * C, C);
	}
}

/* C = 4 in 16 lanes of 32 bits (the vg16 tables, codec.c: every field
 * fits its lane, window offsets <= 60), then the fix-ups and the chunks
 * past the last group. */
static void ibp_avx2_static_c4w(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				uint64_t avail, uint8_t *dst)
{
	ibp_avx2_static_groups(cl->vg16, cl->vbase16, cl->nvg16, body, avail, dst, 4);
	for (uint64_t i = 0; i < cl->nvfix16; i++) {
		const uint64_t j = cl->vfix16[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * 4, _pdep_u64(v, cl->nm[j]) | cl->b[j], 4);
	}
	ibp_avx2_static_rest(c, cl, body, avail, dst, cl->nvg16 * 16, 4);
}

/* C = 4: the fix-up chunks (ascending) below j0, by pdep (fields lie
 * within avail), then the scalar loop from j0 (the groups' end). */
IBP_INLINE void ibp_avx2_static_fix(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				    uint64_t avail, uint8_t *dst, const uint64_t *fix, uint64_t nfix, uint64_t j0)
{
	for (uint64_t i = 0; i < nfix && fix[i] < j0; i++) {
		const uint64_t j = fix[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * 4, _pdep_u64(v, cl->nm[j]) | cl->b[j], 4);
	}
	if (j0 < c->D)
		ibp_avx2_decode_static_from(c, cl, body, avail, dst, j0);
}

/* C = 4 by qword pairs (ibp_q2group_t): 4 lanes of 2 chunks, up to three
 * runs each; groups whose last qword is readable, then the fix-ups and
 * the scalar rest. */
IBP_INLINE void ibp_avx2_static_q2_x(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				     uint64_t avail, uint8_t *dst, const int three)
{
	const ibp_q2_t *t = cl->q2;
	const ibp_q2group_t *q = t->g;
	uint64_t g = 0;
	for (; g < t->ng && q->qo[3] + 8 <= avail; g++, q++) {
		const __m256i w = _mm256_set_epi64x((long long)ibp_load64(body + q->qo[3]),
						    (long long)ibp_load64(body + q->qo[2]),
						    (long long)ibp_load64(body + q->qo[1]),
						    (long long)ibp_load64(body + q->qo[0]));
		__m256i r = ibp_avx2_ld((const uint8_t *)q->b);
		for (unsigned i = 0; i < 6; i++) {
			if (!three && i % 3 == 2)
				continue;
			const __m256i t0 = _mm256_sllv_epi64(_mm256_srlv_epi64(w, ibp_avx2_ld((const uint8_t *)q->sr[i])),
							     ibp_avx2_ld((const uint8_t *)q->sl[i]));
			r = _mm256_or_si256(r, _mm256_and_si256(t0, ibp_avx2_ld((const uint8_t *)q->m[i])));
		}
		_mm256_storeu_si256((__m256i *)(void *)(dst + g * 32), r);
	}
	/* chunks with more than three runs: pdep (fields lie within avail) */
	ibp_avx2_static_fix(c, cl, body, avail, dst, t->fix, t->nfix, g * 8);
}

/* C = 4 by two windows a lane (ibp_w2group_t): groups whose 16-byte
 * loads (and one byte on) are readable, then the fix-ups and the scalar
 * rest. */
IBP_INLINE void ibp_avx2_static_w2_x(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				     uint64_t avail, uint8_t *dst, const int three)
{
	const ibp_w2_t *t = cl->w2;
	const ibp_w2group_t *q = t->g;
	uint64_t g = 0;
	for (; g < t->ng && q->lo[1] + 17 <= avail; g++, q++) {
		const __m256i ix = ibp_avx2_ld(q->idx);
		const uint8_t *p0 = body + q->lo[0], *p1 = body + q->lo[1];
		const __m256i a = _mm256_shuffle_epi8(
			_mm256_loadu2_m128i((const __m128i *)(const void *)p1, (const __m128i *)(const void *)p0), ix);
		const __m256i b = _mm256_shuffle_epi8(_mm256_loadu2_m128i((const __m128i *)(const void *)(p1 + 1),
									  (const __m128i *)(const void *)(p0 + 1)),
						      ix);
		__m256i r = ibp_avx2_ld((const uint8_t *)q->b);
		for (unsigned i = 0; i < 3; i++) {
			if (!three && i == 2)
				continue;
			const __m256i t0 = _mm256_sllv_epi32(_mm256_srlv_epi32(i ? b : a, ibp_avx2_ld((const uint8_t *)q->sr[i])),
							     ibp_avx2_ld((const uint8_t *)q->sl[i]));
			r = _mm256_or_si256(r, _mm256_and_si256(t0, ibp_avx2_ld((const uint8_t *)q->m[i])));
		}
		_mm256_storeu_si256((__m256i *)(void *)(dst + g * 32), r);
	}
	/* chunks whose runs fit no slot: pdep (fields lie within avail) */
	ibp_avx2_static_fix(c, cl, body, avail, dst, t->fix, t->nfix, g * 8);
}

static void ibp_avx2_decode_static_v(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
				     uint64_t avail, uint8_t *dst)
{
	const unsigned C = c->C;
	if (cl->nvg16) {
		ibp_avx2_static_c4w(c, cl, body, avail, dst);
		return;
	}
	/* C = 4 without the 16-lane tables: qword pairs where they fit, else
	 * (and C = 8) the scalar loop (pdep), faster than 8 lanes of 64 bits
	 * with gathers (docs/BENCHMARKS.md "Fused rows") */
	if (C >= 4) {
		if (cl->w2 && cl->w2->three)
			ibp_avx2_static_w2_x(c, cl, body, avail, dst, 1);
		else if (cl->w2)
			ibp_avx2_static_w2_x(c, cl, body, avail, dst, 0);
		else if (cl->q2 && cl->q2->three)
			ibp_avx2_static_q2_x(c, cl, body, avail, dst, 1);
		else if (cl->q2)
			ibp_avx2_static_q2_x(c, cl, body, avail, dst, 0);
		else
			ibp_avx2_decode_static_from(c, cl, body, avail, dst, 0);
		return;
	}
	/* C <= 2: every group in lanes (static_groups) */
	const uint64_t G = 16, ng = cl->nvg;
	if (ng == 0) {
		ibp_avx2_decode_static_from(c, cl, body, avail, dst, 0);
		return;
	}
	if (C == 2)
		ibp_avx2_static_groups(cl->vg, cl->vbase, ng, body, avail, dst, 2);
	else
		ibp_avx2_static_groups(cl->vg, cl->vbase, ng, body, avail, dst, 1);
	/* chunks with more than two static runs: pdep (fields lie within
	 * avail); the list is ascending */
	for (uint64_t i = 0; i < cl->nvfix; i++) {
		const uint64_t j = cl->vfix[i];
		const uint64_t v = ibp_peek_bits(body, avail, cl->soff[j], cl->sw[j]);
		ibp_st_chunk(dst + j * C, _pdep_u64(v, cl->nm[j]) | cl->b[j], C);
	}
	if (C == 2)
		ibp_avx2_static_rest(c, cl, body, avail, dst, ng * G, 2);
	else
		ibp_avx2_static_rest(c, cl, body, avail, dst, ng * G, 1);
}

/* ---- the exception walk, 8 (C <= 2) or 4 (C = 4) chunks at a time ----
 *
 * The AVX-512 walk (codec_avx512.c) on half groups of the same tables:
 * the marked widths are prefix-summed across the lanes, each lane gathers
 * the LB bytes at its field (vpgatherdd / vpgatherqq; from a zero-padded
 * copy near the row's end, so nothing past `avail` is read), shifts and
 * masks, the two runs of m_j deposit, XOR b_j, and the marked deltas are
 * XORed into the row; m_j of more than two runs are patched with pdep. */

IBP_INLINE void ibp_avx2_fix(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *body,
			     uint64_t avail, uint64_t j, uint64_t bit, uint8_t *dst, const unsigned C)
{
	const uint64_t v = ibp_read_bits(body, avail, bit, cl->ew[j]);
	ibp_avx2_patch_delta(c, j, _pdep_u64(v, cl->m[j]) ^ cl->b[j], dst, C);
}

/* XORs nb (<= 16) delta bytes into dst. */
IBP_INLINE void ibp_avx2_xor_into(uint8_t *dst, __m128i d, uint64_t nb)
{
	if (nb == 16) {
		_mm_storeu_si128((__m128i *)(void *)dst, _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)dst), d));
		return;
	}
	uint8_t t[16];
	_mm_storeu_si128((__m128i *)(void *)t, d);
	for (uint64_t i = 0; i < nb; i++)
		dst[i] ^= t[i];
}

/* Half groups of C = 1, 2: 8 lanes of 32 bits. */
IBP_INLINE uint64_t ibp_avx2_xwalk_c12(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
				       const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim,
				       uint8_t *dst, const unsigned C)
{
	const uint64_t R = c->R, nh = 2 * cl->nxg;
	const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1), seven = _mm256_set1_epi32(7);
	const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128), l3 = _mm256_set1_epi32(3);
	for (uint64_t h = 0; h < nh; h++) {
		const ibp_xgroup_t *q = cl->xg + h / 2;
		const unsigned o = 32 * (unsigned)(h & 1);
		const unsigned mk = (unsigned)(bm[h >> 3] >> (8 * (h & 7))) & 0xFF;
		const unsigned fx = mk && cl->xfix ? (unsigned)(cl->xfix[h >> 3] >> (8 * (h & 7))) & 0xFF : 0;
		const __m256i vm = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)mk), bits), bits);
		const __m256i w = _mm256_and_si256(ibp_avx2_ld(q->w + o), vm);
		__m256i s = _mm256_add_epi32(w, _mm256_slli_si256(w, 4));
		s = _mm256_add_epi32(s, _mm256_slli_si256(s, 8));
		s = _mm256_add_epi32(s, _mm256_blend_epi32(zero, _mm256_permutevar8x32_epi32(s, l3), 0xF0));
		const uint64_t tot = (uint32_t)_mm256_extract_epi32(s, 7);
		if (tot > lim - e)
			return UINT64_MAX;
		const uint64_t b0 = e >> 3, last = ((e & 7) + tot) >> 3; /* no lane's byte is past last */
		const __m256i rel = _mm256_add_epi32(_mm256_sub_epi32(s, w), _mm256_set1_epi32((int)(e & 7)));
		const __m256i bi = _mm256_srli_epi32(rel, 3);
		__m256i word;
		if (b0 + last + 4 <= avail) {
			word = _mm256_i32gather_epi32((const int *)(const void *)(body + b0), bi, 1);
		} else {
			uint8_t t[64] = { 0 }; /* fields span <= 7 + 8 * 16 bits */
			const uint64_t k = avail - b0 < 32 ? avail - b0 : 32;
			memcpy(t, body + b0, k);
			word = _mm256_i32gather_epi32((const int *)(const void *)t, bi, 1);
		}
		const __m256i v = _mm256_and_si256(_mm256_srlv_epi32(word, _mm256_and_si256(rel, seven)),
						   _mm256_sub_epi32(_mm256_sllv_epi32(one, w), one));
		const __m256i t0 = _mm256_and_si256(_mm256_sllv_epi32(v, ibp_avx2_ld(q->p0 + o)), ibp_avx2_ld(q->m0 + o));
		const __m256i t1 = _mm256_and_si256(
			_mm256_sllv_epi32(_mm256_srlv_epi32(v, ibp_avx2_ld(q->s1 + o)), ibp_avx2_ld(q->p1 + o)),
			ibp_avx2_ld(q->m1 + o));
		const unsigned keep = mk & ~fx;
		const __m256i vk = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)keep), bits), bits);
		const __m256i d = _mm256_and_si256(_mm256_xor_si256(_mm256_or_si256(t0, t1), ibp_avx2_ld(q->b + o)), vk);
		/* lanes hold values < 2^(8C): unsigned saturation narrows exactly */
		const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(d, d), 0xD8);
		const uint64_t at = h * 8 * C;
		if (at < R) {
			const uint64_t nb = R - at < 8 * C ? R - at : 8 * C;
			if (C == 2)
				ibp_avx2_xor_into(dst + at, _mm256_castsi256_si128(p16), nb);
			else
				ibp_avx2_xor_into(dst + at, _mm_packus_epi16(_mm256_castsi256_si128(p16), _mm256_castsi256_si128(p16)), nb);
		}
		if (mk & fx) {
			uint32_t r[8];
			_mm256_storeu_si256((__m256i *)(void *)r, rel);
			for (unsigned f = mk & fx; f; f &= f - 1) {
				const unsigned l = (unsigned)__builtin_ctz(f);
				ibp_avx2_fix(c, cl, body, avail, h * 8 + l, 8 * b0 + r[l], dst, C);
			}
		}
		e += tot;
	}
	return e;
}

/* Half groups of C = 4: 4 lanes of 64 bits. */
static uint64_t ibp_avx2_xwalk_c4(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint64_t *bm,
				  const uint8_t *body, uint64_t avail, uint64_t e, uint64_t lim, uint8_t *dst)
{
	const uint64_t R = c->R, nh = 2 * cl->nxg;
	const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi64x(1), seven = _mm256_set1_epi64x(7);
	const __m256i bits = _mm256_setr_epi64x(1, 2, 4, 8);
	const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	for (uint64_t h = 0; h < nh; h++) {
		const ibp_xgroup_t *q = cl->xg + h / 2;
		const unsigned o = 32 * (unsigned)(h & 1);
		const unsigned mk = (unsigned)(bm[h >> 4] >> (4 * (h & 15))) & 0xF;
		const unsigned fx = mk && cl->xfix ? (unsigned)(cl->xfix[h >> 4] >> (4 * (h & 15))) & 0xF : 0;
		const __m256i vm = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(mk), bits), bits);
		const __m256i w = _mm256_and_si256(ibp_avx2_ld(q->w + o), vm);
		__m256i s = _mm256_add_epi64(w, _mm256_slli_si256(w, 8));
		s = _mm256_add_epi64(s, _mm256_blend_epi32(zero, _mm256_permute4x64_epi64(s, 0x55), 0xF0));
		const uint64_t tot = (uint64_t)_mm256_extract_epi64(s, 3);
		if (tot > lim - e)
			return UINT64_MAX;
		const uint64_t b0 = e >> 3, last = ((e & 7) + tot) >> 3;
		const __m256i rel = _mm256_add_epi64(_mm256_sub_epi64(s, w), _mm256_set1_epi64x((long long)(e & 7)));
		const __m256i bi = _mm256_srli_epi64(rel, 3);
		__m256i word;
		if (b0 + last + 8 <= avail) {
			word = _mm256_i64gather_epi64((const long long *)(const void *)(body + b0), bi, 1);
		} else {
			uint8_t t[64] = { 0 }; /* fields span <= 7 + 4 * 32 bits */
			const uint64_t k = avail - b0 < 32 ? avail - b0 : 32;
			memcpy(t, body + b0, k);
			word = _mm256_i64gather_epi64((const long long *)(const void *)t, bi, 1);
		}
		const __m256i v = _mm256_and_si256(_mm256_srlv_epi64(word, _mm256_and_si256(rel, seven)),
						   _mm256_sub_epi64(_mm256_sllv_epi64(one, w), one));
		const __m256i t0 = _mm256_and_si256(_mm256_sllv_epi64(v, ibp_avx2_ld(q->p0 + o)), ibp_avx2_ld(q->m0 + o));
		const __m256i t1 = _mm256_and_si256(
			_mm256_sllv_epi64(_mm256_srlv_epi64(v, ibp_avx2_ld(q->s1 + o)), ibp_avx2_ld(q->p1 + o)),
			ibp_avx2_ld(q->m1 + o));
		const unsigned keep = mk & ~fx;
		const __m256i vk = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(keep), bits), bits);
		const __m256i d = _mm256_and_si256(_mm256_xor_si256(_mm256_or_si256(t0, t1), ibp_avx2_ld(q->b + o)), vk);
		const uint64_t at = h * 16;
		if (at < R)
			ibp_avx2_xor_into(dst + at, _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(d, even)),
					  R - at < 16 ? R - at : 16);
		if (mk & fx) {
			uint64_t r[4];
			_mm256_storeu_si256((__m256i *)(void *)r, rel);
			for (unsigned f = mk & fx; f; f &= f - 1) {
				const unsigned l = (unsigned)__builtin_ctz(f);
				ibp_avx2_fix(c, cl, body, avail, h * 4 + l, 8 * b0 + r[l], dst, 4);
			}
		}
		e += tot;
	}
	return e;
}

static uint64_t ibp_avx2_decode_exc_v(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
				      const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
				      uint64_t avail, uint8_t *dst)
{
	uint64_t bm[IBP_XWALK_MAXD / 64 + 1];
	if (mode == IBP_ROW_BITMAP) /* n is a placeholder: count the bitmap (bits >= D are clear) */
		n = ibp_bitmap_count(hdr, hdr_len);
	/* sparser rows keep the scalar walk: with gathers a half group costs
	 * about as much as 4 scalar exceptions (measured on the sample KV and
	 * f32 tables, docs/BENCHMARKS.md) */
	if (cl->nxg == 0 || c->D > IBP_XWALK_MAXD || n < IBP_XWALK_PER_GROUP_AVX2 * cl->nxg) {
		if (c->C > 4)
			return ibp_avx2_decode_exc(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
		if (cl->has_x && mode != IBP_ROW_BITMAP) {
			/* LIST rows with Xvals: the template's walk, inlined here as
			 * before this file's own walks grew (out of line, the
			 * bag-of-words rows decoded 7-10% slower) */
			switch (c->C) {
			case 1: return ibp_avx2_decode_exc_x(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 1, 1);
			case 2: return ibp_avx2_decode_exc_x(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 1, 2);
			default: return ibp_avx2_decode_exc_x(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 1, 4);
			}
		}
		if (cl->xbc && c->D <= 65536) /* BITMAP rows with Xvals: the run walk (16-bit chunk indices) */
			return ibp_avx2_xruns(c, cl, hdr, hdr_len, body, avail, dst);
		return ibp_avx2_xscalar_v(c, cl, mode, hdr, hdr_len, n, body, avail, dst);
	}
	if (!ibp_exc_bitmap(c, mode, hdr, hdr_len, ibp_hdr_readable(hdr, hdr_len, body, avail), n, bm))
		return UINT64_MAX;
	const uint64_t lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail, e = cl->S;
	if (e > lim)
		return UINT64_MAX;
	switch (c->C) {
	case 1: return ibp_avx2_xwalk_c12(c, cl, bm, body, avail, e, lim, dst, 1);
	case 2: return ibp_avx2_xwalk_c12(c, cl, bm, body, avail, e, lim, dst, 2);
	default: return ibp_avx2_xwalk_c4(c, cl, bm, body, avail, e, lim, dst);
	}
}

/* ibpi_row_stats, 4 chunks per step in 64-bit lanes (the AVX-512 one
 * takes 8); the last chunk (it may be partial) and the chunks past the
 * last full step are scalar. Same n and E as the portable pass. */
IBP_INLINE void ibp_avx2_row_stats_c(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
				     uint64_t *pn, uint64_t *pE, const unsigned C, const int xv)
{
	const uint64_t D = c->D;
	uint64_t n = 0, j = 0;
	__m256i acc = _mm256_setzero_si256();
	const __m256i one = _mm256_set1_epi64x(1);
	/* chunks [j, j + 4) all full: j + 4 <= D - 1 */
	for (; j + 5 <= D; j += 4) {
		const __m256i xm = _mm256_and_si256(ibp_avx2_ld4(row + j * C, C),
						    _mm256_loadu_si256((const __m256i *)(const void *)(cl->m + j)));
		const __m256i match = _mm256_cmpeq_epi64(xm, _mm256_loadu_si256((const __m256i *)(const void *)(cl->b + j)));
		n += 4u - (unsigned)__builtin_popcount((unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(match)));
		uint32_t w4;
		memcpy(&w4, cl->ew + j, 4);
		__m256i ew = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)w4));
		if (xv) {
			/* hit on a miss: 1 bit; else e_j + the hit bit (xen) */
			memcpy(&w4, cl->xen + j, 4);
			const __m256i xe = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)w4));
			const __m256i hit = _mm256_cmpeq_epi64(xm, _mm256_loadu_si256((const __m256i *)(const void *)(cl->x + j)));
			ew = _mm256_blendv_epi8(_mm256_add_epi64(ew, xe), one, hit);
		}
		acc = _mm256_add_epi64(acc, _mm256_andnot_si256(match, ew));
	}
	uint64_t lanes[4];
	_mm256_storeu_si256((__m256i *)(void *)lanes, acc);
	uint64_t E = lanes[0] + lanes[1] + lanes[2] + lanes[3];
	for (; j < D; j++) {
		uint64_t x = j + 1 < D ? ibp_ld_chunk(row + j * C, C) : ibp_ld_partial(row + j * C, c->last_bytes);
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

static void ibp_avx2_row_stats(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
			       uint64_t *n, uint64_t *E)
{
#define IBP_AVX2_STATS(XV)                                                             \
	switch (c->C) {                                                                \
	case 1: ibp_avx2_row_stats_c(c, cl, row, n, E, 1, XV); break;                  \
	case 2: ibp_avx2_row_stats_c(c, cl, row, n, E, 2, XV); break;                  \
	case 4: ibp_avx2_row_stats_c(c, cl, row, n, E, 4, XV); break;                  \
	default: ibp_avx2_row_stats_c(c, cl, row, n, E, 8, XV); break;                 \
	}
	if (cl->has_x) {
		IBP_AVX2_STATS(1)
	} else {
		IBP_AVX2_STATS(0)
	}
#undef IBP_AVX2_STATS
}

const ibp_kernels_t ibpi_kernels_avx2 = {
	IBP_IMPL_AVX2,
	ibp_avx2_encode,
	ibp_avx2_decode_static_v,
	ibp_avx2_decode_exc_v,
	ibp_avx2_row_stats,
	NULL,
	ibp_avx2_decode_tiny,
	ibp_avx2_decode_tiny_run,
};
