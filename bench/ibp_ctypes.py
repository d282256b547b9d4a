"""Small ctypes binding to libibp.so for the Python benchmarks.

Only what the benchmarks need is bound: training with fixed or automatic
options, batch encode/decode of packed rows, the accessors that give the
metadata size, the paper-layout size and the CPU implementation switch.
Every libibp call is checked; a failing status raises :class:`IbpError` with
``ibp_status_string`` and ``ibp_last_error`` in its message.

The exponent codec (``include/ibp/exp.h``) and the FP8 codec
(``include/ibp/fp8.h``) are bound lazily: :func:`IbpLib.has` tells whether
the loaded library exports a symbol, so the harness can say "not available"
instead of failing when a build predates them.

Typical use::

    lib = IbpLib.load("build/libibp.so")
    codec = lib.train(rows_u8_2d, chunk_bytes=4, threshold=0.8)
    enc = codec.encode(rows_u8_2d, nthreads=1)
    back = codec.decode(enc, nthreads=1)
    codec.close()
"""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path

try:
    import numpy as np
except ImportError:  # the struct mirrors need only ctypes (tests/abi checks them without numpy)
    np = None

REPO_ROOT = Path(__file__).resolve().parent.parent

IMPL_AUTO, IMPL_PORTABLE, IMPL_BMI2 = 0, 1, 2
IMPL_NAMES = {IMPL_AUTO: "auto", IMPL_PORTABLE: "portable", IMPL_BMI2: "bmi2"}


class IbpError(RuntimeError):
    """A libibp call returned a status other than IBP_OK."""

    def __init__(self, func: str, status: int, text: str, detail: str):
        super().__init__(f"{func}: {text} ({status}): {detail}")
        self.status = status


# The Structure classes below mirror C structs by hand: every member, in
# order, with the C type's size. tests/abi/test_ctypes_abi.py compares each
# (c_name, c_header) with the compiler's layout; a member the mirror lacks at
# the end makes the C side write past the Python object.

class TrainOpts(C.Structure):
    """Mirror of ``ibp_train_opts_t`` (include/ibp/codec.h)."""

    c_name, c_header = "ibp_train_opts_t", "include/ibp/codec.h"
    _fields_ = [
        ("chunk_bytes", C.c_uint),
        ("threshold", C.c_double),
        ("sample", C.c_double),
        ("seed", C.c_uint64),
        ("clusters", C.c_uint),
        ("nthreads", C.c_int),
        ("xval", C.c_int),
    ]


def find_library(hint: str | None = None) -> Path:
    """Locate libibp.so.

    ``hint`` may be the .so file itself or a build directory holding it.
    Without a hint, ``build/libibp.so`` under the repository root is tried,
    then every ``build-*/libibp.so`` (newest first). Raises FileNotFoundError
    with the places looked at when nothing is found.
    """
    tried = []
    if hint:
        p = Path(hint)
        cands = [p] if p.suffix == ".so" or p.is_file() else [p / "libibp.so", p / "lib" / "libibp.so"]
    else:
        cands = [REPO_ROOT / "build" / "libibp.so"]
        others = sorted(REPO_ROOT.glob("build-*/libibp.so"), key=lambda q: q.stat().st_mtime,
                        reverse=True)
        cands += others
    for c in cands:
        tried.append(str(c))
        if c.is_file():
            return c.resolve()
    raise FileNotFoundError("libibp.so not found; looked at: " + ", ".join(tried))


@dataclass
class Encoded:
    """Rows encoded in the packed layout (see ibp_encode_batch)."""

    data: np.ndarray       # uint8, the first offsets[-1] bytes are the rows
    offsets: np.ndarray    # uint64, nrows + 1
    flags: np.ndarray      # uint8, nrows (row modes)
    clusters: np.ndarray   # uint8, nrows (cluster ids; zeros with one cluster)
    nrows: int
    row_bytes: int

    @property
    def payload_bytes(self) -> int:
        """Bytes of the encoded rows themselves (no flags, ids or offsets)."""
        return int(self.offsets[-1])

    def mode_counts(self) -> dict:
        """How many rows took each mode (raw / clean / bitmap / list)."""
        names = ("raw", "clean", "bitmap", "list")
        counts = np.bincount(self.flags & 3, minlength=4)
        return {names[i]: int(counts[i]) for i in range(4)}


