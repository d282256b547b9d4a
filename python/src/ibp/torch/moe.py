"""ibp.torch.moe: compressed all-to-all for expert-parallel MoE layers.

    import ibp.torch.moe as ibp_moe
    # as torch.distributed.all_to_all_single (rows split along dim 0):
    ibp_moe.all_to_all_single(out, x, out_splits, in_splits, codec="lsq")
    # differentiable (dispatch and combine of an MoE layer):
    recv = ibp_moe.all_to_all(x, out_splits, in_splits, codec="lsq")
    # backward: the reverse all-to-all of the gradients (backward_codec)

``all_to_all_single(output, input, output_split_sizes=None,
input_split_sizes=None, group=None, codec="lsq", bits=4, comm=None)`` has
torch.distributed.all_to_all_single's semantics: ``input`` is cut along dim
0 into one block per rank (equal blocks when ``input_split_sizes`` is None,
else those row counts), block p goes to rank p, and ``output`` receives rank
r's block at row offset sum(output_split_sizes[:r]) (equal blocks when None).
It runs libibp's AllToAll(v) (ibp_coll_alltoallv, docs/COLLECTIVES.md) with
torch.distributed as its transport (ibp.torch.ddp.TorchTransport, one
libibp communicator per process group, made on first use: every rank must
make its first call on a group in the same order, as SPMD code does).
Returns ``output``. Codecs:

    "none"  plain bytes (a baseline)
    "exp"   lossless exponent codec: output bit-identical to "none" and to
            torch.distributed.all_to_all_single
    "fp8"   LOSSY FP8 E4M3 + Hadamard (TACO)
    "lsq"   LOSSY RCMoE LSQ, unbiased: rows of 256 elements of each message,
            each scaled by its max, ``bits``-bit stochastic sign+magnitude
            codes (~bits + 0.02 bits per element); a rank's own block is
            copied exactly. ``bits``: 2, 4 (default) or 8 (sign included;
            ibp_coll_comm_set_lsq_bits, set on the communicator per call)

``all_to_all(input, output_split_sizes=None, input_split_sizes=None,
group=None, codec="lsq", bits=4, backward_codec=None, comm=None)`` returns
a new tensor and is a torch.autograd.Function: its backward is the reverse
all-to-all of the output's gradient (splits swapped) with
``backward_codec`` (default: ``codec``). LSQ's noise is unbiased, so the
expected gradients are the exact ones.

Tensors: float32, bfloat16 or float16, any shape with the same trailing
dims in input and output; CPU tensors are used in place (a non-contiguous
input through a copy; ``output`` must be contiguous), CUDA ones through
host copies. The group's backend must carry CPU tensors (gloo). Pass
``comm=ibp.torch.ddp.communicator(group, ...)`` to choose the
communicator's options (timeout, policy); the default one has policy
"always", no calibration and a 60 s timeout.

Errors raise ibp.Error subclasses: ibp.InvalidArgumentError for an unknown
codec, bits other than 2, 4 or 8 for "lsq", a dtype or shape the
collective does not take, splits that do not add up (raised locally, before
any communication; its peers then time out), and splits that differ across
ranks (libibp's "mismatch", on the rank that detects it); ibp.FileError for
a timeout or dead peer; ibp.CorruptError for a corrupt payload. Non-finite
input with "lsq" raises InvalidArgumentError on the rank that has it. After
a failure the communicator is broken and later calls on it raise at once.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .. import _coll, _errors
from .ddp import communicator

__all__ = ["all_to_all_single", "all_to_all", "AllToAll", "get_communicator", "CODECS"]

CODECS = ("none", "exp", "fp8", "lsq")  # the ones libibp's AllToAll(v) takes
LSQ_BITS = (2, 4, 8)  # the LSQ code widths libibp sends
_DTYPES = {torch.float16: 9, torch.bfloat16: 10, torch.float32: 11}  # ibp_dtype_t
_comms = {}  # process group -> Communicator


def get_communicator(group=None) -> _coll.Communicator:
    """The communicator all_to_all_single uses for `group` (default: the
    default group), made on first use (collective over the group)."""
    g = group if group is not None else dist.group.WORLD
    c = _comms.get(g)
    if c is None or c.closed:
        c = communicator(group, policy="always", calibrate=False)
        _comms[g] = c
    return c


def _codec(codec, bits, func):
    cid = _coll.codec_id(codec, func)
    name = codec.lower()
    if name not in CODECS:
        raise _errors.invalid(func, "codec %r is not an all-to-all codec (one of %s)" % (codec, ", ".join(CODECS)))
    if name == "lsq" and (not isinstance(bits, int) or isinstance(bits, bool) or bits not in LSQ_BITS):
        raise _errors.invalid(func, "lsq takes bits=2, 4 or 8 (codes never straddle a byte), not %r" % (bits,))
    return cid


def _splits(sizes, n, p, what, func):
    """Row counts per rank (a list of p ints adding up to n)."""
    if sizes is None:
        if n % p:
            raise _errors.invalid(func, "%s has %d rows, not a multiple of %d ranks (give split sizes)" % (what, n, p))
        return [n // p] * p
    try:
        s = [int(v) for v in sizes]
    except (TypeError, ValueError):
        raise _errors.invalid(func, "%s split sizes must be integers, not %r" % (what, sizes)) from None
    if len(s) != p:
        raise _errors.invalid(func, "%d %s split sizes for %d ranks" % (len(s), what, p))
    if any(v < 0 for v in s):
        raise _errors.invalid(func, "negative %s split size in %s" % (what, s))
    if sum(s) != n:
        raise _errors.invalid(func, "%s split sizes %s add up to %d, but dim 0 has %d rows" % (what, s, sum(s), n))
    return s


def _check(t, what, func):
    if not isinstance(t, torch.Tensor):
        raise _errors.invalid(func, "%s must be a torch.Tensor, not %s" % (what, type(t).__name__))
    if t.dtype not in _DTYPES:
        raise _errors.invalid(func, "%s: the compressed all-to-all takes float32, bfloat16 or float16, not %s"
                              % (what, t.dtype))
    if t.dim() < 1:
        raise _errors.invalid(func, "%s must have at least one dimension" % what)


def _a2a(output, input, out_sizes, in_sizes, comm, cid, func, bits=4):
    """The checked AllToAllv on host tensors (LSQ codes of `bits` bits);
    writes output."""
    p = comm.nranks
    _check(input, "input", func)
    _check(output, "output", func)
    if output.dtype != input.dtype:
        raise _errors.invalid(func, "output is %s but input is %s" % (output.dtype, input.dtype))
    if tuple(output.shape[1:]) != tuple(input.shape[1:]):
        raise _errors.invalid(func, "output rows have shape %s, input rows %s"
                              % (tuple(output.shape[1:]), tuple(input.shape[1:])))
    if output.device.type == "cpu" and not output.is_contiguous():
        raise _errors.invalid(func, "output must be contiguous")
    ins = _splits(in_sizes, input.shape[0], p, "input", func)
    outs = _splits(out_sizes, output.shape[0], p, "output", func)
    row = 1
    for d in input.shape[1:]:
        row *= int(d)
    src = input.detach()
    if src.device.type != "cpu" or not src.is_contiguous():
        src = src.to("cpu").contiguous()
    staged = output.device.type != "cpu"
    dst = torch.empty(output.shape, dtype=output.dtype) if staged else output.detach()

    def arrays(sizes):
        counts = np.array([s * row for s in sizes], dtype=np.uint64)
        displs = np.zeros(p, dtype=np.uint64)
        if p > 1:
            displs[1:] = np.cumsum(counts)[:-1]
        return counts, displs

    sc, sd = arrays(ins)
    rc, rd = arrays(outs)
    u64 = _coll.P(_coll.c_u64)
    if cid == _coll.CODECS["lsq"]:
        comm.set_lsq_bits(bits)
    comm._run("ibp_coll_alltoallv", src.data_ptr(), sc.ctypes.data_as(u64), sd.ctypes.data_as(u64),
              dst.data_ptr(), rc.ctypes.data_as(u64), rd.ctypes.data_as(u64), _DTYPES[src.dtype], cid,
              comm._comm(func), None)
    if staged:
        with torch.no_grad():
            output.copy_(dst)
    return output


def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes: Optional[Sequence[int]] = None,
                      input_split_sizes: Optional[Sequence[int]] = None, group=None, codec: str = "lsq",
                      bits: int = 4, comm: Optional[_coll.Communicator] = None) -> torch.Tensor:
    """torch.distributed.all_to_all_single through libibp's AllToAll(v)
    with `codec` (see the module docstring); returns `output`. Not
    differentiable (see all_to_all)."""
    func = "ibp.torch.moe.all_to_all_single"
    cid = _codec(codec, bits, func)
    if comm is None:
        comm = get_communicator(group)
    with torch.no_grad():
        return _a2a(output, input, output_split_sizes, input_split_sizes, comm, cid, func, bits)


class AllToAll(torch.autograd.Function):
    """Differentiable all-to-all: forward as all_to_all_single into a new
    tensor, backward the reverse all-to-all of the gradient."""

    @staticmethod
    def forward(ctx, input, out_sizes, in_sizes, comm, cid, bcid, bits=4):
        func = "ibp.torch.moe.all_to_all"
        p = comm.nranks
        ins = _splits(in_sizes, input.shape[0] if input.dim() else 0, p, "input", func)
        rows = sum(out_sizes) if out_sizes is not None else input.shape[0]
        out = torch.empty((rows,) + tuple(input.shape[1:]), dtype=input.dtype, device=input.device)
        _a2a(out, input, out_sizes, ins, comm, cid, func, bits)
        ctx.out_sizes = list(out_sizes) if out_sizes is not None else None
        ctx.in_sizes = ins
        ctx.in_shape = tuple(input.shape)
        ctx.comm, ctx.bcid, ctx.bits = comm, bcid, bits
        return out

    @staticmethod
    def backward(ctx, grad):
        g = torch.empty(ctx.in_shape, dtype=grad.dtype, device=grad.device)
        _a2a(g, grad.contiguous(), ctx.in_sizes, ctx.out_sizes, ctx.comm, ctx.bcid, "ibp.torch.moe.all_to_all "
             "(backward)", ctx.bits)
        return g, None, None, None, None, None, None


def all_to_all(input: torch.Tensor, output_split_sizes: Optional[Sequence[int]] = None,
               input_split_sizes: Optional[Sequence[int]] = None, group=None, codec: str = "lsq", bits: int = 4,
               backward_codec: Optional[str] = None, comm: Optional[_coll.Communicator] = None) -> torch.Tensor:
    """Differentiable all-to-all (dispatch / combine of an expert-parallel
    MoE layer): returns the received rows as a new tensor; the gradient
    goes back with the reverse all-to-all and `backward_codec` (default
    `codec`). Every rank must call backward for every all_to_all it made,
    in the same order (the backward is a collective too)."""
    func = "ibp.torch.moe.all_to_all"
    cid = _codec(codec, bits, func)
    bcid = _codec(backward_codec if backward_codec is not None else codec, bits, func)
    _check(input, "input", func)
    if comm is None:
        comm = get_communicator(group)
    if output_split_sizes is not None:
        try:
            rows = sum(int(v) for v in output_split_sizes)
        except (TypeError, ValueError):
            raise _errors.invalid(func, "output split sizes must be integers, not %r"
                                  % (output_split_sizes,)) from None
        output_split_sizes = _splits(output_split_sizes, rows, comm.nranks, "output", func)
    return AllToAll.apply(input, output_split_sizes, input_split_sizes, comm, cid, bcid, bits)
