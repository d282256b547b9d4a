/* container_pack.c - pack: a tensor encoded (trained codec, exponent or
 * FP8 blocks) and written as a container in one call. */
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
#include "util/opts.h"
#include "bitpack/codec_internal.h"
#include "exp/exp_format.h"
#include "fp8/fp8_impl.h"
#include "util/parallel.h"
#include "io/container_internal.h"
#include "io/container_format.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the container maps little-endian offset tables in place: little-endian hosts only"
#endif


ibp_status_t ibp_pack_with_codec(const char *path, const ibp_codec_t *codec, const void *data,
				 ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, int nthreads)
{
	uint64_t R = 0, total;
	IBP_TRY(ibpi_ctr_check_shape(path, codec, dtype, ndim, shape, layout, &R));
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
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_pack", "ibp_train_opts_t"));
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
	IBP_TRY(ibpi_ctr_check_tensor(path, dtype, ndim, shape, IBP_LAYOUT_PACKED, R));
	uint64_t row_elems = *R / ibp_dtype_size(dtype);
	if (block_rows == 0)
		block_rows = ibp_block_rows_default(row_elems, shape[0]);
	if (__builtin_mul_overflow(block_rows, row_elems, chunk))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu rows per block overflow", path, (ull)block_rows);
	IBP_TRY(ibpi_ctr_block_geometry(path, IBP_ERR_INVALID_ARG, shape[0], *R, dtype, *chunk, elems, nblk));
	if (*elems > 0 && !data)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: data is NULL", path);
	return IBP_OK;
}

