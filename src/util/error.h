/* error.h - internal helpers to record a status with its detail message. */
#ifndef IBP_ERROR_H
#define IBP_ERROR_H

#include "ibp/status.h"

/* Records `fmt` as the calling thread's detail message and returns `s`, so
 * failing paths read: return ibpi_fail(IBP_ERR_CORRUPT, "row %llu: ...", ...). */
ibp_status_t ibpi_fail(ibp_status_t s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Propagates a failing status (the detail is already recorded). */
#define IBP_TRY(expr)                                   \
	do {                                            \
		ibp_status_t ibp_try_s_ = (expr);       \
		if (ibp_try_s_ != IBP_OK)               \
			return ibp_try_s_;              \
	} while (0)

#endif /* IBP_ERROR_H */
