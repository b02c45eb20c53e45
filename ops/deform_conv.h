/*
 * ops/deform_conv.h — deformable convolution (Dai et al., DCNv1; Zhu et al., DCNv2), with the
 * semantics of torchvision.ops.deform_conv2d (0.14 to 0.21), which MMCV's DeformConv2d and
 * ModulatedDeformConv2d share.
 *
 * Forward: for image n, output channel o (of group g = o / (Cout / groups)) and output position
 * (y, x), with kernel tap (i, j) of kh x kw, input channel c of the group and offset group
 * d = c / (Cin / offset_groups):
 *
 *   out[n, o, y, x] = bias[o] + sum_{c, i, j} weight[o, c - g Cin/groups, i, j]
 *                      * mask[n, d kh kw + i kw + j, y, x]
 *                      * bilinear(input[n, c], py, px)
 *   py = y stride_h - pad_h + i dilation_h + offset[n, 2 (d kh kw + i kw + j), y, x]
 *   px = x stride_w - pad_w + j dilation_w + offset[n, 2 (d kh kw + i kw + j) + 1, y, x]
 *
 * (offsets are (y, x) pairs per tap per offset group; no mask means 1, no bias 0), bilinear
 * sampling with zeros outside the map (kernels/deform_conv_math.h: 0 when py <= -1, py >= H,
 * px <= -1 or px >= W, else the four corners that lie inside). Ho = (H + 2 pad_h - (dilation_h
 * (kh - 1) + 1)) / stride_h + 1, Wo likewise.
 *
 * Backward: the five gradients of that sum, torchvision's: grad_input through the corners'
 * bilinear weights, grad_offset through the sample's derivative along y and x (torchvision's
 * coordinate weight, which also takes the corners inside the map where the sample is exactly on
 * the -1 edge; with geometry DK_DEFORM_CONV_MMCV (1), MMCV's, which is 0 wherever the sample is
 * outside: kernels/deform_conv_math.h), grad_mask the bilinear sample, grad_weight and
 * grad_bias. Every output is written whole.
 *
 * Tensors (float16, bfloat16 (computed in float32), float32, float64, all of one dtype; any
 * strides):
 *   input [N, Cin, H, W], weight [Cout, Cin / groups, kh, kw],
 *   offset [N, 2 offset_groups kh kw, Ho, Wo], mask [N, offset_groups kh kw, Ho, Wo] or none,
 *   bias [Cout] or none, output / grad_output [N, Cout, Ho, Wo];
 *   grad_input, grad_weight, grad_offset, grad_mask, grad_bias: their tensor's shape (grad_mask
 *   and grad_bias may be none; grad_mask only with a mask).
 * groups and offset_groups are positive and divide Cin (groups also Cout); stride and dilation
 * positive, padding >= 0, all below 2^31 (C ints in the references); Ho and Wo positive.
 */
#ifndef DK_OPS_DEFORM_CONV_H
#define DK_OPS_DEFORM_CONV_H

#include "dk_op_define.h"

#define DK_DEFORM_CONV2D_FORWARD_ARGS(X) \
    X(TENSOR, input)                     \
    X(TENSOR, weight)                    \
    X(TENSOR, offset)                    \
    X(OPT_TENSOR, mask)                  \
    X(OPT_TENSOR, bias)                  \
    X(TENSOR_OUT, output)                \
    X(INT, stride_h)                     \
    X(INT, stride_w)                     \
    X(INT, pad_h)                        \
    X(INT, pad_w)                        \
    X(INT, dilation_h)                   \
    X(INT, dilation_w)                   \
    X(INT, groups)                       \
    X(INT, offset_groups)

#define DK_DEFORM_CONV2D_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)                \
    X(TENSOR, input)                      \
    X(TENSOR, weight)                     \
    X(TENSOR, offset)                     \
    X(OPT_TENSOR, mask)                   \
    X(TENSOR_OUT, grad_input)             \
    X(TENSOR_OUT, grad_weight)            \
    X(TENSOR_OUT, grad_offset)            \
    X(OPT_TENSOR_OUT, grad_mask)          \
    X(OPT_TENSOR_OUT, grad_bias)          \
    X(INT, stride_h)                      \
    X(INT, stride_w)                      \
    X(INT, pad_h)                         \
    X(INT, pad_w)                         \
    X(INT, dilation_h)                    \
    X(INT, dilation_w)                    \
    X(INT, groups)                        \
    X(INT, offset_groups)                 \
    X(INT, geometry)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(deform_conv2d_forward, DK_DEFORM_CONV2D_FORWARD_ARGS)
DK_DECLARE_OP(deform_conv2d_backward, DK_DEFORM_CONV2D_BACKWARD_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_DEFORM_CONV_H */
