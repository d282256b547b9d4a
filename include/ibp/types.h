/* ibp/types.h - element types shared by codecs, the container and the CLI. */
#ifndef IBP_TYPES_H
#define IBP_TYPES_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a tensor. Values are stored in .ibp files: stable. */
typedef enum ibp_dtype {
	IBP_DTYPE_BYTES = 0, /* opaque bytes (element size 1) */
	IBP_DTYPE_I8 = 1,
	IBP_DTYPE_I16 = 2,
	IBP_DTYPE_I32 = 3,
	IBP_DTYPE_I64 = 4,
	IBP_DTYPE_U8 = 5,
	IBP_DTYPE_U16 = 6,
	IBP_DTYPE_U32 = 7,
	IBP_DTYPE_U64 = 8,
	IBP_DTYPE_F16 = 9,
	IBP_DTYPE_BF16 = 10,
	IBP_DTYPE_F32 = 11,
	IBP_DTYPE_F64 = 12,
	IBP_DTYPE_BOOL = 13
} ibp_dtype_t;

/* Size in bytes of one element of `dt`, or 0 for an unknown value. */
size_t ibp_dtype_size(ibp_dtype_t dt);

/* Short lower-case name ("f32", "bf16", ...), or "unknown". */
const char *ibp_dtype_name(ibp_dtype_t dt);

#ifdef __cplusplus
}
#endif
#endif /* IBP_TYPES_H */
