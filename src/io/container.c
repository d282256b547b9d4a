/* container.c - the `.ibp` container: writer, validating reader, verify.
 *
 * docs/FORMAT.md section 2 is the specification; the constants below are
 * its tables. The reader treats every byte as hostile: all sizes are
 * checked with overflow-safe arithmetic before any pointer is formed, so
 * that after ibp_container_open no accessor can reach outside the file.
 *
 * Three codecs share the frame (header, section table, payload and its
 * checksums): IBP rows (META, XVALS, FLAGS, CLUSTERS, OFFSETS), exponent
 * codec blocks (OFFSETS = block offsets) and FP8 streams (fixed stride,
 * no further section).
 */
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the container maps little-endian offset tables in place: little-endian hosts only"
#endif

/* ---- wire constants (FORMAT.md 2.2 - 2.6) ------------------------------ */

static const uint8_t MAGIC[8] = { 0x89, 'I', 'B', 'P', 0x0D, 0x0A, 0x1A, 0x0A };

#define HDR_SIZE 256u         /* header bytes written by 1.0 */
#define HDR_MIN_FROZEN 24u    /* smallest header any major may have */
#define HDR_MAX (64u * 1024u) /* larger headers are refused as corrupt */

/* header field offsets */
#define H_MAGIC 0
#define H_MAJOR 8
#define H_MINOR 10
#define H_HDR_SIZE 12
#define H_FILE_SIZE 16
#define H_REQ_FEATURES 24
#define H_OPT_FEATURES 28
#define H_DTYPE 32
#define H_NDIM 36
#define H_DIMS 40
#define H_ROW_BYTES 104
#define H_CODEC 112
#define H_LAYOUT 116
#define H_CHUNK 120
#define H_NSECTIONS 124
#define H_TABLE_OFF 128
#define H_TABLE_SUM 136
#define H_BLOCK 144
#define H_RESERVED0 152 /* 8 bytes */
#define H_CODEC_PARAMS 160
#define H_CODEC_PARAMS_LEN 64
#define H_RESERVED1 224 /* 24 bytes */

/* codec_params of codecs 2 and 3 (FORMAT.md 2.2) */
#define P_VERSION 0
#define P_EXP_TABLE 4
#define P_EXP_CHUNK 8
#define P_EXP_NBLOCKS 16
#define P_EXP_USED 24
#define P_FP8_FORMAT 4
#define P_FP8_BLOCK 8
#define P_FP8_FLAGS 12
#define P_FP8_CHUNK 16
#define P_FP8_NSTREAMS 24
#define P_FP8_USED 32
#define PARAMS_VERSION 1u
#define FP8_F_HADAMARD 1u
#define FP8_F_ADAPTIVE 2u
#define MAX_ELEMS (1ull << 56) /* both value codecs' limit */
#define EXP_BLOCK_ALIGN 128u
/* the header checksum is always the header's last 8 bytes */

#define REQ_LOSSY 1u /* decoded values differ from the input: codec 3 */
#define REQ_V12 2u   /* 1.2 layout (alignment, optional sums, coded tables): 1.1 readers refuse */
#define KNOWN_REQ_FEATURES (REQ_LOSSY | REQ_V12)

#define SEC_ENTRY 32u
#define SEC_MAX 64u
#define SEC_ALIGN_11 64u  /* section alignment of 1.0 and 1.1 files */
#define SEC_ALIGN 8u      /* 1.2: sections on 8-byte boundaries (u64 tables read in place) */
#define PAYLOAD_ALIGN 64u /* 1.2: a payload of >= PAYLOAD_ALIGN_MIN bytes starts on a cache line */
#define PAYLOAD_ALIGN_MIN 4096u
#define MEM_ALIGN 4096u   /* alignment of the in-memory image (IBP_OPEN_READ) */
#define SEC_F_REQUIRED 1u

enum {
	SEC_META = 1,
	SEC_FLAGS = 2,
	SEC_CLUSTERS = 3,
	SEC_OFFSETS = 4,
	SEC_PAYLOAD = 5,
	SEC_PAYLOAD_SUMS = 6,
	SEC_XVALS = 7,
	SEC_INDEX = 8,
	SEC_KNOWN_MAX = 8
};

#define META_HDR 16u
#define BLOCK_DEFAULT (1ull << 20)
#define BLOCK_MIN (1ull << 12)
#define BLOCK_MAX (1ull << 30)

static const char *const SEC_NAME[SEC_KNOWN_MAX + 1] = {
	"?", "metadata", "flags", "cluster ids", "offsets", "payload", "payload checksums",
	"exception values", "row index"
};

/* META coding word (1.2): the tables plain, or as runs (FORMAT.md 2.4.1) */
#define META_PLAIN 0u
#define META_RUNS 1u
#define RUN_LITERAL 0x80000000u
#define RUN_MAX 0x7fffffffu
/* Run-coded tables may expand to at most this many times their coded
 * bytes plus RUNS_SLACK: a tiny file cannot make the reader allocate much. */
#define RUNS_EXPAND 64u
#define RUNS_SLACK (1ull << 20)

/* INDEX (1.2, FORMAT.md 2.4.2) */
#define IDX_HDR 8u
#define IDX_GROUP_SHIFT 6u   /* written: 64 rows per group */
#define IDX_GROUP_SHIFT_MAX 16u
#define IDX_LEN_BITS_MAX 41u /* bitlen(2^40) */

static const char *codec_name(ibp_codec_id_t id)
{
	return id == IBP_CODEC_IBP ? "ibp" : id == IBP_CODEC_EXP ? "exp" : "fp8";
}

static int value_dtype(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_BF16 || dt == IBP_DTYPE_F16 || dt == IBP_DTYPE_F32;
}

/* ---- little-endian helpers -------------------------------------------- */

static uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

static int all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

typedef unsigned long long ull;

/* ---- the object --------------------------------------------------------- */

enum { OWN_BORROWED, OWN_HEAP, OWN_MMAP };

struct ibp_container {
	const uint8_t *base;
	uint64_t size;
	int own;
	char *name; /* path, or "<memory>", for messages */

	unsigned major, minor;
	int v12;                  /* required feature V12: the 1.2 layout rules */
	ibp_dtype_t dtype;
	unsigned ndim;
	uint64_t shape[IBP_MAX_NDIM];
	uint64_t nrows, row_bytes;
	ibp_layout_t layout;
	ibp_codec_id_t codec_id;
	unsigned chunk_bytes, nclusters;
	double threshold;
	uint64_t block;

	/* Row metadata of 1.0/1.1 files (and the lazily expanded copy of a
	 * compact index, see `legacy`) */
	const uint8_t *flags;
	const uint8_t *clusters;  /* NULL when nclusters == 1 */
	const uint64_t *offsets;  /* NULL in the inplace layout */
	/* 1.2 compact row index (FORMAT.md 2.4.2); ix == NULL for 1.0/1.1 */
	const uint8_t *ix;        /* the INDEX section */
	const uint8_t *ix_base;   /* packed: ngroups + 1 u64 group offsets */
	const uint8_t *ix_ref;    /* packed: ngroups u32 reference lengths */
	const uint8_t *ix_ent;    /* the entry bit stream */
	uint64_t ix_ent_len;      /* its bytes */
	unsigned ix_gs, ix_cb, ix_w, ix_bits; /* group shift, cluster bits, length bits, entry bits */
	uint8_t *tables;          /* decoded run-coded Masks, Bitvals (, Xvals); owned */
	_Atomic(void *) legacy;   /* expanded offsets/flags/clusters of a compact index */
	_Atomic(void *) rowmap;   /* ibp_rowmap_t, built by ibpi_container_rowmap */
	const uint8_t *payload;
	uint64_t payload_len;
	uint64_t payload_sum;     /* XXH3-64 of the whole payload (section table) */
	const uint8_t *sums;      /* nsums little-endian XXH3-64 words */
	uint64_t nsums;

