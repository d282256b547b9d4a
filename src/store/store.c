/* store.c - the CPU store: gather on a persistent worker pool.
 *
 * The pool is created once, on the first gather that wants more than one
 * thread, and lives until ibp_store_close. A job is posted by bumping a
 * generation counter; participating workers and the caller then claim
 * grains of the request from an atomic cursor, so uneven rows balance
 * out. The caller waits until every participant has left the job before
 * returning, so nothing of the job outlives the call. Nothing is allocated
 * per gather: the job and its error slot live in the store.
 * ibpi_store_run (store/pool.h) lends the same pool to other jobs of the
 * store (the embedding bag): tasks claimed from a counter, no thread
 * started per call.
 *
 * Exp and fp8 containers are encoded in blocks of many rows, so a row is
 * read by decoding its block into a scratch buffer and copying the row
 * out. The buffers ("slots") are allocated at open, one per thread that
 * may gather at once; a gathering thread holds one for its whole share of
 * the job and keeps the last block it decoded, so runs of ids in the same
 * block decode it once. decode_all decodes blocks straight into the
 * output instead.
 *
 * IBP rows are gathered as a pipeline in batches: while a batch decodes,
 * the row map records (O(1) lookup, io/container_internal.h) of the batch
 * after next have been prefetched and the next batch looked up and its
 * payload prefetched in one burst, so the page walks and cache misses of
 * random rows overlap with each other and the decoding (decode_rows_map).
 * Without a row map (over its memory cap) the index entry of the row d
 * ahead is read through the container and its payload prefetched
 * (decode_rows_ibp).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp/codec.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/container.h"
#include "ibp/alloc.h"
#include "ibp/store.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/fork.h"
#include "util/ids.h"
#include "bitpack/codec_internal.h"
#include "exp/exp_rows.h"
#include "io/container_internal.h"
#include "store/first_failure.h"
#include "store/pool.h"
#include "store/store_rows.h"

#define STORE_MAX_THREADS 256
#define GRAIN_BYTES (64u * 1024u) /* output bytes a worker claims at once */
#define SLOT_BYTES_MAX (1ull << 30) /* all block scratch together, beyond one slot */
#define NO_BLOCK UINT64_MAX
#define ROWMAP_MIN_CAP (64ull << 20) /* a row map may always take this much */

typedef unsigned long long ull;

struct ibp_store;

typedef struct worker {
	struct ibp_store *s;
	int index; /* 0-based among helpers */
} worker_t;

/* Block scratch of an exp/fp8 store. */
typedef struct slot {
	uint8_t *buf;   /* block_rows * R bytes */
	uint64_t block; /* block held in buf, or NO_BLOCK */
	int busy;       /* guarded by slot_mu */
} slot_t;

/* One gather request; `ids` NULL means rows 0 .. n-1, or with `blocks`
 * set blocks 0 .. n-1 of an exp/fp8 container (decode_all). */
typedef struct job {
	/* a lent job (ibpi_store_run): tasks [0, ntasks) of fn, else a gather */
	ibp_store_task_fn fn;
	void *ctx;
	int ntasks;
	atomic_int next_task;
	const int64_t *ids;
	int blocks;
	uint64_t n;
	uint8_t *out;
	uint64_t grain;
	atomic_uint_fast64_t next;
	atomic_int failed;
	/* first failure by position, guarded by the store's mutex */
	ibp_status_t err;
	uint64_t err_pos;
	char err_msg[256];
} job_t;

struct ibp_store {
	ibp_container_t *c;
	const ibp_codec_t *codec;
	uint64_t nrows, R;
	int packed;      /* IBP packed layout: rows must fill their extents */
	int max_threads; /* caller + helpers */
	uint64_t pf;     /* rows looked ahead by a gather, <= PF_MAX; 0 = none */
	uint64_t batch;  /* rows per batch of the row-map pipeline, 1 .. BATCH_MAX */
	uint64_t stage;  /* rows per staged batch (decode_rows_staged), 0: off */
	const uint8_t *pay_end; /* end of the payload (the staged copies stop there) */
	const ibp_rowmap_t *map; /* IBP: the container's row map, or NULL (walk the index) */

	/* exp rows (codec 4): the row form, the row offsets and the payload */
	const ibpi_exprows_t *xr;
	const uint8_t *xpay, *xovf; /* the slots, the overflow area */
	uint64_t xovf_len;
	int xisa; /* the decoder's build (ibpi_exprows_isa at open) */

	/* exp and fp8 (block codecs): nblk blocks of block_rows rows */
	int block_codec;
	uint64_t block_rows, nblk;
	slot_t *slots;
	int nslots;
	pthread_mutex_t slot_mu;
	pthread_cond_t slot_cv;

	pthread_mutex_t gather_mu; /* one pooled gather at a time; guards pool creation */
	pthread_mutex_t mu;        /* job hand-off */
	pthread_cond_t cv_work, cv_done;
	int pool_created;
	int nhelpers; /* threads actually running */
	pthread_t threads[STORE_MAX_THREADS];
	worker_t workers[STORE_MAX_THREADS];
	uint64_t gen;
	int shutdown;
	int job_helpers; /* helpers taking part in the current job */
	int done;        /* helpers that have left the current job */
	job_t job;
	/* ibpi_fork_generation() the threads and locks belong to: another
	 * value means a fork() child, which makes them again (after_fork) */
	atomic_uint_fast64_t fork_gen;
};

static int cpu_count(void)
{
	const int n = ibpi_cpus_allowed();
	return n > STORE_MAX_THREADS ? STORE_MAX_THREADS : n;
}

/* Takes a free block slot, waiting while all are in use (a holder only
 * decodes and returns it, so the wait ends). */
static slot_t *slot_get(ibp_store_t *s)
{
	pthread_mutex_lock(&s->slot_mu);
	for (;;) {
		for (int i = 0; i < s->nslots; i++)
			if (!s->slots[i].busy) {
				s->slots[i].busy = 1;
				pthread_mutex_unlock(&s->slot_mu);
				return &s->slots[i];
			}
		pthread_cond_wait(&s->slot_cv, &s->slot_mu);
	}
}

