/* exp_codec_avx512.c - the exponent codec's hot loops for AVX-512 (F, BW,
 * VL, VBMI: the build adds the flags for *_avx512.c); exp_codec.c picks
 * its decoder at run time. The decoder's whole words use intrinsics
 * (dec_word_avx512 in exp_codec_impl.h: mask-to-bytes codes, one byte
 * permute for the fields), and so do the encoder's (enc_word_avx512: table
 * compares to plane masks, escapes packed by vpcompressb, for which the
 * encoder alone is built with VBMI2 and run only where the CPU has it);
 * everything else is the same C as the portable and AVX2 builds, so the
 * same bytes and the same checks. */
#define EXP_VARIANT avx512
#define EXP_AVX512 1
#include "exp/exp_codec_impl.h"
