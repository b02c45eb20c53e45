/*
 * ops/roi_align.h — RoIAlign (He et al., Mask R-CNN), with MMCV's semantics.
 *
 * For every RoI k = (batch_index, x1, y1, x2, y2) and output bin (ph, pw), each channel c is
 * sampled on a regular grid of bilinear points inside the bin and reduced by average
 * (pool_mode 1, "avg") or maximum (pool_mode 0, "max"; the winning point's (y, x) is kept in
 * argmax_y / argmax_x for backward). `aligned` shifts box coordinates by -0.5 pixel
 * (torchvision's aligned=True); without it RoIs are at least 1x1. sampling_ratio <= 0 means
 * ceil(roi_size / output_size) points per bin along each axis.
 *
 * Tensors (dtypes float16, bfloat16, float32, float64; any strides):
 *   input      [N, C, H, W]
 *   rois       [K, 5], same dtype as input; batch_index must be an integer in [0, N)
 *   output     [K, C, PH, PW], same dtype as input
 *   argmax_y/x [K, C, PH, PW], max mode only (NULL in avg mode, else an error); float32 for 16-bit inputs,
 *              otherwise the input's dtype
 *   grad_input [N, C, H, W]: fully overwritten by backward (no need to zero it)
 *
 * roi_align_rotated (MMCV's mmcv.ops.roi_align_rotated, from detectron2's ROIAlignRotated) is
 * RoIAlign's average pooling on rotated boxes. RoI k = (batch_index, cx, cy, w, h, angle), the
 * angle in radians, counterclockwise (clockwise = true negates it). With offset = aligned ? 0.5
 * : 0, the box's centre is (cx s - offset, cy s - offset), its size (w s, h s) (s the
 * spatial_scale; without `aligned` at least 1 x 1), its bins and samples those of an axis-aligned
 * box of that size centred on 0, and each sample (yy, xx) is rotated and moved to
 *   y = yy cos(angle) - xx sin(angle) + centre_y,   x = yy sin(angle) + xx cos(angle) + centre_x
 * before RoIAlign's bilinear read. sampling_ratio <= 0 (any) is adaptive. Tensors as above,
 * rois [K, 6], no argmax; grad_input is fully overwritten by backward. (detectron2's op is
 * aligned = true with the angle in degrees.)
 */
#ifndef DK_OPS_ROI_ALIGN_H
#define DK_OPS_ROI_ALIGN_H

#include "dk_op_define.h"

/* MMCV's numbering. */
enum { DK_POOL_MAX = 0, DK_POOL_AVG = 1 };

#define DK_ROI_ALIGN_FORWARD_ARGS(X) \
    X(TENSOR, input)                 \
    X(TENSOR, rois)                  \
    X(TENSOR_OUT, output)            \
    X(OPT_TENSOR_OUT, argmax_y)      \
    X(OPT_TENSOR_OUT, argmax_x)      \
    X(INT, aligned_height)           \
    X(INT, aligned_width)            \
    X(FLOAT, spatial_scale)          \
    X(INT, sampling_ratio)           \
    X(INT, pool_mode)                \
    X(BOOL, aligned)

#define DK_ROI_ALIGN_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)            \
    X(TENSOR, rois)                   \
    X(OPT_TENSOR, argmax_y)           \
    X(OPT_TENSOR, argmax_x)           \
    X(TENSOR_OUT, grad_input)         \
    X(INT, aligned_height)            \
    X(INT, aligned_width)             \
    X(FLOAT, spatial_scale)           \
    X(INT, sampling_ratio)            \
    X(INT, pool_mode)                 \
    X(BOOL, aligned)

#define DK_ROI_ALIGN_ROTATED_FORWARD_ARGS(X) \
    X(TENSOR, input)                         \
    X(TENSOR, rois)                          \
    X(TENSOR_OUT, output)                    \
    X(INT, pooled_height)                    \
    X(INT, pooled_width)                     \
    X(FLOAT, spatial_scale)                  \
    X(INT, sampling_ratio)                   \
    X(BOOL, aligned)                         \
    X(BOOL, clockwise)

#define DK_ROI_ALIGN_ROTATED_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)                    \
    X(TENSOR, rois)                           \
    X(TENSOR_OUT, grad_input)                 \
    X(FLOAT, spatial_scale)                   \
    X(INT, sampling_ratio)                    \
    X(BOOL, aligned)                          \
    X(BOOL, clockwise)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(roi_align_forward, DK_ROI_ALIGN_FORWARD_ARGS)
DK_DECLARE_OP(roi_align_backward, DK_ROI_ALIGN_BACKWARD_ARGS)
DK_DECLARE_OP(roi_align_rotated_forward, DK_ROI_ALIGN_ROTATED_FORWARD_ARGS)
DK_DECLARE_OP(roi_align_rotated_backward, DK_ROI_ALIGN_ROTATED_BACKWARD_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_ROI_ALIGN_H */
