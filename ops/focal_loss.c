/*
 * ops/focal_loss.c — sigmoid_focal_loss and softmax_focal_loss, forward and backward: definitions
 * and validation. Everything a kernel may assume is established here, once, for every backend;
 * the core has already refused outputs that overlap anything (Note [Aliasing] in dk_check.h).
 */
#include "focal_loss.h"

#include <math.h>

#include "dk_check.h"

/* The scalars: finite gamma and alphas (a NaN would silently give a NaN loss), a divisor >= 0
 * (0: the mean of nothing, NaN as torch's), a known reduction. */
static dk_status dk__check_scalars(const char *op, double gamma, double alpha_pos, double alpha_neg, int64_t reduction,
                                   double divisor)
{
    if (!isfinite(gamma)) return dk_error(DK_EINVAL, "%s: gamma must be finite, got %g", op, gamma);
    if (!isfinite(alpha_pos) || !isfinite(alpha_neg))
        return dk_error(DK_EINVAL, "%s: alpha must be finite, got %g and %g", op, alpha_pos, alpha_neg);
    if (reduction != DK_FOCAL_NONE && reduction != DK_FOCAL_SUM)
        return dk_error(DK_EINVAL, "%s: reduction must be 0 (none) or 1 (sum / divisor), got %lld", op,
                        (long long)reduction);
    if (!(divisor >= 0) || !isfinite(divisor))
        return dk_error(DK_EINVAL, "%s: divisor must be a finite number >= 0, got %g", op, divisor);
    return DK_OK;
}

/* input [N, C] (float), class targets [N] (int64) or float targets [N, C] (input's dtype; only
 * where `float_targets`), weight [C] (input's dtype; class targets only). */
static dk_status dk__check_inputs(const char *op, const dk_tensor *input, const dk_tensor *targets,
                                  const dk_tensor *weight, bool float_targets)
{
    dk_status st;
    if ((st = dk_check_ndim(op, "input", input, 2, "[N, C]"))) return st;
    if ((st = dk_check_float(op, "input", input))) return st;
    if (input->shape[0] < 0 || input->shape[1] < 0)
        return dk_error(DK_EINVAL, "%s: 'input' has a negative dimension", op);
    const dk_dtype dt = dk_tensor_dtype(input);
    if (dk_tensor_dtype(targets) == DK_INT64 || !float_targets) {
        if ((st = dk_check_dtype(op, "targets", targets, DK_INT64))) return st;
        if ((st = dk_check_shape(op, "targets", targets, 1, input->shape))) return st;
        if (weight) {
            if ((st = dk_check_shape(op, "weight", weight, 1, input->shape + 1))) return st;
            if ((st = dk_check_dtype(op, "weight", weight, dt))) return st;
        }
        return DK_OK;
    }
    if (dk_tensor_dtype(targets) != dt)
        return dk_error(DK_ETYPE,
                        "%s: 'targets' must be probabilities of the input's dtype (%s) or int64 class indices, got %s",
                        op, dk_dtype_name(dt), dk_dtype_name(dk_tensor_dtype(targets)));
    if ((st = dk_check_shape(op, "targets", targets, 2, input->shape))) return st;
    if (weight) return dk_error(DK_EINVAL, "%s: 'weight' (per class) needs class-index targets, not probabilities", op);
    return DK_OK;
}

/* A loss-shaped tensor: [N, C] (the sigmoid's), [N] (the softmax's) or, reduced, 0-d. */
static dk_status dk__check_loss_shape(const char *op, const char *name, const dk_tensor *t, const dk_tensor *input,
                                      int64_t reduction, bool per_row)
{
    dk_status st;
    if (reduction == DK_FOCAL_SUM) st = dk_check_shape(op, name, t, 0, NULL);
    else st = dk_check_shape(op, name, t, per_row ? 1 : 2, input->shape);
    if (st) return st;
    return dk_check_dtype(op, name, t, dk_tensor_dtype(input));
}

/*
 * The softmax's class indices, when the host can read them (on GPUs the kernels ignore such a
 * row instead of reading out of bounds): each below C. MMCV reads the softmax at row n, column
 * l, which for l >= C is another row's (or beyond the last); negative targets are its "ignore".
 */
