/* harness_bag.cpp - the embedding-bag kernel (kernels/ibp_bag.cu, host part
 * src/cuda/ibp_bag_cudahost.c) on the emulator against its CPU twin
 * ibp_store_embedding_bag (src/store/bag.c): stores packed from the sample
 * datasets (datasets/sample: float32, bfloat16, and the float32 table as
 * float16) and random stores (both layouts), every mode (sum, weighted sum
 * fused and unfused, mean, max), int32 and int64 ids, empty bags, bags of
 * padding only, duplicate ids; every output byte must equal the CPU's. Then
 * the per-bag errors (an id out of range, offsets that decrease), the
 * store's error count and the synchronous argument errors.
 * Usage: harness_bag [bag] [--seed S] [--quick] [--defect N] [--data DIR] [--tmp DIR]
 * (run.sh builds and runs it; exit status 0 = all equal). */
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

#include "ibp/container.h"
#include "ibp/npy.h"
#include "ibp/store.h"
#include "ibp/bag.h"

#include "k_gather.inc"
#include "k_encode.inc"
#include "k_bag.inc"
#include "cuda/ibp_bag_cudahost.c"



#include "harness_check.h"
static uint64_t nbags_cmp, nrows_pooled, nxval; /* what was compared, for the summary */

/* Emulator device memory holding a copy of v (garbage-filled when empty). */
template <class T> struct Dev {
	T *p;
	size_t n;
	Dev(const std::vector<T> &v, const char *name) : n(v.size())
	{
		p = (T *)emu_dev_alloc(n * sizeof(T) + 1, 0, name);
		memset((void *)p, 0xA7, n * sizeof(T) + 1);
		if (n)
			memcpy((void *)p, v.data(), n * sizeof(T));
	}
	~Dev() { emu_dev_free(p); }
	Dev(const Dev &) = delete;
	Dev &operator=(const Dev &) = delete;
};

static std::string tmpdir = "/tmp", datadir;

/* Packs data into a store file, opens it, removes the file. */
static ibp_store_t *pack(const void *data, ibp_dtype_t dt, uint64_t rows, uint64_t cols, ibp_layout_t layout,
			 const char *name)
{
	const std::string path = tmpdir + "/bag-" + name + "." + std::to_string(getpid()) + ".ibp";
	const uint64_t shape[2] = { rows, cols };
	OK(ibp_pack(path.c_str(), data, dt, 2, shape, nullptr, layout));
	ibp_store_t *st = nullptr;
	OK(ibp_store_open(path.c_str(), IBP_OPEN_READ, &st));
	unlink(path.c_str());
	return st;
}

struct Bags {
	std::vector<int64_t> ids;
	std::vector<int64_t> offsets;
	std::vector<float> weights;
};

/* n_bags bags of 0..maxlen ids (some empty), duplicates and padding
 * occurrences mixed in; ids[0, lead) are never read (offsets[0] = lead). */
static Bags make_bags(uint64_t nrows, uint64_t n_bags, unsigned maxlen, int64_t padding)
{
	Bags b;
	const uint64_t lead = rnd() % 3;
	for (uint64_t i = 0; i < lead; i++)
		b.ids.push_back((int64_t)(rnd() % nrows));
	b.offsets.push_back((int64_t)lead);
	for (uint64_t k = 0; k < n_bags; k++) {
		unsigned len = (unsigned)(rnd() % (maxlen + 1));
		if (rnd() % 5 == 0)
			len = 0;
		const bool pad_only = padding >= 0 && rnd() % 8 == 0;
		for (unsigned j = 0; j < len; j++) {
			int64_t id = (int64_t)(rnd() % nrows);
			if (pad_only || (padding >= 0 && rnd() % 5 == 0))
				id = padding;
			else if (j && rnd() % 4 == 0)
				id = b.ids[b.ids.size() - 1]; /* a duplicate */
			b.ids.push_back(id);
		}
		b.offsets.push_back((int64_t)b.ids.size());
	}
	for (uint64_t i = 0; i < 2; i++) /* ids past offsets[n_bags]: not read either */
		b.ids.push_back((int64_t)(rnd() % nrows));
	for (size_t i = 0; i < b.ids.size(); i++) {
		/* mixed signs and magnitudes: weights whose products round */
		float w = (float)((int64_t)(rnd() % 2001) - 1000) / 37.0f;
		if (rnd() % 7 == 0)
			w = 0.0f;
		b.weights.push_back(w);
	}
	return b;
}

