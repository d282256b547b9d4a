/* test_cache_cuda.c - the GPU slab cache (ibp_cache_gather_cuda) on a
 * machine without a GPU: a host-fallback device cache (its device table in
 * host memory, the CPU twins of the device steps) in front of a
 * host-fallback device store, over the committed sample rows
 * (datasets/sample) and an odd row size. Against ibp_store_gather and a host
 * cache fed the same batches: the same bytes, statuses and counters, and
 * the device table's READY entries equal to the mirror's index (and the
 * host cache's, slot bytes included) after every batch; invalidation,
 * corrupt rows and bytes, bad ids and the errors of the API. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cache/cache_cuda.h"
#include "fixtures.h"
#include "ibp/cache.h"
#include "ibp/container.h"
#include "ibp/cuda.h"
#include "ibp/npy.h"
#include "ibp/store.h"
#include "testutil.h"

#define OK(x) cr_assert_eq((x), IBP_OK, "%s", ibp_last_error())

typedef struct fx {
	ibp_store_t *s;
	ibp_cuda_store_t *cs;
	uint64_t n, R;
} fx_t;

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* A store of rows (n x R bytes) and its host-fallback device store. */
static fx_t open_fx(const void *rows, uint64_t n, uint64_t R, const char *tag)
{
	fx_t f = { NULL, NULL, n, R };
	char path[256];
	snprintf(path, sizeof(path), "%s/%s.ibp", tmpdir, tag);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.nthreads = 1;
	o.threshold = 0.8;
	OK(ibp_pack(path, rows, IBP_DTYPE_U8, 2, shape, &o, IBP_LAYOUT_PACKED));
	OK(ibp_store_open(path, IBP_OPEN_READ, &f.s));
	ibp_status_t s = ibp_cuda_store_from_store(f.s, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_HOST_FALLBACK, NULL, &f.cs);
	cr_assert(s == IBP_ERR_NO_DEVICE && f.cs && !ibp_cuda_store_on_device(f.cs), "status %d: %s", (int)s,
		  ibp_last_error());
	return f;
}

static void close_fx(fx_t *f)
{
	ibp_cuda_store_free(f->cs);
	ibp_store_close(f->s);
}

#define NEED_NO_GPU()                                                                                   \
	do {                                                                                            \
		if (tu_have_gpu())                                                                         \
			cr_skip_test("a GPU is present: these tests drive the host-fallback device cache"); \
	} while (0)

static ibp_cache_opts_t opts(uint64_t cap, uint64_t R, ibp_cache_policy_t pol, int device)
{
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = cap;
	o.row_bytes = R;
	o.policy = pol;
	o.max_batch = 128; /* calls of more ids loop over passes */
	o.slab_bytes = 4 * ((R + 15) / 16 * 16); /* many slabs: classes side by side, the raw one too */
	o.device = device;
	if (device >= 0)
		o.flags |= IBP_CACHE_HOST_FALLBACK;
	return o;
}

static ibp_cache_t *make_dev(const ibp_cache_opts_t *o)
{
	ibp_cache_t *c = NULL;
	ibp_status_t s = ibp_cache_create(o, &c);
	cr_assert(s == IBP_ERR_NO_DEVICE && c && c->dev && !c->dev->on_device, "status %d: %s", (int)s,
		  ibp_last_error());
	cr_assert(strstr(ibp_last_error(), "IBP_CACHE_HOST_FALLBACK"), "%s", ibp_last_error());
	return c;
}

/* The device table holds exactly the mirror's READY rows, each with the
 * host cache's entry, slot bytes and codec byte; no pin is left. */
static uint64_t decoded_rows; /* READY rows kept decoded seen by check_table */

