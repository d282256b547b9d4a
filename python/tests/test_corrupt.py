"""A corpus of damaged containers and compressed buffers: ibp.open, gather,
read and verify either work or raise ibp.Error; the interpreter never
crashes. The corpus runs in a child interpreter so a crash (a signal) is
reported as a failure instead of killing pytest."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ibp
from conftest import make_rows

CHILD = textwrap.dedent(r"""
    import os, sys
    import numpy as np
    import ibp

    corpus = sys.argv[1]
    counts = {"ok": 0, "error": 0}
    for name in sorted(os.listdir(corpus)):
        p = os.path.join(corpus, name)
        for verify in (True, False):
            for mmap in (False, True):
                try:
                    with ibp.open(p, verify=verify, mmap=mmap) as s:
                        n = len(s)
                        ids = np.array([0, n - 1, n // 2, 0], dtype=np.int64) if n else []
                        s.gather(ids)
                        s.gather(ids, nthreads=1)
                        s.read()
                        s.verify()
                    counts["ok"] += 1
                except ibp.Error:
                    counts["error"] += 1
        if name.startswith("frame-"):
            data = open(p, "rb").read()
            mod = ibp.exp if "-exp" in name else ibp.fp8
            try:
                mod.decompress(data)
                counts["ok"] += 1
            except ibp.Error:
                counts["error"] += 1
    print("corpus:", counts)
""")


def _variants(blob, rng, nflip):
    """Truncations, bit flips, byte stomps and zeroed ranges of a valid file."""
    n = len(blob)
    cuts = sorted({0, 1, 7, 8, 63, 64, 65, n // 4, n // 2, n - 64, n - 8, n - 1} - {n})
    for c in cuts:
        if 0 <= c < n:
            yield "cut%d" % c, blob[:c]
    hot = list(range(0, min(n, 512)))  # header, section table, metadata
    pos = rng.choice(hot, size=min(nflip, len(hot)), replace=False).tolist()
    pos += rng.integers(0, n, size=nflip).tolist()
    for i in pos:
        b = bytearray(blob)
        b[i] ^= 1 << int(rng.integers(0, 8))
        yield "flip%d" % i, bytes(b)
    for i in rng.integers(0, n, size=nflip // 2).tolist():
        b = bytearray(blob)
        b[i:i + 8] = b"\xff" * len(b[i:i + 8])
        yield "stomp%d" % i, bytes(b)
    b = bytearray(blob)
    b[n // 3: n // 3 + 256] = bytes(len(b[n // 3: n // 3 + 256]))
    yield "zero", bytes(b)
    yield "append", blob + b"\0" * 100


def test_corrupt_corpus_never_crashes(tmp_path):
    rng = np.random.default_rng(7)
    a = make_rows(rng, 300, (40,), "float32")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    srcs = {}
    for name, opts in [("ibp", {}), ("ibp-inplace", dict(layout="inplace")),
                       ("ibp-clusters", dict(clusters=3)), ("exp", dict(codec="exp", block_rows=64)),
                       ("fp8", dict(codec="fp8", lossy=True, block_rows=64))]:
        p = tmp_path / (name + ".ibp")
        ibp.pack(a, p, **opts)
        srcs[name] = p.read_bytes()
    srcs["frame-exp"] = bytes(ibp.exp.compress(a))
    srcs["frame-fp8"] = bytes(ibp.fp8.compress(a))
    nfiles = 0
    for name, blob in srcs.items():
        for vname, data in _variants(blob, rng, 60):
            (corpus / ("%s-%s" % (name, vname))).write_bytes(data)
            nfiles += 1
    r = subprocess.run([sys.executable, "-c", CHILD, str(corpus)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, "child interpreter died (%d) on the corpus: %s" % (
        r.returncode, r.stderr[-2000:])
    assert "corpus:" in r.stdout
    print("%d damaged files; %s" % (nfiles, r.stdout.strip()))
    counts = eval(r.stdout.split("corpus:", 1)[1])
    assert counts["error"] > nfiles  # most damage is detected (every cut, most flips)


@pytest.mark.parametrize("mod", ["exp", "fp8"])
def test_damaged_frames_raise(mod):
    m = getattr(ibp, mod)
    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    buf = bytes(m.compress(x))
    other = b"\x03" if mod == "exp" else b"\x02"  # the other codec's id
    for bad in (b"", buf[:10], buf[:-1], b"XXXX" + buf[4:], buf[:6] + b"\x05" + buf[7:],
                buf[:7] + b"\x09" + buf[8:], buf[:5] + other + buf[6:]):
        if bad == buf:
            continue
        with pytest.raises(ibp.CorruptError):
            m.decompress(bad)
    with pytest.raises(ibp.CorruptError, match="frame version 3"):
        m.decompress(buf[:4] + b"\x03" + buf[5:])  # damage, or a newer writer
    # a shape that does not match the stream's element count, with the
    # checksum and without it (trusted: the structural checks still catch it)
    b = bytearray(buf)
    b[24] ^= 1
    with pytest.raises(ibp.ChecksumError):
        m.decompress(bytes(b))
    with pytest.raises(ibp.CorruptError):
        m.decompress(bytes(b), trusted=True)
