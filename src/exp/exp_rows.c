/* exp_rows.c - the exponent codec's row form: table, encoder, portable
 * decoder and the dispatch (exp_rows.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exp/exp_rows.h"
#include "exp/exp_rows_impl.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

typedef unsigned long long ull;

ibp_status_t ibpi_exprows_init(ibpi_exprows_t *x, ibp_dtype_t dt, uint64_t row_bytes, const uint8_t table[7],
			       int stored)
{
	const ibp_status_t bad = stored ? IBP_ERR_CORRUPT : IBP_ERR_INVALID_ARG;
	memset(x, 0, sizeof(*x));
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_F16 && dt != IBP_DTYPE_BF16)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "exp rows: dtype %s (float32, float16 or bfloat16 only)",
				ibp_dtype_name(dt));
	x->dt = dt;
	x->esize = dt == IBP_DTYPE_F32 ? 4 : 2;
	if (row_bytes == 0 || row_bytes % x->esize != 0 || row_bytes > (1ull << 40))
		return ibpi_fail(bad, "exp rows: a row of %llu bytes is not a whole number of %s elements",
				(ull)row_bytes, ibp_dtype_name(dt));
	x->d = row_bytes / x->esize;
	x->P = (x->d + 7) / 8;
	x->field_max = dt == IBP_DTYPE_F16 ? 31 : 255;
	if (dt == IBP_DTYPE_F32) {
		x->off_lo = 3 * x->P;
		x->off_hi = x->off_lo + 2 * x->d;
		x->fixed = x->off_hi + x->d;
	} else if (dt == IBP_DTYPE_F16) {
		x->off_lo = 6 * x->P;
		x->off_hi = x->off_lo;
		x->fixed = x->off_lo + x->d;
	} else {
		x->off_lo = 3 * x->P;
		x->off_hi = x->off_lo;
		x->fixed = x->off_lo + x->d;
	}
	memset(x->code, (int)EXPR_NCODES, sizeof(x->code));
	for (int k = EXPR_NCODES - 1; k >= 0; k--) {
		if (table[k] > x->field_max)
			return ibpi_fail(bad, "exp rows: table entry %d is field %u, above %u for %s", k,
					(unsigned)table[k], x->field_max, ibp_dtype_name(dt));
		x->table[k] = table[k];
		x->code[table[k]] = (uint8_t)k; /* going down: the first entry wins */
	}
	return IBP_OK;
}

/* ---- table ---------------------------------------------------------------- */

typedef struct hist_job {
	const uint8_t *data;
	ibp_dtype_t dt;
	uint64_t (*h)[256];
} hist_job_t;

static void hist_part(void *ctx, uint64_t b, uint64_t e, int tid)
{
	hist_job_t *j = ctx;
	uint64_t *h = j->h[tid];
	for (uint64_t i = b; i < e; i++)
		h[exprows_field(j->dt, exprows_ld(j->data, j->dt, i))]++;
}

void ibpi_exprows_pick_table(const void *data, ibp_dtype_t dt, uint64_t n, int nthreads, uint8_t table[7])
{
	int t = ibpi_parallel_threads(nthreads, n / 65536 + 1);
	uint64_t(*h)[256] = calloc((size_t)t, sizeof(*h));
	uint64_t total[256] = { 0 };
	hist_job_t j = { data, dt, h };
	if (h && ibpi_parallel_for(t, n, hist_part, &j) == IBP_OK) {
		for (int k = 0; k < t; k++)
			for (int f = 0; f < 256; f++)
				total[f] += h[k][f];
	} else {
		for (uint64_t i = 0; i < n; i++)
			total[exprows_field(dt, exprows_ld(data, dt, i))]++;
	}
	free(h);
	/* seven picks of the largest count (ties: the smaller field); fields
	 * that never occur come after every one that does, smallest first */
	int taken[256] = { 0 };
	const int fmax = dt == IBP_DTYPE_F16 ? 31 : 255;
	for (unsigned k = 0; k < EXPR_NCODES; k++) {
		int best = -1;
		for (int f = 0; f <= fmax; f++)
			if (!taken[f] && (best < 0 || total[f] > total[best]))
				best = f;
		taken[best] = 1;
		table[k] = (uint8_t)best;
	}
	/* sorted by field: the order does not change the size */
	for (unsigned a = 1; a < EXPR_NCODES; a++)
		for (unsigned b = a; b > 0 && table[b - 1] > table[b]; b--) {
			uint8_t v = table[b];
			table[b] = table[b - 1];
			table[b - 1] = v;
		}
}

/* ---- encoder ------------------------------------------------------------ */

