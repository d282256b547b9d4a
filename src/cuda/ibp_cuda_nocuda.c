/* ibp_cuda_nocuda.c - ibp/cuda.h in a build without CUDA: every GPU entry
 * point returns IBP_ERR_NO_DEVICE with a detail; the documented host
 * fallbacks (IBP_CUDA_HOST_FALLBACK stores and pinned allocations) work in
 * ordinary host memory. */
#include <stdlib.h>

#include "ibp/alloc.h"
#include "ibp/cuda.h"
#include "util/error.h"
#include "cuda/ibp_cuda_internal.h"
#include "cuda/ibp_gather_staged.h"

#define NO_CUDA "libibp was built without CUDA"

struct ibp_cuda_store {
	ibp_hstore_t *host;
	ibp_cuda_kernel_t kernel;
};

static ibp_status_t no_device(const char *what)
{
	return ibpi_fail(IBP_ERR_NO_DEVICE, "%s: " NO_CUDA, what);
}

int ibp_cuda_built(void)
{
	return 0;
}

ibp_status_t ibp_cuda_device_count(int *count)
{
	if (count)
		*count = 0;
	return no_device("cuda_device_count");
}

ibp_status_t ibp_cuda_malloc(uint64_t bytes, void **out)
{
	(void)bytes;
	if (out)
		*out = NULL;
	return no_device("cuda_malloc");
}

void ibp_cuda_free(void *p)
{
	(void)p;
}

ibp_status_t ibp_cuda_memcpy(void *dst, const void *src, uint64_t bytes, void *stream)
{
	(void)dst; (void)src; (void)bytes; (void)stream;
	return no_device("cuda_memcpy");
}

ibp_status_t ibp_cuda_memset(void *dst, int value, uint64_t bytes, void *stream)
{
	(void)dst; (void)value; (void)bytes; (void)stream;
	return no_device("cuda_memset");
}

ibp_status_t ibp_cuda_sync(void *stream)
{
	(void)stream;
	return no_device("cuda_sync");
}

ibp_status_t ibp_cuda_codec_create(const ibp_codec_t *codec, void *stream, ibp_cuda_codec_t **out)
{
	(void)codec; (void)stream;
	if (out)
		*out = NULL;
	return no_device("cuda_codec_create");
}

void ibp_cuda_codec_free(ibp_cuda_codec_t *c)
{
	(void)c;
}

const ibp_codec_t *ibp_cuda_codec_host(const ibp_cuda_codec_t *c)
{
	(void)c;
	return NULL;
}

ibp_status_t ibp_train_count_cuda(const void *rows, uint64_t row_bytes, const uint64_t *idx,
				  uint64_t n, uint64_t *counts, void *stream)
{
	(void)rows; (void)row_bytes; (void)idx; (void)n; (void)counts; (void)stream;
	return no_device("train_count_cuda");
}

ibp_status_t ibp_train_mask_cuda(const uint64_t *counts, uint64_t n, uint64_t row_bytes,
				 double t, uint8_t *mask, uint8_t *bitval, void *stream)
{
	(void)counts; (void)n; (void)row_bytes; (void)t; (void)mask; (void)bitval; (void)stream;
	return no_device("train_mask_cuda");
}

ibp_status_t ibp_encode_workspace_cuda(const ibp_cuda_codec_t *c, uint64_t nrows, uint64_t *bytes)
{
	(void)c; (void)nrows;
	if (bytes)
		*bytes = 0;
	return no_device("encode_workspace_cuda");
}

ibp_status_t ibp_encode_batch_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   void *dst, uint64_t dst_cap, uint64_t *offsets, uint8_t *flags,
				   uint8_t *clusters, void *workspace, uint64_t workspace_bytes,
				   void *stream)
{
	(void)c; (void)rows; (void)nrows; (void)dst; (void)dst_cap; (void)offsets; (void)flags;
	(void)clusters; (void)workspace; (void)workspace_bytes; (void)stream;
	return no_device("encode_batch_cuda");
}

ibp_status_t ibp_encode_sizes_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   uint64_t *offsets, uint8_t *flags, uint8_t *clusters,
				   void *workspace, uint64_t workspace_bytes, void *stream)
{
	(void)c; (void)rows; (void)nrows; (void)offsets; (void)flags; (void)clusters;
	(void)workspace; (void)workspace_bytes; (void)stream;
	return no_device("encode_sizes_cuda");
}

ibp_status_t ibp_encode_write_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   const uint64_t *offsets, const uint8_t *flags,
				   const uint8_t *clusters, void *dst, uint64_t dst_cap,
				   void *workspace, uint64_t workspace_bytes, void *stream)
{
	(void)c; (void)rows; (void)nrows; (void)offsets; (void)flags; (void)clusters; (void)dst;
	(void)dst_cap; (void)workspace; (void)workspace_bytes; (void)stream;
	return no_device("encode_write_cuda");
}

