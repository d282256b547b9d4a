/* cmd_verify.c - `ibp verify IN.ibp`: structure and checksums at open, then
 * the payload checksums and a decode of every row. */
#include "cli.h"
#include "progress.h"

const char *const help_verify =
	"usage: ibp verify IN.ibp [--threads N]\n"
	"\n"
	"Check IN.ibp completely: the header, section table, metadata, flags,\n"
	"offsets and their checksums, then the XXH3 checksum of every payload\n"
	"block, then decode every row (ibp, exp-rows) or every block (exp, fp8).\n"
	"Prints 'OK' and exits 0 when all pass; otherwise names the first problem\n"
	"(field, block or row) and exits 2. For the lossy fp8 codec this proves the\n"
	"file intact and decodable; the original values are not in the file to\n"
	"compare with.\n"
	"\n"
	"options:\n"
	"  --threads N   threads (default 0 = all CPUs)\n"
	"  -h, --help    this text\n";

int cmd_verify(int argc, char **argv)
{
	static const int opts[] = {OPT_THREADS, 0};
	const cli_spec_t sp = {"verify", help_verify, opts, "exactly one IN.ibp", 1};
	cli_args_t a = {0};
	int rc = cli_parse_args(&sp, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = a.operands[0];
	int nthreads = a.nthreads;
	if ((rc = cli_check_input(cmd, in, 0)) != EXIT_OK)
		return rc;
	/* The library reports no progress from inside a verify: show elapsed time. */
	progress_t *pg = progress_start("verify", 0);
	progress_step(pg, "opening");
	progress_tick(pg);
	double t0 = cli_now();
	ibp_container_t *ct;
	/* TRUSTED: ibp_container_verify below hashes the payload itself. */
	ibp_status_t s = ibp_container_open(in, IBP_OPEN_MMAP | IBP_OPEN_TRUSTED, &ct);
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
	char rows[48];
	printf("%s: OK: %s (%s decoded), checksums and every %s verified in %.3f s%s\n", in,
	       cli_count(ibp_container_nrows(ct), "row", "rows", rows, sizeof(rows)), cli_bytes(raw, b, sizeof(b)),
	       id == IBP_CODEC_IBP || id == IBP_CODEC_EXP_ROWS ? "row" : id == IBP_CODEC_EXP ? "exp block" : "fp8 stream",
	       t,
	       id == IBP_CODEC_FP8 ? " (lossy codec: decodability checked, values have no reference)" : "");
	ibp_container_close(ct);
	return EXIT_OK;
}
