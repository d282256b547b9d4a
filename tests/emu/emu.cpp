/* emu.cpp - the scheduler, fibers and checker behind emu.h. Compiled
 * WITHOUT -fsanitize=thread: the __tsan_* functions below are the hooks
 * that the instrumented kernel code calls on every memory access. */
#include "emu.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <unordered_map>
#include <mutex>
#include <execinfo.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

emu_fiber *emu_cur;
emu_dim3 emu_block_dim, emu_grid_dim;
int emu_defect;
uint64_t emu_seed = 1;
int emu_preempt_mean = 24; /* plain accesses between preemptions, on average */
int emu_stall_rate;        /* 0: off; N: an atomic stalls its thread 1 time in N (emu.h) */
uint64_t emu_stat_launches, emu_stat_fibers, emu_stat_switches, emu_stat_async_ops;

/* ------------------------------------------------------------------ rng */

static uint64_t rng_state = 1;
static uint64_t rng()
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ------------------------------------------------------- context switch */

extern "C" void emu_switch(void **save_sp, void *new_sp);
asm(R"(
	.text
	.globl emu_switch
	.type emu_switch,@function
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_switch, .-emu_switch
)");

static void *sched_sp;
static const size_t STACK = 192 << 10;
static std::vector<uint8_t *> stack_pool;

static uint8_t *stack_get()
{
	if (!stack_pool.empty()) {
		uint8_t *s = stack_pool.back();
		stack_pool.pop_back();
		return s;
	}
	void *p = mmap(nullptr, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "emu: out of memory for fiber stacks\n");
		_exit(2);
	}
	mprotect(p, 4096, PROT_NONE); /* guard page: a stack overflow faults */
	return (uint8_t *)p + 4096;
}

/* ------------------------------------------------------------- reports */

/* Set once a report is being written: from then on no access is checked
 * and no thread switched (library code shared with the instrumented
 * harness, std::string's, would otherwise call the hooks, and another
 * thread's error would interleave with this one). */
static int reporting;

static std::string sym(uintptr_t pc)
{
	reporting = 1;
	if (!pc)
		return "?";
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "addr2line -C -f -i -p -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(),
		 (unsigned long)(pc - 1));
	std::string out;
	if (FILE *f = popen(cmd, "r")) {
		char buf[512];
		while (fgets(buf, sizeof(buf), f)) {
			std::string l(buf);
			size_t q = l.find(" (inlined by) ");
			if (q != std::string::npos)
				l = "      inlined by " + l.substr(q + 14);
			out += "    " + l;
		}
		pclose(f);
	}
	if (out.empty()) {
		snprintf(cmd, sizeof(cmd), "    pc 0x%lx\n", (unsigned long)pc);
		out = cmd;
	}
	return out;
}

static std::string who_in(uint32_t launch, uint32_t gtid);

/* Nonzero while the emulator's own code runs (for a thread or the host):
 * the hooks then neither check nor switch. Library code the emulator
 * calls (std containers, strings) may be the instrumented copy the
 * harness's objects brought (one definition wins at link time), and a
 * thread switch inside a barrier's or a shuffle's bookkeeping would
 * corrupt it. Saved per thread across switches. */
static int quiet;
/* Host threads (the library's workers, ranks of an in-process transport)
 * share the emulator: one thread at a time inside it (emu_mu, taken by
 * every entry point and by a host thread's checked access); the one that
 * runs the device's threads (fibers) marks itself (tl_device). The host's
 * waits inform all host threads alike. */
static std::recursive_mutex emu_mu;
static thread_local int tl_device; /* this thread is running a fiber now */
static thread_local int tl_inside; /* this thread's host-side Inside depth */
static thread_local int tl_nocheck; /* emu_nocheck: the thread's accesses go unchecked */
struct Inside {
	/* In a fiber the lock is held already (by the host side that runs the
	 * device) and the fiber may end its scope on another thread: only the
	 * fiber's own quiet count, which the scheduler saves with it. */
	const bool dev;
	Inside() : dev(tl_device != 0)
	{
		if (!dev) {
			emu_mu.lock();
			tl_inside++;
		}
		quiet++;
	}
	~Inside()
	{
		quiet--;
		if (!dev) {
			tl_inside--;
			emu_mu.unlock();
		}
	}
	Inside(const Inside &) = delete;
};


static uint32_t launch_id; /* the running fiber's launch */
static std::string who(uint32_t gtid)
{
	return who_in(launch_id, gtid);
}

static std::string stack_of(const emu_fiber *f)
{
	std::string s;
	for (unsigned i = f->depth < 48 ? f->depth : 48; i-- > 0 && f->depth - i < 6;) {
		std::string fr = sym(f->stk[i]);
		if (fr.find("std::__invoke") != std::string::npos || fr.find("fiber_main") != std::string::npos)
			break; /* the emulator's own frames */
		s += "   called from\n" + fr;
	}
	return s;
}

[[noreturn]] static void fatal(const char *kind, const std::string &msg)
{
	fflush(stdout);
	fprintf(stderr, "EMU ERROR (%s): %s", kind, msg.c_str());
	if (emu_cur)
		fprintf(stderr, "%s", stack_of(emu_cur).c_str());
	fprintf(stderr, "EMU: reproduce with seed %llu (defect %d)\n", (unsigned long long)emu_seed, emu_defect);
	fflush(stderr);
	_exit(3);
}

/* -------------------------------------------------- regions and shadow */

struct Rec {
	uint32_t tid, bgen, clk, pc, lf; /* lf: launch << 2 | write << 1 | atomic */
};
struct Cell {
	Rec w, r1, r2;
};
struct Region {
	uintptr_t lo, hi, alo, ahi;
	std::string name;
	Cell *cells;
	uint8_t *pend; /* cp.async destination not yet complete */
	void *mem;
	size_t map_bytes; /* sparse (mmap) regions: bounds only, no shadow */
	int shared;       /* shared memory (a __shared__ variable or a block's dynamic shared memory) */
	int watch;        /* host memory whose reads are logged (emu_host_watch) */
	int pinned;       /* pinned host memory (emu_pinned_alloc) */
	size_t shadow_map; /* cells and pend mapped (large regions): their sizes in bytes, else 0 */
	uint32_t freed_by; /* the stream-ordered free that ended it (launch id), 0: live */
};
static std::vector<Region *> regions; /* sorted by alo */
static Region *last_region;
static const size_t RZ = 64;
static uint32_t launch_seq; /* the last launch id given out */

/* ---- what happened before what, across launches, copies and the host ----
 * Every launch, copy, memset and stream-ordered free has a launch id and a
 * place (stream, seq) in a stream; work of the host's own launches
 * (emu_run_grids) shares stream S_DIRECT, one seq per call, so that the
 * launches of one call are not ordered with each other. A Know is what an
 * actor knows to have happened before it: per stream, how many of its
 * operations (vc); per warp of a running launch, the lanes' clocks it
 * acquired; per block, the barrier generation. */
static const uint32_t TID_HOST = 0xffffffffu, TID_OP = 0xfffffffeu; /* Rec.tid of the host, of a copy */
static const uint32_t S_DIRECT = 1, S_LEGACY = 2;                    /* created streams count from 3 */
struct Know {
	std::vector<uint32_t> vc;
	std::map<uint64_t, std::array<uint32_t, 32>> warps; /* launch << 32 | warp of the launch */
	std::map<uint64_t, uint32_t> blocks;                /* launch << 32 | block */
	uint32_t at(uint32_t s) const { return s < vc.size() ? vc[s] : 0; }
	void set(uint32_t s, uint32_t q)
	{
		if (s >= vc.size())
			vc.resize(s + 1, 0);
		if (vc[s] < q)
			vc[s] = q;
	}
	void merge(const Know &o)
	{
		for (uint32_t s = 0; s < o.vc.size(); s++)
			set(s, o.vc[s]);
		for (const auto &w : o.warps) {
			auto it = warps.find(w.first);
			if (it == warps.end())
				warps.insert(w);
			else
				for (int l = 0; l < 32; l++)
					it->second[l] = std::max(it->second[l], w.second[l]);
		}
		for (const auto &b : o.blocks) {
			auto it = blocks.find(b.first);
			if (it == blocks.end())
				blocks.insert(b);
			else
				it->second = std::max(it->second, b.second);
		}
	}
	bool fine() const { return !warps.empty() || !blocks.empty(); }
	bool empty() const { return vc.empty() && !fine(); }
	void prune(); /* drops the entries of launches the vector clock covers */
};
struct Actor { /* a launch id's work */
	uint32_t stream = 0, seq = 0;
	uint64_t epoch = 0; /* host_epoch when it was issued */
	emu_dim3 grid, block;
	unsigned bd = 1, wpb = 1;
	const char *name = "";
	const void *site = nullptr; /* where the host issued it */
	const void *kernel = nullptr; /* a launch's kernel (its name in reports) */
	std::shared_ptr<Know> start, exit;
};
static std::vector<Actor> actors(1); /* by launch id; [0]: the host */
void Know::prune()
{
	for (auto it = warps.begin(); it != warps.end();) {
		const Actor &a = actors[it->first >> 32];
		it = at(a.stream) >= a.seq ? warps.erase(it) : std::next(it);
	}
	for (auto it = blocks.begin(); it != blocks.end();) {
		const Actor &a = actors[it->first >> 32];
		it = at(a.stream) >= a.seq ? blocks.erase(it) : std::next(it);
	}
}
static Know host_know;       /* what the host's waits told it */
static uint64_t host_epoch;  /* operations the host has issued */
static int host_pending;     /* issued work the host does not know to be done */
enum { ACT_HOST, ACT_FIBER, ACT_OP };
static int act = ACT_HOST;   /* who accesses memory now */
static uint32_t act_launch;  /* ACT_OP: the copy's launch id */
struct FiberSync {
	Know acq, pend; /* acquired; read by atomics since the last fence */
	bool has_pend = false;
	std::shared_ptr<Know> rel; /* what its next atomic store publishes (the last fence's snapshot) */
};
static std::unordered_map<uintptr_t, std::shared_ptr<Know>> syncvars; /* address -> its last publication */