static void slot_put(ibp_store_t *s, slot_t *sl)
{
	if (!sl)
		return;
	pthread_mutex_lock(&s->slot_mu);
	sl->busy = 0;
	pthread_cond_signal(&s->slot_cv);
	pthread_mutex_unlock(&s->slot_mu);
}

/* Rows whose index entry is read and payload prefetched ahead of the row
 * being decoded (decode_rows_ibp; decode_rows_map: the distance of a
 * row's lines after its first, at most its batch): a random row's payload
 * is a cache miss, and a decode is long enough that the core cannot
 * overlap the next row's misses with it unless they are started early.
 * The default was tuned with bench/bench_gather (docs/BENCHMARKS.md,
 * "Random-row gather"), which compares distances through
 * IBP_GATHER_PREFETCH (read at open, 0 = no look-ahead at all). */
#define PF_DEFAULT 8u
/* Exp rows with the AVX-512 decoder: bursts of 16 rows (bag sum, one
 * thread, same process: 5-17 % faster than 8 on a Zen 5 VM; on Zen 3, with
 * AVX2, 16 was 6 % slower than 8: docs/BENCHMARKS.md "Exponent rows summed
 * with AVX-512"). */
#define PF_XR_AVX512 16u
#define PF_MAX 64u   /* ring size, a power of two */
#define PF_LINES 16u /* cache lines prefetched per row at most */

/* A row's place in the payload, read ahead of its decode. */
typedef struct rowref {
	const uint8_t *src;
	uint64_t len;
	uint8_t mode;
	unsigned cl;
	int ok; /* the index lookup succeeded (else it is redone in order) */
} rowref_t;

/* Decodes one looked-up row into dst; a packed row fills its extent
 * exactly (FORMAT.md §1.3), as the batch decoder and the GPU gather
 * require. */
static inline ibp_status_t decode_one(const ibp_store_t *s, uint64_t row, const rowref_t *r, uint8_t *dst)
{
	uint64_t used = 0;
	ibp_status_t st = ibpi_decode_row_ext_i(s->codec, r->src, r->len, r->mode, r->cl, dst, &used);
	if (st == IBP_OK && s->packed && used != r->len)
		st = ibpi_fail(IBP_ERR_CORRUPT, "row %llu: encoded row is %llu bytes, its extent %llu",
			      (unsigned long long)row, (unsigned long long)used, (unsigned long long)r->len);
	return st;
}

/* Lines [from, to) of an encoded row, at most PF_LINES from its start:
 * the hardware prefetcher follows a long row once it is being read. */
static inline __attribute__((always_inline)) void prefetch_lines(const rowref_t *r, uint64_t from, uint64_t to)
{
	const uintptr_t p0 = (uintptr_t)r->src & ~(uintptr_t)63;
	uint64_t lines = (((uintptr_t)r->src & 63) + r->len + 63) / 64;
	lines = lines < to ? lines : to;
	for (uint64_t k = from; k < lines; k++)
		__builtin_prefetch((const void *)(p0 + 64 * k), 0, 3);
}

/* A row's lines after its first, as a loop: unrolled (PF_LINES a
 * constant), its fifteen prefetches and exit branches in a row left
 * sequential rows of 1.5 KB up to 2x slower on Zen 5, on AVX-512 most
 * (docs/BENCHMARKS.md "Runs in order, plain loads"). */
static inline __attribute__((always_inline)) void prefetch_rest(const rowref_t *r)
{
	const uintptr_t p0 = (uintptr_t)r->src & ~(uintptr_t)63;
	uint64_t lines = (((uintptr_t)r->src & 63) + r->len + 63) / 64;
	lines = lines < PF_LINES ? lines : PF_LINES;
#pragma GCC unroll 1
	for (uint64_t k = 1; k < lines; k++)
		__builtin_prefetch((const void *)(p0 + 64 * k), 0, 3);
}

/* The output row decoded OUT_AHEAD rows after this one, its first
 * PF_LINES lines for writing, when the rows between are consecutive in
 * the store: the decode's stores to lines not in the cache held up its
 * loop (sequential f32 rows of 400 bytes 6% faster); among random rows,
 * whose payload misses fill the miss buffers, it cost 3-4%
 * (docs/BENCHMARKS.md "AVX-512 decode"). */
#define OUT_AHEAD 4u
static inline __attribute__((always_inline)) void prefetch_out(const uint8_t *p, uint64_t R)
{
	const uintptr_t p0 = (uintptr_t)p & ~(uintptr_t)63;
	uint64_t lines = (((uintptr_t)p & 63) + R + 63) / 64;
	lines = lines < PF_LINES ? lines : PF_LINES;
	for (uint64_t k = 0; k < lines; k++)
		__builtin_prefetch((const void *)(p0 + 64 * k), 1, 3);
}

static inline void row_ahead(const ibp_store_t *s, uint64_t row, rowref_t *r)
{
	r->ok = ibp_container_row_meta(s->c, row, &r->src, &r->len, &r->mode, &r->cl) == IBP_OK;
	if (r->ok)
		prefetch_lines(r, 0, PF_LINES);
}

/* Rows decoded per batch of the row-map pipeline, at most. */
#define BATCH_MAX 64u
#define BURST_ALL_MAX 8u /* batches this small prefetch whole rows in their burst */
#define RING (2 * BATCH_MAX)
#define SMALL_ROW_BYTES 160u /* mean encoded row: whole rows in bursts of 4 */

/* Staged batches (ids given, s->stage rows a batch) in three passes:
 * the batch's rows looked up (their map records prefetched a batch
 * before), every line of them prefetched, their encoded bytes copied into
 * a stack buffer; then they are decoded from there. On this project's VMs
 * a decode's loads from a random payload page wait on a page walk even
 * when the line is cached, and those waits do not overlap the decode's
 * work (docs/BENCHMARKS.md "Misses and decode add up", "Staged rows");
 * in passes of independent loads the walks and misses of a batch overlap
 * each other, and the decode reads a buffer whose pages the TLB holds.
 * Rows are copied in 32-byte pieces, so a copy may read up to 31 bytes
 * past the row, never past the payload's end (such a row is copied
 * exactly). A row larger than the whole buffer decodes in place. */
