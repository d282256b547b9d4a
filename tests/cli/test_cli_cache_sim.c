/* test_cli_cache_sim.c - `ibp cache-sim` (IBP_BINARY_DIR/bin/ibp) on a small
 * store: its JSON for a Zipf trace and a trace file, the comparison it makes
 * (the compressed cache holds more rows and moves fewer PCIe bytes on rows
 * that compress), and its usage and input errors. */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ibp.h"

#define IBP_EXE IBP_BINARY_DIR "/bin/ibp"

static char dir[64], store[128], out[1 << 16];

/* Sparse rows (about 1/40 of the bytes set): they compress well. */
static void setup(void)
{
	snprintf(dir, sizeof(dir), "%s/ibp_test_cachesim_XXXXXX", tu_tmp_root());
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(access(IBP_EXE, X_OK), 0, "%s is missing: build the ibp_cli target first", IBP_EXE);
	const uint64_t n = 2000, R = 1200;
	uint8_t *rows = calloc(n, R);
	cr_assert_not_null(rows);
	uint64_t x = 12345;
	for (uint64_t i = 0; i < n * R / 40; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		rows[(x >> 20) % (n * R)] = (uint8_t)(x >> 56) | 1;
	}
	snprintf(store, sizeof(store), "%s/s.ibp", dir);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	cr_assert_eq(ibp_pack(store, rows, IBP_DTYPE_U8, 2, shape, &o, IBP_LAYOUT_PACKED), IBP_OK, "%s",
		     ibp_last_error());
	free(rows);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Runs `ibp ARGS` with stdout into `out`; returns the exit status. */
static int run(const char *args)
{
	char cmd[1024], path[128];
	snprintf(path, sizeof(path), "%s/stdout", dir);
	snprintf(cmd, sizeof(cmd), "%s %s > %s 2> %s/stderr", IBP_EXE, args, path, dir);
	int st = system(cmd);
	FILE *f = fopen(path, "r");
	size_t k = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
	out[k] = 0;
	if (f)
		fclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The number after "key": inside the object named `obj` (NULL: top level). */
static double num(const char *obj, const char *key)
{
	const char *p = out;
	char k[64];
	if (obj) {
		snprintf(k, sizeof(k), "\"%s\":", obj);
		p = strstr(out, k);
		cr_assert_not_null(p, "no %s in %s", k, out);
	}
	snprintf(k, sizeof(k), "\"%s\":", key);
	const char *q = strstr(p, k);
	cr_assert_not_null(q, "no %s in %s", k, out);
	if (obj) {
		const char *end = strchr(p, '}');
		cr_assert(q < end, "%s not inside %s", key, obj);
	}
	return strtod(q + strlen(k), NULL);
}

Test(cache_sim, zipf_json, .init = setup, .fini = teardown)
{
	char args[512];
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:1.1:20000:3 --batch 500 --capacity 10%% "
		 "--policy clock --json", store);
	cr_assert_eq(run(args), 0, "%s", out);
	cr_assert(strstr(out, "\"policy\": \"clock\"") || strstr(out, "\"policy\":\"clock\""), "%s", out);
	cr_assert_eq(num(NULL, "requests"), 20000);
	cr_assert_eq(num(NULL, "batches"), 40);
	cr_assert_eq(num(NULL, "capacity_bytes"), 240000);
	double ratio = num(NULL, "ratio");
	cr_assert(ratio > 2, "sparse rows compress: ratio %g", ratio);
	cr_assert_eq(num("none", "hits"), 0);
	cr_assert_eq(num("none", "requests"), 20000);
	cr_assert_eq(num("uncompressed", "requests"), 20000);
	cr_assert_eq(num("uncompressed", "rows_resident"), 200, "capacity / row bytes rows");
	double hu = num("uncompressed", "hit_rate"), hc = num("compressed", "hit_rate");
	cr_assert(hu > 0.2 && hc > hu, "hit rates: uncompressed %g, compressed %g", hu, hc);
	cr_assert(num("compressed", "rows_resident") > 2 * num("uncompressed", "rows_resident"));
	cr_assert(num("compressed", "pcie_bytes") < num("uncompressed", "pcie_bytes"));
	cr_assert(num("uncompressed", "pcie_bytes") < num("none", "pcie_bytes"));
	cr_assert(num("compressed", "model_seconds") < num("none", "model_seconds"));
	cr_assert(strstr(out, "\"target_pcie\": true") || strstr(out, "\"target_pcie\":true"), "%s", out);
	/* The same run again gives the same numbers (deterministic twin). */
	double h1 = num("compressed", "hits"), b1 = num("compressed", "pcie_bytes");
	cr_assert_eq(run(args), 0);
	cr_assert_eq(num("compressed", "hits"), h1);
	cr_assert_eq(num("compressed", "pcie_bytes"), b1);
}

Test(cache_sim, trace_file_and_policies, .init = setup, .fini = teardown)
{
	char tr[128], args[512];
	snprintf(tr, sizeof(tr), "%s/t.txt", dir);
	FILE *f = fopen(tr, "w");
	cr_assert_not_null(f);
	fprintf(f, "# three batches\n1 2 3 4, 5\n\n1 2 3 # again\n7 1999 1 7\n");
	fclose(f);
	const char *pols[] = { "static", "clock", "s3fifo", "lru" };
	for (int i = 0; i < 4; i++) {
		snprintf(args, sizeof(args), "cache-sim %s --trace %s --capacity 100K --policy %s --json", store, tr,
			 pols[i]);
		cr_assert_eq(run(args), 0, "%s", out);
		cr_assert_eq(num(NULL, "batches"), 3);
		cr_assert_eq(num(NULL, "requests"), 12);
		cr_assert_eq(num(NULL, "distinct_rows"), 7);
		cr_assert_eq(num("none", "rows_read"), 11, "each batch reads its distinct rows once: 5 + 3 + 3");
		if (i == 0) /* static preloads the trace's rows: everything hits */
			cr_assert_eq(num("compressed", "hits"), 12);
		else { /* batch 2 hits 1 2 3, batch 3 hits 1 and reads 7 (once) and 1999 */
			cr_assert_eq(num("compressed", "hits"), 4, "%s", out);
			cr_assert_eq(num("compressed", "rows_read"), 7);
		}
	}
	/* the text table */
	snprintf(args, sizeof(args), "cache-sim %s --trace %s --capacity 5%%", store, tr);
	cr_assert_eq(run(args), 0);
	cr_assert(strstr(out, "uncompressed") && strstr(out, "compressed") && strstr(out, "no cache"), "%s", out);
}

Test(cache_sim, errors, .init = setup, .fini = teardown)
{
	char args[512], tr[128];
	cr_assert_eq(run("cache-sim --help"), 0);
	cr_assert(strstr(out, "usage: ibp cache-sim") != NULL, "%s", out);
	cr_assert_eq(run("help cache-sim"), 0);
	cr_assert(strstr(out, "usage: ibp cache-sim") != NULL, "%s", out);
	cr_assert_eq(run("--help"), 0);
	cr_assert(strstr(out, "cache-sim") != NULL, "listed in ibp --help: %s", out);
	snprintf(args, sizeof(args), "cache-sim %s --capacity 5%%", store);
	cr_assert_eq(run(args), 1, "--trace is required");
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:1", store);
	cr_assert_eq(run(args), 1, "--capacity is required");
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:1 --capacity 5%% --policy fifo", store);
	cr_assert_eq(run(args), 1);
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:x --capacity 5%%", store);
	cr_assert_eq(run(args), 1);
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:1 --capacity 500%%", store);
	cr_assert_eq(run(args), 1);
	snprintf(args, sizeof(args), "cache-sim %s --trace zipf:1 --capacity 10 --policy lru", store);
	cr_assert_eq(run(args), 2, "below one row: the library refuses it");
	snprintf(tr, sizeof(tr), "%s/bad.txt", dir);
	FILE *f = fopen(tr, "w");
	cr_assert_not_null(f);
	fprintf(f, "1 2\n3 2000\n");
	fclose(f);
	snprintf(args, sizeof(args), "cache-sim %s --trace %s --capacity 5%%", store, tr);
	cr_assert_eq(run(args), 2, "id outside the store");
	f = fopen(tr, "w");
	fprintf(f, "1 2x\n");
	fclose(f);
	cr_assert_eq(run(args), 2, "not an id");
	snprintf(args, sizeof(args), "cache-sim %s/missing.ibp --trace zipf:1 --capacity 5%%", dir);
	cr_assert_eq(run(args), 2);
}