struct Launch {
	emu_job_base *job;
	emu_dim3 grid, block;
	size_t smem;
	const char *name;
	uint32_t id;
	unsigned nblocks, next, max_res;
	std::vector<emu_block *> res;
	Know acq;      /* what its finished threads acquired */
	int owned;     /* job deleted at the end (stream launches) */
	void *op;      /* the stream operation it runs, or null */
};
static std::vector<Launch *> running; /* launches with blocks left, on any stream */

static Region *region_new(size_t n, unsigned skew, const std::string &name, int poison)
{
	/* the start is 256-aligned plus skew, as cudaMalloc's (skew 0) */
	size_t total = 256 + 64 + n + RZ;
	uint8_t *m = (uint8_t *)aligned_alloc(256, (total + 255) / 256 * 256);
	Region *r = new Region();
	r->mem = m;
	r->alo = (uintptr_t)m;
	r->ahi = (uintptr_t)m + total;
	r->lo = (uintptr_t)m + 256 + (skew & 63);
	r->hi = r->lo + n;
	r->name = name;
	r->cells = nullptr;
	r->pend = nullptr;
	r->map_bytes = 0;
	memset(m, 0xFB, total);
	if (poison)
		for (size_t i = 0; i < n; i++)
			((uint8_t *)r->lo)[i] = (uint8_t)(rng() | 0x80);
	auto it = std::lower_bound(regions.begin(), regions.end(), r,
				   [](const Region *a, const Region *b) { return a->alo < b->alo; });
	regions.insert(it, r);
	return r;
}

static void region_free(Region *r)
{
	regions.erase(std::find(regions.begin(), regions.end(), r));
	if (last_region == r)
		last_region = nullptr;
	if (r->shadow_map) {
		munmap(r->cells, r->shadow_map);
		munmap(r->pend, (r->hi - r->lo + 4095) / 4096 * 4096);
	} else {
		free(r->cells);
		free(r->pend);
	}
	if (!syncvars.empty())
		for (auto it = syncvars.begin(); it != syncvars.end();)
			it = it->first >= r->alo && it->first < r->ahi ? syncvars.erase(it) : std::next(it);
	if (r->map_bytes)
		munmap(r->mem, r->map_bytes);
	else
		free(r->mem);
	delete r;
}

static Region *region_at(uintptr_t a)
{
	Region *r = last_region;
	if (r && a >= r->alo && a < r->ahi)
		return r;
	size_t lo = 0, hi = regions.size();
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (regions[mid]->ahi <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < regions.size() && a >= regions[lo]->alo && a < regions[lo]->ahi)
		return last_region = regions[lo];
	return nullptr;
}

void *emu_dev_alloc(size_t n, unsigned skew, const char *name)
{
	Inside in;
	return (void *)region_new(n, skew, name, 0)->lo;
}

void *emu_dev_alloc_sparse(size_t n, const char *name)
{
	Inside in;
	const size_t page = 4096, total = page + (n + page - 1) / page * page + page;
	void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		fprintf(stderr, "emu_dev_alloc_sparse: cannot map %zu bytes\n", n);
		_exit(2);
	}
	Region *r = new Region();
	r->mem = m;
	r->map_bytes = total;
	r->alo = (uintptr_t)m;
	r->ahi = (uintptr_t)m + total;
	r->lo = (uintptr_t)m + page;
	r->hi = r->lo + n;
	r->name = name;
	r->cells = nullptr;
	r->pend = nullptr;
	auto it = std::lower_bound(regions.begin(), regions.end(), r,
				   [](const Region *a, const Region *b) { return a->alo < b->alo; });
	regions.insert(it, r);
	return (void *)r->lo;
}

bool emu_is_device_memory(const void *p)
{
	Region *r = region_at((uintptr_t)p);
	return r && !r->pinned && !r->shared && (uintptr_t)p >= r->lo && (uintptr_t)p < r->hi;
}

void emu_dev_free(void *p)
{
	Inside in;
	if (!p)
		return;
	if (host_pending)
		emu_device_sync(); /* as cudaFree: the device's work first */
	Region *r = region_at((uintptr_t)p);
	if (!r || r->lo != (uintptr_t)p) {
		fprintf(stderr, "emu_dev_free: %p was not allocated by emu_dev_alloc\n", p);
		_exit(2);
	}
	region_free(r);
}

/* ------------------------------------------------------------- blocks */

struct Coll {
	int used, kind;
	unsigned mask, arrived;
	const void *site;
	uint64_t val[32];
	unsigned arg[32];
	emu_fiber *who[32];
};
struct Warp {
	Coll c[4];
};
struct CpaCopy {
	uint8_t *dst;
	const uint8_t *src;
	unsigned n;
};
struct CpaQ {
	std::vector<CpaCopy> open;
	std::deque<std::vector<CpaCopy>> groups;
};
struct emu_block {
	Launch *L; /* its launch */
	emu_dim3 idx;
	unsigned lin, n, live;
	std::vector<emu_fiber> f;
	std::vector<Warp> warps;
	uint32_t bgen;
	unsigned bar_arrived, bar_acc;
	int bar_kind;
	const void *bar_site;
	std::vector<emu_fiber *> bar_wait;
	Region *dyn;
	std::vector<std::pair<emu_sslot *, Region *>> slots;
};

emu_dim3 &emu_block_idx()
{
	return emu_cur->blk->idx;
}

uint8_t *emu_dyn_smem()
{
	return (uint8_t *)emu_cur->blk->dyn->lo;
}

void *emu_shared_raw(emu_sslot *s, size_t size, size_t align)
{
	Inside in;
	(void)align; /* regions start 64-aligned */
	emu_block *b = emu_cur->blk;
	for (auto &p : b->slots)
		if (p.first == s)
			return (void *)p.second->lo;
	char name[64];
	snprintf(name, sizeof(name), "__shared__ variable (%zu bytes) of block %u", size, b->lin);
	Region *r = region_new(size, 0, name, 1);
	r->shared = 1;
	b->slots.push_back({ s, r });
	return (void *)r->lo;
}

static std::vector<emu_fiber *> runnable;
static void run_add(emu_fiber *f)
{
	f->run_pos = (int)runnable.size();
	runnable.push_back(f);
}
static void run_del(emu_fiber *f)
{
	if (f->run_pos < 0)
		return;
	emu_fiber *last = runnable.back();
	runnable[f->run_pos] = last;
	last->run_pos = f->run_pos;
	runnable.pop_back();
	f->run_pos = -1;
}

static void yield()
{
	emu_fiber *f = emu_cur;
	emu_stat_switches++;
	emu_switch(&f->sp, sched_sp);
	emu_cur = f;
}

static void wait_here(int kind, const void *site)
{
	emu_fiber *f = emu_cur;
	f->state = 1;
	f->wait_kind = kind;
	f->wait_site = site;
	run_del(f);
	yield();
}

static void wake(emu_fiber *f)
{
	f->state = 0;
	f->wait_site = nullptr;
	run_add(f);
}

/* ---------------------------------------------------------- the checker */

enum { A_WRITE = 1, A_ATOMIC = 2, A_ASYNC_ISSUE = 4, A_ASYNC_DONE = 8 };

/* Does Know k order the access r before its holder? */
static bool knows(const Know &k, const Rec &r)
{
	const uint32_t L = r.lf >> 2;
	const Actor &a = actors[L];
	if (k.at(a.stream) >= a.seq)
		return true;
	if (r.tid >= TID_OP || !k.fine())
		return false;
	const uint32_t t = r.tid - 1, b = t / a.bd, w = b * a.wpb + (t % a.bd) / 32;
	auto bi = k.blocks.find((uint64_t)L << 32 | b);
	if (bi != k.blocks.end() && bi->second > r.bgen)
		return true;
	auto wi = k.warps.find((uint64_t)L << 32 | w);
	return wi != k.warps.end() && wi->second[(t % a.bd) % 32] >= r.clk;
}

/* Is the earlier access r ordered before the access being checked (by the
 * running thread, the running copy, or the host)? */
static inline bool ordered(const Rec &r)
{
	if (!r.tid)
		return true;
	if (r.tid == TID_HOST) /* clk: the host's epoch at the access */
		return act == ACT_HOST || r.clk < actors[act == ACT_OP ? act_launch : launch_id].epoch;
	if (act == ACT_HOST)
		return knows(host_know, r);
	if (act == ACT_OP)
		return (r.lf >> 2) == act_launch || knows(*actors[act_launch].start, r);
	const emu_fiber *f = emu_cur;
	if ((r.lf >> 2) == launch_id && r.tid != TID_OP) {
		if (r.tid == f->gtid)
			return true;
		const unsigned bd = f->blk->n;
		const uint32_t rt = r.tid - 1, ft = f->gtid - 1;
		if (rt / bd == ft / bd) {
			if (f->blk->bgen > r.bgen)
				return true;
			const unsigned rl = rt % bd;
			if (rl / 32 == f->tid / 32 && f->wvc[rl % 32] >= r.clk)
				return true;
		}
	} else if (knows(*actors[launch_id].start, r)) {
		return true;
	}
	return f->sync && knows(((const FiberSync *)f->sync)->acq, r);
}

static const char *what(const Rec &r)
{
	return (r.lf & 1) ? "atomic" : (r.lf & 2) ? "write" : "read";
}

static std::string who_me()
{
	if (act == ACT_FIBER && emu_cur)
		return who_in(launch_id, emu_cur->gtid);
	return who_in(act == ACT_OP ? act_launch : 0, act == ACT_OP ? TID_OP : TID_HOST);
}

[[noreturn]] static void race(const Region *g, uintptr_t a, unsigned n, int write, int atomic, uintptr_t pc,
			      const Rec &o)
{
	char s[768];
	snprintf(s, sizeof(s), "data race on %s+%lu\n  %s of %u bytes by %s\n", g->name.c_str(),
		 (unsigned long)(a - g->lo), atomic ? "atomic" : write ? "write" : "read", n, who_me().c_str());
	std::string m = s + sym(pc);
	const uint32_t ol = o.lf >> 2;
	const bool other = o.tid == TID_HOST || act != ACT_FIBER || ol != launch_id || o.tid == TID_OP;
	snprintf(s, sizeof(s), "  conflicts with the %s by %s (%s)\n", what(o), who_in(ol, o.tid).c_str(),
		 !other ? "not ordered by a barrier"
			: o.tid == TID_HOST || act == ACT_HOST
				  ? "not ordered by a wait of the host: a stream or event synchronization, or a "
				    "blocking call"
				  : "not ordered by stream order, an event, or a release/acquire: work running beside it");
	m += s + sym(o.pc);
	fatal("race", m);
}

