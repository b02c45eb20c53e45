"""torchvision.ops.roi_align / RoIAlign, nms, batched_nms and the box-overlap functions
(box_iou, generalized_box_iou, distance_box_iou, complete_box_iou), served by dkit.

Same signatures (annotations included), defaults (sampling_ratio=-1, aligned=False, eps=1e-7),
outputs and exception types as torchvision 0.14: malformed boxes raise AssertionError with
torchvision's messages, kernel-level checks raise RuntimeError subclasses; 1-d or 0-d boxes given
to a box-overlap function raise IndexError, as indexing them does in torchvision. See dkit.compat
for where dkit is stricter than torchvision.
"""

from typing import List, Union

import torch
import torch.fx
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2

from dkit import _C
from dkit._ops import box_iou as _box_iou
from dkit._ops.nms import batched_nms as _batched_nms
from dkit._ops.nms import nms as _nms
from dkit._ops.roi_align import roi_align as _roi_align
from dkit.compat import DkitAssertionError

__all__ = [
    "roi_align",
    "RoIAlign",
    "nms",
    "batched_nms",
    "box_iou",
    "generalized_box_iou",
    "distance_box_iou",
    "complete_box_iou",
]

_Tensor = torch.Tensor


def _roi_boxes_shape_error(boxes):
    """torchvision's check_roi_boxes_shape, as torch._assert (AssertionError) does it: the error
    to raise, or None when the boxes pass."""
    if isinstance(boxes, (list, tuple)):
        for b in boxes:
            shape = getattr(b, "shape", ())
            if len(shape) < 2 or shape[1] != 4:
                return DkitAssertionError("The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]")
    elif isinstance(boxes, torch.Tensor):
        if boxes.dim() < 2 or boxes.shape[1] != 5:
            return DkitAssertionError("The boxes tensor shape is not correct as Tensor[K, 5]")
    else:
        return DkitAssertionError("boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")
    return None


# Note [Compat under TorchScript]
# Every function and module here compiles with torch.jit.script, as torchvision's do, so that
# scriptable models (MultiScaleRoIAlign, Mask R-CNN's heads) switch to dkit by one import. Each
# body is two branches: `if not torch.jit.is_scripting():` holds the eager fast path, which
# TorchScript parses but does not compile (it drops a branch that is statically false; the
# branch may only hold syntax TorchScript parses, so a path that needs try/except calls a
# helper), and what follows it is TorchScript: torchvision's own checks (torch._assert, AssertionError in eager and in
# script) and a call of the torch op, torch.ops.dkit.<op> (Note [dkit ops in torch] in
# dkit/_torch_library.py), whose kernel is the very dkit.ops function that the eager branch
# calls. Each function is also registered with torch.fx.wrap, so that symbolic tracing records
# it as one call_function node, as torchvision's roi_align is.

# Note [Compat fast path]
# Code that switches to dkit by one import should get dkit.ops' speed, so a compat function adds
# one frame and one exact-type check to it, nothing else. torchvision checks the boxes' shape
# first, with an AssertionError. It refuses a tensor that has fewer than 2 dimensions or a
# second dimension other than 5, and dkit refuses every such tensor too (with a DkitError, in
# the core's check at the latest). So a plain torch.Tensor goes straight to dkit, and only when
# that fails are the boxes checked: malformed ones then raise torchvision's AssertionError
# instead of dkit's error, whatever else was wrong, as in torchvision. Anything else (lists,
# subclasses, other types) is checked first, as torchvision does. (A try block costs nothing
# in Python 3.11 unless it catches.) dkit.compat.mmcv does the same with MMCV's assertions.


def _roi_align_eager(input, boxes, output_size, spatial_scale, sampling_ratio, aligned):
    if type(boxes) is not _Tensor:
        error = _roi_boxes_shape_error(boxes)
        if error is not None:
            raise error
    try:
        return _roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)
    except Exception:
        error = _roi_boxes_shape_error(boxes)  # Note [Compat fast path]
        if error is None:
            raise
    raise error


@torch.fx.wrap
def roi_align(
    input: Tensor,
    boxes: Union[Tensor, List[Tensor]],
    output_size: BroadcastingList2[int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = -1,
    aligned: bool = False,
) -> Tensor:
    """RoIAlign with average pooling, as torchvision.ops.roi_align (see dkit.ops.roi_align).

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        boxes (Tensor[K, 5] or List[Tensor[L, 4]]): (batch_index, x1, y1, x2, y2) rows, or one
            (x1, y1, x2, y2) tensor per image.
        output_size (int or Tuple[int, int]): (height, width) of the output.
        spatial_scale (float): maps box coordinates to input coordinates. Default: 1.0
        sampling_ratio (int): sampling points per bin along each axis; <= 0 is adaptive
            (ceil(roi_size / output_size)). Default: -1
        aligned (bool): shift boxes by -0.5 pixel. Default: False

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]
    """
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript]
        return _roi_align_eager(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    if isinstance(boxes, torch.Tensor):
        torch._assert(boxes.dim() >= 2 and boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
        return torch.ops.dkit.roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)
    for b in boxes:
        torch._assert(
            b.dim() >= 2 and b.size(1) == 4, "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]"
        )
    return torch.ops.dkit.roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)


