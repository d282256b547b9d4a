/* mpi_coll.c - the collectives on Open MPI ranks (ctest runs it through
 * run_mpi.sh with 2, 3 and 4 ranks): every collective x codec x dtype x
 * size against the reference of coll_ref.h (NONE and EXP bit-exact, FP8
 * within TACO's bound), a count mismatch and a dead peer. Codec NONE runs
 * on MPI's own collectives (the transport's natives): bit-exact at 2 ranks,
 * and for reductions at more ranks within the rounding of another
 * summation order ((p - 1) half-ulps of the sum of magnitudes); with
 * IBP_COLL_MPI_NATIVE=0 on the algorithms, bit-exact everywhere. DynamiQ's
 * AllReduce (whole chunks, or pieces under IBP_COLL_PIECE_BYTES) gives the
 * bits of its one-process simulation. Prints
 * one line per failure; exit 0 only when every rank passed. */
#include <mpi.h>
#include <stdio.h>

#include "coll/dynamiq.h"
#include "coll_ref.h"

static int failures;

#define CHECK(cond, ...)                                     \
	do {                                                 \
		if (!(cond)) {                               \
			failures++;                          \
			fprintf(stderr, __VA_ARGS__);        \
			fputc('\n', stderr);                 \
		}                                            \
	} while (0)

static ibp_status_t call(ibp_coll_comm_t *c, int op, void *in, void *out, uint64_t n, ibp_dtype_t dt,
			 ibp_coll_codec_t codec, int p, int r)
{
	uint64_t sc[4], sd[4], rc[4], rd[4];
	switch (op) {
	case AG: return ibp_coll_allgather(in, out, n, dt, codec, c, NULL);
	case RS: return ibp_coll_reducescatter(in, out, n, dt, IBP_COLL_SUM, codec, c, NULL);
	case AR: return ibp_coll_allreduce(in, out, n, dt, IBP_COLL_SUM, codec, c, NULL);
	case A2A: return ibp_coll_alltoall(in, out, n, dt, codec, c, NULL);
	}
	for (int q = 0; q < p; q++) {
		sc[q] = vcount(r, q, n);
		sd[q] = vsdispl(r, q, n);
		rc[q] = vcount(q, r, n);
		rd[q] = vrdispl(r, q, n);
	}
	return ibp_coll_alltoallv(in, sc, sd, out, rc, rd, dt, codec, c, NULL);
}

