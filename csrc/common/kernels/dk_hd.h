/*
 * kernels/dk_hd.h — qualifiers for math shared by the CPU, CUDA and HIP kernels.
 *
 * Headers under kernels/ hold per-element math written once in plain C that also compiles as
 * CUDA/HIP C++. DK_HD marks a function callable from host and device code; DK_INLINE makes it a
 * header-only inline function in either language.
 */
#ifndef DK_KERNELS_HD_H
#define DK_KERNELS_HD_H

#if defined(__HIPCC__)
/* nvcc includes its runtime's declarations in every file; hipcc does not, and the device
 * intrinsics the kernel headers use (__float_as_uint, __double_as_longlong) are in it. */
#include <hip/hip_runtime.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
/* Spelled without __forceinline__, which HIP defines only in hip_runtime.h: a kernel header may
 * come first. nvcc and hipcc know __host__ __device__ without any header. */
#define DK_HD __host__ __device__
#define DK_INLINE static inline __attribute__((always_inline))
#else
#define DK_HD
#define DK_INLINE static inline
#endif

/* DK_INLINE, inlined even where the host compiler's heuristics would not: for math that a CPU
 * loop must see whole to vectorise (GCC otherwise calls a clone once the unit has grown, and the
 * loop stays scalar: the sigmoid focal loss's forward did, Note [Focal loss arithmetic]). */
#define DK_INLINE_ALWAYS static inline __attribute__((always_inline))

#endif /* DK_KERNELS_HD_H */
