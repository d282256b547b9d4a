/* cmd_cache_sim.c - `ibp cache-sim STORE.ibp --trace SPEC --capacity C
 * --policy P`: runs the slab cache's CPU twin (ibp/cache.h) over a trace of
 * batches and compares no cache, a cache of decoded rows and the cache of
 * compressed rows at the same byte budget. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ibp/cache.h"
#include "json.h"

/* Transfer model: PCIe bytes at 55 GB/s plus a per-row request overhead
 * (about 1 us of latency spread over ~50 reads in flight). */
#define MODEL_BW 55e9
#define MODEL_ROW_S 20e-9

const char *const help_cache_sim =
	"usage: ibp cache-sim STORE.ibp --trace SPEC --capacity C [options]\n"
	"\n"
	"Run the slab cache of compressed rows (its CPU twin) over a trace of\n"
	"batches of row ids and report, side by side, no cache, a cache of decoded\n"
	"rows (fixed-width slots) and the compressed slab cache at the same byte\n"
	"budget: hit rate, rows resident at the end, PCIe bytes (the stored bytes of\n"
	"the rows read from the host store, once per batch) and a modelled transfer\n"
	"time (PCIe bytes at 55 GB/s plus 20 ns per row read). Every row is really\n"
	"decoded, from the cache or from the store.\n"
	"\n"
	"SPEC:\n"
	"  zipf:ALPHA[:N[:SEED]]  N requests (default 1048576) drawn from a Zipf law\n"
	"                    of exponent ALPHA over the rows (rank order a fixed random\n"
	"                    permutation of SEED, default 1), cut into --batch batches\n"
	"  FILE              a text file, one batch per line: decimal ids separated by\n"
	"                    white space or commas ('#' starts a comment)\n"
	"\n"
	"options:\n"
	"  --capacity C      cache bytes: BYTES (K, M, G suffixes: KiB, MiB, GiB) or\n"
	"                    PCT% of the decoded table (required)\n"
	"  --policy P        static | clock | s3fifo | lru (default s3fifo); static\n"
	"                    preloads the rows most frequent in the trace\n"
	"  --batch B         ids per batch of a zipf trace (default 4096)\n"
	"  --class-step S    size classes S apart in the compressed cache (default:\n"
	"                    auto, a ladder from 32 bytes, 16 apart up to 128, then\n"
	"                    ~1.125x apart, gaps at most 128)\n"
	"  --json            one JSON object on stdout instead of the table\n"
	"  -h, --help        this text\n"
	"\n"
	"IBP containers only (the exp and fp8 codecs read rows by blocks).\n";

typedef struct sim_args {
	const char *trace, *capacity;
	ibp_cache_policy_t policy;
	uint64_t batch, class_step;
} sim_args_t;

static int sim_option(void *ctx, int code, const char *arg)
{
	sim_args_t *a = ctx;
	switch (code) {
	case OPT_TRACE:
		a->trace = arg;
		return 1;
	case OPT_CAPACITY:
		a->capacity = arg;
		return 1;
	case OPT_POLICY:
		if (!strcmp(arg, "static"))
			a->policy = IBP_CACHE_STATIC;
		else if (!strcmp(arg, "clock"))
			a->policy = IBP_CACHE_CLOCK;
		else if (!strcmp(arg, "s3fifo"))
			a->policy = IBP_CACHE_S3FIFO;
		else if (!strcmp(arg, "lru"))
			a->policy = IBP_CACHE_LRU;
		else
			return cli_usage_error("cache-sim", "--policy must be static, clock, s3fifo or lru, not '%s'",
					       arg),
			       -1;
		return 1;
	case OPT_BATCH:
		if (cli_parse_u64("cache-sim", "--batch", arg, &a->batch))
			return -1;
		if (!a->batch || a->batch > (1u << 24))
			return cli_usage_error("cache-sim", "--batch must be in [1, 16777216]"), -1;
		return 1;
	case OPT_CLASS_STEP:
		if (cli_parse_u64("cache-sim", "--class-step", arg, &a->class_step))
			return -1;
		if (a->class_step < 16 || a->class_step > 65536 || (a->class_step & (a->class_step - 1)))
			return cli_usage_error("cache-sim", "--class-step must be a power of two in [16, 65536]"), -1;
		return 1;
	}
	return 0;
}

