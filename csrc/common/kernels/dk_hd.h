/*
 * kernels/dk_hd.h — qualifiers for math shared by the CPU, CUDA and HIP kernels.
 *
 * Headers under kernels/ hold per-element math written once in plain C that also compiles as
 * CUDA/HIP C++. DK_HD marks a function callable from host and device code; DK_INLINE makes it a
 * header-only inline function in either language.
 */
#ifndef DK_KERNELS_HD_H
#define DK_KERNELS_HD_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DK_HD __host__ __device__
#define DK_INLINE static __forceinline__
#else
#define DK_HD
#define DK_INLINE static inline
#endif

#endif /* DK_KERNELS_HD_H */
