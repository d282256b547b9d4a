/* exp_rans.c - mode 2 of the exponent codec (exp_rans.h): interleaved rANS
 * over symbol bytes. State x in [2^16, 2^32), 16-bit renormalisation (at
 * most one word per symbol each way), 12-bit frequencies. The encoder
 * divides by a reciprocal multiply that is exact for every 32-bit x; the
 * decoder uses one 4096-entry table (symbol, frequency, slot - cumulative).
 * Lanes and segments are independent so threads (and later a GPU warp)
 * take them apart.
 */
#include <stdlib.h>
#include <string.h>

#include "exp/exp_codec_internal.h"
#include "exp/exp_rans.h"
#include "exp/exp_rans_avx2.h"
#include "util/error.h"
#include "util/parallel.h"

#if defined(__x86_64__) || defined(_M_X64)
#define EXP_HAVE_AVX2_BUILD 1
#else
#define EXP_HAVE_AVX2_BUILD 0
#endif

#define LANES EXPF_RANS_LANES
#define SCALE EXPF_RANS_SCALE
#define RL EXPF_RANS_L
/* A segment's bytes of stream at most: per lane a state and a word per symbol. */
#define LANE_CAP (4u + 2u * (uint32_t)(EXPF_RANS_SEG / LANES))
/* Below this many segments per thread, threads cost more than they save. */
#define MIN_SEGS_PER_THREAD 2u

static inline uint32_t ld16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint64_t seg_len(uint64_t n, uint64_t g)
{
	uint64_t b = g << EXPF_RANS_SEG_LOG2;
	return n - b < EXPF_RANS_SEG ? n - b : EXPF_RANS_SEG;
}

/* ------------------------------------------------------------ frequencies */

static inline __attribute__((always_inline)) void hist_dt(const uint8_t *src, uint64_t n, uint64_t *hist,
								   const uint32_t dt)
{
	uint32_t h[4][256];
	const uint32_t es = dt == EXPF_DT_F32 ? 4u : 2u;
	memset(h, 0, sizeof(h));
	memset(hist, 0, 256 * sizeof(uint64_t));
	uint64_t i = 0;
	while (i < n) {
		/* flush before a u32 bin could overflow */
		uint64_t end = n - i > (1ull << 30) ? i + (1ull << 30) : n;
		for (; i + 4 <= end; i += 4)
			for (int j = 0; j < 4; j++)
				h[j][expf_rans_sym(exp_ld_elem(src + (i + j) * es, es), dt)]++;
		for (; i < end; i++)
			h[0][expf_rans_sym(exp_ld_elem(src + i * es, es), dt)]++;
		for (int f = 0; f < 256; f++) {
			hist[f] += (uint64_t)h[0][f] + h[1][f] + h[2][f] + h[3][f];
			h[0][f] = h[1][f] = h[2][f] = h[3][f] = 0;
		}
	}
}

void ibpi_exp_rans_hist(const uint8_t *src, uint32_t dt, uint64_t n, uint64_t hist[256])
{
	if (dt == EXPF_DT_BF16)
		hist_dt(src, n, hist, EXPF_DT_BF16);
	else if (dt == EXPF_DT_F16)
		hist_dt(src, n, hist, EXPF_DT_F16);
	else
		hist_dt(src, n, hist, EXPF_DT_F32);
}

/* ----------------------------------------------------------------- encode */

typedef struct enc_sym {
	uint64_t rcp;  /* ceil(2^64 / f); f = 1: 2^64 - 1 */
	uint32_t xm1;  /* (f << 20) - 1: renormalise above it */
	uint16_t cum;
	uint16_t cmpl; /* SCALE - f */
	uint32_t one;  /* f == 1: the product's high half is x - 1 */
} enc_sym_t;

