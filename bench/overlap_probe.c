/* overlap_probe.c - does work on cached data overlap with a stream of
 * random DRAM rows on this machine (issue 29)? No libibp: a synthetic
 * "decode" (a dependent multiply chain over the row's words) on rows drawn
 * uniformly from a table of --mb MiB (2 MiB pages), under each prefetch
 * schedule the store's gather has tried, beside the two parts alone.
 *
 *   overlap_probe [--mb N] [--row BYTES,...] [--work N,...] [--rows N] [--reps N]
 *                 [--small-pages] [--chase MIB,...]
 *
 * Per row size and amount of work, ns per row (median of --reps, thread
 * CPU time, fresh random rows each rep, the variants alternating):
 *   memory      prefetch of every line of row i + 8, then one load per line
 *               of row i (no work): what the core's misses alone cost
 *   work        the work on rows drawn from 64 cached rows (no misses)
 *   none        work on the random rows, no prefetch
 *   ahead D     every line of row i + D prefetched before row i's work
 *   batch B     rows in batches of B: the next batch's lines prefetched in
 *               one burst, then this batch's work (the store's scheme)
 *   batch 4 t2  the same burst with prefetcht2 (to L2)
 *   map 4       batch 4 through a map (8 bytes a row, a random line per
 *               lookup): the map entries of the batch after next
 *               prefetched, the next batch looked up and its rows
 *               prefetched, then this batch's work (the row-map gather)
 * and the two bounds: max(memory, work) if they overlapped, memory + work
 * if they add up. --small-pages keeps the table on 4 KiB pages
 * (MADV_NOHUGEPAGE). --chase instead times, per span of MiB, a pointer
 * chase over random lines of the table's first span bytes (one load
 * waiting on the one before: latency) and eight such chains interleaved
 * (misses in flight): with the TLB's reach of the span known, the growth
 * between spans beyond the caches is the page walks' cost on this host.
 * Timed numbers are printed, never checked. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define REPS_MAX 64
#define LIST_MAX 8
#define POOL 64 /* cached rows for "work" */

static uint8_t *tab;
static uint64_t nrows, row_bytes, m_ids = 1u << 18;
static uint64_t *ids;
static int work_n;
static volatile uint64_t sink;

static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The row's words read, then a dependent chain of work_n steps: a decode
 * needs its row's bytes before it can go on, and its steps depend on each
 * other. */
static inline __attribute__((always_inline)) uint64_t work(const uint8_t *p, uint64_t acc)
{
	uint64_t x = acc;
	for (uint64_t k = 0; k < row_bytes; k += 64)
		x += *(const uint64_t *)(p + k);
	for (int k = 0; k < work_n; k++)
		x = x * 0x9E3779B97F4A7C15ull + (x >> 29);
	return x;
}

static inline __attribute__((always_inline)) void pf_row(const uint8_t *p, int hint)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + row_bytes;
	for (; a < e; a += 64) {
		if (hint)
			__builtin_prefetch((const void *)a, 0, 1);
		else
			__builtin_prefetch((const void *)a, 0, 3);
	}
}

#define ROW(i) (tab + ids[i] * row_bytes)

enum { V_MEMORY, V_WORK, V_NONE, V_AHEAD4, V_AHEAD8, V_BATCH4, V_BATCH8, V_BATCH4_T2, V_MAP4, NV };
static const char *vname[NV] = { "memory", "work", "none", "ahead 4", "ahead 8", "batch 4", "batch 8", "batch 4 t2",
				 "map 4" };
static uint64_t *map; /* row -> its row in the table (a permutation's worth of random lines) */

