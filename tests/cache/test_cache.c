/* test_cache.c - the slab cache's CPU twin (ibp/cache.h): self-verifying
 * rows (a row is a function of its id), odd row sizes, both layouts, every
 * policy, mixes of gather, prefetch and invalidate checked against a host
 * model, capacity and counter invariants, pinning under concurrent
 * callers, and the error paths. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cache/cache_internal.h"
#include "fixtures.h"
#include "ibp/cache.h"
#include "ibp/cuda.h"
#include "ibp/unstable.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Row `id`: mostly zero with a few id-dependent bytes (compresses to many
 * sizes), a denser row now and then, and an incompressible one. */
static void make_row(uint64_t id, uint64_t R, uint8_t *row)
{
	memset(row, 0, R);
	uint64_t kind = mix(id) % 6, m;
	if (kind == 5) {
		for (uint64_t j = 0; j < R; j++)
			row[j] = (uint8_t)mix(id * 1000003 + j);
		return;
	}
	m = kind == 4 ? R / 6 : 1 + mix(id + 7) % (R / 16 + 2);
	for (uint64_t j = 0; j < m; j++) {
		uint64_t h = mix(id * 31 + j);
		row[h % R] = (uint8_t)(h >> 40) | 1;
	}
}

typedef struct fx {
	ibp_store_t *s;
	uint64_t n, R;
	char path[128];
} fx_t;

static fx_t open_store(uint64_t n, uint64_t R, ibp_layout_t layout, const char *tag)
{
	fx_t f = { NULL, n, R, "" };
	uint8_t *rows = xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		make_row(i, R, rows + i * R);
	snprintf(f.path, sizeof(f.path), "%s/%s_%llu_%d.ibp", tmpdir, tag, (unsigned long long)R, (int)layout);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	o.threshold = 0.8; /* no sweeps: training time is not what these tests are about */
	o.chunk_bytes = 1;
	cr_assert_eq(ibp_pack(f.path, rows, IBP_DTYPE_U8, 2, shape, &o, layout), IBP_OK, "%s", ibp_last_error());
	free(rows);
	cr_assert_eq(ibp_store_open(f.path, IBP_OPEN_READ, &f.s), IBP_OK, "%s", ibp_last_error());
	return f;
}

static ibp_cache_t *make_cache(uint64_t cap, uint64_t R, ibp_cache_policy_t pol, uint32_t flags)
{
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = cap;
	o.row_bytes = R;
	o.policy = pol;
	o.flags = flags;
	o.max_batch = 256; /* small, so that large calls loop over passes */
	ibp_cache_t *c;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_OK, "%s", ibp_last_error());
	return c;
}

static void check_rows(const int64_t *ids, const int64_t *out_rows, uint64_t n, const uint8_t *out, uint64_t R)
{
	uint8_t *want = xcalloc(R);
	for (uint64_t k = 0; k < n; k++) {
		make_row((uint64_t)ids[k], R, want);
		uint64_t r = out_rows ? (uint64_t)out_rows[k] : k;
		cr_assert(memcmp(out + r * R, want, R) == 0, "request %llu (id %lld) differs",
			  (unsigned long long)k, (long long)ids[k]);
	}
	free(want);
}

/* The invariants every state must keep. */
static void check_invariants(ibp_cache_t *c)
{
	ibp_cache_stats_t st;
	cr_assert_eq(ibp_cache_stats(c, &st, 0), IBP_OK);
	cr_assert(st.slot_bytes_used <= st.capacity_bytes, "%llu slot bytes used > capacity %llu",
		  (unsigned long long)st.slot_bytes_used, (unsigned long long)st.capacity_bytes);
	cr_assert_eq(st.insertions - st.evictions - st.invalidations, st.rows_resident,
		     "insertions %llu - evictions %llu - invalidations %llu != resident %llu",
		     (unsigned long long)st.insertions, (unsigned long long)st.evictions,
		     (unsigned long long)st.invalidations, (unsigned long long)st.rows_resident);
	uint64_t used = 0, slot_bytes = 0, rows = 0, bytes = 0, slabs = 0;
	for (uint32_t i = 0; i < st.nclasses; i++) {
		ibp_cache_class_stats_t cs;
		cr_assert_eq(ibp_cache_class_stats(c, i, &cs), IBP_OK);
		cr_assert(cs.used <= cs.slots);
		used += cs.used;
		slot_bytes += cs.used * cs.slot_bytes;
		rows += cs.used;
		bytes += cs.bytes_resident;
		slabs += cs.slabs;
		cr_assert(cs.slots * cs.slot_bytes <= cs.slabs * st.slab_bytes);
	}
	cr_assert_eq(slabs + st.free_slabs, st.nslabs);
	cr_assert(slabs * 0 + slot_bytes <= st.capacity_bytes);
	cr_assert_eq(rows, st.rows_resident, "slots in use %llu, resident %llu", (unsigned long long)rows,
		     (unsigned long long)st.rows_resident);
	cr_assert_eq(slot_bytes, st.slot_bytes_used);
	cr_assert_eq(bytes, st.bytes_resident);
	cr_assert(used == rows);
}

/* Hits of gathering `id` alone without admitting: 1 if resident. */
static int resident(ibp_cache_t *c, ibp_store_t *s, int64_t id, uint8_t *buf)
{
	ibp_cache_stats_t a, b;
	ibp_cache_stats(c, &a, 0);
	cr_assert_eq(ibp_cache_gather(c, s, &id, 1, buf, NULL, NULL, IBP_CACHE_NO_ADMIT, NULL), IBP_OK, "%s",
		     ibp_last_error());
	ibp_cache_stats(c, &b, 0);
	return (int)(b.hits - a.hits);
}

