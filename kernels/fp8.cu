/* fp8.cu - FP8 conversion and the TACO block codec on the GPU. Bytes and
 * decoded values equal the CPU reference (src/fp8/fp8.c): the scalar steps come
 * from fp8_impl.h (float ops as __fadd_rn & co., never contracted), the sum
 * of squares uses the same halving tree and the Hadamard butterflies the
 * same stride order.
 *
 * One CUDA block per codec block (T = min(B, 256) threads, each handling
 * B / T elements in shared memory): load + max + finite check, adaptive
 * scale (tree sum), rotation, max, scale, FP8 codes, all in one kernel;
 * decoding is one kernel too.
 */
#include <stdint.h>
#include <cuda_fp8.h>

#include "ibp/fp8.h"
#include "cuda_check.h"
#include "fp8/fp8_impl.h"

#define FP8K_MAX_THREADS 256

/* ------------------------------------------------------------ conversion */

__global__ void __launch_bounds__(256) fp8k_convert(const float *src, uint64_t n, uint32_t fmt, uint8_t *dst)
{
	__nv_fp8_interpretation_t it = fmt == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = (uint8_t)__nv_cvt_float_to_fp8(src[i], __NV_SATFINITE, it);
}

__global__ void __launch_bounds__(256) fp8k_expand(const uint8_t *src, uint64_t n, uint32_t fmt, float *dst)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = fp8_to_f32(src[i], fmt);
}

static ibp_status_t fp8k_elementwise_grid(uint64_t n, unsigned *grid)
{
	return ibp_cuda_grid((n + 255) / 256, grid);
}

