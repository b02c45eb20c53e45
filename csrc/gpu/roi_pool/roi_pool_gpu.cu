/*
 * roi_pool_gpu.cu — RoIPool forward and backward on CUDA and HIP (and on the host, for the
 * tests): the entry points the backend registers and their dtype switches. The kernels are
 * roi_pool_gpu_tmpl.cuh; roi_pool_gpu.h has the Note.
 */
#include "roi_pool_gpu.h"

#include "dk_determinism.h"
#include "dk_gpu_status.h"
#include "dk_tunables.h"
#include "dk_gpu.h"
#include "dk_gpu_bins.h"
#include "dk_gpu_tiles.h"
#include "dk_gpu_kernels.h"
#include "kernels/roi_pool_math.h"

/* Note [RoIPool on a GPU]: the backwards' mode, for roi_pool, ps_roi_pool and ps_roi_align. */
DK_TUNABLE(dk__rp_gpu_deterministic, "roi_pool.gpu_deterministic", 0, 0, 1,
           "roi_pool, ps_roi_pool and ps_roi_align backward on a GPU: 0 scatters with atomics (fast, bits vary), "
           "1 gathers (the CPU's bits, every run)")

/* Note [RoIPool on a GPU]: the position-sensitive gathers' tile side (0: the smallest power of two
 * from 16 whose lists fit in grad_input's size). */
DK_TUNABLE(dk__rp_gpu_det_tile, "roi_pool.gpu_det_tile", 0, 0, 1 << 16,
           "deterministic ps_roi_pool / ps_roi_align backward on a GPU: tile side in pixels (0: chosen by size)")

/* Note [Deterministic kernels] in dk_determinism.h: the caller's request, or the tunable. */
static bool dk__rp_gpu_det(void) { return dk_deterministic() || dk_tunable(&dk__rp_gpu_deterministic) != 0; }

/* The position-sensitive gathers' tiles: side 16, doubled while the lists (a RoI index per tile
 * and RoI) would take more memory than grad_input, so that their scratch stays within
 * grad_input's size; or the tunable's side. */
static dk_status dk__rp_gpu_tiling(const dk__rp_gpu_args *a, const dk_tensor *grad_input, const char *op,
                                   dk__rp_gpu_tiles *g)
{
    if (a->K > INT32_MAX) return dk_error(DK_EINVAL, "%s: %lld RoIs (at most 2^31 - 1)", op, (long long)a->K);
    const double budget = (double)a->N * (double)a->C * (double)a->H * (double)a->W *
                          (double)dk_dtype_size(dk_tensor_dtype(grad_input));
    dk_gpu_tiles_choose(a->N, a->H, a->W, a->K, budget, dk_tunable(&dk__rp_gpu_det_tile), &g->tile, &g->ty, &g->tx);
    return DK_OK;
}

/* Note [RoIPool on a GPU]: roi_pool's forward order. */
DK_TUNABLE(dk__rp_gpu_order, "roi_pool.gpu_order", 1, 0, 1,
           "roi_pool forward on a GPU: bins RoI-major (0: k, c, ph, pw) or channel-major (1: c, k, ph, pw)")

/* 1: bin indices always decoded in 64 bits (tests reach that path on small inputs) */
DK_TUNABLE(dk__rp_gpu_wide, "roi_pool.gpu_wide_index", 0, 0, 1,
           "roi_pool forward on a GPU: 0 decodes bin indices in 32 bits when they fit, 1 always in 64")

#define DK_TEMPLATE "roi_pool/roi_pool_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

static dk__rp_gpu_args dk__rp_gpu_args_of(const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois,
                                          const dk_tensor *argmax)
{
    dk__rp_gpu_args a;
    a.N = img->shape[0], a.C = img->shape[1], a.H = img->shape[2], a.W = img->shape[3];
    a.K = rois->shape[0], a.PH = bins->shape[2], a.PW = bins->shape[3];
    for (int d = 0; d < 4; d++) {
        a.img_s[d] = dk_tensor_stride(img, d);
        a.bins_s[d] = dk_tensor_stride(bins, d);
        a.arg_s[d] = argmax ? dk_tensor_stride(argmax, d) : 0;
    }
    a.arg_bits = argmax ? (int)argmax->dtype.bits : 0; /* int16, int32 or int64 (ops/roi_pool.c) */
    a.rois_s[0] = dk_tensor_stride(rois, 0), a.rois_s[1] = dk_tensor_stride(rois, 1);
    a.scale = 1.0;
    a.bins_kind = DK_ROI_POOL_BINS_TORCHVISION;
    a.sampling_ratio = 0;
    a.channel_major = 0;
    a.narrow = 0;
    return a;
}

