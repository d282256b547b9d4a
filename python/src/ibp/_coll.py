"""Compressed collectives (include/ibp/coll.h) from Python.

libibp's collective algorithms (ring AllGather / ReduceScatter / AllReduce,
pairwise AllToAll, DynamiQ, PTS; docs/COLLECTIVES.md) are written once
against a byte transport: one primitive, ``sendrecv`` (send a message to one
rank while receiving one from another, bounded by a timeout). This module
lets Python supply that primitive:

    comm = Communicator(transport, policy="always")   # collective: every rank
    comm.allreduce(x, out=x, codec="exp")             # in place, lossless
    comm.stats()["last_ratio"]

``transport`` is any object with ``rank``, ``nranks`` and
``sendrecv(dst, payload, src, rcap, timeout) -> numpy.uint8 array or None``
(dst/src < 0: no send / no receive; payload is a uint8 NumPy array this
module owns, timeout in seconds). libibp calls it back through ctypes from
inside the collective: the algorithm, the codecs, the per-message headers
(so mismatched calls across ranks are detected), the switcher and the
statistics are the C library's, and only the bytes travel through Python.
ibp.torch.ddp builds one over torch.distributed (isend/irecv + Work.wait).
InprocWorld gives libibp's own in-process transport (threads as ranks).

Every failure raises an ibp.Error subclass: IBP_ERR_INVALID_ARG (bad
arguments, a mismatch across ranks) InvalidArgumentError, IBP_ERR_CORRUPT
(a payload failed validation) CorruptError, IBP_ERR_IO (transport failure,
timeout, broken communicator) FileError (libibp's IO status), with the
transport's own exception text in the detail when it raised. After a
failure the communicator is broken (libibp's rule): later calls raise.
"""

from __future__ import annotations

import ctypes as C
import itertools
import threading

import numpy as np

from . import _arrays, _errors, _lib
from ._handle import Handle, Owner

lib = _lib.lib
P = C.POINTER
c_u64, c_i64, c_int, c_vp = C.c_uint64, C.c_int64, C.c_int, C.c_void_p

# ibp_coll_codec_t, by the names ibp_coll_codec_name gives.
CODECS = {"none": 0, "exp": 1, "fp8": 2, "dynamiq": 3, "lsq": 4, "pts": 5}
LOSSLESS = ("none", "exp")
POLICIES = {"auto": 0, "always": 1, "never": 2}
DECISIONS = {0: "plain", 1: "compress", 2: "not_worth", 3: "incompressible"}
OPS = {"allgather": 0, "reducescatter": 1, "allreduce": 2, "alltoall": 3}  # ibp_coll_op_t
FLOAT_CODES = (9, 10, 11)  # f16, bf16, f32: the dtypes the collectives take
_SUM = 0

_OK, _ERR_INVALID, _ERR_IO = 0, 1, 5


class CollOpts(C.Structure):
    """Mirror of ibp_coll_opts_t (checked in tests/test_torch_ddp.py)."""

    c_name = "ibp_coll_opts_t"
    c_header = "include/ibp/coll.h"
    _fields_ = [
        ("size", C.c_uint64),
        ("timeout_ms", c_i64),
        ("policy", c_int),
        ("calibrate", c_int),
        ("rate", C.c_double),
        ("nthreads", c_int),
    ]


class CollStats(C.Structure):
    """Mirror of ibp_coll_stats_t."""

    c_name = "ibp_coll_stats_t"
    c_header = "include/ibp/coll.h"
    _fields_ = [
        ("calls", c_u64),
        ("compressed", c_u64),
        ("plain", c_u64),
        ("not_worth", c_u64),
        ("incompressible", c_u64),
        ("logical_bytes", c_u64),
        ("wire_bytes", c_u64),
        ("alpha_s", C.c_double),
        ("beta_Bps", C.c_double),
        ("exp_enc_Bps", C.c_double),
        ("exp_dec_Bps", C.c_double),
        ("fp8_enc_Bps", C.c_double),
        ("fp8_dec_Bps", C.c_double),
        ("last_decision", c_int),
        ("last_ratio", C.c_double),
        ("native", c_u64),
    ]


