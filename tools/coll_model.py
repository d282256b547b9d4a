#!/usr/bin/env python3
"""coll_model.py - analytical cost model of libibp's collectives (issue 38).

Predicts the time of each collective as libibp runs it (src/coll/algo.c,
flow.c, dynamiq.c, rcmoe.c), compressed against native, from inputs
measured apart from any collective:

  link    alpha (s) and beta (B/s) of a ping-pong over the same link
          (ibp-coll-perf -o pingpong; its pingpong_fit line is accepted as is);
  codecs  ratio and per-core speeds of each codec run alone
          (tests/coll/coll_codec_speed: logical bytes of the dtype per second);
  reduce  reduce_Bps, a plain ring step's work on a received block
          (widen to float32, add, round; bytes of one operand per second).

Nothing is fitted to the collectives it predicts.

    coll_model.py --example-inputs > in.json
    coll_model.py --inputs in.json [--ops ...] [--codecs ...] [--ranks 2,4,...,1024]
                  [--rates 1,10,25,100,400] [--size 64M] [--alpha 5us] [--tree] [--json OUT]
    coll_model.py --inputs in.json --validate measured.jsonl [--tolerance 0.15]
    coll_model.py --inputs in.json --plot speedup.png
    coll_model.py --inputs in.json --where
    coll_model.py --algorithms

--inputs may be repeated (link.json, codecs.json): objects are merged, later
wins; a JSON-lines file's {"op": "pingpong_fit"} line gives the link.

Sizes are ibp-coll-perf's "size": logical bytes of the call (AllGather and
AllToAll: bytes received per rank; ReduceScatter and AllReduce: the whole
vector). busbw = size / time * f (GB/s of 1e9 B), f = 2 (N-1)/N for
AllReduce and (N-1)/N otherwise (tools/coll_perf/ibp_coll_perf.c, busf).

THE MODEL (N ranks, size S, element size esz)
--------------------------------------------
Chunk m = S/N logical bytes (AllReduce: ceil(count/N) elements, the largest
chunk paces the ring). Wire bytes of m: W = m/ratio + 32 per message (the
coll_hdr_t every message carries; native: W = m). When a measured line
gives "ratio" (logical/wire over the call, headers included) W = m/ratio.
Codec wall time per logical byte: e = 1/(enc_Bps t), d = 1/(dec_Bps t),
t = opts nthreads ("threads", exp and fp8 only; LSQ, DynamiQ, PTS are
single-threaded); r = 1/reduce_Bps (single-threaded). Work (core-seconds)
is wall time x t.

Link. Beta at a nominal rate R Gbit/s = R 1e9/8 eff, eff = beta/rate of the
measured link when its rate was known (a shaped link), else 1. A message of
W bytes on the blocking path (sendrecv): alpha + W (1/beta + 1/q), q the
communicator's token bucket (--rate; 1/q = 0 when unthrottled): pace()
sleeps, then the transport moves the bytes. Pieces in flight (isend):
W max(1/beta, 1/q), the bucket's sleep overlapping earlier pieces'
transfer.

Pieces (algo.c ring_pieces, dynamiq.c dq_pieces). A chunk travels as
P = ceil(elements / (piece_bytes/esz)) pieces (DynamiQ: ceil(coded chunk
bytes / piece_bytes)), P < 4 -> 1 (whole chunks, the blocking code), at most
4096. piece_bytes: 61440 over MPI, 1 MiB in-process, 0 (never) for
transports without async; "piece_bytes" in the inputs overrides.

One pipelined step (flow.c ibpi_flow_step), with E = encode time of the
chunk (helper thread, piece by piece), D = decode (+ add) time of the chunk
received (the caller thread, and the helper once it has encoded everything),
Lb = W max(1/beta, 1/q), pz = W/q (the caller asleep in pace()):

    bulk  = max(Lb, E, (E + D + pz)/k, work/cores)
    Tstep = alpha + bulk (1 - 1/P) + (E + Lb + D)/P

i.e. the slowest stage paces the pieces, plus the pipeline's fill and drain
(the first piece's encode and the last piece's decode, one piece on the
wire); k = 2 threads share the codec work (k = 1 for MPI's own, whose sum
runs on the calling thread), on no more than `cores` cores (cores_per_rank,
default 2 x threads). Steps run one after another (a step ends when every
piece is sent and decoded). One alpha per step: the pieces are in flight
together, so their latencies overlap.

Per op (libibp; native = the same algorithm with e = d = 0, W = m, k = 1):

  AllGather, ring (algo.c ring_ag / ring_pipe red=0), N-1 steps:
    step 0 encodes its own chunk: E0 = m e (+ m d for FP8: the owner keeps
    the decoded copy), D = m d; steps 1..N-2 forward what arrived (E = 0).
    P > 1: T = Tstep(E0, D) + (N-2) Tstep(0, D)
    P = 1: L = alpha + W (1/beta + 1/q); T = E0 + L + (N-2) max(L, D) + D
           when the helper decodes behind the next transfer (N > 2, coded,
           W >= 32 KiB), else E0 + (N-1)(L + D).
  ReduceScatter, ring (ring_rs / ring_pipe red=1), N-1 steps, each encodes
    (step 0 its own data, later steps the partial sum just made), decodes
    and adds: E = m e, D = m (d + r).
    P > 1: T = (N-1) Tstep(E, D);  P = 1: T = (N-1)(E + L + D).
  AllReduce (none, exp, fp8), ring ReduceScatter + ring AllGather on chunks
    of ceil(count/N): T = T_RS + T_AG (2(N-1) steps).
  AllReduce, tree: MODEL ONLY, NOT IN LIBIBP. A double binary tree (NCCL's):
    each tree carries S/2, reduce and broadcast overlapped, pipelined in P
    pieces of S/2, h = floor(log2 N). Per rank (internal in one tree, leaf
    in the other): B = 2S each way (N = 2: S), encode S, decode 2S (N = 2:
    S), add S (N = 2: S/2). W = B/ratio + 32 per piece message.
    T = bulk (1 - 1/P) + 2h (alpha + (E + Lb + D)/P), bulk as above; its
    native is the same tree uncompressed (rows of --tree compare the two).
  AllToAll, pairwise (a2a / a2a_pipe_step), N-1 steps, each encodes the
    block for rank+k and decodes the one from rank-k: E = m e, D = m d.
    P > 1: T = (N-1) Tstep(E, D);  P = 1: T = (N-1)(E + L + D).
  DynamiQ AllReduce (dynamiq.c ibpi_dq_allreduce), J = ceil(count/256):
    T = S/stats_Bps                          local statistics (default reduce_Bps)
      + (N-1)(alpha + (8J + 32)(1/beta + 1/q)) their ring all-gather (blocking)
      + N 8J r + J plan_s_per_sg             summing them; the plan (default 0)
      + ring: 2(N-1) steps of W = m/ratio (+32 per piece):
        P > 1: Tstep(m e_leaf, m h) + (N-3) Tstep(0, m h) + Tstep(0, m h + m d)
               + (N-1) Tstep(0, m d)         (N = 2: Tstep(m e_leaf, m h + m d) + Tstep(0, m d))
        P = 1: S r + m e_leaf + (N-1)(L + m h) + m d + (N-1)(L + m d)
               (the whole-chunk ring widens the input and narrows the sum)
    e_leaf = 1/enc_Bps, h = 1/hop_Bps (decode + add + re-quantize; else
    1/enc_Bps + 1/dec_Bps), d = 1/dec_Bps.
  PTS AllReduce (rcmoe.c ibpi_pts_allreduce): every rank's whole stream
    goes round the ring, then each rank adds the N streams:
    T = S r (widen, narrow) + S/enc_Bps + (N-1)(alpha + (S/ratio + 32)(1/beta + 1/q))
        + N S/dec_Bps.
  Ranks sharing cores (cores_per_rank c < 1, e.g. in-process ranks beyond
    the machine's cores): the codec and reduce work a rank runs serially on
    its core, every rank computing at once, takes 1/c times as long: every
    whole-chunk branch (P = 1: e, d, r above, the tree's too), PTS, and
    DynamiQ's statistics, plan and whole-chunk hops. The pipelined steps
    have work/cores already.
  codec none: libibp's call runs the transport's native collective (MPI,
    unthrottled) = native; otherwise libibp's plain ring (W = m + headers,
    E = D = 0 besides the reduce).

Assumptions where the code leaves it open: codec speeds scale linearly
with nthreads; memcpy (raw encode/decode, own-chunk copies, in-place
staging) is free; MPI's own collectives are the ring (pairwise for
AllToAll) cut in the same pieces (only the reduce's overlap depends on
it), except with "mpi_library": "openmpi4" in the inputs, where
MPI_Reduce_scatter_block is what Open MPI 4.x's coll tuned runs for it
by default, basic linear: an MPI_Reduce of the whole buffer to rank 0 (a
pipelined chain of 64 KiB segments at these sizes: the buffer crosses
each link once, the sum overlaps) and a linear scatter of N-1 blocks from
rank 0:
    T = (ceil(S/64K) + N-2)(alpha + max(g/beta, g r)) + (N-1)(alpha + (S/N)/beta),
    g = the segment (S/ceil(S/64K));
per-message overheads besides alpha are ignored; the codec ratio of
a whole message holds for 60 KiB pieces; the switcher (policy auto) is
not modelled: "compressed" is policy always (a measured line whose
"decision" is not "compress" is predicted as the plain call it was).
"""

