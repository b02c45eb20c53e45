/*
 * focal_loss_gpu.cu — the focal losses on CUDA and HIP (and on the host, for the tests): the
 * entry points the backend registers and their dtype switches. The kernels are
 * focal_loss_gpu_tmpl.cuh; focal_loss_gpu.h has the Note.
 */
#include "focal_loss_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/focal_loss_math.h"

#define DK_TEMPLATE "focal_loss/focal_loss_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

/* One call's sizes and strides; `out` is output or grad_input, `go` grad_output (or NULL). */
static dk__fl_gpu_args dk__fl_gpu_args_of(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                          const dk_tensor *out, const dk_tensor *go, const dk_tensor *gt, double gamma,
                                          double alpha_pos, double alpha_neg, int64_t reduction, double divisor)
{
    dk__fl_gpu_args a = {};
    a.N = input->shape[0], a.C = input->shape[1];
    a.classes = dk_tensor_dtype(targets) == DK_INT64;
    for (int d = 0; d < 2; d++) {
        a.x_s[d] = dk_tensor_stride(input, d);
        a.t_s[d] = d < targets->ndim ? dk_tensor_stride(targets, d) : 0;
        a.out_s[d] = d < out->ndim ? dk_tensor_stride(out, d) : 0;
        a.go_s[d] = go && d < go->ndim ? dk_tensor_stride(go, d) : 0;
        a.gt_s[d] = gt ? dk_tensor_stride(gt, d) : 0;
    }
    a.w_s = weight ? dk_tensor_stride(weight, 0) : 0;
    a.gamma = gamma, a.alpha_pos = alpha_pos, a.alpha_neg = alpha_neg, a.divisor = divisor;
    a.reduction = (int)reduction;
    a.kind = gamma == 2 ? DK_FOCAL_POW_2 : DK_FOCAL_POW_ANY;
    a.want_dt = gt != NULL;
    return a;
}

extern "C" dk_status dk_sigmoid_focal_loss_forward_gpu(const dk_tensor *input, const dk_tensor *targets,
                                                       const dk_tensor *weight, dk_tensor *output,
                                                       dk_tensor *grad_input, double gamma, double alpha_pos,
                                                       double alpha_neg, int64_t reduction, double divisor)
{
    dk__fl_gpu_args a = dk__fl_gpu_args_of(input, targets, weight, output, NULL, NULL, gamma, alpha_pos, alpha_neg,
                                           reduction, divisor);
    for (int d = 0; d < 2 && grad_input; d++) a.fused_s[d] = dk_tensor_stride(grad_input, d);
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__fl_gpu_sig_forward,
                    (input, targets, weight, output, grad_input, &a, stream),
                    st = dk__gpu_unsupported("sigmoid_focal_loss_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_sigmoid_focal_loss_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input,
                                                        const dk_tensor *targets, const dk_tensor *weight,
                                                        dk_tensor *grad_input, dk_tensor *grad_targets, double gamma,
                                                        double alpha_pos, double alpha_neg, int64_t reduction,
                                                        double divisor)
{
    const dk__fl_gpu_args a = dk__fl_gpu_args_of(input, targets, weight, grad_input, grad_output, grad_targets, gamma,
                                                 alpha_pos, alpha_neg, reduction, divisor);
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__fl_gpu_sig_backward,
                    (grad_output, input, targets, weight, grad_input, grad_targets, &a, stream),
                    st = dk__gpu_unsupported("sigmoid_focal_loss_backward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_softmax_focal_loss_forward_gpu(const dk_tensor *input, const dk_tensor *targets,
                                                       const dk_tensor *weight, dk_tensor *output, double gamma,
                                                       double alpha, int64_t reduction, double divisor)
{
    const dk__fl_gpu_args a = dk__fl_gpu_args_of(input, targets, weight, output, NULL, NULL, gamma, alpha, alpha,
                                                 reduction, divisor);
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__fl_gpu_soft_forward, (input, targets, weight, output, &a, stream),
                    st = dk__gpu_unsupported("softmax_focal_loss_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_softmax_focal_loss_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input,
                                                        const dk_tensor *targets, const dk_tensor *weight,
                                                        dk_tensor *grad_input, double gamma, double alpha,
                                                        int64_t reduction, double divisor)
{
    const dk__fl_gpu_args a = dk__fl_gpu_args_of(input, targets, weight, grad_input, grad_output, NULL, gamma, alpha,
                                                 alpha, reduction, divisor);
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__fl_gpu_soft_backward,
                    (grad_output, input, targets, weight, grad_input, &a, stream),
                    st = dk__gpu_unsupported("softmax_focal_loss_backward", input))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(sigmoid_focal_loss_forward, dk_sigmoid_focal_loss_forward_gpu);
DK_GPU_KERNEL(sigmoid_focal_loss_backward, dk_sigmoid_focal_loss_backward_gpu);
DK_GPU_KERNEL(softmax_focal_loss_forward, dk_softmax_focal_loss_forward_gpu);
DK_GPU_KERNEL(softmax_focal_loss_backward, dk_softmax_focal_loss_backward_gpu);