Test(cache, gather_hits_and_contents, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 1500, R = 1000;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "basic");
	ibp_cache_t *c = make_cache(400 * 1024, R, IBP_CACHE_POLICY_DEFAULT, 0);
	/* 250 requests: one pass of the workspace (max_batch 256) */
	int64_t ids[250], orow[250];
	int32_t st[250];
	uint8_t *out = xcalloc(250 * R);
	rng_t r = { 5 };
	for (int k = 0; k < 250; k++) {
		ids[k] = (int64_t)(rnd(&r) % 200); /* duplicates */
		orow[k] = 249 - k;
	}
	cr_assert_eq(ibp_cache_gather(c, f.s, ids, 250, out, orow, st, 0, NULL), IBP_OK, "%s", ibp_last_error());
	check_rows(ids, orow, 250, out, R);
	for (int k = 0; k < 250; k++)
		cr_assert_eq(st[k], IBP_OK);
	ibp_cache_stats_t s1;
	ibp_cache_stats(c, &s1, 0);
	cr_assert_eq(s1.requests, 250);
	cr_assert_eq(s1.hits, 0);
	cr_assert(s1.insertions > 0 && s1.insertions <= 200);
	cr_assert_eq(s1.store_rows, s1.insertions + s1.rejected, "distinct misses read once");
	cr_assert(s1.bytes_resident < s1.raw_bytes_resident, "rows kept compressed");
	/* Again: everything admitted is now a hit, and rows are still right. */
	memset(out, 0xEE, 250 * R);
	cr_assert_eq(ibp_cache_gather(c, f.s, ids, 250, out, NULL, NULL, 0, NULL), IBP_OK);
	check_rows(ids, NULL, 250, out, R);
	ibp_cache_stats_t s2;
	ibp_cache_stats(c, &s2, 0);
	cr_assert(s2.hits - s1.hits > 0);
	uint64_t class_hits = 0;
	for (uint32_t i = 0; i < s2.nclasses; i++) {
		ibp_cache_class_stats_t cs;
		cr_assert_eq(ibp_cache_class_stats(c, i, &cs), IBP_OK);
		class_hits += cs.hits;
		if (cs.slot_bytes < R)
			cr_assert_eq(cs.bytes_saved, cs.used * (R - cs.slot_bytes));
		cr_assert(cs.bytes_resident <= cs.used * cs.slot_bytes);
		if (i + 1 < s2.nclasses) { /* the ladder: ascending, 16-byte multiples, gaps <= class_step */
			ibp_cache_class_stats_t nx;
			cr_assert_eq(ibp_cache_class_stats(c, i + 1, &nx), IBP_OK);
			cr_assert(cs.slot_bytes % 16 == 0 && nx.slot_bytes > cs.slot_bytes);
			if (i + 2 < s2.nclasses)
				cr_assert_leq(nx.slot_bytes - cs.slot_bytes, s2.class_step);
		}
	}
	cr_assert_eq(class_hits, s2.hits);
	if (s1.rejected == 0 && s2.evictions == 0)
		cr_assert_eq(s2.hits - s1.hits, 250);
	check_invariants(c);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	free(out);
}

/* Random batches on every policy, size and layout; every row checked. */
static void run_mix(fx_t f, ibp_cache_policy_t pol, uint32_t flags, uint64_t seed)
{
	const uint64_t n = f.n, R = f.R;
	uint64_t cap = n * R / 8 + 3 * R;
	ibp_cache_t *c = make_cache(cap, R, pol, flags);
	if (pol == IBP_CACHE_STATIC) {
		float *score = xcalloc(n * sizeof(float));
		for (uint64_t i = 0; i < n; i++)
			score[i] = (float)(n - i);
		cr_assert_eq(ibp_cache_preload(c, f.s, score, n, NULL), IBP_OK, "%s", ibp_last_error());
		free(score);
		check_invariants(c);
	}
	int64_t ids[400], orow[400];
	uint8_t *out = xcalloc(400 * R);
	rng_t r = { seed };
	for (int b = 0; b < 12; b++) {
		uint64_t k = 1 + rnd(&r) % 400;
		for (uint64_t i = 0; i < k; i++) {
			/* skewed: small ids are hot */
			uint64_t x = rnd(&r) % n;
			ids[i] = (int64_t)(rnd(&r) % 2 ? x % (n / 10) : x);
			orow[i] = (int64_t)((i * 7) % k);
		}
		/* orow is a permutation when gcd(7, k) = 1 */
		const int64_t *o = k % 7 ? orow : NULL;
		cr_assert_eq(ibp_cache_gather(c, f.s, ids, k, out, o, NULL, b % 5 == 4 ? IBP_CACHE_NO_ADMIT : 0, NULL),
			     IBP_OK, "%s", ibp_last_error());
		check_rows(ids, o, k, out, R);
		if (b % 4 == 3)
			cr_assert_eq(ibp_cache_invalidate(c, ids, k / 3, NULL), IBP_OK);
		check_invariants(c);
	}
	ibp_cache_stats_t st;
	ibp_cache_stats(c, &st, 0);
	cr_assert(st.hits > 0, "a skewed trace hits (%s, R %llu)", ibp_cache_policy_name(pol), (unsigned long long)R);
	if (pol == IBP_CACHE_STATIC)
		cr_assert_eq(st.evictions, 0);
	ibp_cache_free(c);
	free(out);
}

Test(cache, odd_sizes_policies_layouts, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t sizes[] = { 131, 1000, 4099 };
	const ibp_cache_policy_t pols[] = { IBP_CACHE_CLOCK, IBP_CACHE_S3FIFO, IBP_CACHE_LRU, IBP_CACHE_STATIC };
	uint64_t seed = 1;
	for (int i = 0; i < 3; i++)
		for (int l = 0; l < 2; l++) {
			fx_t f = open_store(700, sizes[i], l ? IBP_LAYOUT_INPLACE : IBP_LAYOUT_PACKED, "mix");
			for (int p = 0; p < 4; p++)
				run_mix(f, pols[p], 0, seed++);
			if (i == 1 && l == 0) {
				run_mix(f, IBP_CACHE_CLOCK, IBP_CACHE_UNCOMPRESSED, seed++);
				run_mix(f, IBP_CACHE_S3FIFO, IBP_CACHE_NO_RAW, seed++);
			}
			ibp_store_close(f.s);
		}
}

