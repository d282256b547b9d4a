/* bench_bag_ab.c - two builds of libibp side by side on one embedding bag
 * table (issue 29): nanoseconds per pooled row of ibp_store_embedding_bag
 * (sum, mean) on random rows, and of the decode alone on cached rows, each
 * library loaded with dlopen (RTLD_LOCAL: two copies in one process), the
 * variants alternating in one process.
 *
 *   bench_bag_ab LIB_A LIB_B TABLE.ibp [--reps N] [--bags N] [--pooling L] [--threads T] [--mmap]
 *
 * LIB_A is the reference (say the library before a change, built from a
 * clean tree), LIB_B the candidate. Every rep draws fresh random ids
 * (uniform over the table's rows, 4,096 bags of 20 by default) and times
 * both libraries on them (the order swapped every other rep), checks the
 * outputs bitwise equal, and times:
 *   bag sum / bag mean  one call of ibp_store_embedding_bag, ns per id;
 *   bag cached         sum over ids drawn from 64 rows only (decode + pool,
 *                      no memory misses);
 *   gather cached      ibp_store_gather of those ids, 256 per call (the
 *                      store's decode without the pooling);
 *   decode list / bitmap / mixed  ibp_decode_row over 64 cached rows of
 *                      that mode (mixed: the first 64 rows with exceptions
 *                      of any mode), 200 passes.
 * Prints the median of the reps and the spread (min-max) per variant.
 * Tables: the stores bench/torch_compare.py builds (~/.cache/ibp/bench/
 * bag_f32_8000000x64_float32.ibp, 1.8 GB; bag_f16_16000000x64_float16.ibp).
 * Each library holds its own copy of the table: --mmap maps the file
 * instead (the page cache holds one copy; 4 KiB pages, so slower rows).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#define BENCH_NAME "bench_bag_ab"
#include "bench_util.h"

typedef struct lib {
	const char *path;
	void *h;
	ibp_status_t (*store_open)(const char *, unsigned, ibp_store_t **);
	void (*store_close)(ibp_store_t *);
	ibp_status_t (*bag)(const ibp_store_t *, ibp_bag_mode_t, unsigned, const void *, ibp_dtype_t, uint64_t,
			    const int64_t *, uint64_t, const float *, int64_t, void *, int);
	uint64_t (*nrows)(const ibp_store_t *);
	uint64_t (*row_bytes)(const ibp_store_t *);
	const ibp_codec_t *(*codec)(const ibp_store_t *);
	const ibp_container_t *(*container)(const ibp_store_t *);
	ibp_status_t (*row_meta)(const ibp_container_t *, uint64_t, const uint8_t **, uint64_t *, uint8_t *,
				 unsigned *);
	ibp_status_t (*gather)(ibp_store_t *, const int64_t *, uint64_t, void *, int);
	ibp_status_t (*decode_row)(const ibp_codec_t *, const void *, uint64_t, uint8_t, unsigned, void *);
	const char *(*last_error)(void);
	ibp_store_t *s;
} lib_t;

static void *sym(lib_t *l, const char *name)
{
	void *p = dlsym(l->h, name);
	if (!p) {
		fprintf(stderr, "bench_bag_ab: %s: no symbol %s\n", l->path, name);
		exit(1);
	}
	return p;
}

#define SYM(l, field, name) memcpy(&(l)->field, &(void *){ sym(l, name) }, sizeof((l)->field))

static void lib_load(lib_t *l, const char *path)
{
	l->path = path;
	l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!l->h) {
		fprintf(stderr, "bench_bag_ab: dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	SYM(l, store_open, "ibp_store_open");
	SYM(l, store_close, "ibp_store_close");
	SYM(l, bag, "ibp_store_embedding_bag");
	SYM(l, nrows, "ibp_store_nrows");
	SYM(l, row_bytes, "ibp_store_row_bytes");
	SYM(l, codec, "ibp_store_codec");
	SYM(l, container, "ibp_store_container");
	SYM(l, row_meta, "ibp_container_row_meta");
	SYM(l, decode_row, "ibp_decode_row");
	SYM(l, gather, "ibp_store_gather");
	SYM(l, last_error, "ibp_last_error");
}

static void lib_fail(const lib_t *l, const char *what, ibp_status_t st)
{
	fprintf(stderr, "bench_bag_ab: %s: %s: %d (%s)\n", l->path, what, (int)st, l->last_error());
	exit(1);
}

enum { V_SUM, V_MEAN, V_CACHED, V_GCACHED, V_LIST, V_BITMAP, V_MIXED, NV };
static const char *vname[NV] = { "bag sum", "bag mean", "bag cached (64 rows)", "gather cached",
				 "decode list", "decode bitmap",
				 "decode mixed" };

#define SET 64
#define PASSES 200

typedef struct rowset {
	uint64_t n, row[SET];
} rowset_t;

/* ns per row of variant v with library l; writes its output to out */
static double run_variant(lib_t *l, int v, const int64_t *ids, const int64_t *off, uint64_t nb, uint64_t nids,
			  const int64_t *cids, const rowset_t *sets, int threads, uint8_t *out)
{
	const uint64_t R = l->row_bytes(l->s);
	if (v <= V_CACHED) {
		const int64_t *x = v == V_CACHED ? cids : ids;
		double t0 = now();
		ibp_status_t st = l->bag(l->s, v == V_MEAN ? IBP_BAG_MEAN : IBP_BAG_SUM, 0, x, IBP_DTYPE_I64, nids, off,
					 nb, NULL, -1, out, threads);
		double t = now() - t0;
		if (st != IBP_OK)
			lib_fail(l, "embedding_bag", st);
		return 1e9 * t / (double)nids;
	}
	if (v == V_GCACHED) {
		/* the same cached ids gathered 256 at a time (64 KiB of f32 rows: the
		 * output stays in cache): the store's decode without the pooling */
		double t0 = now();
		for (uint64_t i = 0; i < nids; i += 256) {
			ibp_status_t st = l->gather(l->s, cids + i, nids - i < 256 ? nids - i : 256, out, 1);
			if (st != IBP_OK)
				lib_fail(l, "gather", st);
		}
		return 1e9 * (now() - t0) / (double)nids;
	}
	const rowset_t *rs = &sets[v - V_LIST];
	const ibp_container_t *c = l->container(l->s);
	const ibp_codec_t *codec = l->codec(l->s);
	const uint8_t *src[SET];
	uint64_t len[SET];
	uint8_t mode[SET];
	unsigned cl[SET];
	for (uint64_t k = 0; k < rs->n; k++)
		if (l->row_meta(c, rs->row[k], &src[k], &len[k], &mode[k], &cl[k]) != IBP_OK)
			lib_fail(l, "row_meta", IBP_ERR_CORRUPT);
	double t0 = now();
	for (int p = 0; p < PASSES; p++)
		for (uint64_t k = 0; k < rs->n; k++) {
			ibp_status_t st = l->decode_row(codec, src[k], len[k], mode[k], cl[k], out + k * R);
			if (st != IBP_OK)
				lib_fail(l, "decode_row", st);
		}
	return 1e9 * (now() - t0) / (double)(PASSES * rs->n);
}

