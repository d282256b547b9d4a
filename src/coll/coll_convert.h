/* coll_convert.h - dtype conversions of the collectives (coll_convert.c). */
#ifndef IBP_COLL_CONVERT_H
#define IBP_COLL_CONVERT_H

#include <stdint.h>

#include "ibp/types.h"

/* n elements of dt widened to float32 (exact). */
void ibpi_coll_widen(const void *src, ibp_dtype_t dt, uint64_t n, float *dst);

/* n float32 rounded to dt (nearest even; NaNs stay NaNs). */
void ibpi_coll_narrow(const float *src, ibp_dtype_t dt, uint64_t n, void *dst);

#endif /* IBP_COLL_CONVERT_H */