typedef struct trace {
	int64_t *ids;
	uint64_t *off; /* nb + 1 batch offsets */
	uint64_t n, nb, max_batch, distinct;
	char desc[96];
} trace_t;

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static int trace_alloc(trace_t *t, uint64_t n, uint64_t nb)
{
	t->ids = malloc((n ? n : 1) * sizeof(int64_t));
	t->off = malloc((nb + 1) * sizeof(uint64_t));
	return t->ids && t->off;
}

static int zipf_trace(const char *spec, uint64_t nrows, uint64_t batch, trace_t *t)
{
	const char *cmd = "cache-sim";
	char *end;
	errno = 0;
	double alpha = strtod(spec + 5, &end);
	uint64_t n = 1u << 20, seed = 1;
	if (end == spec + 5 || errno || !(alpha >= 0 && alpha <= 10))
		return cli_usage_error(cmd, "--trace zipf:ALPHA needs ALPHA in [0, 10]");
	if (*end == ':') {
		const char *p = end + 1;
		errno = 0;
		n = strtoull(p, &end, 10);
		if (end == p || errno || !n || n > (1ull << 32))
			return cli_usage_error(cmd, "--trace zipf:ALPHA:N needs N in [1, 2^32]");
		if (*end == ':') {
			p = end + 1;
			seed = strtoull(p, &end, 10);
			if (end == p)
				return cli_usage_error(cmd, "--trace zipf:ALPHA:N:SEED needs a decimal SEED");
		}
	}
	if (*end)
		return cli_usage_error(cmd, "--trace: unexpected '%s' in '%s'", end, spec);
	if ((uint64_t)n * 8 > cli_mem_limit())
		return cli_fail(cmd, NULL, "a trace of %llu ids exceeds the memory limit", (unsigned long long)n);
	uint64_t nb = (n + batch - 1) / batch;
	double *cdf = malloc(nrows * sizeof(double));
	int64_t *perm = malloc(nrows * sizeof(int64_t));
	if (!cdf || !perm || !trace_alloc(t, n, nb)) {
		free(cdf);
		free(perm);
		return cli_fail(cmd, NULL, "out of memory");
	}
	double acc = 0;
	for (uint64_t r = 0; r < nrows; r++)
		cdf[r] = acc += pow((double)(r + 1), -alpha);
	uint64_t x = seed * 0x5851F42D4C957F2Dull + 17;
	for (uint64_t i = 0; i < nrows; i++)
		perm[i] = (int64_t)i;
	for (uint64_t i = nrows; i > 1; i--) { /* rank -> row: a fixed shuffle */
		uint64_t j = splitmix64(&x) % i;
		int64_t tmp = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = tmp;
	}
	for (uint64_t i = 0; i < n; i++) {
		double u = (double)(splitmix64(&x) >> 11) * 0x1p-53 * acc;
		uint64_t lo = 0, hi = nrows - 1;
		while (lo < hi) {
			uint64_t mid = (lo + hi) / 2;
			if (cdf[mid] > u)
				hi = mid;
			else
				lo = mid + 1;
		}
		t->ids[i] = perm[lo];
	}
	for (uint64_t b = 0; b <= nb; b++)
		t->off[b] = b * batch < n ? b * batch : n;
	t->n = n;
	t->nb = nb;
	t->max_batch = n < batch ? n : batch;
	snprintf(t->desc, sizeof(t->desc), "zipf:%g:%llu:%llu", alpha, (unsigned long long)n,
		 (unsigned long long)seed);
	free(cdf);
	free(perm);
	return EXIT_OK;
}

