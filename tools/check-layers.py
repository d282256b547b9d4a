#!/usr/bin/env python3
"""check-layers.py - the include rule of docs/ARCHITECTURE.md, checked.

Every library file belongs to a layer; a file may include headers of its own
folder and of lower layers only (sibling codecs never include each other).
Public headers count as part of their subsystem's layer; the umbrella ibp.h
is for code outside the library (tools, tests, bench, python).
Exit 0 when the tree follows the rule, 1 with one line per violation."""
import os, re, sys

# (layer, folders and public headers it owns)
LAYERS = [
    (0, 'util', ['src/util', 'include/ibp/status.h', 'include/ibp/version.h', 'include/ibp/types.h']),
    (1, 'mem', ['src/mem', 'include/ibp/alloc.h']),
    (2, 'bitpack', ['src/bitpack', 'include/ibp/codec.h', 'include/ibp/analyze.h']),
    (2, 'exp', ['src/exp', 'include/ibp/exp.h']),
    (2, 'fp8', ['src/fp8', 'include/ibp/fp8.h']),
    (3, 'io', ['src/io', 'include/ibp/container.h', 'include/ibp/npy.h']),
    (4, 'store', ['src/store', 'include/ibp/store.h']),
    (5, 'cuda', ['src/cuda', 'kernels', 'include/ibp/cuda.h']),
    (6, 'cache', ['cache', 'include/ibp/cache.h']),
    (7, 'coll', ['src/coll', 'include/ibp/coll.h']),
    (9, 'umbrella', ['include/ibp.h']),
]
SEARCH = ['src', 'include', 'kernels']  # the library's include path, in order
SOURCE = re.compile(r'\.(c|h|cu|cuh|cpp|inc)$')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def owner(path):
    best = None
    for layer, name, roots in LAYERS:
        for r in roots:
            if path == r or path.startswith(r + '/'):
                if best is None or len(r) > len(best[2]):
                    best = (layer, name, r)
    return best


def resolve(frm, inc, root):
    for d in [os.path.dirname(frm)] + SEARCH:
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    bad = []
    nfiles = 0
    for top in ['src', 'include', 'kernels', 'cache']:
        for dp, _, fs in os.walk(os.path.join(root, top)):
            for f in sorted(fs):
                rel = os.path.relpath(os.path.join(dp, f), root)
                if not SOURCE.search(f):
                    continue
                me = owner(rel)
                if me is None:
                    bad.append(f'{rel}: in no layer (add its folder to tools/check-layers.py)')
                    continue
                nfiles += 1
                text = open(os.path.join(root, rel), errors='replace').read()
                for m in INCLUDE.finditer(text):
                    line = text.count('\n', 0, m.start()) + 1
                    tgt = resolve(rel, m.group(1), root)
                    if tgt is None:
                        bad.append(f'{rel}:{line}: "{m.group(1)}" not found on the library include path')
                        continue
                    it = owner(tgt)
                    if it is None:
                        bad.append(f'{rel}:{line}: "{m.group(1)}" is in no layer')
                    elif it[1] != me[1] and it[0] >= me[0]:
                        bad.append(f'{rel}:{line}: {me[1]} (layer {me[0]}) includes "{m.group(1)}" '
                                   f'of {it[1]} (layer {it[0]}): includes point down only')
    for b in bad:
        print(b)
    print(f'check-layers: {nfiles} files, {len(bad)} violation(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
