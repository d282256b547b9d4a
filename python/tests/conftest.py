"""Shared fixtures for the ibp tests (run by tools/test-python.sh)."""

import os

import numpy as np
import pytest

import ibp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("IBP_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))

# Every libibp dtype NumPy can hold (bfloat16 is uint16 bit patterns, tested
# with dtype="bf16" and through torch), by the package's dtype names.
NP_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64", "bool"]
FLOAT_DTYPES = ["float16", "float32"]  # + bfloat16, for the exp and fp8 codecs


def make_rows(rng, nrows, row_shape, dtype):
    """Rows with structure (invariant high bits, repeats) and some noise, so
    the IBP codec uses every row mode."""
    dt = np.dtype(dtype)
    shape = (nrows,) + tuple(row_shape)
    if dt == np.bool_:
        return rng.random(shape) < 0.1
    if dt.kind == "f":
        a = rng.standard_normal(shape) * 0.05
        a[rng.random(shape) < 0.01] = 3.0
        return a.astype(dt)
    info = np.iinfo(dt)
    a = rng.integers(0, min(info.max, 1000), size=shape, dtype=np.int64)
    a[rng.random(shape) < 0.01] = info.max if info.max < (1 << 62) else (1 << 40)
    return a.astype(dt)


@pytest.fixture
def rng():
    return np.random.default_rng(0x1B9)


@pytest.fixture(scope="session")
def cli():
    """The ibp CLI: the one installed with the package, else IBP_CLI, else build/bin/ibp."""
    for p in (ibp.cli_path(), os.environ.get("IBP_CLI"), os.path.join(REPO, "build", "bin", "ibp")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("no ibp CLI (the package installs one in ibp/bin; or set IBP_CLI)")


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed")


def bf16_bits(x):
    """float32 values -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)