/* One batch per line of decimal ids. */
static int file_trace(const char *path, uint64_t nrows, trace_t *t)
{
	const char *cmd = "cache-sim";
	int rc = cli_check_input(cmd, path, 1);
	if (rc != EXIT_OK)
		return rc;
	FILE *f = fopen(path, "r");
	if (!f)
		return cli_fail(cmd, path, "cannot open: %s", strerror(errno));
	uint64_t cap = 1024, bcap = 64, n = 0, nb = 0, line = 1, limit = cli_mem_limit() / 8;
	t->ids = malloc(cap * sizeof(int64_t));
	t->off = malloc(bcap * sizeof(uint64_t));
	t->off[0] = 0;
	rc = t->ids && t->off ? EXIT_OK : cli_fail(cmd, NULL, "out of memory");
	int ch = getc(f);
	while (rc == EXIT_OK) {
		if (ch == EOF || ch == '\n') {
			if (n > t->off[nb]) { /* close a non-empty batch */
				if (nb + 2 > bcap) {
					uint64_t *o = realloc(t->off, 2 * bcap * sizeof(uint64_t));
					if (!o) {
						rc = cli_fail(cmd, NULL, "out of memory");
						break;
					}
					t->off = o;
					bcap *= 2;
				}
				t->off[++nb] = n;
			}
			if (ch == EOF)
				break;
			line++;
			ch = getc(f);
		} else if (ch == '#') {
			while (ch != EOF && ch != '\n')
				ch = getc(f);
		} else if (ch == ',' || isspace(ch)) {
			ch = getc(f);
		} else if (isdigit(ch)) {
			uint64_t v = 0;
			int big = 0;
			while (isdigit(ch)) {
				if (v > (UINT64_MAX - 9) / 10)
					big = 1;
				v = v * 10 + (uint64_t)(ch - '0');
				ch = getc(f);
			}
			if (ch != EOF && ch != ',' && ch != '#' && !isspace(ch)) {
				rc = cli_fail(cmd, path, "line %llu: not a decimal id", (unsigned long long)line);
				break;
			}
			if (big || v >= nrows) {
				rc = cli_fail(cmd, path, "line %llu: id %s outside [0, %llu)", (unsigned long long)line,
					      big ? "(too large)" : "", (unsigned long long)nrows);
				if (!big)
					fprintf(stderr, "ibp cache-sim: the id is %llu\n", (unsigned long long)v);
				break;
			}
			if (n == cap) {
				int64_t *p = cap * 2 <= limit ? realloc(t->ids, 2 * cap * sizeof(int64_t)) : NULL;
				if (!p) {
					rc = cli_fail(cmd, path, "more ids than the memory limit allows");
					break;
				}
				t->ids = p;
				cap *= 2;
			}
			t->ids[n++] = (int64_t)v;
		} else {
			rc = cli_fail(cmd, path, "line %llu: not a decimal id", (unsigned long long)line);
		}
	}
	if (rc == EXIT_OK && ferror(f))
		rc = cli_fail(cmd, path, "read error");
	fclose(f);
	if (rc == EXIT_OK && !nb)
		rc = cli_fail(cmd, path, "no ids in the trace");
	if (rc != EXIT_OK)
		return rc;
	t->n = n;
	t->nb = nb;
	t->max_batch = 0;
	for (uint64_t b = 0; b < nb; b++)
		if (t->off[b + 1] - t->off[b] > t->max_batch)
			t->max_batch = t->off[b + 1] - t->off[b];
	const char *base = strrchr(path, '/');
	snprintf(t->desc, sizeof(t->desc), "%s", base ? base + 1 : path);
	return EXIT_OK;
}

typedef struct result {
	uint64_t requests, hits, rows_read, pcie_bytes, resident, bytes_resident, slot_bytes, evictions,
		insertions, meta_bytes, slab_moves;
	double seconds;
} result_t;

static double model_s(const result_t *r)
{
	return (double)r->pcie_bytes / MODEL_BW + (double)r->rows_read * MODEL_ROW_S;
}

/* No cache: every distinct row of a batch is read from the store. */
static int run_none(const ibp_container_t *ct, const trace_t *t, result_t *r)
{
	uint64_t nrows = ibp_container_nrows(ct);
	uint32_t *seen = calloc(nrows ? nrows : 1, sizeof(uint32_t));
	if (!seen)
		return cli_fail("cache-sim", NULL, "out of memory");
	memset(r, 0, sizeof(*r));
	for (uint64_t b = 0; b < t->nb; b++)
		for (uint64_t i = t->off[b]; i < t->off[b + 1]; i++) {
			r->requests++;
			uint64_t id = (uint64_t)t->ids[i];
			if (seen[id] == b + 1)
				continue;
			if (!seen[id])
				((trace_t *)t)->distinct++;
			seen[id] = (uint32_t)(b + 1);
			const uint8_t *src;
			uint64_t len;
			if (ibp_container_row(ct, id, &src, &len) != IBP_OK) {
				free(seen);
				return cli_fail_status("cache-sim", ibp_container_name(ct), IBP_ERR_INTERNAL);
			}
			r->rows_read++;
			r->pcie_bytes += len;
		}
	free(seen);
	return EXIT_OK;
}

