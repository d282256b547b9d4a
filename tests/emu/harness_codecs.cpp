/* harness_codecs.cpp - kernels/exp_codec.cu and kernels/fp8.cu, whole (their
 * host code chooses the launches, against the H100 runtime stub), on the
 * emulator, against the CPU codecs: encoded bytes and sizes, decoded values,
 * corrupt blocks reported through the device status word, and the FP8
 * conversion against an independent nearest-value conversion. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "ibp.h"
}
#include "k_exp.inc"
#include "k_fp8.inc"

int emu_codec_failures;
#define CCHECK(c, ...)                                                                 \
	do {                                                                           \
		emu_device_sync(); /* as a blocking copy back would (harness_check.h) */ \
		if (!(c)) {                                                            \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
			fprintf(stderr, __VA_ARGS__);                                  \
			fprintf(stderr, "\n");                                         \
			if (++emu_codec_failures > 20)                                 \
				exit(1);                                               \
		}                                                                      \
	} while (0)

static uint64_t cs = 1;
static uint64_t crnd()
{
	uint64_t z = (cs += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static double cunif() { return (double)(crnd() >> 11) / 9007199254740992.0; }

/* device buffer: emulator memory with redzones, poisoned */
struct Dev {
	uint8_t *p;
	size_t n;
	Dev(size_t n_, const char *name) : n(n_)
	{
		p = (uint8_t *)emu_dev_alloc(n, 0, name);
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)crnd();
	}
	~Dev() { emu_dev_free(p); }
	Dev(const Dev &) = delete;
};

static size_t esz(ibp_dtype_t dt) { return dt == IBP_DTYPE_F32 ? 4 : 2; }

static uint16_t to_half(float f, int bf)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (bf)
		return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
	/* f16 via the host's conversion */
	_Float16 h = (_Float16)f;
	uint16_t r;
	memcpy(&r, &h, 2);
	return r;
}

static void gen(ibp_dtype_t dt, uint8_t *p, uint64_t n, double sigma)
{
	for (uint64_t i = 0; i < n; i++) {
		double u = cunif(), v = cunif();
		float f = (float)(sqrt(-2.0 * log(u < 1e-300 ? 1e-300 : u)) * cos(6.283185307179586 * v) * sigma);
		uint64_t pick = crnd() % 500;
		if (pick == 0)
			f = NAN;
		else if (pick == 1)
			f = -INFINITY;
		else if (pick == 2)
			f = 0.0f;
		if (dt == IBP_DTYPE_F32) {
			memcpy(p + 4 * i, &f, 4);
		} else {
			uint16_t h = to_half(f, dt == IBP_DTYPE_BF16);
			memcpy(p + 2 * i, &h, 2);
		}
	}
}