typedef struct enc_ctx {
	const uint8_t *src;
	uint8_t *rest;    /* dst + off_rest */
	uint8_t *scratch; /* per segment: seg_cap bytes */
	uint64_t seg_cap, lane_cap, n;
	uint64_t *lens;   /* nseg * LANES stream lengths */
	int nomem[IBP_MAX_THREADS];
	uint32_t dt;
	enc_sym_t sym[256];
} enc_ctx_t;

/* x / f exactly for every 32-bit x (x >= 1): with m = ceil(2^64/f) =
 * (2^64 + e)/f, e < f <= 2^12, the error x*e/2^64 < 1/f never crosses an
 * integer; f = 1 takes 2^64 - 1 and adds the one it loses. */
static inline uint32_t enc_put(uint32_t x, const enc_sym_t *e, uint8_t **pp)
{
	/* branch-free: the word is always stored below the stream (room for
	 * one per symbol is reserved) and kept only when it is emitted */
	uint32_t emit = x > e->xm1;
	uint16_t w = (uint16_t)x;
	memcpy(*pp - 2, &w, 2);
	*pp -= emit << 1;
	x = emit ? x >> 16 : x;
	uint32_t q = (uint32_t)(((unsigned __int128)x * e->rcp) >> 64) + e->one;
	return x + e->cum + q * e->cmpl;
}

static inline __attribute__((always_inline)) void enc_segment_dt(const enc_ctx_t *c, uint64_t g, uint8_t *slot,
								   uint8_t *sy, const uint32_t dt)
{
	const uint32_t es = dt == EXPF_DT_F32 ? 4u : 2u, rb = dt == EXPF_DT_F32 ? 3u : 1u;
	const uint64_t base = g << EXPF_RANS_SEG_LOG2, m = seg_len(c->n, g);
	const uint8_t *p = c->src + base * es;
	uint8_t *ptr[LANES];
	uint32_t x[LANES];
	for (uint32_t j = 0; j < LANES; j++) {
		ptr[j] = slot + (j + 1) * c->lane_cap;
		x[j] = RL;
	}
	/* split first (a forward pass that vectorises): symbols to sy, rest
	 * bytes to their section */
	uint8_t *r = c->rest + base * rb;
	for (uint64_t i = 0; i < m; i++) {
		uint32_t b = exp_ld_elem(p + i * es, es), v = expf_rans_rest(b, dt);
		sy[i] = (uint8_t)expf_rans_sym(b, dt);
		if (rb == 1) {
			r[i] = (uint8_t)v;
		} else {
			r[3 * i] = (uint8_t)v;
			r[3 * i + 1] = (uint8_t)(v >> 8);
			r[3 * i + 2] = (uint8_t)(v >> 16);
		}
	}
	/* symbols go in backwards so the decoder reads forwards */
	const uint64_t full = m & ~(uint64_t)(LANES - 1);
	for (uint64_t i = m; i-- > full;)
		x[i & (LANES - 1)] = enc_put(x[i & (LANES - 1)], &c->sym[sy[i]], &ptr[i & (LANES - 1)]);
	/* lanes are independent: 8 at a time keep their states in registers */
	for (uint32_t h = 0; h < LANES; h += 8)
		for (uint64_t i = full; i > 0; i -= LANES)
			for (int j = 7; j >= 0; j--)
				x[h + (uint32_t)j] = enc_put(x[h + (uint32_t)j], &c->sym[sy[i - LANES + h + (uint64_t)j]],
							     &ptr[h + (uint32_t)j]);
	/* the final states lead each lane; lanes packed to the slot's front */
	uint64_t at = 0;
	for (uint32_t j = 0; j < LANES; j++) {
		ptr[j] -= 4;
		for (int b = 0; b < 4; b++)
			ptr[j][b] = (uint8_t)(x[j] >> (8 * b));
		uint64_t len = (uint64_t)(slot + (j + 1) * c->lane_cap - ptr[j]);
		memmove(slot + at, ptr[j], len);
		at += len;
		c->lens[g * LANES + j] = len;
	}
}

