/* rcmoe.h - RCMoE (paper 003): LSQ, per-row unbiased stochastic
 * quantization of AllToAll(v) payloads (a per-message encoding), and PTS,
 * probabilistic threshold sparsification (its all-reduce on a
 * communicator: pts_allreduce.c). The quantizers only: no communicator.
 * Decisions: docs/COLLECTIVES.md. */
#ifndef IBP_COLL_RCMOE_H
#define IBP_COLL_RCMOE_H

#include <stdint.h>

#include "ibp/status.h"
#include "ibp/types.h"

/* The codec's settings (IBP_COLL_CODEC_LSQ). */
#define LSQ_ROW 256u /* elements per row (one scale each) */
#define LSQ_BITS 4   /* default bits per entry, sign included (2, 4 or 8: codes never straddle a byte) */
#define LSQ_MAX_BITS 8
#define LSQ_SBITS 4  /* bits per row scale (the paper's K = 3..4) */

/* Row-scale width K the collectives use with B-bit entries: 4, but 8 at
 * B = 8, where 4-bit scales would dominate the error (Gaussian rows:
 * vNMSE 1.4e-3 with K = 4, entries alone ~1e-5) for 0.016 more bits. */
static inline int lsq_scale_bits(int B)
{
	return B == 8 ? 8 : LSQ_SBITS;
}
#define PTS_SIGMA 1.0

/* Bytes of an LSQ stream of n elements (B in {2,4,8}, K in {0,4,8}; K = 0:
 * FP32 row scales). */
uint64_t ibpi_lsq_bytes(uint64_t n, uint64_t row, int B, int K);

/* Encodes n elements of dt: header (FP32 S*, B, K, row), row-scale codes,
 * entry codes. key seeds the stochastic rounding. IBP_ERR_INVALID_ARG on
 * non-finite input or bad parameters. */
ibp_status_t ibpi_lsq_encode(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K, uint64_t key,
			uint8_t *out, uint64_t cap, uint64_t *size);

/* Decodes exactly `size` bytes into n elements of dt; IBP_ERR_CORRUPT when
 * the stream does not describe n elements or its scale is not finite. */
ibp_status_t ibpi_lsq_decode(const uint8_t *in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *dst);

/* Largest PTS stream for k elements. */
uint64_t ibpi_pts_max_bytes(uint64_t k);

/* PTS of g (k floats, sigma in (0, 1]): keeps g_i with probability
 * sigma |g_i| / max|g| as sign * max / sigma. Stream: FP32 magnitude, u64
 * count kept, presence bitmap (k bits), sign bits of the kept. */
ibp_status_t ibpi_pts_encode(const float *g, uint64_t k, double sigma, uint64_t key, uint8_t *out, uint64_t cap,
			uint64_t *size);

/* acc[i] += decoded value; IBP_ERR_CORRUPT on a malformed stream. */
ibp_status_t ibpi_pts_decode_add(const uint8_t *in, uint64_t size, uint64_t k, float *acc);

#endif /* IBP_COLL_RCMOE_H */
