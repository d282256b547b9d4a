"""libibp's other codecs in the comparison: the exponent codec and FP8.

:func:`discover` looks at the loaded library and returns one runner per
codec family. A runner whose codec is missing (older build, header not
landed yet) still appears, with ``status`` saying why, so the report can
show "not available" rather than silently dropping it.

The FP8 codec is lossy: its rows are reported with the error they make
instead of a byte-exact check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import measure
from measure import Result

REPO = Path(__file__).resolve().parent.parent
ELEM = {"f16": 2, "bf16": 2, "f32": 4}


class Missing:
    """A codec family that is not in this build: reports its status only."""

    def __init__(self, status: str):
        self.status = status

    def bench(self, ds, args) -> list[Result]:
        return []


class ExpRunner:
    """The exponent codec (include/ibp/exp.h) on f16 / bf16 / f32 data sets.

    Row granularity: one block per row (chunk_elems = elements per row), so
    each row decodes alone. Block granularity: one block per 64 KiB of
    elements. Two table modes: SIGMA (the default; table from the block's
    RMS) and HISTOGRAM (top-7 exponents of the block). Sizes are the sum of
    the blocks, which carry their own 64-byte headers and 128-byte
    alignment; one C call per batch (nthreads 1), buffers preallocated.
    """

    MODES = (("sigma", 0), ("histogram", 1))

    def __init__(self, lib):
        self.lib = lib
        self.codec = lib.exp_codec()
        self.status = "exponent codec: bound (ibp_exp_encode_batch / ibp_exp_decode_batch)"

    def bench(self, ds, args) -> list[Result]:
        if ds.dtype not in ELEM:
            return []
        out = []
        esz = ELEM[ds.dtype]
        n = ds.nbytes // esz
        for gran, chunk in (("row", ds.row_bytes // esz),
                            (f"{args.block_kib} KiB block", args.block_kib * 1024 // esz)):
            for mname, mode in self.MODES:
                out.append(self._one(ds, gran, chunk, n, mname, mode, args))
        return out

    def _one(self, ds, gran, chunk, n, mname, mode, args) -> Result:
        name = f"exp codec ({mname})"
        settings = f"table {mname}, {chunk} elements per block, 1 thread"
        src = ds.rows
        try:
            opts = self.codec.opts(mode, nthreads=1)
            dst, offs = self.codec.buffers(ds.dtype, n, chunk)
            out = np.empty_like(src)
            enc_s, size = measure.timed(
                lambda _: self.codec.encode(src, ds.dtype, chunk, opts, dst, offs),
                args.reps, args.warmup)
            dec_s, _ = measure.timed(
                lambda _: self.codec.decode(dst, size, offs, ds.dtype, n, chunk, out, 1),
                args.reps, args.warmup)
            ok = bool(np.array_equal(out, src))
            nblocks = len(offs) - 1
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "C (1 call)",
                          nblocks, ds.nbytes, int(size), enc_s, dec_s, ok,
                          f"{nblocks} self-describing blocks (64 B header, 128 B aligned)")
        except Exception as e:
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "-", 0,
                          ds.nbytes, 0, None, None, False, f"error: {e}")


class Fp8Runner:
    """The lossy FP8 (TACO) block codec (include/ibp/fp8.h) on f32/bf16/f16.

    The CPU API encodes one stream per call, so rows are encoded with one
    ctypes call each (a Python loop of ctypes calls: about a microsecond of
    overhead per call is included in the times). Block granularity: one
    stream per 64 KiB of input. Not byte-exact by design: the round trip is
    reported as "lossy" with the relative RMS error and the largest absolute
    error relative to max |x| (finite values), measured on the decoded data.
    """

    FORMATS = (("E4M3", 0),)

    def __init__(self, lib):
        self.codec = lib.fp8_codec()
        self.status = "FP8 codec: bound (ibp_fp8_encode / ibp_fp8_decode, lossy)"

    def bench(self, ds, args) -> list[Result]:
        if ds.dtype not in ELEM:
            return []
        out = []
        esz = ELEM[ds.dtype]
        for gran, chunk in (("row", ds.row_bytes // esz),
                            (f"{args.block_kib} KiB block", args.block_kib * 1024 // esz)):
            for fname, fmt in self.FORMATS:
                out.append(self._one(ds, gran, chunk, fname, fmt, args))
        return out

    def _one(self, ds, gran, chunk, fname, fmt, args) -> Result:
        name = f"FP8 {fname} (lossy)"
        esz = ELEM[ds.dtype]
        n = ds.nbytes // esz
        src = ds.rows
        try:
            opts = self.codec.opts(fmt, nthreads=1)
            settings = f"block {opts.block}, Hadamard + adaptive scale, {chunk} elements per stream"
            starts = list(range(0, n, chunk))
            counts = [min(chunk, n - s0) for s0 in starts]
            caps = [self.codec.encoded_size(opts, c) for c in counts]
            doffs = np.concatenate([[0], np.cumsum(caps)]).astype(np.int64)
            dst = np.empty(max(int(doffs[-1]), 1), np.uint8)
            out = np.empty_like(src)
            sb, db, ob = src.ctypes.data, dst.ctypes.data, out.ctypes.data
            jobs = [(sb + s0 * esz, c, db + int(o), cap, ob + s0 * esz)
                    for s0, c, o, cap in zip(starts, counts, doffs[:-1], caps)]
            enc, dec, dt = self.codec.encode_into, self.codec.decode_into, ds.dtype
            sizes = []

            def encode_all(_):
                sizes[:] = [enc(sp, dt, c, opts, dp, cap) for sp, c, dp, cap, _op in jobs]

            def decode_all(_):
                for (sp, c, dp, cap, op), sz in zip(jobs, sizes):
                    dec(dp, sz, dt, c, op, 1)

            enc_t, _ = measure.timed(encode_all, args.reps, args.warmup)
            dec_t, _ = measure.timed(decode_all, args.reps, args.warmup)
            rel_rms, rel_max = _errors(src, out, ds.dtype)
            note = (f"lossy: relative RMS error {rel_rms:.3g}, max |error| / max |x| {rel_max:.3g}; "
                    f"{len(jobs)} streams, one ctypes call each")
            return Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, gran, "ctypes loop",
                          len(jobs), ds.nbytes, int(sum(sizes)), enc_t, dec_t, "lossy", note,
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


def discover(lib) -> list:
    """Runners for the exponent and FP8 codecs (Missing ones say why)."""
    runners = []
    if lib is None:
        return [Missing("exponent codec: not available (no libibp loaded)"),
                Missing("FP8 codec: not available (no libibp loaded)")]
    for label, has, header, make in (
            ("exponent codec", lib.has_exp_codec, "exp.h", ExpRunner),
            ("FP8 codec", lib.has_fp8_codec, "fp8.h", Fp8Runner)):
        if has:
            runners.append(make(lib))
        elif (REPO / "include" / "ibp" / header).exists():
            runners.append(Missing(f"{label}: not available: include/ibp/{header} exists but "
                                   f"{lib.path.name} does not export its API (rebuild?)"))
        else:
            runners.append(Missing(f"{label}: not available: include/ibp/{header} not landed"))
    return runners
