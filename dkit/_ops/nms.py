"""The NMS family: nms, batched_nms, soft_nms and nms_match (the same boxes, scores and outputs).

Written once against the framework protocol (Note [The framework protocol] in
dkit/_frameworks/__init__.py). dkit.ops re-exports them; dkit.compat.torchvision
and dkit.compat.mmcv wrap them in their libraries' signatures.

Note [Outputs sized to a bound, plus a count]
How many boxes survive depends on the values, so every op of this family follows the core's
convention (Note [Data-dependent output sizes] in ops/nms.h): the output is allocated for all N
boxes, the kernel writes how many it filled into a one-element int64 tensor, and the result is
fw.first_rows(keep, num), a view. Reading num is the one synchronisation a GPU caller pays; the
padded buffer costs 8 bytes per input box, which is less than the boxes themselves.

Note [Which checks are made where] (dkit/_ops/roi_align.py) holds here too: the core checks
ranks, widths, dtypes, devices and the 2^31 bound and names the parameter; Python checks only
argument types and what it needs to allocate.
"""

from dkit import _C
from dkit._ops import _examples, autocast_args, torch_op
from dkit._ops._args import tensor, tensor_pair, to_float

_nms_kernel = _C.ops.nms
_batched_nms_kernel = _C.ops.batched_nms
_soft_nms_kernel = _C.ops.soft_nms
_nms_match_kernel = _C.ops.nms_match

# MMCV's numbering (dk_soft_nms_method in csrc/common/kernels/nms_math.h).
_SOFT_NMS_METHODS = {"naive": 0, "linear": 1, "gaussian": 2}

# Categories the kernels read as they are; any other dtype is mapped to int64 codes first.
_CATEGORY_DTYPES = frozenset({"int64", "int32"})


# Box indices are C ints in torchvision's and MMCV's kernels; the core refuses 2^31 boxes too.
_LIMIT = 2**31


def _count(boxes, op):
    """N, the bound every output is sized to; 0 for a boxes tensor without rows (the core then
    says what is wrong with its shape). Refused from 2^31 on, before outputs of that size are
    allocated."""
    shape = boxes.shape
    n = shape[0] if len(shape) else 0
    if n >= _LIMIT:
        raise _C.DkitValueError(f"{op}: at most 2^31 - 1 boxes, got {n}")
    return n


def _categories(fw, idxs, op):
    idxs = tensor(fw, idxs, "idxs", op)
    if fw.dtype_name(idxs) not in _CATEGORY_DTYPES:
        # torchvision takes categories of any dtype (floats, uint8, bool) and compares them for
        # equality; codes of the distinct values keep exactly that partition.
        idxs = fw.category_codes(idxs)
    return idxs


@torch_op(
    "nms(Tensor boxes, Tensor scores, float iou_threshold, Tensor? idxs=None, int offset=0) -> Tensor",
    autocast=True,
    example=lambda rng: (*_examples.boxes(rng, 200), 0.5),
)
def nms(boxes, scores, iou_threshold, idxs=None, offset=0):
    """Non-maximum suppression, torchvision's rules.

    Visits boxes in decreasing score order (stable: equal scores keep the lower index first;
    NaN scores come first, as torch.sort(descending=True) puts them) and keeps a box unless a
    box kept before it has an IoU with it strictly greater than iou_threshold.

    Args:
        boxes: [N, 4] (x1, y1, x2, y2), float16, bfloat16 (computed in float32), float32 or
            float64; a torch.Tensor, numpy.ndarray or CPU DLPack producer. N < 2^31.
        scores: [N], the same dtype.
        iou_threshold: a float; NaN keeps every box.
        idxs: optional [N] categories (any dtype): boxes of different categories never suppress
            each other (batched_nms).
        offset: 0 (torchvision) or 1 (MMCV's legacy +1 pixel extents).

    Returns:
        int64 [K] indices of the kept boxes, in decreasing score order, in boxes' framework.

    Behaviour on unusual values (tested): a box with a NaN or infinite coordinate, or with
    x2 <= x1 or y2 <= y1 (an empty box), overlaps nothing, so it is kept when its score's turn
    comes and suppresses nothing; a NaN score sorts first.

    Raises (every class derives from RuntimeError): wrong shapes (boxes not [N, 4], scores not
    [N]), mismatched dtypes or devices, 2^31 boxes or more.
    """
    fw, boxes, scores = tensor_pair("nms", boxes, "boxes", scores, "scores")
    if type(iou_threshold) is not float:
        iou_threshold = to_float(iou_threshold, "iou_threshold", "nms")
    if idxs is not None:
        idxs = _categories(fw, idxs, "nms")
    n = _count(boxes, "nms")
    keep = fw.empty(boxes, (n,), "int64")
    num = fw.empty(boxes, (1,), "int64")
    try:
        _nms_kernel(boxes, scores, idxs, keep, num, iou_threshold, offset)
    except _C.DkitTypeError:
        cast = autocast_args(fw, boxes, scores)  # Note [Autocast] in dkit/_ops/__init__.py
        if cast is None:
            raise
        return nms(cast[0], cast[1], iou_threshold, idxs, offset)
    return fw.first_rows(keep, num)


