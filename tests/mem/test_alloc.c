/* test_alloc.c - ibp_host_alloc/ibp_host_free: alignment, zero and large
 * sizes, error paths, which allocator is reported, and the libc fallback
 * (in a child process run with IBP_NO_JEMALLOC=1, since the choice is made
 * once per process). */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "ibp.h"
#include "mem/jemalloc_shim.h"

extern char **environ;

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

/* Allocates, checks alignment, writes every byte, frees. */
static void alloc_fill_free(uint64_t size, uint64_t align)
{
	void *p = ibp_host_alloc(size, align);
	cr_assert_not_null(p, "ibp_host_alloc(%llu, %llu): %s", (unsigned long long)size,
			   (unsigned long long)align, ibp_last_error());
	uint64_t a = align ? align : IBP_HOST_ALIGN_DEFAULT;
	cr_assert_eq((uintptr_t)p % a, 0, "%p not aligned to %llu", p, (unsigned long long)a);
	memset(p, 0x5A, (size_t)size);
	if (size)
		cr_assert_eq(((unsigned char *)p)[size - 1], 0x5A);
	ibp_host_free(p);
}

/* The checks shared by the in-process tests and the fallback child. */
static void basic_checks(void)
{
	static const uint64_t sizes[] = { 1, 7, 64, 100, 4096, 65537, 1u << 20, (3u << 20) + 5 };
	static const uint64_t aligns[] = { 0, 1, 8, 64, 4096, 1u << 21 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t j = 0; j < sizeof(aligns) / sizeof(aligns[0]); j++)
			alloc_fill_free(sizes[i], aligns[j]);
	/* size 0: a valid, unique, freeable pointer */
	void *a = ibp_host_alloc(0, 64), *b = ibp_host_alloc(0, 64);
	cr_assert_not_null(a);
	cr_assert_not_null(b);
	cr_assert_neq(a, b);
	ibp_host_free(a);
	ibp_host_free(b);
	ibp_host_free(NULL);
}

Test(alloc, sizes_and_alignments)
{
	basic_checks();
}

Test(alloc, many_live_blocks_are_distinct)
{
	enum { N = 256 };
	unsigned char *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = ibp_host_alloc((uint64_t)(i + 1) * 129, 64);
		cr_assert_not_null(p[i]);
		memset(p[i], i, (size_t)(i + 1) * 129);
	}
	for (int i = 0; i < N; i++) {
		for (size_t k = 0; k < (size_t)(i + 1) * 129; k += 97)
			cr_assert_eq(p[i][k], (unsigned char)i, "block %d byte %zu overwritten", i, k);
		ibp_host_free(p[i]);
	}
}

Test(alloc, large)
{
	/* 256 MiB, page aligned: touch one byte per page. */
	uint64_t n = 256ull << 20;
	unsigned char *p = ibp_host_alloc(n, 4096);
	cr_assert_not_null(p, "%s", ibp_last_error());
	cr_assert_eq((uintptr_t)p % 4096, 0);
	for (uint64_t i = 0; i < n; i += 4096)
		p[i] = (unsigned char)(i >> 12);
	p[n - 1] = 0xEE;
	cr_assert_eq(p[4096 * 5], 5);
	cr_assert_eq(p[n - 1], 0xEE);
	ibp_host_free(p);
}

Test(alloc, errors)
{
	ibp_clear_error();
	cr_assert_null(ibp_host_alloc(64, 3));
	cr_assert(strstr(ibp_last_error(), "alignment") != NULL, "%s", ibp_last_error());
	cr_assert_null(ibp_host_alloc(64, 1ull << 31)); /* > 1 GiB */
	ibp_clear_error();
	cr_assert_null(ibp_host_alloc(UINT64_MAX, 64));
	cr_assert(strstr(ibp_last_error(), "too large") != NULL, "%s", ibp_last_error());
#ifndef TEST_ASAN /* ASan aborts on impossible sizes instead of returning NULL */
	ibp_clear_error();
	cr_assert_null(ibp_host_alloc(1ull << 60, 4096)); /* far beyond the address space */
	cr_assert(strstr(ibp_last_error(), "out of memory") != NULL, "%s", ibp_last_error());
#endif
}

