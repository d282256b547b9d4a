/* container_format.c - the geometry of value containers that the reader
 * checks and the writer relies on: blocks of rows, the exponent codec's
 * block offsets, FP8 stream layout (docs/FORMAT.md 2.5, 2.6). */
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


/* Geometry shared by the exp and fp8 codecs: elems elements (shape and
 * dtype) cut into nblk blocks of chunk_elems, a whole number of rows.
 * `bad` is the status to report (CORRUPT when reading, INVALID_ARG when
 * writing). */
ibp_status_t ibpi_ctr_block_geometry(const char *name, ibp_status_t bad, uint64_t nrows, uint64_t row_bytes,
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

/* Smallest and largest size of a valid exp block of n elements: a coded
 * block is at least its static part, a raw one exactly raw size, a rANS
 * one at least its size with one symbol and bare lanes; nothing exceeds
 * the encode bound. Both grow with n, which bounds n by the file. */
static ibp_status_t exp_block_limits(ibp_dtype_t dt, uint64_t n, uint64_t *lo, uint64_t *hi)
{
	uint64_t st, raw;
	IBP_TRY(ibp_exp_static_size(dt, n, &st));
	IBP_TRY(ibp_exp_raw_size(dt, n, &raw));
	IBP_TRY(ibp_exp_encode_bound(dt, n, hi));
	*lo = st < raw ? st : raw;
	expf_shape_t sh;
	if (n && expf_shape_of((uint32_t)dt, &sh) && expf_rans_min_bytes(&sh, n) < *lo)
		*lo = expf_rans_min_bytes(&sh, n);
	return IBP_OK;
}

/* Exp block offsets: from 0, non-decreasing, 128-aligned, each block's
 * size plausible for its element count, ending at the payload length. */
ibp_status_t ibpi_ctr_check_exp_offsets(const char *name, ibp_status_t bad, ibp_dtype_t dt, uint64_t elems,
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
ibp_status_t ibpi_ctr_fp8_layout(const char *name, ibp_status_t bad, const ibp_fp8_opts_t *o, uint64_t elems,
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

ibp_status_t ibpi_ctr_check_exprows_slots(const char *name, ibp_status_t bad, const ibpi_exprows_t *x,
					  uint64_t nrows, uint64_t payload_len, uint64_t *ovf_len)
{
	uint64_t slots;
	if (__builtin_mul_overflow(nrows, x->slot, &slots) || slots > payload_len)
		return ibpi_fail(bad, "%s: payload of %llu bytes, %llu row slots of %llu bytes take more", name,
				(ull)payload_len, (ull)nrows, (ull)x->slot);
	*ovf_len = payload_len - slots;
	return IBP_OK;
}
