/* test_cuda_codecs.c - the CUDA exponent and FP8 codecs produce the CPU
 * reference's bytes (and decoded values), validate untrusted blocks on the
 * device, and the hardware FP8 conversion equals the CPU's on all 2^32
 * float32 inputs (a strided subset with IBP_TEST_QUICK=1).
 *
 * Every test first calls the public API: a build without CUDA answers
 * IBP_ERR_UNSUPPORTED, a machine without a usable GPU IBP_ERR_NO_DEVICE,
 * and the test skips with that message. Device memory comes from the CUDA
 * runtime, declared here as weak symbols: a CUDA build links the runtime
 * (libibp needs it), a build without CUDA leaves them NULL, so this file
 * compiles and links either way without the CUDA headers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "fp8/fp8_impl.h"
#include "testutil.h"
#include "gpu_main.h"

/* exits 77 (ctest: skipped) when no device is usable */
IBP_GPU_TEST_MAIN()

/* The CUDA runtime calls used here (cudaError_t is an int-sized enum;
 * cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2). */
#define TC_HAVE_CUDA_HEADERS 1
#define cudaSuccess 0
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2
extern int cudaMalloc(void **p, size_t n) __attribute__((weak));
extern int cudaFree(void *p) __attribute__((weak));
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind) __attribute__((weak));
extern int cudaMemset(void *p, int v, size_t n) __attribute__((weak));
extern int cudaDeviceSynchronize(void) __attribute__((weak));
extern int cudaGetDeviceCount(int *n) __attribute__((weak));

static int quick(void)
{
	const char *e = getenv("IBP_TEST_QUICK");
	return e && e[0] == '1';
}

/* Skips unless the library has CUDA and a device answers. */
static void require_gpu(void)
{
	ibp_status_t st = ibp_fp8_expand_cuda(NULL, 0, IBP_FP8_E4M3, NULL, NULL);
	if (st == IBP_ERR_UNSUPPORTED)
		cr_skip_test("libibp built without CUDA: %s", ibp_last_error());
	if (st == IBP_ERR_NO_DEVICE)
		cr_skip_test("no usable CUDA device: %s", ibp_last_error());
	cr_assert_eq(st, IBP_OK, "probe: %s", ibp_last_error());
	if (!cudaGetDeviceCount || !cudaMalloc || !cudaFree || !cudaMemcpy || !cudaMemset || !cudaDeviceSynchronize)
		cr_skip_test("the CUDA runtime is not linked into this test");
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		cr_skip_test("cudaGetDeviceCount found no device");
}

#ifdef TC_HAVE_CUDA_HEADERS

static void *dmalloc(size_t n)
{
	void *p = NULL;
	cr_assert_eq(cudaMalloc(&p, n ? n : 1), cudaSuccess);
	cr_assert_eq(cudaMemset(p, 0xA5, n ? n : 1), cudaSuccess); /* garbage, not zeros */
	return p;
}

static void h2d(void *d, const void *h, size_t n)
{
	cr_assert_eq(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess);
}

static void d2h(void *h, const void *d, size_t n)
{
	cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
	cr_assert_eq(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
}

static double gauss(tu_rng_t *r)
{
	double u = tu_uniform(r), v = tu_uniform(r);
	if (u < 1e-300)
		u = 1e-300;
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static size_t esz(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F32 ? 4 : 2;
}

/* Gaussian values with a sprinkle of specials; one chunk of random bits. */
static void gen(tu_rng_t *r, ibp_dtype_t dt, uint8_t *p, uint64_t n, double sigma)
{
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)(gauss(r) * sigma);
		uint64_t pick = tu_below(r, 1000);
		if (pick == 0)
			f = NAN;
		else if (pick == 1)
			f = -INFINITY;
		else if (pick == 2)
			f = 0.0f;
		if (dt == IBP_DTYPE_F32) {
			memcpy(p + 4 * i, &f, 4);
		} else {
			uint16_t h = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(f) : fp8i_f32_to_f16(f);
			memcpy(p + 2 * i, &h, 2);
		}
	}
}

