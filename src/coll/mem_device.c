/* mem_device.c - the algorithms' buffer steps on device memory: messages
 * are a 128-byte header slot (the 32-byte coll_hdr_t, then zeros; keeps
 * the payload 128-byte aligned for the codec kernels) + payload; encode
 * and decode run ibp_exp_*_cuda / ibp_fp8_*_cuda, the reductions
 * ibpi_coll_reduce_add_cuda, copies cudaMemcpyAsync, all on the call's stream.
 * With IBP_COLL_MEM_HOST_FALLBACK the same steps run on host memory with
 * the CPU twins (ibp_exp_encode_batch / decode_batch, ibp_fp8_encode /
 * decode, ibpi_coll_reduce_add), so the orchestration is tested without a GPU.
 * Buffers are kept in c->dev and grown, never allocated per call. The
 * transport runs on its own stream (NCCL), so every step returns with the
 * call's stream drained: a message is complete before it is sent, and a
 * buffer is no longer read when the next receive overwrites it. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll_internal.h"
#include "coll/coll_mem.h"
#include "ibp/cuda.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "util/error.h"

#define DEV_HDR 128u
#define SMALL 128u /* small[0]: encoded size, [1]: offset 0, [2]: size, [3]: status (int32) */

static int on_gpu(const ibp_coll_comm_t *c)
{
	return c->mem_kind == IBP_COLL_MEM_DEVICE;
}

static uint64_t up128(uint64_t x)
{
	return (x + 127u) & ~(uint64_t)127u;
}

static ibp_status_t d_alloc(ibp_coll_comm_t *c, uint64_t bytes, uint8_t **p)
{
	if (on_gpu(c))
		return ibp_cuda_malloc(bytes, (void **)p);
	*p = aligned_alloc(128, up128(bytes ? bytes : 1));
	return *p ? IBP_OK : ibpi_fail(IBP_ERR_NOMEM, "coll: out of memory for %llu bytes", (unsigned long long)bytes);
}

static void d_free(ibp_coll_comm_t *c, uint8_t *p)
{
	if (on_gpu(c))
		ibp_cuda_free(p);
	else
		free(p);
}

void ibpi_coll_dev_release(ibp_coll_comm_t *c)
{
	coll_dev_t *d = &c->dev;
	uint8_t *all[] = { d->m[0], d->m[1], d->tmp, d->acc, d->ws, d->small };
	for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++)
		d_free(c, all[i]);
	memset(d, 0, sizeof *d);
}

static ibp_status_t d_copy(ibp_coll_comm_t *c, void *dst, const void *src, uint64_t bytes)
{
	if (!bytes || dst == src)
		return IBP_OK;
	if (on_gpu(c))
		return ibp_cuda_memcpy(dst, src, bytes, c->stream);
	memmove(dst, src, bytes);
	return IBP_OK;
}

static ibp_status_t d_finish(ibp_coll_comm_t *c)
{
	return on_gpu(c) ? ibp_cuda_sync(c->stream) : IBP_OK;
}

/* Grows *p (capacity *cap) to at least want bytes. */
static ibp_status_t grow(ibp_coll_comm_t *c, uint8_t **p, uint64_t *cap, uint64_t want)
{
	if (*p && *cap >= want)
		return IBP_OK;
	d_free(c, *p);
	*p = NULL;
	*cap = 0;
	IBP_TRY(d_alloc(c, want, p));
	*cap = want;
	return IBP_OK;
}

static ibp_status_t exp_ws(ibp_dtype_t dt, uint64_t n, uint64_t *bytes)
{
	*bytes = 0;
	return n ? ibp_exp_encode_workspace_cuda(dt, n, n, bytes) : IBP_OK;
}

static ibp_status_t d_get(ibp_coll_comm_t *c, ibp_dtype_t dt, uint64_t maxn, int reduce, coll_bufs_t *b)
{
	coll_dev_t *d = &c->dev;
	uint64_t cap = 0, ws = 0, esz = ibp_dtype_size(dt), n1 = maxn ? maxn : 1, m0 = d->mcap, t0 = d->tcap;
	memset(b, 0, sizeof *b);
	IBP_TRY(ibpi_coll_msg_cap(dt, maxn, &cap));
	cap = DEV_HDR + up128(cap - COLL_HDR);
	if (on_gpu(c))
		IBP_TRY(exp_ws(dt, maxn, &ws));
	IBP_TRY(grow(c, &d->m[0], &m0, cap));
	IBP_TRY(grow(c, &d->m[1], &d->mcap, cap));
	if (reduce) {
		IBP_TRY(grow(c, &d->tmp, &t0, up128(n1 * esz)));
		IBP_TRY(grow(c, &d->acc, &d->tcap, up128(n1 * esz)));
	}
	IBP_TRY(grow(c, &d->ws, &d->wscap, up128(ws ? ws : 1)));
	if (!d->small)
		IBP_TRY(d_alloc(c, SMALL, &d->small));
	b->cap = d->mcap;
	b->m[0] = d->m[0];
	b->m[1] = d->m[1];
	b->tmp = reduce ? d->tmp : NULL;
	b->acc = reduce ? d->acc : NULL;
	return IBP_OK;
}

