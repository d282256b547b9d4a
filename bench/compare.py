#!/usr/bin/env python3
"""Compare libibp's codecs with general-purpose compressors on real rows.

    python3 bench/compare.py --lib build/libibp.so --data datasets/sample --out docs
    python3 bench/compare.py --full --lib build/libibp.so --out docs

For every data set (.npy rows; bf16 stored as uint16) it measures, in one
run and on one thread: compression ratio and encode/decode throughput
(GB/s of uncompressed bytes, median of --reps timed passes after warm-up)
of libibp's IBP codec (and the exponent / FP8 codecs when the library has
them) beside zstd -1/-3, lz4, blosc2 bitshuffle+lz4/zstd, the bitshuffle
package and ZipNN (bf16/f32). Each compressor runs at row granularity (each
row compressed alone: what random access and a gather need) and on 64 KiB
blocks. Every round trip is checked byte for byte.

It then redoes the IBP paper's studies on the same data (Table 2 savings,
Fig. 12 chunk x threshold, Table 5 sampling, Fig. 14 clusters) and writes
``<out>/BENCH_COMPARE.md`` and PNG plots in ``<out>/plots/``.

See bench/README.md for what each number includes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path

# Single-thread runs: pin every library thread pool before anything loads it
# (the bitshuffle package uses OpenMP and would otherwise use every core).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "NUMEXPR_NUM_THREADS", "BLOSC_NTHREADS"):
    os.environ[_var] = "1"

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)

import numpy as np  # noqa: E402

import bench_data  # noqa: E402
import compressors as cmp  # noqa: E402
import extra_codecs  # noqa: E402
import measure  # noqa: E402
import studies  # noqa: E402
from measure import Result  # noqa: E402

REPO = HERE.parent


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libibp.so, or a build directory holding it, for the ibp package "
                   "to load (default: the installed package's own; without an installed "
                   "package, python/src with build/libibp.so, else the newest build-*/libibp.so)")
    p.add_argument("--impls", default="bmi2,portable",
                   help="IBP CPU implementations to time, comma-separated (ibp.impls(): portable, "
                   "bmi2, avx2, avx512; 'all' = every one this machine runs; default bmi2,portable)")
    p.add_argument("--data", nargs="+", help="data set directories or .npy files "
                   "(default: datasets/sample; with --full: datasets/cache)")
    p.add_argument("--out", default=str(REPO / "docs"),
                   help="output directory: BENCH_COMPARE.md and plots/ (default: docs)")
    p.add_argument("--full", action="store_true",
                   help="the full data sets (datasets/cache) with larger size caps")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (median kept)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up passes")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="time the GB/s tables use: process CPU time (default; robust when "
                   "other jobs share the cores) or wall clock. Both are recorded.")
    p.add_argument("--max-mib", type=float, default=None,
                   help="rows per data set for the speed comparison, in MiB "
                   "(random row subset above; default 4, --full 16)")
    p.add_argument("--study-max-mib", type=float, default=None,
                   help="rows per data set for the paper studies, in MiB (default 2, --full 8)")
    p.add_argument("--block-kib", type=int, default=64, help="block size of the block mode")
    p.add_argument("--slow-budget-s", type=float, default=4.0,
                   help="time cap for one per-row measurement of a slow Python-wrapped "
                   "compressor (ZipNN): it then runs on the first rows only")
    p.add_argument("--no-ibp", action="store_true",
                   help="skip libibp (develop or compare without the C library)")
    p.add_argument("--no-studies", action="store_true", help="skip the paper studies")
    p.add_argument("--no-plots", action="store_true", help="write no PNG")
    p.add_argument("--no-cli", action="store_true", help="do not run `ibp bench`")
    p.add_argument("--ibp-cli", help="the ibp CLI for the C-level zstd/lz4 numbers "
                   "(default: bin/ibp beside the library, else build/bin/ibp)")
    p.add_argument("--skip", action="append", default=[],
                   help="skip compressors whose name contains this (repeatable)")
    p.add_argument("--include", action="append", default=None,
                   help="only data set files matching this glob (repeatable)")
    p.add_argument("--exclude", action="append", default=None,
                   help=f"data set files to leave out (default: {' '.join(bench_data.DEFAULT_EXCLUDE)})")
    p.add_argument("--json", help="also write every raw result to this JSON file")
    p.add_argument("--md-name", default=None, help="markdown file name in --out (default "
                   "BENCH_COMPARE.md; BENCH_COMPARE_FULL.md with --full)")
    p.add_argument("--plot-prefix", default=None,
                   help="prefix of the PNG names in <out>/plots (default none; 'full_' with --full)")
    args = p.parse_args(argv)
    if args.data is None:
        args.data = [str(REPO / "datasets" / ("cache" if args.full else "sample"))]
    if args.max_mib is None:
        args.max_mib = 16.0 if args.full else 4.0
    if args.study_max_mib is None:
        args.study_max_mib = 8.0 if args.full else 2.0
    if args.md_name is None:
        args.md_name = "BENCH_COMPARE_FULL.md" if args.full else "BENCH_COMPARE.md"
    if args.plot_prefix is None:
        args.plot_prefix = "full_" if args.full else ""
    if args.exclude is None:
        args.exclude = list(bench_data.DEFAULT_EXCLUDE)
    return args


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# libibp
# --------------------------------------------------------------------------

def load_lib(args):
    """(the ibp package or None, note); see ibp_package.py for which libibp."""
    if args.no_ibp:
        return None, "skipped (--no-ibp)"
    import ibp_package
    try:
        ibp = ibp_package.load(args.lib)
    except Exception as e:  # not found, or a library without the package's symbols
        return None, f"not available: {e}"
    return ibp, ibp_package.describe(ibp)


def impl_list(ibp, spec: str) -> list[str]:
    """The implementations --impls names that this machine runs, in its order."""
    have = ibp.impls()
    if spec == "all":
        return list(reversed(have))
    return [n for n in (w.strip() for w in spec.split(",")) if n in have]


def bench_ibp(ibp, ds, args) -> tuple[list[Result], dict]:
    """Train IBP with automatic options, then time each CPU implementation."""
    out, info = [], {}
    t0 = time.perf_counter()
    try:
        codec = ibp.train(ds.rows, nthreads=1)
    except Exception as e:
        out.append(_na(ds, "IBP", "libibp", "auto options", f"training failed: {e}"))
        return out, info
    train_s = time.perf_counter() - t0
    info = dict(train_s=train_s, chunk=codec.chunk, threshold=codec.threshold,
                k=codec.nclusters, metadata=measure.metadata_bytes(codec))
    settings = (f"auto: chunk {codec.chunk} B, T {codec.threshold:.2f}, k {codec.nclusters}; "
                f"train {train_s * 1e3:.0f} ms (1 thread)")
    for impl in impl_list(ibp, args.impls):
        codec.set_impl(impl)
        name = f"IBP ({codec.impl})"
        try:
            enc_s, dec_s, enc, ok = measure.run_ibp(codec, ds.rows, args.reps, args.warmup)
        except Exception as e:
            out.append(_na(ds, name, "libibp", settings, f"failed: {e}"))
            continue
        total, parts = measure.ibp_stored_bytes(codec, enc)
        modes = measure.mode_counts(enc)
        meta_what = "Mask/Bitval/Xval" if codec.has_xval else "Mask/Bitval"
        note = ("size = rows + 1 flags B/row" + (" + 1 cluster id B/row" if parts["cluster_ids"] else "")
                + f" + {parts['metadata']} B {meta_what}; modes " +
                ", ".join(f"{k} {v}" for k, v in modes.items() if v))
        r = Result(ds.name, ds.cls, ds.dtype, name, "libibp", settings, "row", "C (1 call)",
                   ds.nrows, ds.nbytes, total, enc_s, dec_s, ok, note,
                   extra=dict(parts=parts, modes=modes, train_s=train_s))
        out.append(r)
    # Same extras as ours and as `ibp bench`: + 1 flags byte per row + Mask/Bitval.
    info["paper_bytes"] = (codec.paper_layout_size(ds.rows) + ds.nrows
                           + measure.metadata_bytes(codec, with_xval=False))
    codec.close()
    return out, info


def _na(ds, method, package, settings, note) -> Result:
    return Result(ds.name, ds.cls, ds.dtype, method, package, settings, "row", "-", 0,
                  ds.nbytes, 0, None, None, None, note)


# --------------------------------------------------------------------------
# general-purpose compressors
# --------------------------------------------------------------------------

def bench_compressor(comp, ds, args, block_pieces) -> list[Result]:
    """Row (Python loop, and C batch when offered) and block runs of one compressor."""
    if not comp.available:
        return [_na(ds, comp.name, comp.package, comp.settings, f"not available: {comp.reason}")]
    res = []
    rows = ds.rows
    n = ds.nrows
    note = ""
    if comp.slow_per_call_us:
        passes = 2 * (max(1, args.warmup) + args.reps)
        cap = max(16, int(args.slow_budget_s * 1e6 / (comp.slow_per_call_us * passes)))
        if cap < n:
            n, note = cap, f"first {cap} of {ds.nrows} rows (slow per call)"
    pieces = measure.split_rows(rows[:n])
    raw = sum(len(p) for p in pieces)
    for kind, runner in (("Python loop", measure.run_pyloop),
                         ("C batch", measure.run_cbatch if comp.batch_rows else None)):
        if runner is None:
            continue
        try:
            e, d, cb, ok, _ = runner(comp, pieces, args.reps, args.warmup)
            res.append(Result(ds.name, ds.cls, ds.dtype, comp.name, comp.package, comp.settings,
                              "row", kind, n, raw, cb, e, d, ok, note))
        except Exception as ex:
            res.append(Result(ds.name, ds.cls, ds.dtype, comp.name, comp.package, comp.settings,
                              "row", kind, n, raw, 0, None, None, False, f"error: {ex}"))
    try:
        e, d, cb, ok, _ = measure.run_pyloop(comp, block_pieces, args.reps, args.warmup)
        res.append(Result(ds.name, ds.cls, ds.dtype, comp.name, comp.package, comp.settings,
                          f"{args.block_kib} KiB block", "Python loop", len(block_pieces),
                          ds.nbytes, cb, e, d, ok))
    except Exception as ex:
        res.append(Result(ds.name, ds.cls, ds.dtype, comp.name, comp.package, comp.settings,
                          f"{args.block_kib} KiB block", "Python loop", len(block_pieces),
                          ds.nbytes, 0, None, None, False, f"error: {ex}"))
    return res


# --------------------------------------------------------------------------
# the C-level numbers of `ibp bench`
# --------------------------------------------------------------------------

def find_cli(args, ibp) -> Path | None:
    """The ibp CLI: --ibp-cli, bin/ibp beside the library, the package's own
    (ibp.cli_path()), or build/bin/ibp."""
    cands = [Path(args.ibp_cli)] if args.ibp_cli else []
    if ibp is not None:
        cands.append(Path(ibp.library_path()).parent / "bin" / "ibp")
        if ibp.cli_path():
            cands.append(Path(ibp.cli_path()))
    cands.append(REPO / "build" / "bin" / "ibp")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


def run_cli_bench(cli: Path, ds, max_mib: float, timeout: float = 300.0) -> dict:
    """Run ``ibp bench FILE --json`` (then without --json); keep what it says."""
    base = [str(cli), "bench", str(ds.path), "--max-mb", str(max(1, int(round(max_mib))))]
    if ds.dtype == "bf16":
        base += ["--dtype", "bf16"]
    for extra in (["--json"], []):
        cmd = base + extra
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return dict(cmd=cmd, error=str(e))
        if p.returncode != 0:
            if extra:
                continue
            return dict(cmd=cmd, error=(p.stderr or p.stdout).strip()[-500:])
        if extra:
            try:
                return dict(cmd=cmd, json=json.loads(p.stdout))
            except ValueError:
                continue
        return dict(cmd=cmd, text=p.stdout)
    return dict(cmd=base, error="no usable output")


# --------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------

def loadavg() -> str:
    """The 1/5/15-minute load averages, as /proc/loadavg gives them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine_info() -> dict:
    """CPU model and flags of interest, nproc, memory, kernel, date."""
    info = dict(cpu="?", flags=[], nproc=os.cpu_count())
    try:
        txt = Path("/proc/cpuinfo").read_text()
        for line in txt.splitlines():
            if line.startswith("model name") and info["cpu"] == "?":
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not info["flags"]:
                fl = set(line.split(":", 1)[1].split())
                info["flags"] = [f for f in ("bmi2", "avx2", "avx512f", "avx512bw") if f in fl]
    except OSError:
        pass
    try:
        # nproc honours OMP_NUM_THREADS, which this script pins to 1: drop it.
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        info["nproc"] = int(subprocess.run(["nproc"], capture_output=True, text=True,
                                           env=env).stdout)
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    info["kernel"] = os.uname().release
    info["python"] = sys.version.split()[0]
    info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src",
                                "include"], capture_output=True, text=True).stdout.strip()
        info["git"] = rev + (" + uncommitted src/include changes" if dirty else "")
    except OSError:
        info["git"] = "?"
    return info


