/* container_read.c - the `.ibp` container's validating reader: open (a
 * file, mapped, or memory), the header, the section table and every
 * section parsed. docs/FORMAT.md section 2 is the specification. The reader
 * treats every byte as hostile: all sizes are checked with overflow-safe
 * arithmetic before any pointer is formed, so that after ibp_container_open
 * no accessor can reach outside the file. Three codecs share the frame
 * (header, section table, payload and its checksums): IBP rows (META,
 * XVALS, FLAGS, CLUSTERS, OFFSETS or INDEX), exponent codec blocks (OFFSETS
 * = block offsets) and FP8 streams (fixed stride, no further section). */
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


/* ---- reader ------------------------------------------------------------- */

typedef struct sec {
	uint32_t id, flags;
	uint64_t off, len, sum;
	int present;
} sec_t;

static ibp_status_t check_sum(const ibp_container_t *c, const sec_t *s)
{
	uint64_t h = XXH3_64bits(c->base + s->off, (size_t)s->len);
	if (h != s->sum)
		return ibpi_fail(IBP_ERR_CHECKSUM,
				"%s: %s section (offset %llu, %llu bytes): checksum %016llx, table says %016llx",
				c->name, SEC_NAME[s->id], (ull)s->off, (ull)s->len, (ull)h, (ull)s->sum);
	return IBP_OK;
}


/* codec_params of the exp and fp8 codecs (the header's dtype and shape are
 * already checked). */
static ibp_status_t parse_value_params(ibp_container_t *c)
{
	const uint8_t *p = c->base + H_CODEC_PARAMS;
	const char *cn = codec_name(c->codec_id);
	if (c->layout != IBP_LAYOUT_PACKED)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: the %s codec uses the packed layout only", c->name, cn);
	if (c->chunk_bytes != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: chunk size %u, the %s codec has none (0)", c->name,
				c->chunk_bytes, cn);
	if (!value_dtype(c->dtype))
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: the %s codec does not take dtype %s", c->name, cn,
				ibp_dtype_name(c->dtype));
	uint32_t ver = ld32(p + P_VERSION);
	if (ver != PARAMS_VERSION)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: %s codec parameters version %u, this library reads %u",
				c->name, cn, (unsigned)ver, PARAMS_VERSION);
	uint64_t want_blocks, used;
	if (c->codec_id == IBP_CODEC_EXP_ROWS) {
		/* one table for the tensor; no blocks */
		ibp_status_t st = ibpi_exprows_init(&c->xr, c->dtype, c->row_bytes, p + P_EXPR_TABLE, 1);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			return ibpi_fail(st, "%s: %s", c->name, why);
		}
		if (c->minor <= IBP_FORMAT_MINOR && (!all_zero(p + P_EXPR_TABLE + EXPR_NCODES, P_EXPR_SLOT -
							   P_EXPR_TABLE - EXPR_NCODES) ||
						     !all_zero(p + P_EXPR_USED, H_CODEC_PARAMS_LEN - P_EXPR_USED)))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: reserved %s codec parameter bytes are not zero", c->name,
					cn);
		if (ld64(p + P_EXPR_SLOT) == 0) /* the first version's layout: rows behind u64 offsets */
			return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: exp rows in the row-offset layout of libibp before "
					"2026-12-02, which this library no longer reads (rows are in slots since): pack "
					"it again (ibp pack --codec exp-rows)", c->name);
		st = ibpi_exprows_set_slot(&c->xr, ld64(p + P_EXPR_SLOT), 1);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			return ibpi_fail(st, "%s: %s", c->name, why);
		}
		return IBP_OK;
	}
	if (c->codec_id == IBP_CODEC_EXP) {
		uint32_t tm = ld32(p + P_EXP_TABLE);
		if (tm > IBP_EXP_TABLE_RANS)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: exp table mode %u is not 0, 1, 2 or 3", c->name,
					(unsigned)tm);
		c->exp_table = (ibp_exp_table_mode_t)tm;
		c->chunk_elems = ld64(p + P_EXP_CHUNK);
		want_blocks = ld64(p + P_EXP_NBLOCKS);
		used = P_EXP_USED;
	} else {
		uint32_t fmt = ld32(p + P_FP8_FORMAT), B = ld32(p + P_FP8_BLOCK), fl = ld32(p + P_FP8_FLAGS);
		if (fmt > IBP_FP8_E5M2)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: fp8 format %u is not 0 (E4M3) or 1 (E5M2)",
					c->name, (unsigned)fmt);
		if (B < IBP_FP8_MIN_BLOCK || B > IBP_FP8_MAX_BLOCK || (B & (B - 1)) != 0)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: fp8 block size %u is not a power of two in "
					"[16, 4096]", c->name, (unsigned)B);
		if (fl & ~(FP8_F_HADAMARD | FP8_F_ADAPTIVE))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: fp8 flags 0x%x have unknown bits", c->name,
					(unsigned)fl);
		ibp_fp8_opts_default(&c->fp8);
		c->fp8.format = (ibp_fp8_format_t)fmt;
		c->fp8.block = B;
		c->fp8.hadamard = (fl & FP8_F_HADAMARD) != 0;
		c->fp8.adaptive = (fl & FP8_F_ADAPTIVE) != 0;
		c->fp8.nthreads = 0;
		c->chunk_elems = ld64(p + P_FP8_CHUNK);
		want_blocks = ld64(p + P_FP8_NSTREAMS);
		used = P_FP8_USED;
	}
	if (c->minor <= IBP_FORMAT_MINOR && !all_zero(p + used, H_CODEC_PARAMS_LEN - used))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: reserved %s codec parameter bytes are not zero", c->name, cn);
	IBP_TRY(ibpi_ctr_block_geometry(c->name, IBP_ERR_CORRUPT, c->nrows, c->row_bytes, c->dtype, c->chunk_elems,
			       &c->elems, &c->nblk));
	if (want_blocks != c->nblk)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %llu %s blocks recorded, %llu elements in blocks of %llu "
				"make %llu", c->name, (ull)want_blocks, cn, (ull)c->elems, (ull)c->chunk_elems,
				(ull)c->nblk);
	c->block_rows = c->chunk_elems / (c->row_bytes / ibp_dtype_size(c->dtype));
	return IBP_OK;
}

