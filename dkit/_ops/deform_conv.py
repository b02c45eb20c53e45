"""The deformable convolution family: deform_conv2d (DCNv1, and DCNv2 with a mask), with the
semantics of torchvision.ops.deform_conv2d, which MMCV's DeformConv2d and ModulatedDeformConv2d
share (dkit.compat.mmcv maps their arguments onto it).

Written once against the framework protocol (Note [The framework protocol] in
dkit/_frameworks/__init__.py): argument normalisation, the output shape, and the forward/backward
pair that every framework with autograd differentiates. ops/deform_conv.h says what the core
computes and checks; kernels/deform_conv_math.h holds the sampling math.

Note [Absent mask and bias]
The differentiable forward always takes five tensors (input, offset, mask, weight, bias): a
missing mask or bias is an empty [0] tensor, with a flag, so that the backward returns a
tensor for every one of them (an empty gradient for an empty tensor), which both autograd
routes (a torch.autograd.Function, and the torch ops' schemas, which cannot return None) take.
"""

from dkit import _C, _frameworks
from dkit._ops import Differentiable, autocast_args, torch_op
from dkit._ops._args import framework, tensor, to_pair

OP = "deform_conv2d"

# stride, padding and dilation are C ints in torchvision's and MMCV's kernels
_LIMIT = 2**31

# Whose derivatives at the map's edge (ops/deform_conv.h's numbering).
_GEOMETRIES = {"torchvision": 0, "mmcv": 1}

_forward_kernel = _C.ops.deform_conv2d_forward
_backward_kernel = _C.ops.deform_conv2d_backward

_framework_of_type = _frameworks.BY_TYPE.get


def _example(rng):
    """input [2, 4, 7, 6], offset and mask for a 3 x 3 kernel of 2 offset groups, stride 1,
    padding 1, weight [6, 2, 3, 3] (2 groups), bias [6]."""
    import numpy as np

    x = rng.random((2, 4, 7, 6)).astype(np.float32)
    offset = (rng.standard_normal((2, 2 * 2 * 9, 7, 6)) * 2).astype(np.float32)
    mask = rng.random((2, 2 * 9, 7, 6)).astype(np.float32)
    weight = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    return x, offset, weight, bias, [1, 1], [1, 1], [1, 1], mask, "mmcv"


