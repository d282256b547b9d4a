/* host-emulation stub: only what the device headers' host helpers name */
#pragma once
#include <stddef.h>
typedef enum cudaError { cudaSuccess = 0, cudaErrorNoDevice = 100, cudaErrorInsufficientDriver = 35 } cudaError_t;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t);
const char *cudaGetErrorName(cudaError_t);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaDeviceGetAttribute(int *, enum cudaDeviceAttr, int);
