"""libibp's other codecs in the comparison: the exponent codec and FP8.

:func:`discover` returns one runner per codec family, each calling the
ibp package (ibp.exp / ibp.fp8 compress_chunks and decompress_chunks).
Without libibp they still appear, with ``status`` saying why, so the report
can show "not available" rather than silently dropping them.

The FP8 codec is lossy: its rows are reported with the error they make
instead of a byte-exact check.
"""

from __future__ import annotations

import numpy as np

import measure
from measure import Result

ELEM = {"f16": 2, "bf16": 2, "f32": 4}


class Missing:
    """A codec family that is not in this build: reports its status only."""

    def __init__(self, status: str):
        self.status = status

    def bench(self, ds, args) -> list[Result]:
        return []


def typed(rows: np.ndarray, dtype: str):
    """(typed view of uint8 rows, dtype option for the ibp package): bf16 rows
    are uint16 bit patterns read with dtype="bf16"."""
    if dtype == "f32":
        return rows.view(np.float32), None
    if dtype == "f16":
        return rows.view(np.float16), None
    return rows.view(np.uint16), "bf16"


class _ChunkRunner:
    """A libibp block codec run per row and per block of args.block_kib KiB,
    once per variant in VARIANTS ((label, option) pairs: _one's arguments)."""

    VARIANTS: tuple = ()

    def bench(self, ds, args) -> list[Result]:
        if ds.dtype not in ELEM:
            return []
        out = []
        esz = ELEM[ds.dtype]
        for gran, chunk in (("row", ds.row_bytes // esz),
                            (f"{args.block_kib} KiB block", args.block_kib * 1024 // esz)):
            for label, option in self.VARIANTS:
                out.append(self._one(ds, gran, chunk, label, option, args))
        return out


class ExpRunner(_ChunkRunner):
    """The exponent codec (include/ibp/exp.h) on f16 / bf16 / f32 data sets.

    Row granularity: one block per row (chunk_elems = elements per row), so
    each row decodes alone. Block granularity: one block per 64 KiB of
    elements. Two table modes: SIGMA (the default; table from the block's
    RMS) and HISTOGRAM (top-7 exponents of the block). Sizes are the sum of
    the blocks, which carry their own 64-byte headers and 128-byte
    alignment. ibp.exp.compress_chunks / decompress_chunks: one libibp call
    per batch (nthreads 1), buffers preallocated (out=).
    """

    VARIANTS = (("sigma", "sigma"), ("histogram", "hist"))  # (name, table)

    def __init__(self, ibp):
        self.ibp = ibp
        self.status = ("exponent codec: ibp.exp.compress_chunks / decompress_chunks "
                       "(ibp_exp_encode_batch / ibp_exp_decode_batch)")

    def _one(self, ds, gran, chunk, mname, table, args) -> Result:
        name = f"exp codec ({mname})"
        settings = f"table {mname}, {chunk} elements per block, 1 thread"
        src = ds.rows
        exp = self.ibp.exp
        try:
            view, dt = typed(src, ds.dtype)
            out = np.empty_like(src)
            oview = typed(out, ds.dtype)[0]
            ch = exp.compress_chunks(view, chunk, table=table, nthreads=1, dtype=dt)
            enc_s, _ = measure.timed(
                lambda _: exp.compress_chunks(view, chunk, table=table, nthreads=1, dtype=dt,
                                              out=ch), args.reps, args.warmup)
            dec_s, _ = measure.timed(
                lambda _: exp.decompress_chunks(ch, out=oview, nthreads=1), args.reps, args.warmup)
            ok = bool(np.array_equal(out, src))
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "C (1 call)",
                          ch.nchunks, ds.nbytes, ch.nbytes, enc_s, dec_s, ok,
                          f"{ch.nchunks} self-describing blocks (64 B header, 128 B aligned)")
        except Exception as e:
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "-", 0,
                          ds.nbytes, 0, None, None, False, f"error: {e}")


class Fp8Runner(_ChunkRunner):
    """The lossy FP8 (TACO) block codec (include/ibp/fp8.h) on f32/bf16/f16.

    The CPU API encodes one stream per call, so rows are encoded with one
    ctypes call each (ibp.fp8.compress_chunks / decompress_chunks loop over
    the chunks: about a microsecond of overhead per call is included in the
    times). Block granularity: one stream per 64 KiB of input. Not
    byte-exact by design: the round trip is reported as "lossy" with the
    relative RMS error and the largest absolute error relative to max |x|
    (finite values), measured on the decoded data.
    """

    VARIANTS = (("E4M3", "e4m3"),)  # (name, format)
    BLOCK = 256  # libibp's default FP8 scale block

    def __init__(self, ibp):
        self.ibp = ibp
        self.status = ("FP8 codec: ibp.fp8.compress_chunks / decompress_chunks "
                       "(ibp_fp8_encode / ibp_fp8_decode per chunk, lossy)")

    def _one(self, ds, gran, chunk, fname, fmt, args) -> Result:
        name = f"FP8 {fname} (lossy)"
        src = ds.rows
        fp8 = self.ibp.fp8
        try:
            settings = (f"block {self.BLOCK}, Hadamard + adaptive scale, {chunk} elements per "
                        "stream")
            view, dt = typed(src, ds.dtype)
            out = np.empty_like(src)
            oview = typed(out, ds.dtype)[0]
            kw = dict(format=fmt, block=self.BLOCK, nthreads=1, dtype=dt)
            ch = fp8.compress_chunks(view, chunk, **kw)
            enc_t, _ = measure.timed(lambda _: fp8.compress_chunks(view, chunk, out=ch, **kw),
                                     args.reps, args.warmup)
            dec_t, _ = measure.timed(lambda _: fp8.decompress_chunks(ch, out=oview, nthreads=1),
                                     args.reps, args.warmup)
            rel_rms, rel_max = _errors(src, out, ds.dtype)
            note = (f"lossy: relative RMS error {rel_rms:.3g}, max |error| / max |x| {rel_max:.3g}; "
                    f"{ch.nchunks} streams, one ctypes call each")
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "ctypes loop",
                          ch.nchunks, ds.nbytes, ch.nbytes, enc_t, dec_t, "lossy", note,
                          extra=dict(rel_rms=rel_rms, rel_max=rel_max))
        except Exception as e:
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", "-", gran, "-", 0,
                          ds.nbytes, 0, None, None, False, f"error: {e}")


