/* ibp_bag.cu - embedding bags pooled on the GPU straight from a device store
 * (the twin of ibp_store_embedding_bag, ibp/bag.h).
 *
 * One warp per bag, grid-stride over the bags. For each id of its bag, in
 * id order, the warp decodes the row with the gather's device decoder
 * (ibp_device.cuh) into the warp's row buffer in shared memory, then lane l
 * folds elements l, l + 32, ... into the warp's float32 accumulator (shared
 * memory, each element owned by one lane). The arithmetic is the CPU
 * twin's, element by element and in the same order, with every operation
 * rounded on its own (__fadd_rn, __fmul_rn, __fdiv_rn: nvcc would otherwise
 * contract a + w * r into an fma), so float32 results are bitwise equal;
 * 16-bit outputs are rounded once at the end by the CPU's own converters
 * (fp8/fp8_impl.h). Each row's bytes are first copied into the warp's
 * stage buffer with the gather's fetch (ibp_issue_fetch), one row at a time
 * (no pipeline across ids yet).
 *
 * A bag with an id outside [0, nrows), offsets that decrease or pass n_ids,
 * or a row that does not decode gets zeros, its status (if asked for) and
 * one count on the store's error counter (ibp_cuda_store_errors).
 */
#include <stdint.h>
#include <string.h>

#include "ibp_device.cuh"
#include "ibp_store.cuh"
#include "ibp/bag.h"
#include "fp8/fp8_impl.h"


struct IbpBagArgs {
	IbpDevCodec cd;
	const uint8_t *payload;
	uint64_t payload_bytes;
	const uint64_t *roff;     /* packed row offsets (nrows + 1), or NULL */
	const uint64_t *lens;     /* inplace: each row's own length */
	const uint8_t *flags;
	const uint8_t *clusters;  /* NULL: cluster 0 */
	uint64_t nrows;
	const int32_t *ids32;     /* one of the two */
	const int64_t *ids64;
	uint64_t n_ids;
	const int64_t *offsets;   /* n_bags + 1 */
	uint64_t n_bags;
	const float *weights;     /* NULL, or n_ids */
	int64_t padding;
	unsigned mode;            /* ibp_bag_mode_t */
	int unfused;
	int dt;                   /* 0 float32, 1 float16, 2 bfloat16 */
	uint64_t dim;
	uint8_t *out;
	int32_t *status;
	unsigned long long *nerr;
	uint32_t stage_smem;      /* bytes of a warp's stage buffer (16-byte multiple) */
	uint32_t row_smem;        /* bytes of a warp's row buffer (16-byte multiple) */
	uint32_t acc_smem;        /* bytes of a warp's accumulator (16-byte multiple) */
};

/* Decodes a row of `len` bytes read through rd into rowb; the gather's
 * per-row checks (ibp_process in ibp_gather.cu). */
template <unsigned C, class Rd>
__device__ __forceinline__ int32_t ibp_bag_decode(const IbpBagArgs &a, const Rd &rd, uint64_t len, unsigned fl,
						  unsigned cl, int exact, uint8_t *rowb)
{
	if ((fl & ~IBP_ROW_MODE_MASK) || cl >= a.cd.K)
		return IBP_ERR_CORRUPT;
	const unsigned mode = fl & IBP_ROW_MODE_MASK;
	if (mode == IBP_ROW_RAW) {
		if (len < a.cd.R || (exact && len != a.cd.R))
			return IBP_ERR_CORRUPT;
		ibp_copy_out<1>(rd, rowb, a.cd.R);
		return IBP_OK;
	}
	IbpRowHdr h;
	int st = ibp_validate_row<C, 1>(a.cd, rd, len, mode, cl, h, nullptr);
	if (st != IBP_OK)
		return st;
	if (!h.walk) {
		if (exact && h.extent != len)
			return IBP_ERR_CORRUPT;
		if (mode == IBP_ROW_CLEAN)
			ibp_decode_clean<C, 1>(a.cd, rd, cl, h, rowb);
		else
			ibp_decode_chunks<C, 1>(a.cd, rd, mode, cl, h, rowb, nullptr);
		return IBP_OK;
	}
	/* Xvals: every chunk as matched, then the walk patches the exceptions */
	ibp_decode_clean<C, 1>(a.cd, rd, cl, h, rowb);
	__syncwarp();
	uint64_t end = 0;
	st = ibp_walk_exc<C>(a.cd, rd, len, mode, cl, h, rowb, &end);
	if (st != IBP_OK)
		return st;
	if (exact && h.hdr + (end + 7) / 8 != len)
		return IBP_ERR_CORRUPT;
	return IBP_OK;
}