SENDRECV = C.CFUNCTYPE(c_int, c_vp, c_int, c_vp, c_u64, c_int, c_vp, c_u64, P(c_u64), c_i64)
DESTROY = C.CFUNCTYPE(None, c_vp)
ISEND = C.CFUNCTYPE(c_int, c_vp, c_int, c_vp, c_u64, P(c_vp))
IRECV = C.CFUNCTYPE(c_int, c_vp, c_int, c_vp, c_u64, P(c_vp))
TEST = C.CFUNCTYPE(c_int, c_vp, c_vp, P(c_int), P(c_u64))
CANCEL = C.CFUNCTYPE(c_int, c_vp, c_vp)


class CollAsync(C.Structure):
    """Mirror of ibp_coll_async_t."""

    c_name = "ibp_coll_async_t"
    c_header = "include/ibp/coll.h"
    _fields_ = [
        ("isend", ISEND),
        ("irecv", IRECV),
        ("test", TEST),
        ("cancel", CANCEL),
    ]


class CollTransport(C.Structure):
    """Mirror of ibp_coll_transport_t."""

    c_name = "ibp_coll_transport_t"
    c_header = "include/ibp/coll.h"
    _fields_ = [
        ("rank", c_int),
        ("nranks", c_int),
        ("ctx", c_vp),
        ("sendrecv", SENDRECV),
        ("destroy", DESTROY),
        ("native", c_vp),  # const ibp_coll_native_t *: none from Python (the algorithms run)
        ("async", c_vp),  # const ibp_coll_async_t *: _PyTransport's, when the transport has isend etc.
    ]


_FUNCS = {
    "ibp_coll_opts_default": (None, [P(CollOpts)]),
    "ibp_coll_codec_name": (C.c_char_p, [c_int]),
    "ibp_coll_comm_create": (c_int, [P(CollTransport), P(CollOpts), P(c_vp)]),
    "ibp_coll_comm_free": (None, [c_vp]),
    "ibp_coll_comm_rank": (c_int, [c_vp]),
    "ibp_coll_comm_nranks": (c_int, [c_vp]),
    "ibp_coll_comm_stats": (c_int, [c_vp, P(CollStats)]),
    "ibp_coll_comm_set_policy": (c_int, [c_vp, c_int]),
    "ibp_coll_comm_plain": (c_int, [c_vp, c_int, c_u64, c_int, c_int, P(c_int)]),
    "ibp_coll_comm_set_rate": (c_int, [c_vp, C.c_double]),
    "ibp_coll_comm_set_lsq_bits": (c_int, [c_vp, c_int]),
    "ibp_coll_inproc_create": (c_int, [c_int, P(c_vp)]),
    "ibp_coll_inproc_transport": (c_int, [c_vp, c_int, P(CollTransport)]),
    "ibp_coll_inproc_free": (None, [c_vp]),
    "ibp_coll_allgather": (c_int, [c_vp, c_vp, c_u64, c_int, c_int, c_vp, c_vp]),
    "ibp_coll_reducescatter": (c_int, [c_vp, c_vp, c_u64, c_int, c_int, c_int, c_vp, c_vp]),
    "ibp_coll_allreduce": (c_int, [c_vp, c_vp, c_u64, c_int, c_int, c_int, c_vp, c_vp]),
    "ibp_coll_alltoall": (c_int, [c_vp, c_vp, c_u64, c_int, c_int, c_vp, c_vp]),
    "ibp_coll_alltoallv": (c_int, [c_vp, P(c_u64), P(c_u64), c_vp, P(c_u64), P(c_u64), c_int, c_int, c_vp,
                                   c_vp]),
}

_fn = {}
for _name, (_res, _args) in _FUNCS.items():
    _f = getattr(lib, _name, None)
    if _f is None:  # a libibp older than the collectives
        continue
    _f.restype = _res
    _f.argtypes = _args
    _fn[_name] = _f
