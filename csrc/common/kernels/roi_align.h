/*
 * kernels/roi_align.h — RoIAlign's geometry and bilinear sampling, written once for every
 * backend (host and device; plain C that also compiles as CUDA/HIP C++).
 *
 * Semantics are MMCV's / torchvision's (see ops/roi_align.h), down to the order of floating-point
 * operations, so that float32 results match those libraries to rounding:
 *
 *   start  = x1 * spatial_scale - (aligned ? 0.5 : 0)          (likewise y, and end from x2)
 *   len    = end - start;  if (!aligned) len = max(len, 1)
 *   bin    = len / pooled
 *   grid   = sampling_ratio > 0 ? sampling_ratio : ceil(len / pooled)    (samples per bin, per axis)
 *   sample = start + p * bin + (i + 0.5) * bin / grid                    (bin p, sample i < grid)
 *   count  = max(grid_h * grid_w, 1)
 *
 * and a sample (y, x) reads the input bilinearly with these edge rules, per axis:
 *   y < -1 or y > H (or NaN)  -> the sample contributes 0;
 *   y <= 0                    -> y = 0;
 *   floor(y) >= H - 1         -> both neighbours are row H - 1 (weight 1 on it).
 *
 * Robustness (beyond the reference implementations, which read out of bounds or loop forever
 * on such input): a NaN or infinite coordinate yields a sample that contributes nothing (so a
 * NaN box pools to 0); an input of size 0 along an axis has no valid sample; and the adaptive
 * grid (sampling_ratio <= 0) is capped at DK_ROI_ALIGN_MAX_ADAPTIVE_GRID(size, pooled) =
 * ceil(4 * (size + 1) / pooled) samples per bin. The cap binds only for a RoI longer than
 * 4 * (size + 1) pixels along that axis (4x the whole feature map), so every real box gets the
 * references' result; an infinite or garbage box costs at most about 16 * (H + 1) * (W + 1)
 * samples per (RoI, channel) instead of looping (practically) forever. An explicit
 * sampling_ratio is honoured as given: its cost, sampling_ratio^2 samples per output element,
 * is the caller's choice.
 *
 * What is here, for compute type float (suffix _f32) and double (_f64):
 *   dk_roi_align_axis_*          one RoI axis: start, bin size, samples per bin
 *   dk_roi_align_roi_init_*      both axes of a box (x1, y1, x2, y2)
 *   dk_roi_align_axis_sample_*   coordinate of sample i of bin p
 *   dk_roi_align_taps_*          1-D bilinear taps of a coordinate: two indices, two weights
 *   dk_roi_align_bilinear_*      2-D taps (torchvision's w1..w4), from two 1-D taps
 *   dk_roi_align_count_*         the divisor of average pooling
 * The separable CPU kernel builds its per-RoI weight tables from the 1-D functions; a GPU
 * thread computes one output element with the per-element functions below.
 *
 * Per element, for storage f32 (float), f64 (double), f16 and bf16 (uint16_t bit patterns,
 * computed in float); `plane` points at element (0, 0) of one (n, c) plane, sy / sx are its row
 * and column strides in elements:
 *   dk_roi_align_load_S / dk_roi_align_store_S    one element, converted to / from compute type
 *   dk_roi_align_interp_S                         value at a 2-D tap set
 *   dk_roi_align_forward_avg_S                    output (ph, pw), average pooling
 *   dk_roi_align_forward_max_S                    output (ph, pw), max pooling, and its argmax
 * Backward needs atomics on a GPU and a fixed order on a CPU, so it is left to the kernel; per
 * grad element it is:
 *   avg:  for each sample (y, x) of bin (ph, pw): if dk_roi_align_bilinear_init(y, x, ...):
 *             grad_input[y_low, x_low] += g * w1 / count, ... (4 taps)
 *   max:  if argmax_y != -1 and dk_roi_align_bilinear_init(argmax_y, argmax_x, ...):
 *             grad_input[y_low, x_low] += g * w1, ... (no division)
 */
