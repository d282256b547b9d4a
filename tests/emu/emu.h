/* emu.h - run CUDA kernels on the host: one fiber (ucontext) per GPU thread,
 * scheduled cooperatively; __syncthreads/__syncwarp and the warp intrinsics
 * are barriers. A barrier no fiber can pass is reported as a deadlock (a
 * hang on the GPU). */
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <ucontext.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#define EMU_ASAN 1
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct emu_bar { unsigned count = 0, need = 0; uint64_t gen = 0; };
struct emu_fiber {
	ucontext_t ctx;
	void *stack;
	size_t stack_size;
	unsigned tid;
	int done;
	emu_bar *wait_bar;
	uint64_t wait_gen;
};
struct emu_warp { emu_bar bar; uint64_t v[32]; };
extern emu_warp *emu_warps;
extern emu_bar emu_block_bar;
extern int emu_or_flags[1024];
extern uint8_t *emu_dyn_smem;
extern emu_fiber *emu_cur;
extern ucontext_t emu_sched_ctx;
extern void *emu_fake_stack;

inline void emu_yield()
{
#ifdef EMU_ASAN
	__sanitizer_start_switch_fiber(&emu_fake_stack, nullptr, 0); /* bottom set by scheduler side */
#endif
	swapcontext(&emu_cur->ctx, &emu_sched_ctx);
#ifdef EMU_ASAN
	__sanitizer_finish_switch_fiber(emu_fake_stack, nullptr, nullptr);
#endif
}

inline void emu_barrier(emu_bar &b)
{
	uint64_t g = b.gen;
	if (++b.count == b.need) {
		b.count = 0;
		b.gen++;
		return;
	}
	emu_cur->wait_bar = &b;
	emu_cur->wait_gen = g;
	emu_yield();
}

inline emu_warp &emu_w() { return emu_warps[threadIdx.x >> 5]; }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_barrier(emu_w().bar); }
inline void __syncthreads() { emu_barrier(emu_block_bar); }
inline int __syncthreads_or(int p)
{
	emu_or_flags[threadIdx.x] = p != 0;
	__syncthreads();
	int r = 0;
	for (unsigned i = 0; i < blockDim.x; i++)
		r |= emu_or_flags[i];
	__syncthreads();
	return r;
}
template <class T, class F> T emu_shfl(T v, F src)
{
	static_assert(sizeof(T) <= 8, "shfl size");
	emu_warp &w = emu_w();
	unsigned l = threadIdx.x & 31;
	uint64_t b = 0;
	memcpy(&b, &v, sizeof(T));
	w.v[l] = b;
	emu_barrier(w.bar);
	unsigned s = src(l);
	T r = v;
	if (s < 32)
		memcpy(&r, &w.v[s], sizeof(T));
	emu_barrier(w.bar);
	return r;
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned o)
{
	return emu_shfl(v, [o](unsigned l) { return l >= o ? l - o : 32u; });
}
template <class T> T __shfl_xor_sync(unsigned, T v, unsigned o)
{
	return emu_shfl(v, [o](unsigned l) { return (l ^ o) & 31; });
}
template <class T> T __shfl_sync(unsigned, T v, int s)
{
	return emu_shfl(v, [s](unsigned) { return (unsigned)s; });
}
inline unsigned __ballot_sync(unsigned, int p)
{
	emu_warp &w = emu_w();
	unsigned l = threadIdx.x & 31;
	w.v[l] = p != 0;
	emu_barrier(w.bar);
	unsigned r = 0;
	for (unsigned i = 0; i < 32; i++)
		r |= (w.v[i] ? 1u : 0u) << i;
	emu_barrier(w.bar);
	return r;
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p |= v; return o; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
	unsigned long long o = *p;
	*p += v;
	return o;
}

struct emu_job_base { virtual void run() = 0; virtual ~emu_job_base() {} };
extern emu_job_base *emu_job;
void emu_fiber_entry();
void emu_run_block(unsigned nthreads, size_t smem);

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
	gridDim = { gx, gy, 1 };
	blockDim = { block, 1, 1 };
	emu_job_t<K, A...> job(k, a...);
	emu_job = &job;
	for (unsigned by = 0; by < gy; by++)
		for (unsigned bx = 0; bx < gx; bx++) {
			blockIdx = { bx, by, 0 };
			emu_run_block(block, smem);
		}
}
