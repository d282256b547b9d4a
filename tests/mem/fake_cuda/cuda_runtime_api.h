/* A stand-in for the CUDA runtime's header: the few types and calls that
 * src/mem/pinned_cudahost.c uses, for pinned_first_call.c, which runs that
 * file on a machine without CUDA against a fake runtime it defines itself. */
#ifndef IBP_FAKE_CUDA_RUNTIME_API_H
#define IBP_FAKE_CUDA_RUNTIME_API_H
#include <stddef.h>

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorMemoryAllocation = 2,
	cudaErrorNotReady = 600,
} cudaError_t;
typedef struct fake_event *cudaEvent_t;
typedef struct fake_stream *cudaStream_t;
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1 };
struct cudaPointerAttributes {
	enum cudaMemoryType type;
	int device;
	void *devicePointer;
	void *hostPointer;
};
#define cudaHostAllocMapped 2u
#define cudaHostAllocPortable 1u
#define cudaEventDisableTiming 2u

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
#endif