static ibp_status_t parse_header(ibp_container_t *c, uint64_t *hdr_size)
{
	const uint8_t *b = c->base;
	if (c->size < HDR_MIN_FROZEN)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %llu bytes is too small for a .ibp header", c->name,
				(ull)c->size);
	if (memcmp(b + H_MAGIC, MAGIC, sizeof(MAGIC)) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: not an .ibp file (bad magic)", c->name);
	/* Frozen in every major: magic, versions, header size, trailing checksum. */
	uint64_t hs = ld32(b + H_HDR_SIZE);
	if (hs < HDR_MIN_FROZEN || hs % 8 != 0 || hs > HDR_MAX || hs > c->size)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: header size %llu is invalid (file %llu bytes)", c->name,
				(ull)hs, (ull)c->size);
	uint64_t want = ld64(b + hs - 8), got = XXH3_64bits(b, (size_t)(hs - 8));
	if (want != got)
		return ibpi_fail(IBP_ERR_CHECKSUM, "%s: header checksum %016llx, stored %016llx", c->name,
				(ull)got, (ull)want);
	c->major = ld16(b + H_MAJOR);
	c->minor = ld16(b + H_MINOR);
	if (c->major != IBP_FORMAT_MAJOR)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: format version %u.%u, this library reads %u.x",
				c->name, c->major, c->minor, IBP_FORMAT_MAJOR);
	if (hs < HDR_SIZE || hs % SEC_ALIGN_11 != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: header size %llu, expected a multiple of 64 >= %u",
				c->name, (ull)hs, HDR_SIZE);
	*hdr_size = hs;

	uint64_t fsz = ld64(b + H_FILE_SIZE);
	if (fsz != c->size)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: file is %llu bytes, header says %llu (truncated or padded)",
				c->name, (ull)c->size, (ull)fsz);
	uint32_t req = ld32(b + H_REQ_FEATURES);
	if (req & ~KNOWN_REQ_FEATURES)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: needs unknown required features 0x%08x", c->name,
				(unsigned)(req & ~KNOWN_REQ_FEATURES));
	/* Reserved bytes belong to later minors; a same-or-older minor must zero them. */
	if (c->minor <= IBP_FORMAT_MINOR &&
	    (!all_zero(b + H_RESERVED0, 8) || !all_zero(b + H_RESERVED1, 24)))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: reserved header bytes are not zero", c->name);

	uint32_t dt = ld32(b + H_DTYPE);
	if (ibp_dtype_size((ibp_dtype_t)dt) == 0)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: unknown dtype %u", c->name, (unsigned)dt);
	c->dtype = (ibp_dtype_t)dt;
	c->ndim = ld32(b + H_NDIM);
	if (c->ndim < 1 || c->ndim > IBP_MAX_NDIM)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: ndim %u is outside 1..%u", c->name, c->ndim, IBP_MAX_NDIM);
	for (unsigned i = 0; i < IBP_MAX_NDIM; i++) {
		c->shape[i] = ld64(b + H_DIMS + 8 * i);
		if (i >= c->ndim && c->shape[i] != 0)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: unused dimension %u is %llu, not 0", c->name, i,
					(ull)c->shape[i]);
		if (i >= 1 && i < c->ndim && c->shape[i] == 0)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: dimension %u is 0 (rows must not be empty)",
					c->name, i);
	}
	c->nrows = c->shape[0];
	c->row_bytes = ld64(b + H_ROW_BYTES);
	uint64_t rb;
	if (!row_bytes_of(c->dtype, c->ndim, c->shape, &rb) || rb != c->row_bytes ||
	    rb > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row bytes %llu do not match the shape and dtype %s",
				c->name, (ull)c->row_bytes, ibp_dtype_name(c->dtype));

	uint32_t codec = ld32(b + H_CODEC);
	if (codec != IBP_CODEC_IBP && codec != IBP_CODEC_EXP && codec != IBP_CODEC_FP8 && codec != IBP_CODEC_EXP_ROWS)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: unknown codec id %u", c->name, (unsigned)codec);
	c->codec_id = (ibp_codec_id_t)codec;
	uint32_t layout = ld32(b + H_LAYOUT);
	if (layout != IBP_LAYOUT_PACKED && layout != IBP_LAYOUT_INPLACE)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: unknown layout %u", c->name, (unsigned)layout);
	c->layout = (ibp_layout_t)layout;
	/* the V12 bit, not the minor, says which layout rules apply */
	c->v12 = (req & REQ_V12) != 0;
	if (c->v12 && c->minor < 2)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: format 1.%u with the 1.2 feature bit set", c->name, c->minor);
	/* LOSSY is what makes an older reader refuse fp8 files: it must match */
	if (((req & REQ_LOSSY) != 0) != (codec == IBP_CODEC_FP8))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: LOSSY feature bit %s for the %s codec", c->name,
				(req & REQ_LOSSY) ? "set" : "missing", codec_name(c->codec_id));
	c->chunk_bytes = ld32(b + H_CHUNK);
	c->threshold = -1.0;
	if (codec == IBP_CODEC_IBP) {
		if (c->chunk_bytes != 1 && c->chunk_bytes != 2 && c->chunk_bytes != 4 && c->chunk_bytes != 8)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: chunk size %u is not 1, 2, 4 or 8", c->name,
					c->chunk_bytes);
		/* The IBP codec has no parameters: reserved, so zero unless a
		 * later minor wrote it. */
		if (c->minor <= IBP_FORMAT_MINOR && !all_zero(b + H_CODEC_PARAMS, H_CODEC_PARAMS_LEN))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: IBP codec parameter block is not zero", c->name);
	} else {
		IBP_TRY(parse_value_params(c));
	}
	c->block = ld64(b + H_BLOCK);
	if (c->block < BLOCK_MIN || c->block > BLOCK_MAX || (c->block & (c->block - 1)) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload checksum block %llu is not a power of two in "
				"[4 KiB, 1 GiB]", c->name, (ull)c->block);
	return IBP_OK;
}

