"""The focal loss family (RetinaNet's loss): sigmoid_focal_loss (torchvision's, with
probabilities as targets, and MMCV's, with class indices) and softmax_focal_loss (MMCV's),
forward and backward.

Written once against the framework protocol (Note [The framework protocol] in
dkit/_frameworks/__init__.py): argument normalisation, the references' conventions (which alpha
weights what, what a mean divides by), output shapes, and the forward/backward pairs that every
framework with autograd differentiates. The math is kernels/focal_loss_math.h's, and
ops/focal_loss.h says what the core ops compute and check. dkit.compat.torchvision and
dkit.compat.mmcv call the functions below.
"""

from dkit import _C
from dkit._ops import Differentiable, torch_op
from dkit._ops._args import tensor, tensor_pair, to_float

# The core's reductions (ops/focal_loss.h): none, or the sum over a divisor.
_NONE, _SUM = 0, 1
_REDUCTIONS = ("none", "mean", "sum")

_sig_forward_kernel = _C.ops.sigmoid_focal_loss_forward
_sig_backward_kernel = _C.ops.sigmoid_focal_loss_backward
_soft_forward_kernel = _C.ops.softmax_focal_loss_forward
_soft_backward_kernel = _C.ops.softmax_focal_loss_backward


def _arguments(op, input, targets, weight, alpha, gamma, reduction):
    """(fw, input, targets, weight, alpha, gamma, the core's reduction): both losses' arguments
    normalised; the core checks the tensors' shapes and dtypes, and names them."""
    fw, input, targets = tensor_pair(op, input, "input", targets, "targets")
    if type(reduction) is not str or reduction not in _REDUCTIONS:
        raise _C.DkitValueError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if weight is not None:
        weight = tensor(fw, weight, "weight", op, " [C]")
    alpha, gamma = to_float(alpha, "alpha", op), to_float(gamma, "gamma", op)
    return fw, input, targets, weight, alpha, gamma, _NONE if reduction == "none" else _SUM


def _example(rng, targets):
    """[6, 4] float32 logits and targets: "probabilities" (0 or 1), "sigmoid" class indices
    (4: background) or "softmax" ones (-1: ignored)."""
    import numpy as np

    x = (rng.standard_normal((6, 4)) * 2).astype(np.float32)
    if targets == "probabilities":
        return x, (rng.random((6, 4)) < 0.3).astype(np.float32)
    return x, rng.integers(0, 5, 6).astype(np.int64) - (targets == "softmax")


