"""Gathers release the GIL: other Python threads run while libibp decodes,
and several threads' gathers overlap. Both are measured, not assumed."""

import threading
import time

import numpy as np
import pytest

import ibp
from conftest import make_rows


@pytest.fixture(scope="module")
def big():
    rng = np.random.default_rng(11)
    a = make_rows(rng, 8192, (256,), "float32")  # 8 MiB
    s = ibp.Store.from_array(a, chunk=4, threshold=0.9)
    ids = rng.integers(0, 8192, 16384)
    yield s, ids, a
    s.close()


def test_gil_released_during_gather(big):
    """A pure-Python counter thread keeps running while the main thread is
    inside one long gather (with the GIL held it could run only for a switch
    interval, 5 ms, of each call), and sees the output half written."""
    s, ids, a = big
    ids = np.tile(ids, 8)
    out = np.empty((ids.size,) + s.shape[1:], np.float32)
    # a gather of at least 50 ms, however fast the machine (8 tiles took
    # 17-30 ms on this project's VMs)
    for _ in range(4):
        t0 = time.perf_counter()
        s.gather(ids, out=out, nthreads=1)
        if time.perf_counter() - t0 >= 0.05:
            break
        ids = np.tile(ids, 2)
        out = np.empty((ids.size,) + s.shape[1:], np.float32)
    count = [0]
    partial = [0]
    stop = threading.Event()
    probe = slice(None, None, 101)

    def ticker():
        n = 0
        while not stop.is_set():
            n += 1
            count[0] = n
            if n % 1000 == 0:
                nan = int(np.isnan(out[probe, 0]).sum())
                partial[0] += 0 < nan < out[probe, 0].size

    th = threading.Thread(target=ticker)
    th.start()
    try:
        time.sleep(0.05)
        # the ticker's rate while the main thread sleeps (GIL free)
        c0, t0 = count[0], time.perf_counter()
        time.sleep(0.2)
        base = (count[0] - c0) / (time.perf_counter() - t0)
        # ... and while the main thread is inside libibp
        rates = []
        for _ in range(3):
            out.fill(np.nan)
            c0, t0 = count[0], time.perf_counter()
            s.gather(ids, out=out, nthreads=1)
            dt = time.perf_counter() - t0
            rates.append((count[0] - c0) / dt)
    finally:
        stop.set()
        th.join()
    assert out.tobytes() == a[ids].tobytes()
    print("ticker rate: %.3g/s asleep, %.3g/s during gathers (%.0f%%), gather %.1f ms"
          % (base, max(rates), 100 * max(rates) / base, 1e3 * dt))
    assert dt > 0.02, "gather too short to measure"
    assert max(rates) > 0.25 * base
    assert partial[0] > 0, "the counter thread never saw a gather in progress"


def test_threads_gather_concurrently(big):
    """Three threads gather at once (nthreads=1 each, so each decodes on its
    own thread) into NaN-filled outputs, while a monitor thread samples how
    much of each output is written. Seeing two outputs partly written at the
    same moment means two gathers were inside libibp at once, and that the
    monitor ran Python meanwhile: impossible if calls held the GIL, whatever
    the number of CPUs or the machine's load."""
    s, ids, a = big
    ids = np.tile(ids, 4)
    nthr = 3
    outs = [np.full((ids.size,) + s.shape[1:], np.nan, np.float32) for _ in range(nthr)]
    probe = slice(None, None, 97)
    total = outs[0][probe, 0].size
    seen = {"both": 0, "samples": 0, "max_busy": 0}
    done = threading.Event()
    go = threading.Barrier(nthr + 1)
    times = [None] * nthr

    def work(k):
        go.wait()
        t = time.perf_counter()
        s.gather(ids, out=outs[k], nthreads=1)
        times[k] = (t, time.perf_counter())

    def monitor():
        go.wait()
        while not done.is_set():
            busy = 0
            for o in outs:
                filled = total - int(np.isnan(o[probe, 0]).sum())
                busy += 0 < filled < total
            seen["samples"] += 1
            seen["max_busy"] = max(seen["max_busy"], busy)
            seen["both"] += busy >= 2

    ths = [threading.Thread(target=work, args=(k,)) for k in range(nthr)]
    mon = threading.Thread(target=monitor)
    for t in ths + [mon]:
        t.start()
    for t in ths:
        t.join()
    done.set()
    mon.join()
    for o in outs:
        assert o.tobytes() == a[ids].tobytes()
    t0 = min(t[0] for t in times)
    print("%d threads x %d rows: calls %s ms; monitor: %d samples, %d with >= 2 gathers half-done, "
          "at most %d at once" % (nthr, ids.size,
                                  [(round(1e3 * (x - t0)), round(1e3 * (y - t0))) for x, y in times],
                                  seen["samples"], seen["both"], seen["max_busy"]))
    assert seen["both"] > 0, seen


def test_close_waits_for_running_gathers(big):
    """close() from another thread while gathers run never frees the store
    under them: each gather either completes correctly or raises 'closed'."""
    rng = np.random.default_rng(2)
    a = make_rows(rng, 4096, (64,), "float32")
    for _ in range(5):
        s = ibp.Store.from_array(a)
        results = []
        go = threading.Event()

        def work():
            go.wait()
            ids = rng.integers(0, 4096, 4096)
            for _ in range(20):
                try:
                    g = s.gather(ids, nthreads=1)
                    results.append(g.tobytes() == a[ids].tobytes())
                except ibp.InvalidArgumentError as e:
                    assert "closed" in str(e)
                    results.append(True)
                    return

        ths = [threading.Thread(target=work) for _ in range(3)]
        for t in ths:
            t.start()
        go.set()
        time.sleep(0.005)
        s.close()
        for t in ths:
            t.join()
        assert results and all(results)