/* Every byte outside the header, the table and the sections (alignment
 * padding, a tail) must be zero: no checksum covers these bytes, so a
 * flipped one is caught here (FORMAT.md 2.1). Sections are already inside
 * the file and disjoint. */
static ibp_status_t check_gaps(const ibp_container_t *c, uint64_t hs, uint64_t toff, uint64_t tend,
			       const sec_t *all, uint64_t n)
{
	uint64_t lo[SEC_MAX + 2], hi[SEC_MAX + 2];
	unsigned m = 0;
	lo[m] = 0, hi[m++] = hs;
	lo[m] = toff, hi[m++] = tend;
	for (uint64_t i = 0; i < n; i++)
		if (all[i].len > 0)
			lo[m] = all[i].off, hi[m++] = all[i].off + all[i].len;
	for (unsigned i = 1; i < m; i++) /* insertion sort by start: at most 66 */
		for (unsigned j = i; j > 0 && lo[j] < lo[j - 1]; j--) {
			uint64_t t = lo[j]; lo[j] = lo[j - 1]; lo[j - 1] = t;
			t = hi[j]; hi[j] = hi[j - 1]; hi[j - 1] = t;
		}
	uint64_t at = 0;
	for (unsigned i = 0; i <= m; i++) {
		uint64_t start = i < m ? lo[i] : c->size;
		if (start > at && !all_zero(c->base + at, start - at))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: padding bytes %llu..%llu are not zero", c->name,
					(ull)at, (ull)(start - 1));
		if (i < m && hi[i] > at)
			at = hi[i];
	}
	return IBP_OK;
}

