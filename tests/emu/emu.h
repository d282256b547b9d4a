/* emu.h - runs CUDA kernels on the host, as strictly as compute-sanitizer
 * would check them on a device (docs/GPU.md, "Host emulation").
 *
 * One fiber per GPU thread; the blocks of a grid are interleaved (a few
 * resident at a time) and a seeded scheduler switches fibers at barriers,
 * warp collectives, atomics and random memory accesses. Kernel code is
 * compiled with -fsanitize=thread, whose instrumentation calls the hooks in
 * emu.cpp (not the TSan runtime): they check every access against a shadow
 * of the registered device memory and of shared memory for
 *   - races: two threads, one a write, not both atomic, not ordered by a
 *     __syncthreads generation or a __syncwarp of both (per-warp vector
 *     clocks), by stream order, events or the host's waits (vector clocks
 *     over streams), or by a release/acquire chain (emu_fence); different
 *     blocks are otherwise never ordered inside one launch; the host's
 *     accesses to pinned memory and the copies' accesses are checked too;
 *   - bounds: the redzones around every emu_dev_alloc / shared array;
 *   - cp.async: a destination read or written before wait_group completed
 *     its group;
 *   - fetch window: a row fetch reading outside the row's 32-byte sectors
 *     (emu_fetch_begin).
 * Warp collectives check that the lanes in the mask pass the same mask
 * from the same call site, that the caller is in the mask, and give
 * poisoned values for source lanes outside it. __syncthreads checks that
 * the whole block waits at one call site. Errors are fatal: they print
 * both accesses (thread, source line) and the seed that reproduces them.
 */
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <tuple>
#include <string>
#include <vector>

#define IBP_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct emu_dim3 {
	unsigned x = 1, y = 1, z = 1;
	constexpr emu_dim3() = default;
	constexpr emu_dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef emu_dim3 dim3;

struct emu_block;
struct emu_fiber {
	void *sp;                 /* saved stack pointer */
	uint8_t *stack_lo, *stack_hi;
	emu_block *blk;
	emu_dim3 tidx;
	unsigned tid;             /* linear thread index in the block */
	uint32_t gtid;            /* 1 + block * blockDim + tid (0: none) */
	int state;                /* 0 runnable, 1 waiting, 2 done */
	uint32_t wvc[32];         /* vector clock over the lanes of the warp */
	int64_t budget;           /* accesses until the next preemption */
	uint64_t result;          /* of the last collective */
	const void *wait_site;
	int wait_kind;
	unsigned depth;           /* shadow call stack (reports) */
	uintptr_t stk[48];
	void *cpa;                /* cp.async queue (emu.cpp) */
	int run_pos;              /* index in the runnable set, -1 if none */
	uint32_t ftag;            /* the row fetch in progress (emu_fetch_begin), 0: none */
	uint32_t fseq;            /* fetches begun by this thread */
	uintptr_t flo, fhi;       /* its row: [flo, fhi) */
	void *occ;                /* executions per instruction site since emu_fetch_begin (emu.cpp) */
	void *sync;               /* what it acquired through fences and atomics (emu.cpp), or null */
	int quiet;                /* the emulator's own code running for it (emu.cpp) */
};
extern emu_fiber *emu_cur;
extern emu_dim3 emu_block_dim, emu_grid_dim;
extern int emu_defect; /* tests/emu/defects.sh: which deliberate defect is on */

emu_dim3 &emu_block_idx();
#define threadIdx (emu_cur->tidx)
#define blockIdx (emu_block_idx())
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

/* ---- device memory and shared memory ---- */
void *emu_dev_alloc(size_t n, unsigned skew = 0, const char *name = "device");
void emu_dev_free(void *p);
bool emu_is_device_memory(const void *p); /* device memory (not pinned host memory) */
/* A huge, sparse device allocation (mmap, zero pages): bounds are checked,
 * races are not (no shadow). */
void *emu_dev_alloc_sparse(size_t n, const char *name);
uint8_t *emu_dyn_smem();
struct emu_sslot { int unused; };
void *emu_shared_raw(emu_sslot *s, size_t size, size_t align);
template <class T> T *emu_shared(emu_sslot &s) { return (T *)emu_shared_raw(&s, sizeof(T), alignof(T)); }