static void exp_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, const ibp_exp_opts_t *osum)
{
	/* the device writes blocks without a checksum: compare with the CPU's */
	ibp_exp_opts_t plain = *osum;
	plain.checksum = 0;
	const ibp_exp_opts_t *o = &plain;
	const size_t es = esz(dt);
	const uint64_t nc = (n + chunk - 1) / chunk;
	std::vector<uint8_t> src(n * es + 1);
	gen(dt, src.data(), n, 0.02);
	if (nc > 2)
		for (uint64_t i = 0; i < chunk * es; i++)
			src[chunk * es + i] = (uint8_t)crnd(); /* chunk 1 goes raw */
	uint64_t cap = 0, stride = 0, ws = 0;
	CCHECK(ibp_exp_batch_bound(dt, n, chunk, &cap) == IBP_OK, "bound");
	std::vector<uint8_t> cpu(cap);
	std::vector<uint64_t> off(nc + 1);
	CCHECK(ibp_exp_encode_batch(src.data(), dt, n, chunk, o, cpu.data(), cap, off.data()) == IBP_OK, "cpu encode: %s",
	       ibp_last_error());
	CCHECK(ibp_exp_encode_bound(dt, chunk < n ? chunk : n, &stride) == IBP_OK, "bound");
	stride = (stride + 127) / 128 * 128;
	CCHECK(ibp_exp_encode_workspace_cuda(dt, n, chunk, &ws) == IBP_OK, "ws");
	Dev dsrc(n * es, "exp src"), ddst(nc * stride, "exp dst"), dws(ws, "exp workspace"), dsz(nc * 8, "exp sizes");
	memcpy(dsrc.p, src.data(), n * es);
	ibp_status_t st = ibp_exp_encode_cuda(dsrc.p, dt, n, chunk, o, ddst.p, stride, (uint64_t *)dsz.p, dws.p, ws, nullptr);
	CCHECK(st == IBP_OK, "exp_encode_cuda: %s", ibp_last_error());
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t gs = ((uint64_t *)dsz.p)[c];
		CCHECK(gs == off[c + 1] - off[c], "exp %s n %llu chunk %llu block %llu: size %llu vs CPU %llu",
		       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)chunk, (unsigned long long)c,
		       (unsigned long long)gs, (unsigned long long)(off[c + 1] - off[c]));
		if (gs == off[c + 1] - off[c])
			CCHECK(!memcmp(ddst.p + c * stride, &cpu[off[c]], gs), "exp %s n %llu block %llu: bytes differ",
			       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)c);
	}
	/* decode the CPU's packed blocks */
	Dev dblk(off[nc] ? off[nc] : 1, "exp blocks"), doff(nc * 8, "exp offsets"), dsizes(nc * 8, "exp block sizes"),
		dout(n * es, "exp out"), dstat(4, "exp status");
	memcpy(dblk.p, cpu.data(), off[nc]);
	memcpy(doff.p, off.data(), nc * 8);
	for (uint64_t c = 0; c < nc; c++)
		((uint64_t *)dsizes.p)[c] = off[c + 1] - off[c];
	st = ibp_exp_decode_cuda(dblk.p, off[nc], (uint64_t *)doff.p, (uint64_t *)dsizes.p, dt, n, chunk, dout.p,
				 (int32_t *)dstat.p, nullptr);
	CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_OK, "exp decode: %d status %d", st, *(int32_t *)dstat.p);
	CCHECK(!memcmp(dout.p, src.data(), n * es), "exp %s n %llu: decoded values differ", ibp_dtype_name(dt),
	       (unsigned long long)n);
	/* checksummed blocks (the CPU default) decode on the device too, and
	 * version-1 blocks (no flags) */
	{
		std::vector<uint8_t> sum(cap);
		std::vector<uint64_t> soff(nc + 1);
		CCHECK(ibp_exp_encode_batch(src.data(), dt, n, chunk, osum, sum.data(), cap, soff.data()) == IBP_OK,
		       "cpu encode (checksum)");
		CCHECK(soff == off, "exp: a checksum changed a block's size");
		for (uint64_t c = 0; c < nc && osum->checksum; c++)
			CCHECK(sum[soff[c] + 48] == 1 && memcmp(&sum[soff[c]], &cpu[off[c]], 48) == 0,
			       "exp: checksummed block %llu: flag or header", (unsigned long long)c);
		for (int v1 = 0; v1 < 2; v1++) {
			if (v1) { /* the unchecked blocks with version byte 1: the old format */
				memcpy(sum.data(), cpu.data(), off[nc]);
				for (uint64_t c = 0; c < nc; c++)
					sum[off[c] + 4] = 1;
			}
			memcpy(dblk.p, sum.data(), off[nc]);
			memset(dout.p, 0xA5, n * es);
			st = ibp_exp_decode_cuda(dblk.p, off[nc], (uint64_t *)doff.p, (uint64_t *)dsizes.p, dt, n, chunk,
						 dout.p, (int32_t *)dstat.p, nullptr);
			CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_OK && !memcmp(dout.p, src.data(), n * es),
			       "exp %s n %llu: %s blocks do not decode on the device (status %d)", ibp_dtype_name(dt),
			       (unsigned long long)n, v1 ? "version-1" : "checksummed", *(int32_t *)dstat.p);
		}
		memcpy(dblk.p, cpu.data(), off[nc]);
	}
	/* a block claimed past the buffer, and a flipped byte, are reported as the CPU decides */
	if (nc) {
		((uint64_t *)dsizes.p)[nc - 1] += 128;
		st = ibp_exp_decode_cuda(dblk.p, off[nc], (uint64_t *)doff.p, (uint64_t *)dsizes.p, dt, n, chunk, dout.p,
					 (int32_t *)dstat.p, nullptr);
		CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_ERR_CORRUPT, "exp: oversized block not reported");
		((uint64_t *)dsizes.p)[nc - 1] -= 128;
		uint64_t at = crnd() % off[1];
		dblk.p[at] ^= (uint8_t)(1 + crnd() % 255);
		st = ibp_exp_decode_cuda(dblk.p, off[nc], (uint64_t *)doff.p, (uint64_t *)dsizes.p, dt, n, chunk, dout.p,
					 (int32_t *)dstat.p, nullptr);
		std::vector<uint8_t> tmp(chunk * es + 8);
		ibp_status_t cst = ibp_exp_decode(dblk.p, off[1], dt, chunk < n ? chunk : n, tmp.data(), 1);
		CCHECK(st == IBP_OK && (*(int32_t *)dstat.p == IBP_OK) == (cst == IBP_OK),
		       "exp %s: flipped byte %llu: GPU status %d, CPU %d", ibp_dtype_name(dt), (unsigned long long)at,
		       *(int32_t *)dstat.p, cst);
	}
}

