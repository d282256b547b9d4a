/* harness.cpp - runs the IBP CUDA kernels (their kernel sections, cut out
 * by gen.py) on the host emulator (emu.h) and compares every result with the
 * CPU codec: training counters/masks, encode (sizes + write, warp and block
 * kernels, shared and global stage), gather (warp/block kernels, full,
 * partial and no staging, request order and scatter, out-of-range ids),
 * corrupt stores, single-row stores in exactly sized device allocations at
 * every start skew 0..15 (the emulator reports any read outside a row's
 * extent), inplace stores with the extent kernel, and codecs with Xvals.
 * Every buffer a kernel touches is device memory of the emulator (bounds
 * and races checked). Run through run.sh; exit status 0 = all equal.
 * Usage: harness SUITE [--seed S] [--quick] [--rows R,...] [--defect N]
 *        [--preempt M] [--data DIR] [--tmp DIR]; SUITE: ibp, train, api (the
 *        public API, host code included), exp, fp8, codecs, all, pcie (the
 *        host-memory requests of the gather kernels per row, over the real
 *        sample datasets in --data: a table, and the targets checked).
 * DBG=1 dumps mismatching rows. */
#include <cstdio>
#include <tuple>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

#include "ibp_device.cuh"
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include "ibp/container.h"
#include "ibp/npy.h"
#include "ibp/exp.h"
#include "ibp/store.h"
#include "ibp/unstable.h"
#include "cuda/ibp_gather_staged.h"
extern "C" {
#include "bitpack/train_internal.h"
ibp_status_t ibpi_decode_row_ext(const ibp_codec_t *c, const uint8_t *src, uint64_t src_len, uint8_t flags,
				unsigned cluster, uint8_t *dst, uint64_t *extent);
}

#include "k_gather.inc"
#include "k_encode.inc"
#include "k_train.inc"
#include "k_slab.inc"
#include "../../cache/slab_cudahost.c"
extern "C" {
#include "../../cache/cache_cuda.h"
}

#include "harness_check.h" /* CHECK, OK, failures, rnd (seeded from --seed in main) */

/* A device buffer of the emulator (redzones on both sides; `skew`: its
 * start mod 16), filled with garbage. */
template <class T> struct DBuf {
	T *p = nullptr;
	size_t n = 0;
	DBuf() {}
	DBuf(size_t n_, const char *name, unsigned skew = 0) { init(n_, name, skew); }
	DBuf(const std::vector<T> &v, const char *name, unsigned skew = 0)
	{
		init(v.size(), name, skew);
		if (!v.empty())
			memcpy(p, v.data(), v.size() * sizeof(T));
	}
	void init(size_t n_, const char *name, unsigned skew)
	{
		n = n_;
		p = (T *)emu_dev_alloc(n * sizeof(T), skew, name);
		memset((void *)p, 0xA7, n * sizeof(T));
	}
	~DBuf() { emu_dev_free(p); }
	DBuf(const DBuf &) = delete;
	DBuf &operator=(const DBuf &) = delete;
	std::vector<T> vec() const { return std::vector<T>(p, p + n); }
};
static double unif() { return (double)(rnd() >> 11) / 9007199254740992.0; }

struct HDC {
	IbpDevCodec d;
	std::vector<uint8_t> m, b, x;
	std::vector<uint64_t> tso, ewp;
	DBuf<uint8_t> dm, db, dx;
	DBuf<uint64_t> dtso, dewp;
};

/* The device codec as ibp_cuda_codec_create lays it out (the same
 * ibp_dev_codec_layout), in emulated device buffers. */
static void make_hdc(const ibp_codec_t *h, HDC &x)
{
	IbpDevCodec &d = x.d;
	uint64_t *tso = nullptr, *ewp = nullptr;
	if (ibp_dev_codec_layout(h, d, &tso, &ewp) != IBP_OK) {
		fprintf(stderr, "ibp_dev_codec_layout failed: %s\n", ibp_last_error());
		exit(1);
	}
	const uint64_t KD = (uint64_t)d.K * d.D, nt1 = d.ntiles + 1;
	x.tso.assign(tso, tso + d.K * nt1);
	x.ewp.assign(ewp, ewp + d.K * ((d.D + 63) / 64) * ibp_ew_planes(d.C));
	free(tso);
	free(ewp);
	x.m.assign(ibp_codec_mask(h, 0), ibp_codec_mask(h, 0) + KD * d.C);
	x.b.assign(ibp_codec_bitval(h, 0), ibp_codec_bitval(h, 0) + KD * d.C);
	x.x.assign(ibp_codec_xval(h, 0), ibp_codec_xval(h, 0) + KD * d.C);
	d.xmask = 0;
	for (unsigned k = 0; k < d.K; k++)
		if (memcmp(ibp_codec_xval(h, k), ibp_codec_bitval(h, k), d.D * d.C))
			d.xmask |= 1ull << k;
	x.dm.init(x.m.size(), "codec masks", 0);
	x.db.init(x.b.size(), "codec bitvals", 0);
	x.dx.init(x.x.size(), "codec xvals", 0);
	x.dtso.init(x.tso.size(), "codec tile offsets", 0);
	x.dewp.init(x.ewp.size(), "codec width planes", 0);
	memcpy(x.dm.p, x.m.data(), x.m.size());
	memcpy(x.db.p, x.b.data(), x.b.size());
	memcpy(x.dx.p, x.x.data(), x.x.size());
	memcpy(x.dtso.p, x.tso.data(), x.tso.size() * 8);
	memcpy(x.dewp.p, x.ewp.data(), x.ewp.size() * 8);
	d.m = x.dm.p;
	d.b = x.db.p;
	d.x = x.dx.p;
	d.tso = x.dtso.p;
	d.ewp = x.dewp.p;
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
static int quick;
static unsigned sk() { return (unsigned)(rnd() % 16); }

template <unsigned C, int NW>
static void run_encode(Case &t, const HDC &h, int gstage)
{
	const uint64_t n = t.n;
	const unsigned gpb = NW == 1 ? 3 : 1, threads = NW == 1 ? 32 * gpb : 32 * NW, grid = 2;
	DBuf<uint8_t> rows(t.rows, "rows to encode", (unsigned)(rnd() % 16));
	DBuf<uint64_t> sizes(n + 1, "sizes");
	DBuf<uint8_t> fl(n, "flags (sizes pass)"), cl(n, "clusters (sizes pass)");
	std::vector<uint64_t> off(n + 1);
	IbpEncArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = h.d;
	a.rows = rows.p;
	a.nrows = n;
	a.sizes = sizes.p;
	a.flags = fl.p;
	a.clusters = cl.p;
	emu_launch(ibp_enc_sizes_kernel<C, NW>, grid, 1, threads, 0, a);
	CHECK(sizes.p[n] == 0, "sizes[n]");
	uint64_t s = 0;
	for (uint64_t i = 0; i <= n; i++) {
		off[i] = s;
		s += sizes.p[i];
	}
	for (uint64_t i = 0; i <= n; i++)
		CHECK(off[i] == t.off[i], "enc R %llu C %u K %u NW %d: offset %llu: %llu vs CPU %llu",
		      (unsigned long long)t.R, C, t.K, NW, (unsigned long long)i, (unsigned long long)off[i],
		      (unsigned long long)t.off[i]);
	CHECK(fl.vec() == t.flags, "flags");
	CHECK(cl.vec() == t.cl, "clusters");
	for (uint64_t i = 0; i < n; i++)
		modes[t.flags[i] & 3]++;
	/* write, into an exactly sized destination */
	DBuf<uint8_t> dst(off[n], "encoded rows (dst)", (unsigned)(rnd() % 16));
	DBuf<uint64_t> doff(t.off, "offsets");
	DBuf<uint8_t> dfl(t.flags, "flags"), dcl(t.cl, "clusters");
	a.offsets = doff.p;
	a.flags = dfl.p;
	a.clusters = t.K > 1 ? dcl.p : nullptr;
	a.dst = dst.p;
	a.dst_cap = off[n];
	a.stage_words = (((t.R + 3) / 4 + 4) + 3) / 4 * 4;
	DBuf<uint32_t> gs;
	size_t smem = 0;
	if (gstage) {
		gs.init((size_t)grid * gpb * a.stage_words, "global stage", 0);
		a.gstage = gs.p;
	} else {
		smem = (size_t)gpb * a.stage_words * 4;
	}
	emu_launch(ibp_enc_write_kernel<C, NW>, grid, 1, threads, smem, a);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t len = t.off[i + 1] - t.off[i];
		if (memcmp(dst.p + t.off[i], &t.enc[t.off[i]], len)) {
			uint64_t at = 0;
			while (dst.p[t.off[i] + at] == t.enc[t.off[i] + at])
				at++;
			CHECK(0, "enc R %llu C %u K %u NW %d gstage %d: row %llu mode %u len %llu: byte %llu %02x vs %02x",
			      (unsigned long long)t.R, C, t.K, NW, gstage, (unsigned long long)i, t.flags[i],
			      (unsigned long long)len, (unsigned long long)at, dst.p[t.off[i] + at], t.enc[t.off[i] + at]);
		}
	}
}

/* The write pass with arrays that disagree with the rows (issue 10 item 5):
 * RAW rows claimed BITMAP/LIST (their fields run past the extent and the
 * group's stage), other modes, other clusters, shrunk extents. The kernel
 * must stay inside its stage and dst (the emulator checks), and write every
 * byte of every extent: a row is either a valid encoding of its row under
 * the given flags/cluster (the CPU decodes it back, using all of its
 * bytes) or zeros; rows left as the sizes pass said are the CPU's bytes. */
