/* cmd_gather.c - `ibp gather IN.ibp --ids SPEC --out OUT.npy`, and the
 * slice-by-slice decode into an .npy that `unpack` shares. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"

const char *const help_gather =
	"usage: ibp gather IN.ibp --ids SPEC --out OUT.npy [options]\n"
	"\n"
	"Decode the rows named by SPEC, in that order (duplicates allowed), into\n"
	"OUT.npy of shape (n, shape[1:]...) and the container's dtype.\n"
	"\n"
	"SPEC:\n"
	"  random:N[:SEED]   N row ids drawn uniformly with replacement (SEED default 1)\n"
	"  FILE              a .npy of integer ids (any shape, read flat; int64 as\n"
	"                    written by NumPy), or a text file of decimal ids separated\n"
	"                    by white space or commas ('#' starts a comment); ids\n"
	"                    are held in memory (at most half the physical memory)\n"
	"\n"
	"options:\n"
	"  --threads N       decode threads (default 0 = all CPUs)\n"
	"  -h, --help        this text\n"
	"\n"
	"Prints the rows, bytes and decode speed on stdout. An id outside [0, rows)\n"
	"is an error (exit 2) naming the ids file and the id's position; so is an\n"
	"output larger than its file system's free space. OUT.npy is written to a\n"
	"temporary file renamed over it when complete; an OUT.npy that is an input\n"
	"or not a regular file is refused. With the exp and fp8 codecs a row is\n"
	"read by decoding its whole block (the last block decoded is kept per\n"
	"thread, so ids in the same block as the one before are cheap); with ibp\n"
	"and exp-rows each row decodes on its own.\n";

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* --ids and --out: ctx is {ids, out}. */
static int gather_option(void *ctx, int code, const char *arg)
{
	const char **v = ctx;
	if (code == OPT_IDS || code == OPT_OUT) {
		v[code == OPT_OUT] = arg;
		return 1;
	}
	return 0;
}

int cli_decode_to_npy(const char *cmd, ibp_store_t *st, const cli_ids_t *src, uint64_t n, cli_out_t *out,
		      int nthreads, double *seconds)
{
	uint64_t rb = ibp_store_row_bytes(st), nrows = ibp_store_nrows(st);
	unsigned ndim = ibp_store_ndim(st);
	uint64_t shape[IBP_MAX_NDIM];
	memcpy(shape, ibp_store_shape(st), ndim * sizeof(uint64_t));
	shape[0] = n;
	/* Sizes first: nothing is created for an output that cannot be written. */
	char b1[32];
	if (rb && n > (UINT64_MAX - 65536) / rb)
		return cli_fail(cmd, out->target, "%llu rows of %s is more than 2^64 bytes", (unsigned long long)n,
				cli_bytes(rb, b1, sizeof(b1)));
	int rc = cli_out_check_space(out, n * rb + 4096); /* + the .npy header */
	if (rc != EXIT_OK)
		return rc;
	if ((rc = cli_out_open(out)) != EXIT_OK)
		return rc;
	ibp_npy_writer_t *w;
	ibp_status_t s = ibp_npy_create(out->tmp, ibp_store_dtype(st), ndim, shape, &w);
	if (s != IBP_OK)
		return cli_fail_out(out, s);
	uint64_t slice = (32ull << 20) / rb;
	if (slice == 0)
		slice = 1;
	if (slice > n)
		slice = n ? n : 1;
	const int64_t *ids = src ? src->ids : NULL;
	uint8_t *buf = malloc(slice * rb);
	int64_t *seq = ids ? NULL : malloc(slice * sizeof(int64_t));
	if (!buf || (!ids && !seq)) {
		free(buf);
		free(seq);
		ibp_npy_abort(w);
		return cli_fail(cmd, NULL, "out of memory");
	}
	progress_t *pg = progress_start(cmd, n);
	double t = 0;
	uint64_t x = src ? src->seed : 0; /* splitmix64 state of random ids */
	for (uint64_t a = 0; a < n && rc == EXIT_OK; a += slice) {
		uint64_t k = n - a < slice ? n - a : slice;
		const int64_t *sl = ids ? ids + a : seq;
		if (!ids)
			for (uint64_t i = 0; i < k; i++)
				seq[i] = src && src->random ? (int64_t)(splitmix64(&x) % nrows) : (int64_t)(a + i);
		double t0 = cli_now();
		s = ibp_store_gather(st, sl, k, buf, nthreads);
		t += cli_now() - t0;
		if (s == IBP_ERR_OUT_OF_RANGE) {
			/* Callers check ids first; name the global position all the same. */
			for (uint64_t i = 0; i < k; i++)
				if (sl[i] < 0 || (uint64_t)sl[i] >= nrows) {
					rc = cli_fail(cmd, NULL, "id %lld at position %llu is outside [0, %llu)",
						      (long long)sl[i], (unsigned long long)(a + i), (unsigned long long)nrows);
					break;
				}
			if (rc == EXIT_OK)
				rc = cli_fail_status(cmd, ibp_container_name(ibp_store_container(st)), s);
			break;
		}
		if (s == IBP_OK)
			s = ibp_npy_append(w, buf, k * rb);
		if (s != IBP_OK) {
			/* A read error (corrupt data: exit 2) names the container, a write error the output. */
			rc = cli_fail_status(cmd, s == IBP_ERR_IO || s == IBP_ERR_INVALID_ARG ? out->target
							: ibp_container_name(ibp_store_container(st)), s);
			break;
		}
		progress_update(pg, a + k);
	}
	progress_end(pg);
	free(buf);
	free(seq);
	if (rc != EXIT_OK) {
		ibp_npy_abort(w);
		return rc;
	}
	s = ibp_npy_finish(w);
	if (s != IBP_OK)
		return cli_fail_out(out, s);
	if ((rc = cli_out_commit(out)) != EXIT_OK)
		return rc;
	*seconds = t;
	return EXIT_OK;
}

