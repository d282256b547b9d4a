#!/usr/bin/env python3
"""check-layers.py - the include rule of docs/ARCHITECTURE.md, checked.

Every library file belongs to a layer; a file may include headers of its own
folder and of lower layers only (sibling codecs never include each other).
Public headers count as part of their subsystem's layer; the umbrella ibp.h
is for code outside the library (tools, bench, python, examples), which may
include public headers and its own folder's headers only. tests/ is
white-box and not checked.

    check-layers.py [ROOT]       exit 0 when the tree follows the rule, 1 with
                                 one line per violation
    check-layers.py --self-test [ROOT]
                                 copies the tree, breaks the rule in each way
                                 above and exits 1 unless every break is
                                 reported (so test_layers cannot pass vacuously)
"""
import os, re, shutil, sys, tempfile

# (layer, folders and public headers it owns)
LAYERS = [
    (0, 'util', ['src/util', 'include/ibp/status.h', 'include/ibp/version.h', 'include/ibp/types.h',
                 'include/ibp/checksum.h']),
    (1, 'mem', ['src/mem', 'include/ibp/alloc.h']),
    (2, 'bitpack', ['src/bitpack', 'include/ibp/codec.h', 'include/ibp/analyze.h']),
    (2, 'exp', ['src/exp', 'include/ibp/exp.h']),
    (2, 'fp8', ['src/fp8', 'include/ibp/fp8.h']),
    (3, 'io', ['src/io', 'include/ibp/container.h', 'include/ibp/npy.h']),
    (4, 'store', ['src/store', 'include/ibp/store.h', 'include/ibp/bag.h']),
    (5, 'cuda', ['src/cuda', 'kernels', 'include/ibp/cuda.h']),
    (6, 'cache', ['cache', 'include/ibp/cache.h', 'include/ibp/slab_pool.h', 'include/ibp/kv.h']),
    (7, 'coll', ['src/coll', 'include/ibp/coll.h']),
    (9, 'umbrella', ['include/ibp.h', 'include/ibp/unstable.h']),
]
LIBRARY = ['src', 'include', 'kernels', 'cache']  # folders checked against LAYERS
OUTSIDE = ['tools', 'bench', 'python', 'examples']  # public headers and their own folder only
SEARCH = ['src', 'include', 'kernels']  # the library's include path, in order
SOURCE = re.compile(r'\.(c|h|cu|cuh|cpp|inc)$')
# "anything", or <ibp.h> / <ibp/...> (the project's public headers with angle brackets)
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<(ibp(?:\.h|/[^>]+))>)', re.M)


def owner(path):
    best = None
    for layer, name, roots in LAYERS:
        for r in roots:
            if path == r or path.startswith(r + '/'):
                if best is None or len(r) > len(best[2]):
                    best = (layer, name, r)
    return best


def resolve(frm, inc, root, angle):
    dirs = SEARCH if angle else [os.path.dirname(frm)] + SEARCH
    for d in dirs:
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def sources(root, tops):
    for top in tops:
        for dp, dns, fs in os.walk(os.path.join(root, top)):
            dns.sort()
            for f in sorted(fs):
                if SOURCE.search(f):
                    yield os.path.relpath(os.path.join(dp, f), root)


def includes(root, rel):
    text = open(os.path.join(root, rel), errors='replace').read()
    for m in INCLUDE.finditer(text):
        inc = m.group(1) or m.group(2)
        line = text.count('\n', 0, m.start()) + 1
        yield line, inc, resolve(rel, inc, root, m.group(2) is not None)


