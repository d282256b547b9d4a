/* exp_rows.h - the exponent codec's row form (container codec 4, internal).
 *
 * Each row of d elements (float32, float16 or bfloat16) is encoded on its
 * own, so a gather or a bag decodes only the rows it reads. One table of
 * seven exponent fields serves the whole tensor (the seven most common);
 * an element whose field is one of them stores a 3-bit code, any other an
 * escape byte. With P = ceil(d / 8), a row is, in order:
 *   3 code planes of P bytes      bit i of plane k = bit k of element i's
 *                                 code (LSB first); code 7 = escape
 *   float32: lo, 2d bytes         bits 0-15 of each element (little-endian)
 *            hi, d bytes          sign << 7 | mantissa bits 16-22
 *   float16: 3 planes of P bytes  mantissa bit 8, mantissa bit 9, sign
 *            lo, d bytes          mantissa bits 0-7
 *   bfloat16: lo, d bytes         sign << 7 | mantissa bits 0-6
 *   escapes, one byte each        the exponent field of every element with
 *                                 code 7, in element order
 * The fixed part (all but the escapes) is 3P + 3d, 6P + d or 3P + d bytes;
 * a row is exactly fixed + (number of code-7 elements) bytes. Plane bits at
 * positions >= d are zero. docs/FORMAT.md 2.6.1 ("Codec 4") is the
 * specification.
 *
 * Decoders: portable, AVX2 and AVX-512 (VBMI2: vpermb for the table,
 * vpexpandb for the escapes), picked once per call site with
 * ibpi_exprows_isa (IBP_FORCE_PORTABLE=1 and IBP_EXP_ISA=avx2|portable
 * hold it lower); every decoder validates what it reads, so a damaged row
 * fails with IBP_ERR_CORRUPT and never reads past its `len` bytes.
 */
#ifndef IBP_EXP_ROWS_H
#define IBP_EXP_ROWS_H

#include <stdint.h>
#include <string.h>

#include "ibp/status.h"
#include "ibp/types.h"

#include "exp/exp_rows_impl.h"
#include "exp/exp_rows_layout.h"

/* Sets up the row form for rows of `row_bytes` bytes of `dt` with the
 * seven fields `table` (each a valid field of dt; duplicates allowed, the
 * encoder uses the first). IBP_ERR_UNSUPPORTED for another dtype,
 * IBP_ERR_INVALID_ARG (IBP_ERR_CORRUPT when `stored`: the table came from
 * a file) for a row that is not whole elements or a field out of range. */
ibp_status_t ibpi_exprows_init(ibpi_exprows_t *x, ibp_dtype_t dt, uint64_t row_bytes, const uint8_t table[7],
			       int stored);

/* The seven most common exponent fields of n elements of `dt` at `data`
 * (ties to the smaller field; fields that never occur fill up the table
 * in increasing order), sorted by field. `nthreads` as ibp_pack. */
void ibpi_exprows_pick_table(const void *data, ibp_dtype_t dt, uint64_t n, int nthreads, uint8_t table[7]);

/* Encodes one row (x->d elements at `row`) into dst (at least x->fixed +
 * x->d bytes); returns its length. Deterministic: one encoding per row. */
uint64_t ibpi_exprows_encode(const ibpi_exprows_t *x, const void *row, uint8_t *dst);

/* The decoder's build: 2 AVX-512 (BW, VBMI, VBMI2), 1 AVX2, 0 portable
 * (environment as the exponent codec's: IBP_FORCE_PORTABLE, IBP_EXP_ISA). */
int ibpi_exprows_isa(void);

/* Decodes the row at src (len bytes, its whole extent) into dst (x->d
 * elements). IBP_ERR_CORRUPT (detail: what is wrong) when len is not the
 * row's length, a padding bit of a plane is set, or a float16 escape is
 * not a field; dst may then be partly written. Reads only src[0, len). */
ibp_status_t ibpi_exprows_decode(const ibpi_exprows_t *x, int isa, const uint8_t *src, uint64_t len, void *dst);

