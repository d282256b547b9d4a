/* coll_ws.c - the host working buffers a communicator keeps between calls
 * (coll_internal.h, enum coll_ws): the buffer steps (mem_host.c), the
 * rings and the all-reduces take them here, so that none of them needs
 * the communicator's code (comm.c) and comm.c needs none of them. */
#include <stdlib.h>

#include "coll/coll_internal.h"
#include "util/error.h"

void *ibpi_coll_ws(ibp_coll_comm_t *c, enum coll_ws slot, uint64_t bytes)
{
	if (bytes == 0)
		bytes = 1;
	if (c->ws[slot].cap >= bytes)
		return c->ws[slot].p;
	if (c->ws_lent) /* the old buffer may still be the transport's */
		c->ws[slot].p = NULL;
	free(c->ws[slot].p);
	c->ws[slot].cap = 0;
	if (!(c->ws[slot].p = malloc(bytes))) {
		ibpi_fail(IBP_ERR_NOMEM, "coll: out of memory for a %llu-byte working buffer",
			 (unsigned long long)bytes);
		return NULL;
	}
	c->ws[slot].cap = bytes;
	return c->ws[slot].p;
}

void ibpi_coll_ws_trim(ibp_coll_comm_t *c)
{
	for (int k = 0; k < COLL_WS_N; k++)
		if (c->ws[k].cap > COLL_WS_KEEP) {
			if (!c->ws_lent)
				free(c->ws[k].p);
			c->ws[k].p = NULL;
			c->ws[k].cap = 0;
		}
}