static void check_table(ibp_cache_t *d, ibp_cache_t *h)
{
	const cache_dev_t *x = d->dev;
	const ibp_slab_table_t *t = &x->t;
	uint64_t ready = 0, keys = 0;
	for (uint64_t p = 0; p < d->ix.cap; p++) {
		int64_t id = d->ix.keys[p];
		uint64_t e = d->ix.vals[p];
		if (id < 0 || ENT_STATE(e) != ENT_READY)
			continue;
		ready++;
		uint64_t m = t->cap - 1, q = ibp_slab_hash(id) & m, i = 0;
		while (t->keys[q] != id && i++ < t->cap)
			q = (q + 1) & m;
		cr_assert_eq(t->keys[q], id, "id %lld READY in the mirror, not in the device table", (long long)id);
		cr_assert_eq(t->vals[q], e, "id %lld: device entry %llx, mirror %llx", (long long)id,
			     (unsigned long long)t->vals[q], (unsigned long long)e);
		uint64_t ph = ibpi_cache_ix_find(&h->ix, id);
		cr_assert(ph != UINT64_MAX && h->ix.vals[ph] == e, "id %lld: the host cache decided otherwise",
			  (long long)id);
		uint64_t g = ENT_SLAB(e) * d->spp + ENT_SLOT(e);
		cr_assert(!memcmp(ibp_slab_addr(t, e), ibpi_cache_slot_ptr(h, g), ENT_LEN(e)), "id %lld: slot bytes",
			  (long long)id);
		uint16_t meta = h->sfl[g] == 0xFF ? 0 : (uint16_t)(h->sfl[g] | h->sclu[g] << 8);
		decoded_rows += h->sfl[g] == 0xFF;
		cr_assert_eq(t->meta[g], meta, "id %lld: codec byte %x vs %x", (long long)id, t->meta[g], meta);
	}
	for (uint64_t q = 0; q < t->cap; q++)
		keys += t->keys[q] >= 0;
	cr_assert_eq(keys, ready, "device table %llu keys, mirror %llu READY", (unsigned long long)keys,
		     (unsigned long long)ready);
	for (uint64_t g = 0; g < d->nslots; g++)
		cr_assert_eq(t->pin[g], 0, "slot %llu still pinned", (unsigned long long)g);
}

static void same_stats(ibp_cache_t *d, ibp_cache_t *h, int batch)
{
	ibp_cache_stats_t a, b;
	OK(ibp_cache_stats(d, &a, 0));
	OK(ibp_cache_stats(h, &b, 0));
	a.meta_bytes = b.meta_bytes = 0; /* the device side's buffers */
	cr_assert(!memcmp(&a, &b, sizeof(a)),
		  "batch %d: device cache hits %llu misses %llu ins %llu ev %llu rej %llu inv %llu, host %llu %llu %llu "
		  "%llu %llu %llu", batch, (unsigned long long)a.hits, (unsigned long long)a.misses,
		  (unsigned long long)a.insertions, (unsigned long long)a.evictions, (unsigned long long)a.rejected,
		  (unsigned long long)a.invalidations, (unsigned long long)b.hits, (unsigned long long)b.misses,
		  (unsigned long long)b.insertions, (unsigned long long)b.evictions, (unsigned long long)b.rejected,
		  (unsigned long long)b.invalidations);
	for (uint32_t k = 0; k < a.nclasses; k++) {
		ibp_cache_class_stats_t x, y;
		OK(ibp_cache_class_stats(d, k, &x));
		OK(ibp_cache_class_stats(h, k, &y));
		cr_assert(!memcmp(&x, &y, sizeof(x)), "batch %d: class %u stats differ", batch, k);
	}
}

/* Skewed batches with repeats, bad ids and (some) scattered or negative
 * output rows, NO_ADMIT now and then, invalidations between: the device
 * cache against ibp_store_gather and a host cache. */
