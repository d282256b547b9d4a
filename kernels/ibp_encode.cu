/* ibp_encode.cu - the codec on the device, and batched encoding on the GPU:
 * the twin of ibp_encode_batch (src/bitpack/codec.c), byte for byte.
 *
 * Two passes, as on the CPU. Sizes: one group (warp, or block for rows over
 * 4 KiB) per row counts exceptions under each cluster, applies the mode
 * rule (ibp_choose_mode) and keeps the smallest cluster (lowest id on
 * ties); a CUB exclusive scan turns the sizes into offsets. Write: the
 * group builds the encoded row in a zeroed stage (shared memory, or a
 * workspace slice for rows too large for it) by OR-ing each lane's fields
 * at bit offsets from warp scans, then copies exactly the row's bytes out.
 */
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_scan.cuh>

#include "ibp_device.cuh"
#include "bitpack/row_mode.h"

/* ---------------------------------------------------------------------- */
/* the device codec                                                        */
/* ---------------------------------------------------------------------- */

void ibp_cuda_codec_free(ibp_cuda_codec_t *c)
{
	if (!c)
		return;
	if (c->mem) {
		(void)cudaFree(c->mem); /* waits for work that may use it; no device-wide sync */
		(void)cudaGetLastError();
	}
	ibp_codec_free(c->host);
	free(c);
}

const ibp_codec_t *ibp_cuda_codec_host(const ibp_cuda_codec_t *c)
{
	return c ? c->host : NULL;
}

ibp_status_t ibp_cuda_codec_create(const ibp_codec_t *codec, void *stream, ibp_cuda_codec_t **out)
{
	if (!out || !codec)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_codec_create: NULL argument");
	*out = NULL;
	int dev = 0;
	IBP_TRY(ibp_cu_current(&dev));
	ibp_cuda_codec_t *c = (ibp_cuda_codec_t *)calloc(1, sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "cuda_codec_create: out of memory");
	c->device = dev;
	ibp_status_t st = ibpi_cuda_codec_clone(codec, &c->host);
	if (st != IBP_OK) {
		free(c);
		return st;
	}
	const ibp_codec_t *h = c->host;
	IbpDevCodec &d = c->d;
	uint64_t *tso = NULL, *ewp = NULL;
	st = ibp_dev_codec_layout(h, d, &tso, &ewp);
	if (st != IBP_OK) {
		ibp_cuda_codec_free(c);
		return st;
	}
	const uint64_t KD = (uint64_t)d.K * d.D, nt1 = d.ntiles + 1;
	const uint64_t mb = ibp_round_up(KD * d.C, 256), tb = (uint64_t)d.K * nt1 * 8;
	const uint64_t pb = (uint64_t)d.K * ((d.D + 63) / 64) * ibp_ew_planes(d.C) * 8;
	d.xmask = 0;
	for (unsigned k = 0; k < d.K; k++)
		if (memcmp(ibp_codec_xval(h, k), ibp_codec_bitval(h, k), d.D * d.C) != 0)
			d.xmask |= 1ull << k;
	cudaStream_t cs = (cudaStream_t)stream;
	uint8_t *mem = NULL;
	cudaError_t e = cudaMalloc((void **)&mem, 3 * mb + ibp_round_up(tb, 256) + pb);
	if (e == cudaSuccess) {
		c->mem = mem;
		e = cudaMemcpyAsync(mem, ibp_codec_mask(h, 0), KD * d.C, cudaMemcpyHostToDevice, cs);
	}
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(mem + mb, ibp_codec_bitval(h, 0), KD * d.C, cudaMemcpyHostToDevice, cs);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(mem + 2 * mb, ibp_codec_xval(h, 0), KD * d.C, cudaMemcpyHostToDevice, cs);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(mem + 3 * mb, tso, tb, cudaMemcpyHostToDevice, cs);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(mem + 3 * mb + ibp_round_up(tb, 256), ewp, pb, cudaMemcpyHostToDevice, cs);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cs); /* tso and ewp are freed next */
	free(tso);
	free(ewp);
	if (e != cudaSuccess) {
		st = ibp_cu_fail(e, "cuda_codec_create: copy tables");
		ibp_cuda_codec_free(c);
		return st;
	}
	d.m = mem;
	d.b = mem + mb;
	d.x = mem + 2 * mb;
	d.tso = (const uint64_t *)(mem + 3 * mb);
	d.ewp = (const uint64_t *)(mem + 3 * mb + ibp_round_up(tb, 256));
	*out = c;
	return IBP_OK;
}

