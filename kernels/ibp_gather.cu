/* ibp_gather.cu - gather + decode of IBP rows on the GPU (the twin of
 * ibp_decode_row over picked rows), the device store, and the plain
 * (uncompressed) gather.
 *
 * Pipeline per group (a warp, or a block for large rows), one request at a
 * time in a grid-stride loop over a ring of nbuf shared buffers: while
 * request k is decoded from its buffer, the compressed bytes of the next
 * nbuf - 1 requests of the group (k + ngroups, k + 2 ngroups, ...) are
 * already moving into the others (cp.async of the 16-byte pieces covering
 * each row, in whole aligned sectors except one at each end of the row;
 * ibp_issue_fetch). Rows too long for the buffers are decoded straight from the
 * payload with bounded byte reads (IBP_CUDA_KERNEL_DIRECT does that for
 * every row). Validation mirrors the CPU decoder, so a corrupt row gets
 * IBP_ERR_CORRUPT and a zero-filled output, never an out-of-bounds read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp_device.cuh"
#include "ibp_store.cuh"
#include "cuda/ibp_gather_staged.h"

/* ---------------------------------------------------------------------- */
/* kernels                                                                 */
/* ---------------------------------------------------------------------- */


/* One request: where its row is and what is already known about it. Kept
 * in shared memory (a slot per buffer) while its row is in flight, so that
 * rows in flight cost no registers. */
struct IbpJob {
	uint64_t start, len;
	int64_t orow;
	int32_t pre; /* IBP_OK, or the status decided without reading the row */
	unsigned flags, cl;
	int staged;
};

__device__ __forceinline__ IbpJob ibp_empty_job(void)
{
	IbpJob jb;
	jb.start = 0;
	jb.len = 0;
	jb.orow = -1;
	jb.pre = IBP_OK;
	jb.flags = IBP_ROW_RAW;
	jb.cl = 0;
	jb.staged = 0;
	return jb;
}

__device__ __forceinline__ IbpJob ibp_load_job(const IbpGatherArgs &a, uint64_t k)
{
	IbpJob jb = ibp_empty_job();
	jb.orow = a.out_rows ? a.out_rows[k] : (int64_t)k;
	const int64_t id = a.ids ? a.ids[k] : (int64_t)k; /* NULL: identity (staged) */
	if (jb.orow < 0) {
		jb.pre = IBP_ERR_INVALID_ARG;
		return jb;
	}
	if (id < 0 || (uint64_t)id >= a.nrows) {
		jb.pre = IBP_ERR_OUT_OF_RANGE;
		return jb;
	}
	const uint64_t i = (uint64_t)id;
	if (a.offsets) {
		/* validated at store creation; checked again because it is cheap */
		uint64_t s = a.offsets[i], e = a.offsets[i + 1];
		if (e < s || e > a.payload_bytes || e - s > a.cd.max_extent) {
			jb.pre = IBP_ERR_CORRUPT;
			return jb;
		}
		jb.start = s;
		jb.len = e - s;
	} else {
		jb.start = i * a.stride;
		jb.len = a.lens32 ? a.lens32[i] : a.lens ? a.lens[i] : a.cd.R;
		if (jb.len > a.stride) {
			if (a.lens32) { /* a stage row longer than its room */
				jb.pre = IBP_ERR_CORRUPT;
				return jb;
			}
			jb.len = a.stride;
		}
	}
	if (a.meta32) {
		jb.flags = a.meta32[i] & 0xFFu;
		jb.cl = (a.meta32[i] >> 8) & 0xFFu;
	} else {
		if (a.flags)
			jb.flags = a.flags[i];
		if (a.clusters)
			jb.cl = a.clusters[i];
	}
	jb.staged = a.stage_bytes && jb.len + 32 <= a.stage_bytes;
	return jb;
}

