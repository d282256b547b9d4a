/* container_internal.h - test hooks of the container writer (not public). */
#ifndef IBP_CONTAINER_INTERNAL_H
#define IBP_CONTAINER_INTERNAL_H

/* Makes every writer in the process produce format 1.<minor>: 1 gives the
 * 1.1 layout (64-byte sections, page-aligned payload, plain metadata,
 * FLAGS/CLUSTERS/OFFSETS, PAYLOAD_SUMS always), anything else the current
 * IBP_FORMAT_MINOR. Only for tests of the reader's 1.1 path; not
 * thread-safe with respect to writers running meanwhile. */
void ibp_container_write_minor_set(unsigned minor);

#endif /* IBP_CONTAINER_INTERNAL_H */
