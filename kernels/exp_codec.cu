/* exp_codec.cu - the exponent codec on the GPU (ibp_exp_encode_cuda,
 * ibp_exp_decode_cuda). Bytes equal the CPU reference (src/exp/exp_codec.c):
 * both follow docs/CODECS.md and share exp_format.h.
 *
 * One CUDA block of 256 threads works on one escape group (4096 elements)
 * in 16 rounds; in a round warp w, lane l holds element r*256 + w*32 + l, so
 * a warp ballot is exactly one 32-bit plane word and element order equals
 * (round, warp, lane) order, which keeps escapes in element order.
 *
 * Encode, all stream-ordered, no allocation:
 *   [table: ms_groups + ms_chunks (sigma measured) | hist + hist_table]
 *   enc_groups: static sections; escapes staged per group in the workspace
 *   scan_chunks: prefixes, raw-or-coded decision, header, padding, sizes
 *   finish_groups: escapes compacted into place, or the raw payload copied
 * Table mode RANS: the histogram of the rANS symbols gives the HISTOGRAM
 * table and the size of its block (the limit) and the 12-bit frequencies
 * (rans_tables, with the CPU's expf_rans_fallback / expf_rans_quantize);
 * the pipeline above writes that fallback block, then
 *   rans_enc: a thread per lane encodes it backwards into the scratch
 *   rans_size: the stream total; below the limit, header, map, frequencies,
 *     directory and padding (else the fallback stays, as on the CPU)
 *   rans_place: lane streams and rest bytes into place, per segment
 * Decode: expk_decode (raw and coded blocks, a CUDA block per group), then
 * expk_rans_decode (mode-2 rANS blocks, a CUDA block per 8 segments, a warp
 * per segment); every block validates what it reads, errors go to
 * *d_status.
 */
#include <stdint.h>

#include "ibp/exp.h"
#include "cuda_check.h"
#include "exp/exp_format.h"
#include "util/opts.h"

#define EXPK_THREADS 256
#define EXPK_SCAN_THREADS 1024

/* Workspace carve-up, the same for the size query and the launch. The
 * escape stage doubles as the rANS lanes' scratch (used after the escapes
 * are in place): per segment of m elements 64 + 2m bytes, a lane's
 * state and at most a word per symbol. */
struct expk_ws {
	uint64_t esc_off, counts_off, tables_off, part_off, nonfin_off, hist_off;
	uint64_t freq_off, info_off, lens_off, total;
};

static void expk_ws_layout(uint64_t n, uint64_t nchunks, uint64_t total_groups, uint64_t total_segs, expk_ws *w)
{
	uint64_t at = 0, scratch = 2 * n + 4ull * EXPF_RANS_LANES * total_segs;
	w->esc_off = at;
	at = expf_align(at + scratch, 128); /* >= n, the escapes' most */
	w->counts_off = at;
	at = expf_align(at + 8 * total_groups, 128);
	w->tables_off = at;
	at = expf_align(at + 8 * nchunks, 128);
	w->part_off = at;
	at = expf_align(at + 8 * total_groups, 128);
	w->nonfin_off = at;
	at = expf_align(at + 8 * total_groups, 128);
	w->hist_off = at;
	at = expf_align(at + 256 * 8 * nchunks, 128);
	w->freq_off = at; /* rANS: 256 u16 frequencies per chunk */
	at = expf_align(at + 512 * nchunks, 128);
	w->info_off = at; /* rANS: per chunk u64 limit, u64 symbols (0: no rANS block) */
	at = expf_align(at + 16 * nchunks, 128);
	w->lens_off = at; /* rANS: u16 per lane of every segment */
	at = expf_align(at + 2ull * EXPF_RANS_LANES * total_segs, 128);
	w->total = at;
}

/* Shape of a batch: chunk c has chunk_len(c) elements and its groups are
 * global ids c * gpc .. c * gpc + ngroups(c) - 1; its rANS segments
 * c * spc .. likewise. */
struct expk_batch {
	uint64_t n, chunk, nchunks, gpc, spc;
	uint32_t dt;
	expf_shape_t s;
};

static __device__ __host__ inline uint64_t chunk_len(const expk_batch &b, uint64_t c)
{
	uint64_t base = c * b.chunk;
	return b.n - base < b.chunk ? b.n - base : b.chunk;
}

static __device__ inline uint32_t ld_bits(const uint8_t *p, uint32_t esize)
{
	return esize == 2 ? (uint32_t)*(const uint16_t *)p : *(const uint32_t *)p;
}

/* ------------------------------------------------------------- tables */

/* Per group: lane sums (lane t: elements k*256 + t in k order), halving
 * tree; the same order as the CPU (x*x is exact in double). */
__global__ void __launch_bounds__(EXPK_THREADS)
expk_ms_groups(const uint8_t *src, expk_batch b, double *part, uint64_t *nonfin)
{
	__shared__ double acc[EXPK_THREADS];
	__shared__ unsigned nbad;
	const uint32_t t = threadIdx.x, fmax = (1u << b.s.ebits) - 1u;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.gpc; gid += gridDim.x) {
		uint64_t c = gid / b.gpc, g = gid % b.gpc, len = chunk_len(b, c);
		uint64_t base = g << EXPF_GROUP_LOG2;
		if (base >= len)
			continue;
		uint64_t glen = len - base < EXPF_GROUP ? len - base : EXPF_GROUP;
		const uint8_t *p = src + (c * b.chunk + base) * b.s.esize;
		double a = 0.0;
		uint32_t bad = 0;
		if (t == 0)
			nbad = 0;
		for (uint32_t k = 0; k < 16; k++) {
			uint64_t i = (uint64_t)k * 256 + t;
			if (i < glen) {
				uint32_t bits = ld_bits(p + i * b.s.esize, b.s.esize);
				if (expf_field(bits, &b.s) == fmax) {
					bad++;
				} else {
					double d;
					if (b.dt == EXPF_DT_BF16)
						d = (double)__uint_as_float(bits << 16);
					else if (b.dt == EXPF_DT_F32)
						d = (double)__uint_as_float(bits);
					else {
						uint32_t e = (bits >> 10) & 31u, m = bits & 0x3ffu;
						double v = e ? __dmul_rn((double)(m | 0x400u), ldexp(1.0, (int)e - 25))
							     : __dmul_rn((double)m, 0x1p-24);
						d = (bits & 0x8000u) ? -v : v;
					}
					a = __dadd_rn(a, __dmul_rn(d, d));
				}
			}
		}
		acc[t] = a;
		__syncthreads();
		for (uint32_t h = EXPK_THREADS / 2; h >= 1; h >>= 1) {
			if (t < h)
				acc[t] = __dadd_rn(acc[t], acc[t + h]);
			__syncthreads();
		}
		if (bad)
			atomicAdd(&nbad, bad);
		__syncthreads();
		if (t == 0) {
			part[gid] = acc[0];
			nonfin[gid] = nbad;
		}
		__syncthreads();
	}
}

/* Per chunk: pairwise tree over its group partials (power-of-two aligned,
 * equal to the CPU's binary counter), mean square, sigma window. */
__global__ void __launch_bounds__(EXPK_SCAN_THREADS)
expk_ms_chunks(expk_batch b, double *part, const uint64_t *nonfin, uint8_t *tables)
{
	__shared__ unsigned long long bad_total;
	for (uint64_t c = blockIdx.x; c < b.nchunks; c += gridDim.x) {
		uint64_t len = chunk_len(b, c), ng = (len + EXPF_GROUP - 1) >> EXPF_GROUP_LOG2;
		double *p = part + c * b.gpc;
		if (threadIdx.x == 0)
			bad_total = 0;
		__syncthreads();
		unsigned long long mine = 0;
		for (uint64_t i = threadIdx.x; i < ng; i += blockDim.x)
			mine += nonfin[c * b.gpc + i];
		if (mine)
			atomicAdd(&bad_total, mine);
		for (uint64_t stride = 1; stride < ng; stride *= 2) {
			__syncthreads();
			for (uint64_t i = (uint64_t)threadIdx.x * 2 * stride; i + stride < ng; i += (uint64_t)blockDim.x * 2 * stride)
				p[i] = __dadd_rn(p[i], p[i + stride]);
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			uint64_t finite = len - bad_total;
			double ms = (ng == 0 || finite == 0) ? 0.0 : __ddiv_rn(p[0], (double)finite);
			uint32_t start = expf_window_start(ms, &b.s);
			for (uint32_t k = 0; k < EXPF_NCODES; k++)
				tables[8 * c + k] = (uint8_t)(start + k);
			tables[8 * c + 7] = 0;
		}
		__syncthreads();
	}
}

