/*
 * roi_align_gpu.cu — RoIAlign forward and backward on CUDA and HIP (and on the host, for the
 * tests: Note [Emulating a GPU on the host] in tests/c/dk_gpu_emu.h): the entry points the
 * backend registers, the dtype switch and the choice of backward mode. The kernels are
 * roi_align_gpu_tmpl.cuh; roi_align_gpu.h has the Notes.
 */
#include "roi_align_gpu.h"

#include "dk_determinism.h"
#include "dk_gpu_status.h"
#include "dk_tunables.h"
#include "dk_gpu.h"
#include "dk_gpu_bins.h"
#include "dk_gpu_tiles.h"
#include "dk_gpu_kernels.h"
#include "kernels/roi_align_math.h"

/* Note [Deterministic backward on a GPU]. */
DK_TUNABLE(dk__ra_gpu_deterministic, "roi_align.gpu_deterministic", 0, 0, 1,
           "roi_align backward on a GPU: 0 scatters with atomics (fast, bits vary), 1 gathers (same bits every run)")

/* Note [The GPU order of roi_align's bins]. */
DK_TUNABLE(dk__ra_gpu_order, "roi_align.gpu_order", -1, -1, 1,
           "roi_align forward on a GPU: bins RoI-major (0: k, c, ph, pw) or channel-major (1: c, k, ph, pw); "
           "-1: channel-major for a fixed sampling_ratio, RoI-major for adaptive sampling")
DK_TUNABLE(dk__ra_gpu_backward_order, "roi_align.gpu_backward_order", 1, 0, 1,
           "roi_align atomic backward on a GPU: bins RoI-major (0) or channel-major (1)")
/*
 * Note [RoI tables for the GPU forward] (tried, measured slower, removed)
 * The forward's and the atomic backward's threads each decode their RoI (five loads, the scale,
 * the bins' sizes and grids with their divisions), 7 x 7 x 256 times per RoI on the bench's
 * case; Nsight Compute on the H100 (2026-11-27) found the forward bound by instructions (SM 79%,
 * memory 39% at sampling_ratio 2; torchvision's kernel, the same time, memory 70%). A version
 * that decoded each RoI once into a table (image and both axes, K entries of scratch) and, with
 * adaptive sampling, found each bin's column taps once in a per-thread array gave the same bits
 * and was slower everywhere, measured the same day in one process (whole calls, with against
 * without): forward 0.454 against 0.420 ms at sampling_ratio 2, 7.23 against 4.09 ms adaptive,
 * atomic backward 2.09 against 1.88 ms. Likely why, not measured: each thread then loads a table
 * entry of two axes (64-bit fields, about 60 bytes) where the decode was register arithmetic on
 * 20 bytes of RoI, and the column array lives in local memory. What the same round kept: the
 * atomic backward zeroes a dense grad_input with a memset, where a kernel took four 64-bit
 * divisions per element to find its offset (2.08 to 1.88 ms with the table off).
 */

/* 1: bin indices always decoded in 64 bits (tests reach that path on small inputs) */
DK_TUNABLE(dk__ra_gpu_wide, "roi_align.gpu_wide_index", 0, 0, 1,
           "roi_align on a GPU: 0 decodes bin indices in 32 bits when they fit, 1 always in 64")
/* Note [Deterministic backward on a GPU]: its tile side (0: the smallest power of two from 16
 * whose lists fit in grad_input's size) and its sample windows (0: every sample, for tests). */
DK_TUNABLE(dk__ra_gpu_det_tile, "roi_align.gpu_det_tile", 0, 0, 1 << 16,
           "deterministic roi_align backward on a GPU: tile side in pixels (0: chosen by size)")
DK_TUNABLE(dk__ra_gpu_det_window, "roi_align.gpu_det_window", 1, 0, 1,
           "deterministic roi_align backward on a GPU: 1 visits the samples near each pixel, 0 all of them")