static void d_put(ibp_coll_comm_t *c, coll_bufs_t *b)
{
	(void)c; /* kept by the communicator */
	memset(b, 0, sizeof *b);
}

/* Reads a device u64 / int32 written on the stream (waits for it). */
static ibp_status_t read_small(ibp_coll_comm_t *c, void *host, uint64_t off, uint64_t bytes)
{
	if (!on_gpu(c)) {
		memcpy(host, c->dev.small + off, bytes);
		return IBP_OK;
	}
	IBP_TRY(ibp_cuda_memcpy(host, c->dev.small + off, bytes, c->stream));
	return ibp_cuda_sync(c->stream);
}

static ibp_fp8_opts_t fp8_opts(void)
{
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.checksum = 0; /* wire messages, as the device encoder writes them */
	return o;
}

static ibp_status_t d_encode(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *src, void *msg, uint64_t cap,
			     uint64_t *bytes)
{
	uint8_t hdr[DEV_HDR] = { 0 }, *p = (uint8_t *)msg + DEV_HDR;
	uint64_t n = h->elems, pcap = cap - DEV_HDR, size = 0;
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	memcpy(hdr, h, sizeof *h);
	IBP_TRY(d_copy(c, msg, hdr, DEV_HDR));
	switch (h->enc) {
	case COLL_ENC_RAW:
		size = n * ibp_dtype_size(dt);
		if (size > pcap)
			return ibpi_fail(IBP_ERR_INTERNAL, "coll: device message capacity too small");
		IBP_TRY(d_copy(c, p, src, size));
		break;
	case COLL_ENC_EXP: {
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.nthreads = c->o.nthreads;
		o.checksum = 0; /* wire messages, as the device encoder writes them */
		o.table_mode = (ibp_exp_table_mode_t)c->exp_table; /* the switcher's choice (comm.c) */
		if (on_gpu(c)) {
			IBP_TRY(ibp_exp_encode_cuda(src, dt, n, n, &o, p, pcap, (uint64_t *)c->dev.small, c->dev.ws,
						    c->dev.wscap, c->stream));
			IBP_TRY(read_small(c, &size, 0, sizeof size));
		} else {
			uint64_t off[2];
			IBP_TRY(ibp_exp_encode_batch(src, dt, n, n, &o, p, pcap, off));
			memcpy(c->dev.small, &off[1], sizeof off[1]);
			IBP_TRY(read_small(c, &size, 0, sizeof size));
		}
		if (size > pcap)
			return ibpi_fail(IBP_ERR_INTERNAL, "coll: exp block of %llu bytes in a %llu-byte message",
					(unsigned long long)size, (unsigned long long)pcap);
		break;
	}
	case COLL_ENC_FP8: {
		ibp_fp8_opts_t o = fp8_opts();
		IBP_TRY(ibp_fp8_encoded_size(&o, n, &size));
		if (size > pcap)
			return ibpi_fail(IBP_ERR_INTERNAL, "coll: device message capacity too small");
		if (on_gpu(c))
			IBP_TRY(ibp_fp8_encode_cuda(src, dt, n, 0, &o, p, c->stream));
		else {
			o.nthreads = c->o.nthreads;
			IBP_TRY(ibp_fp8_encode(src, dt, n, &o, p, pcap, &size));
		}
		break;
	}
	default:
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "coll: encoding %u on device buffers", h->enc);
	}
	*bytes = DEV_HDR + size;
	return d_finish(c);
}

