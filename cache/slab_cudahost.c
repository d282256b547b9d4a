/* slab_cudahost.c - device memory of a slab cache table (slab_batch.h),
 * with the CUDA runtime; slab_nocuda.c is its twin without CUDA. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "slab_batch.h"
#include "util/error.h"

static ibp_status_t cu_fail(cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "ibpi_slab_table_alloc_cuda: %s: %s", what, cudaGetErrorString(e));
	return ibpi_fail(IBP_ERR_CUDA, "ibpi_slab_table_alloc_cuda: %s: %s (%s)", what, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

void ibpi_slab_table_free_cuda(ibp_slab_table_t *t)
{
	if (!t)
		return;
	void *p[6] = { t->keys, t->vals, t->pin, t->meta, t->mem, (void *)t->slot_bytes };
	for (int i = 0; i < 6; i++)
		if (p[i] && cudaFree(p[i]) != cudaSuccess)
			(void)cudaGetLastError();
	t->keys = NULL;
	t->vals = NULL;
	t->pin = NULL;
	t->meta = NULL;
	t->mem = NULL;
	t->slot_bytes = NULL;
}

ibp_status_t ibpi_slab_table_alloc_cuda(ibp_slab_table_t *t, uint64_t cap, uint64_t nslots, uint64_t mem_bytes,
				       const uint32_t *slot_bytes, uint32_t nclasses)
{
	if (!t || !slot_bytes || !nclasses || !nslots || !mem_bytes || !cap || (cap & (cap - 1)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_slab_table_alloc_cuda: NULL table or slot sizes, a zero "
				"size, or an index size that is not a power of two");
	memset(t, 0, sizeof(*t));
	cudaError_t e;
	void *sb = NULL;
	const char *what = "cudaMalloc";
	if ((e = cudaMalloc((void **)&t->keys, cap * sizeof(int64_t))) != cudaSuccess ||
	    (e = cudaMalloc((void **)&t->vals, cap * sizeof(uint64_t))) != cudaSuccess ||
	    (e = cudaMalloc((void **)&t->pin, nslots * sizeof(uint32_t))) != cudaSuccess ||
	    (e = cudaMalloc((void **)&t->meta, nslots * sizeof(uint16_t))) != cudaSuccess ||
	    (e = cudaMalloc((void **)&t->mem, mem_bytes)) != cudaSuccess ||
	    (e = cudaMalloc(&sb, nclasses * sizeof(uint32_t))) != cudaSuccess)
		goto fail;
	t->slot_bytes = (const uint32_t *)sb;
	what = "cudaMemset / cudaMemcpy";
	/* keys all 0xFF bytes: IBP_SLAB_KEY_EMPTY */
	if ((e = cudaMemset(t->keys, 0xFF, cap * sizeof(int64_t))) != cudaSuccess ||
	    (e = cudaMemset(t->vals, 0, cap * sizeof(uint64_t))) != cudaSuccess ||
	    (e = cudaMemset(t->pin, 0, nslots * sizeof(uint32_t))) != cudaSuccess ||
	    (e = cudaMemset(t->meta, 0, nslots * sizeof(uint16_t))) != cudaSuccess ||
	    (e = cudaMemcpy(sb, slot_bytes, nclasses * sizeof(uint32_t), cudaMemcpyHostToDevice)) != cudaSuccess)
		goto fail;
	t->cap = cap;
	return IBP_OK;
fail:
	if (sb && !t->slot_bytes)
		t->slot_bytes = (const uint32_t *)sb;
	{
		ibp_status_t s = cu_fail(e, what);
		ibpi_slab_table_free_cuda(t);
		return s;
	}
}
