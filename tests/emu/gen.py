#!/usr/bin/env python3
"""Turns kernels/*.cu into host C++ for the emulator (emu.h). Usage: gen.py REPO OUT

OUT/k_{gather,encode,train,exp,fp8,dynamiq,rcmoe,slab,bag,coll_reduce}.inc  kernels/*.cu, whole: their host code
                                 (launch configuration, stores, workspaces)
                                 runs against the H100 runtime stub (stub/,
                                 cuda_stub.cpp)
OUT/ibp_device.cuh               kernels/ibp_device.cuh
OUT/pinned_cudahost.c            src/mem/pinned_cudahost.c (C host code, built against the stub)
OUT/kv_cuda.c                    cache/kv_cuda.c (C host code, instrumented, against the stub)
OUT/transport_nccl.c             src/coll/transport_nccl.c (C, instrumented, against the NCCL stand-in)
OUT/mem_device.c                 src/coll/mem_device.c (C, instrumented, in harness_coll)

Rewrites: `__shared__ T x[N];` becomes a per-block shared variable and
`extern __shared__ T x[];` the block's dynamic shared memory (launches go
through kernels/cuda_check.h's ibp_cuda_launch, which the stub runs; a
`k<<<cfg>>>(args)` left anywhere is rewritten to an emulator call). It also
plants the deliberate defects of run.sh defects, each behind
`emu_defect == N`, so that one build serves both; every pattern must match
exactly once, or gen.py fails (a kernel change must not silently disarm a
defect)."""
import re
import sys

repo, out = sys.argv[1], sys.argv[2]
src = repo + '/kernels/'


def defect(text, old, new, count=1):
    n = text.count(old)
    if n != count:
        sys.exit('gen.py: defect pattern found %d times (want %d): %r' % (n, count, old))
    return text.replace(old, new)


slot = [0]


def shared(text):
    text = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];',
                  r'\1 *\2 = (\1 *)emu_dyn_smem();', text)

    def one(m):
        ty, decls = m.group(1), m.group(2)
        res = []
        for d in decls.split(','):
            d = d.strip()
            dm = re.match(r'(\w+)\s*((?:\[[^\]]+\])*)$', d)
            if not dm:
                sys.exit('gen.py: cannot parse __shared__ declarator %r' % d)
            slot[0] += 1
            name, dims = dm.group(1), dm.group(2)
            res.append('static emu_sslot emu_ss_%d; auto &%s = *emu_shared<%s%s>(emu_ss_%d);'
                       % (slot[0], name, ty, dims, slot[0]))
        return ' '.join(res)
    text = re.sub(r'__shared__\s+(?:__align__\(\d+\)\s+)?((?:unsigned |signed |long |const )*\w+)\s+([^;]+);',
                  one, text)
    if '__shared__' in text:
        sys.exit('gen.py: a __shared__ declaration was not rewritten')
    return text


def launches(text):
    text, n = re.subn(r'([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\(', r'emu_kcall(\2).run(\1, ', text, flags=re.S)
    return text


dev = open(src + 'ibp_device.cuh').read()
# defect 39: list rows (a warp's tiles in order): the list position not
# advanced past a tile's entries, so later tiles take earlier entries
dev = defect(dev, 'lp += (unsigned)__popc(__ballot_sync(IBP_FULL_MASK, in));',
             'lp += emu_defect == 39 ? 0u : (unsigned)__popc(__ballot_sync(IBP_FULL_MASK, in));')
# defect 41: the 32-bit deposit shifting v one bit short after a run
dev = defect(dev, 'v = __funnelshift_rc(v, 0u, (unsigned)__popc(run));',
             'v = __funnelshift_rc(v, 0u, (unsigned)__popc(run) - (emu_defect == 41 ? 1u : 0u));')
# defect 42: a decoded chunk stored as one word into an output row that is
# not aligned to C (rows of R % C != 0 bytes)
dev = defect(dev, 'if (((uintptr_t)out % C) != 0)\n\t\treturn 0;',
             'if (((uintptr_t)out % C) != 0 && emu_defect != 42)\n\t\treturn 0;')
# defect 44: a clean tile with static bits decoded as the base row
dev = defect(dev, 'if (tso[tile + 1] == t0) {', 'if (tso[tile + 1] == t0 || emu_defect == 44) {')
# defect 46: a bitmap row's exception widths summed with each plane's
# weight doubled (the validator's E too large: valid rows refused)
dev = defect(dev, 'le += (uint64_t)ibp_d_popc(v & ewp[w * P + p]) << p;',
             'le += (uint64_t)ibp_d_popc(v & ewp[w * P + p]) << (p + (emu_defect == 46 ? 1u : 0u));')
