/* cache_cuda.h - the device side of a GPU slab cache (cache_cuda.c): the
 * table the device steps work on (slab_batch.h) and the buffers of a pass,
 * all made at creation. The host mirror (cache.c) makes every decision;
 * this side replays them on the table. A host-fallback cache keeps the
 * same table in host memory and runs the CPU twins of the steps. */
#ifndef IBP_CACHE_CUDA_H
#define IBP_CACHE_CUDA_H

#include <pthread.h>
#include <stdint.h>

#include "cache_internal.h"
#include "slab_batch.h"

typedef struct cache_dev {
	int on_device;           /* 0: host-fallback (table and buffers in host memory, CPU twins) */
	int broken;              /* a device step failed: refused until ibp_cache_invalidate(c, NULL, 0) */
	pthread_mutex_t mu;      /* one pass (or invalidation) at a time on the table */
	ibp_slab_table_t t;      /* keys, vals, pins, codec bytes, slabs */
	uint32_t *slot_bytes;    /* host copy of the classes' slot sizes (the fallback table's own) */
	const void *store;       /* the bound ibp_cuda_store_t, or NULL */
	uint64_t stride;         /* stage row bytes: the largest slot */
	uint64_t b, nvic;        /* ids per pass, victims per pass (every slot) */
	/* host buffers */
	int64_t *hids, *hrows, *mids, *mrows, *sids, *hidx, *hhrows, *vic;
	int32_t *hstat, *mstat, *sstat;
	uint64_t *upos, *hu;     /* per unique: its first miss request / its stage row; stage row -> unique */
	ibp_slab_insert_op_t *ops;
	unsigned long long *hcount;
	/* device buffers (host memory for the fallback) */
	void *dmem;              /* one allocation holding those below */
	int64_t *d_mids, *d_mrows, *d_sids, *d_hidx, *d_hrows, *d_vic;
	int32_t *d_mstat, *d_sstat;
	uint64_t *d_ent;
	uint32_t *d_lens, *d_meta;
	uint8_t *d_stage;
	ibp_slab_insert_op_t *d_ops;
	unsigned long long *d_count;
	uint64_t dev_bytes;      /* device memory held (table and buffers) */
} cache_dev_t;

/* Makes c->dev for opts.device >= 0 (the mirror c is made). IBP_OK (a GPU
 * table), IBP_ERR_NO_DEVICE with c->dev set (no GPU, IBP_CACHE_HOST_FALLBACK:
 * a host table) or without (no flag), IBP_ERR_INVALID_ARG, IBP_ERR_NOMEM,
 * IBP_ERR_CUDA. */
ibp_status_t ibpi_cache_cuda_init(ibp_cache_t *c);
void ibpi_cache_cuda_free(ibp_cache_t *c);
/* After the mirror dropped ids[0..n) (ids NULL: everything): the same on
 * the table. */
ibp_status_t ibpi_cache_cuda_invalidate(ibp_cache_t *c, const int64_t *ids, uint64_t n);

#endif /* IBP_CACHE_CUDA_H */
