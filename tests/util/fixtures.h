/* fixtures.h - helpers shared by the container, store and training suites
 * (tests/io, tests/store, tests/bitpack): a one-word splitmix64 stream,
 * codecs built from seeded random masks, rows that mostly match them (every
 * row mode appears without depending on training), graded rows for training,
 * and a temporary directory per test. Failures assert with Criterion, so
 * these are for Criterion tests only. Deterministic from the seeds: the same
 * seed gives the same rows the suites used before these moved here. */
#ifndef IBP_TEST_FIXTURES_H
#define IBP_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "ibp.h"

/* splitmix64: one word of state, so `rng_t r = { seed };` seeds it. */
typedef struct rng {
	uint64_t s;
} rng_t;
uint64_t rnd(rng_t *r);

/* Zeroed allocation of n bytes (at least 1); asserts on failure. */
void *xcalloc(size_t n);

/* The bits of a C-byte chunk word (C in 1..8). */
uint64_t wmask(unsigned C);
/* Chunk word j of a D*C-byte Mask/Bitval array (little endian). */
uint64_t word_get(const uint8_t *a, unsigned C, uint64_t j);
void word_set(uint8_t *a, unsigned C, uint64_t j, uint64_t v);
/* The bits of chunk j that lie inside an R-byte row (not padding). */
uint64_t inrow(uint64_t R, unsigned C, uint64_t j);

/* A codec with k clusters of random masks (density about 3/4), padding
 * invariant as ibp_codec_create requires. */
ibp_codec_t *make_codec(uint64_t R, unsigned C, unsigned k, uint64_t seed);
/* n rows that mostly match a random cluster of `codec`: a mix of clean rows,
 * rows with a few exceptions, rows with many, and random rows. */
uint8_t *make_rows(const ibp_codec_t *codec, uint64_t n, uint64_t seed);
/* n rows of R bytes whose bit (p, b) is 1 with a probability graded from 0
 * to 1/2, so that the best training threshold lies inside the sweep. */
uint8_t *graded_rows(uint64_t seed, uint64_t n, uint64_t R);

/* A fresh directory per test, for `.init = make_tmpdir, .fini =
 * remove_tmpdir`: /tmp/ibp_<program>_XXXXXX, its path in tmpdir. */
extern char tmpdir[96];
void make_tmpdir(void);
void remove_tmpdir(void);
/* tmpdir + "/" + name, in one of 4 rotating buffers (valid for 3 more calls). */
const char *tmpdir_path(const char *name);
/* The whole file at path, NUL-terminated, in a new buffer (free it); its
 * size in *size. Asserts that it can be read. */
uint8_t *read_whole_file(const char *path, uint64_t *size);
/* Writes n bytes at p as the whole file at path; asserts that it can. */
void write_whole_file(const char *path, const void *p, uint64_t n);

#endif /* IBP_TEST_FIXTURES_H */
