/* fuzz_exp_rows.c - libFuzzer target for the exponent codec's row form
 * (container codec 4: src/exp/exp_rows.h, docs/FORMAT.md 2.6.1).
 *
 * Input: 10 parameter bytes, then one encoded row.
 *   byte 0: bits 0-1 dtype (0 float32, 1 float16, 2 bfloat16, 3 float32);
 *           bit 2: d = 64 * (1 + byte 1 % 4), the lengths the AVX2 and
 *           AVX-512 decoders take (other lengths go to the portable one),
 *           else d = 1 + le16(bytes 1-2) % 300;
 *           bit 3: a row longer than its code planes say (fixed part +
 *           code-7 count) is cut to that length, so that most inputs
 *           reach the decoders' element loops
 *   bytes 3-9: the table, each entry made a field of the dtype (float16:
 *           & 31); duplicates are left as they come
 * The row is decoded from an exact-size heap copy (ASan sees any over-read)
 * into an exact-size output by every decoder build this CPU runs (portable;
 * AVX2; AVX-512 VBMI2): status, detail and bytes must agree, and the status
 * is IBP_OK or IBP_ERR_CORRUPT. A row that decodes is re-encoded. With
 * distinct table entries and no escape byte equal to one of them its
 * encoding is unique, so re-encoding gives back the input bytes; otherwise
 * (a code that names a duplicate, an escape that a code would cover) the
 * re-encoded row must decode to the same values on every build.
 * Rows of 64, 128, 192 and 256 elements also go through the bag's summing kernel
 * (ibpi_exprows_sum64), each build this CPU runs (AVX2, AVX-512): when it
 * takes the row, the decoders took it too and its float32 sums are 0 + each
 * decoded value; when it does not, the accumulator is untouched and the
 * decoders refused the row or (AVX2) it has over 16 escapes in a half.
 * Seeds: tests/fuzz/corpus/fuzz_exp_rows/, valid rows of each dtype from
 * ibpi_exprows_encode (d = 4, 9, 64, 100, 128, 256; Gaussian values with
 * escapes, specials, every element escaped, a table with duplicates, an
 * escape equal to a table entry), with and without bit 3.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "exp/exp_rows.h"
#include "fp8/fp8_impl.h"
#include "util/cpu.h"

#define NPARAM 10u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ibp_dtype_t DT[4] = { IBP_DTYPE_F32, IBP_DTYPE_F16, IBP_DTYPE_BF16, IBP_DTYPE_F32 };

/* The decoder builds this CPU runs (as tests/exp/test_exp_rows.c). */
static int isas(int out[3])
{
	int n = 0;
	out[n++] = 0;
	if (ibpi_cpu()->avx2)
		out[n++] = 1;
	if (ibpi_cpu()->avx512vbmi && ibpi_cpu()->avx512vbmi2)
		out[n++] = 2;
	return n;
}

/* Decodes src (len bytes) with every build into dst (R bytes); aborts
 * unless they agree. Returns the status. `tmp` is R bytes of scratch. */
static ibp_status_t decode_all_builds(const ibpi_exprows_t *x, const uint8_t *src, uint64_t len, uint8_t *dst,
				      uint8_t *tmp, uint64_t R)
{
	int is[3], ni = isas(is);
	char why[256] = "";
	ibp_status_t ref = IBP_OK;
	for (int k = 0; k < ni; k++) {
		uint8_t *o = k == 0 ? dst : tmp;
		memset(o, 0xa5 ^ k, (size_t)R);
		const ibp_status_t st = ibpi_exprows_decode(x, is[k], src, len, o);
		if (st != IBP_OK && st != IBP_ERR_CORRUPT)
			abort();
		if (k == 0) {
			ref = st;
			if (st != IBP_OK) {
				strncpy(why, ibp_last_error(), sizeof(why) - 1);
				why[sizeof(why) - 1] = 0;
			}
			continue;
		}
		if (st != ref)
			abort(); /* builds disagree on the status */
		if (st == IBP_OK && memcmp(dst, tmp, (size_t)R) != 0)
			abort(); /* ... or on the values */
		if (st != IBP_OK && strncmp(why, ibp_last_error(), sizeof(why) - 1) != 0)
			abort(); /* ... or on the detail */
	}
	return ref;
}

