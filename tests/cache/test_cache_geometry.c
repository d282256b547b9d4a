/* test_cache_geometry.c - the slab cache's automatic geometry (cache/slab.c):
 * the class ladder gives tiny compressed rows small slots, the host index
 * grows with what is resident (not with the most slots the slabs could
 * have), and a budget of a few slabs still serves rows of several classes
 * (ibpi_cache_targets, borrowing in ibpi_cache_alloc_slot). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cache/cache_internal.h"
#include "fixtures.h"
#include "ibp/cache.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* kind 0: sparse (a few nonzero bytes); kind 1: dense, 20-35% of the
 * bytes random by id % 4. */
static void make_row(int kind, uint64_t id, uint64_t R, uint8_t *row)
{
	memset(row, 0, R);
	if (kind == 0) {
		for (uint64_t j = 0; j < 2 + id % 3; j++) {
			uint64_t h = mix(id * 31 + j);
			row[h % R] = (uint8_t)(h >> 40) | 1;
		}
		return;
	}
	uint64_t pct = 20 + 5 * (id % 4);
	for (uint64_t j = 0; j < R; j++)
		if (mix(id * 1000003 + j) % 100 < pct)
			row[j] = (uint8_t)(mix(id * 7 + j) >> 32) | 1;
}

static ibp_store_t *open_store(int kind, uint64_t n, uint64_t R, const char *tag)
{
	uint8_t *rows = xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		make_row(kind, i, R, rows + i * R);
	char path[160];
	snprintf(path, sizeof(path), "%s/%s.ibp", tmpdir, tag);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	o.threshold = 0.8;
	o.chunk_bytes = 1;
	cr_assert_eq(ibp_pack(path, rows, IBP_DTYPE_U8, 2, shape, &o, IBP_LAYOUT_PACKED), IBP_OK, "%s",
		     ibp_last_error());
	free(rows);
	ibp_store_t *s;
	cr_assert_eq(ibp_store_open(path, IBP_OPEN_READ, &s), IBP_OK, "%s", ibp_last_error());
	return s;
}

static ibp_cache_t *make_cache(uint64_t cap, uint64_t R)
{
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = cap;
	o.row_bytes = R;
	ibp_cache_t *c;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_OK, "%s", ibp_last_error());
	return c;
}

static void gather_all(ibp_cache_t *c, ibp_store_t *s, const int64_t *ids, uint64_t n, uint64_t R, int kind)
{
	uint8_t *out = xcalloc(n * R), *want = xcalloc(R);
	cr_assert_eq(ibp_cache_gather(c, s, ids, n, out, NULL, NULL, 0, NULL), IBP_OK, "%s", ibp_last_error());
	for (uint64_t k = 0; k < n; k++) {
		make_row(kind, (uint64_t)ids[k], R, want);
		cr_assert(memcmp(out + k * R, want, R) == 0, "id %lld differs", (long long)ids[k]);
	}
	free(out);
	free(want);
}

/* Sparse rows of a 5732-byte table compress to a few dozen bytes: they go
 * to the 32- and 48-byte classes (not a 128-byte floor), so a budget of 1%
 * of the table holds every row; slot bytes never pass the capacity, and
 * the index holds at most 4 positions per row it ever held (plus its
 * first size), 16 bytes each. */