/* Segment g's lanes, packed at the front of slot (seg_cap bytes); sy
 * holds a segment's symbols meanwhile. */
static void enc_segment(const enc_ctx_t *c, uint64_t g, uint8_t *slot, uint8_t *sy)
{
	if (c->dt == EXPF_DT_BF16)
		enc_segment_dt(c, g, slot, sy, EXPF_DT_BF16);
	else if (c->dt == EXPF_DT_F16)
		enc_segment_dt(c, g, slot, sy, EXPF_DT_F16);
	else
		enc_segment_dt(c, g, slot, sy, EXPF_DT_F32);
}

static void enc_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	enc_ctx_t *c = ctx;
	uint8_t *sy = malloc(EXPF_RANS_SEG);
	c->nomem[tid] = !sy;
	for (uint64_t g = begin; sy && g < end; g++)
		enc_segment(c, g, c->scratch + g * c->seg_cap, sy);
	free(sy);
}

ibp_status_t ibpi_exp_rans_encode(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
				  const uint64_t hist[256], uint64_t limit, int nthreads, uint8_t *dst,
				  uint64_t *size)
{
	uint16_t freq[256];
	expf_rans_layout_t R;
	*size = 0;
	if (n == 0)
		return IBP_OK; /* raw is smaller */
	uint32_t nsym = expf_rans_quantize(hist, n, freq);
	expf_rans_layout_of(s, n, nsym, &R);
	if (R.static_bytes + 4ull * LANES * R.nseg >= limit)
		return IBP_OK; /* cannot win even with empty streams */
	enc_ctx_t *c = malloc(sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_encode: no memory for the rANS state");
	c->src = src;
	c->rest = dst + R.off_rest;
	c->n = n;
	c->dt = dt;
	c->lane_cap = R.nseg == 1 ? 4 + 2 * ((n + LANES - 1) / LANES) : LANE_CAP;
	c->seg_cap = LANES * c->lane_cap;
	for (uint32_t k = 0, cum = 0; k < 256; k++) {
		uint32_t f = freq[k];
		enc_sym_t *e = &c->sym[k];
		memset(e, 0, sizeof(*e));
		if (!f)
			continue;
		/* ceil(2^64 / f), also where f divides 2^64 */
		e->rcp = f == 1 ? UINT64_MAX : UINT64_MAX / f + 1;
		e->one = f == 1;
		e->xm1 = (uint32_t)(((uint64_t)f << 20) - 1);
		e->cum = (uint16_t)cum;
		e->cmpl = (uint16_t)(SCALE - f);
		cum += f;
	}
	uint64_t per = R.nseg / MIN_SEGS_PER_THREAD;
	int nt = ibpi_parallel_threads(nthreads, per ? per : 1);
	/* one thread: one segment's scratch, streams straight to their place
	 * (stopping once the block cannot be smaller than `limit`) */
	uint64_t sycap = R.nseg == 1 ? n : EXPF_RANS_SEG; /* one segment's symbols (one thread) */
	c->scratch = malloc(nt == 1 ? c->seg_cap + sycap : R.nseg * c->seg_cap);
	c->lens = malloc(R.nseg * LANES * sizeof(uint64_t));
	if (!c->scratch || !c->lens) {
		free(c->scratch);
		free(c->lens);
		free(c);
		return ibpi_fail(IBP_ERR_NOMEM, "exp_encode: no memory for %llu rANS segments",
				(unsigned long long)R.nseg);
	}
	ibp_status_t st = IBP_OK;
	uint64_t streams = 0;
	if (nt == 1) {
		for (uint64_t g = 0; g < R.nseg && R.static_bytes + streams < limit; g++) {
			uint64_t len = 0;
			enc_segment(c, g, c->scratch, c->scratch + c->seg_cap);
			for (uint32_t j = 0; j < LANES; j++)
				len += c->lens[g * LANES + j];
			if (R.static_bytes + streams + len >= limit) {
				streams += len; /* too big: stop */
				break;
			}
			memcpy(dst + R.static_bytes + streams, c->scratch, len);
			streams += len;
		}
	} else {
		st = ibpi_parallel_for(nt, R.nseg, enc_task, c);
		for (int t = 0; st == IBP_OK && t < ibpi_parallel_threads(nt, R.nseg); t++)
			if (c->nomem[t])
				st = ibpi_fail(IBP_ERR_NOMEM, "exp_encode: no memory for a rANS segment's symbols");
		for (uint64_t k = 0; st == IBP_OK && k < R.nseg * LANES; k++)
			streams += c->lens[k];
	}
	uint64_t block = expf_align(R.static_bytes + streams, EXPF_ALIGN);
	if (st == IBP_OK && block < limit) {
		uint8_t table[EXPF_NCODES] = {EXPF_RANS_LANES_LOG2, EXPF_RANS_SCALE_BITS, 0, 0, 0, 0, 0};
		expf_write_header(dst, dt, EXPF_MODE_RANS, EXPF_TSRC_RANS, n, table, streams, block, R.static_bytes);
		memset(dst + EXPF_OFF_RANS_MAP, 0, R.off_dir - EXPF_OFF_RANS_MAP);
		uint64_t at = EXPF_OFF_RANS_FREQ;
		for (uint32_t k = 0; k < 256; k++)
			if (freq[k]) {
				dst[EXPF_OFF_RANS_MAP + (k >> 3)] |= (uint8_t)(1u << (k & 7));
				dst[at] = (uint8_t)freq[k];
				dst[at + 1] = (uint8_t)(freq[k] >> 8);
				at += 2;
			}
		uint64_t end = 0;
		for (uint64_t g = 0; g < R.nseg; g++) {
			uint8_t *d = dst + R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
			for (uint32_t j = 0; j < LANES; j++) {
				uint64_t len = c->lens[g * LANES + j]; /* <= 4 + 2 * 4096 */
				d[8 + 2 * j] = (uint8_t)len;
				d[9 + 2 * j] = (uint8_t)(len >> 8);
				end += len;
			}
			expf_st64(d, end);
		}
		uint64_t pend = R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * R.nseg;
		memset(dst + pend, 0, R.off_rest - pend);
		pend = R.off_rest + n * R.rest_bytes;
		memset(dst + pend, 0, R.static_bytes - pend);
		at = R.static_bytes;
		for (uint64_t g = 0; g < R.nseg; g++) {
			uint64_t len = 0;
			for (uint32_t j = 0; j < LANES; j++)
				len += c->lens[g * LANES + j];
			if (nt > 1)
				memcpy(dst + at, c->scratch + g * c->seg_cap, len);
			at += len;
		}
		memset(dst + at, 0, block - at);
		*size = block;
	}
	free(c->scratch);
	free(c->lens);
	free(c);
	return st;
}

/* ----------------------------------------------------------------- decode */

ibp_status_t ibpi_exp_rans_parse(const uint8_t *h, uint64_t src_size, const expf_shape_t *s, uint64_t n,
				 uint64_t streams, uint64_t stat, uint64_t block)
{
	expf_rans_layout_t R;
	switch (expf_rans_header_rule(h, src_size, s, n, streams, stat, block, &R)) {
	case EXPF_RANS_HDR_OK:
		return IBP_OK;
	case EXPF_RANS_HDR_VERSION:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS mode in a version 1 header");
	case EXPF_RANS_HDR_PARAMS:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS table source or parameters not as written");
	case EXPF_RANS_HDR_EMPTY:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS block of 0 elements");
	case EXPF_RANS_HDR_SHORT:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: %llu bytes, the rANS symbol map needs 96",
				(unsigned long long)src_size);
	case EXPF_RANS_HDR_STATIC:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS static size %llu for %llu symbols, expected %llu",
				(unsigned long long)stat, (unsigned long long)R.nsym, (unsigned long long)R.static_bytes);
	default:
		return ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS stream bytes %llu or block size %llu inconsistent",
				(unsigned long long)streams, (unsigned long long)block);
	}
}

