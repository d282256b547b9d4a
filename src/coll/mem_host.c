/* mem_host.c - the algorithms' buffer steps on host memory: the codecs on
 * the CPU, working buffers the communicator keeps between calls. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/coll_mem.h"
#include "util/error.h"

static void h_put(ibp_coll_comm_t *c, coll_bufs_t *b)
{
	(void)c; /* the communicator keeps them (ibpi_coll_ws) */
	memset(b, 0, sizeof *b);
}

static ibp_status_t h_get(ibp_coll_comm_t *c, ibp_dtype_t dt, uint64_t maxn, int reduce, coll_bufs_t *b)
{
	memset(b, 0, sizeof *b);
	IBP_TRY(ibpi_coll_msg_cap(dt, maxn, &b->cap));
	uint64_t esz = ibp_dtype_size(dt), n1 = maxn ? maxn : 1;
	if (!(b->m[0] = ibpi_coll_ws(c, COLL_WS_MSG0, b->cap)) || !(b->m[1] = ibpi_coll_ws(c, COLL_WS_MSG1, b->cap)))
		return IBP_ERR_NOMEM;
	if (reduce && (!(b->f = ibpi_coll_ws(c, COLL_WS_F, n1 * sizeof(float))) ||
		       !(b->tmp = ibpi_coll_ws(c, COLL_WS_TMP, n1 * esz)) || !(b->acc = ibpi_coll_ws(c, COLL_WS_ACC, n1 * esz))))
		return IBP_ERR_NOMEM;
	return IBP_OK;
}

static ibp_status_t h_encode(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *src, void *msg, uint64_t cap,
			     uint64_t *bytes)
{
	return ibpi_coll_encode(h, src, msg, cap, c->o.nthreads, c->lsq_bits, c->exp_table, bytes);
}

static ibp_status_t h_check(ibp_coll_comm_t *c, const void *msg, uint64_t bytes, const coll_hdr_t *want, int from,
			    coll_hdr_t *h)
{
	(void)c;
	return ibpi_coll_check(msg, bytes, want, from, h);
}

static ibp_status_t h_decode(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *msg, uint64_t bytes, void *dst)
{
	return ibpi_coll_decode(h, msg, bytes, dst, c->o.nthreads);
}

static ibp_status_t h_reduce(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *msg, uint64_t bytes,
			     const void *local, coll_bufs_t *b)
{
	IBP_TRY(ibpi_coll_decode_f32(h, msg, bytes, b->f, b->tmp, c->o.nthreads));
	ibpi_coll_add_round(b->f, local, (ibp_dtype_t)h->dtype, h->elems, b->acc);
	return IBP_OK;
}

static ibp_status_t h_copy(ibp_coll_comm_t *c, void *dst, const void *src, uint64_t bytes)
{
	(void)c;
	if (bytes && dst != src)
		memmove(dst, src, bytes);
	return IBP_OK;
}

static ibp_status_t h_finish(ibp_coll_comm_t *c)
{
	(void)c;
	return IBP_OK;
}

const coll_mem_ops_t ibpi_coll_mem_host = { h_get, h_put, h_encode, h_check, h_decode, h_reduce, h_copy, h_finish };
