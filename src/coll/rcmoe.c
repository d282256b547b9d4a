/* rcmoe.c - RCMoE's two compressors (paper 003): LSQ row-wise stochastic
 * quantization and PTS probabilistic threshold sparsification with its
 * all-gather based sparse AllReduce. The scalar code here is the
 * reference; rows of a multiple of 16 elements and whole PTS buffers go
 * through the vector kernels of dynamiq_simd.h when the CPU has them
 * (same bytes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "coll/rcmoe.h"
#include "fp8/fp8_impl.h"
#include "util/error.h"

/* max without fmaxf's NaN rules (inputs here are checked or finite), so it inlines. */
static inline float maxf(float a, float b)
{
	return a > b ? a : b;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

static float getf(const void *src, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return ((const float *)src)[i];
	uint16_t h = ((const uint16_t *)src)[i];
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

static void putf(void *dst, ibp_dtype_t dt, uint64_t i, float v)
{
	if (dt == IBP_DTYPE_F32)
		((float *)dst)[i] = v;
	else
		((uint16_t *)dst)[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(v) : fp8i_f32_to_f16(v);
}

#define LSQ_HDR IBPQ_LSQ_HDR

uint64_t ibpi_lsq_bytes(uint64_t n, uint64_t row, int B, int K)
{
	return ibpq_lsq_bytes(n, row, B, K);
}

static void put_code(uint8_t *p, uint64_t i, int w, unsigned v)
{
	uint64_t bit = i * (uint64_t)w;
	p[bit >> 3] |= (uint8_t)(v << (bit & 7));
}

static unsigned get_code(const uint8_t *p, uint64_t i, int w)
{
	uint64_t bit = i * (uint64_t)w;
	return (p[bit >> 3] >> (bit & 7)) & ((1u << w) - 1);
}

ibp_status_t ibpi_lsq_encode(const void *src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K, uint64_t key,
			uint8_t *out, uint64_t cap, uint64_t *size)
{
	if (!ibpq_lsq_params_ok(row, B, K))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: lsq: row %llu, %d bits, %d scale bits",
				(unsigned long long)row, B, K);
	uint64_t rows = ceil_div(n, row), total = ibpi_lsq_bytes(n, row, B, K);
	if (total > cap)
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: lsq: message capacity too small");
	float *s = malloc((rows ? rows : 1) * sizeof(float));
	if (!s)
		return ibpi_fail(IBP_ERR_NOMEM, "coll: lsq: out of memory");
	const rc_kern_t *V = row % 16 == 0 ? ibpi_rc_kern() : NULL;
	float S = 0;
	for (uint64_t r = 0; r < rows; r++) {
		float m = 0;
		uint64_t i = r * row, e = n < (r + 1) * row ? n : (r + 1) * row, l = (e - i) & ~(uint64_t)15;
		if (V && l && V->lsq_max(src, dt, i, l, &m))
			i += l; /* else the scalar loop finds the non-finite element */
		else
			m = 0;
		for (; i < e; i++) {
			float v = fabsf(getf(src, dt, i));
			if (!(v <= 3.4e38f)) {
				free(s);
				return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: lsq: non-finite input at element %llu",
						(unsigned long long)i);
			}
			m = maxf(m, v);
		}
		s[r] = m;
		S = maxf(S, m);
	}
	memset(out, 0, total);
	memcpy(out, &S, 4);
	out[4] = (uint8_t)B;
	out[5] = (uint8_t)K;
	out[6] = (uint8_t)row;
	out[7] = (uint8_t)(row >> 8);
	uint8_t *sc = out + LSQ_HDR, *code = sc + (K ? ceil_div(rows * (uint64_t)K, 8) : rows * 4);
	for (uint64_t r = 0; r < rows; r++) {
		/* The row scale, stochastically rounded to K bits of S* (unbiased); entries use the exact one. */
		if (K)
			put_code(sc, r, K, ibpq_lsq_scale_code(s[r], S, K, key, r));
		else
			memcpy(sc + r * 4, &s[r], 4);
		uint64_t i = r * row, e = n < (r + 1) * row ? n : (r + 1) * row, l = (e - i) & ~(uint64_t)15;
		if (V && l) {
			V->lsq_enc(src, dt, i, l, s[r], B, key, code);
			i += l;
		}
		for (; i < e; i++)
			put_code(code, i, B, ibpq_lsq_code(getf(src, dt, i), s[r], B, key, i));
	}
	free(s);
	*size = total;
	return IBP_OK;
}

ibp_status_t ibpi_lsq_decode(const uint8_t *in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *dst)
{
	if (size < LSQ_HDR)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: lsq: %llu-byte stream", (unsigned long long)size);
	float S;
	memcpy(&S, in, 4);
	int B = in[4], K = in[5];
	uint64_t row = (uint64_t)in[6] | (uint64_t)in[7] << 8;
	if (!ibpq_lsq_params_ok(row, B, K) || !(S >= 0) || isinf(S) || ibpi_lsq_bytes(n, row, B, K) != size)
		return ibpi_fail(IBP_ERR_CORRUPT,
				"coll: lsq: stream of %llu bytes (bits %d, scale bits %d, row %llu) for %llu elements",
				(unsigned long long)size, B, K, (unsigned long long)row, (unsigned long long)n);
	uint64_t rows = ceil_div(n, row);
	const uint8_t *sc = in + LSQ_HDR, *code = sc + (K ? ceil_div(rows * (uint64_t)K, 8) : rows * 4);
	const rc_kern_t *V = row % 16 == 0 ? ibpi_rc_kern() : NULL;
	for (uint64_t r = 0; r < rows; r++) {
		float s;
		if (K)
			s = ibpq_lsq_scale(get_code(sc, r, K), K, S);
		else {
			memcpy(&s, sc + r * 4, 4);
			if (!(s >= 0) || isinf(s))
				return ibpi_fail(IBP_ERR_CORRUPT, "coll: lsq: row %llu has a bad scale",
						(unsigned long long)r);
		}
		uint64_t i = r * row, e = n < (r + 1) * row ? n : (r + 1) * row, l = (e - i) & ~(uint64_t)15;
		if (V && l) {
			V->lsq_dec(code, B, s, i, l, dt, dst);
			i += l;
		}
		for (; i < e; i++)
			putf(dst, dt, i, ibpq_lsq_value(get_code(code, i, B), B, s));
	}
	return IBP_OK;
}

/* ---- PTS ---- */

#define PTS_HDR 12u

uint64_t ibpi_pts_max_bytes(uint64_t k)
{
	return PTS_HDR + 2 * ceil_div(k, 8);
}

ibp_status_t ibpi_pts_encode(const float *g, uint64_t k, double sigma, uint64_t key, uint8_t *out, uint64_t cap,
			uint64_t *size)
{
	if (!(sigma > 0 && sigma <= 1))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: pts: sigma %g is not in (0, 1]", sigma);
	if (cap < ibpi_pts_max_bytes(k))
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: pts: message capacity too small");
	const rc_kern_t *V = ibpi_rc_kern();
	float m = 0;
	if (!V || !V->pts_max(g, k, &m)) { /* the scalar loop (also finds the non-finite element) */
		m = 0;
		for (uint64_t i = 0; i < k; i++) {
			if (!(fabsf(g[i]) <= 3.4e38f))
				return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: pts: non-finite input at element %llu",
						(unsigned long long)i);
			m = maxf(m, fabsf(g[i]));
		}
	}
	uint64_t bm = ceil_div(k, 8), nnz = 0;
	uint8_t *pres = out + PTS_HDR, *sgn = pres + bm;
	memset(pres, 0, bm);
	float mag = (float)(m / sigma), ps = (float)sigma;
	if (V)
		nnz = V->pts_keep(g, k, m, ps, key, pres, sgn);
	else {
		for (uint64_t i = 0; i < k; i++) {
			if (ibpq_pts_keep(g[i], m, ps, key, i)) {
				pres[i >> 3] |= (uint8_t)(1u << (i & 7));
				nnz++;
			}
		}
		uint64_t j = 0;
		memset(sgn, 0, ceil_div(nnz, 8));
		for (uint64_t i = 0; i < k; i++)
			if (pres[i >> 3] >> (i & 7) & 1) {
				if (g[i] < 0)
					sgn[j >> 3] |= (uint8_t)(1u << (j & 7));
				j++;
			}
	}
	uint64_t sb = ceil_div(nnz, 8);
	memcpy(out, &mag, 4);
	memcpy(out + 4, &nnz, 8);
	*size = PTS_HDR + bm + sb;
	return IBP_OK;
}