template <unsigned C, int NW>
static void run_encode_bad(Case &t, const HDC &h, int gstage)
{
	const uint64_t n = t.n;
	const unsigned gpb = NW == 1 ? 3 : 1, threads = NW == 1 ? 32 * gpb : 32 * NW, grid = 2;
	std::vector<uint64_t> off = t.off;
	std::vector<uint8_t> fl = t.flags, cl = t.cl;
	std::vector<int> same(n, 1);
	for (uint64_t i = 0; i < n; i++) {
		if ((t.flags[i] & 3) == IBP_ROW_RAW && rnd() % 2) {
			fl[i] = (uint8_t)(IBP_ROW_BITMAP + rnd() % 2);
			same[i] = 0;
		} else if (rnd() % 4 == 0) {
			switch (rnd() % 3) {
			case 0: fl[i] = (uint8_t)((fl[i] + 1 + rnd() % 3) & 3); break;
			case 1: cl[i] = (uint8_t)((cl[i] + 1) % t.K); break;
			default:
				if (off[i + 1] > off[i])
					off[i + 1] -= 1 + rnd() % (off[i + 1] - off[i]); /* the next row grows */
				break;
			}
			same[i] = 0;
			if (i + 1 < n)
				same[i + 1] = 0;
		}
	}
	for (uint64_t i = 0; i < n; i++)
		same[i] &= fl[i] == t.flags[i] && cl[i] == t.cl[i] && off[i] == t.off[i] && off[i + 1] == t.off[i + 1];
	DBuf<uint8_t> rows(t.rows, "rows to encode", (unsigned)(rnd() % 16));
	DBuf<uint8_t> dst(off[n], "encoded rows (dst)", (unsigned)(rnd() % 16));
	memset(dst.p, 0xEE, off[n]);
	DBuf<uint64_t> doff(off, "offsets");
	DBuf<uint8_t> dfl(fl, "flags"), dcl(cl, "clusters");
	IbpEncArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = h.d;
	a.rows = rows.p;
	a.nrows = n;
	a.offsets = doff.p;
	a.flags = dfl.p;
	a.clusters = t.K > 1 ? dcl.p : nullptr;
	a.dst = dst.p;
	a.dst_cap = off[n];
	a.stage_words = (((t.R + 3) / 4 + 4) + 3) / 4 * 4;
	DBuf<uint32_t> gs;
	size_t smem = 0;
	if (gstage) {
		gs.init((size_t)grid * gpb * a.stage_words, "global stage", 0);
		a.gstage = gs.p;
	} else {
		smem = (size_t)gpb * a.stage_words * 4;
	}
	emu_launch(ibp_enc_write_kernel<C, NW>, grid, 1, threads, smem, a);
	std::vector<uint8_t> back(t.R);
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t len = off[i + 1] - off[i];
		const uint8_t *b = dst.p + off[i];
		if (same[i]) {
			CHECK(!memcmp(b, &t.enc[off[i]], len), "bad-arrays encode C %u NW %d: untouched row %llu differs", C, NW,
			      (unsigned long long)i);
			continue;
		}
		bool zero = true;
		for (uint64_t q = 0; q < len; q++)
			zero &= b[q] == 0;
		if (zero)
			continue;
		uint64_t ext = 0;
		ibp_status_t st = ibpi_decode_row_ext(t.codec, b, len, fl[i], t.K > 1 ? cl[i] : 0, back.data(), &ext);
		CHECK(st == IBP_OK && ext == len && !memcmp(back.data(), &t.rows[i * t.R], t.R),
		      "bad-arrays encode R %llu C %u NW %d gstage %d: row %llu (flags %u->%u, cl %u->%u, len %llu->%llu) is "
		      "neither zeros nor a valid encoding (st %d ext %llu)",
		      (unsigned long long)t.R, C, NW, gstage, (unsigned long long)i, t.flags[i], fl[i], t.cl[i], cl[i],
		      (unsigned long long)(t.off[i + 1] - t.off[i]), (unsigned long long)len, (int)st, (unsigned long long)ext);
	}
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
	ibp_status_t st = ibpi_decode_row_ext(t.codec, len ? payload + o : none, len, flags[id], cls ? cls[id] : 0,
					     dst, &ext);
	if (st == IBP_OK && offsets && ext != len)
		st = IBP_ERR_CORRUPT;
	if (st != IBP_OK)
		memset(dst, 0, R);
	return st;
}

/* gather from a store of the given arrays; payload copied to an exact
 * device allocation that starts at `skew` mod 16 */
template <unsigned C, int NW>
static void run_gather(const char *what, const Case &t, const HDC &h, const uint8_t *payload_src,
		       uint64_t payload_bytes, const uint64_t *offsets_h, const uint8_t *flags_h, const uint8_t *cls_h,
		       uint64_t nrows, uint32_t stage, unsigned gpb, unsigned grid, int scatter, uint64_t n,
		       unsigned skew)
{
	const uint64_t R = t.R;
	DBuf<uint8_t> payload(payload_bytes, "payload", skew);
	memcpy(payload.p, payload_src, payload_bytes);
	DBuf<uint64_t> offsets;
	if (offsets_h) {
		offsets.init(nrows + 1, "offsets", 0);
		memcpy(offsets.p, offsets_h, (nrows + 1) * 8);
	}
	DBuf<uint8_t> flags(nrows, "flags"), cls;
	memcpy(flags.p, flags_h, nrows);
	if (cls_h) {
		cls.init(nrows, "clusters", 0);
		memcpy(cls.p, cls_h, nrows);
	}
	DBuf<uint64_t> lens;
	if (!offsets_h) {
		lens.init(nrows, "inplace lengths", 0);
		emu_launch(&ibp_extent_kernel<C>, 2, 1, 64, 0, h.d, (const uint8_t *)payload.p, R,
			   (const uint8_t *)flags.p, (const uint8_t *)cls.p, nrows, lens.p);
	}
	DBuf<int64_t> ids(n, "ids"), orows(n, "out rows");
	for (uint64_t k = 0; k < n; k++) {
		ids.p[k] = nrows ? (int64_t)(rnd() % nrows) : 0;
		orows.p[k] = (int64_t)k;
	}
	if (n > 4) {
		ids.p[rnd() % n] = -1;
		ids.p[rnd() % n] = (int64_t)nrows;
		ids.p[rnd() % n] = INT64_MIN;
	}
	if (scatter)
		for (uint64_t k = n - 1; k > 0; k--)
			std::swap(orows.p[k], orows.p[rnd() % (k + 1)]);
	DBuf<uint8_t> out(n * R, "gather out");
	DBuf<int32_t> st(n, "status");
	DBuf<unsigned long long> nerr(1, "error counter");
	nerr.p[0] = 0;
	IbpGatherArgs a;
	memset(&a, 0, sizeof(a));
	a.cd = h.d;
	a.payload = payload.p;
	a.payload_bytes = payload_bytes;
	a.offsets = offsets.p;
	a.lens = offsets_h ? nullptr : lens.p;
	a.flags = flags.p;
	a.clusters = cls.p;
	a.nrows = nrows;
	a.stride = R;
	a.exact = offsets_h != nullptr;
	a.ids = ids.p;
	a.n = n;
	a.out = out.p;
	a.out_rows = scatter ? orows.p : nullptr;
	a.status = st.p;
	a.nerr = nerr.p;
	a.stage_bytes = stage;
	a.nbuf = 2 + (unsigned)(rnd() % 2); /* one or two rows in flight per group */
	const size_t smem = ibp_gather_smem(gpb, NW, stage, a.nbuf);
	emu_launch(ibp_gather_kernel<C, NW>, grid, 1, NW == 1 ? 32 * gpb : 32 * NW, smem, a);
	std::vector<uint8_t> ref(R);
	uint64_t bad = 0;
	for (uint64_t k = 0; k < n; k++) {
		ibp_status_t want = cpu_row(t, payload.p, offsets_h, flags_h, cls_h, nrows, ids.p[k], ref.data());
		bad += want != IBP_OK;
		CHECK(st.p[k] == want, "%s C %u NW %d stage %u skew %u: request %llu id %lld status %d vs CPU %d", what, C,
		      NW, stage, skew, (unsigned long long)k, (long long)ids.p[k], st.p[k], (int)want);
		const uint8_t *got = out.p + orows.p[k] * R;
		if (memcmp(got, ref.data(), R)) {
			uint64_t at = 0;
			while (got[at] == ref[at])
				at++;
			if (getenv("DBG")) {
				fprintf(stderr, "flags %02x cl %u:", flags_h[ids.p[k]], cls_h ? cls_h[ids.p[k]] : 0);
				for (uint64_t q = 0; q < R; q++)
					fprintf(stderr, " %02x", got[q]);
				fprintf(stderr, "\n");
			}
			CHECK(0, "%s C %u NW %d stage %u skew %u: request %llu id %lld (st %d): byte %llu %02x vs %02x", what,
			      C, NW, stage, skew, (unsigned long long)k, (long long)ids.p[k], st.p[k],
			      (unsigned long long)at, got[at], ref[at]);
		}
	}
	CHECK(nerr.p[0] == bad, "%s: nerr %llu vs %llu", what, nerr.p[0], (unsigned long long)bad);
}

template <unsigned C>
static void all_for_case(Case &t, int corrupt)
{
	HDC h;
	make_hdc(t.codec, h);
	if (!corrupt) {
		run_encode<C, 1>(t, h, 0);
		run_encode<C, 8>(t, h, rnd() % 2);
		run_encode_bad<C, 1>(t, h, rnd() % 2);
		run_encode_bad<C, 8>(t, h, rnd() % 2);
	}
	const uint8_t *cls = t.K > 1 ? t.cl.data() : nullptr;
	const uint32_t full = (uint32_t)((t.R + 32 + 15) / 16 * 16);
	const uint32_t small = (uint32_t)((t.R / 2 + 32 + 15) / 16 * 16); /* long rows go direct */
	char what[80];
	snprintf(what, sizeof(what), "%sR %llu K %u", corrupt ? "corrupt " : "", (unsigned long long)t.R, t.K);
	const uint64_t n = 2 * t.n + 5;
	run_gather<C, 1>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, full, 3, 2, 1, n, sk());
	run_gather<C, 1>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, small, 2, 1, 0, n, sk());
	run_gather<C, 8>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, full, 1, 2, 0, n, sk());
	run_gather<C, 8>(what, t, h, t.enc.data(), t.off[t.n], t.off.data(), t.flags.data(), cls, t.n, 0, 1, 2, 1, n, sk());
	/* strict bounds: single-row stores in exact allocations */
	static unsigned skew = 0; /* every skew 0..15 in turn */
	for (uint64_t i = 0; i < t.n; i += 1 + t.n / (quick ? 3 : 8)) {
		uint64_t o0 = t.off[i], len = t.off[i + 1] - o0;
		uint64_t one[2] = { 0, len };
		uint8_t f = t.flags[i], c = t.cl[i];
		run_gather<C, 1>(what, t, h, &t.enc[o0], len, one, &f, cls ? &c : nullptr, 1, full, 1, 1, 0, 3, skew);
		run_gather<C, 8>(what, t, h, &t.enc[o0], len, one, &f, cls ? &c : nullptr, 1, 0, 1, 1, 0, 3, skew);
		run_gather<C, 8>(what, t, h, &t.enc[o0], len, one, &f, cls ? &c : nullptr, 1, full, 1, 1, 0, 3, 15 - skew);
		skew = (skew + 1) % 16;
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
		run_gather<C, 1>("inplace", t, h, fixed.data(), t.n * t.R, nullptr, fl.data(), cls, t.n, full, 2, 2, 1, n, sk());
		run_gather<C, 8>("inplace", t, h, fixed.data(), t.n * t.R, nullptr, fl.data(), cls, t.n, small, 1, 1, 0, n, sk());
	}
}