static ibp_status_t parse_table(ibp_container_t *c, uint64_t hs, sec_t *known)
{
	const uint8_t *b = c->base;
	uint64_t n = ld32(b + H_NSECTIONS), toff = ld64(b + H_TABLE_OFF);
	if (n < 1 || n > SEC_MAX)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %llu sections (1..%u allowed)", c->name, (ull)n, SEC_MAX);
	uint64_t align = c->v12 ? SEC_ALIGN : SEC_ALIGN_11;
	if (toff < hs || toff % align != 0 || toff > c->size || n * SEC_ENTRY > c->size - toff)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: section table at %llu (%llu entries) lies outside the file",
				c->name, (ull)toff, (ull)n);
	uint64_t tend = toff + n * SEC_ENTRY;
	uint64_t want = ld64(b + H_TABLE_SUM), got = XXH3_64bits(b + toff, (size_t)(n * SEC_ENTRY));
	if (want != got)
		return ibpi_fail(IBP_ERR_CHECKSUM, "%s: section table checksum %016llx, header says %016llx",
				c->name, (ull)got, (ull)want);

	sec_t all[SEC_MAX];
	for (uint64_t i = 0; i < n; i++) {
		const uint8_t *e = b + toff + i * SEC_ENTRY;
		sec_t s = { ld32(e), ld32(e + 4), ld64(e + 8), ld64(e + 16), ld64(e + 24), 1 };
		if (s.off % align != 0 || s.off > c->size || s.len > c->size - s.off)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: section %llu (id %u) at %llu, %llu bytes: outside "
					"the file or not %llu-byte aligned", c->name, (ull)i, (unsigned)s.id,
					(ull)s.off, (ull)s.len, (ull)align);
		if (s.len > 0 && s.off < tend)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: section %llu (id %u) overlaps the header or table",
					c->name, (ull)i, (unsigned)s.id);
		for (uint64_t j = 0; j < i; j++)
			if (s.len > 0 && all[j].len > 0 && s.off < all[j].off + all[j].len &&
			    all[j].off < s.off + s.len)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: sections %llu and %llu overlap", c->name,
						(ull)j, (ull)i);
		all[i] = s;
		if (s.id >= 1 && s.id <= SEC_KNOWN_MAX) {
			if (known[s.id].present)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section appears twice", c->name,
						SEC_NAME[s.id]);
			known[s.id] = s;
		} else if (s.flags & SEC_F_REQUIRED) {
			return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: unknown required section id %u", c->name,
					(unsigned)s.id);
		}
		/* unknown optional sections are skipped unread */
	}
	/* the sections each codec needs are checked in parse_sections */
	if (!known[SEC_PAYLOAD].present)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section is missing", c->name, SEC_NAME[SEC_PAYLOAD]);
	return check_gaps(c, hs, toff, tend, all, n);
}

/* Sections of an IBP container: metadata, Xvals, then the row index (1.2)
 * or flags, cluster ids and row offsets (1.0/1.1); the payload is already
 * located. */


/* Decodes `n` run-coded words of `C` bytes from src[*at, len) into dst
 * (FORMAT.md 2.4.1). */
static ibp_status_t runs_decode(const char *name, const char *what, const uint8_t *src, uint64_t len,
				uint64_t *at, uint64_t n, unsigned C, uint8_t *dst)
{
	uint64_t done = 0, p = *at;
	while (done < n) {
		if (len - p < 4)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s: run %llu words in: section ends", name, what,
					(ull)done);
		uint32_t h = ld32(src + p);
		uint64_t cnt = h & RUN_MAX;
		p += 4;
		if (cnt == 0 || cnt > n - done)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s: a run of %llu words at word %llu of %llu",
					name, what, (ull)cnt, (ull)done, (ull)n);
		uint64_t need = (h & RUN_LITERAL) ? cnt * C : C;
		if (len - p < need)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s: run at word %llu passes the section end", name,
					what, (ull)done);
		if (h & RUN_LITERAL) {
			memcpy(dst + done * C, src + p, (size_t)need);
		} else {
			for (uint64_t i = 0; i < cnt; i++)
				memcpy(dst + (done + i) * C, src + p, C);
		}
		p += need;
		done += cnt;
	}
	*at = p;
	return IBP_OK;
}



