/* dynamiq.h - DynamiQ (paper 001): ring all-reduce whose partial sums
 * travel quantized; every hop decodes, adds its contribution in FP32 and
 * re-quantizes with fresh scales. The plan/chunk functions are shared by
 * the collective (dynamiq.c) and the one-process simulation the tests use
 * to measure vNMSE at up to 64 workers. Decisions: docs/COLLECTIVES.md. */
#ifndef IBP_COLL_DYNAMIQ_H
#define IBP_COLL_DYNAMIQ_H

#include <stdint.h>

#include "coll/dynamiq_simd.h"
#include "ibp/status.h"


typedef struct dq_cfg {
	double budget;  /* bits per coordinate, scales included (default 5) */
	int fixed_q;    /* 0: widths {2,4,8} chosen per SG; 2/4/8: that width everywhere */
	int nonuniform; /* 1: ICE-Buckets levels (eps4, eps8); 0: uniform */
	double eps4, eps8;
	int correlated; /* 1: stratified rounding across ranks (shared seed) */
	int fresh;      /* 1: fresh scales at every hop; 0: keep the leaf's scales (clip) */
	uint64_t seed;  /* same on every rank */
} dq_cfg_t;

void ibpi_dq_cfg_default(dq_cfg_t *cfg);

/* What every rank derives from the summed statistics: widths, means, the
 * chunking of SGs over ranks and each SG's byte offset in its chunk. */
typedef struct dq_plan {
	dq_cfg_t cfg;
	int n;          /* ranks */
	uint64_t d, J;  /* elements, super-groups */
	uint64_t seq;   /* call number (keys the shared random streams) */
	uint8_t *q;     /* width per SG */
	float *mu;      /* global mean per SG */
	uint64_t *boff; /* byte offset of SG j inside its chunk */
	uint64_t *lo;   /* chunk k = SGs [lo[k], lo[k+1]) */
	uint64_t *cbytes; /* payload bytes of chunk k */
	uint64_t total_bytes;
	float lv[3][128]; /* magnitude levels of widths 2, 4, 8 (index log2(q) - 1) */
	uint8_t tab[3][1024]; /* largest r < R with lv[r] <= b / 1024: starts the level search */
	uint8_t tab_pad[4];   /* zero: the vector kernels load 4 bytes at &tab[w][b] */
} dq_plan_t;

/* Local statistics: st[j] = sum of x over SG j / c_j, st[J + j] = sum of x^2
 * (x: d FP32 values, or d values of dt widened SG by SG: the same bits). */
void ibpi_dq_local_stats(const float *x, uint64_t d, float *st);
void ibpi_dq_local_stats_dt(const void *src, ibp_dtype_t dt, uint64_t d, float *st);

/* Builds the plan from the statistics summed over ranks (2J floats).
 * IBP_ERR_INVALID_ARG when they are not finite (NaN/Inf input). */
ibp_status_t ibpi_dq_plan_make(dq_plan_t *pl, const dq_cfg_t *cfg, int n, uint64_t d, uint64_t seq, const float *gst);
void ibpi_dq_plan_free(dq_plan_t *pl);

/* One hop on chunk k by rank w: out = quantize(decode(in) + x - mu) over the
 * chunk's SGs (in NULL: the leaf). x is the rank's whole FP32 buffer.
 * in must hold exactly cbytes[k] bytes (checked by the caller). */
ibp_status_t ibpi_dq_hop(const dq_plan_t *pl, uint64_t k, const uint8_t *in, const float *x, int w, uint8_t *out);

/* Decodes chunk k into the sum: y[i] = decoded + n * mu (chunk's range of y). */
ibp_status_t ibpi_dq_decode_chunk(const dq_plan_t *pl, uint64_t k, const uint8_t *in, float *y);

/* The same over SGs [j0, j1) of one chunk, whose bytes start at in / out
 * (the bytes of SG j0); src and dst are whole buffers of dt (bf16, f16 or
 * f32), widened and narrowed SG by SG. The pipelined ring's pieces. */
ibp_status_t ibpi_dq_hop_sgs(const dq_plan_t *pl, uint64_t j0, uint64_t j1, const uint8_t *in, const void *src,
			     ibp_dtype_t dt, int w, uint8_t *out);
ibp_status_t ibpi_dq_decode_sgs(const dq_plan_t *pl, uint64_t j0, uint64_t j1, const uint8_t *in, ibp_dtype_t dt,
				void *dst);

/* The whole ring all-reduce of n FP32 buffers in one thread (x[r] is rank
 * r's buffer): same plan, same hops, same bytes as the collective. */
ibp_status_t ibpi_dq_simulate(const float *const *x, int n, uint64_t d, const dq_cfg_t *cfg, uint64_t seq, float *out,
			 uint64_t *wire_bits);

/* The collective (called by ibp_coll_allreduce for IBP_COLL_CODEC_DYNAMIQ). */
/* Bytes of one super-group of c entries at width q (its scales included). */
uint64_t ibpi_dq_sg_bytes(uint64_t c, int q);
/* The largest chunk's payload bytes under a plan. */
uint64_t ibpi_dq_max_chunk(const dq_plan_t *pl);

#endif /* IBP_COLL_DYNAMIQ_H */