/* One exponent-codec batch on both sides: bytes, sizes, decoding. */
static void exp_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, const ibp_exp_opts_t *o, tu_rng_t *r)
{
	size_t es = esz(dt);
	uint64_t nc = (n + chunk - 1) / chunk;
	uint8_t *src = tu_xcalloc(n * es + 1);
	gen(r, dt, src, n, 0.02);
	if (nc > 2)
		tu_fill_random(r, src + chunk * es, chunk * es); /* chunk 1: raw */
	uint64_t cap = 0, stride = 0, ws = 0;
	cr_assert_eq(ibp_exp_batch_bound(dt, n, chunk, &cap), IBP_OK);
	uint8_t *cpu = tu_xcalloc(cap);
	uint64_t *off = tu_xcalloc((nc + 1) * 8);
	cr_assert_eq(ibp_exp_encode_batch(src, dt, n, chunk, o, cpu, cap, off), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_exp_encode_bound(dt, chunk < n ? chunk : n, &stride), IBP_OK);
	stride = (stride + 127) / 128 * 128;
	cr_assert_eq(ibp_exp_encode_workspace_cuda(dt, n, chunk, &ws), IBP_OK);
	void *dsrc = dmalloc(n * es), *ddst = dmalloc(nc * stride), *dws = dmalloc(ws), *dsz = dmalloc(nc * 8);
	h2d(dsrc, src, n * es);
	cr_assert_eq(ibp_exp_encode_cuda(dsrc, dt, n, chunk, o, ddst, stride, dsz, dws, ws, NULL), IBP_OK, "%s",
		     ibp_last_error());
	uint8_t *gpu = tu_xcalloc(nc * stride);
	uint64_t *gsz = tu_xcalloc(nc * 8);
	d2h(gpu, ddst, nc * stride);
	d2h(gsz, dsz, nc * 8);
	for (uint64_t c = 0; c < nc; c++) {
		cr_assert_eq(gsz[c], off[c + 1] - off[c], "%s n=%llu chunk %llu: GPU size %llu, CPU %llu", ibp_dtype_name(dt),
			     (unsigned long long)n, (unsigned long long)c, (unsigned long long)gsz[c],
			     (unsigned long long)(off[c + 1] - off[c]));
		cr_assert(memcmp(gpu + c * stride, cpu + off[c], gsz[c]) == 0, "%s n=%llu chunk %llu: bytes differ",
			  ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)c);
	}
	/* decode the CPU's packed blocks on the GPU */
	void *dblk = dmalloc(off[nc] + 128), *doff = dmalloc(nc * 8), *dsizes = dmalloc(nc * 8), *dout = dmalloc(n * es),
	     *dst = dmalloc(4);
	uint64_t *sizes = tu_xcalloc(nc * 8);
	for (uint64_t c = 0; c < nc; c++)
		sizes[c] = off[c + 1] - off[c];
	h2d(dblk, cpu, off[nc]);
	h2d(doff, off, nc * 8);
	h2d(dsizes, sizes, nc * 8);
	cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK, "%s", ibp_last_error());
	int32_t status = -1;
	uint8_t *out = tu_xcalloc(n * es + 1);
	d2h(out, dout, n * es);
	d2h(&status, dst, 4);
	cr_assert_eq(status, IBP_OK);
	cr_assert(memcmp(out, src, n * es) == 0, "GPU decode differs");
	/* a block claimed past the buffer is reported */
	uint64_t big = off[nc] + 128;
	h2d(dsizes, &big, 8);
	cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK);
	d2h(&status, dst, 4);
	cr_assert_eq(status, IBP_ERR_CORRUPT);
	h2d(dsizes, sizes, 8);
	/* a corrupt block is reported */
	if (nc && off[1] > 64) {
		uint8_t bad = cpu[off[1] - 1] ^ 1;
		h2d((uint8_t *)dblk + off[1] - 1, &bad, 1);
		cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK);
		d2h(&status, dst, 4);
		/* the last byte of a block is padding or an escape: padding must be
		 * zero, an escape must stay outside the table; either way the CPU
		 * decides the same */
		uint8_t *c2 = tu_xcalloc(off[nc]);
		memcpy(c2, cpu, off[nc]);
		c2[off[1] - 1] = bad;
		ibp_status_t cst = ibp_exp_decode(c2, off[1], dt, chunk < n ? chunk : n, out, 1);
		cr_assert_eq(status == IBP_OK, cst == IBP_OK, "GPU status %d, CPU %d", status, cst);
		free(c2);
	}
	cudaFree(dblk);
	cudaFree(doff);
	cudaFree(dsizes);
	cudaFree(dout);
	cudaFree(dst);
	cudaFree(dsrc);
	cudaFree(ddst);
	cudaFree(dws);
	cudaFree(dsz);
	free(sizes);
	free(out);
	free(gpu);
	free(gsz);
	free(cpu);
	free(off);
	free(src);
}

