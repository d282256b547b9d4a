/* cmd_verify.c - `ibp verify IN.ibp`: structure and checksums at open, then
 * the payload checksums and a decode of every row. */
#include "cli.h"
#include "progress.h"

const char *const help_verify =
	"usage: ibp verify IN.ibp [--threads N]\n"
	"\n"
	"Check IN.ibp completely: the header, section table, metadata, flags,\n"
	"offsets and their checksums, then the XXH3 checksum of every payload\n"
	"block, then decode every row (ibp) or every block (exp, fp8). Prints 'OK'\n"
	"and exits 0 when all pass; otherwise names the first problem (field, block\n"
	"or row) and exits 2. For the lossy fp8 codec this proves the file intact\n"
	"and decodable; the original values are not in the file to compare with.\n"
	"\n"
	"options:\n"
	"  --threads N   threads (default 0 = all CPUs)\n"
	"  -h, --help    this text\n";

int cmd_verify(int argc, char **argv)
{
	static const struct option lo[] = {
		{"threads", required_argument, 0, OPT_THREADS},
		{"help", no_argument, 0, OPT_HELP},
		{0, 0, 0, 0},
	};
	const char *cmd = "verify";
	int nthreads = 0, c;
	optind = 1;
	while ((c = cli_getopt(cmd, argc, argv, lo)) != -1) {
		switch (c) {
		case -2: return EXIT_USAGE;
		case OPT_HELP: return cli_print_help(help_verify);
		case OPT_THREADS:
			if (cli_parse_threads(cmd, optarg, &nthreads))
				return EXIT_USAGE;
			break;
		default: return cli_usage_error(cmd, "unexpected option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(cmd, "needs exactly one IN.ibp");
	const char *in = argv[optind];
	/* The library reports no progress from inside a verify: show elapsed time. */
	progress_t *pg = progress_start("verify", 0);
	progress_step(pg, "opening");
	progress_tick(pg);
	double t0 = cli_now();
	ibp_container_t *ct;
	ibp_status_t s = ibp_container_open(in, IBP_OPEN_MMAP, &ct);
	if (s != IBP_OK) {
		progress_end(pg);
		return cli_fail_status(cmd, in, s);
	}
	progress_step(pg, "checksums and decode");
	s = ibp_container_verify(ct, nthreads);
	double t = cli_now() - t0;
	progress_end(pg);
	if (s != IBP_OK) {
		ibp_container_close(ct);
		return cli_fail_status(cmd, in, s);
	}
	char b[32];
	uint64_t raw = ibp_container_nrows(ct) * ibp_container_row_bytes(ct);
	ibp_codec_id_t id = ibp_container_codec_id(ct);
	printf("%s: OK: %llu rows (%s decoded), checksums and every %s verified in %.3f s%s\n", in,
	       (unsigned long long)ibp_container_nrows(ct), cli_bytes(raw, b, sizeof(b)),
	       id == IBP_CODEC_IBP ? "row" : id == IBP_CODEC_EXP ? "exp block" : "fp8 stream", t,
	       id == IBP_CODEC_FP8 ? " (lossy codec: decodability checked, values have no reference)" : "");
	ibp_container_close(ct);
	return EXIT_OK;
}
