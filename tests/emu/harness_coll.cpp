/* harness_coll.cpp - kernels/coll_reduce.cu, whole (its host launcher runs
 * against the H100 runtime stub), on the emulator, against its CPU twin
 * ibpi_coll_reduce_add (src/coll/coll_codec.c): the reduction step of the
 * collectives on device buffers, bit for bit, three dtypes, sizes around
 * the block and grid-stride boundaries, values that round halfway, cross
 * to Inf/denormals, and NaN. Output buffers are pre-filled with garbage
 * and followed by redzones (emulator memory), so a missed or extra store
 * shows. A binary of its own (harness_coll).
 * Suite device: the collectives on device buffers (src/coll/mem_device.c,
 * comm.c, the EXP and FP8 kernels' host code, the reduction kernel) with
 * 2 and 3 ranks as threads of this process (the in-process transport),
 * every result equal to the host path's byte for byte.
 * Suite nccl: the NCCL transport (src/coll/transport_nccl.c) against the
 * NCCL stand-in (nccl_stub.cpp), ranks as threads with a device each:
 * messages byte for byte, the collectives of communicators made from NCCL
 * (NCCL's own for plain calls, the algorithms for compressed ones, host
 * and device buffers) equal to the in-process transport's, failures, and
 * the caller's own NCCL work in flight beside the transport's.
 * Usage: harness_coll reduce|device|nccl [--seed S] [--quick] [--defect N] [--preempt M] */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ibp.h"
#include "coll/coll_internal.h"
#include "coll/coll_mem.h"
}
#include "k_coll_reduce.inc"
#include "k_exp.inc"
#include "k_fp8.inc"
#include <nccl.h>
#include <pthread.h>

#include <functional>

#include "harness_check.h"

extern uint64_t emu_stat_launches, emu_stat_fibers, emu_stat_switches;

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

/* A value of dt: mostly gradients, some special bit patterns. */
static void fill(std::vector<uint8_t> &v, ibp_dtype_t dt, uint64_t n)
{
	uint64_t es = ibp_dtype_size(dt);
	v.resize(n * es + 1);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = rnd();
		if (dt == IBP_DTYPE_F32) {
			float f = (float)(((double)(r >> 11) / 9007199254740992.0 - 0.5) * ldexp(1.0, (int)(r % 40) - 20));
			if (r % 97 == 0)
				f = r % 2 ? INFINITY : NAN;
			else if (r % 89 == 0)
				f = 3.0e38f;
			memcpy(&v[i * 4], &f, 4);
		} else {
			uint16_t h = (uint16_t)(r >> 20);
			if (r % 5 == 0) /* same exponent band: sums that round halfway */
				h = (uint16_t)((h & 0x807f) | (dt == IBP_DTYPE_BF16 ? 0x3f00 : 0x3c00));
			memcpy(&v[i * 2], &h, 2);
		}
	}
}

static void reduce_case(ibp_dtype_t dt, uint64_t n)
{
	uint64_t es = ibp_dtype_size(dt);
	std::vector<uint8_t> a, b, cpu(n * es + 1);
	fill(a, dt, n);
	fill(b, dt, n);
	ibpi_coll_reduce_add(a.data(), b.data(), dt, n, cpu.data());
	Dev da(n * es, "part", (unsigned)es), db(n * es, "local", (unsigned)es), dd(n * es, "dst", (unsigned)es);
	memcpy(da.p, a.data(), n * es);
	memcpy(db.p, b.data(), n * es);
	ibp_status_t s = ibpi_coll_reduce_add_cuda(da.p, db.p, dt, n, dd.p, nullptr);
	CHECK(s == IBP_OK, "ibpi_coll_reduce_add_cuda %s n %llu: %s", ibp_dtype_name(dt), (unsigned long long)n,
	      ibp_last_error());
	CHECK(!memcmp(cpu.data(), dd.p, n * es), "ibpi_coll_reduce_add_cuda %s n %llu: bits differ from the CPU twin",
	      ibp_dtype_name(dt), (unsigned long long)n);
	CHECK(!memcmp(a.data(), da.p, n * es) && !memcmp(b.data(), db.p, n * es), "inputs modified");
}

/* ---- the collectives on device buffers, ranks as threads ---- */
enum { OP_AG, OP_RS, OP_AR, OP_A2A, OP_A2AV };
enum { T_INPROC, T_NCCL }; /* the transport: in-process, or NCCL (the stand-in, nccl_stub.cpp) */
struct RankJob {
	int rank, p, op, mem, tk;
	ncclComm_t user; /* T_NCCL: the caller's communicator */
	ibp_dtype_t dt;
	ibp_coll_codec_t codec;
	uint64_t n; /* count of the call (per rank for AG/RS's recv, the vector for AR) */
	const uint8_t *in;
	uint8_t *out;
	ibp_coll_inproc_t *w;
	ibp_status_t st;
	uint64_t compressed, native;
	char err[256];
	uint64_t wire; /* bytes this rank sent */
};

