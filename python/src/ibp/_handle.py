"""A C object handle that may be used from many threads and closed safely.

close() waits until every call that is using the handle has returned, so a
close on one thread can never free the object under a gather on another
(libibp's rule: "no gather may be running" when a store is closed).

fork(): in a child only the forking thread runs, so calls the parent's
other threads had in flight never return there. After a fork every handle
starts over in the child (fresh lock, no call in flight; os.register_at_fork),
so close() in the child does not wait for them. Handles made with
process_bound=True (communicators, CUDA stores: transports, helper threads
and device contexts that fork does not copy) raise ibp.UnsupportedError in a
child, and closing them there frees nothing (the C object is the parent's).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

from . import _errors

_fork = [0]  # forks since import, along this process's ancestry
_live: "weakref.WeakSet[Handle]" = weakref.WeakSet()
_live_lock = threading.Lock()


def fork_generation() -> int:
    return _fork[0]


def _after_fork_in_child():
    global _live_lock
    _fork[0] += 1
    _live_lock = threading.Lock()  # another thread may have held it at the fork
    for h in list(_live):
        h._lock = threading.Lock()
        h._active = 0
        h._idle = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Handle:
    __slots__ = ("_h", "_free", "_lock", "_idle", "_active", "_what", "_gen", "__weakref__")

    def __init__(self, h, free, what: str, *, process_bound: bool = False):
        self._h = h
        self._free = free
        self._lock = threading.Lock()
        self._idle = None  # an Event while close() waits for running calls
        self._active = 0
        self._what = what  # names the object in errors: "ibp.Store x.ibp"
        self._gen = _fork[0] if process_bound else None
        with _live_lock:
            _live.add(self)

    def _foreign(self) -> bool:
        return self._gen is not None and self._gen != _fork[0]

    def _check_process(self, func: str = ""):
        if self._foreign():
            raise not_here(func, self._what)

    def acquire(self, func: str = ""):
        with self._lock:
            h = self._h
            if h is None:
                raise _errors.closed(func, self._what)
            self._check_process(func)
            self._active += 1
            return h

    def release(self):
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._idle is not None:
                self._idle.set()

    @contextlib.contextmanager
    def exclusive(self, func: str):
        """Gives the object to one caller alone: raises if another call is
        using it, and keeps new calls from starting (they wait on the lock)
        until the block ends. For the few operations that change the C object
        (Codec.set_impl), which libibp forbids while other threads use it."""
        with self._lock:
            if self._h is None:
                raise _errors.closed(func, self._what)
            self._check_process(func)
            if self._active:
                raise _errors.invalid(func, "the %s is in use by %d other call(s); it can only "
                                      "be changed while idle" % (self._what, self._active))
            yield self._h

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self):
        with self._lock:
            h, self._h = self._h, None
            wait = None
            if h is not None and self._active:
                wait = self._idle = threading.Event()
        if wait is not None:
            wait.wait()
        if h is not None and not self._foreign():
            self._free(h)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    def __reduce__(self):
        raise _errors.UnsupportedError("%s cannot be pickled or copied" % self._what, status=6)


def not_here(func: str, what: str) -> _errors.UnsupportedError:
    """`what` was made in a parent process before fork()."""
    msg = ("%s belongs to the parent process (it was made before fork()) and cannot be used in "
           "this child process: make a new one here" % what)
    return _errors.UnsupportedError("%s: %s" % (func, msg) if func else msg, func=func, detail=msg, status=6)


class Owner:
    """Lifetime of a Python object owning one Handle (self._handle): close()
    (idempotent; subclasses extend it), a context manager that closes, and a
    finaliser that frees the C object if close() was never called. Pickling
    and copying raise ibp.UnsupportedError unless the class defines how
    (Store, Codec)."""

    __slots__ = ()  # subclasses with __slots__ stay without a __dict__

    @property
    def closed(self) -> bool:
        """True once close() has run."""
        return self._handle.closed

    def close(self) -> None:
        """Frees the C object (waits for running calls). Idempotent."""
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __reduce__(self):
        name = "ibp." + type(self).__name__
        raise _errors.UnsupportedError(
            "%s cannot be pickled or copied: it holds libibp state of this process (%s); make a new "
            "one in the other process" % (name, _MOVE_HINT.get(type(self).__name__, "threads, memory")),
            func=name, status=6)

    def __del__(self):
        try:
            self._handle.close()
        except Exception:
            pass


_MOVE_HINT = {
    "Communicator": "a transport and a helper thread",
    "CudaStore": "device memory; pickle its host ibp.Store and call to_cuda() again",
    "Cache": "rows cached for a store of this process",
    "SlabPool": "blocks under handles only this pool knows",
}
