/* ibp/status.h - status codes and per-thread error details.
 *
 * Every libibp call that can fail returns an ibp_status_t. On failure the
 * library also records a human-readable detail message (which file, which
 * row, which field) in thread-local storage; read it with ibp_last_error().
 * The library never prints and never exits.
 */
#ifndef IBP_STATUS_H
#define IBP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a deprecated call: the compiler warns where it is used. Deprecated
 * names stay exported for one release after their replacement appears
 * (docs/API.md "Names"). */
#ifndef IBP_DEPRECATED
#if defined(__GNUC__) || defined(__clang__)
#define IBP_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define IBP_DEPRECATED(msg)
#endif
#endif

/* Status codes. Values are stable: new codes are only ever appended. */
typedef enum ibp_status {
	IBP_OK = 0,
	IBP_ERR_INVALID_ARG = 1,      /* a caller argument is out of its documented range */
	IBP_ERR_NOMEM = 2,            /* an allocation failed */
	IBP_ERR_CORRUPT = 3,          /* untrusted bytes (file, row, payload) failed validation */
	IBP_ERR_CHECKSUM = 4,         /* a checksum did not match */
	IBP_ERR_IO = 5,               /* open/read/write/mmap failed (errno text in the detail) */
	IBP_ERR_UNSUPPORTED = 6,      /* valid request this build or machine cannot serve */
	IBP_ERR_BUFFER_TOO_SMALL = 7, /* a caller buffer is smaller than required */
	IBP_ERR_OUT_OF_RANGE = 8,     /* a row id or index is outside the data set */
	IBP_ERR_CUDA = 9,             /* a CUDA call failed (CUDA's message in the detail) */
	IBP_ERR_NO_DEVICE = 10,       /* CUDA path requested but no usable GPU */
	IBP_ERR_INTERNAL = 11         /* a bug in libibp; please report it */
} ibp_status_t;

/* Returns a static, constant description of status code `s` (never NULL). */
const char *ibp_status_string(ibp_status_t s);

/* Returns the detail message of the most recent failing libibp call on the
 * calling thread, or "" when none failed since ibp_clear_error(). The text
 * stays valid until the next libibp call on this thread. */
const char *ibp_last_error(void);

/* Clears the calling thread's detail message. */
void ibp_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif /* IBP_STATUS_H */
