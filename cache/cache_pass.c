/* cache_pass.c - one pass of a gather or prefetch over a batch of ids, in
 * phases that the host (ibpi_cache_pass) and the device gather
 * (cache_cuda.c) share: dedupe, probe, allocate, publish, and the misses'
 * classes and bytes. Calls the policies (cache_policy.c) and the store. */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "ibp/codec.h"
#include "ibp/container.h"
#include "util/error.h"

/* Where a missed row's bytes come from and which class it would take.
 * Compressed bytes are kept for packed IBP rows that are not RAW and not
 * near raw; everything else is kept decoded in the raw class. */
static ibp_status_t miss_meta(ibp_cache_t *c, const ibp_container_t *ct, cache_ws_t *w, uint64_t u)
{
	w->usrc[u] = NULL;
	w->ulen[u] = c->rb; /* what crosses PCIe: the stored length */
	w->ufl[u] = 0;
	w->uclu[u] = 0;
	if (ibp_container_codec_id(ct) == IBP_CODEC_IBP) {
		unsigned clu = 0;
		ibp_status_t s = ibp_container_row_meta(ct, (uint64_t)w->uid[u], &w->usrc[u], &w->ulen[u], &w->ufl[u],
							&clu);
		if (s != IBP_OK)
			return s;
		w->uclu[u] = (uint8_t)clu;
	}
	ibpi_cache_miss_class(c, w, u, w->usrc[u] && ibp_container_layout(ct) == IBP_LAYOUT_PACKED);
	return IBP_OK;
}

void ibpi_cache_miss_class(ibp_cache_t *c, cache_ws_t *w, uint64_t u, int packed)
{
	int compressed = !(c->o.flags & IBP_CACHE_UNCOMPRESSED) && packed &&
			 (w->ufl[u] & IBP_ROW_MODE_MASK) != IBP_ROW_RAW;
	uint32_t cls = compressed ? ibpi_cache_class_of(c, w->ulen[u]) : c->raw;
	if (cls == c->raw)
		compressed = 0;
	w->ucls[u] = cls;
	w->uclen[u] = compressed ? w->ulen[u] : c->rb;
	if (!compressed)
		w->ufl[u] = 0xFF; /* decoded */
}

/* Decodes row id from the store into dst. */
static ibp_status_t store_row(ibp_store_t *store, const ibp_container_t *ct, const cache_ws_t *w, uint64_t u,
			      void *dst)
{
	if (ibp_container_codec_id(ct) == IBP_CODEC_IBP) {
		uint8_t fl;
		unsigned clu;
		const uint8_t *src;
		uint64_t len;
		IBP_TRY(ibp_container_row_meta(ct, (uint64_t)w->uid[u], &src, &len, &fl, &clu));
		return ibp_decode_row(ibp_store_codec(store), src, len, fl, clu, dst);
	}
	return ibp_store_gather(store, &w->uid[u], 1, dst, 1);
}

/* Decodes a resident slot into dst. */
static ibp_status_t slot_row(const ibp_cache_t *c, const ibp_store_t *store, uint64_t g, void *dst)
{
	const uint8_t *p = ibpi_cache_slot_ptr(c, g);
	if (c->sfl[g] == 0xFF) {
		memcpy(dst, p, c->rb);
		return IBP_OK;
	}
	return ibp_decode_row(ibp_store_codec(store), p, c->slen[g], c->sfl[g], c->sclu[g], dst);
}

static uint8_t *out_row(const ibp_cache_t *c, void *out, const int64_t *out_rows, uint64_t k)
{
	return (uint8_t *)out + (uint64_t)(out_rows ? out_rows[k] : (int64_t)k) * c->rb;
}

