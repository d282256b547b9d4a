/* gpu_gather.cu - the IBP paper's §6.1 gather benchmark on this GPU.
 *
 * Effective throughput (uncompressed bytes delivered to the GPU per second)
 * of gathering B random rows (duplicates allowed) of a store in pinned host
 * memory, decoded by ibp_gather_cuda, beside:
 *   ibp_device  the same gather from a store in device memory (slab cache path)
 *   plain_zc    an uncompressed zero-copy aligned gather (ibp_gather_plain_cuda)
 *   cpu+copy    a CPU gather into a pinned buffer + one cudaMemcpyAsync
 *   per_row     one cudaMemcpyAsync per row (on at most 8192 rows)
 *   ideal       the compressed bytes of the batch at the PCIe H2D bandwidth
 *               measured in this run (large pinned cudaMemcpyAsync)
 * Data: rows of 256 B, 1 KiB, 4 KiB, 32 KiB with synthetic masks removing
 * 10..90% of the bits (every row CLEAN, as in the paper's Figure 7), and real
 * rows from .npy files (by default those in the source tree's datasets/sample,
 * found from any working directory; $IBP_SOURCE_DIR overrides) with a trained
 * codec, replicated to the store size so that reads do not come from cache.
 * Each number is the median of --runs timed runs (CUDA events) after
 * --warmup runs, rotating over 4 id sets. The IBP output is checked against
 * the plain gather before timing.
 *
 * Usage: gpu_gather [--store-mb 512] [--batch N] [--runs 20] [--warmup 3]
 *                   [--sizes 256,1024,4096,32768] [--savings 10,30,50,70,90]
 *                   [--npy FILE]... [--no-synthetic] [--no-npy] [--json]
 */
#include <cmath>
#include <thread>

#include "gpu_bench.h"

static const int NSETS = 4;          /* id sets rotated over the runs */
static const uint64_t PER_ROW_MAX = 8192; /* rows timed for one-memcpy-per-row */

struct Opts {
	uint64_t store_mb = 512;
	uint64_t batch = 0; /* 0: min(100000, 128 MiB / row) */
	int runs = 20;
	int warmup = 3;
	std::vector<uint64_t> sizes{ 256, 1024, 4096, 32768 };
	std::vector<int> savings{ 10, 30, 50, 70, 90 };
	std::vector<std::string> npy;
	bool synthetic = true, use_npy = true, json = false;
};

struct Result {
	std::string name;
	uint64_t R = 0, N = 0, B = 0;
	double saved = 0; /* 1 - payload / raw bytes of the store */
	double ibp = 0, ibp_dev = 0, plain = 0, cpu_copy = 0, per_row = 0, ideal = 0;
};

static double pcie_gbps(cudaStream_t s)
{
	const uint64_t n = 256ull << 20;
	void *h = pinned(n), *d = nullptr;
	memset(h, 1, n);
	CK(cudaMalloc(&d, n));
	float ms = time_ms(s, 2, 10, [&](int) { CK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s)); });
	CK(cudaFree(d));
	ibp_pinned_free(h);
	return (double)n / (ms * 1e-3) / 1e9;
}

/* Gathers with every method for one data set: `raw` (pinned, N rows of R
 * bytes) and its encoding with `codec`. */