/* Random operation sequences against a host model of what may be
 * resident: a resident id was admitted since its last invalidation, the
 * resident ids counted one by one equal rows_resident (no key twice), an
 * invalidated id is a miss, and every row read is the row of its id. */
Test(cache, property_against_host_map, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 300, R = 517;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "prop");
	uint8_t *out = xcalloc(64 * R), *one = xcalloc(R);
	uint8_t *may = xcalloc(n); /* admitted since the last invalidation */
	int64_t ids[64];
	for (int pol = IBP_CACHE_CLOCK; pol <= IBP_CACHE_LRU; pol++)
		for (uint64_t seed = 1; seed <= 3; seed++) {
			ibp_cache_t *c = make_cache(n * R / 5, R, (ibp_cache_policy_t)pol, 0);
			memset(may, 0, n);
			rng_t r = { seed * 100 + (uint64_t)pol };
			for (int op = 0; op < 60; op++) {
				uint64_t k = 1 + rnd(&r) % 64, what = rnd(&r) % 10;
				for (uint64_t i = 0; i < k; i++)
					ids[i] = (int64_t)(rnd(&r) % 3 ? rnd(&r) % (n / 5) : rnd(&r) % n);
				if (what < 5) {
					cr_assert_eq(ibp_cache_gather(c, f.s, ids, k, out, NULL, NULL, 0, NULL), IBP_OK);
					check_rows(ids, NULL, k, out, R);
					for (uint64_t i = 0; i < k; i++)
						may[ids[i]] = 1;
				} else if (what < 7) {
					cr_assert_eq(ibp_cache_prefetch(c, f.s, ids, k, NULL), IBP_OK);
					for (uint64_t i = 0; i < k; i++)
						may[ids[i]] = 1;
				} else if (what < 9) {
					cr_assert_eq(ibp_cache_invalidate(c, ids, k, NULL), IBP_OK);
					for (uint64_t i = 0; i < k; i++) {
						may[ids[i]] = 0;
						cr_assert_eq(resident(c, f.s, ids[i], one), 0, "id %lld invalidated",
							     (long long)ids[i]);
					}
				} else {
					cr_assert_eq(ibp_cache_invalidate(c, NULL, 0, NULL), IBP_OK);
					memset(may, 0, n);
				}
				check_invariants(c);
				if (op % 10 == 9) {
					ibp_cache_stats_t st;
					ibp_cache_stats(c, &st, 0);
					uint64_t count = 0;
					for (uint64_t id = 0; id < n; id++)
						if (resident(c, f.s, (int64_t)id, one)) {
							cr_assert(may[id], "id %llu resident but never admitted",
								  (unsigned long long)id);
							count++;
							uint8_t *want = xcalloc(R);
							make_row(id, R, want);
							cr_assert(memcmp(one, want, R) == 0);
							free(want);
						}
					cr_assert_eq(count, st.rows_resident, "resident ids %llu, counter %llu",
						     (unsigned long long)count, (unsigned long long)st.rows_resident);
				}
			}
			ibp_cache_free(c);
		}
	free(out);
	free(one);
	free(may);
	ibp_store_close(f.s);
}

/* Uncompressed holds floor(capacity / row_bytes) rows; compressed more. */
Test(cache, compressed_holds_more_rows, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 1000, R = 1000, cap = 100 * R + 37;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "ratio");
	int64_t *ids = xcalloc(n * sizeof(int64_t));
	for (uint64_t i = 0; i < n; i++)
		ids[i] = (int64_t)i;
	ibp_cache_t *u = make_cache(cap, R, IBP_CACHE_CLOCK, IBP_CACHE_UNCOMPRESSED);
	ibp_cache_t *z = make_cache(cap, R, IBP_CACHE_CLOCK, 0);
	cr_assert_eq(ibp_cache_prefetch(u, f.s, ids, n, NULL), IBP_OK);
	cr_assert_eq(ibp_cache_prefetch(z, f.s, ids, n, NULL), IBP_OK);
	ibp_cache_stats_t su, sz;
	ibp_cache_stats(u, &su, 0);
	ibp_cache_stats(z, &sz, 0);
	cr_assert_eq(su.rows_resident, cap / R);
	cr_assert_eq(su.insertions + su.rejected, n, "each distinct row admitted or refused");
	cr_assert(su.evictions > 0);
	cr_assert(sz.rows_resident > 2 * su.rows_resident, "compressed %llu rows, uncompressed %llu",
		  (unsigned long long)sz.rows_resident, (unsigned long long)su.rows_resident);
	check_invariants(u);
	check_invariants(z);
	ibp_cache_free(u);
	ibp_cache_free(z);
	ibp_store_close(f.s);
	free(ids);
}

