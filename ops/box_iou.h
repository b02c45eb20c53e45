/*
 * ops/box_iou.h — overlaps of two sets of axis-aligned boxes (x1, y1, x2, y2): torchvision's
 * box_iou, generalized_box_iou, distance_box_iou and complete_box_iou, and MMCV's bbox_overlaps
 * ('iou' and 'iof', with its offset), one op whose `kind` (dk_box_kind, kernels/box_iou_math.h) says
 * which.
 *
 * Why one op named box_iou: the five computations share their arguments, checks, layout and
 * loops and differ only in the per-pair formula, which kernels/box_iou_math.h writes once; one op
 * keeps one check and one kernel per backend instead of five. torchvision's name for the family
 * names it (and this file).
 *
 * Every pair (i, j) of boxes1 [N, 4] and boxes2 [M, 4] is computed into out [N, M]; with
 * `aligned`, only the pairs (i, i) into out [N] (N == M; MMCV's aligned). Values are the
 * references' (kernels/box_iou_math.h: NaN propagates, degenerate boxes divide by zero as theirs do).
 *
 * Tensors and dtypes (Note [16-bit boxes], Note [Integer boxes] in kernels/box_iou_math.h):
 *   boxes1, boxes2  the same dtype; N, M < 2^31
 *     torchvision kinds (IOU, GIOU, DIOU, CIOU): float16, bfloat16, int32, int64 -> out float32;
 *                                                float32 -> float32, float64 -> float64
 *     MMCV kinds (MMCV_IOU, MMCV_IOF): float16, bfloat16, float32, float64 -> out of that dtype
 *   out     [N, M], or [N] when aligned; any strides that do not overlap
 *   eps     DIOU and CIOU (torchvision's default 1e-7); ignored by the other kinds
 *   offset  0, or 1 for the MMCV kinds (MMCV's legacy +1 pixel extents)
 */
#ifndef DK_OPS_BOX_IOU_H
#define DK_OPS_BOX_IOU_H

#include "dk_op_define.h"
#include "kernels/box_iou_math.h"

#define DK_BOX_IOU_ARGS(X) \
    X(TENSOR, boxes1)      \
    X(TENSOR, boxes2)      \
    X(TENSOR_OUT, out)     \
    X(INT, kind)           \
    X(BOOL, aligned)       \
    X(FLOAT, eps)          \
    X(INT, offset)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(box_iou, DK_BOX_IOU_ARGS)
/* The dtype of out for boxes of dtype `boxes` and this kind; DK_DTYPE_UNSUPPORTED when the kind
 * does not take such boxes. */
DK_API dk_dtype dk_box_iou_out_dtype(int64_t kind, dk_dtype boxes);
/* Which results this kind rounds to the boxes' 16-bit dtype (Note [16-bit boxes] in
 * kernels/box_iou_math.h): dk_box_iou_pair's `narrow`, 1 float16, 2 bfloat16, 0 none. Every
 * backend's kernel asks here. */
DK_API int dk_box_iou_narrow(int64_t kind, dk_dtype boxes);
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_BOX_IOU_H */