# The pairs' defaults are the schema's own values ([1, 1] for int[2] stride=1), read never written.
@torch_op(
    "deform_conv2d(Tensor input, Tensor offset, Tensor weight, Tensor? bias=None, int[2] stride=1, "
    "int[2] padding=0, int[2] dilation=1, Tensor? mask=None, str geometry=\"torchvision\") -> Tensor",
    differentiable=True,
    autocast=True,
    example=_example,
)
def deform_conv2d(input, offset, weight, bias=None, stride=[1, 1], padding=[0, 0], dilation=[1, 1], mask=None,  # noqa: B006
                  geometry="torchvision"):  # fmt: skip
    """Deformable convolution (DCNv1; DCNv2 with ``mask``), as torchvision.ops.deform_conv2d.

    Args:
        input: [N, Cin, H, W] float16 / bfloat16 / float32 / float64 (16-bit computed in
            float32; torchvision refuses Half on a CPU). A torch.Tensor, a numpy.ndarray or any
            CPU object with ``__dlpack__``; any strides.
        offset: [N, 2 offset_groups kh kw, Ho, Wo]: per offset group and kernel tap (i, j)
            (row-major), the (y, x) displacement of the sample at each output position.
        weight: [Cout, Cin / groups, kh, kw]; groups = Cin / weight.shape[1].
        bias: [Cout] or None.
        stride, padding, dilation: int or (height, width); stride and dilation positive,
            padding >= 0, all below 2^31.
        mask: [N, offset_groups kh kw, Ho, Wo] or None (DCNv2's modulation: each sample is
            multiplied by it).
        geometry: whose offset gradient at the map's edge: "torchvision" (a sample exactly on
            the -1 edge, whose value is 0, still has a derivative toward the map) or "mmcv"
            (MMCV's DCNv1 and DCNv2: no derivative for a sample outside). Values, and the other
            gradients, are the same.

    Returns:
        [N, Cout, Ho, Wo], Ho = (H + 2 padding - (dilation (kh - 1) + 1)) / stride + 1, in the
        input's framework, device and dtype. Bilinear samples are 0 outside the map. For torch
        inputs that require grad, differentiable with respect to input, offset, mask, weight
        and bias (torchvision's gradients), once. The working memory is bounded whatever the
        batch (Note [Deformable convolution on a CPU]): any batch runs.

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: wrong ranks, an offset whose channels are not a positive multiple of
            2 kh kw ("the shape of the offset ..."), or not 2 offset_groups kh kw ("offset.shape[1]
            is not valid"), a mask of the wrong channels ("mask.shape[1] is not valid"), wrong
            batch sizes or output sizes, non-positive stride or dilation, negative padding,
            channels not divisible by the groups, an output size below 1, an unknown geometry.
        DkitTypeError: tensors of different dtypes, a non-float input, non-integer sizes.
    """
    geo = _GEOMETRIES.get(geometry) if type(geometry) is str else None
    if geo is None:
        raise _C.DkitValueError(f"{OP}: geometry must be 'torchvision' or 'mmcv', got {geometry!r}")
    tp = type(input)
    fw = _framework_of_type(tp)
    if fw is None:
        fw = framework(input, "input", OP)
    if tp is not fw.AS_IS:
        input = fw.as_tensor(input, "input", OP)
    offset = tensor(fw, offset, "offset", OP)
    weight = tensor(fw, weight, "weight", OP)
    use_mask, use_bias = mask is not None, bias is not None
    mask = tensor(fw, mask, "mask", OP) if use_mask else fw.empty(input, (0,), None)
    bias = tensor(fw, bias, "bias", OP) if use_bias else fw.empty(input, (0,), None)
    sh, sw = _param(stride, "stride")
    ph, pw = _param(padding, "padding")
    dh, dw = _param(dilation, "dilation")
    groups, offset_groups = _groups(input, offset, weight)
    args = (input, offset, mask, weight, bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask, use_bias, geo)
    try:
        if fw.wants_grad(input) or fw.wants_grad(offset) or fw.wants_grad(weight) or (
            use_mask and fw.wants_grad(mask)) or (use_bias and fw.wants_grad(bias)):  # fmt: skip
            return fw.apply(DEFORM_CONV2D, *args)
        return _forward(fw, *args)[0]
    except _C.DkitTypeError:
        cast = autocast_args(fw, input, offset, weight, *((mask,) if use_mask else ()), *((bias,) if use_bias else ()))
        if cast is None:
            raise
    x, o, w = cast[:3]
    m = cast[3] if use_mask else None
    b = cast[-1] if use_bias else None
    out = deform_conv2d(x, o, w, b, (sh, sw), (ph, pw), (dh, dw), m, geometry)
    return fw.to_dtype(out, fw.dtype_name(input))


def _param(value, name):
    """stride, padding or dilation as a pair of ints below 2^31 (the core checks their signs)."""
    a, b = to_pair(value, name, OP)
    if not (-_LIMIT < a < _LIMIT and -_LIMIT < b < _LIMIT):
        raise _C.DkitValueError(f"{OP}: {name} must be below 2^31, got ({a}, {b})")
    return a, b


