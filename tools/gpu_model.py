"""gpu_model.py - the SASS cost model of the GPU decode kernels (the gather,
the embedding bag, the exponent and FP8 codecs; issue 36; docs/GPU.md "SASS
cost model"). Used by tools/sass-report.py --model.

Every SASS instruction of a modelled kernel gets an issue count per row
(group, block): the count of the *site* it belongs to, from the path
counts that bench/gpu_model_rows measures on real rows. A site is a source
loop (found in the SASS as a backward branch whose line information names
the loop's header line), a source line, or a guarded block of source lines
(found by a pattern on the source text, so that edits elsewhere do not move
them). An instruction belongs to the deepest site that holds it: loops by
SASS address range, lines and blocks by its inlined frames (line
information), ties to the narrower source range. The rates of the pipes and
the GPUs are below and in docs/GPU.md; they are not tuned to fit.
"""
import os
import re

# --- machine: written down once (docs/GPU.md "SASS cost model") ---------
# H100 SXM5 and H200: 132 SMs at 1.98 GHz boost (the same SM count and
# clock; they differ in HBM, which the decode does not bind on).
GPUS = [('H100 SXM', 132, 1.98), ('H200', 132, 1.98)]
# Host-to-device bandwidth achieved by a x16 link, GB/s.
PCIE = [('Gen4', 26.0), ('Gen5', 55.0)]
PCIE_LATENCY_US = 2.0
# Per SM and clock: warp instructions issued (4 schedulers), and lanes per
# pipe (CUDA C++ Programming Guide, arithmetic instruction throughput,
# compute capability 9.0: 32-bit integer add/logic/shift/compare 64, popc/
# clz 16, fp32 128, integer multiply-add 64, conversions and special
# functions 16; the load/store unit 32 lanes).
ISSUE_PER_CLOCK = 4
LANES = {'alu': 64, 'alu16': 16, 'fp32': 128, 'imad': 64, 'xu': 16, 'lsu': 32}
# Which lanes an opcode occupies. Everything else (branches, barriers,
# votes, uniform-datapath instructions, NOP) costs an issue slot only.
COST_OPS = {
    'alu': 'IADD3 LOP3 SHF SHL SHR ISETP SEL PRMT LEA IABS IMNMX BMSK FSEL FSETP PLOP3 P2R R2P VIADD VIMNMX '
           'ICMP IADD SGXT VABSDIFF VABSDIFF4 MOV CS2R S2R',
    'alu16': 'FLO POPC BREV',
    'fp32': 'FFMA FADD FMUL FMNMX HFMA2 HADD2 HMUL2 HMNMX2 F2FP',
    'imad': 'IMAD IMUL',
    'xu': 'MUFU I2F F2I F2F FRND I2IP FCHK',
    'lsu': 'LD LDG LDS LDL LDC LDSM ST STG STS STL ATOM ATOMS ATOMG RED LDGSTS SHFL MATCH',
}
COST_OF = {op: c for c, ops in COST_OPS.items() for op in ops.split()}
# The predicted rate is the binding pipe's at full use; the low end of the
# range assumes 70% of it (the issue's stated accuracy, +-30%).
LOW = 0.70
GATHER_BATCH = 65536  # rows per gather call: spreads the per-warp prologue

G, DV = 'kernels/ibp_gather.cu', 'kernels/ibp_device.cuh'