/*
 * Note [The GPU order of roi_align's bins]
 * One thread per bin (k, c, ph, pw), forward and atomic backward. RoI-major order (k outermost,
 * as torchvision's kernels) has the threads in flight at once read ~20 RoIs' regions of every
 * channel of the feature map: the whole map, which does not stay in L2, and is read again for
 * each overlapping RoI (an H100's DRAM moved ~7x the map's size, nsight compute). Channel-major
 * order (c outermost) has them read a few channels' planes for every RoI: a few MB that stay in
 * L2 while all the RoIs that overlap there read them. Each bin is still one thread computing the
 * same expression, so the bits do not depend on the order. The atomic backward has a tunable of
 * its own: there the order also decides how many atomics meet at one address at once.
 * Measured on an H100 (bench/bench_gpu_calls.py, [2, 256, 200, 272], 1024 RoIs, 7x7, against
 * torchvision's 0.53 ms / 2.97 ms / 2.53 ms): forward with sampling_ratio 2, channel-major
 * 0.42 ms, RoI-major 0.55 ms; adaptive sampling (up to 15 x 15 samples per bin), channel-major
 * 5.17 ms, RoI-major 4.12 ms: there a thread's many samples already reuse its own RoI's pixels
 * from L1, and the channel-major warps, whose neighbouring threads belong to RoIs of different
 * sizes, wait on the largest; atomic backward, channel-major 2.10 ms, RoI-major 2.70 ms. So the
 * forward's default is channel-major for a fixed sampling ratio and RoI-major for adaptive
 * sampling; the backward's is channel-major.
 */

/* The deterministic backward's tiling: tiles of tile x tile pixels, ty x tx of them per image. */
typedef struct {
    int64_t tile, ty, tx;
    int window;
} dk__ra_gpu_tiles;

/* Channels per thread of the deterministic backward: the RoI's geometry, found once, serves them
 * all. */
#define DK__RA_GPU_CHANNELS 8

#define DK_TEMPLATE "roi_align/roi_align_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

static dk__ra_gpu_args dk__ra_gpu_args_of(const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois,
                                          const dk_tensor *amy, const dk_tensor *amx, int64_t PH, int64_t PW,
                                          double scale, int64_t sampling_ratio, int64_t pool_mode, bool aligned)
{
    dk__ra_gpu_args a;
    a.N = img->shape[0];
    a.C = img->shape[1];
    a.H = img->shape[2];
    a.W = img->shape[3];
    a.K = rois->shape[0];
    a.PH = PH;
    a.PW = PW;
    a.sampling_ratio = sampling_ratio;
    a.spatial_scale = scale;
    a.aligned = aligned;
    a.max_mode = pool_mode == DK_POOL_MAX;
    a.channel_major = 0; /* set by each entry point: Note [The GPU order of roi_align's bins] */
    /* every bin index below 2^31 (products checked by dk__ra_gpu_sizes; here only compared) */
    a.narrow = (double)a.K * (double)a.C * (double)a.PH * (double)a.PW < 2147483648.0 && !dk_tunable(&dk__ra_gpu_wide);
    dk_tensor_strides(img, a.img_s, 4);
    dk_tensor_strides(bins, a.bins_s, 4);
    dk_tensor_strides(rois, a.roi_s, 2);
    dk_tensor_strides(amy, a.amy_s, 4);
    dk_tensor_strides(amx, a.amx_s, 4);
    return a;
}

/* Element counts of both sides must fit in 63 bits for the kernels' 64-bit indices; the core's
 * tensors guarantee it for tensors that exist, this guards the products against wrapping. */
static dk_status dk__ra_gpu_sizes(const dk__ra_gpu_args *a, const char *op)
{
    int64_t t;
    if (__builtin_mul_overflow(a->K, a->C, &t) || __builtin_mul_overflow(t, a->PH, &t) ||
        __builtin_mul_overflow(t, a->PW, &t) || __builtin_mul_overflow(a->N, a->C, &t) ||
        __builtin_mul_overflow(t, a->H, &t) || __builtin_mul_overflow(t, a->W, &t))
        return dk_error(DK_EINVAL, "%s: sizes too large", op);
    return DK_OK;
}

