/* test_cli.c - runs the `ibp` executable (IBP_BINARY_DIR/bin/ibp, built by
 * the ibp_cli target) on small generated .npy files and checks outputs,
 * round trips and exit statuses (0 ok, 1 usage, 2 bad input). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ibp.h"

#define CLI_RUN_TAG "cli"
#include "cli_run.h"

/* ---- a tiny JSON validator (the CLI must print exactly one object) ---- */

static const char *jws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *jvalue(const char *p, int depth);

static const char *jstring(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p && *p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (!*p)
				return NULL;
		}
		p++;
	}
	return *p == '"' ? p + 1 : NULL;
}

static const char *jvalue(const char *p, int depth)
{
	p = jws(p);
	if (depth > 32)
		return NULL;
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';
		int obj = *p == '{';
		p = jws(p + 1);
		if (*p == close)
			return p + 1;
		for (;;) {
			if (obj) {
				p = jstring(jws(p));
				if (!p)
					return NULL;
				p = jws(p);
				if (*p++ != ':')
					return NULL;
			}
			p = jvalue(p, depth + 1);
			if (!p)
				return NULL;
			p = jws(p);
			if (*p == ',') {
				p++;
				continue;
			}
			return *p == close ? p + 1 : NULL;
		}
	}
	if (*p == '"')
		return jstring(p);
	if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4))
		return p + 4;
	if (!strncmp(p, "false", 5))
		return p + 5;
	char *end;
	strtod(p, &end);
	return end == p ? NULL : end;
}

static void assert_json_object(const char *s)
{
	cr_assert_eq(*jws(s), '{', "not an object: %s", s);
	const char *e = jvalue(s, 0);
	cr_assert_not_null(e, "invalid JSON: %s", s);
	cr_assert_eq(*jws(e), '\0', "trailing text after the JSON object: %s", s);
}

/* ---- inputs ------------------------------------------------------------ */

/* f32 rows with a shared exponent range and a few noisy rows: compressible. */
static void make_f32(const char *path, uint64_t rows, uint64_t cols)
{
	float *a = malloc(rows * cols * sizeof(float) + 1);
	uint64_t x = 12345;
	for (uint64_t i = 0; i < rows * cols; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		float v = 1.0f + (float)((x >> 40) & 0xFF) / 256.0f;
		if (i / cols % 17 == 3)
			v = (float)(x >> 11) * 1e-9f - 4000.0f; /* exception rows */
		a[i] = (i % cols) % 2 ? -v : v;
	}
	uint64_t shape[2] = {rows, cols};
	cr_assert_eq(ibp_npy_write(path, IBP_DTYPE_F32, 2, shape, a), IBP_OK, "%s", ibp_last_error());
	free(a);
}

static void make_array(const char *path, ibp_dtype_t dt, unsigned ndim, const uint64_t *shape)
{
	uint64_t n = 1;
	for (unsigned i = 0; i < ndim; i++)
		n *= shape[i];
	size_t bytes = n * ibp_dtype_size(dt);
	uint8_t *d = malloc(bytes + 1);
	for (size_t i = 0; i < bytes; i++)
		d[i] = (uint8_t)((i % 5 == 0) ? (i * 7919u >> 3) : (i & 1 ? 0x3F : 0));
	if (dt == IBP_DTYPE_BOOL)
		for (size_t i = 0; i < bytes; i++)
			d[i] &= 1;
	cr_assert_eq(ibp_npy_write(path, dt, ndim, shape, d), IBP_OK, "%s", ibp_last_error());
	free(d);
}

static void write_raw(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, n, f), n);
	fclose(f);
}

static size_t file_size(const char *path)
{
	struct stat st;
	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (size_t)st.st_size;
}

static void assert_same_file(const char *a, const char *b)
{
	size_t n = file_size(a);
	cr_assert_eq(n, file_size(b), "%s and %s differ in size", a, b);
	char *x = malloc(n + 1), *y = malloc(n + 1);
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	cr_assert(fa && fb);
	cr_assert_eq(fread(x, 1, n, fa), n);
	cr_assert_eq(fread(y, 1, n, fb), n);
	fclose(fa);
	fclose(fb);
	cr_assert_eq(memcmp(x, y, n), 0, "%s and %s differ", a, b);
	free(x);
	free(y);
}

static void flip_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f);
	cr_assert_eq(fseek(f, off, off < 0 ? SEEK_END : SEEK_SET), 0);
	int c = fgetc(f);
	cr_assert_neq(c, EOF);
	cr_assert_eq(fseek(f, -1, SEEK_CUR), 0);
	fputc(c ^ 0x40, f);
	fclose(f);
}

/* ---- tests --------------------------------------------------------------- */

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 300);

Test(cli, version_and_help)
{
	assert_run(0, "--version");
	cr_assert_not_null(strstr(out_buf, "ibp 0.1.0"), "%s", out_buf);
	assert_run(0, "--help");
	cr_assert_not_null(strstr(out_buf, "bench"));
	assert_run(1, "");
	assert_run(1, "frobnicate");
	static const char *cmds[] = {"pack", "unpack", "info", "verify", "analyze", "gather", "bench", "eval"};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "usage: ibp %s", cmds[i]);
		assert_run(0, cmds[i], "--help");
		cr_assert_not_null(strstr(out_buf, want), "%s", out_buf);
		assert_run(0, "help", cmds[i]);
		cr_assert_not_null(strstr(out_buf, want), "%s", out_buf);
	}
	/* No arguments at all. */
	cr_assert_eq(run(NULL), 1);
}

