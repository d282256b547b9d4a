/* hd.h - IBP_HD marks a function that host and device code both compile
 * (__host__ __device__ under nvcc, nothing in C): the one definition of the
 * rules the CPU code and the CUDA kernels share (util/fpmath.h, util/mix.h,
 * bitpack/row_mode.h, bitpack/mask_rule.h, exp/exp_format.h, fp8/fp8_impl.h). */
#ifndef IBP_UTIL_HD_H
#define IBP_UTIL_HD_H

#ifdef __CUDACC__
#define IBP_HD __host__ __device__
#else
#define IBP_HD
#endif

#endif /* IBP_UTIL_HD_H */