# (name, kind, file, function, pattern, counter, context)
# kind: loop (header line), line (one statement), block (a braced block
# from the pattern's line), span (from the pattern's line to the line of
# `context`'s pattern; context then means the end), error (any line in the
# file: a failure path, never taken on valid rows).
# Rows come from a packed store (offsets, flags and clusters arrays), the
# layout bench/gpu_model_rows encodes; the fixed-stride and meta32 branches
# of ibp_load_job are then never taken.
# counter: an expression over the path counts (bench/gpu_model_rows.c),
# nw (warps per group), warps (resident warps), pro (share of the rows
# started before the main loop); tile counts are those of the decode_chunks
# instance the instruction is in (rows that walk Xvals, or the others).
# context (loops): a site whose line must be an outer frame of the loop.
GATHER_SITES = [
    ('row_loop', 'loop', G, 'ibp_gather_kernel', r'for \(uint64_t k = k0; k < a\.n; k \+= ngroups\)', 'row_warps', None),
    ('prologue_loop', 'loop', G, 'ibp_gather_kernel', r'for \(unsigned q = 0; q \+ 1 < NB; q\+\+\)', 'warps * 2', None),
    ('start_pro', 'line', G, 'ibp_gather_kernel', r'ibp_start_job<NW>\(a, k0 \+ q \* ngroups', 'warps * 2', None),
    ('start_main', 'line', G, 'ibp_gather_kernel', r'ibp_start_job<NW>\(a, k \+ \(NB - 1\) \* ngroups', 'row_warps', None),
    ('fetch_pro', 'loop', DV, 'ibp_issue_fetch', r'for \(unsigned r = 0; r < np;', 'fetch_iter * pro', 'start_pro'),
    ('fetch_main', 'loop', DV, 'ibp_issue_fetch', r'for \(unsigned r = 0; r < np;', 'fetch_iter * (1 - pro)',
     'start_main'),
    ('raw', 'block', G, 'ibp_process', r'if \(mode == IBP_ROW_RAW\) \{', 'rows_raw * nw', None),
    ('copy_loop', 'loop', DV, 'ibp_copy_out', r'for \(uint64_t w = t; w < nw;', 'copy_iter', None),
    ('nowalk', 'block', G, 'ibp_process', r'if \(!h\.walk\) \{', '(rows - rows_raw - rows_walk) * nw', None),
    ('walk', 'span', G, 'ibp_process', r'/\* Xvals: the static part', 'rows_walk * nw', r'if \(a\.exact && h\.hdr \+'),
    ('walk_warp0', 'block', G, 'ibp_process', r'if \(IbpGroup<NW>::warp\(\) == 0\) \{', 'rows_walk', None),
    ('walk_call', 'line', G, 'ibp_process', r'st = ibp_walk_exc<C>\(a\.cd, rd, jb\.len', 'rows_walk', None),
    ('stride_rows', 'span', G, 'ibp_load_job', r'jb\.start = i \* a\.stride;', '0', r'jb\.len = a\.stride;'),
    ('meta32', 'block', G, 'ibp_load_job', r'if \(a\.meta32\) \{', '0', None),
    ('zero_out', 'line', G, 'ibp_gather_kernel', r'ibp_zero_out<NW>\(orow', '0', None),
    ('nerr', 'line', G, 'ibp_gather_kernel', r'atomicAdd\(a\.nerr', '0', None),
    ('error', 'error', G, None, r'^\s*(return IBP_ERR|return st;|jb\.pre = IBP_ERR)', '0', None),
]
# the decode (kernels/ibp_device.cuh), in the gather and bag kernels alike
DECODE_SITES = [
    ('walk_batch', 'loop', DV, 'ibp_walk_exc', r'for \(uint64_t bt = 0; bt < nbatch; bt\+\+\)', 'walk_batches', None),
    ('walk_full', 'span', DV, 'ibp_walk_exc', r'const uint64_t mj = act \? \(uint64_t\)m\[j\] : 0;', 'walk_full',
     r'pos \+= tot;'),
    ('walk_pend', 'loop', DV, 'ibp_walk_exc', r'for \(unsigned pend = __ballot_sync', 'walk_pend', None),
    ('walk_dep', 'line', DV, 'ibp_walk_exc', r': ibp_d_deposit(_c<C>)?\(rd\.bits\(body0 \+ start', 'walk_full', None),
    ('walk_dep_loop', 'loop', DV, 'ibp_d_deposit', r'while \(m\) \{', 'walk_dep_iter', 'walk_dep'),
    ('walk_dep_loop', 'loop', DV, 'ibp_d_deposit32', r'while \(m\) \{', 'walk_dep_iter', 'walk_dep'),
    ('patch_bytes', 'block', DV, 'ibp_d_patch_chunk', r'for \(uint64_t i = 0; i < nb; i\+\+\)', 'walk_patch_iter', None),
    ('patch_loop', 'loop', DV, 'ibp_d_patch_chunk', r'for \(uint64_t i = 0; i < nb; i\+\+\)', 'walk_patch_iter', None),
    ('vbitmap', 'block', DV, 'ibp_validate_row', r'if \(mode == IBP_ROW_BITMAP\) \{', 'rows_bitmap * nw', None),
    ('vbitmap_loop', 'loop', DV, 'ibp_validate_row', r'for \(uint64_t w = t; w \* 64 < D; w \+= G::SIZE\)',
     'vbitmap_iter', None),
    ('vlist', 'block', DV, 'ibp_validate_row', r'\} else if \(mode == IBP_ROW_LIST\) \{', 'rows_list * nw', None),
    ('vlist_loop', 'loop', DV, 'ibp_validate_row', r'for \(uint64_t k = t; k < n; k \+= G::SIZE\)', 'vlist_iter', None),
    ('vwalk', 'block', DV, 'ibp_validate_row', r'if \(h\.walk\) \{', 'rows_walk * nw', None),
    # the static part alone (CLEAN rows; rows whose Xval exceptions the walk patches)
    ('clean_loop', 'loop', DV, 'ibp_decode_clean', r'for \(IX r = 0; r \* NW < ntiles; r\+\+\)', 'ctiles', None),
    ('clean_zero', 'block', DV, 'ibp_decode_clean', r'if \(tso\[tile \+ 1\] == t0\) \{', 'ctiles_zero', None),
    ('clean_scan', 'span', DV, 'ibp_decode_clean', r'const uint64_t mj = active \? \(uint64_t\)m\[j\] : 0;', 'ctiles_scan',
     r'\(uint64_t\)b\[j\]\);'),
    ('cdep', 'line', DV, 'ibp_decode_clean', r'ibp_d_deposit_c<C>\(ibp_field<C>\(rd, body0 \+ t0', 'ctiles_scan', None),
    ('cdep_loop', 'loop', DV, 'ibp_d_deposit32', r'while \(m\) \{', 'cdep_iter', 'cdep'),
    ('cdep_loop', 'loop', DV, 'ibp_d_deposit', r'while \(m\) \{', 'cdep_iter', 'cdep'),
    ('tile_loop', 'loop', DV, 'ibp_decode_chunks', r'for \(IX r = 0; r \* NW < ntiles; r\+\+\)', 'tiles', None),
    ('active', 'block', DV, 'ibp_decode_chunks', r'if \(active\) \{', 'tiles_active', None),
    ('bitmap_bit', 'line', DV, 'ibp_decode_chunks', r'exc = rd\.bits\(j, 1\) != 0;', 'tiles_bitmap', None),
    # list rows: a warp that takes the tiles in order reads the tile's
    # entries; the block kernel searches
    ('list_call', 'line', DV, 'ibp_decode_chunks', r'exc = ibp_list_has\(rd, cd\.L, h\.n, j\);', 'tiles_list * search',
     None),
    ('list_tile', 'block', DV, 'ibp_decode_chunks', r'\} else if \(NW == 1 && mode == IBP_ROW_LIST\) \{',
     'tiles_list * (1 - search)', None),
    ('list_loop', 'loop', DV, 'ibp_list_has', r'while \(lo < hi\) \{', 'list_steps * search', None),
    ('dep1', 'line', DV, 'ibp_decode_chunks', r'uint64_t x = ibp_d_deposit', 'tiles_active', None),
    ('dep1_loop', 'loop', DV, 'ibp_d_deposit', r'while \(m\) \{', 'dep1_iter', 'dep1'),
    ('dep1_loop', 'loop', DV, 'ibp_d_deposit32', r'while \(m\) \{', 'dep1_iter', 'dep1'),
    ('dep2', 'line', DV, 'ibp_decode_chunks', r'x \|= ibp_d_deposit', 'tiles_exc', None),
    ('dep2_loop', 'loop', DV, 'ibp_d_deposit', r'while \(m\) \{', 'dep2_iter', 'dep2'),
    ('dep2_loop', 'loop', DV, 'ibp_d_deposit32', r'while \(m\) \{', 'dep2_iter', 'dep2'),
    ('nonexc', 'line', DV, 'ibp_decode_chunks', r'x \|= \(uint64_t\)b\[j\];', 'tiles_nonexc', None),
    # the store of a partial last chunk (or of a row not aligned to C: not
    # counted, output rows here are aligned)
    ('store_slow', 'line', DV, 'ibp_d_put', r'ibp_d_store_chunk<C>\(out, j, D, last_bytes, x\);', 'store_tiles', None),
    # a chunk stored byte by byte (the last one, when partial): the compiler
    # unrolls part of the loop outside its backward branch
    ('store_bytes', 'line', DV, 'ibp_d_store_chunk', r'for \(uint64_t i = 0; i < nb; i\+\+\)', 'store_tiles', None),
    ('store_loop', 'loop', DV, 'ibp_d_store_chunk', r'for \(uint64_t i = 0; i < nb; i\+\+\)', 'store_iter', None),
    ('error', 'error', DV, None, r'^\s*(return IBP_ERR|return st;)|bad = true;', '0', None),
]
B = 'kernels/ibp_bag.cu'
# the bag kernel: a warp per bag, each of its rows fetched, decoded and
# added in turn; sums of float32 rows, no weights (nn.EmbeddingBag's
# default); bags, dim_iter (ceil(dim / 32)) and half (0: float32 rows)
# come with the bag shape, BAG_IDS rows a bag
BAG_SITES = [
    ('bag_loop', 'loop', B, 'ibp_bag_kernel', r'for \(uint64_t b = \(uint64_t\)blockIdx\.x \* wpb \+ wib; b < a\.n_bags', 'bags',
     None),
    ('id_loop', 'loop', B, 'ibp_bag_kernel', r'for \(int64_t i = o0; st == IBP_OK && i < o1; i\+\+\)', 'rows', None),
    ('acc_loop', 'loop', B, 'ibp_bag_kernel', r'for \(uint64_t e = lane; e < a\.dim; e \+= 32\) \{\n\s*const float r = ',
     'rows * dim_iter', None),
    ('acc_max', 'line', B, 'ibp_bag_kernel', r'v = cnt == 0 \|\| r > acc\[e\]', '0', None),
    ('acc_weighted', 'line', B, 'ibp_bag_kernel', r'v = (__fadd_rn\(x, __fmul_rn|fmaf)\(w', '0', None),
    ('out_f32', 'loop', B, 'ibp_bag_kernel', r'for \(uint64_t e = lane; e < a\.dim; e \+= 32\)\n\s*of\[e\]',
     'bags * dim_iter * (1 - half)', None),
    ('out_half', 'loop', B, 'ibp_bag_kernel', r'for \(uint64_t e = lane; e < a\.dim; e \+= 32\) \{\n\s*/\* mean',
     'bags * dim_iter * half', None),
    ('elem_half', 'span', B, 'ibp_bag_elem', r'const uint16_t h = reinterpret_cast', 'rows * dim_iter * half',
     r'return a\.dt == 2 \?'),
    ('bag_empty', 'block', B, 'ibp_bag_kernel', r'if \(st != IBP_OK \|\| cnt == 0\) \{', '0', None),
    ('bag_nerr', 'line', B, 'ibp_bag_kernel', r'atomicAdd\(a\.nerr', '0', None),
    ('bag_fetch', 'line', B, 'ibp_bag_row', r'ibp_issue_fetch<1>\(stage, src, len', 'rows', None),
    ('fetch_bag', 'loop', DV, 'ibp_issue_fetch', r'for \(unsigned r = 0; r < np;', 'fetch_iter', 'bag_fetch'),
    ('bag_lens', 'span', B, 'ibp_bag_row', r'start = id \* a\.cd\.R;', '0', r'len = a\.lens\[id\] <'),
    ('raw', 'block', B, 'ibp_bag_decode', r'if \(mode == IBP_ROW_RAW\) \{', 'rows_raw', None),
    ('copy_loop', 'loop', DV, 'ibp_copy_out', r'for \(uint64_t w = t; w < nw;', 'copy_iter', None),
    ('nowalk', 'block', B, 'ibp_bag_decode', r'if \(!h\.walk\) \{', 'rows - rows_raw - rows_walk', None),
    ('walk', 'span', B, 'ibp_bag_decode', r'/\* Xvals: every chunk as matched', 'rows_walk', r'if \(exact && h\.hdr \+'),
    ('error', 'error', B, None, r'^\s*(return IBP_ERR|return st;)|st = IBP_ERR', '0', None),
]
E, F = 'kernels/exp_codec.cu', 'kernels/fp8.cu'
# expk_decode: a block of 256 threads (nw = 8 warps) per group of 4,096
# elements in 16 rounds; group 0 of a chunk checks the chunk's padding
EXP_SITES = [
    ('exp_groups', 'loop', E, 'expk_decode', r'for \(uint64_t gid = blockIdx\.x; gid < b\.nchunks \* b\.gpc;', 'groups * nw',
     None),
    ('exp_raw', 'block', E, 'expk_decode', r'if \(blk\[EXPF_OFF_MODE\] == EXPF_MODE_RAW\) \{', 'raw_groups * nw', None),
    ('exp_g0', 'block', E, 'expk_decode', r'if \(g == 0\) \{', 'chunks * nw', None),
    ('exp_planes', 'loop', E, 'expk_decode', r'for \(uint32_t p = 0; p < L\.nplanes; p\+\+\) \{', 'chunks * nw * nplanes',
     None),
    # the padding bytes of a plane: fewer than a warp's stride (one round)
    ('exp_plane_pad', 'loop', E, 'expk_decode', r'for \(uint64_t i = len / 8 \+ t; i < L\.plane_bytes',
     'chunks * nw * nplanes', None),
    ('exp_zero', 'loop', E, 'expk_zero', r'for \(uint64_t i = from \+ threadIdx\.x; i < to', 'chunks * nw', 'exp_g0'),
    ('exp_hdr_table', 'loop', E, 'expk_header_ok', r'for \(int i = 0; i < \(int\)EXPF_NCODES; i\+\+\)',
     'groups * nw * 7', None),
    ('exp_round', 'loop', E, 'expk_decode', r'for \(uint32_t r = 0; r < 16; r\+\+\) \{', 'warp_rounds', None),
    ('exp_wsum', 'loop', E, 'expk_decode', r'for \(uint32_t w = 0; w < EXPK_THREADS / 32; w\+\+\) \{',
     'warp_rounds * 8', None),
    ('exp_valid', 'block', E, 'expk_decode', r'if \(valid\) \{', 'valid_rounds', None),
    ('exp_escape', 'block', E, 'expk_decode', r'if \(code == 0\) \{', 'esc_rounds', None),
    ('exp_intab', 'loop', E, 'expk_decode', r'for \(int q = 0; q < 7; q\+\+\)', 'esc_rounds * 7', None),
    ('exp_f32', 'block', E, 'expk_decode', r'if \(b\.dt == EXPF_DT_F32\) \{\n\s*sm = ', 'valid_rounds * f32', None),
    ('exp_half', 'line', E, 'expk_decode', r'sm = blk\[L\.off_lo \+ i\];', 'valid_rounds * (1 - f32)', None),
    ('exp_f16', 'block', E, 'expk_decode', r'if \(b\.dt == EXPF_DT_F16\) \{\n\s*uint64_t w = wbase', 'valid_rounds * f16',
     None),
    ('error', 'error', E, None, r'expk_fail\(status|ok = false;|return false;', '0', None),
]
# fp8k_decode: a block of T threads (nw warps) per codec block of B
# elements; itB / itH: a warp's iterations of the loops over B and B / 2
# elements, summed over the block's warps
FP8_SITES = [
    ('fp8_blocks', 'loop', F, 'fp8k_decode', r'for \(uint64_t gid = blockIdx\.x; gid < sh\.nchunks \* sh\.mpc;',
     'blocks * nw', None),
    # the header's reserved bytes 17..63, checked by every warp of a chunk's block 0
    ('fp8_hdr', 'loop', 'src/fp8/fp8_impl.h', 'taco_header_rest_ok', r'for \(uint32_t i = 17; i < TACO_HEADER_BYTES; i\+\+\)',
     'chunks * nw * 47', None),
    ('fp8_pad', 'block', F, 'fp8k_decode', r'if \(blk == 0\) \{', 'chunks * nw', None),
    ('fp8_pad_loop', 'loop', F, 'fp8k_decode', r'for \(uint64_t i = used \+ threadIdx\.x; i < total', 'chunks * nw', None),
    ('fp8_codes', 'loop', F, 'fp8k_decode', r'for \(uint32_t i = threadIdx\.x; i < B; i \+= T\) \{', 'blocks * itB', None),
    ('fp8_nan', 'block', F, 'fp8k_decode', r'if \(isnan\) \{', '0', None),
    ('fp8_z', 'loop', F, 'fp8k_decode', r'for \(uint32_t i = threadIdx\.x; i < B; i \+= T\)\n\s*z\[i\]', 'blocks * itB',
     None),
    ('fp8_had', 'line', F, 'fp8k_decode', r'fp8k_hadamard\(z, sh\.log2b\);', 'blocks * nw * hadamard', None),
    ('had_stage', 'loop', F, 'fp8k_hadamard', r'for \(uint32_t h = 1; h < B; h <<= 1\) \{',
     'blocks * nw * log2b * hadamard', None),
    ('had_fly', 'loop', F, 'fp8k_hadamard', r'for \(uint32_t p = threadIdx\.x; p < B / 2; p \+= blockDim\.x\) \{',
     'blocks * log2b * itH * hadamard', None),
    ('had_scale', 'loop', F, 'fp8k_hadamard', r'for \(uint32_t i = threadIdx\.x; i < B; i \+= blockDim\.x\)',
     'blocks * itB * hadamard', None),
    ('fp8_store', 'loop', F, 'fp8k_decode', r'for \(uint32_t i = threadIdx\.x; i < len; i \+= T\)\n\s*fp8k_store\(out, sh\.dt, base \+ i, FP_MUL\(z',
     'blocks * itB', None),
    ('error', 'error', F, None, r'fp8k_fail\(status\)', '0', None),
]
FAMILIES = {'gather': GATHER_SITES + DECODE_SITES, 'bag': BAG_SITES + DECODE_SITES, 'exp': EXP_SITES,
            'fp8': FP8_SITES}
