/* exp_format.h - wire constants and layout math of the exponent codec block,
 * shared by the CPU reference (src/exp/exp_codec.c) and the CUDA kernels
 * (kernels/exp_codec.cu) so both compute identical offsets and tables.
 * docs/CODECS.md specifies every field; keep the two in step.
 */
#ifndef IBP_EXP_FORMAT_H
#define IBP_EXP_FORMAT_H

#include <stdint.h>

#include "util/hd.h"

#define EXPF_MAGIC 0x45504249u /* "IBPE" little-endian */
#define EXPF_VERSION 2u        /* written; 1 (no flags, no checksum) still decodes */
#define EXPF_VERSION_1 1u
#define EXPF_HEADER_BYTES 64u
#define EXPF_ALIGN 128u
#define EXPF_GROUP_LOG2 12u
#define EXPF_GROUP (1u << EXPF_GROUP_LOG2) /* elements per escape group */
#define EXPF_MODE_RAW 0u
#define EXPF_MODE_CODED 1u
#define EXPF_MODE_RANS 2u /* version 2 only: rANS-coded symbols (below) */
#define EXPF_NCODES 7u
/* Element counts above this are refused so every size below fits in 64 bits. */
#define EXPF_MAX_ELEMS (1ull << 56)

/* Header field offsets (all little-endian). */
#define EXPF_OFF_MAGIC 0
#define EXPF_OFF_VERSION 4
#define EXPF_OFF_DTYPE 5
#define EXPF_OFF_MODE 6
#define EXPF_OFF_TSRC 7
#define EXPF_OFF_N 8
#define EXPF_OFF_TABLE 16
#define EXPF_OFF_GLOG2 23
#define EXPF_OFF_ESC 24
#define EXPF_OFF_BLOCK 32
#define EXPF_OFF_STATIC 40
#define EXPF_OFF_RESERVED 48 /* version 1: 16 zero bytes; version 2: */
#define EXPF_OFF_FLAGS 48    /* flags (EXPF_FLAG_*), then 7 zero bytes */
#define EXPF_OFF_SUM 56      /* the checksum (util/checksum.h), or 8 zero bytes */
#define EXPF_FLAG_CHECKSUM 1u

/* ibp_dtype_t values (include/ibp/types.h) this codec accepts. */
#define EXPF_DT_F16 9
#define EXPF_DT_BF16 10
#define EXPF_DT_F32 11

/* Per-dtype shape: element bytes, exponent bits/bias/shift, sign+mantissa
 * split into byte sections (lo: 1 or 2 bytes, hi: 0 or 1 byte) and extra
 * sign+mantissa bit-planes (FP16 only: its 11-bit S keeps 3 bits in planes). */
typedef struct expf_shape {
	uint32_t esize;     /* bytes per element */
	uint32_t ebits;     /* exponent field bits */
	uint32_t eshift;    /* exponent field position */
	uint32_t bias;      /* exponent bias */
	uint32_t lo_bytes;  /* bytes of the first S section per element (1 or 2) */
	uint32_t hi_bytes;  /* bytes of the second S section per element (0 or 1) */
	uint32_t sm_planes; /* S bit-planes after the code planes (0 or 3) */
} expf_shape_t;

/* Returns 0 for an unsupported dtype. */
static inline IBP_HD int expf_shape_of(uint32_t dt, expf_shape_t *s)
{
	if (dt == EXPF_DT_BF16) {
		s->esize = 2; s->ebits = 8; s->eshift = 7; s->bias = 127;
		s->lo_bytes = 1; s->hi_bytes = 0; s->sm_planes = 0;
		return 1;
	}
	if (dt == EXPF_DT_F16) {
		s->esize = 2; s->ebits = 5; s->eshift = 10; s->bias = 15;
		s->lo_bytes = 1; s->hi_bytes = 0; s->sm_planes = 3;
		return 1;
	}
	if (dt == EXPF_DT_F32) {
		s->esize = 4; s->ebits = 8; s->eshift = 23; s->bias = 127;
		s->lo_bytes = 2; s->hi_bytes = 1; s->sm_planes = 0;
		return 1;
	}
	return 0;
}