#if defined(DK__RA_TEMPLATE_MATH)
/* ------------------------------------------------------------------------------------------ */
/* Template body: compute type DK__RA_T, names suffixed by DK__RA_FN.                         */

/* One axis of one RoI. */
typedef struct {
    DK__RA_T start; /* coordinate of the first bin's edge, in input pixels */
    DK__RA_T bin;   /* bin size; 0 or negative for degenerate aligned boxes, NaN for NaN boxes */
    int64_t grid;   /* samples per bin along this axis; 0 when there are none */
} DK__RA_FN(dk_roi_align_axis);

/* Two bilinear taps along one axis: value = wlo * v[lo] + whi * v[hi]. */
typedef struct {
    int64_t lo, hi;
    DK__RA_T wlo, whi;
} DK__RA_FN(dk_roi_align_taps);

/* Four taps in torchvision's naming: w1 (y_low, x_low), w2 (y_low, x_high), w3 (y_high, x_low),
 * w4 (y_high, x_high). */
typedef struct {
    int64_t y_low, y_high, x_low, x_high;
    DK__RA_T w1, w2, w3, w4;
} DK__RA_FN(dk_roi_align_bilinear);

/* Geometry of one axis of a box from its two coordinates c1 <= c2 (x1, x2 or y1, y2), in input
 * coordinates before spatial_scale. `size` is the input's extent along the axis (W or H). */
DK_HD DK_INLINE DK__RA_FN(dk_roi_align_axis)
    DK__RA_FN(dk_roi_align_axis_init)(DK__RA_T c1, DK__RA_T c2, DK__RA_T spatial_scale,
                                      int64_t pooled, int64_t sampling_ratio, bool aligned,
                                      int64_t size)
{
    DK__RA_FN(dk_roi_align_axis) a;
    const DK__RA_T offset = aligned ? (DK__RA_T)0.5 : (DK__RA_T)0;
    const DK__RA_T start = c1 * spatial_scale - offset;
    const DK__RA_T end = c2 * spatial_scale - offset;
    DK__RA_T len = end - start;
    if (!aligned && len < (DK__RA_T)1) /* std::max(len, 1) of the references: NaN stays NaN */
        len = (DK__RA_T)1;
    a.start = start;
    a.bin = len / (DK__RA_T)pooled;
    if (sampling_ratio > 0) {
        a.grid = sampling_ratio;
    } else {
        /* ceil(len / pooled) is ceil(bin): the same expression, the same rounding. */
        const DK__RA_T g = DK__RA_CEIL(a.bin);
        const int64_t cap = DK_ROI_ALIGN_MAX_ADAPTIVE_GRID(size, pooled);
        /* !(g >= 1) catches 0, negatives and NaN; the cap catches inf. */
        a.grid = !(g >= (DK__RA_T)1) ? 0 : (g >= (DK__RA_T)cap ? cap : (int64_t)g);
    }
    return a;
}

/* Both axes of the box (x1, y1, x2, y2) for an input of height x width. */
DK_HD DK_INLINE void DK__RA_FN(dk_roi_align_roi_init)(DK__RA_T x1, DK__RA_T y1, DK__RA_T x2,
                                                      DK__RA_T y2, DK__RA_T spatial_scale,
                                                      int64_t pooled_height, int64_t pooled_width,
                                                      int64_t sampling_ratio, bool aligned,
                                                      int64_t height, int64_t width,
                                                      DK__RA_FN(dk_roi_align_axis) *ay,
                                                      DK__RA_FN(dk_roi_align_axis) *ax)
{
    *ay = DK__RA_FN(dk_roi_align_axis_init)(y1, y2, spatial_scale, pooled_height, sampling_ratio,
                                            aligned, height);
    *ax = DK__RA_FN(dk_roi_align_axis_init)(x1, x2, spatial_scale, pooled_width, sampling_ratio,
                                            aligned, width);
}

/* Coordinate of sample i (0 <= i < grid) of bin p. Parenthesised exactly like the references:
 * (start + p * bin) + ((i + 0.5) * bin) / grid. */
