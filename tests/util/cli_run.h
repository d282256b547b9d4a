/* cli_run.h - running the built `ibp` CLI from a Criterion suite: a fresh
 * temporary directory per test (setup/teardown), paths inside it (P), and
 * run() that executes IBP_BINARY_DIR/bin/ibp with its stdout and stderr
 * captured into out_buf / err_buf (kept outside the directory, so a listing
 * of it shows only what ibp left). Define CLI_RUN_TAG ("cli", "safety", ...)
 * before including; one copy per test program (static inline). */
#ifndef IBP_TEST_CLI_RUN_H
#define IBP_TEST_CLI_RUN_H

#include "tmproot.h"
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLI_RUN_TAG
#error "define CLI_RUN_TAG before including cli_run.h"
#endif

#define IBP_EXE IBP_BINARY_DIR "/bin/ibp"

static char dir[96];
static char out_buf[1 << 16], err_buf[1 << 16];

static inline void setup(void)
{
	snprintf(dir, sizeof(dir), "%s/ibp_test_" CLI_RUN_TAG "_XXXXXX", tu_tmp_root());
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(access(IBP_EXE, X_OK), 0, "%s is missing: build the ibp_cli target first", IBP_EXE);
}

static inline void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

static inline const char *P(const char *name)
{
	static char bufs[8][256];
	static int i;
	char *b = bufs[i++ % 8];
	snprintf(b, 256, "%s/%s", dir, name);
	return b;
}

static inline void slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
	buf[n] = '\0';
	if (f)
		fclose(f);
}

/* Runs ibp with the NULL-terminated arguments (stdout, stderr outside the
 * test directory so that listing it sees only what ibp left). Returns the
 * exit status, -1 if it died on a signal. */
static inline int run(const char *arg0, ...)
{
	const char *argv[32];
	int n = 0;
	argv[n++] = IBP_EXE;
	va_list ap;
	va_start(ap, arg0);
	for (const char *a = arg0; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	char so[256], se[256];
	snprintf(so, sizeof(so), "%s.stdout", dir);
	snprintf(se, sizeof(se), "%s.stderr", dir);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fo = open(so, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fe = open(se, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fo < 0 || fe < 0)
			_exit(127);
		dup2(fo, 1);
		dup2(fe, 2);
		execv(IBP_EXE, (char *const *)argv);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	slurp(so, out_buf, sizeof(out_buf));
	slurp(se, err_buf, sizeof(err_buf));
	unlink(so);
	unlink(se);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define assert_run(expect, ...)                                                                     \
	do {                                                                                        \
		int rc_ = run(__VA_ARGS__, NULL);                                                   \
		cr_assert_eq(rc_, (expect), "exit %d (want %d)\nstdout: %s\nstderr: %s", rc_, (expect), \
			     out_buf, err_buf);                                                     \
	} while (0)

#endif /* IBP_TEST_CLI_RUN_H */
