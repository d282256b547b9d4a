#!/usr/bin/env bash
# mutate.sh - the mutation check: plants each single-line bug of
# tests/mutations.txt, one at a time, in a COPY of the tree
# (build-mutate/tree; the real tree is never touched), rebuilds that copy
# incrementally and runs the suites the entry names. Every mutation must be
# killed: some suite fails, crashes or hangs. A mutation that survives means
# a test must be strengthened (docs/DEVELOPING.md, "Mutation check").
#
# usage: tools/mutate.sh [--jobs N] [--workers W] [--list FILE] [--only SUBSTRING]...
#   --jobs     cores to use (default 2)
#   --workers  copies of the tree mutated side by side, each with its own
#              build, taking the entries file by file (default: --jobs, at
#              most 4; a mutant is mostly one compile and one link, which
#              use one core, so one copy left the second core idle)
#   --only     run the entries whose file or line text contains SUBSTRING
#              (may be given more than once)
# The last line is "mutations: K killed, S survived, E errors" (an error: the
# line is not found exactly once, the mutant does not compile, or the
# unmutated suites fail). Exit status 0 only when every mutation was killed.
# Environment: IBP_MUTATE_TIMEOUT (seconds per suite run, default 300),
#              IBP_MUTATE_DIR (its work directory, default build-mutate;
#              the copies are tree/, tree-1/, ... and build/, build-1/, ...),
#              IBP_MUTATE_OPT (the build's optimisation flags, default -O1).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "mutate.sh: python3 is required" >&2; exit 2; }
exec python3 - "$@" <<'PY'
import os, shutil, subprocess, sys, tempfile, threading, time

root = os.getcwd()
args = sys.argv[1:]
jobs, workers, listfile, only = 2, None, "tests/mutations.txt", []
i = 0
while i < len(args):
    a = args[i]
    if a == "--jobs": jobs = int(args[i + 1]); i += 2
    elif a == "--workers": workers = int(args[i + 1]); i += 2
    elif a == "--list": listfile = args[i + 1]; i += 2
    elif a == "--only": only.append(args[i + 1]); i += 2
    else: sys.exit("usage: tools/mutate.sh [--jobs N] [--workers W] [--list FILE] [--only SUBSTRING]")
if workers is None:
    workers = min(jobs, 4)
workers = max(1, workers)
timeout = int(os.environ.get("IBP_MUTATE_TIMEOUT", "300"))
work = os.path.join(root, os.environ.get("IBP_MUTATE_DIR", "build-mutate"))

def tree_of(w):
    return os.path.join(work, "tree" if w == 0 else f"tree-{w}")

def bdir_of(w):
    return os.path.join(work, "build" if w == 0 else f"build-{w}")

out_lock = threading.Lock()

def say(*a, sep=" "):
    with out_lock:
        print(*a, sep=sep, flush=True)

# ---- the list ----------------------------------------------------------
# "@ FILE SUITE..." opens an entry (SUITE = test binary, or binary:filter
# with a Criterion --filter pattern; "needs=FLAG,..." names CPU flags of
# /proc/cpuinfo the suites need to reach the line: without them the entry
# is skipped, and counted as such; FILE *_avx512.c needs avx512bw and
# avx512vbmi, *_avx2.c avx2, without saying); "- TEXT" the exact line to change
# (surrounding whitespace aside); "+ TEXT" its replacement ("+" alone
# deletes the line's code). "#" lines are comments.
muts, cur = [], None
for n, raw in enumerate(open(listfile, encoding="utf-8"), 1):
    line = raw.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    if line.startswith("@ "):
        f = line[2:].split()
        if len(f) < 2:
            sys.exit(f"{listfile}:{n}: '@ FILE SUITE...' needs a file and a suite")
        needs = [x for w in f[1:] if w.startswith("needs=") for x in w[6:].split(",") if x]
        if f[0].endswith("_avx512.c"):
            needs += ["avx512bw", "avx512vbmi"]
        elif f[0].endswith("_avx2.c"):
            needs += ["avx2"]
        cur = {"file": f[0], "suites": [w for w in f[1:] if not w.startswith("needs=")], "old": None,
               "new": None, "at": n, "needs": needs}
        muts.append(cur)
    elif line.startswith("-") and cur and cur["old"] is None:
        cur["old"] = line[1:].strip()
    elif line.startswith("+") and cur and cur["new"] is None:
        cur["new"] = line[1:].strip()
    else:
        sys.exit(f"{listfile}:{n}: cannot parse: {line}")
