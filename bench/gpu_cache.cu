/* gpu_cache.cu - the GPU slab cache (ibp_cache_gather_cuda) on this GPU:
 * hit rate, PCIe bytes and throughput on a Zipf trace, beside what a user
 * does without libibp (the rows gathered on the CPU into a pinned stage,
 * as torch.index_select on a host table does, and copied to the device;
 * two stages, so a batch's gather overlaps the previous copy), beside
 * libibp's zero-copy gather of the plain pinned rows
 * (ibp_gather_plain_cuda) and the compressed store without a cache
 * (ibp_gather_cuda).
 *
 * Data: the sample .npy files (datasets/sample), replicated to --mb MiB of
 * plain rows (pinned), the IBP codec trained on the file's own rows. Trace:
 * --batches batches of --batch ids, Zipf(--zipf) over a random permutation
 * of the rows (a few hot rows, a long tail), the same ids for every method.
 * The cache holds --budget percent of the plain table's bytes. The first
 * quarter of the batches warms the cache; the rest is timed (CUDA events)
 * and counted (ibp_cache_stats). Before timing, the cache's output of the
 * first batch equals the plain gather's, byte for byte. Runs in well under
 * 30 s at the defaults on an H100/H200.
 *
 * Usage: gpu_cache [--mb 256] [--batch 4096] [--batches 64] [--zipf 1.0]
 *                  [--budget 5] [--json]
 */
#include <cmath>

#include "gpu_bench.h"

struct Opts {
	uint64_t mb = 256, batch = 4096, batches = 64;
	double zipf = 1.0, budget = 5.0;
	bool json = false;
};

struct Row {
	std::string data;
	uint64_t R = 0, N = 0;
	double saved = 0, hit = 0, pcie_cache = 0, pcie_store = 0, pcie_plain = 0;
	double gbps_cache = 0, gbps_store = 0, gbps_plain = 0, gbps_user = 0;
};

/* Zipf(s) ids over N rows: ranks by inverse CDF, mapped through a random
 * permutation so that hot rows are spread over the table. */
