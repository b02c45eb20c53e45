"""The roi_align family: roi_align (the RoI pooling family, dkit/_ops/roi_pool.py, shares its
boxes, output sizes and bounds: output_size_pair and rois_of below).

Everything about these ops that is not the kernel is written here once, against the framework
protocol (Note [The framework protocol] in dkit/_frameworks/__init__.py): argument
normalisation, the bounds, output shapes and dtypes (the argmax rule), the conversion of
boxes, and the forward/backward pair that every framework with autograd differentiates.
dkit.ops.roi_align is roi_align below; dkit.nn, dkit.compat.torchvision and dkit.compat.mmcv
call it and check their arguments with check_args.

Note [The fast path]
A tiny roi_align call costs a few microseconds in C and torch's allocator, so Python overhead
decides its speed. The common case (int output_size, float spatial_scale, int sampling_ratio,
str pool_mode, bool aligned, a [K, 5] tensor of the input's framework as boxes, no grad) takes
exact-type checks only: no isinstance chains, no imports, no keyword shuffling; one dict lookup
for the framework, its wants_grad(), _forward and one allocation through the framework
(new_empty: torch's own method, no Python frame in between). Everything unusual falls to the
slow helpers, which also produce the error messages. Counted with callgrind, this path runs
~270 fewer instructions per call (of ~28,000, kernel and allocation included) than the
per-framework copies it replaced. Python 3.11 specialises calls of functions with fixed
arguments only, so the protocol's functions on this path take no *args; and see
_framework_of_type below.

Note [Which checks are made where]
The core checks every value it is given (ops/roi_align.c: ranks, widths, dtypes, devices, output
size and sampling_ratio below 2^31, a positive finite spatial_scale, the box values), and its
messages name the parameter, so a call checks here only what Python needs before the core
runs: the argument types, and the output size, which sizes the allocation. A layer, which
should fail where it is built, checks everything at construction with check_args, by the
core's own rules.
"""

import math

from dkit import _C, _frameworks
from dkit._ops import Differentiable, _examples, autocast_args, torch_op
from dkit._ops._args import framework, to_bool, to_float, to_int, to_pair

OP = "roi_align"

# Output sizes and sampling_ratio are C ints in MMCV's and torchvision's kernels; the core
# refuses 2^31 and more (ops/roi_align.c).
_LIMIT = 2**31

# MMCV's numbering, as ops/roi_align.h.
_POOL_MODES = {"max": 0, "avg": 1}

# Argmax holds sample coordinates, which 16 bits cannot hold exactly (ops/roi_align.h).
_SIXTEEN_BIT = frozenset({"float16", "bfloat16"})

_forward_kernel = _C.ops.roi_align_forward
_backward_kernel = _C.ops.roi_align_backward

# type(input) -> framework, the per-type cache (dkit/_frameworks/__init__.py): the bound method
# itself, as a plain global. (Python 3.11 compiles `name.get(x)` to LOAD_ATTR, which makes a
# bound method per call, instead of LOAD_METHOD when `name` was bound by an import statement.)
_framework_of_type = _frameworks.BY_TYPE.get


