"""ibp.fp8: the LOSSY FP8 block codec (E4M3/E5M2 with a per-block
Walsh-Hadamard rotation and scales) on whole tensors (bfloat16, float16,
float32): about 1 byte per element, relative L2 error about 2.6% (E4M3).

    buf = ibp.fp8.compress(t)        # uint8 array (tensor for torch input)
    approx = ibp.fp8.decompress(buf) # same dtype and shape, LOSSY values
    ch = ibp.fp8.compress_chunks(t, chunk_elems=t.shape[-1])   # one stream per row
    approx = ibp.fp8.decompress_chunks(ch)
"""

from __future__ import annotations

from ._chunks import Chunks, compress_fp8_chunks as _cc, decompress_fp8_chunks as _dc
from ._codecs import Fp8Codec
from ._tensor import compress_fp8 as _c, decompress_fp8 as _d

__all__ = ["compress", "decompress", "compress_chunks", "decompress_chunks", "Chunks", "Codec"]

# The codec object of ibp.codec('fp8') (one interface for ibp, exp and fp8); the
# functions below stay as they are.
Codec = Fp8Codec


def compress(tensor, *, format: str = "e4m3", block: int = 256, hadamard: bool = True,
             adaptive: bool = True, nthreads: int = 0, dtype=None):
    """Compresses a bfloat16/float16/float32 array or tensor (LOSSY) into one
    uint8 buffer (NumPy, or torch.uint8 for torch input) recording dtype and
    shape. format "e4m3" or "e5m2"; block: elements per scale block, a power
    of two in 16..4096; dtype="bf16" reads 16-bit integers as bfloat16 bit
    patterns. The output bytes do not depend on nthreads."""
    return _c(tensor, format, block, hadamard, adaptive, nthreads, dtype)


def decompress(buf, out=None, *, nthreads: int = 0, trusted: bool = False):
    """The FP8 reconstruction (lossy) of the tensor compress was given, in its
    dtype and shape, or written into out= in place. The buffer's checksum is
    verified first; damage raises ibp.CorruptError (ibp.ChecksumError when
    the checksum catches it). trusted=True skips the checksum for bytes the
    caller verified already (every other check stays). Buffers of the
    earlier format (frame version 1, no checksum) still decode."""
    return _d(buf, out, nthreads, trusted)


def compress_chunks(tensor, chunk_elems: int, *, format: str = "e4m3", block: int = 256,
                    hadamard: bool = True, adaptive: bool = True, nthreads: int = 0, dtype=None,
                    out=None) -> Chunks:
    """Compresses (LOSSY) a bfloat16/float16/float32 array or tensor in
    independent chunks of `chunk_elems` elements (C order; the last chunk
    may be shorter), each its own FP8 stream, packed back to back: an
    ibp.Chunks. Any chunk decodes alone (chunk_elems = a row's elements:
    random access by row); each stream is what ibp_fp8_encode writes for
    that chunk alone, with its checksum. libibp has no CPU batch call for FP8, so this is
    one ibp_fp8_encode call per chunk from a loop (the GIL released in each).
    Options as for compress; out= a previous Chunks, refilled in place."""
    return _cc(tensor, chunk_elems, format, block, hadamard, adaptive, nthreads, dtype, out)


def decompress_chunks(chunks: Chunks, out=None, *, nthreads: int = 0, trusted: bool = False):
    """The FP8 reconstruction (lossy) of the tensor compress_chunks was
    given, in its dtype and shape, or written into out= in place; one
    ibp_fp8_decode call per chunk. Payload and offsets are untrusted: each
    stream's checksum is verified, and damage raises ibp.CorruptError
    (trusted=True skips the checksums)."""
    return _dc(chunks, out, nthreads, trusted)
