"""The box-overlap family: torchvision's box_iou, generalized_box_iou, distance_box_iou and
complete_box_iou, and MMCV's bbox_overlaps. One op in the core (ops/box_iou.h: a `kind` says
which formula), one module here, written once against the framework protocol (Note [The
framework protocol] in dkit/_frameworks/__init__.py): argument normalisation, output shapes and
dtypes, and the errors. dkit.ops re-exports these functions; dkit.compat.torchvision and
dkit.compat.mmcv call them.

Note [Box-overlap dtypes]
torchvision's results are float32 for float16, bfloat16 and integer boxes (its _upcast; Note [16-bit
boxes] and Note [Integer boxes] in csrc/common/kernels/box_iou_math.h say exactly what is rounded
where), and of the boxes' dtype for float32 and float64. MMCV's bbox_overlaps writes into an
output of the boxes' dtype. dkit follows both, int8, uint8 and int16 boxes included
(torchvision upcasts them to int32 but takes two differences in their own dtype first, where they
wrap around: Note [Integer boxes]), and refuses instead of guessing:
  - bool boxes (torchvision cannot subtract them);
  - integer boxes in bbox_overlaps (MMCV truncates the overlaps into an integer output);
  - boxes1 and boxes2 of different dtypes (torch promotes them, but each box's area is computed
    in its own dtype first, a mixture no kernel reproduces; convert them to one dtype).

Note [No backward]
torchvision's box-overlap functions are torch expressions, so autograd differentiates them (DETR
uses generalized_box_iou in its loss). dkit's kernel computes values only; rather than return a
result silently cut off from the graph, a call whose boxes require grad (in grad mode) raises
DkitNotImplementedError. Call it under torch.no_grad() (or on detached boxes) to get the values.
"""

from dkit import _C
from dkit._ops import _examples, torch_op
from dkit._ops._args import tensor_pair, to_bool, to_float, to_int

# dk_box_kind (csrc/common/kernels/box_iou_math.h)
_IOU, _GIOU, _DIOU, _CIOU, _MMCV_IOU, _MMCV_IOF = range(6)

_MODES = {"iou": _MMCV_IOU, "iof": _MMCV_IOF}

# The output dtype by the boxes' dtype (Note [Box-overlap dtypes]).
_TV_OUT = {
    "float32": "float32",
    "float64": "float64",
    "float16": "float32",
    "bfloat16": "float32",
    "int8": "float32",
    "uint8": "float32",
    "int16": "float32",
    "int32": "float32",
    "int64": "float32",
}
_MMCV_OUT = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16"}

# Box counts are C ints in the references' kernels; the core refuses 2^31 and more, and so does
# Python, before allocating an output that large.
_LIMIT = 2**31

_kernel = _C.ops.box_iou



@torch_op(
    "box_iou(Tensor boxes1, Tensor boxes2) -> Tensor",
    example=lambda rng: (_examples.boxes(rng, 30)[0], _examples.boxes(rng, 40)[0]),
)
def box_iou(boxes1, boxes2):
    """Intersection over union of every pair, as torchvision.ops.box_iou.

    Args:
        boxes1: [N, 4] boxes (x1, y1, x2, y2): a torch.Tensor, a numpy.ndarray or any CPU
            ``__dlpack__`` object; float16, bfloat16, float32, float64, int8, uint8, int16, int32 or int64.
        boxes2: [M, 4] boxes of the same dtype and framework.

    Returns:
        [N, M] IoU values: float64 for float64 boxes, float32 otherwise (Note [Box-overlap
        dtypes]). The values are torchvision's, to the bit: NaN coordinates give NaN, and pairs
        whose union is 0 (two empty boxes) give NaN (0 / 0); boxes with x2 < x1 count a negative
        area in the union, as torchvision's do.

    Raises:
        DkitValueError: boxes that are not [K, 4]; 2^31 boxes or more.
        DkitTypeError: different dtypes, or a dtype listed in Note [Box-overlap dtypes].
        DkitNotImplementedError: boxes that require grad (Note [No backward]).
    """
    return _pairwise(boxes1, boxes2, _IOU, 0.0, "box_iou")


