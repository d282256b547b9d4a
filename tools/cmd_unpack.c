/* cmd_unpack.c - `ibp unpack IN.ibp OUT.npy`: decode every row back into
 * an .npy with the original dtype and shape. */
#include <string.h>

#include "cli.h"

const char *const help_unpack =
	"usage: ibp unpack IN.ibp OUT.npy [--threads N]\n"
	"\n"
	"Decode every row of IN.ibp into OUT.npy (format 1.0, C order), with the\n"
	"packed shape and dtype. For the lossless codecs (ibp, exp, exp-rows) the\n"
	"data is byte-identical to what was packed; for fp8 (lossy) it is the FP8\n"
	"reconstruction in the original dtype. bfloat16 has no NumPy type and is\n"
	"written as '<u2' (the raw bit patterns; view them with ml_dtypes.bfloat16,\n"
	"or widen them to float32 with (a.astype(np.uint32) << 16).view(np.float32)).\n"
	"OUT.npy is written to a temporary file beside it and renamed over it when\n"
	"complete, so a failure (exit 2, e.g. corrupt data) leaves an old OUT.npy\n"
	"as it was; an OUT.npy that is IN.ibp or not a regular file is refused.\n"
	"\n"
	"options:\n"
	"  --threads N   decode threads (default 0 = all CPUs)\n"
	"  -h, --help    this text\n";

int cmd_unpack(int argc, char **argv)
{
	static const int opts[] = {OPT_THREADS, 0};
	const cli_spec_t sp = {"unpack", help_unpack, opts, "IN.ibp and OUT.npy", 2};
	cli_args_t a = {0};
	int rc = cli_parse_args(&sp, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = a.operands[0], *out_path = a.operands[1];
	cli_out_t out;
	ibp_store_t *st;
	if ((rc = cli_open_for_decode(cmd, &in, 1, out_path, &out, &st)) != EXIT_OK)
		return rc;
	double secs = 0;
	uint64_t n = ibp_store_nrows(st);
	rc = cli_decode_to_npy(cmd, st, NULL, n, &out, a.nthreads, &secs);
	cli_out_close(&out);
	if (rc == EXIT_OK) {
		char b[32], sh[256];
		uint64_t bytes = n * ibp_store_row_bytes(st);
		printf("%s -> %s: %s %s (%s) in %.3f s (%.2f GB/s)%s\n", in, out_path,
		       ibp_dtype_name(ibp_store_dtype(st)), cli_shape(ibp_store_shape(st), ibp_store_ndim(st), sh, sizeof(sh)),
		       cli_bytes(bytes, b, sizeof(b)), secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0,
		       ibp_container_lossy(ibp_store_container(st)) ? ", lossy fp8 values" : "");
	}
	ibp_store_close(st);
	return rc;
}