/* One pass over at most max_batch requests. `out` NULL: prefetch. */
void ibpi_cache_pass(ibp_cache_t *c, cache_ws_t *w, ibp_store_t *store, cache_req_t *q, cache_sink_t *sink)
{
	const ibp_container_t *ct = ibp_store_container(store);
	const uint64_t n = q->n, base = q->base;
	void *out = q->out;
	const int64_t *out_rows = q->out_rows;
	int32_t *status = q->status;
	const uint32_t flags = q->flags;
	ibp_status_t *first = &q->first;
	uint64_t *first_pos = &q->first_pos;
	q->nrows = ibp_store_nrows(store);
	q->gather = out != NULL;
	uint64_t nu = ibpi_cache_pass_dedupe(c, w, q);
	int admit = !(flags & IBP_CACHE_NO_ADMIT);
	ibpi_cache_pass_probe(c, w, nu, out != NULL, admit);

	/* 3. misses: where their bytes are, and (gather) decode them from the store */
	uint64_t srows = 0, sbytes = 0;
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_HIT || (!out && w->ukind[u] != K_ADMIT))
			continue;
		ibp_status_t s = miss_meta(c, ct, w, u);
		if (s == IBP_OK && out)
			s = store_row(store, ct, w, u, out_row(c, out, out_rows, w->ufirst[u]));
		if (s == IBP_OK) {
			srows++;
			sbytes += w->ulen[u];
		}
		if (s != IBP_OK) {
			w->ustat[u] = s == IBP_ERR_NOMEM ? s : IBP_ERR_CORRUPT;
			w->ukind[u] = K_ERR;
			if (out)
				memset(out_row(c, out, out_rows, w->ufirst[u]), 0, c->rb);
		}
	}

	ibpi_cache_pass_alloc(c, w, nu, out != NULL, sink);

	/* 5. copy into the slots; decode the hits */
	uint64_t copied = 0, hit_bytes = 0;
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] == K_ALLOC) {
			uint8_t *dst = ibpi_cache_slot_ptr(c, w->ug[u]);
			ibp_status_t s = IBP_OK;
			if (!out) /* prefetch: decode once to check the bytes */
				s = store_row(store, ct, w, u, w->scratch);
			if (s == IBP_OK) {
				if (w->ufl[u] == 0xFF)
					memcpy(dst, out ? out_row(c, out, out_rows, w->ufirst[u]) : w->scratch, c->rb);
				else
					memcpy(dst, w->usrc[u], w->uclen[u]);
				copied += w->uclen[u];
				w->ukind[u] = K_FILLED;
				if (!out) {
					srows++;
					sbytes += w->ulen[u];
				}
			} else {
				w->ukind[u] = K_BADFILL; /* prefetch: skipped, not an error */
			}
		} else if (w->ukind[u] == K_HIT && out) {
			uint8_t *dst = out_row(c, out, out_rows, w->ufirst[u]);
			ibp_status_t s = slot_row(c, store, w->ug[u], dst);
			hit_bytes += c->slen[w->ug[u]];
			if (s != IBP_OK) {
				memset(dst, 0, c->rb);
				w->ustat[u] = IBP_ERR_CORRUPT;
			}
		}
	}

	ibpi_cache_pass_publish(c, w, n, nu, out != NULL, srows, sbytes, copied, hit_bytes);

	/* 7. statuses and duplicates */
	for (uint64_t k = 0; k < n; k++) {
		uint32_t u = w->rep[k];
		if (u == NIL)
			continue;
		ibp_status_t s = (ibp_status_t)w->ustat[u];
		if (out && w->ufirst[u] != k)
			memcpy(out_row(c, out, out_rows, k), out_row(c, out, out_rows, w->ufirst[u]), c->rb);
		if (status)
			status[k] = s;
		if (s != IBP_OK && *first == IBP_OK) {
			*first = s;
			*first_pos = base + k;
		}
	}
}

