"""dkit.ops: the operators, framework-neutral.

Each function normalises its scalar arguments here, once, then hands over to the implementation
for the input's framework (see Note [Outputs belong to the input's framework] in _tensors.py),
which allocates the outputs and calls the C op through dkit._C.

Note [The fast path]
A tiny roi_align call costs a few microseconds in C, so Python overhead decides its speed. The
common case (int output_size, float spatial_scale, int sampling_ratio, str pool_mode, bool
aligned, torch tensors, no grad) therefore takes exact-type checks only: no isinstance chains,
no imports, no keyword shuffling. Everything unusual falls to the _slow helpers, which also
produce the error messages.
"""

import operator as _operator

from dkit import _C
from dkit._tensors import impl_for as _impl_for

__all__ = ["roi_align"]

# MMCV's numbering, as ops/roi_align.h.
_POOL_MODES = {"max": 0, "avg": 1}

# type(input) -> the framework's roi_align (see _tensors.py): one dict lookup per call.
_ROI_ALIGN_IMPLS = {}


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
            RoIs are at least 1x1.

    Returns:
        [K, C, output_size[0], output_size[1]] in the input's framework, device and dtype. For
        torch inputs that require grad (with grad mode on), the result is differentiable with
        respect to ``input`` (never ``boxes``). NumPy and generic DLPack inputs give a
        numpy.ndarray and no autograd. An infinite or NaN feature (or gradient) value reaches
        exactly the bins (input elements) whose samples read it, as in torchvision (whose CPU
        forward also lets pixel (0, 0) reach every bin with a sample outside the map).

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: wrong ndim, boxes of the wrong width, a non-positive output size (or
            one of 2^31 or more), sampling_ratio < -1 (or >= 2^31), an unknown pool_mode, a
            non-positive spatial_scale, or a box with a NaN or infinite coordinate (torchvision
            silently returns zeros for those).
        DkitTypeError: boxes and input of different dtypes, a non-float input, non-integer
            sizes.
        DkitIndexError: a batch index that is not an integer in [0, N).
        dkit errors naming both devices when input and boxes live on different devices.
    """
    impl = _ROI_ALIGN_IMPLS.get(type(input))
    if impl is None:
        impl = _ROI_ALIGN_IMPLS[type(input)] = _impl_for(input).roi_align
    if type(output_size) is int and 0 < output_size < 2**31:
        ph = pw = output_size
    else:
        ph, pw = _output_size_slow(output_size)
    if type(spatial_scale) is not float:
        spatial_scale = _float_slow(spatial_scale, "spatial_scale")
    if type(sampling_ratio) is not int:
        sampling_ratio = _int_slow(sampling_ratio, "sampling_ratio")
    mode = _POOL_MODES.get(pool_mode) if type(pool_mode) is str else None
    if mode is None:
        _bad_pool_mode(pool_mode)
    if aligned is not True and aligned is not False:
        aligned = bool(aligned)
    return impl(input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned)


# ------------------------------------------------------------------------------------------
# Slow paths: unusual argument types, and the errors.


def _output_size_slow(output_size, op="roi_align"):
    if type(output_size) is bool:
        raise _C.DkitTypeError(f"{op}: output_size must be an int or a pair of ints, got {output_size!r}")
    try:
        n = _operator.index(output_size)
        pair = (n, n)
    except TypeError:
        try:
            items = tuple(output_size)
        except TypeError:
            raise _C.DkitTypeError(
                f"{op}: output_size must be an int or a pair of ints, got {type(output_size).__name__}"
            ) from None
        if len(items) != 2:
            raise _C.DkitValueError(
                f"{op}: output_size must be an int or a pair (height, width), got {len(items)} values"
            ) from None
        try:
            if any(type(v) is bool for v in items):
                raise TypeError
            pair = (_operator.index(items[0]), _operator.index(items[1]))
        except TypeError:
            raise _C.DkitTypeError(f"{op}: output_size must hold ints, got {output_size!r}") from None
    if not (0 < pair[0] < 2**31 and 0 < pair[1] < 2**31):  # the core's bounds (ops/roi_align.c)
        raise _C.DkitValueError(f"{op}: output size must be positive and below 2^31, got ({pair[0]}, {pair[1]})")
    return pair


def _float_slow(value, name, op="roi_align"):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _C.DkitTypeError(f"{op}: {name} must be a number, got {type(value).__name__}") from None


def _int_slow(value, name, op="roi_align"):
    if type(value) is bool:
        raise _C.DkitTypeError(f"{op}: {name} must be an int, got {value!r}")
    try:
        return _operator.index(value)
    except TypeError:
        raise _C.DkitTypeError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r}") from None


def _bad_pool_mode(pool_mode, op="roi_align"):
    raise _C.DkitValueError(f"{op}: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