class Codec:
    """A trained libibp IBP codec (owns the C handle; call close())."""

    def __init__(self, lib: "IbpLib", handle: C.c_void_p):
        self._lib = lib
        self._h = handle

    def close(self) -> None:
        """Free the C codec (idempotent)."""
        if self._h:
            self._lib.dll.ibp_codec_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # --- accessors -----------------------------------------------------
    @property
    def row_bytes(self) -> int:
        return int(self._lib.dll.ibp_codec_row_bytes(self._h))

    @property
    def chunk_bytes(self) -> int:
        return int(self._lib.dll.ibp_codec_chunk_bytes(self._h))

    @property
    def nchunks(self) -> int:
        return int(self._lib.dll.ibp_codec_nchunks(self._h))

    @property
    def nclusters(self) -> int:
        return int(self._lib.dll.ibp_codec_nclusters(self._h))

    @property
    def threshold(self) -> float:
        return float(self._lib.dll.ibp_codec_threshold(self._h))

    @property
    def has_xval(self) -> bool:
        """True when some chunk uses an exception value (Xval), which must be stored."""
        if not self._lib.has("ibp_codec_has_xval"):
            return False
        return bool(self._lib.dll.ibp_codec_has_xval(self._h))

    def metadata_bytes(self, with_xval: bool = True) -> int:
        """Bytes of the Mask and Bitval (and Xval, when used) of every cluster.

        k * D * C bytes per array; ``with_xval=False`` counts Mask and Bitval
        only (the paper's layout has no Xval).
        """
        arrays = 3 if (with_xval and self.has_xval) else 2
        return arrays * self.nclusters * self.nchunks * self.chunk_bytes

    def static_bits(self, cluster: int = 0) -> int:
        return int(self._lib.dll.ibp_codec_static_bits(self._h, cluster))

    def set_impl(self, impl: int) -> bool:
        """Select the CPU implementation; False if unsupported here."""
        st = self._lib.dll.ibp_codec_set_impl(self._h, impl)
        if st == 6:  # IBP_ERR_UNSUPPORTED
            self._lib.dll.ibp_clear_error()
            return False
        self._lib.check("ibp_codec_set_impl", st)
        return True

    def impl(self) -> str:
        return IMPL_NAMES.get(int(self._lib.dll.ibp_codec_impl(self._h)), "?")

    # --- batch coding --------------------------------------------------
    def encode(self, rows: np.ndarray, nthreads: int = 1, out: Encoded | None = None) -> Encoded:
        """Encode a C-contiguous uint8 (nrows, row_bytes) array.

        ``out`` (a previous result for the same shape) is reused to keep
        allocation out of timed loops.
        """
        rows = _as_rows(rows)
        n, r = rows.shape
        if out is None or out.nrows != n or out.row_bytes != r:
            cap = int(self._lib.dll.ibp_batch_bound(self._h, n))
            out = Encoded(np.empty(max(cap, 1), np.uint8), np.empty(n + 1, np.uint64),
                          np.empty(n, np.uint8), np.zeros(n, np.uint8), n, r)
        self._lib.check("ibp_encode_batch", self._lib.dll.ibp_encode_batch(
            self._h, _ptr(rows), n, _ptr(out.data), out.data.nbytes, _ptr(out.offsets),
            _ptr(out.flags), _ptr(out.clusters), nthreads))
        return out

    def decode(self, enc: Encoded, nthreads: int = 1, out: np.ndarray | None = None) -> np.ndarray:
        """Decode packed rows into a (nrows, row_bytes) uint8 array."""
        if out is None:
            out = np.empty((enc.nrows, enc.row_bytes), np.uint8)
        self._lib.check("ibp_decode_batch", self._lib.dll.ibp_decode_batch(
            self._h, _ptr(enc.data), enc.payload_bytes, _ptr(enc.offsets), _ptr(enc.flags),
            _ptr(enc.clusters), enc.nrows, _ptr(out), nthreads))
        return out

    def paper_layout_size(self, rows: np.ndarray) -> int:
        """Encoded size of ``rows`` in the IBP paper's original layout."""
        rows = _as_rows(rows)
        return int(self._lib.dll.ibp_paper_layout_size(self._h, _ptr(rows), rows.shape[0]))


