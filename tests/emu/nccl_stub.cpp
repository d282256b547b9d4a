/* nccl_stub.cpp - an in-process stand-in for NCCL (stub/nccl.h), so that
 * the NCCL transport (src/coll/transport_nccl.c) and the native NCCL
 * collectives run in the emulator. Ranks are host threads, one emulated
 * device each (cudaSetDevice). What it keeps of NCCL, as documented:
 * - operations are stream work: a call returns once the operation is
 *   queued; the operation starts in stream order and completes only when
 *   every peer's matching operation has started too (send with receive in
 *   issue order per pair of ranks, collectives in issue order per
 *   communicator), so a host that blocks on it without a deadline while
 *   a peer is elsewhere is reported as a hang (emu.cpp);
 * - group calls (ncclGroupStart/End, per thread, nested) merge the
 *   point-to-point operations of a communicator and stream into one;
 * - non-blocking communicators (config.blocking = 0): ncclCommSplit,
 *   ncclGroupEnd, collectives and ncclCommFinalize may answer
 *   ncclInProgress; the operation is then queued only when
 *   ncclCommGetAsyncError answers ncclSuccess, and a stream used before
 *   that is reported (EMU ERROR nccl);
 * - ncclCommAbort ends the communicator's operations (no data moves);
 *   peers' matching operations wait on, as NCCL's kernels would;
 * - errors: NULL or out-of-range arguments answer ncclInvalidArgument,
 *   a receive shorter than its send ncclInvalidUsage (async); a
 *   communicator used after ncclCommDestroy/Abort is reported.
 * Tests plant failures with emu_nccl_plant. Accesses of the operations
 * (their buffers, read and written when they complete) are checked by the
 * emulator as those of stream work. */
#include "emu.h"
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

extern "C" {
#include "ibp.h"
#include "coll/coll_mem.h"
}

emu_stream *emu_stub_stream(cudaStream_t s);

[[noreturn]] static void nccl_fatal(const std::string &m)
{
	fflush(stdout);
	fprintf(stderr, "EMU ERROR (nccl): %s\n", m.c_str());
	fflush(stderr);
	_exit(3);
}

static std::mutex nm; /* all of the stand-in's state (the emulator's lock may be held outside it, never inside) */
/* nm held, the thread's accesses unchecked: a checked access takes the
 * emulator's lock (instrumented inline code, std::string's, may run here) */
struct NM {
	NM()
	{
		emu_nocheck(1);
		nm.lock();
	}
	~NM()
	{
		nm.unlock();
		emu_nocheck(-1);
	}
	NM(const NM &) = delete;
};

struct Group;
struct NOp;
struct ncclComm {
	std::shared_ptr<Group> g; /* null while its split is pending */
	int rank = -1, n = 0, dev = 0, blocking = 1;
	ncclResult_t async = ncclSuccess, sticky = ncclSuccess; /* sticky: a planted asynchronous failure */
	bool aborted = false, freed = false, finalizing = false;
	std::string last;
	uint64_t splits = 0;
	std::vector<NOp *> ops;
	/* a non-blocking call that answered ncclInProgress: queued at the next ncclCommGetAsyncError */
	std::vector<std::pair<NOp *, emu_stream *>> deferred;
	std::vector<uint32_t> deferred_issued;
};
static std::vector<ncclComm *> all_comms; /* never freed: operations may outlive their communicator */

struct Pair { /* a send and its receive */
	NOp *send = nullptr, *recv = nullptr;
	const void *sbuf = nullptr;
	void *rbuf = nullptr;
	size_t sbytes = 0, rcap = 0;
	bool moved = false;
};
enum { K_AG, K_RS, K_AR };
struct Slot { /* one collective: every rank's part */
	std::vector<NOp *> ops;
	bool done = false;
};
struct Split {
	struct A {
		int color, key;
		ncclComm *nc;
		bool set;
	};
	std::vector<A> at;
	int arrived = 0;
};
struct Group {
	int n;
	std::vector<ncclComm *> comms;
	std::map<std::tuple<int, int, uint64_t>, std::shared_ptr<Pair>> pairs;
	std::vector<uint64_t> sent, received; /* [src * n + dst] */
	std::vector<uint64_t> colls;          /* per rank */
	std::map<uint64_t, std::shared_ptr<Slot>> slots;
	std::map<uint64_t, Split> splits;
};