def check(root):
    """Returns (number of files checked, list of violation lines)."""
    bad = []
    nfiles = 0
    for rel in sources(root, LIBRARY):
        me = owner(rel)
        if me is None:
            bad.append(f'{rel}: in no layer (add its folder to tools/check-layers.py)')
            continue
        nfiles += 1
        for line, inc, tgt in includes(root, rel):
            if tgt is None:
                bad.append(f'{rel}:{line}: "{inc}" not found on the library include path')
                continue
            it = owner(tgt)
            if it is None:
                bad.append(f'{rel}:{line}: "{inc}" is in no layer')
            elif it[1] != me[1] and it[0] >= me[0]:
                bad.append(f'{rel}:{line}: {me[1]} (layer {me[0]}) includes "{inc}" '
                           f'of {it[1]} (layer {it[0]}): includes point down only')
    for rel in sources(root, OUTSIDE):
        nfiles += 1
        top = rel.split('/')[0]
        for line, inc, tgt in includes(root, rel):
            # unresolved: a header of the tool's own build (generated) or a system one
            if tgt is None or tgt.startswith('include/') or tgt.startswith(top + '/'):
                continue
            bad.append(f'{rel}:{line}: "{inc}" is private to the library ({tgt}); '
                       f'{top}/ includes public headers (ibp.h, ibp/*.h) only')
    return nfiles, bad


# The self-test's breaks: (file, line appended, what kind of break). Each must
# give a violation that names the file.
BREAKS = [
    ('src/util/error.c', '#include "bitpack/codec_internal.h"', 'util includes a private codec header'),
    ('src/mem/alloc.c', '#include "ibp/store.h"', 'mem includes the public header of a higher layer'),
    ('src/fp8/fp8.c', '#include "exp/exp_format.h"', 'a codec includes a sibling codec'),
    ('src/bitpack/codec.c', '#include "../io/../cuda/ibp_cuda_internal.h"', 'a relative path up to cuda'),
    ('src/store/store.c', '#include "cuda/ibp_cuda_internal.h"', 'store includes cuda'),
    ('src/io/npy.c', '#include "ibp.h"', 'library code includes the umbrella header'),
    ('src/util/dtype.c', '#include <ibp/cuda.h>', 'an angle-bracket include of a higher layer'),
    ('include/ibp/codec.h', '#include "container.h"', 'a public header includes a higher one'),
    ('kernels/fp8.cu', '#include "ibp/../../cache/none.h"', 'an include that does not resolve'),
    ('tools/ibp.c', '#include "util/error.h"', 'the CLI includes a private header'),
    ('src/newlayer/x.c', '', 'a file in a folder of no layer'),
]


def self_test(root):
    tmp = tempfile.mkdtemp(prefix='check-layers-')
    try:
        for top in LIBRARY + OUTSIDE:
            if os.path.isdir(os.path.join(root, top)):
                shutil.copytree(os.path.join(root, top), os.path.join(tmp, top),
                                ignore=lambda d, fs: [f for f in fs if not SOURCE.search(f)
                                                      and not os.path.isdir(os.path.join(d, f))])
        _, base = check(tmp)
        fails = 0
        for path, text, what in BREAKS:
            full = os.path.join(tmp, path)
            if text and not os.path.isfile(full):
                print(f'self-test: {path} is gone; update BREAKS in tools/check-layers.py')
                fails += 1
                continue
            old = open(full).read() if os.path.isfile(full) else None
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'a') as f:
                f.write('\n' + text + '\n')
            _, bad = check(tmp)
            new = [b for b in bad if b not in base]
            ok = len(new) == 1 and new[0].startswith(path + ':')
            print(f'self-test: {"caught" if ok else "MISSED"}: {what} ({path}: {text or "new file"})'
                  + ('' if ok else f' -> {new}'))
            fails += not ok
            if old is None:
                os.remove(full)
                os.rmdir(os.path.dirname(full))
            else:
                with open(full, 'w') as f:
                    f.write(old)
        _, after = check(tmp)
        if after != base:
            print('self-test: the restored copy does not check as the tree did')
            fails += 1
        print(f'check-layers self-test: {len(BREAKS)} breaks, {fails} not reported as expected')
        return 1 if fails else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    args = sys.argv[1:]
    selftest = '--self-test' in args
    args = [a for a in args if a != '--self-test']
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), '..'))
    if selftest:
        return self_test(root)
    nfiles, bad = check(root)
    for b in bad:
        print(b)
    print(f'check-layers: {nfiles} files, {len(bad)} violation(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
