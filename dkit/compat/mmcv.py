"""mmcv.ops.roi_align / RoIAlign, roi_pool / RoIPool, nms, soft_nms, batched_nms, nms_match,
box_iou_rotated, nms_rotated, box_iou_quadri, nms_quadri, bbox_overlaps, the focal losses
(sigmoid_focal_loss / SigmoidFocalLoss, softmax_focal_loss / SoftmaxFocalLoss) and deformable
convolution (deform_conv2d / DeformConv2d / DeformConv2dPack, modulated_deform_conv2d /
ModulatedDeformConv2d / ModulatedDeformConv2dPack), served by dkit.

Same signatures, defaults (sampling_ratio=0, pool_mode='avg', aligned=True), outputs and
exception types as MMCV: an unknown pool_mode or rois without 5 columns raise AssertionError
(MMCV asserts), kernel-level checks raise RuntimeError subclasses. RoIAlign accepts MMCV's
deprecated keyword names out_size and sample_num with a DeprecationWarning, and with
use_torchvision=True it follows torchvision's semantics (average pooling, pool_mode ignored),
served by dkit.compat.torchvision so torchvision need not be installed. bbox_overlaps asserts as
MMCV does (mode, the boxes' last dimension, offset, aligned sizes: AssertionError), and computes
what MMCV's CPU kernel computes. See dkit.compat for where dkit is stricter than MMCV.

box_iou_rotated and nms_rotated keep MMCV's signatures, defaults and returns: an unknown mode
raises AssertionError (MMCV asserts); nms_rotated of no boxes returns ``(dets, None)``; its
``labels`` are accepted and, as in MMCV's kernels (CPU and CUDA alike), not used. Where MMCV
reads out of bounds (aligned with more boxes in bboxes1 than in bboxes2, a width other than 5)
dkit raises DkitValueError; float64 boxes, which MMCV's CPU box_iou_rotated does not take, work.
"""

import ctypes
import functools
import warnings
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2
from torch.nn.modules.utils import _pair

from dkit import _C
from dkit._ops.box_iou import bbox_overlaps as _bbox_overlaps
from dkit._ops.deform_conv import deform_conv2d as _deform_conv2d
from dkit._ops.focal_loss import sigmoid_focal_loss as _sigmoid_focal_loss
from dkit._ops.focal_loss import softmax_focal_loss as _softmax_focal_loss
from dkit._ops.nms import nms as _nms
from dkit._ops.nms import nms_match as _nms_match
from dkit._ops.nms import soft_nms as _soft_nms
from dkit._ops.roi_align import roi_align as _roi_align
from dkit._ops.roi_align import roi_align_rotated as _roi_align_rotated
from dkit._ops.roi_pool import roi_pool as _roi_pool
from dkit._ops.rotated import box_iou_quadri as _box_iou_quadri
from dkit._ops.rotated import box_iou_rotated as _box_iou_rotated
from dkit._ops.rotated import nms_quadri as _nms_quadri
from dkit._ops.rotated import nms_rotated as _nms_rotated
from dkit.compat import DkitAssertionError
from dkit.compat import torchvision as _torchvision

__all__ = [
    "roi_align", "RoIAlign", "RoIAlignFunction", "roi_pool", "RoIPool", "RoIPoolFunction", "nms", "soft_nms",
    "batched_nms", "box_iou_rotated", "nms_rotated", "bbox_overlaps", "nms_match", "box_iou_quadri", "nms_quadri",
    "sigmoid_focal_loss", "SigmoidFocalLoss", "softmax_focal_loss", "SoftmaxFocalLoss",
    "deform_conv2d", "DeformConv2d", "DeformConv2dPack", "modulated_deform_conv2d", "ModulatedDeformConv2d",
    "ModulatedDeformConv2dPack",
]  # fmt: skip

_Tensor = torch.Tensor


@torch.fx.wrap
def roi_align(
    input: Tensor,
    rois: Tensor,
    output_size: BroadcastingList2[int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> Tensor:
    """RoIAlign as mmcv.ops.roi_align: rois is a Tensor[K, 5] (idx, x1, y1, x2, y2); pool_mode is
    'avg' or 'max'. Differentiable with respect to input. See dkit.ops.roi_align."""
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        return _roi_align_eager(input, rois, output_size, spatial_scale, sampling_ratio, pool_mode, aligned)
    if pool_mode != "max" and pool_mode != "avg":  # _assertion_error's text (Note [Scripted errors])
        raise AssertionError("pool_mode must be 'max' or 'avg', got " + _quoted(pool_mode))
    torch._assert(rois.dim() >= 2 and rois.size(1) == 5, "RoI must be (idx, x1, y1, x2, y2)!")
    return torch.ops.dkit.roi_align(input, rois, output_size, spatial_scale, sampling_ratio, pool_mode, aligned)


def _roi_align_eager(input, rois, output_size, spatial_scale, sampling_ratio, pool_mode, aligned):
    if type(rois) is not _Tensor:
        error = _assertion_error(rois, pool_mode)
        if error is not None:
            raise error
    try:
        return _roi_align(input, rois, output_size, spatial_scale, sampling_ratio, pool_mode, aligned)
    except Exception:
        # Note [Compat fast path] in dkit/compat/torchvision.py: a bad pool_mode, and rois that
        # are not [K, 5], are refused by dkit as well; MMCV's assertions come first.
        error = _assertion_error(rois, pool_mode)
        if error is None:
            raise
    raise error


def _assertion_error(rois, pool_mode):
    """MMCV's assertions, in its order: the AssertionError to raise, or None."""
    if pool_mode not in ("max", "avg"):
        return DkitAssertionError(f"pool_mode must be 'max' or 'avg', got {pool_mode!r}")
    shape = getattr(rois, "shape", None)
    if shape is not None and (len(shape) < 2 or shape[1] != 5):
        return DkitAssertionError("RoI must be (idx, x1, y1, x2, y2)!")
    return None


def _repr(module, *names):
    """MMCV's module reprs: "Name(a=1, b=2)", the attributes in MMCV's order."""
    return f"{module.__class__.__name__}(" + ", ".join(f"{n}={getattr(module, n)}" for n in names) + ")"


class RoIAlignFunction:
    """Stand-in for mmcv.ops.roi_align.RoIAlignFunction: only ``apply`` is provided."""

    apply = staticmethod(roi_align)


def _renamed_kwargs(renames, cls_name):
    """Accept MMCV's deprecated keyword names, warning as MMCV does."""

    def wrap(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise DkitAssertionError(f'The expected behavior is to replace the deprecated key "{old}" '
                                                 f'to new key "{new}", '
                                                 "but got them in the arguments at the same time")  # fmt: skip
                    warnings.warn(
                        f'"{old}" is deprecated in `{cls_name}.{func.__name__}`, please use "{new}" instead',
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper

    return wrap


class RoIAlign(nn.Module):
    """RoI align pooling layer, as mmcv.ops.RoIAlign.

    Args:
        output_size (tuple): h, w
        spatial_scale (float): scale the input boxes by this number
        sampling_ratio (int): number of input samples to take for each output sample; 0 takes
            samples densely (adaptive).
        pool_mode (str): 'avg' or 'max'.
        aligned (bool): if True, shift the boxes by -0.5 pixel.
        use_torchvision (bool): use torchvision's semantics (served by dkit).
    """

    @_renamed_kwargs({"out_size": "output_size", "sample_num": "sampling_ratio"}, cls_name="RoIAlign")
    def __init__(self, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True,
                 use_torchvision=False):  # fmt: skip
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.pool_mode = pool_mode
        self.aligned = aligned
        self.use_torchvision = use_torchvision

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """input: NCHW images; rois: Bx5 boxes, (idx, x1, y1, x2, y2)."""
        if not torch.jit.is_scripting():
            a = self.__dict__  # Note [Module attributes in forward] in dkit/nn.py
            if a["use_torchvision"]:
                return _torchvision.roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"],
                                              a["aligned"])  # fmt: skip
            return roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["pool_mode"],
                             a["aligned"])  # fmt: skip
        if self.use_torchvision:
            return _torchvision.roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio,
                                          self.aligned)  # fmt: skip
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.pool_mode,
                         self.aligned)  # fmt: skip

    def __repr__(self):
        return _repr(self, "output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned", "use_torchvision")