/* Per chunk: counts of the exponent fields, or (sym) of the rANS symbols. */
__global__ void __launch_bounds__(EXPK_THREADS)
expk_hist(const uint8_t *src, expk_batch b, bool sym, unsigned long long *hist)
{
	__shared__ uint32_t h[256];
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.gpc; gid += gridDim.x) {
		uint64_t c = gid / b.gpc, g = gid % b.gpc, len = chunk_len(b, c);
		uint64_t base = g << EXPF_GROUP_LOG2;
		if (base >= len)
			continue;
		uint64_t glen = len - base < EXPF_GROUP ? len - base : EXPF_GROUP;
		const uint8_t *p = src + (c * b.chunk + base) * b.s.esize;
		h[threadIdx.x] = 0;
		__syncthreads();
		for (uint64_t i = threadIdx.x; i < glen; i += blockDim.x) {
			uint32_t bits = ld_bits(p + i * b.s.esize, b.s.esize);
			atomicAdd(&h[sym ? expf_rans_sym(bits, b.dt) : expf_field(bits, &b.s)], 1u);
		}
		__syncthreads();
		if (h[threadIdx.x])
			atomicAdd(&hist[256 * c + threadIdx.x], (unsigned long long)h[threadIdx.x]);
		__syncthreads();
	}
}

__global__ void expk_hist_table(expk_batch b, const unsigned long long *hist, uint8_t *tables)
{
	for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c < b.nchunks;
	     c += (uint64_t)gridDim.x * blockDim.x) {
		expf_table_from_hist((const uint64_t *)(hist + 256 * c), (1u << b.s.ebits) - 1u, tables + 8 * c);
		tables[8 * c + 7] = 0;
	}
}

__global__ void expk_fill_table(uint64_t nchunks, uint64_t t0, uint8_t *tables)
{
	for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c < nchunks;
	     c += (uint64_t)gridDim.x * blockDim.x)
		*(uint64_t *)(tables + 8 * c) = t0;
}

/* ------------------------------------------------------------- encode */

__global__ void __launch_bounds__(EXPK_THREADS)
expk_enc_groups(const uint8_t *src, expk_batch b, uint8_t *dst, uint64_t stride, const uint8_t *tables,
		uint8_t *stage, uint64_t *counts)
{
	__shared__ uint32_t wcount[EXPK_THREADS / 32];
	const uint32_t t = threadIdx.x, lane = t & 31u, warp = t >> 5;
	expf_layout_t L;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.gpc; gid += gridDim.x) {
		uint64_t c = gid / b.gpc, g = gid % b.gpc, len = chunk_len(b, c);
		uint64_t base = g << EXPF_GROUP_LOG2;
		if (base >= len)
			continue;
		expf_layout_of(&b.s, len, &L);
		const uint8_t *tb = tables + 8 * c;
		uint8_t t0 = tb[0], t1 = tb[1], t2 = tb[2], t3 = tb[3], t4 = tb[4], t5 = tb[5], t6 = tb[6];
		const uint8_t *in = src + c * b.chunk * b.s.esize;
		uint8_t *blk = dst + c * stride;
		uint32_t *planes = (uint32_t *)(blk + L.off_planes);
		uint64_t pw = L.plane_bytes / 4; /* u32 words per plane */
		uint8_t *stg = stage + c * b.chunk + base;
		uint64_t run = 0;
		for (uint32_t r = 0; r < 16; r++) {
			uint64_t wbase = base + (uint64_t)r * 256 + warp * 32;
			uint64_t i = wbase + lane;
			bool valid = i < len;
			uint32_t bits = valid ? ld_bits(in + i * b.s.esize, b.s.esize) : 0u;
			uint32_t f = expf_field(bits, &b.s), sm = expf_sm(bits, &b.s);
			uint32_t code = 0;
			if (valid)
				code = f == t0 ? 1u : f == t1 ? 2u : f == t2 ? 3u : f == t3 ? 4u : f == t4 ? 5u
				     : f == t5 ? 6u : f == t6 ? 7u : 0u;
			if (valid) {
				if (b.dt == EXPF_DT_F32) {
					((uint16_t *)(blk + L.off_lo))[i] = (uint16_t)sm;
					blk[L.off_hi + i] = (uint8_t)(sm >> 16);
				} else {
					blk[L.off_lo + i] = (uint8_t)sm;
				}
			}
			uint32_t b0 = __ballot_sync(0xffffffffu, code & 1u);
			uint32_t b1 = __ballot_sync(0xffffffffu, code & 2u);
			uint32_t b2 = __ballot_sync(0xffffffffu, code & 4u);
			uint32_t s0 = 0, s1 = 0, s2 = 0;
			if (b.dt == EXPF_DT_F16) {
				s0 = __ballot_sync(0xffffffffu, (sm >> 8) & 1u);
				s1 = __ballot_sync(0xffffffffu, (sm >> 9) & 1u);
				s2 = __ballot_sync(0xffffffffu, (sm >> 10) & 1u);
			}
			if (lane == 0 && wbase < len) {
				uint64_t w = wbase / 32;
				planes[w] = b0;
				planes[pw + w] = b1;
				planes[2 * pw + w] = b2;
				if (b.dt == EXPF_DT_F16) {
					planes[3 * pw + w] = s0;
					planes[4 * pw + w] = s1;
					planes[5 * pw + w] = s2;
				}
			}
			uint32_t em = __ballot_sync(0xffffffffu, valid && code == 0);
			if (lane == 0)
				wcount[warp] = __popc(em);
			__syncthreads();
			uint32_t before = 0, total = 0;
			for (uint32_t w = 0; w < EXPK_THREADS / 32; w++) {
				before += w < warp ? wcount[w] : 0u;
				total += wcount[w];
			}
			if (valid && code == 0)
				stg[run + before + __popc(em & ((1u << lane) - 1u))] = (uint8_t)f;
			run += total;
			__syncthreads();
		}
		if (t == 0)
			counts[gid] = run;
	}
}

/* a[t] = a[0] + ... + a[t] for t < N, a in shared memory, thread t of an
 * N-thread block holding a[t] (written before the call); every thread
 * calls it (barriers). The encoder's group prefixes and rANS directory
 * (N = EXPK_SCAN_THREADS), the rANS frequency tables (N = 256). */
template <typename T, uint32_t N> static __device__ void expk_scan(T *a, uint32_t t)
{
	__syncthreads();
	for (uint32_t o = 1; o < N; o <<= 1) {
		T add = t >= o ? a[t - o] : (T)0;
		__syncthreads();
		a[t] += add;
		__syncthreads();
	}
}

/* Per chunk: escape prefixes (exclusive scan of the group counts), the
 * raw-or-coded decision, header, zero padding and the block size. */