/* A store of 2^32 + 40 rows whose payload is over 4 GiB (sparse memory):
 * the requested rows lie past 2^32 both in id and in byte offset, so 32-bit
 * index or offset arithmetic anywhere in the gather shows. Also empty rows,
 * a row with a huge extent and ids out of range. */
template <unsigned C>
static void big_store_case()
{
	Case t;
	make_case(t, 257, C, 3, 24);
	HDC h;
	make_hdc(t.codec, h);
	const uint64_t n = t.n, base = (1ull << 32) + 8, N = (1ull << 32) + 40;
	const uint64_t PB = (1ull << 32) + 4096 + 5, P = PB + t.off[n];
	uint64_t *offs = (uint64_t *)emu_dev_alloc_sparse((N + 1) * 8, "big offsets");
	uint8_t *fl = (uint8_t *)emu_dev_alloc_sparse(N, "big flags");
	uint8_t *cl = (uint8_t *)emu_dev_alloc_sparse(N, "big clusters");
	uint8_t *pay = (uint8_t *)emu_dev_alloc_sparse(P, "big payload");
	for (uint64_t i = base; i <= N; i++)
		offs[i] = PB + t.off[std::min(i - base, n)];
	for (uint64_t k = 0; k < n; k++) {
		fl[base + k] = t.flags[k];
		cl[base + k] = t.cl[k];
	}
	memcpy(pay + PB, t.enc.data(), t.off[n]);
	for (int v = 0; v < 2; v++) {
		const uint64_t m = n + 5;
		DBuf<int64_t> ids(m, "ids");
		for (uint64_t k = 0; k < n; k++)
			ids.p[k] = (int64_t)(base + rnd() % n);
		ids.p[n] = 5;                   /* empty RAW row: corrupt */
		ids.p[n + 1] = (int64_t)base - 1; /* extent of 4 GiB: corrupt */
		ids.p[n + 2] = (int64_t)N - 1;  /* empty: corrupt */
		ids.p[n + 3] = (int64_t)N;      /* out of range */
		ids.p[n + 4] = (int64_t)(base + n - 1);
		DBuf<uint8_t> out(m * t.R, "gather out");
		DBuf<int32_t> st(m, "status");
		IbpGatherArgs a;
		memset(&a, 0, sizeof(a));
		a.cd = h.d;
		a.payload = pay;
		a.payload_bytes = P;
		a.offsets = offs;
		a.flags = fl;
		a.clusters = cl;
		a.nrows = N;
		a.stride = t.R;
		a.exact = 1;
		a.ids = ids.p;
		a.n = m;
		a.out = out.p;
		a.status = st.p;
		const uint32_t stage = (uint32_t)((t.R + 32 + 15) / 16 * 16);
		a.nbuf = 3 - (unsigned)v;
		if (v == 0) {
			a.stage_bytes = stage;
			emu_launch(ibp_gather_kernel<C, 1>, 2, 1, 64, ibp_gather_smem(2, 1, stage, a.nbuf), a);
		} else {
			emu_launch(ibp_gather_kernel<C, 8>, 1, 1, 256, ibp_gather_smem(1, 8, 0, a.nbuf), a);
		}
		std::vector<uint8_t> ref(t.R);
		for (uint64_t k = 0; k < m; k++) {
			const int64_t id = ids.p[k];
			ibp_status_t want;
			if (id >= (int64_t)base && id < (int64_t)(base + n)) {
				want = cpu_row(t, t.enc.data(), t.off.data(), t.flags.data(), t.cl.data(), n, id - (int64_t)base,
					       ref.data());
			} else {
				want = id >= (int64_t)N ? IBP_ERR_OUT_OF_RANGE : IBP_ERR_CORRUPT;
				memset(ref.data(), 0, t.R);
			}
			CHECK(st.p[k] == want && !memcmp(out.p + k * t.R, ref.data(), t.R),
			      "big store (%s) C %u: request %llu id %lld: status %d vs %d, or bytes differ",
			      v ? "block, direct" : "warp, staged", C, (unsigned long long)k, (long long)id, st.p[k], (int)want);
		}
	}
	emu_dev_free(offs);
	emu_dev_free(fl);
	emu_dev_free(cl);
	emu_dev_free(pay);
	ibp_codec_free(t.codec);
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
			if (quick && n == 600 && R > 17)
				continue;
			std::vector<uint8_t> rows(n * R);
			for (auto &b : rows)
				b = (uint8_t)(rnd() & rnd());
			std::vector<uint64_t> cc(8 * R);
			DBuf<uint8_t> drows(rows, "training rows", (unsigned)(rnd() % 16));
			DBuf<uint64_t> cg(8 * R, "counts");
			memset(cg.p, 0, 8 * R * 8);
			OK(ibp_train_count(rows.data(), R, nullptr, n, 1, cc.data()));
			if (n) {
				uint64_t bx = ((R + 3) / 4 + 63) / 64, by = std::min<uint64_t>(n, 3);
				uint64_t rps = (n + by - 1) / by;
				by = (n + rps - 1) / rps;
				emu_launch(ibp_count_kernel, (unsigned)bx, (unsigned)by, 64, 0, (const uint8_t *)drows.p, R,
					   (const uint64_t *)nullptr, n, rps, (unsigned long long *)cg.p);
			}
			CHECK(cg.vec() == cc, "counts R %llu n %llu", (unsigned long long)R, (unsigned long long)n);
			for (double T : { 0.5, 0.7, 0.73, 0.8, 1.0 }) {
				std::vector<uint8_t> mc(2 * R);
				DBuf<uint8_t> mg(2 * R, "mask and bitval");
				ibp_train_mask(cc.data(), n, R, T, mc.data(), mc.data() + R);
				uint64_t need = ibpi_train_need(T, n);
				emu_launch(ibp_mask_kernel, 2, 1, 32, 0, (const unsigned long long *)cg.p, n, R, need, mg.p,
					   mg.p + R);
				CHECK(mg.vec() == mc, "mask R %llu n %llu T %g", (unsigned long long)R, (unsigned long long)n, T);
			}
		}
}

