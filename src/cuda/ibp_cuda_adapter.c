/* ibp_cuda_adapter.c - a device store made from an opened CPU store
 * (ibp_cuda_store_from_store): the bridge from the store layer to the GPU
 * path, kept apart from the helpers that ibp_cuda_store_create uses, so
 * that calls go one way (adapter -> create -> helpers). */
#include <stdlib.h>
#include <string.h>

#include "ibp/container.h"
#include "ibp/cuda.h"
#include "ibp/store.h"
#include "util/error.h"

ibp_status_t ibp_cuda_store_from_store(const ibp_store_t *s, ibp_cuda_payload_t payload_kind,
				       unsigned flags, void *stream, ibp_cuda_store_t **out)
{
	if (out)
		*out = NULL;
	if (!s || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_from_store: NULL argument");
	const ibp_container_t *c = ibp_store_container(s);
	if (ibp_container_codec_id(c) != IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				"cuda_store_from_store: %s holds codec %d; only IBP rows have a device store",
				ibp_container_name(c), (int)ibp_container_codec_id(c));
	/* The kernels take 1.1-style offsets/flags/clusters arrays: expand the
	 * container's index (compact in 1.2 files) into temporary ones, which
	 * ibp_cuda_store_create copies. Reading the compact index on the device
	 * (one group base plus a warp prefix sum of lengths) is the next step. */
	uint64_t n = ibp_store_nrows(s);
	int packed = ibp_container_layout(c) == IBP_LAYOUT_PACKED;
	int multi = ibp_codec_nclusters(ibp_store_codec(s)) > 1;
	uint64_t *off = packed ? malloc((size_t)(8 * (n + 1))) : NULL;
	uint8_t *fl = malloc((size_t)(n ? n : 1));
	uint8_t *cl = multi ? malloc((size_t)(n ? n : 1)) : NULL;
	ibp_status_t st;
	if ((packed && !off) || !fl || (multi && !cl)) {
		st = ibpi_fail(IBP_ERR_NOMEM, "cuda_store_from_store: %s: no memory to expand the index of %llu "
			      "rows", ibp_container_name(c), (unsigned long long)n);
		goto out;
	}
	st = ibp_container_index_expand(c, off, fl, cl);
	if (st != IBP_OK)
		goto out;
	ibp_cuda_store_desc_t d;
	memset(&d, 0, sizeof(d));
	d.codec = ibp_store_codec(s);
	d.payload = ibp_container_payload(c, &d.payload_bytes);
	d.offsets = off;
	d.flags = fl;
	d.clusters = cl;
	d.nrows = n;
	d.payload_kind = payload_kind;
	st = ibp_cuda_store_create(&d, flags, stream, out);
out:
	free(off);
	free(fl);
	free(cl);
	return st;
}
