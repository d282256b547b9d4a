/* coll_reduce_nocuda.c - ibpi_coll_reduce_add_cuda in builds without CUDA. */
#include "coll/coll_mem.h"
#include "util/error.h"

ibp_status_t ibpi_coll_reduce_add_cuda(const void *d_part, const void *d_local, ibp_dtype_t dt, uint64_t n,
				  void *d_dst, void *stream)
{
	(void)d_part;
	(void)d_local;
	(void)dt;
	(void)n;
	(void)d_dst;
	(void)stream;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "coll: reduce kernel: libibp was built without CUDA");
}
