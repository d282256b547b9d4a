/* test_slab_pool.c - the slab pool (ibp/cache.h): variable-size blocks in
 * the cache's size-class allocator over pinned (or host) memory. Blocks are
 * self-verifying (their bytes are a function of a seed kept beside the
 * handle); checked: round trips of every size, the byte capacity never
 * exceeded, the eviction callback reporting exactly the blocks that go
 * (with their bytes intact), freed slots reused, pinned blocks never
 * evicted, the static policy refusing, removal while pinned, a size drift
 * that moves slabs, slab choices that follow current targets (digests of
 * a drifting run under every policy), concurrent writers and readers, and
 * the error paths. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cache/cache_internal.h"
#include "fixtures.h"
#include "ibp/cache.h"

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
	rng_t r = { seed * 0x9E3779B97F4A7C15ull + 1 };
	for (uint64_t i = 0; i < len; i++)
		p[i] = (uint8_t)(rnd(&r) >> 32);
}

static int same(const uint8_t *p, uint64_t len, uint64_t seed)
{
	rng_t r = { seed * 0x9E3779B97F4A7C15ull + 1 };
	for (uint64_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(rnd(&r) >> 32))
			return 0;
	return 1;
}

/* A host model: per handle, its seed and length, and whether it is held. */
#define MAXH 20000
typedef struct model {
	uint64_t seed[MAXH], len[MAXH];
	uint8_t held[MAXH], evicted[MAXH];
	uint64_t nev, bad;
	int64_t order[MAXH]; /* eviction order */
} model_t;

static void on_evict(void *user, int64_t h, const void *data, uint64_t len)
{
	model_t *m = user;
	if (h < 0 || h >= MAXH || !m->held[h] || m->len[h] != len || !same(data, len, m->seed[h]))
		m->bad++; /* a block we do not hold, or its bytes already overwritten */
	if (h >= 0 && h < MAXH) {
		m->held[h] = 0;
		m->evicted[h] = 1;
	}
	m->order[m->nev++ % MAXH] = h;
}

static ibp_slab_pool_t *make_pool(uint64_t cap, uint64_t maxb, ibp_cache_policy_t pol, model_t *m, uint32_t flags)
{
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = cap;
	o.max_block_bytes = maxb;
	o.policy = pol;
	o.flags = flags;
	o.on_evict = m ? on_evict : NULL;
	o.user = m;
	ibp_slab_pool_t *p;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());
	return p;
}

static void check_pool(ibp_slab_pool_t *p, const model_t *m)
{
	ibp_slab_pool_stats_t st;
	cr_assert_eq(ibp_slab_pool_stats(p, &st, 0), IBP_OK);
	cr_assert(st.slot_bytes_used <= st.capacity_bytes, "%llu slot bytes > capacity %llu",
		  (unsigned long long)st.slot_bytes_used, (unsigned long long)st.capacity_bytes);
	cr_assert(st.bytes <= st.slot_bytes_used);
	cr_assert_eq(st.allocs, st.blocks + st.evictions + st.frees, "allocs %llu != held %llu + evicted %llu + freed %llu",
		     (unsigned long long)st.allocs, (unsigned long long)st.blocks, (unsigned long long)st.evictions,
		     (unsigned long long)st.frees);
	uint64_t slabs = 0, used = 0;
	for (uint32_t i = 0; i < st.nclasses; i++) {
		ibp_cache_class_stats_t cs;
		cr_assert_eq(ibp_slab_pool_class_stats(p, i, &cs), IBP_OK);
		slabs += cs.slabs;
		used += cs.used;
		cr_assert(cs.used <= cs.slots);
	}
	cr_assert_eq(slabs + st.free_slabs, st.nslabs);
	cr_assert(used >= st.blocks);
	if (m) {
		cr_assert_eq(m->bad, 0, "%llu evictions of blocks not held or overwritten", (unsigned long long)m->bad);
		cr_assert_eq(m->nev, st.evictions, "callback %llu times, %llu evictions", (unsigned long long)m->nev,
			     (unsigned long long)st.evictions);
		uint64_t held = 0, bytes = 0;
		for (int64_t h = 0; h < st.next_handle && h < MAXH; h++)
			if (m->held[h]) {
				held++;
				bytes += m->len[h];
			}
		cr_assert_eq(held, st.blocks);
		cr_assert_eq(bytes, st.bytes);
	}
}

