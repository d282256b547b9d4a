/* quickstart.c - train, bound, encode, decode, free (the README's example). */
#include <ibp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	/* 1000 rows of 32 float32 values in 0, 1/8, ..., 15/8: many invariant
	 * bits. Any rows of the same length will do. */
	const uint64_t nrows = 1000, row_bytes = 32 * sizeof(float);
	float *rows = malloc(nrows * row_bytes);
	if (!rows)
		return 1;
	for (uint64_t i = 0; i < nrows * 32; i++)
		rows[i] = (float)(((uint32_t)i * 2654435761u) >> 28) / 8.0f;

	/* 1. Train a codec on the rows (default options: one cluster). */
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	ibp_codec_t *codec = NULL;
	ibp_status_t s = ibp_codec_train(rows, nrows, row_bytes, &o, &codec);
	if (s != IBP_OK) {
		fprintf(stderr, "train: %s: %s\n", ibp_status_string(s), ibp_last_error());
		free(rows);
		return 1;
	}

	/* 2. Bound: the encoded rows never need more than this. */
	uint64_t cap = ibp_batch_bound(codec, nrows);
	uint8_t *enc = malloc(cap), *flags = malloc(nrows);
	uint64_t *offsets = malloc((nrows + 1) * sizeof(uint64_t));
	float *back = malloc(nrows * row_bytes);
	s = enc && flags && offsets && back ? IBP_OK : IBP_ERR_NOMEM;

	/* 3. Encode: row i becomes enc[offsets[i], offsets[i+1]), its mode
	 * goes to flags[i] (cluster ids: NULL, there is one cluster). */
	if (s == IBP_OK)
		s = ibp_encode_batch(codec, rows, nrows, enc, cap, offsets, flags, NULL, 0);

	/* 4. Decode all rows (ibp_decode_row decodes one) and compare. */
	if (s == IBP_OK)
		s = ibp_decode_batch(codec, enc, offsets[nrows], offsets, flags, NULL, nrows, back, 0);
	int same = s == IBP_OK && memcmp(back, rows, nrows * row_bytes) == 0;
	if (s != IBP_OK)
		fprintf(stderr, "%s: %s\n", ibp_status_string(s), ibp_last_error());
	else
		printf("%llu bytes -> %llu bytes of rows + %llu flag bytes, round trip %s\n",
		       (unsigned long long)(nrows * row_bytes), (unsigned long long)offsets[nrows],
		       (unsigned long long)nrows, same ? "exact" : "FAILED");

	/* 5. Free the codec and the buffers. */
	ibp_codec_free(codec);
	free(rows), free(enc), free(flags), free(offsets), free(back);
	return same ? 0 : 1;
}