@torch_op(
    "sigmoid_focal_loss(Tensor input, Tensor targets, float alpha=0.25, float gamma=2.0, str reduction=\"none\", "
    "Tensor? weight=None) -> Tensor",
    differentiable=True,
    example=lambda rng: (*_example(rng, "probabilities"), 0.25, 2.0, "mean"),
)
def sigmoid_focal_loss(input, targets, alpha=0.25, gamma=2.0, reduction="none", weight=None):
    """Sigmoid focal loss (RetinaNet), as torchvision.ops.sigmoid_focal_loss (probabilities as
    targets) or mmcv.ops.sigmoid_focal_loss (class indices), by the kind of ``targets``.

    Args:
        input: float16 / bfloat16 / float32 / float64 logits (16-bit computed in float32): any
            shape with probability targets, [N, C] with class indices. A torch.Tensor, a
            numpy.ndarray or any CPU object with ``__dlpack__``; any strides.
        targets: either probabilities of input's shape and dtype (torchvision: 1 positive,
            0 negative, soft labels too), or int64 class indices [N] (MMCV: row n is positive
            for class targets[n] only; a target outside [0, C), such as MMCV's background C,
            makes the whole row negative).
        alpha: weight of the positive term, 1 - alpha of the negative one. With probability
            targets a negative alpha weights neither (torchvision); with class indices it is
            always applied (MMCV).
        gamma: exponent of the modulating factor (1 - p_t).
        reduction: "none" (the loss of every element, input's shape), "sum", or "mean": the sum
            over every element's count with probability targets (torchvision), over N with
            class indices (MMCV: the mean per sample).
        weight: class indices only, float [C] of input's dtype: row n is scaled by
            weight[targets[n]] (MMCV's rule), by 1 for a target outside [0, C).

    Returns:
        The loss in input's framework, device and dtype; differentiable for torch inputs
        with respect to input, and to probability targets (as torchvision's autograd), once.
        The reduction's sum is taken in double in a fixed order: the same bits for any
        thread count and on every run (ops/focal_loss.h).

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: an unknown reduction; targets of another shape ("Target size (...) must
            be the same as input size (...)", as torch); non-finite alpha or gamma; weight
            with probability targets; an input that is not [N, C] with class indices.
        DkitTypeError: targets neither of input's dtype nor int64, a non-float input.
    """
    op = "sigmoid_focal_loss"
    fw, input, targets, weight, alpha, gamma, red = _arguments(op, input, targets, weight, alpha, gamma, reduction)
    shape = tuple(input.shape)
    if fw.dtype_name(targets) == "int64":  # MMCV's conventions; the core checks the shapes
        x, t = input, targets
        alpha_pos, alpha_neg = alpha, 1.0 - alpha
        divisor = float(shape[0]) if reduction == "mean" and shape else 1.0
    else:  # torchvision's: any shape, seen as [rows, last]
        if tuple(targets.shape) != shape:
            raise _C.DkitValueError(f"Target size ({targets.shape}) must be the same as input size ({input.shape})")
        last, rows = (shape[-1] if shape else 1), 1
        for d in shape[:-1]:
            rows *= d
        x, t = input.reshape(rows, last), targets.reshape(rows, last)
        alpha_pos, alpha_neg = (alpha, 1.0 - alpha) if alpha >= 0 else (1.0, 1.0)
        divisor = float(rows * last) if reduction == "mean" else 1.0
    if fw.wants_grad(input) or fw.wants_grad(targets):
        # a reduced loss: the backward's work done in the forward's pass (Note [The backward in
        # the forward] in ops/focal_loss.h), unless the targets want a gradient too
        fused = red == _SUM and not fw.wants_grad(targets)
        out = fw.apply(SIGMOID_FOCAL_LOSS, x, t, weight, gamma, alpha_pos, alpha_neg, red, divisor, fused)
    else:
        out = _sig_forward(fw, x, t, weight, gamma, alpha_pos, alpha_neg, red, divisor, False)[0]
    return out.reshape(shape) if red == _NONE and x is not input else out


def _loss_shape(input, reduction, per_row):
    """The forward's output shape: [N, C] or [N] (per_row), () when reduced; the core checks
    the ranks, and names the parameter."""
    if reduction != _NONE:
        return ()
    shape = tuple(input.shape)
    if len(shape) != 2:
        return (0,) if per_row else (0, 0)
    return shape[:1] if per_row else shape


def _sig_forward(fw, input, targets, weight, gamma, alpha_pos, alpha_neg, reduction, divisor, fused):
    """(loss, the gradient for grad_output 1 when fused, else an empty tensor): Note [The backward
    in the forward] in ops/focal_loss.h."""
    out = fw.new_empty(input, _loss_shape(input, reduction, False))
    grad = fw.new_empty(input, tuple(input.shape)) if fused else None
    _sig_forward_kernel(input, targets, weight, out, grad, gamma, alpha_pos, alpha_neg, reduction, divisor)
    return out, grad if fused else fw.empty(input, (0,), None)


def _sig_saved(args, results):
    """The backward reads the logits and targets themselves, or the fused gradient; whether the
    targets want a gradient is decided now (probability targets that require grad), so the
    backward computes none that nobody reads."""
    input, targets, weight, gamma, alpha_pos, alpha_neg, reduction, divisor, fused = args
    want_targets = bool(getattr(targets, "requires_grad", False))
    return input, targets, weight, gamma, alpha_pos, alpha_neg, reduction, divisor, want_targets, results[1]


def _sig_backward(fw, grad_output, input, targets, weight, gamma, alpha_pos, alpha_neg, reduction, divisor,
                  want_targets, fused_grad):  # fmt: skip
    """Gradients of input and targets (an empty tensor for targets that want none: class
    indices, or probabilities that do not require grad); the core writes them whole. A fused
    forward left the gradient for grad_output 1: it is scaled (its bits, for grad_output 1)."""
    none = fw.empty(grad_output, (0,), None)
    if fused_grad.shape[0] != 0:  # [N, C], N > 0 (an empty one: the kernel below writes [0, C])
        return fused_grad * grad_output, none
    grad_input = fw.new_empty(grad_output, tuple(input.shape))
    grad_targets = fw.new_empty(grad_output, tuple(input.shape)) if want_targets else None
    _sig_backward_kernel(grad_output, input, targets, weight, grad_input, grad_targets, gamma, alpha_pos, alpha_neg,
                         reduction, divisor)  # fmt: skip
    return grad_input, grad_targets if want_targets else none


