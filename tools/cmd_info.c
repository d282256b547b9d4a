/* cmd_info.c - `ibp info IN.ibp [--json]`: what a container holds. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"

const char *const help_info =
	"usage: ibp info IN.ibp [--json]\n"
	"\n"
	"Show IN.ibp's header (format version, codec, layout, dtype, shape), its\n"
	"sizes and compression ratio, and the codec's parameters: for ibp the chunk\n"
	"size, clusters, threshold, Xvals and how many rows use each mode (raw,\n"
	"clean, bitmap, list); for exp the table mode and blocks; for exp-rows\n"
	"the rows (one exponent table, each row on its own); for fp8 (lossy)\n"
	"the format, scale block, Hadamard/adaptive switches and streams. Opening\n"
	"checks the structure and the metadata checksums; `ibp verify` checks the\n"
	"payload.\n"
	"\n"
	"options:\n"
	"  --json        print one JSON object on stdout instead of text\n"
	"  -h, --help    this text\n";

static const char *mode_names[4] = {"raw", "clean", "bitmap", "list"};

/* Opens the --json object with the keys every container has, file ... shape. */
static void json_head(json_t *j, const char *in, ibp_container_t *ct, const char *layout)
{
	json_init(j, stdout);
	json_begin_object(j);
	json_kv_string(j, "file", in);
	json_kv_uint(j, "file_bytes", ibp_container_file_bytes(ct));
	json_key(j, "format_version");
	json_begin_array(j);
	json_uint(j, ibp_container_version_major(ct));
	json_uint(j, ibp_container_version_minor(ct));
	json_end_array(j);
	json_kv_string(j, "codec", cli_codec_name(ibp_container_codec_id(ct)));
	json_kv_bool(j, "lossy", ibp_container_lossy(ct));
	json_kv_string(j, "layout", layout);
	json_kv_string(j, "dtype", ibp_dtype_name(ibp_container_dtype(ct)));
	json_kv_shape(j, "shape", ibp_container_shape(ct), ibp_container_ndim(ct));
}

/* exp and fp8 containers: blocks of rows, no per-row metadata; exp-rows:
 * one exponent table, a slot per row (K escape bytes), no blocks. */