for m in muts:
    if m["old"] is None or m["new"] is None:
        sys.exit(f"{listfile}:{m['at']}: an entry needs a '-' and a '+' line")
if only:
    muts = [m for m in muts if any(o in m["file"] or o in m["old"] for o in only)]
# CPU flags (Linux; elsewhere none are known and every entry that needs one is skipped)
cpu_flags = set()
try:
    for l in open("/proc/cpuinfo", encoding="utf-8"):
        if l.startswith("flags"):
            cpu_flags = set(l.split(":", 1)[1].split())
            break
except OSError:
    pass
skipped = [m for m in muts if not set(m["needs"]) <= cpu_flags]
muts = [m for m in muts if set(m["needs"]) <= cpu_flags]
for m in skipped:
    say(f"skipped  {m['file']}: {m['old'][:70]} (this CPU lacks {' '.join(sorted(set(m['needs']) - cpu_flags))}; "
        f"{listfile}:{m['at']})")
say(f"mutation check: {len(muts)} mutations from {listfile}")
if not muts:  # nothing to build or run
    say(f"mutations: 0 killed, 0 survived, 0 errors, {len(skipped)} skipped")
    if only and not skipped:
        sys.exit(f"no entry's file or line text contains {' or '.join(map(repr, only))}")
    sys.exit(0)

# ---- the copies of the tree ---------------------------------------------
def git_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(p)]

def put(tree, rel, data):
    """Writes data to tree/rel when it differs (a fresh mtime, so make sees it)."""
    dst = os.path.join(tree, rel)
    try:
        with open(dst, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(data)
    shutil.copymode(os.path.join(root, rel), dst)

# one snapshot of the tree: mutations apply to it, whatever changes meanwhile
files = git_files()
snapshot = {}
for rel in files:
    with open(rel, "rb") as f:
        snapshot[rel] = f.read()
# no more copies than files to mutate (entries of one file run in one copy)
workers = max(1, min(workers, len({m["file"] for m in muts})))
keep = set(files)
for w in range(workers):
    tree = tree_of(w)
    for rel in files:
        put(tree, rel, snapshot[rel])
    for d, _, fs in os.walk(tree):
        for name in fs:
            rel = os.path.relpath(os.path.join(d, name), tree)
            if rel not in keep:
                os.remove(os.path.join(d, name))

def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)

