/* ibp/fp8.h - FP8 (E4M3 / E5M2) conversion and the lossy TACO block codec.
 *
 * Conversion from float32 follows __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
 * fmt) bit for bit: round to nearest (ties to even) on the float's value;
 * finite values past the largest FP8 value and +-Inf saturate to +-max
 * (448 for E4M3, 57344 for E5M2); any NaN gives 0x7F; float denormals give
 * signed zero (they lie below half the smallest FP8 denormal).
 *
 * The codec (TACO, "Adaptive Scale-Hadamard" + per-block max scale): the
 * tensor is cut into blocks of B elements (power of two, default 256). Per
 * block: an RMS-based adaptive scale alpha = 2^k (the power of two nearest
 * to Qmax / RMS), a normalised Walsh-Hadamard rotation, and a scale
 * s = max|Z| / Qmax so the largest rotated value lands on the FP8 maximum;
 * each Z / s is stored as one FP8 byte, with s (float32) and k (int8) per
 * block. Decoding inverts each step. Stream size: 64 + M*B + 5*M bytes
 * rounded up to 16 (M = ceil(n / B)), e.g. 1.0196 bytes per element at
 * B = 256. docs/CODECS.md gives the format, the rounding rules and the
 * error bounds. A block holding any NaN or +-Inf decodes to all NaN.
 *
 * Checksums: as exponent blocks (ibp/exp.h), a stream is written with an
 * XXH3-64 checksum over header and payload (opts.checksum, the default),
 * verified by the CPU decoder before anything else in the header is
 * interpreted (IBP_ERR_CHECKSUM); wire and in-memory streams omit it
 * (opts.checksum = 0, a header flag), callers that verified the bytes skip
 * it (IBP_FP8_TRUSTED, ibp_fp8_decode_ext); version-1 streams still decode.
 * The device encoder writes no checksum and the device decoder does not
 * verify one.
 *
 * All functions are thread-safe. The *_cuda functions exist in every
 * build; without CUDA they return IBP_ERR_UNSUPPORTED, and without a usable
 * GPU IBP_ERR_NO_DEVICE. Their `stream` is a cudaStream_t (NULL = default
 * stream); they return once the work is enqueued and never allocate.
 */
#ifndef IBP_FP8_H
#define IBP_FP8_H

#include <stdint.h>
#include <stddef.h>
#include "status.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ibp_fp8_format {
	IBP_FP8_E4M3 = 0, /* s.eeee.mmm, bias 7, max 448, no Inf, NaN 0x7F/0xFF */
	IBP_FP8_E5M2 = 1  /* s.eeeee.mm, bias 15, max 57344, Inf 0x7C/0xFC */
} ibp_fp8_format_t;

#define IBP_FP8_MIN_BLOCK 16u
#define IBP_FP8_MAX_BLOCK 4096u

/* ---- element conversion ---- */

/* float32 -> FP8 code as described above. An unknown format gives 0x7F. */
uint8_t ibp_fp8_from_f32(float x, ibp_fp8_format_t fmt);

/* FP8 code -> float32 (exact). NaN codes give a quiet NaN, E5M2 Inf codes
 * give +-Inf. */
float ibp_fp8_to_f32(uint8_t code, ibp_fp8_format_t fmt);

/* Converts src[0, n) to dst[0, n) (any alignment). IBP_ERR_INVALID_ARG on
 * NULL buffers (n > 0) or an unknown format. */
ibp_status_t ibp_fp8_convert(const float *src, uint64_t n, ibp_fp8_format_t fmt, uint8_t *dst);

/* Converts FP8 codes back to float32. */
ibp_status_t ibp_fp8_expand(const uint8_t *src, uint64_t n, ibp_fp8_format_t fmt, float *dst);

/* ---- block codec ---- */

/* Codec options. Always initialise with ibp_fp8_opts_default(). */
typedef struct ibp_fp8_opts {
	uint64_t size; /* sizeof this struct: set by ibp_fp8_opts_default(), checked by every call
			  taking it (IBP_ERR_INVALID_ARG when it is not) */
	ibp_fp8_format_t format; /* default E4M3 */
	uint32_t block;          /* B: power of two, 16..4096; default 256 */
	int hadamard;            /* 1 (default): rotate each block; 0: ablation */
	int adaptive;            /* 1 (default): RMS-based pre-scale; 0: ablation (alpha = 1) */
	int nthreads;            /* CPU worker threads; 0 = every CPU the calling thread may run on */
	int checksum;            /* 1 (default): an XXH3-64 checksum in the header; 0: none */
} ibp_fp8_opts_t;

/* Decoder flags (ibp_fp8_decode_ext). */
#define IBP_FP8_TRUSTED 1u /* skip the checksum: the caller verified the bytes already */

/* Fills `o` with the defaults: E4M3, B = 256, Hadamard and adaptive scale
 * on, nthreads 0, checksum 1. */
void ibp_fp8_opts_default(ibp_fp8_opts_t *o);

/* What a stream header says. */
typedef struct ibp_fp8_info {
	ibp_fp8_format_t format;
	uint32_t block;
	int hadamard, adaptive;
	ibp_dtype_t src_dtype; /* dtype the encoder read (informational) */
	uint64_t n;            /* elements */
	uint64_t bytes;        /* stream size */
} ibp_fp8_info_t;

/* Exact stream size for n elements under `o` (NULL = defaults); depends
 * only on n and the block size. IBP_ERR_INVALID_ARG on bad options or
 * n > 2^56. */
