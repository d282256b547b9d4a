/* ibp-coll-perf - nccl-tests-style benchmark of the compressed collectives.
 *
 *   mpirun -np N ibp-coll-perf -o allgather|reducescatter|allreduce|alltoall
 *       -b 1M -e 256M -f 2 -c exp|fp8|dynamiq|lsq|pts|none -d bf16|fp16|fp32
 *       [--data gauss|FILE.npy] [--rate BYTES_PER_S] [--json]
 *       [-n ITERS] [-w WARMUP] [--policy auto|always|never] [--threads N]
 *       [--lsq-bits 2|4|8]
 *
 * Sizes are logical (uncompressed) bytes, so compression shows up as
 * busbw. Without MPI (or with --threads N) the ranks are threads of this
 * process on the in-process transport. --rate throttles each rank's sends
 * (token bucket in the transport layer). #wrong: elements that differ
 * from the same call made uncompressed (exp must give 0); the lossy
 * codecs (fp8, dynamiq, lsq, pts) report their rel-L2 error against it
 * instead (column err). dynamiq and pts are allreduce only, lsq alltoall
 * only.
 *
 * On MPI ranks every size also runs the collective a user would call
 * instead, MPI's own (MPI_Allgather, MPI_Reduce_scatter_block,
 * MPI_Allreduce, MPI_Alltoall) on the same buffers in the same invocation,
 * timed the same way; columns native busbw and vs_native (our busbw over
 * it). BF16/FP16 sums there use a user MPI_Op written the straightforward
 * way (widen to float, add, round to nearest even); column f32_busbw is
 * MPI_Allreduce/Reduce_scatter on float32 of the same element count. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef IBP_HAVE_MPI
#include <mpi.h>
#endif

#include <ibp.h>
#include <ibp/coll.h>

enum { AG, RS, AR, A2A };
static const char *const opnames[] = { "allgather", "reducescatter", "allreduce", "alltoall" };
static const char *const decisions[] = { "plain", "compress", "not_worth", "incompressible" };

typedef struct cfg {
	int op, json, iters, warmup, threads, policy, lsq_bits;
	uint64_t b, e;
	double f, rate;
	ibp_coll_codec_t codec;
	ibp_dtype_t dt;
	const char *data;
	void *file;          /* --data FILE.npy, converted to dt */
	uint64_t file_n;
	int errors;          /* ranks that failed */
	double bus_sum;
	int nsizes;
} cfg_t;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'K': case 'k': v *= 1024; break;
	case 'M': case 'm': v *= 1024 * 1024; break;
	case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
	}
	return (uint64_t)v;
}

static float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t f_f16(float f)
{
	/* Through _Float16 where the compiler has it is not portable C11; do it by hand. */
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u);
	if (a >= 0x477ff000u)
		return (uint16_t)(s | 0x7c00u);
	if (a < 0x38800000u) {
		float m = fabsf(f) * 16777216.0f; /* units of 2^-24 */
		return (uint16_t)(s | (uint32_t)nearbyintf(m));
	}
	uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
	return (uint16_t)(s | (r - (112u << 10)));
}

static float f16_f(uint16_t h)
{
	uint32_t e = (h >> 10) & 31u, m = h & 0x3ffu;
	float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400u), (int)e - 25);
	return (h & 0x8000u) ? -v : v;
}

static float getf(const void *b, ibp_dtype_t dt, uint64_t i)
{
	if (dt == IBP_DTYPE_F32)
		return ((const float *)b)[i];
	uint16_t h = ((const uint16_t *)b)[i];
	return dt == IBP_DTYPE_BF16 ? bf16_f(h) : f16_f(h);
}

static void putf(void *b, ibp_dtype_t dt, uint64_t i, float v)
{
	if (dt == IBP_DTYPE_F32)
		((float *)b)[i] = v;
	else
		((uint16_t *)b)[i] = dt == IBP_DTYPE_BF16 ? f_bf16(v) : f_f16(v);
}

/* Rank r's input: the file tiled from a rank-dependent offset, or
 * Gaussian values of sigma 0.02 (weight-like). */
