/* comm.c - communicators: options, the throttled and counted sendrecv,
 * calibration of the alpha-beta model and the per-call switcher. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/coll_internal.h"
#include "coll/rcmoe.h"
#include "exp/exp_format.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/cuda.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/opts.h"

/* Raw bytes a piece, by default: 1 MiB. Open MPI's transport asks for 60
 * KiB instead (transport_mpi.c, MPI_PIECE_BYTES: under its TCP eager
 * limit, so no piece waits for a rendezvous handshake whose reply queues
 * behind the peer's own data on a loaded link; 1 MiB pieces lost most of
 * the gain there, docs/BENCHMARKS.md "Pieces in flight"). Transports whose
 * receives are all posted before the data arrives (the in-process one,
 * Python's over gloo) pay per piece instead, so larger pieces do better
 * (gloo at 1 Gbit/s: 60 KiB 236 ms, 256 KiB 218, 1 MiB 210 for a 25 MiB
 * AllReduce). IBP_COLL_PIECE_BYTES overrides both; 0 turns pieces off. */
#define PIECE_BYTES_DEFAULT (1u << 20)

uint64_t ibpi_coll_piece_bytes(uint64_t dflt)
{
	const char *v = getenv("IBP_COLL_PIECE_BYTES");
	if (v && *v >= '0' && *v <= '9')
		return strtoull(v, NULL, 10);
	return dflt ? dflt : PIECE_BYTES_DEFAULT;
}

/* Whether pipelined steps run without the helper thread, the caller
 * making each piece between its polls: when the creating thread may run
 * on one CPU only (a rank bound to a core, as Open MPI binds two ranks by
 * default). There a helper takes turns with the caller for the CPU, and
 * the transport, progressed only by the caller's polls, stalls while the
 * helper encodes: LSQ's 16 MiB AllToAll over a 1 Gbit/s link took 21.7
 * ms, its link time 18 (docs/BENCHMARKS.md "LSQ's 16 MiB AllToAll on a
 * quiet machine"). IBP_COLL_FLOW_HELPER=0 or 1 forces either way. Read
 * when a communicator is made, as the piece size is. */
static int flow_solo(void)
{
	const char *e = getenv("IBP_COLL_FLOW_HELPER");
	if (e && (*e == '0' || *e == '1'))
		return *e == '0';
	return ibpi_cpus_allowed() == 1;
}

static ibp_status_t ibpi_coll_calibrate(ibp_coll_comm_t *c);

void ibp_coll_opts_default(ibp_coll_opts_t *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof *o);
	o->size = sizeof *o;
	o->timeout_ms = 60000;
	o->policy = IBP_COLL_POLICY_AUTO;
	o->calibrate = 1;
	o->rate = 0;
	o->nthreads = 1;
}

const char *ibp_coll_codec_name(ibp_coll_codec_t c)
{
	switch (c) {
	case IBP_COLL_CODEC_NONE: return "none";
	case IBP_COLL_CODEC_EXP: return "exp";
	case IBP_COLL_CODEC_FP8: return "fp8";
	case IBP_COLL_CODEC_DYNAMIQ: return "dynamiq";
	case IBP_COLL_CODEC_LSQ: return "lsq";
	case IBP_COLL_CODEC_PTS: return "pts";
	}
	return "unknown";
}

double ibpi_coll_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = { (time_t)s, (long)((s - floor(s)) * 1e9) };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* Token bucket: the link carries `rate` bytes/s with a burst of 16 KiB; a
 * send returns once its bytes have "left". */
static void pace(ibp_coll_comm_t *c, uint64_t bytes)
{
	double rate = c->o.rate;
	if (rate <= 0 || bytes == 0)
		return;
	double now = ibpi_coll_now(), burst = 16384.0 / rate;
	if (c->pace_next < now - burst)
		c->pace_next = now - burst;
	c->pace_next += (double)bytes / rate;
	sleep_s(c->pace_next - now);
}

