/* harness.cpp - runs the IBP CUDA kernels (their kernel sections, cut out
 * by gen.py) on the host emulator (emu.h) and compares every result with the
 * CPU codec: training counters/masks, encode (sizes + write, warp and block
 * kernels, shared and global stage), gather (warp/block kernels, full,
 * partial and no staging, request order and scatter, out-of-range ids),
 * corrupt stores, single-row stores in exactly sized allocations (ASan
 * catches any read outside a row's extent), inplace stores with the extent
 * kernel, and codecs with Xvals. Run through run.sh; exit status 0 = all
 * equal. Arguments: [seed [row_bytes]]; DBG=1 dumps mismatching rows. */
#include <cstdio>
#include <tuple>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

#include "ibp_device.cuh"
extern "C" {
#include "bitpack/train_internal.h"
ibp_status_t ibp_decode_row_ext(const ibp_codec_t *c, const uint8_t *src, uint64_t src_len, uint8_t flags,
				unsigned cluster, uint8_t *dst, uint64_t *extent);
}








#include "k_gather.inc"
#include "k_encode.inc"
#include "k_train.inc"

static int failures = 0;
#define CHECK(c, ...)                                                          \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			if (++failures > 20)                                   \
				exit(1);                                       \
		}                                                              \
	} while (0)
