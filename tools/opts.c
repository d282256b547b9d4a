/* opts.c - the CLI's option parser: one table names every option once;
 * a command lists the codes it takes (cli_spec_t) and gets them parsed,
 * shared ones (training, codec, --threads, --json, --help) handled here. */
#include <string.h>

#include "cli.h"

static const struct {
	const char *name;
	int has_arg;
} table[CLI_NOPTS] = {
	[OPT_CHUNK - OPT_FIRST] = {"chunk", required_argument},
	[OPT_THRESHOLD - OPT_FIRST] = {"threshold", required_argument},
	[OPT_SAMPLE - OPT_FIRST] = {"sample", required_argument},
	[OPT_CLUSTERS - OPT_FIRST] = {"clusters", required_argument},
	[OPT_SEED - OPT_FIRST] = {"seed", required_argument},
	[OPT_THREADS - OPT_FIRST] = {"threads", required_argument},
	[OPT_DTYPE - OPT_FIRST] = {"dtype", required_argument},
	[OPT_LAYOUT - OPT_FIRST] = {"layout", required_argument},
	[OPT_JSON - OPT_FIRST] = {"json", no_argument},
	[OPT_IDS - OPT_FIRST] = {"ids", required_argument},
	[OPT_OUT - OPT_FIRST] = {"out", required_argument},
	[OPT_HELP - OPT_FIRST] = {"help", no_argument},
	[OPT_REPEAT - OPT_FIRST] = {"repeat", required_argument},
	[OPT_MAX_MB - OPT_FIRST] = {"max-mb", required_argument},
	[OPT_CODEC - OPT_FIRST] = {"codec", required_argument},
	[OPT_LOSSY - OPT_FIRST] = {"lossy", no_argument},
	[OPT_EXP_TABLE - OPT_FIRST] = {"exp-table", required_argument},
	[OPT_FP8_FORMAT - OPT_FIRST] = {"fp8-format", required_argument},
	[OPT_FP8_BLOCK - OPT_FIRST] = {"fp8-block", required_argument},
	[OPT_NO_HADAMARD - OPT_FIRST] = {"no-hadamard", no_argument},
	[OPT_NO_ADAPTIVE - OPT_FIRST] = {"no-adaptive", no_argument},
	[OPT_BLOCK_ROWS - OPT_FIRST] = {"block-rows", required_argument},
	[OPT_TRACE - OPT_FIRST] = {"trace", required_argument},
	[OPT_CAPACITY - OPT_FIRST] = {"capacity", required_argument},
	[OPT_POLICY - OPT_FIRST] = {"policy", required_argument},
	[OPT_BATCH - OPT_FIRST] = {"batch", required_argument},
	[OPT_CLASS_STEP - OPT_FIRST] = {"class-step", required_argument},
};

const char *cli_opt_name(int code)
{
	static char buf[CLI_NOPTS][24];
	if (code < OPT_FIRST || code >= OPT_END || !table[code - OPT_FIRST].name)
		return "?";
	char *b = buf[code - OPT_FIRST];
	snprintf(b, sizeof(buf[0]), "--%s", table[code - OPT_FIRST].name);
	return b;
}

/* One option for the shared handlers: 1 handled, 0 not theirs, -1 error. */
static int shared_option(const char *cmd, cli_args_t *a, int c, const char *arg)
{
	switch (c) {
	case OPT_THREADS:
		return cli_parse_threads(cmd, arg, &a->nthreads) ? -1 : 1;
	case OPT_JSON:
		a->json = 1;
		return 1;
	}
	if (a->codec) {
		int r = cli_codec_option(cmd, c, arg, a->codec);
		if (r)
			return r;
	}
	if (a->train)
		return cli_train_option(cmd, c, arg, a->train, &a->npy_flags);
	return 0;
}

int cli_parse_args(const cli_spec_t *spec, cli_args_t *a, int argc, char **argv)
{
	const char *cmd = spec->cmd;
	struct option lo[CLI_NOPTS + 2];
	int n = 0;
	for (const int *p = spec->opts; *p && n < CLI_NOPTS; p++) {
		int i = *p - OPT_FIRST;
		lo[n++] = (struct option){table[i].name, table[i].has_arg, 0, *p};
	}
	lo[n++] = (struct option){"help", no_argument, 0, OPT_HELP};
	lo[n] = (struct option){0, 0, 0, 0};
	unsigned order = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		if (c == 'h' || c == OPT_HELP)
			return cli_print_help(spec->help);
		if (c == '?') {
			if (optopt)
				return cli_usage_error(cmd, "unknown option '-%c'", optopt);
			return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
		}
		if (c == ':')
			return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
		int r = a->other ? a->other(a->ctx, c, optarg) : 0;
		if (r == 0)
			r = shared_option(cmd, a, c, optarg);
		if (r < 0)
			return EXIT_USAGE;
		if (r == 0) /* listed in spec->opts but nobody takes it: a bug */
			return cli_usage_error(cmd, "unexpected option '%s'", argv[optind - 1]);
		a->seen[c - OPT_FIRST] = ++order;
	}
	int have = argc - optind;
	if (have < spec->noperands)
		return cli_usage_error(cmd, "needs %s", spec->needs);
	if (have > spec->noperands)
		return cli_usage_error(cmd, "too many operands: '%s' (needs %s)", argv[optind + spec->noperands],
				       spec->needs);
	a->operands = argv + optind;
	return CLI_PARSED;
}
