/* fuzz_container.c - libFuzzer target: any bytes opened as a `.ibp`
 * container from memory. When open succeeds, the payload is verified and
 * rows are gathered (whatever verify said: gather must be safe on
 * unverified payloads too). Nothing may crash, hang or read out of bounds;
 * when verify says OK, the gather and decode_all must succeed, and when
 * both succeed the gathered rows must equal decode_all's.
 *
 * Random mutations almost never keep the XXH3 checksums valid, so each
 * input is opened twice: as given (exercises the checksum paths), and as a
 * copy whose checksums were recomputed (FORMAT.md 2.2-2.7), which lets the
 * fuzzer reach the structural checks and the row decoder behind them.
 *
 * Seeds: tests/fuzz/corpus/fuzz_container/, small valid containers of each
 * codec made with the CLI from a few rows of random data (NumPy), e.g.
 *   ibp pack u8.npy ibp_packed.ibp --chunk 1 --clusters 2
 *   ibp pack u8.npy ibp_inplace.ibp --layout inplace --chunk 2
 *   ibp pack bin.npy ibp_xval.ibp --chunk 2 --clusters 2   (sparse 0/1 f32: Xvals)
 *   ibp pack bf16.npy exp_bf16.ibp --codec exp --dtype bf16 --block-rows 6
 *   ibp pack f32.npy exp_f32_hist.ibp --codec exp --exp-table hist --block-rows 10
 *   ibp pack f16.npy exp_f16.ibp --codec exp
 *   ibp pack f32.npy fp8_e4m3.ibp --codec fp8 --lossy --fp8-block 16 --block-rows 7
 *   ibp pack bf16.npy fp8_e5m2.ibp --codec fp8 --lossy --dtype bf16 --fp8-format e5m2
 *            --fp8-block 32 --no-hadamard --no-adaptive
 *   ibp pack f32.npy exp_rows_f32.ibp --codec exp-rows   (and f16, bf16: codec 4)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ibp.h"

#define MAX_OUT (64u << 20) /* decoded bytes gathered per input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static int in_file(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* Recomputes what checksums it can find, trusting nothing. */
static void repair(uint8_t *g, uint64_t size)
{
	if (size < 256)
		return;
	uint64_t hs = ld32(g + 12), toff = ld64(g + 128), n = ld32(g + 124), block = ld64(g + 144);
	if (hs < 256 || hs > size || hs % 8)
		return;
	if (n <= 64 && in_file(toff, 32 * n, size)) {
		int sums = -1, pay = -1;
		for (uint64_t i = 0; i < n; i++) {
			uint32_t id = ld32(g + toff + 32 * i);
			if (id == 6)
				sums = (int)i;
			if (id == 5)
				pay = (int)i;
		}
		/* per-block payload checksums first: they are inside a section */
		if (sums >= 0 && pay >= 0 && block >= 4096 && block <= (1u << 30) && !(block & (block - 1))) {
			uint8_t *se = g + toff + 32 * (uint64_t)sums, *pe = g + toff + 32 * (uint64_t)pay;
			uint64_t so = ld64(se + 8), sl = ld64(se + 16), po = ld64(pe + 8), pl = ld64(pe + 16);
			if (in_file(so, sl, size) && in_file(po, pl, size))
				for (uint64_t b = 0; b * block < pl && 8 * b + 8 <= sl; b++) {
					uint64_t len = pl - b * block < block ? pl - b * block : block;
					st64(g + so + 8 * b, XXH3_64bits(g + po + b * block, len));
				}
		}
		for (uint64_t i = 0; i < n; i++) {
			uint8_t *e = g + toff + 32 * i;
			uint64_t off = ld64(e + 8), len = ld64(e + 16);
			if (in_file(off, len, size))
				st64(e + 24, XXH3_64bits(g + off, len));
		}
		st64(g + 136, XXH3_64bits(g + toff, 32 * n));
	}
	st64(g + hs - 8, XXH3_64bits(g, hs - 8));
}

static void exercise(const uint8_t *data, size_t size)
{
	ibp_container_t *c = NULL;
	/* TRUSTED: skip the payload checksums (checked by default since 1.2)
	 * so that mutated payloads reach the decoders */
	if (ibp_container_open_memory(data, size, IBP_OPEN_TRUSTED, &c) != IBP_OK)
		return;
	ibp_status_t vst = ibp_container_verify(c, 1);
	ibp_store_t *s = NULL;
	if (ibp_store_from_container(c, &s) != IBP_OK) {
		ibp_container_close(c);
		return;
	}
	uint64_t n = ibp_store_nrows(s), R = ibp_store_row_bytes(s);
	uint64_t take = R > MAX_OUT ? 0 : MAX_OUT / R;
	if (take > n)
		take = n;
	uint8_t *out = malloc(take * R + 1), *all = take == n ? malloc(n * R + 1) : NULL;
	int64_t *ids = malloc(take * sizeof(int64_t) + 8);
	if (out && ids && take > 0) {
		/* last row first, then the rest in order: not just a linear scan */
		for (uint64_t i = 0; i < take; i++)
			ids[i] = (int64_t)(i == 0 ? n - 1 : i - 1);
		ibp_status_t gst = ibp_store_gather(s, ids, take, out, 1);
		/* a verified payload gathers, and the same rows as decode_all */
		if (vst == IBP_OK && gst != IBP_OK)
			abort();
		if (all) {
			ibp_status_t ast = ibp_store_decode_all(s, all, 1);
			if (vst == IBP_OK && ast != IBP_OK)
				abort();
			if (gst == IBP_OK && ast == IBP_OK)
				for (uint64_t i = 0; i < take; i++)
					if (memcmp(out + i * R, all + (uint64_t)ids[i] * R, R) != 0)
						abort();
		}
	}
	/* an out-of-range id is refused, never decoded */
	int64_t bad = (int64_t)n;
	if (out && ibp_store_gather(s, &bad, 1, out, 1) != IBP_ERR_OUT_OF_RANGE)
		abort();
	free(ids);
	free(all);
	free(out);
	ibp_store_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	exercise(data, size);
	uint8_t *g = malloc(size ? size : 1);
	if (!g)
		return 0;
	memcpy(g, data, size);
	repair(g, size);
	exercise(g, size);
	free(g);
	return 0;
}