static double run(int v)
{
	uint64_t acc = 0;
	const uint64_t M = m_ids;
	double t0 = cpu_now();
	switch (v) {
	case V_MEMORY:
		for (uint64_t i = 0; i < M; i++) {
			if (i + 8 < M)
				pf_row(ROW(i + 8), 0);
			for (uint64_t k = 0; k < row_bytes; k += 64)
				acc += *(const uint64_t *)(ROW(i) + k);
		}
		break;
	case V_WORK:
		for (uint64_t i = 0; i < M; i++)
			acc = work(tab + (ids[i] % POOL) * row_bytes, acc);
		break;
	case V_NONE:
		for (uint64_t i = 0; i < M; i++)
			acc = work(ROW(i), acc);
		break;
	case V_AHEAD4:
	case V_AHEAD8: {
		const uint64_t d = v == V_AHEAD4 ? 4 : 8;
		for (uint64_t i = 0; i < M; i++) {
			if (i + d < M)
				pf_row(ROW(i + d), 0);
			acc = work(ROW(i), acc);
		}
		break;
	}
	case V_MAP4: {
		/* the store's row-map scheme: map entries of the batch after next
		 * prefetched, the next batch looked up (its map lines now cached)
		 * and its rows prefetched, then this batch's work */
		const uint64_t B = 4;
		const uint8_t *at[2 * 4];
		for (uint64_t k = 0; k < 2 * B && k < M; k++)
			__builtin_prefetch(&map[ids[k]], 0, 3);
		for (uint64_t k = 0; k < B && k < M; k++)
			pf_row(at[k % (2 * B)] = tab + map[ids[k]] * row_bytes, 0);
		for (uint64_t b0 = 0; b0 < M; b0 += B) {
			for (uint64_t k = b0 + 2 * B; k < b0 + 3 * B && k < M; k++)
				__builtin_prefetch(&map[ids[k]], 0, 3);
			for (uint64_t k = b0 + B; k < b0 + 2 * B && k < M; k++)
				pf_row(at[k % (2 * B)] = tab + map[ids[k]] * row_bytes, 0);
			for (uint64_t i = b0; i < b0 + B && i < M; i++)
				acc = work(at[i % (2 * B)], acc);
		}
		break;
	}
	default: {
		const uint64_t B = v == V_BATCH8 ? 8 : 4;
		const int hint = v == V_BATCH4_T2;
		for (uint64_t k = 0; k < B && k < M; k++)
			pf_row(ROW(k), hint);
		for (uint64_t b0 = 0; b0 < M; b0 += B) {
			for (uint64_t k = b0 + B; k < b0 + 2 * B && k < M; k++)
				pf_row(ROW(k), hint);
			for (uint64_t i = b0; i < b0 + B && i < M; i++)
				acc = work(ROW(i), acc);
		}
	}
	}
	sink = acc;
	return (cpu_now() - t0) / (double)M * 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int parse_list(const char *s, long *out)
{
	int n = 0;
	while (*s && n < LIST_MAX) {
		char *e;
		out[n++] = strtol(s, &e, 10);
		if (e == s)
			return 0;
		s = *e == ',' ? e + 1 : e;
	}
	return n;
}

/* ns a load of a dependent chase (chains = 1) or of 8 interleaved
 * chains over lines spaced randomly within span bytes of tab: one line
 * in each of n / K strata, then shuffled into one cycle (Sattolo), so no
 * line repeats before the cycle ends. */
static double chase(uint64_t span, int chains, int reps)
{
	const uint64_t n = span / 64, K = n < (1u << 20) ? n : (1u << 20), st = n / K;
	uint64_t *ix = malloc(K * sizeof *ix);
	if (!ix)
		return -1;
	for (uint64_t i = 0; i < K; i++)
		ix[i] = i * st + next_rand() % st;
	for (uint64_t i = K - 1; i > 0; i--) {
		const uint64_t j = next_rand() % i, x = ix[i];
		ix[i] = ix[j];
		ix[j] = x;
	}
	for (uint64_t i = 0; i < K; i++)
		*(uint64_t *)(tab + ix[i] * 64) = (uint64_t)(uintptr_t)(tab + ix[(i + 1) % K] * 64);
	double t[REPS_MAX];
	const uint64_t steps = chains == 1 ? 2000000 : 400000;
	for (int r = 0; r < reps; r++) {
		uint64_t *p[8];
		for (int c = 0; c < chains; c++)
			p[c] = (uint64_t *)(tab + ix[(uint64_t)c * K / 8] * 64);
		const double t0 = cpu_now();
		for (uint64_t s = 0; s < steps; s++)
			for (int c = 0; c < chains; c++)
				p[c] = (uint64_t *)(uintptr_t)*p[c];
		t[r] = (cpu_now() - t0) / (double)(steps * (uint64_t)chains) * 1e9;
		for (int c = 0; c < chains; c++)
			sink += (uint64_t)(uintptr_t)p[c];
	}
	free(ix);
	qsort(t, (size_t)reps, sizeof(double), cmp_d);
	return t[reps / 2];
}

int main(int argc, char **argv)
{
	uint64_t mb = 2048;
	int reps = 9;
	long rowl[LIST_MAX] = { 128, 192, 256, 320 }, workl[LIST_MAX] = { 0, 20, 40 };
	int nrow = 4, nwork = 3, small = 0, nchase = 0;
	long chasel[LIST_MAX];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--row") && i + 1 < argc)
			nrow = parse_list(argv[++i], rowl);
		else if (!strcmp(argv[i], "--work") && i + 1 < argc)
			nwork = parse_list(argv[++i], workl);
		else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			m_ids = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--small-pages"))
			small = 1;
		else if (!strcmp(argv[i], "--chase") && i + 1 < argc) {
			if (!(nchase = parse_list(argv[++i], chasel))) {
				fprintf(stderr, "overlap_probe: bad --chase list\n");
				return 2;
			}
		} else {
			fprintf(stderr, "usage: overlap_probe [--mb N] [--row BYTES,...] [--work N,...] [--rows N] [--reps N] "
					"[--small-pages] [--chase MIB,...]\n");
			return 2;
		}
	}
	if (!nrow || !nwork || reps < 1 || reps > REPS_MAX || mb < 64 || m_ids < 64) {
		fprintf(stderr, "overlap_probe: bad option value\n");
		return 2;
	}
	for (int k = 0; k < nchase; k++)
		if (chasel[k] < 1 || (uint64_t)chasel[k] > mb) {
			fprintf(stderr, "overlap_probe: --chase %ld outside 1..--mb (%llu)\n", chasel[k],
				(unsigned long long)mb);
			return 2;
		}
	for (int r = 0; r < nrow; r++)
		if (rowl[r] < 8 || rowl[r] > 4096) {
			fprintf(stderr, "overlap_probe: --row %ld outside 8..4096\n", rowl[r]);
			return 2;
		}
	const uint64_t bytes = mb << 20, huge = 2u << 20;
	uint8_t *raw = mmap(NULL, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ids = malloc(m_ids * sizeof *ids);
	if (raw == MAP_FAILED || !ids) {
		fprintf(stderr, "overlap_probe: no memory for %llu MiB\n", (unsigned long long)mb);
		return 1;
	}
	tab = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
	(void)madvise(tab, bytes, small ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
	memset(tab, 1, bytes); /* first touch outside the timing */
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "AnonHugePages:", 14))
			printf("# table %llu MiB, %s", (unsigned long long)mb, line);
	if (f)
		fclose(f);
	if (nchase) {
		printf("# %s pages; ns a load over random lines of a span, median of %d reps (thread CPU time)\n",
		       small ? "4 KiB" : "2 MiB", reps);
		printf("%-10s %12s %12s\n", "span MiB", "dependent", "8 chains");
		for (int k = 0; k < nchase; k++) {
			const uint64_t span = (uint64_t)chasel[k] << 20;
			const double d = chase(span, 1, reps), c8 = chase(span, 8, reps);
			if (d < 0 || c8 < 0) {
				fprintf(stderr, "overlap_probe: no memory for the chase\n");
				return 1;
			}
			printf("%-10ld %12.1f %12.1f\n", chasel[k], d, c8);
		}
		munmap(raw, bytes + huge);
		free(ids);
		return 0;
	}
	printf("# ns per row, median of %d reps of %llu random rows (thread CPU time)\n", reps,
	       (unsigned long long)m_ids);
	printf("%-5s %-5s", "row B", "work");
	for (int v = 0; v < NV; v++)
		printf(" %10s", vname[v]);
	printf(" %10s %10s\n", "max bound", "sum bound");
	for (int r = 0; r < nrow; r++)
		for (int w = 0; w < nwork; w++) {
			row_bytes = (uint64_t)rowl[r];
			work_n = (int)workl[w];
			nrows = bytes / row_bytes - 1;
			free(map);
			map = malloc(nrows * sizeof *map);
			if (!map) {
				fprintf(stderr, "overlap_probe: no memory for the map\n");
				return 1;
			}
			for (uint64_t i = 0; i < nrows; i++)
				map[i] = next_rand() % nrows;
			double t[NV][REPS_MAX];
			for (int k = 0; k < reps; k++)
				for (int v = 0; v < NV; v++) {
					const int vv = k % 2 ? NV - 1 - v : v; /* order swapped every other rep */
					for (uint64_t i = 0; i < m_ids; i++)
						ids[i] = next_rand() % nrows;
					t[vv][k] = run(vv);
				}
			double med[NV];
			for (int v = 0; v < NV; v++) {
				qsort(t[v], (size_t)reps, sizeof(double), cmp_d);
				med[v] = t[v][reps / 2];
			}
			printf("%-5llu %-5d", (unsigned long long)row_bytes, work_n);
			for (int v = 0; v < NV; v++)
				printf(" %10.1f", med[v]);
			printf(" %10.1f %10.1f\n", med[V_MEMORY] > med[V_WORK] ? med[V_MEMORY] : med[V_WORK],
			       med[V_MEMORY] + med[V_WORK]);
		}
	munmap(raw, bytes + huge);
	free(ids);
	free(map);
	return 0;
}