# defect 40: the OR of a tile's exception offsets over half of the warp
dev = defect(dev, 'const unsigned tm = __reduce_or_sync(IBP_FULL_MASK, in ? 1u << (unsigned)(e & 31) : 0u);',
             'const unsigned tm = __reduce_or_sync(emu_defect == 40 ? 0x0000ffffu : IBP_FULL_MASK, '
             'in ? 1u << (unsigned)(e & 31) : 0u);')
# defect 4: a shuffle whose mask leaves out half of the warp
dev = defect(dev, 'unsigned u = __shfl_up_sync(IBP_FULL_MASK, v, o);',
             'unsigned u = __shfl_up_sync(emu_defect == 4 ? 0x0000ffffu : IBP_FULL_MASK, v, o);')
# defect 5: the staged fetch reads one byte past the row's extent: the tail
# count is one too large where the row's last sector crosses the store's end
# (the only place a fetch must not read the rest of the row's sector)
dev = defect(dev, 'const uint64_t nt = e - ts;', 'const uint64_t nt = e - ts + (emu_defect == 5 && tx ? 1u : 0u);')
# defect 8 (a performance defect, for the pcie suite): a warp's pieces
# counted from the row's first piece instead of the 128-byte line below it,
# so a sector can fall into two warp instructions and be fetched twice
dev = defect(dev, 'const uintptr_t base = w0 & ~(uintptr_t)127;',
             'const uintptr_t base = emu_defect == 8 ? w0 : w0 & ~(uintptr_t)127;')
def put(name, text):
    # unchanged outputs keep their time stamps (run.sh rebuilds on newer files)
    path = out + '/' + name
    try:
        if open(path).read() == text:
            return
    except OSError:
        pass
    open(path, 'w').write(text)


put('ibp_device.cuh', dev)
# the device store and the gather's arguments (included by ibp_gather.cu and
# ibp_bag.cu): beside the instrumented ibp_device.cuh, which it includes
put('ibp_store.cuh', open(src + 'ibp_store.cuh').read())

gather = open(src + 'ibp_gather.cu').read()
# defect 45 (performance, pcie suite): the kernel chosen by the decoded row
# size instead of the longest encoding (sparse rows a block each)
gather = defect(gather, 'kind = E <= IBP_WARP_MAX_ROW ? IBP_CUDA_KERNEL_WARP : IBP_CUDA_KERNEL_BLOCK;',
                'kind = (emu_defect == 45 ? R : E) <= IBP_WARP_MAX_ROW ? IBP_CUDA_KERNEL_WARP : IBP_CUDA_KERNEL_BLOCK;')
# defect 3: a wait_group one too large (nbuf where nbuf - 1 is needed):
# request k's group may still be in flight
gather = defect(gather, '''		if (NB == 3)
			ibp_cp_async_wait<2>(); /* this thread's pieces of request k are in */
		else
			ibp_cp_async_wait<1>();''',
                '''		if (NB == 3 && emu_defect == 3)
			ibp_cp_async_wait<3>();
		else if (NB == 3)
			ibp_cp_async_wait<2>();
		else if (emu_defect == 3)
			ibp_cp_async_wait<2>();
		else
			ibp_cp_async_wait<1>();''')

encode = open(src + 'ibp_encode.cu').read()
# defect 1: a plain |= for atomicOr
for w, i in (('w0', 'wi'), ('w1', 'wi + 1'), ('w2', 'wi + 2')):
    encode = defect(encode, 'atomicOr(w + %s, %s);' % (i, w),
                    '{ if (emu_defect == 1) w[%s] |= %s; else atomicOr(w + %s, %s); }' % (i, w, i, w))
# defect 6: put_bits without the clamp to the group's stage words
encode = defect(encode, 'if (w0 && wi < nw)', 'if (w0 && (emu_defect == 6 || wi < nw))')
encode = defect(encode, 'if (w1 && wi + 1 < nw)', 'if (w1 && (emu_defect == 6 || wi + 1 < nw))')
encode = defect(encode, 'if (w2 && wi + 2 < nw)', 'if (w2 && (emu_defect == 6 || wi + 2 < nw))')
# defect 2: no barrier before the stage is reused for the next row
encode = defect(encode, 'G::sync(); /* the stage is zeroed again for the next row */',
                'if (emu_defect != 2) G::sync(); /* the stage is zeroed again for the next row */')

fp8 = open(src + 'fp8.cu').read()
# defect 43: the FP8 decode's block 0 not checking the reserved header bytes
fp8 = defect(fp8, '(blk == 0 ? taco_header_rest_ok(in) : taco_header_flags_ok(in))',
             '(blk == 0 && emu_defect != 43 ? taco_header_rest_ok(in) : taco_header_flags_ok(in))')