[[noreturn]] static void use_after_free(const Region *g, uintptr_t a, unsigned n, int fl, uintptr_t pc)
{
	char s[600];
	snprintf(s, sizeof(s), "%s of %u bytes at %s+%lu by %s after %s freed it\n", (fl & A_WRITE) ? "write" : "read",
		 n, g->name.c_str(), (unsigned long)(a - g->lo), who_me().c_str(), who_in(g->freed_by, TID_OP).c_str());
	fatal("use after free", s + sym(pc) + "  freed by the operation issued at\n" +
					   sym((uintptr_t)actors[g->freed_by].site));
}

static void shadow(Region *g);
void emu_device_sync();
static void cells(Region *g, uintptr_t a, unsigned n, int fl, uintptr_t pc, const Rec &me);


/* ------------------------------------- row fetches, host-memory accounting */

static std::vector<emu_host_read> host_log;
static std::vector<emu_fetch_info> fetch_rows(1); /* by tag; [0]: none */
static std::map<std::tuple<uint32_t, unsigned, unsigned, uint32_t>, uint32_t> fetch_tags;

/* The lane's execution count of instruction site pc within its current fetch. */
static uint32_t occurrence(emu_fiber *f, uintptr_t pc)
{
	if (!f->ftag)
		return 0;
	if (!f->occ)
		f->occ = new std::unordered_map<uintptr_t, uint32_t>();
	return (*(std::unordered_map<uintptr_t, uint32_t> *)f->occ)[pc]++;
}

static void host_read(emu_fiber *f, const Region *g, uintptr_t a, unsigned n, uintptr_t pc)
{
	if (f->ftag) {
		/* a fetch may read the 32-byte sectors that hold its row's bytes */
		const uintptr_t lo = f->flo & ~(uintptr_t)31, hi = (f->fhi + 31) & ~(uintptr_t)31;
		if (a < lo || a + n > hi) {
			char s[400];
			snprintf(s, sizeof(s),
				 "read of %u bytes at %s+%ld by %s while fetching the row at %s+%ld (%lu bytes): "
				 "outside the 32-byte sectors [%+ld, %+ld) that hold the row\n",
				 n, g->name.c_str(), (long)(a - g->lo), who(f->gtid).c_str(), g->name.c_str(),
				 (long)(f->flo - g->lo), (unsigned long)(f->fhi - f->flo), (long)(lo - f->flo),
				 (long)(hi - f->flo));
			fatal("fetch window", s + sym(pc));
		}
	}
	if (!g->watch)
		return;
	emu_host_read r;
	r.tag = f->ftag;
	r.warp = f->blk->lin * ((f->blk->n + 31) / 32) + f->tid / 32;
	r.pc = pc;
	r.occ = occurrence(f, pc);
	r.lane = f->tid % 32;
	r.addr = a;
	r.n = n;
	host_log.push_back(r);
}

void emu_fetch_begin(const void *src, uint64_t len, unsigned group_threads)
{
	Inside in;
	emu_fiber *f = emu_cur;
	if (!f)
		return;
	if (f->ftag)
		fatal("fetch window", "emu_fetch_begin inside a fetch\n");
	const unsigned grp = group_threads ? f->tid / group_threads : 0;
	auto key = std::make_tuple(launch_id, f->blk->lin, grp, ++f->fseq);
	auto it = fetch_tags.find(key);
	if (it == fetch_tags.end()) {
		it = fetch_tags.emplace(key, (uint32_t)fetch_rows.size()).first;
		fetch_rows.push_back({ (uintptr_t)src, (uintptr_t)src + len });
	}
	f->ftag = it->second;
	f->flo = (uintptr_t)src;
	f->fhi = (uintptr_t)src + len;
	if (f->occ)
		((std::unordered_map<uintptr_t, uint32_t> *)f->occ)->clear();
}

void emu_fetch_end()
{
	if (emu_cur)
		emu_cur->ftag = 0;
}

void emu_host_watch(const void *p, int on)
{
	Inside in;
	Region *r = region_at((uintptr_t)p);
	if (!r) {
		fprintf(stderr, "emu_host_watch: %p is not emulator memory\n", p);
		_exit(2);
	}
	r->watch = on;
}

std::vector<emu_host_read> emu_host_take(std::vector<emu_fetch_info> *fetches)
{
	Inside in; /* the caller waits for the reads it watches before it stops watching */
	std::vector<emu_host_read> v;
	v.swap(host_log);
	if (fetches)
		*fetches = fetch_rows;
	fetch_rows.assign(1, emu_fetch_info{ 0, 0 });
	fetch_tags.clear();
	return v;
}

static void check(uintptr_t a, unsigned n, int fl, uintptr_t pc)
{
	emu_fiber *f = emu_cur;
	if (a >= (uintptr_t)f->stack_lo && a < (uintptr_t)f->stack_hi)
		return;
	Region *g = region_at(a);
	if (!g)
		g = region_at(a + n - 1);
	if (!g)
		return;
	if (a < g->lo || a + n > g->hi) {
		char s[300];
		snprintf(s, sizeof(s), "%s of %u bytes at %s%+ld (the region has %lu bytes) by %s\n",
			 (fl & A_WRITE) ? "write" : "read", n, g->name.c_str(), (long)(a - g->lo),
			 (unsigned long)(g->hi - g->lo), who(f->gtid).c_str());
		fatal("out of bounds", s + sym(pc));
	}
	if (!(fl & (A_WRITE | A_ATOMIC)) && !g->shared && (f->ftag || g->watch))
		host_read(f, g, a, n, pc);
	if (g->map_bytes)
		return; /* sparse: bounds only */
	if (g->freed_by)
		use_after_free(g, a, n, fl, pc);
	shadow(g);
	const int write = (fl & (A_WRITE | A_ATOMIC)) != 0, atomic = (fl & A_ATOMIC) != 0;
	Rec me;
	me.tid = f->gtid;
	me.bgen = f->blk->bgen;
	me.clk = f->wvc[f->tid % 32];
	me.pc = (uint32_t)pc;
	me.lf = launch_id << 2 | (write ? 2u : 0u) | (atomic ? 1u : 0u);
	cells(g, a, n, fl, pc, me);
}

/* The shadow of a region, made at its first checked access (large regions:
 * mapped, so that untouched pages cost nothing). */
