/* coll_ref.h - shared by test_coll.c (threads) and mpi_coll.c (MPI
 * ranks): inputs every rank can rebuild for every other, and the expected
 * output in the algorithms' own reduction order (coll.h), so NONE and EXP
 * are checked bit for bit. */
#ifndef IBP_COLL_REF_H
#define IBP_COLL_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp8/fp8_impl.h"
#include "ibp/coll.h"
#include "testutil.h"

enum { AG, RS, AR, A2A, A2AV, NOPS };
static const char *const op_names[] = { "allgather", "reducescatter", "allreduce", "alltoall", "alltoallv" };
static const ibp_dtype_t dtypes[] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
static const ibp_coll_codec_t codecs[] = { IBP_COLL_CODEC_NONE, IBP_COLL_CODEC_EXP, IBP_COLL_CODEC_FP8 };

/* TACO's bound for one E4M3 round trip of a block (docs/CODECS.md):
 * rel-L2 <= 2^-4, plus room for the dtype's own rounding. */
#define FP8_BOUND (0.0625 + 0.01)

static float get(const void *b, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return ((const float *)b)[i];
	uint16_t h = ((const uint16_t *)b)[i];
	return dt == IBP_DTYPE_BF16 ? fp8i_bf16_to_f32(h) : fp8i_f16_to_f32(h);
}

static void put(void *b, ibp_dtype_t dt, uint64_t i, float v)
{
	if (dt == IBP_DTYPE_F32)
		((float *)b)[i] = v;
	else
		((uint16_t *)b)[i] = dt == IBP_DTYPE_BF16 ? fp8i_f32_to_bf16(v) : fp8i_f32_to_f16(v);
}

/* Rank r's input: Gaussian-like values (sum of 4 uniforms), scale 0.5. */
static void *make_input(int r, ibp_dtype_t dt, uint64_t n, uint64_t salt)
{
	void *b = malloc(n * ibp_dtype_size(dt) + 1);
	if (!b)
		abort();
	tu_rng_t g;
	tu_rng_seed(&g, 1000003u * (uint64_t)r + salt);
	for (uint64_t i = 0; i < n; i++) {
		double v = tu_uniform(&g) + tu_uniform(&g) + tu_uniform(&g) + tu_uniform(&g) - 2.0;
		put(b, dt, i, (float)(v * 0.5));
	}
	return b;
}

/* All-to-all-v counts: how many elements rank s sends rank d. */
static uint64_t vcount(int s, int d, uint64_t n)
{
	return (uint64_t)(s * 7 + d * 3 + 1) * (n + 1) % (n + 2);
}

static uint64_t in_elems(int op, uint64_t n, int p, int r)
{
	uint64_t t = 0;
	switch (op) {
	case AG:
	case AR: return n;
	case RS:
	case A2A: return n * (uint64_t)p;
	}
	for (int d = 0; d < p; d++)
		t += vcount(r, d, n);
	return t;
}

static uint64_t out_elems(int op, uint64_t n, int p, int r)
{
	uint64_t t = 0;
	switch (op) {
	case AG:
	case A2A: return n * (uint64_t)p;
	case RS:
	case AR: return n;
	}
	for (int s = 0; s < p; s++)
		t += vcount(s, r, n);
	return t;
}

/* Displacement (elements) of rank s's block for rank d in s's AllToAllv send buffer. */
static uint64_t vsdispl(int s, int d, uint64_t n)
{
	uint64_t o = 0;
	for (int q = 0; q < d; q++)
		o += vcount(s, q, n);
	return o;
}

/* Displacement of rank s's block in rank r's AllToAllv receive buffer. */
static uint64_t vrdispl(int r, int s, uint64_t n)
{
	uint64_t o = 0;
	for (int q = 0; q < s; q++)
		o += vcount(q, r, n);
	return o;
}

/* Expected element i of rank r's output (ins[s]: rank s's input); *exact
 * gets the exact (double) value. */
static float ref_expect(int op, void *const *ins, int p, int r, ibp_dtype_t dt, uint64_t n, uint64_t i,
			double *exact)
{
	switch (op) {
	case AG: {
		float v = get(ins[i / n], dt, i % n);
		*exact = v;
		return v;
	}
	case A2A: {
		uint64_t s = i / n;
		float v = get(ins[s], dt, (uint64_t)r * n + i % n);
		*exact = v;
		return v;
	}
	case A2AV: {
		int s = 0;
		while (s + 1 < p && i >= vrdispl(r, s + 1, n))
			s++;
		float v = get(ins[s], dt, vsdispl(s, r, n) + (i - vrdispl(r, s, n)));
		*exact = v;
		return v;
	}
	}
	uint64_t pos, c;
	if (op == RS) {
		c = (uint64_t)r;
		pos = (uint64_t)r * n + i;
	} else {
		uint64_t q = n / (uint64_t)p, rem = n % (uint64_t)p;
		pos = i;
		c = 0;
		while (c + 1 < (uint64_t)p && i >= (c + 1) * q + (c + 1 < rem ? c + 1 : rem))
			c++;
	}
	/* Chunk c is summed starting at rank c+1, ending at rank c. */
	int first = (int)((c + 1) % (uint64_t)p);
	float acc = get(ins[first], dt, pos);
	double ex = acc;
	for (int k = 2; k <= p; k++) {
		int s = (int)((c + (uint64_t)k) % (uint64_t)p);
		float x = get(ins[s], dt, pos);
		ex += x;
		float t = acc + x;
		if (dt != IBP_DTYPE_F32) {
			uint16_t h;
			put(&h, dt, 0, t);
			t = get(&h, dt, 0);
		}
		acc = t;
	}
	*exact = ex;
	return acc;
}

static uint32_t ref_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

#endif /* IBP_COLL_REF_H */