/* A class that was starved takes slabs from one above its share. */
Test(cache, slabs_rebalance_on_drift, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 3000, R = 1000;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "drift");
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = 64 * 1024;
	o.row_bytes = R;
	o.slab_bytes = 8192;
	o.policy = IBP_CACHE_CLOCK;
	ibp_cache_t *c;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_OK, "%s", ibp_last_error());
	/* Phase 1: sparse rows only (kinds 0-3); phase 2: incompressible only (kind 5). */
	int64_t a[512], b[64];
	uint64_t na = 0, nb = 0;
	for (uint64_t i = 0; i < n && (na < 512 || nb < 64); i++) {
		uint64_t kind = mix(i) % 6;
		if (kind < 4 && na < 512)
			a[na++] = (int64_t)i;
		else if (kind == 5 && nb < 64)
			b[nb++] = (int64_t)i;
	}
	uint8_t *out = xcalloc(512 * R);
	cr_assert_eq(ibp_cache_gather(c, f.s, a, na, out, NULL, NULL, 0, NULL), IBP_OK);
	ibp_cache_stats_t s1, s2;
	ibp_cache_stats(c, &s1, 0);
	cr_assert_eq(s1.free_slabs, 0, "phase 1 takes every slab");
	ibp_cache_class_stats_t raw;
	ibp_cache_class_stats(c, s1.nclasses - 1, &raw);
	uint64_t raw_slabs = raw.slabs;
	for (int rep = 0; rep < 40; rep++)
		cr_assert_eq(ibp_cache_gather(c, f.s, b, 8, out, NULL, NULL, 0, NULL), IBP_OK);
	check_rows(b, NULL, 8, out, R);
	ibp_cache_stats(c, &s2, 0);
	ibp_cache_class_stats(c, s1.nclasses - 1, &raw);
	cr_assert(s2.slab_moves > 0, "no slab moved");
	cr_assert(raw.slabs > raw_slabs, "raw class %llu slabs, was %llu", (unsigned long long)raw.slabs,
		  (unsigned long long)raw_slabs);
	cr_assert(s2.hits - s1.hits >= 8 * 30, "hot raw rows are hits once they have room: %llu",
		  (unsigned long long)(s2.hits - s1.hits));
	check_invariants(c);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	free(out);
}

Test(cache, static_preload_never_evicts, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 800, R = 600;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "static");
	ibp_cache_t *c = make_cache(40 * R, R, IBP_CACHE_STATIC, 0);
	float *score = xcalloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		score[i] = i % 2 ? 1.0f : 2.0f; /* even ids first */
	cr_assert_eq(ibp_cache_preload(c, f.s, score, n, NULL), IBP_OK, "%s", ibp_last_error());
	ibp_cache_stats_t st;
	ibp_cache_stats(c, &st, 0);
	cr_assert(st.rows_resident > 0);
	uint8_t *one = xcalloc(R);
	cr_assert_eq(resident(c, f.s, 0, one), 1, "the best-scored row is resident");
	uint64_t odd = 0;
	for (uint64_t id = 1; id < n; id += 2)
		odd += (uint64_t)resident(c, f.s, (int64_t)id, one);
	/* Odd ids only where an even one did not fit its class. */
	int64_t ids[64];
	uint8_t *out = xcalloc(64 * R);
	for (int b = 0; b < 10; b++) {
		for (int i = 0; i < 64; i++)
			ids[i] = (int64_t)((uint64_t)(b * 64 + i) * 7 % n);
		cr_assert_eq(ibp_cache_gather(c, f.s, ids, 64, out, NULL, NULL, 0, NULL), IBP_OK);
		check_rows(ids, NULL, 64, out, R);
	}
	ibp_cache_stats_t s2;
	ibp_cache_stats(c, &s2, 0);
	cr_assert_eq(s2.evictions, 0);
	cr_assert_eq(s2.insertions, st.insertions, "gathers never admit under the static policy");
	cr_assert_eq(s2.rows_resident, st.rows_resident);
	cr_assert(odd < st.rows_resident);
	check_invariants(c);
	free(score);
	free(one);
	free(out);
	ibp_cache_free(c);
	ibp_store_close(f.s);
}

/* Several callers at once: hits are pinned while decoded, so rows are
 * right although others evict and invalidate all the time. */
typedef struct worker {
	ibp_cache_t *c;
	ibp_store_t *s;
	uint64_t n, R, seed;
	int bad;
} worker_t;

static void *work(void *arg)
{
	worker_t *w = arg;
	rng_t r = { w->seed };
	int64_t ids[96];
	uint8_t *out = malloc(96 * w->R), *want = malloc(w->R);
	for (int it = 0; it < 60 && out && want; it++) {
		uint64_t k = 1 + rnd(&r) % 96;
		for (uint64_t i = 0; i < k; i++)
			ids[i] = (int64_t)(rnd(&r) % (rnd(&r) % 2 ? w->n / 8 : w->n));
		if (ibp_cache_gather(w->c, w->s, ids, k, out, NULL, NULL, 0, NULL) != IBP_OK)
			w->bad++;
		for (uint64_t i = 0; i < k; i++) {
			make_row((uint64_t)ids[i], w->R, want);
			if (memcmp(out + i * w->R, want, w->R))
				w->bad++;
		}
		if (it % 7 == 6 && ibp_cache_invalidate(w->c, ids, k / 2, NULL) != IBP_OK)
			w->bad++;
	}
	if (!out || !want)
		w->bad++;
	free(out);
	free(want);
	return NULL;
}

Test(cache, concurrent_callers_pin, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 600, R = 700;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "threads");
	for (int pol = IBP_CACHE_CLOCK; pol <= IBP_CACHE_LRU; pol++) {
		ibp_cache_t *c = make_cache(n * R / 10, R, (ibp_cache_policy_t)pol, 0);
		pthread_t th[4];
		worker_t w[4];
		for (int i = 0; i < 4; i++) {
			w[i] = (worker_t){ c, f.s, n, R, (uint64_t)(i + 10 * pol), 0 };
			cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			cr_assert_eq(w[i].bad, 0, "worker %d saw %d wrong rows or errors", i, w[i].bad);
		}
		check_invariants(c);
		ibp_cache_free(c);
	}
	ibp_store_close(f.s);
}

