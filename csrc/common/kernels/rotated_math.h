/*
 * kernels/rotated_math.h — overlaps of rotated boxes (cx, cy, w, h, angle in radians),
 * written once for every backend (host and device; plain C that also compiles as CUDA/HIP C++:
 * fixed-size arrays, no recursion, no allocation).
 *
 * Semantics are MMCV's single_box_iou_rotated (mmcv/ops/csrc/common/box_iou_rotated_utils.hpp,
 * itself Detectron2's with radians), which both mmcv.ops.box_iou_rotated and mmcv.ops.nms_rotated
 * use, down to the order of floating-point operations, so float32 results match MMCV's to
 * rounding. For a pair (a, b):
 *
 *   1. Both centres are moved by the midpoint of the two centres, sx = (a.cx + b.cx) / 2.0,
 *      computed in double (MMCV's `auto` shift) from a sum in the compute type; the shifted
 *      centres are rounded back to the compute type. Near the origin the corner coordinates lose
 *      no digits to large absolute positions (boxes at x = 10^4 keep float32's precision).
 *   2. area = w * h per box; either below 1e-14 (zero, negative, NaN excluded) gives 0.
 *   3. The corners: with c = cos(angle) / 2 and s = sin(angle) / 2 (cos and sin in double,
 *      rounded to the compute type), p0 = (cx - s h - c w, cy + c h - s w),
 *      p1 = (cx + s h - c w, cy - c h - s w), p2 = 2 c - p0, p3 = 2 c - p1. With y pointing down
 *      (image coordinates) a positive angle turns the box clockwise; `clockwise = false` negates
 *      the angle first (MMCV's flip of the last column, exact).
 *   4. The intersection polygon's candidate vertices (at most 4 x 4 + 4 + 4 = 24): every edge
 *      pair that crosses (parametric t1, t2 in [0, 1]; near-parallel edges, |det| <= 1e-14,
 *      skipped), every corner of a inside b and every corner of b inside a (projections onto two
 *      edges within [0, |edge|^2]).
 *   5. Fewer than 3 candidates: area 0. Otherwise their convex hull by Graham scan: the lowest
 *      point (then leftmost) as origin, the others sorted by angle (cross products within 1e-6
 *      of zero count as collinear and sort by distance), points within 1e-8 (squared distance)
 *      of the origin dropped, then the scan. The hull's area by a fan of triangles.
 *   6. iou = inter / (area_a + area_b - inter), iof = inter / area_a.
 *
 * Note [The hull's sort]
 * MMCV's CPU build sorts the candidates with std::sort and its CUDA build with an exchange sort
 * (swap q[i] and q[j] when q[j] comes first); both sort by the same relation. dkit uses the
 * exchange sort on every backend: it is deterministic, allocation- and recursion-free, and
 * identical to MMCV's CUDA order. It can differ from std::sort's arrangement only among
 * candidates the relation ranks as ties (duplicates of one point), which the scan then drops
 * either way, so the areas agree.
 *
 * Note [Rotated boxes out of range]
 * Nothing here can index out of bounds or loop for long, whatever the values: at most 24
 * candidates are written (the counts above are bounds, not estimates), the sort is 24^2 / 2
 * comparisons and the scan pops at most what it pushed. A NaN anywhere makes every comparison
 * false: no candidate, intersection 0, and iou = 0 / (area_a + area_b) (0, or NaN when an area is
 * NaN), as in MMCV. Infinite coordinates give NaN corners and the same. A box with w = 0 or
 * h = 0 has area 0 < 1e-14: overlap 0 (MMCV's rule, also for a box inside another). Negative w
 * and h are taken as MMCV takes them (their product is the area; both negative is a box). The
 * tolerances are absolute, as in MMCV: boxes smaller than about 1e-3 (cross products below 1e-6)
 * sort poorly, in MMCV and here alike.
 */
#ifndef DK_KERNELS_ROTATED_MATH_H
#define DK_KERNELS_ROTATED_MATH_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_hd.h"
#include "dk_template.h"

/* What a rotated-box overlap computes (MMCV's mode_flag). */
enum { DK_RBOX_IOU = 0, DK_RBOX_IOF = 1 };

/* The most candidate vertices of an intersection: 16 edge crossings and 4 + 4 corners. */
#define DK_RBOX_MAX_POINTS 24

#define DK_TEMPLATE "kernels/rotated_math_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "dk_instantiate.h"

/* nms_rotated's threshold as MMCV compares it: a C float (its binding casts; out-of-range values
 * become +-inf, NaN stays NaN). */
DK_HD DK_INLINE double dk_rbox_nms_threshold(double t)
{
    if (t != t) return t;
    if (t > FLT_MAX) return INFINITY;
    if (t < -FLT_MAX) return -INFINITY;
    return (double)(float)t;
}

#endif /* DK_KERNELS_ROTATED_MATH_H */
