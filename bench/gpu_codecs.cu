/* gpu_codecs.cu - the exponent and FP8 kernels on this GPU, in GB/s.
 *
 * For each sample data set (datasets/sample: bf16 KV rows, f32 token
 * embeddings, f32 bag-of-words rows), replicated to --mb MiB in device
 * memory: ibp_exp_encode_cuda / ibp_exp_decode_cuda (lossless, chunks of
 * 64 Ki elements) and ibp_fp8_encode_cuda / ibp_fp8_decode_bounded_cuda
 * (lossy, streams of 1 Mi elements), each in uncompressed GB/s (bytes of
 * the tensor / time; median of --runs timed runs with CUDA events after
 * --warmup), beside the plain device-to-device cudaMemcpyAsync of the same
 * bytes (what a caller does without a codec). Checked before timing: the
 * exponent round trip gives back every byte, the first chunk's exponent
 * block and FP8 stream equal the CPU encoders' bytes, and the FP8 error
 * (relative L2 over the tensor) is reported. Runs in well under 30 s at
 * the default size on an H100/H200.
 *
 * Usage: gpu_codecs [--mb 256] [--runs 10] [--warmup 2] [--json]
 */
#include <cmath>

#include "gpu_bench.h"

struct Row {
	std::string data, codec;
	ibp_dtype_t dt;
	uint64_t bytes = 0;
	double ratio = 0, enc = 0, dec = 0, plain = 0, err = 0;
};