#define STAGE_BYTES 16384u
#define STAGE_ROWS_MAX 128u
static uint64_t decode_rows_staged(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b,
				   uint64_t e, ibp_status_t *st)
{
	const ibp_rowmap_t *m = s->map;
	const uint64_t R = s->R, B = s->stage;
	_Alignas(64) uint8_t stage[STAGE_BYTES];
	rowref_t ref[STAGE_ROWS_MAX];
	for (uint64_t k = b; k - b < B && k < e; k++)
		ibp_rowmap_prefetch(m, (uint64_t)ids[k]);
	for (uint64_t b0 = b; b0 < e;) {
		const uint64_t b1 = e - b0 > B ? b0 + B : e;
		for (uint64_t k = b1; k < e && k - b1 < B; k++)
			ibp_rowmap_prefetch(m, (uint64_t)ids[k]);
		uint64_t n = 0, used = 0;
		for (uint64_t i = b0; i < b1; i++) {
			rowref_t *r = &ref[n];
			ibp_rowmap_get(m, (uint64_t)ids[i], &r->src, &r->len, &r->mode, &r->cl);
			const uint64_t cp = (r->len + 31) & ~(uint64_t)31;
			if (cp > STAGE_BYTES - used) {
				n += n == 0; /* a row larger than the stage: in place, alone */
				break;
			}
			used += cp;
			n++;
		}
		for (uint64_t j = 0; j < n; j++)
			prefetch_lines(&ref[j], 0, PF_LINES);
		used = 0;
		for (uint64_t j = 0; j < n; j++) {
			rowref_t *r = &ref[j];
			const uint64_t cp = (r->len + 31) & ~(uint64_t)31;
			if (cp > STAGE_BYTES)
				break;
			if (cp <= (uint64_t)(s->pay_end - r->src))
				for (uint64_t k = 0; k < cp; k += 32)
					memcpy(stage + used + k, r->src + k, 32);
			else
				memcpy(stage + used, r->src, (size_t)r->len);
			r->src = stage + used;
			used += cp;
		}
		for (uint64_t j = 0; j < n; j++)
			if ((*st = decode_one(s, (uint64_t)ids[b0 + j], &ref[j], out + (b0 + j) * R)) != IBP_OK)
				return b0 + j;
		b0 += n;
	}
	*st = IBP_OK;
	return e;
}

/* Rows [b, e) looked up and decoded one by one, no look-ahead; returns
 * as decode_range. */
static uint64_t decode_rows_plain(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b, uint64_t e,
				  ibp_status_t *st)
{
	for (uint64_t i = b; i < e; i++) {
		const uint64_t row = ids ? (uint64_t)ids[i] : i;
		rowref_t r = { .ok = 1 };
		ibp_rowmap_get(s->map, row, &r.src, &r.len, &r.mode, &r.cl);
		if ((*st = decode_one(s, row, &r, out + i * s->R)) != IBP_OK)
			return i;
	}
	*st = IBP_OK;
	return e;
}

/* Rows [b, e) by the row map's pipeline, in batches of s->batch rows.
 * Before a batch decodes, the map records of the batch after next are
 * prefetched and the next batch is looked up (O(1), its records now
 * cached) and its rows' payload prefetched in one burst: whole rows for
 * small batches, else each row's first line, its other lines d = s->pf
 * rows before it decodes. Why bursts: on this project's VMs
 * (docs/BENCHMARKS.md, "Gather and bags against PyTorch") a random row's
 * first touch costs a page walk that holds up everything behind it; walks
 * started together overlap, one started per decoded row (a plain
 * look-ahead) does not. Lookups cannot fail: ids were checked against the
 * rows and the map was checked when built. */
static uint64_t decode_rows_pipe(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b,
				 uint64_t e, ibp_status_t *st)
{
	const ibp_rowmap_t *m = s->map;
	const uint64_t R = s->R, B = s->batch;
	const int all = B <= BURST_ALL_MAX;
	const uint64_t d = all ? 0 : (s->pf < B ? s->pf : B); /* row i + d is looked up by then */
	rowref_t ring[RING];
#define ROW_AT(k) (ids ? (uint64_t)ids[k] : (k))
#define AT(k) (&ring[(k) & (RING - 1)])
#define LOOKUP(k)                                                                    \
	do {                                                                         \
		rowref_t *r_ = AT(k);                                                \
		ibp_rowmap_get(m, ROW_AT(k), &r_->src, &r_->len, &r_->mode, &r_->cl); \
		prefetch_lines(r_, 0, all ? PF_LINES : 1);                           \
	} while (0)
	for (uint64_t k = b; k < e && k - b < 2 * B; k++)
		ibp_rowmap_prefetch(m, ROW_AT(k));
	for (uint64_t k = b; k < e && k - b < B; k++)
		LOOKUP(k);
	for (uint64_t k = b; k < e && k - b < d; k++)
		prefetch_lines(AT(k), 1, PF_LINES);
	for (uint64_t b0 = b; b0 < e; b0 += B) {
		const uint64_t b1 = e - b0 > B ? b0 + B : e, b2 = e - b1 > B ? b1 + B : e,
			       b3 = e - b2 > B ? b2 + B : e;
		for (uint64_t k = b2; k < b3; k++)
			ibp_rowmap_prefetch(m, ROW_AT(k));
		for (uint64_t k = b1; k < b2; k++)
			LOOKUP(k);
		for (uint64_t i = b0; i < b1; i++) {
			if (i + d < b2 && d)
				prefetch_rest(AT(i + d));
			if (i + OUT_AHEAD < e && ROW_AT(i + OUT_AHEAD) == ROW_AT(i) + OUT_AHEAD)
				prefetch_out(out + (i + OUT_AHEAD) * R, R);
			if ((*st = decode_one(s, ROW_AT(i), AT(i), out + i * R)) != IBP_OK)
				return i;
		}
	}
#undef LOOKUP
#undef AT
#undef ROW_AT
	*st = IBP_OK;
	return e;
}

