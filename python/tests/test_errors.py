"""Every failure is an ibp.Error subclass carrying libibp's detail message."""

import os

import numpy as np
import pytest

import ibp
from conftest import make_rows


def test_hierarchy():
    assert issubclass(ibp.InvalidArgumentError, ValueError)
    assert issubclass(ibp.OutOfRangeError, IndexError)
    assert issubclass(ibp.ChecksumError, ibp.CorruptError)
    assert issubclass(ibp.FileError, OSError)
    assert issubclass(ibp.NoMemoryError, MemoryError)
    for e in (ibp.CorruptError, ibp.InvalidArgumentError, ibp.OutOfRangeError, ibp.NoDeviceError,
              ibp.FileError, ibp.UnsupportedError, ibp.CudaError, ibp.InternalError,
              ibp.BufferTooSmallError, ibp.NoMemoryError):
        assert issubclass(e, ibp.Error)
    statuses = {e.status for e in (ibp.InvalidArgumentError, ibp.NoMemoryError, ibp.CorruptError,
                                   ibp.ChecksumError, ibp.FileError, ibp.UnsupportedError,
                                   ibp.BufferTooSmallError, ibp.OutOfRangeError, ibp.CudaError,
                                   ibp.NoDeviceError, ibp.InternalError)}
    assert statuses == set(range(1, 12))  # one class per ibp_status_t


def test_missing_file(tmp_path):
    with pytest.raises(ibp.FileError) as ei:
        ibp.open(tmp_path / "nope.ibp")
    assert ei.value.status == 5 and "nope.ibp" in ei.value.detail
    assert ei.value.func == "ibp_store_open"


def test_not_a_container(tmp_path):
    p = tmp_path / "junk.ibp"
    p.write_bytes(b"this is not an ibp container" * 10)
    with pytest.raises(ibp.CorruptError) as ei:
        ibp.open(p)
    assert "junk.ibp" in str(ei.value) and ei.value.detail


def test_payload_damage_found_by_verify(tmp_path, rng):
    a = make_rows(rng, 2000, (32,), "float32")
    p = tmp_path / "a.ibp"
    ibp.pack(a, p)
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x10  # inside the payload
    p.write_bytes(bytes(b))
    for verify in (True, "full"):
        with pytest.raises(ibp.CorruptError) as ei:  # its subclass ChecksumError, in fact
            ibp.open(p, verify=verify)
        assert isinstance(ei.value, ibp.ChecksumError) and "checksum" in ei.value.detail
    # verify=False skips the payload checksums: the file opens, and the full
    # check still reports the damage
    with ibp.open(p, verify=False) as s:
        with pytest.raises(ibp.CorruptError):
            s.verify()
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.open(p, verify="maybe")


def test_invalid_arguments(tmp_path, rng):
    a = make_rows(rng, 50, (8,), "float32")
    cases = [
        lambda: ibp.pack(a, tmp_path / "x.ibp", codec="zip"),
        lambda: ibp.pack(a, tmp_path / "x.ibp", chunk=3),
        lambda: ibp.pack(a, tmp_path / "x.ibp", threshold=0.2),
        lambda: ibp.pack(a, tmp_path / "x.ibp", clusters=65),
        lambda: ibp.pack(a, tmp_path / "x.ibp", layout="diagonal"),
        lambda: ibp.pack(a, tmp_path / "x.ibp", dtype="bf16"),  # 4-byte elements
        lambda: ibp.pack(np.float32(1.0), tmp_path / "x.ibp"),  # 0-d
        lambda: ibp.pack(a, tmp_path / "x.ibp", codec="fp8", lossy=True, fp8_block=100),
        lambda: ibp.pack(a.astype(">f4"), tmp_path / "x.ibp"),
        lambda: ibp.pack(a.astype(np.complex64), tmp_path / "x.ibp"),
        lambda: ibp.exp.compress(a, table="median"),
        lambda: ibp.fp8.compress(a, format="e3m4"),
        lambda: ibp.exp.compress(a.astype(np.int32)),
    ]
    for f in cases:
        with pytest.raises(ibp.InvalidArgumentError) as ei:
            f()
        assert isinstance(ei.value, ValueError) and str(ei.value)
    assert not os.path.exists(tmp_path / "x.ibp")


def test_library_detail_is_carried(rng):
    a = make_rows(rng, 50, (8,), "float32")
    with pytest.raises(ibp.InvalidArgumentError) as ei:
        ibp.Store.from_array(a, codec="fp8", lossy=True, fp8_block=100)
    # the detail comes from libibp (ibp_last_error), not from the package
    assert ei.value.func == "ibp_pack_fp8" and ei.value.detail and ei.value.detail in str(ei.value)


def test_unwritable_path(rng):
    with pytest.raises(ibp.FileError):
        ibp.pack(make_rows(rng, 5, (4,), "int8"), "/nonexistent-dir/x.ibp")


def test_no_device():
    if ibp.device_count() > 0:
        pytest.skip("a CUDA device is present")
    s = ibp.Store.from_array(np.arange(64, dtype=np.float32).reshape(16, 4))
    with pytest.raises(ibp.NoDeviceError) as ei:
        s.to_cuda()
    assert ei.value.status == 10 and ei.value.detail  # libibp's reason (no device / no CUDA build)
    assert "CUDA" in str(ei.value) or "device" in str(ei.value)
    s.close()