/* ---- barriers and collectives (site: the caller's return address) ---- */
enum { EMU_SHFL_IDX, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR, EMU_BALLOT, EMU_SYNCWARP, EMU_REDUCE_OR };
enum { EMU_BAR_SYNC, EMU_BAR_OR, EMU_BAR_AND, EMU_BAR_COUNT };
uint64_t emu_warp_op(int kind, unsigned mask, uint64_t v, unsigned arg, const void *site);
int emu_block_op(int kind, int pred, const void *site);
#define EMU_SITE __builtin_return_address(0)

__attribute__((noinline)) inline void __syncwarp(unsigned m = 0xffffffffu) { emu_warp_op(EMU_SYNCWARP, m, 0, 0, EMU_SITE); }
__attribute__((noinline)) inline void __syncthreads() { emu_block_op(EMU_BAR_SYNC, 0, EMU_SITE); }
__attribute__((noinline)) inline int __syncthreads_or(int p) { return emu_block_op(EMU_BAR_OR, p, EMU_SITE); }
__attribute__((noinline)) inline int __syncthreads_and(int p) { return emu_block_op(EMU_BAR_AND, p, EMU_SITE); }
__attribute__((noinline)) inline int __syncthreads_count(int p) { return emu_block_op(EMU_BAR_COUNT, p, EMU_SITE); }

template <class T> inline uint64_t emu_bits(T v)
{
	static_assert(sizeof(T) <= 8, "shfl size");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof(T));
	return b;
}
template <class T> inline T emu_unbits(uint64_t b)
{
	T v;
	memcpy(&v, &b, sizeof(T));
	return v;
}
template <class T> __attribute__((noinline)) T __shfl_sync(unsigned m, T v, int s, int w = 32)
{
	(void)w;
	return emu_unbits<T>(emu_warp_op(EMU_SHFL_IDX, m, emu_bits(v), (unsigned)s, EMU_SITE));
}
template <class T> __attribute__((noinline)) T __shfl_up_sync(unsigned m, T v, unsigned o, int w = 32)
{
	(void)w;
	return emu_unbits<T>(emu_warp_op(EMU_SHFL_UP, m, emu_bits(v), o, EMU_SITE));
}
template <class T> __attribute__((noinline)) T __shfl_down_sync(unsigned m, T v, unsigned o, int w = 32)
{
	(void)w;
	return emu_unbits<T>(emu_warp_op(EMU_SHFL_DOWN, m, emu_bits(v), o, EMU_SITE));
}
template <class T> __attribute__((noinline)) T __shfl_xor_sync(unsigned m, T v, int o, int w = 32)
{
	(void)w;
	return emu_unbits<T>(emu_warp_op(EMU_SHFL_XOR, m, emu_bits(v), (unsigned)o, EMU_SITE));
}
__attribute__((noinline)) inline unsigned __ballot_sync(unsigned m, int p)
{
	return (unsigned)emu_warp_op(EMU_BALLOT, m, p != 0, 0, EMU_SITE);
}
/* sm_80's warp reduction (REDUX): the OR of v over the lanes of m */
__attribute__((noinline)) inline unsigned __reduce_or_sync(unsigned m, unsigned v)
{
	return (unsigned)emu_warp_op(EMU_REDUCE_OR, m, v, 0, EMU_SITE);
}
__attribute__((noinline)) inline int __any_sync(unsigned m, int p)
{
	return emu_warp_op(EMU_BALLOT, m, p != 0, 0, EMU_SITE) != 0;
}
__attribute__((noinline)) inline int __all_sync(unsigned m, int p)
{
	return emu_warp_op(EMU_BALLOT, m, p != 0, 0, EMU_SITE) == m;
}

/* ---- atomics: checked as atomic accesses, a preemption point each ----
 * Release and acquire (the message-passing idiom of the PTX memory model):
 * emu_fence() makes the thread's later atomic stores and read-modify-writes
 * publish what it knows at the fence (its own accesses, its warp's up to
 * the last __syncwarp, its block's up to the last barrier, whatever it
 * acquired, and the launches before its own); an atomic load or
 * read-modify-write followed by emu_fence() acquires what the last
 * publication at that address carried. __syncwarp and __syncthreads share
 * what their threads acquired; a finished launch passes it to the work
 * ordered after it. Plain accesses made visible only this way are checked
 * as ordered; without the chain they are races. */