BAG_IDS = 20
TILE_COUNTS = ('tiles', 'tiles_active', 'tiles_bitmap', 'tiles_list', 'list_steps', 'tiles_exc', 'tiles_nonexc',
               'dep1_iter', 'dep2_iter', 'store_iter', 'store_tiles', 'ctiles', 'ctiles_zero', 'ctiles_scan',
               'cdep_iter')
# The rows a gather reads through IbpGlobalReader (not staged): none when
# every row fits its stage buffer, as for every data set here; that copy of
# the decode counts 0.


class ModelError(Exception):
    pass


def _lines(repo, path, cache={}):
    if path not in cache:
        cache[path] = open(os.path.join(repo, path), encoding='utf-8', errors='replace').read().split('\n')
    return cache[path]


def _block_end(lines, i):
    """Line index of the brace closing the last '{' on line i (or, for a
    statement without braces, the next line ending in ';')."""
    if not lines[i].rstrip().endswith('{'):
        for k in range(i, len(lines)):
            if lines[k].rstrip().endswith(';'):
                return k
        return i
    depth = 0
    for k in range(i, len(lines)):
        s = lines[k] if k > i else lines[i][lines[i].rfind('{'):]
        for ch in s:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0:
                    return k
    raise ModelError('unbalanced braces after %s' % lines[i])


