/* cmd_pack.c - `ibp pack IN.npy OUT.ibp`: train a codec, encode every row,
 * write the container (IBP, the default); or encode with the exponent
 * codec in blocks or row by row, or the FP8 block codec (--codec
 * exp|exp-rows|fp8). IBP encoding goes in slices so a progress line can
 * follow it. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"

const char *const help_pack =
	"usage: ibp pack IN.npy OUT.ibp [options]\n"
	"\n"
	"Compress the array in IN.npy into the container OUT.ibp. Rows are the\n"
	"first dimension; a row is everything else (shape[1] * ... * element size).\n"
	"\n"
	"codec:\n"
	"  --codec ibp|exp|exp-rows|fp8\n"
	"                          ibp (default): Invariant Bit Packing, row by row,\n"
	"                          lossless, any dtype; exp: exponent coding in blocks\n"
	"                          of rows, lossless, bf16/f16/f32; exp-rows: the\n"
	"                          exponent codec row by row (one exponent table for\n"
	"                          the array, each row decoded on its own: random\n"
	"                          gathers, embedding bags), lossless, bf16/f16/f32,\n"
	"                          no options of its own; fp8: FP8 blocks, LOSSY\n"
	"                          (about 1 byte per element), bf16/f16/f32\n"
	"  --lossy                 required with --codec fp8: unpack then gives back\n"
	"                          approximate values (refused with the others)\n"
	"  --exp-table sigma|hist|rans  exp: exponent table from the RMS (default),\n"
	"                          each block's histogram, or rANS-coded exponents\n"
	"                          where smaller (else hist)\n"
	"  --fp8-format e4m3|e5m2  fp8: element format (default e4m3)\n"
	"  --fp8-block N           fp8: scale block, power of two 16..4096 (default 256)\n"
	"  --no-hadamard           fp8: no Walsh-Hadamard rotation (ablation)\n"
	"  --no-adaptive           fp8: no adaptive pre-scale (ablation)\n"
	"  --block-rows N          exp/fp8: rows per block (default: about 4 Mi\n"
	"                          elements); a row is read by decoding its block\n"
	"\n"
	"ibp options:\n"
	"  --chunk 1|2|4|8|auto    chunk size in bytes (default auto: smallest result)\n"
	"  --threshold T|auto      invariance threshold in [0.5, 1] (default auto:\n"
	"                          sweep 0.70 .. 1.00)\n"
	"  --sample F|auto         fraction of rows used for training, (0, 1]\n"
	"  --clusters K|auto       number of Mask/Bitval clusters, 1..64 (default 1)\n"
	"  --seed N                seed of the row sample and k-means (default 0x1B9)\n"
	"  --layout packed|inplace packed: rows back to back (smallest file, default);\n"
	"                          inplace: row i at i * row_bytes (the paper's layout)\n"
	"\n"
	"other options:\n"
	"  --dtype bf16            read a '<u2' or '|V2' array as bfloat16\n"
	"  --threads N             worker threads (default 0 = all CPUs)\n"
	"  -h, --help              this text\n"
	"\n"
	"OUT.ibp is written to a temporary file beside it and renamed over it when\n"
	"complete; an OUT.ibp that is IN.npy or not a regular file is refused.\n"
	"Prints a short summary on stdout. Exit status: 0 ok, 1 usage (also fp8\n"
	"without --lossy), 2 error (also exp, exp-rows or fp8 on a dtype other than\n"
	"bf16, f16, f32).\n";

/* Rows per encode slice: about 64 MiB of input. */
static uint64_t slice_rows(uint64_t row_bytes)
{
	uint64_t r = (64ull << 20) / row_bytes;
	return r ? r : 1;
}