#endif

Test(cuda_codecs, exp_gpu_bytes_equal_cpu)
{
	require_gpu();
#ifdef TC_HAVE_CUDA_HEADERS
	static const ibp_dtype_t dts[3] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};
	static const uint64_t shapes[][2] = {{1, 1}, {1000, 1000}, {4097, 4097}, {100000, 30000}, {1u << 20, 1u << 18},
					     {300001, 4096}};
	tu_rng_t r;
	tu_rng_seed(&r, 21);
	for (int d = 0; d < 3; d++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (int mode = 0; mode < 4; mode++) {
				ibp_exp_opts_t o;
				ibp_exp_opts_default(&o);
				o.checksum = 0; /* the device encoder writes none */
				if (mode == 1)
					o.sigma = 0.02;
				else if (mode == 2)
					o.table_mode = IBP_EXP_TABLE_HISTOGRAM;
				else if (mode == 3) {
					o.table_mode = IBP_EXP_TABLE_GIVEN;
					for (int k = 0; k < 7; k++)
						o.table.field[k] = (uint8_t)(dts[d] == IBP_DTYPE_F16 ? 4 + 2 * k : 110 + 2 * k);
				}
				exp_case(dts[d], shapes[s][0], shapes[s][1], &o, &r);
			}
#endif
}

/* rANS blocks (table mode RANS, made by the CPU) decode on the device to
 * the CPU's bytes; a damaged stream is refused where the CPU refuses it.
 * Verified so far only in the emulator (tests/emu, suite exp). */
Test(cuda_codecs, exp_rans_blocks_decode_on_gpu)
{
	require_gpu();
#ifdef TC_HAVE_CUDA_HEADERS
	static const ibp_dtype_t dts[3] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};
	static const uint64_t shapes[][2] = {{5000, 5000}, {70000, 70000}, {1u << 20, 300000}, {200000, 7000}};
	tu_rng_t r;
	tu_rng_seed(&r, 40);
	for (int d = 0; d < 3; d++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			ibp_dtype_t dt = dts[d];
			uint64_t n = shapes[s][0], chunk = shapes[s][1], nc = (n + chunk - 1) / chunk, cap = 0;
			size_t es = esz(dt);
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.checksum = 0;
			o.table_mode = IBP_EXP_TABLE_RANS;
			uint8_t *src = tu_xcalloc(n * es + 1), *out = tu_xcalloc(n * es + 1);
			gen(&r, dt, src, n, 0.02);
			cr_assert_eq(ibp_exp_batch_bound(dt, n, chunk, &cap), IBP_OK);
			uint8_t *cpu = tu_xcalloc(cap);
			uint64_t *off = tu_xcalloc((nc + 1) * 8), *sizes = tu_xcalloc(nc * 8);
			cr_assert_eq(ibp_exp_encode_batch(src, dt, n, chunk, &o, cpu, cap, off), IBP_OK, "%s", ibp_last_error());
			cr_assert_eq(cpu[6], 2, "%s n=%llu: the first block is not a rANS block", ibp_dtype_name(dt),
				     (unsigned long long)n);
			for (uint64_t c = 0; c < nc; c++)
				sizes[c] = off[c + 1] - off[c];
			void *dblk = dmalloc(off[nc]), *doff = dmalloc(nc * 8), *dsizes = dmalloc(nc * 8),
			     *dout = dmalloc(n * es), *dst = dmalloc(4);
			h2d(dblk, cpu, off[nc]);
			h2d(doff, off, nc * 8);
			h2d(dsizes, sizes, nc * 8);
			int32_t status = -1;
			cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK,
				     "%s", ibp_last_error());
			d2h(out, dout, n * es);
			d2h(&status, dst, 4);
			cr_assert_eq(status, IBP_OK, "%s n=%llu: status %d", ibp_dtype_name(dt), (unsigned long long)n, status);
			cr_assert(memcmp(out, src, n * es) == 0, "%s n=%llu: GPU rANS decode differs", ibp_dtype_name(dt),
				  (unsigned long long)n);
			/* a damaged byte in the first block's streams */
			uint64_t stat = 0;
			memcpy(&stat, cpu + 40, 8);
			uint8_t bad = cpu[stat + 6] ^ 0x5a;
			h2d((uint8_t *)dblk + stat + 6, &bad, 1);
			cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK);
			d2h(&status, dst, 4);
			cpu[stat + 6] = bad;
			ibp_status_t cst = ibp_exp_decode(cpu, off[1], dt, chunk < n ? chunk : n, out, 1);
			cr_assert_eq(status == IBP_OK, cst == IBP_OK, "damaged stream: GPU status %d, CPU %d", status, cst);
			cudaFree(dblk);
			cudaFree(doff);
			cudaFree(dsizes);
			cudaFree(dout);
			cudaFree(dst);
			free(src);
			free(out);
			free(cpu);
			free(off);
			free(sizes);
		}