enum { EMU_AT_LOAD, EMU_AT_STORE, EMU_AT_RMW };
void emu_atomic_access(const void *p, unsigned size, const void *pc, int kind = EMU_AT_RMW);
void emu_fence();
__attribute__((noinline, no_sanitize_thread)) inline unsigned long long emu_ld_strong(const void *p)
{
	emu_atomic_access(p, 8, EMU_SITE, EMU_AT_LOAD);
	return *(const volatile unsigned long long *)p;
}
__attribute__((noinline, no_sanitize_thread)) inline void emu_st_strong(void *p, unsigned long long v)
{
	emu_atomic_access(p, 8, EMU_SITE, EMU_AT_STORE);
	*(volatile unsigned long long *)p = v;
}
inline void __threadfence() { emu_fence(); }
#define EMU_ATOMIC(name, T, expr)                                                  \
	__attribute__((noinline, no_sanitize_thread)) inline T name(T *p, T v)     \
	{                                                                          \
		emu_atomic_access(p, sizeof(T), EMU_SITE);                         \
		T o = *p;                                                          \
		*p = (expr);                                                       \
		return o;                                                          \
	}
EMU_ATOMIC(atomicOr, unsigned, o | v)
EMU_ATOMIC(atomicOr, int, o | v)
EMU_ATOMIC(atomicOr, unsigned long long, o | v)
EMU_ATOMIC(atomicAnd, unsigned, o & v)
EMU_ATOMIC(atomicXor, unsigned, o ^ v)
EMU_ATOMIC(atomicAdd, unsigned, o + v)
EMU_ATOMIC(atomicAdd, int, o + v)
EMU_ATOMIC(atomicAdd, unsigned long long, o + v)
EMU_ATOMIC(atomicMax, unsigned, o > v ? o : v)
EMU_ATOMIC(atomicMin, unsigned, o < v ? o : v)
EMU_ATOMIC(atomicExch, unsigned, v)
EMU_ATOMIC(atomicExch, int, v)
EMU_ATOMIC(atomicExch, unsigned long long, v)
#define EMU_CAS(T)                                                                 \
	__attribute__((noinline, no_sanitize_thread)) inline T atomicCAS(T *p, T cmp, T v) \
	{                                                                          \
		emu_atomic_access(p, sizeof(T), EMU_SITE);                         \
		T o = *p;                                                          \
		if (o == cmp)                                                      \
			*p = v;                                                    \
		return o;                                                          \
	}
EMU_CAS(int)
EMU_CAS(unsigned)
EMU_CAS(unsigned long long)

/* ---- cp.async (kernels/ibp_device.cuh calls these under IBP_EMU) ---- */
void emu_cp_async(void *smem, const void *gmem, unsigned bytes, const void *site);
void emu_cp_async_commit();
void emu_cp_async_wait(int n, const void *site);

/* A predicated cp.async (`@p cp.async`): every lane of the warp executes
 * the instruction, the lanes with pred = 0 copy nothing. */
void emu_cp_async_pred(int pred, void *smem, const void *gmem, unsigned bytes);

/* ---- row fetches and host-memory (PCIe) accounting ----
 * A kernel's fetch of one encoded row (ibp_issue_fetch) is bracketed by
 * emu_fetch_begin/emu_fetch_end in every thread of its group
 * (group_threads: 32 for a warp, the block size for a block). In between,
 * a thread may read global memory only inside the 32-byte sectors that
 * hold the row's bytes [src, src + len): anything else is an error
 * ("fetch window"), as is any read outside an allocation (redzones).
 * Reads of a region marked with emu_host_watch (the store's payload in
 * host memory) are logged per lane with their instruction site and the
 * number of times the lane executed that site since emu_fetch_begin, so
 * that the harness can coalesce them into warp instructions and sectors
 * as the hardware does (harness.cpp, pcie suite). */