/* Decodes one request's row from reader rd into orow. */
template <unsigned C, int NW, class Rd>
__device__ __forceinline__ int32_t ibp_process(const IbpGatherArgs &a, const IbpJob &jb, const Rd &rd,
					       uint8_t *orow, uint64_t *red, uint64_t *tot)
{
	if (jb.flags & ~IBP_ROW_MODE_MASK)
		return IBP_ERR_CORRUPT;
	if (jb.cl >= a.cd.K)
		return IBP_ERR_CORRUPT;
	const unsigned mode = jb.flags & IBP_ROW_MODE_MASK;
	if (mode == IBP_ROW_RAW) {
		if (jb.len < a.cd.R || (a.exact && jb.len != a.cd.R))
			return IBP_ERR_CORRUPT;
		ibp_copy_out<NW>(rd, orow, a.cd.R);
		return IBP_OK;
	}
	IbpRowHdr h;
	int st = ibp_validate_row<C, NW>(a.cd, rd, jb.len, mode, jb.cl, h, red);
	if (st != IBP_OK)
		return st;
	if (!h.walk) {
		if (a.exact && h.extent != jb.len)
			return IBP_ERR_CORRUPT;
		if (mode == IBP_ROW_CLEAN)
			ibp_decode_clean<C, NW>(a.cd, rd, jb.cl, h, orow);
		else
			ibp_decode_chunks<C, NW>(a.cd, rd, mode, jb.cl, h, orow, tot);
		return IBP_OK;
	}
	/* Xvals: the static part (every chunk as matched) in parallel, then
	 * warp 0 walks the exceptions and patches their chunks */
	ibp_decode_clean<C, NW>(a.cd, rd, jb.cl, h, orow);
	IbpGroup<NW>::sync();
	uint64_t end = 0;
	if (NW == 1) {
		st = ibp_walk_exc<C>(a.cd, rd, jb.len, mode, jb.cl, h, orow, &end);
		__syncwarp(); /* the walk's last patches land before a zero-fill */
	} else {
		if (IbpGroup<NW>::warp() == 0) {
			st = ibp_walk_exc<C>(a.cd, rd, jb.len, mode, jb.cl, h, orow, &end);
			if (ibp_lane() == 0) {
				red[0] = (uint64_t)st;
				red[1] = end;
			}
		}
		__syncthreads(); /* red's next writer (IbpGroup::sum) syncs first */
		st = (int)red[0];
		end = red[1];
	}
	if (st != IBP_OK)
		return st;
	if (a.exact && h.hdr + (end + 7) / 8 != jb.len)
		return IBP_ERR_CORRUPT;
	return IBP_OK;
}

/* Loads request k (nothing when k >= n) into job slot js and starts the
 * fetch of its row into buf (one cp.async group, committed by the caller). */
template <int NW>
__device__ __forceinline__ void ibp_start_job(const IbpGatherArgs &a, uint64_t k, uint8_t *buf, IbpJob *js,
					      unsigned t)
{
	if (k >= a.n)
		return;
	const IbpJob jb = ibp_load_job(a, k);
	if (jb.pre == IBP_OK && jb.staged)
		ibp_issue_fetch<NW>(buf, a.payload + jb.start, jb.len, a.payload, a.payload + a.payload_bytes, t);
	if (t == 0)
		*js = jb;
}

/* Shared memory per block, in this order: per group nbuf stage buffers of
 * stage_bytes, per group nbuf job slots, then (NW > 1) the group scratch. */
static inline size_t ibp_gather_smem(unsigned gpb, int nw, uint64_t stage, unsigned nbuf)
{
	return (size_t)gpb * nbuf * (stage + sizeof(IbpJob)) + (nw > 1 ? 8ull * IbpGroup<8>::SCRATCH : 0);
}

/* Two blocks of 256 threads per SM at least: at most 128 registers, so
 * that 16 warps per SM keep nbuf - 1 rows each in flight (docs/GPU.md,
 * "Rows in flight"; tests/cuda/kernel_resources.sh). */
template <unsigned C, int NW>
__global__ void __launch_bounds__(256, 2) ibp_gather_kernel(const IbpGatherArgs a)
{
	extern __shared__ __align__(16) uint8_t ibp_smem[];
	typedef IbpGroup<NW> G;
	const unsigned gpb = NW == 1 ? blockDim.x / 32 : 1;
	const unsigned gib = NW == 1 ? threadIdx.x / 32 : 0;
	const unsigned t = G::tid();
	const uint64_t SB = a.stage_bytes;
	const unsigned NB = a.nbuf;
	uint8_t *const buf0 = ibp_smem + (uint64_t)gib * NB * SB; /* buffer b at buf0 + b * SB */
	IbpJob *const jobs = reinterpret_cast<IbpJob *>(ibp_smem + (uint64_t)gpb * NB * SB) + gib * NB;
	uint64_t *red = reinterpret_cast<uint64_t *>(ibp_smem + (uint64_t)gpb * NB * (SB + sizeof(IbpJob)));
	uint64_t *tot = red + NW;
	const uint64_t ngroups = (uint64_t)gridDim.x * gpb;
	const uint64_t k0 = (uint64_t)blockIdx.x * gpb + gib;

	/* the first nbuf - 1 requests of the group start moving */
	for (unsigned q = 0; q + 1 < NB; q++) {
		ibp_start_job<NW>(a, k0 + q * ngroups, buf0 + q * SB, jobs + q, t);
		ibp_cp_async_commit();
	}
	unsigned bi = 0;
	for (uint64_t k = k0; k < a.n; k += ngroups) {
		/* request k + (nbuf - 1) ngroups into the buffer freed last round */
		const unsigned fi = bi == 0 ? NB - 1 : bi - 1;
		ibp_start_job<NW>(a, k + (NB - 1) * ngroups, buf0 + fi * SB, jobs + fi, t);
		ibp_cp_async_commit();
		if (NB == 3)
			ibp_cp_async_wait<2>(); /* this thread's pieces of request k are in */
		else
			ibp_cp_async_wait<1>();
		G::sync(); /* ... and everyone's, and its job slot */

		const IbpJob cur = jobs[bi];
		int32_t st = cur.pre;
		uint8_t *orow = cur.orow >= 0 ? a.out + (uint64_t)cur.orow * a.cd.R : nullptr;
		if (st == IBP_OK) {
			if (cur.staged) {
				IbpStageReader rd;
				rd.base = buf0 + bi * SB;
				rd.skew = (unsigned)((uintptr_t)(a.payload + cur.start) & 15);
				st = ibp_process<C, NW>(a, cur, rd, orow, red, tot);
			} else {
				IbpGlobalReader rd;
				rd.p = a.payload + cur.start;
				rd.len = cur.len;
				st = ibp_process<C, NW>(a, cur, rd, orow, red, tot);
			}
		}
		if (st != IBP_OK && orow)
			ibp_zero_out<NW>(orow, a.cd.R);
		if (t == 0) {
			if (a.status)
				a.status[k] = st;
			if (st != IBP_OK && a.nerr)
				atomicAdd(a.nerr, 1ull);
		}
		G::sync(); /* buffer bi and its job slot are free for the fetch next round */
		bi = bi + 1 == NB ? 0 : bi + 1;
	}
	ibp_cp_async_wait<0>();
}

