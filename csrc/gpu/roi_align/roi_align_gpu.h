/*
 * roi_align_gpu.h — what roi_align's GPU kernels (roi_align_gpu_tmpl.cuh) and their launchers
 * (roi_align_gpu.cu) share: one call's sizes and strides, and the entry points the backend
 * registers. Written once for CUDA and HIP (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h).
 *
 * The kernels, per output element (forward) or per element of grad_output or grad_input
 * (backward), take their per-element math from kernels/roi_align_math.h, the header the CPU
 * kernel uses, so that both compute the same expressions in the same order.
 *
 * Note [RoIs the GPU cannot check]
 * ops/roi_align.c checks RoI values only where the host can read them. On a device a RoI whose
 * batch index is not in [0, N) would index another image's memory, so the kernels treat it as
 * absent: its outputs are 0 (argmax -1) and it adds nothing to grad_input. A non-finite
 * coordinate already gives no samples through the shared math.
 *
 * Note [Deterministic backward on a GPU]
 * The default backward scatters every sample's four taps into grad_input with atomicAdd, one
 * thread per grad_output element: fast, but floating-point addition is not associative and the
 * order of atomics varies from run to run, so the bits do too. With the tunable
 * roi_align.gpu_deterministic = 1 (DKIT_TUNE=roi_align.gpu_deterministic=1), or when the calling
 * thread asks for deterministic kernels (dk_set_deterministic: torch's
 * use_deterministic_algorithms(True) through dkit's torch bridge), backward gathers instead:
 * every grad_input element is one sum, in one thread, of its terms in a fixed order (RoIs in
 * index order; within a RoI, bins and samples in order), written once. Same bits on every run,
 * for any number of RoIs. A plain gather (every element visits every RoI) costs K visits per
 * element, 80x the atomic backward for a detection batch; three kernels make it cheap:
 *   1. a table of the RoIs: image, both axes' geometry, and the pixel rectangle their taps can
 *      reach (from the first and last samples, 2 pixels of slack);
 *   2. per tile of 16 x 16 pixels (larger while the lists would outgrow grad_input's size: the
 *      scratch never exceeds it for realistic RoI counts), the list of RoIs that reach it, in
 *      index order, built by one thread per tile: the same lists on every run;
 *   3. one thread per pixel and 8 channels: the RoIs of its tile's list, in order, and in each
 *      only the samples whose taps can land on the pixel (dk_roi_align_axis_window in
 *      kernels/roi_align_math.h: a few per axis instead of bins x grid), tested exactly, with 8
 *      sums in registers. The geometry is found once for the 8 channels.
 * Skipping RoIs and samples that add nothing leaves the terms and their order unchanged, so the
 * result has the bits of the plain gather (tests compare tilings and windows on/off bit for
 * bit). Tunables roi_align.gpu_det_tile and roi_align.gpu_det_window force the tiling and the
 * plain visit of every sample, for those tests. torchvision's deterministic fallback instead
 * materialises an input-sized tensor per RoI (tens of GB for a detection batch).
 */
#ifndef DK_ROI_ALIGN_GPU_H
#define DK_ROI_ALIGN_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "roi_align.h" /* ops/roi_align.h */

/* Sizes and element strides of one call: `img` is input (forward) or grad_input (backward),
 * `bins` output (forward) or grad_output (backward). */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t sampling_ratio;
    double spatial_scale;
    int aligned, max_mode;
    int channel_major; /* Note [The GPU order of roi_align's bins] in roi_align_gpu.cu */
    int narrow;        /* K * C * PH * PW < 2^31: bin indices decoded in 32 bits */
    int64_t img_s[4], bins_s[4], roi_s[2], amy_s[4], amx_s[4];
} dk__ra_gpu_args;

#ifdef __cplusplus
extern "C" {
#endif
/* The entry points the backend registers (dk_gpu_backend.cu). They do not check their arguments
 * again: ops/roi_align.c and the core did, before dispatch. */
dk_status dk_roi_align_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                   dk_tensor *argmax_y, dk_tensor *argmax_x, int64_t aligned_height,
                                   int64_t aligned_width, double spatial_scale, int64_t sampling_ratio,
                                   int64_t pool_mode, bool aligned);
dk_status dk_roi_align_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois, const dk_tensor *argmax_y,
                                    const dk_tensor *argmax_x, dk_tensor *grad_input, int64_t aligned_height,
                                    int64_t aligned_width, double spatial_scale, int64_t sampling_ratio,
                                    int64_t pool_mode, bool aligned);
#ifdef __cplusplus
}
#endif

#endif /* DK_ROI_ALIGN_GPU_H */