typedef struct dec_ctx {
	const uint8_t *src;
	uint8_t *dst, *dst2;
	uint64_t split, n;
	expf_rans_layout_t R;
	uint32_t dt;
	int isa; /* 2 AVX-512, 1 AVX2, 0 portable */
	uint32_t tab[SCALE]; /* symbol | (f - 1) << 8 | (slot - cum) << 20 */
	ibp_status_t st[IBP_MAX_THREADS];
	uint64_t bad_seg[IBP_MAX_THREADS];
} dec_ctx_t;

/* Segment g's lanes at their start; 0 when a state is below 2^16. */
static int dec_init(const dec_ctx_t *c, uint64_t g, exp_rans_lanes_t *st)
{
	const uint8_t *dir = c->src + c->R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
	const uint8_t *at = c->src + c->R.static_bytes + (g ? expf_ld64(dir - EXPF_RANS_DIR_BYTES) : 0);
	st->i = 0;
	st->m = seg_len(c->n, g);
	for (uint32_t j = 0; j < LANES; j++) {
		st->p[j] = at;
		at += ld16(dir + 8 + 2 * j); /* the frame check summed them */
		st->e[j] = at;
		st->x[j] = expf_ld32(st->p[j]); /* lengths >= 4 checked */
		st->p[j] += 4;
		if (st->x[j] < RL)
			return 0;
	}
	return 1;
}

