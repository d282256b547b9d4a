/* bench_container.c - container format 1.2 against 1.1, and what verified
 * reads cost (docs/BENCHMARKS.md, "Container 1.2").
 *
 *   bench_container ratio FILE.npy [--dtype bf16]
 *       packs FILE.npy with the IBP codec (trained, packed layout) and
 *       prints raw, payload and whole-file bytes and ratios of the 1.2
 *       file, and of the 1.1 file the previous writer made of the same
 *       codec and payload (its size follows from the 1.1 layout rules of
 *       docs/FORMAT.md: sections on 64 bytes, payload on 4096, a flags
 *       byte, a cluster byte and a u64 offset per row, plain tables), and
 *       times random gathers.
 *   bench_container dense ROWS COLS
 *       the same for ROWS x COLS float32 rows of seeded Gaussian values.
 *   bench_container verify DIR [GIB]
 *       writes a GIB (default 1) GiB container under DIR, then times open
 *       (read, mmap) with and without the payload checksums, XXH3 alone,
 *       and the cost of checking the 1 MiB checksum block(s) under each
 *       row on every read (the alternative to checking at open) against a
 *       gather of 4096 random rows. The file is removed at the end.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ibp.h"
#define BENCH_NAME "bench_container"
#include "bench_util.h"

static uint64_t file_size(const char *path)
{
	ibp_container_t *c = NULL;
	ibp_status_t st = ibp_container_open(path, IBP_OPEN_TRUSTED, &c);
	if (st != IBP_OK)
		die(path, st);
	uint64_t n = ibp_container_file_bytes(c);
	ibp_container_close(c);
	return n;
}

/* Bytes of the packed IBP file the 1.1 writer made of this codec and a
 * payload of plen bytes (docs/FORMAT.md 2, 1.1 rules): header 256, table,
 * META 16 + 2kW, XVALS kW, FLAGS N, CLUSTERS N (k > 1), OFFSETS 8(N + 1),
 * PAYLOAD_SUMS 8 per MiB, each on 64 bytes, the payload on 4096. */
static uint64_t size_v11(const ibp_codec_t *codec, uint64_t n, uint64_t plen)
{
	uint64_t k = ibp_codec_nclusters(codec), W = ibp_codec_nchunks(codec) * ibp_codec_chunk_bytes(codec);
	uint64_t len[7], ns = 0;
	len[ns++] = 16 + 2 * k * W;
	if (ibp_codec_has_xval(codec))
		len[ns++] = k * W;
	len[ns++] = n;
	if (k > 1)
		len[ns++] = n;
	len[ns++] = 8 * (n + 1);
	len[ns++] = 8 * ((plen + (1u << 20) - 1) >> 20);
	len[ns++] = plen;
	uint64_t at = 256 + 32 * ns;
	for (uint64_t i = 0; i < ns; i++) {
		uint64_t a = i + 1 == ns ? 4096 : 64;
		at = (at + a - 1) / a * a + len[i];
	}
	return at;
}

