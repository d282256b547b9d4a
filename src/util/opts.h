/* opts.h - the size field that starts every public options struct
 * (ibp_train_opts_t, ibp_exp_opts_t, ibp_fp8_opts_t, ibp_cache_opts_t,
 * ibp_slab_pool_opts_t, ibp_coll_opts_t). *_opts_default() sets it to the
 * struct's size in the caller's headers; every call that takes the struct
 * checks it first, so a struct not filled by *_opts_default() or built
 * against another release's headers is an error, not fields read from the
 * wrong offsets. A later release that appends fields accepts every earlier
 * size (reading the missing tail as defaults) by raising the bound here. */
#ifndef IBP_UTIL_OPTS_H
#define IBP_UTIL_OPTS_H

#include <stdint.h>

#include "ibp/status.h"
#include "util/error.h"

/* IBP_OK when `have` (the caller's size field) is `want` (sizeof the
 * library's struct). `what` names the struct, `fn` the call. */
static inline ibp_status_t ibpi_opts_size(uint64_t have, uint64_t want, const char *fn, const char *what)
{
	if (have == want)
		return IBP_OK;
	if (have > want)
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				 "%s: %s.size is %llu, this libibp's is %llu: built against newer headers than the "
				 "library it runs with",
				 fn, what, (unsigned long long)have, (unsigned long long)want);
	return ibpi_fail(IBP_ERR_INVALID_ARG,
			 "%s: %s.size is %llu, not %llu: initialise the options with their *_opts_default() first",
			 fn, what, (unsigned long long)have, (unsigned long long)want);
}

/* The check for a struct pointer `o` (NULL: nothing to check, defaults apply). */
#define IBPI_OPTS_CHECK(o, fn, what) ((o) ? ibpi_opts_size((o)->size, sizeof *(o), (fn), (what)) : IBP_OK)

#endif /* IBP_UTIL_OPTS_H */