/* ---------------------------------------------------------------------- */
/* kernels                                                                 */
/* ---------------------------------------------------------------------- */

struct IbpEncArgs {
	IbpDevCodec cd;
	const uint8_t *rows;
	uint64_t nrows;
	uint64_t *sizes;         /* sizes pass: nrows + 1 entries (last = 0) */
	uint8_t *flags;          /* sizes pass: written; write pass: read */
	uint8_t *clusters;       /* may be NULL */
	const uint64_t *offsets; /* write pass */
	uint8_t *dst;
	uint64_t dst_cap;
	uint32_t *gstage;        /* write pass: per-group stage in global memory, or NULL */
	uint64_t stage_words;    /* 32-bit words of one group's stage (multiple of 4) */
};


/* ORs the nbits (0..64) low bits of v into the LSB-first stream w of nw
 * words at bit pos. Positions come from row data: bits past word nw - 1
 * (rows or arrays that disagree with the sizes pass) are dropped, never
 * written past the group's stage; the caller then sees the size mismatch. */
__device__ __forceinline__ void ibp_put_bits(uint32_t *w, uint64_t nw, uint64_t pos, uint64_t v, unsigned nbits)
{
	if (nbits == 0)
		return;
	v &= ibp_d_lowmask(nbits);
	if (!v)
		return;
	const uint64_t wi = pos >> 5;
	const unsigned sh = (unsigned)(pos & 31);
	const uint64_t lo = v << sh;
	const uint64_t hi = sh ? v >> (64 - sh) : 0;
	const uint32_t w0 = (uint32_t)lo, w1 = (uint32_t)(lo >> 32), w2 = (uint32_t)hi;
	if (w0 && wi < nw)
		atomicOr(w + wi, w0);
	if (w1 && wi + 1 < nw)
		atomicOr(w + wi + 1, w1);
	if (w2 && wi + 2 < nw)
		atomicOr(w + wi + 2, w2);
}

template <unsigned C, int NW>
__global__ void __launch_bounds__(256) ibp_enc_sizes_kernel(const IbpEncArgs a)
{
	typedef typename IbpWord<C>::T T;
	typedef IbpGroup<NW> G;
	__shared__ uint64_t red[NW];
	const IbpDevCodec &cd = a.cd;
	const unsigned gpb = NW == 1 ? blockDim.x / 32 : 1;
	const unsigned gib = NW == 1 ? threadIdx.x / 32 : 0;
	const unsigned t = G::tid();
	const uint64_t ngroups = (uint64_t)gridDim.x * gpb, D = cd.D, nt1 = cd.ntiles + 1;
	for (uint64_t i = (uint64_t)blockIdx.x * gpb + gib; i < a.nrows; i += ngroups) {
		const uint8_t *row = a.rows + i * cd.R;
		uint64_t best = ~0ull;
		unsigned bc = 0, bmode = IBP_ROW_RAW;
		for (unsigned c = 0; c < cd.K; c++) {
			const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)c * D;
			const T *b = reinterpret_cast<const T *>(cd.b) + (uint64_t)c * D;
			const T *xh = reinterpret_cast<const T *>(cd.x) + (uint64_t)c * D;
			uint64_t ln = 0, le = 0;
			for (uint64_t j = t; j < D; j += G::SIZE) {
				const uint64_t xm = ibp_d_load_chunk<C>(row, j, D, cd.last_bytes) & (uint64_t)m[j];
				const uint64_t bj = (uint64_t)b[j];
				if (xm != bj) {
					/* an exception costs e_j bits; with its Xval enabled a hit
					 * bit, then e_j bits only on a miss (ibp_chunk_cost) */
					const uint64_t xj = (uint64_t)xh[j];
					ln++;
					le += xm == xj ? 1u : ibp_d_popc((uint64_t)m[j]) + (xj != bj ? 1u : 0u);
				}
			}
			const uint64_t n = G::sum(ln, red);
			const uint64_t E = G::sum(le, red);
			unsigned mode;
			uint64_t size;
			ibp_row_mode(cd.R, cd.bitmap_bytes, cd.L, cd.tso[(uint64_t)c * nt1 + cd.ntiles], n, E, &mode, &size);
			if (size < best) {
				best = size;
				bc = c;
				bmode = mode;
			}
		}
		if (t == 0) {
			a.sizes[i] = best;
			a.flags[i] = (uint8_t)bmode;
			if (a.clusters)
				a.clusters[i] = (uint8_t)bc;
		}
	}
	if (blockIdx.x == 0 && threadIdx.x == 0)
		a.sizes[a.nrows] = 0;
}

