/* row_tables.c - the per-row tables of a codec built by
 * ibp_codec_create_ex that are not SIMD groups: the rows of clusters
 * without static fields (base_row) and the tiny tables (ibp_tiny_t); a
 * file of its own to keep codec.c under the size limit
 * (tools/check-cycles.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bitpack/codec_internal.h"

/* Builds ibp_cluster_t.base_row of every cluster without static fields
 * (S = 0), by the portable kernel on an empty body (it reads none), in one
 * allocation of at most 64 MiB (else none: the kernels rebuild it per row);
 * returns 0 on no memory. The kernel is an argument: this file then needs
 * nothing of codec.c (no dependency cycle). */
int ibpi_build_base_rows(ibp_codec_t *c, const ibp_kernels_t *portable)
{
	uint64_t n = 0;
	for (unsigned k = 0; k < c->K; k++)
		n += c->cl[k].S == 0;
	if (n == 0 || c->R > (64u << 20) / n)
		return 1;
	uint8_t *mem = malloc(n * c->R);
	c->mem[10] = mem;
	if (!mem)
		return 0;
	static const uint8_t empty[8];
	for (unsigned k = 0; k < c->K; k++) {
		if (c->cl[k].S != 0)
			continue;
		portable->decode_static(c, &c->cl[k], empty, 0, mem);
		c->cl[k].base_row = mem;
		mem += c->R;
	}
	return 1;
}

/* Builds the tiny tables (ibp_codec_t.tiny) of a codec of rows of at
 * most IBP_TINY_MAX_BYTES chunk bytes; returns 0 on no memory. Built on
 * every CPU: small, and the kernels choose. */
int ibpi_build_tiny(ibp_codec_t *c)
{
	const uint64_t D = c->D, C = c->C, cpw = 8 / C;
	if (D * C > IBP_TINY_MAX_BYTES)
		return 1;
	ibp_tiny_t *t = calloc(c->K, sizeof(*t));
	c->mem[18] = t;
	if (!t)
		return 0;
	c->tiny_s64 = 1;
	for (unsigned k = 0; k < c->K; k++) {
		const ibp_cluster_t *cl = &c->cl[k];
		t[k].nclean = (uint8_t)cl->nclean;
		t[k].xv = (uint8_t)(cl->has_x != 0);
		c->tiny_s64 &= cl->S <= 64;
		for (uint64_t j = 0; j < D; j++) {
			const uint64_t w = j / cpw;
			const unsigned sh = (unsigned)(8 * C * (j % cpw));
			t[k].nm[w] |= cl->nm[j] << sh;
			t[k].m[w] |= cl->m[j] << sh;
			t[k].b[w] |= cl->b[j] << sh;
			if (j % cpw == 0)
				t[k].so[w] = (uint8_t)cl->soff[j];
		}
	}
	c->tiny = t;
	return 1;
}
