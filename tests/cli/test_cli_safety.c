/* test_cli_safety.c - the `ibp` CLI never destroys a file, bounds what it
 * allocates and reports errors clearly (issue 9): outputs that are inputs,
 * non-regular targets, failed writes keeping the old target, no temporary
 * files left behind, fail-fast sizes, and the wording of its messages. Runs
 * IBP_BINARY_DIR/bin/ibp like test_cli.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ibp.h"

#define CLI_RUN_TAG "safety"
#include "cli_run.h"

#define assert_err_has(text) cr_assert_not_null(strstr(err_buf, (text)), "stderr lacks '%s': %s", (text), err_buf)

/* rows x cols float32, deterministic, with some variety for the codec. */
static void make_f32(const char *path, uint64_t rows, uint64_t cols)
{
	float *a = malloc(rows * cols * sizeof(float) + 1);
	uint64_t x = 777;
	for (uint64_t i = 0; i < rows * cols; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		a[i] = 1.0f + (float)((x >> 40) & 0xFFF) / 4096.0f;
	}
	uint64_t shape[2] = {rows, cols};
	cr_assert_eq(ibp_npy_write(path, IBP_DTYPE_F32, 2, shape, a), IBP_OK, "%s", ibp_last_error());
	free(a);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* A file's bytes, malloc'ed; *n its size. */
static char *read_all(const char *path, size_t *n)
{
	struct stat st;
	cr_assert_eq(stat(path, &st), 0, "%s", path);
	char *b = malloc((size_t)st.st_size + 1);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	cr_assert_eq(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*n = (size_t)st.st_size;
	return b;
}

static void assert_bytes(const char *path, const char *want, size_t n)
{
	size_t got;
	char *b = read_all(path, &got);
	cr_assert_eq(got, n, "%s: %zu bytes, want %zu", path, got, n);
	cr_assert_eq(memcmp(b, want, n), 0, "%s changed", path);
	free(b);
}

/* The test directory holds exactly the NULL-terminated names (in any
 * order): nothing else, in particular no temporary file. */
static void assert_dir_is(const char *first, ...)
{
	const char *want[32];
	int nw = 0;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && nw < 32; a = va_arg(ap, const char *))
		want[nw++] = a;
	va_end(ap);
	DIR *d = opendir(dir);
	cr_assert_not_null(d);
	int seen = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int found = 0;
		for (int i = 0; i < nw; i++)
			found |= !strcmp(e->d_name, want[i]);
		cr_assert(found, "unexpected file '%s' left in the directory", e->d_name);
		seen++;
	}
	closedir(d);
	cr_assert_eq(seen, nw, "%d files, want %d", seen, nw);
}

/* f.npy (40 x 16 float32) and f.ibp packed from it. */
static void make_pair(void)
{
	make_f32(P("f.npy"), 40, 16);
	assert_run(0, "pack", P("f.npy"), P("f.ibp"));
}

TestSuite(safety, .init = setup, .fini = teardown, .timeout = 300);

/* ---- outputs that are inputs ---------------------------------------------- */

Test(safety, unpack_onto_its_input_is_refused)
{
	make_pair();
	size_t n;
	char *orig = read_all(P("f.ibp"), &n);
	assert_run(1, "unpack", P("f.ibp"), P("f.ibp"));
	assert_err_has("same file as the input");
	assert_bytes(P("f.ibp"), orig, n);
	assert_run(0, "verify", P("f.ibp"));
	assert_dir_is("f.npy", "f.ibp", NULL);
	free(orig);
}

Test(safety, gather_out_onto_an_input_is_refused)
{
	make_pair();
	write_text(P("ids.txt"), "1 2 3\n");
	size_t n, m;
	char *orig = read_all(P("f.ibp"), &n);
	assert_run(1, "gather", P("f.ibp"), "--ids", "random:5", "--out", P("f.ibp"));
	assert_err_has("same file as the input");
	assert_bytes(P("f.ibp"), orig, n);
	/* the ids file is an input too */
	char *ids = read_all(P("ids.txt"), &m);
	assert_run(1, "gather", P("f.ibp"), "--ids", P("ids.txt"), "--out", P("ids.txt"));
	assert_err_has("same file as the input");
	assert_bytes(P("ids.txt"), ids, m);
	assert_dir_is("f.npy", "f.ibp", "ids.txt", NULL);
	free(orig);
	free(ids);
}

