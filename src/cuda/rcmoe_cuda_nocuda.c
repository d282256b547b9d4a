/* rcmoe_cuda_nocuda.c - LSQ's and PTS's CUDA entry points in a build without CUDA:
 * they report IBP_ERR_UNSUPPORTED. */
#include "cuda/rcmoe_cuda.h"
#include "util/error.h"

uint64_t ibpi_lsq_cuda_workspace(uint64_t n, uint64_t row)
{
	(void)n, (void)row;
	return 0;
}

ibp_status_t ibpi_lsq_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K,
			     uint64_t key, uint8_t *d_out, void *d_ws, int32_t *d_status, void *stream)
{
	(void)d_src, (void)dt, (void)n, (void)row, (void)B, (void)K, (void)key, (void)d_out, (void)d_ws;
	(void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_lsq_encode_cuda: libibp was built without CUDA");
}

ibp_status_t ibpi_lsq_decode_cuda(const uint8_t *d_in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *d_dst,
			     int32_t *d_status, void *stream)
{
	(void)d_in, (void)size, (void)dt, (void)n, (void)d_dst, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_lsq_decode_cuda: libibp was built without CUDA");
}

uint64_t ibpi_pts_cuda_workspace(uint64_t k)
{
	(void)k;
	return 0;
}

ibp_status_t ibpi_pts_encode_cuda(const float *d_g, uint64_t k, double sigma, uint64_t key, uint8_t *d_out,
			     uint64_t *d_size, void *d_ws, int32_t *d_status, void *stream)
{
	(void)d_g, (void)k, (void)sigma, (void)key, (void)d_out, (void)d_size, (void)d_ws, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_pts_encode_cuda: libibp was built without CUDA");
}

ibp_status_t ibpi_pts_decode_add_cuda(const uint8_t *d_in, uint64_t size, uint64_t k, float *d_acc, void *d_ws,
				 int32_t *d_status, void *stream)
{
	(void)d_in, (void)size, (void)k, (void)d_acc, (void)d_ws, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "ibpi_pts_decode_add_cuda: libibp was built without CUDA");
}
