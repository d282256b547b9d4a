"""Timed, verified round trips for bench/compare.py.

Every measurement runs single-threaded, does ``warmup`` untimed passes and
then ``reps`` timed passes over the whole input, and keeps the median.
Throughput is uncompressed bytes / median seconds, in GB/s (1e9 bytes/s).
Every round trip is checked byte for byte against an untouched copy of the
input; a mismatch is recorded (``verified = False``), never hidden.

What a timing includes is recorded with it (``timing``):

``C (1 call)``      one call of the ibp package for all rows (one libibp batch
                    call through ctypes); output buffers preallocated and
                    reused (out=), so no allocation is timed.
``C batch``         one C call for all rows (zstandard's multi_*_to_buffer):
                    each row is still its own zstd frame.
``ctypes loop``     one ctypes call per row or block from a Python loop
                    (libibp's FP8 codec, which has no CPU batch call: the
                    loop of ibp.fp8.compress_chunks / decompress_chunks).
``Python loop``     one Python call per row or block; includes the interpreter
                    loop, the binding's argument parsing and the allocation
                    of each result object. For small rows this overhead can
                    dominate; see ``python_floor``.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

GB = 1e9


@dataclass
class Result:
    """One (data set, method, granularity) measurement."""

    dataset: str
    cls: str
    dtype: str
    method: str
    package: str
    settings: str
    granularity: str          # "row" or "64 KiB block"
    timing: str               # what the times include (see module doc)
    units: int                # rows or blocks measured
    raw_bytes: int
    comp_bytes: int           # everything needed to decode (see notes)
    enc: "Timing | None"      # median seconds per pass (wall and CPU)
    dec: "Timing | None"
    verified: bool | str | None  # True / False byte-exact, "lossy" (FP8), None not run
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def enc_s(self) -> float | None:
        return self.enc.pick() if self.enc else None

    @property
    def dec_s(self) -> float | None:
        return self.dec.pick() if self.dec else None

    def gbs(self, which: str, clock: str) -> float | None:
        """GB/s of 'enc' or 'dec' measured with 'wall' or 'cpu' time."""
        t = self.enc if which == "enc" else self.dec
        s = getattr(t, clock) if t else None
        return self.raw_bytes / s / GB if s else None

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.comp_bytes if self.comp_bytes else float("nan")

    @property
    def savings(self) -> float:
        return 100.0 * (1.0 - self.comp_bytes / self.raw_bytes) if self.raw_bytes else float("nan")

    @property
    def enc_gbs(self) -> float | None:
        return self.raw_bytes / self.enc_s / GB if self.enc_s else None

    @property
    def dec_gbs(self) -> float | None:
        return self.raw_bytes / self.dec_s / GB if self.dec_s else None


#: A timed sample repeats a fast pass until it lasts at least this long.
MIN_SAMPLE_S = 0.05

#: Which clock the GB/s figures use: "cpu" (process CPU time) or "wall".
CLOCK = "cpu"


@dataclass
class Timing:
    """Median seconds of one pass by the wall clock and by process CPU time.

    Process CPU time (time.process_time: every thread of this process) equals
    wall time for single-threaded work on an otherwise idle core, and unlike
    wall time is not inflated while other jobs hold the core.
    """

    wall: float
    cpu: float
    wall_all: list = field(default_factory=list)
    cpu_all: list = field(default_factory=list)

    def pick(self, clock: str | None = None) -> float:
        return self.cpu if (clock or CLOCK) == "cpu" else self.wall


def timed(fn, reps: int, warmup: int, setup=None):
    """Timing (medians of one pass of ``fn(setup())``) and the last output.

    ``warmup`` untimed passes (at least one) come first; the first one also
    calibrates how many passes each of the ``reps`` timed samples repeats so
    that a sample lasts at least MIN_SAMPLE_S (timer noise on small inputs).
    ``setup`` (optional, untimed) makes a fresh argument for every pass. The
    garbage collector is paused during each timed sample.
    """
    out, first = None, None
    for i in range(max(1, warmup)):
        arg = setup() if setup else None
        t0 = time.perf_counter_ns()
        out = fn(arg)
        dt = (time.perf_counter_ns() - t0) / 1e9
        first = dt if first is None else first
    inner = max(1, min(1000, int(MIN_SAMPLE_S / max(first, 1e-7)) + 1))
    walls, cpus = [], []
    for _ in range(reps):
        args = [setup() if setup else None for _ in range(inner)]
        gc.collect()
        gc.disable()
        try:
            c0 = time.process_time_ns()
            t0 = time.perf_counter_ns()
            for a in args:
                out = fn(a)
            t1 = time.perf_counter_ns()
            c1 = time.process_time_ns()
        finally:
            gc.enable()
        walls.append((t1 - t0) / 1e9 / inner)
        cpus.append((c1 - c0) / 1e9 / inner)
    return Timing(statistics.median(walls), statistics.median(cpus), walls, cpus), out


def split_rows(rows: np.ndarray) -> list[bytes]:
    """Each row as its own ``bytes`` object (made once, outside timing)."""
    return [r.tobytes() for r in rows]


def split_blocks(buf: bytes, block: int) -> list[bytes]:
    """``buf`` cut into ``block``-byte pieces (the last may be shorter)."""
    return [buf[i:i + block] for i in range(0, len(buf), block)]


def _as_bytes(x) -> bytes:
    """Bytes of any buffer-like result (bytes, bytearray, ndarray, segment)."""
    if isinstance(x, (bytes, bytearray)):
        return bytes(x)
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).tobytes()
    if hasattr(x, "tobytes"):
        return x.tobytes()
    return bytes(memoryview(x))


def python_floor(pieces: list[bytes], reps: int, warmup: int) -> float:
    """Timing of a Python loop that only copies each piece.

    ``[bytes(bytearray(p)) ...]`` costs one loop step, two C calls and two
    allocations per piece: a generous lower bound on what any Python-looped
    per-row compressor call costs, and an upper bound on its throughput.
    """
    s, _ = timed(lambda _: [bytearray(p) for p in pieces], reps, warmup)
    return s


def run_pyloop(comp, pieces: list[bytes], reps: int, warmup: int):
    """Time compress and decompress of each piece with one Python call each.

    Returns (enc_s, dec_s, comp_bytes, verified, note).
    """
    sizes = [len(p) for p in pieces]
    if comp.mutates_input:
        def setup():
            return [bytearray(p) for p in pieces]
        enc_s, outs = timed(lambda a: [comp.compress(p) for p in a], reps, warmup, setup)
    else:
        enc_s, outs = timed(lambda _: [comp.compress(p) for p in pieces], reps, warmup)
    frames = [o if isinstance(o, (bytes, bytearray)) else _as_bytes(o) for o in outs]
    comp_bytes = sum(len(f) for f in frames)
    dec_s, back = timed(lambda _: [comp.decompress(f, n) for f, n in zip(frames, sizes)],
                        reps, warmup)
    ok = len(back) == len(pieces) and all(_as_bytes(b) == p for b, p in zip(back, pieces))
    return enc_s, dec_s, comp_bytes, ok, ""


def run_cbatch(comp, pieces: list[bytes], reps: int, warmup: int):
    """Time ``comp.batch_rows`` / ``batch_rows_dec`` (one C call for all pieces)."""
    enc_s, coll = timed(lambda _: comp.batch_rows(pieces), reps, warmup)
    comp_bytes = int(coll.size())
    dec_s, back = timed(lambda _: comp.batch_rows_dec(coll), reps, warmup)
    ok = len(back) == len(pieces) and all(back[i].tobytes() == pieces[i]
                                          for i in range(len(pieces)))
    return enc_s, dec_s, comp_bytes, ok, ""


def run_ibp(codec, rows: np.ndarray, reps: int, warmup: int):
    """Time libibp batch encode/decode (nthreads 1) of ``rows`` (an ibp.Codec).

    Returns (enc_s, dec_s, Encoded, verified).
    """
    enc = codec.encode(rows, nthreads=1)
    out = np.empty_like(rows)
    enc_s, _ = timed(lambda _: codec.encode(rows, nthreads=1, out=enc), reps, warmup)
    dec_s, _ = timed(lambda _: codec.decode(enc, nthreads=1, out=out), reps, warmup)
    ok = bool(np.array_equal(out, rows))
    return enc_s, dec_s, enc, ok


def ibp_stored_bytes(codec, enc) -> tuple[int, dict]:
    """Bytes IBP needs to decode ``enc``: rows + flags (+ cluster ids) + Mask/Bitval(/Xval).

    Offsets (the row index any random-access store needs, whatever the
    compressor) are not counted, for IBP or for anyone else.
    """
    flags = enc.nrows
    ids = enc.nrows if codec.nclusters > 1 else 0
    payload = int(enc.payload.nbytes)
    meta = metadata_bytes(codec)
    parts = dict(payload=payload, flags=flags, cluster_ids=ids, metadata=meta)
    return payload + flags + ids + meta, parts


def metadata_bytes(codec, with_xval: bool = True) -> int:
    """Bytes of the Mask and Bitval (and Xval, when used) of every cluster:
    k * D * C bytes per array; with_xval=False counts Mask and Bitval only
    (the paper's layout has no Xval)."""
    n = codec.masks.nbytes + codec.bitvals.nbytes
    return n + (codec.xvals.nbytes if with_xval and codec.has_xval else 0)


def mode_counts(enc) -> dict:
    """How many rows took each mode (raw / clean / bitmap / list)."""
    counts = np.bincount(enc.flags & 3, minlength=4)
    return {name: int(counts[i]) for i, name in enumerate(("raw", "clean", "bitmap", "list"))}
