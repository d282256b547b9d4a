/* rcmoe.cu - RCMoE's LSQ and PTS codecs on the GPU (ibpi_lsq_encode_cuda,
 * ibpi_lsq_decode_cuda, ibpi_pts_encode_cuda, ibpi_pts_decode_add_cuda;
 * src/cuda/rcmoe_cuda.h), twins of ibpi_lsq_encode, ibpi_lsq_decode, ibpi_pts_encode and
 * ibpi_pts_decode_add (src/coll/rcmoe.c): the same stream bytes and values.
 *
 * Encode: lsqk_rowmax, a block per row, reduces max |x| (exact in any
 * order: maxima of float bits as integers) into the workspace, and S* by
 * atomicMax on the bits; lsqk_write gives every stream byte one thread
 * (header, row-scale codes, entry codes), so there are no atomics on the
 * output. Decode: a thread per element, every thread checking the header
 * (the same verdict everywhere). Every float operation is an _rn
 * intrinsic (no FMA contraction) and the uniforms are the counter-based
 * hash of (key, index), so CPU and GPU round alike. */
#include <stdint.h>

#include "cuda_check.h"
extern "C" {
#include "cuda/rcmoe_cuda.h"
}
#include "fp8/fp8_impl.h"
#include "util/mix.h"
#include "util/quant_rules.h"

#define LSQK_THREADS 256u
#define LSQK_HDR IBPQ_LSQ_HDR

static __device__ __forceinline__ float lsqk_get(const void *src, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return ((const float *)src)[i];
	uint16_t h = ((const uint16_t *)src)[i];
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

static __device__ __forceinline__ uint32_t lsqk_bits(float f)
{
	return __float_as_uint(f);
}

static __global__ void __launch_bounds__(LSQK_THREADS)
	lsqk_rowmax(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t row, uint32_t *ws, int32_t *status)
{
	__shared__ uint32_t wmax[LSQK_THREADS / 32];
	const uint64_t rows = (n + row - 1) / row;
	const uint32_t lim = lsqk_bits(3.4e38f); /* the CPU's limit on |x| */
	for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		uint32_t m = 0;
		const uint64_t e = (r + 1) * row < n ? (r + 1) * row : n;
		for (uint64_t i = r * row + threadIdx.x; i < e; i += blockDim.x) {
			uint32_t b = lsqk_bits(lsqk_get(src, dt, i)) & 0x7fffffffu;
			m = b > m ? b : m;
		}
		for (int o = 16; o; o >>= 1) {
			uint32_t t = __shfl_xor_sync(0xffffffffu, m, o);
			m = t > m ? t : m;
		}
		if (threadIdx.x % 32 == 0)
			wmax[threadIdx.x / 32] = m;
		__syncthreads();
		if (threadIdx.x == 0) {
			for (unsigned w = 1; w < blockDim.x / 32; w++)
				m = wmax[w] > m ? wmax[w] : m;
			if (m > lim)
				atomicCAS(status, 0, (int32_t)IBP_ERR_INVALID_ARG);
			ws[1 + r] = m;
			atomicMax(ws, m);
		}
		__syncthreads(); /* wmax is reused by the next row */
	}
}

/* Every byte of the stream, one thread each. */
static __global__ void __launch_bounds__(LSQK_THREADS)
	lsqk_write(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K, uint64_t key,
		   const uint32_t *ws, uint8_t *out)
{
	const uint64_t rows = (n + row - 1) / row, scb = K ? (rows * (uint64_t)K + 7) / 8 : rows * 4;
	const uint64_t total = ibpq_lsq_bytes(n, row, B, K);
	const uint32_t Sb = ws[0];
	const float S = __uint_as_float(Sb);
	for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < total; t += (uint64_t)gridDim.x * blockDim.x) {
		unsigned byte = 0;
		if (t < 4)
			byte = (Sb >> (8 * t)) & 0xffu;
		else if (t == 4)
			byte = (unsigned)B;
		else if (t == 5)
			byte = (unsigned)K;
		else if (t == 6)
			byte = (unsigned)(row & 0xff);
		else if (t == 7)
			byte = (unsigned)(row >> 8);
		else if (t < LSQK_HDR + scb) {
			uint64_t b = t - LSQK_HDR;
			if (!K) {
				byte = (ws[1 + b / 4] >> (8 * (b % 4))) & 0xffu;
			} else {
				for (uint64_t r = b * 8 / (uint64_t)K; r < (b + 1) * 8 / (uint64_t)K && r < rows; r++)
					byte |= ibpq_lsq_scale_code(__uint_as_float(ws[1 + r]), S, K, key, r)
						<< (r * (uint64_t)K - b * 8);
			}
		} else {
			uint64_t b = t - LSQK_HDR - scb;
			for (uint64_t i = b * 8 / (uint64_t)B; i < (b + 1) * 8 / (uint64_t)B && i < n; i++)
				byte |= ibpq_lsq_code(lsqk_get(src, dt, i), __uint_as_float(ws[1 + i / row]), B, key, i)
					<< (i * (uint64_t)B - b * 8);
		}
		out[t] = (uint8_t)byte;
	}
}