/* rANS blocks (table mode RANS, block mode 2; the device decodes them and
 * encodes none): a batch of CPU-encoded blocks, every `mix`-th chunk coded
 * with the histogram table instead and chunk 2 random (raw), decoded by the
 * kernels byte for byte as the CPU decodes it; then damaged blocks, each
 * refused exactly where the CPU refuses it. */
static uint32_t exp_rans_decode_dev(Dev &dblk, uint64_t bytes, Dev &doff, Dev &dsizes, ibp_dtype_t dt, uint64_t n,
				    uint64_t chunk, Dev &dout, Dev &dstat)
{
	ibp_status_t st = ibp_exp_decode_cuda(dblk.p, bytes, (uint64_t *)doff.p, (uint64_t *)dsizes.p, dt, n, chunk,
					      dout.p, (int32_t *)dstat.p, nullptr);
	CCHECK(st == IBP_OK, "exp rans: decode_cuda returned %d: %s", st, ibp_last_error());
	emu_device_sync();
	return (uint32_t)*(int32_t *)dstat.p;
}

static void exp_rans_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, int mix, int flips)
{
	const size_t es = esz(dt);
	const uint64_t nc = (n + chunk - 1) / chunk;
	std::vector<uint8_t> src(n * es + 1);
	gen(dt, src.data(), n, 0.02);
	if (nc > 2)
		for (uint64_t i = 0; i < chunk * es && 2 * chunk + i / es < n; i++)
			src[2 * chunk * es + i] = (uint8_t)crnd(); /* chunk 2 goes raw */
	uint64_t cap = 0;
	CCHECK(ibp_exp_encode_bound(dt, chunk < n ? chunk : n, &cap) == IBP_OK, "bound");
	std::vector<uint8_t> cpu(nc * cap);
	std::vector<uint64_t> off(nc + 1, 0);
	std::vector<int> rans(nc, 0);
	int nrans = 0;
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk, size = 0;
		ibp_exp_opts_t o;
		ibp_exp_opts_default(&o);
		o.nthreads = 1;
		o.checksum = 0; /* the device does not verify one: damage must reach the codec's checks */
		o.table_mode = mix && c % mix == 1 ? IBP_EXP_TABLE_HISTOGRAM : IBP_EXP_TABLE_RANS;
		CCHECK(ibp_exp_encode(src.data() + c * chunk * es, dt, len, &o, &cpu[off[c]], cap, &size) == IBP_OK,
		       "exp rans: cpu encode: %s", ibp_last_error());
		rans[c] = cpu[off[c] + 6] == 2;
		nrans += rans[c];
		off[c + 1] = off[c] + size;
	}
	CCHECK(nrans > 0, "exp rans %s n %llu: the CPU made no rANS block", ibp_dtype_name(dt), (unsigned long long)n);
	/* the CPU's decode of each block: the reference */
	auto cpu_decode = [&](const uint8_t *blk, std::vector<uint8_t> &out, std::vector<int> &okc) {
		out.assign(n * es, 0);
		okc.assign(nc, 0);
		for (uint64_t c = 0; c < nc; c++) {
			uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
			okc[c] = ibp_exp_decode(blk + off[c], off[c + 1] - off[c], dt, len, out.data() + c * chunk * es, 1) ==
				 IBP_OK;
		}
	};
	std::vector<uint8_t> ref;
	std::vector<int> okc;
	cpu_decode(cpu.data(), ref, okc);
	CCHECK(!memcmp(ref.data(), src.data(), n * es), "exp rans: the CPU round trip differs");
	Dev dblk(off[nc], "exp rans blocks"), doff(nc * 8, "exp rans offsets"), dsizes(nc * 8, "exp rans sizes"),
		dout(n * es, "exp rans out"), dstat(4, "exp rans status");
	memcpy(dblk.p, cpu.data(), off[nc]);
	memcpy(doff.p, off.data(), nc * 8);
	for (uint64_t c = 0; c < nc; c++)
		((uint64_t *)dsizes.p)[c] = off[c + 1] - off[c];
	uint32_t gs = exp_rans_decode_dev(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dstat);
	CCHECK(gs == IBP_OK && !memcmp(dout.p, ref.data(), n * es), "exp rans %s n %llu chunk %llu: status %d or values differ",
	       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)chunk, (int)gs);
	/* the same blocks with a checksum (the CPU default; the device does not verify it) decode too */
	{
		std::vector<uint8_t> sum(off[nc]);
		for (uint64_t c = 0; c < nc; c++) {
			uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk, size = 0;
			ibp_exp_opts_t o;
			ibp_exp_opts_default(&o);
			o.nthreads = 1;
			o.checksum = 1;
			o.table_mode = mix && c % mix == 1 ? IBP_EXP_TABLE_HISTOGRAM : IBP_EXP_TABLE_RANS;
			std::vector<uint8_t> one(cap);
			CCHECK(ibp_exp_encode(src.data() + c * chunk * es, dt, len, &o, one.data(), cap, &size) == IBP_OK &&
				       size == off[c + 1] - off[c] && one[48] == 1,
			       "exp rans: checksummed block %llu", (unsigned long long)c);
			memcpy(&sum[off[c]], one.data(), off[c + 1] - off[c]);
		}
		memcpy(dblk.p, sum.data(), off[nc]);
		memset(dout.p, 0xA5, n * es);
		gs = exp_rans_decode_dev(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dstat);
		CCHECK(gs == IBP_OK && !memcmp(dout.p, ref.data(), n * es), "exp rans %s n %llu: checksummed blocks: status %d",
		       ibp_dtype_name(dt), (unsigned long long)n, (int)gs);
		memcpy(dblk.p, cpu.data(), off[nc]);
	}
	/* damage the first rANS block; the GPU refuses iff the CPU does */
	uint64_t c0 = 0;
	while (c0 < nc && !rans[c0])
		c0++;
	if (c0 == nc)
		return;
	const uint64_t b0 = off[c0], bsz = off[c0 + 1] - off[c0];
	const uint8_t *h = &cpu[b0];
	uint64_t stat = 0, streams = 0;
	memcpy(&stat, h + 40, 8);
	memcpy(&streams, h + 24, 8);
	uint64_t nsym = 0;
	for (int i = 0; i < 32; i++)
		nsym += (uint64_t)__builtin_popcount(h[64 + i]);
	const uint64_t dir = (96 + 2 * nsym + 7) / 8 * 8;
	std::vector<uint64_t> at;
	at.push_back(b0 + stat + 6);                 /* segment 0, lane 0's stream, past its state */
	at.push_back(b0 + stat + 1);                 /* lane 0's initial state */
	at.push_back(b0 + stat + streams - 1);       /* the last lane's last word */
	at.push_back(b0 + 96);                       /* the first frequency */
	at.push_back(b0 + 64 + crnd() % 32);         /* the symbol map */
	at.push_back(b0 + dir + 8 + 2 * (crnd() % 16)); /* a lane length of segment 0 */
	at.push_back(b0 + dir + crnd() % 8);         /* segment 0's stream end */
	at.push_back(b0 + stat + streams);           /* the padding after the streams (if any) */
	at.push_back(b0 + 16);                       /* the lane count */
	at.push_back(b0 + 24);                       /* the stream bytes */
	at.push_back(b0 + 4);                        /* the version */
	at.push_back(b0 + 7);                        /* the table source */
	for (int k = 0; k < flips; k++)
		at.push_back(b0 + crnd() % bsz);
	for (size_t k = 0; k < at.size(); k++) {
		if (at[k] >= off[c0 + 1])
			continue;
		std::vector<uint8_t> bad = cpu;
		/* the frequency: one more or less, so the sum is off; else a flip */
		bad[at[k]] = k == 3 ? (uint8_t)(bad[at[k]] + (crnd() % 2 ? 1 : 255)) : (uint8_t)(bad[at[k]] ^ (1 + crnd() % 255));
		std::vector<uint8_t> bref;
		std::vector<int> bok;
		cpu_decode(bad.data(), bref, bok);
		memcpy(dblk.p, bad.data(), off[nc]);
		memset(dout.p, 0xA5, n * es);
		gs = exp_rans_decode_dev(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dstat);
		int cpu_ok = 1;
		for (uint64_t c = 0; c < nc; c++)
			cpu_ok &= bok[c];
		CCHECK((gs == IBP_OK) == (cpu_ok != 0) && (gs != IBP_OK || !memcmp(dout.p, bref.data(), n * es)),
		       "exp rans %s n %llu: damaged byte %llu of block %llu: GPU status %d, CPU %s",
		       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)(at[k] - b0), (unsigned long long)c0,
		       (int)gs, cpu_ok ? "decodes" : "refuses");
		CCHECK(gs == IBP_OK || gs == (uint32_t)IBP_ERR_CORRUPT, "exp rans: status %d", (int)gs);
	}
	memcpy(dblk.p, cpu.data(), off[nc]);
	/* truncated: the block claimed past what is available */
	((uint64_t *)dsizes.p)[c0] -= 128;
	gs = exp_rans_decode_dev(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dstat);
	CCHECK(gs == (uint32_t)IBP_ERR_CORRUPT, "exp rans: a truncated rANS block not reported (status %d)", (int)gs);
	((uint64_t *)dsizes.p)[c0] += 128;
}

