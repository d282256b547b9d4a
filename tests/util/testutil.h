/* testutil.h - shared helpers for the Criterion suites: a deterministic RNG
 * (xoshiro256** seeded by splitmix64), row generators (random, zeros, ones,
 * alternating bits, float NaN/Inf patterns, smooth floats, sparse binary,
 * rows that never match a Mask) and Mask/Bitval builders (random, or a tiny
 * bit counter that mimics training). Everything is deterministic from the
 * seed, so a failing case can be replayed. Allocation failures abort the
 * test (these are test helpers, not library code). */
#ifndef IBP_TESTUTIL_H
#define IBP_TESTUTIL_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when libibp was built with CUDA and a usable GPU is present (the
 * device tests run; the host-fallback twins skip). */
int tu_have_gpu(void);

/* ---- RNG ---- */
typedef struct tu_rng {
	uint64_t s[4];
} tu_rng_t;

uint64_t tu_splitmix64(uint64_t *state);
void tu_rng_seed(tu_rng_t *r, uint64_t seed);
uint64_t tu_next(tu_rng_t *r);
/* Uniform in [0, n); n > 0. */
uint64_t tu_below(tu_rng_t *r, uint64_t n);
/* Uniform double in [0, 1). */
double tu_uniform(tu_rng_t *r);
/* Standard normal (Box-Muller, one of the pair; u clamped away from 0). */
double tu_gauss(tu_rng_t *r);
void tu_fill_random(tu_rng_t *r, void *buf, size_t n);

/* ---- rows ---- */
typedef enum tu_pattern {
	TU_RANDOM = 0,    /* uniform random bytes */
	TU_ZEROS,         /* all 0x00 */
	TU_ONES,          /* all 0xFF */
	TU_ALT55,         /* 0x55 bytes (alternating bits) */
	TU_ALTAA,         /* 0xAA bytes */
	TU_F32_SPECIAL,   /* float32 words from {NaN, -NaN, +Inf, -Inf, 0, -0, denormal, 1} */
	TU_F32_SMOOTH,    /* float32 in ±[0.5, 1) with a few far-off values (trained-like) */
	TU_F16_SMOOTH,    /* float16 bit patterns of small values */
	TU_SPARSE_BIN,    /* mostly zero bytes, a few random nonzero bytes */
	TU_SPARSE_BITS,   /* a binary row: 0/1 bytes, mostly 0 */
	TU_PATTERN_COUNT
} tu_pattern_t;

const char *tu_pattern_name(tu_pattern_t p);
/* Fills row[0, R) with pattern p (trailing partial float words are filled
 * with the first bytes of a pattern word). */
void tu_gen_row(tu_rng_t *r, tu_pattern_t p, uint8_t *row, uint64_t R);
/* Fills nrows rows of R bytes back to back. */
void tu_gen_rows(tu_rng_t *r, tu_pattern_t p, uint8_t *rows, uint64_t nrows, uint64_t R);

/* ---- masks (D * C bytes each, little-endian chunk words) ---- */
/* D = ceil(R / C). */
uint64_t tu_nchunks(uint64_t R, unsigned C);
/* Sets the padding bits of the last chunk in mask and clears them in bitval
 * (the invariant ibp_codec_create checks). */
void tu_fix_padding(uint8_t *mask, uint8_t *bitval, uint64_t R, unsigned C);
/* Random mask with each bit set with probability `density`, random bitval
 * inside it; padding fixed. */
void tu_mask_random(tu_rng_t *r, double density, uint8_t *mask, uint8_t *bitval, uint64_t R,
		    unsigned C);
/* Mask of bits whose value agrees on at least `threshold` of the nrows rows
 * (like the paper's training: count ones per bit), bitval = majority value;
 * padding fixed. nrows may be 0 (mask = padding only). */
void tu_mask_count(const uint8_t *rows, uint64_t nrows, uint64_t R, unsigned C, double threshold,
		   uint8_t *mask, uint8_t *bitval);
/* Makes row chunks never match: for each chunk whose mask has a bit inside
 * the row (not padding), flips the lowest such mask bit away from bitval. */
void tu_make_never_match(uint8_t *row, const uint8_t *mask, const uint8_t *bitval, uint64_t R,
			 unsigned C);
/* Makes row chunk j match exactly (x = (x & ~m) | b). */
void tu_make_match(uint8_t *row, const uint8_t *mask, const uint8_t *bitval, uint64_t R,
		   unsigned C, uint64_t j);

/* Reads/writes chunk word j of a D*C-byte metadata array. */
uint64_t tu_word(const uint8_t *a, unsigned C, uint64_t j);
void tu_set_word(uint8_t *a, unsigned C, uint64_t j, uint64_t v);

/* Checked allocation (aborts on failure); zeroed. */
void *tu_xcalloc(size_t n);

/* A copy of src[0, n) whose last byte is the last of a page and whose
 * next page is PROT_NONE: a read past it crashes the test (decoders must
 * never read past a row), in any build. Free with tu_guarded_free. */
void *tu_guarded_copy(const void *src, size_t n);
void tu_guarded_free(void *p, size_t n);

/* Hex dump of n bytes into a static buffer (for assertion messages). */
const char *tu_hex(const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* IBP_TESTUTIL_H */