int main(int argc, char **argv)
{
	const char *la = NULL, *lb = NULL, *table = NULL;
	int reps = 21, threads = 1;
	unsigned oflags = IBP_OPEN_READ | IBP_OPEN_TRUSTED;
	uint64_t nb = 4096, pool = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--bags") && i + 1 < argc)
			nb = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--pooling") && i + 1 < argc)
			pool = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mmap"))
			oflags = IBP_OPEN_MMAP | IBP_OPEN_TRUSTED;
		else if (argv[i][0] != '-' && !la)
			la = argv[i];
		else if (argv[i][0] != '-' && !lb)
			lb = argv[i];
		else if (argv[i][0] != '-' && !table)
			table = argv[i];
		else {
			fprintf(stderr, "usage: bench_bag_ab LIB_A LIB_B TABLE.ibp [--reps N] [--bags N] [--pooling L] "
					"[--threads T] [--mmap]\n");
			return 2;
		}
	}
	if (!table || reps < 1 || reps > 1001 || nb == 0 || pool == 0 || threads < 1) {
		fprintf(stderr, "bench_bag_ab: need LIB_A LIB_B TABLE.ibp, 1 <= reps <= 1001, bags, pooling, threads >= 1\n");
		return 2;
	}
	lib_t L[2];
	lib_load(&L[0], la);
	lib_load(&L[1], lb);
	for (int k = 0; k < 2; k++) {
		ibp_status_t st = L[k].store_open(table, oflags, &L[k].s);
		if (st != IBP_OK)
			lib_fail(&L[k], "store_open", st);
	}
	const uint64_t nrows = L[0].nrows(L[0].s), R = L[0].row_bytes(L[0].s), nids = nb * pool;

	/* the row sets of the decode variants, from the first rows of the table */
	rowset_t sets[3] = { { 0 }, { 0 }, { 0 } };
	{
		const ibp_container_t *c = L[0].container(L[0].s);
		for (uint64_t r = 0; r < nrows && (sets[0].n < SET || sets[1].n < SET || sets[2].n < SET); r++) {
			const uint8_t *src;
			uint64_t len;
			uint8_t mode;
			unsigned cl;
			if (L[0].row_meta(c, r, &src, &len, &mode, &cl) != IBP_OK)
				lib_fail(&L[0], "row_meta", IBP_ERR_CORRUPT);
			rowset_t *s = mode == IBP_ROW_LIST ? &sets[0] : mode == IBP_ROW_BITMAP ? &sets[1] : NULL;
			if (s && s->n < SET)
				s->row[s->n++] = r;
			if ((mode == IBP_ROW_LIST || mode == IBP_ROW_BITMAP) && sets[2].n < SET)
				sets[2].row[sets[2].n++] = r;
		}
	}
	int64_t *ids = malloc(8 * nids), *cids = malloc(8 * nids), *off = malloc(8 * (nb + 1));
	uint8_t *out[2] = { malloc(nb * R + SET * R), malloc(nb * R + SET * R) };
	double *t[2][NV];
	for (int k = 0; k < 2; k++)
		for (int v = 0; v < NV; v++)
			t[k][v] = calloc((size_t)reps, sizeof(double));
	if (!ids || !cids || !off || !out[0] || !out[1]) {
		fprintf(stderr, "bench_bag_ab: out of memory\n");
		return 1;
	}
	for (uint64_t b = 0; b <= nb; b++)
		off[b] = (int64_t)(b * pool);
	uint64_t seed = 29;
	/* warm-up: every page of both copies touched once (a bag over all rows
	 * in order), so no first touch falls in a timed call */
	{
		const uint64_t step = 1u << 20;
		int64_t *all = malloc(8 * step), o2[2] = { 0, 0 };
		for (uint64_t r0 = 0; r0 < nrows; r0 += step) {
			const uint64_t m = nrows - r0 < step ? nrows - r0 : step;
			for (uint64_t k = 0; k < m; k++)
				all[k] = (int64_t)(r0 + k);
			o2[1] = (int64_t)m;
			for (int k = 0; k < 2; k++) {
				ibp_status_t st = L[k].bag(L[k].s, IBP_BAG_SUM, 0, all, IBP_DTYPE_I64, m, o2, 1, NULL, -1,
							   out[k], 2);
				if (st != IBP_OK)
					lib_fail(&L[k], "warm-up", st);
			}
		}
		free(all);
	}
	printf("%s: %llu rows x %llu bytes, %llu bags of %llu ids, %d thread(s), %d reps, %s\n", table,
	       (unsigned long long)nrows, (unsigned long long)R, (unsigned long long)nb, (unsigned long long)pool,
	       threads, reps, oflags & IBP_OPEN_MMAP ? "mapped" : "read into memory");
	printf("  A = %s\n  B = %s\n", la, lb);
	{
		/* huge pages held (both copies of the table, the rest of the process) */
		FILE *f = fopen("/proc/self/smaps_rollup", "r");
		char line[256];
		while (f && fgets(line, sizeof(line), f))
			if (!strncmp(line, "AnonHugePages:", 14))
				printf("  process %s", line);
		if (f)
			fclose(f);
	}
	for (int r = 0; r < reps; r++) {
		for (uint64_t i = 0; i < nids; i++) {
			ids[i] = (int64_t)(rng_next(&seed) % nrows);
			cids[i] = (int64_t)sets[2].row[rng_next(&seed) % sets[2].n];
		}
		for (int v = 0; v < NV; v++) {
			for (int q = 0; q < 2; q++) {
				const int k = q ^ (r & 1);
				t[k][v][r] = run_variant(&L[k], v, ids, off, nb, nids, cids, sets, threads, out[k]);
			}
			const uint64_t bytes = v <= V_CACHED ? nb * R : v == V_GCACHED ? 256 * R : sets[v - V_LIST].n * R;
			if (memcmp(out[0], out[1], bytes)) {
				fprintf(stderr, "bench_bag_ab: %s: outputs differ between A and B\n", vname[v]);
				return 1;
			}
		}
	}
	printf("  %-22s %10s %10s %8s   (ns per row: median [min-max] of %d reps)\n", "variant", "A", "B", "B/A",
	       reps);
	for (int v = 0; v < NV; v++) {
		double lo[2], hi[2], md[2];
		for (int k = 0; k < 2; k++) {
			md[k] = median(t[k][v], reps); /* sorts */
			lo[k] = t[k][v][0];
			hi[k] = t[k][v][reps - 1];
		}
		printf("  %-22s %10.1f %10.1f %8.3f   A [%.1f-%.1f] B [%.1f-%.1f]\n", vname[v], md[0], md[1],
		       md[1] / md[0], lo[0], hi[0], lo[1], hi[1]);
	}
	printf("  rows: %llu list, %llu bitmap in the decode sets; every output bitwise equal between A and B\n",
	       (unsigned long long)sets[0].n, (unsigned long long)sets[1].n);
	for (int k = 0; k < 2; k++)
		L[k].store_close(L[k].s);
	for (int k = 0; k < 2; k++)
		for (int v = 0; v < NV; v++)
			free(t[k][v]);
	free(ids);
	free(cids);
	free(off);
	free(out[0]);
	free(out[1]);
	return 0;
}
