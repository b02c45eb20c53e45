/*
 * roi_align_rotated_gpu.cu — roi_align_rotated forward and backward on CUDA and HIP (and on the
 * host, for the tests: Note [Emulating a GPU on the host] in tests/c/dk_gpu_emu.h): the entry
 * points the backend registers and their dtype switches. The kernels are
 * roi_align_rotated_gpu_tmpl.cuh; roi_align_rotated_gpu.h has the Note.
 */
#include "roi_align_rotated_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/roi_align_math.h"

#define DK_TEMPLATE "roi_align/roi_align_rotated_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

static dk__rar_gpu_args dk__rar_gpu_args_of(const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois,
                                            double scale, int64_t sampling_ratio, bool aligned, bool clockwise)
{
    dk__rar_gpu_args a;
    a.N = img->shape[0], a.C = img->shape[1], a.H = img->shape[2], a.W = img->shape[3];
    a.K = rois->shape[0], a.PH = bins->shape[2], a.PW = bins->shape[3];
    a.sampling_ratio = sampling_ratio;
    a.spatial_scale = scale;
    a.aligned = aligned;
    a.clockwise = clockwise;
    dk_tensor_strides(img, a.img_s, 4);
    dk_tensor_strides(bins, a.bins_s, 4);
    dk_tensor_strides(rois, a.roi_s, 2);
    return a;
}

extern "C" dk_status dk_roi_align_rotated_forward_gpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                                      int64_t pooled_height, int64_t pooled_width, double spatial_scale,
                                                      int64_t sampling_ratio, bool aligned, bool clockwise)
{
    (void)pooled_height, (void)pooled_width; /* output's shape, checked by ops/roi_align.c */
    const dk__rar_gpu_args a = dk__rar_gpu_args_of(input, output, rois, spatial_scale, sampling_ratio, aligned,
                                                   clockwise);
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__rar_gpu_forward, (input, rois, output, &a, stream),
                    st = dk__gpu_unsupported("roi_align_rotated_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_roi_align_rotated_backward_gpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                                       dk_tensor *grad_input, double spatial_scale,
                                                       int64_t sampling_ratio, bool aligned, bool clockwise)
{
    const dk__rar_gpu_args a = dk__rar_gpu_args_of(grad_input, grad_output, rois, spatial_scale, sampling_ratio,
                                                   aligned, clockwise);
    if (dk_tensor_numel(grad_input) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, grad_input->device);
    if (st) return st;
    void *stream = dk_current_stream(grad_input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__rar_gpu_backward, (grad_output, rois, grad_input, &a, stream),
                    st = dk__gpu_unsupported("roi_align_rotated_backward", grad_output))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(roi_align_rotated_forward, dk_roi_align_rotated_forward_gpu);
DK_GPU_KERNEL(roi_align_rotated_backward, dk_roi_align_rotated_backward_gpu);