def _error_range(lines, i):
    """A failure statement and, when it opens a small braced block of an if
    (`if (bad) { st = ...; return x; }`, or `if (bad) { if (t == 0)
    fail(); continue; }`) that holds nothing but it and exits, the rest of
    that block: taken only on failure. The condition itself runs on every
    path, and so does what follows a one-statement if."""
    for k in (i - 1, i - 2):
        if k < 0 or (k == i - 2 and not re.match(r'^\s*if \(.*\)\s*$', lines[i - 1])):
            break
        if re.match(r'^\s*(\} else )?if \(.*\{\s*$', lines[k]):
            e = _block_end(lines, k)
            if e - k <= 6 and e > i and all(_EXIT.match(l) for l in lines[i + 1:e]):
                return (k + 2, e + 1)
            break
    return (i + 1, i + 1)


_EXIT = re.compile(r'^\s*(continue;|break;|return\b.*;|\})\s*$')


def resolve_sites(repo, func_at, family='gather'):
    """Each site with its source lines: {'name', 'kind', 'file', 'lines':
    [(first, last)], 'counter', 'context'} (1-based lines). Raises
    ModelError when a pattern matches nothing (the model would silently
    stop weighting that path)."""
    out = []
    for name, kind, path, func, pat, counter, ctx in FAMILIES[family]:
        lines = _lines(repo, path)
        rx = re.compile(pat)
        two = r'\n' in pat  # a pattern over a line and the next
        hits = [i for i, l in enumerate(lines) if rx.search(l + '\n' + (lines[i + 1] if i + 1 < len(lines) else '')
                                                         if two else l) and
                (func is None or func_at(os.path.join(repo, path), i + 1) == func)]
        if not hits:
            raise ModelError('site %s: no line of %s in %s matches %r' % (name, func or 'any function', path, pat))
        ranges = []
        for i in hits:
            if kind == 'error':
                ranges.append(_error_range(lines, i))
            elif kind == 'line':
                ranges.append((i + 1, _block_end(lines, i) + 1 if not lines[i].rstrip().endswith(';') else i + 1))
            elif kind == 'span':
                end = re.compile(ctx)
                k = next((k for k in range(i + 1, len(lines)) if end.search(lines[k])), None)
                if k is None:
                    raise ModelError('site %s: no end line %r' % (name, ctx))
                ranges.append((i + 1, k + 1))
            else:
                ranges.append((i + 1, _block_end(lines, i) + 1))
        out.append({'name': name, 'kind': kind, 'file': path, 'lines': ranges, 'counter': counter,
                    'context': ctx if kind == 'loop' else None})
    return out


