/* bench_encode.c - encode speed of each codec path, side by side (issue 16).
 *
 *   bench_encode FILE.npy [--dtype bf16] [--runs N] [--impl I,I,...] [--threads N]
 *
 * Trains a codec on FILE.npy's rows (ibp_codec_train, default options),
 * then times ibp_encode_batch of all rows on each implementation (portable,
 * bmi2, avx2, avx512; default all the CPU has), interleaved run by run,
 * and prints per implementation the median of N runs (default 5) in GB/s
 * of uncompressed rows, per wall second and per CPU second of the process
 * (CLOCK_PROCESS_CPUTIME_ID: leaves out time spent waiting for a core on
 * a loaded machine). Every path's output is compared with the portable
 * one's (exit 1 on a difference). Also times ibp_row_size over all rows
 * (the sizing pass training runs for every candidate codec).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ibp.h"
#include "ibp/unstable.h"

#define BENCH_NAME "bench_encode"
#include "bench_util.h"

#define MAX_IMPL 5

static double proc_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	const char *path = NULL, *impls = NULL;
	unsigned npy_flags = 0;
	int runs = 5, nthreads = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dtype") && i + 1 < argc && !strcmp(argv[i + 1], "bf16"))
			npy_flags |= IBP_NPY_BF16, i++;
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--impl") && i + 1 < argc)
			impls = argv[++i];
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			nthreads = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fprintf(stderr, "usage: bench_encode FILE.npy [--dtype bf16] [--runs N] "
					"[--impl I,I,...] [--threads N]\n");
			return 2;
		}
	}
	if (!path || runs < 1 || runs > 101 || nthreads < 0) {
		fprintf(stderr, "bench_encode: need FILE.npy, 1 <= runs <= 101, threads >= 0\n");
		return 2;
	}
	ibp_npy_info_t info;
	void *data = NULL;
	ibp_status_t st = ibp_npy_load(path, npy_flags, &info, &data);
	if (st != IBP_OK)
		die(path, st);
	if (info.ndim < 1 || info.shape[0] == 0) {
		fprintf(stderr, "bench_encode: %s: no rows\n", path);
		return 1;
	}
	const uint64_t n = info.shape[0], R = info.data_bytes / n;
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	ibp_codec_t *c = NULL;
	double t0 = now();
	if ((st = ibp_codec_train(data, n, R, &o, &c)) != IBP_OK)
		die("train", st);
	printf("%s: %llu rows x %llu B, chunk %u, %u cluster(s), trained in %.2f s\n", path,
	       (unsigned long long)n, (unsigned long long)R, ibp_codec_chunk_bytes(c), ibp_codec_nclusters(c),
	       now() - t0);

	static const char *name[MAX_IMPL] = { "portable", "bmi2", "avx2", "avx512", "auto" };
	static const ibp_impl_t id[MAX_IMPL] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX2,
						 IBP_IMPL_AVX512, IBP_IMPL_AUTO };
	int use[MAX_IMPL], nuse = 0;
	for (int k = 0; k < MAX_IMPL; k++) {
		int want = impls ? strstr(impls, name[k]) != NULL : k < MAX_IMPL - 1;
		if (want && ibp_codec_set_impl(c, id[k]) == IBP_OK)
			use[nuse++] = k;
	}
	const uint64_t cap = ibp_batch_bound(c, n);
	uint8_t *ref = malloc(cap ? cap : 1), *dst = malloc(cap ? cap : 1), *fl = malloc(n), *cl = malloc(n);
	uint64_t *roff = malloc((n + 1) * 8), *off = malloc((n + 1) * 8);
	if (!ref || !dst || !fl || !cl || !roff || !off) {
		fprintf(stderr, "bench_encode: out of memory\n");
		return 1;
	}
	ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
	if ((st = ibp_encode_batch(c, data, n, ref, cap, roff, fl, cl, nthreads)) != IBP_OK)
		die("encode", st);
	memset(dst, 0, cap); /* first touch outside the timed runs */
	double wall[MAX_IMPL][101], cpu[MAX_IMPL][101], size_wall[MAX_IMPL][101];
	for (int r = 0; r < runs; r++) {
		for (int u = 0; u < nuse; u++) {
			const int k = use[u];
			ibp_codec_set_impl(c, id[k]);
			double w0 = now(), c0 = proc_cpu();
			if ((st = ibp_encode_batch(c, data, n, dst, cap, off, fl, cl, nthreads)) != IBP_OK)
				die("encode", st);
			wall[u][r] = now() - w0;
			cpu[u][r] = proc_cpu() - c0;
			if (memcmp(off, roff, (n + 1) * 8) || memcmp(dst, ref, roff[n])) {
				fprintf(stderr, "bench_encode: %s output differs from portable\n", name[k]);
				return 1;
			}
			uint64_t sum = 0, len;
			w0 = now();
			for (uint64_t i = 0; i < n; i++) {
				if ((st = ibp_row_size(c, (const uint8_t *)data + i * R, cl[i], &len, NULL)) != IBP_OK)
					die("row_size", st);
				sum += len;
			}
			size_wall[u][r] = now() - w0;
			if (sum != roff[n]) {
				fprintf(stderr, "bench_encode: %s sizes differ from the encode\n", name[k]);
				return 1;
			}
		}
	}
	const double mb = (double)(n * R);
	printf("%-9s %14s %14s %16s  (median of %d, %d thread(s))\n", "impl", "encode GB/s", "per CPU s",
	       "row_size GB/s", runs, nthreads);
	for (int u = 0; u < nuse; u++)
		printf("%-9s %14.2f %14.2f %16.2f\n", name[use[u]], mb / median(wall[u], runs) / 1e9,
		       mb / median(cpu[u], runs) / 1e9, mb / median(size_wall[u], runs) / 1e9);
	free(ref), free(dst), free(fl), free(cl), free(roff), free(off);
	ibp_codec_free(c);
	ibp_npy_free(data);
	return 0;
}