uint64_t ibpi_exprows_encode(const ibpi_exprows_t *x, const void *row, uint8_t *dst)
{
	const uint64_t d = x->d, P = x->P;
	memset(dst, 0, (size_t)x->fixed);
	uint8_t *esc = dst + x->fixed;
	uint64_t ne = 0;
	for (uint64_t i = 0; i < d; i++) {
		const uint32_t v = exprows_ld(row, x->dt, i);
		const uint32_t f = exprows_field(x->dt, v);
		const uint32_t c = x->code[f];
		const uint8_t bit = (uint8_t)(1u << (i & 7));
		for (unsigned k = 0; k < 3; k++)
			if (c >> k & 1)
				dst[k * P + i / 8] |= bit;
		if (c == EXPR_NCODES)
			esc[ne++] = (uint8_t)f;
		if (x->dt == IBP_DTYPE_F32) {
			dst[x->off_lo + 2 * i] = (uint8_t)v;
			dst[x->off_lo + 2 * i + 1] = (uint8_t)(v >> 8);
			dst[x->off_hi + i] = (uint8_t)((v >> 31) << 7 | ((v >> 16) & 0x7f));
		} else if (x->dt == IBP_DTYPE_F16) {
			if (v >> 8 & 1)
				dst[3 * P + i / 8] |= bit;
			if (v >> 9 & 1)
				dst[4 * P + i / 8] |= bit;
			if (v >> 15 & 1)
				dst[5 * P + i / 8] |= bit;
			dst[x->off_lo + i] = (uint8_t)v;
		} else {
			dst[x->off_lo + i] = (uint8_t)((v >> 15) << 7 | (v & 0x7f));
		}
	}
	return x->fixed + ne;
}

/* ---- decoders ----------------------------------------------------------- */

