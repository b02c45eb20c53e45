/*
 * kernels/roi_align_math.h — RoIAlign's geometry and bilinear sampling, written once for every
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
 *   dk_roi_align_axis_make_*     one axis from its start and length (both above, and rotated boxes)
 *   dk_roi_align_rotated_*       roi_align_rotated (ops/roi_align.h): a rotated RoI's centre,
 *                                angle and axes in its own frame (_init), sample (iy, ix) of bin
 *                                (ph, pw) rotated onto the input (_sample; _turn from its
 *                                coordinates' products with cos and sin, for the CPU's tables),
 *                                and the samples that can reach a pixel (_window, for the GPU's
 *                                gather)
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
 *   dk_roi_align_rotated_forward_S                roi_align_rotated's output (ph, pw)
 * Backward needs atomics on a GPU and a fixed order on a CPU, so it is left to the kernel; per
 * grad element it is:
 *   avg:  for each sample (y, x) of bin (ph, pw): if dk_roi_align_bilinear_init(y, x, ...):
 *             grad_input[y_low, x_low] += g * w1 / count, ... (4 taps)
 *   max:  if argmax_y != -1 and dk_roi_align_bilinear_init(argmax_y, argmax_x, ...):
 *             grad_input[y_low, x_low] += g * w1, ... (no division)
 */
#ifndef DK_KERNELS_ROI_ALIGN_MATH_H
#define DK_KERNELS_ROI_ALIGN_MATH_H
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"
#include "dk_trig.h"

/* See the top of this file: ceil(4 * (size + 1) / pooled) >= 1. It exceeds ceil(len / pooled)
 * only if len > 4 * (size + 1). */
#define DK_ROI_ALIGN_MAX_ADAPTIVE_GRID(size, pooled) \
    ((4 * ((int64_t)(size) + 1) + (int64_t)(pooled)-1) / (int64_t)(pooled))

/* The geometry for float and double, the per-element functions for every float storage type
 * (Note [Templates in C] in dk_template.h). */
#define DK_TEMPLATE "kernels/roi_align_math_tmpl.h"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "dk_instantiate.h"

#endif /* DK_KERNELS_ROI_ALIGN_MATH_H */
