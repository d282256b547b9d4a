/* bench.c - `ibp bench IN.npy`: IBP against zstd and lz4 on the same rows.
 *
 * Also libibp's exponent and FP8 codecs. Every method is timed for encode
 * and decode, on one thread and on all threads, with CLOCK_MONOTONIC; each
 * figure is the median of several runs (at least 5, until ~0.25 s are
 * spent; one run is enough past 2 s). Every lossless decode is compared with
 * the input byte for byte, outside the timed region; a mismatch fails
 * (exit 2). FP8 decodes must repeat the first one exactly.
 * GB/s = uncompressed bytes / second / 1e9.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ibp/unstable.h"
#include "json.h"
#include "progress.h"
#ifdef IBP_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef IBP_HAVE_LZ4
#include <lz4.h>
#endif

const char *const help_bench =
	"usage: ibp bench IN.npy [options]\n"
	"\n"
	"Compare IBP with libibp's exponent codec (lossless) and FP8 codec (lossy),\n"
	"and with zstd -1, zstd -3 and lz4, on the rows of IN.npy (rows = dimension\n"
	"0). Prints one table: compression ratio and encode / decode GB/s\n"
	"(uncompressed bytes per second) on one thread and on all threads, for IBP\n"
	"(portable, BMI2 and AVX-512 code paths) and for each other method both per\n"
	"row (every row compressed on its own: random access, like IBP) and per\n"
	"64 KiB block (exp and fp8: f32, bf16 and f16 data only). Also the ratio of\n"
	"the IBP paper's layout, the FP8 error, and a one-line takeaway. Each time\n"
	"is the median of repeated runs; every lossless decode is checked byte for\n"
	"byte against the input (a mismatch exits with status 2). Then a random-row\n"
	"gather of 65536 random ids (fewer past 256 MiB): a plain memcpy of the rows,\n"
	"ibp_store_gather over a packed copy (a temporary file in $TMPDIR), and zstd -1\n"
	"and lz4 decoding each id's row, on one and on all threads, each output\n"
	"checked against the plain gather.\n"
	"\n"
	"options:\n"
	"  --threads N        'all threads' column uses N threads (default 0 = all CPUs)\n"
	"  --repeat N         exactly N timed runs per figure (default: at least 5,\n"
	"                     until ~0.25 s per figure)\n"
	"  --max-mb M         use at most the first M MiB of rows (default 64; 0 = all)\n"
	"  --chunk, --threshold, --sample, --clusters, --seed\n"
	"                     IBP training options, as for `ibp pack`\n"
	"  --dtype bf16       read a '<u2' or '|V2' array as bfloat16\n"
	"  --json             print one JSON object on stdout instead of the table\n"
	"  -h, --help         this text\n";

#define BLOCK_BYTES (64u << 10)
#define GATHER_IDS 65536u /* random ids of the gather (fewer past 256 MiB of rows) */

typedef struct bench {
	const char *in;
	const uint8_t *data;
	uint64_t nrows, rb, total;
	int nt; /* "all threads" */
	uint8_t *out;
	int repeat; /* 0 = time-based */
	progress_t *pg;
	unsigned step, nsteps;
} bench_t;

typedef struct result {
	char name[32]; /* "ibp", "zstd -1", ... */
	char unit[16]; /* "portable", "bmi2", "row", "64K" */
	int available;
	char why[64];
	uint64_t bytes;
	double ratio;
	double enc[2], dec[2]; /* GB/s on 1 thread and on all; NAN = not measured */
	int timed;             /* 0: ratio only */
	int lossy;             /* fp8: decodes are checked for determinism, not equality */
	double rel_l2;         /* lossy: ||decoded - input||_2 / ||input||_2 */
} result_t;

/* ---- timing ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One run of a method: 0 ok, else an exit status (message printed). */
typedef int (*run_fn)(void *ctx, int nthreads);
/* After a decode run: 0 if the output matches the input. */
typedef int (*check_fn)(bench_t *b, void *ctx, const char *what);

static int check_out(bench_t *b, void *ctx, const char *what)
{
	(void)ctx;
	if (b->total && memcmp(b->out, b->data, b->total) != 0) {
		uint64_t i = 0;
		while (b->out[i] == b->data[i])
			i++;
		progress_end(b->pg);
		b->pg = NULL;
		return cli_fail("bench", b->in, "round trip mismatch: %s: first difference at byte %llu (row %llu)",
				what, (unsigned long long)i, (unsigned long long)(i / b->rb));
	}
	return 0;
}

/* Times fn: a warm-up run (checked too), then the median of timed runs.
 * *gbps gets total bytes / median seconds / 1e9. */
static int measure(bench_t *b, const char *what, run_fn fn, void *ctx, int nthreads, check_fn check,
		   double *gbps)
{
	double times[64];
	int n = 0, rc;
	char step[160];
	snprintf(step, sizeof(step), "%.96s, %d thread%s (%u/%u)", what, nthreads, nthreads == 1 ? "" : "s",
		 b->step + 1, b->nsteps);
	progress_step(b->pg, step);
	if (check)
		memset(b->out, 0x5A, b->total);
	double t0 = cli_now();
	if ((rc = fn(ctx, nthreads)) != 0)
		return rc;
	double first = cli_now() - t0;
	if (check && (rc = check(b, ctx, step)) != 0)
		return rc;
	/* A slow first run is already warm enough to count. */
	if (first > 0.5 && !b->repeat)
		times[n++] = first;
	double spent = first;
	for (;;) {
		if (b->repeat ? n >= b->repeat : (n >= 5 && spent >= 0.25) || n >= 50 || (n >= 1 && spent >= 2.0))
			break;
		if (n == (int)(sizeof(times) / sizeof(times[0])))
			break;
		if (check)
			memset(b->out, 0x5A, b->total);
		t0 = cli_now();
		if ((rc = fn(ctx, nthreads)) != 0)
			return rc;
		double t = cli_now() - t0;
		times[n++] = t;
		spent += t;
		if (check && (rc = check(b, ctx, step)) != 0)
			return rc;
	}
	qsort(times, (size_t)n, sizeof(double), cmp_double);
	double med = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
	*gbps = med > 0 ? (double)b->total / med / 1e9 : NAN;
	b->step++;
	progress_update(b->pg, b->step);
	return 0;
}

/* Encode and decode on 1 and on all threads into r->enc / r->dec; `check`
 * judges every decode. */
static int measure_pair_checked(bench_t *b, result_t *r, run_fn enc, run_fn dec, void *ctx, check_fn check)
{
	char what[96];
	int rc;
	for (int t = 0; t < 2; t++) {
		int nt = t ? b->nt : 1;
		if (t && b->nt == 1) {
			r->enc[1] = r->enc[0];
			r->dec[1] = r->dec[0];
			break;
		}
		snprintf(what, sizeof(what), "%.31s %.15s encode", r->name, r->unit);
		if ((rc = measure(b, what, enc, ctx, nt, NULL, &r->enc[t])) != 0)
			return rc;
		snprintf(what, sizeof(what), "%.31s %.15s decode", r->name, r->unit);
		if ((rc = measure(b, what, dec, ctx, nt, check, &r->dec[t])) != 0)
			return rc;
	}
	r->timed = 1;
	return 0;
}

