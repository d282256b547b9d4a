/* dynamiq_cuda_nocuda.c - DynamiQ's CUDA entry points in a build without
 * CUDA: they report IBP_ERR_UNSUPPORTED. */
#include "cuda/dynamiq_cuda.h"
#include "util/error.h"

ibp_status_t ibpi_dq_hop_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in, const float *d_x,
			 int w, uint8_t *d_out, int32_t *d_status, void *stream)
{
	(void)p, (void)j0, (void)j1, (void)d_in, (void)d_x, (void)w, (void)d_out, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_dq_hop_cuda: libibp was built without CUDA");
}

ibp_status_t ibpi_dq_decode_chunk_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in,
				  float *d_y, int32_t *d_status, void *stream)
{
	(void)p, (void)j0, (void)j1, (void)d_in, (void)d_y, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_dq_decode_chunk_cuda: libibp was built without CUDA");
}