static dk_status dk__check_classes(const char *op, const dk_tensor *targets, int64_t C)
{
    if (!dk_tensor_host_readable(targets)) return DK_OK;
    const int64_t *t = (const int64_t *)dk_tensor_data(targets);
    const int64_t s = dk_tensor_stride(targets, 0), n = targets->shape[0];
    for (int64_t i = 0; i < n; i++)
        if (t[i * s] >= C)
            return dk_error(DK_EINDEX,
                            "%s: targets[%lld] is %lld, not a class index in [0, %lld) (negative targets are ignored)",
                            op, (long long)i, (long long)t[i * s], (long long)C);
    return DK_OK;
}

DK_DEFINE_OP(sigmoid_focal_loss_forward, DK_SIGMOID_FOCAL_LOSS_FORWARD_ARGS)
{
    static const char op[] = "sigmoid_focal_loss_forward";
    dk_status st;
    if ((st = dk__check_inputs(op, input, targets, weight, true))) return st;
    if ((st = dk__check_scalars(op, gamma, alpha_pos, alpha_neg, reduction, divisor))) return st;
    if ((st = dk__check_loss_shape(op, "output", output, input, reduction, false))) return st;
    if (!grad_input) return DK_OK;
    /* Note [The backward in the forward] in ops/focal_loss.h */
    if (reduction != DK_FOCAL_SUM)
        return dk_error(DK_EINVAL, "%s: 'grad_input' is for a reduced loss (reduction 1), got reduction %lld", op,
                        (long long)reduction);
    return dk__check_loss_shape(op, "grad_input", grad_input, input, DK_FOCAL_NONE, false);
}

DK_DEFINE_OP(sigmoid_focal_loss_backward, DK_SIGMOID_FOCAL_LOSS_BACKWARD_ARGS)
{
    static const char op[] = "sigmoid_focal_loss_backward";
    dk_status st;
    if ((st = dk__check_inputs(op, input, targets, weight, true))) return st;
    if ((st = dk__check_scalars(op, gamma, alpha_pos, alpha_neg, reduction, divisor))) return st;
    if ((st = dk__check_loss_shape(op, "grad_output", grad_output, input, reduction, false))) return st;
    if ((st = dk__check_loss_shape(op, "grad_input", grad_input, input, DK_FOCAL_NONE, false))) return st;
    if (grad_targets) {
        if (dk_tensor_dtype(targets) == DK_INT64)
            return dk_error(DK_EINVAL, "%s: class-index targets have no gradient ('grad_targets' must be None)", op);
        if ((st = dk__check_loss_shape(op, "grad_targets", grad_targets, input, DK_FOCAL_NONE, false))) return st;
    }
    return DK_OK;
}

DK_DEFINE_OP(softmax_focal_loss_forward, DK_SOFTMAX_FOCAL_LOSS_FORWARD_ARGS)
{
    static const char op[] = "softmax_focal_loss_forward";
    dk_status st;
    if ((st = dk__check_inputs(op, input, targets, weight, false))) return st;
    if ((st = dk__check_scalars(op, gamma, alpha, alpha, reduction, divisor))) return st;
    if ((st = dk__check_loss_shape(op, "output", output, input, reduction, true))) return st;
    return dk__check_classes(op, targets, input->shape[1]);
}

DK_DEFINE_OP(softmax_focal_loss_backward, DK_SOFTMAX_FOCAL_LOSS_BACKWARD_ARGS)
{
    static const char op[] = "softmax_focal_loss_backward";
    dk_status st;
    if ((st = dk__check_inputs(op, input, targets, weight, false))) return st;
    if ((st = dk__check_scalars(op, gamma, alpha, alpha, reduction, divisor))) return st;
    if ((st = dk__check_loss_shape(op, "grad_output", grad_output, input, reduction, true))) return st;
    if ((st = dk__check_loss_shape(op, "grad_input", grad_input, input, DK_FOCAL_NONE, false))) return st;
    return dk__check_classes(op, targets, input->shape[1]);
}