static inline IBP_HD uint64_t expf_align(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

/* Section offsets of a coded block of n elements (n <= EXPF_MAX_ELEMS). */
typedef struct expf_layout {
	uint64_t n;
	uint64_t ngroups;     /* ceil(n / EXPF_GROUP) */
	uint64_t off_prefix;  /* ngroups u64: escapes before each group */
	uint64_t off_planes;  /* (3 + sm_planes) planes of plane_bytes */
	uint64_t plane_bytes; /* 16 * ceil(n / 128); bit i of a plane = element i */
	uint32_t nplanes;
	uint64_t off_lo;      /* n * lo_bytes */
	uint64_t off_hi;      /* n * hi_bytes (FP32 only; else == off_lo) */
	uint64_t static_bytes; /* header + all of the above, 128-aligned */
} expf_layout_t;

static inline IBP_HD void expf_layout_of(const expf_shape_t *s, uint64_t n, expf_layout_t *L)
{
	uint64_t end;
	L->n = n;
	L->ngroups = (n + EXPF_GROUP - 1) >> EXPF_GROUP_LOG2;
	L->off_prefix = EXPF_HEADER_BYTES;
	L->off_planes = expf_align(EXPF_HEADER_BYTES + 8 * L->ngroups, EXPF_ALIGN);
	L->plane_bytes = 16 * ((n + 127) / 128);
	L->nplanes = 3 + s->sm_planes;
	L->off_lo = expf_align(L->off_planes + L->nplanes * L->plane_bytes, EXPF_ALIGN);
	end = L->off_lo + n * s->lo_bytes;
	if (s->hi_bytes) {
		L->off_hi = expf_align(end, EXPF_ALIGN);
		end = L->off_hi + n * s->hi_bytes;
	} else {
		L->off_hi = L->off_lo;
	}
	L->static_bytes = expf_align(end, EXPF_ALIGN);
}

/* Total bytes of a coded block with `esc` escapes. */
static inline IBP_HD uint64_t expf_coded_bytes(const expf_layout_t *L, uint64_t esc)
{
	return expf_align(L->static_bytes + esc, EXPF_ALIGN);
}

/* Total bytes of a raw (passthrough) block. */
static inline IBP_HD uint64_t expf_raw_bytes(const expf_shape_t *s, uint64_t n)
{
	return expf_align(EXPF_HEADER_BYTES + n * s->esize, EXPF_ALIGN);
}

/* Elements in group g of a block of n elements. */
static inline IBP_HD uint64_t expf_group_len(uint64_t n, uint64_t g)
{
	uint64_t b = g << EXPF_GROUP_LOG2;
	return n - b < EXPF_GROUP ? n - b : EXPF_GROUP;
}

/* ---- table derived from sigma (docs/CODECS.md, "sigma-derived table") ----
 * ZipCCL §4.1: the 7-exponent window [2^x, 2^(x+7)) of maximum Gaussian mass
 * has continuous optimum x = log2(sigma) - 5.3607. For an integer window the
 * best start switches from x to x+1 where P(x) = P(x+1), which happens at
 * log2(sigma) = x + 5.71958; so start = floor(log2(sigma) - 4.71958).
 * Written on sigma^2 = f * 2^E (f in [1,2)) with exact operations only, so
 * host and device agree bit for bit:
 *   start = floor((E - 10 + [f >= 2^0.43916]) / 2). */
#define EXPF_SIGMA2_THRESHOLD 1.3558157250823835 /* 2^(2*4.719580554364126 - 9) */

static inline IBP_HD int64_t expf_floor_div2(int64_t d)
{
	return d >= 0 ? d / 2 : -((-d + 1) / 2);
}

/* First biased exponent field of the sigma window for sigma^2 = s2 (>= 0,
 * finite), clamped so the 7 fields stay below the Inf/NaN field. */
static inline IBP_HD uint32_t expf_window_start(double s2, const expf_shape_t *s)
{
	int64_t maxstart = (int64_t)((1u << s->ebits) - 1u) - (int64_t)EXPF_NCODES;
	int64_t start, E, d;
	union { double d; uint64_t u; } v;
	uint64_t ef;
	if (!(s2 > 0.0))
		return 0;
	v.d = s2;
	ef = (v.u >> 52) & 0x7ff;
	if (ef == 0) {
		/* subnormal sigma^2: far below every window */
		return 0;
	}
	if (ef == 0x7ff)
		return (uint32_t)maxstart;
	E = (int64_t)ef - 1023;
	v.u = (v.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* f in [1,2) */
	d = E - 10 + (v.d >= EXPF_SIGMA2_THRESHOLD ? 1 : 0);
	start = expf_floor_div2(d) + (int64_t)s->bias;
	if (start < 0)
		start = 0;
	if (start > maxstart)
		start = maxstart;
	return (uint32_t)start;
}

/* ---- element split / join ---- */
static inline IBP_HD uint32_t expf_field(uint32_t bits, const expf_shape_t *s)
{
	return (bits >> s->eshift) & ((1u << s->ebits) - 1u);
}

/* Sign+mantissa S = sign << mbits | mantissa. */
static inline IBP_HD uint32_t expf_sm(uint32_t bits, const expf_shape_t *s)
{
	uint32_t mbits = s->eshift;
	uint32_t sign = bits >> (s->esize * 8 - 1);
	return (sign << mbits) | (bits & ((1u << mbits) - 1u));
}

static inline IBP_HD uint32_t expf_join(uint32_t sm, uint32_t field, const expf_shape_t *s)
{
	uint32_t mbits = s->eshift;
	uint32_t sign = sm >> mbits;
	return (sign << (s->esize * 8 - 1)) | (field << mbits) | (sm & ((1u << mbits) - 1u));
}

/* Little-endian loads/stores from byte pointers (headers are unaligned-safe). */
static inline IBP_HD uint64_t expf_ld64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline IBP_HD uint32_t expf_ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline IBP_HD void expf_st64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline IBP_HD void expf_st32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The bytes from EXPF_OFF_RESERVED on follow the rules of the header's
 * version (above); a set checksum flag allows any sum. */
static inline IBP_HD int expf_reserved_ok(const uint8_t *h)
{
	uint32_t flags = h[EXPF_OFF_FLAGS];
	if (flags & ~(h[EXPF_OFF_VERSION] == EXPF_VERSION_1 ? 0u : EXPF_FLAG_CHECKSUM))
		return 0;
	for (int i = EXPF_OFF_FLAGS + 1; i < (int)EXPF_HEADER_BYTES; i++)
		if (h[i] && (i < EXPF_OFF_SUM || !(flags & EXPF_FLAG_CHECKSUM)))
			return 0;
	return 1;
}

/* Writes a 64-byte header (version 2, no checksum: the CPU encoder adds
 * it). table may be NULL (raw). */
static inline IBP_HD void expf_write_header(uint8_t *h, uint32_t dt, uint32_t mode, uint32_t tsrc, uint64_t n,
					    const uint8_t *table, uint64_t esc, uint64_t block_bytes,
					    uint64_t static_bytes)
{
	for (int i = 0; i < (int)EXPF_HEADER_BYTES; i++)
		h[i] = 0;
	expf_st32(h + EXPF_OFF_MAGIC, EXPF_MAGIC);
	h[EXPF_OFF_VERSION] = EXPF_VERSION;
	h[EXPF_OFF_DTYPE] = (uint8_t)dt;
	h[EXPF_OFF_MODE] = (uint8_t)mode;
	h[EXPF_OFF_TSRC] = (uint8_t)tsrc;
	expf_st64(h + EXPF_OFF_N, n);
	if (table)
		for (int i = 0; i < (int)EXPF_NCODES; i++)
			h[EXPF_OFF_TABLE + i] = table[i];
	h[EXPF_OFF_GLOG2] = EXPF_GROUP_LOG2;
	expf_st64(h + EXPF_OFF_ESC, esc);
	expf_st64(h + EXPF_OFF_BLOCK, block_bytes);
	expf_st64(h + EXPF_OFF_STATIC, static_bytes);
}

/* Top-7 fields of a 256-bin exponent histogram (larger count first, ties to
 * the smaller field), returned ascending. Fields above fmax are ignored. */
static inline IBP_HD void expf_table_from_hist(const uint64_t *hist, uint32_t fmax, uint8_t *table)
{
	uint32_t taken[8] = {0};
	for (uint32_t k = 0; k < EXPF_NCODES; k++) {
		uint32_t best = 0xffffffffu;
		for (uint32_t f = 0; f <= fmax; f++) {
			if ((taken[f >> 5] >> (f & 31)) & 1u)
				continue;
			if (best == 0xffffffffu || hist[f] > hist[best])
				best = f;
		}
		taken[best >> 5] |= 1u << (best & 31);
	}
	uint32_t k = 0;
	for (uint32_t f = 0; f <= fmax && k < EXPF_NCODES; f++)
		if ((taken[f >> 5] >> (f & 31)) & 1u)
			table[k++] = (uint8_t)f;
}

/* ---- mode 2: rANS blocks (docs/CODECS.md, "rANS blocks") ----
 * Each element is a symbol byte (the exponent field; FP16: its high byte)
 * and rest bytes stored raw. Symbols are cut into segments of 2^16
 * elements; element i of a segment goes to lane i % 16, and each lane is an
 * own rANS stream (32-bit state in [2^16, 2^32), 16-bit words, 12-bit
 * frequencies), so lanes and segments decode independently. Header fields:
 * table[0] = log2 lanes (4), table[1] = scale bits (12), table[2..6] = 0;
 * the escape field = stream bytes; static = offset of the streams. */
#define EXPF_TSRC_RANS 3u /* == IBP_EXP_TABLE_RANS */
#define EXPF_RANS_LANES_LOG2 4u
#define EXPF_RANS_LANES (1u << EXPF_RANS_LANES_LOG2)
#define EXPF_RANS_SCALE_BITS 12u
#define EXPF_RANS_SCALE (1u << EXPF_RANS_SCALE_BITS)
#define EXPF_RANS_L (1u << 16)
#define EXPF_RANS_SEG_LOG2 16u
#define EXPF_RANS_SEG (1ull << EXPF_RANS_SEG_LOG2)
#define EXPF_OFF_RANS_MAP 64  /* 32 bytes: bit k set = symbol k has a frequency */
#define EXPF_OFF_RANS_FREQ 96 /* u16 per set bit, ascending symbol order */
/* Per segment: u64 end of its streams (from static_bytes), u16 per lane length. */
#define EXPF_RANS_DIR_BYTES (8u + 2u * EXPF_RANS_LANES)

typedef struct expf_rans_layout {
	uint64_t n;
	uint64_t nseg;         /* ceil(n / 2^16) */
	uint64_t nsym;         /* symbols with a frequency */
	uint64_t off_dir;      /* nseg * EXPF_RANS_DIR_BYTES: the segments' stream ends and lane lengths */
	uint64_t off_rest;     /* n * rest_bytes */
	uint32_t rest_bytes;   /* 1 (BF16, FP16) or 3 (FP32) */
	uint64_t static_bytes; /* where the streams start, 128-aligned */
} expf_rans_layout_t;

static inline IBP_HD void expf_rans_layout_of(const expf_shape_t *s, uint64_t n, uint64_t nsym,
					      expf_rans_layout_t *R)
{
	R->n = n;
	R->nsym = nsym;
	R->nseg = (n + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2;
	R->off_dir = expf_align(EXPF_OFF_RANS_FREQ + 2 * nsym, 8);
	R->rest_bytes = s->esize == 4 ? 3u : 1u;
	R->off_rest = expf_align(R->off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * R->nseg, EXPF_ALIGN);
	R->static_bytes = expf_align(R->off_rest + n * R->rest_bytes, EXPF_ALIGN);
}

/* Most stream bytes n elements can take: a 4-byte state per lane and at
 * most one word per element. */
static inline IBP_HD uint64_t expf_rans_max_stream(uint64_t n)
{
	uint64_t nseg = (n + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2;
	return nseg * EXPF_RANS_LANES * 4 + 2 * n;
}

/* Symbols of lane j in a segment of m elements. */
static inline IBP_HD uint64_t expf_rans_lane_syms(uint64_t m, uint32_t j)
{
	return m > j ? (m - 1 - j) / EXPF_RANS_LANES + 1 : 0;
}

/* Smallest rANS block of n >= 1 elements: one symbol, 4-byte lanes. */
static inline IBP_HD uint64_t expf_rans_min_bytes(const expf_shape_t *s, uint64_t n)
{
	expf_rans_layout_t R;
	expf_rans_layout_of(s, n, 1, &R);
	return expf_align(R.static_bytes + 4ull * EXPF_RANS_LANES * R.nseg, EXPF_ALIGN);
}

/* Frequencies summing to EXPF_RANS_SCALE, >= 1 exactly where hist > 0 (n =
 * the sum of hist, >= 1); returns the symbols with one. Shared so the CPU
 * and GPU encoders pick the same table: only IEEE-exact double operations
 * (no contractible multiply-add changes a result). */
static inline IBP_HD uint32_t expf_rans_quantize(const uint64_t *hist, uint64_t n, uint16_t *freq)
{
	uint32_t nsym = 0, sum = 0;
	for (int k = 0; k < 256; k++) {
		freq[k] = 0;
		if (!hist[k])
			continue;
		double q = (double)hist[k] * EXPF_RANS_SCALE / (double)n + 0.5;
		uint32_t f = q >= EXPF_RANS_SCALE ? EXPF_RANS_SCALE : (uint32_t)q;
		freq[k] = (uint16_t)(f ? f : 1);
		sum += freq[k];
		nsym++;
	}
	/* fix the sum one step at a time where it costs the fewest bits:
	 * count * log(f / (f - 1)) ~ count / (f - 1/2) (<= 256 + 2 steps) */
	while (sum > EXPF_RANS_SCALE) {
		int best = -1;
		double bc = 0;
		for (int k = 0; k < 256; k++)
			if (freq[k] > 1) {
				double c = (double)hist[k] / (2.0 * freq[k] - 1.0);
				if (best < 0 || c < bc)
					best = k, bc = c;
			}
		freq[best]--;
		sum--;
	}
	while (sum < EXPF_RANS_SCALE) {
		int best = -1;
		double bc = 0;
		for (int k = 0; k < 256; k++)
			if (freq[k]) {
				double c = (double)hist[k] / (2.0 * freq[k] + 1.0);
				if (best < 0 || c > bc)
					best = k, bc = c;
			}
		freq[best]++;
		sum++;
	}
	return nsym;
}

/* Table mode RANS's fallback from the symbol histogram sh (expf_rans_sym
 * counts of n elements): the HISTOGRAM table (FP16 symbols fold to their
 * exponent field) and the size of the block HISTOGRAM mode writes with it,
 * coded or raw; a rANS block is kept only below that size. */
static inline IBP_HD uint64_t expf_rans_fallback(const uint64_t *sh, const expf_shape_t *s, uint32_t dt, uint64_t n,
						 uint8_t *table)
{
	uint64_t eh[256], in = 0;
	expf_layout_t L;
	for (uint32_t k = 0; k < 256; k++)
		eh[k] = 0;
	for (uint32_t k = 0; k < 256; k++)
		eh[dt == EXPF_DT_F16 ? (k >> 2) & 31u : k] += sh[k];
	expf_table_from_hist(eh, (1u << s->ebits) - 1u, table);
	for (uint32_t k = 0; k < EXPF_NCODES; k++)
		in += eh[table[k]];
	expf_layout_of(s, n, &L);
	uint64_t raw = expf_raw_bytes(s, n), coded = expf_coded_bytes(&L, n - in);
	return L.static_bytes < raw && coded < raw ? coded : raw;
}

/* A decode-table entry (slot s of a symbol with frequency f whose slots
 * start at cum: k = s - cum) and the decode step it drives: the CPU
 * decoder, its AVX2 loop's layout and the GPU decoder share both. */
static inline IBP_HD uint32_t expf_rans_entry(uint32_t sym, uint32_t f, uint32_t k)
{
	return sym | (f - 1u) << 8 | k << 20;
}

/* The state after decoding the symbol of entry te (te & 0xff), before renormalisation. */
static inline IBP_HD uint32_t expf_rans_step(uint32_t x, uint32_t te)
{
	return (((te >> 8) & 0xfffu) + 1u) * (x >> EXPF_RANS_SCALE_BITS) + (te >> 20);
}

/* The header rules of a rANS block (after the checks every block gets):
 * EXPF_RANS_HDR_OK, or which rule the fields break. h holds avail bytes;
 * streams, stat and block are the header's escape, static and block
 * fields. Fills *R. The CPU parser and the GPU decoder share it. */
enum {
	EXPF_RANS_HDR_OK = 0,
	EXPF_RANS_HDR_VERSION, /* mode 2 in a version 1 header */
	EXPF_RANS_HDR_PARAMS,  /* table source or lane/scale parameters not as written */
	EXPF_RANS_HDR_EMPTY,   /* 0 elements */
	EXPF_RANS_HDR_SHORT,   /* fewer bytes than the symbol map's end */
	EXPF_RANS_HDR_STATIC,  /* no symbol, or the static size does not follow from the map */
	EXPF_RANS_HDR_STREAMS  /* stream bytes out of range, or the block size not what they make */
};

static inline IBP_HD int expf_rans_header_rule(const uint8_t *h, uint64_t avail, const expf_shape_t *s,
						uint64_t n, uint64_t streams, uint64_t stat, uint64_t block,
						expf_rans_layout_t *R)
{
	if (h[EXPF_OFF_VERSION] == EXPF_VERSION_1)
		return EXPF_RANS_HDR_VERSION;
	if (h[EXPF_OFF_TSRC] != EXPF_TSRC_RANS || h[EXPF_OFF_TABLE] != EXPF_RANS_LANES_LOG2 ||
	    h[EXPF_OFF_TABLE + 1] != EXPF_RANS_SCALE_BITS)
		return EXPF_RANS_HDR_PARAMS;
	for (uint32_t i = 2; i < EXPF_NCODES; i++)
		if (h[EXPF_OFF_TABLE + i])
			return EXPF_RANS_HDR_PARAMS;
	if (n == 0)
		return EXPF_RANS_HDR_EMPTY;
	if (avail < EXPF_OFF_RANS_FREQ)
		return EXPF_RANS_HDR_SHORT;
	uint64_t nsym = 0;
	for (uint32_t i = 0; i < 32; i++)
		for (uint32_t v = h[EXPF_OFF_RANS_MAP + i]; v; v &= v - 1)
			nsym++;
	expf_rans_layout_of(s, n, nsym, R);
	if (nsym == 0 || stat != R->static_bytes)
		return EXPF_RANS_HDR_STATIC;
	if (streams < 4ull * EXPF_RANS_LANES * R->nseg || streams > expf_rans_max_stream(n) ||
	    block != expf_align(stat + streams, EXPF_ALIGN))
		return EXPF_RANS_HDR_STREAMS;
	return EXPF_RANS_HDR_OK;
}

/* Symbol, rest and join of element bits (BF16: sign+mantissa byte; FP16:
 * low byte; FP32: sign << 23 | mantissa). */
static inline IBP_HD uint32_t expf_rans_sym(uint32_t b, uint32_t dt)
{
	return dt == EXPF_DT_F16 ? (b >> 8) & 0xffu : dt == EXPF_DT_BF16 ? (b >> 7) & 0xffu : (b >> 23) & 0xffu;
}

static inline IBP_HD uint32_t expf_rans_rest(uint32_t b, uint32_t dt)
{
	if (dt == EXPF_DT_F16)
		return b & 0xffu;
	if (dt == EXPF_DT_BF16)
		return ((b >> 8) & 0x80u) | (b & 0x7fu);
	return ((b >> 31) << 23) | (b & 0x7fffffu);
}

static inline IBP_HD uint32_t expf_rans_join(uint32_t sym, uint32_t rest, uint32_t dt)
{
	if (dt == EXPF_DT_F16)
		return sym << 8 | rest;
	if (dt == EXPF_DT_BF16)
		return ((rest & 0x80u) << 8) | (sym << 7) | (rest & 0x7fu);
	return ((rest >> 23) << 31) | (sym << 23) | (rest & 0x7fffffu);
}

#endif /* IBP_EXP_FORMAT_H */