/* The device's rANS encode (table mode RANS): sizes and bytes equal to
 * ibp_exp_encode_batch's for the same chunks (so the per-block choice of
 * rANS or the HISTOGRAM block, raw included, and the frequencies), then the
 * blocks decoded back by the CPU and by the device. kind: 0 Gaussian (with
 * NaN, -Inf, 0), 1 the same with 5% NaN/Inf/subnormal/-0 of both signs, 2
 * one constant value, 3 random bits (the fallback wins), 4 one exponent
 * (one symbol, random mantissas), 5 chunk c of kind c % 5. */
static void gen_kind(ibp_dtype_t dt, uint8_t *p, uint64_t n, int kind)
{
	const size_t es = esz(dt);
	const uint32_t ebits = dt == IBP_DTYPE_F16 ? 5 : 8, mbits = dt == IBP_DTYPE_F32 ? 23 : dt == IBP_DTYPE_F16 ? 10 : 7;
	const uint32_t emax = (1u << ebits) - 1u, fixed = (uint32_t)crnd();
	if (kind == 0 || kind == 1)
		gen(dt, p, n, 0.02);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t r = (uint32_t)crnd(), sign = (r >> 31) << (es * 8 - 1), man = (r >> 3) & ((1u << mbits) - 1u), v;
		if (kind == 1) {
			if (crnd() % 20)
				continue;
			switch (r % 5) {
			case 0: v = sign | emax << mbits | (man | 1u); break; /* NaN */
			case 1: v = sign | emax << mbits; break;           /* +-Inf */
			case 2: v = sign | (man | 1u); break;               /* subnormal */
			case 3: v = 1u << (es * 8 - 1); break;              /* -0 */
			default: v = sign | (r % emax) << mbits | man; break;
			}
		} else if (kind == 2) {
			v = fixed;
		} else if (kind == 3) {
			v = r;
		} else if (kind == 4) {
			v = sign | ((fixed >> 8) % emax) << mbits | man;
		} else {
			continue;
		}
		memcpy(p + i * es, &v, es); /* little-endian low bytes */
	}
}