struct P2p {
	bool send;
	int peer;
	const void *sbuf; /* a send's */
	void *rbuf;       /* a receive's */
	size_t bytes;     /* a send's size, a receive's capacity */
	std::shared_ptr<Pair> pair;
};
struct NOp : emu_ext_op {
	ncclComm *c;
	std::shared_ptr<Group> g;
	std::vector<P2p> p2p;
	/* a collective */
	int kind = -1;
	const void *sbuf = nullptr;
	void *rbuf = nullptr;
	size_t count = 0;
	ncclDataType_t dt = ncclUint8;
	std::shared_ptr<Slot> slot;
	int state = 0; /* 0 queued, 1 started, 2 done */
	const void *site = nullptr;

	void start() override
	{
		NM l;
		state = 1;
	}
	/* a peer's operation has started (an aborted one never moves data) */
	static bool there(const NOp *o) { return o && o->state >= 1 && !o->c->aborted; }
	bool ready() override
	{
		NM l;
		if (c->aborted)
			return true; /* NCCL's kernels end */
		if (c->sticky != ncclSuccess)
			return false; /* a failed connection: waits until aborted */
		for (const P2p &p : p2p)
			if (!p.pair->moved && !there(p.send ? p.pair->recv : p.pair->send))
				return false;
		if (slot && !slot->done) {
			if ((int)slot->ops.size() < g->n)
				return false;
			for (const NOp *o : slot->ops)
				if (!there(o))
					return false;
		}
		return true;
	}
	void complete() override;
	std::string waits_for() override
	{
		NM l;
		std::string m = "rank " + std::to_string(c->rank) + " of an NCCL communicator of " + std::to_string(g->n) + ":";
		for (const P2p &p : p2p)
			if (!p.pair->moved && !there(p.send ? p.pair->recv : p.pair->send))
				m += std::string(" its ") + (p.send ? "ncclSend to" : "ncclRecv from") + " rank " +
				     std::to_string(p.peer) + " (the matching " + (p.send ? "ncclRecv" : "ncclSend") +
				     " has not started)";
		if (slot && !slot->done)
			for (int r = 0; r < g->n; r++)
				if (r >= (int)slot->ops.size() || !there(slot->ops[r]))
					m += " its collective waits for rank " + std::to_string(r);
		if (c->sticky != ncclSuccess)
			m += " (a planted connection failure)";
		return m;
	}
};

static size_t tsize(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	default: return 8;
	}
}

static ibp_dtype_t idtype(ncclDataType_t t)
{
	switch (t) {
	case ncclFloat16: return IBP_DTYPE_F16;
	case ncclBfloat16: return IBP_DTYPE_BF16;
	case ncclFloat32: return IBP_DTYPE_F32;
	default: return IBP_DTYPE_U8;
	}
}

/* acc += x, element type t (the floating types rounded at each step, as a ring does) */
static void add_into(std::vector<uint8_t> &acc, const uint8_t *x, size_t count, ncclDataType_t t)
{
	if (t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32) {
		ibpi_coll_reduce_add(x, acc.data(), idtype(t), count, acc.data());
		return;
	}
	for (size_t i = 0; i < count; i++) /* uint8 (coll() refuses other integer reductions) */
		acc[i] = (uint8_t)(acc[i] + x[i]);
}

