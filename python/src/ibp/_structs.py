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
        ("table_mode", C.c_int),
        ("sigma", C.c_double),
        ("table", C.c_uint8 * 7),
        ("nthreads", C.c_int),
    ]


class Fp8Opts(C.Structure):
    """Mirror of ibp_fp8_opts_t."""

    c_name = "ibp_fp8_opts_t"
    c_header = "include/ibp/fp8.h"
    _fields_ = [
        ("format", C.c_int),
        ("block", C.c_uint32),
        ("hadamard", C.c_int),
        ("adaptive", C.c_int),
        ("nthreads", C.c_int),
    ]
