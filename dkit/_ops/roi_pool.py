"""The RoI pooling family: roi_pool (Fast R-CNN's RoIPool), with torchvision's bins or MMCV's,
ps_roi_pool (R-FCN's position-sensitive RoI pooling, torchvision's) and ps_roi_align (its
RoIAlign form, torchvision's).

Written once against the framework protocol (Note [The framework protocol] in
dkit/_frameworks/__init__.py): argument normalisation, output shapes, and the forward/backward
pair that every framework with autograd differentiates. The boxes, output sizes and their bounds
are roi_align's (dkit/_ops/roi_align.py: rois_of, output_size_pair); the bins and their maximum
are kernels/roi_pool_math.h's, and ops/roi_pool.h says what the op computes and checks.
dkit.ops.roi_pool is roi_pool below; dkit.compat.torchvision and dkit.compat.mmcv call it.
"""

from dkit import _C, _frameworks
from dkit._ops import Differentiable, _examples, autocast_args, torch_op
from dkit._ops._args import framework, to_float, to_int
from dkit._ops.roi_align import _LIMIT, output_size_pair, rois_of

OP = "roi_pool"

# Whose bins (ops/roi_pool.h's numbering).
_GEOMETRIES = {"torchvision": 0, "mmcv": 1}

_forward_kernel = _C.ops.roi_pool_forward
_backward_kernel = _C.ops.roi_pool_backward
_ps_forward_kernel = _C.ops.ps_roi_pool_forward
_ps_backward_kernel = _C.ops.ps_roi_pool_backward
_psa_forward_kernel = _C.ops.ps_roi_align_forward
_psa_backward_kernel = _C.ops.ps_roi_align_backward

_framework_of_type = _frameworks.BY_TYPE.get


@torch_op(
    "roi_pool(Tensor input, Tensor boxes, int[2] output_size, float spatial_scale=1.0, "
    "str geometry=\"torchvision\") -> Tensor",
    "roi_pool.boxes_list(Tensor input, Tensor[] boxes, int[2] output_size, float spatial_scale=1.0, "
    "str geometry=\"torchvision\") -> Tensor",
    differentiable=True,
    autocast=True,
    example=lambda rng: (*_examples.feature(rng), [3, 2], 0.5, "mmcv"),
)
def roi_pool(input, boxes, output_size, spatial_scale=1.0, geometry="torchvision"):
    """RoIPool (Fast R-CNN): the maximum of each bin of each box, as torchvision.ops.roi_pool
    (geometry="torchvision") or mmcv.ops.roi_pool (geometry="mmcv").

    Args:
        input: [N, C, H, W] float16 / bfloat16 / float32 / float64 tensor (16-bit computed in
            float32): a torch.Tensor (any device dkit serves), a numpy.ndarray, or any CPU object
            with ``__dlpack__``; any strides.
        boxes: Tensor[K, 5] of (batch_index, x1, y1, x2, y2), same dtype and device as input,
            or a list of Tensor[L, 4], one per image (list position = batch index).
        output_size: int or (height, width), positive and below 2^31.
        spatial_scale: multiplies box coordinates to reach input coordinates.
        geometry: "torchvision" (corners rounded to whole pixels, boxes at least 1 x 1) or "mmcv"
            (continuous corners, x2 + 1 and y2 + 1; a box of no width or height pools to 0).

    Returns:
        [K, C, output_size[0], output_size[1]] in the input's framework, device and dtype: each
        element the largest input value in its bin (NaN never wins), 0 for an empty bin, and
        -3.4e38 (-FLT_MAX, as both references) for a bin of NaN or smaller values. For torch
        inputs that require grad, differentiable with respect to ``input``: the gradient of
        each bin goes to its maximum, in the same order on every backend and every run (the
        GPU kernel uses no atomics), once (a second derivative raises DkitNotImplementedError).

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: wrong ndim, boxes of the wrong width, a non-positive output size (or
            one of 2^31 or more), a non-positive spatial_scale, an unknown geometry, a box with
            a NaN or infinite coordinate.
        DkitTypeError: boxes and input of different dtypes, a non-float input.
        DkitIndexError: a batch index that is not an integer in [0, N).
    """
    geo = _GEOMETRIES.get(geometry) if type(geometry) is str else None
    if geo is None:
        raise _C.DkitValueError(f"{OP}: geometry must be 'torchvision' or 'mmcv', got {geometry!r}")
    fw, input, boxes, ph, pw, spatial_scale = _arguments(input, boxes, output_size, spatial_scale, OP)
    out, cast = _pooled(fw, ROI_POOL, _forward, input, boxes, ph, pw, spatial_scale, geo, infer=_infer)
    if cast is None:
        return out
    return fw.to_dtype(roi_pool(cast[0], cast[1], (ph, pw), spatial_scale, geometry), fw.dtype_name(input))