/* The same, every decode compared with the input byte for byte. */
static int measure_pair(bench_t *b, result_t *r, run_fn enc, run_fn dec, void *ctx)
{
	return measure_pair_checked(b, r, enc, dec, ctx, check_out);
}

/* ---- IBP --------------------------------------------------------------- */

typedef struct ibp_ctx {
	bench_t *b;
	ibp_codec_t *codec;
	uint8_t *payload, *flags, *clusters;
	uint8_t *cl; /* clusters, or NULL with one cluster */
	uint64_t cap, *offsets;
	ibp_status_t err;
} ibp_ctx_t;

static int ibp_enc(void *p, int nt)
{
	ibp_ctx_t *c = p;
	bench_t *b = c->b;
	ibp_status_t s = ibp_encode_batch(c->codec, b->data, b->nrows, c->payload, c->cap, c->offsets, c->flags,
					  c->cl, nt);
	if (s != IBP_OK) {
		progress_end(b->pg);
		b->pg = NULL;
		return cli_fail_status("bench", b->in, s);
	}
	return 0;
}

static int ibp_dec(void *p, int nt)
{
	ibp_ctx_t *c = p;
	bench_t *b = c->b;
	ibp_status_t s = ibp_decode_batch(c->codec, c->payload, c->offsets[b->nrows], c->offsets, c->flags,
					  c->cl, b->nrows, b->out, nt);
	if (s != IBP_OK) {
		progress_end(b->pg);
		b->pg = NULL;
		return cli_fail_status("bench", b->in, s);
	}
	return 0;
}

/* ---- zstd / lz4, per row or per block ---------------------------------- */

enum { GEN_ZSTD, GEN_LZ4 };

typedef struct gen {
	bench_t *b;
	int kind, level;
	uint64_t usz, nunits, cap; /* unit size, units, slot size */
	uint8_t *comp;
	uint64_t *clen;
	void **cctx, **dctx; /* per thread (zstd) */
	int nctx;
	volatile int failed;
} gen_t;

static uint64_t unit_len(const gen_t *g, uint64_t i)
{
	uint64_t off = i * g->usz;
	return g->b->total - off < g->usz ? g->b->total - off : g->usz;
}

static void gen_enc_range(gen_t *g, uint64_t a, uint64_t e, int tid)
{
	for (uint64_t i = a; i < e; i++) {
		const uint8_t *src = g->b->data + i * g->usz;
		uint8_t *dst = g->comp + i * g->cap;
		uint64_t n = unit_len(g, i), r = 0;
#ifdef IBP_HAVE_ZSTD
		if (g->kind == GEN_ZSTD) {
			size_t z = ZSTD_compressCCtx(g->cctx[tid], dst, g->cap, src, n, g->level);
			r = ZSTD_isError(z) ? 0 : z;
		}
#endif
#ifdef IBP_HAVE_LZ4
		if (g->kind == GEN_LZ4)
			r = (uint64_t)LZ4_compress_default((const char *)src, (char *)dst, (int)n, (int)g->cap);
#endif
		(void)tid;
		(void)src;
		(void)dst;
		if (!r && n) {
			g->failed = 1;
			return;
		}
		g->clen[i] = r;
	}
}

static void gen_dec_range(gen_t *g, uint64_t a, uint64_t e, int tid)
{
	for (uint64_t i = a; i < e; i++) {
		const uint8_t *src = g->comp + i * g->cap;
		uint8_t *dst = g->b->out + i * g->usz;
		uint64_t n = unit_len(g, i);
		int ok = 0;
#ifdef IBP_HAVE_ZSTD
		if (g->kind == GEN_ZSTD) {
			size_t z = ZSTD_decompressDCtx(g->dctx[tid], dst, n, src, g->clen[i]);
			ok = !ZSTD_isError(z) && z == n;
		}
#endif
#ifdef IBP_HAVE_LZ4
		if (g->kind == GEN_LZ4)
			ok = LZ4_decompress_safe((const char *)src, (char *)dst, (int)g->clen[i], (int)n) == (int)n;
#endif
		(void)tid;
		(void)src;
		(void)dst;
		(void)n;
		if (!ok) {
			g->failed = 1;
			return;
		}
	}
}

typedef struct job {
	gen_t *g;
	int dec, tid;
	uint64_t a, e;
} job_t;

static void *job_main(void *p)
{
	job_t *j = p;
	if (j->dec)
		gen_dec_range(j->g, j->a, j->e, j->tid);
	else
		gen_enc_range(j->g, j->a, j->e, j->tid);
	return NULL;
}

/* Splits the units into nt contiguous ranges; the caller's thread takes
 * the first. */
static int gen_run(gen_t *g, int nt, int dec)
{
	job_t jobs[256];
	pthread_t th[256];
	int running[256] = {0};
	if (nt > 256)
		nt = 256;
	if ((uint64_t)nt > g->nunits)
		nt = g->nunits ? (int)g->nunits : 1;
	g->failed = 0;
	for (int t = 0; t < nt; t++)
		jobs[t] = (job_t){g, dec, t, g->nunits * (uint64_t)t / (uint64_t)nt,
				  g->nunits * (uint64_t)(t + 1) / (uint64_t)nt};
	for (int t = 1; t < nt; t++) {
		running[t] = pthread_create(&th[t], NULL, job_main, &jobs[t]) == 0;
		if (!running[t])
			job_main(&jobs[t]); /* no thread: do it here */
	}
	job_main(&jobs[0]);
	for (int t = 1; t < nt; t++)
		if (running[t])
			pthread_join(th[t], NULL);
	if (g->failed) {
		progress_end(g->b->pg);
		g->b->pg = NULL;
		return cli_fail("bench", g->b->in, "%s %s failed", g->kind == GEN_ZSTD ? "zstd" : "lz4",
				dec ? "decompression" : "compression");
	}
	return 0;
}

static int gen_enc(void *p, int nt) { return gen_run(p, nt, 0); }
static int gen_dec(void *p, int nt) { return gen_run(p, nt, 1); }

static void gen_free(gen_t *g)
{
#ifdef IBP_HAVE_ZSTD
	for (int i = 0; i < g->nctx; i++) {
		if (g->cctx)
			ZSTD_freeCCtx(g->cctx[i]);
		if (g->dctx)
			ZSTD_freeDCtx(g->dctx[i]);
	}
#endif
	free(g->cctx);
	free(g->dctx);
	free(g->comp);
	free(g->clen);
}

/* Runs one general-purpose method. Sets r->available = 0 with a reason if
 * it cannot run (not built in, too large). */