void NOp::complete()
{
	NM l;
	state = 2;
	if (c->aborted)
		return;
	for (P2p &p : p2p) {
		Pair &q = *p.pair;
		NOp *other = p.send ? q.recv : q.send;
		emu_ext_learn(other->id);
		if (q.moved)
			continue;
		q.moved = true;
		size_t n = q.sbytes;
		if (q.sbytes > q.rcap) { /* NCCL: a receive must take the whole message */
			n = q.rcap;
			for (NOp *o : { q.send, q.recv }) {
				o->c->async = o->c->sticky = ncclInvalidUsage;
				o->c->last = "message truncated: a receive shorter than its send";
			}
		}
		emu_ext_access(q.send->id, q.sbuf, n, 0, q.send->site);
		emu_ext_access(q.recv->id, q.rbuf, n, 1, q.recv->site);
		if (n)
			memmove(q.rbuf, q.sbuf, n);
	}
	if (!slot)
		return;
	for (NOp *o : slot->ops)
		if (o != this)
			emu_ext_learn(o->id);
	if (slot->done)
		return;
	slot->done = true;
	const int n = g->n;
	const NOp *z = slot->ops[0];
	for (const NOp *o : slot->ops)
		if (o->kind != z->kind || o->count != z->count || o->dt != z->dt)
			nccl_fatal("ranks of one communicator called different collectives in the same place (kind, count "
				   "or type differ): NCCL would hang or corrupt");
	const size_t es = tsize(dt), cnt = z->count, blk = cnt * es;
	const size_t in = kind == K_RS ? blk * (size_t)n : blk, out = kind == K_AG ? blk * (size_t)n : blk;
	std::vector<std::vector<uint8_t>> res((size_t)n);
	for (int r = 0; r < n; r++)
		emu_ext_access(slot->ops[r]->id, slot->ops[r]->sbuf, in, 0, slot->ops[r]->site);
	if (kind == K_AG) {
		std::vector<uint8_t> all(out);
		for (int r = 0; r < n; r++)
			memcpy(all.data() + (size_t)r * blk, slot->ops[r]->sbuf, blk);
		for (int r = 0; r < n; r++)
			res[r] = all;
	} else {
		const size_t parts = kind == K_RS ? (size_t)n : 1;
		std::vector<std::vector<uint8_t>> sums(parts);
		for (size_t part = 0; part < parts; part++) {
			sums[part].assign((const uint8_t *)slot->ops[0]->sbuf + part * blk,
					  (const uint8_t *)slot->ops[0]->sbuf + part * blk + blk);
			for (int r = 1; r < n; r++)
				add_into(sums[part], (const uint8_t *)slot->ops[r]->sbuf + part * blk, cnt, dt);
		}
		for (int r = 0; r < n; r++)
			res[r] = sums[kind == K_RS ? (size_t)r : 0];
	}
	for (int r = 0; r < n; r++) {
		emu_ext_access(slot->ops[r]->id, slot->ops[r]->rbuf, out, 1, slot->ops[r]->site);
		if (out)
			memcpy(slot->ops[r]->rbuf, res[r].data(), out);
	}
}

/* ---- planted failures (tests) ---- */
static thread_local std::string plant_call;
static thread_local ncclResult_t plant_res;
static thread_local int plant_nth;
static thread_local uint64_t rng_s; /* seeded from the run's seed and the thread */
static std::atomic<uint64_t> rng_threads;

/* The nth (1 = next) call named `call` on this thread answers r instead
 * (for "async": the nth operation posted makes its communicator fail
 * asynchronously with r: its operations never complete, and
 * ncclCommGetAsyncError answers r, until it is aborted). */
extern "C" void emu_nccl_plant(const char *call, int r, int nth)
{
	plant_call = call ? call : "";
	plant_res = (ncclResult_t)r;
	plant_nth = nth;
}

static bool planted(const char *call, ncclResult_t *r)
{
	if (plant_call != call || plant_nth <= 0 || --plant_nth)
		return false;
	*r = plant_res;
	plant_call.clear();
	return true;
}

extern uint64_t emu_seed;
static int coin()
{
	if (!rng_s)
		rng_s = (emu_seed + 1) * 0x9E3779B97F4A7C15ull + (++rng_threads) * 0xBF58476D1CE4E5B9ull + 1;
	rng_s ^= rng_s << 13;
	rng_s ^= rng_s >> 7;
	rng_s ^= rng_s << 17;
	return (int)(rng_s >> 40) & 1;
}

