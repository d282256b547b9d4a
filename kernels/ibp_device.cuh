/* ibp_device.cuh - device helpers shared by the IBP CUDA kernels
 * (ibp_train.cu, ibp_encode.cu, ibp_gather.cu): the device codec, CUDA
 * error mapping, bit helpers, warp/group primitives, cp.async staging and
 * the row validator/decoder that mirrors src/bitpack/codec.c (docs/FORMAT.md §1).
 *
 * Groups. A row is handled by a "group": one warp (NW = 1) or a whole
 * thread block of NW warps. Every group-wide value is computed identically
 * by all its threads, so branches on it are uniform and the group's
 * barriers (IbpGroup::sync/sum/any) are reached by every thread.
 *
 * Tiles. Chunks are processed 32 at a time (one per lane): tile t holds
 * chunks [32t, 32t + 32). The static part of chunk j starts at a bit offset
 * known from the Mask alone; the device codec keeps it per tile (tso), and
 * lanes add a warp scan of the static widths inside the tile.
 *
 * Xvals (FORMAT.md §1.1). An exception of a chunk whose Xval is enabled
 * starts with a hit bit, so where a field starts depends on the hit bits
 * before it. Without enabled Xvals in the row's cluster every width is
 * known and tiles decode in parallel; with them one warp walks the
 * exceptions in order (ibp_walk_exc), as the CPU does, after the static
 * part was decoded in parallel.
 */
#ifndef IBP_DEVICE_CUH
#define IBP_DEVICE_CUH

#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>

#include "ibp/codec.h"
#include "ibp/cuda.h"
#include "cuda_check.h"
extern "C" {
#include "util/error.h"
#include "cuda/ibp_cuda_internal.h"
}

/* ---------------------------------------------------------------------- */
/* host: CUDA errors (kernels/cuda_check.h does the mapping)               */
/* ---------------------------------------------------------------------- */

/* A failed CUDA call -> IBP_ERR_CUDA / IBP_ERR_NO_DEVICE with CUDA's text. */
#define ibp_cu_fail(e, what) ibp_cuda_status((e), (what), __FILE__, __LINE__)

#define IBP_CU(call, what)                                                          \
	do {                                                                        \
		cudaError_t ibp_cu_e_ = (call);                                     \
		if (ibp_cu_e_ != cudaSuccess)                                       \
			return ibp_cuda_status(ibp_cu_e_, (what), __FILE__, __LINE__); \
	} while (0)

/* The current device in *dev; IBP_ERR_NO_DEVICE when none is usable. */
static inline ibp_status_t ibp_cu_current(int *dev)
{
	IBP_TRY(ibp_cuda_require_device());
	IBP_CU(cudaGetDevice(dev), "cudaGetDevice");
	return IBP_OK;
}

/* Checks that `dev` (the device an object was made on) is current. */
static inline ibp_status_t ibp_cu_on_device(int dev, const char *what)
{
	int cur = -1;
	IBP_CU(cudaGetDevice(&cur), "cudaGetDevice");
	if (cur != dev)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: object lives on device %d, current device is %d",
				what, dev, cur);
	return IBP_OK;
}

static inline uint64_t ibp_round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* ---------------------------------------------------------------------- */
/* the device codec                                                        */
/* ---------------------------------------------------------------------- */

/* Everything a kernel needs about a codec; passed by value. */
struct IbpDevCodec {
	uint64_t R;            /* row bytes */
	uint64_t D;            /* chunks per row */
	uint64_t ntiles;       /* ceil(D / 32) */
	uint64_t last_bytes;   /* bytes of the last chunk inside the row */
	uint64_t bitmap_bytes; /* ceil(D / 8) */
	uint64_t max_extent;   /* largest extent a decodable row can have */
	unsigned C, W, K, L;
	const uint8_t *m;      /* K * D chunk words of C bytes, cluster-major */
	const uint8_t *b;
	const uint8_t *x;      /* Xvals, as m and b: x_j != b_j where chunk j's Xval is enabled */
	uint64_t xmask;        /* bit k: cluster k has an enabled Xval (its rows need the walk) */
	const uint64_t *tso;   /* K * (ntiles + 1): static bit offset of each tile; [ntiles] = S */
	const uint64_t *ewp;   /* K * ceil(D / 64) * ibp_ew_planes(C): chunk j's exception width
				  (its Mask's popcount, 0..8C) bit-sliced, bit p in plane p of
				  word j / 64 (a bitmap row's widths summed 64 chunks at a time) */
};

/* Planes of an exception width 0..8C: bits of 8C + 1 values. */
static inline unsigned ibp_ew_planes(unsigned C)
{
	return C == 1 ? 4u : C == 2 ? 5u : C == 4 ? 6u : 7u;
}

/* Host: the codec's shape into d (every field but the table pointers and
 * xmask) and its derived tables, malloc'ed for the caller to upload and
 * free: *tso (K * (ntiles + 1) words) and *ewp (K * ceil(D / 64) *
 * ibp_ew_planes(C) words). Shared by ibp_cuda_codec_create and the
 * emulator. IBP_ERR_NOMEM, or IBP_ERR_INTERNAL when the static bits
 * disagree with the codec's. */
