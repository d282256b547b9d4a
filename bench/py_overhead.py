#!/usr/bin/env python3
"""Python overhead of ibp.Store.gather against the C ibp_store_gather.

    python3 bench/py_overhead.py [--data FILE.npy] [--batches 1,256,...,65536]
                                 [--threads 1,0] [--rounds N] [--clock auto|thread|wall]
                                 [--lib PATH] [--impl NAME]

One process, one store, the same ids, the same output buffer and the same
thread count for both sides:

* C: a small timing loop, compiled here with the system C compiler into a
  shared object and called through ctypes; it calls ibp_store_gather (the
  very function pointer the package uses, on the package's own store
  handle) in blocks of calls, reading the clock around each block. No
  Python runs between the timed C calls.
* Python: ``store.gather(ids, out=out, nthreads=t)`` in a Python loop, timed
  the same way, for NumPy ids and out= (int64 ids), torch ids and out= (when
  torch is installed), and NumPy without out= (the result array is
  allocated in each call: "alloc").

Each sample times a block of calls lasting about --sample-ms (on each side) and
gives the mean µs per call; rounds alternate C and Python so that machine
load hits both alike; cells give the median and the minimum over the
samples. With nthreads 1 (the gather runs on the calling thread) the clock
is that thread's CPU time, which preemption by other processes does not
inflate (their cache pollution still does); with the worker pool
(nthreads 0) it is wall time, noisy under load. "fixed" is the per-call
cost the binding adds, Python - C, in microseconds; "overhead" is fixed / C.
The 1-row batch is the binding's fixed cost alone (the C gather of one row
is a fraction of a microsecond); the last table divides that fixed cost by
each batch's C time, the overhead estimate that load blurs least (the
binding's work does not grow with the batch on the out= paths).

Data: the committed sample datasets/sample/minilm_tok_emb_f32.npy (1024 rows
of 384 float32) by default, packed with the IBP codec (automatic options)
into a temporary file; ids are uniform random rows (seed 1). --tile N
repeats the rows up to N rows (a store larger than the caches).
"""

from __future__ import annotations

import argparse
import ctypes as C
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

TIMER_C = r"""
#include <stdint.h>
#include <time.h>
typedef int (*gather_fn)(const void *s, const int64_t *ids, uint64_t n, void *out, int nthreads);
/* samples x (block calls of g(s, ids, n, out, nthreads)); ns[i] = the time of
 * sample i on clock `clk` (CLOCK_MONOTONIC or CLOCK_THREAD_CPUTIME_ID). */
int time_gather(gather_fn g, const void *s, const int64_t *ids, uint64_t n, void *out,
		int nthreads, int samples, int block, int clk, int64_t *ns)
{
	for (int i = 0; i < samples; i++) {
		struct timespec a, b;
		clock_gettime((clockid_t)clk, &a);
		for (int k = 0; k < block; k++) {
			int st = g(s, ids, n, out, nthreads);
			if (st)
				return st;
		}
		clock_gettime((clockid_t)clk, &b);
		ns[i] = (int64_t)(b.tv_sec - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec);
	}
	return 0;
}
"""

CLOCKS = {"thread": (time.CLOCK_THREAD_CPUTIME_ID, time.thread_time_ns),
          "wall": (time.CLOCK_MONOTONIC, time.perf_counter_ns)}


