/* coll_codec_speed.c (tests/coll: it calls library internals) - each
 * collective codec alone, on one core, as the collectives call it: the
 * per-core speeds the collectives' cost model takes as input
 * (tools/coll_model.py, issue 38). Nothing here communicates.
 *
 *   coll_codec_speed [--dtype bf16|f16|f32] [--elems N] [--runs K] [--ranks R] [--data FILE.npy]
 *
 * Prints one JSON object: {"codecs": {...}, "reduce_Bps": ..., "dtype": ...},
 * every speed in logical (uncompressed) bytes of the call's dtype per
 * second of wall time, the median of --runs:
 *   exp, fp8, lsq: ibpi_coll_encode / ibpi_coll_decode of one message of N
 *     elements (the wire format with its header); ratio = logical / wire bytes;
 *   dynamiq: enc = the first hop (quantize), hop = decode the partial sum,
 *     add this rank's values, re-quantize, dec = the final decode, over the
 *     R chunks of an R-rank plan (FP32 values, as the rings keep them);
 *     stats_Bps = the local statistics pass, plan_s_per_sg = making the
 *     plan, seconds a group of 256 elements;
 *   pts: enc = encode, dec = decode and add (FP32 gradients, sigma 1);
 *   reduce_Bps: a plain ring step's work on a received block: widen to
 *     float32 and add-and-round into the output (ibpi_coll_decode_f32 of a
 *     raw message + ibpi_coll_add_round).
 * Data: Gaussian values of sigma 0.02 (ibp-coll-perf's default), or the
 * elements of FILE.npy (of the chosen dtype) tiled to N. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/coll_internal.h"
#include "ibp/exp.h"
#include "coll/dynamiq.h"
#include "coll/rcmoe.h"
#include "fp8/fp8_impl.h"
#include "ibp/npy.h"
#include "ibp/status.h"

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void die(const char *what)
{
	fprintf(stderr, "coll_codec_speed: %s: %s\n", what, ibp_last_error());
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "coll_codec_speed: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

static double median(double *t, int n)
{
	qsort(t, (size_t)n, sizeof(double), cmp_d);
	return t[n / 2];
}

enum { K_EXP, K_FP8, K_LSQ, K_N };
static const enum coll_enc kenc[K_N] = { COLL_ENC_EXP, COLL_ENC_FP8, COLL_ENC_LSQ };
static const char *const kname[K_N] = { "exp", "fp8", "lsq" };

int main(int argc, char **argv)
{
	uint64_t n = 1u << 22;
	int runs = 7, R = 2;
	const char *dts = "bf16", *data = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--elems") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			R = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
			dts = argv[++i];
		else if (!strcmp(argv[i], "--data") && i + 1 < argc)
			data = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--dtype bf16|f16|f32] [--elems N] [--runs K] [--ranks R] "
					"[--data FILE.npy]\n", argv[0]);
			return 2;
		}
	}
	ibp_dtype_t dt = !strcmp(dts, "bf16") ? IBP_DTYPE_BF16 : !strcmp(dts, "f16") ? IBP_DTYPE_F16
							      : !strcmp(dts, "f32") ? IBP_DTYPE_F32 : (ibp_dtype_t)-1;
	if ((int)dt < 0 || runs < 1 || n < 256 || R < 2 || R > 64) {
		fprintf(stderr, "coll_codec_speed: need --dtype bf16|f16|f32, runs >= 1, elems >= 256, 2 <= ranks <= 64\n");
		return 2;
	}
	const uint64_t esz = ibp_dtype_size(dt), logical = n * esz;
	uint8_t *x = xmalloc(logical);
	float *xf = xmalloc(n * sizeof(float));
	if (data) {
		ibp_npy_info_t info;
		void *d = NULL;
		if (ibp_npy_load(data, IBP_NPY_BF16, &info, &d) != IBP_OK)
			die(data);
		if (info.count == 0 || info.dtype != dt) {
			fprintf(stderr, "coll_codec_speed: %s: need a non-empty array of %s\n", data, dts);
			return 2;
		}
		for (uint64_t i = 0; i < n; i++)
			memcpy(x + i * esz, (const uint8_t *)d + (i % info.count) * info.elem_bytes, esz);
		ibp_npy_free(d);
	} else {
		uint64_t s = 0x9e3779b97f4a7c15ull;
		for (uint64_t i = 0; i < n; i++) {
			double v = 0;
			for (int k = 0; k < 4; k++) {
				s = s * 6364136223846793005ull + 1442695040888963407ull;
				v += (double)(s >> 11) * (1.0 / 9007199254740992.0) - 0.5;
			}
			const float f = (float)(v * 0.02 * 1.7320508);
			if (dt == IBP_DTYPE_F32)
				memcpy(x + 4 * i, &f, 4);
			else {
				const uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
				memcpy(x + 2 * i, &h, 2);
			}
		}
	}
	ibpi_coll_widen(x, dt, n, xf);
	uint64_t cap = 0;
	if (ibpi_coll_msg_cap(dt, n, &cap) != IBP_OK)
		die("message capacity");
	uint8_t *msg = xmalloc(cap), *out = xmalloc(logical);
	float *acc = xmalloc(n * sizeof(float));
	double *t = xmalloc((size_t)runs * 3 * sizeof(double));

	printf("{\"dtype\": \"%s\", \"elems\": %llu, \"runs\": %d, \"data\": \"%s\", \"codecs\": {", dts,
	       (unsigned long long)n, runs, data ? data : "gauss 0.02");
	for (int k = 0; k < K_N; k++) {
		coll_hdr_t h = { COLL_MAGIC, COLL_OP_CALIB, (uint8_t)kenc[k], (uint8_t)dt, (uint8_t)kenc[k], n, n, 0, 0 };
		uint64_t bytes = 0;
		for (int r = 0; r < runs; r++) {
			const double t0 = wall_s();
			if (ibpi_coll_encode(&h, x, msg, cap, 1, LSQ_BITS, IBP_EXP_TABLE_SIGMA, &bytes) != IBP_OK)
				die(kname[k]);
			const double t1 = wall_s();
			if (ibpi_coll_decode(&h, msg, bytes, out, 1) != IBP_OK)
				die(kname[k]);
			t[r] = t1 - t0;
			t[runs + r] = wall_s() - t1;
		}
		if (kenc[k] == COLL_ENC_EXP && memcmp(out, x, logical) != 0) {
			fprintf(stderr, "coll_codec_speed: exp: the decode differs from the input\n");
			return 1;
		}
		printf("%s\"%s\": {\"ratio\": %.4f, \"enc_Bps\": %.4g, \"dec_Bps\": %.4g, \"wire_bytes\": %llu}",
		       k ? ", " : "", kname[k], (double)logical / (double)bytes, logical / median(t, runs),
		       logical / median(t + runs, runs), (unsigned long long)bytes);
	}

	/* DynamiQ: an R-rank plan over this rank's values (every rank alike) */
	{
		const uint64_t J = (n + 255) / 256;
		float *st = calloc(2 * J, sizeof(float)), *gst = calloc(2 * J, sizeof(float));
		if (!st || !gst)
			die("dynamiq statistics");
		/* the statistics pass and the plan, timed apart (the model's
		 * stats_Bps and plan_s_per_sg) */
		for (int r = 0; r < runs; r++) {
			double t0 = wall_s();
			ibpi_dq_local_stats(xf, n, st);
			t[r] = wall_s() - t0;
		}
		const double tstat = median(t, runs);
		for (uint64_t i = 0; i < 2 * J; i++)
			gst[i] = (float)R * st[i];
		dq_cfg_t cfg;
		ibpi_dq_cfg_default(&cfg);
		dq_plan_t pl;
		for (int r = 0; r < runs; r++) {
			double t0 = wall_s();
			if (ibpi_dq_plan_make(&pl, &cfg, R, n, 1, gst) != IBP_OK)
				die("dynamiq plan");
			t[r] = wall_s() - t0;
			if (r + 1 < runs)
				ibpi_dq_plan_free(&pl);
		}
		const double tplan = median(t, runs);
		uint8_t *leaf = xmalloc(pl.total_bytes), *hop = xmalloc(pl.total_bytes);
		uint64_t *coff = xmalloc(((size_t)R + 1) * sizeof(uint64_t));
		coff[0] = 0;
		for (int k = 0; k < R; k++)
			coff[k + 1] = coff[k] + pl.cbytes[k];
		for (int r = 0; r < runs; r++) {
			double t0 = wall_s();
			for (int k = 0; k < R; k++)
				if (ibpi_dq_hop(&pl, (uint64_t)k, NULL, xf, 1, leaf + coff[k]) != IBP_OK)
					die("dynamiq leaf");
			double t1 = wall_s();
			for (int k = 0; k < R; k++)
				if (ibpi_dq_hop(&pl, (uint64_t)k, leaf + coff[k], xf, 0, hop + coff[k]) != IBP_OK)
					die("dynamiq hop");
			double t2 = wall_s();
			for (int k = 0; k < R; k++)
				if (ibpi_dq_decode_chunk(&pl, (uint64_t)k, hop + coff[k], acc) != IBP_OK)
					die("dynamiq decode");
			t[r] = t1 - t0;
			t[runs + r] = t2 - t1;
			t[2 * runs + r] = wall_s() - t2;
		}
		const double te = median(t, runs), th = median(t + runs, runs), td = median(t + 2 * runs, runs);
		printf(", \"dynamiq\": {\"ratio\": %.4f, \"enc_Bps\": %.4g, \"hop_Bps\": %.4g, \"dec_Bps\": %.4g, "
		       "\"stats_Bps\": %.4g, \"plan_s_per_sg\": %.4g, \"wire_bytes\": %llu, \"ranks\": %d}",
		       (double)logical / (double)pl.total_bytes, logical / te, logical / th, logical / td,
		       logical / tstat, tplan / (double)J, (unsigned long long)pl.total_bytes, R);
		ibpi_dq_plan_free(&pl);
		free(st);
		free(gst);
		free(leaf);
		free(hop);
		free(coff);
	}
	/* PTS: FP32 gradients of this data */
	{
		const uint64_t pcap = ibpi_pts_max_bytes(n);
		uint8_t *pbuf = xmalloc(pcap);
		uint64_t psz = 0;
		for (int r = 0; r < runs; r++) {
			const double t0 = wall_s();
			if (ibpi_pts_encode(xf, n, PTS_SIGMA, 99, pbuf, pcap, &psz) != IBP_OK)
				die("pts encode");
			const double t1 = wall_s();
			memset(acc, 0, n * sizeof(float));
			const double t2 = wall_s();
			if (ibpi_pts_decode_add(pbuf, psz, n, acc) != IBP_OK)
				die("pts decode");
			t[r] = t1 - t0;
			t[runs + r] = wall_s() - t2;
		}
		printf(", \"pts\": {\"ratio\": %.4f, \"enc_Bps\": %.4g, \"dec_Bps\": %.4g, \"wire_bytes\": %llu}",
		       (double)logical / (double)psz, logical / median(t, runs), logical / median(t + runs, runs),
		       (unsigned long long)psz);
		free(pbuf);
	}
	/* a plain ring step's reduce: widen the received block, add and round */
	{
		coll_hdr_t h = { COLL_MAGIC, COLL_OP_CALIB, 0, (uint8_t)dt, COLL_ENC_RAW, n, n, 0, 0 };
		uint64_t bytes = 0;
		if (ibpi_coll_encode(&h, x, msg, cap, 1, LSQ_BITS, IBP_EXP_TABLE_SIGMA, &bytes) != IBP_OK)
			die("raw message");
		uint8_t *scratch = xmalloc(logical);
		for (int r = 0; r < runs; r++) {
			const double t0 = wall_s();
			if (ibpi_coll_decode_f32(&h, msg, bytes, acc, scratch, 1) != IBP_OK)
				die("raw decode");
			ibpi_coll_add_round(acc, x, dt, n, out);
			t[r] = wall_s() - t0;
		}
		printf("}, \"reduce_Bps\": %.4g}\n", logical / median(t, runs));
		free(scratch);
	}
	free(x);
	free(xf);
	free(msg);
	free(out);
	free(acc);
	free(t);
	return 0;
}