class RoIAlign(nn.Module):
    """See :func:`roi_align`."""

    def __init__(
        self,
        output_size: BroadcastingList2[int],
        spatial_scale: float,
        sampling_ratio: int,
        aligned: bool = False,
    ):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        if not torch.jit.is_scripting():
            a = self.__dict__  # Note [Module attributes in forward] in dkit/nn.py
            return roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["aligned"])
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned})"
        )


@torch.fx.wrap
def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """torchvision.ops.nms: indices (int64) of the boxes kept, in decreasing score order.

    Args:
        boxes (Tensor[N, 4]): (x1, y1, x2, y2) with 0 <= x1 < x2 and 0 <= y1 < y2.
        scores (Tensor[N]): a score per box.
        iou_threshold (float): discards every box whose IoU with a kept, higher-scoring box is
            greater than this.

    Unlike torchvision 0.14 on the CPU, float16 and bfloat16 boxes are served (computed in
    float32). See dkit.ops.nms for NaN, infinite and empty boxes.
    """
    if not torch.jit.is_scripting():
        return _nms(boxes, scores, iou_threshold)
    return torch.ops.dkit.nms(boxes, scores, iou_threshold)


@torch.fx.wrap
def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """torchvision.ops.batched_nms: NMS per category (idxs), indices in decreasing score order.

    Boxes of different categories never suppress each other. torchvision separates categories
    by shifting boxes (few boxes) or by one nms per category (many); dkit keeps them apart in
    one pass (dkit.ops.batched_nms), with the same indices in the same order.
    """
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    if not torch.jit.is_scripting():
        keep = _batched_nms(boxes, scores, idxs, iou_threshold)
    else:
        keep = torch.ops.dkit.batched_nms(boxes, scores, idxs, iou_threshold)
    # Note [torchvision's order of equal scores]
    # dkit returns equal scores in index order. So does torchvision for few boxes; for more than
    # 1000 (CPU; 5000 elsewhere) it gathers the kept indices in ascending order and orders them
    # with torch.sort(descending=True), which is not stable: equal scores then come in the order
    # torch's sort leaves them. The same kept set gets the same treatment here when it has equal
    # scores, so that the indices are identical.
    if boxes.numel() > (4000 if boxes.device.type == "cpu" else 20000) and len(keep) > 1:
        kept_scores = scores[keep]
        if bool((kept_scores[1:] == kept_scores[:-1]).any()):
            keep = keep.sort()[0]
            keep = keep[scores[keep].sort(descending=True)[1]]
    return keep


# ------------------------------------------------------------------------------------------
# Box overlaps (dkit/_ops/box_iou.py). torchvision indexes the boxes first (boxes[:, 2]), which
# raises IndexError for boxes of fewer than 2 dimensions; dkit refuses those with a ValueError,
# turned into torchvision's IndexError here, once dkit has failed (Note [Compat fast path]).


def _script_box_index_check(op: str, boxes1: Tensor, boxes2: Tensor):
    """_box_index_error's IndexError, in a TorchScript branch (Note [Scripted errors] in
    dkit/compat/mmcv.py)."""
    for b in (boxes1, boxes2):
        if b.dim() < 2:
            raise IndexError(op + ": too many indices for tensor of dimension " + str(b.dim()))


def _box_index_error(op, *boxes):
    for b in boxes:
        shape = getattr(b, "shape", None)
        if shape is not None and len(shape) < 2:
            return _C.DkitIndexError(f"{op}: too many indices for tensor of dimension {len(shape)}")
    return None


def _overlaps(fn, boxes1, boxes2, *args):
    """dkit's box-overlap function fn, with torchvision's IndexError for boxes of fewer than two
    dimensions (which torchvision indexes before anything else), found only when dkit refuses
    the call (Note [Compat fast path]); batches of boxes as Note [Batched box overlaps]."""
    if boxes1.dim() > 2 or boxes2.dim() > 2:  # not the hot path: the scripted branch's code serves
        return _script_batched(fn.__name__, boxes1, boxes2, *(args or (0.0,)))
    try:
        return fn(boxes1, boxes2, *args)
    except Exception:
        error = _box_index_error(fn.__name__, boxes1, boxes2)
        if error is None:
            raise
    raise error


# Note [Batched box overlaps]
# torchvision 0.23 and later take boxes1 [..., N, 4] and boxes2 [..., M, 4], whose leading
# dimensions broadcast, and return [..., N, M]; box_iou also takes fmt ("xyxy", "xywh" or
# "cxcywh"). dkit's kernels take one [N, 4] x [M, 4] pair, so the compat functions broadcast the
# leading dimensions, call the kernel per pair and stack the results; other formats are turned
# into corners first (so their values are torchvision's within rounding, where "xyxy" boxes give
# its bits). Boxes of fewer than two dimensions keep torchvision 0.14-0.22's IndexError (a
# single box of shape [4] is not a set of boxes; later torchvisions broadcast it as one).
# The functions take the newer signatures on every torchvision: a call written for an older
# one means the same here.