# ------------------------------------------------------------------------------------------
# RoIPool


@torch.fx.wrap
def roi_pool(input: Tensor, rois: Tensor, output_size: BroadcastingList2[int], spatial_scale: float = 1.0) -> Tensor:
    """RoIPool as mmcv.ops.roi_pool: rois is a Tensor[K, 5] (idx, x1, y1, x2, y2), MMCV's bins
    (continuous corners, x2 + 1 and y2 + 1). Differentiable with respect to input; on a CPU too,
    where MMCV has no kernel. See dkit.ops.roi_pool."""
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        if type(rois) is not _Tensor or rois.dim() < 2 or rois.shape[1] != 5:
            shape = getattr(rois, "shape", None)
            if shape is not None and (len(shape) < 2 or shape[1] != 5):
                raise DkitAssertionError("RoI must be (idx, x1, y1, x2, y2)!")
        return _roi_pool(input, rois, output_size, spatial_scale, "mmcv")
    torch._assert(rois.dim() >= 2 and rois.size(1) == 5, "RoI must be (idx, x1, y1, x2, y2)!")
    return torch.ops.dkit.roi_pool(input, rois, output_size, spatial_scale, "mmcv")


class RoIPoolFunction:
    """Stand-in for mmcv.ops.roi_pool.RoIPoolFunction: only ``apply`` is provided."""

    apply = staticmethod(roi_pool)


class RoIPool(nn.Module):
    """RoI max pooling layer, as mmcv.ops.RoIPool.

    Args:
        output_size (tuple): h, w
        spatial_scale (float): scale the input boxes by this number
    """

    def __init__(self, output_size, spatial_scale=1.0):
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        """input: NCHW images; rois: Bx5 boxes, (idx, x1, y1, x2, y2)."""
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self):
        return _repr(self, "output_size", "spatial_scale")


# ------------------------------------------------------------------------------------------
# RoIAlignRotated (mmcv.ops.roi_align_rotated)

__all__ += ["roi_align_rotated", "RoIAlignRotated", "RoIAlignRotatedFunction"]


def _rotated_output_size(output_size) -> None:
    """MMCV's checks of output_size, in its order and with its exception types."""
    if isinstance(output_size, int):
        return
    if isinstance(output_size, tuple):
        if len(output_size) != 2 or not isinstance(output_size[0], int) or not isinstance(output_size[1], int):
            raise DkitAssertionError("output_size must be a pair of ints")
        return
    raise TypeError('"output_size" must be an integer or tuple of integers')


@torch.fx.wrap
def roi_align_rotated(
    input: Tensor,
    rois: Tensor,
    output_size: BroadcastingList2[int],
    spatial_scale: float,
    sampling_ratio: int = 0,
    aligned: bool = True,
    clockwise: bool = False,
) -> Tensor:
    """RoIAlign on rotated boxes as mmcv.ops.roi_align_rotated: rois is a Tensor[K, 6] (idx, cx,
    cy, w, h, angle in radians). output_size an int or a tuple of two ints (MMCV's TypeError and
    AssertionError otherwise). Differentiable with respect to input. See dkit.ops.roi_align_rotated."""
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        _rotated_output_size(output_size)
        return _roi_align_rotated(input, rois, output_size, spatial_scale, sampling_ratio, aligned, clockwise)
    return torch.ops.dkit.roi_align_rotated(input, rois, output_size, spatial_scale, sampling_ratio, aligned, clockwise)


class RoIAlignRotatedFunction:
    """Stand-in for mmcv.ops.roi_align_rotated.RoIAlignRotatedFunction: only ``apply``."""

    apply = staticmethod(roi_align_rotated)


class RoIAlignRotated(nn.Module):
    """RoI align pooling layer for rotated proposals, as mmcv.ops.RoIAlignRotated: rois (n, 6)
    of (batch_index, center_x, center_y, w, h, angle), the angle in radians.

    Args:
        output_size (tuple): h, w
        spatial_scale (float): scale the input boxes by this number
        sampling_ratio (int): samples per output bin along each axis; 0 takes them densely.
        aligned (bool): if True, shift the box centre by -0.5 pixel. Default: True.
        clockwise (bool): if True, the angles turn clockwise. Default: False.
    """

    @_renamed_kwargs({"out_size": "output_size", "sample_num": "sampling_ratio"}, cls_name="RoIAlignRotated")
    def __init__(self, output_size, spatial_scale, sampling_ratio=0, aligned=True, clockwise=False):
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.aligned = aligned
        self.clockwise = clockwise

    def forward(self, input: Tensor, rois: Tensor) -> Tensor:
        return roi_align_rotated(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned,
                                 self.clockwise)  # fmt: skip

    def __repr__(self):
        return _repr(self, "output_size", "spatial_scale", "sampling_ratio", "aligned", "clockwise")