static inline ibp_status_t ibp_dev_codec_layout(const ibp_codec_t *h, IbpDevCodec &d, uint64_t **tso_out,
						uint64_t **ewp_out)
{
	*tso_out = *ewp_out = NULL;
	d.R = ibp_codec_row_bytes(h);
	d.C = ibp_codec_chunk_bytes(h);
	d.W = 8 * d.C;
	d.D = ibp_codec_nchunks(h);
	d.K = ibp_codec_nclusters(h);
	d.L = d.D > 1 ? 64u - (unsigned)__builtin_clzll(d.D - 1) : 1u;
	d.ntiles = (d.D + 31) / 32;
	d.last_bytes = d.R - (d.D - 1) * d.C;
	d.bitmap_bytes = (d.D + 7) / 8;
	d.max_extent = ibpi_cuda_max_extent(h);
	const uint64_t nt1 = d.ntiles + 1, nw = (d.D + 63) / 64, P = ibp_ew_planes(d.C);
	uint64_t *tso = (uint64_t *)malloc((uint64_t)d.K * nt1 * 8);
	uint64_t *ewp = (uint64_t *)calloc((uint64_t)d.K * nw * P, 8);
	if (!tso || !ewp) {
		free(tso);
		free(ewp);
		return ibpi_fail(IBP_ERR_NOMEM, "cuda codec: out of memory");
	}
	for (unsigned k = 0; k < d.K; k++) {
		const uint8_t *m = ibp_codec_mask(h, k);
		uint64_t off = 0;
		for (uint64_t j = 0; j < d.D; j++) {
			if (j % 32 == 0)
				tso[k * nt1 + j / 32] = off;
			uint64_t w = 0;
			for (unsigned i = 0; i < d.C; i++)
				w |= (uint64_t)m[j * d.C + i] << (8 * i);
			const unsigned ew = (unsigned)__builtin_popcountll(w);
			off += d.W - ew;
			for (unsigned p = 0; p < P; p++)
				if ((ew >> p) & 1u)
					ewp[(k * nw + j / 64) * P + p] |= 1ull << (j % 64);
		}
		tso[k * nt1 + d.ntiles] = off;
		if (off != ibp_codec_static_bits(h, k)) {
			free(tso);
			free(ewp);
			return ibpi_fail(IBP_ERR_INTERNAL, "cuda codec: static bits disagree");
		}
	}
	*tso_out = tso;
	*ewp_out = ewp;
	return IBP_OK;
}

struct ibp_cuda_codec {
	ibp_codec_t *host; /* owned copy */
	int device;
	IbpDevCodec d;
	void *mem;         /* one cudaMalloc holding m, b, x, tso, ewp */
};

/* ---------------------------------------------------------------------- */
/* device: bits                                                            */
/* ---------------------------------------------------------------------- */

#define IBP_FULL_MASK 0xffffffffu

template <unsigned C> struct IbpWord;
template <> struct IbpWord<1> { typedef uint8_t T; };
template <> struct IbpWord<2> { typedef uint16_t T; };
template <> struct IbpWord<4> { typedef uint32_t T; };
template <> struct IbpWord<8> { typedef unsigned long long T; };

__device__ __forceinline__ uint64_t ibp_d_lowmask(unsigned n)
{
	return n >= 64 ? ~0ull : ((1ull << n) - 1);
}

/* Index of the lowest set bit; x != 0. */
__device__ __forceinline__ unsigned ibp_d_ctz(uint64_t x)
{
	return (unsigned)__ffsll((long long)x) - 1u;
}

__device__ __forceinline__ unsigned ibp_d_popc(uint64_t x)
{
	return (unsigned)__popcll(x);
}

/* pdep: the low bits of v, in order, to the set positions of m (run by run). */
__device__ __forceinline__ uint64_t ibp_d_deposit(uint64_t v, uint64_t m)
{
	uint64_t x = 0;
	while (m) {
		unsigned pos = ibp_d_ctz(m);
		uint64_t y = ~(m >> pos);
		unsigned len = y ? ibp_d_ctz(y) : 64u - pos;
		uint64_t lm = ibp_d_lowmask(len);
		x |= (v & lm) << pos;
		v = len >= 64 ? 0 : v >> len;
		m &= ~(lm << pos);
	}
	return x;
}

/* ibp_d_deposit for chunks of up to 4 bytes, in 32-bit arithmetic and a
 * dozen instructions per run of m: `low` is the run's lowest bit, m + low
 * clears the run (and sets the bit above it), v * low shifts v to the run
 * (the multiply runs on the FMA pipe, beside the integer one). */
__device__ __forceinline__ uint32_t ibp_d_deposit32(uint32_t v, uint32_t m)
{
	uint32_t x = 0;
	while (m) {
		const uint32_t low = m & (0u - m);
		const uint32_t t = m + low;
		const uint32_t run = m & ~t;
		x |= (v * low) & run;
		v = __funnelshift_rc(v, 0u, (unsigned)__popc(run)); /* v >> len; 0 for len = 32 (clamped) */
		m &= t;
	}
	return x;
}

/* The deposit for chunks of C bytes. */
template <unsigned C>
__device__ __forceinline__ uint64_t ibp_d_deposit_c(uint64_t v, uint64_t m)
{
	if (C <= 4)
		return ibp_d_deposit32((uint32_t)v, (uint32_t)m);
	return ibp_d_deposit(v, m);
}

/* A chunk's field of n <= 8 * C bits at stream bit pos: 32-bit reads for
 * chunks of up to 4 bytes. */
template <unsigned C, class Rd>
__device__ __forceinline__ uint64_t ibp_field(const Rd &rd, uint64_t pos, unsigned n)
{
	if (C <= 4)
		return rd.bits32(pos, n);
	return rd.bits(pos, n);
}

