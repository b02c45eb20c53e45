"""dkit.nn: torch.nn.Module wrappers of dkit.ops (importing this module imports torch)."""

from torch import nn as _nn

from dkit import _C
from dkit import ops as _ops

__all__ = ["RoIAlign"]


class RoIAlign(_nn.Module):
    """RoI align pooling layer; see :func:`dkit.ops.roi_align` (MMCV's semantics and defaults).

    forward(input, rois) takes rois as a Tensor[K, 5] or a list of Tensor[L, 4]. Arguments are
    checked here, at construction, so a misconfigured layer fails where it is built.
    """

    def __init__(self, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True):
        super().__init__()
        self.output_size = _ops._output_size_slow(output_size)
        self.spatial_scale = _ops._float_slow(spatial_scale, "spatial_scale")
        self.sampling_ratio = _ops._int_slow(sampling_ratio, "sampling_ratio")
        if not -1 <= self.sampling_ratio < 2**31:  # the core's bounds (ops/roi_align.c)
            raise _C.DkitValueError(
                "roi_align: sampling_ratio must be >= -1 (<= 0 is adaptive) and below 2^31, "
                f"got {self.sampling_ratio}"
            )
        if pool_mode not in ("avg", "max"):
            _ops._bad_pool_mode(pool_mode)
        self.pool_mode = pool_mode
        self.aligned = bool(aligned)

    def forward(self, input, rois):
        return _ops.roi_align(
            input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.pool_mode, self.aligned
        )

    def extra_repr(self):
        return (
            f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, pool_mode={self.pool_mode!r}, aligned={self.aligned}"
        )

