/*
 * ops/box_iou_rotated.h — overlaps of rotated boxes (MMCV's box_iou_rotated).
 *
 * Boxes are (cx, cy, w, h, angle), the angle in radians, clockwise in image coordinates (y down)
 * unless `clockwise` is false. ious[i, j] = overlap(boxes1[i], boxes2[j]) for every pair, or,
 * `aligned`, ious[i] = overlap(boxes1[i], boxes2[i]). `mode` is MMCV's mode_flag: 0 IoU
 * (intersection over union), 1 IoF (intersection over the area of the boxes1 box). The
 * per-pair math, its precision rules (MMCV's centre shift) and what it does with NaN, infinite
 * and degenerate boxes are kernels/rotated_box_math.h's.
 *
 * Tensors (any strides):
 *   boxes1  [N, 5]   float16, bfloat16 (computed in float32), float32 or float64; N < 2^31
 *   boxes2  [M, 5]   the same dtype; M < 2^31; M == N when aligned (MMCV reads past the end
 *                    of boxes2 when N > M; dkit refuses)
 *   ious    [N, M], or [N] when aligned; the boxes' dtype; fully overwritten
 */
#ifndef DK_OPS_BOX_IOU_ROTATED_H
#define DK_OPS_BOX_IOU_ROTATED_H

#include "dk_op_define.h"

#define DK_BOX_IOU_ROTATED_ARGS(X)                                                                \
    X(TENSOR, boxes1)                                                                             \
    X(TENSOR, boxes2)                                                                             \
    X(TENSOR_OUT, ious)                                                                           \
    X(INT, mode)                                                                                  \
    X(BOOL, aligned)                                                                              \
    X(BOOL, clockwise)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(box_iou_rotated, DK_BOX_IOU_ROTATED_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_BOX_IOU_ROTATED_H */
