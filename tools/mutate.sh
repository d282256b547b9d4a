#!/usr/bin/env bash
# mutate.sh - the mutation check: plants each single-line bug of
# tests/mutations.txt, one at a time, in a COPY of the tree
# (build-mutate/tree; the real tree is never touched), rebuilds that copy
# incrementally and runs the suites the entry names. Every mutation must be
# killed: some suite fails, crashes or hangs. A mutation that survives means
# a test must be strengthened (docs/DEVELOPING.md, "Mutation check").
#
# usage: tools/mutate.sh [--jobs N] [--list FILE] [--only SUBSTRING]...
#   --only  run the entries whose file or line text contains SUBSTRING
#           (may be given more than once)
# The last line is "mutations: K killed, S survived, E errors" (an error: the
# line is not found exactly once, the mutant does not compile, or the
# unmutated suites fail). Exit status 0 only when every mutation was killed.
# Environment: IBP_MUTATE_TIMEOUT (seconds per suite run, default 300),
#              IBP_MUTATE_DIR (its work directory, default build-mutate),
#              IBP_MUTATE_OPT (the build's optimisation flags, default -O1).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "mutate.sh: python3 is required" >&2; exit 2; }
exec python3 - "$@" <<'PY'
import os, shutil, subprocess, sys, tempfile, time

root = os.getcwd()
args = sys.argv[1:]
jobs, listfile, only = 2, "tests/mutations.txt", []
i = 0
while i < len(args):
    a = args[i]
    if a == "--jobs": jobs = int(args[i + 1]); i += 2
    elif a == "--list": listfile = args[i + 1]; i += 2
    elif a == "--only": only.append(args[i + 1]); i += 2
    else: sys.exit("usage: tools/mutate.sh [--jobs N] [--list FILE] [--only SUBSTRING]")
timeout = int(os.environ.get("IBP_MUTATE_TIMEOUT", "300"))
work = os.path.join(root, os.environ.get("IBP_MUTATE_DIR", "build-mutate"))
tree = os.path.join(work, "tree")
bdir = os.path.join(work, "build")

def say(*a, sep=" "):
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

# ---- the copy of the tree ----------------------------------------------
def git_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(p)]

def put(rel, data):
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
    put(rel, snapshot[rel])
keep = set(files)
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
r = run(["cmake", "-S", tree, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_C_FLAGS_RELEASE={opt} -DNDEBUG",
         f"-DCMAKE_CXX_FLAGS_RELEASE={opt} -DNDEBUG", "-DIBP_CUDA=OFF", "-DIBP_TESTS=ON"])
if r.returncode:
    say(r.stdout[-3000:]); say("mutations: 0 killed, 0 survived, 1 errors"); sys.exit(1)

suites = sorted({s.split(":")[0] for m in muts for s in m["suites"]})
targets = suites + (["ibp_cli"] if any(x.startswith("test_cli") for x in suites) else [])

def build(tg):
    return run(["cmake", "--build", bdir, "-j", str(jobs), "--target"] + tg)

def run_suite(spec):
    """0: passed; otherwise why it failed (text)."""
    name, _, filt = spec.partition(":")
    cmd = [os.path.join(bdir, "bin", name), f"--jobs={jobs}", "--fail-fast", "--short-filename"]
    if filt:
        cmd.append(f"--filter={filt}")
    # A temporary root of its own (short: tests/util/tmproot.h), removed after
    # the suite: a mutant that crashes a suite leaves no directories behind.
    tmp = tempfile.mkdtemp(prefix="ibpm.", dir="/tmp")
    env = dict(os.environ, IBP_TEST_QUICK="1", IBP_SOURCE_DIR=tree, TMPDIR=tmp)
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

t0 = time.time()
say(f"building {len(targets)} targets in {bdir} ...")
r = build(targets)
if r.returncode:
    say(r.stdout[-3000:]); say("mutations: 0 killed, 0 survived, 1 errors"); sys.exit(1)
bad = [x for x in (run_suite(s) for s in sorted({s for m in muts for s in m["suites"]})) if x]
if bad:
    say("the unmutated suites fail, nothing to check:", *bad, sep="\n  ")
    say(f"mutations: 0 killed, 0 survived, {len(muts)} errors")
    sys.exit(1)
say(f"baseline passes ({time.time() - t0:.0f}s)")

# ---- one mutation at a time (grouped by file: one restore per file) ----
killed = survived = errors = 0
muts.sort(key=lambda m: m["file"])
originals = {}
for k, m in enumerate(muts, 1):
    rel = m["file"]
    if rel not in originals:
        for done in list(originals):  # restore the previous file
            put(done, originals.pop(done))
        if rel not in snapshot:
            say(f"ERROR    {rel}: no such file in the tree ({listfile}:{m['at']})")
            errors += 1
            continue
        originals[rel] = snapshot[rel]
    text = originals[rel].decode("utf-8")
    lines = text.split("\n")
    hits = [j for j, l in enumerate(lines) if l.strip() == m["old"]]
    label = f"[{k}/{len(muts)}] {rel}: {m['old'][:70]}"
    if len(hits) != 1:
        say(f"ERROR    {label}\n         the line is found {len(hits)} times, not once ({listfile}:{m['at']})")
        errors += 1
        continue
    j = hits[0]
    indent = lines[j][:len(lines[j]) - len(lines[j].lstrip())]
    lines[j] = indent + m["new"] if m["new"] else indent + "/* mutation: line deleted */"
    put(rel, "\n".join(lines).encode("utf-8"))
    tg = sorted({s.split(":")[0] for s in m["suites"]})
    if any(x.startswith("test_cli") for x in tg):
        tg.append("ibp_cli")
    ts = time.time()
    r = build(tg)
    if r.returncode:
        err = [l for l in r.stdout.splitlines() if "error" in l][:2]
        say(f"ERROR    {label}\n         the mutant does not compile: {' / '.join(err)[:200]}")
        errors += 1
        continue
    why = None
    for s in m["suites"]:
        why = run_suite(s)
        if why:
            break
    if why:
        killed += 1
        say(f"killed   {label}  [{time.time() - ts:.0f}s] by {why}")
    else:
        survived += 1
        say(f"SURVIVED {label}  [{time.time() - ts:.0f}s] ({listfile}:{m['at']}; suites: {' '.join(m['suites'])})")
for done in list(originals):
    put(done, originals.pop(done))
say(f"total {time.time() - t0:.0f}s")
say(f"mutations: {killed} killed, {survived} survived, {errors} errors, {len(skipped)} skipped")
sys.exit(0 if survived == 0 and errors == 0 else 1)
PY