#define OK(x)                                                                            \
	do {                                                                             \
		ibp_status_t s_ = (x);                                                   \
		if (s_ != IBP_OK) {                                                      \
			fprintf(stderr, "%s: %d %s\n", #x, (int)s_, ibp_last_error());   \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static uint64_t rs = 12345;
static uint64_t rnd()
{
	uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static double unif() { return (double)(rnd() >> 11) / 9007199254740992.0; }

struct HDC {
	IbpDevCodec d;
	std::vector<uint8_t> m, b, x;
	std::vector<uint64_t> tso;
};

static void make_hdc(const ibp_codec_t *h, HDC &x)
{
	IbpDevCodec &d = x.d;
	d.R = ibp_codec_row_bytes(h);
	d.C = ibp_codec_chunk_bytes(h);
	d.W = 8 * d.C;
	d.D = ibp_codec_nchunks(h);
	d.K = ibp_codec_nclusters(h);
	d.L = d.D > 1 ? 64 - __builtin_clzll(d.D - 1) : 1;
	d.ntiles = (d.D + 31) / 32;
	d.last_bytes = d.R - (d.D - 1) * d.C;
	d.bitmap_bytes = (d.D + 7) / 8;
	d.max_extent = ibp_cuda_max_extent(h);
	uint64_t KD = (uint64_t)d.K * d.D, nt1 = d.ntiles + 1;
	x.m.assign(ibp_codec_mask(h, 0), ibp_codec_mask(h, 0) + KD * d.C);
	x.b.assign(ibp_codec_bitval(h, 0), ibp_codec_bitval(h, 0) + KD * d.C);
	x.x.assign(ibp_codec_xval(h, 0), ibp_codec_xval(h, 0) + KD * d.C);
	d.xmask = 0;
	for (unsigned k = 0; k < d.K; k++)
		if (memcmp(ibp_codec_xval(h, k), ibp_codec_bitval(h, k), d.D * d.C))
			d.xmask |= 1ull << k;
	x.tso.assign(d.K * nt1, 0);
	for (unsigned k = 0; k < d.K; k++) {
		const uint8_t *m = ibp_codec_mask(h, k);
		uint64_t off = 0;
		for (uint64_t j = 0; j < d.D; j++) {
			if (j % 32 == 0)
				x.tso[k * nt1 + j / 32] = off;
			uint64_t w = 0;
			for (unsigned i = 0; i < d.C; i++)
				w |= (uint64_t)m[j * d.C + i] << (8 * i);
			off += d.W - __builtin_popcountll(w);
		}
		x.tso[k * nt1 + d.ntiles] = off;
		if (off != ibp_codec_static_bits(h, k)) {
			fprintf(stderr, "tso mismatch\n");
			exit(1);
		}
	}
	d.m = x.m.data();
	d.b = x.b.data();
	d.x = x.x.data();
	d.tso = x.tso.data();
}

struct Case {
	uint64_t R, D, n;
	unsigned C, K;
	std::vector<uint8_t> masks, bitvals, xvals, rows, enc, flags, cl;
	std::vector<uint64_t> off;
	ibp_codec_t *codec = nullptr;
};

static void make_case(Case &t, uint64_t R, unsigned C, unsigned K, uint64_t n)
{
	t.R = R; t.C = C; t.K = K; t.n = n; t.D = (R + C - 1) / C;
	uint64_t DC = t.D * C;
	t.masks.assign(K * DC, 0);
	t.bitvals.assign(K * DC, 0);
	for (unsigned k = 0; k < K; k++) {
		double dens = 0.3 + 0.65 * unif();
		for (uint64_t i = 0; i < DC; i++) {
			uint8_t m = 0;
			for (int b = 0; b < 8; b++)
				if (unif() < dens)
					m |= 1 << b;
			if (i >= R)
				m = 0xff; /* padding invariant */
			t.masks[k * DC + i] = m;
			t.bitvals[k * DC + i] = i >= R ? 0 : (uint8_t)(rnd() & m);
		}
	}
	/* Xvals on about half of the clusters, at ~30% of the chunk positions */
	t.xvals = t.bitvals;
	for (unsigned k = 0; k < K; k++) {
		if (rnd() % 2)
			continue;
		for (uint64_t j = 0; j < t.D; j++) {
			if (unif() >= 0.3)
				continue;
			for (unsigned q = 0; q < C; q++) {
				uint64_t i = k * DC + j * C + q;
				t.xvals[i] = j * C + q >= R ? 0 : (uint8_t)(rnd() & t.masks[i]);
			}
		}
	}
	OK(ibp_codec_create_ex(R, C, K, t.masks.data(), t.bitvals.data(), t.xvals.data(), &t.codec));
	static const double rates[5] = { 0.0, 0.001, 0.02, 0.2, 1.0 };
	t.rows.assign(n * R, 0);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *row = &t.rows[i * R];
		for (uint64_t k = 0; k < R; k++)
			row[k] = (uint8_t)rnd();
		unsigned k = rnd() % K;
		double p = rates[(i + rnd() % 2) % 5];
		for (uint64_t j = 0; j < t.D; j++) {
			const uint8_t *want = nullptr;
			if (p < 1.0 && unif() >= p)
				want = &t.bitvals[k * DC]; /* a match */
			else if (p < 1.0 && unif() < 0.5)
				want = &t.xvals[k * DC];   /* an Xval hit where enabled */
			if (want)
				for (unsigned q = 0; q < C && j * C + q < R; q++) {
					uint64_t x = j * C + q;
					row[x] = (row[x] & ~t.masks[k * DC + x]) | want[x];
				}
		}
	}
	t.enc.assign(n * R, 0);
	t.off.assign(n + 1, 0);
	t.flags.assign(n, 0);
	t.cl.assign(n, 0);
	OK(ibp_encode_batch(t.codec, t.rows.data(), n, t.enc.data(), n * R, t.off.data(), t.flags.data(),
			    t.cl.data(), 1));
}

static uint64_t modes[4];

template <unsigned C, int NW>
static void run_encode(Case &t, const HDC &h, int gstage)
{
	const uint64_t n = t.n;
	const unsigned gpb = NW == 1 ? 3 : 1, threads = NW == 1 ? 32 * gpb : 32 * NW, grid = 2;
	std::vector<uint64_t> sizes(n + 1, 0xdead), off(n + 1);
	std::vector<uint8_t> fl(n, 0xee), cl(n, 0xee);
	IbpEncArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = h.d;
	a.rows = t.rows.data();
	a.nrows = n;
	a.sizes = sizes.data();
	a.flags = fl.data();
	a.clusters = cl.data();
	emu_launch(ibp_enc_sizes_kernel<C, NW>, grid, 1, threads, 0, a);
	CHECK(sizes[n] == 0, "sizes[n]");
	uint64_t s = 0;
	for (uint64_t i = 0; i <= n; i++) {
		off[i] = s;
		s += sizes[i];
	}
	for (uint64_t i = 0; i <= n; i++)
		CHECK(off[i] == t.off[i], "enc R %llu C %u K %u NW %d: offset %llu: %llu vs CPU %llu",
		      (unsigned long long)t.R, C, t.K, NW, (unsigned long long)i, (unsigned long long)off[i],
		      (unsigned long long)t.off[i]);
	CHECK(fl == t.flags, "flags");
	CHECK(cl == t.cl, "clusters");
	for (uint64_t i = 0; i < n; i++)
		modes[t.flags[i] & 3]++;
	/* write, into an exactly sized destination */
	uint8_t *dst = (uint8_t *)malloc(off[n] ? off[n] : 1);
	memset(dst, 0xEE, off[n]);
	a.offsets = t.off.data();
	a.flags = t.flags.data();
	a.clusters = t.K > 1 ? t.cl.data() : nullptr;
	a.dst = dst;
	a.dst_cap = off[n];
	a.stage_words = (((t.R + 3) / 4 + 4) + 3) / 4 * 4;
	std::vector<uint32_t> gs;
	size_t smem = 0;
	if (gstage) {
		gs.assign((size_t)grid * gpb * a.stage_words, 0xCDCDCDCD);
		a.gstage = gs.data();
	} else {
		smem = (size_t)gpb * a.stage_words * 4;
	}
	emu_launch(ibp_enc_write_kernel<C, NW>, grid, 1, threads, smem, a);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t len = t.off[i + 1] - t.off[i];
		if (memcmp(dst + t.off[i], &t.enc[t.off[i]], len)) {
			uint64_t at = 0;
			while (dst[t.off[i] + at] == t.enc[t.off[i] + at])
				at++;
			CHECK(0, "enc R %llu C %u K %u NW %d gstage %d: row %llu mode %u len %llu: byte %llu %02x vs %02x",
			      (unsigned long long)t.R, C, t.K, NW, gstage, (unsigned long long)i, t.flags[i],
			      (unsigned long long)len, (unsigned long long)at, dst[t.off[i] + at], t.enc[t.off[i] + at]);
		}
	}
	free(dst);
}

/* CPU verdict */
static ibp_status_t cpu_row(const Case &t, const uint8_t *payload, const uint64_t *offsets, const uint8_t *flags,
			    const uint8_t *cls, uint64_t nrows, int64_t id, uint8_t *dst)
{
	const uint64_t R = t.R;
	if (id < 0 || (uint64_t)id >= nrows) {
		memset(dst, 0, R);
		return IBP_ERR_OUT_OF_RANGE;
	}
	uint64_t o = offsets ? offsets[id] : (uint64_t)id * R;
	uint64_t len = offsets ? offsets[id + 1] - o : R, ext = 0;
	static const uint8_t none[1] = { 0 };
	ibp_status_t st = ibp_decode_row_ext(t.codec, len ? payload + o : none, len, flags[id], cls ? cls[id] : 0,
					     dst, &ext);
	if (st == IBP_OK && offsets && ext != len)
		st = IBP_ERR_CORRUPT;
	if (st != IBP_OK)
		memset(dst, 0, R);
	return st;
}

/* gather from a store of the given arrays; payload copied to an exact allocation */
template <unsigned C, int NW>
static void run_gather(const char *what, const Case &t, const HDC &h, const uint8_t *payload_src,
		       uint64_t payload_bytes, const uint64_t *offsets, const uint8_t *flags, const uint8_t *cls,
		       uint64_t nrows, uint32_t stage, unsigned gpb, unsigned grid, int scatter, uint64_t n)
{
	const uint64_t R = t.R;
	uint8_t *payload = (uint8_t *)malloc(payload_bytes ? payload_bytes : 1);
	memcpy(payload, payload_src, payload_bytes);
	std::vector<uint64_t> lens;
	if (!offsets) {
		lens.assign(nrows, 0x5555);
		emu_launch(&ibp_extent_kernel<C>, 2, 1, 64, 0, h.d, (const uint8_t *)payload, R, flags, cls, nrows,
			   lens.data());
	}
	std::vector<int64_t> ids(n), orows(n);
	for (uint64_t k = 0; k < n; k++) {
		ids[k] = nrows ? (int64_t)(rnd() % nrows) : 0;
		orows[k] = (int64_t)k;
	}
	if (n > 4) {
		ids[rnd() % n] = -1;
		ids[rnd() % n] = (int64_t)nrows;
		ids[rnd() % n] = INT64_MIN;
	}
	if (scatter)
		for (uint64_t k = n - 1; k > 0; k--)
			std::swap(orows[k], orows[rnd() % (k + 1)]);
	uint8_t *out = (uint8_t *)malloc(n * R);
	memset(out, 0xA5, n * R);
	std::vector<int32_t> st(n, 0x7f);
	unsigned long long nerr = 0;
	IbpGatherArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = h.d;
	a.payload = payload;
	a.payload_bytes = payload_bytes;
	a.offsets = offsets;
	a.lens = offsets ? nullptr : lens.data();
	a.flags = flags;
	a.clusters = cls;
	a.nrows = nrows;
	a.stride = R;
	a.exact = offsets != nullptr;
	a.ids = ids.data();
	a.n = n;
	a.out = out;
	a.out_rows = scatter ? orows.data() : nullptr;
	a.status = st.data();
	a.nerr = &nerr;
	a.stage_bytes = stage;
	size_t smem = NW == 1 ? (size_t)gpb * 2 * stage : 2 * (size_t)stage + 8 * IbpGroup<NW>::SCRATCH;
	emu_launch(ibp_gather_kernel<C, NW>, grid, 1, NW == 1 ? 32 * gpb : 32 * NW, smem, a);
	std::vector<uint8_t> ref(R);
	uint64_t bad = 0;
	for (uint64_t k = 0; k < n; k++) {
		ibp_status_t want = cpu_row(t, payload, offsets, flags, cls, nrows, ids[k], ref.data());
		bad += want != IBP_OK;
		CHECK(st[k] == want, "%s C %u NW %d stage %u: request %llu id %lld status %d vs CPU %d", what, C, NW,
		      stage, (unsigned long long)k, (long long)ids[k], st[k], (int)want);
		const uint8_t *got = out + orows[k] * R;
		if (memcmp(got, ref.data(), R)) {
			uint64_t at = 0;
			while (got[at] == ref[at])
				at++;
			if (getenv("DBG")) {
				fprintf(stderr, "flags %02x len %llu cl %u:", flags[ids[k]], (unsigned long long)(offsets ? offsets[ids[k]+1]-offsets[ids[k]] : 0), cls ? cls[ids[k]] : 0);
				for (uint64_t q = 0; q < R; q++) fprintf(stderr, " %02x", got[q]);
				fprintf(stderr, "\n");
			}
			CHECK(0, "%s C %u NW %d stage %u: request %llu id %lld (st %d): byte %llu %02x vs %02x", what, C,
			      NW, stage, (unsigned long long)k, (long long)ids[k], st[k], (unsigned long long)at,
			      got[at], ref[at]);
		}
	}
	CHECK(nerr == bad, "%s: nerr %llu vs %llu", what, nerr, (unsigned long long)bad);
	free(out);
	free(payload);
}

template <unsigned C>
static void all_for_case(Case &t, int corrupt)
{
	HDC h;
	make_hdc(t.codec, h);
	if (!corrupt) {
		run_encode<C, 1>(t, h, 0);
		run_encode<C, 8>(t, h, rnd() % 2);
	}
	const uint8_t *cls = t.K > 1 ? t.cl.data() : nullptr;
	const uint32_t full = (uint32_t)((t.R + 32 + 15) / 16 * 16);
	const uint32_t small = (uint32_t)((t.R / 2 + 32 + 15) / 16 * 16); /* long rows go direct */
	char what[80];
	snprintf(what, sizeof(what), "%sR %llu K %u", corrupt ? "corrupt " : "", (unsigned long long)t.R, t.K);
	const uint64_t n = 2 * t.n + 5;
	run_gather<C, 1>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, full, 3, 2, 1, n);
	run_gather<C, 1>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, small, 2, 1, 0, n);
	run_gather<C, 8>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, full, 1, 2, 0, n);
	run_gather<C, 8>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, 0, 1, 2, 1, n);
	/* strict bounds: single-row stores in exact allocations */
	for (uint64_t i = 0; i < t.n; i += 1 + t.n / 6) {
		uint64_t o0 = t.off[i], len = t.off[i + 1] - o0;
		uint64_t one[2] = { 0, len };
		uint8_t f = t.flags[i], c = t.cl[i];
		run_gather<C, 1>(what, t, h, &t.enc[o0], len, one, &f, cls ? &c : nullptr, 1, full, 1, 1, 0, 3);
		run_gather<C, 8>(what, t, h, &t.enc[o0], len, one, &f, cls ? &c : nullptr, 1, 0, 1, 1, 0, 3);
	}
	/* inplace */
	if (!corrupt) {
		std::vector<uint8_t> fixed(t.n * t.R, 0);
		std::vector<uint8_t> fl = t.flags;
		for (uint64_t i = 0; i < t.n; i++) {
			memcpy(&fixed[i * t.R], &t.enc[t.off[i]], t.off[i + 1] - t.off[i]);
			if (i % 7 == 3)
				fl[i] ^= 1 + rnd() % 3;
			if (i % 5 == 2 && t.off[i + 1] - t.off[i] < t.R)
				fixed[i * t.R + t.R - 1] = 0x5c;
		}
		run_gather<C, 1>("inplace", t, h, fixed.data(), t.n * t.R, nullptr, fl.data(), cls, t.n, full, 2, 2, 1, n);
		run_gather<C, 8>("inplace", t, h, fixed.data(), t.n * t.R, nullptr, fl.data(), cls, t.n, small, 1, 1, 0, n);
	}
}

