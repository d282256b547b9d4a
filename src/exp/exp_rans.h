/* exp_rans.h - mode 2 of the exponent codec: symbol bytes coded with
 * interleaved rANS (16 lanes per 2^16-element segment), rest bytes raw.
 * Layout in exp_format.h, every byte in docs/CODECS.md ("rANS blocks"). */
#ifndef IBP_EXP_RANS_H
#define IBP_EXP_RANS_H

#include <stdint.h>

#include "ibp/status.h"
#include "exp/exp_format.h"

/* hist[k] = elements of src[0, n) whose symbol (expf_rans_sym) is k. */
void ibpi_exp_rans_hist(const uint8_t *src, uint32_t dt, uint64_t n, uint64_t hist[256]);

/* Writes a rANS block of src[0, n) to dst when it is smaller than `limit`
 * bytes (*size = its size; no checksum), else *size = 0 and dst holds
 * scratch. dst must hold `limit` bytes. hist: ibpi_exp_rans_hist of src. */
ibp_status_t ibpi_exp_rans_encode(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
				  const uint64_t hist[256], uint64_t limit, int nthreads, uint8_t *dst,
				  uint64_t *size);

/* Header checks of a mode-2 block (the common fields checked already):
 * table bytes, static and block sizes for `streams` stream bytes. */
ibp_status_t ibpi_exp_rans_parse(const uint8_t *h, uint64_t src_size, const expf_shape_t *s, uint64_t n,
				 uint64_t streams, uint64_t stat, uint64_t block);

/* Decodes a parsed mode-2 block (untrusted body): elements [0, split) to
 * dst, [split, n) to dst2 (split >= n: all to dst). IBP_ERR_CORRUPT on any
 * inconsistency. isa: 2 the AVX-512 loop, 1 the AVX2 loop (the CPU has
 * it), 0 the portable one. */
ibp_status_t ibpi_exp_rans_decode(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
				  uint64_t streams, uint8_t *dst, uint64_t split, uint8_t *dst2, int nthreads,
				  int isa);

#endif /* IBP_EXP_RANS_H */
