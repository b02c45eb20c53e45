/*
 * ops/focal_loss.h — the focal loss family (RetinaNet's loss, Lin et al. 2017): sigmoid_focal_loss
 * (torchvision's, with probabilities as targets, and MMCV's, with class indices) and
 * softmax_focal_loss (MMCV's), forward and backward. The per-element math is
 * kernels/focal_loss_math.h's, once for every backend.
 *
 * sigmoid_focal_loss, per element (n, c) of input x [N, C] with target t:
 *   p = sigmoid(x), ce = -(t log p + (1 - t) log(1 - p))  (binary cross-entropy with logits)
 *   m = 1 - p_t = p (1 - t) + (1 - p) t, a = alpha_pos t + alpha_neg (1 - t)
 *   loss = w a ce m^gamma
 * targets is either
 *   - a float tensor [N, C] of the input's dtype (torchvision: any t, soft labels too), w = 1; or
 *   - an int64 tensor [N] of class indices (MMCV): t = 1 where c == targets[n], else 0, so a
 *     target outside [0, C) (MMCV's background, C) makes the whole row negative; w =
 *     weight[targets[n]] (MMCV scales a row by the weight of its target class) when weight is
 *     given and the target is in [0, C), else 1 (MMCV reads weight[C] there, beyond the tensor).
 * torchvision's alpha is alpha_pos = alpha, alpha_neg = 1 - alpha when alpha >= 0, else 1 and 1;
 * MMCV's is always alpha and 1 - alpha (it has no "alpha < 0 ignores" rule).
 * ce and m are computed without cancellation (from exp(-|x|)), so large |x| keep their digits;
 * MMCV computes log(max(1 - p, FLT_MIN)), which makes its float32 loss of a negative class wrong
 * beyond x = 17 (65.5 instead of 15 at x = 20, alpha 0.25). Backward: the exact derivative with
 * respect to x, and with respect to t (float targets only: torchvision's autograd gives it).
 *
 * softmax_focal_loss (MMCV), per row n of input x [N, C] with class index l = targets[n]:
 *   s = softmax(x[n]), loss[n] = -alpha (1 - s_l)^gamma log(s_l) w, w = weight[l] or 1,
 *   and 0 for a negative l (MMCV's "ignore"); l >= C is refused (MMCV reads another row).
 *   log(s_l) is the log-softmax (MMCV takes log(max(s_l, FLT_MIN)), which differs only where s_l
 *   underflows). Backward: d loss / d x[n, c] = b (delta(c, l) - s_c), b = alpha w ((gamma
 *   (1 - s_l)^(gamma - 1) s_l log s_l) - (1 - s_l)^gamma) (MMCV's buff), the softmax recomputed
 *   from x rather than kept (MMCV keeps an [N, C] copy for the backward).
 *
 * Reductions (`reduction`): DK_FOCAL_NONE (0) writes every loss (output [N, C] for the sigmoid,
 * [N] for the softmax); DK_FOCAL_SUM (1) writes one value (output 0-d): the sum of every loss,
 * divided by `divisor` (1 for a sum, N C for torchvision's mean, N for MMCV's). The sum is taken
 * in double, in a fixed order (Note [A deterministic sum] in kernels/focal_loss_math.h): the same
 * bits for any thread count, and on a GPU (no atomics). Backward takes grad_output of the
 * forward's output shape (0-d for a sum) and writes grad_input [N, C] (and grad_targets [N, C]
 * where asked) whole: grad_output times the derivative, divided by divisor for a reduction.
 *
 * Note [The backward in the forward]
 * A reduced sigmoid loss's gradient is grad_output times a tensor that does not depend on
 * grad_output, and the forward has every piece of it at hand. So sigmoid_focal_loss_forward
 * with a grad_input [N, C] (DK_FOCAL_SUM only) also writes the backward's result for
 * grad_output 1, from the same exp and log1p: a training step then runs one kernel over the
 * logits instead of two, and its backward is a multiplication by grad_output (dkit/_ops/
 * focal_loss.py). For grad_output 1 those are the backward's own bits.
 *
 * Tensors: input, float targets, weight, outputs and gradients all of one dtype (float16,
 * bfloat16 (computed in float32), float32, float64), any strides; class targets int64, any stride.
 */
#ifndef DK_OPS_FOCAL_LOSS_H
#define DK_OPS_FOCAL_LOSS_H

#include "dk_op_define.h"

/* reduction (see above). */
enum { DK_FOCAL_NONE = 0, DK_FOCAL_SUM = 1 };

#define DK_SIGMOID_FOCAL_LOSS_FORWARD_ARGS(X) \
    X(TENSOR, input)                          \
    X(TENSOR, targets)                        \
    X(OPT_TENSOR, weight)                     \
    X(TENSOR_OUT, output)                     \
    X(OPT_TENSOR_OUT, grad_input)             \
    X(FLOAT, gamma)                           \
    X(FLOAT, alpha_pos)                       \
    X(FLOAT, alpha_neg)                       \
    X(INT, reduction)                         \
    X(FLOAT, divisor)

#define DK_SIGMOID_FOCAL_LOSS_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)                     \
    X(TENSOR, input)                           \
    X(TENSOR, targets)                         \
    X(OPT_TENSOR, weight)                      \
    X(TENSOR_OUT, grad_input)                  \
    X(OPT_TENSOR_OUT, grad_targets)            \
    X(FLOAT, gamma)                            \
    X(FLOAT, alpha_pos)                        \
    X(FLOAT, alpha_neg)                        \
    X(INT, reduction)                          \
    X(FLOAT, divisor)

#define DK_SOFTMAX_FOCAL_LOSS_FORWARD_ARGS(X) \
    X(TENSOR, input)                          \
    X(TENSOR, targets)                        \
    X(OPT_TENSOR, weight)                     \
    X(TENSOR_OUT, output)                     \
    X(FLOAT, gamma)                           \
    X(FLOAT, alpha)                           \
    X(INT, reduction)                         \
    X(FLOAT, divisor)

#define DK_SOFTMAX_FOCAL_LOSS_BACKWARD_ARGS(X) \
    X(TENSOR, grad_output)                     \
    X(TENSOR, input)                           \
    X(TENSOR, targets)                         \
    X(OPT_TENSOR, weight)                      \
    X(TENSOR_OUT, grad_input)                  \
    X(FLOAT, gamma)                            \
    X(FLOAT, alpha)                            \
    X(INT, reduction)                          \
    X(FLOAT, divisor)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(sigmoid_focal_loss_forward, DK_SIGMOID_FOCAL_LOSS_FORWARD_ARGS)
DK_DECLARE_OP(sigmoid_focal_loss_backward, DK_SIGMOID_FOCAL_LOSS_BACKWARD_ARGS)
DK_DECLARE_OP(softmax_focal_loss_forward, DK_SOFTMAX_FOCAL_LOSS_FORWARD_ARGS)
DK_DECLARE_OP(softmax_focal_loss_backward, DK_SOFTMAX_FOCAL_LOSS_BACKWARD_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_FOCAL_LOSS_H */