/* pext: the bits of x at the set positions of m, packed low. */
__device__ __forceinline__ uint64_t ibp_d_extract(uint64_t x, uint64_t m)
{
	uint64_t v = 0;
	unsigned src = 0;
	while (m) {
		unsigned pos = ibp_d_ctz(m);
		uint64_t y = ~(m >> pos);
		unsigned len = y ? ibp_d_ctz(y) : 64u - pos;
		uint64_t lm = ibp_d_lowmask(len);
		v |= ((x >> pos) & lm) << src; /* src < 64 while m has bits left */
		src += len;
		m &= ~(lm << pos);
	}
	return v;
}

/* Chunk word j of a row at `row` (zero-padded last chunk), as the CPU's
 * ibp_ld_chunk / ibp_ld_partial. */
template <unsigned C>
__device__ __forceinline__ uint64_t ibp_d_load_chunk(const uint8_t *row, uint64_t j, uint64_t D,
						     uint64_t last_bytes)
{
	typedef typename IbpWord<C>::T T;
	const uint8_t *p = row + j * C;
	uint64_t nb = j + 1 < D ? C : last_bytes;
	if (nb == C && ((uintptr_t)p % C) == 0)
		return (uint64_t)*reinterpret_cast<const T *>(p);
	uint64_t v = 0;
	for (uint64_t i = 0; i < nb; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Stores the first bytes (all C, or last_bytes for the last chunk) of x. */
template <unsigned C>
__device__ __forceinline__ void ibp_d_store_chunk(uint8_t *row, uint64_t j, uint64_t D,
						  uint64_t last_bytes, uint64_t x)
{
	typedef typename IbpWord<C>::T T;
	uint8_t *p = row + j * C;
	uint64_t nb = j + 1 < D ? C : last_bytes;
	if (nb == C && ((uintptr_t)p % C) == 0) {
		*reinterpret_cast<T *>(p) = (T)x;
		return;
	}
	for (uint64_t i = 0; i < nb; i++)
		p[i] = (uint8_t)(x >> (8 * i));
}

/* The chunks below which ibp_d_put stores one word: all of them, but a
 * partial last one, in an output row aligned to C; none in another row
 * (rows of R % C != 0 bytes). Once per row. */
template <unsigned C>
__device__ __forceinline__ uint64_t ibp_d_whole(const uint8_t *out, uint64_t D, uint64_t last_bytes)
{
	if (((uintptr_t)out % C) != 0)
		return 0;
	return last_bytes == C ? D : D - 1;
}

/* Decoded chunk j into out: one word below `whole` (ibp_d_whole), else
 * byte by byte. A 1-byte chunk is always whole. */
template <unsigned C>
__device__ __forceinline__ void ibp_d_put(uint8_t *out, uint64_t j, uint64_t D, uint64_t last_bytes,
					  uint64_t whole, uint64_t x)
{
	typedef typename IbpWord<C>::T T;
	if (C == 1 || j < whole)
		*reinterpret_cast<T *>(out + j * C) = (T)x;
	else
		ibp_d_store_chunk<C>(out, j, D, last_bytes, x);
}

/* ---------------------------------------------------------------------- */
/* device: warp and group primitives                                       */
/* ---------------------------------------------------------------------- */

__device__ __forceinline__ unsigned ibp_lane(void)
{
	return threadIdx.x & 31u;
}

/* Inclusive prefix sum over the warp (all 32 lanes take part). */
__device__ __forceinline__ unsigned ibp_warp_scan(unsigned v)
{
	const unsigned lane = ibp_lane();
#pragma unroll
	for (unsigned o = 1; o < 32; o <<= 1) {
		unsigned u = __shfl_up_sync(IBP_FULL_MASK, v, o);
		if (lane >= o)
			v += u;
	}
	return v;
}

__device__ __forceinline__ uint64_t ibp_warp_sum(uint64_t v)
{
#pragma unroll
	for (unsigned o = 16; o; o >>= 1)
		v += __shfl_xor_sync(IBP_FULL_MASK, v, o);
	return v;
}

/* A group of NW warps handling one row: a warp (NW = 1) or the block. */
template <int NW>
struct IbpGroup {
	static constexpr unsigned SIZE = 32u * NW;
	/* Shared scratch (uint64 words) that sum() and the decoders need. */
	static constexpr unsigned SCRATCH = NW == 1 ? 0u : 5u * NW;
	__device__ static __forceinline__ unsigned tid(void)
	{
		return NW == 1 ? (threadIdx.x & 31u) : threadIdx.x;
	}
	__device__ static __forceinline__ unsigned warp(void)
	{
		return NW == 1 ? 0u : (threadIdx.x >> 5);
	}
	__device__ static __forceinline__ void sync(void)
	{
		if (NW == 1)
			__syncwarp();
		else
			__syncthreads();
	}
	__device__ static __forceinline__ bool any(bool p)
	{
		if (NW == 1)
			return __any_sync(IBP_FULL_MASK, p) != 0;
		return __syncthreads_or(p) != 0;
	}
	/* Sum over the group, returned to every thread; red: NW shared words. */
	__device__ static __forceinline__ uint64_t sum(uint64_t v, uint64_t *red)
	{
		v = ibp_warp_sum(v);
		if (NW == 1)
			return v;
		__syncthreads(); /* earlier readers of red are done */
		if (ibp_lane() == 0)
			red[threadIdx.x >> 5] = v;
		__syncthreads();
		uint64_t s = 0;
#pragma unroll
		for (int w = 0; w < NW; w++)
			s += red[w];
		return s;
	}
	/* Exclusive prefix over the group's warps of one value per warp (the
	 * warp's total, same in all its lanes), plus the total of all warps.
	 * tot: 2 * NW shared words, used alternately by parity `r`. */
	__device__ static __forceinline__ uint64_t prefix(uint64_t v, uint64_t r, uint64_t *tot,
							  uint64_t *all)
	{
		if (NW == 1) {
			*all = v;
			return 0;
		}
		uint64_t *tt = tot + (r & 1) * NW;
		if (ibp_lane() == 0)
			tt[threadIdx.x >> 5] = v;
		__syncthreads(); /* the other parity's readers finished a round ago */
		const unsigned w0 = threadIdx.x >> 5;
		uint64_t before = 0, a = 0;
#pragma unroll
		for (int w = 0; w < NW; w++) {
			uint64_t x = tt[w];
			if ((unsigned)w < w0)
				before += x;
			a += x;
		}
		*all = a;
		return before;
	}
};

/* Chunk and tile indices of a group's decode: 32 bits for a warp (a warp
 * decodes rows of at most 2^30 bytes: ibp_gather_config; the bag kernel's
 * rows fit shared memory), 64 for a block. */
template <int NW> struct IbpIdx { typedef uint64_t T; };
template <> struct IbpIdx<1> { typedef uint32_t T; };

/* ---------------------------------------------------------------------- */
/* device: readers of an encoded row                                       */
/* ---------------------------------------------------------------------- */

/* A row staged in shared memory: byte i of the row is base[skew + i]. base
 * is 16-byte aligned and the buffer extends at least 16 bytes past the
 * row's last byte, so whole aligned words can be read around any field.
 * A staged row fits shared memory, so its bit positions fit 32 bits: the
 * readers take a position's low 32 bits, and the position arithmetic of
 * their callers narrows to 32 bits with them. */
struct IbpStageReader {
	const uint8_t *base;
	unsigned skew;
	/* Field of nbits (0..64) at stream bit pos, LSB-first. */
	__device__ __forceinline__ uint64_t bits(uint64_t pos, unsigned nbits) const
	{
		if (nbits == 0)
			return 0;
		const uint32_t a = (uint32_t)pos + 8u * skew;
		const uint64_t *w = reinterpret_cast<const uint64_t *>(base) + (a >> 6);
		unsigned sh = a & 63u;
		uint64_t v = w[0] >> sh;
		if (sh + nbits > 64)
			v |= w[1] << (64 - sh); /* sh > 0 here */
		return v & ibp_d_lowmask(nbits);
	}
	/* Field of nbits (0..32): bits() in 32-bit words, a funnel shift. */
	__device__ __forceinline__ uint32_t bits32(uint64_t pos, unsigned nbits) const
	{
		const uint32_t a = (uint32_t)pos + 8u * skew;
		const uint32_t *w = reinterpret_cast<const uint32_t *>(base) + (a >> 5);
		const unsigned sh = a & 31u;
		const uint32_t hi = sh + nbits > 32 ? w[1] : 0u; /* only a field's own words */
		const uint32_t v = __funnelshift_r(w[0], hi, sh);
		return nbits >= 32 ? v : v & ((1u << nbits) - 1u);
	}
	__device__ __forceinline__ unsigned byte(uint64_t i) const
	{
		return base[skew + (uint32_t)i];
	}
};

/* A row read in place (device or mapped host memory): bytes p[0, len),
 * read one by one and never outside them. */
struct IbpGlobalReader {
	const uint8_t *p;
	uint64_t len;
	__device__ __forceinline__ uint64_t bits(uint64_t pos, unsigned nbits) const
	{
		if (nbits == 0)
			return 0;
		uint64_t b0 = pos >> 3, b1 = (pos + nbits + 7) >> 3; /* at most 9 bytes */
		if (b1 > len)
			b1 = len;
		unsigned sh = (unsigned)(pos & 7);
		uint64_t lo = 0, hi = 0;
		for (uint64_t i = b0; i < b1; i++) {
			uint64_t v = p[i];
			unsigned k = (unsigned)(i - b0);
			if (k < 8)
				lo |= v << (8 * k);
			else
				hi = v;
		}
		uint64_t v = lo >> sh;
		if (sh)
			v |= hi << (64 - sh);
		return v & ibp_d_lowmask(nbits);
	}
	__device__ __forceinline__ uint32_t bits32(uint64_t pos, unsigned nbits) const
	{
		return (uint32_t)bits(pos, nbits);
	}
	__device__ __forceinline__ unsigned byte(uint64_t i) const
	{
		return p[i];
	}
};

/* ---------------------------------------------------------------------- */
/* device: staging (cp.async)                                              */
/* ---------------------------------------------------------------------- */

/* cp.async wrappers. nvcc's device pass takes the PTX; the host emulator
 * (tests/emu, IBP_EMU) models the copies as asynchronous; the #else
 * branches (plain copies) are for any other host compilation. */
__device__ __forceinline__ void ibp_cp_async16(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__)
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#elif defined(IBP_EMU)
	emu_cp_async(smem, gmem, 16, __builtin_return_address(0));
#else
	memcpy(smem, gmem, 16);
#endif
}

/* `if (p) ibp_cp_async16(smem, gmem)` as one predicated instruction that
 * every lane executes (what the hardware issues for the warp; the emulator
 * coalesces the lanes of one execution, tests/emu/emu.h). */
__device__ __forceinline__ void ibp_cp_async16_if(bool p, void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__)
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p cp.async.cg.shared.global [%1], [%2], 16;\n\t}\n"
		     ::"r"((int)p), "r"(s), "l"(gmem) : "memory");