def _arguments(input, boxes, output_size, spatial_scale, op):
    """(framework, input, rois, ph, pw, spatial_scale): the family's arguments normalised, with
    exact-type checks first (Note [The fast path] in dkit/_ops/roi_align.py)."""
    tp = type(input)
    fw = _framework_of_type(tp)
    if fw is None:
        fw = framework(input, "input", op)
    if tp is not fw.AS_IS:
        input = fw.as_tensor(input, "input", op)
    if type(output_size) is int and 0 < output_size < _LIMIT:
        ph = pw = output_size
    else:
        ph, pw = output_size_pair(output_size, op)
    if type(spatial_scale) is not float:
        spatial_scale = to_float(spatial_scale, "spatial_scale", op)
    if type(boxes) is not fw.AS_IS:
        boxes = rois_of(fw, boxes, input, op)
    return fw, input, boxes, ph, pw, spatial_scale


def _pooled(fw, differentiable, forward, input, rois, *args, infer=None):
    """(output, None), through autograd when input wants a gradient, else by `infer` (the output
    alone) or forward; or (None, cast) when the kernels refuse the dtypes and autocast offers cast
    inputs for the caller to call itself with (Note [Autocast] in dkit/_ops/__init__.py)."""
    try:
        if fw.wants_grad(input):
            return fw.apply(differentiable, input, rois, *args), None
        return (infer or forward)(fw, input, rois, *args)[0], None
    except _C.DkitTypeError:
        cast = autocast_args(fw, input, rois)
        if cast is None:
            raise
    return None, cast


# ------------------------------------------------------------------------------------------
# Forward and backward, for every framework (Differentiable in dkit/_ops/__init__.py)


def _shape(input, rois, ph, pw):
    try:
        return (rois.shape[0], input.shape[1], ph, pw)
    except IndexError:  # ranks are the core's to check, and it names the parameter
        return (0, 0, ph, pw) if len(input.shape) < 2 else (0, input.shape[1], ph, pw)


def _argmax_dtype(input, plane):
    """int16 on the CPU where every plane index fits (Note [A narrow argmax] in
    csrc/cpu/roi_pool/roi_pool_cpu.h: the training step moves a quarter fewer bytes), else int32 as
    torchvision's where it fits (half the memory of int64), else int64 (ops/roi_pool.h). GPU
    tensors keep int32: the narrow argmax has not been measured on a GPU."""
    device = getattr(input, "device", "cpu")  # torch: a device; NumPy 2: "cpu"; none: the host
    on_cpu = getattr(device, "type", device) == "cpu"
    if plane < 2**15 and on_cpu:
        return "int16"
    return "int32" if plane < 2**31 else "int64"


def _forward(fw, input, rois, ph, pw, spatial_scale, geometry):
    """(output, argmax): argmax is for the backward, of the narrowest integer type that holds
    every plane index (_argmax_dtype)."""
    shape = _shape(input, rois, ph, pw)
    plane = input.shape[2] * input.shape[3] if len(input.shape) == 4 else 0
    out = fw.new_empty(input, shape)
    argmax = fw.empty(input, shape, _argmax_dtype(input, plane))
    _forward_kernel(input, rois, out, argmax, ph, pw, spatial_scale, geometry)
    return out, argmax


def _infer(fw, input, rois, ph, pw, spatial_scale, geometry):
    """(output,): without a backward to come, the kernels neither find nor write an argmax."""
    out = fw.new_empty(input, _shape(input, rois, ph, pw))
    _forward_kernel(input, rois, out, None, ph, pw, spatial_scale, geometry)
    return (out,)


