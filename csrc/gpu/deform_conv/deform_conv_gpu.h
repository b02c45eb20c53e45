/*
 * deform_conv_gpu.h — deform_conv2d on CUDA and HIP (ops/deform_conv.h), written once (Note [One
 * source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (deform_conv_gpu_tmpl.cuh) and
 * launchers (deform_conv_gpu.cu) share.
 *
 * Note [Deformable convolution on a GPU]
 * Two sets of kernels, chosen by the tunable deform_conv.gpu_tiled (1, the default: tiled; 0:
 * direct). Both find each sample with the CPU's math (kernels/deform_conv_math.h) and use no
 * GEMM library (dkit links none). In both, the column of group g is col[k, p] = mask x sample
 * for row k = (channel c - g cpg) kk + tap and position p = (n, y, x); the forward is
 * out[o, p] = bias[o] + sum_k weight[o, k] col[k, p], grad_weight[o, k] = sum_p
 * grad_output[o, p] col[k, p], and the column gradient gcol[k, p] = sum_o weight[o, k]
 * grad_output[o, p] feeds grad_input (scattered to the sample's corners) and grad_offset,
 * grad_mask (gathered over the offset group's channels).
 *
 * Direct (gpu_tiled = 0), the first design: no column buffer, every term where it is used.
 *   forward       one thread per output element (n, o, y, x): the bias, then the sum over its
 *                 group's channels and the taps of weight x mask x sample (each sample is
 *                 recomputed once per output channel).
 *   grad_input    one thread per (n, c, tap, y, x): gcol computed (the sum over the group's
 *                 output channels), times the mask, added to the sample's four corners.
 *   grad_offset, grad_mask   one thread per (n, offset group, tap, y, x): the column gradients of
 *                 the group's channels, each computed, times the sample's derivatives and value:
 *                 a gather, the CPU's terms in the CPU's order.
 *   grad_weight   one thread per weight element, summing over every image and position with
 *                 the sample recomputed each time (serial: a few tens of thousands of threads
 *                 each summing N Ho Wo terms); grad_bias one thread per output channel.
 *
 * Tiled (gpu_tiled = 1): the three products as tiled matrix products on 256-thread blocks, each
 * tile of col, weight or grad_output computed or read once into shared memory and used by every
 * thread of the block (tiles of DK_DC_P = 32 positions, DK_DC_K = 32 rows k, 64 output channels
 * for the forward and 32 for the others; a thread keeps 8 or 4 sums in registers).
 *   forward       a block per (group, 64 output channels, 32 positions): per step of 32 rows,
 *                 the column tile (each sample once per block instead of once per output
 *                 channel) and the weights' tile; each thread adds its terms in increasing k
 *                 after the bias, the direct kernel's order and roundings (Note [Exact GPU
 *                 arithmetic] in csrc/gpu/rules.mk: no contraction), so the same bits as the
 *                 direct kernel (the emulated test checks that, exactly).
 *   grad_weight   a block per (group, 32 output channels, 32 rows, chunk of positions): the
 *                 positions are cut into a fixed number of chunks, chosen from the sizes alone
 *                 (about DK_DC_BLOCKS_AIM = 1024 blocks in all, each chunk a multiple of 32
 *                 positions, at most 2^24 partial sums), whose partial sums go to a scratch
 *                 buffer (compute type, stream-ordered dk_device_alloc) and are then added in
 *                 chunk order by a second kernel: a parallel reduction with the same bits on
 *                 every run and every GPU, deterministic without asking. grad_bias likewise:
 *                 a block per (output channel, chunk), a fixed tree in shared memory, then the
 *                 chunks in order.
 *   gcol          a block per (group, 32 rows, 32 positions): per step of 32 output channels,
 *                 the weights' and grad_output's tiles; sums in increasing o, the direct
 *                 kernels' order and bits. Stored for a batch of images at a time (at most
 *                 deform_conv.gpu_column_elements values, 2^24 by default: 64 MiB in float32;
 *                 the images in as few equal batches as fit), then read by grad_input's scatter
 *                 and grad_offset's gather, which are the direct kernels otherwise.
 * grad_input, in both: gcol times the mask, added to the sample's four corners with atomics in
 * a compute-type accumulator (contiguous NCHW, zeroed first), stored once into grad_input. The
 * order of the additions, and so the last bits, vary from run to run, as torchvision's and
 * MMCV's CUDA kernels' do; the offsets can send any sample anywhere, so a gather has no bounded
 * set of sources to read. When deterministic kernels are asked for (Note [Deterministic
 * kernels]: torch.use_deterministic_algorithms), the scatter runs as one thread, adding in a
 * fixed order: the same bits every run, at a serial kernel's speed (a sorted or fixed-point
 * scatter would be the fast form, not written yet).
 * Measured on an H100 (2026-11-27, whole Python calls, forward and backward of [8, 64, 64, 64],
 * 3 x 3, 64 output channels, mask, bias, float32): the direct kernels 35.2 ms, the tiled ones
 * 4.00 ms, torchvision (im2col and cuBLAS) 2.21 ms (0.55x). On the device the C test passes
 * with both settings and compute-sanitizer's memcheck finds no error. The tiles are plain (no
 * vectorised loads, no double buffering, no tensor cores; 80-96 registers, so 2 blocks per
 * SM), and nothing has profiled them yet: that should decide the next step.
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
