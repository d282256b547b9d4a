/* row_stats.c - a row's exceptions and the bits of its exception part
 * under a cluster: the encoder's sizing pass, training's cost, the paper
 * layout's size. A file of its own so that the kernel tables (codec.c,
 * codec_bmi2.c) depend on it and not on each other (tools/check-cycles.py).
 */
#include "bitpack/codec_internal.h"

/* The cost of chunk j: with xv, an exception of an enabled chunk takes its
 * hit bit plus e_j bits on a miss. x̂_j = b_j where disabled, so a "hit"
 * that is also a miss only happens on enabled chunks. */
IBP_INLINE void ibp_chunk_cost(const ibp_cluster_t *cl, uint64_t j, uint64_t x, uint64_t *n,
			       uint64_t *E, const int xv)
{
	uint64_t xm = x & cl->m[j], miss = xm != cl->b[j];
	*n += miss;
	if (!xv) {
		*E += miss * cl->ew[j];
	} else {
		/* a hit costs 1 bit (where disabled a hit is a match: adds 0);
		 * arithmetic, not a branch: hits and misses mix unpredictably */
		uint64_t hit = xm == cl->x[j], ewx = (uint64_t)cl->ew[j] + cl->xen[j];
		*E += (ewx ^ ((ewx ^ 1) & (0 - hit))) & (0 - miss);
	}
}

/* xv = 0: every exception costs e_j (no Xvals, or the paper's layout). */
IBP_INLINE void ibp_row_stats_c(const ibp_codec_t *c, const ibp_cluster_t *clp, const uint8_t *row,
				uint64_t *pn, uint64_t *pE, const unsigned C, const int xv)
{
	const ibp_cluster_t clv = *clp, *cl = &clv;
	const uint64_t D = c->D;
	uint64_t n = 0, E = 0, j;
	for (j = 0; j + 1 < D; j++)
		ibp_chunk_cost(cl, j, ibp_ld_chunk(row + j * C, C), &n, &E, xv);
	ibp_chunk_cost(cl, j, ibp_ld_partial(row + j * C, c->last_bytes), &n, &E, xv);
	*pn = n;
	*pE = E;
}

/* Inlined with xv a constant into each caller below: a run-time xv would
 * put a branch into every chunk of the encoder's sizing pass. */
IBP_INLINE void row_stats_xv(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row, uint64_t *n,
			     uint64_t *E, const int xv)
{
	switch (c->C) {
	case 1: ibp_row_stats_c(c, cl, row, n, E, 1, xv); break;
	case 2: ibp_row_stats_c(c, cl, row, n, E, 2, xv); break;
	case 4: ibp_row_stats_c(c, cl, row, n, E, 4, xv); break;
	default: ibp_row_stats_c(c, cl, row, n, E, 8, xv); break;
	}
}

void ibpi_row_stats_xv(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row, uint64_t *n, uint64_t *E,
		       int xv)
{
	if (xv)
		row_stats_xv(c, cl, row, n, E, 1);
	else
		row_stats_xv(c, cl, row, n, E, 0);
}

void ibpi_row_stats(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
		   uint64_t *n, uint64_t *E)
{
	ibpi_row_stats_xv(c, cl, row, n, E, cl->has_x);
}
