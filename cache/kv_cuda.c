/* kv_cuda.c - KV offload through a device (ibp_kv_stream_t, ibp/cache.h):
 * stores encode on the device and copy the blocks asynchronously into
 * pinned pool slots in the KV block format (kv_block.c); loads check the
 * slots' headers on the host, copy the payloads into a device stage and
 * decode them into the paged cache with the staged gather kernel. Built the
 * same way with and without CUDA: it calls only the public GPU API, and a
 * host-fallback stream runs every step with the CPU twin on host memory
 * (the IBP_CUDA_HOST_FALLBACK convention), so the orchestration is tested
 * without a GPU. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitpack/codec_internal.h"
#include "cuda/ibp_cuda_internal.h"
#include "cuda/ibp_gather_staged.h"
#include "exp/exp_split.h"
#include "util/copy.h"
#include "util/parallel.h"
#include "ibp/alloc.h"
#include "ibp/cache.h"
#include "ibp/codec.h"
#include "ibp/cuda.h"
#include "ibp/exp.h"
#include "util/error.h"

/* A buffer grown by doubling, on the device (or host for the fallback) or
 * pinned host memory. */
typedef struct kv_buf {
	void *p;
	uint64_t cap;
} kv_buf_t;

typedef struct kv_pin {
	ibp_slab_pool_t *pool;
	void *ptr;
} kv_pin_t;

struct ibp_kv_stream {
	int on_device;
	int host_threads; /* CPU encoders' threads: 0 (all) for IBP_KV_HOST, 1 for the fallback twin */
	int host_cpus;    /* host_threads, 0 resolved to the online CPUs once (sysconf reads sysfs per call) */
	void *stream;
	uint64_t R;
	ibp_dtype_t dt;          /* element type (EXP blocks) */
	uint64_t chunk;          /* EXP: elements per block (2 rows); 0: no EXP blocks */
	uint64_t estride;        /* EXP: a block's room in a stage (bound, 128-aligned) */
	double exp_sigma;        /* EXP: ibp_exp_opts_t.sigma of stores (0: measured per block) */
	ibp_codec_t *hcodec;     /* own copy of the codec (NULL: no IBP blocks) */
	ibp_cuda_store_t *store; /* GPU: zero rows, the device codec and the staged decode */
	/* device (host for the fallback) */
	kv_buf_t d_ids, d_rows, d_pay, d_off, d_flags, d_cl, d_ws, d_stage, d_lens, d_meta, d_orow, d_status;
	kv_buf_t d_eoff, d_esz, d_eorow, d_estat;
	/* pinned host */
	kv_buf_t h_ids, h_off, h_flags, h_cl, h_lens, h_meta, h_orow, h_status;
	kv_buf_t h_eoff, h_esz, h_eorow, h_estat;
	/* the call in flight */
	kv_pin_t *pins;
	uint64_t npins, pins_cap;
	uint64_t nstatus; /* rows of the last load whose status comes back in h_status */
	uint64_t nexp;    /* EXP rows of the last load (h_eorow), one status in h_estat */
	uint8_t *exp_kv;  /* their cache */
	uint64_t failed;  /* rows that failed to decode since the last wait */
};

/* The next capacity of a buffer that must hold `bytes`: doubled (from 4 KiB)
 * so that growing batches reallocate O(log) times. */
static uint64_t next_cap(uint64_t cap, uint64_t bytes)
{
	cap = cap ? cap : 4096;
	while (cap < bytes)
		cap = cap > UINT64_MAX / 2 ? bytes : cap * 2;
	return cap;
}

static ibp_status_t dev_grow(ibp_kv_stream_t *s, kv_buf_t *b, uint64_t bytes)
{
	if (bytes <= b->cap)
		return IBP_OK;
	const uint64_t cap = next_cap(b->cap, bytes);
	void *p = NULL;
	if (s->on_device) {
		IBP_TRY(ibp_cuda_malloc(cap, &p));
		ibp_cuda_free(b->p);
	} else {
		p = ibp_host_alloc(cap, 256);
		if (!p)
			return ibpi_fail(IBP_ERR_NOMEM, "kv stream: out of memory for a %llu-byte buffer",
					(unsigned long long)cap);
		ibp_host_free(b->p);
	}
	b->p = p, b->cap = cap;
	return IBP_OK;
}

static ibp_status_t host_grow(ibp_kv_stream_t *s, kv_buf_t *b, uint64_t bytes)
{
	if (bytes <= b->cap)
		return IBP_OK;
	const uint64_t cap = next_cap(b->cap, bytes);
	void *p = NULL;
	/* Ordinary host memory where nothing can pin it (the host fallback,
	 * and the emulator): NO_DEVICE then, with valid memory. */
	ibp_status_t st = ibp_pinned_alloc(cap, 256, IBP_CUDA_HOST_FALLBACK, &p);
	if (st != IBP_OK && !(st == IBP_ERR_NO_DEVICE && p))
		return st;
	/* an earlier call's copy from or into the old buffer may still be in
	 * flight on the stream: it goes back to the allocator after that */
	if (s->on_device)
		st = ibp_pinned_free_async(b->p, s->stream);
	else
		ibp_pinned_free(b->p), st = IBP_OK;
	if (st != IBP_OK) {
		ibp_pinned_free(p);
		return st;
	}
	b->p = p, b->cap = cap;
	return IBP_OK;
}

/* Copy in stream order: cudaMemcpyAsync on a GPU, memcpy on the host. */
static ibp_status_t xcopy(ibp_kv_stream_t *s, void *dst, const void *src, uint64_t bytes)
{
	if (!bytes)
		return IBP_OK;
	if (s->on_device)
		return ibp_cuda_memcpy(dst, src, bytes, s->stream);
	memcpy(dst, src, bytes);
	return IBP_OK;
}

static ibp_status_t add_pin(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, void *ptr)
{
	if (s->npins == s->pins_cap) {
		uint64_t cap = s->pins_cap ? 2 * s->pins_cap : 64;
		kv_pin_t *p = realloc(s->pins, cap * sizeof(*p));
		if (!p)
			return ibpi_fail(IBP_ERR_NOMEM, "kv stream: out of memory for %llu pins",
					(unsigned long long)cap);
		s->pins = p, s->pins_cap = cap;
	}
	s->pins[s->npins].pool = pool, s->pins[s->npins].ptr = ptr;
	s->npins++;
	return IBP_OK;
}

