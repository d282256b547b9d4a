/* ibp_store.cuh - the device store (struct ibp_cuda_store, the opaque
 * ibp_cuda_store_t of ibp/cuda.h) and the gather's launch arguments, one
 * definition for every kernel file that reads a store: ibp_gather.cu,
 * which makes and gathers from it, and ibp_bag.cu, which pools its rows. */
#ifndef IBP_STORE_CUH
#define IBP_STORE_CUH

#include "ibp_device.cuh"

struct IbpGatherArgs {
	IbpDevCodec cd;
	const uint8_t *payload;   /* device address (device or mapped host memory) */
	uint64_t payload_bytes;
	const uint64_t *offsets;  /* packed: nrows + 1; NULL: row i at i * stride */
	const uint64_t *lens;     /* fixed stride: bytes of each row (NULL: row_bytes) */
	const uint8_t *flags;     /* NULL: every row is raw (plain gather) */
	const uint8_t *clusters;  /* NULL: cluster 0 */
	uint64_t nrows;
	uint64_t stride;
	int exact;                /* packed: a row must use exactly its extent */
	const int64_t *ids;
	uint64_t n;
	uint8_t *out;
	const int64_t *out_rows;
	int32_t *status;
	unsigned long long *nerr;
	const uint32_t *lens32;   /* staged (ibpi_gather_staged_cuda): bytes of each stage row */
	const uint32_t *meta32;   /* staged: mode | cluster << 8 of each stage row (then flags,
				     clusters unused) */
	uint32_t stage_bytes;     /* bytes of each of a group's buffers (0: no staging) */
	uint32_t nbuf;            /* buffers per group, 2 or 3: rows in flight per group = nbuf - 1 */
};

typedef void (*IbpGatherFn)(const IbpGatherArgs);

struct IbpLaunch {
	IbpGatherFn fn;
	unsigned threads;
	unsigned gpb;        /* groups per block */
	uint32_t stage;      /* bytes per stage buffer */
	unsigned nbuf;       /* stage buffers (and job slots) per group */
	size_t smem;
	uint64_t max_blocks; /* resident blocks on the whole device */
};

struct ibp_cuda_store {
	int on_device;
	ibp_hstore_t *host;           /* host-fallback store */
	ibp_cuda_codec_t *codec;
	int device;
	uint64_t nrows, R;
	const uint8_t *payload;       /* device address */
	uint64_t payload_bytes;
	uint64_t *offsets;            /* device: packed offsets (nrows + 1) */
	uint64_t *lens;               /* device: inplace row lengths (nrows) */
	uint8_t *flags, *clusters;    /* device */
	unsigned long long *nerr;     /* device: failed rows since the last ibp_cuda_store_errors */
	void *meta;                   /* the cudaMalloc holding the five arrays above */
	void *own_pinned;             /* COPY_PINNED payload */
	void *own_dev;                /* COPY_DEVICE payload */
	void *registered;             /* REGISTER: the range to unregister */
	ibp_cuda_kernel_t kernel;
	uint64_t longest;             /* a packed store's longest encoded row; R for an inplace one */
	IbpLaunch launch;
	uint64_t *h_off;              /* host copies of a packed store's arrays (the cache's decisions) */
	uint8_t *h_flags, *h_cl;
};

#endif /* IBP_STORE_CUH */
