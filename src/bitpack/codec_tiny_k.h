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

/* A row of a codec with tiny tables (see ibp_tiny_t), as decode_static
 * then decode_exc would write it, with the same result (end bit or
 * UINT64_MAX). The row's static and exception fields take at most D W <=
 * 128 bits, so a valid row's fields all lie in its first 16 body bytes,
 * held in v; the row is corrupt iff its end passes avail, checked before
 * anything is stored. A shift count is taken mod 128: it reaches 128
 * only once every bit is taken, where the word's mask is empty (pdep
 * gives 0 whatever its source). n = 0: CLEAN; else no Xvals. */
IBP_INLINE uint64_t IBP_K(decode_tiny_c)(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
					 const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
					 uint64_t avail, uint8_t *dst, const unsigned C)
{
	const ibp_tiny_t *t = c->tiny + (cl - c->cl);
	const unsigned cpw = 8 / C; /* chunks a word */
	const uint64_t R = c->R, lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	uint64_t bm = 0, e = cl->S;
	if (n) {
		if (mode == IBP_ROW_BITMAP) /* bits >= D were checked to be clear */
			bm = hdr[0] | (hdr_len > 1 ? (uint64_t)hdr[1] << 8 : 0);
		else if (!IBP_K(tiny_list)(c, hdr, hdr_len, ibp_hdr_readable(hdr, hdr_len, body, avail), n, &bm))
			return UINT64_MAX;
	}
	const unsigned __int128 v = IBP_K(tiny_ld)(body, avail);
	/* a lane's low bit per chunk of a word, times its all-ones, spreads a
	 * bitmap bit over its chunk */
	const uint64_t lane_lo = C == 1 ? 0x0101010101010101ull : C == 2 ? 0x0001000100010001ull
				: C == 4 ? 0x0000000100000001ull : 1ull;
	const uint64_t ones = ibp_lowmask(8 * C), lo = (uint64_t)v;
	/* word 0: its static fields start the stream */
	const uint64_t x0 = _pdep_u64(bm & ibp_lowmask(cpw), lane_lo) * ones, em0 = t->m[0] & x0;
	const uint64_t w0 = _pdep_u64(lo, t->nm[0]) | (t->b[0] & ~x0) | _pdep_u64((uint64_t)(v >> (e & 127)), em0);
	e += (uint64_t)__builtin_popcountll(em0);
	uint64_t w1 = 0;
	if (R > 8) {
		const uint64_t x1 = _pdep_u64((bm >> cpw) & ibp_lowmask(cpw), lane_lo) * ones, em1 = t->m[1] & x1;
		w1 = _pdep_u64((uint64_t)(v >> (t->so[1] & 127)), t->nm[1]) | (t->b[1] & ~x1) |
		     _pdep_u64((uint64_t)(v >> (e & 127)), em1);
		e += (uint64_t)__builtin_popcountll(em1);
	}
	if (e > lim) /* past the row: nothing stored */
		return UINT64_MAX;
	if (R == 16) {
		ibp_store64(dst, w0);
		ibp_store64(dst + 8, w1);
	} else if (R >= 8) {
		ibp_store64(dst, w0);
		ibp_st_partial(dst + 8, w1, R - 8);
	} else {
		ibp_st_partial(dst, w0, R);
	}
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