/* > 0: every rank's communicator gets a calibrated model with this link
 * (bytes/s) and policy AUTO, as calibration would leave it (the device
 * path then weighs rANS exponents, comm.c dev_calibrate) */
static double g_model_beta;

/* OP_A2AV: rank s sends n + s + 2 d elements to rank d, packed in rank
 * order from 0 (send) and by source (recv); the buffers hold the most. */
static uint64_t a2av_count(uint64_t n, int s, int d)
{
	return n + (uint64_t)s + 2 * (uint64_t)d;
}
static uint64_t in_elems(int op, uint64_t n, int p)
{
	if (op == OP_A2AV)
		return (uint64_t)p * (n + 3 * (uint64_t)p);
	return op == OP_RS || op == OP_A2A ? n * (uint64_t)p : n;
}
static uint64_t out_elems(int op, uint64_t n, int p)
{
	if (op == OP_A2AV)
		return (uint64_t)p * (n + 3 * (uint64_t)p);
	return op == OP_AG || op == OP_A2A ? n * (uint64_t)p : n;
}

static void *rank_main(void *arg)
{
	RankJob *j = (RankJob *)arg;
	const uint64_t esz = ibp_dtype_size(j->dt), ib = in_elems(j->op, j->n, j->p) * esz,
		       ob = out_elems(j->op, j->n, j->p) * esz;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = nullptr;
	ibp_coll_opts_t o; /* the codec on every call (no timing-driven choice), no calibration */
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	o.timeout_ms = 120000;
	o.policy = IBP_COLL_POLICY_ALWAYS;
	if (j->tk == T_NCCL) { /* a rank, a device */
		j->st = cudaSetDevice(j->rank) == cudaSuccess ? IBP_OK : IBP_ERR_CUDA;
		if (j->st == IBP_OK)
			j->st = ibp_coll_comm_from_nccl(&j->user, &o, &c);
	} else {
		j->st = ibp_coll_inproc_transport(j->w, j->rank, &t);
		if (j->st == IBP_OK)
			j->st = ibp_coll_comm_create(&t, &o, &c);
	}
	if (j->st == IBP_OK)
		j->st = ibp_coll_comm_set_memory(c, (ibp_coll_memory_t)j->mem);
	if (j->st == IBP_OK && g_model_beta > 0) {
		c->st.alpha_s = 1e-6;
		c->st.beta_Bps = g_model_beta;
		ibp_coll_comm_set_policy(c, IBP_COLL_POLICY_AUTO);
	}
	const void *in = j->in;
	void *out = j->out, *din = nullptr, *dout = nullptr;
	if (j->st == IBP_OK && j->mem == IBP_COLL_MEM_DEVICE) {
		j->st = ibp_cuda_malloc(ib + 1, &din);
		if (j->st == IBP_OK)
			j->st = ibp_cuda_malloc(ob + 1, &dout);
		if (j->st == IBP_OK)
			j->st = ibp_cuda_memcpy(din, j->in, ib, nullptr); /* pageable source: taken at the call */
		in = din;
		out = dout;
	}
	if (j->st == IBP_OK) {
		switch (j->op) {
		case OP_AG: j->st = ibp_coll_allgather(in, out, j->n, j->dt, j->codec, c, nullptr); break;
		case OP_RS: j->st = ibp_coll_reducescatter(in, out, j->n, j->dt, IBP_COLL_SUM, j->codec, c, nullptr); break;
		case OP_A2A: j->st = ibp_coll_alltoall(in, out, j->n, j->dt, j->codec, c, nullptr); break;
		case OP_A2AV: {
			std::vector<uint64_t> sc((size_t)j->p), sd((size_t)j->p), rc((size_t)j->p), rd((size_t)j->p);
			for (int d = 0, so = 0, ro = 0; d < j->p; d++) {
				sc[d] = a2av_count(j->n, j->rank, d);
				rc[d] = a2av_count(j->n, d, j->rank);
				sd[d] = (uint64_t)so;
				rd[d] = (uint64_t)ro;
				so += (int)sc[d];
				ro += (int)rc[d];
			}
			j->st = ibp_coll_alltoallv(in, sc.data(), sd.data(), out, rc.data(), rd.data(), j->dt, j->codec, c,
						   nullptr);
			break;
		}
		default: j->st = ibp_coll_allreduce(in, out, j->n, j->dt, IBP_COLL_SUM, j->codec, c, nullptr); break;
		}
	}
	snprintf(j->err, sizeof j->err, "%s", j->st == IBP_OK ? "" : ibp_last_error());
	if (j->st == IBP_OK && dout) /* to pageable memory: returns when done */
		j->st = ibp_cuda_memcpy(j->out, dout, ob, nullptr);
	if (c) {
		ibp_coll_stats_t cs;
		ibp_coll_comm_stats(c, &cs);
		j->compressed = cs.compressed;
		j->native = cs.native;
		j->wire = cs.wire_bytes;
	}
	ibp_coll_comm_free(c);
	ibp_cuda_free(din);
	ibp_cuda_free(dout);
	return nullptr;
}

