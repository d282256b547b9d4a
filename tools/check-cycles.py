#!/usr/bin/env python3
"""check-cycles.py - cycles between the library's source files, and files
too long to read, checked against a ratchet (issue 39 item 6; beside
tools/check-layers.py, which checks the direction of includes between
layers).

A node is a library source file (.c, .cu under src/, cache/, kernels/).
File A depends on file B when A includes B's header (B's name with .h or
.cuh, in B's folder) or when A's object file uses a symbol that B's object
file defines (nm on the objects of a build: calls and data, both ways
they are linked). A cycle is a set of files that depend on each other
(a strongly connected component of more than one file): none of them can
be read, tested or replaced alone. Every library source file (headers
included, tests excluded) should stay under 1,500 lines.

Today's cycles and long files are listed in tools/check-cycles.baseline.
The check fails on a cycle or a long file the baseline does not have, on
a listed cycle that grew or a listed file that got longer, and on a listed
one that is gone or shrank (so the list only ever gets shorter: update it
with --write-baseline when a refactor breaks a cycle).

    check-cycles.py --build BUILD [ROOT]     exit 0, or 1 with one line per finding
    check-cycles.py --build BUILD --report [ROOT]
                                             every cycle with the edges that make it
    check-cycles.py --build BUILD --write-baseline [ROOT]
    check-cycles.py --self-test              the graph and ratchet logic on made-up
                                             graphs (each way to fail must fail)
Exit 77 when BUILD has no library objects or nm is missing.
"""
import os
import re
import shutil
import subprocess
import sys

LIBRARY = ['src', 'cache', 'kernels']
SOURCE = re.compile(r'\.(c|cu)$')
HEADER = re.compile(r'\.(h|cuh)$')
MAX_LINES = 1500
OBJ_DIRS = ['CMakeFiles/ibp_obj.dir', 'CMakeFiles/ibp_coll_mpi.dir']
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
BASELINE = 'tools/check-cycles.baseline'


def lib_files(root, pattern):
    out = []
    for top in LIBRARY:
        for dp, dns, fs in os.walk(os.path.join(root, top)):
            dns.sort()
            for f in sorted(fs):
                if pattern.search(f):
                    out.append(os.path.relpath(os.path.join(dp, f), root))
    return out


def include_edges(root, files):
    """A -> B where A includes B's own header (B.h / B.cuh beside B)."""
    by_header = {}
    for f in files:
        stem = os.path.splitext(f)[0]
        for ext in ('.h', '.cuh'):
            by_header[stem + ext] = f
    edges = set()
    for a in files:
        text = open(os.path.join(root, a), errors='replace').read()
        for inc in INCLUDE.findall(text):
            for d in (os.path.dirname(a), 'src', 'kernels', 'include', ''):
                p = os.path.normpath(os.path.join(d, inc))
                if p in by_header:
                    b = by_header[p]
                    if b != a:
                        edges.add((a, b))
                    break
    return edges


