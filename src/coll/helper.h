/* helper.h - a communicator's persistent helper thread: runs one job at a
 * time handed over under a mutex and condition variables (no spinning).
 * Made once, on the first job that needs it; joined when the communicator
 * is freed. Used to decode a received AllGather block while the next ring
 * step forwards it, and for the codec work of the pipelined rings. */
#ifndef IBP_COLL_HELPER_H
#define IBP_COLL_HELPER_H

#include "ibp/status.h"

typedef struct coll_helper coll_helper_t;

/* Starts a helper thread. IBP_ERR_NOMEM (no memory or thread resources)
 * or IBP_ERR_INTERNAL (another pthread failure), with the errno text. */
ibp_status_t ibpi_coll_helper_start(coll_helper_t **out);

/* Hands fn(arg) to the helper; returns without waiting. Every post needs
 * its ibpi_coll_helper_wait before the next (else IBP_ERR_INTERNAL). */
ibp_status_t ibpi_coll_helper_post(coll_helper_t *h, void (*fn)(void *), void *arg);

/* Blocks until the posted job (if any) has returned. IBP_ERR_INTERNAL if
 * a pthread call failed (the job's own status travels in arg). */
ibp_status_t ibpi_coll_helper_wait(coll_helper_t *h);

/* Waits for a posted job, stops and joins the thread, frees h (NULL: no-op).
 * IBP_ERR_INTERNAL if a pthread call failed (h is freed anyway unless the
 * thread could not be joined, then it is leaked rather than freed under it). */
ibp_status_t ibpi_coll_helper_stop(coll_helper_t *h);

#endif /* IBP_COLL_HELPER_H */