import argparse
import json
import math
import os
import signal
import sys

HDR = 32  # coll_hdr_t on every message (coll_internal.h COLL_HDR)
PIECES_MIN, PIECES_MAX = 4, 4096  # flow.h FLOW_PIECES_MIN/MAX
AG_OVERLAP_MIN = 32 << 10  # algo.c: the whole-chunk AllGather's helper decode threshold
DQ_S = 256  # DynamiQ super-group
PIECE_DEFAULT = {'mpi': 61440, 'inproc': 1 << 20, 'torch': 1 << 20, 'blocking': 0}
MPI_LIBRARIES = ('ring', 'openmpi4')  # what MPI's own calls are modelled as (module docstring)
OMPI_REDUCE_SEG = 64 << 10  # Open MPI 4 coll tuned: MPI_Reduce's pipeline segment for large messages
ESZ = {'bf16': 2, 'f16': 2, 'fp16': 2, 'f32': 4, 'fp32': 4}
OPS = ('allgather', 'reducescatter', 'allreduce', 'alltoall')
CODECS = ('none', 'exp', 'fp8', 'dynamiq', 'lsq', 'pts')
TAKES = {'none': OPS, 'exp': OPS, 'fp8': OPS, 'dynamiq': ('allreduce',), 'lsq': ('alltoall',),
         'pts': ('allreduce',)}
PLOT_PANELS = (('exp', 'allreduce'), ('exp', 'allgather'), ('fp8', 'allreduce'), ('fp8', 'allgather'),
               ('dynamiq', 'allreduce'), ('lsq', 'alltoall'), ('pts', 'allreduce'))
TREE = 'dbtree (model only, not in libibp)'

