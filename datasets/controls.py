"""Synthetic control sets: Gaussian rows at several scales, and random bytes.

They bracket what a codec can do: Gaussian float rows of a fixed sigma have a
fixed exponent spread (the part bit packing can exploit) and random mantissas;
uniform random bytes are incompressible. All come from numpy's PCG64
generator with fixed seeds, so the files are identical on every run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dsutil import describe, f32_to_bf16_bits, save_npy

SIGMAS = (1e-3, 1e-2, 1e-1, 1.0)
SEED = 20240601


def sigma_tag(sigma: float) -> str:
    """File-name tag of a sigma: 1e-3 -> 's1e-3', 1.0 -> 's1'."""
    return "s1" if sigma == 1.0 else "s" + f"{sigma:.0e}".replace("e-0", "e-")


def build(out: Path, rows: int, cols: int, sigmas=SIGMAS) -> list[dict]:
    """Write gauss_{tag}_f32 / gauss_{tag}_bf16 (rows, cols) for each sigma,
    and random_bytes_u8 (rows, 2*cols) uint8 (the byte width of a bf16 row)."""
    infos = []
    for k, sigma in enumerate(sigmas):
        rng = np.random.Generator(np.random.PCG64(SEED + k))
        x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(sigma)
        tag = sigma_tag(sigma)
        infos.append(describe(f"gauss_{tag}_f32", x, save_npy(out / f"gauss_{tag}_f32.npy", x)))
        bits = f32_to_bf16_bits(x)
        infos.append(describe(f"gauss_{tag}_bf16", bits,
                              save_npy(out / f"gauss_{tag}_bf16.npy", bits)))
    rng = np.random.Generator(np.random.PCG64(SEED + 100))
    raw = rng.integers(0, 256, size=(rows, 2 * cols), dtype=np.uint8)
    infos.append(describe("random_bytes_u8", raw, save_npy(out / "random_bytes_u8.npy", raw)))
    return infos