/* Finds each inplace row's own length (its extent; row_bytes when it does
 * not decode), with the gather's validator. One warp per row. */
template <unsigned C>
__global__ void __launch_bounds__(256)
	ibp_extent_kernel(const IbpDevCodec cd, const uint8_t *payload, uint64_t stride,
			  const uint8_t *flags, const uint8_t *clusters, uint64_t nrows, uint64_t *lens)
{
	const uint64_t wpb = blockDim.x / 32;
	const uint64_t nwarps = (uint64_t)gridDim.x * wpb;
	for (uint64_t i = (uint64_t)blockIdx.x * wpb + threadIdx.x / 32; i < nrows; i += nwarps) {
		uint64_t ext = cd.R;
		const unsigned fl = flags[i], cl = clusters ? clusters[i] : 0u;
		const unsigned mode = fl & IBP_ROW_MODE_MASK;
		if (!(fl & ~IBP_ROW_MODE_MASK) && cl < cd.K && mode != IBP_ROW_RAW) {
			IbpGlobalReader rd;
			rd.p = payload + i * stride;
			rd.len = cd.R;
			IbpRowHdr h;
			uint64_t end = 0;
			if (ibp_validate_row<C, 1>(cd, rd, cd.R, mode, cl, h, nullptr) == IBP_OK) {
				if (!h.walk)
					ext = h.extent;
				else if (ibp_walk_exc<C>(cd, rd, cd.R, mode, cl, h, nullptr, &end) == IBP_OK)
					ext = h.hdr + (end + 7) / 8;
			}
		}
		if (ibp_lane() == 0)
			lens[i] = ext;
	}
}

/* Moves the store's error count to *out and resets it in one atomic step:
 * errors that gathers count meanwhile land before or after, never lost. */
__global__ void ibp_take_errors_kernel(unsigned long long *nerr, unsigned long long *out)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*out = atomicExch(nerr, 0ull);
}

/* ---------------------------------------------------------------------- */
/* host: launch configuration                                              */
/* ---------------------------------------------------------------------- */

static IbpGatherFn ibp_gather_fn(unsigned C, int nw)
{
	if (nw == 1) {
		switch (C) {
		case 1: return ibp_gather_kernel<1, 1>;
		case 2: return ibp_gather_kernel<2, 1>;
		case 4: return ibp_gather_kernel<4, 1>;
		default: return ibp_gather_kernel<8, 1>;
		}
	}
	switch (C) {
	case 1: return ibp_gather_kernel<1, 8>;
	case 2: return ibp_gather_kernel<2, 8>;
	case 4: return ibp_gather_kernel<4, 8>;
	default: return ibp_gather_kernel<8, 8>;
	}
}

#define IBP_WARP_MAX_ROW 4096u /* AUTO: warp per row up to this row size */
#define IBP_BLOCK_WARPS 8
#define IBP_WARP_GROUPS 8      /* warp kernel: at most this many warps (groups) per block */
#define IBP_GATHER_NBUF 3      /* buffers per group: 2 rows in flight while one is decoded */


/* Picks kernel, staging size and grid cap for rows of R bytes whose
 * encodings are at most E bytes (a packed store's longest row; R when
 * unknown): sparse rows of many KiB that encode to a few bytes run a warp
 * each, with small stages and many rows in flight. Raises the kernel's
 * dynamic shared memory limit to the device's maximum, so that stores with
 * different row sizes never undercut each other. */
