"""ibp.torch.ddp: compressed gradient all-reduce for DistributedDataParallel.

    import ibp.torch.ddp as ibp_ddp
    model = torch.nn.parallel.DistributedDataParallel(net)           # gloo, CPU
    model.register_comm_hook(None, ibp_ddp.compressed_allreduce_hook(codec="exp"))

The hook follows DDP's contract (``hook(state, bucket: dist.GradBucket) ->
torch.futures.Future[torch.Tensor]``): it divides the bucket by the world
size (as DDP's default all-reduce does) and sums it over the ranks. A bucket
libibp would send plain on every rank whatever the data (codec "none",
policy "never", or policy "auto" when the calibrated model, shared by the
ranks, says no codec can gain on this link: Communicator.plain) goes to the
backend's own ``dist.all_reduce``, asynchronously, exactly as DDP without a
hook, so plain buckets cost what they cost without libibp; stats() counts
them as "hook_native". With policy "auto" and codec "exp" or "fp8" the hook
also measures: after 2 steps sent natively it sends 3 steps each way,
alternately, timing whole steps, and keeps libibp only if its median step
takes under 0.95 of the native one (every rank sums the same timings in one
all-reduce, so all choose alike; stats()["hook_choice"]). Other buckets are
summed with one of libibp's compressed collectives, run in order on the
hook's worker thread so that they overlap the rest of the backward as the
backend's own all-reduce does; the hook returns a Future of the bucket
tensor completed by that thread (or failed with its ibp.Error). Codecs, by
name (docs/COLLECTIVES.md):

    "none"     plain: the backend's own all-reduce (as without a hook)
    "exp"      lossless exponent codec: bit-identical to "none"; with 2 ranks
               (or any sum whose order the ring shares) bit-identical to DDP
               without a hook
    "fp8"      LOSSY FP8 E4M3 + Hadamard (TACO), re-encoded at every hop
    "dynamiq"  LOSSY DynamiQ (quantized partial sums, ~5 bits per element)
    "pts"      LOSSY RCMoE PTS (sparse, unbiased, very noisy per step)
    "lsq"      LOSSY RCMoE LSQ: reduce-scatter as an LSQ AllToAll (each rank
               sums the blocks it owns, in rank order), then a lossless "exp"
               AllGather of the sums, so all replicas stay identical

Design (docs/COLLECTIVES.md, "PyTorch hooks"): the hook runs libibp's own
collective algorithms with torch.distributed as their transport
(TorchTransport: each libibp message is its length and payload sent with
dist.isend / dist.irecv in segments of at most ~1 MiB, every wait bounded
by Work.wait(timeout); large collectives send pieces in flight through its
nonblocking calls). So the
ring, the per-hop decode-add-re-encode of the reductions, the message
headers that catch mismatched calls, the switcher and the statistics are the
ones the C tests check, and DynamiQ and PTS (algorithms, not per-message
codecs) are available. The group's backend must carry CPU tensors (gloo);
with an NCCL default group pass ``process_group=dist.new_group(backend="gloo")``.
CUDA buckets are copied to the host and back (there is no NCCL transport in
Python; see docs/GPU.md for the C one).

Errors raise ibp.Error subclasses (ibp.InvalidArgumentError for an unknown
codec or a mismatch across ranks, ibp.CorruptError for a corrupt payload,
ibp.FileError for a timeout or a dead peer; the detail names the rank). After
a failure the hook's communicator is broken and later calls raise at once.
"""

import datetime
import itertools
import queue
import threading
import time
import weakref
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from .. import _coll, _errors

__all__ = ["compressed_allreduce_hook", "ddp_hook", "CompressedAllReduceHook", "TorchTransport", "communicator",
           "allreduce_", "CODECS"]

CODECS = tuple(_coll.CODECS)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TAG_BASE = 0x1B9C00
# policy "auto" in the DDP hook (exp, fp8): steps sent natively before the
# trial (DDP rebuilds its buckets after the first), steps timed each way,
# and the share of the native steps' time libibp's must stay under to win
_TRIAL_WARMUP = 2
_TRIAL_STEPS = 3
_TRIAL_GAIN = 0.95
_tags = itertools.count()


