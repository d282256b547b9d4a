/* container_verify.c - the payload checked whole or per read: checksums,
 * every row decoded, every value block decoded. */
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


/* ---- verify ------------------------------------------------------------- */

typedef struct verify_ctx {
	const ibp_container_t *c;
	int inner;     /* threads inside one block (exp/fp8 with a single block) */
	ibp_status_t st[IBP_MAX_THREADS];
	uint64_t bad[IBP_MAX_THREADS]; /* first failing row or block of each tid */
	char msg[IBP_MAX_THREADS][160];
} verify_ctx_t;

static void verify_sums(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	for (uint64_t i = begin; i < end; i++) {
		uint64_t off = i * c->block, len = c->payload_len - off < c->block ? c->payload_len - off : c->block;
		if (XXH3_64bits(c->payload + off, (size_t)len) != ld64(c->sums + 8 * i)) {
			v->st[tid] = IBP_ERR_CHECKSUM;
			v->bad[tid] = i;
			return;
		}
	}
}

static void verify_rows(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	uint8_t *row = ibp_host_alloc(c->row_bytes, 0);
	if (!row) {
		v->st[tid] = IBP_ERR_NOMEM;
		v->bad[tid] = begin;
		snprintf(v->msg[tid], sizeof(v->msg[tid]), "no memory for a row buffer");
		return;
	}
	for (uint64_t i = begin; i < end; i++) {
		const uint8_t *src;
		uint64_t len;
		uint8_t mode;
		unsigned cl;
		ibpi_ctr_row_at(c, i, &src, &len, &mode, &cl);
		uint64_t want = 0;
		ibp_status_t st = ibpi_decode_row_ext(c->codec, src, len, mode, cl, row, &want);
		if (st == IBP_OK && c->layout == IBP_LAYOUT_PACKED) {
			/* packed rows must fill their extent exactly */
			if (want != len) {
				st = IBP_ERR_CORRUPT;
				snprintf(v->msg[tid], sizeof(v->msg[tid]),
					 "encoded row is %llu bytes, its extent %llu", (ull)want, (ull)len);
			}
		} else if (st != IBP_OK) {
			snprintf(v->msg[tid], sizeof(v->msg[tid]), "%s", ibp_last_error());
		}
		if (st != IBP_OK) {
			v->st[tid] = st;
			v->bad[tid] = i;
			break;
		}
	}
	ibp_host_free(row);
}

/* exp rows: every row decodes and fills its extent (the decoder checks) */
static void verify_exp_rows(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	uint8_t *row = ibp_host_alloc(c->row_bytes, 0);
	if (!row) {
		v->st[tid] = IBP_ERR_NOMEM;
		v->bad[tid] = begin;
		snprintf(v->msg[tid], sizeof(v->msg[tid]), "no memory for a row buffer");
		return;
	}
	const int isa = ibpi_exprows_isa();
	for (uint64_t i = begin; i < end; i++) {
		ibp_status_t st = ibpi_exprows_decode_slot(&c->xr, isa, c->payload + i * c->xr.slot, c->xovf,
							   c->xovf_len, row);
		if (st != IBP_OK) {
			snprintf(v->msg[tid], sizeof(v->msg[tid]), "%s", ibp_last_error());
			v->st[tid] = st;
			v->bad[tid] = i;
			break;
		}
	}
	ibp_host_free(row);
}

static void verify_value_blocks(void *p, uint64_t begin, uint64_t end, int tid)
{
	verify_ctx_t *v = p;
	const ibp_container_t *c = v->c;
	/* one block of scratch per thread; decoded values are thrown away */
	uint64_t most = c->elems < c->chunk_elems ? c->elems : c->chunk_elems;
	uint8_t *buf = ibp_host_alloc(most * ibp_dtype_size(c->dtype), 0);
	if (!buf) {
		v->st[tid] = IBP_ERR_NOMEM;
		v->bad[tid] = begin;
		snprintf(v->msg[tid], sizeof(v->msg[tid]), "no memory for a block buffer");
		return;
	}
	for (uint64_t i = begin; i < end; i++) {
		ibp_status_t st = ibpi_ctr_decode_block(c, i, buf, v->inner);
		if (st != IBP_OK) {
			v->st[tid] = st;
			v->bad[tid] = i;
			snprintf(v->msg[tid], sizeof(v->msg[tid]), "%s", ibp_last_error());
			break;
		}
	}
	ibp_host_free(buf);
}

