/*
 * kernels/roi_pool_math.h — RoIPool's bins and its max, written once for every backend (host and
 * device; plain C that also compiles as CUDA/HIP C++). ops/roi_pool.h says what the op computes.
 *
 * The bins of RoI (x1, y1, x2, y2), scaled by s, for output (ph, pw) of PH x PW, in the compute
 * type T (float for float16, bfloat16 and float32 inputs, double for float64), along each axis:
 *
 *   torchvision:  start = round(x1 * s), end = round(x2 * s)       (whole pixels, C's round)
 *                 len = max(end - start + 1, 1), bin = (T)len / (T)PW
 *                 [floor(pw * bin), ceil((pw + 1) * bin)) + start
 *   MMCV:         start = x1 * s, end = (x2 + 1) * s, len = end - start (a box with len <= 0 in
 *                 either axis pools to 0), bin = len / (T)PW
 *                 [floor(pw * bin + start), ceil((pw + 1) * bin + start)), floor and ceil taken in
 *                 float (MMCV calls floorf and ceilf, also for double inputs)
 *
 *   ps_roi_pool (torchvision): torchvision's roi_pool bins, except len = max(end - start, 1)
 *                 and the bounds clamped to [0, W - 1]: the last row and column are never
 *                 pooled (torchvision's forward; its backward clamps to W, and so sends gradient
 *                 where the forward read nothing: dkit's backward is the forward's gradient)
 *
 * each bound then clamped to [0, W] (H for rows; ps_roi_pool W - 1); a bin with no pixel is empty. The references
 * convert to C int along the way, which is undefined for values beyond int's range; here every
 * such value is first clamped to +-2^50 (exact in double, and far beyond any map), so that a huge
 * or non-finite box gives empty or edge bins, never a wild index, and ordinary boxes get the
 * references' integers exactly.
 *
 * ps_roi_align (torchvision's) has no pixel bins: it is RoIAlign's sampling (kernels/
 * roi_align_math.h, included here: its samples, taps, bilinear weights and average are the
 * ones roi_align uses) with roi_align's aligned=True geometry (start = x1 * s - 0.5, len =
 * x2 * s - 0.5 - start, no minimum: torchvision's "Force too small ROIs to be 1x1" has no code
 * under it) and torchvision's sampling_ratio (any value <= 0 adaptive). Its backward's share of
 * a tap is torchvision's (g * w) / count, where roi_align's is MMCV's g / count * w.
 *
 * What is here, for compute type float (_f32) and double (_f64):
 *   dk_roi_pool_roi_*       one RoI's geometry along both axes
 *   dk_roi_pool_bin_*       the pixel bounds of bin (ph, pw)
 *   dk_roi_pool_start_*, dk_roi_pool_wins_*   a bin's maximum: where it starts, which pixel
 *                           takes it (for kernels that walk the pixels themselves)
 *   dk_ps_roi_align_roi_init_*   ps_roi_align's two axes of a RoI
 *   dk_ps_roi_align_share_*      the gradient a tap of weight w receives
 * and per element, for storage f32, f64, f16 and bf16 (computed in float):
 *   dk_roi_pool_max_S       the maximum over a bin, and its argmax (h * W + w, or -1)
 *   dk_roi_pool_avg_S       ps_roi_pool's average over a bin
 * (ps_roi_align's per-element forward is dk_roi_align_forward_avg_S, with the axes above.)
 */
#ifndef DK_KERNELS_ROI_POOL_MATH_H
#define DK_KERNELS_ROI_POOL_MATH_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"
#include "roi_align_math.h"

/* A value the references convert to int, clamped first (see above); NaN goes to the low end. */
DK_HD DK_INLINE int64_t dk_roi_pool_int(double v)
{
    const double lim = 1125899906842624.0; /* 2^50 */
    if (!(v > -lim)) return -(int64_t)1125899906842624;
    if (!(v < lim)) return (int64_t)1125899906842624;
    return (int64_t)v;
}

/* Whose bins (dk_roi_pool_roi_init's kind): roi_pool's two geometries (ops/roi_pool.h's
 * numbering), and ps_roi_pool's. */
enum { DK_ROI_POOL_BINS_TORCHVISION = 0, DK_ROI_POOL_BINS_MMCV = 1, DK_ROI_POOL_BINS_PS = 2 };

/* v clamped to [0, size]. */
DK_HD DK_INLINE int64_t dk_roi_pool_clamp(int64_t v, int64_t size) { return v < 0 ? 0 : v > size ? size : v; }

#define DK_TEMPLATE "kernels/roi_pool_math_tmpl.h"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "dk_instantiate.h"

#endif /* DK_KERNELS_ROI_POOL_MATH_H */