/* Decodes row `id` (in range) into rowb. A row that fits the warp's stage
 * buffer is first copied into it by the gather's fetch (cp.async of whole
 * aligned sectors: few, large PCIe reads for a host payload), a longer one
 * (a crafted row) is read in place. Every lane returns the same status. */
template <unsigned C>
__device__ __forceinline__ int32_t ibp_bag_row(const IbpBagArgs &a, uint64_t id, uint8_t *stage, uint8_t *rowb)
{
	uint64_t start, len;
	const int exact = a.roff != nullptr;
	if (exact) {
		start = a.roff[id];
		const uint64_t e = a.roff[id + 1];
		if (e < start || e > a.payload_bytes || e - start > a.cd.max_extent)
			return IBP_ERR_CORRUPT;
		len = e - start;
	} else {
		start = id * a.cd.R;
		len = a.lens[id] < a.cd.R ? a.lens[id] : a.cd.R;
	}
	const unsigned fl = a.flags[id], cl = a.clusters ? a.clusters[id] : 0u;
	if (len + 32 <= a.stage_smem) {
		const uint8_t *src = a.payload + start;
		ibp_issue_fetch<1>(stage, src, len, a.payload, a.payload + a.payload_bytes, ibp_lane());
		ibp_cp_async_commit();
		ibp_cp_async_wait<0>();
		__syncwarp(); /* every lane's pieces are in */
		IbpStageReader rd;
		rd.base = stage;
		rd.skew = (unsigned)((uintptr_t)src & 15);
		return ibp_bag_decode<C>(a, rd, len, fl, cl, exact, rowb);
	}
	IbpGlobalReader rd;
	rd.p = a.payload + start;
	rd.len = len;
	return ibp_bag_decode<C>(a, rd, len, fl, cl, exact, rowb);
}

