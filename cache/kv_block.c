/* kv_block.c - the KV offload block format (ibp.torch.KVOffloader, IBP
 * codec): a 12-byte header (u32 len0, u32 len1 little-endian, u8 flag0,
 * u8 flag1, u8 cluster0, u8 cluster1) then the K and V rows' payloads.
 * Packing an encoded batch into one stage is the store side of the device
 * path (the stage is what is copied slot by slot into the pool); parsing
 * validates an untrusted block before it is decoded. */
#include <string.h>
#include "ibp/cache.h"
#include "util/error.h"

static void put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

ibp_status_t ibp_kv_pack_blocks(const uint8_t *payload, const uint64_t *offsets, const uint8_t *flags,
				const uint8_t *clusters, uint64_t nblocks, uint8_t *stage, uint64_t stage_bytes,
				uint64_t *block_offsets)
{
	if (!offsets || !flags || !block_offsets || (nblocks && (!payload || !stage)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_pack_blocks: NULL argument");
	if (nblocks > UINT64_MAX / 2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_pack_blocks: %llu blocks", (unsigned long long)nblocks);
	/* Check every length first: nothing is written on error. */
	uint64_t need = 0;
	for (uint64_t b = 0; b < nblocks; b++) {
		const uint64_t *o = offsets + 2 * b;
		if (o[1] < o[0] || o[2] < o[1] || o[1] - o[0] > UINT32_MAX || o[2] - o[1] > UINT32_MAX)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_pack_blocks: block %llu: bad row offsets",
					(unsigned long long)b);
		need += IBP_KV_BLOCK_HEADER + (o[2] - o[0]);
	}
	if (need > stage_bytes)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "ibp_kv_pack_blocks: stage of %llu bytes, need %llu",
				(unsigned long long)stage_bytes, (unsigned long long)need);
	uint64_t pos = 0;
	for (uint64_t b = 0; b < nblocks; b++) {
		const uint64_t *o = offsets + 2 * b;
		uint8_t *h = stage + pos;
		block_offsets[b] = pos;
		put_u32(h, (uint32_t)(o[1] - o[0]));
		put_u32(h + 4, (uint32_t)(o[2] - o[1]));
		h[8] = flags[2 * b], h[9] = flags[2 * b + 1];
		h[10] = clusters ? clusters[2 * b] : 0;
		h[11] = clusters ? clusters[2 * b + 1] : 0;
		memcpy(h + IBP_KV_BLOCK_HEADER, payload + o[0], o[2] - o[0]);
		pos += IBP_KV_BLOCK_HEADER + (o[2] - o[0]);
	}
	block_offsets[nblocks] = pos;
	return IBP_OK;
}

ibp_status_t ibp_kv_block_parse(const uint8_t *block, uint64_t bytes, uint64_t len[2], uint8_t flags[2],
				uint8_t clusters[2])
{
	if ((!block && bytes) || !len || !flags || !clusters)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_block_parse: NULL argument");
	if (bytes < IBP_KV_BLOCK_HEADER)
		return ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_block_parse: %llu bytes, below the header",
				(unsigned long long)bytes);
	uint64_t l0 = get_u32(block), l1 = get_u32(block + 4);
	if (IBP_KV_BLOCK_HEADER + l0 + l1 != bytes)
		return ibpi_fail(IBP_ERR_CORRUPT, "ibp_kv_block_parse: header lengths %llu + %llu, block of %llu bytes",
				(unsigned long long)l0, (unsigned long long)l1, (unsigned long long)bytes);
	len[0] = l0, len[1] = l1;
	flags[0] = block[8], flags[1] = block[9];
	clusters[0] = block[10], clusters[1] = block[11];
	return IBP_OK;
}

ibp_status_t ibp_kv_index_blocks(const uint8_t *stage, uint64_t stage_bytes, const uint64_t *block_offsets,
				 uint64_t nblocks, uint64_t *row_start, uint64_t *row_len, uint8_t *flags,
				 uint8_t *clusters)
{
	if (!block_offsets || (nblocks && (!stage || !row_start || !row_len || !flags || !clusters)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_index_blocks: NULL argument");
	if (nblocks > UINT64_MAX / 2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_kv_index_blocks: %llu blocks", (unsigned long long)nblocks);
	/* Validate every block before writing anything. */
	for (uint64_t b = 0; b < nblocks; b++) {
		uint64_t s = block_offsets[b], e = block_offsets[b + 1], len[2];
		uint8_t fl[2], cl[2];
		if (e < s || e > stage_bytes)
			return ibpi_fail(IBP_ERR_INVALID_ARG,
					"ibp_kv_index_blocks: block %llu: offsets %llu..%llu, stage of %llu bytes",
					(unsigned long long)b, (unsigned long long)s, (unsigned long long)e,
					(unsigned long long)stage_bytes);
		ibp_status_t st = ibp_kv_block_parse(stage + s, e - s, len, fl, cl);
		if (st != IBP_OK)
			return ibpi_fail(st, "ibp_kv_index_blocks: block %llu does not parse", (unsigned long long)b);
	}
	for (uint64_t b = 0; b < nblocks; b++) {
		uint64_t s = block_offsets[b], len[2];
		uint8_t fl[2], cl[2];
		(void)ibp_kv_block_parse(stage + s, block_offsets[b + 1] - s, len, fl, cl);
		row_start[2 * b] = s + IBP_KV_BLOCK_HEADER;
		row_start[2 * b + 1] = s + IBP_KV_BLOCK_HEADER + len[0];
		row_len[2 * b] = len[0], row_len[2 * b + 1] = len[1];
		flags[2 * b] = fl[0], flags[2 * b + 1] = fl[1];
		clusters[2 * b] = cl[0], clusters[2 * b + 1] = cl[1];
	}
	return IBP_OK;
}
