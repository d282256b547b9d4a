/* emu.cpp - the scheduler, fibers and checker behind emu.h. Compiled
 * WITHOUT -fsanitize=thread: the __tsan_* functions below are the hooks
 * that the instrumented kernel code calls on every memory access. */
#include "emu.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <sys/mman.h>
#include <unistd.h>

emu_fiber *emu_cur;
emu_dim3 emu_block_dim, emu_grid_dim;
int emu_defect;
uint64_t emu_seed = 1;
int emu_preempt_mean = 24; /* plain accesses between preemptions, on average */
int emu_stall_rate;        /* 0: off; N: an atomic stalls its thread 1 time in N (emu.h) */
uint64_t emu_stat_launches, emu_stat_fibers, emu_stat_switches;

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

static std::string sym(uintptr_t pc)
{
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

static std::string who(uint32_t gtid)
{
	return who_in(UINT32_MAX, gtid);
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
};
static std::vector<Region *> regions; /* sorted by alo */
static Region *last_region;
static const size_t RZ = 64;
static uint32_t launch_id;  /* the running fiber's launch */
static uint32_t launch_seq; /* the last launch id given out */
/* The launches running together (emu_run_grids): ids batch_lo .. batch_lo
 * + batch_n - 1; accesses of two of them are never ordered. */
static uint32_t batch_lo, batch_n;
struct Launch {
	emu_job_base *job;
	emu_dim3 grid, block;
	size_t smem;
	const char *name;
	uint32_t id;
	unsigned nblocks, next, max_res;
	std::vector<emu_block *> res;
};
static std::vector<Launch *> batch;
static inline bool concurrent(uint32_t id)
{
	return ((id - batch_lo) & 0x3fffffffu) < batch_n;
}

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
	free(r->cells);
	free(r->pend);
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
	return (void *)region_new(n, skew, name, 0)->lo;
}

void *emu_dev_alloc_sparse(size_t n, const char *name)
{
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
	return r && (uintptr_t)p >= r->lo && (uintptr_t)p < r->hi;
}

void emu_dev_free(void *p)
{
	if (!p)
		return;
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

static inline bool ordered(const Rec &r, const emu_fiber *f)
{
	if (!r.tid)
		return true;
	if ((r.lf >> 2) != launch_id) /* an earlier launch, unless one running beside this one */
		return !concurrent(r.lf >> 2);
	if (r.tid == f->gtid)
		return true;
	const unsigned bd = f->blk->n;
	const uint32_t rt = r.tid - 1, ft = f->gtid - 1;
	if (rt / bd != ft / bd)
		return false;
	if (f->blk->bgen > r.bgen)
		return true;
	const unsigned rl = rt % bd;
	if (rl / 32 != f->tid / 32)
		return false;
	return f->wvc[rl % 32] >= r.clk;
}

static const char *what(const Rec &r)
{
	return (r.lf & 1) ? "atomic" : (r.lf & 2) ? "write" : "read";
}

[[noreturn]] static void race(const Region *g, uintptr_t a, unsigned n, int write, int atomic, uintptr_t pc,
			      const Rec &o)
{
	char s[512];
	snprintf(s, sizeof(s), "data race on %s+%lu\n  %s of %u bytes by %s\n", g->name.c_str(),
		 (unsigned long)(a - g->lo), atomic ? "atomic" : write ? "write" : "read", n,
		 who(emu_cur->gtid).c_str());
	std::string m = s + sym(pc);
	snprintf(s, sizeof(s), "  conflicts with the %s by %s (not ordered by a barrier%s)\n", what(o),
		 who_in(o.lf >> 2, o.tid).c_str(), (o.lf >> 2) != launch_id ? ": another launch running beside it" : "");
	m += s + sym(o.pc);
	fatal("race", m);
}

enum { A_WRITE = 1, A_ATOMIC = 2, A_ASYNC_ISSUE = 4, A_ASYNC_DONE = 8 };

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
	Region *r = region_at((uintptr_t)p);
	if (!r) {
		fprintf(stderr, "emu_host_watch: %p is not emulator memory\n", p);
		_exit(2);
	}
	r->watch = on;
}