static void fill(cfg_t *g, int r, void *buf, uint64_t n)
{
	size_t esz = ibp_dtype_size(g->dt);
	if (g->file) {
		uint64_t off = ((uint64_t)r * 7919u * 4099u) % g->file_n;
		for (uint64_t i = 0; i < n;) {
			uint64_t k = g->file_n - off < n - i ? g->file_n - off : n - i;
			memcpy((char *)buf + i * esz, (const char *)g->file + off * esz, k * esz);
			i += k;
			off = 0;
		}
		return;
	}
	uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1);
	for (uint64_t i = 0; i < n; i++) {
		double v = 0;
		for (int k = 0; k < 4; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			v += (double)(s >> 11) * (1.0 / 9007199254740992.0) - 0.5;
		}
		putf(buf, g->dt, i, (float)(v * 0.02 * 1.7320508));
	}
}

static int load_file(cfg_t *g)
{
	ibp_npy_info_t info;
	void *d = NULL;
	if (ibp_npy_load(g->data, IBP_NPY_BF16, &info, &d) != IBP_OK) {
		fprintf(stderr, "ibp-coll-perf: %s: %s\n", g->data, ibp_last_error());
		return -1;
	}
	if (info.count == 0 || (info.dtype != IBP_DTYPE_BF16 && info.dtype != IBP_DTYPE_F16 && info.dtype != IBP_DTYPE_F32)) {
		fprintf(stderr, "ibp-coll-perf: %s: need a non-empty bf16 (<u2), f16 or f32 array\n", g->data);
		ibp_npy_free(d);
		return -1;
	}
	g->file_n = info.count;
	g->file = malloc(info.count * ibp_dtype_size(g->dt));
	if (!g->file)
		return -1;
	for (uint64_t i = 0; i < info.count; i++) {
		if (info.dtype == g->dt)
			memcpy((char *)g->file + i * ibp_dtype_size(g->dt), (char *)d + i * info.elem_bytes,
			       ibp_dtype_size(g->dt));
		else
			putf(g->file, g->dt, i, getf(d, info.dtype, i));
	}
	ibp_npy_free(d);
	return 0;
}

typedef struct rank_ctx {
	cfg_t *g;
	int rank, nranks;
	ibp_coll_comm_t *comm;
	int mpi; /* MPI ranks: the native baseline is measured */
} rank_ctx_t;

#ifdef IBP_HAVE_MPI
/* The user's BF16/FP16 sum: widen, add in float, round to nearest even. */
static void user_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t)
{
	(void)t;
	uint16_t *a = in, *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = f_bf16(bf16_f(a[i]) + bf16_f(b[i]));
}

static void user_sum_f16(void *in, void *inout, int *len, MPI_Datatype *t)
{
	(void)t;
	uint16_t *a = in, *b = inout;
	for (int i = 0; i < *len; i++)
		b[i] = f_f16(f16_f(a[i]) + f16_f(b[i]));
}

/* MPI's own collective on the same buffers; dt_f32 forces float32. */
static int native_op(const cfg_t *g, const void *in, void *out, uint64_t count, int f32)
{
	static MPI_Op ops[2] = { MPI_OP_NULL, MPI_OP_NULL };
	if (ops[0] == MPI_OP_NULL) {
		MPI_Op_create(user_sum_bf16, 1, &ops[0]);
		MPI_Op_create(user_sum_f16, 1, &ops[1]);
	}
	MPI_Datatype t = f32 || g->dt == IBP_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T;
	MPI_Op sum = t == MPI_FLOAT ? MPI_SUM : g->dt == IBP_DTYPE_BF16 ? ops[0] : ops[1];
	int n = (int)count;
	switch (g->op) {
	case AG: return MPI_Allgather(in, n, t, out, n, t, MPI_COMM_WORLD);
	case RS: return MPI_Reduce_scatter_block(in, out, n, t, sum, MPI_COMM_WORLD);
	case AR: return MPI_Allreduce(in, out, n, t, sum, MPI_COMM_WORLD);
	default: return MPI_Alltoall(in, n, t, out, n, t, MPI_COMM_WORLD);
	}
}
#endif

