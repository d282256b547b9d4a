/* test_api_rules.c - the API's rules of docs/API.md "Conventions", checked
 * on every function they cover: the size field that starts each options
 * struct (set by *_opts_default, refused when missing or from newer
 * headers); the unstable calls out of <ibp.h> and declared alike in
 * ibp/unstable.h and the library. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "ibp/unstable.h"
/* The library's own declarations of the unstable calls: a conflicting
 * type here fails the build (ibp/unstable.h "declares each one twice"). */
#include "bitpack/codec_internal.h"
#include "cuda/ibp_cuda_internal.h"
#include "../../cache/cache_internal.h"

/* Each options struct: default sets size; 0 and size - 1 are INVALID_ARG
 * naming *_opts_default; size + 8 is UNSUPPORTED. `call` runs the
 * function under test with the struct (arguments otherwise valid). */
#define SIZE_RULE(T, dflt, call)                                                                           \
	do {                                                                                               \
		T o;                                                                                       \
		memset(&o, 0xa5, sizeof o);                                                                \
		dflt(&o);                                                                                  \
		cr_assert_eq(o.size, sizeof(T), #dflt " sets size %llu", (unsigned long long)o.size);     \
		uint64_t bad[3] = {0, sizeof(T) - 1, sizeof(T) + 8};                                        \
		ibp_status_t want[3] = {IBP_ERR_INVALID_ARG, IBP_ERR_INVALID_ARG, IBP_ERR_UNSUPPORTED};  \
		for (int k = 0; k < 3; k++) {                                                              \
			o.size = bad[k];                                                                   \
			ibp_status_t s = (call);                                                           \
			cr_assert_eq(s, want[k], "%s with size %llu: %d (%s)", #call,                     \
				     (unsigned long long)bad[k], (int)s, ibp_last_error());                \
			cr_assert(strstr(ibp_last_error(), #T), "%s", ibp_last_error());                   \
			if (k < 2)                                                                         \
				cr_assert(strstr(ibp_last_error(), "_opts_default"), "%s", ibp_last_error()); \
		}                                                                                          \
		o.size = sizeof(T);                                                                        \
		cr_assert_eq((call), IBP_OK, "%s: %s", #call, ibp_last_error());                           \
	} while (0)

static float rows[64 * 16];

static void fill(void)
{
	for (unsigned i = 0; i < 64 * 16; i++)
		rows[i] = (float)(i % 7) * 0.25f;
}

Test(opts_size, train_and_analyze)
{
	fill();
	ibp_codec_t *c = NULL;
	ibp_analysis_t *a = NULL;
	SIZE_RULE(ibp_train_opts_t, ibp_train_opts_default, ibp_codec_train(rows, 64, 64, &o, &c));
	ibp_codec_free(c);
	SIZE_RULE(ibp_train_opts_t, ibp_train_opts_default, ibp_analyze(rows, 64, 64, &o, &a));
	ibp_analysis_free(a);
}

Test(opts_size, exp)
{
	fill();
	static uint8_t dst[1 << 16];
	uint64_t n = 0, offs[4];
	SIZE_RULE(ibp_exp_opts_t, ibp_exp_opts_default,
		  ibp_exp_encode(rows, IBP_DTYPE_F32, 1024, &o, dst, sizeof dst, &n));
	SIZE_RULE(ibp_exp_opts_t, ibp_exp_opts_default,
		  ibp_exp_encode_batch(rows, IBP_DTYPE_F32, 1024, 512, &o, dst, sizeof dst, offs));
}

Test(opts_size, fp8)
{
	fill();
	static uint8_t dst[1 << 16];
	uint64_t n = 0;
	SIZE_RULE(ibp_fp8_opts_t, ibp_fp8_opts_default, ibp_fp8_encoded_size(&o, 1024, &n));
	SIZE_RULE(ibp_fp8_opts_t, ibp_fp8_opts_default,
		  ibp_fp8_encode(rows, IBP_DTYPE_F32, 1024, &o, dst, sizeof dst, &n));
}

Test(opts_size, cache_and_pool)
{
	ibp_cache_t *c = NULL;
	ibp_slab_pool_t *p = NULL;
#define CACHE_CALL (o.capacity_bytes = 1 << 20, o.row_bytes = 256, ibp_cache_create(&o, &c))
	SIZE_RULE(ibp_cache_opts_t, ibp_cache_opts_default, CACHE_CALL);
	ibp_cache_free(c);
#define POOL_CALL (o.capacity_bytes = 1 << 20, o.max_block_bytes = 4096, o.flags = IBP_SLAB_POOL_HOST, \
		   ibp_slab_pool_create(&o, &p))
	SIZE_RULE(ibp_slab_pool_opts_t, ibp_slab_pool_opts_default, POOL_CALL);
	ibp_slab_pool_free(p);
}

Test(opts_size, coll)
{
	ibp_coll_inproc_t *w = NULL;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *comm = NULL;
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
#define COMM_CALL (o.calibrate = 0, ibp_coll_comm_create(&t, &o, &comm))
	SIZE_RULE(ibp_coll_opts_t, ibp_coll_opts_default, COMM_CALL);
	ibp_coll_comm_free(comm);
	ibp_coll_inproc_free(w);
}

Test(opts_size, pack)
{
	fill();
	char dir[] = "/tmp/ibp_api_rules_XXXXXX", path[64];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/t.ibp", dir);
	uint64_t shape[2] = {64, 16};
	SIZE_RULE(ibp_exp_opts_t, ibp_exp_opts_default, ibp_pack_exp(path, rows, IBP_DTYPE_F32, 2, shape, &o, 16));
	SIZE_RULE(ibp_fp8_opts_t, ibp_fp8_opts_default, ibp_pack_fp8(path, rows, IBP_DTYPE_F32, 2, shape, &o, 16));
	SIZE_RULE(ibp_train_opts_t, ibp_train_opts_default,
		  ibp_pack(path, rows, IBP_DTYPE_F32, 2, shape, &o, IBP_LAYOUT_PACKED));
	unlink(path);
	rmdir(dir);
}

/* The unstable calls are declared by ibp/unstable.h only, not by a header
 * that <ibp.h> includes. */
Test(unstable, out_of_the_stable_headers)
{
	static const char *names[] = {"ibp_codec_set_impl(", "ibp_paper_layout_size(", "ibp_cuda_store_set_kernel(",
				      "ibp_cache_gather_evict(", "ibp_cache_prefetch_evict("};
	static const char *hdrs[] = {"codec.h", "analyze.h", "cuda.h", "cache.h", "slab_pool.h", "kv.h", "store.h",
				     "bag.h", "container.h", "exp.h", "fp8.h", "coll.h", "alloc.h", "types.h",
				     "status.h", "checksum.h", "npy.h", "version.h", "unstable.h"};
	int in_unstable[5] = {0};
	for (unsigned h = 0; h < sizeof hdrs / sizeof *hdrs; h++) {
		char path[512];
		snprintf(path, sizeof path, "%s/include/ibp/%s", IBP_SOURCE_DIR, hdrs[h]);
		FILE *f = fopen(path, "r");
		cr_assert(f, "%s", path);
		static char text[1 << 20];
		size_t len = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[len] = 0;
		for (unsigned k = 0; k < 5; k++) {
			int has = strstr(text, names[k]) != NULL;
			if (strcmp(hdrs[h], "unstable.h") == 0)
				in_unstable[k] = has;
			else
				cr_assert(!has, "%s declares %s (it belongs to ibp/unstable.h)", hdrs[h], names[k]);
		}
	}
	for (unsigned k = 0; k < 5; k++)
		cr_assert(in_unstable[k], "ibp/unstable.h lacks %s", names[k]);
}

/* The deprecated names (docs/API.md "Names") are the new calls. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
Test(names, deprecated_aliases)
{
	ibp_coll_inproc_t *w = NULL;
	ibp_coll_transport_t t;
	ibp_coll_comm_t *comm = NULL;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.calibrate = 0;
	cr_assert_eq(ibp_coll_inproc_create(1, &w), IBP_OK);
	cr_assert_eq(ibp_coll_inproc_transport(w, 0, &t), IBP_OK);
	cr_assert_eq(ibp_coll_comm_create(&t, &o, &comm), IBP_OK);
	ibp_coll_comm_destroy(comm); /* ASan reports a leak if the alias frees nothing */
	ibp_coll_inproc_destroy(w);
	ibp_coll_comm_destroy(NULL);
	ibp_coll_inproc_destroy(NULL);

	uint64_t a = 7, b = 9;
	ibp_status_t sa = ibp_exp_encode_workspace_cuda(IBP_DTYPE_BF16, 1 << 20, 1 << 16, &a);
	ibp_status_t sb = ibp_exp_cuda_encode_workspace(IBP_DTYPE_BF16, 1 << 20, 1 << 16, &b);
	cr_assert_eq(sa, sb);
	if (sa == IBP_OK)
		cr_assert_eq(a, b);
	sa = ibp_exp_encode_workspace_cuda(IBP_DTYPE_BF16, 1 << 20, 1 << 16, NULL);
	cr_assert_eq(ibp_exp_cuda_encode_workspace(IBP_DTYPE_BF16, 1 << 20, 1 << 16, NULL), sa);
	cr_assert_neq(sa, IBP_OK);

	/* NULL pointers: both refuse alike (IBP_ERR_INVALID_ARG, or UNSUPPORTED without CUDA). */
	sa = ibp_fp8_decode_bounded_cuda(NULL, 0, IBP_DTYPE_F32, 256, 256, NULL, NULL, NULL, NULL);
	cr_assert_neq(sa, IBP_OK);
	cr_assert_eq(ibp_fp8_decode_cuda_bounded(NULL, 0, IBP_DTYPE_F32, 256, 256, NULL, NULL, NULL, NULL), sa);
}