int cli_open_for_decode(const char *cmd, const char *const *inputs, int ninputs, const char *out_path,
			cli_out_t *out, ibp_store_t **st)
{
	int rc = cli_out_prepare(out, cmd, out_path, inputs, ninputs);
	if (rc == EXIT_OK)
		rc = cli_check_input(cmd, inputs[0], 0);
	if (rc == EXIT_OK) {
		/* The library checks the payload checksums at open (verified reads):
		 * corrupt data is IBP_ERR_CORRUPT or _CHECKSUM here, exit 2. */
		ibp_status_t s = ibp_store_open(inputs[0], IBP_OPEN_MMAP, st);
		if (s != IBP_OK)
			rc = cli_fail_status(cmd, inputs[0], s);
	}
	if (rc != EXIT_OK)
		cli_out_close(out);
	return rc;
}

/* `tok` (len bytes of a longer token if cut) quoted for a message:
 * non-printing bytes as \n, \t or \xNN. */
static const char *quote_token(const char *tok, size_t len, int cut, char *buf, size_t cap)
{
	size_t n = 0;
	buf[n++] = '\'';
	for (size_t i = 0; i < len && n + 8 < cap; i++) {
		unsigned char ch = (unsigned char)tok[i];
		if (ch == '\n')
			n += (size_t)snprintf(buf + n, cap - n, "\\n");
		else if (ch == '\t')
			n += (size_t)snprintf(buf + n, cap - n, "\\t");
		else if (ch < 0x20 || ch >= 0x7f || ch == '\'')
			n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", ch);
		else
			buf[n++] = (char)ch;
	}
	snprintf(buf + n, cap - n, "%s'", cut ? "..." : "");
	return buf;
}

/* A byte source: the bytes already read to sniff the format, then the file. */
typedef struct reader {
	FILE *f;
	const unsigned char *head;
	size_t nhead, at;
} reader_t;

static int next_ch(reader_t *r)
{
	return r->at < r->nhead ? r->head[r->at++] : getc_unlocked(r->f);
}

static int is_sep(int ch)
{
	return ch == ',' || (ch != EOF && isspace(ch));
}

/* Parses decimal ids from text: white space or commas between them, '#' to
 * the end of a line a comment. The ids array grows up to cli_mem_limit(). */
