/* gpu_bench.h - what the GPU benchmarks (bench/gpu_*.cu) share: error
 * checks that end the program (a benchmark, not the library), the source
 * tree for datasets/sample, timing with CUDA events (medians), pinned
 * buffers and rows from the sample .npy files. */
#pragma once
#include <cuda_runtime.h>
#include <errno.h> /* program_invocation_short_name */
#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ibp.h"

#ifndef IBP_SOURCE_DIR
#define IBP_SOURCE_DIR "." /* where datasets/sample is looked for */
#endif

#define CK(x)                                                                                    \
	do {                                                                                     \
		cudaError_t e_ = (x);                                                            \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "%s: %s:%d: %s: %s\n", program_invocation_short_name,    \
				__FILE__, __LINE__, #x, cudaGetErrorString(e_));                 \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

#define IK(x)                                                                                    \
	do {                                                                                     \
		ibp_status_t s_ = (x);                                                           \
		if (s_ != IBP_OK) {                                                              \
			fprintf(stderr, "%s: %s:%d: %s: %s: %s\n", program_invocation_short_name, \
				__FILE__, __LINE__, #x, ibp_status_string(s_), ibp_last_error()); \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

/* The source tree (for datasets/sample) from any working directory:
 * $IBP_SOURCE_DIR, else the tree this file was compiled from, else
 * IBP_SOURCE_DIR. */
static inline std::string source_dir()
{
	const char *e = getenv("IBP_SOURCE_DIR");
	if (e && *e)
		return e;
	const std::string f = __FILE__;
	const size_t p = f.rfind("/bench/");
	if (p != std::string::npos && f[0] == '/')
		return f.substr(0, p);
	return IBP_SOURCE_DIR;
}

/* The sample .npy files of the source tree. */
static inline std::vector<std::string> sample_npy()
{
	std::vector<std::string> v;
	glob_t g;
	std::string pat = source_dir() + "/datasets/sample/*.npy";
	if (glob(pat.c_str(), 0, nullptr, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			v.push_back(g.gl_pathv[i]);
	globfree(&g);
	return v;
}

static inline uint64_t splitmix(uint64_t &s)
{
	uint64_t z = (s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline std::vector<uint64_t> parse_list(const char *s)
{
	std::vector<uint64_t> v;
	while (*s) {
		char *end;
		v.push_back(strtoull(s, &end, 10));
		s = *end == ',' ? end + 1 : end;
		if (end == s && *s)
			break;
	}
	return v;
}

static inline float median(std::vector<float> v)
{
	std::sort(v.begin(), v.end());
	size_t n = v.size();
	return n == 0 ? 0.0f : n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static inline void *pinned(uint64_t n)
{
	void *p = nullptr;
	IK(ibp_pinned_alloc(n ? n : 1, 4096, 0, &p));
	return p;
}

/* What a caller without libibp does for a batch of rows of a host table:
 * gathers them on the CPU (as torch.index_select does, on up to 8
 * threads) into a pinned stage, to copy it to the device in one call. */
static inline void cpu_gather(const uint8_t *raw, uint64_t R, const int64_t *ids, uint64_t B, uint8_t *stage)
{
	const unsigned nt = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
	std::vector<std::thread> th;
	for (unsigned t = 0; t < nt; t++)
		th.emplace_back([=] {
			for (uint64_t k = B * t / nt; k < B * (t + 1) / nt; k++)
				memcpy(stage + k * R, raw + (uint64_t)ids[k] * R, R);
		});
	for (auto &x : th)
		x.join();
}

/* Median milliseconds of f(run) between two events on stream s. */
template <class F>
static float time_ms(cudaStream_t s, int warmup, int runs, F f)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	std::vector<float> t;
	for (int r = 0; r < warmup + runs; r++) {
		CK(cudaStreamSynchronize(s));
		CK(cudaEventRecord(a, s));
		f(r);
		CK(cudaEventRecord(b, s));
		CK(cudaEventSynchronize(b));
		float ms = 0;
		CK(cudaEventElapsedTime(&ms, a, b));
		if (r >= warmup)
			t.push_back(ms);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return median(t);
}

/* Rows of an .npy file (bf16 bit patterns read as bf16), replicated to at
 * least `bytes` into pinned memory: *N rows of *R bytes (*n0 of them the
 * file's own). false (with a message) when the file cannot be read or is
 * not 2-D. */
static inline bool npy_rows(const std::string &path, uint64_t bytes, uint8_t **rows, uint64_t *N, uint64_t *R,
			    ibp_dtype_t *dt, uint64_t *n0_out = nullptr)
{
	ibp_npy_info_t info;
	void *data = nullptr;
	if (ibp_npy_load(path.c_str(), IBP_NPY_BF16, &info, &data) != IBP_OK || info.ndim < 2 || info.shape[0] == 0) {
		fprintf(stderr, "%s: skipping %s: %s\n", program_invocation_short_name, path.c_str(),
			info.ndim < 2 ? "not a 2-D array" : ibp_last_error());
		ibp_npy_free(data);
		return false;
	}
	const uint64_t n0 = info.shape[0], r = info.data_bytes / n0;
	const uint64_t n = std::max<uint64_t>(n0, (bytes + r - 1) / r);
	uint8_t *p = (uint8_t *)pinned(n * r);
	for (uint64_t i = 0; i < n; i++)
		memcpy(p + i * r, (const uint8_t *)data + (i % n0) * r, r);
	*rows = p, *N = n, *R = r, *dt = info.dtype;
	if (n0_out)
		*n0_out = n0;
	ibp_npy_free(data);
	return true;
}

/* Command-line options: for (BenchArgs g(argc, argv, USAGE); g.next();)
 * { if (g.is("--mb")) mb = g.u64(); ... else g.usage(); } */
struct BenchArgs {
	int argc, i = 0;
	char **argv;
	const char *use;
	BenchArgs(int c, char **v, const char *u) : argc(c), argv(v), use(u) {}
	bool next() { return ++i < argc; }
	bool is(const char *name) const { return strcmp(argv[i], name) == 0; }
	const char *value()
	{
		if (i + 1 >= argc) {
			fprintf(stderr, "%s: %s needs a value\n", program_invocation_short_name, argv[i]);
			exit(2);
		}
		return argv[++i];
	}
	uint64_t u64() { return strtoull(value(), nullptr, 10); }
	double f64() { return atof(value()); }
	[[noreturn]] void usage() const
	{
		fprintf(stderr, "%s: unknown option %s\nusage: %s\n", program_invocation_short_name, argv[i], use);
		exit(2);
	}
};

/* A usable device (else a message and exit 1), its properties and a
 * non-blocking stream. */
static inline cudaStream_t bench_device(cudaDeviceProp *prop)
{
	int ndev = 0;
	if (ibp_cuda_device_count(&ndev) != IBP_OK || ndev == 0) {
		fprintf(stderr, "%s: no usable GPU: %s\n", program_invocation_short_name, ibp_last_error());
		exit(1);
	}
	int dev = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(prop, dev));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	return s;
}
