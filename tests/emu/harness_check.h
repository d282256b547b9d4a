/* harness_check.h - what the emulator harnesses (harness*.cpp) share: a
 * failure counter with CHECK (reports file:line, stops after 20 failures),
 * OK (a libibp call that must succeed), a splitmix64 generator seeded by
 * the harness (rs) and one command-line parser (harness_parse). */
#ifndef IBP_EMU_HARNESS_CHECK_H
#define IBP_EMU_HARNESS_CHECK_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ibp/status.h"

static int failures;
/* A check observes results as a blocking copy back would: the device's
 * queued work finishes first (CHECK_NOW: as things are, for tests of the
 * emulator's streams). */
#define CHECK(c, ...)                                                        \
	do {                                                                 \
		emu_device_sync();                                           \
		CHECK_NOW(c, __VA_ARGS__);                                   \
	} while (0)
#define CHECK_NOW(c, ...)                                                    \
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

extern int emu_defect;
extern uint64_t emu_seed;
extern int emu_preempt_mean;

/* What a harness's command line says. */
struct harness_args {
	std::string suite;
	unsigned long long seed = 1;
	int quick = 0;
	int preempt_set = 0;     /* --preempt given */
	const char *data = 0;    /* --data DIR */
	const char *tmp = 0;     /* --tmp DIR */
	std::vector<uint64_t> rows; /* --rows R,... (empty when not given) */
};

/* Parses SUITE [--seed S] [--quick] [--defect N] [--preempt M] [--data DIR]
 * [--tmp DIR] [--rows R,...]. suites: the accepted suite names, '|'-separated;
 * deflt: the suite when none is named (NULL: one must be). options: this
 * harness's usage text for its options; an option it does not name there is
 * refused. Sets emu_defect, emu_preempt_mean, and seeds rs and emu_seed.
 * false, with the usage printed, on a bad command line. */
static inline bool harness_parse(int argc, char **argv, const char *suites, const char *deflt, const char *options,
				 harness_args *a)
{
	const std::string names = std::string("|") + suites + "|";
	bool ok = true;
	for (int i = 1; i < argc && ok; i++) {
		const std::string o = argv[i];
		const bool has_val = i + 1 < argc;
		const bool takes = strstr(options, (o + " ").c_str()) != 0 || strstr(options, (o + "]").c_str()) != 0;
		if (o.rfind("--", 0) != 0) { /* the suite: named once */
			ok = a->suite.empty() && names.find("|" + o + "|") != std::string::npos;
			a->suite = o;
		} else if (!takes)
			ok = false;
		else if (o == "--quick")
			a->quick = 1;
		else if (!has_val)
			ok = false;
		else if (o == "--seed")
			a->seed = strtoull(argv[++i], 0, 0);
		else if (o == "--defect")
			emu_defect = atoi(argv[++i]);
		else if (o == "--preempt") {
			emu_preempt_mean = atoi(argv[++i]);
			a->preempt_set = 1;
		} else if (o == "--data")
			a->data = argv[++i];
		else if (o == "--tmp")
			a->tmp = argv[++i];
		else if (o == "--rows") {
			for (char *p = argv[++i]; *p && ok;) {
				a->rows.push_back(strtoull(p, &p, 0));
				ok = *p == ',' || *p == 0;
				p += *p == ',';
			}
		} else
			ok = false;
	}
	if (ok && a->suite.empty()) {
		ok = deflt != 0;
		a->suite = deflt ? deflt : "";
	}
	if (!ok) {
		fprintf(stderr, "usage: %s %s%s%s %s\n", argv[0], deflt ? "[" : "", suites, deflt ? "]" : "", options);
		return false;
	}
	rs = a->seed;
	emu_seed = a->seed;
	fprintf(stderr, "emu: suite %s seed %llu%s defect %d\n", a->suite.c_str(), a->seed, a->quick ? " (quick)" : "",
		emu_defect);
	return true;
}

#endif