/* Consecutive tiny rows at positions [b, e) (rows ids[b] + i) by the
 * codec's run kernel, a row map group at a time: in order their records
 * and payload are read in order too, which the hardware prefetcher
 * follows, and one by one each row's lookup, call and checks cost more
 * than its decode (an int64 edge list: 10 ns a row, docs/BENCHMARKS.md
 * "Tiny rows in runs"). Rows it does not take (not CLEAN, near the
 * payload's end) go by the checked path, up to the next CLEAN row. */
static uint64_t decode_rows_tiny(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b, uint64_t e,
				 ibp_status_t *st)
{
	const ibp_rowmap_t *m = s->map;
	const ibp_codec_t *c = s->codec;
	if (!c->tiny || !c->k->decode_tiny_run)
		return decode_rows_plain(s, ids, out, b, e, st);
	const uint64_t r0 = ids ? (uint64_t)ids[b] : b;
	ibp_tiny_run_t run = { .end = s->pay_end, .sh = m->sh, .cmask = m->cmask, .exact = s->packed };
	for (uint64_t i = b; i < e;) {
		const uint64_t row = r0 + (i - b), g = row >> IBP_ROWMAP_GROUP_SHIFT, left = 64 - (row & 63);
		const uint64_t n = e - i < left ? e - i : left;
		run.base = m->payload + m->base[g];
		run.rec = m->rec + g * IBP_ROWMAP_STRIDE + (row & 63);
		uint64_t k = c->k->decode_tiny_run(c, &run, n, out + i * s->R);
		if (k < n) {
			uint64_t j = k + 1;
			while (j < n && (run.rec[j] & 3u) != IBP_ROW_CLEAN)
				j++;
			const uint64_t at = decode_rows_plain(s, ids, out, i + k, i + j, st);
			if (at != i + j)
				return at;
			k = j;
		}
		i += k;
	}
	*st = IBP_OK;
	return e;
}

/* Consecutive rows at positions [b, e): tiny rows by their run kernel,
 * others by the pipeline (one by one without look-ahead,
 * IBP_GATHER_PREFETCH=0). */
static uint64_t decode_rows_run(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b, uint64_t e,
				ibp_status_t *st)
{
	if (s->R <= IBP_TINY_MAX_BYTES)
		return decode_rows_tiny(s, ids, out, b, e, st);
	return s->pf ? decode_rows_pipe(s, ids, out, b, e, st) : decode_rows_plain(s, ids, out, b, e, st);
}

/* Ids not in order at positions [b, e): staged when the store stages,
 * else by the pipeline (or one by one). */
static uint64_t decode_rows_scattered(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b,
				      uint64_t e, ibp_status_t *st)
{
	if (s->stage)
		return decode_rows_staged(s, ids, out, b, e, st);
	return s->pf ? decode_rows_pipe(s, ids, out, b, e, st) : decode_rows_plain(s, ids, out, b, e, st);
}

/* Runs of at least this many consecutive ids are decoded as runs: tiny
 * rows from SEQ_RUN_MIN (the pipeline's lookups and prefetches cost more
 * than such a row's decode), others from STAGE_RUN_MIN in a staged gather
 * (the hardware prefetcher follows them and the pipeline prefetches their
 * output; staged, sequential f32 rows ran 21% slower, docs/BENCHMARKS.md
 * "Staged rows"). */
#define SEQ_RUN_MIN 16u
#define STAGE_RUN_MIN 64u

/* Rows at positions [b, e) by the row map: runs of consecutive ids (or
 * the whole range in order) by decode_rows_run, the ids between them by
 * decode_rows_scattered; returns as decode_range. Random ids end a run at
 * their first pair, so the scan costs a compare an id. */
static uint64_t decode_rows_map(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b,
				uint64_t e, ibp_status_t *st)
{
	const int tiny = s->R <= IBP_TINY_MAX_BYTES;
	if (!ids)
		return decode_rows_run(s, ids, out, b, e, st);
	if (!tiny && !s->stage)
		return decode_rows_scattered(s, ids, out, b, e, st);
	const uint64_t min = tiny ? SEQ_RUN_MIN : STAGE_RUN_MIN;
	while (b < e) {
		uint64_t p = b, k = e;
		while (p < e) {
			k = ibpi_ids_run_end(ids, p, e);
			if (k - p >= min || (p == b && k == e))
				break; /* a long run, or the whole range in order (a short grain of a run) */
			p = k;
		}
		if (p > b) {
			const uint64_t at = decode_rows_scattered(s, ids, out, b, p, st);
			if (at != p)
				return at;
		}
		if (k > p) {
			const uint64_t at = decode_rows_run(s, ids, out, p, k, st);
			if (at != k)
				return at;
		}
		b = k > p ? k : p;
	}
	*st = IBP_OK;
	return e;
}

/* Decodes IBP rows at positions [b, e), looking s->pf rows ahead;
 * returns the first failing position or e, as decode_range. */
static uint64_t decode_rows_ibp(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b,
				uint64_t e, ibp_status_t *st)
{
	rowref_t ring[PF_MAX];
	const uint64_t R = s->R, d = s->pf;
	for (uint64_t k = b; k < e && k < b + d; k++)
		row_ahead(s, ids ? (uint64_t)ids[k] : k, &ring[k & (PF_MAX - 1)]);
	for (uint64_t i = b; i < e; i++) {
		rowref_t r = { .ok = 0 };
		if (d) {
			r = ring[i & (PF_MAX - 1)];
			if (i + d < e)
				row_ahead(s, ids ? (uint64_t)ids[i + d] : i + d, &ring[(i + d) & (PF_MAX - 1)]);
		}
		uint64_t row = ids ? (uint64_t)ids[i] : i;
		/* a failed lookup ahead is redone here, so its detail is this row's */
		*st = r.ok ? IBP_OK : ibp_container_row_meta(s->c, row, &r.src, &r.len, &r.mode, &r.cl);
		if (*st == IBP_OK)
			*st = decode_one(s, row, &r, out + i * R);
		if (*st != IBP_OK)
			return i;
	}
	*st = IBP_OK;
	return e;
}

