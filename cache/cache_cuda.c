/* cache_cuda.c - the GPU slab cache: ibp_cache_gather_cuda. The host
 * mirror (cache.c, slab.c) makes every decision of a pass (dedupe, probe,
 * policy, allocation) exactly as for a host cache; this file replays them
 * on the device table (slab_batch.h) and moves the bytes, in order on the
 * caller's stream: misses decoded from the device store (ibp_gather_cuda),
 * victims erased, admitted rows inserted (compressed bytes from the store's
 * payload, decoded ones from their output rows; published READY after a
 * fence), hits probed, copied from their slots to a stage and decoded
 * there (ibpi_gather_staged_cuda). A host-fallback cache runs the same
 * orchestration with the CPU twins on a table in host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"
#include "cuda/ibp_gather_staged.h"
#include "ibp/alloc.h"
#include "ibp/codec.h"
#include "ibp/cuda.h"
#include "util/error.h"

#define ALIGN 256u

static uint64_t up(uint64_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* ---- the steps, on the device or (fallback) on the CPU ---- */

static ibp_status_t xcopy(const cache_dev_t *d, void *dst, const void *src, uint64_t bytes, void *stream)
{
	if (!bytes)
		return IBP_OK;
	if (d->on_device)
		return ibp_cuda_memcpy(dst, src, bytes, stream);
	memcpy(dst, src, bytes);
	return IBP_OK;
}

static ibp_status_t xsync(const cache_dev_t *d, void *stream)
{
	return d->on_device ? ibp_cuda_sync(stream) : IBP_OK;
}

static ibp_status_t x_erase(cache_dev_t *d, const int64_t *keys, uint64_t n, void *stream)
{
	if (!n)
		return IBP_OK;
	return d->on_device ? ibpi_slab_erase_cuda(&d->t, keys, n, NULL, stream) : ibpi_slab_erase(&d->t, keys, n, NULL);
}

/* ---- create / free ---- */

