"""torchvision.ops.roi_align / RoIAlign, roi_pool / RoIPool, ps_roi_pool / PSRoIPool,
ps_roi_align / PSRoIAlign, nms, batched_nms, the box-overlap functions (box_iou,
generalized_box_iou, distance_box_iou, complete_box_iou), sigmoid_focal_loss and deform_conv2d /
DeformConv2d, served by dkit.

Same signatures (annotations included), defaults (sampling_ratio=-1, aligned=False, eps=1e-7),
outputs and exception types as torchvision 0.14: malformed boxes raise AssertionError with
torchvision's messages, kernel-level checks raise RuntimeError subclasses; 1-d or 0-d boxes given
to a box-overlap function raise IndexError, as indexing them does in torchvision. See dkit.compat
for where dkit is stricter than torchvision.
"""

import math
from typing import List, Optional, Tuple, Union

import torch
import torch.fx
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2

from dkit import _C
from dkit._ops import box_iou as _box_iou
from dkit._ops.deform_conv import deform_conv2d as _deform_conv2d
from dkit._ops.focal_loss import sigmoid_focal_loss as _sigmoid_focal_loss
from dkit._ops.nms import batched_nms as _batched_nms
from dkit._ops.nms import nms as _nms
from dkit._ops.roi_align import roi_align as _roi_align
from dkit._ops.roi_pool import ps_roi_align as _ps_roi_align
from dkit._ops.roi_pool import ps_roi_pool as _ps_roi_pool
from dkit._ops.roi_pool import roi_pool as _roi_pool
from dkit.compat import DkitAssertionError

__all__ = [
    "roi_align",
    "RoIAlign",
    "roi_pool",
    "RoIPool",
    "ps_roi_pool",
    "PSRoIPool",
    "ps_roi_align",
    "PSRoIAlign",
    "nms",
    "batched_nms",
    "box_iou",
    "generalized_box_iou",
    "distance_box_iou",
    "complete_box_iou",
    "sigmoid_focal_loss",
    "deform_conv2d",
    "DeformConv2d",
]

_Tensor = torch.Tensor

# torchvision's check_roi_boxes_shape, for a list of boxes (the scripted branches spell it out:
# TorchScript reads no global str).
_LIST_SHAPE_MESSAGE = "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]"


def _roi_boxes_shape_error(boxes):
    """torchvision's check_roi_boxes_shape, as torch._assert (AssertionError) does it: the error
    to raise, or None when the boxes pass."""
    if isinstance(boxes, (list, tuple)):
        for b in boxes:
            shape = getattr(b, "shape", ())
            if len(shape) < 2 or shape[1] != 4:
                return DkitAssertionError(_LIST_SHAPE_MESSAGE)
    elif isinstance(boxes, torch.Tensor):
        if boxes.dim() < 2 or boxes.shape[1] != 5:
            return DkitAssertionError("The boxes tensor shape is not correct as Tensor[K, 5]")
    else:
        return DkitAssertionError("boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")
    return None


# Note [Compat under TorchScript]
# Every function and module here compiles with torch.jit.script, as torchvision's do, so that
# scriptable models (MultiScaleRoIAlign, Mask R-CNN's heads) switch to dkit by one import.
# dkit.ops' functions are TorchScript builtins of their torch ops (Note [dkit ops in torch] in
# dkit/_torch_library.py), so a body that calls them serves both: run eagerly, it calls
# dkit.ops; scripted, it calls torch.ops.dkit.<op>, whose kernel is that very function. nms,
# batched_nms and the box overlaps are one body each, written so. A function whose eager fast
# path needs what TorchScript cannot parse (roi_align here, for the try block of Note [Compat
# fast path]; several in dkit.compat.mmcv) is two branches instead: `if not _is_scripting():`
# holds the eager path, which TorchScript parses but does not compile (it drops a branch that
# is statically false; the branch may only hold syntax TorchScript parses, so the try block
# lives in a helper), and what follows is TorchScript: the library's own checks (torch._assert,
# AssertionError in eager and in script) and the call. _is_scripting is torch.jit.is_scripting
# itself, which TorchScript knows by identity (a builtin), read as one global instead of two
# attribute lookups per call. Each function is also registered with torch.fx.wrap, so that
# symbolic tracing records it as one call_function node, as torchvision's roi_align is.