int main(int argc, char **argv)
{
	static const char *const names[] = { "allgather", "reducescatter", "allreduce", "alltoall", "alltoallv" };
	static const ibp_dtype_t dts[] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	static const uint64_t sizes[] = { 0, 1, 5, 1000, 4097 };
	int p, r;
	const char *ne = getenv("IBP_COLL_MPI_NATIVE");
	const int natives = !(ne && ne[0] == '0');
	MPI_Init(&argc, &argv);
	MPI_Comm_size(MPI_COMM_WORLD, &p);
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	if (p > 4) {
		if (r == 0)
			fprintf(stderr, "mpi_coll: at most 4 ranks\n");
		MPI_Finalize();
		return 2;
	}
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.policy = IBP_COLL_POLICY_ALWAYS;
	o.timeout_ms = 20000;
	ibp_coll_comm_t *c = NULL;
	MPI_Comm world = MPI_COMM_WORLD;
	ibp_status_t s = ibp_coll_comm_from_mpi(&world, &o, &c);
	CHECK(s == IBP_OK, "rank %d: comm_from_mpi: %s", r, ibp_last_error());
	ibp_coll_stats_t st;
	if (c && ibp_coll_comm_stats(c, &st) == IBP_OK)
		CHECK(st.beta_Bps > 0 && st.exp_enc_Bps > 0, "rank %d: not calibrated", r);
	for (int op = AG; op < NOPS && c; op++)
		for (size_t d = 0; d < 3; d++)
			for (int k = 0; k < 3; k++)
				for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
					ibp_dtype_t dt = dts[d];
					ibp_coll_codec_t codec = (ibp_coll_codec_t)k;
					uint64_t n = sizes[z], salt = n * 31 + (uint64_t)op;
					void *ins[4];
					for (int q = 0; q < p; q++)
						ins[q] = make_input(q, dt, in_elems(op, n, p, q), salt);
					uint64_t m = out_elems(op, n, p, r);
					void *out = calloc(1, m * ibp_dtype_size(dt) + 1);
					s = call(c, op, ins[r], out, n, dt, codec, p, r);
					CHECK(s == IBP_OK, "rank %d %s %s %s n=%llu: %s", r, names[op], ibp_dtype_name(dt),
					      ibp_coll_codec_name(codec), (unsigned long long)n, ibp_last_error());
					double e2 = 0, x2 = 0;
					uint64_t wrong = 0;
					/* MPI's reduction order: exact at 2 ranks, within rounding above */
					const int reorder = natives && codec == IBP_COLL_CODEC_NONE && p > 2 && (op == RS || op == AR);
					const double eps = dt == IBP_DTYPE_BF16 ? 0x1p-8 : dt == IBP_DTYPE_F16 ? 0x1p-11 : 0x1p-24;
					for (uint64_t i = 0; s == IBP_OK && i < m; i++) {
						double ex;
						float want = ref_expect(op, ins, p, r, dt, n, i, &ex), got = get(out, dt, i);
						if (reorder) {
							double mag = 0;
							for (int q = 0; q < p; q++)
								mag += fabs(get(ins[q], dt, op == RS ? (uint64_t)r * n + i : i));
							wrong += fabs((double)got - ex) > (p - 1) * eps * mag;
						} else
							wrong += ref_bits(want) != ref_bits(got);
						e2 += (got - ex) * (got - ex);
						x2 += ex * ex;
					}
					if (codec != IBP_COLL_CODEC_FP8)
						CHECK(wrong == 0, "rank %d %s %s %s n=%llu: %llu wrong elements", r, names[op],
						      ibp_dtype_name(dt), ibp_coll_codec_name(codec), (unsigned long long)n,
						      (unsigned long long)wrong);
					else if (x2 > 0) {
						double hops = op == RS ? p - 1 : op == AR ? p : 1;
						CHECK(sqrt(e2 / x2) <= 0.0725 * hops, "rank %d %s %s fp8 n=%llu: rel-L2 %g", r,
						      names[op], ibp_dtype_name(dt), (unsigned long long)n, sqrt(e2 / x2));
					}
					for (int q = 0; q < p; q++)
						free(ins[q]);
					free(out);
				}
	/* codec NONE ran on MPI's collectives (every call of it here) */
	if (c && ibp_coll_comm_stats(c, &st) == IBP_OK)
		CHECK(natives ? st.native >= (uint64_t)(NOPS * 3 * (sizeof sizes / sizeof *sizes)) : st.native == 0,
		      "rank %d: %llu native calls (natives %s)", r, (unsigned long long)st.native, natives ? "on" : "off");
	ibp_coll_comm_free(c);
	c = NULL;
	/* A large plain AllReduce below 4 ranks runs on libnbc's ring (the
	 * transport switches its algorithm for the call): the sum is right, in
	 * place too, and the control variable is back at 0 (auto) after. */
	s = ibp_coll_comm_from_mpi(&world, &o, &c);
	CHECK(s == IBP_OK, "rank %d: comm_from_mpi: %s", r, ibp_last_error());
	for (int inplace = 0; inplace < 2 && c; inplace++) {
		const uint64_t n = 300001;
		void *ins[4];
		for (int q = 0; q < p; q++)
			ins[q] = make_input(q, IBP_DTYPE_F32, n, 555);
		float *out = inplace ? ins[r] : malloc(n * 4), *mine = malloc(n * 4);
		memcpy(mine, ins[r], n * 4);
		s = ibp_coll_allreduce(inplace ? out : mine, out, n, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_NONE, c,
				       NULL);
		CHECK(s == IBP_OK, "rank %d large allreduce: %s", r, ibp_last_error());
		uint64_t wrong = 0;
		for (uint64_t i = 0; s == IBP_OK && i < n; i++) {
			double ex = 0, mag = 0;
			for (int q = 0; q < p; q++) { /* in place, ins[r] holds the sum: the input is in mine */
				const double v = q == r ? mine[i] : ((float *)ins[q])[i];
				ex += v;
				mag += fabs(v);
			}
			wrong += fabs((double)out[i] - ex) > p * 0x1p-24 * mag;
		}
		CHECK(wrong == 0, "rank %d large allreduce (in place %d): %llu wrong", r, inplace, (unsigned long long)wrong);
		int idx = -1, cnt = 0, v = -1, prov = 0;
		MPI_T_cvar_handle hd;
		if (MPI_T_init_thread(MPI_THREAD_SINGLE, &prov) == MPI_SUCCESS &&
		    MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &idx) == MPI_SUCCESS &&
		    MPI_T_cvar_handle_alloc(idx, NULL, &hd, &cnt) == MPI_SUCCESS) {
			CHECK(MPI_T_cvar_read(hd, &v) == MPI_SUCCESS && v == 0, "rank %d: libnbc's algorithm left at %d", r,
			      v);
			MPI_T_cvar_handle_free(&hd);
			MPI_T_finalize();
		}
		for (int q = 0; q < p; q++)
			free(ins[q]);
		if (!inplace)
			free(out);
		free(mine);
	}
	ibp_coll_comm_free(c);
	c = NULL;
	/* DynamiQ: every rank's result is the simulation's, bit for bit (FP32,
	 * and BF16 narrowed from the simulation of the widened inputs). A fresh
	 * communicator without calibration: its calls are numbered from 1. */
	o.calibrate = 0;
	s = ibp_coll_comm_from_mpi(&world, &o, &c);
	CHECK(s == IBP_OK, "rank %d: comm_from_mpi: %s", r, ibp_last_error());
	for (int k = 0; k < 2 && c; k++) {
		const ibp_dtype_t dt = k ? IBP_DTYPE_BF16 : IBP_DTYPE_F32;
		const uint64_t n = 40000 + 77 * (uint64_t)k;
		float *x[4], *ref = malloc(n * 4);
		void *ins[4], *out = malloc(n * 4);
		for (int q = 0; q < p; q++) {
			ins[q] = make_input(q, dt, n, 977 + (uint64_t)k);
			x[q] = malloc(n * 4);
			for (uint64_t i = 0; i < n; i++)
				x[q][i] = get(ins[q], dt, i);
		}
		dq_cfg_t cfg;
		ibpi_dq_cfg_default(&cfg);
		CHECK(ibpi_dq_simulate((const float *const *)x, p, n, &cfg, (uint64_t)k + 1, ref, NULL) == IBP_OK,
		      "rank %d: simulate: %s", r, ibp_last_error());
		s = ibp_coll_allreduce(ins[r], out, n, dt, IBP_COLL_SUM, IBP_COLL_CODEC_DYNAMIQ, c, NULL);
		CHECK(s == IBP_OK, "rank %d dynamiq %s: %s", r, ibp_dtype_name(dt), ibp_last_error());
		uint64_t wrong = 0;
		for (uint64_t i = 0; s == IBP_OK && i < n; i++)
			wrong += k ? ((uint16_t *)out)[i] != fp8i_f32_to_bf16(ref[i])
				   : ref_bits(((float *)out)[i]) != ref_bits(ref[i]);
		CHECK(wrong == 0, "rank %d dynamiq %s: %llu elements differ from the simulation", r, ibp_dtype_name(dt),
		      (unsigned long long)wrong);
		for (int q = 0; q < p; q++) {
			free(ins[q]);
			free(x[q]);
		}
		free(ref);
		free(out);
	}
	ibp_coll_comm_free(c);
	c = NULL;
	/* A count mismatch (rank 0 says 10, the others 11): with the natives
	 * every rank sees every rank's call in the check before it and
	 * refuses; on the algorithms rank 1 receives rank 0's message first and
	 * reports the mismatch, and ranks further on the ring see either the
	 * mismatch or their left neighbour stop (a timeout): an error
	 * everywhere, never a hang. */
	o.timeout_ms = 1000;
	o.calibrate = 0;
	s = ibp_coll_comm_from_mpi(&world, &o, &c);
	CHECK(s == IBP_OK, "rank %d: comm_from_mpi: %s", r, ibp_last_error());
	if (c) {
		float x[64] = { 0 }, y[64 * 4];
		s = ibp_coll_allgather(x, y, r == 0 ? 10 : 11, IBP_DTYPE_F32, IBP_COLL_CODEC_NONE, c, NULL);
		if (r == 1 || r == 0 || natives)
			CHECK(s == IBP_ERR_INVALID_ARG && strstr(ibp_last_error(), "mismatch"),
			      "rank %d: mismatch gave %d: %s", r, s, ibp_last_error());
		else
			CHECK(s == IBP_ERR_INVALID_ARG || s == IBP_ERR_IO, "rank %d: mismatch gave %d: %s", r, s,
			      ibp_last_error());
		ibp_coll_comm_free(c);
		c = NULL;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	/* A dead peer (the last rank never calls) gives a timeout. */
	o.timeout_ms = 300;
	s = ibp_coll_comm_from_mpi(&world, &o, &c);
	CHECK(s == IBP_OK, "rank %d: comm_from_mpi: %s", r, ibp_last_error());
	if (c && r != p - 1) {
		float x[16] = { 0 }, y[16];
		s = ibp_coll_allreduce(x, y, 16, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_EXP, c, NULL);
		CHECK(s == IBP_ERR_IO && strstr(ibp_last_error(), "timeout"), "rank %d: dead peer gave %d: %s", r, s,
		      ibp_last_error());
	}
	MPI_Barrier(MPI_COMM_WORLD);
	ibp_coll_comm_free(c);
	int all = 0;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (r == 0)
		printf("mpi_coll: %d ranks, %d failures\n", p, all);
	MPI_Finalize();
	return all ? 1 : 0;
}
