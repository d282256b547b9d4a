/* pinned_cudahost.c - the process-wide pinned host allocator (ibp/cuda.h).
 *
 * With jemalloc (src/mem/jemalloc_shim.h: dlopen()ed at run time): an arena
 * created with our extent hooks, whose extents are carved from large
 * cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable) regions, so
 * every allocation is pinned and mapped into the GPU's address space and
 * staging buffers, stores and KV blocks share one allocator with jemalloc's
 * size classes. Regions are never handed back to the driver: the dalloc hook
 * opts out, which makes jemalloc keep freed extents for reuse (its
 * "retained" extents), and cudaFreeHost would need the region base anyway,
 * not an extent inside it. Merges are allowed only inside one region
 * (adjacent cudaHostAlloc regions are distinct pinned ranges). Every call
 * passes MALLOCX_TCACHE_NONE, so no pinned block sits in a thread cache
 * that ordinary malloc could hand out.
 *
 * Without jemalloc (not installed, not loadable, IBP_NO_JEMALLOC=1): one
 * cudaHostAlloc per allocation, freed with cudaFreeHost. Correct, but each
 * call is a driver call; ibp_pinned_stats still counts the bytes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "ibp/alloc.h"
#include "util/error.h"
#include "mem/jemalloc_shim.h"

/* jemalloc's struct extent_hooks_s (jemalloc >= 5.0; part of its ABI, as
 * the shim's MALLOCX_* encodings are), declared here so that building needs
 * no libjemalloc-dev. Hooks return false on success, true to opt out. */
typedef struct je_extent_hooks je_extent_hooks_t;
struct je_extent_hooks {
	void *(*alloc)(je_extent_hooks_t *, void *, size_t, size_t, bool *, bool *, unsigned);
	bool (*dalloc)(je_extent_hooks_t *, void *, size_t, bool, unsigned);
	void (*destroy)(je_extent_hooks_t *, void *, size_t, bool, unsigned);
	bool (*commit)(je_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*decommit)(je_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*purge_lazy)(je_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*purge_forced)(je_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*split)(je_extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned);
	bool (*merge)(je_extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned);
};

#define REGION_MIN (64ull << 20)  /* smallest cudaHostAlloc asked for */
#define REGION_ROUND (2ull << 20)
#define MAX_REGIONS 1024u         /* regions grow geometrically: plenty */
#define DEFAULT_ALIGN 256u

typedef struct region {
	uintptr_t base;
	uint64_t size;
	uint64_t used; /* bytes carved from the start */
} region_t;

/* jemalloc mode: regions carved by the hooks (a static table, since the
 * hooks run inside jemalloc and should not call malloc) */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static region_t regions[MAX_REGIONS];
static unsigned nregions;

/* libc mode: one cudaHostAlloc per allocation, sorted by address */
typedef struct direct {
	uintptr_t user;  /* the pointer handed out (aligned) */
	void *base;      /* what cudaFreeHost takes */
	uint64_t size;   /* bytes asked of cudaHostAlloc */
	uint64_t req;    /* bytes the caller asked for */
} direct_t;
static direct_t *directs;
static uint64_t ndirect, cap_direct;

static atomic_uint_fast64_t reserved_bytes, in_use_bytes;

static void reclaim(void); /* ibp_pinned_free_async's blocks whose streams are done */

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_index;
static int arena_ok; /* 1: jemalloc arena, 0: libc mode */
static char arena_msg[200];

/* ---- jemalloc extent hooks ---- */

/* Carves [p, p + size) with p aligned from the newest region; reg_mu held. */
static void *carve(uint64_t size, uint64_t align)
{
	if (!nregions)
		return NULL;
	region_t *r = &regions[nregions - 1];
	uintptr_t a = (r->base + r->used + align - 1) & ~(uintptr_t)(align - 1);
	if (a < r->base + r->used || a - r->base > r->size || size > r->size - (a - r->base))
		return NULL;
	r->used = a + size - r->base;
	return (void *)a;
}

