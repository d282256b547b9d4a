/* container_rows.c - rows and blocks of an open container (a row's bytes
 * and metadata, the expanded index, the row map, block access and decode)
 * and the accessors. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ibp/codec.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/types.h"
#include "ibp/alloc.h"
#include "ibp/container.h"
#include "util/error.h"
#include "bitpack/codec_internal.h"
#include "exp/exp_format.h"
#include "fp8/fp8_impl.h"
#include "util/parallel.h"
#include "io/container_internal.h"
#include "io/container_format.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the container maps little-endian offset tables in place: little-endian hosts only"
#endif


/* ---- rows and blocks ----------------------------------------------------- */

/* Row `row` (< nrows) of an IBP container: extent, mode, cluster. With a
 * compact index the offset is the group's base plus the lengths of the
 * rows before it in the group (at most 2^group_shift - 1 entries). */
void ibpi_ctr_row_at(const ibp_container_t *c, uint64_t row, const uint8_t **src, uint64_t *len,
		   uint8_t *mode, unsigned *cl)
{
	if (c->ix) {
		uint64_t e = ix_entry(c, row);
		*mode = (uint8_t)(e & IBP_ROW_MODE_MASK);
		*cl = (unsigned)((e >> 2) & ((1u << c->ix_cb) - 1));
		if (!c->ix_base) {
			*src = c->payload + row * c->row_bytes;
			*len = c->row_bytes;
			return;
		}
		uint64_t g = row >> c->ix_gs, ref = ld32(c->ix_ref + 4 * g), off = ld64(c->ix_base + 8 * g);
		for (uint64_t j = g << c->ix_gs; j < row; j++)
			off += ix_len(c, ix_entry(c, j), ref);
		*src = c->payload + off;
		*len = ix_len(c, e, ref);
		return;
	}
	*mode = c->flags[row];
	*cl = c->clusters ? c->clusters[row] : 0;
	if (c->offsets) {
		*src = c->payload + c->offsets[row];
		*len = c->offsets[row + 1] - c->offsets[row];
	} else {
		*src = c->payload + row * c->row_bytes;
		*len = c->row_bytes;
	}
}

ibp_status_t ibp_container_row_meta(const ibp_container_t *c, uint64_t row, const uint8_t **src,
				    uint64_t *len, uint8_t *flags, unsigned *cluster)
{
	if (!c || !src || !len)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_row: NULL argument");
	if (c->codec_id != IBP_CODEC_IBP && c->codec_id != IBP_CODEC_EXP_ROWS)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: %s container: rows are encoded in blocks, not one "
				"by one", c->name, codec_name(c->codec_id));
	if (row >= c->nrows)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: row %llu >= %llu rows", c->name, (ull)row,
				(ull)c->nrows);
	if (c->codec_id == IBP_CODEC_EXP_ROWS) {
		/* the row's slot (its escapes may be in the overflow area) */
		*src = c->payload + row * c->xr.slot;
		*len = c->xr.slot;
		if (flags)
			*flags = 0;
		if (cluster)
			*cluster = 0;
		return IBP_OK;
	}
	uint8_t m;
	unsigned cl;
	const ibp_rowmap_t *map = atomic_load_explicit(&c->rowmap, memory_order_acquire);
	if (map)
		ibp_rowmap_get(map, row, src, len, &m, &cl);
	else
		ibpi_ctr_row_at(c, row, src, len, &m, &cl);
	if (flags)
		*flags = m;
	if (cluster)
		*cluster = cl;
	return IBP_OK;
}

ibp_status_t ibp_container_row(const ibp_container_t *c, uint64_t row, const uint8_t **src,
			       uint64_t *len)
{
	return ibp_container_row_meta(c, row, src, len, NULL, NULL);
}

