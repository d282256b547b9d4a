/* slab_nocuda.c - the slab cache's device steps in a build without CUDA
 * (twin of kernels/slab_cache.cu and slab_cudahost.c): IBP_ERR_NO_DEVICE;
 * the CPU twins (slab_batch.c) work in every build. */
#include <string.h>

#include "slab_batch.h"
#include "util/error.h"

#define NO_CUDA "libibp was built without CUDA (the CPU twin ibp_slab_%s works)"

ibp_status_t ibpi_slab_probe_cuda(const ibp_slab_table_t *t, const int64_t *ids, uint64_t n, uint64_t *ent, int pin,
				 void *stream)
{
	(void)t, (void)ids, (void)n, (void)ent, (void)pin, (void)stream;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_probe_cuda: " NO_CUDA, "probe");
}

ibp_status_t ibpi_slab_erase_cuda(const ibp_slab_table_t *t, const int64_t *keys, uint64_t n,
				 unsigned long long *nerased, void *stream)
{
	(void)t, (void)keys, (void)n, (void)nerased, (void)stream;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_erase_cuda: " NO_CUDA, "erase");
}

ibp_status_t ibpi_slab_insert_cuda(const ibp_slab_table_t *t, const ibp_slab_insert_op_t *ops, uint64_t n,
				  unsigned long long *nfull, void *stream)
{
	(void)t, (void)ops, (void)n, (void)nfull, (void)stream;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_insert_cuda: " NO_CUDA, "insert");
}

ibp_status_t ibpi_slab_gather_cuda(const ibp_slab_table_t *t, const uint64_t *ent, uint64_t n, uint8_t *stage,
				  uint64_t stride, uint32_t *len, uint32_t *meta, int unpin, void *stream)
{
	(void)t, (void)ent, (void)n, (void)stage, (void)stride, (void)len, (void)meta, (void)unpin, (void)stream;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_gather_cuda: " NO_CUDA, "gather");
}

ibp_status_t ibpi_slab_table_alloc_cuda(ibp_slab_table_t *t, uint64_t cap, uint64_t nslots, uint64_t mem_bytes,
				       const uint32_t *slot_bytes, uint32_t nclasses)
{
	(void)cap, (void)nslots, (void)mem_bytes, (void)slot_bytes, (void)nclasses;
	if (t)
		memset(t, 0, sizeof(*t));
	return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_table_alloc_cuda: libibp was built without CUDA");
}

void ibpi_slab_table_free_cuda(ibp_slab_table_t *t)
{
	if (t)
		memset(t, 0, sizeof(*t));
}
