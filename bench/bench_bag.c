/* bench_bag.c - embedding bags (sum) pooled from a compressed store,
 * ibp_store_embedding_bag, against the same bags pooled from the plain
 * array the way PyTorch's CPU kernel does (issue 13, docs/BENCHMARKS.md
 * "Embedding bags").
 *
 *   bench_bag FILE.npy [--rows N] [--bags N] [--pooling L] [--runs N] [--pf D,D,...] [--calls N]
 *             [--codec ibp|exp-rows]
 *
 * Loads FILE.npy (2-D float32), tiles its rows up to --rows (default: as
 * is), packs it (--codec ibp, the default: trained, packed layout; exp-rows:
 * the exponent codec's row form) into a temporary file and times,
 * for --runs rounds (default 7) interleaved so load on a shared machine
 * hits every method alike, --bags (default 4096) bags of --pooling
 * (default 20) uniform random ids with 1 and 2 threads: the plain pooled
 * sum, and ibp_store_embedding_bag at each look-ahead distance of --pf
 * (IBP_GATHER_PREFETCH, read per call; 0 = none; default 0,8). Every
 * output is compared bitwise with the plain one. Prints the median bags
 * per second of each, for 1 thread also per second of the thread's CPU
 * time (steadier on a loaded machine), and the table bytes each holds.
 * --calls N (default 1) times N calls per run and method: small batches
 * (a few hundred bags), where the cost of a call itself shows (the bag
 * runs on the store's thread pool: no thread is started per call). For 2
 * threads it also prints bags per second of the process's CPU time (all
 * threads, starting and ending them included), which a loaded machine
 * disturbs far less than the wall clock.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ibp.h"
#define BENCH_NAME "bench_bag"
#include "bench_util.h"

#define MAX_PF 8

static double proc_cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The plain pooled sum: 0 + r0 + r1 + ... in float32, as PyTorch's CPU
 * kernel, bags split over threads in contiguous ranges. */
typedef struct plain {
	const float *tab;
	const int64_t *ids, *off;
	uint64_t b, e, dim;
	float *out;
} plain_t;

static void *plain_run(void *arg)
{
	plain_t *p = arg;
	for (uint64_t b = p->b; b < p->e; b++) {
		float *o = p->out + b * p->dim;
		memset(o, 0, p->dim * sizeof(float));
		for (int64_t i = p->off[b]; i < p->off[b + 1]; i++) {
			const float *r = p->tab + (uint64_t)p->ids[i] * p->dim;
			for (uint64_t k = 0; k < p->dim; k++)
				o[k] += r[k];
		}
	}
	return NULL;
}

static void plain_bag(const float *tab, const int64_t *ids, const int64_t *off, uint64_t nb, uint64_t dim,
		      float *out, int t)
{
	pthread_t th[16];
	plain_t a[16];
	for (int k = 0; k < t; k++)
		a[k] = (plain_t){ tab, ids, off, nb * (uint64_t)k / (uint64_t)t, nb * (uint64_t)(k + 1) / (uint64_t)t,
				  dim, out };
	for (int k = 1; k < t; k++)
		if (pthread_create(&th[k], NULL, plain_run, &a[k]) != 0) {
			fprintf(stderr, "bench_bag: pthread_create failed\n");
			exit(1);
		}
	plain_run(&a[0]);
	for (int k = 1; k < t; k++)
		pthread_join(th[k], NULL);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	uint64_t rows = 0, nbags = 4096, pool = 20;
	int runs = 7, pfs[MAX_PF] = { 0, 8 }, npf = 2, calls = 1, exprows = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			rows = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--bags") && i + 1 < argc)
			nbags = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--pooling") && i + 1 < argc)
			pool = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--codec") && i + 1 < argc && (!strcmp(argv[i + 1], "ibp") ||
									 !strcmp(argv[i + 1], "exp-rows")))
			exprows = !strcmp(argv[++i], "exp-rows");
		else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
			calls = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pf") && i + 1 < argc) {
			npf = 0;
			for (char *p = argv[++i]; *p && npf < MAX_PF; p += *p == ',') {
				char *q;
				pfs[npf++] = (int)strtol(p, &q, 10);
				if (q == p)
					break;
				p = q;
			}
		} else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fprintf(stderr, "usage: bench_bag FILE.npy [--rows N] [--bags N] [--pooling L] [--runs N] "
					"[--pf D,D,...] [--calls N] [--codec ibp|exp-rows]\n");
			return 2;
		}
	}
	if (!path || runs < 1 || runs > 101 || nbags == 0 || npf == 0 || calls < 1) {
		fprintf(stderr, "bench_bag: need FILE.npy, 1 <= runs <= 101, bags >= 1, calls >= 1, a --pf list\n");
		return 2;
	}
	ibp_npy_info_t info;
	void *data = NULL;
	ibp_status_t st = ibp_npy_load(path, 0, &info, &data);
	if (st != IBP_OK)
		die(path, st);
	if (info.ndim != 2 || info.shape[0] == 0 || info.dtype != IBP_DTYPE_F32) {
		fprintf(stderr, "bench_bag: %s: need a 2-D float32 array with rows\n", path);
		return 1;
	}
	uint64_t n0 = info.shape[0], dim = info.shape[1], R = dim * 4;
	if (rows == 0)
		rows = n0;
	/* huge pages where the kernel grants them, as NumPy (and so a torch
	 * tensor over a NumPy array) and the store's payload get: with 4 KiB
	 * pages the plain side missed the TLB on every row and ran at a quarter
	 * of nn.EmbeddingBag's speed (2026-11-28) */
	const size_t HP = 2u << 20, tbytes = ((size_t)(rows * R) + HP - 1) / HP * HP;
	float *tab = aligned_alloc(HP, tbytes);