static ibp_status_t parse_index(ibp_container_t *c, const sec_t *s)
{
	const uint8_t *p = c->base + s->off;
	if (s->len < IDX_HDR)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index is %llu bytes, < %u", c->name, (ull)s->len, IDX_HDR);
	c->ix = p;
	c->ix_gs = p[0];
	c->ix_cb = p[1];
	c->ix_w = p[2];
	unsigned want_cb = bitlen64(c->nclusters - 1);
	int packed = c->layout == IBP_LAYOUT_PACKED;
	if (c->ix_gs > IDX_GROUP_SHIFT_MAX || c->ix_cb != want_cb || p[3] != 0 || ld32(p + 4) != 0 ||
	    (packed ? c->ix_w > IDX_LEN_BITS_MAX : c->ix_w != 0))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index header (group shift %u, cluster bits %u, length "
				"bits %u) is invalid for %u clusters, %s layout", c->name, c->ix_gs, c->ix_cb,
				c->ix_w, c->nclusters, packed ? "packed" : "inplace");
	c->ix_bits = 2 + c->ix_cb + c->ix_w;
	/* >= 2 bits per row in the section: nrows * ix_bits cannot overflow */
	if (c->nrows / 4 > s->len)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index of %llu bytes for %llu rows", c->name,
				(ull)s->len, (ull)c->nrows);
	uint64_t G = 1ull << c->ix_gs, ng = c->nrows / G + (c->nrows % G != 0);
	uint64_t ent = (c->nrows * c->ix_bits + 7) / 8, want;
	uint64_t head = IDX_HDR + (packed ? 8 * (ng + 1) + 4 * ng : 0);
	want = head + ent;
	if (s->len != want)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index is %llu bytes, %llu rows of %u bits need %llu",
				c->name, (ull)s->len, (ull)c->nrows, c->ix_bits, (ull)want);
	c->ix_ent = p + head;
	c->ix_ent_len = ent;
	if (ent > 0 && (c->nrows * c->ix_bits) % 8 != 0 &&
	    (c->ix_ent[ent - 1] >> ((c->nrows * c->ix_bits) % 8)) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index: padding bits after the last entry are set",
				c->name);
	if (packed) {
		c->ix_base = p + IDX_HDR;
		c->ix_ref = p + IDX_HDR + 8 * (ng + 1);
	}
	/* every entry: mode, cluster; packed: lengths add up to each group's extent */
	uint64_t at = 0;
	if (packed && ld64(c->ix_base) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index: group 0 starts at %llu, not 0", c->name,
				(ull)ld64(c->ix_base));
	for (uint64_t g = 0; g < ng; g++) {
		uint64_t ref = packed ? ld32(c->ix_ref + 4 * g) : 0;
		uint64_t end = (g + 1) * G < c->nrows ? (g + 1) * G : c->nrows;
		if (ref > c->row_bytes)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index: group %llu reference length %llu > row "
					"size %llu", c->name, (ull)g, (ull)ref, (ull)c->row_bytes);
		for (uint64_t i = g * G; i < end; i++) {
			uint64_t e = ix_entry(c, i);
			unsigned cl = (unsigned)((e >> 2) & ((1u << c->ix_cb) - 1));
			if (cl >= c->nclusters)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: cluster %u >= %u clusters", c->name,
						(ull)i, cl, c->nclusters);
			if (!packed)
				continue;
			if ((e & IBP_ROW_MODE_MASK) == IBP_ROW_RAW && (e >> (2 + c->ix_cb)) != 0)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: raw row with a length field", c->name,
						(ull)i);
			uint64_t len = ix_len(c, e, ref);
			if (len > c->row_bytes)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: length %llu exceeds the row size %llu",
						c->name, (ull)i, (ull)len, (ull)c->row_bytes);
			at += len; /* <= nrows * 2^40 < 2^64 + checked below per group */
		}
		if (packed && ld64(c->ix_base + 8 * (g + 1)) != at)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index: group %llu ends at %llu, its rows add up "
					"to %llu", c->name, (ull)g, (ull)ld64(c->ix_base + 8 * (g + 1)), (ull)at);
		if (at > c->payload_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: row index: rows pass the payload end (%llu bytes)",
					c->name, (ull)c->payload_len);
	}
	if (packed && at != c->payload_len)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: rows end at %llu, payload is %llu bytes", c->name, (ull)at,
				(ull)c->payload_len);
	if (!packed) {
		uint64_t need;
		if (__builtin_mul_overflow(c->nrows, c->row_bytes, &need) || need != c->payload_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload is %llu bytes, inplace layout needs %llu "
					"rows x %llu", c->name, (ull)c->payload_len, (ull)c->nrows,
					(ull)c->row_bytes);
	}
	return IBP_OK;
}

/* FLAGS, CLUSTERS and OFFSETS of 1.0/1.1 files. */
static ibp_status_t parse_row_arrays(ibp_container_t *c, const sec_t *k)
{
	const uint8_t *b = c->base;
	if (!k[SEC_FLAGS].present)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section is missing", c->name, SEC_NAME[SEC_FLAGS]);
	/* flags: one byte per row, reserved bits clear */
	if (k[SEC_FLAGS].len != c->nrows)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: flags section is %llu bytes for %llu rows", c->name,
				(ull)k[SEC_FLAGS].len, (ull)c->nrows);
	c->flags = b + k[SEC_FLAGS].off;
	for (uint64_t i = 0; i < c->nrows; i++)
		if (c->flags[i] & ~IBP_ROW_MODE_MASK)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: flags byte 0x%02x has reserved bits set",
					c->name, (ull)i, c->flags[i]);

	/* cluster ids: exactly when there is more than one cluster */
	if (c->nclusters > 1) {
		if (!k[SEC_CLUSTERS].present || k[SEC_CLUSTERS].len != c->nrows)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: cluster id section missing or not %llu bytes",
					c->name, (ull)c->nrows);
		c->clusters = b + k[SEC_CLUSTERS].off;
		for (uint64_t i = 0; i < c->nrows; i++)
			if (c->clusters[i] >= c->nclusters)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: cluster %u >= %u clusters", c->name,
						(ull)i, c->clusters[i], c->nclusters);
	} else if (k[SEC_CLUSTERS].present) {
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: cluster id section present with one cluster", c->name);
	}

	/* row offsets (packed) */
	if (c->layout == IBP_LAYOUT_PACKED) {
		const sec_t *o = &k[SEC_OFFSETS];
		/* nrows <= file size (flags section), so 8 * (nrows + 1) fits */
		if (!o->present || o->len != 8 * (c->nrows + 1))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: offsets section missing or not %llu bytes",
					c->name, (ull)(8 * (c->nrows + 1)));
		c->offsets = (const uint64_t *)(const void *)(b + o->off);
		if (c->offsets[0] != 0)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: offset of row 0 is %llu, not 0", c->name,
					(ull)c->offsets[0]);
		for (uint64_t i = 0; i < c->nrows; i++)
			if (c->offsets[i + 1] < c->offsets[i] ||
			    c->offsets[i + 1] - c->offsets[i] > c->row_bytes)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: row %llu: offsets %llu..%llu decrease or "
						"exceed the row size %llu", c->name, (ull)i, (ull)c->offsets[i],
						(ull)c->offsets[i + 1], (ull)c->row_bytes);
		if (c->offsets[c->nrows] != c->payload_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: offsets end at %llu, payload is %llu bytes",
					c->name, (ull)c->offsets[c->nrows], (ull)c->payload_len);
	} else {
		uint64_t want;
		if (k[SEC_OFFSETS].present)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: row offset section present in the inplace layout",
					c->name);
		if (__builtin_mul_overflow(c->nrows, c->row_bytes, &want) || want != c->payload_len)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload is %llu bytes, inplace layout needs %llu "
					"rows x %llu", c->name, (ull)c->payload_len, (ull)c->nrows,
					(ull)c->row_bytes);
	}
	return IBP_OK;
}

