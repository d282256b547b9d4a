/* fuzz_npy.c - libFuzzer target: ibp_npy_parse_header on arbitrary bytes
 * never reads outside them; an accepted header re-formats and re-parses
 * (with the same flags) to the same dtype, shape and data size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Copy to an exact-size heap block so ASan catches any over-read. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	for (unsigned flags = 0; flags <= IBP_NPY_BF16; flags += IBP_NPY_BF16) {
		ibp_npy_info_t info;
		if (ibp_npy_parse_header(buf, size, flags, &info) != IBP_OK)
			continue;
		if (info.data_offset > size)
			abort();
		static uint8_t hdr[IBP_NPY_HEADER_MAX];
		uint64_t len;
		if (info.data_bytes > INT64_MAX / 2)
			continue; /* parseable, but too large for the writer */
		if (ibp_npy_format_header(info.dtype, info.ndim, info.shape, hdr, sizeof(hdr), &len) != IBP_OK)
			abort();
		ibp_npy_info_t again;
		/* the same flags: bf16 comes back as bf16 (written `<u2`), u16 as u16 */
		if (ibp_npy_parse_header(hdr, len, flags, &again) != IBP_OK)
			abort();
		if (again.dtype != info.dtype || again.data_bytes != info.data_bytes)
			abort();
		if (again.ndim != info.ndim || again.count != info.count ||
		    memcmp(again.shape, info.shape, info.ndim * sizeof(uint64_t)) != 0)
			abort();
	}
	free(buf);
	return 0;
}