def symbols(obj):
    """(defined globals, undefined) of an object file."""
    r = subprocess.run(['nm', '-P', obj], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError('nm %s: %s' % (obj, r.stderr.strip()))
    dfn, und = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == 'U':
            und.add(name)
        elif kind in 'TDBRVWGS' and kind.isupper():
            dfn.add(name)
    return dfn, und


def object_edges(build, files):
    """A -> B where A's object uses a symbol B's object defines; also the
    files that have objects in this build."""
    objs = {}
    for d in OBJ_DIRS:
        base = os.path.join(build, d)
        for dp, _, fs in os.walk(base):
            for f in fs:
                if f.endswith('.o'):
                    src = os.path.relpath(os.path.join(dp, f[:-2]), base)
                    if src in files:
                        objs[src] = os.path.join(dp, f)
    defined, used = {}, {}
    for src, obj in objs.items():
        d, u = symbols(obj)
        used[src] = u
        for s in d:
            defined.setdefault(s, set()).add(src)
    edges = set()
    for a, u in used.items():
        for s in u:
            for b in defined.get(s, ()):
                if b != a:
                    edges.add((a, b))
    return edges, set(objs)


def sccs(nodes, edges):
    """Strongly connected components of more than one node (Tarjan,
    iterative), each a sorted tuple; sorted."""
    succ = {n: [] for n in nodes}
    for a, b in edges:
        if a in succ and b in succ:
            succ[a].append(b)
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(succ[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(tuple(sorted(comp)))
    return sorted(out)


def long_files(root):
    out = {}
    for f in lib_files(root, re.compile(r'\.(c|cu|h|cuh)$')):
        n = sum(1 for _ in open(os.path.join(root, f), errors='replace'))
        if n > MAX_LINES:
            out[f] = n
    return out


def read_baseline(path):
    cycles, longs = [], {}
    if not os.path.isfile(path):
        return cycles, longs
    for line in open(path):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(' ')
        if kind == 'cycle':
            cycles.append(tuple(sorted(rest.split())))
        elif kind == 'long':
            f, n = rest.split()
            longs[f] = int(n)
        else:
            raise ValueError('%s: unknown line %r' % (path, line))
    return sorted(cycles), longs


def compare(cycles, longs, base_cycles, base_longs, built=None):
    """Findings (strings) of the ratchet; [] when the tree matches it. built:
    the files this build compiled (None: all); a listed cycle with files
    this configuration does not build (CUDA off) is checked on the rest, and
    only for growth."""
    bad = []
    base = []  # (listed cycle, its built part, whether all of it is built)
    for b in base_cycles:
        part = tuple(x for x in b if built is None or x in built)
        if len(part) >= 2:
            base.append((b, part, len(part) == len(b)))
    for c in cycles:
        home = [(b, part, full) for b, part, full in base if set(c) <= set(part)]
        if home:
            b, part, full = home[0]
            if full and c != part:
                bad.append('cycle shrank (good: update %s with --write-baseline): %s, was %s' % (
                    BASELINE, ' '.join(c), ' '.join(b)))
            continue
        grown = [b for b, part, _ in base if set(part) < set(c)]
        if grown:
            bad.append('cycle grew: %s (was %s): %s' % (' '.join(c), ' '.join(grown[0]),
                                                       ', '.join(sorted(set(c) - set(grown[0])))))
        else:
            bad.append('new cycle: %s' % ' '.join(c))
    for b, part, full in base:
        if full and not any(set(c) <= set(b) for c in cycles):
            bad.append('cycle gone (good: remove it from %s): %s' % (BASELINE, ' '.join(b)))
    for f, n in sorted(longs.items()):
        if f not in base_longs:
            bad.append('%s: %d lines, over %d (split it)' % (f, n, MAX_LINES))
        elif n > base_longs[f]:
            bad.append('%s: %d lines, longer than the %d of %s' % (f, n, base_longs[f], BASELINE))
        elif n < base_longs[f]:
            bad.append('%s: %d lines, shorter than the %d of %s (good: update it)' % (f, n, base_longs[f], BASELINE))
    for f in sorted(base_longs):
        if f not in longs:
            bad.append('%s: no longer over %d lines (good: remove it from %s)' % (f, MAX_LINES, BASELINE))
    return bad


def self_test():
    """Each way to fail, on made-up graphs."""
    fails = []

    def want(cond, what):
        if not cond:
            fails.append(what)
    n = ['a', 'b', 'c', 'd', 'e']
    want(sccs(n, {('a', 'b'), ('b', 'c')}) == [], 'a chain has no cycle')
    want(sccs(n, {('a', 'b'), ('b', 'a')}) == [('a', 'b')], 'a two-file cycle')
    want(sccs(n, {('a', 'b'), ('b', 'c'), ('c', 'a'), ('d', 'e')}) == [('a', 'b', 'c')], 'a three-file cycle')
    want(sccs(n, {('a', 'b'), ('b', 'a'), ('c', 'd'), ('d', 'c'), ('b', 'c')}) == [('a', 'b'), ('c', 'd')],
         'two cycles joined one way stay two')
    big = [str(i) for i in range(5000)]
    want(sccs(big, {(big[i], big[(i + 1) % 5000]) for i in range(5000)}) == [tuple(sorted(big))],
         'a 5000-file ring (no recursion limit)')
    base = [('a', 'b', 'c')]
    want(compare([('a', 'b', 'c')], {}, base, {}) == [], 'the baseline itself passes')
    want(any('new cycle' in x for x in compare([('a', 'b', 'c'), ('d', 'e')], {}, base, {})), 'a new cycle fails')
    want(any('grew' in x for x in compare([('a', 'b', 'c', 'd')], {}, base, {})), 'a grown cycle fails')
    want(any('shrank' in x for x in compare([('a', 'b')], {}, base, {})), 'a shrunk cycle asks for an update')
    want(any('gone' in x for x in compare([], {}, base, {})), 'a broken cycle asks for an update')
    want(any('over' in x for x in compare([], {'x.c': 1600}, [], {})), 'a new long file fails')
    want(any('longer' in x for x in compare([], {'x.c': 1700}, [], {'x.c': 1600})), 'a longer listed file fails')
    want(any('shorter' in x for x in compare([], {'x.c': 1550}, [], {'x.c': 1600})), 'a shorter one asks for an update')
    want(any('no longer' in x for x in compare([], {}, [], {'x.c': 1600})), 'a listed file now short asks')
    want(compare([('a', 'b')], {}, base, {}, built={'a', 'b', 'd'}) == [], 'a cycle through an unbuilt file')
    want(compare([], {}, [('a', 'c')], {}, built={'a', 'b'}) == [], 'a listed cycle of unbuilt files is skipped')
    want(any('grew' in x for x in compare([('a', 'b', 'd')], {}, base, {}, built={'a', 'b', 'd'})),
         'growth is caught in a partial build')
    if fails:
        print('check-cycles --self-test: FAILED: ' + '; '.join(fails))
        return 1
    print('check-cycles --self-test: every way to fail is reported (17 checks)')
    return 0


def main(argv):
    args = list(argv)
    if '--self-test' in args:
        return self_test()
    build, report, write = None, False, False
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == '--build' and i + 1 < len(args):
            build = args[i + 1]
            i += 2
            continue
        if a == '--report':
            report = True
        elif a == '--write-baseline':
            write = True
        else:
            rest.append(a)
        i += 1
    root = os.path.abspath(rest[0] if rest else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    if not build:
        print('usage: check-cycles.py --build BUILD [--report | --write-baseline] [ROOT]')
        return 2
    if not shutil.which('nm'):
        print('check-cycles: SKIPPED: no nm (binutils)')
        return 77
    files = lib_files(root, SOURCE)
    oe, built = object_edges(build, set(files))
    if not built:
        print('check-cycles: SKIPPED: no library objects under %s (build the library first)' % build)
        return 77
    ie = {(a, b) for a, b in include_edges(root, files) if a in built and b in built}
    edges = oe | ie
    cycles = sccs(sorted(built), edges)
    longs = long_files(root)
    if write:
        with open(os.path.join(root, BASELINE), 'w') as f:
            f.write('# tools/check-cycles.py: today\'s cycles between library source files and files over %d\n'
                    '# lines (written with --write-baseline). This list may only get shorter.\n' % MAX_LINES)
            for c in cycles:
                f.write('cycle %s\n' % ' '.join(c))
            for p, n in sorted(longs.items()):
                f.write('long %s %d\n' % (p, n))
        print('check-cycles: wrote %s: %d cycles, %d long files' % (BASELINE, len(cycles), len(longs)))
        return 0
    if report:
        for c in cycles:
            inner = sorted((a, b) for a, b in edges if a in c and b in c)
            print('cycle of %d files: %s' % (len(c), ' '.join(c)))
            for a, b in inner:
                how = '+'.join(k for k, s in (('include', ie), ('symbols', oe)) if (a, b) in s)
                print('    %s -> %s (%s)' % (a, b, how))
        for p, n in sorted(longs.items()):
            print('long: %s %d lines' % (p, n))
    base_cycles, base_longs = read_baseline(os.path.join(root, BASELINE))
    bad = compare(cycles, longs, base_cycles, base_longs, built)
    for b in bad:
        print('check-cycles: ' + b)
    nobj = len(built)
    print('check-cycles: %d source files (%d objects in %s), %d dependencies, %d cycles (%d files), %d files over %d '
          'lines%s' % (len(files), nobj, build, len(edges), len(cycles), sum(len(c) for c in cycles), len(longs),
                       MAX_LINES, ': as the baseline' if not bad else ''))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
