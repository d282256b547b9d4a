/* outfile.c - the one way the CLI writes a file (cli.h, cli_out_*): checks
 * first, then a temporary file beside the target, renamed over it only
 * once complete. A failure at any point leaves the target as it was. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"

/* The temporary file to remove if a signal ends the process. */
static char *volatile pending_tmp;

static void on_signal(int sig)
{
	char *t = pending_tmp;
	if (t)
		unlink(t); /* async-signal-safe */
	signal(sig, SIG_DFL);
	raise(sig);
}

static void watch_signals(char *tmp)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
	pending_tmp = tmp;
	if (!tmp)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;
		/* Leave alone a signal the caller of ibp chose to ignore. */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
	}
}

const char *cli_file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISLNK(m)  ? "a symbolic link"
	       : S_ISREG(m)  ? "a regular file"
			     : "not a regular file";
}

int cli_check_input(const char *cmd, const char *path, int streams_ok)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return EXIT_OK; /* the reader reports a missing or unreadable file */
	if (S_ISREG(st.st_mode) || (streams_ok && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))))
		return EXIT_OK;
	return cli_fail(cmd, path, "not a regular file (%s)", cli_file_kind(st.st_mode));
}

int cli_fail_out(const cli_out_t *o, ibp_status_t s)
{
	const char *d = ibp_last_error(), *hit = o->tmp ? strstr(d, o->tmp) : NULL;
	if (!hit)
		return cli_fail_status(o->cmd, o->target, s);
	size_t tl = strlen(o->tmp);
	char buf[1024];
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(hit - d), d, o->target, hit + tl);
	return cli_fail_detail(o->cmd, o->target, s, buf);
}

int cli_out_prepare(cli_out_t *o, const char *cmd, const char *target, const char *const *inputs, int ninputs)
{
	memset(o, 0, sizeof(*o));
	o->cmd = cmd;
	o->target = target;
	struct stat ls, st;
	if (lstat(target, &ls) != 0) {
		if (errno != ENOENT)
			return cli_fail(cmd, target, "cannot use as output: %s", strerror(errno));
		o->path = strdup(target);
	} else if (S_ISLNK(ls.st_mode)) {
		/* Write through the link: replace the file it names, keep the link. */
		if (stat(target, &st) != 0) {
			fprintf(stderr, "ibp %s: %s: output is a symbolic link to a missing file (%s); give the path "
					"to write\n", cmd, target, strerror(errno));
			return EXIT_USAGE;
		}
		o->path = realpath(target, NULL);
	} else {
		o->path = strdup(target);
	}
	if (!o->path)
		return cli_fail(cmd, target, "out of memory");
	if (stat(o->path, &st) == 0) {
		if (!S_ISREG(st.st_mode)) {
			fprintf(stderr, "ibp %s: %s: output is %s, not a regular file; ibp writes regular files only\n",
				cmd, target, cli_file_kind(st.st_mode));
			cli_out_close(o);
			return EXIT_USAGE;
		}
		o->existed = 1;
		o->old = st;
		for (int i = 0; i < ninputs; i++) {
			struct stat is;
			if (inputs[i] && stat(inputs[i], &is) == 0 && is.st_dev == st.st_dev && is.st_ino == st.st_ino) {
				fprintf(stderr, "ibp %s: %s: output is the same file as the input %s; write to another "
						"path\n", cmd, target, inputs[i]);
				cli_out_close(o);
				return EXIT_USAGE;
			}
		}
	}
	return EXIT_OK;
}

/* Directory of o->path, malloc'ed. */
static char *out_dir(const cli_out_t *o)
{
	char *copy = strdup(o->path);
	if (!copy)
		return NULL;
	char *d = strdup(dirname(copy));
	free(copy);
	return d;
}

int cli_out_check_space(cli_out_t *o, uint64_t bytes)
{
	char *dir = out_dir(o);
	struct statvfs vs;
	int ok = !dir || statvfs(dir, &vs) != 0; /* cannot tell: let the write decide */
	free(dir);
	if (ok)
		return EXIT_OK;
	uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
	if (bytes <= avail)
		return EXIT_OK;
	char b1[32], b2[32];
	return cli_fail(o->cmd, o->target, "the output would be %s but its file system has %s free",
			cli_bytes(bytes, b1, sizeof(b1)), cli_bytes(avail, b2, sizeof(b2)));
}

int cli_out_open(cli_out_t *o)
{
	char *dir = out_dir(o), *copy = strdup(o->path);
	size_t cap = (dir ? strlen(dir) : 0) + 300;
	char *tmp = malloc(cap);
	if (!dir || !copy || !tmp) {
		free(dir);
		free(copy);
		free(tmp);
		return cli_fail(o->cmd, o->target, "out of memory");
	}
	/* Hidden, beside the target (same file system, so rename is atomic);
	 * the name is cut so that the library's own suffix still fits NAME_MAX. */
	snprintf(tmp, cap, "%s/.%.200s.ibp-XXXXXX", dir, basename(copy));
	free(dir);
	free(copy);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		int e = errno;
		free(tmp);
		return cli_fail(o->cmd, o->target, "cannot create a temporary file beside it: %s", strerror(e));
	}
	close(fd);
	o->tmp = tmp;
	watch_signals(tmp);
	return EXIT_OK;
}

int cli_out_commit(cli_out_t *o)
{
	if (!o->tmp)
		return cli_fail(o->cmd, o->target, "internal error: no temporary file to commit");
	mode_t mode;
	if (o->existed) {
		mode = o->old.st_mode & 07777;
		if (geteuid() == 0 && chown(o->tmp, o->old.st_uid, o->old.st_gid) != 0) {
			/* best effort: the new file keeps root as its owner */
		}
	} else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	const char *why = NULL;
	int fd = open(o->tmp, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		why = "cannot reopen the temporary file";
	else if (fsync(fd) != 0)
		why = "fsync failed";
	else if (fchmod(fd, mode) != 0)
		why = "cannot set its mode";
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (!why && rename(o->tmp, o->path) != 0) {
		why = "cannot rename the temporary file over it";
		e = errno;
	}
	if (why) {
		int rc = cli_fail(o->cmd, o->target, "%s: %s", why, strerror(e));
		cli_out_close(o);
		return rc;
	}
	watch_signals(NULL);
	free(o->tmp);
	o->tmp = NULL;
	/* Best effort: make the rename durable; the file itself is complete. */
	char *dir = out_dir(o);
	int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	free(dir);
	return EXIT_OK;
}

void cli_out_close(cli_out_t *o)
{
	if (o->tmp) {
		watch_signals(NULL);
		unlink(o->tmp); /* only the file cli_out_open created */
		free(o->tmp);
		o->tmp = NULL;
	}
	free(o->path);
	o->path = NULL;
}
