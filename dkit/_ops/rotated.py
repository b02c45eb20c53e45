"""The rotated-box family: box_iou_rotated and nms_rotated, box_iou_quadri and nms_quadri, with
MMCV's semantics.

Boxes are (cx, cy, w, h, angle), the angle in radians; with ``clockwise=True`` (MMCV's default)
a positive angle turns a box clockwise in image coordinates (y pointing down). The overlap of
two boxes is MMCV's single_box_iou_rotated, computed once for every backend in
csrc/common/kernels/rotated_math.h, except that the intersection is computed by clipping one box
by the other: exact to rounding where MMCV's hull of candidate points can be far off (one
rectangle written two ways: angle + pi, or w and h swapped with angle + pi/2, gave IoUs of 0.25
or 4.3), so an IoU is always within [0, 1] (Note [Clipping rotated boxes]; see that header for
precision, NaN, infinite and degenerate boxes). Everything here is written once against the
framework protocol (Note [The framework protocol] in dkit/_frameworks/__init__.py): torch
tensors give torch tensors, NumPy arrays (and other DLPack producers) give NumPy arrays.

Note [Rotated sizes]
MMCV's kernels index boxes with C ints, and dkit's core refuses 2^31 boxes or more
(ops/rotated.c). The count is checked here as well, before the
output is allocated (keep is sized to N) and before a read-only NumPy array would be copied: a
view of 2^31 rows must be refused at the cost of a shape lookup, not of a 40 GB allocation.
"""

from dkit import _C
from dkit._ops import _examples, torch_op
from dkit._ops._args import framework, tensor, to_bool, to_float

_LIMIT = 2**31

# MMCV's mode_flag, as ops/rotated.h.
_MODES = {"iou": 0, "iof": 1}

_iou_kernel = _C.ops.box_iou_rotated
_nms_kernel = _C.ops.nms_rotated
_quadri_iou_kernel = _C.ops.box_iou_quadri
_quadri_nms_kernel = _C.ops.nms_quadri

# What a box of each kind is: its width, and its values for error messages.
_ROTATED = (5, "(cx, cy, w, h, angle)")
_QUADRI = (8, "(x1, y1, ..., x4, y4)")


@torch_op(
    "box_iou_rotated(Tensor bboxes1, Tensor bboxes2, str mode=\"iou\", bool aligned=False, bool clockwise=True) "
    "-> Tensor",
    example=lambda rng: (_examples.rotated(rng, 40), _examples.rotated(rng, 10), "iou", False, True),
)
def box_iou_rotated(bboxes1, bboxes2, mode="iou", aligned=False, clockwise=True):
    """Overlaps of rotated boxes, as mmcv.ops.box_iou_rotated.

    Args:
        bboxes1: [N, 5] (cx, cy, w, h, angle in radians): float32 or float64 (MMCV: float32;
            float16 and bfloat16 are computed in float32), a torch.Tensor, a numpy.ndarray or
            any CPU object with ``__dlpack__``; any strides.
        bboxes2: [M, 5], the same dtype (and framework, or a DLPack producer).
        mode: 'iou' (intersection over union) or 'iof' (intersection over the area of the
            bboxes1 box).
        aligned: compare bboxes1[i] with bboxes2[i] only (N == M required; MMCV reads past
            the end of bboxes2 when N > M).
        clockwise: whether a positive angle turns a box clockwise (image coordinates);
            False negates every angle, as MMCV does.

    Returns:
        [N, M] (or [N] when aligned) in bboxes1's framework and dtype. Never differentiable
        (MMCV has no backward either).

    Raises (every class derives from RuntimeError as well as the builtin named):
        DkitValueError: an unknown mode, boxes that are not [K, 5], 2^31 boxes or more, aligned
            with N != M.
        DkitTypeError: bboxes1 and bboxes2 of different dtypes, a non-float dtype, a
            non-tensor, or non-bool flags.

    A box with w * h below 1e-14 (zero, negative or NaN) overlaps nothing (0), as in MMCV; a
    NaN or infinite coordinate gives 0 (or NaN for a NaN area), never a crash.
    """
    clockwise = to_bool(clockwise, "clockwise", "box_iou_rotated")
    return _overlaps("box_iou_rotated", _ROTATED, bboxes1, bboxes2, mode, aligned, _iou_kernel, (clockwise,))


