/* common.c - helpers shared by the subcommands: messages, option values,
 * loading the input array. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_fail_status(const char *cmd, const char *path, ibp_status_t s)
{
	return cli_fail_detail(cmd, path, s, ibp_last_error());
}

int cli_fail_detail(const char *cmd, const char *path, ibp_status_t s, const char *detail)
{
	fprintf(stderr, "ibp %s: ", cmd);
	size_t pl = path ? strlen(path) : 0;
	if (path && !strncmp(detail, path, pl) && !strncmp(detail + pl, ": ", 2)) {
		/* The library already named the file first: move it before the status. */
		fprintf(stderr, "%s: ", path);
		detail += pl + 2;
	} else if (path && !strstr(detail, path)) {
		fprintf(stderr, "%s: ", path);
	}
	/* A detail that already says what went wrong needs no status before it. */
	if (detail[0] && strstr(detail, ibp_status_string(s)))
		fprintf(stderr, "%s", detail);
	else if (detail[0])
		fprintf(stderr, "%s: %s", ibp_status_string(s), detail);
	else
		fprintf(stderr, "%s", ibp_status_string(s));
	fputc('\n', stderr);
	return EXIT_FAIL;
}

int cli_fail(const char *cmd, const char *path, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ibp %s: ", cmd);
	if (path)
		fprintf(stderr, "%s: ", path);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ibp %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'ibp %s --help'.\n", cmd);
	return EXIT_USAGE;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *v)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == '+') {
		cli_usage_error(cmd, "%s needs a non-negative integer, got '%s'", opt, s ? s : "");
		return 1;
	}
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end) {
		cli_usage_error(cmd, "%s needs a non-negative integer, got '%s'", opt, s);
		return 1;
	}
	*v = x;
	return 0;
}

int cli_parse_threads(const char *cmd, const char *s, int *v)
{
	uint64_t x;
	if (cli_parse_u64(cmd, "--threads", s, &x))
		return 1;
	if (x > 4096) {
		cli_usage_error(cmd, "--threads %s is too many (at most 4096; 0 = all CPUs)", s);
		return 1;
	}
	*v = (int)x;
	return 0;
}

int cli_parse_double(const char *cmd, const char *opt, const char *s, double *v)
{
	char *end;
	errno = 0;
	double x = s && *s ? strtod(s, &end) : 0;
	if (!s || !*s || errno || *end || x != x) {
		cli_usage_error(cmd, "%s needs a number, got '%s'", opt, s ? s : "");
		return 1;
	}
	*v = x;
	return 0;
}

int cli_train_option(const char *cmd, int opt, const char *arg, ibp_train_opts_t *o, unsigned *npy_flags)
{
	uint64_t u;
	double d;
	switch (opt) {
	case OPT_CHUNK:
		if (!strcmp(arg, "auto")) {
			o->chunk_bytes = 0;
			return 1;
		}
		if (cli_parse_u64(cmd, "--chunk", arg, &u))
			return -1;
		if (u != 1 && u != 2 && u != 4 && u != 8) {
			cli_usage_error(cmd, "--chunk must be 1, 2, 4, 8 or auto, got '%s'", arg);
			return -1;
		}
		o->chunk_bytes = (unsigned)u;
		return 1;
	case OPT_THRESHOLD:
		if (!strcmp(arg, "auto")) {
			o->threshold = -1;
			return 1;
		}
		if (cli_parse_double(cmd, "--threshold", arg, &d))
			return -1;
		if (d < 0.5 || d > 1.0) {
			cli_usage_error(cmd, "--threshold must be in [0.5, 1] or auto, got '%s'", arg);
			return -1;
		}
		o->threshold = d;
		return 1;
	case OPT_SAMPLE:
		if (!strcmp(arg, "auto")) {
			o->sample = 0;
			return 1;
		}
		if (cli_parse_double(cmd, "--sample", arg, &d))
			return -1;
		if (!(d > 0 && d <= 1.0)) {
			cli_usage_error(cmd, "--sample must be in (0, 1] or auto, got '%s'", arg);
			return -1;
		}
		o->sample = d;
		return 1;
	case OPT_CLUSTERS:
		if (!strcmp(arg, "auto")) {
			o->clusters = 0;
			return 1;
		}
		if (cli_parse_u64(cmd, "--clusters", arg, &u))
			return -1;
		if (u < 1 || u > IBP_MAX_CLUSTERS) {
			cli_usage_error(cmd, "--clusters must be 1..%u or auto, got '%s'", IBP_MAX_CLUSTERS, arg);
			return -1;
		}
		o->clusters = (unsigned)u;
		return 1;
	case OPT_SEED:
		if (cli_parse_u64(cmd, "--seed", arg, &u))
			return -1;
		o->seed = u;
		return 1;
	case OPT_DTYPE:
		/* Other dtypes come from the file; bf16 has no NumPy type of its own. */
		if (!strcmp(arg, "bf16")) {
			*npy_flags |= IBP_NPY_BF16;
			return 1;
		}
		cli_usage_error(cmd, "--dtype must be bf16 (other dtypes are read from the file), got '%s'", arg);
		return -1;
	}
	return 0;
}

