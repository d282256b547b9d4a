/* pinned_nocuda.c - the pinned allocator of ibp/alloc.h in a build without
 * CUDA (twin of pinned_cudahost.c): nothing can be pinned, so every call
 * fails with IBP_ERR_NO_DEVICE, or with IBP_CUDA_HOST_FALLBACK hands out
 * ordinary host memory (still IBP_ERR_NO_DEVICE, as documented). */
#include <stddef.h>

#include "ibp/alloc.h"
#include "util/error.h"

#define NO_CUDA "libibp was built without CUDA"

static ibp_status_t no_device(const char *what)
{
	return ibpi_fail(IBP_ERR_NO_DEVICE, "%s: " NO_CUDA, what);
}

ibp_status_t ibp_pinned_alloc(uint64_t size, uint64_t align, unsigned flags, void **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_alloc: NULL out");
	*out = NULL;
	if (align == 0)
		align = 256;
	if ((align & (align - 1)) != 0 || align > (1ull << 30))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_alloc: alignment %llu is not a power of two <= 1 GiB",
				(unsigned long long)align);
	if (!(flags & IBP_CUDA_HOST_FALLBACK))
		return no_device("pinned_alloc");
	void *p = ibp_host_alloc(size, align);
	if (!p)
		return IBP_ERR_NOMEM;
	*out = p;
	return ibpi_fail(IBP_ERR_NO_DEVICE, "pinned_alloc: " NO_CUDA "; %llu bytes of ordinary (not "
			"pinned) host memory were returned instead", (unsigned long long)size);
}

void ibp_pinned_free(void *p)
{
	ibp_host_free(p);
}

ibp_status_t ibp_pinned_free_async(void *p, void *stream)
{
	(void)stream; /* no device work without CUDA */
	ibp_host_free(p);
	return IBP_OK;
}

int ibp_pinned_owns(const void *p)
{
	(void)p;
	return 0;
}

ibp_status_t ibp_pinned_device_ptr(const void *host, void **dev)
{
	(void)host;
	if (dev)
		*dev = NULL;
	return no_device("pinned_device_ptr");
}

void ibp_pinned_stats(uint64_t *reserved, uint64_t *in_use)
{
	if (reserved)
		*reserved = 0;
	if (in_use)
		*in_use = 0;
}