static ibp_status_t parse_ibp(ibp_container_t *c, const sec_t *k)
{
	const uint8_t *b = c->base;
	if (!k[SEC_META].present)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section is missing", c->name, SEC_NAME[SEC_META]);
	/* metadata: nclusters, coding, threshold, masks, bitvals */
	const sec_t *m = &k[SEC_META];
	if (m->len < META_HDR)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata section is %llu bytes, < %u", c->name,
				(ull)m->len, META_HDR);
	const uint8_t *mp = b + m->off;
	c->nclusters = ld32(mp);
	uint32_t coding = ld32(mp + 4);
	/* the coding word was reserved (zero) before 1.2 */
	if (c->nclusters < 1 || c->nclusters > IBP_MAX_CLUSTERS ||
	    (c->minor <= IBP_FORMAT_MINOR && coding != META_PLAIN && (!c->v12 || coding != META_RUNS)))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata: %u clusters (1..%u) or table coding %u unknown",
				c->name, c->nclusters, IBP_MAX_CLUSTERS, (unsigned)coding);
	uint64_t tbits = ld64(mp + 8);
	memcpy(&c->threshold, &tbits, 8);
	if (!(c->threshold == -1.0 || (c->threshold >= 0.0 && c->threshold <= 1.0)))
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata: threshold is not -1 or in [0, 1]", c->name);
	/* row_bytes <= 2^40, so these products cannot overflow */
	uint64_t words = (c->row_bytes + c->chunk_bytes - 1) / c->chunk_bytes * c->chunk_bytes;
	uint64_t table = (uint64_t)c->nclusters * words;
	const sec_t *x = &k[SEC_XVALS];
	const uint8_t *masks, *bitvals, *xv = NULL;
	if (coding == META_RUNS) {
		/* tables as runs: bounded expansion, checked before allocating */
		uint64_t ntab = x->present ? 3 : 2, coded = m->len + (x->present ? x->len : 0);
		if (table > (RUNS_EXPAND * coded + RUNS_SLACK) / ntab)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata: %llu run-coded bytes cannot stand for %llu "
					"table bytes", c->name, (ull)coded, (ull)(ntab * table));
		c->tables = malloc((size_t)(ntab * table));
		if (!c->tables)
			return ibpi_fail(IBP_ERR_NOMEM, "%s: no memory for %llu metadata bytes", c->name,
					(ull)(ntab * table));
		uint64_t n = table / c->chunk_bytes, at = META_HDR;
		IBP_TRY(runs_decode(c->name, "Masks", mp, m->len, &at, n, c->chunk_bytes, c->tables));
		IBP_TRY(runs_decode(c->name, "Bitvals", mp, m->len, &at, n, c->chunk_bytes, c->tables + table));
		if (at != m->len)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata: %llu bytes after the tables", c->name,
					(ull)(m->len - at));
		if (x->present) {
			at = 0;
			IBP_TRY(runs_decode(c->name, "Xvals", b + x->off, x->len, &at, n, c->chunk_bytes,
					    c->tables + 2 * table));
			if (at != x->len)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: exception values: %llu bytes after the table",
						c->name, (ull)(x->len - at));
			xv = c->tables + 2 * table;
		}
		masks = c->tables;
		bitvals = c->tables + table;
	} else {
		if (m->len != META_HDR + 2 * table)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: metadata section is %llu bytes, expected %llu for %u "
					"clusters of %llu chunk bytes", c->name, (ull)m->len,
					(ull)(META_HDR + 2 * table), c->nclusters, (ull)words);
		/* Xvals: a REQUIRED section of its own, so readers before 1.1 refuse
		 * the file instead of decoding rows wrongly (FORMAT.md 2.4) */
		if (x->present) {
			if (x->len != table)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: exception value section is %llu bytes, "
						"expected %llu", c->name, (ull)x->len, (ull)table);
			xv = b + x->off;
		}
		masks = mp + META_HDR;
		bitvals = mp + META_HDR + table;
	}

	if (k[SEC_INDEX].present) {
		static const int none[] = { SEC_FLAGS, SEC_CLUSTERS, SEC_OFFSETS };
		for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
			if (k[none[i]].present)
				return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section beside a row index", c->name,
						SEC_NAME[none[i]]);
		IBP_TRY(parse_index(c, &k[SEC_INDEX]));
	} else {
		IBP_TRY(parse_row_arrays(c, k));
	}

	ibp_status_t st = ibp_codec_create_ex(c->row_bytes, c->chunk_bytes, c->nclusters, masks, bitvals, xv,
					      &c->codec);
	if (st != IBP_OK) {
		char why[256];
		save_error(why, sizeof(why));
		c->codec = NULL;
		return ibpi_fail(st, "%s: metadata: %s", c->name, why);
	}
	return IBP_OK;
}