static ibp_status_t run_op(rank_ctx_t *rc, ibp_coll_codec_t codec, const void *in, void *out, uint64_t count)
{
	cfg_t *g = rc->g;
	switch (g->op) {
	case AG: return ibp_coll_allgather(in, out, count, g->dt, codec, rc->comm, NULL);
	case RS: return ibp_coll_reducescatter(in, out, count, g->dt, IBP_COLL_SUM, codec, rc->comm, NULL);
	case AR: return ibp_coll_allreduce(in, out, count, g->dt, IBP_COLL_SUM, codec, rc->comm, NULL);
	default: return ibp_coll_alltoall(in, out, count, g->dt, codec, rc->comm, NULL);
	}
}

/* Max over ranks of v (an AllGather of floats is enough). */
static double max_all(rank_ctx_t *rc, double v, double *sum)
{
	float x = (float)v, all[4096];
	if (ibp_coll_allgather(&x, all, 1, IBP_DTYPE_F32, IBP_COLL_CODEC_NONE, rc->comm, NULL) != IBP_OK)
		return v;
	double m = 0, s = 0;
	for (int i = 0; i < rc->nranks; i++) {
		m = all[i] > m ? all[i] : m;
		s += all[i];
	}
	if (sum)
		*sum = s;
	return m;
}

