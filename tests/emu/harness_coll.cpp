/* harness_coll.cpp - kernels/coll_reduce.cu, whole (its host launcher runs
 * against the H100 runtime stub), on the emulator, against its CPU twin
 * ibpi_coll_reduce_add (src/coll/coll_codec.c): the reduction step of the
 * collectives on device buffers, bit for bit, three dtypes, sizes around
 * the block and grid-stride boundaries, values that round halfway, cross
 * to Inf/denormals, and NaN. Output buffers are pre-filled with garbage
 * and followed by redzones (emulator memory), so a missed or extra store
 * shows. A binary of its own (harness_coll).
 * Usage: harness_coll reduce [--seed S] [--quick] [--preempt M] */
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

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "reduce|all", 0, "[--seed S] [--quick] [--preempt M]", &args))
		return 2;
	const std::string &suite = args.suite;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
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