/* A known, live communicator (caller holds nm); else reported. */
static void live(const ncclComm *c, const char *call)
{
	for (const ncclComm *k : all_comms)
		if (k == c) {
			if (c->freed)
				nccl_fatal(std::string(call) + " on a communicator after ncclCommDestroy or ncclCommAbort");
			return;
		}
	nccl_fatal(std::string(call) + " on a pointer that is no NCCL communicator");
}

static ncclResult_t fail(ncclComm_t c, ncclResult_t r, const std::string &m)
{
	if (c)
		c->last = m;
	return r;
}

/* ---- group calls ---- */
struct Posted {
	ncclComm *c;
	emu_stream *s;
	const void *site;
	bool is_p2p, send;
	int peer;
	const void *sbuf;
	void *rbuf;
	size_t bytes;
	int kind;
	size_t count;
	ncclDataType_t dt;
};
static thread_local int group_depth;
static thread_local std::vector<Posted> group_ops;
static thread_local ncclResult_t group_error;

/* Registers o's matching (issue order) and queues it on s. */
static void enqueue(NOp *o, emu_stream *s)
{
	{
		NM l;
		Group &g = *o->g;
		const int me = o->c->rank;
		for (P2p &p : o->p2p) {
			const int src = p.send ? me : p.peer, dst = p.send ? p.peer : me;
			const uint64_t k = p.send ? g.sent[(size_t)src * g.n + dst]++ : g.received[(size_t)src * g.n + dst]++;
			auto &q = g.pairs[std::make_tuple(src, dst, k)];
			if (!q)
				q = std::make_shared<Pair>();
			p.pair = q;
			if (p.send) {
				q->send = o;
				q->sbuf = p.sbuf;
				q->sbytes = p.bytes;
			} else {
				q->recv = o;
				q->rbuf = p.rbuf;
				q->rcap = p.bytes;
			}
		}
		if (o->kind >= 0) {
			auto &sl = g.slots[g.colls[(size_t)me]++];
			if (!sl)
				sl = std::make_shared<Slot>();
			if ((int)sl->ops.size() < g.n)
				sl->ops.resize((size_t)g.n, nullptr);
			sl->ops[(size_t)me] = o;
			o->slot = sl;
		}
		o->c->ops.push_back(o);
	}
	static const char *names[] = { "ncclAllGather", "ncclReduceScatter", "ncclAllReduce" };
	emu_enqueue_ext(s, o, o->kind < 0 ? "ncclSend/ncclRecv" : names[o->kind], o->site);
}

/* ncclGroupEnd of the outermost group (or a call outside any group): the
 * thread's posted calls become operations, one per (communicator, stream)
 * for sends and receives, one per collective. A non-blocking
 * communicator may answer ncclInProgress and queue them later. */
static ncclResult_t flush_group()
{
	std::vector<Posted> ops;
	ops.swap(group_ops);
	const ncclResult_t err = group_error;
	group_error = ncclSuccess;
	if (err != ncclSuccess)
		return err; /* a call in the group failed: nothing is posted */
	std::vector<std::pair<NOp *, emu_stream *>> made;
	for (const Posted &p : ops) {
		NOp *o = nullptr;
		if (p.is_p2p)
			for (auto &m : made)
				if (m.first->c == p.c && m.second == p.s && m.first->kind < 0)
					o = m.first;
		if (!o) {
			o = new NOp();
			o->c = p.c;
			o->g = p.c->g;
			o->site = p.site;
			made.push_back({ o, p.s });
		}
		if (p.is_p2p) {
			o->p2p.push_back({ p.send, p.peer, p.sbuf, p.rbuf, p.bytes, nullptr });
		} else {
			o->kind = p.kind;
			o->sbuf = p.sbuf;
			o->rbuf = p.rbuf;
			o->count = p.count;
			o->dt = p.dt;
		}
	}
	bool defer = false;
	{
		NM l;
		for (auto &m : made)
			defer |= !m.first->c->blocking && coin();
	}
	for (auto &m : made) {
		if (!defer) {
			enqueue(m.first, m.second);
			continue;
		}
		const uint32_t issued = emu_stream_issued(m.second);
		NM l;
		m.first->c->deferred.push_back(m);
		m.first->c->deferred_issued.push_back(issued);
		m.first->c->async = ncclInProgress;
	}
	return defer ? ncclInProgress : ncclSuccess;
}