static ibp_status_t ibp_gather_config(ibp_cuda_kernel_t kind, uint64_t R, uint64_t E, unsigned C, int dev,
				      IbpLaunch *L)
{
	int nsm = 0, optin = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
	IBP_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
	       "cudaDeviceGetAttribute");
	if (E > R)
		E = R; /* no row is longer than raw */
	if (kind == IBP_CUDA_KERNEL_AUTO)
		kind = E <= IBP_WARP_MAX_ROW ? IBP_CUDA_KERNEL_WARP : IBP_CUDA_KERNEL_BLOCK;
	if (kind == IBP_CUDA_KERNEL_WARP && R > (1ull << 30))
		kind = IBP_CUDA_KERNEL_BLOCK; /* the warp decode counts a row's chunks in 32 bits */
	const uint64_t want = ibp_round_up(E + 32, 16); /* the longest row plus reader slack */
	const uint64_t J = sizeof(IbpJob);
	int nw;
	/* nbuf buffers when a row of R bytes fits them, else two (larger rows stay staged) */
	if (kind == IBP_CUDA_KERNEL_WARP) {
		nw = 1;
		L->nbuf = (uint64_t)optin >= IBP_GATHER_NBUF * (want + J) ? IBP_GATHER_NBUF : 2u;
		uint64_t cap = ((uint64_t)optin / L->nbuf - J) & ~15ull;
		L->stage = (uint32_t)(want < cap ? want : cap);
		uint64_t g = (uint64_t)optin / ((uint64_t)L->nbuf * (L->stage + J));
		L->gpb = (unsigned)(g < 1 ? 1 : g > IBP_WARP_GROUPS ? IBP_WARP_GROUPS : g);
	} else {
		nw = IBP_BLOCK_WARPS;
		const uint64_t scratch = 8ull * IbpGroup<IBP_BLOCK_WARPS>::SCRATCH;
		L->nbuf = (uint64_t)optin >= IBP_GATHER_NBUF * (want + J) + scratch ? IBP_GATHER_NBUF : 2u;
		uint64_t cap = (((uint64_t)optin - scratch) / L->nbuf - J) & ~15ull;
		L->stage = kind == IBP_CUDA_KERNEL_DIRECT ? 0u : (uint32_t)(want < cap ? want : cap);
		L->gpb = 1;
	}
	L->smem = ibp_gather_smem(L->gpb, nw, L->stage, L->nbuf);
	L->threads = nw == 1 ? 32u * L->gpb : 32u * IBP_BLOCK_WARPS;
	L->fn = ibp_gather_fn(C, nw);
	cudaFuncAttributes fa;
	IBP_CU(cudaFuncGetAttributes(&fa, (const void *)L->fn), "cudaFuncGetAttributes");
	IBP_CU(cudaFuncSetAttribute((const void *)L->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
				    optin - (int)fa.sharedSizeBytes),
	       "cudaFuncSetAttribute");
	int per_sm = 0;
	IBP_CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)L->fn, (int)L->threads,
							     L->smem),
	       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
	if (per_sm < 1)
		return ibpi_fail(IBP_ERR_CUDA, "gather: no block of %u threads with %zu bytes of shared "
				"memory fits on an SM", L->threads, L->smem);
	L->max_blocks = (uint64_t)per_sm * (uint64_t)nsm;
	return IBP_OK;
}

static ibp_status_t ibp_gather_launch(const IbpLaunch *L, const IbpGatherArgs *a, cudaStream_t s)
{
	uint64_t blocks = (a->n + L->gpb - 1) / L->gpb;
	if (blocks > L->max_blocks)
		blocks = L->max_blocks;
	IBP_CUDA_LAUNCH("gather kernel launch", L->fn, (unsigned)blocks, L->threads, L->smem, s, *a);
	return IBP_OK;
}

/* ---------------------------------------------------------------------- */
/* host: the device store                                                  */
/* ---------------------------------------------------------------------- */


/* Device address of mapped host memory [p, p + n), checking both ends. */
static ibp_status_t ibp_mapped_ptr(const void *p, uint64_t n, const uint8_t **dev)
{
	void *d0 = NULL, *d1 = NULL;
	ibp_status_t st = ibp_pinned_device_ptr(p, &d0);
	if (st == IBP_OK)
		st = ibp_pinned_device_ptr((const uint8_t *)p + n - 1, &d1);
	if (st != IBP_OK) {
		char msg[256]; /* ibpi_fail writes the buffer ibp_last_error reads */
		snprintf(msg, sizeof(msg), "%s", ibp_last_error());
		return ibpi_fail(st, "cuda store: payload: %s", msg);
	}
	if ((uint8_t *)d1 != (uint8_t *)d0 + n - 1)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: payload spans separately mapped ranges");
	*dev = (const uint8_t *)d0;
	return IBP_OK;
}

/* Device address of [p, p + n) when the kernels can read it from device
 * dev: device or managed memory of dev, or mapped pinned host memory
 * (checked at both ends). Pageable host memory is IBP_ERR_INVALID_ARG: a
 * kernel reading it would fault with an illegal address. */
static ibp_status_t ibp_device_accessible(const void *p, uint64_t n, int dev, const uint8_t **out,
					  const char *what)
{
	cudaPointerAttributes a0, a1;
	cudaError_t e = cudaPointerGetAttributes(&a0, p);
	if (e == cudaSuccess)
		e = cudaPointerGetAttributes(&a1, (const uint8_t *)p + n - 1);
	if (e != cudaSuccess)
		return ibp_cu_fail(e, what);
	const bool dev_ok = (a0.type == cudaMemoryTypeDevice || a0.type == cudaMemoryTypeManaged) &&
			    a0.device == dev && a1.type == a0.type && a1.device == dev;
	const bool host_ok = a0.type == cudaMemoryTypeHost && a1.type == cudaMemoryTypeHost && a0.devicePointer &&
			     (const uint8_t *)a1.devicePointer == (const uint8_t *)a0.devicePointer + n - 1;
	if (dev_ok) {
		*out = (const uint8_t *)p;
		return IBP_OK;
	}
	if (host_ok) {
		*out = (const uint8_t *)a0.devicePointer;
		return IBP_OK;
	}
	return ibpi_fail(IBP_ERR_INVALID_ARG,
			"%s is not device-accessible from device %d (pageable host memory, or another device's)",
			what, dev);
}

