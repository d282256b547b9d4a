/* container_format.h - the `.ibp` container's wire format (docs/FORMAT.md
 * section 2: constants, little-endian fields) and the object its reader
 * fills, shared by the files of src/io that read, verify and write it:
 * container_read.c (open and parse), container_rows.c (rows, blocks, the
 * row map, accessors), container_verify.c, container_write.c, container_pack.c
 * and the geometry both sides check (container_format.c). Private to src/io.
 */
#ifndef IBP_CONTAINER_FORMAT_H
#define IBP_CONTAINER_FORMAT_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ibp/codec.h"
#include "ibp/container.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/types.h"
#include "util/error.h"
#include "exp/exp_rows.h"

/* ---- wire constants (FORMAT.md 2.2 - 2.6) ------------------------------ */

static const uint8_t MAGIC[8] __attribute__((unused)) = { 0x89, 'I', 'B', 'P', 0x0D, 0x0A, 0x1A, 0x0A };

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
#define P_EXPR_TABLE 4 /* codec 4: the seven exponent fields */
#define P_EXPR_SLOT 16 /* codec 4: u64 K, the escape bytes of a row's slot */
#define P_EXPR_USED 24
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

static const char *const SEC_NAME[SEC_KNOWN_MAX + 1] __attribute__((unused)) = {
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

static inline const char *codec_name(ibp_codec_id_t id)
{
	return id == IBP_CODEC_IBP ? "ibp" : id == IBP_CODEC_EXP ? "exp" : id == IBP_CODEC_EXP_ROWS ? "exp-rows" : "fp8";
}

static inline int value_dtype(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_BF16 || dt == IBP_DTYPE_F16 || dt == IBP_DTYPE_F32;
}

/* ---- little-endian helpers -------------------------------------------- */

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

static inline int all_zero(const uint8_t *p, uint64_t n)
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
	ibpi_exprows_t xr;        /* exp rows: the row form (xr.slot bytes a row) */
	const uint8_t *xovf;      /* exp rows: the overflow area after the slots */
	uint64_t xovf_len;
};

/* Copies the thread's current detail so it can be quoted in a new one. */
static inline void save_error(char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", ibp_last_error());
}

/* Row bytes of a shape: dims 1.. times the element size; 0 on overflow. */
static inline int row_bytes_of(ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t r = ibp_dtype_size(dtype);
	for (unsigned i = 1; i < ndim; i++)
		if (__builtin_mul_overflow(r, shape[i], &r))
			return 0;
	*out = r;
	return 1;
}

/* ---- compact index and mapping helpers (reader and rows) ---- */

static inline unsigned bitlen64(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0u; }

/* Entry i of a compact index: mode, cluster, length field. */
static inline uint64_t ix_entry(const ibp_container_t *c, uint64_t i)
{
	uint64_t bit = i * c->ix_bits, byte = bit / 8, v = 0;
	uint64_t avail = c->ix_ent_len - byte;
	memcpy(&v, c->ix_ent + byte, (size_t)(avail < 8 ? avail : 8));
	v >>= bit % 8;
	return c->ix_bits >= 64 ? v : v & ((1ull << c->ix_bits) - 1);
}
/* Encoded length of a row from its entry and its group's reference. */
static inline uint64_t ix_len(const ibp_container_t *c, uint64_t e, uint64_t ref)
{
	return (e & IBP_ROW_MODE_MASK) == IBP_ROW_RAW ? c->row_bytes : ref + (e >> (2 + c->ix_cb));
}
/* Asks for transparent huge pages on the 2 MiB pages inside a file read
 * into memory (as NumPy does for large arrays): random rows of a large
 * table otherwise miss the TLB on almost every row, which measured a
 * quarter of a random gather's time (docs/BENCHMARKS.md). Advice only:
 * nothing changes where the kernel gives none. */
static inline void advise_huge(void *p, uint64_t size)
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

/* ---- across the files of the container ---- */

/* block geometry, exp block offsets and fp8 stream layout: the checks the
 * reader makes and the writer relies on (container_format.c) */
ibp_status_t ibpi_ctr_block_geometry(const char *name, ibp_status_t bad, uint64_t nrows, uint64_t row_bytes,
				   ibp_dtype_t dtype, uint64_t chunk_elems, uint64_t *elems, uint64_t *nblk);
/* Writes an exp-rows container (codec 4) from rows already encoded in
 * the slot form of `x` (its table and K are stored): payload_len bytes,
 * the nrows slots and the overflow area, checked as the reader does.
 * Errors as ibp_container_write. */
ibp_status_t ibpi_ctr_write_exp_rows(const char *path, const ibpi_exprows_t *x, unsigned ndim,
				     const uint64_t *shape, const uint8_t *payload, uint64_t payload_len);

/* The payload of an exp-rows container: nrows slots of x->slot bytes,
 * then the overflow area (*ovf_len bytes, the rest). `bad` is the status
 * of a failure (a payload shorter than the slots). */
ibp_status_t ibpi_ctr_check_exprows_slots(const char *name, ibp_status_t bad, const ibpi_exprows_t *x,
					  uint64_t nrows, uint64_t payload_len, uint64_t *ovf_len);
ibp_status_t ibpi_ctr_check_exp_offsets(const char *name, ibp_status_t bad, ibp_dtype_t dt, uint64_t elems,
				      uint64_t chunk, uint64_t nblk, const uint64_t *off, uint64_t plen);
ibp_status_t ibpi_ctr_fp8_layout(const char *name, ibp_status_t bad, const ibp_fp8_opts_t *o, uint64_t elems,
			       uint64_t chunk, uint64_t nblk, uint64_t *stride, uint64_t *plen);
/* The payload's checksums (whole: also every row or block decoded);
 * container_verify.c, called by the reader at open with IBP_OPEN_VERIFY. */
ibp_status_t ibpi_ctr_check_payload(const ibp_container_t *c, int nthreads, int whole);
/* Value block b decoded into dst; row `row`'s bytes and metadata
 * (container_rows.c). */
ibp_status_t ibpi_ctr_decode_block(const ibp_container_t *c, uint64_t b, void *dst, int nthreads);
void ibpi_ctr_row_at(const ibp_container_t *c, uint64_t row, const uint8_t **src, uint64_t *len,
		   uint8_t *mode, unsigned *cl);
/* A tensor's shape against the codec (or none) and the layout; *R = row
 * bytes (container_write.c). */
ibp_status_t ibpi_ctr_check_shape(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				unsigned ndim, const uint64_t *shape, ibp_layout_t layout, uint64_t *R);
ibp_status_t ibpi_ctr_check_tensor(const char *path, ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, uint64_t *R);

#endif /* IBP_CONTAINER_FORMAT_H */
