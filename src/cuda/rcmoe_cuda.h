/* rcmoe_cuda.h - RCMoE's LSQ and PTS codecs on the GPU (kernels/rcmoe.cu),
 * twins of ibpi_lsq_encode, ibpi_lsq_decode, ibpi_pts_encode and ibpi_pts_decode_add
 * (src/coll/rcmoe.c): the same stream bytes and values (the uniforms are
 * the counter-based hash of key and element index). Builds without CUDA get stubs
 * (rcmoe_cuda_nocuda.c). Internal: the collective does not call them yet. */
#ifndef IBP_CUDA_RCMOE_CUDA_H
#define IBP_CUDA_RCMOE_CUDA_H

#include <stdint.h>

#include "ibp/status.h"
#include "ibp/types.h"

/* Workspace bytes ibpi_lsq_encode_cuda needs (the row maxima and S*). */
uint64_t ibpi_lsq_cuda_workspace(uint64_t n, uint64_t row);

/* Encodes n elements of dt at d_src as ibpi_lsq_encode does (row 1..65535, B in
 * {2, 4, 8}, K in {0, 4, 8}) into d_out, which must hold ibpi_lsq_bytes(n, row,
 * B, K) bytes; d_ws holds ibpi_lsq_cuda_workspace(n, row) bytes. *d_status
 * (device) gets IBP_OK, or IBP_ERR_INVALID_ARG when an element is not
 * finite or past 3.4e38 (d_out is then undefined). Stream-ordered; returns
 * IBP_ERR_INVALID_ARG (bad parameters, NULL pointers), IBP_ERR_NO_DEVICE,
 * IBP_ERR_CUDA, or IBP_ERR_UNSUPPORTED without CUDA. */
ibp_status_t ibpi_lsq_encode_cuda(const void *d_src, ibp_dtype_t dt, uint64_t n, uint64_t row, int B, int K,
			     uint64_t key, uint8_t *d_out, void *d_ws, int32_t *d_status, void *stream);

/* Decodes a stream of `size` bytes at d_in into n elements of dt at d_dst;
 * *d_status gets IBP_OK or IBP_ERR_CORRUPT (a header that does not
 * describe n elements in size bytes, a bad S* or row scale; d_dst is then
 * undefined). Returns as ibpi_lsq_encode_cuda. */
ibp_status_t ibpi_lsq_decode_cuda(const uint8_t *d_in, uint64_t size, ibp_dtype_t dt, uint64_t n, void *d_dst,
			     int32_t *d_status, void *stream);

/* Workspace bytes ibpi_pts_encode_cuda and ibpi_pts_decode_add_cuda need for k elements. */
uint64_t ibpi_pts_cuda_workspace(uint64_t k);

/* PTS of the k floats at d_g as ibpi_pts_encode does (sigma in (0, 1]) into
 * d_out (ibpi_pts_max_bytes(k) bytes); *d_size (device) gets the stream's size,
 * *d_status IBP_OK or IBP_ERR_INVALID_ARG for a non-finite element. Returns
 * as ibpi_lsq_encode_cuda. */
ibp_status_t ibpi_pts_encode_cuda(const float *d_g, uint64_t k, double sigma, uint64_t key, uint8_t *d_out,
			     uint64_t *d_size, void *d_ws, int32_t *d_status, void *stream);

/* d_acc[i] += the stream's value (ibpi_pts_decode_add); *d_status gets IBP_OK,
 * or IBP_ERR_CORRUPT for a malformed stream (then d_acc is unchanged). */
ibp_status_t ibpi_pts_decode_add_cuda(const uint8_t *d_in, uint64_t size, uint64_t k, float *d_acc, void *d_ws,
				 int32_t *d_status, void *stream);

#endif /* IBP_CUDA_RCMOE_CUDA_H */