Test(cli, pack_unpack_roundtrip)
{
	make_f32(P("a.npy"), 300, 24);
	assert_run(0, "pack", P("a.npy"), P("a.ibp"));
	cr_assert_not_null(strstr(out_buf, "ratio"), "%s", out_buf);
	cr_assert_eq(err_buf[0], '\0', "stderr not empty (no terminal): %s", err_buf);
	cr_assert_lt(file_size(P("a.ibp")), file_size(P("a.npy")));
	assert_run(0, "unpack", P("a.ibp"), P("b.npy"));
	/* Same header rule as np.save, so the whole file is identical. */
	assert_same_file(P("a.npy"), P("b.npy"));

	/* Every option combination round-trips. */
	static const char *variants[][8] = {
		{"--chunk", "1", "--threshold", "0.9", NULL},
		{"--chunk", "2", "--layout", "inplace", NULL},
		{"--chunk", "8", "--clusters", "3", "--threads", "1", NULL},
		{"--clusters", "auto", "--sample", "0.5", "--seed", "99", NULL},
		{"--threshold", "auto", "--chunk", "auto", "--layout", "packed", NULL},
	};
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		const char **o = variants[v];
		int rc = run("pack", P("a.npy"), P("v.ibp"), o[0], o[1], o[2], o[3],
			     o[4] ? o[4] : NULL, o[4] ? o[5] : NULL, NULL);
		cr_assert_eq(rc, 0, "variant %zu: %s", v, err_buf);
		assert_run(0, "verify", P("v.ibp"));
		assert_run(0, "unpack", P("v.ibp"), P("v.npy"));
		assert_same_file(P("a.npy"), P("v.npy"));
	}
}

Test(cli, dtypes_and_shapes)
{
	static const struct {
		ibp_dtype_t dt;
		unsigned ndim;
		uint64_t shape[3];
	} cases[] = {
		{IBP_DTYPE_U8, 2, {50, 7}},       {IBP_DTYPE_F64, 1, {100}},      {IBP_DTYPE_I16, 3, {9, 4, 5}},
		{IBP_DTYPE_BOOL, 2, {33, 64}},    {IBP_DTYPE_I64, 2, {1, 3}},     {IBP_DTYPE_F16, 2, {40, 33}},
		{IBP_DTYPE_U32, 2, {0, 5}},       {IBP_DTYPE_I8, 2, {64, 1}},     {IBP_DTYPE_U64, 3, {4, 1, 1}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		make_array(P("in.npy"), cases[i].dt, cases[i].ndim, cases[i].shape);
		int rc = run("pack", P("in.npy"), P("in.ibp"), NULL);
		cr_assert_eq(rc, 0, "case %zu (%s): %s", i, ibp_dtype_name(cases[i].dt), err_buf);
		assert_run(0, "verify", P("in.ibp"));
		assert_run(0, "unpack", P("in.ibp"), P("out.npy"));
		assert_same_file(P("in.npy"), P("out.npy"));
		assert_run(0, "info", P("in.ibp"), "--json");
		assert_json_object(out_buf);
		cr_assert_not_null(strstr(out_buf, ibp_dtype_name(cases[i].dt)), "%s", out_buf);
	}
}

Test(cli, bf16)
{
	uint64_t shape[2] = {64, 32};
	make_array(P("u2.npy"), IBP_DTYPE_U16, 2, shape);
	assert_run(0, "pack", P("u2.npy"), P("bf.ibp"), "--dtype", "bf16");
	assert_run(0, "info", P("bf.ibp"), "--json");
	cr_assert_not_null(strstr(out_buf, "\"dtype\":\"bf16\""), "%s", out_buf);
	/* Written back as <u2: the same file. */
	assert_run(0, "unpack", P("bf.ibp"), P("back.npy"));
	assert_same_file(P("u2.npy"), P("back.npy"));
	/* '|V2' input is accepted as bf16 too. */
	unsigned char hdr[128];
	uint64_t len;
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_U16, 2, shape, hdr, sizeof(hdr), &len), IBP_OK);
	char *v2 = memchr(hdr, '<', len);
	cr_assert_not_null(v2);
	memcpy(v2, "|V2", 3);
	size_t data_bytes = 64 * 32 * 2;
	unsigned char *file = calloc(1, len + data_bytes);
	memcpy(file, hdr, len);
	write_raw(P("v2.npy"), file, len + data_bytes);
	free(file);
	assert_run(2, "pack", P("v2.npy"), P("v2.ibp"));
	assert_run(0, "pack", P("v2.npy"), P("v2.ibp"), "--dtype", "bf16");
	/* --dtype bf16 on a float32 array is refused. */
	make_f32(P("f.npy"), 10, 4);
	assert_run(2, "pack", P("f.npy"), P("f.ibp"), "--dtype", "bf16");
	cr_assert_not_null(strstr(err_buf, "bf16"), "%s", err_buf);
}

Test(cli, info_and_verify)
{
	make_f32(P("a.npy"), 200, 32);
	assert_run(0, "pack", P("a.npy"), P("a.ibp"));
	assert_run(0, "info", P("a.ibp"));
	cr_assert_not_null(strstr(out_buf, "row modes"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "f32 [200, 32]"), "%s", out_buf);
	assert_run(0, "info", "--json", P("a.ibp"));
	assert_json_object(out_buf);
	cr_assert_not_null(strstr(out_buf, "\"rows\":200"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"modes\":{"), "%s", out_buf);
	assert_run(0, "verify", P("a.ibp"));
	cr_assert_not_null(strstr(out_buf, "OK"), "%s", out_buf);
	assert_run(0, "info", "--json", P("a.ibp"));

	/* A flipped byte in the header or the payload (the file's last
	 * payload_bytes) fails verify with exit 2. Alignment padding between
	 * sections is not covered by any checksum, so it is not probed. */
	size_t n = file_size(P("a.ibp"));
	const char *pl = strstr(out_buf, "\"payload_bytes\":");
	cr_assert_not_null(pl);
	long plen = atol(pl + strlen("\"payload_bytes\":"));
	cr_assert_gt(plen, 0);
	const long offs[] = {0, 5, 9, 17, 33, (long)n - plen, (long)n - plen / 2, (long)n - 1};
	for (size_t oi = 0; oi < sizeof(offs) / sizeof(offs[0]); oi++) {
		long off = offs[oi];
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", P("a.ibp"), P("c.ibp"));
		cr_assert_eq(system(cmd), 0);
		flip_byte(P("c.ibp"), off);
		int rc = run("verify", P("c.ibp"), NULL);
		cr_assert_eq(rc, 2, "flip at %ld: exit %d: %s%s", off, rc, out_buf, err_buf);
		cr_assert_not_null(strstr(err_buf, P("c.ibp")), "message must name the file: %s", err_buf);
	}
	/* Truncated. */
	FILE *f = fopen(P("a.ibp"), "rb");
	char *buf = malloc(n);
	cr_assert_eq(fread(buf, 1, n, f), n);
	fclose(f);
	write_raw(P("t.ibp"), buf, n / 2);
	free(buf);
	assert_run(2, "verify", P("t.ibp"));
	assert_run(2, "info", P("t.ibp"));
	assert_run(2, "unpack", P("t.ibp"), P("t.npy"));
	cr_assert_neq(access(P("t.npy"), F_OK), 0, "no output file after a failure");
	/* Not a container at all. */
	assert_run(2, "info", P("a.npy"));
	assert_run(2, "verify", P("missing.ibp"));
	cr_assert_not_null(strstr(err_buf, "missing.ibp"), "%s", err_buf);
}