template <unsigned C, int NW>
__global__ void __launch_bounds__(256) ibp_enc_write_kernel(const IbpEncArgs a)
{
	typedef typename IbpWord<C>::T T;
	typedef IbpGroup<NW> G;
	extern __shared__ __align__(16) uint8_t ibp_esmem[];
	__shared__ uint64_t red[NW], tot[4 * NW];
	const IbpDevCodec &cd = a.cd;
	const unsigned gpb = NW == 1 ? blockDim.x / 32 : 1;
	const unsigned gib = NW == 1 ? threadIdx.x / 32 : 0;
	const unsigned t = G::tid(), lane = ibp_lane(), warp = G::warp();
	const unsigned W = 8 * C, L = cd.L;
	const uint64_t ngroups = (uint64_t)gridDim.x * gpb, D = cd.D, nt = cd.ntiles;
	const uint64_t full = ibp_d_lowmask(W);
	const uint64_t gslot = (uint64_t)blockIdx.x * gpb + gib;
	uint32_t *stage = a.gstage ? a.gstage + gslot * a.stage_words
				   : reinterpret_cast<uint32_t *>(ibp_esmem) + (uint64_t)gib * a.stage_words;
	for (uint64_t i = gslot; i < a.nrows; i += ngroups) {
		const uint64_t off = a.offsets[i], end = a.offsets[i + 1];
		const unsigned fl = a.flags[i], mode = fl & IBP_ROW_MODE_MASK;
		const unsigned cl = a.clusters ? a.clusters[i] : 0u;
		if (end < off || end > a.dst_cap)
			continue; /* no extent inside dst: never write outside it (documented) */
		const uint64_t len = end - off;
		const uint8_t *row = a.rows + i * cd.R;
		uint8_t *out = a.dst + off;
		const uint64_t nw = (len + 3) / 4 + 4; /* the row, plus reader slack */
		if (cl >= cd.K || (fl & ~IBP_ROW_MODE_MASK) || (mode == IBP_ROW_RAW && len != cd.R) ||
		    (mode != IBP_ROW_RAW && nw > a.stage_words)) {
			/* not what the sizes pass wrote: the extent gets zeros, not stale bytes */
			ibp_zero_out<NW>(out, len);
			continue;
		}
		if (mode == IBP_ROW_RAW) {
			IbpGlobalReader rd;
			rd.p = row;
			rd.len = cd.R;
			ibp_copy_out<NW>(rd, out, cd.R);
			continue;
		}
		const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)cl * D;
		const T *b = reinterpret_cast<const T *>(cd.b) + (uint64_t)cl * D;
		const T *xh = reinterpret_cast<const T *>(cd.x) + (uint64_t)cl * D;
		const uint64_t *tso = cd.tso + (uint64_t)cl * (nt + 1);
		uint64_t n = 0;
		if (mode == IBP_ROW_LIST) {
			uint64_t ln = 0;
			for (uint64_t j = t; j < D; j += G::SIZE)
				ln += (ibp_d_load_chunk<C>(row, j, D, cd.last_bytes) & (uint64_t)m[j]) !=
				      (uint64_t)b[j];
			n = G::sum(ln, red);
		}
		const uint64_t hdr = mode == IBP_ROW_BITMAP ? cd.bitmap_bytes
				     : mode == IBP_ROW_LIST ? ((uint64_t)L * (n + 1) + 7) / 8
							    : 0;
		for (uint64_t w = t; w < nw; w += G::SIZE)
			stage[w] = 0;
		G::sync();
		if (mode == IBP_ROW_LIST && t == 0 && n)
			ibp_put_bits(stage, nw, 0, n - 1, L);
		const uint64_t body0 = 8 * hdr, exc0 = body0 + tso[nt];
		uint64_t ce = 0, cq = 0; /* exception bits / exceptions of earlier rounds */
		for (uint64_t r = 0; r * NW < nt; r++) {
			const uint64_t tile = r * NW + warp;
			const uint64_t j = tile * 32 + lane;
			const bool active = tile < nt && j < D;
			const uint64_t x = active ? ibp_d_load_chunk<C>(row, j, D, cd.last_bytes) : 0;
			const uint64_t mj = active ? (uint64_t)m[j] : 0;
			const uint64_t bj = active ? (uint64_t)b[j] : 0, xj = active ? (uint64_t)xh[j] : 0;
			const bool exc = active && (x & mj) != bj;
			const bool en = exc && xj != bj;     /* Xval enabled: a hit bit first */
			const bool hit = en && (x & mj) == xj; /* then nothing, or e_j bits */
			const unsigned ew = ibp_d_popc(mj);
			const unsigned s = active ? W - ew : 0, q = exc ? 1u : 0u;
			const unsigned e = !exc ? 0u : hit ? 1u : ew + (en ? 1u : 0u);
			const unsigned s_in = ibp_warp_scan(s), e_in = ibp_warp_scan(e), q_in = ibp_warp_scan(q);
			const unsigned e_tot = __shfl_sync(IBP_FULL_MASK, e_in, 31);
			const unsigned q_tot = __shfl_sync(IBP_FULL_MASK, q_in, 31);
			uint64_t alle, allq;
			const uint64_t be = ce + G::prefix(e_tot, r, tot, &alle);
			const uint64_t bq = cq + G::prefix(q_tot, r, tot + 2 * NW, &allq);
			ce += alle;
			cq += allq;
			if (active)
				ibp_put_bits(stage, nw, body0 + tso[tile] + s_in - s, ibp_d_extract(x, ~mj & full), s);
			if (exc) {
				uint64_t p = exc0 + be + e_in - e;
				if (en)
					ibp_put_bits(stage, nw, p++, hit ? 1u : 0u, 1);
				if (!hit)
					ibp_put_bits(stage, nw, p, ibp_d_extract(x, mj), ew);
				if (mode == IBP_ROW_LIST)
					ibp_put_bits(stage, nw, (uint64_t)L * (bq + q_in), j, L);
			}
			if (mode == IBP_ROW_BITMAP) {
				const unsigned bal = __ballot_sync(IBP_FULL_MASK, exc);
				if (lane == 0 && bal)
					ibp_put_bits(stage, nw, 32 * tile, bal, 32);
			}
		}
		/* the extent must be what this row encodes to under its mode and
		 * cluster; else rows, flags or offsets disagree with the sizes pass
		 * (and bits may have been dropped): zeros, as above */
		const bool ok = hdr + (tso[nt] + ce + 7) / 8 == len && (mode == IBP_ROW_CLEAN) == (cq == 0);
		G::sync();
		if (ok) {
			IbpStageReader rd;
			rd.base = reinterpret_cast<const uint8_t *>(stage);
			rd.skew = 0;
			ibp_copy_out<NW>(rd, out, len);
		} else {
			ibp_zero_out<NW>(out, len);
		}
		G::sync(); /* the stage is zeroed again for the next row */
	}
}