/* Steps every lane can take without running dry (a step reads at most a
 * word per lane), keeping `spare` words, within the segment's full steps. */
static uint64_t dec_safe_steps(const exp_rans_lanes_t *st, uint64_t spare)
{
	uint64_t safe = UINT64_MAX, full = st->m & ~(uint64_t)(LANES - 1);
	for (uint32_t j = 0; j < LANES; j++) {
		uint64_t words = (uint64_t)(st->e[j] - st->p[j]) / 2;
		words = words > spare ? words - spare : 0;
		safe = words < safe ? words : safe;
	}
	if (safe > (full - st->i) / LANES)
		safe = (full - st->i) / LANES;
	return safe;
}

/* Decodes the rest of a segment's symbols into out from st; 0 when a
 * stream runs short, leaves bytes over or does not end in the initial
 * state. */
static int dec_finish(const dec_ctx_t *c, exp_rans_lanes_t *st, uint8_t *out)
{
	const uint64_t m = st->m;
	const uint8_t *p[LANES], *e[LANES];
	uint32_t x[LANES];
	const uint32_t *tab = c->tab;
	int ok = 1;
	for (uint32_t j = 0; j < LANES; j++)
		x[j] = st->x[j], p[j] = st->p[j], e[j] = st->e[j];
#define DEC_ONE(j, i)                                                                            \
	do {                                                                                     \
		uint32_t t = tab[x[j] & (SCALE - 1)];                                            \
		out[i] = (uint8_t)t;                                                             \
		x[j] = expf_rans_step(x[j], t);                                                   \
		if (x[j] < RL) {                                                                 \
			if (p[j] < e[j]) {                                                       \
				x[j] = x[j] << 16 | ld16(p[j]);                                   \
				p[j] += 2;                                                       \
			} else {                                                                 \
				ok = 0;                                                          \
			}                                                                        \
		}                                                                                \
	} while (0)
/* the same without the bounds check (every lane has a word left) */
#define DEC_FAST(j, i)                                                                           \
	do {                                                                                     \
		uint32_t t = tab[x[j] & (SCALE - 1)];                                            \
		out[i] = (uint8_t)t;                                                             \
		x[j] = expf_rans_step(x[j], t);                                                   \
		uint32_t need = x[j] < RL, w = ld16(p[j]);                                       \
		x[j] = need ? x[j] << 16 | w : x[j];                                             \
		p[j] += need << 1;                                                               \
	} while (0)
	const uint64_t full = m & ~(uint64_t)(LANES - 1);
	uint64_t i = st->i;
	while (i < full) {
		uint64_t safe = UINT64_MAX;
		for (uint32_t j = 0; j < LANES; j++) {
			uint64_t words = (uint64_t)(e[j] - p[j]) / 2;
			safe = words < safe ? words : safe;
		}
		if (safe > (full - i) / LANES)
			safe = (full - i) / LANES;
		if (safe == 0) {
			for (uint32_t j = 0; j < LANES; j++)
				DEC_ONE(j, i + j);
			i += LANES;
			continue;
		}
		for (uint64_t stop = i + safe * LANES; i < stop; i += LANES)
			for (uint32_t j = 0; j < LANES; j++)
				DEC_FAST(j, i + j);
	}
	for (i = full; i < m; i++)
		DEC_ONE(i & (LANES - 1), i);
#undef DEC_ONE
#undef DEC_FAST
	for (uint32_t j = 0; j < LANES; j++)
		if (x[j] != RL || p[j] != e[j])
			ok = 0;
	return ok;
}