static void *hook_alloc(je_extent_hooks_t *h, void *new_addr, size_t size, size_t alignment, bool *zero,
			bool *commit, unsigned arena_ind)
{
	(void)h;
	(void)arena_ind;
	if (new_addr != NULL || size == 0)
		return NULL; /* cannot grow in place or map at a given address */
	if (alignment == 0)
		alignment = 1;
	pthread_mutex_lock(&reg_mu);
	void *p = carve(size, alignment);
	if (!p && nregions < MAX_REGIONS && size <= UINT64_MAX / 2 - alignment) {
		uint64_t want = (size + alignment + REGION_ROUND - 1) / REGION_ROUND * REGION_ROUND;
		uint64_t rs = atomic_load(&reserved_bytes) / 2;
		if (rs < REGION_MIN)
			rs = REGION_MIN;
		if (rs < want)
			rs = want;
		rs = (rs + REGION_ROUND - 1) / REGION_ROUND * REGION_ROUND;
		void *b = NULL;
		if (cudaHostAlloc(&b, rs, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
			regions[nregions++] = (region_t){ (uintptr_t)b, rs, 0 };
			atomic_fetch_add(&reserved_bytes, rs);
			p = carve(size, alignment);
		} else {
			(void)cudaGetLastError();
		}
	}
	pthread_mutex_unlock(&reg_mu);
	if (p && *zero)
		memset(p, 0, size);
	*commit = true; /* pinned memory is always committed */
	return p;
}

static bool hook_dalloc(je_extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)committed; (void)arena_ind;
	return true; /* opt out: jemalloc retains the extent for reuse */
}

static void hook_destroy(je_extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)committed; (void)arena_ind;
	/* the arena is never destroyed; regions live as long as the process */
}

static bool hook_commit(je_extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
			unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)offset; (void)length; (void)arena_ind;
	return false; /* already committed */
}

static bool hook_decommit(je_extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
			  unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)offset; (void)length; (void)arena_ind;
	return true; /* pinned pages cannot be decommitted */
}

static bool hook_purge(je_extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
		       unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)offset; (void)length; (void)arena_ind;
	return true; /* no purging of pinned pages */
}

static bool hook_split(je_extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
		       bool committed, unsigned arena_ind)
{
	(void)h; (void)addr; (void)size; (void)size_a; (void)size_b; (void)committed; (void)arena_ind;
	return false; /* any extent may be split */
}

/* Index of the region holding p, or -1; reg_mu held. */
static int region_of(uintptr_t p)
{
	for (unsigned i = 0; i < nregions; i++)
		if (p >= regions[i].base && p - regions[i].base < regions[i].size)
			return (int)i;
	return -1;
}

static bool hook_merge(je_extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
		       bool committed, unsigned arena_ind)
{
	(void)h; (void)size_a; (void)size_b; (void)committed; (void)arena_ind;
	pthread_mutex_lock(&reg_mu);
	int ra = region_of((uintptr_t)addr_a), rb = region_of((uintptr_t)addr_b);
	pthread_mutex_unlock(&reg_mu);
	return ra < 0 || ra != rb; /* refuse merges across cudaHostAlloc regions */
}

static je_extent_hooks_t pinned_hooks = {
	hook_alloc, hook_dalloc, hook_destroy, hook_commit, hook_decommit,
	hook_purge, hook_purge, hook_split, hook_merge,
};

