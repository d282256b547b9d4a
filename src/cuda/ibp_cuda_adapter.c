/* ibp_cuda_adapter.c - a device store made from an opened CPU store
 * (ibp_cuda_store_from_store): the bridge from the store layer to the GPU
 * path, kept apart from the helpers that ibp_cuda_store_create uses, so
 * that calls go one way (adapter -> create -> helpers). */
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
		return ibp_fail(IBP_ERR_INVALID_ARG, "cuda_store_from_store: NULL argument");
	const ibp_container_t *c = ibp_store_container(s);
	if (ibp_container_codec_id(c) != IBP_CODEC_IBP)
		return ibp_fail(IBP_ERR_UNSUPPORTED,
				"cuda_store_from_store: %s holds codec %d; only IBP rows have a device store",
				ibp_container_name(c), (int)ibp_container_codec_id(c));
	ibp_cuda_store_desc_t d;
	memset(&d, 0, sizeof(d));
	d.codec = ibp_store_codec(s);
	d.payload = ibp_container_payload(c, &d.payload_bytes);
	d.offsets = ibp_container_layout(c) == IBP_LAYOUT_PACKED ? ibp_container_offsets(c) : NULL;
	d.flags = ibp_container_flags(c);
	d.clusters = ibp_container_clusters(c);
	d.nrows = ibp_store_nrows(s);
	d.payload_kind = payload_kind;
	return ibp_cuda_store_create(&d, flags, stream, out);
}
