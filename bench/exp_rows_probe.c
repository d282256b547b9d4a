/* exp_rows_probe.c - could a row format of the exponent codec's kind reach
 * issue 29's embedding-bag target (sum >= 0.5x nn.EmbeddingBag)? No libibp:
 * a prototype, timed beside a plain bag on the same ids.
 *
 * A row of 64 float32 is stored as one 64-element word of the exponent
 * codec (docs/CODECS.md section 1): three 8-byte code planes (each value's
 * exponent as a 3-bit code: 1-7 = the table's seven most common exponents,
 * 0 = an escape), the low 16 bits of each value (128 B), its sign and top
 * 7 mantissa bits (64 B), then the escaped exponents in order. A row
 * decodes with one byte permute, one masked expand and shifts; no
 * per-value branches. --f16: float16 rows instead: the 5-bit exponent's
 * code planes, the low 8 bits (64 B), the sign and top 2 mantissa bits as
 * three more planes (24 B), escapes; summed in float32.
 *
 *   exp_rows_probe [--rows N] [--reps N] [--ahead N] [--f16]
 *
 * Table: N rows (default 8 Mi float32 rows, 16 Mi float16: 2 GiB either
 * way, the tables) of N(0, 0.05) values, 2 MiB pages. 4,096 bags
 * of 20 uniform random ids a rep, fresh each rep; ns per id (thread CPU
 * time) of each variant, the variants rotating:
 *   plain        plain rows, each row's lines prefetched --ahead ids early,
 *                added in order (what nn.EmbeddingBag's sum does)
 *   exp          exponent rows packed back to back, found through an
 *                8-byte offset per row (a row map), decoded and added
 *   exp slots    the same rows in fixed slots of 224 bytes (float16: 120;
 *                8 escapes; no map; the few rows longer than that,
 *                counted, would go elsewhere)
 *   staged       a bag's 20 rows first copied into an L1 stage (loads and
 *                stores only), then decoded from it: slots, and via the map
 *   cached       exp rows decoded from 64 cached rows (no misses)
 * Every decoded row of the first 100,000 is checked bit for bit against its
 * plain row, and every exact variant's bag sums against the plain bag's
 * (same order of adds); timed numbers are printed, never checked. x86-64
 * with AVX-512 (F, BW, VL, VBMI, VBMI2) and F16C only: elsewhere it says so
 * and exits 0. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BENCH_NAME "exp_rows_probe"
#include "bench_util.h" /* clocks, generator, median (no libibp call) */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PROBE_X86 1
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,f16c")))
#else
#define PROBE_X86 0
#endif

#define D 64         /* values a row */
#define BAGS 4096
#define PER_BAG 20
#define REPS_MAX 64

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
	return rng_next(&rng);
}
static double normal(void)
{
	const double u = ((next_u64() >> 11) + 1) * 0x1p-53, v = (next_u64() >> 11) * 0x1p-53;
	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static void *huge_alloc(uint64_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "exp_rows_probe: cannot map %llu bytes\n", (unsigned long long)n);
		exit(1);
	}
	madvise(p, n, MADV_HUGEPAGE);
	return p;
}
static uint8_t code_of[256]; /* exponent -> code 1-7, 0 = escape */

/* Row x -> o (bytes written: 216 + escapes). */
static uint32_t encode_row(const float *x, uint8_t *o)
{
	uint64_t p[3] = { 0, 0, 0 };
	uint8_t *lo = o + 24, *hi = o + 24 + 128, *esc = o + 24 + 192;
	uint32_t ne = 0;
	for (int i = 0; i < D; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		const uint8_t e = (uint8_t)(u >> 23), c = code_of[e];
		for (int b = 0; b < 3; b++)
			p[b] |= (uint64_t)((c >> b) & 1) << i;
		if (!c)
			esc[ne++] = e;
		const uint16_t l = (uint16_t)u;
		memcpy(lo + 2 * i, &l, 2);
		hi[i] = (uint8_t)(((u >> 24) & 0x80u) | ((u >> 16) & 0x7fu));
	}
	memcpy(o, p, 24);
	return 24 + 192 + ne;
}

