#!/usr/bin/env python3
"""Cuts the kernel sections out of kernels/ibp_{gather,encode,train}.cu into
OUT/k_*.inc for the host emulator (dynamic shared memory becomes a pointer
the emulator sets per block). Usage: gen.py REPO OUT"""
import re
import sys

repo, out = sys.argv[1], sys.argv[2]
src = repo + '/kernels/'


def cut(text, start, end):
    i = text.index(start)
    return text[i:text.index(end, i)]


banner = '/* ---------------------------------------------------------------------- */\n'
parts = {
    'k_gather.inc': cut(open(src + 'ibp_gather.cu').read(), 'struct IbpGatherArgs',
                        banner + '/* host: launch configuration'),
    'k_encode.inc': cut(open(src + 'ibp_encode.cu').read(), 'struct IbpEncArgs', banner + '/* host  '),
    'k_train.inc': cut(open(src + 'ibp_train.cu').read(), '#define IBP_COUNT_THREADS', 'static_assert'),
}
for name, text in parts.items():
    text = re.sub(r'extern __shared__ __align__\(16\) uint8_t (\w+)\[\];',
                  r'uint8_t *\1 = emu_dyn_smem;', text)
    open(out + '/' + name, 'w').write(text)