static int info_values(const char *in, ibp_container_t *ct, int as_json)
{
	uint64_t nrows = ibp_container_nrows(ct), rb = ibp_container_row_bytes(ct);
	uint64_t raw = nrows * rb, fsize = ibp_container_file_bytes(ct), plen = 0;
	ibp_container_payload(ct, &plen);
	double ratio = fsize ? (double)raw / (double)fsize : 0, pratio = plen ? (double)raw / (double)plen : 0;
	ibp_codec_id_t id = ibp_container_codec_id(ct);
	unsigned ndim = ibp_container_ndim(ct);
	const uint64_t *shape = ibp_container_shape(ct);
	uint64_t nb = ibp_container_nblocks(ct), br = ibp_container_block_rows(ct);
	uint64_t ce = ibp_container_chunk_elems(ct);
	ibp_fp8_opts_t fo;
	ibp_fp8_opts_default(&fo);
	if (id == IBP_CODEC_FP8)
		ibp_container_fp8_opts(ct, &fo);
	const char *table = ibp_container_exp_table_mode(ct) == IBP_EXP_TABLE_SIGMA ? "sigma"
			    : ibp_container_exp_table_mode(ct) == IBP_EXP_TABLE_HISTOGRAM ? "hist"
			    : ibp_container_exp_table_mode(ct) == IBP_EXP_TABLE_RANS ? "rans" : "given";
	const char *fmt = fo.format == IBP_FP8_E4M3 ? "e4m3" : "e5m2";
	/* exp-rows: the rows' slot size (row 0's extent) and the overflow area after the slots */
	uint64_t slot = 0, ovf = 0;
	if (id == IBP_CODEC_EXP_ROWS && nrows > 0) {
		const uint8_t *src;
		if (ibp_container_row(ct, 0, &src, &slot) == IBP_OK && slot * nrows <= plen)
			ovf = plen - slot * nrows;
	}
	if (as_json) {
		json_t j;
		json_head(&j, in, ct, "packed");
		json_kv_uint(&j, "rows", nrows);
		json_kv_uint(&j, "row_bytes", rb);
		if (id != IBP_CODEC_EXP_ROWS) {
			json_kv_uint(&j, "blocks", nb);
			json_kv_uint(&j, "block_rows", br);
			json_kv_uint(&j, "block_elems", ce);
		}
		if (id == IBP_CODEC_EXP_ROWS) {
			json_kv_uint(&j, "slot_bytes", slot);
			json_kv_uint(&j, "overflow_bytes", ovf);
		}
		if (id == IBP_CODEC_EXP) {
			json_kv_string(&j, "exp_table", table);
		} else if (id == IBP_CODEC_FP8) {
			json_kv_string(&j, "fp8_format", fmt);
			json_kv_uint(&j, "fp8_block", fo.block);
			json_kv_bool(&j, "hadamard", fo.hadamard);
			json_kv_bool(&j, "adaptive", fo.adaptive);
		}
		json_kv_uint(&j, "raw_bytes", raw);
		json_kv_uint(&j, "payload_bytes", plen);
		json_kv_double(&j, "ratio", ratio);
		json_kv_double(&j, "payload_ratio", pratio);
		json_end_object(&j);
	} else {
		char b1[32], b2[32], sh[256];
		printf("file          %s (%s, format %u.%u)\n", in, cli_bytes(fsize, b1, sizeof(b1)),
		       ibp_container_version_major(ct), ibp_container_version_minor(ct));
		if (id == IBP_CODEC_EXP)
			printf("codec         exp (lossless), table %s\n", table);
		else if (id == IBP_CODEC_EXP_ROWS)
			printf("codec         exp-rows (lossless), one exponent table, each row decoded on its own\n");
		else
			printf("codec         fp8 (LOSSY), %s, scale block %u, Hadamard %s, adaptive %s\n", fmt,
			       fo.block, fo.hadamard ? "on" : "off", fo.adaptive ? "on" : "off");
		char rows[48], elems[48];
		if (id != IBP_CODEC_EXP_ROWS)
			printf("blocks        %llu of %s (%s)\n", (unsigned long long)nb,
			       cli_count(br, "row", "rows", rows, sizeof(rows)),
			       cli_count(ce, "element", "elements", elems, sizeof(elems)));
		printf("layout        packed\n");
		printf("dtype, shape  %s %s\n", ibp_dtype_name(ibp_container_dtype(ct)),
		       cli_shape(shape, ndim, sh, sizeof(sh)));
		printf("rows          %llu x %llu B\n", (unsigned long long)nrows, (unsigned long long)rb);
		if (id == IBP_CODEC_EXP_ROWS)
			printf("row slots     %llu B each; %llu B of escapes overflow them\n", (unsigned long long)slot,
			       (unsigned long long)ovf);
		printf("raw size      %s (%llu B)\n", cli_bytes(raw, b1, sizeof(b1)), (unsigned long long)raw);
		printf("payload       %s (%llu B)\n", cli_bytes(plen, b2, sizeof(b2)), (unsigned long long)plen);
		printf("ratio         %.3f (whole file), %.3f (payload)\n", ratio, pratio);
	}
	ibp_container_close(ct);
	return EXIT_OK;
}

