"""Loading libibp.so and declaring the C functions the package calls.

The package talks to libibp through its C ABI with ctypes (python/README.md
explains the choice). ctypes.CDLL releases the GIL around every foreign call,
so long gathers, encodes and decodes run in parallel with other Python
threads. Every function used is declared here with its exact argument and
result types; the three option structs are mirrored in _structs.py and
tests/test_layout.py compares their sizes and field offsets with the C
compiler's view of include/ibp/*.h.
"""

from __future__ import annotations

import ctypes as C
import glob
import os
import threading

from . import _errors

_here = os.path.dirname(os.path.abspath(__file__))

c_u64 = C.c_uint64
c_i64 = C.c_int64
c_vp = C.c_void_p
c_int = C.c_int
c_uint = C.c_uint
P = C.POINTER


from ._structs import ExpOpts, Fp8Opts, TrainOpts  # noqa: E402

# name: (restype, argtypes). restype c_int for ibp_status_t.
_S = c_int
_FUNCS = {
    # status, version, allocator
    "ibp_status_string": (C.c_char_p, [c_int]),
    "ibp_last_error": (C.c_char_p, []),
    "ibp_clear_error": (None, []),
    "ibp_version_string": (C.c_char_p, []),
    "ibp_host_allocator": (C.c_char_p, []),
    "ibp_dtype_size": (C.c_size_t, [c_int]),
    "ibp_dtype_name": (C.c_char_p, [c_int]),
    # IBP codec
    "ibp_train_opts_default": (None, [P(TrainOpts)]),
    "ibp_codec_train": (_S, [c_vp, c_u64, c_u64, P(TrainOpts), P(c_vp)]),
    "ibp_codec_create_ex": (_S, [c_u64, c_uint, c_uint, c_vp, c_vp, c_vp, P(c_vp)]),
    "ibp_codec_free": (None, [c_vp]),
    "ibp_codec_row_bytes": (c_u64, [c_vp]),
    "ibp_codec_chunk_bytes": (c_uint, [c_vp]),
    "ibp_codec_nchunks": (c_u64, [c_vp]),
    "ibp_codec_nclusters": (c_uint, [c_vp]),
    "ibp_codec_threshold": (C.c_double, [c_vp]),
    "ibp_codec_mask": (c_vp, [c_vp, c_uint]),
    "ibp_codec_bitval": (c_vp, [c_vp, c_uint]),
    "ibp_codec_xval": (c_vp, [c_vp, c_uint]),
    "ibp_codec_has_xval": (c_int, [c_vp]),
    "ibp_codec_static_bits": (c_u64, [c_vp, c_uint]),
    "ibp_codec_set_impl": (_S, [c_vp, c_int]),
    "ibp_codec_impl": (c_int, [c_vp]),
    "ibp_paper_layout_size": (c_u64, [c_vp, c_vp, c_u64]),
    "ibp_batch_bound": (c_u64, [c_vp, c_u64]),
    "ibp_encode_batch": (_S, [c_vp, c_vp, c_u64, c_vp, c_u64, c_vp, c_vp, c_vp, c_int]),
    "ibp_decode_batch": (_S, [c_vp, c_vp, c_u64, c_vp, c_vp, c_vp, c_u64, c_vp, c_int]),
    # containers
    "ibp_pack": (_S, [C.c_char_p, c_vp, c_int, c_uint, P(c_u64), P(TrainOpts), c_int]),
    "ibp_pack_with_codec": (_S, [C.c_char_p, c_vp, c_vp, c_int, c_uint, P(c_u64), c_int, c_int]),
    "ibp_pack_exp": (_S, [C.c_char_p, c_vp, c_int, c_uint, P(c_u64), P(ExpOpts), c_u64]),
    "ibp_pack_fp8": (_S, [C.c_char_p, c_vp, c_int, c_uint, P(c_u64), P(Fp8Opts), c_u64]),
    "ibp_pack_exp_rows": (_S, [C.c_char_p, c_vp, c_int, c_uint, P(c_u64), c_int]),
    "ibp_container_codec_id": (c_int, [c_vp]),
    "ibp_container_layout": (c_int, [c_vp]),
    "ibp_container_lossy": (c_int, [c_vp]),
    "ibp_container_file_bytes": (c_u64, [c_vp]),
    "ibp_container_chunk_bytes": (c_uint, [c_vp]),
    "ibp_container_threshold": (C.c_double, [c_vp]),
    "ibp_container_nblocks": (c_u64, [c_vp]),
    "ibp_container_block_rows": (c_u64, [c_vp]),
    "ibp_container_version_major": (c_uint, [c_vp]),
    "ibp_container_version_minor": (c_uint, [c_vp]),
    "ibp_container_fp8_opts": (_S, [c_vp, P(Fp8Opts)]),
    "ibp_container_payload": (c_vp, [c_vp, P(c_u64)]),
    "ibp_container_image": (c_vp, [c_vp, P(c_u64)]),
    "ibp_container_open_memory": (_S, [c_vp, c_u64, c_uint, P(c_vp)]),
    "ibp_container_close": (None, [c_vp]),
    # store
    "ibp_store_open": (_S, [C.c_char_p, c_uint, P(c_vp)]),
    "ibp_store_close": (None, [c_vp]),
    "ibp_store_from_container": (_S, [c_vp, P(c_vp)]),
    "ibp_store_gather": (_S, [c_vp, c_vp, c_u64, c_vp, c_int]),
    "ibp_store_decode_all": (_S, [c_vp, c_vp, c_int]),
    "ibp_store_verify": (_S, [c_vp, c_int]),
    "ibp_store_nrows": (c_u64, [c_vp]),
    "ibp_store_row_bytes": (c_u64, [c_vp]),
    "ibp_store_dtype": (c_int, [c_vp]),
    "ibp_store_ndim": (c_uint, [c_vp]),
    "ibp_store_shape": (P(c_u64), [c_vp]),
    "ibp_store_codec": (c_vp, [c_vp]),
    "ibp_store_container": (c_vp, [c_vp]),
    "ibp_store_max_threads": (c_int, [c_vp]),
    "ibp_store_embedding_bag": (_S, [c_vp, c_int, c_uint, c_vp, c_int, c_u64, c_vp, c_u64, c_vp, c_i64,
                                     c_vp, c_int]),
    # exponent codec
    "ibp_exp_opts_default": (None, [P(ExpOpts)]),
    "ibp_exp_encode_bound": (_S, [c_int, c_u64, P(c_u64)]),
    "ibp_exp_mean_square": (_S, [c_vp, c_int, c_u64, P(C.c_double)]),
    "ibp_exp_static_size": (_S, [c_int, c_u64, P(c_u64)]),
    "ibp_exp_raw_size": (_S, [c_int, c_u64, P(c_u64)]),
    "ibp_exp_encode": (_S, [c_vp, c_int, c_u64, P(ExpOpts), c_vp, c_u64, P(c_u64)]),
    "ibp_exp_decode": (_S, [c_vp, c_u64, c_int, c_u64, c_vp, c_int]),
    "ibp_exp_decode_ext": (_S, [c_vp, c_u64, c_int, c_u64, c_vp, c_int, C.c_uint]),
    "ibp_checksum64": (c_u64, [c_vp, c_u64, c_u64]),
    "ibp_exp_batch_bound": (_S, [c_int, c_u64, c_u64, P(c_u64)]),
    "ibp_exp_encode_batch": (_S, [c_vp, c_int, c_u64, c_u64, P(ExpOpts), c_vp, c_u64, c_vp]),
    "ibp_exp_decode_batch": (_S, [c_vp, c_u64, c_vp, c_int, c_u64, c_u64, c_vp, c_int]),
    "ibp_exp_decode_batch_ext": (_S, [c_vp, c_u64, c_vp, c_int, c_u64, c_u64, c_vp, c_int, C.c_uint]),
    # fp8 codec
    "ibp_fp8_opts_default": (None, [P(Fp8Opts)]),
    "ibp_fp8_encoded_size": (_S, [P(Fp8Opts), c_u64, P(c_u64)]),
    "ibp_fp8_encode": (_S, [c_vp, c_int, c_u64, P(Fp8Opts), c_vp, c_u64, P(c_u64)]),
    "ibp_fp8_decode": (_S, [c_vp, c_u64, c_int, c_u64, c_vp, c_int]),
    "ibp_fp8_decode_ext": (_S, [c_vp, c_u64, c_int, c_u64, c_vp, c_int, C.c_uint]),
    # CUDA (present in every build; NO_DEVICE without a GPU)
    "ibp_cuda_built": (c_int, []),
    "ibp_cuda_device_count": (_S, [P(c_int)]),
    "ibp_cuda_store_from_store": (_S, [c_vp, c_int, c_uint, c_vp, P(c_vp)]),
    "ibp_cuda_store_free": (None, [c_vp]),
    "ibp_cuda_store_on_device": (c_int, [c_vp]),
    "ibp_cuda_store_errors": (_S, [c_vp, P(c_u64), c_vp]),
    "ibp_cuda_sync": (_S, [c_vp]),
    "ibp_gather_cuda": (_S, [c_vp, c_vp, c_u64, c_vp, c_vp, c_vp, c_vp]),
    "ibp_store_embedding_bag_cuda": (_S, [c_vp, c_int, c_uint, c_vp, c_int, c_u64, c_vp, c_u64, c_vp, c_i64,
                                          c_int, c_vp, c_vp, c_vp]),
}