static void arena_init(void)
{
	if (!ibpi_je_available()) {
		snprintf(arena_msg, sizeof(arena_msg), "%s", ibpi_je_status());
		return; /* libc mode */
	}
	/* arenas.create calls hook_alloc for the arena's own metadata with
	 * jemalloc's global arena lock held. cudaHostAlloc there, when it is
	 * the process's first context-creating call, waits for the driver's
	 * new threads, whose first malloc needs that lock: a deadlock (seen on
	 * an H200, 2026-11-28). So the first region (and with it the context)
	 * comes first, outside jemalloc's locks; arena creation carves from it.
	 * tests/mem/pinned_first_call.c replays this with a fake runtime. */
	void *b = NULL;
	cudaError_t e = cudaHostAlloc(&b, REGION_MIN, cudaHostAllocMapped | cudaHostAllocPortable);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		snprintf(arena_msg, sizeof(arena_msg), "cudaHostAlloc(%llu) before the arena: %s",
			 (unsigned long long)REGION_MIN, cudaGetErrorString(e));
		return; /* libc mode: each allocation asks cudaHostAlloc, and reports its error */
	}
	pthread_mutex_lock(&reg_mu);
	regions[nregions++] = (region_t){ (uintptr_t)b, REGION_MIN, 0 };
	atomic_fetch_add(&reserved_bytes, REGION_MIN);
	pthread_mutex_unlock(&reg_mu);
	je_extent_hooks_t *hp = &pinned_hooks;
	unsigned a = 0;
	size_t sz = sizeof(a);
	int r = ibpi_je_mallctl("arenas.create", &a, &sz, &hp, sizeof(hp));
	if (r == 0) {
		arena_index = a;
		arena_ok = 1;
	} else {
		snprintf(arena_msg, sizeof(arena_msg), "jemalloc arenas.create failed (%s)", strerror(r));
		pthread_mutex_lock(&reg_mu); /* libc mode: the region goes back */
		nregions = 0;
		atomic_fetch_sub(&reserved_bytes, REGION_MIN);
		pthread_mutex_unlock(&reg_mu);
		(void)cudaFreeHost(b);
	}
}

/* ---- libc mode ---- */

/* Index of the first direct allocation with user >= p; reg_mu held. */
static uint64_t direct_lower(uintptr_t p)
{
	uint64_t lo = 0, hi = ndirect;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (directs[mid].user < p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The direct allocation holding p, or NULL; reg_mu held. */
static direct_t *direct_of(uintptr_t p)
{
	uint64_t i = direct_lower(p + 1); /* first with user > p */
	if (i == 0)
		return NULL;
	direct_t *d = &directs[i - 1];
	uintptr_t b = (uintptr_t)d->base;
	return p >= b && p - b < d->size ? d : NULL;
}

static ibp_status_t direct_alloc(uint64_t size, uint64_t align, void **out)
{
	/* cudaHostAlloc gives page-aligned memory; larger alignments over-allocate */
	const uint64_t extra = align > 4096 ? align : 0;
	const uint64_t n = (size ? size : 1) + extra;
	void *b = NULL;
	cudaError_t e = cudaHostAlloc(&b, n, cudaHostAllocMapped | cudaHostAllocPortable);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return ibpi_fail(IBP_ERR_NOMEM, "pinned_alloc: cudaHostAlloc(%llu): %s", (unsigned long long)n,
				cudaGetErrorString(e));
	}
	uintptr_t u = ((uintptr_t)b + align - 1) & ~(uintptr_t)(align - 1);
	pthread_mutex_lock(&reg_mu);
	if (ndirect == cap_direct) {
		uint64_t nc = cap_direct ? 2 * cap_direct : 64;
		direct_t *nd = realloc(directs, nc * sizeof(*nd));
		if (!nd) {
			pthread_mutex_unlock(&reg_mu);
			cudaFreeHost(b);
			return ibpi_fail(IBP_ERR_NOMEM, "pinned_alloc: out of memory for bookkeeping");
		}
		directs = nd;
		cap_direct = nc;
	}
	uint64_t i = direct_lower(u);
	memmove(directs + i + 1, directs + i, (ndirect - i) * sizeof(*directs));
	directs[i] = (direct_t){ u, b, n, size };
	ndirect++;
	pthread_mutex_unlock(&reg_mu);
	atomic_fetch_add(&reserved_bytes, n);
	atomic_fetch_add(&in_use_bytes, size);
	*out = (void *)u;
	return IBP_OK;
}

/* Frees p if it is a direct allocation; returns 1 if it was. */
static int direct_free(void *p)
{
	pthread_mutex_lock(&reg_mu);
	direct_t *d = directs ? direct_of((uintptr_t)p) : NULL;
	if (!d || d->user != (uintptr_t)p) {
		pthread_mutex_unlock(&reg_mu);
		return 0;
	}
	direct_t x = *d;
	uint64_t i = (uint64_t)(d - directs);
	memmove(directs + i, directs + i + 1, (ndirect - i - 1) * sizeof(*directs));
	ndirect--;
	pthread_mutex_unlock(&reg_mu);
	atomic_fetch_sub(&reserved_bytes, x.size);
	atomic_fetch_sub(&in_use_bytes, x.req);
	cudaFreeHost(x.base);
	(void)cudaGetLastError();
	return 1;
}

/* ---- API ---- */

static int have_device(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n > 0;
}

ibp_status_t ibp_pinned_alloc(uint64_t size, uint64_t align, unsigned flags, void **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_alloc: NULL out");
	*out = NULL;
	if (align == 0)
		align = DEFAULT_ALIGN;
	if ((align & (align - 1)) != 0 || align > (1ull << 30))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_alloc: alignment %llu is not a power of two <= 1 GiB",
				(unsigned long long)align);
	if (size > (uint64_t)SIZE_MAX / 2)
		return ibpi_fail(IBP_ERR_NOMEM, "pinned_alloc: %llu bytes is too large", (unsigned long long)size);
	if (!have_device()) {
		if (!(flags & IBP_CUDA_HOST_FALLBACK))
			return ibpi_fail(IBP_ERR_NO_DEVICE, "pinned_alloc: no usable CUDA device");
		void *p = ibp_host_alloc(size, align);
		if (!p)
			return IBP_ERR_NOMEM;
		*out = p;
		return ibpi_fail(IBP_ERR_NO_DEVICE,
				"pinned_alloc: no usable CUDA device; %llu bytes of ordinary (not pinned) "
				"host memory were returned instead", (unsigned long long)size);
	}
	reclaim(); /* blocks whose streams have finished with them */
	pthread_once(&arena_once, arena_init);
	if (!arena_ok)
		return direct_alloc(size, align, out);
	void *p = ibpi_je_mallocx(size ? (size_t)size : 1,
				 IBP_JE_MALLOCX_ARENA(arena_index) | IBP_JE_MALLOCX_ALIGN(align) |
					 IBP_JE_MALLOCX_TCACHE_NONE);
	if (!p)
		return ibpi_fail(IBP_ERR_NOMEM,
				"pinned_alloc: %llu bytes: cudaHostAlloc refused more pinned memory, or "
				"out of memory", (unsigned long long)size);
	atomic_fetch_add(&in_use_bytes, (uint64_t)ibpi_je_sallocx(p, 0));
	*out = p;
	return IBP_OK;
}