def package_versions(comps) -> list[tuple[str, str, str]]:
    """(package, version, status) for numpy, matplotlib and each compressor package."""
    from importlib.metadata import PackageNotFoundError, version
    rows, seen = [], set()
    for name in ("numpy", "matplotlib", "torch"):  # torch: imported by ZipNN
        try:
            rows.append((name, version(name), "ok"))
        except PackageNotFoundError:
            rows.append((name, "-", "not installed"))
    for c in comps:
        if c.package in seen:
            continue
        seen.add(c.package)
        if c.available:
            rows.append((c.package, c.version, "ok"))
        else:
            try:
                v = version(c.package)
            except PackageNotFoundError:
                v = "-"
            rows.append((c.package, v, "not available: " + c.reason))
    return rows


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.time()
    load_start = loadavg()
    measure.CLOCK = args.clock
    lib, lib_note = load_lib(args)
    log(f"libibp: {lib_note}")
    comps = cmp.all_compressors(tuple(args.skip))
    extras = extra_codecs.discover(lib)
    # torch (imported by ZipNN) brings a huge object graph; freezing it keeps
    # the gc.collect() before each timed sample cheap.
    import gc
    gc.collect()
    gc.freeze()

    files = bench_data.find_files(args.data, args.exclude, args.include)
    if not files:
        log(f"no .npy files under {args.data}")
        return 1
    datasets, skipped = [], []
    for f in files:
        d = bench_data.load(f, int(args.max_mib * 2**20))
        (datasets.append(d) if isinstance(d, bench_data.Dataset) else skipped.append((f.name, d)))

    results: list[Result] = []
    ibp_info, floors, cli_out = {}, {}, {}
    cli = None if args.no_cli else find_cli(args, lib)
    block = args.block_kib * 1024
    for ds in datasets:
        log(f"== {ds.describe()}")
        if lib is not None:
            t0 = time.perf_counter()
            r, info = bench_ibp(lib, ds, args)
            log(f"   IBP: {time.perf_counter() - t0:.1f} s")
            results += r
            ibp_info[ds.name] = info
        else:
            results.append(_na(ds, "IBP", "libibp", "-", lib_note))
        for ex in extras:
            t0 = time.perf_counter()
            got = ex.bench(ds, args)
            results += got
            if got:
                log(f"   {got[0].method.split(' (')[0]}: {time.perf_counter() - t0:.1f} s")
        blocks = measure.split_blocks(ds.rows.tobytes(), block)
        for comp in cmp.pick(comps, ds.dtype):
            t0 = time.perf_counter()
            results += bench_compressor(comp, ds, args, blocks)
            log(f"   {comp.name}: {time.perf_counter() - t0:.1f} s")
        rows_b = measure.split_rows(ds.rows)
        floors[ds.name] = dict(
            row=measure.python_floor(rows_b, args.reps, args.warmup), row_units=len(rows_b),
            block=measure.python_floor(blocks, args.reps, args.warmup), block_units=len(blocks),
            nbytes=ds.nbytes)
        if cli is not None and ds.path is not None:
            log("   ibp bench (CLI)")
            cli_out[ds.name] = run_cli_bench(cli, ds, args.max_mib)

    study = {}
    if lib is not None and not args.no_studies:
        study = run_studies(lib, files, args)

    env = dict(machine=machine_info(), packages=package_versions(comps), lib=lib_note,
               reexec="", command=command_line(argv), args=vars(args),
               extras=[e.status for e in extras], cli=str(cli) if cli else None,
               skipped=skipped, elapsed_s=None)
    out = Path(args.out)
    plots = []
    if not args.no_plots:
        import plots as plotmod
        plots = plotmod.make_all(results, study, out / "plots", args.plot_prefix)
    env["elapsed_s"] = time.time() - t_start
    env["load"] = (load_start, loadavg())
    import report
    md = report.render(env, datasets, results, ibp_info, floors, cli_out, study, plots, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / args.md_name).write_text(md)
    log(f"wrote {out / args.md_name} and {len(plots)} plot(s) in {env['elapsed_s']:.0f} s")
    if args.json:
        dump_json(args.json, env, results, ibp_info, floors, cli_out, study)
    bad = [r for r in results if r.verified is False]
    for r in bad:
        log(f"ROUND TRIP FAILED: {r.dataset} {r.method} {r.granularity} {r.timing} {r.note}")
    return 2 if bad else 0


