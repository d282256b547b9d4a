/* cpu.c - CPU feature detection with CPUID and XGETBV. */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "util/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static ibp_cpu_features_t ibp_cpu_feat;
static pthread_once_t ibp_cpu_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static unsigned long long ibp_xgetbv0(void)
{
	unsigned eax, edx;
	__asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
	return ((unsigned long long)edx << 32) | eax;
}
#endif

static void ibp_cpu_detect(void)
{
	ibp_cpu_features_t f;
	memset(&f, 0, sizeof(f));
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	if (__get_cpuid(0, &a, &b, &c, &d)) {
		unsigned maxleaf = a;
		char vendor[13];
		memcpy(vendor, &b, 4);
		memcpy(vendor + 4, &d, 4);
		memcpy(vendor + 8, &c, 4);
		vendor[12] = 0;
		f.amd = strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0;
		bool osxsave = false, avx = false, f16c = false;
		if (maxleaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
			unsigned fam = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
			if (fam == 0xf)
				fam += (a >> 20) & 0xff;
			if (fam == 0x6 || fam >= 0xf)
				model |= ((a >> 16) & 0xf) << 4;
			f.family = fam;
			f.model = model;
			osxsave = (c >> 27) & 1;
			avx = (c >> 28) & 1;
			f16c = (c >> 29) & 1;
		}
		unsigned long long xcr0 = osxsave ? ibp_xgetbv0() : 0;
		bool ymm = (xcr0 & 0x6) == 0x6;
		bool zmm = (xcr0 & 0xe6) == 0xe6;
		f.f16c = f16c && avx && ymm;
		if (maxleaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
			f.bmi2 = (b >> 8) & 1;
			f.avx2 = avx && ymm && ((b >> 5) & 1);
			bool avx512f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
			f.avx512 = f.avx2 && zmm && avx512f && bw && vl;
			f.avx512vbmi = f.avx512 && ((c >> 1) & 1);
			f.avx512vbmi2 = f.avx512 && ((c >> 6) & 1);
			f.avx512popcnt = f.avx512 && ((c >> 14) & 1);
		}
		/* AMD before Zen3 (family 0x19) runs pext/pdep in microcode. */
		f.fast_pdep = f.bmi2 && !(f.amd && f.family < 0x19);
	}
#endif
	ibp_cpu_feat = f;
}

const ibp_cpu_features_t *ibpi_cpu(void)
{
	pthread_once(&ibp_cpu_once, ibp_cpu_detect);
	return &ibp_cpu_feat;
}

int ibpi_cpus_allowed(void)
{
	cpu_set_t set;
	long n = 0;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n < 1)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
}
