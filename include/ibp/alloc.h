/* ibp/alloc.h - host memory for large libibp buffers (container images,
 * staging areas).
 *
 * Memory comes from a dedicated jemalloc arena, created on first use with
 * mallctl("arenas.create") and served with mallocx(MALLOCX_ARENA(a)) /
 * dallocx. Keeping libibp's big buffers in their own arena keeps them out
 * of the application's heap and gives one place to attach extent hooks (a
 * later pinned-memory arena for CUDA transfers plugs in here).
 *
 * jemalloc is a run-time dependency: libibp does not link it, it dlopen()s
 * libjemalloc.so.2 on first use (RTLD_LOCAL). A shared library that NEEDs
 * Debian's libjemalloc cannot be loaded late (Python ctypes after numpy
 * fails with "cannot allocate memory in static TLS block", since jemalloc
 * uses initial-exec TLS). Its TLS is larger than glibc's static TLS
 * surplus, so in practice the dlopen() succeeds only when the program
 * already has jemalloc loaded (it links -ljemalloc, as the `ibp` CLI does,
 * or runs with LD_PRELOAD=libjemalloc.so.2); a failed dlopen() is
 * harmless. When jemalloc cannot be loaded (not installed, no static TLS
 * left, or IBP_NO_JEMALLOC=1 in the environment) the functions use
 * posix_memalign/free instead. The choice is made once per process;
 * ibp_host_allocator() reports it.
 *
 * libibp calls only jemalloc's non-standard entry points (mallocx, dallocx,
 * sallocx, mallctl) and never makes jemalloc the process malloc itself
 * (a program that links libjemalloc gets it as its malloc). Nothing is
 * mixed: a pointer from ibp_host_alloc goes back only through
 * ibp_host_free. Under AddressSanitizer the functions always use
 * posix_memalign/free, so the sanitizer sees every buffer's bounds.
 */
#ifndef IBP_ALLOC_H
#define IBP_ALLOC_H

#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Alignment used when ibp_host_alloc is given align = 0. */
#define IBP_HOST_ALIGN_DEFAULT 64u

/* Allocates `size` bytes aligned to `align` (a power of two up to 1 GiB;
 * 0 = IBP_HOST_ALIGN_DEFAULT) from libibp's host arena. size 0 returns a
 * valid unique pointer. Returns NULL on failure and records the detail
 * (IBP_ERR_NOMEM, or IBP_ERR_INVALID_ARG for a bad alignment) for
 * ibp_last_error(). The memory is uninitialised. Thread-safe. */
void *ibp_host_alloc(uint64_t size, uint64_t align);

/* Frees memory from ibp_host_alloc; NULL is a no-op. Thread-safe. */
void ibp_host_free(void *p);

/* Names the allocator ibp_host_alloc uses in this process (deciding it now
 * if no allocation has yet): "jemalloc arena N (jemalloc 5.3.0
 * (libjemalloc.so.2))", "libc (jemalloc unavailable: <reason>)" or
 * "libc (AddressSanitizer build)". Meant for logs and `ibp` CLI output.
 * The string is static, never NULL, and stays valid for the life of the
 * process. Thread-safe. */
const char *ibp_host_allocator(void);

/* Option bit for ibp_pinned_alloc and ibp_cuda_store_create: when no GPU
 * can be used, fall back to ordinary host memory instead of failing. The
 * call then still returns IBP_ERR_NO_DEVICE, with a detail that says so,
 * but its output is valid and must be released as usual. */
#define IBP_CUDA_HOST_FALLBACK 1u

/* ---- pinned host memory ------------------------------------------------ */

/* One process-wide allocator of pinned, mapped host memory, shared by
 * staging buffers, stores and KV blocks: a jemalloc arena whose extents come
 * from cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable) through
 * jemalloc extent hooks (docs/GPU.md). Pinned extents are kept for reuse
 * when freed and are never returned to the driver while the process runs.
 * When jemalloc cannot be loaded (ibp/alloc.h), every allocation is its
 * own cudaHostAlloc, returned by ibp_pinned_free.
 *
 * Allocates `size` bytes aligned to `align` (power of two up to 1 GiB;
 * 0 = 256) and stores the pointer in *out. The memory is uninitialised and
 * device-accessible at the same address (unified addressing);
 * ibp_pinned_device_ptr gives the device address explicitly.
 * Errors: IBP_ERR_INVALID_ARG, IBP_ERR_NOMEM, IBP_ERR_CUDA,
 * IBP_ERR_NO_DEVICE (with IBP_CUDA_HOST_FALLBACK in `flags`: *out is then
 * ordinary host memory, still released with ibp_pinned_free).
 * Thread-safe. */
ibp_status_t ibp_pinned_alloc(uint64_t size, uint64_t align, unsigned flags, void **out);

/* Frees memory from ibp_pinned_alloc (pinned or fallback); NULL is a no-op.
 * The block may be handed out again at once, so no device work may still
 * use it: synchronise the stream of any asynchronous copy from or into it
 * first, or use ibp_pinned_free_async. Thread-safe. */
void ibp_pinned_free(void *p);

/* Frees memory from ibp_pinned_alloc once the work enqueued on `stream` (a
 * cudaStream_t; NULL = the default stream) before this call has finished:
 * an asynchronous copy from or into the block that is still in flight
 * never sees it handed out again. Returns at once; the block is reclaimed
 * by a later ibp_pinned_alloc, ibp_pinned_free or ibp_pinned_free_async
 * once an event recorded on the stream here has completed. NULL is a no-op;
 * fallback (non-pinned) memory is freed at once. Errors: IBP_ERR_CUDA when
 * the event cannot be recorded: the call then waits for the stream and
 * frees the block, or, if that wait fails too, keeps the block out of use
 * for good (never reused while a copy might still touch it). Thread-safe. */
ibp_status_t ibp_pinned_free_async(void *p, void *stream);

/* 1 if p lies inside memory pinned by ibp_pinned_alloc, else 0. */
int ibp_pinned_owns(const void *p);

/* Device address of pinned mapped host memory `host` (any pinned mapped
 * memory, not only ibp_pinned_alloc's). Errors: IBP_ERR_INVALID_ARG (NULL,
 * or not pinned and mapped: CUDA's message in the detail), IBP_ERR_NO_DEVICE. */
ibp_status_t ibp_pinned_device_ptr(const void *host, void **dev);

/* Bytes the pinned allocator has obtained from cudaHostAlloc so far and the
 * bytes currently handed out by ibp_pinned_alloc (either may be NULL). */
void ibp_pinned_stats(uint64_t *reserved, uint64_t *in_use);

#ifdef __cplusplus
}
#endif
#endif /* IBP_ALLOC_H */
