/* ibp_cuda_host.c - host-side parts of the GPU API that both builds need:
 * store descriptor checks, codec copies and the fallback store kept in
 * ordinary host memory when no GPU can be used (see ibp_cuda_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "ibp/codec.h"
#include "ibp/alloc.h"
#include "ibp/cuda.h"
#include "bitpack/codec_internal.h"
#include "util/error.h"
#include "cuda/ibp_cuda_internal.h"

ibp_status_t ibpi_cuda_desc_check(const ibp_cuda_store_desc_t *d)
{
	if (!d || !d->codec)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: NULL descriptor or codec");
	if (d->nrows >= UINT64_MAX / 8 - 1)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: %llu rows is too many",
				(unsigned long long)d->nrows);
	if (d->nrows && !d->flags)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: NULL flags");
	if (!d->payload && d->payload_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: NULL payload of %llu bytes",
				(unsigned long long)d->payload_bytes);
	if ((unsigned)d->payload_kind > (unsigned)IBP_CUDA_PAYLOAD_REGISTER)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: unknown payload kind %d",
				(int)d->payload_kind);
	if (d->codec->K > 1 && d->nrows && !d->clusters)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "cuda store: %u clusters need cluster ids",
				d->codec->K);
	const uint64_t *o = d->offsets;
	if (!o) {
		/* inplace: row i at i * row_bytes */
		const uint64_t R = d->codec->R;
		if (d->nrows > UINT64_MAX / R || d->nrows * R > d->payload_bytes)
			return ibpi_fail(IBP_ERR_CORRUPT,
					"cuda store: %llu inplace rows of %llu bytes, payload of %llu",
					(unsigned long long)d->nrows, (unsigned long long)R,
					(unsigned long long)d->payload_bytes);
		return IBP_OK;
	}
	if (o[0] != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "cuda store: offsets[0] = %llu, not 0",
				(unsigned long long)o[0]);
	for (uint64_t i = 0; i < d->nrows; i++)
		if (o[i + 1] < o[i])
			return ibpi_fail(IBP_ERR_CORRUPT, "cuda store: offsets decrease at row %llu",
					(unsigned long long)i);
	if (o[d->nrows] > d->payload_bytes)
		return ibpi_fail(IBP_ERR_CORRUPT, "cuda store: rows end at %llu, past %llu payload bytes",
				(unsigned long long)o[d->nrows], (unsigned long long)d->payload_bytes);
	return IBP_OK;
}

ibp_status_t ibpi_cuda_codec_clone(const ibp_codec_t *c, ibp_codec_t **out)
{
	if (!c || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "codec clone: NULL argument");
	ibp_status_t st = ibp_codec_create_ex(c->R, c->C, c->K, ibp_codec_mask(c, 0),
					      ibp_codec_bitval(c, 0), ibp_codec_xval(c, 0), out);
	if (st == IBP_OK)
		ibpi_codec_set_threshold(*out, c->threshold);
	return st;
}

uint64_t ibpi_cuda_max_extent(const ibp_codec_t *c)
{
	uint64_t body = c->C * c->D + (c->D + 7) / 8; /* S + E <= (W + 1) * D bits (hit bits) */
	uint64_t list = ((uint64_t)c->L * (c->D + 1) + 7) / 8;
	uint64_t hdr = list > c->bitmap_bytes ? list : c->bitmap_bytes;
	uint64_t m = hdr + body;
	return m > c->R ? m : c->R;
}

void ibpi_hstore_free(ibp_hstore_t *h)
{
	if (!h)
		return;
	ibp_codec_free(h->codec);
	ibp_host_free(h->payload_owned);
	free(h->offsets);
	free(h->flags);
	free(h->clusters);
	free(h);
}

ibp_status_t ibpi_hstore_create(const ibp_cuda_store_desc_t *d, ibp_hstore_t **out)
{
	*out = NULL;
	if (d->payload_kind == IBP_CUDA_PAYLOAD_DEVICE)
		return ibpi_fail(IBP_ERR_NO_DEVICE,
				"cuda store: no usable GPU, and a device-memory payload cannot fall back "
				"to host memory");
	ibp_hstore_t *h = calloc(1, sizeof(*h));
	if (!h)
		return ibpi_fail(IBP_ERR_NOMEM, "cuda store: out of memory");
	const uint64_t n = d->nrows;
	ibp_status_t st = ibpi_cuda_codec_clone(d->codec, &h->codec);
	if (st != IBP_OK)
		goto fail;
	h->nrows = n;
	h->row_bytes = d->codec->R;
	h->payload_bytes = d->payload_bytes;
	if (d->offsets)
		h->offsets = malloc((n + 1) * sizeof(uint64_t));
	h->flags = malloc(n ? n : 1);
	if (d->clusters)
		h->clusters = malloc(n ? n : 1);
	if ((d->offsets && !h->offsets) || !h->flags || (d->clusters && !h->clusters)) {
		st = ibpi_fail(IBP_ERR_NOMEM, "cuda store: out of memory for %llu rows",
			      (unsigned long long)n);
		goto fail;
	}
	if (d->offsets)
		memcpy(h->offsets, d->offsets, (n + 1) * sizeof(uint64_t));
	if (n)
		memcpy(h->flags, d->flags, n);
	if (d->clusters && n)
		memcpy(h->clusters, d->clusters, n);
	if (d->payload_kind == IBP_CUDA_PAYLOAD_COPY_PINNED ||
	    d->payload_kind == IBP_CUDA_PAYLOAD_COPY_DEVICE) {
		h->payload_owned = ibp_host_alloc(d->payload_bytes, 0);
		if (!h->payload_owned) {
			st = IBP_ERR_NOMEM;
			goto fail;
		}
		if (d->payload_bytes)
			memcpy(h->payload_owned, d->payload, d->payload_bytes);
		h->payload = h->payload_owned;
	} else {
		h->payload = d->payload;
	}
	*out = h;
	return IBP_OK;
fail:
	ibpi_hstore_free(h);
	return st;
}