#endif
}

#ifdef TC_HAVE_CUDA_HEADERS
/* Data for the rANS encode: 0 Gaussian with specials, 1 the same with 5%
 * NaN/Inf/subnormal/-0 of both signs, 2 one constant value, 3 random bits
 * (the fallback block wins), 4 one exponent (one symbol). */
static void gen_kind(tu_rng_t *r, ibp_dtype_t dt, uint8_t *p, uint64_t n, int kind)
{
	const size_t es = esz(dt);
	const uint32_t ebits = dt == IBP_DTYPE_F16 ? 5 : 8, mbits = dt == IBP_DTYPE_F32 ? 23 : dt == IBP_DTYPE_F16 ? 10 : 7;
	const uint32_t emax = (1u << ebits) - 1u, fixed = (uint32_t)tu_next(r);
	if (kind == 0 || kind == 1)
		gen(r, dt, p, n, 0.02);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)tu_next(r), sign = (u >> 31) << (es * 8 - 1), man = (u >> 3) & ((1u << mbits) - 1u), v;
		if (kind == 1) {
			if (tu_below(r, 20))
				continue;
			switch (u % 5) {
			case 0: v = sign | emax << mbits | (man | 1u); break; /* NaN */
			case 1: v = sign | emax << mbits; break;           /* +-Inf */
			case 2: v = sign | (man | 1u); break;               /* subnormal */
			case 3: v = 1u << (es * 8 - 1); break;              /* -0 */
			default: v = sign | (u % emax) << mbits | man; break;
			}
		} else if (kind == 2) {
			v = fixed;
		} else if (kind == 3) {
			v = u;
		} else if (kind == 4) {
			v = sign | ((fixed >> 8) % emax) << mbits | man;
		} else {
			continue;
		}
		memcpy(p + i * es, &v, es); /* little-endian low bytes */
	}
}

/* Table mode RANS on the device: the CPU's sizes and bytes (rANS or
 * fallback per block), then decoded back by the CPU and by the device.
 * kind 5: chunk c of kind c % 5. */
