#!/usr/bin/env python3
"""libibp's CPU gather and embedding bags beside the plain PyTorch calls.

    python3 bench/torch_compare.py [--processes N] [--omp-passive] [--quick]
                                   [--calls-4k N] [--calls-64k N] [--calls-bag N]
                                   [--tables f32,bf16,bow,bag_f32,bag_f16]
                                   [--bag-codec exp-rows|ibp]

What a user would write without libibp, timed beside what they would write
with it, on tables larger than the caches (>= 2 GB each), both fully in memory:

* gather: ``torch.index_select(T, 0, ids)`` on the uncompressed tensor T
  against ``store.gather(ids)`` on the compressed store (ibp.pack of the same
  array, IBP codec, automatic options; ibp.open reads the file into memory),
  and both again writing into a preallocated output
  (``torch.index_select(T, 0, ids, out=o)`` against
  ``store.gather(ids, out=o2)``), at 65,536 and 4,096 ids, with
  ``torch.set_num_threads(2)`` and ``nthreads=2`` for libibp. Tables:

  - f32:  1,400,000 x 384 float32 (2.15 GB), rows tiled from the committed
          sample datasets/sample/minilm_tok_emb_f32.npy (MiniLM token
          embeddings; real values, nothing added);
  - bf16: 2,800,000 x 384 bfloat16 (2.15 GB), tiled from the KV-cache sample
          datasets/sample/minilm_kv_bf16.npy (bfloat16 bit patterns stored as
          uint16; T is the same memory viewed as torch.bfloat16, the store is
          ibp.pack(..., dtype="bf16"));
  - bow:  375,000 x 1,433 float32 (2.15 GB), tiled from the sparse
          bag-of-words sample datasets/sample/debian_bow_f32.npy (skipped with
          a message when that file is absent).

* embedding bags: 4,096 bags of 20 ids (offsets = arange(0, 81920, 20)),
  modes sum, mean and max, with 1 and with 2 threads
  (``torch.set_num_threads(t)``; ``nthreads=t`` for libibp), under
  torch.no_grad(): ``nn.EmbeddingBag.from_pretrained(T, mode=m)`` against
  ``ibp.torch.EmbeddingBag(store, mode=m, nthreads=t)`` and against "ibp
  gather + torch reduce" (``store.gather(ids, nthreads=t).view(B, L, D)``
  then ``.sum(1)`` / ``.mean(1)`` / ``.amax(1)``). Tables: 8,000,000 x 64
  float32 and 16,000,000 x 64 float16 (2.05 GB each), values
  ``rng.standard_normal(...) * 0.05`` (seeded), stored with --bag-codec
  (default exp-rows: the exponent codec's row form, each row decoded on its
  own; "ibp" the trained IBP codec). Once, outside the timing,
  the bag outputs are compared with nn.EmbeddingBag's (torch.equal; float32
  sum is the case libibp promises bitwise, the others are reported too).

How: the tables (.npy) and their stores (.ibp) are built once into
~/.cache/ibp/bench/ (--cache-dir) and reused. In each process every table is
loaded in turn with np.load (read fully into memory, one byte per page read
again) beside its store (ibp.open, payload checksums verified, so every byte
read), measured, and freed before the next. Every single call gets fresh
uniform random int64 ids (a CPU torch tensor made with NumPy outside the
timed region); calls alternate ours / torch's (bags: ibp.EmbeddingBag,
nn.EmbeddingBag, gather+reduce) in the same process, after a few untimed
warm-up rounds, with Python's garbage collector off; each call is timed
alone with time.perf_counter_ns and a returned tensor is freed after the
clock is read. Reported per case: the median, the minimum and the 90th
percentile in milliseconds of each side and ratio = torch median / ibp median
(>= 1: libibp at least as fast). Wall time: other jobs on the machine slow
both sides alike only on average, hence the alternation and the repeats.

Processes: --processes N (default 3) runs the whole comparison N times, each
in a fresh subprocess of this script (tables built first, once, in this
process), prints each process's table as it comes, then a summary: per case,
the ratio in each process and its median across processes.
--processes 0 measures in this process instead.

--omp-passive sets OMP_WAIT_POLICY=PASSIVE in the measuring processes'
environment (in this one too with --processes 0). PyTorch's CPU kernels run
on OpenMP (libgomp), whose idle threads spin for a while after each parallel
region; on a 2-core machine that spinning takes a core away from libibp's
worker thread in the ibp call that follows. PASSIVE makes them sleep at
once. Running with and without it shows the effect.

Options: --quick (a smoke test of about a minute once the tables exist: 100
calls at 4,096 ids, 10 at 65,536, 20 per bag case, 2 warm-up rounds);
--calls-4k (default 1000), --calls-64k (50), --calls-bag (100), --warmup (5)
set the counts; --tables picks tables; --seed seeds the ids (process i uses
seed + i); --cache-dir moves the cache. Timed numbers are never asserted.

Uses the installed `ibp` package, or the source tree's with
PYTHONPATH=python/src and IBP_LIBRARY=build/libibp.so.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "datasets", "sample")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "ibp", "bench")
RESULT_TAG = "@@TORCH_COMPARE_RESULT "
ENV_VARS = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "MKL_NUM_THREADS",
            "IBP_LIBRARY", "PYTHONPATH", "IBP_NO_HUGEPAGES")

GATHER_IDS = (65536, 4096)
BAGS, BAG_LEN = 4096, 20
MODES = ("sum", "mean", "max")

# name -> (kind, rows, dim, numpy storage dtype, source / seed, label)
TABLES = {
    "f32": ("gather", 1_400_000, 384, np.float32, "minilm_tok_emb_f32.npy", "float32"),
    "bf16": ("gather", 2_800_000, 384, np.uint16, "minilm_kv_bf16.npy", "bfloat16"),
    "bow": ("gather", 375_000, 1433, np.float32, "debian_bow_f32.npy", "float32"),
    "bag_f32": ("bag", 8_000_000, 64, np.float32, 1, "float32"),
    "bag_f16": ("bag", 16_000_000, 64, np.float16, 2, "float16"),
}


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- tables

BAG_CODEC = "exp-rows"  # --bag-codec


def table_codec(name):
    return BAG_CODEC if TABLES[name][0] == "bag" else "ibp"


def table_paths(cache, name):
    kind, n, d, dt, src, label = TABLES[name]
    base = os.path.join(cache, "%s_%dx%d_%s" % (name, n, d, label))
    codec = table_codec(name)
    return base + ".npy", base + ("" if codec == "ibp" else "." + codec) + ".ibp"


def source_path(name):
    src = TABLES[name][4]
    return os.path.join(SAMPLE, src) if isinstance(src, str) else None


def build_npy(name, path):
    """Writes the table's .npy in chunks (through a memmap: no second copy
    in memory), under a temporary name renamed at the end."""
    kind, n, d, dt, src, label = TABLES[name]
    tmp = path + ".part"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dt, shape=(n, d))
    step = 1 << 20
    if kind == "gather":
        sample = np.load(os.path.join(SAMPLE, src))
        if sample.ndim != 2 or sample.shape[1] != d or sample.dtype != dt:
            raise SystemExit("%s: expected (rows, %d) %s, found %s %s"
                             % (src, d, np.dtype(dt), sample.shape, sample.dtype))
        m = sample.shape[0]
        for i in range(0, n, step):
            k = min(step, n - i)
            out[i:i + k] = sample[np.arange(i, i + k) % m]  # rows tiled: row r is sample row r % m
    else:
        rng = np.random.default_rng(src)
        step = 1 << 19
        for i in range(0, n, step):
            k = min(step, n - i)
            out[i:i + k] = (rng.standard_normal((k, d), dtype=np.float32) * np.float32(0.05)).astype(dt)
    out.flush()
    del out
    os.replace(tmp, path)


def ensure_table(cache, name):
    """(npy path, ibp path) of a table, built when missing."""
    import ibp
    kind, n, d, dt, src, label = TABLES[name]
    npy, ibpf = table_paths(cache, name)
    os.makedirs(cache, exist_ok=True)
    if not os.path.exists(npy):
        gb = n * d * np.dtype(dt).itemsize / 1e9
        log("building %s: %d x %d %s (%.2f GB) -> %s ..." % (name, n, d, label, gb, npy))
        t = time.perf_counter()
        build_npy(name, npy)
        log("  built %s in %.1f s" % (os.path.basename(npy), time.perf_counter() - t))
    if os.path.exists(ibpf):
        try:
            ibp.open(ibpf, verify=False).close()  # a file this libibp reads (the format may move)
        except Exception as e:  # noqa: BLE001
            log("  %s unreadable (%s): packing it again" % (ibpf, e))
            os.remove(ibpf)
    if not os.path.exists(ibpf):
        codec = table_codec(name)
        log("packing %s with ibp.pack (codec %s) -> %s ..." % (name, codec, ibpf))
        t = time.perf_counter()
        arr = np.load(npy)
        tmp = ibpf + ".part"
        ibp.pack(arr, tmp, codec=codec, **({"dtype": "bf16"} if label == "bfloat16" else {}))
        del arr
        os.replace(tmp, ibpf)
        log("  packed in %.1f s: %.2f GB" % (time.perf_counter() - t, os.path.getsize(ibpf) / 1e9))
    return npy, ibpf


# ---------------------------------------------------------------- statistics

def pctl(xs, q):
    s = sorted(xs)
    i = max(0, min(len(s) - 1, int(np.ceil(q * len(s))) - 1))
    return s[i]


def stats(xs):
    return {"n": len(xs), "med": statistics.median(xs), "min": min(xs), "p90": pctl(xs, 0.9)}


def case(name, t_times, i_times, note=""):
    t, i = stats(t_times), stats(i_times)
    return {"case": name, "torch": t, "ibp": i, "ratio": t["med"] / i["med"], "note": note}


HEAD = "%-44s %6s | %8s %8s %8s | %8s %8s %8s | %7s"


def print_head():
    log(HEAD % ("case", "calls", "torch ms", "min", "p90", "ibp ms", "min", "p90", "ratio"))
    log("-" * 121)


def print_cases(rows):
    for r in rows:
        t, i = r["torch"], r["ibp"]
        log("%-44s %6d | %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %7.3f%s"
            % (r["case"], min(t["n"], i["n"]), t["med"], t["min"], t["p90"], i["med"], i["min"], i["p90"],
               r["ratio"], ("  " + r["note"]) if r["note"] else ""))


# ---------------------------------------------------------------- timing

def alternate(fns, make_ids, calls, warmup):
    """Times fns round-robin, each call alone and on fresh ids; returns one
    list of milliseconds per fn (warm-up rounds dropped)."""
    pc = time.perf_counter_ns
    times = [[] for _ in fns]
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for it in range(warmup + calls):
            for j, fn in enumerate(fns):
                ids = make_ids()
                t0 = pc()
                r = fn(ids)
                t1 = pc()
                del r  # freed after the clock is read
                if it >= warmup:
                    times[j].append((t1 - t0) / 1e6)
    finally:
        if gc_was:
            gc.enable()
    return times


def touch(arr):
    """Reads one byte of every page (they are resident after np.load; this
    makes sure)."""
    u8 = arr.reshape(-1).view(np.uint8)
    return int(np.add.reduce(u8[::4096], dtype=np.uint64))


def load(cache, name):
    import ibp
    npy, ibpf = table_paths(cache, name)
    t = time.perf_counter()
    arr = np.load(npy)  # read into memory (not mapped)
    touch(arr)
    store = ibp.open(ibpf)  # read into memory, payload checksums verified
    log("%s: %s %s (%.2f GB) | store %.2f GB, codec %s, ratio %.3f, chunk %s | loaded in %.1f s"
        % (name, "x".join(map(str, arr.shape)), TABLES[name][5], arr.nbytes / 1e9, store.file_bytes / 1e9,
           store.codec, store.ratio, getattr(store, "chunk", None), time.perf_counter() - t))
    return arr, store


def bench_gather(name, arr, store, args, rng, rows):
    import torch
    label = TABLES[name][5]
    T = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16) if label == "bfloat16" else torch.from_numpy(arr)
    n, d = T.shape
    nt = args.gather_threads
    torch.set_num_threads(nt)
    ids = torch.from_numpy(rng.integers(0, n, 4096, dtype=np.int64))
    same = torch.equal(store.gather(ids, nthreads=nt), torch.index_select(T, 0, ids))
    log("  check: store.gather == torch.index_select on 4096 ids: %s" % same)
    short = {"float32": "f32", "bfloat16": "bf16"}[label] if name != "bow" else "bow f32"
    print_head()
    for k in GATHER_IDS:
        calls = args.calls_64k if k >= 65536 else args.calls_4k

        def make_ids(k=k):
            return torch.from_numpy(rng.integers(0, n, k, dtype=np.int64))

        def g_ibp(ids):
            return store.gather(ids, nthreads=nt)

        def g_torch(ids):
            return torch.index_select(T, 0, ids)

        ti, tt = alternate([g_ibp, g_torch], make_ids, calls, args.warmup)
        rows.append(case("gather %s %dx%d k=%d" % (short, n, d, k), tt, ti))
        o_t = torch.empty(k, d, dtype=T.dtype)
        o_i = torch.empty(k, d, dtype=T.dtype)

        def o_ibp(ids):
            return store.gather(ids, out=o_i, nthreads=nt)

        def o_torch(ids):
            return torch.index_select(T, 0, ids, out=o_t)

        ti, tt = alternate([o_ibp, o_torch], make_ids, calls, args.warmup)
        rows.append(case("gather %s %dx%d k=%d out=" % (short, n, d, k), tt, ti))
        del o_t, o_i
        print_cases(rows[-2:])


def bench_bags(name, arr, store, args, rng, rows, checks):
    import torch
    import ibp.torch as it
    T = torch.from_numpy(arr)
    n, d = T.shape
    short = TABLES[name][5].replace("float", "f")
    nids = BAGS * BAG_LEN
    offsets = torch.arange(0, nids, BAG_LEN, dtype=torch.int64)

    def make_ids():
        return torch.from_numpy(rng.integers(0, n, nids, dtype=np.int64))

    reducers = {"sum": lambda x: x.sum(1), "mean": lambda x: x.mean(1), "max": lambda x: x.amax(1)}
    with torch.no_grad():
        torch.set_num_threads(args.bag_threads[0])
        for mode in MODES:  # once, outside the timing
            ids = make_ids()
            ref = torch.nn.EmbeddingBag.from_pretrained(T, mode=mode)(ids, offsets)
            eq = torch.equal(it.EmbeddingBag(store, mode=mode, nthreads=args.bag_threads[0])(ids, offsets), ref)
            g = store.gather(ids, nthreads=args.bag_threads[0]).view(BAGS, BAG_LEN, d)
            eq2 = torch.equal(reducers[mode](g), ref)
            checks.append({"table": short, "mode": mode, "ibp_bag_equal": eq, "gather_reduce_equal": eq2})
            log("  check %s %s: ibp.torch.EmbeddingBag == nn.EmbeddingBag bitwise: %s; "
                "gather+reduce == nn.EmbeddingBag: %s" % (short, mode, eq, eq2))
            del ref, g
    print_head()
    with torch.no_grad():
        for t in args.bag_threads:
            torch.set_num_threads(t)
            for mode in MODES:
                nb = torch.nn.EmbeddingBag.from_pretrained(T, mode=mode)
                assert nb.weight.data_ptr() == T.data_ptr()  # no copy of the table
                ib = it.EmbeddingBag(store, mode=mode, nthreads=t)
                red = reducers[mode]

                def f_ibp(ids, ib=ib):
                    return ib(ids, offsets)

                def f_torch(ids, nb=nb):
                    return nb(ids, offsets)

                def f_gr(ids, red=red, t=t):
                    return red(store.gather(ids, nthreads=t).view(BAGS, BAG_LEN, d))

                ti, tt, tg = alternate([f_ibp, f_torch, f_gr], make_ids, args.calls_bag, args.warmup)
                base = "bag %s %s t=%d" % (short, mode, t)
                rows.append(case(base + " EmbeddingBag", tt, ti))
                rows.append(case(base + " gather+reduce", tt, tg))
                print_cases(rows[-2:])


def cpu_sample():
    """(wall s, busy CPU s of the whole machine without steal, steal s, this
    process's CPU s): to tell how much of the machine others used."""
    tck = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq
    steal = v[7] if len(v) > 7 else 0
    t = os.times()
    return time.perf_counter(), busy / tck, steal / tck, t.user + t.system


def others_share(a, b):
    """Percent of the machine's CPU time that other processes used, and
    that the hypervisor stole, between two cpu_sample()s."""
    wall = (b[0] - a[0]) * (os.cpu_count() or 1)
    return 100.0 * max(0.0, (b[1] - a[1]) - (b[3] - a[3])) / wall, 100.0 * (b[2] - a[2]) / wall


def measure(args):
    """One full comparison in this process; returns its result dict."""
    import torch
    import ibp
    rows, checks, skipped = [], [], []
    rng = np.random.default_rng(args.seed + args.child_index)
    log("process %d: pid %d, torch threads %d, OMP_WAIT_POLICY=%s, OMP_NUM_THREADS=%s, ids seed %d"
        % (args.child_index, os.getpid(), torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY", "(unset)"),
           os.environ.get("OMP_NUM_THREADS", "(unset)"), args.seed + args.child_index))
    log("libibp here: %s (modified %s UTC)" % (os.path.realpath(ibp._lib.path), time.strftime(
        "%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(ibp._lib.path)))))
    log("counts: %d calls/side at 4,096 ids, %d at 65,536, %d per bag case; %d warm-up rounds; "
        "gather threads %d, bag threads %s" % (args.calls_4k, args.calls_64k, args.calls_bag, args.warmup,
                                               args.gather_threads, ",".join(map(str, args.bag_threads))))
    log("ratio = torch median / ibp median (>= 1: ibp at least as fast); times in ms per call")
    t_all = time.perf_counter()
    c0 = cpu_sample()
    for name in args.tables:
        src = source_path(name)
        if src is not None and not os.path.exists(src):
            log("%s: skipped (%s not present)" % (name, src))
            skipped.append(name)
            continue
        t = time.perf_counter()
        arr, store = load(args.cache_dir, name)
        try:
            if TABLES[name][0] == "gather":
                bench_gather(name, arr, store, args, rng, rows)
            else:
                bench_bags(name, arr, store, args, rng, rows, checks)
        finally:
            store.close()
            del arr
            gc.collect()
        log("  (%s: %.1f s)" % (name, time.perf_counter() - t))
    others, steal = others_share(c0, cpu_sample())
    log("process %d done in %.1f s; meanwhile other processes used %.1f%% of the machine's CPU time, "
        "steal %.1f%%; load average now %s" % (args.child_index, time.perf_counter() - t_all, others, steal,
                                               " ".join(read_first("/proc/loadavg").split()[:3])))
    return {"others_cpu_pct": others, "steal_pct": steal, "rows": rows, "checks": checks, "skipped": skipped,
            "pid": os.getpid(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "seconds": time.perf_counter() - t_all,
            "ibp_library": ibp._lib.path}


# ---------------------------------------------------------------- header, driver

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_first(path):
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return "n/a"


def header(args, omp_child):
    import torch
    import ibp
    from ibp import _lib
    mem = "n/a"
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal"):
            mem = "%.1f GiB" % (int(line.split()[1]) / 2**20)
    libp = _lib.path
    log("=" * 121)
    log("bench/torch_compare.py: libibp CPU gather / embedding bags vs plain PyTorch")
    log("command: %s" % shlex.join([sys.executable] + sys.argv))
    log("date (UTC): %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
    log("host: %s | CPU: %s | %d logical CPUs | memory %s | THP: %s"
        % (socket.gethostname(), cpu_model(), os.cpu_count() or 0, mem,
           read_first("/sys/kernel/mm/transparent_hugepage/enabled")))
    log("python %s | numpy %s | torch %s (threads %d, %s) | ibp %s (%s)"
        % (platform.python_version(), np.__version__, torch.__version__, torch.get_num_threads(),
           torch.__config__.parallel_info().splitlines()[-1].strip(), ibp.__version__, ibp.__file__))
    log("libibp: %s -> %s (modified %s UTC)" % (libp, os.path.realpath(libp), time.strftime(
        "%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(libp)))))
    log("environment here: " + ", ".join("%s=%s" % (k, os.environ.get(k, "(unset)")) for k in ENV_VARS))
    if omp_child is not None:
        log("measuring processes' OMP_WAIT_POLICY: %s" % omp_child)
    log("=" * 121)


def child_argv(args):
    a = [sys.executable, os.path.abspath(__file__), "--child", "--processes", "0",
         "--calls-4k", str(args.calls_4k), "--calls-64k", str(args.calls_64k), "--calls-bag", str(args.calls_bag),
         "--warmup", str(args.warmup), "--tables", ",".join(args.tables), "--seed", str(args.seed),
         "--cache-dir", args.cache_dir, "--gather-threads", str(args.gather_threads),
         "--bag-threads", ",".join(map(str, args.bag_threads)), "--bag-codec", args.bag_codec]
    return a


def summary(results):
    log("")
    log("=" * 121)
    log("SUMMARY over %d process(es): ratio = torch median / ibp median in each process; median across them"
        % len(results))
    names = []
    for res in results:
        for r in res["rows"]:
            if r["case"] not in names:
                names.append(r["case"])
    per = ["p%d" % i for i in range(len(results))]
    log(("%-44s | " % "case") + " ".join("%7s" % p for p in per) + " | %7s | %9s %9s" % (
        "median", "torch ms", "ibp ms"))
    log("-" * (44 + 3 + 8 * len(per) + 30))
    for c in names:
        rs, tm, im = [], [], []
        for res in results:
            row = next((r for r in res["rows"] if r["case"] == c), None)
            rs.append(row["ratio"] if row else None)
            if row:
                tm.append(row["torch"]["med"])
                im.append(row["ibp"]["med"])
        got = [x for x in rs if x is not None]
        log(("%-44s | " % c) + " ".join("%7s" % ("%.3f" % x if x is not None else "-") for x in rs)
            + " | %7.3f | %9.3f %9.3f" % (statistics.median(got), statistics.median(tm), statistics.median(im)))
    log("(torch ms / ibp ms: the median across processes of each process's median)")
    log("other processes' share of the machine's CPU time while each process measured: "
        + ", ".join("p%d %.1f%%" % (i, r["others_cpu_pct"]) for i, r in enumerate(results)))
    checks = [ch for res in results for ch in res["checks"]]
    if checks:
        agg = {}
        for ch in checks:
            k = (ch["table"], ch["mode"])
            a = agg.setdefault(k, [True, True])
            a[0] &= ch["ibp_bag_equal"]
            a[1] &= ch["gather_reduce_equal"]
        log("bitwise checks (all processes): " + "; ".join(
            "%s %s: EmbeddingBag %s, gather+reduce %s" % (t, m, "equal" if a[0] else "DIFFERS",
                                                           "equal" if a[1] else "differs")
            for (t, m), a in agg.items()))
    log("=" * 121)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="See the module docstring for details.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=3,
                   help="fresh subprocesses, each running the whole comparison (default 3; 0: in this process)")
    p.add_argument("--omp-passive", action="store_true",
                   help="OMP_WAIT_POLICY=PASSIVE in the measuring processes (torch's OpenMP threads sleep "
                        "at once instead of spinning)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 100 / 10 / 20 calls, 2 warm-up rounds (about a minute once the tables exist)")
    p.add_argument("--calls-4k", type=int, default=None, help="calls per side at 4,096 ids (default 1000)")
    p.add_argument("--calls-64k", type=int, default=None, help="calls per side at 65,536 ids (default 50)")
    p.add_argument("--calls-bag", type=int, default=None, help="calls per side and bag case (default 100)")
    p.add_argument("--warmup", type=int, default=None, help="untimed warm-up rounds per case (default 5)")
    p.add_argument("--tables", default=",".join(TABLES),
                   help="comma-separated subset of %s (default: all)" % ",".join(TABLES))
    p.add_argument("--gather-threads", type=int, default=2,
                   help="torch.set_num_threads and ibp nthreads for the gathers (default 2)")
    p.add_argument("--bag-threads", default="1,2", help="thread counts for the bags (default 1,2)")
    p.add_argument("--bag-codec", default="exp-rows", choices=("exp-rows", "ibp"),
                   help="codec of the bag tables' stores (default %(default)s)")
    p.add_argument("--seed", type=int, default=12345, help="ids seed; process i uses seed + i")
    p.add_argument("--cache-dir", default=DEFAULT_CACHE, help="where tables and stores live (default %(default)s)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-index", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    q = args.quick
    for attr, full, quick in (("calls_4k", 1000, 100), ("calls_64k", 50, 10), ("calls_bag", 100, 20),
                              ("warmup", 5, 2)):
        if getattr(args, attr) is None:
            setattr(args, attr, quick if q else full)
    args.tables = [t for t in args.tables.split(",") if t]
    bad = [t for t in args.tables if t not in TABLES]
    if bad:
        p.error("unknown table(s) %s; known: %s" % (", ".join(bad), ", ".join(TABLES)))
    args.bag_threads = [int(x) for x in args.bag_threads.split(",") if x]
    global BAG_CODEC
    BAG_CODEC = args.bag_codec
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        res = measure(args)
        print(RESULT_TAG + json.dumps(res), flush=True)
        return 0
    if args.omp_passive and args.processes == 0:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch (and libgomp) loads
    t0 = time.perf_counter()
    omp_child = None
    if args.processes > 0:
        omp_child = "PASSIVE" if args.omp_passive else os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp default)")
    header(args, omp_child)
    for name in args.tables:
        src = source_path(name)
        if src is not None and not os.path.exists(src):
            log("%s: %s not present: this table is skipped" % (name, src))
            continue
        ensure_table(args.cache_dir, name)
    results = []
    if args.processes == 0:
        results.append(measure(args))
    else:
        env = dict(os.environ)
        if args.omp_passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        for i in range(args.processes):
            log("")
            log("-" * 40 + " process %d of %d " % (i + 1, args.processes) + "-" * 40)
            a = child_argv(args) + ["--child-index", str(i)]
            proc = subprocess.Popen(a, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    bufsize=1)
            res = None
            for line in proc.stdout:
                if line.startswith(RESULT_TAG):
                    res = json.loads(line[len(RESULT_TAG):])
                else:
                    sys.stdout.write(line)
                    sys.stdout.flush()
            rc = proc.wait()
            if rc != 0 or res is None:
                log("process %d FAILED (exit status %d); left out of the summary" % (i + 1, rc))
                continue
            results.append(res)
    if results:
        summary(results)
    log("total %.1f s" % (time.perf_counter() - t0))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
