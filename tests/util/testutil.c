/* testutil.c - see testutil.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

#include "ibp/cuda.h"

uint64_t tu_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void tu_rng_seed(tu_rng_t *r, uint64_t seed)
{
	uint64_t st = seed;
	for (int i = 0; i < 4; i++)
		r->s[i] = tu_splitmix64(&st);
}

static inline uint64_t tu_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t tu_next(tu_rng_t *r)
{
	uint64_t *s = r->s;
	uint64_t result = tu_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = tu_rotl(s[3], 45);
	return result;
}

uint64_t tu_below(tu_rng_t *r, uint64_t n)
{
	/* Lemire's multiply-shift; the tiny bias is irrelevant for tests */
	return (uint64_t)(((unsigned __int128)tu_next(r) * n) >> 64);
}

double tu_uniform(tu_rng_t *r)
{
	return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double tu_gauss(tu_rng_t *r)
{
	double u = tu_uniform(r), v = tu_uniform(r);
	if (u < 1e-300)
		u = 1e-300;
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

void tu_fill_random(tu_rng_t *r, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n >= 8) {
		uint64_t v = tu_next(r);
		memcpy(p, &v, 8);
		p += 8;
		n -= 8;
	}
	if (n) {
		uint64_t v = tu_next(r);
		memcpy(p, &v, n);
	}
}

const char *tu_pattern_name(tu_pattern_t p)
{
	static const char *names[] = { "random", "zeros", "ones", "alt55", "altAA", "f32-special",
				       "f32-smooth", "f16-smooth", "sparse-bytes", "sparse-bits" };
	return (unsigned)p < TU_PATTERN_COUNT ? names[p] : "?";
}

static void tu_fill_words32(uint8_t *row, uint64_t R, tu_rng_t *r,
			    uint32_t (*gen)(tu_rng_t *r))
{
	uint64_t i = 0;
	for (; i + 4 <= R; i += 4) {
		uint32_t v = gen(r);
		memcpy(row + i, &v, 4);
	}
	if (i < R) {
		uint32_t v = gen(r);
		memcpy(row + i, &v, R - i);
	}
}

static uint32_t tu_f32_special(tu_rng_t *r)
{
	static const uint32_t v[] = { 0x7FC00000u, 0xFFC00000u, 0x7F800000u, 0xFF800000u,
				      0x00000000u, 0x80000000u, 0x00000001u, 0x3F800000u,
				      0x7FFFFFFFu, 0x7F800001u };
	return v[tu_below(r, sizeof(v) / sizeof(v[0]))];
}

static uint32_t tu_f32_smooth(tu_rng_t *r)
{
	float f;
	uint64_t u = tu_below(r, 64);
	if (u == 0)
		f = (float)(tu_uniform(r) * 1e6); /* far off: an exception */
	else
		f = (float)(0.5 + 0.5 * tu_uniform(r));
	if (tu_next(r) & 1)
		f = -f;
	uint32_t v;
	memcpy(&v, &f, 4);
	return v;
}

void tu_gen_row(tu_rng_t *r, tu_pattern_t p, uint8_t *row, uint64_t R)
{
	switch (p) {
	case TU_RANDOM:
		tu_fill_random(r, row, R);
		break;
	case TU_ZEROS:
		memset(row, 0, R);
		break;
	case TU_ONES:
		memset(row, 0xFF, R);
		break;
	case TU_ALT55:
		memset(row, 0x55, R);
		break;
	case TU_ALTAA:
		memset(row, 0xAA, R);
		break;
	case TU_F32_SPECIAL:
		tu_fill_words32(row, R, r, tu_f32_special);
		break;
	case TU_F32_SMOOTH:
		tu_fill_words32(row, R, r, tu_f32_smooth);
		break;
	case TU_F16_SMOOTH:
		for (uint64_t i = 0; i < R; i += 2) {
			/* sign random, exponent 13..14, mantissa random */
			uint16_t h = (uint16_t)(((tu_next(r) & 1) << 15) | ((13 + tu_below(r, 2)) << 10) |
						tu_below(r, 1024));
			if (tu_below(r, 50) == 0)
				h = (uint16_t)tu_next(r);
			row[i] = (uint8_t)h;
			if (i + 1 < R)
				row[i + 1] = (uint8_t)(h >> 8);
		}
		break;
	case TU_SPARSE_BIN:
		memset(row, 0, R);
		for (uint64_t k = 0, n = 1 + R / 64; k < n; k++)
			row[tu_below(r, R)] = (uint8_t)(1 + tu_below(r, 255));
		break;
	case TU_SPARSE_BITS:
		for (uint64_t i = 0; i < R; i++)
			row[i] = tu_below(r, 20) == 0;
		break;
	default:
		memset(row, 0, R);
	}
}

void tu_gen_rows(tu_rng_t *r, tu_pattern_t p, uint8_t *rows, uint64_t nrows, uint64_t R)
{
	for (uint64_t i = 0; i < nrows; i++)
		tu_gen_row(r, p, rows + i * R, R);
}

uint64_t tu_nchunks(uint64_t R, unsigned C)
{
	return (R + C - 1) / C;
}

uint64_t tu_word(const uint8_t *a, unsigned C, uint64_t j)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < C; i++)
		v |= (uint64_t)a[j * C + i] << (8 * i);
	return v;
}