/* The payload checksums: every PAYLOAD_SUMS block (in parallel), and the
 * whole payload's section checksum when `whole` or when there are no
 * block sums. */
ibp_status_t ibpi_ctr_check_payload(const ibp_container_t *c, int nthreads, int whole)
{
	ibp_status_t st = IBP_OK;
	if (c->nsums > 0) {
		verify_ctx_t *v = calloc(1, sizeof(*v));
		if (!v)
			return ibpi_fail(IBP_ERR_NOMEM, "%s: payload checksums: out of memory", c->name);
		v->c = c;
		st = ibpi_parallel_for(nthreads, c->nsums, verify_sums, v);
		int worst = -1;
		for (int t = 0; st == IBP_OK && t < IBP_MAX_THREADS; t++)
			if (v->st[t] != IBP_OK && (worst < 0 || v->bad[t] < v->bad[worst]))
				worst = t;
		if (worst >= 0) {
			uint64_t blk = v->bad[worst];
			uint64_t end = (blk + 1) * c->block < c->payload_len ? (blk + 1) * c->block : c->payload_len;
			st = ibpi_fail(IBP_ERR_CHECKSUM, "%s: payload block %llu (bytes %llu..%llu)", c->name,
				      (ull)blk, (ull)(blk * c->block), (ull)end);
		}
		free(v);
	}
	if (st == IBP_OK && (whole || c->nsums == 0)) {
		uint64_t h = XXH3_64bits(c->payload, (size_t)c->payload_len);
		if (h != c->payload_sum)
			st = ibpi_fail(IBP_ERR_CHECKSUM, "%s: payload checksum %016llx, table says %016llx",
				      c->name, (ull)h, (ull)c->payload_sum);
	}
	return st;
}

ibp_status_t ibp_container_verify(const ibp_container_t *c, int nthreads)
{
	if (!c || nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_verify: NULL container or nthreads < 0");
	ibp_status_t st = ibpi_ctr_check_payload(c, nthreads, 1);
	if (st != IBP_OK)
		return st;
	verify_ctx_t *v = calloc(1, sizeof(*v));
	if (!v)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: verify: out of memory", c->name);
	v->c = c;
	const char *unit = "row";
	if (st == IBP_OK && c->codec_id == IBP_CODEC_IBP) {
		st = ibpi_parallel_for(nthreads, c->nrows, verify_rows, v);
	} else if (st == IBP_OK && c->codec_id == IBP_CODEC_EXP_ROWS) {
		st = ibpi_parallel_for(nthreads, c->nrows, verify_exp_rows, v);
	} else if (st == IBP_OK) {
		unit = c->codec_id == IBP_CODEC_EXP ? "exp block" : "fp8 stream";
		/* few big blocks: let each decode use the threads */
		v->inner = c->nblk == 1 ? nthreads : 1;
		st = ibpi_parallel_for(c->nblk == 1 ? 1 : nthreads, c->nblk, verify_value_blocks, v);
	}
	/* report the lowest failing row, whichever thread found it */
	int worst = -1;
	for (int t = 0; st == IBP_OK && t < IBP_MAX_THREADS; t++)
		if (v->st[t] != IBP_OK && (worst < 0 || v->bad[t] < v->bad[worst]))
			worst = t;
	if (worst >= 0)
		st = ibpi_fail(v->st[worst], "%s: verify: %s %llu: %s", c->name, unit, (ull)v->bad[worst],
			      v->msg[worst]);
	free(v);
	return st;
}