static uint64_t drive(fx_t *f, ibp_cache_policy_t pol, uint64_t cap, int nbatch, uint64_t seed)
{
	const uint64_t R = f->R, n = f->n, B = 300;
	ibp_cache_opts_t oh = opts(cap, R, pol, -1), od = opts(cap, R, pol, 0);
	ibp_cache_t *h = NULL;
	OK(ibp_cache_create(&oh, &h));
	ibp_cache_t *d = make_dev(&od);
	int64_t *ids = xcalloc(B * 8), *rows = xcalloc(B * 8);
	int32_t *sh = xcalloc(B * 4), *sd = xcalloc(B * 4);
	uint8_t *oh_ = xcalloc(B * R), *od_ = xcalloc(B * R), *ref = xcalloc(R);
	uint64_t hits = 0;
	for (int b = 0; b < nbatch; b++) {
		uint64_t m = 1 + mix(seed + b) % B;
		for (uint64_t k = 0; k < m; k++) {
			double u = (double)(mix(seed * 7919 + b * 1000003ull + k) >> 11) / 9007199254740992.0;
			ids[k] = (int64_t)((double)n * u * u * u); /* skewed to small ids */
			rows[k] = (int64_t)k;
		}
		if (b % 3 == 1) {
			ids[mix(b) % m] = (int64_t)n + (int64_t)(b % 5);
			ids[mix(b + 1) % m] = -1 - b;
		}
		int scatter = b % 2;
		if (scatter) {
			for (uint64_t k = m - 1; k > 0; k--) {
				uint64_t j = mix(seed + b * 31 + k) % (k + 1);
				int64_t t = rows[k];
				rows[k] = rows[j];
				rows[j] = t;
			}
			if (b % 4 == 1)
				rows[mix(b + 9) % m] = -1;
		}
		uint32_t fl = b % 7 == 5 ? IBP_CACHE_NO_ADMIT : 0;
		memset(oh_, 0xA5, B * R);
		memset(od_, 0xA5, B * R);
		memset(sh, 0x7F, B * 4);
		memset(sd, 0x7F, B * 4);
		ibp_status_t rh = ibp_cache_gather(h, f->s, ids, m, oh_, scatter ? rows : NULL, sh, fl, NULL);
		ibp_status_t rd = ibp_cache_gather_cuda(d, f->cs, ids, m, od_, scatter ? rows : NULL, sd, fl, NULL);
		cr_assert_eq(rd, rh, "batch %d: returned %d, host cache %d", b, (int)rd, (int)rh);
		cr_assert(!memcmp(sd, sh, m * 4), "batch %d: statuses differ", b);
		cr_assert(!memcmp(od_, oh_, B * R), "batch %d: output differs from the host cache's", b);
		for (uint64_t k = 0; k < m; k++) {
			if (scatter && rows[k] < 0) {
				cr_assert_eq(sd[k], IBP_ERR_INVALID_ARG);
				continue;
			}
			const uint8_t *got = od_ + (uint64_t)(scatter ? rows[k] : (int64_t)k) * R;
			if (ids[k] < 0 || (uint64_t)ids[k] >= n) {
				cr_assert_eq(sd[k], IBP_ERR_OUT_OF_RANGE, "batch %d request %llu", b, (unsigned long long)k);
				memset(ref, 0, R);
			} else {
				cr_assert_eq(sd[k], IBP_OK, "batch %d request %llu", b, (unsigned long long)k);
				OK(ibp_store_gather(f->s, &ids[k], 1, ref, 1));
			}
			cr_assert(!memcmp(got, ref, R), "batch %d request %llu (id %lld): not ibp_store_gather's row", b,
				  (unsigned long long)k, (long long)ids[k]);
		}
		same_stats(d, h, b);
		check_table(d, h);
		if (b % 5 == 4) { /* invalidate a few ids, one twice, one absent */
			int64_t inv[4] = { ids[0], ids[m / 2], ids[0], (int64_t)n - 1 };
			for (int q = 0; q < 4; q++)
				if (inv[q] < 0 || inv[q] >= (int64_t)n)
					inv[q] = 0;
			OK(ibp_cache_invalidate(h, inv, 4, NULL));
			OK(ibp_cache_invalidate(d, inv, 4, NULL));
			same_stats(d, h, b);
			check_table(d, h);
		}
	}
	ibp_cache_stats_t st;
	OK(ibp_cache_stats(d, &st, 0));
	hits = st.hits;
	cr_assert(st.hits > 0 && st.misses > 0 && st.insertions > 0, "hits %llu misses %llu insertions %llu",
		  (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.insertions);
	(void)hits;
	/* everything out, then the device table is empty too, and refills */
	OK(ibp_cache_invalidate(h, NULL, 0, NULL));
	OK(ibp_cache_invalidate(d, NULL, 0, NULL));
	check_table(d, h);
	OK(ibp_cache_gather(h, f->s, ids, 10, oh_, NULL, NULL, 0, NULL));
	OK(ibp_cache_gather_cuda(d, f->cs, ids, 10, od_, NULL, NULL, 0, NULL));
	same_stats(d, h, -1);
	check_table(d, h);
	ibp_cache_free(h);
	ibp_cache_free(d);
	free(ids);
	free(rows);
	free(sh);
	free(sd);
	free(oh_);
	free(od_);
	free(ref);
	return st.evictions;
}

/* Compressed bytes of the whole store, for capacities as a share of it. */
static uint64_t stored_bytes(const fx_t *f)
{
	uint64_t b = 0;
	ibp_container_payload(ibp_store_container(f->s), &b);
	return b;
}

Test(cache_cuda, sample_rows_equal_host_cache, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 600)
{
	NEED_NO_GPU();
	static const char *files[2] = { "minilm_kv_bf16.npy", "debian_bow_f32.npy" };
	int done = 0;
	for (int i = 0; i < 2; i++) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/datasets/sample/%s", IBP_SOURCE_DIR, files[i]);
		ibp_npy_info_t info;
		void *data = NULL;
		if (ibp_npy_load(path, IBP_NPY_BF16, &info, &data) != IBP_OK)
			continue;
		uint64_t n = info.shape[0], R = info.data_bytes / n;
		fx_t f = open_fx(data, n, R, files[i]);
		ibp_npy_free(data);
		uint64_t cap = stored_bytes(&f) / 10 + 4 * R;
		uint64_t ev = drive(&f, IBP_CACHE_S3FIFO, cap, 24, 11 + i);
		ev += drive(&f, i ? IBP_CACHE_CLOCK : IBP_CACHE_LRU, cap / 2, 16, 23 + i);
		cr_assert(i == 1 || ev > 0, "%s: the capacity never ran out", files[i]);
		close_fx(&f);
		done++;
	}
	cr_assert_eq(done, 2, "the sample files under %s/datasets/sample did not load", IBP_SOURCE_DIR);
}

