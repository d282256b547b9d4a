#!/usr/bin/env python3
"""Checks of tools/coll_model.py (issue 38), the collectives' cost model:
known values worked out by hand from the formulas of its docstring, the
limits the model must reach, and its command line (--validate passes on
lines made from the model itself and fails on a time 30% off).

Usage: python3 tests/coll_model_check.py   (from the repository root, or
any directory: the tool is found next to this file). Exit 0: every check
passed; 1: the failed checks are printed; 77: Python older than 3.7.
"""
import copy
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(HERE), 'tools', 'coll_model.py')
MiB = 1 << 20

bad = []
count = [0]


def check(cond, what):
    count[0] += 1
    if not cond:
        bad.append(what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


@functools.lru_cache(maxsize=None)
def load():
    spec = importlib.util.spec_from_file_location('coll_model', TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs(**kw):
    """Round numbers, so the hand computations below stay readable."""
    d = {'link': {'alpha_s': 20e-6, 'beta_Bps': 1e8, 'rate_Bps': None, 'source': 'check'},
         'codecs': {'exp': {'ratio': 1.5, 'enc_Bps': 1e9, 'dec_Bps': 5e8},
                    'fp8': {'ratio': 2.0, 'enc_Bps': 2e9, 'dec_Bps': 2e9},
                    'dynamiq': {'ratio': 3.2, 'enc_Bps': 4e8, 'hop_Bps': 2.5e8, 'dec_Bps': 1e9, 'stats_Bps': 4e9},
                    'lsq': {'ratio': 4.0, 'enc_Bps': 1e9, 'dec_Bps': 2e9},
                    'pts': {'ratio': 12.0, 'enc_Bps': 1e9, 'dec_Bps': 2e9}},
         'reduce_Bps': 1e9, 'dtype': 'bf16', 'threads': 1, 'transport': 'mpi'}
    load()._merge(d, kw)  # the tool's own merge of --inputs files
    return d


def run(args):
    return subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True, timeout=60)


def known_values(cm):
    M = cm.Model(inputs())
    link = cm.Link(20e-6, 1e8)
    size = 64 * MiB

    # ring AllGather native at N=2: one step, alpha + (size/2)/beta
    t = M.native('allgather', 2, size, link).time
    check(close(t, 20e-6 + (size / 2) / 1e8), 'AllGather native N=2: %r != alpha + (size/2)/beta' % t)

    # native N=8: 7 steps of alpha + (size/8)/beta (no codec, so pieces change nothing)
    t = M.native('allgather', 8, size, link).time
    check(close(t, 7 * (20e-6 + (size / 8) / 1e8)), 'AllGather native N=8: %r' % t)

    # an infinitely fast codec of ratio r divides the bandwidth term by r (+ 32 B a piece):
    # 16 Mi elements of bf16 in 61440-byte pieces (30720 elements) = 547 pieces
    inf = inputs(codecs={'exp': {'ratio': 2.0, 'enc_Bps': 1e300, 'dec_Bps': 1e300}})
    Mi = cm.Model(inf)
    pr = Mi.libibp('allgather', 'exp', 2, size, link)
    want = 20e-6 + ((size / 2) / 2.0 + 32 * 547) / 1e8
    check(close(pr.time, want), 'AllGather infinite codec ratio 2: %r != %r' % (pr.time, want))
    check('547 pieces' in pr.algo, 'AllGather 64 MiB at N=2: 547 pieces expected, got %s' % pr.algo)
    # with a measured ratio (headers included) the wire is m / ratio
    pr = Mi.libibp('allgather', 'exp', 2, size, link, rho=2.5)
    check(close(pr.time, 20e-6 + (size / 2) / 2.5 / 1e8), 'AllGather measured ratio: %r' % pr.time)

    # ReduceScatter, whole chunks (no pieces): N-1 steps of encode + message + decode + add
    Mb = cm.Model(inputs(piece_bytes=0))
    m = size / 4
    e, d, r = m / 1e9, m / 5e8, m / 1e9
    t = Mb.libibp('reducescatter', 'exp', 4, size, link).time
    want = 3 * (e + 20e-6 + (m / 1.5 + 32) / 1e8 + d + r)
    check(close(t, want), 'ReduceScatter whole chunks N=4: %r != %r' % (t, want))
    # pipelined, one core, free link: the codec work adds up, N-1 times decode+add+encode
    M1 = cm.Model(inputs(cores_per_rank=1))
    t = M1.libibp('reducescatter', 'exp', 4, size, cm.Link(0.0, 1e30)).time
    check(close(t, 3 * (e + d + r), 1e-6),
          'ReduceScatter pipelined, 1 core, free link: %r != %r' % (t, 3 * (e + d + r)))
    # two cores: the helper encodes while the caller decodes; bulk = max(E, (E+D)/2)
    pr = M.libibp('reducescatter', 'exp', 4, size, cm.Link(0.0, 1e30))
    P = 274  # 16 Mi elements / 4 ranks in 30720-element pieces
    bulk = max(e, (e + d + r) / 2)
    want = 3 * (bulk * (1 - 1 / P) + (e + d + r) / P)
    check('%d pieces' % P in pr.algo and close(pr.time, want, 1e-6), 'ReduceScatter 2 cores: %r != %r (%s)' % (
        pr.time, want, pr.algo))
    # native ReduceScatter still pays the plain sum
    t = M.native('reducescatter', 4, size, cm.Link(0.0, 1e30)).time
    check(close(t, 3 * r, 1e-6), 'native ReduceScatter, free link: %r != 3 x reduce' % t)
    # Open MPI 4's default ReduceScatter: reduce to rank 0 in 64 KiB segments + linear scatter
    Mo = cm.Model(inputs(mpi_library='openmpi4'))
    t = Mo.native('reducescatter', 2, size, link).time
    nseg = size // 65536
    want = nseg * (20e-6 + 65536 / 1e8) + (20e-6 + (size / 2) / 1e8)
    check(close(t, want), 'Open MPI 4 ReduceScatter N=2: %r != %r' % (t, want))
    t = Mo.native('reducescatter', 8, size, cm.Link(0.0, 1e30)).time
    check(close(t, (nseg + 6) * 65536 * 1e-9, 1e-6), 'Open MPI 4 ReduceScatter, free link: the sum per segment')
    check(close(Mo.native('allgather', 8, size, link).time, M.native('allgather', 8, size, link).time),
          'mpi_library openmpi4 changes ReduceScatter only')
    try:
        cm.Model(inputs(mpi_library='mpich'))
        check(False, 'mpi_library mpich accepted')
    except cm.InputError:
        pass

    # FP8's AllGather: the owner decodes its own encoded chunk too (one core, free link: E0 + D)
    m2 = size / 2
    t = M1.libibp('allgather', 'fp8', 2, size, cm.Link(0.0, 1e30)).time
    check(close(t, m2 / 2e9 + 2 * m2 / 2e9, 1e-6), 'FP8 AllGather N=2, 1 core, free link: %r' % t)
    t = M1.libibp('allgather', 'exp', 2, size, cm.Link(0.0, 1e30)).time
    check(close(t, m2 / 1e9 + m2 / 5e8, 1e-6), 'exp AllGather N=2, 1 core, free link: %r' % t)

    # a measured ratio stands for the codec's: the line's logical/wire of a ratio-r model
    # predicts that model's time (headers and DynamiQ's statistics included)
    for codec, r2 in (('exp', 2.2), ('fp8', 3.0), ('lsq', 6.0), ('dynamiq', 5.0), ('pts', 20.0)):
        M2 = cm.Model(inputs(codecs={codec: {'ratio': r2}}))
        for op in cm.TAKES[codec]:
            for n in (2, 4):
                p2 = M2.libibp(op, codec, n, size, link)
                p1 = M.libibp(op, codec, n, size, link, rho=p2.logical / p2.wire)
                check(close(p1.time, p2.time, 1e-6), '%s %s N=%d: measured ratio %.4f gives %r, not %r' % (
                    op, codec, n, p2.logical / p2.wire, p1.time, p2.time))

    # AllReduce = ReduceScatter + AllGather on the same chunks, 2(N-1) steps
    ar = M.libibp('allreduce', 'fp8', 8, size, link).time
    rs = M.reducescatter(M.codec('fp8'), 8, size, link, m_elems=size // 2 // 8).time
    ag = M.allgather(M.codec('fp8'), 8, size, link, m_elems=size // 2 // 8).time
    check(close(ar, rs + ag), 'AllReduce != RS + AG: %r %r' % (ar, rs + ag))

    # speed-up -> ratio as beta -> 0 (AllGather); not so on a fast link
    slow = cm.Link(20e-6, 1e3)
    sp = M.native('allgather', 8, size, slow).time / M.libibp('allgather', 'exp', 8, size, slow).time
    check(abs(sp / 1.5 - 1) < 0.01, 'AllGather speed-up on a 1 kB/s link %.4f, ratio 1.5' % sp)
    fast = cm.Link(20e-6, 1e10)
    sp = M.native('allgather', 8, size, fast).time / M.libibp('allgather', 'exp', 8, size, fast).time
    check(sp < 1.0, 'exp AllGather at 10 GB/s with a 0.5 GB/s decoder should lose: speed-up %.3f' % sp)

    # compression loses on a very fast link with a slow codec, every op; wins on a slow link
    slowc = cm.Model(inputs(codecs={'exp': {'ratio': 1.5, 'enc_Bps': 1e8, 'dec_Bps': 1e8}}))
    for op in cm.OPS:
        for rate, loses in ((400, True), (0.1, False)):
            link_r = slowc.link_at(rate)
            sp = slowc.native(op, 8, size, link_r).time / slowc.libibp(op, 'exp', 8, size, link_r).time
            check((sp < 1) == loses, '%s exp at %g Gbit/s, 100 MB/s codec: speed-up %.3f' % (op, rate, sp))

    # PTS: every rank's whole stream goes round the ring, then N decodes and adds
    n, s = 4, 16 * MiB
    t = M.libibp('allreduce', 'pts', n, s, link).time
    want = s / 1e9 + s / 1e9 + 3 * (20e-6 + (s / 12.0 + 32) / 1e8) + 4 * s / 2e9
    check(close(t, want), 'PTS N=4: %r != %r' % (t, want))
    # four ranks on two cores (0.5 a rank, all computing at once): the serial codec work takes twice as long
    Ms = cm.Model(inputs(cores_per_rank=0.5))
    t = Ms.libibp('allreduce', 'pts', n, s, link).time
    want = 2 * (s / 1e9 + s / 1e9 + 4 * s / 2e9) + 3 * (20e-6 + (s / 12.0 + 32) / 1e8)
    check(close(t, want), 'PTS N=4, 0.5 cores a rank: %r != %r' % (t, want))
    check(close(cm.Model(inputs(cores_per_rank=4)).libibp('allreduce', 'pts', n, s, link).time,
                M.libibp('allreduce', 'pts', n, s, link).time), 'PTS: more than a core a rank changes nothing')

    # the rings' whole chunks (8 ranks, 4 MiB in process: 512 KiB chunks, under one 1 MiB piece) run
    # their codec work and sums serially too: a quarter of a core a rank stretches them 4x, 1 or 2 cores not
    n, s = 8, 4 * MiB
    m = s / n
    L = 20e-6 + (m / 1.5 + 32) / 1e8
    for cores, f in ((0.25, 4), (1, 1), (2, 1)):
        Mc = cm.Model(inputs(transport='inproc', cores_per_rank=cores))
        pr = Mc.libibp('reducescatter', 'exp', n, s, link)
        want = 7 * (f * m / 1e9 + L + f * (m / 5e8 + m / 1e9))
        check('whole chunks' in pr.algo and close(pr.time, want),
              'exp ReduceScatter whole chunks, %g cores a rank: %r != %r (%s)' % (cores, pr.time, want, pr.algo))
        # AllGather: the helper decodes behind the next transfer; stretched, the decode outlasts it
        pr = Mc.libibp('allgather', 'exp', n, s, link)
        d = f * m / 5e8
        want = f * m / 1e9 + L + 6 * max(L, d) + d
        check('helper decode' in pr.algo and close(pr.time, want) and (d > L) == (f == 4),
              'exp AllGather whole chunks, %g cores a rank: %r != %r (%s)' % (cores, pr.time, want, pr.algo))
        # the plain ring's sum (codec none, no natives in process)
        t = Mc.libibp('reducescatter', 'none', n, s, link).time
        want = 7 * (20e-6 + (m + 32) / 1e8 + f * m / 1e9)
        check(close(t, want), 'plain ReduceScatter whole chunks, %g cores a rank: %r != %r' % (cores, t, want))
        t = Mc.libibp('alltoall', 'lsq', n, s, link).time
        want = 7 * (f * m / 1e9 + 20e-6 + (m / 4.0 + 32) / 1e8 + f * m / 2e9)
        check(close(t, want), 'LSQ AllToAll whole blocks, %g cores a rank: %r != %r' % (cores, t, want))
    # pipelined steps are not stretched again: their work / cores is the share (8 pieces of 1 MiB, free link)
    Mc = cm.Model(inputs(transport='inproc', cores_per_rank=0.25))
    m = 64 * MiB / 8
    e, d = m / 1e9, m / 5e8 + m / 1e9
    pr = Mc.libibp('reducescatter', 'exp', 8, 64 * MiB, cm.Link(0.0, 1e30))
    want = 7 * (4 * (e + d) * (1 - 1 / 8) + (e + d) / 8)
    check('8 pieces' in pr.algo and close(pr.time, want, 1e-6),
          'exp ReduceScatter in pieces, 0.25 cores a rank: %r != %r (%s)' % (pr.time, want, pr.algo))

    # DynamiQ, whole chunks (piece_bytes 0): stats, their all-gather, plan sum, 2(N-1) hops
    n, s = 2, 16 * MiB
    cnt, J, m = s // 2, s // 2 // 256, s / 2
    L = 20e-6 + (m / 3.2 + 32) / 1e8
    want = (s / 4e9 + (20e-6 + (8 * J + 32) / 1e8) + 2 * 8 * J / 1e9
            + s / 1e9 + m / 4e8 + (L + m / 2.5e8) + m / 1e9 + (L + m / 1e9))
    t = Mb.libibp('allreduce', 'dynamiq', n, s, link).time
    check(cnt % 256 == 0 and close(t, want), 'DynamiQ whole chunks N=2: %r != %r' % (t, want))
    # half a core a rank: every term but the link's twice as long
    work = s / 4e9 + 2 * 8 * J / 1e9 + s / 1e9 + m / 4e8 + m / 2.5e8 + m / 1e9 + m / 1e9
    t = cm.Model(inputs(piece_bytes=0, cores_per_rank=0.5)).libibp('allreduce', 'dynamiq', n, s, link).time
    check(close(t, want + work), 'DynamiQ whole chunks N=2, 0.5 cores a rank: %r != %r' % (t, want + work))
    # its statistics all-gather grows with N: the model must lose at 1024 ranks whatever the rate
    for rate in (0.01, 1, 100):
        lk = M.link_at(rate)
        sp = M.native('allreduce', 1024, 64 * MiB, lk).time / M.libibp('allreduce', 'dynamiq', 1024, 64 * MiB, lk).time
        check(sp < 1, 'DynamiQ at 1024 ranks, %g Gbit/s: speed-up %.3f (the statistics dominate)' % (rate, sp))

    # a token bucket on the blocking path adds its sleep to the transfer
    lq = cm.Link(20e-6, 1e9, 1e8)
    check(close(lq.block(1e6), 20e-6 + 1e6 / 1e9 + 1e6 / 1e8) and close(lq.pipe(1e6), 1e6 / 1e8),
          'token bucket: block %r pipe %r' % (lq.block(1e6), lq.pipe(1e6)))

    # sweep link: beta = R 1e9/8 x measured beta / link rate
    Ms = cm.Model(inputs(link={'beta_Bps': 9e7, 'rate_Bps': 1e8}))
    check(close(Ms.link_at(10).beta, 10e9 / 8 * 0.9), 'sweep beta at 10 Gbit/s: %r' % Ms.link_at(10).beta)

    # busbw factors as ibp-coll-perf prints them
    check(close(cm.busf('allreduce', 8), 2 * 7 / 8) and close(cm.busf('alltoall', 8), 7 / 8)
          and close(cm.busf('allgather', 4), 3 / 4), 'busbw factors')
    rows = cm.sweep(M, ['allreduce'], ['exp'], [8], [10], size, None, True)
    r0 = rows[0]
    check(close(r0['compressed_busbw'], size / (r0['compressed_us'] * 1e-6) / 1e9 * 2 * 7 / 8),
          'AllReduce busbw: %r' % r0['compressed_busbw'])
    check(len(rows) == 2 and 'model only, not in libibp' in rows[1]['algorithm']
          and 'not in libibp' not in rows[0]['algorithm'], 'tree row labels: %r' % [r['algorithm'] for r in rows])

    # break-even by bisection: pays just below it, loses just above
    be = cm.break_even(M, 'allgather', 'exp', 8, size, None)
    ok = isinstance(be, float)
    if ok:
        below, above = M.link_at(be * 0.99), M.link_at(be * 1.01)
        ok = (M.native('allgather', 8, size, below).time > M.libibp('allgather', 'exp', 8, size, below).time
              and M.native('allgather', 8, size, above).time < M.libibp('allgather', 'exp', 8, size, above).time)
    check(ok, 'break-even of exp AllGather at N=8: %r' % (be,))
    check(cm.break_even(M, 'allreduce', 'pts', 1024, size, None) == 'never', 'PTS at 1024 ranks should never pay')


def measured_lines(cm, inp):
    """ibp-coll-perf --json lines at N=2, made from the model itself."""
    M = cm.Model(inp)
    link = cm.Link(M.alpha, M.beta)
    out = ['// model: alpha 20.0 us (a comment line ibp-coll-perf prints)', 'not json at all', '[1, 2]',
           json.dumps({'op': 'pingpong_fit', 'nranks': 2, 'alpha_s': 2e-5, 'beta_Bps': 1e8})]
    size = 8 * MiB
    for op in cm.OPS:
        for codec in cm.CODECS:
            if op not in cm.TAKES[codec]:
                continue
            pr = M.libibp(op, codec, 2, size, link)
            nat = M.native(op, 2, size, link)
            f = cm.busf(op, 2)
            out.append(json.dumps({
                'op': op, 'size': size, 'count': size // 2, 'nranks': 2, 'time_us': round(pr.time * 1e6, 2),
                'busbw': size / pr.time / 1e9 * f, 'codec': codec, 'ratio': round(pr.logical / pr.wire, 4),
                'decision': 'compress' if codec != 'none' else 'plain', 'rate': 0,
                'native_busbw': round(size / nat.time / 1e9 * f, 4), 'vs_native': nat.time / pr.time}))
    # a switcher's plain decision: predicted as the native call it was
    nat = M.native('allgather', 2, size, link)
    out.append(json.dumps({'op': 'allgather', 'size': size, 'nranks': 2, 'time_us': nat.time * 1e6,
                           'codec': 'exp', 'ratio': 1.0, 'decision': 'not_worth', 'rate': 0,
                           'native_busbw': size / nat.time / 1e9 * 0.5}))
    return out


def validate_details(cm):
    """What --validate predicts for a line: plain decisions, the throttle, link_rate_Bps."""
    import io
    M = cm.Model(inputs(link={'rate_Bps': 1.25e8, 'beta_Bps': 1e8}))  # a shaped link, eff 0.8
    size = 8 * MiB
    lines = [
        {'op': 'allgather', 'codec': 'exp', 'size': size, 'nranks': 2, 'time_us': 1e5, 'ratio': 1.0,
         'decision': 'not_worth', 'rate': 0, 'native_busbw': 0.05},
        {'op': 'alltoall', 'codec': 'lsq', 'size': size, 'nranks': 4, 'time_us': 1e5, 'rate': 5e7,
         'native_busbw': 0},
        {'op': 'reducescatter', 'codec': 'none', 'size': size, 'nranks': 2, 'time_us': 1e5, 'rate': 5e7,
         'native_busbw': 0.05},
        {'op': 'allreduce', 'codec': 'exp', 'size': size, 'nranks': 2, 'time_us': 1e5, 'rate': 0,
         'link_rate_Bps': 2.5e8, 'native_busbw': 0.05},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'm.jsonl')
        with open(path, 'w') as f:
            f.write('\n'.join(json.dumps(x) for x in lines) + '\n')
        res, worst, ok = cm.validate(M, path, 0.15, out=io.StringIO())
    check(len(res) == 4, 'validate_details: %d rows' % len(res))
    if len(res) != 4:
        return
    a, b = M.alpha, M.beta
    # the switcher sent plain bytes: MPI's own call (unthrottled), not the codec
    want = M.native('allgather', 2, size, cm.Link(a, b)).time
    check(res[0]['how'].startswith('plain') and close(res[0]['pred_us'] * 1e-6, want),
          'not_worth line: %s %r != %r' % (res[0]['how'], res[0]['pred_us'], want * 1e6))
    # the communicator's token bucket on libibp's sends
    want = M.libibp('alltoall', 'lsq', 4, size, cm.Link(a, b, 5e7)).time
    check(close(res[1]['pred_us'] * 1e-6, want), 'throttled lsq line: %r != %r' % (res[1]['pred_us'], want * 1e6))
    # codec none under a throttle: libibp's plain ring (no natives then); MPI's own unthrottled
    want = M.reducescatter(M.codec('none'), 2, size, cm.Link(a, b, 5e7)).time
    wantn = M.native('reducescatter', 2, size, cm.Link(a, b)).time
    check(close(res[2]['pred_us'] * 1e-6, want) and close(res[2]['native_pred_us'] * 1e-6, wantn)
          and want > 1.5 * wantn, 'throttled none line: %r %r' % (res[2]['pred_us'], res[2]['native_pred_us']))
    # a line on a link of another rate: beta = link_rate_Bps x the measured link's efficiency
    want = M.libibp('allreduce', 'exp', 2, size, cm.Link(a, 2.5e8 * 0.8)).time
    check(close(res[3]['pred_us'] * 1e-6, want), 'link_rate_Bps line: %r != %r' % (res[3]['pred_us'], want * 1e6))


def cli(cm):
    r = run(['--example-inputs'])
    ok = r.returncode == 0
    try:
        ex = json.loads(r.stdout)
        ok = ok and {'link', 'codecs', 'reduce_Bps'} <= set(ex) and 'alpha_s' in ex['link']
    except ValueError:
        ok, ex = False, None
    check(ok, '--example-inputs: rc %d, not the template: %s' % (r.returncode, r.stdout[:200]))
    if not ex:
        return
    with tempfile.TemporaryDirectory() as tmp:
        exf = os.path.join(tmp, 'example.json')
        with open(exf, 'w') as f:
            json.dump(ex, f)
        out = os.path.join(tmp, 'rows.json')
        r = run(['--inputs', exf, '--ranks', '2,4,...,1024', '--rates', '1,10,25,100,400', '--json', out])
        check(r.returncode == 0, 'table run: rc %d: %s' % (r.returncode, r.stderr[-400:]))
        try:
            with open(out) as f:
                rows = json.load(f)['rows']
        except (OSError, ValueError, KeyError):
            rows = []
        pairs = {(x['op'], x['codec']) for x in rows}
        check(len(rows) == 15 * 10 * 5, 'table rows: %d, expected 15 op/codec pairs x 10 N x 5 rates' % len(rows))
        check(('allreduce', 'dynamiq') in pairs and ('alltoall', 'lsq') in pairs and ('allreduce', 'pts') in pairs,
              'table lacks dynamiq/lsq/pts rows: %s' % sorted(pairs))
        check(not any(p in pairs for p in (('allgather', 'dynamiq'), ('allgather', 'pts'), ('allreduce', 'lsq'),
                                           ('reducescatter', 'lsq'), ('alltoall', 'pts'))),
              'codecs on ops they do not take: %s' % sorted(pairs))
        check(sorted({x['nranks'] for x in rows}) == [2 ** k for k in range(1, 11)], 'ranks 2..1024 expanded')
        check('alpha 50.000 us (inputs link.alpha_s)' in r.stdout, 'the alpha used is printed')
        r = run(['--inputs', exf, '--alpha', '5us', '--ops', 'allgather', '--codecs', 'exp', '--ranks', '2',
                 '--rates', '100'])
        check(r.returncode == 0 and 'alpha 5.000 us (--alpha)' in r.stdout, '--alpha 5us: %s' % r.stdout[:300])

        r = run(['--inputs', exf, '--where', '--ranks', '2,1024'])
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith('pts ')]
        check(r.returncode == 0 and lines and lines[0].split()[-1] == 'never',
              '--where: PTS at 1024 ranks should say never: %s' % r.stdout[-600:])

        r = run(['--algorithms'])
        check(r.returncode == 0 and 'no tree in libibp' in r.stdout and 'pairwise' in r.stdout, '--algorithms')

        png = os.path.join(tmp, 's.png')
        r = run(['--inputs', exf, '--plot', png, '--ranks', '2,4,8'])
        if importlib.util.find_spec('matplotlib') is not None:  # optional: --plot must say it is missing
            ok = r.returncode == 0 and os.path.exists(png) and open(png, 'rb').read(4) == b'\x89PNG'
            check(ok, '--plot did not write a PNG: %s' % r.stderr[-300:])
        else:
            check(r.returncode != 0 and 'needs matplotlib' in r.stderr, '--plot without matplotlib: rc %d, %s' % (
                r.returncode, r.stderr))

        # --validate: the model's own lines pass; one time 30% off fails
        inp = inputs()
        inf = os.path.join(tmp, 'in.json')
        with open(inf, 'w') as f:
            json.dump(inp, f)
        lines = measured_lines(cm, inp)
        good = os.path.join(tmp, 'good.jsonl')
        with open(good, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        r = run(['--inputs', inf, '--validate', good])
        nchecked = sum(1 for ln in r.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in cm.OPS)
        check(r.returncode == 0 and 'PASS' in r.stdout, '--validate on the model\'s own lines: rc %d\n%s' % (
            r.returncode, r.stdout[-1500:]))
        check(nchecked == 16, '--validate checked %d lines, expected 16 (15 op/codec + 1 not_worth)' % nchecked)
        worst = [ln for ln in r.stdout.splitlines() if 'worst error' in ln]
        check(worst and abs(float(worst[0].split('worst error')[1].split('%')[0])) < 0.1,
              '--validate worst error on its own lines: %s' % worst)

        for k, factor, rc in ((5, 1.3, 1), (5, 1.1, 0), (9, 0.7, 1)):
            o = json.loads(lines[k])
            o = copy.deepcopy(o)
            o['time_us'] *= factor
            off = os.path.join(tmp, 'off.jsonl')
            with open(off, 'w') as f:
                f.write('\n'.join(lines[:k] + [json.dumps(o)] + lines[k + 1:]) + '\n')
            r = run(['--inputs', inf, '--validate', off])
            check(r.returncode == rc, '--validate with %s %s time x %.1f: rc %d, expected %d\n%s' % (
                o['op'], o['codec'], factor, r.returncode, rc, r.stdout[-800:]))
        # the native time is checked too
        o = json.loads(lines[4])
        o['native_busbw'] *= 1.0 / 1.3
        with open(off, 'w') as f:
            f.write('\n'.join(lines[:4] + [json.dumps(o)] + lines[5:]) + '\n')
        r = run(['--inputs', inf, '--validate', off, '--tolerance', '0.15'])
        check(r.returncode == 1, '--validate with a native time 30%% off: rc %d' % r.returncode)
        r = run(['--inputs', inf, '--validate', off, '--tolerance', '0.35'])
        check(r.returncode == 0, '--validate --tolerance 0.35 with a native time 30%% off: rc %d' % r.returncode)

        # inputs split in two files, the link from a pingpong_fit line
        link_f, cod_f = os.path.join(tmp, 'pp.jsonl'), os.path.join(tmp, 'codecs.json')
        with open(link_f, 'w') as f:
            f.write('{"op":"pingpong","size":8,"nranks":2,"time_us":20.0}\n'
                    '{"op":"pingpong_fit","nranks":2,"alpha_s":2e-05,"beta_Bps":1e8,"points":6}\n'
                    '{"op":"exchange","size":8,"nranks":2,"time_us":30.0}\n'
                    '{"op":"exchange_fit","nranks":2,"alpha_s":3e-05,"beta_Bps":1e6,"points":6}\n')
        with open(cod_f, 'w') as f:
            json.dump({k: v for k, v in inp.items() if k != 'link'}, f)
        r = run(['--inputs', link_f, '--inputs', cod_f, '--validate', good])
        check(r.returncode == 0, '--inputs pingpong_fit + codecs: rc %d %s' % (r.returncode, r.stderr[-300:]))
        # the exchange_fit beside it (ibp-coll-perf -o pingpong writes both) is not the link
        r = run(['--inputs', link_f, '--inputs', cod_f, '--size', '16M', '--ranks', '2', '--rates', '1'])
        check(r.returncode == 0 and 'alpha 20.000 us' in r.stdout and 'pp.jsonl: pingpong_fit' in r.stdout,
              'the link is the one-way pingpong_fit: %s' % (r.stdout[:400] + r.stderr[-200:]))

        r = run(['--inputs', exf, '--codecs', 'bogus'])
        check(r.returncode == 2 and 'codec bogus' in r.stderr, 'an unknown codec is refused: %s' % r.stderr)


def main():
    if sys.version_info < (3, 7):  # subprocess.run(capture_output=...)
        print('coll_model_check: needs Python 3.7 or later')
        return 77
    if not os.path.exists(TOOL):  # a failure, not a skip: the tool is what is tested
        print('coll_model_check: FAILED: %s is absent' % TOOL)
        return 1
    cm = load()
    known_values(cm)
    validate_details(cm)
    cli(cm)
    if bad:
        print('coll_model_check: %d of %d checks FAILED:' % (len(bad), count[0]))
        for b in bad:
            print('  - ' + b)
        return 1
    print('coll_model_check: %d checks passed' % count[0])
    return 0


if __name__ == '__main__':
    sys.exit(main())
