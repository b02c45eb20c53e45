/*
 * kernels/sort_key.h — a score as a 64-bit integer key whose ascending order is torch.sort(
 * descending=True)'s order of the scores (Note [Sorting scores as torch does] in
 * csrc/cpu/dk_argsort.h): every NaN first, then +inf down to -inf, -0.0 equal to +0.0. Ties
 * are broken by index by whoever sorts (the GPU NMS sorts (key, index) pairs). Written once for
 * host and device; float scores are widened to double first, which is exact and keeps order.
 */
#ifndef DK_KERNELS_SORT_KEY_H
#define DK_KERNELS_SORT_KEY_H

#include <stdint.h>
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <string.h>
#endif

#include "dk_hd.h"

DK_HD DK_INLINE uint64_t dk_sort_key_desc(double v)
{
    if (v != v) return 0; /* NaN: before everything (no other value maps to 0, see below) */
    if (v == 0) v = 0;    /* -0.0 ties with +0.0 */
    uint64_t u;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    u = (uint64_t)__double_as_longlong(v);
#else
    memcpy(&u, &v, sizeof u);
#endif
    /* The usual order-preserving map of IEEE doubles onto unsigned integers (negatives
     * reversed, positives above them), then reversed for descending order. Only a NaN could
     * map to 0 or to UINT64_MAX, so both are free: NaN takes 0, padding may take UINT64_MAX. */
    const uint64_t ascending = (u >> 63) ? ~u : (u | ((uint64_t)1 << 63));
    return ~ascending;
}

#endif /* DK_KERNELS_SORT_KEY_H */
