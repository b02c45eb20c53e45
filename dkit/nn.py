"""dkit.nn: torch.nn.Module wrappers of dkit.ops (importing this module imports torch)."""

from typing import List, Union

import torch
from torch import Tensor
from torch import nn as _nn

from dkit._ops import roi_align as _roi

__all__ = ["RoIAlign"]

_roi_align = _roi.roi_align

# torch.fx records the call of dkit's roi_align in forward as one call_function node, and
# TorchScript compiles forward's second branch (Note [Compat under TorchScript] in
# dkit/compat/torchvision.py).
torch.fx.wrap("_roi_align")

# Note [Module attributes in forward]
# Reading an attribute of a torch.nn.Module costs about three times what it costs on a plain
# object (Module's __getattr__ hook keeps Python 3.11 from specialising the read), and a
# layer's forward reads five on every call. The plain values a layer stores (sizes, scales,
# flags: no parameters, buffers or submodules) live in its instance __dict__, where
# Module.__setattr__ puts them, so forward looks them up there: one attribute read, then dict
# lookups. Assigning a new value to the attribute still takes effect at the next call.
# dkit.compat's modules do the same.


class RoIAlign(_nn.Module):
    """RoI align pooling layer; see :func:`dkit.ops.roi_align` (MMCV's semantics and defaults).

    forward(input, rois) takes rois as a Tensor[K, 5] or a list of Tensor[L, 4]. Arguments are
    checked here, at construction, so a misconfigured layer fails where it is built, and are
    stored normalised (output_size as an (int, int) pair, spatial_scale a float, sampling_ratio
    an int, aligned a bool), which forward passes on through dkit.ops' fast path.
    """

    def __init__(self, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True):
        super().__init__()
        (self.output_size, self.spatial_scale, self.sampling_ratio, self.pool_mode,
         self.aligned) = _roi.check_args(output_size, spatial_scale, sampling_ratio, pool_mode, aligned)  # fmt: skip

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        if not torch.jit.is_scripting():
            a = self.__dict__  # Note [Module attributes in forward]
            return _roi_align(input, rois, a["output_size"], a["spatial_scale"], a["sampling_ratio"], a["pool_mode"],
                              a["aligned"])  # fmt: skip
        if isinstance(rois, Tensor):
            return torch.ops.dkit.roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio,
                                            self.pool_mode, self.aligned)  # fmt: skip
        return torch.ops.dkit.roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio,
                                        self.pool_mode, self.aligned)  # fmt: skip

    def extra_repr(self):
        return (
            f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, pool_mode={self.pool_mode!r}, aligned={self.aligned}"
        )