static void run_rank(rank_ctx_t *rc)
{
	cfg_t *g = rc->g;
	int p = rc->nranks, r = rc->rank;
	size_t esz = ibp_dtype_size(g->dt);
	double busf = g->op == AR ? 2.0 * (p - 1) / p : (double)(p - 1) / p;
	ibp_coll_comm_set_policy(rc->comm, (ibp_coll_policy_t)g->policy);
	if (ibp_coll_comm_set_lsq_bits(rc->comm, g->lsq_bits) != IBP_OK) {
		fprintf(stderr, "rank %d: %s\n", r, ibp_last_error());
		g->errors++;
		return;
	}
	if (r == 0 && !g->json) {
		printf("# ibp-coll-perf: %s, %d ranks, %s, codec %s, data %s, rate %s%.3g B/s\n", opnames[g->op], p,
		       ibp_dtype_name(g->dt), ibp_coll_codec_name(g->codec), g->data, g->rate > 0 ? "" : "unthrottled ",
		       g->rate);
		printf("#%12s %12s %6s %6s %6s %10s %8s %8s %6s %6s %6s %14s %9s %8s %9s %9s\n", "size", "count", "type",
		       "redop", "root", "time", "algbw", "busbw", "#wrong", "codec", "ratio", "decision", "err", "native",
		       "vs_native", "f32_busbw");
		printf("#%12s %12s %6s %6s %6s %10s %8s %8s %6s %6s %6s %14s %9s %8s %9s %9s\n", "(B)", "(elements)", "",
		       "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "", "", "(rel-L2)", "(GB/s)", "", "(GB/s)");
		fflush(stdout);
	}
	if (r == 0) {
		ibp_coll_stats_t m;
		ibp_coll_comm_stats(rc->comm, &m);
		printf("%s model: alpha %.1f us, beta %.3g B/s, exp enc %.3g dec %.3g B/s, fp8 enc %.3g dec %.3g B/s\n",
		       g->json ? "//" : "#", m.alpha_s * 1e6, m.beta_Bps, m.exp_enc_Bps, m.exp_dec_Bps, m.fp8_enc_Bps,
		       m.fp8_dec_Bps);
	}
	for (uint64_t size = g->b; size <= g->e; size = (uint64_t)ceil((double)size * g->f)) {
		uint64_t count = g->op == AR ? size / esz : size / esz / (uint64_t)p;
		uint64_t in_n = g->op == AG || g->op == AR ? count : count * (uint64_t)p;
		uint64_t out_n = g->op == RS || g->op == AR ? count : count * (uint64_t)p;
		uint64_t logical = g->op == AR ? count * esz : count * esz * (uint64_t)p;
		void *in = malloc(in_n * esz + 1), *out = malloc(out_n * esz + 1), *ref = malloc(out_n * esz + 1);
		if (!in || !out || !ref) {
			fprintf(stderr, "ibp-coll-perf: out of memory at %llu bytes\n", (unsigned long long)size);
			g->errors++;
			free(in), free(out), free(ref);
			break;
		}
		fill(g, r, in, in_n);
		/* Reference: the same call uncompressed. */
		ibp_coll_comm_set_policy(rc->comm, IBP_COLL_POLICY_NEVER);
		ibp_status_t s = run_op(rc, IBP_COLL_CODEC_NONE, in, ref, count);
		ibp_coll_comm_set_policy(rc->comm, (ibp_coll_policy_t)g->policy);
		for (int i = 0; i < g->warmup && s == IBP_OK; i++)
			s = run_op(rc, g->codec, in, out, count);
		double t0 = now_s();
		for (int i = 0; i < g->iters && s == IBP_OK; i++)
			s = run_op(rc, g->codec, in, out, count);
		double t = (now_s() - t0) / g->iters, tn = 0, tf = 0;
#ifdef IBP_HAVE_MPI
		if (rc->mpi && s == IBP_OK) { /* the native baseline, timed the same way */
			int f32 = 0;
			for (int pass = 0; pass < 1 + ((g->op == AR || g->op == RS) && g->dt != IBP_DTYPE_F32); pass++) {
				void *fin = in, *fout = ref;
				if (pass) { /* float32 of the same element count */
					f32 = 1;
					fin = calloc(in_n + 1, 4), fout = calloc(out_n + 1, 4);
					if (!fin || !fout) {
						free(fin), free(fout);
						break;
					}
				}
				for (int i = 0; i < g->warmup; i++)
					native_op(g, fin, fout, count, f32);
				MPI_Barrier(MPI_COMM_WORLD);
				double n0 = now_s();
				for (int i = 0; i < g->iters; i++)
					native_op(g, fin, fout, count, f32);
				*(pass ? &tf : &tn) = (now_s() - n0) / g->iters;
				if (pass)
					free(fin), free(fout);
			}
			/* ref was the plain call's result: make it again (the native run wrote its own there) */
			ibp_coll_comm_set_policy(rc->comm, IBP_COLL_POLICY_NEVER);
			s = run_op(rc, IBP_COLL_CODEC_NONE, in, ref, count);
			ibp_coll_comm_set_policy(rc->comm, (ibp_coll_policy_t)g->policy);
		}
#endif
		if (s != IBP_OK) {
			fprintf(stderr, "ibp-coll-perf: rank %d: %s at %llu bytes: %s\n", r, opnames[g->op],
				(unsigned long long)size, ibp_last_error());
			g->errors++;
			free(in), free(out), free(ref);
			return;
		}
		uint64_t wrong = 0;
		double e2 = 0, x2 = 0;
		for (uint64_t i = 0; i < out_n; i++) {
			float a = getf(out, g->dt, i), b = getf(ref, g->dt, i);
			if (memcmp((char *)out + i * esz, (char *)ref + i * esz, esz))
				wrong++;
			e2 += ((double)a - b) * ((double)a - b);
			x2 += (double)b * b;
		}
		double wrong_all = 0;
		ibp_coll_stats_t st;
		ibp_coll_comm_stats(rc->comm, &st);
		double tmax = max_all(rc, t, NULL), tnmax = tn > 0 ? max_all(rc, tn, NULL) : 0,
		       tfmax = tf > 0 ? max_all(rc, tf, NULL) : 0;
		max_all(rc, (double)wrong, &wrong_all);
		double err = x2 > 0 ? sqrt(e2 / x2) : 0;
		double errmax = max_all(rc, err, NULL);
		if (g->codec >= IBP_COLL_CODEC_FP8) /* lossy codecs */
			wrong_all = 0; /* lossy: judged by err */
		if (r == 0) {
			double algbw = (double)logical / tmax / 1e9, busbw = algbw * busf;
			double nbus = tnmax > 0 ? (double)logical / tnmax / 1e9 * busf : 0;
			double fbus = tfmax > 0 ? (double)logical / tfmax / 1e9 * busf : nbus; /* f32: the same bytes moved */
			g->bus_sum += busbw;
			g->nsizes++;
			const char *dec = decisions[st.last_decision];
			if (g->json)
				printf("{\"op\":\"%s\",\"size\":%llu,\"count\":%llu,\"type\":\"%s\",\"redop\":\"%s\","
				       "\"root\":-1,\"nranks\":%d,\"time_us\":%.2f,\"algbw\":%.4f,\"busbw\":%.4f,"
				       "\"wrong\":%.0f,\"codec\":\"%s\",\"ratio\":%.4f,\"decision\":\"%s\",\"err\":%.3g,"
				       "\"rate\":%.6g,\"native_busbw\":%.4f,\"vs_native\":%.4f,\"f32_busbw\":%.4f}\n",
				       opnames[g->op], (unsigned long long)logical, (unsigned long long)count,
				       ibp_dtype_name(g->dt), g->op == RS || g->op == AR ? "sum" : "none", p, tmax * 1e6,
				       algbw, busbw, wrong_all, ibp_coll_codec_name(g->codec), st.last_ratio, dec, errmax,
				       g->rate, nbus, nbus > 0 ? busbw / nbus : 0, fbus);
			else
				printf(" %12llu %12llu %6s %6s %6d %10.1f %8.3f %8.3f %6.0f %6s %6.3f %14s %9.3g %8.3f %8.2fx %9.3f\n",
				       (unsigned long long)logical, (unsigned long long)count, ibp_dtype_name(g->dt),
				       g->op == RS || g->op == AR ? "sum" : "none", -1, tmax * 1e6, algbw, busbw, wrong_all,
				       ibp_coll_codec_name(g->codec), st.last_ratio, dec, errmax, nbus,
				       nbus > 0 ? busbw / nbus : 0.0, fbus);
			fflush(stdout);
		}
		if (wrong_all > 0)
			g->errors++;
		free(in), free(out), free(ref);
		if (size == 0)
			break;
	}
	if (r == 0 && !g->json) {
		printf("# Out of bounds values : 0 OK\n");
		printf("# Avg bus bandwidth    : %g\n", g->nsizes ? g->bus_sum / g->nsizes : 0.0);
	}
}

typedef struct thr {
	cfg_t *g;
	ibp_coll_inproc_t *w;
	int rank, nranks;
} thr_t;

static void *thread_main(void *arg)
{
	thr_t *t = arg;
	ibp_coll_transport_t tr;
	ibp_coll_opts_t o;
	ibp_coll_opts_default(&o);
	o.rate = t->g->rate;
	rank_ctx_t rc = { t->g, t->rank, t->nranks, NULL, 0 };
	if (ibp_coll_inproc_transport(t->w, t->rank, &tr) != IBP_OK || ibp_coll_comm_create(&tr, &o, &rc.comm) != IBP_OK) {
		fprintf(stderr, "ibp-coll-perf: rank %d: %s\n", t->rank, ibp_last_error());
		t->g->errors++;
		return NULL;
	}
	run_rank(&rc);
	ibp_coll_comm_destroy(rc.comm);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: ibp-coll-perf -o allgather|reducescatter|allreduce|alltoall -b MIN -e MAX -f FACTOR\n"
			"       -c exp|fp8|dynamiq|lsq|pts|none -d bf16|fp16|fp32 [--data gauss|FILE.npy] [--rate BYTES_PER_S]\n"
			"       [--json] [-n ITERS] [-w WARMUP] [--policy auto|always|never] [--threads N]\n"
			"       [--lsq-bits 2|4|8]\n");
}

