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
 * Usage: harness_coll reduce|device [--seed S] [--quick] [--preempt M] */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "ibp.h"
#include "coll/coll_mem.h"
}
#include "k_coll_reduce.inc"
#include "k_exp.inc"
#include "k_fp8.inc"
#include <pthread.h>

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
enum { OP_AG, OP_RS, OP_AR };
struct RankJob {
	int rank, p, op, mem;
	ibp_dtype_t dt;
	ibp_coll_codec_t codec;
	uint64_t n; /* count of the call (per rank for AG/RS's recv, the vector for AR) */
	const uint8_t *in;
	uint8_t *out;
	ibp_coll_inproc_t *w;
	ibp_status_t st;
	uint64_t compressed;
	char err[256];
};

static uint64_t in_elems(int op, uint64_t n, int p)
{
	return op == OP_RS ? n * (uint64_t)p : n;
}
static uint64_t out_elems(int op, uint64_t n, int p)
{
	return op == OP_AG ? n * (uint64_t)p : n;
}

static void *rank_main(void *arg)
{
	RankJob *j = (RankJob *)arg;
	const uint64_t esz = ibp_dtype_size(j->dt), ib = in_elems(j->op, j->n, j->p) * esz,
		       ob = out_elems(j->op, j->n, j->p) * esz;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *c = nullptr;
	j->st = ibp_coll_inproc_transport(j->w, j->rank, &t);
	ibp_coll_opts_t o; /* the codec on every call (no timing-driven choice), no calibration */
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	o.timeout_ms = 60000;
	o.policy = IBP_COLL_POLICY_ALWAYS;
	if (j->st == IBP_OK)
		j->st = ibp_coll_comm_create(&t, &o, &c);
	if (j->st == IBP_OK)
		j->st = ibp_coll_comm_set_memory(c, (ibp_coll_memory_t)j->mem);
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
	}
	ibp_coll_comm_destroy(c);
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

static std::vector<uint8_t> run_ranks(int op, int mem, int p, ibp_dtype_t dt, ibp_coll_codec_t codec, uint64_t n,
				      const std::vector<std::vector<uint8_t>> &ins, uint64_t *compressed)
{
	const uint64_t ob = out_elems(op, n, p) * ibp_dtype_size(dt);
	std::vector<uint8_t> outs((size_t)p * ob + 1, 0xA5);
	ibp_coll_inproc_t *w = nullptr;
	OK(ibp_coll_inproc_create(p, &w));
	std::vector<RankJob> jobs((size_t)p);
	std::vector<pthread_t> th((size_t)p);
	for (int r = 0; r < p; r++) {
		jobs[r] = RankJob{ r, p, op, mem, dt, codec, n, ins[r].data(), outs.data() + (uint64_t)r * ob, w, IBP_OK, 0, "" };
		CHECK_NOW(pthread_create(&th[r], nullptr, rank_main, &jobs[r]) == 0, "pthread_create");
	}
	for (int r = 0; r < p; r++)
		pthread_join(th[r], nullptr);
	ibp_coll_inproc_destroy(w);
	for (int r = 0; r < p; r++)
		CHECK(jobs[r].st == IBP_OK, "coll device op %d mem %d p %d %s %s n %llu rank %d: %s", op, mem, p,
		      ibp_dtype_name(dt), ibp_coll_codec_name(codec), (unsigned long long)n, r, jobs[r].err);
	if (compressed)
		*compressed = jobs[0].compressed;
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
	printf("device: %llu collective calls on device buffers compared with the host path\n",
	       (unsigned long long)calls);
}

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "reduce|device|all", 0, "[--seed S] [--quick] [--preempt M]", &args))
		return 2;
	const std::string &suite = args.suite;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
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