def build_timer(tmp: str):
    """Compiles TIMER_C into a shared object and returns its time_gather."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("py_overhead: no C compiler (cc/gcc) for the C-side timing loop")
    src, so = os.path.join(tmp, "timer.c"), os.path.join(tmp, "timer.so")
    Path(src).write_text(TIMER_C)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", so], check=True)
    f = C.CDLL(so).time_gather
    f.restype = C.c_int
    f.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_uint64, C.c_void_p, C.c_int, C.c_int,
                  C.c_int, C.c_int, C.c_void_p]
    return f


def c_times(timer, gather_ptr, store, ids, out, nthreads, samples, block, clock):
    """µs per call of each sample (block calls each), C loop; out: an array or
    a tensor (its memory: a torch tensor's pages are not NumPy's)."""
    ns = np.empty(samples, np.int64)
    optr = out.data_ptr() if hasattr(out, "data_ptr") else out.ctypes.data
    h = store._acquire()
    try:
        st = timer(gather_ptr, h, ids.ctypes.data, ids.size, optr, nthreads, samples,
                   block, CLOCKS[clock][0], ns.ctypes.data)
    finally:
        store._release()
    if st:
        raise RuntimeError("ibp_store_gather failed in the C loop: status %d" % st)
    return (ns / 1e3 / block).tolist()


def py_times(store, ids, out, nthreads, samples, block, clock):
    """µs per call of each sample (block calls each), Python loop."""
    g = store.gather
    clk = CLOCKS[clock][1]
    ts = []
    rng = range(block)
    for _ in range(samples):
        if out is None:
            t = clk()
            for _ in rng:
                g(ids, nthreads=nthreads)
        else:
            t = clk()
            for _ in rng:
                g(ids, out=out, nthreads=nthreads)
        ts.append((clk() - t) / 1e3 / block)
    return ts


def fmt(us: float) -> str:
    """µs with 3 significant digits at most (2 decimals below 10)."""
    return "%.2f" % us if abs(us) < 10 else "%.1f" % us if abs(us) < 100 else "%.0f" % us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(REPO / "datasets" / "sample" / "minilm_tok_emb_f32.npy"))
    ap.add_argument("--dtype", help="bf16 to read a uint16 file as bfloat16 (default: from the "
                    "file name)")
    ap.add_argument("--tile", type=int, default=0, help="repeat rows up to this many rows")
    ap.add_argument("--batches", default="1,256,1024,4096,16384,65536")
    ap.add_argument("--threads", default="1,0", help="nthreads values (0 = libibp's pool)")
    ap.add_argument("--sample-ms", type=float, default=1.0,
                    help="length of one sample: each side's calls are timed in blocks of about "
                    "this long (short blocks are rarely preempted on a loaded machine)")
    ap.add_argument("--rounds", type=int, default=31,
                    help="rounds; each times one sample of C and of every Python side")
    ap.add_argument("--clock", choices=("auto", "thread", "wall"), default="auto",
                    help="thread: the calling thread's CPU time (robust to load; only with "
                    "nthreads 1, where the gather runs on that thread); wall: elapsed time; "
                    "auto (default): thread for nthreads 1, wall otherwise")
    ap.add_argument("--modes", default="numpy,torch,alloc",
                    help="Python sides: numpy (out=), torch (out=), alloc (numpy, no out=)")
    ap.add_argument("--lib", help="libibp.so or a build directory (default: the package's own)")
    ap.add_argument("--impl", help="CPU implementation of the store's codec (ibp.impls())")
    a = ap.parse_args(argv)

    import ibp_package
    ibp = ibp_package.load(a.lib)
    from ibp import _lib
    torch = None
    if "torch" in a.modes:
        try:
            import torch
        except ImportError:
            pass

    x = np.load(a.data)
    dt = a.dtype or ("bf16" if "bf16" in os.path.basename(a.data) else None)
    if a.tile and a.tile > len(x):
        x = np.resize(x, (a.tile,) + x.shape[1:])
    batches = [int(b) for b in a.batches.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    modes = [m for m in a.modes.split(",") if m != "torch" or torch is not None]

    print("# py_overhead: %s, %s, Python %s, numpy %s%s, libibp %s (%s), %d CPUs" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.machine(),
        platform.python_version(), np.__version__,
        ", torch %s" % torch.__version__ if torch is not None else "",
        ibp.library_version(), ibp.library_path(), os.cpu_count()))
    print("# command: python3 %s" % " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:])))
    print("# load average at start: %s" % " ".join("%.2f" % v for v in os.getloadavg()))

    with tempfile.TemporaryDirectory(prefix="ibp-ovh-") as tmp:
        timer = build_timer(tmp)
        gather_ptr = C.cast(_lib.lib.ibp_store_gather, C.c_void_p).value
        path = os.path.join(tmp, "d.ibp")
        ibp.pack(x, path, **({"dtype": dt} if dt else {}))
        store = ibp.open(path)
        if a.impl:
            store.set_impl(a.impl)
        print("# data: %s, %d rows x %d B (%s), codec ibp (%s), ratio %.2f"
              % (os.path.relpath(a.data, REPO) if a.data.startswith(str(REPO)) else a.data,
                 store.nrows, store.row_bytes, store.dtype, getattr(store, "impl", "?"), store.ratio))
        print("# %d rounds, each one sample of every side in turn (order alternating); a sample "
              "times a block of calls (about %.1f ms) and gives µs per call; cells: "
              "median / minimum over the samples" % (a.rounds, a.sample_ms))
        print()
        print("(C µs: into the NumPy out=; the torch columns compare with C into the torch "
              "tensor's memory)")
        print()
        print("| rows | threads | clock | C µs | " + " | ".join(
            "%s µs | %s fixed µs | %s overhead" % (m, m, m) for m in modes) + " |")
        print("|---:|---:|---|---:|" + "---:|---:|---:|" * len(modes))
        rng = np.random.default_rng(1)
        results = []
        for n in batches:
            ids = rng.integers(0, store.nrows, n).astype(np.int64)
            out = np.empty((n,) + store.shape[1:], dtype=store.gather(ids[:1]).dtype)
            sides = {"numpy": (ids, out), "alloc": (ids, None)}
            if torch is not None:
                tout = torch.empty(out.shape, dtype=torch.bfloat16 if store.dtype == "bfloat16"
                                   else getattr(torch, store.dtype))
                sides["torch"] = (torch.from_numpy(ids), tout)
            for nt in threads:
                clock = a.clock if a.clock != "auto" else ("thread" if nt == 1 else "wall")
                # blocks of about --sample-ms on each side (same length: same odds of preemption)
                probe = min(c_times(timer, gather_ptr, store, ids, out, nt, 3, 3, "wall"))
                block = max(1, int(a.sample_ms * 1e3 / max(probe, 0.05)))
                pblock = {}
                for m in modes:  # warm every path up, then size its block
                    py_times(store, sides[m][0], sides[m][1], nt, 1, min(block, 50), clock)
                    pp = min(py_times(store, sides[m][0], sides[m][1], nt, 3, min(block, 20), "wall"))
                    pblock[m] = max(1, int(a.sample_ms * 1e3 / max(pp, 0.05)))
                # the C baseline writes where the Python side does: NumPy's out= (also
                # for alloc), or the torch tensor's memory (torch's allocator does not
                # ask for huge pages as NumPy's does for large arrays: more TLB misses)
                bufs = {"numpy": out}
                if "torch" in modes:
                    bufs["torch"] = sides["torch"][1]
                cs, ps = {b: [] for b in bufs}, {m: [] for m in modes}
                for r in range(a.rounds):  # C first in even rounds, last in odd ones
                    if r % 2 == 0:
                        for b, o in bufs.items():
                            cs[b] += c_times(timer, gather_ptr, store, ids, o, nt, 1, block, clock)
                    for m in (modes if r % 2 == 0 else modes[::-1]):
                        ps[m] += py_times(store, sides[m][0], sides[m][1], nt, 1, pblock[m], clock)
                    if r % 2 == 1:
                        for b, o in bufs.items():
                            cs[b] += c_times(timer, gather_ptr, store, ids, o, nt, 1, block, clock)
                c, cmin = statistics.median(cs["numpy"]), min(cs["numpy"])
                cells = []
                for m in modes:
                    cb = cs["torch" if m == "torch" else "numpy"]
                    c, cmin = statistics.median(cb), min(cb)
                    p, pmin = statistics.median(ps[m]), min(ps[m])
                    cells.append("%s / %s | %s / %s | %.1f%% / %.1f%%" % (
                        fmt(p), fmt(pmin), fmt(p - c), fmt(pmin - cmin), 100 * (p - c) / c,
                        100 * (pmin - cmin) / cmin))
                    results.append((n, nt, m, c, p, cmin, pmin))
                c, cmin = statistics.median(cs["numpy"]), min(cs["numpy"])
                print("| %d | %s | %s | %s / %s | %s |" % (n, nt or "all", clock, fmt(c), fmt(cmin),
                                                        " | ".join(cells)))
                sys.stdout.flush()
        store.close()
    print()
    for nt in threads:
        one = {m: (p - c, pmin - cmin) for n, t, m, c, p, cmin, pmin in results
               if n == min(batches) and t == nt}
        print("# fixed cost per call (%d-row gathers, nthreads %s; median / minimum): %s" % (
            min(batches), nt or "all", ", ".join("%s %.2f / %.2f µs" % (m, v[0], v[1])
                                                 for m, v in one.items())))
    print()
    print("Overhead at each batch size from the fixed cost (median of the %d-row gathers) "
          "divided by the C time (median), which load disturbs less than a difference of two "
          "large times:" % min(batches))
    print()
    print("| rows | threads | C µs | " + " | ".join("%s fixed / C" % m for m in modes) + " |")
    print("|---:|---:|---:|" + "---:|" * len(modes))
    fixed = {(t, m): p - c for n, t, m, c, p, cmin, pmin in results if n == min(batches)}
    for n in batches:
        for nt in threads:
            row = {m: c for bn, t, m, c, p, cmin, pmin in results if bn == n and t == nt}
            print("| %d | %s | %s | %s |" % (n, nt or "all", fmt(next(iter(row.values()))), " | ".join(
                "%.2f%%" % (100 * fixed[(nt, m)] / row[m]) for m in modes)))
    print("# load average at end: %s" % " ".join("%.2f" % v for v in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
