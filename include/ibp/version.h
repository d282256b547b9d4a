/* ibp/version.h - the libibp version, at compile time and at run time. */
#ifndef IBP_VERSION_H
#define IBP_VERSION_H

#define IBP_VERSION_MAJOR 0
#define IBP_VERSION_MINOR 1
#define IBP_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif
/* "MAJOR.MINOR.PATCH" of the library actually linked (may differ from the
 * macros above when a program runs against a newer shared libibp).
 * The string is static. Thread-safe. */
const char *ibp_version_string(void);
#ifdef __cplusplus
}
#endif

#endif /* IBP_VERSION_H */
