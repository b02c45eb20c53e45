/*
 * kernels/nms_math.h — the overlap NMS and Soft-NMS decide with, for axis-aligned boxes
 * (x1, y1, x2, y2), written once for every backend (host and device; plain C that also compiles
 * as CUDA/HIP C++). The nms family's math: nms, batched_nms and soft_nms (ops/nms.h). The box
 * overlaps that box_iou returns have other semantics: kernels/box_iou_math.h.
 *
 * The NMS overlap (torchvision's and MMCV's NMS kernels, scalar code): with offset 0 (torchvision) or
 * 1 (MMCV's legacy pixel convention),
 *     area  = (x2 - x1 + offset) * (y2 - y1 + offset)                  (per box, precomputed)
 *     xx1 = max(ix1, jx1)  yy1 = max(iy1, jy1)  xx2 = min(ix2, jx2)  yy2 = min(iy2, jy2)
 *     w = max(0, xx2 - xx1 + offset)  h = max(0, yy2 - yy1 + offset)
 *     ovr = w * h / (iarea + jarea - w * h)
 *   where max(a, b) = a < b ? b : a and min(a, b) = b < a ? b : a, C++'s std::max/std::min, whose
 *   treatment of NaN (the first argument wins a comparison with NaN) decides NaN inputs exactly as
 *   the references do; box i is the kept box, j the candidate. Consequences NMS relies on
 *   (Note [What can suppress what] in csrc/cpu/nms/nms_run_tmpl.h): for a threshold >= 0, two boxes
 *   whose offset extents do not overlap never suppress each other, nor does a box with a
 *   non-finite area.
 */
#ifndef DK_KERNELS_NMS_MATH_H
#define DK_KERNELS_NMS_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_hd.h"
#include "dk_template.h"

/* How Soft-NMS decays the scores of overlapping boxes (MMCV's numbering). */
typedef enum { DK_SOFT_NMS_NAIVE = 0, DK_SOFT_NMS_LINEAR = 1, DK_SOFT_NMS_GAUSSIAN = 2 } dk_soft_nms_method;

#define DK_TEMPLATE "kernels/nms_math_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "dk_instantiate.h"

#endif /* DK_KERNELS_NMS_MATH_H */