ibp_status_t ibp_cuda_store_create(const ibp_cuda_store_desc_t *desc, unsigned flags, void *stream,
				   ibp_cuda_store_t **out)
{
	(void)stream;
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_create: NULL out");
	*out = NULL;
	IBP_TRY(ibpi_cuda_desc_check(desc));
	if (!(flags & IBP_CUDA_HOST_FALLBACK))
		return no_device("cuda_store_create");
	ibp_cuda_store_t *s = calloc(1, sizeof(*s));
	if (!s)
		return ibpi_fail(IBP_ERR_NOMEM, "cuda_store_create: out of memory");
	ibp_status_t st = ibpi_hstore_create(desc, &s->host);
	if (st != IBP_OK) {
		free(s);
		return st;
	}
	*out = s;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "cuda_store_create: " NO_CUDA "; the store was made in "
			"ordinary host memory and ibp_gather_cuda will decode on the CPU");
}

void ibp_cuda_store_free(ibp_cuda_store_t *s)
{
	if (!s)
		return;
	ibpi_hstore_free(s->host);
	free(s);
}

ibp_hstore_t *ibpi_cuda_store_hstore(const ibp_cuda_store_t *s)
{
	return s ? s->host : NULL;
}

int ibp_cuda_store_on_device(const ibp_cuda_store_t *s)
{
	(void)s;
	return 0;
}

uint64_t ibp_cuda_store_nrows(const ibp_cuda_store_t *s)
{
	return s ? s->host->nrows : 0;
}

uint64_t ibp_cuda_store_row_bytes(const ibp_cuda_store_t *s)
{
	return s ? s->host->row_bytes : 0;
}

const ibp_cuda_codec_t *ibp_cuda_store_codec(const ibp_cuda_store_t *s)
{
	(void)s;
	return NULL;
}

ibp_status_t ibp_cuda_store_set_kernel(ibp_cuda_store_t *s, ibp_cuda_kernel_t k)
{
	if (!s || (unsigned)k > (unsigned)IBP_CUDA_KERNEL_DIRECT)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_set_kernel: bad store or kernel %d", (int)k);
	s->kernel = k;
	return IBP_OK;
}

ibp_status_t ibp_cuda_store_errors(ibp_cuda_store_t *s, uint64_t *count, void *stream)
{
	(void)stream;
	if (!s || !count)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_errors: NULL argument");
	*count = s->host->nerr;
	s->host->nerr = 0;
	return IBP_OK;
}

ibp_status_t ibp_gather_cuda(const ibp_cuda_store_t *store, const int64_t *ids, uint64_t n,
			     void *out, const int64_t *out_rows, int32_t *status, void *stream)
{
	(void)stream;
	if (!store)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_cuda: NULL store");
	return ibpi_hstore_gather(store->host, ids, n, out, out_rows, status);
}

ibp_status_t ibp_gather_plain_cuda(const void *src, uint64_t nrows, uint64_t row_bytes,
				   const int64_t *ids, uint64_t n, void *out,
				   const int64_t *out_rows, int32_t *status, void *stream)
{
	(void)src; (void)nrows; (void)row_bytes; (void)ids; (void)n; (void)out; (void)out_rows;
	(void)status; (void)stream;
	return no_device("gather_plain_cuda");
}

ibp_status_t ibpi_gather_staged_cuda(const ibp_cuda_store_t *store, const uint8_t *stage, uint64_t stride,
				    uint64_t nstage, const uint32_t *lens, const uint32_t *meta,
				    const int64_t *idx, uint64_t n, void *out, const int64_t *out_rows,
				    int32_t *status, void *stream)
{
	(void)stream;
	if (!store)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_staged_cuda: NULL store");
	return ibpi_hstore_gather_staged(store->host, stage, stride, nstage, lens, meta, idx, n, out, out_rows,
					status);
}

int ibpi_cuda_store_row_info(const ibp_cuda_store_t *s, uint64_t id, uint64_t *off, uint64_t *len, uint8_t *flags,
			    uint8_t *cl)
{
	return s ? ibpi_hstore_row_info(s->host, id, off, len, flags, cl) : 0;
}

const uint8_t *ibpi_cuda_store_payload(const ibp_cuda_store_t *s)
{
	return s ? s->host->payload : NULL;
}

const ibp_codec_t *ibpi_cuda_store_host_codec(const ibp_cuda_store_t *s)
{
	return s ? s->host->codec : NULL;
}