/* Rows of `cols` floats equal? */
static int row_equal(const float *a, const float *b, uint64_t cols)
{
	return memcmp(a, b, cols * sizeof(float)) == 0;
}

Test(cli, gather)
{
	const uint64_t rows = 150, cols = 20;
	make_f32(P("a.npy"), rows, cols);
	assert_run(0, "pack", P("a.npy"), P("a.ibp"));
	ibp_npy_info_t ia, ig;
	void *da, *dg;
	cr_assert_eq(ibp_npy_load(P("a.npy"), 0, &ia, &da), IBP_OK);
	const float *fa = da;

	/* Text ids: order kept, duplicates, comments and commas. */
	const char *txt = "# ids\n5, 0\n149 5\n\n77 # tail\n";
	write_raw(P("ids.txt"), txt, strlen(txt));
	assert_run(0, "gather", P("a.ibp"), "--ids", P("ids.txt"), "--out", P("g.npy"));
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &ig, &dg), IBP_OK);
	cr_assert_eq(ig.ndim, 2);
	cr_assert_eq(ig.shape[0], 5);
	cr_assert_eq(ig.shape[1], cols);
	static const int want[5] = {5, 0, 149, 5, 77};
	for (int i = 0; i < 5; i++)
		cr_assert(row_equal((const float *)dg + i * cols, fa + want[i] * cols, cols), "row %d", i);
	ibp_npy_free(dg);

	/* .npy ids (int64 and int32). */
	int64_t ids64[3] = {149, 1, 2};
	uint64_t n3[1] = {3};
	cr_assert_eq(ibp_npy_write(P("ids.npy"), IBP_DTYPE_I64, 1, n3, ids64), IBP_OK);
	assert_run(0, "gather", P("a.ibp"), "--ids", P("ids.npy"), "--out", P("g.npy"), "--threads", "2");
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &ig, &dg), IBP_OK);
	cr_assert_eq(ig.shape[0], 3);
	for (int i = 0; i < 3; i++)
		cr_assert(row_equal((const float *)dg + i * cols, fa + ids64[i] * cols, cols));
	ibp_npy_free(dg);
	int32_t ids32[2] = {7, 8};
	uint64_t n2[2] = {2, 1};
	cr_assert_eq(ibp_npy_write(P("ids32.npy"), IBP_DTYPE_I32, 2, n2, ids32), IBP_OK);
	assert_run(0, "gather", P("a.ibp"), "--ids", P("ids32.npy"), "--out", P("g.npy"));
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &ig, &dg), IBP_OK);
	cr_assert_eq(ig.shape[0], 2);
	for (int i = 0; i < 2; i++)
		cr_assert(row_equal((const float *)dg + i * cols, fa + ids32[i] * cols, cols), "int32 id %d", i);
	ibp_npy_free(dg);

	/* random:N:SEED is deterministic and every row is a real row. */
	assert_run(0, "gather", P("a.ibp"), "--ids", "random:40:3", "--out", P("r1.npy"));
	assert_run(0, "gather", P("a.ibp"), "--out", P("r2.npy"), "--ids", "random:40:3");
	assert_same_file(P("r1.npy"), P("r2.npy"));
	cr_assert_eq(ibp_npy_load(P("r1.npy"), 0, &ig, &dg), IBP_OK);
	cr_assert_eq(ig.shape[0], 40);
	for (uint64_t i = 0; i < 40; i++) {
		int found = 0;
		for (uint64_t r = 0; r < rows && !found; r++)
			found = row_equal((const float *)dg + i * cols, fa + r * cols, cols);
		cr_assert(found, "gathered row %llu is not in the input", (unsigned long long)i);
	}
	ibp_npy_free(dg);
	assert_run(0, "gather", P("a.ibp"), "--ids", "random:0", "--out", P("r0.npy"));
	cr_assert_eq(ibp_npy_load(P("r0.npy"), 0, &ig, &dg), IBP_OK);
	cr_assert_eq(ig.ndim, 2);
	cr_assert_eq(ig.shape[0], 0, "random:0 gathers no rows");
	cr_assert_eq(ig.shape[1], cols);
	ibp_npy_free(dg);

	/* Errors: out of range (exit 2, no output), bad text, bad spec, missing options. */
	int64_t bad[2] = {3, 150};
	uint64_t nb[1] = {2};
	cr_assert_eq(ibp_npy_write(P("bad.npy"), IBP_DTYPE_I64, 1, nb, bad), IBP_OK);
	assert_run(2, "gather", P("a.ibp"), "--ids", P("bad.npy"), "--out", P("x.npy"));
	cr_assert_not_null(strstr(err_buf, "150"), "%s", err_buf);
	cr_assert_neq(access(P("x.npy"), F_OK), 0);
	write_raw(P("neg.txt"), "1 -2\n", 5);
	assert_run(2, "gather", P("a.ibp"), "--ids", P("neg.txt"), "--out", P("x.npy"));
	write_raw(P("junk.txt"), "1 2x\n", 5);
	assert_run(2, "gather", P("a.ibp"), "--ids", P("junk.txt"), "--out", P("x.npy"));
	float fl[2] = {1, 2};
	cr_assert_eq(ibp_npy_write(P("fl.npy"), IBP_DTYPE_F32, 1, nb, fl), IBP_OK);
	assert_run(2, "gather", P("a.ibp"), "--ids", P("fl.npy"), "--out", P("x.npy"));
	assert_run(1, "gather", P("a.ibp"), "--ids", "random:x", "--out", P("x.npy"));
	assert_run(1, "gather", P("a.ibp"), "--out", P("x.npy"));
	assert_run(1, "gather", P("a.ibp"), "--ids", "random:3");
	assert_run(2, "gather", P("a.ibp"), "--ids", P("nothere.txt"), "--out", P("x.npy"));
	ibp_npy_free(da);
}

