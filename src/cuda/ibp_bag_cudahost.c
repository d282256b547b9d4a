/* ibp_bag_cudahost.c - argument checks of ibp_store_embedding_bag_cuda
 * (ibp/bag.h); kernels/ibp_bag.cu launches the kernel. */
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "ibp/bag.h"
#include "ibp/cuda.h"
#include "util/error.h"
#include "cuda/ibp_cuda_internal.h"

typedef unsigned long long ull;

/* kernels/ibp_bag.cu: the launch, for a store on the current device. */
#ifdef __cplusplus
extern "C"
#endif
ibp_status_t ibpi_bag_launch_cuda(const ibp_cuda_store_t *store, int mode, int unfused, const void *ids, int ids64,
				 uint64_t n_ids, const int64_t *offsets, uint64_t n_bags, const float *weights,
				 int64_t padding_idx, int dt, void *out, int32_t *status, void *stream);

static ibp_status_t bag_cu_fail(cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "embedding_bag_cuda: %s: %s", what, cudaGetErrorString(e));
	return ibpi_fail(IBP_ERR_CUDA, "embedding_bag_cuda: %s: %s (%s)", what, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

/* Where p lives: 1 pinned host memory (the host may read it), 0 device or
 * managed memory; pageable host memory is refused (a kernel reading it
 * would fault). */
static ibp_status_t bag_where(const void *p, const char *what, int *host)
{
	struct cudaPointerAttributes at;
	cudaError_t e = cudaPointerGetAttributes(&at, p);
	if (e != cudaSuccess)
		return bag_cu_fail(e, "cudaPointerGetAttributes");
	if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) {
		*host = 0;
		return IBP_OK;
	}
	if (at.type == cudaMemoryTypeHost && at.devicePointer == p) {
		*host = 1;
		return IBP_OK;
	}
	return ibpi_fail(IBP_ERR_INVALID_ARG,
			"embedding_bag_cuda: %s is not device-accessible (pageable host memory, or pinned memory "
			"whose device address differs: pass that address)", what);
}

ibp_status_t ibp_store_embedding_bag_cuda(const ibp_cuda_store_t *s, ibp_bag_mode_t mode, unsigned flags,
					  const void *ids, ibp_dtype_t id_dtype, uint64_t n_ids,
					  const int64_t *offsets, uint64_t n_bags, const float *weights,
					  int64_t padding_idx, ibp_dtype_t dtype, void *out, int32_t *status,
					  void *stream)
{
	const char *fn = "embedding_bag_cuda";
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL store", fn);
	if (!ibp_cuda_store_on_device(s)) /* host fallback: the CPU bag, host pointers, now */
		return ibpi_hstore_embedding_bag(ibpi_cuda_store_hstore(s), mode, flags, ids, id_dtype, n_ids, offsets,
						n_bags, weights, padding_idx, dtype, out, status);
	if (mode != IBP_BAG_SUM && mode != IBP_BAG_MEAN && mode != IBP_BAG_MAX)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: mode %d is not sum (0), mean (1) or max (2)", fn, (int)mode);
	if (id_dtype != IBP_DTYPE_I32 && id_dtype != IBP_DTYPE_I64)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: ids must be int32 or int64, not dtype %d", fn, (int)id_dtype);
	if (flags & ~(unsigned)IBP_BAG_UNFUSED_WEIGHTS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, flags);
	if (weights && mode != IBP_BAG_SUM)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: per-id weights need mode sum", fn);
	const uint64_t nrows = ibp_cuda_store_nrows(s), R = ibp_cuda_store_row_bytes(s);
	int dt;
	if (dtype == IBP_DTYPE_F32)
		dt = 0;
	else if (dtype == IBP_DTYPE_F16)
		dt = 1;
	else if (dtype == IBP_DTYPE_BF16)
		dt = 2;
	else
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: rows of dtype %d cannot be pooled (float32, float16 or "
				"bfloat16 only)", fn, (int)dtype);
	if (R % (dt == 0 ? 4u : 2u) != 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of %llu bytes are not whole %s elements", fn, (ull)R,
				ibp_dtype_name(dtype));
	if (padding_idx < -1 || (padding_idx >= 0 && (uint64_t)padding_idx >= nrows))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: padding_idx %lld is not -1 or a row below %llu", fn,
				(long long)padding_idx, (ull)nrows);
	if (n_bags == 0)
		return IBP_OK;
	if (!offsets || !out || (n_ids > 0 && !ids))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL offsets, out or ids", fn);
	int host = 0;
	IBP_TRY(bag_where(out, "out", &host));
	if (n_ids > 0)
		IBP_TRY(bag_where(ids, "ids", &host));
	if (weights)
		IBP_TRY(bag_where(weights, "weights", &host));
	if (status)
		IBP_TRY(bag_where(status, "status", &host));
	IBP_TRY(bag_where(offsets, "offsets", &host));
	/* the kernel loads whole elements */
	if ((uintptr_t)out % (dt == 0 ? 4u : 2u) || (uintptr_t)ids % (id_dtype == IBP_DTYPE_I64 ? 8u : 4u) ||
	    (uintptr_t)offsets % 8u || (uintptr_t)weights % 4u || (uintptr_t)status % 4u)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: out, ids, offsets, weights or status not aligned to its "
				"element size", fn);
	if (host) {
		/* offsets the host can read are checked now; the kernel checks
		 * device ones bag by bag (a bad bag gets IBP_ERR_INVALID_ARG) */
		if (offsets[0] < 0 || (uint64_t)offsets[n_bags] > n_ids)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: offsets span [%lld, %lld), outside the %llu ids", fn,
					(long long)offsets[0], (long long)offsets[n_bags], (ull)n_ids);
		for (uint64_t b = 0; b < n_bags; b++)
			if (offsets[b] > offsets[b + 1])
				return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: offsets[%llu] = %lld > offsets[%llu] = %lld",
						fn, (ull)b, (long long)offsets[b], (ull)b + 1,
						(long long)offsets[b + 1]);
	}
	return ibpi_bag_launch_cuda(s, (int)mode, (flags & IBP_BAG_UNFUSED_WEIGHTS) != 0, ids,
				   id_dtype == IBP_DTYPE_I64, n_ids, offsets, n_bags, weights, padding_idx, dt, out,
				   status, stream);
}
