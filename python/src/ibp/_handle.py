"""A C object handle that may be used from many threads and closed safely.

close() waits until every call that is using the handle has returned, so a
close on one thread can never free the object under a gather on another
(libibp's rule: "no gather may be running" when a store is closed).
"""

from __future__ import annotations

import contextlib
import threading

from . import _errors


class Handle:
    __slots__ = ("_h", "_free", "_lock", "_idle", "_active", "_what", "__weakref__")

    def __init__(self, h, free, what: str):
        self._h = h
        self._free = free
        self._lock = threading.Lock()
        self._idle = None  # an Event while close() waits for running calls
        self._active = 0
        self._what = what

    def acquire(self):
        with self._lock:
            h = self._h
            if h is None:
                raise _errors.invalid(self._what, "the %s is closed" % self._what)
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
                raise _errors.invalid(func, "the %s is closed" % self._what)
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
        if h is not None:
            self._free(h)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


class Owner:
    """Lifetime of a Python object owning one Handle (self._handle): close()
    (idempotent; subclasses extend it), a context manager that closes, and a
    finaliser that frees the C object if close() was never called."""

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

    def __del__(self):
        try:
            self._handle.close()
        except Exception:
            pass