class TorchTransport:
    """libibp's transport over torch.distributed point-to-point calls (any
    CPU-capable backend; gloo). A message travels as its 8-byte length
    (little-endian) followed by the payload, cut into segments of at most
    SEG bytes, each a backend message on the transport's tag. Every receive
    posts a SEG-byte receive for the first segment before the data can
    come: gloo sends only once the peer has posted the receive, and delivers
    a message into any receive at least as large, but ends the process
    (std::terminate) on a larger one, so no peer's segment can exceed a
    posted receive whatever it sends. The length is then checked against
    libibp's capacity (larger: "mismatch", an error, not the end of the
    process) and the other segments, if any, are received at their exact
    sizes. libibp's pipelined rings send pieces of 1 MiB (raw), which fit
    one segment: each arrives into a receive posted in advance. Every wait
    gets the time left until the call's deadline, and running out raises a
    TransportError that libibp reports as IBP_ERR_IO ("timeout ... rank N").

    Besides sendrecv it has the nonblocking calls of libibp's async table
    (isend, irecv, test, cancel), so the pipelined rings keep pieces in
    flight over it (docs/COLLECTIVES.md, "Pieces in flight").

    Every transport made in a process takes the next pair of tags, so ranks
    must make them in the same order (SPMD programs do). Payloads are
    copies owned by Python: a timed-out send or receive can finish later
    without touching libibp's freed buffers."""

    HDR = 8
    SEG = (1 << 20) + (64 << 10)  # a 1 MiB piece coded, with its headers, in one segment

    def __init__(self, group=None, tag: Optional[int] = None):
        if not dist.is_available() or not dist.is_initialized():
            raise _errors.invalid("TorchTransport", "torch.distributed is not initialised "
                                  "(call dist.init_process_group first)")
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.nranks = dist.get_world_size(self.group)
        if self.rank < 0:
            raise _errors.invalid("TorchTransport", "this process is not in the group")
        self._glob = [dist.get_global_rank(self.group, r) if self.group is not dist.group.WORLD else r
                      for r in range(self.nranks)]
        self.tag = _TAG_BASE + 2 * next(_tags) if tag is None else int(tag)
        self._abandoned = []  # works that timed out (kept alive with their tensors)
        self._waiters = None  # the async table's waiter threads, made on first use

    def _wait(self, work, deadline, what):
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("deadline passed")
            ok = work.wait(timeout=datetime.timedelta(seconds=left))
        except Exception as e:  # gloo raises on timeout and on a dead peer
            self._abandoned.append(work)
            late = time.monotonic() >= deadline - 1e-3
            raise _coll.TransportError("%s%s (%s)" % ("timeout: " if late else "", what, e)) from None
        if ok is False:
            self._abandoned.append(work)
            raise _coll.TransportError("%s was aborted" % what)

    def _segments(self, total):
        return [(o, min(self.SEG, total - o)) for o in range(0, total, self.SEG)]

    def _isend(self, dst, payload):
        """Starts every segment of the message; returns [(work, tensor)]."""
        n = 0 if payload is None else int(payload.size)
        frame = np.empty(self.HDR + n, dtype=np.uint8)
        frame[:self.HDR] = np.frombuffer(n.to_bytes(self.HDR, "little"), dtype=np.uint8)
        if n:
            frame[self.HDR:] = payload
        t = torch.from_numpy(frame)
        return [(dist.isend(t[o:o + k], self._glob[dst], group=self.group, tag=self.tag), t)
                for o, k in self._segments(frame.size)]

    def _first_recv(self, src):
        buf = torch.empty(self.SEG, dtype=torch.uint8)
        return dist.irecv(buf, self._glob[src], group=self.group, tag=self.tag), buf

    def _rest_recv(self, src, first, cap):
        """After the first segment: the length checked, the other segments'
        receives posted. Returns (works, payload array)."""
        f = first.numpy()
        n = int.from_bytes(f[:self.HDR].tobytes(), "little")
        if n > cap:
            raise _coll.TransportError("mismatch: %d-byte message from rank %d exceeds the expected %d bytes"
                                       % (n, src, cap), 1)
        total = self.HDR + n
        if total <= self.SEG:
            return [], f[self.HDR:total]
        whole = np.empty(total, dtype=np.uint8)
        whole[:self.SEG] = f
        t = torch.from_numpy(whole)
        works = [(dist.irecv(t[o:o + k], self._glob[src], group=self.group, tag=self.tag), t)
                 for o, k in self._segments(total)[1:]]
        return works, whole[self.HDR:]

    def sendrecv(self, dst, payload, src, rcap, timeout):
        deadline = time.monotonic() + timeout
        fw = first = None
        if src >= 0:
            fw, first = self._first_recv(src)
        sends = self._isend(dst, payload) if dst >= 0 else []
        got = None
        if src >= 0:
            self._wait(fw, deadline, "receiving from rank %d within %.3g s" % (src, timeout))
            rest, got = self._rest_recv(src, first, rcap)
            for w, _ in rest:
                self._wait(w, deadline, "receiving %d bytes from rank %d within %.3g s" % (got.size, src, timeout))
        for w, _ in sends:
            self._wait(w, deadline, "sending to rank %d within %.3g s" % (dst, timeout))
        return got

    # -- libibp's async table (the caller's thread only; libibp keeps the deadline) --
    # A gloo point-to-point Work finishes only inside wait() (is_completed
    # stays False until then), and a wait that times out closes the pair, so
    # a waiter thread per direction waits on each request in the order they
    # were posted (the order they finish in), posts a long message's other
    # segments as soon as its first has come, and test reads the flags.
    def _post(self, kind, req):
        if self._waiters is None:
            self._waiters = (_Waiter("send"), _Waiter("recv"))
            for wt in self._waiters:  # a transport never closed still ends its threads
                weakref.finalize(self, wt.q.put, None)
        self._waiters[kind].put(req)
        return req

    def isend(self, dst, payload):
        return self._post(0, _Req(self._isend(dst, payload), None))

    def irecv(self, src, cap):
        w, first = self._first_recv(src)
        return self._post(1, _Req([(w, first)], lambda: self._rest_recv(src, first, cap)))

    def test(self, req):
        if not req.done:
            return False, None
        if req.error is not None:
            raise req.error
        return True, req.data

    def cancel(self, req):
        if not req.done:
            self._abandoned.append(req)  # gloo cannot cancel: the request keeps its own buffers
        return True

    def close(self):
        """Stops the waiter threads once their requests have finished and
        waits (up to 5 s each) for them to end, so that none is still
        returning from gloo's C++ when the process exits (a daemon thread
        stopped there at interpreter exit can end the process with
        std::terminate). They are daemons: a process may also just exit."""
        if self._waiters is not None:
            for wt in self._waiters:
                wt.put(None)
            for wt in self._waiters:
                if wt.t is not threading.current_thread():
                    wt.t.join(timeout=5.0)
            self._waiters = None