static int read_id_text(const char *cmd, const char *path, reader_t *r, int64_t **ids, uint64_t *n)
{
	uint64_t limit = cli_mem_limit() / sizeof(int64_t), count = 0, vcap = 0, line = 1;
	int64_t *v = NULL;
	int rc = EXIT_OK, ch = next_ch(r);
	char tok[24], q[128];
	while (rc == EXIT_OK && ch != EOF) {
		if (ch == '\n') {
			line++;
			ch = next_ch(r);
			continue;
		}
		if (is_sep(ch)) {
			ch = next_ch(r);
			continue;
		}
		if (ch == '#') {
			while (ch != EOF && ch != '\n')
				ch = next_ch(r);
			continue;
		}
		/* A token: up to the next separator or comment. */
		size_t len = 0;
		int cut = 0, digits = 1;
		while (ch != EOF && !is_sep(ch) && ch != '#') {
			digits &= isdigit(ch) != 0;
			if (len < sizeof(tok))
				tok[len++] = (char)ch;
			else
				cut = 1;
			ch = next_ch(r);
		}
		if (!digits) {
			rc = cli_fail(cmd, path, "line %llu: %s is not a row id (ids are non-negative integers)",
				      (unsigned long long)line, quote_token(tok, len, cut, q, sizeof(q)));
			break;
		}
		uint64_t x = 0;
		int big = cut;
		for (size_t i = 0; i < len && !big; i++) {
			unsigned d = (unsigned)(tok[i] - '0');
			big = x > ((uint64_t)INT64_MAX - d) / 10;
			x = x * 10 + d;
		}
		if (big) {
			rc = cli_fail(cmd, path, "line %llu: id %s is too large", (unsigned long long)line,
				      quote_token(tok, len, cut, q, sizeof(q)));
			break;
		}
		if (count == vcap) {
			char b[32];
			if (count >= limit) {
				rc = cli_fail(cmd, path, "more than %llu ids; ids are held in memory and the limit is %s "
						"(half the physical memory unless IBP_CLI_MEM_LIMIT sets it)",
					      (unsigned long long)limit, cli_bytes(limit * sizeof(int64_t), b, sizeof(b)));
				break;
			}
			uint64_t nc = vcap ? vcap * 2 : 1024;
			if (nc > limit)
				nc = limit;
			int64_t *bigger = realloc(v, nc * sizeof(int64_t));
			if (!bigger) {
				rc = cli_fail(cmd, path, "out of memory for %llu ids", (unsigned long long)nc);
				break;
			}
			v = bigger;
			vcap = nc;
		}
		v[count++] = (int64_t)x;
	}
	if (rc == EXIT_OK && ferror(r->f))
		rc = cli_fail(cmd, path, "read error: %s", strerror(errno));
	if (rc != EXIT_OK) {
		free(v);
		return rc;
	}
	*ids = v;
	*n = count;
	return EXIT_OK;
}

/* A .npy of integer ids, any shape, read flat. */
static int read_id_npy(const char *cmd, const char *path, int64_t **ids, uint64_t *n)
{
	ibp_npy_info_t info;
	ibp_status_t s = ibp_npy_read_header(path, 0, &info);
	if (s != IBP_OK)
		return cli_fail_status(cmd, path, s);
	ibp_dtype_t dt = info.dtype;
	int is_signed = dt == IBP_DTYPE_I8 || dt == IBP_DTYPE_I16 || dt == IBP_DTYPE_I32 || dt == IBP_DTYPE_I64;
	int is_unsigned = dt == IBP_DTYPE_U8 || dt == IBP_DTYPE_U16 || dt == IBP_DTYPE_U32 || dt == IBP_DTYPE_U64;
	if (!is_signed && !is_unsigned)
		return cli_fail(cmd, path, "ids must be integers, this array is '%s'", info.descr);
	/* The file's array and the int64 copy are both held: check before loading. */
	uint64_t limit = cli_mem_limit();
	if (info.count > limit / (sizeof(int64_t) + info.elem_bytes)) {
		char b[32];
		return cli_fail(cmd, path, "%llu ids do not fit: ids are held in memory and the limit is %s "
				"(half the physical memory unless IBP_CLI_MEM_LIMIT sets it)",
				(unsigned long long)info.count, cli_bytes(limit, b, sizeof(b)));
	}
	void *data;
	s = ibp_npy_load(path, 0, &info, &data);
	if (s != IBP_OK)
		return cli_fail_status(cmd, path, s);
	int64_t *v = malloc(info.count ? info.count * sizeof(int64_t) : 1);
	if (!v) {
		ibp_npy_free(data);
		return cli_fail(cmd, path, "out of memory");
	}
	const uint8_t *p = data;
	for (uint64_t i = 0; i < info.count; i++) {
		uint64_t u = 0;
		memcpy(&u, p + i * info.elem_bytes, info.elem_bytes); /* little-endian host */
		if (is_signed && info.elem_bytes < 8 && (u >> (8 * info.elem_bytes - 1)) & 1)
			u |= ~0ull << (8 * info.elem_bytes); /* sign-extend */
		if (is_unsigned && u > (uint64_t)INT64_MAX) {
			free(v);
			ibp_npy_free(data);
			return cli_fail(cmd, path, "id %llu at position %llu is too large", (unsigned long long)u,
					(unsigned long long)i);
		}
		v[i] = (int64_t)u;
	}
	ibp_npy_free(data);
	*ids = v;
	*n = info.count;
	return EXIT_OK;
}

