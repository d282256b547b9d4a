/* harness_dynamiq.cpp - kernels/dynamiq.cu, whole (its host launchers run
 * against the H100 runtime stub), on the emulator, against the CPU twins
 * ibpi_dq_hop and ibpi_dq_decode_chunk (src/coll/dynamiq.c, its scalar reference):
 * every payload byte of the leaf and of a hop, every decoded float, the
 * statuses of corrupt super-group scales, and a whole ring (each hop's
 * bytes made by the GPU, then decoded) against ibpi_dq_simulate. Plans: default
 * (variable widths), fixed widths 2/4/8, uniform levels, kept scales
 * (the stale-scale baseline), correlated rounding, short last
 * super-groups. A binary of its own (harness_dq), so it shares nothing
 * with harness.cpp but the emulator. Suite lsq: kernels/rcmoe.cu
 * (ibpi_lsq_encode_cuda, ibpi_lsq_decode_cuda) against ibpi_lsq_encode / ibpi_lsq_decode:
 * stream bytes, decoded values, non-finite input and corrupt streams
 * reported alike, three dtypes, rows 1..1000, B 2/4/8, K 0/4/8. Suite
 * pts: ibpi_pts_encode_cuda / ibpi_pts_decode_add_cuda against ibpi_pts_encode /
 * ibpi_pts_decode_add: stream bytes and size, sums into the same accumulator,
 * corrupt counts, sizes and presence bits (nothing added).
 * Usage: harness_dq dynamiq|lsq|pts|all [--seed S] [--quick] [--defect N]
 * [--preempt M] */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ibp.h"
#include "coll/dynamiq.h"
#include "coll/dynamiq_simd.h"
#include "coll/rcmoe.h"
}
#include "k_dynamiq.inc"
#include "k_rcmoe.inc"

#define PTS_HDR_BYTES 12 /* rcmoe.c: FP32 magnitude, u64 count */

#include "harness_check.h"
#define DCHECK CHECK
static double unif() { return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0; }
static double gauss() { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }

/* device buffer: emulator memory with redzones, filled with garbage, its
 * start skewed by a random multiple of `align` below 16 */
struct Dev {
	uint8_t *p;
	Dev(size_t n, const char *name, unsigned align = 1)
	{
		p = (uint8_t *)emu_dev_alloc(n ? n : 1, (unsigned)(rnd() % 16) & ~(align - 1), name);
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)rnd();
	}
	~Dev() { emu_dev_free(p); }
	Dev(const Dev &) = delete;
};

/* Gradient-like buffers: a log-normal scale per 256 entries, some near zero. */
static std::vector<std::vector<float>> grads(int n, uint64_t d)
{
	std::vector<float> sc(d / 256 + 1), sig(d);
	for (auto &s : sc)
		s = (float)(exp(1.5 * gauss()) * (unif() < 0.3 ? 1e-3 : 1.0));
	for (auto &s : sig)
		s = (float)gauss();
	std::vector<std::vector<float>> x(n, std::vector<float>(d));
	for (int w = 0; w < n; w++)
		for (uint64_t i = 0; i < d; i++)
			x[w][i] = sc[i / 256] * (0.5f * sig[i] + (float)gauss());
	if (d > 40)
		for (int i = 0; i < 16; i++)
			x[0][i] = 0.0f; /* an all-zero group */
	return x;
}