static ibp_status_t ibp_place_payload(ibp_cuda_store_t *s, const ibp_cuda_store_desc_t *d,
				      cudaStream_t stream)
{
	const uint64_t n = d->payload_bytes;
	if (n == 0) {
		s->payload = NULL;
		return IBP_OK;
	}
	switch (d->payload_kind) {
	case IBP_CUDA_PAYLOAD_MAPPED:
		return ibp_mapped_ptr(d->payload, n, &s->payload);
	case IBP_CUDA_PAYLOAD_DEVICE: {
		cudaPointerAttributes at0, at1;
		cudaError_t e = cudaPointerGetAttributes(&at0, d->payload);
		if (e == cudaSuccess)
			e = cudaPointerGetAttributes(&at1, (const uint8_t *)d->payload + n - 1);
		if (e != cudaSuccess)
			return ibp_cu_fail(e, "cuda store: cudaPointerGetAttributes");
		if ((at0.type != cudaMemoryTypeDevice && at0.type != cudaMemoryTypeManaged) ||
		    at0.type != at1.type || at0.device != s->device || at1.device != s->device)
			return ibpi_fail(IBP_ERR_INVALID_ARG,
					"cuda store: payload is not device memory of device %d", s->device);
		s->payload = (const uint8_t *)d->payload;
		return IBP_OK;
	}
	case IBP_CUDA_PAYLOAD_COPY_PINNED: {
		void *p = NULL;
		IBP_TRY(ibp_pinned_alloc(n, 256, 0, &p));
		s->own_pinned = p;
		memcpy(p, d->payload, n);
		return ibp_mapped_ptr(p, n, &s->payload);
	}
	case IBP_CUDA_PAYLOAD_COPY_DEVICE: {
		void *p = NULL;
		IBP_CU(cudaMalloc(&p, n), "cuda store: cudaMalloc(payload)");
		s->own_dev = p;
		IBP_CU(cudaMemcpyAsync(p, d->payload, n, cudaMemcpyHostToDevice, stream),
		       "cuda store: copy payload");
		s->payload = (const uint8_t *)p;
		return IBP_OK;
	}
	case IBP_CUDA_PAYLOAD_REGISTER: {
		int ro = 0;
		IBP_CU(cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, s->device),
		       "cudaDeviceGetAttribute");
		unsigned fl = cudaHostRegisterMapped | cudaHostRegisterPortable |
			      (ro ? cudaHostRegisterReadOnly : 0u);
		cudaError_t e = cudaHostRegister((void *)d->payload, n, fl);
		if (e == cudaSuccess)
			s->registered = (void *)d->payload;
		else if (e == cudaErrorHostMemoryAlreadyRegistered)
			(void)cudaGetLastError(); /* someone else pinned it: use it, leave it */
		else
			return ibp_cu_fail(e, "cuda store: cudaHostRegister(payload)");
		return ibp_mapped_ptr(d->payload, n, &s->payload);
	}
	}
	return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: unknown payload kind");
}

typedef void (*IbpExtentFn)(const IbpDevCodec, const uint8_t *, uint64_t, const uint8_t *,
			    const uint8_t *, uint64_t, uint64_t *);

static ibp_status_t ibp_find_extents(ibp_cuda_store_t *s, cudaStream_t stream)
{
	const IbpDevCodec &cd = s->codec->d;
	IbpExtentFn fn;
	switch (cd.C) {
	case 1: fn = ibp_extent_kernel<1>; break;
	case 2: fn = ibp_extent_kernel<2>; break;
	case 4: fn = ibp_extent_kernel<4>; break;
	default: fn = ibp_extent_kernel<8>; break;
	}
	int nsm = 0;
	IBP_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, s->device),
	       "cudaDeviceGetAttribute");
	uint64_t blocks = (s->nrows + 7) / 8, cap = (uint64_t)nsm * 8;
	if (blocks > cap)
		blocks = cap;
	IBP_CUDA_LAUNCH("cuda store: extent kernel launch", fn, (unsigned)blocks, 256, 0, stream, cd,
			s->payload, s->R, s->flags, s->clusters, s->nrows, s->lens);
	return IBP_OK;
}

void ibp_cuda_store_free(ibp_cuda_store_t *s)
{
	if (!s)
		return;
	if (s->on_device) {
		/* cudaFree waits for the work that may use the memory; freeing the
		 * row arrays first makes the payload's release below wait for any
		 * gather still reading it, without a device-wide synchronise */
		(void)cudaFree(s->meta);
		(void)cudaFree(s->own_dev);
		if (s->registered)
			(void)cudaHostUnregister(s->registered);
		ibp_pinned_free(s->own_pinned);
		ibp_cuda_codec_free(s->codec);
		(void)cudaGetLastError();
	}
	ibpi_hstore_free(s->host);
	free(s->h_off);
	free(s->h_flags);
	free(s->h_cl);
	free(s);
}

