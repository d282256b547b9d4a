/* coll_mem.h - the buffer steps of the collective algorithms (encode,
 * check, decode, reduce, copy, working buffers) as a per-communicator
 * table, so algo.c runs unchanged on host memory (mem_host.c) or on device
 * memory with the codec and reduction kernels on a stream (mem_device.c;
 * its host fallback runs the same orchestration with the CPU twins). */
#ifndef IBP_COLL_MEM_H
#define IBP_COLL_MEM_H

#include <stdint.h>

#include "ibp/coll.h"

struct coll_hdr;

/* Working buffers of one call, sized for its largest message. */
typedef struct coll_bufs {
	uint64_t cap;
	uint8_t *m[2]; /* messages: send, receive */
	float *f;      /* a decoded partial in FP32 (host table) */
	uint8_t *tmp;  /* a decoded partial in dt */
	uint8_t *acc;  /* the running partial sum in dt */
} coll_bufs_t;

typedef struct coll_mem_ops {
	/* Buffers for messages of up to maxn elements (reduce: tmp/acc too). */
	ibp_status_t (*bufs_get)(ibp_coll_comm_t *c, ibp_dtype_t dt, uint64_t maxn, int reduce, coll_bufs_t *b);
	void (*bufs_put)(ibp_coll_comm_t *c, coll_bufs_t *b);
	/* Header h + src[0, h->elems) encoded as h->enc at msg; *bytes = size. */
	ibp_status_t (*encode)(ibp_coll_comm_t *c, const struct coll_hdr *h, const void *src, void *msg, uint64_t cap,
			       uint64_t *bytes);
	/* ibpi_coll_check on the message's header (copied to *h). */
	ibp_status_t (*check)(ibp_coll_comm_t *c, const void *msg, uint64_t bytes, const struct coll_hdr *want,
			      int from, struct coll_hdr *h);
	/* A checked message's payload into h->elems elements at dst. */
	ibp_status_t (*decode)(ibp_coll_comm_t *c, const struct coll_hdr *h, const void *msg, uint64_t bytes,
			       void *dst);
	/* b->acc = round_dt(decode(msg) + local), added in FP32. */
	ibp_status_t (*reduce)(ibp_coll_comm_t *c, const struct coll_hdr *h, const void *msg, uint64_t bytes,
			       const void *local, coll_bufs_t *b);
	/* bytes from src to dst (host table: memmove). */
	ibp_status_t (*copy)(ibp_coll_comm_t *c, void *dst, const void *src, uint64_t bytes);
	/* End of a call: waits for the stream (device table). */
	ibp_status_t (*finish)(ibp_coll_comm_t *c);
} coll_mem_ops_t;

extern const coll_mem_ops_t ibpi_coll_mem_host;
extern const coll_mem_ops_t ibpi_coll_mem_device; /* CUDA, or the host fallback (c->mem_kind) */

/* The device table's buffers, kept by the communicator and grown. */
typedef struct coll_dev {
	uint8_t *m[2], *tmp, *acc, *ws, *small;
	uint64_t mcap, tcap, wscap;
} coll_dev_t;

/* Frees the device table's buffers (ibp_coll_comm_free). */
void ibpi_coll_dev_release(ibp_coll_comm_t *c);

/* CPU twin of ibpi_coll_reduce_add_cuda (kernels/coll_reduce.cu):
 * dst[i] = round_dt(float(part[i]) + float(local[i])), FP32 add, the same
 * bits as ibpi_coll_add_round over a widened partial. */
void ibpi_coll_reduce_add(const void *part, const void *local, ibp_dtype_t dt, uint64_t n, void *dst);

/* The same on the device, enqueued on stream (a cudaStream_t).
 * IBP_ERR_NO_DEVICE without CUDA; IBP_ERR_CUDA on a launch failure. */
ibp_status_t ibpi_coll_reduce_add_cuda(const void *d_part, const void *d_local, ibp_dtype_t dt, uint64_t n,
				  void *d_dst, void *stream);

#endif /* IBP_COLL_MEM_H */
