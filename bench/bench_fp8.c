/* bench_fp8.c - per-core speed of the FP8 (TACO) codec, scalar against the
 * vector paths (issue 33).
 *
 *   bench_fp8 [FILE.npy ...] [--runs N] [--n ELEMS] [--block B] [--e5m2]
 *             [--no-hadamard] [--no-adaptive] [--impl I,I,...]
 *
 * Data: N(0, 0.02) gradients (default 2^24 elements) as bf16, f16 and f32,
 * then each FILE.npy (bf16 when its dtype is '<V2' or given as bf16 npy,
 * f32 and f16 as stored). One thread (opts.nthreads = 1), no checksum (the
 * collectives' wire streams). Implementations (scalar, avx2, avx512; default
 * all this CPU runs) are chosen through IBP_FP8_SIMD and timed interleaved
 * run by run; prints the median of N runs (default 5) in GB/s of the
 * uncompressed tensor per thread-CPU second, encode and decode, and the
 * ratio to scalar. Every path's stream and decode are compared with
 * scalar's byte for byte (exit 1 on a difference) unless --no-ref (for
 * profiling the vector paths without the scalar reference).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"

#define BENCH_NAME "bench_fp8"
#include "bench_util.h"

#define NIMPL 3

static const char *impl_name[NIMPL] = {"scalar", "avx2", "avx512"};

static int impl_runs(int k)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (k == 1)
		return __builtin_cpu_supports("avx2");
	if (k == 2)
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
#endif
	return k == 0;
}

static double gauss(uint64_t *s)
{
	double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
	double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* f32 -> f16 for normal-range values (the data here are small and finite). */
static uint16_t to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	if (a < 0x38800000u) /* below 2^-14: flush (rare at sigma 0.02) */
		return (uint16_t)s;
	return (uint16_t)(s | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - ((127u - 15u) << 10)));
}

static int no_ref; /* --no-ref: no scalar reference or column (profiling the vector paths alone) */

static void run_case(const char *label, const void *src, ibp_dtype_t dt, uint64_t n, const ibp_fp8_opts_t *o,
		     const int *use, int nuse, int runs)
{
	uint64_t cap = 0;
	ibp_status_t st = ibp_fp8_encoded_size(o, n, &cap);
	if (st != IBP_OK)
		die("encoded_size", st);
	const uint64_t esz = ibp_dtype_size(dt), bytes = n * esz;
	uint8_t *ref = malloc(cap), *enc = malloc(cap), *rdec = malloc(bytes), *dec = malloc(bytes);
	if (!ref || !enc || !rdec || !dec) {
		fprintf(stderr, BENCH_NAME ": out of memory\n");
		exit(1);
	}
	uint64_t size = 0;
	setenv("IBP_FP8_SIMD", "scalar", 1);
	if (!no_ref && (st = ibp_fp8_encode(src, dt, n, o, ref, cap, &size)) != IBP_OK)
		die("encode", st);
	if (!no_ref && (st = ibp_fp8_decode(ref, size, dt, n, rdec, 1)) != IBP_OK)
		die("decode", st);
	memset(enc, 0, cap);
	memset(dec, 0, bytes);
	double te[NIMPL][101], td[NIMPL][101];
	for (int r = 0; r < runs; r++)
		for (int u = 0; u < nuse; u++) {
			setenv("IBP_FP8_SIMD", impl_name[use[u]], 1);
			double c0 = cpu_now();
			if ((st = ibp_fp8_encode(src, dt, n, o, enc, cap, &size)) != IBP_OK)
				die("encode", st);
			double c1 = cpu_now();
			if ((st = ibp_fp8_decode(enc, size, dt, n, dec, 1)) != IBP_OK)
				die("decode", st);
			td[u][r] = cpu_now() - c1;
			te[u][r] = c1 - c0;
			if (!no_ref && (memcmp(enc, ref, cap) || memcmp(dec, rdec, bytes))) {
				fprintf(stderr, BENCH_NAME ": %s %s differs from scalar\n", label, impl_name[use[u]]);
				exit(1);
			}
		}
	unsetenv("IBP_FP8_SIMD");
	double se = 0, sd = 0;
	for (int u = 0; u < nuse; u++) {
		double e = (double)bytes / median(te[u], runs) / 1e9, d = (double)bytes / median(td[u], runs) / 1e9;
		if (u == 0)
			se = e, sd = d;
		printf("%-26s %-7s %8.3f %8.3f   x%5.2f x%5.2f\n", label, impl_name[use[u]], e, d, e / se, d / sd);
	}
	free(ref), free(enc), free(rdec), free(dec);
}