void cli_codec_opts_default(cli_codec_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->codec = IBP_CODEC_IBP;
	ibp_exp_opts_default(&o->exp);
	ibp_fp8_opts_default(&o->fp8);
}

int cli_codec_option(const char *cmd, int opt, const char *arg, cli_codec_opts_t *o)
{
	uint64_t u;
	switch (opt) {
	case OPT_CODEC:
		if (!strcmp(arg, "ibp"))
			o->codec = IBP_CODEC_IBP;
		else if (!strcmp(arg, "exp"))
			o->codec = IBP_CODEC_EXP;
		else if (!strcmp(arg, "exp-rows"))
			o->codec = IBP_CODEC_EXP_ROWS;
		else if (!strcmp(arg, "fp8"))
			o->codec = IBP_CODEC_FP8;
		else {
			cli_usage_error(cmd, "--codec must be ibp, exp, exp-rows or fp8, got '%s'", arg);
			return -1;
		}
		return 1;
	case OPT_LOSSY:
		o->lossy = 1;
		return 1;
	case OPT_EXP_TABLE:
		if (!strcmp(arg, "sigma"))
			o->exp.table_mode = IBP_EXP_TABLE_SIGMA;
		else if (!strcmp(arg, "hist"))
			o->exp.table_mode = IBP_EXP_TABLE_HISTOGRAM;
		else if (!strcmp(arg, "rans"))
			o->exp.table_mode = IBP_EXP_TABLE_RANS;
		else {
			cli_usage_error(cmd, "--exp-table must be sigma, hist or rans, got '%s'", arg);
			return -1;
		}
		o->exp_only = "--exp-table";
		return 1;
	case OPT_FP8_FORMAT:
		if (!strcmp(arg, "e4m3"))
			o->fp8.format = IBP_FP8_E4M3;
		else if (!strcmp(arg, "e5m2"))
			o->fp8.format = IBP_FP8_E5M2;
		else {
			cli_usage_error(cmd, "--fp8-format must be e4m3 or e5m2, got '%s'", arg);
			return -1;
		}
		o->fp8_only = "--fp8-format";
		return 1;
	case OPT_FP8_BLOCK:
		if (cli_parse_u64(cmd, "--fp8-block", arg, &u))
			return -1;
		if (u < IBP_FP8_MIN_BLOCK || u > IBP_FP8_MAX_BLOCK || (u & (u - 1)) != 0) {
			cli_usage_error(cmd, "--fp8-block must be a power of two in [%u, %u], got '%s'",
					IBP_FP8_MIN_BLOCK, IBP_FP8_MAX_BLOCK, arg);
			return -1;
		}
		o->fp8.block = (uint32_t)u;
		o->fp8_only = "--fp8-block";
		return 1;
	case OPT_NO_HADAMARD:
		o->fp8.hadamard = 0;
		o->fp8_only = "--no-hadamard";
		return 1;
	case OPT_NO_ADAPTIVE:
		o->fp8.adaptive = 0;
		o->fp8_only = "--no-adaptive";
		return 1;
	}
	return 0;
}