ibp_status_t ibpi_coll_sendrecv(ibp_coll_comm_t *c, int dst, const void *sbuf, uint64_t sbytes, uint64_t logical,
			   int src, void *rbuf, uint64_t rcap, uint64_t *rbytes)
{
	if (dst >= 0) {
		pace(c, sbytes);
		c->st.wire_bytes += sbytes;
		c->st.logical_bytes += logical;
	}
	uint64_t got = 0;
	ibp_status_t s = c->t.sendrecv(c->t.ctx, dst, sbuf, sbytes, src, rbuf, rcap, &got, c->o.timeout_ms);
	if (s != IBP_OK)
		return s;
	if (rbytes)
		*rbytes = got;
	return IBP_OK;
}

void ibpi_coll_idle(double waited)
{
	static const struct timespec nap = { 0, 20000 };
	if (waited < 200e-6)
		sched_yield();
	else
		nanosleep(&nap, NULL);
}

ibp_status_t ibpi_coll_isend(ibp_coll_comm_t *c, int dst, const void *buf, uint64_t bytes, uint64_t logical,
			void **req)
{
	pace(c, bytes);
	IBP_TRY(c->t.async->isend(c->t.ctx, dst, buf, bytes, req));
	c->st.wire_bytes += bytes;
	c->st.logical_bytes += logical;
	return IBP_OK;
}