static void exp_rans_enc_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, int kind)
{
	const size_t es = esz(dt);
	const uint64_t nc = (n + chunk - 1) / chunk;
	std::vector<uint8_t> src(n * es + 1);
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
		gen_kind(dt, src.data() + c * chunk * es, len, kind == 5 ? (int)(c % 5) : kind);
	}
	ibp_exp_opts_t o;
	ibp_exp_opts_default(&o);
	o.nthreads = 1;
	o.checksum = 0; /* the device writes none */
	o.table_mode = IBP_EXP_TABLE_RANS;
	uint64_t cap = 0, stride = 0, ws = 0;
	CCHECK(ibp_exp_batch_bound(dt, n, chunk, &cap) == IBP_OK, "bound");
	std::vector<uint8_t> cpu(cap);
	std::vector<uint64_t> off(nc + 1);
	CCHECK(ibp_exp_encode_batch(src.data(), dt, n, chunk, &o, cpu.data(), cap, off.data()) == IBP_OK,
	       "exp rans enc: cpu encode: %s", ibp_last_error());
	CCHECK(ibp_exp_encode_bound(dt, chunk < n ? chunk : n, &stride) == IBP_OK, "bound");
	stride = (stride + 127) / 128 * 128;
	CCHECK(ibp_exp_encode_workspace_cuda(dt, n, chunk, &ws) == IBP_OK, "ws");
	Dev dsrc(n * es, "exp rans enc src"), ddst(nc * stride, "exp rans enc dst"), dws(ws, "exp rans enc workspace"),
		dsz(nc * 8, "exp rans enc sizes");
	memcpy(dsrc.p, src.data(), n * es);
	ibp_status_t st = ibp_exp_encode_cuda(dsrc.p, dt, n, chunk, &o, ddst.p, stride, (uint64_t *)dsz.p, dws.p, ws,
					      nullptr);
	CCHECK(st == IBP_OK, "exp rans enc: exp_encode_cuda: %s", ibp_last_error());
	emu_device_sync();
	int nrans = 0, nother = 0, same = 1;
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t gs = ((uint64_t *)dsz.p)[c], cs_ = off[c + 1] - off[c];
		bool eq = gs == cs_ && !memcmp(ddst.p + c * stride, &cpu[off[c]], cs_);
		same &= eq;
		CCHECK(eq, "exp rans enc %s n %llu chunk %llu kind %d block %llu (mode %d): GPU size %llu, CPU %llu, bytes %s",
		       ibp_dtype_name(dt), (unsigned long long)n, (unsigned long long)chunk, kind, (unsigned long long)c,
		       cpu[off[c] + 6], (unsigned long long)gs, (unsigned long long)cs_, gs == cs_ ? "differ" : "-");
		/* the data kinds reach both outcomes (tiny blocks stay small raw) */
		int k = kind == 5 ? (int)(c % 5) : kind, r = cpu[off[c] + 6] == 2;
		uint64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
		CCHECK(r == (k == 3 ? 0 : k == 1 ? r : len >= 4096 ? 1 : r),
		       "exp rans enc %s n %llu kind %d: block %llu of kind %d is %s rANS block", ibp_dtype_name(dt),
		       (unsigned long long)n, kind, (unsigned long long)c, k, r ? "a" : "no");
		(r ? nrans : nother)++;
	}
	if (!same)
		return;
	/* the device's blocks, packed, decode to the input on the CPU and on the device */
	std::vector<uint8_t> out(n * es + 1, 0xA5);
	CCHECK(ibp_exp_decode_batch(cpu.data(), off[nc], off.data(), dt, n, chunk, out.data(), 1) == IBP_OK &&
		       !memcmp(out.data(), src.data(), n * es),
	       "exp rans enc %s n %llu: the CPU decode differs: %s", ibp_dtype_name(dt), (unsigned long long)n,
	       ibp_last_error());
	Dev dblk(off[nc], "exp rans enc blocks"), doff(nc * 8, "exp rans enc offsets"),
		dsizes(nc * 8, "exp rans enc block sizes"), dout(n * es, "exp rans enc out"), dstat(4, "exp rans enc status");
	for (uint64_t c = 0; c < nc; c++)
		memcpy(dblk.p + off[c], ddst.p + c * stride, off[c + 1] - off[c]);
	memcpy(doff.p, off.data(), nc * 8);
	for (uint64_t c = 0; c < nc; c++)
		((uint64_t *)dsizes.p)[c] = off[c + 1] - off[c];
	uint32_t gst = exp_rans_decode_dev(dblk, off[nc], doff, dsizes, dt, n, chunk, dout, dstat);
	CCHECK(gst == IBP_OK && !memcmp(dout.p, src.data(), n * es),
	       "exp rans enc %s n %llu chunk %llu kind %d: device decode status %d or values differ", ibp_dtype_name(dt),
	       (unsigned long long)n, (unsigned long long)chunk, kind, (int)gst);
}