class IbpLib:
    """A loaded libibp.so with argument types declared for the bound calls."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.dll = C.CDLL(str(self.path))
        self._declare()

    @classmethod
    def load(cls, hint: str | None = None) -> "IbpLib":
        return cls(find_library(hint))

    def has(self, symbol: str) -> bool:
        """True when the library exports ``symbol``."""
        try:
            getattr(self.dll, symbol)
            return True
        except AttributeError:
            return False

    @property
    def has_exp_codec(self) -> bool:
        """True when the exponent codec's batch API is exported."""
        return all(self.has(s) for s in EXP_SYMBOLS)

    def exp_codec(self) -> "ExpCodec":
        return ExpCodec(self)

    @property
    def has_fp8_codec(self) -> bool:
        """True when the FP8 block codec is exported."""
        return all(self.has(s) for s in FP8_SYMBOLS)

    def fp8_codec(self) -> "Fp8Codec":
        return Fp8Codec(self)

    @property
    def has_ibp_codec(self) -> bool:
        """True when training and batch coding are exported."""
        return all(self.has(s) for s in ("ibp_codec_train", "ibp_encode_batch",
                                          "ibp_decode_batch", "ibp_train_opts_default"))

    def _declare(self) -> None:
        d, vp, u64, u = self.dll, C.c_void_p, C.c_uint64, C.c_uint
        sigs = {
            "ibp_status_string": (C.c_char_p, [C.c_int]),
            "ibp_last_error": (C.c_char_p, []),
            "ibp_clear_error": (None, []),
            "ibp_train_opts_default": (None, [C.POINTER(TrainOpts)]),
            "ibp_codec_train": (C.c_int, [vp, u64, u64, C.POINTER(TrainOpts), C.POINTER(vp)]),
            "ibp_codec_free": (None, [vp]),
            "ibp_codec_row_bytes": (u64, [vp]),
            "ibp_codec_chunk_bytes": (u, [vp]),
            "ibp_codec_nchunks": (u64, [vp]),
            "ibp_codec_nclusters": (u, [vp]),
            "ibp_codec_threshold": (C.c_double, [vp]),
            "ibp_codec_has_xval": (C.c_int, [vp]),
            "ibp_codec_static_bits": (u64, [vp, u]),
            "ibp_codec_set_impl": (C.c_int, [vp, C.c_int]),
            "ibp_codec_impl": (C.c_int, [vp]),
            "ibp_batch_bound": (u64, [vp, u64]),
            "ibp_encode_batch": (C.c_int, [vp, vp, u64, vp, u64, vp, vp, vp, C.c_int]),
            "ibp_decode_batch": (C.c_int, [vp, vp, u64, vp, vp, vp, u64, vp, C.c_int]),
            "ibp_paper_layout_size": (u64, [vp, vp, u64]),
        }
        for name, (res, args) in sigs.items():
            if self.has(name):
                f = getattr(d, name)
                f.restype, f.argtypes = res, args

    def check(self, func: str, status: int) -> None:
        """Raise IbpError when ``status`` is not IBP_OK."""
        if status != 0:
            text = self.dll.ibp_status_string(status).decode()
            detail = (self.dll.ibp_last_error() or b"").decode(errors="replace")
            raise IbpError(func, status, text, detail)

    def train_opts(self, chunk_bytes: int | None = None, threshold: float | None = None,
                   sample: float | None = None, clusters: int | None = None,
                   seed: int | None = None, nthreads: int | None = None,
                   xval: int | None = None) -> TrainOpts:
        """ibp_train_opts_default() with the given fields overridden."""
        o = TrainOpts()
        self.dll.ibp_train_opts_default(C.byref(o))
        for k, v in dict(chunk_bytes=chunk_bytes, threshold=threshold, sample=sample,
                         clusters=clusters, seed=seed, nthreads=nthreads, xval=xval).items():
            if v is not None:
                setattr(o, k, v)
        return o

    def train(self, rows: np.ndarray, **opts) -> Codec:
        """Train a codec on a uint8 (nrows, row_bytes) array; see train_opts."""
        rows = _as_rows(rows)
        o = self.train_opts(**opts)
        h = C.c_void_p()
        self.check("ibp_codec_train", self.dll.ibp_codec_train(
            _ptr(rows), rows.shape[0], rows.shape[1], C.byref(o), C.byref(h)))
        return Codec(self, h)


# --------------------------------------------------------------------------
# exponent codec (include/ibp/exp.h), bound only when the library has it
# --------------------------------------------------------------------------

DTYPE_CODES = {"f16": 9, "bf16": 10, "f32": 11}  # ibp_dtype_t values (types.h)
EXP_TABLE_SIGMA, EXP_TABLE_HISTOGRAM, EXP_TABLE_GIVEN = 0, 1, 2


class ExpOpts(C.Structure):
    """Mirror of ``ibp_exp_opts_t`` (include/ibp/exp.h)."""

    c_name, c_header = "ibp_exp_opts_t", "include/ibp/exp.h"
    _fields_ = [
        ("table_mode", C.c_int),
        ("sigma", C.c_double),
        ("table", C.c_uint8 * 7),
        ("nthreads", C.c_int),
    ]


