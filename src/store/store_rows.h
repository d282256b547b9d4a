/* store_rows.h - the store's row decoder for other jobs of the store
 * layer (internal): the embedding bag decodes its rows in chunks with it.
 */
#ifndef IBP_STORE_ROWS_H
#define IBP_STORE_ROWS_H

#include <stdint.h>

#include "ibp/store.h"

/* Decodes rows ids[0 .. n-1] of an IBP store into out (n rows of
 * ibp_store_row_bytes bytes each) on the calling thread, with the gather's
 * row map and look-ahead; the ids must be valid rows (the caller checked).
 * Returns the number of rows decoded: n, or the position of the first row
 * that failed, with *st its status and the detail in this thread's error
 * slot. Not for block codecs (exp, fp8): returns 0 with
 * IBP_ERR_UNSUPPORTED. Thread-safe: any number of threads at once. */
uint64_t ibpi_store_decode_rows(const ibp_store_t *s, const int64_t *ids, uint64_t n, uint8_t *out,
			       ibp_status_t *st);

#endif /* IBP_STORE_ROWS_H */