Test(cache_geometry, tiny_rows_get_small_slots, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t R = 5732, N = 2000;
	ibp_store_t *s = open_store(0, N, R, "sparse");
	uint64_t cap = N * R / 100; /* 1%: 20 decoded rows */
	ibp_cache_t *c = make_cache(cap, R);
	int64_t *ids = xcalloc(N * sizeof(int64_t));
	for (uint64_t i = 0; i < N; i++)
		ids[i] = (int64_t)i;
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t i = 0; i < N; i += 500)
			gather_all(c, s, ids + i, 500, R, 0);
	ibp_cache_stats_t st;
	cr_assert_eq(ibp_cache_stats(c, &st, 0), IBP_OK);
	cr_assert(st.slot_bytes_used <= st.capacity_bytes);
	cr_assert_eq(st.rows_resident, N, "all %llu rows fit in 1%%: %llu resident", (unsigned long long)N,
		     (unsigned long long)st.rows_resident);
	uint64_t used = 0;
	for (uint32_t i = 0; i < st.nclasses; i++) {
		ibp_cache_class_stats_t cs;
		cr_assert_eq(ibp_cache_class_stats(c, i, &cs), IBP_OK);
		if (cs.used) {
			cr_assert_leq(cs.slot_bytes, 48, "class %u of %llu-byte slots holds tiny rows", i,
				      (unsigned long long)cs.slot_bytes);
			cr_assert_leq(cs.bytes_resident, cs.used * cs.slot_bytes);
		}
		used += cs.used;
	}
	cr_assert_eq(used, N);
	cr_assert_eq(ibp_cache_class_stats(c, 0, &(ibp_cache_class_stats_t){ 0 }), IBP_OK);
	ibp_cache_class_stats_t c0;
	ibp_cache_class_stats(c, 0, &c0);
	cr_assert_eq(c0.slot_bytes, 32, "the ladder starts at 32 bytes");
	/* the index: grown for 2000 rows (<= 4 positions each), not sized for
	 * the capacity / 32 slots the slabs could hold (~3600 -> 8192) */
	cr_assert_leq(c->ix.cap, 8192);
	cr_assert_leq(c->ix.cap, 4 * N);
	cr_assert(c->ix.used * 8 <= c->ix.cap * 7);
	cr_assert_eq(st.meta_bytes, ibpi_cache_meta_bytes(c));
	uint64_t ws = c->nws * (c->o.max_batch * 64 + c->ws[0].dcap * 12); /* per-call workspaces */
	cr_assert_leq(st.meta_bytes - ws, 4 * cap, "metadata %llu bytes for a %llu-byte budget",
		      (unsigned long long)(st.meta_bytes - ws), (unsigned long long)cap);
	/* still right when read back */
	gather_all(c, s, ids, 500, R, 0);
	ibp_cache_stats_t st2;
	ibp_cache_stats(c, &st2, 0);
	cr_assert_eq(st2.hits - st.hits, 500);
	free(ids);
	ibp_cache_free(c);
	ibp_store_close(s);
}

/* A budget smaller than one default slab (1 slab) with dense rows of four
 * compressed sizes (480-672-byte classes): the slab goes to the class whose
 * slots the most rows can use, and the hot rows of every size stay
 * resident together (the smaller ones borrow its slots) instead of the
 * classes taking the one slab from each other (the old behaviour: 4 of 8). */
Test(cache_geometry, tiny_budget_dense_rows_share_slabs, .init = make_tmpdir, .fini = remove_tmpdir)
{
	const uint64_t R = 1024, N = 64;
	ibp_store_t *s = open_store(1, N, R, "dense");
	ibp_cache_t *c = make_cache(12 * R, R);
	int64_t hot[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, cold[4];
	/* one id a call, so no hit of the same call pins the slab that a
	 * class's share moves */
	for (int pass = 0; pass < 6; pass++) {
		for (int k = 0; k < 8; k++)
			gather_all(c, s, hot + k, 1, R, 1);
		for (int k = 0; k < 4; k++) {
			cold[k] = 8 + (pass * 4 + k) % (int64_t)(N - 8);
			gather_all(c, s, cold + k, 1, R, 1);
		}
	}
	ibp_cache_stats_t a, b;
	ibp_cache_stats(c, &a, 0);
	cr_assert_eq(a.nslabs, 1);
	gather_all(c, s, hot, 8, R, 1);
	ibp_cache_stats(c, &b, 0);
	cr_assert_eq(b.hits - a.hits, 8, "every hot row resident: %llu hits", (unsigned long long)(b.hits - a.hits));
	cr_assert(b.slot_bytes_used <= b.capacity_bytes);
	/* the resident rows are of at least three natural classes */
	uint8_t seen[IBP_CACHE_MAX_CLASSES] = { 0 };
	uint32_t nseen = 0;
	for (uint64_t g = 0; g < c->nslots; g++)
		if (c->sid[g] >= 0 && c->sid[g] < 8) {
			uint32_t k = ibpi_cache_class_of(c, c->slen[g]);
			cr_assert_leq(c->slen[g], c->cls[c->scls[g / c->spp]].slot_bytes);
			nseen += !seen[k];
			seen[k] = 1;
		}
	cr_assert_geq(nseen, 3, "hot rows of %u classes resident", nseen);
	ibp_cache_free(c);
	ibp_store_close(s);
}
