/* alloc.c - libibp's host arena (see include/ibp/alloc.h for the policy). */
#include <pthread.h>
#include <stdlib.h>

#include "ibp/alloc.h"
#include "error.h"

#if defined(__SANITIZE_ADDRESS__)
#define IBP_ALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IBP_ALLOC_ASAN 1
#endif
#endif

#ifndef IBP_ALLOC_ASAN
#include <jemalloc/jemalloc.h>

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_index;
static int arena_ok;

static void arena_init(void)
{
	unsigned a = 0;
	size_t sz = sizeof(a);
	if (mallctl("arenas.create", &a, &sz, NULL, 0) == 0) {
		arena_index = a;
		arena_ok = 1;
	}
	/* Otherwise fall back to jemalloc's automatic arenas: still correct. */
}
#endif

void *ibp_host_alloc(uint64_t size, uint64_t align)
{
	if (align == 0)
		align = IBP_HOST_ALIGN_DEFAULT;
	if ((align & (align - 1)) != 0 || align > (1ull << 30)) {
		ibp_fail(IBP_ERR_INVALID_ARG, "ibp_host_alloc: alignment %llu is not a power of two <= 1 GiB",
			 (unsigned long long)align);
		return NULL;
	}
	/* Refuse sizes that would wrap once rounded up to the alignment. */
	if (size > (uint64_t)SIZE_MAX - align) {
		ibp_fail(IBP_ERR_NOMEM, "ibp_host_alloc: %llu bytes is too large", (unsigned long long)size);
		return NULL;
	}
	if (size == 0)
		size = 1; /* mallocx(0) is undefined */
	void *p = NULL;
#ifdef IBP_ALLOC_ASAN
	if (align < sizeof(void *))
		align = sizeof(void *);
	if (posix_memalign(&p, (size_t)align, (size_t)size) != 0)
		p = NULL;
#else
	pthread_once(&arena_once, arena_init);
	int flags = MALLOCX_ALIGN((size_t)align) | MALLOCX_TCACHE_NONE;
	if (arena_ok)
		flags |= MALLOCX_ARENA(arena_index);
	p = mallocx((size_t)size, flags);
#endif
	if (p == NULL)
		ibp_fail(IBP_ERR_NOMEM, "ibp_host_alloc: out of memory for %llu bytes", (unsigned long long)size);
	return p;
}

void ibp_host_free(void *p)
{
	if (p == NULL)
		return;
#ifdef IBP_ALLOC_ASAN
	free(p);
#else
	dallocx(p, MALLOCX_TCACHE_NONE);
#endif
}