@torch_op(
    "roi_align(Tensor input, Tensor boxes, int[2] output_size, float spatial_scale=1.0, int sampling_ratio=0, "
    "str pool_mode=\"avg\", bool aligned=True) -> Tensor",
    "roi_align.boxes_list(Tensor input, Tensor[] boxes, int[2] output_size, float spatial_scale=1.0, "
    "int sampling_ratio=0, str pool_mode=\"avg\", bool aligned=True) -> Tensor",
    differentiable=True,
    autocast=True,
    example=lambda rng: (*_examples.feature(rng), [3, 2], 0.5, 2, "max", False),
)
def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True):
    """RoIAlign (Mask R-CNN) with MMCV's semantics and defaults.

    Args:
        input: [N, C, H, W] float16 / bfloat16 / float32 / float64 tensor: a torch.Tensor (any
            device dkit serves), a numpy.ndarray, or any CPU object with ``__dlpack__``. Any
            strides (channels-last, non-contiguous views) are read in place.
        boxes: Tensor[K, 5] of (batch_index, x1, y1, x2, y2), same dtype and device as input,
            or a list of Tensor[L, 4] (x1, y1, x2, y2), one per image (torchvision's
            convert_boxes_to_roi_format: list position = batch index).
        output_size: int or (height, width), positive and below 2^31 (MMCV's C int).
        spatial_scale: multiplies box coordinates to reach input coordinates (e.g. 0.25 for a
            stride-4 feature map).
        sampling_ratio: sampling points per bin along each axis; <= 0 means adaptive,
            ceil(roi_size / output_size) (MMCV's 0 and torchvision's -1 are the same). Must be
            >= -1 and below 2^31. A ratio r costs r^2 samples per output element.
        pool_mode: "avg" or "max". "max" bilinearly interpolates every sampling point and keeps
            the largest (MMCV); its backward sends the gradient to that point only.
        aligned: shift boxes by -0.5 pixel (Detectron2 / torchvision aligned=True). Without it,
            RoIs are at least 1x1. A bool (NumPy's bool and 0 / 1 are taken too).

    Returns:
        [K, C, output_size[0], output_size[1]] in the input's framework, device and dtype. For
        torch inputs that require grad (with grad mode on), the result is differentiable with
        respect to ``input`` (never ``boxes``), once: differentiating the gradient again raises
        DkitNotImplementedError. NumPy and generic DLPack inputs give a numpy.ndarray and no
        autograd. An infinite or NaN feature (or gradient) value reaches exactly the bins
        (input elements) whose samples read it, as in torchvision (whose CPU forward also lets
        pixel (0, 0) reach every bin with a sample outside the map).

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: wrong ndim, boxes of the wrong width, a non-positive output size (or
            one of 2^31 or more), sampling_ratio < -1 (or >= 2^31), an unknown pool_mode, a
            non-positive spatial_scale (or one that overflows or underflows float32, in which
            float16, bfloat16 and float32 inputs are computed), or a box with a NaN or infinite
            coordinate or one that overflows once scaled (torchvision silently returns zeros
            for those).
        DkitTypeError: boxes and input of different dtypes, a non-float input (named: "got
            int8"), non-integer sizes (a float tensor included), a spatial_scale that is not a
            number (a str included), an aligned that is not a bool (a str included), a
            quantized tensor.
        DkitBufferError: a tensor its producer cannot export (a big-endian NumPy array), or a
            malformed DLPack capsule (NULL data with elements, a NULL shape, an absurd ndim).
        DkitNotImplementedError: a meta tensor (torchvision raises NotImplementedError too).
        DkitIndexError: a batch index that is not an integer in [0, N).
        dkit errors naming both devices when input and boxes live on different devices.
    """
    tp = type(input)
    fw = _framework_of_type(tp)
    if fw is None:
        fw = framework(input, "input", OP)
    if tp is not fw.AS_IS:
        input = fw.as_tensor(input, "input", OP)
    if type(output_size) is int and 0 < output_size < _LIMIT:
        ph = pw = output_size
    elif type(output_size) is tuple and len(output_size) == 2:  # e.g. a layer's stored (ph, pw)
        ph, pw = output_size
        if not (type(ph) is int and type(pw) is int and 0 < ph < _LIMIT and 0 < pw < _LIMIT):
            ph, pw = output_size_pair(output_size)
    else:
        ph, pw = output_size_pair(output_size)
    if type(spatial_scale) is not float:
        spatial_scale = to_float(spatial_scale, "spatial_scale", OP)
    if type(sampling_ratio) is not int:
        sampling_ratio = to_int(sampling_ratio, "sampling_ratio", OP)
    mode = _POOL_MODES.get(pool_mode) if type(pool_mode) is str else None
    if mode is None:
        _bad_pool_mode(pool_mode)
    if aligned is not True and aligned is not False:
        aligned = to_bool(aligned, "aligned", OP)
    if type(boxes) is not fw.AS_IS:
        boxes = rois_of(fw, boxes, input)
    try:
        if fw.wants_grad(input):
            return fw.apply(ROI_ALIGN, input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
        return _pooled(fw, input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned)[0]
    except _C.DkitTypeError:
        cast = autocast_args(fw, input, boxes)  # Note [Autocast] in dkit/_ops/__init__.py
        if cast is None:
            raise
    out = roi_align(cast[0], cast[1], (ph, pw), spatial_scale, sampling_ratio, pool_mode, aligned)
    return fw.to_dtype(out, fw.dtype_name(input))


# ------------------------------------------------------------------------------------------
# Forward and backward, for every framework (Differentiable in dkit/_ops/__init__.py)


def argmax_dtype(fw, input):
    """The dtype (by name) of max pooling's argmax for this input, None meaning the input's own:
    float32 for 16-bit inputs, which cannot hold sample coordinates exactly."""
    return "float32" if fw.dtype_name(input) in _SIXTEEN_BIT else None


def _pooled(fw, input, rois, ph, pw, spatial_scale, sampling_ratio, mode, aligned):
    """(output, argmax_y, argmax_x): the forward kernel's results; the argmax are None in avg mode."""
    # Ranks and widths are checked by the core, which names the parameter; here K and C only
    # need to exist.
    try:
        shape = (rois.shape[0], input.shape[1], ph, pw)
    except IndexError:
        _shape_error(input, rois)
    out = fw.new_empty(input, shape)
    if mode:  # avg
        _forward_kernel(input, rois, out, None, None, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
        return out, None, None
    adtype = argmax_dtype(fw, input)
    argmax_y = fw.empty(input, shape, adtype)
    argmax_x = fw.empty(input, shape, adtype)
    _forward_kernel(input, rois, out, argmax_y, argmax_x, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
    return out, argmax_y, argmax_x


def _forward(fw, input, rois, ph, pw, spatial_scale, sampling_ratio, mode, aligned):
    """The differentiable forward: (output, argmax_y, argmax_x), the argmax empty in avg mode
    (a torch op returns tensors only, Note [dkit ops under torch.compile])."""
    out, argmax_y, argmax_x = _pooled(fw, input, rois, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
    if argmax_y is None:
        argmax_y, argmax_x = fw.empty(input, (0,), None), fw.empty(input, (0,), None)
    return out, argmax_y, argmax_x


def _saved(args, results):
    """What the backward reads: the rois, the argmax, the input's shape (not the input: its
    memory is freed as soon as nothing else needs it) and the scalars."""
    input, rois, ph, pw, spatial_scale, sampling_ratio, mode, aligned = args
    _, argmax_y, argmax_x = results
    return rois, argmax_y, argmax_x, tuple(input.shape), ph, pw, spatial_scale, sampling_ratio, mode, aligned


def _backward(fw, grad_output, rois, argmax_y, argmax_x, input_shape, ph, pw, spatial_scale, sampling_ratio, mode,
              aligned):  # fmt: skip
    """Gradient with respect to input only; boxes get None, as in torchvision and MMCV."""
    # The core overwrites all of grad_input (ops/roi_align.h), so no zeroing; grad_output may
    # have any strides (e.g. the expanded ones of .sum().backward()).
    grad_input = fw.new_empty(grad_output, tuple(input_shape))
    if mode:  # avg reads no argmax
        argmax_y = argmax_x = None
    _backward_kernel(
        grad_output, rois, argmax_y, argmax_x, grad_input, ph, pw, spatial_scale, sampling_ratio, mode, aligned
    )
    return (grad_input,)


ROI_ALIGN = Differentiable(
    OP,
    "RoIAlign",
    forward=_forward,
    saved=_saved,
    backward=_backward,
    results=1,
    forward_schema="(Tensor input, Tensor rois, int ph, int pw, float spatial_scale, int sampling_ratio, int mode, "
    "bool aligned) -> (Tensor, Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor rois, Tensor argmax_y, Tensor argmax_x, SymInt[] input_shape, int ph, "
    "int pw, float spatial_scale, int sampling_ratio, int mode, bool aligned) -> Tensor",
)


# ------------------------------------------------------------------------------------------
# Arguments: slow paths, layer checks, errors


def output_size_pair(output_size, op=OP):
    """(height, width) from an int or a pair, each positive and below 2^31."""
    ph, pw = to_pair(output_size, "output_size", op)
    if not (0 < ph < _LIMIT and 0 < pw < _LIMIT):
        raise _C.DkitValueError(f"{op}: output size must be positive and below 2^31, got ({ph}, {pw})")
    return ph, pw


def check_args(output_size, spatial_scale, sampling_ratio, pool_mode, aligned):
    """Every non-tensor argument of roi_align checked and normalised, by the core's rules (Note
    [Which checks are made where]): ((height, width), spatial_scale, sampling_ratio, pool_mode,
    aligned) as int pair, float, int, str, bool. For layers, at construction."""
    size = output_size_pair(output_size)
    spatial_scale = to_float(spatial_scale, "spatial_scale", OP)
    if not (spatial_scale > 0 and math.isfinite(spatial_scale)):
        raise _C.DkitValueError(f"{OP}: spatial_scale must be a positive finite number, got {spatial_scale!r}")
    sampling_ratio = to_int(sampling_ratio, "sampling_ratio", OP)
    if not -1 <= sampling_ratio < _LIMIT:
        raise _C.DkitValueError(
            f"{OP}: sampling_ratio must be >= -1 (<= 0 is adaptive) and below 2^31, got {sampling_ratio}"
        )
    if type(pool_mode) is not str or pool_mode not in _POOL_MODES:
        _bad_pool_mode(pool_mode)
    return size, spatial_scale, sampling_ratio, pool_mode, to_bool(aligned, "aligned", OP)


def _bad_pool_mode(pool_mode):
    raise _C.DkitValueError(f"{OP}: pool_mode must be 'avg' or 'max', got {pool_mode!r}")


def rois_of(fw, boxes, input, op=OP):
    """[K, 5] rois of the input's framework from whatever the caller gave as boxes."""
    if isinstance(boxes, (list, tuple)):
        parts = []
        for i, b in enumerate(boxes):
            what = f"boxes[{i}]"
            t = fw.as_tensor(b, what, op)
            if t is None:
                raise _C.DkitTypeError(f"{op}: {what} must be a tensor [L, 4] (x1, y1, x2, y2), got {type(b).__name__}")
            if len(t.shape) != 2 or t.shape[1] != 4:
                raise _C.DkitValueError(f"{op}: {what} must have shape [L, 4] (x1, y1, x2, y2), got {list(t.shape)}")
            parts.append(t)
        return fw.rois_from_boxes(parts, input)
    t = fw.as_tensor(boxes, "boxes", op)
    if t is None:
        raise _C.DkitTypeError(
            f"{op}: boxes must be a tensor [K, 5] (batch_index, x1, y1, x2, y2) or a list of tensors [L, 4], "
            f"got {type(boxes).__name__}"
        )
    return t


def _shape_error(input, rois):
    if len(input.shape) != 4:
        raise _C.DkitValueError(f"{OP}: 'input' must be 4-d [N, C, H, W], got {len(input.shape)} dimensions")
    raise _C.DkitValueError(
        f"{OP}: 'boxes' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got {list(rois.shape)}"
    )


# ------------------------------------------------------------------------------------------
# roi_align_rotated

ROTATED_OP = "roi_align_rotated"

_rotated_forward_kernel = _C.ops.roi_align_rotated_forward
_rotated_backward_kernel = _C.ops.roi_align_rotated_backward


def _rotated_example(rng):
    import numpy as np

    rois = np.array([[0, 6, 5, 8, 4, 0.3], [1, 4.5, 7, 5, 9, -1.2], [0, 11, 1, 3, 2, 2.5]], np.float32)
    return _examples.feature(rng)[0], rois, [3, 2], 0.5, 2, True, True


@torch_op(
    "roi_align_rotated(Tensor input, Tensor rois, int[2] output_size, float spatial_scale=1.0, "
    "int sampling_ratio=0, bool aligned=True, bool clockwise=False) -> Tensor",
    differentiable=True,
    autocast=True,
    example=_rotated_example,
)
def roi_align_rotated(input, rois, output_size, spatial_scale=1.0, sampling_ratio=0, aligned=True, clockwise=False):
    """RoIAlign on rotated boxes (mmcv.ops.roi_align_rotated; detectron2's ROIAlignRotated is
    aligned=True with angles in degrees): average pooling only.

    Args:
        input: [N, C, H, W] float16 / bfloat16 / float32 / float64 tensor (16-bit computed in
            float32): the frameworks, devices and strides roi_align takes.
        rois: Tensor[K, 6] of (batch_index, cx, cy, w, h, angle), the angle in radians,
            counterclockwise (as the image is displayed, y down: MMCV's convention); same dtype
            and device as input.
        output_size: int or (height, width), positive and below 2^31.
        spatial_scale: multiplies cx, cy, w and h to reach input coordinates.
        sampling_ratio: samples per bin along each axis; <= 0 means adaptive, ceil(size /
            output_size) in the box's own frame (MMCV's 0).
        aligned: shift the centre by -0.5 pixel (without it, boxes are at least 1 x 1).
        clockwise: the angles turn clockwise (they are negated).

    Returns:
        [K, C, output_size[0], output_size[1]] in the input's framework, device and dtype;
        differentiable with respect to input (never rois), once, with the same bits for any
        thread count and on every run (no atomics: ops/roi_align.h, roi_align_rotated_cpu.c).

    Raises:
        DkitValueError: wrong ndim, rois not [K, 6], a bad output size, sampling_ratio outside a
            C int, a non-positive spatial_scale, a non-finite box value.
        DkitTypeError: rois and input of different dtypes, a non-float input, non-integer sizes.
        DkitIndexError: a batch index that is not an integer in [0, N).
    """
    tp = type(input)
    fw = _framework_of_type(tp)
    if fw is None:
        fw = framework(input, "input", ROTATED_OP)
    if tp is not fw.AS_IS:
        input = fw.as_tensor(input, "input", ROTATED_OP)
    if type(output_size) is int and 0 < output_size < _LIMIT:
        ph = pw = output_size
    else:
        ph, pw = output_size_pair(output_size, ROTATED_OP)
    if type(spatial_scale) is not float:
        spatial_scale = to_float(spatial_scale, "spatial_scale", ROTATED_OP)
    if type(sampling_ratio) is not int:
        sampling_ratio = to_int(sampling_ratio, "sampling_ratio", ROTATED_OP)
    if aligned is not True and aligned is not False:
        aligned = to_bool(aligned, "aligned", ROTATED_OP)
    if clockwise is not True and clockwise is not False:
        clockwise = to_bool(clockwise, "clockwise", ROTATED_OP)
    if type(rois) is not fw.AS_IS:
        t = fw.as_tensor(rois, "rois", ROTATED_OP)
        if t is None:
            raise _C.DkitTypeError(
                f"{ROTATED_OP}: rois must be a tensor [K, 6] (batch_index, cx, cy, w, h, angle), "
                f"got {type(rois).__name__}"
            )
        rois = t
    try:
        if fw.wants_grad(input):
            return fw.apply(ROI_ALIGN_ROTATED, input, rois, ph, pw, spatial_scale, sampling_ratio, aligned, clockwise)
        return _rotated_forward(fw, input, rois, ph, pw, spatial_scale, sampling_ratio, aligned, clockwise)[0]
    except _C.DkitTypeError:
        cast = autocast_args(fw, input, rois)  # Note [Autocast] in dkit/_ops/__init__.py
        if cast is None:
            raise
    out = roi_align_rotated(cast[0], cast[1], (ph, pw), spatial_scale, sampling_ratio, aligned, clockwise)
    return fw.to_dtype(out, fw.dtype_name(input))


def _rotated_forward(fw, input, rois, ph, pw, spatial_scale, sampling_ratio, aligned, clockwise):
    """(output, an empty tensor): the second result only keeps forward's results a pair (as
    ps_roi_pool's)."""
    try:
        shape = (rois.shape[0], input.shape[1], ph, pw)
    except IndexError:  # ranks are the core's to check, and it names the parameter
        shape = (0, 0, ph, pw) if len(input.shape) < 2 else (0, input.shape[1], ph, pw)
    out = fw.new_empty(input, shape)
    _rotated_forward_kernel(input, rois, out, ph, pw, spatial_scale, sampling_ratio, aligned, clockwise)
    return out, fw.empty(input, (0,), None)


def _rotated_saved(args, results):
    """The rois, the input's shape (not the input: nothing reads its values) and the scalars."""
    input, rois, _, _, spatial_scale, sampling_ratio, aligned, clockwise = args
    return rois, tuple(input.shape), spatial_scale, sampling_ratio, aligned, clockwise


def _rotated_backward(fw, grad_output, rois, input_shape, spatial_scale, sampling_ratio, aligned, clockwise):
    """Gradient with respect to input only (MMCV's rois get None). The core writes all of
    grad_input, so nothing is zeroed here; grad_output may have any strides."""
    grad_input = fw.new_empty(grad_output, tuple(input_shape))
    _rotated_backward_kernel(grad_output, rois, grad_input, spatial_scale, sampling_ratio, aligned, clockwise)
    return (grad_input,)


ROI_ALIGN_ROTATED = Differentiable(
    ROTATED_OP,
    "RoIAlignRotated",
    forward=_rotated_forward,
    saved=_rotated_saved,
    backward=_rotated_backward,
    results=1,
    forward_schema="(Tensor input, Tensor rois, int ph, int pw, float spatial_scale, int sampling_ratio, "
    "bool aligned, bool clockwise) -> (Tensor, Tensor)",
    backward_schema="(Tensor grad_output, Tensor rois, SymInt[] input_shape, float spatial_scale, "
    "int sampling_ratio, bool aligned, bool clockwise) -> Tensor",
)
