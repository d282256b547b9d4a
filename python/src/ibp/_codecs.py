"""One codec interface for the three codecs: ibp.codec(name, ...).

Every codec object has ``name`` ("ibp", "exp" or "fp8"), ``lossless``,
``encode(tensor, nthreads=0, out=None)`` and ``decode(encoded, out=None,
nthreads=0)``, and can be given to ``ibp.pack(array, path, codec=obj)``:

    c = ibp.codec("exp")                  # or "fp8" (lossy=True), or "ibp" (rows=...)
    enc = c.encode(t)                     # ibp.Chunks (ibp.Encoded for "ibp")
    back = c.decode(enc)
    ibp.pack(t, "t.ibp", codec=c)

An "ibp" codec is trained on rows (ibp.train); "exp" and "fp8" take their
options here once. The older spellings stay and mean the same:
ibp.exp.compress / compress_chunks, ibp.fp8.compress / compress_chunks,
ibp.train(...).encode, ibp.pack(..., codec="exp", exp_table=...).
"""

from __future__ import annotations

import numpy as np

import ctypes as C

from . import _chunks, _errors, _lib, _tensor

__all__ = ["codec", "ExpCodec", "Fp8Codec"]


class _ValueCodec:
    """Shared by ExpCodec and Fp8Codec: options kept, chunked calls."""

    name = ""
    lossless = True
    __slots__ = ("chunk_elems", "_opts")

    def _check_chunk(self, chunk_elems):
        if chunk_elems is not None and (isinstance(chunk_elems, bool) or
                                        not isinstance(chunk_elems, (int, np.integer)) or chunk_elems < 1):
            raise _errors.invalid("ibp.codec", "chunk_elems must be None or a positive integer, not %r"
                                  % (chunk_elems,))
        self.chunk_elems = None if chunk_elems is None else int(chunk_elems)

    @property
    def options(self) -> dict:
        """The codec's options (a copy), as ibp.codec(name, **options) takes them."""
        d = dict(self._opts)
        d["chunk_elems"] = self.chunk_elems
        return d

    def decode(self, encoded, out=None, nthreads: int = 0, trusted: bool = False):
        """Restores the tensor from encode's ibp.Chunks (or writes it into
        out=); every byte is checked (ibp.CorruptError on damage; trusted=True
        skips the checksums only)."""
        if not isinstance(encoded, _chunks.Chunks) or encoded.codec != self.name:
            raise _errors.invalid("%s.decode" % type(self).__name__, "expected ibp.Chunks of codec %r, not %s"
                                  % (self.name, type(encoded).__name__ if not isinstance(
                                      encoded, _chunks.Chunks) else "codec %r" % encoded.codec))
        dec = _chunks.decompress_exp_chunks if self.name == "exp" else _chunks.decompress_fp8_chunks
        return dec(encoded, out, nthreads, trusted)

    def decompress(self, buf, out=None, nthreads: int = 0, trusted: bool = False):
        """The single-buffer form's decode (as ibp.exp.decompress / ibp.fp8.decompress)."""
        dec = _tensor.decompress_exp if self.name == "exp" else _tensor.decompress_fp8
        return dec(buf, out, nthreads, trusted)

    def __eq__(self, other):
        return type(other) is type(self) and other.options == self.options

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.options.items()))))

    def __getstate__(self):
        return {"chunk_elems": self.chunk_elems, "_opts": dict(self._opts)}

    def __setstate__(self, st):
        self.chunk_elems, self._opts = st["chunk_elems"], dict(st["_opts"])

    def __repr__(self):
        return "ibp.codec(%r, %s)" % (self.name, ", ".join("%s=%r" % kv for kv in sorted(self.options.items())))


