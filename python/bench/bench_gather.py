#!/usr/bin/env python3
"""Store.gather from Python against ibp_store_gather from C, same rows.

For each data file and thread count: 4096 random row ids (seed 1) are
gathered into a preallocated `out`, REPS times, from Python (ibp.Store.gather
with out=) and from C (bench_gather.c, compiled here against the installed
package's headers and libibp.so, so both run the same library). The two
sides alternate in rounds so that machine load hits both alike. Reports the
median and the minimum time per call (on a shared machine the minimum is the
steadier estimate of the call's own cost), the Python overhead in percent of
each, and the fixed cost of one call: a gather of 1 row, Python minus C
(medians). The Python overhead is that fixed cost per call, whatever the
rows; "fixed / C" divides it by the C time of the 4096-row gather (min),
the overhead figure that machine load does not blur.

Usage: python bench_gather.py [--reps N] [--rounds N] [--threads 1,0] [FILE.npy ...]
(default files: datasets/sample/*.npy; bf16 files are packed with dtype="bf16").
"""

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ibp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def build_c(tmp):
    pkg = os.path.dirname(ibp.__file__)
    libdir = os.path.dirname(ibp.library_path())
    exe = os.path.join(tmp, "bench_gather")
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-I",
                    os.path.join(pkg, "include"), os.path.join(HERE, "bench_gather.c"), "-o", exe,
                    "-L", libdir, "-Wl,-rpath," + libdir, "-libp"], check=True)
    return exe


def c_times(exe, path, ids_path, nthreads, reps):
    r = subprocess.run([exe, path, ids_path, str(nthreads), str(reps), "20"], check=True,
                       capture_output=True, text=True)
    return [int(x) / 1e3 for x in r.stdout.split()]


def py_times(store, ids, out, nthreads, reps):
    for _ in range(20):
        store.gather(ids, out=out, nthreads=nthreads)
    ts = []
    pc = time.perf_counter_ns
    for _ in range(reps):
        t = pc()
        store.gather(ids, out=out, nthreads=nthreads)
        ts.append((pc() - t) / 1e3)
    return ts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,0")
    ap.add_argument("--rows", type=int, default=4096)
    a = ap.parse_args()
    files = a.files or sorted(glob.glob(os.path.join(REPO, "datasets", "sample", "*.npy")))
    print("# %s, %s, Python %s, numpy %s, libibp %s (%s), %d CPUs, load %s" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.machine(),
        platform.python_version(), np.__version__, ibp.library_version(), ibp.host_allocator().split()[0],
        os.cpu_count(), " ".join("%.1f" % x for x in os.getloadavg())))
    print("| data | codec | threads | rows | C µs median / min | Python µs median / min "
          "| overhead median / min | 1-row C µs | 1-row Python µs | fixed cost µs | fixed / C |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_c(tmp)
        for f in files:
            x = np.load(f)
            kw = {"dtype": "bf16"} if "bf16" in os.path.basename(f) else {}
            for codec in ("ibp", "exp"):
                if codec == "exp" and x.dtype not in (np.float32, np.float16) and not kw:
                    continue
                ckw = dict(kw)
                if codec == "exp":
                    ckw["block_rows"] = 16
                path = os.path.join(tmp, "d.ibp")
                ibp.pack(x, path, codec=codec, **ckw)
                store = ibp.open(path)
                rng = np.random.default_rng(1)
                ids = rng.integers(0, store.nrows, a.rows).astype(np.int64)
                one = ids[:1].copy()
                ids_path, one_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "one.bin")
                ids.tofile(ids_path)
                one.tofile(one_path)
                out = np.empty((a.rows,) + store.shape[1:], dtype=store.read()[:1].dtype)
                out1 = out[:1]
                for nt in [int(t) for t in a.threads.split(",")]:
                    cs, ps, c1, p1 = [], [], [], []
                    for _ in range(a.rounds):
                        cs += c_times(exe, path, ids_path, nt, a.reps)
                        ps += py_times(store, ids, out, nt, a.reps)
                        c1 += c_times(exe, path, one_path, nt, a.reps)
                        p1 += py_times(store, one, out1, nt, a.reps)
                    c, p = statistics.median(cs), statistics.median(ps)
                    cm1, pm1 = statistics.median(c1), statistics.median(p1)
                    cmin, pmin = min(cs), min(ps)
                    print("| %s | %s | %s | %d | %.0f / %.0f | %.0f / %.0f | %+.1f%% / %+.1f%% "
                          "| %.2f | %.2f | %.2f | %.2f%% |" % (
                              os.path.basename(f), codec, nt or "all", a.rows, c, cmin, p, pmin,
                              100 * (p - c) / c, 100 * (pmin - cmin) / cmin, cm1, pm1, pm1 - cm1,
                              100 * (pm1 - cm1) / cmin))
                    sys.stdout.flush()
                store.close()


if __name__ == "__main__":
    main()