@torch_op(
    "batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold) -> Tensor",
    autocast=True,
    example=lambda rng: (*_examples.boxes(rng, 200), rng.integers(0, 4, 200), 0.5),
)
def batched_nms(boxes, scores, idxs, iou_threshold):
    """NMS per category, in one call: torchvision.ops.batched_nms.

    Boxes of different categories (idxs, [N], any dtype) never suppress each other. Returns the
    kept indices in decreasing score order, as nms. Served by the batched_nms op, a composite
    over nms on every backend with nms (Note [batched_nms is nms with categories] in ops/nms.c).
    Unlike torchvision's coordinate trick (boxes shifted by category times the largest
    coordinate), categories are kept apart exactly, negative coordinates included.
    """
    fw, boxes, scores = tensor_pair("batched_nms", boxes, "boxes", scores, "scores")
    if type(iou_threshold) is not float:
        iou_threshold = to_float(iou_threshold, "iou_threshold", "batched_nms")
    idxs = _categories(fw, idxs, "batched_nms")
    n = _count(boxes, "batched_nms")
    keep = fw.empty(boxes, (n,), "int64")
    num = fw.empty(boxes, (1,), "int64")
    try:
        _batched_nms_kernel(boxes, scores, idxs, keep, num, iou_threshold)
    except _C.DkitTypeError:
        cast = autocast_args(fw, boxes, scores)  # Note [Autocast] in dkit/_ops/__init__.py
        if cast is None:
            raise
        return batched_nms(cast[0], cast[1], idxs, iou_threshold)
    return fw.first_rows(keep, num)


@torch_op(
    "soft_nms(Tensor boxes, Tensor scores, float iou_threshold=0.3, float sigma=0.5, float min_score=0.001, "
    "str method=\"linear\", int offset=0) -> (Tensor, Tensor)",
    example=lambda rng: (*_examples.boxes(rng, 200), 0.3, 0.5, 1e-3, "gaussian"),
)
def soft_nms(boxes, scores, iou_threshold=0.3, sigma=0.5, min_score=1e-3, method="linear", offset=0):
    """Soft-NMS (Bodla et al. 2017) as MMCV runs it: overlapping boxes lose score instead of
    being dropped.

    Repeatedly selects the highest remaining score (on ties, the box MMCV's in-place procedure
    meets first) and multiplies the score of every other remaining box by a factor of its IoU
    ovr with the selected one: 'linear' 1 - ovr when ovr >= iou_threshold, 'gaussian'
    exp(-ovr^2 / sigma), 'naive' 0 when ovr >= iou_threshold; boxes whose score falls below
    min_score are dropped. Computed in float32 for float16/bfloat16/float32 boxes (the
    thresholds rounded to it, as MMCV's float parameters), in float64 for float64 boxes.

    Args:
        boxes: [N, 4] (x1, y1, x2, y2); scores: [N], the same dtype (torch, NumPy or DLPack).
        offset: 0, or 1 for MMCV's legacy +1 pixel extents.

    Returns:
        (dets [K, 5] (x1, y1, x2, y2, decayed score) in boxes' dtype, inds int64 [K]), in the
        order selected (decreasing decayed score).
    """
    fw, boxes, scores = tensor_pair("soft_nms", boxes, "boxes", scores, "scores")
    code = _SOFT_NMS_METHODS.get(method) if type(method) is str else None
    if code is None:
        raise _C.DkitValueError(f"soft_nms: method must be 'linear', 'gaussian' or 'naive', got {method!r}")
    iou_threshold = to_float(iou_threshold, "iou_threshold", "soft_nms")
    sigma = to_float(sigma, "sigma", "soft_nms")
    min_score = to_float(min_score, "min_score", "soft_nms")
    n = _count(boxes, "soft_nms")
    dets = fw.empty(boxes, (n, 5), None)
    inds = fw.empty(boxes, (n,), "int64")
    num = fw.empty(boxes, (1,), "int64")
    _soft_nms_kernel(boxes, scores, dets, inds, num, iou_threshold, sigma, min_score, code, offset)
    return fw.first_rows(dets, num), fw.first_rows(inds, num)


@torch_op(
    "nms_match(Tensor boxes, Tensor scores, float iou_threshold) -> (Tensor, Tensor)",
    example=lambda rng: (*_examples.boxes(rng, 200), 0.5),
)
def nms_match(boxes, scores, iou_threshold):
    """MMCV's nms_match: NMS that also says which boxes each kept box suppressed.

    MMCV's rules (mmcv.ops.nms_match), which are not nms's: no +1 pixel offset, and a box takes a
    later one when their IoU is >= iou_threshold (nms: >), computed and compared in float32 for
    float16/bfloat16/float32 boxes (MMCV's float kernel; the threshold rounded to float32), in
    float64 for float64 boxes (which MMCV refuses). Boxes are visited in decreasing score order
    (stable, NaN first, as nms); a box not yet taken is kept and takes every later box not yet
    taken that it overlaps that much. Every box is in exactly one group.

    Args:
        boxes: [N, 4] (x1, y1, x2, y2); scores: [N], the same dtype (torch, NumPy or DLPack):
            MMCV's dets[:, :4] and dets[:, 4].
        iou_threshold: a float; NaN makes every box a group of its own, 0 groups every pair
            whose IoU is a number (0 included).

    Returns:
        (members, starts): int64 [N], the box indices group after group (each group its kept box
        first, then the boxes it took in score order; groups in score order), and int64 [G],
        where each group starts in members (Note [Outputs sized to a bound, plus a count]: starts
        is a view of an [N] buffer). Group g is members[starts[g]:starts[g + 1]], the last one
        ending at N; dkit.compat.mmcv.nms_match returns them as MMCV's list.
    """
    fw, boxes, scores = tensor_pair("nms_match", boxes, "boxes", scores, "scores")
    if type(iou_threshold) is not float:
        iou_threshold = to_float(iou_threshold, "iou_threshold", "nms_match")
    n = _count(boxes, "nms_match")
    members = fw.empty(boxes, (n,), "int64")
    starts = fw.empty(boxes, (n,), "int64")
    num = fw.empty(boxes, (1,), "int64")
    _nms_match_kernel(boxes, scores, members, starts, num, iou_threshold)
    return members, fw.first_rows(starts, num)