EXAMPLE_INPUTS = {
    "link": {"alpha_s": 5.0e-05, "beta_Bps": 1.16e8, "rate_Bps": 1.25e8,
             "source": "EXAMPLE VALUES, NOT MEASURED: replace with ibp-coll-perf -o pingpong --json "
                       "over the link (here: a 1 Gbit/s tbf link, tools/netns-tc.sh -r 1)"},
    "codecs": {
        "exp": {"ratio": 1.45, "enc_Bps": 1.2e9, "dec_Bps": 0.8e9},
        "fp8": {"ratio": 1.97, "enc_Bps": 2.0e9, "dec_Bps": 2.0e9},
        "dynamiq": {"ratio": 3.2, "enc_Bps": 6.0e8, "hop_Bps": 3.5e8, "dec_Bps": 1.2e9, "stats_Bps": 8.0e9},
        "lsq": {"ratio": 3.98, "enc_Bps": 1.5e9, "dec_Bps": 3.0e9},
        "pts": {"ratio": 13.0, "enc_Bps": 1.0e9, "dec_Bps": 2.0e9},
    },
    "reduce_Bps": 1.5e9, "dtype": "bf16", "threads": 1, "transport": "mpi", "cores_per_rank": 2,
    "note": "speeds: logical bytes per second per core (tests/coll/coll_codec_speed); optional: "
            "piece_bytes, dynamiq.stats_Bps, dynamiq.plan_s_per_sg, mpi_library (ring or openmpi4: "
            "MPI's own ReduceScatter as Open MPI 4.x runs it)",
}


class InputError(Exception):
    pass