def _in(site, frame):
    f, l = frame
    return f == site['file'] and any(a <= l <= b for a, b in site['lines'])


def main_body(ins):
    """Index one past the kernel's main code: the stubs after it (reached
    only when a warp arrives at a warp-synchronous intrinsic diverged, as
    the decode never does) hold WARPSYNC.COLLECTIVE."""
    first = next((i for i, x in enumerate(ins) if x['op'].startswith('WARPSYNC.COLLECTIVE')), len(ins))
    end = first
    while end > 0 and ins[end - 1]['op'] != 'EXIT':
        end -= 1
    return end if end > 0 else first


def weigh(ins, labels, sites, counts, walk_counts, nw, warps, rows, extra=None, chunks=0):
    """Issue counts of every instruction of one kernel. ins: dicts with
    addr, op, target, chain (innermost frame first, (file, line) with
    repository-relative files). Returns per instruction (count, site) and
    the loops found [(start, end, site or None)]."""
    end = main_body(ins)
    by_name = {}
    for s in sites:
        by_name.setdefault(s['name'], []).append(s)
    loops = []
    for x in ins[:end]:
        t = x['target']
        if not (t and x['op'].split('.')[0] == 'BRA' and t in labels and labels[t] <= x['addr']):
            continue
        found = None
        for d, fr in enumerate(x['chain']):
            for s in sites:
                if s['kind'] != 'loop' or fr != (s['file'], s['lines'][0][0]):
                    continue
                if s['context'] and not any(_in(c, f2) for c in by_name[s['context']] for f2 in x['chain'][d + 1:]):
                    continue
                found = (d, s)
                break
            if found:
                break
        depth = len(x['chain']) - 1 - found[0] if found else None
        d0 = found[0] if found else 0
        loops.append({'start': labels[t], 'end': x['addr'], 'site': found[1] if found else None, 'depth': depth,
                      'size': found[1]['lines'][0][1] - found[1]['lines'][0][0] if found else 0,
                      'header': (x['chain'][d0], len(x['chain']) - 1 - d0)})
    # unrolled loops: a body holding u copies of a source iteration runs
    # count / u times. A copy shows as a load of the same inlined source
    # line and kind at another offset from the same base ([R16.64],
    # [R16.64+0x1], ...).
    # Only innermost loops are taken as unrolled: an outer loop's body also
    # holds the iterations an inner loop peels off (once per entry).
    for lp in loops:
        lp['unroll'] = 1
        if any(q is not lp and lp['start'] <= q['start'] and q['end'] <= lp['end'] for q in loops):
            continue
        hdr, hdepth = lp['header']
        seen = {}
        for x in ins[:end]:
            a = x['addr']
            if not (lp['start'] <= a <= lp['end']):
                continue
            if not x['op'].startswith('LD') or not x.get('mem'):
                continue
            # the load's frame in the loop's own function must lie in the
            # loop's own body, not in a loop nested in it (a fully unrolled
            # inner loop repeats its loads too)
            k = len(x['chain']) - 1 - hdepth
            if k < 0 or x['chain'][k][0] != hdr[0] or _src_loop(repo_of(), hdr[0], x['chain'][k][1]) != hdr[1]:
                continue
            base = re.sub(r'\+0x[0-9a-f]+', '', x['mem'])
            key = (x['chain'], x['op'], base)
            seen.setdefault(key, set()).add(x['mem'])
        lp['unroll'] = max([len(v) for v in seen.values()] or [1])
    # the rows read in place: the code between two instructions of
    # IbpGlobalReader with none of IbpStageReader between them (the
    # compiler lays each reader's copy of the decode out in one piece; its
    # line information for the call site is not reliable)
    marks = [(x['addr'], _reader_of(x['chain'])) for x in ins[:end]]
    marks = [m for m in marks if m[1]]
    glob = set()
    for k in range(len(marks) - 1):
        if marks[k][1] == 'global' and marks[k + 1][1] == 'global':
            glob.add(k)
    gaddr = [(marks[k][0], marks[k + 1][0]) for k in sorted(glob)]
    # loop versions: the compiler may emit one loop several times, each
    # behind its own test of a value fixed for the launch (unswitching);
    # one of them runs, and the model counts each at 1/k of the site's
    # count (the versions are about the same size). Copies in code that
    # does not run here (the other reader) are not versions.
    for lp in loops:
        lp['versions'] = 1
    by_site = {}
    for lp in loops:
        if lp['site'] is not None and not _within(gaddr, lp['end']):
            by_site.setdefault((lp['site']['name'], tuple(f for f in _context(ins, lp['end']))), []).append(lp)
    for group in by_site.values():
        outer = [q for q in group if not any(r is not q and r['start'] <= q['start'] and q['end'] <= r['end']
                                             for r in group)]
        for q in group:
            q['versions'] = len(outer)
    # a gather of GATHER_BATCH rows: each resident warp runs the kernel's
    # prologue once and starts two rows before the main loop
    pro = min(1.0, warps * 2.0 / GATHER_BATCH)
    search = 1 if nw > 1 else 0  # list rows: binary search, or the tile's own entries
    wshare = warps * float(rows) / GATHER_BATCH
    env_all = dict(counts, nw=nw, warps=wshare, pro=pro, search=search, **(extra or {}))
    env_walk = dict(env_all, **{k: walk_counts.get(k, 0) for k in TILE_COUNTS})
    out = []
    for i, x in enumerate(ins):
        if i >= end:
            out.append((0.0, 'stub'))
            continue
        cands = []
        for lp in loops:
            if lp['site'] is not None and lp['start'] <= x['addr'] <= lp['end']:
                cands.append((lp['depth'], -lp['size'], 1, lp['site'], lp))
        unmodeled = any(lp['site'] is None and lp['start'] <= x['addr'] <= lp['end'] for lp in loops)
        n = len(x['chain'])
        walk = False
        for d, fr in enumerate(x['chain']):
            for s in sites:
                if s['kind'] == 'loop' or not _in(s, fr):
                    continue
                if s['name'] == 'walk':
                    walk = True
                a, b = next((a, b) for a, b in s['lines'] if a <= fr[1] <= b)
                cands.append((n - 1 - d, -(b - a), 0, s, None))
        if not cands:
            c, name = wshare, 'kernel'
        else:
            best = max(cands, key=lambda c: c[:3])
            s = best[3]
            c = float(eval(s['counter'], {}, env_walk if walk else env_all))
            if best[4] is not None:
                c /= best[4]['unroll'] * best[4]['versions']
            name = s['name']
        if _within(gaddr, x['addr']):
            c, name = 0.0, 'global_reader'
        if unmodeled and name != 'global_reader' and c:
            name = 'unmodeled_loop:' + name
        out.append((c, name))
    return out, loops


