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
                            [--model [--rows-tool PATH] [--data FILE[:cols],...]]
       tools/sass-report.py --compare MODEL.json GPU_GATHER.json

--model adds the cost model of the gather decode (tools/gpu_model.py,
docs/GPU.md "SASS cost model"): per data set the instructions per decoded
byte, the binding pipe, the predicted decode on H100/H200 against PCIe Gen4
and Gen5, registers, occupancy, rows and bytes in flight. --compare prints
such a prediction beside bench/gpu_gather's measurement (tools/gpu-check.sh).
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
# the source function(s) the loop must contain (one of them).
HOT = [
    ('gather', r'ibp_gather_kernel', ('ibp_d_deposit', 'ibp_d_deposit32')),
    ('bag', r'ibp_bag_kernel', ('ibp_d_deposit', 'ibp_d_deposit32')),
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
_LOC = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')


def _rel(path):
    return os.path.relpath(path, REPO)


def disassemble(nvdisasm, cubin, text=None):
    """{function: [(addr, opcode, target label or None, 'file:line', src function, chain, memory
    operand or None)]}, {function: {label: addr}}. chain: the inlined frames, innermost first,
    as (repository-relative file, line); memory operand: the last [...] of the operands."""
    if text is None:
        r = subprocess.run([nvdisasm, '-gi', '-c', cubin], capture_output=True, text=True)
        if r.returncode:
            sys.exit('sass-report: nvdisasm failed on %s: %s' % (cubin, r.stderr))
        text = r.stdout
    funcs, labels, cur, chain, pending, in_run = {}, {}, None, (), [], False
    for line in text.splitlines():
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
                chain = [(_rel(m.group(1)), int(m.group(2)))]
            if m.group(3):
                chain.append((_rel(m.group(3)), int(m.group(4))))
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
        ch = tuple(chain) if chain else (('?', 0),)
        loc = ch[0]
        mem = re.findall(r'\[([^\]]*)\]', m.group(2))
        funcs[cur].append((addr, op, tgt.group(1) if tgt else None, '%s:%d' % loc,
                           func_at(os.path.join(REPO, loc[0]), loc[1]), ch, mem[-1] if mem else None))
    return funcs, labels


def loops_of(ins, labels):
    """Backward branches: (start addr, branch addr) ranges."""
    out = []
    for addr, op, tgt, _, _, _, _ in ins:
        if tgt and op.split('.')[0] == 'BRA' and tgt in labels and labels[tgt] <= addr:
            out.append((labels[tgt], addr))
    return sorted(set(out))


def census(ins, lo=None, hi=None):
    by_pipe, by_func = {}, {}
    n = 0
    for addr, op, _, _, fn, _, _ in ins:
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


MODEL_DATA = ['datasets/sample/minilm_kv_bf16.npy', 'datasets/sample/minilm_tok_emb_f32.npy:100',
              'datasets/sample/minilm_tok_emb_f32.npy', 'datasets/sample/debian_bow_f32.npy']


BAG_DATA = ['datasets/sample/minilm_tok_emb_f32.npy', 'datasets/sample/debian_bow_f32.npy']
CODEC_DATA = ['datasets/sample/minilm_kv_bf16.npy', 'datasets/sample/minilm_tok_emb_f32.npy']
CODEC_CHUNK = 65536  # elements per chunk (block) of the exponent and FP8 batch calls
# per family: the kernel (demangled name prefix) and the loops the model
# must find in its SASS, or it fails (it would stop weighing the hot path)
KERNEL_OF = {'gather': None, 'bag': None, 'exp': 'expk_decode(', 'fp8': 'fp8k_decode('}
HOT_SITES = {'gather': ('tile_loop', 'dep1_loop'), 'bag': ('tile_loop', 'dep1_loop', 'acc_loop'),
             'exp': ('exp_round',), 'fp8': ('fp8_blocks',)}


def run_model(a, kept):
    """The cost model (tools/gpu_model.py) on each data set: the gather
    kernels on --data, the bag kernel on the float32 tables of BAG_DATA
    (bags of gpu_model.BAG_IDS rows); prints the table of docs/GPU.md "SASS
    cost model"; None when it cannot weigh a kernel (a site or the hot loop
    not found)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_model as gm
    if not os.access(a.rows_tool, os.X_OK):
        skip('no %s (build the project first, or pass --rows-tool)' % a.rows_tool)
    try:
        sites = {f: gm.resolve_sites(REPO, func_at, f) for f in kept}
        gm.set_reader_lines(REPO)
        consts = gm.gather_consts(REPO)
        bwarps = gm.bag_warps(REPO)
    except gm.ModelError as e:
        print('sass-report: model: %s' % e)
        return None
    jobs = [('gather', spec) for spec in a.data.split(',')]
    if 'bag' in kept:
        jobs += [('bag', spec) for spec in BAG_DATA]
    for fam in ('exp', 'fp8'):
        if fam in kept:
            jobs += [(fam, spec) for spec in CODEC_DATA]
    out = []
    for fam, spec in jobs:
        funcs, labels, names, regs = kept[fam]
        path, _, cols = spec.partition(':')
        full = path if os.path.isabs(path) else os.path.join(REPO, path)
        cmd = [a.rows_tool, full] + (['--cols', cols] if cols else [])
        cmd += {'bag': ['--nw', '1'], 'exp': ['--exp', str(CODEC_CHUNK)], 'fp8': ['--fp8', str(CODEC_CHUNK)]}.get(fam, [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit('sass-report: %s failed:\n%s' % (' '.join(cmd), r.stderr))
        st = json.loads(r.stdout)
        if fam == 'gather':
            want = 'ibp_gather_kernel<%du, %d>' % (st['chunk'], st['group_warps'])
        elif fam == 'bag':
            want = 'ibp_bag_kernel<%du>' % st['chunk']
        else:
            want = KERNEL_OF[fam]
        fn = next((f for f in funcs if names.get(f, f).startswith(('void ' + want + '(', want))), None)
        if fn is None:
            print('sass-report: model: no kernel %s' % want)
            return None
        ins = [{'addr': x[0], 'op': x[1], 'target': x[2], 'chain': x[5], 'mem': x[6]} for x in funcs[fn]]
        extra, walk_counts, nw = None, st.get('walk_counts', {}), st.get('group_warps', 1)
        if fam == 'gather':
            geo = gm.geometry(st['longest'], regs.get(fn, 0), consts)
        elif fam == 'bag':
            dim = st['row_bytes'] // st['elem_bytes']
            geo = gm.bag_geometry(st['row_bytes'], dim, regs.get(fn, 0), bwarps)
            extra = {'bags': st['rows'] / float(gm.BAG_IDS), 'dim_iter': (dim + 31) // 32,
                     'half': 0 if st['elem_bytes'] == 4 else 1}
        elif fam == 'exp':
            geo = gm.codec_geometry(regs.get(fn, 0), 256, 32)
            nw, eb = 8, st['elem_bytes']
            extra = {'nplanes': 3 if eb != 2 or 'bf16' in spec else 6, 'f32': 1 if eb == 4 else 0, 'f16': 0}
            st['rows'], st['row_bytes'] = st['counts']['groups'], st['elements'] * eb / float(st['counts']['groups'])
        else:
            T, B = st['threads'], st['block']
            geo = gm.codec_geometry(regs.get(fn, 0), T, 4 * B)
            nw = T // 32
            extra = {'itB': gm.strided_warps(B, T, nw), 'itH': gm.strided_warps(B // 2, T, nw),
                     'log2b': B.bit_length() - 1, 'hadamard': st['hadamard']}
            st['rows'], st['row_bytes'] = st['counts']['blocks'], st['elements'] * st['elem_bytes'] / float(
                st['counts']['blocks'])
        w, loops = gm.weigh(ins, labels[fn], sites[fam], st['counts'], walk_counts, nw, geo['warps'],
                            st['rows'], extra, st.get('chunks', 0))
        found = {lp['site']['name'] for lp in loops if lp['site']}
        lost = [h for h in HOT_SITES[fam] if h not in found]
        if lost:
            print('sass-report: model: %s: loop %s not found in the SASS' % (want, ', '.join(lost)))
            return None
        p = gm.predict(ins, w, st)
        if a.by_line:
            per = {}
            for x, (c, s) in zip(ins, w):
                if c:
                    fr = x['chain'][0] if x['chain'] else ('?', 0)
                    k = (s if isinstance(s, str) else (s['name'] if s else '-'), '%s:%s' % fr)
                    per[k] = per.get(k, 0.0) + c / float(st['rows'])
            print('  %s %s: instructions per row by site and source line (top %d):' % (fam, spec, a.by_line))
            for (sn, ln), c in sorted(per.items(), key=lambda kv: -kv[1])[:a.by_line]:
                print('    %8.1f  %-14s %s' % (c, sn, ln))
        executed = sum(1 for c, _ in w if c)
        p.update({'data': spec, 'kernel': want.rstrip('('), 'family': fam, 'registers': regs.get(fn), 'geometry': geo,
                  'loops': [{'start': lp['start'], 'end': lp['end'], 'site': lp['site']['name'] if lp['site'] else None,
                             'unroll': lp['unroll'], 'versions': lp['versions']} for lp in loops],
                  'row_bytes': st['row_bytes'], 'rows': st['rows'], 'chunk': st.get('chunk'),
                  'executed_static': executed, 'static': len(w),
                  'unmodeled_loops': ['%05x-%05x' % (lp['start'], lp['end']) for lp in loops if not lp['site']]})
        comp = st['encoded_bytes'] / float(st['rows'])
        if fam in ('exp', 'fp8'):
            geo['rows_in_flight'] = 0
        p['bytes_in_flight'] = geo['rows_in_flight'] * comp
        p['bdp'] = gm.PCIE[-1][1] * 1e9 * gm.PCIE_LATENCY_US * 1e-6
        out.append(p)
    print()
    print('SASS cost model of the decode kernels (sm_90; docs/GPU.md "SASS cost model"):')
    _, _, gnames, gregs = kept['gather']
    print('  registers: %s' % ', '.join('%s %s' % (gnames.get(f, f).split('(')[0].replace('void ', ''), r)
                                        for f, r in sorted(gregs.items()) if 'gather_kernel' in f))
    for p in out:
        name = os.path.basename(p['data'])
        g = p['gpus'][0]
        fam = p['family']
        unit = {'gather': 'row', 'bag': 'row', 'exp': 'group', 'fp8': 'block'}[fam]
        pipes = ' '.join('%s %.0f' % kv for kv in sorted(p['by_pipe'].items(), key=lambda x: -x[1]))
        cyc = ' '.join('%s %.0f' % kv for kv in sorted(p['cycles_per_row'].items(), key=lambda x: -x[1]))
        if fam in ('gather', 'bag'):
            what = '%d B rows (C = %d), ratio %.2f, %d rows%s' % (
                p['row_bytes'], p['chunk'], p['ratio'], p['rows'],
                ', bags of %d' % gm.BAG_IDS if fam == 'bag' else '')
        else:
            what = 'chunks of %d elements, ratio %.2f, %d %ss of %.0f decoded bytes' % (
                p['chunk'], p['ratio'], p['rows'], unit, p['row_bytes'])
        print('  %s %s: %s, %s' % (fam, name, p['kernel'], what))
        print('    %.0f instructions per %s, %.2f per decoded byte (%s); SM cycles per %s: %s; binds: %s' % (
            p['instructions_per_row'], unit, p['instructions_per_byte'], pipes, unit, cyc, p['binding']))
        print('    predicted decode: %s' % ', '.join('%s %.0f-%.0f GB/s' % (x['gpu'], x['low'], x['decoded_GBps'])
                                                 for x in p['gpus']))
        geo = p['geometry']
        if fam in ('gather', 'bag'):
            feeds = ', '.join('%s %.0f GB/s -> %.0f decoded (decode x%.1f)' % (
                f['link'], f['GBps'], f['decoded_GBps'], g['decoded_GBps'] / f['decoded_GBps']) for f in p['pcie'])
            print('    PCIe feed: %s' % feeds)
            print('    %d registers, %d warps/SM, %d rows in flight per GPU, %.0f KB in flight (x%.1f of %.0f KB at '
                  '%s)' % (p['registers'], geo['warps_per_sm'], geo['rows_in_flight'], p['bytes_in_flight'] / 1e3,
                           p['bytes_in_flight'] / p['bdp'], p['bdp'] / 1e3, gm.PCIE[-1][0]))
        else:
            print('    %d registers, %d warps/SM (device memory to device memory: no PCIe term)' % (
                p['registers'], geo['warps_per_sm']))
        top = sorted(p['by_site'].items(), key=lambda x: -x[1])[:8]
        print('    by site: %s' % ', '.join('%s %.0f' % kv for kv in top))
        print('    accounted: %.1f%% of executed instructions (%d of %d SASS instructions on executed paths)%s' % (
            100 * p['accounted'], p['executed_static'], p['static'],
            '; loops without a site: %d' % len(p['unmodeled_loops']) if p['unmodeled_loops'] else ''))
    low = ['%s %.1f%%' % (os.path.basename(p['data']), 100 * p['accounted']) for p in out if p['accounted'] < 0.95]
    if low:
        print('sass-report: model: under 95%% of the executed instructions accounted for: %s' % ', '.join(low))
        return None
    return out


def compare(model_json, gather_json):
    """The model's predicted decode beside bench/gpu_gather's measurement on
    the same data sets (tools/gpu-check.sh): the store in device memory
    (ibp_device: the decode alone) and in pinned host memory (ibp_pinned:
    through PCIe, against the predicted min(decode, PCIe feed))."""
    model = json.load(open(model_json))['model']
    meas = json.load(open(gather_json))
    dev = meas.get('device', '?')
    gpu = 'H200' if 'H200' in dev else 'H100 SXM'
    print('cost model (%s figures) against the measured gather on %s, PCIe H2D %.1f GB/s:' % (
        gpu, dev, meas.get('pcie_h2d_gbps', 0)))
    print('%-28s %7s %15s %10s %8s %15s %10s %8s' % ('data', 'row_B', 'decode pred.', 'ibp_dev', 'meas/pred',
                                                   'via PCIe pred.', 'ibp_pin', 'meas/pred'))
    n = 0
    for p in model:
        name = os.path.basename(p['data'])
        r = next((r for r in meas.get('results', []) if r['data'] == name and r['row_bytes'] == p['row_bytes']), None)
        if r is None:
            continue
        g = next(x for x in p['gpus'] if x['gpu'] == gpu)
        link = meas.get('pcie_h2d_gbps', 0) * p['ratio']
        hi, lo = min(g['decoded_GBps'], link), min(g['low'], link)
        print('%-28s %7d %7.0f-%-7.0f %10.1f %8.2f %7.0f-%-7.0f %10.1f %8.2f' % (
            name, p['row_bytes'], g['low'], g['decoded_GBps'], r['ibp_device'], r['ibp_device'] / g['decoded_GBps'],
            lo, hi, r['ibp_pinned'], r['ibp_pinned'] / hi if hi else 0))
        n += 1
    if not n:
        print('  no data set in both files')
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == '--compare':
        return compare(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--arch', default='90')
    ap.add_argument('--kernels', default='gather,bag,exp,fp8')
    ap.add_argument('--json')
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--quiet', action='store_true')
    ap.add_argument('--model', action='store_true',
                    help='the cost model of the gather decode on the data sets (sm_90)')
    ap.add_argument('--rows-tool', default=os.environ.get('IBP_MODEL_ROWS', os.path.join(REPO, 'build', 'bin',
                                                                                          'gpu_model_rows')),
                    help='bench/gpu_model_rows as built (path counts of real rows)')
    ap.add_argument('--data', default=','.join(MODEL_DATA),
                    help='FILE.npy[:columns],... (default: the committed sample)')
    ap.add_argument('--by-line', type=int, default=0, metavar='N',
                    help='with --model: the N source lines with most instructions per row, by site')
    a = ap.parse_args()
    if a.model and '90' not in a.arch.split(','):
        a.arch = '90,' + a.arch
    nvcc = find_nvcc()
    if not nvcc:
        skip('nvcc not found (set NVCC or install the CUDA toolkit)')
    nvdisasm = find_nvdisasm(nvcc)
    report, missing, kept = [], [], {}
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
                if arch == '90':
                    kept[k] = (funcs, labels, names, regs)
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
                        fns = hotfn if isinstance(hotfn, tuple) else (hotfn,)
                        ok = any(f in l['functions'] for l in r['loops'] for f in fns)
                        if not ok:
                            missing.append('sm_%s %s: no loop holding %s in %s' % (
                                arch, k, ' or '.join(fns), r['name']))
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
    model = None
    if a.model:
        if 'gather' not in a.kernels.split(','):
            sys.exit('sass-report: --model needs the gather kernels (--kernels gather,...)')
        model = run_model(a, kept)
        if model is None:
            return 1
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'kernels': report, 'model': model} if model else report, f, indent=1)
    if missing:
        print('sass-report: hot loops not found:\n  ' + '\n  '.join(missing))
        return 1 if a.check else 0
    print('sass-report: %d kernels, every hot loop found' % len(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