static ibp_status_t check_opts(const ibp_coll_opts_t *o)
{
	if (o->timeout_ms <= 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: timeout_ms must be > 0");
	if ((unsigned)o->policy > IBP_COLL_POLICY_NEVER)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: unknown policy %d", (int)o->policy);
	if (!(o->rate >= 0) || isinf(o->rate))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: rate must be finite and >= 0");
	if (o->nthreads < 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: nthreads must be >= 0");
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_create(const ibp_coll_transport_t *t, const ibp_coll_opts_t *opts,
				  ibp_coll_comm_t **out)
{
	return ibpi_coll_comm_create(t, opts, 0, out);
}

ibp_status_t ibpi_coll_comm_create(const ibp_coll_transport_t *t, const ibp_coll_opts_t *opts, uint64_t piece_dflt,
				   ibp_coll_comm_t **out)
{
	if (!out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_create: out is NULL");
	*out = NULL;
	if (!t)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_create: transport is NULL");
	IBP_TRY(IBPI_OPTS_CHECK(opts, "coll: comm_create", "ibp_coll_opts_t"));
	ibp_coll_opts_t o;
	if (opts)
		o = *opts;
	else
		ibp_coll_opts_default(&o);
	ibp_status_t s = IBP_OK;
	if (!t->sendrecv || t->nranks < 1 || t->rank < 0 || t->rank >= t->nranks)
		s = ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_create: bad transport (rank %d of %d)", t->rank,
			     t->nranks);
	else if (t->async && (!t->async->isend || !t->async->irecv || !t->async->test || !t->async->cancel))
		s = ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_create: the transport's async table lacks a function");
	else
		s = check_opts(&o);
	ibp_coll_comm_t *c = NULL;
	if (s == IBP_OK && !(c = calloc(1, sizeof *c)))
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: comm_create: out of memory");
	if (s != IBP_OK) {
		if (t->destroy)
			t->destroy(t->ctx);
		return s;
	}
	c->t = *t;
	c->o = o;
	c->rank = t->rank;
	c->nranks = t->nranks;
	c->st.last_ratio = 1;
	c->lsq_bits = LSQ_BITS;
	c->mem_kind = IBP_COLL_MEM_HOST;
	c->piece_bytes = ibpi_coll_piece_bytes(piece_dflt); /* before calibrating: it measures real calls */
	c->flow_solo = flow_solo();
	c->mem = &ibpi_coll_mem_host;
	if (o.calibrate && (s = ibpi_coll_calibrate(c)) != IBP_OK) {
		ibp_coll_comm_free(c);
		return s;
	}
	*out = c;
	return IBP_OK;
}

void ibp_coll_comm_free(ibp_coll_comm_t *c)
{
	if (!c)
		return;
	/* A void API: a failed join is not reportable; the helper is leaked then (helper.h). */
	(void)ibpi_coll_helper_stop(c->helper);
	ibpi_coll_dev_release(c);
	if (c->t.destroy)
		c->t.destroy(c->t.ctx);
	for (int k = 0; k < COLL_WS_N && !c->ws_lent; k++)
		free(c->ws[k].p);
	free(c);
}

void ibp_coll_comm_destroy(ibp_coll_comm_t *c) /* deprecated alias */
{
	ibp_coll_comm_free(c);
}

int ibp_coll_comm_rank(const ibp_coll_comm_t *c)
{
	return c ? c->rank : -1;
}

int ibp_coll_comm_nranks(const ibp_coll_comm_t *c)
{
	return c ? c->nranks : 0;
}

ibp_status_t ibp_coll_comm_stats(const ibp_coll_comm_t *c, ibp_coll_stats_t *st)
{
	if (!c || !st)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: comm_stats: NULL argument");
	*st = c->st;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_set_policy(ibp_coll_comm_t *c, ibp_coll_policy_t policy)
{
	if (!c || (unsigned)policy > IBP_COLL_POLICY_NEVER)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_policy: bad argument");
	c->o.policy = policy;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_set_lsq_bits(ibp_coll_comm_t *c, int bits)
{
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_lsq_bits: comm is NULL");
	if (bits != 2 && bits != 4 && bits != 8)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_lsq_bits: %d bits (2, 4 or 8)", bits);
	c->lsq_bits = bits;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_set_memory(ibp_coll_comm_t *c, ibp_coll_memory_t mem)
{
	if (!c)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_memory: comm is NULL");
	if ((unsigned)mem > IBP_COLL_MEM_HOST_FALLBACK)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_memory: unknown memory space %d", (int)mem);
	if (mem == IBP_COLL_MEM_DEVICE) {
		int n = 0;
		if (!ibp_cuda_built())
			return ibpi_fail(IBP_ERR_NO_DEVICE, "coll: set_memory: device buffers need libibp built with CUDA");
		if (ibp_cuda_device_count(&n) != IBP_OK || n < 1)
			return ibpi_fail(IBP_ERR_NO_DEVICE, "coll: set_memory: no CUDA device");
	}
	if (mem != c->mem_kind) {
		ibpi_coll_dev_release(c); /* buffers of the other space */
		memset(&c->dcal, 0, sizeof c->dcal); /* its codec speeds too */
	}
	c->mem_kind = mem;
	c->mem = mem == IBP_COLL_MEM_HOST ? &ibpi_coll_mem_host : &ibpi_coll_mem_device;
	return IBP_OK;
}

ibp_status_t ibp_coll_comm_set_rate(ibp_coll_comm_t *c, double rate)
{
	if (!c || isnan(rate) || isinf(rate))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: set_rate: bad argument");
	c->o.rate = rate > 0 ? rate : 0;
	return IBP_OK;
}

/* ---- calibration ---- */

#define CAL_BIG (1u << 20)
#define CAL_ELEMS (1u << 18)

/* Smallest time of `reps` ring exchanges of `bytes` with the neighbours. */
static ibp_status_t ring_time(ibp_coll_comm_t *c, uint8_t *sbuf, uint8_t *rbuf, uint64_t bytes, int reps,
			      double *best)
{
	int right = (c->rank + 1) % c->nranks, left = (c->rank + c->nranks - 1) % c->nranks;
	*best = INFINITY;
	for (int i = 0; i < reps; i++) {
		double t0 = ibpi_coll_now();
		uint64_t got;
		IBP_TRY(ibpi_coll_sendrecv(c, right, sbuf, bytes, 0, left, rbuf, bytes, &got));
		double dt = ibpi_coll_now() - t0;
		if (got != bytes)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: calibration message of %llu bytes, expected %llu",
					(unsigned long long)got, (unsigned long long)bytes);
		if (dt < *best)
			*best = dt;
	}
	return IBP_OK;
}

/* The calibration message: CAL_ELEMS BF16 values, each the sum of 4
 * uniforms, close enough to a Gaussian of sigma ~0.03 (weights and
 * activations look like this). */
static void cal_data(uint16_t *x, int rank)
{
	uint32_t r = 0x9e3779b9u + (uint32_t)rank;
	for (uint32_t i = 0; i < CAL_ELEMS; i++) {
		float v = 0;
		for (int k = 0; k < 4; k++) {
			r = r * 1664525u + 1013904223u;
			v += (float)(r >> 8) * (1.0f / 16777216.0f) - 0.5f;
		}
		uint32_t b;
		float f = v * 0.05f;
		memcpy(&b, &f, 4);
		x[i] = (uint16_t)(b >> 16);
	}
}

/* Throughput (input bytes/s) of encoding the calibration message x as enc
 * (exponents coded as exp_table) and decoding it, through the buffer steps
 * ops: host memory, or the device's (kernels or their CPU twins). Best of
 * two runs, the first also warming kernels up; *bytes = the message's size.
 * A step that fails leaves the outputs untouched (speed 0: never chosen). */
static ibp_status_t codec_speed(ibp_coll_comm_t *c, const coll_mem_ops_t *ops, enum coll_enc enc, int exp_table,
				const void *x, void *msg, uint64_t cap, void *out, double *enc_bps, double *dec_bps,
				uint64_t *bytes)
{
	coll_hdr_t h = { COLL_MAGIC, COLL_OP_CALIB, (uint8_t)enc, IBP_DTYPE_BF16, (uint8_t)enc, 0, CAL_ELEMS, 0, 0 };
	const int saved = c->exp_table; /* the steps read the coding from the communicator */
	double te = INFINITY, td = INFINITY;
	uint64_t n = 0;
	ibp_status_t s = IBP_OK;
	c->exp_table = exp_table;
	for (int i = 0; s == IBP_OK && i < 2; i++) {
		double t0 = ibpi_coll_now();
		if ((s = ops->encode(c, &h, x, msg, cap, &n)) != IBP_OK)
			break;
		double t1 = ibpi_coll_now();
		if ((s = ops->decode(c, &h, msg, n, out)) == IBP_OK)
			s = ops->finish(c); /* the device's steps run on a stream */
		double t2 = ibpi_coll_now();
		te = fmin(te, t1 - t0);
		td = fmin(td, t2 - t1);
	}
	c->exp_table = saved;
	if (s != IBP_OK)
		return s;
	*enc_bps = 2.0 * CAL_ELEMS / fmax(te, 1e-9);
	*dec_bps = 2.0 * CAL_ELEMS / fmax(td, 1e-9);
	*bytes = n;
	return IBP_OK;
}

static ibp_status_t ibpi_coll_calibrate(ibp_coll_comm_t *c)
{
	if (c->nranks == 1)
		return IBP_OK;
	uint64_t cap = 0;
	IBP_TRY(ibpi_coll_msg_cap(IBP_DTYPE_BF16, CAL_ELEMS, &cap));
	if (cap < CAL_BIG)
		cap = CAL_BIG;
	uint8_t *sbuf = calloc(1, cap), *rbuf = calloc(1, cap);
	uint16_t *x = malloc(CAL_ELEMS * 2), *y = malloc(CAL_ELEMS * 2);
	ibp_status_t s = IBP_OK;
	if (!sbuf || !rbuf || !x || !y) {
		s = ibpi_fail(IBP_ERR_NOMEM, "coll: calibration: out of memory");
		goto out;
	}
	/* Throttled: about 10 ms of traffic per big message (64 KiB .. 1 MiB). */
	uint64_t big = CAL_BIG;
	if (c->o.rate > 0)
		big = (uint64_t)fmin(fmax(c->o.rate * 0.01, 65536.0), (double)CAL_BIG);
	double t_small, t_big;
	if ((s = ring_time(c, sbuf, rbuf, 8, 5, &t_small)) != IBP_OK ||
	    (s = ring_time(c, sbuf, rbuf, big, 3, &t_big)) != IBP_OK)
		goto out;
	c->st.alpha_s = t_small;
	c->st.beta_Bps = (double)big / fmax(t_big - t_small, 1e-9);
	cal_data(x, c->rank);
	/* The CPU codecs whatever memory the calls use (the switcher's model
	 * of host buffers); one that fails keeps speed 0. */
	const coll_mem_ops_t *cpu = &ibpi_coll_mem_host;
	double rans_enc = 0, rans_dec = 0;
	uint64_t bytes;
	(void)codec_speed(c, cpu, COLL_ENC_EXP, IBP_EXP_TABLE_SIGMA, x, sbuf, cap, y, &c->st.exp_enc_Bps,
			  &c->st.exp_dec_Bps, &bytes);
	(void)codec_speed(c, cpu, COLL_ENC_FP8, IBP_EXP_TABLE_SIGMA, x, sbuf, cap, y, &c->st.fp8_enc_Bps,
			  &c->st.fp8_dec_Bps, &bytes);
	(void)codec_speed(c, cpu, COLL_ENC_EXP, IBP_EXP_TABLE_RANS, x, sbuf, cap, y, &rans_enc, &rans_dec, &bytes);
	/* One model for all ranks (worst link, slowest codec), so ranks with
	 * the same data make the same decision. */
	double mine[8] = { c->st.alpha_s, c->st.beta_Bps, c->st.exp_enc_Bps, c->st.exp_dec_Bps, c->st.fp8_enc_Bps,
			   c->st.fp8_dec_Bps, rans_enc, rans_dec },
	       cur[8], got[8];
	memcpy(cur, mine, sizeof cur);
	int right = (c->rank + 1) % c->nranks, left = (c->rank + c->nranks - 1) % c->nranks;
	for (int step = 0; step < c->nranks - 1; step++) {
		uint64_t n = 0;
		if ((s = ibpi_coll_sendrecv(c, right, cur, sizeof cur, 0, left, got, sizeof got, &n)) != IBP_OK)
			goto out;
		if (n != sizeof got) {
			s = ibpi_fail(IBP_ERR_INVALID_ARG, "coll: calibration: %llu-byte model message",
				     (unsigned long long)n);
			goto out;
		}
		for (int k = 0; k < 8; k++)
			if (!(got[k] >= 0) || isinf(got[k])) {
				s = ibpi_fail(IBP_ERR_CORRUPT, "coll: calibration: bad model value from rank %d", left);
				goto out;
			}
		mine[0] = fmax(mine[0], got[0]);
		for (int k = 1; k < 8; k++)
			mine[k] = fmin(mine[k], got[k]);
		memcpy(cur, got, sizeof cur);
	}
	c->st.alpha_s = mine[0];
	c->st.beta_Bps = mine[1];
	c->st.exp_enc_Bps = mine[2];
	c->st.exp_dec_Bps = mine[3];
	c->st.fp8_enc_Bps = mine[4];
	c->st.fp8_dec_Bps = mine[5];
	c->rans_enc_Bps = mine[6];
	c->rans_dec_Bps = mine[7];
	c->st.wire_bytes = c->st.logical_bytes = 0;
out:
	free(sbuf);
	free(rbuf);
	free(x);
	free(y);
	return s;
}

/* ---- the switcher ---- */

#define SAMPLE_ELEMS 16384u

static double estimate_ratio(ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, const void *sample,
			     uint64_t n, int exp_table)
{
	uint64_t esz = ibp_dtype_size(dt);
	if (codec == IBP_COLL_CODEC_FP8) {
		ibp_fp8_opts_t o;
		ibp_fp8_opts_default(&o);
		uint64_t f = 0;
		uint64_t m = n ? n : 1;
		if (ibp_fp8_encoded_size(&o, m, &f) != IBP_OK)
			return 1;
		return (double)f / (double)(m * esz);
	}
	if (n > SAMPLE_ELEMS)
		n = SAMPLE_ELEMS;
	if (n == 0)
		return 1;
	uint64_t cap = 0, size = 0;
	if (ibp_exp_encode_bound(dt, n, &cap) != IBP_OK)
		return 1;
	void *buf = malloc(cap);
	if (!buf)
		return 1;
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = 1;
	o.table_mode = (ibp_exp_table_mode_t)exp_table;
	o.checksum = 0; /* a size estimate, as the wire blocks are */
	double r = 1;
	if (ibp_exp_encode(sample, dt, n, &o, buf, cap, &size) == IBP_OK)
		r = (double)size / (double)(n * esz);
	free(buf);
	(void)c;
	return r;
}

/* The smallest size ratio the exponent codec can reach on dt: sign and
 * mantissa bytes stay raw, each exponent costs at least its 3 code-plane
 * bits (plus FP16's 3 sign/mantissa planes); headers and escapes only add. */
static double exp_best_ratio(ibp_dtype_t dt)
{
	expf_shape_t sh;
	if (!expf_shape_of((uint32_t)dt, &sh))
		return 1;
	return (double)(8 * (sh.lo_bytes + sh.hi_bytes) + 3 + sh.sm_planes) / (double)(8 * sh.esize);
}

/* The calibrated alpha-beta model's time of a call sending at ratio r
 * (coded/raw) with codec speeds enc_bps/dec_bps (r = 1, speeds 0: plain). */
static double coll_model_time(const ibp_coll_comm_t *c, ibp_dtype_t dt, double r, double enc_bps, double dec_bps,
			      uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec)
{
	/* Codec speeds were measured on BF16 input bytes; per byte they carry over. */
	double m = (double)msg_elems * (double)ibp_dtype_size(dt);
	double t = (double)nsteps * (c->st.alpha_s + m * r / c->st.beta_Bps);
	if (enc_bps > 0 || dec_bps > 0)
		t += (double)n_enc * m / fmax(enc_bps, 1) + (double)n_dec * m / fmax(dec_bps, 1);
	return t;
}

/* Does sending at ratio r beat sending plain? */
static int coll_model_pays(const ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, double r,
			   uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec)
{
	double enc_bps = codec == IBP_COLL_CODEC_EXP ? c->st.exp_enc_Bps : c->st.fp8_enc_Bps;
	double dec_bps = codec == IBP_COLL_CODEC_EXP ? c->st.exp_dec_Bps : c->st.fp8_dec_Bps;
	return coll_model_time(c, dt, r, enc_bps, dec_bps, msg_elems, nsteps, n_enc, n_dec) <
	       coll_model_time(c, dt, 1.0, 0, 0, msg_elems, nsteps, n_enc, n_dec);
}

/* rANS-coded exponents (docs/CODECS.md "rANS block") shave about 5% more
 * off an exp message but encode and decode 3-6x slower: worth it on slow
 * links only. An optimistic bound first (rANS at 0.9 of the table code's
 * ratio: no data compress 10% better that way), so that a fast link never
 * pays for the sample encode; then the sample's own rANS ratio. */
#define RANS_BEST_GAIN 0.9
static int rans_pays(ibp_coll_comm_t *c, ibp_dtype_t dt, double r_table, const void *sample, uint64_t sample_n,
		     uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec)
{
	if (!(c->rans_enc_Bps > 0 && c->rans_dec_Bps > 0))
		return 0;
	double t_table = coll_model_time(c, dt, r_table, c->st.exp_enc_Bps, c->st.exp_dec_Bps, msg_elems, nsteps,
					 n_enc, n_dec);
	if (coll_model_time(c, dt, RANS_BEST_GAIN * r_table, c->rans_enc_Bps, c->rans_dec_Bps, msg_elems, nsteps, n_enc,
			    n_dec) >= t_table)
		return 0;
	double r = estimate_ratio(c, IBP_COLL_CODEC_EXP, dt, sample, sample_n, IBP_EXP_TABLE_RANS);
	return coll_model_time(c, dt, r, c->rans_enc_Bps, c->rans_dec_Bps, msg_elems, nsteps, n_enc, n_dec) < t_table;
}

/* Device buffers are not sampled, so there the exponents' coding is chosen
 * from the calibration message: this rank's own speeds of both codings
 * through its device steps (the kernels, or their CPU twins in the host
 * fallback) and their ratios, measured once, on the first EXP call that
 * asks. Ranks may choose differently: receivers decode either. A coding
 * that fails here (a device encoder without rANS) keeps speed 0: never
 * chosen. */
static void dev_calibrate(ibp_coll_comm_t *c)
{
	c->dcal.done = 1;
	uint16_t *x = malloc(CAL_ELEMS * 2);
	coll_bufs_t b;
	if (!x || c->mem->bufs_get(c, IBP_DTYPE_BF16, CAL_ELEMS, 1, &b) != IBP_OK)
		goto out;
	cal_data(x, c->rank);
	if (c->mem->copy(c, b.tmp, x, CAL_ELEMS * 2) != IBP_OK || c->mem->finish(c) != IBP_OK)
		goto put;
	for (int k = 0; k < 2; k++) {
		uint64_t bytes = 0;
		if (codec_speed(c, c->mem, COLL_ENC_EXP, k ? IBP_EXP_TABLE_RANS : IBP_EXP_TABLE_SIGMA, b.tmp, b.m[0],
				b.cap, b.acc, &c->dcal.enc[k], &c->dcal.dec[k], &bytes) == IBP_OK)
			c->dcal.r[k] = (double)bytes / (2.0 * CAL_ELEMS); /* its 128-byte header: 0.02% */
	}
put:
	c->mem->bufs_put(c, &b);
out:
	free(x);
}

/* Device buffers: do rANS exponents beat the table code by the model? */
static int dev_rans_pays(ibp_coll_comm_t *c, ibp_dtype_t dt, uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc,
			 uint64_t n_dec)
{
	if (!c->dcal.done)
		dev_calibrate(c);
	if (!(c->dcal.enc[0] > 0 && c->dcal.dec[0] > 0 && c->dcal.enc[1] > 0 && c->dcal.dec[1] > 0))
		return 0;
	return coll_model_time(c, dt, c->dcal.r[1], c->dcal.enc[1], c->dcal.dec[1], msg_elems, nsteps, n_enc, n_dec) <
	       coll_model_time(c, dt, c->dcal.r[0], c->dcal.enc[0], c->dcal.dec[0], msg_elems, nsteps, n_enc, n_dec);
}

/* The switcher's decisions that do not depend on the data: the same on
 * every rank (the model is shared), -1 when the data decide. */
static int fixed_decision(const ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, uint64_t msg_elems,
			  uint64_t nsteps, uint64_t n_enc, uint64_t n_dec)
{
	if (codec == IBP_COLL_CODEC_NONE || c->o.policy == IBP_COLL_POLICY_NEVER || c->nranks == 1)
		return IBP_COLL_DECIDED_PLAIN;
	if (c->o.policy == IBP_COLL_POLICY_ALWAYS || codec == IBP_COLL_CODEC_LSQ || c->mem_kind != IBP_COLL_MEM_HOST)
		return IBP_COLL_DECIDED_COMPRESS; /* LSQ: lossy by request, not weighed; device buffers: not sampled */
	if (c->st.beta_Bps > 0 && codec == IBP_COLL_CODEC_EXP &&
	    !coll_model_pays(c, codec, dt, exp_best_ratio(dt), msg_elems, nsteps, n_enc, n_dec))
		return IBP_COLL_DECIDED_NOT_WORTH; /* not even the best ratio would pay: no sample encode (a fast
						      link and small calls would pay for it on every call) */
	return -1;
}

enum coll_enc ibpi_coll_decide(ibp_coll_comm_t *c, ibp_coll_codec_t codec, ibp_dtype_t dt, const void *sample,
			  uint64_t sample_n, uint64_t msg_elems, uint64_t nsteps, uint64_t n_enc, uint64_t n_dec)
{
	ibp_coll_decision_t d;
	enum coll_enc enc = COLL_ENC_RAW;
	const int calibrated = c->st.beta_Bps > 0;
	const int fixed = fixed_decision(c, codec, dt, msg_elems, nsteps, n_enc, n_dec);
	c->exp_table = IBP_EXP_TABLE_SIGMA;
	int rans = 0; /* the exponents' coding, by the same model */
	if (fixed >= 0) {
		d = (ibp_coll_decision_t)fixed;
		/* device buffers (not sampled) under policy AUTO: by the calibration message */
		rans = d == IBP_COLL_DECIDED_COMPRESS && codec == IBP_COLL_CODEC_EXP && calibrated &&
		       c->mem_kind != IBP_COLL_MEM_HOST && c->o.policy == IBP_COLL_POLICY_AUTO &&
		       dev_rans_pays(c, dt, msg_elems, nsteps, n_enc, n_dec);
	} else {
		double r = estimate_ratio(c, codec, dt, sample, sample_n, IBP_EXP_TABLE_SIGMA);
		if (r > 0.95)
			d = IBP_COLL_DECIDED_INCOMPRESSIBLE;
		else if (!calibrated)
			d = IBP_COLL_DECIDED_COMPRESS; /* not calibrated: compressible data is sent coded */
		else
			d = coll_model_pays(c, codec, dt, r, msg_elems, nsteps, n_enc, n_dec) ? IBP_COLL_DECIDED_COMPRESS
											 : IBP_COLL_DECIDED_NOT_WORTH;
		rans = d == IBP_COLL_DECIDED_COMPRESS && codec == IBP_COLL_CODEC_EXP && calibrated &&
		       c->mem_kind == IBP_COLL_MEM_HOST &&
		       rans_pays(c, dt, r, sample, sample_n, msg_elems, nsteps, n_enc, n_dec);
	}
	if (rans)
		c->exp_table = IBP_EXP_TABLE_RANS;
	switch (d) {
	case IBP_COLL_DECIDED_PLAIN: c->st.plain++; break;
	case IBP_COLL_DECIDED_COMPRESS:
		c->st.compressed++;
		enc = codec == IBP_COLL_CODEC_EXP ? COLL_ENC_EXP : codec == IBP_COLL_CODEC_LSQ ? COLL_ENC_LSQ : COLL_ENC_FP8;
		break;
	case IBP_COLL_DECIDED_NOT_WORTH: c->st.not_worth++; break;
	case IBP_COLL_DECIDED_INCOMPRESSIBLE: c->st.incompressible++; break;
	}
	c->st.last_decision = d;
	return enc;
}

ibp_status_t ibp_coll_comm_plain(const ibp_coll_comm_t *c, ibp_coll_op_t op, uint64_t count, ibp_dtype_t dt,
				 ibp_coll_codec_t codec, int *plain)
{
	if (!c || !plain)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: NULL argument");
	*plain = 0;
	if (dt != IBP_DTYPE_BF16 && dt != IBP_DTYPE_F16 && dt != IBP_DTYPE_F32)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: dtype %s (bf16, f16 or f32 only)", ibp_dtype_name(dt));
	if ((unsigned)codec > IBP_COLL_CODEC_PTS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: unknown codec %d", (int)codec);
	const uint64_t p = (uint64_t)c->nranks;
	if ((codec == IBP_COLL_CODEC_DYNAMIQ || codec == IBP_COLL_CODEC_PTS) && op != IBP_COLL_OP_ALLREDUCE)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: codec %s is for allreduce only",
				ibp_coll_codec_name(codec));
	if (codec == IBP_COLL_CODEC_LSQ && op != IBP_COLL_OP_ALLTOALL)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: codec lsq is for alltoall only");
	int d;
	/* the arguments each collective gives the switcher (coll/algo.c) */
	switch (op) {
	case IBP_COLL_OP_ALLGATHER: d = fixed_decision(c, codec, dt, count, p - 1, 1, p - 1); break;
	case IBP_COLL_OP_REDUCESCATTER: d = fixed_decision(c, codec, dt, count, p - 1, p - 1, p - 1); break;
	case IBP_COLL_OP_ALLTOALL: d = fixed_decision(c, codec, dt, count, p - 1, p - 1, p - 1); break;
	case IBP_COLL_OP_ALLREDUCE:
		if (codec == IBP_COLL_CODEC_DYNAMIQ || codec == IBP_COLL_CODEC_PTS) { /* lossy by request */
			d = c->o.policy == IBP_COLL_POLICY_NEVER || p == 1 ? IBP_COLL_DECIDED_PLAIN
									   : IBP_COLL_DECIDED_COMPRESS;
			break;
		}
		d = fixed_decision(c, codec, dt, count / p + (count % p != 0), 2 * (p - 1), p, 2 * (p - 1));
		break;
	default: return ibpi_fail(IBP_ERR_INVALID_ARG, "coll: plain: unknown collective %d", (int)op);
	}
	*plain = d == IBP_COLL_DECIDED_PLAIN || d == IBP_COLL_DECIDED_NOT_WORTH;
	return IBP_OK;
}