static int run_cache(ibp_store_t *st, const trace_t *t, uint64_t capacity, ibp_cache_policy_t pol, uint32_t flags,
		     uint64_t class_step, const float *score, result_t *r)
{
	const char *cmd = "cache-sim";
	uint64_t rb = ibp_store_row_bytes(st);
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = capacity;
	o.row_bytes = rb;
	o.policy = pol;
	o.flags = flags;
	o.class_step = class_step;
	o.max_batch = t->max_batch;
	o.max_callers = 1;
	ibp_cache_t *c;
	ibp_status_t s = ibp_cache_create(&o, &c);
	if (s != IBP_OK)
		return cli_fail_status(cmd, NULL, s);
	uint8_t *out = malloc(t->max_batch * rb);
	if (!out) {
		ibp_cache_free(c);
		return cli_fail(cmd, NULL, "out of memory");
	}
	double t0 = cli_now();
	if (pol == IBP_CACHE_STATIC)
		s = ibp_cache_preload(c, st, score, ibp_store_nrows(st), NULL);
	ibp_cache_stats_t cs;
	ibp_cache_stats(c, &cs, 1); /* the preload's reads are not the trace's */
	for (uint64_t b = 0; b < t->nb && s == IBP_OK; b++)
		s = ibp_cache_gather(c, st, t->ids + t->off[b], t->off[b + 1] - t->off[b], out, NULL, NULL, 0, NULL);
	double t1 = cli_now();
	free(out);
	if (s != IBP_OK) {
		ibp_cache_free(c);
		return cli_fail_status(cmd, NULL, s);
	}
	ibp_cache_stats(c, &cs, 0);
	ibp_cache_free(c);
	*r = (result_t){ cs.requests, cs.hits, cs.store_rows, cs.store_bytes, cs.rows_resident, cs.bytes_resident,
			 cs.slot_bytes_used, cs.evictions, cs.insertions, cs.meta_bytes, cs.slab_moves, t1 - t0 };
	return EXIT_OK;
}

static int parse_capacity(const char *s, uint64_t table, uint64_t *cap, double *pct)
{
	const char *cmd = "cache-sim";
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v > 0))
		return cli_usage_error(cmd, "--capacity must be BYTES or PCT%%, not '%s'", s);
	if (!strcmp(end, "%")) {
		if (v > 100)
			return cli_usage_error(cmd, "--capacity %s is above 100%%", s);
		*cap = (uint64_t)(v / 100 * (double)table);
	} else {
		double m = !*end ? 1 : !strcmp(end, "K") ? 1024.0 : !strcmp(end, "M") ? 1048576.0
							 : !strcmp(end, "G") ? 1073741824.0 : 0;
		if (!m || v * m > 1.8e19)
			return cli_usage_error(cmd, "--capacity must be BYTES[K|M|G] or PCT%%, not '%s'", s);
		*cap = (uint64_t)(v * m);
	}
	*pct = table ? 100.0 * (double)*cap / (double)table : 0;
	if (!*cap)
		return cli_usage_error(cmd, "--capacity %s is 0 bytes", s);
	return EXIT_OK;
}