int cli_codec_check(const char *cmd, const cli_codec_opts_t *o)
{
	if (o->exp_only && o->codec != IBP_CODEC_EXP)
		return cli_usage_error(cmd, "%s applies to --codec exp only", o->exp_only);
	if (o->fp8_only && o->codec != IBP_CODEC_FP8)
		return cli_usage_error(cmd, "%s applies to --codec fp8 only", o->fp8_only);
	if (o->lossy && o->codec != IBP_CODEC_FP8)
		return cli_usage_error(cmd, "--lossy applies to --codec fp8 only (the %s codec is lossless)",
				       cli_codec_name(o->codec));
	return EXIT_OK;
}

const char *cli_codec_name(ibp_codec_id_t id)
{
	switch (id) {
	case IBP_CODEC_IBP:
		return "ibp";
	case IBP_CODEC_EXP:
		return "exp";
	case IBP_CODEC_FP8:
		return "fp8";
	case IBP_CODEC_EXP_ROWS:
		return "exp-rows";
	}
	return "unknown";
}

int cli_value_dtype(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_BF16 || dt == IBP_DTYPE_F16 || dt == IBP_DTYPE_F32;
}

int cli_load_rows(const char *cmd, const char *path, unsigned npy_flags, ibp_npy_info_t *info,
		  void **data, uint64_t *nrows, uint64_t *row_bytes)
{
	ibp_status_t s = ibp_npy_load(path, npy_flags, info, data);
	if (s != IBP_OK)
		return cli_fail_status(cmd, path, s);
	int rc = EXIT_OK;
	if ((npy_flags & IBP_NPY_BF16) && info->dtype != IBP_DTYPE_BF16)
		rc = cli_fail(cmd, path, "--dtype bf16 needs a '<u2' or '|V2' array, this one is '%s'",
			      info->descr);
	else if (info->ndim == 0)
		rc = cli_fail(cmd, path, "a 0-dimensional array has no rows");
	else if (info->ndim > IBP_MAX_NDIM)
		rc = cli_fail(cmd, path, "%u dimensions; at most %u are supported", info->ndim, IBP_MAX_NDIM);
	if (rc == EXIT_OK) {
		uint64_t rb = info->elem_bytes;
		for (unsigned i = 1; i < info->ndim; i++)
			rb *= info->shape[i]; /* cannot overflow: the total did not */
		if (info->shape[0] != 0 && rb == 0)
			rc = cli_fail(cmd, path, "rows of 0 bytes (shape has a 0 dimension)");
		else if (rb == 0 || rb > IBP_MAX_ROW_BYTES)
			rc = cli_fail(cmd, path, "row size %llu bytes is not supported",
				      (unsigned long long)rb);
		*nrows = info->shape[0];
		*row_bytes = rb;
	}
	if (rc != EXIT_OK) {
		ibp_npy_free(*data);
		*data = NULL;
	}
	return rc;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_bytes(uint64_t n, char *buf, size_t cap)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double x = (double)n;
	int u = 0;
	while (x >= 1024 && u < 4) {
		x /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, cap, "%.1f %s", x, unit[u]);
	return buf;
}

const char *cli_shape(const uint64_t *shape, unsigned ndim, char *buf, size_t cap)
{
	size_t n = 0;
	n += (size_t)snprintf(buf, cap, "[");
	for (unsigned i = 0; i < ndim && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
	return buf;
}

int cli_print_help(const char *text)
{
	fputs(text, stdout);
	return EXIT_OK;
}

const char *cli_count(uint64_t n, const char *one, const char *many, char *buf, size_t cap)
{
	snprintf(buf, cap, "%llu %s", (unsigned long long)n, n == 1 ? one : many);
	return buf;
}

uint64_t cli_mem_limit(void)
{
	const char *env = getenv("IBP_CLI_MEM_LIMIT");
	if (env && *env) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(env, &end, 10);
		if (!errno && !*end)
			return v;
	}
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psize <= 0)
		return 1ull << 32; /* unknown: 4 GiB */
	return (uint64_t)pages * (uint64_t)psize / 2;
}