ibp_status_t ibp_container_index_expand(const ibp_container_t *c, uint64_t *offsets, uint8_t *flags,
					uint8_t *clusters)
{
	if (!c || c->codec_id != IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_index_expand: NULL or not an IBP container");
	if (offsets && c->layout != IBP_LAYOUT_PACKED)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the inplace layout has no row offsets", c->name);
	uint64_t off = 0;
	for (uint64_t i = 0; i < c->nrows; i++) {
		const uint8_t *src;
		uint64_t len;
		uint8_t m;
		unsigned cl;
		if (c->ix && c->ix_base && (i & ((1ull << c->ix_gs) - 1)) == 0)
			off = ld64(c->ix_base + 8 * (i >> c->ix_gs));
		if (c->ix && c->ix_base) {
			/* sequential: one entry per row, not a group prefix each */
			uint64_t e = ix_entry(c, i);
			m = (uint8_t)(e & IBP_ROW_MODE_MASK);
			cl = (unsigned)((e >> 2) & ((1u << c->ix_cb) - 1));
			len = ix_len(c, e, ld32(c->ix_ref + 4 * (i >> c->ix_gs)));
			src = c->payload + off;
		} else {
			ibpi_ctr_row_at(c, i, &src, &len, &m, &cl);
		}
		if (offsets)
			offsets[i] = (uint64_t)(src - c->payload);
		if (flags)
			flags[i] = m;
		if (clusters)
			clusters[i] = (uint8_t)cl;
		off += len;
	}
	if (offsets)
		offsets[c->nrows] = c->payload_len;
	return IBP_OK;
}

/* ---- the row map (container_internal.h) ---- */

ibp_status_t ibpi_container_rowmap(const ibp_container_t *c, uint64_t max_bytes, const ibp_rowmap_t **out)
{
	if (!c || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibpi_container_rowmap: NULL argument");
	*out = NULL;
	if (c->codec_id != IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: %s container has no rows to map", c->name,
				codec_name(c->codec_id));
	ibp_container_t *mc = (ibp_container_t *)(uintptr_t)c;
	void *have = atomic_load_explicit(&mc->rowmap, memory_order_acquire);
	if (have) {
		*out = have;
		return IBP_OK;
	}
	const uint64_t n = c->nrows, G = 1ull << IBP_ROWMAP_GROUP_SHIFT;
	const unsigned sh = 2 + bitlen64(c->nclusters - 1); /* <= 8: at most 64 clusters */
	const uint64_t omax = (1ull << (32 - sh)) - 1;      /* largest offset a record holds */
	if (c->row_bytes > omax / G)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: rows of %llu bytes are too long for the row map",
				c->name, (ull)c->row_bytes);
	/* n < 2^62 (the index holds >= 2 bits per row of a file < 2^63 bytes) */
	const uint64_t ng = n / G + (n % G != 0);
	const uint64_t hdr = (sizeof(ibp_rowmap_t) + 63) & ~63ull;
	const uint64_t nb = 8 * (ng + 1), nr = 4 * (uint64_t)IBP_ROWMAP_STRIDE * ng;
	const uint64_t bytes = (hdr + nb + nr + 63) & ~63ull;
	if (ng > UINT64_MAX / 512 || bytes > max_bytes || bytes > SIZE_MAX)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: a row map of %llu rows exceeds %llu bytes", c->name,
				(ull)n, (ull)max_bytes);
	/* A large map on 2 MiB boundaries with huge pages advised, as the
	 * payload: every random row reads a record of it, and with 4 KiB pages
	 * each such read missed the TLB (about 7% of a random gather of 64-float
	 * rows from 2 GB, 2026-11-28). */
	const uint64_t H = 2u << 20, align = bytes >= 2 * H ? H : 64;
	uint8_t *mem = aligned_alloc((size_t)align, (size_t)((bytes + align - 1) / align * align));
	if (!mem)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: no memory for a row map of %llu bytes", c->name, (ull)bytes);
	if (align == H)
		advise_huge(mem, bytes);
	ibp_rowmap_t *m = (ibp_rowmap_t *)(void *)mem;
	uint64_t *base = (uint64_t *)(void *)(mem + hdr);
	uint32_t *rec = (uint32_t *)(void *)(mem + hdr + nb);
	memset(rec, 0, (size_t)nr);
	/* one pass in row order; a packed compact index is read entry by entry
	 * (rows are contiguous from 0), everything else by ibpi_ctr_row_at (O(1)) */
	const int seq = c->ix && c->ix_base;
	uint64_t at = 0;
	for (uint64_t g = 0; g < ng; g++) {
		const uint64_t first = g * G, cnt = n - first < G ? n - first : G;
		uint32_t *r = rec + g * IBP_ROWMAP_STRIDE;
		uint64_t end = 0;
		for (uint64_t k = 0; k < cnt; k++) {
			const uint64_t i = first + k;
			const uint8_t *src;
			uint64_t len;
			uint8_t mode;
			unsigned cl;
			if (seq) {
				uint64_t e = ix_entry(c, i);
				mode = (uint8_t)(e & IBP_ROW_MODE_MASK);
				cl = (unsigned)((e >> 2) & ((1u << c->ix_cb) - 1));
				len = ix_len(c, e, ld32(c->ix_ref + 4 * (i >> c->ix_gs)));
				src = c->payload + at;
				at += len;
			} else {
				ibpi_ctr_row_at(c, i, &src, &len, &mode, &cl);
			}
			const uint64_t off = (uint64_t)(src - c->payload);
			if (k == 0)
				base[g] = off;
			/* validated at open; checked again so a map can never point out:
			 * rows of a group are contiguous, inside it and the payload */
			if (off < base[g] || off - base[g] != end || off - base[g] > omax - len ||
			    len > c->row_bytes || off + len > c->payload_len) {
				free(mem);
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: extent %llu + %llu is not where its "
						"group's rows end or outside the payload", c->name, (ull)i, (ull)off,
						(ull)len);
			}
			r[k] = (uint32_t)((off - base[g]) << sh | (uint64_t)cl << 2 | mode);
			end = off - base[g] + len;
		}
		r[cnt] = (uint32_t)(end << sh);
	}
	base[ng] = c->payload_len;
	*m = (ibp_rowmap_t){ c->payload, base, rec, sh, (1u << (sh - 2)) - 1, bytes };
	void *expect = NULL;
	if (!atomic_compare_exchange_strong_explicit(&mc->rowmap, &expect, (void *)m, memory_order_acq_rel,
						     memory_order_acquire)) {
		free(mem);
		*out = expect;
		return IBP_OK;
	}
	*out = m;
	return IBP_OK;
}