# ------------------------------------------------------------------------------------------
# NMS


def _float32(x: float) -> float:
    """x rounded to a C float, as MMCV's kernels take their thresholds (overflow gives inf)."""
    if not torch.jit.is_scripting():
        return ctypes.c_float(float(x)).value
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32).item())


def _nms_inputs(boxes, scores, op="nms"):
    """MMCV's assertions on nms' inputs, in its order."""
    if not isinstance(boxes, (torch.Tensor, np.ndarray)):
        raise DkitAssertionError(f"{op}: boxes must be a torch.Tensor or a numpy.ndarray, got {type(boxes).__name__}")
    if not isinstance(scores, (torch.Tensor, np.ndarray)):
        raise DkitAssertionError(f"{op}: scores must be a torch.Tensor or a numpy.ndarray, got {type(scores).__name__}")
    if isinstance(boxes, np.ndarray) != isinstance(scores, np.ndarray):  # MMCV converts both to torch
        boxes, scores = torch.as_tensor(boxes), torch.as_tensor(scores)
    if boxes.ndim < 2 or boxes.shape[1] != 4:
        raise DkitAssertionError(f"{op}: boxes must be [N, 4], got {list(boxes.shape)}")
    if scores.ndim < 1 or boxes.shape[0] != scores.shape[0]:
        raise DkitAssertionError(f"{op}: boxes and scores must have as many rows, "
                                 f"got {list(boxes.shape)} and {list(scores.shape)}")
    return boxes, scores


# Note [Scripted errors]
# A TorchScript branch raises what its eager branch raises, with the same text (TorchScript
# then reports it as "AssertionError: <text>"), so that a scripted model fails as the eager one
# does. The details are built only once the check has failed: `if not ...: raise`, not
# torch._assert, whose message TorchScript would build on every call.


def _quoted(text: str) -> str:
    """repr() of a str as TorchScript can write it (no quotes or escapes inside)."""
    return "'" + text + "'"


def _nms_shapes(boxes: Tensor, scores: Tensor, op: str):
    """MMCV's assertions on the shapes of nms' inputs (TorchScript's half of _nms_inputs, with
    its text: Note [Scripted errors])."""
    if boxes.dim() < 2 or boxes.size(1) != 4:
        raise AssertionError(op + ": boxes must be [N, 4], got " + str(boxes.size()))
    if scores.dim() < 1 or boxes.size(0) != scores.size(0):
        raise AssertionError(op + ": boxes and scores must have as many rows, got " + str(boxes.size()) + " and "
                             + str(scores.size()))  # fmt: skip


def _filtered_nms(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    offset: int,
    score_threshold: float,
    max_num: int,
    idxs: Optional[Tensor] = None,
) -> Tensor:
    """MMCV's NMSop: boxes scoring above score_threshold (when > 0), nms, the first max_num
    (when > 0); indices into the unfiltered boxes. Torch tensors or NumPy arrays in eager mode;
    TorchScript compiles it too (dkit.ops.nms is the torch op dkit::nms there)."""
    if offset != 0 and offset != 1:
        raise DkitAssertionError(f"nms: offset must be 0 or 1, got {offset}")
    valid: Optional[Tensor] = None
    if score_threshold > 0:
        nonzero = (scores > score_threshold).nonzero()
        v = nonzero[0] if isinstance(nonzero, tuple) else nonzero.view(-1)  # NumPy / torch
        boxes, scores = boxes[v], scores[v]
        if idxs is not None:
            idxs = idxs[v]
        valid = v
    inds = _nms(boxes, scores, _float32(iou_threshold), idxs, offset)
    if max_num > 0:
        inds = inds[:max_num]
    if valid is not None:
        inds = valid[inds]
    return inds


def _with_scores(boxes, scores):
    """[K, 5] (x1, y1, x2, y2, score) rows."""
    if isinstance(boxes, np.ndarray):
        return np.concatenate((boxes, scores.reshape(-1, 1)), axis=1)
    return torch.cat((boxes, scores.reshape(-1, 1)), dim=1)


@torch.fx.wrap
def nms(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    offset: int = 0,
    score_threshold: float = 0,
    max_num: int = -1,
) -> Tuple[Tensor, Tensor]:
    """mmcv.ops.nms: (dets [K, 5] (x1, y1, x2, y2, score), inds [K]), in decreasing score order.

    boxes [N, 4] and scores [N] are torch tensors or NumPy arrays (the results are then NumPy
    arrays). offset 1 is MMCV's legacy pixel convention (width = x2 - x1 + 1); boxes scoring
    score_threshold or less are dropped first (when it is > 0), and at most max_num (when > 0)
    are returned. The threshold is compared in float32, as MMCV's kernels take it.
    """
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        boxes, scores = _nms_inputs(boxes, scores)
        inds = _filtered_nms(boxes, scores, iou_threshold, offset, score_threshold, max_num)
        return _with_scores(boxes[inds], scores[inds]), inds
    _nms_shapes(boxes, scores, "nms")
    inds = _filtered_nms(boxes, scores, iou_threshold, offset, score_threshold, max_num)
    return torch.cat((boxes[inds], scores[inds].reshape(-1, 1)), 1), inds


@torch.fx.wrap
def soft_nms(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float = 0.3,
    sigma: float = 0.5,
    min_score: float = 1e-3,
    method: str = "linear",
    offset: int = 0,
) -> Tuple[Tensor, Tensor]:
    """mmcv.ops.soft_nms: (dets [K, 5] with decayed scores, inds [K]), in selection order.

    method: 'linear', 'gaussian' or 'naive' (see dkit.ops.soft_nms). torch tensors or NumPy
    arrays (the results are then NumPy arrays).
    """
    if not torch.jit.is_scripting():
        boxes, scores = _nms_inputs(boxes, scores, "soft_nms")
    else:
        _nms_shapes(boxes, scores, "soft_nms")
    if offset != 0 and offset != 1:
        raise DkitAssertionError(f"soft_nms: offset must be 0 or 1, got {offset}")
    if method != "naive" and method != "linear" and method != "gaussian":
        raise DkitAssertionError(f"soft_nms: method must be 'naive', 'linear' or 'gaussian', got {method}")
    return _soft_nms(boxes, scores, iou_threshold, sigma, min_score, method, int(offset))


