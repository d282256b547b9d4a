/* exp_codec_avx2.c - the exponent codec's hot loops built with -mavx2 (the
 * build adds the flag for *_avx2.c); exp_codec.c picks them at run time. */
#define EXP_VARIANT avx2
#include "exp/exp_codec_impl.h"