int main(int argc, char **argv)
{
	static cfg_t g = { .op = AR, .iters = 5, .warmup = 1, .lsq_bits = 4, .b = 1 << 20, .e = 1 << 20, .f = 2,
			   .codec = IBP_COLL_CODEC_EXP, .dt = IBP_DTYPE_BF16, .data = "gauss" };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT()                                                     \
	do {                                                       \
		if (!v) {                                          \
			usage();                                   \
			return 2;                                  \
		}                                                  \
		i++;                                               \
	} while (0)
		if (!strcmp(a, "-o")) {
			NEXT();
			int k;
			for (k = 0; k < 4 && strcmp(v, opnames[k]); k++)
				;
			if (k == 4) {
				usage();
				return 2;
			}
			g.op = k;
		} else if (!strcmp(a, "-b")) {
			NEXT();
			g.b = parse_size(v);
		} else if (!strcmp(a, "-e")) {
			NEXT();
			g.e = parse_size(v);
		} else if (!strcmp(a, "-f")) {
			NEXT();
			g.f = atof(v);
		} else if (!strcmp(a, "-n")) {
			NEXT();
			g.iters = atoi(v);
		} else if (!strcmp(a, "-w")) {
			NEXT();
			g.warmup = atoi(v);
		} else if (!strcmp(a, "-c")) {
			NEXT();
			if (!strcmp(v, "none"))
				g.codec = IBP_COLL_CODEC_NONE;
			else if (!strcmp(v, "exp"))
				g.codec = IBP_COLL_CODEC_EXP;
			else if (!strcmp(v, "fp8"))
				g.codec = IBP_COLL_CODEC_FP8;
			else if (!strcmp(v, "dynamiq"))
				g.codec = IBP_COLL_CODEC_DYNAMIQ;
			else if (!strcmp(v, "lsq"))
				g.codec = IBP_COLL_CODEC_LSQ;
			else if (!strcmp(v, "pts"))
				g.codec = IBP_COLL_CODEC_PTS;
			else {
				usage();
				return 2;
			}
		} else if (!strcmp(a, "-d")) {
			NEXT();
			if (!strcmp(v, "bf16"))
				g.dt = IBP_DTYPE_BF16;
			else if (!strcmp(v, "fp16") || !strcmp(v, "f16"))
				g.dt = IBP_DTYPE_F16;
			else if (!strcmp(v, "fp32") || !strcmp(v, "f32"))
				g.dt = IBP_DTYPE_F32;
			else {
				usage();
				return 2;
			}
		} else if (!strcmp(a, "--data")) {
			NEXT();
			g.data = v;
		} else if (!strcmp(a, "--rate")) {
			NEXT();
			g.rate = atof(v);
		} else if (!strcmp(a, "--policy")) {
			NEXT();
			g.policy = !strcmp(v, "always") ? IBP_COLL_POLICY_ALWAYS
				   : !strcmp(v, "never") ? IBP_COLL_POLICY_NEVER
							  : IBP_COLL_POLICY_AUTO;
		} else if (!strcmp(a, "--threads")) {
			NEXT();
			g.threads = atoi(v);
		} else if (!strcmp(a, "--lsq-bits")) {
			NEXT();
			g.lsq_bits = atoi(v);
		} else if (!strcmp(a, "--json"))
			g.json = 1;
		else {
			usage();
			return 2;
		}
	}
	if (g.iters < 1 || g.warmup < 0 || g.f <= 1 || g.b > g.e || g.rate < 0 || g.threads < 0 || g.threads > 4096 ||
	    (g.lsq_bits != 2 && g.lsq_bits != 4 && g.lsq_bits != 8)) {
		usage();
		return 2;
	}
	if (strcmp(g.data, "gauss") && load_file(&g) != 0)
		return 1;