/* Float16 row x -> o (bytes written: 112 + escapes). */
static uint32_t encode_row16(const uint16_t *x, uint8_t *o)
{
	uint64_t p[6] = { 0, 0, 0, 0, 0, 0 };
	uint8_t *lo = o + 24, *esc = o + 112;
	uint32_t ne = 0;
	for (int i = 0; i < D; i++) {
		const uint16_t v = x[i];
		const uint8_t e = (uint8_t)((v >> 10) & 31u), c = code_of[e];
		const uint8_t h3 = (uint8_t)(((v >> 8) & 3u) | ((v >> 13) & 4u)); /* top 2 mantissa bits, sign */
		for (int b = 0; b < 3; b++) {
			p[b] |= (uint64_t)((c >> b) & 1) << i;
			p[3 + b] |= (uint64_t)((h3 >> b) & 1) << i;
		}
		if (!c)
			esc[ne++] = e;
		lo[i] = (uint8_t)v;
	}
	memcpy(o, p, 24);
	memcpy(o + 88, p + 3, 24);
	return 112 + ne;
}

#if PROBE_X86
/* acc += the row at o (64 bytes past its escapes are read: padded). */
static inline __attribute__((always_inline)) AVX512 void decode_add(const uint8_t *o, __m512i table, __m512 acc[4])
{
	uint64_t p0, p1, p2;
	memcpy(&p0, o, 8), memcpy(&p1, o + 8, 8), memcpy(&p2, o + 16, 8);
	const __m512i c = _mm512_or_si512(_mm512_or_si512(_mm512_maskz_mov_epi8(p0, _mm512_set1_epi8(1)),
							  _mm512_maskz_mov_epi8(p1, _mm512_set1_epi8(2))),
					  _mm512_maskz_mov_epi8(p2, _mm512_set1_epi8(4)));
	__m512i f = _mm512_permutexvar_epi8(c, table);
	f = _mm512_mask_expand_epi8(f, ~(p0 | p1 | p2), _mm512_loadu_si512(o + 24 + 192));
	const __m512i hi = _mm512_loadu_si512(o + 24 + 128);
	for (int q = 0; q < 4; q++) {
		__m128i fq, hq;
		switch (q) { /* the lane must be a constant */
		case 0: fq = _mm512_extracti32x4_epi32(f, 0), hq = _mm512_extracti32x4_epi32(hi, 0); break;
		case 1: fq = _mm512_extracti32x4_epi32(f, 1), hq = _mm512_extracti32x4_epi32(hi, 1); break;
		case 2: fq = _mm512_extracti32x4_epi32(f, 2), hq = _mm512_extracti32x4_epi32(hi, 2); break;
		default: fq = _mm512_extracti32x4_epi32(f, 3), hq = _mm512_extracti32x4_epi32(hi, 3); break;
		}
		const __m512i e32 = _mm512_cvtepu8_epi32(fq), h32 = _mm512_cvtepu8_epi32(hq);
		const __m512i l32 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(o + 24 + 32 * q)));
		const __m512i v = _mm512_or_si512(
			_mm512_or_si512(_mm512_slli_epi32(e32, 23), _mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x80)), 24)),
			_mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x7f)), 16), l32));
		acc[q] = _mm512_add_ps(acc[q], _mm512_castsi512_ps(v));
	}
}

/* Three planes -> 64 bytes of 3-bit values. */
static inline __attribute__((always_inline)) AVX512 __m512i planes3(uint64_t p0, uint64_t p1, uint64_t p2)
{
	return _mm512_or_si512(_mm512_or_si512(_mm512_maskz_mov_epi8(p0, _mm512_set1_epi8(1)),
					       _mm512_maskz_mov_epi8(p1, _mm512_set1_epi8(2))),
			       _mm512_maskz_mov_epi8(p2, _mm512_set1_epi8(4)));
}