/* Packs rows as 1.2 (a trained codec) and prints it beside 1.1. */
static int ratio(const char *label, const void *data, ibp_dtype_t dt, unsigned ndim, const uint64_t *shape)
{
	uint64_t R = ibp_dtype_size(dt);
	for (unsigned i = 1; i < ndim; i++)
		R *= shape[i];
	uint64_t raw = shape[0] * R;
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	ibp_codec_t *codec = NULL;
	ibp_status_t st = ibp_codec_train(data, shape[0], R, &o, &codec);
	if (st != IBP_OK)
		die("train", st);
	char p12[64];
	snprintf(p12, sizeof(p12), "/tmp/bench_container.%ld.12.ibp", (long)getpid());
	if ((st = ibp_pack_with_codec(p12, codec, data, dt, ndim, shape, IBP_LAYOUT_PACKED, 0)) != IBP_OK)
		die("pack 1.2", st);
	ibp_container_t *c = NULL;
	if ((st = ibp_container_open(p12, IBP_OPEN_VERIFY, &c)) != IBP_OK)
		die("open 1.2", st);
	uint64_t plen = 0;
	ibp_container_payload(c, &plen);
	ibp_container_close(c);
	uint64_t f11 = size_v11(codec, shape[0], plen), f12 = file_size(p12);
	printf("%s: %llu rows x %llu B, raw %llu B, payload %llu B (ratio %.3f)\n", label,
	       (unsigned long long)shape[0], (unsigned long long)R, (unsigned long long)raw,
	       (unsigned long long)plen, (double)raw / (double)plen);
	printf("  1.1 file %llu B: ratio %.3f (%.2f%% above the payload)\n", (unsigned long long)f11,
	       (double)raw / (double)f11, 100.0 * ((double)f11 / (double)plen - 1));
	printf("  1.2 file %llu B: ratio %.3f (%.2f%% above the payload)\n", (unsigned long long)f12,
	       (double)raw / (double)f12, 100.0 * ((double)f12 / (double)plen - 1));
	printf("  1.2 / 1.1 whole-file ratio: %.3fx\n", (double)f11 / (double)f12);
	/* random gathers through the store (1.2 index) */
	uint64_t m = shape[0] < 65536 ? shape[0] : 65536, x = 12345;
	int64_t *ids = malloc(m * sizeof(int64_t));
	uint8_t *out = malloc(m * R);
	for (uint64_t i = 0; ids && i < m; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		ids[i] = (int64_t)(x % shape[0]);
	}
	for (int v = 1; ids && out && v < 2; v++) {
		ibp_store_t *s = NULL;
		if ((st = ibp_store_open(p12, 0, &s)) != IBP_OK)
			die("store", st);
		double best = 1e9;
		for (int r = 0; r < 5; r++) {
			double t0 = now();
			if ((st = ibp_store_gather(s, ids, m, out, 1)) != IBP_OK)
				die("gather", st);
			double t = now() - t0;
			best = t < best ? t : best;
		}
		printf("  %s: gather of %llu random rows, one thread: %.1f ns/row, %.2f GB/s decoded\n",
		       v ? "1.2" : "1.1", (unsigned long long)m, 1e9 * best / (double)m, (double)(m * R) / best / 1e9);
		ibp_store_close(s);
	}
	free(ids);
	free(out);
	unlink(p12);
	ibp_codec_free(codec);
	return 0;
}

static int ratio_npy(const char *path, int bf16)
{
	ibp_npy_info_t info;
	void *data = NULL;
	ibp_status_t st = ibp_npy_load(path, 0, &info, &data);
	if (st != IBP_OK)
		die(path, st);
	ibp_dtype_t dt = bf16 && info.elem_bytes == 2 ? IBP_DTYPE_BF16 : info.dtype;
	int rc = ratio(path, data, dt, info.ndim, info.shape);
	ibp_npy_free(data);
	return rc;
}