/* The expanded row arrays of a compact index, made on first use by the
 * 1.1-style accessors and kept until close (racing callers: one wins). */
typedef struct legacy {
	uint64_t *offsets;
	uint8_t *flags, *clusters;
} legacy_t;

static const legacy_t *legacy_arrays(const ibp_container_t *c)
{
	ibp_container_t *mc = (ibp_container_t *)(uintptr_t)c;
	void *have = atomic_load(&mc->legacy);
	if (have || c->codec_id != IBP_CODEC_IBP)
		return have;
	uint64_t n = c->nrows, noff = c->layout == IBP_LAYOUT_PACKED ? n + 1 : 0;
	uint64_t ncl = c->nclusters > 1 ? n : 0;
	legacy_t *L = malloc(sizeof(*L) + (size_t)(8 * noff + n + ncl));
	if (!L)
		return NULL;
	uint8_t *p = (uint8_t *)(L + 1);
	L->offsets = noff ? (uint64_t *)(void *)p : NULL;
	L->flags = p + 8 * noff;
	L->clusters = c->nclusters > 1 ? p + 8 * noff + n : NULL; /* non-NULL even for 0 rows, as in 1.1 */
	ibp_container_index_expand(c, L->offsets, L->flags, L->clusters);
	void *expect = NULL;
	if (!atomic_compare_exchange_strong(&mc->legacy, &expect, (void *)L)) {
		free(L);
		return expect;
	}
	return L;
}

ibp_status_t ibp_container_block(const ibp_container_t *c, uint64_t block, const uint8_t **src,
				 uint64_t *len)
{
	if (c->codec_id == IBP_CODEC_IBP || c->codec_id == IBP_CODEC_EXP_ROWS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: an %s container has rows, not blocks", c->name,
				codec_name(c->codec_id));
	if (block >= c->nblk)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: block %llu >= %llu blocks", c->name, (ull)block,
				(ull)c->nblk);
	if (c->blk_off) {
		*src = c->payload + c->blk_off[block];
		*len = c->blk_off[block + 1] - c->blk_off[block];
	} else {
		*src = c->payload + block * c->stride;
		*len = block + 1 < c->nblk ? c->stride : c->payload_len - block * c->stride;
	}
	return IBP_OK;
}

/* Elements of block b (the last one may be short). */
static uint64_t block_elems(const ibp_container_t *c, uint64_t b)
{
	uint64_t first = b * c->chunk_elems;
	return c->elems - first < c->chunk_elems ? c->elems - first : c->chunk_elems;
}