static int64_t put(ibp_slab_pool_t *p, model_t *m, uint64_t len, uint64_t seed)
{
	uint8_t *buf = xcalloc(len + 1);
	fill(buf, len, seed);
	int64_t h = -7;
	ibp_status_t s = ibp_slab_pool_put(p, buf, len, &h);
	free(buf);
	if (s != IBP_OK) {
		cr_assert_eq(h, -1);
		return -1;
	}
	cr_assert(h >= 0 && h < MAXH);
	if (m) {
		m->seed[h] = seed;
		m->len[h] = len;
		m->held[h] = 1;
	}
	return h;
}

static void check_block(ibp_slab_pool_t *p, int64_t h, uint64_t len, uint64_t seed)
{
	uint8_t *buf = xcalloc(len + 1);
	uint64_t got = 0;
	cr_assert_eq(ibp_slab_pool_get(p, h, buf, len, &got), IBP_OK, "block %lld: %s", (long long)h, ibp_last_error());
	cr_assert_eq(got, len);
	cr_assert(same(buf, len, seed), "block %lld differs", (long long)h);
	free(buf);
}

/* Random puts (many sizes), gets and removes against the model. */
Test(slab_pool, model_every_policy)
{
	const uint64_t maxb = 5000;
	model_t *m = xcalloc(sizeof(model_t));
	for (int pol = IBP_CACHE_CLOCK; pol <= IBP_CACHE_LRU; pol++) {
		memset(m, 0, sizeof(*m));
		ibp_slab_pool_t *p = make_pool(200 * 1024 + 333, maxb, (ibp_cache_policy_t)pol, m, 0);
		rng_t r = { 9 + (uint64_t)pol };
		int64_t last = -1;
		for (int op = 0; op < 3000; op++) {
			uint64_t what = rnd(&r) % 10;
			if (what < 6 || last < 0) {
				/* sizes drift: small blocks first, then large ones */
				uint64_t len = op < 1500 ? rnd(&r) % 900 : 1000 + rnd(&r) % (maxb - 999);
				if (rnd(&r) % 50 == 0)
					len = rnd(&r) % 2 ? 0 : maxb;
				last = put(p, m, len, (uint64_t)op);
				cr_assert(last >= 0, "%s: a put failed with nothing pinned: %s", ibp_cache_policy_name(pol),
					  ibp_last_error());
			} else if (what < 9) {
				int64_t h = (int64_t)(rnd(&r) % (uint64_t)(last + 1));
				if (m->held[h]) {
					check_block(p, h, m->len[h], m->seed[h]);
				} else {
					uint8_t b[8];
					cr_assert_eq(ibp_slab_pool_get(p, h, b, sizeof(b), NULL), IBP_ERR_OUT_OF_RANGE);
					cr_assert_eq(ibp_slab_pool_size(p, h, NULL), IBP_ERR_OUT_OF_RANGE);
				}
			} else {
				int64_t h = (int64_t)(rnd(&r) % (uint64_t)(last + 1));
				ibp_status_t s = ibp_slab_pool_remove(p, h);
				cr_assert_eq(s, m->held[h] ? IBP_OK : IBP_ERR_OUT_OF_RANGE);
				m->held[h] = 0;
			}
			if (op % 250 == 0)
				check_pool(p, m);
		}
		check_pool(p, m);
		for (int64_t h = 0; h <= last; h++)
			if (m->held[h])
				check_block(p, h, m->len[h], m->seed[h]);
		ibp_slab_pool_stats_t st;
		ibp_slab_pool_stats(p, &st, 0);
		cr_assert(st.evictions > 0);
		cr_assert(st.slab_moves > 0, "%s: the size drift moved no slab", ibp_cache_policy_name(pol));
		ibp_slab_pool_free(p);
	}
	free(m);
}

/* Same-size blocks, never read: CLOCK evicts in allocation order, and every
 * block that fits stays. */