#elif defined(IBP_EMU)
	emu_cp_async_pred(p, smem, gmem, 16);
#else
	if (p)
		memcpy(smem, gmem, 16);
#endif
}

__device__ __forceinline__ void ibp_cp_async_commit(void)
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(IBP_EMU)
	emu_cp_async_commit();
#endif
}

template <int N>
__device__ __forceinline__ void ibp_cp_async_wait(void)
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(IBP_EMU)
	emu_cp_async_wait(N, __builtin_return_address(0));
#endif
}

/* Starts copying the row src[0, len) (device or mapped host memory) into
 * buf so that byte i lands at buf[(src & 15) + i]. The fetch reads the
 * 16-byte pieces that cover the row, [src & ~15, (src + len + 15) & ~15),
 * each exactly once, with cp.async: the group's threads take consecutive
 * pieces counted from the 128-byte line below the first one (thread i of a
 * warp: piece i of the warp's 512 bytes), so each warp instruction asks for
 * whole aligned sectors and lines, the only partial sectors are the one
 * holding the row's first byte and the one holding its last, and no sector
 * is asked for twice (tests/emu pcie suite; docs/GPU.md).
 *
 * What it may read: the bytes of the row's own 32-byte sectors that lie in
 * the store's payload [lo, hi); the emulator reports anything else. In a
 * sector that crosses lo or hi (only the store's first or last row, when
 * the payload's ends are not sector aligned) only the row's own bytes are
 * read, at most 31, one per thread in one instruction, and stored at once
 * (a synchronous load: rare enough). So that such a sector is not asked
 * for twice, no cp.async piece is taken from it. buf must hold
 * (src & 15) + len + 15 bytes. */