def _candidates():
    env = os.environ.get("IBP_LIBRARY")
    if env:
        return [env]
    found = []
    for pat in ("lib/libibp.so", "lib64/libibp.so", "lib/*/libibp.so", "lib*/libibp.so.*"):
        found += sorted(glob.glob(os.path.join(_here, pat)))
    return found


def _load():
    tried = []
    for path in _candidates():
        tried.append(path)
        if os.path.isfile(path):
            lib = C.CDLL(path)  # CDLL (not PyDLL): the GIL is released during calls
            for name, (res, args) in _FUNCS.items():
                f = getattr(lib, name)
                f.restype = res
                f.argtypes = args
            return lib, path
    raise ImportError(
        "ibp: libibp.so not found (looked at: %s); reinstall with `pip install ./python` "
        "or set IBP_LIBRARY to a libibp.so" % (", ".join(tried) or os.path.join(_here, "lib")))


lib, path = _load()

_status_lock = threading.Lock()


def last_error() -> str:
    s = lib.ibp_last_error()
    return s.decode("utf-8", "replace") if s else ""


def status_string(st: int) -> str:
    s = lib.ibp_status_string(st)
    return s.decode("utf-8", "replace") if s else "unknown status"


def check(st: int, func: str) -> None:
    """Raises the exception for a non-OK status, with libibp's detail message.
    Must run on the thread that made the call (the detail is thread-local)."""
    if st != 0:
        raise _errors.from_status(st, func, status_string(st), last_error())
