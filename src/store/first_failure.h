/* first_failure.h - which failure a pooled gather reports. Threads decode
 * grains in any order and each stops at its first bad row; several may fail
 * in one call. The caller must get the failure at the smallest position
 * (what a one-thread gather would report), whatever order they were found
 * in. A pure function, so the rule is tested without relying on thread
 * timing (tests/store/test_store_faults.c). */
#ifndef IBP_STORE_FIRST_FAILURE_H
#define IBP_STORE_FIRST_FAILURE_H

#include <stdint.h>

/* Nonzero when a failure at `pos` replaces the one recorded so far
 * (`have`: one is recorded, at `recorded_pos`). */
static inline int ibp_failure_replaces(int have, uint64_t pos, uint64_t recorded_pos)
{
	return !have || pos < recorded_pos;
}

#endif