/* acc += the float16 row at o, widened (64 bytes past its escapes read). */
static inline __attribute__((always_inline)) AVX512 void decode_add16(const uint8_t *o, __m512i table, __m512 acc[4])
{
	uint64_t p[6];
	memcpy(p, o, 24), memcpy(p + 3, o + 88, 24);
	__m512i f = _mm512_permutexvar_epi8(planes3(p[0], p[1], p[2]), table);
	f = _mm512_mask_expand_epi8(f, ~(p[0] | p[1] | p[2]), _mm512_loadu_si512(o + 112));
	const __m512i h3 = planes3(p[3], p[4], p[5]), lo = _mm512_loadu_si512(o + 24);
	for (int h = 0; h < 2; h++) {
		const __m512i f16 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(f, 1) : _mm512_castsi512_si256(f));
		const __m512i x3 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(h3, 1) : _mm512_castsi512_si256(h3));
		const __m512i l16 = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(lo, 1) : _mm512_castsi512_si256(lo));
		const __m512i v = _mm512_or_si512(
			_mm512_or_si512(_mm512_slli_epi16(f16, 10), _mm512_slli_epi16(_mm512_and_si512(x3, _mm512_set1_epi16(4)), 13)),
			_mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(x3, _mm512_set1_epi16(3)), 8), l16));
		acc[2 * h] = _mm512_add_ps(acc[2 * h], _mm512_cvtph_ps(_mm512_castsi512_si256(v)));
		acc[2 * h + 1] = _mm512_add_ps(acc[2 * h + 1], _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)));
	}
}

/* acc += the plain row at p (float32, or float16 widened). */
static inline __attribute__((always_inline)) AVX512 void plain_add(const void *p, int half, __m512 acc[4])
{
	for (int q = 0; q < 4; q++)
		acc[q] = _mm512_add_ps(acc[q], half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p + q))
						    : _mm512_loadu_ps((const float *)p + 16 * q));
}

/* Every line of [p, p + bytes). */
static inline AVX512 void prefetch_row(const void *p, uint32_t bytes)
{
	const uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + bytes;
	for (uintptr_t l = a; l < e; l += 64)
		_mm_prefetch((const char *)l, _MM_HINT_T0);
}

static inline AVX512 void store_acc(float *out, const __m512 acc[4])
{
	for (int q = 0; q < 4; q++)
		_mm512_storeu_ps(out + 16 * q, acc[q]);
}

enum { V_PLAIN, V_EXP, V_SLOTS, V_STAGED_SLOTS, V_STAGED_MAP, V_CACHED, NV };
static const char *vname[NV] = { "plain", "exp (map)", "exp slots", "staged slots", "staged (map)", "cached" };

typedef struct {
	const uint8_t *plain, *packed, *slots;
	const uint64_t *off;
	const int64_t *ids;
	int ahead, half;
	uint32_t raw, slot, row_max, stage; /* bytes: a plain row, a slot, the longest row, a stage entry */
	__m512i table;
} probe_t;

static inline __attribute__((always_inline)) AVX512 void decode(const probe_t *t, const uint8_t *o, __m512 acc[4])
{
	if (t->half)
		decode_add16(o, t->table, acc);
	else
		decode_add(o, t->table, acc);
}

