/* coll_codec.c - one message = header + payload in one of three
 * encodings (raw dtype bytes, exponent codec block, FP8 stream), and the
 * FP32 add of the reductions. */
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/coll_mem.h"
#include "coll/rcmoe.h"
#include "fp8/fp8_impl.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "util/error.h"

static ibp_fp8_opts_t fp8_opts(int nthreads)
{
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.nthreads = nthreads;
	o.checksum = 0; /* wire messages: the transport delivers them whole (docs/CODECS.md) */
	return o;
}

ibp_status_t ibpi_coll_msg_cap(ibp_dtype_t dt, uint64_t n, uint64_t *cap)
{
	uint64_t esz = ibp_dtype_size(dt), e = 0, f = 0;
	if (n > IBP_EXP_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: %llu elements is too many", (unsigned long long)n);
	IBP_TRY(ibp_exp_encode_bound(dt, n, &e));
	ibp_fp8_opts_t o = fp8_opts(1);
	IBP_TRY(ibp_fp8_encoded_size(&o, n, &f));
	uint64_t m = n * esz;
	if (e > m)
		m = e;
	if (f > m)
		m = f;
	if (ibpi_lsq_bytes(n, LSQ_ROW, LSQ_MAX_BITS, lsq_scale_bits(LSQ_MAX_BITS)) > m) /* any sender's width fits */
		m = ibpi_lsq_bytes(n, LSQ_ROW, LSQ_MAX_BITS, lsq_scale_bits(LSQ_MAX_BITS));
	*cap = COLL_HDR + m;
	return IBP_OK;
}

ibp_status_t ibpi_coll_encode(const coll_hdr_t *h, const void *src, void *msg, uint64_t cap, int nthreads,
			 int lsq_bits, int exp_table, uint64_t *bytes)
{
	uint8_t *p = (uint8_t *)msg + COLL_HDR;
	uint64_t pcap = cap - COLL_HDR, size = 0, n = h->elems;
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	memcpy(msg, h, sizeof *h);
	switch (h->enc) {
	case COLL_ENC_RAW:
		size = n * ibp_dtype_size(dt);
		if (size > pcap)
			return ibpi_fail(IBP_ERR_INTERNAL, "coll: message capacity too small");
		if (size)
			memcpy(p, src, size);
		break;
	case COLL_ENC_EXP: {
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.nthreads = nthreads;
		o.table_mode = (ibp_exp_table_mode_t)exp_table;
		o.checksum = 0; /* a wire message (see fp8_opts) */
		IBP_TRY(ibp_exp_encode(src, dt, n, &o, p, pcap, &size));
		break;
	}
	case COLL_ENC_FP8: {
		ibp_fp8_opts_t o = fp8_opts(nthreads);
		IBP_TRY(ibp_fp8_encode(src, dt, n, &o, p, pcap, &size));
		break;
	}
	case COLL_ENC_LSQ: { /* rounding keyed by the call, the chunk and the sender's position */
		uint64_t key = ((uint64_t)h->seq << 32 | h->chunk) * 0x9e3779b97f4a7c15ull ^ h->count ^ (h->elems << 17);
		IBP_TRY(ibpi_lsq_encode(src, dt, n, LSQ_ROW, lsq_bits, lsq_scale_bits(lsq_bits), key, p, pcap, &size));
		break;
	}
	default:
		return ibpi_fail(IBP_ERR_INTERNAL, "coll: encoding %u", h->enc);
	}
	*bytes = COLL_HDR + size;
	return IBP_OK;
}

static const char *op_name(unsigned op)
{
	static const char *const names[] = { "calibration", "allgather", "reducescatter", "allreduce",
					     "alltoall", "alltoallv" };
	return op < 6 ? names[op] : "unknown";
}

ibp_status_t ibpi_coll_check(const void *msg, uint64_t bytes, const coll_hdr_t *want, int from, coll_hdr_t *h)
{
	if (bytes < COLL_HDR)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: %llu-byte message from rank %d is shorter than its header",
				(unsigned long long)bytes, from);
	memcpy(h, msg, sizeof *h);
	if (h->magic != COLL_MAGIC)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: message from rank %d has a bad magic", from);
	if (h->op != want->op || h->seq != want->seq)
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"coll: mismatch: rank %d is in %s (call %u), this rank in %s (call %u)", from,
				op_name(h->op), h->seq, op_name(want->op), want->seq);
	if (h->codec != want->codec || h->dtype != want->dtype || h->count != want->count)
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"coll: mismatch in %s: rank %d has codec %u dtype %u count %llu, this rank "
				"codec %u dtype %u count %llu",
				op_name(h->op), from, h->codec, h->dtype, (unsigned long long)h->count, want->codec,
				want->dtype, (unsigned long long)want->count);
	if (h->elems != want->elems || h->chunk != want->chunk)
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"coll: mismatch in %s: rank %d sent chunk %u of %llu elements, expected chunk %u of "
				"%llu",
				op_name(h->op), from, h->chunk, (unsigned long long)h->elems, want->chunk,
				(unsigned long long)want->elems);
	if (h->enc > COLL_ENC_PTS || (h->enc != COLL_ENC_RAW && h->enc != h->codec))
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: message from rank %d has encoding %u under codec %u", from,
				h->enc, h->codec);
	return IBP_OK;
}

