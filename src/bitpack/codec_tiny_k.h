/* codec_tiny_k.h - the tiny rows' kernel (decode_tiny, see ibp_tiny_t),
 * a part of codec_internal.h's kernel template (included from it, where
 * the kernel may call _pdep_u64: BMI2, AVX2, AVX-512); a file of its own
 * to keep that header under the size limit (tools/check-cycles.py). No
 * include guard: each kernel file gets its own copy. */

/* The first min(avail, 16) bytes at p, zero-padded to 16, with two
 * overlapping loads of the widest size that fits (no copy call, nothing
 * read past avail). */
IBP_INLINE unsigned __int128 IBP_K(tiny_ld)(const uint8_t *p, uint64_t avail)
{
	const uint64_t n = avail < 16 ? avail : 16;
	uint64_t lo, hi = 0;
	if (n >= 8) {
		lo = ibp_load64(p);
		/* bytes [8, n): the top n - 8 of the 8 ending at n */
		hi = n > 8 ? ibp_load64(p + n - 8) >> (8 * (16 - n)) : 0;
	} else if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		lo = a | (uint64_t)b << (8 * (n - 4));
	} else if (n) {
		lo = p[0] | (uint64_t)p[n >> 1] << (8 * (n >> 1)) | (uint64_t)p[n - 1] << (8 * (n - 1));
	} else {
		lo = 0;
	}
	return (unsigned __int128)hi << 64 | lo;
}

/* A LIST row's exceptions as a bitmap (entries checked as
 * ibp_exc_bitmap does; D <= 16); returns 0 on a bad entry. Out of line:
 * its bitmap's stack frame stays off the tiny kernels' path. */
static __attribute__((noinline)) int IBP_K(tiny_list)(const ibp_codec_t *c, const uint8_t *hdr, uint64_t hdr_len,
						     uint64_t rd, uint64_t n, uint64_t *bm)
{
	uint64_t w[IBP_XWALK_MAXD / 64 + 1];
	if (!ibp_exc_bitmap(c, IBP_ROW_LIST, hdr, hdr_len, rd, n, w))
		return 0;
	*bm = w[0];
	return 1;
}

/* A row's two words from its bitmap bm (0: CLEAN; no Xvals) and its
 * first 16 body bytes v under cluster t of S static bits (R: the row's
 * bytes, C its chunks'); returns the end
 * bit of its fields. A shift count is taken mod 128: it reaches 128 only
 * once every bit is taken, where the word's mask is empty (pdep gives 0
 * whatever its source). */
IBP_INLINE uint64_t IBP_K(tiny_words)(const ibp_tiny_t *t, uint64_t S, uint64_t bm, unsigned __int128 v,
				      uint64_t *w0, uint64_t *w1, const unsigned C, const uint64_t R)
{
	const unsigned cpw = 8 / C; /* chunks a word */
	/* a lane's low bit per chunk of a word, times its all-ones, spreads a
	 * bitmap bit over its chunk */
	const uint64_t lane_lo = C == 1 ? 0x0101010101010101ull : C == 2 ? 0x0001000100010001ull
				: C == 4 ? 0x0000000100000001ull : 1ull;
	const uint64_t ones = ibp_lowmask(8 * C), lo = (uint64_t)v;
	uint64_t e = S;
	/* word 0: its static fields start the stream */
	const uint64_t x0 = _pdep_u64(bm & ibp_lowmask(cpw), lane_lo) * ones, em0 = t->m[0] & x0;
	*w0 = _pdep_u64(lo, t->nm[0]) | (t->b[0] & ~x0) | _pdep_u64((uint64_t)(v >> (e & 127)), em0);
	e += (uint64_t)__builtin_popcountll(em0);
	*w1 = 0;
	if (R > 8) {
		const uint64_t x1 = _pdep_u64((bm >> cpw) & ibp_lowmask(cpw), lane_lo) * ones, em1 = t->m[1] & x1;
		*w1 = _pdep_u64((uint64_t)(v >> (t->so[1] & 127)), t->nm[1]) | (t->b[1] & ~x1) |
		      _pdep_u64((uint64_t)(v >> (e & 127)), em1);
		e += (uint64_t)__builtin_popcountll(em1);
	}
	return e;
}

