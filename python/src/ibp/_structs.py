"""ctypes mirrors of the C option structs the package passes to libibp.

Standalone (no package imports) so that tests/abi/test_ctypes_abi.py can load
this file and compare every mirror here, member by member, with the layout
the C compiler gives (tests/abi/abi_layout.c); python/tests/test_layout.py
runs that check against the headers installed with the package.
"""

import ctypes as C


class TrainOpts(C.Structure):
    """Mirror of ibp_train_opts_t."""

    c_name = "ibp_train_opts_t"
    c_header = "include/ibp/codec.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("chunk_bytes", C.c_uint),
        ("threshold", C.c_double),
        ("sample", C.c_double),
        ("seed", C.c_uint64),
        ("clusters", C.c_uint),
        ("nthreads", C.c_int),
        ("xval", C.c_int),
    ]


class ExpOpts(C.Structure):
    """Mirror of ibp_exp_opts_t (`table` is ibp_exp_table_t, uint8_t field[7])."""

    c_name = "ibp_exp_opts_t"
    c_header = "include/ibp/exp.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("table_mode", C.c_int),
        ("sigma", C.c_double),
        ("table", C.c_uint8 * 7),
        ("nthreads", C.c_int),
        ("checksum", C.c_int),
    ]


class Fp8Opts(C.Structure):
    """Mirror of ibp_fp8_opts_t."""

    c_name = "ibp_fp8_opts_t"
    c_header = "include/ibp/fp8.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("format", C.c_int),
        ("block", C.c_uint32),
        ("hadamard", C.c_int),
        ("adaptive", C.c_int),
        ("nthreads", C.c_int),
        ("checksum", C.c_int),
    ]


class CacheOpts(C.Structure):
    """Mirror of ibp_cache_opts_t (`policy` is ibp_cache_policy_t, an int)."""

    c_name = "ibp_cache_opts_t"
    c_header = "include/ibp/cache.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("capacity_bytes", C.c_uint64),
        ("row_bytes", C.c_uint64),
        ("slab_bytes", C.c_uint64),
        ("class_step", C.c_uint64),
        ("raw_threshold", C.c_double),
        ("max_batch", C.c_uint64),
        ("max_callers", C.c_uint32),
        ("policy", C.c_int),
        ("flags", C.c_uint32),
        ("device", C.c_int),
    ]


_CACHE_STATS = ("requests hits misses store_rows store_bytes hit_bytes insertions evictions rejected "
                "invalidations bytes_copied slab_moves rows_resident bytes_resident slot_bytes_used "
                "raw_bytes_resident capacity_bytes slab_bytes nslabs free_slabs meta_bytes class_step").split()


class CacheStats(C.Structure):
    """Mirror of ibp_cache_stats_t."""

    c_name = "ibp_cache_stats_t"
    c_header = "include/ibp/cache.h"
    _fields_ = [(n, C.c_uint64) for n in _CACHE_STATS] + [("nclasses", C.c_uint32)]


class CacheClassStats(C.Structure):
    """Mirror of ibp_cache_class_stats_t."""

    c_name = "ibp_cache_class_stats_t"
    c_header = "include/ibp/cache.h"
    _fields_ = [(n, C.c_uint64) for n in ("slot_bytes slabs slots used hits insertions evictions "
                                           "bytes_resident bytes_saved hist").split()]


# void (*)(void *user, int64_t handle, const void *data, uint64_t len)
SlabPoolEvictFn = C.CFUNCTYPE(None, C.c_void_p, C.c_int64, C.c_void_p, C.c_uint64)


class SlabPoolOpts(C.Structure):
    """Mirror of ibp_slab_pool_opts_t."""

    c_name = "ibp_slab_pool_opts_t"
    c_header = "include/ibp/slab_pool.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("capacity_bytes", C.c_uint64),
        ("max_block_bytes", C.c_uint64),
        ("slab_bytes", C.c_uint64),
        ("class_step", C.c_uint64),
        ("policy", C.c_int),
        ("flags", C.c_uint32),
        ("on_evict", SlabPoolEvictFn),
        ("user", C.c_void_p),
    ]


class SlabPoolStats(C.Structure):
    """Mirror of ibp_slab_pool_stats_t."""

    c_name = "ibp_slab_pool_stats_t"
    c_header = "include/ibp/slab_pool.h"
    _fields_ = [(n, C.c_uint64) for n in (
        "allocs frees evictions failed reads slab_moves blocks bytes slot_bytes_used pinned_blocks "
        "capacity_bytes max_block_bytes slab_bytes nslabs free_slabs meta_bytes class_step").split()] + [
        ("next_handle", C.c_int64), ("nclasses", C.c_uint32), ("pinned_memory", C.c_int32)]