static void unpin_all(ibp_kv_stream_t *s)
{
	for (uint64_t i = 0; i < s->npins; i++)
		(void)ibp_slab_pool_unpin(s->pins[i].pool, s->pins[i].ptr);
	s->npins = 0;
}

/* Finishes the call in flight: stream sync, unpin, count failed rows. */
static ibp_status_t finish(ibp_kv_stream_t *s)
{
	ibp_status_t st = s->on_device ? ibp_cuda_sync(s->stream) : IBP_OK;
	unpin_all(s);
	if (st == IBP_OK) {
		const int32_t *stat = s->h_status.p;
		for (uint64_t i = 0; i < s->nstatus; i++)
			s->failed += stat[i] != IBP_OK;
	}
	if (st == IBP_OK && s->nexp && *(const int32_t *)s->h_estat.p != IBP_OK) {
		/* One status for the call's EXP blocks: all their rows are zeroed
		 * (a failed block's output is unspecified). */
		const int64_t *orow = s->h_eorow.p;
		for (uint64_t i = 0; i < s->nexp && st == IBP_OK; i++) {
			uint8_t *row = s->exp_kv + (uint64_t)orow[i] * s->R;
			if (s->on_device)
				st = ibp_cuda_memset(row, 0, s->R, s->stream);
			else
				memset(row, 0, s->R);
		}
		if (st == IBP_OK && s->on_device)
			st = ibp_cuda_sync(s->stream);
		s->failed += s->nexp;
	}
	s->nstatus = 0, s->nexp = 0;
	return st;
}

void ibp_kv_stream_free(ibp_kv_stream_t *s)
{
	if (!s)
		return;
	(void)finish(s);
	kv_buf_t *dev[] = { &s->d_ids, &s->d_rows, &s->d_pay, &s->d_off, &s->d_flags, &s->d_cl, &s->d_ws,
			    &s->d_stage, &s->d_lens, &s->d_meta, &s->d_orow, &s->d_status, &s->d_eoff,
			    &s->d_esz, &s->d_eorow, &s->d_estat };
	kv_buf_t *host[] = { &s->h_ids, &s->h_off, &s->h_flags, &s->h_cl, &s->h_lens, &s->h_meta, &s->h_orow,
			     &s->h_status, &s->h_eoff, &s->h_esz, &s->h_eorow, &s->h_estat };
	for (unsigned i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		if (s->on_device)
			ibp_cuda_free(dev[i]->p);
		else
			ibp_host_free(dev[i]->p);
	}
	for (unsigned i = 0; i < sizeof(host) / sizeof(host[0]); i++)
		ibp_pinned_free(host[i]->p);
	ibp_cuda_store_free(s->store);
	ibp_codec_free(s->hcodec);
	free(s->pins);
	free(s);
}

ibp_status_t ibp_kv_stream_create(const ibp_codec_t *codec, uint64_t row_bytes, ibp_dtype_t dtype, unsigned flags,
				  void *stream, ibp_kv_stream_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_create: NULL out");
	*out = NULL;
	if (row_bytes == 0 || row_bytes > UINT32_MAX)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_create: row_bytes %llu (1 .. 4 GiB - 1)",
				(unsigned long long)row_bytes);
	if (codec && ibp_codec_row_bytes(codec) != row_bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_create: codec rows of %llu bytes, not %llu",
				(unsigned long long)ibp_codec_row_bytes(codec), (unsigned long long)row_bytes);
	if (flags & ~(IBP_CUDA_HOST_FALLBACK | IBP_KV_HOST))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_create: unknown flags 0x%x", flags);
	int count = 0;
	ibp_status_t dev = (flags & IBP_KV_HOST) ? IBP_ERR_NO_DEVICE : ibp_cuda_device_count(&count);
	if (dev != IBP_OK && (dev != IBP_ERR_NO_DEVICE || !(flags & (IBP_CUDA_HOST_FALLBACK | IBP_KV_HOST))))
		return dev;
	ibp_kv_stream_t *s = calloc(1, sizeof(*s));
	if (!s)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_stream_create: out of memory");
	s->on_device = dev == IBP_OK;
	s->host_threads = (flags & IBP_KV_HOST) ? 0 : 1;
	s->host_cpus = ibpi_parallel_threads(s->host_threads, UINT64_MAX);
	s->stream = stream;
	s->R = row_bytes;
	s->dt = dtype;
	const uint64_t esize = ibp_dtype_size(dtype);
	uint64_t bound = 0;
	if ((dtype == IBP_DTYPE_BF16 || dtype == IBP_DTYPE_F16 || dtype == IBP_DTYPE_F32) && row_bytes % esize == 0 &&
	    ibp_exp_encode_bound(dtype, 2 * row_bytes / esize, &bound) == IBP_OK) {
		s->chunk = 2 * row_bytes / esize;
		s->estride = (bound + IBP_EXP_ALIGN - 1) / IBP_EXP_ALIGN * IBP_EXP_ALIGN;
	}
	ibp_status_t st = codec ? ibpi_cuda_codec_clone(codec, &s->hcodec) : IBP_OK;
	if (st == IBP_OK && codec && s->on_device) {
		/* A device store of zero rows: the device codec (encode) and the staged decode. */
		static const uint64_t zero = 0;
		ibp_cuda_store_desc_t d = { .codec = codec, .offsets = &zero, .payload_kind = IBP_CUDA_PAYLOAD_MAPPED };
		st = ibp_cuda_store_create(&d, 0, stream, &s->store);
	}
	if (st != IBP_OK) {
		ibp_kv_stream_free(s);
		return st;
	}
	*out = s;
	if (!s->on_device && !(flags & IBP_KV_HOST))
		return ibpi_fail(IBP_ERR_NO_DEVICE, "ibp_kv_stream_create: no usable CUDA device; the stream runs on "
				"the CPU on host memory (host fallback)");
	return IBP_OK;
}

int ibp_kv_stream_on_device(const ibp_kv_stream_t *s)
{
	return s ? s->on_device : 0;
}

ibp_status_t ibp_kv_stream_set_exp_sigma(ibp_kv_stream_t *s, double sigma)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_set_exp_sigma: NULL stream");
	if (!(sigma >= 0.0) || sigma > 1.7976931348623157e308)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_set_exp_sigma: sigma %g is not finite and >= 0",
				sigma);
	s->exp_sigma = sigma;
	return IBP_OK;
}