static void ibp_suite(const std::vector<uint64_t> &Rs)
{
	for (uint64_t R : Rs)
		for (unsigned C : { 1u, 2u, 4u, 8u })
			for (unsigned K : { 1u, 3u })
				for (int corrupt = 0; corrupt < 2; corrupt++) {
					fprintf(stderr, "R %llu C %u K %u corrupt %d\n", (unsigned long long)R, C, K, corrupt);
					Case t;
					uint64_t n = std::max<uint64_t>(5, std::min<uint64_t>(quick ? 12 : 24, (quick ? 20000 : 60000) / R));
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
}

/* ibpi_gather_staged_cuda (the slab cache's hits): rows copied into a
 * stage at a stride, with their lengths and codec bytes, a decoded row
 * (RAW), a row one byte too long, one with bad flag bits and bad indices;
 * the kernel's outputs and statuses equal the CPU decoder's and the host
 * twin's (ibpi_hstore_gather_staged). */
static void api_staged(const Case &t, const ibp_cuda_store_t *s)
{
	const uint64_t n = t.n, R = t.R, ns = n + 3;
	const uint8_t *cls = t.K > 1 ? t.cl.data() : nullptr;
	uint64_t maxlen = R + 1;
	for (uint64_t i = 0; i < n; i++)
		maxlen = std::max<uint64_t>(maxlen, t.off[i + 1] - t.off[i] + 1);
	const uint64_t stride = (maxlen + 15) / 16 * 16 + 16 * (rnd() % 2);
	std::vector<uint8_t> hst(ns * stride, 0x3c);
	std::vector<uint32_t> hl(ns), hm(ns);
	for (uint64_t r = 0; r < n; r++) {
		hl[r] = (uint32_t)(t.off[r + 1] - t.off[r]);
		hm[r] = t.flags[r] | (uint32_t)(cls ? cls[r] : 0) << 8;
		memcpy(&hst[r * stride], &t.enc[t.off[r]], hl[r]);
	}
	memcpy(&hst[n * stride], t.rows.data(), R); /* a decoded row: RAW, R bytes */
	hl[n] = (uint32_t)R;
	hm[n] = IBP_ROW_RAW;
	for (uint64_t r = n + 1; r < ns; r++) { /* row 0 too long by a byte; row 0 with bad flag bits */
		memcpy(&hst[r * stride], &t.enc[0], hl[0]);
		hl[r] = hl[0] + (r == n + 1);
		hm[r] = hm[0] | (r == n + 2 ? 4u : 0u);
	}
	const uint64_t m = 2 * ns + 2;
	DBuf<uint8_t> stage(hst, "stage", sk());
	DBuf<uint32_t> lens(hl, "stage lens"), meta(hm, "stage meta");
	DBuf<int64_t> idx(m, "stage idx"), orows(m, "out rows");
	std::vector<int64_t> hidx(m), hrows(m);
	for (uint64_t k = 0; k < m; k++) {
		hidx[k] = k < ns ? (int64_t)k : (int64_t)(rnd() % ns);
		hrows[k] = (int64_t)k;
	}
	hidx[m - 2] = (int64_t)ns;
	hidx[m - 1] = -1;
	for (uint64_t k = m - 1; k > 0; k--)
		std::swap(hrows[k], hrows[rnd() % (k + 1)]);
	memcpy(idx.p, hidx.data(), m * 8);
	memcpy(orows.p, hrows.data(), m * 8);
	DBuf<uint8_t> out(m * R, "staged out");
	DBuf<int32_t> st(m, "staged status");
	OK(ibpi_gather_staged_cuda(s, stage.p, stride, ns, lens.p, meta.p, idx.p, m, out.p, orows.p, st.p, nullptr));
	/* the host twin on a host store of the same codec */
	ibp_cuda_store_desc_t d;
	memset(&d, 0, sizeof(d));
	d.codec = t.codec;
	d.payload = t.enc.data();
	d.payload_bytes = t.off[n];
	d.offsets = t.off.data();
	d.flags = t.flags.data();
	d.clusters = cls;
	d.nrows = n;
	d.payload_kind = IBP_CUDA_PAYLOAD_MAPPED;
	ibp_hstore_t *h = nullptr;
	OK(ibpi_hstore_create(&d, &h));
	std::vector<uint8_t> hout(m * R, 0xA7);
	std::vector<int32_t> hstat(m, 99);
	OK(ibpi_hstore_gather_staged(h, hst.data(), stride, ns, hl.data(), hm.data(), hidx.data(), m, hout.data(),
				    hrows.data(), hstat.data()));
	ibpi_hstore_free(h);
	std::vector<uint8_t> ref(R);
	for (uint64_t k = 0; k < m; k++) {
		const int64_t r = hidx[k];
		ibp_status_t want;
		if (r < 0 || (uint64_t)r >= ns) {
			want = IBP_ERR_OUT_OF_RANGE;
			memset(ref.data(), 0, R);
		} else if ((uint64_t)r < n) {
			want = cpu_row(t, t.enc.data(), t.off.data(), t.flags.data(), cls, n, r, ref.data());
		} else if ((uint64_t)r == n) {
			want = IBP_OK;
			memcpy(ref.data(), t.rows.data(), R);
		} else {
			want = IBP_ERR_CORRUPT;
			memset(ref.data(), 0, R);
		}
		CHECK(st.p[k] == want && hstat[k] == want, "api staged R %llu: request %llu (stage row %lld) status %d, "
		      "host twin %d, want %d", (unsigned long long)R, (unsigned long long)k, (long long)r, st.p[k], hstat[k],
		      (int)want);
		CHECK(!memcmp(out.p + hrows[k] * R, ref.data(), R), "api staged R %llu: request %llu (stage row %lld)",
		      (unsigned long long)R, (unsigned long long)k, (long long)r);
		CHECK(!memcmp(&hout[hrows[k] * R], ref.data(), R), "api staged R %llu: host twin, request %llu",
		      (unsigned long long)R, (unsigned long long)k);
	}
	/* idx NULL: stage row k to output row k */
	DBuf<uint8_t> out2(ns * R, "staged out (identity)");
	OK(ibpi_gather_staged_cuda(s, stage.p, stride, ns, lens.p, meta.p, nullptr, ns, out2.p, nullptr, nullptr, nullptr));
	for (uint64_t r = 0; r < n; r++) {
		cpu_row(t, t.enc.data(), t.off.data(), t.flags.data(), cls, n, (int64_t)r, ref.data());
		CHECK(!memcmp(out2.p + r * R, ref.data(), R), "api staged R %llu identity: row %llu", (unsigned long long)R,
		      (unsigned long long)r);
	}
	CHECK(ibpi_gather_staged_cuda(s, stage.p, 0, ns, lens.p, meta.p, nullptr, ns, out2.p, nullptr, nullptr, nullptr) ==
		      IBP_ERR_INVALID_ARG, "api staged: stride 0 accepted");
}

/* ibp_cuda_store_errors twice at once: call B (after more failed rows) runs
 * between call A's exchange and A's copy of the count (the stub's copy
 * hook). Each must get its own count, none lost or doubled. */
static ibp_cuda_store_t *errs_store;
static uint64_t errs_b_count, errs_b_bad;
static int errs_armed;

static void errs_fail_rows(ibp_cuda_store_t *s, uint64_t k)
{
	DBuf<int64_t> ids(k, "ids");
	DBuf<uint8_t> out(k * ibp_cuda_store_row_bytes(s), "out");
	for (uint64_t i = 0; i < k; i++)
		ids.p[i] = -1 - (int64_t)i; /* out of range: a failed row each */
	OK(ibp_gather_cuda(s, ids.p, k, out.p, nullptr, nullptr, nullptr));
}

static void errs_hook(void *, const void *, size_t n, int kind)
{
	if (!errs_armed || n != 8 || kind != cudaMemcpyDeviceToHost)
		return;
	errs_armed = 0;
	errs_fail_rows(errs_store, errs_b_bad);
	OK(ibp_cuda_store_errors(errs_store, &errs_b_count, nullptr));
}

static void api_errors_interleaved(ibp_cuda_store_t *s)
{
	uint64_t a = 0;
	OK(ibp_cuda_store_errors(s, &a, nullptr)); /* start from zero */
	errs_fail_rows(s, 2);
	errs_store = s, errs_b_bad = 3, errs_b_count = ~0ull, errs_armed = 1;
	emu_stub_copy_hook = errs_hook;
	OK(ibp_cuda_store_errors(s, &a, nullptr));
	emu_stub_copy_hook = nullptr;
	CHECK(!errs_armed, "api store_errors interleaved: the hook did not run");
	CHECK(a == 2 && errs_b_count == 3, "api store_errors interleaved: counts %llu and %llu, want 2 and 3",
	      (unsigned long long)a, (unsigned long long)errs_b_count);
	OK(ibp_cuda_store_errors(s, &a, nullptr));
	CHECK(a == 0, "api store_errors interleaved: %llu left", (unsigned long long)a);
}

/* The public GPU API, host code included (launch configuration, stores,
 * workspaces, error handling), against the H100 runtime stub. */
static void api_case(uint64_t R, unsigned C, unsigned K)
{
	Case t;
	const uint64_t n = std::max<uint64_t>(5, std::min<uint64_t>(20, 40000 / R));
	make_case(t, R, C, K, n);
	fprintf(stderr, "api R %llu C %u K %u\n", (unsigned long long)R, C, K);
	ibp_cuda_codec_t *dc = nullptr;
	OK(ibp_cuda_codec_create(t.codec, nullptr, &dc));
	/* encode, both passes and the scan, as ibp_encode_batch */
	DBuf<uint8_t> rows(t.rows, "rows", sk());
	uint64_t ws = 0;
	OK(ibp_encode_workspace_cuda(dc, n, &ws));
	DBuf<uint8_t> wsb(ws, "encode workspace"), dst(n * R, "encode dst"), fl(n, "flags"), cl(n, "clusters");
	DBuf<uint64_t> off(n + 1, "offsets");
	OK(ibp_encode_batch_cuda(dc, rows.p, n, dst.p, n * R, off.p, fl.p, K > 1 ? cl.p : nullptr, wsb.p, ws, nullptr));
	CHECK(off.vec() == t.off, "api encode R %llu C %u K %u: offsets", (unsigned long long)R, C, K);
	CHECK(fl.vec() == t.flags, "api encode: flags");
	CHECK(K == 1 || cl.vec() == t.cl, "api encode: clusters");
	CHECK(!memcmp(dst.p, t.enc.data(), t.off[n]), "api encode R %llu C %u K %u: bytes", (unsigned long long)R, C, K);
	/* packed and inplace stores, every gather kernel */
	std::vector<uint8_t> fixed(n * R, 0);
	for (uint64_t i = 0; i < n; i++)
		memcpy(&fixed[i * R], &t.enc[t.off[i]], t.off[i + 1] - t.off[i]);
	/* payloads: device memory (packed), a copy to the device (inplace),
	 * host memory registered in place, a copy to pinned memory (packed) */
	for (int variant = 0; variant < 4; variant++) {
		const int inplace = variant == 1;
		DBuf<uint8_t> pay(inplace ? fixed : std::vector<uint8_t>(t.enc.begin(), t.enc.begin() + t.off[n]), "payload");
		std::vector<uint8_t> hpay(t.enc.begin(), t.enc.begin() + t.off[n]);
		ibp_cuda_store_desc_t d;
		memset(&d, 0, sizeof(d));
		d.codec = t.codec;
		d.payload = variant >= 2 ? hpay.data() : pay.p;
		d.payload_bytes = inplace ? n * R : t.off[n];
		d.offsets = inplace ? nullptr : t.off.data();
		d.flags = t.flags.data();
		d.clusters = K > 1 ? t.cl.data() : nullptr;
		d.nrows = n;
		static const ibp_cuda_payload_t kinds[4] = { IBP_CUDA_PAYLOAD_DEVICE, IBP_CUDA_PAYLOAD_COPY_DEVICE,
								   IBP_CUDA_PAYLOAD_REGISTER, IBP_CUDA_PAYLOAD_COPY_PINNED };
		d.payload_kind = kinds[variant];
		ibp_cuda_store_t *s = nullptr;
		OK(ibp_cuda_store_create(&d, 0, nullptr, &s));
		if (variant == 2) {
			struct cudaPointerAttributes at;
			CHECK(cudaPointerGetAttributes(&at, hpay.data() + t.off[n] / 2) == cudaSuccess &&
				      at.type == cudaMemoryTypeHost && at.devicePointer == hpay.data() + t.off[n] / 2,
			      "api: the registered payload is not mapped host memory");
		}
		uint64_t bad = 0;
		for (int kind = 0; kind <= 3; kind++) {
			OK(ibp_cuda_store_set_kernel(s, (ibp_cuda_kernel_t)kind));
			const uint64_t m = n + 3;
			DBuf<int64_t> ids(m, "ids");
			DBuf<uint8_t> out(m * R, "gather out");
			DBuf<int32_t> st(m, "status");
			for (uint64_t k = 0; k < m; k++)
				ids.p[k] = k < n ? (int64_t)(rnd() % n) : k == n ? -1 : (int64_t)(n + k);
			/* an unrelated error left in the runtime's last-error slot must
			 * not fail this launch (launch errors come from the launch) */
			emu_stub_plant_error(cudaErrorInvalidValue);
			ibp_status_t gs = ibp_gather_cuda(s, ids.p, m, out.p, nullptr, st.p, nullptr);
			CHECK(gs == IBP_OK, "api gather kernel %d: %d %s (a stale error reported?)", kind, (int)gs, ibp_last_error());
			(void)cudaGetLastError();
			std::vector<uint8_t> ref(R);
			for (uint64_t k = 0; k < m; k++) {
				ibp_status_t want = cpu_row(t, inplace ? fixed.data() : t.enc.data(), inplace ? nullptr : t.off.data(),
							    t.flags.data(), K > 1 ? t.cl.data() : nullptr, n, ids.p[k], ref.data());
				bad += st.p[k] != IBP_OK;
				CHECK(st.p[k] == want, "api gather kernel %d inplace %d: request %llu status %d vs %d", kind, inplace,
				      (unsigned long long)k, st.p[k], (int)want);
				CHECK(!memcmp(out.p + k * R, ref.data(), R), "api gather kernel %d inplace %d: row %llu",
				      kind, inplace, (unsigned long long)k);
			}
		}
		if (variant == 0)
			api_staged(t, s);
		uint64_t cnt = 0;
		OK(ibp_cuda_store_errors(s, &cnt, nullptr));
		CHECK(cnt == bad, "api store_errors: %llu vs %llu", (unsigned long long)cnt, (unsigned long long)bad);
		OK(ibp_cuda_store_errors(s, &cnt, nullptr));
		CHECK(cnt == 0, "api store_errors: not reset (%llu)", (unsigned long long)cnt);
		api_errors_interleaved(s);
		const int syncs = emu_stub_device_syncs;
		ibp_cuda_store_free(s);
		CHECK(emu_stub_device_syncs == syncs, "api: ibp_cuda_store_free synchronised the whole device");
	}
	/* plain gather: device memory is read, pageable host memory refused */
	{
		const uint64_t m = n + 2;
		DBuf<int64_t> ids(m, "ids");
		DBuf<uint8_t> out(m * R, "plain out");
		DBuf<int32_t> st(m, "status");
		for (uint64_t k = 0; k < m; k++)
			ids.p[k] = k < n ? (int64_t)(rnd() % n) : -1;
		OK(ibp_gather_plain_cuda(rows.p, n, R, ids.p, m, out.p, nullptr, st.p, nullptr));
		for (uint64_t k = 0; k < n; k++)
			CHECK(st.p[k] == IBP_OK && !memcmp(out.p + k * R, &t.rows[ids.p[k] * R], R), "api plain gather row %llu",
			      (unsigned long long)k);
		CHECK(st.p[n] == IBP_ERR_OUT_OF_RANGE, "api plain gather: bad id status %d", st.p[n]);
		CHECK(ibp_gather_plain_cuda(t.rows.data(), n, R, ids.p, m, out.p, nullptr, st.p, nullptr) == IBP_ERR_INVALID_ARG,
		      "api plain gather: pageable host src accepted");
	}
	/* training */
	{
		DBuf<uint64_t> cnt(8 * R, "counts");
		std::vector<uint64_t> cc(8 * R);
		OK(ibp_train_count(t.rows.data(), R, nullptr, n, 1, cc.data()));
		OK(ibp_train_count_cuda(rows.p, R, nullptr, n, cnt.p, nullptr));
		CHECK(cnt.vec() == cc, "api train counts R %llu", (unsigned long long)R);
		DBuf<uint8_t> mb(2 * R, "mask+bitval");
		std::vector<uint8_t> mc(2 * R);
		ibp_train_mask(cc.data(), n, R, 0.8, mc.data(), mc.data() + R);
		OK(ibp_train_mask_cuda(cnt.p, n, R, 0.8, mb.p, mb.p + R, nullptr));
		CHECK(mb.vec() == mc, "api train mask R %llu", (unsigned long long)R);
	}
	const int syncs = emu_stub_device_syncs;
	ibp_cuda_codec_free(dc);
	CHECK(emu_stub_device_syncs == syncs, "api: ibp_cuda_codec_free synchronised the whole device");
	ibp_codec_free(t.codec);
}

/* The GPU slab cache (ibp_cache_gather_cuda, cache/cache_cuda.c) with its
 * device table and a device store in emulated device memory: the real
 * orchestration (copies, syncs, the slab steps and the gathers in order)
 * against a host cache fed the same batches and ibp_store_gather: the same
 * bytes, statuses and counters, and the device table's READY entries equal
 * to the host cache's (slot bytes included) after every batch. */
static void api_cache_case(uint64_t R, ibp_cache_policy_t pol)
{
	const uint64_t n = 300, B = 150;
	std::vector<uint8_t> rows(n * R, 0);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *r = &rows[i * R];
		if (i % 7 == 3) {
			for (uint64_t j = 0; j < R; j++)
				r[j] = (uint8_t)rnd();
			continue;
		}
		for (uint64_t j = 0, m = 1 + rnd() % (R / 8 + 2); j < m; j++)
			r[rnd() % R] = (uint8_t)(rnd() | 1);
	}
	char path[256];
	snprintf(path, sizeof(path), "/tmp/ibp_emu_cache_%d_%llu.ibp", (int)getpid(), (unsigned long long)R);
	uint64_t shape[2] = { n, R };
	ibp_train_opts_t to;
	ibp_train_opts_default(&to);
	to.nthreads = 1;
	to.threshold = 0.8;
	OK(ibp_pack(path, rows.data(), IBP_DTYPE_U8, 2, shape, &to, IBP_LAYOUT_PACKED));
	ibp_store_t *s = nullptr;
	OK(ibp_store_open(path, IBP_OPEN_READ, &s));
	unlink(path);
	ibp_cuda_store_t *cs = nullptr;
	OK(ibp_cuda_store_from_store(s, IBP_CUDA_PAYLOAD_COPY_DEVICE, 0, nullptr, &cs));
	uint64_t stored = 0;
	ibp_container_payload(ibp_store_container(s), &stored);
	ibp_cache_opts_t o;
	ibp_cache_opts_default(&o);
	o.capacity_bytes = stored / 6 + 2 * R;
	o.row_bytes = R;
	o.policy = pol;
	o.max_batch = 64;
	o.slab_bytes = 4 * ((R + 15) / 16 * 16);
	ibp_cache_t *h = nullptr, *d = nullptr;
	OK(ibp_cache_create(&o, &h));
	o.device = 0;
	OK(ibp_cache_create(&o, &d));
	CHECK(d->dev && d->dev->on_device, "api cache: not a device cache");
	DBuf<int64_t> ids(B, "cache ids"), orows(B, "cache out rows");
	DBuf<uint8_t> out(B * R, "cache out");
	DBuf<int32_t> st(B, "cache status");
	std::vector<int64_t> hids(B), hrows(B);
	std::vector<uint8_t> hout(B * R), ref(R);
	std::vector<int32_t> hst(B);
	for (int b = 0; b < 10; b++) {
		const uint64_t m = 1 + rnd() % B;
		for (uint64_t k = 0; k < m; k++) {
			double u = unif();
			hids[k] = (int64_t)((double)n * u * u * u);
			hrows[k] = (int64_t)k;
		}
		if (b % 3 == 1)
			hids[rnd() % m] = b % 2 ? (int64_t)n : -7;
		const int scatter = b % 2;
		for (uint64_t k = m - 1; scatter && k > 0; k--)
			std::swap(hrows[k], hrows[rnd() % (k + 1)]);
		const uint32_t fl = b % 5 == 4 ? IBP_CACHE_NO_ADMIT : 0;
		memcpy(ids.p, hids.data(), m * 8);
		memcpy(orows.p, hrows.data(), m * 8);
		memset(out.p, 0xA5, B * R);
		memset(hout.data(), 0xA5, B * R);
		ibp_status_t rd = ibp_cache_gather_cuda(d, cs, ids.p, m, out.p, scatter ? orows.p : nullptr, st.p, fl, nullptr);
		ibp_status_t rh = ibp_cache_gather(h, s, hids.data(), m, hout.data(), scatter ? hrows.data() : nullptr,
						   hst.data(), fl, nullptr);
		CHECK(rd == rh, "api cache R %llu batch %d: returned %d (%s), host cache %d", (unsigned long long)R, b, (int)rd,
		      ibp_last_error(), (int)rh);
		CHECK(!memcmp(st.p, hst.data(), m * 4), "api cache R %llu batch %d: statuses", (unsigned long long)R, b);
		CHECK(!memcmp(out.p, hout.data(), B * R), "api cache R %llu batch %d: output differs from the host cache's",
		      (unsigned long long)R, b);
		for (uint64_t k = 0; k < m; k++) {
			if (hids[k] < 0 || (uint64_t)hids[k] >= n)
				continue;
			OK(ibp_store_gather(s, &hids[k], 1, ref.data(), 1));
			CHECK(st.p[k] == IBP_OK && !memcmp(out.p + (uint64_t)hrows[k] * R, ref.data(), R),
			      "api cache R %llu batch %d request %llu: not the store's row", (unsigned long long)R, b,
			      (unsigned long long)k);
		}
		if (b % 4 == 3) {
			int64_t inv[3] = { hids[0] >= 0 && hids[0] < (int64_t)n ? hids[0] : 0, 1, 2 };
			OK(ibp_cache_invalidate(h, inv, 3, nullptr));
			OK(ibp_cache_invalidate(d, inv, 3, nullptr));
		}
		ibp_cache_stats_t a, c;
		OK(ibp_cache_stats(d, &a, 0));
		OK(ibp_cache_stats(h, &c, 0));
		a.meta_bytes = c.meta_bytes = 0;
		CHECK(!memcmp(&a, &c, sizeof(a)), "api cache R %llu batch %d: counters differ (hits %llu/%llu, insertions "
		      "%llu/%llu, evictions %llu/%llu)", (unsigned long long)R, b, (unsigned long long)a.hits,
		      (unsigned long long)c.hits, (unsigned long long)a.insertions, (unsigned long long)c.insertions,
		      (unsigned long long)a.evictions, (unsigned long long)c.evictions);
		/* the device table (emulated device memory, readable here) */
		const ibp_slab_table_t *t = &d->dev->t;
		uint64_t ready = 0, keys = 0;
		for (uint64_t p = 0; p < d->ix.cap; p++) {
			int64_t id = d->ix.keys[p];
			uint64_t e = d->ix.vals[p];
			if (id < 0 || ENT_STATE(e) != ENT_READY)
				continue;
			ready++;
			uint64_t mk = t->cap - 1, q = ibp_slab_hash(id) & mk, i = 0;
			while (t->keys[q] != id && i++ < t->cap)
				q = (q + 1) & mk;
			CHECK(t->keys[q] == id && t->vals[q] == e, "api cache R %llu batch %d: id %lld's device entry",
			      (unsigned long long)R, b, (long long)id);
			uint64_t ph = ibpi_cache_ix_find(&h->ix, id), g = ENT_SLAB(e) * d->spp + ENT_SLOT(e);
			CHECK(ph != UINT64_MAX && h->ix.vals[ph] == e, "api cache: id %lld decided otherwise", (long long)id);
			CHECK(!memcmp(ibp_slab_addr(t, e), ibpi_cache_slot_ptr(h, g), ENT_LEN(e)), "api cache: id %lld slot bytes",
			      (long long)id);
			CHECK(t->pin[g] == 0, "api cache: slot of id %lld still pinned", (long long)id);
		}
		for (uint64_t q = 0; q < t->cap; q++)
			keys += t->keys[q] >= 0;
		CHECK(keys == ready, "api cache R %llu batch %d: %llu device keys, %llu READY rows", (unsigned long long)R, b,
		      (unsigned long long)keys, (unsigned long long)ready);
	}
	ibp_cache_stats_t a;
	OK(ibp_cache_stats(d, &a, 0));
	CHECK(a.hits > 0 && a.insertions > 0, "api cache R %llu: hits %llu insertions %llu", (unsigned long long)R,
	      (unsigned long long)a.hits, (unsigned long long)a.insertions);
	/* a host-fallback store is refused by a GPU cache */
	OK(ibp_cache_invalidate(d, nullptr, 0, nullptr));
	ibp_cache_free(d);
	ibp_cache_free(h);
	ibp_cuda_store_free(cs);
	ibp_store_close(s);
}