static __global__ void __launch_bounds__(LSQK_THREADS)
	lsqk_decode(const uint8_t *in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *dst, int32_t *status)
{
	const uint32_t Sb = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
	const float S = __uint_as_float(Sb);
	const int B = in[4], K = in[5];
	const uint64_t row = (uint64_t)in[6] | (uint64_t)in[7] << 8;
	const bool ok = ibpq_lsq_params_ok(row, B, K) && S >= 0 && S <= 3.40282347e38f &&
			ibpq_lsq_bytes(n, row, B, K) == size;
	if (!ok) {
		if (blockIdx.x == 0 && threadIdx.x == 0)
			atomicCAS(status, 0, (int32_t)IBP_ERR_CORRUPT);
		return;
	}
	const uint64_t rows = (n + row - 1) / row, scb = K ? (rows * (uint64_t)K + 7) / 8 : rows * 4;
	const uint8_t *sc = in + LSQK_HDR, *code = sc + scb;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t r = i / row;
		float s;
		if (K) {
			uint64_t bit = r * (uint64_t)K;
			s = ibpq_lsq_scale((sc[bit >> 3] >> (bit & 7)) & ((1u << K) - 1), K, S);
		} else {
			uint32_t b = (uint32_t)sc[4 * r] | (uint32_t)sc[4 * r + 1] << 8 | (uint32_t)sc[4 * r + 2] << 16 |
				     (uint32_t)sc[4 * r + 3] << 24;
			s = __uint_as_float(b);
			if (!(s >= 0 && s <= 3.40282347e38f)) {
				atomicCAS(status, 0, (int32_t)IBP_ERR_CORRUPT);
				continue;
			}
		}
		uint64_t bit = i * (uint64_t)B;
		unsigned v = (code[bit >> 3] >> (bit & 7)) & ((1u << B) - 1);
		float y = ibpq_lsq_value(v, B, s);
		if (dt == IBP_DTYPE_F32)
			((float *)dst)[i] = y;
		else
			((uint16_t *)dst)[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(y) : fp8i_f32_to_f16(y);
	}
}

/* ---- PTS ----
 * Workspace (W = ceil(k / 64) words of 64 elements): the max's bits, then
 * per word the presence bits P, the negative bits N and the exclusive
 * prefix of the presence counts (pre[W] = the count kept). Encode: max,
 * presence (a thread per word), the prefix (one block), the sign bytes (a
 * thread per byte: a binary search finds its first kept element). Decode:
 * the words from the stream, the prefix and the checks (one block), then a
 * thread per element adds its value. */
#define PTSK_HDR 12u

struct ptsk_ws {
	uint32_t *maxb;
	uint64_t *P, *N, *pre;
};

static __host__ __device__ __forceinline__ ptsk_ws ptsk_carve(void *ws, uint64_t W)
{
	ptsk_ws w;
	w.maxb = (uint32_t *)ws;
	w.P = (uint64_t *)ws + 1;
	w.N = w.P + W;
	w.pre = w.N + W;
	return w;
}

static __global__ void __launch_bounds__(LSQK_THREADS) ptsk_max(const float *g, uint64_t k, void *ws, int32_t *status)
{
	ptsk_ws w = ptsk_carve(ws, 0);
	uint32_t m = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < k; i += (uint64_t)gridDim.x * blockDim.x) {
		uint32_t b = lsqk_bits(g[i]) & 0x7fffffffu;
		m = b > m ? b : m;
	}
	for (int o = 16; o; o >>= 1) {
		uint32_t t = __shfl_xor_sync(0xffffffffu, m, o);
		m = t > m ? t : m;
	}
	if (threadIdx.x % 32 == 0) {
		if (m > lsqk_bits(3.4e38f))
			atomicCAS(status, 0, (int32_t)IBP_ERR_INVALID_ARG);
		atomicMax(w.maxb, m);
	}
}