static void corrupt_case(Case &t)
{
	for (uint64_t i = 0; i < t.n; i++) {
		switch (rnd() % 8) {
		case 0: t.flags[i] = (uint8_t)rnd(); break;
		case 1: t.flags[i] = (uint8_t)((t.flags[i] + 1 + rnd() % 3) & 3); break;
		case 2: t.cl[i] = (uint8_t)(rnd() % (t.K + 2)); break;
		case 3: {
			uint64_t len = t.off[i + 1] - t.off[i];
			for (int q = 0; len && q < 3; q++)
				t.enc[t.off[i] + rnd() % len] ^= (uint8_t)(1 + rnd() % 255);
			break;
		}
		case 4:
			if (i + 1 < t.n) {
				uint64_t lo = t.off[i], hi = t.off[i + 2];
				t.off[i + 1] = lo + rnd() % (hi - lo + 1);
			}
			break;
		default: break;
		}
	}
}

static void train_check()
{
	static const uint64_t Rs[] = { 1, 3, 4, 17, 64, 1001 };
	static const uint64_t Ns[] = { 0, 1, 5, 255, 256, 600 };
	for (uint64_t R : Rs)
		for (uint64_t n : Ns) {
			std::vector<uint8_t> rows(n * R);
			for (auto &b : rows)
				b = (uint8_t)(rnd() & rnd());
			std::vector<uint64_t> cc(8 * R), cg(8 * R, 0);
			OK(ibp_train_count(rows.data(), R, nullptr, n, 1, cc.data()));
			if (n) {
				uint64_t bx = ((R + 3) / 4 + 63) / 64, by = std::min<uint64_t>(n, 3);
				uint64_t rps = (n + by - 1) / by;
				by = (n + rps - 1) / rps;
				emu_launch(ibp_count_kernel, (unsigned)bx, (unsigned)by, 64, 0, (const uint8_t *)rows.data(), R,
					   (const uint64_t *)nullptr, n, rps, (unsigned long long *)cg.data());
			}
			CHECK(cg == cc, "counts R %llu n %llu", (unsigned long long)R, (unsigned long long)n);
			for (double T : { 0.5, 0.7, 0.73, 0.8, 1.0 }) {
				std::vector<uint8_t> mc(2 * R), mg(2 * R, 0x11);
				ibp_train_mask(cc.data(), n, R, T, mc.data(), mc.data() + R);
				uint64_t need = ibp_train_need(T, n);
				emu_launch(ibp_mask_kernel, 2, 1, 32, 0, (const unsigned long long *)cc.data(), n, R, need,
					   mg.data(), mg.data() + R);
				CHECK(mg == mc, "mask R %llu n %llu T %g", (unsigned long long)R, (unsigned long long)n, T);
			}
		}
}