__global__ void __launch_bounds__(EXPK_SCAN_THREADS)
expk_scan_chunks(expk_batch b, uint8_t *dst, uint64_t stride, const uint8_t *tables, uint32_t tsrc,
		 const uint64_t *counts, uint64_t *sizes)
{
	__shared__ unsigned long long sc[EXPK_SCAN_THREADS];
	__shared__ unsigned long long carry;
	const uint32_t t = threadIdx.x;
	expf_layout_t L;
	for (uint64_t c = blockIdx.x; c < b.nchunks; c += gridDim.x) {
		uint64_t len = chunk_len(b, c);
		expf_layout_of(&b.s, len, &L);
		uint8_t *blk = dst + c * stride;
		uint64_t raw = expf_raw_bytes(&b.s, len);
		if (t == 0)
			carry = 0;
		__syncthreads();
		bool coded_possible = L.static_bytes < raw;
		for (uint64_t t0 = 0; coded_possible && t0 < L.ngroups; t0 += EXPK_SCAN_THREADS) {
			uint64_t gi = t0 + t;
			unsigned long long v = gi < L.ngroups ? counts[c * b.gpc + gi] : 0ull;
			sc[t] = v;
			expk_scan<unsigned long long, EXPK_SCAN_THREADS>(sc, t);
			if (gi < L.ngroups)
				expf_st64(blk + L.off_prefix + 8 * gi, carry + sc[t] - v);
			__syncthreads();
			if (t == EXPK_SCAN_THREADS - 1)
				carry += sc[t];
			__syncthreads();
		}
		uint64_t esc = carry;
		uint64_t coded = expf_coded_bytes(&L, esc);
		bool is_raw = !coded_possible || coded >= raw;
		if (is_raw) {
			uint64_t from = EXPF_HEADER_BYTES + len * b.s.esize;
			for (uint64_t i = from + t; i < raw; i += EXPK_SCAN_THREADS)
				blk[i] = 0;
			if (t == 0) {
				expf_write_header(blk, b.dt, EXPF_MODE_RAW, 0, len, NULL, 0, raw, raw);
				sizes[c] = raw;
			}
		} else {
			uint64_t pend = L.off_prefix + 8 * L.ngroups;
			for (uint64_t i = pend + t; i < L.off_planes; i += EXPK_SCAN_THREADS)
				blk[i] = 0;
			uint64_t used = (len + 31) / 32 * 4; /* plane bytes the encoder wrote */
			for (uint32_t p = 0; p < L.nplanes; p++)
				for (uint64_t i = used + t; i < L.plane_bytes; i += EXPK_SCAN_THREADS)
					blk[L.off_planes + p * L.plane_bytes + i] = 0;
			pend = L.off_planes + L.nplanes * L.plane_bytes;
			for (uint64_t i = pend + t; i < L.off_lo; i += EXPK_SCAN_THREADS)
				blk[i] = 0;
			pend = L.off_lo + len * b.s.lo_bytes;
			if (b.s.hi_bytes) {
				for (uint64_t i = pend + t; i < L.off_hi; i += EXPK_SCAN_THREADS)
					blk[i] = 0;
				pend = L.off_hi + len * b.s.hi_bytes;
			}
			for (uint64_t i = pend + t; i < L.static_bytes; i += EXPK_SCAN_THREADS)
				blk[i] = 0;
			for (uint64_t i = L.static_bytes + esc + t; i < coded; i += EXPK_SCAN_THREADS)
				blk[i] = 0;
			if (t == 0) {
				expf_write_header(blk, b.dt, EXPF_MODE_CODED, tsrc, len, tables + 8 * c, esc, coded,
						  L.static_bytes);
				sizes[c] = coded;
			}
		}
		__syncthreads();
	}
}

/* Per group: escapes into place, or (raw block) the group's input bytes. */
__global__ void __launch_bounds__(EXPK_THREADS)
expk_finish_groups(const uint8_t *src, expk_batch b, uint8_t *dst, uint64_t stride, const uint8_t *stage,
		   const uint64_t *counts)
{
	expf_layout_t L;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.gpc; gid += gridDim.x) {
		uint64_t c = gid / b.gpc, g = gid % b.gpc, len = chunk_len(b, c);
		uint64_t base = g << EXPF_GROUP_LOG2;
		if (base >= len)
			continue;
		uint8_t *blk = dst + c * stride;
		if (blk[EXPF_OFF_MODE] == EXPF_MODE_RAW) {
			uint64_t glen = len - base < EXPF_GROUP ? len - base : EXPF_GROUP;
			uint64_t nb = glen * b.s.esize, from = base * b.s.esize;
			const uint8_t *in = src + c * b.chunk * b.s.esize + from;
			for (uint64_t i = threadIdx.x; i < nb; i += blockDim.x)
				blk[EXPF_HEADER_BYTES + from + i] = in[i];
			continue;
		}
		expf_layout_of(&b.s, len, &L);
		uint64_t pfx = expf_ld64(blk + L.off_prefix + 8 * g), cnt = counts[gid];
		const uint8_t *stg = stage + c * b.chunk + base;
		for (uint64_t i = threadIdx.x; i < cnt; i += blockDim.x)
			blk[L.static_bytes + pfx + i] = stg[i];
	}
}

/* ------------------------------------------------------- encode: rANS */

/* Table mode RANS (CPU twin: encode_rans in src/exp/exp_codec.c and
 * src/exp/exp_rans.c). The HISTOGRAM pipeline above writes every chunk's
 * fallback block first; these kernels then overwrite the chunks whose rANS
 * block is smaller (it is a prefix of the fallback's extent, so it fits). */

/* Per chunk (a thread): the fallback table and size (the limit) and the
 * frequencies, both from the symbol histogram with the CPU's functions;
 * info[2c + 1] = the symbol count, 0 when even empty lanes cannot win. */
__global__ void expk_rans_tables(expk_batch b, const unsigned long long *hist, uint8_t *tables, uint16_t *freq,
				 uint64_t *info)
{
	for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c < b.nchunks;
	     c += (uint64_t)gridDim.x * blockDim.x) {
		const uint64_t len = chunk_len(b, c), *h = (const uint64_t *)(hist + 256 * c);
		uint64_t limit = expf_rans_fallback(h, &b.s, b.dt, len, tables + 8 * c);
		tables[8 * c + 7] = 0;
		uint32_t nsym = expf_rans_quantize(h, len, freq + 256 * c);
		expf_rans_layout_t R;
		expf_rans_layout_of(&b.s, len, nsym, &R);
		info[2 * c] = limit;
		info[2 * c + 1] = R.static_bytes + 4ull * EXPF_RANS_LANES * R.nseg < limit ? nsym : 0;
	}
}

/* Scratch of segment g of chunk c: 64 + 2m bytes, lane j's area after
 * those of lanes < j (4 + 2 * its symbols each). */
static __device__ __host__ inline uint64_t expk_rans_seg_scratch(const expk_batch &b, uint64_t c, uint64_t g)
{
	return 4ull * EXPF_RANS_LANES * (c * b.spc + g) + 2 * (c * b.chunk + (g << EXPF_RANS_SEG_LOG2));
}

static __device__ inline uint64_t expk_rans_lane_end(uint64_t m, uint32_t j)
{
	uint64_t end = 0;
	for (uint32_t i = 0; i <= j; i++)
		end += 4 + 2 * expf_rans_lane_syms(m, i);
	return end;
}

/* A CUDA block takes 16 segments of a chunk, a thread one lane: symbols
 * from the lane's last back to its first (docs/CODECS.md, encoder), the
 * stream ending at its area's end; lens = its bytes. */