# -O1, not Release's -O3: a mutant is one rebuild of the files it touches
# (a codec header: 19 objects), and most of the check's time was compiling
# the row kernels' files (codec_avx2.c: -O3 7.9 s, -O2 2.1, -O1 1.2). All
# 366 entries were killed at -O2 and at -O1 (15.4 -> 11.4 min of mutants,
# 2026-12-01); what the tests see does not depend on it. IBP_MUTATE_OPT
# overrides it.
opt = os.environ.get("IBP_MUTATE_OPT", "-O1")
# the cores shared out: each copy builds and runs its suites with its part
wjobs = max(1, jobs // workers)

def configure(w):
    return run(["cmake", "-S", tree_of(w), "-B", bdir_of(w), "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_C_FLAGS_RELEASE={opt} -DNDEBUG", f"-DCMAKE_CXX_FLAGS_RELEASE={opt} -DNDEBUG",
                "-DIBP_CUDA=OFF", "-DIBP_TESTS=ON"])

suites = sorted({s.split(":")[0] for m in muts for s in m["suites"]})
targets = suites + (["ibp_cli"] if any(x.startswith("test_cli") for x in suites) else [])

def build(w, tg):
    return run(["cmake", "--build", bdir_of(w), "-j", str(wjobs), "--target"] + tg)

def run_suite(w, spec):
    """0: passed; otherwise why it failed (text)."""
    name, _, filt = spec.partition(":")
    cmd = [os.path.join(bdir_of(w), "bin", name), f"--jobs={wjobs}", "--fail-fast", "--short-filename"]
    if filt:
        cmd.append(f"--filter={filt}")
    # A temporary root of its own (short: tests/util/tmproot.h), removed after
    # the suite: a mutant that crashes a suite leaves no directories behind.
    tmp = tempfile.mkdtemp(prefix="ibpm.", dir="/tmp")
    env = dict(os.environ, IBP_TEST_QUICK="1", IBP_SOURCE_DIR=tree_of(w), TMPDIR=tmp)
    try:
        r = run(cmd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{spec}: hung (> {timeout}s)"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode in (0, 77):  # 77: nothing could run (no GPU), not a failure
        return 0
    lines = [l for l in r.stdout.splitlines() if "Assertion" in l or "FAIL" in l or "CRASH" in l]
    return f"{spec}: exit {r.returncode}" + (f" ({lines[0].strip()[:100]})" if lines else "")

def parallel(fn, n):
    """fn(w) for w in 0..n-1 on threads of their own; their results."""
    res = [None] * n
    def one(w):
        res[w] = fn(w)
    ts = [threading.Thread(target=one, args=(w,)) for w in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    return res

t0 = time.time()
say(f"building {len(targets)} targets in {workers} cop{'y' if workers == 1 else 'ies'} of the tree under {work} ...")
def setup(w):
    r = configure(w)
    return r if r.returncode else build(w, targets)

for r in parallel(setup, workers):
    if r.returncode:
        say(r.stdout[-3000:]); say("mutations: 0 killed, 0 survived, 1 errors"); sys.exit(1)
say(f"built ({time.time() - t0:.0f}s)")
# The unmutated suites, shared out between the copies (they hold the same
# files). A filtered run of a suite that also runs whole is part of it.
specs = sorted({s for m in muts for s in m["suites"]})
whole = {s for s in specs if ":" not in s}
specs = [s for s in specs if ":" not in s or s.partition(":")[0] not in whole]
bad = [x for part in parallel(lambda w: [run_suite(w, s) for s in specs[w::workers]], workers) for x in part if x]
if bad:
    say("the unmutated suites fail, nothing to check:", *bad, sep="\n  ")
    say(f"mutations: 0 killed, 0 survived, {len(muts)} errors")
    sys.exit(1)
say(f"baseline passes ({time.time() - t0:.0f}s)")

# ---- one mutation at a time in each copy --------------------------------
# A copy takes a whole file's entries (one restore per file), the files
# with most entries first, from a queue shared by the copies.
muts.sort(key=lambda m: m["file"])
for k, m in enumerate(muts, 1):
    m["k"] = k
groups = {}
for m in muts:
    groups.setdefault(m["file"], []).append(m)
queue = sorted(groups.values(), key=len, reverse=True)
tally = {"killed": 0, "survived": 0, "errors": 0}

def count(what):
    with out_lock:
        tally[what] += 1

def mutate_file(w, group):
    tree = tree_of(w)
    rel = group[0]["file"]
    if rel not in snapshot:
        for m in group:
            say(f"ERROR    {rel}: no such file in the tree ({listfile}:{m['at']})")
            count("errors")
        return
    text = snapshot[rel].decode("utf-8")
    for m in group:
        lines = text.split("\n")
        hits = [j for j, l in enumerate(lines) if l.strip() == m["old"]]
        label = f"[{m['k']}/{len(muts)}] {rel}: {m['old'][:70]}"
        if len(hits) != 1:
            say(f"ERROR    {label}\n         the line is found {len(hits)} times, not once ({listfile}:{m['at']})")
            count("errors")
            continue
        j = hits[0]
        indent = lines[j][:len(lines[j]) - len(lines[j].lstrip())]
        lines[j] = indent + m["new"] if m["new"] else indent + "/* mutation: line deleted */"
        put(tree, rel, "\n".join(lines).encode("utf-8"))
        tg = sorted({s.split(":")[0] for s in m["suites"]})
        if any(x.startswith("test_cli") for x in tg):
            tg.append("ibp_cli")
        ts = time.time()
        r = build(w, tg)
        if r.returncode:
            err = [l for l in r.stdout.splitlines() if "error" in l][:2]
            say(f"ERROR    {label}\n         the mutant does not compile: {' / '.join(err)[:200]}")
            count("errors")
            continue
        why = None
        for s in m["suites"]:
            why = run_suite(w, s)
            if why:
                break
        if why:
            count("killed")
            say(f"killed   {label}  [{time.time() - ts:.0f}s] by {why}")
        else:
            count("survived")
            say(f"SURVIVED {label}  [{time.time() - ts:.0f}s] ({listfile}:{m['at']}; suites: {' '.join(m['suites'])})")
    put(tree, rel, snapshot[rel])  # restored before the copy takes its next file

def worker(w):
    while True:
        with out_lock:
            if not queue:
                return
            group = queue.pop(0)
        mutate_file(w, group)

parallel(worker, workers)
say(f"total {time.time() - t0:.0f}s")
say(f"mutations: {tally['killed']} killed, {tally['survived']} survived, {tally['errors']} errors, {len(skipped)} skipped")
sys.exit(0 if tally["survived"] == 0 and tally["errors"] == 0 else 1)
PY