# Note [Compat fast path]
# Code that switches to dkit by one import should get dkit.ops' speed, so a compat function adds
# a frame or two and one exact-type check to it, nothing else (roi_align: its frame, the
# helper's and the is_scripting test; callgrind counts ~1,100 instructions more than dkit.ops'
# ~35,000 for a tiny call, bench/bench_compat.py times it). torchvision checks the boxes' shape
# first, with an AssertionError. It refuses a tensor that has fewer than 2 dimensions or a
# second dimension other than 5, and dkit refuses every such tensor too (with a DkitError, in
# the core's check at the latest). So a plain torch.Tensor goes straight to dkit, and only when
# that fails are the boxes checked: malformed ones then raise torchvision's AssertionError
# instead of dkit's error, whatever else was wrong, as in torchvision. Anything else (lists,
# subclasses, other types) is checked first, as torchvision does. (A try block costs nothing
# in Python 3.11 unless it catches.) dkit.compat.mmcv does the same with MMCV's assertions.

_is_scripting = torch.jit.is_scripting


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
    if not _is_scripting():  # Note [Compat under TorchScript]
        return _roi_align_eager(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    # one call per type of boxes: TorchScript picks the op's overload by the refined type
    if isinstance(boxes, torch.Tensor):
        torch._assert(boxes.dim() >= 2 and boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
        return _roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)
    for b in boxes:
        torch._assert(
            b.dim() >= 2 and b.size(1) == 4,
            "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]",
        )
    return _roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)


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
        if not _is_scripting():
            a = self.__dict__  # Note [Module attributes in forward] in dkit/nn.py
            return roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["aligned"])
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned})"
        )


def _checked_eager(op, boxes, *args):
    """op(*args) (its boxes among them), with torchvision's AssertionError for malformed boxes
    (Note [Compat fast path])."""
    if type(boxes) is not _Tensor:
        error = _roi_boxes_shape_error(boxes)
        if error is not None:
            raise error
    try:
        return op(*args)
    except Exception:
        error = _roi_boxes_shape_error(boxes)
        if error is None:
            raise
    raise error