/* Sums rows of d elements, d a multiple of 64 up to 1,024, into acc (d
 * floats) without writing them out (rows of one word keep acc in
 * registers): row k (srcs[k], lens[k] bytes) widened to float32 and added,
 * acc[i] = acc[i] + row[i] in row order, the same float32 sums as decoding
 * each row and adding it; with `first`, acc starts from +0 (acc = 0 + row
 * 0, as the bag's first-row kernels). `isa` is the decoder's build
 * (ibpi_exprows_isa): 2 the AVX-512 kernel, 1 the AVX2 + F16C one.
 * Returns the rows summed, from the first: n, or the position of a row it
 * does not take (a damaged row; with isa 1 also a row of over 16 escapes
 * in a half of 32 elements); decode that one with ibpi_exprows_decode (its
 * error, or its values) and go on after it. acc is written only when a row
 * was summed. Only where ibpi_exprows_sum64_ok: returns 0 elsewhere. Reads
 * only each row's bytes. Thread-safe. */
uint64_t ibpi_exprows_sum64(const ibpi_exprows_t *x, int isa, const uint8_t *const *srcs, const uint64_t *lens,
			    uint64_t n, float *acc, int first);

/* 1 when ibpi_exprows_sum64 runs for this row form with the decoder build
 * `isa` (ibpi_exprows_isa): rows of 64, 128, ... 1,024 elements, and isa 2
 * (AVX-512), or isa 1 with AVX2 and F16C. */
int ibpi_exprows_sum64_ok(const ibpi_exprows_t *x, int isa);

/* The detail of a row the decoders refuse (IBP_ERR_CORRUPT). */
ibp_status_t ibpi_exprows_why(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len);

/* ---- the slot form (docs/FORMAT.md 2.6.1) ----------------------------------
 * Row i lives in slot i, x->slot = x->fixed + x->K bytes at i * x->slot:
 * its fixed part, then its escapes when it has at most K (the rest of the
 * slot zero), else a little-endian u64 o (the rest zero) and its escapes
 * at byte o of the overflow area that follows the slots. No row offsets:
 * a row's place is its index. */

/* Sets K (8 <= K <= max(d, 8)); IBP_ERR_INVALID_ARG outside (IBP_ERR_CORRUPT
 * when `stored`). */
ibp_status_t ibpi_exprows_set_slot(ibpi_exprows_t *x, uint64_t K, int stored);

/* The K that makes the slots and the overflow smallest (ties: the smaller
 * K), from hist[e] = the number of rows with e escapes (e = 0 .. d). */
uint64_t ibpi_exprows_pick_slot(const ibpi_exprows_t *x, const uint64_t *hist);

/* Encodes `row` into its slot (all x->slot bytes written); a row with more
 * than K escapes writes them at ovf + ovf_off. tmp: x->fixed + x->d bytes
 * of scratch. Returns the row's number of escapes. */
uint64_t ibpi_exprows_encode_slot(const ibpi_exprows_t *x, const void *row, uint8_t *slot, uint8_t *tmp,
				  uint8_t *ovf, uint64_t ovf_off);

static inline uint64_t ld64u(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v; /* little-endian hosts only (as the container) */
}

/* The escapes of the row in `slot` (ne of them, counted by the caller:
 * ibpi_exprows_slot_nesc) at *esc. -1 when they would pass the end of
 * the overflow area (ovf, ovf_len bytes). */
static inline int ibpi_exprows_slot_escapes(const ibpi_exprows_t *x, const uint8_t *slot, const uint8_t *ovf,
					    uint64_t ovf_len, const uint8_t **esc, uint64_t ne)
{
	if (ne <= x->K) {
		*esc = slot + x->fixed;
		return 0;
	}
	const uint64_t o = ld64u(slot + x->fixed);
	if (o > ovf_len || ne > ovf_len - o)
		return -1;
	*esc = ovf + o;
	return 0;
}

/* Escapes of the row in `slot` (exprows_nesc), with the popcnt
 * instruction where a vector decoder runs (isa > 0: AVX2 CPUs have it; a
 * generic build calls libgcc's software popcount). */
uint64_t ibpi_exprows_slot_nesc(const ibpi_exprows_t *x, int isa, const uint8_t *slot);

/* Decodes the row in `slot` (x->slot bytes; ovf, ovf_len: the overflow
 * area). IBP_ERR_CORRUPT as ibpi_exprows_decode, or when its overflow
 * escapes pass the area's end. */
ibp_status_t ibpi_exprows_decode_slot(const ibpi_exprows_t *x, int isa, const uint8_t *slot, const uint8_t *ovf,
				      uint64_t ovf_len, void *dst);

#endif /* IBP_EXP_ROWS_H */