static void fp8_case(ibp_dtype_t dt, uint64_t n, uint64_t chunk, uint32_t B, int v, double sigma)
{
	const size_t es = esz(dt);
	const uint64_t ch = chunk ? chunk : (n ? n : 1), nc = n ? (n + ch - 1) / ch : 1;
	ibp_fp8_opts_t o;
	ibp_fp8_opts_default(&o);
	o.checksum = 0; /* the device writes streams without one */
	o.block = B;
	o.format = (ibp_fp8_format_t)(v & 1);
	o.hadamard = v != 2;
	o.adaptive = v != 3;
	std::vector<uint8_t> src(n * es + 4);
	gen(dt, src.data(), n, sigma);
	uint64_t stride = 0;
	CCHECK(ibp_fp8_encoded_size(&o, n < ch ? n : ch, &stride) == IBP_OK, "size");
	std::vector<uint8_t> cpu(nc * stride);
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t len = n ? (n - c * ch < ch ? n - c * ch : ch) : 0, size = 0;
		CCHECK(ibp_fp8_encode(src.data() + c * ch * es, dt, len, &o, &cpu[c * stride], stride, &size) == IBP_OK,
		       "cpu fp8");
	}
	Dev dsrc(n * es + 4, "fp8 src"), ddst(nc * stride, "fp8 streams"), dout(n * es + 4, "fp8 out"), dstat(4, "fp8 status");
	memcpy(dsrc.p, src.data(), n * es);
	ibp_status_t st = ibp_fp8_encode_cuda(dsrc.p, dt, n, chunk, &o, ddst.p, nullptr);
	CCHECK(st == IBP_OK, "fp8_encode_cuda: %s", ibp_last_error());
	for (uint64_t c = 0; c < nc; c++) {
		uint64_t len = n ? (n - c * ch < ch ? n - c * ch : ch) : 0, sz = 0;
		ibp_fp8_encoded_size(&o, len, &sz);
		CCHECK(!memcmp(&cpu[c * stride], ddst.p + c * stride, sz), "fp8 %s n %llu B %u variant %d chunk %llu: bytes differ",
		       ibp_dtype_name(dt), (unsigned long long)n, B, v, (unsigned long long)c);
	}
	/* the source exactly as long as the streams (the last one shorter than
	 * its stride): decoded from it, and refused one byte shorter without a
	 * read past it (the emulator's redzone; defect 25 drops the check) */
	uint64_t last = 0;
	ibp_fp8_encoded_size(&o, n ? n - (nc - 1) * ch : 0, &last);
	const uint64_t need = (nc - 1) * stride + last;
	Dev exact(need, "fp8 streams, exact"), shorter(need - 1, "fp8 streams, one byte short");
	memcpy(exact.p, ddst.p, need);
	memcpy(shorter.p, ddst.p, need - 1);
	st = ibp_fp8_decode_bounded_cuda(exact.p, need, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p, nullptr);
	CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_OK, "fp8 decode %d status %d", st, *(int32_t *)dstat.p);
	std::vector<uint8_t> co(n * es + 4);
	for (uint64_t c = 0; c < nc && n; c++) {
		uint64_t len = n - c * ch < ch ? n - c * ch : ch;
		CCHECK(ibp_fp8_decode(&cpu[c * stride], stride, dt, len, &co[c * ch * es], 1) == IBP_OK, "cpu decode");
	}
	CCHECK(!memcmp(dout.p, co.data(), n * es), "fp8 %s n %llu B %u variant %d: decoded values differ",
	       ibp_dtype_name(dt), (unsigned long long)n, B, v);
	*(int32_t *)dstat.p = 12345;
	st = ibp_fp8_decode_bounded_cuda(shorter.p, need - 1, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p, nullptr);
	CCHECK(st == IBP_ERR_CORRUPT && *(int32_t *)dstat.p == 12345,
	       "fp8 decode of a source one byte short: %d (status %d), want IBP_ERR_CORRUPT before any launch", st,
	       *(int32_t *)dstat.p);
	/* the deprecated entry point: the streams' own size, as before */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	st = ibp_fp8_decode_cuda(exact.p, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p, nullptr);