/* KV offload through a device stream (cache/kv_cuda.c): the GPU branch of
 * the orchestration (row gather, encode, one size sync, headers and slot
 * copies; header checks, stage copies, the staged decode into the paged
 * cache) in emulated device memory: stored blocks equal to the CPU
 * packer's bytes, loads equal to the original rows, RAW blocks, a corrupt
 * mode byte reported by the wait with its row zeroed. */
/* A slot of the pool (allocated and removed again): where its memory is. */
static void *pool_slot_probe(ibp_slab_pool_t *pool)
{
	int64_t h = -1;
	void *p = nullptr;
	OK(ibp_slab_pool_alloc(pool, 16, &h, &p));
	OK(ibp_slab_pool_unpin(pool, p));
	OK(ibp_slab_pool_remove(pool, h));
	return p;
}

static void api_kv_case(uint64_t R, unsigned C, unsigned pool_flags)
{
	const uint64_t NBk = 40, n = 10;
	std::vector<uint8_t> kv(2 * NBk * R, 0);
	for (uint64_t i = 0; i < 2 * NBk; i++) {
		uint8_t *r = &kv[i * R];
		for (uint64_t j = 0; j < R; j++)
			r[j] = i % 9 == 4 ? (uint8_t)rnd() : (uint8_t)(j * 7 + (rnd() % 8 == 0 ? rnd() : 0));
	}
	ibp_train_opts_t to;
	ibp_train_opts_default(&to);
	to.nthreads = 1;
	to.chunk_bytes = C;
	ibp_codec_t *codec = nullptr;
	OK(ibp_codec_train(kv.data(), 2 * NBk, R, &to, &codec));
	DBuf<uint8_t> dkv(kv, "kv cache"), dout(2 * NBk * R, "kv out");
	memset(dout.p, 0, 2 * NBk * R);
	ibp_slab_pool_opts_t po;
	ibp_slab_pool_opts_default(&po);
	po.capacity_bytes = 1 << 20;
	po.max_block_bytes = 2 * R + 4096; /* an EXP raw block is up to 192 bytes over 2 R */
	po.policy = IBP_CACHE_LRU;
	po.flags = pool_flags; /* 0: slots in pinned memory (src/mem/pinned_cudahost.c), copies asynchronous */
	ibp_slab_pool_t *pool = nullptr;
	OK(ibp_slab_pool_create(&po, &pool));
	if (!pool_flags)
		CHECK(ibp_pinned_owns(pool_slot_probe(pool)), "api kv: the pool is not in pinned memory");
	ibp_kv_stream_t *s = nullptr;
	OK(ibp_kv_stream_create(codec, R, IBP_DTYPE_BF16, 0, nullptr, &s));
	CHECK(ibp_kv_stream_on_device(s), "api kv: not a device stream");
	std::vector<int64_t> ids(n + 2), h(n + 2), dst(n + 2);
	std::vector<uint64_t> bytes(n + 2);
	for (uint64_t b = 0; b < n + 2; b++)
		ids[b] = (int64_t)(rnd() % NBk);
	std::vector<int64_t> perm(NBk);
	for (uint64_t d = 0; d < NBk; d++)
		perm[d] = (int64_t)d;
	for (uint64_t d = NBk - 1; d > 0; d--)
		std::swap(perm[d], perm[rnd() % (d + 1)]);
	for (uint64_t b = 0; b < n + 2; b++)
		dst[b] = perm[b];
	OK(ibp_kv_encode_cuda(s, pool, dkv.p, NBk, ids.data(), n, IBP_KV_IBP, h.data(), bytes.data()));
	OK(ibp_kv_encode_cuda(s, pool, dkv.p, NBk, ids.data() + n, 2, IBP_KV_RAW, h.data() + n, bytes.data() + n));
	OK(ibp_kv_stream_wait(s));
	/* The CPU packer's bytes for the IBP blocks. */
	std::vector<uint8_t> rows(2 * n * R), pay(2 * n * R), stage(2 * n * R + 12 * n), fl(2 * n), cl(2 * n);
	std::vector<uint64_t> off(2 * n + 1), bo(n + 1);
	for (uint64_t b = 0; b < n; b++) {
		memcpy(&rows[2 * b * R], &kv[(uint64_t)ids[b] * R], R);
		memcpy(&rows[(2 * b + 1) * R], &kv[(NBk + (uint64_t)ids[b]) * R], R);
	}
	OK(ibp_encode_batch(codec, rows.data(), 2 * n, pay.data(), pay.size(), off.data(), fl.data(), cl.data(), 1));
	OK(ibp_kv_pack_blocks(pay.data(), off.data(), fl.data(), cl.data(), n, stage.data(), stage.size(), bo.data()));
	std::vector<uint8_t> got(2 * R + 64);
	for (uint64_t b = 0; b < n + 2; b++) {
		uint64_t len = 0;
		OK(ibp_slab_pool_get(pool, h[b], got.data(), got.size(), &len));
		CHECK(len == bytes[b], "api kv R %llu C %u block %llu: %llu bytes stored, %llu reported", (unsigned long long)R,
		      C, (unsigned long long)b, (unsigned long long)len, (unsigned long long)bytes[b]);
		if (b < n)
			CHECK(len == bo[b + 1] - bo[b] && !memcmp(got.data(), &stage[bo[b]], len),
			      "api kv R %llu C %u block %llu: not the CPU packer's bytes", (unsigned long long)R, C,
			      (unsigned long long)b);
		else
			CHECK(len == 2 * R && !memcmp(got.data(), &kv[(uint64_t)ids[b] * R], R) &&
				      !memcmp(got.data() + R, &kv[(NBk + (uint64_t)ids[b]) * R], R),
			      "api kv R %llu: raw block %llu", (unsigned long long)R, (unsigned long long)b);
	}
	std::vector<ibp_slab_pool_t *> pools(n + 2, pool);
	std::vector<uint8_t> kinds(n + 2, IBP_KV_IBP);
	kinds[n] = kinds[n + 1] = IBP_KV_RAW;
	OK(ibp_kv_decode_cuda(s, pools.data(), h.data(), kinds.data(), n + 2, dout.p, NBk, dst.data()));
	OK(ibp_kv_stream_wait(s));
	for (uint64_t b = 0; b < n + 2; b++)
		CHECK(!memcmp(dout.p + (uint64_t)dst[b] * R, &kv[(uint64_t)ids[b] * R], R) &&
			      !memcmp(dout.p + (NBk + (uint64_t)dst[b]) * R, &kv[(NBk + (uint64_t)ids[b]) * R], R),
		      "api kv R %llu C %u: block %llu loaded wrong", (unsigned long long)R, C, (unsigned long long)b);
	/* A mode byte the decoder rejects: that row zero, reported once. */
	void *p = nullptr;
	uint64_t len = 0;
	OK(ibp_slab_pool_pin(pool, h[0], &p, &len));
	((uint8_t *)p)[8] = 0x7F;
	OK(ibp_slab_pool_unpin(pool, p));
	OK(ibp_kv_decode_cuda(s, pools.data(), h.data(), kinds.data(), 1, dout.p, NBk, dst.data()));
	CHECK(ibp_kv_stream_wait(s) == IBP_ERR_CORRUPT, "api kv: a corrupt row was not reported");
	OK(ibp_kv_stream_wait(s));
	for (uint64_t j = 0; j < R; j++)
		CHECK(dout.p[(uint64_t)dst[0] * R + j] == 0, "api kv: the corrupt row is not zero-filled");
	/* EXP blocks (bf16 rows): ibp_exp_encode's bytes, round trip, a damaged
	 * body reported by the wait with every EXP row of the call zeroed. */
	if (R % 2 == 0) {
		const uint64_t ne = 4, el = R; /* 2 rows of R / 2 bf16 */
		std::vector<int64_t> eh(ne), edst(ne);
		std::vector<uint64_t> eb(ne);
		OK(ibp_kv_encode_cuda(s, pool, dkv.p, NBk, ids.data(), ne, IBP_KV_EXP, eh.data(), eb.data()));
		OK(ibp_kv_stream_wait(s));
		uint64_t bound = 0;
		OK(ibp_exp_encode_bound(IBP_DTYPE_BF16, el, &bound));
		std::vector<uint8_t> two(2 * R), ref(bound), blk(bound);
		ibp_exp_opts_t eo;
		ibp_exp_opts_default(&eo);
		eo.nthreads = 1;
		eo.checksum = 0; /* KV blocks are in-memory blocks */
		for (uint64_t b = 0; b < ne; b++) {
			memcpy(two.data(), &kv[(uint64_t)ids[b] * R], R);
			memcpy(two.data() + R, &kv[(NBk + (uint64_t)ids[b]) * R], R);
			uint64_t rs = 0, len2 = 0;
			OK(ibp_exp_encode(two.data(), IBP_DTYPE_BF16, el, &eo, ref.data(), bound, &rs));
			OK(ibp_slab_pool_get(pool, eh[b], blk.data(), blk.size(), &len2));
			CHECK(len2 == rs && len2 == eb[b] && !memcmp(blk.data(), ref.data(), rs),
			      "api kv R %llu: EXP block %llu is not ibp_exp_encode's", (unsigned long long)R,
			      (unsigned long long)b);
			edst[b] = perm[NBk - 1 - b];
		}
		std::vector<uint8_t> ekinds(ne, IBP_KV_EXP);
		memset(dout.p, 0, 2 * NBk * R);
		OK(ibp_kv_decode_cuda(s, pools.data(), eh.data(), ekinds.data(), ne, dout.p, NBk, edst.data()));
		OK(ibp_kv_stream_wait(s));
		for (uint64_t b = 0; b < ne; b++)
			CHECK(!memcmp(dout.p + (uint64_t)edst[b] * R, &kv[(uint64_t)ids[b] * R], R) &&
				      !memcmp(dout.p + (NBk + (uint64_t)edst[b]) * R, &kv[(NBk + (uint64_t)ids[b]) * R], R),
			      "api kv R %llu: EXP block %llu loaded wrong", (unsigned long long)R, (unsigned long long)b);
		OK(ibp_slab_pool_pin(pool, eh[2], &p, &len));
		((uint8_t *)p)[len - 1] ^= 0x5A;
		OK(ibp_slab_pool_unpin(pool, p));
		OK(ibp_kv_decode_cuda(s, pools.data(), eh.data(), ekinds.data(), ne, dout.p, NBk, edst.data()));
		CHECK(ibp_kv_stream_wait(s) == IBP_ERR_CORRUPT, "api kv: a damaged EXP block was not reported");
		for (uint64_t b = 0; b < ne; b++)
			for (uint64_t j = 0; j < R; j++)
				CHECK(dout.p[(uint64_t)edst[b] * R + j] == 0, "api kv: EXP rows of a failed call not zeroed");
	}
	ibp_slab_pool_stats_t ps;
	OK(ibp_slab_pool_stats(pool, &ps, 0));
	CHECK(ps.pinned_blocks == 0, "api kv: %llu slots left pinned", (unsigned long long)ps.pinned_blocks);
	ibp_kv_stream_free(s);
	ibp_slab_pool_free(pool);
	ibp_codec_free(codec);
}

