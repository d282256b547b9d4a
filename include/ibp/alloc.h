/* ibp/alloc.h - host memory for large libibp buffers (container images,
 * staging areas).
 *
 * Memory comes from a dedicated jemalloc arena, created on first use with
 * mallctl("arenas.create") and served with mallocx(MALLOCX_ARENA(a)) /
 * dallocx. Keeping libibp's big buffers in their own arena keeps them out
 * of the application's heap and gives one place to attach extent hooks (a
 * later pinned-memory arena for CUDA transfers plugs in here).
 *
 * libibp calls only jemalloc's non-standard entry points (mallocx, dallocx,
 * mallctl); it never relies on jemalloc being the process malloc. Debian's
 * libjemalloc also exports unprefixed malloc/free, so a program that links
 * libjemalloc itself (for example through the static libibp.a, whose link
 * line carries -ljemalloc) gets jemalloc as its process-wide malloc; through
 * the shared libibp.so, libc's malloc is found first and stays in use.
 * Either way nothing is mixed: a pointer from ibp_host_alloc goes back only
 * through ibp_host_free. Under AddressSanitizer the functions use
 * posix_memalign/free instead, so the sanitizer sees every buffer's bounds.
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

#ifdef __cplusplus
}
#endif
#endif /* IBP_ALLOC_H */