/* Gradient-like values: a few exponents, so EXP compresses them. */
static void grad_fill(std::vector<uint8_t> &v, ibp_dtype_t dt, uint64_t n)
{
	fill(v, dt, n);
	for (uint64_t i = 0; i < n; i++) {
		const float f = (float)(((double)(rnd() >> 11) / 9007199254740992.0 - 0.5) * 0.02);
		if (dt == IBP_DTYPE_F32) {
			memcpy(&v[i * 4], &f, 4);
		} else {
			uint32_t u;
			memcpy(&u, &f, 4);
			const uint16_t h = dt == IBP_DTYPE_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(rnd() & 0x33FF);
			memcpy(&v[i * 2], &h, 2);
		}
	}
}

extern int emu_stub_devices;

static std::vector<uint8_t> run_ranks(int op, int mem, int p, ibp_dtype_t dt, ibp_coll_codec_t codec, uint64_t n,
				      const std::vector<std::vector<uint8_t>> &ins, uint64_t *compressed, int tk = T_INPROC,
				      uint64_t *native = nullptr, uint64_t *wire = nullptr)
{
	const uint64_t ob = out_elems(op, n, p) * ibp_dtype_size(dt);
	std::vector<uint8_t> outs((size_t)p * ob + 1, 0xA5);
	ibp_coll_inproc_t *w = nullptr;
	std::vector<ncclComm_t> comms((size_t)p, nullptr);
	if (tk == T_NCCL) {
		emu_stub_devices = std::max(emu_stub_devices, p);
		CHECK_NOW(ncclCommInitAll(comms.data(), p, nullptr) == ncclSuccess, "ncclCommInitAll");
	} else {
		OK(ibp_coll_inproc_create(p, &w));
	}
	std::vector<RankJob> jobs((size_t)p);
	std::vector<pthread_t> th((size_t)p);
	for (int r = 0; r < p; r++) {
		jobs[r] = RankJob{ r, p, op, mem, tk, comms[r], dt, codec, n, ins[r].data(), outs.data() + (uint64_t)r * ob, w,
				   IBP_OK, 0, 0, "", 0 };
		CHECK_NOW(pthread_create(&th[r], nullptr, rank_main, &jobs[r]) == 0, "pthread_create");
	}
	for (int r = 0; r < p; r++)
		pthread_join(th[r], nullptr);
	if (w)
		ibp_coll_inproc_free(w);
	for (ncclComm_t c : comms)
		if (c)
			ncclCommDestroy(c);
	for (int r = 0; r < p; r++)
		CHECK(jobs[r].st == IBP_OK, "coll %s op %d mem %d p %d %s %s n %llu rank %d: %s", tk ? "nccl" : "device", op,
		      mem, p, ibp_dtype_name(dt), ibp_coll_codec_name(codec), (unsigned long long)n, r, jobs[r].err);
	if (compressed)
		*compressed = jobs[0].compressed;
	if (native)
		*native = jobs[0].native;
	if (wire)
		*wire = jobs[0].wire;
	return outs;
}