#pragma GCC diagnostic pop
	CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_OK && !memcmp(dout.p, co.data(), n * es),
	       "fp8 deprecated decode %d status %d", st, *(int32_t *)dstat.p);
	/* checksummed streams (the CPU default) decode on the device too */
	{
		ibp_fp8_opts_t os = o;
		os.checksum = 1;
		Dev dsum(nc * stride, "fp8 checksummed streams");
		for (uint64_t c = 0; c < nc; c++) {
			uint64_t len = n ? (n - c * ch < ch ? n - c * ch : ch) : 0, size = 0;
			CCHECK(ibp_fp8_encode(src.data() + c * ch * es, dt, len, &os, dsum.p + c * stride, stride, &size) ==
				       IBP_OK && (dsum.p[6] & 4),
			       "cpu fp8 (checksum)");
		}
		memset(dout.p, 0xA5, n * es);
		st = ibp_fp8_decode_bounded_cuda(dsum.p, nc * stride, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p,
						 nullptr);
		CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_OK && !memcmp(dout.p, co.data(), n * es),
		       "fp8: checksummed streams do not decode on the device (status %d)", *(int32_t *)dstat.p);
	}
	/* a reserved header byte (17..63) of the last chunk: block 0 reports it */
	{
		uint8_t *h = ddst.p + (nc - 1) * stride;
		const unsigned at = 17 + (unsigned)(crnd() % (TACO_OFF_SUM - 17));
		const uint8_t keep = h[at];
		h[at] = (uint8_t)(1 + crnd() % 255);
		st = ibp_fp8_decode_bounded_cuda(ddst.p, nc * stride, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p,
						 nullptr);
		CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_ERR_CORRUPT,
		       "fp8: a reserved header byte (%u) not reported", at);
		h[at] = keep;
	}
	ddst.p[4] = 9; /* version */
	st = ibp_fp8_decode_bounded_cuda(ddst.p, nc * stride, dt, n, chunk, &o, dout.p, (int32_t *)dstat.p, nullptr);
	CCHECK(st == IBP_OK && *(int32_t *)dstat.p == IBP_ERR_CORRUPT, "fp8: corrupt header not reported");
}

static void fp8_convert_check(uint64_t n)
{
	std::vector<float> src(n);
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)crnd();
		if (i % 4 == 0) /* the interesting range: near FP8 values */
			u = (u & 0x807fffffu) | ((uint32_t)(100 + crnd() % 60) << 23);
		memcpy(&src[i], &u, 4);
	}
	for (int fmt = 0; fmt < 2; fmt++) {
		Dev ds(n * 4, "convert src"), dd(n, "convert dst"), dx(n * 4, "expand dst");
		memcpy(ds.p, src.data(), n * 4);
		CCHECK(ibp_fp8_convert_cuda((float *)ds.p, n, (ibp_fp8_format_t)fmt, dd.p, nullptr) == IBP_OK, "convert");
		std::vector<uint8_t> cpu(n);
		ibp_fp8_convert(src.data(), n, (ibp_fp8_format_t)fmt, cpu.data());
		for (uint64_t i = 0; i < n; i++)
			CCHECK(dd.p[i] == cpu[i], "fp8 convert fmt %d: %a -> %02x (device model), CPU %02x", fmt, src[i], dd.p[i],
			       cpu[i]);
		CCHECK(ibp_fp8_expand_cuda(dd.p, n, (ibp_fp8_format_t)fmt, (float *)dx.p, nullptr) == IBP_OK, "expand");
		std::vector<float> back(n);
		ibp_fp8_expand(dd.p, n, (ibp_fp8_format_t)fmt, back.data());
		CCHECK(!memcmp(back.data(), dx.p, n * 4), "fp8 expand fmt %d differs", fmt);
	}
}