Test(alloc, reports_allocator)
{
	const char *name = ibp_host_allocator();
	cr_assert_not_null(name);
	cr_log_info("host allocator: %s", name);
#ifdef TEST_ASAN
	cr_assert_str_eq(name, "libc (AddressSanitizer build)");
#else
#ifdef IBP_TEST_EXPECT_JEMALLOC
	/* Configure found libjemalloc.so.2, so the dlopen must have worked. */
	cr_assert(ibpi_je_available(), "jemalloc not loaded: %s", ibpi_je_status());
#endif
	if (ibpi_je_available()) {
		cr_assert(strncmp(name, "jemalloc arena ", 15) == 0, "%s", name);
		cr_assert(strstr(name, ibpi_je_status()) != NULL, "%s", name);
		cr_assert(strncmp(ibpi_je_status(), "jemalloc ", 9) == 0, "%s", ibpi_je_status());
	} else {
		cr_assert(strncmp(name, "libc (jemalloc unavailable: ", 28) == 0, "%s", name);
	}
#endif
}

#ifndef TEST_ASAN
Test(alloc, shim_passthrough)
{
	if (!ibpi_je_available())
		cr_skip_test("jemalloc not loaded: %s", ibpi_je_status());
	void *p = ibpi_je_mallocx(1000, IBP_JE_MALLOCX_ALIGN(4096) | IBP_JE_MALLOCX_TCACHE_NONE);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 4096, 0);
	cr_assert_geq(ibpi_je_sallocx(p, 0), 1000);
	ibpi_je_dallocx(p, IBP_JE_MALLOCX_TCACHE_NONE);
	unsigned narenas = 0;
	size_t sz = sizeof(narenas);
	cr_assert_eq(ibpi_je_mallctl("arenas.narenas", &narenas, &sz, NULL, 0), 0);
	cr_assert_geq(narenas, 1);
	cr_assert_neq(ibpi_je_mallctl("no.such.ctl", NULL, NULL, NULL, 0), 0);
}
#endif

/* Runs only as the child of alloc/libc_fallback (skipped otherwise): does
 * the usual checks and writes the reported allocator to the given file. */
Test(alloc, fallback_child)
{
	const char *out = getenv("IBP_TEST_ALLOC_CHILD_OUT");
	if (out == NULL)
		cr_skip_test("runs only as the child of alloc/libc_fallback");
	basic_checks();
	alloc_fill_free(64ull << 20, 4096);
	FILE *f = fopen(out, "w");
	cr_assert_not_null(f);
	fprintf(f, "%s|%d", ibp_host_allocator(), ibpi_je_available());
	cr_assert_eq(fclose(f), 0);
}

Test(alloc, libc_fallback)
{
	char out[96];
	snprintf(out, sizeof(out), "%s/ibp_test_alloc_XXXXXX", tu_tmp_root());
	int fd = mkstemp(out);
	cr_assert_geq(fd, 0);
	close(fd);

	/* The parent's environment plus the two settings, less BoxFort's
	 * BXFI_MAP: with it the child thinks it is a Criterion worker. */
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof(*env));
	cr_assert_not_null(env);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "IBP_NO_JEMALLOC=", 16) != 0 && strncmp(environ[i], "BXFI_", 5) != 0)
			env[k++] = environ[i];
	char outvar[128];
	snprintf(outvar, sizeof(outvar), "IBP_TEST_ALLOC_CHILD_OUT=%s", out);
	env[k++] = "IBP_NO_JEMALLOC=1";
	env[k++] = outvar;
	env[k] = NULL;

	char exe[4096];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(len, 0);
	exe[len] = '\0';
	char *argv[] = { exe, "--filter=alloc/fallback_child", "--jobs=1", "--short-filename", NULL };
	pid_t pid;
	cr_assert_eq(posix_spawn(&pid, exe, NULL, NULL, argv, env), 0);
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	free(env);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fallback child failed (status %#x)", st);

	char got[512] = "";
	FILE *f = fopen(out, "r");
	cr_assert_not_null(f);
	size_t r = fread(got, 1, sizeof(got) - 1, f);
	got[r] = '\0';
	fclose(f);
	unlink(out);
	cr_log_info("fallback child reported: %s", got);
#ifdef TEST_ASAN
	cr_assert_str_eq(got, "libc (AddressSanitizer build)|0");
#else
	cr_assert_str_eq(got, "libc (jemalloc unavailable: disabled by IBP_NO_JEMALLOC=1)|0");
#endif
}