static void exp_rans_enc_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, int kind, tu_rng_t *r)
{
	size_t es = esz(dt);
	uint64_t nc = (n + chunk - 1) / chunk, cap = 0, stride = 0, ws = 0;
	uint8_t *src = tu_xcalloc(n * es + 1), *out = tu_xcalloc(n * es + 1);
	for (uint64_t c = 0; c < nc; c++)
		gen_kind(r, dt, src + c * chunk * es, n - c * chunk < chunk ? n - c * chunk : chunk,
			 kind == 5 ? (int)(c % 5) : kind);
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.checksum = 0;
	o.table_mode = IBP_EXP_TABLE_RANS;
	cr_assert_eq(ibp_exp_batch_bound(dt, n, chunk, &cap), IBP_OK);
	uint8_t *cpu = tu_xcalloc(cap);
	uint64_t *off = tu_xcalloc((nc + 1) * 8), *sizes = tu_xcalloc(nc * 8);
	cr_assert_eq(ibp_exp_encode_batch(src, dt, n, chunk, &o, cpu, cap, off), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_exp_encode_bound(dt, chunk < n ? chunk : n, &stride), IBP_OK);
	stride = (stride + 127) / 128 * 128;
	cr_assert_eq(ibp_exp_encode_workspace_cuda(dt, n, chunk, &ws), IBP_OK);
	void *dsrc = dmalloc(n * es), *ddst = dmalloc(nc * stride), *dws = dmalloc(ws), *dsz = dmalloc(nc * 8);
	h2d(dsrc, src, n * es);
	cr_assert_eq(ibp_exp_encode_cuda(dsrc, dt, n, chunk, &o, ddst, stride, dsz, dws, ws, NULL), IBP_OK, "%s",
		     ibp_last_error());
	uint8_t *gpu = tu_xcalloc(nc * stride), *packed = tu_xcalloc(off[nc] + 1);
	d2h(gpu, ddst, nc * stride);
	d2h(sizes, dsz, nc * 8);
	for (uint64_t c = 0; c < nc; c++) {
		cr_assert_eq(sizes[c], off[c + 1] - off[c], "%s n=%llu kind %d block %llu: GPU size %llu, CPU %llu",
			     ibp_dtype_name(dt), (unsigned long long)n, kind, (unsigned long long)c,
			     (unsigned long long)sizes[c], (unsigned long long)(off[c + 1] - off[c]));
		cr_assert(memcmp(gpu + c * stride, cpu + off[c], sizes[c]) == 0, "%s n=%llu kind %d block %llu: bytes differ",
			  ibp_dtype_name(dt), (unsigned long long)n, kind, (unsigned long long)c);
		memcpy(packed + off[c], gpu + c * stride, sizes[c]);
	}
	cr_assert_eq(ibp_exp_decode_batch(packed, off[nc], off, dt, n, chunk, out, 0), IBP_OK, "%s", ibp_last_error());
	cr_assert(memcmp(out, src, n * es) == 0, "%s n=%llu kind %d: CPU decode of the GPU blocks differs",
		  ibp_dtype_name(dt), (unsigned long long)n, kind);
	void *dblk = dmalloc(off[nc] + 128), *doff = dmalloc(nc * 8), *dsizes = dmalloc(nc * 8), *dout = dmalloc(n * es),
	     *dst = dmalloc(4);
	h2d(dblk, packed, off[nc]);
	h2d(doff, off, nc * 8);
	h2d(dsizes, sizes, nc * 8);
	cr_assert_eq(ibp_exp_decode_cuda(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dst, NULL), IBP_OK, "%s",
		     ibp_last_error());
	int32_t status = -1;
	memset(out, 0xA5, n * es);
	d2h(out, dout, n * es);
	d2h(&status, dst, 4);
	cr_assert_eq(status, IBP_OK);
	cr_assert(memcmp(out, src, n * es) == 0, "%s n=%llu kind %d: GPU decode of the GPU blocks differs",
		  ibp_dtype_name(dt), (unsigned long long)n, kind);
	cudaFree(dblk);
	cudaFree(doff);
	cudaFree(dsizes);
	cudaFree(dout);
	cudaFree(dst);
	cudaFree(dsrc);
	cudaFree(ddst);
	cudaFree(dws);
	cudaFree(dsz);
	free(src);
	free(out);
	free(cpu);
	free(off);
	free(sizes);
	free(gpu);
	free(packed);
}
#endif

/* Table mode RANS on the device writes the CPU encoder's bytes (mirrors
 * the emulator's check, tests/emu suite exp; verified there only so far). */