/* Elements of segment g from its symbols and rest bytes (vectorises). */
static inline __attribute__((always_inline)) void join_dt(const dec_ctx_t *c, uint64_t g, const uint8_t *sym,
							   uint8_t *out, const uint32_t dt)
{
	const uint32_t es = dt == EXPF_DT_F32 ? 4u : 2u, rb = dt == EXPF_DT_F32 ? 3u : 1u;
	const uint64_t base = g << EXPF_RANS_SEG_LOG2, m = seg_len(c->n, g);
	const uint8_t *rest = c->src + c->R.off_rest + base * rb;
	for (uint64_t i = 0; i < m; i++) {
		uint32_t r = rb == 1 ? rest[i]
				     : (uint32_t)rest[3 * i] | (uint32_t)rest[3 * i + 1] << 8 | (uint32_t)rest[3 * i + 2] << 16;
		exp_st_elem(out + i * es, expf_rans_join(sym[i], r, dt), es);
	}
}

static void join(const dec_ctx_t *c, uint64_t g, const uint8_t *sym, uint8_t *out)
{
	if (c->dt == EXPF_DT_BF16)
		join_dt(c, g, sym, out, EXPF_DT_BF16);
	else if (c->dt == EXPF_DT_F16)
		join_dt(c, g, sym, out, EXPF_DT_F16);
	else
		join_dt(c, g, sym, out, EXPF_DT_F32);
}

/* Segments per batch: their lanes decode side by side (independent chains
 * hide the table lookups' latency on the vector path). */
#define DEC_BATCH 8 /* segments decoded side by side (the AVX-512 loop takes 8, AVX2 4 at a time) */

/* Decodes segments [g0, g0 + k) into sym[0..k); 0 with *bad = the corrupt one. */
static int dec_batch(const dec_ctx_t *c, uint64_t g0, int k, uint8_t **sym, uint64_t *bad)
{
	exp_rans_lanes_t st[DEC_BATCH];
	memset(st, 0, sizeof(st));
	for (int s = 0; s < k; s++)
		if (!dec_init(c, g0 + (uint64_t)s, &st[s])) {
			*bad = g0 + (uint64_t)s;
			return 0;
		}
#if EXP_HAVE_AVX2_BUILD
	if (c->isa && k > 0) {
		/* word loads are 4 bytes (one word to spare) at 31-bit offsets */
		const uint8_t *base = st[0].p[0] - 4;
		int fits = 1;
		for (int s = 0; s < k; s++)
			for (uint32_t j = 0; j < LANES; j++)
				fits &= (uint64_t)(st[s].e[j] - base) < (1ull << 31);
		/* a step reads a word per lane at most, about one in six on
		 * average: so run as many as the words allow, then again */
		while (fits) {
			uint64_t steps = UINT64_MAX;
			for (int s = 0; s < k; s++) {
				uint64_t t = dec_safe_steps(&st[s], 1);
				steps = t < steps ? t : steps;
			}
			if (steps < 8)
				break;
			if (c->isa == 2)
				ibpi_exp_rans_steps_avx512(st, k, steps, c->tab, sym, base);
			else
				for (int s0 = 0; s0 < k; s0 += 4)
					ibpi_exp_rans_steps_avx2(st + s0, k - s0 < 4 ? k - s0 : 4, steps, c->tab, sym + s0,
								 base);
		}
	}
#endif
	for (int s = 0; s < k; s++)
		if (!dec_finish(c, &st[s], sym[s])) {
			*bad = g0 + (uint64_t)s;
			return 0;
		}
	return 1;
}

