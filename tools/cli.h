/* cli.h - shared pieces of the `ibp` command-line tool (the files in tools/). */
#ifndef IBP_CLI_H
#define IBP_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "ibp.h"
#include "ibp/analyze.h"
#include "ibp/container.h"
#include "ibp/store.h"

/* Exit statuses (docs/CLI.md). */
#define EXIT_OK 0
#define EXIT_USAGE 1
#define EXIT_FAIL 2 /* bad or corrupt input, I/O and other runtime errors */

/* One subcommand: argv[0] is the command name. Returns an exit status. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

int cmd_pack(int argc, char **argv);
int cmd_unpack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_gather(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_eval(int argc, char **argv);

/* Prints "ibp CMD: PATH: STATUS: DETAIL" on stderr (PATH left out when NULL
 * or already in the detail) and returns EXIT_FAIL. */
int cli_fail_status(const char *cmd, const char *path, ibp_status_t s);

/* Prints "ibp CMD: PATH: MESSAGE" on stderr and returns EXIT_FAIL. */
int cli_fail(const char *cmd, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prints "ibp CMD: MESSAGE" and a hint to --help on stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option value parsers: 0 on success, else print a usage error and return
 * nonzero. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *v);
int cli_parse_threads(const char *cmd, const char *s, int *v);
int cli_parse_double(const char *cmd, const char *opt, const char *s, double *v);

/* Training options shared by pack, analyze and bench. Returns 1 if `opt`
 * (a getopt_long code from CLI_TRAIN_OPTIONS) was handled, -1 on a bad
 * value (usage error printed), 0 if it is not a training option. */
enum {
	OPT_CHUNK = 1000,
	OPT_THRESHOLD,
	OPT_SAMPLE,
	OPT_CLUSTERS,
	OPT_SEED,
	OPT_THREADS,
	OPT_DTYPE,
	OPT_LAYOUT,
	OPT_JSON,
	OPT_IDS,
	OPT_OUT,
	OPT_HELP,
	OPT_REPEAT,
	OPT_MAX_MB,
	OPT_CODEC,
	OPT_LOSSY,
	OPT_EXP_TABLE,
	OPT_FP8_FORMAT,
	OPT_FP8_BLOCK,
	OPT_NO_HADAMARD,
	OPT_NO_ADAPTIVE,
	OPT_BLOCK_ROWS,
};
int cli_train_option(const char *cmd, int opt, const char *arg, ibp_train_opts_t *o,
		     unsigned *npy_flags);

/* Codec choice and value-codec options shared by pack and eval. */
typedef struct cli_codec_opts {
	ibp_codec_id_t codec; /* default IBP_CODEC_IBP */
	int lossy;            /* --lossy given */
	ibp_exp_opts_t exp;
	ibp_fp8_opts_t fp8;
	const char *exp_only; /* an exp-only option that was given, for usage errors */
	const char *fp8_only; /* an fp8-only option that was given */
} cli_codec_opts_t;

void cli_codec_opts_default(cli_codec_opts_t *o);

/* Handles --codec, --lossy, --exp-table, --fp8-format, --fp8-block,
 * --no-hadamard, --no-adaptive: 1 if handled, -1 on a bad value (usage
 * error printed), 0 if `opt` is none of them. */
int cli_codec_option(const char *cmd, int opt, const char *arg, cli_codec_opts_t *o);

/* After option parsing: options that belong to another codec than the one
 * chosen are a usage error. Returns EXIT_OK or EXIT_USAGE (printed). */
int cli_codec_check(const char *cmd, const cli_codec_opts_t *o);

/* "ibp", "exp" or "fp8". */
const char *cli_codec_name(ibp_codec_id_t id);

/* 1 if the value codecs (exp, fp8) take `dt`: bf16, f16 or f32. */
int cli_value_dtype(ibp_dtype_t dt);

/* Loads IN.npy for pack/analyze/bench: checks there is at least one
 * dimension, at most IBP_MAX_NDIM and non-empty rows. On failure prints
 * the error and returns EXIT_FAIL. `bf16`: IBP_NPY_BF16 or 0; when set the
 * array must be bf16. */
int cli_load_rows(const char *cmd, const char *path, unsigned npy_flags, ibp_npy_info_t *info,
		  void **data, uint64_t *nrows, uint64_t *row_bytes);

/* getopt_long with the CLI's conventions (options may follow operands;
 * -h = --help). Returns the option's code, -1 at the end of the options,
 * or -2 after printing a usage error for an unknown option or a missing
 * value. Call with optind = 1 before the first call. */
int cli_getopt(const char *cmd, int argc, char **argv, const struct option *lo);

/* Prints `text` on stdout and returns EXIT_OK. */
int cli_print_help(const char *text);

/* Decodes rows ids[0..n) of `st` (ids NULL: rows 0..n-1) in slices into a
 * new OUT.npy of shape (n, shape[1:]...), with a progress line. *seconds
 * gets the time spent decoding. Prints errors; returns an exit status. */
int cli_decode_to_npy(const char *cmd, ibp_store_t *st, const int64_t *ids, uint64_t n, const char *out,
		      int nthreads, double *seconds);

/* Seconds on CLOCK_MONOTONIC. */
double cli_now(void);

/* "12.3 MiB" style size into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t cap);

/* "[2, 3, 4]" into buf. */
const char *cli_shape(const uint64_t *shape, unsigned ndim, char *buf, size_t cap);

/* Help texts, printed by `ibp CMD --help`. */
extern const char *const help_pack, *const help_unpack, *const help_info, *const help_verify,
	*const help_analyze, *const help_gather, *const help_bench, *const help_eval;

#endif /* IBP_CLI_H */
