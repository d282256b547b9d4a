/* ibp_bag_nocuda.c - ibp_store_embedding_bag_cuda in a build without CUDA:
 * a host-fallback store pools on the CPU (ibp_bag_host.c, as
 * ibp_gather_cuda decodes on the CPU); nothing else can exist here. */
#include "ibp/cuda.h"
#include "util/error.h"
#include "cuda/ibp_cuda_internal.h"

ibp_status_t ibp_store_embedding_bag_cuda(const ibp_cuda_store_t *s, ibp_bag_mode_t mode, unsigned flags,
					  const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids,
					  const int64_t *offsets, uint64_t n_bags, const float *weights,
					  int64_t padding_idx, ibp_dtype_t dtype, void *out, int32_t *status,
					  void *stream)
{
	(void)stream;
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "embedding_bag_cuda: NULL store");
	/* every store of this build is a host-fallback one */
	return ibpi_hstore_embedding_bag(ibpi_cuda_store_hstore(s), mode, flags, ids, id_dtype, n_ids, offsets, n_bags,
					weights, padding_idx, dtype, out, status);
}