ibp_status_t ibp_kv_stream_wait(ibp_kv_stream_t *s)
{
	if (!s)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_stream_wait: NULL stream");
	IBP_TRY(finish(s));
	if (s->failed) {
		uint64_t f = s->failed;
		s->failed = 0;
		return ibpi_fail(IBP_ERR_CORRUPT,
				"ibp_kv_stream_wait: %llu K/V rows failed to decode (corrupt blocks; those rows are zero)",
				(unsigned long long)f);
	}
	return IBP_OK;
}

/* Drops blocks allocated by a failed store (pinned: freed at the unpin). */
static void undo_store(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, int64_t *handles, uint64_t n)
{
	if (s->on_device)
		(void)ibp_cuda_sync(s->stream); /* no copy may still write a slot */
	for (uint64_t b = 0; b < n; b++)
		if (handles[b] >= 0)
			(void)ibp_slab_pool_remove(pool, handles[b]);
	unpin_all(s);
	for (uint64_t b = 0; b < n; b++)
		handles[b] = -1;
}

static void put_u32(uint8_t *p, uint64_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* An IBP block's header (kv_block.c's format) from the batch's row arrays. */
static void put_header(uint8_t *h, const ibp_kv_stream_t *s, uint64_t b)
{
	const uint64_t *off = s->h_off.p;
	const uint8_t *fl = s->h_flags.p, *cl = s->h_cl.p;
	put_u32(h, off[2 * b + 1] - off[2 * b]);
	put_u32(h + 4, off[2 * b + 2] - off[2 * b + 1]);
	h[8] = fl[2 * b], h[9] = fl[2 * b + 1];
	h[10] = cl[2 * b], h[11] = cl[2 * b + 1];
}

/* The rows of the stored blocks, gathered into d_rows (2b: K, 2b + 1: V). */
static ibp_status_t gather_rows(ibp_kv_stream_t *s, const uint8_t *kv, uint64_t num_blocks, uint64_t n)
{
	const uint64_t R = s->R, m = 2 * n;
	IBP_TRY(dev_grow(s, &s->d_rows, m * R));
	const int64_t *ids = s->h_ids.p;
	if (!s->on_device) {
		for (uint64_t r = 0; r < m; r++)
			memcpy((uint8_t *)s->d_rows.p + r * R, kv + (uint64_t)ids[r] * R, R);
		return IBP_OK;
	}
	IBP_TRY(dev_grow(s, &s->d_ids, m * 8));
	IBP_TRY(xcopy(s, s->d_ids.p, ids, m * 8));
	return ibp_gather_plain_cuda(kv, 2 * num_blocks, R, s->d_ids.p, m, s->d_rows.p, NULL, NULL, s->stream);
}

/* IBP: encodes d_rows into d_pay; h_off/h_flags/h_cl get the row arrays
 * (one stream sync on a GPU). */
static ibp_status_t encode_rows(ibp_kv_stream_t *s, uint64_t m)
{
	const ibp_codec_t *hc = s->hcodec;
	const uint64_t cap = ibp_batch_bound(hc, m);
	IBP_TRY(dev_grow(s, &s->d_pay, cap));
	IBP_TRY(host_grow(s, &s->h_off, (m + 1) * 8));
	IBP_TRY(host_grow(s, &s->h_flags, m));
	IBP_TRY(host_grow(s, &s->h_cl, m));
	if (!s->on_device)
		return ibp_encode_batch(hc, s->d_rows.p, m, s->d_pay.p, cap, s->h_off.p, s->h_flags.p, s->h_cl.p,
					s->host_threads);
	const ibp_cuda_codec_t *dc = ibp_cuda_store_codec(s->store);
	uint64_t ws = 0;
	IBP_TRY(ibp_encode_workspace_cuda(dc, m, &ws));
	IBP_TRY(dev_grow(s, &s->d_ws, ws));
	IBP_TRY(dev_grow(s, &s->d_off, (m + 1) * 8));
	IBP_TRY(dev_grow(s, &s->d_flags, m));
	IBP_TRY(dev_grow(s, &s->d_cl, m));
	IBP_TRY(ibp_encode_batch_cuda(dc, s->d_rows.p, m, s->d_pay.p, cap, s->d_off.p, s->d_flags.p, s->d_cl.p,
				      s->d_ws.p, s->d_ws.cap, s->stream));
	IBP_TRY(xcopy(s, s->h_off.p, s->d_off.p, (m + 1) * 8));
	IBP_TRY(xcopy(s, s->h_flags.p, s->d_flags.p, m));
	IBP_TRY(xcopy(s, s->h_cl.p, s->d_cl.p, m));
	return ibp_cuda_sync(s->stream);
}

/* EXP on a GPU: encodes the n blocks of d_rows (2 rows each, one exponent
 * block per block) into d_pay: block b at h_eoff[b], h_esz[b] bytes (one
 * sync). Bytes equal ibp_exp_encode's of the block's elements without a
 * checksum (in-memory blocks). The host stores EXP blocks through
 * store_exp_batch_host instead. */
static ibp_status_t encode_exp(ibp_kv_stream_t *s, uint64_t n)
{
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = s->host_threads;
	o.checksum = 0;
	o.sigma = s->exp_sigma;
	IBP_TRY(dev_grow(s, &s->d_pay, n * s->estride));
	IBP_TRY(host_grow(s, &s->h_eoff, (n + 1) * 8));
	IBP_TRY(host_grow(s, &s->h_esz, n * 8));
	uint64_t *eoff = s->h_eoff.p, *esz = s->h_esz.p;
	uint64_t ws = 0;
	IBP_TRY(ibp_exp_encode_workspace_cuda(s->dt, n * s->chunk, s->chunk, &ws));
	IBP_TRY(dev_grow(s, &s->d_ws, ws));
	IBP_TRY(dev_grow(s, &s->d_esz, n * 8));
	IBP_TRY(ibp_exp_encode_cuda(s->d_rows.p, s->dt, n * s->chunk, s->chunk, &o, s->d_pay.p, s->estride, s->d_esz.p,
				    s->d_ws.p, s->d_ws.cap, s->stream));
	IBP_TRY(xcopy(s, esz, s->d_esz.p, n * 8));
	for (uint64_t b = 0; b < n; b++)
		eoff[b] = b * s->estride;
	IBP_TRY(ibp_cuda_sync(s->stream));
	for (uint64_t b = 0; b < n; b++)
		if (esz[b] > s->estride)
			return ibpi_fail(IBP_ERR_INTERNAL, "ibp_kv_encode_cuda: exponent block %llu of %llu bytes, over "
					"its %llu-byte room", (unsigned long long)b, (unsigned long long)esz[b],
					(unsigned long long)s->estride);
	return IBP_OK;
}