Test(cuda_codecs, exp_rans_gpu_encode_equals_cpu)
{
	require_gpu();
#ifdef TC_HAVE_CUDA_HEADERS
	static const ibp_dtype_t dts[3] = {IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32};
	static const uint64_t shapes[][3] = {{1, 1, 2},          {7, 3, 5},           {100, 100, 1},
					     {5000, 1000, 5},    {70000, 70000, 0},   {30000, 7000, 5},
					     {140000, 65536, 1}, {210000, 131077, 5}, {200000, 200000, 3},
					     {66000, 66000, 4},  {1u << 20, 300000, 5}, {3000000, 1u << 21, 0},
					     {65537, 1u << 20, 0}, {3000, 1000000, 4}};
	tu_rng_t r;
	tu_rng_seed(&r, 48);
	for (int d = 0; d < 3; d++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			exp_rans_enc_case(dts[d], shapes[s][0], shapes[s][1], (int)shapes[s][2], &r);
#endif
}

Test(cuda_codecs, fp8_hardware_conversion_equals_cpu, .timeout = 900)
{
	require_gpu();
#ifdef TC_HAVE_CUDA_HEADERS
	const uint64_t chunk = 1u << 26, stride = quick() ? 65537 : 1;
	float *h = malloc(chunk * 4);
	uint8_t *cpu = malloc(chunk), *gpu = malloc(chunk);
	cr_assert(h && cpu && gpu);
	void *dx = dmalloc(chunk * 4), *dq = dmalloc(chunk);
	for (int f = 0; f < 2; f++) {
		uint64_t bad = 0;
		for (uint64_t u0 = 0; u0 < (1ull << 32); u0 += chunk * stride) {
			uint64_t cnt = 0;
			for (uint64_t u = u0; u < (1ull << 32) && cnt < chunk; u += stride, cnt++) {
				uint32_t b = (uint32_t)u;
				memcpy(&h[cnt], &b, 4);
			}
			h2d(dx, h, cnt * 4);
			cr_assert_eq(ibp_fp8_convert_cuda(dx, cnt, (ibp_fp8_format_t)f, dq, NULL), IBP_OK);
			d2h(gpu, dq, cnt);
			cr_assert_eq(ibp_fp8_convert(h, cnt, (ibp_fp8_format_t)f, cpu), IBP_OK);
			for (uint64_t i = 0; i < cnt; i++)
				bad += cpu[i] != gpu[i];
		}
		cr_assert_eq(bad, 0, "%s: %llu conversions differ from the CPU", f ? "E5M2" : "E4M3", (unsigned long long)bad);
		/* all 256 codes decode identically */
		uint8_t c[256];
		float gv[256], cv[256];
		for (int i = 0; i < 256; i++)
			c[i] = (uint8_t)i;
		h2d(dq, c, 256);
		cr_assert_eq(ibp_fp8_expand_cuda(dq, 256, (ibp_fp8_format_t)f, dx, NULL), IBP_OK);
		d2h(gv, dx, 1024);
		ibp_fp8_expand(c, 256, (ibp_fp8_format_t)f, cv);
		cr_assert(memcmp(gv, cv, 1024) == 0);
	}
	cudaFree(dx);
	cudaFree(dq);
	free(h);
	free(cpu);
	free(gpu);
#endif
}

Test(cuda_codecs, fp8_codec_gpu_equals_cpu)
{
	require_gpu();
#ifdef TC_HAVE_CUDA_HEADERS
	static const ibp_dtype_t dts[3] = {IBP_DTYPE_F32, IBP_DTYPE_BF16, IBP_DTYPE_F16};
	static const uint64_t shapes[][2] = {{0, 0}, {1, 0}, {1000, 0}, {65536, 0}, {100000, 25000}, {300001, 65536}};
	tu_rng_t r;
	tu_rng_seed(&r, 22);
	for (int d = 0; d < 3; d++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (uint32_t B = 16; B <= 4096; B *= 4)
				for (int v = 0; v < 4; v++) {
					ibp_dtype_t dt = dts[d];
					uint64_t n = shapes[s][0], chunk = shapes[s][1] ? shapes[s][1] : (n ? n : 1);
					uint64_t nc = n ? (n + chunk - 1) / chunk : 1;
					ibp_fp8_opts_t o;
					ibp_fp8_opts_default(&o);
					o.checksum = 0; /* the device encoder writes none */
					o.block = B;
					o.format = (ibp_fp8_format_t)(v & 1);
					o.hadamard = v != 2;
					o.adaptive = v != 3;
					size_t es = esz(dt);
					uint8_t *src = tu_xcalloc(n * es + 4);
					gen(&r, dt, src, n, s % 2 ? 1e-3 : 30.0);
					uint64_t stride = 0;
					cr_assert_eq(ibp_fp8_encoded_size(&o, n < chunk ? n : chunk, &stride), IBP_OK);
					uint8_t *cpu = tu_xcalloc(nc * stride), *gpu = tu_xcalloc(nc * stride);
					for (uint64_t c = 0; c < nc; c++) {
						uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk, size = 0;
						if (!n)
							len = 0;
						cr_assert_eq(ibp_fp8_encode(src + c * chunk * es, dt, len, &o, cpu + c * stride, stride, &size),
							     IBP_OK);
					}
					void *dsrc = dmalloc(n * es + 4), *ddst = dmalloc(nc * stride), *dout = dmalloc(n * es + 4),
					     *dstat = dmalloc(4);
					h2d(dsrc, src, n * es + 4);
					cr_assert_eq(ibp_fp8_encode_cuda(dsrc, dt, n, chunk, &o, ddst, NULL), IBP_OK, "%s", ibp_last_error());
					d2h(gpu, ddst, nc * stride);
					for (uint64_t c = 0; c < nc; c++) {
						uint64_t len = n ? (n - c * chunk < chunk ? n - c * chunk : chunk) : 0, sz = 0;
						cr_assert_eq(ibp_fp8_encoded_size(&o, len, &sz), IBP_OK);
						cr_assert(memcmp(cpu + c * stride, gpu + c * stride, sz) == 0,
							  "%s n=%llu B=%u variant %d chunk %llu: bytes differ", ibp_dtype_name(dt),
							  (unsigned long long)n, B, v, (unsigned long long)c);
					}
					/* decode on the GPU: the CPU decoder's values, bit for bit */
					cr_assert_eq(ibp_fp8_decode_bounded_cuda(ddst, nc * stride, dt, n, chunk, &o, dout, dstat,
										 NULL), IBP_OK);
					int32_t st = -1;
					uint8_t *go = tu_xcalloc(n * es + 4), *co = tu_xcalloc(n * es + 4);
					d2h(go, dout, n * es);
					d2h(&st, dstat, 4);
					cr_assert_eq(st, IBP_OK);
					for (uint64_t c = 0; c < nc && n; c++) {
						uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
						cr_assert_eq(ibp_fp8_decode(cpu + c * stride, stride, dt, len, co + c * chunk * es, 1), IBP_OK);
					}
					cr_assert(memcmp(go, co, n * es) == 0, "decoded values differ");
					/* corrupt header -> status */
					uint8_t badv = 9;
					h2d((uint8_t *)ddst + 4, &badv, 1);
					cr_assert_eq(ibp_fp8_decode_bounded_cuda(ddst, nc * stride, dt, n, chunk, &o, dout, dstat,
										 NULL), IBP_OK);
					d2h(&st, dstat, 4);
					cr_assert_eq(st, IBP_ERR_CORRUPT);
					/* the deprecated entry point still decodes (the streams' own size) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
					cr_assert_eq(ibp_fp8_decode_cuda(ddst, dt, n, chunk, &o, dout, dstat, NULL), IBP_OK);
#pragma GCC diagnostic pop
					d2h(&st, dstat, 4);
					cr_assert_eq(st, IBP_ERR_CORRUPT);
					/* a source shorter than its streams: refused before any launch */
					uint64_t last = 0;
					cr_assert_eq(ibp_fp8_encoded_size(&o, n ? n - (nc - 1) * chunk : 0, &last), IBP_OK);
					cr_assert_eq(ibp_fp8_decode_bounded_cuda(ddst, (nc - 1) * stride + last - 1, dt, n, chunk,
										 &o, dout, dstat, NULL), IBP_ERR_CORRUPT);
					cudaFree(dsrc);
					cudaFree(ddst);
					cudaFree(dout);
					cudaFree(dstat);
					free(go);
					free(co);
					free(cpu);
					free(gpu);
					free(src);
				}
#endif
}

/* In every build the CUDA entry points answer with the status that build
 * and machine call for: without CUDA, IBP_ERR_UNSUPPORTED and nothing
 * checked; with CUDA, argument errors before the device check, then
 * IBP_ERR_NO_DEVICE without a device (an empty batch is fine with one). */
Test(cuda_codecs, entry_points_report_status)
{
	uint64_t ws = 0;
	ibp_status_t st = ibp_exp_encode_workspace_cuda(IBP_DTYPE_BF16, 1000, 1000, &ws);
	if (!ibp_cuda_built()) {
		cr_assert_eq(st, IBP_ERR_UNSUPPORTED);
		cr_assert_eq(ibp_exp_encode_cuda(NULL, IBP_DTYPE_BF16, 0, 1, NULL, NULL, 128, NULL, NULL, 0, NULL),
			     IBP_ERR_UNSUPPORTED);
		cr_assert_eq(ibp_fp8_encode_cuda(NULL, IBP_DTYPE_I8, 10, 0, NULL, NULL, NULL), IBP_ERR_UNSUPPORTED);
		cr_assert(strstr(ibp_last_error(), "without CUDA") != NULL, "%s", ibp_last_error());
		return;
	}
	cr_assert_eq(st, IBP_OK, "%s", ibp_last_error());
	cr_assert_gt(ws, 0);
	cr_assert_eq(ibp_fp8_encode_cuda(NULL, IBP_DTYPE_I8, 10, 0, NULL, NULL, NULL), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "dtype") != NULL, "%s", ibp_last_error());
	cr_assert_eq(ibp_exp_encode_cuda(NULL, IBP_DTYPE_BF16, 1000, 1000, NULL, NULL, 4096, NULL, NULL, ws, NULL),
		     IBP_ERR_INVALID_ARG);
	int ndev = 0;
	int gpu = ibp_cuda_device_count(&ndev) == IBP_OK && ndev > 0;
	st = ibp_exp_encode_cuda(NULL, IBP_DTYPE_BF16, 0, 1, NULL, NULL, 128, NULL, NULL, 0, NULL);
	cr_assert_eq(st, gpu ? IBP_OK : IBP_ERR_NO_DEVICE, "%d %s", st, ibp_last_error());
}

/* The bounded FP8 decode checks the source length on the host, before the
 * device check: a source shorter than the streams of this shape is corrupt
 * (nothing is read), one exactly as long passes the check. */
Test(cuda_codecs, fp8_decode_bound_checked_on_the_host)
{
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	void *src = (void *)(uintptr_t)4096, *dst = (void *)(uintptr_t)8192; /* never dereferenced */
	int32_t *stat = (int32_t *)(uintptr_t)12288;
	if (!ibp_cuda_built()) {
		cr_assert_eq(ibp_fp8_decode_bounded_cuda(src, 0, IBP_DTYPE_BF16, 1000, 0, &o, dst, stat, NULL),
			     IBP_ERR_UNSUPPORTED);
		return;
	}
	/* 1000 elements in chunks of 300: three streams at the stride of 300
	 * elements, then the last of 100 */
	uint64_t stride = 0, last = 0;
	cr_assert_eq(ibp_fp8_encoded_size(&o, 300, &stride), IBP_OK);
	cr_assert_eq(ibp_fp8_encoded_size(&o, 100, &last), IBP_OK);
	const uint64_t need = 3 * stride + last;
	cr_assert_lt(need, 4 * stride, "the last stream is shorter than its stride");
	cr_assert_eq(ibp_fp8_decode_bounded_cuda(src, need - 1, IBP_DTYPE_BF16, 1000, 300, &o, dst, stat, NULL),
		     IBP_ERR_CORRUPT);
	cr_assert(strstr(ibp_last_error(), "source bytes") != NULL, "%s", ibp_last_error());
	cr_assert_eq(ibp_fp8_decode_bounded_cuda(src, 0, IBP_DTYPE_BF16, 0, 0, &o, dst, stat, NULL), IBP_ERR_CORRUPT,
		     "an empty stream still has its 64-byte header");
	int ndev = 0;
	if (ibp_cuda_device_count(&ndev) == IBP_OK && ndev > 0)
		return; /* with a device the call would launch on these fake pointers */
	cr_assert_eq(ibp_fp8_decode_bounded_cuda(src, need, IBP_DTYPE_BF16, 1000, 300, &o, dst, stat, NULL),
		     IBP_ERR_NO_DEVICE, "%s", ibp_last_error());
}