/* --codec exp|exp-rows|fp8: one library call encodes and writes. */
static int pack_values(const char *cmd, const char *in, cli_out_t *out, const cli_codec_opts_t *co,
		       const ibp_npy_info_t *info, const void *data, uint64_t nrows, uint64_t rb,
		       uint64_t block_rows)
{
	const char *cn = cli_codec_name(co->codec);
	if (!cli_value_dtype(info->dtype))
		return cli_fail(cmd, in, "the %s codec takes bf16, f16 or f32 arrays, this one is '%s' (%s); "
				"bfloat16 stored as '<u2' needs --dtype bf16", cn, info->descr,
				ibp_dtype_name(info->dtype));
	/* A block never needs more rows than the array has; more would only make
	 * every reader size its block buffer for rows that do not exist. */
	if (block_rows > nrows)
		block_rows = nrows ? nrows : 1;
	int rc = cli_out_open(out);
	if (rc != EXIT_OK)
		return rc;
	progress_t *pg = progress_start(cmd, 0);
	progress_step(pg, "encoding");
	progress_tick(pg);
	double t0 = cli_now();
	ibp_status_t s;
	if (co->codec == IBP_CODEC_EXP)
		s = ibp_pack_exp(out->tmp, data, info->dtype, info->ndim, info->shape, &co->exp, block_rows);
	else if (co->codec == IBP_CODEC_EXP_ROWS)
		s = ibp_pack_exp_rows(out->tmp, data, info->dtype, info->ndim, info->shape, co->exp.nthreads);
	else
		s = ibp_pack_fp8(out->tmp, data, info->dtype, info->ndim, info->shape, &co->fp8, block_rows);
	double t = cli_now() - t0;
	progress_end(pg);
	if (s != IBP_OK)
		return cli_fail_out(out, s);
	if ((rc = cli_out_commit(out)) != EXIT_OK)
		return rc;
	ibp_container_t *ct;
	s = ibp_container_open(out->path, IBP_OPEN_MMAP, &ct);
	if (s != IBP_OK)
		return cli_fail_out(out, s);
	uint64_t total = nrows * rb, fsize = ibp_container_file_bytes(ct), nb = ibp_container_nblocks(ct);
	char b1[32], b2[32], sh[256];
	printf("%s: %s %s (%s) -> %s: %s, ratio %.3f\n", in, ibp_dtype_name(info->dtype),
	       cli_shape(info->shape, info->ndim, sh, sizeof(sh)), cli_bytes(total, b1, sizeof(b1)), out->target,
	       cli_bytes(fsize, b2, sizeof(b2)), fsize ? (double)total / (double)fsize : 0.0);
	char rows[48], elems[48];
	if (co->codec == IBP_CODEC_EXP_ROWS) {
		printf("  codec exp-rows (lossless), one exponent table; %s, each decoded on its own\n",
		       cli_count(nrows, "row", "rows", rows, sizeof(rows)));
	} else {
		if (co->codec == IBP_CODEC_EXP)
			printf("  codec exp (lossless), table %s; ", co->exp.table_mode == IBP_EXP_TABLE_SIGMA ? "sigma"
								  : co->exp.table_mode == IBP_EXP_TABLE_RANS ? "rans" : "hist");
		else
			printf("  codec fp8 (LOSSY), %s, block %u, Hadamard %s, adaptive %s; ",
			       co->fp8.format == IBP_FP8_E4M3 ? "E4M3" : "E5M2", co->fp8.block,
			       co->fp8.hadamard ? "on" : "off", co->fp8.adaptive ? "on" : "off");
		printf("%llu block%s of %s (%s)\n", (unsigned long long)nb, nb == 1 ? "" : "s",
		       cli_count(ibp_container_block_rows(ct), "row", "rows", rows, sizeof(rows)),
		       cli_count(ibp_container_chunk_elems(ct), "element", "elements", elems, sizeof(elems)));
	}
	printf("  encode and write %.3f s (%.2f GB/s)\n", t, t > 0 ? (double)total / t / 1e9 : 0.0);
	ibp_container_close(ct);
	return EXIT_OK;
}

/* IN's rows, read into memory or mapped. */
typedef struct pack_in {
	void *data;     /* the rows */
	void *map;      /* the whole file when mapped, else NULL (data from ibp_npy_load) */
	uint64_t map_len;
} pack_in_t;

