/* cli.h - shared pieces of the `ibp` command-line tool (the files in tools/). */
#ifndef IBP_CLI_H
#define IBP_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

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
int cmd_cache_sim(int argc, char **argv);

/* Prints "ibp CMD: PATH: STATUS: DETAIL" on stderr (PATH left out when NULL
 * or already in the detail) and returns EXIT_FAIL. */
int cli_fail_status(const char *cmd, const char *path, ibp_status_t s);

/* cli_fail_status with `detail` for ibp_last_error(). */
int cli_fail_detail(const char *cmd, const char *path, ibp_status_t s, const char *detail);

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

/* Option codes: getopt_long codes, and the index (code - OPT_FIRST) of an
 * option in the parser's table (opts.c) and in cli_args_t.seen. */
enum {
	OPT_FIRST = 1000,
	OPT_CHUNK = OPT_FIRST,
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
	OPT_TRACE,     /* cache-sim */
	OPT_CAPACITY,
	OPT_POLICY,
	OPT_BATCH,
	OPT_CLASS_STEP,
	OPT_END /* one past the last */
};
#define CLI_NOPTS (OPT_END - OPT_FIRST)

/* Training options (ibp codec) shared by pack, analyze and bench. Returns 1
 * if `opt` was handled, -1 on a bad value (usage error printed), 0 if it is
 * not a training option. --dtype bf16 sets IBP_NPY_BF16 in *npy_flags. */
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

/* "ibp", "exp", "fp8" or "exp-rows" ("unknown" for another id). */
const char *cli_codec_name(ibp_codec_id_t id);

/* 1 if the value codecs (exp, exp-rows, fp8) take `dt`: bf16, f16 or f32. */
int cli_value_dtype(ibp_dtype_t dt);

/* Loads IN.npy for pack/analyze/bench: checks there is at least one
 * dimension, at most IBP_MAX_NDIM and non-empty rows. On failure prints
 * the error and returns EXIT_FAIL. `bf16`: IBP_NPY_BF16 or 0; when set the
 * array must be bf16. */
int cli_load_rows(const char *cmd, const char *path, unsigned npy_flags, ibp_npy_info_t *info,
		  void **data, uint64_t *nrows, uint64_t *row_bytes);

/* ---- the option parser: one table of every option (opts.c); each
 * command lists the ones it takes ---- */

/* What a command takes. `opts`: its OPT_* codes, ending with 0 (the
 * CLI_OPTS_* groups below list the shared ones). `needs`: its operands as
 * the usage error says them ("IN.npy and OUT.ibp", "exactly one IN.ibp"). */
typedef struct cli_spec {
	const char *cmd;
	const char *help;
	const int *opts;
	const char *needs;
	int noperands;
} cli_spec_t;

#define CLI_OPTS_TRAIN OPT_CHUNK, OPT_THRESHOLD, OPT_SAMPLE, OPT_CLUSTERS, OPT_SEED
#define CLI_OPTS_CODEC                                                                          \
	OPT_CODEC, OPT_EXP_TABLE, OPT_FP8_FORMAT, OPT_FP8_BLOCK, OPT_NO_HADAMARD, OPT_NO_ADAPTIVE

/* Where the parsed values go. The caller sets train/codec (NULL: the
 * command takes none of those options) and may set `other`, which sees
 * every option first: it returns 1 if it handled it, 0 to leave it to the
 * shared handlers, -1 after printing a usage error. */
typedef struct cli_args {
	ibp_train_opts_t *train;  /* --chunk ... --seed, --dtype bf16 */
	cli_codec_opts_t *codec;  /* --codec and the exp/fp8 options, --lossy */
	unsigned npy_flags;       /* IBP_NPY_BF16 after --dtype bf16 */
	int nthreads;             /* --threads (0 = all CPUs) */
	int json;                 /* --json given */
	int (*other)(void *ctx, int code, const char *arg);
	void *ctx;
	unsigned seen[CLI_NOPTS]; /* order (1, 2, ...) of each option's last use; 0 = not given */
	char **operands;          /* spec->noperands of them */
} cli_args_t;

/* Parses argv (argv[0] the command) into `a` with getopt_long, options and
 * operands in any order, -h = --help. Returns CLI_PARSED when the command
 * goes on, else the exit status to return: EXIT_OK after printing --help,
 * EXIT_USAGE after printing a usage error (unknown option, bad value, too
 * few or too many operands). */
#define CLI_PARSED (-1)
int cli_parse_args(const cli_spec_t *spec, cli_args_t *a, int argc, char **argv);

/* The option's "--name" for messages. */
const char *cli_opt_name(int code);

/* ---- inputs and outputs ---- */