int main(int argc, char **argv)
{
	int runs = 5, nfiles = 0;
	uint64_t n = 1ull << 24;
	const char *files[16], *impls = NULL;
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.nthreads = 1;
	o.checksum = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--block") && i + 1 < argc)
			o.block = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--impl") && i + 1 < argc)
			impls = argv[++i];
		else if (!strcmp(argv[i], "--no-ref"))
			no_ref = 1;
		else if (!strcmp(argv[i], "--e5m2"))
			o.format = IBP_FP8_E5M2;
		else if (!strcmp(argv[i], "--no-hadamard"))
			o.hadamard = 0;
		else if (!strcmp(argv[i], "--no-adaptive"))
			o.adaptive = 0;
		else if (argv[i][0] != '-' && nfiles < 16)
			files[nfiles++] = argv[i];
		else {
			fprintf(stderr, "usage: bench_fp8 [FILE.npy ...] [--runs N] [--n ELEMS] [--block B] [--e5m2] "
					"[--no-hadamard] [--no-adaptive] [--impl I,I,...] [--no-ref]\n");
			return 2;
		}
	}
	if (runs < 1 || runs > 101 || n == 0) {
		fprintf(stderr, BENCH_NAME ": need 1 <= runs <= 101 and n > 0\n");
		return 2;
	}
	int use[NIMPL], nuse = 0;
	for (int k = 0; k < NIMPL; k++)
		if (((k == 0 && !no_ref) || !impls || strstr(impls, impl_name[k])) && impl_runs(k))
			use[nuse++] = k;
	printf("FP8 codec, 1 thread: %s, block %u, hadamard %d, adaptive %d, no checksum; GB/s of the "
	       "uncompressed tensor per CPU second, median of %d\n",
	       o.format == IBP_FP8_E4M3 ? "E4M3" : "E5M2", o.block, o.hadamard, o.adaptive, runs);
	printf("%-26s %-7s %8s %8s   %6s %6s\n", "data", "impl", "enc", "dec", "enc/sc", "dec/sc");

	float *f = malloc(n * 4);
	uint16_t *b = malloc(n * 2), *h = malloc(n * 2);
	if (!f || !b || !h) {
		fprintf(stderr, BENCH_NAME ": out of memory\n");
		return 1;
	}
	uint64_t seed = 33;
	for (uint64_t i = 0; i < n; i++) {
		f[i] = (float)(0.02 * gauss(&seed));
		b[i] = to_bf16(f[i]);
		h[i] = to_f16(f[i]);
	}
	run_case("gauss bf16", b, IBP_DTYPE_BF16, n, &o, use, nuse, runs);
	run_case("gauss f16", h, IBP_DTYPE_F16, n, &o, use, nuse, runs);
	run_case("gauss f32", f, IBP_DTYPE_F32, n, &o, use, nuse, runs);
	free(f), free(b), free(h);

	for (int i = 0; i < nfiles; i++) {
		ibp_npy_info_t info;
		void *data = NULL;
		ibp_status_t st = ibp_npy_load(files[i], strstr(files[i], "bf16") ? IBP_NPY_BF16 : 0, &info, &data);
		if (st != IBP_OK)
			die(files[i], st);
		uint64_t es = ibp_dtype_size(info.dtype);
		if (info.dtype != IBP_DTYPE_BF16 && info.dtype != IBP_DTYPE_F16 && info.dtype != IBP_DTYPE_F32) {
			fprintf(stderr, BENCH_NAME ": %s: not bf16, f16 or f32\n", files[i]);
			return 1;
		}
		const char *base = strrchr(files[i], '/');
		run_case(base ? base + 1 : files[i], data, info.dtype, info.data_bytes / es, &o, use, nuse, runs);
		ibp_npy_free(data);
	}
	return 0;
}