static ibp_status_t d_check(ibp_coll_comm_t *c, const void *msg, uint64_t bytes, const coll_hdr_t *want, int from,
			    coll_hdr_t *h)
{
	uint8_t hdr[COLL_HDR];
	if (bytes < DEV_HDR)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: %llu-byte message from rank %d is shorter than its header",
				(unsigned long long)bytes, from);
	if (on_gpu(c)) {
		IBP_TRY(ibp_cuda_memcpy(hdr, msg, COLL_HDR, c->stream));
		IBP_TRY(ibp_cuda_sync(c->stream));
	} else
		memcpy(hdr, msg, COLL_HDR);
	IBP_TRY(ibpi_coll_check(hdr, COLL_HDR, want, from, h));
	if (h->enc != COLL_ENC_RAW && h->enc != COLL_ENC_EXP && h->enc != COLL_ENC_FP8)
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: message from rank %d has encoding %u on device buffers", from,
				h->enc);
	return IBP_OK;
}

static ibp_status_t d_decode(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *msg, uint64_t bytes, void *dst)
{
	const uint8_t *p = (const uint8_t *)msg + DEV_HDR;
	uint64_t size = bytes - DEV_HDR, n = h->elems;
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	int32_t status = 0;
	switch (h->enc) {
	case COLL_ENC_RAW:
		if (size != n * ibp_dtype_size(dt))
			return ibpi_fail(IBP_ERR_CORRUPT, "coll: raw payload of %llu bytes for %llu elements",
					(unsigned long long)size, (unsigned long long)n);
		IBP_TRY(d_copy(c, dst, p, size));
		return d_finish(c);
	case COLL_ENC_EXP: {
		if (!n || !size)
			return ibpi_fail(IBP_ERR_CORRUPT, "coll: empty exp payload");
		uint64_t meta[2] = { 0, size };
		if (!on_gpu(c)) {
			uint64_t off[2] = { 0, size };
			return ibp_exp_decode_batch(p, size, off, dt, n, n, dst, c->o.nthreads);
		}
		uint64_t *sm = (uint64_t *)c->dev.small;
		IBP_TRY(ibp_cuda_memcpy(sm + 1, meta, sizeof meta, c->stream));
		IBP_TRY(ibp_exp_decode_cuda(p, size, sm + 1, sm + 2, dt, n, n, dst, (int32_t *)(sm + 3), c->stream));
		break;
	}
	case COLL_ENC_FP8: {
		ibp_fp8_opts_t o = fp8_opts();
		ibp_fp8_info_t info;
		uint64_t want = 0;
		IBP_TRY(ibp_fp8_encoded_size(&o, n, &want));
		if (size != want)
			return ibpi_fail(IBP_ERR_CORRUPT, "coll: fp8 payload of %llu bytes for %llu elements",
					(unsigned long long)size, (unsigned long long)n);
		if (!on_gpu(c)) {
			IBP_TRY(ibp_fp8_stream_info(p, size, &info));
			if (info.bytes != size)
				return ibpi_fail(IBP_ERR_CORRUPT, "coll: fp8 stream of %llu bytes in a %llu-byte payload",
						(unsigned long long)info.bytes, (unsigned long long)size);
			return ibp_fp8_decode(p, size, dt, n, dst, c->o.nthreads);
		}
		IBP_TRY(ibp_fp8_decode_bounded_cuda(p, size, dt, n, 0, &o, dst, (int32_t *)(c->dev.small + 24), c->stream));
		break;
	}
	default:
		return ibpi_fail(IBP_ERR_CORRUPT, "coll: encoding %u", h->enc);
	}
	IBP_TRY(read_small(c, &status, 24, sizeof status));
	if (status != 0)
		return ibpi_fail((ibp_status_t)status, "coll: corrupt %s payload from the device decoder",
				h->enc == COLL_ENC_EXP ? "exp" : "fp8");
	return IBP_OK;
}

static ibp_status_t d_reduce(ibp_coll_comm_t *c, const coll_hdr_t *h, const void *msg, uint64_t bytes,
			     const void *local, coll_bufs_t *b)
{
	ibp_dtype_t dt = (ibp_dtype_t)h->dtype;
	/* Partials travel in dt (FP8 decodes rounded to dt), as on the host. */
	IBP_TRY(d_decode(c, h, msg, bytes, b->tmp));
	if (!on_gpu(c)) {
		ibpi_coll_reduce_add(b->tmp, local, dt, h->elems, b->acc);
		return IBP_OK;
	}
	IBP_TRY(ibpi_coll_reduce_add_cuda(b->tmp, local, dt, h->elems, b->acc, c->stream));
	return d_finish(c);
}

const coll_mem_ops_t ibpi_coll_mem_device = { d_get, d_put, d_encode, d_check, d_decode, d_reduce, d_copy, d_finish };