std::vector<emu_host_read> emu_host_take(std::vector<emu_fetch_info> *fetches)
{
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
	const size_t N = g->hi - g->lo;
	if (!g->cells) {
		g->cells = (Cell *)calloc(N ? N : 1, sizeof(Cell));
		g->pend = (uint8_t *)calloc(N ? N : 1, 1);
	}
	const int write = (fl & (A_WRITE | A_ATOMIC)) != 0, atomic = (fl & A_ATOMIC) != 0;
	Rec me;
	me.tid = f->gtid;
	me.bgen = f->blk->bgen;
	me.clk = f->wvc[f->tid % 32];
	me.pc = (uint32_t)pc;
	me.lf = launch_id << 2 | (write ? 2u : 0u) | (atomic ? 1u : 0u);
	for (unsigned i = 0; i < n; i++) {
		const size_t k = a - g->lo + i;
		Cell &c = g->cells[k];
		if (g->pend[k] && !(fl & A_ASYNC_DONE)) {
			char s[300];
			snprintf(s, sizeof(s),
				 "%s of %s+%zu by %s while a cp.async into it is still in flight (no cp.async.wait_group "
				 "completed its group, or no barrier after it)\n",
				 write ? "write" : "read", g->name.c_str(), k, who(f->gtid).c_str());
			fatal("cp.async", s + sym(pc));
		}
		if (!(atomic && (c.w.lf & 1)) && !ordered(c.w, f))
			race(g, a + i, n, write, atomic, pc, c.w);
		if (write) {
			if (!(atomic && (c.r1.lf & 1)) && !ordered(c.r1, f))
				race(g, a + i, n, write, atomic, pc, c.r1);
			if (!(atomic && (c.r2.lf & 1)) && !ordered(c.r2, f))
				race(g, a + i, n, write, atomic, pc, c.r2);
			c.w = me;
			c.r1.tid = c.r2.tid = 0;
		} else if (!c.r1.tid || c.r1.tid == me.tid || ordered(c.r1, f)) {
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

static inline void access(const void *p, unsigned n, int fl, const void *pc)
{
	emu_fiber *f = emu_cur;
	if (!f)
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

void emu_atomic_access(const void *p, unsigned size, const void *pc)
{
	if (!emu_cur)
		return;
	if (emu_stall_rate && rng() % (uint64_t)emu_stall_rate == 0) {
		emu_fiber *f = emu_cur; /* descheduled for a long while, as a warp may be on a GPU */
		run_del(f);
		stalled.push_back({ sched_steps + 200 + rng() % 2000, f });
		yield();
	} else if (rng() & 1)
		yield(); /* atomics are where interleavings matter most */
	check((uintptr_t)p, size, A_ATOMIC, (uintptr_t)pc);
}

/* ------------------------------------------------- barriers, collectives */

static const char *kind_name(int k)
{
	static const char *n[] = { "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
				   "__ballot_sync/__any_sync/__all_sync", "__syncwarp" };
	return k >= 0 && k < 6 ? n[k] : "?";
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
		default: break;
		}
		if (src >= 0)
			r = ((c.mask >> src) & 1) ? c.val[src] : (rng() | 0x8000000000000000ull); /* outside: poison */
		c.who[l]->result = r;
	}
	if (c.kind == EMU_SYNCWARP) {
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
	(void)site; /* the wrapper's return address: not its call site once inlined */
	cp_async(smem, gmem, bytes, __builtin_return_address(0));
}

void emu_cp_async_pred(int pred, void *smem, const void *gmem, unsigned bytes)
{
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
	access(gmem, bytes, 0, site);
	check((uintptr_t)smem, bytes, A_WRITE | A_ASYNC_ISSUE, (uintptr_t)site);
	for (unsigned i = 0; i < bytes; i++)
		((uint8_t *)smem)[i] = (uint8_t)(rng() | 0x80); /* in flight: garbage until waited for */
	cpq().open.push_back({ (uint8_t *)smem, (const uint8_t *)gmem, bytes });
}

void emu_cp_async_commit()
{
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

static std::string who_in(uint32_t launch, uint32_t gtid)
{
	if (!gtid)
		return "nobody";
	emu_dim3 g = emu_grid_dim, bk = emu_block_dim;
	const char *name = nullptr;
	for (const Launch *L : batch)
		if (L->id == launch && batch.size() > 1)
			g = L->grid, bk = L->block, name = L->name;
	unsigned bd = bk.x * bk.y * bk.z;
	unsigned b = (gtid - 1) / bd, t = (gtid - 1) % bd;
	char s[128];
	snprintf(s, sizeof(s), "block (%u,%u) thread %u (warp %u lane %u)", b % g.x, b / g.x, t, t / 32, t % 32);
	return name ? std::string(s) + " of " + name : std::string(s);
}

static void fiber_main()
{
	emu_fiber *f = emu_cur;
	f->blk->L->job->run();
	f = emu_cur;
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
	for (const Launch *L : batch)
		m += std::string(" ") + L->name;
	m += "\n";
	for (const Launch *L : batch)
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

void emu_run_grids(const emu_grid_spec *g, int n)
{
	if (emu_cur) {
		fprintf(stderr, "emu: a launch from inside a kernel\n");
		_exit(2);
	}
	if (n < 1)
		return;
	for (int i = 0; i < n; i++)
		check_config(g[i]);
	std::vector<Launch> ls((size_t)n);
	batch.clear();
	for (int i = 0; i < n; i++) {
		Launch &L = ls[(size_t)i];
		launch_seq = (launch_seq + 1) & 0x3fffffff;
		launch_id = launch_seq;
		emu_stat_launches++;
		if (i == 0) {
			rng_state = emu_seed * 0x9E3779B97F4A7C15ull + launch_id;
			batch_lo = launch_id;
		}
		L.job = g[i].job, L.grid = g[i].grid, L.block = g[i].block, L.smem = g[i].smem, L.name = g[i].name;
		L.id = launch_id;
		L.nblocks = g[i].grid.x * g[i].grid.y;
		L.next = 0;
		L.max_res = 1 + (unsigned)(rng() % 3); /* 1..3 blocks of each resident at once */
		batch.push_back(&L);
	}
	batch_n = (uint32_t)n;
	for (Launch &L : ls)
		while (L.next < L.nblocks && L.res.size() < L.max_res) {
			L.res.push_back(new emu_block());
			block_start(L.res.back(), &L, L.next++);
		}
	for (;;) {
		bool any = false;
		for (Launch &L : ls)
			any |= !L.res.empty();
		if (!any)
			break;
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
		emu_switch(&sched_sp, f->sp);
		emu_cur = nullptr;
		if (f->state == 2) {
			emu_block *b = f->blk;
			if (--b->live == 0) {
				block_end(b);
				if (L->next < L->nblocks) {
					block_start(b, L, L->next++);
				} else {
					L->res.erase(std::find(L->res.begin(), L->res.end(), b));
					delete b;
				}
			}
		}
	}
	batch.clear();
	batch_n = 0;
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
	emu_fiber *f = emu_cur;
	if (f && f->depth++ < 48)
		f->stk[f->depth - 1] = (uintptr_t)pc;
}
void __tsan_func_exit()
{
	emu_fiber *f = emu_cur;
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
}