class ExpCodec(_ValueCodec):
    """The lossless exponent codec with fixed options (ibp.codec("exp"))."""

    name = "exp"
    lossless = True
    __slots__ = ()

    def __init__(self, table: str = "sigma", sigma: float = 0.0, chunk_elems=None, dtype=None):
        from ._store import exp_opts
        exp_opts("ibp.codec", table, 0, sigma)  # validates now, not at the first encode
        self._check_chunk(chunk_elems)
        self._opts = {"table": table, "sigma": float(sigma), "dtype": dtype}

    def encode(self, tensor, nthreads: int = 0, out=None):
        """ibp.exp.compress_chunks with this codec's options: an ibp.Chunks of
        chunk_elems-element blocks (None: one block for the whole tensor)."""
        o = self._opts
        return _chunks.compress_exp_chunks(tensor, self.chunk_elems,
                                           o["table"], o["sigma"], nthreads, o["dtype"], out, whole=True)

    def compress(self, tensor, nthreads: int = 0):
        """The single-buffer form (ibp.exp.compress with these options)."""
        o = self._opts
        return _tensor.compress_exp(tensor, o["table"], o["sigma"], nthreads, o["dtype"])


class Fp8Codec(_ValueCodec):
    """The LOSSY FP8 codec with fixed options (ibp.codec("fp8", lossy=True))."""

    name = "fp8"
    lossless = False
    __slots__ = ()

    def __init__(self, format: str = "e4m3", block: int = 256, hadamard: bool = True,  # noqa: A002
                 adaptive: bool = True, chunk_elems=None, dtype=None):
        from ._store import fp8_opts
        o = fp8_opts("ibp.codec", format, block, hadamard, adaptive, 0)
        n = _lib.c_u64()  # the block size's rule, checked now
        _lib.check(_lib.lib.ibp_fp8_encoded_size(C.byref(o), 1, C.byref(n)), "ibp_fp8_encoded_size")
        self._check_chunk(chunk_elems)
        self._opts = {"format": format, "block": int(block), "hadamard": bool(hadamard),
                      "adaptive": bool(adaptive), "dtype": dtype}

    def encode(self, tensor, nthreads: int = 0, out=None):
        """ibp.fp8.compress_chunks with this codec's options."""
        o = self._opts
        return _chunks.compress_fp8_chunks(tensor, self.chunk_elems,
                                           o["format"], o["block"], o["hadamard"], o["adaptive"], nthreads,
                                           o["dtype"], out, whole=True)

    def compress(self, tensor, nthreads: int = 0):
        """The single-buffer form (ibp.fp8.compress with these options)."""
        o = self._opts
        return _tensor.compress_fp8(tensor, o["format"], o["block"], o["hadamard"], o["adaptive"], nthreads,
                                    o["dtype"])


def codec(name: str, rows=None, *, lossy: bool = False, **options):
    """A codec object with encode/decode (module docstring).

    name "exp": options table ("sigma", "hist"), sigma, chunk_elems, dtype.
    name "fp8" (LOSSY, needs lossy=True): format ("e4m3", "e5m2"), block,
    hadamard, adaptive, chunk_elems, dtype.
    name "ibp": trains on `rows` (required) with ibp.train's options
    (chunk, threshold, sample, clusters, seed, nthreads, xval).
    "exp-rows" has no codec object: it exists as a container (ibp.pack or
    ibp.Store.from_array with codec="exp-rows")."""
    func = "ibp.codec"
    if name == "ibp":
        if rows is None:
            raise _errors.invalid(func, "codec 'ibp' is trained: pass rows=, the data it will encode")
        from ._codec import train
        return train(rows, **options)
    if rows is not None:
        raise _errors.invalid(func, "rows= is for codec 'ibp' (trained); %r takes options only" % (name,))
    if name == "exp":
        try:
            return ExpCodec(**options)
        except TypeError as e:
            raise _errors.invalid(func, "codec 'exp': %s" % e) from None
    if name == "fp8":
        if lossy is not True:
            raise _errors.invalid(func, "codec 'fp8' is lossy: pass lossy=True to accept it")
        try:
            return Fp8Codec(**options)
        except TypeError as e:
            raise _errors.invalid(func, "codec 'fp8': %s" % e) from None
    if name == "exp-rows":
        raise _errors.invalid(func, "codec 'exp-rows' is a container form only (rows decoded on their own "
                              "from a store): use ibp.pack(array, path, codec='exp-rows') or "
                              "ibp.Store.from_array(array, codec='exp-rows'); ibp.codec('exp') encodes "
                              "whole tensors with the exponent codec")
    raise _errors.invalid(func, "codec must be 'ibp', 'exp' or 'fp8', not %r" % (name,))
