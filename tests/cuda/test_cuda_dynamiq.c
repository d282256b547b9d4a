/* test_cuda_dynamiq.c - on a device: the DynamiQ hop and decode kernels
 * (kernels/dynamiq.cu) and the LSQ and PTS codecs (kernels/rcmoe.cu) produce the
 * CPU twins' bytes and values (the emulator checks the same in CI:
 * tests/emu/harness_dynamiq.cpp). Skipped (exit 77) without CUDA or a
 * device; device memory through weak CUDA runtime symbols, as
 * test_cuda_codecs.c does. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "coll/dynamiq.h"
#include "coll/dynamiq_simd.h"
#include "coll/rcmoe.h"
#include "cuda/dynamiq_cuda.h"
#include "cuda/rcmoe_cuda.h"
#include "gpu_main.h"
#include "testutil.h"

IBP_GPU_TEST_MAIN()

#define cudaSuccess 0
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2
extern int cudaMalloc(void **p, size_t n) __attribute__((weak));
extern int cudaFree(void *p) __attribute__((weak));
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind) __attribute__((weak));
extern int cudaDeviceSynchronize(void) __attribute__((weak));
extern int cudaGetDeviceCount(int *n) __attribute__((weak));

static void require_gpu(void)
{
	ibp_status_t st = ibp_fp8_expand_cuda(NULL, 0, IBP_FP8_E4M3, NULL, NULL);
	if (st == IBP_ERR_UNSUPPORTED)
		cr_skip_test("libibp built without CUDA: %s", ibp_last_error());
	if (st == IBP_ERR_NO_DEVICE)
		cr_skip_test("no usable CUDA device: %s", ibp_last_error());
	cr_assert_eq(st, IBP_OK, "probe: %s", ibp_last_error());
	if (!cudaGetDeviceCount || !cudaMalloc || !cudaFree || !cudaMemcpy || !cudaDeviceSynchronize)
		cr_skip_test("the CUDA runtime is not linked into this test");
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		cr_skip_test("cudaGetDeviceCount found no device");
}

static void *dup_dev(const void *h, size_t n)
{
	void *p = NULL;
	int e = cudaMalloc(&p, n ? n : 1);
	cr_assert_eq(e, cudaSuccess, "cudaMalloc(%zu): error %d", n, e);
	if (n && h) { /* h NULL: an output buffer, nothing to copy */
		e = cudaMemcpy(p, h, n, cudaMemcpyHostToDevice);
		cr_assert_eq(e, cudaSuccess, "cudaMemcpy(%p <- %p, %zu, H2D): error %d", p, h, n, e);
	}
	return p;
}

static void d2h(void *h, const void *d, size_t n)
{
	int e = cudaDeviceSynchronize();
	cr_assert_eq(e, cudaSuccess, "cudaDeviceSynchronize: error %d", e);
	e = cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
	cr_assert_eq(e, cudaSuccess, "cudaMemcpy(%zu, D2H): error %d", n, e);
}

Test(cuda_dynamiq, ring_hops_match_cpu)
{
	require_gpu();
	ibpi_coll_simd_set(COLL_SIMD_SCALAR);
	const int n = 4;
	const uint64_t d = 300000, J = (d + 255) / 256;
	tu_rng_t r;
	tu_rng_seed(&r, 5);
	float **x = malloc(n * sizeof *x), *st = calloc(2 * J, 4), *gst = calloc(2 * J, 4);
	void *dx[4];
	for (int w = 0; w < n; w++) {
		x[w] = malloc(d * 4);
		for (uint64_t i = 0; i < d; i++)
			x[w][i] = (float)((tu_uniform(&r) - 0.5) * exp(3.0 * (double)((i / 256) % 9) - 12.0));
		ibpi_dq_local_stats(x[w], d, st);
		for (uint64_t i = 0; i < 2 * J; i++)
			gst[i] += st[i];
		dx[w] = dup_dev(x[w], d * 4);
	}
	dq_cfg_t cfg;
	ibpi_dq_cfg_default(&cfg);
	dq_plan_t pl;
	cr_assert_eq(ibpi_dq_plan_make(&pl, &cfg, n, d, 3, gst), IBP_OK);
	dq_cuda_plan_t p = { d, cfg.seed, pl.seq, n, cfg.fresh, cfg.correlated, dup_dev(pl.q, J), dup_dev(pl.mu, J * 4),
			     dup_dev(pl.boff, J * 8), dup_dev(pl.lv, sizeof pl.lv), dup_dev(pl.tab, sizeof pl.tab) };
	uint64_t mc = 0;
	for (int k = 0; k < n; k++)
		mc = pl.cbytes[k] > mc ? pl.cbytes[k] : mc;
	uint8_t *a = malloc(mc), *cpu = malloc(mc), *gpu = malloc(mc);
	void *din = dup_dev(NULL, mc), *dout = dup_dev(NULL, mc), *dy = dup_dev(NULL, d * 4), *dst = dup_dev(NULL, 4);
	float *y = malloc(d * 4), *cy = malloc(d * 4);
	int32_t status;
	for (int k = 0; k < n; k++) {
		uint64_t cb = pl.cbytes[k];
		for (int t = 1; t <= n; t++) {
			int w = (k + t) % n;
			if (t > 1)
				cr_assert_eq(cudaMemcpy(din, a, cb, cudaMemcpyHostToDevice), cudaSuccess);
			cr_assert_eq(ibpi_dq_hop_cuda(&p, pl.lo[k], pl.lo[k + 1], t > 1 ? din : NULL, dx[w], w, dout, dst, NULL),
				     IBP_OK, "%s", ibp_last_error());
			d2h(gpu, dout, cb);
			d2h(&status, dst, 4);
			cr_assert_eq(status, IBP_OK);
			cr_assert_eq(ibpi_dq_hop(&pl, (uint64_t)k, t > 1 ? a : NULL, x[w], w, cpu), IBP_OK);
			cr_assert_arr_eq(cpu, gpu, cb, "chunk %d hop %d: bytes differ", k, t);
			memcpy(a, gpu, cb);
		}
		cr_assert_eq(cudaMemcpy(din, a, cb, cudaMemcpyHostToDevice), cudaSuccess);
		cr_assert_eq(ibpi_dq_decode_chunk_cuda(&p, pl.lo[k], pl.lo[k + 1], din, dy, dst, NULL), IBP_OK);
		d2h(y, dy, d * 4);
		cr_assert_eq(ibpi_dq_decode_chunk(&pl, (uint64_t)k, a, cy), IBP_OK);
		uint64_t e0 = pl.lo[k] * 256 < d ? pl.lo[k] * 256 : d, e1 = pl.lo[k + 1] * 256 < d ? pl.lo[k + 1] * 256 : d;
		cr_assert_arr_eq(cy + e0, y + e0, (e1 - e0) * 4, "chunk %d: decoded floats differ", k);
	}
	ibpi_dq_plan_free(&pl);
}