/* Maps IN read-only when it can (the rows stay in the page cache: no copy
 * and no fresh 1 GiB buffer to fault in, ~0.5 s of a 1 GiB pack); returns
 * 0 when the caller should read it instead. The rows are only read. As
 * with IBP_OPEN_MMAP, IN must not be truncated while pack runs. */
static int map_rows(const char *in, unsigned npy_flags, ibp_npy_info_t *info, pack_in_t *pi)
{
	if (ibp_npy_read_header(in, npy_flags, info) != IBP_OK || info->data_bytes == 0 ||
	    info->data_offset % 64 != 0 || info->ndim == 0 || info->ndim > IBP_MAX_NDIM ||
	    ((npy_flags & IBP_NPY_BF16) && info->dtype != IBP_DTYPE_BF16))
		return 0; /* errors and odd cases take cli_load_rows, which reports them */
	int fd = open(in, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	uint64_t len = info->data_offset + info->data_bytes;
	void *m = MAP_FAILED;
	/* the size checked by the header read, again on this descriptor */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == len && len <= SIZE_MAX)
		m = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return 0;
	pi->map = m;
	pi->map_len = len;
	pi->data = (uint8_t *)m + info->data_offset;
	return 1;
}

static void pack_in_free(pack_in_t *pi)
{
	if (pi->map)
		munmap(pi->map, (size_t)pi->map_len);
	else
		ibp_npy_free(pi->data);
	pi->map = pi->data = NULL;
}