static ibp_status_t parse_sections(ibp_container_t *c, const sec_t *k)
{
	const uint8_t *b = c->base;
	for (int id = 1; id <= SEC_KNOWN_MAX; id++)
		if (id != SEC_PAYLOAD && k[id].present)
			IBP_TRY(check_sum(c, &k[id]));

	/* payload and its per-block checksums: every codec */
	c->payload = b + k[SEC_PAYLOAD].off;
	c->payload_len = k[SEC_PAYLOAD].len;
	c->payload_sum = k[SEC_PAYLOAD].sum;
	c->nsums = c->payload_len / c->block + (c->payload_len % c->block != 0);
	if (!k[SEC_PAYLOAD_SUMS].present) {
		/* 1.2: a payload of one block has only its section checksum */
		if (!c->v12 || c->nsums > 1)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section is missing", c->name,
					SEC_NAME[SEC_PAYLOAD_SUMS]);
		c->nsums = 0;
		c->sums = NULL;
	} else {
		if (k[SEC_PAYLOAD_SUMS].len != 8 * c->nsums)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload checksum section is %llu bytes, expected "
					"%llu", c->name, (ull)k[SEC_PAYLOAD_SUMS].len, (ull)(8 * c->nsums));
		c->sums = b + k[SEC_PAYLOAD_SUMS].off;
	}
	if (c->codec_id == IBP_CODEC_IBP)
		return parse_ibp(c, k);

	/* exp and fp8: no row metadata at all */
	static const int none[] = { SEC_META, SEC_FLAGS, SEC_CLUSTERS, SEC_XVALS, SEC_INDEX };
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		if (k[none[i]].present)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: %s section present, the %s codec has none", c->name,
					SEC_NAME[none[i]], codec_name(c->codec_id));
	if (c->codec_id == IBP_CODEC_EXP_ROWS) {
		/* row i in slot i: no offsets */
		if (k[SEC_OFFSETS].present)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: offsets section in an exp-rows container", c->name);
		IBP_TRY(ibpi_ctr_check_exprows_slots(c->name, IBP_ERR_CORRUPT, &c->xr, c->nrows, c->payload_len,
						     &c->xovf_len));
		c->xovf = c->payload + (c->payload_len - c->xovf_len);
		return IBP_OK;
	}
	if (c->codec_id == IBP_CODEC_EXP) {
		const sec_t *o = &k[SEC_OFFSETS];
		/* nblk <= 2^56, so the length cannot overflow */
		if (!o->present || o->len != 8 * (c->nblk + 1))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: block offsets section missing or not %llu bytes",
					c->name, (ull)(8 * (c->nblk + 1)));
		c->blk_off = (const uint64_t *)(const void *)(b + o->off);
		return ibpi_ctr_check_exp_offsets(c->name, IBP_ERR_CORRUPT, c->dtype, c->elems, c->chunk_elems, c->nblk,
					 c->blk_off, c->payload_len);
	}
	if (k[SEC_OFFSETS].present)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: offsets section in an fp8 container", c->name);
	uint64_t want;
	IBP_TRY(ibpi_ctr_fp8_layout(c->name, IBP_ERR_CORRUPT, &c->fp8, c->elems, c->chunk_elems, c->nblk, &c->stride,
			   &want));
	if (want != c->payload_len)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload is %llu bytes, %llu fp8 streams of %llu elements "
				"take %llu", c->name, (ull)c->payload_len, (ull)c->nblk, (ull)c->chunk_elems,
				(ull)want);
	return IBP_OK;
}

ibp_status_t ibpi_ctr_check_payload(const ibp_container_t *c, int nthreads, int whole);