# defect 7: no barrier between the Hadamard butterfly rounds
fp8 = defect(fp8, '''			x[j] = FP_SUB(a, b);
		}
		__syncthreads();''', '''			x[j] = FP_SUB(a, b);
		}
		if (emu_defect != 7)
			__syncthreads();''')

# defect 25: the bounded FP8 decode launches without checking the source
# length (the kernel then reads past a source one byte short)
fp8 = defect(fp8, 'if (src_bytes < need)', 'if (emu_defect != 25 && src_bytes < need)')

dq = open(src + 'dynamiq.cu').read()
# defect 16: no barrier between DynamiQ's group maxima and the super-group scale (thread 0 reads gm[] while
# the other groups' threads still write it)
dq = defect(dq, '''			gm[i] = m;
		}
		__syncthreads();''', '''			gm[i] = m;
		}
		if (emu_defect != 16)
			__syncthreads();''')

slab = open(src + 'slab_cache.cu').read()
# defect 21: the slab cache's probe pins a slot with a plain increment
# (duplicate ids of a batch pin one slot from several threads: a race)
slab = defect(slab, 'atomicAdd(t.pin + ibp_slab_slot(&t, e), 1u); /* duplicates pin the same slot */',
              '{ if (emu_defect == 21) t.pin[ibp_slab_slot(&t, e)]++; else atomicAdd(t.pin + ibp_slab_slot(&t, e), 1u); }')

# defect 26: the index read with plain loads (the protocol before launches on
# other streams were considered: a race with their atomics)
slab = defect(slab, 'int64_t k = (int64_t)ld_strong(t.keys + p);',
              'int64_t k = emu_defect == 26 ? t.keys[p] : (int64_t)ld_strong(t.keys + p);')
# defect 27: the probe takes an entry without reading its key again (an
# erase and an insert of another id in between give it another row's entry)
slab = defect(slab, 'if ((int64_t)ld_strong(t.keys + p) != id)',
              'if (emu_defect != 27 && (int64_t)ld_strong(t.keys + p) != id)')
# defect 28: the insert writes the key before the entry (a probe sees the key
# with the position's previous entry)
slab = defect(slab, '''			st_strong(t.vals + pos, (o.entry & ~(3ull << 62)) | (IBP_SLAB_READY << 62));
			SLAB_FENCE(); /* the bytes and the entry before the key that names them */
			st_strong(t.keys + pos, (uint64_t)o.key);''', '''			if (emu_defect == 28)
				st_strong(t.keys + pos, (uint64_t)o.key);
			st_strong(t.vals + pos, (o.entry & ~(3ull << 62)) | (IBP_SLAB_READY << 62));
			SLAB_FENCE(); /* the bytes and the entry before the key that names them */
			if (emu_defect != 28)
				st_strong(t.keys + pos, (uint64_t)o.key);''')

bag = open(src + 'ibp_bag.cu').read()
# defect 24: no __syncwarp between the decode of a row into the warp's row
# buffer (chunk j by lane j mod 32) and the lanes' reads of its elements
bag = defect(bag, '__syncwarp(); /* the row\'s chunks (by chunk lane) are in before lanes read elements */',
             'if (emu_defect != 24) __syncwarp(); /* the row\'s chunks (by chunk lane) are in before lanes read elements */')

slab = defect(slab, '''		for (uint64_t i = lane; i < len; i += 32)
			dst[i] = o.src[i];
		__syncwarp();''', '''		for (uint64_t i = lane; i < len; i += 32)
			dst[i] = o.src[i];
		if (emu_defect != 32) /* defect 32: lane 0 publishes before the other lanes' bytes are in */
			__syncwarp();''')

# Host code the emulator runs: src/mem/pinned_cudahost.c (C, against the
# runtime stub). Defect 31: ibp_pinned_free_async hands the block back at
# once, while a copy from it may still be in flight (jemalloc gives it to
# the next allocation of its size).
pinned = open(repo + '/src/mem/pinned_cudahost.c').read()
pinned = defect(pinned, '''	pthread_mutex_lock(&pend_mu);
	reclaim_locked();
	cudaError_t e = cudaSuccess;''', '''	if (emu_defect == 31) {
		ibp_pinned_free(p);
		return IBP_OK;
	}
	pthread_mutex_lock(&pend_mu);
	reclaim_locked();
	cudaError_t e = cudaSuccess;''')
