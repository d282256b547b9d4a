/* bench_kv_host.c - one thread of the KV offloader's host EXP store, by
 * variant (docs/BENCHMARKS.md, issue 33): 6,144 blocks of 24 KiB (a K row
 * and a V row of 12 KiB, bf16 from datasets/sample/minilm_kv_bf16.npy) in
 * a 151 MB array, each encoded with the layer's sigma and written into
 * its own slot of a pool-sized buffer:
 *   stage     rows copied into a stage, ibp_exp_encode, memcpy into the slot
 *   split     ibpi_exp_encode_split from the rows where they lie
 *   split+pf  the same, the encoder prefetching the rows ahead
 *   +stream   split+pf, the slot written by ibpi_copy_stream (what the store does)
 *   no copy   split+pf, the block left in the out buffer (the slot write's floor)
 * Thread CPU time of each pass, variants interleaved pass by pass. It calls
 * library internals, so it lives with the white-box tests; not a test.
 *
 *   bench_kv_host [--runs N] [--npy PATH]
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exp/exp_split.h"
#include "ibp/exp.h"
#include "ibp/status.h"
#include "util/copy.h"

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int runs = 7;
	const char *npy = "datasets/sample/minilm_kv_bf16.npy";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--npy") && i + 1 < argc)
			npy = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--runs N] [--npy PATH]\n", argv[0]);
			return 2;
		}
	}
	if (runs < 1 || runs > 101) {
		fprintf(stderr, "bench_kv_host: 1 <= runs <= 101\n");
		return 2;
	}
	FILE *f = fopen(npy, "rb");
	if (!f) {
		fprintf(stderr, "bench_kv_host: cannot open %s (run from the repository root or give --npy)\n", npy);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	uint8_t *buf = malloc((size_t)sz);
	fseek(f, 0, SEEK_SET);
	if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz || sz < 16) {
		fprintf(stderr, "bench_kv_host: cannot read %s\n", npy);
		return 1;
	}
	fclose(f);
	uint16_t hl;
	memcpy(&hl, buf + 8, 2);
	const uint16_t *x = (const uint16_t *)(const void *)(buf + 10 + hl);
	const uint64_t N = ((uint64_t)sz - 10 - hl) / 2, R = 12288, nb = 6144, n = R; /* n bf16 = 2 rows of R bytes */
	uint8_t *kv = malloc(2 * nb * R);
	if (!kv)
		return 1;
	for (uint64_t i = 0; i < nb * R; i++) /* every block different bytes */
		((uint16_t *)(void *)kv)[i] = x[(i * 7 + i / 5000) % N];
	double ss = 0;
	for (uint64_t i = 0; i < N; i++) {
		uint32_t u = (uint32_t)x[i] << 16;
		float v;
		memcpy(&v, &u, 4);
		ss += (double)v * v;
	}
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = 1;
	o.checksum = 0;
	o.sigma = sqrt(ss / (double)N);
	uint64_t cap = 0;
	if (ibp_exp_encode_bound(IBP_DTYPE_BF16, n, &cap) != IBP_OK)
		return 1;
	const uint64_t stride = (cap + 63) / 64 * 64;
	uint8_t *out = aligned_alloc(64, stride), *stage = aligned_alloc(64, 2 * R), *pool = malloc(nb * stride);
	double *t = malloc(sizeof(double) * 5 * (size_t)runs);
	if (!out || !stage || !pool || !t)
		return 1;
	memset(pool, 0, nb * stride); /* the slots exist (faulted in) as a warm pool's do */
	static const char *name[5] = { "stage", "split", "split+pf", "+stream", "no copy" };
	uint64_t total = 0;
	const int isa = ibpi_exp_isa(); /* once, as the store reads it once a call */
	for (int r = 0; r < runs; r++)
		for (int v = 0; v < 5; v++) {
			double t0 = cpu_s();
			total = 0;
			for (uint64_t b = 0; b < nb; b++) {
				const uint8_t *k = kv + b * R, *vr = kv + (nb + b) * R;
				uint64_t size = 0;
				ibp_status_t st;
				if (v == 0) {
					memcpy(stage, k, R);
					memcpy(stage + R, vr, R);
					st = ibp_exp_encode(stage, IBP_DTYPE_BF16, n, &o, out, cap, &size);
				} else {
					st = ibpi_exp_encode_split(k, n / 2, vr, IBP_DTYPE_BF16, n, &o, v >= 2, isa,
								   out, cap, &size);
				}
				if (st != IBP_OK) {
					fprintf(stderr, "bench_kv_host: %s\n", ibp_last_error());
					return 1;
				}
				if (v == 3)
					ibpi_copy_stream(pool + b * stride, out, size);
				else if (v < 3)
					memcpy(pool + b * stride, out, size);
				total += size;
			}
			t[v * runs + r] = cpu_s() - t0;
		}
	printf("bench_kv_host: %llu blocks of %llu bytes (%.1f MB), ratio %.3f, one thread, ms of thread CPU time a "
	       "pass, median (min-max) of %d\n",
	       (unsigned long long)nb, (unsigned long long)(2 * R), (double)(2 * nb * R) / 1e6,
	       (double)(2 * nb * R) / (double)total, runs);
	for (int v = 0; v < 5; v++) {
		double *a = t + v * runs;
		qsort(a, (size_t)runs, sizeof(double), cmp_d);
		printf("  %-9s %7.1f (%.1f-%.1f)\n", name[v], a[runs / 2] * 1e3, a[0] * 1e3, a[runs - 1] * 1e3);
	}
	free(buf), free(kv), free(out), free(stage), free(pool), free(t);
	return 0;
}
