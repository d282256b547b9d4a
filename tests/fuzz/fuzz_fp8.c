/* fuzz_fp8.c - libFuzzer target: ibp_fp8_decode on arbitrary bytes never
 * reads or writes outside its buffers, never hangs, and answers IBP_OK or
 * IBP_ERR_CORRUPT only; a stream it accepts decodes to the same values
 * with 1 and 3 threads, and to bf16 as the f32 values rounded to nearest
 * even (ibp/fp8.h), NaN aside. A stream whose header parses must decode
 * with the header's n only.
 *
 * Seeds: tests/fuzz/corpus/fuzz_fp8/, streams from ibp_fp8_encode of a few
 * hundred values with each format, block size 16..256, Hadamard and the
 * adaptive step on and off. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"

static uint16_t bf16_rne(uint32_t u)
{
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees over-reads */
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	ibp_fp8_info_t info;
	uint64_t n = size ? data[size - 1] : 0;
	int parsed = ibp_fp8_stream_info(buf, size, &info) == IBP_OK;
	if (parsed)
		n = info.n; /* bounded: the stream fits in size bytes */
	float *a = malloc(4 * n + 4), *b = malloc(4 * n + 4);
	uint16_t *h = malloc(2 * n + 2);
	if (!a || !b || !h)
		goto out;
	/* the structure's checks (trusted: past any checksum); the checked
	 * decode may only add a checksum verdict */
	const unsigned T = IBP_FP8_TRUSTED;
	ibp_status_t sc = ibp_fp8_decode(buf, size, IBP_DTYPE_F32, n, a, 1);
	ibp_status_t s1 = ibp_fp8_decode_ext(buf, size, IBP_DTYPE_F32, n, a, 1, T);
	if (s1 != IBP_OK && s1 != IBP_ERR_CORRUPT)
		abort();
	if ((sc != IBP_OK && sc != IBP_ERR_CORRUPT && sc != IBP_ERR_CHECKSUM) || (sc == IBP_OK && s1 != IBP_OK))
		abort();
	if (s1 == IBP_OK && !parsed)
		abort(); /* decoded what the header check refuses */
	ibp_status_t s3 = ibp_fp8_decode_ext(buf, size, IBP_DTYPE_F32, n, b, 3, T);
	ibp_status_t sh = ibp_fp8_decode_ext(buf, size, IBP_DTYPE_BF16, n, h, 1, T);
	if (s3 != s1 || sh != s1)
		abort();
	if (s1 == IBP_OK) {
		if (memcmp(a, b, 4 * n) != 0)
			abort();
		for (uint64_t i = 0; i < n; i++) {
			uint32_t u;
			memcpy(&u, &a[i], 4);
			if ((u & 0x7fffffffu) > 0x7f800000u)
				continue; /* NaN: any NaN will do */
			if (h[i] != bf16_rne(u))
				abort();
		}
		/* another n than the header's is refused */
		if (ibp_fp8_decode_ext(buf, size, IBP_DTYPE_F32, n + 1, b, 1, T) != IBP_ERR_CORRUPT)
			abort();
	}
out:
	free(a);
	free(b);
	free(h);
	free(buf);
	return 0;
}
