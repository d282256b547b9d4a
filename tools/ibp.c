/* ibp.c - `ibp` entry point: global options and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#ifdef IBP_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef IBP_HAVE_LZ4
#include <lz4.h>
#endif

static const struct {
	const char *name;
	cli_cmd_fn fn;
	const char *const *help;
	const char *summary;
} commands[] = {
	{"pack", cmd_pack, &help_pack, "compress an .npy array into an .ibp container"},
	{"unpack", cmd_unpack, &help_unpack, "decompress an .ibp container back to .npy"},
	{"info", cmd_info, &help_info, "show a container's header, ratio and row modes"},
	{"verify", cmd_verify, &help_verify, "check a container's checksums and decode every row"},
	{"analyze", cmd_analyze, &help_analyze, "report bit invariance and predicted sizes of an .npy"},
	{"gather", cmd_gather, &help_gather, "decode selected rows of a container into an .npy"},
	{"bench", cmd_bench, &help_bench, "compare IBP with zstd and lz4 on an .npy"},
	{"eval", cmd_eval, &help_eval, "ratio, speed and error of one codec (ibp, exp, fp8) on an .npy"},
	{"cache-sim", cmd_cache_sim, &help_cache_sim, "simulate the slab cache of compressed rows on a trace"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: ibp COMMAND [ARGS...]\n"
		   "       ibp COMMAND --help | ibp --help | ibp --version\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nexit status: 0 success, 1 usage error, 2 bad or corrupt input or other failure.\n");
}

static void version(void)
{
	printf("ibp %d.%d.%d (libibp %s", IBP_VERSION_MAJOR, IBP_VERSION_MINOR, IBP_VERSION_PATCH,
	       ibp_version_string());
#ifdef IBP_HAVE_ZSTD
	printf(", zstd %s", ZSTD_versionString());
#endif
#ifdef IBP_HAVE_LZ4
	printf(", lz4 %s", LZ4_versionString());
#endif
	printf(")\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		version();
		return EXIT_OK;
	}
	if (!strcmp(cmd, "help")) {
		if (argc < 3) {
			usage(stdout);
			return EXIT_OK;
		}
		cmd = argv[2];
		for (size_t i = 0; i < NCOMMANDS; i++)
			if (!strcmp(cmd, commands[i].name)) {
				fputs(*commands[i].help, stdout);
				return EXIT_OK;
			}
		fprintf(stderr, "ibp: unknown command '%s'\n", cmd);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "ibp: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return EXIT_USAGE;
}