/* Exp rows: positions [b, e), each row decoded straight into place, the
 * rows ahead prefetched in bursts of s->pf positions (ibpi_xr_ahead). */
static uint64_t decode_rows_xr(const ibp_store_t *s, const int64_t *ids, uint8_t *out, uint64_t b, uint64_t e,
			       ibp_status_t *st)
{
	const uint8_t *pay = s->xpay;
	const uint64_t R = s->R, d = ids ? s->pf : 0;
	ibpi_xr_ahead_t a = { 0, 0 };
	for (uint64_t i = b; i < e; i++) {
		if (d)
			ibpi_xr_ahead(&a, d, s->xr->slot, pay, ids, NULL, i, e);
		const uint64_t row = ids ? (uint64_t)ids[i] : i;
		*st = ibpi_exprows_decode_slot(s->xr, s->xisa, pay + row * s->xr->slot, s->xovf, s->xovf_len, out + i * R);
		if (*st != IBP_OK)
			return i;
	}
	*st = IBP_OK;
	return e;
}

/* Decodes positions [b, e) of the job; returns the first failing position
 * or e. The failure's detail stays in this thread's error slot. `sl` is
 * the caller's block slot (block codecs gathering rows), else NULL. */
static uint64_t decode_range(const ibp_store_t *s, const int64_t *ids, int blocks, uint8_t *out, uint64_t b,
			     uint64_t e, slot_t *sl, ibp_status_t *st)
{
	if (s->xr)
		return decode_rows_xr(s, ids, out, b, e, st);
	if (!s->block_codec)
		return s->map ? decode_rows_map(s, ids, out, b, e, st) : decode_rows_ibp(s, ids, out, b, e, st);
	for (uint64_t i = b; i < e; i++) {
		if (blocks) {
			/* decode_all of a block codec: block i straight into place */
			*st = ibp_container_decode_block(s->c, i, out + i * s->block_rows * s->R, 1);
			if (*st != IBP_OK)
				return i;
			continue;
		}
		uint64_t row = ids ? (uint64_t)ids[i] : i;
		uint64_t blk = row / s->block_rows;
		if (sl->block != blk) {
			sl->block = NO_BLOCK; /* a failed decode leaves nothing cached */
			*st = ibp_container_decode_block(s->c, blk, sl->buf, 1);
			if (*st != IBP_OK)
				return i;
			sl->block = blk;
		}
		memcpy(out + i * s->R, sl->buf + (row - blk * s->block_rows) * s->R, (size_t)s->R);
	}
	*st = IBP_OK;
	return e;
}

uint64_t ibpi_store_ahead(const ibp_store_t *s)
{
	return s->pf;
}

uint64_t ibpi_store_decode_rows(const ibp_store_t *s, const int64_t *ids, uint64_t n, uint8_t *out,
			       ibp_status_t *st)
{
	if (s->block_codec) {
		*st = ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: rows of a block codec are not decoded one by one",
			       ibp_container_name(s->c));
		return 0;
	}
	return decode_range(s, ids, 0, out, 0, n, NULL, st);
}

static void record_failure(ibp_store_t *s, job_t *j, uint64_t pos, ibp_status_t st)
{
	pthread_mutex_lock(&s->mu);
	if (ibp_failure_replaces(atomic_load(&j->failed), pos, j->err_pos)) {
		j->err = st;
		j->err_pos = pos;
		snprintf(j->err_msg, sizeof(j->err_msg), "%s", ibp_last_error());
	}
	atomic_store(&j->failed, 1);
	pthread_mutex_unlock(&s->mu);
}

static void run_job(ibp_store_t *s)
{
	job_t *j = &s->job;
	if (j->fn) {
		for (int tid; (tid = atomic_fetch_add(&j->next_task, 1)) < j->ntasks;)
			j->fn(j->ctx, tid);
		return;
	}
	slot_t *sl = s->block_codec && !j->blocks ? slot_get(s) : NULL;
	for (;;) {
		if (atomic_load_explicit(&j->failed, memory_order_relaxed))
			break;
		uint64_t b = atomic_fetch_add(&j->next, j->grain);
		if (b >= j->n)
			break;
		uint64_t e = j->n - b < j->grain ? j->n : b + j->grain;
		ibp_status_t st;
		uint64_t at = decode_range(s, j->ids, j->blocks, j->out, b, e, sl, &st);
		if (st != IBP_OK) {
			record_failure(s, j, at, st);
			break;
		}
	}
	slot_put(s, sl);
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	ibp_store_t *s = w->s;
	uint64_t seen = 0; /* the pool exists before the first job: gen starts at 0 */
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->shutdown && s->gen == seen)
			pthread_cond_wait(&s->cv_work, &s->mu);
		if (s->shutdown)
			break;
		seen = s->gen;
		if (w->index >= s->job_helpers)
			continue;
		pthread_mutex_unlock(&s->mu);
		run_job(s);
		pthread_mutex_lock(&s->mu);
		if (++s->done == s->job_helpers)
			pthread_cond_signal(&s->cv_done);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Starts the helpers once; called with gather_mu held. If some threads
 * cannot start, the pool is simply smaller. */
static void ensure_pool(ibp_store_t *s)
{
	if (s->pool_created)
		return;
	s->pool_created = 1;
	for (int i = 0; i < s->max_threads - 1; i++) {
		s->workers[i] = (worker_t){ s, i };
		if (pthread_create(&s->threads[i], NULL, worker_main, &s->workers[i]) != 0)
			break;
		s->nhelpers++;
	}
}

/* A fork() child: the helpers did not come along, and the locks, condition
 * variables (waiters that no longer exist) and block slots may be held by
 * threads of the parent. Starts over with fresh ones and no pool (the next
 * pooled job starts one here); the first caller in the child does it, the
 * others wait on the fork lock and find it done. Initialising with default
 * attributes cannot fail on Linux (glibc only fills the object in). */
