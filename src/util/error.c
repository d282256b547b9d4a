/* error.c - status strings and the thread-local detail message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ibp/status.h"
#include "ibp/version.h"
#include "util/error.h"

static _Thread_local char ibp_err_msg[512];

const char *ibp_status_string(ibp_status_t s)
{
	switch (s) {
	case IBP_OK: return "ok";
	case IBP_ERR_INVALID_ARG: return "invalid argument";
	case IBP_ERR_NOMEM: return "out of memory";
	case IBP_ERR_CORRUPT: return "corrupt input";
	case IBP_ERR_CHECKSUM: return "checksum mismatch";
	case IBP_ERR_IO: return "I/O error";
	case IBP_ERR_UNSUPPORTED: return "unsupported";
	case IBP_ERR_BUFFER_TOO_SMALL: return "buffer too small";
	case IBP_ERR_OUT_OF_RANGE: return "index out of range";
	case IBP_ERR_CUDA: return "CUDA error";
	case IBP_ERR_NO_DEVICE: return "no CUDA device";
	case IBP_ERR_INTERNAL: return "internal error";
	}
	return "unknown status";
}

const char *ibp_last_error(void)
{
	return ibp_err_msg;
}

void ibp_clear_error(void)
{
	ibp_err_msg[0] = '\0';
}

ibp_status_t ibpi_fail(ibp_status_t s, const char *fmt, ...)
{
	/* Format aside first: callers may pass ibp_last_error() as an argument. */
	char msg[sizeof(ibp_err_msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(ibp_err_msg, msg, sizeof(msg));
	return s;
}

const char *ibp_version_string(void)
{
	return "0.1.0";
}