struct DevPlan {
	Dev q, mu, boff, lv, tab;
	dq_cuda_plan_t p;
	DevPlan(const dq_plan_t &pl)
		: q(pl.J, "dq q"), mu(pl.J * 4, "dq mu", 4), boff(pl.J * 8, "dq boff", 8), lv(3 * 128 * 4, "dq levels", 4),
		  tab(3 * 1024, "dq tab")
	{
		memcpy(q.p, pl.q, pl.J);
		memcpy(mu.p, pl.mu, pl.J * 4);
		memcpy(boff.p, pl.boff, pl.J * 8);
		memcpy(lv.p, pl.lv, 3 * 128 * 4);
		memcpy(tab.p, pl.tab, 3 * 1024);
		p.d = pl.d;
		p.seed = pl.cfg.seed;
		p.seq = pl.seq;
		p.n = pl.n;
		p.fresh = pl.cfg.fresh;
		p.correlated = pl.cfg.correlated;
		p.q = q.p;
		p.mu = (const float *)mu.p;
		p.boff = (const uint64_t *)boff.p;
		p.lv = (const float *)lv.p;
		p.tab = tab.p;
	}
};

static void dq_case(int n, uint64_t d, const dq_cfg_t &cfg, const char *what)
{
	fprintf(stderr, "dynamiq %s: n %d d %llu\n", what, n, (unsigned long long)d);
	auto x = grads(n, d);
	uint64_t J = (d + 255) / 256;
	std::vector<float> st(2 * J), gst(2 * J, 0.0f);
	for (int w = 0; w < n; w++) {
		ibpi_dq_local_stats(x[w].data(), d, st.data());
		for (uint64_t i = 0; i < 2 * J; i++)
			gst[i] += st[i];
	}
	dq_plan_t pl;
	uint64_t seq = 1 + rnd() % 1000;
	DCHECK(ibpi_dq_plan_make(&pl, &cfg, n, d, seq, gst.data()) == IBP_OK, "plan: %s", ibp_last_error());
	DevPlan dp(pl);
	std::vector<Dev *> dx;
	for (int w = 0; w < n; w++) {
		dx.push_back(new Dev(d * 4, "dq x", 4));
		memcpy(dx[w]->p, x[w].data(), d * 4);
	}
	uint64_t mc = 1;
	for (int k = 0; k < n; k++)
		mc = pl.cbytes[k] > mc ? pl.cbytes[k] : mc;
	Dev din(mc, "dq in"), dout(mc, "dq out"), dy(d * 4, "dq y", 4), dst(4, "dq status", 4);
	std::vector<uint8_t> a(mc), b(mc), cpu(mc);
	std::vector<float> ring(d, 0.0f), cy(d);
	for (int k = 0; k < n; k++) {
		uint64_t j0 = pl.lo[k], j1 = pl.lo[k + 1], cb = pl.cbytes[k];
		/* the ring's order for chunk k: leaf k+1, then k+2, ..., sink k; every hop's input is the
		 * GPU's own output of the hop before, checked against the CPU's hop on the same input */
		for (int t = 1; t <= n; t++) {
			int w = (k + t) % n;
			const uint8_t *in = t == 1 ? nullptr : a.data();
			if (in)
				memcpy(din.p, a.data(), cb);
			ibp_status_t s = ibpi_dq_hop_cuda(&dp.p, j0, j1, in ? din.p : nullptr, (const float *)dx[w]->p, w, dout.p,
						     (int32_t *)dst.p, nullptr);
			DCHECK(s == IBP_OK && *(int32_t *)dst.p == IBP_OK, "%s chunk %d hop %d: status %d / %d (%s)", what,
			       k, t, s, *(int32_t *)dst.p, ibp_last_error());
			DCHECK(ibpi_dq_hop(&pl, (uint64_t)k, in, x[w].data(), w, cpu.data()) == IBP_OK, "cpu hop");
			DCHECK(!memcmp(cpu.data(), dout.p, cb), "%s chunk %d hop %d (rank %d): payload bytes differ", what, k,
			       t, w);
			memcpy(a.data(), dout.p, cb);
		}
		/* the sink's bytes decoded on both */
		memcpy(din.p, a.data(), cb);
		ibp_status_t s = ibpi_dq_decode_chunk_cuda(&dp.p, j0, j1, din.p, (float *)dy.p, (int32_t *)dst.p, nullptr);
		DCHECK(s == IBP_OK && *(int32_t *)dst.p == IBP_OK, "%s chunk %d decode: status %d / %d", what, k, s,
		       *(int32_t *)dst.p);
		DCHECK(ibpi_dq_decode_chunk(&pl, (uint64_t)k, a.data(), cy.data()) == IBP_OK, "cpu decode");
		uint64_t e0 = j0 * 256 < d ? j0 * 256 : d, e1 = j1 * 256 < d ? j1 * 256 : d;
		DCHECK(!memcmp(cy.data() + e0, (float *)dy.p + e0, (e1 - e0) * 4), "%s chunk %d: decoded floats differ",
		       what, k);
		memcpy(ring.data() + e0, (float *)dy.p + e0, (e1 - e0) * 4);
		/* corrupt scales: a NaN, an Inf and a negative one are reported as the CPU reports them;
		 * a huge finite one (Inf and NaN sums) gives the CPU's bytes */
		if (j1 > j0) {
			static const uint16_t bad[4] = { 0x7fc0, 0x7f80, 0xbf80, 0x7f7f };
			uint64_t j = j0 + rnd() % (j1 - j0);
			for (int v = 0; v < 4; v++) {
				memcpy(b.data(), a.data(), cb);
				b[pl.boff[j]] = (uint8_t)bad[v];
				b[pl.boff[j] + 1] = (uint8_t)(bad[v] >> 8);
				memcpy(din.p, b.data(), cb);
				int w = (k + 1) % n;
				s = ibpi_dq_hop_cuda(&dp.p, j0, j1, din.p, (const float *)dx[w]->p, w, dout.p, (int32_t *)dst.p,
						nullptr);
				ibp_status_t cs = ibpi_dq_hop(&pl, (uint64_t)k, b.data(), x[w].data(), w, cpu.data());
				DCHECK(s == IBP_OK && *(int32_t *)dst.p == (int32_t)cs, "%s chunk %d scale %04x: GPU %d, CPU %d",
				       what, k, bad[v], *(int32_t *)dst.p, cs);
				if (cs == IBP_OK)
					DCHECK(!memcmp(cpu.data(), dout.p, cb), "%s chunk %d scale %04x: bytes differ", what, k,
					       bad[v]);
				s = ibpi_dq_decode_chunk_cuda(&dp.p, j0, j1, din.p, (float *)dy.p, (int32_t *)dst.p, nullptr);
				cs = ibpi_dq_decode_chunk(&pl, (uint64_t)k, b.data(), cy.data());
				DCHECK(s == IBP_OK && *(int32_t *)dst.p == (int32_t)cs, "%s chunk %d scale %04x: decode GPU %d, CPU %d",
				       what, k, bad[v], *(int32_t *)dst.p, cs);
				if (cs == IBP_OK)
					DCHECK(!memcmp(cy.data() + e0, (float *)dy.p + e0, (e1 - e0) * 4),
					       "%s chunk %d scale %04x: decoded floats differ", what, k, bad[v]);
			}
		}
	}
	/* the ring assembled from GPU hops equals the one-process simulation */
	std::vector<const float *> xp(n);
	for (int w = 0; w < n; w++)
		xp[w] = x[w].data();
	std::vector<float> sim(d);
	DCHECK(ibpi_dq_simulate(xp.data(), n, d, &cfg, seq, sim.data(), nullptr) == IBP_OK, "simulate");
	DCHECK(!memcmp(sim.data(), ring.data(), d * 4), "%s: the GPU ring differs from ibpi_dq_simulate", what);
	/* bad arguments */
	DCHECK(ibpi_dq_hop_cuda(&dp.p, 1, 0, nullptr, (const float *)dx[0]->p, 0, dout.p, (int32_t *)dst.p, nullptr) ==
		       IBP_ERR_INVALID_ARG,
	       "j1 < j0 accepted");
	DCHECK(ibpi_dq_hop_cuda(&dp.p, 0, J + 1, nullptr, (const float *)dx[0]->p, 0, dout.p, (int32_t *)dst.p, nullptr) ==
		       IBP_ERR_INVALID_ARG,
	       "a super-group past the plan accepted");
	for (auto *p : dx)
		delete p;
	ibpi_dq_plan_free(&pl);
}

