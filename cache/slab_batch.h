/* slab_batch.h - the device-side steps of a cache batch ("concurrency by
 * phases, no spinning"), each a CUDA kernel (kernels/slab_cache.cu, *_cuda)
 * with a CPU twin of the same name (slab_batch.c) that gives the same
 * results on a table of host memory (cuda/slab_cache.h):
 *
 *   probe   ids -> their READY entries (0: a miss, also for a row still
 *           being inserted), pinning each hit's slot (one count per request);
 *   erase   victims and invalidated ids leave the index (tombstones);
 *   insert  admitted rows: a position claimed for each key (CLAIMED, which
 *           no probe matches), its bytes copied into its slot (from pinned
 *           host or device memory), its READY entry written, then, after a
 *           fence, its key (kernels/slab_cache.cu: the protocol under
 *           launches running at the same time);
 *   gather  each hit's bytes (and codec byte) copied from its slot to a
 *           staging row for the decoder, the slot unpinned.
 *
 * The host side decides (policy, allocation: cache.c on the host's mirror
 * of the table) and launches these steps in order on one stream; the
 * tables agree entry for entry (not position for position: parallel
 * inserts may claim other free positions of a chain). Keys of one erase or
 * insert call must be distinct, and inserted keys absent. No allocation. */
#ifndef IBP_CACHE_SLAB_BATCH_H
#define IBP_CACHE_SLAB_BATCH_H

#include "cuda/slab_cache.h"
#include "ibp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ent[k] = the READY entry of ids[k], else 0. pin != 0: pin[slot]++ per hit. */
ibp_status_t ibpi_slab_probe(const ibp_slab_table_t *t, const int64_t *ids, uint64_t n, uint64_t *ent, int pin);
ibp_status_t ibpi_slab_probe_cuda(const ibp_slab_table_t *t, const int64_t *ids, uint64_t n, uint64_t *ent, int pin,
				 void *stream);

/* Tombstones keys[0..n) that are present; nerased (device memory for the
 * _cuda one; NULL allowed) is increased by how many were. */
ibp_status_t ibpi_slab_erase(const ibp_slab_table_t *t, const int64_t *keys, uint64_t n, unsigned long long *nerased);
ibp_status_t ibpi_slab_erase_cuda(const ibp_slab_table_t *t, const int64_t *keys, uint64_t n,
				 unsigned long long *nerased, void *stream);

/* Inserts ops[0..n) (see cuda/slab_cache.h). A key that finds no free
 * position (a full table: the host sizes it so this cannot happen) is
 * skipped and counted in *nfull (NULL allowed; device memory for _cuda). */
ibp_status_t ibpi_slab_insert(const ibp_slab_table_t *t, const ibp_slab_insert_op_t *ops, uint64_t n,
			     unsigned long long *nfull);
ibp_status_t ibpi_slab_insert_cuda(const ibp_slab_table_t *t, const ibp_slab_insert_op_t *ops, uint64_t n,
				  unsigned long long *nfull, void *stream);

/* For k with a READY ent[k] (from probe): copies its bytes to
 * stage + k * stride, len[k] = its length, meta[k] = its slot's codec
 * byte, and unpins the slot when unpin != 0; other k: len[k] = 0,
 * meta[k] = 0, stage untouched. stride >= the largest slot. */
ibp_status_t ibpi_slab_gather(const ibp_slab_table_t *t, const uint64_t *ent, uint64_t n, uint8_t *stage,
			     uint64_t stride, uint32_t *len, uint32_t *meta, int unpin);
ibp_status_t ibpi_slab_gather_cuda(const ibp_slab_table_t *t, const uint64_t *ent, uint64_t n, uint8_t *stage,
				  uint64_t stride, uint32_t *len, uint32_t *meta, int unpin, void *stream);

/* Device memory for a table of `cap` index positions (a power of two),
 * `nslots` slots, `mem_bytes` of slabs and `nclasses` slot sizes (copied
 * from slot_bytes): keys empty, pins 0. t->spp and t->slab_bytes are
 * set by the caller. Errors: IBP_ERR_INVALID_ARG, IBP_ERR_NO_DEVICE,
 * IBP_ERR_CUDA (nothing left allocated). */
ibp_status_t ibpi_slab_table_alloc_cuda(ibp_slab_table_t *t, uint64_t cap, uint64_t nslots, uint64_t mem_bytes,
				       const uint32_t *slot_bytes, uint32_t nclasses);
/* Frees what ibpi_slab_table_alloc_cuda allocated; a zeroed table is a no-op. */
void ibpi_slab_table_free_cuda(ibp_slab_table_t *t);

#ifdef __cplusplus
}
#endif
#endif /* IBP_CACHE_SLAB_BATCH_H */