@torch.fx.wrap
def roi_pool(
    input: Tensor,
    boxes: Union[Tensor, List[Tensor]],
    output_size: BroadcastingList2[int],
    spatial_scale: float = 1.0,
) -> Tensor:
    """RoIPool, as torchvision.ops.roi_pool: torchvision's bins, values, argmax and gradients to
    the bit (see dkit.ops.roi_pool); float16 and bfloat16 too (computed in float32).

    Args:
        input (Tensor[N, C, H, W]): the feature maps.
        boxes (Tensor[K, 5] or List[Tensor[L, 4]]): (batch_index, x1, y1, x2, y2) rows, or one
            (x1, y1, x2, y2) tensor per image.
        output_size (int or Tuple[int, int]): (height, width) of the output.
        spatial_scale (float): maps box coordinates to input coordinates. Default: 1.0

    Returns:
        Tensor[K, C, output_size[0], output_size[1]]
    """
    if not _is_scripting():  # Note [Compat under TorchScript]
        return _checked_eager(_roi_pool, boxes, input, boxes, output_size, spatial_scale, "torchvision")
    if isinstance(boxes, torch.Tensor):
        torch._assert(boxes.dim() >= 2 and boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
        return _roi_pool(input, boxes, output_size, spatial_scale, "torchvision")
    for b in boxes:
        torch._assert(
            b.dim() >= 2 and b.size(1) == 4,
            "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]",
        )
    return _roi_pool(input, boxes, output_size, spatial_scale, "torchvision")


class RoIPool(nn.Module):
    """See :func:`roi_pool`."""

    def __init__(self, output_size: BroadcastingList2[int], spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


@torch.fx.wrap
def ps_roi_pool(input: Tensor, boxes: Tensor, output_size: int, spatial_scale: float = 1.0) -> Tensor:
    """Position-sensitive RoI pooling (R-FCN), as torchvision.ops.ps_roi_pool (see
    dkit.ops.ps_roi_pool: torchvision's values to the bit; its backward is the forward's own
    gradient, where torchvision's also reaches the map's last row and column).

    Args:
        input (Tensor[N, C, H, W]): the feature maps, C a multiple of output_size[0] * output_size[1].
        boxes (Tensor[K, 5] or List[Tensor[L, 4]]): as roi_pool's (a list eagerly only, as torchvision).
        output_size (int or Tuple[int, int]): (height, width) of the output.
        spatial_scale (float): maps box coordinates to input coordinates. Default: 1.0

    Returns:
        Tensor[K, C / (output_size[0] * output_size[1]), output_size[0], output_size[1]]
    """
    if not _is_scripting():  # Note [Compat under TorchScript]
        return _checked_eager(_ps_roi_pool, boxes, input, boxes, output_size, spatial_scale)
    torch._assert(boxes.dim() >= 2 and boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
    return _ps_roi_pool(input, boxes, [output_size, output_size], spatial_scale)


class PSRoIPool(nn.Module):
    """See :func:`ps_roi_pool`."""

    def __init__(self, output_size: int, spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale})"


@torch.fx.wrap
def ps_roi_align(
    input: Tensor,
    boxes: Tensor,
    output_size: int,
    spatial_scale: float = 1.0,
    sampling_ratio: int = -1,
) -> Tensor:
    """Position-sensitive RoIAlign, as torchvision.ops.ps_roi_align (see dkit.ops.ps_roi_align:
    torchvision's values and gradients, to the bit in float32 and float64; a bin with no samples
    is 0 where torchvision's is NaN); float16 and bfloat16 too (computed in float32).

    Args:
        input (Tensor[N, C, H, W]): the feature maps, C a multiple of output_size[0] * output_size[1].
        boxes (Tensor[K, 5] or List[Tensor[L, 4]]): as roi_pool's (a list eagerly only, as torchvision).
        output_size (int or Tuple[int, int]): (height, width) of the output.
        spatial_scale (float): maps box coordinates to input coordinates. Default: 1.0
        sampling_ratio (int): sampling points per bin along each axis; <= 0 is adaptive
            (ceil(roi_size / output_size)). Default: -1

    Returns:
        Tensor[K, C / (output_size[0] * output_size[1]), output_size[0], output_size[1]]
    """
    if not _is_scripting():  # Note [Compat under TorchScript]
        return _checked_eager(_ps_roi_align, boxes, input, boxes, output_size, spatial_scale, sampling_ratio)
    torch._assert(boxes.dim() >= 2 and boxes.size(1) == 5, "The boxes tensor shape is not correct as Tensor[K, 5]")
    return _ps_roi_align(input, boxes, [output_size, output_size], spatial_scale, sampling_ratio)


class PSRoIAlign(nn.Module):
    """See :func:`ps_roi_align`."""

    def __init__(self, output_size: int, spatial_scale: float, sampling_ratio: int):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return ps_roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio})"
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
    return _nms(boxes, scores, iou_threshold)  # Note [Compat under TorchScript]


@torch.fx.wrap
def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """torchvision.ops.batched_nms: NMS per category (idxs), indices in decreasing score order.

    Boxes of different categories never suppress each other. torchvision separates categories
    by shifting boxes (few boxes) or by one nms per category (many); dkit keeps them apart in
    one pass (dkit.ops.batched_nms), with the same indices in the same order.
    """
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    keep = _batched_nms(boxes, scores, idxs, iou_threshold)  # Note [Compat under TorchScript]
    if boxes.numel() > (4000 if boxes.device.type == "cpu" else 20000):
        return _order_of_equal_scores(keep, scores)
    return keep


