/* examples/exp.c - the lossless exponent codec for BF16, FP16 and FP32:
 * one block, a batch of blocks, and the exponent tables.
 *
 *   cc exp.c $(pkg-config --cflags --libs ibp) -lm -o exp && ./exp
 */
#include <ibp.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond)                                                                   \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                      \
		}                                                                      \
	} while (0)
#define CHECK(call)                                                                          \
	do {                                                                                 \
		ibp_status_t s_ = (call);                                                    \
		if (s_ != IBP_OK) {                                                          \
			fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,    \
				ibp_status_string(s_), ibp_last_error());                    \
			return 1;                                                            \
		}                                                                            \
	} while (0)

/* float32 -> bfloat16 bits, rounding to nearest even (finite inputs). */
static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* Activations-like bf16 values: roughly normal, sigma 0.5. */
static void make_values(uint16_t *v, uint64_t n)
{
	uint64_t x = 42;
	for (uint64_t i = 0; i < n; i++) {
		double sum = 0;
		for (int k = 0; k < 4; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			sum += (double)(x >> 11) / 9007199254740992.0 - 0.5;
		}
		v[i] = to_bf16((float)(sum * 0.5 * sqrt(3.0)));
	}
}

int main(void)
{
	const ibp_dtype_t dt = IBP_DTYPE_BF16;
	const uint64_t n = 100000;
	uint16_t *src = malloc(n * 2), *back = malloc(n * 2);
	EXPECT(src && back);
	make_values(src, n);

	/* One block: bound, encode, decode, compare. */
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o); /* table from the block's RMS (sigma) */
	uint64_t cap = 0, size = 0;
	CHECK(ibp_exp_encode_bound(dt, n, &cap));
	uint8_t *block = malloc(cap);
	EXPECT(block != NULL);
	CHECK(ibp_exp_encode(src, dt, n, &o, block, cap, &size));
	CHECK(ibp_exp_decode(block, size, dt, n, back, 0));
	EXPECT(memcmp(back, src, n * 2) == 0);

	ibp_exp_info_t info;
	CHECK(ibp_exp_block_info(block, size, &info));
	printf("block: %llu bf16 values in %llu B (ratio %.3f), %s, %llu escapes, codes for exponent fields %u..%u\n",
	       (unsigned long long)info.n, (unsigned long long)info.block_bytes, (double)(n * 2) / (double)size,
	       info.raw ? "raw" : "coded", (unsigned long long)info.escapes, info.table.field[0],
	       info.table.field[6]);
	uint64_t expect = 0;
	CHECK(ibp_exp_coded_size(dt, n, info.escapes, &expect));
	EXPECT(info.raw || expect == size);

	/* Sizes: fixed static part, one byte per escape, all 128-aligned. */
	uint64_t stat = 0, raw = 0;
	CHECK(ibp_exp_static_size(dt, n, &stat));
	CHECK(ibp_exp_raw_size(dt, n, &raw));
	printf("static part %llu B, raw block %llu B\n", (unsigned long long)stat, (unsigned long long)raw);

	/* Tables: from sigma, from the exact histogram, or given. */
	double ms = 0;
	ibp_exp_table_t t_sigma, t_ms, t_hist;
	CHECK(ibp_exp_mean_square(src, dt, n, &ms));
	CHECK(ibp_exp_table_from_mean_square(dt, ms, &t_ms));
	CHECK(ibp_exp_table_from_sigma(dt, sqrt(ms), &t_sigma));
	uint64_t hist[256];
	CHECK(ibp_exp_histogram(src, dt, n, hist));
	CHECK(ibp_exp_table_from_histogram(dt, hist, &t_hist));
	printf("sigma %.3f: window table %u..%u; histogram table %u..%u\n", sqrt(ms), t_ms.field[0],
	       t_ms.field[6], t_hist.field[0], t_hist.field[6]);
	o.table_mode = IBP_EXP_TABLE_GIVEN;
	o.table = t_hist;
	CHECK(ibp_exp_encode(src, dt, n, &o, block, cap, &size));
	memset(back, 0, n * 2);
	CHECK(ibp_exp_decode(block, size, dt, n, back, 1));
	EXPECT(memcmp(back, src, n * 2) == 0);
	printf("with the histogram table: %llu B\n", (unsigned long long)size);

	/* A batch: blocks of 8192 values, back to back, with offsets. */
	const uint64_t chunk = 8192, nchunks = (n + chunk - 1) / chunk;
	uint64_t bcap = 0;
	CHECK(ibp_exp_batch_bound(dt, n, chunk, &bcap));
	uint8_t *blocks = malloc(bcap);
	uint64_t *offsets = malloc((nchunks + 1) * sizeof(uint64_t));
	EXPECT(blocks && offsets);
	ibp_exp_opts_default(&o);
	CHECK(ibp_exp_encode_batch(src, dt, n, chunk, &o, blocks, bcap, offsets));
	memset(back, 0, n * 2);
	CHECK(ibp_exp_decode_batch(blocks, offsets[nchunks], offsets, dt, n, chunk, back, 0));
	EXPECT(memcmp(back, src, n * 2) == 0);
	printf("batch: %llu blocks, %llu B (ratio %.3f)\n", (unsigned long long)nchunks,
	       (unsigned long long)offsets[nchunks], (double)(n * 2) / (double)offsets[nchunks]);

	/* Corrupt blocks are rejected, never decoded into wrong data silently. */
	blocks[0] ^= 0xFF;
	EXPECT(ibp_exp_decode_batch(blocks, offsets[nchunks], offsets, dt, n, chunk, back, 0) == IBP_ERR_CORRUPT);

	free(src), free(back), free(block), free(blocks), free(offsets);
	printf("exp example: OK\n");
	return 0;
}
