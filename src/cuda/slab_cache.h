/* cuda/slab_cache.h - the slab cache's table as plain arrays, shared by the
 * device kernels (kernels/slab_cache.cu) and their CPU twins
 * (cache/slab_batch.c): the index (open addressing, linear probing,
 * tombstones), its 64-bit entries, the hash, the per-slot pin counts and
 * codec bytes, and the slabs. One definition, so both sides address the
 * same slots and probe the same chains. C and CUDA. */
#ifndef IBP_CUDA_SLAB_CACHE_H
#define IBP_CUDA_SLAB_CACHE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define IBP_SLAB_HD __host__ __device__ __forceinline__
#else
#define IBP_SLAB_HD static inline
#endif

/* ---- 64-bit index entry ----
 * bits 62-63 state, 54-61 class, 30-53 exact length, 13-29 slab, 0-12 slot. */
#define IBP_SLAB_FILLING 1ull
#define IBP_SLAB_READY 2ull
#define IBP_SLAB_GHOST 3ull
#define IBP_SLAB_KEY_EMPTY (-1) /* all bytes 0xFF: a table memset to 0xFF is empty */
#define IBP_SLAB_KEY_TOMB (-2)
/* A position an insert has claimed and is filling (kernels/slab_cache.cu):
 * no probe matches it; the key is written last, after the entry. */
#define IBP_SLAB_KEY_CLAIMED (-3)
#define IBP_SLAB_STATE(e) ((e) >> 62)
#define IBP_SLAB_CLASS(e) ((uint32_t)(((e) >> 54) & 0xFFu))
#define IBP_SLAB_LEN(e) ((uint64_t)(((e) >> 30) & 0xFFFFFFu))
#define IBP_SLAB_SLAB(e) ((uint64_t)(((e) >> 13) & 0x1FFFFu))
#define IBP_SLAB_SLOT(e) ((uint64_t)((e) & 0x1FFFu))
#define IBP_SLAB_ENTRY(st, cls, len, slab, slot)                                                   \
	(((uint64_t)(st) << 62) | ((uint64_t)(cls) << 54) | ((uint64_t)(len) << 30) |               \
	 ((uint64_t)(slab) << 13) | (uint64_t)(slot))

/* The table of one cache. Pointers are device memory for the _cuda
 * functions and host memory for the twins. */
typedef struct ibp_slab_table {
	int64_t *keys;              /* cap ids: >= 0, or IBP_SLAB_KEY_EMPTY / _TOMB / _CLAIMED */
	uint64_t *vals;             /* their entries */
	uint64_t cap;               /* a power of two */
	uint32_t *pin;              /* per slot (slab * spp + slot): readers decoding it */
	uint16_t *meta;             /* per slot: codec row flags | cluster << 8 (0x00FF: decoded row) */
	uint8_t *mem;               /* the slabs, slab_bytes apart */
	const uint32_t *slot_bytes; /* per class */
	uint64_t spp, slab_bytes;   /* slot capacity of a slab, bytes of a slab */
} ibp_slab_table_t;

/* splitmix64 finaliser: the home position of an id is hash & (cap - 1). */
IBP_SLAB_HD uint64_t ibp_slab_hash(int64_t id)
{
	uint64_t z = (uint64_t)id + 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Global slot of an entry, and the address of its bytes. */
IBP_SLAB_HD uint64_t ibp_slab_slot(const ibp_slab_table_t *t, uint64_t e)
{
	return IBP_SLAB_SLAB(e) * t->spp + IBP_SLAB_SLOT(e);
}

IBP_SLAB_HD uint8_t *ibp_slab_addr(const ibp_slab_table_t *t, uint64_t e)
{
	return t->mem + IBP_SLAB_SLAB(e) * t->slab_bytes + IBP_SLAB_SLOT(e) * t->slot_bytes[IBP_SLAB_CLASS(e)];
}

/* One admitted row of a batch: `key` (absent from the table) gets `entry`
 * (its slab, slot, class and length; published READY) and the slot gets
 * the entry's length in bytes from `src` and `meta`. */
typedef struct ibp_slab_insert_op {
	int64_t key;
	uint64_t entry;
	const uint8_t *src;
	uint32_t meta;
} ibp_slab_insert_op_t;

#endif /* IBP_CUDA_SLAB_CACHE_H */