Test(slab_pool, clock_evicts_oldest_first)
{
	model_t *m = xcalloc(sizeof(model_t));
	ibp_slab_pool_t *p = make_pool(10 * 1024, 1024, IBP_CACHE_CLOCK, m, 0);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(put(p, m, 1000, (uint64_t)i), i);
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.blocks, 10);
	cr_assert_eq(st.evictions, 30);
	for (int i = 0; i < 30; i++)
		cr_assert_eq(m->order[i], i, "eviction %d took block %lld", i, (long long)m->order[i]);
	check_pool(p, m);
	/* a block read recently is spared once (its reference bit) */
	check_block(p, 30, 1000, 30);
	cr_assert_eq(put(p, m, 1000, 40), 40);
	cr_assert_eq(m->order[30], 31, "the read block survived, the next oldest went");
	ibp_slab_pool_free(p);
	free(m);
}

/* A freed slot is the next block's of its class; blocks of a class that
 * fit in freed slots evict nothing. */
Test(slab_pool, freed_slots_reused)
{
	model_t *m = xcalloc(sizeof(model_t));
	ibp_slab_pool_t *p = make_pool(64 * 1024, 4096, IBP_CACHE_S3FIFO, m, IBP_SLAB_POOL_HOST);
	int64_t h[64];
	int n = 0;
	for (;; n++) {
		ibp_slab_pool_stats_t st;
		ibp_slab_pool_stats(p, &st, 0);
		if (st.evictions)
			break;
		h[n] = put(p, m, 1500, (uint64_t)n);
	}
	n--; /* the last put evicted one */
	void *ptr;
	uint64_t len;
	int64_t victim = -1;
	for (int i = 0; i <= n; i++)
		if (m->held[h[i]]) {
			victim = h[i];
			break;
		}
	cr_assert_eq(ibp_slab_pool_pin(p, victim, &ptr, &len), IBP_OK);
	cr_assert_eq(len, 1500);
	cr_assert_eq(ibp_slab_pool_unpin(p, ptr), IBP_OK);
	cr_assert_eq(ibp_slab_pool_remove(p, victim), IBP_OK);
	m->held[victim] = 0;
	ibp_slab_pool_stats_t s0, s1;
	ibp_slab_pool_stats(p, &s0, 0);
	int64_t nh;
	void *nptr;
	cr_assert_eq(ibp_slab_pool_alloc(p, 1450, &nh, &nptr), IBP_OK); /* 1450 and 1500: one class of step 128 */
	cr_assert_eq(nptr, ptr, "the freed slot is reused");
	fill(nptr, 1450, 999);
	cr_assert_eq(ibp_slab_pool_unpin(p, nptr), IBP_OK);
	m->seed[nh] = 999;
	m->len[nh] = 1450;
	m->held[nh] = 1;
	ibp_slab_pool_stats(p, &s1, 0);
	cr_assert_eq(s1.evictions, s0.evictions, "nothing evicted for a block that fits a freed slot");
	cr_assert_eq(s1.pinned_memory, 0, "IBP_SLAB_POOL_HOST gives host memory");
	check_block(p, nh, 1450, 999);
	check_pool(p, m);
	ibp_slab_pool_free(p);
	free(m);
}

/* remove_many frees every block present under one lock, counts them, and
 * names the first handle that had none (a repeat is missing the second time). */