/* Queues what a non-blocking call left (caller: ncclCommGetAsyncError). */
static void flush_deferred(ncclComm *c)
{
	std::vector<std::pair<NOp *, emu_stream *>> d;
	std::vector<uint32_t> was;
	{
		NM l;
		d.swap(c->deferred);
		was.swap(c->deferred_issued);
	}
	for (size_t i = 0; i < d.size(); i++)
		if (emu_stream_issued(d[i].second) != was[i])
			nccl_fatal("a stream got other work while a non-blocking NCCL call on it was still in progress "
				   "(ncclInProgress: wait until ncclCommGetAsyncError answers ncclSuccess before using "
				   "the stream)");
	for (auto &x : d)
		enqueue(x.first, x.second);
}

/* Every operation call: checked, then posted to the thread's group. */
static ncclResult_t post(Posted p, const char *call)
{
	ncclResult_t r;
	if (!p.c)
		return ncclInvalidArgument;
	{
		NM l;
		live(p.c, call);
		if (!p.c->g)
			nccl_fatal(std::string(call) + " on a communicator whose ncclCommSplit is still in progress");
		if (!p.c->deferred.empty())
			nccl_fatal(std::string(call) + " while the communicator's previous non-blocking call is in progress");
		if (p.c->aborted)
			return fail(p.c, ncclInvalidUsage, "the communicator was aborted");
		if (p.is_p2p && (p.peer < 0 || p.peer >= p.c->n))
			return fail(p.c, ncclInvalidArgument, std::string(call) + ": peer out of range");
		if (p.bytes && !(p.send ? p.sbuf : p.rbuf))
			return fail(p.c, ncclInvalidArgument, std::string(call) + ": NULL buffer");
		if (!p.is_p2p && p.count && (!p.sbuf || !p.rbuf))
			return fail(p.c, ncclInvalidArgument, std::string(call) + ": NULL buffer");
	}
	if (planted(call, &r)) {
		fail(p.c, r, std::string(call) + ": a failure planted by the test");
		if (group_depth)
			group_error = r;
		return r;
	}
	if (planted("async", &r)) {
		NM l;
		p.c->sticky = p.c->async = r;
		p.c->last = "a remote peer failed (planted by the test)";
	}
	group_ops.push_back(p);
	if (group_depth)
		return ncclSuccess;
	return flush_group();
}

/* ---- the API ---- */
extern "C" {

ncclResult_t ncclGetVersion(int *v)
{
	if (!v)
		return ncclInvalidArgument;
	*v = NCCL_VERSION_CODE;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t c)
{
	static thread_local std::string last;
	NM l;
	last = c ? c->last : "";
	return last.c_str();
}

static ncclComm *new_comm(int dev, int blocking)
{
	ncclComm *c = new ncclComm();
	c->dev = dev;
	c->blocking = blocking;
	all_comms.push_back(c);
	return c;
}

static std::shared_ptr<Group> new_group(const std::vector<ncclComm *> &members)
{
	auto g = std::make_shared<Group>();
	g->n = (int)members.size();
	g->comms = members;
	g->sent.assign((size_t)g->n * g->n, 0);
	g->received.assign((size_t)g->n * g->n, 0);
	g->colls.assign((size_t)g->n, 0);
	for (int r = 0; r < g->n; r++) {
		members[r]->g = g;
		members[r]->rank = r;
		members[r]->n = g->n;
	}
	return g;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	if (!comms || ndev < 1)
		return ncclInvalidArgument;
	NM l;
	std::vector<ncclComm *> m;
	for (int i = 0; i < ndev; i++)
		m.push_back(comms[i] = new_comm(devlist ? devlist[i] : i, 1));
	new_group(m);
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *) { return ncclInvalidUsage; /* ranks are threads: ncclCommInitAll */ }
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) { return ncclInvalidUsage; }

