/* bag_rows.h - the embedding bag over rows held in plain arrays (internal).
 *
 * A host-fallback device store (IBP_CUDA_HOST_FALLBACK, cuda/) keeps a
 * codec and the payload, offsets, flags and cluster ids of its rows in
 * host memory, with no container. ibp_store_embedding_bag_cuda pools such
 * a store's rows here, with the CPU bag's engine (store/bag.c), so the
 * results are ibp_store_embedding_bag's bit for bit.
 */
#ifndef IBP_STORE_BAG_ROWS_H
#define IBP_STORE_BAG_ROWS_H

#include <stdint.h>
#include "ibp/bag.h"
#include "ibp/codec.h"

/* Rows encoded with `codec`: row i is payload[offsets[i], offsets[i+1])
 * and must use exactly that extent (packed), or with offsets NULL starts
 * at i * row_bytes and may end early (inplace); mode flags[i], cluster
 * clusters[i] (clusters NULL: 0). The arrays were checked when the store
 * was made (offsets non-decreasing, inside the payload). */
typedef struct ibp_bag_rows {
	const ibp_codec_t *codec;
	const uint8_t *payload;
	const uint64_t *offsets;
	const uint8_t *flags;
	const uint8_t *clusters;
	uint64_t nrows, row_bytes;
	ibp_dtype_t dtype; /* the rows' element type: float32, float16 or bfloat16 */
} ibp_bag_rows_t;

/* ibp_store_embedding_bag_cuda's contract on the CPU, on the calling
 * thread: every argument and offset as ibp_store_embedding_bag (synchronous
 * errors); then per bag, as the device kernel: status[b] (status NULL
 * allowed) IBP_OK, IBP_ERR_OUT_OF_RANGE for an id outside [0, nrows), or
 * IBP_ERR_CORRUPT for a row that does not decode (the first failure in id
 * order); a failed bag's output row is zeros. *nfailed (NULL allowed)
 * gets the number of failed bags. */
ibp_status_t ibpi_bag_pool_rows(const ibp_bag_rows_t *rows, ibp_bag_mode_t mode, unsigned flags, const void *ids,
			       ibp_dtype_t id_dtype, uint64_t n_ids, const int64_t *offsets, uint64_t n_bags,
			       const float *weights, int64_t padding_idx, void *out, int32_t *status,
			       uint64_t *nfailed);

#endif /* IBP_STORE_BAG_ROWS_H */