_NMS_OPS = {"nms": nms, "soft_nms": soft_nms}


@torch.fx.wrap
def batched_nms(boxes, scores, idxs, nms_cfg, class_agnostic=False):
    """mmcv.ops.batched_nms: NMS per category; (dets [K, 5] ([K, 6] for rotated boxes), keep [K]) in
    decreasing score order.

    nms_cfg: None (no suppression: every box, sorted by score) or a dict with 'iou_threshold'
    and optionally 'type' ('nms', 'soft_nms' or 'nms_rotated'), 'split_thr' (default 10000), 'class_agnostic'
    and the keywords of that op (offset, score_threshold, max_num; sigma, min_score, method).

    For 'nms', MMCV's two strategies (boxes shifted apart by category below split_thr boxes,
    one nms per category above) both amount to one nms with categories, which dkit runs in one
    pass. 'soft_nms' decays scores across every box the op sees, so MMCV's strategies are
    followed as they are.

    Not compiled by TorchScript (nor is MMCV's): nms_cfg is a dict of values of several types,
    which TorchScript cannot type. Scripted code calls nms, soft_nms or nms_rotated with
    categories instead (dkit.ops.batched_nms is the torch op dkit::batched_nms).
    """
    if nms_cfg is None:
        scores, inds = scores.sort(descending=True)
        return torch.cat([boxes[inds], scores[:, None]], -1), inds
    cfg = dict(nms_cfg)
    class_agnostic = cfg.pop("class_agnostic", class_agnostic)
    nms_type = cfg.pop("type", "nms")
    nms_op = _NMS_OPS.get(nms_type)
    if nms_op is None:
        raise _C.DkitNotImplementedError(f"batched_nms: nms_cfg type {nms_type!r} is not served by dkit.compat.mmcv "
                                         f"(it serves {sorted(_NMS_OPS)})")  # fmt: skip
    split_thr = cfg.pop("split_thr", 10000)
    if nms_op is nms:
        dets, keep = _batched_hard_nms(boxes, scores, None if class_agnostic else idxs, **cfg)
        return _with_scores(boxes[keep], dets[:, -1]), keep
    if class_agnostic:
        boxes_for_nms = boxes
    elif boxes.size(-1) == 5:  # rotated boxes: MMCV moves the centres only, by max centre + max side
        max_coordinate = boxes[..., :2].max() + boxes[..., 2:4].max()
        offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
        boxes_for_nms = torch.cat([boxes[..., :2] + offsets[:, None], boxes[..., 2:5]], dim=-1)
    else:  # MMCV's shift: each category's boxes beyond the largest coordinate of the others
        offsets = idxs.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
        boxes_for_nms = boxes + offsets[:, None]
    if boxes_for_nms.shape[0] < split_thr:
        dets, keep = nms_op(boxes_for_nms, scores, **cfg)
        return _with_scores(boxes[keep], dets[:, -1]), keep
    max_num = cfg.pop("max_num", -1)
    total_mask = scores.new_zeros(scores.size(), dtype=torch.bool)
    scores_after_nms = scores.new_zeros(scores.size())
    for category in torch.unique(idxs):
        mask = (idxs == category).nonzero(as_tuple=False).view(-1)
        dets, keep = nms_op(boxes_for_nms[mask], scores[mask], **cfg)
        total_mask[mask[keep]] = True
        scores_after_nms[mask[keep]] = dets[:, -1]
    keep = total_mask.nonzero(as_tuple=False).view(-1)
    scores, inds = scores_after_nms[keep].sort(descending=True, stable=True)
    keep = keep[inds]
    if max_num > 0:
        keep, scores = keep[:max_num], scores[:max_num]
    return _with_scores(boxes[keep], scores), keep


def _batched_hard_nms(boxes, scores, idxs, iou_threshold, offset=0, score_threshold=0, max_num=-1):
    """nms with categories (None: one category), nms()'s keywords and results."""
    boxes, scores = _nms_inputs(boxes, scores)
    keep = _filtered_nms(boxes, scores, iou_threshold, offset, score_threshold, max_num, idxs)
    return _with_scores(boxes[keep], scores[keep]), keep


# ------------------------------------------------------------------------------------------
# Rotated boxes


@torch.fx.wrap
def box_iou_rotated(
    bboxes1: Tensor, bboxes2: Tensor, mode: str = "iou", aligned: bool = False, clockwise: bool = True
) -> Tensor:
    """mmcv.ops.box_iou_rotated: [N, M] overlaps (or [N] when aligned) of (x, y, w, h, theta)
    boxes, theta in radians. See dkit.ops.box_iou_rotated."""
    if mode != "iou" and mode != "iof":
        raise DkitAssertionError(f"mode must be 'iou' or 'iof', got {mode}")
    return _box_iou_rotated(bboxes1, bboxes2, mode, aligned, clockwise)


@torch.fx.wrap
def nms_rotated(
    dets: Tensor, scores: Tensor, iou_threshold: float, labels: Optional[Tensor] = None, clockwise: bool = True
) -> Tuple[Tensor, Optional[Tensor]]:
    """mmcv.ops.nms_rotated: (kept dets with their scores [K, 6], kept indices [K]); (dets, None)
    when there are no boxes. ``labels`` ([N]) are checked and, as in MMCV, do not change the
    result. See dkit.ops.nms_rotated."""
    if dets.shape[0] == 0:
        return dets, None
    if labels is not None:
        # MMCV concatenates the labels to dets as a column, which needs one label per box.
        if not torch.jit.is_scripting():
            _check_labels(labels, dets.shape[0])
        else:
            torch._assert(labels.dim() == 1 and labels.size(0) == dets.size(0),
                          "nms_rotated: labels must have shape [N]")
    kept, keep = _nms_rotated(dets, scores, iou_threshold, None, clockwise)
    return kept, keep