/* Loads IN, encodes and writes through `out` (prepared). */
static int pack_file(const char *cmd, const char *in, cli_out_t *out, ibp_train_opts_t o, cli_codec_opts_t co,
		     unsigned npy_flags, ibp_layout_t layout, uint64_t block_rows)
{
	ibp_npy_info_t info;
	pack_in_t pi = {NULL, NULL, 0};
	uint64_t nrows, rb;
	int rc = EXIT_OK;
	if (map_rows(in, npy_flags, &info, &pi)) {
		rb = info.elem_bytes;
		for (unsigned i = 1; i < info.ndim; i++)
			rb *= info.shape[i]; /* cannot overflow: the total did not */
		nrows = info.shape[0];
		if (rb == 0 || rb > IBP_MAX_ROW_BYTES)
			rc = cli_fail(cmd, in, "row size %llu bytes is not supported", (unsigned long long)rb);
	} else {
		rc = cli_load_rows(cmd, in, npy_flags, &info, &pi.data, &nrows, &rb);
	}
	if (rc != EXIT_OK) {
		pack_in_free(&pi);
		return rc;
	}
	const void *data = pi.data;
	if (co.codec != IBP_CODEC_IBP) {
		co.exp.nthreads = co.fp8.nthreads = o.nthreads;
		rc = pack_values(cmd, in, out, &co, &info, data, nrows, rb, block_rows);
		pack_in_free(&pi);
		return rc;
	}

	ibp_codec_t *codec = NULL;
	uint8_t *payload = NULL, *flags = NULL, *clusters = NULL, *tmp = NULL;
	uint64_t *offsets = NULL;
	progress_t *pg = progress_start("pack", 0); /* training reports no progress: elapsed time */
	progress_step(pg, "training");
	progress_tick(pg);
	double t0 = cli_now();
	ibp_status_t s = ibp_codec_train(data, nrows, rb, &o, &codec);
	double t_train = cli_now() - t0;
	progress_end(pg);
	if (s != IBP_OK) {
		rc = cli_fail_status(cmd, in, s);
		goto out;
	}
	unsigned k = ibp_codec_nclusters(codec);
	uint64_t total = nrows * rb; /* = info.data_bytes */
	payload = malloc(total ? total : 1);
	flags = malloc(nrows ? nrows : 1);
	offsets = malloc((nrows + 1) * sizeof(uint64_t));
	if (k > 1)
		clusters = malloc(nrows ? nrows : 1);
	uint64_t slice = slice_rows(rb);
	if (layout == IBP_LAYOUT_INPLACE)
		tmp = malloc(slice * rb);
	if (!payload || !flags || !offsets || (k > 1 && !clusters) || (layout == IBP_LAYOUT_INPLACE && !tmp)) {
		rc = cli_fail(cmd, in, "out of memory (%llu bytes of rows)", (unsigned long long)total);
		goto out;
	}

	pg = progress_start("pack", nrows);
	progress_step(pg, "encoding");
	t0 = cli_now();
	offsets[0] = 0;
	for (uint64_t a = 0; a < nrows; a += slice) {
		uint64_t n = nrows - a < slice ? nrows - a : slice;
		const uint8_t *src = (const uint8_t *)data + a * rb;
		uint64_t base = offsets[a];
		if (layout == IBP_LAYOUT_PACKED) {
			/* Offsets come back relative to the slice; its [0] overwrites
			 * offsets[a] == base, restored below. */
			s = ibp_encode_batch(codec, src, n, payload + base, total - base, offsets + a, flags + a,
					     clusters ? clusters + a : NULL, o.nthreads);
			if (s != IBP_OK)
				break;
			for (uint64_t i = a; i <= a + n; i++)
				offsets[i] += base;
		} else {
			uint64_t *so = malloc((n + 1) * sizeof(uint64_t));
			if (!so) {
				s = IBP_ERR_NOMEM;
				break;
			}
			s = ibp_encode_batch(codec, src, n, tmp, slice * rb, so, flags + a,
					     clusters ? clusters + a : NULL, o.nthreads);
			if (s == IBP_OK) {
				/* Row i at i * row_bytes, zero-filled to the stride. */
				for (uint64_t i = 0; i < n; i++) {
					uint8_t *dst = payload + (a + i) * rb;
					uint64_t len = so[i + 1] - so[i];
					memcpy(dst, tmp + so[i], len);
					memset(dst + len, 0, rb - len);
				}
			}
			free(so);
			if (s != IBP_OK)
				break;
		}
		progress_update(pg, a + n);
	}
	double t_enc = cli_now() - t0;
	progress_end(pg);
	if (s != IBP_OK) {
		rc = s == IBP_ERR_NOMEM && !ibp_last_error()[0] ? cli_fail(cmd, in, "out of memory")
								 : cli_fail_status(cmd, in, s);
		goto out;
	}
	uint64_t plen = layout == IBP_LAYOUT_PACKED ? offsets[nrows] : total;
	if ((rc = cli_out_open(out)) != EXIT_OK)
		goto out;
	s = ibp_container_write(out->tmp, codec, info.dtype, info.ndim, info.shape, layout, payload, plen,
				layout == IBP_LAYOUT_PACKED ? offsets : NULL, flags, clusters);
	if (s != IBP_OK) {
		rc = cli_fail_out(out, s);
		goto out;
	}
	if ((rc = cli_out_commit(out)) != EXIT_OK)
		goto out;

	uint64_t modes[4] = {0, 0, 0, 0};
	for (uint64_t i = 0; i < nrows; i++)
		modes[flags[i] & IBP_ROW_MODE_MASK]++;
	struct stat st;
	uint64_t fsize = stat(out->path, &st) == 0 ? (uint64_t)st.st_size : 0;
	char b1[32], b2[32], sh[256];
	printf("%s: %s %s (%s) -> %s: %s, ratio %.3f\n", in, ibp_dtype_name(info.dtype),
	       cli_shape(info.shape, info.ndim, sh, sizeof(sh)), cli_bytes(total, b1, sizeof(b1)), out->target,
	       cli_bytes(fsize, b2, sizeof(b2)), fsize ? (double)total / (double)fsize : 0.0);
	printf("  chunk %u B, threshold %.2f, %u cluster%s, %s layout; rows: raw %llu, clean %llu, "
	       "bitmap %llu, list %llu\n",
	       ibp_codec_chunk_bytes(codec), ibp_codec_threshold(codec), k, k == 1 ? "" : "s",
	       layout == IBP_LAYOUT_PACKED ? "packed" : "inplace", (unsigned long long)modes[0],
	       (unsigned long long)modes[1], (unsigned long long)modes[2], (unsigned long long)modes[3]);
	printf("  train %.3f s, encode %.3f s (%.2f GB/s)\n", t_train, t_enc,
	       t_enc > 0 ? (double)total / t_enc / 1e9 : 0.0);
out:
	free(tmp);
	free(clusters);
	free(offsets);
	free(flags);
	free(payload);
	ibp_codec_free(codec);
	pack_in_free(&pi);
	return rc;
}

