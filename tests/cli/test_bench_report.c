/* test_bench_report.c - what `ibp bench` reports (the main job's tables):
 * the exp and FP8 rows beside IBP, zstd and lz4, bf16 read as bf16, the FP8
 * error line, and a takeaway that names the real best ratio among the
 * lossless methods with random row access. Runs IBP_BINARY_DIR/bin/ibp. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "ibp.h"

#define IBP_EXE IBP_BINARY_DIR "/bin/ibp"

static char out[1 << 16];

/* Runs `ibp bench PATH ARGS` (stderr dropped), its stdout into `out`;
 * returns the exit status. */
static int bench(const char *path, const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' bench '%s' %s 2>/dev/null", IBP_EXE, path, args);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p, "popen %s", cmd);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The table row of `name` and `unit`: its ratio (NAN when "-"). Asserts it exists. */
static double ratio_of(const char *name, const char *unit)
{
	for (const char *l = out; *l; l = strchr(l, '\n') + 1) {
		char nm[19], un[10];
		if (strlen(l) > 28 && sscanf(l, "%18c %9c", nm, un) == 2) {
			nm[18] = un[9] = '\0';
			for (int i = 17; i >= 0 && nm[i] == ' '; i--)
				nm[i] = '\0';
			for (int i = 8; i >= 0 && un[i] == ' '; i--)
				un[i] = '\0';
			if (strcmp(nm, name) == 0 && strcmp(un, unit) == 0) {
				char *end;
				double r = strtod(l + 28, &end);
				return end == l + 28 ? NAN : r;
			}
		}
		if (!strchr(l, '\n'))
			break;
	}
	cr_assert_fail("no row '%s' '%s' in:\n%s", name, unit, out);
	return NAN;
}

static char *write_f32(void)
{
	static char path[128];
	snprintf(path, sizeof(path), "%s/f.npy", tmpdir);
	const uint64_t shape[2] = {300, 64};
	float *v = xcalloc(300 * 64 * sizeof(float));
	rng_t r = {11};
	for (uint64_t i = 0; i < 300 * 64; i++)
		v[i] = (float)(rnd(&r) % 8) / 4.0f - 1.0f;
	cr_assert_eq(ibp_npy_write(path, IBP_DTYPE_F32, 2, shape, v), IBP_OK, "%s", ibp_last_error());
	free(v);
	return path;
}

Test(bench_report, value_codecs_and_takeaway, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const char *path = write_f32();
	cr_assert_eq(bench(path, "--repeat 1 --threads 1"), 0, "%s", out);
	/* exp and fp8 sit beside IBP, zstd and lz4, per row and per 64K */
	static const char *names[] = {"ibp", "exp", "fp8 e4m3, lossy", "zstd -1", "zstd -3", "lz4"};
	for (size_t i = 1; i < sizeof(names) / sizeof(names[0]); i++) {
		cr_assert(ratio_of(names[i], "row") > 0, "%s row:\n%s", names[i], out);
		cr_assert(ratio_of(names[i], "64K") > 0, "%s 64K:\n%s", names[i], out);
	}
	/* fp8 stores about 1.02 bytes per value: about 3.9x f32 per 64K */
	cr_assert(fabs(ratio_of("fp8 e4m3, lossy", "64K") - 3.9) < 0.1, "%s", out);
	double e_row = NAN, e_blk = NAN;
	const char *err = strstr(out, "relative L2 error ");
	cr_assert_not_null(err, "%s", out);
	cr_assert_eq(sscanf(err, "relative L2 error %lf%% (row), %lf%%", &e_row, &e_blk), 2, "%s", err);
	cr_assert(e_row > 0 && e_row < 10 && e_blk > 0 && e_blk < 10, "%s", err);

	/* the takeaway's best ratio is the largest among IBP and the lossless
	 * per-row methods (not 64K blocks, not the lossy fp8, not the paper layout) */
	double best = 0;
	static const char *ibp_units[] = {"portable", "bmi2", "avx512"};
	for (size_t i = 0; i < 3; i++) {
		double r = ratio_of("ibp", ibp_units[i]);
		if (r > best)
			best = r;
	}
	static const char *row_methods[] = {"exp", "zstd -1", "zstd -3", "lz4"};
	for (size_t i = 0; i < 4; i++)
		if (ratio_of(row_methods[i], "row") > best)
			best = ratio_of(row_methods[i], "row");
	static const char pre[] = "\ntakeaway (lossless, random row access): best ratio ";
	const char *t = strstr(out, pre);
	cr_assert_not_null(t, "%s", out);
	cr_assert_null(strstr(t + strlen(pre), "takeaway"), "one takeaway line:\n%s", out);
	/* "best ratio LABEL NUMBER (1.03x NEXT); fastest decode ..." */
	const char *seg = t + strlen(pre), *stop = strpbrk(seg, "(;");
	cr_assert_not_null(stop, "%s", t);
	const char *num = stop - 1;
	while (num > seg && *num == ' ')
		num--;
	while (num > seg && num[-1] != ' ')
		num--;
	double got = strtod(num, NULL);
	cr_assert(fabs(got - best) < 0.0015, "takeaway %.4f, table best %.4f:\n%s", got, best, out);
	cr_assert_not_null(strstr(t, "; fastest decode "), "%s", t);

	/* the same in JSON */
	cr_assert_eq(bench(path, "--repeat 1 --threads 1 --json"), 0, "%s", out);
	cr_assert_not_null(strstr(out, "\"name\":\"exp\""), "%s", out);
	cr_assert_not_null(strstr(out, "\"rel_l2_err\":"), "%s", out);
	cr_assert_not_null(strstr(out, "\"takeaway\":\"best ratio "), "%s", out);
}

Test(bench_report, bf16, .init = make_tmpdir, .fini = remove_tmpdir)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/kv.npy", tmpdir);
	const uint64_t shape[2] = {256, 96};
	uint16_t *v = xcalloc(256 * 96 * 2);
	rng_t r = {5};
	for (uint64_t i = 0; i < 256 * 96; i++) /* bf16 of +-[1, 2) and +-[0.5, 1): few exponents */
		v[i] = (uint16_t)((rnd(&r) & 0x807F) | (i % 3 ? 0x3F80 : 0x3F00));
	cr_assert_eq(ibp_npy_write(path, IBP_DTYPE_BF16, 2, shape, v), IBP_OK, "%s", ibp_last_error());
	free(v);
	/* stored as <u2: read as bf16 when asked, and then exp compresses */
	cr_assert_eq(bench(path, "--repeat 1 --threads 1 --dtype bf16"), 0, "%s", out);
	cr_assert_not_null(strstr(out, ": bf16 [256, 96]"), "%s", out);
	cr_assert(ratio_of("exp", "64K") > 1.2, "%s", out);
	/* as plain u16 the value codecs say how to get bf16 */
	cr_assert_eq(bench(path, "--repeat 1 --threads 1"), 0, "%s", out);
	cr_assert_not_null(strstr(out, ": u16 [256, 96]"), "%s", out);
	cr_assert(isnan(ratio_of("exp", "row")), "%s", out);
	cr_assert_not_null(strstr(out, "bf16 stored as u16: --dtype bf16"), "%s", out);
	cr_assert_null(strstr(out, "relative L2 error"), "%s", out);
}