static const char *mode_name(int m)
{
	static const char *n[] = { "sum", "wsum", "wsum-unfused", "mean", "max" };
	return n[m];
}

/* One call of each twin on the same bags: outputs byte for byte. */
static void compare(ibp_store_t *st, ibp_cuda_store_t *cs, const char *name, int m, bool i64, int64_t padding,
		    uint64_t n_bags, unsigned maxlen)
{
	const uint64_t nrows = ibp_store_nrows(st), R = ibp_store_row_bytes(st);
	const ibp_dtype_t dt = ibp_store_dtype(st);
	Bags b = make_bags(nrows, n_bags, maxlen, padding);
	const ibp_bag_mode_t mode = m == 3 ? IBP_BAG_MEAN : m == 4 ? IBP_BAG_MAX : IBP_BAG_SUM;
	const unsigned flags = m == 2 ? IBP_BAG_UNFUSED_WEIGHTS : 0u;
	const bool wt = m == 1 || m == 2;
	std::vector<int32_t> ids32(b.ids.begin(), b.ids.end());
	const void *hids = i64 ? (const void *)b.ids.data() : (const void *)ids32.data();
	const ibp_dtype_t idt = i64 ? IBP_DTYPE_I64 : IBP_DTYPE_I32;
	const uint64_t n_ids = b.ids.size();
	std::vector<uint8_t> want(n_bags * R + 1, 0x5A);
	OK(ibp_store_embedding_bag(st, mode, flags, hids, idt, n_ids, b.offsets.data(), n_bags,
				   wt ? b.weights.data() : nullptr, padding, want.data(), 1));

	Dev<int64_t> d64(b.ids, "ids64");
	Dev<int32_t> d32(ids32, "ids32");
	Dev<int64_t> doff(b.offsets, "offsets");
	Dev<float> dw(b.weights, "weights");
	Dev<uint8_t> dout(std::vector<uint8_t>(n_bags * R), "out");
	Dev<int32_t> dst(std::vector<int32_t>(n_bags, 99), "status");
	OK(ibp_store_embedding_bag_cuda(cs, mode, flags, i64 ? (const void *)d64.p : (const void *)d32.p, idt, n_ids,
					doff.p, n_bags, wt ? dw.p : nullptr, padding, dt, dout.p, dst.p, nullptr));
	OK(ibp_cuda_sync(nullptr));
	uint64_t bad = 0;
	nbags_cmp += n_bags;
	for (int64_t i = b.offsets[0]; i < b.offsets[n_bags]; i++)
		nrows_pooled += b.ids[(size_t)i] != padding;
	for (uint64_t k = 0; k < n_bags; k++) {
		CHECK(dst.p[k] == IBP_OK, "%s %s: bag %llu status %d", name, mode_name(m), (unsigned long long)k,
		      dst.p[k]);
		if (memcmp(dout.p + k * R, want.data() + k * R, R) != 0 && bad++ == 0) {
			uint64_t e = 0;
			while (dout.p[k * R + e] == want[k * R + e])
				e++;
			CHECK(0, "%s %s %s padding %lld: bag %llu (%lld ids) differs from the CPU at byte %llu",
			      name, mode_name(m), i64 ? "int64" : "int32", (long long)padding, (unsigned long long)k,
			      (long long)(b.offsets[k + 1] - b.offsets[k]), (unsigned long long)e);
		}
	}
	if (bad)
		fprintf(stderr, "%s %s: %llu of %llu bags differ\n", name, mode_name(m), (unsigned long long)bad,
			(unsigned long long)n_bags);
}