static void device_suite(int quick)
{
	const ibp_dtype_t dts[] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	const ibp_coll_codec_t codecs[] = { IBP_COLL_CODEC_NONE, IBP_COLL_CODEC_EXP, IBP_COLL_CODEC_FP8 };
	const uint64_t sizes[] = { 1, 37, 1000, 3000 };
	uint64_t calls = 0;
	for (int p = 2; p <= 3; p++)
		for (int op = OP_AG; op <= OP_AR; op++)
			for (ibp_dtype_t dt : dts)
				for (uint64_t n : sizes) {
					if (quick && (n == 3000 ? dt != IBP_DTYPE_BF16 || p != 2 : (n + (uint64_t)op + (uint64_t)dt + (uint64_t)p) % 3 != 0))
						continue;
					std::vector<std::vector<uint8_t>> ins((size_t)p);
					for (int r = 0; r < p; r++)
						grad_fill(ins[r], dt, in_elems(op, n, p));
					const std::vector<uint8_t> plain =
						run_ranks(op, IBP_COLL_MEM_HOST, p, dt, IBP_COLL_CODEC_NONE, n, ins, nullptr);
					for (ibp_coll_codec_t cd : codecs) {
						uint64_t comp = 0;
						const std::vector<uint8_t> host = run_ranks(op, IBP_COLL_MEM_HOST, p, dt, cd, n, ins, nullptr);
						const std::vector<uint8_t> dev = run_ranks(op, IBP_COLL_MEM_DEVICE, p, dt, cd, n, ins, &comp);
						calls++;
						CHECK(host == dev, "coll device op %d p %d %s %s n %llu: device != host", op, p,
						      ibp_dtype_name(dt), ibp_coll_codec_name(cd), (unsigned long long)n);
						if (cd != IBP_COLL_CODEC_FP8)
							CHECK(dev == plain, "coll device op %d p %d %s %s n %llu: != none", op, p,
							      ibp_dtype_name(dt), ibp_coll_codec_name(cd), (unsigned long long)n);
						if (cd != IBP_COLL_CODEC_NONE)
							CHECK(comp == 1, "coll device %s: the codec did not run (%llu calls compressed)",
							      ibp_coll_codec_name(cd), (unsigned long long)comp);
					}
				}
	/* rANS exponents on the device path: with a slow link in the model each
	 * rank times both codings through the kernels on the calibration
	 * message and codes rANS; the wire shrinks, the results stay the host's */
	for (int op : { OP_AG, OP_AR }) {
		const int p = 2;
		const uint64_t n = 70000;
		std::vector<std::vector<uint8_t>> ins((size_t)p);
		for (int r = 0; r < p; r++)
			grad_fill(ins[r], IBP_DTYPE_BF16, in_elems(op, n, p));
		uint64_t comp = 0, w_tab = 0, w_rans = 0;
		const std::vector<uint8_t> plain =
			run_ranks(op, IBP_COLL_MEM_HOST, p, IBP_DTYPE_BF16, IBP_COLL_CODEC_NONE, n, ins, nullptr);
		const std::vector<uint8_t> tab = run_ranks(op, IBP_COLL_MEM_DEVICE, p, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, n,
							   ins, nullptr, T_INPROC, nullptr, &w_tab);
		g_model_beta = 1e3;
		const std::vector<uint8_t> rans = run_ranks(op, IBP_COLL_MEM_DEVICE, p, IBP_DTYPE_BF16, IBP_COLL_CODEC_EXP, n,
							    ins, &comp, T_INPROC, nullptr, &w_rans);
		g_model_beta = 0;
		calls += 2;
		CHECK(tab == plain && rans == plain, "coll device op %d rANS exponents: != none", op);
		CHECK(comp == 1, "coll device op %d rANS exponents: %llu calls compressed", op, (unsigned long long)comp);
		CHECK((double)w_rans < 0.98 * (double)w_tab, "coll device op %d: rANS sent %llu bytes, the table code %llu",
		      op, (unsigned long long)w_rans, (unsigned long long)w_tab);
	}
	printf("device: %llu collective calls on device buffers compared with the host path\n",
	       (unsigned long long)calls);
}

/* ---- the NCCL transport (src/coll/transport_nccl.c) on the NCCL stand-in
 * (nccl_stub.cpp): ranks as threads, a device each ---- */
extern "C" void emu_nccl_plant(const char *call, int r, int nth);

/* Runs body(rank, the rank's communicator) on p threads, rank r on device r. */
static void nccl_ranks(int p, const std::function<void(int, ncclComm_t)> &body)
{
	emu_stub_devices = std::max(emu_stub_devices, p);
	std::vector<ncclComm_t> comms((size_t)p, nullptr);
	CHECK_NOW(ncclCommInitAll(comms.data(), p, nullptr) == ncclSuccess, "ncclCommInitAll");
	struct A {
		const std::function<void(int, ncclComm_t)> *f;
		int r;
		ncclComm_t c;
	};
	std::vector<A> a((size_t)p);
	std::vector<pthread_t> th((size_t)p);
	for (int r = 0; r < p; r++) {
		a[r] = A{ &body, r, comms[r] };
		CHECK_NOW(pthread_create(&th[r], nullptr, [](void *v) -> void * {
			A *x = (A *)v;
			cudaSetDevice(x->r);
			(*x->f)(x->r, x->c);
			return nullptr;
		}, &a[r]) == 0, "pthread_create");
	}
	for (int r = 0; r < p; r++)
		pthread_join(th[r], nullptr);
	for (ncclComm_t c : comms)
		ncclCommDestroy(c);
}

static uint8_t pat(uint64_t j, int r, int i)
{
	return (uint8_t)(j * 31 + (uint64_t)r * 7 + (uint64_t)i * 13 + (j >> 9));
}

/* Messages around the first part's boundary (16 KiB - 8) and growing the
 * staging twice, host and device buffers, a ring and one-way exchanges. */
