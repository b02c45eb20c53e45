/*
 * dk_cuda_runtime.h — what the CUDA backend (libdkit_cuda.so) needs of the CUDA runtime, under the
 * names dkit's GPU code uses (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h). gpu/dk_gpu.h
 * includes it when nvcc compiles; its HIP counterpart is csrc/hip/dk_hip_runtime.h.
 */
#ifndef DK_CUDA_RUNTIME_H
#define DK_CUDA_RUNTIME_H

#include <cuda_runtime.h>

#define DK_GPU_BACKEND_NAME "cuda"
#define DK_GPU_DEVICE_TYPE kDLCUDA
#define DK_GPU_KEY DK_KEY_CUDA
#define DK_GPU_RUNTIME_NAME "CUDA"
#define DK_GPU_NO_DRIVER "no CUDA driver"

typedef cudaError_t dkgError_t;
typedef cudaStream_t dkgStream_t;
#define dkgSuccess cudaSuccess
#define dkgErrorNoDevice cudaErrorNoDevice
#define dkgErrorInsufficientDriver cudaErrorInsufficientDriver
#define dkgGetErrorString cudaGetErrorString
#define dkgGetLastError cudaGetLastError
#define dkgGetDeviceCount cudaGetDeviceCount
#define dkgGetDevice cudaGetDevice
#define dkgSetDevice cudaSetDevice
#define dkgDriverGetVersion cudaDriverGetVersion
#define dkgStreamSynchronize cudaStreamSynchronize
#define dkgDeviceSynchronize cudaDeviceSynchronize
#define dkgMallocAsync cudaMallocAsync
#define dkgFreeAsync cudaFreeAsync
#define dkgMemsetAsync cudaMemsetAsync
#define dkgMemcpyAsync cudaMemcpyAsync
#define dkgMemcpyHostToDevice cudaMemcpyHostToDevice
#define dkgMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define dkgMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define dkgMemcpyDefault cudaMemcpyDefault

#define DK_GPU_WARP 32

/* Note [Warp shuffles] in csrc/gpu/dk_gpu.h: the _sync forms, with the full mask. */
#define DK_GPU_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#define DK_GPU_SHFL_DOWN(v, delta) __shfl_down_sync(0xffffffffu, (v), (delta))
#define DK_GPU_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define DK_GPU_BALLOT(pred) ((unsigned long long)__ballot_sync(0xffffffffu, (pred)))

#endif /* DK_CUDA_RUNTIME_H */
