/*
 * kernels/box_math.h — overlaps of axis-aligned boxes (x1, y1, x2, y2), written once for every
 * backend (host and device; plain C that also compiles as CUDA/HIP C++).
 *
 * Two families of semantics, because dkit answers for two reference libraries:
 *
 * NMS overlap (torchvision's and MMCV's NMS kernels, scalar code): with offset 0 (torchvision) or
 * 1 (MMCV's legacy pixel convention),
 *     area  = (x2 - x1 + offset) * (y2 - y1 + offset)                  (per box, precomputed)
 *     xx1 = max(ix1, jx1)  yy1 = max(iy1, jy1)  xx2 = min(ix2, jx2)  yy2 = min(iy2, jy2)
 *     w = max(0, xx2 - xx1 + offset)  h = max(0, yy2 - yy1 + offset)
 *     ovr = w * h / (iarea + jarea - w * h)
 *   where max(a, b) = a < b ? b : a and min(a, b) = b < a ? b : a, C++'s std::max/std::min, whose
 *   treatment of NaN (the first argument wins a comparison with NaN) decides NaN inputs exactly as
 *   the references do; box i is the kept box, j the candidate. Consequences NMS relies on
 *   (Note [What can suppress what] in csrc/cpu/nms/nms_cpu.c): for a threshold >= 0, two boxes
 *   whose offset extents do not overlap never suppress each other, nor does a box with a
 *   non-finite area.
 *
 * Box IoU (torchvision's box_iou, generalized/distance/complete IoU, and MMCV's bbox_overlaps,
 * tensor code): max and min propagate NaN (torch.maximum), widths clamp at 0 keeping NaN, and
 * nothing guards a division by zero. dk_box_iou_pair_* evaluates one pair in the order the
 * tensor expressions do; the kernel decides how differences are rounded for 16-bit storage.
 */
#ifndef DK_KERNELS_BOX_MATH_H
#define DK_KERNELS_BOX_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"

/* What a box-overlap kernel computes (dk_box_iou_pair_*). */
typedef enum {
    DK_BOX_IOU = 0,   /* torchvision box_iou: inter / union */
    DK_BOX_GIOU = 1,  /* torchvision generalized_box_iou */
    DK_BOX_DIOU = 2,  /* torchvision distance_box_iou (eps) */
    DK_BOX_CIOU = 3,  /* torchvision complete_box_iou (eps) */
    DK_BOX_MMCV_IOU = 4, /* MMCV bbox_overlaps mode 'iou' (offset) */
    DK_BOX_MMCV_IOF = 5, /* MMCV bbox_overlaps mode 'iof': inter / area of the first box */
    DK_BOX_NKINDS
} dk_box_kind;

/* How Soft-NMS decays the scores of overlapping boxes (MMCV's numbering). */
typedef enum { DK_SOFT_NMS_NAIVE = 0, DK_SOFT_NMS_LINEAR = 1, DK_SOFT_NMS_GAUSSIAN = 2 } dk_soft_nms_method;

#define DK_TEMPLATE "kernels/box_math_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "dk_instantiate.h"

#endif /* DK_KERNELS_BOX_MATH_H */