template <int NW>
__device__ __forceinline__ void ibp_issue_fetch(uint8_t *buf, const uint8_t *src, uint64_t len,
						const uint8_t *lo, const uint8_t *hi, unsigned t)
{
	if (len == 0)
		return;
#if defined(IBP_EMU)
	emu_fetch_begin(src, len, IbpGroup<NW>::SIZE);
#endif
	const uintptr_t a = (uintptr_t)src, e = a + len;
	const uintptr_t p0 = a & ~(uintptr_t)15;
	const uintptr_t s0 = a & ~(uintptr_t)31, s1 = (e + 31) & ~(uintptr_t)31; /* the row's sectors */
	const bool hx = s0 < (uintptr_t)lo, tx = s1 > (uintptr_t)hi;   /* end sectors crossing the store's ends */
	/* pieces by cp.async: [w0, w1), none in a crossing sector */
	const uintptr_t w0 = hx ? s0 + 32 : p0;
	const uintptr_t w1 = tx ? s1 - 32 : (e + 15) & ~(uintptr_t)15;
	if (w1 > w0) {
		const uintptr_t base = w0 & ~(uintptr_t)127;
		const unsigned np = (unsigned)((w1 - base) >> 4); /* a staged row fits shared memory */
		/* the same trip count in every thread: one predicated warp instruction per
		 * round; not unrolled (one to a few rounds a row: an unrolled copy
		 * with its remainder costs more than the loop) */
#pragma unroll 1
		for (unsigned r = 0; r < np; r += IbpGroup<NW>::SIZE) {
			const uintptr_t q = base + 16 * (uintptr_t)(r + t);
			const bool p = q >= w0 && q < w1;
			ibp_cp_async16_if(p, buf + ((p ? q : w0) - p0), (const void *)(p ? q : w0));
		}
	}
	/* the row's own bytes in a crossing sector: head [a, a + nh), tail [ts, e) */
	const uint64_t nh = hx ? (e < s0 + 32 ? e : s0 + 32) - a : 0;
	uintptr_t ts = tx ? s1 - 32 : e;
	if (ts < a + nh)
		ts = a + nh;
	const uint64_t nt = e - ts;
	if (t < nh)
		buf[(a - p0) + t] = src[t];
	if (t < nt) {
		const uint64_t off = (ts - a) + t;
		buf[(a - p0) + off] = src[off];
	}
#if defined(IBP_EMU)
	emu_fetch_end();
#endif
}

/* ---------------------------------------------------------------------- */
/* device: output helpers                                                  */
/* ---------------------------------------------------------------------- */

/* dst[0, n) = row bytes [0, n) of rd, 4-byte stores where dst allows. */
template <int NW, class Rd>
__device__ __forceinline__ void ibp_copy_out(const Rd &rd, uint8_t *dst, uint64_t n)
{
	const unsigned t = IbpGroup<NW>::tid();
	uint64_t head = (4u - ((uintptr_t)dst & 3u)) & 3u;
	if (head > n)
		head = n;
	if (t < head)
		dst[t] = (uint8_t)rd.byte(t);
	const uint64_t nw = (n - head) >> 2;
	uint32_t *dw = reinterpret_cast<uint32_t *>(dst + head);
	for (uint64_t w = t; w < nw; w += IbpGroup<NW>::SIZE)
		dw[w] = (uint32_t)rd.bits(8 * (head + 4 * w), 32);
	const uint64_t tail = head + 4 * nw;
	if (tail + t < n)
		dst[tail + t] = (uint8_t)rd.byte(tail + t);
}

template <int NW>
__device__ __forceinline__ void ibp_zero_out(uint8_t *dst, uint64_t n)
{
	const unsigned t = IbpGroup<NW>::tid();
	uint64_t head = (4u - ((uintptr_t)dst & 3u)) & 3u;
	if (head > n)
		head = n;
	if (t < head)
		dst[t] = 0;
	const uint64_t nw = (n - head) >> 2;
	uint32_t *dw = reinterpret_cast<uint32_t *>(dst + head);
	for (uint64_t w = t; w < nw; w += IbpGroup<NW>::SIZE)
		dw[w] = 0;
	const uint64_t tail = head + 4 * nw;
	if (tail + t < n)
		dst[tail + t] = 0;
}