def _check_labels(labels, n, op="nms_rotated"):
    shape = getattr(labels, "shape", None)
    if shape is None or len(shape) != 1 or shape[0] != n:
        got = None if shape is None else list(shape)
        raise _C.DkitValueError(f"{op}: labels must have shape [{n}], got {got}")


# batched_nms(..., nms_cfg=dict(type='nms_rotated', ...)) as MMCV: rotated boxes [N, 5].
_NMS_OPS["nms_rotated"] = nms_rotated


@torch.fx.wrap
def bbox_overlaps(
    bboxes1: Tensor, bboxes2: Tensor, mode: str = "iou", aligned: bool = False, offset: int = 0
) -> Tensor:
    """Calculate overlap between two sets of bboxes, as mmcv.ops.bbox_overlaps (see
    dkit.ops.bbox_overlaps).

    Args:
        bboxes1 (Tensor): shape (m, 4) in <x1, y1, x2, y2> format or empty.
        bboxes2 (Tensor): shape (n, 4) in <x1, y1, x2, y2> format or empty.
            If aligned is ``True``, then m and n must be equal.
        mode (str): "iou" (intersection over union) or "iof" (intersection over foreground).
        aligned (bool): only the pairs (i, i).
        offset (int): 0 or 1.

    Returns:
        torch.Tensor: the ious; shape (m, n), or (m,) when aligned ((m, 1) when empty).
    """
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        return _bbox_overlaps_eager(bboxes1, bboxes2, mode, aligned, offset)
    # _bbox_assertion_error's checks and text, in its order (Note [Scripted errors])
    if mode != "iou" and mode != "iof":
        raise AssertionError("bbox_overlaps: mode must be 'iou' or 'iof', got " + _quoted(mode))
    for b in (bboxes1, bboxes2):
        if b.dim() >= 1 and not (b.size(-1) == 4 or b.size(0) == 0):
            raise AssertionError("bbox_overlaps: the boxes' last dimension must be 4 (or the boxes empty)")
    if offset != 1 and offset != 0:
        raise AssertionError("bbox_overlaps: offset must be 0 or 1, got " + str(offset))
    if aligned and bboxes1.dim() >= 1 and bboxes2.dim() >= 1 and bboxes1.size(0) != bboxes2.size(0):
        raise AssertionError("bbox_overlaps: aligned boxes must be as many in bboxes2 as in bboxes1")
    for b in (bboxes1, bboxes2):
        if b.dim() < 2 and not (b.dim() == 1 and b.size(0) == 0):
            raise IndexError("bbox_overlaps: too many indices for tensor of dimension " + str(b.dim()))
    return torch.ops.dkit.bbox_overlaps(bboxes1, bboxes2, mode, aligned, offset)


def _bbox_overlaps_eager(bboxes1, bboxes2, mode, aligned, offset):
    if type(offset) is bool:  # MMCV asserts offset == 1 or offset == 0, which True and False pass
        offset = int(offset)
    try:
        return _bbox_overlaps(bboxes1, bboxes2, mode, aligned, offset)
    except Exception:
        # Note [Compat fast path] in dkit/compat/torchvision.py: every case MMCV asserts on is
        # refused by dkit too; MMCV's assertions come first, in its order.
        error = _bbox_assertion_error(bboxes1, bboxes2, mode, aligned, offset)
        if error is None:
            raise
    raise error


def _bbox_assertion_error(bboxes1, bboxes2, mode, aligned, offset):
    """MMCV's assertions of bbox_overlaps, in its order: the AssertionError to raise, or None;
    1-d boxes that pass them fail MMCV's CPU kernel with IndexError."""
    if not (type(mode) is str and mode in ("iou", "iof")):
        return DkitAssertionError(f"bbox_overlaps: mode must be 'iou' or 'iof', got {mode!r}")
    shapes = [getattr(b, "shape", None) for b in (bboxes1, bboxes2)]
    for shape in shapes:
        if shape is not None and len(shape) >= 1 and not (shape[-1] == 4 or shape[0] == 0):
            return DkitAssertionError("bbox_overlaps: the boxes' last dimension must be 4 (or the boxes empty)")
    if not (offset == 1 or offset == 0):
        return DkitAssertionError(f"bbox_overlaps: offset must be 0 or 1, got {offset!r}")
    if aligned and shapes[0] is not None and shapes[1] is not None and len(shapes[0]) and len(shapes[1]):
        if shapes[0][0] != shapes[1][0]:
            return DkitAssertionError("bbox_overlaps: aligned boxes must be as many in bboxes2 as in bboxes1")
    for shape in shapes:
        if shape is not None and len(shape) < 2 and not (len(shape) == 1 and shape[0] == 0):
            return _C.DkitIndexError(f"bbox_overlaps: too many indices for tensor of dimension {len(shape)}")
    return None


# ------------------------------------------------------------------------------------------
# Focal losses (dkit/_ops/focal_loss.py). MMCV's sigmoid_focal_loss and softmax_focal_loss are
# autograd Functions' apply (positional arguments; these take keywords too) and assert, without
# a message, what these assert with one; the order of the checks is MMCV's. Where MMCV reads out
# of bounds dkit defines or refuses (ops/focal_loss.h): a sigmoid row whose target has no weight
# (MMCV's background, num_classes, reads weight[num_classes]) is weighted 1; a softmax target of
# num_classes or more raises DkitIndexError. MMCV's softmax backward with reduction='none'
# multiplies the [N, C] gradient by grad_output [N] broadcast along the classes (wrong unless
# N == C, an error otherwise); dkit scales row n by grad_output[n].


def _focal_assertions(input: Tensor, target: Tensor, weight: Optional[Tensor], reduction: str):
    """MMCV's assertions of both focal losses, in its order (Note [Scripted errors])."""
    error = _focal_assertion(input, target, weight, reduction)
    if error is not None:
        if not torch.jit.is_scripting():
            raise DkitAssertionError(error)
        raise AssertionError(error)


