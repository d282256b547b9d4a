/* cmd_unpack.c - `ibp unpack IN.ibp OUT.npy`: decode every row back into
 * an .npy with the original dtype and shape. */
#include <string.h>

#include "cli.h"

const char *const help_unpack =
	"usage: ibp unpack IN.ibp OUT.npy [--threads N]\n"
	"\n"
	"Decode every row of IN.ibp into OUT.npy (format 1.0, C order), with the\n"
	"packed shape and dtype. For the lossless codecs (ibp, exp) the data is\n"
	"byte-identical to what was packed; for fp8 (lossy) it is the FP8\n"
	"reconstruction in the original dtype. bfloat16 has no NumPy type and is\n"
	"written as '<u2' (the raw bit patterns; view them with ml_dtypes.bfloat16,\n"
	"or widen them to float32 with (a.astype(np.uint32) << 16).view(np.float32)).\n"
	"\n"
	"options:\n"
	"  --threads N   decode threads (default 0 = all CPUs)\n"
	"  -h, --help    this text\n";

int cmd_unpack(int argc, char **argv)
{
	static const struct option lo[] = {
		{"threads", required_argument, 0, OPT_THREADS},
		{"help", no_argument, 0, OPT_HELP},
		{0, 0, 0, 0},
	};
	const char *cmd = "unpack";
	int nthreads = 0, c;
	optind = 1;
	while ((c = cli_getopt(cmd, argc, argv, lo)) != -1) {
		switch (c) {
		case -2: return EXIT_USAGE;
		case OPT_HELP: return cli_print_help(help_unpack);
		case OPT_THREADS:
			if (cli_parse_threads(cmd, optarg, &nthreads))
				return EXIT_USAGE;
			break;
		default: return cli_usage_error(cmd, "unexpected option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 2)
		return cli_usage_error(cmd, "needs IN.ibp and OUT.npy");
	const char *in = argv[optind], *out = argv[optind + 1];
	ibp_store_t *st;
	ibp_status_t s = ibp_store_open(in, IBP_OPEN_MMAP, &st);
	if (s != IBP_OK)
		return cli_fail_status(cmd, in, s);
	double secs = 0;
	uint64_t n = ibp_store_nrows(st);
	int rc = cli_decode_to_npy(cmd, st, NULL, n, out, nthreads, &secs);
	if (rc == EXIT_OK) {
		char b[32], sh[256];
		uint64_t bytes = n * ibp_store_row_bytes(st);
		printf("%s -> %s: %s %s (%s) in %.3f s (%.2f GB/s)%s\n", in, out,
		       ibp_dtype_name(ibp_store_dtype(st)), cli_shape(ibp_store_shape(st), ibp_store_ndim(st), sh, sizeof(sh)),
		       cli_bytes(bytes, b, sizeof(b)), secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0,
		       ibp_container_lossy(ibp_store_container(st)) ? ", lossy fp8 values" : "");
	}
	ibp_store_close(st);
	return rc;
}