Test(cli, analyze)
{
	make_f32(P("a.npy"), 256, 48);
	assert_run(0, "analyze", P("a.npy"));
	cr_assert_not_null(strstr(out_buf, "invariant fraction per bit"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "predicted ratio"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "best:"), "%s", out_buf);
	assert_run(0, "analyze", P("a.npy"), "--json", "--threshold", "0.95", "--sample", "0.5");
	assert_json_object(out_buf);
	cr_assert_not_null(strstr(out_buf, "\"bit_invariant_fraction\":["), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"cells\":["), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"threshold\":0.95"), "%s", out_buf);
	assert_run(1, "analyze", P("a.npy"), "--threshold", "0.2");
	assert_run(1, "analyze");
}

Test(cli, bench)
{
	make_f32(P("a.npy"), 256, 64);
	assert_run(0, "bench", P("a.npy"), "--repeat", "1", "--threads", "2");
	cr_assert_eq(err_buf[0], '\0', "stderr not empty (no terminal): %s", err_buf);
	static const char *rows[] = {"ibp", "portable", "paper layout", "zstd -1", "zstd -3", "lz4", "64K", "row"};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		cr_assert_not_null(strstr(out_buf, rows[i]), "missing '%s' in:\n%s", rows[i], out_buf);
	assert_run(0, "bench", P("a.npy"), "--json", "--repeat", "2", "--threads", "1", "--chunk", "4");
	assert_json_object(out_buf);
	cr_assert_not_null(strstr(out_buf, "\"verified\":true"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"name\":\"zstd -3\""), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"chunk_bytes\":4"), "%s", out_buf);
	/* --max-mb caps the rows used. */
	assert_run(0, "bench", P("a.npy"), "--json", "--repeat", "1", "--max-mb", "0");
	assert_run(1, "bench", P("a.npy"), "--repeat", "0");
	uint64_t zero[2] = {0, 8};
	make_array(P("empty.npy"), IBP_DTYPE_U8, 2, zero);
	assert_run(2, "bench", P("empty.npy"));
}

Test(cli, usage_errors)
{
	make_f32(P("a.npy"), 20, 4);
	assert_run(1, "pack", P("a.npy"));
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), P("c"));
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--chunk", "3");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--threshold", "1.5");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--threshold", "x");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--clusters", "65");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--sample", "0");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--layout", "sideways");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--threads", "-1");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--dtype", "f8");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--frobnicate");
	cr_assert_not_null(strstr(err_buf, "--frobnicate"), "%s", err_buf);
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--chunk");
	assert_run(1, "unpack", P("a.ibp"));
	assert_run(1, "info");
	assert_run(1, "info", P("a.ibp"), "--threads", "2");
	assert_run(1, "verify", P("a.ibp"), P("b.ibp"));
	cr_assert_neq(access(P("b.ibp"), F_OK), 0);
}