DK_HD DK_INLINE DK__RA_T DK__RA_FN(dk_roi_align_axis_sample)(const DK__RA_FN(dk_roi_align_axis) *a,
                                                             int64_t p, int64_t i)
{
    return a->start + (DK__RA_T)p * a->bin +
           ((DK__RA_T)i + (DK__RA_T)0.5) * a->bin / (DK__RA_T)a->grid;
}

/* The bilinear taps of coordinate v on an axis of `size` pixels. Returns false when the sample
 * contributes nothing (v outside [-1, size], NaN, or size <= 0); then *t is not written.
 * Whenever it returns true, 0 <= lo <= hi <= size - 1. */
DK_HD DK_INLINE bool DK__RA_FN(dk_roi_align_taps_init)(DK__RA_T v, int64_t size,
                                                       DK__RA_FN(dk_roi_align_taps) *t)
{
    if (!(v >= (DK__RA_T)-1 && v <= (DK__RA_T)size) || size <= 0)
        return false;
    if (v <= (DK__RA_T)0)
        v = (DK__RA_T)0;
    int64_t lo = (int64_t)v; /* v in [0, size]: the truncation is a floor and cannot overflow */
    int64_t hi;
    if (lo >= size - 1) {
        lo = hi = size - 1;
        v = (DK__RA_T)lo;
    } else {
        hi = lo + 1;
    }
    const DK__RA_T l = v - (DK__RA_T)lo;
    t->lo = lo;
    t->hi = hi;
    t->wlo = (DK__RA_T)1 - l;
    t->whi = l;
    return true;
}

/* The four taps of sample (y, x) on a height x width plane; false when it contributes nothing. */
DK_HD DK_INLINE bool DK__RA_FN(dk_roi_align_bilinear_init)(DK__RA_T y, DK__RA_T x, int64_t height,
                                                           int64_t width,
                                                           DK__RA_FN(dk_roi_align_bilinear) *b)
{
    DK__RA_FN(dk_roi_align_taps) ty, tx;
    if (!DK__RA_FN(dk_roi_align_taps_init)(y, height, &ty) ||
        !DK__RA_FN(dk_roi_align_taps_init)(x, width, &tx))
        return false;
    b->y_low = ty.lo;
    b->y_high = ty.hi;
    b->x_low = tx.lo;
    b->x_high = tx.hi;
    b->w1 = ty.wlo * tx.wlo;
    b->w2 = ty.wlo * tx.whi;
    b->w3 = ty.whi * tx.wlo;
    b->w4 = ty.whi * tx.whi;
    return true;
}

/* Divisor of average pooling: max(grid_h * grid_w, 1). */
DK_HD DK_INLINE DK__RA_T DK__RA_FN(dk_roi_align_count)(const DK__RA_FN(dk_roi_align_axis) *ay,
                                                       const DK__RA_FN(dk_roi_align_axis) *ax)
{
    const DK__RA_T c = (DK__RA_T)ay->grid * (DK__RA_T)ax->grid;
    return c > (DK__RA_T)1 ? c : (DK__RA_T)1;
}

/* Each instantiation consumes its parameters, so the next one can define them afresh. */
#undef DK__RA_T
#undef DK__RA_SUFFIX
#undef DK__RA_CEIL

#elif defined(DK__RA_TEMPLATE_ELEM)
/* ------------------------------------------------------------------------------------------ */
/* Template body: storage type DK__RA_S, compute type DK__RA_T (whose math functions carry the */
/* suffix DK__RA_FN), names suffixed by DK__RA_SFN, conversions DK__RA_LOAD / DK__RA_STORE.    */

DK_HD DK_INLINE DK__RA_T DK__RA_SFN(dk_roi_align_load)(const DK__RA_S *p) { return DK__RA_LOAD(*p); }

DK_HD DK_INLINE void DK__RA_SFN(dk_roi_align_store)(DK__RA_S *p, DK__RA_T v) { *p = DK__RA_STORE(v); }