@torch_op(
    "nms_rotated(Tensor dets, Tensor scores, float iou_threshold, Tensor? labels=None, bool clockwise=True) "
    "-> (Tensor, Tensor)",
    example=lambda rng: (_examples.rotated(rng, 40), _examples.boxes(rng, 40)[1], 0.2),
)
def nms_rotated(dets, scores, iou_threshold, labels=None, clockwise=True):
    """Non-maximum suppression of rotated boxes, as mmcv.ops.nms_rotated (its CPU kernel).

    Boxes are visited in decreasing score order (torch's sort: ties by index, NaN scores first);
    a box is kept unless a box kept before it has IoU >= iou_threshold with it (MMCV's CPU
    comparison; the threshold is rounded to float32, as MMCV's C float).

    Args:
        dets: [N, 5] (cx, cy, w, h, angle in radians), float32 or float64 (16-bit computed in
            float32); a torch.Tensor, a numpy.ndarray or a CPU DLPack producer.
        scores: [N], the same dtype.
        iou_threshold: a number.
        labels: optional [N] categories of any dtype (compared by value): boxes of different
            labels never suppress each other. Note: MMCV accepts ``labels`` but its kernels
            ignore them (they read the label column and compare boxes only), so
            dkit.compat.mmcv.nms_rotated ignores them too; here they mean what they say.
        clockwise: whether a positive angle turns a box clockwise (image coordinates).

    Returns:
        (dets_with_scores, keep): [K, 6], the kept boxes with their scores appended
        (``cat(dets[keep], scores[keep][:, None])``, dets' dtype), and [K] int64 indices into
        dets in decreasing score order, in dets' framework. MMCV returns ``(dets, None)`` for
        N == 0; dkit returns [0, 6] and an empty keep (dkit.compat.mmcv returns MMCV's).

    Raises: DkitValueError for shapes (and 2^31 boxes or more), DkitTypeError for dtypes and
    non-tensors.
    """
    clockwise = to_bool(clockwise, "clockwise", "nms_rotated")
    return _suppress("nms_rotated", _ROTATED, dets, scores, iou_threshold, labels, _nms_kernel, (clockwise,))


@torch_op(
    "box_iou_quadri(Tensor bboxes1, Tensor bboxes2, str mode=\"iou\", bool aligned=False) -> Tensor",
    example=lambda rng: (_examples.quadri(rng, 40), _examples.quadri(rng, 10), "iou", False),
)
def box_iou_quadri(bboxes1, bboxes2, mode="iou", aligned=False):
    """Overlaps of quadrilaterals, as mmcv.ops.box_iou_quadri, but exact for convex ones.

    Args:
        bboxes1: [N, 8] (x1, y1, ..., x4, y4), the four vertices in order, clockwise or
            counter-clockwise, any vertex first: float32 or float64 (float16 and bfloat16 are
            computed in float32), a torch.Tensor, a numpy.ndarray or any CPU ``__dlpack__``
            object; any strides.
        bboxes2: [M, 8], the same dtype.
        mode: 'iou' or 'iof' (intersection over the area of the bboxes1 quadrilateral).
        aligned: compare bboxes1[i] with bboxes2[i] only (N == M required).

    Returns:
        [N, M] (or [N] when aligned) in bboxes1's framework and dtype, every value within
        [0, 1]; one quadrilateral against itself written in another vertex order gives 1 (to
        rounding). Not differentiable (nor is MMCV's).

    MMCV's procedure (single_box_iou_quadri: both moved by the mean of their vertices, areas
    below 1e-14 overlap nothing) with an exact intersection: one quadrilateral clipped by the
    other's edges (Note [Quadrilaterals] in csrc/common/kernels/rotated_math.h). MMCV's own
    results differ where a quadrilateral is not a rectangle, because its test of a vertex lying
    inside the other box assumes a rectangle (its published case (1, 1, 3, 4, 4, 4, 4, 1)
    against the rectangle (2, 1, 2, 4, 4, 4, 4, 1) gives 1.0; the exact IoU, which dkit gives,
    is 0.778), and on near-coincident pairs (its hull sort's tolerance, as box_iou_rotated).
    Non-convex quadrilaterals are outside both libraries' definition: dkit gives a defined,
    finite result in [0, 1] (a's true area; a clipped by the lines of b's edges, i.e. against
    the part of b inside all four of them) that is not their intersection and depends on the
    argument order; self-intersecting ones ("bow ties") likewise.

    Raises: DkitValueError for an unknown mode, boxes that are not [K, 8], 2^31 boxes or more,
    aligned with N != M; DkitTypeError for dtypes and non-tensors.
    """
    return _overlaps("box_iou_quadri", _QUADRI, bboxes1, bboxes2, mode, aligned, _quadri_iou_kernel, ())