_READER_LINES = {}


def _reader_of(chain):
    for f, l in chain:
        if f == DV:
            for name, (a, b) in _READER_LINES.items():
                if a <= l <= b:
                    return name
    return None


_REPO = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]


def repo_of():
    return _REPO[0]


_LOOPS = {}


def _src_loop(repo, path, line):
    """Header line of the innermost for/while statement of `path` whose
    body holds `line` (the header itself counts as its own), or None."""
    if path not in _LOOPS:
        try:
            lines = _lines(repo, path)
        except OSError:
            lines = []
        spans = []
        for i, l in enumerate(lines):
            if re.match(r'^\s*(for|while)\s*\(', l):
                try:
                    spans.append((i + 1, _block_end(lines, i) + 1))
                except ModelError:
                    pass
        _LOOPS[path] = spans
    best = None
    for a, b in _LOOPS[path]:
        if a <= line <= b and (best is None or a > best[0]):
            best = (a, b)
    return best[0] if best else None


def _context(ins, addr):
    """The outer frames of the instruction at addr (its call sites)."""
    x = next(x for x in ins if x['addr'] == addr)
    return x['chain'][1:]


def _within(spans, addr):
    """Whether addr lies in one of the sorted (first, last) spans."""
    lo, hi = 0, len(spans)
    while lo < hi:
        mid = (lo + hi) // 2
        if spans[mid][1] < addr:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(spans) and spans[lo][0] <= addr <= spans[lo][1]