int ibpi_exprows_decode_portable(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, void *dst)
{
	const uint8_t *esc;
	if (exprows_check(x, src, len, &esc) != 0)
		return -1;
	const uint64_t d = x->d, P = x->P;
	for (uint64_t i = 0; i < d; i++) {
		const unsigned sh = (unsigned)(i & 7);
		const uint64_t B = i / 8;
		const unsigned c = (unsigned)(src[B] >> sh & 1) | (unsigned)(src[P + B] >> sh & 1) << 1 |
				   (unsigned)(src[2 * P + B] >> sh & 1) << 2;
		const uint32_t f = c == EXPR_NCODES ? *esc++ : x->table[c];
		if (x->dt == IBP_DTYPE_F32) {
			const uint32_t lo = (uint32_t)src[x->off_lo + 2 * i] | (uint32_t)src[x->off_lo + 2 * i + 1] << 8;
			const uint32_t hi = src[x->off_hi + i];
			const uint32_t v = (hi >> 7) << 31 | f << 23 | (hi & 0x7f) << 16 | lo;
			memcpy((uint8_t *)dst + 4 * i, &v, 4);
		} else {
			uint32_t v;
			if (x->dt == IBP_DTYPE_F16)
				v = (uint32_t)(src[5 * P + B] >> sh & 1) << 15 | f << 10 |
				    (uint32_t)(src[4 * P + B] >> sh & 1) << 9 | (uint32_t)(src[3 * P + B] >> sh & 1) << 8 |
				    src[x->off_lo + i];
			else
				v = (uint32_t)(src[x->off_lo + i] >> 7) << 15 | f << 7 | (src[x->off_lo + i] & 0x7fu);
			const uint16_t h = (uint16_t)v;
			memcpy((uint8_t *)dst + 2 * i, &h, 2);
		}
	}
	return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The AVX-512 decoder against the portable one on rows of every dtype with
 * every code and escapes in both 64-element words, once per process: a
 * build or CPU where they differ decodes with AVX2 instead (the AVX-512
 * decoder has not run on every CPU it may meet; a wrong row must not
 * come out of it). 1 agreed, -1 not, 0 not yet known. */
static int avx512_agrees(void)
{
	static _Atomic int state;
	int v = state;
	if (v)
		return v > 0;
	v = 1;
	uint64_t r = 0x9e3779b97f4a7c15ull;
	for (int t = 0; t < 3 && v > 0; t++) {
		const ibp_dtype_t dt = t == 0 ? IBP_DTYPE_F32 : t == 1 ? IBP_DTYPE_F16 : IBP_DTYPE_BF16;
		const uint8_t base = dt == IBP_DTYPE_F16 ? 8 : 120;
		const uint8_t table[7] = { base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6 };
		ibpi_exprows_t x;
		if (ibpi_exprows_init(&x, dt, 128 * (dt == IBP_DTYPE_F32 ? 4 : 2), table, 0) != IBP_OK)
			return 0;
		uint32_t row[128];
		uint8_t enc[3 * 16 + 4 * 128 + 128], a[512], b[512];
		for (unsigned i = 0; i < 128; i++) {
			r ^= r << 13, r ^= r >> 7, r ^= r << 17;
			const uint32_t f = (r >> 40) % 9 < 7 ? table[(r >> 40) % 9] : (uint32_t)(r >> 48) & x.field_max;
			uint32_t bits = (uint32_t)r;
			if (dt == IBP_DTYPE_F32)
				bits = (bits & ~(0xffu << 23)) | f << 23;
			else if (dt == IBP_DTYPE_F16)
				bits = ((bits & 0xffffu) & ~(0x1fu << 10)) | f << 10;
			else
				bits = ((bits & 0xffffu) & ~(0xffu << 7)) | f << 7;
			if (dt == IBP_DTYPE_F32)
				row[i] = bits;
			else
				memcpy((uint8_t *)row + 2 * i, &bits, 2);
		}
		const uint64_t len = ibpi_exprows_encode(&x, row, enc);
		if (ibpi_exprows_decode_portable(&x, enc, len, a) != 0 || ibpi_exprows_decode_avx512(&x, enc, len, b) != 0 ||
		    memcmp(a, b, 128 * x.esize) != 0 || memcmp(a, row, 128 * x.esize) != 0)
			v = -1;
	}
	state = v;
	return v > 0;
}
#endif

int ibpi_exprows_isa(void)
{
	const char *e = getenv("IBP_FORCE_PORTABLE");
	if (e && *e && strcmp(e, "0") != 0)
		return 0;
#if defined(__x86_64__) && defined(__GNUC__)
	const ibp_cpu_features_t *cpu = ibpi_cpu();
	const char *isa = getenv("IBP_EXP_ISA");
	if (isa && strcmp(isa, "portable") == 0)
		return 0;
	if (cpu->avx512vbmi && cpu->avx512vbmi2 && !(isa && strcmp(isa, "avx2") == 0) && avx512_agrees())
		return 2;
	return cpu->avx2 ? 1 : 0;
#else
	return 0;
#endif
}

ibp_status_t ibpi_exprows_decode(const ibpi_exprows_t *x, int isa, const uint8_t *src, uint64_t len, void *dst)
{
	int r;
	if (x->d % 64 != 0)
		isa = 0; /* the vector decoders take whole 64-element words */
#if defined(__x86_64__) && defined(__GNUC__)
	if (isa == 2)
		r = ibpi_exprows_decode_avx512(x, src, len, dst);
	else if (isa == 1)
		r = ibpi_exprows_decode_avx2(x, src, len, dst);
	else
#endif
		r = ibpi_exprows_decode_portable(x, src, len, dst);
	(void)isa;
	if (r == 0)
		return IBP_OK;
	return ibpi_exprows_why(x, src, len);
}

int ibpi_exprows_sum64_ok(const ibpi_exprows_t *x, int isa)
{
#if defined(__x86_64__) && defined(__GNUC__)
	const ibp_cpu_features_t *cpu = ibpi_cpu();
	return x->d % 64 == 0 && x->d <= 64 * IBPI_EXPROWS_SUM_WORDS &&
	       ((isa == 2 && cpu->avx512vbmi2) || (isa == 1 && cpu->avx2 && cpu->f16c));
#else
	(void)x;
	(void)isa;
	return 0;
#endif
}

uint64_t ibpi_exprows_sum64(const ibpi_exprows_t *x, int isa, const uint8_t *const *srcs, const uint64_t *lens,
			    uint64_t n, float *acc, int first)
{
#if defined(__x86_64__) && defined(__GNUC__)
	/* both check d */
	if (isa == 2 && ibpi_cpu()->avx512vbmi2)
		return ibpi_exprows_sum64_avx512(x, srcs, lens, n, acc, first);
	if (isa == 1 && ibpi_cpu()->avx2 && ibpi_cpu()->f16c)
		return ibpi_exprows_sum64_avx2(x, srcs, lens, n, acc, first);
#endif
	(void)x;
	(void)isa;
	(void)srcs;
	(void)lens;
	(void)n;
	(void)acc;
	(void)first;
	return 0;
}

ibp_status_t ibpi_exprows_why(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len)
{
	if (len < x->fixed)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp row of %llu bytes, shorter than its fixed part of %llu",
				(ull)len, (ull)x->fixed);
	const uint64_t P = x->P, pad = x->P * 8 - x->d;
	const unsigned nplanes = x->dt == IBP_DTYPE_F16 ? 6 : 3;
	if (pad)
		for (unsigned k = 0; k < nplanes; k++)
			if (src[k * P + P - 1] >> (8 - pad))
				return ibpi_fail(IBP_ERR_CORRUPT, "exp row: padding bits of plane %u set", k);
	const uint64_t ne = exprows_nesc(x, src);
	if (len != x->fixed + ne)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp row of %llu bytes: its %llu escapes make it %llu", (ull)len,
				(ull)ne, (ull)(x->fixed + ne));
	for (uint64_t i = 0; i < ne; i++)
		if (src[x->fixed + i] > x->field_max)
			return ibpi_fail(IBP_ERR_CORRUPT, "exp row: escape %llu is %u, not a %s exponent field", (ull)i,
					(unsigned)src[x->fixed + i], ibp_dtype_name(x->dt));
	return ibpi_fail(IBP_ERR_CORRUPT, "exp row: does not decode");
}