# Note [torchvision's order of equal scores]
# dkit returns equal scores in index order. So does torchvision for few boxes; for more than 1000
# (CPU; 5000 elsewhere) it gathers the kept indices in ascending order and orders them with
# torch.sort(descending=True), which is not stable: equal scores then come in the order torch's
# sort leaves them, which depends on every kept score. On the CPU that sort is libstdc++'s
# std::sort, whose order of equal items follows from the values alone, so _C.torch_sort_ties_
# computes it from dkit's result without sorting and moves only the equal ones, in place (Note
# [torch's order of equal scores] in csrc/cpu/dk_std_sort.h; tests/python/test_nms.py checks it
# against torch.sort on every stack): one pass over the kept scores, and where two are equal a
# few more over the ranges that hold equal ones (bench/bench_compat.py has its cost). When no two
# kept scores are equal, dkit's order is torchvision's as it stands.
# Elsewhere (a GPU's sort is another algorithm) and under TorchScript (torch_sort_ties_ is not a
# torch op), torchvision's own steps run: a mask, the ascending indices, the sort, and only when a
# comparison over the kept scores finds two that are not strictly decreasing (NaN scores, which
# dkit puts first and which no comparison finds greater, count as equal: the check can only err
# towards the sort).


def _order_of_equal_scores(keep: Tensor, scores: Tensor) -> Tensor:
    """dkit's kept indices (decreasing score, equal scores by index) in torchvision's order for
    many boxes (Note [torchvision's order of equal scores])."""
    if not _is_scripting():
        if keep.device.type == "cpu":
            _C.torch_sort_ties_(keep, scores.detach())  # keep is ours: reordered in place
            return keep
    # index_select and index_fill_ where torchvision indexes tensors: the same results, from
    # torch's cheapest gather (a third of indexing's time on 20,000 scores) and scatter
    kept = scores.index_select(0, keep)
    if bool((kept[:-1] > kept[1:]).all()):
        return keep
    ascending = torch.where(torch.zeros_like(scores, dtype=torch.bool).index_fill_(0, keep, 1))[0]
    return ascending.index_select(0, scores.index_select(0, ascending).sort(descending=True)[1])


# ------------------------------------------------------------------------------------------
# Box overlaps (dkit/_ops/box_iou.py), one body each for eager calls and TorchScript (Note
# [Compat under TorchScript]). torchvision indexes the boxes first (boxes[:, 2]), which raises
# IndexError for boxes of fewer than 2 dimensions; dkit refuses those with a ValueError. Here
# the boxes' dimensions are read first anyway, to tell one pair of box sets from batches, so
# torchvision's IndexError is raised before dkit runs, at no further cost.