/* A row's two words to dst (R bytes). */
IBP_INLINE void IBP_K(tiny_st)(uint8_t *dst, uint64_t w0, uint64_t w1, const uint64_t R)
{
	if (R == 16) {
		ibp_store64(dst, w0);
		ibp_store64(dst + 8, w1);
	} else if (R > 8) {
		ibp_store64(dst, w0);
		ibp_st_partial(dst + 8, w1, R - 8);
	} else if (R == 8) {
		ibp_store64(dst, w0);
	} else {
		ibp_st_partial(dst, w0, R);
	}
}

/* A row of a codec with tiny tables (see ibp_tiny_t), as decode_static
 * then decode_exc would write it, with the same result (end bit or
 * UINT64_MAX). The row's static and exception fields take at most D W <=
 * 128 bits, so a valid row's fields all lie in its first 16 body bytes,
 * held in v; the row is corrupt iff its end passes avail, checked before
 * anything is stored. n = 0: CLEAN; else no Xvals. */
IBP_INLINE uint64_t IBP_K(decode_tiny_c)(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
					 const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
					 uint64_t avail, uint8_t *dst, const unsigned C)
{
	const uint64_t lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	uint64_t bm = 0, w0, w1;
	if (n) {
		if (mode == IBP_ROW_BITMAP) /* bits >= D were checked to be clear */
			bm = hdr[0] | (hdr_len > 1 ? (uint64_t)hdr[1] << 8 : 0);
		else if (!IBP_K(tiny_list)(c, hdr, hdr_len, ibp_hdr_readable(hdr, hdr_len, body, avail), n, &bm))
			return UINT64_MAX;
	}
	const uint64_t e = IBP_K(tiny_words)(c->tiny + (cl - c->cl), cl->S, bm, IBP_K(tiny_ld)(body, avail), &w0,
					     &w1, C, c->R);
	if (e > lim) /* past the row: nothing stored */
		return UINT64_MAX;
	IBP_K(tiny_st)(dst, w0, w1, c->R);
	return e;
}

static uint64_t IBP_K(decode_tiny)(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
				   const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
				   uint64_t avail, uint8_t *dst)
{
	switch (c->C) {
	case 1: return IBP_K(decode_tiny_c)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 1);
	case 2: return IBP_K(decode_tiny_c)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 2);
	case 4: return IBP_K(decode_tiny_c)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 4);
	default: return IBP_K(decode_tiny_c)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 8);
	}
}

/* decode_tiny_run's BITMAP row (len bytes at src, 18 of them readable,
 * of cluster k without Xvals), with decode_row_ext's checks: its bitmap
 * not empty and clear from bit D on, its fields within the row. Returns
 * 0 on a row the checked path must take (dst not written). C and R
 * (the row's bytes) constant: in a generic body the chunks a word took a
 * division and the store a byte loop. */
IBP_INLINE int IBP_K(tiny_run_bm)(const ibp_codec_t *c, unsigned k, const uint8_t *src, uint64_t len, int exact,
				  uint8_t *dst, const unsigned C, const uint64_t R)
{
	const uint64_t hb = c->bitmap_bytes; /* 1 or 2 */
	const uint64_t bm = hb == 1 ? src[0] : (uint64_t)src[0] | (uint64_t)src[1] << 8;
	if (bm == 0 || (bm >> c->D))
		return 0;
	const unsigned __int128 v = (unsigned __int128)ibp_load64(src + hb + 8) << 64 | ibp_load64(src + hb);
	uint64_t w0, w1;
	const uint64_t e = IBP_K(tiny_words)(c->tiny + k, c->cl[k].S, bm, v, &w0, &w1, C, R);
	const uint64_t ext = hb + (e + 7) / 8; /* as decode_row_ext counts it */
	if (ext != len && (exact || ext > len))
		return 0;
	IBP_K(tiny_st)(dst, w0, w1, R);
	return 1;
}

/* tiny_run_bm for rows of Rk bytes (0: c->R). Out of line: its registers
 * stay off the CLEAN rows' loop. */
