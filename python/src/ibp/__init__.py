"""ibp: libibp from Python (NumPy and PyTorch).

    ibp.pack(array, "x.ibp")                  # write a container (codec ibp, exp or fp8)
    with ibp.open("x.ibp") as store:          # verified by default
        rows = store.gather(ids)              # decoded rows, in request order
    codec = ibp.train(array); enc = codec.encode(array); back = codec.decode(enc)
    buf = ibp.exp.compress(t); t2 = ibp.exp.decompress(buf)     # lossless
    buf = ibp.fp8.compress(t); t3 = ibp.fp8.decompress(buf)     # LOSSY
    c = ibp.codec("exp"); enc = c.encode(t); back = c.decode(enc)  # one interface: "ibp", "exp", "fp8"

Arrays in: NumPy arrays, PyTorch tensors (torch.bfloat16 included), anything
with __dlpack__ or the buffer protocol. Arrays out: torch in, torch out;
otherwise NumPy. Every libibp failure raises an ibp.Error subclass carrying
libibp's detail message. See python/README.md.
"""

from __future__ import annotations

from ._errors import (BufferTooSmallError, CapacityError, ChecksumError, ClosedError, CorruptError, CudaError, Error,
                      FileError, InternalError, InvalidArgumentError, NoDeviceError, NoMemoryError,
                      OutOfRangeError, UnsupportedError)
from . import _lib
from ._store import Store, open, pack
from ._codec import Codec, Encoded, train
from ._chunks import Chunks
from ._codecs import ExpCodec, Fp8Codec, codec
from ._impl import default_impl, impls
from ._cuda import CudaStore, cuda_built, device_count
from ._cache import Cache, MissingBlockError, SlabPool
from ._coll import Communicator  # compressed collectives over any transport (ibp.torch.ddp)
from . import exp, fp8

__version__ = "0.1.0"

__all__ = [
    "pack", "open", "Store", "train", "codec", "Codec", "ExpCodec", "Fp8Codec", "Encoded", "Chunks", "exp", "fp8",
    "CudaStore",
    "impls", "default_impl", "Cache", "SlabPool", "MissingBlockError", "Communicator",
    "cuda_built", "device_count", "library_version", "library_path", "host_allocator", "cli_path",
    "Error", "CorruptError", "ChecksumError", "InvalidArgumentError", "BufferTooSmallError", "ClosedError",
    "CapacityError",
    "OutOfRangeError", "NoDeviceError", "NoMemoryError", "FileError", "UnsupportedError",
    "CudaError", "InternalError",
]


def library_version() -> str:
    """Version of the libibp actually loaded (ibp_version_string)."""
    return _lib.lib.ibp_version_string().decode()


def library_path() -> str:
    """Path of the libibp shared library this package loaded."""
    return _lib.path


def host_allocator() -> str:
    """The allocator libibp uses for large host buffers in this process
    ("jemalloc" only when it was loaded at process start, else libc)."""
    return _lib.lib.ibp_host_allocator().decode()


def cli_path():
    """Path of the `ibp` command-line tool installed with the package, or
    None when the wheel has none."""
    import os
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ibp")
    return p if os.access(p, os.X_OK) else None
