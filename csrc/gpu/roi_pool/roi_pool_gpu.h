/*
 * roi_pool_gpu.h — roi_pool on CUDA and HIP (ops/roi_pool.h), written once (Note [One source for
 * CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (roi_pool_gpu_tmpl.cuh) and launchers
 * (roi_pool_gpu.cu) share.
 *
 * Note [RoIPool on a GPU]
 * Forwards: one thread per output element (k, c, ph, pw), in a grid-stride loop over 64-bit
 * indices, bin width fastest; each computes its RoI's geometry and its bin's value with the
 * functions the CPU kernels call (kernels/roi_pool_math.h): roi_pool's maximum and argmax (exact
 * in any order of reading), ps_roi_pool's average, ps_roi_align's dk_roi_align_forward_avg (the
 * CPU's terms in the CPU's order): the CPU's bits. roi_pool's forward (0.81x torchvision's on an
 * H100 in RoI-major order with 64-bit index decoding) now takes its bins channel-major by
 * default (roi_pool.gpu_order = 1: c outermost, so that the threads in flight read a few
 * channels' planes, which stay in L2, for every RoI, as roi_align's forward, Note [The GPU order
 * of roi_align's bins], where that was 1.3x faster) and decodes indices in 32 bits when they fit;
 * each bin is still one thread with the same expression, so the bits do not change. On the H100
 * (2026-11-27) that gave 1.40 ms against torchvision's 1.29 (0.92x, from 0.81x); whether the
 * order or the 32-bit decode did it was not separated. roi_pool.gpu_order = 0 gives back the
 * RoI-major order.
 *
 * Backwards, two modes (the same for the three ops):
 *   - atomic, the default (torchvision's way, and dkit's roi_align's): one thread per grad_output
 *     element (k, c, ph, pw) scatters its terms into grad_input with atomicAdd: roi_pool adds g
 *     at its bin's argmax (one atomic); ps_roi_pool adds g / area to each pixel of its bin, in
 *     its one input channel; ps_roi_align adds dk_ps_roi_align_share (g w / count) for each of
 *     the four taps of each sample of its bin. The terms are the CPU's (the same per-element
 *     math); only the order of the additions differs, and so the last bits, from run to run.
 *     float32 and float64 add into grad_input itself (zeroed first); 16-bit storage, which has
 *     no fast atomics of its own, adds into a float scratch (contiguous NCHW), stored once,
 *     rounded, at the end (the CPU rounds each addition to the storage type: the atomic mode is
 *     the more accurate there, and the test compares within n eps sum|terms|).
 *   - deterministic, when the caller asks for deterministic kernels (dk_deterministic(): the
 *     torch bridge sets it from torch.use_deterministic_algorithms around every backward;
 *     torchvision refuses these backwards then) or roi_pool.gpu_deterministic = 1 (one tunable
 *     for the three ops; DKIT_TUNE=roi_pool.gpu_deterministic=1): gathers, no atomics, the CPU's
 *     additions in the CPU's order, so its bits on every run.
 *     roi_pool: grad_input zeroed, then one block per (image, channel) plane reads the bins
 *     (k, ph, pw) in the CPU's order, a chunk of blockDim at a time, through shared memory (each
 *     bin's argmax, -1 for another image's RoI, and its gradient); the thread owning a pixel
 *     (pixel % blockDim) adds, chunk by chunk and in order, the bins whose argmax is that pixel.
 *     No geometry is involved: any argmax the caller passes is honoured, as on the CPU.
 *     ps_roi_pool and ps_roi_align: per-tile RoI lists, as roi_align's (Note [Deterministic
 *     backward on a GPU]): a table of the pixels each RoI can reach (ps_roi_pool: the union of
 *     its bins' bounds; ps_roi_align: its samples' span with 2 pixels of slack, the whole axis
 *     for a non-finite sample), then per tile of tile x tile pixels of each image the RoIs that
 *     reach it, in index order (roi_pool.gpu_det_tile, 0: 16, doubled while the lists would
 *     outgrow grad_input). One thread per grad_input element (n, c, h, w), whose channel fixes
 *     its bin (ph, pw), walks its tile's list: ps_roi_pool adds the share of each RoI whose bin
 *     holds it; ps_roi_align visits only the samples whose taps can reach it
 *     (dk_roi_align_axis_window, a superset tested exactly) and adds each tap's share that lands
 *     on it in a register, one store. Skipped RoIs and samples add nothing: the bits are those of
 *     a walk over every RoI (the test compares tilings of 1, 5 and 64 pixels with the CPU).
 * Why atomics by default: the first, plainer gathers were measured on an H100 (torch 2.11,
 * float32, forward + backward of whole Python calls, 1024 RoIs, 7 x 7): roi_pool on
 * [2, 256, 200, 272] 27.1 ms (torchvision 1.81 ms); ps_roi_pool on [2, 490, 100, 136] 86.0 ms
 * (0.38 ms), ps_roi_align 122.9 ms (0.36 ms): roi_pool's backward had one thread per plane
 * (N x C = 512 threads) walking every bin serially, the ps backwards' threads each tested all K
 * RoIs of their image (13.6G tests there). The atomic backwards do the work of the forwards,
 * once per term. Measured on the H100 afterwards (2026-11-27, the same calls): forward +
 * backward 2.06 ms for roi_pool (torchvision 1.79), 0.423 ms for ps_roi_pool (0.350), 0.403 ms
 * for ps_roi_align (0.398); the kernels alone (bench/bench_gpu.c): atomic backwards 0.644,
 * 0.254 and 0.521 ms, the deterministic gathers 3.95, 8.75 and 29.8 ms. On the device the tests
 * compare the atomic results within a tolerance and the gathers' bits with the CPU's.
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
    int arg_bits; /* roi_pool's argmax: 16, 32 or 64, or 0 when the forward writes none */
    double scale;
    int bins_kind;          /* DK_ROI_POOL_BINS_* (kernels/roi_pool_math.h) */
    int64_t sampling_ratio; /* ps_roi_align */
    int channel_major;      /* roi_pool's forward: bins (c, k, ph, pw) rather than (k, c, ph, pw) */
    int narrow;             /* roi_pool's forward: every bin index below 2^31 (32-bit decoding) */
} dk__rp_gpu_args;

/* The position-sensitive gathers' RoI table (Note [RoIPool on a GPU]): RoI k's image (-1: it adds
 * nothing) and the pixels [y0, y1] x [x0, x1] its bins can reach (a superset). */
typedef struct {
    int64_t n, y0, y1, x0, x1;
} dk__rp_gpu_reach;

/* Their tiling: tiles of tile x tile pixels, ty x tx of them per image. */
typedef struct {
    int64_t tile, ty, tx;
} dk__rp_gpu_tiles;

/* The atomic backwards' accumulator strides (elements): grad_input's, or the float scratch's. */
typedef struct {
    int64_t s[4];
} dk__rp_gpu_acc_s;

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