/* Every mode, both id types, with and without padding. */
static void all_modes(ibp_store_t *st, const char *name, uint64_t n_bags, unsigned maxlen)
{
	ibp_cuda_store_t *cs = nullptr;
	OK(ibp_cuda_store_from_store(st, IBP_CUDA_PAYLOAD_COPY_DEVICE, 0, nullptr, &cs));
	nxval += ibp_cuda_store_codec(cs)->d.xmask != 0; /* rows that take the Xval walk */
	const uint64_t nrows = ibp_store_nrows(st);
	for (int m = 0; m < 5; m++) {
		const bool i64 = (m + rnd()) % 2 == 0;
		const int64_t padding = m % 2 ? (int64_t)(rnd() % nrows) : -1;
		compare(st, cs, name, m, i64, padding, n_bags, maxlen);
	}
	uint64_t nerr = 1;
	OK(ibp_cuda_store_errors(cs, &nerr, nullptr));
	CHECK(nerr == 0, "%s: %llu failed bags counted", name, (unsigned long long)nerr);
	ibp_cuda_store_free(cs);
}

/* Per-bag errors on the device and the synchronous argument checks. */
static void errors_case(ibp_store_t *st)
{
	ibp_cuda_store_t *cs = nullptr;
	OK(ibp_cuda_store_from_store(st, IBP_CUDA_PAYLOAD_COPY_DEVICE, 0, nullptr, &cs));
	const uint64_t nrows = ibp_store_nrows(st), R = ibp_store_row_bytes(st), nb = 6;
	const ibp_dtype_t dt = ibp_store_dtype(st);
	Bags b = make_bags(nrows, nb, 3, -1);
	for (uint64_t k = 0; k <= nb; k++) /* every bag one id at least */
		b.offsets[k] = (int64_t)k * 2;
	b.ids.resize(2 * nb + 2);
	for (auto &id : b.ids)
		id = (int64_t)(rnd() % nrows);
	std::vector<uint8_t> want(nb * R);
	OK(ibp_store_embedding_bag(st, IBP_BAG_SUM, 0, b.ids.data(), IBP_DTYPE_I64, b.ids.size(), b.offsets.data(), nb,
				   nullptr, -1, want.data(), 1));
	b.ids[3] = (int64_t)nrows; /* bag 1: out of range */
	b.ids[4] = -1;             /* bag 2: negative (not the padding: none) */
	Dev<int64_t> dids(b.ids, "ids");
	std::vector<int64_t> off = b.offsets;
	off[4] = off[3] - 1; /* bag 3 ends before it starts, bag 4 starts before the end of bag 3 */
	Dev<int64_t> doff(off, "offsets");
	Dev<uint8_t> dout(std::vector<uint8_t>(nb * R, 0x33), "out");
	Dev<int32_t> dst(std::vector<int32_t>(nb, 99), "status");
	OK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, b.ids.size(), doff.p, nb, nullptr, -1,
					dt, dout.p, dst.p, nullptr));
	OK(ibp_cuda_sync(nullptr));
	const int32_t st_want[6] = { IBP_OK, IBP_ERR_OUT_OF_RANGE, IBP_ERR_OUT_OF_RANGE, IBP_ERR_INVALID_ARG, IBP_OK,
				     IBP_OK };
	std::vector<uint8_t> zero(R, 0);
	for (uint64_t k = 0; k < nb; k++) {
		CHECK(dst.p[k] == st_want[k], "errors: bag %llu status %d, want %d", (unsigned long long)k, dst.p[k],
		      st_want[k]);
		if (st_want[k] != IBP_OK)
			CHECK(memcmp(dout.p + k * R, zero.data(), R) == 0, "errors: failed bag %llu not zeroed",
			      (unsigned long long)k);
	}
	CHECK(memcmp(dout.p, want.data(), R) == 0, "errors: bag 0 differs");
	CHECK(memcmp(dout.p + 5 * R, want.data() + 5 * R, R) == 0, "errors: bag 5 differs");
	uint64_t nerr = 0;
	OK(ibp_cuda_store_errors(cs, &nerr, nullptr));
	CHECK(nerr == 3, "errors: %llu failed bags counted, want 3", (unsigned long long)nerr);

	/* synchronous argument errors */
	std::vector<int64_t> hoff(b.offsets);
	std::vector<uint8_t> hout(nb * R);
	CHECK(ibp_store_embedding_bag_cuda(nullptr, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1,
					   dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "NULL store");
	CHECK(ibp_store_embedding_bag_cuda(cs, (ibp_bag_mode_t)3, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1,
					   dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "bad mode");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 4, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1,
					   dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "bad flags");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_U32, 1, doff.p, nb, nullptr, -1,
					   dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "bad id dtype");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_MEAN, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, (const float *)dout.p,
					   -1, dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "weights with mean");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr,
					   (int64_t)nrows, dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG,
	      "padding_idx = nrows");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -2, dt,
					   dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "padding_idx = -2");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1,
					   IBP_DTYPE_I8, dout.p, nullptr, nullptr) == IBP_ERR_UNSUPPORTED, "int8 rows");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, nullptr, nb, nullptr, -1, dt,
					   dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "NULL offsets");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, hoff.data(), nb, nullptr, -1,
					   dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "pageable offsets");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1, dt,
					   hout.data(), nullptr, nullptr) == IBP_ERR_INVALID_ARG, "pageable out");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1, dt,
					   dout.p + 1, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "misaligned out");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, (const int32_t *)dids.p + 1, IBP_DTYPE_I64, 1, doff.p, nb,
					   nullptr, -1, dt, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG, "misaligned ids");
	CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, 0, nullptr, -1, dt,
					   nullptr, nullptr, nullptr) == IBP_OK, "no bags");
	if (R % 4 == 2)
		CHECK(ibp_store_embedding_bag_cuda(cs, IBP_BAG_SUM, 0, dids.p, IBP_DTYPE_I64, 1, doff.p, nb, nullptr, -1,
						   IBP_DTYPE_F32, dout.p, nullptr, nullptr) == IBP_ERR_INVALID_ARG,
		      "rows of odd 16-bit elements as float32");
	ibp_cuda_store_free(cs);
}

