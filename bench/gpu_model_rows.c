/* gpu_model_rows.c - the path counts of the GPU gather's decode on real
 * rows, for the SASS cost model (tools/sass-report.py --model, issue 36;
 * docs/GPU.md "SASS cost model"). No GPU needed.
 *
 * Trains a codec on the rows of a .npy file as the GPU benchmark does
 * (bench/gpu_gather.cu: ibp_codec_train with the defaults), encodes them
 * packed, and replays the control flow of ibp_gather_kernel on every row
 * (kernels/ibp_gather.cu, kernels/ibp_device.cuh: ibp_issue_fetch,
 * ibp_validate_row, ibp_decode_chunks, ibp_list_has, ibp_d_deposit,
 * ibp_walk_exc) at warp level: how many times a warp runs each loop body
 * and each branch-guarded block. A warp runs a loop as often as its
 * busiest lane and a guarded block when any lane takes it. Counts are sums
 * over all warps of all groups (a group is a warp when every row encodes
 * to at most 4 KiB, else a block of 8 warps), so that a SASS instruction's issue count is its
 * site's count. The decoders are inlined twice (rows that walk Xval
 * exceptions decode their static part first, with ibp_decode_clean):
 * "counts" has the other rows' tile counts, "walk_counts" those of the
 * rows that walk. Prints one JSON object.
 *
 * With --exp CHUNK or --fp8 CHUNK it counts instead the paths of the
 * exponent codec's decode (kernels/exp_codec.cu expk_decode: per warp and
 * round of 32 elements, whether any escapes) or the FP8 codec's
 * (kernels/fp8.cu fp8k_decode: blocks, by shape) on the array's elements
 * cut into chunks of CHUNK elements, as the CUDA batch calls take them.
 *
 * Usage: gpu_model_rows FILE.npy [--cols N] [--rows N] [--nw 1|8]
 *                      [--exp CHUNK | --fp8 CHUNK]
 *   --cols N  the first N columns of each row; --rows N  the first N rows;
 *   --nw      warps per group (default: the gather's choice by row size;
 *             the bag kernel decodes every row with one warp)
 */
#define _POSIX_C_SOURCE 200809L
#define BENCH_NAME "gpu_model_rows"
#include <inttypes.h>
#include <string.h>

#include "bench_util.h"
#include "ibp/npy.h"

#define WARP_MAX_ROW 4096u /* kernels/ibp_gather.cu IBP_WARP_MAX_ROW */
#define BLOCK_WARPS 8u     /* IBP_BLOCK_WARPS */

enum {
	N_ROWS, N_ROW_WARPS, N_RAW, N_BITMAP, N_LIST, N_WALK, N_FETCH_ITER, N_COPY_ITER,
	N_VBITMAP_ITER, N_VLIST_ITER, N_TILES, N_TILES_ACTIVE, N_TILES_BITMAP,
	N_TILES_LIST, N_LIST_STEPS, N_TILES_EXC, N_TILES_NONEXC, N_DEP1, N_DEP2, N_STORE_ITER, N_STORE_TILES, N_CTILES, N_CTILES_ZERO, N_CTILES_SCAN, N_CDEP,
	N_WALK_BATCHES, N_WALK_FULL, N_WALK_PEND, N_WALK_DEP, N_WALK_PATCH, N_WALK_WARPS, N_COUNT
};
static const char *const NAMES[N_COUNT] = {
	"rows", "row_warps", "rows_raw", "rows_bitmap", "rows_list", "rows_walk", "fetch_iter", "copy_iter",
	"vbitmap_iter", "vlist_iter", "tiles", "tiles_active", "tiles_bitmap",
	"tiles_list", "list_steps", "tiles_exc", "tiles_nonexc", "dep1_iter", "dep2_iter", "store_iter", "store_tiles", "ctiles", "ctiles_zero", "ctiles_scan", "cdep_iter",
	"walk_batches", "walk_full", "walk_pend", "walk_dep_iter", "walk_patch_iter", "walk_warps",
};

static uint64_t word(const uint8_t *p, unsigned C)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < C; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Iterations of ibp_d_deposit's loop: runs of set bits. */
static unsigned runs(uint64_t m)
{
	return (unsigned)__builtin_popcountll(m & ~(m << 1));
}

/* Iterations of ibp_list_has's binary search for j in list[0, n). */
static unsigned bsearch_steps(const uint64_t *list, uint64_t n, uint64_t j)
{
	uint64_t lo = 0, hi = n;
	unsigned s = 0;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (list[mid] < j)
			lo = mid + 1;
		else
			hi = mid;
		s++;
	}
	return s;
}