ibp_status_t ibp_cuda_store_create(const ibp_cuda_store_desc_t *d, unsigned flags, void *stream,
				   ibp_cuda_store_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_create: NULL out");
	*out = NULL;
	IBP_TRY(ibpi_cuda_desc_check(d));
	int dev = 0;
	ibp_status_t st = ibp_cu_current(&dev);
	if (st == IBP_ERR_NO_DEVICE) {
		if (!(flags & IBP_CUDA_HOST_FALLBACK))
			return st;
		ibp_cuda_store_t *s = (ibp_cuda_store_t *)calloc(1, sizeof(*s));
		if (!s)
			return ibpi_fail(IBP_ERR_NOMEM, "cuda_store_create: out of memory");
		s->nrows = d->nrows;
		s->R = ibp_codec_row_bytes(d->codec);
		st = ibpi_hstore_create(d, &s->host);
		if (st != IBP_OK) {
			free(s);
			return st;
		}
		*out = s;
		return ibpi_fail(IBP_ERR_NO_DEVICE,
				"cuda_store_create: no usable CUDA device; the store was made in ordinary "
				"host memory and ibp_gather_cuda will decode on the CPU");
	}
	if (st != IBP_OK)
		return st;
	cudaStream_t cs = (cudaStream_t)stream;
	ibp_cuda_store_t *s = (ibp_cuda_store_t *)calloc(1, sizeof(*s));
	if (!s)
		return ibpi_fail(IBP_ERR_NOMEM, "cuda_store_create: out of memory");
	s->on_device = 1;
	s->device = dev;
	s->nrows = d->nrows;
	s->R = ibp_codec_row_bytes(d->codec);
	s->payload_bytes = d->payload_bytes;
	s->kernel = IBP_CUDA_KERNEL_AUTO;
	const uint64_t n = d->nrows;
	/* one allocation: offsets or lens, flags, clusters, error counter */
	const uint64_t o_bytes = ibp_round_up((d->offsets ? n + 1 : n) * 8 + 8, 256);
	const uint64_t f_bytes = ibp_round_up(n + 1, 256);
	const uint64_t c_bytes = d->clusters ? f_bytes : 0;
	uint8_t *meta = NULL;
	if (d->offsets) {
		s->h_off = (uint64_t *)malloc((n + 1) * 8);
		s->h_flags = (uint8_t *)malloc(n ? n : 1);
		s->h_cl = d->clusters ? (uint8_t *)malloc(n ? n : 1) : NULL;
		if (!s->h_off || !s->h_flags || (d->clusters && !s->h_cl)) {
			st = ibpi_fail(IBP_ERR_NOMEM, "cuda store: out of memory for the host copies of %llu rows",
				      (unsigned long long)n);
			goto fail;
		}
		memcpy(s->h_off, d->offsets, (n + 1) * 8);
		if (n)
			memcpy(s->h_flags, d->flags, n);
		if (n && d->clusters)
			memcpy(s->h_cl, d->clusters, n);
	}
	st = ibp_cuda_codec_create(d->codec, stream, &s->codec);
	if (st != IBP_OK)
		goto fail;
	st = ibp_place_payload(s, d, cs);
	if (st != IBP_OK)
		goto fail;
	{
		cudaError_t e = cudaMalloc((void **)&meta, o_bytes + f_bytes + c_bytes + 256);
		if (e != cudaSuccess) {
			st = ibp_cu_fail(e, "cuda store: cudaMalloc(row arrays)");
			goto fail;
		}
	}
	s->meta = meta;
	if (d->offsets)
		s->offsets = (uint64_t *)meta;
	else
		s->lens = (uint64_t *)meta;
	s->flags = meta + o_bytes;
	s->clusters = d->clusters ? meta + o_bytes + f_bytes : NULL;
	s->nerr = (unsigned long long *)(meta + o_bytes + f_bytes + c_bytes);
	{
		cudaError_t e = cudaSuccess;
		if (d->offsets)
			e = cudaMemcpyAsync(s->offsets, d->offsets, (n + 1) * 8, cudaMemcpyHostToDevice, cs);
		if (e == cudaSuccess && n)
			e = cudaMemcpyAsync(s->flags, d->flags, n, cudaMemcpyHostToDevice, cs);
		if (e == cudaSuccess && n && d->clusters)
			e = cudaMemcpyAsync(s->clusters, d->clusters, n, cudaMemcpyHostToDevice, cs);
		if (e == cudaSuccess)
			e = cudaMemsetAsync(s->nerr, 0, 8, cs);
		if (e != cudaSuccess) {
			st = ibp_cu_fail(e, "cuda store: copy row arrays");
			goto fail;
		}
	}
	if (!d->offsets && n) {
		st = ibp_find_extents(s, cs);
		if (st != IBP_OK)
			goto fail;
	}
	s->longest = s->R;
	if (d->offsets) {
		s->longest = 0;
		for (uint64_t i = 0; i < n; i++)
			if (d->offsets[i + 1] - d->offsets[i] > s->longest)
				s->longest = d->offsets[i + 1] - d->offsets[i];
	}
	st = ibp_gather_config(s->kernel, s->R, s->longest, s->codec->d.C, dev, &s->launch);
	if (st != IBP_OK)
		goto fail;
	{
		cudaError_t e = cudaStreamSynchronize(cs);
		if (e != cudaSuccess) {
			st = ibp_cu_fail(e, "cuda store: creation");
			goto fail;
		}
	}
	*out = s;
	return IBP_OK;
fail:
	ibp_cuda_store_free(s);
	return st;
}

