/* test_cli_faults.c - the `ibp` command on containers whose checksums are
 * right but whose rows do not decode (written with the library's writer):
 * gather and unpack fail with exit 2 and leave no output, verify says why. */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ibp.h"
#include "bitpack/codec_internal.h"
#include "testutil.h"

#define IBP_EXE IBP_BINARY_DIR "/bin/ibp"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "%s/ibp_test_clif_XXXXXX", tu_tmp_root());
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(access(IBP_EXE, X_OK), 0, "%s is missing: build the ibp_cli target first", IBP_EXE);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

static const char *P(const char *name)
{
	static char bufs[6][160];
	static int i;
	char *b = bufs[i++ % 6];
	snprintf(b, 160, "%s/%s", dir, name);
	return b;
}

/* Runs ibp with the NULL-terminated arguments, output to dir/.log;
 * returns the exit status (-1 on a signal). */
static int run(const char *a0, ...)
{
	const char *argv[16] = { IBP_EXE, a0 };
	int n = 2;
	va_list ap;
	va_start(ap, a0);
	for (const char *a; n < 15 && (a = va_arg(ap, const char *)); )
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(P(".log"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(IBP_EXE, (char *const *)argv);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TestSuite(cli_faults, .init = setup, .fini = teardown, .timeout = 120);

/* Bug caught: cmd_gather writing the slice after IBP_ERR_CORRUPT and
 * exiting 0. Row k of 200 is spoiled (another mode read from the same
 * bytes no longer fills its extent); the ids text lists it in the middle. */
Test(cli_faults, gather_corrupt_row_fails)
{
	const uint64_t n = 200, R = 64;
	tu_rng_t r;
	tu_rng_seed(&r, 5);
	uint8_t *rows = tu_xcalloc(n * R);
	tu_gen_rows(&r, TU_F32_SMOOTH, rows, n, R);
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.chunk_bytes = 4;
	o.nthreads = 1;
	ibp_codec_t *c = NULL;
	cr_assert_eq(ibp_codec_train(rows, n, R, &o, &c), IBP_OK, "%s", ibp_last_error());
	uint64_t cap = ibp_batch_bound(c, n);
	uint8_t *pay = tu_xcalloc(cap), *flags = tu_xcalloc(n), *cl = tu_xcalloc(n), *tmp = tu_xcalloc(R);
	uint64_t *off = tu_xcalloc((n + 1) * 8);
	cr_assert_eq(ibp_encode_batch(c, rows, n, pay, cap, off, flags, cl, 1), IBP_OK);
	uint64_t k = n;
	for (uint64_t i = 100; i < n && k == n; i++)
		for (uint8_t m = 1; m <= 3 && k == n && (flags[i] & 3); m++) {
			uint64_t used = 0;
			if (m == (flags[i] & 3))
				continue;
			ibp_status_t st = ibpi_decode_row_ext(c, pay + off[i], off[i + 1] - off[i], m, cl[i], tmp, &used);
			if (st != IBP_OK || used != off[i + 1] - off[i]) {
				flags[i] = m;
				k = i;
			}
		}
	cr_assert_lt(k, n, "no row to spoil");
	uint64_t shape[2] = { n, R };
	cr_assert_eq(ibp_container_write(P("bad.ibp"), c, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, pay, off[n], off,
					 flags, cl),
		     IBP_OK, "%s", ibp_last_error());
	char ids[64];
	snprintf(ids, sizeof(ids), "1 2 %llu 3\n", (unsigned long long)k);
	FILE *f = fopen(P("ids.txt"), "w");
	cr_assert_not_null(f);
	fputs(ids, f);
	fclose(f);
	cr_assert_eq(run("gather", P("bad.ibp"), "--ids", P("ids.txt"), "--out", P("g.npy"), NULL), 2);
	cr_assert_neq(access(P("g.npy"), F_OK), 0, "no output after a corrupt row");
	cr_assert_eq(run("gather", P("bad.ibp"), "--ids", P("ids.txt"), "--out", P("g.npy"), "--threads", "2",
			 NULL), 2);
	cr_assert_neq(access(P("g.npy"), F_OK), 0);
	cr_assert_eq(run("unpack", P("bad.ibp"), P("u.npy"), NULL), 2);
	cr_assert_neq(access(P("u.npy"), F_OK), 0);
	cr_assert_eq(run("verify", P("bad.ibp"), NULL), 2);
	/* the rows around it are fine */
	f = fopen(P("ok.txt"), "w");
	cr_assert_not_null(f);
	fprintf(f, "1 %llu\n", (unsigned long long)(k + 1));
	fclose(f);
	cr_assert_eq(run("gather", P("bad.ibp"), "--ids", P("ok.txt"), "--out", P("g.npy"), NULL), 0);
	ibp_npy_info_t info;
	void *d = NULL;
	cr_assert_eq(ibp_npy_load(P("g.npy"), 0, &info, &d), IBP_OK);
	cr_assert_eq(info.shape[0], 2);
	cr_assert_arr_eq(d, rows + R, R);
	cr_assert_arr_eq((uint8_t *)d + R, rows + (k + 1) * R, R);
	ibp_npy_free(d);
	free(off);
	free(tmp);
	free(cl);
	free(flags);
	free(pay);
	free(rows);
	ibp_codec_free(c);
}