Test(safety, output_linked_to_the_input_is_refused)
{
	make_pair();
	size_t n;
	char *orig = read_all(P("f.ibp"), &n);
	cr_assert_eq(symlink(P("f.ibp"), P("link.npy")), 0);
	cr_assert_eq(link(P("f.ibp"), P("hard.npy")), 0);
	assert_run(1, "unpack", P("f.ibp"), P("link.npy"));
	assert_err_has("same file as the input");
	assert_run(1, "gather", P("f.ibp"), "--ids", "random:3", "--out", P("hard.npy"));
	assert_err_has("same file as the input");
	/* and the input given through the link */
	assert_run(1, "unpack", P("link.npy"), P("f.ibp"));
	assert_bytes(P("f.ibp"), orig, n);
	struct stat st;
	cr_assert_eq(lstat(P("link.npy"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the symbolic link was replaced");
	assert_dir_is("f.npy", "f.ibp", "link.npy", "hard.npy", NULL);
	free(orig);
}

Test(safety, pack_onto_its_input_is_refused)
{
	make_f32(P("same.npy"), 10, 8);
	size_t n;
	char *orig = read_all(P("same.npy"), &n);
	assert_run(1, "pack", P("same.npy"), P("same.npy"));
	assert_err_has("same file as the input");
	assert_bytes(P("same.npy"), orig, n);
	assert_run(1, "pack", P("same.npy"), P("same.npy"), "--codec", "exp");
	assert_bytes(P("same.npy"), orig, n);
	assert_dir_is("same.npy", NULL);
	free(orig);
}

/* ---- targets that are not regular files ----------------------------------- */

Test(safety, device_fifo_and_directory_targets_are_refused)
{
	make_pair();
	struct stat before, after;
	cr_assert_eq(stat("/dev/null", &before), 0);
	assert_run(1, "unpack", P("f.ibp"), "/dev/null");
	assert_err_has("character device");
	assert_run(1, "pack", P("f.npy"), "/dev/null");
	assert_run(1, "gather", P("f.ibp"), "--ids", "random:2", "--out", "/dev/null");
	cr_assert_eq(stat("/dev/null", &after), 0, "/dev/null is gone");
	cr_assert(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev, "/dev/null was replaced");

	/* a FIFO: refused without opening it (opening would block: no reader) */
	cr_assert_eq(mkfifo(P("fifo"), 0644), 0);
	assert_run(1, "unpack", P("f.ibp"), P("fifo"));
	assert_err_has("FIFO");
	cr_assert_eq(stat(P("fifo"), &after), 0);
	cr_assert(S_ISFIFO(after.st_mode));

	cr_assert_eq(mkdir(P("sub"), 0755), 0);
	assert_run(1, "pack", P("f.npy"), P("sub"));
	assert_err_has("directory");
	cr_assert_eq(stat(P("sub"), &after), 0);
	cr_assert(S_ISDIR(after.st_mode));
	assert_dir_is("f.npy", "f.ibp", "fifo", "sub", NULL);
}

/* ---- failures keep what was there ------------------------------------------ */

Test(safety, failed_commands_keep_an_existing_output)
{
	make_pair();
	static const char precious[] = "precious bytes, not to be lost\n";
	write_text(P("out.npy"), precious);
	write_text(P("out.ibp"), precious);
	write_text(P("bad.ibp"), "this is not a container at all, just text\n");
	write_text(P("bad.npy"), "neither is this an array\n");
	write_text(P("ids.txt"), "1 2 999\n");

	assert_run(2, "unpack", P("bad.ibp"), P("out.npy"));
	assert_bytes(P("out.npy"), precious, strlen(precious));
	assert_run(2, "gather", P("f.ibp"), "--ids", P("ids.txt"), "--out", P("out.npy"));
	assert_bytes(P("out.npy"), precious, strlen(precious));
	assert_run(2, "gather", P("bad.ibp"), "--ids", "random:3", "--out", P("out.npy"));
	assert_bytes(P("out.npy"), precious, strlen(precious));
	assert_run(2, "pack", P("bad.npy"), P("out.ibp"));
	assert_bytes(P("out.ibp"), precious, strlen(precious));
	assert_run(2, "pack", P("bad.npy"), P("out.ibp"), "--codec", "exp");
	assert_bytes(P("out.ibp"), precious, strlen(precious));
	assert_dir_is("f.npy", "f.ibp", "out.npy", "out.ibp", "bad.ibp", "bad.npy", "ids.txt", NULL);
}

Test(safety, success_replaces_the_target_and_keeps_its_mode)
{
	make_pair();
	write_text(P("out.npy"), "old contents\n");
	cr_assert_eq(chmod(P("out.npy"), 0640), 0);
	assert_run(0, "unpack", P("f.ibp"), P("out.npy"));
	size_t a, b;
	char *x = read_all(P("out.npy"), &a), *y = read_all(P("f.npy"), &b);
	cr_assert(a == b && !memcmp(x, y, a), "unpack did not give back f.npy");
	free(x);
	free(y);
	struct stat st;
	cr_assert_eq(stat(P("out.npy"), &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", st.st_mode & 07777);

	/* a symbolic link as target is written through: the link stays */
	write_text(P("real.npy"), "old\n");
	cr_assert_eq(symlink("real.npy", P("alias.npy")), 0);
	assert_run(0, "gather", P("f.ibp"), "--ids", "random:7", "--out", P("alias.npy"));
	cr_assert_eq(lstat(P("alias.npy"), &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link was replaced by a file");
	ibp_npy_info_t info;
	cr_assert_eq(ibp_npy_read_header(P("real.npy"), 0, &info), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.shape[0], 7);
	/* new files get 0666 & ~umask */
	mode_t um = umask(022);
	assert_run(0, "pack", P("f.npy"), P("new.ibp"));
	umask(um);
	cr_assert_eq(stat(P("new.ibp"), &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0644, "mode %o", st.st_mode & 07777);
	assert_dir_is("f.npy", "f.ibp", "out.npy", "real.npy", "alias.npy", "new.ibp", NULL);
}

/* A container whose payload is damaged where today's decoder already
 * notices (a packed row no longer fills its extent) or the read checksums
 * do: exit 2, the output not written, an old one kept. */
Test(safety, corrupt_payload_exits_2_and_writes_nothing)
{
	make_pair();
	size_t n;
	uint8_t *file = (uint8_t *)read_all(P("f.ibp"), &n);
	ibp_container_t *ct;
	cr_assert_eq(ibp_container_open_memory(file, n, 0, &ct), IBP_OK, "%s", ibp_last_error());
	uint64_t plen;
	const uint8_t *pay = ibp_container_payload(ct, &plen);
	cr_assert(pay >= file && pay + plen <= file + n, "payload is not inside the file buffer");
	uint64_t at = (uint64_t)(pay - file);
	const uint64_t *off = ibp_container_offsets(ct);
	uint64_t nrows = ibp_container_nrows(ct);
	cr_assert_not_null(off);
	/* Every byte of the payload, one at a time, until a read fails (the
	 * first ones are usually enough); each exit 2 must leave nothing. */
	static const char precious[] = "kept\n";
	write_text(P("old.npy"), precious);
	char all[512] = "";
	for (uint64_t r = 0; r < nrows; r++)
		snprintf(all + strlen(all), sizeof(all) - strlen(all), "%llu ", (unsigned long long)r);
	write_text(P("all.txt"), all);
	int failed = 0;
	for (uint64_t i = 0; i < plen && failed < 3; i++) {
		uint8_t *bad = malloc(n);
		memcpy(bad, file, n);
		bad[at + i] ^= 0x5A;
		FILE *f = fopen(P("c.ibp"), "wb");
		cr_assert_not_null(f);
		cr_assert_eq(fwrite(bad, 1, n, f), n);
		fclose(f);
		free(bad);
		int rc = run("unpack", P("c.ibp"), P("new.npy"), NULL);
		cr_assert(rc == 0 || rc == 2, "unpack exit %d: %s", rc, err_buf);
		if (rc == 2) {
			cr_assert_eq(access(P("new.npy"), F_OK), -1, "a failed unpack left new.npy");
			assert_run(2, "unpack", P("c.ibp"), P("old.npy"));
			assert_bytes(P("old.npy"), precious, strlen(precious));
			assert_run(2, "gather", P("c.ibp"), "--ids", P("all.txt"), "--out", P("g.npy"));
			cr_assert_eq(access(P("g.npy"), F_OK), -1, "a failed gather left g.npy");
			failed++;
		} else {
			unlink(P("new.npy"));
		}
	}
	cr_assert_gt(failed, 0, "no payload flip of %llu bytes (%llu rows) made unpack fail",
		     (unsigned long long)plen, (unsigned long long)nrows);
	ibp_container_close(ct);
	free(file);
	assert_dir_is("f.npy", "f.ibp", "c.ibp", "old.npy", "all.txt", NULL);
}

/* ---- bounded resources ------------------------------------------------------ */

Test(safety, huge_random_ids_fail_fast_with_the_limit)
{
	make_pair();
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_run(2, "gather", P("f.ibp"), "--ids", "random:99999999999", "--out", P("o.npy"));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	cr_assert_lt(secs, 5.0, "took %.1f s", secs);
	assert_err_has("would be");
	assert_err_has("free");
	/* rows x row bytes beyond 2^64: refused as well */
	assert_run(2, "gather", P("f.ibp"), "--ids", "random:18446744073709551615", "--out", P("o.npy"));
	assert_err_has("2^64");
	assert_dir_is("f.npy", "f.ibp", NULL);
}

static int run_env(const char *var, const char *val, const char *a0, ...)
{
	const char *argv[16];
	int n = 0;
	va_list ap;
	va_start(ap, a0);
	for (const char *a = a0; a && n < 15; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	setenv(var, val, 1);
	int rc = run(argv[0], n > 1 ? argv[1] : NULL, n > 2 ? argv[2] : NULL, n > 3 ? argv[3] : NULL,
		     n > 4 ? argv[4] : NULL, n > 5 ? argv[5] : NULL, NULL);
	unsetenv(var);
	return rc;
}

Test(safety, ids_beyond_the_memory_limit_are_refused)
{
	make_pair();
	write_text(P("ids.txt"), "0 1 2 3 4 5 6 7 8 9 10 11\n");
	/* 80 bytes hold 10 ids */
	int rc = run_env("IBP_CLI_MEM_LIMIT", "80", "gather", P("f.ibp"), "--ids", P("ids.txt"), "--out", P("o.npy"));
	cr_assert_eq(rc, 2, "exit %d: %s", rc, err_buf);
	assert_err_has("more than 10 ids");
	assert_err_has("limit is 80 B");
	rc = run_env("IBP_CLI_MEM_LIMIT", "96", "gather", P("f.ibp"), "--ids", P("ids.txt"), "--out", P("o.npy"));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, err_buf);
	/* a .npy of ids: refused from its header, before loading */
	int64_t v[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
	uint64_t shape[1] = {12};
	cr_assert_eq(ibp_npy_write(P("ids.npy"), IBP_DTYPE_I64, 1, shape, v), IBP_OK);
	rc = run_env("IBP_CLI_MEM_LIMIT", "100", "gather", P("f.ibp"), "--ids", P("ids.npy"), "--out", P("p.npy"));
	cr_assert_eq(rc, 2, "exit %d: %s", rc, err_buf);
	assert_err_has("12 ids do not fit");
	cr_assert_eq(access(P("p.npy"), F_OK), -1);
}

/* ---- messages --------------------------------------------------------------- */

/* stderr is one line. */
static void assert_one_line(void)
{
	char *nl = strchr(err_buf, '\n');
	cr_assert(nl && nl[1] == '\0', "stderr is not one line: %s", err_buf);
}

Test(safety, ids_messages)
{
	make_pair();
	write_text(P("neg.txt"), "-1 2\n");
	assert_run(2, "gather", P("f.ibp"), "--ids", P("neg.txt"), "--out", P("o.npy"));
	assert_err_has("line 1: '-1' is not a row id");
	assert_one_line();
	write_text(P("ctl.txt"), "3\n4x\t5\n");
	assert_run(2, "gather", P("f.ibp"), "--ids", P("ctl.txt"), "--out", P("o.npy"));
	assert_err_has("line 2: '4x' is not a row id");
	write_text(P("big.txt"), "1\n\n99999999999999999999999\n");
	assert_run(2, "gather", P("f.ibp"), "--ids", P("big.txt"), "--out", P("o.npy"));
	assert_err_has("line 3: id '99999999999999999999999' is too large");
	write_text(P("oor.txt"), "# comment\n5, 40\n");
	assert_run(2, "gather", P("f.ibp"), "--ids", P("oor.txt"), "--out", P("o.npy"));
	assert_err_has("oor.txt: id 40 at position 1 is outside [0, 40)");
	cr_assert_eq(mkdir(P("adir"), 0755), 0);
	assert_run(2, "gather", P("f.ibp"), "--ids", P("adir"), "--out", P("o.npy"));
	assert_err_has("adir: not a regular file (a directory)");
	assert_one_line();
	cr_assert_eq(access(P("o.npy"), F_OK), -1);
}

Test(safety, non_regular_input_is_reported_alike)
{
	cr_assert_eq(mkdir(P("adir"), 0755), 0);
	static const char *const cmds[] = {"info", "verify", "analyze", "bench", "eval"};
	char want[300];
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		assert_run(2, cmds[i], P("adir"));
		snprintf(want, sizeof(want), "ibp %s: %s: not a regular file (a directory)\n", cmds[i], P("adir"));
		cr_assert_str_eq(err_buf, want);
	}
	assert_run(2, "unpack", P("adir"), P("o.npy"));
	snprintf(want, sizeof(want), "ibp unpack: %s: not a regular file (a directory)\n", P("adir"));
	cr_assert_str_eq(err_buf, want);
	assert_run(2, "pack", P("adir"), P("o.ibp"));
	snprintf(want, sizeof(want), "ibp pack: %s: not a regular file (a directory)\n", P("adir"));
	cr_assert_str_eq(err_buf, want);
	assert_run(2, "gather", P("adir"), "--ids", "random:1", "--out", P("o.npy"));
	snprintf(want, sizeof(want), "ibp gather: %s: not a regular file (a directory)\n", P("adir"));
	cr_assert_str_eq(err_buf, want);
	assert_run(2, "info", "/dev/null");
	assert_err_has("/dev/null: not a regular file (a character device)");
	assert_dir_is("adir", NULL);
}

/* Flips one byte in the middle of `name`'s payload, into c.ibp. */
static void corrupt_payload_middle(const char *name)
{
	size_t n;
	uint8_t *file = (uint8_t *)read_all(P(name), &n);
	ibp_container_t *ct;
	cr_assert_eq(ibp_container_open_memory(file, n, 0, &ct), IBP_OK, "%s", ibp_last_error());
	uint64_t plen;
	const uint8_t *pay = ibp_container_payload(ct, &plen);
	uint64_t at = (uint64_t)(pay - file) + plen / 2;
	ibp_container_close(ct);
	cr_assert_gt(plen, 0);
	file[at] ^= 0x01;
	FILE *f = fopen(P("c.ibp"), "wb");
	cr_assert_eq(fwrite(file, 1, n, f), n);
	fclose(f);
	free(file);
}

Test(safety, checksum_mismatch_is_said_once_with_a_byte_range)
{
	/* several MiB of payload: the checksums cover it in blocks, and the
	 * message names the block's bytes, start and end */
	make_f32(P("big.npy"), 40000, 64);
	assert_run(0, "pack", P("big.npy"), P("big.ibp"));
	corrupt_payload_middle("big.ibp");
	static const char *const cmds[] = {"verify", "unpack", "gather"};
	for (int i = 0; i < 3; i++) {
		if (i == 0)
			assert_run(2, "verify", P("c.ibp"));
		else if (i == 1)
			assert_run(2, "unpack", P("c.ibp"), P("o.npy"));
		else
			assert_run(2, "gather", P("c.ibp"), "--ids", "random:10", "--out", P("o.npy"));
		const char *m = strstr(err_buf, "checksum mismatch");
		cr_assert_not_null(m, "%s: %s", cmds[i], err_buf);
		cr_assert_null(strstr(m + 1, "checksum mismatch"), "%s said it twice: %s", cmds[i], err_buf);
		const char *r = strstr(err_buf, "(bytes ");
		cr_assert_not_null(r, "%s: %s", cmds[i], err_buf);
		unsigned long long lo, hi;
		cr_assert_eq(sscanf(r, "(bytes %llu..%llu)", &lo, &hi), 2, "range without an end: %s", err_buf);
		cr_assert_lt(lo, hi);
		assert_one_line();
	}
	cr_assert_eq(access(P("o.npy"), F_OK), -1, "a failed read left its output");
	/* a small container: said once too */
	make_f32(P("s.npy"), 40, 16);
	assert_run(0, "pack", P("s.npy"), P("s.ibp"));
	corrupt_payload_middle("s.ibp");
	assert_run(2, "verify", P("c.ibp"));
	const char *m = strstr(err_buf, "checksum mismatch");
	cr_assert_not_null(m, "%s", err_buf);
	cr_assert_null(strstr(m + 1, "checksum mismatch"), "said twice: %s", err_buf);
}

Test(safety, usage_messages)
{
	make_f32(P("a.npy"), 4, 4);
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), P("c"));
	assert_err_has("too many operands: '");
	assert_run(1, "info", P("a.ibp"), P("b.ibp"));
	assert_err_has("too many operands");
	assert_run(1, "pack", P("a.npy"));
	assert_err_has("needs IN.npy and OUT.ibp");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--lossy");
	assert_err_has("--lossy applies to --codec fp8 only");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--codec", "exp", "--lossy");
	assert_err_has("--lossy applies to --codec fp8 only");
	assert_run(1, "pack", P("a.npy"), P("b.ibp"), "--dtype", "auto");
	assert_err_has("--dtype must be bf16");
	assert_run(1, "analyze", P("a.npy"), "--dtype", "auto");
	assert_dir_is("a.npy", NULL);
}

Test(safety, counts_are_singular_for_one)
{
	/* one row of 8 bytes: one row, and chunk 8 gives one chunk per row */
	make_f32(P("one.npy"), 1, 2);
	assert_run(0, "pack", P("one.npy"), P("one.ibp"), "--chunk", "8");
	assert_run(0, "verify", P("one.ibp"));
	cr_assert_not_null(strstr(out_buf, "OK: 1 row ("), "%s", out_buf);
	assert_run(0, "info", P("one.ibp"));
	cr_assert_not_null(strstr(out_buf, "(1 chunk per row)"), "%s", out_buf);
	assert_run(0, "gather", P("one.ibp"), "--ids", "random:1", "--out", P("g.npy"));
	cr_assert_not_null(strstr(out_buf, "gathered 1 row ("), "%s", out_buf);
	assert_run(0, "analyze", P("one.npy"));
	cr_assert_not_null(strstr(out_buf, "1 row x 8 B"), "%s", out_buf);
	cr_assert_null(strstr(out_buf, "1 rows"), "%s", out_buf);
	assert_run(0, "pack", P("one.npy"), P("e.ibp"), "--codec", "exp", "--block-rows", "1");
	cr_assert_not_null(strstr(out_buf, "1 block of 1 row ("), "%s", out_buf);
	assert_run(0, "info", P("e.ibp"));
	cr_assert_not_null(strstr(out_buf, "of 1 row ("), "%s", out_buf);
}
