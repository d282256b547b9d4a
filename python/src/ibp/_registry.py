"""Integer handles for stores passed to torch custom ops (which take tensors
and plain scalars, not Python objects)."""

from __future__ import annotations

import itertools
import threading

_lock = threading.Lock()
_stores = {}
_next = itertools.count(1)


def add(store) -> int:
    with _lock:
        k = next(_next)
        _stores[k] = store
        return k


def get(k: int):
    from . import _errors
    s = _stores.get(int(k))
    if s is None:
        raise _errors.invalid("ibp.ops", "no open store has op handle %d" % int(k))
    return s


def drop(k: int) -> None:
    with _lock:
        _stores.pop(k, None)
