"""ibp.torch.EmbeddingBag and CudaStore.embedding_bag on a GPU
(ibp_store_embedding_bag_cuda). With a GPU (a CUDA build of libibp and torch
with CUDA): the GPU bags equal the CPU path (ibp's CPU bag, hence the CPU
nn.EmbeddingBag) bit for bit, in every mode, with weights, padding_idx,
include_last_offset and 2-D input, and bad ids raise. Without one (this
machine): the GPU test skips with its reason, and every way of moving the
module to a GPU raises ibp.NoDeviceError and leaves it working on the CPU."""

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch")
ibp_torch = pytest.importorskip("ibp.torch")


def _table(rng, rows=300, dim=24, dtype=torch.float32):
    w = torch.from_numpy(rng.standard_normal((rows, dim)).astype(np.float32))
    w[50:80] = w[0]  # repeated rows: something for the codec to find
    return w.to(dtype)


def _bags(rng, rows, n_bags=40, max_len=12, pad=None):
    lens = rng.integers(0, max_len, n_bags)
    lens[::7] = 0  # empty bags give zeros
    ids = torch.from_numpy(rng.integers(0, rows, int(lens.sum())))
    if pad is not None and ids.numel():
        ids[::5] = pad
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64))
    return ids, offsets


def test_module_to_cuda_without_device_raises_no_device():
    if ibp.device_count() > 0:
        pytest.skip("a usable CUDA device is present")
    rng = np.random.default_rng(3)
    w = _table(rng)
    bag = ibp_torch.EmbeddingBag.from_pretrained(w, mode="sum")
    for move in (lambda: bag.cuda(), lambda: bag.cuda(0), lambda: bag.to("cuda"), lambda: bag.to("cuda:0"),
                 lambda: bag.to(torch.device("cuda", 0))):
        with pytest.raises(ibp.NoDeviceError) as ei:
            move()
        assert ei.value.detail
        assert bag.device == torch.device("cpu") and bag.cuda_store is None
    with pytest.raises(ibp.NoDeviceError):
        ibp_torch.EmbeddingBag(bag.store.to_cuda())
    # still pools on the CPU, as nn.EmbeddingBag does
    ids, offsets = _bags(rng, w.shape[0])
    ref = torch.nn.EmbeddingBag.from_pretrained(w, mode="sum")(ids, offsets)
    assert torch.equal(bag(ids, offsets), ref)
    assert bag.to("cpu") is bag and bag.cpu() is bag and bag.to(torch.float32) is bag
    with pytest.raises(ibp.InvalidArgumentError, match="cannot be cast"):
        bag.to(torch.float16)
    # input on another device than the CPU table: a clear error, not a crash
    with pytest.raises(ibp.InvalidArgumentError, match="CudaStore"):
        bag(ids.to("meta"), offsets)


def _gpu():
    if ibp.device_count() == 0:
        pytest.skip("no usable CUDA device (or a CPU-only libibp): GPU bag test skipped")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA: GPU bag test skipped")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_bag_equals_cpu_bag(dtype):
    _gpu()
    rng = np.random.default_rng(7)
    w = _table(rng, dtype=dtype)
    rows = w.shape[0]
    store = ibp.Store.from_array(w.contiguous())
    with store.to_cuda() as cs:
        for mode in ("sum", "mean", "max"):
            for pad in (None, 5):
                for weighted in ((False, True) if mode == "sum" else (False,)):
                    for idt in (torch.int32, torch.int64):
                        ids, offsets = _bags(rng, rows, pad=pad)
                        ids = ids.to(idt)
                        psw = torch.from_numpy(rng.standard_normal(ids.numel()).astype(np.float32)) \
                            if weighted else None
                        cpu = ibp_torch.embedding_bag(ids, store, offsets, mode, psw, padding_idx=pad)
                        gpu = cs.embedding_bag(ids.cuda(), offsets.cuda(), mode,
                                               psw.cuda() if psw is not None else None, pad)
                        assert gpu.is_cuda and gpu.dtype == dtype
                        assert torch.equal(gpu.cpu().view(torch.int16 if dtype != torch.float32 else torch.int32),
                                           cpu.view(torch.int16 if dtype != torch.float32 else torch.int32)), \
                            (mode, pad, weighted, idt)
        # include_last_offset, 2-D ids, out=, a stream
        ids, offsets = _bags(rng, rows)
        last = torch.cat([offsets, torch.tensor([ids.numel()])])
        assert torch.equal(cs.embedding_bag(ids.cuda(), last.cuda(), "sum", include_last_offset=True).cpu(),
                           ibp_torch.embedding_bag(ids, store, offsets, "sum"))
        ids2 = torch.from_numpy(rng.integers(0, rows, (16, 5)))
        assert torch.equal(cs.embedding_bag(ids2.cuda(), mode="mean").cpu(),
                           ibp_torch.embedding_bag(ids2, store, mode="mean"))
        out = torch.empty(offsets.numel(), w.shape[1], dtype=dtype, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            assert cs.embedding_bag(ids.cuda(), offsets.cuda(), "max", out=out, stream=stream) is out
        stream.synchronize()
        assert torch.equal(out.cpu(), ibp_torch.embedding_bag(ids, store, offsets, "max"))
        # a bad id: raised with checks, a zero bag without
        bad = torch.tensor([1, rows, 2], device="cuda")
        with pytest.raises(ibp.OutOfRangeError):
            cs.embedding_bag(bad, torch.tensor([0, 1], device="cuda"))
        z = cs.embedding_bag(bad, torch.tensor([0, 1], device="cuda"), check_errors=False)
        torch.cuda.synchronize()
        assert torch.count_nonzero(z[1]) == 0
        assert torch.equal(z[0].cpu(), ibp_torch.embedding_bag(torch.tensor([1]), store, torch.tensor([0]), "sum")[0])
    store.close()


def test_module_on_cuda_equals_nn_embedding_bag():
    _gpu()
    rng = np.random.default_rng(11)
    w = _table(rng)
    ids, offsets = _bags(rng, w.shape[0], pad=3)
    psw = torch.from_numpy(rng.standard_normal(ids.numel()).astype(np.float32))
    for mode, kw in (("sum", {}), ("mean", {}), ("max", {}), ("sum", {"per_sample_weights": psw})):
        ref = torch.nn.EmbeddingBag.from_pretrained(w, mode=mode, padding_idx=3)(ids, offsets, **kw)
        bag = ibp_torch.EmbeddingBag.from_pretrained(w, mode=mode, padding_idx=3).cuda()
        assert bag.device.type == "cuda"
        kw = {k: v.cuda() for k, v in kw.items()}
        got = bag(ids.cuda(), offsets.cuda(), **kw)
        assert got.is_cuda and torch.equal(got.cpu(), ref), mode
        with pytest.raises(ibp.InvalidArgumentError):
            bag(ids, offsets)  # CPU input to a module on the GPU
        assert bag.cpu().device.type == "cpu" and torch.equal(bag(ids, offsets, **{k: v.cpu() for k, v in kw.items()}), ref)