static void lsq_case(ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K, int bad)
{
	fprintf(stderr, "lsq %s n %llu row %llu B %d K %d%s\n", ibp_dtype_name(dt), (unsigned long long)n,
		(unsigned long long)row, B, K, bad ? " (a non-finite element)" : "");
	const size_t es = dt == IBP_DTYPE_F32 ? 4 : 2;
	std::vector<uint8_t> src(n * es + 4);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)(gauss() * pow(10.0, (double)((i / 70) % 6) - 3));
		if (rnd() % 50 == 0)
			f = rnd() % 2 ? 0.0f : -0.0f;
		if (bad && i == n / 2)
			f = rnd() % 2 ? NAN : -INFINITY;
		if (dt == IBP_DTYPE_F32)
			memcpy(&src[4 * i], &f, 4);
		else {
			uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
			memcpy(&src[2 * i], &h, 2);
		}
	}
	uint64_t cap = ibpi_lsq_bytes(n, row, B, K), sz = 0, key = rnd();
	std::vector<uint8_t> cpu(cap);
	ibp_status_t cs = ibpi_lsq_encode(src.data(), dt, n, row, B, K, key, cpu.data(), cap, &sz);
	Dev dsrc(n * es, "lsq src", 4), dout(cap, "lsq stream"), dws(ibpi_lsq_cuda_workspace(n, row), "lsq workspace", 4),
		dst(4, "lsq status", 4), dy(n * es, "lsq out", 4);
	memcpy(dsrc.p, src.data(), n * es);
	ibp_status_t s = ibpi_lsq_encode_cuda(dsrc.p, dt, n, row, B, K, key, dout.p, dws.p, (int32_t *)dst.p, nullptr);
	DCHECK(s == IBP_OK, "ibpi_lsq_encode_cuda: %s", ibp_last_error());
	DCHECK(*(int32_t *)dst.p == (int32_t)cs, "lsq encode status: GPU %d, CPU %d", *(int32_t *)dst.p, cs);
	if (cs != IBP_OK)
		return;
	DCHECK(sz == cap && !memcmp(cpu.data(), dout.p, cap), "lsq %s n %llu row %llu B %d K %d: stream bytes differ",
	       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)row, B, K);
	std::vector<uint8_t> co(n * es + 4);
	DCHECK(ibpi_lsq_decode(cpu.data(), cap, dt, n, co.data()) == IBP_OK, "cpu decode");
	s = ibpi_lsq_decode_cuda(dout.p, cap, dt, n, dy.p, (int32_t *)dst.p, nullptr);
	DCHECK(s == IBP_OK && *(int32_t *)dst.p == IBP_OK, "lsq decode: %d / %d", s, *(int32_t *)dst.p);
	DCHECK(!memcmp(co.data(), dy.p, n * es), "lsq %s n %llu row %llu B %d K %d: decoded values differ",
	       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)row, B, K);
	/* corrupt streams: a bad width, a short size, a NaN S* (or row scale): rejected by both */
	for (int v = 0; v < 3; v++) {
		std::vector<uint8_t> b = cpu;
		uint64_t size = cap;
		if (v == 0)
			b[4] = 3;
		else if (v == 1)
			size = cap - 1;
		else {
			uint32_t nanb = 0x7fc00000u;
			memcpy(&b[K == 0 && n ? 8 : 0], &nanb, 4);
		}
		Dev dc(cap, "lsq corrupt");
		memcpy(dc.p, b.data(), cap);
		cs = ibpi_lsq_decode(b.data(), size, dt, n, co.data());
		s = ibpi_lsq_decode_cuda(dc.p, size, dt, n, dy.p, (int32_t *)dst.p, nullptr);
		DCHECK(s == IBP_OK && *(int32_t *)dst.p == (int32_t)cs && cs == IBP_ERR_CORRUPT,
		       "lsq corrupt %d: GPU %d, CPU %d", v, *(int32_t *)dst.p, cs);
	}
}

