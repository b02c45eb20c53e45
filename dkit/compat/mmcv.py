"""mmcv.ops.roi_align / RoIAlign, served by dkit.

Same signatures, defaults (sampling_ratio=0, pool_mode='avg', aligned=True), outputs and
exception types as MMCV: an unknown pool_mode or rois without 5 columns raise AssertionError
(MMCV asserts), kernel-level checks raise RuntimeError subclasses. RoIAlign accepts MMCV's
deprecated keyword names out_size and sample_num with a DeprecationWarning, and with
use_torchvision=True it follows torchvision's semantics (average pooling, pool_mode ignored),
served by dkit.compat.torchvision so torchvision need not be installed. See dkit.compat for where
dkit is stricter than MMCV.
"""

import functools
import warnings

import torch
from torch import nn
from torch.nn.modules.utils import _pair

from dkit._ops.roi_align import roi_align as _roi_align
from dkit.compat import DkitAssertionError

__all__ = ["roi_align", "RoIAlign", "RoIAlignFunction"]

_Tensor = torch.Tensor


def roi_align(input, rois, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True):
    """RoIAlign as mmcv.ops.roi_align: rois is a Tensor[K, 5] (idx, x1, y1, x2, y2); pool_mode is
    'avg' or 'max'. Differentiable with respect to input. See dkit.ops.roi_align."""
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
                                                 f'to new key "{new}", but got them in the arguments at the same time')  # fmt: skip
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

    def forward(self, input, rois):
        """input: NCHW images; rois: Bx5 boxes, (idx, x1, y1, x2, y2)."""
        a = self.__dict__  # Note [Module attributes in forward] in dkit/nn.py
        if a["use_torchvision"]:
            from dkit.compat.torchvision import roi_align as tv_roi_align

            return tv_roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["aligned"])
        return roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["pool_mode"],
                         a["aligned"])  # fmt: skip

    def __repr__(self):
        s = self.__class__.__name__
        s += f"(output_size={self.output_size}, "
        s += f"spatial_scale={self.spatial_scale}, "
        s += f"sampling_ratio={self.sampling_ratio}, "
        s += f"pool_mode={self.pool_mode}, "
        s += f"aligned={self.aligned}, "
        s += f"use_torchvision={self.use_torchvision})"
        return s