del _name, _res, _args, _f


def _c(name):
    f = _fn.get(name)
    if f is None:
        raise _errors.UnsupportedError("%s: the loaded libibp (%s) has no compressed collectives"
                                       % (name, _lib.path), func=name, status=6)
    return f


def codec_id(name, func: str) -> int:
    """ibp_coll_codec_t of a codec name ("none", "exp", "fp8", "dynamiq",
    "lsq", "pts"); InvalidArgumentError otherwise."""
    if isinstance(name, str) and name.lower() in CODECS:
        return CODECS[name.lower()]
    raise _errors.invalid(func, "unknown codec %r (one of %s)" % (name, ", ".join(CODECS)))


def policy_id(name, func: str) -> int:
    if isinstance(name, str) and name.lower() in POLICIES:
        return POLICIES[name.lower()]
    raise _errors.invalid(func, "unknown policy %r (one of %s)" % (name, ", ".join(POLICIES)))


def make_opts(func, timeout, policy, calibrate, rate, nthreads) -> CollOpts:
    o = CollOpts()
    _c("ibp_coll_opts_default")(C.byref(o))
    try:
        ms = int(round(float(timeout) * 1000))
    except (TypeError, ValueError):
        raise _errors.invalid(func, "timeout must be a number of seconds, not %r" % (timeout,)) from None
    if ms <= 0:
        raise _errors.invalid(func, "timeout must be > 0 seconds (got %r)" % (timeout,))
    o.timeout_ms = ms
    o.policy = policy_id(policy, func)
    o.calibrate = 1 if calibrate else 0
    o.rate = float(rate)
    o.nthreads = int(nthreads)
    return o


class TransportError(Exception):
    """A transport's failure (timeout, dead peer, ...), reported to libibp as
    IBP_ERR_IO; ``status`` may be set to another ibp_status_t."""

    def __init__(self, message: str, status: int = _ERR_IO):
        super().__init__(message)
        self.status = status


