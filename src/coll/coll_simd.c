/* coll_simd.c - the run-time choice of the collectives' vector kernels
 * (DynamiQ's and RCMoE's: scalar, AVX2, AVX-512), shared by both codecs
 * (dynamiq.c, rcmoe.c); ibpi_coll_simd_set for tests and benchmarks. */
#include <stdlib.h>
#include <string.h>

#include "coll/dynamiq_simd.h"
#include "util/cpu.h"

/* ---- run-time dispatch of the vector kernels (shared with rcmoe.c) ---- */

static int simd_forced;   /* ibpi_coll_simd_set's choice; 0 = AUTO */
static int simd_auto;     /* AUTO resolved once (0 = not yet) */

static int simd_runs(coll_simd_impl_t impl)
{
	if (impl == COLL_SIMD_SCALAR)
		return 1;
#ifdef COLL_HAVE_SIMD
	const ibp_cpu_features_t *f = ibpi_cpu();
	if (impl == COLL_SIMD_AVX2)
		return f->avx2 && f->bmi2;
	if (impl == COLL_SIMD_AVX512)
		return f->avx512 && f->bmi2 && __builtin_cpu_supports("avx512dq");
#endif
	return 0;
}

static coll_simd_impl_t simd_get(void)
{
	int f = __atomic_load_n(&simd_forced, __ATOMIC_RELAXED);
	if (f)
		return (coll_simd_impl_t)f;
	int a = __atomic_load_n(&simd_auto, __ATOMIC_RELAXED);
	if (!a) {
		const char *e = getenv("IBP_FORCE_PORTABLE");
		a = e && strcmp(e, "1") == 0 ? COLL_SIMD_SCALAR
		    : simd_runs(COLL_SIMD_AVX512) ? COLL_SIMD_AVX512
		    : simd_runs(COLL_SIMD_AVX2)	  ? COLL_SIMD_AVX2
						  : COLL_SIMD_SCALAR;
		__atomic_store_n(&simd_auto, a, __ATOMIC_RELAXED);
	}
	return (coll_simd_impl_t)a;
}

int ibpi_coll_simd_set(coll_simd_impl_t impl)
{
	if (impl != COLL_SIMD_AUTO && !simd_runs(impl))
		return 0;
	__atomic_store_n(&simd_forced, (int)impl, __ATOMIC_RELAXED);
	return 1;
}

const char *ibpi_coll_simd_name(coll_simd_impl_t impl)
{
	static const char *const names[] = { "auto", "scalar", "avx2", "avx512" };
	return (unsigned)impl < 4 ? names[impl] : "unknown";
}

const dq_kern_t *ibpi_dq_kern(void)
{
#ifdef COLL_HAVE_SIMD
	switch (simd_get()) {
	case COLL_SIMD_AVX512:
		return &ibpi_dq_kern_avx512;
	case COLL_SIMD_AVX2:
		return &ibpi_dq_kern_avx2;
	default:
		break;
	}
#endif
	return NULL;
}

const rc_kern_t *ibpi_rc_kern(void)
{
#ifdef COLL_HAVE_SIMD
	switch (simd_get()) {
	case COLL_SIMD_AVX512:
		return &ibpi_rc_kern_avx512;
	case COLL_SIMD_AVX2:
		return &ibpi_rc_kern_avx2;
	default:
		break;
	}
#endif
	return NULL;
}