static void nccl_sendrecv_suite(int quick)
{
	const uint64_t sizes[] = { 0, 1, 100, 16375, 16376, 16377, 40000, 300000 };
	const int ns = (int)(sizeof sizes / sizeof sizes[0]);
	uint64_t calls = 0;
	for (int p = 2; p <= 3; p++)
		for (int mem = 0; mem < 2; mem++) {
			if (quick && p == 3 && mem == 1)
				continue;
			std::vector<std::string> errs((size_t)p);
			nccl_ranks(p, [&](int r, ncclComm_t user) {
				ibp_coll_transport_t t;
				if (ibp_coll_nccl_transport(&user, 120000, &t) != IBP_OK) {
					errs[r] = std::string("transport: ") + ibp_last_error();
					return;
				}
				const int dst = (r + 1) % p, src = (r + p - 1) % p;
				for (int i = 0; i < ns + 2 && errs[r].empty(); i++) {
					/* i < ns: the ring, rank r sends sizes[i] + r bytes; then one way 0 -> 1 */
					const bool ring = i < ns;
					const uint64_t sb = ring ? sizes[i] + (uint64_t)r : r == 0 ? 20000 + (uint64_t)i : 0;
					const uint64_t want = ring ? sizes[i] + (uint64_t)src : r == 1 ? 20000 + (uint64_t)i : 0;
					const int d = ring ? dst : r == 0 ? 1 : -1, s = ring ? src : r == 1 ? 0 : -1;
					if (!ring && r > 1)
						continue;
					std::vector<uint8_t> hs(sb + 1), hr(want + 64, 0xEE);
					for (uint64_t j = 0; j < sb; j++)
						hs[j] = pat(j, r, i);
					void *sbuf = hs.data(), *rbuf = hr.data();
					if (mem) {
						cudaMalloc(&sbuf, sb + 1);
						cudaMalloc(&rbuf, want + 64);
						cudaMemcpy(sbuf, hs.data(), sb + 1, cudaMemcpyHostToDevice);
						cudaMemcpy(rbuf, hr.data(), want + 64, cudaMemcpyHostToDevice);
					}
					uint64_t got = 7777;
					ibp_status_t st = t.sendrecv(t.ctx, d, sbuf, sb, s, rbuf, want + 64, &got, 120000);
					if (mem) {
						cudaMemcpy(hr.data(), rbuf, want + 64, cudaMemcpyDeviceToHost);
						cudaFree(sbuf);
						cudaFree(rbuf);
					}
					char m[200];
					if (st != IBP_OK) {
						snprintf(m, sizeof m, "call %d: %s", i, ibp_last_error());
						errs[r] = m;
					} else if (s >= 0 && got != want) {
						snprintf(m, sizeof m, "call %d: %llu bytes received, want %llu", i, (unsigned long long)got,
							 (unsigned long long)want);
						errs[r] = m;
					} else if (s >= 0) {
						for (uint64_t j = 0; j < want && errs[r].empty(); j++)
							if (hr[j] != pat(j, ring ? src : 0, i)) {
								snprintf(m, sizeof m, "call %d: byte %llu of %llu differs", i,
									 (unsigned long long)j, (unsigned long long)want);
								errs[r] = m;
							}
						for (uint64_t j = want; j < want + 64 && errs[r].empty(); j++)
							if (hr[j] != 0xEE)
								errs[r] = "call " + std::to_string(i) + ": written past the message";
					}
				}
				t.destroy(t.ctx);
			});
			for (int r = 0; r < p; r++) {
				CHECK(errs[r].empty(), "nccl sendrecv p %d %s rank %d: %s", p, mem ? "device" : "host", r,
				      errs[r].c_str());
				calls += ns + 2;
			}
		}
	printf("nccl: %llu sendrecv calls on the NCCL transport compared byte for byte\n", (unsigned long long)calls);
}

/* Values k/8, |k| <= 64: every order of summing 3 of them is exact in
 * bf16, f16 and f32, so NCCL's own reduction and the algorithms' agree. */
static void exact_fill(std::vector<uint8_t> &v, ibp_dtype_t dt, uint64_t n)
{
	const uint64_t es = ibp_dtype_size(dt);
	v.assign(n * es + 1, 0);
	for (uint64_t i = 0; i < n; i++) {
		const float f = (float)((int)(rnd() % 129) - 64) / 8.0f;
		uint32_t u;
		memcpy(&u, &f, 4);
		if (dt == IBP_DTYPE_F32) {
			memcpy(&v[i * 4], &f, 4);
		} else if (dt == IBP_DTYPE_BF16) {
			const uint16_t h = (uint16_t)(u >> 16);
			memcpy(&v[i * 2], &h, 2);
		} else { /* f16: sign, exponent rebased by -112, 10 mantissa bits (f is exact in f16) */
			uint16_t h = 0;
			if (f != 0.0f)
				h = (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff));
			memcpy(&v[i * 2], &h, 2);
		}
	}
}

