/* ibp_bag_nocuda.c - ibp_store_embedding_bag_cuda in a build without CUDA:
 * IBP_ERR_NO_DEVICE with a detail (ibp_store_embedding_bag pools on the CPU). */
#include "ibp/cuda.h"
#include "util/error.h"

ibp_status_t ibp_store_embedding_bag_cuda(const ibp_cuda_store_t *s, ibp_bag_mode_t mode, unsigned flags,
					  const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids,
					  const int64_t *offsets, uint64_t n_bags, const float *weights,
					  int64_t padding_idx, ibp_dtype_t dtype, void *out, int32_t *status,
					  void *stream)
{
	(void)s, (void)mode, (void)flags, (void)ids, (void)id_dtype, (void)n_ids, (void)offsets, (void)n_bags;
	(void)weights, (void)padding_idx, (void)dtype, (void)out, (void)status, (void)stream;
	return ibp_fail(IBP_ERR_NO_DEVICE, "embedding_bag_cuda: libibp was built without CUDA "
			"(ibp_store_embedding_bag pools on the CPU)");
}
