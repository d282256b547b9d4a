/* examples/alloc.c - libibp's host buffers and pinned (GPU-mapped) memory.
 *
 * ibp_host_alloc serves large buffers from a dedicated jemalloc arena (libc
 * when jemalloc cannot be loaded). ibp_pinned_alloc gives pinned, mapped
 * memory for zero-copy GPU reads; with IBP_CUDA_HOST_FALLBACK it hands out
 * ordinary host memory when there is no GPU, and still says so with
 * IBP_ERR_NO_DEVICE. This program runs with and without a GPU.
 *
 *   cc alloc.c $(pkg-config --cflags --libs ibp) -o alloc && ./alloc
 */
#include <ibp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXPECT(cond)                                                                   \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                      \
		}                                                                      \
	} while (0)

int main(void)
{
	printf("host allocator: %s\n", ibp_host_allocator());

	/* 1 MiB aligned to 4 KiB, written and read back. */
	const uint64_t size = 1u << 20;
	uint8_t *p = ibp_host_alloc(size, 4096);
	EXPECT(p != NULL);
	EXPECT((uintptr_t)p % 4096 == 0);
	for (uint64_t i = 0; i < size; i++)
		p[i] = (uint8_t)(i * 7);
	for (uint64_t i = 0; i < size; i++)
		EXPECT(p[i] == (uint8_t)(i * 7));
	ibp_host_free(p);

	/* A bad alignment is refused, with a detail. */
	EXPECT(ibp_host_alloc(64, 3) == NULL);
	printf("alignment 3: %s\n", ibp_last_error());

	/* Pinned memory, or host memory when no GPU can be used. */
	void *q = NULL;
	ibp_status_t s = ibp_pinned_alloc(size, 0, IBP_CUDA_HOST_FALLBACK, &q);
	if (s == IBP_ERR_NO_DEVICE) {
		printf("no GPU: %s\n", ibp_last_error());
		EXPECT(q != NULL && !ibp_pinned_owns(q)); /* valid, but not pinned */
		void *dev = NULL;
		EXPECT(ibp_pinned_device_ptr(q, &dev) == IBP_ERR_NO_DEVICE);
	} else {
		EXPECT(s == IBP_OK && q != NULL && ibp_pinned_owns(q));
		void *dev = NULL;
		EXPECT(ibp_pinned_device_ptr(q, &dev) == IBP_OK && dev != NULL);
		printf("pinned %llu bytes at host %p, device %p\n", (unsigned long long)size, q, dev);
	}
	memset(q, 0xAB, size);
	EXPECT(((uint8_t *)q)[size - 1] == 0xAB);
	uint64_t reserved = 0, in_use = 0;
	ibp_pinned_stats(&reserved, &in_use);
	printf("pinned allocator: %llu bytes reserved, %llu in use\n", (unsigned long long)reserved,
	       (unsigned long long)in_use);
	ibp_pinned_free(q);

	/* Without the fallback flag and without a GPU nothing is returned. */
	void *r = NULL;
	s = ibp_pinned_alloc(4096, 0, 0, &r);
	EXPECT(s == IBP_OK ? r != NULL : (s == IBP_ERR_NO_DEVICE && r == NULL));
	ibp_pinned_free(r);

	printf("alloc example: OK\n");
	return 0;
}
