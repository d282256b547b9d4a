/* ibp-coll-perf - nccl-tests-style benchmark of the compressed collectives.
 *
 *   mpirun -np N ibp-coll-perf -o allgather|reducescatter|allreduce|alltoall|pingpong
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
 * -o pingpong measures the link instead, apart from any collective: the
 * one-way time of 8 bytes and of -b .. -e between ranks 0 and 1, and the
 * alpha-beta fit the collectives' cost model takes (tools/coll_model.py).
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
#include <unistd.h>

#ifdef IBP_HAVE_MPI
#include <mpi.h>
#endif

#include <ibp.h>
#include <ibp/coll.h>

enum { AG, RS, AR, A2A, PINGPONG };
static const char *const opnames[] = { "allgather", "reducescatter", "allreduce", "alltoall", "pingpong" };
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
	const ibp_coll_transport_t *tr; /* threads: the in-process transport (pingpong) */
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

/* Max over ranks of v (an AllGather of floats is enough); *sum the sum. */
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

static double median_d(const double *v, int n)
{
	double t[64];
	n = n > 64 ? 64 : n;
	memcpy(t, v, (size_t)n * sizeof *t);
	for (int a = 1; a < n; a++) /* insertion sort: a handful of values */
		for (int b = a; b > 0 && t[b] < t[b - 1]; b--) {
			double x = t[b];
			t[b] = t[b - 1];
			t[b - 1] = x;
		}
	return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* The documented error bound of a lossy codec on one call (docs/COLLECTIVES.md):
 * rel-L2 for FP8 (per block of 256, times the hops a partial takes),
 * DynamiQ and LSQ (the whole result). */
#define FP8_BLOCK_BOUND (0.0625 + 0.01)
#define DQ_BOUND 0.2
#define LSQ_BOUND 0.3

/* #wrong of this rank's result `out` against `ref` (MPI's own result, or
 * the plain call's on in-process ranks), by the codec's rule: lossless:
 * elements that differ bit for bit (reductions on more than 2 ranks: by
 * more than two summation orders' rounding, 2 (p - 1) half-ulps of mag,
 * the sum of magnitudes); FP8: blocks of 256 over their bound; DynamiQ,
 * LSQ: 1 when the whole rel-L2 exceeds the bound; PTS: 1 when the squared
 * error exceeds pts_bound (the sum over ranks of |g|_1 |g|_inf). */
static uint64_t count_wrong(const cfg_t *g, int p, const void *out, const void *ref, const float *mag, uint64_t n,
			    double pts_bound)
{
	size_t esz = ibp_dtype_size(g->dt);
	const int red = g->op == RS || g->op == AR;
	uint64_t wrong = 0;
	if (g->codec == IBP_COLL_CODEC_NONE || g->codec == IBP_COLL_CODEC_EXP) {
		const double eps = g->dt == IBP_DTYPE_BF16 ? 0x1p-8 : g->dt == IBP_DTYPE_F16 ? 0x1p-11 : 0x1p-24;
		for (uint64_t i = 0; i < n; i++) {
			if (!memcmp((const char *)out + i * esz, (const char *)ref + i * esz, esz))
				continue;
			if (red && p > 2 && mag &&
			    fabs((double)getf(out, g->dt, i) - getf(ref, g->dt, i)) <= 2.0 * (p - 1) * eps * mag[i])
				continue;
			wrong++;
		}
		return wrong;
	}
	double e2 = 0, x2 = 0;
	if (g->codec == IBP_COLL_CODEC_FP8) {
		const double hops = g->op == RS ? p - 1 : g->op == AR ? p : 1;
		for (uint64_t b = 0; b < n; b += 256) {
			double be = 0, bx = 0;
			for (uint64_t i = b; i < n && i < b + 256; i++) {
				double a = getf(out, g->dt, i), r = getf(ref, g->dt, i);
				be += (a - r) * (a - r);
				bx += r * r;
			}
			wrong += bx > 0 ? sqrt(be / bx) > FP8_BLOCK_BOUND * hops : be > 0;
		}
		return wrong;
	}
	for (uint64_t i = 0; i < n; i++) {
		double a = getf(out, g->dt, i), r = getf(ref, g->dt, i);
		e2 += (a - r) * (a - r);
		x2 += r * r;
	}
	if (g->codec == IBP_COLL_CODEC_PTS)
		return e2 > pts_bound;
	return x2 > 0 && sqrt(e2 / x2) > (g->codec == IBP_COLL_CODEC_DYNAMIQ ? DQ_BOUND : LSQ_BOUND);
}

static const char *nccl_type(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_BF16 ? "bfloat16" : dt == IBP_DTYPE_F16 ? "half" : "float";
}

/* One call of ours (native 0) or of MPI's own collective (native 1), on
 * buffers laid out out-of-place or in place; its time in seconds. */
static double one_call(rank_ctx_t *rc, int native, int inplace, void *in, void *out, uint64_t count,
		       ibp_status_t *s)
{
	cfg_t *g = rc->g;
	size_t esz = ibp_dtype_size(g->dt);
	const void *src = in;
	void *dst = out;
	if (inplace) { /* in = the caller's buffer: the input at its place, the result over it */
		dst = in;
		src = g->op == AG ? (const char *)in + (uint64_t)rc->rank * count * esz : in;
	}
#ifdef IBP_HAVE_MPI
	/* Every call starts together: a rank that finished the last call early
	 * would otherwise charge its wait for the others to this one. */
	if (rc->mpi && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS)
		*s = IBP_ERR_IO;
#endif
	double t0 = now_s();
#ifdef IBP_HAVE_MPI
	if (native) {
		if (inplace)
			src = MPI_IN_PLACE;
		if (native_op(g, src, dst, count, 0) != MPI_SUCCESS)
			*s = IBP_ERR_IO;
		return now_s() - t0;
	}
#else
	(void)native;
#endif
	*s = run_op(rc, g->codec, src, dst, count);
	return now_s() - t0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One message of n bytes from rank `from` to rank `to` (the others idle):
 * MPI_Send/MPI_Recv on MPI ranks, the transport's sendrecv (one direction)
 * on threads. */
static int pp_move(rank_ctx_t *rc, int from, int to, uint8_t *buf, uint64_t n)
{
#ifdef IBP_HAVE_MPI
	if (rc->mpi) {
		if (rc->rank == from)
			return MPI_Send(buf, (int)n, MPI_BYTE, to, 7, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
		if (rc->rank == to)
			return MPI_Recv(buf, (int)n, MPI_BYTE, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0
															      : -1;
		return 0;
	}
#endif
	const ibp_coll_transport_t *t = rc->tr;
	uint64_t got = 0;
	if (rc->rank == from)
		return t->sendrecv(t->ctx, to, buf, n, -1, NULL, 0, &got, 60000) == IBP_OK ? 0 : -1;
	if (rc->rank == to)
		return t->sendrecv(t->ctx, -1, NULL, 0, from, buf, n, &got, 60000) == IBP_OK && got == n ? 0 : -1;
	return 0;
}

/* Both ranks 0 and 1 send n bytes to each other at once (the others
 * idle). On MPI ranks as libibp's MPI transport moves a pipelined step:
 * every piece of at most IBP_COLL_PIECE_BYTES (default 61,440, the
 * transport's) a message of its own, the receives posted first, all in
 * flight at once (Open MPI's MPI_Sendrecv of one large message takes twice
 * as long over TCP: its rendezvous protocol, not the link). On threads the
 * transport's sendrecv. */
static int pp_exchange(rank_ctx_t *rc, uint8_t *sbuf, uint8_t *rbuf, uint64_t n)
{
	if (rc->rank > 1)
		return 0;
	const int peer = 1 - rc->rank;
#ifdef IBP_HAVE_MPI
	if (rc->mpi) {
		const char *v = getenv("IBP_COLL_PIECE_BYTES");
		uint64_t piece = v && *v >= '1' && *v <= '9' ? strtoull(v, NULL, 10) : 61440;
		piece = piece > 1073741824ull ? 1073741824ull : piece;
		const uint64_t np = n ? (n + piece - 1) / piece : 1;
		MPI_Request *req = malloc(2 * np * sizeof(MPI_Request));
		int bad = !req;
		for (uint64_t k = 0; !bad && k < np; k++) {
			const uint64_t o = k * piece, m = n - o < piece ? n - o : piece;
			bad = MPI_Irecv(rbuf + o, (int)m, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &req[k]) != MPI_SUCCESS;
		}
		for (uint64_t k = 0; !bad && k < np; k++) {
			const uint64_t o = k * piece, m = n - o < piece ? n - o : piece;
			bad = MPI_Isend(sbuf + o, (int)m, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &req[np + k]) != MPI_SUCCESS;
		}
		bad = bad || MPI_Waitall((int)(2 * np), req, MPI_STATUSES_IGNORE) != MPI_SUCCESS;
		free(req);
		return bad ? -1 : 0;
	}
#endif
	const ibp_coll_transport_t *t = rc->tr;
	uint64_t got = 0;
	return t->sendrecv(t->ctx, peer, sbuf, n, peer, rbuf, n, &got, 60000) == IBP_OK && got == n ? 0 : -1;
}

/* -o pingpong: the link's alpha-beta between ranks 0 and 1, measured
 * apart from any collective (the cost model's input, tools/coll_model.py).
 * Two passes: one-way (half the round trip of n bytes) and exchange (both
 * ranks send n bytes at once, as every step of a ring or a pairwise
 * exchange does: each direction's data then shares its path with the
 * other direction's acknowledgements). Per size the median of the
 * repetitions, for 8 bytes and the sizes -b .. -e; alpha = the 8-byte
 * time, beta = the least-squares slope over the sizes of at least 64 KiB
 * (all of them when none is); lines pingpong/pingpong_fit and
 * exchange/exchange_fit. On threads the link is the in-process transport,
 * unthrottled (--rate throttles the communicator's sends only: the model
 * takes the throttle as the link rate). */
static void run_pingpong(rank_ctx_t *rc)
{
	cfg_t *g = rc->g;
	const int r = rc->rank, reps = g->iters < 5 ? 5 : g->iters;
	if (rc->nranks < 2) {
		if (r == 0)
			fprintf(stderr, "ibp-coll-perf: pingpong needs 2 ranks or more\n");
		g->errors++;
		return;
	}
	if (rc->mpi && g->e > 2147483647ull) { /* one MPI_Send of an int count */
		if (r == 0)
			fprintf(stderr, "ibp-coll-perf: pingpong over MPI takes sizes up to 2 GiB - 1\n");
		g->errors++;
		return;
	}
	const uint64_t cap = g->e > 8 ? g->e : 8;
	uint8_t *buf = calloc(1, cap), *rbuf = calloc(1, cap);
	double *tm = malloc((size_t)(reps + g->warmup) * sizeof(double));
	const int big = g->e >= 65536;
	if (!buf || !rbuf || !tm) {
		fprintf(stderr, "ibp-coll-perf: out of memory\n");
		g->errors++;
		goto done;
	}
	for (int ex = 0; ex < 2; ex++) {
		static const char *const name[2] = { "pingpong", "exchange" };
		double sx = 0, sy = 0, sxx = 0, sxy = 0, alpha = 0;
		int npts = 0;
		if (r == 0 && !g->json)
			printf("# ibp-coll-perf: %s between ranks 0 and 1 of %d (%s), %s, median of %d\n"
			       "#%11s %10s %10s %10s\n#%11s %10s %10s %10s\n", name[ex], rc->nranks,
			       rc->mpi ? (ex ? "MPI_Isend/MPI_Irecv in pieces" : "MPI_Send/MPI_Recv") : "threads, the in-process transport",
			       ex ? "both send at once, time of the exchange" : "one-way time = round trip / 2", reps,
			       "size", "time", "min", "GB/s", "(B)", "(us)", "(us)", "");
		for (uint64_t size = 8;; size = size == 8 ? g->b : (uint64_t)ceil((double)size * g->f)) {
			if (size > g->e && size != 8)
				break;
			for (int i = 0; i < reps + g->warmup; i++) {
				const double t0 = now_s();
				const int bad = ex ? pp_exchange(rc, buf, rbuf, size)
						   : pp_move(rc, 0, 1, buf, size) || pp_move(rc, 1, 0, buf, size);
				if (bad) {
					fprintf(stderr, "ibp-coll-perf: rank %d: %s of %llu bytes failed: %s\n", r, name[ex],
						(unsigned long long)size, ibp_last_error());
					g->errors++;
					goto done;
				}
				tm[i] = (now_s() - t0) / (ex ? 1 : 2);
			}
			qsort(tm + g->warmup, (size_t)reps, sizeof(double), cmp_dbl);
			const double t = tm[g->warmup + reps / 2], lo = tm[g->warmup];
			if (size == 8)
				alpha = t;
			else if (!big || size >= 65536) {
				sx += (double)size;
				sy += t;
				sxx += (double)size * (double)size;
				sxy += (double)size * t;
				npts++;
			}
			if (r == 0) {
				if (g->json)
					printf("{\"op\":\"%s\",\"size\":%llu,\"nranks\":%d,\"time_us\":%.3f,"
					       "\"time_us_min\":%.3f,\"reps\":%d,\"mpi\":%d,\"rate\":%.6g}\n",
					       name[ex], (unsigned long long)size, rc->nranks, t * 1e6, lo * 1e6, reps, rc->mpi,
					       g->rate);
				else
					printf(" %11llu %10.2f %10.2f %10.4f\n", (unsigned long long)size, t * 1e6, lo * 1e6,
					       (double)size / t / 1e9);
			}
			if (size >= g->e)
				break;
		}
		if (r == 0) {
			double beta = 0;
			const double den = npts * sxx - sx * sx;
			if (npts >= 2 && den > 0) {
				const double slope = (npts * sxy - sx * sy) / den; /* s per byte */
				beta = slope > 0 ? 1.0 / slope : 0;
			} else if (npts == 1 && sy > alpha)
				beta = sx / (sy - alpha);
			if (g->json)
				printf("{\"op\":\"%s_fit\",\"nranks\":%d,\"alpha_s\":%.6g,\"beta_Bps\":%.6g,"
				       "\"points\":%d,\"mpi\":%d,\"throttle_Bps\":%.6g}\n",
				       name[ex], rc->nranks, alpha, beta, npts, rc->mpi, g->rate);
			else
				printf("# %s fit: alpha %.2f us, beta %.4g B/s (%d sizes)%s\n", name[ex], alpha * 1e6, beta,
				       npts, g->rate > 0 ? "; the communicator's throttle (--rate) is not on this path" : "");
			fflush(stdout);
		}
	}
done:
	free(buf);
	free(rbuf);
	free(tm);
}

static void run_rank(rank_ctx_t *rc)
{
	cfg_t *g = rc->g;
	if (g->op == PINGPONG) {
		run_pingpong(rc);
		return;
	}
	int p = rc->nranks, r = rc->rank;
	size_t esz = ibp_dtype_size(g->dt);
	double busf = g->op == AR ? 2.0 * (p - 1) / p : (double)(p - 1) / p;
	ibp_coll_comm_set_policy(rc->comm, (ibp_coll_policy_t)g->policy);
	if (ibp_coll_comm_set_lsq_bits(rc->comm, g->lsq_bits) != IBP_OK) {
		fprintf(stderr, "rank %d: %s\n", r, ibp_last_error());
		g->errors++;
		return;
	}
	const int reps = g->iters < 5 ? 5 : g->iters; /* alternating repetitions; medians */
	if (r == 0 && !g->json) {
		char host[256] = "?";
		gethostname(host, sizeof host - 1);
		printf("# nThread 1 nGpus 0 minBytes %llu maxBytes %llu step: %g(factor) warmup iters: %d iters: %d "
		       "agg iters: 1 validation: 1 graph: 0\n",
		       (unsigned long long)g->b, (unsigned long long)g->e, g->f, g->warmup, reps);
		printf("#\n# ibp-coll-perf: %s, %d ranks (%s), %s, codec %s, policy %s, data %s, %s\n", opnames[g->op], p,
		       rc->mpi ? "MPI" : "threads of one process", ibp_dtype_name(g->dt), ibp_coll_codec_name(g->codec),
		       g->policy == IBP_COLL_POLICY_ALWAYS ? "always" : g->policy == IBP_COLL_POLICY_NEVER ? "never" : "auto",
		       g->file ? g->data : "gauss (N(0, 0.02) as a sum of 4 uniforms; rank r's seed 0x9e3779b97f4a7c15 (r + 1))",
		       g->rate > 0 ? "rate-throttled" : "unthrottled");
		printf("# times: medians of %d alternating calls (ours, then %s), max over ranks\n#\n# Using devices\n", reps,
		       rc->mpi ? "MPI's own" : "none: no native baseline on threads");
		printf("#  Rank %2d Group  0 Pid %6d on %10s device -1 [cpu] host memory\n#\n", r, (int)getpid(), host);
		printf("#%77s%38s   %s\n", "out-of-place", "in-place", "libibp (out-of-place call)");
		printf("#%11s %13s %9s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s %6s %6s %14s %9s %8s %9s %9s\n", "size",
		       "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
		       "#wrong", "codec", "ratio", "decision", "err", "native", "vs_native", "f32_busbw");
		printf("#%11s %13s %9s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s %6s %6s %14s %9s %8s %9s %9s\n", "(B)",
		       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "", "", "",
		       "(rel-L2)", "(GB/s)", "", "(GB/s)");
		fflush(stdout);
	}
	if (r == 0) {
		ibp_coll_stats_t m;
		ibp_coll_comm_stats(rc->comm, &m);
		printf("%s model: alpha %.1f us, beta %.3g B/s, exp enc %.3g dec %.3g B/s, fp8 enc %.3g dec %.3g B/s\n",
		       g->json ? "//" : "#", m.alpha_s * 1e6, m.beta_Bps, m.exp_enc_Bps, m.exp_dec_Bps, m.fp8_enc_Bps,
		       m.fp8_dec_Bps);
	}
	double wrong_total = 0;
	for (uint64_t size = g->b; size <= g->e; size = (uint64_t)ceil((double)size * g->f)) {
		uint64_t count = g->op == AR ? size / esz : size / esz / (uint64_t)p;
		uint64_t in_n = g->op == AG || g->op == AR ? count : count * (uint64_t)p;
		uint64_t out_n = g->op == RS || g->op == AR ? count : count * (uint64_t)p;
		uint64_t buf_n = in_n > out_n ? in_n : out_n;
		uint64_t logical = g->op == AR ? count * esz : count * esz * (uint64_t)p;
		void *in = malloc(in_n * esz + 1), *out = malloc(out_n * esz + 1), *ref = malloc(out_n * esz + 1),
		     *ip = malloc(buf_n * esz + 1);
		float *absin = malloc(in_n * 4 + 4), *mag = malloc(out_n * 4 + 4);
		if (!in || !out || !ref || !ip || !absin || !mag) {
			fprintf(stderr, "ibp-coll-perf: out of memory at %llu bytes\n", (unsigned long long)size);
			g->errors++;
			free(in), free(out), free(ref), free(ip), free(absin), free(mag);
			break;
		}
		fill(g, r, in, in_n);
		/* the reference: MPI's own result (MPI), else the plain call's */
		ibp_status_t s = IBP_OK;
		if (rc->mpi)
			one_call(rc, 1, 0, in, ref, count, &s);
		else {
			ibp_coll_comm_set_policy(rc->comm, IBP_COLL_POLICY_NEVER);
			s = run_op(rc, IBP_COLL_CODEC_NONE, in, ref, count);
			ibp_coll_comm_set_policy(rc->comm, (ibp_coll_policy_t)g->policy);
		}
		/* magnitudes for the reductions' tolerance, and PTS's bound */
		double l1 = 0, linf = 0, pts_bound = 0;
		for (uint64_t i = 0; i < in_n; i++) {
			absin[i] = fabsf(getf(in, g->dt, i));
			l1 += absin[i];
			linf = absin[i] > linf ? absin[i] : linf;
		}
		if (s == IBP_OK && g->op == RS)
			s = ibp_coll_reducescatter(absin, mag, count, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_NONE,
						   rc->comm, NULL);
		else if (s == IBP_OK && g->op == AR)
			s = ibp_coll_allreduce(absin, mag, count, IBP_DTYPE_F32, IBP_COLL_SUM, IBP_COLL_CODEC_NONE, rc->comm,
					       NULL);
		max_all(rc, l1 * linf, &pts_bound);
		for (int i = 0; i < g->warmup && s == IBP_OK; i++)
			one_call(rc, 0, 0, in, out, count, &s);
		/* alternating: ours out-of-place, MPI's, ours in place, MPI's in place */
		double t[4][64] = { { 0 } };
		uint64_t wrong_ip = 0;
		const int nrep = reps > 64 ? 64 : reps;
		for (int k = 0; k < nrep && s == IBP_OK; k++) {
			t[0][k] = one_call(rc, 0, 0, in, out, count, &s);
			if (rc->mpi && s == IBP_OK)
				t[1][k] = one_call(rc, 1, 0, in, ref, count, &s);
			memcpy(g->op == AG ? (char *)ip + (uint64_t)r * count * esz : ip, in, in_n * esz);
			if (s == IBP_OK)
				t[2][k] = one_call(rc, 0, 1, ip, NULL, count, &s);
			if (k == 0 && s == IBP_OK) /* the in-place result, judged as the out-of-place one */
				wrong_ip = count_wrong(g, p, ip, ref, g->op == RS || g->op == AR ? mag : NULL, out_n, pts_bound);
			memcpy(g->op == AG ? (char *)ip + (uint64_t)r * count * esz : ip, in, in_n * esz);
			if (rc->mpi && s == IBP_OK)
				t[3][k] = one_call(rc, 1, 1, ip, NULL, count, &s);
		}
		if (s != IBP_OK) {
			fprintf(stderr, "ibp-coll-perf: rank %d: %s at %llu bytes: %s\n", r, opnames[g->op],
				(unsigned long long)size, ibp_last_error());
			g->errors++;
			free(in), free(out), free(ref), free(ip), free(absin), free(mag);
			return;
		}
		uint64_t wrong = count_wrong(g, p, out, ref, g->op == RS || g->op == AR ? mag : NULL, out_n, pts_bound);
		double e2 = 0, x2 = 0;
		for (uint64_t i = 0; i < out_n; i++) {
			double a = getf(out, g->dt, i), b = getf(ref, g->dt, i);
			e2 += (a - b) * (a - b);
			x2 += b * b;
		}
		ibp_coll_stats_t st;
		ibp_coll_comm_stats(rc->comm, &st);
		double tm[4], lo = 1e30, hi = 0;
		for (int q = 0; q < 4; q++)
			tm[q] = rc->mpi || q % 2 == 0 ? max_all(rc, median_d(t[q], nrep), NULL) : 0;
		for (int k = 0; k < nrep; k++)
			lo = t[0][k] < lo ? t[0][k] : lo, hi = t[0][k] > hi ? t[0][k] : hi;
		double wsum = 0, wipsum = 0, errmax = max_all(rc, x2 > 0 ? sqrt(e2 / x2) : 0, NULL);
		max_all(rc, (double)wrong, &wsum);
		max_all(rc, (double)wrong_ip, &wipsum);
		/* f32 of the same element count beside 16-bit sums (the same bytes per element would differ) */
		double tf = 0;
#ifdef IBP_HAVE_MPI
		if (rc->mpi && (g->op == AR || g->op == RS) && g->dt != IBP_DTYPE_F32) {
			void *fin = calloc(in_n + 1, 4), *fout = calloc(out_n + 1, 4);
			double tv[64];
			for (int k = 0; fin && fout && k < nrep; k++) {
				double t0 = now_s();
				native_op(g, fin, fout, count, 1);
				tv[k] = now_s() - t0;
			}
			if (fin && fout)
				tf = max_all(rc, median_d(tv, nrep), NULL);
			free(fin), free(fout);
		}
#endif
		wrong_total += wsum + wipsum;
		if (r == 0) {
			double alg[4], bus[4];
			for (int q = 0; q < 4; q++) {
				alg[q] = tm[q] > 0 ? (double)logical / tm[q] / 1e9 : 0;
				bus[q] = alg[q] * busf;
			}
			double fbus = tf > 0 ? (double)logical / tf / 1e9 * busf : bus[1];
			g->bus_sum += bus[0];
			g->nsizes++;
			const char *dec = decisions[st.last_decision], *redop = g->op == RS || g->op == AR ? "sum" : "none";
			if (g->json)
				printf("{\"op\":\"%s\",\"size\":%llu,\"count\":%llu,\"type\":\"%s\",\"redop\":\"%s\","
				       "\"root\":-1,\"nranks\":%d,\"time_us\":%.2f,\"algbw\":%.4f,\"busbw\":%.4f,"
				       "\"wrong\":%.0f,\"inplace_time_us\":%.2f,\"inplace_busbw\":%.4f,\"inplace_wrong\":%.0f,"
				       "\"time_us_min\":%.2f,\"time_us_max\":%.2f,\"reps\":%d,"
				       "\"codec\":\"%s\",\"ratio\":%.4f,\"decision\":\"%s\",\"err\":%.3g,\"rate\":%.6g,"
				       "\"native_busbw\":%.4f,\"native_inplace_busbw\":%.4f,\"vs_native\":%.4f,\"f32_busbw\":%.4f}\n",
				       opnames[g->op], (unsigned long long)logical, (unsigned long long)count,
				       ibp_dtype_name(g->dt), redop, p, tm[0] * 1e6, alg[0], bus[0], wsum, tm[2] * 1e6, bus[2],
				       wipsum, lo * 1e6, hi * 1e6, nrep, ibp_coll_codec_name(g->codec), st.last_ratio, dec,
				       errmax, g->rate, bus[1], bus[3], bus[1] > 0 ? bus[0] / bus[1] : 0, fbus);
			else
				printf(" %11llu %13llu %9s %6s %6d %8.1f %7.3f %7.3f %6.0f %8.1f %7.3f %7.3f %6.0f %6s %6.3f "
				       "%14s %9.3g %8.3f %8.2fx %9.3f\n",
				       (unsigned long long)logical, (unsigned long long)count, nccl_type(g->dt), redop, -1,
				       tm[0] * 1e6, alg[0], bus[0], wsum, tm[2] * 1e6, alg[2], bus[2], wipsum,
				       ibp_coll_codec_name(g->codec), st.last_ratio, dec, errmax, bus[1],
				       bus[1] > 0 ? bus[0] / bus[1] : 0.0, fbus);
			fflush(stdout);
		}
		if (wsum + wipsum > 0)
			g->errors++;
		free(in), free(out), free(ref), free(ip), free(absin), free(mag);
		if (size == 0)
			break;
	}
	if (r == 0 && !g->json) {
		printf("# Out of bounds values : %.0f %s\n", wrong_total, wrong_total > 0 ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g \n#\n\n", g->nsizes ? g->bus_sum / g->nsizes : 0.0);
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
	rank_ctx_t rc = { t->g, t->rank, t->nranks, NULL, 0, &tr };
	if (ibp_coll_inproc_transport(t->w, t->rank, &tr) != IBP_OK || ibp_coll_comm_create(&tr, &o, &rc.comm) != IBP_OK) {
		fprintf(stderr, "ibp-coll-perf: rank %d: %s\n", t->rank, ibp_last_error());
		t->g->errors++;
		return NULL;
	}
	run_rank(&rc);
	ibp_coll_comm_free(rc.comm);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: ibp-coll-perf -o allgather|reducescatter|allreduce|alltoall|pingpong -b MIN -e MAX -f FACTOR\n"
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
			for (k = 0; k < 5 && strcmp(v, opnames[k]); k++)
				;
			if (k == 5) {
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
		rank_ctx_t rc = { &g, 0, 1, NULL, 1, NULL };
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
		ibp_coll_comm_free(rc.comm);
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
	ibp_coll_inproc_free(w);
	free(th);
	free(ts);
	free(g.file);
	return g.errors ? 1 : 0;
}
