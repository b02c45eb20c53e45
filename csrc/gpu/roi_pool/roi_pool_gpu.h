/*
 * roi_pool_gpu.h — roi_pool on CUDA and HIP (ops/roi_pool.h), written once (Note [One source for
 * CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (roi_pool_gpu_tmpl.cuh) and launchers
 * (roi_pool_gpu.cu) share.
 *
 * Note [RoIPool on a GPU]
 * Forward: one thread per output element (k, c, ph, pw), in a grid-stride loop over 64-bit
 * indices, bin width fastest; it computes its RoI's geometry and its bin's maximum with the
 * functions the CPU kernel calls (kernels/roi_pool_math.h), so values and argmax are the CPU's
 * to the bit (a maximum is exact in any order of reading). Backward: grad_input is zeroed, then
 * one thread per (image, channel) plane adds, in the CPU's order (k, ph, pw), the gradient of
 * every bin of every RoI of its image whose argmax lies in the plane: no atomics, the CPU's bits
 * on every run (torchvision scatters with atomics, whose order, and so whose bits, vary; it
 * refuses the backward when torch.use_deterministic_algorithms is on). The backward's parallelism
 * is N x C threads, each reading all K RoIs' batch indices: ample for detection's
 * 256-channel maps, not measured on a GPU yet.
 *
 * ps_roi_pool: forward likewise one thread per output element; backward one thread per element
 * of grad_input (n, c, h, w), which knows its bin (ph, pw) from its channel and gathers, RoIs in
 * order, the share of every RoI of its image whose bin holds it: the CPU's additions in the CPU's
 * order, no atomics, N C H W threads.
 *
 * ps_roi_align: forward one thread per output element, dk_roi_align_forward_avg itself (the
 * CPU's terms in the CPU's order: its bits). Backward one thread per element of grad_input
 * (n, c, h, w): its channel fixes the bin; it walks its image's RoIs in order and, within each,
 * only the samples whose taps can reach it (dk_roi_align_axis_window, a superset tested
 * exactly), adding each tap's share that lands on it in a register: the CPU's terms in the
 * CPU's order (torchvision's), one store, no atomics (torchvision's CUDA kernel scatters with
 * atomicAdd and refuses the backward under torch.use_deterministic_algorithms).
 */
#ifndef DK_ROI_POOL_GPU_H
#define DK_ROI_POOL_GPU_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "roi_pool.h" /* ops/roi_pool.h */

#ifdef __cplusplus
/* One call's sizes and strides (elements). */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t img_s[4], bins_s[4], arg_s[4], rois_s[2];
    int arg_bits; /* roi_pool's argmax: 32 or 64, or 0 when the forward writes none */
    double scale;
    int bins_kind;          /* DK_ROI_POOL_BINS_* (kernels/roi_pool_math.h) */
    int64_t sampling_ratio; /* ps_roi_align */
} dk__rp_gpu_args;

extern "C" {
#endif
dk_status dk_roi_pool_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output, dk_tensor *argmax,
                                  int64_t pooled_height, int64_t pooled_width, double spatial_scale, int64_t geometry);
dk_status dk_roi_pool_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois, const dk_tensor *argmax,
                                   dk_tensor *grad_input);
dk_status dk_ps_roi_pool_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                     double spatial_scale);
dk_status dk_ps_roi_pool_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois, dk_tensor *grad_input,
                                      double spatial_scale);
dk_status dk_ps_roi_align_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                      double spatial_scale, int64_t sampling_ratio);
dk_status dk_ps_roi_align_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois, dk_tensor *grad_input,
                                       double spatial_scale, int64_t sampling_ratio);
#ifdef __cplusplus
}
#endif

#endif /* DK_ROI_POOL_GPU_H */
