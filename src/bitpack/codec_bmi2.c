/* codec_bmi2.c - the row kernels with x86-64 BMI2 pext/pdep.
 *
 * Compiled with -mbmi2; only called when the CPU has BMI2 (codec.c checks).
 * The code is the kernel template of codec_internal.h, the same as the
 * portable kernels, with extract/deposit done by one instruction.
 */
#include <immintrin.h>

#include "bitpack/codec_internal.h"

IBP_INLINE uint64_t ibp_k_dep_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	return _pdep_u64(v, cl->nm[j]);
}
IBP_INLINE uint64_t ibp_k_dep_m(const ibp_cluster_t *cl, uint64_t j, uint64_t v)
{
	return _pdep_u64(v, cl->m[j]);
}
IBP_INLINE uint64_t ibp_k_ext_nm(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	return _pext_u64(x, cl->nm[j]);
}
IBP_INLINE uint64_t ibp_k_ext_m(const ibp_cluster_t *cl, uint64_t j, uint64_t x)
{
	return _pext_u64(x, cl->m[j]);
}

#define IBP_K(name) ibp_bmi2_##name
#define IBP_K_WIDE_PEXT /* the template may call _pext_u64 */
#define IBP_CODEC_KERNEL_BODY
#include "bitpack/codec_internal.h"
#undef IBP_K

const ibp_kernels_t ibpi_kernels_bmi2 = {
	IBP_IMPL_BMI2,
	ibp_bmi2_encode,
	ibp_bmi2_decode_static,
	ibp_bmi2_decode_exc,
	ibpi_row_stats,
	NULL,
	ibp_bmi2_decode_tiny,
	ibp_bmi2_decode_tiny_run,
};