Test(cli, bad_inputs)
{
	/* Hand-made headers: big-endian, Fortran order, 0-d, truncated data. */
	static const struct {
		const char *dict;
		size_t data;
		const char *msg;
	} cases[] = {
		{"{'descr': '>f4', 'fortran_order': False, 'shape': (4, 2), }", 32, "big-endian"},
		{"{'descr': '<f4', 'fortran_order': True, 'shape': (4, 2), }", 32, "Fortran"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, "0-dimensional"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", 31, "truncated"},
		{"{'descr': '<c8', 'fortran_order': False, 'shape': (4, 2), }", 64, "c8"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }", 0, "0 bytes"},
		{"{'descr': '<f4', 'fortran_order': False 'shape': (4, 2), }", 32, "npy header"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char buf[512] = {0};
		size_t dl = strlen(cases[i].dict);
		memcpy(buf, "\x93NUMPY\x01\x00", 8);
		buf[8] = (unsigned char)(dl + 1);
		buf[9] = 0;
		memcpy(buf + 10, cases[i].dict, dl);
		buf[10 + dl] = '\n';
		write_raw(P("bad.npy"), buf, 11 + dl + cases[i].data);
		assert_run(2, "pack", P("bad.npy"), P("bad.ibp"));
		cr_assert_not_null(strstr(err_buf, cases[i].msg), "case %zu: %s", i, err_buf);
		cr_assert_not_null(strstr(err_buf, "bad.npy"), "case %zu: %s", i, err_buf);
		assert_run(2, "analyze", P("bad.npy"));
		assert_run(2, "bench", P("bad.npy"));
		cr_assert_neq(access(P("bad.ibp"), F_OK), 0);
	}
	assert_run(2, "pack", P("nope.npy"), P("x.ibp"));
	write_raw(P("empty.npy"), "", 0);
	assert_run(2, "pack", P("empty.npy"), P("x.ibp"));
	/* An .ibp given where an .npy is expected. */
	make_f32(P("a.npy"), 20, 4);
	assert_run(0, "pack", P("a.npy"), P("a.ibp"));
	assert_run(2, "pack", P("a.ibp"), P("x.ibp"));
	assert_run(2, "bench", P("a.ibp"));
	/* Unwritable output. */
	assert_run(2, "pack", P("a.npy"), P("no/such/dir/x.ibp"));
	assert_run(2, "unpack", P("a.ibp"), P("no/such/dir/x.npy"));
}

/* ---- the exp and fp8 codecs, and eval ---------------------------------- */

/* Smooth float values (a sum of uniforms, sigma about 0.03) as f32, or as
 * bf16 bit patterns in a '<u2' array, or as f16. */
static void make_values(const char *path, ibp_dtype_t dt, uint64_t rows, uint64_t cols)
{
	uint64_t n = rows * cols, x = 99;
	uint8_t *d = malloc(n * 4 + 1);
	for (uint64_t i = 0; i < n; i++) {
		double s = 0;
		for (int k = 0; k < 4; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			s += (double)(x >> 11) / 9007199254740992.0 - 0.5;
		}
		float f = (float)(s * 0.05);
		uint32_t u;
		memcpy(&u, &f, 4);
		if (dt == IBP_DTYPE_F32) {
			memcpy(d + 4 * i, &f, 4);
		} else if (dt == IBP_DTYPE_U16) { /* bf16 bits */
			uint16_t h = (uint16_t)(u >> 16);
			memcpy(d + 2 * i, &h, 2);
		} else { /* f16: |f| < 0.1, built by hand (normal range) */
			int e = 0;
			double m = frexp(fabs((double)f), &e); /* |f| = m * 2^e, m in [0.5, 1) */
			uint16_t h = 0;
			if (f != 0 && e - 1 + 15 >= 1)
				h = (uint16_t)(((e - 1 + 15) << 10) | ((uint16_t)((m * 2 - 1) * 1024) & 0x3FF));
			if (f < 0)
				h |= 0x8000;
			memcpy(d + 2 * i, &h, 2);
		}
	}
	uint64_t shape[2] = {rows, cols};
	cr_assert_eq(ibp_npy_write(path, dt, 2, shape, d), IBP_OK, "%s", ibp_last_error());
	free(d);
}

/* The value of `key=` in a key=value line; fails the test if absent. */
static double kv(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "%s=", key);
	const char *p = line;
	size_t n = strlen(pat);
	while ((p = strstr(p, pat)) != NULL && p != line && p[-1] != ' ')
		p += n;
	cr_assert_not_null(p, "no '%s' in: %s", pat, line);
	return strtod(p + n, NULL);
}

Test(cli, pack_exp_fp8)
{
	const uint64_t rows = 400, cols = 64;
	make_values(P("f32.npy"), IBP_DTYPE_F32, rows, cols);
	make_values(P("bf.npy"), IBP_DTYPE_U16, rows, cols);
	make_values(P("f16.npy"), IBP_DTYPE_F16, rows, cols);

	/* exp: lossless, whole files identical after unpack, any block size */
	static const char *ins[] = {"f32.npy", "bf.npy", "f16.npy"};
	for (size_t i = 0; i < 3; i++) {
		const char *bf = i == 1 ? "--dtype" : NULL, *bf2 = i == 1 ? "bf16" : NULL;
		int rc = i == 1 ? run("pack", P(ins[i]), P("e.ibp"), "--codec", "exp", "--block-rows", "7", bf, bf2, NULL)
				: run("pack", P(ins[i]), P("e.ibp"), "--codec", "exp", "--block-rows", "7", NULL);
		cr_assert_eq(rc, 0, "%s: %s", ins[i], err_buf);
		cr_assert_not_null(strstr(out_buf, "codec exp"), "%s", out_buf);
		assert_run(0, "verify", P("e.ibp"));
		cr_assert_not_null(strstr(out_buf, "OK"), "%s", out_buf);
		assert_run(0, "unpack", P("e.ibp"), P("e.npy"));
		assert_same_file(P(ins[i]), P("e.npy"));
		assert_run(0, "info", P("e.ibp"), "--json");
		assert_json_object(out_buf);
		cr_assert_not_null(strstr(out_buf, "\"codec\":\"exp\""), "%s", out_buf);
		cr_assert_not_null(strstr(out_buf, "\"lossy\":false"), "%s", out_buf);
		cr_assert_not_null(strstr(out_buf, "\"block_rows\":7"), "%s", out_buf);
		assert_run(0, "info", P("e.ibp"));
		cr_assert_not_null(strstr(out_buf, "exp (lossless)"), "%s", out_buf);
	}
	/* default blocks (one here): smaller than the input */
	for (size_t i = 0; i < 3; i++) {
		int rc = i == 1 ? run("pack", P(ins[i]), P("e.ibp"), "--codec", "exp", "--dtype", "bf16", NULL)
				: run("pack", P(ins[i]), P("e.ibp"), "--codec", "exp", "--exp-table", "hist", NULL);
		cr_assert_eq(rc, 0, "%s: %s", ins[i], err_buf);
		cr_assert_lt(file_size(P("e.ibp")), file_size(P(ins[i])), "%s compresses", ins[i]);
		assert_run(0, "unpack", P("e.ibp"), P("e.npy"));
		assert_same_file(P(ins[i]), P("e.npy"));
	}
	/* --exp-table rans: smaller still than hist on these values, named by info */
	for (size_t i = 0; i < 3; i++) {
		if (i == 1)
			continue; /* the bf16 input needs --dtype; the others cover the option */
		assert_run(0, "pack", P(ins[i]), P("h.ibp"), "--codec", "exp", "--exp-table", "hist");
		assert_run(0, "pack", P(ins[i]), P("r.ibp"), "--codec", "exp", "--exp-table", "rans");
		cr_assert_leq(file_size(P("r.ibp")), file_size(P("h.ibp")), "%s: rans no larger than hist", ins[i]);
		assert_run(0, "info", P("r.ibp"));
		cr_assert_not_null(strstr(out_buf, "table rans"), "%s", out_buf);
		assert_run(0, "unpack", P("r.ibp"), P("e.npy"));
		assert_same_file(P(ins[i]), P("e.npy"));
	}

	/* gather across blocks: the requested rows, in order */
	assert_run(0, "pack", P("f32.npy"), P("e.ibp"), "--codec", "exp", "--block-rows", "9");
	const char *txt = "399 0 17 18 17 5 100\n";
	write_raw(P("ids.txt"), txt, strlen(txt));
	assert_run(0, "gather", P("e.ibp"), "--ids", P("ids.txt"), "--out", P("g.npy"), "--threads", "2");
	ibp_npy_info_t ia, ig;
	void *da, *dg;
	cr_assert_eq(ibp_npy_load(P("f32.npy"), 0, &ia, &da), IBP_OK);
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &ig, &dg), IBP_OK);
	static const int want[7] = {399, 0, 17, 18, 17, 5, 100};
	cr_assert_eq(ig.shape[0], 7);
	for (int i = 0; i < 7; i++)
		cr_assert(row_equal((const float *)dg + i * cols, (const float *)da + want[i] * cols, cols), "row %d", i);
	ibp_npy_free(dg);

	/* fp8 needs --lossy: a usage error without it, and no file */
	assert_run(1, "pack", P("f32.npy"), P("q.ibp"), "--codec", "fp8");
	cr_assert_not_null(strstr(err_buf, "--lossy"), "%s", err_buf);
	cr_assert_neq(access(P("q.ibp"), F_OK), 0);
	assert_run(0, "pack", P("f32.npy"), P("q.ibp"), "--codec", "fp8", "--lossy", "--block-rows", "50");
	cr_assert_not_null(strstr(out_buf, "LOSSY"), "%s", out_buf);
	cr_assert_lt(file_size(P("q.ibp")) * 3, file_size(P("f32.npy")), "about 1 byte per f32 element");
	assert_run(0, "verify", P("q.ibp"));
	cr_assert_not_null(strstr(out_buf, "OK"), "%s", out_buf);
	assert_run(0, "info", P("q.ibp"), "--json");
	assert_json_object(out_buf);
	cr_assert_not_null(strstr(out_buf, "\"lossy\":true"), "%s", out_buf);
	cr_assert_not_null(strstr(out_buf, "\"fp8_format\":\"e4m3\""), "%s", out_buf);
	/* unpack gives the lossy values: same shape and dtype, close to the input */
	assert_run(0, "unpack", P("q.ibp"), P("q.npy"));
	void *dq;
	ibp_npy_info_t iq;
	cr_assert_eq(ibp_npy_load(P("q.npy"), 0, &iq, &dq), IBP_OK);
	cr_assert_eq(iq.dtype, IBP_DTYPE_F32);
	cr_assert_eq(iq.shape[0], rows);
	cr_assert_eq(iq.shape[1], cols);
	double e2 = 0, r2 = 0;
	for (uint64_t i = 0; i < rows * cols; i++) {
		double a = ((const float *)da)[i], b = ((const float *)dq)[i];
		e2 += (a - b) * (a - b);
		r2 += a * a;
	}
	cr_assert(e2 > 0 && sqrt(e2 / r2) < 0.04, "fp8 rel. L2 error %g", sqrt(e2 / r2));
	/* gather from fp8 returns the same rows as unpack */
	assert_run(0, "gather", P("q.ibp"), "--ids", P("ids.txt"), "--out", P("qg.npy"));
	cr_assert_eq(ibp_npy_load(P("qg.npy"), 0, &ig, &dg), IBP_OK);
	for (int i = 0; i < 7; i++)
		cr_assert(row_equal((const float *)dg + i * cols, (const float *)dq + want[i] * cols, cols), "row %d", i);
	ibp_npy_free(dg);
	ibp_npy_free(dq);
	ibp_npy_free(da);
	/* every fp8 switch, on bf16 input */
	assert_run(0, "pack", P("bf.npy"), P("q.ibp"), "--codec", "fp8", "--lossy", "--dtype", "bf16",
		   "--fp8-format", "e5m2", "--fp8-block", "16", "--no-hadamard", "--no-adaptive");
	assert_run(0, "info", P("q.ibp"));
	cr_assert_not_null(strstr(out_buf, "e5m2, scale block 16, Hadamard off, adaptive off"), "%s", out_buf);
	assert_run(0, "unpack", P("q.ibp"), P("q.npy"));
	cr_assert_eq(file_size(P("q.npy")), file_size(P("bf.npy")));
	{
		/* the values, not just the size: near the bf16 input (e5m2 has 2
		 * mantissa bits: 12.5% per element at most, without Hadamard) */
		void *db, *dqb;
		ibp_npy_info_t ib, iqb;
		cr_assert_eq(ibp_npy_load(P("bf.npy"), 0, &ib, &db), IBP_OK);
		cr_assert_eq(ibp_npy_load(P("q.npy"), 0, &iqb, &dqb), IBP_OK);
		cr_assert_eq(iqb.dtype, ib.dtype);
		double be2 = 0, br2 = 0;
		for (uint64_t i = 0; i < rows * cols; i++) {
			uint32_t ua = (uint32_t)((const uint16_t *)db)[i] << 16, ub = (uint32_t)((const uint16_t *)dqb)[i] << 16;
			float a, b;
			memcpy(&a, &ua, 4);
			memcpy(&b, &ub, 4);
			be2 += ((double)a - b) * ((double)a - b);
			br2 += (double)a * a;
		}
		cr_assert(be2 > 0 && sqrt(be2 / br2) < 0.15, "e5m2 rel. L2 error %g", sqrt(be2 / br2));
		ibp_npy_free(db);
		ibp_npy_free(dqb);
	}

	/* dtypes the value codecs do not take: exit 2 */
	uint64_t shape[2] = {20, 8};
	make_array(P("u8.npy"), IBP_DTYPE_U8, 2, shape);
	assert_run(2, "pack", P("u8.npy"), P("x.ibp"), "--codec", "exp");
	assert_run(2, "pack", P("u8.npy"), P("x.ibp"), "--codec", "fp8", "--lossy");
	assert_run(2, "pack", P("bf.npy"), P("x.ibp"), "--codec", "exp"); /* '<u2' without --dtype bf16 */
	cr_assert_not_null(strstr(err_buf, "--dtype bf16"), "%s", err_buf);
	cr_assert_neq(access(P("x.ibp"), F_OK), 0);

	/* options of another codec, or bad values: usage errors */
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "zip");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp", "--fp8-block", "64");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "fp8", "--lossy", "--exp-table", "hist");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp", "--chunk", "2");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp", "--layout", "inplace");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--block-rows", "3");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--no-hadamard");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "fp8", "--lossy", "--fp8-block", "48");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "fp8", "--lossy", "--fp8-format", "e3m4");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp", "--exp-table", "x");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp", "--block-rows", "0");
	cr_assert_neq(access(P("x.ibp"), F_OK), 0);

	/* a damaged exp payload fails verify */
	assert_run(0, "pack", P("f32.npy"), P("e.ibp"), "--codec", "exp");
	flip_byte(P("e.ibp"), -100);
	assert_run(2, "verify", P("e.ibp"));
	cr_assert_not_null(strstr(err_buf, P("e.ibp")), "%s", err_buf);
}