Test(slab_pool, remove_many)
{
	model_t *m = xcalloc(sizeof(model_t));
	ibp_slab_pool_t *p = make_pool(64 * 1024, 4096, IBP_CACHE_LRU, m, IBP_SLAB_POOL_HOST);
	int64_t h[10];
	for (int i = 0; i < 10; i++)
		h[i] = put(p, m, 1000, (uint64_t)i);
	const int64_t odd[4] = { h[1], h[7], h[3], h[5] };
	uint64_t removed = 99;
	cr_assert_eq(ibp_slab_pool_remove_many(p, odd, 4, &removed), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(removed, 4);
	for (int i = 1; i < 8; i += 2) {
		cr_assert_eq(ibp_slab_pool_size(p, h[i], NULL), IBP_ERR_OUT_OF_RANGE, "block %d", i);
		m->held[h[i]] = 0;
	}
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert(st.blocks == 6 && st.frees == 4, "%llu blocks, %llu frees", (unsigned long long)st.blocks,
		  (unsigned long long)st.frees);
	const int64_t mixed[4] = { h[0], 12345, h[0], h[2] };
	cr_assert_eq(ibp_slab_pool_remove_many(p, mixed, 4, &removed), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(removed, 2, "h[0] once and h[2], after the missing handle too");
	cr_assert(strstr(ibp_last_error(), "12345") && strstr(ibp_last_error(), "handles[1]"), "%s", ibp_last_error());
	m->held[h[0]] = m->held[h[2]] = 0;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert(st.blocks == 4 && st.frees == 6);
	removed = 7;
	cr_assert_eq(ibp_slab_pool_remove_many(p, NULL, 0, &removed), IBP_OK);
	cr_assert_eq(removed, 0);
	cr_assert_eq(ibp_slab_pool_remove_many(p, NULL, 1, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_remove_many(NULL, odd, 1, &removed), IBP_ERR_INVALID_ARG);
	check_pool(p, m);
	ibp_slab_pool_free(p);
	free(m);
}

/* Pinned blocks are never evicted; with everything pinned a put is refused
 * and evicts nothing; a block removed while pinned stays readable through
 * its pointer and its slot is freed at the unpin. */
Test(slab_pool, pinned_blocks_stay)
{
	model_t *m = xcalloc(sizeof(model_t));
	ibp_slab_pool_t *p = make_pool(8 * 1024, 1024, IBP_CACHE_LRU, m, 0);
	int64_t h[8];
	void *ptr[8];
	for (int i = 0; i < 8; i++) {
		h[i] = put(p, m, 1000, (uint64_t)i);
		cr_assert_eq(h[i], i);
	}
	for (int i = 0; i < 8; i++)
		cr_assert_eq(ibp_slab_pool_pin(p, h[i], &ptr[i], NULL), IBP_OK);
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.pinned_blocks, 8);
	cr_assert_eq(put(p, m, 1000, 100), -1, "everything is pinned");
	cr_assert_eq(put(p, m, 10, 101), -1, "another class cannot take a pinned slab either");
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.evictions, 0);
	cr_assert_eq(st.failed, 2);
	/* remove block 3 while pinned: gone from the index, bytes still there */
	cr_assert_eq(ibp_slab_pool_remove(p, h[3]), IBP_OK);
	m->held[3] = 0;
	cr_assert_eq(ibp_slab_pool_size(p, h[3], NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert(same(ptr[3], 1000, 3));
	cr_assert_eq(put(p, m, 1000, 102), -1, "its slot is not free before the unpin");
	cr_assert_eq(ibp_slab_pool_unpin(p, ptr[3]), IBP_OK);
	cr_assert_eq(ibp_slab_pool_unpin(p, ptr[3]), IBP_ERR_INVALID_ARG, "not pinned any more");
	int64_t x = put(p, m, 1000, 103);
	cr_assert(x >= 0, "%s", ibp_last_error());
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.evictions, 0, "the freed slot was used");
	/* unpin block 5 only: it is the one victim */
	cr_assert_eq(ibp_slab_pool_unpin(p, ptr[5]), IBP_OK);
	cr_assert(put(p, m, 1000, 104) >= 0);
	cr_assert_eq(m->nev, 1);
	cr_assert_eq(m->order[0], 5);
	for (int i = 0; i < 8; i++)
		if (i != 3 && i != 5) {
			cr_assert(same(ptr[i], 1000, (uint64_t)i));
			cr_assert_eq(ibp_slab_pool_unpin(p, ptr[i]), IBP_OK);
		}
	check_pool(p, m);
	ibp_slab_pool_free(p);
	free(m);
}

/* A class over its slab target whose slabs are all pinned must not stop a
 * pool from taking an unpinned slab of another class (it refused a block
 * while 3 of 7 slabs were pinned, in concurrent_writers_readers). */
Test(slab_pool, pinned_donor_does_not_block)
{
	model_t *m = xcalloc(sizeof(model_t));
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = 16 * 1024;
	o.max_block_bytes = 1024;
	o.slab_bytes = 4096; /* four slabs */
	o.policy = IBP_CACHE_LRU;
	o.on_evict = on_evict;
	o.user = m;
	ibp_slab_pool_t *p;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());
	int64_t a[8];
	for (int i = 0; i < 8; i++)
		cr_assert((a[i] = put(p, m, 1000, (uint64_t)i)) >= 0); /* class A: slabs 0 and 1 */
	void *pa, *pb;
	cr_assert_eq(ibp_slab_pool_pin(p, a[0], &pa, NULL), IBP_OK);
	cr_assert_eq(ibp_slab_pool_pin(p, a[4], &pb, NULL), IBP_OK);
	for (int i = 0; i < 100; i++) /* class B takes slabs 2, 3; A falls over its target */
		cr_assert(put(p, m, 300, 1000 + (uint64_t)i) >= 0, "%s", ibp_last_error());
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.free_slabs, 0);
	int64_t c = put(p, m, 100, 5000); /* class C has no slab; A's are pinned */
	cr_assert(c >= 0, "a block refused while two slabs are unpinned: %s", ibp_last_error());
	check_block(p, c, 100, 5000);
	check_block(p, a[0], 1000, 0);
	check_block(p, a[4], 1000, 4);
	cr_assert_eq(ibp_slab_pool_unpin(p, pa), IBP_OK);
	cr_assert_eq(ibp_slab_pool_unpin(p, pb), IBP_OK);
	check_pool(p, m);
	ibp_slab_pool_free(p);
	free(m);
}

