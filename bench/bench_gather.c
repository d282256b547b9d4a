/* bench_gather.c - random-row gather: ibp_store_gather against a plain
 * memcpy gather of the same rows from the uncompressed array (issue 16,
 * docs/BENCHMARKS.md "Random-row gather").
 *
 *   bench_gather FILE.npy [--dtype bf16|f32] [--rows N] [--cols N] [--ids N]
 *                [--runs N] [--impl I,I,...] [--pf D,D,...] [--map M,M,...]
 *                [--keep PATH [--reuse]]
 *
 * Loads FILE.npy (a 2-D array; --dtype bf16 reads its u16 elements as
 * bf16), keeps the first --cols columns (default all), tiles its rows up
 * to --rows rows (default: as is), packs it with
 * ibp_pack (trained, packed layout) into a temporary file and times, for
 * --runs rounds (default 7) interleaved so load on a shared machine hits
 * every method alike, a gather of --ids (default 65536) random ids with
 * 1 and 2 threads: plain memcpy from the array, and ibp_store_gather.
 * Every output is compared with the memcpy gather's. Prints the median
 * GB/s (decoded bytes / second) of each and ibp's share of memcpy; for
 * 1 thread also per second of the thread's CPU time, steadier on a loaded
 * machine. --pf times the store at each gather prefetch distance listed
 * (IBP_GATHER_PREFETCH, 0 = none; default: the library's own) side by side,
 * --impl (auto, portable, bmi2, avx512, avx2) each decoder, --map 1 or 0
 * with or without the store's row map (0 sets IBP_ROW_MAP_MAX=0: the
 * gather walks the compact index, as before the map); the shorter lists
 * repeat their last value. --keep PATH keeps the packed file; with
 * --reuse an existing PATH is opened instead of packing again (it must be
 * a pack of the same table: every output is still verified). --thp 0
 * leaves the plain table and the store's file without transparent huge
 * pages (default: both get them, as the library and NumPy ask for).
 * --seq gathers rows 0, 1, 2, ... in order instead of random ids (the
 * decode speed with the hardware prefetcher's help).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ibp.h"
#include "ibp/unstable.h"
#define BENCH_NAME "bench_gather"
#include "bench_util.h"

#define MAX_PF 8

/* The plain gather, split over threads like the store splits its work. */
typedef struct plain {
	const uint8_t *base;
	const int64_t *ids;
	uint64_t b, e, R;
	uint8_t *out;
} plain_t;

static void *plain_run(void *arg)
{
	plain_t *p = arg;
	for (uint64_t i = p->b; i < p->e; i++)
		memcpy(p->out + i * p->R, p->base + (uint64_t)p->ids[i] * p->R, p->R);
	return NULL;
}

static void plain_gather(const uint8_t *base, const int64_t *ids, uint64_t n, uint64_t R, uint8_t *out,
			 int t)
{
	pthread_t th[16];
	plain_t a[16];
	for (int k = 0; k < t; k++)
		a[k] = (plain_t){ base, ids, n * (uint64_t)k / (uint64_t)t, n * (uint64_t)(k + 1) / (uint64_t)t,
				  R, out };
	for (int k = 1; k < t; k++)
		if (pthread_create(&th[k], NULL, plain_run, &a[k]) != 0) {
			fprintf(stderr, "bench_gather: pthread_create failed\n");
			exit(1);
		}
	plain_run(&a[0]);
	for (int k = 1; k < t; k++)
		pthread_join(th[k], NULL);
}

