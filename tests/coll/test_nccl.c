/* test_nccl.c - the NCCL transport of the collectives (include/ibp/coll.h).
 *
 * Host side, every build: the entry points' argument checks, and a build
 * without NCCL answering IBP_ERR_UNSUPPORTED with the reason. With NCCL and
 * a device: loopback messages (rank 0 to itself) of several sizes arrive
 * intact, an oversized message is a mismatch, a receive nobody sends times
 * out (the transport aborts its communicator and later calls fail at
 * once), and collectives over ncclCommInitAll's ranks (one thread per GPU)
 * give EXP results bit-identical to NONE. Without a device the GPU tests
 * skip and the binary exits 77 (gpu_main.h).
 *
 * NCCL and the CUDA runtime are declared here as weak symbols: an NCCL
 * build links them (libibp needs them), other builds leave them NULL, so
 * this file compiles without nccl.h. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "ibp/coll.h"
#include "testutil.h"
#include "gpu_main.h"

IBP_GPU_TEST_MAIN()

typedef void *nccl_comm_t; /* ncclComm_t is an opaque pointer */
extern int ncclCommInitAll(nccl_comm_t *comms, int ndev, const int *devlist) __attribute__((weak));
extern int ncclCommDestroy(nccl_comm_t comm) __attribute__((weak));
extern int cudaGetDeviceCount(int *n) __attribute__((weak));

/* libibp has the real transport (CMake found nccl.h); it loads libnccl.so.2
 * at run time, this test links it to make communicators. */
static int nccl_built(void)
{
#ifdef IBP_TEST_NCCL_BUILT
	return 1;
#else
	return 0;
#endif
}

Test(nccl, arguments_and_stub)
{
	ibp_coll_comm_t *c = (ibp_coll_comm_t *)&c; /* must be reset to NULL */
	ibp_coll_transport_t t;
	nccl_comm_t none = NULL;
	ibp_status_t s = ibp_coll_comm_from_nccl(NULL, NULL, &c);
	cr_assert_null(c);
	if (!nccl_built()) {
		cr_assert_eq(s, IBP_ERR_UNSUPPORTED, "%s", ibp_status_string(s));
		cr_assert(strstr(ibp_last_error(), "without NCCL"), "%s", ibp_last_error());
		cr_assert_eq(ibp_coll_nccl_transport(&none, 1000, &t), IBP_ERR_UNSUPPORTED);
		cr_assert(strstr(ibp_last_error(), "without NCCL"), "%s", ibp_last_error());
		return;
	}
	cr_assert_eq(s, IBP_ERR_INVALID_ARG, "%s", ibp_last_error());
	cr_assert_eq(ibp_coll_nccl_transport(NULL, 1000, &t), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_nccl_transport(&none, 1000, &t), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "NULL"), "%s", ibp_last_error());
	cr_assert_eq(ibp_coll_nccl_transport(&none, 0, &t), IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_coll_comm_from_nccl(&none, NULL, NULL), IBP_ERR_INVALID_ARG);
}

/* Number of devices with NCCL, or skips. */
static int require_nccl_gpu(void)
{
	if (!nccl_built())
		cr_skip_test("libibp built without NCCL");
	int n = 0;
	if (!cudaGetDeviceCount || !ncclCommInitAll || !ncclCommDestroy || cudaGetDeviceCount(&n) != 0 || n < 1)
		cr_skip_test("no usable CUDA device");
	return n;
}