Test(slab_pool, static_policy_refuses_when_full)
{
	ibp_slab_pool_t *p = make_pool(4 * 1024, 1024, IBP_CACHE_STATIC, NULL, 0);
	int ok = 0;
	for (int i = 0; i < 10; i++)
		ok += put(p, NULL, 1024, (uint64_t)i) >= 0;
	cr_assert_eq(ok, 4);
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.evictions, 0);
	cr_assert_eq(st.failed, 6);
	cr_assert_eq(ibp_slab_pool_remove(p, 2), IBP_OK);
	cr_assert(put(p, NULL, 1000, 50) >= 0, "a removed block's slot is reused");
	check_block(p, 0, 1024, 0);
	ibp_slab_pool_free(p);

	/* a slab emptied by removals goes to the class that needs it */
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = 8 * 1024;
	o.max_block_bytes = 1024;
	o.slab_bytes = 4096; /* two slabs of four blocks */
	o.policy = IBP_CACHE_STATIC;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());
	int64_t h[8];
	for (int i = 0; i < 8; i++)
		cr_assert((h[i] = put(p, NULL, 1024, (uint64_t)i)) >= 0);
	cr_assert_eq(put(p, NULL, 100, 9), -1, "full, and nothing is evicted");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(ibp_slab_pool_remove(p, h[i]), IBP_OK); /* the first slab (4 blocks of 1024) */
	int64_t small = put(p, NULL, 100, 10);
	cr_assert(small >= 0, "an emptied slab of another class is taken: %s", ibp_last_error());
	ibp_slab_pool_stats_t st2;
	ibp_slab_pool_stats(p, &st2, 0);
	cr_assert_eq(st2.evictions, 0);
	cr_assert_eq(st2.slab_moves, 1);
	check_block(p, small, 100, 10);
	for (int i = 4; i < 8; i++)
		check_block(p, h[i], 1024, (uint64_t)i);
	ibp_slab_pool_free(p);
}

/* FNV-1a over one more 64-bit value. */
static uint64_t mix(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		h = (h ^ ((v >> (8 * i)) & 255)) * 0x100000001B3ull;
	return h;
}

/* Which slab a pool takes or empties follows the classes' slab targets,
 * which come from the size histogram as it was before each allocation
 * (recomputed only when an allocation reads them: no free slot in its
 * class). Sizes drift through four mixes of classes, with reads, removals
 * and pinned blocks, under every policy; the handles refused, the
 * eviction order, every slab move and each class's slabs must be those of
 * targets recomputed before every allocation (the digests were recorded
 * with that code, which 1b37390 had). Stale targets change them. */