Test(cache, exp_codec_rows_kept_decoded, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 300, R = 256; /* 64 float32 */
	float *rows = xcalloc(n * R);
	for (uint64_t i = 0; i < n * 64; i++)
		rows[i] = (float)(i % 977) * 0.25f;
	char path[160];
	snprintf(path, sizeof(path), "%s/exp.ibp", tmpdir);
	uint64_t shape[2] = { n, 64 };
	cr_assert_eq(ibp_pack_exp(path, rows, IBP_DTYPE_F32, 2, shape, NULL, 50), IBP_OK, "%s", ibp_last_error());
	ibp_store_t *s;
	cr_assert_eq(ibp_store_open(path, IBP_OPEN_READ, &s), IBP_OK);
	ibp_cache_t *c = make_cache(40 * R, R, IBP_CACHE_S3FIFO, 0);
	int64_t ids[50];
	uint8_t *out = xcalloc(50 * R);
	for (int b = 0; b < 4; b++) {
		for (int i = 0; i < 50; i++)
			ids[i] = (int64_t)((i * 13 + b) % 60);
		cr_assert_eq(ibp_cache_gather(c, s, ids, 50, out, NULL, NULL, 0, NULL), IBP_OK, "%s", ibp_last_error());
		for (int i = 0; i < 50; i++)
			cr_assert(memcmp(out + (uint64_t)i * R, (uint8_t *)rows + (uint64_t)ids[i] * R, R) == 0);
	}
	ibp_cache_stats_t st;
	ibp_cache_stats(c, &st, 0);
	cr_assert(st.hits > 0);
	cr_assert_eq(st.bytes_resident, st.raw_bytes_resident, "exp rows are kept decoded");
	check_invariants(c);
	ibp_cache_free(c);
	ibp_store_close(s);
	free(out);
	free(rows);
}