#ifdef MADV_HUGEPAGE
	if (tab)
		(void)madvise(tab, tbytes, MADV_HUGEPAGE);
#endif
	if (!tab) {
		fprintf(stderr, "bench_bag: no memory for %llu rows\n", (unsigned long long)rows);
		return 1;
	}
	for (uint64_t r = 0; r < rows; r++)
		memcpy((uint8_t *)tab + r * R, (const uint8_t *)data + (r % n0) * R, (size_t)R);
	ibp_npy_free(data);

	char tmp[64];
	snprintf(tmp, sizeof(tmp), "/tmp/bench_bag_%d.ibp", (int)getpid());
	uint64_t shape[2] = { rows, dim };
	if ((st = exprows ? ibp_pack_exp_rows(tmp, tab, IBP_DTYPE_F32, 2, shape, 0)
			  : ibp_pack(tmp, tab, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED)) != IBP_OK)
		die("pack", st);
	ibp_store_t *s;
	if ((st = ibp_store_open(tmp, IBP_OPEN_READ, &s)) != IBP_OK)
		die("open", st);
	unlink(tmp);
	uint64_t held = ibp_container_file_bytes(ibp_store_container(s));
	printf("%s: %llu x %llu float32 (%.1f MiB plain, %.1f MiB compressed, %.1f%% saved), %llu bags of %llu "
	       "ids, %d runs of %d calls\n",
	       path, (unsigned long long)rows, (unsigned long long)dim, (double)(rows * R) / 1048576.0,
	       (double)held / 1048576.0, 100.0 * (1.0 - (double)held / (double)(rows * R)),
	       (unsigned long long)nbags, (unsigned long long)pool, runs, calls);

	uint64_t nids = nbags * pool;
	int64_t *ids = malloc(sizeof(int64_t) * nids), *off = malloc(sizeof(int64_t) * (nbags + 1));
	float *ref = malloc((size_t)(nbags * R)), *got = malloc((size_t)(nbags * R));
	if (!ids || !off || !ref || !got) {
		fprintf(stderr, "bench_bag: out of memory\n");
		return 1;
	}
	uint64_t seed = 13;
	for (uint64_t i = 0; i < nids; i++)
		ids[i] = (int64_t)(rng_next(&seed) % rows);
	for (uint64_t b = 0; b <= nbags; b++)
		off[b] = (int64_t)(b * pool);

	/* methods: plain 1t, plain 2t, then ibp 1t and 2t per distance */
	int NM = 2 + 2 * npf;
	double *tm[2 + 2 * MAX_PF], *tc[2 + 2 * MAX_PF], *tp[2 + 2 * MAX_PF];
	char mname[2 + 2 * MAX_PF][48];
	for (int m = 0; m < NM; m++) {
		if (m < 2)
			snprintf(mname[m], sizeof(mname[m]), "plain %dt", m % 2 + 1);
		else
			snprintf(mname[m], sizeof(mname[m]), "ibp %dt pf=%d", m % 2 + 1, pfs[(m - 2) / 2]);
		tm[m] = calloc((size_t)runs, sizeof(double));
		tc[m] = calloc((size_t)runs, sizeof(double));
		tp[m] = calloc((size_t)runs, sizeof(double));
	}
	plain_bag(tab, ids, off, nbags, dim, ref, 1);
	for (int r = 0; r < runs; r++)
		for (int m = 0; m < NM; m++) {
			int t = m % 2 + 1;
			char v[16];
			if (m >= 2) {
				snprintf(v, sizeof(v), "%d", pfs[(m - 2) / 2]);
				setenv("IBP_GATHER_PREFETCH", v, 1);
			}
			memset(got, 0xff, (size_t)(nbags * R));
			double c0 = cpu_now(), p0 = proc_cpu_now(), t0 = now();
			for (int k = 0; k < calls; k++) {
				if (m < 2)
					plain_bag(tab, ids, off, nbags, dim, got, t);
				else if ((st = ibp_store_embedding_bag(s, IBP_BAG_SUM, 0, ids, IBP_DTYPE_I64, nids, off,
								       nbags, NULL, -1, got, t)) != IBP_OK)
					die("embedding_bag", st);
			}
			tm[m][r] = now() - t0;
			tc[m][r] = cpu_now() - c0;
			tp[m][r] = proc_cpu_now() - p0;
			if (memcmp(got, ref, (size_t)(nbags * R))) {
				fprintf(stderr, "bench_bag: %s output differs from the plain pooled sum\n", mname[m]);
				return 1;
			}
		}
	for (int m = 0; m < NM; m++) {
		const double nb = (double)nbags * calls;
		double w = nb / median(tm[m], runs), c = nb / median(tc[m], runs);
		double w0 = nb / median(tm[m % 2], runs), c0 = nb / median(tc[0], runs);
		if (m % 2 == 0)
			printf("  %-14s %10.0f bags/s wall (%5.1f%% of plain), %10.0f bags/s per CPU second (%5.1f%%)\n",
			       mname[m], w, 100.0 * w / w0, c, 100.0 * c / c0);
		else
			printf("  %-14s %10.0f bags/s wall (%5.1f%% of plain), %10.0f bags/s per process CPU second\n",
			       mname[m], w, 100.0 * w / w0, nb / median(tp[m], runs));
	}
	printf("  medians of %d runs; every output bitwise equal to the plain pooled sum\n", runs);
	ibp_store_close(s);
	for (int m = 0; m < NM; m++) {
		free(tm[m]);
		free(tc[m]);
		free(tp[m]);
	}
	free(ids);
	free(off);
	free(ref);
	free(got);
	free(tab);
	return 0;
}