/* --codec exp-rows: the exponent codec row by row (container codec 4):
 * lossless for the three float dtypes at a SIMD row width (64) and an odd
 * one (40, the portable decoder); info, verify, unpack and gather read it,
 * options of the other codecs are refused, eval has no form of it. */
Test(cli, pack_exp_rows)
{
	static const char *ins[] = {"f32.npy", "bf.npy", "f16.npy"};
	static const ibp_dtype_t dts[] = {IBP_DTYPE_F32, IBP_DTYPE_U16, IBP_DTYPE_F16};
	static const uint64_t widths[] = {64, 40};
	const uint64_t rows = 300;
	for (size_t w = 0; w < 2; w++)
		for (size_t i = 0; i < 3; i++) {
			make_values(P(ins[i]), dts[i], rows, widths[w]);
			int rc = i == 1 ? run("pack", P(ins[i]), P("r.ibp"), "--codec", "exp-rows", "--dtype", "bf16",
					      "--threads", "2", NULL)
					: run("pack", P(ins[i]), P("r.ibp"), "--codec", "exp-rows", NULL);
			cr_assert_eq(rc, 0, "%s x %llu: %s", ins[i], (unsigned long long)widths[w], err_buf);
			cr_assert_not_null(strstr(out_buf, "codec exp-rows (lossless)"), "%s", out_buf);
			if (i == 1) /* bfloat16: about 0.75 of the raw size */
				cr_assert_lt(file_size(P("r.ibp")), file_size(P(ins[i])), "%s compresses", ins[i]);
			assert_run(0, "verify", P("r.ibp"), "--threads", "2");
			cr_assert_not_null(strstr(out_buf, "OK"), "%s", out_buf);
			cr_assert_not_null(strstr(out_buf, "every row verified"), "%s", out_buf);
			assert_run(0, "unpack", P("r.ibp"), P("r.npy"));
			assert_same_file(P(ins[i]), P("r.npy"));
			assert_run(0, "info", P("r.ibp"), "--json");
			assert_json_object(out_buf);
			cr_assert_not_null(strstr(out_buf, "\"codec\":\"exp-rows\""), "%s", out_buf);
			cr_assert_not_null(strstr(out_buf, "\"lossy\":false"), "%s", out_buf);
			cr_assert_null(strstr(out_buf, "\"blocks\""), "no blocks: %s", out_buf);
			char want[32];
			snprintf(want, sizeof(want), "\"rows\":%llu,", (unsigned long long)rows);
			cr_assert_not_null(strstr(out_buf, want), "%s", out_buf);
			/* the payload is the row slots (fixed part + K >= 8 escape bytes) and the overflow */
			unsigned long long sb = 0, ob = 0, pb = 0;
			const char *q;
			cr_assert((q = strstr(out_buf, "\"slot_bytes\":")) && sscanf(q, "\"slot_bytes\":%llu", &sb) == 1);
			cr_assert((q = strstr(out_buf, "\"overflow_bytes\":")) &&
				  sscanf(q, "\"overflow_bytes\":%llu", &ob) == 1);
			cr_assert((q = strstr(out_buf, "\"payload_bytes\":")) &&
				  sscanf(q, "\"payload_bytes\":%llu", &pb) == 1);
			const uint64_t d = widths[w], P8 = (d + 7) / 8;
			const uint64_t fixed = i == 0 ? 3 * P8 + 3 * d : i == 2 ? 6 * P8 + d : 3 * P8 + d;
			cr_assert(sb >= fixed + 8 && sb <= fixed + d, "slot %llu, fixed part %llu", sb,
				  (unsigned long long)fixed);
			cr_assert_eq(pb, rows * sb + ob);
			assert_run(0, "info", P("r.ibp"));
			cr_assert_not_null(strstr(out_buf, "row slots     "), "%s", out_buf);
			cr_assert_not_null(strstr(out_buf, "codec         exp-rows (lossless)"), "%s", out_buf);
		}

	/* gather: the requested rows, in order (f32, 40 wide, from the loop) */
	const uint64_t cols = 40;
	assert_run(0, "pack", P("f32.npy"), P("r.ibp"), "--codec", "exp-rows");
	const char *txt = "299 0 17 18 17 5 100\n";
	write_raw(P("ids.txt"), txt, strlen(txt));
	assert_run(0, "gather", P("r.ibp"), "--ids", P("ids.txt"), "--out", P("g.npy"), "--threads", "2");
	ibp_npy_info_t ia, ig;
	void *da, *dg;
	cr_assert_eq(ibp_npy_load(P("f32.npy"), 0, &ia, &da), IBP_OK);
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &ig, &dg), IBP_OK);
	static const int want[7] = {299, 0, 17, 18, 17, 5, 100};
	cr_assert_eq(ig.shape[0], 7);
	cr_assert_eq(ig.shape[1], cols);
	for (int i = 0; i < 7; i++)
		cr_assert(row_equal((const float *)dg + i * cols, (const float *)da + want[i] * cols, cols), "row %d", i);
	ibp_npy_free(dg);
	ibp_npy_free(da);

	/* options of the other codecs: usage errors, and no file */
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--block-rows", "4");
	cr_assert_not_null(strstr(err_buf, "--block-rows"), "%s", err_buf);
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--exp-table", "hist");
	cr_assert_not_null(strstr(err_buf, "--exp-table"), "%s", err_buf);
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--lossy");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--fp8-format", "e5m2");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--no-hadamard");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--chunk", "2");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--layout", "inplace");
	assert_run(1, "pack", P("f32.npy"), P("x.ibp"), "--codec", "exp-rows", "--clusters", "2");
	/* dtypes it does not take: exit 2 */
	uint64_t shape[2] = {20, 8};
	make_array(P("u8.npy"), IBP_DTYPE_U8, 2, shape);
	assert_run(2, "pack", P("u8.npy"), P("x.ibp"), "--codec", "exp-rows");
	cr_assert_not_null(strstr(err_buf, "exp-rows"), "%s", err_buf);
	assert_run(2, "pack", P("bf.npy"), P("x.ibp"), "--codec", "exp-rows"); /* '<u2' without --dtype bf16 */
	cr_assert_not_null(strstr(err_buf, "--dtype bf16"), "%s", err_buf);
	cr_assert_neq(access(P("x.ibp"), F_OK), 0);
	/* eval has no in-memory form of it: a usage error naming pack */
	assert_run(1, "eval", "--codec", "exp-rows", P("f32.npy"));
	cr_assert_not_null(strstr(err_buf, "ibp pack --codec exp-rows"), "%s", err_buf);

	/* a damaged payload fails verify */
	assert_run(0, "pack", P("f32.npy"), P("r.ibp"), "--codec", "exp-rows");
	flip_byte(P("r.ibp"), -100);
	assert_run(2, "verify", P("r.ibp"));
	cr_assert_not_null(strstr(err_buf, P("r.ibp")), "%s", err_buf);
}

