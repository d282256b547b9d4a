/* abi_layout.c - prints the layout of the public structs that Python
 * mirrors with ctypes (python/src/ibp/_structs.py), as the C compiler sees them:
 *   struct NAME SIZE ALIGN
 *   field NAME MEMBER OFFSET SIZE
 * with the fields in declaration order. test_ctypes_abi.py compares these
 * lines with the mirror, and checks that every member the header declares
 * is listed here, so a field added to a header fails the test until both
 * this list and the mirror know it. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "ibp.h"

#define STRUCT(T) printf("struct %s %zu %zu\n", #T, sizeof(T), alignof(T))
#define FIELD(T, m) printf("field %s %s %zu %zu\n", #T, #m, offsetof(T, m), sizeof(((T *)0)->m))

int main(void)
{
	STRUCT(ibp_train_opts_t);
	FIELD(ibp_train_opts_t, size);
	FIELD(ibp_train_opts_t, chunk_bytes);
	FIELD(ibp_train_opts_t, threshold);
	FIELD(ibp_train_opts_t, sample);
	FIELD(ibp_train_opts_t, seed);
	FIELD(ibp_train_opts_t, clusters);
	FIELD(ibp_train_opts_t, nthreads);
	FIELD(ibp_train_opts_t, xval);

	STRUCT(ibp_exp_opts_t);
	FIELD(ibp_exp_opts_t, size);
	FIELD(ibp_exp_opts_t, table_mode);
	FIELD(ibp_exp_opts_t, sigma);
	FIELD(ibp_exp_opts_t, table);
	FIELD(ibp_exp_opts_t, nthreads);
	FIELD(ibp_exp_opts_t, checksum);

	STRUCT(ibp_fp8_opts_t);
	FIELD(ibp_fp8_opts_t, size);
	FIELD(ibp_fp8_opts_t, format);
	FIELD(ibp_fp8_opts_t, block);
	FIELD(ibp_fp8_opts_t, hadamard);
	FIELD(ibp_fp8_opts_t, adaptive);
	FIELD(ibp_fp8_opts_t, nthreads);
	FIELD(ibp_fp8_opts_t, checksum);

	STRUCT(ibp_cache_opts_t);
	FIELD(ibp_cache_opts_t, size);
	FIELD(ibp_cache_opts_t, capacity_bytes);
	FIELD(ibp_cache_opts_t, row_bytes);
	FIELD(ibp_cache_opts_t, slab_bytes);
	FIELD(ibp_cache_opts_t, class_step);
	FIELD(ibp_cache_opts_t, raw_threshold);
	FIELD(ibp_cache_opts_t, max_batch);
	FIELD(ibp_cache_opts_t, max_callers);
	FIELD(ibp_cache_opts_t, policy);
	FIELD(ibp_cache_opts_t, flags);
	FIELD(ibp_cache_opts_t, device);

	STRUCT(ibp_cache_stats_t);
	FIELD(ibp_cache_stats_t, requests);
	FIELD(ibp_cache_stats_t, hits);
	FIELD(ibp_cache_stats_t, misses);
	FIELD(ibp_cache_stats_t, store_rows);
	FIELD(ibp_cache_stats_t, store_bytes);
	FIELD(ibp_cache_stats_t, hit_bytes);
	FIELD(ibp_cache_stats_t, insertions);
	FIELD(ibp_cache_stats_t, evictions);
	FIELD(ibp_cache_stats_t, rejected);
	FIELD(ibp_cache_stats_t, invalidations);
	FIELD(ibp_cache_stats_t, bytes_copied);
	FIELD(ibp_cache_stats_t, slab_moves);
	FIELD(ibp_cache_stats_t, rows_resident);
	FIELD(ibp_cache_stats_t, bytes_resident);
	FIELD(ibp_cache_stats_t, slot_bytes_used);
	FIELD(ibp_cache_stats_t, raw_bytes_resident);
	FIELD(ibp_cache_stats_t, capacity_bytes);
	FIELD(ibp_cache_stats_t, slab_bytes);
	FIELD(ibp_cache_stats_t, nslabs);
	FIELD(ibp_cache_stats_t, free_slabs);
	FIELD(ibp_cache_stats_t, meta_bytes);
	FIELD(ibp_cache_stats_t, class_step);
	FIELD(ibp_cache_stats_t, nclasses);

	STRUCT(ibp_cache_class_stats_t);
	FIELD(ibp_cache_class_stats_t, slot_bytes);
	FIELD(ibp_cache_class_stats_t, slabs);
	FIELD(ibp_cache_class_stats_t, slots);
	FIELD(ibp_cache_class_stats_t, used);
	FIELD(ibp_cache_class_stats_t, hits);
	FIELD(ibp_cache_class_stats_t, insertions);
	FIELD(ibp_cache_class_stats_t, evictions);
	FIELD(ibp_cache_class_stats_t, bytes_resident);
	FIELD(ibp_cache_class_stats_t, bytes_saved);
	FIELD(ibp_cache_class_stats_t, hist);

	STRUCT(ibp_slab_pool_opts_t);
	FIELD(ibp_slab_pool_opts_t, size);
	FIELD(ibp_slab_pool_opts_t, capacity_bytes);
	FIELD(ibp_slab_pool_opts_t, max_block_bytes);
	FIELD(ibp_slab_pool_opts_t, slab_bytes);
	FIELD(ibp_slab_pool_opts_t, class_step);
	FIELD(ibp_slab_pool_opts_t, policy);
	FIELD(ibp_slab_pool_opts_t, flags);
	FIELD(ibp_slab_pool_opts_t, on_evict);
	FIELD(ibp_slab_pool_opts_t, user);

	STRUCT(ibp_slab_pool_stats_t);
	FIELD(ibp_slab_pool_stats_t, allocs);
	FIELD(ibp_slab_pool_stats_t, frees);
	FIELD(ibp_slab_pool_stats_t, evictions);
	FIELD(ibp_slab_pool_stats_t, failed);
	FIELD(ibp_slab_pool_stats_t, reads);
	FIELD(ibp_slab_pool_stats_t, slab_moves);
	FIELD(ibp_slab_pool_stats_t, blocks);
	FIELD(ibp_slab_pool_stats_t, bytes);
	FIELD(ibp_slab_pool_stats_t, slot_bytes_used);
	FIELD(ibp_slab_pool_stats_t, pinned_blocks);
	FIELD(ibp_slab_pool_stats_t, capacity_bytes);
	FIELD(ibp_slab_pool_stats_t, max_block_bytes);
	FIELD(ibp_slab_pool_stats_t, slab_bytes);
	FIELD(ibp_slab_pool_stats_t, nslabs);
	FIELD(ibp_slab_pool_stats_t, free_slabs);
	FIELD(ibp_slab_pool_stats_t, meta_bytes);
	FIELD(ibp_slab_pool_stats_t, class_step);
	FIELD(ibp_slab_pool_stats_t, next_handle);
	FIELD(ibp_slab_pool_stats_t, nclasses);
	FIELD(ibp_slab_pool_stats_t, pinned_memory);
	return ferror(stdout) ? 1 : 0;
}