static void shadow(Region *g)
{
	if (g->cells)
		return;
	const size_t N = g->hi - g->lo ? g->hi - g->lo : 1;
	if (N >= (1u << 20)) {
		const size_t cb = (N * sizeof(Cell) + 4095) / 4096 * 4096, pb = (N + 4095) / 4096 * 4096;
		void *c = mmap(nullptr, cb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		void *q = mmap(nullptr, pb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (c == MAP_FAILED || q == MAP_FAILED) {
			fprintf(stderr, "emu: cannot map the shadow of %s (%zu bytes)\n", g->name.c_str(), N);
			_exit(2);
		}
		g->cells = (Cell *)c;
		g->pend = (uint8_t *)q;
		g->shadow_map = cb;
	} else {
		g->cells = (Cell *)calloc(N, sizeof(Cell));
		g->pend = (uint8_t *)calloc(N, 1);
	}
}

/* Checks the access `me` of [a, a + n) against the region's shadow and
 * records it. */
static void cells(Region *g, uintptr_t a, unsigned n, int fl, uintptr_t pc, const Rec &me)
{
	const int write = (fl & (A_WRITE | A_ATOMIC)) != 0, atomic = (fl & A_ATOMIC) != 0;
	for (unsigned i = 0; i < n; i++) {
		const size_t k = a - g->lo + i;
		Cell &c = g->cells[k];
		if (g->pend[k] && !(fl & A_ASYNC_DONE)) {
			char s[300];
			snprintf(s, sizeof(s),
				 "%s of %s+%zu by %s while a cp.async into it is still in flight (no cp.async.wait_group "
				 "completed its group, or no barrier after it)\n",
				 write ? "write" : "read", g->name.c_str(), k, who_me().c_str());
			fatal("cp.async", s + sym(pc));
		}
		if (!(atomic && (c.w.lf & 1)) && !ordered(c.w))
			race(g, a + i, n, write, atomic, pc, c.w);
		if (write) {
			if (!(atomic && (c.r1.lf & 1)) && !ordered(c.r1))
				race(g, a + i, n, write, atomic, pc, c.r1);
			if (!(atomic && (c.r2.lf & 1)) && !ordered(c.r2))
				race(g, a + i, n, write, atomic, pc, c.r2);
			c.w = me;
			c.r1.tid = c.r2.tid = 0;
		} else if (!c.r1.tid || (c.r1.tid == me.tid && c.r1.lf >> 2 == me.lf >> 2) || ordered(c.r1)) {
			c.r1 = me;
		} else {
			c.r2 = me; /* two concurrent readers are remembered, more are not */
		}
		if (fl & A_ASYNC_ISSUE)
			g->pend[k] = 1;
		if (fl & A_ASYNC_DONE)
			g->pend[k] = 0;
	}
}

/* An access of the host or of a copy (act says which) to region memory:
 * checked and recorded like a thread's. The host's accesses matter only
 * while work it issued may still run (host_pending). */
static void other_access(uintptr_t a, size_t n, int fl, uintptr_t pc)
{
	Region *g = region_at(a);
	if (!g)
		g = n ? region_at(a + n - 1) : nullptr;
	if (!g || g->shared || g->map_bytes)
		return;
	if (a < g->lo || a + n > g->hi) {
		if (act == ACT_HOST)
			return; /* the host's own business (a redzone is host memory to it) */
		char s[300];
		snprintf(s, sizeof(s), "%s of %zu bytes at %s%+ld (the region has %lu bytes) by %s\n",
			 (fl & A_WRITE) ? "write" : "read", n, g->name.c_str(), (long)(a - g->lo),
			 (unsigned long)(g->hi - g->lo), who_me().c_str());
		fatal("out of bounds", s + sym(pc));
	}
	if (g->freed_by)
		use_after_free(g, a, (unsigned)n, fl, pc);
	if (act == ACT_HOST && !g->pinned) {
		/* Host code cannot touch device memory on a GPU; a test that reads
		 * or writes it directly stands for a blocking copy: the device
		 * finishes its work first. */
		emu_device_sync();
		return;
	}
	shadow(g);
	Rec me;
	me.tid = act == ACT_HOST ? TID_HOST : TID_OP;
	me.bgen = 0;
	me.clk = act == ACT_HOST ? (uint32_t)host_epoch : 0;
	me.pc = (uint32_t)pc;
	me.lf = (act == ACT_HOST ? 0u : act_launch) << 2 | ((fl & A_WRITE) ? 2u : 0u);
	for (size_t off = 0; off < n; off += 1u << 30) /* cells() counts in unsigned */
		cells(g, a + off, (unsigned)std::min<size_t>(n - off, 1u << 30), fl & A_WRITE, pc, me);
}

static inline void access_now(const void *p, unsigned n, int fl, const void *pc);

/* A host thread's access: checked while work it may race with is pending. */
static void host_access(const void *p, unsigned n, int fl, const void *pc)
{
	if (!__atomic_load_n(&host_pending, __ATOMIC_RELAXED) || tl_inside || tl_nocheck)
		return;
	Inside in;
	if (host_pending && !reporting)
		other_access((uintptr_t)p, n, fl, (uintptr_t)pc);
}

/* The hooks' entry: nothing while the emulator's own code runs. */
static inline void access(const void *p, unsigned n, int fl, const void *pc)
{
	if (!tl_device) {
		host_access(p, n, fl, pc);
		return;
	}
	if (quiet)
		return;
	access_now(p, n, fl, pc);
}

static inline void access_now(const void *p, unsigned n, int fl, const void *pc)
{
	emu_fiber *f = emu_cur;
	if (reporting || !f)
		return;
	if (--f->budget <= 0) {
		f->budget = 1 + (int64_t)(rng() % (2 * (uint64_t)emu_preempt_mean));
		yield();
	}
	check((uintptr_t)p, n, fl, (uintptr_t)pc);
}

/* Threads stalled at an atomic (emu_stall_rate): out of the runnable set
 * until the scheduler has made `until` switches. */
static std::vector<std::pair<uint64_t, emu_fiber *>> stalled;
static uint64_t sched_steps;

static FiberSync &fsync(emu_fiber *f)
{
	if (!f->sync)
		f->sync = new FiberSync();
	return *(FiberSync *)f->sync;
}

/* What thread f knows now: its launch's start, what it acquired, its warp's
 * lanes up to their clocks in f's view, its block up to its last barrier. */
static std::shared_ptr<Know> snapshot(emu_fiber *f)
{
	auto k = std::make_shared<Know>(*actors[launch_id].start);
	if (f->sync)
		k->merge(((FiberSync *)f->sync)->acq);
	const uint64_t L = launch_id;
	const unsigned wpb = (f->blk->n + 31) / 32;
	std::array<uint32_t, 32> w;
	memcpy(w.data(), f->wvc, sizeof(f->wvc));
	Know me;
	me.warps[L << 32 | (f->blk->lin * wpb + f->tid / 32)] = w;
	me.blocks[L << 32 | f->blk->lin] = f->blk->bgen;
	k->merge(me);
	return k;
}

void emu_fence()
{
	Inside in;
	emu_fiber *f = emu_cur;
	if (!f)
		return;
	FiberSync &s = fsync(f);
	if (s.has_pend) { /* the atomics read before the fence acquire */
		s.acq.merge(s.pend);
		s.pend = Know();
		s.has_pend = false;
	}
	s.rel = snapshot(f); /* the atomics written after it publish */
}

void emu_atomic_access(const void *p, unsigned size, const void *pc, int kind)
{
	if (reporting)
		return;
	if (!tl_device) {
		host_access(p, size, A_WRITE, pc);
		return;
	}
	Inside in;
	if (emu_stall_rate && rng() % (uint64_t)emu_stall_rate == 0) {
		emu_fiber *f = emu_cur; /* descheduled for a long while, as a warp may be on a GPU */
		run_del(f);
		stalled.push_back({ sched_steps + 200 + rng() % 2000, f });
		yield();
	} else if (rng() & 1)
		yield(); /* atomics are where interleavings matter most */
	check((uintptr_t)p, size, A_ATOMIC, (uintptr_t)pc);
	emu_fiber *f = emu_cur;
	FiberSync *fs = (FiberSync *)f->sync;
	auto it = syncvars.find((uintptr_t)p);
	if (kind != EMU_AT_STORE && it != syncvars.end()) { /* acquired at the next fence */
		FiberSync &s = fsync(f);
		s.pend.merge(*it->second);
		s.has_pend = true;
	}
	if (kind == EMU_AT_STORE) { /* a new publication, or none */
		if (fs && fs->rel)
			syncvars[(uintptr_t)p] = fs->rel;
		else if (it != syncvars.end())
			syncvars.erase(it);
	} else if (kind == EMU_AT_RMW && fs && fs->rel) { /* continues the publication there */
		if (it == syncvars.end()) {
			syncvars[(uintptr_t)p] = fs->rel;
		} else {
			auto k = std::make_shared<Know>(*it->second);
			k->merge(*fs->rel);
			it->second = k;
		}
	}
}

/* ------------------------------------------------- barriers, collectives */

static const char *kind_name(int k)
{
	static const char *n[] = { "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
				   "__ballot_sync/__any_sync/__all_sync", "__syncwarp", "__reduce_or_sync" };
	return k >= 0 && k < 7 ? n[k] : "?";
}

static void complete(emu_block *b, Coll &c)
{
	for (unsigned l = 0; l < 32; l++) {
		if (!((c.mask >> l) & 1))
			continue;
		uint64_t r = 0;
		int src = -1;
		switch (c.kind) {
		case EMU_SHFL_IDX: src = (int)(c.arg[l] & 31); break;
		case EMU_SHFL_UP: src = c.arg[l] > l ? (int)l : (int)(l - c.arg[l]); break;
		case EMU_SHFL_DOWN: src = l + c.arg[l] > 31 ? (int)l : (int)(l + c.arg[l]); break;
		case EMU_SHFL_XOR: src = (int)((l ^ c.arg[l]) & 31); break;
		case EMU_BALLOT:
			for (unsigned q = 0; q < 32; q++)
				if (((c.mask >> q) & 1) && c.val[q])
					r |= 1ull << q;
			break;
		case EMU_REDUCE_OR:
			for (unsigned q = 0; q < 32; q++)
				if ((c.mask >> q) & 1)
					r |= (uint32_t)c.val[q];
			break;
		default: break;
		}
		if (src >= 0)
			r = ((c.mask >> src) & 1) ? c.val[src] : (rng() | 0x8000000000000000ull); /* outside: poison */
		c.who[l]->result = r;
	}
	if (c.kind == EMU_SYNCWARP) {
		bool acq = false; /* what any of them acquired, all of them know */
		for (unsigned l = 0; l < 32; l++)
			acq |= ((c.mask >> l) & 1) && c.who[l]->sync && !((FiberSync *)c.who[l]->sync)->acq.empty();
		if (acq) {
			Know u;
			for (unsigned l = 0; l < 32; l++)
				if (((c.mask >> l) & 1) && c.who[l]->sync)
					u.merge(((FiberSync *)c.who[l]->sync)->acq);
			for (unsigned l = 0; l < 32; l++)
				if ((c.mask >> l) & 1)
					fsync(c.who[l]).acq = u;
		}
		uint32_t v[32] = { 0 };
		for (unsigned l = 0; l < 32; l++)
			if ((c.mask >> l) & 1)
				for (unsigned q = 0; q < 32; q++)
					v[q] = std::max(v[q], c.who[l]->wvc[q]);
		for (unsigned l = 0; l < 32; l++)
			if ((c.mask >> l) & 1) {
				memcpy(c.who[l]->wvc, v, sizeof(v));
				c.who[l]->wvc[l]++;
			}
	}
	for (unsigned l = 0; l < 32; l++)
		if (((c.mask >> l) & 1) && c.who[l] != emu_cur)
			wake(c.who[l]);
	(void)b;
	c.used = 0;
}

uint64_t emu_warp_op(int kind, unsigned mask, uint64_t v, unsigned arg, const void *site)
{
	Inside in;
	emu_fiber *f = emu_cur;
	const unsigned lane = f->tid % 32;
	Warp &w = f->blk->warps[f->tid / 32];
	char s[400];
	if (!((mask >> lane) & 1)) {
		snprintf(s, sizeof(s), "%s with mask 0x%08x called by %s, which is not in the mask\n", kind_name(kind),
			 mask, who(f->gtid).c_str());
		fatal("warp collective", s + sym((uintptr_t)site));
	}
	Coll *c = nullptr;
	for (auto &e : w.c)
		if (e.used && ((e.mask >> lane) & 1) && !((e.arrived >> lane) & 1)) {
			c = &e;
			break;
		}
	if (c && (c->mask != mask || c->kind != kind || c->site != site)) {
		unsigned o = (unsigned)__builtin_ctz(c->arrived);
		snprintf(s, sizeof(s),
			 "warp collectives do not pair up: %s calls %s with mask 0x%08x at\n%s  while lane %u waits in "
			 "%s with mask 0x%08x at\n",
			 who(f->gtid).c_str(), kind_name(kind), mask, sym((uintptr_t)site).c_str(), o,
			 kind_name(c->kind), c->mask);
		fatal("warp collective", s + sym((uintptr_t)c->site));
	}
	if (!c) {
		for (auto &e : w.c)
			if (e.used && (e.mask & mask)) {
				snprintf(s, sizeof(s),
					 "%s calls %s with mask 0x%08x at\n%s  which overlaps a pending %s with mask "
					 "0x%08x at\n",
					 who(f->gtid).c_str(), kind_name(kind), mask, sym((uintptr_t)site).c_str(),
					 kind_name(e.kind), e.mask);
				fatal("warp collective", s + sym((uintptr_t)e.site));
			}
		for (auto &e : w.c)
			if (!e.used) {
				c = &e;
				break;
			}
		if (!c)
			fatal("warp collective", "more than 4 concurrent collectives in one warp\n");
		c->used = 1;
		c->kind = kind;
		c->mask = mask;
		c->arrived = 0;
		c->site = site;
	}
	c->val[lane] = v;
	c->arg[lane] = arg;
	c->who[lane] = f;
	c->arrived |= 1u << lane;
	if (c->arrived == c->mask) {
		complete(f->blk, *c);
		return f->result;
	}
	wait_here(kind, site);
	return f->result;
}

int emu_block_op(int kind, int pred, const void *site)
{
	Inside in;
	emu_fiber *f = emu_cur;
	emu_block *b = f->blk;
	if (b->bar_arrived == 0) {
		b->bar_kind = kind;
		b->bar_site = site;
		b->bar_acc = kind == EMU_BAR_AND ? 1u : 0u;
	} else if (b->bar_site != site || b->bar_kind != kind) {
		std::string m = "divergent __syncthreads: " + who(f->gtid) + " waits at\n" + sym((uintptr_t)site) +
				"  while " + who(b->bar_wait[0]->gtid) + " waits at\n" + sym((uintptr_t)b->bar_site);
		fatal("barrier", m);
	}
	if (kind == EMU_BAR_OR)
		b->bar_acc |= pred != 0;
	else if (kind == EMU_BAR_AND)
		b->bar_acc &= pred != 0;
	else if (kind == EMU_BAR_COUNT)
		b->bar_acc += pred != 0;
	if (++b->bar_arrived == b->n) {
		b->bgen++;
		bool acq = false; /* what any thread of the block acquired, all of them know */
		for (auto &x : b->f)
			acq |= x.sync && !((FiberSync *)x.sync)->acq.empty();
		if (acq) {
			Know u;
			for (auto &x : b->f)
				if (x.sync)
					u.merge(((FiberSync *)x.sync)->acq);
			for (auto &x : b->f)
				if (x.state != 2)
					fsync(&x).acq = u;
		}
		for (emu_fiber *x : b->bar_wait) {
			x->result = b->bar_acc;
			wake(x);
		}
		b->bar_wait.clear();
		b->bar_arrived = 0;
		return (int)b->bar_acc;
	}
	b->bar_wait.push_back(f);
	wait_here(100 + kind, site);
	return (int)f->result;
}

/* --------------------------------------------------------------- cp.async */

static CpaQ &cpq()
{
	if (!emu_cur->cpa)
		emu_cur->cpa = new CpaQ();
	return *(CpaQ *)emu_cur->cpa;
}

static void cp_async(void *smem, const void *gmem, unsigned bytes, const void *site);

void emu_cp_async(void *smem, const void *gmem, unsigned bytes, const void *site)
{
	Inside in;
	(void)site; /* the wrapper's return address: not its call site once inlined */
	cp_async(smem, gmem, bytes, __builtin_return_address(0));
}

void emu_cp_async_pred(int pred, void *smem, const void *gmem, unsigned bytes)
{
	Inside in;
	const void *site = __builtin_return_address(0);
	if (pred)
		cp_async(smem, gmem, bytes, site);
	else if (emu_cur)
		(void)occurrence(emu_cur, (uintptr_t)site); /* the lane executed it, predicated off */
}

static void cp_async(void *smem, const void *gmem, unsigned bytes, const void *site)
{
	char s[300];
	if ((bytes != 4 && bytes != 8 && bytes != 16) || ((uintptr_t)smem % bytes) || ((uintptr_t)gmem % bytes)) {
		snprintf(s, sizeof(s), "cp.async of %u bytes from %p to %p by %s: size must be 4/8/16 and both "
			 "addresses aligned to it\n", bytes, gmem, smem, who(emu_cur->gtid).c_str());
		fatal("cp.async", s + sym((uintptr_t)site));
	}
	Region *d = region_at((uintptr_t)smem);
	if (!d || d->name.find("shared") == std::string::npos) {
		snprintf(s, sizeof(s), "cp.async destination %p is not shared memory (%s)\n", smem, who(emu_cur->gtid).c_str());
		fatal("cp.async", s + sym((uintptr_t)site));
	}
	access_now(gmem, bytes, 0, site);
	check((uintptr_t)smem, bytes, A_WRITE | A_ASYNC_ISSUE, (uintptr_t)site);
	for (unsigned i = 0; i < bytes; i++)
		((uint8_t *)smem)[i] = (uint8_t)(rng() | 0x80); /* in flight: garbage until waited for */
	cpq().open.push_back({ (uint8_t *)smem, (const uint8_t *)gmem, bytes });
}

void emu_cp_async_commit()
{
	Inside in;
	if (!emu_cur)
		return;
	CpaQ &q = cpq();
	q.groups.push_back(std::move(q.open));
	q.open.clear();
}

static void cpa_done(const std::vector<CpaCopy> &g, const void *site)
{
	for (const CpaCopy &c : g) {
		memcpy(c.dst, c.src, c.n);
		check((uintptr_t)c.dst, c.n, A_WRITE | A_ASYNC_DONE, (uintptr_t)site);
	}
}

void emu_cp_async_wait(int n, const void *site)
{
	Inside in;
	if (!emu_cur)
		return;
	CpaQ &q = cpq();
	while ((int)q.groups.size() > n) {
		cpa_done(q.groups.front(), site);
		q.groups.pop_front();
	}
	/* the newest n may or may not have landed, oldest first */
	while (!q.groups.empty() && (rng() & 1)) {
		cpa_done(q.groups.front(), site);
		q.groups.pop_front();
	}
}

/* -------------------------------------------------------------- launches */

/* The globals a kernel and the checks read (gridDim, blockDim, the launch
 * of the running fiber), set to launch L's. */
static void enter(const Launch *L)
{
	emu_grid_dim = L->grid;
	emu_block_dim = L->block;
	launch_id = L->id;
}

static std::string stream_name(uint32_t s);

static std::string kernel_name(const void *k)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "addr2line -C -f -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(), (unsigned long)k);
	std::string out;
	if (FILE *f = popen(cmd, "r")) {
		char buf[512];
		if (fgets(buf, sizeof(buf), f))
			out = buf;
		pclose(f);
	}
	while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
		out.pop_back();
	return out.empty() || out == "??" ? "a kernel" : "kernel " + out;
}

static std::string who_in(uint32_t launch, uint32_t gtid)
{
	reporting = 1;
	if (!gtid)
		return "nobody";
	if (gtid == TID_HOST)
		return "the host";
	const Actor &a = actors[launch < actors.size() ? launch : 0];
	if (gtid == TID_OP)
		return std::string(a.name) + " on " + stream_name(a.stream);
	unsigned b = (gtid - 1) / a.bd, t = (gtid - 1) % a.bd;
	char s[128];
	snprintf(s, sizeof(s), "block (%u,%u) thread %u (warp %u lane %u)", b % a.grid.x, b / a.grid.x, t, t / 32,
		 t % 32);
	std::string r = s;
	if (running.size() > 1 || launch != launch_id || a.stream != S_DIRECT)
		r += " of " + (a.kernel ? kernel_name(a.kernel) : std::string(a.name)) +
		     (a.stream == S_DIRECT ? "" : " on " + stream_name(a.stream));
	return r;
}

static void fiber_main()
{
	emu_fiber *f = emu_cur;
	f->blk->L->job->run();
	f = emu_cur;
	quiet++; /* never undone: the thread ends here */
	if (f->cpa) {
		CpaQ *q = (CpaQ *)f->cpa;
		q->groups.push_back(std::move(q->open));
		for (auto &g : q->groups)
			cpa_done(g, nullptr);
		delete q;
		f->cpa = nullptr;
	}
	f->state = 2;
	run_del(f);
	yield();
	abort(); /* never resumed */
}

static void block_start(emu_block *b, Launch *L, unsigned lin)
{
	enter(L);
	const size_t smem = L->smem;
	const unsigned bd = emu_block_dim.x * emu_block_dim.y * emu_block_dim.z;
	b->L = L;
	b->lin = lin;
	b->idx = emu_dim3(lin % emu_grid_dim.x, lin / emu_grid_dim.x, 1);
	b->n = bd;
	b->live = bd;
	b->bgen = 0;
	b->bar_arrived = 0;
	b->bar_wait.clear();
	b->warps.assign((bd + 31) / 32, Warp());
	char name[64];
	snprintf(name, sizeof(name), "dynamic shared memory of block %u", lin);
	b->dyn = region_new(smem, 0, name, 1);
	b->dyn->shared = 1;
	b->slots.clear();
	b->f.assign(bd, emu_fiber());
	for (unsigned t = 0; t < bd; t++) {
		emu_fiber &x = b->f[t];
		memset(&x, 0, sizeof(x));
		x.blk = b;
		x.tid = t;
		x.tidx = emu_dim3(t % emu_block_dim.x, (t / emu_block_dim.x) % emu_block_dim.y,
				  t / (emu_block_dim.x * emu_block_dim.y));
		x.gtid = 1 + lin * bd + t;
		x.budget = 1 + (int64_t)(rng() % (2 * (uint64_t)emu_preempt_mean));
		x.wvc[t % 32] = 1; /* its own clock: accesses before any __syncwarp are unordered */
		x.stack_lo = stack_get();
		x.stack_hi = x.stack_lo + STACK;
		/* initial frame for emu_switch: csr slot, 6 registers, fiber_main, a null return */
		uint64_t *sp = (uint64_t *)x.stack_hi;
		*--sp = 0;
		*--sp = (uint64_t)(uintptr_t)&fiber_main;
		for (int i = 0; i < 6; i++)
			*--sp = 0;
		*--sp = 0x037f00001f80ull; /* mxcsr 0x1f80, x87 control word 0x37f */
		x.sp = sp;
		x.run_pos = -1;
		run_add(&x);
		emu_stat_fibers++;
	}
}

static void block_end(emu_block *b)
{
	for (auto &x : b->f) {
		stack_pool.push_back(x.stack_lo);
		delete (std::unordered_map<uintptr_t, uint32_t> *)x.occ;
		x.occ = nullptr;
		if (x.sync) { /* what it acquired passes to the work after its launch */
			b->L->acq.merge(((FiberSync *)x.sync)->acq);
			delete (FiberSync *)x.sync;
			x.sync = nullptr;
		}
	}
	region_free(b->dyn);
	for (auto &p : b->slots)
		region_free(p.second);
	b->slots.clear();
	b->f.clear();
}

[[noreturn]] static void deadlock()
{
	std::string m = "no thread can run (a hang on the GPU) in";
	for (const Launch *L : running)
		m += std::string(" ") + L->name;
	m += "\n";
	for (const Launch *L : running)
		for (emu_block *b : L->res) {
			enter(L);
			unsigned exited = 0;
			std::vector<std::pair<const void *, int>> seen;
			for (auto &x : b->f) {
				if (x.state == 2) {
					exited++;
					continue;
				}
				bool dup = false;
				for (auto &s : seen)
					dup |= s.first == x.wait_site && s.second == x.wait_kind;
				if (dup || seen.size() > 4)
					continue;
				seen.push_back({ x.wait_site, x.wait_kind });
				m += "  " + who(x.gtid) + " waits in " +
				     (x.wait_kind >= 100 ? std::string("__syncthreads") : std::string(kind_name(x.wait_kind))) +
				     " at\n" + sym((uintptr_t)x.wait_site);
			}
			char s[100];
			snprintf(s, sizeof(s), "  (block %u: %u of %u threads exited)\n", b->lin, exited, b->n);
			m += s;
		}
	emu_cur = nullptr;
	fatal("deadlock", m);
}

static void check_config(const emu_grid_spec &g)
{
	const unsigned bd = g.block.x * g.block.y * g.block.z;
	if (bd == 0 || bd > 1024 || g.grid.x == 0 || g.grid.y == 0 || g.grid.z != 1 || g.grid.y > 65535) {
		fprintf(stderr, "EMU ERROR (launch): invalid configuration grid (%u,%u,%u) block (%u,%u,%u) in %s\n",
			g.grid.x, g.grid.y, g.grid.z, g.block.x, g.block.y, g.block.z, g.name);
		_exit(3);
	}
	if (g.smem > 227 * 1024) {
		fprintf(stderr, "EMU ERROR (launch): %zu bytes of dynamic shared memory exceed an H100's 227 KiB\n",
			g.smem);
		_exit(3);
	}
}

/* ------------------------------------------- streams, their work, the device */

enum { OP_LAUNCH, OP_COPY, OP_SET, OP_FREE, OP_MARK, OP_EXT };
struct Op {
	int kind;
	emu_ext_op *ext = nullptr; /* OP_EXT: a stand-in library's operation */
	uint32_t id, stream, seq;
	std::vector<std::pair<uint32_t, uint32_t>> deps; /* (stream, seq) that must be done first */
	std::shared_ptr<Know> host;                       /* what the host knew when it issued it */
	emu_job_base *job = nullptr;
	emu_dim3 g, b;
	size_t smem = 0;
	void *dst = nullptr;
	const void *src = nullptr;
	size_t n = 0;
	int val = 0;
	std::vector<uint8_t> snap; /* a pageable source, taken at the call */
};
struct emu_stream {
	uint32_t id;
	int nonblocking;
	int dev, legacy; /* its device; the device's legacy default stream */
	uint32_t issued, done;
	std::deque<Op *> q;
	Op *busy;                   /* its launch now running */
	std::vector<uint32_t> ops;  /* launch id of each seq (index seq - 1) */
};
struct emu_event {
	uint32_t stream, seq; /* its record: that operation (seq 0: never recorded) */
};
static std::vector<emu_stream *> streams; /* by id */
static std::shared_ptr<Know> host_snap;   /* host_know, shared by the work issued until it changes */
static int tombstones;                    /* regions freed in stream order, kept until a device sync */

/* Devices: each host thread has a current one (cudaSetDevice); streams,
 * the legacy stream and device-wide waits belong to a device. Memory is
 * one address space (peer access everywhere), as the tests need. */
static thread_local int tl_dev;
static std::vector<uint32_t> legacy_ids; /* device -> its legacy stream */
static std::vector<Op *> ext_active;     /* OP_EXT operations started, not done */

static void streams_init()
{
	if (!streams.empty())
		return;
	streams.resize(S_LEGACY + 1, nullptr);
	for (uint32_t i = S_DIRECT; i <= S_LEGACY; i++)
		streams[i] = new emu_stream{ i, 0, 0, i == S_LEGACY, 0, 0, {}, nullptr, {} };
	legacy_ids.assign(1, S_LEGACY);
}

static emu_stream *legacy_of(int dev)
{
	streams_init();
	if ((size_t)dev >= legacy_ids.size())
		legacy_ids.resize((size_t)dev + 1, 0);
	if (!legacy_ids[(size_t)dev]) {
		emu_stream *s = new emu_stream{ (uint32_t)streams.size(), 0, dev, 1, 0, 0, {}, nullptr, {} };
		streams.push_back(s);
		legacy_ids[(size_t)dev] = s->id;
	}
	return streams[legacy_ids[(size_t)dev]];
}

void emu_set_device(int d)
{
	tl_dev = d;
}

int emu_get_device()
{
	return tl_dev;
}

static std::string stream_name(uint32_t s)
{
	if (s == S_DIRECT)
		return "the host's own launch";
	if (s == S_LEGACY)
		return "the legacy default stream";
	if (s < streams.size() && streams[s] && streams[s]->legacy)
		return "the legacy default stream of device " + std::to_string(streams[s]->dev);
	return "stream " + std::to_string(s - S_LEGACY) +
	       (s < streams.size() && streams[s] && streams[s]->dev ? " of device " + std::to_string(streams[s]->dev) : "");
}

emu_stream *emu_stream_new(int nonblocking)
{
	Inside in;
	streams_init();
	emu_stream *s = new emu_stream{ (uint32_t)streams.size(), nonblocking, tl_dev, 0, 0, 0, {}, nullptr, {} };
	streams.push_back(s);
	return s;
}

uint32_t emu_stream_issued(emu_stream *s)
{
	Inside in;
	return s ? s->issued : legacy_of(tl_dev)->issued;
}

void emu_stream_destroy(emu_stream *) {} /* its work still runs; the record stays for reports */

static uint32_t new_launch()
{
	launch_seq = (launch_seq + 1) & 0x3fffffff;
	if (actors.size() <= launch_seq)
		actors.resize(launch_seq + 1);
	actors[launch_seq] = Actor();
	return launch_seq;
}

static void update_pending()
{
	host_pending = 0;
	for (const emu_stream *s : streams)
		if (s && s->issued > host_know.at(s->id))
			host_pending = 1;
}

static void host_learns(const Know &k)
{
	host_know.merge(k);
	host_know.prune();
	host_snap.reset();
	update_pending();
}

static Op *issue(emu_stream *s, int kind, const char *name, const void *site)
{
	streams_init();
	if (!s)
		s = legacy_of(tl_dev);
	Op *o = new Op();
	o->kind = kind;
	o->id = new_launch();
	o->stream = s->id;
	o->seq = ++s->issued;
	Actor &a = actors[o->id];
	a.stream = s->id;
	a.seq = o->seq;
	a.epoch = ++host_epoch;
	a.name = name;
	a.site = site;
	if (s->legacy) { /* after all earlier work of the device's blocking streams */
		for (const emu_stream *t : streams)
			if (t && t->id != S_DIRECT && !t->legacy && t->dev == s->dev && !t->nonblocking && t->issued)
				o->deps.push_back({ t->id, t->issued });
	} else if (!s->nonblocking && s->id != S_DIRECT) {
		const emu_stream *l = legacy_of(s->dev);
		if (l->issued)
			o->deps.push_back({ l->id, l->issued });
	}
	if (!host_snap)
		host_snap = std::make_shared<Know>(host_know);
	o->host = host_snap;
	s->q.push_back(o);
	s->ops.push_back(o->id);
	host_pending = 1;
	emu_stat_async_ops++;
	return o;
}

static const Know &exit_of(uint32_t stream, uint32_t seq)
{
	return *actors[streams[stream]->ops[seq - 1]].exit;
}

static bool op_ready(const Op *o)
{
	const emu_stream *s = streams[o->stream];
	if (s->busy || s->done + 1 != o->seq)
		return false;
	for (const auto &d : o->deps)
		if (streams[d.first]->done < d.second)
			return false;
	return true;
}

static void op_done(Op *o, const Know *acq)
{
	emu_stream *s = streams[o->stream];
	auto k = std::make_shared<Know>(*actors[o->id].start);
	if (acq)
		k->merge(*acq);
	k->set(o->stream, o->seq);
	k->prune();
	actors[o->id].exit = k;
	s->done = o->seq;
	s->busy = nullptr;
	s->q.pop_front();
	delete o;
}

static void finish_launch(Launch *L)
{
	running.erase(std::find(running.begin(), running.end(), L));
	if (!L->op) {
		L->op = (void *)1; /* a direct launch: emu_run_grids collects it */
		return;
	}
	op_done((Op *)L->op, &L->acq);
	if (L->owned)
		delete L->job;
	delete L;
}

static void start_blocks(Launch *L)
{
	while (L->next < L->nblocks && L->res.size() < L->max_res) {
		L->res.push_back(new emu_block());
		block_start(L->res.back(), L, L->next++);
	}
}

/* Runs operation o (the head of its stream, ready): a copy, memset, free
 * or marker at once, a launch by adding it to the running ones. */
static void op_start(Op *o)
{
	emu_stream *s = streams[o->stream];
	auto k = std::make_shared<Know>(*o->host);
	if (o->seq > 1)
		k->merge(exit_of(o->stream, o->seq - 1));
	for (const auto &d : o->deps)
		if (d.second)
			k->merge(exit_of(d.first, d.second));
	k->prune();
	actors[o->id].start = k;
	if (o->kind == OP_LAUNCH) {
		Launch *L = new Launch();
		L->job = o->job;
		L->grid = o->g;
		L->block = o->b;
		L->smem = o->smem;
		L->name = actors[o->id].name;
		L->id = o->id;
		L->nblocks = o->g.x * o->g.y;
		L->next = 0;
		L->max_res = 1 + (unsigned)(rng() % 3);
		L->owned = 1;
		L->op = o;
		s->busy = o;
		running.push_back(L);
		emu_stat_launches++;
		start_blocks(L);
		return;
	}
	if (o->kind == OP_EXT) { /* busy until its peers are there (ext_one) */
		s->busy = o;
		ext_active.push_back(o);
		o->ext->start();
		return;
	}
	act = ACT_OP;
	act_launch = o->id;
	const uintptr_t site = (uintptr_t)actors[o->id].site;
	if (o->kind == OP_COPY) {
		if (o->snap.empty())
			other_access((uintptr_t)o->src, o->n, 0, site);
		other_access((uintptr_t)o->dst, o->n, A_WRITE, site);
		if (o->n)
			memmove(o->dst, o->snap.empty() ? o->src : o->snap.data(), o->n);
	} else if (o->kind == OP_SET) {
		other_access((uintptr_t)o->dst, o->n, A_WRITE, site);
		memset(o->dst, o->val, o->n);
	} else if (o->kind == OP_FREE) {
		Region *r = region_at((uintptr_t)o->dst);
		other_access(r->lo, r->hi - r->lo, A_WRITE, site); /* nothing may use it unordered */
		r->freed_by = o->id;
		tombstones++;
	}
	act = ACT_HOST;
	op_done(o, nullptr);
}

static bool start_one()
{
	Op *r[64];
	int n = 0;
	for (const emu_stream *s : streams)
		if (s && !s->q.empty() && n < 64 && op_ready(s->q.front()))
			r[n++] = s->q.front();
	if (!n)
		return false;
	op_start(r[rng() % (uint64_t)n]);
	return true;
}

/* The calling host thread's stack (a hang report). */
static std::string host_stack()
{
	void *b[12];
	const int n = backtrace(b, 12);
	std::string m = "the waiting host thread:\n";
	for (int i = 2; i < n; i++) /* past host_stack and device_run */
		m += sym((uintptr_t)b[i]);
	return m;
}

/* Completes one started OP_EXT operation that may complete now. */
static Know ext_acq; /* what the completing operation learns (emu_ext_learn) */
static bool ext_one()
{
	Op *r[64];
	int n = 0;
	for (Op *o : ext_active)
		if (n < 64 && o->ext->ready())
			r[n++] = o;
	if (!n)
		return false;
	Op *o = r[rng() % (uint64_t)n];
	ext_active.erase(std::find(ext_active.begin(), ext_active.end(), o));
	ext_acq = Know();
	act = ACT_OP;
	act_launch = o->id;
	o->ext->complete();
	act = ACT_HOST;
	Know acq = ext_acq;
	op_done(o, &acq);
	return true;
}

void emu_ext_access(uint32_t as_op, const void *p, size_t n, int write, const void *site)
{
	const uint32_t was = act_launch;
	act = ACT_OP;
	act_launch = as_op;
	other_access((uintptr_t)p, n, write ? A_WRITE : 0, (uintptr_t)site);
	act_launch = was;
}

void emu_ext_learn(uint32_t from_op)
{
	ext_acq.merge(*actors[from_op].start);
}

/* One slice of one thread of the running launches; false if none runs. */
static bool sched_one()
{
	if (running.empty())
		return false;
	sched_steps++;
	for (size_t i = 0; i < stalled.size();) /* stalls that are over, or all when nothing else can run */
		if (stalled[i].first <= sched_steps || runnable.empty()) {
			run_add(stalled[i].second);
			stalled[i] = stalled.back();
			stalled.pop_back();
		} else {
			i++;
		}
	if (runnable.empty())
		deadlock();
	emu_fiber *f = runnable[rng() % runnable.size()];
	Launch *L = f->blk->L;
	enter(L);
	emu_cur = f;
	act = ACT_FIBER;
	const int host_quiet = quiet;
	quiet = f->quiet;
	tl_device = 1;
	emu_switch(&sched_sp, f->sp);
	tl_device = 0;
	f->quiet = quiet;
	quiet = host_quiet;
	emu_cur = nullptr;
	act = ACT_HOST;
	if (f->state == 2) {
		emu_block *b = f->blk;
		if (--b->live == 0) {
			block_end(b);
			if (L->next < L->nblocks) {
				block_start(b, L, L->next++);
			} else {
				L->res.erase(std::find(L->res.begin(), L->res.end(), b));
				delete b;
				if (L->res.empty())
					finish_launch(L);
			}
		}
	}
	return true;
}

/* Runs the device until done() (budget < 0) or for about `budget` steps:
 * new work starts at random moments beside the running launches. */
static double now_s()
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* How long a host thread may block on work waiting for other ranks
 * (IBP_EMU_HANG_S, default 10 s) before it is reported as a hang. */
static double hang_limit_s()
{
	static double v = [] {
		const char *e = getenv("IBP_EMU_HANG_S");
		return e && atof(e) > 0 ? atof(e) : 10.0;
	}();
	return v;
}

/* Lets the other host threads in (they may start what this one waits
 * for): the lock released whatever its depth, then taken back. */
static void wait_for_others()
{
	const int depth = tl_inside, q = quiet;
	quiet = 0;
	for (int i = 0; i < depth; i++)
		emu_mu.unlock();
	struct timespec ts = { 0, 200000 };
	nanosleep(&ts, nullptr);
	for (int i = 0; i < depth; i++)
		emu_mu.lock();
	quiet = q;
}

static void device_run(const std::function<bool()> &done, int64_t budget)
{
	double stuck_since = 0;
	for (;;) {
		if (done())
			return;
		if (budget >= 0 && budget-- <= 0)
			return;
		bool started = false;
		if (running.empty() || rng() % 8 == 0)
			started = start_one() || ext_one();
		if (sched_one() || started) {
			stuck_since = 0;
		} else {
			if (budget >= 0)
				return;
			emu_cur = nullptr;
			if (!ext_active.empty() && !stuck_since) /* peers (other host threads) may still come */
				stuck_since = now_s();
			if (!ext_active.empty() && now_s() - stuck_since < hang_limit_s()) {
				wait_for_others();
				continue;
			}
			if (!ext_active.empty()) {
				std::string m = "a host thread blocked for " + std::to_string((int)hang_limit_s()) +
						" s (a synchronous copy, cudaFree, a stream or device synchronization: no "
						"deadline) on work that waits for other ranks, and no rank came. Waiting:\n";
				for (const Op *o : ext_active)
					m += "  " + std::string(actors[o->id].name) + " on " + stream_name(o->stream) +
					     " (issued at " + sym((uintptr_t)actors[o->id].site) + "): " + o->ext->waits_for() + "\n";
				fatal("hang", m + host_stack());
			}
			fatal("stream", "a wait for work that can never run (a stream waiting for an event recorded "
					"after the wait?)\n");
		}
	}
}

/* The device moves on a random amount while the host calls the runtime. */
static void progress()
{
	device_run([] { return false; }, (rng() & 3) == 0 ? 0 : (int64_t)(rng() % 400));
}

static bool emu_memory(const void *p)
{
	Region *r = region_at((uintptr_t)p);
	return r && !r->shared;
}

void emu_enqueue_launch(emu_stream *s, emu_job_base *job, emu_dim3 g, emu_dim3 b, size_t smem, const char *name,
			const void *site, const void *kernel)
{
	Inside in;
	const emu_grid_spec spec = { job, g, b, smem, name };
	check_config(spec);
	Op *o = issue(s, OP_LAUNCH, name, site);
	o->job = job;
	o->g = g;
	o->b = b;
	o->smem = smem;
	Actor &a = actors[o->id];
	a.grid = g;
	a.block = b;
	a.bd = b.x * b.y * b.z;
	a.wpb = (a.bd + 31) / 32;
	a.kernel = kernel;
	progress();
}

void emu_enqueue_copy(emu_stream *s, void *dst, const void *src, size_t n, const void *site)
{
	Inside in;
	Op *o = issue(s, OP_COPY, "cudaMemcpyAsync", site);
	o->dst = dst;
	o->src = src;
	o->n = n;
	if (n && !emu_memory(src)) /* pageable: the runtime stages the source before it returns */
		o->snap.assign((const uint8_t *)src, (const uint8_t *)src + n);
	if (n && !emu_memory(dst)) { /* pageable: the call returns when the copy is done */
		const uint32_t st = o->stream, seq = o->seq;
		device_run([&] { return streams[st]->done >= seq; }, -1);
		Know k = exit_of(st, seq);
		host_learns(k);
		return;
	}
	progress();
}

void emu_enqueue_memset(emu_stream *s, void *p, int v, size_t n, const void *site)
{
	Inside in;
	Op *o = issue(s, OP_SET, "cudaMemsetAsync", site);
	o->dst = p;
	o->val = v;
	o->n = n;
	progress();
}

void emu_enqueue_ext(emu_stream *s, emu_ext_op *op, const char *name, const void *site)
{
	Inside in;
	Op *o = issue(s, OP_EXT, name, site);
	o->ext = op;
	op->id = o->id;
	progress();
}

void emu_nocheck(int d)
{
	tl_nocheck += d;
}

void emu_poll()
{
	Inside in;
	progress();
}

void emu_enqueue_free(emu_stream *s, void *p, const void *site)
{
	Inside in;
	Op *o = issue(s, OP_FREE, "cudaFreeAsync", site);
	o->dst = p;
	progress();
}

emu_event *emu_event_new()
{
	return new emu_event{ 0, 0 };
}

void emu_event_destroy(emu_event *e)
{
	delete e;
}

void emu_event_record(emu_event *e, emu_stream *s, const void *site)
{
	Inside in;
	Op *o = issue(s, OP_MARK, "cudaEventRecord", site);
	e->stream = o->stream;
	e->seq = o->seq;
	progress();
}

void emu_stream_wait_event(emu_stream *s, emu_event *e, const void *site)
{
	Inside in;
	if (!e->seq)
		return; /* never recorded: nothing to wait for, as the runtime does */
	Op *o = issue(s, OP_MARK, "cudaStreamWaitEvent", site);
	o->deps.push_back({ e->stream, e->seq });
	progress();
}

int emu_event_query(emu_event *e)
{
	Inside in;
	progress();
	if (!e->seq)
		return 1;
	if (streams[e->stream]->done < e->seq)
		return 0;
	Know k = exit_of(e->stream, e->seq);
	host_learns(k);
	return 1;
}

void emu_event_sync(emu_event *e)
{
	Inside in;
	if (!e->seq)
		return;
	const uint32_t st = e->stream, seq = e->seq;
	device_run([&] { return streams[st]->done >= seq; }, -1);
	Know k = exit_of(st, seq);
	host_learns(k);
}

int emu_stream_query(emu_stream *s)
{
	Inside in;
	streams_init();
	if (!s)
		s = legacy_of(tl_dev);
	progress();
	if (s->done < s->issued)
		return 0;
	if (s->issued) {
		Know k = exit_of(s->id, s->issued);
		host_learns(k);
	}
	return 1;
}

void emu_stream_sync(emu_stream *s)
{
	Inside in;
	streams_init();
	if (!s)
		s = legacy_of(tl_dev);
	const uint32_t want = s->issued;
	if (s->legacy) { /* the legacy stream waits for its device's blocking streams' work too */
		auto mine = [&](const emu_stream *t) {
			return t && t->id != S_DIRECT && t->dev == s->dev && (t->legacy || !t->nonblocking);
		};
		device_run([&] {
			for (const emu_stream *t : streams)
				if (mine(t) && t->done < t->issued)
					return false;
			return true;
		}, -1);
		for (const emu_stream *t : streams)
			if (mine(t) && t->issued) {
				Know k = exit_of(t->id, t->issued);
				host_learns(k);
			}
		return;
	}
	device_run([&] { return s->done >= want; }, -1);
	if (want) {
		Know k = exit_of(s->id, want);
		host_learns(k);
	}
}

void emu_device_sync()
{
	Inside in;
	if (!host_pending && !tombstones)
		return; /* the host knows all its work is done */
	streams_init();
	const int dev = tl_dev; /* the current device's work only, as the runtime's */
	device_run([dev] {
		for (const emu_stream *t : streams)
			if (t && t->dev == dev && t->done < t->issued)
				return false;
		return true;
	}, -1);
	for (const emu_stream *t : streams)
		if (t && t->id != S_DIRECT && t->dev == dev && t->issued) {
			Know k = exit_of(t->id, t->issued);
			host_learns(k);
		}
	if (tombstones)
		for (Region *r : std::vector<Region *>(regions)) /* stream-ordered frees done: their memory goes now */
			if (r->freed_by && streams[actors[r->freed_by].stream]->done >= actors[r->freed_by].seq) {
				region_free(r);
				tombstones--;
			}
}

void *emu_pinned_alloc(size_t n, const char *name)
{
	Inside in;
	/* page-aligned, as cudaHostAlloc's; a redzone after it */
	const size_t total = 4096 + (n + 4095) / 4096 * 4096 + 4096;
	uint8_t *m = (uint8_t *)aligned_alloc(4096, total);
	if (!m)
		return nullptr;
	Region *r = new Region();
	r->mem = m;
	r->alo = (uintptr_t)m;
	r->ahi = (uintptr_t)m + total;
	r->lo = (uintptr_t)m + 4096;
	r->hi = r->lo + n;
	r->name = name;
	r->pinned = 1;
	memset(m, 0xFB, total);
	auto it = std::lower_bound(regions.begin(), regions.end(), r,
				   [](const Region *a, const Region *b) { return a->alo < b->alo; });
	regions.insert(it, r);
	return (void *)r->lo;
}

int emu_host_register(void *p, size_t n)
{
	Inside in;
	const uintptr_t a = (uintptr_t)p;
	for (const Region *r : regions)
		if (a < r->ahi && a + n > r->alo) /* overlaps: registered already (pinned), or emulator memory */
			return r->pinned && a >= r->lo && a + n <= r->hi ? 1 : 2;
	Region *r = new Region();
	r->mem = nullptr; /* the caller's memory: not freed with the region */
	r->alo = r->lo = a;
	r->ahi = r->hi = a + n;
	r->name = "registered host memory (cudaHostRegister)";
	r->pinned = 1;
	auto it = std::lower_bound(regions.begin(), regions.end(), r,
				   [](const Region *x, const Region *y) { return x->alo < y->alo; });
	regions.insert(it, r);
	return 0;
}

int emu_host_unregister(void *p)
{
	Inside in;
	Region *r = region_at((uintptr_t)p);
	if (!r || r->mem || !r->pinned || r->lo != (uintptr_t)p)
		return 0;
	emu_device_sync(); /* the runtime waits for the device */
	region_free(r);
	return 1;
}

int emu_is_pinned(const void *p)
{
	Region *r = region_at((uintptr_t)p);
	return r && r->pinned && (uintptr_t)p >= r->lo && (uintptr_t)p < r->hi;
}

int emu_pinned_free(void *p)
{
	Inside in;
	Region *r = region_at((uintptr_t)p);
	if (!r || !r->pinned || r->lo != (uintptr_t)p)
		return 0;
	emu_device_sync(); /* cudaFreeHost waits for the device */
	region_free(r);
	return 1;
}

/* The host's own launches (tests): run to completion before returning,
 * beside whatever stream work is running; not ordered with each other. */
void emu_run_grids(const emu_grid_spec *g, int n)
{
	Inside in;
	if (emu_cur) {
		fprintf(stderr, "emu: a launch from inside a kernel\n");
		_exit(2);
	}
	if (n < 1)
		return;
	streams_init();
	for (int i = 0; i < n; i++)
		check_config(g[i]);
	const uint32_t seq = ++streams[S_DIRECT]->issued;
	auto start = std::make_shared<Know>(host_know);
	const uint64_t ep = ++host_epoch;
	std::vector<Launch *> mine;
	for (int i = 0; i < n; i++) {
		const uint32_t id = new_launch();
		emu_stat_launches++;
		if (i == 0)
			rng_state = emu_seed * 0x9E3779B97F4A7C15ull + id;
		Actor &a = actors[id];
		a.stream = S_DIRECT;
		a.seq = seq;
		a.epoch = ep;
		a.grid = g[i].grid;
		a.block = g[i].block;
		a.bd = g[i].block.x * g[i].block.y * g[i].block.z;
		a.wpb = (a.bd + 31) / 32;
		a.name = g[i].name;
		a.start = start;
		Launch *L = new Launch();
		L->job = g[i].job, L->grid = g[i].grid, L->block = g[i].block, L->smem = g[i].smem, L->name = g[i].name;
		L->id = id;
		L->nblocks = g[i].grid.x * g[i].grid.y;
		L->next = 0;
		L->max_res = 1 + (unsigned)(rng() % 3); /* 1..3 blocks of each resident at once */
		L->owned = 0;
		L->op = nullptr;
		mine.push_back(L);
	}
	for (Launch *L : mine) {
		running.push_back(L);
		start_blocks(L);
	}
	device_run([&] {
		for (const Launch *L : mine)
			if (!L->op)
				return false;
		return true;
	}, -1);
	Know acc;
	for (Launch *L : mine) {
		acc.merge(L->acq);
		delete L;
	}
	streams[S_DIRECT]->done = seq;
	acc.set(S_DIRECT, seq);
	host_learns(acc);
}

void emu_run_grid(emu_job_base *job, emu_dim3 grid, emu_dim3 block, size_t smem, const char *name)
{
	const emu_grid_spec g = { job, grid, block, smem, name };
	emu_run_grids(&g, 1);
}

/* ------------------------------------------------------ the TSan hooks */

#define RA __builtin_return_address(0)
extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void *pc)
{
	emu_fiber *f = tl_device ? emu_cur : nullptr;
	if (f && f->depth++ < 48)
		f->stk[f->depth - 1] = (uintptr_t)pc;
}
void __tsan_func_exit()
{
	emu_fiber *f = tl_device ? emu_cur : nullptr;
	if (f && f->depth)
		f->depth--;
}
#define HOOKS(N)                                                                     \
	void __tsan_read##N(void *p) { access(p, N, 0, RA); }                        \
	void __tsan_write##N(void *p) { access(p, N, A_WRITE, RA); }                 \
	void __tsan_unaligned_read##N(void *p) { access(p, N, 0, RA); }              \
	void __tsan_unaligned_write##N(void *p) { access(p, N, A_WRITE, RA); }       \
	void __tsan_volatile_read##N(void *p) { access(p, N, 0, RA); }               \
	void __tsan_volatile_write##N(void *p) { access(p, N, A_WRITE, RA); }