/* Decodes block b; on failure the detail is the codec's (no file name). */
ibp_status_t ibpi_ctr_decode_block(const ibp_container_t *c, uint64_t b, void *dst, int nthreads)
{
	const uint8_t *src;
	uint64_t len, n = block_elems(c, b);
	IBP_TRY(ibp_container_block(c, b, &src, &len));
	if (c->codec_id == IBP_CODEC_EXP) {
		/* the block must fill its extent, as a packed IBP row does */
		ibp_exp_info_t info;
		IBP_TRY(ibp_exp_block_info(src, len, &info));
		if (info.block_bytes != len || info.n != n || info.dtype != c->dtype)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp block holds %llu %s elements in %llu bytes, its "
					"extent is %llu elements of %s in %llu bytes", (ull)info.n,
					ibp_dtype_name(info.dtype), (ull)info.block_bytes, (ull)n,
					ibp_dtype_name(c->dtype), (ull)len);
		return ibp_exp_decode(src, len, c->dtype, n, dst, nthreads);
	}
	/* fp8: the stream header must repeat the container's parameters */
	ibp_fp8_info_t info;
	IBP_TRY(ibp_fp8_stream_info(src, len, &info));
	if (info.n != n || info.bytes != len || info.format != c->fp8.format || info.block != c->fp8.block ||
	    info.hadamard != c->fp8.hadamard || info.adaptive != c->fp8.adaptive)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream (%llu elements, %llu bytes, format %u, block %u, "
				"flags %d%d) disagrees with the container (%llu, %llu, %u, %u, %d%d)", (ull)info.n,
				(ull)info.bytes, (unsigned)info.format, info.block, info.hadamard, info.adaptive,
				(ull)n, (ull)len, (unsigned)c->fp8.format, c->fp8.block, c->fp8.hadamard,
				c->fp8.adaptive);
	return ibp_fp8_decode(src, len, c->dtype, n, dst, nthreads);
}

ibp_status_t ibp_container_decode_block(const ibp_container_t *c, uint64_t block, void *dst,
					int nthreads)
{
	if (!c || (!dst && block < c->nblk) || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_decode_block: NULL argument or nthreads < 0");
	if (c->codec_id == IBP_CODEC_IBP || c->codec_id == IBP_CODEC_EXP_ROWS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: an %s container has rows, not blocks", c->name,
				codec_name(c->codec_id));
	if (block >= c->nblk)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: block %llu >= %llu blocks", c->name, (ull)block,
				(ull)c->nblk);
	ibp_status_t st = ibpi_ctr_decode_block(c, block, dst, nthreads);
	if (st != IBP_OK) {
		char why[256];
		save_error(why, sizeof(why));
		return ibpi_fail(st, "%s: block %llu (rows %llu..): %s", c->name, (ull)block,
				(ull)(block * c->block_rows), why);
	}
	return IBP_OK;
}

ibp_status_t ibp_container_decode_row(const ibp_container_t *c, uint64_t row, void *dst)
{
	if (c->codec_id == IBP_CODEC_EXP_ROWS) {
		if (row >= c->nrows)
			return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: row %llu >= %llu rows", c->name, (ull)row,
					(ull)c->nrows);
		ibp_status_t st = ibpi_exprows_decode_slot(&c->xr, ibpi_exprows_isa(), c->payload + row * c->xr.slot,
							   c->xovf, c->xovf_len, dst);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			return ibpi_fail(st, "%s: row %llu: %s", c->name, (ull)row, why);
		}
		return IBP_OK;
	}
	if (c->codec_id != IBP_CODEC_IBP) {
		if (row >= c->nrows)
			return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: row %llu >= %llu rows", c->name, (ull)row,
					(ull)c->nrows);
		uint64_t b = row / c->block_rows, first = b * c->block_rows;
		uint64_t rows = c->nrows - first < c->block_rows ? c->nrows - first : c->block_rows;
		uint8_t *tmp = ibp_host_alloc(rows * c->row_bytes, 0);
		if (!tmp)
			return ibpi_fail(IBP_ERR_NOMEM, "%s: no memory to decode block %llu", c->name, (ull)b);
		ibp_status_t st = ibp_container_decode_block(c, b, tmp, 1);
		if (st == IBP_OK)
			memcpy(dst, tmp + (row - first) * c->row_bytes, (size_t)c->row_bytes);
		ibp_host_free(tmp);
		return st;
	}
	const uint8_t *src;
	uint64_t len;
	uint8_t mode;
	unsigned cl;
	IBP_TRY(ibp_container_row_meta(c, row, &src, &len, &mode, &cl));
	ibp_status_t st = ibp_decode_row(c->codec, src, len, mode, cl, dst);
	if (st != IBP_OK) {
		char why[256];
		save_error(why, sizeof(why));
		return ibpi_fail(st, "%s: row %llu: %s", c->name, (ull)row, why);
	}
	return IBP_OK;
}