static int bench_gen(bench_t *b, result_t *r, int kind, int level, int per_row, gen_t *keep)
{
	gen_t g;
	memset(&g, 0, sizeof(g));
	g.b = b;
	g.kind = kind;
	g.level = level;
	g.usz = per_row ? b->rb : BLOCK_BYTES;
	g.nunits = b->total ? (b->total + g.usz - 1) / g.usz : 0;
	uint64_t usz = g.usz < b->total ? g.usz : b->total;
	(void)usz; /* unused without zstd and lz4 */
	int rc = 0;
	if (kind == GEN_ZSTD) {
#ifdef IBP_HAVE_ZSTD
		g.cap = ZSTD_compressBound(usz);
		g.nctx = b->nt;
		g.cctx = calloc((size_t)g.nctx, sizeof(void *));
		g.dctx = calloc((size_t)g.nctx, sizeof(void *));
		for (int i = 0; g.cctx && g.dctx && i < g.nctx; i++) {
			g.cctx[i] = ZSTD_createCCtx();
			g.dctx[i] = ZSTD_createDCtx();
		}
#else
		snprintf(r->why, sizeof(r->why), "not built with zstd");
		return 0;
#endif
	} else {
#ifdef IBP_HAVE_LZ4
		if (usz > LZ4_MAX_INPUT_SIZE) {
			snprintf(r->why, sizeof(r->why), "rows over lz4's 2 GB limit");
			return 0;
		}
		g.cap = (uint64_t)LZ4_compressBound((int)usz);
#else
		snprintf(r->why, sizeof(r->why), "not built with lz4");
		return 0;
#endif
	}
	uint64_t slots;
	if (__builtin_mul_overflow(g.nunits, g.cap, &slots) || slots > SIZE_MAX)
		slots = UINT64_MAX;
	/* Tiny rows make per-row bounds (frame overheads) dwarf the data. */
	uint64_t limit = 4 * b->total > (256ull << 20) ? 4 * b->total : (256ull << 20);
	if (slots > limit) {
		gen_free(&g);
		snprintf(r->why, sizeof(r->why), "skipped: would need %.1f GiB of buffers",
			 slots == UINT64_MAX ? INFINITY : (double)slots / (1ull << 30));
		return 0;
	}
	g.comp = malloc(slots ? slots : 1);
	g.clen = malloc((g.nunits ? g.nunits : 1) * sizeof(uint64_t));
	if (!g.comp || !g.clen || (kind == GEN_ZSTD && (!g.cctx || !g.dctx))) {
		gen_free(&g);
		snprintf(r->why, sizeof(r->why), "out of memory");
		return 0;
	}
#ifdef IBP_HAVE_ZSTD
	for (int i = 0; kind == GEN_ZSTD && i < g.nctx; i++)
		if (!g.cctx[i] || !g.dctx[i]) {
			gen_free(&g);
			snprintf(r->why, sizeof(r->why), "out of memory");
			return 0;
		}
#endif
	/* Pre-touch the output slots so the first timed run pays no page faults. */
	memset(g.comp, 0, slots);
	r->available = 1;
	rc = measure_pair(b, r, gen_enc, gen_dec, &g);
	if (rc == 0) {
		r->bytes = 0;
		for (uint64_t i = 0; i < g.nunits; i++)
			r->bytes += g.clen[i];
	}
	if (rc == 0 && keep) {
		*keep = g; /* the gather decodes its rows later; the caller frees it */
		return 0;
	}
	gen_free(&g);
	return rc;
}

/* ---- random-row gather ------------------------------------------------- */

/* A gather of `n` random ids into gb->out, split over threads in
 * contiguous ranges: plain memcpy of the rows, ibp_store_gather, or a
 * per-row zstd / lz4 decode of each id's row. gb is a bench_t whose data
 * is the expected gather (the plain one) and whose total is n rows, so
 * measure() and check_out() time and verify it like any decode. */
enum { GAT_PLAIN, GAT_IBP, GAT_GEN };

typedef struct gat {
	bench_t *b;  /* the table */
	bench_t *gb; /* the gather's output and expected bytes */
	const int64_t *ids;
	uint64_t n;
	int kind;
	ibp_store_t *store;
	gen_t *g;
	volatile int failed;
} gat_t;

typedef struct gat_job {
	gat_t *a;
	int tid;
	uint64_t lo, hi;
} gat_job_t;

static void *gat_range(void *p)
{
	gat_job_t *j = p;
	gat_t *a = j->a;
	const uint64_t rb = a->b->rb;
	for (uint64_t i = j->lo; i < j->hi; i++) {
		const uint64_t row = (uint64_t)a->ids[i];
		uint8_t *dst = a->gb->out + i * rb;
		if (a->kind == GAT_PLAIN) {
			memcpy(dst, a->b->data + row * rb, rb);
			continue;
		}
		int ok = 0;
		const gen_t *g = a->g;
		const uint8_t *src = g->comp + row * g->cap;
#ifdef IBP_HAVE_ZSTD
		if (g->kind == GEN_ZSTD) {
			size_t z = ZSTD_decompressDCtx(g->dctx[j->tid], dst, rb, src, g->clen[row]);
			ok = !ZSTD_isError(z) && z == rb;
		}
#endif
#ifdef IBP_HAVE_LZ4
		if (g->kind == GEN_LZ4)
			ok = LZ4_decompress_safe((const char *)src, (char *)dst, (int)g->clen[row], (int)rb) == (int)rb;
#endif
		(void)src;
		if (!ok) {
			a->failed = 1;
			return NULL;
		}
	}
	return NULL;
}

static int gat_run(void *p, int nt)
{
	gat_t *a = p;
	if (a->kind == GAT_IBP) {
		ibp_status_t s = ibp_store_gather(a->store, a->ids, a->n, a->gb->out, nt);
		if (s != IBP_OK) {
			progress_end(a->gb->pg);
			a->gb->pg = NULL;
			return cli_fail_status("bench", a->b->in, s);
		}
		return 0;
	}
	gat_job_t jobs[256];
	pthread_t th[256];
	int running[256] = {0};
	if (nt > 256)
		nt = 256;
	if (a->kind == GAT_GEN && a->g->kind == GEN_ZSTD && nt > a->g->nctx)
		nt = a->g->nctx > 0 ? a->g->nctx : 1; /* one zstd context per thread */
	a->failed = 0;
	for (int t = 0; t < nt; t++)
		jobs[t] = (gat_job_t){a, t, a->n * (uint64_t)t / (uint64_t)nt, a->n * (uint64_t)(t + 1) / (uint64_t)nt};
	for (int t = 1; t < nt; t++) {
		running[t] = pthread_create(&th[t], NULL, gat_range, &jobs[t]) == 0;
		if (!running[t])
			gat_range(&jobs[t]);
	}
	gat_range(&jobs[0]);
	for (int t = 1; t < nt; t++)
		if (running[t])
			pthread_join(th[t], NULL);
	if (a->failed) {
		progress_end(a->gb->pg);
		a->gb->pg = NULL;
		return cli_fail("bench", a->b->in, "per-row decompression failed in the gather");
	}
	return 0;
}