def _saved(args, results):
    """The rois, the argmax and the input's shape (not the input: nothing reads its values)."""
    input, rois = args[0], args[1]
    return rois, results[1], tuple(input.shape)


def _backward(fw, grad_output, rois, argmax, input_shape):
    """Gradient with respect to input only; boxes get None, as in torchvision and MMCV. The core
    writes all of grad_input (ops/roi_pool.h), so nothing is zeroed here."""
    grad_input = fw.new_empty(grad_output, tuple(input_shape))
    _backward_kernel(grad_output, rois, argmax, grad_input)
    return (grad_input,)


ROI_POOL = Differentiable(
    OP,
    "RoIPool",
    forward=_forward,
    saved=_saved,
    backward=_backward,
    results=1,
    forward_schema="(Tensor input, Tensor rois, int ph, int pw, float spatial_scale, int geometry) -> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor rois, Tensor argmax, SymInt[] input_shape) -> Tensor",
)


# ------------------------------------------------------------------------------------------
# ps_roi_pool


@torch_op(
    "ps_roi_pool(Tensor input, Tensor boxes, int[2] output_size, float spatial_scale=1.0) -> Tensor",
    "ps_roi_pool.boxes_list(Tensor input, Tensor[] boxes, int[2] output_size, float spatial_scale=1.0) -> Tensor",
    differentiable=True,
    autocast=True,
    example=lambda rng: (_examples.feature(rng, c=12)[0], _examples.feature(rng)[1], [3, 2], 0.5),
)
def ps_roi_pool(input, boxes, output_size, spatial_scale=1.0):
    """Position-sensitive RoI pooling (R-FCN), as torchvision.ops.ps_roi_pool.

    Args:
        input: [N, C, H, W] float16 / bfloat16 / float32 / float64 (16-bit computed in float32),
            C a multiple of output_size[0] * output_size[1]; the frameworks and strides roi_pool
            takes.
        boxes: Tensor[K, 5] (batch_index, x1, y1, x2, y2) or a list of Tensor[L, 4] per image.
        output_size: int or (height, width), positive and below 2^31.
        spatial_scale: multiplies box coordinates to reach input coordinates.

    Returns:
        [K, C / (PH PW), PH, PW]: element (k, c, ph, pw) is the average over bin (ph, pw) of RoI k
        of input channel (c PH + ph) PW + pw, 0 for an empty bin; torchvision's bins, which
        never reach the map's last row or column (kernels/roi_pool_math.h). Differentiable with
        respect to input: the forward's own gradient (torchvision's backward also sends gradient
        to the last row and column, which its forward never reads), the same bits on every run
        and backend.

    Raises: as roi_pool, and DkitValueError when C is not a multiple of PH PW.
    """
    fw, input, boxes, ph, pw, spatial_scale = _arguments(input, boxes, output_size, spatial_scale, "ps_roi_pool")
    out, cast = _pooled(fw, PS_ROI_POOL, _ps_forward, input, boxes, ph, pw, spatial_scale)
    if cast is None:
        return out
    return fw.to_dtype(ps_roi_pool(cast[0], cast[1], (ph, pw), spatial_scale), fw.dtype_name(input))


def _ps_output(fw, input, rois, ph, pw):
    """The position-sensitive ops' output, [K, C / (PH PW), PH, PW], uninitialised."""
    try:
        channels = input.shape[1] // (ph * pw) if input.shape[1] % (ph * pw) == 0 else input.shape[1]
        shape = (rois.shape[0], channels, ph, pw)
    except IndexError:  # ranks are the core's to check, and it names the parameter
        shape = (0, 0, ph, pw)
    return fw.new_empty(input, shape)  # a C that is no multiple of PH PW: the core says so


def _ps_forward(fw, input, rois, ph, pw, spatial_scale):
    """(output, an empty tensor): the second result only keeps forward's results a pair."""
    out = _ps_output(fw, input, rois, ph, pw)
    _ps_forward_kernel(input, rois, out, spatial_scale)
    return out, fw.empty(input, (0,), None)


def _ps_saved(args, results):
    input, rois, ph, pw, spatial_scale = args
    return rois, tuple(input.shape), spatial_scale