/* The collectives on communicators made from NCCL (ibp_coll_comm_from_nccl):
 * plain calls on NCCL's own collectives (native), compressed ones on the
 * algorithms over the transport, host and device buffers; every result
 * equal to the in-process transport's. */
static void nccl_coll_suite(int quick)
{
	const ibp_dtype_t dts[] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	const ibp_coll_codec_t codecs[] = { IBP_COLL_CODEC_NONE, IBP_COLL_CODEC_EXP, IBP_COLL_CODEC_FP8 };
	const uint64_t sizes[] = { 1, 37, 1000, 5000 };
	uint64_t calls = 0, natives = 0;
	for (int p = 2; p <= 3; p++)
		for (int op = OP_AG; op <= OP_A2AV; op++)
			for (ibp_dtype_t dt : dts)
				for (uint64_t n : sizes) {
					if (quick && (n == 5000 ? dt != IBP_DTYPE_F32 || p != 2 || op >= OP_A2A
								: (n + (uint64_t)op + (uint64_t)dt + (uint64_t)p) % 3 != 0))
						continue;
					std::vector<std::vector<uint8_t>> ins((size_t)p);
					for (int r = 0; r < p; r++)
						exact_fill(ins[r], dt, in_elems(op, n, p));
					for (ibp_coll_codec_t cd : codecs) {
						if (op >= OP_A2A && cd != IBP_COLL_CODEC_NONE)
							continue;
						const std::vector<uint8_t> ref = run_ranks(op, IBP_COLL_MEM_HOST, p, dt, cd, n, ins, nullptr);
						uint64_t comp = 0, nat = 0;
						const std::vector<uint8_t> got =
							run_ranks(op, IBP_COLL_MEM_HOST, p, dt, cd, n, ins, &comp, T_NCCL, &nat);
						calls++;
						natives += nat;
						CHECK(got == ref, "coll nccl op %d p %d %s %s n %llu: != the in-process transport's", op, p,
						      ibp_dtype_name(dt), ibp_coll_codec_name(cd), (unsigned long long)n);
						CHECK(nat == (cd == IBP_COLL_CODEC_NONE ? 1u : 0u),
						      "coll nccl op %d %s: %llu native calls", op, ibp_coll_codec_name(cd),
						      (unsigned long long)nat);
						if (op >= OP_A2A || (quick && cd == IBP_COLL_CODEC_FP8))
							continue;
						const std::vector<uint8_t> dev =
							run_ranks(op, IBP_COLL_MEM_DEVICE, p, dt, cd, n, ins, &comp, T_NCCL, nullptr);
						calls++;
						CHECK(dev == ref, "coll nccl device op %d p %d %s %s n %llu: != the in-process transport's",
						      op, p, ibp_dtype_name(dt), ibp_coll_codec_name(cd), (unsigned long long)n);
					}
				}
	/* IBP_COLL_NCCL_NATIVE=0: plain calls on the algorithms, same results */
	setenv("IBP_COLL_NCCL_NATIVE", "0", 1);
	std::vector<std::vector<uint8_t>> ins(2);
	for (int r = 0; r < 2; r++)
		exact_fill(ins[r], IBP_DTYPE_F32, 3000);
	uint64_t nat = 9;
	const std::vector<uint8_t> a = run_ranks(OP_AR, IBP_COLL_MEM_HOST, 2, IBP_DTYPE_F32, IBP_COLL_CODEC_NONE, 3000, ins,
						 nullptr, T_NCCL, &nat);
	unsetenv("IBP_COLL_NCCL_NATIVE");
	const std::vector<uint8_t> b =
		run_ranks(OP_AR, IBP_COLL_MEM_HOST, 2, IBP_DTYPE_F32, IBP_COLL_CODEC_NONE, 3000, ins, nullptr);
	CHECK(a == b && nat == 0, "IBP_COLL_NCCL_NATIVE=0: %llu native calls, results %s", (unsigned long long)nat,
	      a == b ? "equal" : "differ");
	printf("nccl: %llu collective calls (%llu on NCCL's own) equal to the in-process transport's\n",
	       (unsigned long long)calls, (unsigned long long)natives);
}

/* Failures: each rank's status and message. */
struct Outcome {
	ibp_status_t st[2] = { IBP_OK, IBP_OK }, st2[2] = { IBP_OK, IBP_OK };
	std::string msg[2], msg2[2];
};

/* A two-rank exchange of `bytes` each way (rank 1 takes at most rcap1),
 * rank 0 with `plant` planted, rank 1 calling only when `peer_calls`;
 * the exchange's timeouts tmo0 and tmo1, rank 1's split's split1 (the
 * others' a generous one: a loaded machine must not fail the set-up). */