static std::condition_variable split_cv;

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
	if (!comm || !newcomm)
		return ncclInvalidArgument;
	ncclResult_t pr;
	if (planted("ncclCommSplit", &pr)) {
		*newcomm = nullptr;
		NM l;
		return fail(comm, pr, "ncclCommSplit: a failure planted by the test");
	}
	emu_nocheck(1);
	struct Off {
		~Off() { emu_nocheck(-1); }
	} off;
	std::unique_lock<std::mutex> l(nm);
	live(comm, "ncclCommSplit");
	if (!comm->g)
		nccl_fatal("ncclCommSplit of a communicator that is not ready");
	const int blocking = !(config && config->blocking == 0);
	Group &g = *comm->g;
	Split &sp = g.splits[comm->splits++];
	if (sp.at.empty())
		sp.at.resize((size_t)g.n, Split::A{ 0, 0, nullptr, false });
	ncclComm *nc = color == NCCL_SPLIT_NOCOLOR ? nullptr : new_comm(comm->dev, blocking);
	if (nc)
		nc->async = ncclInProgress;
	sp.at[(size_t)comm->rank] = Split::A{ color, key, nc, true };
	*newcomm = nc;
	if (++sp.arrived == g.n) { /* the last one forms the new communicators */
		std::map<int, std::vector<std::tuple<int, int, ncclComm *>>> by;
		for (int r = 0; r < g.n; r++)
			if (sp.at[r].nc)
				by[sp.at[r].color].push_back(std::make_tuple(sp.at[r].key, r, sp.at[r].nc));
		for (auto &b : by) {
			std::sort(b.second.begin(), b.second.end());
			std::vector<ncclComm *> m;
			for (auto &t : b.second)
				m.push_back(std::get<2>(t));
			new_group(m);
			for (ncclComm *x : m)
				x->async = ncclSuccess;
		}
		split_cv.notify_all();
	}
	if (!nc)
		return ncclSuccess;
	if (!blocking)
		return nc->g && coin() ? ncclSuccess : ncclInProgress;
	if (!split_cv.wait_for(l, std::chrono::seconds(120), [nc] { return nc->g != nullptr; }))
		nccl_fatal("a blocking ncclCommSplit waited 120 s for the other ranks (a hang)");
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	if (!c || !r)
		return ncclInvalidArgument;
	emu_poll(); /* the device moves while the host polls */
	bool flush = false;
	{
		NM l;
		live(c, "ncclCommGetAsyncError");
		if (c->sticky != ncclSuccess) {
			*r = c->sticky;
			return ncclSuccess;
		}
		if (!c->deferred.empty() && coin()) {
			flush = true;
		} else if (c->finalizing) {
			bool all = true;
			for (const NOp *o : c->ops)
				all &= o->state == 2;
			c->async = all ? ncclSuccess : ncclInProgress;
		}
		*r = c->async;
	}
	if (flush) {
		flush_deferred(c);
		NM l;
		c->async = ncclSuccess;
		*r = c->async;
	}
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n)
{
	if (!c || !n)
		return ncclInvalidArgument;
	NM l;
	live(c, "ncclCommCount");
	*n = c->n;
	return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d)
{
	if (!c || !d)
		return ncclInvalidArgument;
	NM l;
	live(c, "ncclCommCuDevice");
	*d = c->dev;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r)
{
	if (!c || !r)
		return ncclInvalidArgument;
	NM l;
	live(c, "ncclCommUserRank");
	*r = c->rank;
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	if (!c)
		return ncclInvalidArgument;
	int blocking;
	{
		NM l;
		live(c, "ncclCommFinalize");
		if (!c->deferred.empty())
			nccl_fatal("ncclCommFinalize while a non-blocking call is in progress");
		c->finalizing = true;
		blocking = c->blocking;
	}
	for (auto t0 = std::chrono::steady_clock::now();;) {
		emu_poll();
		{
			NM l;
			bool all = true;
			for (const NOp *o : c->ops)
				all &= o->state == 2;
			if (all) {
				c->async = ncclSuccess;
				return ncclSuccess;
			}
			if (!blocking) {
				c->async = ncclInProgress;
				return ncclInProgress;
			}
		}
		if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120))
			nccl_fatal("a blocking ncclCommFinalize waited 120 s for the communicator's operations (a hang)");
		std::this_thread::yield();
	}
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	if (!c)
		return ncclInvalidArgument;
	NM l;
	live(c, "ncclCommDestroy");
	c->freed = true;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	if (!c)
		return ncclInvalidArgument;
	{
		NM l;
		live(c, "ncclCommAbort");
		c->aborted = c->freed = true;
		c->deferred.clear(); /* never queued */
		c->deferred_issued.clear();
	}
	emu_poll();
	return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
	ncclResult_t r;
	if (planted("ncclGroupStart", &r))
		return r;
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth <= 0)
		return ncclInvalidUsage;
	ncclResult_t r;
	if (planted("ncclGroupEnd", &r)) {
		{
			NM l;
			for (const Posted &p : group_ops)
				p.c->last = "ncclGroupEnd: a failure planted by the test";
		}
		if (--group_depth == 0) {
			group_ops.clear();
			group_error = ncclSuccess;
		}
		return r;
	}
	if (--group_depth)
		return ncclSuccess;
	return flush_group();
}

