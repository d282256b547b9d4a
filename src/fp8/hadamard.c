/* hadamard.c - fast Walsh-Hadamard transform (see hadamard.h). */
#include "fp8/hadamard.h"

void ibpi_fwht_f32(float *x, uint32_t log2n)
{
	uint32_t n = 1u << log2n;
	for (uint32_t h = 1; h < n; h <<= 1)
		for (uint32_t i = 0; i < n; i += 2 * h)
			for (uint32_t j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];
				x[j] = FP_ADD(a, b);
				x[j + h] = FP_SUB(a, b);
			}
}

void ibpi_hadamard_f32(float *x, uint32_t log2n)
{
	uint32_t n = 1u << log2n;
	float inv = ibp_hadamard_norm(log2n);
	ibpi_fwht_f32(x, log2n);
	for (uint32_t j = 0; j < n; j++)
		x[j] = FP_MUL(x[j], inv);
}
