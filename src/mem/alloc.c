/* alloc.c - libibp's host arena (see include/ibp/alloc.h for the policy). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ibp/alloc.h"
#include "util/error.h"
#include "mem/jemalloc_shim.h"

#if defined(__SANITIZE_ADDRESS__)
#define IBP_ALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IBP_ALLOC_ASAN 1
#endif
#endif

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static int use_je;      /* jemalloc was loaded: serve from it */
static int arena_ok;    /* ... and from our own arena */
static unsigned arena_index;
static char alloc_name[320];

/* Decides the allocator once per process, so every pointer goes back to
 * the allocator that made it. */
static void arena_init(void)
{
#ifdef IBP_ALLOC_ASAN
	/* Don't even load jemalloc: ASan must see every buffer's bounds. */
	snprintf(alloc_name, sizeof(alloc_name), "libc (AddressSanitizer build)");
#else
	if (!ibpi_je_available()) {
		snprintf(alloc_name, sizeof(alloc_name), "libc (jemalloc unavailable: %s)", ibpi_je_status());
		return;
	}
	use_je = 1;
	unsigned a = 0;
	size_t sz = sizeof(a);
	if (ibpi_je_mallctl("arenas.create", &a, &sz, NULL, 0) == 0) {
		arena_index = a;
		arena_ok = 1;
		snprintf(alloc_name, sizeof(alloc_name), "jemalloc arena %u (%s)", a, ibpi_je_status());
	} else {
		/* jemalloc's automatic arenas: still correct, just shared. */
		snprintf(alloc_name, sizeof(alloc_name), "jemalloc automatic arenas (%s; arenas.create failed)",
			 ibpi_je_status());
	}
#endif
}

const char *ibp_host_allocator(void)
{
	pthread_once(&arena_once, arena_init);
	return alloc_name;
}

void *ibp_host_alloc(uint64_t size, uint64_t align)
{
	if (align == 0)
		align = IBP_HOST_ALIGN_DEFAULT;
	if ((align & (align - 1)) != 0 || align > (1ull << 30)) {
		ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_host_alloc: alignment %llu is not a power of two <= 1 GiB",
			 (unsigned long long)align);
		return NULL;
	}
	/* Refuse sizes that would wrap once rounded up to the alignment. */
	if (size > (uint64_t)SIZE_MAX - align) {
		ibpi_fail(IBP_ERR_NOMEM, "ibp_host_alloc: %llu bytes is too large", (unsigned long long)size);
		return NULL;
	}
	if (size == 0)
		size = 1; /* mallocx(0) is undefined; a unique pointer either way */
	pthread_once(&arena_once, arena_init);
	void *p = NULL;
	if (use_je) {
		int flags = IBP_JE_MALLOCX_ALIGN(align) | IBP_JE_MALLOCX_TCACHE_NONE;
		if (arena_ok)
			flags |= IBP_JE_MALLOCX_ARENA(arena_index);
		p = ibpi_je_mallocx((size_t)size, flags);
	} else {
		if (align < sizeof(void *))
			align = sizeof(void *); /* posix_memalign's minimum */
		if (posix_memalign(&p, (size_t)align, (size_t)size) != 0)
			p = NULL;
	}
	if (p == NULL)
		ibpi_fail(IBP_ERR_NOMEM, "ibp_host_alloc: out of memory for %llu bytes", (unsigned long long)size);
	return p;
}

void ibp_host_free(void *p)
{
	if (p == NULL)
		return;
	/* p != NULL came from ibp_host_alloc, so arena_init has run. */
	if (use_je)
		ibpi_je_dallocx(p, IBP_JE_MALLOCX_TCACHE_NONE);
	else
		free(p);
}