static void api_suite()
{
	static const uint64_t Rs[] = { 3, 100, 1000, 5000 };
	for (uint64_t R : Rs)
		for (unsigned C : { 1u, 2u, 4u, 8u })
			if (!quick || (R + C) % 3 == 0 || R == 5000)
				api_case(R, C, 1 + (unsigned)(rnd() % 3));
	api_cache_case(203, IBP_CACHE_S3FIFO);
	api_kv_case(512, 2, IBP_SLAB_POOL_HOST);
	api_kv_case(203, 4, 0);
	if (!quick) /* a larger row, another policy */
		api_cache_case(1000, IBP_CACHE_LRU);
}


/* ------------------------------------------------------------------------ */
/* pcie: host-memory (PCIe) requests per gathered row                        */
/* ------------------------------------------------------------------------ */

/* A gather from the pinned store reads its rows' bytes from host memory.
 * The emulator logs every lane's read of the store's payload (emu.h,
 * emu_host_watch) with its instruction site and the lane's execution count
 * of that site within the row's fetch; a warp instruction is one (warp,
 * site, count). As the hardware does, an instruction coalesces its lanes'
 * addresses into 32-byte sectors (one request each) in 128-byte lines. Per
 * row: warp instructions, sector requests, line requests, the bytes they
 * cover against the row's compressed bytes, sectors requested twice, and
 * the sectors only partly inside the row (head: before its first byte,
 * tail: past its last) or not at all. */