@torch_op(
    "nms_quadri(Tensor dets, Tensor scores, float iou_threshold, Tensor? labels=None) -> (Tensor, Tensor)",
    example=lambda rng: (_examples.quadri(rng, 40), _examples.boxes(rng, 40)[1], 0.2),
)
def nms_quadri(dets, scores, iou_threshold, labels=None):
    """Non-maximum suppression of quadrilaterals, as mmcv.ops.nms_quadri (its CPU kernel), with
    box_iou_quadri's exact overlap.

    Boxes are visited in decreasing score order (ties by index, NaN scores first); a box is
    kept unless a box kept before it has IoU >= iou_threshold with it (the threshold rounded to
    float32, as MMCV's C float). dets: [N, 8] (x1, y1, ..., x4, y4) as box_iou_quadri's;
    scores: [N], the same dtype; labels: optional [N] categories of any dtype: boxes of
    different labels never suppress each other (MMCV's CPU kernel ignores its labels, and
    dkit.compat.mmcv.nms_quadri does too).

    Returns:
        (dets_with_scores, keep): [K, 9], the kept boxes with their scores appended, and [K]
        int64 indices into dets, in decreasing score order. N == 0 gives [0, 9] and an empty
        keep (dkit.compat.mmcv returns MMCV's ``(dets, None)``).
    """
    return _suppress("nms_quadri", _QUADRI, dets, scores, iou_threshold, labels, _quadri_nms_kernel, ())


# ------------------------------------------------------------------------------------------
# Arguments


def _check_count(x, what, op):
    """Note [Rotated sizes]: 2^31 boxes are refused from the shape alone."""
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) >= 1 and shape[0] >= _LIMIT:
        raise _C.DkitValueError(f"{op}: '{what}' may hold at most 2^31 - 1 boxes, got {shape[0]}")


def _labels(fw, labels, dets):
    """Labels the kernel reads as they are (int32, int64, the dets' dtype), or else int64 codes of
    their distinct values (fw.category_codes: the same partition), as dkit.ops.nms's idxs. A
    labels tensor of the wrong shape keeps its shape, for the core to name."""
    name = fw.dtype_name(labels)
    if name in ("int64", "int32") or name == fw.dtype_name(dets) or len(labels.shape) != 1:
        return labels
    return fw.category_codes(labels)


def _check_boxes(t, what, op, kind):
    # The core checks ranks and widths too; the rows must exist before the output is allocated.
    if len(t.shape) != 2 or t.shape[1] != kind[0]:
        raise _C.DkitValueError(f"{op}: '{what}' must have shape [K, {kind[0]}] {kind[1]}, got {list(t.shape)}")


def _overlaps(op, kind, bboxes1, bboxes2, mode, aligned, kernel, extra):
    """box_iou_rotated's and box_iou_quadri's body: kernel(b1, b2, out, mode flag, aligned, *extra)."""
    flag = _MODES.get(mode) if type(mode) is str else None
    if flag is None:
        raise _C.DkitValueError(f"{op}: mode must be 'iou' or 'iof', got {mode!r}")
    aligned = to_bool(aligned, "aligned", op)
    _check_count(bboxes1, "bboxes1", op)
    _check_count(bboxes2, "bboxes2", op)
    fw = framework(bboxes1, "bboxes1", op)
    b1 = tensor(fw, bboxes1, "bboxes1", op)
    b2 = tensor(fw, bboxes2, "bboxes2", op)
    _check_boxes(b1, "bboxes1", op, kind)
    _check_boxes(b2, "bboxes2", op, kind)
    n, m = b1.shape[0], b2.shape[0]
    out = fw.new_empty(b1, (n,) if aligned else (n, m))
    kernel(b1, b2, out, flag, aligned, *extra)
    return out


def _suppress(op, kind, dets, scores, iou_threshold, labels, kernel, extra):
    """nms_rotated's and nms_quadri's body: kernel(dets, scores, labels, keep, num, thr, *extra)."""
    thr = iou_threshold if type(iou_threshold) is float else to_float(iou_threshold, "iou_threshold", op)
    _check_count(dets, "dets", op)
    fw = framework(dets, "dets", op)
    d = tensor(fw, dets, "dets", op)
    s = tensor(fw, scores, "scores", op)
    lab = None if labels is None else _labels(fw, tensor(fw, labels, "labels", op), d)
    _check_boxes(d, "dets", op, kind)
    n = d.shape[0]
    keep = fw.empty(d, (n,), "int64")
    num = fw.empty(d, (1,), "int64")
    kernel(d, s, lab, keep, num, thr, *extra)
    keep = fw.first_rows(keep, num[0])
    return fw.cat((d[keep], s[keep].reshape(-1, 1)), 1), keep
