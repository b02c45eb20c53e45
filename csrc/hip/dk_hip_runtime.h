/*
 * dk_hip_runtime.h — what the HIP backend (libdkit_hip.so) needs of ROCm's HIP runtime, under the
 * names dkit's GPU code uses (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h). gpu/dk_gpu.h
 * includes it when hipcc compiles; nothing else does.
 *
 * The HIP backend has no kernel source of its own: hipcc (-x hip) compiles the .cu files of
 * csrc/gpu/ (csrc/hip/rules.mk). What is HIP's own lives here: the runtime's names, its warp
 * (wavefront) width and shuffles, and how the backend names its runtime in messages. (A
 * HIP-only kernel, should one ever be needed, would go in this folder too, with a rule for it in
 * rules.mk; there is none today.)
 */
#ifndef DK_HIP_RUNTIME_H
#define DK_HIP_RUNTIME_H

#include <hip/hip_runtime.h>

#define DK_GPU_BACKEND_NAME "hip"
#define DK_GPU_DEVICE_TYPE kDLROCM
#define DK_GPU_KEY DK_KEY_HIP
#define DK_GPU_RUNTIME_NAME "HIP"
#define DK_GPU_NO_DRIVER "no ROCm driver (amdgpu kernel driver / HSA runtime)"

typedef hipError_t dkgError_t;
typedef hipStream_t dkgStream_t;
#define dkgSuccess hipSuccess
#define dkgErrorNoDevice hipErrorNoDevice
#define dkgErrorInsufficientDriver hipErrorInsufficientDriver
#define dkgGetErrorString hipGetErrorString
#define dkgGetLastError hipGetLastError
#define dkgGetDeviceCount hipGetDeviceCount
#define dkgGetDevice hipGetDevice
#define dkgSetDevice hipSetDevice
#define dkgDriverGetVersion hipDriverGetVersion
#define dkgStreamSynchronize hipStreamSynchronize
#define dkgDeviceSynchronize hipDeviceSynchronize
#define dkgMallocAsync hipMallocAsync
#define dkgFreeAsync hipFreeAsync
#define dkgMemsetAsync hipMemsetAsync
#define dkgMemcpyAsync hipMemcpyAsync
#define dkgMemcpyHostToDevice hipMemcpyHostToDevice
#define dkgMemcpyDeviceToHost hipMemcpyDeviceToHost
#define dkgMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define dkgMemcpyDefault hipMemcpyDefault

#define DK_GPU_WARP 64 /* gfx9 (gfx90a, MI200) wavefronts; the kernels do not depend on it */

/* Note [Warp shuffles] in csrc/gpu/dk_gpu.h: ROCm 5.2 has no _sync variants; a wavefront always runs
 * converged there, so the mask-free forms are the same operation. */
#define DK_GPU_SHFL(v, src) __shfl((v), (src))
#define DK_GPU_SHFL_DOWN(v, delta) __shfl_down((v), (delta))
#define DK_GPU_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define DK_GPU_BALLOT(pred) ((unsigned long long)__ballot(pred))

#endif /* DK_HIP_RUNTIME_H */