static double as_f64(const uint8_t *p, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32) {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, p + 2 * i, 2);
	uint32_t u = (uint32_t)h << 16; /* bf16 */
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void run(const std::string &path, uint64_t mb, int warmup, int runs, cudaStream_t s, std::vector<Row> &out)
{
	uint8_t *host = nullptr;
	uint64_t N = 0, R = 0;
	ibp_dtype_t dt;
	if (!npy_rows(path, mb << 20, &host, &N, &R, &dt))
		return;
	if (dt != IBP_DTYPE_F32 && dt != IBP_DTYPE_BF16) {
		fprintf(stderr, "gpu_codecs: skipping %s: dtype %s\n", path.c_str(), ibp_dtype_name(dt));
		ibp_pinned_free(host);
		return;
	}
	const std::string name = path.substr(path.find_last_of('/') + 1);
	const uint64_t es = dt == IBP_DTYPE_F32 ? 4 : 2, bytes = N * R, n = bytes / es;
	uint8_t *src = nullptr, *dst = nullptr, *back = nullptr;
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&dst, bytes));
	CK(cudaMalloc(&back, bytes));
	CK(cudaMemcpy(src, host, bytes, cudaMemcpyHostToDevice));
	const double gb = (double)bytes / 1e9;
	const float plain_ms = time_ms(s, warmup, runs, [&](int) {
		CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
	});
	std::vector<uint8_t> check(bytes);

	/* ---- exponent codec ---- */
	{
		const uint64_t chunk = 65536, nc = (n + chunk - 1) / chunk;
		uint64_t bound = 0, ws = 0;
		IK(ibp_exp_encode_bound(dt, chunk, &bound));
		const uint64_t stride = (bound + 127) & ~127ull;
		IK(ibp_exp_encode_workspace_cuda(dt, n, chunk, &ws));
		uint8_t *enc = nullptr, *wsp = nullptr;
		uint64_t *sizes = nullptr, *offs = nullptr;
		int32_t *status = nullptr;
		CK(cudaMalloc(&enc, nc * stride));
		CK(cudaMalloc(&wsp, ws ? ws : 1));
		CK(cudaMalloc(&sizes, nc * 8));
		CK(cudaMalloc(&offs, nc * 8));
		CK(cudaMalloc(&status, 4));
		std::vector<uint64_t> ho(nc), hs(nc);
		for (uint64_t c = 0; c < nc; c++)
			ho[c] = c * stride;
		CK(cudaMemcpy(offs, ho.data(), nc * 8, cudaMemcpyHostToDevice));
		ibp_exp_opts_t eo;
		ibp_exp_opts_default(&eo);
		eo.checksum = 0; /* the device writes none: compare with the CPU's unchecked block */
		IK(ibp_exp_encode_cuda(src, dt, n, chunk, &eo, enc, stride, sizes, wsp, ws, s));
		IK(ibp_exp_decode_cuda(enc, nc * stride, offs, sizes, dt, n, chunk, back, status, s));
		int32_t st = -1;
		CK(cudaMemcpyAsync(&st, status, 4, cudaMemcpyDeviceToHost, s));
		CK(cudaMemcpyAsync(hs.data(), sizes, nc * 8, cudaMemcpyDeviceToHost, s));
		CK(cudaMemcpyAsync(check.data(), back, bytes, cudaMemcpyDeviceToHost, s));
		CK(cudaStreamSynchronize(s));
		if (st != IBP_OK || memcmp(check.data(), host, bytes) != 0) {
			fprintf(stderr, "gpu_codecs: %s: exponent round trip failed (status %d)\n", name.c_str(), st);
			exit(1);
		}
		/* the first block equals the CPU encoder's */
		std::vector<uint8_t> cpu(stride), gpu(hs[0]);
		uint64_t coff[2] = { 0, 0 };
		IK(ibp_exp_encode_batch(host, dt, std::min(chunk, n), chunk, &eo, cpu.data(), stride, coff));
		const uint64_t csz = coff[1];
		CK(cudaMemcpy(gpu.data(), enc, hs[0], cudaMemcpyDeviceToHost));
		if (csz != hs[0] || memcmp(cpu.data(), gpu.data(), csz) != 0) {
			fprintf(stderr, "gpu_codecs: %s: the first exponent block differs from the CPU's\n", name.c_str());
			exit(1);
		}
		uint64_t total = 0;
		for (uint64_t v : hs)
			total += v;
		Row r;
		r.data = name, r.codec = "exp", r.dt = dt, r.bytes = bytes, r.plain = gb / (plain_ms * 1e-3);
		r.ratio = (double)bytes / (double)total;
		r.enc = gb / (time_ms(s, warmup, runs, [&](int) {
				      IK(ibp_exp_encode_cuda(src, dt, n, chunk, &eo, enc, stride, sizes, wsp, ws, s));
			      }) * 1e-3);
		r.dec = gb / (time_ms(s, warmup, runs, [&](int) {
				      IK(ibp_exp_decode_cuda(enc, nc * stride, offs, sizes, dt, n, chunk, back, status, s));
			      }) * 1e-3);
		out.push_back(r);
		CK(cudaFree(enc));
		CK(cudaFree(wsp));
		CK(cudaFree(sizes));
		CK(cudaFree(offs));
		CK(cudaFree(status));
	}

	/* ---- FP8 (TACO) ---- */
	{
		ibp_fp8_opts_t o;
		ibp_fp8_opts_default(&o);
		o.checksum = 0;
		const uint64_t chunk = 1u << 20, nc = (n + chunk - 1) / chunk;
		uint64_t stride = 0;
		IK(ibp_fp8_encoded_size(&o, std::min(chunk, n), &stride));
		uint8_t *enc = nullptr;
		int32_t *status = nullptr;
		CK(cudaMalloc(&enc, nc * stride));
		CK(cudaMalloc(&status, 4));
		IK(ibp_fp8_encode_cuda(src, dt, n, chunk, &o, enc, s));
		IK(ibp_fp8_decode_bounded_cuda(enc, nc * stride, dt, n, chunk, &o, back, status, s));
		int32_t st = -1;
		CK(cudaMemcpyAsync(&st, status, 4, cudaMemcpyDeviceToHost, s));
		CK(cudaMemcpyAsync(check.data(), back, bytes, cudaMemcpyDeviceToHost, s));
		CK(cudaStreamSynchronize(s));
		if (st != IBP_OK) {
			fprintf(stderr, "gpu_codecs: %s: FP8 decode status %d\n", name.c_str(), st);
			exit(1);
		}
		std::vector<uint8_t> cpu(stride), gpu(stride);
		uint64_t csz = 0;
		IK(ibp_fp8_encode(host, dt, std::min(chunk, n), &o, cpu.data(), stride, &csz));
		CK(cudaMemcpy(gpu.data(), enc, csz, cudaMemcpyDeviceToHost));
		if (memcmp(cpu.data(), gpu.data(), csz) != 0) {
			fprintf(stderr, "gpu_codecs: %s: the first FP8 stream differs from the CPU's\n", name.c_str());
			exit(1);
		}
		double num = 0, den = 0;
		for (uint64_t i = 0; i < n; i++) {
			double a = as_f64(host, dt, i), b = as_f64(check.data(), dt, i);
			num += (a - b) * (a - b);
			den += a * a;
		}
		Row r;
		r.data = name, r.codec = "fp8", r.dt = dt, r.bytes = bytes, r.plain = gb / (plain_ms * 1e-3);
		r.ratio = (double)bytes / (double)((nc - 1) * stride + csz);
		r.err = den > 0 ? std::sqrt(num / den) : 0;
		r.enc = gb / (time_ms(s, warmup, runs, [&](int) { IK(ibp_fp8_encode_cuda(src, dt, n, chunk, &o, enc, s)); }) *
			      1e-3);
		r.dec = gb / (time_ms(s, warmup, runs, [&](int) {
				      IK(ibp_fp8_decode_bounded_cuda(enc, nc * stride, dt, n, chunk, &o, back, status, s));
			      }) * 1e-3);
		out.push_back(r);
		CK(cudaFree(enc));
		CK(cudaFree(status));
	}
	CK(cudaFree(src));
	CK(cudaFree(dst));
	CK(cudaFree(back));
	ibp_pinned_free(host);
}