void tu_set_word(uint8_t *a, unsigned C, uint64_t j, uint64_t v)
{
	for (unsigned i = 0; i < C; i++)
		a[j * C + i] = (uint8_t)(v >> (8 * i));
}

void tu_fix_padding(uint8_t *mask, uint8_t *bitval, uint64_t R, unsigned C)
{
	uint64_t D = tu_nchunks(R, C);
	uint64_t last = R - (D - 1) * C; /* bytes of the last chunk inside the row */
	for (uint64_t i = last; i < C; i++) {
		mask[(D - 1) * C + i] = 0xFF;
		bitval[(D - 1) * C + i] = 0x00;
	}
}

void tu_mask_random(tu_rng_t *r, double density, uint8_t *mask, uint8_t *bitval, uint64_t R,
		    unsigned C)
{
	uint64_t n = tu_nchunks(R, C) * C;
	for (uint64_t i = 0; i < n; i++) {
		uint8_t m = 0;
		for (int b = 0; b < 8; b++)
			if (tu_uniform(r) < density)
				m |= (uint8_t)(1u << b);
		mask[i] = m;
		bitval[i] = (uint8_t)(tu_next(r) & m);
	}
	tu_fix_padding(mask, bitval, R, C);
}

void tu_mask_count(const uint8_t *rows, uint64_t nrows, uint64_t R, unsigned C, double threshold,
		   uint8_t *mask, uint8_t *bitval)
{
	uint64_t n = tu_nchunks(R, C) * C;
	memset(mask, 0, n);
	memset(bitval, 0, n);
	if (nrows) {
		uint64_t *cnt = tu_xcalloc(R * 8 * sizeof(uint64_t));
		for (uint64_t i = 0; i < nrows; i++)
			for (uint64_t k = 0; k < R; k++) {
				uint8_t v = rows[i * R + k];
				for (int b = 0; b < 8; b++)
					cnt[k * 8 + b] += (v >> b) & 1;
			}
		for (uint64_t k = 0; k < R; k++)
			for (int b = 0; b < 8; b++) {
				double ones = (double)cnt[k * 8 + b] / (double)nrows;
				if (ones >= threshold) {
					mask[k] |= (uint8_t)(1u << b);
					bitval[k] |= (uint8_t)(1u << b);
				} else if (1.0 - ones >= threshold) {
					mask[k] |= (uint8_t)(1u << b);
				}
			}
		free(cnt);
	}
	tu_fix_padding(mask, bitval, R, C);
}

void tu_make_never_match(uint8_t *row, const uint8_t *mask, const uint8_t *bitval, uint64_t R,
			 unsigned C)
{
	uint64_t D = tu_nchunks(R, C);
	for (uint64_t j = 0; j < D; j++) {
		uint64_t m = tu_word(mask, C, j);
		uint64_t inrow = j + 1 < D ? ~0ull : ((R - j * C) >= 8 ? ~0ull : (1ull << (8 * (R - j * C))) - 1);
		m &= inrow;
		if (!m)
			continue;
		unsigned bit = (unsigned)__builtin_ctzll(m);
		uint64_t want = ((tu_word(bitval, C, j) >> bit) & 1) ^ 1;
		uint64_t byte = j * C + bit / 8;
		row[byte] = (uint8_t)((row[byte] & ~(1u << (bit % 8))) | (want << (bit % 8)));
	}
}

void tu_make_match(uint8_t *row, const uint8_t *mask, const uint8_t *bitval, uint64_t R,
		   unsigned C, uint64_t j)
{
	for (unsigned i = 0; i < C && j * C + i < R; i++) {
		uint64_t k = j * C + i;
		row[k] = (uint8_t)((row[k] & ~mask[k]) | bitval[k]);
	}
}

static size_t guarded_span(size_t n, size_t *pg)
{
	*pg = (size_t)sysconf(_SC_PAGESIZE);
	return n ? (n + *pg - 1) / *pg * *pg : *pg;
}

void *tu_guarded_copy(const void *src, size_t n)
{
	size_t pg;
	const size_t data = guarded_span(n, &pg);
	uint8_t *base = mmap(NULL, data + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED || mprotect(base + data, pg, PROT_NONE) != 0) {
		fprintf(stderr, "testutil: guarded buffer of %zu bytes failed\n", n);
		abort();
	}
	uint8_t *p = base + data - n;
	if (n)
		memcpy(p, src, n);
	return p;
}

void tu_guarded_free(void *p, size_t n)
{
	size_t pg;
	const size_t data = guarded_span(n, &pg);
	if (p)
		munmap((uint8_t *)p + n - data, data + pg);
}

void *tu_xcalloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p) {
		fprintf(stderr, "testutil: out of memory (%zu bytes)\n", n);
		abort();
	}
	return p;
}

const char *tu_hex(const void *p, size_t n)
{
	static _Thread_local char buf[1024];
	const uint8_t *b = p;
	size_t k = 0;
	for (size_t i = 0; i < n && k + 4 < sizeof(buf); i++)
		k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%02x%s", b[i], i + 1 < n ? " " : "");
	buf[k] = 0;
	return buf;
}

int tu_have_gpu(void)
{
	int n = 0;
	return ibp_cuda_built() && ibp_cuda_device_count(&n) == IBP_OK && n > 0;
}
