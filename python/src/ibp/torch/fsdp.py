"""ibp.torch.fsdp: compressed all-gather and reduce-scatter for FSDP2.

    from torch.distributed.fsdp import fully_shard
    import ibp.torch.fsdp as ibp_fsdp
    model = fully_shard(net, mesh=init_device_mesh("cpu", (world,)))
    ag, rs = ibp_fsdp.CompressedAllGather("exp"), ibp_fsdp.CompressedReduceScatter("exp")
    ibp_fsdp.set_compressed_collectives(model, ag, rs)   # on every FSDP module

FSDP2 keeps the custom comm per FSDP module (per parameter group), so it
must be set on every module fully_shard was applied to, not only the root
(whose own group may hold no parameters); set_compressed_collectives does.

Both implement FSDP2's Comm interface (``allocate`` and ``__call__``, see
torch.distributed.fsdp's AllGather / ReduceScatter) with libibp's ring
AllGather and ReduceScatter over torch.distributed (ibp.torch.ddp's
TorchTransport), so they run synchronously and return no Work. Codecs:
AllGather "none", "exp" (lossless), "fp8" (LOSSY; each shard is encoded
once and every rank, its owner included, decodes the same bytes, so the
unsharded parameters are identical everywhere); ReduceScatter "none", "exp",
"fp8" (LOSSY, re-encoded at every hop) and "lsq" (LOSSY: an LSQ AllToAll,
then each rank adds its blocks in rank order in FP32). DynamiQ and PTS are
AllReduce algorithms and are refused here (ibp.InvalidArgumentError).

Calls that libibp would send plain on every rank whatever the data
(policy "never", codec "none", or policy "auto" when the calibrated model,
shared by the ranks, says no codec can gain: Communicator.plain) and
buffers of dtypes the codecs do not take (FSDP2 packs mixed-dtype
parameters as uint8) go to torch.distributed's own all_gather_into_tensor
/ reduce_scatter_tensor, with FSDP2's async_op, as FSDP2 does without
custom collectives (ReduceOp.AVG passed on as FSDP2 asks; a backend that
refuses it gets the sum, then the division). Under policy "auto" with exp
or fp8 the other calls run a trial per (op, size, dtype), as the DDP hook
does per step: after a warm-up call each way, 3 calls each way alternately, timed
whole; the ranks sum the times (one all-reduce) and keep the faster (libibp
must take under 95% of the native time). stats()["hook_native"] counts the
native calls, stats()["hook_trials"] the trials. Reductions other
than SUM and AVG raise ibp.UnsupportedError on the libibp path; CUDA
buffers go through a host copy there. One communicator per process group,
made on the first call (collective over the group).
"""

import time

import torch
import torch.distributed as dist

from .. import _coll, _errors
from .ddp import _DTYPES, _TRIAL_GAIN, _TRIAL_STEPS, communicator

__all__ = ["CompressedAllGather", "CompressedReduceScatter", "set_compressed_collectives"]

# policy "auto" with exp / fp8: per (op, size, dtype), one warm-up call each
# way (libibp's first sets up its buffers), then as many calls timed each way
# as the DDP hook times steps, kept by the same share (ddp._TRIAL_GAIN)
_TRIAL_WARMUP = 2
_TRIAL_CALLS = _TRIAL_STEPS

try:  # FSDP2's abstract Comm classes (torch >= 2.8); plain objects before
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AGBase
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _RSBase
except ImportError:  # pragma: no cover
    _AGBase = _RSBase = object