/* ---- accessors ---------------------------------------------------------- */

uint64_t ibp_container_nrows(const ibp_container_t *c) { return c->nrows; }
uint64_t ibp_container_row_bytes(const ibp_container_t *c) { return c->row_bytes; }
ibp_dtype_t ibp_container_dtype(const ibp_container_t *c) { return c->dtype; }
unsigned ibp_container_ndim(const ibp_container_t *c) { return c->ndim; }
const uint64_t *ibp_container_shape(const ibp_container_t *c) { return c->shape; }
ibp_layout_t ibp_container_layout(const ibp_container_t *c) { return c->layout; }
ibp_codec_id_t ibp_container_codec_id(const ibp_container_t *c) { return c->codec_id; }
unsigned ibp_container_chunk_bytes(const ibp_container_t *c) { return c->chunk_bytes; }
const ibp_codec_t *ibp_container_codec(const ibp_container_t *c) { return c->codec; }
double ibp_container_threshold(const ibp_container_t *c) { return c->threshold; }
unsigned ibp_container_version_major(const ibp_container_t *c) { return c->major; }
unsigned ibp_container_version_minor(const ibp_container_t *c) { return c->minor; }
uint64_t ibp_container_file_bytes(const ibp_container_t *c) { return c->size; }
const char *ibp_container_name(const ibp_container_t *c) { return c->name; }

const uint8_t *ibp_container_image(const ibp_container_t *c, uint64_t *size)
{
	if (size)
		*size = c->size;
	return c->base;
}
/* 1.2 files keep a compact index: these arrays are expanded on first use */
const uint64_t *ibp_container_offsets(const ibp_container_t *c)
{
	const legacy_t *L = c->ix ? legacy_arrays(c) : NULL;
	return c->ix ? (L ? L->offsets : NULL) : c->offsets;
}

const uint8_t *ibp_container_flags(const ibp_container_t *c)
{
	const legacy_t *L = c->ix ? legacy_arrays(c) : NULL;
	return c->ix ? (L ? L->flags : NULL) : c->flags;
}

const uint8_t *ibp_container_clusters(const ibp_container_t *c)
{
	const legacy_t *L = c->ix && c->nclusters > 1 ? legacy_arrays(c) : NULL;
	return c->ix ? (L ? L->clusters : NULL) : c->clusters;
}

int ibp_container_compact_index(const ibp_container_t *c) { return c->ix != NULL; }

int ibp_container_lossy(const ibp_container_t *c) { return c->codec_id == IBP_CODEC_FP8; }
uint64_t ibp_container_nblocks(const ibp_container_t *c) { return c->nblk; }
uint64_t ibp_container_chunk_elems(const ibp_container_t *c) { return c->chunk_elems; }
uint64_t ibp_container_block_rows(const ibp_container_t *c) { return c->block_rows; }
const uint64_t *ibp_container_block_offsets(const ibp_container_t *c) { return c->blk_off; }
ibp_exp_table_mode_t ibp_container_exp_table_mode(const ibp_container_t *c) { return c->exp_table; }

ibp_status_t ibp_container_fp8_opts(const ibp_container_t *c, ibp_fp8_opts_t *o)
{
	if (!c || !o || c->codec_id != IBP_CODEC_FP8)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_fp8_opts: NULL argument or not an fp8 container");
	*o = c->fp8;
	return IBP_OK;
}

const uint8_t *ibp_container_payload(const ibp_container_t *c, uint64_t *len)
{
	if (len)
		*len = c->payload_len;
	return c->payload;
}


const struct ibpi_exprows *ibpi_container_exprows(const ibp_container_t *c)
{
	return c->codec_id == IBP_CODEC_EXP_ROWS ? &c->xr : NULL;
}

const uint8_t *ibpi_container_exprows_overflow(const ibp_container_t *c, uint64_t *len)
{
	const int xr = c->codec_id == IBP_CODEC_EXP_ROWS;
	*len = xr ? c->xovf_len : 0;
	return xr ? c->xovf : NULL;
}