static void host_free(cache_dev_t *d)
{
	void *p[] = { d->hids, d->hrows, d->mids, d->mrows, d->sids, d->hidx, d->hhrows, d->vic, d->hstat,
		      d->mstat, d->sstat, d->upos, d->hu, d->ops, d->hcount };
	for (unsigned i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		ibp_pinned_free(p[i]);
}

void ibpi_cache_cuda_free(ibp_cache_t *c)
{
	cache_dev_t *d = c ? c->dev : NULL;
	if (!d)
		return;
	if (d->on_device) {
		ibpi_slab_table_free_cuda(&d->t);
		ibp_cuda_free(d->dmem);
	} else {
		free(d->t.keys);
		free(d->t.vals);
		free(d->t.pin);
		free(d->t.meta); /* t.mem is the mirror's slab memory */
		free(d->dmem);
	}
	free(d->slot_bytes);
	host_free(d);
	pthread_mutex_destroy(&d->mu);
	free(d);
	c->dev = NULL;
}

static void *halloc(uint64_t bytes, ibp_status_t *s)
{
	void *p = NULL;
	/* pinned where CUDA can pin it (async copies), else host memory */
	ibp_status_t e = ibp_pinned_alloc(bytes ? bytes : 8, 64, IBP_CUDA_HOST_FALLBACK, &p);
	if (e != IBP_OK && e != IBP_ERR_NO_DEVICE) {
		ibp_pinned_free(p);
		p = NULL;
	}
	if (!p)
		*s = IBP_ERR_NOMEM;
	return p;
}

ibp_status_t ibpi_cache_cuda_init(ibp_cache_t *c)
{
	int count = 0;
	ibp_status_t s = ibp_cuda_device_count(&count);
	if (s == IBP_OK && c->o.device >= count)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_cache_create: device %d of %d", c->o.device, count);
	if (s != IBP_OK && !(c->o.flags & IBP_CACHE_HOST_FALLBACK)) {
		char why[200];
		snprintf(why, sizeof(why), "%s", ibp_last_error());
		return ibpi_fail(IBP_ERR_NO_DEVICE, "ibp_cache_create: device %d: no usable GPU (%s); "
				"IBP_CACHE_HOST_FALLBACK in opts.flags keeps the device table in host memory", c->o.device,
				why);
	}
	cache_dev_t *d = calloc(1, sizeof(*d));
	if (!d)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: out of memory");
	pthread_mutex_init(&d->mu, NULL);
	c->dev = d;
	d->on_device = s == IBP_OK;
	d->b = c->o.max_batch;
	d->nvic = c->nslots;
	d->stride = (c->cls[c->raw].slot_bytes + 15) / 16 * 16;
	for (uint32_t i = 0; i < c->nclasses; i++)
		if (c->cls[i].slot_bytes > d->stride)
			d->stride = (c->cls[i].slot_bytes + 15) / 16 * 16;
	uint64_t cap = 64;
	while (cap < 2 * c->nslots)
		cap <<= 1;
	const uint64_t b = d->b;
	s = IBP_OK;
	d->slot_bytes = malloc(c->nclasses * sizeof(uint32_t));
	if (!d->slot_bytes)
		s = IBP_ERR_NOMEM;
	for (uint32_t i = 0; s == IBP_OK && i < c->nclasses; i++)
		d->slot_bytes[i] = (uint32_t)c->cls[i].slot_bytes;
	d->hids = halloc(b * 8, &s);
	d->hrows = halloc(b * 8, &s);
	d->mids = halloc(b * 8, &s);
	d->mrows = halloc(b * 8, &s);
	d->sids = halloc(b * 8, &s);
	d->hidx = halloc(b * 8, &s);
	d->hhrows = halloc(b * 8, &s);
	d->vic = halloc(d->nvic * 8, &s);
	d->hstat = halloc(b * 4, &s);
	d->mstat = halloc(b * 4, &s);
	d->sstat = halloc(b * 4, &s);
	d->upos = halloc(b * 8, &s);
	d->hu = halloc(b * 8, &s);
	d->ops = halloc(b * sizeof(ibp_slab_insert_op_t), &s);
	d->hcount = halloc(16, &s);
	if (s != IBP_OK) {
		ibpi_cache_cuda_free(c);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: cannot allocate the host buffers of a device cache");
	}
	/* the pass buffers: one allocation */
	uint64_t o_ids[6], o = 0;
	for (int i = 0; i < 6; i++, o += up(b * 8))
		o_ids[i] = o; /* mids, mrows, sids, hidx, hrows, ent */
	uint64_t o_vic = o, o_mst = o_vic + up(d->nvic * 8), o_sst = o_mst + up(b * 4), o_len = o_sst + up(b * 4),
		 o_meta = o_len + up(b * 4), o_ops = o_meta + up(b * 4), o_cnt = o_ops + up(b * sizeof(ibp_slab_insert_op_t)),
		 o_stage = o_cnt + ALIGN, total = o_stage + b * d->stride;
	if (d->on_device) {
		s = ibpi_slab_table_alloc_cuda(&d->t, cap, c->nslots, c->o.capacity_bytes, d->slot_bytes, c->nclasses);
		if (s == IBP_OK)
			s = ibp_cuda_malloc(total, &d->dmem);
	} else {
		d->t.keys = malloc(cap * sizeof(int64_t));
		d->t.vals = calloc(cap, sizeof(uint64_t));
		d->t.pin = calloc(c->nslots, sizeof(uint32_t));
		d->t.meta = calloc(c->nslots, sizeof(uint16_t));
		d->t.mem = c->mem; /* the mirror never writes its slabs in a device cache */
		d->t.slot_bytes = d->slot_bytes;
		d->t.cap = cap;
		d->dmem = malloc(total);
		if (!d->t.keys || !d->t.vals || !d->t.pin || !d->t.meta || !d->dmem)
			s = ibpi_fail(IBP_ERR_NOMEM, "ibp_cache_create: cannot allocate the host table of a device cache");
		else
			memset(d->t.keys, 0xFF, cap * sizeof(int64_t)); /* IBP_SLAB_KEY_EMPTY */
	}
	if (s != IBP_OK) {
		ibpi_cache_cuda_free(c);
		return s;
	}
	d->t.spp = c->spp;
	d->t.slab_bytes = c->slab_bytes;
	uint8_t *m = d->dmem;
	d->d_mids = (int64_t *)(m + o_ids[0]);
	d->d_mrows = (int64_t *)(m + o_ids[1]);
	d->d_sids = (int64_t *)(m + o_ids[2]);
	d->d_hidx = (int64_t *)(m + o_ids[3]);
	d->d_hrows = (int64_t *)(m + o_ids[4]);
	d->d_ent = (uint64_t *)(m + o_ids[5]);
	d->d_vic = (int64_t *)(m + o_vic);
	d->d_mstat = (int32_t *)(m + o_mst);
	d->d_sstat = (int32_t *)(m + o_sst);
	d->d_lens = (uint32_t *)(m + o_len);
	d->d_meta = (uint32_t *)(m + o_meta);
	d->d_ops = (ibp_slab_insert_op_t *)(m + o_ops);
	d->d_count = (unsigned long long *)(m + o_cnt);
	d->d_stage = m + o_stage;
	d->dev_bytes = total + cap * 16 + c->nslots * 6 + c->o.capacity_bytes + c->nclasses * 4;
	c->meta_bytes += d->dev_bytes - c->o.capacity_bytes;
	if (!d->on_device)
		return ibpi_fail(IBP_ERR_NO_DEVICE, "ibp_cache_create: device %d: no usable GPU; the cache was made with "
				"its device table in host memory (IBP_CACHE_HOST_FALLBACK): ibp_cache_gather_cuda takes "
				"host-fallback stores and runs on the CPU", c->o.device);
	return IBP_OK;
}

/* ---- invalidation ---- */

ibp_status_t ibpi_cache_cuda_invalidate(ibp_cache_t *c, const int64_t *ids, uint64_t n)
{
	cache_dev_t *d = c->dev;
	ibp_status_t s = IBP_OK;
	if (!ids) { /* everything: an empty table, no pins; a broken cache is usable again */
		if (d->on_device) {
			s = ibp_cuda_memset(d->t.keys, 0xFF, d->t.cap * sizeof(int64_t), NULL);
			if (s == IBP_OK)
				s = ibp_cuda_memset(d->t.pin, 0, c->nslots * sizeof(uint32_t), NULL);
			if (s == IBP_OK)
				s = ibp_cuda_sync(NULL);
		} else {
			memset(d->t.keys, 0xFF, d->t.cap * sizeof(int64_t));
			memset(d->t.pin, 0, c->nslots * sizeof(uint32_t));
		}
		d->broken = s != IBP_OK;
		d->store = NULL;
		return s;
	}
	/* An id given twice is erased once (the second finds no key). */
	for (uint64_t a = 0; a < n && s == IBP_OK; a += d->nvic) {
		uint64_t k = n - a < d->nvic ? n - a : d->nvic;
		if (d->on_device) {
			s = xcopy(d, d->d_vic, ids + a, k * 8, NULL);
			if (s == IBP_OK)
				s = x_erase(d, d->d_vic, k, NULL);
		} else {
			s = x_erase(d, ids + a, k, NULL);
		}
	}
	if (s == IBP_OK)
		s = xsync(d, NULL);
	if (s != IBP_OK)
		d->broken = 1;
	return s;
}

/* ---- a pass ---- */

#define DEV(x)                                 \
	do {                                   \
		if ((s = (x)) != IBP_OK)       \
			goto fail;             \
	} while (0)

/* One pass over k requests whose ids (and out rows) are in d->hids (and
 * d->hrows when rows): statuses to d->hstat. Output row of request j:
 * rows ? hrows[j] : a + j. */
static ibp_status_t dev_pass(ibp_cache_t *c, cache_dev_t *d, cache_ws_t *w, const ibp_cuda_store_t *store, uint64_t a,
			     uint64_t k, void *out, int rows, uint32_t flags, ibp_status_t *first, uint64_t *first_pos,
			     void *stream)
{
	ibp_status_t s = IBP_OK;
	const uint64_t rb = c->rb;
	const int64_t *hrows = rows ? d->hrows : NULL;
#define OROW(j) (hrows ? hrows[j] : (int64_t)(a + (j)))
	cache_req_t q = { .ids = d->hids, .n = k, .nrows = ibp_cuda_store_nrows(store), .gather = 1, .out = NULL,
			  .out_rows = hrows, .status = d->hstat, .flags = flags, .base = a, .first = *first,
			  .first_pos = *first_pos };
	uint64_t nu = ibpi_cache_pass_dedupe(c, w, &q);
	*first = q.first;
	*first_pos = q.first_pos;
	ibpi_cache_pass_probe(c, w, nu, 1, !(flags & IBP_CACHE_NO_ADMIT));
	const uint8_t *pay = ibpi_cuda_store_payload(store);
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_HIT)
			continue;
		uint64_t off = 0, len = 0;
		uint8_t fl = 0, cl = 0;
		int packed = ibpi_cuda_store_row_info(store, (uint64_t)w->uid[u], &off, &len, &fl, &cl);
		w->usrc[u] = packed ? pay + off : NULL;
		w->ulen[u] = packed ? len : rb;
		w->ufl[u] = fl;
		w->uclu[u] = cl;
		ibpi_cache_miss_class(c, w, u, packed);
	}
	/* misses, bad requests included (they get their statuses and zero rows there) */
	uint64_t nm = 0, nh = 0, nhr = 0, srows = 0, sbytes = 0, copied = 0, hit_bytes = 0, ni = 0;
	for (uint64_t j = 0; j < k; j++) {
		uint32_t u = w->rep[j];
		if (u != NIL && w->ukind[u] == K_HIT)
			continue;
		if (u != NIL && w->ufirst[u] == j)
			d->upos[u] = nm;
		d->mids[nm] = d->hids[j];
		d->mrows[nm++] = OROW(j);
	}
	DEV(xcopy(d, d->d_mids, d->mids, nm * 8, stream));
	DEV(xcopy(d, d->d_mrows, d->mrows, nm * 8, stream));
	DEV(ibp_gather_cuda(store, d->d_mids, nm, out, d->d_mrows, d->d_mstat, stream));
	DEV(xcopy(d, d->mstat, d->d_mstat, nm * 4, stream));
	DEV(xsync(d, stream));
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_HIT)
			continue;
		if (d->mstat[d->upos[u]] == IBP_OK) {
			srows++;
			sbytes += w->ulen[u];
		} else {
			w->ustat[u] = IBP_ERR_CORRUPT; /* not admitted */
			w->ukind[u] = K_ERR;
		}
	}
	cache_sink_t sink = { d->vic, UINT64_MAX, 0, NULL, NULL }; /* every victim, to erase */
	ibpi_cache_pass_alloc(c, w, nu, 1, &sink);
	if (sink.n) {
		DEV(xcopy(d, d->d_vic, d->vic, sink.n * 8, stream));
		DEV(x_erase(d, d->d_vic, sink.n, stream));
	}
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_ALLOC) {
			uint64_t g = w->ug[u];
			ibp_slab_insert_op_t *op = &d->ops[ni++];
			int dec = w->ufl[u] == 0xFF; /* kept decoded: the row just written to out, as RAW */
			op->key = w->uid[u];
			op->entry = ENT_MAKE(ENT_READY, w->ucls[u], w->uclen[u], g / c->spp, g % c->spp);
			op->src = dec ? (const uint8_t *)out + (uint64_t)OROW(w->ufirst[u]) * rb : w->usrc[u];
			op->meta = dec ? IBP_ROW_RAW : (uint32_t)w->ufl[u] | (uint32_t)w->uclu[u] << 8;
			copied += w->uclen[u];
			w->ukind[u] = K_FILLED;
		} else if (w->ukind[u] == K_HIT) {
			d->upos[u] = nh;
			d->hu[nh] = u;
			d->sids[nh++] = w->uid[u];
			hit_bytes += c->slen[w->ug[u]];
		}
	}
	if (ni) {
		d->hcount[0] = 0;
		DEV(xcopy(d, d->d_ops, d->ops, ni * sizeof(ibp_slab_insert_op_t), stream));
		DEV(xcopy(d, d->d_count, d->hcount, 8, stream));
		DEV(d->on_device ? ibpi_slab_insert_cuda(&d->t, d->d_ops, ni, d->d_count, stream)
				 : ibpi_slab_insert(&d->t, d->d_ops, ni, d->d_count));
		DEV(xcopy(d, d->hcount, d->d_count, 8, stream));
	}
	if (nh) {
		for (uint64_t j = 0; j < k; j++) {
			uint32_t u = w->rep[j];
			if (u == NIL || w->ukind[u] != K_HIT)
				continue;
			d->hidx[nhr] = (int64_t)d->upos[u];
			d->hhrows[nhr++] = OROW(j);
		}
		DEV(xcopy(d, d->d_sids, d->sids, nh * 8, stream));
		DEV(d->on_device ? ibpi_slab_probe_cuda(&d->t, d->d_sids, nh, d->d_ent, 1, stream)
				 : ibpi_slab_probe(&d->t, d->d_sids, nh, d->d_ent, 1));
		DEV(d->on_device ? ibpi_slab_gather_cuda(&d->t, d->d_ent, nh, d->d_stage, d->stride, d->d_lens, d->d_meta, 1,
							stream)
				 : ibpi_slab_gather(&d->t, d->d_ent, nh, d->d_stage, d->stride, d->d_lens, d->d_meta, 1));
		DEV(xcopy(d, d->d_hidx, d->hidx, nhr * 8, stream));
		DEV(xcopy(d, d->d_hrows, d->hhrows, nhr * 8, stream));
		DEV(ibpi_gather_staged_cuda(store, d->d_stage, d->stride, nh, d->d_lens, d->d_meta, d->d_hidx, nhr, out,
					   d->d_hrows, d->d_sstat, stream));
		DEV(xcopy(d, d->sstat, d->d_sstat, nhr * 4, stream));
	}
	DEV(xsync(d, stream));
	if (ni && d->hcount[0]) {
		s = ibpi_fail(IBP_ERR_INTERNAL, "ibp_cache_gather_cuda: %llu rows found the device table full",
			     (unsigned long long)d->hcount[0]);
		goto fail;
	}
	for (uint64_t r = 0; r < nhr; r++)
		if (d->sstat[r] != IBP_OK)
			w->ustat[d->hu[d->hidx[r]]] = IBP_ERR_CORRUPT; /* dropped by the publish below */
	ibpi_cache_pass_publish(c, w, k, nu, 1, srows, sbytes, copied, hit_bytes);
	uint64_t nb = 0;
	for (uint64_t u = 0; u < nu; u++)
		if (w->ukind[u] == K_HIT && w->ustat[u] != IBP_OK)
			d->vic[nb++] = w->uid[u];
	if (nb) {
		s = xcopy(d, d->d_vic, d->vic, nb * 8, stream);
		if (s == IBP_OK)
			s = x_erase(d, d->d_vic, nb, stream);
		if (s == IBP_OK)
			s = xsync(d, stream);
		if (s != IBP_OK)
			d->broken = 1;
	}
	for (uint64_t j = 0; j < k; j++) {
		uint32_t u = w->rep[j];
		if (u == NIL)
			continue; /* its status is the dedupe's */
		d->hstat[j] = w->ustat[u];
		if (w->ustat[u] != IBP_OK && *first == IBP_OK) {
			*first = (ibp_status_t)w->ustat[u];
			*first_pos = a + j;
		}
	}
	return s;
