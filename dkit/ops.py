"""dkit.ops: the operators, framework-neutral.

    y = dkit.ops.roi_align(x, boxes, 7, spatial_scale=0.25)   # torch, NumPy or any DLPack producer

Each op is written once, in its family's module under dkit/_ops/ (argument normalisation,
bounds, output shapes, forward and backward), against the framework protocol of
dkit/_frameworks/ (allocation, autograd), and re-exported here: these are the very functions,
with no wrapper frame in between.
"""

from dkit._ops.box_iou import bbox_overlaps, box_iou, complete_box_iou, distance_box_iou, generalized_box_iou
from dkit._ops.nms import batched_nms, nms, soft_nms
from dkit._ops.roi_align import roi_align
from dkit._ops.rotated import box_iou_rotated, nms_rotated

__all__ = [
    "roi_align",
    "nms",
    "batched_nms",
    "soft_nms",
    "box_iou_rotated",
    "nms_rotated",
    "box_iou",
    "generalized_box_iou",
    "distance_box_iou",
    "complete_box_iou",
    "bbox_overlaps",
]
