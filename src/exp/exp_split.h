/* exp_split.h - an exponent block encoded from, or decoded into, two places (the KV
 * offloader's host path: a block holds a K row then a V row, which live
 * apart in the cache). */
#ifndef IBP_EXP_SPLIT_H
#define IBP_EXP_SPLIT_H

#include <stdint.h>

#include "ibp/exp.h"

/* ibp_exp_encode on one thread of elements [0, split) at src and [split, n)
 * at src2 (split a multiple of 64; split >= n: all from src): the same
 * bytes as the elements side by side give. Only tables known without a
 * pass over the elements (SIGMA with sigma > 0, GIVEN), else
 * IBP_ERR_INVALID_ARG, as for a bad split or a NULL source that would be
 * read. prefetch = 1 when the elements are likely in DRAM (the encoder
 * asks for them ahead of its loads). isa: ibpi_exp_isa(), read once by the
 * caller's call for all its blocks (IBP_ERR_INVALID_ARG above it). */
ibp_status_t ibpi_exp_encode_split(const void *src, uint64_t split, const void *src2, ibp_dtype_t dt, uint64_t n,
				   const ibp_exp_opts_t *opts, int prefetch, int isa, void *dst, uint64_t dst_cap,
				   uint64_t *dst_size);

/* The exponent codec's build the environment and CPU select now (0
 * portable, 1 AVX2, 2 AVX-512; IBP_FORCE_PORTABLE, IBP_EXP_ISA): two
 * getenv calls, so read once per call, not per block. */
int ibpi_exp_isa(void);

/* ibp_exp_decode on one thread, elements [0, split) into dst and [split, n)
 * into dst2 (split a multiple of 64; split >= n: all into dst). Same
 * checks and errors; IBP_ERR_INVALID_ARG for a split not a multiple of 64
 * or a NULL destination that would be written. */
ibp_status_t ibpi_exp_decode_split(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				   uint64_t split, void *dst2);

#endif /* IBP_EXP_SPLIT_H */