/* pack's own options (the rest are shared: opts.c). */
typedef struct pack_ctx {
	ibp_layout_t layout;
	uint64_t block_rows;
} pack_ctx_t;

static int pack_option(void *ctx, int code, const char *arg)
{
	pack_ctx_t *p = ctx;
	if (code == OPT_LAYOUT) {
		if (!strcmp(arg, "packed"))
			p->layout = IBP_LAYOUT_PACKED;
		else if (!strcmp(arg, "inplace"))
			p->layout = IBP_LAYOUT_INPLACE;
		else {
			cli_usage_error("pack", "--layout must be packed or inplace, got '%s'", arg);
			return -1;
		}
		return 1;
	}
	if (code == OPT_BLOCK_ROWS) {
		if (cli_parse_u64("pack", "--block-rows", arg, &p->block_rows))
			return -1;
		if (p->block_rows == 0) {
			cli_usage_error("pack", "--block-rows must be at least 1");
			return -1;
		}
		return 1;
	}
	return 0;
}

int cmd_pack(int argc, char **argv)
{
	static const int opts[] = {CLI_OPTS_TRAIN, OPT_LAYOUT, OPT_DTYPE, OPT_THREADS, CLI_OPTS_CODEC,
				   OPT_LOSSY, OPT_BLOCK_ROWS, 0};
	const cli_spec_t sp = {"pack", help_pack, opts, "IN.npy and OUT.ibp", 2};
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	cli_codec_opts_t co;
	cli_codec_opts_default(&co);
	pack_ctx_t pc = {IBP_LAYOUT_PACKED, 0};
	cli_args_t a = {.train = &o, .codec = &co, .other = pack_option, .ctx = &pc};
	int rc = cli_parse_args(&sp, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd;
	o.nthreads = a.nthreads;
	/* The IBP-only option given last names the usage error. */
	static const int ibp_opts[] = {CLI_OPTS_TRAIN, OPT_LAYOUT};
	const char *ibp_only = NULL;
	unsigned last = 0;
	for (size_t i = 0; i < sizeof(ibp_opts) / sizeof(ibp_opts[0]); i++) {
		int c = ibp_opts[i];
		if (a.seen[c - OPT_FIRST] > last && (c != OPT_LAYOUT || pc.layout == IBP_LAYOUT_INPLACE)) {
			last = a.seen[c - OPT_FIRST];
			ibp_only = c == OPT_LAYOUT ? "--layout inplace" : cli_opt_name(c);
		}
	}
	if (cli_codec_check(cmd, &co) != EXIT_OK)
		return EXIT_USAGE;
	if (co.codec != IBP_CODEC_IBP && ibp_only)
		return cli_usage_error(cmd, "%s applies to --codec ibp only", ibp_only);
	if ((co.codec == IBP_CODEC_IBP || co.codec == IBP_CODEC_EXP_ROWS) && pc.block_rows)
		return cli_usage_error(cmd, "--block-rows applies to --codec exp and fp8 only");
	if (co.codec == IBP_CODEC_FP8 && !co.lossy)
		return cli_usage_error(cmd, "--codec fp8 is lossy (unpack gives back approximate values); "
				       "add --lossy to accept that");
	const char *in = a.operands[0];
	cli_out_t out;
	rc = cli_out_prepare(&out, cmd, a.operands[1], &in, 1);
	if (rc == EXIT_OK)
		rc = cli_check_input(cmd, in, 0);
	if (rc == EXIT_OK)
		rc = pack_file(cmd, in, &out, o, co, a.npy_flags, pc.layout, pc.block_rows);
	cli_out_close(&out);
	return rc;
}