/* w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4, summed left to right like the references. */
DK_HD DK_INLINE DK__RA_T DK__RA_SFN(dk_roi_align_interp)(const DK__RA_S *plane, int64_t sy,
                                                         int64_t sx,
                                                         const DK__RA_FN(dk_roi_align_bilinear) *b)
{
    const DK__RA_T v1 = DK__RA_LOAD(plane[b->y_low * sy + b->x_low * sx]);
    const DK__RA_T v2 = DK__RA_LOAD(plane[b->y_low * sy + b->x_high * sx]);
    const DK__RA_T v3 = DK__RA_LOAD(plane[b->y_high * sy + b->x_low * sx]);
    const DK__RA_T v4 = DK__RA_LOAD(plane[b->y_high * sy + b->x_high * sx]);
    return b->w1 * v1 + b->w2 * v2 + b->w3 * v3 + b->w4 * v4;
}

/* Average-pooled output (ph, pw) of one RoI on one plane. */
DK_HD DK_INLINE DK__RA_T DK__RA_SFN(dk_roi_align_forward_avg)(
    const DK__RA_S *plane, int64_t sy, int64_t sx, int64_t height, int64_t width,
    const DK__RA_FN(dk_roi_align_axis) *ay, const DK__RA_FN(dk_roi_align_axis) *ax, int64_t ph,
    int64_t pw)
{
    DK__RA_T sum = (DK__RA_T)0;
    for (int64_t iy = 0; iy < ay->grid; ++iy) {
        const DK__RA_T y = DK__RA_FN(dk_roi_align_axis_sample)(ay, ph, iy);
        for (int64_t ix = 0; ix < ax->grid; ++ix) {
            const DK__RA_T x = DK__RA_FN(dk_roi_align_axis_sample)(ax, pw, ix);
            DK__RA_FN(dk_roi_align_bilinear) b;
            if (DK__RA_FN(dk_roi_align_bilinear_init)(y, x, height, width, &b))
                sum += DK__RA_SFN(dk_roi_align_interp)(plane, sy, sx, &b);
        }
    }
    return sum / DK__RA_FN(dk_roi_align_count)(ay, ax);
}

/*
 * Max-pooled output (ph, pw) and the sample that produced it, MMCV's rules: a sample outside
 * the input has value 0 and competes like any other; the first strictly greater value wins
 * (NaN never wins); the maximum starts at -FLT_MAX. The argmax is the sample's coordinate
 * before edge clamping, so backward recomputes the same taps from it.
 * A bin without samples (only a degenerate or non-finite box has one) gives 0 with argmax
 * (-1, -1): MMCV would return its initial -FLT_MAX (-10000 on its CPU path) there.
 */
DK_HD DK_INLINE DK__RA_T DK__RA_SFN(dk_roi_align_forward_max)(
    const DK__RA_S *plane, int64_t sy, int64_t sx, int64_t height, int64_t width,
    const DK__RA_FN(dk_roi_align_axis) *ay, const DK__RA_FN(dk_roi_align_axis) *ax, int64_t ph,
    int64_t pw, DK__RA_T *argmax_y, DK__RA_T *argmax_x)
{
    DK__RA_T maxval = (DK__RA_T)-FLT_MAX;
    DK__RA_T my = (DK__RA_T)-1, mx = (DK__RA_T)-1;
    if (ay->grid <= 0 || ax->grid <= 0) {
        *argmax_y = my;
        *argmax_x = mx;
        return (DK__RA_T)0;
    }
    for (int64_t iy = 0; iy < ay->grid; ++iy) {
        const DK__RA_T y = DK__RA_FN(dk_roi_align_axis_sample)(ay, ph, iy);
        for (int64_t ix = 0; ix < ax->grid; ++ix) {
            const DK__RA_T x = DK__RA_FN(dk_roi_align_axis_sample)(ax, pw, ix);
            DK__RA_FN(dk_roi_align_bilinear) b;
            const DK__RA_T val = DK__RA_FN(dk_roi_align_bilinear_init)(y, x, height, width, &b)
                                     ? DK__RA_SFN(dk_roi_align_interp)(plane, sy, sx, &b)
                                     : (DK__RA_T)0;
            if (val > maxval) {
                maxval = val;
                my = y;
                mx = x;
            }
        }
    }
    *argmax_y = my;
    *argmax_x = mx;
    return maxval;
}

