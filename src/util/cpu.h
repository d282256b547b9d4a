/* cpu.h - run-time CPU feature detection (x86-64 CPUID; other CPUs report
 * no features). Results are computed once and cached; thread-safe. */
#ifndef IBP_CPU_H
#define IBP_CPU_H

#include <stdbool.h>

typedef struct ibp_cpu_features {
	bool bmi2;      /* pext/pdep available */
	bool fast_pdep; /* bmi2 and pext/pdep are not microcoded (not AMD family < 0x19) */
	bool avx2;      /* AVX2 usable (CPU and OS save the YMM state) */
	bool avx512;    /* AVX-512 F+BW+VL usable (CPU and OS save the ZMM state) */
	bool avx512vbmi; /* avx512 and VBMI (vpermb) */
	bool avx512vbmi2; /* avx512 and VBMI2 (vpcompressb) */
	bool avx512popcnt; /* avx512 and VPOPCNTDQ (vpopcntd) */
	bool f16c;      /* F16C (vcvtph2ps) usable: the CPU has it and the OS saves the YMM state */
	bool amd;       /* vendor AuthenticAMD / HygonGenuine */
	unsigned family; /* display family (base + extended) */
	unsigned model;  /* display model */
} ibp_cpu_features_t;

/* The features of the CPU this process runs on (never NULL). */
const ibp_cpu_features_t *ibpi_cpu(void);

/* CPUs the calling thread may run on (its affinity mask; the online CPUs
 * where that cannot be read), at least 1. A system call each time: the
 * mask may change. */
int ibpi_cpus_allowed(void);

#endif /* IBP_CPU_H */