fail:
	/* The table's state is unknown: the mirror forgets this pass's rows and
	 * the cache refuses gathers until it is emptied. */
	for (uint64_t u = 0; u < nu; u++)
		if (w->ukind[u] == K_ALLOC || w->ukind[u] == K_FILLED)
			w->ukind[u] = K_BADFILL;
	ibpi_cache_pass_publish(c, w, k, nu, 1, 0, 0, 0, 0);
	d->broken = 1;
	return s;
#undef OROW
}

ibp_status_t ibp_cache_gather_cuda(ibp_cache_t *c, const struct ibp_cuda_store *store, const int64_t *ids,
				   uint64_t n, void *out, const int64_t *out_rows, int32_t *status, uint32_t flags,
				   void *stream)
{
	static const char fn[] = "ibp_cache_gather_cuda";
	if (!c || !store)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s", fn, c ? "store" : "cache");
	cache_dev_t *d = c->dev;
	if (!d)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: a host cache (opts.device -1): use ibp_cache_gather", fn);
	if (n && (!ids || !out))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s with n = %llu", fn, ids ? "out" : "ids",
				(unsigned long long)n);
	if (flags & ~IBP_CACHE_NO_ADMIT)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown flag bits 0x%x", fn, flags);
	if (ibp_cuda_store_on_device(store) != d->on_device)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: a %s cache takes %s stores", fn,
				d->on_device ? "GPU" : "host-fallback", d->on_device ? "device" : "host-fallback");
	if (ibp_cuda_store_row_bytes(store) != c->rb)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: store rows are %llu bytes, the cache's %llu", fn,
				(unsigned long long)ibp_cuda_store_row_bytes(store), (unsigned long long)c->rb);
	pthread_mutex_lock(&d->mu);
	ibp_status_t s = IBP_OK;
	if (d->broken)
		s = ibpi_fail(IBP_ERR_CUDA, "%s: a device step failed earlier; ibp_cache_invalidate(c, NULL, 0) empties "
			     "the cache and makes it usable again", fn);
	else if (d->store && d->store != store)
		s = ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the cache holds rows of another store (empty it with "
			     "ibp_cache_invalidate(c, NULL, 0) first)", fn);
	d->store = s == IBP_OK ? store : d->store;
	ibp_status_t first = IBP_OK;
	uint64_t first_pos = 0;
	int64_t first_id = 0;
	cache_ws_t *w = &c->ws[0]; /* passes of a device cache run one at a time (d->mu) */
	for (uint64_t a = 0; a < n && s == IBP_OK; a += d->b) {
		uint64_t k = n - a < d->b ? n - a : d->b;
		s = xcopy(d, d->hids, ids + a, k * 8, stream);
		if (s == IBP_OK && out_rows)
			s = xcopy(d, d->hrows, out_rows + a, k * 8, stream);
		if (s == IBP_OK)
			s = xsync(d, stream);
		if (s != IBP_OK)
			break;
		ibp_status_t before = first;
		s = dev_pass(c, d, w, store, a, k, out, out_rows != NULL, flags, &first, &first_pos, stream);
		if (before == IBP_OK && first != IBP_OK)
			first_id = d->hids[first_pos - a];
		if (s == IBP_OK && status)
			s = xcopy(d, status + a, d->hstat, k * 4, stream);
		if (s == IBP_OK)
			s = xsync(d, stream); /* hstat is written again by the next pass */
	}
	pthread_mutex_unlock(&d->mu);
	if (s != IBP_OK)
		return s;
	if (first != IBP_OK)
		return ibpi_fail(first, "%s: request %llu (id %lld): %s", fn, (unsigned long long)first_pos,
				(long long)first_id,
				first == IBP_ERR_INVALID_ARG ? "negative output row"
				: first == IBP_ERR_OUT_OF_RANGE ? "id outside the store"
								: "row failed to decode");
	return IBP_OK;
}
