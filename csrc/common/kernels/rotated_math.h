/*
 * kernels/rotated_math.h — overlaps of rotated boxes (cx, cy, w, h, angle in radians) and of
 * quadrilaterals (x1, y1, ..., x4, y4; Note [Quadrilaterals]), written once for every backend (host and device; plain C that also compiles as CUDA/HIP C++:
 * fixed-size arrays, no recursion, no allocation).
 *
 * Semantics are MMCV's single_box_iou_rotated (mmcv/ops/csrc/common/box_iou_rotated_utils.hpp,
 * itself Detectron2's with radians), which both mmcv.ops.box_iou_rotated and mmcv.ops.nms_rotated
 * use, except for the area of the intersection, which dkit computes exactly (step 4) where MMCV
 * can be far off. For a pair (a, b):
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
 *   4. The intersection: a's corner quadrilateral clipped by the four edges of b's
 *      (Note [Clipping rotated boxes]); its area by a fan of triangles, at most min(area_a,
 *      area_b).
 *   5. iou = inter / (area_a + area_b - inter), iof = inter / area_a: both within [0, 1].
 *
 * Note [Clipping rotated boxes]
 * MMCV (and Detectron2) gather candidate vertices (edge crossings, each box's corners inside the
 * other, with absolute tolerances) and sort them into a convex hull by angle around the lowest
 * point, treating cross products within 1e-6 as collinear. When the two boxes coincide or nearly
 * do (one rectangle written twice: angle + pi, or w and h swapped with angle + pi/2, whose
 * corners are the same up to rounding) the candidates are near-duplicates, the sort's tolerance
 * misorders them and the hull is wrong: float32 [0, 0, 6, 5, 0] against [0, 0, 6, 5, pi] gave an
 * IoU of 2.2, float64 [10, 5, 10, 10, pi] against [10, 5, 10, 10, pi/2] 4.33, and about 10% of
 * random boxes against their angle + pi twin were off by more than 1e-3; nms_rotated then kept
 * duplicates. MMCV itself errs on many such pairs (others than dkit's former kernel did, by other
 * amounts). dkit instead clips: Sutherland-Hodgman, box a's quadrilateral cut by the half-plane
 * of each edge of box b in turn, which needs no sort and no tolerance, and whose area moves
 * continuously with the corners: rounding in the corners changes it by rounding, never by a
 * wrong polygon. A convex quadrilateral cut by four half-planes has at most 8 vertices; rounding
 * can classify a vertex lying on a cutting line either way and so add a near-duplicate, which the
 * capacity DK_RBOX_MAX_POINTS leaves room for (twice the 8; only more than 8 near-duplicates,
 * which no input is known to produce, could fill it, and the clipper then drops vertices rather
 * than write past it). The area is then clamped to the smaller box's
 * (rounding could exceed it by an ulp), so an IoU is never outside [0, 1] and a box against its
 * twin gives 1 to rounding (tests/python/test_rotated.py checks both against an exact rational
 * clipper, and test_kernel_rotated.c against its own). Elsewhere the two agree to rounding: over
 * a million random overlapping float32 pairs, the IoUs differ from those of MMCV's procedure by at
 * most 6e-7.
 *
 * Note [Quadrilaterals]
 * box_iou_quadri and nms_quadri (MMCV's names) take boxes as four vertices, (x1, y1, ..., x4,
 * y4), and follow MMCV's single_box_iou_quadri: both quadrilaterals moved by the mean of their
 * eight vertices (as rotated boxes by the mean of their centres), areas below 1e-14 give 0, then
 * iou = inter / (area1 + area2 - inter) or iof = inter / area1. The intersection is the clipping
 * of Note [Clipping rotated boxes], the same function (dk_rbox_clip_quad): quadrilateral a cut
 * by the half-planes of b's four edges, the inner side found from the sign of b's area, so the
 * vertices may run clockwise or counter-clockwise, in either box, and any vertex may come first:
 * one quadrilateral written in another vertex order gives 1 to rounding. For convex
 * quadrilaterals the result is exact to rounding, within [0, 1] (dk_rbox_ratio), and the area
 * is MMCV's (its sum of the two fan triangles' absolute areas equals the absolute signed sum
 * when they turn the same way, as a convex quadrilateral's do).
 *
 * MMCV differs where a quadrilateral is not a rectangle: its candidate vertices include the
 * vertices of one box "inside" the other by a test that projects them on the other's first and
 * last edges (AB and AD) and asks for both projections to fall within those edges, which is
 * "inside" only for a rectangle (for a parallelogram it is the wrong region, for any other
 * quadrilateral it is not even a parallelogram's). So its intersection gains vertices that are
 * outside or loses ones that are inside: MMCV's own published case, (1, 1, 3, 4, 4, 4, 4, 1)
 * against the rectangle (2, 1, 2, 4, 4, 4, 4, 1), gives 1.0 where the exact IoU is 5.25 / 6.75
 * = 0.778 (iof 1.0 for 0.875); its hull sort's tolerance (Note [Clipping rotated boxes]) adds
 * the rotated boxes' errors on near-coincident quadrilaterals. dkit computes the exact value.
 *
 * Non-convex quadrilaterals (a reflex vertex) and self-intersecting ones ("bow ties") are not
 * what either library is defined for; dkit gives them a defined, finite result in [0, 1] with
 * no error: the area of a simple non-convex quadrilateral is its true area (MMCV adds the fan
 * triangles' absolute areas, too large when the fan's diagonal lies outside); the intersection
 * is a (any simple polygon) clipped by the half-planes of b's edges, i.e. a intersected with the
 * region inside all four of b's edge lines, which for a non-convex b is smaller than b (and the
 * overlap then depends on the argument order); a bow tie's signed area cancels in part. Such
 * results are not intersections and are not tested against one.
 *
 * Note [Rotated boxes out of range]
 * Nothing here can index out of bounds or loop for long, whatever the values: the clipper writes
 * at most DK_RBOX_MAX_POINTS vertices per step and makes four steps. A NaN or an infinite value in
 * a corner gives an intersection of 0 (as MMCV, where every comparison with NaN fails), so
 * iou = 0 / (area_a + area_b): 0, or NaN when an area is NaN. A box with w = 0 or h = 0 has area
 * 0 < 1e-14: overlap 0 (MMCV's rule, also for a box inside another). Negative w and h are taken
 * as MMCV takes them (their product is the area; both negative is a box).
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

/* Room for the vertices of a clipped quadrilateral: 8, and near-duplicates that rounding may add
 * (Note [Clipping rotated boxes]). */
#define DK_RBOX_MAX_POINTS 16

/* Whether circles (ax, ay, ra) and (bx, by, rb) are clearly apart (Note [Bounding circles] in
 * rotated_math_tmpl.h; the centres and radii in double, whatever the compute type). */
DK_HD DK_INLINE bool dk_rbox_apart_at(double ax, double ay, double ra, double bx, double by, double rb)
{
    const double dx = ax - bx, dy = ay - by;
    const double reach = (ra + rb) * (1.0 + 1.0 / 1024.0);
    return dx * dx + dy * dy > reach * reach;
}

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