EXP_SYMBOLS = ("ibp_exp_opts_default", "ibp_exp_batch_bound", "ibp_exp_encode_batch",
               "ibp_exp_decode_batch")


class ExpCodec:
    """Batch calls of the exponent codec: one block per chunk of elements."""

    def __init__(self, lib: "IbpLib"):
        self._lib = lib
        d, vp, u64 = lib.dll, C.c_void_p, C.c_uint64
        d.ibp_exp_opts_default.restype, d.ibp_exp_opts_default.argtypes = None, [C.POINTER(ExpOpts)]
        d.ibp_exp_batch_bound.restype = C.c_int
        d.ibp_exp_batch_bound.argtypes = [C.c_int, u64, u64, C.POINTER(u64)]
        d.ibp_exp_encode_batch.restype = C.c_int
        d.ibp_exp_encode_batch.argtypes = [vp, C.c_int, u64, u64, C.POINTER(ExpOpts), vp, u64, vp]
        d.ibp_exp_decode_batch.restype = C.c_int
        d.ibp_exp_decode_batch.argtypes = [vp, u64, vp, C.c_int, u64, u64, vp, C.c_int]

    def opts(self, table_mode: int = EXP_TABLE_SIGMA, nthreads: int = 1) -> ExpOpts:
        o = ExpOpts()
        self._lib.dll.ibp_exp_opts_default(C.byref(o))
        o.table_mode, o.nthreads = table_mode, nthreads
        return o

    def buffers(self, dtype: str, n: int, chunk_elems: int):
        """(dst buffer, offsets) sized by ibp_exp_batch_bound."""
        cap = C.c_uint64()
        self._lib.check("ibp_exp_batch_bound", self._lib.dll.ibp_exp_batch_bound(
            DTYPE_CODES[dtype], n, chunk_elems, C.byref(cap)))
        nchunks = -(-n // chunk_elems)
        return np.empty(max(cap.value, 1), np.uint8), np.empty(nchunks + 1, np.uint64)

    def encode(self, src: np.ndarray, dtype: str, chunk_elems: int, opts: ExpOpts,
               dst: np.ndarray, offsets: np.ndarray) -> int:
        """Encode all of ``src`` (any shape, elements of ``dtype``); returns total bytes."""
        n = src.nbytes // (4 if dtype == "f32" else 2)
        self._lib.check("ibp_exp_encode_batch", self._lib.dll.ibp_exp_encode_batch(
            _ptr(src), DTYPE_CODES[dtype], n, chunk_elems, C.byref(opts), _ptr(dst), dst.nbytes,
            _ptr(offsets)))
        return int(offsets[-1])

    def decode(self, src: np.ndarray, size: int, offsets: np.ndarray, dtype: str, n: int,
               chunk_elems: int, out: np.ndarray, nthreads: int = 1) -> None:
        self._lib.check("ibp_exp_decode_batch", self._lib.dll.ibp_exp_decode_batch(
            _ptr(src), size, _ptr(offsets), DTYPE_CODES[dtype], n, chunk_elems, _ptr(out),
            nthreads))


# --------------------------------------------------------------------------
# FP8 block codec (include/ibp/fp8.h; lossy), bound only when present
# --------------------------------------------------------------------------

FP8_E4M3, FP8_E5M2 = 0, 1


class Fp8Opts(C.Structure):
    """Mirror of ``ibp_fp8_opts_t`` (include/ibp/fp8.h)."""

    c_name, c_header = "ibp_fp8_opts_t", "include/ibp/fp8.h"
    _fields_ = [
        ("format", C.c_int),
        ("block", C.c_uint32),
        ("hadamard", C.c_int),
        ("adaptive", C.c_int),
        ("nthreads", C.c_int),
    ]


FP8_SYMBOLS = ("ibp_fp8_opts_default", "ibp_fp8_encoded_size", "ibp_fp8_encode",
               "ibp_fp8_decode")


class Fp8Codec:
    """One FP8 stream per call (the CPU API has no chunked batch call)."""

    def __init__(self, lib: "IbpLib"):
        self._lib = lib
        d, vp, u64 = lib.dll, C.c_void_p, C.c_uint64
        d.ibp_fp8_opts_default.restype, d.ibp_fp8_opts_default.argtypes = None, [C.POINTER(Fp8Opts)]
        d.ibp_fp8_encoded_size.restype = C.c_int
        d.ibp_fp8_encoded_size.argtypes = [C.POINTER(Fp8Opts), u64, C.POINTER(u64)]
        d.ibp_fp8_encode.restype = C.c_int
        d.ibp_fp8_encode.argtypes = [vp, C.c_int, u64, C.POINTER(Fp8Opts), vp, u64, C.POINTER(u64)]
        d.ibp_fp8_decode.restype = C.c_int
        d.ibp_fp8_decode.argtypes = [vp, u64, C.c_int, u64, vp, C.c_int]

    def opts(self, fmt: int = FP8_E4M3, block: int | None = None, nthreads: int = 1) -> Fp8Opts:
        o = Fp8Opts()
        self._lib.dll.ibp_fp8_opts_default(C.byref(o))
        o.format, o.nthreads = fmt, nthreads
        if block:
            o.block = block
        return o

    def encoded_size(self, opts: Fp8Opts, n: int) -> int:
        v = C.c_uint64()
        self._lib.check("ibp_fp8_encoded_size", self._lib.dll.ibp_fp8_encoded_size(
            C.byref(opts), n, C.byref(v)))
        return int(v.value)

    def encode_into(self, src_ptr: int, dtype: str, n: int, opts: Fp8Opts, dst_ptr: int,
                    cap: int) -> int:
        """Encode n elements at address src_ptr into dst_ptr; returns the stream size."""
        size = C.c_uint64()
        self._lib.check("ibp_fp8_encode", self._lib.dll.ibp_fp8_encode(
            src_ptr, DTYPE_CODES[dtype], n, C.byref(opts), dst_ptr, cap, C.byref(size)))
        return int(size.value)

    def decode_into(self, src_ptr: int, size: int, dtype: str, n: int, dst_ptr: int,
                    nthreads: int = 1) -> None:
        self._lib.check("ibp_fp8_decode", self._lib.dll.ibp_fp8_decode(
            src_ptr, size, DTYPE_CODES[dtype], n, dst_ptr, nthreads))


def _as_rows(rows: np.ndarray) -> np.ndarray:
    """View any C-contiguous 2-D array as uint8 (nrows, row_bytes)."""
    if np is None:
        raise ImportError("ibp_ctypes: the array calls need numpy (bench/requirements.txt)")
    rows = np.ascontiguousarray(rows)
    if rows.ndim != 2:
        raise ValueError(f"expected a 2-D array of rows, got shape {rows.shape}")
    return rows.view(np.uint8).reshape(rows.shape[0], -1)


def _ptr(a: np.ndarray) -> C.c_void_p:
    return C.c_void_p(a.ctypes.data)


#: glibc reserves only a little static TLS for libraries loaded after start;
#: libjemalloc (a dependency of libibp.so) uses initial-exec TLS and does not
#: fit, so dlopen fails with "cannot allocate memory in static TLS block".
#: Raising the reserve must happen before the process starts.
TLS_TUNABLE = "glibc.rtld.optional_static_tls=65536"
_REEXEC_MARK = "IBP_BENCH_TLS_REEXEC"


def load_or_reexec(hint: str | None = None) -> IbpLib:
    """Load libibp.so; on the static-TLS dlopen failure, restart this process.

    The restart (os.execv of the same command) adds TLS_TUNABLE to
    GLIBC_TUNABLES, which enlarges glibc's static TLS reserve without
    changing the process's malloc (LD_PRELOAD of jemalloc would also work,
    but would swap the allocator under every other compressor timed here).
    It happens at most once; a second failure is raised.
    """
    import sys
    path = find_library(hint)
    try:
        return IbpLib(path)
    except OSError as e:
        if "static TLS" not in str(e) or os.environ.get(_REEXEC_MARK):
            raise
    env = dict(os.environ)
    env[_REEXEC_MARK] = "1"
    env["GLIBC_TUNABLES"] = ":".join(x for x in (env.get("GLIBC_TUNABLES"), TLS_TUNABLE) if x)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
    raise AssertionError("unreachable")


def reexec_note() -> str:
    """Says whether this process was restarted with the TLS tunable."""
    if os.environ.get(_REEXEC_MARK):
        return ("process restarted with GLIBC_TUNABLES=" + os.environ.get("GLIBC_TUNABLES", "")
                + " (libjemalloc's static TLS did not fit a late dlopen)")
    return ""


def library_version_note(lib: IbpLib) -> str:
    """A short description of the loaded library: path and modification time."""
    st = os.stat(lib.path)
    import time
    return f"{lib.path} (built {time.strftime('%Y-%m-%d %H:%M', time.localtime(st.st_mtime))})"