/* Reads ids from a .npy of integers or a text file (which may be a pipe). */
static int read_id_file(const char *cmd, const char *path, int64_t **ids, uint64_t *n)
{
	int rc = cli_check_input(cmd, path, 1);
	if (rc != EXIT_OK)
		return rc;
	FILE *f = fopen(path, "rb");
	if (!f)
		return cli_fail(cmd, path, "cannot open: %s", strerror(errno));
	unsigned char magic[6] = {0};
	size_t got = fread(magic, 1, sizeof(magic), f);
	if (got == 6 && !memcmp(magic, "\x93NUMPY", 6)) {
		fclose(f);
		return read_id_npy(cmd, path, ids, n);
	}
	reader_t r = {f, magic, got, 0};
	rc = read_id_text(cmd, path, &r, ids, n);
	fclose(f);
	return rc;
}

int cmd_gather(int argc, char **argv)
{
	static const int opts[] = {OPT_IDS, OPT_OUT, OPT_THREADS, 0};
	const cli_spec_t sp = {"gather", help_gather, opts, "exactly one IN.ibp", 1};
	const char *spec[2] = {NULL, NULL}; /* --ids, --out */
	cli_args_t a = {.other = gather_option, .ctx = spec};
	int rc = cli_parse_args(&sp, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = a.operands[0], *ids_spec = spec[0], *out_path = spec[1];
	if (!ids_spec || !out_path)
		return cli_usage_error(cmd, "needs --ids and --out");

	/* Parse a random: spec before opening anything (usage errors first). */
	int is_random = !strncmp(ids_spec, "random:", 7);
	uint64_t nrand = 0, seed = 1;
	if (is_random) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%s", ids_spec + 7);
		char *colon = strchr(buf, ':');
		if (colon)
			*colon = '\0';
		if (cli_parse_u64(cmd, "--ids random:N", buf, &nrand))
			return EXIT_USAGE;
		if (colon && cli_parse_u64(cmd, "--ids random:N:SEED", colon + 1, &seed))
			return EXIT_USAGE;
	}
	const char *inputs[2] = {in, is_random ? NULL : ids_spec};
	cli_out_t out;
	ibp_store_t *st;
	if ((rc = cli_open_for_decode(cmd, inputs, 2, out_path, &out, &st)) != EXIT_OK)
		return rc;
	int64_t *ids = NULL;
	uint64_t n = 0, nrows = ibp_store_nrows(st);
	cli_ids_t src = {NULL, 0, seed};
	if (is_random) {
		/* Drawn slice by slice while decoding: no list is held in memory. */
		if (nrand && !nrows) {
			rc = cli_fail(cmd, in, "the container has no rows to draw from");
			goto out;
		}
		src.random = 1;
		n = nrand;
	} else {
		rc = read_id_file(cmd, ids_spec, &ids, &n);
		if (rc != EXIT_OK)
			goto out;
		for (uint64_t i = 0; i < n; i++)
			if (ids[i] < 0 || (uint64_t)ids[i] >= nrows) {
				rc = cli_fail(cmd, ids_spec, "id %lld at position %llu is outside [0, %llu), the rows of %s",
					      (long long)ids[i], (unsigned long long)i, (unsigned long long)nrows, in);
				goto out;
			}
		src.ids = ids;
	}
	double secs = 0;
	rc = cli_decode_to_npy(cmd, st, &src, n, &out, a.nthreads, &secs);
	if (rc == EXIT_OK) {
		char b[32], rows[48];
		uint64_t bytes = n * ibp_store_row_bytes(st);
		printf("%s: gathered %s (%s) into %s in %.3f s (%.2f GB/s)\n", in,
		       cli_count(n, "row", "rows", rows, sizeof(rows)), cli_bytes(bytes, b, sizeof(b)), out_path, secs,
		       secs > 0 ? (double)bytes / secs / 1e9 : 0.0);
	}
out:
	cli_out_close(&out);
	free(ids);
	ibp_store_close(st);
	return rc;
}