@torch_op(
    "generalized_box_iou(Tensor boxes1, Tensor boxes2) -> Tensor",
    example=lambda rng: (_examples.boxes(rng, 30)[0], _examples.boxes(rng, 40)[0]),
)
def generalized_box_iou(boxes1, boxes2):
    """Generalized IoU of every pair, as torchvision.ops.generalized_box_iou: IoU minus the
    part of the smallest enclosing box that the union leaves empty. See box_iou."""
    return _pairwise(boxes1, boxes2, _GIOU, 0.0, "generalized_box_iou")


@torch_op(
    "distance_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07) -> Tensor",
    example=lambda rng: (_examples.boxes(rng, 30)[0], _examples.boxes(rng, 40)[0], 1e-6),
)
def distance_box_iou(boxes1, boxes2, eps=1e-7):
    """Distance IoU of every pair, as torchvision.ops.distance_box_iou: IoU minus the squared
    distance of the centres over the squared diagonal of the enclosing box (plus eps). The
    boxes are upcast to float32 first (float64 stays). See box_iou."""
    return _pairwise(boxes1, boxes2, _DIOU, eps, "distance_box_iou")


@torch_op(
    "complete_box_iou(Tensor boxes1, Tensor boxes2, float eps=1e-07) -> Tensor",
    example=lambda rng: (_examples.boxes(rng, 30)[0], _examples.boxes(rng, 40)[0]),
)
def complete_box_iou(boxes1, boxes2, eps=1e-7):
    """Complete IoU of every pair, as torchvision.ops.complete_box_iou: distance IoU minus an
    aspect-ratio term. Equal to torchvision's within an ulp or two of its atan. See box_iou."""
    return _pairwise(boxes1, boxes2, _CIOU, eps, "complete_box_iou")


@torch_op(
    "bbox_overlaps(Tensor bboxes1, Tensor bboxes2, str mode=\"iou\", bool aligned=False, int offset=0) -> Tensor",
    example=lambda rng: (_examples.boxes(rng, 30)[0], _examples.boxes(rng, 40)[0], "iof", False, 1),
)
def bbox_overlaps(bboxes1, bboxes2, mode="iou", aligned=False, offset=0):
    """Overlaps of boxes, as mmcv.ops.bbox_overlaps (its CPU kernel's arithmetic).

    Args:
        bboxes1: [N, 4] boxes (x1, y1, x2, y2), float16 / bfloat16 / float32 / float64, or any
            empty tensor (N = 0).
        bboxes2: [M, 4] boxes of the same dtype, or empty.
        mode: "iou" (intersection over union) or "iof" (intersection over the area of the box
            of bboxes1).
        aligned: only the pairs (i, i); N must equal M.
        offset: 0, or 1 for the legacy convention whose boxes extend x2 - x1 + 1 pixels.

    Returns:
        [N, M] (aligned: [N]) in the boxes' dtype; when N or M is 0, an empty [N, M] (aligned:
        [N, 1]), as MMCV returns. MMCV has no batch dimensions here (mmdet's bbox_overlaps has).
        The values are those of MMCV's CPU kernel, to the bit: NaN coordinates give NaN, a zero
        denominator gives NaN or inf (MMCV's CUDA kernel divides by max(denominator, offset)
        instead, csrc/common/kernels/box_iou_math.h).

    Raises:
        DkitValueError: an unknown mode, an offset other than 0 and 1, boxes that are neither
            [K, 4] nor empty, aligned sets of different sizes, 2^31 boxes or more.
        DkitTypeError: different dtypes, integer boxes.
    """
    op = "bbox_overlaps"
    kind = _MODES.get(mode) if type(mode) is str else None
    if kind is None:
        raise _C.DkitValueError(f"{op}: mode must be 'iou' or 'iof', got {mode!r}")
    if type(offset) is not int:
        offset = to_int(offset, "offset", op)
    if offset != 0 and offset != 1:
        raise _C.DkitValueError(f"{op}: offset must be 0 or 1, got {offset}")
    if aligned is not True and aligned is not False:
        aligned = to_bool(aligned, "aligned", op)
    fw, bboxes1, bboxes2 = _tensors(bboxes1, bboxes2, op, "bboxes1", "bboxes2")
    s1, s2 = bboxes1.shape, bboxes2.shape
    rows = _rows(s1, "bboxes1", op, True)
    cols = _rows(s2, "bboxes2", op, True)
    if aligned and rows != cols:
        raise _C.DkitValueError(f"{op}: aligned needs as many boxes in bboxes2 as in bboxes1, got {rows} and {cols}")
    if rows == 0 or cols == 0:
        return fw.new_empty(bboxes1, (rows, 1) if aligned else (rows, cols))
    name1 = fw.dtype_name(bboxes1)
    if _MMCV_OUT.get(name1) is None or fw.dtype_name(bboxes2) != name1:
        _dtype_error(fw, bboxes1, bboxes2, op, ("bboxes1", "bboxes2"), _MMCV_OUT)
    out = fw.new_empty(bboxes1, (rows,) if aligned else (rows, cols))
    _kernel(bboxes1, bboxes2, out, kind, aligned, 0.0, offset)
    return out


