/* ibp_bag_host.c - ibp_store_embedding_bag_cuda on a host-fallback store
 * (both builds): the store's host arrays pooled by the CPU bag's engine
 * (store/bag_rows.h), with the device's per-bag status and error count. */
#include "cuda/ibp_cuda_internal.h"
#include "store/bag_rows.h"
#include "util/error.h"

ibp_status_t ibpi_hstore_embedding_bag(ibp_hstore_t *h, ibp_bag_mode_t mode, unsigned flags, const void *ids,
				      ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets, uint64_t n_bags,
				      const float *weights, int64_t padding_idx, ibp_dtype_t dtype, void *out,
				      int32_t *status)
{
	if (!h)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "embedding_bag_cuda: NULL store");
	const ibp_bag_rows_t rows = { h->codec,	   h->payload, h->offsets, h->flags,
				      h->clusters, h->nrows,   h->row_bytes, dtype };
	uint64_t nfailed = 0;
	ibp_status_t st = ibpi_bag_pool_rows(&rows, mode, flags, ids, id_dtype, n_ids, offsets, n_bags, weights,
					    padding_idx, out, status, &nfailed);
	h->nerr += nfailed;
	return st;
}
