/*
 * roi_align_rotated_gpu.h — roi_align_rotated on CUDA and HIP (ops/roi_align.h), written once
 * (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels
 * (roi_align_rotated_gpu_tmpl.cuh) and launchers (roi_align_rotated_gpu.cu) share.
 *
 * Forward: one thread per output element (k, c, ph, pw), bin width fastest, computing it with
 * the per-element math (dk_roi_align_rotated_forward in kernels/roi_align_math.h), whose sums
 * the CPU kernel reproduces bit for bit.
 *
 * Note [Deterministic rotated backward on a GPU]
 * MMCV scatters each sample's four taps with atomicAdd, whose order, and so whose bits, vary from
 * run to run. Here every grad_input element is one sum, in one thread, of its terms in the CPU
 * kernel's order (Note [Rotated RoIAlign on a CPU]): RoIs in index order, then bins (ph, pw),
 * samples (iy, ix) and taps w1..w4, each term (g / count) w; written once. So the GPU's
 * gradient has the CPU's bits on every run (under emulation; on a device, up to the device's
 * cos and sin, which CUDA's and HIP's libraries round within an ulp of the host's). Two kernels:
 *   1. a table of the RoIs, one thread each: image (-1 when absent or without samples) and
 *      geometry, so the gather does not recompute the angle's cosine and sine per pixel;
 *   2. one thread per grad_input element (n, c, y, x): for each RoI of image n, only the samples
 *      whose taps can land on (y, x), from dk_roi_align_rotated_window (a few per axis instead of
 *      bins x grid), each tested exactly. Skipping samples that add nothing leaves the terms
 *      and their order unchanged.
 * Each thread still visits every RoI's table entry: K reads per element, cheap next to the
 * samples for detection's few hundred RoIs per image, not yet tiled as roi_align's gather is
 * (Note [Deterministic backward on a GPU] in roi_align_gpu.h). Not measured on a GPU yet.
 */
#ifndef DK_ROI_ALIGN_ROTATED_GPU_H
#define DK_ROI_ALIGN_ROTATED_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "roi_align.h" /* ops/roi_align.h */

/* One call's sizes, options and element strides: `img` is input (forward) or grad_input
 * (backward), `bins` output or grad_output. */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t sampling_ratio;
    double spatial_scale;
    int aligned, clockwise;
    int64_t img_s[4], bins_s[4], roi_s[2];
} dk__rar_gpu_args;

#ifdef __cplusplus
extern "C" {
#endif
/* The entry points the backend registers; ops/roi_align.c checked their arguments. */
dk_status dk_roi_align_rotated_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                           int64_t pooled_height, int64_t pooled_width, double spatial_scale,
                                           int64_t sampling_ratio, bool aligned, bool clockwise);
dk_status dk_roi_align_rotated_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois, dk_tensor *grad_input,
                                            double spatial_scale, int64_t sampling_ratio, bool aligned, bool clockwise);
#ifdef __cplusplus
}
#endif

#endif /* DK_ROI_ALIGN_ROTATED_GPU_H */
