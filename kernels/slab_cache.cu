/* slab_cache.cu - the slab cache's device steps of a batch (probe, erase,
 * insert, gather-from-slab; cache/slab_batch.h), twins of
 * cache/slab_batch.c. Phases, no spinning: every step is its own launch
 * on the caller's stream, so a step never waits for another inside a
 * kernel.
 *
 * The index may be probed, erased and inserted by launches running at the
 * same time (other streams), so every access to its keys and entries is
 * a strong (relaxed) access, ordered by fences:
 * - insert claims a position by a CAS of its key from EMPTY or TOMB to
 *   CLAIMED (which no probe matches), copies the bytes, writes the READY
 *   entry, fences, and only then writes the key: a probe that sees the key
 *   sees the entry and the bytes;
 * - erase turns the key into a tombstone by a CAS from the id (a position
 *   re-claimed meanwhile is not touched); the entry stays, unreachable;
 * - probe reads the key, fences, reads the entry, fences and reads the key
 *   again: if it changed (erased, re-claimed by another id), the entry may
 *   be another row's and the probe is a miss. The same id inserted again
 *   in between gives that id's newer entry, which is right.
 * The gather reads the bytes of entries a finished probe returned. */
#include <stdint.h>

#include "cuda_check.h"

extern "C" {
#include "cuda/slab_cache.h"
#include "util/error.h"
}

#define SLAB_FENCE() __threadfence() /* the emulator's: release and acquire (tests/emu/emu.h) */

namespace {

typedef unsigned long long ull;

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;

/* Strong accesses to the index's words: volatile on the device (relaxed,
 * morally strong in the PTX memory model; the fences around them order
 * them), atomic loads and stores in the emulator, which checks them as
 * such and follows release (fence, store) and acquire (load, fence). */
#ifdef IBP_EMU
__device__ __forceinline__ uint64_t ld_strong(const void *p)
{
	return emu_ld_strong(p);
}
__device__ __forceinline__ void st_strong(void *p, uint64_t v)
{
	emu_st_strong(p, v);
}
#else
__device__ __forceinline__ uint64_t ld_strong(const void *p)
{
	return *(const volatile ull *)p;
}
__device__ __forceinline__ void st_strong(void *p, uint64_t v)
{
	*(volatile ull *)p = (ull)v;
}
#endif

__device__ __forceinline__ uint64_t find_key(const ibp_slab_table_t &t, int64_t id)
{
	uint64_t m = t.cap - 1;
	for (uint64_t p = ibp_slab_hash(id) & m, i = 0; i < t.cap; p = (p + 1) & m, i++) {
		int64_t k = (int64_t)ld_strong(t.keys + p);
		if (k == id)
			return p;
		if (k == IBP_SLAB_KEY_EMPTY)
			return UINT64_MAX;
	}
	return UINT64_MAX;
}

/* one thread per id: nothing in the table is written but pin counts */
__global__ void __launch_bounds__(kThreads) probe_kernel(ibp_slab_table_t t, const int64_t *ids, uint64_t n,
							 uint64_t *ent, int pin)
{
	for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (uint64_t)gridDim.x * blockDim.x) {
		int64_t id = ids[k];
		uint64_t p = id < 0 ? UINT64_MAX : find_key(t, id), e = 0;
		if (p != UINT64_MAX) {
			SLAB_FENCE(); /* the entry after the key that named it */
			e = ld_strong(t.vals + p);
			SLAB_FENCE();
			if ((int64_t)ld_strong(t.keys + p) != id)
				e = 0; /* erased or re-claimed meanwhile: the entry may be another row's */
		}
		if (IBP_SLAB_STATE(e) != IBP_SLAB_READY)
			e = 0;
		else if (pin)
			atomicAdd(t.pin + ibp_slab_slot(&t, e), 1u); /* duplicates pin the same slot */
		ent[k] = e;
	}
}

/* one thread per key: the id's key becomes a tombstone (a CAS: a position
 * re-claimed by an insert meanwhile is left alone) */
__global__ void __launch_bounds__(kThreads) erase_kernel(ibp_slab_table_t t, const int64_t *keys, uint64_t n,
							 ull *nerased)
{
	for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (uint64_t)gridDim.x * blockDim.x) {
		int64_t id = keys[k];
		uint64_t p = id < 0 ? UINT64_MAX : find_key(t, id);
		if (p == UINT64_MAX)
			continue;
		if (atomicCAS((ull *)(t.keys + p), (ull)id, (ull)(int64_t)IBP_SLAB_KEY_TOMB) == (ull)id && nerased)
			atomicAdd(nerased, 1ull);
	}
}

/* one warp per op: lane 0 claims a position (CAS of its key from empty or
 * tombstone to CLAIMED), the warp copies the bytes, lane 0 writes the
 * READY entry, fences and publishes the key */