static void json_result(json_t *j, const char *k, const result_t *r)
{
	json_key(j, k);
	json_begin_object(j);
	json_kv_uint(j, "requests", r->requests);
	json_kv_uint(j, "hits", r->hits);
	json_kv_double(j, "hit_rate", r->requests ? (double)r->hits / (double)r->requests : 0);
	json_kv_uint(j, "rows_resident", r->resident);
	json_kv_uint(j, "bytes_resident", r->bytes_resident);
	json_kv_uint(j, "slot_bytes_used", r->slot_bytes);
	json_kv_uint(j, "rows_read", r->rows_read);
	json_kv_uint(j, "pcie_bytes", r->pcie_bytes);
	json_kv_double(j, "model_seconds", model_s(r));
	json_kv_uint(j, "insertions", r->insertions);
	json_kv_uint(j, "evictions", r->evictions);
	json_kv_uint(j, "slab_moves", r->slab_moves);
	json_kv_uint(j, "meta_bytes", r->meta_bytes);
	json_kv_double(j, "seconds", r->seconds);
	json_end_object(j);
}

static void print_result(const char *name, const result_t *r)
{
	char b[32], m[32];
	printf("  %-13s %8.2f%% %14llu %14s %12.3f ms %12s\n", name,
	       r->requests ? 100.0 * (double)r->hits / (double)r->requests : 0.0, (unsigned long long)r->resident,
	       cli_bytes(r->pcie_bytes, b, sizeof(b)), 1e3 * model_s(r),
	       r->meta_bytes ? cli_bytes(r->meta_bytes, m, sizeof(m)) : "-");
}