static Outcome nccl_failing(const char *plant, int res, uint64_t bytes, uint64_t rcap1, bool peer_calls, int64_t tmo0,
			    int64_t tmo1, int64_t split1 = 120000)
{
	Outcome o;
	nccl_ranks(2, [&](int r, ncclComm_t user) {
		ibp_coll_transport_t t;
		if (r == 0 && plant)
			emu_nccl_plant(plant, res, 1);
		o.st[r] = ibp_coll_nccl_transport(&user, r ? split1 : 120000, &t);
		o.msg[r] = o.st[r] == IBP_OK ? "" : ibp_last_error();
		if (o.st[r] != IBP_OK)
			return;
		std::vector<uint8_t> s(bytes + 1, 0x5A), rb(bytes + 1);
		uint64_t got = 0;
		if (r == 0 || peer_calls) {
			o.st[r] = t.sendrecv(t.ctx, 1 - r, s.data(), bytes, 1 - r, rb.data(), r ? rcap1 : bytes, &got,
					     r ? tmo1 : tmo0);
			o.msg[r] = o.st[r] == IBP_OK ? "" : ibp_last_error();
			/* after a failure the transport refuses at once */
			if (o.st[r] != IBP_OK) {
				o.st2[r] = t.sendrecv(t.ctx, 1 - r, s.data(), bytes, 1 - r, rb.data(), bytes, &got, 1000);
				o.msg2[r] = o.st2[r] == IBP_OK ? "" : ibp_last_error();
			}
		}
		t.destroy(t.ctx);
		emu_nccl_plant(nullptr, 0, 0);
	});
	return o;
}

static bool has(const std::string &m, const char *s)
{
	return m.find(s) != std::string::npos;
}

static void nccl_error_suite()
{
	/* arguments */
	ncclComm_t none = nullptr;
	ibp_coll_transport_t t;
	CHECK(ibp_coll_nccl_transport(nullptr, 1000, &t) == IBP_ERR_INVALID_ARG, "NULL communicator accepted");
	CHECK(ibp_coll_nccl_transport(&none, 1000, &t) == IBP_ERR_INVALID_ARG, "NULL ncclComm_t accepted");
	/* a peer that never calls: rank 0 times out, its communicator is aborted, later calls fail at once */
	Outcome o = nccl_failing(nullptr, 0, 100, 100, false, 300, 120000);
	CHECK(o.st[0] == IBP_ERR_IO && has(o.msg[0], "timeout") && has(o.msg[0], "aborted"), "peer absent: %d %s",
	      (int)o.st[0], o.msg[0].c_str());
	CHECK(o.st2[0] == IBP_ERR_IO && has(o.msg2[0], "aborted by an earlier failure"), "after the abort: %d %s",
	      (int)o.st2[0], o.msg2[0].c_str());
	/* a message longer than the receiver expects: its receiver fails, the sender's call completes */
	o = nccl_failing(nullptr, 0, 100, 50, true, 120000, 120000);
	CHECK(o.st[1] == IBP_ERR_INVALID_ARG && has(o.msg[1], "exceeds the expected 50 bytes"), "mismatch: %d %s",
	      (int)o.st[1], o.msg[1].c_str());
	CHECK(o.st[0] == IBP_OK, "mismatch, sender: %d %s", (int)o.st[0], o.msg[0].c_str());
	/* NCCL failing a call: its error string and the call's name; the peer times out */
	o = nccl_failing("ncclGroupEnd", ncclSystemError, 100, 100, true, 120000, 500);
	CHECK(o.st[0] == IBP_ERR_IO && has(o.msg[0], "ncclGroupEnd failed: unhandled system error") &&
		      has(o.msg[0], "planted"), "ncclGroupEnd: %d %s", (int)o.st[0], o.msg[0].c_str());
	CHECK(o.st[1] == IBP_ERR_IO && has(o.msg[1], "timeout"), "ncclGroupEnd, peer: %d %s", (int)o.st[1],
	      o.msg[1].c_str());
	o = nccl_failing("ncclSend", ncclInvalidArgument, 30000, 30000, true, 120000, 500);
	CHECK(o.st[0] == IBP_ERR_IO && has(o.msg[0], "ncclSend failed: invalid argument"), "ncclSend: %d %s",
	      (int)o.st[0], o.msg[0].c_str());
	/* the split failing: no transport; the other rank's split times out */
	o = nccl_failing("ncclCommSplit", ncclInternalError, 100, 100, true, 120000, 120000, 300);
	CHECK(o.st[0] == IBP_ERR_IO && has(o.msg[0], "ncclCommSplit failed: internal error"), "split: %d %s",
	      (int)o.st[0], o.msg[0].c_str());
	CHECK(o.st[1] == IBP_ERR_IO && has(o.msg[1], "timeout") && has(o.msg[1], "ncclCommSplit"), "split, peer: %d %s",
	      (int)o.st[1], o.msg[1].c_str());
	/* the connection failing under an operation (ncclCommGetAsyncError) */
	o = nccl_failing("async", ncclRemoteError, 100, 100, true, 120000, 500);
	CHECK(o.st[0] == IBP_ERR_IO && has(o.msg[0], "remote process exited"), "async error: %d %s", (int)o.st[0],
	      o.msg[0].c_str());
	printf("nccl: failures (absent peer, mismatch, failed calls, failed split, asynchronous error) reported\n");
}