Test(cuda_dynamiq, lsq_matches_cpu)
{
	require_gpu();
	ibpi_coll_simd_set(COLL_SIMD_SCALAR);
	const uint64_t n = 100000, row = 256;
	tu_rng_t r;
	tu_rng_seed(&r, 6);
	uint16_t *src = malloc(n * 2), *co = malloc(n * 2), *go = malloc(n * 2);
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)((tu_uniform(&r) - 0.5) * exp((double)((i / 256) % 7) - 3.0));
		uint32_t u;
		memcpy(&u, &f, 4);
		src[i] = (uint16_t)(u >> 16);
	}
	uint64_t cap = ibpi_lsq_bytes(n, row, 4, 4), sz = 0;
	uint8_t *cpu = malloc(cap), *gpu = malloc(cap);
	cr_assert_eq(ibpi_lsq_encode(src, IBP_DTYPE_BF16, n, row, 4, 4, 99, cpu, cap, &sz), IBP_OK);
	void *ds = dup_dev(src, n * 2), *dout = dup_dev(NULL, cap), *dws = dup_dev(NULL, ibpi_lsq_cuda_workspace(n, row)),
	     *dst = dup_dev(NULL, 4), *dy = dup_dev(NULL, n * 2);
	int32_t status;
	cr_assert_eq(ibpi_lsq_encode_cuda(ds, IBP_DTYPE_BF16, n, row, 4, 4, 99, dout, dws, dst, NULL), IBP_OK);
	d2h(gpu, dout, cap);
	d2h(&status, dst, 4);
	cr_assert_eq(status, IBP_OK);
	cr_assert_arr_eq(cpu, gpu, cap, "stream bytes differ");
	cr_assert_eq(ibpi_lsq_decode_cuda(dout, cap, IBP_DTYPE_BF16, n, dy, dst, NULL), IBP_OK);
	d2h(go, dy, n * 2);
	cr_assert_eq(ibpi_lsq_decode(cpu, cap, IBP_DTYPE_BF16, n, co), IBP_OK);
	cr_assert_arr_eq(co, go, n * 2, "decoded values differ");
}

Test(cuda_dynamiq, pts_matches_cpu)
{
	require_gpu();
	ibpi_coll_simd_set(COLL_SIMD_SCALAR);
	const uint64_t k = 200001;
	tu_rng_t r;
	tu_rng_seed(&r, 8);
	float *g = malloc(k * 4), *acc = malloc(k * 4), *gacc = malloc(k * 4);
	for (uint64_t i = 0; i < k; i++) {
		g[i] = (float)((tu_uniform(&r) - 0.5) * exp((double)((i / 100) % 5) - 2.0));
		acc[i] = (float)tu_uniform(&r);
	}
	uint64_t cap = ibpi_pts_max_bytes(k), sz = 0, gsz = 0;
	uint8_t *cpu = malloc(cap), *gpu = malloc(cap);
	cr_assert_eq(ibpi_pts_encode(g, k, 0.5, 42, cpu, cap, &sz), IBP_OK);
	void *dg = dup_dev(g, k * 4), *dout = dup_dev(NULL, cap), *dws = dup_dev(NULL, ibpi_pts_cuda_workspace(k)),
	     *dsz = dup_dev(NULL, 8), *dst = dup_dev(NULL, 4), *dacc = dup_dev(acc, k * 4);
	int32_t status;
	cr_assert_eq(ibpi_pts_encode_cuda(dg, k, 0.5, 42, dout, dsz, dws, dst, NULL), IBP_OK, "%s", ibp_last_error());
	d2h(&status, dst, 4);
	d2h(&gsz, dsz, 8);
	cr_assert_eq(status, IBP_OK);
	cr_assert_eq(gsz, sz);
	d2h(gpu, dout, sz);
	cr_assert_arr_eq(cpu, gpu, sz, "stream bytes differ");
	cr_assert_eq(ibpi_pts_decode_add_cuda(dout, sz, k, dacc, dws, dst, NULL), IBP_OK);
	d2h(gacc, dacc, k * 4);
	d2h(&status, dst, 4);
	cr_assert_eq(status, IBP_OK);
	cr_assert_eq(ibpi_pts_decode_add(cpu, sz, k, acc), IBP_OK);
	cr_assert_arr_eq(acc, gacc, k * 4, "sums differ");
}
