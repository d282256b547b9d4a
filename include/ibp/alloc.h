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

#ifdef __cplusplus
}
#endif
#endif /* IBP_ALLOC_H */
