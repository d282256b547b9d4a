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
	"                    by white space or commas ('#' starts a comment)\n"
	"\n"
	"options:\n"
	"  --threads N       decode threads (default 0 = all CPUs)\n"
	"  -h, --help        this text\n"
	"\n"
	"Prints the rows, bytes and decode speed on stdout. An id outside\n"
	"[0, rows) is an error (exit 2) naming its position. With the exp and fp8\n"
	"codecs a row is read by decoding its whole block (the last block decoded\n"
	"is kept per thread, so ids in the same block as the one before are cheap).\n";

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int cli_decode_to_npy(const char *cmd, ibp_store_t *st, const int64_t *ids, uint64_t n, const char *out,
		      int nthreads, double *seconds)
{
	uint64_t rb = ibp_store_row_bytes(st);
	unsigned ndim = ibp_store_ndim(st);
	uint64_t shape[IBP_MAX_NDIM];
	memcpy(shape, ibp_store_shape(st), ndim * sizeof(uint64_t));
	shape[0] = n;
	ibp_npy_writer_t *w;
	ibp_status_t s = ibp_npy_create(out, ibp_store_dtype(st), ndim, shape, &w);
	if (s != IBP_OK)
		return cli_fail_status(cmd, out, s);
	uint64_t slice = (32ull << 20) / rb;
	if (slice == 0)
		slice = 1;
	if (slice > n)
		slice = n ? n : 1;
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
	int rc = EXIT_OK;
	for (uint64_t a = 0; a < n && rc == EXIT_OK; a += slice) {
		uint64_t k = n - a < slice ? n - a : slice;
		const int64_t *sl = ids ? ids + a : seq;
		if (!ids)
			for (uint64_t i = 0; i < k; i++)
				seq[i] = (int64_t)(a + i);
		double t0 = cli_now();
		s = ibp_store_gather(st, sl, k, buf, nthreads);
		t += cli_now() - t0;
		if (s == IBP_ERR_OUT_OF_RANGE) {
			/* The store names the position inside this slice; name the global one. */
			for (uint64_t i = 0; i < k; i++)
				if (sl[i] < 0 || (uint64_t)sl[i] >= ibp_store_nrows(st)) {
					progress_end(pg);
					pg = NULL;
					rc = cli_fail(cmd, NULL, "id %lld at position %llu is outside [0, %llu)",
						      (long long)sl[i], (unsigned long long)(a + i),
						      (unsigned long long)ibp_store_nrows(st));
					break;
				}
			if (rc == EXIT_OK)
				rc = cli_fail_status(cmd, ibp_container_name(ibp_store_container(st)), s);
			break;
		}
		if (s == IBP_OK)
			s = ibp_npy_append(w, buf, k * rb);
		if (s != IBP_OK) {
			progress_end(pg);
			pg = NULL;
			rc = cli_fail_status(cmd, s == IBP_ERR_IO || s == IBP_ERR_INVALID_ARG ? out
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
		return cli_fail_status(cmd, out, s);
	*seconds = t;
	return EXIT_OK;
}

/* Reads ids from a .npy of integers or a text file. */
static int read_id_file(const char *cmd, const char *path, int64_t **ids, uint64_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return cli_fail(cmd, path, "cannot open: %s", strerror(errno));
	unsigned char magic[6] = {0};
	size_t got = fread(magic, 1, 6, f);
	if (got == 6 && !memcmp(magic, "\x93NUMPY", 6)) {
		fclose(f);
		ibp_npy_info_t info;
		void *data;
		ibp_status_t s = ibp_npy_load(path, 0, &info, &data);
		if (s != IBP_OK)
			return cli_fail_status(cmd, path, s);
		ibp_dtype_t dt = info.dtype;
		int is_signed = dt == IBP_DTYPE_I8 || dt == IBP_DTYPE_I16 || dt == IBP_DTYPE_I32 || dt == IBP_DTYPE_I64;
		int is_unsigned = dt == IBP_DTYPE_U8 || dt == IBP_DTYPE_U16 || dt == IBP_DTYPE_U32 || dt == IBP_DTYPE_U64;
		if (!is_signed && !is_unsigned) {
			ibp_npy_free(data);
			return cli_fail(cmd, path, "ids must be integers, this array is '%s'", info.descr);
		}
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
				return cli_fail(cmd, path, "id %llu at position %llu is too large",
						(unsigned long long)u, (unsigned long long)i);
			}
			v[i] = (int64_t)u;
		}
		ibp_npy_free(data);
		*ids = v;
		*n = info.count;
		return EXIT_OK;
	}
	/* Text: read it all, then tokenise. */
	rewind(f);
	size_t cap = 1 << 16, len = 0;
	char *text = malloc(cap);
	while (text) {
		len += fread(text + len, 1, cap - len - 1, f);
		if (len < cap - 1)
			break;
		char *bigger = realloc(text, cap * 2);
		if (!bigger) {
			free(text);
			text = NULL;
			break;
		}
		text = bigger;
		cap *= 2;
	}
	int err = ferror(f);
	fclose(f);
	if (!text)
		return cli_fail(cmd, path, "out of memory");
	if (err) {
		free(text);
		return cli_fail(cmd, path, "read error");
	}
	text[len] = '\0';
	uint64_t count = 0, vcap = 1024, line = 1;
	int64_t *v = malloc(vcap * sizeof(int64_t));
	int rc = v ? EXIT_OK : cli_fail(cmd, path, "out of memory");
	for (char *p = text; rc == EXIT_OK && *p;) {
		if (*p == '\n') {
			line++;
			p++;
		} else if (isspace((unsigned char)*p) || *p == ',') {
			p++;
		} else if (*p == '#') {
			while (*p && *p != '\n')
				p++;
		} else if (isdigit((unsigned char)*p)) {
			errno = 0;
			char *end;
			unsigned long long x = strtoull(p, &end, 10);
			if (errno || x > (unsigned long long)INT64_MAX) {
				rc = cli_fail(cmd, path, "line %llu: id too large", (unsigned long long)line);
				break;
			}
			if (*end && !isspace((unsigned char)*end) && *end != ',' && *end != '#') {
				rc = cli_fail(cmd, path, "line %llu: '%.20s' is not a row id", (unsigned long long)line, p);
				break;
			}
			if (count == vcap) {
				int64_t *bigger = realloc(v, vcap * 2 * sizeof(int64_t));
				if (!bigger) {
					rc = cli_fail(cmd, path, "out of memory");
					break;
				}
				v = bigger;
				vcap *= 2;
			}
			v[count++] = (int64_t)x;
			p = end;
		} else {
			rc = cli_fail(cmd, path, "line %llu: '%.20s' is not a row id (ids are non-negative integers)",
				      (unsigned long long)line, p);
		}
	}
	free(text);
	if (rc != EXIT_OK) {
		free(v);
		return rc;
	}
	*ids = v;
	*n = count;
	return EXIT_OK;
}

int cmd_gather(int argc, char **argv)
{
	static const struct option lo[] = {
		{"ids", required_argument, 0, OPT_IDS},
		{"out", required_argument, 0, OPT_OUT},
		{"threads", required_argument, 0, OPT_THREADS},
		{"help", no_argument, 0, OPT_HELP},
		{0, 0, 0, 0},
	};
	const char *cmd = "gather", *spec = NULL, *out = NULL;
	int nthreads = 0, c;
	optind = 1;
	while ((c = cli_getopt(cmd, argc, argv, lo)) != -1) {
		switch (c) {
		case -2: return EXIT_USAGE;
		case OPT_HELP: return cli_print_help(help_gather);
		case OPT_IDS: spec = optarg; break;
		case OPT_OUT: out = optarg; break;
		case OPT_THREADS:
			if (cli_parse_threads(cmd, optarg, &nthreads))
				return EXIT_USAGE;
			break;
		default: return cli_usage_error(cmd, "unexpected option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(cmd, "needs exactly one IN.ibp");
	if (!spec || !out)
		return cli_usage_error(cmd, "needs --ids and --out");
	const char *in = argv[optind];

	/* Parse a random: spec before opening anything (usage errors first). */
	int is_random = !strncmp(spec, "random:", 7);
	uint64_t nrand = 0, seed = 1;
	if (is_random) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%s", spec + 7);
		char *colon = strchr(buf, ':');
		if (colon)
			*colon = '\0';
		if (cli_parse_u64(cmd, "--ids random:N", buf, &nrand))
			return EXIT_USAGE;
		if (colon && cli_parse_u64(cmd, "--ids random:N:SEED", colon + 1, &seed))
			return EXIT_USAGE;
		if (nrand > (1ull << 40))
			return cli_usage_error(cmd, "--ids random:N: N is too large");
	}

	ibp_store_t *st;
	ibp_status_t s = ibp_store_open(in, IBP_OPEN_MMAP, &st);
	if (s != IBP_OK)
		return cli_fail_status(cmd, in, s);
	int64_t *ids = NULL;
	uint64_t n = 0;
	int rc = EXIT_OK;
	uint64_t nrows = ibp_store_nrows(st);
	if (is_random) {
		if (nrand && !nrows) {
			rc = cli_fail(cmd, in, "the container has no rows to draw from");
			goto out;
		}
		ids = malloc(nrand ? nrand * sizeof(int64_t) : 1);
		if (!ids) {
			rc = cli_fail(cmd, NULL, "out of memory for %llu ids", (unsigned long long)nrand);
			goto out;
		}
		uint64_t x = seed;
		for (uint64_t i = 0; i < nrand; i++)
			ids[i] = (int64_t)(splitmix64(&x) % nrows);
		n = nrand;
	} else {
		rc = read_id_file(cmd, spec, &ids, &n);
		if (rc != EXIT_OK)
			goto out;
	}
	double secs = 0;
	rc = cli_decode_to_npy(cmd, st, ids, n, out, nthreads, &secs);
	if (rc == EXIT_OK) {
		char b[32];
		uint64_t bytes = n * ibp_store_row_bytes(st);
		printf("%s: gathered %llu rows (%s) into %s in %.3f s (%.2f GB/s)\n", in, (unsigned long long)n,
		       cli_bytes(bytes, b, sizeof(b)), out, secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0);
	}
out:
	free(ids);
	ibp_store_close(st);
	return rc;
}
