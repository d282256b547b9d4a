/* bench_dynamiq.c (tests/coll: it calls library internals) - the DynamiQ, LSQ and PTS codecs alone, per
 * implementation (scalar reference, AVX2, AVX-512), side by side in one
 * run: ns per element (thread CPU time, median of --runs), on
 * gradient-like data (a log-normal scale per 256 elements). Checks that
 * every implementation produced the scalar bytes.
 *
 *   bench_dynamiq [--elems N] [--ranks R] [--runs K] [--impl scalar,avx2,avx512]
 *
 * dq stats: one rank's statistics; dq plan: the widths from the summed
 * statistics; dq hop: one ring hop (decode the partial sum, add, re-quantize) over all
 * R chunks; dq leaf: the first hop (quantize only); dq decode: the final
 * decode; dq ring: the whole R-rank all-reduce simulated in one thread
 * (per element of one rank's buffer); lsq enc/dec: BF16, rows of 256,
 * 4-bit entries, 4-bit row scales; pts enc/dec: FP32, sigma 1. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/dynamiq.h"
#include "coll/dynamiq_simd.h"
#include "coll/rcmoe.h"
#include "fp8/fp8_impl.h"
#include "ibp/status.h"

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 12345;
static double unif(void)
{
	rs = rs * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void)
{
	return sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif());
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

#define NT 9
enum { T_STATS, T_PLAN, T_LEAF, T_HOP, T_DEC, T_RING, T_LENC, T_LDEC, T_PENC, T_PDEC, T_SIZE };
static const char *const tname[] = { "dq stats", "dq plan", "dq leaf", "dq hop", "dq decode", "dq ring", "lsq enc", "lsq dec", "pts enc",
				     "pts dec" };

static void die(const char *what)
{
	fprintf(stderr, "bench_dynamiq: %s: %s\n", what, ibp_last_error());
	exit(1);
}

int main(int argc, char **argv)
{
	uint64_t d = 1 << 22;
	int R = 4, runs = 7;
	const char *impls = "scalar,avx2,avx512";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--elems") && i + 1 < argc)
			d = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			R = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--impl") && i + 1 < argc)
			impls = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--elems N] [--ranks R] [--runs K] [--impl scalar,avx2,avx512]\n", argv[0]);
			return 2;
		}
	}
	if (R < 2 || R > 64 || runs < 1 || d < 256) {
		fprintf(stderr, "bench_dynamiq: need 2 <= ranks <= 64, runs >= 1, elems >= 256\n");
		return 2;
	}
	/* data: R gradient-like buffers */
	float **x = malloc((size_t)R * sizeof *x);
	float *sc = malloc((d / 256 + 1) * sizeof(float));
	for (uint64_t j = 0; j <= d / 256; j++)
		sc[j] = (float)exp(1.5 * gauss()) * (unif() < 0.3 ? 1e-3f : 1.0f);
	for (int w = 0; w < R; w++) {
		x[w] = malloc(d * sizeof(float));
		for (uint64_t i = 0; i < d; i++)
			x[w][i] = sc[i / 256] * (float)gauss();
	}
	uint16_t *xb = malloc(d * 2), *lout = malloc(d * 2);
	for (uint64_t i = 0; i < d; i++)
		xb[i] = fp8i_f32_to_bf16(x[0][i]);
	uint64_t lcap = ibpi_lsq_bytes(d, LSQ_ROW, LSQ_BITS, LSQ_SBITS), pcap = ibpi_pts_max_bytes(d), lsz = 0, psz = 0;
	uint8_t *lbuf = malloc(lcap), *pbuf = malloc(pcap), *lref = malloc(lcap), *pref = malloc(pcap);
	float *acc = malloc(d * sizeof(float)), *out = malloc(d * sizeof(float)), *oref = malloc(d * sizeof(float));

	/* the plan of an R-rank call, and every chunk's leaf bytes for the hop */
	uint64_t J = (d + 255) / 256;
	float *st = calloc(2 * J, sizeof(float)), *gst = calloc(2 * J, sizeof(float));
	for (int w = 0; w < R; w++) {
		ibpi_dq_local_stats(x[w], d, st);
		for (uint64_t i = 0; i < 2 * J; i++)
			gst[i] += st[i];
	}
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	dq_plan_t pl;
	if (ibpi_dq_plan_make(&pl, &cfg, R, d, 1, gst) != IBP_OK)
		die("plan");
	uint8_t *leaf = malloc(pl.total_bytes), *hop = malloc(pl.total_bytes), *href = malloc(pl.total_bytes);
	uint64_t *coff = malloc(((size_t)R + 1) * sizeof(uint64_t));
	coff[0] = 0;
	for (int k = 0; k < R; k++)
		coff[k + 1] = coff[k] + pl.cbytes[k];

	printf("elements %llu, ranks %d, runs %d; ns per element (thread CPU time, median)\n", (unsigned long long)d, R,
	       runs);
	printf("%-10s", "impl");
	for (int t = 0; t < T_SIZE; t++)
		printf(" %10s", tname[t]);
	printf("\n");
	char list[256];
	snprintf(list, sizeof list, "%s", impls);
	int first = 1;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		coll_simd_impl_t im = !strcmp(tok, "scalar") ? COLL_SIMD_SCALAR
				      : !strcmp(tok, "avx2") ? COLL_SIMD_AVX2
				      : !strcmp(tok, "avx512") ? COLL_SIMD_AVX512
							       : COLL_SIMD_AUTO;
		if (im == COLL_SIMD_AUTO || !ibpi_coll_simd_set(im)) {
			printf("%-10s (not available here)\n", tok);
			continue;
		}
		double med[T_SIZE];
		double *tm = malloc((size_t)runs * sizeof(double));
		for (int t = 0; t < T_SIZE; t++) {
			for (int r = 0; r < runs; r++) {
				double t0 = cpu_s();
				switch (t) {
				case T_STATS:
					ibpi_dq_local_stats(x[0], d, st);
					break;
				case T_PLAN: {
					dq_plan_t p2;
					if (ibpi_dq_plan_make(&p2, &cfg, R, d, 1, gst) != IBP_OK)
						die("plan");
					ibpi_dq_plan_free(&p2);
					break;
				}
				case T_LEAF:
					for (int k = 0; k < R; k++)
						if (ibpi_dq_hop(&pl, (uint64_t)k, NULL, x[(k + 1) % R], (k + 1) % R, leaf + coff[k]) != IBP_OK)
							die("leaf");
					break;
				case T_HOP:
					for (int k = 0; k < R; k++)
						if (ibpi_dq_hop(&pl, (uint64_t)k, leaf + coff[k], x[(k + 2) % R], (k + 2) % R, hop + coff[k]) != IBP_OK)
							die("hop");
					break;
				case T_DEC:
					for (int k = 0; k < R; k++)
						if (ibpi_dq_decode_chunk(&pl, (uint64_t)k, hop + coff[k], out) != IBP_OK)
							die("decode");
					break;
				case T_RING:
					if (ibpi_dq_simulate((const float *const *)x, R, d, &cfg, 1, out, NULL) != IBP_OK)
						die("simulate");
					break;
				case T_LENC:
					if (ibpi_lsq_encode(xb, IBP_DTYPE_BF16, d, LSQ_ROW, LSQ_BITS, LSQ_SBITS, 77, lbuf, lcap, &lsz) != IBP_OK)
						die("lsq encode");
					break;
				case T_LDEC:
					if (ibpi_lsq_decode(lbuf, lsz, IBP_DTYPE_BF16, d, lout) != IBP_OK)
						die("lsq decode");
					break;
				case T_PENC:
					if (ibpi_pts_encode(x[0], d, PTS_SIGMA, 99, pbuf, pcap, &psz) != IBP_OK)
						die("pts encode");
					break;
				case T_PDEC:
					memset(acc, 0, d * sizeof(float));
					if (ibpi_pts_decode_add(pbuf, psz, d, acc) != IBP_OK)
						die("pts decode");
					break;
				}
				tm[r] = cpu_s() - t0;
			}
			qsort(tm, (size_t)runs, sizeof(double), cmp_d);
			med[t] = tm[runs / 2] * 1e9 / (double)d;
		}
		free(tm);
		/* same bytes as the first implementation listed */
		int same = 1;
		if (first) {
			memcpy(href, hop, pl.total_bytes);
			memcpy(lref, lbuf, lsz);
			memcpy(pref, pbuf, psz);
			memcpy(oref, out, d * sizeof(float));
		} else
			same = !memcmp(href, hop, pl.total_bytes) && !memcmp(lref, lbuf, lsz) && !memcmp(pref, pbuf, psz) &&
			       !memcmp(oref, out, d * sizeof(float));
		printf("%-10s", tok);
		for (int t = 0; t < T_SIZE; t++)
			printf(" %10.2f", med[t]);
		printf("%s\n", first ? "" : same ? "  (same bytes)" : "  (BYTES DIFFER)");
		if (!same)
			return 1;
		first = 0;
	}
	ibpi_dq_plan_free(&pl);
	return 0;
}