int main(int argc, char **argv)
{
	uint64_t mb = 256;
	int runs = 10, warmup = 2;
	bool json = false;
	for (BenchArgs g(argc, argv, "gpu_codecs [--mb 256] [--runs 10] [--warmup 2] [--json]"); g.next();) {
		if (g.is("--mb"))
			mb = g.u64();
		else if (g.is("--runs"))
			runs = atoi(g.value());
		else if (g.is("--warmup"))
			warmup = atoi(g.value());
		else if (g.is("--json"))
			json = true;
		else
			g.usage();
	}
	if (mb == 0 || runs < 1 || warmup < 0) {
		fprintf(stderr, "gpu_codecs: --mb and --runs must be > 0\n");
		return 2;
	}
	cudaDeviceProp prop;
	cudaStream_t s = bench_device(&prop);
	std::vector<Row> rows;
	for (const std::string &p : sample_npy())
		run(p, mb, warmup, runs, s, rows);
	if (rows.empty()) {
		fprintf(stderr, "gpu_codecs: no sample .npy files under %s/datasets/sample\n", source_dir().c_str());
		return 1;
	}
	if (json) {
		printf("{\"device\": \"%s\", \"runs\": %d, \"results\": [\n", prop.name, runs);
		for (size_t i = 0; i < rows.size(); i++) {
			const Row &r = rows[i];
			printf("  {\"data\": \"%s\", \"dtype\": \"%s\", \"codec\": \"%s\", \"bytes\": %llu, \"ratio\": %.4f, "
			       "\"encode_gbps\": %.2f, \"decode_gbps\": %.2f, \"plain_d2d_gbps\": %.2f, \"rel_l2\": %.3g}%s\n",
			       r.data.c_str(), ibp_dtype_name(r.dt), r.codec.c_str(), (unsigned long long)r.bytes, r.ratio,
			       r.enc, r.dec, r.plain, r.err, i + 1 < rows.size() ? "," : "");
		}
		printf("]}\n");
	} else {
		printf("device: %s; uncompressed GB/s (bytes of the tensor / time), median of %d runs; plain = "
		       "device-to-device cudaMemcpyAsync of the same bytes\n",
		       prop.name, runs);
		printf("%-24s %-5s %-4s %8s %7s %9s %9s %9s %9s %9s\n", "data", "dtype", "code", "MB", "ratio", "enc GB/s",
		       "dec GB/s", "plain", "dec/plain", "rel L2");
		for (const Row &r : rows)
			printf("%-24s %-5s %-4s %8.1f %7.3f %9.1f %9.1f %9.1f %8.2fx %9.2g\n", r.data.c_str(),
			       ibp_dtype_name(r.dt), r.codec.c_str(), (double)r.bytes / 1e6, r.ratio, r.enc, r.dec,
			       r.plain, r.dec / r.plain, r.err);
	}
	CK(cudaStreamDestroy(s));
	return 0;
}
