/* slab_batch.c - CPU twins of the slab cache's device steps
 * (slab_batch.h; kernels/slab_cache.cu): the same probes, claims, copies
 * and counts on a table of host memory, one request after another. */
#include <string.h>

#include "slab_batch.h"
#include "util/error.h"

/* Position of `id` past tombstones up to the first empty key, or UINT64_MAX. */
static uint64_t find(const ibp_slab_table_t *t, int64_t id)
{
	uint64_t m = t->cap - 1;
	for (uint64_t p = ibp_slab_hash(id) & m, i = 0; i < t->cap; p = (p + 1) & m, i++) {
		if (t->keys[p] == id)
			return p;
		if (t->keys[p] == IBP_SLAB_KEY_EMPTY)
			return UINT64_MAX;
	}
	return UINT64_MAX;
}

static ibp_status_t check(const ibp_slab_table_t *t, const void *a, uint64_t n, const char *fn)
{
	if (!t || (n && !a))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL %s", fn, t ? "array" : "table");
	if (!t->cap || (t->cap & (t->cap - 1)) || !t->keys || !t->vals)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the table has no index of a power-of-two size", fn);
	return IBP_OK;
}

ibp_status_t ibpi_slab_probe(const ibp_slab_table_t *t, const int64_t *ids, uint64_t n, uint64_t *ent, int pin)
{
	IBP_TRY(check(t, ids, n, "ibpi_slab_probe"));
	if (n && !ent)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_slab_probe: NULL ent");
	for (uint64_t k = 0; k < n; k++) {
		uint64_t p = ids[k] < 0 ? UINT64_MAX : find(t, ids[k]);
		uint64_t e = p == UINT64_MAX ? 0 : t->vals[p];
		if (IBP_SLAB_STATE(e) != IBP_SLAB_READY)
			e = 0;
		else if (pin)
			t->pin[ibp_slab_slot(t, e)]++;
		ent[k] = e;
	}
	return IBP_OK;
}

ibp_status_t ibpi_slab_erase(const ibp_slab_table_t *t, const int64_t *keys, uint64_t n, unsigned long long *nerased)
{
	IBP_TRY(check(t, keys, n, "ibpi_slab_erase"));
	for (uint64_t k = 0; k < n; k++) {
		uint64_t p = keys[k] < 0 ? UINT64_MAX : find(t, keys[k]);
		if (p == UINT64_MAX)
			continue;
		t->keys[p] = IBP_SLAB_KEY_TOMB;
		if (nerased)
			++*nerased;
	}
	return IBP_OK;
}

ibp_status_t ibpi_slab_insert(const ibp_slab_table_t *t, const ibp_slab_insert_op_t *ops, uint64_t n,
			     unsigned long long *nfull)
{
	IBP_TRY(check(t, ops, n, "ibpi_slab_insert"));
	uint64_t m = t->cap - 1;
	for (uint64_t k = 0; k < n; k++) {
		const ibp_slab_insert_op_t *o = &ops[k];
		uint64_t p = ibp_slab_hash(o->key) & m, i = 0;
		for (; i < t->cap && t->keys[p] >= 0; i++) /* the first empty or tombstoned position */
			p = (p + 1) & m;
		if (i == t->cap) {
			if (nfull)
				++*nfull;
			continue;
		}
		/* the kernel's order: claimed, bytes, entry, key */
		t->keys[p] = IBP_SLAB_KEY_CLAIMED;
		uint64_t len = IBP_SLAB_LEN(o->entry);
		if (len)
			memcpy(ibp_slab_addr(t, o->entry), o->src, len);
		t->meta[ibp_slab_slot(t, o->entry)] = (uint16_t)o->meta;
		t->vals[p] = (o->entry & ~(3ull << 62)) | (IBP_SLAB_READY << 62);
		t->keys[p] = o->key;
	}
	return IBP_OK;
}

ibp_status_t ibpi_slab_gather(const ibp_slab_table_t *t, const uint64_t *ent, uint64_t n, uint8_t *stage,
			     uint64_t stride, uint32_t *len, uint32_t *meta, int unpin)
{
	IBP_TRY(check(t, ent, n, "ibpi_slab_gather"));
	if (n && (!stage || !len || !meta))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_slab_gather: NULL output");
	for (uint64_t k = 0; k < n; k++) {
		uint64_t e = ent[k];
		if (IBP_SLAB_STATE(e) != IBP_SLAB_READY) {
			len[k] = meta[k] = 0;
			continue;
		}
		uint64_t g = ibp_slab_slot(t, e), l = IBP_SLAB_LEN(e);
		if (l)
			memcpy(stage + k * stride, ibp_slab_addr(t, e), l < stride ? l : stride); /* never past its row */
		len[k] = (uint32_t)l;
		meta[k] = t->meta[g];
		if (unpin)
			t->pin[g]--;
	}
	return IBP_OK;
}