extern "C" ibp_status_t ibp_fp8_convert_cuda(const float *d_src, uint64_t n, ibp_fp8_format_t fmt, uint8_t *d_dst,
					     void *stream)
{
	if (fmt != IBP_FP8_E4M3 && fmt != IBP_FP8_E5M2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_convert_cuda: unknown format %d", (int)fmt);
	if (n && (!d_src || !d_dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_convert_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	if (!n)
		return IBP_OK;
	unsigned grid = 1;
	IBP_TRY(fp8k_elementwise_grid(n, &grid));
	IBP_CUDA_LAUNCH("launch fp8k_convert", fp8k_convert, grid, 256, 0, (cudaStream_t)stream, d_src, n,
			(uint32_t)fmt, d_dst);
	return IBP_OK;
}

extern "C" ibp_status_t ibp_fp8_expand_cuda(const uint8_t *d_src, uint64_t n, ibp_fp8_format_t fmt, float *d_dst,
					    void *stream)
{
	if (fmt != IBP_FP8_E4M3 && fmt != IBP_FP8_E5M2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_expand_cuda: unknown format %d", (int)fmt);
	if (n && (!d_src || !d_dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_expand_cuda: NULL device pointer");
	IBP_TRY(ibp_cuda_require_device());
	if (!n)
		return IBP_OK;
	unsigned grid = 1;
	IBP_TRY(fp8k_elementwise_grid(n, &grid));
	IBP_CUDA_LAUNCH("launch fp8k_expand", fp8k_expand, grid, 256, 0, (cudaStream_t)stream, d_src, n,
			(uint32_t)fmt, d_dst);
	return IBP_OK;
}

/* ------------------------------------------------------------ block codec */

struct fp8k_shape {
	uint64_t n, chunk, nchunks, mpc; /* mpc: codec blocks per full chunk */
	uint64_t stride;                 /* bytes between chunk streams */
	uint32_t dt, fmt, log2b, flags;
};

static __host__ __device__ inline uint64_t fp8k_stream_bytes(uint64_t n, uint32_t log2b)
{
	uint64_t m = (n + (1ull << log2b) - 1) >> log2b;
	return (TACO_HEADER_BYTES + (m << log2b) + 5 * m + 15) & ~15ull;
}

static __device__ inline float fp8k_load(const uint8_t *src, uint32_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return ((const float *)src)[i];
	uint16_t h = ((const uint16_t *)src)[i];
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

static __device__ inline void fp8k_store(uint8_t *dst, uint32_t dt, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32)
		((float *)dst)[i] = f;
	else
		((uint16_t *)dst)[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
}

/* Block-wide max of non-negative floats (order-independent). */
static __device__ float fp8k_block_max(float v, float *red)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	if ((threadIdx.x & 31u) == 0)
		red[threadIdx.x >> 5] = v;
	__syncthreads();
	float m = 0.0f;
	for (uint32_t w = 0; w < (blockDim.x + 31) / 32; w++)
		m = fmaxf(m, red[w]);
	__syncthreads();
	return m;
}

/* The rotation: butterflies at strides 1 .. B/2, then the 1/sqrt(B) factor. */
static __device__ void fp8k_hadamard(float *x, uint32_t log2b)
{
	uint32_t B = 1u << log2b;
	for (uint32_t h = 1; h < B; h <<= 1) {
		for (uint32_t p = threadIdx.x; p < B / 2; p += blockDim.x) {
			uint32_t i = (p / h) * 2 * h + p % h, j = i + h;
			float a = x[i], b = x[j];
			x[i] = FP_ADD(a, b);
			x[j] = FP_SUB(a, b);
		}
		__syncthreads();
	}
	float inv = taco_inv_sqrt_b(log2b);
	for (uint32_t i = threadIdx.x; i < B; i += blockDim.x)
		x[i] = FP_MUL(x[i], inv);
	__syncthreads();
}

__global__ void __launch_bounds__(FP8K_MAX_THREADS)
fp8k_encode(const uint8_t *src, fp8k_shape sh, uint8_t *dst)
{
	extern __shared__ float smem[];
	__shared__ float red[FP8K_MAX_THREADS / 32];
	const uint32_t B = 1u << sh.log2b, T = blockDim.x;
	float *x = smem, *t = smem + B;
	for (uint64_t gid = blockIdx.x; gid < sh.nchunks * sh.mpc; gid += gridDim.x) {
		uint64_t c = gid / sh.mpc, blk = gid % sh.mpc;
		uint64_t clen = sh.n - c * sh.chunk < sh.chunk ? sh.n - c * sh.chunk : sh.chunk;
		uint64_t m = (clen + B - 1) >> sh.log2b;
		if (blk >= (m ? m : 1))
			continue; /* an empty stream still gets its header from block 0 */
		uint8_t *out = dst + c * sh.stride;
		const uint8_t *in = src + c * sh.chunk * (sh.dt == IBP_DTYPE_F32 ? 4u : 2u);
		uint8_t *codes = out + TACO_HEADER_BYTES + (blk << sh.log2b);
		uint8_t *scales = out + TACO_HEADER_BYTES + (m << sh.log2b);
		uint8_t *kexp = scales + 4 * m;
		if (blk == 0) {
			/* header and tail padding of this chunk's stream */
			uint64_t used = TACO_HEADER_BYTES + (m << sh.log2b) + 5 * m, total = fp8k_stream_bytes(clen, sh.log2b);
			for (uint64_t i = used + threadIdx.x; i < total; i += T)
				out[i] = 0;
			for (uint32_t i = threadIdx.x; i < TACO_HEADER_BYTES; i += T) {
				uint8_t v = 0;
				if (i < 4)
					v = (uint8_t)(TACO_MAGIC >> (8 * i));
				else if (i == 4)
					v = TACO_VERSION;
				else if (i == 5)
					v = (uint8_t)sh.fmt;
				else if (i == 6)
					v = (uint8_t)sh.flags;
				else if (i == 7)
					v = (uint8_t)sh.log2b;
				else if (i < 16)
					v = (uint8_t)(clen >> (8 * (i - 8)));
				else if (i == 16)
					v = (uint8_t)sh.dt;
				out[i] = v;
			}
		}
		if (m == 0)
			continue;
		uint64_t base = blk << sh.log2b;
		uint32_t len = clen - base < B ? (uint32_t)(clen - base) : B;
		bool fin = true;
		float mx = 0.0f;
		for (uint32_t i = threadIdx.x; i < B; i += T) {
			float v = i < len ? fp8k_load(in, sh.dt, base + i) : 0.0f;
			uint32_t a = ibp_f32_bits(v) & 0x7fffffffu;
			fin &= a < 0x7f800000u;
			x[i] = v;
			mx = fmaxf(mx, ibp_f32_from_bits(a));
		}
		bool all_fin = __syncthreads_and(fin) != 0;
		mx = fp8k_block_max(all_fin ? mx : 0.0f, red);
		int k = 0;
		bool nan_block = !all_fin;
		if (!nan_block && (sh.flags & TACO_FLAG_ADAPTIVE) && mx > 0.0f) {
			float f1, f2;
			int e = fp8i_ilog2(mx);
			taco_prescale_factors(e, &f1, &f2);
			for (uint32_t i = threadIdx.x; i < B; i += T) {
				float y = FP_MUL(FP_MUL(x[i], f1), f2);
				t[i] = FP_MUL(y, y);
			}
			__syncthreads();
			for (uint32_t h = B / 2; h >= 1; h >>= 1) {
				for (uint32_t i = threadIdx.x; i < h; i += T)
					t[i] = FP_ADD(t[i], t[i + h]);
				__syncthreads();
			}
			k = taco_alpha_exp(e, t[0], len, taco_qmax(sh.fmt));
			float alpha = ibp_pow2f(k);
			for (uint32_t i = threadIdx.x; i < B; i += T)
				x[i] = FP_MUL(x[i], alpha);
			__syncthreads();
		}
		if (!nan_block && (sh.flags & TACO_FLAG_HADAMARD))
			fp8k_hadamard(x, sh.log2b);
		float mz = 0.0f;
		for (uint32_t i = threadIdx.x; i < B; i += T)
			mz = fmaxf(mz, ibp_f32_from_bits(ibp_f32_bits(x[i]) & 0x7fffffffu));
		mz = fp8k_block_max(mz, red);
		if (!(ibp_f32_bits(mz) < 0x7f800000u))
			nan_block = true; /* overflow in the rotation (no adaptive step) */
		if (nan_block) {
			for (uint32_t i = threadIdx.x; i < B; i += T)
				codes[i] = 0x7f;
			if (threadIdx.x == 0) {
				*(uint32_t *)(scales + 4 * blk) = FP8_QNAN_BITS;
				kexp[blk] = 0;
			}
		} else {
			float s = taco_scale(mz, sh.fmt);
			for (uint32_t i = threadIdx.x; i < B; i += T)
				codes[i] = s == 0.0f ? (uint8_t)0 : fp8_from_f32(FP_DIV(x[i], s), sh.fmt);
			if (threadIdx.x == 0) {
				*(float *)(scales + 4 * blk) = s;
				kexp[blk] = (uint8_t)(int8_t)k;
			}
		}
		__syncthreads();
	}
}

static __device__ inline void fp8k_fail(int32_t *status)
{
	atomicCAS((int *)status, 0, (int)IBP_ERR_CORRUPT);
}

__global__ void __launch_bounds__(FP8K_MAX_THREADS)
fp8k_decode(const uint8_t *src, fp8k_shape sh, uint8_t *dst, int32_t *status)
{
	extern __shared__ float smem[];
	const uint32_t B = 1u << sh.log2b, T = blockDim.x;
	const uint32_t esize = sh.dt == IBP_DTYPE_F32 ? 4u : 2u;
	float *z = smem;
	for (uint64_t gid = blockIdx.x; gid < sh.nchunks * sh.mpc; gid += gridDim.x) {
		uint64_t c = gid / sh.mpc, blk = gid % sh.mpc;
		uint64_t clen = sh.n - c * sh.chunk < sh.chunk ? sh.n - c * sh.chunk : sh.chunk;
		uint64_t m = (clen + B - 1) >> sh.log2b;
		if (blk >= (m ? m : 1))
			continue; /* block 0 of an empty stream still checks the header */
		const uint8_t *in = src + c * sh.stride;
		/* header (parse_stream): what the decode uses, checked by every
		 * block of the chunk; the reserved bytes 17..63 by block 0 alone,
		 * which reports the chunk (as with its padding below) */
		bool ok = in[0] == (uint8_t)TACO_MAGIC && in[1] == (uint8_t)(TACO_MAGIC >> 8) &&
			  in[2] == (uint8_t)(TACO_MAGIC >> 16) && in[3] == (uint8_t)(TACO_MAGIC >> 24) &&
			  in[5] == sh.fmt && in[7] == sh.log2b &&
			  (blk == 0 ? taco_header_rest_ok(in) : taco_header_flags_ok(in)) &&
			  (in[16] == IBP_DTYPE_F32 || in[16] == IBP_DTYPE_BF16 || in[16] == IBP_DTYPE_F16);
		uint64_t hn = 0;
		for (int i = 7; i >= 0; i--)
			hn = hn << 8 | in[8 + i];
		ok &= hn == clen;
		if (!ok) {
			if (threadIdx.x == 0)
				fp8k_fail(status);
			continue;
		}
		uint32_t flags = in[6];
		const uint8_t *codes = in + TACO_HEADER_BYTES + (blk << sh.log2b);
		const uint8_t *scales = in + TACO_HEADER_BYTES + (m << sh.log2b);
		const uint8_t *kexp = scales + 4 * m;
		if (blk == 0) {
			uint64_t used = TACO_HEADER_BYTES + (m << sh.log2b) + 5 * m, total = fp8k_stream_bytes(clen, sh.log2b);
			bool pad = true;
			for (uint64_t i = used + threadIdx.x; i < total; i += T)
				pad &= in[i] == 0;
			if (!__syncthreads_and(pad) && threadIdx.x == 0)
				fp8k_fail(status);
		}
		if (m == 0)
			continue;
		/* per-block fields (block_ok in src/fp8/fp8.c) */
		uint32_t sb = *(const uint32_t *)(scales + 4 * blk);
		int k = (int8_t)kexp[blk];
		bool bok = k <= TACO_K_MAX && k >= -TACO_K_MAX && ((flags & TACO_FLAG_ADAPTIVE) || k == 0);
		bool isnan = sb == FP8_QNAN_BITS;
		if (isnan)
			bok &= k == 0;
		else if (sb >= 0x7f800000u)
			bok = false;
		bool cok = true;
		for (uint32_t i = threadIdx.x; i < B; i += T) {
			uint32_t q = codes[i], a = q & 0x7fu;
			if (isnan)
				cok &= q == 0x7fu;
			else if (sb == 0)
				cok &= q == 0;
			else
				cok &= sh.fmt == FP8_E4M3 ? a != 0x7fu : a < 0x7cu;
		}
		if (!__syncthreads_and(cok && bok)) {
			if (threadIdx.x == 0)
				fp8k_fail(status);
			continue;
		}
		uint64_t base = blk << sh.log2b;
		uint32_t len = clen - base < B ? (uint32_t)(clen - base) : B;
		uint8_t *out = dst + c * sh.chunk * esize;
		float s = ibp_f32_from_bits(sb);
		if (isnan) {
			for (uint32_t i = threadIdx.x; i < len; i += T)
				fp8k_store(out, sh.dt, base + i, s);
			continue;
		}
		for (uint32_t i = threadIdx.x; i < B; i += T)
			z[i] = FP_MUL(fp8_to_f32(codes[i], sh.fmt), s);
		__syncthreads();
		if (flags & TACO_FLAG_HADAMARD)
			fp8k_hadamard(z, sh.log2b);
		float inv_alpha = ibp_pow2f(-k);
		for (uint32_t i = threadIdx.x; i < len; i += T)
			fp8k_store(out, sh.dt, base + i, FP_MUL(z[i], inv_alpha));
		__syncthreads();
	}
}

/* Threads per codec block: B, at least one full warp, at most 256. */
static unsigned fp8k_threads(uint32_t block)
{
	return block < 32 ? 32u : (block > FP8K_MAX_THREADS ? FP8K_MAX_THREADS : block);
}

/* The options, or the defaults (in *def) when o is NULL. */
static const ibp_fp8_opts_t *fp8k_opts(const ibp_fp8_opts_t *o, ibp_fp8_opts_t *def)
{
	if (o)
		return o;
	ibp_fp8_opts_default(def);
	return def;
}

static ibp_status_t fp8k_shape_of(ibp_dtype_t dt, uint64_t n, uint64_t chunk, const ibp_fp8_opts_t *o,
				  fp8k_shape *sh, const char *fn)
{
	uint64_t stride = 0;
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dtype %s is not f32, bf16 or f16", fn, ibp_dtype_name(dt));
	if (chunk == 0 || chunk > n)
		chunk = n ? n : 1;
	IBP_TRY(ibp_fp8_encoded_size(o, chunk, &stride));
	if (n > TACO_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu elements exceed 2^56", fn, (unsigned long long)n);
	sh->n = n;
	sh->chunk = chunk;
	sh->nchunks = n ? (n + chunk - 1) / chunk : 1; /* n = 0: one header-only stream */
	sh->log2b = (uint32_t)__builtin_ctz(o->block);
	sh->mpc = (chunk + o->block - 1) >> sh->log2b;
	sh->stride = stride;
	sh->dt = (uint32_t)dt;
	sh->fmt = (uint32_t)o->format;
	sh->flags = (o->hadamard ? TACO_FLAG_HADAMARD : 0u) | (o->adaptive ? TACO_FLAG_ADAPTIVE : 0u);
	return IBP_OK;
}

extern "C" ibp_status_t ibp_fp8_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
					    const ibp_fp8_opts_t *o, void *d_dst, void *stream)
{
	ibp_fp8_opts_t def;
	fp8k_shape sh = {};
	o = fp8k_opts(o, &def);
	IBP_TRY(fp8k_shape_of(dt, n, chunk_elems, o, &sh, "fp8_encode_cuda"));
	if (!d_dst || (n && !d_src))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encode_cuda: NULL device pointer");
	if (((uintptr_t)d_dst & 15u) || ((uintptr_t)d_src % (dt == IBP_DTYPE_F32 ? 4u : 2u)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encode_cuda: d_dst must be 16-byte aligned, d_src element-aligned");
	IBP_TRY(ibp_cuda_require_device());
	unsigned grid = 1, threads = fp8k_threads(o->block);
	IBP_TRY(ibp_cuda_grid(sh.nchunks * sh.mpc, &grid));
	size_t smem = 2 * (size_t)o->block * sizeof(float);
	if (smem > 48 * 1024)
		IBP_CUDA_CHECK(cudaFuncSetAttribute(fp8k_encode, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	IBP_CUDA_LAUNCH("launch fp8k_encode", fp8k_encode, grid, threads, smem, (cudaStream_t)stream,
			(const uint8_t *)d_src, sh, (uint8_t *)d_dst);
	return IBP_OK;
}

/* Bytes the streams of this shape occupy: every chunk's stream at its
 * stride, the last (possibly shorter) one only up to its own end. */
static uint64_t fp8k_streams_bytes(const fp8k_shape &sh)
{
	const uint64_t last = sh.n ? sh.n - (sh.nchunks - 1) * sh.chunk : 0;
	return (sh.nchunks - 1) * sh.stride + fp8k_stream_bytes(last, sh.log2b);
}

extern "C" ibp_status_t ibp_fp8_decode_bounded_cuda(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt,
						    uint64_t n, uint64_t chunk_elems, const ibp_fp8_opts_t *o,
						    void *d_dst, int32_t *d_status, void *stream)
{
	ibp_fp8_opts_t def;
	fp8k_shape sh = {};
	o = fp8k_opts(o, &def);
	IBP_TRY(fp8k_shape_of(dt, n, chunk_elems, o, &sh, "fp8_decode_cuda"));
	if (!d_status || !d_src || (n && !d_dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode_cuda: NULL device pointer");
	if (((uintptr_t)d_src & 15u) || ((uintptr_t)d_dst % (dt == IBP_DTYPE_F32 ? 4u : 2u)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode_cuda: d_src must be 16-byte aligned, d_dst element-aligned");
	/* The kernel reads exactly these bytes (every offset it reads follows
	 * from n, the chunk size and the options, never from the stream). */
	const uint64_t need = fp8k_streams_bytes(sh);
	if (src_bytes < need)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8_decode_cuda: %llu source bytes, the %llu stream(s) of %llu elements "
				"need %llu", (unsigned long long)src_bytes, (unsigned long long)sh.nchunks,
				(unsigned long long)n, (unsigned long long)need);
	IBP_TRY(ibp_cuda_require_device());
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), (cudaStream_t)stream));
	unsigned grid = 1, threads = fp8k_threads(o->block);
	IBP_TRY(ibp_cuda_grid(sh.nchunks * sh.mpc, &grid));
	size_t smem = (size_t)o->block * sizeof(float);
	IBP_CUDA_LAUNCH("launch fp8k_decode", fp8k_decode, grid, threads, smem, (cudaStream_t)stream,
			(const uint8_t *)d_src, sh, (uint8_t *)d_dst, d_status);
	return IBP_OK;
}

/* Deprecated: the caller vouches for the source length (the streams' own
 * size is assumed), as before the bounded entry point existed. */
extern "C" ibp_status_t ibp_fp8_decode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
					    const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status, void *stream)
{
	ibp_fp8_opts_t def;
	fp8k_shape sh = {};
	o = fp8k_opts(o, &def);
	IBP_TRY(fp8k_shape_of(dt, n, chunk_elems, o, &sh, "fp8_decode_cuda"));
	return ibp_fp8_decode_bounded_cuda(d_src, fp8k_streams_bytes(sh), dt, n, chunk_elems, o, d_dst, d_status,
					   stream);
}

/* Deprecated alias (docs/API.md "Names"). */
extern "C" ibp_status_t ibp_fp8_decode_cuda_bounded(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt, uint64_t n,
					   uint64_t chunk_elems, const ibp_fp8_opts_t *o, void *d_dst,
					   int32_t *d_status, void *stream)
{
	return ibp_fp8_decode_bounded_cuda(d_src, src_bytes, dt, n, chunk_elems, o, d_dst, d_status, stream);
}