static ibp_status_t parse(ibp_container_t *c, unsigned flags)
{
	uint64_t hs = 0;
	sec_t known[SEC_KNOWN_MAX + 1];
	memset(known, 0, sizeof(known));
	IBP_TRY(parse_header(c, &hs));
	IBP_TRY(parse_table(c, hs, known));
	IBP_TRY(parse_sections(c, known));
	/* verified reads: every other byte was checked above; the payload
	 * here, unless the caller vouches for it (IBP_OPEN_TRUSTED) */
	if (!(flags & (IBP_OPEN_TRUSTED | IBP_OPEN_VERIFY)))
		IBP_TRY(ibpi_ctr_check_payload(c, 0, 0));
	if (flags & IBP_OPEN_VERIFY)
		IBP_TRY(ibp_container_verify(c, 0));
	return IBP_OK;
}

static ibp_container_t *new_container(const char *name)
{
	ibp_container_t *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->name = strdup(name);
	if (!c->name) {
		free(c);
		return NULL;
	}
	return c;
}

void ibp_container_close(ibp_container_t *c)
{
	if (!c)
		return;
	ibp_codec_free(c->codec);
	free(c->tables);
	free(atomic_load(&c->legacy));
	free(atomic_load(&c->rowmap));
	if (c->own == OWN_HEAP)
		ibp_host_free((void *)(uintptr_t)c->base);
	else if (c->own == OWN_MMAP)
		munmap((void *)(uintptr_t)c->base, (size_t)c->size);
	free(c->name);
	free(c);
}

static ibp_status_t finish_open(ibp_container_t *c, unsigned flags, ibp_container_t **out)
{
	ibp_status_t st = parse(c, flags);
	if (st != IBP_OK) {
		ibp_container_close(c);
		return st;
	}
	*out = c;
	return IBP_OK;
}

ibp_status_t ibp_container_open_memory(const void *data, uint64_t size, unsigned flags,
				       ibp_container_t **out)
{
	if (!out || (!data && size > 0))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_open_memory: NULL argument");
	*out = NULL;
	if (flags & ~(IBP_OPEN_MMAP | IBP_OPEN_VERIFY | IBP_OPEN_TRUSTED))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "<memory>: unknown open flags 0x%x", flags);
	ibp_container_t *c = new_container("<memory>");
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_container_open_memory: out of memory");
	if (size > 0 && ((uintptr_t)data % 8) != 0) {
		/* offset tables are read as uint64_t in place: realign a copy */
		void *p = ibp_host_alloc(size, MEM_ALIGN);
		if (!p) {
			ibp_container_close(c);
			return ibpi_fail(IBP_ERR_NOMEM, "<memory>: cannot copy %llu bytes", (ull)size);
		}
		memcpy(p, data, (size_t)size);
		c->base = p;
		c->own = OWN_HEAP;
	} else {
		static const uint8_t empty[8];
		c->base = size > 0 ? data : empty;
		c->own = OWN_BORROWED;
	}
	c->size = size;
	return finish_open(c, flags, out);
}


ibp_status_t ibp_container_open(const char *path, unsigned flags, ibp_container_t **out)
{
	if (!path || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_open: NULL argument");
	*out = NULL;
	if (flags & ~(IBP_OPEN_MMAP | IBP_OPEN_VERIFY | IBP_OPEN_TRUSTED))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown open flags 0x%x", path, flags);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ibpi_fail(IBP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		int e = errno;
		close(fd);
		return ibpi_fail(IBP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return ibpi_fail(IBP_ERR_IO, "%s: not a regular file", path);
	}
	uint64_t size = (uint64_t)sb.st_size;
	if (size < HDR_MIN_FROZEN || size > SIZE_MAX / 2) {
		close(fd);
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: %llu bytes is not a valid .ibp size", path, (ull)size);
	}
	ibp_container_t *c = new_container(path);
	if (!c) {
		close(fd);
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory", path);
	}
	c->size = size;
	if (flags & IBP_OPEN_MMAP) {
		void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			ibp_container_close(c);
			return ibpi_fail(IBP_ERR_IO, "%s: cannot mmap %llu bytes: %s", path, (ull)size, strerror(e));
		}
		c->base = p;
		c->own = OWN_MMAP;
	} else {
		uint8_t *p = ibp_host_alloc(size, MEM_ALIGN);
		if (!p) {
			close(fd);
			ibp_container_close(c);
			return ibpi_fail(IBP_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (ull)size);
		}
		c->base = p;
		c->own = OWN_HEAP;
		advise_huge(p, size);
		uint64_t at = 0;
		while (at < size) {
			size_t want = (size_t)(size - at < (1ull << 30) ? size - at : (1ull << 30));
			ssize_t r = pread(fd, p + at, want, (off_t)at);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				int e = r < 0 ? errno : 0;
				close(fd);
				ibp_container_close(c);
				return ibpi_fail(IBP_ERR_IO, "%s: read failed at byte %llu: %s", path, (ull)at,
						e ? strerror(e) : "file shrank while reading");
			}
			at += (uint64_t)r;
		}
	}
	close(fd);
	return finish_open(c, flags, out);
}

