/* examples/codec.c - the IBP row codec on the CPU, the whole cycle: train,
 * bound, encode, decode, free; one row on its own; a codec rebuilt from its
 * stored tables; and ibp_analyze, the report behind `ibp analyze`.
 *
 *   cc codec.c $(pkg-config --cflags --libs ibp) -o codec && ./codec
 */
#include <ibp.h>
#include <ibp/unstable.h> /* ibp_codec_set_impl, ibp_paper_layout_size: knobs outside the stable API */
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
/* A libibp call that must succeed; on failure prints the status and detail. */
#define CHECK(call)                                                                          \
	do {                                                                                 \
		ibp_status_t s_ = (call);                                                    \
		if (s_ != IBP_OK) {                                                          \
			fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,    \
				ibp_status_string(s_), ibp_last_error());                    \
			return 1;                                                            \
		}                                                                            \
	} while (0)

/* Rows of float32 features with many invariant bits: values in [0.5, 1)
 * with 8 significant mantissa bits, and now and then an outlier. */
static void make_rows(float *rows, uint64_t nrows, uint64_t dim)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (uint64_t i = 0; i < nrows * dim; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rows[i] = 0.5f + (float)(x % 128) / 256.0f;
		if (x % 97 == 0)
			rows[i] = -3.0f; /* an exception: sign and exponent differ */
	}
}