static __global__ void __launch_bounds__(LSQK_THREADS)
	ptsk_keep(const float *g, uint64_t k, float ps, uint64_t key, void *ws, uint8_t *pres)
{
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8;
	ptsk_ws w = ptsk_carve(ws, W);
	const float m = __uint_as_float(*w.maxb);
	for (uint64_t q = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; q < W; q += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t P = 0, N = 0;
		for (unsigned e = 0; e < 64 && q * 64 + e < k; e++) {
			uint64_t i = q * 64 + e;
			float x = g[i];
			P |= (uint64_t)ibpq_pts_keep(x, m, ps, key, i) << e;
			N |= (uint64_t)(x < 0) << e;
		}
		w.P[q] = P;
		w.N[q] = N;
		for (uint64_t b = 0; b < 8 && q * 8 + b < bm; b++)
			pres[q * 8 + b] = (uint8_t)(P >> (8 * b));
	}
}

/* One block: pre[] from the words' counts. mode 0 (encode): the header and
 * the size; mode 1 (decode): the stream's checks, status on failure. */
static __global__ void __launch_bounds__(LSQK_THREADS)
	ptsk_scan(uint64_t k, void *ws, int mode, double sigma, uint8_t *hdr, uint64_t size, uint64_t *d_size,
		  int32_t *status)
{
	__shared__ uint64_t part[LSQK_THREADS];
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8, seg = (W + LSQK_THREADS - 1) / LSQK_THREADS;
	ptsk_ws w = ptsk_carve(ws, W);
	const unsigned t = threadIdx.x;
	uint64_t c = 0;
	for (uint64_t q = t * seg; q < W && q < (t + 1) * seg; q++)
		c += (uint64_t)__popcll(w.P[q]);
	part[t] = c;
	__syncthreads();
	if (t == 0) {
		uint64_t run = 0;
		for (unsigned j = 0; j < LSQK_THREADS; j++) {
			uint64_t v = part[j];
			part[j] = run;
			run += v;
		}
		w.pre[W] = run;
		if (mode == 0) {
			float mag = (float)__ddiv_rn((double)__uint_as_float(*w.maxb), sigma);
			uint32_t mb = __float_as_uint(mag);
			for (int b = 0; b < 4; b++)
				hdr[b] = (uint8_t)(mb >> (8 * b));
			for (int b = 0; b < 8; b++)
				hdr[4 + b] = (uint8_t)(run >> (8 * b));
			*d_size = PTSK_HDR + bm + (run + 7) / 8;
		} else {
			uint32_t mb = 0;
			uint64_t nnz = 0;
			for (int b = 0; b < 4; b++)
				mb |= (uint32_t)hdr[b] << (8 * b);
			for (int b = 0; b < 8; b++)
				nnz |= (uint64_t)hdr[4 + b] << (8 * b);
			float mag = __uint_as_float(mb);
			bool bad = !(mag >= 0 && mag <= 3.40282347e38f) || nnz > k || size != PTSK_HDR + bm + (nnz + 7) / 8 ||
				   run != nnz || (k % 64 && W && (w.P[W - 1] >> (k % 64)));
			if (bad)
				atomicCAS(status, 0, (int32_t)IBP_ERR_CORRUPT);
		}
	}
	__syncthreads();
	uint64_t run = part[t];
	for (uint64_t q = t * seg; q < W && q < (t + 1) * seg; q++) {
		w.pre[q] = run;
		run += (uint64_t)__popcll(w.P[q]);
	}
}