def _overlaps(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    """dkit.ops' box-overlap function named op, on boxes1 [..., N, 4] and boxes2 [..., M, 4]
    (Note [Batched box overlaps]), with torchvision's IndexError for boxes of fewer than two
    dimensions (a DkitIndexError: an IndexError and a RuntimeError, as dkit's errors are)."""
    d1, d2 = boxes1.dim(), boxes2.dim()
    if d1 == 2 and d2 == 2:
        return _pair(op, boxes1, boxes2, eps)
    if d1 < 2 or d2 < 2:
        raise _C.DkitIndexError(op + ": too many indices for tensor of dimension " + str(d1 if d1 < 2 else d2))
    return _batched(op, boxes1, boxes2, eps)


def _pair(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    # by name: TorchScript has no function values
    if op == "box_iou":
        return _box_iou.box_iou(boxes1, boxes2)
    if op == "generalized_box_iou":
        return _box_iou.generalized_box_iou(boxes1, boxes2)
    if op == "complete_box_iou":
        return _box_iou.complete_box_iou(boxes1, boxes2, eps)
    return _box_iou.distance_box_iou(boxes1, boxes2, eps)


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


def _batched(op: str, boxes1: Tensor, boxes2: Tensor, eps: float) -> Tensor:
    """Note [Batched box overlaps]: the leading dimensions broadcast, dkit's function per pair."""
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
        outs.append(_pair(op, b1[i], b2[i], eps))
    if pairs == 0:
        first = boxes1.reshape([-1, boxes1.size(-1)])[:0]
        return _pair(op, first, boxes2.reshape([-1, boxes2.size(-1)])[:0], eps).new_zeros(lead + [n, m])
    return torch.stack(outs).reshape(lead + [n, m])


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
    if fmt != "xyxy":
        boxes1, boxes2 = _corners(boxes1, fmt), _corners(boxes2, fmt)
    return _overlaps("box_iou", boxes1, boxes2, 0.0)


@torch.fx.wrap
def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Generalized IoU of every pair of boxes, as torchvision.ops.generalized_box_iou.

    Returns:
        Tensor[..., N, M]: the pairwise generalized IoU values
    """
    return _overlaps("generalized_box_iou", boxes1, boxes2, 0.0)


@torch.fx.wrap
def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU of every pair of boxes, as torchvision.ops.complete_box_iou.

    Args:
        eps (float, optional): small number to prevent division by zero. Default: 1e-7

    Returns:
        Tensor[..., N, M]: the pairwise complete IoU values
    """
    return _overlaps("complete_box_iou", boxes1, boxes2, eps)


@torch.fx.wrap
def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Distance IoU of every pair of boxes, as torchvision.ops.distance_box_iou.

    Args:
        eps (float, optional): small number to prevent division by zero. Default: 1e-7

    Returns:
        Tensor[..., N, M]: the pairwise distance IoU values
    """
    return _overlaps("distance_box_iou", boxes1, boxes2, eps)


# ------------------------------------------------------------------------------------------
# sigmoid_focal_loss (dkit/_ops/focal_loss.py), one body for eager calls and TorchScript. An
# unknown reduction raises torchvision 0.21's ValueError, with its text (torchvision 0.14
# returned the unreduced loss for it, silently). The targets are probabilities: integer targets
# fail as torchvision's do (with RuntimeError), and targets of another float dtype are computed
# with the inputs in the promoted dtype, as torchvision's composite computes them.


@torch.fx.wrap
def sigmoid_focal_loss(
    inputs: Tensor,
    targets: Tensor,
    alpha: float = 0.25,
    gamma: float = 2,
    reduction: str = "none",
) -> Tensor:
    """Loss used in RetinaNet for dense detection, as torchvision.ops.sigmoid_focal_loss (see
    dkit.ops.sigmoid_focal_loss: one kernel for the loss and one for its gradients, instead of a
    dozen torch ops each way; torchvision's values within float rounding, more exact where
    torchvision's 1 - p rounds to 0).

    Args:
        inputs (Tensor): A float tensor of arbitrary shape: the predictions for each example.
        targets (Tensor): A float tensor with the same shape as inputs: the binary
            classification label for each element in inputs (0 for the negative class and 1 for
            the positive class).
        alpha (float): Weighting factor in range (0, 1) to balance positive vs negative examples,
            or -1 for ignore. Default: ``0.25``.
        gamma (float): Exponent of the modulating factor (1 - p_t) to balance easy vs hard
            examples. Default: ``2``.
        reduction (string): ``'none'`` | ``'mean'`` | ``'sum'``. Default: ``'none'``.

    Returns:
        Loss tensor with the reduction option applied; differentiable with respect to inputs and
        (as torchvision's autograd) targets.
    """
    if reduction != "none" and reduction != "mean" and reduction != "sum":
        raise ValueError(
            "Invalid Value for arg 'reduction': '" + reduction + " \n Supported reduction modes: 'none', 'mean', 'sum'"
        )
    if not targets.is_floating_point():
        raise RuntimeError(
            "sigmoid_focal_loss: targets must be floating-point probabilities, got " + str(targets.dtype)
        )
    if targets.dtype != inputs.dtype:
        dtype = torch.promote_types(inputs.dtype, targets.dtype)
        inputs, targets = inputs.to(dtype), targets.to(dtype)
    return _sigmoid_focal_loss(inputs, targets, float(alpha), float(gamma), reduction)


# ------------------------------------------------------------------------------------------
# deform_conv2d


def _int_pair(v: Tuple[int, int]) -> List[int]:
    return [v[0], v[1]]


@torch.fx.wrap
def deform_conv2d(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: Tuple[int, int] = (1, 1),
    padding: Tuple[int, int] = (0, 0),
    dilation: Tuple[int, int] = (1, 1),
    mask: Optional[Tensor] = None,
) -> Tensor:
    """Deformable convolution v2 (v1 without ``mask``), as torchvision.ops.deform_conv2d (see
    dkit.ops.deform_conv2d: torchvision's values and its five gradients; float16 and bfloat16
    too, which torchvision refuses on a CPU; any batch in bounded memory).

    Args:
        input (Tensor[batch_size, in_channels, in_height, in_width]): input tensor
        offset (Tensor[batch_size, 2 * offset_groups * kernel_height * kernel_width, out_height, out_width]):
            offsets to be applied for each position in the convolution kernel.
        weight (Tensor[out_channels, in_channels // groups, kernel_height, kernel_width]): convolution weights,
            split into groups of size (in_channels // groups)
        bias (Tensor[out_channels]): optional bias of shape (out_channels,). Default: None
        stride (int or Tuple[int, int]): distance between convolution centers. Default: 1
        padding (int or Tuple[int, int]): height/width of padding of zeroes around
            each image. Default: 0
        dilation (int or Tuple[int, int]): the spacing between kernel elements. Default: 1
        mask (Tensor[batch_size, offset_groups * kernel_height * kernel_width, out_height, out_width]):
            masks to be applied for each position in the convolution kernel. Default: None

    Returns:
        Tensor[batch_sz, out_channels, out_h, out_w]: result of convolution
    """
    if not _is_scripting():  # Note [Compat under TorchScript]: ints or pairs, as torchvision's _pair
        return _deform_conv2d(input, offset, weight, bias, stride, padding, dilation, mask)
    return _deform_conv2d(
        input, offset, weight, bias, _int_pair(stride), _int_pair(padding), _int_pair(dilation), mask
    )


def _pair_of(v) -> Tuple[int, int]:
    """torchvision's _pair: an int n as (n, n), a pair as a tuple."""
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return (v, v)


class DeformConv2d(nn.Module):
    """See :func:`deform_conv2d`. torchvision's module: the same parameters, initialisation
    (Kaiming-uniform weights with a = sqrt(5), a uniform bias in +-1/sqrt(fan_in)), errors and
    repr."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair_of(kernel_size)
        self.stride = _pair_of(stride)
        self.padding = _pair_of(padding)
        self.dilation = _pair_of(dilation)
        self.groups = groups
        self.weight = nn.Parameter(
            torch.empty(out_channels, in_channels // groups, self.kernel_size[0], self.kernel_size[1])
        )
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor, offset: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """
        Args:
            input (Tensor[batch_size, in_channels, in_height, in_width]): input tensor
            offset (Tensor[batch_size, 2 * offset_groups * kernel_height * kernel_width, out_height, out_width]):
                offsets to be applied for each position in the convolution kernel.
            mask (Tensor[batch_size, offset_groups * kernel_height * kernel_width, out_height, out_width]):
                masks to be applied for each position in the convolution kernel.
        """
        return deform_conv2d(
            input,
            offset,
            self.weight,
            self.bias,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            mask=mask,
        )

    def __repr__(self) -> str:
        s = (
            f"{self.__class__.__name__}("
            f"{self.in_channels}"
            f", {self.out_channels}"
            f", kernel_size={self.kernel_size}"
            f", stride={self.stride}"
        )
        s += f", padding={self.padding}" if self.padding != (0, 0) else ""
        s += f", dilation={self.dilation}" if self.dilation != (1, 1) else ""
        s += f", groups={self.groups}" if self.groups != 1 else ""
        s += ", bias=False" if self.bias is None else ""
        s += ")"
        return s