/* The caller's own NCCL work in flight on its stream while the transport
 * works (finding 2 of the GPU-window issue): rank 0 posts an AllReduce on
 * its communicator, then exchanges; rank 1 exchanges first. A transport
 * that waits for the whole device (cudaFree) deadlocks here. */
static void nccl_user_work_suite()
{
	std::vector<std::string> errs(2);
	nccl_ranks(2, [&](int r, ncclComm_t user) {
		ibp_coll_transport_t t;
		if (ibp_coll_nccl_transport(&user, 120000, &t) != IBP_OK) {
			errs[r] = ibp_last_error();
			return;
		}
		cudaStream_t us;
		cudaStreamCreate(&us);
		float *g = nullptr;
		cudaMalloc((void **)&g, 1024 * sizeof(float));
		std::vector<float> h(1024, 1.0f + (float)r);
		cudaMemcpy(g, h.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice);
		std::vector<uint8_t> s(100000, (uint8_t)r), rb(100000);
		uint64_t got = 0;
		for (int step = 0; step < 3 && errs[r].empty(); step++) {
			if (r == 0 && step == 1)
				ncclAllReduce(g, g, 1024, ncclFloat32, ncclSum, user, us);
			if (step < 2 && t.sendrecv(t.ctx, 1 - r, s.data(), step ? 100000 : 20000, 1 - r, rb.data(), 100000, &got,
						   120000) != IBP_OK)
				errs[r] = ibp_last_error();
			if (r == 1 && step == 2)
				ncclAllReduce(g, g, 1024, ncclFloat32, ncclSum, user, us);
		}
		cudaStreamSynchronize(us);
		cudaMemcpy(h.data(), g, 1024 * sizeof(float), cudaMemcpyDeviceToHost);
		if (errs[r].empty() && (h[0] != 3.0f || h[1023] != 3.0f || rb[99999] != (uint8_t)(1 - r)))
			errs[r] = "wrong results";
		cudaFree(g);
		cudaStreamDestroy(us);
		t.destroy(t.ctx);
	});
	for (int r = 0; r < 2; r++)
		CHECK(errs[r].empty(), "nccl with the caller's work in flight, rank %d: %s", r, errs[r].c_str());
	printf("nccl: the caller's NCCL work in flight beside the transport's: no device-wide wait\n");
}

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "reduce|device|nccl|all", 0, "[--seed S] [--quick] [--defect N] [--preempt M]", &args))
		return 2;
	const std::string &suite = args.suite;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
	if (suite == "nccl" || suite == "all") {
		nccl_user_work_suite();
		nccl_sendrecv_suite(quick);
		nccl_error_suite();
		nccl_coll_suite(quick);
	}
	if (suite == "nccl") {
		printf("%s: %s (%d failures, seed %llu)\n", suite.c_str(), failures ? "FAILED" : "ALL OK", failures, seed);
		return failures != 0;
	}
	if (suite == "device" || suite == "all")
		device_suite(quick);
	if (suite == "device") {
		printf("%s: %s (%d failures, seed %llu)\n", suite.c_str(), failures ? "FAILED" : "ALL OK", failures, seed);
		return failures != 0;
	}
	const ibp_dtype_t dts[] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	const uint64_t ns[] = { 0, 1, 255, 256, 257, 1000, 4099, 70000 };
	for (ibp_dtype_t dt : dts)
		for (uint64_t n : ns)
			if (!quick || n < 10000)
				reduce_case(dt, n);
	/* errors: a bad dtype, NULL pointers */
	Dev d(16, "x");
	CHECK(ibpi_coll_reduce_add_cuda(d.p, d.p, IBP_DTYPE_U8, 4, d.p, nullptr) == IBP_ERR_INVALID_ARG, "bad dtype accepted");
	CHECK(ibpi_coll_reduce_add_cuda(nullptr, d.p, IBP_DTYPE_BF16, 4, d.p, nullptr) == IBP_ERR_INVALID_ARG, "NULL accepted");
	printf("emu: %llu launches, %llu GPU threads, %llu switches\n", (unsigned long long)emu_stat_launches,
	       (unsigned long long)emu_stat_fibers, (unsigned long long)emu_stat_switches);
	printf("%s: %s (%d failures, seed %llu)\n", suite.c_str(), failures ? "FAILED" : "ALL OK", failures, seed);
	return failures != 0;
}
