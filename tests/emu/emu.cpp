#include <tuple>
#include "emu.h"
emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
emu_warp *emu_warps;
emu_bar emu_block_bar;
int emu_or_flags[1024];
uint8_t *emu_dyn_smem;
emu_fiber *emu_cur;
ucontext_t emu_sched_ctx;
void *emu_fake_stack;
emu_job_base *emu_job;

void emu_fiber_entry()
{
#ifdef EMU_ASAN
	__sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
	emu_job->run();
	emu_cur->done = 1;
#ifdef EMU_ASAN
	__sanitizer_start_switch_fiber(nullptr, nullptr, 0); /* this fiber's stack dies */
#endif
	swapcontext(&emu_cur->ctx, &emu_sched_ctx);
}

void emu_run_block(unsigned n, size_t smem)
{
	size_t sz = (smem + 15) / 16 * 16;
	uint8_t *dyn = sz ? (uint8_t *)aligned_alloc(16, sz) : nullptr;
	if (dyn)
		memset(dyn, 0xCD, sz);
	emu_dyn_smem = dyn;
	emu_block_bar = emu_bar();
	emu_block_bar.need = n;
	std::vector<emu_warp> ws(n / 32);
	for (auto &w : ws) {
		w.bar = emu_bar();
		w.bar.need = 32;
	}
	emu_warps = ws.data();
	std::vector<emu_fiber> f(n);
	const size_t ss = 256 << 10;
	for (unsigned t = 0; t < n; t++) {
		f[t].stack = malloc(ss);
		f[t].stack_size = ss;
		f[t].tid = t;
		f[t].done = 0;
		f[t].wait_bar = nullptr;
		getcontext(&f[t].ctx);
		f[t].ctx.uc_stack.ss_sp = f[t].stack;
		f[t].ctx.uc_stack.ss_size = ss;
		f[t].ctx.uc_link = nullptr;
		makecontext(&f[t].ctx, emu_fiber_entry, 0);
	}
	unsigned left = n;
	static uint64_t rng = 0x9E3779B97F4A7C15ull;
	std::vector<unsigned> order(n);
	for (unsigned t = 0; t < n; t++)
		order[t] = t;
	while (left) {
		bool progress = false;
		/* a new random order every round: fibers run until they block, so
		 * writes not ordered by a barrier land in different orders */
		for (unsigned t = n - 1; t > 0; t--) {
			rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
			unsigned r = (unsigned)(rng % (t + 1)), tmp = order[t];
			order[t] = order[r];
			order[r] = tmp;
		}
		for (unsigned ti = 0; ti < n; ti++) {
			emu_fiber &x = f[order[ti]];
			if (x.done)
				continue;
			if (x.wait_bar) {
				if (x.wait_bar->gen == x.wait_gen)
					continue; /* still waiting */
				x.wait_bar = nullptr;
			}
			emu_cur = &x;
			threadIdx = { x.tid, 0, 0 };
#ifdef EMU_ASAN
			void *save = nullptr;
			__sanitizer_start_switch_fiber(&save, x.stack, x.stack_size);
#endif
			swapcontext(&emu_sched_ctx, &x.ctx);
#ifdef EMU_ASAN
			__sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#endif
			progress = true;
			if (x.done)
				left--;
		}
		if (!progress) {
			fprintf(stderr, "EMU DEADLOCK: block (%u,%u): %u threads cannot pass a barrier\n", blockIdx.x,
				blockIdx.y, left);
			abort();
		}
	}
	for (auto &x : f)
		free(x.stack);
	free(dyn);
}