#define HOST_BATCH_BYTES (4ull << 20) /* rows a host batch encodes (ibp_kv_encode_cuda) */

static ibp_status_t encode_some(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, const uint8_t *kv, uint64_t num_blocks,
				const int64_t *block_ids, uint64_t n, unsigned kind, int64_t *handles, uint64_t *bytes);

ibp_status_t ibp_kv_encode_cuda(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, const void *kv, uint64_t num_blocks,
				const int64_t *block_ids, uint64_t n, unsigned kind, int64_t *handles,
				uint64_t *bytes)
{
	if (!s || !pool || !handles || !bytes || (n && (!kv || !block_ids)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: NULL argument");
	for (uint64_t b = 0; b < n; b++)
		handles[b] = -1;
	if (kind > IBP_KV_EXP)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: unknown kind %u", kind);
	if (kind == IBP_KV_IBP && !s->hcodec)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: IBP blocks on a stream made without a codec");
	if (kind == IBP_KV_EXP && !s->chunk)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: exponent blocks need a bf16, f16 or f32 stream");
	const uint64_t R = s->R;
	if (num_blocks > UINT64_MAX / 2 / R || n > UINT64_MAX / 2 / R)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: %llu blocks of %llu-byte rows",
				(unsigned long long)num_blocks, (unsigned long long)R);
	for (uint64_t b = 0; b < n; b++)
		if (block_ids[b] < 0 || (uint64_t)block_ids[b] >= num_blocks)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_encode_cuda: block id %lld not in [0, %llu)",
					(long long)block_ids[b], (unsigned long long)num_blocks);
	IBP_TRY(finish(s)); /* the previous call's buffers and pins */
	if (n == 0)
		return IBP_OK;
	/* A GPU takes the call in one batch (one sync), and so do the host's EXP
	 * blocks (a stage per thread whatever n); other host blocks go in
	 * batches of about HOST_BATCH_BYTES of rows, so the workspace stays small
	 * enough to keep between calls (faulting it in again cost more than the
	 * codec). */
	const uint64_t step = s->on_device || kind == IBP_KV_EXP
				      ? n
				      : (HOST_BATCH_BYTES / (2 * R) ? HOST_BATCH_BYTES / (2 * R) : 1);
	ibp_status_t st = IBP_OK;
	for (uint64_t b0 = 0; b0 < n && st == IBP_OK; b0 += step)
		st = encode_some(s, pool, kv, num_blocks, block_ids + b0, n - b0 < step ? n - b0 : step, kind,
				 handles + b0, bytes + b0);
	if (st != IBP_OK) {
		undo_store(s, pool, handles, n); /* all or nothing: the batches before too */
		return st;
	}
	return IBP_OK;
}

/* A host batch's copy job (RAW and IBP blocks into their slots). */
typedef struct kv_host_job {
	const ibp_kv_stream_t *s;
	const uint8_t *kv;
	const int64_t *ids; /* h_ids: row 2b the K row, 2b + 1 the V row */
	uint8_t **slot;
	unsigned kind;
	int stream; /* slots written with streaming stores (slot_copy) */
} kv_host_job_t;

/* A call storing this many raw bytes or more writes its slots with
 * streaming stores: they would leave the cache before a load reads them
 * (a whole layer's blocks; 6,144 blocks of 24 KiB: 36 -> 33.5 ms of CPU).
 * Smaller calls (a few blocks a step) keep theirs cached for a load soon
 * after. */
#define KV_STREAM_BYTES (1ull << 20)

static inline void slot_copy(int stream, void *dst, const void *src, uint64_t n)
{
	if (stream)
		ibpi_copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}

#define HOST_TASK_BYTES (256u << 10) /* raw bytes a host thread takes at least */

static int host_threads_for(const ibp_kv_stream_t *s, uint64_t n)
{
	const uint64_t per = HOST_TASK_BYTES / (2 * s->R);
	return ibpi_parallel_threads(s->host_cpus, per > 1 ? (n + per - 1) / per : n);
}

/* The host's EXP store of a batch, one pass per block on every thread:
 * the block's K and V rows copied into the thread's stage, encoded into
 * one of the thread's two out buffers (all cache-resident), its slot
 * allocated and the block copied in. Threads take blocks in order and
 * allocate in block order (a turn each), so handles and evictions are
 * those of a serial store; the first failure stops every thread. */
typedef struct kv_exp_job {
	ibp_kv_stream_t *s;
	ibp_slab_pool_t *pool;
	const uint8_t *kv;
	const int64_t *ids; /* h_ids: row 2b the K row, 2b + 1 the V row */
	int64_t *handles;
	uint64_t *bytes;
	uint8_t **slot;
	uint64_t n, stage; /* blocks; a thread's stage and out buffer, bytes */
	_Atomic int failed;
	/* next and turn are written by every thread at every block: each on a
	 * cache line of its own, away from the fields read at every block */
	char pad0[64];
	_Atomic uint64_t next;
	char pad1[64];
	_Atomic uint64_t turn;
	char pad2[64];
	int stream; /* slots written with streaming stores (slot_copy) */
	int isa;    /* the encoder's build, read once a call (ibpi_exp_isa) */
	ibp_status_t st;
	uint64_t bad;
	char msg[192];
} kv_exp_job_t;

static void exp_job_fail(kv_exp_job_t *j, ibp_status_t st, uint64_t b, const char *what)
{
	int no = 0;
	if (atomic_compare_exchange_strong(&j->failed, &no, 1)) {
		j->st = st, j->bad = b;
		snprintf(j->msg, sizeof(j->msg), "%s: %s", what, ibp_last_error());
	}
}

/* A thread's next block number (j->next), or none left (*more = 0). */
static int take_block(kv_exp_job_t *j, uint64_t *b, int *more)
{
	*b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
	if (*b >= j->n)
		*more = 0;
	return *more;
}

