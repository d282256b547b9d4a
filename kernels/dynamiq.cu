/* dynamiq.cu - DynamiQ's hop and final decode on the GPU (ibpi_dq_hop_cuda,
 * ibpi_dq_decode_chunk_cuda; src/cuda/dynamiq_cuda.h), twins of ibpi_dq_hop and
 * ibpi_dq_decode_chunk (src/coll/dynamiq.c): the same bytes and floats.
 *
 * One block of 256 threads per super-group (SG), thread i = entry i, in a
 * grid-stride loop over the chunk's SGs. A hop, fused: decode the incoming
 * entry, add the local centred value (FP32), then in shared memory the 16
 * group maxima (one thread per group, in entry order, as the CPU does),
 * the SG scale (thread 0), the group-scale codes (one thread per group),
 * and every entry's code; lanes combine their 2/4-bit codes into bytes
 * with shuffles, so each output byte has one writer and no atomics.
 * Every float operation is an _rn intrinsic (no FMA contraction), and the
 * uniforms are the counter-based hash of (seed, call, coordinate, rank),
 * so CPU and GPU draw the same numbers. */
#include <stdint.h>

#include "cuda_check.h"
extern "C" {
#include "cuda/dynamiq_cuda.h"
}
#include "fp8/fp8_impl.h"
#include "util/mix.h"
#include "util/quant_rules.h"

#define DQK_S IBPQ_DQ_S /* entries per super-group = threads per block */
#define DQK_G IBPQ_DQ_G /* entries per group */
#define DQK_FULL 0xffffffffu

static __device__ __forceinline__ float dqk_maxf(float a, float b)
{
	return a > b ? a : b;
}

/* The SG's scale from its first two bytes; 0 when it is not a finite non-negative number. */
static __device__ __forceinline__ int dqk_scale(const uint8_t *p, float *sf)
{
	*sf = fp8i_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
	return *sf >= 0 && *sf <= 3.40282347e38f; /* finite, non-negative */
}

/* Entry i's decoded value (i < c): level times group scale, signed. */
static __device__ __forceinline__ float dqk_entry(const uint8_t *p, uint64_t ng, unsigned i, int q, const float *lv,
						  float sf)
{
	float gs = ibpq_dq_group_scale(p[2 + i / DQK_G], sf);
	uint64_t bit = (uint64_t)i * (uint64_t)q;
	unsigned v = (p[2 + ng + (bit >> 3)] >> (bit & 7)) & ((1u << q) - 1);
	return ibpq_dq_value(v, q, lv, gs);
}

static __global__ void __launch_bounds__(DQK_S)
	dqk_hop(dq_cuda_plan_t p, uint64_t j0, uint64_t j1, const uint8_t *in, const float *x, int w, uint8_t *out,
		int32_t *status)
{
	__shared__ float ys[DQK_S];
	__shared__ float gm[DQK_G];
	__shared__ float sfs[1];
	const unsigned i = threadIdx.x;
	const uint64_t key = ibpq_call_key(p.seed, p.seq);
	for (uint64_t j = j0 + blockIdx.x; j < j1; j += gridDim.x) {
		const uint64_t a = j * DQK_S, c = a + DQK_S <= p.d ? DQK_S : p.d - a, ng = (c + DQK_G - 1) / DQK_G;
		const int q = p.q[j], wi = q == 2 ? 0 : q == 4 ? 1 : 2;
		const float *lv = p.lv + 128 * wi;
		const uint8_t *tab = p.tab + 1024 * wi;
		const float mu = p.mu[j];
		const uint8_t *pin = in ? in + p.boff[j] : nullptr;
		uint8_t *po = out + p.boff[j];
		float y = 0.0f, sf = 0.0f;
		if (pin) {
			if (!dqk_scale(pin, &sf)) { /* the same verdict in every thread: the block skips the SG */
				if (i == 0)
					atomicCAS(status, 0, (int32_t)IBP_ERR_CORRUPT);
				continue;
			}
			if (i < c)
				y = __fadd_rn(dqk_entry(pin, ng, i, q, lv, sf), __fsub_rn(x[a + i], mu));
		} else if (i < c)
			y = __fadd_rn(0.0f, __fsub_rn(x[a + i], mu));
		ys[i] = y;
		__syncthreads();
		const int keep = pin && !p.fresh;
		if (i < ng) { /* group maxima in entry order */
			float m = 0;
			for (uint64_t t = (uint64_t)i * DQK_G; t < c && t < (uint64_t)(i + 1) * DQK_G; t++)
				m = dqk_maxf(m, fabsf(ys[t]));
			gm[i] = m;
		}
		__syncthreads();
		if (i == 0) {
			if (keep) { /* the no-fresh-scales baseline: the leaf's scales travel on */
				for (uint64_t t = 0; t < 2 + ng; t++)
					po[t] = pin[t];
			} else {
				float M = 0;
				for (uint64_t t = 0; t < ng; t++)
					M = dqk_maxf(M, gm[t]);
				uint16_t sb = fp8i_bf16_up(M);
				po[0] = (uint8_t)sb;
				po[1] = (uint8_t)(sb >> 8);
				sf = fp8i_bf16_to_f32(sb);
			}
			sfs[0] = sf;
		}
		__syncthreads();
		sf = sfs[0];
		float gme = 0;
		if (i < ng) {
			if (keep)
				gme = ibpq_dq_group_scale(pin[2 + i], sf);
			else
				po[2 + i] = ibpq_dq_group_code(gm[i], sf, ibpq_dq_u_group(key, a / DQK_G + i, w));
		}
		__syncthreads(); /* every thread has read gm[] for its scale */
		if (keep && i < ng)
			gm[i] = gme;
		__syncthreads();
		unsigned v = 0;
		if (i < c) {
			uint64_t gi = a + i;
			float u = ibpq_dq_u_entry(key, gi, w);
			if (p.correlated)
				u = ibpq_dq_u_correlated(key, gi, w, p.n, u);
			v = ibpq_dq_code(y, gm[i / DQK_G], lv, tab, q, u);
		}
		/* 8 / q consecutive entries make one byte */
		unsigned b = v;
		if (q == 4)
			b = v | __shfl_down_sync(DQK_FULL, v, 1) << 4;
		else if (q == 2) {
			unsigned t = v | __shfl_down_sync(DQK_FULL, v, 1) << 2;
			b = t | __shfl_down_sync(DQK_FULL, t, 2) << 4;
		}
		const unsigned per = 8u / (unsigned)q;
		if (i % per == 0 && i / per < (c * (uint64_t)q + 7) / 8)
			po[2 + ng + i / per] = (uint8_t)b;
		__syncthreads(); /* ys, gm and sfs are reused by the next SG */
	}
}