/* Each instantiation consumes its parameters. */
#undef DK__RA_S
#undef DK__RA_T
#undef DK__RA_SUFFIX
#undef DK__RA_SSUFFIX
#undef DK__RA_LOAD
#undef DK__RA_STORE

#elif !defined(DK_KERNELS_ROI_ALIGN_H)
/* ------------------------------------------------------------------------------------------ */
/* The header proper: instantiates the templates above.                                       */
#define DK_KERNELS_ROI_ALIGN_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"

/* See the top of this file: ceil(4 * (size + 1) / pooled) >= 1. It exceeds ceil(len / pooled)
 * only if len > 4 * (size + 1). */
#define DK_ROI_ALIGN_MAX_ADAPTIVE_GRID(size, pooled)                                              \
    ((4 * ((int64_t)(size) + 1) + (int64_t)(pooled) - 1) / (int64_t)(pooled))

/*
 * Note [One template, several types]
 * The math must exist once but serve float and double (and 16-bit storage computed in float),
 * in C, which has no templates, and in CUDA/HIP C++. So the template bodies live at the top of
 * this file, and this part includes the file itself once per type with the type and the name
 * suffix defined (a quoted #include looks in the including file's directory first, so this
 * always finds this very file, whatever the include path). The include guard only wraps this
 * part; the template parts are selected by DK__RA_TEMPLATE_*.
 */
#define DK__RA_CAT_I(a, b) a##b
#define DK__RA_CAT(a, b) DK__RA_CAT_I(a, b)
#define DK__RA_FN(name) DK__RA_CAT(name, DK__RA_SUFFIX)
#define DK__RA_SFN(name) DK__RA_CAT(name, DK__RA_SSUFFIX)

#define DK__RA_TEMPLATE_MATH
#define DK__RA_T float
#define DK__RA_SUFFIX _f32
#define DK__RA_CEIL ceilf
#include "roi_align.h"
#define DK__RA_T double
#define DK__RA_SUFFIX _f64
#define DK__RA_CEIL ceil
#include "roi_align.h"
#undef DK__RA_TEMPLATE_MATH

#define DK__RA_IDENTITY(v) (v)

#define DK__RA_TEMPLATE_ELEM
/* float32 */
#define DK__RA_S float
#define DK__RA_T float
#define DK__RA_SUFFIX _f32
#define DK__RA_SSUFFIX _f32
#define DK__RA_LOAD DK__RA_IDENTITY
#define DK__RA_STORE DK__RA_IDENTITY
#include "roi_align.h"
/* float64 */
#define DK__RA_S double
#define DK__RA_T double
#define DK__RA_SUFFIX _f64
#define DK__RA_SSUFFIX _f64
#define DK__RA_LOAD DK__RA_IDENTITY
#define DK__RA_STORE DK__RA_IDENTITY
#include "roi_align.h"
/* float16, computed in float32 */
#define DK__RA_S uint16_t
#define DK__RA_T float
#define DK__RA_SUFFIX _f32
#define DK__RA_SSUFFIX _f16
#define DK__RA_LOAD dk_half_to_float
#define DK__RA_STORE dk_float_to_half
#include "roi_align.h"
/* bfloat16, computed in float32 */
#define DK__RA_S uint16_t
#define DK__RA_T float
#define DK__RA_SUFFIX _f32
#define DK__RA_SSUFFIX _bf16
#define DK__RA_LOAD dk_bfloat16_to_float
#define DK__RA_STORE dk_float_to_bfloat16
#include "roi_align.h"
#undef DK__RA_TEMPLATE_ELEM

#undef DK__RA_IDENTITY
#undef DK__RA_SFN
#undef DK__RA_FN
#undef DK__RA_CAT
#undef DK__RA_CAT_I

#endif /* DK_KERNELS_ROI_ALIGN_H */