Test(slab_pool, targets_follow_the_histogram)
{
	static const uint64_t want[5] = { 0, 0xdcb6fe2a83bcc258ull, 0x68dcc73f0dfe6e16ull, 0xe7765a8972531e46ull,
					  0xd1ccb0e483abf176ull }; /* by policy; [0] unused */
	const uint64_t maxb = 6000;
	model_t *m = xcalloc(sizeof(model_t));
	for (int pol = IBP_CACHE_STATIC; pol <= IBP_CACHE_LRU; pol++) {
		memset(m, 0, sizeof(*m));
		ibp_slab_pool_opts_t o;
		ibp_slab_pool_opts_default(&o);
		o.capacity_bytes = 96 * 1024;
		o.max_block_bytes = maxb;
		o.slab_bytes = 6144; /* 16 slabs: each move matters */
		o.policy = (ibp_cache_policy_t)pol;
		o.on_evict = on_evict;
		o.user = m;
		ibp_slab_pool_t *p;
		cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());
		rng_t r = { 1000 + (uint64_t)pol };
		uint64_t h = 0xCBF29CE484222325ull, refused = 0;
		int64_t last = -1;
		void *pinned[4] = { NULL, NULL, NULL, NULL };
		for (int op = 0; op < 4000; op++) {
			const int phase = op / 1000;
			uint64_t what = rnd(&r) % 10;
			if (what < 6 || last < 0) {
				/* phase 0 small, 1 large, 2 small and medium, 3 all sizes */
				uint64_t len = phase == 0   ? rnd(&r) % 700
					       : phase == 1 ? 3000 + rnd(&r) % (maxb - 2999)
					       : phase == 2 ? (rnd(&r) % 2 ? rnd(&r) % 500 : 1500 + rnd(&r) % 1000)
							    : rnd(&r) % (maxb + 1);
				int64_t k = put(p, m, len, (uint64_t)op);
				h = mix(h, (uint64_t)k);
				refused += k < 0;
				if (k >= 0)
					last = k;
			} else if (what < 8) {
				int64_t k = (int64_t)(rnd(&r) % (uint64_t)(last + 1));
				if (m->held[k])
					check_block(p, k, m->len[k], m->seed[k]); /* a hit for the policy */
			} else if (what < 9) {
				/* a block still held (static: removals alone free slabs) */
				int64_t k = (int64_t)(rnd(&r) % (uint64_t)(last + 1)), j = 0;
				while (j <= last && !m->held[(k + j) % (last + 1)])
					j++;
				k = (k + j) % (last + 1);
				if (ibp_slab_pool_remove(p, k) == IBP_OK)
					m->held[k] = 0;
			} else {
				/* pin a block for a while: its slab cannot move */
				int i = (int)(rnd(&r) % 4);
				if (pinned[i]) {
					cr_assert_eq(ibp_slab_pool_unpin(p, pinned[i]), IBP_OK);
					pinned[i] = NULL;
				} else {
					int64_t k = (int64_t)(rnd(&r) % (uint64_t)(last + 1));
					uint64_t len;
					if (m->held[k] && ibp_slab_pool_pin(p, k, &pinned[i], &len) != IBP_OK)
						pinned[i] = NULL;
				}
			}
			if (op % 500 == 0)
				check_pool(p, m);
		}
		for (int i = 0; i < 4; i++)
			if (pinned[i])
				cr_assert_eq(ibp_slab_pool_unpin(p, pinned[i]), IBP_OK);
		check_pool(p, m);
		ibp_slab_pool_stats_t st;
		cr_assert_eq(ibp_slab_pool_stats(p, &st, 0), IBP_OK);
		for (uint64_t e = 0; e < m->nev && e < MAXH; e++)
			h = mix(h, (uint64_t)m->order[e]);
		h = mix(mix(mix(h, st.evictions), st.slab_moves), st.failed);
		for (uint32_t i = 0; i < st.nclasses; i++) {
			ibp_cache_class_stats_t cs;
			cr_assert_eq(ibp_slab_pool_class_stats(p, i, &cs), IBP_OK);
			h = mix(mix(mix(h, cs.slabs), cs.used), cs.evictions);
		}
		cr_assert(pol == IBP_CACHE_STATIC ? refused > 0 : st.evictions > 0 && st.slab_moves > 0);
		cr_assert_eq(h, want[pol], "%s: digest 0x%016llxull (%llu evictions, %llu slab moves, %llu refused)",
			     ibp_cache_policy_name(pol), (unsigned long long)h, (unsigned long long)st.evictions,
			     (unsigned long long)st.slab_moves, (unsigned long long)refused);
		ibp_slab_pool_free(p);
	}
	free(m);
}