/* Rows of an odd size that compress to many lengths (some not at all). */
static fx_t odd_fx(uint64_t n, uint64_t R)
{
	uint8_t *rows = xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *r = rows + i * R;
		uint64_t kind = mix(i) % 6;
		for (uint64_t j = 0; kind == 5 && j < R; j++)
			r[j] = (uint8_t)mix(i * 1000003 + j);
		for (uint64_t j = 0; kind < 5 && j < 1 + mix(i + 7) % (R / 8 + 2); j++) {
			uint64_t x = mix(i * 31 + j);
			r[x % R] = (uint8_t)(x >> 40) | 1;
		}
	}
	fx_t f = open_fx(rows, n, R, "odd");
	free(rows);
	return f;
}

Test(cache_cuda, odd_rows_every_policy, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 600)
{
	NEED_NO_GPU();
	fx_t f = odd_fx(700, 203);
	uint64_t cap = stored_bytes(&f) / 8;
	uint64_t ev = drive(&f, IBP_CACHE_S3FIFO, cap, 20, 5);
	ev += drive(&f, IBP_CACHE_CLOCK, cap, 12, 6);
	ev += drive(&f, IBP_CACHE_LRU, cap, 12, 7);
	cr_assert(ev > 0, "the capacity never ran out");
	cr_assert(decoded_rows > 0, "no row was kept decoded (the raw class)");
	close_fx(&f);
}

/* Corrupt rows of the store (a bad mode, a bad cluster) are CORRUPT,
 * zero-filled and never admitted; bad bytes in a slot make a hit CORRUPT
 * once, drop the row, and the next gather serves it from the store. */
