/* codec_xruns_k.h - the walks of BITMAP rows with Xvals (the checked
 * walk xscalar_x_from, the run walk xruns), a part of codec_internal.h's
 * kernel template (included from it, where the kernel may call _pdep_u64:
 * BMI2, AVX2, AVX-512); a file of its own to keep that header under the
 * size limit (tools/check-cycles.py). No include guard: each kernel file
 * gets its own copy. */

/* The checked Xval walk (as decode_exc_x: same checks, same result) of a
 * BITMAP row from exception j = 8 i + ctz(w) at body bit e: the run walk
 * finishes a row here from its first field past what it may take
 * unchecked (a partial last chunk, a field past its bits). Out of line:
 * rare, and C and whole read from the codec. */
static __attribute__((noinline, unused)) uint64_t IBP_K(xscalar_x_from)(const ibp_codec_t *c, const ibp_cluster_t *cl,
								    const uint8_t *hdr, uint64_t hdr_len,
								    const uint8_t *body, uint64_t avail, uint8_t *dst,
								    uint64_t i, uint64_t w, uint64_t e)
{
	const unsigned C = c->C;
	const int whole = c->last_bytes == C;
	const uint64_t D = c->D, lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	const uint64_t last = c->last_bytes, jp = whole ? D : D - 1;
	const uint8_t *ew = cl->ew, *xen = cl->xen;
	const uint64_t *m = cl->m, *b = cl->b, *x = cl->x;
	uint8_t tail[24] = { 0 };
	const uint64_t t0 = IBP_K(xtail)(body, avail, tail);
	for (;;) {
		for (; w; w &= w - 1) {
			const uint64_t j = i * 8 + (uint64_t)__builtin_ctzll(w);
			if (xen[j]) {
				if (e >= lim)
					return UINT64_MAX;
				const uint64_t byte = e >> 3;
				const uint8_t hb = byte < t0 ? body[byte] : tail[byte - t0];
				e += 1;
				if ((hb >> ((e - 1) & 7)) & 1) {
					IBP_K(xpatch)(j, x[j] ^ b[j], jp, last, dst, whole, C);
					continue;
				}
			}
			if (lim - e < ew[j])
				return UINT64_MAX;
			IBP_K(xone)(m, b, j, e, body, tail, t0, jp, last, dst, whole, C);
			e += ew[j];
		}
		i += 8; /* the next bitmap word */
		if (i >= hdr_len)
			return e;
		const uint64_t left = hdr_len - i;
		w = left >= 8 ? ibp_load64(hdr + i) : ibp_ld_partial(hdr + i, left);
	}
}

#ifdef IBP_K_XR_IDX64
/* The run walk of a BITMAP row of a cluster with Xvals (C <= 4; kernels
 * that give IBP_K_XR_IDX64, the chunk indices of a bitmap word's bits,
 * and IBP_K_XR_HITS, the XOR of a word's hit patches): as
 * decode_exc_x (same checks, same bytes), but a run of hits (enabled chunks
 * whose hit bit is 1: 88% of the FFN weights' exceptions, in runs of 8.6)
 * is taken by one count of trailing ones, and its patches (x ^ b) are
 * XORed in afterwards by vector ops under masks, a bitmap word at a time; only
 * misses and disabled chunks (fields) go one by one. The bitmap's
 * exceptions are first listed by chunk index (idx64), up to IBP_XR_BATCH
 * at a time: one loop over them, not one per bitmap word (whose exits
 * mispredict); with IBP_K_XR_EW64 (AVX-512) their field widths too, so a
 * miss's width is one load after its rank, not two. At a field it may not take unchecked (a partial last
 * chunk, bits running out at the row's end) it applies the hits before it
 * and hands the row to the checked walk (xscalar_x_from). */
#define IBP_XR_BATCH 256 /* exceptions a batch lists (up to 64 more) */
#define IBP_XR_WORDS 32  /* bitmap words a batch spans at most */

