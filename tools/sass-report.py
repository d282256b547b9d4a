#!/usr/bin/env python3
"""sass-report.py - what the decode kernels are made of, in SASS (issue 36,
part 1: the census the cost model will weight). No GPU needed.

Compiles kernels/{ibp_gather,ibp_bag,exp_codec,fp8}.cu for sm_90 (and the
other --arch values) with line information, disassembles them with nvdisasm
(found on PATH, in the CUDA toolkit, or installed from the package
registry's `nvidia-cuda-nvdisasm` into ~/.cache/ibp/nvtools), and prints per
kernel: registers (ptxas), SASS instructions, their pipe classes, the loops
(backward branches) and, for each hot loop, its instructions by pipe class
and by the source function they come from (line information, inlined
frames resolved to the innermost function). --check fails (exit 1) when a
kernel named in HOT below has no loop holding its hot function, so the
report cannot silently stop measuring; exit 77 (skipped, said why) without
nvcc or a disassembler.

Usage: tools/sass-report.py [--arch 90,80] [--kernels gather,bag,exp,fp8]
                            [--json FILE] [--check] [--quiet]
Pipe classes and their assumed issue rates: docs/GPU.md "SASS census".
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = {
    'gather': 'kernels/ibp_gather.cu',
    'bag': 'kernels/ibp_bag.cu',
    'exp': 'kernels/exp_codec.cu',
    'fp8': 'kernels/fp8.cu',
}
# Kernels whose hot loop must be found (--check): a mangled-name pattern and
# a source function the loop must contain.
HOT = [
    ('gather', r'ibp_gather_kernel', 'ibp_d_deposit'),
    ('bag', r'ibp_bag_kernel', 'ibp_d_deposit'),
    ('exp', r'expk_decode', 'expk_decode'),
    ('fp8', r'fp8k_decode', 'fp8_to_f32'),
]

# SASS opcode (before the first '.') -> pipe class (docs/GPU.md "SASS census").
PIPES = [
    ('alu', 'IADD3 LOP3 SHF SHL SHR ISETP SEL PRMT LEA IABS IMNMX BMSK FSEL FSETP PLOP3 P2R R2P VIADD VIMNMX '
            'ICMP IADD BREV FLO POPC SGXT VABSDIFF VABSDIFF4 I2IP F2FP'),
    ('fma', 'FFMA FADD FMUL IMAD IMUL HFMA2 HADD2 HMUL2 FMNMX DFMA DADD DMUL I2F F2I F2F FRND HMNMX2 FCHK'),
    ('xu', 'MUFU'),
    ('lsu', 'LD LDG LDS LDL LDC LDSM ST STG STS STL ATOM ATOMS ATOMG RED LDGSTS LDGDEPBAR SHFL MATCH CCTL '
            'MEMBAR ERRBAR FENCE QSPC'),
    ('branch', 'BRA BRX JMP JMX CALL RET EXIT BSSY BSYNC WARPSYNC BREAK KILL NANOSLEEP YIELD BMOV BPT'),
    ('sync', 'BAR DEPBAR ARRIVES SYNCS REDUX VOTE VOTEU WARPGROUP ELECT'),
    ('move', 'MOV S2R CS2R S2UR R2UR NOP'),
]
PIPE_OF = {op: cls for cls, ops in PIPES for op in ops.split()}


def pipe(op):
    base = op.split('.')[0]
    if base in PIPE_OF:
        return PIPE_OF[base]
    if base.startswith('U'):
        return 'uniform'
    return 'other'


def skip(why):
    print('SKIPPED: ' + why)
    sys.exit(77)


def find_nvcc():
    for c in (os.environ.get('NVCC'), shutil.which('nvcc'), '/usr/local/cuda/bin/nvcc'):
        if c and os.access(c, os.X_OK):
            return c
    return None


def find_nvdisasm(nvcc):
    cands = [shutil.which('nvdisasm'), os.path.join(os.path.dirname(nvcc), 'nvdisasm')]
    cache = os.path.join(os.path.expanduser(os.environ.get('IBP_CACHE', '~/.cache/ibp')), 'nvtools')
    cands += glob.glob(os.path.join(cache, '**', 'bin', 'nvdisasm'), recursive=True)
    for c in cands:
        if c and os.path.isfile(c):
            os.chmod(c, 0o755)
            return c
    # the registry's package: a wheel holding the binary (no install needed)
    os.makedirs(cache, exist_ok=True)
    print('sass-report: fetching nvidia-cuda-nvdisasm into %s ...' % cache, file=sys.stderr)
    r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '-q', '-d', cache,
                        'nvidia-cuda-nvdisasm'], capture_output=True, text=True)
    for w in glob.glob(os.path.join(cache, 'nvidia_cuda_nvdisasm-*.whl')):
        with zipfile.ZipFile(w) as z:
            z.extractall(cache)
    for c in glob.glob(os.path.join(cache, '**', 'bin', 'nvdisasm'), recursive=True):
        os.chmod(c, 0o755)
        return c
    skip('no nvdisasm on PATH or beside nvcc, and `pip download nvidia-cuda-nvdisasm` failed: ' +
         (r.stderr.strip().splitlines() or ['?'])[-1])


def compile_cubin(nvcc, src, arch, out):
    cmd = [nvcc, '-O3', '-lineinfo', '-DIBP_BUILDING', '-DIBP_HAVE_CUDA=1', '-D_GNU_SOURCE',
           '-arch=sm_%s' % arch, '-cubin', '--resource-usage', '--expt-relaxed-constexpr',
           '-I' + os.path.join(REPO, 'include'), '-I' + os.path.join(REPO, 'src'),
           '-I' + os.path.join(REPO, 'kernels'), os.path.join(REPO, src), '-o', out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit('sass-report: nvcc failed on %s:\n%s' % (src, r.stderr))
    regs, cur = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r'Function properties for (\S+)', line) or re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r'Used (\d+) registers', line)
        if m and cur:
            regs[cur] = int(m.group(1))
    return regs


# Source functions: the innermost file:line of an instruction names the
# function whose body holds that line (definitions found by a pattern).
_DEF = re.compile(r'^(?:template\s*<[^>]*>\s*)?(?:static\s+|__device__\s+|__global__\s+|__forceinline__\s+|inline\s+|'
                  r'IBP_D\w*\s+|extern\s+"C"\s+|__noinline__\s+)*[\w:<>,\s\*&]*?\b(\w+)\s*\([^;]*$')
_funcs_cache = {}


_STRUCT = re.compile(r'^(?:template\s*<[^>]*>\s*)?(?:struct|class)\s+(\w+)')


def funcs_of(path):
    """[(first line, function)]: definitions at column 0, and members one
    indentation deep in a struct or class at column 0 (Struct::member)."""
    if path in _funcs_cache:
        return _funcs_cache[path]
    starts, cur = [], None
    try:
        lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    except OSError:
        lines = []
    for i, l in enumerate(lines):
        if not l.strip():
            continue
        m = _STRUCT.match(l)
        if m and not l.rstrip().endswith(';'):
            cur = m.group(1)
            starts.append((i + 1, cur))
            continue
        if l.startswith('};'):
            cur = None
            continue
        body = None
        if not l[:1].isspace():
            body, cur_name = l, None
        elif cur and (l.startswith('\t') and not l.startswith('\t\t') or l.startswith('    ') and not l.startswith('     ')):
            body, cur_name = l.strip(), cur
        if body is None or body.startswith(('#', '/', '*', '}', '{')):
            continue
        m = _DEF.match(re.sub(r'__launch_bounds__\s*\([^)]*\)', '', body))
        if m and m.group(1) not in ('if', 'for', 'while', 'switch', 'return', 'sizeof'):
            if cur_name is None:
                cur = None
            starts.append((i + 1, (cur_name + '::' if cur_name else '') + m.group(1)))
    _funcs_cache[path] = starts
    return starts


def func_at(path, line):
    best = '?'
    for s, name in funcs_of(path):
        if s <= line:
            best = name
        else:
            break
    return best


_INS = re.compile(r'^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;')
_LOC = re.compile(r'//## File "([^"]+)", line (\d+)')


def disassemble(nvdisasm, cubin):
    """{function: [(addr, opcode, target label or None, 'file:line', src function)]}, {function: {label: addr}}"""
    r = subprocess.run([nvdisasm, '-gi', '-c', cubin], capture_output=True, text=True)
    if r.returncode:
        sys.exit('sass-report: nvdisasm failed on %s: %s' % (cubin, r.stderr))
    funcs, labels, cur, loc, pending, in_run = {}, {}, None, ('?', 0), [], False
    for line in r.stdout.splitlines():
        m = re.match(r'^\.text\.(\S+):', line)
        if m:
            cur = m.group(1)
            funcs[cur], labels[cur] = [], {}
            continue
        if cur is None:
            continue
        m = re.match(r'^(\.L_x_\d+):', line)
        if m:
            pending.append(m.group(1))
            continue
        m = _LOC.search(line)
        if m:
            if not in_run:  # a run of frames, innermost first
                loc = (m.group(1), int(m.group(2)))
            in_run = True
            continue
        in_run = False
        m = _INS.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        toks = m.group(2).split()
        if toks and toks[0].startswith('@'):
            toks = toks[1:]
        if not toks:
            continue
        op = toks[0]
        tgt = re.search(r'`\((\.L_x_\d+)\)', m.group(2))
        for p in pending:
            labels[cur][p] = addr
        pending = []
        funcs[cur].append((addr, op, tgt.group(1) if tgt else None, '%s:%d' % (os.path.relpath(loc[0], REPO), loc[1]),
                           func_at(loc[0], loc[1])))
    return funcs, labels


def loops_of(ins, labels):
    """Backward branches: (start addr, branch addr) ranges."""
    out = []
    for addr, op, tgt, _, _ in ins:
        if tgt and op.split('.')[0] == 'BRA' and tgt in labels and labels[tgt] <= addr:
            out.append((labels[tgt], addr))
    return sorted(set(out))


def census(ins, lo=None, hi=None):
    by_pipe, by_func = {}, {}
    n = 0
    for addr, op, _, _, fn in ins:
        if lo is not None and not (lo <= addr <= hi):
            continue
        n += 1
        p = pipe(op)
        by_pipe[p] = by_pipe.get(p, 0) + 1
        by_func[fn] = by_func.get(fn, 0) + 1
    return n, by_pipe, by_func


def demangle(names):
    try:
        r = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True)
        return dict(zip(names, r.stdout.split('\n')))
    except OSError:
        return {n: n for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--arch', default='90')
    ap.add_argument('--kernels', default='gather,bag,exp,fp8')
    ap.add_argument('--json')
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--quiet', action='store_true')
    a = ap.parse_args()
    nvcc = find_nvcc()
    if not nvcc:
        skip('nvcc not found (set NVCC or install the CUDA toolkit)')
    nvdisasm = find_nvdisasm(nvcc)
    report, missing = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch.split(','):
            for k in a.kernels.split(','):
                if k not in SOURCES:
                    sys.exit('sass-report: unknown kernel set %s (%s)' % (k, ', '.join(SOURCES)))
                cubin = os.path.join(tmp, '%s_%s.cubin' % (k, arch))
                print('sass-report: sm_%s %s ...' % (arch, SOURCES[k]), file=sys.stderr)
                regs = compile_cubin(nvcc, SOURCES[k], arch, cubin)
                funcs, labels = disassemble(nvdisasm, cubin)
                names = demangle(list(funcs))
                for f, ins in funcs.items():
                    n, bp, bf = census(ins)
                    loops = []
                    ranges = loops_of(ins, labels[f])
                    for lo, hi in ranges:
                        ln, lp, lf = census(ins, lo, hi)
                        inner = not any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in ranges)
                        loops.append({'start': lo, 'end': hi, 'instructions': ln, 'innermost': inner, 'pipes': lp,
                                      'functions': dict(sorted(lf.items(), key=lambda x: -x[1])[:8])})
                    report.append({'arch': arch, 'set': k, 'kernel': f, 'name': names.get(f, f),
                                   'registers': regs.get(f), 'instructions': n, 'pipes': bp,
                                   'loops': loops})
                for kset, pat, hotfn in HOT:
                    if kset != k:
                        continue
                    ks = [r for r in report if r['arch'] == arch and r['set'] == k and re.search(pat, r['kernel'])]
                    if not ks:
                        missing.append('sm_%s %s: no kernel matching %s' % (arch, k, pat))
                    for r in ks:
                        ok = any(hotfn is None or hotfn in l['functions'] for l in r['loops'])
                        if not ok:
                            missing.append('sm_%s %s: no loop%s in %s' % (
                                arch, k, ' holding ' + hotfn if hotfn else '', r['name']))
    if not a.quiet:
        for r in report:
            pipes = ' '.join('%s %d' % kv for kv in sorted(r['pipes'].items(), key=lambda x: -x[1]))
            print('sm_%s %-6s %s\n  registers %s, %d SASS instructions (%s), %d loops' % (
                r['arch'], r['set'], r['name'], r['registers'], r['instructions'], pipes, len(r['loops'])))
            outer = sorted(r['loops'], key=lambda x: -x['instructions'])[:1]
            inner = sorted([l for l in r['loops'] if l['innermost']], key=lambda x: -x['instructions'])[:4]
            for l in outer + inner:
                lp = ' '.join('%s %d' % kv for kv in sorted(l['pipes'].items(), key=lambda x: -x[1]))
                lf = ', '.join('%s %d' % kv for kv in list(l['functions'].items())[:5])
                print('  %s %05x-%05x: %d instructions (%s); from %s' % (
                    'inner loop' if l['innermost'] else 'outer loop', l['start'], l['end'], l['instructions'], lp, lf))
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(report, f, indent=1)
    if missing:
        print('sass-report: hot loops not found:\n  ' + '\n  '.join(missing))
        return 1 if a.check else 0
    print('sass-report: %d kernels, every hot loop found' % len(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