/* Times the gather of `a` on 1 and on all threads into gbps[2], every
 * output compared with the plain gather. */
static int gat_measure(gat_t *a, const char *what, double gbps[2])
{
	int rc;
	for (int t = 0; t < 2; t++) {
		const int nt = t ? a->b->nt : 1;
		if (t && a->b->nt == 1) {
			gbps[1] = gbps[0];
			break;
		}
		a->gb->pg = a->b->pg;
		a->gb->step = a->b->step;
		rc = measure(a->gb, what, gat_run, a, nt, a->kind == GAT_PLAIN ? NULL : check_out, &gbps[t]);
		a->b->pg = a->gb->pg;
		a->b->step = a->gb->step;
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- the exponent and FP8 codecs, per row or per 64 KiB block ---------- */

/* A value codec (exp or fp8) over units of whole elements: one row, or 64 KiB
 * of the rows as one stream (as the zstd/lz4 units). */
typedef struct val {
	bench_t *b;
	int fp8;
	ibp_dtype_t dt;
	uint64_t es, n, unit_elems, nunits;
	uint64_t cap;      /* exp: capacity of comp; fp8: stride of one stream */
	uint8_t *comp;     /* exp: blocks back to back; fp8: one stream per stride */
	uint64_t *off;     /* exp: nunits + 1 block offsets */
	uint64_t *len;     /* fp8: size of each stream */
	uint8_t *ref;      /* fp8: the first decode; every later one must equal it */
	int have_ref;
	double rel_l2;     /* fp8: error of the first decode */
	ibp_exp_opts_t eo;
	ibp_fp8_opts_t fo;
	pthread_mutex_t lock;
	ibp_status_t err;  /* first failure of a worker, and its detail */
	char msg[160];
} val_t;

static uint64_t val_unit_elems(const val_t *v, uint64_t u)
{
	uint64_t a = u * v->unit_elems;
	return v->n - a < v->unit_elems ? v->n - a : v->unit_elems;
}

/* Records a worker's failure (its detail is thread-local). */
static void val_failed(val_t *v, ibp_status_t s)
{
	pthread_mutex_lock(&v->lock);
	if (v->err == IBP_OK) {
		v->err = s;
		snprintf(v->msg, sizeof(v->msg), "%s", ibp_last_error());
	}
	pthread_mutex_unlock(&v->lock);
}

typedef struct vjob {
	val_t *v;
	int dec;
	uint64_t a, e;
} vjob_t;

static void *fp8_job(void *p)
{
	vjob_t *j = p;
	val_t *v = j->v;
	for (uint64_t u = j->a; u < j->e; u++) {
		uint64_t k = val_unit_elems(v, u);
		uint8_t *src = (uint8_t *)v->b->data + u * v->unit_elems * v->es;
		uint8_t *dst = v->b->out + u * v->unit_elems * v->es;
		ibp_status_t s = j->dec ? ibp_fp8_decode(v->comp + u * v->cap, v->len[u], v->dt, k, dst, 1)
					: ibp_fp8_encode(src, v->dt, k, &v->fo, v->comp + u * v->cap, v->cap,
							 &v->len[u]);
		if (s != IBP_OK) {
			val_failed(v, s);
			return NULL;
		}
	}
	return NULL;
}

/* FP8: the streams split into nt contiguous ranges, one per thread. */
static int fp8_run(val_t *v, int nt, int dec)
{
	vjob_t jobs[256];
	pthread_t th[256];
	int running[256] = {0};
	if ((uint64_t)nt > v->nunits)
		nt = (int)v->nunits;
	for (int t = 0; t < nt; t++)
		jobs[t] = (vjob_t){v, dec, v->nunits * (uint64_t)t / (uint64_t)nt,
				   v->nunits * (uint64_t)(t + 1) / (uint64_t)nt};
	for (int t = 1; t < nt; t++) {
		running[t] = pthread_create(&th[t], NULL, fp8_job, &jobs[t]) == 0;
		if (!running[t])
			fp8_job(&jobs[t]);
	}
	fp8_job(&jobs[0]);
	for (int t = 1; t < nt; t++)
		if (running[t])
			pthread_join(th[t], NULL);
	return 0;
}

static int val_enc(void *p, int nt)
{
	val_t *v = p;
	if (v->fp8) {
		fp8_run(v, nt, 0);
	} else {
		v->eo.nthreads = nt;
		ibp_status_t s = ibp_exp_encode_batch(v->b->data, v->dt, v->n, v->unit_elems, &v->eo, v->comp,
						      v->cap, v->off);
		if (s != IBP_OK)
			val_failed(v, s);
	}
	if (v->err != IBP_OK) {
		progress_end(v->b->pg);
		v->b->pg = NULL;
		return cli_fail("bench", v->b->in, "%s encode: %s", v->fp8 ? "fp8" : "exp", v->msg);
	}
	return 0;
}

static int val_dec(void *p, int nt)
{
	val_t *v = p;
	if (v->fp8) {
		fp8_run(v, nt, 1);
	} else {
		ibp_status_t s = ibp_exp_decode_batch(v->comp, v->off[v->nunits], v->off, v->dt, v->n, v->unit_elems,
						      v->b->out, nt);
		if (s != IBP_OK)
			val_failed(v, s);
	}
	if (v->err != IBP_OK) {
		progress_end(v->b->pg);
		v->b->pg = NULL;
		return cli_fail("bench", v->b->in, "%s decode: %s", v->fp8 ? "fp8" : "exp", v->msg);
	}
	return 0;
}

/* Element i of `p` (f32, bf16 or f16) as a double. */
static double val_elem(const uint8_t *p, ibp_dtype_t dt, uint64_t i)
{
	uint16_t h;
	if (dt == IBP_DTYPE_F32) {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
	memcpy(&h, p + 2 * i, 2);
	if (dt == IBP_DTYPE_BF16) {
		uint32_t u = (uint32_t)h << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	int e = (h >> 10) & 31, m = h & 0x3FF;
	double mag = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return h & 0x8000 ? -mag : mag;
}

/* FP8 is lossy: the first decode gives the error against the input and is
 * kept; every later decode must reproduce it byte for byte. */
static int check_fp8(bench_t *b, void *ctx, const char *what)
{
	val_t *v = ctx;
	if (!v->have_ref) {
		double err2 = 0, ref2 = 0;
		for (uint64_t i = 0; i < v->n; i++) {
			double x = val_elem(b->data, v->dt, i), y = val_elem(b->out, v->dt, i);
			if (!isfinite(x))
				continue; /* non-finite inputs have no error to speak of */
			double d = isfinite(y) ? y - x : INFINITY;
			err2 += d * d;
			ref2 += x * x;
		}
		v->rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0);
		memcpy(v->ref, b->out, b->total);
		v->have_ref = 1;
		return 0;
	}
	if (memcmp(b->out, v->ref, b->total) != 0) {
		progress_end(b->pg);
		b->pg = NULL;
		return cli_fail("bench", b->in, "%s: two decodes of the same FP8 streams differ", what);
	}
	return 0;
}

/* Runs the exp (fp8 = 0) or FP8 codec with one unit per row (per_row) or per
 * 64 KiB. Sets r->available = 0 with a reason if the dtype does not suit. */
static int bench_val(bench_t *b, result_t *r, ibp_dtype_t dt, int fp8, int per_row, double *rel_l2)
{
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16) {
		snprintf(r->why, sizeof(r->why), "f32, bf16 and f16 only%s",
			 dt == IBP_DTYPE_U16 ? "; bf16 stored as u16: --dtype bf16" : "");
		return 0;
	}
	val_t v;
	memset(&v, 0, sizeof(v));
	v.b = b;
	v.fp8 = fp8;
	v.dt = dt;
	v.es = ibp_dtype_size(dt);
	v.n = b->total / v.es;
	v.unit_elems = per_row ? b->rb / v.es : BLOCK_BYTES / v.es;
	if (v.unit_elems == 0 || v.n == 0) {
		snprintf(r->why, sizeof(r->why), "no elements");
		return 0;
	}
	v.nunits = (v.n + v.unit_elems - 1) / v.unit_elems;
	ibp_exp_opts_default(&v.eo);
	ibp_fp8_opts_default(&v.fo);
	v.fo.nthreads = 1; /* threads work on different streams */
	ibp_status_t s;
	uint64_t slots = 0;
	if (fp8) {
		s = ibp_fp8_encoded_size(&v.fo, v.unit_elems, &v.cap);
		if (s == IBP_OK && __builtin_mul_overflow(v.cap, v.nunits, &slots))
			s = IBP_ERR_NOMEM;
	} else {
		s = ibp_exp_batch_bound(dt, v.n, v.unit_elems, &v.cap);
		slots = v.cap;
	}
	if (s != IBP_OK || slots > SIZE_MAX) {
		snprintf(r->why, sizeof(r->why), "cannot size the buffers: %.30s", ibp_status_string(s));
		return 0;
	}
	pthread_mutex_init(&v.lock, NULL);
	v.comp = malloc(slots ? slots : 1);
	v.off = malloc((v.nunits + 1) * sizeof(uint64_t));
	v.len = calloc(v.nunits + 1, sizeof(uint64_t));
	v.ref = fp8 ? malloc(b->total) : NULL;
	int rc = 0;
	if (!v.comp || !v.off || !v.len || (fp8 && !v.ref)) {
		snprintf(r->why, sizeof(r->why), "out of memory");
	} else {
		memset(v.comp, 0, slots); /* no page faults in the first timed run */
		r->available = 1;
		rc = measure_pair_checked(b, r, val_enc, val_dec, &v, fp8 ? check_fp8 : check_out);
		if (rc == 0) {
			r->bytes = fp8 ? 0 : v.off[v.nunits];
			for (uint64_t u = 0; fp8 && u < v.nunits; u++)
				r->bytes += v.len[u];
			*rel_l2 = v.rel_l2;
		}
	}
	free(v.comp);
	free(v.off);
	free(v.len);
	free(v.ref);
	pthread_mutex_destroy(&v.lock);
	return rc;
}

/* ---- the takeaway -------------------------------------------------------- */

/* Lossless, timed, and any row readable alone: IBP, or a method per row. */
static int row_access(const result_t *r)
{
	return r->available && r->timed && !r->lossy && !isnan(r->ratio) &&
	       (strcmp(r->name, "ibp") == 0 || strcmp(r->unit, "row") == 0);
}

static int is_ibp(const result_t *r) { return strcmp(r->name, "ibp") == 0; }

/* Index of the best row-access result by ratio (key 0) or by 1-thread decode
 * speed (key 1), among IBP (want_ibp 1), the others (0) or all (-1); with
 * min_ratio, only those whose ratio exceeds it. -1 if none. */
static int best_of(const result_t *res, int n, int key, int want_ibp, double min_ratio)
{
	int best = -1;
	for (int i = 0; i < n; i++) {
		const result_t *r = &res[i];
		if (!row_access(r) || (want_ibp >= 0 && is_ibp(r) != want_ibp) || !(r->ratio > min_ratio))
			continue;
		double v = key ? r->dec[0] : r->ratio;
		if (isnan(v))
			continue;
		if (best < 0 || v > (key ? res[best].dec[0] : res[best].ratio))
			best = i;
	}
	return best;
}

static const char *label(const result_t *r, char *buf, size_t cap)
{
	if (is_ibp(r) && strcmp(r->unit, "portable") != 0)
		snprintf(buf, cap, "ibp %s", r->unit);
	else if (is_ibp(r))
		snprintf(buf, cap, "ibp");
	else
		snprintf(buf, cap, "%s %s", r->name, r->unit);
	return buf;
}

/* The takeaway's text (printed after "takeaway (lossless, random row
 * access): "): which lossless method with random row access compresses best
 * and which decodes fastest (among those that shrink the data), each with
 * its margin over IBP or, when IBP wins, over the next method. */
static void takeaway(const result_t *res, int n, char *out, size_t cap)
{
	char a[48], c[48];
	int w = best_of(res, n, 0, -1, -INFINITY);
	if (w < 0) {
		snprintf(out, cap, "no method ran");
		return;
	}
	int other = is_ibp(&res[w]) ? best_of(res, n, 0, 0, -INFINITY) : best_of(res, n, 0, 1, -INFINITY);
	size_t len = (size_t)snprintf(out, cap, "best ratio %s %.3f",
				      is_ibp(&res[w]) ? "ibp" : label(&res[w], a, sizeof(a)), res[w].ratio);
	if (other >= 0 && len < cap)
		len += (size_t)snprintf(out + len, cap - len, " (%.2fx %s)", res[w].ratio / res[other].ratio,
					is_ibp(&res[other]) ? "ibp" : label(&res[other], c, sizeof(c)));
	if (len >= cap)
		return;
	out += len;
	cap -= len;
	int f = best_of(res, n, 1, -1, 1.0);
	if (f < 0) {
		snprintf(out, cap, "; none of them shrinks this data");
		return;
	}
	other = is_ibp(&res[f]) ? best_of(res, n, 1, 0, 1.0) : best_of(res, n, 1, 1, -INFINITY);
	len = (size_t)snprintf(out, cap, "; fastest decode %s %.2f GB/s on 1 thread", label(&res[f], a, sizeof(a)),
			       res[f].dec[0]);
	if (other >= 0 && len < cap)
		snprintf(out + len, cap - len, " (%.1fx %s)", res[f].dec[0] / res[other].dec[0],
			 label(&res[other], c, sizeof(c)));
}

/* ---- the command -------------------------------------------------------- */

static void print_gbps(double v)
{
	if (isnan(v))
		printf(" %8s", "-");
	else
		printf(" %8.3f", v);
}

typedef struct bench_opts {
	uint64_t repeat, max_mb;
} bench_opts_t;

static int bench_option(void *ctx, int code, const char *arg)
{
	bench_opts_t *p = ctx;
	if (code == OPT_REPEAT) {
		if (cli_parse_u64("bench", "--repeat", arg, &p->repeat))
			return -1;
		if (p->repeat < 1 || p->repeat > 50) {
			cli_usage_error("bench", "--repeat must be 1..50");
			return -1;
		}
		return 1;
	}
	if (code == OPT_MAX_MB) {
		if (cli_parse_u64("bench", "--max-mb", arg, &p->max_mb))
			return -1;
		if (p->max_mb > (1ull << 30)) {
			cli_usage_error("bench", "--max-mb is too large");
			return -1;
		}
		return 1;
	}
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	static const int opts[] = {OPT_THREADS, OPT_REPEAT, OPT_MAX_MB, CLI_OPTS_TRAIN, OPT_DTYPE, OPT_JSON, 0};
	const cli_spec_t sp = {"bench", help_bench, opts, "exactly one IN.npy", 1};
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	bench_opts_t bo = {0, 64};
	cli_args_t args = {.train = &o, .other = bench_option, .ctx = &bo};
	int c = cli_parse_args(&sp, &args, argc, argv);
	if (c != CLI_PARSED)
		return c;
	const char *cmd = sp.cmd, *in = args.operands[0];
	unsigned npy_flags = args.npy_flags;
	int as_json = args.json, nthreads = args.nthreads;
	uint64_t repeat = bo.repeat, max_mb = bo.max_mb;
	if ((c = cli_check_input(cmd, in, 0)) != EXIT_OK)
		return c;
	if (nthreads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
	}
	if (nthreads > 256)
		nthreads = 256;
	o.nthreads = nthreads;

	ibp_npy_info_t info;
	void *data = NULL;
	uint64_t nrows_all, rb;
	int rc = cli_load_rows(cmd, in, npy_flags, &info, &data, &nrows_all, &rb);
	if (rc != EXIT_OK)
		return rc;
	bench_t b;
	memset(&b, 0, sizeof(b));
	b.in = in;
	b.data = data;
	b.rb = rb;
	b.nt = nthreads;
	b.repeat = (int)repeat;
	b.nrows = nrows_all;
	if (max_mb && nrows_all * rb > (max_mb << 20)) {
		b.nrows = (max_mb << 20) / rb;
		if (b.nrows == 0)
			b.nrows = 1;
	}
	b.total = b.nrows * rb;
	if (b.nrows == 0) {
		ibp_npy_free(data);
		return cli_fail(cmd, in, "the array has no rows to benchmark");
	}

	enum { R_IBP_PORT, R_IBP_BMI2, R_IBP_AVX512, R_PAPER, R_EXP_ROW, R_EXP_BLK, R_FP8_ROW, R_FP8_BLK,
	       R_Z1_ROW, R_Z1_BLK, R_Z3_ROW, R_Z3_BLK, R_LZ4_ROW, R_LZ4_BLK, NRES };
	result_t res[NRES];
	memset(res, 0, sizeof(res));
	static const char *names[NRES][2] = {
		{"ibp", "portable"}, {"ibp", "bmi2"},   {"ibp", "avx512"}, {"ibp paper layout", "row"},
		{"exp", "row"},      {"exp", "64K"},    {"fp8 e4m3, lossy", "row"}, {"fp8 e4m3, lossy", "64K"},
		{"zstd -1", "row"},  {"zstd -1", "64K"}, {"zstd -3", "row"},
		{"zstd -3", "64K"},  {"lz4", "row"},     {"lz4", "64K"},
	};
	for (int i = 0; i < NRES; i++) {
		snprintf(res[i].name, sizeof(res[i].name), "%s", names[i][0]);
		snprintf(res[i].unit, sizeof(res[i].unit), "%s", names[i][1]);
		res[i].enc[0] = res[i].enc[1] = res[i].dec[0] = res[i].dec[1] = NAN;
	}

	ibp_ctx_t ic;
	memset(&ic, 0, sizeof(ic));
	ic.b = &b;
	b.out = malloc(b.total);
	ic.cap = b.total;
	ic.payload = malloc(b.total);
	ic.offsets = malloc((b.nrows + 1) * sizeof(uint64_t));
	ic.flags = malloc(b.nrows);
	ic.clusters = malloc(b.nrows);
	uint8_t *ref = malloc(b.total), *ref_flags = malloc(b.nrows), *ref_cl = malloc(b.nrows);
	if (!b.out || !ic.payload || !ic.offsets || !ic.flags || !ic.clusters || !ref || !ref_flags || !ref_cl) {
		rc = cli_fail(cmd, in, "out of memory");
		goto out;
	}
	memset(b.out, 0, b.total);
	memset(ic.payload, 0, b.total);

	b.nsteps = (b.nt == 1 ? 2 : 4) * 13 + (b.nt == 1 ? 1 : 2) * 4; /* timed methods, gathers */
	b.pg = progress_start("bench", b.nsteps);
	progress_step(b.pg, "training");
	double t0 = cli_now();
	ibp_status_t s = ibp_codec_train(b.data, b.nrows, rb, &o, &ic.codec);
	double t_train = cli_now() - t0;
	if (s != IBP_OK) {
		progress_end(b.pg);
		b.pg = NULL;
		rc = cli_fail_status(cmd, in, s);
		goto out;
	}
	unsigned k = ibp_codec_nclusters(ic.codec);
	ic.cl = k > 1 ? ic.clusters : NULL;
	/* Mask and Bitval, plus the Xval table when the codec has one; the
	 * paper layout has no Xvals. */
	uint64_t table = ibp_codec_nchunks(ic.codec) * ibp_codec_chunk_bytes(ic.codec) * k;
	uint64_t meta = (2 + (ibp_codec_has_xval(ic.codec) ? 1 : 0)) * table, paper_meta = 2 * table;
	uint64_t per_row_meta = b.nrows * (k > 1 ? 2 : 1); /* flags (+ cluster ids) */

	/* IBP, portable, BMI2 then AVX-512; all must write the same bytes. */
	static const ibp_impl_t impls[3] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX512 };
	static const char *lacks[3] = { "unavailable", "CPU or build lacks BMI2",
					"CPU or build lacks AVX-512 VBMI" };
	for (int which = 0; which < 3 && rc == EXIT_OK; which++) {
		result_t *r = &res[R_IBP_PORT + which];
		s = ibp_codec_set_impl(ic.codec, impls[which]);
		if (s != IBP_OK) {
			snprintf(r->why, sizeof(r->why), "%s", lacks[which]);
			continue;
		}
		r->available = 1;
		rc = measure_pair(&b, r, ibp_enc, ibp_dec, &ic);
		if (rc != EXIT_OK)
			break;
		uint64_t plen = ic.offsets[b.nrows];
		r->bytes = plen + per_row_meta + meta;
		if (which == 0) {
			memcpy(ref, ic.payload, plen);
			memcpy(ref_flags, ic.flags, b.nrows);
			if (ic.cl)
				memcpy(ref_cl, ic.cl, b.nrows);
		} else if (plen != res[R_IBP_PORT].bytes - per_row_meta - meta || memcmp(ref, ic.payload, plen) ||
			   memcmp(ref_flags, ic.flags, b.nrows) || (ic.cl && memcmp(ref_cl, ic.cl, b.nrows))) {
			progress_end(b.pg);
			b.pg = NULL;
			rc = cli_fail(cmd, in, "the CPU paths of the IBP encoder wrote different bytes");
		}
	}
	if (rc != EXIT_OK)
		goto out;
	ibp_codec_set_impl(ic.codec, IBP_IMPL_AUTO);
	res[R_PAPER].available = 1;
	res[R_PAPER].bytes = ibp_paper_layout_size(ic.codec, b.data, b.nrows) + per_row_meta + paper_meta;

	static const struct {
		int idx, kind, level, per_row;
	} gens[] = {
		{R_Z1_ROW, GEN_ZSTD, 1, 1}, {R_Z1_BLK, GEN_ZSTD, 1, 0}, {R_Z3_ROW, GEN_ZSTD, 3, 1},
		{R_Z3_BLK, GEN_ZSTD, 3, 0}, {R_LZ4_ROW, GEN_LZ4, 0, 1}, {R_LZ4_BLK, GEN_LZ4, 0, 0},
	};
	/* The value codecs: exp (lossless) and FP8 (lossy), per row and per 64K. */
	for (int i = R_EXP_ROW; i <= R_FP8_BLK && rc == EXIT_OK; i++) {
		res[i].lossy = i >= R_FP8_ROW;
		rc = bench_val(&b, &res[i], info.dtype, i >= R_FP8_ROW, i == R_EXP_ROW || i == R_FP8_ROW,
			       &res[i].rel_l2);
	}
	gen_t keep_z1, keep_lz4;
	memset(&keep_z1, 0, sizeof(keep_z1));
	memset(&keep_lz4, 0, sizeof(keep_lz4));
	for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]) && rc == EXIT_OK; i++)
		rc = bench_gen(&b, &res[gens[i].idx], gens[i].kind, gens[i].level, gens[i].per_row,
			       gens[i].idx == R_Z1_ROW ? &keep_z1 : gens[i].idx == R_LZ4_ROW ? &keep_lz4 : NULL);

	/* Random-row gather (issue 16): the same random ids gathered plainly
	 * (memcpy of the uncompressed rows), by ibp_store_gather over a packed
	 * copy of the rows (a temporary file, the trained codec), and by zstd -1
	 * and lz4 decoding each id's own row. */
	enum { G_PLAIN, G_IBP, G_Z1, G_LZ4, NGAT };
	static const char *gat_name[NGAT] = { "plain memcpy", "ibp", "zstd -1 row", "lz4 row" };
	double gat_gbps[NGAT][2];
	int gat_have[NGAT] = { 0 };
	char gat_why[NGAT][64];
	memset(gat_why, 0, sizeof(gat_why));
	uint64_t gn = (256ull << 20) / rb < GATHER_IDS ? (256ull << 20) / rb : GATHER_IDS;
	if (gn == 0)
		gn = 1;
	int64_t *gids = malloc(gn * sizeof(int64_t));
	uint8_t *gref = malloc(gn * rb), *gout = malloc(gn * rb);
	ibp_store_t *gstore = NULL;
	if (rc == EXIT_OK && (!gids || !gref || !gout)) {
		progress_end(b.pg);
		b.pg = NULL;
		rc = cli_fail(cmd, in, "out of memory for the gather");
	}
	if (rc == EXIT_OK) {
		uint64_t seed = 16;
		for (uint64_t i = 0; i < gn; i++) {
			uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
			z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
			z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
			gids[i] = (int64_t)((z ^ (z >> 31)) % b.nrows);
		}
		for (uint64_t i = 0; i < gn; i++)
			memcpy(gref + i * rb, b.data + (uint64_t)gids[i] * rb, rb);
		memset(gout, 0, gn * rb);
		/* the store reads a packed file: a temporary one, removed at once */
		const char *td = getenv("TMPDIR");
		char tmp[512];
		snprintf(tmp, sizeof(tmp), "%s/ibp_bench_XXXXXX", td && *td ? td : "/tmp");
		int fd = mkstemp(tmp);
		if (fd < 0) {
			snprintf(gat_why[G_IBP], sizeof(gat_why[G_IBP]), "no temporary file");
		} else {
			close(fd);
			uint64_t shape[2] = { b.nrows, rb };
			s = ibp_pack_with_codec(tmp, ic.codec, b.data, IBP_DTYPE_U8, 2, shape, IBP_LAYOUT_PACKED, b.nt);
			if (s == IBP_OK)
				s = ibp_store_open(tmp, IBP_OPEN_READ, &gstore);
			if (s != IBP_OK)
				snprintf(gat_why[G_IBP], sizeof(gat_why[G_IBP]), "%.60s", ibp_status_string(s));
			unlink(tmp);
		}
		bench_t gb = b;
		gb.data = gref;
		gb.out = gout;
		gb.total = gn * rb;
		gb.nrows = gn;
		gen_t *gg[NGAT] = { NULL, NULL, keep_z1.comp ? &keep_z1 : NULL, keep_lz4.comp ? &keep_lz4 : NULL };
		if (!gg[G_Z1])
			snprintf(gat_why[G_Z1], sizeof(gat_why[G_Z1]), "%s", res[R_Z1_ROW].why);
		if (!gg[G_LZ4])
			snprintf(gat_why[G_LZ4], sizeof(gat_why[G_LZ4]), "%s", res[R_LZ4_ROW].why);
		for (int m = 0; m < NGAT && rc == EXIT_OK; m++) {
			gat_gbps[m][0] = gat_gbps[m][1] = NAN;
			if ((m == G_IBP && !gstore) || (m >= G_Z1 && !gg[m]))
				continue;
			gat_t a = { &b, &gb, gids, gn, m == G_PLAIN ? GAT_PLAIN : m == G_IBP ? GAT_IBP : GAT_GEN,
				    gstore, gg[m], 0 };
			char what[64];
			snprintf(what, sizeof(what), "gather %s", gat_name[m]);
			rc = gat_measure(&a, what, gat_gbps[m]);
			gat_have[m] = rc == EXIT_OK;
		}
	}
	ibp_store_close(gstore);
	gen_free(&keep_z1);
	gen_free(&keep_lz4);
	free(gids);
	free(gref);
	free(gout);
	progress_end(b.pg);
	b.pg = NULL;
	if (rc != EXIT_OK)
		goto out;
	for (int i = 0; i < NRES; i++)
		res[i].ratio = res[i].available && res[i].bytes ? (double)b.total / (double)res[i].bytes : NAN;

	char sh[256], b1[32], take[400];
	takeaway(res, NRES, take, sizeof(take));
	if (as_json) {
		json_t j;
		json_init(&j, stdout);
		json_begin_object(&j);
		json_kv_string(&j, "file", in);
		json_kv_string(&j, "dtype", ibp_dtype_name(info.dtype));
		json_kv_shape(&j, "shape", info.shape, info.ndim);
		json_kv_uint(&j, "rows", b.nrows);
		json_kv_uint(&j, "rows_in_file", nrows_all);
		json_kv_uint(&j, "row_bytes", rb);
		json_kv_uint(&j, "bytes", b.total);
		json_kv_uint(&j, "threads", (uint64_t)b.nt);
		json_kv_bool(&j, "verified", 1);
		json_key(&j, "codec");
		json_begin_object(&j);
		json_kv_uint(&j, "chunk_bytes", ibp_codec_chunk_bytes(ic.codec));
		json_kv_double(&j, "threshold", ibp_codec_threshold(ic.codec));
		json_kv_uint(&j, "clusters", k);
		json_kv_uint(&j, "metadata_bytes", meta);
		json_kv_double(&j, "train_seconds", t_train);
		json_end_object(&j);
		json_key(&j, "methods");
		json_begin_array(&j);
		for (int i = 0; i < NRES; i++) {
			result_t *r = &res[i];
			json_begin_object(&j);
			json_kv_string(&j, "name", r->name);
			json_kv_string(&j, "unit", r->unit);
			json_kv_bool(&j, "available", r->available);
			if (!r->available) {
				json_kv_string(&j, "reason", r->why);
			} else {
				json_kv_uint(&j, "bytes", r->bytes);
				json_kv_double(&j, "ratio", r->ratio);
				if (!r->timed) {
					json_end_object(&j);
					continue;
				}
				json_kv_double(&j, "encode_gbps_1t", r->enc[0]);
				json_kv_double(&j, "encode_gbps_all", r->enc[1]);
				json_kv_double(&j, "decode_gbps_1t", r->dec[0]);
				json_kv_double(&j, "decode_gbps_all", r->dec[1]);
				json_kv_bool(&j, "lossy", r->lossy);
				if (r->lossy)
					json_kv_double(&j, "rel_l2_err", r->rel_l2);
			}
			json_end_object(&j);
		}
		json_end_array(&j);
		json_key(&j, "gather");
		json_begin_object(&j);
		json_kv_uint(&j, "ids", gn);
		json_key(&j, "methods");
		json_begin_array(&j);
		for (int m = 0; m < NGAT; m++) {
			json_begin_object(&j);
			json_kv_string(&j, "name", gat_name[m]);
			json_kv_bool(&j, "available", gat_have[m]);
			if (gat_have[m]) {
				json_kv_double(&j, "gbps_1t", gat_gbps[m][0]);
				json_kv_double(&j, "gbps_all", gat_gbps[m][1]);
			} else {
				json_kv_string(&j, "reason", gat_why[m]);
			}
			json_end_object(&j);
		}
		json_end_array(&j);
		json_end_object(&j);
		json_kv_string(&j, "takeaway", take);
		json_end_object(&j);
	} else {
		printf("%s: %s %s", in, ibp_dtype_name(info.dtype), cli_shape(info.shape, info.ndim, sh, sizeof(sh)));
		if (b.nrows < nrows_all)
			printf(", first %llu of %llu rows (--max-mb)", (unsigned long long)b.nrows,
			       (unsigned long long)nrows_all);
		char rows[48];
		printf("\n  %s x %llu B = %s; IBP chunk %u B, T=%.2f, %u cluster%s (trained in %.3f s)\n",
		       cli_count(b.nrows, "row", "rows", rows, sizeof(rows)), (unsigned long long)rb,
		       cli_bytes(b.total, b1, sizeof(b1)),
		       ibp_codec_chunk_bytes(ic.codec), ibp_codec_threshold(ic.codec), k, k == 1 ? "" : "s", t_train);
		printf("  GB/s = uncompressed bytes / s, median of repeated runs; every lossless decode verified\n"
		       "  byte-exact\n\n");
		char hdr[32];
		snprintf(hdr, sizeof(hdr), "%dT", b.nt);
		printf("%-18s %-9s %7s %8s %8s %8s %8s\n", "method", "unit", "ratio", "enc 1T", "enc", "dec 1T", "dec");
		printf("%-18s %-9s %7s %8s %8s %8s %8s\n", "", "", "", "GB/s", hdr, "GB/s", hdr);
		for (int i = 0; i < NRES; i++) {
			result_t *r = &res[i];
			printf("%-18s %-9s", r->name, r->unit);
			if (!r->available) {
				printf(" %7s   (%s)\n", "-", r->why);
				continue;
			}
			printf(" %7.3f", r->ratio);
			print_gbps(r->enc[0]);
			print_gbps(r->enc[1]);
			print_gbps(r->dec[0]);
			print_gbps(r->dec[1]);
			printf("\n");
		}
		printf("\nratio = raw bytes / compressed bytes. IBP counts payload, 1 flags byte per row%s and\n"
		       "the Mask/Bitval%s metadata (%llu B); the paper layout counts the same extras (%llu B of\n"
		       "metadata: it has no Xvals); exp its blocks, fp8 its streams. Row and block offsets\n"
		       "(needed by every method for random access) are left out everywhere.\n",
		       k > 1 ? " + 1 cluster byte" : "", ibp_codec_has_xval(ic.codec) ? "/Xval" : "",
		       (unsigned long long)meta, (unsigned long long)paper_meta);
		if (res[R_FP8_ROW].available || res[R_FP8_BLK].available)
			printf("fp8 is lossy (E4M3, Hadamard blocks of 256): relative L2 error %.2f%% (row), %.2f%% (64K);\n"
			       "its decodes are checked to be deterministic, not equal to the input.\n",
			       100 * res[R_FP8_ROW].rel_l2, 100 * res[R_FP8_BLK].rel_l2);
		printf("\nrandom-row gather of %llu random ids (GB/s of rows gathered; every output verified\n"
		       "against the plain gather; ibp through a store over a packed copy):\n",
		       (unsigned long long)gn);
		printf("%-26s %8s %8s %9s\n", "", "1T", hdr, "1T/plain");
		for (int m = 0; m < NGAT; m++) {
			printf("gather %-19s", gat_name[m]);
			if (!gat_have[m]) {
				printf(" %8s   (%s)\n", "-", gat_why[m]);
				continue;
			}
			print_gbps(gat_gbps[m][0]);
			print_gbps(gat_gbps[m][1]);
			printf(" %8.0f%%\n", 100.0 * gat_gbps[m][0] / gat_gbps[G_PLAIN][0]);
		}
		printf("\ntakeaway (lossless, random row access): %s\n", take);
	}
out:
	progress_end(b.pg);
	ibp_codec_free(ic.codec);
	free(ref);
	free(ref_flags);
	free(ref_cl);
	free(ic.payload);
	free(ic.offsets);
	free(ic.flags);
	free(ic.clusters);
	free(b.out);
	ibp_npy_free(data);
	return rc;
}