/* ---------------------------------------------------------------------- */
/* host                                                                    */
/* ---------------------------------------------------------------------- */

typedef void (*IbpEncFn)(const IbpEncArgs);

template <int NW>
static IbpEncFn ibp_enc_fn(unsigned C, int write)
{
	switch (C) {
	case 1: return write ? ibp_enc_write_kernel<1, NW> : ibp_enc_sizes_kernel<1, NW>;
	case 2: return write ? ibp_enc_write_kernel<2, NW> : ibp_enc_sizes_kernel<2, NW>;
	case 4: return write ? ibp_enc_write_kernel<4, NW> : ibp_enc_sizes_kernel<4, NW>;
	default: return write ? ibp_enc_write_kernel<8, NW> : ibp_enc_sizes_kernel<8, NW>;
	}
}

#define IBP_ENC_WARP_MAX_ROW 4096u
#define IBP_ENC_BLOCK_WARPS 8

/* Launch shapes and workspace layout for encoding nrows rows with codec d. */
struct IbpEncPlan {
	IbpEncFn sizes_fn, write_fn;
	unsigned threads, gpb;
	uint64_t sizes_blocks, write_blocks;
	uint64_t stage_words; /* per group */
	size_t smem;          /* write kernel's dynamic shared memory */
	int global_stage;
	uint64_t ws_sizes, ws_cub, ws_stage, ws_total; /* byte offsets / sizes, 256-aligned */
	size_t cub_bytes;
};