def _focal_assertion(input: Tensor, target: Tensor, weight: Optional[Tensor], reduction: str) -> Optional[str]:
    """The text of the first of MMCV's assertions that fails, or None."""
    if target.dtype != torch.long:
        return "target must be int64 (torch.long) class indices, got " + str(target.dtype)
    if input.dim() != 2:
        return "input must be [N, num_classes], got " + str(input.dim()) + " dimensions"
    if target.dim() != 1:
        return "target must be [N], got " + str(target.dim()) + " dimensions"
    if input.size(0) != target.size(0):
        return "input and target must have as many rows, got " + str(input.size(0)) + " and " + str(target.size(0))
    if weight is not None:
        if weight.dim() != 1:
            return "weight must be [num_classes], got " + str(weight.dim()) + " dimensions"
        if input.size(1) != weight.size(0):
            return "weight must have num_classes (" + str(input.size(1)) + ") elements, got " + str(weight.size(0))
    if reduction != "none" and reduction != "mean" and reduction != "sum":
        return "reduction must be 'none', 'mean' or 'sum', got " + _quoted(reduction)
    return None


@torch.fx.wrap
def sigmoid_focal_loss(
    input: Tensor,
    target: Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: Optional[Tensor] = None,
    reduction: str = "mean",
) -> Tensor:
    """mmcv.ops.sigmoid_focal_loss: input [N, C] logits, target [N] int64 class indices (C:
    background), alpha for the positive class and 1 - alpha for the others, row n scaled by
    weight[target[n]]; reduction 'mean' divides the sum by N. Differentiable with respect to
    input; on a CPU too, where MMCV has no kernel, and for float16 and bfloat16 (computed in
    float32). See dkit.ops.sigmoid_focal_loss."""
    _focal_assertions(input, target, weight, reduction)
    return _sigmoid_focal_loss(input, target, float(alpha), float(gamma), reduction, weight)


@torch.fx.wrap
def softmax_focal_loss(
    input: Tensor,
    target: Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: Optional[Tensor] = None,
    reduction: str = "mean",
) -> Tensor:
    """mmcv.ops.softmax_focal_loss: input [N, C] logits, target [N] int64 class indices (negative:
    ignored), -alpha (1 - s)^gamma log s of the softmax s at the target, row n scaled by
    weight[target[n]]; reduction 'mean' divides the sum by N. Differentiable with respect to
    input. See dkit.ops.softmax_focal_loss."""
    _focal_assertions(input, target, weight, reduction)
    return _softmax_focal_loss(input, target, float(gamma), float(alpha), weight, reduction)


class _FocalLoss(nn.Module):
    """MMCV's focal loss modules: gamma, alpha, weight (a buffer) and reduction, and their repr."""

    def __init__(self, gamma: float, alpha: float, weight: Optional[Tensor] = None, reduction: str = "mean"):
        super().__init__()
        self.gamma = gamma
        self.alpha = alpha
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def __repr__(self):
        return _repr(self, "gamma", "alpha", "reduction")


class SigmoidFocalLoss(_FocalLoss):
    """mmcv.ops.SigmoidFocalLoss(gamma, alpha, weight=None, reduction='mean'): sigmoid_focal_loss."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return sigmoid_focal_loss(input, target, self.gamma, self.alpha, self.weight, self.reduction)


class SoftmaxFocalLoss(_FocalLoss):
    """mmcv.ops.SoftmaxFocalLoss(gamma, alpha, weight=None, reduction='mean'): softmax_focal_loss."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return softmax_focal_loss(input, target, self.gamma, self.alpha, self.weight, self.reduction)


# ------------------------------------------------------------------------------------------
# nms_match, box_iou_quadri, nms_quadri


@torch.fx.wrap
def nms_match(dets: Tensor, iou_threshold: float) -> List[Tensor]:
    """mmcv.ops.nms_match: the groups NMS makes, a list of int64 index tensors (NumPy arrays
    for a NumPy dets), each its kept box first and then the boxes it suppressed, in score order;
    groups in score order.

    dets [N, 5] (x1, y1, x2, y2, score). MMCV's rules (dkit.ops.nms_match): IoU without the +1
    pixel offset, >= iou_threshold, in float32. As MMCV: no boxes give [] (whatever the shape),
    other shapes than [N, 5] raise AssertionError with its message; tensors stay on their
    device. Unlike MMCV's kernel, float64 dets are computed in float64 instead of refused, and
    a CUDA tensor is grouped on the GPU instead of copied to the CPU. TorchScript compiles it
    for tensors.
    """
    if dets.shape[0] == 0:
        return []
    if not torch.jit.is_scripting():  # Note [Compat under TorchScript] in dkit/compat/torchvision.py
        return _nms_match_eager(dets, iou_threshold)
    if dets.dim() != 2 or dets.size(1) != 5:  # Note [Scripted errors]
        raise AssertionError("inputs dets.shape should be (N, 5), but get " + str(dets.size()))
    members, starts = _nms_match(dets[:, :4], dets[:, 4], iou_threshold)
    return torch.tensor_split(members, starts[1:].cpu())


def _nms_match_eager(dets, iou_threshold):
    # MMCV asserts on the last dimension only; a 1-d dets of 5 fails its kernel (dkit: the same
    # AssertionError)
    if dets.shape[-1] != 5 or len(dets.shape) != 2:
        raise DkitAssertionError(f"inputs dets.shape should be (N, 5), but get {dets.shape}")
    members, starts = _nms_match(dets[:, :4], dets[:, 4], float(iou_threshold))
    if isinstance(members, np.ndarray):
        return np.split(members, starts[1:])
    return list(torch.tensor_split(members, starts[1:].cpu()))


@torch.fx.wrap
def box_iou_quadri(bboxes1: Tensor, bboxes2: Tensor, mode: str = "iou", aligned: bool = False) -> Tensor:
    """mmcv.ops.box_iou_quadri: [N, M] overlaps (or [N] when aligned) of quadrilaterals
    (x1, y1, ..., x4, y4). An unknown mode raises AssertionError (MMCV asserts). Exact for
    convex quadrilaterals, where MMCV's own values are not (dkit.ops.box_iou_quadri says where
    and why)."""
    if mode != "iou" and mode != "iof":
        raise DkitAssertionError(f"mode must be 'iou' or 'iof', got {mode}")
    return _box_iou_quadri(bboxes1, bboxes2, mode, aligned)