ibp_status_t ibpi_coll_decode(const coll_hdr_t *h, const void *msg, uint64_t bytes, void *dst, int nthreads)
{
	const uint8_t *p = (const uint8_t *)msg + COLL_HDR;
	uint64_t size = bytes - COLL_HDR, n = h->elems;
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	switch (h->enc) {
	case COLL_ENC_RAW:
		if (size != n * ibp_dtype_size(dt))
			return ibpi_fail(IBP_ERR_CORRUPT, "coll: raw payload of %llu bytes for %llu elements",
					(unsigned long long)size, (unsigned long long)n);
		if (size)
			memcpy(dst, p, size);
		return IBP_OK;
	case COLL_ENC_EXP:
		return ibp_exp_decode(p, size, dt, n, dst, nthreads);
	case COLL_ENC_FP8: {
		ibp_fp8_info_t info;
		IBP_TRY(ibp_fp8_stream_info(p, size, &info));
		if (info.bytes != size)
			return ibpi_fail(IBP_ERR_CORRUPT, "coll: fp8 stream of %llu bytes in a %llu-byte payload",
					(unsigned long long)info.bytes, (unsigned long long)size);
		return ibp_fp8_decode(p, size, dt, n, dst, nthreads);
	}
	case COLL_ENC_LSQ:
		return ibpi_lsq_decode(p, size, dt, n, dst);
	}
	return ibpi_fail(IBP_ERR_CORRUPT, "coll: encoding %u", h->enc);
}

ibp_status_t ibpi_coll_decode_f32(const coll_hdr_t *h, const void *msg, uint64_t bytes, float *dst, void *scratch,
			     int nthreads)
{
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	/* Partials travel in dt (FP8 decodes rounded to dt), so every codec adds the same kind of value. */
	IBP_TRY(ibpi_coll_decode(h, msg, bytes, scratch, nthreads));
	ibpi_coll_widen(scratch, dt, h->elems, dst);
	return IBP_OK;
}

void ibpi_coll_add_round(const float *acc, const void *src, ibp_dtype_t dt, uint64_t n, void *dst)
{
	if (dt == IBP_DTYPE_F32) {
		const float *s = src;
		float *d = dst;
		for (uint64_t i = 0; i < n; i++)
			d[i] = acc[i] + s[i];
		return;
	}
	const uint16_t *s = src;
	uint16_t *d = dst;
	if (dt == IBP_DTYPE_BF16)
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_bf16(acc[i] + fp8i_bf16_to_f32(s[i]));
	else
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_f16(acc[i] + fp8i_f16_to_f32(s[i]));
}

/* a + b with NaNs made explicit, as x86 SSE does them (the host path's
 * add): a NaN operand comes back quieted, the first one first; a NaN made
 * by the add (Inf - Inf) is the default NaN 0xffc00000. The kernel twin
 * applies the same rule, so even NaN bits agree. */
static float add_nan(float a, float b)
{
	uint32_t u;
	if (a != a || b != b) {
		float n = a != a ? a : b;
		memcpy(&u, &n, 4);
		u |= 0x00400000u;
	} else {
		float r = a + b;
		if (r == r)
			return r;
		u = 0xffc00000u;
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

void ibpi_coll_reduce_add(const void *part, const void *local, ibp_dtype_t dt, uint64_t n, void *dst)
{
	if (dt == IBP_DTYPE_F32) {
		const float *a = part, *s = local;
		float *d = dst;
		for (uint64_t i = 0; i < n; i++)
			d[i] = add_nan(a[i], s[i]);
		return;
	}
	const uint16_t *a = part, *s = local;
	uint16_t *d = dst;
	if (dt == IBP_DTYPE_BF16)
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_bf16(add_nan(fp8i_bf16_to_f32(a[i]), fp8i_bf16_to_f32(s[i])));
	else
		for (uint64_t i = 0; i < n; i++)
			d[i] = fp8i_f32_to_f16(add_nan(fp8i_f16_to_f32(a[i]), fp8i_f16_to_f32(s[i])));
}
