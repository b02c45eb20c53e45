/*
 * ops/rotated.h — the rotated-box family: box_iou_rotated and nms_rotated, whose boxes are
 * (cx, cy, w, h, angle), and box_iou_quadri and nms_quadri, whose boxes are quadrilaterals
 * (x1, y1, ..., x4, y4); the per-pair math is kernels/rotated_math.h's.
 *
 * box_iou_rotated — overlaps of rotated boxes (MMCV's box_iou_rotated).
 *
 * Boxes are (cx, cy, w, h, angle), the angle in radians, clockwise in image coordinates (y down)
 * unless `clockwise` is false. ious[i, j] = overlap(boxes1[i], boxes2[j]) for every pair, or,
 * `aligned`, ious[i] = overlap(boxes1[i], boxes2[i]). `mode` is MMCV's mode_flag: 0 IoU
 * (intersection over union), 1 IoF (intersection over the area of the boxes1 box). The
 * per-pair math, its precision rules (MMCV's centre shift) and what it does with NaN, infinite
 * and degenerate boxes are kernels/rotated_math.h's.
 *
 * Tensors (any strides):
 *   boxes1  [N, 5]   float16, bfloat16 (computed in float32), float32 or float64; N < 2^31
 *   boxes2  [M, 5]   the same dtype; M < 2^31; M == N when aligned (MMCV reads past the end
 *                    of boxes2 when N > M; dkit refuses)
 *   ious    [N, M], or [N] when aligned; the boxes' dtype; fully overwritten
 *
 * nms_rotated — non-maximum suppression of rotated boxes (MMCV's nms_rotated, CPU).
 *
 * Boxes (cx, cy, w, h, angle in radians; `clockwise` as in box_iou_rotated) are visited in
 * decreasing score order (torch.sort(descending=True): stable, NaN scores first, as
 * csrc/cpu/dk_argsort.h sorts); a box is kept unless a box kept before it overlaps it with
 * IoU >= iou_threshold. As MMCV's CPU kernel: the IoU is single_box_iou_rotated(kept, candidate)
 * (kernels/rotated_math.h), the comparison is >= (MMCV's CUDA kernel uses >), and the
 * threshold is a C float there, so dkit rounds it to float32 before comparing.
 *
 * `labels` (optional) are categories: boxes of different labels never suppress each other.
 * (MMCV's `labels` argument, its "multi_label" path, does not do this: its kernels read the
 * label column and ignore it, on the CPU and on CUDA alike; dkit.compat.mmcv therefore passes
 * none, and dkit.ops.nms_rotated documents the difference.)
 *
 * Output: Note [Data-dependent output sizes] in ops/nms.h.
 *
 * Tensors:
 *   dets    [N, 5]  float16, bfloat16 (computed in float32), float32 or float64; N < 2^31
 *   scores  [N]     the same dtype
 *   labels  [N]     int32, int64, or the dets' dtype (compared by value; every NaN label is one
 *                   category), or none
 *   keep    [N]     int64: keep[0:num] are the kept indices, in decreasing score order
 *   num     [1]     int64
 */
#ifndef DK_OPS_ROTATED_H
#define DK_OPS_ROTATED_H

#include "dk_op_define.h"

#define DK_BOX_IOU_ROTATED_ARGS(X) \
    X(TENSOR, boxes1)              \
    X(TENSOR, boxes2)              \
    X(TENSOR_OUT, ious)            \
    X(INT, mode)                   \
    X(BOOL, aligned)               \
    X(BOOL, clockwise)

#define DK_NMS_ROTATED_ARGS(X) \
    X(TENSOR, dets)            \
    X(TENSOR, scores)          \
    X(OPT_TENSOR, labels)      \
    X(TENSOR_OUT, keep)        \
    X(TENSOR_OUT, num)         \
    X(FLOAT, iou_threshold)    \
    X(BOOL, clockwise)

/*
 * box_iou_quadri and nms_quadri — box_iou_rotated and nms_rotated for quadrilaterals (MMCV's
 * box_iou_quadri and nms_quadri): boxes [K, 8] (x1, y1, ..., x4, y4), the four vertices in
 * order, clockwise or counter-clockwise, and the overlap of Note [Quadrilaterals] in
 * kernels/rotated_math.h (exact for convex quadrilaterals, where MMCV's is not). Otherwise as
 * above: mode 0 iou / 1 iof, aligned; nms_quadri's order, >= threshold rounded to float32,
 * labels as categories (MMCV's CPU kernel ignores its labels) and outputs are nms_rotated's.
 */
#define DK_BOX_IOU_QUADRI_ARGS(X) \
    X(TENSOR, boxes1)             \
    X(TENSOR, boxes2)             \
    X(TENSOR_OUT, ious)           \
    X(INT, mode)                  \
    X(BOOL, aligned)

#define DK_NMS_QUADRI_ARGS(X) \
    X(TENSOR, dets)           \
    X(TENSOR, scores)         \
    X(OPT_TENSOR, labels)     \
    X(TENSOR_OUT, keep)       \
    X(TENSOR_OUT, num)        \
    X(FLOAT, iou_threshold)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(box_iou_rotated, DK_BOX_IOU_ROTATED_ARGS)
DK_DECLARE_OP(nms_rotated, DK_NMS_ROTATED_ARGS)
DK_DECLARE_OP(box_iou_quadri, DK_BOX_IOU_QUADRI_ARGS)
DK_DECLARE_OP(nms_quadri, DK_NMS_QUADRI_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_ROTATED_H */
