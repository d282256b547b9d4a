/* pinned_first_call.c - the pinned allocator's first call in a process whose
 * malloc is jemalloc (our executables; a user's LD_PRELOAD), against a fake
 * CUDA runtime whose first context-creating call starts a driver thread and
 * waits for its first malloc, as the real driver does.
 *
 * Seen on an H200 (2026-11-28): ibp_pinned_alloc as the process's first
 * context-creating call hung for good. jemalloc's arenas.create calls the
 * pinned extent hook with its global arena lock held; cudaHostAlloc there
 * created the context, whose new thread's first malloc wanted that lock.
 * The allocator now creates the context and its first region before the
 * arena. This test fails (watchdog, exit 1) if the hook is ever again the
 * first to call the runtime; it exits 77 (skipped) without jemalloc. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem/pinned_cudahost.c"

/* ---- the fake runtime ---- */
static atomic_int context_made;
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;

static void *driver_thread(void *arg)
{
	(void)arg;
	void *volatile p = malloc(64); /* a new thread's first malloc: jemalloc picks its arena */
	free(p);
	return NULL;
}

static void make_context(void)
{
	pthread_mutex_lock(&ctx_mu);
	if (!atomic_load(&context_made)) {
		pthread_t t;
		if (pthread_create(&t, NULL, driver_thread, NULL) == 0)
			pthread_join(t, NULL);
		atomic_store(&context_made, 1);
	}
	pthread_mutex_unlock(&ctx_mu);
}

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1; /* no context: the real call does not create one either */
	return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake error"; }
cudaError_t cudaFree(void *p)
{
	make_context();
	return p ? cudaErrorMemoryAllocation : cudaSuccess; /* only cudaFree(NULL) is expected */
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	make_context();
	void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return cudaErrorMemoryAllocation;
	*p = m;
	return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { (void)p; return cudaSuccess; } /* sizes unknown here: kept */
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags) { (void)flags; *d = h; return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	memset(a, 0, sizeof(*a));
	a->type = cudaMemoryTypeHost;
	a->devicePointer = (void *)p;
	return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) { (void)flags; *e = (cudaEvent_t)1; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e, (void)s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }

/* ---- the test ---- */
static void *watchdog(void *arg)
{
	(void)arg;
	sleep(20);
	fprintf(stderr, "pinned_first_call: FAILED: the first ibp_pinned_alloc did not return in 20 s "
		"(the runtime's first call inside jemalloc's arena creation: deadlock)\n");
	_exit(1);
}

int main(void)
{
	if (!ibpi_je_available()) {
		printf("pinned_first_call: SKIPPED: no jemalloc (%s)\n", ibpi_je_status());
		return 77;
	}
	pthread_t w;
	if (pthread_create(&w, NULL, watchdog, NULL) != 0)
		return 1;
	void *p = NULL;
	ibp_status_t st = ibp_pinned_alloc(1u << 20, 4096, 0, &p);
	if (st != IBP_OK || !p) {
		fprintf(stderr, "pinned_first_call: FAILED: ibp_pinned_alloc: %s\n", ibp_last_error());
		return 1;
	}
	if (!arena_ok || nregions != 1 || regions[0].size != REGION_MIN) {
		fprintf(stderr, "pinned_first_call: FAILED: want the jemalloc arena on one %llu-byte region, "
			"have arena %d, %u regions (%s)\n", (unsigned long long)REGION_MIN, arena_ok, nregions, arena_msg);
		return 1;
	}
	memset(p, 0x5a, 1u << 20);
	const uintptr_t a = (uintptr_t)p;
	if (a < regions[0].base || a + (1u << 20) > regions[0].base + regions[0].size) {
		fprintf(stderr, "pinned_first_call: FAILED: the block is not in the pinned region\n");
		return 1;
	}
	ibp_pinned_free(p);
	printf("pinned_first_call: OK (context and first region before the arena; no deadlock)\n");
	return 0;
}