class _Req:
    """An async request: its works (with their tensors) and, for a receive,
    what to do once the first segment is in (check the length, post the
    other segments: returns their works and the payload)."""

    __slots__ = ("works", "recv", "done", "error", "data")

    def __init__(self, works, recv):
        self.works, self.recv = works, recv
        self.done, self.error, self.data = False, None, None


class _Waiter:
    """A daemon thread that waits on requests in order, marking each done."""

    def __init__(self, what):
        self.q = queue.SimpleQueue()
        self.t = threading.Thread(target=self._run, name="ibp-torch-" + what, daemon=True)
        self.t.start()

    def put(self, req):
        self.q.put(req)

    @staticmethod
    def _finish(req):
        for w, _ in req.works:
            if w.wait() is False:
                raise _coll.TransportError("a message was aborted")
        if req.recv is not None:
            rest, req.data = req.recv()
            req.works.extend(rest)
            for w, _ in rest:
                if w.wait() is False:
                    raise _coll.TransportError("a message was aborted")

    def _run(self):
        while True:
            req = self.q.get()
            if req is None:
                return
            try:
                self._finish(req)
            except _coll.TransportError as e:
                req.error = e
            except Exception as e:  # gloo raises on a dead peer or its own timeout
                req.error = _coll.TransportError("%s: %s" % (type(e).__name__, e))
            req.done = True


def communicator(process_group=None, *, policy: str = "auto", timeout: float = 60.0, calibrate: bool = True,
                 nthreads: int = 1) -> _coll.Communicator:
    """A libibp communicator over torch.distributed (TorchTransport).
    Collective over the group: every rank makes it, in the same order."""
    return _coll.Communicator(TorchTransport(process_group), timeout=timeout, policy=policy,
                              calibrate=calibrate, nthreads=nthreads)


def _check_tensor(t, func):
    if not isinstance(t, torch.Tensor):
        raise _errors.invalid(func, "expected a torch.Tensor, not %s" % type(t).__name__)
    if t.dtype not in _DTYPES:
        raise _errors.invalid(func, "the compressed collectives take float32, bfloat16 or float16 "
                              "tensors, not %s" % t.dtype)