def set_reader_lines(repo):
    lines = _lines(repo, DV)
    for struct, name in (('IbpGlobalReader', 'global'), ('IbpStageReader', 'stage')):
        i = next((i for i, l in enumerate(lines) if l.startswith('struct %s' % struct)), None)
        if i is None:
            raise ModelError('struct %s not found in %s' % (struct, DV))
        _READER_LINES[name] = (i + 1, _block_end(lines, i) + 1)


def cost_class(op):
    base = op.split('.')[0]
    if op.startswith('IMAD.MOV') or op.startswith('IMAD.IADD') or op.startswith('IMAD.SHL'):
        return 'imad'
    return COST_OF.get(base)


def predict(ins, weights, stats):
    """Instructions per row and byte by pipe, the binding pipe, predicted
    GB/s per GPU, the PCIe feed, rows and bytes in flight."""
    rows, R = stats['rows'], stats['row_bytes']
    tot, pipes, by_site = 0.0, {}, {}
    lanes = {k: 0.0 for k in LANES}
    unacc = 0.0
    for x, (c, site) in zip(ins, weights):
        if not c:
            continue
        tot += c
        cl = cost_class(x['op'])
        if cl:
            lanes[cl] += c
        key = cl or 'issue-only'
        pipes[key] = pipes.get(key, 0.0) + c
        by_site[site] = by_site.get(site, 0.0) + c
        if site.startswith('unmodeled_loop'):
            unacc += c
    per_row = tot / rows
    # SM cycles per row: the issue slots, and each pipe's lanes
    cyc = {'issue': per_row / ISSUE_PER_CLOCK}
    cyc['alu'] = (lanes['alu'] * 32.0 / LANES['alu'] + lanes['alu16'] * 32.0 / LANES['alu16']) / rows
    cyc['fma'] = (lanes['fp32'] * 32.0 / LANES['fp32'] + lanes['imad'] * 32.0 / LANES['imad']) / rows
    cyc['xu'] = lanes['xu'] * 32.0 / LANES['xu'] / rows
    cyc['lsu'] = lanes['lsu'] * 32.0 / LANES['lsu'] / rows
    bind = max(cyc, key=cyc.get)
    ratio = R * rows / float(stats['encoded_bytes'])
    gpus = []
    for name, sms, ghz in GPUS:
        gbs = sms * ghz * 1e9 / cyc[bind] * R / 1e9
        gpus.append({'gpu': name, 'decoded_GBps': gbs, 'low': gbs * LOW})
    feeds = [{'link': n, 'GBps': g, 'decoded_GBps': g * ratio} for n, g in PCIE]
    return {'instructions_per_row': per_row, 'instructions_per_byte': per_row / R, 'by_pipe': {
        k: v / rows for k, v in pipes.items()}, 'by_site': {k: v / rows for k, v in by_site.items()},
        'cycles_per_row': cyc, 'binding': bind, 'gpus': gpus, 'pcie': feeds, 'ratio': ratio,
        'accounted': 1.0 - unacc / tot if tot else 0.0}