static ibp_status_t ibp_enc_plan(const ibp_cuda_codec_t *c, uint64_t nrows, IbpEncPlan *p)
{
	const IbpDevCodec &d = c->d;
	int nsm = 0, optin = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, c->device),
	       "cudaDeviceGetAttribute");
	IBP_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device),
	       "cudaDeviceGetAttribute");
	const int warp = d.R <= IBP_ENC_WARP_MAX_ROW;
	p->gpb = warp ? 8u : 1u;
	p->threads = warp ? 256u : 32u * IBP_ENC_BLOCK_WARPS;
	p->sizes_fn = warp ? ibp_enc_fn<1>(d.C, 0) : ibp_enc_fn<IBP_ENC_BLOCK_WARPS>(d.C, 0);
	p->write_fn = warp ? ibp_enc_fn<1>(d.C, 1) : ibp_enc_fn<IBP_ENC_BLOCK_WARPS>(d.C, 1);
	p->stage_words = ibp_round_up((d.R + 3) / 4 + 4, 4);
	cudaFuncAttributes fa;
	IBP_CU(cudaFuncGetAttributes(&fa, (const void *)p->write_fn), "cudaFuncGetAttributes");
	const uint64_t avail = (uint64_t)optin - fa.sharedSizeBytes;
	const uint64_t want = (uint64_t)p->gpb * p->stage_words * 4;
	p->global_stage = want > avail;
	p->smem = p->global_stage ? 0 : (size_t)want;
	IBP_CU(cudaFuncSetAttribute((const void *)p->write_fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
				    (int)avail),
	       "cudaFuncSetAttribute");
	int per_sm = 0;
	IBP_CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)p->write_fn,
							     (int)p->threads, p->smem),
	       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
	if (per_sm < 1)
		per_sm = 1;
	const uint64_t need = (nrows + p->gpb - 1) / p->gpb;
	uint64_t cap = (uint64_t)per_sm * (uint64_t)nsm;
	p->write_blocks = need < cap ? need : cap;
	cap = (uint64_t)nsm * (2048u / p->threads);
	p->sizes_blocks = need < cap ? need : cap;
	if (p->write_blocks == 0)
		p->write_blocks = 1;
	if (p->sizes_blocks == 0)
		p->sizes_blocks = 1;
	p->cub_bytes = 0;
	IBP_CU(cub::DeviceScan::ExclusiveSum(nullptr, p->cub_bytes, (const uint64_t *)nullptr,
					     (uint64_t *)nullptr, (uint64_t)(nrows + 1)),
	       "cub::DeviceScan::ExclusiveSum (size query)");
	p->ws_sizes = 0;
	p->ws_cub = ibp_round_up((nrows + 1) * 8, 256);
	p->ws_stage = p->ws_cub + ibp_round_up(p->cub_bytes ? p->cub_bytes : 1, 256);
	p->ws_total = p->ws_stage +
		      (p->global_stage ? ibp_round_up(p->write_blocks * p->gpb * p->stage_words * 4, 256) : 0);
	return IBP_OK;
}

static ibp_status_t ibp_enc_check(const ibp_cuda_codec_t *c, uint64_t nrows, const char *what)
{
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL codec", what);
	if (nrows >= UINT64_MAX / 8 - 1 || (nrows && c->d.R > UINT64_MAX / nrows))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu rows is too many", what,
				(unsigned long long)nrows);
	return ibp_cu_on_device(c->device, what);
}

ibp_status_t ibp_encode_workspace_cuda(const ibp_cuda_codec_t *c, uint64_t nrows, uint64_t *bytes)
{
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_workspace_cuda: NULL bytes");
	IBP_TRY(ibp_enc_check(c, nrows, "encode_workspace_cuda"));
	IbpEncPlan p;
	IBP_TRY(ibp_enc_plan(c, nrows, &p));
	*bytes = p.ws_total;
	return IBP_OK;
}