static void after_fork(ibp_store_t *s)
{
	ibpi_fork_lock();
	uint64_t g = ibpi_fork_generation();
	if (atomic_load_explicit(&s->fork_gen, memory_order_relaxed) != g) {
		pthread_mutex_init(&s->gather_mu, NULL);
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv_work, NULL);
		pthread_cond_init(&s->cv_done, NULL);
		pthread_mutex_init(&s->slot_mu, NULL);
		pthread_cond_init(&s->slot_cv, NULL);
		for (int i = 0; s->slots && i < s->nslots; i++)
			s->slots[i].busy = 0;
		s->pool_created = 0;
		s->nhelpers = 0; /* the parent's threads: nothing to join here */
		s->gen = 0;      /* new helpers start waiting for generation 1 */
		s->shutdown = 0;
		s->job_helpers = 0;
		s->done = 0;
		s->job.fn = NULL;
		atomic_store_explicit(&s->fork_gen, g, memory_order_release);
	}
	ibpi_fork_unlock();
}

/* Every entry point that takes a lock or uses the pool calls this first:
 * in the parent it costs two loads. */
static void check_fork(ibp_store_t *s)
{
	if (atomic_load_explicit(&s->fork_gen, memory_order_acquire) != ibpi_fork_generation())
		after_fork(s);
}

static void free_slots(ibp_store_t *s)
{
	for (int i = 0; s->slots && i < s->nslots; i++)
		ibp_host_free(s->slots[i].buf);
	free(s->slots);
}

/* The row map of an IBP store (O(1) random lookups, about 4.2 bytes per
 * row; io/container_internal.h), unless it would take more than
 * IBP_ROW_MAP_MAX bytes (read at open; 0 = never) or, by default, more
 * than the larger of 64 MiB and a quarter of the payload: then, or when
 * it cannot be built, gathers walk the compact index instead. */
static const ibp_rowmap_t *store_rowmap(const ibp_container_t *c)
{
	uint64_t plen = 0;
	(void)ibp_container_payload(c, &plen);
	uint64_t max = plen / 4 > ROWMAP_MIN_CAP ? plen / 4 : ROWMAP_MIN_CAP;
	const char *v = getenv("IBP_ROW_MAP_MAX");
	if (v && *v >= '0' && *v <= '9')
		max = strtoull(v, NULL, 10);
	const ibp_rowmap_t *m = NULL;
	if (max == 0 || ibpi_container_rowmap(c, max, &m) != IBP_OK)
		return NULL; /* not an error: the index walk reads the same rows */
	return m;
}

/* Rows per batch of the row-map pipeline (decode_rows_map): measured
 * (docs/BENCHMARKS.md, "Gather and bags against PyTorch"), batches of 4
 * whole rows are fastest for rows of up to two or three lines, batches of
 * 64 first lines for longer ones. IBP_GATHER_BATCH=N (1 .. 64, read at
 * open) overrides. */
static uint64_t gather_batch(const ibp_container_t *c)
{
	const char *v = getenv("IBP_GATHER_BATCH");
	if (v && *v >= '1' && *v <= '9') {
		unsigned long n = strtoul(v, NULL, 10);
		return n > BATCH_MAX ? BATCH_MAX : n;
	}
	uint64_t plen = 0, rows = ibp_container_nrows(c);
	(void)ibp_container_payload(c, &plen);
	return rows && plen / rows <= SMALL_ROW_BYTES ? 4 : BATCH_MAX;
}

/* Rows per staged batch (decode_rows_staged) of a gather. Measured
 * (docs/BENCHMARKS.md "Staged rows"; random ids): rows of 116-1,340
 * bytes encoded decode 1.1-3.4x faster staged (f16 and f32 bags; 400-,
 * 512- and 1,536-byte rows), 575-byte bf16 rows 11% slower on one
 * thread but 4-8% faster in bench/torch_compare.py's two-thread gathers,
 * sparse 5,732-byte rows of 29 bytes 3% slower (their decode is mostly
 * the output's writing). So by default tables whose rows are at most
 * STAGE_OUT_BYTES stage. IBP_GATHER_STAGE=N (read at open; 0 off, else
 * rows a batch, at most STAGE_ROWS_MAX) overrides for any table. */
#define STAGE_OUT_BYTES 4096u
#define STAGE_ROWS_DEFAULT 64u
static uint64_t gather_stage(const ibp_container_t *c)
{
	const char *v = getenv("IBP_GATHER_STAGE");
	if (v && *v >= '0' && *v <= '9') {
		unsigned long n = strtoul(v, NULL, 10);
		return n > STAGE_ROWS_MAX ? STAGE_ROWS_MAX : n;
	}
	return ibp_container_row_bytes(c) <= STAGE_OUT_BYTES ? STAGE_ROWS_DEFAULT : 0;
}