int ibp_cuda_store_on_device(const ibp_cuda_store_t *s)
{
	return s ? s->on_device : 0;
}

uint64_t ibp_cuda_store_nrows(const ibp_cuda_store_t *s)
{
	return s ? s->nrows : 0;
}

uint64_t ibp_cuda_store_row_bytes(const ibp_cuda_store_t *s)
{
	return s ? s->R : 0;
}

const ibp_cuda_codec_t *ibp_cuda_store_codec(const ibp_cuda_store_t *s)
{
	return s ? s->codec : NULL;
}

ibp_status_t ibp_cuda_store_set_kernel(ibp_cuda_store_t *s, ibp_cuda_kernel_t k)
{
	if (!s || (unsigned)k > (unsigned)IBP_CUDA_KERNEL_DIRECT)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_set_kernel: bad store or kernel %d", (int)k);
	if (!s->on_device) {
		s->kernel = k;
		return IBP_OK;
	}
	IBP_TRY(ibp_cu_on_device(s->device, "cuda_store_set_kernel"));
	IbpLaunch L;
	IBP_TRY(ibp_gather_config(k, s->R, s->longest, s->codec->d.C, s->device, &L));
	s->launch = L;
	s->kernel = k;
	return IBP_OK;
}

/* A device word for one call, in stream order where the runtime has memory
 * pools (no device-wide synchronisation), else a plain cudaMalloc. */
static ibp_status_t ibp_scratch_alloc(unsigned long long **p, int *pooled, cudaStream_t cs)
{
	cudaError_t e = cudaMallocAsync((void **)p, sizeof(**p), cs);
	*pooled = e == cudaSuccess;
	if (e == cudaErrorNotSupported) {
		(void)cudaGetLastError();
		e = cudaMalloc((void **)p, sizeof(**p));
	}
	IBP_CU(e, "cuda_store_errors: scratch word");
	return IBP_OK;
}

ibp_status_t ibp_cuda_store_errors(ibp_cuda_store_t *s, uint64_t *count, void *stream)
{
	if (!s || !count)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda_store_errors: NULL argument");
	if (!s->on_device) {
		*count = s->host->nerr;
		s->host->nerr = 0;
		return IBP_OK;
	}
	IBP_TRY(ibp_cu_on_device(s->device, "cuda_store_errors"));
	cudaStream_t cs = (cudaStream_t)stream;
	unsigned long long v = 0, *word = NULL;
	int pooled = 0;
	/* An exchange on the device (a copy then a reset would lose the errors
	 * that gathers on other streams count in between), into a word of this
	 * call's own: two calls at once must not read each other's count. */
	IBP_TRY(ibp_scratch_alloc(&word, &pooled, cs));
	cudaError_t e = ibp_cuda_launch(ibp_take_errors_kernel, 1, 32, 0, cs, s->nerr, word);
	const char *what = "cuda_store_errors: exchange kernel";
	if (e == cudaSuccess) {
		e = cudaMemcpyAsync(&v, word, 8, cudaMemcpyDeviceToHost, cs);
		what = "cuda_store_errors: copy";
	}
	/* the word goes back after the copy, in stream order; then the wait */
	cudaError_t f = pooled ? cudaFreeAsync(word, cs) : cudaSuccess;
	cudaError_t y = cudaStreamSynchronize(cs);
	if (!pooled)
		f = cudaFree(word);
	if (e == cudaSuccess && y != cudaSuccess)
		e = y, what = "cuda_store_errors: sync";
	if (e == cudaSuccess && f != cudaSuccess)
		e = f, what = "cuda_store_errors: free scratch word";
	IBP_CU(e, what);
	*count = v;
	return IBP_OK;
}