static void store_exp_host(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	(void)begin, (void)end; /* blocks are taken one by one */
	kv_exp_job_t *j = ctx;
	ibp_kv_stream_t *s = j->s;
	const uint64_t R = s->R;
	uint8_t *in = (uint8_t *)s->d_rows.p + (uint64_t)tid * j->stage;
	uint8_t *out[2] = { in + (2 * R + 63) / 64 * 64 };
	out[1] = out[0] + (s->estride + 63) / 64 * 64;
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = 1;
	o.checksum = 0;
	o.sigma = s->exp_sigma; /* 0: measured per block */
	/* Up to two encoded blocks held (out[h], then out[h ^ 1]) until their
	 * turn to take a slot: a thread whose block is not yet its turn
	 * encodes its next one rather than wait (in lockstep the two threads
	 * waited for each other at one block in ten). */
	uint64_t hb[2] = { 0, 0 }, hsize[2] = { 0, 0 }, b = 0;
	unsigned h = 0, nh = 0;
	int more = 1, have = take_block(j, &b, &more); /* have: b taken, not encoded */
	for (;;) {
		if (atomic_load_explicit(&j->failed, memory_order_relaxed))
			return;
		if (!have && more && nh < 2)
			have = take_block(j, &b, &more);
		if (have && nh < 2) {
			const unsigned i = (h + nh) & 1;
			const uint8_t *k_row = j->kv + (uint64_t)j->ids[2 * b] * R,
				      *v_row = j->kv + (uint64_t)j->ids[2 * b + 1] * R;
			uint64_t size = 0;
			ibp_status_t st;
			if (o.sigma > 0.0 && s->chunk / 2 % 64 == 0) {
				/* straight from the rows, prefetched ahead of the
				 * encoder: a quarter less CPU a block than copying
				 * them to a stage */
				st = ibpi_exp_encode_split(k_row, s->chunk / 2, v_row, s->dt, s->chunk, &o, 1, j->isa,
							   out[i], s->estride, &size);
			} else {
				memcpy(in, k_row, R);
				memcpy(in + R, v_row, R);
				st = ibp_exp_encode(in, s->dt, s->chunk, &o, out[i], s->estride, &size);
			}
			if (st != IBP_OK) {
				exp_job_fail(j, st, b, "encoding");
				return;
			}
			hb[i] = b, hsize[i] = size, nh++, have = 0;
		}
		if (nh == 0) {
			if (!more)
				return;
			continue;
		}
		const uint64_t ob = hb[h];
		if (atomic_load_explicit(&j->turn, memory_order_acquire) != ob) {
			if (nh < 2 && more)
				continue; /* encode the next block meanwhile */
			for (unsigned spin = 0; atomic_load_explicit(&j->turn, memory_order_acquire) != ob; spin++) {
				if (atomic_load_explicit(&j->failed, memory_order_relaxed))
					return;
				if (spin > 64)
					sched_yield(); /* more threads than free cores */
			}
		}
		void *p = NULL;
		ibp_status_t st = ibp_slab_pool_alloc(j->pool, hsize[h], &j->handles[ob], &p);
		if (st != IBP_OK) {
			exp_job_fail(j, st, ob, "its slot");
			atomic_store_explicit(&j->turn, ob + 1, memory_order_release);
			return;
		}
		j->slot[ob] = p;
		j->bytes[ob] = hsize[h];
		atomic_store_explicit(&j->turn, ob + 1, memory_order_release);
		/* the next block's number before this block's streaming copy: a
		 * locked instruction right after streaming stores waits until
		 * they reach memory (a third of this function's time) */
		if (!have && more)
			have = take_block(j, &b, &more);
		slot_copy(j->stream, p, out[h], hsize[h]);
		nh--, h ^= 1;
	}
}

static ibp_status_t store_exp_batch_host(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, const uint8_t *kv, uint64_t n,
					 int64_t *handles, uint64_t *bytes)
{
	const int nt = host_threads_for(s, n);
	const uint64_t stage = (2 * s->R + 63) / 64 * 64 + 2 * ((s->estride + 63) / 64 * 64); /* rows, 2 outs */
	IBP_TRY(dev_grow(s, &s->d_rows, (uint64_t)nt * stage));
	uint8_t **slot = calloc(n, sizeof(*slot));
	kv_exp_job_t *j = calloc(1, sizeof(*j));
	if (!slot || !j) {
		free(slot), free(j);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_encode_cuda: out of memory");
	}
	*j = (kv_exp_job_t){ .s = s, .pool = pool, .kv = kv, .ids = s->h_ids.p, .handles = handles, .bytes = bytes,
			     .slot = slot, .n = n, .stage = stage, .stream = n * 2 * s->R >= KV_STREAM_BYTES,
			     .isa = ibpi_exp_isa() };
	ibp_status_t st = ibpi_parallel_for(nt, (uint64_t)nt, store_exp_host, j);
	for (uint64_t b = 0; b < n; b++) { /* slots are pinned until the call finishes (or is undone) */
		if (!slot[b])
			continue;
		ibp_status_t ps = add_pin(s, pool, slot[b]);
		if (ps != IBP_OK) {
			(void)ibp_slab_pool_unpin(pool, slot[b]); /* the undo's remove then frees it */
			st = st == IBP_OK ? ps : st;
		}
	}
	if (st == IBP_OK && atomic_load(&j->failed))
		st = ibpi_fail(j->st, "ibp_kv_encode_cuda: exponent block %llu, %s", (unsigned long long)j->bad,
			       j->msg);
	free(slot), free(j);
	return st;
}

/* The host's copy of a RAW or IBP batch into its slots (IBP blocks'
 * headers written here); RAW blocks straight from the cache's rows. */
static void copy_slots_host(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	(void)tid;
	kv_host_job_t *j = ctx;
	const ibp_kv_stream_t *s = j->s;
	const uint64_t R = s->R, *off = s->h_off.p;
	const uint8_t *pay = s->d_pay.p;
	for (uint64_t b = begin; b < end; b++) {
		uint8_t *h = j->slot[b];
		if (j->kind == IBP_KV_RAW) {
			slot_copy(j->stream, h, j->kv + (uint64_t)j->ids[2 * b] * R, R);
			slot_copy(j->stream, h + R, j->kv + (uint64_t)j->ids[2 * b + 1] * R, R);
		} else {
			put_header(h, s, b);
			slot_copy(j->stream, h + IBP_KV_BLOCK_HEADER, pay + off[2 * b], off[2 * b + 2] - off[2 * b]);
		}
	}
}

/* One batch of ibp_kv_encode_cuda: its n blocks encoded, given slots (pinned)
 * and copied in; on failure the caller undoes every batch. */