static __global__ void __launch_bounds__(DQK_S)
	dqk_decode(dq_cuda_plan_t p, uint64_t j0, uint64_t j1, const uint8_t *in, float *y, int32_t *status)
{
	const unsigned i = threadIdx.x;
	for (uint64_t j = j0 + blockIdx.x; j < j1; j += gridDim.x) {
		const uint64_t a = j * DQK_S, c = a + DQK_S <= p.d ? DQK_S : p.d - a, ng = (c + DQK_G - 1) / DQK_G;
		const int q = p.q[j], wi = q == 2 ? 0 : q == 4 ? 1 : 2;
		const uint8_t *pin = in + p.boff[j];
		float sf;
		if (!dqk_scale(pin, &sf)) {
			if (i == 0)
				atomicCAS(status, 0, (int32_t)IBP_ERR_CORRUPT);
			continue;
		}
		if (i < c)
			y[a + i] = __fadd_rn(dqk_entry(pin, ng, i, q, p.lv + 128 * wi, sf), __fmul_rn((float)p.n, p.mu[j]));
	}
}

static ibp_status_t dqk_args(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const void *dst,
			     const int32_t *d_status, const char *what)
{
	if (!p || !dst || !d_status || j1 < j0 || !p->q || !p->mu || !p->boff || !p->lv || !p->tab || p->n < 1)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL pointer, empty plan or j1 < j0", what);
	if (j1 > (p->d + DQK_S - 1) / DQK_S)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: super-group %llu past the plan's %llu", what,
				(unsigned long long)j1, (unsigned long long)((p->d + DQK_S - 1) / DQK_S));
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_dq_hop_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in,
				    const float *d_x, int w, uint8_t *d_out, int32_t *d_status, void *stream)
{
	IBP_TRY(dqk_args(p, j0, j1, d_out, d_status, "ibpi_dq_hop_cuda"));
	if (!d_x || w < 0 || w >= p->n)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_dq_hop_cuda: NULL input or rank %d of %d", w, p->n);
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	if (j0 == j1)
		return IBP_OK;
	unsigned grid = 1;
	IBP_TRY(ibp_cuda_grid(j1 - j0, &grid));
	IBP_CUDA_LAUNCH("launch dqk_hop", dqk_hop, grid, DQK_S, 0, st, *p, j0, j1, d_in, d_x, w, d_out, d_status);
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_dq_decode_chunk_cuda(const dq_cuda_plan_t *p, uint64_t j0, uint64_t j1, const uint8_t *d_in,
					     float *d_y, int32_t *d_status, void *stream)
{
	IBP_TRY(dqk_args(p, j0, j1, d_y, d_status, "ibpi_dq_decode_chunk_cuda"));
	if (!d_in)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_dq_decode_chunk_cuda: NULL input");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	if (j0 == j1)
		return IBP_OK;
	unsigned grid = 1;
	IBP_TRY(ibp_cuda_grid(j1 - j0, &grid));
	IBP_CUDA_LAUNCH("launch dqk_decode", dqk_decode, grid, DQK_S, 0, st, *p, j0, j1, d_in, d_y, d_status);
	return IBP_OK;
}
