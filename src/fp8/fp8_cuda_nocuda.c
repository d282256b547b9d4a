/* fp8_cuda_nocuda.c - the FP8 codec's CUDA entry points in a build without
 * CUDA: they check nothing and report IBP_ERR_UNSUPPORTED. */
#include "ibp/fp8.h"
#include "util/error.h"

ibp_status_t ibp_fp8_convert_cuda(const float *d_src, uint64_t n, ibp_fp8_format_t fmt, uint8_t *d_dst,
				  void *stream)
{
	(void)d_src, (void)n, (void)fmt, (void)d_dst, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "fp8_convert_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_fp8_expand_cuda(const uint8_t *d_src, uint64_t n, ibp_fp8_format_t fmt, float *d_dst,
				 void *stream)
{
	(void)d_src, (void)n, (void)fmt, (void)d_dst, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "fp8_expand_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_fp8_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_fp8_opts_t *o, void *d_dst, void *stream)
{
	(void)d_src, (void)dt, (void)n, (void)chunk_elems, (void)o, (void)d_dst, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "fp8_encode_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_fp8_decode_bounded_cuda(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt, uint64_t n,
					 uint64_t chunk_elems, const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status,
					 void *stream)
{
	(void)d_src, (void)src_bytes, (void)dt, (void)n, (void)chunk_elems, (void)o, (void)d_dst, (void)d_status;
	(void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "fp8_decode_cuda: libibp was built without CUDA");
}

ibp_status_t ibp_fp8_decode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status, void *stream)
{
	(void)d_src, (void)dt, (void)n, (void)chunk_elems, (void)o, (void)d_dst, (void)d_status, (void)stream;
	return ibpi_fail(IBP_ERR_UNSUPPORTED, "fp8_decode_cuda: libibp was built without CUDA");
}

/* Deprecated alias (docs/API.md "Names"). */
ibp_status_t ibp_fp8_decode_cuda_bounded(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt, uint64_t n,
					   uint64_t chunk_elems, const ibp_fp8_opts_t *o, void *d_dst,
					   int32_t *d_status, void *stream)
{
	return ibp_fp8_decode_bounded_cuda(d_src, src_bytes, dt, n, chunk_elems, o, d_dst, d_status, stream);
}