int emu_codecs_main(uint64_t seed, int quick, const char *which)
{
	cs = seed;
	const bool do_exp = !strcmp(which, "exp") || !strcmp(which, "codecs");
	const bool do_fp8 = !strcmp(which, "fp8") || !strcmp(which, "codecs");
	static const ibp_dtype_t dts[3] = { IBP_DTYPE_BF16, IBP_DTYPE_F16, IBP_DTYPE_F32 };
	if (do_exp) {
		static const uint64_t shapes[][2] = { { 1, 1 }, { 100, 100 }, { 5000, 5000 }, { 9000, 4096 }, { 12288, 4000 } };
		const int nshape = quick ? 4 : 5;
		for (int d = 0; d < 3; d++)
			for (int s = 0; s < nshape; s++)
				for (int m = 0; m < 3; m++) {
					ibp_exp_opts_t o;
					ibp_exp_opts_default(&o);
					o.nthreads = 1;
					o.table_mode = (ibp_exp_table_mode_t)m;
					if (m == 2)
						for (int k = 0; k < 7; k++)
							o.table.field[k] = (uint8_t)((dts[d] == IBP_DTYPE_F16 ? 8 : 115) + 2 * k);
					if (m == 0 && s % 2)
						o.sigma = 0.05;
					if (quick && (d + s + m) % 2)
						continue;
					fprintf(stderr, "exp %s n %llu chunk %llu table %d\n", ibp_dtype_name(dts[d]),
						(unsigned long long)shapes[s][0], (unsigned long long)shapes[s][1], m);
					exp_case(dts[d], shapes[s][0], shapes[s][1], &o);
				}
		/* rANS blocks: one segment, two (> 65,536 elements), batches mixing rANS, table and raw blocks */
		static const uint64_t rshapes[][3] = { { 5000, 5000, 0 }, { 70000, 70000, 0 }, { 30000, 7000, 2 },
						       { 140000, 131077, 0 }, { 200000, 66000, 2 } };
		for (int d = 0; d < 3; d++)
			for (int s = 0; s < (quick ? 3 : 5); s++) {
				fprintf(stderr, "exp rans %s n %llu chunk %llu mix %llu\n", ibp_dtype_name(dts[d]),
					(unsigned long long)rshapes[s][0], (unsigned long long)rshapes[s][1],
					(unsigned long long)rshapes[s][2]);
				exp_rans_case(dts[d], rshapes[s][0], rshapes[s][1], (int)rshapes[s][2], quick ? 4 : 12);
			}
		/* the device's rANS encode: a few elements to > 200,000, one to many
		 * segments and chunks, every data kind */
		static const uint64_t eshapes[][3] = { { 1, 1, 2 }, { 7, 3, 5 }, { 100, 100, 1 }, { 5000, 1000, 5 },
						       { 70000, 70000, 0 }, { 30000, 7000, 5 }, { 140000, 65536, 1 },
						       { 210000, 131077, 5 }, { 200000, 200000, 3 }, { 66000, 66000, 4 },
						       { 65537, 1u << 20, 0 }, { 3000, 1000000, 4 } };
		for (int d = 0; d < 3; d++)
			for (int s = 0; s < 12; s++) {
				if (quick && (s + d) % 2 && s != 7)
					continue;
				fprintf(stderr, "exp rans encode %s n %llu chunk %llu kind %llu\n", ibp_dtype_name(dts[d]),
					(unsigned long long)eshapes[s][0], (unsigned long long)eshapes[s][1],
					(unsigned long long)eshapes[s][2]);
				exp_rans_enc_case(dts[d], eshapes[s][0], eshapes[s][1], (int)eshapes[s][2]);
			}
	}
	if (do_fp8) {
		fp8_convert_check(quick ? 2000 : 20000);
		static const uint64_t shapes[][2] = { { 0, 0 }, { 1, 0 }, { 700, 0 }, { 3000, 1000 }, { 5000, 4096 } };
		for (int d = 0; d < 3; d++)
			for (int s = 0; s < 5; s++)
				for (uint32_t B = 16; B <= 4096; B *= 4)
					for (int v = 0; v < 4; v++) {
						if (quick && (d + s + v + B / 16) % 3)
							continue;
						if (B == 4096 && shapes[s][0] < 1000 && s > 1)
							continue;
						fprintf(stderr, "fp8 %s n %llu chunk %llu B %u variant %d\n", ibp_dtype_name(dts[d]),
							(unsigned long long)shapes[s][0], (unsigned long long)shapes[s][1], B, v);
						fp8_case(dts[d], shapes[s][0], shapes[s][1], B, v, s % 2 ? 1e-3 : 30.0);
					}
	}
	return emu_codec_failures;
}