ibp_status_t ibp_store_from_container(ibp_container_t *c, ibp_store_t **out)
{
	if (!c || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_store_from_container: NULL argument");
	*out = NULL;
	IBP_TRY(ibpi_fork_watch());
	ibp_store_t *s = calloc(1, sizeof(*s));
	if (!s)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_store_from_container: out of memory");
	atomic_init(&s->fork_gen, ibpi_fork_generation());
	s->c = c;
	s->codec = ibp_container_codec(c);
	s->nrows = ibp_container_nrows(c);
	s->R = ibp_container_row_bytes(c);
	s->packed = ibp_container_layout(c) == IBP_LAYOUT_PACKED;
	s->max_threads = cpu_count();
	s->block_codec = ibp_container_codec_id(c) == IBP_CODEC_EXP || ibp_container_codec_id(c) == IBP_CODEC_FP8;
	s->xr = ibpi_container_exprows(c);
	if (s->xr) {
		s->xpay = ibp_container_payload(c, NULL);
		s->xovf = ibpi_container_exprows_overflow(c, &s->xovf_len);
		s->xisa = ibpi_exprows_isa();
	} else if (!s->block_codec) {
		s->map = store_rowmap(c);
	}
	s->pf = s->xr && s->xisa == 2 ? PF_XR_AVX512 : PF_DEFAULT;
	const char *pf = getenv("IBP_GATHER_PREFETCH");
	if (pf && *pf >= '0' && *pf <= '9') {
		unsigned long v = strtoul(pf, NULL, 10);
		s->pf = v > PF_MAX ? PF_MAX : v;
	}
	s->batch = gather_batch(c);
	s->stage = s->map ? gather_stage(c) : 0;
	if (s->stage) {
		uint64_t plen = 0;
		const uint8_t *pay = ibp_container_payload(c, &plen);
		s->pay_end = pay ? pay + plen : NULL;
		s->stage = pay ? s->stage : 0;
	}
	if (s->block_codec) {
		s->block_rows = ibp_container_block_rows(c);
		s->nblk = ibp_container_nblocks(c);
		/* one slot per thread that can gather at once, fewer when there
		 * are fewer blocks or the slots would take over 1 GiB together */
		uint64_t rows = s->block_rows < s->nrows ? s->block_rows : s->nrows;
		uint64_t bytes = rows * s->R; /* <= the decoded tensor, validated at open */
		uint64_t n = s->nblk < (uint64_t)s->max_threads ? s->nblk : (uint64_t)s->max_threads;
		while (n > 1 && n * bytes > SLOT_BYTES_MAX)
			n--;
		s->nslots = (int)n;
		s->slots = calloc(n ? n : 1, sizeof(slot_t));
		for (uint64_t i = 0; s->slots && i < n; i++) {
			s->slots[i].block = NO_BLOCK;
			s->slots[i].buf = ibp_host_alloc(bytes, 0);
			if (!s->slots[i].buf) {
				for (uint64_t k = 0; k < i; k++)
					ibp_host_free(s->slots[k].buf);
				free(s->slots);
				s->slots = NULL;
			}
		}
		if (!s->slots) {
			free(s);
			return ibpi_fail(IBP_ERR_NOMEM, "%s: no memory for %llu block buffers of %llu bytes",
					ibp_container_name(c), (ull)n, (ull)bytes);
		}
	}
	int ok = 0;
	if (pthread_mutex_init(&s->gather_mu, NULL) == 0) {
		ok = 1;
		if (pthread_mutex_init(&s->mu, NULL) == 0) {
			ok = 2;
			if (pthread_cond_init(&s->cv_work, NULL) == 0) {
				ok = 3;
				if (pthread_cond_init(&s->cv_done, NULL) == 0) {
					ok = 4;
					if (pthread_mutex_init(&s->slot_mu, NULL) == 0) {
						ok = 5;
						if (pthread_cond_init(&s->slot_cv, NULL) == 0)
							ok = 6;
					}
				}
			}
		}
	}
	if (ok < 6) {
		if (ok >= 5)
			pthread_mutex_destroy(&s->slot_mu);
		if (ok >= 4)
			pthread_cond_destroy(&s->cv_done);
		if (ok >= 3)
			pthread_cond_destroy(&s->cv_work);
		if (ok >= 2)
			pthread_mutex_destroy(&s->mu);
		if (ok >= 1)
			pthread_mutex_destroy(&s->gather_mu);
		free_slots(s);
		free(s);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_store_from_container: cannot create locks");
	}
	*out = s;
	return IBP_OK;
}

ibp_status_t ibp_store_open(const char *path, unsigned flags, ibp_store_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_store_open: NULL out");
	*out = NULL;
	ibp_container_t *c = NULL;
	IBP_TRY(ibp_container_open(path, flags, &c));
	ibp_status_t st = ibp_store_from_container(c, out);
	if (st != IBP_OK)
		ibp_container_close(c);
	return st;
}

void ibp_store_close(ibp_store_t *s)
{
	if (!s)
		return;
	check_fork(s);
	pthread_mutex_lock(&s->mu);
	s->shutdown = 1;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < s->nhelpers; i++)
		pthread_join(s->threads[i], NULL);
	pthread_cond_destroy(&s->cv_done);
	pthread_cond_destroy(&s->cv_work);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->gather_mu);
	pthread_cond_destroy(&s->slot_cv);
	pthread_mutex_destroy(&s->slot_mu);
	free_slots(s);
	ibp_container_close(s->c);
	free(s);
}

/* The detail `msg` without a leading "<container name>: " (block decode
 * errors name the file, which the gather message names already). */
static const char *after_name(const ibp_store_t *s, const char *msg)
{
	const char *name = ibp_container_name(s->c);
	size_t n = strlen(name);
	return !strncmp(msg, name, n) && !strncmp(msg + n, ": ", 2) ? msg + n + 2 : msg;
}

static ibp_status_t job_failure(const ibp_store_t *s, ibp_status_t st, const char *what, const int64_t *ids,
				int blocks, uint64_t pos, const char *why)
{
	if (blocks)
		return ibpi_fail(st, "%s: %s: %s", ibp_container_name(s->c), what, after_name(s, why));
	return ibpi_fail(st, "%s: %s: position %llu (row %llu): %s", ibp_container_name(s->c), what, (ull)pos,
			(ull)(ids ? (uint64_t)ids[pos] : pos), after_name(s, why));
}

/* ids NULL: rows 0 .. n-1 (decode_all), or with `blocks` blocks 0 .. n-1
 * of a block codec, each decoded into place. */
