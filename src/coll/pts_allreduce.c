/* pts_allreduce.c - RCMoE's PTS all-reduce on a communicator: every
 * rank encodes its gradient once (rcmoe.c), the streams go round the ring
 * unchanged, and each rank adds them all in rank order. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/dynamiq_simd.h" /* coll_mix */
#include "coll/rcmoe.h"
#include "util/error.h"

static int mod(int a, int p)
{
	return ((a % p) + p) % p;
}

ibp_status_t ibpi_pts_allreduce(ibp_coll_comm_t *c, coll_hdr_t h, const void *send, void *recv, uint64_t count)
{
	int r = c->rank, p = c->nranks, right = mod(r + 1, p), left = mod(r - 1, p);
	ibp_dtype_t dt = (ibp_dtype_t)h.dtype;
	uint64_t cap = COLL_HDR + ibpi_pts_max_bytes(count), k1 = count ? count : 1;
	/* the communicator's working buffers: a fresh 10-20 MB a call cost more
	 * in first touches than the codec (issue 38's measurements) */
	float *g = ibpi_coll_ws(c, COLL_WS_F, k1 * sizeof(float)), *acc = ibpi_coll_ws(c, COLL_WS_ACC, k1 * sizeof(float));
	uint8_t *all = ibpi_coll_ws(c, COLL_WS_MSG0, (uint64_t)p * cap);
	uint64_t *sz = calloc((size_t)p, sizeof(uint64_t));
	ibp_status_t s = IBP_OK;
	if (!g || !acc || !all || !sz) {
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: pts: out of memory for %llu elements", (unsigned long long)count);
		goto out;
	}
	memset(acc, 0, k1 * sizeof(float));
	ibpi_coll_widen(send, dt, count, g);
	/* Each rank's own stream; the key differs per rank and per call. */
	uint64_t key = coll_mix(0x505453ull ^ coll_mix(h.seq) ^ ((uint64_t)(r + 1) * 0xd6e8feb86659fd93ull));
	uint8_t *mine = all + (uint64_t)r * cap;
	coll_hdr_t oh = h;
	oh.enc = COLL_ENC_PTS;
	oh.elems = count;
	oh.chunk = (uint32_t)r;
	memcpy(mine, &oh, sizeof oh);
	if ((s = ibpi_pts_encode(g, count, PTS_SIGMA, key, mine + COLL_HDR, cap - COLL_HDR, &sz[r])) != IBP_OK)
		goto out;
	sz[r] += COLL_HDR;
	/* Ring all-gather of the variable-size streams, forwarded unchanged. */
	for (int t = 0; t < p - 1; t++) {
		int so = mod(r - t, p), ro = mod(r - 1 - t, p);
		coll_hdr_t want = h, got;
		want.elems = count;
		want.chunk = (uint32_t)ro;
		uint8_t *rb = all + (uint64_t)ro * cap;
		if ((s = ibpi_coll_sendrecv(c, right, all + (uint64_t)so * cap, sz[so], count * ibp_dtype_size(dt), left, rb,
				       cap, &sz[ro])) != IBP_OK ||
		    (s = ibpi_coll_check(rb, sz[ro], &want, left, &got)) != IBP_OK)
			goto out;
		if (got.enc != COLL_ENC_PTS) {
			s = ibpi_fail(IBP_ERR_CORRUPT, "coll: pts: message from rank %d has encoding %u", left, got.enc);
			goto out;
		}
	}
	/* Rank order: every rank adds the same values in the same order. */
	for (int o = 0; o < p; o++)
		if ((s = ibpi_pts_decode_add(all + (uint64_t)o * cap + COLL_HDR, sz[o] - COLL_HDR, count, acc)) != IBP_OK)
			goto out;
	ibpi_coll_narrow(acc, dt, count, recv);
out:
	free(sz);
	return s;
}