static ibp_status_t encode_some(ibp_kv_stream_t *s, ibp_slab_pool_t *pool, const uint8_t *kv, uint64_t num_blocks,
				const int64_t *block_ids, uint64_t n, unsigned kind, int64_t *handles, uint64_t *bytes)
{
	const uint64_t R = s->R, m = 2 * n;
	IBP_TRY(host_grow(s, &s->h_ids, m * 8));
	int64_t *ids = s->h_ids.p;
	for (uint64_t b = 0; b < n; b++)
		ids[2 * b] = block_ids[b], ids[2 * b + 1] = (int64_t)num_blocks + block_ids[b];
	if (!s->on_device && kind == IBP_KV_EXP)
		return store_exp_batch_host(s, pool, kv, n, handles, bytes);
	if (s->on_device || kind == IBP_KV_IBP)
		IBP_TRY(gather_rows(s, kv, num_blocks, n));
	if (kind == IBP_KV_IBP)
		IBP_TRY(encode_rows(s, m));
	else if (kind == IBP_KV_EXP)
		IBP_TRY(encode_exp(s, n));
	else if (s->on_device)
		IBP_TRY(ibp_cuda_sync(s->stream)); /* gather errors surface here, before any slot exists */
	const uint64_t *off = s->h_off.p, *eoff = s->h_eoff.p, *esz = s->h_esz.p;
	/* Every slot first: all or nothing. */
	ibp_status_t st = IBP_OK;
	uint8_t **slot = calloc(n ? n : 1, sizeof(*slot));
	if (!slot)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_encode_cuda: out of memory");
	for (uint64_t b = 0; b < n && st == IBP_OK; b++) {
		bytes[b] = kind == IBP_KV_RAW ? 2 * R
			   : kind == IBP_KV_EXP ? esz[b]
						: IBP_KV_BLOCK_HEADER + off[2 * b + 2] - off[2 * b];
		void *p = NULL;
		st = ibp_slab_pool_alloc(pool, bytes[b], &handles[b], &p);
		if (st == IBP_OK) {
			slot[b] = p;
			st = add_pin(s, pool, p);
		}
	}
	if (st == IBP_OK && !s->on_device) {
		kv_host_job_t j = { .s = s, .kv = kv, .ids = ids, .slot = slot, .kind = kind,
				    .stream = n * 2 * R >= KV_STREAM_BYTES };
		st = ibpi_parallel_for(host_threads_for(s, n), n, copy_slots_host, &j);
		free(slot);
		return st;
	}
	/* Headers on the host, payloads copied in stream order. */
	for (uint64_t b = 0; b < n && st == IBP_OK; b++) {
		if (kind == IBP_KV_RAW) {
			st = xcopy(s, slot[b], (uint8_t *)s->d_rows.p + 2 * b * R, 2 * R);
			continue;
		}
		if (kind == IBP_KV_EXP) {
			st = xcopy(s, slot[b], (uint8_t *)s->d_pay.p + eoff[b], esz[b]);
			continue;
		}
		uint8_t *h = slot[b];
		put_header(h, s, b);
		st = xcopy(s, h + IBP_KV_BLOCK_HEADER, (uint8_t *)s->d_pay.p + off[2 * b], off[2 * b + 2] - off[2 * b]);
	}
	free(slot);
	return st;
}

/* The host's decode of EXP blocks [begin, end) straight from their slots
 * (h_eoff holds their addresses, h_esz their lengths): each block's K half
 * into its K row and its V half into its V row (h_eorow), for rows of a
 * multiple of 64 elements; other rows through the stream's one-block rows
 * and a copy (then on one thread). A failure is kept per thread (finish
 * zeroes all the call's EXP rows when any failed). */
typedef struct exp_host_job {
	ibp_kv_stream_t *s;
	uint8_t *kv;
	ibp_status_t st[IBP_MAX_THREADS];
} exp_host_job_t;

static void decode_exp_host(void *ctx, uint64_t begin, uint64_t end, int tid)
{
	exp_host_job_t *j = ctx;
	ibp_kv_stream_t *s = j->s;
	const uint64_t R = s->R, half = s->chunk / 2, *addr = s->h_eoff.p, *len = s->h_esz.p;
	const int64_t *eorow = s->h_eorow.p;
	for (uint64_t k = begin; k < end; k++) {
		const uint8_t *src = (const uint8_t *)(uintptr_t)addr[k];
		uint8_t *k_row = j->kv + (uint64_t)eorow[2 * k] * R, *v_row = j->kv + (uint64_t)eorow[2 * k + 1] * R;
		ibp_status_t r = half % 64 == 0 ? ibpi_exp_decode_split(src, len[k], s->dt, s->chunk, k_row, half, v_row)
						: ibp_exp_decode(src, len[k], s->dt, s->chunk, s->d_rows.p, 1);
		if (r != IBP_OK)
			j->st[tid] = r;
		else if (half % 64) {
			memcpy(k_row, s->d_rows.p, R);
			memcpy(v_row, (const uint8_t *)s->d_rows.p + R, R);
		}
	}
}

#define EXP_HOST_BLOCKS_PER_THREAD 8u /* fewer: one thread (a thread costs a few blocks' decode) */

/* EXP: the call's e blocks decoded into their cache rows h_eorow, with one
 * status (h_estat) read by finish(), which zeroes those rows if it is not
 * OK. A GPU decodes the staged blocks (d_pay + h_eoff[k], h_esz[k] bytes)
 * into d_rows and scatters them; the host decodes from the slots
 * (decode_exp_host) on its threads. */
