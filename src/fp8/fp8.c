/* fp8.c - FP8 conversion and the TACO block codec on the CPU (ibp/fp8.h).
 *
 * This is the reference the CUDA kernels (kernels/fp8.cu) match byte for
 * byte: the same scalar steps (fp8_impl.h), the same pairwise tree for the
 * sum of squares (halving: t[j] += t[j + h], h = B/2 .. 1) and the same
 * butterfly order, all in float32 with every operation rounded on its own
 * (C11 mode keeps GCC from contracting a*b+c into an FMA).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/fp8.h"
#include "util/checksum.h"
#include "util/error.h"
#include "util/opts.h"
#include "fp8/fp8_impl.h"
#include "fp8/fp8_simd.h"
#include "fp8/hadamard.h"
#include "util/cpu.h"
#include "util/parallel.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fp8.c assumes a little-endian host"
#endif

/* Blocks per task handed to a thread. */
#define BLOCKS_PER_TASK 64u

uint8_t ibp_fp8_from_f32(float x, ibp_fp8_format_t fmt)
{
	if (fmt != IBP_FP8_E4M3 && fmt != IBP_FP8_E5M2)
		return 0x7f;
	return fp8_from_f32(x, (uint32_t)fmt);
}

float ibp_fp8_to_f32(uint8_t code, ibp_fp8_format_t fmt)
{
	if (fmt != IBP_FP8_E4M3 && fmt != IBP_FP8_E5M2)
		return ibp_f32_from_bits(FP8_QNAN_BITS);
	return fp8_to_f32(code, (uint32_t)fmt);
}