/* ---------------------------------------------------------------------- */
/* device: validation and decoding (src/bitpack/codec.c's ibpi_decode_row_ext)      */
/* ---------------------------------------------------------------------- */

struct IbpRowHdr {
	uint64_t hdr;    /* header bytes */
	uint64_t n;      /* exceptions (LIST; BITMAP: their count) */
	uint64_t extent; /* header + body bytes (unknown until the walk when walk = 1) */
	int walk;        /* exceptions of a cluster with Xvals: ibp_walk_exc decodes them */
};

/* Validates a non-raw row (mode CLEAN, BITMAP or LIST) of `len` readable
 * bytes under cluster cl < K, with the CPU decoder's checks in its order.
 * IBP_OK fills h; otherwise IBP_ERR_CORRUPT. Reads only inside [0, len). */
template <unsigned C, int NW, class Rd>
__device__ __forceinline__ int ibp_validate_row(const IbpDevCodec &cd, const Rd &rd, uint64_t len,
						unsigned mode, unsigned cl, IbpRowHdr &h,
						uint64_t *red)
{
	typedef typename IbpWord<C>::T T;
	typedef IbpGroup<NW> G;
	const unsigned t = G::tid();
	const uint64_t D = cd.D;
	const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)cl * D;
	const uint64_t S = cd.tso[(uint64_t)cl * (cd.ntiles + 1) + cd.ntiles];
	const bool xv = (cd.xmask >> cl) & 1; /* widths depend on hit bits: E comes from the walk */
	uint64_t hdr = 0, n = 0, E = 0;
	if (mode == IBP_ROW_BITMAP) {
		hdr = cd.bitmap_bytes;
		if (hdr > len)
			return IBP_ERR_CORRUPT;
		if ((D & 7) && rd.bits(D, 8u - (unsigned)(D & 7)) != 0)
			return IBP_ERR_CORRUPT; /* bits past chunk D-1 */
		/* a lane per 64 chunks; the exception widths of a word's set
		 * bits summed plane by plane (cd.ewp), no walk over the bits */
		constexpr unsigned P = C == 1 ? 4u : C == 2 ? 5u : C == 4 ? 6u : 7u; /* ibp_ew_planes */
		const uint64_t *ewp = cd.ewp + (uint64_t)cl * ((D + 63) / 64) * P;
		uint64_t ln = 0, le = 0;
		for (uint64_t w = t; w * 64 < D; w += G::SIZE) {
			unsigned nb = D - 64 * w >= 64 ? 64u : (unsigned)(D - 64 * w);
			uint64_t v = rd.bits(64 * w, nb);
			ln += ibp_d_popc(v);
			if (!xv) {
#pragma unroll
				for (unsigned p = 0; p < P; p++)
					le += (uint64_t)ibp_d_popc(v & ewp[w * P + p]) << p;
			}
		}
		n = G::sum(ln, red);
		if (!xv)
			E = G::sum(le, red);
		if (n == 0)
			return IBP_ERR_CORRUPT;
	} else if (mode == IBP_ROW_LIST) {
		const unsigned L = cd.L;
		if ((L + 7) / 8 > len)
			return IBP_ERR_CORRUPT;
		n = rd.bits(0, L) + 1;
		if (n > D)
			return IBP_ERR_CORRUPT;
		hdr = ((uint64_t)L * (n + 1) + 7) / 8;
		if (hdr > len)
			return IBP_ERR_CORRUPT;
		bool bad = false;
		uint64_t le = 0;
		for (uint64_t k = t; k < n; k += G::SIZE) {
			uint64_t j = rd.bits((uint64_t)L * (k + 1), L);
			if (j >= D || (k && j <= rd.bits((uint64_t)L * k, L))) {
				bad = true;
				continue;
			}
			le += ibp_d_popc((uint64_t)m[j]);
		}
		if (G::any(bad))
			return IBP_ERR_CORRUPT;
		if (!xv)
			E = G::sum(le, red);
	}
	h.hdr = hdr;
	h.n = n;
	h.walk = xv && n > 0;
	if (h.walk) {
		/* as the CPU: the static part must fit; the walk checks each field */
		if ((S + 7) / 8 > len - hdr)
			return IBP_ERR_CORRUPT;
		h.extent = 0;
		return IBP_OK;
	}
	const uint64_t body = (S + E + 7) / 8;
	if (body > len - hdr)
		return IBP_ERR_CORRUPT;
	h.extent = hdr + body;
	return IBP_OK;
}

/* Whether chunk j is in the (validated, increasing) exception list. */
template <class Rd>
__device__ __forceinline__ bool ibp_list_has(const Rd &rd, unsigned L, uint64_t n, uint64_t j)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (rd.bits((uint64_t)L * (mid + 1), L) < j)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && rd.bits((uint64_t)L * (lo + 1), L) == j;
}

/* Replaces the Mask bits of decoded chunk j in out by v (v has no bits
 * outside m): the CPU's patch of an exception. */
template <unsigned C>
__device__ __forceinline__ void ibp_d_patch_chunk(uint8_t *out, uint64_t j, uint64_t D,
						  uint64_t last_bytes, uint64_t m, uint64_t v)
{
	typedef typename IbpWord<C>::T T;
	uint8_t *p = out + j * C;
	const uint64_t nb = j + 1 < D ? C : last_bytes;
	if (nb == C && ((uintptr_t)p % C) == 0) {
		T *q = reinterpret_cast<T *>(p);
		*q = (T)(((uint64_t)*q & ~m) | v);
		return;
	}
	for (uint64_t i = 0; i < nb; i++) {
		const unsigned sh = (unsigned)(8 * i);
		p[i] = (uint8_t)((p[i] & ~(unsigned)(m >> sh)) | (unsigned)(v >> sh));
	}
}

