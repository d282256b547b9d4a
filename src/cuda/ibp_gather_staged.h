/* ibp_gather_staged.h - the decode of rows already staged in one buffer
 * (the slab cache's hits, copied out of their slots by ibpi_slab_gather),
 * and what the cache needs to know of a device store's rows. Internal:
 * cache/cache_cuda.c is the caller. Implemented in kernels/ibp_gather.cu
 * (the same gather kernel, its staged mode) and, without CUDA, in
 * src/cuda/ibp_cuda_nocuda.c; a host-fallback store decodes on the CPU
 * (src/cuda/ibp_cuda_host.c). */
#ifndef IBP_CUDA_GATHER_STAGED_H
#define IBP_CUDA_GATHER_STAGED_H

#include <stdint.h>
#include "ibp/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For k in [0, n): stage row r = idx[k] (idx NULL: r = k), which must be
 * below nstage, holds lens[r] bytes at stage + r * stride, encoded with the
 * store's codec in mode meta[r] & 0xFF and cluster (meta[r] >> 8) & 0xFF
 * (the slot's codec byte as ibpi_slab_gather returns it; a decoded row is
 * RAW: meta 0, length row_bytes). It is decoded to output row out_rows[k]
 * (NULL: k) of `out`. A row must use exactly lens[r] bytes. status (NULL
 * allowed) per request: IBP_OK; IBP_ERR_OUT_OF_RANGE for r >= nstage
 * (zero-filled); IBP_ERR_CORRUPT for a row the CPU decoder rejects, of
 * another length, or longer than stride (zero-filled); IBP_ERR_INVALID_ARG
 * for a negative out_rows[k] (nothing written). Failures are not counted in
 * ibp_cuda_store_errors. Device store: stage, lens, meta, idx, out_rows,
 * status and out are device memory (or mapped), async on `stream`, no
 * allocation. Host-fallback store: host memory, on the CPU now. Errors:
 * IBP_ERR_INVALID_ARG (NULL store, NULL arrays with n > 0, stride 0 or
 * nstage * stride overflowing), IBP_ERR_CUDA, IBP_ERR_NO_DEVICE. */
ibp_status_t ibpi_gather_staged_cuda(const ibp_cuda_store_t *store, const uint8_t *stage, uint64_t stride,
				    uint64_t nstage, const uint32_t *lens, const uint32_t *meta,
				    const int64_t *idx, uint64_t n, void *out, const int64_t *out_rows,
				    int32_t *status, void *stream);

/* Row `id` (< nrows) of a packed store: its bytes are
 * ibpi_cuda_store_payload(s) + *off, *len of them, mode *flags, cluster
 * *cl (host copies kept by the store). Returns 0 (nothing set) for an
 * inplace store, whose row lengths are known on the device only. */
int ibpi_cuda_store_row_info(const ibp_cuda_store_t *s, uint64_t id, uint64_t *off, uint64_t *len, uint8_t *flags,
			    uint8_t *cl);

/* The payload's address as the gathers read it: a device address (device
 * or mapped host memory), host memory for a host-fallback store. */
const uint8_t *ibpi_cuda_store_payload(const ibp_cuda_store_t *s);

/* The store's codec on the host (a host-fallback store's own copy, a
 * device store's ibp_cuda_codec_host). */
const ibp_codec_t *ibpi_cuda_store_host_codec(const ibp_cuda_store_t *s);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CUDA_GATHER_STAGED_H */