def _script_batched(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    """Note [Batched box overlaps]: the leading dimensions broadcast, the dkit op by name per pair
    (eagerly too: one piece of code for both branches)."""
    lead: List[int] = list(
        torch.broadcast_tensors(boxes1.new_zeros(boxes1.shape[:-2]), boxes2.new_zeros(boxes2.shape[:-2]))[0].shape
    )
    n, m, pairs = boxes1.size(-2), boxes2.size(-2), 1
    for d in lead:
        pairs *= d
    b1 = boxes1.expand(lead + [n, boxes1.size(-1)]).reshape([pairs, n, boxes1.size(-1)])
    b2 = boxes2.expand(lead + [m, boxes2.size(-1)]).reshape([pairs, m, boxes2.size(-1)])
    outs: List[Tensor] = []
    for i in range(pairs):
        outs.append(_script_pair(op, b1[i], b2[i], eps))
    if pairs == 0:
        first = boxes1.reshape([-1, boxes1.size(-1)])[:0]
        return _script_pair(op, first, boxes2.reshape([-1, boxes2.size(-1)])[:0], eps).new_zeros(lead + [n, m])
    return torch.stack(outs).reshape(lead + [n, m])


def _script_pair(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    if op == "box_iou":
        return torch.ops.dkit.box_iou(boxes1, boxes2)
    if op == "generalized_box_iou":
        return torch.ops.dkit.generalized_box_iou(boxes1, boxes2)
    if op == "complete_box_iou":
        return torch.ops.dkit.complete_box_iou(boxes1, boxes2, eps)
    return torch.ops.dkit.distance_box_iou(boxes1, boxes2, eps)


def _script_overlaps(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    _script_box_index_check(op, boxes1, boxes2)
    if boxes1.dim() > 2 or boxes2.dim() > 2:
        return _script_batched(op, boxes1, boxes2, eps)
    return _script_pair(op, boxes1, boxes2, eps)


def _corners(boxes: Tensor, fmt: str) -> Tensor:
    """(x1, y1, x2, y2) boxes from torchvision's "xyxy", "xywh" or "cxcywh" ones."""
    if fmt == "xywh":
        return torch.cat([boxes[..., :2], boxes[..., :2] + boxes[..., 2:]], -1)
    if fmt == "cxcywh":
        return torch.cat([boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2], -1)
    if fmt != "xyxy":
        raise ValueError("Unsupported Box IoU Calculation for given format " + fmt + ".")
    return boxes


@torch.fx.wrap
def box_iou(boxes1: Tensor, boxes2: Tensor, fmt: str = "xyxy") -> Tensor:
    """Intersection over union of every pair of boxes, as torchvision.ops.box_iou (see
    dkit.ops.box_iou).

    Args:
        boxes1 (Tensor[..., N, 4]): first set of boxes
        boxes2 (Tensor[..., M, 4]): second set of boxes
        fmt (str): "xyxy" (x1, y1, x2, y2; the default), "xywh" or "cxcywh" (Note [Batched box
            overlaps])

    Returns:
        Tensor[..., N, M]: the pairwise IoU values
    """
    if not torch.jit.is_scripting():
        if fmt != "xyxy":
            boxes1, boxes2 = _corners(boxes1, fmt), _corners(boxes2, fmt)
        return _overlaps(_box_iou.box_iou, boxes1, boxes2)
    if fmt != "xyxy":
        boxes1, boxes2 = _corners(boxes1, fmt), _corners(boxes2, fmt)
    return _script_overlaps("box_iou", boxes1, boxes2, 0.0)


@torch.fx.wrap
def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Generalized IoU of every pair of boxes, as torchvision.ops.generalized_box_iou.

    Returns:
        Tensor[..., N, M]: the pairwise generalized IoU values
    """
    if not torch.jit.is_scripting():
        return _overlaps(_box_iou.generalized_box_iou, boxes1, boxes2)
    return _script_overlaps("generalized_box_iou", boxes1, boxes2, 0.0)


@torch.fx.wrap
def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU of every pair of boxes, as torchvision.ops.complete_box_iou.

    Args:
        eps (float, optional): small number to prevent division by zero. Default: 1e-7

    Returns:
        Tensor[..., N, M]: the pairwise complete IoU values
    """
    if not torch.jit.is_scripting():
        return _overlaps(_box_iou.complete_box_iou, boxes1, boxes2, eps)
    return _script_overlaps("complete_box_iou", boxes1, boxes2, eps)


@torch.fx.wrap
def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Distance IoU of every pair of boxes, as torchvision.ops.distance_box_iou.

    Args:
        eps (float, optional): small number to prevent division by zero. Default: 1e-7

    Returns:
        Tensor[..., N, M]: the pairwise distance IoU values
    """
    if not torch.jit.is_scripting():
        return _overlaps(_box_iou.distance_box_iou, boxes1, boxes2, eps)
    return _script_overlaps("distance_box_iou", boxes1, boxes2, eps)
