/* exp_rows_layout.h - the row form's description and its decoders by
 * build (internal; exp_rows.h is the interface). A header of its own so
 * that the vector decoders (exp_rows_avx2.c, exp_rows_avx512.c), which
 * exp_rows.c dispatches to, need nothing of exp_rows.c. */
#ifndef IBP_EXP_ROWS_LAYOUT_H
#define IBP_EXP_ROWS_LAYOUT_H

#include <stdint.h>

#include "ibp/status.h"
#include "ibp/types.h"

#define EXPR_NCODES 7u
#define EXPR_PARAMS_VERSION 1u

typedef struct ibpi_exprows {
	ibp_dtype_t dt;
	uint32_t esize;  /* 2 or 4 */
	uint64_t d;      /* elements per row */
	uint64_t P;      /* bytes per bit plane: ceil(d / 8) */
	uint64_t fixed;  /* bytes of a row without escapes */
	uint64_t off_lo, off_hi; /* float32: lo and hi sections; float16: lo (off_hi unused) */
	uint8_t table[16]; /* the seven fields; table[7..15] = 0 (the decoders load all 16) */
	uint8_t code[256]; /* field -> code 0..6, or 7 (escape) */
	uint32_t field_max; /* largest exponent field of the dtype (31 or 255) */
	uint64_t K;     /* slot form: escape bytes in a row's slot (0: not set) */
	uint64_t slot;  /* fixed + K */
} ibpi_exprows_t;

/* The decoders by build (ibpi_exprows_decode dispatches); each returns 0
 * or -1 (invalid; no detail set). The AVX2 and AVX-512 ones take rows of
 * a multiple of 64 elements only (-1 for others). */
int ibpi_exprows_decode_portable(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst);
int ibpi_exprows_decode_avx2(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst);
int ibpi_exprows_decode_avx512(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst);
/* Rows of whole 64-element words, at most IBPI_EXPROWS_SUM_WORDS of
 * them, summed without writing them out (ibpi_exprows_sum64): AVX2 +
 * F16C (at most 16 escapes in a half word), AVX-512 (the decoder's ISA:
 * any number of escapes). */
#define IBPI_EXPROWS_SUM_WORDS 16u
uint64_t ibpi_exprows_sum64_avx2(const ibpi_exprows_t *x, const uint8_t *const *srcs, const uint64_t *lens,
				 uint64_t n, float *acc, int first);
uint64_t ibpi_exprows_sum64_avx512(const ibpi_exprows_t *x, const uint8_t *const *srcs, const uint64_t *lens,
				   uint64_t n, float *acc, int first);

#endif /* IBP_EXP_ROWS_LAYOUT_H */