Test(cache_cuda, corrupt_rows_and_slots, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	fx_t f = odd_fx(300, 203);
	const ibp_container_t *ct = ibp_store_container(f.s);
	uint64_t n = f.n, R = f.R, pb = 0;
	uint64_t *off = xcalloc((n + 1) * 8);
	uint8_t *fl = xcalloc(n), *cl = xcalloc(n);
	OK(ibp_container_index_expand(ct, off, fl, cl));
	fl[3] = 0x80;  /* unknown mode bits */
	cl[4] = 7;     /* cluster past the codec's */
	ibp_cuda_store_desc_t desc;
	memset(&desc, 0, sizeof(desc));
	desc.codec = ibp_store_codec(f.s);
	desc.payload = ibp_container_payload(ct, &pb);
	desc.payload_bytes = pb;
	desc.offsets = off;
	desc.flags = fl;
	desc.clusters = cl;
	desc.nrows = n;
	desc.payload_kind = IBP_CUDA_PAYLOAD_COPY_PINNED;
	ibp_cuda_store_t *bad = NULL;
	cr_assert_eq(ibp_cuda_store_create(&desc, IBP_CUDA_HOST_FALLBACK, NULL, &bad), IBP_ERR_NO_DEVICE);
	ibp_cache_opts_t o = opts(R * 1000, R, IBP_CACHE_CLOCK, 0);
	ibp_cache_t *d = make_dev(&o);
	int64_t ids[6] = { 3, 1, 4, 2, 3, 5 };
	int32_t st[6];
	uint8_t *out = xcalloc(6 * R), *ref = xcalloc(R);
	for (int round = 0; round < 2; round++) {
		memset(out, 0xEE, 6 * R);
		ibp_status_t s = ibp_cache_gather_cuda(d, bad, ids, 6, out, NULL, st, 0, NULL);
		cr_assert_eq(s, IBP_ERR_CORRUPT, "round %d: %d", round, (int)s);
		cr_assert(strstr(ibp_last_error(), "request 0 (id 3)"), "%s", ibp_last_error());
		for (int k = 0; k < 6; k++) {
			int broken = ids[k] == 3 || ids[k] == 4;
			cr_assert_eq(st[k], broken ? IBP_ERR_CORRUPT : IBP_OK, "round %d request %d", round, k);
			if (broken)
				memset(ref, 0, R);
			else
				OK(ibp_store_gather(f.s, &ids[k], 1, ref, 1));
			cr_assert(!memcmp(out + k * R, ref, R), "round %d request %d", round, k);
		}
	}
	ibp_cache_stats_t a;
	OK(ibp_cache_stats(d, &a, 0));
	cr_assert_eq(a.insertions, 3, "only the good rows are admitted (%llu; rejected %llu, resident %llu, misses %llu)",
		     (unsigned long long)a.insertions, (unsigned long long)a.rejected,
		     (unsigned long long)a.rows_resident, (unsigned long long)a.misses);
	cr_assert_eq(a.hits, 3, "the second round hits the good rows only (%llu)", (unsigned long long)a.hits);
	/* smash the slot of id 2 in the device table: its next hit is CORRUPT */
	const ibp_slab_table_t *t = &d->dev->t;
	uint64_t p = ibpi_cache_ix_find(&d->ix, 2);
	cr_assert(p != UINT64_MAX);
	uint64_t e = d->ix.vals[p];
	uint8_t *slot = ibp_slab_addr(t, e);
	memset(slot, 0xFF, ENT_LEN(e));
	t->meta[ENT_SLAB(e) * d->spp + ENT_SLOT(e)] = 0x03; /* a mode whose header 0xFF.. cannot hold */
	int64_t two = 2;
	int32_t s2 = 0;
	memset(out, 0xEE, R);
	cr_assert_eq(ibp_cache_gather_cuda(d, bad, &two, 1, out, NULL, &s2, 0, NULL), IBP_ERR_CORRUPT);
	cr_assert_eq(s2, IBP_ERR_CORRUPT);
	memset(ref, 0, R);
	cr_assert(!memcmp(out, ref, R), "a corrupt hit is zero-filled");
	OK(ibp_cache_stats(d, &a, 0));
	cr_assert_eq(a.invalidations, 1);
	cr_assert_eq(ibpi_cache_ix_find(&d->ix, 2), UINT64_MAX, "the bad row left the mirror");
	OK(ibp_cache_gather_cuda(d, bad, &two, 1, out, NULL, &s2, 0, NULL));
	OK(ibp_store_gather(f.s, &two, 1, ref, 1));
	cr_assert(s2 == IBP_OK && !memcmp(out, ref, R), "served from the store again");
	ibp_cache_free(d);
	ibp_cuda_store_free(bad);
	free(off);
	free(fl);
	free(cl);
	free(out);
	free(ref);
	close_fx(&f);
}