static Result run_case(const Opts &o, const std::string &name, const ibp_codec_t *codec, const uint8_t *raw,
		       uint64_t N, uint64_t R, double bw, cudaStream_t s)
{
	Result res;
	res.name = name;
	res.R = R;
	res.N = N;
	/* encode on the CPU into pinned memory: the store the GPU reads */
	uint8_t *comp = (uint8_t *)pinned(N * R);
	std::vector<uint64_t> off(N + 1);
	std::vector<uint8_t> flags(N), cl(N);
	IK(ibp_encode_batch(codec, raw, N, comp, N * R, off.data(), flags.data(), cl.data(), 0));
	res.saved = 1.0 - (double)off[N] / (double)(N * R);
	const uint8_t *clp = ibp_codec_nclusters(codec) > 1 ? cl.data() : nullptr;
	ibp_cuda_store_desc_t d = { codec, comp, off[N], off.data(), flags.data(), clp, N,
				    IBP_CUDA_PAYLOAD_MAPPED };
	ibp_cuda_store_t *st_pin = nullptr, *st_dev = nullptr;
	IK(ibp_cuda_store_create(&d, 0, s, &st_pin));
	d.payload_kind = IBP_CUDA_PAYLOAD_COPY_DEVICE;
	IK(ibp_cuda_store_create(&d, 0, s, &st_dev));

	const uint64_t B = o.batch ? o.batch : std::min<uint64_t>(100000, std::max<uint64_t>(1, (128ull << 20) / R));
	res.B = B;
	uint64_t seed = 0x1B9 ^ R ^ ((uint64_t)name.size() << 32);
	std::vector<std::vector<int64_t>> ids(NSETS, std::vector<int64_t>(B));
	std::vector<uint64_t> comp_bytes(NSETS, 0);
	int64_t *ids_d[NSETS];
	for (int q = 0; q < NSETS; q++) {
		for (uint64_t k = 0; k < B; k++) {
			uint64_t id = splitmix(seed) % N;
			ids[q][k] = (int64_t)id;
			comp_bytes[q] += off[id + 1] - off[id];
		}
		CK(cudaMalloc(&ids_d[q], B * 8));
		CK(cudaMemcpy(ids_d[q], ids[q].data(), B * 8, cudaMemcpyHostToDevice));
	}
	uint8_t *out = nullptr, *out2 = nullptr;
	CK(cudaMalloc(&out, B * R));
	CK(cudaMalloc(&out2, B * R));
	uint8_t *stage = (uint8_t *)pinned(B * R);

	/* correctness first: IBP (both stores) == plain gather of the raw rows */
	{
		int32_t *st_d = nullptr;
		CK(cudaMalloc(&st_d, B * 4));
		IK(ibp_gather_plain_cuda(raw, N, R, ids_d[0], B, out2, nullptr, nullptr, s));
		std::vector<uint8_t> a(B * R), b(B * R);
		CK(cudaMemcpyAsync(b.data(), out2, B * R, cudaMemcpyDeviceToHost, s));
		for (int k = 0; k < 2; k++) {
			CK(cudaMemsetAsync(out, 0xA5, B * R, s));
			IK(ibp_gather_cuda(k ? st_dev : st_pin, ids_d[0], B, out, nullptr, st_d, s));
			CK(cudaMemcpyAsync(a.data(), out, B * R, cudaMemcpyDeviceToHost, s));
			CK(cudaStreamSynchronize(s));
			if (memcmp(a.data(), b.data(), B * R) != 0) {
				fprintf(stderr, "gpu_gather: %s R %llu: IBP gather (%s store) differs from the raw rows\n",
					name.c_str(), (unsigned long long)R, k ? "device" : "pinned");
				exit(1);
			}
		}
		uint64_t nerr = 0;
		IK(ibp_cuda_store_errors(st_pin, &nerr, s));
		if (nerr) {
			fprintf(stderr, "gpu_gather: %s: %llu rows failed to decode\n", name.c_str(),
				(unsigned long long)nerr);
			exit(1);
		}
		CK(cudaFree(st_d));
	}

	const double bytes = (double)B * (double)R;
	float ms;
	ms = time_ms(s, o.warmup, o.runs, [&](int r) {
		IK(ibp_gather_cuda(st_pin, ids_d[r % NSETS], B, out, nullptr, nullptr, s));
	});
	res.ibp = bytes / (ms * 1e-3) / 1e9;
	ms = time_ms(s, o.warmup, o.runs, [&](int r) {
		IK(ibp_gather_cuda(st_dev, ids_d[r % NSETS], B, out, nullptr, nullptr, s));
	});
	res.ibp_dev = bytes / (ms * 1e-3) / 1e9;
	ms = time_ms(s, o.warmup, o.runs, [&](int r) {
		IK(ibp_gather_plain_cuda(raw, N, R, ids_d[r % NSETS], B, out, nullptr, nullptr, s));
	});
	res.plain = bytes / (ms * 1e-3) / 1e9;
	/* the CPU gather runs between the events (the stream is idle at the
	 * first one), so the elapsed time covers gather + copy */
	ms = time_ms(s, o.warmup, o.runs, [&](int r) {
		cpu_gather(raw, R, ids[r % NSETS].data(), B, stage);
		CK(cudaMemcpyAsync(out, stage, B * R, cudaMemcpyHostToDevice, s));
	});
	res.cpu_copy = bytes / (ms * 1e-3) / 1e9;
	const uint64_t B3 = std::min(B, PER_ROW_MAX);
	ms = time_ms(s, std::min(o.warmup, 1), std::max(o.runs / 4, 5), [&](int r) {
		const std::vector<int64_t> &v = ids[r % NSETS];
		for (uint64_t k = 0; k < B3; k++)
			CK(cudaMemcpyAsync(out + k * R, raw + (uint64_t)v[k] * R, R, cudaMemcpyHostToDevice, s));
	});
	res.per_row = (double)B3 * R / (ms * 1e-3) / 1e9;
	double cb = 0;
	for (int q = 0; q < NSETS; q++)
		cb += (double)comp_bytes[q] / NSETS;
	res.ideal = bytes / (cb / (bw * 1e9)) / 1e9;

	for (int q = 0; q < NSETS; q++)
		CK(cudaFree(ids_d[q]));
	CK(cudaFree(out));
	CK(cudaFree(out2));
	ibp_pinned_free(stage);
	ibp_cuda_store_free(st_pin);
	ibp_cuda_store_free(st_dev);
	ibp_pinned_free(comp);
	return res;
}