int cmd_info(int argc, char **argv)
{
	static const int opts[] = {OPT_JSON, 0};
	const cli_spec_t sp = {"info", help_info, opts, "exactly one IN.ibp", 1};
	cli_args_t a = {0};
	int rc = cli_parse_args(&sp, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = a.operands[0];
	int as_json = a.json;
	if ((rc = cli_check_input(cmd, in, 0)) != EXIT_OK)
		return rc;
	ibp_container_t *ct;
	/* info shows metadata only (no row data), so it skips hashing the
	 * payload; `ibp verify` checks it. Header and metadata sums still hold. */
	ibp_status_t s = ibp_container_open(in, IBP_OPEN_MMAP | IBP_OPEN_TRUSTED, &ct);
	if (s != IBP_OK)
		return cli_fail_status(cmd, in, s);
	if (ibp_container_codec_id(ct) != IBP_CODEC_IBP)
		return info_values(in, ct, as_json);

	const ibp_codec_t *codec = ibp_container_codec(ct);
	uint64_t nrows = ibp_container_nrows(ct), rb = ibp_container_row_bytes(ct);
	uint64_t raw = nrows * rb, fsize = ibp_container_file_bytes(ct), plen = 0;
	ibp_container_payload(ct, &plen);
	unsigned k = codec ? ibp_codec_nclusters(codec) : 0;
	const uint8_t *flags = ibp_container_flags(ct), *cl = ibp_container_clusters(ct);
	uint64_t modes[4] = {0, 0, 0, 0}, enc_bytes = 0;
	uint64_t *per_cluster = calloc(k ? k : 1, sizeof(uint64_t));
	if (!per_cluster) {
		ibp_container_close(ct);
		return cli_fail(cmd, NULL, "out of memory");
	}
	for (uint64_t i = 0; i < nrows; i++) {
		modes[flags[i] & IBP_ROW_MODE_MASK]++;
		unsigned ci = cl ? cl[i] : 0;
		if (ci < k)
			per_cluster[ci]++;
	}
	/* Sum of encoded row lengths (packed: the payload; inplace: less than it). */
	const uint64_t *off = ibp_container_offsets(ct);
	if (off)
		enc_bytes = off[nrows];
	uint64_t D = codec ? ibp_codec_nchunks(codec) : 0;
	unsigned C = ibp_container_chunk_bytes(ct);
	uint64_t static_bits = codec ? ibp_codec_static_bits(codec, 0) : 0;
	uint64_t mask_bits = D * 8 * C - static_bits; /* invariant bits of cluster 0, padding included */
	double ratio = fsize ? (double)raw / (double)fsize : 0;
	double pratio = plen ? (double)raw / (double)plen : 0;
	const char *layout = ibp_container_layout(ct) == IBP_LAYOUT_PACKED ? "packed" : "inplace";
	const char *codec_name = "ibp";
	int xval = codec ? ibp_codec_has_xval(codec) : 0;
	unsigned ndim = ibp_container_ndim(ct);
	const uint64_t *shape = ibp_container_shape(ct);

	if (as_json) {
		json_t j;
		json_head(&j, in, ct, layout);
		json_kv_uint(&j, "rows", nrows);
		json_kv_uint(&j, "row_bytes", rb);
		json_kv_uint(&j, "chunk_bytes", C);
		json_kv_uint(&j, "chunks_per_row", D);
		json_kv_uint(&j, "clusters", k);
		json_kv_bool(&j, "xvals", xval);
		if (ibp_container_threshold(ct) >= 0)
			json_kv_double(&j, "threshold", ibp_container_threshold(ct));
		else {
			json_key(&j, "threshold");
			json_null(&j);
		}
		json_kv_uint(&j, "static_bits_per_row", static_bits);
		json_kv_uint(&j, "invariant_bits_per_row", mask_bits);
		json_kv_uint(&j, "raw_bytes", raw);
		json_kv_uint(&j, "payload_bytes", plen);
		if (off)
			json_kv_uint(&j, "encoded_bytes", enc_bytes);
		json_kv_double(&j, "ratio", ratio);
		json_kv_double(&j, "payload_ratio", pratio);
		json_key(&j, "modes");
		json_begin_object(&j);
		for (int m = 0; m < 4; m++)
			json_kv_uint(&j, mode_names[m], modes[m]);
		json_end_object(&j);
		json_key(&j, "rows_per_cluster");
		json_begin_array(&j);
		for (unsigned i = 0; i < k; i++)
			json_uint(&j, per_cluster[i]);
		json_end_array(&j);
		json_end_object(&j);
	} else {
		char b1[32], b2[32], sh[256];
		printf("file          %s (%s, format %u.%u)\n", in, cli_bytes(fsize, b1, sizeof(b1)),
		       ibp_container_version_major(ct), ibp_container_version_minor(ct));
		char chunks[48];
		printf("codec         %s, chunk %u B (%s per row), %u cluster%s", codec_name, C,
		       cli_count(D, "chunk", "chunks", chunks, sizeof(chunks)), k, k == 1 ? "" : "s");
		if (ibp_container_threshold(ct) >= 0)
			printf(", threshold %.2f", ibp_container_threshold(ct));
		if (xval)
			printf(", Xvals");
		printf("\nlayout        %s\n", layout);
		printf("dtype, shape  %s %s\n", ibp_dtype_name(ibp_container_dtype(ct)),
		       cli_shape(shape, ndim, sh, sizeof(sh)));
		printf("rows          %llu x %llu B\n", (unsigned long long)nrows, (unsigned long long)rb);
		printf("invariant     %llu of %llu bits per row (cluster 0), %llu static bits\n",
		       (unsigned long long)mask_bits, (unsigned long long)(D * 8 * C),
		       (unsigned long long)static_bits);
		printf("raw size      %s (%llu B)\n", cli_bytes(raw, b1, sizeof(b1)), (unsigned long long)raw);
		printf("payload       %s (%llu B)\n", cli_bytes(plen, b2, sizeof(b2)), (unsigned long long)plen);
		printf("ratio         %.3f (whole file), %.3f (payload)\n", ratio, pratio);
		printf("row modes    ");
		for (int m = 0; m < 4; m++)
			printf(" %s %llu (%.1f%%)%s", mode_names[m], (unsigned long long)modes[m],
			       nrows ? 100.0 * (double)modes[m] / (double)nrows : 0.0, m < 3 ? "," : "\n");
		if (k > 1) {
			printf("clusters     ");
			for (unsigned i = 0; i < k; i++)
				printf(" %llu%s", (unsigned long long)per_cluster[i], i + 1 < k ? "," : " rows\n");
		}
	}
	free(per_cluster);
	ibp_container_close(ct);
	return EXIT_OK;
}