def _lsq_allreduce(comm, host, gather_codec):
    """Sum over ranks with LSQ on the reduce-scatter half: the bucket is cut
    into nranks blocks (zero-padded), block j goes to rank j in an LSQ
    AllToAll (a rank's own block is copied exactly), rank j adds the nranks
    blocks in rank order in FP32, and the sums are all-gathered with a
    lossless codec, so every replica gets the same tensor."""
    p, n = comm.nranks, host.numel()
    m = -(-n // p)
    flat = host.reshape(-1)
    padded = torch.zeros(p * m, dtype=host.dtype)
    padded[:n] = flat
    blocks = comm.alltoall(padded, codec="lsq")
    acc = blocks[0].to(torch.float32)
    for r in range(1, p):
        acc += blocks[r].to(torch.float32)
    gathered = comm.allgather(acc.to(host.dtype), codec=gather_codec)
    flat.copy_(gathered.reshape(-1)[:n])


def allreduce_(tensor: torch.Tensor, comm: _coll.Communicator, codec: str = "exp", *, average: bool = False,
               lsq_gather_codec: str = "exp") -> torch.Tensor:
    """In-place sum (average=True: mean) of `tensor` over the communicator's
    ranks with `codec`; returns `tensor`. CPU tensors are reduced in place
    (a non-contiguous one through a copy); CUDA ones through a host copy."""
    func = "ibp.torch.ddp.allreduce_"
    _coll.codec_id(codec, func)
    _check_tensor(tensor, func)
    p = comm.nranks
    work = tensor
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        work = tensor.detach().to("cpu", copy=True).contiguous()
    with torch.no_grad():
        if average and p > 1:
            work.div_(p)  # before the sum, as DDP's default hook: keeps the same numerics
        if work.numel() and p > 1:
            if codec.lower() == "lsq":
                _lsq_allreduce(comm, work, lsq_gather_codec)
            else:
                comm.allreduce(work.detach(), out=work.detach(), codec=codec)
        if work is not tensor:
            tensor.copy_(work)
    return tensor


class CompressedAllReduceHook:
    """A DDP communication hook (see the module docstring). The libibp
    communicator is made on the first bucket (collective: every rank's DDP
    calls the hook for the same buckets in the same order), over
    `process_group` (default: the default group; with state a ProcessGroup
    and no process_group, that one). policy: "auto" lets libibp's switcher
    send plain bytes when compression would not pay or the data would not
    shrink ("always" compresses every call; lossy codecs dynamiq, pts and
    lsq are used whenever requested). timeout (s) bounds every wait.

    ``stats()`` gives the communicator's statistics (calls, compressed,
    last_ratio, ...)."""

    def __init__(self, codec: str = "exp", *, process_group=None, policy: str = "auto", timeout: float = 60.0,
                 calibrate: bool = True, nthreads: int = 1, lsq_gather_codec: str = "exp"):
        func = "compressed_allreduce_hook"
        _coll.codec_id(codec, func)
        _coll.policy_id(policy, func)
        if _coll.codec_id(lsq_gather_codec, func) not in (0, 1, 2):
            raise _errors.invalid(func, "lsq_gather_codec must be none, exp or fp8, not %r" % (lsq_gather_codec,))
        _coll.make_opts(func, timeout, policy, calibrate, 0.0, nthreads)
        self.codec = codec.lower()
        self.process_group = process_group
        self.policy = policy
        self.timeout = timeout
        self.calibrate = calibrate
        self.nthreads = nthreads
        self.lsq_gather_codec = lsq_gather_codec
        self.comm = None
        self._group = None
        self.native_calls = 0
        self.choice = None  # "auto" trial's outcome: "native" or "libibp"
        self.trial = None
        self._step, self._t_last, self._periods = 0, None, []
        self._worker = None  # the thread running libibp's collectives (made on first use)
        self._lock = threading.Lock()  # the communicator: one thread at a time
        self._plain = {}  # (numel, dtype) -> comm.plain's answer
        self.__name__ = self.__qualname__ = "ibp_%s_allreduce_hook" % self.codec  # DDP logs hooks by name

    def _comm(self, state):
        if self.comm is None:
            group = self.process_group
            if group is None and isinstance(state, dist.ProcessGroup):
                group = state
            self.comm = communicator(group, policy=self.policy, timeout=self.timeout, calibrate=self.calibrate,
                                     nthreads=self.nthreads)
            self._group = group if group is not None else dist.group.WORLD
        return self.comm

    def _trial_native(self, bucket) -> bool:
        """policy "auto", exp and fp8: whether this bucket goes native, by
        measuring whole steps (the time between one step's first bucket and
        the next's) sent each way, alternately, then keeping the faster;
        every rank sums the same measurements (one all-reduce), so all
        decide alike."""
        if self.choice is not None:
            return self.choice == "native"
        if bucket.index() == 0:
            now = time.perf_counter()
            j = self._step  # the step this call starts
            if self._t_last is not None and j - 1 >= _TRIAL_WARMUP:
                self._periods.append(now - self._t_last)
            self._t_last = now
            self._step += 1
            if j >= _TRIAL_WARMUP + 2 * _TRIAL_STEPS:
                t = torch.tensor(self._periods, dtype=torch.float64)
                dist.all_reduce(t, group=self._group)
                nat, lib = t[0::2].median().item(), t[1::2].median().item()
                self.trial = {"native_s": nat / self.comm.nranks, "libibp_s": lib / self.comm.nranks}
                self.choice = "libibp" if lib < _TRIAL_GAIN * nat else "native"
                return self.choice == "native"
        j = self._step - 1
        return j < _TRIAL_WARMUP or (j - _TRIAL_WARMUP) % 2 == 0

    def __call__(self, state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buf = bucket.buffer()
        comm = self._comm(state)
        native = False
        if self.codec != "lsq" and buf.dtype in _DTYPES and comm.nranks > 1:
            # Plain on every rank whatever the data (the answer is the same
            # everywhere, so it is kept per size); under "auto", exp and fp8
            # also when whole steps sent natively measured faster
            key = (buf.numel(), buf.dtype)
            if key not in self._plain:
                with self._lock:  # not while the worker runs a collective on comm
                    self._plain[key] = comm.plain("allreduce", buf.numel(), buf.dtype, self.codec)
            native = self._plain[key] or (
                self.policy == "auto" and self.codec in ("exp", "fp8") and self._trial_native(bucket))
        if native:
            # the backend's own all-reduce, asynchronous, as DDP does without
            # a hook, so it overlaps the rest of the backward
            self.native_calls += 1
            buf.div_(comm.nranks)
            work = dist.all_reduce(buf, group=self._group, async_op=True)
            return work.get_future().then(lambda f: f.value()[0])
        # libibp's collective on the hook's worker thread, so that it too
        # overlaps the rest of the backward (DDP waits for every bucket's
        # future before the optimizer step); buckets keep their order
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        if self._worker is None:
            self._worker = _Worker("ibp-ddp-hook")
            weakref.finalize(self, self._worker.q.put, None)  # a hook never closed still ends its thread
        self._worker.put(self._run, buf, fut)
        return fut

    def _run(self, buf, fut):
        try:
            with self._lock:
                allreduce_(buf, self.comm, self.codec, average=True, lsq_gather_codec=self.lsq_gather_codec)
        except BaseException as e:  # noqa: B902 (DDP raises it when it waits for the bucket)
            fut.set_exception(e)
            return
        fut.set_result(buf)

    def stats(self) -> dict:
        """The communicator's statistics (empty before the first bucket),
        plus "hook_native": the buckets sent with the backend's own
        all-reduce, "hook_choice": the "auto" trial's outcome ("native",
        "libibp", or None while it runs or when not tried) and "hook_trial":
        its median step times each way (seconds)."""
        if self.comm is None:
            return {}
        with self._lock:
            d = self.comm.stats()
        d["hook_native"] = self.native_calls
        d["hook_choice"] = self.choice
        d["hook_trial"] = self.trial
        return d

    def close(self):
        if self._worker is not None:
            self._worker.stop()  # after the buckets already handed to it
            self._worker = None
        if self.comm is not None:
            self.comm.close()
            self.comm = None


class _Worker:
    """One daemon thread running fn(*args) jobs in order."""

    def __init__(self, name):
        self.q = queue.SimpleQueue()
        self.t = threading.Thread(target=self._loop, name=name, daemon=True)
        self.t.start()

    def put(self, fn, *args):
        self.q.put((fn, args))

    def stop(self):
        self.q.put(None)
        self.t.join()

    def _loop(self):
        while True:
            job = self.q.get()
            if job is None:
                return
            job[0](*job[1])


def compressed_allreduce_hook(codec: str = "exp", **kwargs) -> CompressedAllReduceHook:
    """A hook for ``DistributedDataParallel.register_comm_hook(state, hook)``
    that all-reduces each gradient bucket with libibp's `codec` ("none",
    "exp", "fp8", "dynamiq", "pts", "lsq"); keyword arguments as
    CompressedAllReduceHook. An unknown codec raises ibp.InvalidArgumentError
    here, before any communication."""
    return CompressedAllReduceHook(codec, **kwargs)



ddp_hook = compressed_allreduce_hook  # the name issue 14 gives it: ibp.torch.ddp_hook(codec=...)