def _groups(input, offset, weight):
    """(groups, offset_groups), from the shapes as torchvision finds them; the core checks that
    they fit every tensor, and names the parameter."""
    if len(input.shape) != 4 or len(weight.shape) != 4 or len(offset.shape) != 4:
        return 1, 1  # the core names the tensor of the wrong rank
    kh, kw = weight.shape[2], weight.shape[3]
    if weight.shape[1] == 0 or kh == 0 or kw == 0:
        return 1, 1  # the core says what is wrong with the weight
    offset_groups = offset.shape[1] // (2 * kh * kw)
    if offset_groups == 0:
        raise _C.DkitValueError(
            "the shape of the offset tensor at dimension 1 is not valid. It should be a multiple "
            f"of 2 * weight.size[2] * weight.size[3].\nGot offset.shape[1]={offset.shape[1]}, "
            f"while 2 * weight.size[2] * weight.size[3]={2 * kh * kw}"
        )
    return max(input.shape[1] // weight.shape[1], 1), offset_groups


def output_size(input, weight, sh, sw, ph, pw, dh, dw):
    """(Ho, Wo) as the references compute them, 0 where that is below 1 (the core then says
    "Calculated output size too small")."""
    kh, kw = weight.shape[2], weight.shape[3]
    ho = (input.shape[2] + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1 if sh > 0 else 0
    wo = (input.shape[3] + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1 if sw > 0 else 0
    return max(ho, 0), max(wo, 0)


# ------------------------------------------------------------------------------------------
# Forward and backward, for every framework (Differentiable in dkit/_ops/__init__.py)


def _forward(fw, input, offset, mask, weight, bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask,
             use_bias, geometry):  # fmt: skip
    """(output, an empty tensor): the second result only keeps forward's results a pair, as the
    other families' (the backward reads the inputs themselves)."""
    try:
        ho, wo = output_size(input, weight, sh, sw, ph, pw, dh, dw)
        if len(offset.shape) == 4 and (offset.shape[2], offset.shape[3]) != (ho, wo):
            ho = wo = 0  # nothing to allocate (a huge padding): the core names the mismatch
        shape = (input.shape[0], weight.shape[0], ho, wo)
    except IndexError:  # ranks are the core's to check, and it names the parameter
        shape = (0, 0, 0, 0)
    out = fw.new_empty(input, shape)
    _forward_kernel(input, weight, offset, mask if use_mask else None, bias if use_bias else None, out, sh, sw, ph,
                    pw, dh, dw, groups, offset_groups)  # fmt: skip
    return out, fw.empty(input, (0,), None)


def _saved(args, results):
    """The backward reads input, offset, mask and weight themselves; bias only by its shape."""
    input, offset, mask, weight, _bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask, use_bias, geo = args
    return input, offset, mask, weight, use_bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask, geo


def _backward(fw, grad_output, input, offset, mask, weight, use_bias, sh, sw, ph, pw, dh, dw, groups, offset_groups,
              use_mask, geometry):  # fmt: skip
    """The five gradients (empty for an absent mask or bias, Note [Absent mask and bias]); the
    core writes each whole."""
    grad_input = fw.new_empty(grad_output, tuple(input.shape))
    grad_offset = fw.new_empty(grad_output, tuple(offset.shape))
    grad_weight = fw.new_empty(grad_output, tuple(weight.shape))
    grad_mask = fw.new_empty(grad_output, tuple(mask.shape))
    grad_bias = fw.new_empty(grad_output, (weight.shape[0],) if use_bias else (0,))
    _backward_kernel(grad_output, input, weight, offset, mask if use_mask else None, grad_input, grad_weight,
                     grad_offset, grad_mask if use_mask else None, grad_bias if use_bias else None, sh, sw, ph, pw,
                     dh, dw, groups, offset_groups, geometry)  # fmt: skip
    return grad_input, grad_offset, grad_mask, grad_weight, grad_bias


DEFORM_CONV2D = Differentiable(
    OP,
    "DeformConv2d",
    forward=_forward,
    saved=_saved,
    backward=_backward,
    results=1,
    forward_schema="(Tensor input, Tensor offset, Tensor mask, Tensor weight, Tensor bias, int sh, int sw, int ph, "
    "int pw, int dh, int dw, int groups, int offset_groups, bool use_mask, bool use_bias, int geometry) "
    "-> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor input, Tensor offset, Tensor mask, Tensor weight, bool use_bias, "
    "int sh, int sw, int ph, int pw, int dh, int dw, int groups, int offset_groups, bool use_mask, int geometry) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)