ibp_status_t ibpi_pts_decode_add(const uint8_t *in, uint64_t size, uint64_t k, float *acc)
{
	uint64_t bm = ceil_div(k, 8), nnz;
	float mag;
	if (size < PTS_HDR + bm)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: pts: %llu-byte stream for %llu elements", (unsigned long long)size,
				(unsigned long long)k);
	memcpy(&mag, in, 4);
	memcpy(&nnz, in + 4, 8);
	if (!(mag >= 0) || isinf(mag) || nnz > k || size != PTS_HDR + bm + ceil_div(nnz, 8))
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: pts: stream header (%llu kept of %llu) does not match its %llu bytes",
				(unsigned long long)nnz, (unsigned long long)k, (unsigned long long)size);
	const uint8_t *pres = in + PTS_HDR, *sgn = pres + bm;
	uint64_t cnt = 0;
	for (uint64_t b = 0; b < bm; b++)
		cnt += (uint64_t)__builtin_popcount(pres[b]);
	if (cnt != nnz || (k % 8 && pres[bm - 1] >> (k % 8)))
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: pts: presence bitmap holds %llu entries, header says %llu",
				(unsigned long long)cnt, (unsigned long long)nnz);
	const rc_kern_t *V = ibpi_rc_kern();
	if (V) {
		V->pts_add(pres, sgn, k, mag, acc);
		return IBP_OK;
	}
	uint64_t j = 0;
	for (uint64_t i = 0; i < k; i++)
		if (pres[i >> 3] >> (i & 7) & 1) {
			acc[i] += (sgn[j >> 3] >> (j & 7) & 1) ? -mag : mag;
			j++;
		}
	return IBP_OK;
}
