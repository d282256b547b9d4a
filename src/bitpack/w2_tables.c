/* w2_tables.c - the AVX2 two-window static tables for C = 4
 * (ibp_cluster_t.w2, ibp_w2group_t), built by ibp_codec_create_ex through
 * ibpi_build_w2; a file of its own to keep codec.c under the size limit
 * (tools/check-cycles.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bitpack/codec_internal.h"

int ibpi_build_w2(ibp_codec_t *c, int avx2_ok)
{
	const uint64_t D = c->D, K = c->K, G = 8;
	const uint64_t ng = c->last_bytes == 4 ? D / G : (D - 1) / G;
	if (!avx2_ok || c->C != 4 || ng == 0)
		return 1;
	if (K * ng > SIZE_MAX / sizeof(ibp_w2group_t) / 4 || K * D > SIZE_MAX / 64)
		return 0;
	const size_t gbytes = K * ng * sizeof(ibp_w2group_t);
	const size_t bytes = gbytes + K * D * sizeof(uint64_t) + K * sizeof(ibp_w2_t);
	uint8_t *mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	c->mem[17] = mem;
	if (!mem)
		return 0;
	memset(mem, 0, bytes);
	ibp_w2group_t *wg = (ibp_w2group_t *)(void *)mem;
	uint64_t *fixes = (uint64_t *)(void *)(mem + gbytes);
	ibp_w2_t *hdr = (ibp_w2_t *)(void *)(mem + gbytes + K * D * sizeof(uint64_t));
	int used = 0;
	for (uint64_t k = 0; k < K; k++) {
		ibp_cluster_t *cl = &c->cl[k];
		if (cl->nvg16) /* the 16-lane tables serve */
			continue;
		ibp_w2group_t *g0 = wg + k * ng;
		uint64_t *fx = fixes + k * D, nfix = 0;
		int three = 0;
		for (uint64_t j = 0; j < ng * G; j++) {
			ibp_w2group_t *q = &g0[j / G];
			const uint64_t l = j % G, o = cl->soff[j];
			if (l % 4 == 0)
				q->lo[l / 4] = o >> 3;
			/* <= 12: 3 fields of <= 32 bits from bit <= 7 */
			const uint64_t rel = (o >> 3) - q->lo[l / 4], sh = o & 7;
			for (uint64_t t = 0; t < 4; t++)
				q->idx[4 * l + t] = (uint8_t)(rel + t);
			q->b[l] = (uint32_t)cl->b[j];
			const ibp_run_t *r = cl->runs + cl->nrun[j];
			const uint64_t nr = cl->nrun[j + 1] - cl->nrun[j];
			uint32_t sr[3] = { 0 }, sl[3] = { 0 }, m[3] = { 0 };
			unsigned slots = 0; /* bits of the slots taken */
			int ok = nr <= 3;
			for (uint64_t i = 0; i < nr && ok; i++) {
				const uint64_t a = sh + r[i].src, len = (uint64_t)__builtin_popcountll(r[i].mask);
				unsigned s;
				if (!(slots & 1) && a + len <= 32)
					s = 0;
				else if (a >= 8 && !(slots & 2))
					s = 1;
				else if (a >= 8 && !(slots & 4))
					s = 2;
				else {
					ok = 0;
					break;
				}
				slots |= 1u << s;
				sr[s] = (uint32_t)(s ? a - 8 : a);
				sl[s] = r[i].pos;
				m[s] = (uint32_t)r[i].mask;
			}
			if (!ok) {
				fx[nfix++] = j;
				continue; /* lane left b_j only: patched after */
			}
			three |= (slots & 4) != 0;
			for (unsigned s = 0; s < 3; s++) {
				q->sr[s][l] = sr[s];
				q->sl[s][l] = sl[s];
				q->m[s][l] = m[s];
			}
		}
		/* with the qword pairs at hand, only without fix-ups (a fix-up a
		 * group made the f32 PCA and Gaussian rows slower than q2) */
		if (nfix > D / 4 || (cl->q2 && nfix))
			continue;
		hdr[k] = (ibp_w2_t){ .g = g0, .ng = ng, .fix = fx, .nfix = nfix, .three = three };
		cl->w2 = &hdr[k];
		used = 1;
	}
	if (!used) { /* no cluster took them */
		free(mem);
		c->mem[17] = NULL;
	}
	return 1;
}