#ifdef IBP_HAVE_MPI
	if (g.threads == 0) {
		MPI_Init(&argc, &argv);
		rank_ctx_t rc = { &g, 0, 1, NULL, 1 };
		MPI_Comm_rank(MPI_COMM_WORLD, &rc.rank);
		MPI_Comm_size(MPI_COMM_WORLD, &rc.nranks);
		ibp_coll_opts_t o;
		ibp_coll_opts_default(&o);
		o.rate = g.rate;
		MPI_Comm world = MPI_COMM_WORLD;
		if (ibp_coll_comm_from_mpi(&world, &o, &rc.comm) != IBP_OK) {
			fprintf(stderr, "ibp-coll-perf: rank %d: %s\n", rc.rank, ibp_last_error());
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		run_rank(&rc);
		ibp_coll_comm_destroy(rc.comm);
		int bad = 0, mine = g.errors;
		MPI_Allreduce(&mine, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Finalize();
		free(g.file);
		return bad ? 1 : 0;
	}
#endif
	int p = g.threads ? g.threads : 1;
	ibp_coll_inproc_t *w;
	if (ibp_coll_inproc_create(p, &w) != IBP_OK) {
		fprintf(stderr, "ibp-coll-perf: %s\n", ibp_last_error());
		return 1;
	}
	pthread_t *th = calloc((size_t)p, sizeof *th);
	thr_t *ts = calloc((size_t)p, sizeof *ts);
	for (int r = 0; r < p; r++) {
		ts[r] = (thr_t){ &g, w, r, p };
		pthread_create(&th[r], NULL, thread_main, &ts[r]);
	}
	for (int r = 0; r < p; r++)
		pthread_join(th[r], NULL);
	ibp_coll_inproc_destroy(w);
	free(th);
	free(ts);
	free(g.file);
	return g.errors ? 1 : 0;
}