ibp_status_t ibp_pack_exp(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			  const uint64_t *shape, const ibp_exp_opts_t *opts, uint64_t block_rows)
{
	uint64_t R = 0, elems = 0, chunk = 0, nblk = 0, bound = 0;
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_pack_exp", "ibp_exp_opts_t"));
	IBP_TRY(value_pack_shape(path, "exp", data, dtype, ndim, shape, block_rows, &R, &elems, &chunk, &nblk));
	ibp_exp_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_exp_opts_default(&o);
	/* The container's section checksums cover the blocks, so they carry
	 * none: then a block of format version 2 equals version 1's but for the
	 * version byte, and version 1 is written, so that files stay
	 * byte-identical and readable by libibp before checksums (FORMAT.md).
	 * rANS blocks (mode 2) exist only in version 2 and keep it. */
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
		if (buf[off[b] + EXPF_OFF_MODE] != EXPF_MODE_RANS)
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
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_pack_fp8", "ibp_fp8_opts_t"));
	IBP_TRY(value_pack_shape(path, "fp8", data, dtype, ndim, shape, block_rows, &R, &elems, &chunk, &nblk));
	ibp_fp8_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_fp8_opts_default(&o);
	o.checksum = 0; /* as ibp_pack_exp: version-1 streams, the container's checksums */
	opts = &o;
	IBP_TRY(ibpi_ctr_fp8_layout(path, IBP_ERR_INVALID_ARG, opts, elems, chunk, nblk, &stride, &plen));
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

/* ---- exp rows ------------------------------------------------------------ */

typedef struct xr_job {
	const ibpi_exprows_t *x;
	const uint8_t *data;
	uint8_t *out, *ovf, *tmp; /* slots, overflow area, one scratch row a thread */
	uint64_t *ne;             /* pass 1: each row's escapes; pass 2: overflow offsets of rows over K */
} xr_job_t;

static void xr_count(void *ctx, uint64_t b, uint64_t e, int tid)
{
	(void)tid;
	xr_job_t *j = ctx;
	const ibpi_exprows_t *x = j->x;
	const uint64_t R = x->d * x->esize;
	for (uint64_t r = b; r < e; r++) {
		uint64_t ne = 0;
		for (uint64_t i = 0; i < x->d; i++) {
			const uint8_t *p = j->data + r * R + i * x->esize;
			uint32_t v = 0;
			memcpy(&v, p, x->esize);
			const uint32_t f = x->dt == IBP_DTYPE_F32 ? v >> 23 & 0xff : x->dt == IBP_DTYPE_F16 ? v >> 10 & 0x1f
												     : v >> 7 & 0xff;
			ne += x->code[f] == EXPR_NCODES;
		}
		j->ne[r] = ne;
	}
}

static void xr_encode(void *ctx, uint64_t b, uint64_t e, int tid)
{
	xr_job_t *j = ctx;
	const ibpi_exprows_t *x = j->x;
	const uint64_t R = x->d * x->esize;
	uint8_t *tmp = j->tmp + (uint64_t)tid * (x->fixed + x->d);
	for (uint64_t r = b; r < e; r++)
		ibpi_exprows_encode_slot(x, j->data + r * R, j->out + r * x->slot, tmp, j->ovf, j->ne[r]);
}

ibp_status_t ibp_pack_exp_rows(const char *path, const void *data, ibp_dtype_t dtype, unsigned ndim,
			       const uint64_t *shape, int nthreads)
{
	if (!path || !shape)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_pack_exp_rows: NULL path or shape");
	if (nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: nthreads %d < 0", path, nthreads);
	uint64_t R = 0;
	IBP_TRY(ibpi_ctr_check_tensor(path, dtype, ndim, shape, IBP_LAYOUT_PACKED, &R));
	if (!value_dtype(dtype))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the exp-rows codec takes bf16, f16 or f32, not %s", path,
				ibp_dtype_name(dtype));
	const uint64_t n = shape[0];
	if (n > 0 && !data)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL data for %llu rows", path, (ull)n);
	if (n > (1ull << 56) / R)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: %llu rows of %llu bytes are too many", path, (ull)n,
				(ull)R);
	uint8_t table[EXPR_NCODES];
	ibpi_exprows_pick_table(data, dtype, n * (R / ibp_dtype_size(dtype)), nthreads, table);
	ibpi_exprows_t x;
	IBP_TRY(ibpi_exprows_init(&x, dtype, R, table, 0));
	const int t = ibpi_parallel_threads(nthreads, n / 4096 + 1);
	uint64_t *ne = malloc((size_t)(8 * (n + 1)));
	uint64_t *hist = calloc((size_t)(x.d + 1), 8);
	uint8_t *tmp = malloc((size_t)((uint64_t)t * (x.fixed + x.d)));
	uint8_t *buf = NULL;
	ibp_status_t st = IBP_OK;
	if (!ne || !hist || !tmp) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for %llu rows' escape counts", path, (ull)n);
		goto out;
	}
	xr_job_t j = { &x, data, NULL, NULL, tmp, ne };
	st = ibpi_parallel_for(t, n, xr_count, &j);
	if (st != IBP_OK)
		goto out;
	for (uint64_t r = 0; r < n; r++)
		hist[ne[r]]++;
	st = ibpi_exprows_set_slot(&x, ibpi_exprows_pick_slot(&x, hist), 0);
	if (st != IBP_OK)
		goto out;
	/* rows over K: their escapes back to back in row order */
	uint64_t ovf = 0;
	for (uint64_t r = 0; r < n; r++) {
		const uint64_t c = ne[r];
		ne[r] = ovf;
		if (c > x.K)
			ovf += c;
	}
	const uint64_t plen = n * x.slot + ovf; /* n * slot <= 2^56 * 2 */
	buf = ibp_host_alloc(plen ? plen : 1, 64);
	if (!buf) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for %llu encoded bytes", path, (ull)plen);
		goto out;
	}
	j.out = buf;
	j.ovf = buf + n * x.slot;
	st = ibpi_parallel_for(t, n, xr_encode, &j);
	if (st == IBP_OK)
		st = ibpi_ctr_write_exp_rows(path, &x, ndim, shape, buf, plen);
out:
	ibp_host_free(buf);
	free(tmp);
	free(hist);
	free(ne);
	return st;
}