static void dec_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	dec_ctx_t *c = ctx;
	const uint32_t es = c->dt == EXPF_DT_F32 ? 4u : 2u;
	/* symbol buffers for the segments of a batch, no more than it has */
	const uint64_t nbuf = end - begin < DEC_BATCH ? end - begin : DEC_BATCH;
	const uint64_t cap = nbuf == 1 ? seg_len(c->n, begin) : EXPF_RANS_SEG;
	uint8_t *tmp = NULL, *buf = malloc(nbuf * cap), *sym[DEC_BATCH] = {0};
	c->st[tid] = IBP_OK;
	if (!buf) {
		c->st[tid] = IBP_ERR_NOMEM;
		c->bad_seg[tid] = begin;
		return;
	}
	for (uint64_t s = 0; s < nbuf; s++)
		sym[s] = buf + s * cap;
	for (uint64_t g0 = begin; g0 < end && c->st[tid] == IBP_OK; g0 += DEC_BATCH) {
		int k = end - g0 < DEC_BATCH ? (int)(end - g0) : DEC_BATCH;
		if (!dec_batch(c, g0, k, sym, &c->bad_seg[tid])) {
			c->st[tid] = IBP_ERR_CORRUPT;
			break;
		}
		for (int s = 0; s < k; s++) {
			uint64_t g = g0 + (uint64_t)s, base = g << EXPF_RANS_SEG_LOG2, m = seg_len(c->n, g);
			if (base + m <= c->split) {
				join(c, g, sym[s], c->dst + base * es);
			} else if (base >= c->split) {
				join(c, g, sym[s], c->dst2 + (base - c->split) * es);
			} else {
				/* the split falls inside: join aside, then copy both parts */
				if (!tmp && !(tmp = malloc(m * es))) {
					c->st[tid] = IBP_ERR_NOMEM;
					c->bad_seg[tid] = g;
					break;
				}
				uint64_t n0 = c->split - base;
				join(c, g, sym[s], tmp);
				memcpy(c->dst + base * es, tmp, n0 * es);
				memcpy(c->dst2, tmp + n0 * es, (m - n0) * es);
			}
		}
	}
	free(tmp);
	free(buf);
}

static int all_zero(const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i])
			return 0;
	return 1;
}