uint64_t ibpi_cache_pass_dedupe(ibp_cache_t *c, cache_ws_t *w, cache_req_t *q)
{
	const int64_t *ids = q->ids, *out_rows = q->out_rows;
	const uint64_t n = q->n, nrows = q->nrows, base = q->base;
	const int gather = q->gather;
	void *out = q->out;
	int32_t *status = q->status;
	ibp_status_t *first = &q->first;
	uint64_t *first_pos = &q->first_pos;
	uint64_t nu = 0, m = w->dcap - 1;
	/* 1. validate and deduplicate */
	for (uint64_t k = 0; k < n; k++) {
		w->rep[k] = NIL;
		ibp_status_t s = IBP_OK;
		if (gather && out_rows && out_rows[k] < 0)
			s = IBP_ERR_INVALID_ARG;
		else if (ids[k] < 0 || (uint64_t)ids[k] >= nrows)
			s = IBP_ERR_OUT_OF_RANGE;
		if (s != IBP_OK) {
			if (out && s == IBP_ERR_OUT_OF_RANGE)
				memset(out_row(c, out, out_rows, k), 0, c->rb);
			if (status)
				status[k] = s;
			if (*first == IBP_OK) {
				*first = s;
				*first_pos = base + k;
			}
			continue;
		}
		uint64_t p = ibpi_cache_hash(ids[k]) & m;
		while (w->dkey[p] != KEY_EMPTY && w->dkey[p] != ids[k])
			p = (p + 1) & m;
		if (w->dkey[p] == KEY_EMPTY) {
			w->dkey[p] = ids[k];
			w->dval[p] = (uint32_t)nu;
			w->uid[nu] = ids[k];
			w->ufirst[nu] = k;
			w->ucnt[nu] = 0;
			nu++;
		}
		w->rep[k] = w->dval[p];
		w->ucnt[w->rep[k]]++;
	}
	for (uint64_t u = 0; u < nu; u++) { /* clear the table by its keys */
		uint64_t p = ibpi_cache_hash(w->uid[u]) & m;
		while (w->dkey[p] != w->uid[u])
			p = (p + 1) & m;
		w->dkey[p] = KEY_EMPTY;
	}
	return nu;
}

void ibpi_cache_pass_probe(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, int admit)
{
	/* 2. probe and pin (locked) */
	pthread_mutex_lock(&c->mu);
	for (uint64_t u = 0; u < nu; u++) {
		uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		uint64_t e = p == UINT64_MAX ? 0 : c->ix.vals[p];
		w->ustat[u] = IBP_OK;
		if (p != UINT64_MAX && ENT_STATE(e) == ENT_READY) {
			uint64_t g = ENT_SLAB(e) * c->spp + ENT_SLOT(e);
			w->ukind[u] = K_HIT;
			w->ug[u] = g;
			ibpi_cache_pin_slot(c, g);
			if (gather) {
				ibpi_cache_policy_hit(c, g);
				c->cls[ENT_CLASS(e)].hits += w->ucnt[u];
			}
		} else {
			w->ukind[u] = admit && (p == UINT64_MAX || ENT_STATE(e) == ENT_GHOST) ? K_ADMIT : K_MISS;
		}
	}
	pthread_mutex_unlock(&c->mu);
}