/* The summing kernel on one row (exact-size copy at src) against the
 * decoders' status st and values dec. */
static void check_sum64(const ibpi_exprows_t *x, int isa, const uint8_t *src, uint64_t len, ibp_status_t st,
			const uint8_t *dec)
{
	const uint64_t d = x->d, P = x->P;
	float acc[256];
	for (uint64_t i = 0; i < d; i++)
		acc[i] = 1.5f; /* a sentinel: kept when the row is refused */
	const uint8_t *srcs[1] = { src };
	const uint64_t lens[1] = { len };
	const uint64_t took = ibpi_exprows_sum64(x, isa, srcs, lens, 1, acc, 1);
	if (took > 1)
		abort();
	if (took == 0) {
		for (uint64_t i = 0; i < d; i++)
			if (acc[i] != 1.5f)
				abort(); /* written though refused */
		if (st == IBP_OK) {
			/* only the AVX2 kernel refuses a good row: one of over 16
			 * escapes in a half word */
			if (isa != 1)
				abort();
			unsigned most = 0;
			for (uint64_t h = 0; h < d / 32; h++) {
				unsigned e = 0;
				for (uint64_t i = 32 * h; i < 32 * h + 32; i++)
					e += (unsigned)(src[i / 8] & src[P + i / 8] & src[2 * P + i / 8]) >> (i % 8) & 1u;
				most = e > most ? e : most;
			}
			if (most <= 16)
				abort();
		}
		return;
	}
	if (st != IBP_OK)
		abort(); /* took a row the decoders refuse */
	for (uint64_t i = 0; i < d; i++) {
		float v;
		if (x->dt == IBP_DTYPE_F32) {
			memcpy(&v, dec + 4 * i, 4);
		} else {
			uint16_t h;
			memcpy(&h, dec + 2 * i, 2);
			v = x->dt == IBP_DTYPE_F16 ? fp8i_f16_to_f32(h) : fp8i_bf16_to_f32(h);
		}
		const float want = 0.0f + v;
		if (memcmp(&want, &acc[i], 4) != 0 && !(want != want && acc[i] != acc[i]))
			abort(); /* a different sum (NaNs: any NaN, as the adds' payloads may differ) */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < NPARAM)
		return 0;
	const ibp_dtype_t dt = DT[data[0] & 3];
	const uint64_t d = (data[0] & 4) ? 64u * (1u + data[1] % 4u)
					  : 1u + (uint64_t)(data[1] | data[2] << 8) % 300u;
	const uint64_t es = dt == IBP_DTYPE_F32 ? 4 : 2, R = d * es;
	uint8_t table[7];
	for (int k = 0; k < 7; k++)
		table[k] = dt == IBP_DTYPE_F16 ? (uint8_t)(data[3 + k] & 31) : data[3 + k];
	ibpi_exprows_t x;
	if (ibpi_exprows_init(&x, dt, R, table, 1) != IBP_OK)
		abort(); /* valid by construction */
	const uint64_t P = (d + 7) / 8;
	if (x.d != d || x.P != P ||
	    x.fixed != (dt == IBP_DTYPE_F32 ? 3 * P + 3 * d : dt == IBP_DTYPE_F16 ? 6 * P + d : 3 * P + d))
		abort(); /* the sizes of FORMAT.md 2.6.1 */

	const uint8_t *row = data + NPARAM;
	uint64_t len = size - NPARAM;
	if ((data[0] & 8) && len >= x.fixed) {
		uint64_t ne = 0;
		for (uint64_t B = 0; B < x.P; B++)
			ne += (uint64_t)__builtin_popcount((unsigned)(row[B] & row[x.P + B] & row[2 * x.P + B]));
		if (len > x.fixed + ne)
			len = x.fixed + ne;
	}

	/* exact-size blocks: ASan sees a read past the row or a write past the values */
	uint8_t *src = malloc(len ? (size_t)len : 1);
	uint8_t *dec = malloc((size_t)R), *tmp = malloc((size_t)R), *back = malloc((size_t)R);
	uint8_t *enc = malloc((size_t)(x.fixed + d));
	if (!src || !dec || !tmp || !back || !enc)
		abort();
	memcpy(src, row, (size_t)len);
	const ibp_status_t st = decode_all_builds(&x, src, len, dec, tmp, R);
	for (int isa = 1; isa <= 2; isa++)
		if (d % 64 == 0 && isa <= ibpi_exprows_isa() && ibpi_exprows_sum64_ok(&x, isa))
			check_sum64(&x, isa, src, len, st, dec);
	if (st == IBP_OK) {
		if (len < x.fixed || len > x.fixed + d)
			abort(); /* accepted a length no row has */
		int canonical = 1;
		for (int a = 0; a < 7; a++)
			for (int b = a + 1; b < 7; b++)
				canonical &= table[a] != table[b];
		for (uint64_t i = x.fixed; i < len; i++)
			for (int k = 0; k < 7; k++)
				canonical &= src[i] != table[k];
		const uint64_t elen = ibpi_exprows_encode(&x, dec, enc);
		if (elen < x.fixed || elen > x.fixed + d || elen > len)
			abort(); /* re-encoding never adds escapes */
		if (canonical && (elen != len || memcmp(enc, src, (size_t)len) != 0))
			abort(); /* the encoding is unique */
		/* decode(encode(decode(row))) == decode(row), on every build;
		 * from an exact-size copy again */
		uint8_t *again = malloc((size_t)elen);
		if (!again)
			abort();
		memcpy(again, enc, (size_t)elen);
		if (decode_all_builds(&x, again, elen, back, tmp, R) != IBP_OK ||
		    memcmp(back, dec, (size_t)R) != 0)
			abort();
		free(again);
	}
	/* the slot form, K = 8: the first fixed + 8 bytes a slot, the rest its
	 * overflow area (exact-size blocks); every build agrees, and a row
	 * whose escapes fit decodes as the same bytes in the row form */
	if (len >= x.fixed + 8 && ibpi_exprows_set_slot(&x, 8, 1) == IBP_OK) {
		const uint64_t ol = len - x.slot;
		uint8_t *slot = malloc((size_t)x.slot), *ovf = malloc(ol ? (size_t)ol : 1);
		if (!slot || !ovf)
			abort();
		memcpy(slot, src, (size_t)x.slot);
		memcpy(ovf, src + x.slot, (size_t)ol);
		int is[3], ni = isas(is);
		ibp_status_t ref = IBP_OK;
		for (int k = 0; k < ni; k++) {
			uint8_t *o = k == 0 ? dec : tmp;
			const ibp_status_t st = ibpi_exprows_decode_slot(&x, is[k], slot, ovf, ol, o);
			if ((st != IBP_OK && st != IBP_ERR_CORRUPT) || (k > 0 && st != ref) ||
			    (k > 0 && st == IBP_OK && memcmp(dec, tmp, (size_t)R) != 0))
				abort();
			ref = st;
		}
		const uint64_t ne = exprows_nesc(&x, slot);
		if (ne <= 8) {
			const ibp_status_t st = ibpi_exprows_decode(&x, 0, slot, x.fixed + ne, back);
			if (st != ref || (st == IBP_OK && memcmp(back, dec, (size_t)R) != 0))
				abort();
		}
		free(slot);
		free(ovf);
	}
	free(enc);
	free(back);
	free(tmp);
	free(dec);
	free(src);
	return 0;
}
