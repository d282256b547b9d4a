"""A decode loop over real K/V (all-MiniLM-L6-v2 over real text,
datasets/sample/minilm_kv_bf16.npy: 6 layers, 12 heads of 32, 128 tokens,
bf16) in a paged cache too small for the sequences it serves, so blocks
are swapped out through ibp.torch.KVOffloader and back in; at every step
each layer's attention (scaled_dot_product_attention over the K/V gathered
by the block table) must be identical (torch.equal) to the same loop with
a cache large enough that nothing is offloaded."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
from conftest import REPO  # noqa: E402

BS, HEADS, HD, LAYERS = 16, 12, 32, 6


@pytest.fixture(scope="module")
def sequences():
    """Two sequences of 64 tokens (the sample's 128 tokens cut in two):
    per sequence a [LAYERS, 2, 64, HEADS, HD] bf16 tensor of its K/V."""
    bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy"))  # (6*2*128, 384)
    t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).view(LAYERS, 2, 128, HEADS, HD)
    return [t[:, :, 0:64].contiguous(), t[:, :, 64:128].contiguous()]


class PagedKV:
    """vLLM-layout caches ([2, slots, BS, HEADS, HD] per layer) with a block
    table per sequence; when no slot is free, the least recently used block
    of a sequence other than the one running is swapped out (every layer
    through the offloader) and swapped back in when its sequence runs."""

    def __init__(self, slots, offloader=None):
        self.cache = [torch.zeros(2, slots, BS, HEADS, HD, dtype=torch.bfloat16) for _ in range(LAYERS)]
        self.free = list(range(slots))
        self.table = {}  # seq -> list of (slot or None when offloaded)
        self.lru = []  # (seq, logical block) resident, oldest first
        self.off = offloader
        self.saved = {}  # (seq, logical block) -> per layer handles
        self.swaps_out = self.swaps_in = 0

    def _slot(self, running):
        if self.free:
            return self.free.pop()
        for k, (seq, blk) in enumerate(self.lru):
            if seq != running:
                break
        else:
            raise AssertionError("no block to swap out")
        del self.lru[k]
        slot = self.table[seq][blk]
        self.saved[(seq, blk)] = [self.off.store(layer, self.cache[layer], [slot]) for layer in range(LAYERS)]
        self.table[seq][blk] = None
        self.swaps_out += 1
        return slot

    def _touch(self, seq, blk):
        if (seq, blk) in self.lru:
            self.lru.remove((seq, blk))
        self.lru.append((seq, blk))

    def make_resident(self, seq):
        for blk, slot in enumerate(self.table.setdefault(seq, [])):
            if slot is None:
                slot = self._slot(seq)
                hs = self.saved.pop((seq, blk))
                for layer in range(LAYERS):
                    self.off.load(layer, hs[layer], self.cache[layer], [slot])
                    self.off.free(hs[layer])
                self.table[seq][blk] = slot
                self.swaps_in += 1
            self._touch(seq, blk)

    def append(self, seq, pos, kv):
        """Writes token `pos` of `seq` (kv: [LAYERS, 2, HEADS, HD])."""
        blocks = self.table.setdefault(seq, [])
        if pos // BS == len(blocks):
            blocks.append(self._slot(seq))
            self._touch(seq, len(blocks) - 1)
        slot = blocks[pos // BS]
        for layer in range(LAYERS):
            self.cache[layer][:, slot, pos % BS] = kv[layer]

    def attention(self, seq, layer, q, n):
        """q: [HEADS, HD] over the first n tokens of seq, gathered by its block table."""
        ids = torch.tensor(self.table[seq], dtype=torch.int64)
        kv = self.cache[layer][:, ids].reshape(2, -1, HEADS, HD)[:, :n]  # [2, n, HEADS, HD]
        k, v = kv[0].transpose(0, 1).unsqueeze(0), kv[1].transpose(0, 1).unsqueeze(0)  # [1, HEADS, n, HD]
        return torch.nn.functional.scaled_dot_product_attention(q.view(1, HEADS, 1, HD), k, v)


def run(seqs, paged, prefill=16):
    outs = []
    for s, kv in enumerate(seqs):  # prefill
        for pos in range(prefill):
            paged.append(s, pos, kv[:, :, pos])
    if paged.off is not None:  # prefill-time calibration of each layer's codec
        for layer in range(LAYERS):
            slots = [x for s in range(len(seqs)) for x in paged.table[s]]
            paged.off.calibrate(layer, paged.cache[layer][:, slots])
    for pos in range(prefill, seqs[0].shape[2]):
        for s, kv in enumerate(seqs):  # one decode step per sequence, in turn
            paged.make_resident(s)
            paged.append(s, pos, kv[:, :, pos])
            for layer in range(LAYERS):
                q = kv[layer, 0, pos]  # the token's key as its query: real values, deterministic
                outs.append(paged.attention(s, layer, q, pos + 1))
    return outs


@pytest.fixture(scope="module")
def reference(sequences):
    return run(sequences, PagedKV(slots=8))  # 2 x 4 blocks: everything stays resident


def test_decode_loop_with_offload_is_identical(sequences, reference):
    ref = reference
    off = it.KVOffloader(LAYERS, (BS, HEADS, HD), torch.bfloat16)
    paged = PagedKV(slots=5, offloader=off)  # 3 blocks short: the other sequence's blocks go out
    got = run(sequences, paged)
    assert paged.swaps_out >= 20 and paged.swaps_in >= 20, (paged.swaps_out, paged.swaps_in)
    assert len(got) == len(ref) == 2 * 48 * LAYERS
    for i, (a, b) in enumerate(zip(got, ref)):
        assert torch.equal(a, b), "step %d differs" % i
    # the attention really depends on the swapped blocks: a corrupted restore would show
    assert not torch.equal(ref[-1], ref[-1 - LAYERS])
    print("swaps out %d, in %d; codecs %s" % (paged.swaps_out, paged.swaps_in,
                                             [off.codec(layer) for layer in range(LAYERS)]))


def test_decode_loop_detects_a_wrong_restore(sequences, reference):
    """The comparison is sensitive: a restore that loses one token of a
    block changes some step's output."""
    ref = reference

    class Wrong(it.KVOffloader):
        def load(self, layer, handles, kv_cache, dst_block_ids):
            super().load(layer, handles, kv_cache, dst_block_ids)
            kv_cache[:, dst_block_ids[0], 0] = 0  # drop the block's first token

    got = run(sequences, PagedKV(slots=5, offloader=Wrong(LAYERS, (BS, HEADS, HD), torch.bfloat16)))
    assert any(not torch.equal(a, b) for a, b in zip(got, ref))