Test(cache_cuda, api_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	NEED_NO_GPU();
	fx_t f = odd_fx(100, 203);
	ibp_cache_opts_t o = opts(203 * 50, 203, IBP_CACHE_S3FIFO, 0);
	o.flags = 0; /* no fallback: no cache */
	ibp_cache_t *c = (ibp_cache_t *)1;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_NO_DEVICE);
	cr_assert_null(c);
	cr_assert(strstr(ibp_last_error(), "IBP_CACHE_HOST_FALLBACK"), "%s", ibp_last_error());
	o.flags = 8u;
	cr_assert_eq(ibp_cache_create(&o, &c), IBP_ERR_INVALID_ARG);
	ibp_cache_opts_t oh = opts(203 * 50, 203, IBP_CACHE_S3FIFO, -1), od = opts(203 * 50, 203, IBP_CACHE_S3FIFO, 0);
	ibp_cache_t *h = NULL;
	OK(ibp_cache_create(&oh, &h));
	ibp_cache_t *d = make_dev(&od);
	int64_t ids[3] = { 1, 2, 3 };
	uint8_t *out = xcalloc(3 * 203);
	cr_assert_eq(ibp_cache_gather_cuda(h, f.cs, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather(d, f.s, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_prefetch(d, f.s, ids, 3, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_cuda(NULL, f.cs, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_cuda(d, NULL, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_cuda(d, f.cs, NULL, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_cuda(d, f.cs, ids, 3, NULL, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_cache_gather_cuda(d, f.cs, ids, 3, out, NULL, NULL, 2u, NULL), IBP_ERR_INVALID_ARG);
	OK(ibp_cache_gather_cuda(d, f.cs, ids, 0, NULL, NULL, NULL, 0, NULL));
	/* another row size; another store while bound */
	fx_t g = odd_fx(50, 101);
	cr_assert_eq(ibp_cache_gather_cuda(d, g.cs, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	fx_t f2 = odd_fx(100, 203);
	OK(ibp_cache_gather_cuda(d, f.cs, ids, 3, out, NULL, NULL, 0, NULL));
	cr_assert_eq(ibp_cache_gather_cuda(d, f2.cs, ids, 3, out, NULL, NULL, 0, NULL), IBP_ERR_INVALID_ARG);
	OK(ibp_cache_invalidate(d, NULL, 0, NULL));
	OK(ibp_cache_gather_cuda(d, f2.cs, ids, 3, out, NULL, NULL, 0, NULL));
	/* bad ids and out rows */
	int64_t bid[4] = { -5, 100, 7, 1 }, brow[4] = { 0, 1, 2, -1 };
	int32_t st[4];
	memset(out, 0xEE, 3 * 203);
	cr_assert_eq(ibp_cache_gather_cuda(d, f2.cs, bid, 4, out, brow, st, 0, NULL), IBP_ERR_OUT_OF_RANGE);
	cr_assert(strstr(ibp_last_error(), "request 0 (id -5)"), "%s", ibp_last_error());
	cr_assert(st[0] == IBP_ERR_OUT_OF_RANGE && st[1] == IBP_ERR_OUT_OF_RANGE && st[2] == IBP_OK &&
		  st[3] == IBP_ERR_INVALID_ARG, "statuses %d %d %d %d", st[0], st[1], st[2], st[3]);
	uint8_t *ref = xcalloc(203);
	cr_assert(!memcmp(out, ref, 203) && !memcmp(out + 203, ref, 203), "out-of-range rows are zero-filled");
	OK(ibp_store_gather(f2.s, &bid[2], 1, ref, 1));
	cr_assert(!memcmp(out + 2 * 203, ref, 203));
	cr_assert_eq(ibp_cache_invalidate(d, bid, 1, NULL), IBP_ERR_OUT_OF_RANGE);
	ibp_cache_free(h);
	ibp_cache_free(d);
	free(out);
	free(ref);
	close_fx(&g);
	close_fx(&f2);
	close_fx(&f);
}

/* Several threads gather through one host-fallback device cache while
 * another invalidates: every row equals the store's, and afterwards the
 * device table holds exactly the mirror's READY rows. */
typedef struct worker {
	ibp_cache_t *c;
	fx_t *f;
	uint64_t seed;
	int bad;
	char why[160];
} worker_t;

static void *gather_worker(void *arg)
{
	worker_t *w = arg;
	const uint64_t R = w->f->R, B = 90;
	int64_t ids[90];
	int32_t st[90];
	uint8_t *out = malloc(B * R), *ref = malloc(R);
	for (int b = 0; b < 30 && !w->bad; b++) {
		uint64_t m = 1 + mix(w->seed + b) % B;
		for (uint64_t k = 0; k < m; k++)
			ids[k] = (int64_t)(mix(w->seed * 977 + b * 131 + k) % (k % 3 ? 40 : w->f->n));
		ibp_status_t s = ibp_cache_gather_cuda(w->c, w->f->cs, ids, m, out, NULL, st, 0, NULL);
		for (uint64_t k = 0; k < m && !w->bad; k++) {
			if (s != IBP_OK || st[k] != IBP_OK || ibp_store_gather(w->f->s, &ids[k], 1, ref, 1) != IBP_OK ||
			    memcmp(out + k * R, ref, R)) {
				w->bad = 1;
				snprintf(w->why, sizeof(w->why), "batch %d request %llu (id %lld): status %d/%d", b,
					 (unsigned long long)k, (long long)ids[k], (int)s, st[k]);
			}
		}
	}
	free(out);
	free(ref);
	return NULL;
}

static _Atomic int gathers_running;

static void *invalidate_worker(void *arg)
{
	worker_t *w = arg;
	for (uint64_t b = 0; (b < 60 || gathers_running) && !w->bad; b++) {
		int64_t ids[3] = { (int64_t)(mix(b) % 40), (int64_t)(mix(b + 1) % 40), (int64_t)(mix(b + 2) % w->f->n) };
		sched_yield();
		if (ibp_cache_invalidate(w->c, ids, 3, NULL) != IBP_OK) {
			w->bad = 1;
			snprintf(w->why, sizeof(w->why), "invalidate: %s", ibp_last_error());
		}
	}
	return NULL;
}

Test(cache_cuda, concurrent_callers, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300)
{
	NEED_NO_GPU();
	fx_t f = odd_fx(400, 203);
	ibp_cache_opts_t o = opts(stored_bytes(&f) / 6, 203, IBP_CACHE_S3FIFO, 0);
	ibp_cache_t *d = make_dev(&o);
	pthread_t th[4];
	worker_t w[4];
	gathers_running = 1;
	for (int i = 0; i < 4; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].c = d;
		w[i].f = &f;
		w[i].seed = 100 + i;
		cr_assert_eq(pthread_create(&th[i], NULL, i == 3 ? invalidate_worker : gather_worker, &w[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	gathers_running = 0;
	pthread_join(th[3], NULL);
	for (int i = 0; i < 4; i++)
		cr_assert(!w[i].bad, "thread %d: %s", i, w[i].why);
	/* the mirror against itself: a host cache is not fed the same order here */
	const ibp_slab_table_t *t = &d->dev->t;
	uint64_t ready = 0, keys = 0;
	for (uint64_t p = 0; p < d->ix.cap; p++)
		if (d->ix.keys[p] >= 0 && ENT_STATE(d->ix.vals[p]) == ENT_READY) {
			ready++;
			uint64_t id = (uint64_t)d->ix.keys[p], q = ibp_slab_hash((int64_t)id) & (t->cap - 1);
			while (t->keys[q] != (int64_t)id)
				q = (q + 1) & (t->cap - 1);
			cr_assert_eq(t->vals[q], d->ix.vals[p]);
		}
	for (uint64_t q = 0; q < t->cap; q++)
		keys += t->keys[q] >= 0;
	cr_assert_eq(keys, ready);
	ibp_cache_stats_t st;
	OK(ibp_cache_stats(d, &st, 0));
	cr_assert(st.hits > 0 && st.invalidations > 0, "hits %llu invalidations %llu", (unsigned long long)st.hits,
		  (unsigned long long)st.invalidations);
	ibp_cache_free(d);
	close_fx(&f);
}

/* On a GPU (skipped without one; tests/emu runs the same orchestration on
 * the emulator): a device cache and a device store against a host cache
 * fed the same batches, and the device table (copied back) against the
 * mirror after every batch. */
Test(cache_cuda, gpu_matches_host_cache, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 600)
{
	if (!tu_have_gpu())
		cr_skip_test("no usable GPU (tests/emu runs this path on the emulator)");
	const uint64_t n = 500, R = 203, B = 200;
	uint8_t *rows = xcalloc(n * R);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < (i % 7 == 3 ? R : 1 + mix(i) % 20); j++)
			rows[i * R + (i % 7 == 3 ? j : mix(i * 31 + j) % R)] = (uint8_t)mix(i + j) | 1;
	char path[256];
	snprintf(path, sizeof(path), "%s/gpu.ibp", tmpdir);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t to;
	ibp_train_opts_default(&to);
	to.nthreads = 1;
	to.threshold = 0.8;
	OK(ibp_pack(path, rows, IBP_DTYPE_U8, 2, shape, &to, IBP_LAYOUT_PACKED));
	free(rows);
	ibp_store_t *s = NULL;
	OK(ibp_store_open(path, IBP_OPEN_READ, &s));
	ibp_cuda_store_t *cs = NULL;
	OK(ibp_cuda_store_from_store(s, IBP_CUDA_PAYLOAD_COPY_PINNED, 0, NULL, &cs));
	uint64_t stored = 0;
	ibp_container_payload(ibp_store_container(s), &stored);
	ibp_cache_opts_t oh = opts(stored / 6 + 2 * R, R, IBP_CACHE_S3FIFO, -1), od = oh;
	od.device = 0;
	ibp_cache_t *h = NULL, *d = NULL;
	OK(ibp_cache_create(&oh, &h));
	OK(ibp_cache_create(&od, &d));
	cr_assert(d->dev && d->dev->on_device);
	void *dids, *drows, *dout, *dst;
	OK(ibp_cuda_malloc(B * 8, &dids));
	OK(ibp_cuda_malloc(B * 8, &drows));
	OK(ibp_cuda_malloc(B * R, &dout));
	OK(ibp_cuda_malloc(B * 4, &dst));
	int64_t *ids = xcalloc(B * 8), *orow = xcalloc(B * 8);
	int32_t *sh = xcalloc(B * 4), *sd = xcalloc(B * 4);
	uint8_t *oh_ = xcalloc(B * R), *od_ = xcalloc(B * R);
	const ibp_slab_table_t *t = &d->dev->t;
	int64_t *tk = xcalloc(t->cap * 8);
	uint64_t *tv = xcalloc(t->cap * 8);
	uint32_t *tp = xcalloc(d->nslots * 4);
	for (int b = 0; b < 16; b++) {
		uint64_t m = 1 + mix(b) % B;
		for (uint64_t k = 0; k < m; k++) {
			double u = (double)(mix(b * 1000003ull + k) >> 11) / 9007199254740992.0;
			ids[k] = (int64_t)((double)n * u * u * u);
			orow[k] = (int64_t)(m - 1 - k);
		}
		if (b % 3 == 1)
			ids[mix(b) % m] = (int64_t)n;
		memset(oh_, 0xA5, B * R);
		OK(ibp_cuda_memset(dout, 0xA5, B * R, NULL));
		OK(ibp_cuda_memcpy(dids, ids, m * 8, NULL));
		OK(ibp_cuda_memcpy(drows, orow, m * 8, NULL));
		OK(ibp_cuda_sync(NULL));
		ibp_status_t rd = ibp_cache_gather_cuda(d, cs, dids, m, dout, drows, dst, 0, NULL);
		ibp_status_t rh = ibp_cache_gather(h, s, ids, m, oh_, orow, sh, 0, NULL);
		cr_assert_eq(rd, rh, "batch %d: %d vs %d (%s)", b, (int)rd, (int)rh, ibp_last_error());
		OK(ibp_cuda_memcpy(od_, dout, B * R, NULL));
		OK(ibp_cuda_memcpy(sd, dst, m * 4, NULL));
		OK(ibp_cuda_memcpy(tk, t->keys, t->cap * 8, NULL));
		OK(ibp_cuda_memcpy(tv, t->vals, t->cap * 8, NULL));
		OK(ibp_cuda_memcpy(tp, t->pin, d->nslots * 4, NULL));
		OK(ibp_cuda_sync(NULL));
		cr_assert(!memcmp(sd, sh, m * 4), "batch %d: statuses", b);
		cr_assert(!memcmp(od_, oh_, B * R), "batch %d: output differs from the host cache's", b);
		same_stats(d, h, b);
		uint64_t ready = 0, keys = 0;
		for (uint64_t p = 0; p < d->ix.cap; p++) {
			int64_t id = d->ix.keys[p];
			if (id < 0 || ENT_STATE(d->ix.vals[p]) != ENT_READY)
				continue;
			ready++;
			uint64_t q = ibp_slab_hash(id) & (t->cap - 1), i = 0;
			while (tk[q] != id && i++ < t->cap)
				q = (q + 1) & (t->cap - 1);
			cr_assert(tk[q] == id && tv[q] == d->ix.vals[p], "batch %d: id %lld's device entry", b, (long long)id);
		}
		for (uint64_t q = 0; q < t->cap; q++)
			keys += tk[q] >= 0;
		cr_assert_eq(keys, ready, "batch %d: %llu device keys, %llu READY", b, (unsigned long long)keys,
			     (unsigned long long)ready);
		for (uint64_t g = 0; g < d->nslots; g++)
			cr_assert_eq(tp[g], 0, "batch %d: slot %llu pinned", b, (unsigned long long)g);
	}
	ibp_cuda_free(dids);
	ibp_cuda_free(drows);
	ibp_cuda_free(dout);
	ibp_cuda_free(dst);
	free(ids);
	free(orow);
	free(sh);
	free(sd);
	free(oh_);
	free(od_);
	free(tk);
	free(tv);
	free(tp);
	ibp_cache_free(d);
	ibp_cache_free(h);
	ibp_cuda_store_free(cs);
	ibp_store_close(s);
}