class _Base:
    _allowed = ()

    def __init__(self, codec="exp", *, policy="auto", timeout=60.0, calibrate=True, nthreads=1):
        func = type(self).__name__
        if _coll.codec_id(codec, func) not in [_coll.CODECS[c] for c in self._allowed]:
            raise _errors.invalid(func, "codec %r is not available here (use one of %s)"
                                  % (codec, ", ".join(self._allowed)))
        _coll.make_opts(func, timeout, policy, calibrate, 0.0, nthreads)
        self.codec = codec.lower()
        self._kw = dict(policy=policy, timeout=timeout, calibrate=calibrate, nthreads=nthreads)
        self._comms = {}
        self._trials = {}  # (op, count, dtype) -> "auto"'s trial: times and choice
        self.native_calls = 0

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def comm(self, group):
        c = self._comms.get(group)
        if c is None:
            c = self._comms[group] = communicator(group, **self._kw)
        return c

    def stats(self, group=None) -> dict:
        """Statistics of the communicator of `group` (the only one by default)."""
        if group is None and len(self._comms) == 1:
            group = next(iter(self._comms))
        c = self._comms.get(group)
        if c is None:
            return {}
        d = c.stats()
        d["hook_native"] = self.native_calls  # calls of every group sent by torch.distributed itself
        d["hook_trials"] = {"%s %d %s" % (k[0], k[1], str(k[2]).replace("torch.", "")):
                            {x: v[x] for x in ("choice", "native_s", "libibp_s") if x in v}
                            for k, v in self._trials.items()}
        return d

    def close(self):
        """Closes this object's communicators (later calls make new ones)."""
        comms, self._comms = self._comms, {}
        for c in comms.values():
            c.close()

    def _route(self, c, op, n, dtype):
        """(native, trial key): whether this call goes to torch.distributed's
        own collective, and the key to time it under while "auto"'s trial
        runs (else None). Native: a dtype the codecs do not take (FSDP2
        packs mixed dtypes as uint8), or a call libibp would send plain on
        every rank whatever the data (the same answer everywhere: no
        exchange). Under policy "auto" with exp or fp8, each (op, size,
        dtype) then runs its trial: after a warm-up call each way, calls alternate
        native / libibp, each timed, and after _TRIAL_CALLS each way every
        rank sums the times (one all-reduce, so all decide alike) and keeps
        the faster. FSDP2 makes the same calls in the same order on every
        rank, so the trials line up."""
        if dtype not in _DTYPES or c.nranks == 1 or c.plain(op, n, dtype, self.codec):
            self.native_calls += 1
            return True, None
        if self._kw["policy"] != "auto" or self.codec not in ("exp", "fp8"):
            return False, None
        key = (op, n, dtype)
        t = self._trials.get(key)
        if t is None:
            t = self._trials[key] = {"calls": 0, "native": [], "libibp": [], "choice": None}
        if t["choice"] is not None:
            native = t["choice"] == "native"
            self.native_calls += native
            return native, None
        native = t["calls"] % 2 == 0
        self.native_calls += native
        t["calls"] += 1
        return native, ((key, native) if t["calls"] > _TRIAL_WARMUP else None)

    def _dispatch(self, c, group, op, n, dtype, native_fn, ibp_fn):
        native, timed = self._route(c, op, n, dtype)
        t0 = time.perf_counter()
        work = native_fn() if native else ibp_fn()
        if timed is not None:
            if work is not None:
                work.wait()  # the trial times whole calls
            self._timed(c, timed[0], timed[1], group, time.perf_counter() - t0)
        return work

    def _timed(self, c, key, native, group, seconds):
        t = self._trials[key]
        t["native" if native else "libibp"].append(seconds)
        if len(t["native"]) == len(t["libibp"]) == _TRIAL_CALLS:
            v = torch.tensor(t["native"] + t["libibp"], dtype=torch.float64)
            dist.all_reduce(v, group=group)
            nat, lib = v[:_TRIAL_CALLS].median().item() / c.nranks, v[_TRIAL_CALLS:].median().item() / c.nranks
            t.update(native_s=nat, libibp_s=lib, choice="libibp" if lib < _TRIAL_GAIN * nat else "native")

    def _check(self, func, *tensors):
        for t in tensors:
            if t.dtype not in _DTYPES:
                raise _errors.UnsupportedError(
                    "%s: a %s buffer: the compressed collectives take float32, bfloat16 or float16 (FSDP2 "
                    "packs parameters of mixed dtypes as uint8)" % (func, t.dtype), func=func, status=6)


def _host(t):
    return t if t.device.type == "cpu" and t.is_contiguous() else t.detach().to("cpu").contiguous()


