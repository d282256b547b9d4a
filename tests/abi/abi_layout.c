/* abi_layout.c - prints the layout of the public structs that Python
 * mirrors with ctypes (bench/ibp_ctypes.py), as the C compiler sees them:
 *   struct NAME SIZE ALIGN
 *   field NAME MEMBER OFFSET SIZE
 * with the fields in declaration order. test_ctypes_abi.py compares these
 * lines with the mirror, and checks that every member the header declares
 * is listed here, so a field added to a header fails the test until both
 * this list and the mirror know it. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "ibp.h"

#define STRUCT(T) printf("struct %s %zu %zu\n", #T, sizeof(T), alignof(T))
#define FIELD(T, m) printf("field %s %s %zu %zu\n", #T, #m, offsetof(T, m), sizeof(((T *)0)->m))

int main(void)
{
	STRUCT(ibp_train_opts_t);
	FIELD(ibp_train_opts_t, chunk_bytes);
	FIELD(ibp_train_opts_t, threshold);
	FIELD(ibp_train_opts_t, sample);
	FIELD(ibp_train_opts_t, seed);
	FIELD(ibp_train_opts_t, clusters);
	FIELD(ibp_train_opts_t, nthreads);
	FIELD(ibp_train_opts_t, xval);

	STRUCT(ibp_exp_opts_t);
	FIELD(ibp_exp_opts_t, table_mode);
	FIELD(ibp_exp_opts_t, sigma);
	FIELD(ibp_exp_opts_t, table);
	FIELD(ibp_exp_opts_t, nthreads);

	STRUCT(ibp_fp8_opts_t);
	FIELD(ibp_fp8_opts_t, format);
	FIELD(ibp_fp8_opts_t, block);
	FIELD(ibp_fp8_opts_t, hadamard);
	FIELD(ibp_fp8_opts_t, adaptive);
	FIELD(ibp_fp8_opts_t, nthreads);
	return ferror(stdout) ? 1 : 0;
}