int main(int argc, char **argv)
{
	unsigned long long seed = argc > 1 ? strtoull(argv[1], 0, 0) : 1;
	rs = seed;
	std::vector<uint64_t> Rs = { 1, 2, 3, 7, 8, 9, 31, 33, 64, 65, 100, 255, 256, 257, 1000, 1025, 4096, 4097, 9000 };
	if (argc > 2)
		Rs = { strtoull(argv[2], 0, 0) };
	train_check();
	fprintf(stderr, "train ok (%d failures)\n", failures);
	for (uint64_t R : Rs)
		for (unsigned C : { 1u, 2u, 4u, 8u })
			for (unsigned K : { 1u, 3u })
				for (int corrupt = 0; corrupt < 2; corrupt++) {
					fprintf(stderr, "R %llu C %u K %u corrupt %d\n", (unsigned long long)R, C, K, corrupt);
					Case t;
					uint64_t n = std::max<uint64_t>(5, std::min<uint64_t>(24, 60000 / R));
					make_case(t, R, C, K, n);
					if (corrupt)
						corrupt_case(t);
					switch (C) {
					case 1: all_for_case<1>(t, corrupt); break;
					case 2: all_for_case<2>(t, corrupt); break;
					case 4: all_for_case<4>(t, corrupt); break;
					default: all_for_case<8>(t, corrupt); break;
					}
					ibp_codec_free(t.codec);
				}
	printf("modes: raw %llu clean %llu bitmap %llu list %llu\n", (unsigned long long)modes[0],
	       (unsigned long long)modes[1], (unsigned long long)modes[2], (unsigned long long)modes[3]);
	printf("%s (%d failures)\n", failures ? "FAILED" : "ALL OK", failures);
	return failures != 0;
}
