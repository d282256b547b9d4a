/* fork.h - telling a fork() child from its parent (internal).
 *
 * Only the thread that called fork() runs in the child: worker threads
 * are gone, and locks or condition variables they were using are left in
 * whatever state they had. An object that owns threads records
 * ibpi_fork_generation() when it makes them and compares it on use; a
 * different value means this process is a child made since, and the
 * threads and their hand-off state must be made again (store.c).
 *
 * ibpi_fork_watch() installs the pthread_atfork handlers (once per
 * process) that count the forks; call it before recording a generation.
 * The count grows by one in each child, so a grandchild differs from its
 * parent too. ibpi_fork_lock() serialises those rebuilds, and fork() waits
 * for a rebuild in progress, so a child never inherits the lock held.
 */
#ifndef IBP_FORK_H
#define IBP_FORK_H

#include <stdint.h>
#include "ibp/status.h"

/* Installs the handlers; IBP_ERR_NOMEM if pthread_atfork cannot. */
ibp_status_t ibpi_fork_watch(void);

/* Forks along this process's ancestry since ibpi_fork_watch() first
 * succeeded (0 in the process that called it). One atomic load. */
uint64_t ibpi_fork_generation(void);

void ibpi_fork_lock(void);
void ibpi_fork_unlock(void);

#endif /* IBP_FORK_H */