__global__ void __launch_bounds__(EXPK_THREADS)
expk_rans_enc(const uint8_t *src, expk_batch b, uint64_t bq, const uint16_t *freq, const uint64_t *info,
	      uint8_t *scratch, uint16_t *lens)
{
	__shared__ uint32_t fr[256], cm[256];
	const uint32_t t = threadIdx.x, j = t % EXPF_RANS_LANES, es = b.s.esize;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * bq; gid += gridDim.x) {
		uint64_t c = gid / bq, q = gid % bq, len = chunk_len(b, c);
		uint64_t nseg = (len + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2;
		if (q * (EXPK_THREADS / EXPF_RANS_LANES) >= nseg || !info[2 * c + 1])
			continue;
		/* cumulative frequencies: an inclusive scan, less each own */
		uint32_t f = freq[256 * c + t];
		fr[t] = f;
		cm[t] = f;
		expk_scan<uint32_t, 256>(cm, t);
		cm[t] -= f;
		__syncthreads();
		uint64_t g = q * (EXPK_THREADS / EXPF_RANS_LANES) + t / EXPF_RANS_LANES;
		if (g < nseg) {
			const uint64_t gbase = g << EXPF_RANS_SEG_LOG2;
			const uint64_t m = len - gbase < EXPF_RANS_SEG ? len - gbase : EXPF_RANS_SEG;
			const uint64_t end = expk_rans_lane_end(m, j);
			const uint8_t *in = src + (c * b.chunk + gbase) * es;
			uint8_t *area = scratch + expk_rans_seg_scratch(b, c, g), *p = area + end;
			uint32_t x = EXPF_RANS_L;
			for (uint64_t k = expf_rans_lane_syms(m, j); k-- > 0;) {
				uint32_t s = expf_rans_sym(ld_bits(in + (j + k * EXPF_RANS_LANES) * es, es), b.dt);
				uint32_t fs = fr[s];
				if ((uint64_t)x >= (uint64_t)fs << 20) { /* x < 2^20 f after: no overflow below */
					p -= 2;
					p[0] = (uint8_t)x;
					p[1] = (uint8_t)(x >> 8);
					x >>= 16;
				}
				x = (x / fs) * EXPF_RANS_SCALE + x % fs + cm[s];
			}
			p -= 4;
			expf_st32(p, x);
			lens[(c * b.spc + g) * EXPF_RANS_LANES + j] = (uint16_t)(area + end - p);
		}
		__syncthreads(); /* the tables are reloaded for the next chunk */
	}
}

/* Per chunk: the stream total, the CPU's choice (rANS only below the
 * limit), and for a rANS block its header, symbol map, frequencies,
 * directory, padding and size; info[2c + 1] = 0 when not chosen. */
__global__ void __launch_bounds__(EXPK_SCAN_THREADS)
expk_rans_size(expk_batch b, const uint16_t *freq, uint64_t *info, const uint16_t *lens, uint8_t *dst,
	       uint64_t stride, uint64_t *sizes)
{
	__shared__ unsigned long long sc[EXPK_SCAN_THREADS];
	__shared__ unsigned long long carry, total;
	const uint32_t t = threadIdx.x;
	expf_rans_layout_t R;
	for (uint64_t c = blockIdx.x; c < b.nchunks; c += gridDim.x) {
		const uint64_t len = chunk_len(b, c), nsym = info[2 * c + 1], limit = info[2 * c];
		if (!nsym)
			continue;
		expf_rans_layout_of(&b.s, len, nsym, &R);
		const uint16_t *ln = lens + c * b.spc * EXPF_RANS_LANES;
		if (t == 0)
			total = carry = 0;
		__syncthreads();
		unsigned long long mine = 0;
		for (uint64_t i = t; i < R.nseg * EXPF_RANS_LANES; i += EXPK_SCAN_THREADS)
			mine += ln[i];
		atomicAdd(&total, mine);
		__syncthreads();
		const uint64_t streams = total, block = expf_align(R.static_bytes + streams, EXPF_ALIGN);
		__syncthreads(); /* every thread has read info and total */
		if (block >= limit) {
			if (t == 0)
				info[2 * c + 1] = 0; /* the fallback stays */
			continue;
		}
		uint8_t *blk = dst + c * stride;
		const uint16_t *fc = freq + 256 * c;
		if (t < 32) { /* map byte t */
			uint32_t v = 0;
			for (uint32_t k = 0; k < 8; k++)
				v |= (fc[8 * t + k] ? 1u : 0u) << k;
			blk[EXPF_OFF_RANS_MAP + t] = (uint8_t)v;
		} else if (t >= 256 && t < 512 && fc[t - 256]) { /* frequency of symbol t - 256, at its rank */
			uint32_t k = t - 256, rank = 0;
			for (uint32_t i = 0; i < k; i++)
				rank += fc[i] ? 1u : 0u;
			blk[EXPF_OFF_RANS_FREQ + 2 * rank] = (uint8_t)fc[k];
			blk[EXPF_OFF_RANS_FREQ + 2 * rank + 1] = (uint8_t)(fc[k] >> 8);
		}
		for (uint64_t i = EXPF_OFF_RANS_FREQ + 2 * nsym + t; i < R.off_dir; i += EXPK_SCAN_THREADS)
			blk[i] = 0;
		/* the directory: segment ends, an inclusive scan of the segment totals */
		for (uint64_t t0 = 0; t0 < R.nseg; t0 += EXPK_SCAN_THREADS) {
			uint64_t g = t0 + t;
			unsigned long long v = 0;
			if (g < R.nseg)
				for (uint32_t k = 0; k < EXPF_RANS_LANES; k++)
					v += ln[g * EXPF_RANS_LANES + k];
			sc[t] = v;
			expk_scan<unsigned long long, EXPK_SCAN_THREADS>(sc, t);
			if (g < R.nseg) {
				uint8_t *d = blk + R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
				expf_st64(d, carry + sc[t]);
				for (uint32_t k = 0; k < EXPF_RANS_LANES; k++) {
					d[8 + 2 * k] = (uint8_t)ln[g * EXPF_RANS_LANES + k];
					d[9 + 2 * k] = (uint8_t)(ln[g * EXPF_RANS_LANES + k] >> 8);
				}
			}
			__syncthreads();
			if (t == EXPK_SCAN_THREADS - 1)
				carry += sc[t];
			__syncthreads();
		}
		uint64_t pend = R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * R.nseg;
		for (uint64_t i = pend + t; i < R.off_rest; i += EXPK_SCAN_THREADS)
			blk[i] = 0;
		pend = R.off_rest + len * R.rest_bytes;
		for (uint64_t i = pend + t; i < R.static_bytes; i += EXPK_SCAN_THREADS)
			blk[i] = 0;
		if (t == 0) {
			const uint8_t table[EXPF_NCODES] = {EXPF_RANS_LANES_LOG2, EXPF_RANS_SCALE_BITS, 0, 0, 0, 0, 0};
			expf_write_header(blk, b.dt, EXPF_MODE_RANS, EXPF_TSRC_RANS, len, table, streams, block,
					  R.static_bytes);
			sizes[c] = block;
		}
		__syncthreads();
	}
}

/* Per segment of a chunk with a rANS block: its lanes' streams into place
 * (after the directory's previous end), its rest bytes; the last segment
 * also zeroes the padding after the streams. */
__global__ void __launch_bounds__(EXPK_THREADS)
expk_rans_place(const uint8_t *src, expk_batch b, const uint64_t *info, const uint16_t *lens,
		const uint8_t *scratch, uint8_t *dst, uint64_t stride)
{
	const uint32_t t = threadIdx.x, es = b.s.esize;
	expf_rans_layout_t R;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.spc; gid += gridDim.x) {
		uint64_t c = gid / b.spc, g = gid % b.spc, len = chunk_len(b, c), nsym = info[2 * c + 1];
		uint64_t gbase = g << EXPF_RANS_SEG_LOG2;
		if (!nsym || gbase >= len)
			continue;
		const uint64_t m = len - gbase < EXPF_RANS_SEG ? len - gbase : EXPF_RANS_SEG;
		expf_rans_layout_of(&b.s, len, nsym, &R);
		uint8_t *blk = dst + c * stride;
		const uint8_t *dir = blk + R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
		uint8_t *out = blk + R.static_bytes + (g ? expf_ld64(dir - EXPF_RANS_DIR_BYTES) : 0);
		const uint8_t *area = scratch + expk_rans_seg_scratch(b, c, g);
		const uint16_t *ln = lens + (c * b.spc + g) * EXPF_RANS_LANES;
		uint64_t end = 0;
		for (uint32_t j = 0; j < EXPF_RANS_LANES; j++) {
			end += 4 + 2 * expf_rans_lane_syms(m, j);
			const uint8_t *from = area + end - ln[j];
			for (uint32_t i = t; i < ln[j]; i += EXPK_THREADS)
				out[i] = from[i];
			out += ln[j];
		}
		const uint8_t *in = src + (c * b.chunk + gbase) * es;
		uint8_t *rest = blk + R.off_rest + gbase * R.rest_bytes;
		for (uint64_t i = t; i < m; i += EXPK_THREADS) {
			uint32_t v = expf_rans_rest(ld_bits(in + i * es, es), b.dt);
			if (R.rest_bytes == 1) {
				rest[i] = (uint8_t)v;
			} else {
				rest[3 * i] = (uint8_t)v;
				rest[3 * i + 1] = (uint8_t)(v >> 8);
				rest[3 * i + 2] = (uint8_t)(v >> 16);
			}
		}
		if (g + 1 == R.nseg) {
			uint64_t pend = R.static_bytes + expf_ld64(dir);
			for (uint64_t i = pend + t; i < expf_align(pend, EXPF_ALIGN); i += EXPK_THREADS)
				blk[i] = 0;
		}
	}
}