Test(cli, eval)
{
	make_values(P("f32.npy"), IBP_DTYPE_F32, 300, 64);
	make_values(P("bf.npy"), IBP_DTYPE_U16, 300, 64);
	static const char *keys[] = {"codec", "dtype", "elements", "raw_bytes", "encoded_bytes", "ratio",
				     "encode_gbps", "decode_gbps", "max_abs_err", "rel_l2_err"};
	static const char *codecs[] = {"ibp", "exp", "fp8"};
	for (int ci = 0; ci < 3; ci++)
		for (int bf = 0; bf < 2; bf++) {
			if (bf)
				assert_run(0, "eval", "--codec", codecs[ci], "--dtype", "bf16", P("bf.npy"), "--repeat", "2");
			else
				assert_run(0, "eval", "--codec", codecs[ci], P("f32.npy"), "--repeat", "2");
			/* one line */
			char *nl = strchr(out_buf, '\n');
			cr_assert_not_null(nl, "%s", out_buf);
			cr_assert_eq(nl[1], '\0', "more than one line: %s", out_buf);
			for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
				kv(out_buf, keys[k]);
			char want[32];
			snprintf(want, sizeof(want), "codec=%s ", codecs[ci]);
			cr_assert_not_null(strstr(out_buf, want), "%s", out_buf);
			cr_assert_not_null(strstr(out_buf, bf ? "dtype=bf16" : "dtype=f32"), "%s", out_buf);
			cr_assert_gt(kv(out_buf, "ratio"), 1.0, "%s", out_buf);
			cr_assert_gt(kv(out_buf, "encode_gbps"), 0.0, "%s", out_buf);
			cr_assert_gt(kv(out_buf, "decode_gbps"), 0.0, "%s", out_buf);
			cr_assert_eq(kv(out_buf, "elements"), 300 * 64);
			if (ci < 2) {
				cr_assert_eq(kv(out_buf, "rel_l2_err"), 0.0, "%s", out_buf);
				cr_assert_eq(kv(out_buf, "max_abs_err"), 0.0, "%s", out_buf);
			} else {
				double e = kv(out_buf, "rel_l2_err");
				cr_assert(e > 0 && e < 0.04, "%s", out_buf);
				cr_assert_gt(kv(out_buf, "max_abs_err"), 0.0, "%s", out_buf);
				cr_assert_gt(kv(out_buf, "ratio"), bf ? 1.8 : 3.6, "%s", out_buf);
			}
		}
	/* --json: the same figures as one object */
	assert_run(0, "eval", "--codec", "exp", "--json", P("f32.npy"), "--repeat", "1");
	assert_json_object(out_buf);
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		char want[64];
		snprintf(want, sizeof(want), "\"%s\":", keys[k]);
		cr_assert_not_null(strstr(out_buf, want), "%s", out_buf);
	}
	cr_assert_not_null(strstr(out_buf, "\"rel_l2_err\":0"), "%s", out_buf);
	assert_run(0, "eval", "--codec", "fp8", "--json", "--fp8-format", "e5m2", "--fp8-block", "32", "--no-hadamard",
		   P("f32.npy"), "--repeat", "1");
	assert_json_object(out_buf);
	/* --dtype converts a float array first */
	assert_run(0, "eval", "--codec", "exp", "--dtype", "f16", P("f32.npy"), "--repeat", "1");
	cr_assert_not_null(strstr(out_buf, "dtype=f16"), "%s", out_buf);
	assert_run(0, "eval", "--codec", "exp", "--dtype", "bf16", P("f32.npy"), "--repeat", "1");
	cr_assert_not_null(strstr(out_buf, "dtype=bf16"), "%s", out_buf);
	/* errors */
	uint64_t shape[2] = {20, 8};
	make_array(P("u8.npy"), IBP_DTYPE_U8, 2, shape);
	assert_run(2, "eval", "--codec", "exp", P("u8.npy"));
	assert_run(2, "eval", "--codec", "fp8", P("bf.npy")); /* '<u2' without --dtype bf16 */
	assert_run(2, "eval", "--codec", "exp", "--dtype", "f32", P("u8.npy"));
	assert_run(0, "eval", "--codec", "ibp", P("u8.npy"), "--repeat", "1");
	assert_run(1, "eval", "--codec", "exp");
	assert_run(1, "eval", "--codec", "gzip", P("f32.npy"));
	assert_run(1, "eval", "--codec", "exp", "--dtype", "f64", P("f32.npy"));
	assert_run(1, "eval", "--codec", "exp", "--repeat", "0", P("f32.npy"));
	assert_run(1, "eval", "--codec", "exp", "--fp8-block", "64", P("f32.npy"));
	assert_run(2, "eval", "--codec", "exp", P("missing.npy"));
}