ibp_status_t ibpi_exp_rans_decode(const uint8_t *src, const expf_shape_t *s, uint32_t dt, uint64_t n,
				  uint64_t streams, uint8_t *dst, uint64_t split, uint8_t *dst2, int nthreads,
				  int isa)
{
	uint64_t nsym = 0;
	for (int i = 0; i < 32; i++)
		nsym += (uint64_t)__builtin_popcount(src[EXPF_OFF_RANS_MAP + i]);
	dec_ctx_t *c = malloc(sizeof(*c));
	if (!c)
		return ibpi_fail(IBP_ERR_NOMEM, "exp_decode: no memory for the rANS table");
	expf_rans_layout_of(s, n, nsym, &c->R);
	const expf_rans_layout_t *R = &c->R;
	ibp_status_t st = IBP_OK;
	/* frequencies: each >= 1, summing to the scale; the table covers every slot */
	uint32_t sum = 0, at = 0;
	for (uint32_t k = 0; k < 256 && st == IBP_OK; k++) {
		if (!((src[EXPF_OFF_RANS_MAP + (k >> 3)] >> (k & 7)) & 1u))
			continue;
		uint32_t f = ld16(src + EXPF_OFF_RANS_FREQ + 2 * at++);
		if (f == 0 || f > SCALE - sum) {
			st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS frequency %u of symbol %u (sum so far %u)", f, k,
				      sum);
			break;
		}
		for (uint32_t slot = sum; slot < sum + f; slot++)
			c->tab[slot] = expf_rans_entry(k, f, slot - sum);
		sum += f;
	}
	if (st == IBP_OK && sum != SCALE)
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS frequencies sum to %u, not %u", sum, SCALE);
	uint64_t fend = EXPF_OFF_RANS_FREQ + 2 * nsym;
	if (st == IBP_OK && !all_zero(src + fend, R->off_dir - fend))
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after the rANS frequencies is not zero");
	/* segment ends and lane lengths: each lane its state and whole words, at
	 * most one per symbol, summing to its segment's; the last end at the total */
	uint64_t prev = 0;
	for (uint64_t g = 0; st == IBP_OK && g < R->nseg; g++) {
		const uint8_t *d = src + R->off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
		uint64_t e = expf_ld64(d), sum = 0, m = seg_len(n, g);
		int ok = 1;
		for (uint32_t j = 0; j < LANES; j++) {
			uint64_t len = ld16(d + 8 + 2 * j);
			ok &= len >= 4 && len % 2 == 0 && len <= 4 + 2 * expf_rans_lane_syms(m, j);
			sum += len;
		}
		if (!ok || e < prev || e > streams || e - prev != sum)
			st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS segment %llu: stream end %llu (previous %llu) "
				      "or lane lengths inconsistent", (unsigned long long)g, (unsigned long long)e,
				      (unsigned long long)prev);
		prev = e;
	}
	if (st == IBP_OK && prev != streams)
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS streams end at %llu, header says %llu",
			      (unsigned long long)prev, (unsigned long long)streams);
	uint64_t pend = R->off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * R->nseg;
	if (st == IBP_OK && !all_zero(src + pend, R->off_rest - pend))
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after the rANS directory is not zero");
	pend = R->off_rest + n * R->rest_bytes;
	if (st == IBP_OK && !all_zero(src + pend, R->static_bytes - pend))
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after the rest bytes is not zero");
	pend = R->static_bytes + streams;
	if (st == IBP_OK && !all_zero(src + pend, expf_align(pend, EXPF_ALIGN) - pend))
		st = ibpi_fail(IBP_ERR_CORRUPT, "exp block: padding after the rANS streams is not zero");
	if (st != IBP_OK) {
		free(c);
		return st;
	}
	c->src = src;
	c->dst = dst;
	c->dst2 = dst2;
	c->split = split < n ? split : n;
	c->n = n;
	c->dt = dt;
	c->isa = isa;
	uint64_t per = R->nseg / MIN_SEGS_PER_THREAD;
	int nt = ibpi_parallel_threads(nthreads, per ? per : 1);
	st = ibpi_parallel_for(nt, R->nseg, dec_task, c);
	nt = ibpi_parallel_threads(nt, R->nseg);
	for (int i = 0; st == IBP_OK && i < nt; i++)
		if (c->st[i] != IBP_OK)
			st = c->st[i] == IBP_ERR_NOMEM
				     ? ibpi_fail(IBP_ERR_NOMEM, "exp_decode: no memory for a split segment")
				     : ibpi_fail(IBP_ERR_CORRUPT, "exp block: rANS segment %llu does not decode",
						 (unsigned long long)c->bad_seg[i]);
	free(c);
	return st;
}