extern "C" dk_status dk_roi_pool_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                             dk_tensor *argmax, int64_t pooled_height, int64_t pooled_width,
                                             double spatial_scale, int64_t geometry)
{
    (void)pooled_height, (void)pooled_width; /* output's shape, checked by ops/roi_pool.c */
    dk__rp_gpu_args a = dk__rp_gpu_args_of(input, output, rois, argmax);
    a.scale = spatial_scale;
    a.bins_kind = geometry == DK_ROI_POOL_MMCV ? DK_ROI_POOL_BINS_MMCV : DK_ROI_POOL_BINS_TORCHVISION;
    a.channel_major = dk_tunable(&dk__rp_gpu_order) != 0;
    a.narrow = (double)a.K * (double)a.C * (double)a.PH * (double)a.PW < 2147483648.0 && !dk_tunable(&dk__rp_gpu_wide);
    if (a.K * a.C * a.PH * a.PW == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__rp_gpu_forward, (input, rois, output, argmax, &a, stream),
                    st = dk__gpu_unsupported("roi_pool_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_roi_pool_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                              const dk_tensor *argmax, dk_tensor *grad_input)
{
    const dk__rp_gpu_args a = dk__rp_gpu_args_of(grad_input, grad_output, rois, argmax);
    if (a.N * a.C * a.H * a.W == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, grad_input->device);
    if (st) return st;
    void *stream = dk_current_stream(grad_input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__rp_gpu_backward,
                    (grad_output, rois, argmax, grad_input, &a, dk__rp_gpu_det(), stream),
                    st = dk__gpu_unsupported("roi_pool_backward", grad_output))
    dk_device_guard_exit(&g);
    return st;
}

/* The position-sensitive forwards' sizes: a.C, PH, PW the output's, N, H, W the input's. */
static dk__rp_gpu_args dk__rp_gpu_ps_args_of(const dk_tensor *input, const dk_tensor *output, const dk_tensor *rois,
                                             double spatial_scale)
{
    dk__rp_gpu_args a = dk__rp_gpu_args_of(output, output, rois, output);
    a.N = input->shape[0], a.H = input->shape[2], a.W = input->shape[3];
    for (int d = 0; d < 4; d++) a.img_s[d] = dk_tensor_stride(input, d);
    a.scale = spatial_scale;
    return a;
}

extern "C" dk_status dk_ps_roi_pool_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                                double spatial_scale)
{
    const dk__rp_gpu_args a = dk__rp_gpu_ps_args_of(input, output, rois, spatial_scale);
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__rp_gpu_ps_forward, (input, rois, output, &a, stream),
                    st = dk__gpu_unsupported("ps_roi_pool_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_ps_roi_pool_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                                 dk_tensor *grad_input, double spatial_scale)
{
    dk__rp_gpu_args a = dk__rp_gpu_args_of(grad_input, grad_output, rois, grad_output);
    a.scale = spatial_scale;
    if (a.N * a.C * a.H * a.W == 0) return DK_OK; /* nothing to write */
    dk__rp_gpu_tiles tiles;
    const bool det = dk__rp_gpu_det();
    dk_status st = det ? dk__rp_gpu_tiling(&a, grad_input, "ps_roi_pool_backward", &tiles) : DK_OK;
    if (st) return st;
    dk_device_guard g;
    st = dk__gpu_enter(&g, grad_input->device);
    if (st) return st;
    void *stream = dk_current_stream(grad_input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__rp_gpu_ps_backward,
                    (grad_output, rois, grad_input, &a, det ? &tiles : NULL, stream),
                    st = dk__gpu_unsupported("ps_roi_pool_backward", grad_output))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_ps_roi_align_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                                 double spatial_scale, int64_t sampling_ratio)
{
    dk__rp_gpu_args a = dk__rp_gpu_ps_args_of(input, output, rois, spatial_scale);
    a.sampling_ratio = sampling_ratio;
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__psa_gpu_forward, (input, rois, output, &a, stream),
                    st = dk__gpu_unsupported("ps_roi_align_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_ps_roi_align_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                                  dk_tensor *grad_input, double spatial_scale, int64_t sampling_ratio)
{
    dk__rp_gpu_args a = dk__rp_gpu_args_of(grad_input, grad_output, rois, grad_output);
    a.scale = spatial_scale;
    a.sampling_ratio = sampling_ratio;
    if (a.N * a.C * a.H * a.W == 0) return DK_OK; /* nothing to write */
    dk__rp_gpu_tiles tiles;
    const bool det = dk__rp_gpu_det();
    dk_status st = det ? dk__rp_gpu_tiling(&a, grad_input, "ps_roi_align_backward", &tiles) : DK_OK;
    if (st) return st;
    dk_device_guard g;
    st = dk__gpu_enter(&g, grad_input->device);
    if (st) return st;
    void *stream = dk_current_stream(grad_input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__psa_gpu_backward,
                    (grad_output, rois, grad_input, &a, det ? &tiles : NULL, stream),
                    st = dk__gpu_unsupported("ps_roi_align_backward", grad_output))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(roi_pool_forward, dk_roi_pool_forward_gpu);
DK_GPU_KERNEL(roi_pool_backward, dk_roi_pool_backward_gpu);
DK_GPU_KERNEL(ps_roi_pool_forward, dk_ps_roi_pool_forward_gpu);
DK_GPU_KERNEL(ps_roi_pool_backward, dk_ps_roi_pool_backward_gpu);
DK_GPU_KERNEL(ps_roi_align_forward, dk_ps_roi_align_forward_gpu);
DK_GPU_KERNEL(ps_roi_align_backward, dk_ps_roi_align_backward_gpu);
