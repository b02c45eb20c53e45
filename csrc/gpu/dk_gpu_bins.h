/*
 * dk_gpu_bins.h — the output bin (k, c, ph, pw) that a GPU thread's flat index names, for the
 * RoI pooling families' kernels (roi_align, roi_pool): one thread per bin, in RoI-major order
 * (k, c, ph, pw; torchvision's) or channel-major order (c, k, ph, pw: Note [The GPU order of
 * roi_align's bins] in roi_align/roi_align_gpu.cu says why and what each costs).
 */
#ifndef DK_GPU_BINS_H
#define DK_GPU_BINS_H

#include <stdint.h>

#include "kernels/dk_hd.h"

/* narrow: every index below 2^31, decoded with 32-bit divisions (a 64-bit one is a long
 * software sequence on GPUs). */
__device__ DK_INLINE void dk_gpu_bin_of(int narrow, int channel_major, int64_t K, int64_t C, int64_t PH, int64_t PW,
                                        int64_t i, int64_t *k, int64_t *c, int64_t *ph, int64_t *pw)
{
    if (narrow) {
        const uint32_t u = (uint32_t)i, pw32 = (uint32_t)PW, ph32 = (uint32_t)PH, r = u / pw32 / ph32;
        *pw = u % pw32;
        *ph = u / pw32 % ph32;
        *k = channel_major ? r % (uint32_t)K : r / (uint32_t)C;
        *c = channel_major ? r / (uint32_t)K : r % (uint32_t)C;
        return;
    }
    *pw = i % PW;
    *ph = i / PW % PH;
    const int64_t r = i / (PW * PH);
    *k = channel_major ? r % K : r / C;
    *c = channel_major ? r / K : r % C;
}

#endif /* DK_GPU_BINS_H */
