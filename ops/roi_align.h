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

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(roi_align_forward, DK_ROI_ALIGN_FORWARD_ARGS)
DK_DECLARE_OP(roi_align_backward, DK_ROI_ALIGN_BACKWARD_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_ROI_ALIGN_H */
