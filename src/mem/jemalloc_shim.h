/* jemalloc_shim.h - jemalloc resolved at run time (internal).
 *
 * libibp does not link libjemalloc: Debian's libjemalloc.so.2 uses
 * initial-exec TLS, and a library that NEEDs it cannot be dlopen()ed late
 * (Python's ctypes after numpy: "cannot allocate memory in static TLS
 * block"). Instead the first call to ibpi_je_available() dlopen()s
 * libjemalloc.so.2 and looks up the four non-standard entry points libibp
 * uses. If that fails (library missing, no static TLS left, a symbol
 * missing, or IBP_NO_JEMALLOC=1 in the environment) jemalloc is simply not
 * available and callers use libc. If the process already has jemalloc
 * loaded (LD_PRELOAD, or a program linking it), dlopen() returns that same
 * copy, so every user in the process shares one jemalloc.
 *
 * The IBP_JE_MALLOCX_* flags below are the encodings from jemalloc's public
 * header (unchanged since jemalloc 4.0, and part of its ABI since callers
 * compile them in); defining them here keeps libjemalloc-dev out of CPU
 * builds. Code that needs extent hooks (extent_hooks_t) still includes
 * <jemalloc/jemalloc.h> for the type and passes the hooks through
 * ibpi_je_mallctl("arenas.create", &idx, &sz, &hooks_ptr, sizeof(hooks_ptr)).
 */
#ifndef IBP_JEMALLOC_SHIM_H
#define IBP_JEMALLOC_SHIM_H

#include <stddef.h>

/* mallocx/dallocx flags, as jemalloc's MALLOCX_* macros encode them. */
#define IBP_JE_MALLOCX_LG_ALIGN(la) ((int)(la))
/* `a` must be a power of two. */
#define IBP_JE_MALLOCX_ALIGN(a) ((int)__builtin_ctzll((unsigned long long)(a)))
#define IBP_JE_MALLOCX_ZERO ((int)0x40)
#define IBP_JE_MALLOCX_TCACHE_NONE ((int)((-1 + 2) << 8))
#define IBP_JE_MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)

/* Returns 1 when libjemalloc.so.2 was loaded and mallocx, dallocx, sallocx
 * and mallctl were found, else 0. The first call does the dlopen (once per
 * process, under pthread_once); later calls only read the result. Never
 * prints. Setting IBP_NO_JEMALLOC=1 (any value but "" or "0") before the
 * first call makes it return 0 (tests of the libc fallback). Thread-safe. */
int ibpi_je_available(void);

/* Describes the outcome: "jemalloc 5.3.0 (libjemalloc.so.2)" when
 * available, otherwise why not (dlerror() text, a missing symbol, or
 * "disabled by IBP_NO_JEMALLOC"). The string is static and lives as long as
 * the process. Calls ibpi_je_available() first. Thread-safe. */
const char *ibpi_je_status(void);

/* jemalloc's mallocx(size, flags). Only valid after ibpi_je_available()
 * returned 1 (otherwise returns NULL). size 0 is undefined in jemalloc:
 * callers pass at least 1. */
void *ibpi_je_mallocx(size_t size, int flags);

/* jemalloc's dallocx(p, flags); p must come from ibpi_je_mallocx. A no-op
 * when jemalloc is not available (nothing can have been allocated). */
void ibpi_je_dallocx(void *p, int flags);

/* jemalloc's sallocx(p, flags): the usable size of p (from ibpi_je_mallocx).
 * Returns 0 when jemalloc is not available. */
size_t ibpi_je_sallocx(const void *p, int flags);

/* jemalloc's mallctl(name, oldp, oldlenp, newp, newlen), e.g.
 * "arenas.create" with newp = &hooks_ptr (extent_hooks_t *) for an arena
 * with extent hooks. Returns jemalloc's errno-style result (0 = success), or
 * ENOSYS when jemalloc is not available. */
int ibpi_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

#endif /* IBP_JEMALLOC_SHIM_H */