static ibp_status_t decode_exp(ibp_kv_stream_t *s, uint64_t e, uint8_t *kv)
{
	const uint64_t R = s->R;
	int32_t *estat = s->h_estat.p;
	const int64_t *eorow = s->h_eorow.p;
	if (!s->on_device) {
		exp_host_job_t *j = calloc(1, sizeof(*j));
		if (!j)
			return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_decode_cuda: out of memory");
		j->s = s, j->kv = kv;
		const uint64_t per = e / EXP_HOST_BLOCKS_PER_THREAD;
		const int nt = s->chunk / 2 % 64 ? 1 : ibpi_parallel_threads(s->host_cpus, per ? per : 1);
		ibp_status_t st = ibpi_parallel_for(nt, e, decode_exp_host, j);
		*estat = IBP_OK;
		for (int t = 0; t < nt; t++)
			if (j->st[t] != IBP_OK)
				*estat = j->st[t];
		free(j);
		IBP_TRY(st);
	} else {
		int64_t *ids = s->h_ids.p;
		for (uint64_t r = 0; r < 2 * e; r++)
			ids[r] = (int64_t)r;
		IBP_TRY(xcopy(s, s->d_eoff.p, s->h_eoff.p, e * 8));
		IBP_TRY(xcopy(s, s->d_esz.p, s->h_esz.p, e * 8));
		IBP_TRY(xcopy(s, s->d_eorow.p, eorow, 2 * e * 8));
		IBP_TRY(xcopy(s, s->d_ids.p, ids, 2 * e * 8));
		IBP_TRY(ibp_exp_decode_cuda(s->d_pay.p, e * s->estride, s->d_eoff.p, s->d_esz.p, s->dt, e * s->chunk,
					    s->chunk, s->d_rows.p, s->d_estat.p, s->stream));
		IBP_TRY(ibp_gather_plain_cuda(s->d_rows.p, 2 * e, R, s->d_ids.p, 2 * e, kv, s->d_eorow.p, NULL, s->stream));
		IBP_TRY(xcopy(s, estat, s->d_estat.p, 4));
	}
	s->nexp = 2 * e, s->exp_kv = kv;
	return IBP_OK;
}

/* The host's decode of one IBP row straight from its slot: the staged
 * kernel's rules (the row must use exactly its length; a failed row is
 * zero-filled and its status CORRUPT). */
static void decode_host(const ibp_kv_stream_t *s, const uint8_t *src, uint64_t len, uint8_t mode, uint8_t cl,
			uint8_t *dst, int32_t *status)
{
	uint64_t ext = 0;
	ibp_status_t st = ibpi_decode_row_ext(s->hcodec, src, len, mode, cl, dst, &ext);
	if (st != IBP_OK || ext != len) {
		memset(dst, 0, s->R);
		st = IBP_ERR_CORRUPT;
	}
	*status = (int32_t)st;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Destinations in range and distinct (the decode writes them in parallel). */
static ibp_status_t check_dst(const int64_t *dst, uint64_t n, uint64_t num_blocks)
{
	for (uint64_t k = 0; k < n; k++)
		if (dst[k] < 0 || (uint64_t)dst[k] >= num_blocks)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_decode_cuda: destination block %lld not in [0, %llu)",
					(long long)dst[k], (unsigned long long)num_blocks);
	int64_t *t = malloc((n ? n : 1) * sizeof(*t));
	if (!t)
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_decode_cuda: out of memory");
	memcpy(t, dst, n * sizeof(*t));
	qsort(t, n, sizeof(*t), cmp_i64);
	ibp_status_t st = IBP_OK;
	for (uint64_t k = 1; k < n && st == IBP_OK; k++)
		if (t[k] == t[k - 1])
			st = ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_decode_cuda: destination block %lld listed twice",
				      (long long)t[k]);
	free(t);
	return st;
}