static int ratio_dense(uint64_t rows, uint64_t cols)
{
	float *v = malloc(rows * cols * sizeof(float));
	if (!v)
		return 1;
	uint64_t s = 0x9E3779B97F4A7C15ull;
	for (uint64_t i = 0; i < rows * cols; i++) {
		/* Box-Muller on a xorshift stream */
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		double u1 = ((double)(s >> 11) + 1.0) / 9007199254740993.0;
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		double u2 = (double)(s >> 11) / 9007199254740992.0;
		v[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
	}
	uint64_t shape[2] = { rows, cols };
	char label[64];
	snprintf(label, sizeof(label), "dense gaussian float32 %llux%llu", (unsigned long long)rows,
		 (unsigned long long)cols);
	int rc = ratio(label, v, IBP_DTYPE_F32, 2, shape);
	free(v);
	return rc;
}

static double best_open(const char *path, unsigned flags, int reps)
{
	double best = 1e9;
	for (int r = 0; r < reps; r++) {
		ibp_container_t *c = NULL;
		double t0 = now();
		ibp_status_t st = ibp_container_open(path, flags, &c);
		double t = now() - t0;
		if (st != IBP_OK)
			die("open", st);
		ibp_container_close(c);
		best = t < best ? t : best;
	}
	return best;
}

static int verify_cost(const char *dir, double gib)
{
	uint64_t R = 4096, n = (uint64_t)(gib * (double)(1ull << 30)) / R, shape[2] = { n, R };
	uint8_t *rows = malloc(n * R), *flags = malloc(n);
	if (!rows || !flags)
		return 1;
	uint64_t s = 1;
	for (uint64_t i = 0; i < n * R / 8; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		memcpy(rows + 8 * i, &s, 8);
	}
	memset(flags, IBP_ROW_RAW, n);
	/* incompressible rows stored raw: the payload is the data */
	uint8_t *zero = calloc(1, R);
	ibp_codec_t *codec = NULL;
	ibp_status_t st = ibp_codec_create(R, 8, 1, zero, zero, &codec);
	if (st != IBP_OK)
		die("codec", st);
	char path[512];
	snprintf(path, sizeof(path), "%s/bench_container.%ld.ibp", dir, (long)getpid());
	double t0 = now();
	st = ibp_container_write(path, codec, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_INPLACE, rows, n * R, NULL, flags,
				 NULL);
	if (st != IBP_OK)
		die("write", st);
	printf("container: %llu rows x %llu B = %.2f GiB payload, written in %.2f s\n", (unsigned long long)n,
	       (unsigned long long)R, (double)(n * R) / (double)(1ull << 30), now() - t0);

	double x0 = now();
	uint64_t h = XXH3_64bits(rows, n * R);
	double tx = now() - x0;
	printf("XXH3-64 of the payload in memory, one thread: %.3f s (%.1f GB/s) [%016llx]\n", tx,
	       (double)(n * R) / tx / 1e9, (unsigned long long)h);

	const int reps = 3;
	double rt = best_open(path, IBP_OPEN_READ | IBP_OPEN_TRUSTED, reps);
	double rv = best_open(path, IBP_OPEN_READ, reps);
	double mt = best_open(path, IBP_OPEN_MMAP | IBP_OPEN_TRUSTED, reps);
	double mv = best_open(path, IBP_OPEN_MMAP, reps);
	printf("open, read into memory:  trusted %.3f s, verified %.3f s (+%.3f s, +%.0f%%)\n", rt, rv, rv - rt,
	       100 * (rv / rt - 1));
	printf("open, mmap:              trusted %.4f s, verified %.3f s (+%.3f s: pages read and hashed)\n", mt,
	       mv, mv - mt);

	/* per read: a gather of 4096 random rows, and the checksum blocks it
	 * would have to hash if reads were checked one by one (no caching) */
	ibp_store_t *st_ = NULL;
	if ((st = ibp_store_open(path, IBP_OPEN_READ | IBP_OPEN_TRUSTED, &st_)) != IBP_OK)
		die("store", st);
	const uint64_t B = 1ull << 20, m = 4096;
	int64_t *ids = malloc(m * sizeof(int64_t));
	uint8_t *out = malloc(m * R);
	for (uint64_t i = 0; i < m; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		ids[i] = (int64_t)(s % n);
	}
	double best_g = 1e9, best_h = 1e9;
	const uint8_t *pl = ibp_container_payload(ibp_store_container(st_), NULL);
	uint64_t acc = 0;
	for (int r = 0; r < reps; r++) {
		double g0 = now();
		if ((st = ibp_store_gather(st_, ids, m, out, 1)) != IBP_OK)
			die("gather", st);
		double g = now() - g0;
		double h0 = now();
		for (uint64_t i = 0; i < m; i++) {
			uint64_t lo = (uint64_t)ids[i] * R / B, hi = ((uint64_t)ids[i] * R + R - 1) / B;
			for (uint64_t b = lo; b <= hi; b++) {
				uint64_t len = n * R - b * B < B ? n * R - b * B : B;
				acc ^= XXH3_64bits(pl + b * B, len);
			}
		}
		double hh = now() - h0;
		best_g = g < best_g ? g : best_g;
		best_h = hh < best_h ? hh : best_h;
	}
	printf("gather of %llu random rows (one thread): %.4f s; checking their 1 MiB blocks per read: "
	       "%.3f s more (%.0fx the gather) [%llx]\n", (unsigned long long)m, best_g, best_h, best_h / best_g,
	       (unsigned long long)(acc & 0xff));
	printf("per-read checking pays the whole-file cost after %.0f such gathers\n", (rv - rt) / best_h * 1.0);
	ibp_store_close(st_);
	unlink(path);
	free(ids);
	free(out);
	free(rows);
	free(flags);
	free(zero);
	ibp_codec_free(codec);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "ratio"))
		return ratio_npy(argv[2], argc >= 5 && !strcmp(argv[3], "--dtype") && !strcmp(argv[4], "bf16"));
	if (argc == 4 && !strcmp(argv[1], "dense"))
		return ratio_dense(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
	if (argc >= 3 && !strcmp(argv[1], "verify"))
		return verify_cost(argv[2], argc >= 4 ? atof(argv[3]) : 1.0);
	fprintf(stderr, "usage: bench_container ratio FILE.npy [--dtype bf16] | dense ROWS COLS | verify DIR [GIB]\n");
	return 2;
}
