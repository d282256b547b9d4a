"""CPU implementations of the IBP row codec: which exist, which this machine
runs, and choosing one per codec or store (ibp_codec_set_impl).

libibp has several decoders and encoders of the same format, bit-identical
in output: "portable" (plain C, any CPU), "bmi2" (x86-64 pext/pdep), "avx2"
(AVX2 + BMI2) and "avx512" (AVX-512 F/BW/VL/VBMI + BMI2). A codec starts
with "auto": the fastest the CPU supports (or "portable" when the
environment variable IBP_FORCE_PORTABLE=1 was set at load). Choosing one by
hand is for benchmarks and tests: every implementation gives the same bytes.
"""

from __future__ import annotations

import contextlib

from . import _errors, _lib

lib = _lib.lib

#: Every implementation name libibp knows, with its ibp_impl_t value.
#: "auto" picks the fastest this CPU supports.
IMPL_CODES = {"auto": 0, "portable": 1, "bmi2": 2, "avx512": 3, "avx2": 4}
IMPL_NAMES = {v: k for k, v in IMPL_CODES.items()}
#: Concrete implementations, slowest first (the order impls() lists them in).
_ORDER = ("portable", "bmi2", "avx2", "avx512")

_available = None
_default = None


def impl_code(name, func: str) -> int:
    """The ibp_impl_t value of an implementation name; InvalidArgumentError
    (a ValueError) for a name libibp does not know."""
    if isinstance(name, str):
        code = IMPL_CODES.get(name.lower())
        if code is not None:
            return code
    raise _errors.invalid(func, "unknown CPU implementation %r; libibp has %s"
                          % (name, ", ".join(repr(n) for n in IMPL_CODES)))


def set_codec_impl(codec_ptr, name, func: str) -> str:
    """ibp_codec_set_impl on a raw codec pointer; returns the implementation
    used before. Raises ibp.UnsupportedError when this CPU or build lacks it."""
    code = impl_code(name, func)
    before = IMPL_NAMES.get(int(lib.ibp_codec_impl(codec_ptr)), "unknown")
    _lib.check(lib.ibp_codec_set_impl(codec_ptr, code), "ibp_codec_set_impl")
    return before


def codec_impl(codec_ptr) -> str:
    """The implementation a raw codec pointer uses now (never "auto")."""
    return IMPL_NAMES.get(int(lib.ibp_codec_impl(codec_ptr)), "unknown")


def _probe():
    """Trains a one-row codec and tries every implementation on it."""
    global _available, _default
    import ctypes as C
    row = (C.c_uint8 * 16)()
    o = _lib.TrainOpts()
    lib.ibp_train_opts_default(C.byref(o))
    o.nthreads = 1
    h = _lib.c_vp()
    _lib.check(lib.ibp_codec_train(row, 1, 16, C.byref(o), C.byref(h)), "ibp_codec_train")
    try:
        _default = codec_impl(h)
        ok = []
        for name in _ORDER:
            if lib.ibp_codec_set_impl(h, IMPL_CODES[name]) == 0:
                ok.append(name)
            else:
                lib.ibp_clear_error()
        _available = tuple(ok)
    finally:
        lib.ibp_codec_free(h)


def impls() -> tuple:
    """The CPU implementations of the IBP codec that this machine and this
    libibp build can run, slowest first: a subset of ("portable", "bmi2",
    "avx2", "avx512"); "portable" is always there.

    >>> "portable" in ibp.impls()
    True
    """
    if _available is None:
        _probe()
    return _available


def default_impl() -> str:
    """The implementation "auto" picks on this machine: the fastest of
    impls(), or "portable" when IBP_FORCE_PORTABLE=1 was set when libibp
    was loaded."""
    if _default is None:
        _probe()
    return _default


class ImplMixin:
    """impl / set_impl / using_impl for objects holding an IBP codec
    (ibp.Codec, ibp.Store). Subclasses provide _impl_codec(), a context
    manager giving the raw codec pointer with no other call running on it,
    and _impl_name for messages."""

    __slots__ = ()

    @property
    def impl(self):
        """The CPU implementation this codec decodes and encodes with now
        ("portable", "bmi2", "avx2" or "avx512"; never "auto"), or None for a
        store whose codec is not IBP (exp, fp8)."""
        with self._impl_codec(exclusive=False) as c:
            return codec_impl(c) if c else None

    def set_impl(self, name: str) -> str:
        """Switches to CPU implementation `name` ("auto", "portable", "bmi2",
        "avx2", "avx512"; ibp.impls() lists what this machine runs) and
        returns the one used before. Output bytes never depend on the
        choice: it is for benchmarks and tests. Raises
        ibp.InvalidArgumentError for an unknown name, ibp.UnsupportedError
        when this CPU or build lacks the implementation (or the store's
        codec is not IBP), and ibp.InvalidArgumentError if another thread is
        using the object at that moment."""
        func = "%s.set_impl" % self._impl_name
        impl_code(name, func)
        with self._impl_codec(exclusive=True) as c:
            if not c:
                raise _errors.UnsupportedError(
                    "%s: a %s store has no IBP codec to choose an implementation for"
                    % (func, getattr(self, "codec", "?")), func=func, status=6)
            return set_codec_impl(c, name, func)

    @contextlib.contextmanager
    def using_impl(self, name: str):
        """Context manager: set_impl(name) for the duration of the block,
        then the implementation used before is restored.

            with codec.using_impl("portable"):
                enc = codec.encode(rows)
        """
        before = self.set_impl(name)
        try:
            yield self
        finally:
            self.set_impl(before)