ibp_status_t ibp_gather_cuda(const ibp_cuda_store_t *s, const int64_t *ids, uint64_t n, void *out,
			     const int64_t *out_rows, int32_t *status, void *stream)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_cuda: NULL store");
	if (!s->on_device)
		return ibpi_hstore_gather(s->host, ids, n, out, out_rows, status);
	if (n == 0)
		return IBP_OK;
	if (!ids || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_cuda: NULL ids or out");
	IBP_TRY(ibp_cu_on_device(s->device, "gather_cuda"));
	IbpGatherArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = s->codec->d;
	a.payload = s->payload;
	a.payload_bytes = s->payload_bytes;
	a.offsets = s->offsets;
	a.lens = s->lens;
	a.flags = s->flags;
	a.clusters = s->clusters;
	a.nrows = s->nrows;
	a.stride = s->R;
	a.exact = s->offsets != NULL;
	a.ids = ids;
	a.n = n;
	a.out = (uint8_t *)out;
	a.out_rows = out_rows;
	a.status = status;
	a.nerr = s->nerr;
	a.stage_bytes = s->launch.stage;
	a.nbuf = s->launch.nbuf;
	return ibp_gather_launch(&s->launch, &a, (cudaStream_t)stream);
}

ibp_status_t ibp_gather_plain_cuda(const void *src, uint64_t nrows, uint64_t row_bytes,
				   const int64_t *ids, uint64_t n, void *out,
				   const int64_t *out_rows, int32_t *status, void *stream)
{
	if (row_bytes == 0 || row_bytes > IBP_MAX_ROW_BYTES || (nrows && !src) ||
	    (nrows && row_bytes > UINT64_MAX / nrows))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_plain_cuda: bad array (%llu x %llu)",
				(unsigned long long)nrows, (unsigned long long)row_bytes);
	int dev = 0;
	IBP_TRY(ibp_cu_current(&dev));
	if (n == 0)
		return IBP_OK;
	if (!ids || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_plain_cuda: NULL ids or out");
	const uint8_t *dsrc = NULL;
	if (nrows)
		IBP_TRY(ibp_device_accessible(src, nrows * row_bytes, dev, &dsrc, "gather_plain_cuda: src"));
	IbpLaunch L;
	IBP_TRY(ibp_gather_config(IBP_CUDA_KERNEL_AUTO, row_bytes, row_bytes, 1, dev, &L));
	IbpGatherArgs a;
	memset(&a, 0, sizeof(a));
	a.cd.R = row_bytes;
	a.cd.K = 1;
	a.cd.C = 1;
	a.cd.W = 8;
	a.cd.max_extent = row_bytes;
	a.payload = dsrc;
	a.payload_bytes = nrows * row_bytes;
	a.nrows = nrows;
	a.stride = row_bytes;
	a.exact = 1;
	a.ids = ids;
	a.n = n;
	a.out = (uint8_t *)out;
	a.out_rows = out_rows;
	a.status = status;
	a.stage_bytes = L.stage;
	a.nbuf = L.nbuf;
	return ibp_gather_launch(&L, &a, (cudaStream_t)stream);
}

/* ---------------------------------------------------------------------- */
/* host: staged rows (cuda/ibp_gather_staged.h)                            */
/* ---------------------------------------------------------------------- */

ibp_status_t ibpi_gather_staged_cuda(const ibp_cuda_store_t *s, const uint8_t *stage, uint64_t stride,
				    uint64_t nstage, const uint32_t *lens, const uint32_t *meta,
				    const int64_t *idx, uint64_t n, void *out, const int64_t *out_rows,
				    int32_t *status, void *stream)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_staged_cuda: NULL store");
	if (!s->on_device)
		return ibpi_hstore_gather_staged(s->host, stage, stride, nstage, lens, meta, idx, n, out, out_rows,
						status);
	IBP_TRY(ibpi_staged_check(stride, nstage, stage, lens, meta, n, out));
	if (n == 0)
		return IBP_OK;
	IBP_TRY(ibp_cu_on_device(s->device, "gather_staged_cuda"));
	IbpGatherArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = s->codec->d;
	a.payload = stage;
	a.payload_bytes = nstage * stride;
	a.lens32 = lens;
	a.meta32 = meta;
	a.nrows = nstage;
	a.stride = stride;
	a.exact = 1; /* a slot holds exactly its row */
	a.ids = idx;
	a.n = n;
	a.out = (uint8_t *)out;
	a.out_rows = out_rows;
	a.status = status;
	a.stage_bytes = s->launch.stage;
	a.nbuf = s->launch.nbuf;
	return ibp_gather_launch(&s->launch, &a, (cudaStream_t)stream);
}

int ibpi_cuda_store_row_info(const ibp_cuda_store_t *s, uint64_t id, uint64_t *off, uint64_t *len, uint8_t *flags,
			    uint8_t *cl)
{
	if (!s)
		return 0;
	if (!s->on_device)
		return ibpi_hstore_row_info(s->host, id, off, len, flags, cl);
	if (!s->h_off || id >= s->nrows)
		return 0;
	*off = s->h_off[id];
	*len = s->h_off[id + 1] - s->h_off[id];
	*flags = s->h_flags[id];
	*cl = s->h_cl ? s->h_cl[id] : 0;
	return 1;
}

const uint8_t *ibpi_cuda_store_payload(const ibp_cuda_store_t *s)
{
	return !s ? NULL : s->on_device ? s->payload : s->host->payload;
}

const ibp_codec_t *ibpi_cuda_store_host_codec(const ibp_cuda_store_t *s)
{
	return !s ? NULL : s->on_device ? ibp_cuda_codec_host(s->codec) : s->host->codec;
}