__device__ __forceinline__ float ibp_bag_elem(const IbpBagArgs &a, const uint8_t *rowb, uint64_t e)
{
	if (a.dt == 0)
		return reinterpret_cast<const float *>(rowb)[e];
	const uint16_t h = reinterpret_cast<const uint16_t *>(rowb)[e];
	return a.dt == 2 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

__device__ __forceinline__ uint16_t ibp_bag_narrow(int dt, float v)
{
	return dt == 2 ? fp8i_f32_to_bf16(v) : fp8i_f32_to_f16(v);
}

__device__ __forceinline__ float ibp_bag_widen(int dt, uint16_t h)
{
	return dt == 2 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

/* At most 128 registers so that two blocks of 256 threads fit an SM
 * (tests/cuda/kernel_resources.sh checks that nothing spills). */
template <unsigned C>
__global__ void __launch_bounds__(256, 2) ibp_bag_kernel(const IbpBagArgs a)
{
	extern __shared__ __align__(16) uint8_t ibp_bag_smem[];
	const unsigned wpb = blockDim.x / 32, wib = threadIdx.x / 32, lane = ibp_lane();
	uint8_t *const stage = ibp_bag_smem + (uint64_t)wib * (a.stage_smem + a.row_smem + a.acc_smem);
	uint8_t *const rowb = stage + a.stage_smem;
	float *const acc = reinterpret_cast<float *>(rowb + a.row_smem);
	const uint64_t nwarps = (uint64_t)gridDim.x * wpb;
	for (uint64_t b = (uint64_t)blockIdx.x * wpb + wib; b < a.n_bags; b += nwarps) {
		const int64_t o0 = a.offsets[b], o1 = a.offsets[b + 1];
		int32_t st = IBP_OK;
		if (o0 < 0 || o1 < o0 || (uint64_t)o1 > a.n_ids)
			st = IBP_ERR_INVALID_ARG;
		uint64_t cnt = 0;
		for (int64_t i = o0; st == IBP_OK && i < o1; i++) {
			const int64_t id = a.ids64 ? a.ids64[i] : (int64_t)a.ids32[i];
			if (id < 0 || (uint64_t)id >= a.nrows) {
				st = IBP_ERR_OUT_OF_RANGE;
				break;
			}
			if (id == a.padding)
				continue;
			st = ibp_bag_row<C>(a, (uint64_t)id, stage, rowb);
			if (st != IBP_OK)
				break;
			__syncwarp(); /* the row's chunks (by chunk lane) are in before lanes read elements */
			const float w = a.weights ? a.weights[i] : 0.0f;
			for (uint64_t e = lane; e < a.dim; e += 32) {
				const float r = ibp_bag_elem(a, rowb, e);
				float v;
				if (a.mode == IBP_BAG_MAX)
					v = cnt == 0 || r > acc[e] ? r : acc[e];
				else {
					const float x = cnt ? acc[e] : 0.0f; /* PyTorch's +0 start */
					if (!a.weights)
						v = __fadd_rn(x, r);
					else if (a.unfused)
						v = __fadd_rn(x, __fmul_rn(w, r));
					else
						v = fmaf(w, r, x);
				}
				acc[e] = v;
			}
			__syncwarp(); /* every lane read the row before the next one is decoded over it */
			cnt++;
		}
		uint8_t *o = a.out + b * a.cd.R;
		if (st != IBP_OK || cnt == 0) {
			ibp_zero_out<1>(o, a.cd.R);
		} else if (a.dt == 0) {
			float *of = reinterpret_cast<float *>(o);
			for (uint64_t e = lane; e < a.dim; e += 32)
				of[e] = a.mode == IBP_BAG_MEAN ? __fdiv_rn(acc[e], (float)cnt) : acc[e];
		} else {
			uint16_t *oh = reinterpret_cast<uint16_t *>(o);
			for (uint64_t e = lane; e < a.dim; e += 32) {
				/* mean: PyTorch rounds the sum, then the quotient */
				oh[e] = a.mode == IBP_BAG_MEAN
						? ibp_bag_narrow(a.dt, __fdiv_rn(ibp_bag_widen(a.dt, ibp_bag_narrow(a.dt, acc[e])),
										  (float)cnt))
						: ibp_bag_narrow(a.dt, acc[e]);
			}
		}
		if (lane == 0) {
			if (a.status)
				a.status[b] = st;
			if (st != IBP_OK && a.nerr)
				atomicAdd(a.nerr, 1ull);
		}
		__syncwarp(); /* the accumulator is reused by the warp's next bag */
	}
}

typedef void (*IbpBagFn)(const IbpBagArgs);

static IbpBagFn ibp_bag_fn(unsigned C)
{
	switch (C) {
	case 1: return ibp_bag_kernel<1>;
	case 2: return ibp_bag_kernel<2>;
	case 4: return ibp_bag_kernel<4>;
	default: return ibp_bag_kernel<8>;
	}
}

#define IBP_BAG_WARPS 8 /* warps (bags in flight) per block, at most */

/* cuda/ibp_cuda_internal.h: a host-fallback store's host store. */
extern "C" ibp_hstore_t *ibpi_cuda_store_hstore(const ibp_cuda_store_t *store)
{
	const ibp_cuda_store *s = store;
	return s && !s->on_device ? s->host : nullptr;
}

/* The launch half of ibp_store_embedding_bag_cuda (ibp_bag_cudahost.c has
 * the argument checks; the prototype is repeated there). The store is on
 * the device and current; pointers are device-accessible. */
extern "C" ibp_status_t ibpi_bag_launch_cuda(const ibp_cuda_store_t *store, int mode, int unfused,
					    const void *ids, int ids64, uint64_t n_ids, const int64_t *offsets,
					    uint64_t n_bags, const float *weights, int64_t padding_idx, int dt,
					    void *out, int32_t *status, void *stream)
{
	const ibp_cuda_store *s = store;
	IBP_TRY(ibp_cu_on_device(s->device, "embedding_bag_cuda"));
	IbpBagArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = s->codec->d;
	a.payload = s->payload;
	a.payload_bytes = s->payload_bytes;
	a.roff = s->offsets;
	a.lens = s->lens;
	a.flags = s->flags;
	a.clusters = s->clusters;
	a.nrows = s->nrows;
	a.ids32 = ids64 ? nullptr : (const int32_t *)ids;
	a.ids64 = ids64 ? (const int64_t *)ids : nullptr;
	a.n_ids = n_ids;
	a.offsets = offsets;
	a.n_bags = n_bags;
	a.weights = weights;
	a.padding = padding_idx;
	a.mode = (unsigned)mode;
	a.unfused = unfused;
	a.dt = dt;
	a.dim = s->R / (dt == 0 ? 4u : 2u);
	a.out = (uint8_t *)out;
	a.status = status;
	a.nerr = s->nerr;
	const uint64_t stage_smem = ibp_round_up(s->R + 32, 16); /* a raw row plus reader slack, as the gather */
	const uint64_t row_smem = ibp_round_up(s->R, 16), acc_smem = ibp_round_up(a.dim * 4, 16);
	const int dev = s->device;
	int nsm = 0, optin = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
	IBP_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
	       "cudaDeviceGetAttribute");
	const uint64_t per_warp = stage_smem + row_smem + acc_smem;
	if (per_warp > (uint64_t)optin)
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				"embedding_bag_cuda: rows of %llu bytes need %llu bytes of shared memory per bag, "
				"more than the device's %d",
				(unsigned long long)s->R, (unsigned long long)per_warp, optin);
	uint64_t wpb = (uint64_t)optin / per_warp;
	if (wpb > IBP_BAG_WARPS)
		wpb = IBP_BAG_WARPS;
	if (wpb > n_bags)
		wpb = n_bags;
	a.stage_smem = (uint32_t)stage_smem;
	a.row_smem = (uint32_t)row_smem;
	a.acc_smem = (uint32_t)acc_smem;
	const size_t smem = (size_t)(wpb * per_warp);
	const IbpBagFn fn = ibp_bag_fn(a.cd.C);
	cudaFuncAttributes fa;
	IBP_CU(cudaFuncGetAttributes(&fa, (const void *)fn), "cudaFuncGetAttributes");
	IBP_CU(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
				    optin - (int)fa.sharedSizeBytes),
	       "cudaFuncSetAttribute");
	int per_sm = 0;
	IBP_CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)fn, (int)(32 * wpb), smem),
	       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
	if (per_sm < 1)
		return ibpi_fail(IBP_ERR_CUDA, "embedding_bag_cuda: no block of %u threads with %zu bytes of shared "
				"memory fits on an SM", (unsigned)(32 * wpb), smem);
	uint64_t blocks = (n_bags + wpb - 1) / wpb, cap = (uint64_t)per_sm * (uint64_t)nsm;
	if (blocks > cap)
		blocks = cap;
	IBP_CUDA_LAUNCH("embedding_bag_cuda: kernel launch", fn, (unsigned)blocks, (unsigned)(32 * wpb), smem,
			(cudaStream_t)stream, a);
	return IBP_OK;
}