void ibpi_cache_pass_alloc(ibp_cache_t *c, cache_ws_t *w, uint64_t nu, int gather, cache_sink_t *sink)
{
	/* 4. allocate slots for the admitted misses (locked) */
	pthread_mutex_lock(&c->mu);
	c->sink = sink;
	ibpi_cache_targets(c);
	for (uint64_t u = 0; u < nu; u++) {
		if (w->ukind[u] != K_ADMIT)
			continue;
		w->ukind[u] = K_MISS;
		if (c->o.policy == IBP_CACHE_STATIC && gather) {
			c->st.rejected++; /* static: gathers never admit */
			continue;
		}
		if (w->ucls[u] == c->raw && (c->o.flags & IBP_CACHE_NO_RAW) && !(c->o.flags & IBP_CACHE_UNCOMPRESSED)) {
			c->st.rejected++;
			continue;
		}
		uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		int ghost = p != UINT64_MAX && ENT_STATE(c->ix.vals[p]) == ENT_GHOST;
		if (p != UINT64_MAX && !ghost)
			continue; /* another caller holds it: never a key twice */
		ibpi_cache_hist_add(c, w->ucls[u]);
		uint64_t g = ibpi_cache_alloc_slot(c, w->ucls[u]);
		if (g == UINT64_MAX) {
			c->st.rejected++;
			continue;
		}
		if (ghost) /* the ghost may have gone while evicting: look again */
			p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
		w->ucls[u] = c->scls[g / c->spp]; /* a borrowed slot: its slab's class */
		uint64_t e = ENT_MAKE(ENT_FILLING, w->ucls[u], w->uclen[u], g / c->spp, g % c->spp);
		if (p != UINT64_MAX) {
			c->ix.vals[p] = e;
		} else if (ibpi_cache_ix_insert(&c->ix, w->uid[u], e)) {
			ibpi_cache_slot_release(c, g); /* no memory to grow the index: not admitted */
			c->st.rejected++;
			continue;
		}
		c->sid[g] = w->uid[u];
		c->sflag[g] = SF_FILLING;
		c->slen[g] = (uint32_t)w->uclen[u];
		c->sfl[g] = w->ufl[u];
		c->sclu[g] = w->uclu[u];
		ibpi_cache_pin_slot(c, g);
		ibpi_cache_policy_insert(c, g, ghost);
		w->ug[u] = g;
		w->ukind[u] = K_ALLOC;
	}
	c->sink = NULL;
	pthread_mutex_unlock(&c->mu);
}

void ibpi_cache_pass_publish(ibp_cache_t *c, cache_ws_t *w, uint64_t n, uint64_t nu, int gather, uint64_t srows,
			uint64_t sbytes, uint64_t copied, uint64_t hit_bytes)
{
	/* 6. publish and unpin (locked) */
	pthread_mutex_lock(&c->mu);
	for (uint64_t u = 0; u < nu; u++) {
		uint64_t g = w->ug[u];
		w->ug[u] = UINT64_MAX;
		if (w->ukind[u] == K_FILLED || w->ukind[u] == K_BADFILL) {
			if (!(c->sflag[g] & SF_ZOMBIE)) {
				if (w->ukind[u] == K_FILLED) {
					uint64_t p = ibpi_cache_ix_find(&c->ix, w->uid[u]);
					cache_class_t *k = &c->cls[c->scls[g / c->spp]];
					c->sflag[g] &= (uint8_t)~SF_FILLING;
					c->ix.vals[p] = (c->ix.vals[p] & ~(3ull << 62)) | (ENT_READY << 62);
					c->st.insertions++;
					k->insertions++;
					c->st.rows_resident++;
					c->st.bytes_resident += c->slen[g];
					c->st.slot_bytes_used += k->slot_bytes;
					k->bytes_resident += c->slen[g];
				} else {
					ibpi_cache_drop_slot(c, g, 0); /* pinned: freed by the unpin below */
				}
			}
			ibpi_cache_unpin_slot(c, g);
		} else if (w->ukind[u] == K_HIT) {
			if (w->ustat[u] != IBP_OK && !(c->sflag[g] & SF_ZOMBIE)) {
				c->st.invalidations++; /* bad bytes in the cache: drop them */
				ibpi_cache_drop_slot(c, g, 0);
			}
			ibpi_cache_unpin_slot(c, g);
		}
	}
	c->st.store_rows += srows;
	c->st.store_bytes += sbytes;
	c->st.bytes_copied += copied;
	c->st.hit_bytes += hit_bytes;
	if (gather) {
		c->st.requests += n;
		for (uint64_t k = 0; k < n; k++)
			if (w->rep[k] != NIL) {
				if (w->ukind[w->rep[k]] == K_HIT)
					c->st.hits++;
				else
					c->st.misses++;
			}
	}
	pthread_mutex_unlock(&c->mu);
}