/* ---- the slot form ------------------------------------------------------- */

static uint64_t slot_k_max(const ibpi_exprows_t *x)
{
	return x->d > 8 ? x->d : 8;
}

ibp_status_t ibpi_exprows_set_slot(ibpi_exprows_t *x, uint64_t K, int stored)
{
	if (K < 8 || K > slot_k_max(x))
		return ibpi_fail(stored ? IBP_ERR_CORRUPT : IBP_ERR_INVALID_ARG,
				"exp rows: %llu escape bytes a slot, not in [8, %llu] for rows of %llu elements", (ull)K,
				(ull)slot_k_max(x), (ull)x->d);
	x->K = K;
	x->slot = x->fixed + K;
	return IBP_OK;
}

uint64_t ibpi_exprows_pick_slot(const ibpi_exprows_t *x, const uint64_t *hist)
{
	/* size(K) = rows * K + the escapes of rows with more than K (the
	 * fixed parts are the same for every K); d is small, so each K is
	 * priced directly */
	const uint64_t kmax = slot_k_max(x);
	uint64_t rows = 0, over_esc = 0; /* escapes of rows with ne > K */
	for (uint64_t e = 0; e <= x->d; e++)
		rows += hist[e];
	for (uint64_t e = 9; e <= x->d; e++)
		over_esc += hist[e] * e;
	uint64_t best = 8, best_size = rows * 8 + over_esc;
	for (uint64_t K = 9; K <= kmax; K++) {
		if (K <= x->d)
			over_esc -= hist[K] * K;
		const uint64_t size = rows * K + over_esc;
		if (size < best_size)
			best = K, best_size = size;
	}
	return best;
}

uint64_t ibpi_exprows_encode_slot(const ibpi_exprows_t *x, const void *row, uint8_t *slot, uint8_t *tmp,
				  uint8_t *ovf, uint64_t ovf_off)
{
	const uint64_t len = ibpi_exprows_encode(x, row, tmp), ne = len - x->fixed;
	memcpy(slot, tmp, (size_t)x->fixed);
	memset(slot + x->fixed, 0, (size_t)x->K);
	if (ne <= x->K) {
		memcpy(slot + x->fixed, tmp + x->fixed, (size_t)ne);
	} else {
		for (unsigned b = 0; b < 8; b++)
			slot[x->fixed + b] = (uint8_t)(ovf_off >> (8 * b));
		memcpy(ovf + ovf_off, tmp + x->fixed, (size_t)ne);
	}
	return ne;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static uint64_t nesc_popcnt(const ibpi_exprows_t *x, const uint8_t *slot)
{
	return exprows_nesc(x, slot);
}
#endif

uint64_t ibpi_exprows_slot_nesc(const ibpi_exprows_t *x, int isa, const uint8_t *slot)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (isa > 0)
		return nesc_popcnt(x, slot);
#endif
	(void)isa;
	return exprows_nesc(x, slot);
}

/* Rows whose escapes are in the overflow area are put back together here
 * (the decoders read a row's bytes in one piece); larger ones on the heap */
#define SLOT_JOIN_STACK 4096u

ibp_status_t ibpi_exprows_decode_slot(const ibpi_exprows_t *x, int isa, const uint8_t *slot, const uint8_t *ovf,
				      uint64_t ovf_len, void *dst)
{
	const uint64_t ne = ibpi_exprows_slot_nesc(x, isa, slot);
	if (ne <= x->K)
		return ibpi_exprows_decode(x, isa, slot, x->fixed + ne, dst);
	const uint8_t *esc;
	if (ibpi_exprows_slot_escapes(x, slot, ovf, ovf_len, &esc, ne) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "exp row: its %llu escapes at overflow byte %llu pass the overflow's "
				"end (%llu bytes)", (ull)ne, (ull)ld64u(slot + x->fixed), (ull)ovf_len);
	const uint64_t len = x->fixed + ne;
	uint8_t stack[SLOT_JOIN_STACK];
	uint8_t *row = len <= sizeof(stack) ? stack : malloc((size_t)len);
	if (!row)
		return ibpi_fail(IBP_ERR_NOMEM, "exp row: out of memory (%llu bytes)", (ull)len);
	memcpy(row, slot, (size_t)x->fixed);
	memcpy(row + x->fixed, esc, (size_t)ne);
	const ibp_status_t st = ibpi_exprows_decode(x, isa, row, len, dst);
	if (row != stack)
		free(row);
	return st;
}