/* One variant over all bags into out; returns its CPU seconds. */
static AVX512 double run(const probe_t *t, int v, float *out)
{
	static uint8_t stage[PER_BAG * 320 + 64] __attribute__((aligned(64)));
	const int64_t *ids = t->ids;
	const int64_t total = (int64_t)BAGS * PER_BAG, A = t->ahead;
	const double t0 = cpu_now();
	for (int b = 0; b < BAGS; b++) {
		__m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
		for (int j = 0; j < PER_BAG; j++) {
			const int64_t i = (int64_t)b * PER_BAG + j, id = ids[i];
			const uint8_t *row = NULL;
			switch (v) {
			case V_PLAIN:
				if (i + A < total)
					prefetch_row(t->plain + ids[i + A] * t->raw, t->raw);
				plain_add(t->plain + id * t->raw, t->half, acc);
				break;
			case V_EXP:
			case V_STAGED_MAP:
				if (i + 2 * A < total)
					_mm_prefetch((const char *)&t->off[ids[i + 2 * A]], _MM_HINT_T0);
				if (i + A < total)
					prefetch_row(t->packed + t->off[ids[i + A]], t->row_max);
				row = t->packed + t->off[id];
				break;
			case V_SLOTS:
			case V_STAGED_SLOTS:
				if (i + A < total)
					prefetch_row(t->slots + ids[i + A] * t->slot, t->row_max);
				row = t->slots + id * t->slot;
				break;
			default:
				decode(t, t->packed + t->off[id & 63], acc);
			}
			if (row && (v == V_EXP || v == V_SLOTS))
				decode(t, row, acc);
			else if (row) /* staged: loads and stores only */
				for (uint32_t l = 0; l < t->stage; l += 64)
					_mm512_store_si512(stage + t->stage * j + l, _mm512_loadu_si512(row + l));
		}
		if (v == V_STAGED_SLOTS || v == V_STAGED_MAP)
			for (int j = 0; j < PER_BAG; j++)
				decode(t, stage + t->stage * j, acc);
		store_acc(out + (uint64_t)b * D, acc);
	}
	return cpu_now() - t0;
}

