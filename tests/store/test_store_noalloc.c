/* test_store_noalloc.c - "a gather allocates nothing" (ibp/store.h): once
 * the pool exists, gathers and decode_all of every codec and layout, on one
 * thread or many, make no heap allocation. This binary replaces malloc and
 * friends with counting forwarders to glibc's (and sets IBP_NO_JEMALLOC=1
 * so libibp's host allocator goes through them too); under AddressSanitizer
 * the replacement is not possible and the test skips. */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define NOALLOC_COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NOALLOC_COUNTING 0
#endif
#endif
#ifndef NOALLOC_COUNTING
#define NOALLOC_COUNTING 1
#endif

static atomic_int armed;
static atomic_long allocs;

#if NOALLOC_COUNTING
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static void note(void)
{
	if (atomic_load_explicit(&armed, memory_order_relaxed))
		atomic_fetch_add(&allocs, 1);
}

void *malloc(size_t n)
{
	note();
	return __libc_malloc(n);
}

void *calloc(size_t k, size_t n)
{
	note();
	return __libc_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
	note();
	return __libc_realloc(p, n);
}

void free(void *p)
{
	__libc_free(p);
}

void *memalign(size_t a, size_t n)
{
	note();
	return __libc_memalign(a, n);
}

void *aligned_alloc(size_t a, size_t n)
{
	note();
	return __libc_memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n)
{
	note();
	if (a < sizeof(void *) || (a & (a - 1)))
		return 22; /* EINVAL */
	void *p = __libc_memalign(a, n);
	if (!p && n)
		return 12; /* ENOMEM */
	*out = p;
	return 0;
}
#endif

#if !NOALLOC_COUNTING
/* nothing can run: say so to ctest (SKIP_RETURN_CODE 77) */
int main(void)
{
	puts("SKIP: test_store_noalloc: malloc cannot be replaced under AddressSanitizer");
	return 77;
}
#endif

static char dir[64];

static void mkdir_tmp(void)
{
	setenv("IBP_NO_JEMALLOC", "1", 1); /* before libibp's first allocation */
	snprintf(dir, sizeof(dir), "%s/ibp_test_noalloc_XXXXXX", tu_tmp_root());
	cr_assert_not_null(mkdtemp(dir));
}

static void rm_tmp(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Gathers and decode_all on `path`, counting allocations after a warm-up
 * (the first pooled gather starts the pool). */
static void count_gathers(const char *path, uint64_t nrows, uint64_t R)
{
	ibp_store_t *s = NULL;
	cr_assert_eq(ibp_store_open(path, IBP_OPEN_MMAP, &s), IBP_OK, "%s", ibp_last_error());
	const uint64_t m = 3000;
	int64_t *ids = tu_xcalloc(m * sizeof(int64_t));
	tu_rng_t r;
	tu_rng_seed(&r, 3);
	for (uint64_t i = 0; i < m; i++)
		ids[i] = (int64_t)tu_below(&r, nrows);
	uint8_t *out = tu_xcalloc(m * R), *all = tu_xcalloc(nrows * R);
	cr_assert_eq(ibp_store_gather(s, ids, m, out, 0), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(ibp_store_decode_all(s, all, 0), IBP_OK, "%s", ibp_last_error());
	/* no assertion while counting: Criterion may allocate for one */
	ibp_status_t st[12];
	atomic_store(&allocs, 0);
	atomic_store(&armed, 1);
	const int threads[] = { 1, 2, 0, 1 };
	for (int k = 0; k < 4; k++) {
		st[3 * k] = ibp_store_gather(s, ids, m, out, threads[k]);
		st[3 * k + 1] = ibp_store_gather(s, ids + k, 1, all, threads[k]);
		st[3 * k + 2] = ibp_store_decode_all(s, all, threads[k]);
	}
	atomic_store(&armed, 0);
	for (int k = 0; k < 12; k++)
		cr_assert_eq(st[k], IBP_OK, "call %d", k);
	long got = atomic_load(&allocs);
	cr_assert_eq(got, 0, "%s: %ld allocations during gathers", path, got);
	for (uint64_t i = 0; i < m; i++)
		cr_assert_arr_eq(out + i * R, all + (uint64_t)ids[i] * R, R);
	free(all);
	free(out);
	free(ids);
	ibp_store_close(s);
}

Test(store_noalloc, gather_allocates_nothing, .init = mkdir_tmp, .fini = rm_tmp)
{
	if (!NOALLOC_COUNTING)
		cr_skip_test("malloc cannot be replaced under AddressSanitizer");
	const uint64_t rows = 600, cols = 32, shape[2] = { rows, cols };
	tu_rng_t r;
	tu_rng_seed(&r, 1);
	uint8_t *d = tu_xcalloc(rows * cols * 4);
	tu_gen_rows(&r, TU_F32_SMOOTH, d, rows, cols * 4);
	/* the counter works at all: an allocation while armed is seen */
	atomic_store(&allocs, 0);
	atomic_store(&armed, 1);
	void *volatile p = malloc(100);
	atomic_store(&armed, 0);
	free(p);
	cr_assert_eq(atomic_load(&allocs), 1, "malloc is not replaced in this binary");
	/* libibp's own buffers come from libc here, so they are counted too */
	cr_assert(strncmp(ibp_host_allocator(), "libc", 4) == 0, "host allocator: %s", ibp_host_allocator());

	char path[128];
	for (int layout = 0; layout < 2; layout++) {
		snprintf(path, sizeof(path), "%s/i%d.ibp", dir, layout);
		cr_assert_eq(ibp_pack(path, d, IBP_DTYPE_F32, 2, shape, NULL, (ibp_layout_t)layout), IBP_OK, "%s",
			     ibp_last_error());
		count_gathers(path, rows, cols * 4);
	}
	snprintf(path, sizeof(path), "%s/e.ibp", dir);
	cr_assert_eq(ibp_pack_exp(path, d, IBP_DTYPE_F32, 2, shape, NULL, 50), IBP_OK, "%s", ibp_last_error());
	count_gathers(path, rows, cols * 4);
	snprintf(path, sizeof(path), "%s/f.ibp", dir);
	cr_assert_eq(ibp_pack_fp8(path, d, IBP_DTYPE_F32, 2, shape, NULL, 50), IBP_OK, "%s", ibp_last_error());
	count_gathers(path, rows, cols * 4);
	free(d);
}