static void advise_huge(void *p, uint64_t size)
{
	const uintptr_t H = 2u << 20, lo = ((uintptr_t)p + H - 1) & ~(H - 1), hi = ((uintptr_t)p + size) & ~(H - 1);
	if (hi > lo)
		(void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
}

/* Drops the gathered rows from the caches between runs, so every run
 * starts cold as a gather of a table far larger than the cache does. */
static void flush_caches(uint8_t *junk, uint64_t bytes)
{
	for (uint64_t i = 0; i < bytes; i += 64)
		junk[i]++;
}

int main(int argc, char **argv)
{
	const char *path = NULL, *keep = NULL, *dts = NULL, *impls = "auto";
	uint64_t rows = 0, cols = 0, nids = 65536;
	int runs = 7, reuse = 0, thp = 1, seq = 0;
	int pfs[MAX_PF] = { -1 }, npf = 1;
	int maps[MAX_PF] = { 1 }, nmap = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
			dts = argv[++i];
		else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			rows = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
			cols = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
			nids = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--impl") && i + 1 < argc)
			impls = argv[++i];
		else if (!strcmp(argv[i], "--pf") && i + 1 < argc) {
			npf = 0;
			for (char *p = argv[++i]; *p && npf < MAX_PF; p += *p == ',') {
				char *q;
				pfs[npf++] = (int)strtol(p, &q, 10);
				if (q == p)
					break;
				p = q;
			}
		} else if (!strcmp(argv[i], "--map") && i + 1 < argc) {
			nmap = 0;
			for (char *p = argv[++i]; *p && nmap < MAX_PF; p += *p == ',') {
				char *q;
				maps[nmap++] = (int)strtol(p, &q, 10);
				if (q == p)
					break;
				p = q;
			}
		} else if (!strcmp(argv[i], "--keep") && i + 1 < argc)
			keep = argv[++i];
		else if (!strcmp(argv[i], "--reuse"))
			reuse = 1;
		else if (!strcmp(argv[i], "--thp") && i + 1 < argc)
			thp = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seq"))
			seq = 1;
		else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fprintf(stderr, "usage: bench_gather FILE.npy [--dtype bf16|f32] [--rows N] [--cols N] [--ids N] "
					"[--runs N] [--impl I,I,...] [--pf D,D,...] [--map M,M,...] [--keep PATH [--reuse]] [--thp 0|1] [--seq]\n");
			return 2;
		}
	}
	if (!path || runs < 1 || runs > 101 || nids == 0) {
		fprintf(stderr, "bench_gather: need FILE.npy, 1 <= runs <= 101, ids >= 1\n");
		return 2;
	}
	ibp_npy_info_t info;
	void *data = NULL;
	ibp_status_t st = ibp_npy_load(path, 0, &info, &data);
	if (st != IBP_OK)
		die(path, st);
	if (info.ndim != 2 || info.shape[0] == 0) {
		fprintf(stderr, "bench_gather: %s: need a 2-D array with rows\n", path);
		return 1;
	}
	ibp_dtype_t dt = info.dtype;
	if (dts && !strcmp(dts, "bf16"))
		dt = IBP_DTYPE_BF16;
	else if (dts && !strcmp(dts, "f32"))
		dt = IBP_DTYPE_F32;
	uint64_t n0 = info.shape[0], R0 = info.data_bytes / n0;
	if (cols == 0 || cols > info.shape[1])
		cols = info.shape[1];
	uint64_t R = cols * info.elem_bytes;
	if (rows == 0)
		rows = n0;
	uint8_t *tab = malloc((size_t)(rows * R));
	if (!tab) {
		fprintf(stderr, "bench_gather: no memory for %llu rows\n", (unsigned long long)rows);
		return 1;
	}
	/* huge pages for the plain table as for the store's copy of the file
	 * (NumPy asks for them on large arrays too): --thp 0 leaves both
	 * without (the store then reads IBP_NO_HUGEPAGES) */
	if (thp)
		advise_huge(tab, rows * R);
	else
		setenv("IBP_NO_HUGEPAGES", "1", 1);
	for (uint64_t r = 0; r < rows; r++)
		memcpy(tab + r * R, (const uint8_t *)data + (r % n0) * R0, (size_t)R);
	ibp_npy_free(data);

	char tmp[64];
	snprintf(tmp, sizeof(tmp), "/tmp/bench_gather_%d.ibp", (int)getpid());
	const char *out_path = keep ? keep : tmp;
	uint64_t shape[2] = { rows, cols };
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	double t0 = now(), tpack = 0.0;
	if (!(reuse && keep && access(keep, R_OK) == 0)) {
		st = ibp_pack(out_path, tab, dt, 2, shape, &o, IBP_LAYOUT_PACKED);
		if (st != IBP_OK)
			die("pack", st);
		tpack = now() - t0;
	}
	/* implementations, as many as --pf values (the last one repeats) */
	static const char *impl_name[] = { "auto", "portable", "bmi2", "avx512", "avx2" };
	ibp_impl_t want[MAX_PF];
	int nimpl = 0;
	for (const char *p = impls; nimpl < MAX_PF;) {
		size_t n = strcspn(p, ",");
		int found = -1;
		for (int k = 0; k < 5; k++)
			if (strlen(impl_name[k]) == n && !strncmp(p, impl_name[k], n))
				found = k;
		if (found < 0) {
			fprintf(stderr, "bench_gather: unknown implementation in '%s'\n", impls);
			return 2;
		}
		want[nimpl++] = (ibp_impl_t)found;
		if (!p[n])
			break;
		p += n + 1;
	}
	for (; npf < nimpl || npf < nmap; npf++)
		pfs[npf] = pfs[npf - 1];
	for (; nimpl < npf; nimpl++)
		want[nimpl] = want[nimpl - 1];
	for (; nmap < npf; nmap++)
		maps[nmap] = maps[nmap - 1];
	/* one store per prefetch distance (IBP_GATHER_PREFETCH is read at open) */
	ibp_store_t *sv[MAX_PF];
	for (int k = 0; k < npf; k++) {
		char v[16];
		snprintf(v, sizeof(v), "%d", pfs[k]);
		if (pfs[k] >= 0)
			setenv("IBP_GATHER_PREFETCH", v, 1);
		else
			unsetenv("IBP_GATHER_PREFETCH");
		if (maps[k])
			unsetenv("IBP_ROW_MAP_MAX");
		else
			setenv("IBP_ROW_MAP_MAX", "0", 1);
		if ((st = ibp_store_open(out_path, IBP_OPEN_READ, &sv[k])) != IBP_OK)
			die("open", st);
	}
	ibp_store_t *s = sv[0];
	if (!keep)
		unlink(tmp);
	/* the store's codec belongs to its container; a benchmark may switch
	 * its implementation (the call exists for tests and benchmarks) */
	ibp_codec_t *codec = (ibp_codec_t *)(uintptr_t)ibp_store_codec(s);
	for (int k = 0; k < npf; k++)
		if ((st = ibp_codec_set_impl((ibp_codec_t *)(uintptr_t)ibp_store_codec(sv[k]), want[k])) != IBP_OK)
			die("impl", st);
	const ibp_container_t *c = ibp_store_container(s);
	printf("%s: %llu x %llu B (%s), %llu %s ids, %d runs, impl (first store) %s, payload %.1f%% of raw, pack %.2f s\n",
	       path, (unsigned long long)rows, (unsigned long long)R, ibp_dtype_name(dt),
	       (unsigned long long)nids, seq ? "sequential" : "random", runs, impl_name[ibp_codec_impl(codec)],
	       100.0 * (double)(ibp_container_file_bytes(c)) / (double)(rows * R), tpack);

	int64_t *ids = malloc(sizeof(int64_t) * nids);
	uint8_t *ref = malloc((size_t)(nids * R)), *got = malloc((size_t)(nids * R));
	uint64_t junk_bytes = 64ull << 20;
	uint8_t *junk = calloc(1, (size_t)junk_bytes);
	if (!ids || !ref || !got || !junk) {
		fprintf(stderr, "bench_gather: out of memory\n");
		return 1;
	}
	uint64_t seed = 16;
	for (uint64_t i = 0; i < nids; i++)
		ids[i] = seq ? (int64_t)(i % rows) : (int64_t)(rng_next(&seed) % rows);

	/* methods: memcpy 1t, memcpy 2t, then ibp 1t and 2t per distance */
	int NM = 2 + 2 * npf;
	char mname[2 + 2 * MAX_PF][80];
	double *tm[2 + 2 * MAX_PF], *tc[2 + 2 * MAX_PF];
	for (int m = 0; m < NM; m++) {
		int t = m % 2 + 1;
		if (m < 2)
			snprintf(mname[m], sizeof(mname[m]), "memcpy %dt", t);
		else if (pfs[(m - 2) / 2] < 0)
			snprintf(mname[m], sizeof(mname[m]), "ibp %dt %s%s", t,
				 impl_name[ibp_codec_impl(ibp_store_codec(sv[(m - 2) / 2]))],
				 maps[(m - 2) / 2] ? "" : " nomap");
		else
			snprintf(mname[m], sizeof(mname[m]), "ibp %dt %s pf=%d%s", t,
				 impl_name[ibp_codec_impl(ibp_store_codec(sv[(m - 2) / 2]))], pfs[(m - 2) / 2],
				 maps[(m - 2) / 2] ? "" : " nomap");
		tm[m] = calloc((size_t)runs, sizeof(double));
		tc[m] = calloc((size_t)runs, sizeof(double));
	}
	plain_gather(tab, ids, nids, R, ref, 1);
	for (int r = 0; r < runs; r++)
		for (int m = 0; m < NM; m++) {
			int t = m % 2 + 1;
			memset(got, 0, (size_t)(nids * R));
			flush_caches(junk, junk_bytes);
			double c0 = cpu_now();
			t0 = now();
			if (m < 2)
				plain_gather(tab, ids, nids, R, got, t);
			else if ((st = ibp_store_gather(sv[(m - 2) / 2], ids, nids, got, t)) != IBP_OK)
				die("gather", st);
			tm[m][r] = now() - t0;
			tc[m][r] = cpu_now() - c0;
			if (memcmp(got, ref, (size_t)(nids * R))) {
				fprintf(stderr, "bench_gather: %s output differs from the memcpy gather\n", mname[m]);
				return 1;
			}
		}
	/* 1 thread: also by the thread's CPU time (the caller does all the work) */
	double gbs[2 + 2 * MAX_PF], cgbs[2 + 2 * MAX_PF];
	for (int m = 0; m < NM; m++) {
		gbs[m] = (double)(nids * R) / median(tm[m], runs) / 1e9;
		cgbs[m] = (double)(nids * R) / median(tc[m], runs) / 1e9;
		if (m % 2 == 0)
			printf("  %-20s %6.2f GB/s wall (%3.0f%% of memcpy), %6.2f GB/s per CPU second (%3.0f%%)\n",
			       mname[m], gbs[m], 100.0 * gbs[m] / gbs[0], cgbs[m], 100.0 * cgbs[m] / cgbs[0]);
		else
			printf("  %-20s %6.2f GB/s wall (%3.0f%% of memcpy)\n", mname[m], gbs[m],
			       100.0 * gbs[m] / gbs[1]);
	}
	printf("  medians of %d runs; every output verified against the memcpy gather\n", runs);
	for (int k = 0; k < npf; k++)
		ibp_store_close(sv[k]);
	for (int m = 0; m < NM; m++) {
		free(tm[m]);
		free(tc[m]);
	}
	free(ids);
	free(ref);
	free(got);
	free(junk);
	free(tab);
	return 0;
}