struct PcieRow {
	uint64_t len;
	unsigned skew;                 /* start mod 128 */
	uint32_t instr, sectors, lines;
	uint32_t cover;                /* sectors holding the row's bytes: the least a fetch can ask for */
	uint32_t dup;                  /* sector requests beyond the first for the same sector */
	uint32_t head, tail, outside;  /* distinct sectors partly before / partly after / wholly outside the row */
};

static std::vector<PcieRow> pcie_account(const std::vector<emu_host_read> &log,
					 const std::vector<emu_fetch_info> &rows, uint64_t *untagged)
{
	struct Ins { std::set<uintptr_t> sec, line; };
	std::vector<std::map<std::tuple<uint32_t, uintptr_t, uint32_t>, Ins>> by(rows.size());
	*untagged = 0;
	for (const emu_host_read &r : log) {
		if (!r.tag) {
			*untagged += r.n;
			continue;
		}
		Ins &in = by[r.tag][std::make_tuple(r.warp, r.pc, r.occ)];
		for (uintptr_t a = r.addr; a < r.addr + r.n; a++) {
			in.sec.insert(a >> 5);
			in.line.insert(a >> 7);
		}
	}
	std::vector<PcieRow> out;
	for (size_t tg = 1; tg < rows.size(); tg++) {
		const uintptr_t lo = rows[tg].lo, hi = rows[tg].hi;
		if (hi == lo)
			continue; /* an empty row: nothing to fetch */
		PcieRow p;
		memset(&p, 0, sizeof(p));
		p.len = hi - lo;
		p.skew = (unsigned)(lo & 127);
		p.cover = (uint32_t)((((hi + 31) & ~(uintptr_t)31) - (lo & ~(uintptr_t)31)) >> 5);
		std::map<uintptr_t, uint32_t> times;
		for (auto &e : by[tg]) {
			p.instr++;
			p.sectors += (uint32_t)e.second.sec.size();
			p.lines += (uint32_t)e.second.line.size();
			for (uintptr_t sc : e.second.sec)
				times[sc]++;
		}
		for (auto &e : times) {
			const uintptr_t s0 = e.first << 5, s1 = s0 + 32;
			p.dup += e.second - 1;
			if (s1 <= lo || s0 >= hi)
				p.outside++;
			else {
				p.head += s0 < lo;
				p.tail += s1 > hi;
			}
		}
		out.push_back(p);
	}
	return out;
}

static std::string pcie_dir(const char *which)
{
	const std::string f = __FILE__;
	const size_t q = f.rfind("/tests/emu/");
	const std::string repo = q == std::string::npos ? std::string(".") : f.substr(0, q);
	return std::string(which) == "data" ? repo + "/datasets/sample" : std::string("/tmp");
}

static std::string pcie_data = "", pcie_tmp = "";

struct PcieSet {
	std::string name;
	uint64_t R = 0, n = 0;
	std::string kernel;
	std::vector<PcieRow> rows;
	uint64_t untagged = 0;
};

/* Gathers every row of a store (random order) through the public API, so the
 * real launch configuration picks the kernel (AUTO), with the payload in a
 * 256-aligned allocation as the pinned copy has it; checks every row against
 * the CPU and accounts the host-memory reads. */
static bool pcie_gather(PcieSet &ps, const ibp_codec_t *codec, const uint8_t *payload, uint64_t payload_bytes,
			const uint64_t *offsets, const uint8_t *flags, const uint8_t *clusters, uint64_t n)
{
	const uint64_t R = ibp_codec_row_bytes(codec);
	ibp_cuda_store_desc_t d;
	memset(&d, 0, sizeof(d));
	d.codec = codec;
	d.payload = payload;
	d.payload_bytes = payload_bytes;
	d.offsets = offsets;
	d.flags = flags;
	d.clusters = clusters;
	d.nrows = n;
	d.payload_kind = IBP_CUDA_PAYLOAD_COPY_DEVICE;
	ibp_cuda_store_t *s = nullptr;
	OK(ibp_cuda_store_create(&d, 0, nullptr, &s));
	ps.R = R;
	ps.n = n;
	ps.kernel = s->launch.threads == 32u * s->launch.gpb ? "warp/row" : "block/row";
	{
		/* rows that encode to at most 4 KiB run a warp each, whatever their
		 * decoded size (sparse rows: many in flight; ibp_gather_config) */
		uint64_t longest = 0;
		for (uint64_t i = 0; i < n; i++)
			longest = std::max(longest, offsets[i + 1] - offsets[i]);
		CHECK(longest > 4096 || ps.kernel == "warp/row", "pcie: rows of %llu bytes encoding to at most %llu "
		      "bytes gathered a block a row", (unsigned long long)R, (unsigned long long)longest);
	}
	DBuf<int64_t> ids(n, "ids");
	for (uint64_t i = 0; i < n; i++)
		ids.p[i] = (int64_t)i;
	for (uint64_t i = n - 1; i > 0; i--)
		std::swap(ids.p[i], ids.p[rnd() % (i + 1)]);
	DBuf<uint8_t> out(n * R, "gather out");
	DBuf<int32_t> st(n, "status");
	emu_host_take(nullptr);
	emu_host_watch(s->payload, 1);
	OK(ibp_gather_cuda(s, ids.p, n, out.p, nullptr, st.p, nullptr));
	emu_device_sync(); /* the gather's reads happen while it runs */
	emu_host_watch(s->payload, 0);
	std::vector<emu_fetch_info> rows;
	std::vector<emu_host_read> log = emu_host_take(&rows);
	ps.rows = pcie_account(log, rows, &ps.untagged);
	std::vector<uint8_t> ref(R);
	bool ok = true;
	for (uint64_t k2 = 0; k2 < n && ok; k2++) {
		const int64_t id = ids.p[k2];
		uint64_t ext = 0;
		ibp_status_t cs = ibpi_decode_row_ext(codec, payload + offsets[id], offsets[id + 1] - offsets[id], flags[id],
						     clusters ? clusters[id] : 0, ref.data(), &ext);
		ok = cs == IBP_OK && st.p[k2] == IBP_OK && !memcmp(out.p + k2 * R, ref.data(), R);
		CHECK(ok, "pcie %s: row %lld differs from the CPU (status %d)", ps.name.c_str(), (long long)id, st.p[k2]);
	}
	ibp_cuda_store_free(s);
	return ok;
}

