/* copy.h - a copy whose destination will not be read soon (a block written
 * into a pool slot in DRAM): non-temporal stores skip reading each
 * destination line before writing it, a ninth of a KV store's CPU time
 * on the host (docs/BENCHMARKS.md, issue 33). */
#ifndef IBP_UTIL_COPY_H
#define IBP_UTIL_COPY_H

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Below this many bytes a plain memcpy: the fence and the partial lines
 * cost more than the reads saved. */
#define IBPI_COPY_STREAM_MIN 4096u

/* Copies n bytes from src to dst (not overlapping); large copies with
 * streaming stores, fenced before returning so that the bytes are in
 * order with any later store (a lock, an atomic flag) of this thread. */
static inline void ibpi_copy_stream(void *dst, const void *src, uint64_t n)
{
#if defined(__SSE2__)
	if (n >= IBPI_COPY_STREAM_MIN) {
		uint8_t *d = dst;
		const uint8_t *s = src;
		/* the destination's next 4 KiB pages asked for first (up to
		 * 64: a KV slot is tens of KiB): their address translations
		 * then walk while the copy runs, where each page's first
		 * streaming store waited for its own (a tenth of a warm KV
		 * store on this VM, docs/BENCHMARKS.md) */
		for (uint64_t o = 4096u - ((uintptr_t)d & 4095u), e = n < (64u << 12) ? n : (64u << 12); o < e; o += 4096u)
			__builtin_prefetch(d + o, 1, 0);
		const uint64_t head = (16u - ((uintptr_t)d & 15u)) & 15u;
		memcpy(d, s, head);
		d += head, s += head, n -= head;
		for (; n >= 64; d += 64, s += 64, n -= 64) {
			const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
			const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
			const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
			const __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
			_mm_stream_si128((__m128i *)(void *)d, a);
			_mm_stream_si128((__m128i *)(void *)(d + 16), b);
			_mm_stream_si128((__m128i *)(void *)(d + 32), c);
			_mm_stream_si128((__m128i *)(void *)(d + 48), e);
		}
		memcpy(d, s, n);
		_mm_sfence();
		return;
	}
#endif
	memcpy(dst, src, n);
}

#endif /* IBP_UTIL_COPY_H */