static AVX512 int probe(uint64_t n, int reps, int ahead, int half)
{
	/* float32: 216 + escapes, a slot of 224; float16: 112 + escapes, 120.
	 * The decode reads 64 bytes from the escapes on: the prefetches and the
	 * stage cover them (missing that line cost a third of the bag) */
	const uint32_t raw = half ? 128 : 256, fixed = half ? 112 : 216, slot = fixed + 8, stg = (fixed + 64 + 63) & ~63u;
	uint8_t *plain = huge_alloc(n * raw);
	uint64_t hist[256] = { 0 };
	for (uint64_t i = 0; i < n * D; i += 16) { /* N(0, 0.05), rounded to the type */
		float x[16];
		for (int k = 0; k < 16; k++)
			x[k] = (float)(normal() * 0.05);
		if (half)
			_mm256_storeu_si256((__m256i *)(void *)(plain + 2 * i),
					    _mm512_cvtps_ph(_mm512_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		else
			memcpy(plain + 4 * i, x, sizeof(x));
	}
	for (uint64_t i = 0; i < n * D; i += 7) {
		uint32_t u = 0;
		if (half)
			memcpy(&u, plain + 2 * i, 2), u = (u >> 10) & 31u;
		else
			memcpy(&u, plain + 4 * i, 4), u = (u >> 23) & 255u;
		hist[u]++;
	}
	uint8_t tb[64] = { 0 };
	for (int k = 0; k < 7; k++) { /* the seven most common exponents */
		int best = 0;
		for (int e = 1; e < 256; e++)
			if (hist[e] > hist[best])
				best = e;
		tb[k + 1] = (uint8_t)best, code_of[best] = (uint8_t)(k + 1), hist[best] = 0;
	}
	/* a row's decode reads 64 bytes past its escapes, at most 64 of them */
	const uint32_t row_max = fixed + 64;
	uint8_t *packed = huge_alloc(n * row_max + 4096), *slots = huge_alloc(n * slot + 4096);
	uint64_t *off = huge_alloc((n + 1) * 8), at = 0, over = 0, over_stage = 0;
	for (uint64_t r = 0; r < n; r++) {
		off[r] = at;
		const uint32_t len = half ? encode_row16((const uint16_t *)(const void *)(plain + r * raw), packed + at)
					  : encode_row((const float *)(const void *)(plain + r * raw), packed + at);
		over += len > slot;         /* a slot holds 8 escapes */
		over_stage += len + 64 > stg; /* a stage entry holds what the decode reads */
		memcpy(slots + r * slot, packed + at, len > slot ? slot : len);
		at += len;
	}
	probe_t t = { plain, packed, slots, off, NULL, ahead, half, raw, slot, row_max, stg, _mm512_loadu_si512(tb) };
	for (uint64_t r = 0; r < n && r < 100000; r++) { /* the decode is exact */
		__m512 a[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
		__m512 w[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
		decode(&t, packed + off[r], a);
		plain_add(plain + r * raw, half, w);
		float x[D], y[D];
		store_acc(x, a), store_acc(y, w);
		if (memcmp(x, y, sizeof(x))) {
			fprintf(stderr, "exp_rows_probe: row %llu does not decode to itself\n", (unsigned long long)r);
			return 1;
		}
	}
	printf("exp_rows_probe: %llu rows of 64 %s N(0, 0.05) (%.2f GB), exponent rows %.3f of raw packed, "
	       "%.3f in %u-byte slots (%llu rows longer, %llu longer than a stage entry); %d bags of %d random ids, "
	       "ns per id (thread CPU), median of %d, prefetch %d ids ahead\n",
	       (unsigned long long)n, half ? "float16" : "float32", n * raw / 1e9, (double)at / (double)(n * raw),
	       (double)slot / raw, slot, (unsigned long long)over, (unsigned long long)over_stage, BAGS, PER_BAG, reps, ahead);
	int64_t *ids = malloc(sizeof(int64_t) * BAGS * PER_BAG);
	float *outs[NV];
	for (int v = 0; v < NV; v++)
		outs[v] = malloc(sizeof(float) * BAGS * D);
	double ns[NV][REPS_MAX];
	t.ids = ids;
	for (int rep = 0; rep < reps; rep++) {
		for (int i = 0; i < BAGS * PER_BAG; i++)
			ids[i] = (int64_t)(next_u64() % n);
		for (int k = 0; k < NV; k++) {
			const int v = (k + rep) % NV; /* the order rotates */
			ns[v][rep] = run(&t, v, outs[v]) * 1e9 / (BAGS * PER_BAG);
		}
		for (int v = V_EXP; v < V_CACHED; v++) { /* the variants exact for every row: the plain sums */
			const int exact = v == V_EXP || (v == V_STAGED_MAP && !over_stage) || !over;
			if (exact && memcmp(outs[V_PLAIN], outs[v], sizeof(float) * BAGS * D)) {
				fprintf(stderr, "exp_rows_probe: %s's bags differ from the plain sums\n", vname[v]);
				return 1;
			}
		}
	}
	double med[NV];
	for (int v = 0; v < NV; v++) {
		med[v] = median(ns[v], reps); /* sorts: [0] and [reps - 1] are the extremes */
	}
	for (int v = 0; v < NV; v++)
		printf("  %-13s %6.1f ns/id   (%.1f-%.1f)   plain / this %.2f%s\n", vname[v], med[v], ns[v][0], ns[v][reps - 1],
		       med[V_PLAIN] / med[v], (v == V_SLOTS || v == V_STAGED_SLOTS) && over ? "  (not exact: long rows cut)" : "");
	free(ids);
	for (int v = 0; v < NV; v++)
		free(outs[v]);
	return 0;
}
#endif

int main(int argc, char **argv)
{
	uint64_t n = 0;
	int reps = 7, ahead = 8, half = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ahead") && i + 1 < argc)
			ahead = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--f16"))
			half = 1;
		else {
			fprintf(stderr, "usage: exp_rows_probe [--rows N] [--reps N] [--ahead N] [--f16]\n");
			return 2;
		}
	}
	if (!n)
		n = half ? 16ull << 20 : 8ull << 20; /* 2 GiB */
	if (n < 64 || n > (1ull << 32) || reps < 1 || reps > REPS_MAX || ahead < 0 || ahead > 4096) {
		fprintf(stderr, "exp_rows_probe: --rows 64-2^32, --reps 1-%d, --ahead 0-4096\n", REPS_MAX);
		return 2;
	}
#if PROBE_X86
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
	    !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vbmi") ||
	    !__builtin_cpu_supports("avx512vbmi2") || !__builtin_cpu_supports("f16c")) {
		printf("exp_rows_probe: this CPU lacks AVX-512 (F, BW, VL, VBMI, VBMI2) or F16C: nothing to measure\n");
		return 0;
	}
	return probe(n, reps, ahead, half);
#else
	(void)n, (void)reps, (void)ahead, (void)half;
	printf("exp_rows_probe: x86-64 only: nothing to measure\n");
	return 0;
#endif
}