def as_float64(rows: np.ndarray, dtype: str) -> np.ndarray:
    """Values of uint8 rows holding f32 / f16 / bf16 elements, as float64."""
    flat = np.ascontiguousarray(rows).reshape(-1)
    if dtype == "f32":
        return flat.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return flat.view(np.float16).astype(np.float64)
    bits = flat.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


def _errors(ref: np.ndarray, got: np.ndarray, dtype: str) -> tuple[float, float]:
    """(relative RMS error, max abs error / max |x|) over finite reference values."""
    x, y = as_float64(ref, dtype), as_float64(got, dtype)
    m = np.isfinite(x)
    x, y = x[m], y[m]
    if not x.size:
        return float("nan"), float("nan")
    err = y - x
    den = float(np.sqrt(np.mean(x * x))) or 1.0
    mx = float(np.max(np.abs(x))) or 1.0
    return float(np.sqrt(np.mean(err * err)) / den), float(np.max(np.abs(err)) / mx)


def discover(ibp) -> list:
    """Runners for the exponent and FP8 codecs (Missing ones say why);
    `ibp` is the package, or None without libibp."""
    if ibp is None:
        return [Missing("exponent codec: not available (no libibp loaded)"),
                Missing("FP8 codec: not available (no libibp loaded)")]
    return [ExpRunner(ibp), Fp8Runner(ibp)]