static __attribute__((noinline)) int IBP_K(tiny_run_bitmap)(const ibp_codec_t *c, unsigned k, const uint8_t *src,
							    uint64_t len, int exact, uint8_t *dst, const uint64_t Rk)
{
#define IBP_K_TRB(R)                                                                  \
	switch (c->C) {                                                               \
	case 1: return IBP_K(tiny_run_bm)(c, k, src, len, exact, dst, 1, R);          \
	case 2: return IBP_K(tiny_run_bm)(c, k, src, len, exact, dst, 2, R);          \
	case 4: return IBP_K(tiny_run_bm)(c, k, src, len, exact, dst, 4, R);          \
	default: return IBP_K(tiny_run_bm)(c, k, src, len, exact, dst, 8, R);         \
	}
	if (Rk == 16)
		IBP_K_TRB(16)
	if (Rk == 8)
		IBP_K_TRB(8)
	IBP_K_TRB(c->R)
#undef IBP_K_TRB
}

/* decode_tiny_run for rows of Rk bytes (0: c->R, not known here), s64:
 * every cluster's static part within 64 bits (an int64 edge list: 24).
 * A CLEAN row is its static fields alone, a pdep a word, from one load
 * when s64; a BITMAP row (14% of an edge list) on a path of its own:
 * taking both the same way made every row twice as long. */
IBP_INLINE uint64_t IBP_K(tiny_run_r)(const ibp_codec_t *c, const ibp_tiny_run_t *run, uint64_t n, uint8_t *dst,
				      const uint64_t Rk, const int s64)
{
	const uint64_t R = Rk ? Rk : c->R;
	const ibp_tiny_t *tiny = c->tiny;
	const uint32_t *rec = run->rec;
	const uint8_t *base = run->base;
	const unsigned sh = run->sh, K = c->K;
	const uint32_t cmask = run->cmask;
	const int exact = run->exact;
	const uint64_t all = (uint64_t)(run->end - base); /* >= every row's end */
	uint32_t a = rec[0];
	for (uint64_t i = 0; i < n; i++, dst += R) {
		const uint32_t b = rec[i + 1];
		const uint64_t off = a >> sh, len = (b >> sh) - off;
		const unsigned k = (a >> 2) & cmask, mode = a & 3u;
		const uint8_t *src = base + off;
		a = b;
		if (k >= K || off + 18 > all) /* 16 body bytes after a bitmap */
			return i;
		const ibp_tiny_t *t = tiny + k;
		if (mode == IBP_ROW_CLEAN) {
			if (t->nclean != len && (exact || t->nclean > len))
				return i;
			const uint64_t lo = ibp_load64(src);
			const uint64_t w0 = _pdep_u64(lo, t->nm[0]) | t->b[0];
			uint64_t w1 = 0;
			if (R > 8 && s64) { /* so[1] = 64 only when word 1 has no static fields */
				w1 = _pdep_u64(lo >> (t->so[1] & 63), t->nm[1]) | t->b[1];
			} else if (R > 8) {
				const unsigned __int128 v = (unsigned __int128)ibp_load64(src + 8) << 64 | lo;
				w1 = _pdep_u64((uint64_t)(v >> (t->so[1] & 127)), t->nm[1]) | t->b[1];
			}
			IBP_K(tiny_st)(dst, w0, w1, R);
		} else if (mode != IBP_ROW_BITMAP || t->xv || !IBP_K(tiny_run_bitmap)(c, k, src, len, exact, dst, Rk)) {
			return i;
		}
	}
	return n;
}

static uint64_t IBP_K(decode_tiny_run)(const ibp_codec_t *c, const ibp_tiny_run_t *run, uint64_t n, uint8_t *dst)
{
	const int s64 = c->tiny_s64;
	if (c->R == 16)
		return s64 ? IBP_K(tiny_run_r)(c, run, n, dst, 16, 1) : IBP_K(tiny_run_r)(c, run, n, dst, 16, 0);
	if (c->R == 8) /* word 1 unused */
		return IBP_K(tiny_run_r)(c, run, n, dst, 8, 1);
	return s64 ? IBP_K(tiny_run_r)(c, run, n, dst, 0, 1) : IBP_K(tiny_run_r)(c, run, n, dst, 0, 0);
}