static ibp_status_t gather(ibp_store_t *s, const int64_t *ids, int blocks, uint64_t n, void *out,
			   int nthreads, const char *what)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL store", what);
	check_fork(s);
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: nthreads %d < 0", what, nthreads);
	if (n == 0)
		return IBP_OK;
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL output for %llu rows", what, (ull)n);
	const uint64_t bad = ids ? ibpi_ids_first_bad(ids, n, s->nrows) : n;
	if (bad < n)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: %s: ids[%llu] = %lld is outside the %llu rows",
				ibp_container_name(s->c), what, (ull)bad, (long long)ids[bad], (ull)s->nrows);

	int t = nthreads == 0 || nthreads > s->max_threads ? s->max_threads : nthreads;
	uint64_t grain = blocks ? 1 : GRAIN_BYTES / s->R;
	if (grain < 1)
		grain = 1;
	/* keep a few grains per thread so the tail balances */
	uint64_t fair = n / ((uint64_t)t * 4);
	if (grain > fair)
		grain = fair < 1 ? 1 : fair;
	uint64_t ngrains = n / grain + (n % grain != 0);
	if ((uint64_t)t > ngrains)
		t = (int)ngrains;
	/* block codecs: every thread gathering rows needs a block slot */
	if (s->block_codec && !blocks && t > s->nslots)
		t = s->nslots;

	if (t <= 1) {
		/* the calling thread alone: no pool, concurrent callers run in
		 * parallel (block codecs: as far as there are free slots) */
		ibp_status_t st;
		slot_t *sl = s->block_codec && !blocks ? slot_get(s) : NULL;
		uint64_t at = decode_range(s, ids, blocks, out, 0, n, sl, &st);
		slot_put(s, sl);
		if (st != IBP_OK) {
			char why[256];
			snprintf(why, sizeof(why), "%s", ibp_last_error());
			return job_failure(s, st, what, ids, blocks, at, why);
		}
		return IBP_OK;
	}

	pthread_mutex_lock(&s->gather_mu);
	ensure_pool(s);
	int helpers = t - 1 < s->nhelpers ? t - 1 : s->nhelpers;
	job_t *j = &s->job;
	pthread_mutex_lock(&s->mu);
	j->fn = NULL;
	j->ids = ids;
	j->blocks = blocks;
	j->n = n;
	j->out = out;
	j->grain = grain;
	atomic_store(&j->next, 0);
	atomic_store(&j->failed, 0);
	j->err = IBP_OK;
	j->err_pos = 0;
	j->err_msg[0] = '\0';
	s->job_helpers = helpers;
	s->done = 0;
	s->gen++;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);

	run_job(s);

	pthread_mutex_lock(&s->mu);
	while (s->done < s->job_helpers)
		pthread_cond_wait(&s->cv_done, &s->mu);
	ibp_status_t st = atomic_load(&j->failed) ? j->err : IBP_OK;
	uint64_t pos = j->err_pos;
	pthread_mutex_unlock(&s->mu);
	ibp_status_t ret = IBP_OK;
	if (st != IBP_OK)
		ret = job_failure(s, st, what, ids, blocks, pos, j->err_msg);
	pthread_mutex_unlock(&s->gather_mu);
	return ret;
}

int ibpi_store_pool_width(const ibp_store_t *s, int nthreads, uint64_t n)
{
	int t = nthreads <= 0 || nthreads > s->max_threads ? s->max_threads : nthreads;
	return n < (uint64_t)t ? (n ? (int)n : 1) : t;
}

void ibpi_store_run(const ibp_store_t *cs, int ntasks, ibp_store_task_fn fn, void *ctx)
{
	if (ntasks <= 1) {
		if (ntasks == 1)
			fn(ctx, 0);
		return;
	}
	/* the pool and its hand-off are mutable state of every store (which
	 * ibp_store_from_container allocates, never const) */
	ibp_store_t *s = (ibp_store_t *)cs;
	check_fork(s);
	pthread_mutex_lock(&s->gather_mu);
	ensure_pool(s);
	job_t *j = &s->job;
	pthread_mutex_lock(&s->mu);
	j->fn = fn;
	j->ctx = ctx;
	j->ntasks = ntasks;
	atomic_store(&j->next_task, 0);
	s->job_helpers = ntasks - 1 < s->nhelpers ? ntasks - 1 : s->nhelpers;
	s->done = 0;
	s->gen++;
	pthread_cond_broadcast(&s->cv_work);
	pthread_mutex_unlock(&s->mu);

	run_job(s);

	pthread_mutex_lock(&s->mu);
	while (s->done < s->job_helpers)
		pthread_cond_wait(&s->cv_done, &s->mu);
	j->fn = NULL;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->gather_mu);
}

ibp_status_t ibp_store_gather(ibp_store_t *s, const int64_t *ids, uint64_t n, void *out, int nthreads)
{
	if (n > 0 && !ids)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather: NULL ids for %llu rows", (ull)n);
	return gather(s, ids, 0, n, out, nthreads, "gather");
}

ibp_status_t ibp_store_decode_all(ibp_store_t *s, void *out, int nthreads)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "decode_all: NULL store");
	if (!s->block_codec || s->nrows == 0)
		return gather(s, NULL, 0, s->nrows, out, nthreads, "decode_all");
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "decode_all: nthreads %d < 0", nthreads);
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "decode_all: NULL output for %llu rows", (ull)s->nrows);
	int t = nthreads == 0 || nthreads > s->max_threads ? s->max_threads : nthreads;
	if (s->nblk >= (uint64_t)t)
		return gather(s, NULL, 1, s->nblk, out, nthreads, "decode_all");
	/* fewer blocks than threads: one block at a time, threads inside it */
	for (uint64_t b = 0; b < s->nblk; b++) {
		ibp_status_t st = ibp_container_decode_block(s->c, b, (uint8_t *)out + b * s->block_rows * s->R, t);
		if (st != IBP_OK) {
			char why[256];
			snprintf(why, sizeof(why), "%s", ibp_last_error());
			return job_failure(s, st, "decode_all", NULL, 1, b, why);
		}
	}
	return IBP_OK;
}

ibp_status_t ibp_store_verify(const ibp_store_t *s, int nthreads)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_store_verify: NULL store");
	return ibp_container_verify(s->c, nthreads);
}

uint64_t ibp_store_nrows(const ibp_store_t *s) { return s->nrows; }
uint64_t ibp_store_row_bytes(const ibp_store_t *s) { return s->R; }
ibp_dtype_t ibp_store_dtype(const ibp_store_t *s) { return ibp_container_dtype(s->c); }
unsigned ibp_store_ndim(const ibp_store_t *s) { return ibp_container_ndim(s->c); }
const uint64_t *ibp_store_shape(const ibp_store_t *s) { return ibp_container_shape(s->c); }
const ibp_codec_t *ibp_store_codec(const ibp_store_t *s) { return s->codec; }
const ibp_container_t *ibp_store_container(const ibp_store_t *s) { return s->c; }
int ibp_store_max_threads(const ibp_store_t *s) { return s->max_threads; }