ibp_status_t ibp_kv_decode_cuda(ibp_kv_stream_t *s, ibp_slab_pool_t *const *pools, const int64_t *handles,
				const uint8_t *kinds, uint64_t n, void *kv, uint64_t num_blocks,
				const int64_t *dst_blocks)
{
	if (!s || (n && (!pools || !handles || !kv || !dst_blocks)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_decode_cuda: NULL argument");
	const uint64_t R = s->R;
	if (num_blocks > UINT64_MAX / 2 / R)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_decode_cuda: %llu blocks of %llu-byte rows",
				(unsigned long long)num_blocks, (unsigned long long)R);
	for (uint64_t k = 0; k < n; k++) {
		unsigned kd = kinds ? kinds[k] : IBP_KV_IBP;
		if (!pools[k] || kd > IBP_KV_EXP || (kd == IBP_KV_IBP && !s->hcodec) || (kd == IBP_KV_EXP && !s->chunk))
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_decode_cuda: block %llu: %s",
					(unsigned long long)k,
					!pools[k]	    ? "NULL pool"
					: kd > IBP_KV_EXP   ? "unknown kind"
					: kd == IBP_KV_EXP ? "exponent block on a stream of another element type"
							    : "IBP block, no codec");
	}
	IBP_TRY(check_dst(dst_blocks, n, num_blocks));
	IBP_TRY(finish(s));
	if (n == 0)
		return IBP_OK;
	uint8_t **slot = calloc(n, sizeof(*slot));
	uint64_t *slen = calloc(n, sizeof(*slen));
	if (!slot || !slen) {
		free(slot);
		free(slen);
		return ibpi_fail(IBP_ERR_NOMEM, "ibp_kv_decode_cuda: out of memory");
	}
	/* Pin and check every block on the host before anything is queued. */
	ibp_status_t st = IBP_OK;
	uint64_t m = 0, e = 0; /* IBP rows, EXP blocks */
	for (uint64_t k = 0; k < n && st == IBP_OK; k++) {
		void *p = NULL;
		uint64_t len = 0, l[2];
		uint8_t fl[2], cl[2];
		st = ibp_slab_pool_pin(pools[k], handles[k], &p, &len);
		if (st != IBP_OK) {
			st = ibpi_fail(st, "ibp_kv_decode_cuda: block %llu (handle %lld) was evicted or removed",
				      (unsigned long long)k, (long long)handles[k]);
			break;
		}
		slot[k] = p, slen[k] = len;
		st = add_pin(s, pools[k], p);
		if (st != IBP_OK) {
			(void)ibp_slab_pool_unpin(pools[k], p);
			break;
		}
		if (kinds && kinds[k] == IBP_KV_RAW) {
			if (len != 2 * R)
				st = ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_decode_cuda: raw block %llu of %llu bytes, not %llu",
					      (unsigned long long)k, (unsigned long long)len, (unsigned long long)(2 * R));
			continue;
		}
		if (kinds && kinds[k] == IBP_KV_EXP) {
			ibp_exp_info_t info;
			st = ibp_exp_block_info(p, len, &info);
			if (st != IBP_OK)
				st = ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_decode_cuda: block %llu (handle %lld): not an exponent "
					      "block", (unsigned long long)k, (long long)handles[k]);
			else if (info.dtype != s->dt || info.n != s->chunk || info.block_bytes != len || len > s->estride)
				st = ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_decode_cuda: block %llu: an exponent block of %llu "
					      "elements in %llu of %llu bytes, expected %llu elements",
					      (unsigned long long)k, (unsigned long long)info.n,
					      (unsigned long long)info.block_bytes, (unsigned long long)len,
					      (unsigned long long)s->chunk);
			e++;
			continue;
		}
		st = ibp_kv_block_parse(p, len, l, fl, cl);
		if (st == IBP_OK && (l[0] > R || l[1] > R))
			st = ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_decode_cuda: block %llu: rows of %llu and %llu bytes, "
				      "longer than a raw row (%llu)", (unsigned long long)k, (unsigned long long)l[0],
				      (unsigned long long)l[1], (unsigned long long)R);
		else if (st != IBP_OK)
			st = ibpi_fail(st, "ibp_kv_decode_cuda: block %llu (handle %lld) does not parse",
				      (unsigned long long)k, (long long)handles[k]);
		m += 2;
	}
	if (st == IBP_OK && m) {
		st = s->on_device ? dev_grow(s, &s->d_stage, m * R) : IBP_OK; /* the host decodes from the slots */
		if (st == IBP_OK)
			st = host_grow(s, &s->h_lens, m * 4);
		if (st == IBP_OK)
			st = host_grow(s, &s->h_meta, m * 4);
		if (st == IBP_OK)
			st = host_grow(s, &s->h_orow, m * 8);
		if (st == IBP_OK)
			st = host_grow(s, &s->h_status, m * 4);
		if (st == IBP_OK && s->on_device) {
			kv_buf_t *d[] = { &s->d_lens, &s->d_meta, &s->d_orow, &s->d_status };
			const uint64_t sz[] = { m * 4, m * 4, m * 8, m * 4 };
			for (unsigned i = 0; i < 4 && st == IBP_OK; i++)
				st = dev_grow(s, d[i], sz[i]);
		}
	}
	if (st == IBP_OK && e) {
		/* The EXP stage and its decoded rows; the host decodes each block
		 * from its slot into one block's rows instead (no stage to fill
		 * and read back: the copies cost as much as the decode). */
		st = s->on_device ? dev_grow(s, &s->d_pay, e * s->estride) : IBP_OK;
		if (st == IBP_OK)
			st = dev_grow(s, &s->d_rows, (s->on_device ? e : 1) * 2 * R);
		kv_buf_t *h[] = { &s->h_eoff, &s->h_esz, &s->h_eorow, &s->h_ids, &s->h_estat };
		const uint64_t sz[] = { e * 8, e * 8, 2 * e * 8, 2 * e * 8, 4 };
		for (unsigned i = 0; i < 5 && st == IBP_OK; i++)
			st = host_grow(s, h[i], sz[i]);
		if (s->on_device) {
			kv_buf_t *d[] = { &s->d_eoff, &s->d_esz, &s->d_eorow, &s->d_ids, &s->d_estat };
			for (unsigned i = 0; i < 5 && st == IBP_OK; i++)
				st = dev_grow(s, d[i], sz[i]);
		}
	}
	if (st != IBP_OK) {
		unpin_all(s);
		free(slot);
		free(slen);
		return st;
	}
	/* Queue: payload rows into the stage (row r at r * R), raw rows in place. */
	uint32_t *lens = s->h_lens.p, *meta = s->h_meta.p;
	int64_t *orow = s->h_orow.p;
	uint64_t *eoff = s->h_eoff.p, *esz = s->h_esz.p;
	int64_t *eorow = s->h_eorow.p;
	uint8_t *out = kv;
	uint64_t r = 0, x = 0;
	for (uint64_t k = 0; k < n && st == IBP_OK; k++) {
		const uint64_t d = (uint64_t)dst_blocks[k];
		const uint8_t *h = slot[k];
		if (kinds && kinds[k] == IBP_KV_RAW) {
			st = xcopy(s, out + d * R, h, R);
			if (st == IBP_OK)
				st = xcopy(s, out + (num_blocks + d) * R, h + R, R);
			continue;
		}
		if (kinds && kinds[k] == IBP_KV_EXP) {
			eoff[x] = x * s->estride, esz[x] = slen[k];
			eorow[2 * x] = (int64_t)d, eorow[2 * x + 1] = (int64_t)(num_blocks + d);
			if (s->on_device)
				st = xcopy(s, (uint8_t *)s->d_pay.p + eoff[x], h, slen[k]);
			else /* the host decodes from the slot (decode_exp): its address in place of the offset */
				eoff[x] = (uint64_t)(uintptr_t)h;
			x++;
			continue;
		}
		uint64_t l[2];
		uint8_t fl[2], cl[2];
		(void)ibp_kv_block_parse(h, slen[k], l, fl, cl); /* checked above */
		const uint8_t *pay = h + IBP_KV_BLOCK_HEADER;
		for (int j = 0; j < 2 && st == IBP_OK; j++, r++) {
			lens[r] = (uint32_t)l[j];
			meta[r] = fl[j] | (uint32_t)cl[j] << 8;
			orow[r] = (int64_t)(j ? num_blocks + d : d);
			if (s->on_device)
				st = xcopy(s, (uint8_t *)s->d_stage.p + r * R, pay, l[j]);
			else
				decode_host(s, pay, l[j], fl[j], cl[j], out + (uint64_t)orow[r] * R, &((int32_t *)s->h_status.p)[r]);
			pay += l[j];
		}
	}
	free(slot);
	free(slen);
	if (st == IBP_OK && m && s->on_device) {
		st = xcopy(s, s->d_lens.p, lens, m * 4);
		if (st == IBP_OK)
			st = xcopy(s, s->d_meta.p, meta, m * 4);
		if (st == IBP_OK)
			st = xcopy(s, s->d_orow.p, orow, m * 8);
		if (st == IBP_OK)
			st = ibpi_gather_staged_cuda(s->store, s->d_stage.p, R, m, s->d_lens.p, s->d_meta.p, NULL, m, kv,
						    s->d_orow.p, s->d_status.p, s->stream);
		if (st == IBP_OK)
			st = xcopy(s, s->h_status.p, s->d_status.p, m * 4);
	}
	if (st == IBP_OK)
		s->nstatus = m;
	if (st == IBP_OK && e)
		st = decode_exp(s, e, kv);
	if (st != IBP_OK) {
		/* Queued work may still run: finish it before the slots are unpinned. */
		(void)finish(s);
		s->nstatus = 0;
	}
	return st;
}
