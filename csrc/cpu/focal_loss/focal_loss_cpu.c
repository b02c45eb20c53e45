/*
 * focal_loss/focal_loss_cpu.c — the focal losses on the CPU: the entry points the dispatcher
 * calls, and their registration. The math is kernels/focal_loss_math.h's; focal_loss_cpu.h says
 * how the work is split. The argument checks were done by ops/focal_loss.c.
 */
#include "focal_loss_cpu.h"

#include "dk_registry.h"
#include "dk_tunables.h"
#include "kernels/dk_template.h"

DK_TUNABLE(dk__fl_isa, "focal_loss.isa", 1, 0, 1,
           "the focal losses' loops: 1 with AVX2 where the CPU has it, 0 as the library is built (the same "
           "bits; Note [A row in lanes])")

#define DK_TEMPLATE "focal_loss/focal_loss_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

/* Runs one call: `work` about the elements' count, `softmax` which loss; a reduced forward gets
 * its chunks' sums in an arena (Note [A deterministic sum]). */
static dk_status dk__fl_cpu(dk__fl_ctx *cx, bool softmax, const char *op)
{
    const int64_t items = softmax ? cx->N : cx->N * cx->C;
    const int64_t per = softmax ? DK_FOCAL_CHUNK_ROWS : DK_FOCAL_CHUNK;
    cx->chunks = (items + per - 1) / per;
    cx->kind = cx->gamma == 2 ? DK_FOCAL_POW_2 : DK_FOCAL_POW_ANY;
#if DK__FL_AVX2
    cx->avx2 = dk_tunable(&dk__fl_isa) == 1 && __builtin_cpu_supports("avx2");
#else
    cx->avx2 = false;
#endif
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    cx->partials = NULL;
    if (!cx->grad_output && cx->reduction == DK_FOCAL_SUM) {
        cx->partials = (double *)dk_arena_take_n(&ar, (size_t)cx->chunks + 1, sizeof(double));
        if (!cx->partials) {
            dk_arena_free(&ar);
            return dk_error(DK_ENOMEM, "%s: out of memory for the sums of %lld chunks", op, (long long)cx->chunks);
        }
    }
    /* about 30 operations per element: exp, log1p, two divisions, the polynomial's */
    const int nthreads = dk_parallel_threads_for(cx->N * (cx->C + 1) * 8);
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(cx->input), st, dk__fl_run, (cx, nthreads, softmax),
                    st = dk_error(DK_ETYPE, "%s: unsupported dtype", op))
    dk_arena_free(&ar);
    return st;
}

static dk__fl_ctx dk__fl_ctx_of(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                const dk_tensor *grad_output, dk_tensor *out, double gamma, double alpha_pos,
                                double alpha_neg, int64_t reduction, double divisor)
{
    return (dk__fl_ctx){.input = input,
                        .targets = targets,
                        .weight = weight,
                        .grad_output = grad_output,
                        .out = out,
                        .N = input->shape[0],
                        .C = input->shape[1],
                        .xs = {dk_tensor_stride(input, 0), dk_tensor_stride(input, 1)},
                        .ts = dk_tensor_stride(targets, 0),
                        .gamma = gamma,
                        .alpha_pos = alpha_pos,
                        .alpha_neg = alpha_neg,
                        .divisor = divisor,
                        .reduction = (int)reduction,
                        .classes = dk_tensor_dtype(targets) == DK_INT64};
}

dk_status dk_sigmoid_focal_loss_forward_cpu(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                            dk_tensor *output, dk_tensor *grad_input, double gamma, double alpha_pos,
                                            double alpha_neg, int64_t reduction, double divisor)
{
    dk__fl_ctx cx = dk__fl_ctx_of(input, targets, weight, NULL, output, gamma, alpha_pos, alpha_neg, reduction,
                                  divisor);
    cx.fused = grad_input;
    return dk__fl_cpu(&cx, false, "sigmoid_focal_loss_forward");
}

dk_status dk_sigmoid_focal_loss_backward_cpu(const dk_tensor *grad_output, const dk_tensor *input,
                                             const dk_tensor *targets, const dk_tensor *weight, dk_tensor *grad_input,
                                             dk_tensor *grad_targets, double gamma, double alpha_pos, double alpha_neg,
                                             int64_t reduction, double divisor)
{
    dk__fl_ctx cx = dk__fl_ctx_of(input, targets, weight, grad_output, grad_input, gamma, alpha_pos, alpha_neg,
                                  reduction, divisor);
    cx.grad_targets = grad_targets;
    return dk__fl_cpu(&cx, false, "sigmoid_focal_loss_backward");
}

dk_status dk_softmax_focal_loss_forward_cpu(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                            dk_tensor *output, double gamma, double alpha, int64_t reduction,
                                            double divisor)
{
    dk__fl_ctx cx = dk__fl_ctx_of(input, targets, weight, NULL, output, gamma, alpha, alpha, reduction, divisor);
    return dk__fl_cpu(&cx, true, "softmax_focal_loss_forward");
}

dk_status dk_softmax_focal_loss_backward_cpu(const dk_tensor *grad_output, const dk_tensor *input,
                                             const dk_tensor *targets, const dk_tensor *weight, dk_tensor *grad_input,
                                             double gamma, double alpha, int64_t reduction, double divisor)
{
    dk__fl_ctx cx = dk__fl_ctx_of(input, targets, weight, grad_output, grad_input, gamma, alpha, alpha, reduction,
                                  divisor);
    return dk__fl_cpu(&cx, true, "softmax_focal_loss_backward");
}

DK_REGISTER_DEVICE_IMPL(sigmoid_focal_loss_forward, CPU, dk_sigmoid_focal_loss_forward_cpu)
DK_REGISTER_DEVICE_IMPL(sigmoid_focal_loss_backward, CPU, dk_sigmoid_focal_loss_backward_cpu)
DK_REGISTER_DEVICE_IMPL(softmax_focal_loss_forward, CPU, dk_softmax_focal_loss_forward_cpu)
DK_REGISTER_DEVICE_IMPL(softmax_focal_loss_backward, CPU, dk_softmax_focal_loss_backward_cpu)
