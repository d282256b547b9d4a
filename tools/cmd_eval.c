/* cmd_eval.c - `ibp eval --codec ibp|exp|fp8 IN.npy`: one codec on one
 * array, in memory: ratio, single-thread encode and decode speed, and the
 * error of the decoded values against the input. No file is written. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"

const char *const help_eval =
	"usage: ibp eval --codec ibp|exp|fp8 [options] IN.npy\n"
	"\n"
	"Encode the array in IN.npy with one codec, in memory, decode it again and\n"
	"print ONE line of key=value figures:\n"
	"  codec, dtype, elements, raw_bytes, encoded_bytes,\n"
	"  ratio        raw_bytes / encoded_bytes\n"
	"  encode_gbps  single-thread encode speed, uncompressed GB/s (median)\n"
	"  decode_gbps  single-thread decode speed, uncompressed GB/s (median)\n"
	"  max_abs_err  largest |decoded - original| (in double)\n"
	"  rel_l2_err   ||decoded - original||_2 / ||original||_2\n"
	"For the lossless codecs (ibp, exp) the round trip must be byte-exact\n"
	"(exit 2 otherwise) and both errors are 0. ibp trains a codec with the\n"
	"default options first (not timed) and encodes the rows (dimension 0);\n"
	"exp and fp8 cut the elements into blocks of whole rows as `ibp pack` does.\n"
	"exp-rows (a container form only) is refused: measure it with `ibp pack\n"
	"--codec exp-rows` and `ibp info`, `ibp gather`.\n"
	"\n"
	"options:\n"
	"  --codec ibp|exp|fp8     the codec (default ibp)\n"
	"  --dtype bf16|f16|f32    evaluate in this dtype: bf16 reads a '<u2'/'|V2'\n"
	"                          array as bfloat16; a float array of another type\n"
	"                          is first converted (round to nearest even)\n"
	"  --exp-table sigma|hist|rans  exp: exponent table (default sigma)\n"
	"  --fp8-format e4m3|e5m2  fp8: element format (default e4m3)\n"
	"  --fp8-block N           fp8: scale block, power of two 16..4096 (default 256)\n"
	"  --no-hadamard           fp8: no Walsh-Hadamard rotation\n"
	"  --no-adaptive           fp8: no adaptive pre-scale\n"
	"  --repeat N              exactly N timed runs per figure (default: at least\n"
	"                          3, until about 0.25 s, at most 20)\n"
	"  --json                  the same figures as one JSON object\n"
	"  -h, --help              this text\n"
	"\n"
	"Exit status: 0 ok, 1 usage, 2 error (exp/fp8 need bf16, f16 or f32 data).\n";

#define TRY(expr)                               \
	do {                                    \
		ibp_status_t try_s_ = (expr);   \
		if (try_s_ != IBP_OK)           \
			return try_s_;          \
	} while (0)

/* ---- element conversions (bit exact, round to nearest even) ---- */

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 0x3FF;
	if (e == 31)
		return bits_f32(sign | 0x7F800000u | (m << 13));
	if (e == 0) {
		float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
		return sign ? -v : v;
	}
	return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

static uint16_t f32_to_f16(float f)
{
	uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u)
		return (uint16_t)(sign | 0x7E00); /* NaN */
	if (a >= 0x477FF000u)             /* rounds to >= 65536: Inf */
		return (uint16_t)(sign | 0x7C00);
	if (a < 0x38800000u) { /* below the smallest normal: a multiple of 2^-24 */
		float v = bits_f32(a) * 0x1p24f; /* exact scaling */
		uint32_t q = (uint32_t)v;
		float rest = v - (float)q;
		if (rest > 0.5f || (rest == 0.5f && (q & 1)))
			q++;
		return (uint16_t)(sign | q);
	}
	uint32_t r = a + 0xFFFu + ((a >> 13) & 1); /* ties to even on the 13 dropped bits */
	return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* Element i of `p` (dt) as a double. */