/* A committed sample .npy, packed into a .ibp (ibp_pack: trained codec,
 * packed layout, format 1.2) and opened as a store. */
static bool pcie_npy(PcieSet &ps, const std::string &file)
{
	const std::string path = pcie_data + "/" + file;
	ibp_npy_info_t info;
	void *data = nullptr;
	if (ibp_npy_load(path.c_str(), IBP_NPY_BF16, &info, &data) != IBP_OK || info.ndim < 2 || !info.shape[0]) {
		fprintf(stderr, "pcie: cannot read %s: %s\n", path.c_str(), ibp_last_error());
		ibp_npy_free(data);
		return false;
	}
	const std::string ibp = pcie_tmp + "/pcie-" + file + "." + std::to_string(getpid()) + ".ibp";
	OK(ibp_pack(ibp.c_str(), data, info.dtype, info.ndim, info.shape, nullptr, IBP_LAYOUT_PACKED));
	ibp_npy_free(data);
	ibp_store_t *st = nullptr;
	OK(ibp_store_open(ibp.c_str(), IBP_OPEN_READ, &st));
	unlink(ibp.c_str());
	const ibp_container_t *c = ibp_store_container(st);
	const ibp_codec_t *codec = ibp_store_codec(st);
	const uint64_t n = ibp_store_nrows(st);
	std::vector<uint64_t> off(n + 1);
	std::vector<uint8_t> fl(n), cl(n);
	OK(ibp_container_index_expand(c, off.data(), fl.data(), cl.data()));
	uint64_t pb = 0;
	const uint8_t *pay = ibp_container_payload(c, &pb);
	ps.name = file;
	bool ok = pcie_gather(ps, codec, pay, pb, off.data(), fl.data(), ibp_codec_nclusters(codec) > 1 ? cl.data() : nullptr, n);
	ibp_store_close(st);
	return ok;
}

/* The benchmark's synthetic rows (bench/gpu_gather.cu): R = 256, 64-bit
 * chunks with their top 32 bits fixed, every row CLEAN at 128 bytes. */
static bool pcie_synthetic(PcieSet &ps)
{
	const uint64_t R = 256, D = R / 8, n = 512;
	std::vector<uint64_t> mask(D, ~0ull << 32), bitval(D);
	for (uint64_t j = 0; j < D; j++)
		bitval[j] = rnd() & mask[j];
	ibp_codec_t *codec = nullptr;
	OK(ibp_codec_create(R, 8, 1, mask.data(), bitval.data(), &codec));
	std::vector<uint64_t> raw(n * D);
	for (uint64_t i = 0; i < n * D; i++)
		raw[i] = (rnd() & ~mask[i % D]) | bitval[i % D];
	std::vector<uint8_t> enc(n * R), fl(n), cl(n);
	std::vector<uint64_t> off(n + 1);
	OK(ibp_encode_batch(codec, raw.data(), n, enc.data(), n * R, off.data(), fl.data(), cl.data(), 1));
	ps.name = "synthetic 50% (bench)";
	bool ok = pcie_gather(ps, codec, enc.data(), off[n], off.data(), fl.data(), nullptr, n);
	ibp_codec_free(codec);
	return ok;
}

static void pcie_suite()
{
	if (pcie_data.empty())
		pcie_data = pcie_dir("data");
	if (pcie_tmp.empty())
		pcie_tmp = pcie_dir("tmp");
	std::vector<PcieSet> sets;
	static const char *files[] = { "minilm_tok_emb_f32.npy", "minilm_kv_bf16.npy", "debian_bow_f32.npy" };
	for (const char *f : files) {
		PcieSet ps;
		fprintf(stderr, "pcie: %s\n", f);
		if (pcie_npy(ps, f))
			sets.push_back(ps);
		else
			CHECK(0, "pcie: data set %s not gathered", f);
	}
	{
		PcieSet ps;
		fprintf(stderr, "pcie: synthetic\n");
		if (pcie_synthetic(ps))
			sets.push_back(ps);
	}
	printf("Host-memory (PCIe) reads of the gather per row, from the emulator (tests/emu, pcie suite):\n"
	       "warp memory instructions, 32-byte sector requests and 128-byte line requests per row; fetched =\n"
	       "32 x sectors (or 128 x lines); needed = the row's compressed bytes; cover = the sectors holding them.\n\n");
	printf("%-22s %5s %5s %-9s %16s %6s %6s %6s %6s %6s %6s %6s %6s %8s %9s %7s %7s\n", "data", "R", "rows", "kernel",
	       "bytes min/med/max", "%al32", "instr", "sect", "cover", "lines", "amp32", "min32", "amp128", "twice B",
	       "part h/t", "outside", "other");
	for (PcieSet &ps : sets) {
		std::vector<uint64_t> lens;
		double instr = 0, sect = 0, cover = 0, lines = 0, need = 0;
		uint64_t twice = 0, al32 = 0, outside = 0;
		unsigned hmax = 0, tmax = 0;
		for (const PcieRow &r : ps.rows) {
			lens.push_back(r.len);
			instr += r.instr;
			sect += r.sectors;
			cover += r.cover;
			lines += r.lines;
			need += (double)r.len;
			twice += 32ull * r.dup;
			al32 += r.skew % 32 == 0;
			outside += r.outside;
			hmax = std::max(hmax, r.head);
			tmax = std::max(tmax, r.tail);
		}
		std::sort(lens.begin(), lens.end());
		const double m = ps.rows.empty() ? 1 : (double)ps.rows.size();
		char sz[40], pt[20];
		snprintf(sz, sizeof(sz), "%llu/%llu/%llu", (unsigned long long)(lens.empty() ? 0 : lens.front()),
			 (unsigned long long)(lens.empty() ? 0 : lens[lens.size() / 2]),
			 (unsigned long long)(lens.empty() ? 0 : lens.back()));
		snprintf(pt, sizeof(pt), "%u/%u", hmax, tmax);
		printf("%-22s %5llu %5llu %-9s %16s %5.1f%% %6.2f %6.2f %6.2f %6.2f %6.3f %6.3f %6.3f %8llu %9s %7llu %7llu\n",
		       ps.name.c_str(), (unsigned long long)ps.R, (unsigned long long)ps.rows.size(), ps.kernel.c_str(), sz,
		       100.0 * (double)al32 / m, instr / m, sect / m, cover / m, lines / m, 32.0 * sect / need,
		       32.0 * cover / need, 128.0 * lines / need, (unsigned long long)twice, pt, (unsigned long long)outside,
		       (unsigned long long)ps.untagged);
		/* the targets (issue 10, item 6) */
		CHECK(twice == 0, "pcie %s: %llu bytes fetched twice (target: none)", ps.name.c_str(), (unsigned long long)twice);
		CHECK(hmax <= 1 && tmax <= 1, "pcie %s: up to %u/%u partial sectors at a row's head/tail (target: at most 1)",
		      ps.name.c_str(), hmax, tmax);
		CHECK(outside == 0, "pcie %s: %llu sectors requested outside their rows", ps.name.c_str(), (unsigned long long)outside);
		CHECK(ps.untagged == 0, "pcie %s: %llu bytes of host memory read outside a row fetch", ps.name.c_str(),
		      (unsigned long long)ps.untagged);
		CHECK(sect == cover, "pcie %s: %.0f sector requests where the rows' %.0f sectors would do", ps.name.c_str(), sect,
		      cover);
	}
	printf("\n%%al32: rows starting on a sector; instr/sect/cover/lines: per row; amp32 = fetched/needed by sectors, "
	       "min32 = the least a sector-granular fetch can have (cover), amp128 = by lines; twice B: bytes fetched "
	       "twice (sector requests repeated within a row); part h/t: most sectors partly before/after a row; "
	       "outside: sectors wholly outside their row; other: host bytes read outside any row fetch.\n");
}

extern uint64_t emu_stat_launches, emu_stat_fibers, emu_stat_switches;
int emu_codecs_main(uint64_t seed, int quick, const char *which);

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "ibp|train|api|exp|fp8|codecs|all|pcie", 0,
			   "[--seed S] [--quick] [--rows R,...] [--defect N] [--preempt M] [--data DIR] [--tmp DIR]", &args))
		return 2;
	const std::string &suite = args.suite;
	const unsigned long long seed = args.seed;
	quick = args.quick;
	if (args.data)
		pcie_data = args.data;
	if (args.tmp)
		pcie_tmp = args.tmp;
	std::vector<uint64_t> Rs = { 1, 2, 3, 7, 8, 9, 31, 33, 64, 65, 100, 255, 256, 257, 1000, 1025, 4096, 4097, 9000 };
	if (!args.rows.empty())
		Rs = args.rows;
	if (suite == "pcie" && !args.preempt_set)
		emu_preempt_mean = 4096; /* counts, not races: fewer switches, a faster run */
	if (suite == "train" || suite == "all") {
		train_check();
		fprintf(stderr, "train done (%d failures)\n", failures);
	}
	if (suite == "ibp" || suite == "all")
		ibp_suite(Rs);
	if (suite == "api" || suite == "all") {
		api_suite();
		fprintf(stderr, "big store (2^32 + 40 rows, payload over 4 GiB)\n");
		big_store_case<4>();
		big_store_case<1>();
	}
	if (suite == "pcie")
		pcie_suite();
	if (suite == "exp" || suite == "fp8" || suite == "codecs" || suite == "all")
		failures += emu_codecs_main(seed, quick, suite == "all" ? "codecs" : suite.c_str());
	printf("emu: %llu launches, %llu GPU threads, %llu switches\n", (unsigned long long)emu_stat_launches,
	       (unsigned long long)emu_stat_fibers, (unsigned long long)emu_stat_switches);
	printf("%s: %s (%d failures, seed %llu)\n", suite.c_str(), failures ? "FAILED" : "ALL OK", failures, seed);
	return failures != 0;
}