/* Rows of R bytes (R % 8 == 0) whose 64-bit chunks keep their top k bits
 * fixed: every row encodes CLEAN at R * (64 - k) / 64 bytes. */
static Result synthetic(const Opts &o, uint64_t R, int saving, double bw, cudaStream_t s)
{
	const unsigned k = (unsigned)std::lround(saving * 64.0 / 100.0);
	const uint64_t D = R / 8, N = std::max<uint64_t>(1024, (o.store_mb << 20) / R);
	std::vector<uint64_t> mask(D), bitval(D);
	uint64_t seed = 0xC0FFEE ^ R ^ (uint64_t)saving;
	for (uint64_t j = 0; j < D; j++) {
		mask[j] = k ? (k >= 64 ? ~0ull : ~0ull << (64 - k)) : 0;
		bitval[j] = splitmix(seed) & mask[j];
	}
	ibp_codec_t *codec = nullptr;
	IK(ibp_codec_create(R, 8, 1, mask.data(), bitval.data(), &codec));
	uint64_t *raw = (uint64_t *)pinned(N * R);
	for (uint64_t i = 0; i < N * D; i++) {
		uint64_t j = i % D;
		raw[i] = (splitmix(seed) & ~mask[j]) | bitval[j];
	}
	char name[64];
	snprintf(name, sizeof(name), "synthetic-%d%%", saving);
	Result r = run_case(o, name, codec, (const uint8_t *)raw, N, R, bw, s);
	ibp_pinned_free(raw);
	ibp_codec_free(codec);
	return r;
}

static bool from_npy(const Opts &o, const std::string &path, double bw, cudaStream_t s, Result *out)
{
	uint8_t *raw = nullptr;
	uint64_t N = 0, R = 0, n0 = 0;
	ibp_dtype_t dt;
	if (!npy_rows(path, o.store_mb << 20, &raw, &N, &R, &dt, &n0))
		return false;
	ibp_codec_t *codec = nullptr;
	IK(ibp_codec_train(raw, n0, R, nullptr, &codec)); /* on the file's rows, not the copies */
	std::string name = path.substr(path.find_last_of('/') + 1);
	*out = run_case(o, name, codec, raw, N, R, bw, s);
	ibp_pinned_free(raw);
	ibp_codec_free(codec);
	return true;
}