int main(void)
{
	const uint64_t nrows = 2000, dim = 64, R = dim * sizeof(float);
	float *rows = malloc(nrows * R);
	EXPECT(rows != NULL);
	make_rows(rows, nrows, dim);

	/* 1. Train: learn the Mask/Bitval (and Xvals) of the rows. */
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	ibp_codec_t *codec = NULL;
	CHECK(ibp_codec_train(rows, nrows, R, &o, &codec));
	unsigned k = ibp_codec_nclusters(codec);
	printf("trained: %llu-byte rows, chunk %u B (%llu chunks), T=%.2f, %u cluster(s), xval %d\n",
	       (unsigned long long)ibp_codec_row_bytes(codec), ibp_codec_chunk_bytes(codec),
	       (unsigned long long)ibp_codec_nchunks(codec), ibp_codec_threshold(codec), k,
	       ibp_codec_has_xval(codec));

	/* 2. Bound: the encoded rows never exceed nrows * R bytes (the raw fallback). */
	uint64_t cap = ibp_batch_bound(codec, nrows);
	uint8_t *enc = malloc(cap), *flags = malloc(nrows), *clusters = malloc(nrows);
	uint64_t *offsets = malloc((nrows + 1) * sizeof(uint64_t));
	float *back = malloc(nrows * R);
	EXPECT(enc && flags && clusters && offsets && back);

	/* 3. Encode all rows (packed: row i is enc[offsets[i], offsets[i+1])). */
	CHECK(ibp_encode_batch(codec, rows, nrows, enc, cap, offsets, flags, k > 1 ? clusters : NULL, 0));
	uint64_t meta = (ibp_codec_has_xval(codec) ? 3 : 2) * ibp_codec_nchunks(codec) *
			ibp_codec_chunk_bytes(codec) * k;
	printf("encoded %llu B into %llu B of rows + %llu B of flags + %llu B of tables: ratio %.2f\n",
	       (unsigned long long)(nrows * R), (unsigned long long)offsets[nrows], (unsigned long long)nrows,
	       (unsigned long long)meta, (double)(nrows * R) / (double)(offsets[nrows] + nrows + meta));

	/* 4. Decode them all and check the round trip bit for bit. */
	CHECK(ibp_decode_batch(codec, enc, offsets[nrows], offsets, flags, k > 1 ? clusters : NULL, nrows, back,
			       0));
	EXPECT(memcmp(back, rows, nrows * R) == 0);

	/* One row on its own: size, encode, decode. */
	const float *row = rows + 5 * dim;
	unsigned cl = ibp_choose_cluster(codec, row);
	uint64_t len = 0, exact = 0;
	uint8_t mode = 0, rflags = 0;
	CHECK(ibp_row_size(codec, row, cl, &exact, &mode));
	uint8_t *one = malloc(ibp_row_bound(codec));
	float *one_back = malloc(R);
	EXPECT(one && one_back);
	CHECK(ibp_encode_row(codec, row, cl, one, ibp_row_bound(codec), &len, &rflags));
	EXPECT(len == exact && (rflags & IBP_ROW_MODE_MASK) == mode);
	CHECK(ibp_decode_row(codec, one, len, rflags, cl, one_back));
	EXPECT(memcmp(one_back, row, R) == 0);
	printf("row 5: %llu B (mode %u), static part %llu bits\n", (unsigned long long)len, mode,
	       (unsigned long long)ibp_codec_static_bits(codec, cl));

	/* Untrusted bytes are validated: reserved flag bits are corrupt input. */
	EXPECT(ibp_decode_row(codec, one, len, 0x80, cl, one_back) == IBP_ERR_CORRUPT);

	/* A codec rebuilt from its stored tables (what a container reader does)
	 * decodes the same rows. One cluster here, so the tables are contiguous. */
	if (k == 1) {
		ibp_codec_t *again = NULL;
		CHECK(ibp_codec_create_ex(R, ibp_codec_chunk_bytes(codec), 1, ibp_codec_mask(codec, 0),
					  ibp_codec_bitval(codec, 0),
					  ibp_codec_has_xval(codec) ? ibp_codec_xval(codec, 0) : NULL, &again));
		memset(back, 0, nrows * R);
		CHECK(ibp_decode_batch(again, enc, offsets[nrows], offsets, flags, NULL, nrows, back, 1));
		EXPECT(memcmp(back, rows, nrows * R) == 0);
		ibp_codec_free(again);
	}

	/* The portable C path writes exactly the bytes of the fastest path. */
	ibp_impl_t fastest = ibp_codec_impl(codec);
	CHECK(ibp_codec_set_impl(codec, IBP_IMPL_PORTABLE));
	uint64_t *off2 = malloc((nrows + 1) * sizeof(uint64_t));
	uint8_t *enc2 = malloc(cap);
	EXPECT(off2 && enc2);
	CHECK(ibp_encode_batch(codec, rows, nrows, enc2, cap, off2, flags, k > 1 ? clusters : NULL, 1));
	EXPECT(off2[nrows] == offsets[nrows] && memcmp(enc2, enc, offsets[nrows]) == 0);
	printf("implementation %d and the portable one agree\n", (int)fastest);
	printf("the IBP paper's layout would take %llu B\n",
	       (unsigned long long)ibp_paper_layout_size(codec, rows, nrows));

	/* 5. Free. */
	ibp_codec_free(codec);

	/* Analysis: how invariant each bit is, and the predicted size per
	 * chunk size and threshold. */
	ibp_analysis_t *a = NULL;
	CHECK(ibp_analyze(rows, nrows, R, NULL, &a));
	const ibp_analysis_cell_t *best = &a->cells[a->best];
	printf("analysis: %.1f%% of the bits invariant at T=%.2f; best C=%u T=%.2f, predicted %.0f B\n",
	       100 * a->invariant_fraction, a->threshold, best->chunk_bytes, best->threshold,
	       best->predicted_bytes);
	double lane[32];
	CHECK(ibp_analysis_lane_fraction(a, 4, lane));
	printf("  sign bit invariant in %.0f%% of the elements, lowest mantissa bit in %.0f%%\n",
	       100 * lane[31], 100 * lane[0]);
	EXPECT(a->ncells == 4 * a->nthresholds && lane[0] > 0.9);
	ibp_analysis_free(a);

	free(rows), free(enc), free(enc2), free(flags), free(clusters), free(offsets), free(off2);
	free(back), free(one), free(one_back);
	printf("codec example: OK\n");
	return 0;
}
