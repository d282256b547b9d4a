/* ibp.h - libibp: lossless and lossy compression for moving ML tensors.
 *
 * Include this one header. Every call returns an ibp_status_t (see
 * ibp/status.h); the library never prints and never exits.
 */
#ifndef IBP_H
#define IBP_H

#include "ibp/version.h"
#include "ibp/status.h"
#include "ibp/types.h"
#include "ibp/checksum.h"
#include "ibp/codec.h"
#include "ibp/analyze.h"
#include "ibp/npy.h"
#include "ibp/alloc.h"
#include "ibp/container.h"
#include "ibp/store.h"
#include "ibp/bag.h"
#include "ibp/cuda.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/cache.h"
#include "ibp/slab_pool.h"
#include "ibp/kv.h"
#include "ibp/coll.h"

#endif /* IBP_H */