static std::vector<int64_t> zipf_ids(uint64_t N, uint64_t count, double s, uint64_t seed)
{
	const uint64_t K = std::min<uint64_t>(N, 1u << 20); /* ranks with their own weight */
	std::vector<double> cdf(K);
	double acc = 0;
	for (uint64_t k = 0; k < K; k++)
		cdf[k] = acc += 1.0 / std::pow((double)(k + 1), s);
	std::vector<uint64_t> perm(N);
	for (uint64_t i = 0; i < N; i++)
		perm[i] = i;
	for (uint64_t i = N - 1; i > 0; i--)
		std::swap(perm[i], perm[splitmix(seed) % (i + 1)]);
	std::vector<int64_t> ids(count);
	for (uint64_t i = 0; i < count; i++) {
		double u = (double)(splitmix(seed) >> 11) * 0x1.0p-53 * acc;
		uint64_t k = (uint64_t)(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
		if (k >= K) /* the tail beyond K ranks: uniform */
			k = K - 1 + splitmix(seed) % (N - K + 1);
		ids[i] = (int64_t)perm[std::min(k, N - 1)];
	}
	return ids;
}

static bool run(const Opts &o, const std::string &path, cudaStream_t s, Row *res)
{
	uint8_t *raw = nullptr;
	uint64_t N = 0, R = 0, n0 = 0;
	ibp_dtype_t dt;
	if (!npy_rows(path, o.mb << 20, &raw, &N, &R, &dt, &n0))
		return false;
	Row r;
	r.data = path.substr(path.find_last_of('/') + 1), r.R = R, r.N = N;
	ibp_codec_t *codec = nullptr;
	IK(ibp_codec_train(raw, n0, R, nullptr, &codec));
	uint8_t *comp = (uint8_t *)pinned(N * R);
	std::vector<uint64_t> off(N + 1);
	std::vector<uint8_t> flags(N), cl(N);
	IK(ibp_encode_batch(codec, raw, N, comp, N * R, off.data(), flags.data(), cl.data(), 0));
	r.saved = 1.0 - (double)off[N] / (double)(N * R);
	ibp_cuda_store_desc_t d = { codec, comp, off[N], off.data(), flags.data(),
				    ibp_codec_nclusters(codec) > 1 ? cl.data() : nullptr, N, IBP_CUDA_PAYLOAD_MAPPED };
	ibp_cuda_store_t *store = nullptr;
	IK(ibp_cuda_store_create(&d, 0, s, &store));
	int dev = 0;
	CK(cudaGetDevice(&dev));
	ibp_cache_opts_t co;
	ibp_cache_opts_default(&co);
	co.row_bytes = R;
	co.capacity_bytes = std::max<uint64_t>((uint64_t)(o.budget / 100.0 * (double)(N * R)), 64 * R);
	co.max_batch = o.batch;
	co.device = dev;
	ibp_cache_t *cache = nullptr;
	IK(ibp_cache_create(&co, &cache));

	const uint64_t B = o.batch, nb = o.batches, warm = std::max<uint64_t>(1, nb / 4);
	std::vector<int64_t> all = zipf_ids(N, B * nb, o.zipf, 0xCAC4E ^ R);
	int64_t *ids = nullptr;
	uint8_t *out = nullptr, *ref = nullptr;
	CK(cudaMalloc(&ids, B * nb * 8));
	CK(cudaMalloc(&out, B * R));
	CK(cudaMalloc(&ref, B * R));
	CK(cudaMemcpy(ids, all.data(), B * nb * 8, cudaMemcpyHostToDevice));
	/* correctness: the cache's first batch equals the plain gather */
	{
		std::vector<uint8_t> a(B * R), b(B * R);
		IK(ibp_gather_plain_cuda(raw, N, R, ids, B, ref, nullptr, nullptr, s));
		CK(cudaMemsetAsync(out, 0xA5, B * R, s));
		IK(ibp_cache_gather_cuda(cache, store, ids, B, out, nullptr, nullptr, IBP_CACHE_ADMIT, s));
		CK(cudaMemcpyAsync(a.data(), out, B * R, cudaMemcpyDeviceToHost, s));
		CK(cudaMemcpyAsync(b.data(), ref, B * R, cudaMemcpyDeviceToHost, s));
		CK(cudaStreamSynchronize(s));
		if (memcmp(a.data(), b.data(), B * R) != 0) {
			fprintf(stderr, "gpu_cache: %s: the cache's rows differ from the plain gather\n", r.data.c_str());
			exit(1);
		}
	}
	for (uint64_t q = 1; q < warm; q++)
		IK(ibp_cache_gather_cuda(cache, store, ids + q * B, B, out, nullptr, nullptr, IBP_CACHE_ADMIT, s));
	ibp_cache_stats_t st;
	IK(ibp_cache_stats(cache, &st, 1));
	const double timed = (double)(nb - warm) * (double)B * (double)R / 1e9; /* GB delivered */
	float ms = time_ms(s, 0, 1, [&](int) {
		for (uint64_t q = warm; q < nb; q++)
			IK(ibp_cache_gather_cuda(cache, store, ids + q * B, B, out, nullptr, nullptr, IBP_CACHE_ADMIT, s));
	});
	IK(ibp_cache_stats(cache, &st, 0));
	r.gbps_cache = timed / (ms * 1e-3);
	r.hit = st.requests ? (double)st.hits / (double)st.requests : 0;
	r.pcie_cache = (double)st.store_bytes;
	ms = time_ms(s, 0, 1, [&](int) {
		for (uint64_t q = warm; q < nb; q++)
			IK(ibp_gather_cuda(store, ids + q * B, B, out, nullptr, nullptr, s));
	});
	r.gbps_store = timed / (ms * 1e-3);
	ms = time_ms(s, 0, 1, [&](int) {
		for (uint64_t q = warm; q < nb; q++)
			IK(ibp_gather_plain_cuda(raw, N, R, ids + q * B, B, out, nullptr, nullptr, s));
	});
	r.gbps_plain = timed / (ms * 1e-3);
	/* the user's way: CPU gather, then one copy; a stage is refilled once
	 * its previous copy has finished */
	{
		uint8_t *stage[2] = { (uint8_t *)pinned(B * R), (uint8_t *)pinned(B * R) };
		cudaEvent_t done[2];
		for (int k = 0; k < 2; k++) {
			CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
			CK(cudaEventRecord(done[k], s));
		}
		ms = time_ms(s, 0, 1, [&](int) {
			for (uint64_t q = warm; q < nb; q++) {
				const int k = (int)(q & 1);
				CK(cudaEventSynchronize(done[k]));
				cpu_gather(raw, R, all.data() + q * B, B, stage[k]);
				CK(cudaMemcpyAsync(out, stage[k], B * R, cudaMemcpyHostToDevice, s));
				CK(cudaEventRecord(done[k], s));
			}
		});
		r.gbps_user = timed / (ms * 1e-3);
		for (int k = 0; k < 2; k++) {
			CK(cudaEventDestroy(done[k]));
			ibp_pinned_free(stage[k]);
		}
	}
	for (uint64_t k = warm * B; k < nb * B; k++) {
		r.pcie_store += (double)(off[all[k] + 1] - off[all[k]]);
		r.pcie_plain += (double)R;
	}
	*res = r;
	CK(cudaFree(ids));
	CK(cudaFree(out));
	CK(cudaFree(ref));
	ibp_cache_free(cache);
	ibp_cuda_store_free(store);
	ibp_codec_free(codec);
	ibp_pinned_free(comp);
	ibp_pinned_free(raw);
	return true;
}

int main(int argc, char **argv)
{
	Opts o;
	for (BenchArgs g(argc, argv, "gpu_cache [--mb 256] [--batch 4096] [--batches 64] [--zipf 1.0] [--budget 5] [--json]");
	     g.next();) {
		if (g.is("--mb"))
			o.mb = g.u64();
		else if (g.is("--batch"))
			o.batch = g.u64();
		else if (g.is("--batches"))
			o.batches = g.u64();
		else if (g.is("--zipf"))
			o.zipf = g.f64();
		else if (g.is("--budget"))
			o.budget = g.f64();
		else if (g.is("--json"))
			o.json = true;
		else
			g.usage();
	}
	if (!o.mb || !o.batch || o.batches < 2 || !(o.budget > 0 && o.budget <= 100) || !(o.zipf >= 0)) {
		fprintf(stderr, "gpu_cache: bad option values\n");
		return 2;
	}
	cudaDeviceProp prop;
	cudaStream_t s = bench_device(&prop);
	std::vector<Row> rows;
	for (const std::string &p : sample_npy()) {
		Row r;
		if (run(o, p, s, &r))
			rows.push_back(r);
	}
	if (rows.empty()) {
		fprintf(stderr, "gpu_cache: no sample .npy files under %s/datasets/sample\n", source_dir().c_str());
		return 1;
	}
	if (o.json) {
		printf("{\"device\": \"%s\", \"batch\": %llu, \"batches\": %llu, \"zipf\": %.3f, \"budget_pct\": %.2f, "
		       "\"results\": [\n",
		       prop.name, (unsigned long long)o.batch, (unsigned long long)o.batches, o.zipf, o.budget);
		for (size_t i = 0; i < rows.size(); i++) {
			const Row &r = rows[i];
			printf("  {\"data\": \"%s\", \"row_bytes\": %llu, \"rows\": %llu, \"saved\": %.4f, \"hit_rate\": %.4f, "
			       "\"pcie_bytes_cache\": %.0f, \"pcie_bytes_store\": %.0f, \"pcie_bytes_plain\": %.0f, "
			       "\"gbps_cache\": %.2f, \"gbps_store\": %.2f, \"gbps_plain\": %.2f, \"gbps_cpu_copy\": %.2f, "
			       "\"vs_cpu_copy\": %.3f}%s\n",
			       r.data.c_str(), (unsigned long long)r.R, (unsigned long long)r.N, r.saved, r.hit, r.pcie_cache,
			       r.pcie_store, r.pcie_plain, r.gbps_cache, r.gbps_store, r.gbps_plain, r.gbps_user,
			       r.gbps_cache / r.gbps_user, i + 1 < rows.size() ? "," : "");
		}
		printf("]}\n");
	} else {
		printf("device: %s; Zipf(%.2f) batches of %llu ids, cache %.1f%% of the plain table; GB/s = plain bytes "
		       "delivered / time; cpu+copy = the user's CPU gather (index_select) + copy, plain_zc = libibp's "
		       "zero-copy gather of uncompressed pinned rows\n",
		       prop.name, o.zipf, (unsigned long long)o.batch, o.budget);
		printf("%-24s %6s %6s %6s %10s %10s %10s %8s %8s %8s %9s %14s\n", "data", "row_B", "saved", "hit", "PCIe MB",
		       "store MB", "plain MB", "cache", "store", "plain_zc", "cpu+copy", "cache/cpu+copy");
		for (const Row &r : rows)
			printf("%-24s %6llu %5.1f%% %5.1f%% %10.1f %10.1f %10.1f %8.2f %8.2f %8.2f %9.2f %13.2fx\n",
			       r.data.c_str(), (unsigned long long)r.R, 100 * r.saved, 100 * r.hit, r.pcie_cache / 1e6,
			       r.pcie_store / 1e6, r.pcie_plain / 1e6, r.gbps_cache, r.gbps_store, r.gbps_plain, r.gbps_user,
			       r.gbps_cache / r.gbps_user);
	}
	CK(cudaStreamDestroy(s));
	return 0;
}