Test(nccl, loopback_sizes_mismatch_timeout)
{
	require_nccl_gpu();
	nccl_comm_t comm = NULL;
	int dev0 = 0;
	cr_assert_eq(ncclCommInitAll(&comm, 1, &dev0), 0, "ncclCommInitAll");
	ibp_coll_transport_t t;
	cr_assert_eq(ibp_coll_nccl_transport(&comm, 5000, &t), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(t.rank, 0);
	cr_assert_eq(t.nranks, 1);
	/* around the 16 KiB first part (16384 - 8 bytes of payload fit it), and
	 * larger messages whose staging grows between calls */
	const uint64_t sizes[] = { 0, 1, 3, 4096, 16375, 16376, 16377, 16384, 100000, (1u << 20) + 5, 7 };
	uint64_t cap = (1u << 20) + 64;
	uint8_t *sb = malloc(cap), *rb = malloc(cap);
	cr_assert(sb && rb);
	for (uint64_t i = 0; i < cap; i++)
		sb[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		uint64_t got = ~0ull;
		memset(rb, 0xEE, cap);
		cr_assert_eq(t.sendrecv(t.ctx, 0, sb, sizes[k], 0, rb, cap, &got, 5000), IBP_OK, "size %llu: %s",
			     (unsigned long long)sizes[k], ibp_last_error());
		cr_assert_eq(got, sizes[k]);
		cr_assert(memcmp(sb, rb, sizes[k]) == 0, "size %llu: bytes differ", (unsigned long long)sizes[k]);
		cr_assert_eq(rb[sizes[k]], 0xEE, "wrote past the message");
	}
	/* larger than the receiver expects */
	uint64_t got = 0;
	cr_assert_eq(t.sendrecv(t.ctx, 0, sb, 100, 0, rb, 99, &got, 5000), IBP_ERR_INVALID_ARG);
	cr_assert(strstr(ibp_last_error(), "mismatch"), "%s", ibp_last_error());
	cr_assert_eq(t.sendrecv(t.ctx, 0, sb, 1, 0, rb, cap, &got, 5000), IBP_ERR_IO); /* aborted */
	t.destroy(t.ctx);
	/* a receive nobody answers */
	cr_assert_eq(ibp_coll_nccl_transport(&comm, 5000, &t), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(t.sendrecv(t.ctx, -1, NULL, 0, 0, rb, cap, &got, 300), IBP_ERR_IO);
	cr_assert(strstr(ibp_last_error(), "timeout"), "%s", ibp_last_error());
	cr_assert_eq(t.sendrecv(t.ctx, 0, sb, 1, 0, rb, cap, &got, 300), IBP_ERR_IO);
	cr_assert(strstr(ibp_last_error(), "aborted"), "%s", ibp_last_error());
	t.destroy(t.ctx);
	free(sb);
	free(rb);
	cr_assert_eq(ncclCommDestroy(comm), 0);
}

typedef struct rank_job {
	nccl_comm_t *comm;
	int rank, n;
	uint64_t count;
	uint16_t *exp_out, *none_out;
	ibp_status_t st;
	char err[256];
} rank_job_t;

static void *rank_main(void *arg)
{
	rank_job_t *j = arg;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.policy = IBP_COLL_POLICY_ALWAYS;
	o.timeout_ms = 20000;
	ibp_coll_comm_t *c = NULL;
	uint16_t *x = malloc(j->count * 2);
	j->st = x ? ibp_coll_comm_from_nccl(j->comm, &o, &c) : IBP_ERR_NOMEM;
	if (j->st == IBP_OK) {
		uint32_t r = 12345u + (uint32_t)j->rank;
		for (uint64_t i = 0; i < j->count; i++) { /* BF16 near 0.01: exponents the codec can pack */
			r = r * 1664525u + 1013904223u;
			x[i] = (uint16_t)(0x3C00u + (r >> 24));
		}
		j->st = ibp_coll_allreduce(x, j->exp_out, j->count, IBP_DTYPE_BF16, IBP_COLL_SUM, IBP_COLL_CODEC_EXP, c,
					   NULL);
		if (j->st == IBP_OK)
			j->st = ibp_coll_allreduce(x, j->none_out, j->count, IBP_DTYPE_BF16, IBP_COLL_SUM,
						   IBP_COLL_CODEC_NONE, c, NULL);
	}
	if (j->st != IBP_OK)
		snprintf(j->err, sizeof j->err, "%s", ibp_last_error());
	ibp_coll_comm_free(c);
	free(x);
	return NULL;
}

Test(nccl, allreduce_exp_equals_none_over_gpus)
{
	int n = require_nccl_gpu();
	if (n > 8)
		n = 8;
	nccl_comm_t comms[8];
	int devs[8];
	for (int i = 0; i < n; i++)
		devs[i] = i;
	cr_assert_eq(ncclCommInitAll(comms, n, devs), 0, "ncclCommInitAll");
	rank_job_t jobs[8];
	pthread_t th[8];
	uint64_t count = 100003;
	for (int i = 0; i < n; i++) {
		jobs[i] = (rank_job_t){ &comms[i], i, n, count, malloc(count * 2), malloc(count * 2), IBP_OK, "" };
		cr_assert(jobs[i].exp_out && jobs[i].none_out);
		cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &jobs[i]), 0);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(jobs[i].st, IBP_OK, "rank %d: %s", i, jobs[i].err);
		cr_assert(memcmp(jobs[i].exp_out, jobs[i].none_out, count * 2) == 0, "rank %d: exp != none", i);
		cr_assert(memcmp(jobs[i].exp_out, jobs[0].exp_out, count * 2) == 0, "rank %d differs from rank 0", i);
	}
	for (int i = 0; i < n; i++) {
		free(jobs[i].exp_out);
		free(jobs[i].none_out);
		cr_assert_eq(ncclCommDestroy(comms[i]), 0);
	}
}