IBP_K_XR_ATTR IBP_INLINE uint64_t IBP_K(xruns_c)(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *hdr,
				       uint64_t hdr_len, const uint8_t *body, uint64_t avail, uint8_t *dst,
				       const unsigned C)
{
	const uint64_t D = c->D, lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	uint64_t e = cl->S;
	if (e > lim)
		return UINT64_MAX;
	const int whole = c->last_bytes == C;
	uint8_t tail[24] = { 0 };
	const uint64_t t0 = IBP_K(xtail)(body, avail, tail);
	const uint8_t *ew = cl->ew;
	const uint64_t *m = cl->m, *b = cl->b, *xenb = cl->xenb;
	uint16_t idx[IBP_XR_BATCH + 64 + 32];
#ifdef IBP_K_XR_EW64
	uint8_t ewk[IBP_XR_BATCH + 64 + 64]; /* the exceptions' field widths, by rank */
#endif
	uint32_t dis[IBP_XR_BATCH + 64 + 1];
	uint64_t wv[IBP_XR_WORDS], nh[IBP_XR_WORDS]; /* the batch's bitmap words, and their chunks not hit */
	uint64_t i = 0, v = 0, eend = e, j, w0, nw;
	while (i < hdr_len) {
		uint64_t cnt = 0, nd = 0;
		w0 = i / 8;
		nw = 0;
		do {
			const uint64_t left = hdr_len - i, w = left >= 8 ? ibp_load64(hdr + i) : ibp_ld_partial(hdr + i, left);
			const uint64_t off = cnt;
#ifdef IBP_K_XR_EW64
			IBP_K_XR_EW64(w, ew + i * 8, ewk + cnt);
#endif
			cnt += IBP_K_XR_IDX64(w, (uint32_t)(i * 8), idx + cnt);
			for (uint64_t dw = w & ~xenb[i / 8]; dw; dw &= dw - 1) /* disabled chunks (rare): their ranks */
				dis[nd++] = (uint32_t)(off + (uint64_t)__builtin_popcountll(w & ((dw & (0 - dw)) - 1)));
			wv[nw] = w;
			nh[nw++] = 0;
			i += 8; /* the batch's next word */
		} while (i < hdr_len && cnt <= IBP_XR_BATCH && nw < IBP_XR_WORDS);
		dis[nd] = UINT32_MAX;
		/* a partial last chunk's exception goes to the checked walk */
		const uint64_t stop = !whole && i >= hdr_len && cnt && idx[cnt - 1] == D - 1 ? cnt - 1 : cnt;
		uint64_t k = 0, di = 0;
		while (k < stop) {
			/* an exception takes <= 1 + 8 C bits: refill below that */
			if (eend - e < 1 + 8 * C) {
				const uint64_t byte = e >> 3;
				v = ibp_load64(byte < t0 ? body + byte : tail + (byte - t0)) >> (e & 7);
				eend = 8 * byte + 64;
				if (eend > lim) /* the bits past lim are the copy's zeros */
					eend = lim;
			}
			if (k == dis[di]) { /* a disabled chunk: its field, no hit bit */
				j = idx[k];
				const uint64_t need = ew[j];
				if (need > eend - e)
					goto resume;
				ibp_st_chunk(dst + j * C, ibp_ld_chunk(dst + j * C, C) ^ _pdep_u64(v, m[j]) ^ b[j], C);
				nh[j / 64 - w0] |= 1ull << (j & 63);
				v >>= need;
				e += need;
				k++, di++;
				continue;
			}
			uint64_t lt = stop - k; /* hits it may take: before the batch's end, a disabled chunk, the bits' end */
			if (dis[di] - k < lt)
				lt = dis[di] - k;
			if (eend - e < lt)
				lt = eend - e;
			if (lt > 63)
				lt = 63;
			const uint64_t r = ~v ? (uint64_t)__builtin_ctzll(~v) : 64; /* hits before the first miss */
			if (r >= lt) {
				if (lt == 0) { /* no bits left: the checked walk fails it */
					j = idx[k];
					goto resume;
				}
				v >>= lt;
				e += lt;
				k += lt;
				continue;
			}
			v >>= r;
			e += r;
			k += r;
			j = idx[k]; /* a miss: its 0 bit, then its field */
#ifdef IBP_K_XR_EW64
			const uint64_t need = 1 + (uint64_t)ewk[k];
#else
			const uint64_t need = 1 + (uint64_t)ew[j];
#endif
			if (need > eend - e) {
				if (eend == lim)
					goto resume;
				continue; /* refill at the miss's bit */
			}
			ibp_st_chunk(dst + j * C, ibp_ld_chunk(dst + j * C, C) ^ _pdep_u64(v >> 1, m[j]) ^ b[j], C);
			nh[j / 64 - w0] |= 1ull << (j & 63);
			v >>= need;
			e += need;
			k++;
		}
		if (stop < cnt) { /* the partial last chunk: not a hit of this walk */
			j = idx[stop];
			goto resume;
		}
		for (uint64_t q = 0; q < nw; q++)
			IBP_K_XR_HITS(dst, cl->xbc, w0 + q, wv[q] & ~nh[q], c->R, C);
	}
	return e;
resume: /* at chunk j, bit e: the batch's hits before j, then the checked walk */
	for (uint64_t q = 0; q < nw && w0 + q <= j / 64; q++)
		IBP_K_XR_HITS(dst, cl->xbc, w0 + q,
			      wv[q] & ~nh[q] & (w0 + q < j / 64 ? ~0ull : (1ull << (j & 63)) - 1), c->R, C);
	return IBP_K(xscalar_x_from)(c, cl, hdr, hdr_len, body, avail, dst, (j >> 6) << 3,
					 wv[j / 64 - w0] & (~0ull << (j & 63)), e);
}

static __attribute__((noinline)) IBP_K_XR_ATTR uint64_t IBP_K(xruns)(const ibp_codec_t *c, const ibp_cluster_t *cl,
								  const uint8_t *hdr, uint64_t hdr_len,
								  const uint8_t *body, uint64_t avail, uint8_t *dst)
{
	switch (c->C) {
	case 1: return IBP_K(xruns_c)(c, cl, hdr, hdr_len, body, avail, dst, 1);
	case 2: return IBP_K(xruns_c)(c, cl, hdr, hdr_len, body, avail, dst, 2);
	default: return IBP_K(xruns_c)(c, cl, hdr, hdr_len, body, avail, dst, 4);
	}
}
#endif /* IBP_K_XR_IDX64 */