Test(cache, errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t R = 300;
	fx_t f = open_store(200, R, IBP_LAYOUT_PACKED, "err");
	fx_t g = open_store(50, R, IBP_LAYOUT_PACKED, "err2");
	ibp_cache_opts_t o;
	ibp_cache_t *c = (ibp_cache_t *)&o;
	cr_assert_eq(ibp_cache_create(NULL, &c), IBP_ERR_INVALID_ARG);
	ibp_cache_opts_default(&o);
	o.row_bytes = R;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG, "capacity 0");
	cr_assert_null(c);
	o.capacity_bytes = 100; /* below one raw slot */
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	o.capacity_bytes = 1 << 16;
	o.class_step = 100;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG, "class_step not a power of two");
	o.class_step = 0;
	o.raw_threshold = 1.5;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	o.raw_threshold = 0.95;
	o.policy = (ibp_cache_policy_t)9;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	o.policy = IBP_CACHE_CLOCK;
	o.flags = 0x80;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	o.flags = 0;
	o.device = 0; /* a GPU cache: without a GPU (and no fallback flag) none (test_cache_cuda.c) */
	int ndev = 0;
	if (ibp_cuda_device_count(&ndev) != IBP_OK) {
		cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_NO_DEVICE);
		cr_assert_null(c);
	}
	o.device = -1;
	o.row_bytes = IBP_CACHE_MAX_ROW_BYTES + 1;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	o.row_bytes = R;
	/* slab geometries an entry cannot name, refused before anything is allocated */
	o.capacity_bytes = 1ull << 40;
	o.slab_bytes = 4096;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG, "2^28 slabs");
	cr_assert(strstr(ibp_last_error(), "slabs") != NULL, "%s", ibp_last_error());
	o.capacity_bytes = 1 << 16;
	o.slab_bytes = 200;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG, "a slab below one raw row");
	o.slab_bytes = 1000;
	o.flags = IBP_CACHE_UNCOMPRESSED;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG, "fixed-width slabs of whole rows");
	o.slab_bytes = 0;
	o.flags = 0;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_OK, "%s", ibp_last_error());

	int64_t ids[4] = { 3, 200, -1, 3 }, orow[4] = { 0, 1, 2, -5 };
	int32_t st[4];
	uint8_t *out = xcalloc(4 * R);
	memset(out, 0x77, 4 * R);
	cr_assert_eq(ibp_cache_gather(c, f.s, ids, 4, out, orow, st, 0, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert(strstr(ibp_last_error(), "request 1") != NULL, "%s", ibp_last_error());
	cr_assert_eq(st[0], IBP_OK);
	cr_assert_eq(st[1], IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(st[2], IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(st[3], IBP_ERR_INVALID_ARG);
	check_rows(ids, NULL, 1, out, R);
	for (uint64_t j = R; j < 3 * R; j++)
		cr_assert_eq(out[j], 0, "out-of-range rows are zero-filled");
	for (uint64_t j = 3 * R; j < 4 * R; j++)
		cr_assert_eq(out[j], 0x77, "nothing written for a negative output row");

	cr_assert_eq(ibp_cache_gather(NULL, f.s, ids, 1, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(c, NULL, ids, 1, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(c, f.s, NULL, 1, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(c, f.s, ids, 1, NULL, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(c, f.s, ids, 1, out, NULL, NULL, 0x10, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(c, f.s, NULL, 0, NULL, NULL, NULL, 0, NULL), IBP_OK, "n = 0");
	/* bound to f: another store is refused until emptied */
	cr_assert_eq(ibp_cache_gather(c, g.s, ids, 1, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_prefetch(c, g.s, ids, 1, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_invalidate(c, NULL, 0, NULL), IBP_OK);
	cr_assert_eq(ibp_cache_gather(c, g.s, ids, 1, out, NULL, NULL, 0, NULL), IBP_OK);
	ibp_cache_stats_t s;
	ibp_cache_stats(c, &s, 0);
	cr_assert_eq(s.rows_resident, 1);
	/* prefetch checks every id first and admits nothing on a bad one */
	int64_t pf[3] = { 4, 5, 50 };
	cr_assert_eq(ibp_cache_prefetch(c, g.s, pf, 3, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert(strstr(ibp_last_error(), "id 50 at position 2") != NULL, "%s", ibp_last_error());
	int64_t pfn[2] = { 4, -1 };
	cr_assert_eq(ibp_cache_prefetch(c, g.s, pfn, 2, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert(strstr(ibp_last_error(), "id -1 at position 1") != NULL, "%s", ibp_last_error());
	ibp_cache_stats(c, &s, 0);
	cr_assert_eq(s.rows_resident, 1);
	int64_t neg = -3;
	cr_assert_eq(ibp_cache_invalidate(c, &neg, 1, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_cache_invalidate(c, NULL, 2, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_invalidate(NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	ibp_cache_class_stats_t cs;
	cr_assert_eq(ibp_cache_class_stats(c, s.nclasses, &cs), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_cache_class_stats(c, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_stats(c, NULL, 0), IBP_ERR_INVALID_ARG);
	float sc[50] = { 0 };
	cr_assert_eq(ibp_cache_preload(c, g.s, sc, 49, NULL), IBP_ERR_INVALID_ARG, "one score per row");
	cr_assert_eq(ibp_cache_preload(c, g.s, NULL, 50, NULL), IBP_ERR_INVALID_ARG);
	/* a cache for other row sizes refuses the store */
	ibp_cache_t *d = make_cache(1 << 16, R + 1, IBP_CACHE_CLOCK, 0);
	cr_assert_eq(ibp_cache_gather(d, f.s, ids, 1, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	ibp_cache_free(d);
	ibp_cache_free(NULL);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	ibp_store_close(g.s);
	free(out);
}

/* The index keeps one copy of a key across tombstones: insert a, insert b
 * (same home slot), erase a, and b is still found, so it is never inserted
 * again (cuCollections #606); rehashing drops the tombstones. */
Test(cache, index_tombstones)
{
	cache_index_t ix = { 0 };
	ix.cap = 16;
	ix.keys = xcalloc(16 * sizeof(int64_t));
	ix.vals = xcalloc(16 * sizeof(uint64_t));
	for (int i = 0; i < 16; i++)
		ix.keys[i] = KEY_EMPTY;
	/* three ids with one home slot */
	int64_t same[3];
	int k = 0;
	uint64_t home = ibpi_cache_hash(0) & 15;
	for (int64_t id = 0; k < 3; id++)
		if ((ibpi_cache_hash(id) & 15) == home)
			same[k++] = id;
	ibpi_cache_ix_insert(&ix, same[0], 10);
	ibpi_cache_ix_insert(&ix, same[1], 11);
	ibpi_cache_ix_insert(&ix, same[2], 12);
	ibpi_cache_ix_erase(&ix, ibpi_cache_ix_find(&ix, same[0]));
	ibpi_cache_ix_erase(&ix, ibpi_cache_ix_find(&ix, same[1]));
	uint64_t p = ibpi_cache_ix_find(&ix, same[2]);
	cr_assert_neq(p, UINT64_MAX, "a key behind two tombstones is found");
	cr_assert_eq(ix.vals[p], 12);
	cr_assert_eq(ibpi_cache_ix_find(&ix, same[0]), UINT64_MAX);
	ibpi_cache_ix_insert(&ix, same[1], 21); /* reuses the first tombstone */
	cr_assert_eq(ibpi_cache_ix_find(&ix, same[1]), home);
	cr_assert_eq(ix.used, 2);
	cr_assert_eq(ix.tombs, 1);
	/* fill up to the rehash point: tombstones go, every key stays */
	for (int64_t id = 100; ix.used < 13; id++)
		if (ibpi_cache_ix_find(&ix, id) == UINT64_MAX)
			ibpi_cache_ix_insert(&ix, id, (uint64_t)id);
	cr_assert_eq(ix.tombs, 0, "rehashed");
	cr_assert_eq(ix.vals[ibpi_cache_ix_find(&ix, same[2])], 12);
	cr_assert_eq(ix.vals[ibpi_cache_ix_find(&ix, same[1])], 21);
	/* the host index grows past its first size, keeping every key */
	for (int64_t id = 1000; id < 1040; id++)
		cr_assert_eq(ibpi_cache_ix_insert(&ix, id, (uint64_t)id), 0);
	cr_assert(ix.cap >= 64 && ix.used * 8 <= ix.cap * 7, "grown to %llu", (unsigned long long)ix.cap);
	for (int64_t id = 1000; id < 1040; id++)
		cr_assert_eq(ix.vals[ibpi_cache_ix_find(&ix, id)], (uint64_t)id);
	free(ix.keys);
	free(ix.vals);
}

/* A batch's hits are pinned until decoded: its misses cannot take their
 * slots (the misses come first, so a stolen slot would be refilled before
 * the hit is read), and are refused instead when nothing else is free. */
Test(cache, pinned_hits_survive_their_batch, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t R = 800;
	fx_t f = open_store(64, R, IBP_LAYOUT_PACKED, "pin");
	for (int pol = IBP_CACHE_CLOCK; pol <= IBP_CACHE_LRU; pol++) {
		ibp_cache_t *c = make_cache(4 * R, R, (ibp_cache_policy_t)pol, IBP_CACHE_UNCOMPRESSED);
		int64_t a[4] = { 0, 1, 2, 3 }, b[8] = { 4, 5, 6, 7, 0, 1, 2, 3 };
		uint8_t *out = xcalloc(8 * R);
		cr_assert_eq(ibp_cache_gather(c, f.s, a, 4, out, NULL, NULL, 0, NULL), IBP_OK);
		cr_assert_eq(ibp_cache_gather(c, f.s, a, 4, out, NULL, NULL, 0, NULL), IBP_OK);
		ibp_cache_stats_t s0, s1;
		ibp_cache_stats(c, &s0, 0);
		cr_assert_eq(s0.rows_resident, 4);
		cr_assert_eq(ibp_cache_gather(c, f.s, b, 8, out, NULL, NULL, 0, NULL), IBP_OK);
		check_rows(b, NULL, 8, out, R);
		ibp_cache_stats(c, &s1, 0);
		cr_assert_eq(s1.hits - s0.hits, 4);
		cr_assert_eq(s1.evictions, s0.evictions, "%s evicted a pinned row", ibp_cache_policy_name(pol));
		cr_assert_eq(s1.rejected - s0.rejected, 4);
		check_invariants(c);
		free(out);
		ibp_cache_free(c);
	}
	ibp_store_close(f.s);
}

/* ---- evicted-row output (ibp_cache_gather_evict / _prefetch_evict) ---- */

/* resident[id] for every id, by NO_ADMIT gathers of one id (hits count as
 * uses for the policy; nothing is admitted or evicted). */
static void resident_set(ibp_cache_t *c, ibp_store_t *s, uint64_t n, uint8_t *res, uint8_t *buf)
{
	for (uint64_t id = 0; id < n; id++)
		res[id] = (uint8_t)resident(c, s, (int64_t)id, buf);
}

/* Every row that leaves the cache during a gather is reported, once, and
 * nothing else: before \ evicted ⊆ after, evicted ∩ after = ∅, evicted ⊆
 * before, after \ before ⊆ the batch, and the count equals the eviction
 * counter; under every policy, compressed (slab moves) and fixed-width. */
Test(cache, evicted_ids_exact, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 240, R = 700;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "evict");
	uint8_t *before = xcalloc(n), *after = xcalloc(n), *inb = xcalloc(n), *seen = xcalloc(n);
	uint8_t *out = xcalloc(200 * R), *one = xcalloc(R);
	int64_t ids[200], ev[4096];
	for (int pol = IBP_CACHE_CLOCK; pol <= IBP_CACHE_LRU; pol++)
		for (int fl = 0; fl < 2; fl++) {
			ibp_cache_t *c = make_cache(n * R / 6, R, (ibp_cache_policy_t)pol, fl ? IBP_CACHE_UNCOMPRESSED : 0);
			rng_t r = { 77 + (uint64_t)pol * 2 + (uint64_t)fl };
			uint64_t total = 0;
			for (int op = 0; op < 25; op++) {
				uint64_t k = 1 + rnd(&r) % 200;
				memset(inb, 0, n);
				for (uint64_t i = 0; i < k; i++) {
					ids[i] = (int64_t)(op < 12 ? rnd(&r) % n : (rnd(&r) % 2 ? rnd(&r) % 40 : 120 + rnd(&r) % 120));
					inb[ids[i]] = 1;
				}
				resident_set(c, f.s, n, before, one);
				ibp_cache_stats_t s0, s1;
				ibp_cache_stats(c, &s0, 0);
				uint64_t ne = 12345;
				if (op % 3 == 2) {
					cr_assert_eq(ibp_cache_prefetch_evict(c, f.s, ids, k, ev, 4096, &ne, NULL), IBP_OK, "%s",
						     ibp_last_error());
				} else {
					cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, k, out, NULL, NULL, 0, ev, 4096, &ne, NULL),
						     IBP_OK, "%s", ibp_last_error());
					check_rows(ids, NULL, k, out, R);
				}
				ibp_cache_stats(c, &s1, 0);
				cr_assert_eq(ne, s1.evictions - s0.evictions, "%s: %llu ids reported, %llu evicted",
					     ibp_cache_policy_name(pol), (unsigned long long)ne,
					     (unsigned long long)(s1.evictions - s0.evictions));
				total += ne;
				resident_set(c, f.s, n, after, one);
				memset(seen, 0, n);
				for (uint64_t i = 0; i < ne; i++) {
					cr_assert(ev[i] >= 0 && (uint64_t)ev[i] < n, "evicted id %lld", (long long)ev[i]);
					cr_assert(!seen[ev[i]], "id %lld reported twice", (long long)ev[i]);
					seen[ev[i]] = 1;
					cr_assert(before[ev[i]], "id %lld reported but was not resident", (long long)ev[i]);
					cr_assert(!after[ev[i]], "id %lld reported but still resident", (long long)ev[i]);
				}
				for (uint64_t id = 0; id < n; id++) {
					if (before[id] && !seen[id])
						cr_assert(after[id], "%s: id %llu left the cache unreported", ibp_cache_policy_name(pol),
							  (unsigned long long)id);
					if (after[id] && !before[id])
						cr_assert(inb[id], "id %llu appeared without being asked for", (unsigned long long)id);
				}
				check_invariants(c);
			}
			cr_assert(total > 0, "%s: the trace evicts", ibp_cache_policy_name(pol));
			ibp_cache_free(c);
		}
	ibp_store_close(f.s);
	free(before);
	free(after);
	free(inb);
	free(seen);
	free(out);
	free(one);
}

/* A slab moved to a starved class evicts all of its rows: all reported. */
Test(cache, evicted_ids_include_slab_moves, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 3000, R = 1000;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "evmove");
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = 64 * 1024;
	o.row_bytes = R;
	o.slab_bytes = 8192;
	o.policy = IBP_CACHE_CLOCK;
	ibp_cache_t *c;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_OK, "%s", ibp_last_error());
	int64_t a[512], b[64];
	uint64_t na = 0, nb = 0;
	for (uint64_t i = 0; i < n && (na < 512 || nb < 64); i++) {
		uint64_t kind = mix(i) % 6;
		if (kind < 4 && na < 512)
			a[na++] = (int64_t)i;
		else if (kind == 5 && nb < 64)
			b[nb++] = (int64_t)i;
	}
	uint8_t *out = xcalloc(512 * R);
	int64_t *ev = xcalloc(4096 * sizeof(int64_t));
	uint64_t ne = 0, reported = 0;
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, a, na, out, NULL, NULL, 0, ev, 4096, &ne, NULL), IBP_OK);
	reported += ne;
	ibp_cache_stats_t s1, s2;
	ibp_cache_stats(c, &s1, 0);
	for (int rep = 0; rep < 40; rep++) {
		cr_assert_eq(ibp_cache_gather_evict(c, f.s, b, 8, out, NULL, NULL, 0, ev, 4096, &ne, NULL), IBP_OK);
		for (uint64_t i = 0; i < ne; i++)
			cr_assert(mix((uint64_t)ev[i]) % 6 < 4, "only phase-1 rows are evicted: id %lld", (long long)ev[i]);
		reported += ne;
	}
	ibp_cache_stats(c, &s2, 0);
	cr_assert(s2.slab_moves > 0);
	cr_assert(s2.evictions > s1.evictions);
	cr_assert_eq(reported, s2.evictions, "reported %llu, evicted %llu", (unsigned long long)reported,
		     (unsigned long long)s2.evictions);
	check_invariants(c);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	free(out);
	free(ev);
}

/* evicted_cap bounds the evictions of a call: misses that would need more
 * are refused (rejected), rows are still right; cap 0 fills free space only. */
Test(cache, evicted_cap_limits_evictions, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 400, R = 600;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "evcap");
	ibp_cache_t *c = make_cache(30 * R, R, IBP_CACHE_CLOCK, IBP_CACHE_UNCOMPRESSED);
	int64_t ids[100], ev[8];
	uint8_t *out = xcalloc(100 * R);
	for (int i = 0; i < 30; i++)
		ids[i] = i;
	uint64_t ne = 99;
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 30, out, NULL, NULL, 0, ev, 0, &ne, NULL), IBP_OK);
	cr_assert_eq(ne, 0, "free space needs no eviction");
	ibp_cache_stats_t s0, s1, s2;
	ibp_cache_stats(c, &s0, 0);
	cr_assert_eq(s0.rows_resident, 30);
	for (int i = 0; i < 100; i++)
		ids[i] = 100 + i;
	/* cap 0: nothing can go, every miss is refused */
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 100, out, NULL, NULL, 0, ev, 0, &ne, NULL), IBP_OK);
	check_rows(ids, NULL, 100, out, R);
	ibp_cache_stats(c, &s1, 0);
	cr_assert_eq(ne, 0);
	cr_assert_eq(s1.evictions, s0.evictions);
	cr_assert_eq(s1.rejected - s0.rejected, 100);
	cr_assert_eq(s1.rows_resident, 30);
	/* cap 8: exactly 8 evicted, 8 admitted, the rest refused */
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 100, out, NULL, NULL, 0, ev, 8, &ne, NULL), IBP_OK);
	check_rows(ids, NULL, 100, out, R);
	ibp_cache_stats(c, &s2, 0);
	cr_assert_eq(ne, 8);
	cr_assert_eq(s2.evictions - s1.evictions, 8);
	cr_assert_eq(s2.insertions - s1.insertions, 8);
	for (int i = 0; i < 8; i++)
		cr_assert(ev[i] >= 0 && ev[i] < 30, "an old row went: %lld", (long long)ev[i]);
	/* no limit, count only */
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 100, out, NULL, NULL, 0, NULL, 0, &ne, NULL), IBP_OK);
	ibp_cache_stats_t s3;
	ibp_cache_stats(c, &s3, 0);
	cr_assert_eq(ne, s3.evictions - s2.evictions);
	cr_assert(ne > 0);
	/* NO_ADMIT never evicts */
	for (int i = 0; i < 100; i++)
		ids[i] = 300 + i;
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 100, out, NULL, NULL, IBP_CACHE_NO_ADMIT, ev, 8, &ne, NULL),
		     IBP_OK);
	cr_assert_eq(ne, 0);
	/* argument errors: the count is still set */
	ne = 7;
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 1, out, NULL, NULL, 0, ev, 8, NULL, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_evict(c, f.s, ids, 1, out, NULL, NULL, 0, NULL, 8, &ne, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ne, 0);
	ne = 7;
	cr_assert_eq(ibp_cache_prefetch_evict(c, f.s, ids, 1, NULL, 3, &ne, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ne, 0);
	ne = 7;
	cr_assert_eq(ibp_cache_gather_evict(NULL, f.s, ids, 1, out, NULL, NULL, 0, ev, 8, &ne, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ne, 0);
	int64_t bad = (int64_t)n;
	ne = 7;
	cr_assert_eq(ibp_cache_prefetch_evict(c, f.s, &bad, 1, ev, 8, &ne, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ne, 0);
	check_invariants(c);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	free(out);
}

/* A call of more ids than max_batch loops over passes: the count spans them
 * all and a limit holds across passes. */
Test(cache, evicted_across_passes, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t n = 1200, R = 300;
	fx_t f = open_store(n, R, IBP_LAYOUT_PACKED, "evpass");
	ibp_cache_t *c = make_cache(50 * R, R, IBP_CACHE_S3FIFO, IBP_CACHE_UNCOMPRESSED);
	int64_t *ids = xcalloc(n * sizeof(int64_t)), *ev = xcalloc(n * sizeof(int64_t));
	for (uint64_t i = 0; i < n; i++)
		ids[i] = (int64_t)i;
	uint64_t ne = 0;
	cr_assert_eq(ibp_cache_prefetch_evict(c, f.s, ids, n, ev, n, &ne, NULL), IBP_OK);
	ibp_cache_stats_t st;
	ibp_cache_stats(c, &st, 0);
	/* 5 passes of 256: each admits 50 (the slots it fills stay pinned until
	 * it publishes) and, from the second on, evicts the 50 before */
	cr_assert_eq(ne, st.evictions);
	cr_assert_eq(st.insertions, 250);
	cr_assert_eq(ne, 200, "all but the last 50 admitted were evicted");
	uint8_t *seen = xcalloc(n);
	for (uint64_t i = 0; i < ne; i++) {
		cr_assert(!seen[ev[i]], "id %lld twice", (long long)ev[i]);
		seen[ev[i]] = 1;
	}
	free(seen);
	ibp_cache_free(c);
	c = make_cache(50 * R, R, IBP_CACHE_S3FIFO, IBP_CACHE_UNCOMPRESSED);
	cr_assert_eq(ibp_cache_prefetch_evict(c, f.s, ids, n, ev, 120, &ne, NULL), IBP_OK);
	ibp_cache_stats(c, &st, 0);
	cr_assert_eq(ne, 120, "the limit holds over the passes");
	cr_assert_eq(st.evictions, 120);
	cr_assert_eq(st.insertions, 170);
	ibp_cache_free(c);
	ibp_store_close(f.s);
	free(ids);
	free(ev);
}
