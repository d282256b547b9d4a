/* examples/fp8.c - FP8 (E4M3 / E5M2) conversion and the LOSSY FP8 block
 * codec (per-block Hadamard rotation and scale, about 1.02 bytes a value).
 *
 *   cc fp8.c $(pkg-config --cflags --libs ibp) -lm -o fp8 && ./fp8
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

static double rel_l2(const float *a, const float *b, uint64_t n)
{
	double e = 0, r = 0;
	for (uint64_t i = 0; i < n; i++) {
		e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)a[i] * a[i];
	}
	return sqrt(e / r);
}

int main(void)
{
	/* Every finite FP8 value converts to float32 and back to itself. */
	const ibp_fp8_format_t fmts[2] = {IBP_FP8_E4M3, IBP_FP8_E5M2};
	for (int f = 0; f < 2; f++) {
		int finite = 0;
		for (unsigned c = 0; c < 256; c++) {
			float v = ibp_fp8_to_f32((uint8_t)c, fmts[f]);
			if (!isfinite(v))
				continue;
			EXPECT(ibp_fp8_from_f32(v, fmts[f]) == c);
			finite++;
		}
		/* the largest finite codes: 0x7E (E4M3), 0x7B (E5M2) */
		printf("%s: %d finite codes round-trip, max %g\n", f ? "E5M2" : "E4M3", finite,
		       ibp_fp8_to_f32(f ? 0x7B : 0x7E, fmts[f]));
	}
	EXPECT(ibp_fp8_from_f32(1e9f, IBP_FP8_E4M3) == 0x7E); /* saturates to 448 */

	/* Values, roughly normal. */
	const uint64_t n = 1u << 16;
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
	uint8_t *codes = malloc(n);
	EXPECT(x && y && y2 && codes);
	uint64_t s = 7;
	for (uint64_t i = 0; i < n; i++) {
		double sum = 0;
		for (int k = 0; k < 4; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			sum += (double)(s >> 11) / 9007199254740992.0 - 0.5;
		}
		x[i] = (float)(sum * 2.0);
	}

	/* Plain elementwise conversion: 3 mantissa bits, ~3% error. */
	CHECK(ibp_fp8_convert(x, n, IBP_FP8_E4M3, codes));
	CHECK(ibp_fp8_expand(codes, n, IBP_FP8_E4M3, y));
	double e_plain = rel_l2(x, y, n);
	printf("plain E4M3 conversion: relative L2 error %.2f%%\n", 100 * e_plain);

	/* The block codec: encode, inspect, decode. */
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o); /* E4M3, blocks of 256, Hadamard + adaptive scale */
	uint64_t cap = 0, size = 0;
	CHECK(ibp_fp8_encoded_size(&o, n, &cap));
	uint8_t *stream = malloc(cap);
	EXPECT(stream != NULL);
	CHECK(ibp_fp8_encode(x, IBP_DTYPE_F32, n, &o, stream, cap, &size));
	EXPECT(size == cap);
	ibp_fp8_info_t info;
	CHECK(ibp_fp8_stream_info(stream, size, &info));
	EXPECT(info.n == n && info.block == 256 && info.src_dtype == IBP_DTYPE_F32);
	CHECK(ibp_fp8_decode(stream, size, IBP_DTYPE_F32, n, y, 0));
	CHECK(ibp_fp8_decode(stream, size, IBP_DTYPE_F32, n, y2, 1));
	double e_codec = rel_l2(x, y, n);
	printf("block codec: %llu values in %llu B (ratio %.3f), relative L2 error %.2f%%\n", (unsigned long long)n,
	       (unsigned long long)size, (double)(n * sizeof(float)) / (double)size, 100 * e_codec);
	/* Lossy, but deterministic and bounded (docs/CODECS.md has the bounds). */
	EXPECT(memcmp(y, y2, n * sizeof(float)) == 0);
	EXPECT(e_codec < 0.05);

	/* A damaged header is an error, not garbage. */
	stream[0] ^= 0xFF;
	EXPECT(ibp_fp8_decode(stream, size, IBP_DTYPE_F32, n, y, 1) == IBP_ERR_CORRUPT);

	free(x), free(y), free(y2), free(codes), free(stream);
	printf("fp8 example: OK\n");
	return 0;
}