/* Loop iterations of `for (k = t; k < n; k += size)` summed over the warps
 * of a group: warp w runs as often as its lane 0. */
static uint64_t strided(uint64_t n, unsigned nw)
{
	uint64_t s = 0, size = 32ull * nw;
	for (unsigned w = 0; w < nw; w++)
		if (n > 32ull * w)
			s += (n - 32ull * w + size - 1) / size;
	return s;
}

#define EXP_THREADS 256u /* kernels/exp_codec.cu EXPK_THREADS */

static unsigned exponent(const uint8_t *p, ibp_dtype_t dt)
{
	if (dt == IBP_DTYPE_F32)
		return (unsigned)((word(p, 4) >> 23) & 0xff);
	if (dt == IBP_DTYPE_F16)
		return (unsigned)((word(p, 2) >> 10) & 0x1f);
	return (unsigned)((word(p, 2) >> 7) & 0xff); /* bf16 */
}

/* expk_decode: a block of 256 threads per group of 4,096 elements, 16
 * rounds; a warp's round takes the escape path when any of its 32 elements
 * escapes (its exponent is not in the chunk's table). */
static int exp_counts(const char *path, const uint8_t *x, uint64_t n, ibp_dtype_t dt, uint64_t eb, uint64_t chunk)
{
	uint64_t cap = 0;
	ibp_status_t st = ibp_exp_batch_bound(dt, n, chunk, &cap);
	if (st != IBP_OK)
		die("exp bound", st);
	const uint64_t nchunks = (n + chunk - 1) / chunk;
	uint8_t *dst = malloc(cap ? cap : 1);
	uint64_t *off = malloc((nchunks + 1) * sizeof(*off));
	if (!dst || !off)
		die("malloc", IBP_ERR_NOMEM);
	if ((st = ibp_exp_encode_batch(x, dt, n, chunk, NULL, dst, cap, off)) != IBP_OK)
		die("exp encode", st);
	const uint64_t nwarps = EXP_THREADS / 32, gsize = IBP_EXP_GROUP;
	uint64_t groups = 0, raw_groups = 0, rounds = 0, esc_rounds = 0, valid_rounds = 0, escapes = 0, mine = 0;
	for (uint64_t c = 0; c < nchunks; c++) {
		ibp_exp_info_t info;
		if ((st = ibp_exp_block_info(dst + off[c], off[c + 1] - off[c], &info)) != IBP_OK)
			die("exp block info", st);
		const uint64_t len = c + 1 < nchunks ? chunk : n - c * chunk, ng = (len + gsize - 1) / gsize;
		groups += ng;
		if (info.raw) {
			raw_groups += ng;
			continue;
		}
		escapes += info.escapes;
		for (uint64_t g = 0; g < ng; g++)
			for (unsigned r = 0; r < 16; r++)
				for (uint64_t w = 0; w < nwarps; w++) {
					const uint64_t i0 = g * gsize + r * EXP_THREADS + w * 32;
					rounds++;
					if (i0 >= len)
						continue;
					valid_rounds++;
					unsigned nesc = 0;
					for (uint64_t i = i0; i < i0 + 32 && i < len; i++) {
						const unsigned e = exponent(x + (c * chunk + i) * eb, dt);
						int in = 0;
						for (unsigned k = 0; k < IBP_EXP_NCODES; k++)
							in |= info.table.field[k] == e;
						nesc += !in;
					}
					esc_rounds += nesc > 0;
					mine += nesc;
				}
	}
	if (mine != escapes) { /* the table test must be the encoder's */
		fprintf(stderr, BENCH_NAME ": %s: %" PRIu64 " escapes by the tables, the blocks say %" PRIu64 "\n", path,
			mine, escapes);
		return 1;
	}
	printf("{\"file\": \"%s\", \"codec\": \"exp\", \"elements\": %" PRIu64 ", \"elem_bytes\": %" PRIu64
	       ", \"chunk\": %" PRIu64 ", \"encoded_bytes\": %" PRIu64 ", \"counts\": {\"chunks\": %" PRIu64
	       ", \"groups\": %" PRIu64 ", \"raw_groups\": %" PRIu64 ", \"warp_rounds\": %" PRIu64
	       ", \"valid_rounds\": %" PRIu64 ", \"esc_rounds\": %" PRIu64 ", \"escapes\": %" PRIu64 "}}\n",
	       path, n, eb, chunk, off[nchunks], nchunks, groups, raw_groups, rounds, valid_rounds, esc_rounds, escapes);
	free(dst), free(off);
	return 0;
}

