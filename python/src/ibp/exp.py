"""ibp.exp: the lossless exponent codec on whole tensors (bfloat16, float16,
float32), the codec the compressed collectives call.

    buf = ibp.exp.compress(t)        # uint8 array (tensor for torch input)
    back = ibp.exp.decompress(buf)   # bit-exact, same dtype and shape
"""

from __future__ import annotations

from ._tensor import compress_exp as _c, decompress_exp as _d

__all__ = ["compress", "decompress"]


def compress(tensor, *, table: str = "sigma", sigma: float = 0.0, nthreads: int = 0, dtype=None):
    """Compresses a bfloat16/float16/float32 array or tensor (any shape) into
    one uint8 buffer (a NumPy array, or a torch.uint8 tensor for torch
    input) that records its dtype and shape. Lossless. table: "sigma"
    (exponent window from the RMS, or from `sigma` when > 0) or "hist" (the
    7 most frequent exponents). dtype="bf16" reads 16-bit integers as
    bfloat16 bit patterns. nthreads 0 = all CPUs."""
    return _c(tensor, table, sigma, nthreads, dtype)


def decompress(buf, out=None, *, nthreads: int = 0):
    """Restores the tensor from a buffer made by compress (bytes, a NumPy
    uint8 array or a torch.uint8 tensor; torch in gives torch out), or writes
    it into out= in place. Corrupt buffers raise ibp.CorruptError."""
    return _d(buf, out, nthreads)