/* ------------------------------------------------------------- decode */

static __device__ inline void expk_fail(int32_t *status, int32_t code)
{
	atomicCAS((int *)status, 0, (int)code);
}

static __device__ bool expk_zero(const uint8_t *p, uint64_t from, uint64_t to)
{
	bool ok = true;
	for (uint64_t i = from + threadIdx.x; i < to; i += blockDim.x)
		ok &= p[i] == 0;
	return __syncthreads_and(ok) != 0;
}

/* The header checks of parse_header (src/exp/exp_codec.c) every mode
 * shares; false = corrupt. */
static __device__ bool expk_header_common_ok(const uint8_t *h, uint64_t avail, const expk_batch &b, uint64_t len)
{
	if (avail < EXPF_HEADER_BYTES || expf_ld32(h) != EXPF_MAGIC ||
	    (h[EXPF_OFF_VERSION] != EXPF_VERSION && h[EXPF_OFF_VERSION] != EXPF_VERSION_1) ||
	    h[EXPF_OFF_DTYPE] != b.dt || h[EXPF_OFF_MODE] > EXPF_MODE_RANS || h[EXPF_OFF_GLOG2] != EXPF_GROUP_LOG2)
		return false;
	if (!expf_reserved_ok(h)) /* a checksum is not verified here (ibp/exp.h) */
		return false;
	return expf_ld64(h + EXPF_OFF_N) == len;
}

/* Header checks of parse_header for raw and coded blocks; 0 = corrupt,
 * 2 = a rANS block (expk_rans_decode checks and decodes it). */
static __device__ int expk_header_ok(const uint8_t *h, uint64_t avail, const expk_batch &b, uint64_t len,
				     expf_layout_t *L, uint64_t *esc_out)
{
	if (!expk_header_common_ok(h, avail, b, len))
		return 0;
	if (h[EXPF_OFF_MODE] == EXPF_MODE_RANS)
		return 2;
	uint64_t n = len, esc = expf_ld64(h + EXPF_OFF_ESC);
	uint64_t block = expf_ld64(h + EXPF_OFF_BLOCK), stat = expf_ld64(h + EXPF_OFF_STATIC);
	expf_layout_of(&b.s, n, L);
	uint32_t fmax = (1u << b.s.ebits) - 1u;
	if (h[EXPF_OFF_MODE] == EXPF_MODE_RAW) {
		uint64_t raw = expf_raw_bytes(&b.s, n);
		if (h[EXPF_OFF_TSRC] || esc || block != raw || stat != raw)
			return false;
		for (int i = 0; i < (int)EXPF_NCODES; i++)
			if (h[EXPF_OFF_TABLE + i])
				return false;
	} else {
		if (h[EXPF_OFF_TSRC] > 2 || esc > n || stat != L->static_bytes || block != expf_coded_bytes(L, esc))
			return false;
		for (int i = 0; i < (int)EXPF_NCODES; i++)
			if (h[EXPF_OFF_TABLE + i] > fmax || (i && h[EXPF_OFF_TABLE + i] <= h[EXPF_OFF_TABLE + i - 1]))
				return false;
	}
	*esc_out = esc;
	return block <= avail ? 1 : 0;
}