ibp_status_t ibp_fp8_convert(const float *src, uint64_t n, ibp_fp8_format_t fmt, uint8_t *dst)
{
	if (n && (!src || !dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_convert: NULL buffer");
	if (fmt == IBP_FP8_E4M3) {
		for (uint64_t i = 0; i < n; i++) {
			float x;
			memcpy(&x, (const uint8_t *)src + 4 * i, 4);
			dst[i] = fp8_e4m3_from_f32(x);
		}
	} else if (fmt == IBP_FP8_E5M2) {
		for (uint64_t i = 0; i < n; i++) {
			float x;
			memcpy(&x, (const uint8_t *)src + 4 * i, 4);
			dst[i] = fp8_e5m2_from_f32(x);
		}
	} else {
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_convert: unknown format %d", (int)fmt);
	}
	return IBP_OK;
}

ibp_status_t ibp_fp8_expand(const uint8_t *src, uint64_t n, ibp_fp8_format_t fmt, float *dst)
{
	if (n && (!src || !dst))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_expand: NULL buffer");
	if (fmt != IBP_FP8_E4M3 && fmt != IBP_FP8_E5M2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_expand: unknown format %d", (int)fmt);
	float lut[256];
	for (int c = 0; c < 256; c++)
		lut[c] = fp8_to_f32((uint8_t)c, (uint32_t)fmt);
	for (uint64_t i = 0; i < n; i++)
		memcpy((uint8_t *)dst + 4 * i, &lut[src[i]], 4);
	return IBP_OK;
}

/* ------------------------------------------------------------ block codec */

/* Run-time choice of the block kernels (fp8_simd.h). */
static int simd_forced; /* ibpi_fp8_simd_set's choice; 0 = AUTO */

static int simd_runs(fp8_simd_impl_t impl)
{
	if (impl == FP8_SIMD_SCALAR)
		return 1;
#ifdef FP8_HAVE_SIMD
	const ibp_cpu_features_t *f = ibpi_cpu();
	if (impl == FP8_SIMD_AVX2)
		return f->avx2 && f->f16c; /* its encoder widens halves with F16C */
	if (impl == FP8_SIMD_AVX512)
		return f->avx512vbmi; /* the file is built with -mavx512vbmi */
#endif
	return 0;
}

static fp8_simd_impl_t simd_env_cap(void)
{
	const char *e = getenv("IBP_FORCE_PORTABLE");
	if (e && e[0] == '1')
		return FP8_SIMD_SCALAR;
	e = getenv("IBP_FP8_SIMD");
	if (!e)
		return FP8_SIMD_AVX512;
	if (!strcmp(e, "scalar"))
		return FP8_SIMD_SCALAR;
	return !strcmp(e, "avx2") ? FP8_SIMD_AVX2 : FP8_SIMD_AVX512;
}

int ibpi_fp8_simd_set(fp8_simd_impl_t impl)
{
	if (impl != FP8_SIMD_AUTO && !simd_runs(impl))
		return 0;
	__atomic_store_n(&simd_forced, (int)impl, __ATOMIC_RELAXED);
	return 1;
}

const fp8_kern_t *ibpi_fp8_kern(void)
{
	int impl = __atomic_load_n(&simd_forced, __ATOMIC_RELAXED);
	if (impl == FP8_SIMD_AUTO)
		for (impl = simd_env_cap(); impl > FP8_SIMD_SCALAR && !simd_runs((fp8_simd_impl_t)impl); impl--)
			;
#ifdef FP8_HAVE_SIMD
	if (impl == FP8_SIMD_AVX512)
		return &ibpi_fp8_kern_avx512;
	if (impl == FP8_SIMD_AVX2)
		return &ibpi_fp8_kern_avx2;
#endif
	return NULL;
}

void ibp_fp8_opts_default(ibp_fp8_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->format = IBP_FP8_E4M3;
	o->block = 256;
	o->hadamard = 1;
	o->adaptive = 1;
	o->nthreads = 0;
	o->checksum = 1;
}

static ibp_status_t check_opts(const ibp_fp8_opts_t *o, uint32_t *log2b, const char *fn)
{
	IBP_TRY(IBPI_OPTS_CHECK(o, fn, "ibp_fp8_opts_t"));
	if (o->format != IBP_FP8_E4M3 && o->format != IBP_FP8_E5M2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown FP8 format %d", fn, (int)o->format);
	if (o->block < IBP_FP8_MIN_BLOCK || o->block > IBP_FP8_MAX_BLOCK || (o->block & (o->block - 1)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: block %u is not a power of two in 16..4096", fn, o->block);
	if (o->nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: nthreads %d < 0", fn, o->nthreads);
	*log2b = (uint32_t)__builtin_ctz(o->block);
	return IBP_OK;
}

static uint64_t stream_bytes(uint64_t n, uint32_t log2b)
{
	uint64_t m = (n + (1ull << log2b) - 1) >> log2b;
	return (TACO_HEADER_BYTES + (m << log2b) + 5 * m + 15) & ~15ull;
}

ibp_status_t ibp_fp8_encoded_size(const ibp_fp8_opts_t *o, uint64_t n, uint64_t *bytes)
{
	ibp_fp8_opts_t def;
	uint32_t log2b = 0;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encoded_size: bytes is NULL");
	if (!o) {
		ibp_fp8_opts_default(&def);
		o = &def;
	}
	IBP_TRY(check_opts(o, &log2b, "fp8_encoded_size"));
	if (n > TACO_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encoded_size: %llu elements exceed 2^56", (unsigned long long)n);
	*bytes = stream_bytes(n, log2b);
	return IBP_OK;
}

static inline float load_elem(const uint8_t *src, uint32_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32) {
		float f;
		memcpy(&f, src + 4 * i, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, src + 2 * i, 2);
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

static inline void store_elem(uint8_t *dst, uint32_t dt, uint64_t i, float f)
{
	if (dt == IBP_DTYPE_F32) {
		memcpy(dst + 4 * i, &f, 4);
		return;
	}
	uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
	memcpy(dst + 2 * i, &h, 2);
}

typedef struct fp8_job {
	const uint8_t *src;
	uint8_t *dst;
	uint32_t dt, fmt, log2b, flags;
	uint64_t n, m;
	uint8_t *codes;
	uint8_t *scales; /* m floats, little-endian */
	uint8_t *kexp;   /* m int8 */
	const uint8_t *rcodes, *rscales, *rkexp;
	const fp8_kern_t *kern; /* NULL: the scalar reference */
	fp8_blk_t blk;
	int bad[IBP_MAX_THREADS];
	uint64_t bad_block[IBP_MAX_THREADS];
} fp8_job_t;

/* Encodes one block (the scalar reference of fp8_kern_t.enc): the
 * documented steps, in order. */
static int enc_block_scalar(const fp8_blk_t *p, const uint8_t *src, uint32_t len, float *x, float *t, uint8_t *q,
			    float *s_out, int *k_out)
{
	uint32_t B = 1u << p->log2b;
	int finite = 1;
	float m = 0.0f;
	for (uint32_t i = 0; i < B; i++) {
		float v = i < len ? load_elem(src, p->dt, i) : 0.0f;
		uint32_t a = ibp_f32_bits(v) & 0x7fffffffu;
		finite &= a < 0x7f800000u;
		x[i] = v;
		float av = ibp_f32_from_bits(a);
		m = av > m ? av : m;
	}
	int k = 0;
	if (!finite)
		return 0;
	if ((p->flags & TACO_FLAG_ADAPTIVE) && m > 0.0f) {
		float f1, f2;
		int e = fp8i_ilog2(m);
		taco_prescale_factors(e, &f1, &f2);
		for (uint32_t i = 0; i < B; i++) {
			float y = FP_MUL(FP_MUL(x[i], f1), f2);
			t[i] = FP_MUL(y, y);
		}
		for (uint32_t h = B / 2; h >= 1; h >>= 1)
			for (uint32_t i = 0; i < h; i++)
				t[i] = FP_ADD(t[i], t[i + h]);
		k = taco_alpha_exp(e, t[0], len, taco_qmax(p->fmt));
		float alpha = ibp_pow2f(k);
		for (uint32_t i = 0; i < B; i++)
			x[i] = FP_MUL(x[i], alpha);
	}
	if (p->flags & TACO_FLAG_HADAMARD)
		ibpi_hadamard_f32(x, p->log2b);
	float mz = 0.0f;
	for (uint32_t i = 0; i < B; i++) {
		float a = ibp_f32_from_bits(ibp_f32_bits(x[i]) & 0x7fffffffu);
		mz = a > mz ? a : mz;
	}
	if (!(ibp_f32_bits(mz) < 0x7f800000u))
		return 0; /* overflow in the rotation (only without the adaptive step) */
	float s = taco_scale(mz, p->fmt);
	if (s == 0.0f)
		memset(q, 0, B);
	else
		for (uint32_t i = 0; i < B; i++)
			q[i] = fp8_from_f32(FP_DIV(x[i], s), p->fmt);
	*s_out = s;
	*k_out = k;
	return 1;
}

/* Encodes block blk with the job's kernels (scalar when NULL). */
static void encode_one(const fp8_job_t *j, uint64_t blk, float *x, float *t)
{
	uint32_t B = 1u << j->log2b;
	uint64_t base = blk << j->log2b;
	uint32_t len = j->n - base < B ? (uint32_t)(j->n - base) : B;
	const uint8_t *src = j->src + base * (j->dt == IBP_DTYPE_F32 ? 4u : 2u);
	uint8_t *q = j->codes + base;
	float s;
	int k = 0;
	int ok = j->kern ? j->kern->enc(&j->blk, src, len, x, t, q, &s, &k)
			 : enc_block_scalar(&j->blk, src, len, x, t, q, &s, &k);
	if (!ok) {
		memset(q, 0x7f, B);
		s = ibp_f32_from_bits(FP8_QNAN_BITS);
		k = 0;
	}
	memcpy(j->scales + 4 * blk, &s, 4);
	j->kexp[blk] = (uint8_t)(int8_t)k;
}

static void enc_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	const fp8_job_t *j = ctx;
	_Alignas(64) float x[IBP_FP8_MAX_BLOCK], t[IBP_FP8_MAX_BLOCK];
	(void)tid;
	for (uint64_t task = begin; task < end; task++) {
		uint64_t b0 = task * BLOCKS_PER_TASK, b1 = b0 + BLOCKS_PER_TASK < j->m ? b0 + BLOCKS_PER_TASK : j->m;
		for (uint64_t b = b0; b < b1; b++)
			encode_one(j, b, x, t);
	}
}

static void write_header(uint8_t *h, uint32_t fmt, uint32_t flags, uint32_t log2b, uint64_t n, uint32_t dt)
{
	memset(h, 0, TACO_HEADER_BYTES);
	uint32_t magic = TACO_MAGIC;
	memcpy(h, &magic, 4);
	h[4] = TACO_VERSION;
	h[5] = (uint8_t)fmt;
	h[6] = (uint8_t)flags;
	h[7] = (uint8_t)log2b;
	memcpy(h + 8, &n, 8);
	h[16] = (uint8_t)dt;
}

static int dtype_ok(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 || dt == IBP_DTYPE_BF16 || dt == IBP_DTYPE_F16;
}

ibp_status_t ibp_fp8_encode(const void *src, ibp_dtype_t dt, uint64_t n, const ibp_fp8_opts_t *o, void *dst,
			    uint64_t dst_cap, uint64_t *dst_size)
{
	ibp_fp8_opts_t def;
	uint32_t log2b = 0;
	if (!dst || !dst_size || (!src && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encode: NULL argument");
	if (!o) {
		ibp_fp8_opts_default(&def);
		o = &def;
	}
	IBP_TRY(check_opts(o, &log2b, "fp8_encode"));
	if (!dtype_ok(dt))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encode: dtype %s is not f32, bf16 or f16", ibp_dtype_name(dt));
	if (n > TACO_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_encode: %llu elements exceed 2^56", (unsigned long long)n);
	uint64_t need = stream_bytes(n, log2b);
	if (dst_cap < need)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "fp8_encode: dst_cap %llu < %llu", (unsigned long long)dst_cap,
				(unsigned long long)need);
	fp8_job_t j;
	memset(&j, 0, sizeof(j));
	j.src = src;
	j.dt = (uint32_t)dt;
	j.fmt = (uint32_t)o->format;
	j.log2b = log2b;
	j.flags = (o->hadamard ? TACO_FLAG_HADAMARD : 0) | (o->adaptive ? TACO_FLAG_ADAPTIVE : 0);
	j.n = n;
	j.m = (n + (1ull << log2b) - 1) >> log2b;
	j.kern = ibpi_fp8_kern();
	j.blk = (fp8_blk_t){j.dt, j.fmt, log2b, j.flags};
	uint8_t *d = dst;
	j.codes = d + TACO_HEADER_BYTES;
	j.scales = j.codes + (j.m << log2b);
	j.kexp = j.scales + 4 * j.m;
	write_header(d, j.fmt, j.flags, log2b, n, j.dt);
	uint64_t tasks = (j.m + BLOCKS_PER_TASK - 1) / BLOCKS_PER_TASK;
	IBP_TRY(ibpi_parallel_for(o->nthreads, tasks, enc_task, &j));
	uint64_t used = TACO_HEADER_BYTES + (j.m << log2b) + 5 * j.m;
	memset(d + used, 0, need - used);
	if (o->checksum) {
		d[6] |= TACO_FLAG_CHECKSUM; /* covered by the sum */
		uint64_t sum = ibpi_block_sum(d, need);
		memcpy(d + TACO_OFF_SUM, &sum, 8); /* little-endian, as the rest of the header */
	}
	*dst_size = need;
	return IBP_OK;
}

/* ----------------------------------------------------------------- decode */

static ibp_status_t parse_stream(const uint8_t *h, uint64_t src_size, ibp_fp8_info_t *info, uint32_t *log2b)
{
	uint32_t magic;
	uint64_t n;
	if (src_size < TACO_HEADER_BYTES)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: %llu bytes, header needs 64", (unsigned long long)src_size);
	memcpy(&magic, h, 4);
	if (magic != TACO_MAGIC)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: bad magic 0x%08x", magic);
	if (h[4] != TACO_VERSION && h[4] != TACO_VERSION_1)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: version %u, expected 1 or 2", h[4]);
	if (h[5] > 1)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: format %u", h[5]);
	if (h[7] < TACO_MIN_LOG2B || h[7] > TACO_MAX_LOG2B)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: log2 block %u not in 4..12", h[7]);
	if (!dtype_ok((ibp_dtype_t)h[16]))
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: source dtype %u", h[16]);
	if (!taco_header_rest_ok(h))
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: flags 0x%02x or reserved header bytes not as version %u "
				"requires", h[6], h[4]);
	memcpy(&n, h + 8, 8);
	if (n > TACO_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: %llu elements", (unsigned long long)n);
	*log2b = h[7];
	info->format = (ibp_fp8_format_t)h[5];
	info->block = 1u << h[7];
	info->hadamard = (h[6] & TACO_FLAG_HADAMARD) != 0;
	info->adaptive = (h[6] & TACO_FLAG_ADAPTIVE) != 0;
	info->src_dtype = (ibp_dtype_t)h[16];
	info->n = n;
	info->bytes = stream_bytes(n, h[7]);
	if (info->bytes > src_size)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: needs %llu bytes, %llu available",
				(unsigned long long)info->bytes, (unsigned long long)src_size);
	return IBP_OK;
}

ibp_status_t ibp_fp8_stream_info(const void *src, uint64_t src_size, ibp_fp8_info_t *info)
{
	uint32_t log2b = 0;
	if (!src || !info)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_stream_info: NULL argument");
	return parse_stream(src, src_size, info, &log2b);
}

/* A block's fields are canonical: k in range (0 without the adaptive step);
 * s >= 0 finite, or the quiet NaN with k = 0 and all codes 0x7F; s = 0 only
 * with all-zero codes; finite blocks hold no NaN/Inf codes. */
static int block_ok(const fp8_job_t *j, uint64_t blk, float *s_out, int *k_out)
{
	uint32_t B = 1u << j->log2b;
	const uint8_t *q = j->rcodes + (blk << j->log2b);
	uint32_t sb;
	memcpy(&sb, j->rscales + 4 * blk, 4);
	int k = (int8_t)j->rkexp[blk];
	if (k > TACO_K_MAX || k < -TACO_K_MAX || (!(j->flags & TACO_FLAG_ADAPTIVE) && k != 0))
		return 0;
	if (sb == FP8_QNAN_BITS) {
		if (k)
			return 0;
		for (uint32_t i = 0; i < B; i++)
			if (q[i] != 0x7f)
				return 0;
	} else if (sb >= 0x7f800000u) {
		return 0; /* negative, Inf or another NaN */
	} else if (sb == 0) {
		for (uint32_t i = 0; i < B; i++)
			if (q[i])
				return 0;
	} else if (j->kern) {
		if (!j->kern->codes_finite(q, B, j->fmt))
			return 0;
	} else {
		for (uint32_t i = 0; i < B; i++) {
			uint32_t a = q[i] & 0x7fu;
			if (j->fmt == FP8_E4M3 ? a == 0x7fu : a >= 0x7cu)
				return 0;
		}
	}
	*s_out = ibp_f32_from_bits(sb);
	*k_out = k;
	return 1;
}

/* Decodes one checked block with a finite scale (the scalar reference of
 * fp8_kern_t.dec). */
static void dec_block_scalar(const fp8_blk_t *p, const uint8_t *q, float s, int k, uint32_t len, uint8_t *dst,
			     float *z)
{
	uint32_t B = 1u << p->log2b;
	for (uint32_t i = 0; i < B; i++)
		z[i] = FP_MUL(fp8_to_f32(q[i], p->fmt), s);
	if (p->flags & TACO_FLAG_HADAMARD)
		ibpi_hadamard_f32(z, p->log2b);
	float inv_alpha = ibp_pow2f(-k);
	for (uint32_t i = 0; i < len; i++)
		store_elem(dst, p->dt, i, FP_MUL(z[i], inv_alpha));
}

static void dec_task(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	fp8_job_t *j = ctx;
	_Alignas(64) float z[IBP_FP8_MAX_BLOCK];
	uint32_t B = 1u << j->log2b;
	j->bad[tid] = 0;
	for (uint64_t task = begin; task < end; task++) {
		uint64_t b0 = task * BLOCKS_PER_TASK, b1 = b0 + BLOCKS_PER_TASK < j->m ? b0 + BLOCKS_PER_TASK : j->m;
		for (uint64_t blk = b0; blk < b1; blk++) {
			float s;
			int k;
			if (!block_ok(j, blk, &s, &k)) {
				j->bad[tid] = 1;
				j->bad_block[tid] = blk;
				return;
			}
			uint64_t base = blk << j->log2b;
			uint32_t len = j->n - base < B ? (uint32_t)(j->n - base) : B;
			const uint8_t *q = j->rcodes + base;
			if (ibp_f32_bits(s) == FP8_QNAN_BITS) {
				for (uint32_t i = 0; i < len; i++)
					store_elem(j->dst, j->dt, base + i, s);
				continue;
			}
			uint8_t *dst = j->dst + base * (j->dt == IBP_DTYPE_F32 ? 4u : 2u);
			if (j->kern)
				j->kern->dec(&j->blk, q, s, k, len, dst, z);
			else
				dec_block_scalar(&j->blk, q, s, k, len, dst, z);
		}
	}
}

/* A checksummed stream's checksum, checked before anything else in its
 * header is believed: only the magic, version, flags, block size and
 * element count (which give the stream's size, bounded by src_size) are
 * read first. */
static ibp_status_t verify_stream(const uint8_t *h, uint64_t src_size, unsigned flags)
{
	uint32_t magic;
	uint64_t n;
	if (src_size < TACO_HEADER_BYTES || (flags & IBP_FP8_TRUSTED))
		return IBP_OK;
	memcpy(&magic, h, 4);
	if (magic != TACO_MAGIC || h[4] != TACO_VERSION || !(h[6] & TACO_FLAG_CHECKSUM))
		return IBP_OK; /* nothing to verify: parse_stream judges the rest */
	memcpy(&n, h + 8, 8);
	uint64_t bytes = n <= TACO_MAX_ELEMS && h[7] >= TACO_MIN_LOG2B && h[7] <= TACO_MAX_LOG2B
				 ? stream_bytes(n, h[7])
				 : UINT64_MAX;
	if (bytes > src_size)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: header claims %s bytes, %llu available",
				bytes == UINT64_MAX ? "an impossible number of" : "more", (unsigned long long)src_size);
	uint64_t want;
	memcpy(&want, h + TACO_OFF_SUM, 8);
	if (ibpi_block_sum(h, bytes) != want)
		return ibpi_fail(IBP_ERR_CHECKSUM, "fp8 stream: checksum mismatch (%llu bytes)", (unsigned long long)bytes);
	return IBP_OK;
}

ibp_status_t ibp_fp8_decode(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst, int nthreads)
{
	return ibp_fp8_decode_ext(src, src_size, dt, n, dst, nthreads, 0);
}

ibp_status_t ibp_fp8_decode_ext(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				int nthreads, unsigned flags)
{
	ibp_fp8_info_t info = {0};
	uint32_t log2b = 0;
	if (!src || (!dst && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode: NULL argument");
	if (!dtype_ok(dt))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode: dtype %s is not f32, bf16 or f16", ibp_dtype_name(dt));
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode: nthreads %d < 0", nthreads);
	if (flags & ~IBP_FP8_TRUSTED)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "fp8_decode: unknown flags 0x%x", flags);
	IBP_TRY(verify_stream(src, src_size, flags));
	IBP_TRY(parse_stream(src, src_size, &info, &log2b));
	if (info.n != n)
		return ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: holds %llu elements, expected %llu", (unsigned long long)info.n,
				(unsigned long long)n);
	/* on the stack (about 3 KiB): a store's gather decodes blocks with
	 * this and promises to allocate nothing (ibp/store.h) */
	fp8_job_t job = {0}, *j = &job;
	const uint8_t *s8 = src;
	j->dst = dst;
	j->dt = (uint32_t)dt;
	j->fmt = (uint32_t)info.format;
	j->log2b = log2b;
	j->flags = s8[6] & (TACO_FLAG_HADAMARD | TACO_FLAG_ADAPTIVE);
	j->n = n;
	j->m = (n + (1ull << log2b) - 1) >> log2b;
	j->kern = ibpi_fp8_kern();
	j->blk = (fp8_blk_t){j->dt, j->fmt, log2b, j->flags};
	j->rcodes = s8 + TACO_HEADER_BYTES;
	j->rscales = j->rcodes + (j->m << log2b);
	j->rkexp = j->rscales + 4 * j->m;
	ibp_status_t st = IBP_OK;
	uint64_t used = TACO_HEADER_BYTES + (j->m << log2b) + 5 * j->m;
	for (uint64_t i = used; i < info.bytes; i++)
		if (s8[i])
			st = ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: padding byte %llu is not zero", (unsigned long long)i);
	uint64_t tasks = (j->m + BLOCKS_PER_TASK - 1) / BLOCKS_PER_TASK;
	if (st == IBP_OK)
		st = ibpi_parallel_for(nthreads, tasks, dec_task, j);
	int nt = ibpi_parallel_threads(nthreads, tasks);
	for (int i = 0; st == IBP_OK && i < nt && tasks; i++)
		if (j->bad[i])
			st = ibpi_fail(IBP_ERR_CORRUPT, "fp8 stream: block %llu has invalid scale, exponent or codes",
				      (unsigned long long)j->bad_block[i]);
	return st;
}
