"""The torch side of dkit's ops: torch.empty outputs, torch.autograd, DLPack capsules.

Imported on the first torch tensor dkit sees (see _tensors.py), so `import dkit` never imports
torch. Scalars arrive already normalised by dkit.ops.

Note [Tensors go to dkit._C as they are]
dkit._C reads a CPU torch.Tensor directly (shape, strides, dtype, data pointer; see Note [torch
fast path] in csrc/python/dk_pydlpack.c), which is cheaper than any DLPack capsule torch 1.13
can make, and accepts inputs that require grad without a .detach(). Other devices go through
the DLPack protocol inside _C. The tensors stay referenced by this frame for the whole call.
Outputs are always fresh tensors that do not require grad, so _C may write them.
"""

import torch
from torch.autograd.function import once_differentiable

from dkit import _C

FRAMEWORK = "torch"

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_FLOAT32 = torch.float32
_SIXTEEN_BIT = (torch.float16, torch.bfloat16)

_roi_align_forward = _C.ops.roi_align_forward
_roi_align_backward = _C.ops.roi_align_backward


# ------------------------------------------------------------------------------------------
# roi_align


def roi_align(input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned):
    if type(boxes) is not _Tensor:
        boxes = _rois_from_boxes(boxes, input)
    if input.requires_grad and _grad_enabled():
        return _RoIAlignFunction.apply(input, boxes, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
    # Ranks and widths are validated by the core (ops/roi_align.c), which names the parameter;
    # here K and C only need to exist.
    try:
        out = input.new_empty((boxes.shape[0], input.shape[1], ph, pw))
    except IndexError:
        _shape_error(input.shape, boxes.shape)
    if mode:  # avg
        _roi_align_forward(input, boxes, out, None, None, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
    else:
        _forward_max(input, boxes, out, ph, pw, spatial_scale, sampling_ratio, aligned)
    return out


def _forward_max(input, rois, out, ph, pw, spatial_scale, sampling_ratio, aligned):
    """Max mode; returns (argmax_y, argmax_x) for backward."""
    # Argmax holds sample coordinates; 16 bits cannot hold them exactly (ops/roi_align.h).
    adtype = _FLOAT32 if input.dtype in _SIXTEEN_BIT else input.dtype
    argmax_y = out.new_empty(out.shape, dtype=adtype)
    argmax_x = out.new_empty(out.shape, dtype=adtype)
    _roi_align_forward(input, rois, out, argmax_y, argmax_x, ph, pw, spatial_scale, sampling_ratio, 0, aligned)
    return argmax_y, argmax_x


class _RoIAlignFunction(torch.autograd.Function):
    """Gradient with respect to input only; boxes get None, like torchvision and MMCV."""

    @staticmethod
    def forward(ctx, input, rois, ph, pw, spatial_scale, sampling_ratio, mode, aligned):
        try:
            out = input.new_empty((rois.shape[0], input.shape[1], ph, pw))
        except IndexError:
            _shape_error(input.shape, rois.shape)
        if mode:
            _roi_align_forward(input, rois, out, None, None, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
            ctx.save_for_backward(rois)
        else:
            argmax_y, argmax_x = _forward_max(input, rois, out, ph, pw, spatial_scale, sampling_ratio, aligned)
            ctx.save_for_backward(rois, argmax_y, argmax_x)
        ctx.dkit_args = (input.shape, ph, pw, spatial_scale, sampling_ratio, mode, aligned)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        input_shape, ph, pw, spatial_scale, sampling_ratio, mode, aligned = ctx.dkit_args
        saved = ctx.saved_tensors
        # The core overwrites all of grad_input (ops/roi_align.h), so no zeroing; grad_output
        # may have any strides (e.g. the expanded ones of .sum().backward()).
        grad_input = grad_output.new_empty(input_shape)
        if mode:
            argmax_y = argmax_x = None
        else:
            argmax_y, argmax_x = saved[1], saved[2]
        _roi_align_backward(
            grad_output, saved[0], argmax_y, argmax_x, grad_input, ph, pw, spatial_scale, sampling_ratio, mode, aligned
        )
        return grad_input, None, None, None, None, None, None, None


# ------------------------------------------------------------------------------------------
# Boxes


def _rois_from_boxes(boxes, input):
    """Tensor[K, 5] from a list of Tensor[L, 4] (torchvision's convert_boxes_to_roi_format), or
    from any other tensor-like the core can read."""
    if isinstance(boxes, _Tensor):  # a subclass, e.g. nn.Parameter
        return boxes
    if isinstance(boxes, (list, tuple)):
        if not boxes:
            return input.new_empty((0, 5))
        parts = []
        for i, b in enumerate(boxes):
            if not isinstance(b, _Tensor):
                b = _as_tensor(b, f"boxes[{i}]")
            if b.dim() != 2 or b.shape[1] != 4:
                raise _C.DkitValueError(
                    f"roi_align: boxes[{i}] must have shape [L, 4] (x1, y1, x2, y2), got {list(b.shape)}"
                )
            parts.append(torch.cat((torch.full_like(b[:, :1], i), b), dim=1))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return _as_tensor(boxes, "boxes")


def _as_tensor(x, what):
    if hasattr(type(x), "__dlpack__"):
        return torch.from_dlpack(x)  # zero copy; the core checks its device against input's
    raise _C.DkitTypeError(
        f"roi_align: {what} must be a Tensor[K, 5] or a list of Tensor[L, 4], got {type(x).__name__}"
    )


def _shape_error(ishape, bshape):
    if len(ishape) != 4:
        raise _C.DkitValueError(f"roi_align: 'input' must be 4-d [N, C, H, W], got {len(ishape)} dimensions")
    raise _C.DkitValueError(
        f"roi_align: 'boxes' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got {list(bshape)}"
    )
