"""Shared helpers for the libibp dataset scripts.

Everything here is small and dependency-free beyond numpy: writing ``.npy``
files in the one layout libibp reads (format v1.0, C order, little-endian),
float32 -> bfloat16 conversion, hashing, and a one-line summary per array.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

DATASETS_DIR = Path(__file__).resolve().parent
DEFAULT_CACHE = DATASETS_DIR / "cache"
SAMPLE_DIR = DATASETS_DIR / "sample"


def to_little_endian_c(arr: np.ndarray) -> np.ndarray:
    """Return ``arr`` as a C-contiguous array with a little-endian dtype."""
    arr = np.asarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)


def save_npy(path: Path, arr: np.ndarray) -> Path:
    """Write ``arr`` to ``path`` as .npy v1.0, C order, little-endian.

    The file is written to a temporary name and renamed, so an interrupted
    run never leaves a truncated file that a later cached run would trust.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = to_little_endian_c(arr)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, arr, version=(1, 0), allow_pickle=False)
    os.replace(tmp, path)
    return path


def save_json(path: Path, obj) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (stable across runs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of a byte string."""
    return hashlib.sha256(data).hexdigest()


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round to nearest, ties to even).

    Returns the bf16 bit patterns as ``uint16`` (the high half of the float32
    word after rounding). NaNs stay quiet NaNs with their sign; infinities and
    values that round past the largest bf16 become infinities, as IEEE
    rounding requires.
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = (bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bf16 bit patterns (``uint16``) to float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def describe(name: str, arr: np.ndarray, path: Path | None = None, show: bool = True) -> dict:
    """Return (and print, if ``show``) a summary of an array: shape, dtype, size, range.

    ``uint16`` arrays whose name contains ``bf16`` are summarised as the
    bfloat16 values they encode.
    """
    info = {"name": name, "shape": list(arr.shape), "dtype": str(arr.dtype),
            "bytes": int(arr.nbytes)}
    vals = arr
    if arr.dtype == np.uint16 and "bf16" in name:
        vals = bf16_bits_to_f32(arr)
        info["encodes"] = "bfloat16"
    if vals.size and vals.dtype.kind in "fiu":
        v64 = vals.astype(np.float64)
        finite = np.isfinite(v64)
        info["finite_fraction"] = float(finite.mean())
        fv = v64[finite]
        if fv.size:
            info.update(min=float(fv.min()), max=float(fv.max()),
                        mean=float(fv.mean()), std=float(fv.std()))
        info["nonzero_fraction"] = float(np.count_nonzero(vals) / vals.size)
    if path is not None:
        info["file"] = str(path)
        info["file_bytes"] = Path(path).stat().st_size
    if not show:
        return info
    rng = ""
    if "min" in info:
        rng = (f" range [{info['min']:.4g}, {info['max']:.4g}] mean {info['mean']:.4g}"
               f" std {info['std']:.4g} nonzero {info['nonzero_fraction']:.4f}")
    enc = " (bf16 bits)" if info.get("encodes") else ""
    print(f"  {name:<34} {str(tuple(arr.shape)):<16} {str(arr.dtype):<8}{enc}"
          f" {arr.nbytes / 2**20:8.2f} MiB{rng}", flush=True)
    return info


def cached(paths, force: bool) -> bool:
    """True when every path exists and ``force`` is off (reuse the cache)."""
    return not force and all(Path(p).exists() for p in paths)
