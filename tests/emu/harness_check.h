/* harness_check.h - what the per-kernel harnesses (harness_bag.cpp,
 * harness_cache.cpp, harness_dynamiq.cpp) share: a failure counter with
 * CHECK (reports file:line, stops after 20 failures), OK (a libibp call that
 * must succeed) and a splitmix64 generator seeded by the harness (rs). */
#ifndef IBP_EMU_HARNESS_CHECK_H
#define IBP_EMU_HARNESS_CHECK_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "ibp/status.h"

static int failures;
#define CHECK(c, ...)                                                        \
	do {                                                                 \
		if (!(c)) {                                                  \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, "\n");                               \
			if (++failures > 20)                                 \
				exit(1);                                     \
		}                                                            \
	} while (0)
#define OK(x)                                                                          \
	do {                                                                           \
		ibp_status_t s_ = (x);                                                 \
		if (s_ != IBP_OK) {                                                    \
			fprintf(stderr, "%s: %d %s\n", #x, (int)s_, ibp_last_error()); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static uint64_t rs = 1;
static inline uint64_t rnd()
{
	uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

#endif