ibp_status_t ibp_encode_sizes_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   uint64_t *offsets, uint8_t *flags, uint8_t *clusters,
				   void *workspace, uint64_t workspace_bytes, void *stream)
{
	IBP_TRY(ibp_enc_check(c, nrows, "encode_sizes_cuda"));
	if (!offsets || (nrows && (!rows || !flags)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_sizes_cuda: NULL argument");
	if (c->d.K > 1 && !clusters)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_sizes_cuda: %u clusters need a clusters array",
				c->d.K);
	IbpEncPlan p;
	IBP_TRY(ibp_enc_plan(c, nrows, &p));
	if (!workspace || workspace_bytes < p.ws_total)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "encode_sizes_cuda: workspace of %llu bytes, needs %llu",
				(unsigned long long)workspace_bytes, (unsigned long long)p.ws_total);
	if ((uintptr_t)workspace % 256)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_sizes_cuda: workspace not 256-byte aligned");
	cudaStream_t cs = (cudaStream_t)stream;
	uint8_t *ws = (uint8_t *)workspace;
	IbpEncArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = c->d;
	a.rows = (const uint8_t *)rows;
	a.nrows = nrows;
	a.sizes = (uint64_t *)(ws + p.ws_sizes);
	a.flags = flags;
	a.clusters = clusters;
	IBP_CUDA_LAUNCH("encode sizes kernel launch", p.sizes_fn, (unsigned)p.sizes_blocks, p.threads, 0,
			cs, a);
	size_t cb = p.cub_bytes;
	IBP_CU(cub::DeviceScan::ExclusiveSum(ws + p.ws_cub, cb, (const uint64_t *)a.sizes, offsets,
					     (uint64_t)(nrows + 1), cs),
	       "cub::DeviceScan::ExclusiveSum");
	return IBP_OK;
}

ibp_status_t ibp_encode_write_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   const uint64_t *offsets, const uint8_t *flags,
				   const uint8_t *clusters, void *dst, uint64_t dst_cap,
				   void *workspace, uint64_t workspace_bytes, void *stream)
{
	IBP_TRY(ibp_enc_check(c, nrows, "encode_write_cuda"));
	if (nrows == 0)
		return IBP_OK;
	if (!offsets || !rows || !flags || (!dst && dst_cap))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_write_cuda: NULL argument");
	if (c->d.K > 1 && !clusters)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_write_cuda: %u clusters need a clusters array",
				c->d.K);
	IbpEncPlan p;
	IBP_TRY(ibp_enc_plan(c, nrows, &p));
	if (p.global_stage && (!workspace || workspace_bytes < p.ws_total))
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "encode_write_cuda: workspace of %llu bytes, needs %llu",
				(unsigned long long)workspace_bytes, (unsigned long long)p.ws_total);
	if (p.global_stage && (uintptr_t)workspace % 256)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "encode_write_cuda: workspace not 256-byte aligned");
	IbpEncArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = c->d;
	a.rows = (const uint8_t *)rows;
	a.nrows = nrows;
	a.flags = (uint8_t *)flags;
	a.clusters = c->d.K > 1 ? (uint8_t *)clusters : NULL;
	a.offsets = offsets;
	a.dst = (uint8_t *)dst;
	a.dst_cap = dst_cap;
	a.gstage = p.global_stage ? (uint32_t *)((uint8_t *)workspace + p.ws_stage) : NULL;
	a.stage_words = p.stage_words;
	IBP_CUDA_LAUNCH("encode write kernel launch", p.write_fn, (unsigned)p.write_blocks, p.threads,
			p.smem, (cudaStream_t)stream, a);
	return IBP_OK;
}

ibp_status_t ibp_encode_batch_cuda(const ibp_cuda_codec_t *c, const void *rows, uint64_t nrows,
				   void *dst, uint64_t dst_cap, uint64_t *offsets, uint8_t *flags,
				   uint8_t *clusters, void *workspace, uint64_t workspace_bytes,
				   void *stream)
{
	IBP_TRY(ibp_enc_check(c, nrows, "encode_batch_cuda"));
	if (dst_cap < c->d.R * nrows)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL,
				"encode_batch_cuda: dst_cap %llu below ibp_batch_bound %llu (use "
				"ibp_encode_sizes_cuda + ibp_encode_write_cuda to size dst exactly)",
				(unsigned long long)dst_cap, (unsigned long long)(c->d.R * nrows));
	IBP_TRY(ibp_encode_sizes_cuda(c, rows, nrows, offsets, flags, clusters, workspace,
				      workspace_bytes, stream));
	return ibp_encode_write_cuda(c, rows, nrows, offsets, flags, clusters, dst, dst_cap, workspace,
				     workspace_bytes, stream);
}