ncclResult_t ncclSend(const void *sbuf, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t s)
{
	Posted p{ c, emu_stub_stream(s), __builtin_return_address(0), true, true, peer, sbuf, nullptr,
		  count * tsize(dt), -1, 0, dt };
	return post(p, "ncclSend");
}

ncclResult_t ncclRecv(void *rbuf, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t s)
{
	Posted p{ c, emu_stub_stream(s), __builtin_return_address(0), true, false, peer, nullptr, rbuf,
		  count * tsize(dt), -1, 0, dt };
	return post(p, "ncclRecv");
}

static ncclResult_t coll(int kind, const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt, ncclRedOp_t op,
			 ncclComm_t c, cudaStream_t s, const void *site, const char *call)
{
	if (kind != K_AG && op != ncclSum)
		return fail(c, ncclInvalidArgument, std::string(call) + ": the stand-in reduces with ncclSum only");
	if ((int)dt < 0 || dt >= ncclNumTypes)
		return fail(c, ncclInvalidArgument, std::string(call) + ": bad data type");
	if (kind != K_AG && dt != ncclUint8 && dt != ncclFloat16 && dt != ncclBfloat16 && dt != ncclFloat32)
		return fail(c, ncclInvalidArgument, std::string(call) + ": the stand-in reduces uint8, f16, bf16 and f32 only");
	Posted p{ c, emu_stub_stream(s), site, false, false, -1, sbuf, rbuf, 0, kind, count, dt };
	return post(p, call);
}

ncclResult_t ncclAllGather(const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt, ncclComm_t c,
			   cudaStream_t s)
{
	return coll(K_AG, sbuf, rbuf, count, dt, ncclSum, c, s, __builtin_return_address(0), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt, ncclRedOp_t op,
			       ncclComm_t c, cudaStream_t s)
{
	return coll(K_RS, sbuf, rbuf, count, dt, op, c, s, __builtin_return_address(0), "ncclReduceScatter");
}

ncclResult_t ncclAllReduce(const void *sbuf, void *rbuf, size_t count, ncclDataType_t dt, ncclRedOp_t op,
			   ncclComm_t c, cudaStream_t s)
{
	return coll(K_AR, sbuf, rbuf, count, dt, op, c, s, __builtin_return_address(0), "ncclAllReduce");
}

} /* extern "C" */