static __global__ void __launch_bounds__(LSQK_THREADS) ptsk_signs(uint64_t k, void *ws, uint8_t *sgn)
{
	const uint64_t W = (k + 63) / 64;
	ptsk_ws w = ptsk_carve(ws, W);
	const uint64_t nnz = w.pre[W], sb = (nnz + 7) / 8;
	for (uint64_t s = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; s < sb; s += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t lo = 0, hi = W; /* the last word with pre <= 8 s */
		while (hi - lo > 1) {
			uint64_t mid = (lo + hi) / 2;
			if (w.pre[mid] <= 8 * s)
				lo = mid;
			else
				hi = mid;
		}
		uint64_t q = lo;
		unsigned byte = 0;
		for (uint64_t p = 8 * s; p < 8 * s + 8 && p < nnz; p++) {
			while (w.pre[q + 1] <= p)
				q++;
			uint64_t P = w.P[q], r = p - w.pre[q];
			for (; r; r--)
				P &= P - 1; /* drop the r kept before it */
			unsigned e = (unsigned)(__ffsll((long long)P) - 1);
			byte |= (unsigned)(w.N[q] >> e & 1) << (p - 8 * s);
		}
		sgn[s] = (uint8_t)byte;
	}
}

static __global__ void __launch_bounds__(LSQK_THREADS) ptsk_loadp(const uint8_t *pres, uint64_t k, void *ws)
{
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8;
	ptsk_ws w = ptsk_carve(ws, W);
	for (uint64_t q = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; q < W; q += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t P = 0;
		for (uint64_t b = 0; b < 8 && q * 8 + b < bm; b++)
			P |= (uint64_t)pres[q * 8 + b] << (8 * b);
		w.P[q] = P;
	}
}

static __global__ void __launch_bounds__(LSQK_THREADS)
	ptsk_add(const uint8_t *in, uint64_t k, const void *ws, float *acc, const int32_t *status)
{
	if (*status != 0)
		return; /* a malformed stream changes nothing */
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8;
	ptsk_ws w = ptsk_carve((void *)ws, W);
	uint32_t mb = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
	const float mag = __uint_as_float(mb);
	const uint8_t *sgn = in + PTSK_HDR + bm;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < k; i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t P = w.P[i / 64], b = i % 64;
		if (!(P >> b & 1))
			continue;
		uint64_t j = w.pre[i / 64] + (uint64_t)__popcll(P & ((1ull << b) - 1));
		acc[i] = __fadd_rn(acc[i], (sgn[j >> 3] >> (j & 7) & 1) ? -mag : mag);
	}
}

extern "C" uint64_t ibpi_pts_cuda_workspace(uint64_t k)
{
	return 8 + 24 * ((k + 63) / 64) + 8;
}

