"""Exceptions: one per libibp status, all subclasses of ibp.Error."""

from __future__ import annotations


class Error(Exception):
    """A libibp call failed (or the package refused an argument).

    ``status`` is the ibp_status_t value (0 when the package itself refused),
    ``func`` the C function or Python API that failed, ``detail`` libibp's
    detail message (ibp_last_error) naming the file, row or field.
    """

    status = 0

    def __init__(self, message: str, *, func: str = "", detail: str = "", status: int | None = None):
        super().__init__(message)
        self.func = func
        self.detail = detail
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    """An argument is outside its documented range (IBP_ERR_INVALID_ARG)."""

    status = 1


class ClosedError(InvalidArgumentError):
    """A method was called on a closed object (an ibp.Error and a
    ValueError, as InvalidArgumentError is); the message names the object."""


class NoMemoryError(Error, MemoryError):
    """An allocation failed (IBP_ERR_NOMEM)."""

    status = 2


class CapacityError(Error):
    """A store cannot fit the offloader's byte budget (capacity_bytes):
    nothing of it was stored (ibp.torch.KVOffloader)."""

    status = 2


class CorruptError(Error):
    """Untrusted bytes (file, row, stream) failed validation (IBP_ERR_CORRUPT)."""

    status = 3


class ChecksumError(CorruptError):
    """A checksum did not match (IBP_ERR_CHECKSUM); also a CorruptError."""

    status = 4


class FileError(Error, OSError):
    """Opening, reading, writing or mapping a file failed (IBP_ERR_IO)."""

    status = 5


class UnsupportedError(Error):
    """A valid request this build or machine cannot serve (IBP_ERR_UNSUPPORTED)."""

    status = 6


class BufferTooSmallError(InvalidArgumentError):
    """A caller buffer is smaller than required (IBP_ERR_BUFFER_TOO_SMALL)."""

    status = 7


class OutOfRangeError(Error, IndexError):
    """A row id or index is outside the data set (IBP_ERR_OUT_OF_RANGE)."""

    status = 8


class CudaError(Error):
    """A CUDA call failed (IBP_ERR_CUDA); CUDA's message is in the detail."""

    status = 9


class NoDeviceError(Error):
    """A GPU entry point was called without a usable GPU, CUDA driver, or a
    libibp built with CUDA (IBP_ERR_NO_DEVICE)."""

    status = 10


class InternalError(Error):
    """A bug in libibp (IBP_ERR_INTERNAL); please report it."""

    status = 11


_BY_STATUS = {
    cls.status: cls
    for cls in (InvalidArgumentError, NoMemoryError, CorruptError, ChecksumError, FileError,
                UnsupportedError, BufferTooSmallError, OutOfRangeError, CudaError, NoDeviceError,
                InternalError)
}


def from_status(status: int, func: str, text: str, detail: str) -> Error:
    cls = _BY_STATUS.get(status, Error)
    msg = "%s: %s" % (func, text)
    if detail:
        msg += ": " + detail
    return cls(msg, func=func, detail=detail, status=status)


def closed(func: str, what: str) -> ClosedError:
    """`what` (e.g. "ibp.Store x.ibp") was used after close()."""
    detail = "%s is closed" % what
    return ClosedError("%s: %s" % (func, detail) if func else detail, func=func, detail=detail)


def invalid(func: str, detail: str) -> InvalidArgumentError:
    """An argument refused by the package before calling libibp."""
    return InvalidArgumentError("%s: invalid argument: %s" % (func, detail), func=func, detail=detail)


# Shown as ibp.CorruptError etc. in tracebacks (the public names).
for _cls in [Error, ClosedError] + list(_BY_STATUS.values()):
    _cls.__module__ = "ibp"
del _cls