__global__ void __launch_bounds__(kThreads) insert_kernel(ibp_slab_table_t t, const ibp_slab_insert_op_t *ops,
							  uint64_t n, ull *nfull)
{
	const unsigned lane = threadIdx.x % 32;
	const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
	for (uint64_t k = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; k < n; k += warps) {
		const ibp_slab_insert_op_t o = ops[k];
		uint64_t pos = UINT64_MAX;
		if (lane == 0) {
			uint64_t m = t.cap - 1, p = ibp_slab_hash(o.key) & m;
			const ull claimed = (ull)(int64_t)IBP_SLAB_KEY_CLAIMED;
			for (uint64_t i = 0; i < t.cap; i++, p = (p + 1) & m) {
				ull *kp = (ull *)(t.keys + p);
				ull old = atomicCAS(kp, (ull)(int64_t)IBP_SLAB_KEY_EMPTY, claimed);
				if (old != (ull)(int64_t)IBP_SLAB_KEY_EMPTY)
					old = atomicCAS(kp, (ull)(int64_t)IBP_SLAB_KEY_TOMB, claimed) ==
							      (ull)(int64_t)IBP_SLAB_KEY_TOMB
						      ? (ull)(int64_t)IBP_SLAB_KEY_EMPTY
						      : old;
				if (old == (ull)(int64_t)IBP_SLAB_KEY_EMPTY) {
					pos = p;
					break;
				}
			}
			if (pos == UINT64_MAX && nfull)
				atomicAdd(nfull, 1ull);
		}
		pos = __shfl_sync(0xffffffffu, pos, 0);
		if (pos == UINT64_MAX)
			continue;
		uint8_t *dst = ibp_slab_addr(&t, o.entry);
		const uint64_t len = IBP_SLAB_LEN(o.entry);
		for (uint64_t i = lane; i < len; i += 32)
			dst[i] = o.src[i];
		__syncwarp();
		if (lane == 0) {
			t.meta[ibp_slab_slot(&t, o.entry)] = (uint16_t)o.meta;
			st_strong(t.vals + pos, (o.entry & ~(3ull << 62)) | (IBP_SLAB_READY << 62));
			SLAB_FENCE(); /* the bytes and the entry before the key that names them */
			st_strong(t.keys + pos, (uint64_t)o.key);
		}
		__syncwarp();
	}
}

/* one warp per request: copy the hit's bytes to its staging row, then lane
 * 0 writes length and codec byte and unpins */
__global__ void __launch_bounds__(kThreads) gather_kernel(ibp_slab_table_t t, const uint64_t *ent, uint64_t n,
							  uint8_t *stage, uint64_t stride, uint32_t *len,
							  uint32_t *meta, int unpin)
{
	const unsigned lane = threadIdx.x % 32;
	const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
	for (uint64_t k = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; k < n; k += warps) {
		const uint64_t e = ent[k];
		if (IBP_SLAB_STATE(e) != IBP_SLAB_READY) {
			if (lane == 0)
				len[k] = meta[k] = 0;
			continue;
		}
		const uint64_t l = IBP_SLAB_LEN(e), c = l < stride ? l : stride;
		const uint8_t *src = ibp_slab_addr(&t, e);
		uint8_t *dst = stage + k * stride;
		for (uint64_t i = lane; i < c; i += 32)
			dst[i] = src[i];
		__syncwarp(); /* every lane's read of the slot before the unpin lets it go */
		if (lane == 0) {
			const uint64_t g = ibp_slab_slot(&t, e);
			len[k] = (uint32_t)l;
			meta[k] = t.meta[g];
			if (unpin)
				atomicAdd(t.pin + g, 0xffffffffu); /* -1 */
		}
	}
}

unsigned grid_for(uint64_t items, unsigned per_block)
{
	uint64_t b = (items + per_block - 1) / per_block;
	return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

ibp_status_t check_table(const ibp_slab_table_t *t, const void *a, uint64_t n, const char *fn)
{
	if (!t || (n && !a))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s", fn, t ? "array" : "table");
	if (!t->cap || (t->cap & (t->cap - 1)) || !t->keys || !t->vals)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the table has no index of a power-of-two size", fn);
	return IBP_OK;
}

} // namespace

extern "C" ibp_status_t ibpi_slab_probe_cuda(const ibp_slab_table_t *t, const int64_t *ids, uint64_t n, uint64_t *ent,
					    int pin, void *stream)
{
	IBP_TRY(check_table(t, ids, n, "ibpi_slab_probe_cuda"));
	if (!n)
		return IBP_OK;
	if (!ent)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_slab_probe_cuda: NULL ent");
	IBP_CUDA_LAUNCH("slab probe", probe_kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0,
			(cudaStream_t)stream, *t, ids, n, ent, pin);
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_slab_erase_cuda(const ibp_slab_table_t *t, const int64_t *keys, uint64_t n,
					    unsigned long long *nerased, void *stream)
{
	IBP_TRY(check_table(t, keys, n, "ibpi_slab_erase_cuda"));
	if (!n)
		return IBP_OK;
	IBP_CUDA_LAUNCH("slab erase", erase_kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0,
			(cudaStream_t)stream, *t, keys, n, (ull *)nerased);
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_slab_insert_cuda(const ibp_slab_table_t *t, const ibp_slab_insert_op_t *ops, uint64_t n,
					     unsigned long long *nfull, void *stream)
{
	IBP_TRY(check_table(t, ops, n, "ibpi_slab_insert_cuda"));
	if (!n)
		return IBP_OK;
	IBP_CUDA_LAUNCH("slab insert", insert_kernel, dim3(grid_for(n, kThreads / 32)), dim3(kThreads), 0,
			(cudaStream_t)stream, *t, ops, n, (ull *)nfull);
	return IBP_OK;
}

extern "C" ibp_status_t ibpi_slab_gather_cuda(const ibp_slab_table_t *t, const uint64_t *ent, uint64_t n,
					     uint8_t *stage, uint64_t stride, uint32_t *len, uint32_t *meta, int unpin,
					     void *stream)
{
	IBP_TRY(check_table(t, ent, n, "ibpi_slab_gather_cuda"));
	if (!n)
		return IBP_OK;
	if (!stage || !len || !meta)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_slab_gather_cuda: NULL output");
	IBP_CUDA_LAUNCH("slab gather", gather_kernel, dim3(grid_for(n, kThreads / 32)), dim3(kThreads), 0,
			(cudaStream_t)stream, *t, ent, n, stage, stride, len, meta, unpin);
	return IBP_OK;
}
