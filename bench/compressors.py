"""General-purpose lossless compressors wrapped behind one small interface.

Each :class:`Compressor` compresses one independent buffer at a time (a row,
or a 64 KiB block) and decompresses it given the original size. Packages
that fail to import are kept in the list with ``available = False`` and the
reason, so the report can say "not available: reason" instead of failing.

All compressors run single-threaded (library thread pools set to 1).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Compressor:
    """One compressor configuration.

    ``compress(buf) -> bytes-like`` and ``decompress(comp, nbytes) -> bytes-like``
    work on one independent buffer. ``batch_rows`` (optional) compresses a
    list of buffers in one C call (no Python call per row) and
    ``batch_rows_dec`` decompresses that result; used for the "C batch"
    per-row timing. ``mutates_input`` marks compressors that write into their
    input buffer, which the harness then gives fresh copies.
    """

    name: str
    package: str
    settings: str
    compress: Callable | None = None
    decompress: Callable | None = None
    available: bool = True
    reason: str = ""
    version: str = ""
    dtypes: tuple = ()            # element types it applies to; () = all
    mutates_input: bool = False
    slow_per_call_us: float = 0.0  # rough per-call cost, to cap per-row runs
    batch_rows: Callable | None = None
    batch_rows_dec: Callable | None = None
    notes: list = field(default_factory=list)

    def applies(self, dtype: str) -> bool:
        """True when this compressor is meant for element type ``dtype``."""
        return not self.dtypes or dtype in self.dtypes


def _unavailable(name: str, package: str, settings: str, err: BaseException, **kw) -> Compressor:
    msg = f"{type(err).__name__}: {err}".splitlines()[0][:160]
    return Compressor(name, package, settings, available=False, reason=msg, **kw)


def make_zstd(level: int) -> Compressor:
    """zstd at ``level`` via PyPI ``zstandard`` (frames with content size)."""
    name, settings = f"zstd -{level}", f"level {level}, frame with content size, no checksum"
    try:
        import zstandard
    except Exception as e:  # pragma: no cover - depends on the machine
        return _unavailable(name, "zstandard", settings, e)
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=False, write_content_size=True)
    dctx = zstandard.ZstdDecompressor()

    def batch(rows):
        return cctx.multi_compress_to_buffer(rows, threads=1)

    def batch_dec(frames):
        return dctx.multi_decompress_to_buffer(frames, threads=1)

    return Compressor(name, "zstandard", settings, cctx.compress,
                      lambda c, n: dctx.decompress(c, max_output_size=n),
                      version=zstandard.__version__, batch_rows=batch, batch_rows_dec=batch_dec)


def make_lz4() -> Compressor:
    """LZ4 block format (default acceleration) via PyPI ``lz4``; size kept outside."""
    name, settings = "lz4", "block API, default mode, size stored outside"
    try:
        import lz4
        import lz4.block
    except Exception as e:  # pragma: no cover
        return _unavailable(name, "lz4", settings, e)
    return Compressor(name, "lz4", settings,
                      lambda b: lz4.block.compress(b, store_size=False),
                      lambda c, n: lz4.block.decompress(c, uncompressed_size=n),
                      version=lz4.__version__)


def make_blosc2(codec: str, clevel: int = 5, filt: str = "BITSHUFFLE") -> list[Compressor]:
    """blosc2 ``compress2`` with a filter and codec; one per element size.

    Blosc's shuffle filters need the element size (typesize), so the harness
    picks the variant by dtype: the returned list holds one Compressor per
    typesize (1, 2, 4, 8), each limited to matching dtypes.
    """
    name = f"blosc2 {filt.lower()}+{codec.lower()}"
    settings = f"clevel {clevel}, 1 thread, typesize = element size"
    try:
        import blosc2
    except Exception as e:  # pragma: no cover
        return [_unavailable(name, "blosc2", settings, e)]
    blosc2.set_nthreads(1)
    by_size = {1: ("u8", "i8", "bool"), 2: ("bf16", "f16", "u16", "i16"),
               4: ("f32", "u32", "i32"), 8: ("f64", "u64", "i64")}
    out = []
    for ts, dts in by_size.items():
        cp = blosc2.CParams(codec=getattr(blosc2.Codec, codec), clevel=clevel, typesize=ts,
                            nthreads=1, filters=[getattr(blosc2.Filter, filt)],
                            filters_meta=[0])
        dp = blosc2.DParams(nthreads=1)
        out.append(Compressor(name, "blosc2", settings,
                              (lambda b, cp=cp: blosc2.compress2(b, cparams=cp)),
                              (lambda c, n, dp=dp: blosc2.decompress2(c, dparams=dp)),
                              version=blosc2.__version__, dtypes=dts))
    return out


def make_bitshuffle_pkg() -> list[Compressor]:
    """The ``bitshuffle`` package's own bitshuffle+LZ4 (HDF5 filter format).

    It works on typed arrays, so one variant per element size is returned.
    """
    name, settings = "bitshuffle+lz4 (bitshuffle pkg)", "auto block size, typed by element size"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import bitshuffle
    except Exception as e:  # pragma: no cover
        return [_unavailable(name, "bitshuffle", settings, e)]
    try:
        from importlib.metadata import version
        ver = version("bitshuffle")
    except Exception:  # pragma: no cover
        ver = "?"
    by_size = {1: (np.uint8, ("u8", "i8", "bool")), 2: (np.uint16, ("bf16", "f16", "u16", "i16")),
               4: (np.uint32, ("f32", "u32", "i32")), 8: (np.uint64, ("f64", "u64", "i64"))}
    out = []
    for ts, (npt, dts) in by_size.items():
        def comp(b, npt=npt):
            return bitshuffle.compress_lz4(np.frombuffer(b, dtype=npt))

        def dec(c, n, npt=npt, ts=ts):
            return bitshuffle.decompress_lz4(np.frombuffer(c, np.uint8), (n // ts,), np.dtype(npt))

        out.append(Compressor(name, "bitshuffle", settings, comp, dec, version=ver, dtypes=dts))
    return out


def make_zipnn() -> list[Compressor]:
    """ZipNN (byte grouping + Huffman/zstd) for bf16 and f32 byte buffers.

    ZipNN 0.5.x reorders its input buffer in place, even an immutable
    ``bytes`` object, so the harness hands it fresh ``bytearray`` copies
    (``mutates_input``) and compares against an untouched reference.
    """
    name, settings = "ZipNN", "method AUTO, threads 1, input_format byte"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import zipnn
    except Exception as e:
        return [_unavailable(name, "zipnn", settings, e, dtypes=("bf16", "f32"))]
    try:
        from importlib.metadata import version
        ver = version("zipnn")
    except Exception:  # pragma: no cover
        ver = "?"
    out = []
    for dt, zdt in (("bf16", "bfloat16"), ("f32", "float32")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z = zipnn.ZipNN(input_format="byte", bytearray_dtype=zdt, threads=1)
        out.append(Compressor(name, "zipnn", settings, z.compress,
                              (lambda c, n, z=z: z.decompress(c)), version=ver, dtypes=(dt,),
                              mutates_input=True, slow_per_call_us=80.0))
    return out


def all_compressors(skip: tuple = ()) -> list[Compressor]:
    """Every general-purpose compressor the comparison uses, in table order."""
    makers = [
        ("zstd -1", lambda: [make_zstd(1)]),
        ("zstd -3", lambda: [make_zstd(3)]),
        ("lz4", lambda: [make_lz4()]),
        ("blosc2 bitshuffle+lz4", lambda: make_blosc2("LZ4")),
        ("blosc2 bitshuffle+zstd", lambda: make_blosc2("ZSTD")),
        ("bitshuffle", make_bitshuffle_pkg),
        ("ZipNN", make_zipnn),
    ]
    out = []
    for key, mk in makers:
        if any(s.lower() in key.lower() for s in skip):
            continue
        out.extend(mk())
    return out


def pick(comps: list[Compressor], dtype: str) -> list[Compressor]:
    """The variants that apply to ``dtype`` (unavailable ones included once)."""
    seen, out = set(), []
    for c in comps:
        if not c.available:
            if c.name not in seen and c.applies(dtype):
                out.append(c)
                seen.add(c.name)
            continue
        if c.applies(dtype) and c.name not in seen:
            out.append(c)
            seen.add(c.name)
    return out
