"""torch.library custom ops for the gather, so code under torch.compile can
call it (import this module to register them; it imports torch).

    import ibp.ops
    rows = torch.ops.ibp.gather(store.op_handle, ids)          # new tensor
    torch.ops.ibp.gather_out(store.op_handle, ids, out)       # in place
    rows = ibp.ops.gather(store, ids)                          # the same, by store

`store.op_handle` is an int naming an open ibp.Store (it stays registered,
and the store alive, until store.close()). Both ops have fake (meta)
implementations that give the output's shape and dtype from the store
without touching data, and are checked by torch.library.opcheck in the tests.
"""

from __future__ import annotations

import torch

from . import _arrays, _registry

__all__ = ["gather", "gather_out"]


@torch.library.custom_op("ibp::gather", mutates_args=(), device_types="cpu")
def _gather(handle: int, ids: torch.Tensor) -> torch.Tensor:
    return _registry.get(handle).gather(ids)


@_gather.register_fake
def _gather_fake(handle: int, ids: torch.Tensor) -> torch.Tensor:
    s = _registry.get(handle)
    return ids.new_empty(tuple(ids.shape) + tuple(s.shape[1:]), dtype=_arrays.torch_dtype(s._code))


@torch.library.custom_op("ibp::gather_out", mutates_args=("out",), device_types="cpu")
def _gather_out(handle: int, ids: torch.Tensor, out: torch.Tensor) -> None:
    _registry.get(handle).gather(ids, out=out)


@_gather_out.register_fake
def _gather_out_fake(handle: int, ids: torch.Tensor, out: torch.Tensor) -> None:
    return None


def gather(store, ids: torch.Tensor) -> torch.Tensor:
    """torch.ops.ibp.gather on `store` (an ibp.Store)."""
    return torch.ops.ibp.gather(store.op_handle, ids)


def gather_out(store, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """torch.ops.ibp.gather_out on `store`; returns out."""
    torch.ops.ibp.gather_out(store.op_handle, ids, out)
    return out
