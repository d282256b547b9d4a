/* exp_split.h - an exponent block decoded into two places (the KV
 * offloader's host path: a block holds a K row then a V row, which live
 * apart in the cache). */
#ifndef IBP_EXP_SPLIT_H
#define IBP_EXP_SPLIT_H

#include <stdint.h>

#include "ibp/exp.h"

/* ibp_exp_decode on one thread, elements [0, split) into dst and [split, n)
 * into dst2 (split a multiple of 64; split >= n: all into dst). Same
 * checks and errors; IBP_ERR_INVALID_ARG for a split not a multiple of 64
 * or a NULL destination that would be written. */
ibp_status_t ibpi_exp_decode_split(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				   uint64_t split, void *dst2);

#endif /* IBP_EXP_SPLIT_H */