def _ps_backward(fw, grad_output, rois, input_shape, spatial_scale):
    """Gradient with respect to input only; the core writes all of grad_input."""
    grad_input = fw.new_empty(grad_output, tuple(input_shape))
    _ps_backward_kernel(grad_output, rois, grad_input, spatial_scale)
    return (grad_input,)


PS_ROI_POOL = Differentiable(
    "ps_roi_pool",
    "PSRoIPool",
    forward=_ps_forward,
    saved=_ps_saved,
    backward=_ps_backward,
    results=1,
    forward_schema="(Tensor input, Tensor rois, int ph, int pw, float spatial_scale) -> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor rois, SymInt[] input_shape, float spatial_scale) -> Tensor",
)


# ------------------------------------------------------------------------------------------
# ps_roi_align


@torch_op(
    "ps_roi_align(Tensor input, Tensor boxes, int[2] output_size, float spatial_scale=1.0, "
    "int sampling_ratio=-1) -> Tensor",
    "ps_roi_align.boxes_list(Tensor input, Tensor[] boxes, int[2] output_size, float spatial_scale=1.0, "
    "int sampling_ratio=-1) -> Tensor",
    differentiable=True,
    autocast=True,
    example=lambda rng: (_examples.feature(rng, c=12)[0], _examples.feature(rng)[1], [3, 2], 0.5, 2),
)
def ps_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1):
    """Position-sensitive RoIAlign (R-FCN, Light-Head R-CNN), as torchvision.ops.ps_roi_align.

    Args:
        input, boxes, output_size, spatial_scale: as ps_roi_pool's.
        sampling_ratio: samples per bin along each axis; any value <= 0 is adaptive
            (ceil(box size / output size)), as torchvision; a 32-bit int.

    Returns:
        [K, C / (PH PW), PH, PW]: element (k, c, ph, pw) is the average of the bilinear samples
        of bin (ph, pw) of RoI k on input channel (c PH + ph) PW + pw, with torchvision's
        geometry (the box shifted by half a pixel, no minimum size: ops/roi_pool.h) and
        torchvision's float32 / float64 bits; a bin with no samples is 0 (torchvision: NaN).
        Differentiable with respect to input: torchvision's gradient and, in float32 and
        float64, its bits, the same on every run and backend (no atomics).

    Raises: as ps_roi_pool, and DkitValueError for a sampling_ratio outside 32 bits.
    """
    fw, input, boxes, ph, pw, spatial_scale = _arguments(input, boxes, output_size, spatial_scale, "ps_roi_align")
    if type(sampling_ratio) is not int:
        sampling_ratio = to_int(sampling_ratio, "sampling_ratio", "ps_roi_align")
    out, cast = _pooled(fw, PS_ROI_ALIGN, _psa_forward, input, boxes, ph, pw, spatial_scale, sampling_ratio)
    if cast is None:
        return out
    out = ps_roi_align(cast[0], cast[1], (ph, pw), spatial_scale, sampling_ratio)
    return fw.to_dtype(out, fw.dtype_name(input))


def _psa_forward(fw, input, rois, ph, pw, spatial_scale, sampling_ratio):
    """(output, an empty tensor), as _ps_forward."""
    out = _ps_output(fw, input, rois, ph, pw)
    _psa_forward_kernel(input, rois, out, spatial_scale, sampling_ratio)
    return out, fw.empty(input, (0,), None)


def _psa_saved(args, results):
    input, rois, ph, pw, spatial_scale, sampling_ratio = args
    return rois, tuple(input.shape), spatial_scale, sampling_ratio


def _psa_backward(fw, grad_output, rois, input_shape, spatial_scale, sampling_ratio):
    """Gradient with respect to input only; the core writes all of grad_input."""
    grad_input = fw.new_empty(grad_output, tuple(input_shape))
    _psa_backward_kernel(grad_output, rois, grad_input, spatial_scale, sampling_ratio)
    return (grad_input,)


PS_ROI_ALIGN = Differentiable(
    "ps_roi_align",
    "PSRoIAlign",
    forward=_psa_forward,
    saved=_psa_saved,
    backward=_psa_backward,
    results=1,
    forward_schema="(Tensor input, Tensor rois, int ph, int pw, float spatial_scale, int sampling_ratio) "
    "-> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor rois, SymInt[] input_shape, float spatial_scale, "
    "int sampling_ratio) -> Tensor",
)