# ------------------------------------------------------------------------------------------


def _pairwise(boxes1, boxes2, kind, eps, op):
    """torchvision's four: [N, M] from [N, 4] and [M, 4]."""
    if type(eps) is not float:
        eps = to_float(eps, "eps", op)
    fw, boxes1, boxes2 = _tensors(boxes1, boxes2, op, "boxes1", "boxes2")
    n = _rows(boxes1.shape, "boxes1", op, False)
    m = _rows(boxes2.shape, "boxes2", op, False)
    name1 = fw.dtype_name(boxes1)
    odt = _TV_OUT.get(name1)
    if odt is None or fw.dtype_name(boxes2) != name1:
        _dtype_error(fw, boxes1, boxes2, op, ("boxes1", "boxes2"), _TV_OUT)
    out = fw.empty(boxes1, (n, m), odt)
    _kernel(boxes1, boxes2, out, kind, False, eps, 0)
    return out


def _tensors(a, b, op, name_a, name_b):
    """(framework, a, b): both as tensors of a's framework, that do not need autograd."""
    fw, a, b = tensor_pair(op, a, name_a, b, name_b, " [K, 4] (x1, y1, x2, y2)")
    if fw.wants_grad(a) or fw.wants_grad(b):
        raise _C.DkitNotImplementedError(
            f"{op}: dkit computes no gradient of box overlaps; call it under torch.no_grad() or on detached "
            f"boxes (Note [No backward] in dkit/_ops/box_iou.py)"
        )
    return fw, a, b


def _rows(shape, name, op, empty_ok):
    """K of boxes [K, 4] (and of any empty tensor when empty_ok, as MMCV takes them)."""
    if len(shape) == 2 and shape[1] == 4:
        k = shape[0]
    elif empty_ok and len(shape) >= 1 and shape[0] == 0:
        return 0
    else:
        raise _C.DkitValueError(f"{op}: {name} must have shape [K, 4] (x1, y1, x2, y2), got {list(shape)}")
    if k >= _LIMIT:
        raise _C.DkitValueError(f"{op}: at most 2^31 - 1 boxes in {name}, got {k}")
    return k


def _dtype_error(fw, a, b, op, names, table):
    da, db = fw.dtype_name(a), fw.dtype_name(b)
    if da not in table:
        allowed = list(table)
        raise _C.DkitTypeError(
            f"{op}: {names[0]} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {da} "
            f"(Note [Box-overlap dtypes] in dkit/_ops/box_iou.py)"
        )
    raise _C.DkitTypeError(
        f"{op}: {names[0]} and {names[1]} must have the same dtype, got {da} and {db}; convert them to one dtype"
    )