/* fp8k_decode: a block of min(max(B, 32), 256) threads per codec block of
 * B elements; the paths depend on the shape alone (no NaN blocks here). */
static int fp8_counts(const char *path, const uint8_t *x, uint64_t n, ibp_dtype_t dt, uint64_t eb, uint64_t chunk)
{
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	const uint64_t nchunks = (n + chunk - 1) / chunk;
	uint64_t blocks = 0, bytes = 0;
	for (uint64_t c = 0; c < nchunks; c++) {
		const uint64_t len = c + 1 < nchunks ? chunk : n - c * chunk, m = (len + o.block - 1) / o.block;
		blocks += m;
		uint64_t sz = 0;
		ibp_status_t st = ibp_fp8_encoded_size(&o, len, &sz);
		if (st != IBP_OK)
			die("fp8 size", st);
		bytes += sz;
	}
	(void)x, (void)dt;
	const unsigned T = o.block < 32 ? 32u : o.block > 256 ? 256u : o.block;
	printf("{\"file\": \"%s\", \"codec\": \"fp8\", \"elements\": %" PRIu64 ", \"elem_bytes\": %" PRIu64
	       ", \"chunk\": %" PRIu64 ", \"encoded_bytes\": %" PRIu64 ", \"block\": %u, \"threads\": %u, "
	       "\"hadamard\": %d, \"counts\": {\"chunks\": %" PRIu64 ", \"blocks\": %" PRIu64 "}}\n",
	       path, n, eb, chunk, bytes, o.block, T, o.hadamard, nchunks, blocks);
	return 0;
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	uint64_t cols = 0, maxrows = 0;
	unsigned force_nw = 0;
	uint64_t exp_chunk = 0, fp8_chunk = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--cols") && i + 1 < argc)
			cols = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			maxrows = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--nw") && i + 1 < argc &&
			 (!strcmp(argv[i + 1], "1") || !strcmp(argv[i + 1], "8")))
			force_nw = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--exp") && i + 1 < argc)
			exp_chunk = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--fp8") && i + 1 < argc)
			fp8_chunk = strtoull(argv[++i], NULL, 10);
		else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fprintf(stderr, "usage: gpu_model_rows FILE.npy [--cols N] [--rows N] [--nw 1|8]\n");
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "usage: gpu_model_rows FILE.npy [--cols N] [--rows N] [--nw 1|8]\n");
		return 2;
	}
	ibp_npy_info_t info;
	void *data = NULL;
	ibp_status_t st = ibp_npy_load(path, IBP_NPY_BF16, &info, &data);
	if (st != IBP_OK)
		die(path, st);
	if (info.ndim != 2) {
		fprintf(stderr, BENCH_NAME ": %s: want a 2-D array\n", path);
		return 1;
	}
	uint64_t N = info.shape[0], ncol = info.shape[1], eb = info.elem_bytes;
	if (maxrows && maxrows < N)
		N = maxrows;
	if (!cols || cols > ncol)
		cols = ncol;
	const uint64_t R = cols * eb;
	uint8_t *rows = malloc(N && R ? N * R : 1);
	if (!rows)
		die("malloc", IBP_ERR_NOMEM);
	for (uint64_t i = 0; i < N; i++)
		memcpy(rows + i * R, (const uint8_t *)data + i * ncol * eb, R);
	ibp_npy_free(data);
	if (exp_chunk)
		return exp_counts(path, rows, N * cols, info.dtype, eb, exp_chunk);
	if (fp8_chunk)
		return fp8_counts(path, rows, N * cols, info.dtype, eb, fp8_chunk);

	ibp_codec_t *cd;
	if ((st = ibp_codec_train(rows, N, R, NULL, &cd)) != IBP_OK)
		die("train", st);
	const unsigned C = ibp_codec_chunk_bytes(cd), K = ibp_codec_nclusters(cd);
	const uint64_t D = ibp_codec_nchunks(cd), W = 8ull * C, ntiles = (D + 31) / 32;
	const uint64_t full = W >= 64 ? ~0ull : (1ull << W) - 1;
	const uint64_t last_bytes = R - (D - 1) * C;
	const int xv_any = ibp_codec_has_xval(cd);
	uint64_t *off = malloc((N + 1) * sizeof(*off));
	uint8_t *flags = malloc(N ? N : 1), *cls = malloc(N ? N : 1);
	uint8_t *enc = malloc(ibp_batch_bound(cd, N) + 1);
	uint64_t *list = malloc(D * sizeof(*list));
	uint8_t *exc = malloc(D);
	if (!off || !flags || !cls || !enc || !list || !exc)
		die("malloc", IBP_ERR_NOMEM);
	if ((st = ibp_encode_batch(cd, rows, N, enc, ibp_batch_bound(cd, N), off, flags, K > 1 ? cls : NULL,
				   0)) != IBP_OK)
		die("encode", st);
	if (K == 1)
		memset(cls, 0, N);

	/* the gather's choice (ibp_gather_config): by the longest encoded row */
	uint64_t longest = 0;
	for (uint64_t i = 0; i < N; i++)
		if (off[i + 1] - off[i] > longest)
			longest = off[i + 1] - off[i];
	const unsigned nw = force_nw ? force_nw : longest <= WARP_MAX_ROW ? 1u : BLOCK_WARPS, size = 32u * nw;
	uint64_t n[N_COUNT] = {0}, nwk[N_COUNT] = {0}; /* nwk: the tile counts of rows that walk */
	for (uint64_t i = 0; i < N; i++) {
		const unsigned mode = flags[i] & IBP_ROW_MODE_MASK, cl = cls[i];
		const uint8_t *m8 = ibp_codec_mask(cd, cl), *b8 = ibp_codec_bitval(cd, cl), *x8 = ibp_codec_xval(cd, cl);
		const uint8_t *row = rows + i * R;
		const uint64_t start = off[i], len = off[i + 1] - off[i];
		n[N_ROWS]++;
		n[N_ROW_WARPS] += nw;
		/* the fetch: 16-byte pieces from the 128-byte line below the row's
		 * first piece (the payload is 256-byte aligned) */
		if (len) {
			const uint64_t p0 = start & ~15ull, w1 = (start + len + 15) & ~15ull;
			n[N_FETCH_ITER] += nw * (((w1 - (p0 & ~127ull)) >> 4) + size - 1) / size;
		}
		if (mode == IBP_ROW_RAW) {
			n[N_RAW]++;
			n[N_COPY_ITER] += strided(R / 4, nw);
			continue;
		}
		/* exceptions: chunks whose invariant bits differ from the Bitval */
		uint64_t ne = 0;
		for (uint64_t j = 0; j < D; j++) {
			uint8_t ch[8] = {0};
			memcpy(ch, row + j * C, j + 1 < D ? C : last_bytes);
			const uint64_t mj = word(m8 + j * C, C);
			exc[j] = (word(ch, C) & mj) != word(b8 + j * C, C);
			if (exc[j])
				list[ne++] = j;
		}
		const int xv = xv_any && memcmp(x8, b8, D * C) != 0;
		const int walk = xv && ne > 0;
		if (mode == IBP_ROW_BITMAP) {
			n[N_BITMAP]++;
			/* a lane per 64 chunks, their widths summed plane by plane */
			n[N_VBITMAP_ITER] += strided((D + 63) / 64, nw);
		} else if (mode == IBP_ROW_LIST) {
			n[N_LIST]++;
			n[N_VLIST_ITER] += strided(ne, nw);
		}
		n[N_WALK] += walk;
		const unsigned dmode = walk ? IBP_ROW_CLEAN : mode;
		uint64_t *const tc = walk ? nwk : n; /* the decoders are inlined once for each */
		const uint64_t rounds = (ntiles + nw - 1) / nw;
		if (dmode == IBP_ROW_CLEAN) { /* ibp_decode_clean: a warp leaves after its last tile */
			for (unsigned w = 0; w < nw; w++)
				for (uint64_t r = 0; r < rounds; r++) {
					const uint64_t tile = r * nw + w;
					tc[N_CTILES]++;
					if (tile >= ntiles)
						break;
					unsigned d1 = 0, sw = 0;
					for (uint64_t j = tile * 32; j < tile * 32 + 32 && j < D; j++) {
						const uint64_t mj = word(m8 + j * C, C);
						const unsigned r1 = runs(~mj & full);
						sw += (unsigned)(W - (uint64_t)__builtin_popcountll(mj));
						d1 = r1 > d1 ? r1 : d1;
					}
					if (sw == 0) {
						tc[N_CTILES_ZERO]++;
					} else {
						tc[N_CTILES_SCAN]++;
						tc[N_CDEP] += d1;
					}
				}
		}
		for (uint64_t r = 0; r < rounds && dmode != IBP_ROW_CLEAN; r++)
			for (unsigned w = 0; w < nw; w++) {
				const uint64_t tile = r * nw + w;
				tc[N_TILES]++;
				if (tile >= ntiles)
					continue;
				unsigned d1 = 0, d2 = 0, ls = 0, st_it = 0;
				int any_exc = 0, any_non = 0;
				for (uint64_t j = tile * 32; j < tile * 32 + 32 && j < D; j++) {
					const uint64_t mj = word(m8 + j * C, C);
					const unsigned r1 = runs(~mj & full);
					d1 = r1 > d1 ? r1 : d1;
					const int e = dmode != IBP_ROW_CLEAN && exc[j];
					if (dmode == IBP_ROW_LIST) {
						unsigned s = bsearch_steps(list, ne, j);
						ls = s > ls ? s : ls;
					}
					if (e) {
						any_exc = 1;
						unsigned r2 = runs(mj);
						d2 = r2 > d2 ? r2 : d2;
					} else {
						any_non = 1;
					}
					if (j + 1 == D && last_bytes < C)
						st_it = (unsigned)last_bytes;
				}
				tc[N_TILES_ACTIVE]++;
				tc[N_DEP1] += d1;
				tc[N_TILES_BITMAP] += dmode == IBP_ROW_BITMAP;
				tc[N_TILES_LIST] += dmode == IBP_ROW_LIST;
				tc[N_LIST_STEPS] += ls;
				tc[N_TILES_EXC] += any_exc;
				tc[N_TILES_NONEXC] += any_non;
				tc[N_DEP2] += d2;
				tc[N_STORE_ITER] += st_it;
				tc[N_STORE_TILES] += st_it > 0;
			}
		if (walk) { /* warp 0 alone */
			n[N_WALK_WARPS]++;
			const uint64_t nb = mode == IBP_ROW_BITMAP ? ntiles : (ne + 31) / 32;
			n[N_WALK_BATCHES] += nb;
			for (uint64_t bt = 0; bt < nb; bt++) {
				unsigned pend = 0, dep = 0, any = 0;
				for (unsigned l = 0; l < 32; l++) {
					uint64_t j;
					if (mode == IBP_ROW_BITMAP) {
						j = 32 * bt + l;
						if (j >= D || !exc[j])
							continue;
					} else {
						if (32 * bt + l >= ne)
							continue;
						j = list[32 * bt + l];
					}
					any = 1;
					uint8_t ch[8] = {0};
					memcpy(ch, row + j * C, j + 1 < D ? C : last_bytes);
					const uint64_t mj = word(m8 + j * C, C), xj = word(x8 + j * C, C);
					const int en = xj != word(b8 + j * C, C);
					const int hit = en && (word(ch, C) & mj) == xj;
					pend += en;
					if (!hit && runs(mj) > dep)
						dep = runs(mj);
				}
				n[N_WALK_FULL] += any;
				n[N_WALK_PEND] += pend;
				n[N_WALK_DEP] += dep;
			}
		}
	}
	const uint64_t enc_bytes = N ? off[N] : 0;
	printf("{\"file\": \"%s\", \"rows\": %" PRIu64 ", \"row_bytes\": %" PRIu64 ", \"chunk\": %u, "
	       "\"chunks\": %" PRIu64 ", \"tiles_per_row\": %" PRIu64 ", \"clusters\": %u, \"xval\": %d, "
	       "\"group_warps\": %u, \"elem_bytes\": %" PRIu64 ", \"encoded_bytes\": %" PRIu64 ", \"longest\": %" PRIu64
	       ", \"counts\": {",
	       path, N, R, C, D, ntiles, K, xv_any, nw, eb, enc_bytes, longest);
	for (int k = 0; k < N_COUNT; k++)
		printf("%s\"%s\": %" PRIu64, k ? ", " : "", NAMES[k], n[k]);
	printf("}, \"walk_counts\": {");
	for (int k = N_TILES, f = 1; k <= N_CDEP; k++, f = 0)
		printf("%s\"%s\": %" PRIu64, f ? "" : ", ", NAMES[k], nwk[k]);
	printf("}}\n");
	ibp_codec_free(cd);
	free(rows), free(off), free(flags), free(cls), free(enc), free(list), free(exc);
	return 0;
}