typedef struct worker {
	ibp_slab_pool_t *p;
	uint64_t seed;
	int bad, bad_put, bad_read;
	char err[256]; /* the worker's first error (ibp_last_error is per thread) */
} worker_t;

/* Each worker keeps its own handles: what it reads back must be its bytes,
 * or the block is gone (evicted by anyone). */
static void *work(void *arg)
{
	worker_t *w = arg;
	rng_t r = { w->seed };
	int64_t hs[64];
	uint64_t sd[64], ln[64];
	int n = 0;
	uint8_t *buf = malloc(3000);
	for (int it = 0; it < 3000 && buf; it++) {
		uint64_t what = rnd(&r) % 4;
		if (what < 2 || n == 0) {
			uint64_t len = rnd(&r) % 3000, seed = w->seed * 100000 + (uint64_t)it;
			fill(buf, len, seed);
			int64_t h;
			if (ibp_slab_pool_put(w->p, buf, len, &h) != IBP_OK) {
				if (!w->bad_put++)
					snprintf(w->err, sizeof w->err, "%s", ibp_last_error());
				continue;
			}
			int k = n < 64 ? n++ : (int)(rnd(&r) % 64);
			hs[k] = h;
			sd[k] = seed;
			ln[k] = len;
		} else if (what == 2) {
			int k = (int)(rnd(&r) % (uint64_t)n);
			void *ptr;
			uint64_t len;
			ibp_status_t s = ibp_slab_pool_pin(w->p, hs[k], &ptr, &len);
			if (s == IBP_OK) {
				if (len != ln[k] || !same(ptr, len, sd[k]))
					w->bad_read++;
				if (ibp_slab_pool_unpin(w->p, ptr) != IBP_OK)
					w->bad++;
			} else if (s != IBP_ERR_OUT_OF_RANGE) {
				w->bad++;
			}
		} else {
			int k = (int)(rnd(&r) % (uint64_t)n);
			ibp_status_t s = ibp_slab_pool_remove(w->p, hs[k]);
			if (s != IBP_OK && s != IBP_ERR_OUT_OF_RANGE)
				w->bad++;
		}
	}
	if (!buf)
		w->bad++;
	free(buf);
	return NULL;
}

static void count_evict(void *user, int64_t h, const void *data, uint64_t len)
{
	(void)h;
	(void)data;
	(void)len;
	(*(uint64_t *)user)++; /* under the pool's lock */
}

Test(slab_pool, concurrent_writers_readers)
{
	uint64_t nev = 0;
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_opts_default(&o);
	o.capacity_bytes = 96 * 1024;
	o.max_block_bytes = 3000;
	o.on_evict = count_evict;
	o.user = &nev;
	ibp_slab_pool_t *p;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());
	pthread_t th[4];
	worker_t w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (worker_t){ p, (uint64_t)i + 1, 0, 0, 0, "" };
		cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert(!w[i].bad && !w[i].bad_put && !w[i].bad_read, "worker %d: %d puts refused, %d bad reads, %d "
			  "other failures: %s", i, w[i].bad_put, w[i].bad_read, w[i].bad, w[i].err);
	}
	ibp_slab_pool_stats_t st;
	ibp_slab_pool_stats(p, &st, 0);
	cr_assert_eq(st.evictions, nev);
	cr_assert_eq(st.pinned_blocks, 0);
	check_pool(p, NULL);
	ibp_slab_pool_free(p);
}

