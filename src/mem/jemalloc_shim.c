/* jemalloc_shim.c - dlopen()ed jemalloc (see jemalloc_shim.h for why). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/jemalloc_shim.h"

#define JE_SONAME "libjemalloc.so.2"

typedef void *(*mallocx_fn)(size_t, int);
typedef void (*dallocx_fn)(void *, int);
typedef size_t (*sallocx_fn)(const void *, int);
typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static pthread_once_t je_once = PTHREAD_ONCE_INIT;
static int je_ok;
static mallocx_fn je_mallocx;
static dallocx_fn je_dallocx;
static sallocx_fn je_sallocx;
static mallctl_fn je_mallctl;
static char je_msg[256];

/* dlsym through a union: ISO C has no object-to-function pointer cast. */
static int lookup(void *h, const char *name, void (**fn)(void))
{
	union {
		void *obj;
		void (*fn)(void);
	} u;
	dlerror();
	u.obj = dlsym(h, name);
	if (u.obj == NULL) {
		const char *e = dlerror();
		snprintf(je_msg, sizeof(je_msg), "%s: %s not found%s%s", JE_SONAME, name, e ? ": " : "",
			 e ? e : "");
		return 0;
	}
	*fn = u.fn;
	return 1;
}

static void je_init(void)
{
	const char *no = getenv("IBP_NO_JEMALLOC");
	if (no != NULL && no[0] != '\0' && strcmp(no, "0") != 0) {
		snprintf(je_msg, sizeof(je_msg), "disabled by IBP_NO_JEMALLOC=%s", no);
		return;
	}
	dlerror();
	/* RTLD_LOCAL: jemalloc's unprefixed malloc/free must not interpose the
	 * process malloc. The handle is never closed: pointers outlive callers. */
	void *h = dlopen(JE_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(je_msg, sizeof(je_msg), "%s", e ? e : "dlopen(" JE_SONAME ") failed");
		return;
	}
	void (*f[4])(void);
	if (!lookup(h, "mallocx", &f[0]) || !lookup(h, "dallocx", &f[1]) || !lookup(h, "sallocx", &f[2]) ||
	    !lookup(h, "mallctl", &f[3]))
		return; /* not dlclose()d: its constructor may have registered TSD/atfork hooks */
	je_mallocx = (mallocx_fn)f[0];
	je_dallocx = (dallocx_fn)f[1];
	je_sallocx = (sallocx_fn)f[2];
	je_mallctl = (mallctl_fn)f[3];
	const char *ver = NULL;
	size_t sz = sizeof(ver);
	if (je_mallctl("version", &ver, &sz, NULL, 0) != 0 || ver == NULL)
		ver = "(unknown version)";
	/* "5.3.0-0-g54eaed1d..." -> "5.3.0" */
	int n = (int)strcspn(ver, "-");
	snprintf(je_msg, sizeof(je_msg), "jemalloc %.*s (%s)", n, ver, JE_SONAME);
	je_ok = 1;
}

int ibpi_je_available(void)
{
	pthread_once(&je_once, je_init);
	return je_ok;
}

const char *ibpi_je_status(void)
{
	pthread_once(&je_once, je_init);
	return je_msg;
}

void *ibpi_je_mallocx(size_t size, int flags)
{
	return ibpi_je_available() ? je_mallocx(size, flags) : NULL;
}

void ibpi_je_dallocx(void *p, int flags)
{
	if (ibpi_je_available())
		je_dallocx(p, flags);
}

size_t ibpi_je_sallocx(const void *p, int flags)
{
	return ibpi_je_available() ? je_sallocx(p, flags) : 0;
}

int ibpi_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
{
	return ibpi_je_available() ? je_mallctl(name, oldp, oldlenp, newp, newlen) : ENOSYS;
}