put('pinned_cudahost.c', 'extern int emu_defect; /* tests/emu/gen.py: the planted defect */\n' +
    '#line 1 "%s/src/mem/pinned_cudahost.c"\n' % repo + pinned)

# cache/kv_cuda.c (the KV offload's orchestration, C): instrumented like
# the kernels' host code, so its own reads of pinned staging buffers are
# checked. Defect 34: the IBP store reads the encoded sizes from the pinned
# h_off before the stream has finished copying them there.
kvc = open(repo + '/cache/kv_cuda.c').read()
kvc = defect(kvc, '''	IBP_TRY(xcopy(s, s->h_cl.p, s->d_cl.p, m));
	return ibp_cuda_sync(s->stream);''', '''	IBP_TRY(xcopy(s, s->h_cl.p, s->d_cl.p, m));
	return emu_defect == 34 ? IBP_OK : ibp_cuda_sync(s->stream);''')
put('kv_cuda.c', 'extern int emu_defect; /* tests/emu/gen.py: the planted defect */\n' +
    '#line 1 "%s/cache/kv_cuda.c"\n' % repo + kvc)

# src/coll/transport_nccl.c (the NCCL transport, C): instrumented, run
# against the NCCL stand-in (nccl_stub.cpp). Defect 35 (finding 2 of the
# GPU-window issue): reserve() frees the old staging buffer with cudaFree,
# which waits for the whole device, where a user's NCCL call may wait for
# a peer that waits for this one. Defect 36: the received size read from
# the pinned first part before the stream is waited for. Defect 37: a
# device destination's head copied on the transport's stream and not
# waited for before the call returns.
nccl = open(repo + '/src/coll/transport_nccl.c').read()
nccl = defect(nccl, 'cudaError_t e = cudaFreeAsync(x->d_buf[i], x->stream);',
              'cudaError_t e = emu_defect == 35 ? cudaFree(x->d_buf[i]) : cudaFreeAsync(x->d_buf[i], x->stream);')
nccl = defect(nccl, '''	IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
	uint64_t n = 0;''', '''	if (emu_defect != 36)
		IBP_TRY(wait_stream(x, what, t0, deadline, timeout_ms));
	uint64_t n = 0;''')
nccl = defect(nccl, 'if ((rdev && rhead) || srest || rrest)', 'if ((emu_defect != 37 && rdev && rhead) || srest || rrest)')
put('transport_nccl.c', 'extern int emu_defect; /* tests/emu/gen.py: the planted defect */\n' +
    '#line 1 "%s/src/coll/transport_nccl.c"\n' % repo + nccl)

# src/coll/mem_device.c (the collectives' steps on device buffers, C):
# instrumented, linked into harness_coll in place of the CPU library's
# copy. Defect 38: a device message handed to the transport before its
# encode (here the plain payload copy) is done on the call's stream.
memd = open(repo + '/src/coll/mem_device.c').read()
memd = defect(memd, '''	*bytes = DEV_HDR + size;
	return d_finish(c);''', '''	*bytes = DEV_HDR + size;
	return emu_defect == 38 ? IBP_OK : d_finish(c);''')
put('mem_device.c', 'extern int emu_defect; /* tests/emu/gen.py: the planted defect */\n' +
    '#line 1 "%s/src/coll/mem_device.c"\n' % repo + memd)

# defect 47: a rANS lane of the exponent decode (kernels/exp_codec.cu) not
# required to end in the initial state with its stream consumed (a damaged
# stream decodes to wrong values with success where the CPU refuses)
expc = open(src + 'exp_codec.cu').read()
expc = defect(expc, 'return ok && x == EXPF_RANS_L && p == end;',
              'return ok && ((x == EXPF_RANS_L && p == end) || emu_defect == 47);')
# defect 48: no barrier between the rANS encoder's cumulative frequencies
# (each thread subtracts its own) and the lanes that read them (a race)
expc = defect(expc, '\t\tcm[t] -= f;\n\t\t__syncthreads();',
              '\t\tcm[t] -= f;\n\t\tif (emu_defect != 48)\n\t\t\t__syncthreads();')

parts = {
    'k_bag.inc': launches(bag),
    'k_slab.inc': launches(slab),
    'k_gather.inc': launches(gather),
    'k_encode.inc': launches(encode),
    'k_train.inc': launches(open(src + 'ibp_train.cu').read()),
    'k_exp.inc': launches(expc),
    'k_fp8.inc': launches(fp8),
    'k_dynamiq.inc': launches(dq),
    'k_rcmoe.inc': launches(open(src + 'rcmoe.cu').read()),
    'k_coll_reduce.inc': launches(open(src + 'coll_reduce.cu').read()),
}
for name, text in parts.items():
    put(name, shared(text))
