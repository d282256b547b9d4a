"""ibp.exp: the lossless exponent codec on whole tensors (bfloat16, float16,
float32), the codec the compressed collectives call.

    buf = ibp.exp.compress(t)        # uint8 array (tensor for torch input)
    back = ibp.exp.decompress(buf)   # bit-exact, same dtype and shape
    ch = ibp.exp.compress_chunks(t, chunk_elems=t.shape[-1])   # one block per row
    back = ibp.exp.decompress_chunks(ch)
"""

from __future__ import annotations

from ._chunks import Chunks, compress_exp_chunks as _cc, decompress_exp_chunks as _dc
from ._codecs import ExpCodec
from ._tensor import compress_exp as _c, decompress_exp as _d

__all__ = ["compress", "decompress", "compress_chunks", "decompress_chunks", "Chunks", "Codec"]

# The codec object of ibp.codec('exp') (one interface for ibp, exp and fp8); the
# functions below stay as they are.
Codec = ExpCodec


def compress(tensor, *, table: str = "sigma", sigma: float = 0.0, nthreads: int = 0, dtype=None):
    """Compresses a bfloat16/float16/float32 array or tensor (any shape) into
    one uint8 buffer (a NumPy array, or a torch.uint8 tensor for torch
    input) that records its dtype and shape. Lossless. table: "sigma"
    (exponent window from the RMS, or from `sigma` when > 0), "hist" (the
    7 most frequent exponents) or "rans" (exponents entropy-coded when that
    is smaller, else "hist"). dtype="bf16" reads 16-bit integers as
    bfloat16 bit patterns. nthreads 0 = all CPUs."""
    return _c(tensor, table, sigma, nthreads, dtype)


def decompress(buf, out=None, *, nthreads: int = 0, trusted: bool = False):
    """Restores the tensor from a buffer made by compress (bytes, a NumPy
    uint8 array or a torch.uint8 tensor; torch in gives torch out), or writes
    it into out= in place. The buffer's checksum is verified first; damage
    raises ibp.CorruptError (ibp.ChecksumError when the checksum catches
    it). trusted=True skips the checksum for bytes the caller verified
    already (every other check stays). Buffers of the earlier format (frame
    version 1, no checksum) still decode."""
    return _d(buf, out, nthreads, trusted)


def compress_chunks(tensor, chunk_elems: int, *, table: str = "sigma", sigma: float = 0.0,
                    nthreads: int = 0, dtype=None, out=None) -> Chunks:
    """Compresses a bfloat16/float16/float32 array or tensor in independent
    chunks of `chunk_elems` elements (C order; the last chunk may be
    shorter), each its own exp block, packed back to back: an ibp.Chunks
    (payload, offsets, shape, dtype). Lossless. Any chunk decodes alone:
    chunk_elems = the elements of a row gives random access by row. One
    libibp call (ibp_exp_encode_batch); nthreads (0 = all CPUs) work on
    different chunks; table, sigma and dtype as for compress. out= a
    previous Chunks, refilled in place and returned (its buffers reused: no
    allocation in a loop; its payload is then a view that the next call
    overwrites)."""
    return _cc(tensor, chunk_elems, table, sigma, nthreads, dtype, out)


def decompress_chunks(chunks: Chunks, out=None, *, nthreads: int = 0, trusted: bool = False):
    """Restores the tensor from an ibp.Chunks made by compress_chunks (same
    dtype and shape; torch in at compress gives torch out), or writes it
    into out= in place. One libibp call (ibp_exp_decode_batch); payload and
    offsets are untrusted: every block's checksum is verified and damage
    raises ibp.CorruptError (trusted=True skips the checksums)."""
    return _dc(chunks, out, nthreads, trusted)