def run_studies(lib, files, args) -> dict:
    """The paper studies on every data set (row subset) plus synthetic ints;
    `lib` is the ibp package."""
    cap = int(args.study_max_mib * 2**20)
    sets = []
    for f in files:
        d = bench_data.load(f, cap, seed=1)
        if isinstance(d, bench_data.Dataset):
            sets.append(d)
    width = 128
    nsyn = max(256, cap // (4 * width) // 2)
    syn = [bench_data.synthetic(k, nsyn, width) for k in ("normal", "uniform", "mixed_scale")]
    out = dict(fig12={}, table5={}, fig14={}, sets={})
    for d in sets:
        log(f"== studies: {d.describe()}")
        t0 = time.perf_counter()
        out["sets"][d.name] = dict(rows=d.nrows, row_bytes=d.row_bytes, cls=d.cls, dtype=d.dtype,
                                   file_rows=d.file_rows)
        out["fig12"][d.name] = studies.chunk_threshold(lib, d)
        out["table5"][d.name] = studies.sampling(lib, d)
        out["fig14"][d.name] = studies.clusters(lib, d)
        log(f"   {time.perf_counter() - t0:.1f} s")
    for d in syn:
        log(f"== studies: {d.describe()}")
        out["sets"][d.name] = dict(rows=d.nrows, row_bytes=d.row_bytes, cls=d.cls, dtype=d.dtype,
                                   file_rows=d.file_rows)
        out["fig14"][d.name] = studies.clusters(lib, d)
    return out


def command_line(argv) -> str:
    """The command as typed (relative to the repository root when possible)."""
    words = list(argv) if argv is not None else sys.argv[1:]
    script = os.path.relpath(__file__, os.getcwd())
    return " ".join(["python3", shlex.quote(script)] + [shlex.quote(w) for w in words])


def dump_json(path, env, results, ibp_info, floors, cli_out, study) -> None:
    """Raw results for other tools; tuple keys of the studies become strings."""
    import dataclasses

    def fix(o):
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return fix(dataclasses.asdict(o))
        if isinstance(o, dict):
            return {(",".join(map(str, k)) if isinstance(k, tuple) else str(k)): fix(v)
                    for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [fix(v) for v in o]
        if isinstance(o, (np.integer, np.floating)):
            return o.item()
        return o
    data = dict(env=env, ibp=ibp_info, python_floor=floors, cli=cli_out, studies=study,
                results=[dict(dataclasses.asdict(r), ratio=r.ratio, enc_gbs=r.enc_gbs,
                              dec_gbs=r.dec_gbs) for r in results])
    Path(path).write_text(json.dumps(fix(data), indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
