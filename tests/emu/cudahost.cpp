/* src/cuda/ibp_cuda_cudahost.c (device count, cudaMalloc wrappers) against
 * the runtime stub, so that the library's no-CUDA stubs are never linked. */
#include "emu.h"
#include <cuda_runtime_api.h>
extern "C" {
#include "util/error.h"
}
#include "cuda/ibp_cuda_cudahost.c"