class _PyTransport:
    """Adapts a Python transport object to ibp_coll_transport_t. The C
    callback copies the outgoing message into a NumPy array owned here (a
    transport may keep it after a timeout without touching freed C memory)
    and copies the reply into libibp's buffer. It never raises into C.

    A transport that also has isend(dst, payload) -> req, irecv(src, cap)
    -> req, test(req) -> (done, message or None) and cancel(req) gets an
    async table too (libibp's pipelined rings: pieces in flight). Requests
    are Python objects kept here under an integer id that C holds; the
    transport writes only buffers it owns, so a cancelled request never
    touches libibp's memory (cancel answers 1)."""

    def __init__(self, t):
        self.t = t
        self.error = None  # the exception text of the latest failed callback
        self.cfunc = SENDRECV(self._sendrecv)
        self.async_table = None
        if all(callable(getattr(t, a, None)) for a in ("isend", "irecv", "test", "cancel")):
            self._reqs = {}
            self._ids = itertools.count(1)  # never 0: C's NULL
            self.async_table = CollAsync(ISEND(self._isend), IRECV(self._irecv), TEST(self._test),
                                         CANCEL(self._cancel))

    def _fail(self, e):
        self.error = "%s: %s" % (type(e).__name__, e)
        return getattr(e, "status", _ERR_IO) if isinstance(e, TransportError) else _ERR_IO

    def _register(self, r, buf, cap, req):
        i = next(self._ids)
        self._reqs[i] = (r, buf, cap)
        req[0] = i

    def _isend(self, ctx, dst, buf, nbytes, req):
        try:
            payload = np.empty(nbytes, dtype=np.uint8)
            if nbytes:
                C.memmove(payload.ctypes.data, buf, nbytes)
            self._register(self.t.isend(dst, payload), None, 0, req)
            return _OK
        except BaseException as e:  # noqa: B902 (nothing may propagate into C)
            return self._fail(e)

    def _irecv(self, ctx, src, buf, cap, req):
        try:
            self._register(self.t.irecv(src, int(cap)), buf, int(cap), req)
            return _OK
        except BaseException as e:  # noqa: B902
            return self._fail(e)

    def _test(self, ctx, req, done, nbytes):
        i = req or 0
        r, buf, cap = self._reqs.get(i, (None, None, 0))
        try:
            if r is None:
                raise TransportError("unknown request %d" % i, _ERR_INVALID)
            fin, got = self.t.test(r)
            if not fin:
                done[0] = 0
                return _OK
            del self._reqs[i]
            n = 0
            if buf is not None:
                g = np.ascontiguousarray(np.asarray(got).reshape(-1).view(np.uint8))
                if g.size > cap:
                    raise TransportError("mismatch: %d-byte message exceeds the expected %d bytes"
                                         % (g.size, cap), _ERR_INVALID)
                if g.size:
                    C.memmove(buf, g.ctypes.data, g.size)
                n = g.size
            nbytes[0] = n
            done[0] = 1
            return _OK
        except BaseException as e:  # noqa: B902
            self._reqs.pop(i, None)  # released on any failure
            return self._fail(e)

    def _cancel(self, ctx, req):
        r = self._reqs.pop(req or 0, (None,))[0]
        try:
            if r is not None:
                self.t.cancel(r)
        except BaseException as e:  # noqa: B902
            self.error = "%s: %s" % (type(e).__name__, e)
        return 1

    def _sendrecv(self, ctx, dst, sbuf, sbytes, src, rbuf, rcap, rbytes, timeout_ms):
        try:
            payload = None
            if dst >= 0:
                payload = np.empty(sbytes, dtype=np.uint8)
                if sbytes:
                    C.memmove(payload.ctypes.data, sbuf, sbytes)
            got = self.t.sendrecv(dst, payload, src, int(rcap), timeout_ms / 1000.0)
            if src >= 0:
                if got is None:
                    raise TransportError("the transport returned no message from rank %d" % src)
                g = np.ascontiguousarray(np.asarray(got).reshape(-1).view(np.uint8))
                if g.size > rcap:
                    raise TransportError("mismatch: %d-byte message from rank %d exceeds the expected %d "
                                         "bytes" % (g.size, src, rcap), _ERR_INVALID)
                if g.size:
                    C.memmove(rbuf, g.ctypes.data, g.size)
                rbytes[0] = g.size
            return _OK
        except BaseException as e:  # noqa: B902 (nothing may propagate into C)
            self.error = "%s: %s" % (type(e).__name__, e)
            return getattr(e, "status", _ERR_IO) if isinstance(e, TransportError) else _ERR_IO


class InprocWorld:
    """libibp's in-process transport: nranks ranks as threads of this process
    (ibp_coll_inproc_*). ``Communicator(world.transport(r))`` on rank r's
    thread (creation is collective: every rank's thread makes its own)."""

    def __init__(self, nranks: int):
        h = c_vp()
        _lib.check(_c("ibp_coll_inproc_create")(int(nranks), C.byref(h)), "ibp_coll_inproc_create")
        self._h = h
        self.nranks = int(nranks)

    def transport(self, rank: int) -> CollTransport:
        t = CollTransport()
        _lib.check(_c("ibp_coll_inproc_transport")(self._h, int(rank), C.byref(t)), "ibp_coll_inproc_transport")
        t._world = self  # the world outlives the communicator made from it
        return t

    def close(self):
        if self._h:
            _c("ibp_coll_inproc_free")(self._h)
            self._h = None


def _host(x, func, out=False):
    h = _arrays.as_host(x, func, writable=out, copy_ok=not out)
    if h.code not in FLOAT_CODES:
        raise _errors.invalid(func, "needs bfloat16, float16 or float32 data, not %s" % _arrays.DTYPE_NAMES[h.code])
    return h


