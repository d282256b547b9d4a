/* test_kv_block.c - the KV offload block format (ibp_kv_pack_blocks,
 * ibp_kv_block_parse): a real encoded batch packed into a stage, each block
 * parsed back to the exact rows, and corrupt or short blocks rejected. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ibp/cache.h"

/* A made-up batch of 3 blocks (6 rows) of odd payload lengths. */
static const uint64_t OFF[7] = {0, 5, 5, 17, 40, 41, 60};
static const uint8_t FLAGS[6] = {1, 0, 2, 1, 0, 3};
static const uint8_t CL[6] = {7, 8, 9, 10, 11, 12};

static void payload(uint8_t *p)
{
	for (int i = 0; i < 60; i++)
		p[i] = (uint8_t)(i * 37 + 11);
}

Test(kv_block, pack_then_parse_round_trip)
{
	uint8_t pay[60], stage[200];
	uint64_t bo[4];
	payload(pay);
	memset(stage, 0xEE, sizeof stage);
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, CL, 3, stage, sizeof stage, bo), IBP_OK);
	cr_assert_eq(bo[0], 0);
	cr_assert_eq(bo[3], 3 * IBP_KV_BLOCK_HEADER + 60);
	for (int b = 0; b < 3; b++) {
		uint64_t len[2];
		uint8_t fl[2], cl[2];
		cr_assert_eq(ibp_kv_block_parse(stage + bo[b], bo[b + 1] - bo[b], len, fl, cl), IBP_OK);
		cr_assert_eq(len[0], OFF[2 * b + 1] - OFF[2 * b]);
		cr_assert_eq(len[1], OFF[2 * b + 2] - OFF[2 * b + 1]);
		cr_assert(fl[0] == FLAGS[2 * b] && fl[1] == FLAGS[2 * b + 1]);
		cr_assert(cl[0] == CL[2 * b] && cl[1] == CL[2 * b + 1]);
		cr_assert_eq(memcmp(stage + bo[b] + IBP_KV_BLOCK_HEADER, pay + OFF[2 * b], OFF[2 * b + 2] - OFF[2 * b]),
			     0);
	}
	/* Little-endian header: block 1's len0 = 12 in byte 0. */
	cr_assert(stage[bo[1]] == 12 && stage[bo[1] + 1] == 0);
	cr_assert_eq(stage[bo[3]], 0xEE); /* nothing past the end */
	/* No clusters: zero bytes. */
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, NULL, 3, stage, sizeof stage, bo), IBP_OK);
	cr_assert(stage[10] == 0 && stage[11] == 0);
}

Test(kv_block, errors)
{
	uint8_t pay[60], stage[200];
	uint64_t bo[4], bad[7];
	payload(pay);
	memset(stage, 0xEE, sizeof stage);
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, CL, 3, stage, 3 * IBP_KV_BLOCK_HEADER + 59, bo),
		     IBP_ERR_BUFFER_TOO_SMALL);
	cr_assert_eq(stage[0], 0xEE); /* nothing written */
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, CL, 3, stage, 3 * IBP_KV_BLOCK_HEADER + 60, bo), IBP_OK);
	memcpy(bad, OFF, sizeof bad);
	bad[3] = 4;
	cr_assert_eq(ibp_kv_pack_blocks(pay, bad, FLAGS, CL, 3, stage, sizeof stage, bo), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_kv_pack_blocks(NULL, OFF, FLAGS, CL, 3, stage, sizeof stage, bo), IBP_ERR_INVALID_ARG);

	uint64_t len[2];
	uint8_t fl[2], cl[2];
	cr_assert_eq(ibp_kv_block_parse(stage, IBP_KV_BLOCK_HEADER - 1, len, fl, cl), IBP_ERR_CORRUPT);
	uint64_t n = IBP_KV_BLOCK_HEADER + 5; /* block 0: 5 + 0 bytes */
	cr_assert_eq(ibp_kv_block_parse(stage, n, len, fl, cl), IBP_OK);
	cr_assert_eq(ibp_kv_block_parse(stage, n + 1, len, fl, cl), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_kv_block_parse(stage, n - 1, len, fl, cl), IBP_ERR_CORRUPT);
	stage[3] = 0xFF; /* len0 near 4 GiB: no wrap-around */
	cr_assert_eq(ibp_kv_block_parse(stage, n, len, fl, cl), IBP_ERR_CORRUPT);
	stage[3] = 0;
	stage[7] = 0xFF;
	cr_assert_eq(ibp_kv_block_parse(stage, n, len, fl, cl), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_kv_block_parse(NULL, 0, len, fl, cl), IBP_ERR_CORRUPT);
	cr_assert_eq(ibp_kv_block_parse(stage, n, NULL, fl, cl), IBP_ERR_INVALID_ARG);
}

Test(kv_block, index_inverts_pack)
{
	uint8_t pay[60], stage[200], fl[6], cl[6];
	uint64_t bo[4], start[6], len[6];
	payload(pay);
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, CL, 3, stage, sizeof stage, bo), IBP_OK);
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3], bo, 3, start, len, fl, cl), IBP_OK);
	for (int r = 0; r < 6; r++) {
		cr_assert_eq(len[r], OFF[r + 1] - OFF[r], "row %d", r);
		cr_assert_eq(memcmp(stage + start[r], pay + OFF[r], len[r]), 0, "row %d", r);
		cr_assert(fl[r] == FLAGS[r] && cl[r] == CL[r], "row %d", r);
	}
	cr_assert_eq(ibp_kv_index_blocks(NULL, 0, bo, 0, NULL, NULL, NULL, NULL), IBP_OK); /* no blocks */
}

Test(kv_block, index_rejects_before_writing)
{
	uint8_t pay[60], stage[200], fl[6], cl[6];
	uint64_t bo[4], start[6], len[6], bad[4];
	payload(pay);
	cr_assert_eq(ibp_kv_pack_blocks(pay, OFF, FLAGS, CL, 3, stage, sizeof stage, bo), IBP_OK);
	memset(start, 0xAB, sizeof start);
	memset(len, 0xAB, sizeof len);
	memset(fl, 0xAB, sizeof fl);
	/* The last block's length byte corrupted: blocks 0 and 1 are valid, yet nothing is written. */
	stage[bo[2]] ^= 1;
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3], bo, 3, start, len, fl, cl), IBP_ERR_CORRUPT);
	cr_assert(start[0] == 0xABABABABABABABABull && len[0] == 0xABABABABABABABABull && fl[0] == 0xAB);
	stage[bo[2]] ^= 1;
	/* A block past the stage, and decreasing offsets. */
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3] - 1, bo, 3, start, len, fl, cl), IBP_ERR_INVALID_ARG);
	memcpy(bad, bo, sizeof bad);
	bad[2] = bad[1] - 1; /* block 1 ends before it starts */
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3], bad, 3, start, len, fl, cl), IBP_ERR_INVALID_ARG);
	cr_assert_eq(start[0], 0xABABABABABABABABull);
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3], bo, 3, NULL, len, fl, cl), IBP_ERR_INVALID_ARG);
	/* Block 1 shifted into block 0's bytes: its header no longer adds up. */
	bad[1] = bo[1] - 1, bad[2] = bo[2], bad[3] = bo[3];
	cr_assert_eq(ibp_kv_index_blocks(stage, bo[3], bad, 3, start, len, fl, cl), IBP_ERR_CORRUPT);
	cr_assert_eq(start[0], 0xABABABABABABABABull);
}