	ibp_codec_t *codec;       /* IBP only */

	/* exp and fp8: elems elements cut into nblk blocks of chunk_elems */
	uint64_t elems, chunk_elems, block_rows, nblk;
	const uint64_t *blk_off;  /* exp: nblk + 1 payload offsets */
	uint64_t stride;          /* fp8: bytes between stream starts */
	ibp_exp_table_mode_t exp_table;
	ibp_fp8_opts_t fp8;
};

/* Copies the thread's current detail so it can be quoted in a new one. */
static void save_error(char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", ibp_last_error());
}

/* Row bytes of a shape: dims 1.. times the element size; 0 on overflow. */
static int row_bytes_of(ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t r = ibp_dtype_size(dtype);
	for (unsigned i = 1; i < ndim; i++)
		if (__builtin_mul_overflow(r, shape[i], &r))
			return 0;
	*out = r;
	return 1;
}

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

/* Geometry shared by the exp and fp8 codecs: elems elements (shape and
 * dtype) cut into nblk blocks of chunk_elems, a whole number of rows.
 * `bad` is the status to report (CORRUPT when reading, INVALID_ARG when
 * writing). */
static ibp_status_t block_geometry(const char *name, ibp_status_t bad, uint64_t nrows, uint64_t row_bytes,
				   ibp_dtype_t dtype, uint64_t chunk_elems, uint64_t *elems, uint64_t *nblk)
{
	uint64_t row_elems = row_bytes / ibp_dtype_size(dtype), n;
	if (__builtin_mul_overflow(nrows, row_elems, &n) || n > MAX_ELEMS)
		return ibpi_fail(bad, "%s: %llu rows of %llu elements exceed 2^56 elements", name, (ull)nrows,
				(ull)row_elems);
	if (chunk_elems == 0 || chunk_elems > MAX_ELEMS || chunk_elems % row_elems != 0)
		return ibpi_fail(bad, "%s: %llu elements per block is not a positive whole number of rows "
				"of %llu elements", name, (ull)chunk_elems, (ull)row_elems);
	*elems = n;
	*nblk = n / chunk_elems + (n % chunk_elems != 0);
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
	if (c->codec_id == IBP_CODEC_EXP) {
		uint32_t tm = ld32(p + P_EXP_TABLE);
		if (tm > IBP_EXP_TABLE_GIVEN)
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: exp table mode %u is not 0, 1 or 2", c->name,
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
	IBP_TRY(block_geometry(c->name, IBP_ERR_CORRUPT, c->nrows, c->row_bytes, c->dtype, c->chunk_elems,
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
	if (codec != IBP_CODEC_IBP && codec != IBP_CODEC_EXP && codec != IBP_CODEC_FP8)
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

static unsigned bitlen64(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0u; }

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

/* Entry i of a compact index: mode, cluster, length field. */
static uint64_t ix_entry(const ibp_container_t *c, uint64_t i)
{
	uint64_t bit = i * c->ix_bits, byte = bit / 8, v = 0;
	uint64_t avail = c->ix_ent_len - byte;
	memcpy(&v, c->ix_ent + byte, (size_t)(avail < 8 ? avail : 8));
	v >>= bit % 8;
	return c->ix_bits >= 64 ? v : v & ((1ull << c->ix_bits) - 1);
}

/* Encoded length of a row from its entry and its group's reference. */
static uint64_t ix_len(const ibp_container_t *c, uint64_t e, uint64_t ref)
{
	return (e & IBP_ROW_MODE_MASK) == IBP_ROW_RAW ? c->row_bytes : ref + (e >> (2 + c->ix_cb));
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


/* Smallest and largest size of a valid exp block of n elements: a coded
 * block is at least its static part, a raw one exactly raw size; nothing
 * exceeds the encode bound. Both grow with n, which bounds n by the file. */
static ibp_status_t exp_block_limits(ibp_dtype_t dt, uint64_t n, uint64_t *lo, uint64_t *hi)
{
	uint64_t st, raw;
	IBP_TRY(ibp_exp_static_size(dt, n, &st));
	IBP_TRY(ibp_exp_raw_size(dt, n, &raw));
	IBP_TRY(ibp_exp_encode_bound(dt, n, hi));
	*lo = st < raw ? st : raw;
	return IBP_OK;
}

/* Exp block offsets: from 0, non-decreasing, 128-aligned, each block's
 * size plausible for its element count, ending at the payload length. */
static ibp_status_t check_exp_offsets(const char *name, ibp_status_t bad, ibp_dtype_t dt, uint64_t elems,
				      uint64_t chunk, uint64_t nblk, const uint64_t *off, uint64_t plen)
{
	uint64_t full_lo = 0, full_hi = 0, last_lo = 0, last_hi = 0;
	if (nblk > 0) {
		uint64_t last_n = elems - (nblk - 1) * chunk;
		if (exp_block_limits(dt, nblk > 1 ? chunk : last_n, &full_lo, &full_hi) != IBP_OK ||
		    exp_block_limits(dt, last_n, &last_lo, &last_hi) != IBP_OK)
			return ibpi_fail(IBP_ERR_INTERNAL, "%s: exp block sizes: %s", name, ibp_last_error());
	}
	if (off[0] != 0)
		return ibpi_fail(bad, "%s: offset of block 0 is %llu, not 0", name, (ull)off[0]);
	for (uint64_t i = 0; i < nblk; i++) {
		uint64_t lo = i + 1 < nblk ? full_lo : last_lo, hi = i + 1 < nblk ? full_hi : last_hi;
		if (off[i + 1] < off[i] || off[i + 1] % EXP_BLOCK_ALIGN != 0 || off[i + 1] - off[i] < lo ||
		    off[i + 1] - off[i] > hi)
			return ibpi_fail(bad, "%s: exp block %llu: offsets %llu..%llu decrease, are not multiples "
					"of 128, or give a size outside [%llu, %llu]", name, (ull)i, (ull)off[i],
					(ull)off[i + 1], (ull)lo, (ull)hi);
	}
	if (off[nblk] != plen)
		return ibpi_fail(bad, "%s: block offsets end at %llu, payload is %llu bytes", name, (ull)off[nblk],
				(ull)plen);
	return IBP_OK;
}

/* Fp8 payload length: streams at `stride`, the last one cut to its size. */
static ibp_status_t fp8_layout(const char *name, ibp_status_t bad, const ibp_fp8_opts_t *o, uint64_t elems,
			       uint64_t chunk, uint64_t nblk, uint64_t *stride, uint64_t *plen)
{
	uint64_t s = 0, last = 0, before;
	if (ibp_fp8_encoded_size(o, chunk, &s) != IBP_OK)
		return ibpi_fail(bad, "%s: fp8 stream size: %s", name, ibp_last_error());
	*stride = s;
	*plen = 0;
	if (nblk == 0)
		return IBP_OK;
	if (ibp_fp8_encoded_size(o, elems - (nblk - 1) * chunk, &last) != IBP_OK)
		return ibpi_fail(bad, "%s: fp8 stream size: %s", name, ibp_last_error());
	if (__builtin_mul_overflow(nblk - 1, s, &before) || __builtin_add_overflow(before, last, plen))
		return ibpi_fail(bad, "%s: %llu fp8 streams of %llu bytes overflow", name, (ull)nblk, (ull)s);
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
	if (c->codec_id == IBP_CODEC_EXP) {
		const sec_t *o = &k[SEC_OFFSETS];
		/* nblk <= 2^56, so the length cannot overflow */
		if (!o->present || o->len != 8 * (c->nblk + 1))
			return ibpi_fail(IBP_ERR_CORRUPT, "%s: block offsets section missing or not %llu bytes",
					c->name, (ull)(8 * (c->nblk + 1)));
		c->blk_off = (const uint64_t *)(const void *)(b + o->off);
		return check_exp_offsets(c->name, IBP_ERR_CORRUPT, c->dtype, c->elems, c->chunk_elems, c->nblk,
					 c->blk_off, c->payload_len);
	}
	if (k[SEC_OFFSETS].present)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: offsets section in an fp8 container", c->name);
	uint64_t want;
	IBP_TRY(fp8_layout(c->name, IBP_ERR_CORRUPT, &c->fp8, c->elems, c->chunk_elems, c->nblk, &c->stride,
			   &want));
	if (want != c->payload_len)
		return ibpi_fail(IBP_ERR_CORRUPT, "%s: payload is %llu bytes, %llu fp8 streams of %llu elements "
				"take %llu", c->name, (ull)c->payload_len, (ull)c->nblk, (ull)c->chunk_elems,
				(ull)want);
	return IBP_OK;
}

static ibp_status_t check_payload(const ibp_container_t *c, int nthreads, int whole);

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
		IBP_TRY(check_payload(c, 0, 0));
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

/* Asks for transparent huge pages on the 2 MiB pages inside a file read
 * into memory (as NumPy does for large arrays): random rows of a large
 * table otherwise miss the TLB on almost every row, which measured a
 * quarter of a random gather's time (docs/BENCHMARKS.md). Advice only:
 * nothing changes where the kernel gives none. */
static void advise_huge(void *p, uint64_t size)
{
#ifdef MADV_HUGEPAGE
	const char *no = getenv("IBP_NO_HUGEPAGES");
	if (no && *no && strcmp(no, "0") != 0)
		return;
	const uintptr_t H = 2u << 20, lo = ((uintptr_t)p + H - 1) & ~(H - 1), hi = ((uintptr_t)p + size) & ~(H - 1);
	if (hi > lo)
		(void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
#else
	(void)p;
	(void)size;
#endif
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

/* ---- rows and blocks ----------------------------------------------------- */

/* Row `row` (< nrows) of an IBP container: extent, mode, cluster. With a
 * compact index the offset is the group's base plus the lengths of the
 * rows before it in the group (at most 2^group_shift - 1 entries). */
static void row_at(const ibp_container_t *c, uint64_t row, const uint8_t **src, uint64_t *len,
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
	if (c->codec_id != IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "%s: %s container: rows are encoded in blocks, not one "
				"by one", c->name, codec_name(c->codec_id));
	if (row >= c->nrows)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: row %llu >= %llu rows", c->name, (ull)row,
				(ull)c->nrows);
	uint8_t m;
	unsigned cl;
	const ibp_rowmap_t *map = atomic_load_explicit(&c->rowmap, memory_order_acquire);
	if (map)
		ibp_rowmap_get(map, row, src, len, &m, &cl);
	else
		row_at(c, row, src, len, &m, &cl);
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
			row_at(c, i, &src, &len, &m, &cl);
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
	 * (rows are contiguous from 0), everything else by row_at (O(1)) */
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
				row_at(c, i, &src, &len, &mode, &cl);
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
	if (c->codec_id == IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: an IBP container has rows, not blocks", c->name);
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
static ibp_status_t decode_block(const ibp_container_t *c, uint64_t b, void *dst, int nthreads)
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
	if (!c || (!dst && c->codec_id != IBP_CODEC_IBP && block < c->nblk) || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_decode_block: NULL argument or nthreads < 0");
	if (c->codec_id == IBP_CODEC_IBP)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: an IBP container has rows, not blocks", c->name);
	if (block >= c->nblk)
		return ibpi_fail(IBP_ERR_OUT_OF_RANGE, "%s: block %llu >= %llu blocks", c->name, (ull)block,
				(ull)c->nblk);
	ibp_status_t st = decode_block(c, block, dst, nthreads);
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

/* ---- verify ------------------------------------------------------------- */

typedef struct verify_ctx {
	const ibp_container_t *c;
	int inner;     /* threads inside one block (exp/fp8 with a single block) */
	ibp_status_t st[IBP_MAX_THREADS];
	uint64_t bad[IBP_MAX_THREADS]; /* first failing row or block of each tid */
	char msg[IBP_MAX_THREADS][160];
} verify_ctx_t;

static void verify_sums(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	for (uint64_t i = begin; i < end; i++) {
		uint64_t off = i * c->block, len = c->payload_len - off < c->block ? c->payload_len - off : c->block;
		if (XXH3_64bits(c->payload + off, (size_t)len) != ld64(c->sums + 8 * i)) {
			v->st[tid] = IBP_ERR_CHECKSUM;
			v->bad[tid] = i;
			return;
		}
	}
}

static void verify_rows(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	uint8_t *row = ibp_host_alloc(c->row_bytes, 0);
	if (!row) {
		v->st[tid] = IBP_ERR_NOMEM;
		v->bad[tid] = begin;
		snprintf(v->msg[tid], sizeof(v->msg[tid]), "no memory for a row buffer");
		return;
	}
	for (uint64_t i = begin; i < end; i++) {
		const uint8_t *src;
		uint64_t len;
		uint8_t mode;
		unsigned cl;
		row_at(c, i, &src, &len, &mode, &cl);
		uint64_t want = 0;
		ibp_status_t st = ibpi_decode_row_ext(c->codec, src, len, mode, cl, row, &want);
		if (st == IBP_OK && c->layout == IBP_LAYOUT_PACKED) {
			/* packed rows must fill their extent exactly */
			if (want != len) {
				st = IBP_ERR_CORRUPT;
				snprintf(v->msg[tid], sizeof(v->msg[tid]),
					 "encoded row is %llu bytes, its extent %llu", (ull)want, (ull)len);
			}
		} else if (st != IBP_OK) {
			snprintf(v->msg[tid], sizeof(v->msg[tid]), "%s", ibp_last_error());
		}
		if (st != IBP_OK) {
			v->st[tid] = st;
			v->bad[tid] = i;
			break;
		}
	}
	ibp_host_free(row);
}

static void verify_value_blocks(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	/* one block of scratch per thread; decoded values are thrown away */
	uint64_t most = c->elems < c->chunk_elems ? c->elems : c->chunk_elems;
	uint8_t *buf = ibp_host_alloc(most * ibp_dtype_size(c->dtype), 0);
	if (!buf) {
		v->st[tid] = IBP_ERR_NOMEM;
		v->bad[tid] = begin;
		snprintf(v->msg[tid], sizeof(v->msg[tid]), "no memory for a block buffer");
		return;
	}
	for (uint64_t i = begin; i < end; i++) {
		ibp_status_t st = decode_block(c, i, buf, v->inner);
		if (st != IBP_OK) {
			v->st[tid] = st;
			v->bad[tid] = i;
			snprintf(v->msg[tid], sizeof(v->msg[tid]), "%s", ibp_last_error());
			break;
		}
	}
	ibp_host_free(buf);
}

/* The payload checksums: every PAYLOAD_SUMS block (in parallel), and the
 * whole payload's section checksum when `whole` or when there are no
 * block sums. */
static ibp_status_t check_payload(const ibp_container_t *c, int nthreads, int whole)
{
	ibp_status_t st = IBP_OK;
	if (c->nsums > 0) {
		verify_ctx_t *v = calloc(1, sizeof(*v));
		if (!v)
			return ibpi_fail(IBP_ERR_NOMEM, "%s: payload checksums: out of memory", c->name);
		v->c = c;
		st = ibpi_parallel_for(nthreads, c->nsums, verify_sums, v);
		int worst = -1;
		for (int t = 0; st == IBP_OK && t < IBP_MAX_THREADS; t++)
			if (v->st[t] != IBP_OK && (worst < 0 || v->bad[t] < v->bad[worst]))
				worst = t;
		if (worst >= 0) {
			uint64_t blk = v->bad[worst];
			uint64_t end = (blk + 1) * c->block < c->payload_len ? (blk + 1) * c->block : c->payload_len;
			st = ibpi_fail(IBP_ERR_CHECKSUM, "%s: payload block %llu (bytes %llu..%llu)", c->name,
				      (ull)blk, (ull)(blk * c->block), (ull)end);
		}
		free(v);
	}
	if (st == IBP_OK && (whole || c->nsums == 0)) {
		uint64_t h = XXH3_64bits(c->payload, (size_t)c->payload_len);
		if (h != c->payload_sum)
			st = ibpi_fail(IBP_ERR_CHECKSUM, "%s: payload checksum %016llx, table says %016llx",
				      c->name, (ull)h, (ull)c->payload_sum);
	}
	return st;
}

ibp_status_t ibp_container_verify(const ibp_container_t *c, int nthreads)
{
	if (!c || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_verify: NULL container or nthreads < 0");
	ibp_status_t st = check_payload(c, nthreads, 1);
	if (st != IBP_OK)
		return st;
	verify_ctx_t *v = calloc(1, sizeof(*v));
	if (!v)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: verify: out of memory", c->name);
	v->c = c;
	const char *unit = "row";
	if (st == IBP_OK && c->codec_id == IBP_CODEC_IBP) {
		st = ibpi_parallel_for(nthreads, c->nrows, verify_rows, v);
	} else if (st == IBP_OK) {
		unit = c->codec_id == IBP_CODEC_EXP ? "exp block" : "fp8 stream";
		/* few big blocks: let each decode use the threads */
		v->inner = c->nblk == 1 ? nthreads : 1;
		st = ibpi_parallel_for(c->nblk == 1 ? 1 : nthreads, c->nblk, verify_value_blocks, v);
	}
	/* report the lowest failing row, whichever thread found it */
	int worst = -1;
	for (int t = 0; st == IBP_OK && t < IBP_MAX_THREADS; t++)
		if (v->st[t] != IBP_OK && (worst < 0 || v->bad[t] < v->bad[worst]))
			worst = t;
	if (worst >= 0)
		st = ibpi_fail(v->st[worst], "%s: verify: %s %llu: %s", c->name, unit, (ull)v->bad[worst],
			      v->msg[worst]);
	free(v);
	return st;
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

/* ---- writer ------------------------------------------------------------- */

/* Format minor the writers produce: IBP_FORMAT_MINOR, or 1 for tests of
 * the 1.1 reader (io/container_internal.h). */
static atomic_uint write_minor = IBP_FORMAT_MINOR;

void ibpi_container_write_minor_set(unsigned minor)
{
	atomic_store(&write_minor, minor == 1 ? 1u : IBP_FORMAT_MINOR);
}

typedef struct wsec {
	uint32_t id;
	const void *data;
	uint64_t len, off, sum;
} wsec_t;

static ibp_status_t write_all(int fd, const void *buf, uint64_t len, const char *path)
{
	const uint8_t *p = buf;
	while (len > 0) {
		size_t want = (size_t)(len < (1ull << 30) ? len : (1ull << 30));
		ssize_t w = write(fd, p, want);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return ibpi_fail(IBP_ERR_IO, "%s: write failed: %s", path,
					w < 0 ? strerror(errno) : "no progress");
		p += w;
		len -= (uint64_t)w;
	}
	return IBP_OK;
}

static ibp_status_t write_zeros(int fd, uint64_t n, const char *path)
{
	static const uint8_t zero[4096];
	while (n > 0) {
		uint64_t k = n < sizeof(zero) ? n : sizeof(zero);
		IBP_TRY(write_all(fd, zero, k, path));
		n -= k;
	}
	return IBP_OK;
}

/* Best effort: makes the rename itself durable. The file's bytes are
 * already synced and the rename is atomic, so a failure here cannot leave a
 * partial file, and `path` is complete either way: it is not reported. */
static void sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* Bytes per write() of a large section (see write_file). */
#define WRITE_PIECE (32ull << 20)
/* O_DIRECT needs file offsets, lengths and memory aligned to the device's
 * logical block (512 or 4096 bytes); 4096 covers both. */
#define DIRECT_ALIGN 4096u

/* Sections of at least this many bytes go out with O_DIRECT (the test
 * hook in io/container_internal.h lowers it). */
static _Atomic uint64_t direct_min = 256ull << 20;

void ibpi_container_write_direct_min_set(uint64_t bytes)
{
	atomic_store(&direct_min, bytes ? bytes : 256ull << 20);
}

/* Writes [off, off + len) of the file (the fd's position is at off) from
 * buf, the aligned middle with O_DIRECT where the file system takes it:
 * the bytes go from a reused 4096-aligned bounce buffer to the disk, not
 * through freshly allocated page-cache pages (a kernel copy that took
 * 0.2-2 s for 900 MiB on a VM, against a steady 0.3-0.55 s direct). O_DIRECT
 * is set on fd itself (F_SETFL), not on a second open of the temporary
 * name, which could by then name another file. The unaligned head and
 * tail, and everything after a refusal (EINVAL: no O_DIRECT here), go
 * through the page cache; on return fd's position is off + len. */
static ibp_status_t write_direct(int fd, const char *tmp, const uint8_t *buf, uint64_t len, uint64_t off)
{
	uint64_t a = (off + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN, done = 0;
	if (a - off >= len)
		return write_all(fd, buf, len, tmp);
	const uint64_t end = a - off + (len - (a - off)) / DIRECT_ALIGN * DIRECT_ALIGN;
	const int fl = fcntl(fd, F_GETFL);
	uint8_t *bounce = end > a - off && fl >= 0 ? aligned_alloc(DIRECT_ALIGN, WRITE_PIECE) : NULL;
	if (bounce) {
		ibp_status_t st = write_all(fd, buf, a - off, tmp);
		done = a - off;
		if (st == IBP_OK && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
			while (done < end) {
				uint64_t k = end - done < WRITE_PIECE ? end - done : WRITE_PIECE;
				memcpy(bounce, buf + done, (size_t)k);
				ssize_t w = pwrite(fd, bounce, (size_t)k, (off_t)(off + done));
				if (w < 0 && errno == EINTR)
					continue;
				if (w > 0)
					done += (uint64_t)w;
				if (w <= 0 || (uint64_t)w % DIRECT_ALIGN) {
					/* EINVAL: refused (alignment); a short odd write: the
					 * rest goes through the page cache */
					if (w < 0 && errno != EINVAL)
						st = ibpi_fail(IBP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
					else if (w == 0)
						st = ibpi_fail(IBP_ERR_IO, "%s: write failed: no progress", tmp);
					break;
				}
			}
			if (fcntl(fd, F_SETFL, fl) != 0 && st == IBP_OK)
				st = ibpi_fail(IBP_ERR_IO, "%s: cannot clear O_DIRECT: %s", tmp, strerror(errno));
		}
		free(bounce);
		if (st == IBP_OK && lseek(fd, (off_t)(off + done), SEEK_SET) < 0)
			st = ibpi_fail(IBP_ERR_IO, "%s: seek failed: %s", tmp, strerror(errno));
		IBP_TRY(st);
	}
	/* the tail, or all of it without O_DIRECT */
	for (uint64_t d = done; d < len; d += WRITE_PIECE) {
		uint64_t k = len - d < WRITE_PIECE ? len - d : WRITE_PIECE;
		IBP_TRY(write_all(fd, buf + d, k, tmp));
#ifdef SYNC_FILE_RANGE_WRITE
		/* best effort: a failure here shows at the fsync */
		if (len > WRITE_PIECE)
			(void)sync_file_range(fd, (off_t)(off + d), (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
	}
	return IBP_OK;
}

static ibp_status_t write_file(const char *path, const uint8_t *hdr, const uint8_t *table,
			       uint64_t table_len, const wsec_t *s, unsigned ns)
{
	static atomic_uint counter;
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 64);
	if (!tmp)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory", path);
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		ibp_status_t st = ibpi_fail(IBP_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp,
					   strerror(errno));
		free(tmp);
		return st;
	}
	ibp_status_t st = write_all(fd, hdr, HDR_SIZE, tmp);
	if (st == IBP_OK)
		st = write_all(fd, table, table_len, tmp);
	uint64_t at = HDR_SIZE + table_len;
	for (unsigned i = 0; st == IBP_OK && i < ns; i++) {
		st = write_zeros(fd, s[i].off - at, tmp);
		if (st == IBP_OK && s[i].len >= atomic_load(&direct_min))
			st = write_direct(fd, tmp, s[i].data, s[i].len, s[i].off);
		else if (st == IBP_OK)
			st = write_all(fd, s[i].data, s[i].len, tmp);
		at = s[i].off + s[i].len;
	}
	if (st == IBP_OK && fsync(fd) != 0)
		st = ibpi_fail(IBP_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
	if (close(fd) != 0 && st == IBP_OK)
		st = ibpi_fail(IBP_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
	if (st == IBP_OK && rename(tmp, path) != 0)
		st = ibpi_fail(IBP_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
	if (st != IBP_OK)
		unlink(tmp);
	else
		sync_dir(path);
	free(tmp);
	return st;
}

/* Shape, dtype and layout of a tensor to write; *R gets the row bytes. */
static ibp_status_t check_tensor(const char *path, ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, uint64_t *R)
{
	if (!path || !shape)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_write: NULL path or shape");
	if (ndim < 1 || ndim > IBP_MAX_NDIM)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: ndim %u is outside 1..%u", path, ndim, IBP_MAX_NDIM);
	if (ibp_dtype_size(dtype) == 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown dtype %d", path, (int)dtype);
	if (layout != IBP_LAYOUT_PACKED && layout != IBP_LAYOUT_INPLACE)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown layout %d", path, (int)layout);
	for (unsigned i = 1; i < ndim; i++)
		if (shape[i] == 0)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dimension %u is 0", path, i);
	if (!row_bytes_of(dtype, ndim, shape, R) || *R > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of the shape and dtype %s are too large", path,
				ibp_dtype_name(dtype));
	return IBP_OK;
}

static ibp_status_t check_shape(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				unsigned ndim, const uint64_t *shape, ibp_layout_t layout, uint64_t *R)
{
	if (!path || !codec || !shape)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_write: NULL path, codec or shape");
	IBP_TRY(check_tensor(path, dtype, ndim, shape, layout, R));
	if (*R != ibp_codec_row_bytes(codec))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: shape and dtype %s give rows of %llu bytes, the "
				"codec's are %llu", path, ibp_dtype_name(dtype), (ull)*R,
				(ull)ibp_codec_row_bytes(codec));
	return IBP_OK;
}

/* What the header says besides the section table. */
typedef struct whdr {
	ibp_dtype_t dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t R;
	uint32_t codec, layout, chunk, req;
	uint8_t params[H_CODEC_PARAMS_LEN];
} whdr_t;

/* Lays out the sections `s` (in file order, the payload last), builds the
 * table, the per-block payload checksums and the header, and writes the
 * file. `s` has room for one more entry: the PAYLOAD_SUMS section goes in
 * just before the payload. */
static ibp_status_t write_container(const char *path, const whdr_t *h, wsec_t *s, unsigned ns)
{
	if (ns < 1 || s[ns - 1].id != SEC_PAYLOAD)
		return ibpi_fail(IBP_ERR_INTERNAL, "%s: payload section not last", path);
	const uint8_t *pl = s[ns - 1].data;
	uint64_t plen = s[ns - 1].len, block = BLOCK_DEFAULT;
	uint64_t nsums = plen / block + (plen % block != 0);
	uint8_t *sums = malloc((size_t)(nsums ? 8 * nsums : 1));
	if (!sums)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for checksums", path);
	for (uint64_t i = 0; i < nsums; i++) {
		uint64_t off = i * block, len = plen - off < block ? plen - off : block;
		st64(sums + 8 * i, XXH3_64bits(pl + off, (size_t)len));
	}
	/* one block: the payload's section checksum says it all (1.2) */
	int v11 = atomic_load(&write_minor) == 1;
	if (nsums > 1 || v11) {
		s[ns] = s[ns - 1];
		s[ns - 1] = (wsec_t){ SEC_PAYLOAD_SUMS, sums, 8 * nsums, 0, 0 };
		ns++;
	}

	/* 8-byte sections; a payload of 4 KiB or more on a cache line */
	uint64_t table_len = (uint64_t)ns * SEC_ENTRY, at = HDR_SIZE + table_len;
	uint8_t table[(SEC_KNOWN_MAX + 1) * SEC_ENTRY];
	memset(table, 0, sizeof(table));
	for (unsigned i = 0; i < ns; i++) {
		s[i].off = align_up(at, v11 ? (s[i].id == SEC_PAYLOAD ? 4096u : SEC_ALIGN_11)
					    : s[i].id == SEC_PAYLOAD && s[i].len >= PAYLOAD_ALIGN_MIN ? PAYLOAD_ALIGN
												      : SEC_ALIGN);
		s[i].sum = XXH3_64bits(s[i].data ? s[i].data : "", (size_t)s[i].len);
		at = s[i].off + s[i].len;
		uint8_t *e = table + i * SEC_ENTRY;
		st32(e, s[i].id);
		st32(e + 4, SEC_F_REQUIRED);
		st64(e + 8, s[i].off);
		st64(e + 16, s[i].len);
		st64(e + 24, s[i].sum);
	}

	uint8_t hdr[HDR_SIZE];
	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr + H_MAGIC, MAGIC, sizeof(MAGIC));
	st16(hdr + H_MAJOR, IBP_FORMAT_MAJOR);
	st16(hdr + H_MINOR, v11 ? 1 : IBP_FORMAT_MINOR);
	st32(hdr + H_HDR_SIZE, HDR_SIZE);
	st64(hdr + H_FILE_SIZE, at);
	st32(hdr + H_REQ_FEATURES, h->req | (v11 ? 0 : REQ_V12));
	st32(hdr + H_DTYPE, (uint32_t)h->dtype);
	st32(hdr + H_NDIM, h->ndim);
	for (unsigned i = 0; i < h->ndim; i++)
		st64(hdr + H_DIMS + 8 * i, h->shape[i]);
	st64(hdr + H_ROW_BYTES, h->R);
	st32(hdr + H_CODEC, h->codec);
	st32(hdr + H_LAYOUT, h->layout);
	st32(hdr + H_CHUNK, h->chunk);
	st32(hdr + H_NSECTIONS, ns);
	st64(hdr + H_TABLE_OFF, HDR_SIZE);
	st64(hdr + H_TABLE_SUM, XXH3_64bits(table, (size_t)table_len));
	st64(hdr + H_BLOCK, block);
	memcpy(hdr + H_CODEC_PARAMS, h->params, H_CODEC_PARAMS_LEN);
	st64(hdr + HDR_SIZE - 8, XXH3_64bits(hdr, HDR_SIZE - 8));

	ibp_status_t st = write_file(path, hdr, table, table_len, s, ns);
	free(sums);
	return st;
}

/* Run coding of n words of C bytes (FORMAT.md 2.4.1) into dst, or only
 * its size when dst is NULL. A repeat run pays off from 8 / C + 1 words. */
static uint64_t runs_encode(const uint8_t *w, uint64_t n, unsigned C, uint8_t *dst)
{
	uint64_t size = 0, i = 0, lit = 0, min_rep = 8 / C + 1;
	while (i <= n) {
		uint64_t r = 0;
		if (i < n)
			for (r = 1; i + r < n && r < RUN_MAX && !memcmp(w + (i + r) * C, w + i * C, C); r++)
				;
		if (i == n || r >= min_rep) {
			/* flush the literal words [lit, i) */
			while (lit < i) {
				uint64_t cnt = i - lit < RUN_MAX ? i - lit : RUN_MAX;
				if (dst) {
					st32(dst + size, (uint32_t)cnt | RUN_LITERAL);
					memcpy(dst + size + 4, w + lit * C, (size_t)(cnt * C));
				}
				size += 4 + cnt * C;
				lit += cnt;
			}
			if (i == n)
				break;
			if (dst) {
				st32(dst + size, (uint32_t)r);
				memcpy(dst + size + 4, w + i * C, C);
			}
			size += 4 + C;
			lit = i + r;
		}
		i += r;
	}
	return size;
}

/* The INDEX section (FORMAT.md 2.4.2) of rows given as 1.1 arrays. */
static ibp_status_t build_index(const char *path, ibp_layout_t layout, uint64_t nrows, uint64_t R,
				unsigned k, const uint64_t *offsets, const uint8_t *flags,
				const uint8_t *clusters, uint8_t **out, uint64_t *out_len)
{
	int packed = layout == IBP_LAYOUT_PACKED;
	uint64_t G = 1ull << IDX_GROUP_SHIFT, ng = nrows / G + (nrows % G != 0);
	unsigned cb = bitlen64(k - 1), w = 0;
	uint32_t *refs = packed ? malloc((size_t)(4 * (ng ? ng : 1))) : NULL;
	if (packed && !refs)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for the row index", path);
	/* per group: the shortest coded row is the reference; the widest
	 * difference to it over the file sets the length bits */
	for (uint64_t g = 0; packed && g < ng; g++) {
		uint64_t lo = UINT64_MAX, hi = 0, end = (g + 1) * G < nrows ? (g + 1) * G : nrows;
		for (uint64_t i = g * G; i < end; i++) {
			uint64_t len = offsets[i + 1] - offsets[i];
			if ((flags[i] & IBP_ROW_MODE_MASK) == IBP_ROW_RAW) {
				if (len != R) {
					free(refs);
					return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: a raw row is %llu bytes, "
							"not the row size %llu", path, (ull)i, (ull)len, (ull)R);
				}
				continue;
			}
			lo = len < lo ? len : lo;
			hi = len > hi ? len : hi;
		}
		if (lo == UINT64_MAX)
			lo = hi = 0;
		if (lo > UINT32_MAX)
			lo = UINT32_MAX;
		refs[g] = (uint32_t)lo;
		if (bitlen64(hi - lo) > w)
			w = bitlen64(hi - lo);
	}
	unsigned bits = 2 + cb + w;
	uint64_t head = IDX_HDR + (packed ? 8 * (ng + 1) + 4 * ng : 0), ent = (nrows * bits + 7) / 8;
	uint8_t *p = calloc(1, (size_t)(head + ent + 8));
	if (!p) {
		free(refs);
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for the row index", path);
	}
	p[0] = IDX_GROUP_SHIFT;
	p[1] = (uint8_t)cb;
	p[2] = (uint8_t)w;
	for (uint64_t g = 0; packed && g <= ng; g++)
		st64(p + IDX_HDR + 8 * g, offsets[g * G < nrows ? g * G : nrows]);
	for (uint64_t g = 0; packed && g < ng; g++)
		st32(p + IDX_HDR + 8 * (ng + 1) + 4 * g, refs[g]);
	uint8_t *e = p + head;
	for (uint64_t i = 0; i < nrows; i++) {
		uint64_t mode = flags[i] & IBP_ROW_MODE_MASK, v = mode | (uint64_t)(k > 1 ? clusters[i] : 0) << 2;
		if (packed && mode != IBP_ROW_RAW)
			v |= (offsets[i + 1] - offsets[i] - refs[i / G]) << (2 + cb);
		uint64_t bit = i * bits, cur;
		memcpy(&cur, e + bit / 8, 8);
		cur |= v << (bit % 8);
		memcpy(e + bit / 8, &cur, 8);
	}
	free(refs);
	*out = p;
	*out_len = head + ent;
	return IBP_OK;
}

ibp_status_t ibp_container_write(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				 unsigned ndim, const uint64_t *shape, ibp_layout_t layout,
				 const void *payload, uint64_t payload_len, const uint64_t *offsets,
				 const uint8_t *flags, const uint8_t *clusters)
{
	uint64_t R = 0;
	IBP_TRY(check_shape(path, codec, dtype, ndim, shape, layout, &R));
	uint64_t nrows = shape[0];
	unsigned k = ibp_codec_nclusters(codec), C = ibp_codec_chunk_bytes(codec);
	if (nrows > 0 && (!flags || (k > 1 && !clusters)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: flags (or cluster ids, %u clusters) missing", path, k);
	if (payload_len > 0 && !payload)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: payload is NULL", path);
	for (uint64_t i = 0; i < nrows; i++) {
		if (flags[i] & ~IBP_ROW_MODE_MASK)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: flags 0x%02x has reserved bits",
					path, (ull)i, flags[i]);
		if (k > 1 && clusters[i] >= k)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: cluster %u >= %u", path, (ull)i,
					clusters[i], k);
	}
	if (layout == IBP_LAYOUT_PACKED) {
		if (!offsets || offsets[0] != 0 || offsets[nrows] != payload_len)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: packed layout needs offsets from 0 to the "
					"payload length %llu", path, (ull)payload_len);
		for (uint64_t i = 0; i < nrows; i++)
			if (offsets[i + 1] < offsets[i] || offsets[i + 1] - offsets[i] > R)
				return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: offsets %llu..%llu decrease or "
						"exceed the row size", path, (ull)i, (ull)offsets[i],
						(ull)offsets[i + 1]);
	} else {
		uint64_t want;
		if (offsets)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: inplace layout takes no offsets", path);
		if (__builtin_mul_overflow(nrows, R, &want) || want != payload_len)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: inplace payload must be %llu x %llu bytes",
					path, (ull)nrows, (ull)R);
	}

	/* metadata section, and the Xvals beside it when the codec uses them;
	 * their tables plain or run-coded, whichever is smaller (FORMAT.md 2.4.1) */
	uint64_t words = ibp_codec_nchunks(codec) * C, table = (uint64_t)k * words, n = table / C;
	int xval = ibp_codec_has_xval(codec);
	uint8_t *plain = malloc((size_t)(3 * table));
	if (!plain)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for metadata", path);
	for (unsigned i = 0; i < k; i++) {
		memcpy(plain + i * words, ibp_codec_mask(codec, i), (size_t)words);
		memcpy(plain + table + i * words, ibp_codec_bitval(codec, i), (size_t)words);
		memcpy(plain + 2 * table + i * words, ibp_codec_xval(codec, i), (size_t)words);
	}
	uint64_t rm = runs_encode(plain, n, C, NULL), rb = runs_encode(plain + table, n, C, NULL);
	uint64_t rx = xval ? runs_encode(plain + 2 * table, n, C, NULL) : 0;
	uint64_t ntab = xval ? 3 : 2, coded = META_HDR + rm + rb + rx;
	int v11 = atomic_load(&write_minor) == 1;
	int runs = !v11 && rm + rb + rx < ntab * table && ntab * table <= RUNS_EXPAND * coded + RUNS_SLACK;
	uint64_t meta_len = META_HDR + (runs ? rm + rb : 2 * table), xv_len = xval ? (runs ? rx : table) : 0;
	uint8_t *meta = calloc(1, (size_t)meta_len);
	uint8_t *xv = xval ? malloc((size_t)xv_len) : NULL;
	uint8_t *index = NULL;
	uint64_t index_len = 0;
	ibp_status_t st = IBP_OK;
	if (!meta || (xval && !xv)) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for metadata", path);
		goto out;
	}
	st32(meta, k);
	st32(meta + 4, runs ? META_RUNS : META_PLAIN);
	double thr = ibp_codec_threshold(codec);
	if (!(thr >= 0.0 && thr <= 1.0))
		thr = -1.0;
	uint64_t tbits;
	memcpy(&tbits, &thr, 8);
	st64(meta + 8, tbits);
	if (runs) {
		runs_encode(plain, n, C, meta + META_HDR);
		runs_encode(plain + table, n, C, meta + META_HDR + rm);
		if (xv)
			runs_encode(plain + 2 * table, n, C, xv);
	} else {
		memcpy(meta + META_HDR, plain, (size_t)(2 * table));
		if (xv)
			memcpy(xv, plain + 2 * table, (size_t)table);
	}
	if (!v11) {
		st = build_index(path, layout, nrows, R, k, offsets, flags, clusters, &index, &index_len);
		if (st != IBP_OK)
			goto out;
	}

	/* sections in file order; the payload goes last */
	wsec_t s[SEC_KNOWN_MAX + 1];
	unsigned ns = 0;
	s[ns++] = (wsec_t){ SEC_META, meta, meta_len, 0, 0 };
	if (xv)
		s[ns++] = (wsec_t){ SEC_XVALS, xv, xv_len, 0, 0 };
	if (v11) {
		s[ns++] = (wsec_t){ SEC_FLAGS, flags, nrows, 0, 0 };
		if (k > 1)
			s[ns++] = (wsec_t){ SEC_CLUSTERS, clusters, nrows, 0, 0 };
		if (layout == IBP_LAYOUT_PACKED)
			s[ns++] = (wsec_t){ SEC_OFFSETS, offsets, 8 * (nrows + 1), 0, 0 };
	} else {
		s[ns++] = (wsec_t){ SEC_INDEX, index, index_len, 0, 0 };
	}
	s[ns++] = (wsec_t){ SEC_PAYLOAD, payload, payload_len, 0, 0 };
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_IBP, (uint32_t)layout, C, 0, { 0 } };
	st = write_container(path, &h, s, ns);
out:
	free(plain);
	free(meta);
	free(xv);
	free(index);
	return st;
}

/* Tensor checks shared by the exp and fp8 writers: *elems elements in
 * *nblk blocks of chunk_elems. */
static ibp_status_t check_value_tensor(const char *path, const char *cn, ibp_dtype_t dtype, unsigned ndim,
				       const uint64_t *shape, uint64_t chunk_elems, uint64_t *R, uint64_t *elems,
				       uint64_t *nblk)
{
	IBP_TRY(check_tensor(path, dtype, ndim, shape, IBP_LAYOUT_PACKED, R));
	if (!value_dtype(dtype))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the %s codec takes bf16, f16 or f32, not %s", path, cn,
				ibp_dtype_name(dtype));
	return block_geometry(path, IBP_ERR_INVALID_ARG, shape[0], *R, dtype, chunk_elems, elems, nblk);
}

ibp_status_t ibp_container_write_exp(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     ibp_exp_table_mode_t table_mode, const void *payload,
				     const uint64_t *offsets)
{
	uint64_t R = 0, elems = 0, nblk = 0;
	IBP_TRY(check_value_tensor(path, "exp", dtype, ndim, shape, chunk_elems, &R, &elems, &nblk));
	if ((unsigned)table_mode > IBP_EXP_TABLE_GIVEN)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: exp table mode %d is unknown", path, (int)table_mode);
	if (!offsets || (offsets[nblk] > 0 && !payload))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL offsets or payload", path);
	IBP_TRY(check_exp_offsets(path, IBP_ERR_INVALID_ARG, dtype, elems, chunk_elems, nblk, offsets,
				  offsets[nblk]));
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_EXP, IBP_LAYOUT_PACKED, 0, 0, { 0 } };
	st32(h.params + P_VERSION, PARAMS_VERSION);
	st32(h.params + P_EXP_TABLE, (uint32_t)table_mode);
	st64(h.params + P_EXP_CHUNK, chunk_elems);
	st64(h.params + P_EXP_NBLOCKS, nblk);
	wsec_t s[SEC_KNOWN_MAX + 1];
	s[0] = (wsec_t){ SEC_OFFSETS, offsets, 8 * (nblk + 1), 0, 0 };
	s[1] = (wsec_t){ SEC_PAYLOAD, payload, offsets[nblk], 0, 0 };
	return write_container(path, &h, s, 2);
}

ibp_status_t ibp_container_write_fp8(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     const ibp_fp8_opts_t *opts, const void *payload,
				     uint64_t payload_len)
{
	uint64_t R = 0, elems = 0, nblk = 0, stride = 0, want = 0;
	IBP_TRY(check_value_tensor(path, "fp8", dtype, ndim, shape, chunk_elems, &R, &elems, &nblk));
	if (!opts || (payload_len > 0 && !payload))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL options or payload", path);
	IBP_TRY(fp8_layout(path, IBP_ERR_INVALID_ARG, opts, elems, chunk_elems, nblk, &stride, &want));
	if (payload_len != want)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: fp8 payload is %llu bytes, %llu streams of %llu "
				"elements take %llu", path, (ull)payload_len, (ull)nblk, (ull)chunk_elems, (ull)want);
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_FP8, IBP_LAYOUT_PACKED, 0, REQ_LOSSY, { 0 } };
	st32(h.params + P_VERSION, PARAMS_VERSION);
	st32(h.params + P_FP8_FORMAT, (uint32_t)opts->format);
	st32(h.params + P_FP8_BLOCK, opts->block);
	st32(h.params + P_FP8_FLAGS, (opts->hadamard ? FP8_F_HADAMARD : 0) | (opts->adaptive ? FP8_F_ADAPTIVE : 0));
	st64(h.params + P_FP8_CHUNK, chunk_elems);
	st64(h.params + P_FP8_NSTREAMS, nblk);
	wsec_t s[SEC_KNOWN_MAX + 1];
	s[0] = (wsec_t){ SEC_PAYLOAD, payload, payload_len, 0, 0 };
	return write_container(path, &h, s, 1);
}

ibp_status_t ibp_pack_with_codec(const char *path, const ibp_codec_t *codec, const void *data,
				 ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, int nthreads)
{
	uint64_t R = 0, total;
	IBP_TRY(check_shape(path, codec, dtype, ndim, shape, layout, &R));
	uint64_t nrows = shape[0];
	if (__builtin_mul_overflow(nrows, R, &total) || nrows >= UINT64_MAX / 8 - 1)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu rows of %llu bytes overflow", path, (ull)nrows,
				(ull)R);
	if (total > 0 && !data)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: data is NULL", path);
	unsigned k = ibp_codec_nclusters(codec);
	uint8_t *buf = ibp_host_alloc(total, MEM_ALIGN);
	uint64_t *offsets = malloc((size_t)(8 * (nrows + 1)));
	uint8_t *flags = malloc((size_t)(nrows ? nrows : 1));
	uint8_t *clusters = k > 1 ? malloc((size_t)(nrows ? nrows : 1)) : NULL;
	ibp_status_t st = IBP_OK;
	if (!buf || !offsets || !flags || (k > 1 && !clusters)) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory to encode %llu bytes", path, (ull)total);
		goto out;
	}
	offsets[0] = 0;
	if (nrows > 0) {
		st = ibp_encode_batch(codec, data, nrows, buf, total, offsets, flags, clusters, nthreads);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			st = ibpi_fail(st, "%s: encoding: %s", path, why);
			goto out;
		}
	}
	if (layout == IBP_LAYOUT_INPLACE) {
		/* Spread rows to i * R from the last one down: row i's packed start is
		 * <= i * R, so a move never overwrites a row not yet moved. */
		for (uint64_t i = nrows; i-- > 0;) {
			uint64_t len = offsets[i + 1] - offsets[i];
			memmove(buf + i * R, buf + offsets[i], (size_t)len);
			memset(buf + i * R + len, 0, (size_t)(R - len));
		}
		st = ibp_container_write(path, codec, dtype, ndim, shape, layout, buf, total, NULL, flags,
					 clusters);
	} else {
		st = ibp_container_write(path, codec, dtype, ndim, shape, layout, buf, offsets[nrows], offsets,
					 flags, clusters);
	}
out:
	ibp_host_free(buf);
	free(offsets);
	free(flags);
	free(clusters);
	return st;
}

ibp_status_t ibp_pack(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
		      const uint64_t *shape, const ibp_train_opts_t *opts, ibp_layout_t layout)
{
	if (!path || !shape || ndim < 1 || ndim > IBP_MAX_NDIM || ibp_dtype_size(dtype) == 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_pack: bad path, shape, ndim or dtype");
	uint64_t R;
	if (!row_bytes_of(dtype, ndim, shape, &R) || R == 0 || R > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of the shape are empty or too large", path);
	ibp_codec_t *codec = NULL;
	ibp_status_t st = ibp_codec_train(data, shape[0], R, opts, &codec);
	if (st != IBP_OK) {
		char why[256];
		save_error(why, sizeof(why));
		return ibpi_fail(st, "%s: training: %s", path, why);
	}
	st = ibp_pack_with_codec(path, codec, data, dtype, ndim, shape, layout, opts ? opts->nthreads : 0);
	ibp_codec_free(codec);
	return st;
}

uint64_t ibp_block_rows_default(uint64_t row_elems, uint64_t nrows)
{
	uint64_t r = row_elems ? IBP_BLOCK_ELEMS_DEFAULT / row_elems : 1;
	if (r < 1)
		r = 1;
	if (nrows > 0 && r > nrows)
		r = nrows;
	return r;
}

/* Shared start of the exp/fp8 packers: checks the tensor and picks the
 * block size in elements. */
static ibp_status_t value_pack_shape(const char *path, const char *cn, const void *data, ibp_dtype_t dtype,
				     unsigned ndim, const uint64_t *shape, uint64_t block_rows, uint64_t *R,
				     uint64_t *elems, uint64_t *chunk, uint64_t *nblk)
{
	if (!path || !shape || ndim < 1 || ndim > IBP_MAX_NDIM || ibp_dtype_size(dtype) == 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_pack_%s: bad path, shape, ndim or dtype", cn);
	if (!value_dtype(dtype))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the %s codec takes bf16, f16 or f32, not %s", path, cn,
				ibp_dtype_name(dtype));
	IBP_TRY(check_tensor(path, dtype, ndim, shape, IBP_LAYOUT_PACKED, R));
	uint64_t row_elems = *R / ibp_dtype_size(dtype);
	if (block_rows == 0)
		block_rows = ibp_block_rows_default(row_elems, shape[0]);
	if (__builtin_mul_overflow(block_rows, row_elems, chunk))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu rows per block overflow", path, (ull)block_rows);
	IBP_TRY(block_geometry(path, IBP_ERR_INVALID_ARG, shape[0], *R, dtype, *chunk, elems, nblk));
	if (*elems > 0 && !data)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: data is NULL", path);
	return IBP_OK;
}

ibp_status_t ibp_pack_exp(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			  const uint64_t *shape, const ibp_exp_opts_t *opts, uint64_t block_rows)
{
	uint64_t R = 0, elems = 0, chunk = 0, nblk = 0, bound = 0;
	IBP_TRY(value_pack_shape(path, "exp", data, dtype, ndim, shape, block_rows, &R, &elems, &chunk, &nblk));
	ibp_exp_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_exp_opts_default(&o);
	/* The container's section checksums cover the blocks, so they carry
	 * none: then a block of format version 2 equals version 1's but for the
	 * version byte, and version 1 is written, so that files stay
	 * byte-identical and readable by libibp before checksums (FORMAT.md). */
	o.checksum = 0;
	opts = &o;
	if (elems > 0 && ibp_exp_batch_bound(dtype, elems, chunk, &bound) != IBP_OK) {
		char why[256];
		save_error(why, sizeof(why));
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %s", path, why);
	}
	uint8_t *buf = ibp_host_alloc(bound, EXP_BLOCK_ALIGN);
	uint64_t *off = malloc((size_t)(8 * (nblk + 1)));
	ibp_status_t st = IBP_OK;
	if (!buf || !off) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory to encode %llu elements", path, (ull)elems);
		goto out;
	}
	off[0] = 0;
	if (elems > 0) {
		st = ibp_exp_encode_batch(data, dtype, elems, chunk, opts, buf, bound, off);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			st = ibpi_fail(st, "%s: encoding: %s", path, why);
			goto out;
		}
	}
	for (uint64_t b = 0; b < nblk && st == IBP_OK; b++)
		buf[off[b] + EXPF_OFF_VERSION] = EXPF_VERSION_1;
	st = ibp_container_write_exp(path, dtype, ndim, shape, chunk, opts->table_mode, buf, off);
out:
	ibp_host_free(buf);
	free(off);
	return st;
}

ibp_status_t ibp_pack_fp8(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			  const uint64_t *shape, const ibp_fp8_opts_t *opts, uint64_t block_rows)
{
	uint64_t R = 0, elems = 0, chunk = 0, nblk = 0, stride = 0, plen = 0;
	IBP_TRY(value_pack_shape(path, "fp8", data, dtype, ndim, shape, block_rows, &R, &elems, &chunk, &nblk));
	ibp_fp8_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_fp8_opts_default(&o);
	o.checksum = 0; /* as ibp_pack_exp: version-1 streams, the container's checksums */
	opts = &o;
	IBP_TRY(fp8_layout(path, IBP_ERR_INVALID_ARG, opts, elems, chunk, nblk, &stride, &plen));
	uint8_t *buf = ibp_host_alloc(plen, 64);
	if (!buf)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for %llu encoded bytes", path, (ull)plen);
	size_t esz = ibp_dtype_size(dtype);
	ibp_status_t st = IBP_OK;
	for (uint64_t b = 0; b < nblk && st == IBP_OK; b++) {
		uint64_t n = elems - b * chunk < chunk ? elems - b * chunk : chunk, got = 0;
		uint64_t cap = plen - b * stride < stride ? plen - b * stride : stride;
		st = ibp_fp8_encode((const uint8_t *)data + b * chunk * esz, dtype, n, opts, buf + b * stride, cap,
				    &got);
		if (st != IBP_OK) {
			char why[256];
			save_error(why, sizeof(why));
			st = ibpi_fail(st, "%s: encoding stream %llu: %s", path, (ull)b, why);
		}
	}
	for (uint64_t b = 0; b < nblk && st == IBP_OK; b++)
		buf[b * stride + 4] = TACO_VERSION_1;
	if (st == IBP_OK)
		st = ibp_container_write_fp8(path, dtype, ndim, shape, chunk, opts, buf, plen);
	ibp_host_free(buf);
	return st;
}