ibp_status_t ibp_fp8_encoded_size(const ibp_fp8_opts_t *o, uint64_t n, uint64_t *bytes);

/* Encodes src[0, n) (dt = IBP_DTYPE_F32, BF16 or F16; any alignment) into
 * dst. dst_cap must be at least ibp_fp8_encoded_size() (else
 * IBP_ERR_BUFFER_TOO_SMALL); *dst_size receives it. Output bytes do not
 * depend on nthreads and equal the CUDA encoder's. */
ibp_status_t ibp_fp8_encode(const void *src, ibp_dtype_t dt, uint64_t n, const ibp_fp8_opts_t *o, void *dst,
			    uint64_t dst_cap, uint64_t *dst_size);

/* Decodes a stream of src_size bytes (untrusted) into dst: n elements of dt
 * (F32, BF16 or F16; narrowing rounds to nearest even). A checksummed
 * stream is verified first (IBP_ERR_CHECKSUM). The header must say
 * n elements; a bad header, size or per-block field gives IBP_ERR_CORRUPT.
 * nthreads 0 = every CPU the calling thread may run on. */
ibp_status_t ibp_fp8_decode(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
			    int nthreads);

/* ibp_fp8_decode with decoder flags: IBP_FP8_TRUSTED skips the checksum
 * (every other check stays). Unknown flag bits: IBP_ERR_INVALID_ARG. */
ibp_status_t ibp_fp8_decode_ext(const void *src, uint64_t src_size, ibp_dtype_t dt, uint64_t n, void *dst,
				int nthreads, unsigned flags);

/* Parses and checks a stream header (untrusted). */
ibp_status_t ibp_fp8_stream_info(const void *src, uint64_t src_size, ibp_fp8_info_t *info);

/* ---- CUDA ---- */

/* Elementwise float32 -> FP8 on the device with the hardware conversion
 * (__nv_cvt_float_to_fp8, SATFINITE); same bytes as ibp_fp8_convert. */
ibp_status_t ibp_fp8_convert_cuda(const float *d_src, uint64_t n, ibp_fp8_format_t fmt, uint8_t *d_dst,
				  void *stream);

/* Elementwise FP8 -> float32 on the device. */
ibp_status_t ibp_fp8_expand_cuda(const uint8_t *d_src, uint64_t n, ibp_fp8_format_t fmt, float *d_dst,
				 void *stream);

/* Encodes nchunks = ceil(n / chunk_elems) chunks of d_src (chunk i: elements
 * [i*chunk_elems, ...)), each into its own stream at d_dst + i * stride with
 * stride = ibp_fp8_encoded_size(o, chunk_elems) (the last, shorter chunk
 * included). Bytes equal ibp_fp8_encode of each chunk. d_dst must be 16-byte
 * aligned. chunk_elems = 0 means one chunk of n elements. The streams
 * carry no checksum (opts.checksum is ignored): bytes equal
 * ibp_fp8_encode's with checksum = 0. */
ibp_status_t ibp_fp8_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_fp8_opts_t *o, void *d_dst, void *stream);

/* Decodes streams laid out as ibp_fp8_encode_cuda writes them (same n,
 * chunk_elems, and stride from the options) from the src_bytes bytes at
 * d_src (untrusted) into d_dst (dt = F32, BF16 or F16). The streams must
 * lie inside src_bytes: chunk i's stream at d_src + i * stride, the last
 * one ibp_fp8_encoded_size(o, its elements) long; a shorter source gives
 * IBP_ERR_CORRUPT before anything is launched, and no byte past src_bytes
 * is read. Headers and per-block fields are validated on the device:
 * *d_status (device int32, zeroed by this call) becomes IBP_ERR_CORRUPT if
 * any stream is bad; read it after the stream has synchronised. Values
 * equal ibp_fp8_decode's. Errors: IBP_ERR_INVALID_ARG (dtype, options,
 * NULL or misaligned pointers: d_src 16-byte, d_dst element-aligned),
 * IBP_ERR_CORRUPT (src_bytes too small), IBP_ERR_NO_DEVICE,
 * IBP_ERR_UNSUPPORTED (no CUDA), IBP_ERR_CUDA. Thread-safe. */
ibp_status_t ibp_fp8_decode_bounded_cuda(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt, uint64_t n,
					 uint64_t chunk_elems, const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status,
					 void *stream);
/* The name before 0.2 (docs/API.md "Names"). */
ibp_status_t ibp_fp8_decode_cuda_bounded(const void *d_src, uint64_t src_bytes, ibp_dtype_t dt, uint64_t n,
					 uint64_t chunk_elems, const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status,
					 void *stream) IBP_DEPRECATED("use ibp_fp8_decode_bounded_cuda");

/* Deprecated (kept for existing callers; use ibp_fp8_decode_bounded_cuda):
 * as ibp_fp8_decode_bounded_cuda with src_bytes taken to be exactly the
 * size the streams of this shape occupy, so the caller must guarantee that
 * d_src holds that many bytes. */
ibp_status_t ibp_fp8_decode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t chunk_elems,
				 const ibp_fp8_opts_t *o, void *d_dst, int32_t *d_status, void *stream)
	IBP_DEPRECATED("use ibp_fp8_decode_bounded_cuda (takes the source length)");

#ifdef __cplusplus
}
#endif
#endif /* IBP_FP8_H */
