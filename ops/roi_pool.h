/*
 * ops/roi_pool.h — the RoI pooling family: roi_pool (Fast R-CNN's RoIPool), with torchvision's
 * and MMCV's semantics, ps_roi_pool (R-FCN's position-sensitive RoI pooling, torchvision's) and
 * ps_roi_align (its RoIAlign form, torchvision's): the same boxes, output sizes and checks.
 *
 * roi_pool:
 * For every RoI k = (batch_index, x1, y1, x2, y2) and output bin (ph, pw), each channel c is the
 * maximum of the input over the bin's whole pixels, and argmax the plane index h * W + w of the
 * first maximum (rows, then columns), or -1 when the bin is empty or holds no value above its
 * start (NaN never wins, as `>` decides). The bins (kernels/roi_pool_math.h) follow one of two
 * references, by `geometry`:
 *   DK_ROI_POOL_TORCHVISION (0)  torchvision.ops.roi_pool: box corners rounded to whole pixels,
 *                                the box at least 1 x 1, an empty bin 0;
 *   DK_ROI_POOL_MMCV (1)         mmcv.ops.roi_pool: continuous corners, x2 + 1 and y2 + 1, a box
 *                                of no width or height pools to 0 (argmax -1: MMCV leaves its
 *                                zero-filled argmax there, which sends those gradients to pixel
 *                                (0, 0); dkit sends none).
 * A bin that is not empty starts from -FLT_MAX (both references, whatever the dtype), so inputs
 * all below it or all NaN give -FLT_MAX (-inf in 16 bits) with argmax -1.
 *
 * Backward adds grad_output[k, c, ph, pw] to grad_input[batch_index, c, argmax] (nothing for
 * -1), and writes every other element of grad_input as 0.
 *
 * Tensors (dtypes float16, bfloat16 (computed in float32), float32, float64; any strides):
 *   input       [N, C, H, W]
 *   rois        [K, 5], same dtype as input; batch_index an integer in [0, N)
 *   output      [K, C, PH, PW], same dtype as input
 *   argmax      [K, C, PH, PW], int16 (maps of H W <= 2^15 - 1: dkit's choice on the CPU, Note
 *               [A narrow argmax] in csrc/cpu/roi_pool/roi_pool_cpu.h), int32 (torchvision's;
 *               maps of H W <= 2^31 - 1) or int64; the
 *               forward takes NULL when nothing will run the backward (inference), and then
 *               neither finds nor writes it
 *   grad_output [K, C, PH, PW], grad_input [N, C, H, W], same dtype as rois
 *
 * ps_roi_pool: output [K, C / (PH PW), PH, PW]; element (k, c, ph, pw) is the average of input
 * channel (c PH + ph) PW + pw over bin (ph, pw) of RoI k, 0 for an empty bin, with torchvision's
 * bins for it (kernels/roi_pool_math.h: they never reach the map's last row or column). C must
 * be a multiple of PH PW. Backward spreads each gradient evenly over its bin's pixels (the
 * forward's gradient; torchvision's backward also reaches the last row and column, which its
 * forward never reads), and writes every other element of grad_input as 0. Same dtypes as
 * roi_pool; grad_input [N, C_out PH PW, H, W].
 *
 * ps_roi_align: the same channels as ps_roi_pool, each bin the average of bilinear samples, as
 * torchvision.ops.ps_roi_align: RoIAlign's samples and taps (kernels/roi_align_math.h) with the
 * box shifted by half a pixel and no minimum size (roi_align's aligned=True geometry: start =
 * x1 * s - 0.5, len = x2 * s - 0.5 - start; torchvision's comment "Force too small ROIs to be
 * 1x1" has no code under it), sampling_ratio samples per bin and axis, or ceil(len / PW) when
 * it is <= 0 (any value <= 0, as torchvision). A bin with no samples (the adaptive grid of a box
 * of no width or height, or a reversed one) is 0, as roi_align's: torchvision divides 0 by a
 * count of 0 there and gives NaN (or 0 / -0 for a reversed box). Backward: each sample's four
 * taps receive (g * w) / count, torchvision's expression, RoIs, samples and taps in
 * torchvision's order (float32 and float64: its bits; 16 bits: summed in float32, stored once).
 * grad_input [N, C_out PH PW, H, W], written whole.
 */
#ifndef DK_OPS_ROI_POOL_H
#define DK_OPS_ROI_POOL_H

#include "dk_op_define.h"

/* Whose bins (see above). */
enum { DK_ROI_POOL_TORCHVISION = 0, DK_ROI_POOL_MMCV = 1 };

#define DK_ROI_POOL_FORWARD_ARGS(X) \
    X(TENSOR, input)                \
    X(TENSOR, rois)                 \
    X(TENSOR_OUT, output)           \
    X(OPT_TENSOR_OUT, argmax)       \
    X(INT, pooled_height)           \
    X(INT, pooled_width)            \
    X(FLOAT, spatial_scale)         \
    X(INT, geometry)

#define DK_ROI_POOL_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)           \
    X(TENSOR, rois)                  \
    X(TENSOR, argmax)                \
    X(TENSOR_OUT, grad_input)

#define DK_PS_ROI_POOL_FORWARD_ARGS(X) \
    X(TENSOR, input)                   \
    X(TENSOR, rois)                    \
    X(TENSOR_OUT, output)              \
    X(FLOAT, spatial_scale)

#define DK_PS_ROI_POOL_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)              \
    X(TENSOR, rois)                     \
    X(TENSOR_OUT, grad_input)           \
    X(FLOAT, spatial_scale)

#define DK_PS_ROI_ALIGN_FORWARD_ARGS(X) \
    X(TENSOR, input)                    \
    X(TENSOR, rois)                     \
    X(TENSOR_OUT, output)               \
    X(FLOAT, spatial_scale)             \
    X(INT, sampling_ratio)

#define DK_PS_ROI_ALIGN_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)               \
    X(TENSOR, rois)                      \
    X(TENSOR_OUT, grad_input)            \
    X(FLOAT, spatial_scale)              \
    X(INT, sampling_ratio)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(roi_pool_forward, DK_ROI_POOL_FORWARD_ARGS)
DK_DECLARE_OP(roi_pool_backward, DK_ROI_POOL_BACKWARD_ARGS)
DK_DECLARE_OP(ps_roi_pool_forward, DK_PS_ROI_POOL_FORWARD_ARGS)
DK_DECLARE_OP(ps_roi_pool_backward, DK_PS_ROI_POOL_BACKWARD_ARGS)
DK_DECLARE_OP(ps_roi_align_forward, DK_PS_ROI_ALIGN_FORWARD_ARGS)
DK_DECLARE_OP(ps_roi_align_backward, DK_PS_ROI_ALIGN_BACKWARD_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_ROI_POOL_H */