SIGMOID_FOCAL_LOSS = Differentiable(
    "sigmoid_focal_loss",
    "SigmoidFocalLoss",
    forward=_sig_forward,
    saved=_sig_saved,
    backward=_sig_backward,
    results=1,
    forward_schema="(Tensor input, Tensor targets, Tensor? weight, float gamma, float alpha_pos, float alpha_neg, "
    "int reduction, float divisor, bool fused) -> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor input, Tensor targets, Tensor? weight, float gamma, float alpha_pos, "
    "float alpha_neg, int reduction, float divisor, bool want_targets, Tensor fused_grad) -> (Tensor, Tensor)",
)


# ------------------------------------------------------------------------------------------
# softmax_focal_loss


@torch_op(
    "softmax_focal_loss(Tensor input, Tensor targets, float gamma=2.0, float alpha=0.25, Tensor? weight=None, "
    "str reduction=\"mean\") -> Tensor",
    differentiable=True,
    example=lambda rng: (*_example(rng, "softmax"), 2.0, 0.25, None, "sum"),
)
def softmax_focal_loss(input, targets, gamma=2.0, alpha=0.25, weight=None, reduction="mean"):
    """Softmax focal loss, as mmcv.ops.softmax_focal_loss (its argument order and defaults).

    Args:
        input: [N, C] float16 / bfloat16 / float32 / float64 logits (16-bit computed in float32),
            the frameworks and strides sigmoid_focal_loss takes.
        targets: int64 [N] class indices; a negative one is ignored (loss and gradient 0), one
            of C or more is refused (DkitIndexError; MMCV reads another row there).
        gamma: exponent of the modulating factor (1 - s_target).
        alpha: weight of every row's loss.
        weight: float [C] of input's dtype: row n is scaled by weight[targets[n]].
        reduction: "none" (one loss per row, [N]), "sum", or "mean" (the sum over N).

    Returns:
        The loss: -alpha (1 - s)^gamma log s per row, s the softmax's value at the target,
        from the log-softmax (exact where MMCV's log(max(s, FLT_MIN)) stops at -87.3).
        Differentiable with respect to input, once; the backward recomputes the softmax
        rather than keeping an [N, C] copy of it as MMCV does.
    """
    op = "softmax_focal_loss"
    fw, input, targets, weight, alpha, gamma, red = _arguments(op, input, targets, weight, alpha, gamma, reduction)
    shape = tuple(input.shape)
    divisor = float(shape[0]) if reduction == "mean" and shape else 1.0
    if fw.wants_grad(input):
        return fw.apply(SOFTMAX_FOCAL_LOSS, input, targets, weight, gamma, alpha, red, divisor)
    return _soft_forward(fw, input, targets, weight, gamma, alpha, red, divisor)[0]


def _soft_forward(fw, input, targets, weight, gamma, alpha, reduction, divisor):
    out = fw.new_empty(input, _loss_shape(input, reduction, True))
    _soft_forward_kernel(input, targets, weight, out, gamma, alpha, reduction, divisor)
    return out, fw.empty(input, (0,), None)


def _soft_saved(args, results):
    return args


def _soft_backward(fw, grad_output, input, targets, weight, gamma, alpha, reduction, divisor):
    grad_input = fw.new_empty(grad_output, tuple(input.shape))
    _soft_backward_kernel(grad_output, input, targets, weight, grad_input, gamma, alpha, reduction, divisor)
    return (grad_input,)


SOFTMAX_FOCAL_LOSS = Differentiable(
    "softmax_focal_loss",
    "SoftmaxFocalLoss",
    forward=_soft_forward,
    saved=_soft_saved,
    backward=_soft_backward,
    results=1,
    forward_schema="(Tensor input, Tensor targets, Tensor? weight, float gamma, float alpha, int reduction, "
    "float divisor) -> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor input, Tensor targets, Tensor? weight, float gamma, float alpha, "
    "int reduction, float divisor) -> Tensor",
)