static uint16_t to_f16(float f)
{
	return fp8i_f32_to_f16(f);
}

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "bag", "bag", "[--seed S] [--quick] [--defect N] [--data DIR] [--tmp DIR]", &args))
		return 2;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
	if (args.data)
		datadir = args.data;
	if (args.tmp)
		tmpdir = args.tmp;
	if (datadir.empty()) {
		const char *self = __FILE__; /* tests/emu/harness_bag.cpp -> the repository's datasets/sample */
		std::string s(self);
		const size_t at = s.rfind("tests/emu/");
		datadir = (at == std::string::npos ? std::string(".") : s.substr(0, at)) + "datasets/sample";
	}
	const uint64_t nb = quick ? 24 : 64;
	const unsigned maxlen = quick ? 8 : 16;

	/* the committed sample tables: float32, bfloat16, float32 as float16 */
	static const char *files[] = { "minilm_tok_emb_f32.npy", "minilm_kv_bf16.npy" };
	std::vector<float> f32rows;
	uint64_t f32n = 0, f32d = 0;
	for (const char *f : files) {
		const std::string path = datadir + "/" + f;
		ibp_npy_info_t info;
		void *data = nullptr;
		if (ibp_npy_load(path.c_str(), IBP_NPY_BF16, &info, &data) != IBP_OK || info.ndim != 2) {
			CHECK(0, "cannot read %s: %s", path.c_str(), ibp_last_error());
			ibp_npy_free(data);
			continue;
		}
		/* a few hundred rows keep the emulator fast; the codec is trained on them */
		const uint64_t rows = info.shape[0] < 256 ? info.shape[0] : 256, cols = info.shape[1];
		ibp_store_t *st = pack(data, info.dtype, rows, cols, IBP_LAYOUT_PACKED, f);
		if (info.dtype == IBP_DTYPE_F32) {
			f32rows.assign((const float *)data, (const float *)data + rows * cols);
			f32n = rows;
			f32d = cols;
		}
		ibp_npy_free(data);
		all_modes(st, f, nb, maxlen);
		if (info.dtype == IBP_DTYPE_F32)
			errors_case(st);
		ibp_store_close(st);
	}
	if (f32n) {
		std::vector<uint16_t> h(f32rows.size());
		for (size_t i = 0; i < h.size(); i++)
			h[i] = to_f16(f32rows[i]);
		ibp_store_t *st = pack(h.data(), IBP_DTYPE_F16, f32n, f32d, IBP_LAYOUT_PACKED, "f16");
		all_modes(st, "minilm as float16", nb, maxlen);
		ibp_store_close(st);
	}

	/* random stores: few distinct high bytes (so rows compress), both layouts */
	for (int layout = 0; layout < 2; layout++) {
		const uint64_t rows = 96, cols = 8 + rnd() % 70;
		std::vector<float> v(rows * cols);
		for (auto &x : v) {
			uint32_t u = (uint32_t)(0x3f000000u + ((rnd() % 4) << 23)) | (uint32_t)(rnd() & 0x7fffff);
			if (rnd() % 3 == 0)
				u |= 0x80000000u;
			if (rnd() % 50 == 0)
				u = (uint32_t)rnd(); /* exceptions, infinities and NaNs now and then */
			memcpy(&x, &u, 4);
		}
		ibp_store_t *st = pack(v.data(), IBP_DTYPE_F32, rows, cols, (ibp_layout_t)layout, "rand32");
		all_modes(st, layout ? "random f32 inplace" : "random f32 packed", nb, maxlen);
		ibp_store_close(st);
		std::vector<uint16_t> h(rows * 33);
		for (auto &x : h)
			x = (uint16_t)(0x3c00u + (rnd() % 512)) ^ (rnd() % 2 ? 0x8000u : 0u);
		st = pack(h.data(), IBP_DTYPE_BF16, rows, 33, (ibp_layout_t)layout, "rand16");
		all_modes(st, layout ? "random bf16 inplace" : "random bf16 packed", nb, maxlen);
		errors_case(st);
		ibp_store_close(st);
	}
	{
		/* exceptions that mostly share one value: the codec fits Xvals, so
		 * rows take the decoder's exception walk (ibp_walk_exc) */
		const uint64_t rows = 128, cols = 24;
		std::vector<uint32_t> v(rows * cols);
		for (auto &u : v)
			u = (rnd() % 12 == 0 ? (rnd() % 4 ? 0x4000u : 0x4040u) : 0x3f80u) << 16 | (uint32_t)(rnd() & 0xff);
		/* a codec made by hand: high halves invariant at 0x3f80, Xval 0x4000 */
		std::vector<uint32_t> m(cols, 0xffff0000u), bv(cols, 0x3f800000u), xv(cols, 0x40000000u);
		ibp_codec_t *codec = nullptr;
		OK(ibp_codec_create_ex(cols * 4, 4, 1, m.data(), bv.data(), xv.data(), &codec));
		for (int layout = 0; layout < 2; layout++) {
			const std::string path = tmpdir + "/bag-xval." + std::to_string(getpid()) + ".ibp";
			const uint64_t shape[2] = { rows, cols };
			OK(ibp_pack_with_codec(path.c_str(), codec, v.data(), IBP_DTYPE_F32, 2, shape, (ibp_layout_t)layout, 1));
			ibp_store_t *st = nullptr;
			OK(ibp_store_open(path.c_str(), IBP_OPEN_READ, &st));
			unlink(path.c_str());
			all_modes(st, layout ? "f32 with Xvals inplace" : "f32 with Xvals packed", nb, maxlen);
			ibp_store_close(st);
		}
		ibp_codec_free(codec);
	}
	printf("bag: %s (%d failures, %llu bags of %llu rows compared, %llu stores with Xvals, seed %llu)\n",
	       failures ? "FAILED" : "ALL OK", failures, (unsigned long long)nbags_cmp, (unsigned long long)nrows_pooled,
	       (unsigned long long)nxval, seed);
	return failures != 0;
}