# Launch geometry (kernels/ibp_gather.cu ibp_gather_config, on an H100/H200:
# 227 KiB of shared memory per block, 228 KiB per SM with 1 KiB reserved
# per block, 64 K registers allocated per warp in units of 256, at most
# 2,048 threads and 32 blocks per SM).
OPTIN, SM_SMEM, JOB, SMS = 227 * 1024, 228 * 1024, 40, 132


def blocks_per_sm(regs, threads, smem):
    """Resident blocks of `threads` threads, `regs` registers a thread and
    `smem` bytes of shared memory on one SM."""
    per_warp = max(256, (regs * 32 + 255) // 256 * 256)
    return min((65536 // per_warp) // (threads // 32), 2048 // threads, 32, SM_SMEM // (smem + 1024))


def geometry(E, regs, consts):
    """Warps resident per GPU, rows and groups in flight, for rows whose
    longest encoding is E bytes (ibp_gather_config's choice and stages)."""
    NBUF, GROUPS, BW, WMAX = consts
    want = (E + 32 + 15) // 16 * 16
    if E <= WMAX:
        nw = 1
        nbuf = NBUF if OPTIN >= NBUF * (want + JOB) else 2
        stage = min(want, (OPTIN // nbuf - JOB) & ~15)
        gpb = max(1, min(GROUPS, OPTIN // (nbuf * (stage + JOB))))
        threads, smem = 32 * gpb, gpb * nbuf * (stage + JOB)
    else:
        nw, scratch = BW, 8 * 5 * BW
        nbuf = NBUF if OPTIN >= NBUF * (want + JOB) + scratch else 2
        stage = min(want, ((OPTIN - scratch) // nbuf - JOB) & ~15)
        gpb, threads = 1, 32 * BW
        smem = nbuf * (stage + JOB) + scratch
    wpb = threads // 32
    blocks = blocks_per_sm(regs, threads, smem)
    return {'nw': nw, 'nbuf': nbuf, 'groups_per_block': gpb, 'threads': threads, 'blocks_per_sm': blocks,
            'warps_per_sm': blocks * wpb, 'warps': SMS * blocks * wpb,
            'rows_in_flight': SMS * blocks * gpb * (nbuf - 1)}


def gather_consts(repo):
    src = '\n'.join(_lines(repo, G))
    out = []
    for name in ('IBP_GATHER_NBUF', 'IBP_WARP_GROUPS', 'IBP_BLOCK_WARPS', 'IBP_WARP_MAX_ROW'):
        m = re.search(r'#define %s (\d+)' % name, src)
        if not m:
            raise ModelError('cannot find %s in %s' % (name, G))
        out.append(int(m.group(1)))
    return tuple(out)


def bag_geometry(R, dim, regs, bag_warps):
    """The bag kernel's launch (kernels/ibp_bag.cu ibpi_bag_launch_cuda): a
    warp per bag, each row fetched and decoded before the next (one row in
    flight per warp)."""
    per = (R + 32 + 15) // 16 * 16 + (R + 15) // 16 * 16 + (dim * 4 + 15) // 16 * 16
    wpb = max(1, min(bag_warps, OPTIN // per))
    threads, smem = 32 * wpb, wpb * per
    blocks = blocks_per_sm(regs, threads, smem)
    return {'nw': 1, 'nbuf': 1, 'groups_per_block': wpb, 'threads': threads, 'blocks_per_sm': blocks,
            'warps_per_sm': blocks * wpb, 'warps': SMS * blocks * wpb, 'rows_in_flight': SMS * blocks * wpb}


def bag_warps(repo):
    m = re.search(r'#define IBP_BAG_WARPS (\d+)', '\n'.join(_lines(repo, B)))
    if not m:
        raise ModelError('cannot find IBP_BAG_WARPS in %s' % B)
    return int(m.group(1))


def codec_geometry(regs, threads, smem):
    """Warps resident per SM and GPU for a codec kernel of `threads`
    threads and `smem` bytes of shared memory a block."""
    wpb = threads // 32
    blocks = blocks_per_sm(regs, threads, smem)
    return {'nw': wpb, 'threads': threads, 'blocks_per_sm': blocks, 'warps_per_sm': blocks * wpb,
            'warps': SMS * blocks * wpb, 'rows_in_flight': 0}


def strided_warps(n, step, nw):
    """A warp's iterations of `for (i = tid; i < n; i += step)`, summed
    over nw warps."""
    return sum(max(0, -(-(n - 32 * w) // step)) for w in range(nw))