void emu_fetch_begin(const void *src, uint64_t len, unsigned group_threads);
void emu_fetch_end();
void emu_host_watch(const void *p, int on);
struct emu_host_read {
	uint32_t tag;    /* the row fetch (emu_fetch_info), 0: outside any fetch */
	uint32_t warp;   /* block * warps per block + warp */
	uintptr_t pc;    /* instruction site */
	uint32_t occ;    /* the lane's execution count of that site within the fetch */
	uint32_t lane;
	uintptr_t addr;
	uint32_t n;
};
struct emu_fetch_info {
	uintptr_t lo, hi; /* the row's bytes */
};
/* Moves out the reads logged since the last call; *fetches[tag] is the row of
 * each tag (index 0 unused). */
std::vector<emu_host_read> emu_host_take(std::vector<emu_fetch_info> *fetches);

/* ---- integer and float intrinsics ---- */
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
/* (hi:lo) >> (s & 31), the low word (SHF.R with a wrapped shift) */
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{
	return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31));
}
/* (hi:lo) >> min(s, 32), the low word (SHF.R with a clamped shift) */
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s)
{
	return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s > 32 ? 32 : s));
}
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned __brev(unsigned x)
{
	unsigned r = 0;
	for (int i = 0; i < 32; i++)
		r |= ((x >> i) & 1u) << (31 - i);
	return r;
}
/* Round-to-nearest IEEE operations: what the host does with SSE and
 * -ffp-contract=off (run.sh), which is the point of the _rn intrinsics. */
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline double __dsub_rn(double a, double b) { volatile double r = a - b; return r; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __ddiv_rn(double a, double b) { volatile double r = a / b; return r; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }

/* ---- launches ---- */
struct emu_job_base {
	virtual void run() = 0;
	virtual ~emu_job_base() {}
};
void emu_run_grid(emu_job_base *job, emu_dim3 grid, emu_dim3 block, size_t smem, const char *name);
/* Several launches at once, as kernels on different streams may run: their
 * blocks interleaved by the seeded scheduler (1-3 resident of each), and
 * no access of one ordered with an access of another (only an atomic
 * against an atomic is not a race). */
struct emu_grid_spec {
	emu_job_base *job;
	emu_dim3 grid, block;
	size_t smem;
	const char *name;
};
void emu_run_grids(const emu_grid_spec *g, int n);
/* 0 (default): atomics only yield at random. N > 0: an atomic stalls its
 * thread 1 time in N, out of the schedule for 200-2200 switches (a warp
 * descheduled for long on a GPU), which opens the windows between two
 * atomics of one thread that protocols across launches must survive. */
extern int emu_stall_rate;

template <class K, class... A>
struct emu_job_t : emu_job_base {
	K k;
	std::tuple<A...> a;
	emu_job_t(K k_, A... a_) : k(k_), a(a_...) {}
	void run() override { std::apply(k, a); }
};

template <class K, class... A>
void emu_launch(K k, unsigned gx, unsigned gy, unsigned block, size_t smem, A... a)
{
	emu_job_t<K, A...> job(k, a...);
	emu_run_grid(&job, emu_dim3(gx, gy), emu_dim3(block), smem, __PRETTY_FUNCTION__);
}

/* ---- streams and events (cuda_stub.cpp answers the runtime's calls with
 * these; docs/GPU.md "Streams and events") ----
 * Asynchronous work (launches, copies, memsets, stream-ordered frees) is
 * queued on its stream and runs at seeded random later points: in order
 * within the stream, after the events the stream waits for, and for the
 * legacy default stream (nullptr) after all earlier work of the blocking
 * streams (and they after it). Launches of different streams interleave
 * with each other and with the host's own progress: a kernel may be half
 * done when the host's next call returns. Waits (stream, event, device)
 * run the device until their work is done and tell the host what it did.
 * Every access of device and pinned memory by a kernel, a copy or the host
 * is checked against the accesses not ordered before it (stream order,
 * events, host waits, release/acquire): a conflict is a race naming both
 * sides. Copies to or from pageable host memory behave as the runtime's:
 * a device-to-host copy returns when done, a host-to-device copy takes the
 * source at the call. */
struct emu_stream;
struct emu_event;
emu_stream *emu_stream_new(int nonblocking);
void emu_stream_destroy(emu_stream *s);
void emu_enqueue_launch(emu_stream *s, emu_job_base *job /* deleted when done */, emu_dim3 g, emu_dim3 b, size_t smem,
			const char *name, const void *site, const void *kernel = nullptr);
void emu_enqueue_copy(emu_stream *s, void *dst, const void *src, size_t n, const void *site);
void emu_enqueue_memset(emu_stream *s, void *p, int v, size_t n, const void *site);
void emu_enqueue_free(emu_stream *s, void *p, const void *site);
emu_event *emu_event_new();
void emu_event_destroy(emu_event *e);
void emu_event_record(emu_event *e, emu_stream *s, const void *site);
void emu_stream_wait_event(emu_stream *s, emu_event *e, const void *site);
int emu_event_query(emu_event *e);   /* 1: complete (the host now knows its work is done) */
void emu_event_sync(emu_event *e);
int emu_stream_query(emu_stream *s);
void emu_stream_sync(emu_stream *s);
void emu_device_sync();
/* Pinned (page-locked, mapped) host memory: kernels may access it, the
 * host's accesses are checked against in-flight work. */
void *emu_pinned_alloc(size_t n, const char *name);
int emu_pinned_free(void *p);   /* 0: p is not a pinned allocation */
int emu_is_pinned(const void *p);
/* cudaHostRegister: the caller's [p, p + n) becomes pinned, mapped memory
 * (0), or is pinned already (1), or overlaps other emulator memory (2). */
int emu_host_register(void *p, size_t n);
int emu_host_unregister(void *p); /* 0: p was not registered */
/* Devices (cudaSetDevice): each host thread has a current device (0 at
 * first); its legacy stream, its new streams and its device-wide waits
 * are that device's. One address space: any device reaches any memory. */
void emu_set_device(int d);
int emu_get_device();
uint32_t emu_stream_issued(emu_stream *s); /* operations issued so far (nullptr: the legacy stream) */
void emu_poll();                           /* the device moves on a random amount */
/* +1 / -1: the calling thread's host accesses go unchecked meanwhile (a
 * stand-in library holding its own lock, which the emulator's lock must
 * never be taken under: instrumented inline code such as std::string's
 * would take it). */
void emu_nocheck(int d);
/* An operation of a stand-in library (tests/emu/nccl_stub.cpp: NCCL's
 * kernels) queued on a stream: it starts in stream order, then keeps its
 * stream busy until ready() (its peers, on other streams and devices,
 * have started too); complete() then has its effect, with
 * emu_ext_access checking each access as the named operation's and
 * emu_ext_learn passing what a peer knew at its start to this one's end.
 * Both run with the emulator locked and must not call into it otherwise.
 * A host thread that blocks (no deadline) on such work while nothing
 * else can move is reported as a hang, naming waits_for(). The op is the
 * caller's; it must outlive its completion. */
struct emu_ext_op {
	uint32_t id = 0; /* its launch id, set when queued */
	virtual void start() {}
	virtual bool ready() = 0;
	virtual void complete() = 0;
	virtual std::string waits_for() = 0;
	virtual ~emu_ext_op() {}
};
void emu_enqueue_ext(emu_stream *s, emu_ext_op *op, const char *name, const void *site);
void emu_ext_access(uint32_t as_op, const void *p, size_t n, int write, const void *site);
void emu_ext_learn(uint32_t from_op);
/* The device's progress so far: launches and copies started, and done. */
extern uint64_t emu_stat_async_ops;

/* A configuration the device would refuse (cuda_stub.cpp): sets the
 * runtime's last error instead of running. */
bool emu_launch_refused(const void *k, emu_dim3 g, emu_dim3 b, size_t smem);

/* k<<<grid, block, smem, stream>>>(args) as gen.py rewrites it. */
struct emu_kcall {
	emu_dim3 g, b;
	size_t smem;
	const void *stream;
	emu_kcall(emu_dim3 g_, emu_dim3 b_, size_t s = 0, const void *st = nullptr) : g(g_), b(b_), smem(s), stream(st) {}
	template <class K, class... A> __attribute__((noinline)) void run(K k, A... a)
	{
		if (emu_launch_refused((const void *)k, g, b, smem))
			return; /* the error is in cudaGetLastError */
		emu_enqueue_launch((emu_stream *)stream, new emu_job_t<K, A...>(k, a...), g, b, smem, __PRETTY_FUNCTION__,
				   EMU_SITE, (const void *)k);
	}
};
