#!/usr/bin/env python3
"""test_ctypes_abi.py - ctypes mirrors of C structs against the C compiler.

For every ctypes.Structure in the mirror files (python/src/ibp/_structs.py,
the Python package's mirrors, by default; each class names its C struct in
`c_name` and its header in `c_header`), checks:
  - the members the header declares, in order, are the members that
    tests/abi/abi_layout.c lists (so a field added to a header is noticed);
  - the mirror has exactly those members, in that order;
  - its size, alignment, and every member's offset and size equal what the
    C compiler gives (abi_layout's output).
A mismatch means a call that takes the struct reads or writes the wrong bytes
(a missing trailing field: the C side writes past the Python object).
Every struct abi_layout lists must have a mirror in some file. Needs only
ctypes, not numpy. Exit 0 when all match, 1 otherwise.

Usage: test_ctypes_abi.py ABI_LAYOUT_EXE SOURCE_DIR [MIRROR.py ...]
(the mirror file defaults to python/src/ibp/_structs.py)"""
import ctypes
import importlib.util
import os
import re
import subprocess
import sys


def c_layout(exe):
    """{struct: (size, align, [(member, offset, size), ...])} from abi_layout."""
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    structs = {}
    for line in out.splitlines():
        w = line.split()
        if w[0] == 'struct':
            structs[w[1]] = (int(w[2]), int(w[3]), [])
        elif w[0] == 'field':
            structs[w[1]][2].append((w[2], int(w[3]), int(w[4])))
    return structs


def header_members(path, cname):
    """Member names of `typedef struct ... { ... } cname;` in a header, in order."""
    text = open(path).read()
    m = re.search(r'typedef\s+struct\s*\w*\s*\{([^{}]*)\}\s*' + re.escape(cname) + r'\s*;', text)
    if not m:
        return None
    body = re.sub(r'/\*.*?\*/|//[^\n]*', ' ', m.group(1), flags=re.S)
    names = []
    for decl in body.split(';'):
        decl = re.sub(r'\[[^\]]*\]|:\s*\d+', '', decl).strip()  # array bounds, bit-field widths
        if not decl:
            continue
        parts = decl.split(',')
        names.append(parts[0].split()[-1].lstrip('*'))
        names += [p.strip().lstrip('*') for p in parts[1:]]
    return names


MIRROR_FILES = ['python/src/ibp/_structs.py']


def mirrors(path, i):
    spec = importlib.util.spec_from_file_location(f'ibp_mirror_under_test_{i}', path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return [c for c in vars(mod).values()
            if isinstance(c, type) and issubclass(c, ctypes.Structure) and c.__module__ == mod.__name__]


def check_header(src, header, cname, listed):
    """A failure line when the header's members differ from abi_layout's list, else None."""
    declared = header_members(os.path.join(src, header), cname)
    if declared is None:
        return f'{cname}: no "typedef struct {{...}} {cname};" in {header}'
    if declared != listed:
        return f'{cname}: {header} declares {declared}, tests/abi/abi_layout.c lists {listed}'
    return None


def check_mirror(cls, size, align, cfields):
    """Failure lines for one mirror class against the C layout."""
    cname, out = cls.c_name, []
    listed = [f[0] for f in cfields]
    names = [f[0] for f in cls._fields_]
    if names != listed:
        out.append(f'members {names}, C {cname} has {listed}')
    if ctypes.sizeof(cls) != size:
        out.append(f'size {ctypes.sizeof(cls)}, C {cname} is {size} bytes')
    if ctypes.alignment(cls) != align:
        out.append(f'alignment {ctypes.alignment(cls)}, C {cname} has {align}')
    for member, off, fsize in cfields:
        d = cls.__dict__.get(member)
        if d is None or not hasattr(d, 'offset'):
            continue  # a missing member, reported above
        if (d.offset, d.size) != (off, fsize):
            out.append(f'.{member}: offset {d.offset} size {d.size}, C {cname}.{member}: '
                       f'offset {off} size {fsize}')
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__.split('\n\n')[-1])
        return 2
    exe, src = sys.argv[1], sys.argv[2]
    files = sys.argv[3:] or [p for p in (os.path.join(src, f) for f in MIRROR_FILES) if os.path.isfile(p)]
    layout = c_layout(exe)
    fails, seen, nclasses = [], set(), 0
    for i, path in enumerate(files):
        for cls in mirrors(path, i):
            nclasses += 1
            name = f'{os.path.relpath(path, src)}:{cls.__name__}'
            cname, header = getattr(cls, 'c_name', None), getattr(cls, 'c_header', None)
            if not cname or not header:
                fails.append(f'{name}: names no C struct (set c_name and c_header)')
                continue
            if cname not in layout:
                fails.append(f'{name}: {cname} is not in tests/abi/abi_layout.c; add it there')
                continue
            size, align, cfields = layout[cname]
            if cname not in seen:
                bad = check_header(src, header, cname, [f[0] for f in cfields])
                if bad:
                    fails.append(bad)
            seen.add(cname)
            bad = check_mirror(cls, size, align, cfields)
            fails += [f'{name}: {b}' for b in bad]
            if not bad:
                print(f'ok: {name} = {cname} ({size} bytes, {len(cfields)} members)')
    for cname in sorted(set(layout) - seen):
        fails.append(f'{cname}: listed in tests/abi/abi_layout.c but mirrored by no class')
    for f in fails:
        print('FAIL:', f)
    print(f'test_ctypes_abi: {nclasses} mirror classes in {len(files)} files, {len(fails)} mismatch(es)')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
