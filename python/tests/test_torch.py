"""PyTorch: tensors in give tensors out (bfloat16 included), out= in place,
the torch.library custom ops and their fake implementations (opcheck).
Skipped, and reported as skipped, when torch is not installed."""

import numpy as np
import pytest

import ibp
from conftest import make_rows

torch = pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture(scope="module")
def bf16_store():
    t = torch.randn(300, 5, 8).to(torch.bfloat16)
    s = ibp.Store.from_array(t)
    yield s, t
    s.close()


def test_torch_in_torch_out(bf16_store):
    s, t = bf16_store
    assert s.dtype == "bfloat16" and s.shape == (300, 5, 8)
    for idt in (torch.int32, torch.int64):
        ids = torch.tensor([4, 1, 1, 299], dtype=idt)
        g = s.gather(ids)
        assert isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16 and g.shape == (4, 5, 8)
        assert torch.equal(g, t[ids.long()])
    g = s[torch.tensor([[0, 1], [2, 3]])]
    assert g.shape == (2, 2, 5, 8) and torch.equal(g, t[:4].reshape(2, 2, 5, 8))
    with pytest.raises(ibp.OutOfRangeError):
        s.gather(torch.tensor([300]))
    with pytest.raises(ibp.InvalidArgumentError):
        s.gather(torch.tensor([1.0]))


def test_out_tensor_in_place(bf16_store):
    s, t = bf16_store
    out = torch.empty(3, 5, 8, dtype=torch.bfloat16)
    ptr = out.data_ptr()
    r = s.gather([7, 8, 9], out=out)
    assert r is out and out.data_ptr() == ptr and torch.equal(out, t[7:10])
    full = torch.empty(300, 5, 8, dtype=torch.bfloat16)
    assert s.read(out=full) is full and torch.equal(full, t)
    with pytest.raises(ibp.InvalidArgumentError):
        s.gather([1], out=torch.empty(1, 5, 8, dtype=torch.float16))
    with pytest.raises(ibp.InvalidArgumentError):
        s.gather([1, 2], out=torch.empty(5, 2, 8, dtype=torch.bfloat16).transpose(0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8,
                                   torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
                                   torch.float64])
def test_every_torch_dtype(dtype):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        t = torch.rand(64, 9, generator=g) < 0.2
    elif dtype.is_floating_point:
        t = torch.randn(64, 9, generator=g).to(dtype)
    else:
        t = torch.randint(-100 if dtype != torch.uint8 else 0, 100, (64, 9), generator=g).to(dtype)
    with ibp.Store.from_array(t) as s:
        ids = torch.tensor([63, 0, 5, 5])
        g2 = s.gather(ids)
        assert g2.dtype == dtype and torch.equal(g2, t[ids])
        assert torch.equal(torch.from_numpy(s.read()) if dtype != torch.bfloat16 else
                           torch.from_numpy(s.read().view(np.int16)).view(torch.bfloat16), t)


def test_non_contiguous_and_grad_inputs():
    t = torch.randn(40, 16, requires_grad=True)
    with ibp.Store.from_array(t.t()) as s:  # non-contiguous: copied
        assert torch.equal(torch.from_numpy(s.read()), t.detach().t().contiguous())
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Store.from_array(torch.randn(4, 4, dtype=torch.complex64))


@pytest.mark.parametrize("mod", ["exp", "fp8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_tensor_codecs(mod, dtype):
    m = getattr(ibp, mod)
    t = (torch.randn(17, 3, 100) * 0.05).to(dtype)
    buf = m.compress(t)
    assert isinstance(buf, torch.Tensor) and buf.dtype == torch.uint8 and buf.dim() == 1
    back = m.decompress(buf)
    assert isinstance(back, torch.Tensor) and back.dtype == dtype and back.shape == t.shape
    if mod == "exp":
        assert torch.equal(back, t)
        assert buf.numel() < t.numel() * t.element_size()
    else:
        rel = (back.float() - t.float()).norm() / t.float().norm()
        assert rel < 0.08
    out = torch.empty_like(t)
    ptr = out.data_ptr()
    assert m.decompress(buf, out=out) is out and out.data_ptr() == ptr and torch.equal(out, back)
    # numpy buffer in: numpy out
    assert isinstance(m.decompress(buf.numpy()), np.ndarray)


def test_dlpack_input():
    class Producer:  # anything with __dlpack__ (here backed by a NumPy array)
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = make_rows(np.random.default_rng(0), 50, (6,), "float32")
    with ibp.Store.from_array(Producer(a)) as s:
        assert s.read().tobytes() == a.tobytes()
        assert s.gather(Producer(np.array([3, 1]))).tobytes() == a[[3, 1]].tobytes()
    # a torch tensor reached through DLPack only
    t = torch.arange(24, dtype=torch.int32).reshape(6, 4)
    with ibp.Store.from_array(Producer(t.numpy())) as s:
        assert np.array_equal(s.read(), t.numpy())


def test_custom_ops_opcheck(bf16_store):
    import ibp.ops
    s, t = bf16_store
    ids = torch.tensor([3, 2, 1, 299], dtype=torch.int64)
    g = torch.ops.ibp.gather(s.op_handle, ids)
    assert torch.equal(g, t[ids])
    assert torch.equal(ibp.ops.gather(s, ids), t[ids])
    out = torch.empty(4, 5, 8, dtype=torch.bfloat16)
    torch.ops.ibp.gather_out(s.op_handle, ids, out)
    assert torch.equal(out, t[ids])
    torch.library.opcheck(torch.ops.ibp.gather.default, (s.op_handle, ids))
    torch.library.opcheck(torch.ops.ibp.gather.default,
                          (s.op_handle, torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)))
    torch.library.opcheck(torch.ops.ibp.gather_out.default, (s.op_handle, ids, out))


def test_custom_op_fake_shapes(bf16_store):
    import ibp.ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode
    s, _ = bf16_store
    with FakeTensorMode():
        ids = torch.empty(7, 2, dtype=torch.int64)
        r = torch.ops.ibp.gather(s.op_handle, ids)
        assert r.shape == (7, 2, 5, 8) and r.dtype == torch.bfloat16


def test_custom_op_under_compile(bf16_store):
    import ibp.ops  # noqa: F401
    s, t = bf16_store
    h = s.op_handle

    def f(ids):
        return torch.ops.ibp.gather(h, ids).float().sum(dim=-1)

    try:
        cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    except Exception as e:  # pragma: no cover - depends on the torch build
        pytest.skip("torch.compile unavailable: %s" % e)
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(cf(ids), f(ids))


def test_closed_store_op_handle():
    import ibp.ops  # noqa: F401
    s = ibp.Store.from_array(torch.arange(10, dtype=torch.int64))
    h = s.op_handle
    assert torch.ops.ibp.gather(h, torch.tensor([9]))[0] == 9
    s.close()
    with pytest.raises(Exception, match="op handle"):
        torch.ops.ibp.gather(h, torch.tensor([9]))
