/*
 * kernels/sort_key.h — a score as a 64-bit integer key whose ascending order is torch.sort(
 * descending=True)'s order of the scores (Note [Sorting scores as torch does] in
 * csrc/cpu/dk_argsort.h): every NaN first, then +inf down to -inf, -0.0 equal to +0.0. Ties
 * are broken by index by whoever sorts (the GPU NMS sorts (key, index) pairs). Written once for
 * host and device; float scores are widened to double first, which is exact and keeps order.
 * Also a category label as a key for equality (dk_label_key), for the same kernels.
 */
#ifndef DK_KERNELS_SORT_KEY_H
#define DK_KERNELS_SORT_KEY_H

#include <math.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <string.h>
#endif

#include "dk_hd.h"
#include "dk_half.h"
#include "dk_tensor.h" /* dk_dtype */

/* The bits of a double. */
DK_HD DK_INLINE uint64_t dk_double_bits(double v)
{
    uint64_t u;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    u = (uint64_t)__double_as_longlong(v);
#else
    memcpy(&u, &v, sizeof u);
#endif
    return u;
}

DK_HD DK_INLINE uint64_t dk_sort_key_desc(double v)
{
    if (v != v) return 0; /* NaN: before everything (no other value maps to 0, see below) */
    if (v == 0) v = 0;    /* -0.0 ties with +0.0 */
    const uint64_t u = dk_double_bits(v);
    /* The usual order-preserving map of IEEE doubles onto unsigned integers (negatives
     * reversed, positives above them), then reversed for descending order. Only a NaN could
     * map to 0 or to UINT64_MAX, so both are free: NaN takes 0, padding may take UINT64_MAX. */
    const uint64_t ascending = (u >> 63) ? ~u : (u | ((uint64_t)1 << 63));
    return ~ascending;
}

/*
 * A category label as a key for equality (nms_rotated's labels, ops/rotated.h): equal keys,
 * equal categories. Integers as they are; floats by the bits of their double value, with -0 as
 * +0 and every NaN as one NaN. Element o of `data`, of dtype dt (int32, int64 or a float dtype;
 * 0 for any other, which the op refuses).
 */
DK_HD DK_INLINE uint64_t dk_label_key_float(double v)
{
    if (v != v) v = NAN;
    if (v == 0) v = 0;
    return dk_double_bits(v);
}

DK_HD DK_INLINE uint64_t dk_label_key(const void *data, int64_t o, int dt)
{
    switch (dt) {
    case DK_INT64: return (uint64_t)((const int64_t *)data)[o];
    case DK_INT32: return (uint64_t)(int64_t)((const int32_t *)data)[o];
    case DK_FLOAT32: return dk_label_key_float(((const float *)data)[o]);
    case DK_FLOAT64: return dk_label_key_float(((const double *)data)[o]);
    case DK_FLOAT16: return dk_label_key_float(dk_half_to_float(((const uint16_t *)data)[o]));
    case DK_BFLOAT16: return dk_label_key_float(dk_bfloat16_to_float(((const uint16_t *)data)[o]));
    default: return 0;
    }
}

#endif /* DK_KERNELS_SORT_KEY_H */
