/* cmd_analyze.c - `ibp analyze IN.npy [--json]`: how invariant the bits are
 * and what each chunk size and threshold would give (ibp/analyze.h). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "progress.h"

const char *const help_analyze =
	"usage: ibp analyze IN.npy [options]\n"
	"\n"
	"Report, on a sample of rows, the fraction of invariant bits (bits that\n"
	"hold their majority value in at least a fraction T of rows) per bit\n"
	"position of an element, and the predicted compressed size for every chunk\n"
	"size (1, 2, 4, 8) and threshold (0.70 .. 1.00) with one cluster.\n"
	"\n"
	"options:\n"
	"  --threshold T|auto   T for the per-bit report (default: the best cell's)\n"
	"  --sample F|auto      fraction of rows sampled, (0, 1]\n"
	"  --seed N             sample seed\n"
	"  --dtype bf16         read a '<u2' or '|V2' array as bfloat16\n"
	"  --threads N          threads (default 0 = all CPUs)\n"
	"  --json               print one JSON object on stdout instead of text\n"
	"  -h, --help           this text\n";

int cmd_analyze(int argc, char **argv)
{
	static const int opts[] = {OPT_THRESHOLD, OPT_SAMPLE, OPT_SEED, OPT_DTYPE, OPT_THREADS, OPT_JSON, 0};
	const cli_spec_t sp = {"analyze", help_analyze, opts, "exactly one IN.npy", 1};
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	cli_args_t args = {.train = &o};
	int rc = cli_parse_args(&sp, &args, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = args.operands[0];
	o.nthreads = args.nthreads;
	int as_json = args.json;
	if ((rc = cli_check_input(cmd, in, 0)) != EXIT_OK)
		return rc;

	ibp_npy_info_t info;
	void *data = NULL;
	uint64_t nrows, rb;
	rc = cli_load_rows(cmd, in, args.npy_flags, &info, &data, &nrows, &rb);
	if (rc != EXIT_OK)
		return rc;
	progress_t *pg = progress_start("analyze", 0);
	progress_tick(pg);
	ibp_analysis_t *a = NULL;
	ibp_status_t s = ibp_analyze(data, nrows, rb, &o, &a);
	progress_end(pg);
	if (s != IBP_OK) {
		ibp_npy_free(data);
		return cli_fail_status(cmd, in, s);
	}
	unsigned eb = (unsigned)info.elem_bytes;
	double lane[64];
	s = ibp_analysis_lane_fraction(a, eb, lane);
	if (s != IBP_OK) {
		ibp_analysis_free(a);
		ibp_npy_free(data);
		return cli_fail_status(cmd, in, s);
	}
	double raw = (double)nrows * (double)rb;
	const ibp_analysis_cell_t *best = &a->cells[a->best];
	char sh[256], b1[32];

	if (as_json) {
		json_t j;
		json_init(&j, stdout);
		json_begin_object(&j);
		json_kv_string(&j, "file", in);
		json_kv_string(&j, "dtype", ibp_dtype_name(info.dtype));
		json_kv_shape(&j, "shape", info.shape, info.ndim);
		json_kv_uint(&j, "rows", a->nrows);
		json_kv_uint(&j, "row_bytes", a->row_bytes);
		json_kv_uint(&j, "sample_rows", a->sample_rows);
		json_kv_double(&j, "threshold", a->threshold);
		json_kv_uint(&j, "invariant_bits", a->invariant_bits);
		json_kv_double(&j, "invariant_fraction", a->invariant_fraction);
		json_kv_uint(&j, "element_bits", 8u * eb);
		json_key(&j, "bit_invariant_fraction"); /* index = bit of an element, 0 = LSB */
		json_begin_array(&j);
		for (unsigned b = 0; b < 8 * eb; b++)
			json_double(&j, lane[b]);
		json_end_array(&j);
		json_key(&j, "cells");
		json_begin_array(&j);
		for (unsigned i = 0; i < a->ncells; i++) {
			const ibp_analysis_cell_t *cl = &a->cells[i];
			json_begin_object(&j);
			json_kv_uint(&j, "chunk_bytes", cl->chunk_bytes);
			json_kv_double(&j, "threshold", cl->threshold);
			json_kv_uint(&j, "invariant_bits", cl->invariant_bits);
			json_kv_uint(&j, "metadata_bytes", cl->metadata_bytes);
			json_kv_double(&j, "predicted_bytes", cl->predicted_bytes);
			json_kv_double(&j, "predicted_ratio", cl->predicted_bytes > 0 ? raw / cl->predicted_bytes : 0);
			json_kv_double(&j, "nonraw_fraction",
				       a->sample_rows ? (double)cl->sample_nonraw / (double)a->sample_rows : 0);
			json_end_object(&j);
		}
		json_end_array(&j);
		json_key(&j, "best");
		json_begin_object(&j);
		json_kv_uint(&j, "chunk_bytes", best->chunk_bytes);
		json_kv_double(&j, "threshold", best->threshold);
		json_kv_double(&j, "predicted_bytes", best->predicted_bytes);
		json_kv_double(&j, "predicted_ratio", best->predicted_bytes > 0 ? raw / best->predicted_bytes : 0);
		json_end_object(&j);
		json_end_object(&j);
	} else {
		char rows[48], sampled[48];
		printf("%s: %s %s, %s x %llu B (%s), %s sampled\n", in, ibp_dtype_name(info.dtype),
		       cli_shape(info.shape, info.ndim, sh, sizeof(sh)), cli_count(nrows, "row", "rows", rows, sizeof(rows)),
		       (unsigned long long)rb, cli_bytes(nrows * rb, b1, sizeof(b1)),
		       cli_count(a->sample_rows, "row", "rows", sampled, sizeof(sampled)));
		printf("invariant bits at T=%.2f: %llu of %llu (%.1f%%)\n\n", a->threshold,
		       (unsigned long long)a->invariant_bits, (unsigned long long)(8 * rb),
		       100.0 * a->invariant_fraction);
		printf("invariant fraction per bit of a %u-bit %s element (bit %u = most significant):\n",
		       8 * eb, ibp_dtype_name(info.dtype), 8 * eb - 1);
		for (int hi = (int)(8 * eb) - 1; hi >= 0; hi -= 8) {
			printf("  bits %2d..%2d ", hi, hi - 7);
			for (int b = hi; b > hi - 8; b--)
				printf(" %5.3f", lane[b]);
			printf("\n");
		}
		printf("\npredicted ratio (raw / predicted size), 1 cluster; * = best\n  C \\ T");
		for (unsigned t = 0; t < a->nthresholds; t++)
			printf(" %8.2f", a->cells[t].threshold);
		printf("\n");
		for (unsigned ci = 0; ci < 4; ci++) {
			printf("  %u B ", a->cells[ci * a->nthresholds].chunk_bytes);
			for (unsigned t = 0; t < a->nthresholds; t++) {
				unsigned i = ci * a->nthresholds + t;
				double p = a->cells[i].predicted_bytes;
				printf(" %8.3f%c", p > 0 ? raw / p : 0.0, i == a->best ? '*' : ' ');
			}
			printf("\n");
		}
		printf("\nbest: chunk %u B, T=%.2f: %s predicted, ratio %.3f\n", best->chunk_bytes, best->threshold,
		       cli_bytes((uint64_t)best->predicted_bytes, b1, sizeof(b1)),
		       best->predicted_bytes > 0 ? raw / best->predicted_bytes : 0.0);
	}
	ibp_analysis_free(a);
	ibp_npy_free(data);
	return EXIT_OK;
}
