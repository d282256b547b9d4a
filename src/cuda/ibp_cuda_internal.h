/* ibp_cuda_internal.h - host-side pieces of the GPU API (include/ibp/cuda.h)
 * shared by the CUDA build (the kernels/ .cu files, src/ _cudahost.c files) and the build
 * without CUDA (src/cuda/ibp_cuda_nocuda.c): descriptor checks, codec copies and
 * the host-memory fallback store. Implemented in src/cuda/ibp_cuda_host.c. */
#ifndef IBP_CUDA_INTERNAL_H
#define IBP_CUDA_INTERNAL_H

#include <stdint.h>
#include "ibp/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Declared for users in ibp/unstable.h (the library does not include it). */
ibp_status_t ibp_cuda_store_set_kernel(ibp_cuda_store_t *s, ibp_cuda_kernel_t k);

/* Checks a store descriptor: arguments (IBP_ERR_INVALID_ARG) and offsets
 * (offsets[0] = 0, non-decreasing, offsets[nrows] <= payload_bytes:
 * IBP_ERR_CORRUPT), so that no gather can leave the payload. */
ibp_status_t ibpi_cuda_desc_check(const ibp_cuda_store_desc_t *d);

/* An independent copy of codec c (same masks, bitvals, xvals, threshold). */
ibp_status_t ibpi_cuda_codec_clone(const ibp_codec_t *c, ibp_codec_t **out);

/* Largest extent a row can have and still decode: RAW rows are R bytes;
 * a crafted BITMAP/LIST row may exceed R (every chunk an exception, each
 * with a hit bit). */
uint64_t ibpi_cuda_max_extent(const ibp_codec_t *c);

/* The store kept in ordinary host memory (no GPU). */
typedef struct ibp_hstore {
	ibp_codec_t *codec;      /* owned copy */
	const uint8_t *payload;  /* borrowed, or == payload_owned */
	void *payload_owned;     /* ibp_host_alloc copy for COPY_* kinds, else NULL */
	uint64_t payload_bytes;
	uint64_t nrows;
	uint64_t row_bytes;
	uint64_t *offsets;       /* owned copies */
	uint8_t *flags;
	uint8_t *clusters;       /* NULL: all cluster 0 */
	uint64_t nerr;           /* failed rows since the last ibp_cuda_store_errors */
} ibp_hstore_t;

/* Builds a host store from a checked descriptor (payload copied for the
 * COPY_* kinds, borrowed for MAPPED/REGISTER; DEVICE is refused). */
ibp_status_t ibpi_hstore_create(const ibp_cuda_store_desc_t *d, ibp_hstore_t **out);
void ibpi_hstore_free(ibp_hstore_t *h);

/* ibp_gather_cuda's contract, on the CPU (all pointers host memory). */
ibp_status_t ibpi_hstore_gather(ibp_hstore_t *h, const int64_t *ids, uint64_t n, void *out,
			       const int64_t *out_rows, int32_t *status);

/* The host store of a host-fallback device store, NULL for one on a GPU.
 * Implemented in kernels/ibp_bag.cu and src/cuda/ibp_cuda_nocuda.c. */
ibp_hstore_t *ibpi_cuda_store_hstore(const ibp_cuda_store_t *s);

/* ibp_store_embedding_bag_cuda's contract on the CPU (all pointers host
 * memory) with the CPU bag's engine; failed bags count in h->nerr.
 * Implemented in src/cuda/ibp_bag_host.c. */
ibp_status_t ibpi_hstore_embedding_bag(ibp_hstore_t *h, ibp_bag_mode_t mode, unsigned flags, const void *ids,
				      ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets, uint64_t n_bags,
				      const float *weights, int64_t padding_idx, ibp_dtype_t dtype, void *out,
				      int32_t *status);

/* ibpi_gather_staged_cuda's contract (cuda/ibp_gather_staged.h) on the CPU. */
ibp_status_t ibpi_hstore_gather_staged(const ibp_hstore_t *h, const uint8_t *stage, uint64_t stride, uint64_t nstage,
				      const uint32_t *lens, const uint32_t *meta, const int64_t *idx, uint64_t n,
				      void *out, const int64_t *out_rows, int32_t *status);

/* ibpi_cuda_store_row_info (cuda/ibp_gather_staged.h) of a host store. */
int ibpi_hstore_row_info(const ibp_hstore_t *h, uint64_t id, uint64_t *off, uint64_t *len, uint8_t *flags, uint8_t *cl);

/* Argument checks shared by both sides of ibpi_gather_staged_cuda. */
ibp_status_t ibpi_staged_check(uint64_t stride, uint64_t nstage, const void *stage, const uint32_t *lens,
			      const uint32_t *meta, uint64_t n, const void *out);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CUDA_INTERNAL_H */