static void lsq_suite(int quick)
{
	static const ibp_dtype_t dts[3] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	static const uint64_t ns[] = { 0, 1, 37, 700, 3000 }, rowsz[] = { 1, 16, 100, 256, 1000 };
	static const int Bs[3] = { 2, 4, 8 }, Ks[3] = { 0, 4, 8 };
	int c = 0;
	for (int d = 0; d < 3; d++)
		for (uint64_t n : ns)
			for (uint64_t row : rowsz)
				for (int b = 0; b < 3; b++) {
					c++;
					if (quick && c % 3)
						continue;
					if (row == 1 && n > 700)
						continue;
					lsq_case(dts[d], n, row, Bs[b], Ks[(b + d + c) % 3], n > 10 && c % 7 == 0);
				}
}

static void pts_case(uint64_t k, double sigma, int bad)
{
	fprintf(stderr, "pts k %llu sigma %g%s\n", (unsigned long long)k, sigma, bad ? " (a non-finite element)" : "");
	std::vector<float> g(k + 1), acc0(k + 1), acc1(k + 1);
	for (uint64_t i = 0; i < k; i++) {
		g[i] = (float)(gauss() * pow(10.0, (double)((i / 50) % 5) - 2));
		if (rnd() % 40 == 0)
			g[i] = rnd() % 2 ? 0.0f : -0.0f;
		acc0[i] = (i % 7 == 0) ? -0.0f : (float)gauss();
	}
	if (bad && k)
		g[rnd() % k] = rnd() % 2 ? NAN : INFINITY;
	uint64_t cap = ibpi_pts_max_bytes(k), sz = 0, key = rnd();
	std::vector<uint8_t> cpu(cap);
	ibp_status_t cs = ibpi_pts_encode(g.data(), k, sigma, key, cpu.data(), cap, &sz);
	Dev dg(k * 4, "pts g", 4), dout(cap, "pts stream"), dws(ibpi_pts_cuda_workspace(k), "pts workspace", 8),
		dsz(8, "pts size", 8), dst(4, "pts status", 4), dacc(k * 4, "pts acc", 4);
	memcpy(dg.p, g.data(), k * 4);
	ibp_status_t s = ibpi_pts_encode_cuda((const float *)dg.p, k, sigma, key, dout.p, (uint64_t *)dsz.p, dws.p,
					 (int32_t *)dst.p, nullptr);
	DCHECK(s == IBP_OK, "ibpi_pts_encode_cuda: %s", ibp_last_error());
	DCHECK(*(int32_t *)dst.p == (int32_t)cs, "pts encode status: GPU %d, CPU %d", *(int32_t *)dst.p, cs);
	if (cs != IBP_OK)
		return;
	DCHECK(*(uint64_t *)dsz.p == sz, "pts k %llu: size GPU %llu, CPU %llu", (unsigned long long)k,
	       (unsigned long long)*(uint64_t *)dsz.p, (unsigned long long)sz);
	DCHECK(!memcmp(cpu.data(), dout.p, sz), "pts k %llu sigma %g: stream bytes differ", (unsigned long long)k, sigma);
	/* decode-add into the same accumulator on both; then corrupt streams change nothing */
	for (int v = 0; v < 4; v++) {
		std::vector<uint8_t> b(cpu.begin(), cpu.begin() + sz);
		uint64_t size = sz;
		if (v == 1)
			size = sz + 1; /* a size that does not match the count */
		else if (v == 2 && k)
			b[4] ^= 1; /* the count */
		else if (v == 3 && k % 8)
			b[PTS_HDR_BYTES + (k + 7) / 8 - 1] |= (uint8_t)(0x80u); /* a presence bit past k */
		if (size > b.size())
			b.resize(size, 0);
		Dev din(size, "pts in");
		memcpy(din.p, b.data(), size);
		acc1 = acc0;
		memcpy(dacc.p, acc0.data(), k * 4);
		cs = ibpi_pts_decode_add(b.data(), size, k, acc1.data());
		s = ibpi_pts_decode_add_cuda(din.p, size, k, (float *)dacc.p, dws.p, (int32_t *)dst.p, nullptr);
		DCHECK(s == IBP_OK && *(int32_t *)dst.p == (int32_t)cs, "pts k %llu variant %d: decode GPU %d, CPU %d",
		       (unsigned long long)k, v, *(int32_t *)dst.p, cs);
		DCHECK(!memcmp(acc1.data(), dacc.p, k * 4), "pts k %llu variant %d: sums differ", (unsigned long long)k, v);
	}
}

