/*
 * ops/nms_rotated.h — non-maximum suppression of rotated boxes (MMCV's nms_rotated, CPU).
 *
 * Boxes (cx, cy, w, h, angle in radians; `clockwise` as in ops/box_iou_rotated.h) are visited in
 * decreasing score order (torch.sort(descending=True): stable, NaN scores first, as
 * csrc/cpu/dk_argsort.h sorts); a box is kept unless a box kept before it overlaps it with
 * IoU >= iou_threshold. As MMCV's CPU kernel: the IoU is single_box_iou_rotated(kept, candidate)
 * (kernels/rotated_box_math.h), the comparison is >= (MMCV's CUDA kernel uses >), and the
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
#ifndef DK_OPS_NMS_ROTATED_H
#define DK_OPS_NMS_ROTATED_H

#include "dk_op_define.h"

#define DK_NMS_ROTATED_ARGS(X)                                                                    \
    X(TENSOR, dets)                                                                               \
    X(TENSOR, scores)                                                                             \
    X(OPT_TENSOR, labels)                                                                         \
    X(TENSOR_OUT, keep)                                                                           \
    X(TENSOR_OUT, num)                                                                            \
    X(FLOAT, iou_threshold)                                                                       \
    X(BOOL, clockwise)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(nms_rotated, DK_NMS_ROTATED_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_NMS_ROTATED_H */
