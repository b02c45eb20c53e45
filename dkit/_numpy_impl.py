"""The NumPy side of dkit's ops: numpy.empty outputs, no autograd.

Also serves every other DLPack producer (DLPACK below): its tensors are viewed as NumPy arrays
with numpy.from_dlpack (zero copy) and the result is a numpy.ndarray. That limits them to the
CPU and to NumPy's dtypes (no bfloat16): dkit cannot allocate memory for a framework it does not
know. Torch tensors never come here; they have their own module.

Note [Read-only arrays]
NumPy (before DLPack 1.0 support) refuses to export a read-only array, because the legacy
protocol cannot say "read-only". The core only reads input and boxes, so a read-only input or
boxes array is copied once here; outputs are always fresh, writable arrays.
"""

import types

import numpy as np

from dkit import _C

FRAMEWORK = "numpy"

_roi_align_forward = _C.ops.roi_align_forward
_ndarray = np.ndarray
_SIXTEEN_BIT = (np.dtype(np.float16),)


def roi_align(input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned):
    if type(boxes) is not _ndarray:
        boxes = _rois_from_boxes(boxes, input)
    if not input.flags.writeable:
        input = input.copy()
    if not boxes.flags.writeable:
        boxes = boxes.copy()
    if input.ndim != 4:
        raise _C.DkitValueError(f"roi_align: 'input' must be 4-d [N, C, H, W], got {input.ndim} dimensions")
    if boxes.ndim != 2 or boxes.shape[1] != 5:
        raise _C.DkitValueError(
            f"roi_align: 'boxes' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got {list(boxes.shape)}"
        )
    shape = (boxes.shape[0], input.shape[1], ph, pw)
    out = np.empty(shape, dtype=input.dtype)
    if mode:  # avg
        argmax_y = argmax_x = None
    else:
        adtype = np.float32 if input.dtype in _SIXTEEN_BIT else input.dtype
        argmax_y = np.empty(shape, dtype=adtype)
        argmax_x = np.empty(shape, dtype=adtype)
    _roi_align_forward(input, boxes, out, argmax_y, argmax_x, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
    return out


def _rois_from_boxes(boxes, input):
    if isinstance(boxes, _ndarray):
        return boxes
    if isinstance(boxes, (list, tuple)):
        if not boxes:
            return np.empty((0, 5), dtype=input.dtype)
        parts = []
        for i, b in enumerate(boxes):
            b = _as_array(b, f"boxes[{i}]")
            if b.ndim != 2 or b.shape[1] != 4:
                raise _C.DkitValueError(
                    f"roi_align: boxes[{i}] must have shape [L, 4] (x1, y1, x2, y2), got {list(b.shape)}"
                )
            parts.append(np.concatenate((np.full((b.shape[0], 1), i, dtype=b.dtype), b), axis=1))
        return np.concatenate(parts, axis=0)
    return _as_array(boxes, "boxes")


def _as_array(x, what):
    if isinstance(x, _ndarray):
        return x
    if hasattr(type(x), "__dlpack__"):
        return _from_dlpack(x, what)
    raise _C.DkitTypeError(
        f"roi_align: {what} must be an array [K, 5] or a list of arrays [L, 4], got {type(x).__name__}"
    )


# DLPack device types whose memory the host can read: CPU, CUDA host, ROCm host, CUDA managed.
_HOST_DEVICES = (1, 3, 11, 13)


def _from_dlpack(x, what):
    device = getattr(x, "__dlpack_device__", None)
    if device is not None and device()[0] not in _HOST_DEVICES:
        raise _C.DkitBufferError(
            f"roi_align: {what} ({type(x).__name__}) lives on DLPack device {tuple(device())}; dkit allocates "
            f"outputs with torch for torch tensors and with NumPy otherwise, so other frameworks' tensors "
            f"must be on the CPU"
        )
    try:
        return np.from_dlpack(x)
    except (RuntimeError, TypeError, BufferError, ValueError) as e:
        raise _C.DkitBufferError(
            f"roi_align: cannot read {what} ({type(x).__name__}) as a CPU array through DLPack: {e}. "
            f"dkit allocates outputs with torch for torch tensors and with NumPy otherwise, "
            f"so other frameworks' tensors must be on the CPU and in a NumPy dtype"
        ) from e


def _roi_align_dlpack(input, boxes, *args):
    return roi_align(_from_dlpack(input, "input"), boxes, *args)


# Serves any DLPack producer other than torch and NumPy, through NumPy.
DLPACK = types.SimpleNamespace(FRAMEWORK="dlpack", roi_align=_roi_align_dlpack)