/* The deterministic backward's tiles (Note [Deterministic backward on a GPU]): side 16, doubled
 * while the lists (a RoI index per tile and RoI) would take more memory than grad_input, so that
 * its scratch stays within grad_input's size for any realistic count of RoIs; or the tunable's. */
static dk_status dk__ra_gpu_tiling(const dk__ra_gpu_args *a, const dk_tensor *grad_input, dk__ra_gpu_tiles *g)
{
    if (a->K > INT32_MAX)
        return dk_error(DK_EINVAL, "roi_align_backward: %lld RoIs (at most 2^31 - 1)", (long long)a->K);
    const double budget = (double)a->N * (double)a->C * (double)a->H * (double)a->W *
                          (double)dk_dtype_size(dk_tensor_dtype(grad_input));
    dk_gpu_tiles_choose(a->N, a->H, a->W, a->K, budget, dk_tunable(&dk__ra_gpu_det_tile), &g->tile, &g->ty, &g->tx);
    g->window = dk_tunable(&dk__ra_gpu_det_window) != 0;
    return DK_OK;
}

extern "C" dk_status dk_roi_align_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                              dk_tensor *argmax_y, dk_tensor *argmax_x, int64_t aligned_height,
                                              int64_t aligned_width, double spatial_scale, int64_t sampling_ratio,
                                              int64_t pool_mode, bool aligned)
{
    dk__ra_gpu_args a = dk__ra_gpu_args_of(input, output, rois, argmax_y, argmax_x, aligned_height, aligned_width,
                                           spatial_scale, sampling_ratio, pool_mode, aligned);
    const int64_t order = dk_tunable(&dk__ra_gpu_order);
    a.channel_major = order < 0 ? sampling_ratio > 0 : order != 0;
    dk_status st = dk__ra_gpu_sizes(&a, "roi_align_forward");
    if (st || a.K == 0 || a.C == 0) return st;
    dk_device_guard g; /* the kernel runs on its tensors' device */
    if ((st = dk__gpu_enter(&g, input->device))) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__ra_gpu_forward,
                    (input, rois, output, argmax_y, argmax_x, &a, stream),
                    st = dk__gpu_unsupported("roi_align_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_roi_align_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                               const dk_tensor *argmax_y, const dk_tensor *argmax_x,
                                               dk_tensor *grad_input, int64_t aligned_height, int64_t aligned_width,
                                               double spatial_scale, int64_t sampling_ratio, int64_t pool_mode,
                                               bool aligned)
{
    dk__ra_gpu_args a = dk__ra_gpu_args_of(grad_input, grad_output, rois, argmax_y, argmax_x, aligned_height,
                                           aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned);
    a.channel_major = dk_tunable(&dk__ra_gpu_backward_order) != 0;
    dk_status st = dk__ra_gpu_sizes(&a, "roi_align_backward");
    if (st || a.N == 0 || a.C == 0 || a.H == 0 || a.W == 0) return st; /* nothing to write */
    /* Note [Deterministic kernels] in dk_determinism.h: the caller's request, or the tunable */
    const bool deterministic = dk_deterministic() || dk_tunable(&dk__ra_gpu_deterministic) != 0;
    dk__ra_gpu_tiles tiles;
    if (deterministic && (st = dk__ra_gpu_tiling(&a, grad_input, &tiles))) return st;
    dk_device_guard g;
    if ((st = dk__gpu_enter(&g, grad_input->device))) return st;
    void *stream = dk_current_stream(grad_input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__ra_gpu_backward,
                    (grad_output, rois, argmax_y, argmax_x, grad_input, &a, deterministic ? &tiles : NULL, stream),
                    st = dk__gpu_unsupported("roi_align_backward", grad_output))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(roi_align_forward, dk_roi_align_forward_gpu);
DK_GPU_KERNEL(roi_align_backward, dk_roi_align_backward_gpu);