@torch.fx.wrap
def nms_quadri(
    dets: Tensor, scores: Tensor, iou_threshold: float, labels: Optional[Tensor] = None
) -> Tuple[Tensor, Optional[Tensor]]:
    """mmcv.ops.nms_quadri: (kept dets with their scores [K, 9], kept indices [K]); (dets, None)
    when there are no boxes. ``labels`` ([N]) are checked and, as in MMCV's CPU kernel, do not
    change the result (its published multi-label case keeps what the plain one keeps). See
    dkit.ops.nms_quadri."""
    if dets.shape[0] == 0:
        return dets, None
    if labels is not None:
        if not torch.jit.is_scripting():
            _check_labels(labels, dets.shape[0], "nms_quadri")
        else:
            torch._assert(labels.dim() == 1 and labels.size(0) == dets.size(0),
                          "nms_quadri: labels must have shape [N]")  # fmt: skip
    kept, keep = _nms_quadri(dets, scores, iou_threshold, None)
    return kept, keep


# batched_nms(..., nms_cfg=dict(type='nms_quadri', ...)) as MMCV: [N, 8] boxes, each category's
# shifted by the largest coordinate (MMCV's branch for boxes that are not rotated).
_NMS_OPS["nms_quadri"] = nms_quadri


# ------------------------------------------------------------------------------------------
# Deformable convolution (mmcv/ops/deform_conv.py, mmcv/ops/modulated_deform_conv.py)
#
# MMCV's DCNv1 and DCNv2 are torchvision's deform_conv2d (the same offsets, (y, x) per tap per
# deformable group, the same bilinear samples and gradients) but for the offsets' gradient at the
# map's edge (geometry="mmcv": kernels/deform_conv_math.h), so both are dkit.ops.deform_conv2d
# behind MMCV's signatures, checks and modules. im2col_step sizes MMCV's column buffer
# (im2col_step images at a time); dkit's is bounded whatever the batch (Note [Deformable
# convolution on a CPU]), so dkit needs none. The compat entry still asserts what MMCV asserts,
# that the batch is a multiple of min(im2col_step, batch), with MMCV's message: a drop-in must
# fail where MMCV fails (MMCV's own test checks the refusal), and batch 64 with the default 32
# passes it. dkit.ops.deform_conv2d and dkit.compat.torchvision take any batch (mmcv#661's
# batch of 33 included).


def _deform_checks(input: Tensor, weight: Tensor, stride: List[int], padding: List[int], dilation: List[int]):
    """MMCV's Function.forward checks: a 4-d input (ValueError) and an output of positive size
    (ValueError, MMCV's _output_size message)."""
    if input.dim() != 4:
        raise ValueError("Expected 4D tensor as input, got " + str(input.dim()) + "D tensor instead.")
    size = [input.size(0), weight.size(0)]
    for d in range(2):
        kernel = dilation[d] * (weight.size(d + 2) - 1) + 1
        size.append((input.size(d + 2) + 2 * padding[d] - kernel) // stride[d] + 1)
    if size[0] <= 0 or size[1] <= 0 or size[2] <= 0 or size[3] <= 0:
        raise ValueError("convolution input is too small (output would be " + "x".join([str(v) for v in size]) + ")")


def _list2(v: BroadcastingList2[int]) -> List[int]:
    """_pair as a list: TorchScript's BroadcastingList2 is a list already; eagerly an int or a
    sequence of two."""
    if torch.jit.is_scripting():
        return v
    return list(_pair(v))


@torch.fx.wrap
def deform_conv2d(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    stride: BroadcastingList2[int] = 1,
    padding: BroadcastingList2[int] = 0,
    dilation: BroadcastingList2[int] = 1,
    groups: int = 1,
    deform_groups: int = 1,
    bias: bool = False,
    im2col_step: int = 32,
) -> Tensor:
    """mmcv.ops.deform_conv2d (DCNv1): input [N, Cin, H, W], offset [N, 2 deform_groups kh kw,
    Ho, Wo], weight [Cout, Cin / groups, kh, kw]; no bias (MMCV asserts bias is False). A batch
    that is a multiple of min(im2col_step, batch), as MMCV asserts (see above). Differentiable
    with respect to input, offset and weight. See dkit.ops.deform_conv2d."""
    assert bias is False, "Only support bias is False."
    assert im2col_step > 0, "im2col_step must be positive"
    step = min(im2col_step, input.size(0))
    assert step == 0 or input.size(0) % step == 0, "batch size must be divisible by im2col_step"
    s, p, d = _list2(stride), _list2(padding), _list2(dilation)
    _deform_checks(input, weight, s, p, d)
    input = input.type_as(offset)  # MMCV's casts (amp: a half input with float offsets)
    weight = weight.type_as(input)
    _deform_groups(input, offset, weight, groups, deform_groups, 2)
    return _deform_conv2d(input, offset, weight, None, s, p, d, None, "mmcv")


def _deform_groups(input: Tensor, offset: Tensor, weight: Tensor, groups: int, deform_groups: int, per_tap: int):
    """groups and deform_groups must be those of the shapes (which dkit.ops.deform_conv2d reads
    from them, as torchvision does): MMCV's kernels check the same (shape_check), as
    RuntimeError."""
    if groups <= 0 or deform_groups <= 0:
        raise RuntimeError(
            "groups and deform_groups must be positive, got " + str(groups) + " and " + str(deform_groups)
        )
    if weight.dim() == 4 and weight.size(1) * groups != input.size(1):
        raise RuntimeError(
            "Input shape and kernel channels wont match: (" + str(input.size(1)) + " vs "
            + str(weight.size(1) * groups) + ")."
        )
    taps = weight.size(2) * weight.size(3) if weight.dim() == 4 else 0
    if offset.dim() == 4 and offset.size(1) != per_tap * taps * deform_groups:
        raise RuntimeError(
            "invalid number of offset channels: got " + str(offset.size(1)) + ", expected "
            + str(per_tap * taps * deform_groups) + " (" + str(per_tap) + " x kh x kw x deform_groups)"
        )  # fmt: skip


@torch.fx.wrap
def modulated_deform_conv2d(
    input: Tensor,
    offset: Tensor,
    mask: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: BroadcastingList2[int] = 1,
    padding: BroadcastingList2[int] = 0,
    dilation: BroadcastingList2[int] = 1,
    groups: int = 1,
    deform_groups: int = 1,
) -> Tensor:
    """mmcv.ops.modulated_deform_conv2d (DCNv2): deform_conv2d with mask [N, deform_groups kh kw,
    Ho, Wo] multiplying each sample, and an optional bias [Cout]. Differentiable with respect to
    input, offset, mask, weight and bias. See dkit.ops.deform_conv2d."""
    s, p, d = _list2(stride), _list2(padding), _list2(dilation)
    _deform_checks(input, weight, s, p, d)
    input = input.type_as(offset)  # MMCV's casts
    weight = weight.type_as(input)
    mask = mask.type_as(input)
    if bias is not None:
        bias = bias.type_as(input)
    _deform_groups(input, offset, weight, groups, deform_groups, 2)
    return _deform_conv2d(input, offset, weight, bias, s, p, d, mask, "mmcv")


def _deform_attributes(module, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                       deform_groups):  # fmt: skip
    """The attributes MMCV's DeformConv2d and ModulatedDeformConv2d share, and the (uninitialised)
    weight [out_channels, in_channels / groups, kh, kw]."""
    module.in_channels = in_channels
    module.out_channels = out_channels
    module.kernel_size = _pair(kernel_size)
    module.stride = _pair(stride)
    module.padding = _pair(padding)
    module.dilation = _pair(dilation)
    module.groups = groups
    module.deform_groups = deform_groups
    module.transposed = False
    module.output_padding = (0,)
    module.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *module.kernel_size))


