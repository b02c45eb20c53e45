/*
 * deform_conv_gpu.h — deform_conv2d on CUDA and HIP (ops/deform_conv.h), written once (Note [One
 * source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (deform_conv_gpu_tmpl.cuh) and
 * launchers (deform_conv_gpu.cu) share.
 *
 * Note [Deformable convolution on a GPU]
 * A direct formulation, with no column buffer and no GEMM library (dkit links none): every
 * kernel finds each sample with the CPU's math (kernels/deform_conv_math.h).
 *   forward       one thread per output element (n, o, y, x): the bias, then the sum over its
 *                 group's channels and the taps of weight x mask x sample.
 *   grad_input    one thread per (n, c, tap, y, x): the column's gradient (the sum over the
 *                 group's output channels of weight x grad_output), times the mask, added to
 *                 the sample's four corners with atomics in a compute-type accumulator
 *                 (contiguous NCHW, zeroed first), stored once into grad_input. The order of
 *                 the additions, and so the last bits, vary from run to run, as torchvision's
 *                 and MMCV's CUDA kernels' do; the offsets can send any sample anywhere, so a
 *                 gather has no bounded set of sources to read. When deterministic kernels are
 *                 asked for (Note [Deterministic kernels]: torch.use_deterministic_algorithms),
 *                 the same kernel runs as one thread, adding in a fixed order: the same bits
 *                 every run, at a serial kernel's speed (a sorted or fixed-point scatter would
 *                 be the fast form, not written yet).
 *   grad_offset, grad_mask   one thread per (n, offset group, tap, y, x): the column gradients of
 *                 the group's channels, times the sample's derivatives and value: a gather, the
 *                 CPU's terms in the CPU's order.
 *   grad_weight   one thread per weight element: the sum over images and positions of
 *                 grad_output x mask x sample; grad_bias one thread per output channel.
 * Everything but the grad_input accumulator is computed where it is stored. This is the plain
 * design the issue asks for first: it recomputes each sample in several kernels and reads the
 * weights per element; a tiled GEMM over columns would be the next step once it is measured
 * on a GPU (no GPU has run it yet).
 */
#ifndef DK_DEFORM_CONV_GPU_H
#define DK_DEFORM_CONV_GPU_H

#include <stdint.h>

#include "deform_conv.h" /* ops/deform_conv.h */
#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
/* One call's sizes and strides (elements); the strides of an absent tensor are 0. */
typedef struct {
    int64_t N, Cin, H, W, Cout, kh, kw, Ho, Wo;
    int64_t sh, sw, ph, pw, dh, dw, groups, og, cpg, opg, cpog, kk;
    int geometry, has_mask, has_bias;
    int64_t x_s[4], w_s[4], off_s[4], m_s[4], o_s[4], b_s; /* input, weight, offset, mask, out, bias */
    int64_t gx_s[4], gw_s[4], goff_s[4], gm_s[4], gb_s;    /* their gradients */
} dk__dc_gpu_args;

extern "C" {
#endif
dk_status dk_deform_conv2d_forward_gpu(const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                                       const dk_tensor *mask, const dk_tensor *bias, dk_tensor *output,
                                       int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                       int64_t dilation_h, int64_t dilation_w, int64_t groups, int64_t offset_groups);
dk_status dk_deform_conv2d_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input, const dk_tensor *weight,
                                        const dk_tensor *offset, const dk_tensor *mask, dk_tensor *grad_input,
                                        dk_tensor *grad_weight, dk_tensor *grad_offset, dk_tensor *grad_mask,
                                        dk_tensor *grad_bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                        int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                                        int64_t offset_groups, int64_t geometry);
#ifdef __cplusplus
}
#endif

#endif /* DK_DEFORM_CONV_GPU_H */
