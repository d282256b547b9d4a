/* transport_nccl_stub.c - the NCCL entry points of a libibp built without
 * NCCL (no CUDA, or nccl.h / libnccl not found; transport_nccl.c has the
 * real ones): each answers IBP_ERR_UNSUPPORTED and says why. */
#include "coll/coll_internal.h"
#include "util/error.h"

static ibp_status_t no_nccl(const char *what)
{
	return ibpi_fail(IBP_ERR_UNSUPPORTED,
			"coll: %s: this libibp was built without NCCL (configure with CUDA and NCCL found: "
			"-DIBP_CUDA=ON -DIBP_NCCL=ON)",
			what);
}

ibp_status_t ibp_coll_nccl_transport(const void *nccl_comm, int64_t timeout_ms, ibp_coll_transport_t *t)
{
	(void)nccl_comm;
	(void)timeout_ms;
	(void)t;
	return no_nccl("nccl_transport");
}

ibp_status_t ibp_coll_comm_from_nccl(const void *nccl_comm, const ibp_coll_opts_t *opts, ibp_coll_comm_t **out)
{
	(void)nccl_comm;
	(void)opts;
	if (out)
		*out = NULL; /* as every failing constructor */
	return no_nccl("comm_from_nccl");
}
