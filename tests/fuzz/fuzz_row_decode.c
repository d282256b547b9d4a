/* fuzz_row_decode.c - libFuzzer target for the row decoder.
 *
 * Input: 12 header bytes that build a codec, then an encoded row.
 *   byte 0: bits 0-1 chunk size 1 << v; bits 2-3 clusters - 1;
 *           bits 4-5 mask style (random / dense / empty / full);
 *           bit 6: Xvals (random bits inside the mask on about half the
 *           chunks, the Bitval elsewhere); bit 7: their values come from
 *           the row bytes (so that hits occur) instead of the generator
 *   bytes 1-2: R = 1 + (le16 % 700)
 *   bytes 3-10: seed of the Mask/Bitval generator
 *   byte 11: flags byte to try besides modes 0..3
 * The row bytes are decoded with every mode and every cluster by every CPU
 * implementation this machine has (portable, BMI2, AVX-512), from an
 * exact-size heap copy (ASan sees any overread); the implementations must
 * agree on the status and the bytes.
 * A row that decodes is re-encoded and decoded again: it must round-trip.
 * Nothing may crash, hang or return anything but IBP_OK / IBP_ERR_CORRUPT.
 * Seeds: tests/fuzz/corpus/fuzz_row_decode/, every chunk size, cluster
 * count and mask style with and without Xvals, followed by R, R/2, R+3 or 3
 * random row bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "ibp/unstable.h"

static uint64_t fz_splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static ibp_codec_t *fz_codec(const uint8_t *h, const uint8_t *row, size_t rlen)
{
	unsigned C = 1u << (h[0] & 3), K = 1 + ((h[0] >> 2) & 3), style = (h[0] >> 4) & 3;
	uint64_t R = 1 + ((uint64_t)(h[1] | (h[2] << 8)) % 700);
	uint64_t seed;
	memcpy(&seed, h + 3, 8);
	uint64_t D = (R + C - 1) / C, n = K * D * C;
	uint8_t *m = malloc(n), *b = malloc(n), *x = malloc(n);
	if (!m || !b || !x) {
		free(m);
		free(b);
		free(x);
		return NULL;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = fz_splitmix(&seed);
		uint8_t mm = style == 0 ? (uint8_t)r : style == 1 ? (uint8_t)(r | (r >> 8)) : style == 2 ? 0 : 0xFF;
		m[i] = mm;
		b[i] = (uint8_t)(r >> 16) & mm;
	}
	/* Xvals chunk by chunk: enabled on about half of them */
	for (uint64_t i = 0; i < n; i += C) {
		uint64_t r = fz_splitmix(&seed);
		for (unsigned q = 0; q < C; q++) {
			uint8_t v = (h[0] & 0x80) && rlen ? row[(i + q) % rlen] : (uint8_t)(r >> (8 * q));
			x[i + q] = (r >> 63) ? (uint8_t)(v & m[i + q]) : b[i + q];
		}
	}
	uint64_t last = R - (D - 1) * C;
	for (unsigned k = 0; k < K; k++)
		for (uint64_t i = last; i < C; i++) {
			m[k * D * C + (D - 1) * C + i] = 0xFF;
			b[k * D * C + (D - 1) * C + i] = 0;
			x[k * D * C + (D - 1) * C + i] = 0;
		}
	ibp_codec_t *c = NULL;
	if (ibp_codec_create_ex(R, C, K, m, b, (h[0] & 0x40) ? x : NULL, &c) != IBP_OK)
		abort(); /* the metadata above is valid by construction */
	free(m);
	free(b);
	free(x);
	return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 12)
		return 0;
	ibp_codec_t *c = fz_codec(data, data + 12, size - 12);
	if (!c)
		return 0;
	const uint64_t R = ibp_codec_row_bytes(c);
	const size_t len = size - 12;
	uint8_t *src = malloc(len ? len : 1);
	uint8_t *row = malloc(R), *row2 = malloc(R), *enc = malloc(R);
	if (!src || !row || !row2 || !enc)
		goto out;
	memcpy(src, data + 12, len);
	uint8_t flagset[5] = { 0, 1, 2, 3, data[11] };
	/* every implementation this CPU has, each compared with the portable
	 * one: same status, same bytes */
	static const ibp_impl_t impls[4] = { IBP_IMPL_PORTABLE, IBP_IMPL_BMI2, IBP_IMPL_AVX512, IBP_IMPL_AVX2 };
	for (unsigned k = 0; k < ibp_codec_nclusters(c) + 1; k++)
		for (int f = 0; f < 5; f++) {
			ibp_status_t ref = IBP_OK;
			for (int im = 0; im < 4; im++) {
				if (ibp_codec_set_impl(c, impls[im]) != IBP_OK) {
					if (im == 0)
						abort(); /* the portable path exists everywhere */
					continue;
				}
				uint8_t *dst = im == 0 ? row : row2;
				memset(dst, 0xA5 ^ im, R);
				ibp_status_t st = ibp_decode_row(c, len ? src : NULL, len, flagset[f], k, dst);
				if (st != IBP_OK && st != IBP_ERR_CORRUPT)
					abort();
				if (im == 0)
					ref = st;
				else if (st != ref || (st == IBP_OK && memcmp(row, row2, R) != 0))
					abort(); /* implementations disagree */
			}
			ibp_codec_set_impl(c, IBP_IMPL_PORTABLE);
			if (ref != IBP_OK)
				continue;
			if (k >= ibp_codec_nclusters(c) || (flagset[f] & ~3u))
				abort(); /* must have been rejected */
			uint64_t elen;
			uint8_t efl;
			if (ibp_encode_row(c, row, k, enc, R, &elen, &efl) != IBP_OK)
				abort();
			if (ibp_decode_row(c, enc, elen, efl, k, row2) != IBP_OK || memcmp(row, row2, R) != 0)
				abort();
		}
out:
	free(src);
	free(row);
	free(row2);
	free(enc);
	ibp_codec_free(c);
	return 0;
}