def parse_size(s):
    """ibp-coll-perf's parse_size: K, M, G are binary."""
    t = str(s).strip()
    for suf in ('iB', 'B'):
        if t.endswith(suf) and len(t) > len(suf) and t[-len(suf) - 1] in 'KkMmGg':
            t = t[:-len(suf)]
    mult = {'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}.get(t[-1:].lower(), 1)
    if mult > 1:
        t = t[:-1]
    return int(float(t) * mult)


def parse_time(s):
    """Seconds from '5us', '0.1ms', '2e-6s'; a bare number is microseconds."""
    t = str(s).strip().lower()
    for suf, k in (('ns', 1e-9), ('us', 1e-6), ('ms', 1e-3), ('s', 1.0)):
        if t.endswith(suf):
            return float(t[:-len(suf)]) * k
    return float(t) * 1e-6


def parse_list(s, conv):
    """'2,4,...,1024' expands geometrically (or arithmetically) from the first two."""
    parts = [p.strip() for p in str(s).split(',') if p.strip()]
    if '...' not in parts:
        return [conv(p) for p in parts]
    i = parts.index('...')
    if i < 2 or i != len(parts) - 2:
        raise InputError("a list with '...' needs two values before it and one after: %s" % s)
    a, b, end = conv(parts[i - 2]), conv(parts[i - 1]), conv(parts[i + 1])
    out = [conv(p) for p in parts[:i]]
    geo = a > 0 and b > a and b % a == 0 if isinstance(a, int) else False
    x = b
    while True:
        x = x * (b // a) if geo else x + (b - a)
        if x > end or (b - a) <= 0:
            break
        out.append(x)
    if out[-1] != end:
        out.append(end)
    return out


def busf(op, n):
    return 2.0 * (n - 1) / n if op == 'allreduce' else (n - 1) / n


class Link:
    """alpha (s), beta (B/s) and the communicator's token bucket q (B/s, 0: none)."""

    def __init__(self, alpha, beta, bucket=0.0):
        self.alpha, self.beta, self.bucket = alpha, beta, bucket or 0.0

    def pipe(self, w):  # pieces in flight: the bucket's sleep overlaps earlier transfers
        return w * max(1.0 / self.beta, 1.0 / self.bucket if self.bucket else 0.0)

    def block(self, w):  # sendrecv: pace() sleeps, then the transport moves the bytes
        return self.alpha + w * (1.0 / self.beta + (1.0 / self.bucket if self.bucket else 0.0))

    def pace(self, w):
        return w / self.bucket if self.bucket else 0.0


class Codec:
    """Per-byte wall times (s/B) of one codec as the collectives call it."""

    def __init__(self, name, ratio=1.0, enc=0.0, dec=0.0, t=1, hdr=HDR, coded=True, helper=True, **extra):
        self.name, self.ratio, self.enc, self.dec, self.t, self.hdr, self.coded = name, ratio, enc, dec, t, hdr, coded
        self.helper = helper  # libibp's flow steps have a helper thread; MPI's own sums on the caller
        self.fp8 = name == 'fp8'
        self.extra = extra


class Pred:
    def __init__(self, time, algo, logical, wire, notes=()):
        self.time, self.algo, self.logical, self.wire, self.notes = time, algo, logical, wire, list(notes)


def _merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v


def load_inputs(paths):
    """Merges the inputs files (objects, or JSON lines with a pingpong_fit)."""
    inp = {}
    for path in paths:
        with open(path) as f:
            text = f.read()
        try:
            objs = [json.loads(text)]
        except ValueError:
            objs = []
            for line in text.splitlines():
                line = line.strip()
                if line.startswith('{'):
                    try:
                        objs.append(json.loads(line))
                    except ValueError:
                        pass
        for o in objs:
            if not isinstance(o, dict):
                continue
            if o.get('op') == 'pingpong_fit':
                o = {'link': {'alpha_s': o['alpha_s'], 'beta_Bps': o['beta_Bps'], 'rate_Bps': None,
                              'source': '%s: pingpong_fit' % os.path.basename(path)}}
            elif o.get('op'):
                continue
            _merge(inp, o)
    return inp


class Model:
    def __init__(self, inp, cores=None, piece_bytes=None):
        link = inp.get('link') or {}
        try:
            self.alpha = float(link['alpha_s'])
            self.beta = float(link['beta_Bps'])
            self.red = 1.0 / float(inp['reduce_Bps'])
        except (KeyError, TypeError, ValueError) as e:
            raise InputError('inputs need link.alpha_s, link.beta_Bps and reduce_Bps (%s)' % e)
        if self.alpha < 0 or self.beta <= 0:
            raise InputError('link.alpha_s must be >= 0 and link.beta_Bps > 0')
        rate = link.get('rate_Bps')
        self.link_rate = float(rate) if rate else None
        self.eff = self.beta / self.link_rate if self.link_rate else 1.0  # shaped link: what its rate delivers
        self.source = link.get('source', '?')
        self.dtype = inp.get('dtype', 'bf16')
        if self.dtype not in ESZ:
            raise InputError('dtype %s (bf16, f16 or f32)' % self.dtype)
        self.esz = ESZ[self.dtype]
        self.threads = max(1, int(inp.get('threads', 1) or 1))
        self.cores = float(cores or inp.get('cores_per_rank') or 2 * self.threads)
        # ranks sharing cores (cores_per_rank < 1: more ranks than cores, all
        # computing at once) stretch their serial codec work by this much (serial())
        self.share = max(1.0, 1.0 / self.cores)
        self.transport = inp.get('transport', 'mpi')
        if self.transport not in PIECE_DEFAULT:
            raise InputError('transport %s (%s)' % (self.transport, ', '.join(PIECE_DEFAULT)))
        pb = piece_bytes if piece_bytes is not None else inp.get('piece_bytes')
        self.piece = int(PIECE_DEFAULT[self.transport] if pb is None else pb)
        self.natives = self.transport == 'mpi'  # MPI's transport carries natives (algo.c try_native)
        self.mpi_library = inp.get('mpi_library', 'ring')
        if self.mpi_library not in MPI_LIBRARIES:
            raise InputError('mpi_library %s (%s)' % (self.mpi_library, ', '.join(MPI_LIBRARIES)))
        self.cin = inp.get('codecs') or {}
        for name, c in self.cin.items():
            if name in ('exp', 'fp8', 'dynamiq', 'lsq', 'pts'):
                for k in ('ratio', 'enc_Bps', 'dec_Bps'):
                    if not (isinstance(c.get(k), (int, float)) and c[k] > 0):
                        raise InputError('codecs.%s.%s must be a number > 0' % (name, k))

    # ---- inputs ----
    def has(self, codec):
        return codec == 'none' or codec in self.cin

    def codec(self, name):
        if name == 'native':
            return Codec('native', hdr=0, coded=False, helper=False)
        if name == 'none':
            return Codec('none', coded=False)
        c = self.cin[name]
        t = self.threads if name in ('exp', 'fp8') else 1  # only exp and fp8 take opts nthreads
        extra = {k: v for k, v in c.items() if k not in ('ratio', 'enc_Bps', 'dec_Bps')}
        return Codec(name, float(c['ratio']), 1.0 / (c['enc_Bps'] * t), 1.0 / (c['dec_Bps'] * t), t, **extra)

    def link_at(self, gbit, alpha=None):
        return Link(self.alpha if alpha is None else alpha, gbit * 1e9 / 8.0 * self.eff)

    # ---- shared pieces ----
    def ring_pieces(self, elems, n):
        if self.piece <= 0 or n >= (1 << 16):
            return 1
        per = max(self.piece // self.esz, 1)
        p = -(-elems // per)
        return 1 if p < PIECES_MIN else min(p, PIECES_MAX)

    def serial(self, *times):
        """Times of codec or reduce work a rank runs serially on its core, as
        ranks sharing cores take them: the one place share applies."""
        return tuple(x * self.share for x in times)

    def per_byte(self, c, p):
        """Encode, decode and reduce times (s/B) of a chunk sent in p pieces:
        whole chunks (p = 1) run serially; pieces keep the per-core times, as
        step() divides their work by cores."""
        t = (c.enc, c.dec, self.red)
        return self.serial(*t) if p == 1 else t

    def step(self, link, p, e, d, w, work, helper=True):
        """One pipelined step (flow.c), see the module docstring."""
        lb = link.pipe(w)
        thr = 2.0 if helper else 1.0  # flow.c: the helper and the caller share the decodes
        bulk = max(lb, e, (e + d + link.pace(w)) / thr, work / self.cores)
        return link.alpha + bulk * (1.0 - 1.0 / p) + (e + lb + d) / p

    @staticmethod
    def _wire(c, m, msgs, rho):
        if rho:
            return m / rho
        return m / c.ratio + c.hdr * msgs

    # ---- the algorithms ----
    def allgather(self, c, n, size, link, rho=None, m_elems=None):
        count = size // self.esz // n if m_elems is None else m_elems
        m = count * self.esz
        p = self.ring_pieces(count, n)
        w = self._wire(c, m, p, rho)
        enc, dec, _ = self.per_byte(c, p)
        e0 = m * enc + (m * dec if c.fp8 else 0.0)
        d = m * dec
        if p > 1:
            t = (self.step(link, p, e0, d, w, (e0 + d) * c.t, c.helper)
                 + (n - 2) * self.step(link, p, 0.0, d, w, d * c.t, c.helper))
            algo = 'ring AG, %d pieces' % p
        else:
            L = link.block(w)
            if n > 2 and c.coded and w >= AG_OVERLAP_MIN:
                t = e0 + L + (n - 2) * max(L, d) + d
                algo = 'ring AG, whole chunks, helper decode'
            else:
                t = e0 + (n - 1) * (L + d)
                algo = 'ring AG, whole chunks'
        return Pred(t, algo, (n - 1) * m, (n - 1) * w)

    def reducescatter(self, c, n, size, link, rho=None, m_elems=None):
        count = size // self.esz // n if m_elems is None else m_elems
        m = count * self.esz
        p = self.ring_pieces(count, n)
        w = self._wire(c, m, p, rho)
        enc, dec, red = self.per_byte(c, p)
        e, d = m * enc, m * (dec + red)
        if p > 1:
            t = (n - 1) * self.step(link, p, e, d, w, (e + m * dec) * c.t + m * red, c.helper)
            algo = 'ring RS, %d pieces' % p
        else:
            t = (n - 1) * (e + link.block(w) + d)
            algo = 'ring RS, whole chunks'
        return Pred(t, algo, (n - 1) * m, (n - 1) * w)

    def allreduce(self, c, n, size, link, rho=None):
        count = size // self.esz
        maxn = -(-count // n)  # algo.c: the largest chunk, q + (rem != 0)
        rs = self.reducescatter(c, n, size, link, rho, maxn)
        ag = self.allgather(c, n, size, link, rho, maxn)
        return Pred(rs.time + ag.time, 'ring RS + ring AG, %s' % rs.algo.split(', ')[-1], rs.logical + ag.logical,
                    rs.wire + ag.wire)

    def alltoall(self, c, n, size, link, rho=None):
        count = size // self.esz // n
        m = count * self.esz
        p = self.ring_pieces(count, n)
        w = self._wire(c, m, p, rho)
        enc, dec, _ = self.per_byte(c, p)
        e, d = m * enc, m * dec
        if p > 1:
            t = (n - 1) * self.step(link, p, e, d, w, (e + d) * c.t, c.helper)
            algo = 'pairwise, %d pieces' % p
        else:
            t = (n - 1) * (e + link.block(w) + d)
            algo = 'pairwise, whole blocks'
        return Pred(t, algo, (n - 1) * m, (n - 1) * w)

    def tree_allreduce(self, c, n, size, link, rho=None):
        """Double binary tree: model only, libibp has none."""
        count = size // self.esz
        s = count * self.esz
        h = max(1, int(math.floor(math.log2(n))))
        p = self.ring_pieces(-(-count // 2), 2)
        two = n == 2
        b = s if two else 2.0 * s
        w = self._wire(c, b, (2 if two else 4) * p, rho)
        enc_b, dec_b, add_b = s, (s if two else 2.0 * s), (s / 2.0 if two else s)
        enc, dec, red = self.per_byte(c, p)
        e = enc_b * enc
        d = dec_b * dec + add_b * red
        work = (e + dec_b * dec) * c.t + add_b * red
        lb = link.pipe(w)
        bulk = max(lb, e, (e + d + link.pace(w)) / (2.0 if c.helper else 1.0), work / self.cores)
        t = bulk * (1.0 - 1.0 / p) + 2 * h * (link.alpha + (e + lb + d) / p)
        return Pred(t, TREE, b, w)

    def dynamiq(self, n, size, link, rho=None):
        c = self.cin['dynamiq']
        count = size // self.esz
        s = count * self.esz
        J = -(-count // DQ_S)
        m = -(-count // n) * self.esz
        e_leaf = 1.0 / c['enc_Bps']
        hop = 1.0 / c['hop_Bps'] if c.get('hop_Bps') else 1.0 / c['enc_Bps'] + 1.0 / c['dec_Bps']
        dd = 1.0 / c['dec_Bps']
        stats_bps = c.get('stats_Bps')
        notes = [] if stats_bps else ['dynamiq: statistics pass at reduce_Bps (no codecs.dynamiq.stats_Bps)']
        pre = sum(self.serial(s * (1.0 / stats_bps if stats_bps else self.red), n * 8 * J * self.red,
                              J * float(c.get('plan_s_per_sg', 0.0))))
        pre += (n - 1) * link.block(8 * J + HDR)
        coded = m / float(c['ratio'])
        if rho:  # the line's ratio covers the statistics too: the data's share of the wire
            wire_all = (2 * (n - 1) * m + (n - 1) * 8 * J) / rho - (n - 1) * (8 * J + HDR)
            if wire_all > 0:
                coded = wire_all / (2 * (n - 1))
            else:
                notes.append('dynamiq: measured ratio below the statistics alone; input ratio used')
                rho = None
        p = 1
        if self.piece > 0 and n < (1 << 16):
            p = -(-int(math.ceil(coded)) // self.piece)
            p = 1 if p < PIECES_MIN else min(p, PIECES_MAX)
        w = coded if rho else coded + HDR * p
        me, mh, md = m * e_leaf, m * hop, m * dd
        if p > 1:
            st = self.step
            if n == 2:
                ring = st(link, p, me, mh + md, w, me + mh + md)
            else:
                ring = (st(link, p, me, mh, w, me + mh) + (n - 3) * st(link, p, 0.0, mh, w, mh)
                        + st(link, p, 0.0, mh + md, w, mh + md))
            ring += (n - 1) * st(link, p, 0.0, md, w, md)
            algo = 'DynamiQ ring (stats AG, RS hops, AG), %d pieces' % p
        else:
            L = link.block(w)
            wide, me, mh, md = self.serial(s * self.red, me, mh, md)  # wide: widen the input, narrow the sum
            ring = wide + me + (n - 1) * (L + mh) + md + (n - 1) * (L + md)
            algo = 'DynamiQ ring (stats AG, RS hops, AG), whole chunks'
        logical = 2 * (n - 1) * m + (n - 1) * 8 * J
        wire = 2 * (n - 1) * w + (n - 1) * (8 * J + HDR)
        return Pred(pre + ring, algo, logical, wire, notes)

    def pts(self, n, size, link, rho=None):
        c = self.cin['pts']
        s = (size // self.esz) * self.esz
        w = s / rho if rho else s / float(c['ratio']) + HDR
        t = sum(self.serial(s * self.red, s / c['enc_Bps'], n * s / c['dec_Bps'])) + (n - 1) * link.block(w)
        return Pred(t, 'PTS: ring AG of whole streams, local sum', (n - 1) * s, (n - 1) * w)

    # ---- what runs ----
    def reducescatter_ompi4(self, n, size, link):
        """Open MPI 4.x's default MPI_Reduce_scatter_block: reduce to rank 0, linear scatter."""
        s = (size // self.esz) * self.esz
        nseg = max(1, -(-s // OMPI_REDUCE_SEG))
        g = s / float(nseg)
        t = (nseg + n - 2) * (link.alpha + max(g / link.beta, g * self.red)) + \
            (n - 1) * (link.alpha + (s / float(n)) / link.beta)
        return Pred(t, 'reduce to rank 0 (%d-segment chain) + linear scatter' % nseg, (n - 1) * s // n,
                    s + (n - 1) * s // n)

    def native(self, op, n, size, link):
        """MPI's own (or the plain algorithm): same ring/pairwise, no codec."""
        if op == 'reducescatter' and self.mpi_library == 'openmpi4':
            pr = self.reducescatter_ompi4(n, size, link)
            pr.algo = 'native: ' + pr.algo
            return pr
        c = self.codec('native')
        pr = getattr(self, op)(c, n, size, link)
        pr.algo = 'native: ' + pr.algo
        return pr

    def plain(self, op, n, size, link):
        """What libibp runs for a plain call: the natives when the transport has them and no throttle."""
        if self.natives and not link.bucket:
            pr = self.native(op, n, size, link)
            pr.algo = 'native (MPI\'s own), modelled as ' + pr.algo[len('native: '):]
            return pr
        pr = getattr(self, op)(self.codec('none'), n, size, link)
        pr.algo = 'plain ' + pr.algo
        return pr

    def libibp(self, op, codec, n, size, link, rho=None):
        if codec == 'none':
            return self.plain(op, n, size, link)
        if op not in TAKES[codec]:
            raise InputError('codec %s does not take %s' % (codec, op))
        if not self.has(codec):
            raise InputError('no codecs.%s in the inputs' % codec)
        if codec == 'dynamiq':
            return self.dynamiq(n, size, link, rho)
        if codec == 'pts':
            return self.pts(n, size, link, rho)
        return getattr(self, op)(self.codec(codec), n, size, link, rho)

    def tree(self, codec, n, size, link):
        c = self.codec('native' if codec == 'none' else codec)
        return self.tree_allreduce(c, n, size, link)


def algorithms_text():
    return '\n'.join([
        'What libibp runs (src/coll), by op and codec:',
        '  allgather      none/exp/fp8: ring AllGather (algo.c ring_ag; pipelined pieces, flow.c); '
        'own chunk encoded once, forwarded unchanged, every hop decodes',
        '  reducescatter  none/exp/fp8: ring ReduceScatter (ring_rs); every hop decodes, adds, re-encodes',
        '  allreduce      none/exp/fp8: ring ReduceScatter + ring AllGather; no tree in libibp '
        '(--tree adds a double binary tree, model only)',
        '                 dynamiq: statistics all-gather + DynamiQ multi-hop ring (dynamiq.c)',
        '                 pts: ring all-gather of whole PTS streams + local sum (rcmoe.c)',
        '  alltoall       none/exp/fp8/lsq: pairwise exchange (a2a, a2a_pipe_step)',
        '  codec none / plain decisions: the transport\'s native collective (MPI) when it has them and '
        'no --rate throttle, else the same algorithms uncompressed',
    ])


# ---- the sweep ----

def sweep(model, ops, codecs, ranks, rates, size, alpha, tree):
    rows = []
    for op in ops:
        for codec in codecs:
            if op not in TAKES[codec] or not model.has(codec):
                continue
            for n in ranks:
                for r in rates:
                    link = model.link_at(r, alpha)
                    nat = model.native(op, n, size, link)
                    cmp_ = model.libibp(op, codec, n, size, link)
                    rows.append(row(model, op, codec, n, r, size, nat, cmp_))
                    if tree and op == 'allreduce' and codec in ('none', 'exp', 'fp8'):  # against the native tree
                        rows.append(row(model, op, codec, n, r, size, model.tree('none', n, size, link),
                                        model.tree(codec, n, size, link)))
    return rows


def row(model, op, codec, n, rate, size, nat, cmp_):
    logical = (size // model.esz) * model.esz if op == 'allreduce' else (size // model.esz // n) * model.esz * n
    f = busf(op, n)
    return {'op': op, 'codec': codec, 'nranks': n, 'rate_gbit': rate, 'size': logical,
            'native_us': nat.time * 1e6, 'compressed_us': cmp_.time * 1e6,
            'native_busbw': logical / nat.time / 1e9 * f if nat.time > 0 else 0.0,
            'compressed_busbw': logical / cmp_.time / 1e9 * f if cmp_.time > 0 else 0.0,
            'speedup': nat.time / cmp_.time if cmp_.time > 0 else 0.0, 'algorithm': cmp_.algo,
            'native_algorithm': nat.algo, 'notes': cmp_.notes}


def print_rows(rows, out=sys.stdout):
    out.write('%-13s %-7s %5s %7s %13s %13s %9s %9s %8s  %s\n' % (
        'op', 'codec', 'N', 'Gbit/s', 'native_us', 'compr_us', 'nat_bus', 'cmp_bus', 'speedup', 'algorithm'))
    for r in rows:
        out.write('%-13s %-7s %5d %7g %13.1f %13.1f %9.4f %9.4f %8.3f  %s\n' % (
            r['op'], r['codec'], r['nranks'], r['rate_gbit'], r['native_us'], r['compressed_us'],
            r['native_busbw'], r['compressed_busbw'], r['speedup'], r['algorithm']))


def header(model, alpha, alpha_src, out=sys.stdout):
    out.write('# inputs: %s\n' % model.source)
    out.write('# alpha %.3f us (%s); beta at R Gbit/s = R 1e9/8 x eff %.4f (%s); dtype %s, threads %d, '
              'cores/rank %g, transport %s, piece %d B\n' % (
                  alpha * 1e6, alpha_src, model.eff,
                  'measured beta / link rate' if model.link_rate else 'no link rate given', model.dtype,
                  model.threads, model.cores, model.transport, model.piece))


# ---- where compression pays ----

def break_even(model, op, codec, n, size, alpha, lo=1e-3, hi=1e5):
    """Rate (Gbit/s) above which compressed is slower than native, by bisection in log(rate)."""
    def sp(r):
        link = model.link_at(r, alpha)
        return model.native(op, n, size, link).time / model.libibp(op, codec, n, size, link).time

    if sp(lo) < 1.0:
        return 'never'
    if sp(hi) >= 1.0:
        return '>%g' % hi
    a, b = math.log(lo), math.log(hi)
    for _ in range(60):
        mid = 0.5 * (a + b)
        if sp(math.exp(mid)) >= 1.0:
            a = mid
        else:
            b = mid
    return math.exp(0.5 * (a + b))


def where(model, ops, codecs, ranks, size, alpha, out=sys.stdout):
    out.write('# where compression pays: the link rate (Gbit/s) above which compressed is slower than '
              'native, %d-byte calls\n' % size)
    out.write('%-8s %-13s' % ('codec', 'op') + ''.join('%10s' % ('N=%d' % n) for n in ranks) + '\n')
    res = []
    for codec in codecs:
        if codec == 'none' or not model.has(codec):
            continue
        for op in ops:
            if op not in TAKES[codec]:
                continue
            vals = [break_even(model, op, codec, n, size, alpha) for n in ranks]
            res.append({'codec': codec, 'op': op, 'break_even_gbit': dict(zip(ranks, vals))})
            out.write('%-8s %-13s' % (codec, op) + ''.join(
                '%10s' % (v if isinstance(v, str) else '%.3g' % v) for v in vals) + '\n')
    out.write('# never: slower than native at any rate from 0.001 Gbit/s; >X: pays up to X Gbit/s\n')
    return res


# ---- validation ----

def validate(model, path, tol, out=sys.stdout):
    lines = []
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if not raw.startswith('{'):
                continue
            try:
                o = json.loads(raw)
            except ValueError:
                continue
            if isinstance(o, dict):
                lines.append(o)
    res, worst, notes = [], None, set()
    for o in lines:
        op, codec = o.get('op'), o.get('codec', 'none')
        if op not in OPS or codec not in CODECS:
            continue
        try:
            n, size, t_meas = int(o['nranks']), int(o['size']), float(o['time_us']) * 1e-6
        except (KeyError, TypeError, ValueError):
            continue
        if n < 2 or size <= 0:
            continue
        bucket = float(o.get('rate') or 0.0)
        beta = model.beta
        if o.get('link_rate_Bps') and model.link_rate:
            beta = float(o['link_rate_Bps']) * model.eff
        elif o.get('link_rate_Bps'):
            notes.add('link_rate_Bps ignored: the inputs\' link has no rate_Bps to scale from')
        link_t = Link(model.alpha, beta, bucket)
        link_n = Link(model.alpha, beta)  # MPI's own call: not throttled by libibp's bucket
        nat_bus = float(o.get('native_busbw') or 0.0)
        decision = o.get('decision', 'compress')
        rho = float(o['ratio']) if o.get('ratio') else None
        if codec != 'none' and decision not in (None, 'compress'):
            pr = model.plain(op, n, size, link_t)
            how = 'plain (%s)' % decision
        elif codec == 'none':
            pr = model.plain(op, n, size, link_t)
            how = 'plain'
        else:
            if not model.has(codec):
                notes.add('no codecs.%s in the inputs: its lines skipped' % codec)
                continue
            pr = model.libibp(op, codec, n, size, link_t, rho)
            how = 'measured ratio %.4g' % rho if rho else 'input ratio'
        for x in pr.notes:
            notes.add(x)
        r = {'op': op, 'codec': codec, 'nranks': n, 'size': size, 'rate': bucket, 'how': how,
             'meas_us': t_meas * 1e6, 'pred_us': pr.time * 1e6, 'err': pr.time / t_meas - 1.0,
             'native_meas_us': None, 'native_pred_us': None, 'native_err': None, 'algorithm': pr.algo}
        if nat_bus > 0:
            tn = size * busf(op, n) / (nat_bus * 1e9)
            pn = model.native(op, n, size, link_n).time
            r.update(native_meas_us=tn * 1e6, native_pred_us=pn * 1e6, native_err=pn / tn - 1.0)
        elif codec == 'none':
            r.update(native_meas_us=r['meas_us'], native_pred_us=r['pred_us'], native_err=r['err'])
        res.append(r)
        for e in (r['err'], r['native_err']):
            if e is not None and (worst is None or abs(e) > abs(worst)):
                worst = e
    out.write('%-13s %-7s %4s %12s %9s %12s %12s %8s %12s %12s %8s  %s\n' % (
        'op', 'codec', 'N', 'size', 'rate', 'meas_us', 'pred_us', 'err', 'nat_meas', 'nat_pred', 'nat_err', 'how'))
    for r in res:
        nat = ('%12.1f %12.1f %+7.1f%%' % (r['native_meas_us'], r['native_pred_us'], 100 * r['native_err'])
               if r['native_err'] is not None else '%12s %12s %8s' % ('-', '-', '-'))
        flag = ' <-' if abs(r['err']) > tol or (r['native_err'] is not None and abs(r['native_err']) > tol) else ''
        out.write('%-13s %-7s %4d %12d %9.3g %12.1f %12.1f %+7.1f%% %s  %s%s\n' % (
            r['op'], r['codec'], r['nranks'], r['size'], r['rate'], r['meas_us'], r['pred_us'], 100 * r['err'],
            nat, r['how'], flag))
    for x in sorted(notes):
        out.write('# note: %s\n' % x)
    if not res:
        out.write('# no measured lines of allgather/reducescatter/allreduce/alltoall in %s\n' % path)
        return res, None, False
    ok = abs(worst) <= tol
    out.write('# %d lines; worst error %+.1f%% (tolerance %.0f%%): %s\n' % (
        len(res), 100 * worst, 100 * tol, 'PASS' if ok else 'FAIL'))
    return res, worst, ok


# ---- plot ----

def plot(model, path, ranks, rates, size, alpha, codecs):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        sys.stderr.write('coll_model: --plot needs matplotlib, which is not installed '
                         '(pip install matplotlib); no plot written\n')
        return False
    panels = [(c, o) for c, o in PLOT_PANELS if model.has(c) and c in codecs]
    if not panels:
        sys.stderr.write('coll_model: --plot: none of the codecs is in the inputs\n')
        return False
    cols = min(4, len(panels))
    rows_ = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.4 * rows_), squeeze=False)
    for i, (codec, op) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        for r in rates:
            ys = []
            for n in ranks:
                link = model.link_at(r, alpha)
                ys.append(model.native(op, n, size, link).time / model.libibp(op, codec, n, size, link).time)
            ax.plot(ranks, ys, marker='o', ms=3, label='%g Gbit/s' % r)
        ax.axhline(1.0, color='grey', lw=0.8, ls='--')
        ax.set_xscale('log', base=2)
        ax.set_yscale('log')
        plain = FuncFormatter(lambda v, _: '%g' % v)
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(  # label 2, 3, 5 x 10^k: the log axis spans little
            lambda v, _: '%g' % v if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 3, 5) else ''))
        ax.set_title('%s %s' % (codec, op), fontsize=10)
        ax.set_xlabel('ranks')
        ax.set_ylabel('speed-up over native')
        ax.grid(True, which='both', alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    for j in range(len(panels), rows_ * cols):
        axes[j // cols][j % cols].axis('off')
    fig.suptitle('libibp collectives, model, %s per call; inputs: %s' % (human(size), model.source), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def human(b):
    for unit, k in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
        if b >= k and b % k == 0:
            return '%d %s' % (b // k, unit)
    return '%d B' % b


def main(argv=None):
    ap = argparse.ArgumentParser(description='Analytical cost model of libibp\'s collectives (issue 38).',
                                 epilog='The model and its assumptions: the module docstring (pydoc '
                                        'tools/coll_model.py).')
    ap.add_argument('--inputs', action='append', default=[], metavar='FILE', help='inputs JSON (repeatable)')
    ap.add_argument('--example-inputs', action='store_true', help='print an inputs template and exit')
    ap.add_argument('--algorithms', action='store_true', help='print what libibp runs per op and exit')
    ap.add_argument('--ops', default=','.join(OPS))
    ap.add_argument('--codecs', default=','.join(CODECS))
    ap.add_argument('--ranks', default='2,4,8,16,32,64,128,256,512,1024')
    ap.add_argument('--rates', default='1,10,25,100,400', help='link rates, Gbit/s')
    ap.add_argument('--size', default='64M', help='logical bytes of the call (K/M/G binary)')
    ap.add_argument('--alpha', help='alpha for the sweep, plot and --where (e.g. 5us; bare number: us)')
    ap.add_argument('--cores', type=float, help='cores per rank (default: inputs cores_per_rank, else 2 x threads)')
    ap.add_argument('--piece-bytes', type=int, help='raw bytes a piece (default: the transport\'s)')
    ap.add_argument('--tree', action='store_true', help='add the double-binary-tree AllReduce (model only)')
    ap.add_argument('--json', metavar='OUT', help='write the rows (or validation) as JSON')
    ap.add_argument('--validate', metavar='MEASURED', help='ibp-coll-perf --json lines to check against')
    ap.add_argument('--tolerance', type=float, default=0.15)
    ap.add_argument('--plot', metavar='PNG')
    ap.add_argument('--where', action='store_true', help='break-even link rate per codec and N')
    a = ap.parse_args(argv)

    if a.example_inputs:
        json.dump(EXAMPLE_INPUTS, sys.stdout, indent=2)
        sys.stdout.write('\n')
        return 0
    if a.algorithms:
        print(algorithms_text())
        return 0
    if not a.inputs:
        ap.error('--inputs FILE is needed (--example-inputs prints a template)')
    try:
        model = Model(load_inputs(a.inputs), a.cores, a.piece_bytes)
        ops = [o for o in parse_list(a.ops, str)]
        codecs = [c for c in parse_list(a.codecs, str)]
        for o in ops:
            if o not in OPS:
                raise InputError('op %s (%s)' % (o, ', '.join(OPS)))
        for c in codecs:
            if c not in CODECS:
                raise InputError('codec %s (%s)' % (c, ', '.join(CODECS)))
        ranks = parse_list(a.ranks, int)
        if any(n < 2 for n in ranks):
            raise InputError('ranks must be >= 2')
        rates = parse_list(a.rates, float)
        if any(r <= 0 for r in rates):
            raise InputError('rates must be > 0')
        size = parse_size(a.size)
        alpha = parse_time(a.alpha) if a.alpha else model.alpha
    except (InputError, OSError, ValueError) as e:
        sys.stderr.write('coll_model: %s\n' % e)
        return 2
    alpha_src = '--alpha' if a.alpha else 'inputs link.alpha_s'
    missing = [c for c in codecs if not model.has(c)]
    if missing:
        sys.stderr.write('coll_model: not in the inputs, skipped: %s\n' % ', '.join(missing))

    if a.validate:
        try:
            res, worst, ok = validate(model, a.validate, a.tolerance)
        except OSError as e:
            sys.stderr.write('coll_model: %s\n' % e)
            return 2
        if a.json:
            with open(a.json, 'w') as f:
                json.dump({'inputs': model.source, 'tolerance': a.tolerance, 'worst_err': worst, 'rows': res}, f,
                          indent=1)
        if not res:
            return 2
        return 0 if ok else 1

    if a.plot:
        if not plot(model, a.plot, ranks, rates, size, alpha, codecs):
            return 2
        print('coll_model: wrote %s (alpha %.3f us, %s)' % (a.plot, alpha * 1e6, alpha_src))
        if not a.where:
            return 0

    if a.where:
        header(model, alpha, alpha_src)
        res = where(model, ops, codecs, ranks, size, alpha)
        if a.json:
            with open(a.json, 'w') as f:
                json.dump({'inputs': model.source, 'alpha_s': alpha, 'size': size, 'break_even': res}, f, indent=1)
        return 0

    header(model, alpha, alpha_src)
    rows = sweep(model, ops, codecs, ranks, rates, size, alpha, a.tree)
    print_rows(rows)
    notes = sorted({x for r in rows for x in r['notes']})
    for x in notes:
        print('# note: %s' % x)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'inputs': model.source, 'alpha_s': alpha, 'alpha_from': alpha_src, 'eff': model.eff,
                       'size': size, 'rows': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    if hasattr(signal, 'SIGPIPE'):  # | head: end quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