static double elem(const uint8_t *p, ibp_dtype_t dt, uint64_t i)
{
	uint16_t h;
	switch (dt) {
	case IBP_DTYPE_F32: {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
	case IBP_DTYPE_F64: {
		double d;
		memcpy(&d, p + 8 * i, 8);
		return d;
	}
	case IBP_DTYPE_F16:
		memcpy(&h, p + 2 * i, 2);
		return f16_to_f32(h);
	case IBP_DTYPE_BF16:
		memcpy(&h, p + 2 * i, 2);
		return bits_f32((uint32_t)h << 16);
	default:
		return 0;
	}
}

static int is_float(ibp_dtype_t dt)
{
	return dt == IBP_DTYPE_F16 || dt == IBP_DTYPE_BF16 || dt == IBP_DTYPE_F32 || dt == IBP_DTYPE_F64;
}

/* Converts n float elements from `from` to `to` (bf16/f16/f32); NULL when
 * out of memory. */
static uint8_t *convert(const uint8_t *src, ibp_dtype_t from, ibp_dtype_t to, uint64_t n)
{
	size_t es = ibp_dtype_size(to);
	uint8_t *d = malloc(n ? n * es : 1);
	if (!d)
		return NULL;
	for (uint64_t i = 0; i < n; i++) {
		float f = (float)elem(src, from, i);
		if (to == IBP_DTYPE_F32) {
			memcpy(d + 4 * i, &f, 4);
		} else {
			uint16_t h = to == IBP_DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
			memcpy(d + 2 * i, &h, 2);
		}
	}
	return d;
}

/* ---- the codecs ---- */

typedef struct ev {
	ibp_codec_id_t id;
	ibp_dtype_t dt;
	const uint8_t *data;
	uint64_t nrows, R, elems, raw;
	uint8_t *enc, *dec;
	uint64_t enc_cap, enc_bytes;
	/* ibp */
	ibp_codec_t *codec;
	uint64_t *offsets;
	uint8_t *flags, *clusters;
	/* exp, fp8: blocks of chunk elements */
	uint64_t chunk, nblk, stride;
	uint64_t *boff; /* exp block offsets; fp8 stream sizes */
	ibp_exp_opts_t eo;
	ibp_fp8_opts_t fo;
} ev_t;

static ibp_status_t ev_encode(ev_t *e)
{
	size_t es = ibp_dtype_size(e->dt);
	if (e->id == IBP_CODEC_IBP)
		return ibp_encode_batch(e->codec, e->data, e->nrows, e->enc, e->enc_cap, e->offsets, e->flags,
					e->clusters, 1);
	if (e->id == IBP_CODEC_EXP)
		return ibp_exp_encode_batch(e->data, e->dt, e->elems, e->chunk, &e->eo, e->enc, e->enc_cap, e->boff);
	for (uint64_t b = 0; b < e->nblk; b++) {
		uint64_t n = e->elems - b * e->chunk < e->chunk ? e->elems - b * e->chunk : e->chunk;
		TRY(ibp_fp8_encode(e->data + b * e->chunk * es, e->dt, n, &e->fo, e->enc + b * e->stride,
					   e->enc_cap - b * e->stride, &e->boff[b]));
	}
	return IBP_OK;
}

static ibp_status_t ev_decode(ev_t *e)
{
	size_t es = ibp_dtype_size(e->dt);
	if (e->id == IBP_CODEC_IBP)
		return ibp_decode_batch(e->codec, e->enc, e->offsets[e->nrows], e->offsets, e->flags, e->clusters,
					e->nrows, e->dec, 1);
	if (e->id == IBP_CODEC_EXP)
		return ibp_exp_decode_batch(e->enc, e->boff[e->nblk], e->boff, e->dt, e->elems, e->chunk, e->dec, 1);
	for (uint64_t b = 0; b < e->nblk; b++) {
		uint64_t n = e->elems - b * e->chunk < e->chunk ? e->elems - b * e->chunk : e->chunk;
		TRY(ibp_fp8_decode(e->enc + b * e->stride, e->boff[b], e->dt, n, e->dec + b * e->chunk * es, 1));
	}
	return IBP_OK;
}

/* Encoded size, counted as `ibp bench` does: ibp = payload + flags (+
 * cluster ids) + Mask/Bitval/Xval tables; exp = the blocks; fp8 = the
 * streams. Row and block offsets are left out. */
static uint64_t ev_size(const ev_t *e)
{
	if (e->id == IBP_CODEC_IBP) {
		unsigned k = ibp_codec_nclusters(e->codec);
		uint64_t table = (uint64_t)k * ibp_codec_nchunks(e->codec) * ibp_codec_chunk_bytes(e->codec);
		return e->offsets[e->nrows] + e->nrows * (k > 1 ? 2 : 1) +
		       table * (2 + (uint64_t)ibp_codec_has_xval(e->codec));
	}
	if (e->id == IBP_CODEC_EXP)
		return e->boff[e->nblk];
	uint64_t t = 0;
	for (uint64_t b = 0; b < e->nblk; b++)
		t += e->boff[b];
	return t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Runs fn once untimed, then `repeat` timed runs (0 = at least 3, until
 * 0.25 s, at most 20); *secs gets the median. */
static ibp_status_t timed(ev_t *e, ibp_status_t (*fn)(ev_t *), uint64_t repeat, double *secs)
{
	double t[64];
	uint64_t n = 0;
	TRY(fn(e));
	double start = cli_now();
	while (n < (repeat ? repeat : 20)) {
		double t0 = cli_now();
		TRY(fn(e));
		t[n++] = cli_now() - t0;
		if (!repeat && n >= 3 && cli_now() - start > 0.25)
			break;
	}
	qsort(t, n, sizeof(double), cmp_double);
	*secs = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
	return IBP_OK;
}

typedef struct eval_opts {
	ibp_dtype_t want; /* BYTES: the file's own dtype */
	uint64_t repeat;
} eval_opts_t;

static int eval_option(void *ctx, int code, const char *arg)
{
	eval_opts_t *p = ctx;
	if (code == OPT_DTYPE) { /* eval converts: its --dtype is not the training options' */
		if (!strcmp(arg, "bf16"))
			p->want = IBP_DTYPE_BF16;
		else if (!strcmp(arg, "f16"))
			p->want = IBP_DTYPE_F16;
		else if (!strcmp(arg, "f32"))
			p->want = IBP_DTYPE_F32;
		else {
			cli_usage_error("eval", "--dtype must be bf16, f16 or f32, got '%s'", arg);
			return -1;
		}
		return 1;
	}
	if (code == OPT_REPEAT) {
		if (cli_parse_u64("eval", "--repeat", arg, &p->repeat))
			return -1;
		if (p->repeat < 1 || p->repeat > 64) {
			cli_usage_error("eval", "--repeat must be 1..64, got '%s'", arg);
			return -1;
		}
		return 1;
	}
	return 0;
}

int cmd_eval(int argc, char **argv)
{
	static const int opts[] = {CLI_OPTS_CODEC, OPT_DTYPE, OPT_REPEAT, OPT_JSON, 0};
	const cli_spec_t sp = {"eval", help_eval, opts, "exactly one IN.npy", 1};
	cli_codec_opts_t co;
	cli_codec_opts_default(&co);
	eval_opts_t eo = {IBP_DTYPE_BYTES, 0};
	cli_args_t args = {.codec = &co, .other = eval_option, .ctx = &eo};
	int rc = cli_parse_args(&sp, &args, argc, argv);
	if (rc != CLI_PARSED)
		return rc;
	const char *cmd = sp.cmd, *in = args.operands[0];
	int as_json = args.json;
	ibp_dtype_t want = eo.want;
	uint64_t repeat = eo.repeat;
	if (cli_codec_check(cmd, &co) != EXIT_OK)
		return EXIT_USAGE;
	if (co.codec == IBP_CODEC_EXP_ROWS)
		return cli_usage_error(cmd, "--codec exp-rows has no in-memory form to evaluate (it is written "
				       "as a container): use `ibp pack --codec exp-rows`, then `ibp info` and "
				       "`ibp gather`");
	if ((rc = cli_check_input(cmd, in, 0)) != EXIT_OK)
		return rc;

	ibp_npy_info_t info;
	void *loaded = NULL;
	uint64_t nrows = 0, R = 0;
	/* --dtype bf16 reads '<u2'/'|V2' as bf16; other arrays load as they are
	 * and are converted below */
	unsigned npy_flags = 0;
	ibp_npy_info_t head;
	if (want == IBP_DTYPE_BF16 && ibp_npy_read_header(in, IBP_NPY_BF16, &head) == IBP_OK &&
	    head.dtype == IBP_DTYPE_BF16)
		npy_flags = IBP_NPY_BF16;
	rc = cli_load_rows(cmd, in, npy_flags, &info, &loaded, &nrows, &R);
	if (rc != EXIT_OK)
		return rc;
	ev_t e;
	memset(&e, 0, sizeof(e));
	e.id = co.codec;
	e.dt = info.dtype;
	e.data = loaded;
	uint8_t *converted = NULL;
	if (want != IBP_DTYPE_BYTES && want != info.dtype) {
		if (!is_float(info.dtype)) {
			rc = cli_fail(cmd, in, "--dtype %s needs a floating-point array, this one is '%s'",
				      ibp_dtype_name(want), info.descr);
			goto out;
		}
		converted = convert(loaded, info.dtype, want, info.count);
		if (!converted) {
			rc = cli_fail(cmd, NULL, "out of memory");
			goto out;
		}
		R = R / ibp_dtype_size(info.dtype) * ibp_dtype_size(want);
		e.dt = want;
		e.data = converted;
	}
	e.nrows = nrows;
	e.R = R;
	e.raw = nrows * R;
	e.elems = e.raw / ibp_dtype_size(e.dt);
	if (e.raw == 0) {
		rc = cli_fail(cmd, in, "the array is empty");
		goto out;
	}
	if (e.id != IBP_CODEC_IBP && !cli_value_dtype(e.dt)) {
		rc = cli_fail(cmd, in, "the %s codec takes bf16, f16 or f32 data, this array is '%s' (%s); bfloat16 "
			      "stored as '<u2' needs --dtype bf16", cli_codec_name(e.id), info.descr,
			      ibp_dtype_name(e.dt));
		goto out;
	}

	/* buffers, and for ibp the trained codec */
	ibp_status_t s = IBP_OK;
	e.dec = malloc(e.raw);
	if (e.id == IBP_CODEC_IBP) {
		s = ibp_codec_train(e.data, nrows, R, NULL, &e.codec);
		if (s != IBP_OK) {
			rc = cli_fail_status(cmd, in, s);
			goto out;
		}
		e.enc_cap = ibp_batch_bound(e.codec, nrows);
		e.offsets = malloc((nrows + 1) * sizeof(uint64_t));
		e.flags = malloc(nrows);
		if (ibp_codec_nclusters(e.codec) > 1)
			e.clusters = malloc(nrows);
	} else {
		e.chunk = ibp_block_rows_default(R / ibp_dtype_size(e.dt), nrows) * (R / ibp_dtype_size(e.dt));
		e.nblk = e.elems / e.chunk + (e.elems % e.chunk != 0);
		e.boff = malloc((e.nblk + 1) * sizeof(uint64_t));
		e.eo = co.exp;
		e.eo.nthreads = 1;
		e.fo = co.fp8;
		e.fo.nthreads = 1;
		if (e.id == IBP_CODEC_EXP) {
			s = ibp_exp_batch_bound(e.dt, e.elems, e.chunk, &e.enc_cap);
		} else {
			s = ibp_fp8_encoded_size(&e.fo, e.chunk, &e.stride);
			e.enc_cap = e.stride * e.nblk;
		}
		if (s != IBP_OK) {
			rc = cli_fail_status(cmd, in, s);
			goto out;
		}
	}
	e.enc = ibp_host_alloc(e.enc_cap, 128);
	if (!e.dec || !e.enc || (e.id == IBP_CODEC_IBP ? !e.offsets || !e.flags ||
							  (ibp_codec_nclusters(e.codec) > 1 && !e.clusters)
						: !e.boff)) {
		rc = cli_fail(cmd, NULL, "out of memory for %llu bytes", (unsigned long long)e.raw);
		goto out;
	}

	double t_enc = 0, t_dec = 0;
	s = timed(&e, ev_encode, repeat, &t_enc);
	if (s == IBP_OK)
		s = timed(&e, ev_decode, repeat, &t_dec);
	if (s != IBP_OK) {
		rc = cli_fail_status(cmd, in, s);
		goto out;
	}
	e.enc_bytes = ev_size(&e);

	/* errors, in double against the values that were encoded */
	double max_abs = 0, rel_l2 = 0;
	if (e.id != IBP_CODEC_FP8) {
		if (memcmp(e.dec, e.data, e.raw) != 0) {
			uint64_t i = 0;
			while (e.dec[i] == e.data[i])
				i++;
			rc = cli_fail(cmd, in, "%s round trip is not byte-exact: first difference at byte %llu (row %llu)",
				      cli_codec_name(e.id), (unsigned long long)i, (unsigned long long)(i / R));
			goto out;
		}
	} else {
		/* non-finite inputs have no error to speak of; a finite input
		 * that decodes to NaN/Inf makes both errors infinite */
		double err2 = 0, ref2 = 0;
		for (uint64_t i = 0; i < e.elems; i++) {
			double a = elem(e.data, e.dt, i), b = elem(e.dec, e.dt, i);
			if (!isfinite(a))
				continue;
			double d = isfinite(b) ? fabs(b - a) : INFINITY;
			if (d > max_abs)
				max_abs = d;
			err2 += d * d;
			ref2 += a * a;
		}
		rel_l2 = ref2 > 0 ? sqrt(err2) / sqrt(ref2) : (err2 > 0 ? INFINITY : 0);
	}

	double ratio = (double)e.raw / (double)e.enc_bytes;
	double enc_gbps = t_enc > 0 ? (double)e.raw / t_enc / 1e9 : 0;
	double dec_gbps = t_dec > 0 ? (double)e.raw / t_dec / 1e9 : 0;
	if (as_json) {
		json_t j;
		json_init(&j, stdout);
		json_begin_object(&j);
		json_kv_string(&j, "file", in);
		json_kv_string(&j, "codec", cli_codec_name(e.id));
		json_kv_string(&j, "dtype", ibp_dtype_name(e.dt));
		json_kv_uint(&j, "elements", e.elems);
		json_kv_uint(&j, "raw_bytes", e.raw);
		json_kv_uint(&j, "encoded_bytes", e.enc_bytes);
		json_kv_double(&j, "ratio", ratio);
		json_kv_double(&j, "encode_gbps", enc_gbps);
		json_kv_double(&j, "decode_gbps", dec_gbps);
		json_kv_double(&j, "max_abs_err", max_abs);
		json_kv_double(&j, "rel_l2_err", rel_l2);
		json_end_object(&j);
	} else {
		printf("codec=%s dtype=%s elements=%llu raw_bytes=%llu encoded_bytes=%llu ratio=%.4f "
		       "encode_gbps=%.3f decode_gbps=%.3f max_abs_err=%.6g rel_l2_err=%.6g\n",
		       cli_codec_name(e.id), ibp_dtype_name(e.dt), (unsigned long long)e.elems,
		       (unsigned long long)e.raw, (unsigned long long)e.enc_bytes, ratio, enc_gbps, dec_gbps, max_abs,
		       rel_l2);
	}
out:
	ibp_codec_free(e.codec);
	ibp_host_free(e.enc);
	free(e.dec);
	free(e.offsets);
	free(e.flags);
	free(e.clusters);
	free(e.boff);
	free(converted);
	ibp_npy_free(loaded);
	return rc;
}
