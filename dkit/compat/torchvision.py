"""torchvision.ops.roi_align / RoIAlign, served by dkit.

Same signatures (annotations included), defaults (sampling_ratio=-1, aligned=False), outputs and
exception types as torchvision 0.14: malformed boxes raise AssertionError with torchvision's
messages, kernel-level checks raise RuntimeError subclasses. See dkit.compat for where dkit is
stricter than torchvision.
"""

from typing import List, Union

import torch
import torch.fx
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2

from dkit import ops as _ops
from dkit.compat import DkitAssertionError

__all__ = ["roi_align", "RoIAlign"]


def _check_roi_boxes_shape(boxes):
    # torchvision's check_roi_boxes_shape, as torch._assert (AssertionError) does it.
    if isinstance(boxes, (list, tuple)):
        for b in boxes:
            shape = getattr(b, "shape", ())
            if len(shape) < 2 or shape[1] != 4:
                raise DkitAssertionError("The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]")
    elif isinstance(boxes, torch.Tensor):
        if boxes.dim() < 2 or boxes.shape[1] != 5:
            raise DkitAssertionError("The boxes tensor shape is not correct as Tensor[K, 5]")
    else:
        raise DkitAssertionError("boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")


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
    _check_roi_boxes_shape(boxes)
    return _ops.roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)


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
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned})"
        )
