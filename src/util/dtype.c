/* dtype.c - element sizes and names. */
#include "ibp/types.h"

size_t ibp_dtype_size(ibp_dtype_t dt)
{
	switch (dt) {
	case IBP_DTYPE_BYTES: case IBP_DTYPE_I8: case IBP_DTYPE_U8: case IBP_DTYPE_BOOL: return 1;
	case IBP_DTYPE_I16: case IBP_DTYPE_U16: case IBP_DTYPE_F16: case IBP_DTYPE_BF16: return 2;
	case IBP_DTYPE_I32: case IBP_DTYPE_U32: case IBP_DTYPE_F32: return 4;
	case IBP_DTYPE_I64: case IBP_DTYPE_U64: case IBP_DTYPE_F64: return 8;
	}
	return 0;
}

const char *ibp_dtype_name(ibp_dtype_t dt)
{
	switch (dt) {
	case IBP_DTYPE_BYTES: return "bytes";
	case IBP_DTYPE_I8: return "i8";
	case IBP_DTYPE_I16: return "i16";
	case IBP_DTYPE_I32: return "i32";
	case IBP_DTYPE_I64: return "i64";
	case IBP_DTYPE_U8: return "u8";
	case IBP_DTYPE_U16: return "u16";
	case IBP_DTYPE_U32: return "u32";
	case IBP_DTYPE_U64: return "u64";
	case IBP_DTYPE_F16: return "f16";
	case IBP_DTYPE_BF16: return "bf16";
	case IBP_DTYPE_F32: return "f32";
	case IBP_DTYPE_F64: return "f64";
	case IBP_DTYPE_BOOL: return "bool";
	}
	return "unknown";
}