class Communicator(Owner):
    """An ibp_coll_comm_t over a transport (a Python object, see the module
    docstring, or InprocWorld.transport(rank)). Collective: every rank makes
    one, in the same order, and calls the same collectives in the same order
    with the same count, dtype and codec (differences raise
    InvalidArgumentError "mismatch" instead of hanging). policy: "auto"
    (the switcher decides per call), "always" or "never"; calibrate measures
    the link and the codecs at creation; timeout (seconds) bounds every wait.
    One thread at a time."""

    def __init__(self, transport, *, timeout: float = 60.0, policy: str = "auto", calibrate: bool = True,
                 rate: float = 0.0, nthreads: int = 1):
        func = "ibp.Communicator"
        o = make_opts(func, timeout, policy, calibrate, rate, nthreads)
        self._py = None
        if isinstance(transport, CollTransport):
            t = transport
            self._transport = transport  # kept alive as long as the C communicator
        else:
            for a in ("rank", "nranks", "sendrecv"):
                if not hasattr(transport, a):
                    raise _errors.invalid(func, "the transport has no %r" % a)
            self._py = _PyTransport(transport)
            t = CollTransport()
            t.rank = int(transport.rank)
            t.nranks = int(transport.nranks)
            t.ctx = None
            t.sendrecv = self._py.cfunc
            if self._py.async_table is not None:
                setattr(t, "async", C.cast(C.pointer(self._py.async_table), c_vp))
            self._transport = transport  # kept alive as long as the C communicator
        h = c_vp()
        self._lock = threading.Lock()
        self._check(_c("ibp_coll_comm_create")(C.byref(t), C.byref(o), C.byref(h)), "ibp_coll_comm_create")
        # process_bound: its transport and helper thread stay with the parent at a fork
        self._handle = Handle(h, _c("ibp_coll_comm_free"), "ibp.Communicator", process_bound=True)
        self.rank = _c("ibp_coll_comm_rank")(h)
        self.nranks = _c("ibp_coll_comm_nranks")(h)

    def close(self) -> None:
        """Frees the communicator, then lets a Python transport stop its own
        threads (its close(), if it has one). Idempotent."""
        super().close()
        t = self._transport if self._py is not None else None
        if t is not None and callable(getattr(t, "close", None)):
            t.close()

    # -- plumbing --
    def _check(self, st, func):
        if st == 0:
            if self._py is not None:
                self._py.error = None
            return
        perr = self._py.error if self._py is not None else None
        if self._py is not None:
            self._py.error = None
        if perr:
            raise _errors.from_status(st, func, _lib.status_string(st), "transport: " + perr)
        _lib.check(st, func)

    def _comm(self, func):
        # One thread at a time (the class's contract), so no acquire/release.
        if self._handle.closed:
            raise _errors.closed(func, "ibp.Communicator")
        self._handle._check_process(func)
        return self._handle._h

    def stats(self) -> dict:
        """This rank's ibp_coll_stats_t as a dict (last_decision by name)."""
        s = CollStats()
        self._check(_c("ibp_coll_comm_stats")(self._comm("stats"), C.byref(s)), "ibp_coll_comm_stats")
        d = {name: getattr(s, name) for name, _ in CollStats._fields_}
        d["last_decision"] = DECISIONS.get(d["last_decision"], str(d["last_decision"]))
        return d

    def plain(self, op: str, count: int, dtype, codec: str = "exp") -> bool:
        """True when a call of `op` ("allgather", "reducescatter",
        "allreduce", "alltoall") with `count` elements of `dtype` (count as
        the collective takes it) and `codec` goes plain on every rank
        whatever the data (ibp_coll_comm_plain): the same answer on every
        rank, so a caller may send such calls its own way (a native
        collective) without asking the others. InvalidArgumentError for an
        unknown op, dtype or codec, or a codec the op does not take."""
        func = "plain"
        if op not in OPS:
            raise _errors.invalid(func, "unknown collective %r (one of %s)" % (op, ", ".join(OPS)))
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise _errors.invalid(func, "count must be a non-negative int, not %r" % (count,))
        out = c_int(0)
        self._check(_c("ibp_coll_comm_plain")(self._comm(func), OPS[op], count, _arrays.dtype_code(dtype),
                                              codec_id(codec, func), C.byref(out)), "ibp_coll_comm_plain")
        return bool(out.value)

    def set_policy(self, policy: str):
        self._check(_c("ibp_coll_comm_set_policy")(self._comm("set_policy"), policy_id(policy, "set_policy")),
                    "ibp_coll_comm_set_policy")

    def set_lsq_bits(self, bits: int):
        """Width of the LSQ codes this rank sends: 2, 4 (default) or 8 bits
        per element; local (each message names its width).
        InvalidArgumentError otherwise."""
        if isinstance(bits, bool) or not isinstance(bits, int):
            raise _errors.invalid("set_lsq_bits", "bits must be an int, not %r" % (bits,))
        with self._lock:
            self._check(_c("ibp_coll_comm_set_lsq_bits")(self._comm("set_lsq_bits"), bits),
                        "ibp_coll_comm_set_lsq_bits")

    # -- collectives (host arrays; numpy or torch CPU tensors) --
    def _run(self, name, *args):
        with self._lock:
            st = _c(name)(*args)
            self._check(st, name)

    def allreduce(self, send, out=None, codec: str = "exp"):
        """Sum over ranks of `send` (any shape), into `out` (same shape and
        dtype; may be `send` itself: in place) or a new array."""
        func = "allreduce"
        cid = codec_id(codec, func)
        s = _host(send, func)
        if out is None:
            res, optr = _arrays.empty(s.shape, s.code, s.kind)
        else:
            o = _arrays.check_out(out, s.shape, s.code, func)
            res, optr = out, o.ptr
        self._run("ibp_coll_allreduce", s.ptr, optr, s.np.size, s.code, _SUM, cid, self._comm(func), None)
        return res

    def allgather(self, send, out=None, codec: str = "exp"):
        """Every rank's `send` (n elements, flattened) stacked: shape (nranks, n)."""
        func = "allgather"
        cid = codec_id(codec, func)
        s = _host(send, func)
        n = s.np.size
        shape = (self.nranks, n)
        if out is None:
            res, optr = _arrays.empty(shape, s.code, s.kind)
        else:
            o = _arrays.check_out(out, shape, s.code, func)
            res, optr = out, o.ptr
        self._run("ibp_coll_allgather", s.ptr, optr, n, s.code, cid, self._comm(func), None)
        return res

    def reducescatter(self, send, out=None, codec: str = "exp"):
        """`send` holds nranks * n elements; returns this rank's n-element
        block of the sum over ranks."""
        func = "reducescatter"
        cid = codec_id(codec, func)
        s = _host(send, func)
        if s.np.size % self.nranks:
            raise _errors.invalid(func, "%d elements is not a multiple of %d ranks" % (s.np.size, self.nranks))
        n = s.np.size // self.nranks
        if out is None:
            res, optr = _arrays.empty((n,), s.code, s.kind)
        else:
            o = _arrays.check_out(out, (n,), s.code, func)
            res, optr = out, o.ptr
        self._run("ibp_coll_reducescatter", s.ptr, optr, n, s.code, _SUM, cid, self._comm(func), None)
        return res

    def alltoall(self, send, out=None, codec: str = "exp"):
        """`send` holds nranks blocks of n elements (block p goes to rank p);
        returns shape (nranks, n): block r came from rank r."""
        func = "alltoall"
        cid = codec_id(codec, func)
        s = _host(send, func)
        if s.np.size % self.nranks:
            raise _errors.invalid(func, "%d elements is not a multiple of %d ranks" % (s.np.size, self.nranks))
        n = s.np.size // self.nranks
        shape = (self.nranks, n)
        if out is None:
            res, optr = _arrays.empty(shape, s.code, s.kind)
        else:
            o = _arrays.check_out(out, shape, s.code, func)
            res, optr = out, o.ptr
        self._run("ibp_coll_alltoall", s.ptr, optr, n, s.code, cid, self._comm(func), None)
        return res