/* The random-row gather table (issue 16): plain, ibp, zstd -1 and lz4 per
 * row, each with a positive speed on 1 and on all threads, also in JSON. */
Test(bench_report, random_row_gather, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const char *p = write_f32();
	cr_assert_eq(bench(p, "--repeat 1 --threads 2"), 0, "%s", out);
	cr_assert_not_null(strstr(out, "random-row gather of 65536 random ids"), "%s", out);
	static const char *const names[] = { "plain memcpy", "ibp", "zstd -1 row", "lz4 row" };
	for (int m = 0; m < 4; m++) {
		char key[64];
		snprintf(key, sizeof(key), "gather %-19s", names[m]);
		const char *l = strstr(out, key);
		cr_assert_not_null(l, "no line '%s' in:\n%s", key, out);
		char *end;
		double g1 = strtod(l + strlen(key), &end), g2 = strtod(end, NULL);
		if (m >= 2 && g1 == 0.0 && strstr(l, "(not built"))
			continue; /* a build without zstd or lz4 */
		cr_assert(g1 > 0 && g2 > 0, "%s: %f %f", key, g1, g2);
	}
	cr_assert_eq(bench(p, "--repeat 1 --threads 1 --json"), 0, "%s", out);
	const char *g = strstr(out, "\"gather\"");
	cr_assert_not_null(g, "%s", out);
	cr_assert_not_null(strstr(g, "\"ids\""), "%s", out);
	cr_assert_not_null(strstr(g, "\"name\""), "%s", out);
	cr_assert_not_null(strstr(g, "\"gbps_1t\""), "%s", out);
}