HOOKS(1)
HOOKS(2)
HOOKS(4)
HOOKS(8)
HOOKS(16)
void __tsan_read_range(void *p, unsigned long n)
{
	if (n)
		access(p, (unsigned)n, 0, RA);
}
void __tsan_write_range(void *p, unsigned long n)
{
	if (n)
		access(p, (unsigned)n, A_WRITE, RA);
}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
/* C11 atomics in instrumented C host code (gen.py's copies of cache/*.c):
 * done, and checked as the host's writes of pinned memory where they land */
#define ATOMICS(N, T)                                                                                  \
	T __tsan_atomic##N##_load(const volatile T *a, int)                                            \
	{                                                                                              \
		access((const void *)a, N / 8, 0, RA);                                                 \
		return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                           \
	}                                                                                              \
	void __tsan_atomic##N##_store(volatile T *a, T v, int)                                         \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		__atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                              \
	}                                                                                              \
	T __tsan_atomic##N##_exchange(volatile T *a, T v, int)                                         \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                    \
	}                                                                                              \
	T __tsan_atomic##N##_fetch_add(volatile T *a, T v, int)                                        \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                     \
	}                                                                                              \
	T __tsan_atomic##N##_fetch_sub(volatile T *a, T v, int)                                        \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                     \
	}                                                                                              \
	T __tsan_atomic##N##_fetch_and(volatile T *a, T v, int)                                        \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                     \
	}                                                                                              \
	T __tsan_atomic##N##_fetch_or(volatile T *a, T v, int)                                         \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                      \
	}                                                                                              \
	int __tsan_atomic##N##_compare_exchange_strong(volatile T *a, T *c, T v, int, int)             \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
	}                                                                                              \
	int __tsan_atomic##N##_compare_exchange_weak(volatile T *a, T *c, T v, int, int)               \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
	}                                                                                              \
	T __tsan_atomic##N##_compare_exchange_val(volatile T *a, T c, T v, int, int)                   \
	{                                                                                              \
		access((const void *)a, N / 8, A_WRITE, RA);                                           \
		__atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
		return c;                                                                              \
	}
ATOMICS(8, uint8_t)
ATOMICS(16, uint16_t)
ATOMICS(32, uint32_t)
ATOMICS(64, uint64_t)
void __tsan_atomic_thread_fence(int)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) {}
}