/* A path given as input: EXIT_OK when it is a regular file (or, with
 * streams_ok, a FIFO or character device) or does not exist (the reader
 * reports that); else prints "not a regular file (a directory)" and
 * returns EXIT_FAIL. Every command checks its inputs this way. */
int cli_check_input(const char *cmd, const char *path, int streams_ok);

/* "a directory", "a FIFO", ... for messages. */
const char *cli_file_kind(mode_t m);

/* An output file, written without ever destroying what was there:
 * cli_out_prepare checks before anything is read or written; cli_out_open
 * creates the temporary file `tmp` beside the target, which the command
 * writes; cli_out_commit renames it over the target; cli_out_close removes
 * the temporary file if it was not committed (and only it) and frees. */
typedef struct cli_out {
	const char *cmd;
	const char *target; /* as given, for messages */
	char *path;         /* what is replaced: target, or the file its symlink names */
	char *tmp;          /* the temporary file this command created, or NULL */
	int existed;        /* the target existed: its mode is kept */
	struct stat old;
} cli_out_t;

/* Refuses (EXIT_USAGE, printed) a target that exists and is not a regular
 * file, a symbolic link to a missing file, or a target that is the same
 * file (device and inode, links followed) as one of inputs[0..ninputs)
 * (NULL entries skipped). Call cli_out_close in the end either way. */
int cli_out_prepare(cli_out_t *o, const char *cmd, const char *target, const char *const *inputs, int ninputs);

/* EXIT_FAIL (printed) if `bytes` do not fit in the free space of the
 * target's file system; EXIT_OK when they do or it cannot tell. */
int cli_out_check_space(cli_out_t *o, uint64_t bytes);

/* Creates o->tmp (mode 0600 until commit). A signal that ends the process
 * removes it. Returns an exit status (printed). */
int cli_out_open(cli_out_t *o);

/* fsync, mode (the old target's, else 0666 & ~umask), rename over the
 * target. On failure the temporary file is removed and the target kept.
 * Returns an exit status (printed). */
int cli_out_commit(cli_out_t *o);

/* Removes the uncommitted temporary file and frees; safe to call twice. */
void cli_out_close(cli_out_t *o);

/* cli_fail_status for a failed write to o->tmp: the detail names the
 * target instead of the temporary file. */
int cli_fail_out(const cli_out_t *o, ibp_status_t s);

/* Prints `text` on stdout and returns EXIT_OK. */
int cli_print_help(const char *text);

/* The rows to decode: `ids` (a list), or ids drawn uniformly from
 * [0, rows) by splitmix64 from `seed` (random), or 0..n-1 (neither). */
typedef struct cli_ids {
	const int64_t *ids;
	int random;
	uint64_t seed;
} cli_ids_t;

/* Decodes n rows of `st` chosen by `src` (NULL: 0..n-1) in slices into a
 * new .npy of shape (n, shape[1:]...) written through `out` (prepared, not
 * opened: this checks the space, opens and commits), with a progress line.
 * *seconds gets the time spent decoding. Prints errors; returns an exit
 * status (on failure the target is untouched). */
int cli_decode_to_npy(const char *cmd, ibp_store_t *st, const cli_ids_t *src, uint64_t n, cli_out_t *out,
		      int nthreads, double *seconds);

/* unpack and gather: cli_out_prepare(out_path, inputs), cli_check_input of
 * inputs[0] (the container), then opens it as *st. On failure (printed,
 * exit status returned) `out` is closed and *st not set; on EXIT_OK call
 * cli_out_close and ibp_store_close in the end. */
int cli_open_for_decode(const char *cmd, const char *const *inputs, int ninputs, const char *out_path,
			cli_out_t *out, ibp_store_t **st);

/* "1 row", "2 rows": n and the right form into buf. */
const char *cli_count(uint64_t n, const char *one, const char *many, char *buf, size_t cap);

/* Bytes the CLI lets itself hold for data it reads whole (ids): half the
 * physical memory, or $IBP_CLI_MEM_LIMIT (bytes) when set. */
uint64_t cli_mem_limit(void);

/* Seconds on CLOCK_MONOTONIC. */
double cli_now(void);

/* "12.3 MiB" style size into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t cap);

/* "[2, 3, 4]" into buf. */
const char *cli_shape(const uint64_t *shape, unsigned ndim, char *buf, size_t cap);

/* Help texts, printed by `ibp CMD --help`. */
extern const char *const help_pack, *const help_unpack, *const help_info, *const help_verify,
	*const help_analyze, *const help_gather, *const help_bench, *const help_eval,
	*const help_cache_sim;

#endif /* IBP_CLI_H */