extern "C" ibp_status_t ibpi_pts_encode_cuda(const float *d_g, uint64_t k, double sigma, uint64_t key, uint8_t *d_out,
					uint64_t *d_size, void *d_ws, int32_t *d_status, void *stream)
{
	if (!(sigma > 0 && sigma <= 1))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_pts_encode_cuda: sigma %g is not in (0, 1]", sigma);
	if (!d_out || !d_size || !d_ws || !d_status || (k && !d_g))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_pts_encode_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	IBP_CUDA_CHECK(cudaMemsetAsync(d_ws, 0, ibpi_pts_cuda_workspace(k), st));
	unsigned grid = 1;
	if (k) {
		IBP_TRY(ibp_cuda_grid((k + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
		IBP_CUDA_LAUNCH("launch ptsk_max", ptsk_max, grid, LSQK_THREADS, 0, st, d_g, k, d_ws, d_status);
		IBP_TRY(ibp_cuda_grid((W + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
		IBP_CUDA_LAUNCH("launch ptsk_keep", ptsk_keep, grid, LSQK_THREADS, 0, st, d_g, k, (float)sigma, key, d_ws,
				d_out + PTSK_HDR);
	}
	IBP_CUDA_LAUNCH("launch ptsk_scan", ptsk_scan, 1, LSQK_THREADS, 0, st, k, d_ws, 0, sigma, d_out, (uint64_t)0,
			d_size, d_status);
	if (bm) {
		IBP_TRY(ibp_cuda_grid((bm + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
		IBP_CUDA_LAUNCH("launch ptsk_signs", ptsk_signs, grid, LSQK_THREADS, 0, st, k, d_ws, d_out + PTSK_HDR + bm);
	}
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_pts_decode_add_cuda(const uint8_t *d_in, uint64_t size, uint64_t k, float *d_acc, void *d_ws,
					    int32_t *d_status, void *stream)
{
	if (!d_in || !d_ws || !d_status || (k && !d_acc))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_pts_decode_add_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	const uint64_t W = (k + 63) / 64, bm = (k + 7) / 8;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	if (size < PTSK_HDR + bm) {
		int32_t c = (int32_t)IBP_ERR_CORRUPT; /* nothing to launch: the verdict from here */
		IBP_CUDA_CHECK(cudaMemcpyAsync(d_status, &c, sizeof c, cudaMemcpyHostToDevice, st));
		IBP_CUDA_CHECK(cudaStreamSynchronize(st));
		return IBP_OK;
	}
	IBP_CUDA_CHECK(cudaMemsetAsync(d_ws, 0, ibpi_pts_cuda_workspace(k), st));
	unsigned grid = 1;
	if (W) {
		IBP_TRY(ibp_cuda_grid((W + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
		IBP_CUDA_LAUNCH("launch ptsk_loadp", ptsk_loadp, grid, LSQK_THREADS, 0, st, d_in + PTSK_HDR, k, d_ws);
	}
	IBP_CUDA_LAUNCH("launch ptsk_scan", ptsk_scan, 1, LSQK_THREADS, 0, st, k, d_ws, 1, 1.0, (uint8_t *)d_in, size,
			(uint64_t *)nullptr, d_status);
	if (k) {
		IBP_TRY(ibp_cuda_grid((k + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
		IBP_CUDA_LAUNCH("launch ptsk_add", ptsk_add, grid, LSQK_THREADS, 0, st, d_in, k, (const void *)d_ws, d_acc,
				(const int32_t *)d_status);
	}
	return IBP_OK;
}

static ibp_status_t lsqk_dtype(ibp_dtype_t dt, const char *what)
{
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dtype %d is not f32, bf16 or f16", what, (int)dt);
	return IBP_OK;
}

extern "C" uint64_t ibpi_lsq_cuda_workspace(uint64_t n, uint64_t row)
{
	return row ? 4 * (1 + (n + row - 1) / row) : 4;
}

extern "C" ibp_status_t ibpi_lsq_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K,
					uint64_t key, uint8_t *d_out, void *d_ws, int32_t *d_status, void *stream)
{
	IBP_TRY(lsqk_dtype(dt, "ibpi_lsq_encode_cuda"));
	if (row < 1 || row > 65535 || (B != 2 && B != 4 && B != 8) || (K != 0 && K != 4 && K != 8))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_lsq_encode_cuda: row %llu, %d bits, %d scale bits",
				(unsigned long long)row, B, K);
	if (!d_out || !d_ws || !d_status || (n && !d_src))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_lsq_encode_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	IBP_CUDA_CHECK(cudaMemsetAsync(d_ws, 0, ibpi_lsq_cuda_workspace(n, row), st));
	unsigned grid = 1;
	uint64_t rows = (n + row - 1) / row;
	if (rows) {
		IBP_TRY(ibp_cuda_grid(rows, &grid));
		IBP_CUDA_LAUNCH("launch lsqk_rowmax", lsqk_rowmax, grid, LSQK_THREADS, 0, st, d_src, dt, n, row,
				(uint32_t *)d_ws, d_status);
	}
	IBP_TRY(ibp_cuda_grid((ibpq_lsq_bytes(n, row, B, K) + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
	IBP_CUDA_LAUNCH("launch lsqk_write", lsqk_write, grid, LSQK_THREADS, 0, st, d_src, dt, n, row, B, K, key,
			(const uint32_t *)d_ws, d_out);
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_lsq_decode_cuda(const uint8_t *d_in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *d_dst,
					int32_t *d_status, void *stream)
{
	IBP_TRY(lsqk_dtype(dt, "ibpi_lsq_decode_cuda"));
	if (!d_status || !d_in || (n && !d_dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_lsq_decode_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	if (size < LSQK_HDR) {
		int32_t c = (int32_t)IBP_ERR_CORRUPT; /* nothing to launch: the verdict from here */
		IBP_CUDA_CHECK(cudaMemcpyAsync(d_status, &c, sizeof c, cudaMemcpyHostToDevice, st));
		IBP_CUDA_CHECK(cudaStreamSynchronize(st));
		return IBP_OK;
	}
	unsigned grid = 1;
	IBP_TRY(ibp_cuda_grid((n + LSQK_THREADS - 1) / LSQK_THREADS, &grid));
	IBP_CUDA_LAUNCH("launch lsqk_decode", lsqk_decode, grid, LSQK_THREADS, 0, st, d_in, size, dt, n, d_dst, d_status);
	return IBP_OK;
}