int ibp_pinned_owns(const void *p)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&reg_mu);
	int r = region_of((uintptr_t)p) >= 0 || (directs && direct_of((uintptr_t)p) != NULL);
	pthread_mutex_unlock(&reg_mu);
	return r;
}

/* ---- frees that wait for a stream ----
 * A block freed with ibp_pinned_free_async waits here with an event
 * recorded on its stream until the event has completed; only then does it
 * go back to jemalloc (or cudaFreeHost), which could hand it out at once. */
typedef struct pending {
	void *p;
	cudaEvent_t ev;
} pending_t;
static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER; /* before reg_mu, never after */
static pending_t *pend;
static uint64_t npend, cap_pend;
static atomic_uint_fast64_t npend_atomic; /* lock-free "nothing pending" check */
static cudaEvent_t *spare_ev;            /* completed events, for reuse */
static uint64_t nspare, cap_spare;

static void release(void *p);

/* Frees the pending blocks whose events have completed (pend_mu held). */
static void reclaim_locked(void)
{
	uint64_t k = 0;
	for (uint64_t i = 0; i < npend; i++) {
		cudaError_t e = cudaEventQuery(pend[i].ev);
		if (e == cudaErrorNotReady) {
			pend[k++] = pend[i];
			continue;
		}
		if (e != cudaSuccess) {
			/* a broken context: the copy may never be known to be done, so
			 * the block stays out of use (leaked) rather than risk reuse */
			(void)cudaGetLastError();
			continue;
		}
		release(pend[i].p);
		if (nspare < cap_spare)
			spare_ev[nspare++] = pend[i].ev;
		else
			(void)cudaEventDestroy(pend[i].ev);
	}
	npend = k;
	atomic_store(&npend_atomic, k);
}

static void reclaim(void)
{
	if (atomic_load(&npend_atomic) == 0)
		return;
	pthread_mutex_lock(&pend_mu);
	reclaim_locked();
	pthread_mutex_unlock(&pend_mu);
}