class CompressedAllGather(_Base, _AGBase):
    """FSDP2 custom all-gather (``FSDPModule.set_custom_all_gather``)."""

    _allowed = ("none", "exp", "fp8")

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        func = "CompressedAllGather"
        if output_tensor.dtype != input_tensor.dtype:
            raise _errors.invalid(func, "output %s, input %s" % (output_tensor.dtype, input_tensor.dtype))
        c = self.comm(group)
        n = input_tensor.numel()
        if output_tensor.numel() != n * c.nranks:
            raise _errors.invalid(func, "output has %d elements, expected %d x %d"
                                  % (output_tensor.numel(), c.nranks, n))
        return self._dispatch(c, group, "allgather", n, input_tensor.dtype,
                              lambda: dist.all_gather_into_tensor(output_tensor, input_tensor, group=group,
                                                                  async_op=async_op),
                              lambda: self._ibp(c, output_tensor, input_tensor, n))

    def _ibp(self, c, output_tensor, input_tensor, n):
        out = _host(output_tensor)
        with torch.no_grad():
            c.allgather(_host(input_tensor).reshape(-1), out=out.view(c.nranks, n), codec=self.codec)
            if out is not output_tensor:
                output_tensor.copy_(out.view_as(output_tensor))


class CompressedReduceScatter(_Base, _RSBase):
    """FSDP2 custom reduce-scatter (``FSDPModule.set_custom_reduce_scatter``):
    SUM, or AVG (the sum divided by the group size afterwards)."""

    _allowed = ("none", "exp", "fp8", "lsq")
    _native_avg = None  # whether the backend took ReduceOp.AVG (None: not tried yet)

    def __call__(self, output_tensor, input_tensor, group, op=dist.ReduceOp.SUM, async_op=False):
        func = "CompressedReduceScatter"
        if output_tensor.dtype != input_tensor.dtype:
            raise _errors.invalid(func, "output %s, input %s" % (output_tensor.dtype, input_tensor.dtype))
        if op == dist.ReduceOp.SUM:
            avg = False
        elif op == dist.ReduceOp.AVG:
            avg = True
        else:
            raise _errors.UnsupportedError("%s: reduction %s (SUM and AVG only)" % (func, op), func=func, status=6)
        c = self.comm(group)
        n = output_tensor.numel()
        if input_tensor.numel() != n * c.nranks:
            raise _errors.invalid(func, "input has %d elements, expected %d x %d"
                                  % (input_tensor.numel(), c.nranks, n))
        if self.codec != "lsq":
            return self._dispatch(c, group, "reducescatter", n, input_tensor.dtype,
                                  lambda: self._native_rs(c, output_tensor, input_tensor, group, op, avg, async_op),
                                  lambda: self._ibp(c, output_tensor, input_tensor, avg))
        self._ibp(c, output_tensor, input_tensor, avg)
        return None

    def _native_rs(self, c, output_tensor, input_tensor, group, op, avg, async_op):
        if not avg:
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, group=group, async_op=async_op)
        if self._native_avg is not False:
            try:  # FSDP2's own call (gloo has AVG in current torch)
                work = dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                                  async_op=async_op)
            except (RuntimeError, ValueError):
                # a backend without AVG refuses it locally, before any exchange, on every rank alike
                if self._native_avg:
                    raise
                self._native_avg = False
            else:
                self._native_avg = True
                return work
        # no AVG in this backend: the sum, then the division (so not asynchronous)
        dist.reduce_scatter_tensor(output_tensor, input_tensor, group=group)
        output_tensor.div_(c.nranks)
        return None

    def _ibp(self, c, output_tensor, input_tensor, avg):
        self._check("CompressedReduceScatter", output_tensor, input_tensor)
        src = _host(input_tensor).reshape(-1)
        with torch.no_grad():
            if self.codec == "lsq":
                blocks = c.alltoall(src, codec="lsq")
                acc = blocks[0].to(torch.float32)
                for r in range(1, c.nranks):
                    acc += blocks[r].to(torch.float32)
                res = acc.to(output_tensor.dtype)
            else:
                res = c.reducescatter(src, codec=self.codec)
            if avg:
                res = res.div_(c.nranks)
            output_tensor.copy_(res.view_as(output_tensor))


def set_compressed_collectives(model, all_gather=None, reduce_scatter=None) -> int:
    """Sets `all_gather` / `reduce_scatter` (either may be None) on every
    FSDPModule in `model` (itself included); returns how many modules."""
    from torch.distributed.fsdp import FSDPModule
    n = 0
    for m in model.modules():
        if isinstance(m, FSDPModule):
            if all_gather is not None:
                m.set_custom_all_gather(all_gather)
            if reduce_scatter is not None:
                m.set_custom_reduce_scatter(reduce_scatter)
            n += 1
    return n
