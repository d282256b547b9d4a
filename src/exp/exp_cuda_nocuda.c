/* exp_cuda_nocuda.c - the exponent codec's CUDA entry points in a build
 * without CUDA: they check nothing and report IBP_ERR_UNSUPPORTED. */
#include "ibp/exp.h"
#include "util/error.h"

ibp_status_t ibp_exp_encode_workspace_cuda(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes)
{
	(void)dt, (void)n, (void)chunk_elems, (void)bytes;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "exp_encode_workspace_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_exp_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_exp_opts_t *opts, void *d_dst, uint64_t dst_stride, uint64_t *d_sizes,
				 void *d_workspace, uint64_t workspace_bytes, void *stream)
{
	(void)d_src, (void)dt, (void)n, (void)chunk_elems, (void)opts, (void)d_dst, (void)dst_stride;
	(void)d_sizes, (void)d_workspace, (void)workspace_bytes, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "exp_encode_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_exp_decode_cuda(const void *d_src, uint64_t src_bytes, const uint64_t *d_offsets,
				 const uint64_t *d_sizes, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, void *d_dst,
				 int32_t *d_status, void *stream)
{
	(void)d_src, (void)src_bytes, (void)d_offsets, (void)d_sizes, (void)dt, (void)n, (void)chunk_elems, (void)d_dst;
	(void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "exp_decode_cuda: libibp was built without CUDA");
}

/* Deprecated alias (docs/API.md "Names"). */
ibp_status_t ibp_exp_cuda_encode_workspace(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes)
{
	return ibp_exp_encode_workspace_cuda(dt, n, chunk_elems, bytes);
}