ibp_status_t ibpi_hstore_gather(ibp_hstore_t *h, const int64_t *ids, uint64_t n, void *out,
			       const int64_t *out_rows, int32_t *status)
{
	if (n && (!ids || !out))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_cuda: NULL ids or out");
	const uint64_t R = h->row_bytes;
	static const uint8_t none[1];
	for (uint64_t k = 0; k < n; k++) {
		int64_t orow = out_rows ? out_rows[k] : (int64_t)k;
		ibp_status_t st = IBP_OK;
		if (orow < 0) {
			st = IBP_ERR_INVALID_ARG;
		} else {
			uint8_t *dst = (uint8_t *)out + (uint64_t)orow * R;
			int64_t id = ids[k];
			if (id < 0 || (uint64_t)id >= h->nrows) {
				st = IBP_ERR_OUT_OF_RANGE;
			} else {
				/* packed rows must fill their extent; inplace rows may end early */
				uint64_t o = h->offsets ? h->offsets[id] : (uint64_t)id * R;
				uint64_t len = h->offsets ? h->offsets[id + 1] - o : R, ext = 0;
				unsigned cl = h->clusters ? h->clusters[id] : 0;
				st = ibpi_decode_row_ext(h->codec, h->payload ? h->payload + o : none, len,
							h->flags[id], cl, dst, &ext);
				if (st == IBP_OK && h->offsets && ext != len)
					st = IBP_ERR_CORRUPT;
			}
			if (st != IBP_OK)
				memset(dst, 0, R);
		}
		if (status)
			status[k] = (int32_t)st;
		if (st != IBP_OK)
			h->nerr++;
	}
	return IBP_OK;
}

ibp_status_t ibpi_staged_check(uint64_t stride, uint64_t nstage, const void *stage, const uint32_t *lens,
			      const uint32_t *meta, uint64_t n, const void *out)
{
	if (!stride || (nstage && stride > UINT64_MAX / nstage))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_staged_cuda: stride %llu for %llu stage rows",
				(unsigned long long)stride, (unsigned long long)nstage);
	if (n && (!out || (nstage && (!stage || !lens || !meta))))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "gather_staged_cuda: NULL stage, lens, meta or out");
	return IBP_OK;
}

ibp_status_t ibpi_hstore_gather_staged(const ibp_hstore_t *h, const uint8_t *stage, uint64_t stride, uint64_t nstage,
				      const uint32_t *lens, const uint32_t *meta, const int64_t *idx, uint64_t n,
				      void *out, const int64_t *out_rows, int32_t *status)
{
	IBP_TRY(ibpi_staged_check(stride, nstage, stage, lens, meta, n, out));
	const uint64_t R = h->row_bytes;
	for (uint64_t k = 0; k < n; k++) {
		int64_t orow = out_rows ? out_rows[k] : (int64_t)k;
		int64_t r = idx ? idx[k] : (int64_t)k;
		ibp_status_t st = IBP_OK;
		if (orow < 0) {
			st = IBP_ERR_INVALID_ARG;
		} else {
			uint8_t *dst = (uint8_t *)out + (uint64_t)orow * R;
			if (r < 0 || (uint64_t)r >= nstage) {
				st = IBP_ERR_OUT_OF_RANGE;
			} else {
				uint64_t len = lens[r], ext = 0;
				uint32_t m = meta[r];
				if (len > stride)
					st = IBP_ERR_CORRUPT;
				else
					st = ibpi_decode_row_ext(h->codec, stage + (uint64_t)r * stride, len, m & 0xFF,
								(m >> 8) & 0xFF, dst, &ext);
				if (st == IBP_OK && ext != len)
					st = IBP_ERR_CORRUPT;
				if (st != IBP_OK)
					st = IBP_ERR_CORRUPT;
			}
			if (st != IBP_OK)
				memset(dst, 0, R);
		}
		if (status)
			status[k] = (int32_t)st;
	}
	return IBP_OK;
}

int ibpi_hstore_row_info(const ibp_hstore_t *h, uint64_t id, uint64_t *off, uint64_t *len, uint8_t *flags, uint8_t *cl)
{
	if (!h->offsets || id >= h->nrows)
		return 0;
	*off = h->offsets[id];
	*len = h->offsets[id + 1] - h->offsets[id];
	*flags = h->flags[id];
	*cl = h->clusters ? h->clusters[id] : 0;
	return 1;
}