int main(int argc, char **argv)
{
	Opts o;
	for (BenchArgs g(argc, argv, "gpu_gather [--store-mb MB] [--batch N] [--runs N] [--warmup N] [--sizes a,b,..] "
				      "[--savings p,q,..] [--npy FILE]... [--no-synthetic] [--no-npy] [--json]");
	     g.next();) {
		if (g.is("--store-mb"))
			o.store_mb = g.u64();
		else if (g.is("--batch"))
			o.batch = g.u64();
		else if (g.is("--runs"))
			o.runs = std::max(1, atoi(g.value()));
		else if (g.is("--warmup"))
			o.warmup = std::max(0, atoi(g.value()));
		else if (g.is("--sizes"))
			o.sizes = parse_list(g.value());
		else if (g.is("--savings")) {
			o.savings.clear();
			for (uint64_t v : parse_list(g.value()))
				o.savings.push_back((int)v);
		} else if (g.is("--npy"))
			o.npy.push_back(g.value());
		else if (g.is("--no-synthetic"))
			o.synthetic = false;
		else if (g.is("--no-npy"))
			o.use_npy = false;
		else if (g.is("--json"))
			o.json = true;
		else
			g.usage();
	}
	if (o.use_npy && o.npy.empty())
		o.npy = sample_npy();
	cudaDeviceProp prop;
	cudaStream_t s = bench_device(&prop);
	const double bw = pcie_gbps(s);

	std::vector<Result> res;
	if (o.synthetic)
		for (uint64_t R : o.sizes) {
			if (R == 0 || R % 8) {
				fprintf(stderr, "gpu_gather: synthetic rows need a multiple of 8 bytes, skipping %llu\n",
					(unsigned long long)R);
				continue;
			}
			for (int sv : o.savings)
				res.push_back(synthetic(o, R, std::min(std::max(sv, 0), 100), bw, s));
		}
	if (o.use_npy)
		for (const std::string &p : o.npy) {
			Result r;
			if (from_npy(o, p, bw, s, &r))
				res.push_back(r);
		}

	if (o.json) {
		printf("{\"device\": \"%s\", \"pcie_h2d_gbps\": %.3f, \"runs\": %d, \"results\": [\n", prop.name, bw,
		       o.runs);
		for (size_t i = 0; i < res.size(); i++) {
			const Result &r = res[i];
			printf("  {\"data\": \"%s\", \"row_bytes\": %llu, \"store_rows\": %llu, \"batch\": %llu, "
			       "\"saved\": %.4f, \"ibp_pinned\": %.3f, \"ibp_device\": %.3f, \"plain_zc\": %.3f, "
			       "\"cpu_copy\": %.3f, \"per_row\": %.3f, \"ideal\": %.3f}%s\n",
			       r.name.c_str(), (unsigned long long)r.R, (unsigned long long)r.N,
			       (unsigned long long)r.B, r.saved, r.ibp, r.ibp_dev, r.plain, r.cpu_copy, r.per_row,
			       r.ideal, i + 1 < res.size() ? "," : "");
		}
		printf("]}\n");
	} else {
		printf("device: %s (%d SMs); PCIe H2D %.1f GB/s (pinned cudaMemcpyAsync of 256 MiB); "
		       "effective GB/s = uncompressed bytes delivered / time, median of %d runs\n",
		       prop.name, prop.multiProcessorCount, bw, o.runs);
		printf("%-26s %7s %6s %7s %8s %8s %8s %8s %8s %8s %9s\n", "data", "row_B", "saved%", "batch",
		       "ibp_pin", "ibp_dev", "plain_zc", "cpu+copy", "per_row", "ideal", "ibp/ideal");
		for (const Result &r : res)
			printf("%-26s %7llu %6.1f %7llu %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.1f%%\n", r.name.c_str(),
			       (unsigned long long)r.R, 100.0 * r.saved, (unsigned long long)r.B, r.ibp, r.ibp_dev,
			       r.plain, r.cpu_copy, r.per_row, r.ideal, 100.0 * r.ibp / r.ideal);
	}
	CK(cudaStreamDestroy(s));
	return 0;
}