static void pts_suite(int quick)
{
	static const uint64_t ks[] = { 0, 1, 7, 63, 64, 65, 1000, 4097, 20000 };
	static const double sig[3] = { 1.0, 0.5, 0.01 };
	int c = 0;
	for (uint64_t k : ks)
		for (double sg : sig) {
			c++;
			if (quick && c % 2 && k > 100)
				continue;
			pts_case(k, sg, c % 5 == 0);
		}
}

extern uint64_t emu_stat_launches, emu_stat_fibers, emu_stat_switches;

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "dynamiq|lsq|pts|all", 0, "[--seed S] [--quick] [--defect N] [--preempt M]",
			   &args))
		return 2;
	const std::string &suite = args.suite;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
	/* the CPU twin is the scalar reference (the vector kernels are checked against it in test_dynamiq) */
	ibpi_coll_simd_set(COLL_SIMD_SCALAR);
	if (suite == "lsq" || suite == "all")
		lsq_suite(quick);
	if (suite == "pts" || suite == "all")
		pts_suite(quick);
	struct {
		int n;
		uint64_t d;
		double budget;
		int fixed, nonuni, fresh, corr;
		const char *what;
	} cs[] = {
		{ 3, 2000, 5, 0, 1, 1, 0, "default" },	   { 2, 1300, 5, 2, 1, 1, 0, "fixed 2" },
		{ 2, 1300, 5, 4, 1, 1, 0, "fixed 4" },	   { 2, 1300, 5, 8, 1, 1, 0, "fixed 8" },
		{ 4, 3000, 6, 0, 0, 1, 0, "uniform levels" }, { 3, 1800, 5, 0, 1, 0, 0, "kept scales" },
		{ 3, 1800, 5, 0, 1, 1, 1, "correlated" },	   { 2, 200, 5, 0, 1, 1, 0, "one short SG" },
		{ 5, 9000, 4, 0, 1, 1, 0, "budget 4" },
	};
	for (auto &c : cs) {
		if (suite != "dynamiq" && suite != "all")
			break;
		if (quick && c.d > 5000)
			continue;
		dq_cfg_t cfg;
		ibpi_dq_cfg_default(&cfg);
		cfg.budget = c.budget;
		cfg.fixed_q = c.fixed;
		cfg.nonuniform = c.nonuni;
		cfg.fresh = c.fresh;
		cfg.correlated = c.corr;
		cfg.seed ^= rnd();
		dq_case(c.n, c.d, cfg, c.what);
	}
	printf("emu: %llu launches, %llu GPU threads, %llu switches\n", (unsigned long long)emu_stat_launches,
	       (unsigned long long)emu_stat_fibers, (unsigned long long)emu_stat_switches);
	printf("%s: %s (%d failures, seed %llu)\n", suite.c_str(), failures ? "FAILED" : "ALL OK", failures, seed);
	return failures != 0;
}