Test(slab_pool, errors)
{
	ibp_slab_pool_opts_t o;
	ibp_slab_pool_t *p = (ibp_slab_pool_t *)&o;
	cr_assert_eq(ibp_slab_pool_create(NULL, &p), IBP_ERR_INVALID_ARG);
	ibp_slab_pool_opts_default(&o);
	cr_assert_eq(o.policy, IBP_CACHE_POLICY_DEFAULT);
	o.max_block_bytes = 500;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG, "capacity 0");
	cr_assert_null(p);
	o.capacity_bytes = 100;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG, "below one slot of the largest block");
	o.capacity_bytes = 1 << 16;
	o.max_block_bytes = 0;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG);
	o.max_block_bytes = IBP_CACHE_MAX_ROW_BYTES + 1;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG);
	o.max_block_bytes = 500;
	o.class_step = 24;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG);
	o.class_step = 0;
	o.policy = (ibp_cache_policy_t)7;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG);
	o.policy = IBP_CACHE_CLOCK;
	o.flags = 4;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_ERR_INVALID_ARG);
	o.flags = 0;
	cr_assert_eq(ibp_slab_pool_create(&o, &p), IBP_OK, "%s", ibp_last_error());

	int64_t h = 5;
	void *ptr = &h;
	uint8_t buf[600];
	cr_assert_eq(ibp_slab_pool_alloc(p, 501, &h, &ptr), IBP_ERR_INVALID_ARG, "above max_block_bytes");
	cr_assert_eq(h, -1);
	cr_assert_null(ptr);
	cr_assert_eq(ibp_slab_pool_alloc(NULL, 10, &h, &ptr), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_alloc(p, 10, NULL, &ptr), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_alloc(p, 10, &h, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_put(p, NULL, 10, &h), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_put(p, NULL, 0, &h), IBP_OK, "an empty block");
	cr_assert_eq(h, 0);
	uint64_t len = 9;
	cr_assert_eq(ibp_slab_pool_get(p, 0, NULL, 0, &len), IBP_OK);
	cr_assert_eq(len, 0);
	fill(buf, 500, 1);
	cr_assert_eq(ibp_slab_pool_put(p, buf, 500, &h), IBP_OK);
	cr_assert_eq(h, 1);
	cr_assert_eq(ibp_slab_pool_get(p, 1, buf, 499, &len), IBP_ERR_BUFFER_TOO_SMALL);
	cr_assert_eq(len, 500);
	cr_assert_eq(ibp_slab_pool_get(p, 1, NULL, 10, &len), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_get(p, 2, buf, 600, &len), IBP_ERR_OUT_OF_RANGE, "never allocated");
	cr_assert_eq(ibp_slab_pool_get(p, -1, buf, 600, &len), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_slab_pool_pin(p, 2, &ptr, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert_null(ptr);
	cr_assert_eq(ibp_slab_pool_pin(p, 1, NULL, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_unpin(p, buf), IBP_ERR_INVALID_ARG, "not the pool's memory");
	cr_assert_eq(ibp_slab_pool_pin(p, 1, &ptr, &len), IBP_OK);
	cr_assert_eq(ibp_slab_pool_unpin(p, (uint8_t *)ptr + 1), IBP_ERR_INVALID_ARG, "inside a block, not its start");
	cr_assert_eq(ibp_slab_pool_unpin(p, ptr), IBP_OK);
	cr_assert_eq(ibp_slab_pool_unpin(NULL, ptr), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_remove(p, 1), IBP_OK);
	cr_assert_eq(ibp_slab_pool_remove(p, 1), IBP_ERR_OUT_OF_RANGE, "removed twice");
	cr_assert_eq(ibp_slab_pool_remove(NULL, 0), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_size(NULL, 0, &len), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_slab_pool_stats(p, NULL, 0), IBP_ERR_INVALID_ARG);
	ibp_slab_pool_stats_t st;
	cr_assert_eq(ibp_slab_pool_stats(p, &st, 1), IBP_OK);
	cr_assert_eq(st.allocs, 2);
	cr_assert_eq(st.frees, 1);
	cr_assert_eq(st.blocks, 1);
	cr_assert_eq(st.next_handle, 2);
	cr_assert_eq(st.max_block_bytes, 500);
	cr_assert_eq(ibp_slab_pool_stats(p, &st, 0), IBP_OK);
	cr_assert_eq(st.allocs, 0, "reset");
	cr_assert_eq(st.blocks, 1, "state survives a reset");
	ibp_cache_class_stats_t cs;
	cr_assert_eq(ibp_slab_pool_class_stats(p, st.nclasses, &cs), IBP_ERR_OUT_OF_RANGE);
	cr_assert_eq(ibp_slab_pool_class_stats(NULL, 0, &cs), IBP_ERR_INVALID_ARG);
	ibp_slab_pool_free(p);
	ibp_slab_pool_free(NULL);
}
