"""GPU entry points. Without a usable GPU (or in a CPU-only build, the
default of `pip install ./python`) they raise ibp.NoDeviceError carrying
libibp's reason; with one (a build with -Ccmake.define.IBP_CUDA=AUTO, a GPU
and torch with CUDA) CudaStore.gather is checked against the CPU gather."""

import numpy as np
import pytest

import ibp
from conftest import make_rows


def test_cuda_queries_never_raise():
    assert isinstance(ibp.cuda_built(), bool)
    assert ibp.device_count() >= 0


def test_to_cuda_without_device():
    if ibp.device_count() > 0:
        pytest.skip("a usable CUDA device is present")
    with ibp.Store.from_array(make_rows(np.random.default_rng(0), 20, (8,), "float32")) as s:
        for kw in ({}, dict(pinned=False), dict(device=0)):
            with pytest.raises(ibp.NoDeviceError) as ei:
                s.to_cuda(**kw)
            assert ei.value.detail and ei.value.func
            if not ibp.cuda_built():
                assert "without CUDA" in ei.value.detail


def test_cuda_gather_matches_cpu():
    if ibp.device_count() == 0:
        pytest.skip("no usable CUDA device (or a CPU-only libibp)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    a = make_rows(np.random.default_rng(1), 4000, (64,), "float32")
    with ibp.Store.from_array(a) as s:
        for pinned in (True, False):
            with s.to_cuda(pinned=pinned) as cs:
                ids = torch.randint(0, 4000, (1000,), device="cuda")
                g = cs.gather(ids)
                assert g.is_cuda and g.shape == (1000, 64)
                assert np.array_equal(g.cpu().numpy(), a[ids.cpu().numpy()])
                out = torch.empty(1000, 64, device="cuda")
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    assert cs.gather(ids, out=out, stream=stream) is out
                stream.synchronize()
                assert torch.equal(out, g)
                with pytest.raises(ibp.OutOfRangeError):
                    cs.gather(torch.tensor([4000], device="cuda"))