__global__ void __launch_bounds__(EXPK_THREADS)
expk_decode(const uint8_t *src, uint64_t src_bytes, const uint64_t *offsets, const uint64_t *sizes, expk_batch b,
	    uint8_t *dst, int32_t *status)
{
	__shared__ uint32_t wcount[EXPK_THREADS / 32];
	const uint32_t t = threadIdx.x, lane = t & 31u, warp = t >> 5;
	const uint32_t fmax = (1u << b.s.ebits) - 1u;
	expf_layout_t L;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * b.gpc; gid += gridDim.x) {
		uint64_t c = gid / b.gpc, g = gid % b.gpc, len = chunk_len(b, c);
		uint64_t base = g << EXPF_GROUP_LOG2;
		if (base >= len)
			continue;
		uint64_t off = offsets[c];
		if ((off & 127u) || (((uintptr_t)src) & 127u)) {
			if (t == 0)
				expk_fail(status, IBP_ERR_INVALID_ARG);
			continue;
		}
		const uint8_t *blk = src + off;
		uint64_t esc_total = 0, avail = sizes[c];
		int hk = off > src_bytes || avail > src_bytes - off ? 0 : expk_header_ok(blk, avail, b, len, &L, &esc_total);
		if (hk != 1) {
			if (hk == 0 && t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
			continue; /* 2: a rANS block, expk_rans_decode's */
		}
		uint8_t *out = dst + c * b.chunk * b.s.esize;
		uint64_t glen = len - base < EXPF_GROUP ? len - base : EXPF_GROUP;
		if (blk[EXPF_OFF_MODE] == EXPF_MODE_RAW) {
			uint64_t nb = glen * b.s.esize, from = base * b.s.esize;
			for (uint64_t i = t; i < nb; i += blockDim.x)
				out[from + i] = blk[EXPF_HEADER_BYTES + from + i];
			if (g == 0 && !expk_zero(blk, EXPF_HEADER_BYTES + len * b.s.esize, expf_raw_bytes(&b.s, len)) && t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
			continue;
		}
		/* this group's escape range, checked against its neighbours */
		uint64_t pfx = expf_ld64(blk + L.off_prefix + 8 * g);
		uint64_t pnext = g + 1 < L.ngroups ? expf_ld64(blk + L.off_prefix + 8 * (g + 1)) : esc_total;
		if ((g == 0 && pfx != 0) || pnext < pfx || pnext - pfx > glen || pnext > esc_total) {
			if (t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
			continue;
		}
		uint64_t have = pnext - pfx;
		if (g == 0) {
			/* the canonical-padding checks of check_coded_frame */
			bool ok = expk_zero(blk, L.off_prefix + 8 * L.ngroups, L.off_planes);
			for (uint32_t p = 0; p < L.nplanes; p++) {
				const uint8_t *pl = blk + L.off_planes + p * L.plane_bytes;
				bool pok = true;
				for (uint64_t i = len / 8 + t; i < L.plane_bytes; i += blockDim.x) {
					uint32_t first = i * 8 < len ? (uint32_t)(len - i * 8) : 0u; /* bits < n in this byte */
					pok &= (pl[i] >> first) == 0;
				}
				ok &= __syncthreads_and(pok) != 0;
			}
			ok &= expk_zero(blk, L.off_planes + L.nplanes * L.plane_bytes, L.off_lo);
			uint64_t pend = L.off_lo + len * b.s.lo_bytes;
			if (b.s.hi_bytes) {
				ok &= expk_zero(blk, pend, L.off_hi);
				pend = L.off_hi + len * b.s.hi_bytes;
			}
			ok &= expk_zero(blk, pend, L.static_bytes);
			ok &= expk_zero(blk, L.static_bytes + esc_total, expf_coded_bytes(&L, esc_total));
			if (!ok && t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
		}
		const uint8_t *tb = blk + EXPF_OFF_TABLE;
		uint32_t hi_of[8];
		hi_of[0] = 0;
		for (int k = 0; k < 7; k++)
			hi_of[k + 1] = tb[k];
		const uint32_t *planes = (const uint32_t *)(blk + L.off_planes);
		uint64_t pw = L.plane_bytes / 4;
		const uint8_t *esc = blk + L.static_bytes + pfx;
		uint64_t run = 0;
		bool ok = true;
		for (uint32_t r = 0; r < 16; r++) {
			uint64_t wbase = base + (uint64_t)r * 256 + warp * 32;
			uint64_t i = wbase + lane;
			bool valid = i < len;
			uint32_t w0 = 0, w1 = 0, w2 = 0;
			if (wbase < len) {
				uint64_t w = wbase / 32;
				w0 = planes[w];
				w1 = planes[pw + w];
				w2 = planes[2 * pw + w];
			}
			uint32_t code = ((w0 >> lane) & 1u) | ((w1 >> lane) & 1u) << 1 | ((w2 >> lane) & 1u) << 2;
			uint32_t em = __ballot_sync(0xffffffffu, valid && code == 0);
			if (lane == 0)
				wcount[warp] = __popc(em);
			__syncthreads();
			uint32_t before = 0, total = 0;
			for (uint32_t w = 0; w < EXPK_THREADS / 32; w++) {
				before += w < warp ? wcount[w] : 0u;
				total += wcount[w];
			}
			if (valid) {
				uint32_t f = hi_of[code];
				if (code == 0) {
					uint64_t k = run + before + __popc(em & ((1u << lane) - 1u));
					if (k < have) {
						f = esc[k];
						bool in_tab = false;
						for (int q = 0; q < 7; q++)
							in_tab |= tb[q] == f;
						if (f > fmax || in_tab)
							ok = false;
					} else {
						ok = false;
						f = 0;
					}
				}
				uint32_t sm;
				if (b.dt == EXPF_DT_F32) {
					sm = (uint32_t)((const uint16_t *)(blk + L.off_lo))[i] | (uint32_t)blk[L.off_hi + i] << 16;
				} else {
					sm = blk[L.off_lo + i];
					if (b.dt == EXPF_DT_F16) {
						uint64_t w = wbase / 32;
						sm |= ((planes[3 * pw + w] >> lane) & 1u) << 8 | ((planes[4 * pw + w] >> lane) & 1u) << 9 |
						      ((planes[5 * pw + w] >> lane) & 1u) << 10;
					}
				}
				uint32_t v = expf_join(sm, f, &b.s);
				if (b.dt == EXPF_DT_F32)
					((uint32_t *)out)[i] = v;
				else
					((uint16_t *)out)[i] = (uint16_t)v;
			}
			run += total;
			__syncthreads();
		}
		if (run != have)
			ok = false;
		if (__syncthreads_or(!ok) && t == 0)
			expk_fail(status, IBP_ERR_CORRUPT);
	}
}

/* ------------------------------------------------------- decode: rANS */

/* Mode-2 blocks (docs/CODECS.md "rANS block"; CPU twin src/exp/exp_rans.c).
 * A CUDA block of 256 threads takes up to 8 segments of one chunk: all its
 * threads build the 4096-slot decode table from the validated frequencies
 * in shared memory, then warp w decodes segment 8q + w with lanes 0..15, one
 * rANS lane each (element i of the segment at lane i % 16, so the 16 lanes
 * of a step store 16 consecutive elements). Every block validates what it
 * reads; the q = 0 block also checks the block's padding. */
#define EXPK_RANS_WARPS (EXPK_THREADS / 32)

/* The rANS header checks of ibpi_exp_rans_parse and parse_header (after
 * expk_header_common_ok); false = corrupt. */
static __device__ bool expk_rans_header_ok(const uint8_t *h, uint64_t avail, const expk_batch &b, uint64_t n,
					   expf_rans_layout_t *R)
{
	uint64_t block = expf_ld64(h + EXPF_OFF_BLOCK);
	return expf_rans_header_rule(h, avail, &b.s, n, expf_ld64(h + EXPF_OFF_ESC), expf_ld64(h + EXPF_OFF_STATIC),
				     block, R) == EXPF_RANS_HDR_OK &&
	       block <= avail;
}

/* Segment g of a rANS block, by one warp (lanes 0..15 decode); false = corrupt. */
static __device__ bool expk_rans_segment(const uint8_t *blk, const expf_rans_layout_t &R, const expk_batch &b,
					 uint64_t len, uint64_t nseg, uint64_t streams, uint64_t g, const uint32_t *tab,
					 uint8_t *out)
{
	const uint32_t lane = threadIdx.x & 31u, es = b.s.esize;
	const uint32_t j = lane & (EXPF_RANS_LANES - 1u);
	const bool active = lane < EXPF_RANS_LANES;
	const uint8_t *dir = blk + R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * g;
	const uint64_t gbase = g << EXPF_RANS_SEG_LOG2, m = len - gbase < EXPF_RANS_SEG ? len - gbase : EXPF_RANS_SEG;
	const uint64_t e = expf_ld64(dir), prev = g ? expf_ld64(dir - EXPF_RANS_DIR_BYTES) : 0;
	uint32_t ln = active ? (uint32_t)dir[8 + 2 * j] | (uint32_t)dir[9 + 2 * j] << 8 : 0u;
	bool ok = !active || (ln >= 4 && ln % 2 == 0 && ln <= 4 + 2 * expf_rans_lane_syms(m, j));
	/* the lanes' start offsets: an exclusive scan of the lengths */
	uint32_t inc = ln;
	for (uint32_t o = 1; o < 32; o <<= 1) {
		uint32_t v = __shfl_up_sync(0xffffffffu, inc, o);
		inc += lane >= o ? v : 0u;
	}
	uint64_t sum = __shfl_sync(0xffffffffu, inc, 31);
	ok = __all_sync(0xffffffffu, ok) && e >= prev && e <= streams && e - prev == sum &&
	     (g + 1 < nseg || e == streams);
	if (!ok)
		return lane != 0; /* one report */
	if (!active)
		return true;
	/* the directory's sums keep [p, end) within the block's streams */
	const uint8_t *p = blk + R.static_bytes + prev + (inc - ln), *end = p + ln;
	uint32_t x = expf_ld32(p);
	p += 4;
	ok = x >= EXPF_RANS_L;
	const uint8_t *rest = blk + R.off_rest + gbase * R.rest_bytes;
	out += gbase * es;
	for (uint64_t i = j; ok && i < m; i += EXPF_RANS_LANES) {
		uint32_t te = tab[x & (EXPF_RANS_SCALE - 1u)];
		x = expf_rans_step(x, te);
		if (x < EXPF_RANS_L) {
			if (p < end) {
				x = x << 16 | (uint32_t)p[0] | (uint32_t)p[1] << 8;
				p += 2;
			} else {
				ok = false; /* a stream ran short */
			}
		}
		uint32_t r = R.rest_bytes == 1 ? rest[i]
					       : (uint32_t)rest[3 * i] | (uint32_t)rest[3 * i + 1] << 8 |
						 (uint32_t)rest[3 * i + 2] << 16;
		uint32_t v = expf_rans_join(te & 0xffu, r, b.dt);
		if (es == 4)
			((uint32_t *)out)[i] = v;
		else
			((uint16_t *)out)[i] = (uint16_t)v;
	}
	/* every lane ends in the initial state with its stream consumed */
	return ok && x == EXPF_RANS_L && p == end;
}

__global__ void __launch_bounds__(EXPK_THREADS)
expk_rans_decode(const uint8_t *src, uint64_t src_bytes, const uint64_t *offsets, const uint64_t *sizes,
		 expk_batch b, uint64_t bpc, uint8_t *dst, int32_t *status)
{
	__shared__ uint32_t tab[EXPF_RANS_SCALE]; /* symbol | (f - 1) << 8 | (slot - cum) << 20 */
	__shared__ uint32_t cum[256];
	const uint32_t t = threadIdx.x, warp = t >> 5;
	const uint32_t es = b.s.esize;
	expf_rans_layout_t R;
	for (uint64_t gid = blockIdx.x; gid < b.nchunks * bpc; gid += gridDim.x) {
		uint64_t c = gid / bpc, q = gid % bpc, len = chunk_len(b, c);
		uint64_t nseg = (len + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2;
		if (q * EXPK_RANS_WARPS >= nseg)
			continue;
		uint64_t off = offsets[c], avail = sizes[c];
		/* expk_decode reports what is wrong before the mode is known */
		if ((off & 127u) || (((uintptr_t)src) & 127u) || off > src_bytes || avail > src_bytes - off)
			continue;
		const uint8_t *blk = src + off;
		if (!expk_header_common_ok(blk, avail, b, len) || blk[EXPF_OFF_MODE] != EXPF_MODE_RANS)
			continue;
		if (!expk_rans_header_ok(blk, avail, b, len, &R)) {
			if (t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
			continue;
		}
		const uint64_t streams = expf_ld64(blk + EXPF_OFF_ESC);
		/* frequencies: symbol t's, each >= 1, summing to the scale */
		const uint8_t *map = blk + EXPF_OFF_RANS_MAP;
		uint32_t present = (map[t >> 3] >> (t & 7)) & 1u, rank = 0;
		for (uint32_t i = 0; i < (t >> 3); i++)
			rank += (uint32_t)__popc(map[i]);
		rank += (uint32_t)__popc(map[t >> 3] & ((1u << (t & 7)) - 1u));
		uint32_t f = present ? (uint32_t)blk[EXPF_OFF_RANS_FREQ + 2 * rank] |
					       (uint32_t)blk[EXPF_OFF_RANS_FREQ + 2 * rank + 1] << 8
				     : 0u;
		/* inclusive scan of the frequencies (each < 2^16: no overflow) */
		cum[t] = f;
		expk_scan<uint32_t, 256>(cum, t);
		bool fok = !(present && f == 0) && cum[255] == EXPF_RANS_SCALE;
		if (!__syncthreads_and(fok)) {
			if (t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
			continue;
		}
		/* slot s: the symbol k with cum[k] - f[k] <= s < cum[k] (the
		 * first inclusive sum above s; zero frequencies share it) */
		for (uint32_t s = t; s < EXPF_RANS_SCALE; s += EXPK_THREADS) {
			uint32_t lo = 0, hi = 255;
			while (lo < hi) {
				uint32_t mid = (lo + hi) >> 1;
				if (cum[mid] > s)
					hi = mid;
				else
					lo = mid + 1;
			}
			uint32_t fk = cum[lo] - (lo ? cum[lo - 1] : 0u), ck = cum[lo] - fk;
			tab[s] = expf_rans_entry(lo, fk, s - ck);
		}
		__syncthreads();
		if (q == 0) {
			/* the canonical padding, as ibpi_exp_rans_decode checks it */
			uint64_t fend = EXPF_OFF_RANS_FREQ + 2 * R.nsym;
			bool ok = expk_zero(blk, fend, R.off_dir);
			uint64_t pend = R.off_dir + (uint64_t)EXPF_RANS_DIR_BYTES * R.nseg;
			ok &= expk_zero(blk, pend, R.off_rest);
			pend = R.off_rest + len * R.rest_bytes;
			ok &= expk_zero(blk, pend, R.static_bytes);
			pend = R.static_bytes + streams;
			ok &= expk_zero(blk, pend, expf_align(pend, EXPF_ALIGN));
			if (!ok && t == 0)
				expk_fail(status, IBP_ERR_CORRUPT);
		}
		/* warp w: segment 8q + w (uniform in the warp) */
		uint64_t g = q * EXPK_RANS_WARPS + warp;
		if (g < nseg && !expk_rans_segment(blk, R, b, len, nseg, streams, g, tab, dst + c * b.chunk * es))
			expk_fail(status, IBP_ERR_CORRUPT);
		__syncthreads(); /* the table is rebuilt for the next chunk */
	}
}

/* ------------------------------------------------------------- host side */

static ibp_status_t expk_batch_of(ibp_dtype_t dt, uint64_t n, uint64_t chunk, expk_batch *b, const char *fn)
{
	if (!expf_shape_of((uint32_t)dt, &b->s))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dtype %s is not bf16, f16 or f32", fn, ibp_dtype_name(dt));
	if (n > EXPF_MAX_ELEMS || chunk == 0 || chunk > EXPF_MAX_ELEMS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: n %llu / chunk_elems %llu out of range", fn,
				(unsigned long long)n, (unsigned long long)chunk);
	b->n = n;
	b->chunk = chunk;
	b->nchunks = (n + chunk - 1) / chunk;
	b->gpc = (chunk + EXPF_GROUP - 1) >> EXPF_GROUP_LOG2;
	b->spc = ((chunk < n ? chunk : n) + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2;
	b->dt = (uint32_t)dt;
	return IBP_OK;
}

static uint64_t expk_bound(const expf_shape_t *s, uint64_t n)
{
	expf_layout_t L;
	expf_layout_of(s, n, &L);
	uint64_t coded = expf_coded_bytes(&L, n), raw = expf_raw_bytes(s, n);
	return coded > raw ? coded : raw;
}

extern "C" ibp_status_t ibp_exp_encode_workspace_cuda(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
							uint64_t *bytes)
{
	expk_batch b = {};
	expk_ws w;
	if (!bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_workspace_cuda: bytes is NULL");
	IBP_TRY(expk_batch_of(dt, n, chunk_elems, &b, "exp_encode_workspace_cuda"));
	expk_ws_layout(n, b.nchunks, b.nchunks * b.gpc, b.nchunks * b.spc, &w);
	*bytes = w.total;
	return IBP_OK;
}

extern "C" ibp_status_t ibp_exp_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
					    const ibp_exp_opts_t *opts, void *d_dst, uint64_t dst_stride,
					    uint64_t *d_sizes, void *d_workspace, uint64_t workspace_bytes, void *stream)
{
	expk_batch b = {};
	expk_ws w;
	ibp_exp_opts_t def;
	IBP_TRY(IBPI_OPTS_CHECK(opts, "exp_encode_cuda", "ibp_exp_opts_t"));
	if (!opts) {
		ibp_exp_opts_default(&def);
		opts = &def;
	}
	IBP_TRY(expk_batch_of(dt, n, chunk_elems, &b, "exp_encode_cuda"));
	if (n && (!d_src || !d_dst || !d_sizes || !d_workspace))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_cuda: NULL device pointer");
	if ((dst_stride & 127u) || dst_stride < expk_bound(&b.s, chunk_elems < n ? chunk_elems : n) ||
	    ((uintptr_t)d_dst & 127u) || ((uintptr_t)d_workspace & 127u) || ((uintptr_t)d_src % b.s.esize))
		return ibpi_fail(IBP_ERR_INVALID_ARG,
				"exp_encode_cuda: dst_stride %llu must be a multiple of 128 >= the chunk bound; "
				"d_dst/d_workspace 128-aligned, d_src element-aligned",
				(unsigned long long)dst_stride);
	expk_ws_layout(n, b.nchunks, b.nchunks * b.gpc, b.nchunks * b.spc, &w);
	if (workspace_bytes < w.total)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "exp_encode_cuda: workspace %llu < %llu bytes",
				(unsigned long long)workspace_bytes, (unsigned long long)w.total);
	IBP_TRY(ibp_cuda_require_device());
	if (b.nchunks == 0)
		return IBP_OK;
	cudaStream_t st = (cudaStream_t)stream;
	uint8_t *ws = (uint8_t *)d_workspace;
	uint8_t *tables = ws + w.tables_off;
	uint64_t *counts = (uint64_t *)(ws + w.counts_off);
	uint64_t groups = b.nchunks * b.gpc;
	unsigned grid_g = 1, grid_c = 1;
	IBP_TRY(ibp_cuda_grid(groups, &grid_g));
	IBP_TRY(ibp_cuda_grid(b.nchunks, &grid_c));
	const uint8_t *src = (const uint8_t *)d_src;
	uint8_t *dst = (uint8_t *)d_dst;
	const unsigned tgrid = (unsigned)((b.nchunks + 255) / 256 < 65535 ? (b.nchunks + 255) / 256 : 65535);
	const bool rans = opts->table_mode == IBP_EXP_TABLE_RANS;
	uint16_t *freq = (uint16_t *)(ws + w.freq_off), *lens = (uint16_t *)(ws + w.lens_off);
	uint64_t *info = (uint64_t *)(ws + w.info_off);

	/* the table of each chunk, into the workspace */
	if (opts->table_mode == IBP_EXP_TABLE_SIGMA && opts->sigma == 0.0) {
		double *part = (double *)(ws + w.part_off);
		uint64_t *nonfin = (uint64_t *)(ws + w.nonfin_off);
		IBP_CUDA_LAUNCH("launch expk_ms_groups", expk_ms_groups, grid_g, EXPK_THREADS, 0, st, src,
				b, part, nonfin);
		IBP_CUDA_LAUNCH("launch expk_ms_chunks", expk_ms_chunks, grid_c, EXPK_SCAN_THREADS, 0, st,
				b, part, nonfin, tables);
	} else if (opts->table_mode == IBP_EXP_TABLE_HISTOGRAM) {
		unsigned long long *hist = (unsigned long long *)(ws + w.hist_off);
		IBP_CUDA_CHECK(cudaMemsetAsync(hist, 0, 256 * 8 * b.nchunks, st));
		IBP_CUDA_LAUNCH("launch expk_hist", expk_hist, grid_g, EXPK_THREADS, 0, st, src, b, false, hist);
		IBP_CUDA_LAUNCH("launch expk_hist_table", expk_hist_table, tgrid, 256, 0, st, b, hist, tables);
	} else if (rans) {
		/* the fallback's table and limit, and the frequencies, from the symbol counts */
		unsigned long long *hist = (unsigned long long *)(ws + w.hist_off);
		IBP_CUDA_CHECK(cudaMemsetAsync(hist, 0, 256 * 8 * b.nchunks, st));
		IBP_CUDA_LAUNCH("launch expk_hist", expk_hist, grid_g, EXPK_THREADS, 0, st, src, b, true, hist);
		IBP_CUDA_LAUNCH("launch expk_rans_tables", expk_rans_tables, tgrid, 256, 0, st, b, hist, tables, freq,
				info);
	} else {
		ibp_exp_table_t t;
		if (opts->table_mode == IBP_EXP_TABLE_SIGMA) {
			IBP_TRY(ibp_exp_table_from_sigma(dt, opts->sigma, &t));
		} else if (opts->table_mode == IBP_EXP_TABLE_GIVEN) {
			t = opts->table;
			uint32_t fmax = (1u << b.s.ebits) - 1u;
			for (int k = 0; k < 7; k++)
				if (t.field[k] > fmax || (k && t.field[k] <= t.field[k - 1]))
					return ibpi_fail(IBP_ERR_INVALID_ARG,
							"exp_encode_cuda: given table must hold 7 strictly ascending fields <= %u",
							fmax);
		} else {
			return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_encode_cuda: unknown table mode %d", (int)opts->table_mode);
		}
		uint64_t t0 = 0;
		for (int k = 0; k < 7; k++)
			t0 |= (uint64_t)t.field[k] << (8 * k);
		IBP_CUDA_LAUNCH("launch expk_fill_table", expk_fill_table, tgrid, 256, 0, st, b.nchunks, t0, tables);
	}
	IBP_CUDA_LAUNCH("launch expk_enc_groups", expk_enc_groups, grid_g, EXPK_THREADS, 0, st, src, b, dst,
			dst_stride, tables, ws + w.esc_off, counts);
	IBP_CUDA_LAUNCH("launch expk_scan_chunks", expk_scan_chunks, grid_c, EXPK_SCAN_THREADS, 0, st, b,
			dst, dst_stride, tables, rans ? (uint32_t)IBP_EXP_TABLE_HISTOGRAM : (uint32_t)opts->table_mode,
			counts, d_sizes);
	IBP_CUDA_LAUNCH("launch expk_finish_groups", expk_finish_groups, grid_g, EXPK_THREADS, 0, st, src,
			b, dst, dst_stride, ws + w.esc_off, counts);
	if (!rans)
		return IBP_OK;
	/* rANS: lanes into the scratch (the escape stage, now free), then the
	 * chunks whose rANS block is smaller overwritten with it */
	const uint64_t bq = (b.spc + EXPK_THREADS / EXPF_RANS_LANES - 1) / (EXPK_THREADS / EXPF_RANS_LANES);
	unsigned grid_q = 1, grid_s = 1;
	IBP_TRY(ibp_cuda_grid(b.nchunks * bq, &grid_q));
	IBP_TRY(ibp_cuda_grid(b.nchunks * b.spc, &grid_s));
	IBP_CUDA_LAUNCH("launch expk_rans_enc", expk_rans_enc, grid_q, EXPK_THREADS, 0, st, src, b, bq,
			(const uint16_t *)freq, (const uint64_t *)info, ws + w.esc_off, lens);
	IBP_CUDA_LAUNCH("launch expk_rans_size", expk_rans_size, grid_c, EXPK_SCAN_THREADS, 0, st, b,
			(const uint16_t *)freq, info, (const uint16_t *)lens, dst, dst_stride, d_sizes);
	IBP_CUDA_LAUNCH("launch expk_rans_place", expk_rans_place, grid_s, EXPK_THREADS, 0, st, src, b,
			(const uint64_t *)info, (const uint16_t *)lens, (const uint8_t *)(ws + w.esc_off), dst,
			dst_stride);
	return IBP_OK;
}

extern "C" ibp_status_t ibp_exp_decode_cuda(const void *d_src, uint64_t src_bytes, const uint64_t *d_offsets,
					    const uint64_t *d_sizes, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
					    void *d_dst, int32_t *d_status, void *stream)
{
	expk_batch b = {};
	IBP_TRY(expk_batch_of(dt, n, chunk_elems, &b, "exp_decode_cuda"));
	if (!d_status || (n && (!d_src || !d_offsets || !d_sizes || !d_dst)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_cuda: NULL device pointer");
	if ((uintptr_t)d_dst % b.s.esize)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "exp_decode_cuda: d_dst is not element-aligned");
	IBP_TRY(ibp_cuda_require_device());
	cudaStream_t st = (cudaStream_t)stream;
	IBP_CUDA_CHECK(cudaMemsetAsync(d_status, 0, sizeof(int32_t), st));
	if (b.nchunks == 0)
		return IBP_OK;
	unsigned grid = 1;
	IBP_TRY(ibp_cuda_grid(b.nchunks * b.gpc, &grid));
	IBP_CUDA_LAUNCH("launch expk_decode", expk_decode, grid, EXPK_THREADS, 0, st,
			(const uint8_t *)d_src, src_bytes, d_offsets, d_sizes, b, (uint8_t *)d_dst, d_status);
	/* rANS blocks (expk_decode leaves them): 8 segments per CUDA block */
	uint64_t one = chunk_elems < n ? chunk_elems : n;
	uint64_t bpc = (((one + EXPF_RANS_SEG - 1) >> EXPF_RANS_SEG_LOG2) + EXPK_RANS_WARPS - 1) / EXPK_RANS_WARPS;
	IBP_TRY(ibp_cuda_grid(b.nchunks * bpc, &grid));
	IBP_CUDA_LAUNCH("launch expk_rans_decode", expk_rans_decode, grid, EXPK_THREADS, 0, st,
			(const uint8_t *)d_src, src_bytes, d_offsets, d_sizes, b, bpc, (uint8_t *)d_dst, d_status);
	return IBP_OK;
}

/* Deprecated alias (docs/API.md "Names"). */
extern "C" ibp_status_t ibp_exp_cuda_encode_workspace(ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems, uint64_t *bytes)
{
	return ibp_exp_encode_workspace_cuda(dt, n, chunk_elems, bytes);
}
