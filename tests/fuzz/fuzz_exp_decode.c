/* fuzz_exp_decode.c - libFuzzer target: ibp_exp_decode on arbitrary bytes
 * never reads or writes outside its buffers and never hangs; a block it
 * accepts is canonical: re-encoding the decoded values with the header's
 * table gives the same bytes (header byte 7, the table source, aside),
 * unless the block is coded although raw would have been smaller. A rANS
 * block it accepts decodes to values that round-trip through the rANS
 * mode, and when the encoder picks the same frequencies for them, its
 * block is the same bytes (the stream of given symbols and frequencies is
 * unique). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"

static const ibp_dtype_t DT[3] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* exact-size heap copy so ASan sees any over-read */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	ibp_exp_info_t info;
	ibp_dtype_t dt = DT[size ? data[size - 1] % 3 : 0];
	uint64_t n = size ? data[0] : 0;
	if (ibp_exp_block_info(buf, size, &info) == IBP_OK) {
		dt = info.dtype;
		n = info.n; /* bounded: a valid header's block fits in size bytes */
	}
	size_t es = dt == IBP_DTYPE_F32 ? 4 : 2;
	uint8_t *out = malloc(n * es + 1);
	if (!out) {
		free(buf);
		return 0;
	}
	/* the structure's checks (trusted: past any checksum), then the checked
	 * decode, which may only add a checksum verdict */
	ibp_status_t st = ibp_exp_decode_ext(buf, size, dt, n, out, 1 + (int)(size & 1), IBP_EXP_TRUSTED);
	if (st != IBP_OK && st != IBP_ERR_CORRUPT)
		abort();
	ibp_status_t sc = ibp_exp_decode(buf, size, dt, n, out, 1);
	if ((sc != IBP_OK && sc != IBP_ERR_CORRUPT && sc != IBP_ERR_CHECKSUM) || (sc == IBP_OK && st != IBP_OK))
		abort();
	if (st == IBP_OK) /* the checked decode overwrote out: decode it again */
		st = ibp_exp_decode_ext(buf, size, dt, n, out, 1, IBP_EXP_TRUSTED);
	if (st == IBP_OK && !info.raw && info.table_mode == IBP_EXP_TABLE_RANS) {
		uint64_t cap = 0, got = 0;
		if (ibp_exp_encode_bound(dt, n, &cap) != IBP_OK)
			abort();
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.table_mode = IBP_EXP_TABLE_RANS;
		o.nthreads = 1;
		o.checksum = 0;
		uint8_t *again = malloc(cap), *back = malloc(n * es + 1);
		if (!again || !back)
			abort();
		if (ibp_exp_encode(out, dt, n, &o, again, cap, &got) != IBP_OK ||
		    ibp_exp_decode(again, got, dt, n, back, 1) != IBP_OK || memcmp(back, out, n * es) != 0)
			abort();
		/* same frequencies (map and table): the same block */
		uint64_t fend = 96;
		for (int i = 0; i < 32; i++)
			fend += 2 * (uint64_t)__builtin_popcount(buf[64 + i]);
		if (again[6] == 2 && got >= fend && memcmp(again + 64, buf + 64, fend - 64) == 0) {
			again[4] = buf[4];
			memcpy(again + 48, buf + 48, 16);
			if (got != info.block_bytes || memcmp(again, buf, got) != 0)
				abort();
		}
		free(back);
		free(again);
	} else if (st == IBP_OK && !info.raw) {
		uint64_t raw = 0, cap = 0, got = 0;
		if (ibp_exp_raw_size(dt, n, &raw) != IBP_OK || ibp_exp_encode_bound(dt, n, &cap) != IBP_OK)
			abort();
		if (info.block_bytes < raw) {
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.table_mode = IBP_EXP_TABLE_GIVEN;
			o.table = info.table;
			o.nthreads = 1;
			o.checksum = 0; /* version, flags and sum are compared from the input below */
			uint8_t *again = malloc(cap);
			if (!again)
				abort();
			if (ibp_exp_encode(out, dt, n, &o, again, cap, &got) != IBP_OK || got != info.block_bytes)
				abort();
			again[7] = buf[7];
			again[4] = buf[4];
			memcpy(again + 48, buf + 48, 16);
			if (memcmp(again, buf, got) != 0)
				abort();
			free(again);
		}
	}
	free(out);
	free(buf);
	return 0;
}