int cmd_cache_sim(int argc, char **argv)
{
	const char *cmd = "cache-sim";
	static const int opts[] = { OPT_TRACE, OPT_CAPACITY, OPT_POLICY, OPT_BATCH, OPT_CLASS_STEP, OPT_JSON, 0 };
	const cli_spec_t spec = { cmd, help_cache_sim, opts, "exactly one STORE.ibp", 1 };
	sim_args_t sa = { NULL, NULL, IBP_CACHE_S3FIFO, 4096, 0 };
	cli_args_t a = { 0 };
	a.other = sim_option;
	a.ctx = &sa;
	int rc = cli_parse_args(&spec, &a, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	if (!sa.trace)
		return cli_usage_error(cmd, "needs --trace");
	if (!sa.capacity)
		return cli_usage_error(cmd, "needs --capacity");
	const char *path = a.operands[0];
	if ((rc = cli_check_input(cmd, path, 0)) != EXIT_OK)
		return rc;
	ibp_store_t *st;
	ibp_status_t s = ibp_store_open(path, IBP_OPEN_MMAP, &st);
	if (s != IBP_OK)
		return cli_fail_status(cmd, path, s);
	const ibp_container_t *ct = ibp_store_container(st);
	trace_t t = { 0 };
	float *score = NULL;
	uint64_t nrows = ibp_store_nrows(st), rb = ibp_store_row_bytes(st), cap = 0;
	double pct = 0;
	result_t none, unc, comp;
	if (ibp_container_codec_id(ct) != IBP_CODEC_IBP)
		rc = cli_fail(cmd, path, "cache-sim takes IBP containers, not %s",
			      cli_codec_name(ibp_container_codec_id(ct)));
	else if (!nrows)
		rc = cli_fail(cmd, path, "the container has no rows");
	else if (rb > IBP_CACHE_MAX_ROW_BYTES)
		rc = cli_fail(cmd, path, "rows of %llu bytes exceed the cache's limit", (unsigned long long)rb);
	if (rc == EXIT_OK)
		rc = parse_capacity(sa.capacity, nrows * rb, &cap, &pct);
	if (rc == EXIT_OK)
		rc = !strncmp(sa.trace, "zipf:", 5) ? zipf_trace(sa.trace, nrows, sa.batch, &t)
						      : file_trace(sa.trace, nrows, &t);
	if (rc == EXIT_OK && sa.policy == IBP_CACHE_STATIC) {
		/* The caller's score: each row's frequency in the trace. */
		score = calloc(nrows, sizeof(float));
		if (!score)
			rc = cli_fail(cmd, NULL, "out of memory");
		for (uint64_t i = 0; score && i < t.n; i++)
			score[t.ids[i]] += 1;
	}
	if (rc == EXIT_OK)
		rc = run_none(ct, &t, &none);
	if (rc == EXIT_OK)
		rc = run_cache(st, &t, cap, sa.policy, IBP_CACHE_UNCOMPRESSED, 0, score, &unc);
	if (rc == EXIT_OK)
		rc = run_cache(st, &t, cap, sa.policy, 0, sa.class_step, score, &comp);
	if (rc == EXIT_OK) {
		uint64_t payload = 0;
		ibp_container_payload(ct, &payload);
		double ratio = payload ? (double)(nrows * rb) / (double)payload : 0;
		double rows_x = unc.resident ? (double)comp.resident / (double)unc.resident : 0;
		/* Rows held: 0.9 x ratio times the uncompressed cache's, or (when
		 * the trace's rows fit) nine tenths of all the rows it touches. */
		double want = 0.9 * ratio * (double)unc.resident;
		if (want > 0.9 * (double)t.distinct)
			want = 0.9 * (double)t.distinct;
		int t_rows = (double)comp.resident >= want, t_pcie = comp.pcie_bytes < unc.pcie_bytes;
		const char *pol = ibp_cache_policy_name(sa.policy);
		if (a.json) {
			json_t j;
			json_init(&j, stdout);
			json_begin_object(&j);
			json_kv_string(&j, "store", path);
			json_kv_uint(&j, "rows", nrows);
			json_kv_uint(&j, "row_bytes", rb);
			json_kv_uint(&j, "payload_bytes", payload);
			json_kv_double(&j, "ratio", ratio);
			json_kv_string(&j, "trace", t.desc);
			json_kv_uint(&j, "batches", t.nb);
			json_kv_uint(&j, "requests", t.n);
			json_kv_uint(&j, "distinct_rows", t.distinct);
			json_kv_uint(&j, "capacity_bytes", cap);
			json_kv_double(&j, "capacity_pct", pct);
			json_kv_string(&j, "policy", pol);
			json_kv_double(&j, "model_bw_bytes_per_s", MODEL_BW);
			json_kv_double(&j, "model_row_seconds", MODEL_ROW_S);
			json_result(&j, "none", &none);
			json_result(&j, "uncompressed", &unc);
			json_result(&j, "compressed", &comp);
			json_kv_double(&j, "rows_resident_x", rows_x);
			json_kv_double(&j, "target_rows_resident", want);
			json_kv_bool(&j, "target_rows", t_rows);
			json_kv_bool(&j, "target_pcie", t_pcie);
			json_end_object(&j);
		} else {
			char b1[32], b2[32], b3[32];
			printf("store    %s: %llu rows x %llu bytes, ratio %.2f\n", path, (unsigned long long)nrows,
			       (unsigned long long)rb, ratio);
			printf("trace    %s: %llu requests in %llu batches, %llu distinct rows\n", t.desc,
			       (unsigned long long)t.n, (unsigned long long)t.nb, (unsigned long long)t.distinct);
			printf("cache    %s (%.2f%% of the decoded table), policy %s\n", cli_bytes(cap, b1, sizeof(b1)),
			       pct, pol);
			/* metadata: index, per-slot state, workspaces; outside the budget */
			printf("\n  %-13s %9s %14s %14s %15s %12s\n", "", "hit rate", "rows resident", "PCIe bytes",
			       "modelled time", "metadata");
			print_result("no cache", &none);
			print_result("uncompressed", &unc);
			print_result("compressed", &comp);
			printf("\nrows resident: compressed %.2fx the uncompressed; target %.0f rows (0.9 x ratio x "
			       "uncompressed, at most 0.9 x distinct): %s\n",
			       rows_x, want, t_rows ? "met" : "missed");
			printf("PCIe bytes: compressed %s, uncompressed %s: %s\n", cli_bytes(comp.pcie_bytes, b1, sizeof(b1)),
			       cli_bytes(unc.pcie_bytes, b2, sizeof(b2)), t_pcie ? "fewer (met)" : "not fewer (missed)");
			printf("metadata (index, per-slot state, workspaces) is outside the %s budget: compressed %s, "
			       "uncompressed %s\n", cli_bytes(cap, b1, sizeof(b1)), cli_bytes(comp.meta_bytes, b2, sizeof(b2)),
			       cli_bytes(unc.meta_bytes, b3, sizeof(b3)));
		}
	}
	free(score);
	free(t.ids);
	free(t.off);
	ibp_store_close(st);
	return rc;
}