class DeformConv2d(nn.Module):
    """mmcv.ops.DeformConv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, groups=1, deform_groups=1, bias=False, im2col_step=32): MMCV's asserts,
    attributes, Kaiming-uniform (relu) weights, padding of inputs smaller than the kernel, and
    repr."""

    _version = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        deform_groups: int = 1,
        bias: bool = False,
        im2col_step: int = 32,
    ):
        super().__init__()
        assert not bias, f"bias={bias} is not supported in DeformConv2d."
        assert in_channels % groups == 0, f"in_channels {in_channels} cannot be divisible by groups {groups}"
        assert out_channels % groups == 0, f"out_channels {out_channels} cannot be divisible by groups {groups}"
        _deform_attributes(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                           deform_groups)  # fmt: skip
        self.im2col_step = im2col_step
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, nonlinearity="relu")

    def forward(self, x: Tensor, offset: Tensor) -> Tensor:
        # MMCV pads an input smaller than the kernel (and its offset) at the bottom and right,
        # and crops the output back
        pad_h = max(self.kernel_size[0] - x.size(2), 0)
        pad_w = max(self.kernel_size[1] - x.size(3), 0)
        input_pad = pad_h > 0 or pad_w > 0
        if input_pad:
            x = nn.functional.pad(x, [0, pad_w, 0, pad_h], "constant", 0.0)
            offset = nn.functional.pad(offset, [0, pad_w, 0, pad_h], "constant", 0.0)
        out = deform_conv2d(
            x, offset, self.weight, self.stride, self.padding, self.dilation, self.groups, self.deform_groups, False,
            self.im2col_step,
        )  # fmt: skip
        if input_pad:
            out = out[:, :, : out.size(2) - pad_h, : out.size(3) - pad_w].contiguous()
        return out

    def __repr__(self):
        return (
            f"{self.__class__.__name__}(in_channels={self.in_channels},\n"
            f"out_channels={self.out_channels},\n"
            f"kernel_size={self.kernel_size},\n"
            f"stride={self.stride},\n"
            f"padding={self.padding},\n"
            f"dilation={self.dilation},\n"
            f"groups={self.groups},\n"
            f"deform_groups={self.deform_groups},\n"
            "bias=False)"
        )


class DeformConv2dPack(DeformConv2d):
    """mmcv.ops.DeformConv2dPack: DeformConv2d whose offsets come from a convolution of its input
    (conv_offset: deform_groups 2 kh kw channels, the layer's stride, padding and dilation, with
    bias), zero-initialised, so that it starts as a plain convolution."""

    _version = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_offset = nn.Conv2d(
            self.in_channels,
            self.deform_groups * 2 * self.kernel_size[0] * self.kernel_size[1],
            kernel_size=self.kernel_size,
            stride=_pair(self.stride),
            padding=_pair(self.padding),
            dilation=_pair(self.dilation),
            bias=True,
        )
        self.init_offset()

    def init_offset(self):
        self.conv_offset.weight.data.zero_()
        self.conv_offset.bias.data.zero_()

    def forward(self, x: Tensor) -> Tensor:
        offset = self.conv_offset(x)
        return deform_conv2d(
            x, offset, self.weight, self.stride, self.padding, self.dilation, self.groups, self.deform_groups, False,
            self.im2col_step,
        )  # fmt: skip


class ModulatedDeformConv2d(nn.Module):
    """mmcv.ops.ModulatedDeformConv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, groups=1, deform_groups=1, bias=True): weights uniform in +-1/sqrt(Cin kh kw),
    a zero bias, as MMCV's init_weights."""

    _version = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        deform_groups: int = 1,
        bias=True,
    ):
        super().__init__()
        _deform_attributes(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                           deform_groups)  # fmt: skip
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.init_weights()

    def init_weights(self):
        n = self.in_channels
        for k in self.kernel_size:
            n *= k
        stdv = 1.0 / n**0.5
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.zero_()

    def forward(self, x: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        return modulated_deform_conv2d(
            x, offset, mask, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
            self.deform_groups,
        )  # fmt: skip


class ModulatedDeformConv2dPack(ModulatedDeformConv2d):
    """mmcv.ops.ModulatedDeformConv2dPack: offsets and mask from conv_offset (deform_groups 3 kh kw
    channels, zero-initialised): o1, o2, m = its output in three chunks, offset = cat(o1, o2),
    mask = sigmoid(m)."""

    _version = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_offset = nn.Conv2d(
            self.in_channels,
            self.deform_groups * 3 * self.kernel_size[0] * self.kernel_size[1],
            kernel_size=self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            bias=True,
        )
        self.init_weights()

    def init_weights(self):
        super().init_weights()
        if hasattr(self, "conv_offset"):
            self.conv_offset.weight.data.zero_()
            self.conv_offset.bias.data.zero_()

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv_offset(x)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)
        return modulated_deform_conv2d(
            x, offset, mask, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
            self.deform_groups,
        )  # fmt: skip