ibp_status_t ibp_pinned_free_async(void *p, void *stream)
{
	if (!p)
		return IBP_OK;
	if (!ibp_pinned_owns(p)) {
		ibp_host_free(p); /* IBP_CUDA_HOST_FALLBACK memory: no device work uses it */
		reclaim();
		return IBP_OK;
	}
	pthread_mutex_lock(&pend_mu);
	reclaim_locked();
	cudaError_t e = cudaSuccess;
	cudaEvent_t ev = NULL;
	if (nspare)
		ev = spare_ev[--nspare];
	else
		e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventRecord(ev, (cudaStream_t)stream);
	if (e == cudaSuccess && npend == cap_pend) {
		uint64_t nc = cap_pend ? 2 * cap_pend : 64;
		pending_t *np = realloc(pend, nc * sizeof(*np));
		cudaEvent_t *ns = realloc(spare_ev, nc * sizeof(*ns));
		if (np)
			pend = np, cap_pend = nc;
		if (ns)
			spare_ev = ns, cap_spare = nc;
		if (!np)
			e = cudaErrorMemoryAllocation;
	}
	if (e == cudaSuccess) {
		pend[npend++] = (pending_t){ p, ev };
		atomic_store(&npend_atomic, npend);
		pthread_mutex_unlock(&pend_mu);
		return IBP_OK;
	}
	pthread_mutex_unlock(&pend_mu);
	(void)cudaGetLastError();
	if (ev)
		(void)cudaEventDestroy(ev);
	cudaError_t w = cudaStreamSynchronize((cudaStream_t)stream);
	if (w == cudaSuccess) {
		release(p);
		return ibpi_fail(IBP_ERR_CUDA, "pinned_free_async: cannot record an event (%s): waited for the stream "
				"and freed the block", cudaGetErrorString(e));
	}
	(void)cudaGetLastError();
	return ibpi_fail(IBP_ERR_CUDA, "pinned_free_async: cannot record an event (%s) nor wait for the stream (%s): "
			"the block is kept out of use", cudaGetErrorString(e), cudaGetErrorString(w));
}

void ibp_pinned_free(void *p)
{
	if (!p)
		return;
	reclaim();
	release(p);
}

static void release(void *p)
{
	pthread_mutex_lock(&reg_mu);
	int in_arena = region_of((uintptr_t)p) >= 0;
	pthread_mutex_unlock(&reg_mu);
	if (in_arena) {
		atomic_fetch_sub(&in_use_bytes, (uint64_t)ibpi_je_sallocx(p, 0));
		ibpi_je_dallocx(p, IBP_JE_MALLOCX_TCACHE_NONE);
	} else if (!direct_free(p)) {
		ibp_host_free(p); /* IBP_CUDA_HOST_FALLBACK memory */
	}
}

ibp_status_t ibp_pinned_device_ptr(const void *host, void **dev)
{
	if (!host || !dev)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_device_ptr: NULL argument");
	*dev = NULL;
	if (!have_device())
		return ibpi_fail(IBP_ERR_NO_DEVICE, "pinned_device_ptr: no usable CUDA device");
	/* The attributes name the device address of any byte of a pinned,
	 * mapped range (not only its start); cudaHostGetDevicePointer is the
	 * second opinion. */
	struct cudaPointerAttributes at;
	cudaError_t e = cudaPointerGetAttributes(&at, host);
	if (e == cudaSuccess && at.type == cudaMemoryTypeHost && at.devicePointer) {
		*dev = at.devicePointer;
		return IBP_OK;
	}
	(void)cudaGetLastError();
	e = cudaHostGetDevicePointer(dev, (void *)host, 0);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		*dev = NULL;
		return ibpi_fail(IBP_ERR_INVALID_ARG, "pinned_device_ptr: %p is not pinned, mapped host "
				"memory: %s", host, cudaGetErrorString(e));
	}
	return IBP_OK;
}

void ibp_pinned_stats(uint64_t *reserved, uint64_t *in_use)
{
	if (reserved)
		*reserved = atomic_load(&reserved_bytes);
	if (in_use)
		*in_use = atomic_load(&in_use_bytes);
}
