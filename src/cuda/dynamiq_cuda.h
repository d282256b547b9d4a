/* dynamiq_cuda.h - DynamiQ's hop and final decode on the GPU
 * (kernels/dynamiq.cu), twins of ibpi_dq_hop and ibpi_dq_decode_chunk
 * (src/coll/dynamiq.c): the same payload bytes and the same floats, given
 * the same plan (the hash of seed, call number, coordinate and rank is
 * counter based, so every GPU thread draws its coordinate's uniform).
 * Builds without CUDA get stubs (dynamiq_cuda_nocuda.c). Internal: the
 * collective does not call them yet (that needs device buffers and a
 * device transport). */
#ifndef IBP_CUDA_DYNAMIQ_CUDA_H
#define IBP_CUDA_DYNAMIQ_CUDA_H

#include <stdint.h>

#include "ibp/status.h"

/* A dq_plan_t's arrays in device memory (the caller copies them). */
typedef struct dq_cuda_plan {
	uint64_t d;           /* elements */
	uint64_t seed, seq;   /* dq_cfg_t.seed, dq_plan_t.seq */
	int n;                /* ranks */
	int fresh, correlated; /* dq_cfg_t's */
	const uint8_t *q;     /* width per super-group (J) */
	const float *mu;      /* mean per super-group (J) */
	const uint64_t *boff; /* byte offset of each super-group in its chunk (J) */
	const float *lv;      /* levels, 3 x 128 (dq_plan_t.lv) */
	const uint8_t *tab;   /* level search table, 3 x 1024 (dq_plan_t.tab) */
} dq_cuda_plan_t;

/* One hop on the super-groups [j0, j1) of a chunk (dq_plan_t.lo[k],
 * lo[k + 1]): d_out = quantize(decode(d_in) + d_x - mu), d_in NULL at the
 * leaf; d_in and d_out point at the chunk's payload, d_x at the rank's
 * whole FP32 buffer, w is the rank. *d_status (device) gets IBP_OK, or
 * IBP_ERR_CORRUPT when a super-group's scale is not a finite non-negative
 * number (that super-group's output is then undefined). Stream-ordered;
 * returns IBP_ERR_INVALID_ARG (NULL pointers, j1 < j0), IBP_ERR_NO_DEVICE,
 * IBP_ERR_CUDA, or IBP_ERR_UNSUPPORTED without CUDA. */
ibp_status_t ibpi_dq_hop_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in, const float *d_x,
			 int w, uint8_t *d_out, int32_t *d_status, void *stream);

/* The final decode of the super-groups [j0, j1): d_y[i] = decoded + n mu
 * (d_y: the whole FP32 output). Statuses as ibpi_dq_hop_cuda. */
ibp_status_t ibpi_dq_decode_chunk_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in,
				  float *d_y, int32_t *d_status, void *stream);

#endif /* IBP_CUDA_DYNAMIQ_CUDA_H */