/* Walks the exception part of a row validated with h.walk = 1 (one warp;
 * every lane of the warp calls it): exceptions in order, 32 at a time (a
 * bitmap tile, or 32 list entries). A field's start is the sum of the widths
 * before it, and the width of an enabled exception (1 on a hit, 1 + e_j on
 * a miss) is known only once its hit bit is read, so the enabled exceptions
 * of a batch are resolved one after another; a warp scan places the rest.
 * Every field is checked against the row's length before it is read, as the
 * CPU's walk does. With out != NULL the exceptions patch the chunks that
 * ibp_decode_chunks wrote as matched. Returns IBP_OK with the end bit of
 * the exception part (from the body start) in *end, or IBP_ERR_CORRUPT. */
template <unsigned C, class Rd>
__device__ __forceinline__ int ibp_walk_exc(const IbpDevCodec &cd, const Rd &rd, uint64_t len,
					    unsigned mode, unsigned cl, const IbpRowHdr &h,
					    uint8_t *out, uint64_t *end)
{
	typedef typename IbpWord<C>::T T;
	const unsigned lane = ibp_lane();
	const uint64_t D = cd.D, L = cd.L;
	const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)cl * D;
	const T *b = reinterpret_cast<const T *>(cd.b) + (uint64_t)cl * D;
	const T *xh = reinterpret_cast<const T *>(cd.x) + (uint64_t)cl * D;
	const uint64_t body0 = 8 * h.hdr, lim = 8 * (len - h.hdr);
	uint64_t pos = cd.tso[(uint64_t)cl * (cd.ntiles + 1) + cd.ntiles]; /* S <= lim */
	const uint64_t nbatch = mode == IBP_ROW_BITMAP ? cd.ntiles : (h.n + 31) / 32;
	for (uint64_t bt = 0; bt < nbatch; bt++) {
		bool act;
		uint64_t j = 0;
		if (mode == IBP_ROW_BITMAP) {
			j = 32 * bt + lane;
			act = j < D && rd.bits(j, 1) != 0;
		} else {
			const uint64_t k = 32 * bt + lane; /* entries were validated */
			act = k < h.n;
			if (act)
				j = rd.bits(L * (k + 1), (unsigned)L);
		}
		if (__ballot_sync(IBP_FULL_MASK, act) == 0)
			continue;
		const uint64_t mj = act ? (uint64_t)m[j] : 0;
		const unsigned w = ibp_d_popc(mj);
		const bool en = act && (uint64_t)xh[j] != (uint64_t)b[j];
		unsigned wd = act ? w + (en ? 1u : 0u) : 0u; /* a miss until the hit bit says */
		bool hit = false, bad = false;
		for (unsigned pend = __ballot_sync(IBP_FULL_MASK, en); pend; pend &= pend - 1) {
			const unsigned l = (unsigned)__ffs((int)pend) - 1;
			const unsigned in = ibp_warp_scan(wd);
			const uint64_t start = pos + (in - wd);
			unsigned hb = 0;
			if (lane == l) {
				if (start < lim)
					hb = (unsigned)rd.bits(body0 + start, 1);
				else
					bad = true; /* hit bit past the row: corrupt */
			}
			hb = __shfl_sync(IBP_FULL_MASK, hb, (int)l);
			if (lane == l) {
				hit = hb != 0;
				wd = hit ? 1u : 1u + w;
			}
		}
		const unsigned in = ibp_warp_scan(wd);
		const unsigned tot = __shfl_sync(IBP_FULL_MASK, in, 31);
		const uint64_t start = pos + (in - wd);
		if (act && start + wd > lim)
			bad = true;
		if (__any_sync(IBP_FULL_MASK, bad))
			return IBP_ERR_CORRUPT;
		if (act && out) {
			const uint64_t v = hit ? (uint64_t)xh[j]
					       : ibp_d_deposit_c<C>(rd.bits(body0 + start + (en ? 1 : 0), w), mj);
			ibp_d_patch_chunk<C>(out, j, D, cd.last_bytes, mj, v);
		}
		pos += tot;
	}
	*end = pos;
	return IBP_OK;
}

/* Decodes the static part of a validated non-raw row into out[0, R): every
 * chunk as matched (a CLEAN row whole; a row whose Xval exceptions the walk
 * patches afterwards). Tile t goes to warp t mod NW. A tile without static
 * bits (every bit of its chunks invariant, as in sparse rows) is the base
 * row. No barrier: the group's warps need not take the same branches. */
template <unsigned C, int NW, class Rd>
__device__ __forceinline__ void ibp_decode_clean(const IbpDevCodec &cd, const Rd &rd, unsigned cl,
						 const IbpRowHdr &h, uint8_t *out)
{
	typedef IbpGroup<NW> G;
	typedef typename IbpWord<C>::T T;
	typedef typename IbpIdx<NW>::T IX;
	const unsigned W = 8 * C;
	const unsigned lane = ibp_lane(), warp = G::warp();
	const IX D = (IX)cd.D, ntiles = (IX)cd.ntiles;
	const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)cl * cd.D;
	const T *b = reinterpret_cast<const T *>(cd.b) + (uint64_t)cl * cd.D;
	const uint64_t *tso = cd.tso + (uint64_t)cl * (cd.ntiles + 1);
	const uint64_t body0 = 8 * h.hdr;
	const uint64_t full = ibp_d_lowmask(W);
	const IX whole = (IX)ibp_d_whole<C>(out, D, cd.last_bytes);
	for (IX r = 0; r * NW < ntiles; r++) {
		const IX tile = r * NW + warp;
		if (tile >= ntiles)
			break; /* the warp's tiles are done */
		const IX j = tile * 32 + lane;
		const bool active = j < D;
		const uint64_t t0 = tso[tile];
		if (tso[tile + 1] == t0) {
			if (active)
				ibp_d_put<C>(out, j, D, cd.last_bytes, whole, (uint64_t)b[j]);
		} else {
			const uint64_t mj = active ? (uint64_t)m[j] : 0;
			const unsigned s = active ? W - ibp_d_popc(mj) : 0;
			const unsigned s_in = ibp_warp_scan(s);
			if (active)
				ibp_d_put<C>(out, j, D, cd.last_bytes, whole,
					     ibp_d_deposit_c<C>(ibp_field<C>(rd, body0 + t0 + s_in - s, s), ~mj & full) |
						     (uint64_t)b[j]);
		}
	}
}

/* Decodes a validated non-raw row into out[0, R). Tile t goes to warp
 * t mod NW; the exception bits of earlier tiles are carried across rounds
 * with a prefix over the group's warps. tot: 2 * NW shared words. */
template <unsigned C, int NW, class Rd>
__device__ __forceinline__ void ibp_decode_chunks(const IbpDevCodec &cd, const Rd &rd,
						  unsigned mode, unsigned cl, const IbpRowHdr &h,
						  uint8_t *out, uint64_t *tot)
{
	typedef typename IbpWord<C>::T T;
	typedef IbpGroup<NW> G;
	typedef typename IbpIdx<NW>::T IX;
	const unsigned W = 8 * C;
	const unsigned lane = ibp_lane(), warp = G::warp();
	const IX D = (IX)cd.D, ntiles = (IX)cd.ntiles;
	const T *m = reinterpret_cast<const T *>(cd.m) + (uint64_t)cl * cd.D;
	const T *b = reinterpret_cast<const T *>(cd.b) + (uint64_t)cl * cd.D;
	const uint64_t *tso = cd.tso + (uint64_t)cl * (cd.ntiles + 1);
	const uint64_t body0 = 8 * h.hdr, exc0 = body0 + tso[cd.ntiles];
	const uint64_t full = ibp_d_lowmask(W);
	uint64_t carry = 0; /* exception bits of the tiles of earlier rounds */
	unsigned lp = 0;    /* NW == 1, list rows: the list entries of earlier tiles */
	const IX whole = (IX)ibp_d_whole<C>(out, D, cd.last_bytes);
	for (IX r = 0; r * NW < ntiles; r++) {
		const IX tile = r * NW + warp;
		const IX j = tile * 32 + lane;
		const bool active = tile < ntiles && j < D;
		const uint64_t mj = active ? (uint64_t)m[j] : 0;
		const unsigned ew = ibp_d_popc(mj);
		const unsigned s = active ? W - ew : 0;
		bool exc = false;
		if (active && mode == IBP_ROW_BITMAP) {
			exc = rd.bits(j, 1) != 0;
		} else if (NW == 1 && mode == IBP_ROW_LIST) {
			/* A warp takes the tiles in order and the (validated) list is
			 * increasing: this tile's entries, at most 32, are the next
			 * ones. A lane reads one; the OR of their offsets is the
			 * tile's exception mask. No search per chunk. In 32 bits: a
			 * warp decodes rows of at most 2^30 bytes (ibp_gather_config;
			 * the bag kernel's rows fit shared memory), so D <= 2^30. */
			const unsigned k = (unsigned)lp + lane;
			const unsigned e = k < (unsigned)h.n ? rd.bits32((uint64_t)cd.L * (k + 1), cd.L) : ~0u;
			const bool in = e < (unsigned)tile * 32u + 32u;
			lp += (unsigned)__popc(__ballot_sync(IBP_FULL_MASK, in));
			const unsigned tm = __reduce_or_sync(IBP_FULL_MASK, in ? 1u << (unsigned)(e & 31) : 0u);
			exc = active && ((tm >> lane) & 1u);
		} else if (active && mode == IBP_ROW_LIST) {
			exc = ibp_list_has(rd, cd.L, h.n, j);
		}
		const unsigned e = exc ? ew : 0;
		/* one scan for both widths: each at most 64, their sums over the
		 * warp at most 2,048, so 16 bits each (8-byte chunks: two scans,
		 * which keep the block kernel at 80 registers) */
		unsigned s_in, e_in, e_tot;
		if (C <= 4) {
			const unsigned se = ibp_warp_scan(s | e << 16);
			s_in = se & 0xffffu;
			e_in = se >> 16;
			e_tot = __shfl_sync(IBP_FULL_MASK, se, 31) >> 16;
		} else {
			s_in = ibp_warp_scan(s);
			e_in = ibp_warp_scan(e);
			e_tot = __shfl_sync(IBP_FULL_MASK, e_in, 31);
		}
		uint64_t all;
		const uint64_t before = carry + G::prefix(e_tot, r, tot, &all);
		carry += all;
		if (active) {
			uint64_t x = ibp_d_deposit_c<C>(ibp_field<C>(rd, body0 + tso[tile] + s_in - s, s), ~mj & full);
			if (exc)
				x |= ibp_d_deposit_c<C>(ibp_field<C>(rd, exc0 + before + e_in - e, e), mj);
			else
				x |= (uint64_t)b[j];
			ibp_d_put<C>(out, j, D, cd.last_bytes, whole, x);
		}
	}
}

#endif /* IBP_DEVICE_CUH */
