"""box_iou_rotated and nms_rotated, box_iou_quadri and nms_quadri (dkit.ops and dkit.compat.mmcv):
MMCV's published test vectors, an independent polygon clipper on random boxes, an exact rational
reference, a greedy NMS reference, torchvision's box_iou at angle 0, NumPy and torch alike,
hostile values and refusals."""

import inspect
import math

import numpy as np
import pytest

import dkit
from dkit import _C

torch = pytest.importorskip("torch")

from dkit.compat import DkitAssertionError  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402

# ------------------------------------------------------------------------------------------
# MMCV's vectors (mmcv tests/test_ops/test_box_iou_rotated.py and test_nms_rotated.py)

B1 = np.asarray([[1.0, 1.0, 3.0, 4.0, 0.5], [2.0, 2.0, 3.0, 4.0, 0.6], [7.0, 7.0, 8.0, 8.0, 0.4]], np.float32)
B2 = np.asarray([[0.0, 2.0, 2.0, 5.0, 0.3], [2.0, 1.0, 3.0, 3.0, 0.5], [5.0, 5.0, 6.0, 7.0, 0.4]], np.float32)
IOU = np.asarray([[0.3708, 0.4351, 0.0000], [0.1104, 0.4487, 0.0424], [0.0000, 0.0000, 0.3622]], np.float32)
IOU_ALIGNED = np.asarray([0.3708, 0.4487, 0.3622], np.float32)
IOF = np.asarray([[0.4959, 0.5306, 0.0000], [0.1823, 0.5420, 0.1832], [0.0000, 0.0000, 0.4404]], np.float32)
IOF_ALIGNED = np.asarray([0.4959, 0.5420, 0.4404], np.float32)

NMS_BOXES = np.array(
    [[6.0, 3.0, 8.0, 7.0, 0.5, 0.7], [3.0, 6.0, 9.0, 11.0, 0.6, 0.8], [3.0, 7.0, 10.0, 12.0, 0.3, 0.5],
     [1.0, 4.0, 13.0, 7.0, 0.6, 0.9]], np.float32)  # fmt: skip
NMS_LABELS = np.array([1, 0, 1, 0], np.float32)
NMS_DETS = np.array([[1.0, 4.0, 13.0, 7.0, 0.6], [3.0, 6.0, 9.0, 11.0, 0.6], [6.0, 3.0, 8.0, 7.0, 0.5]], np.float32)
NMS_KEEP = np.array([3, 1, 0], np.int64)
# MMCV's batched_nms(class_agnostic=False) expectation: what per-label suppression keeps
NMS_KEEP_BY_LABEL = np.array([3, 1, 0, 2], np.int64)


def _np(x):
    return x.numpy() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("lib", ["ops", "compat"])
@pytest.mark.parametrize("fw", ["torch", "numpy"])
@pytest.mark.parametrize("mode, full, aligned_expect", [("iou", IOU, IOU_ALIGNED), ("iof", IOF, IOF_ALIGNED)])
def test_box_iou_rotated_mmcv_vectors(lib, fw, mode, full, aligned_expect):
    if lib == "compat" and fw == "numpy":
        pytest.skip("MMCV takes torch tensors only")
    f = dkit.ops.box_iou_rotated if lib == "ops" else dk_mmcv.box_iou_rotated
    b1, b2 = B1.copy(), B2.copy()
    if fw == "torch":
        b1, b2 = torch.from_numpy(b1), torch.from_numpy(b2)
    out = f(b1, b2, mode=mode)
    assert type(out) is type(b1) and out.dtype == b1.dtype and tuple(out.shape) == (3, 3)
    np.testing.assert_allclose(_np(out), full, atol=1e-4)
    np.testing.assert_allclose(_np(f(b1, b2, mode=mode, aligned=True)), aligned_expect, atol=1e-4)
    # counter-clockwise angles
    b1[..., -1] *= -1
    b2[..., -1] *= -1
    np.testing.assert_allclose(_np(f(b1, b2, mode=mode, clockwise=False)), full, atol=1e-4)
    np.testing.assert_allclose(_np(f(b1, b2, mode=mode, aligned=True, clockwise=False)), aligned_expect, atol=1e-4)


@pytest.mark.parametrize("with_labels", [False, True])
def test_nms_rotated_mmcv_vectors(with_labels):
    boxes = torch.from_numpy(NMS_BOXES.copy())
    labels = torch.from_numpy(NMS_LABELS) if with_labels else None
    dets, keep = dk_mmcv.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, labels)
    np.testing.assert_allclose(dets.numpy()[:, :5], NMS_DETS)
    np.testing.assert_array_equal(keep.numpy(), NMS_KEEP)
    assert keep.dtype == torch.int64 and dets.shape == (3, 6)
    np.testing.assert_array_equal(dets[:, 5].numpy(), boxes[keep, -1].numpy())
    # counter-clockwise
    boxes[..., -2] *= -1
    dets, keep = dk_mmcv.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, labels, clockwise=False)
    dets[..., -2] *= -1
    np.testing.assert_allclose(dets.numpy()[:, :5], NMS_DETS)
    np.testing.assert_array_equal(keep.numpy(), NMS_KEEP)


@pytest.mark.parametrize("fw", ["torch", "numpy"])
def test_nms_rotated_ops_labels_separate_categories(fw):
    boxes, labels = NMS_BOXES.copy(), NMS_LABELS.copy()
    if fw == "torch":
        boxes, labels = torch.from_numpy(boxes), torch.from_numpy(labels)
    dets, keep = dkit.ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5)
    np.testing.assert_array_equal(_np(keep), NMS_KEEP)
    assert type(dets) is type(boxes)
    # dkit's labels: boxes of different labels never suppress each other (MMCV ignores them)
    dets, keep = dkit.ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, labels=labels)
    np.testing.assert_array_equal(_np(keep), NMS_KEEP_BY_LABEL)
    np.testing.assert_array_equal(_np(dets)[:, :5], _np(boxes)[NMS_KEEP_BY_LABEL, :5])
    int_labels = labels.long() if fw == "torch" else labels.astype(np.int64)
    np.testing.assert_array_equal(_np(dkit.ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, int_labels)[1]),
                                  NMS_KEEP_BY_LABEL)  # fmt: skip
    # labels of any other dtype: compared by value (codes of their distinct values)
    other = labels.to(torch.uint8) if fw == "torch" else labels.astype(np.float64)
    np.testing.assert_array_equal(_np(dkit.ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, other)[1]),
                                  NMS_KEEP_BY_LABEL)  # fmt: skip


def test_mmcv_batched_nms_with_nms_rotated():
    # MMCV's test_batched_nms (tests/test_ops/test_nms_rotated.py)
    boxes, scores, labels = (torch.from_numpy(x) for x in (NMS_BOXES[:, :5], NMS_BOXES[:, -1], NMS_LABELS))
    cfg = dict(type="nms_rotated", iou_threshold=0.5)
    dets, keep = dk_mmcv.batched_nms(boxes, scores, labels, cfg, class_agnostic=True)
    np.testing.assert_allclose(dets.numpy()[:, :5], NMS_DETS)
    np.testing.assert_array_equal(keep.numpy(), NMS_KEEP)
    dets, keep = dk_mmcv.batched_nms(boxes, scores, labels, cfg, class_agnostic=False)
    np.testing.assert_allclose(dets.numpy()[:, :5], NMS_BOXES[NMS_KEEP_BY_LABEL, :5])
    np.testing.assert_array_equal(keep.numpy(), NMS_KEEP_BY_LABEL)
    assert dets.shape == (4, 6)
    np.testing.assert_array_equal(dets[:, 5].numpy(), NMS_BOXES[NMS_KEEP_BY_LABEL, 5])


# ------------------------------------------------------------------------------------------
# An independent reference: Sutherland-Hodgman clipping of the exact corners, in double


def _corners(b, clockwise=True):
    cx, cy, w, h, a = (float(v) for v in b)
    a = a if clockwise else -a
    c, s = math.cos(a), math.sin(a)
    pts = [(-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)]
    return [(cx + c * x - s * y, cy + s * x + c * y) for x, y in pts]


def _area(poly):
    n = len(poly)
    return abs(sum(poly[i][0] * poly[(i + 1) % n][1] - poly[(i + 1) % n][0] * poly[i][1] for i in range(n))) / 2


def _clip(subject, clipper):
    out = subject
    for k in range(len(clipper)):
        (ax, ay), (bx, by) = clipper[k], clipper[(k + 1) % len(clipper)]
        src, out = out, []
        for i in range(len(src)):
            p, q = src[i], src[(i + 1) % len(src)]
            sp = (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)
            sq = (bx - ax) * (q[1] - ay) - (by - ay) * (q[0] - ax)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
        if not out:
            break
    return out


def ref_overlap(a, b, mode="iou", clockwise=True):
    inter = _clip(_corners(a, clockwise), _corners(b, clockwise))
    inter = _area(inter) if len(inter) >= 3 else 0.0
    a1, a2 = float(a[2]) * float(a[3]), float(b[2]) * float(b[3])
    return inter / (a1 if mode == "iof" else a1 + a2 - inter)


def _random_boxes(rng, n, span=50.0, lo=1.0, hi=30.0, dtype=np.float64):
    b = np.empty((n, 5))
    b[:, :2] = rng.uniform(0, span, (n, 2))
    b[:, 2:4] = rng.uniform(lo, hi, (n, 2))
    b[:, 4] = rng.uniform(-math.pi, math.pi, n)
    return b.astype(dtype)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 2e-4)])
@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("clockwise", [True, False])
def test_box_iou_rotated_against_clipping(dtype, tol, mode, clockwise):
    rng = np.random.default_rng(3)
    b1, b2 = _random_boxes(rng, 30, dtype=dtype), _random_boxes(rng, 20, dtype=dtype)
    b1[:5, :2] += 10000  # far from the origin: MMCV's centre shift keeps the precision
    b2[:3, :2] += 10000
    out = dkit.ops.box_iou_rotated(b1, b2, mode, clockwise=clockwise)
    want = np.array([[ref_overlap(a, b, mode, clockwise) for b in b2] for a in b1])
    assert (want > 0).sum() > 50  # the case overlaps enough to mean something
    np.testing.assert_allclose(out, want, atol=tol, rtol=0)


def test_box_iou_rotated_is_a_grid_estimate_too():
    # A third opinion, by counting: the fraction of a fine grid inside both boxes.
    a, b = np.array([0.0, 0.0, 6.0, 3.0, 0.4]), np.array([1.0, 0.5, 4.0, 5.0, -0.9])
    xs = np.linspace(-6, 6, 1201)
    x, y = np.meshgrid(xs, xs)

    def inside(box):
        cx, cy, w, h, t = box
        u = (x - cx) * math.cos(t) + (y - cy) * math.sin(t)
        v = -(x - cx) * math.sin(t) + (y - cy) * math.cos(t)
        return (abs(u) <= w / 2) & (abs(v) <= h / 2)

    cell = (xs[1] - xs[0]) ** 2
    inter = (inside(a) & inside(b)).sum() * cell
    iou = dkit.ops.box_iou_rotated(a[None], b[None])[0, 0]
    assert abs(iou - inter / (18 + 20 - inter)) < 2e-3


# ------------------------------------------------------------------------------------------
# One rectangle written two ways (Note [Clipping rotated boxes] in kernels/rotated_math.h): an
# exact reference by another method, in rational arithmetic, so that its only error is in the
# corners' cos and sin: every point of the intersection polygon is a corner of one box inside
# the other or a crossing of two edges; their convex hull (monotone chain) is the polygon.


def _exact_overlap(a, b, mode="iou"):
    from fractions import Fraction as F

    a1, a2 = F(float(a[2])) * F(float(a[3])), F(float(b[2])) * F(float(b[3]))
    return _exact_polygon_overlap(_corners(a), _corners(b), a1, a2, mode)


def _exact_polygon_overlap(a, b, a1, a2, mode="iou"):
    """The overlap of convex quadrilaterals a and b (lists of four points, either direction) of
    areas a1 and a2, in rational arithmetic."""
    from fractions import Fraction as F

    pa = [(F(x), F(y)) for x, y in a]
    pb = [(F(x), F(y)) for x, y in b]

    def cross(o, p, q):
        return (p[0] - o[0]) * (q[1] - o[1]) - (p[1] - o[1]) * (q[0] - o[0])

    def inside(pt, poly):
        signs = [cross(poly[i], poly[(i + 1) % 4], pt) for i in range(4)]
        return all(v >= 0 for v in signs) or all(v <= 0 for v in signs)

    pts = {p for p in pa if inside(p, pb)} | {p for p in pb if inside(p, pa)}
    for i in range(4):
        p, p2 = pa[i], pa[(i + 1) % 4]
        for j in range(4):
            q, q2 = pb[j], pb[(j + 1) % 4]
            d = (p2[0] - p[0]) * (q2[1] - q[1]) - (p2[1] - p[1]) * (q2[0] - q[0])
            if d == 0:
                continue  # parallel: their shared points are corners, found above
            t = ((q[0] - p[0]) * (q2[1] - q[1]) - (q[1] - p[1]) * (q2[0] - q[0])) / d
            u = ((q[0] - p[0]) * (p2[1] - p[1]) - (q[1] - p[1]) * (p2[0] - p[0])) / d
            if 0 <= t <= 1 and 0 <= u <= 1:
                pts.add((p[0] + t * (p2[0] - p[0]), p[1] + t * (p2[1] - p[1])))
    pts = sorted(pts)
    inter = F(0)
    if len(pts) >= 3:
        hull = []
        for seq in (pts, pts[::-1]):  # lower and upper chains
            chain = []
            for pt in seq:
                while len(chain) >= 2 and cross(chain[-2], chain[-1], pt) <= 0:
                    chain.pop()
                chain.append(pt)
            hull += chain[:-1]
        inter = abs(sum(hull[i][0] * hull[(i + 1) % len(hull)][1] - hull[(i + 1) % len(hull)][0] * hull[i][1]
                        for i in range(len(hull)))) / 2  # fmt: skip
    return float(inter / (a1 if mode == "iof" else a1 + a2 - inter))


def _twins(rng, n, dtype):
    """Boxes and the same rectangles written another way: angle + pi, or w and h swapped with
    angle + pi/2, or angle - pi (rounded to the dtype, so the same up to that rounding)."""
    b = _random_boxes(rng, n, span=60, lo=0.5, hi=40).astype(dtype)
    t = b.copy()
    k = rng.integers(0, 3, n)
    t[k == 0, 4] += np.pi
    t[k == 1, 2], t[k == 1, 3] = b[k == 1, 3], b[k == 1, 2]
    t[k == 1, 4] += np.pi / 2
    t[k == 2, 4] -= np.pi
    return b, t


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 5e-5)])
def test_a_box_against_its_twin_gives_one(dtype, tol):
    # the cases: IoUs of 2.2, 0.25 and 4.33 before
    cases = [
        ([0, 0, 6, 5, 0], [0, 0, 6, 5, math.pi], np.float32),
        ([25, 25, 20, 10, 0.3 + math.pi], [25, 25, 20, 10, 0.3], np.float32),
        ([10, 5, 10, 10, math.pi], [10, 5, 10, 10, math.pi / 2], np.float64),
    ]
    for a, b, dt in cases:
        got = dkit.ops.box_iou_rotated(np.array([a], dt), np.array([b], dt))[0, 0]
        assert abs(got - 1) < (1e-6 if dt == np.float32 else 1e-12), (a, b, got)
    rng = np.random.default_rng(11)
    b, t = _twins(rng, 3000, dtype)
    got = dkit.ops.box_iou_rotated(b, t, aligned=True)
    assert np.abs(got - 1).max() < (1e-4 if dtype == np.float32 else 1e-12)
    # and to the exact overlap of the rectangles as written (float32 angles move the twin a little)
    want = [_exact_overlap(b[i], t[i]) for i in range(150)]
    np.testing.assert_allclose(got[:150], want, atol=tol, rtol=0)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 5e-5)])
@pytest.mark.parametrize("mode", ["iou", "iof"])
def test_box_iou_rotated_is_exact_near_coincidence(dtype, tol, mode):
    # near-coincident pairs (twins moved by small amounts), where hull-based kernels fail, and
    # random pairs: against the exact rational reference, and never outside [0, 1]
    rng = np.random.default_rng(12)
    b, t = _twins(rng, 400, dtype)
    t = t + (rng.normal(0, 1, t.shape) * (10.0 ** rng.integers(-9, 0, (len(t), 1)))).astype(dtype)
    t[:, 2:4] = np.abs(t[:, 2:4])
    r1, r2 = _random_boxes(rng, 400, span=60, lo=0.5, hi=40, dtype=dtype), _random_boxes(rng, 400, span=60, dtype=dtype)
    for x, y in ((b, t), (r1, r2)):
        got = dkit.ops.box_iou_rotated(x, y, mode, aligned=True)
        assert got.min() >= 0 and got.max() <= 1
        want = [_exact_overlap(x[i], y[i], mode) for i in range(0, len(x), 4)]
        np.testing.assert_allclose(got[::4], want, atol=tol, rtol=0)
    full = dkit.ops.box_iou_rotated(np.concatenate([b, r1]), np.concatenate([t, r2]), mode)
    assert full.min() >= 0 and full.max() <= 1


def test_nms_rotated_drops_a_box_written_two_ways():
    rng = np.random.default_rng(13)
    for dtype in (np.float32, np.float64):
        b, t = _twins(rng, 200, dtype)
        dets = np.concatenate([b, t])
        scores = rng.uniform(0, 1, 400).astype(dtype)
        keep = dkit.ops.nms_rotated(dets, scores, 0.99)[1].tolist()
        kept = {i % 200 for i in keep}
        assert len(keep) == len(kept)  # never both ways of one rectangle
        assert len(kept) > 150  # distinct rectangles rarely overlap at 0.99


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_angle_zero_is_torchvision_box_iou(dtype):
    tv = pytest.importorskip("torchvision.ops")
    rng = np.random.default_rng(4)
    b1 = torch.from_numpy(_random_boxes(rng, 40, span=100)).to(dtype)
    b2 = torch.from_numpy(_random_boxes(rng, 30, span=100)).to(dtype)
    b1[:, 4] = 0
    b2[:, 4] = 0

    def xyxy(b):
        return torch.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2],
                           1)

    want = tv.box_iou(xyxy(b1.double()), xyxy(b2.double()))
    got = dkit.ops.box_iou_rotated(b1, b2)
    assert (want > 0).sum() > 30
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_sixteen_bit_and_strided_inputs():
    rng = np.random.default_rng(5)
    b1 = torch.from_numpy(_random_boxes(rng, 20, span=30)).float()
    b2 = torch.from_numpy(_random_boxes(rng, 10, span=30)).float()
    ref = dkit.ops.box_iou_rotated(b1, b2)
    for dt, tol in ((torch.float16, 2e-2), (torch.bfloat16, 6e-2)):
        got = dkit.ops.box_iou_rotated(b1.to(dt), b2.to(dt))
        assert got.dtype == dt
        torch.testing.assert_close(got.float(), ref, atol=tol, rtol=0)
    # non-contiguous views are read in place and give the same bits
    wide = torch.zeros(20, 9)
    wide[:, ::2][:, :5] = b1
    view = wide[:, ::2][:, :5]
    assert not view.is_contiguous()
    assert torch.equal(dkit.ops.box_iou_rotated(view, b2), ref)
    assert torch.equal(dkit.ops.box_iou_rotated(b1, b2.t().contiguous().t()), ref)


@pytest.mark.threads
def test_threads_give_the_same_bits():
    rng = np.random.default_rng(6)
    b1, b2 = _random_boxes(rng, 300, span=200), _random_boxes(rng, 200, span=200)
    before = dkit.get_num_threads()
    try:
        dkit.set_num_threads(1)
        one = dkit.ops.box_iou_rotated(b1, b2)
        dkit.set_num_threads(2)
        two = dkit.ops.box_iou_rotated(b1, b2)
    finally:
        dkit.set_num_threads(0 if before is None else before)
    assert np.array_equal(one, two)


# ------------------------------------------------------------------------------------------
# nms_rotated against a greedy reference over dkit's own IoU matrix


def ref_nms(dets, scores, thr, labels=None, overlaps=dkit.ops.box_iou_rotated):
    """MMCV's CPU loop: torch's descending order, IoU(kept, candidate) >= float32(thr), the IoUs
    from overlaps (box_iou_rotated, or box_iou_quadri for nms_quadri)."""
    d, s = torch.as_tensor(dets), torch.as_tensor(scores)
    order = torch.sort(s, descending=True, stable=True)[1].tolist()
    iou = overlaps(d, d).double().numpy()  # iou[i, j]: box i first, as the kernel
    thr = float(np.float32(thr))
    suppressed, keep = set(), []
    for a, i in enumerate(order):
        if i in suppressed:
            continue
        keep.append(i)
        for j in order[a + 1:]:
            if j not in suppressed and (labels is None or labels[i] == labels[j]) and iou[i, j] >= thr:
                suppressed.add(j)
    return keep


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("thr", [0.1, 0.3, 0.5, 0.7, 0.0, -0.5])
def test_nms_rotated_against_greedy_reference(dtype, thr):
    rng = np.random.default_rng(int(thr * 10) + 20)
    n = 400
    dets = _random_boxes(rng, n, span=300, lo=5, hi=60, dtype=dtype)
    # clusters of near-duplicates, as a detector's proposals are
    dets[n // 2:] = dets[: n // 2] + rng.normal(0, [2, 2, 3, 3, 0.1], (n // 2, 5)).astype(dtype)
    dets[:, 2:4] = np.abs(dets[:, 2:4])
    scores = rng.uniform(0, 1, n).astype(dtype)
    scores[::23] = 0.5  # ties
    labels = rng.integers(0, 3, n)
    for lab in (None, labels):
        for fw in (torch.from_numpy, lambda x: x):
            out, keep = dkit.ops.nms_rotated(fw(dets), fw(scores), thr, labels=None if lab is None else fw(lab))
            want = ref_nms(dets, scores, thr, lab)
            assert _np(keep).tolist() == want
            np.testing.assert_array_equal(_np(out), np.concatenate([dets[want], scores[want, None]], 1))


def test_nms_rotated_hostile_values():
    dets = np.array([[0, 0, 4, 4, 0], [0, 0, 4, 4, 0], [np.nan, 0, 4, 4, 0], [0, 0, np.inf, 4, 0],
                     [np.inf, 0, 4, 4, 0], [0, 0, 0, 4, 0], [1, 1, 4, 4, np.nan], [0.5, 0, 4, 4, 0.1]],
                    np.float32)  # fmt: skip
    scores = np.array([0.9, 0.8, np.nan, 0.6, 0.5, 0.4, 0.3, 0.2], np.float32)
    for thr in (0.3, 0.0, float("nan"), float("inf")):
        keep = dkit.ops.nms_rotated(dets, scores, thr)[1]
        assert keep.tolist() == ref_nms(dets, scores, thr)
    # NaN score first (torch's order); a NaN threshold keeps everything
    assert dkit.ops.nms_rotated(dets, scores, float("nan"))[1].tolist() == [2, 0, 1, 3, 4, 5, 6, 7]
    # the duplicate of box 0 goes; the degenerate box (w = 0) overlaps nothing and stays
    keep = dkit.ops.nms_rotated(dets, scores, 0.3)[1].tolist()
    assert 1 not in keep and 5 in keep


def test_box_iou_rotated_hostile_values():
    a = np.array([[0, 0, 2, 2, 0]], np.float64)
    bad = np.array([[0, 0, 0, 2, 0], [np.nan, 0, 2, 2, 0], [np.inf, 0, 2, 2, 0], [0, 0, 2, 2, np.nan],
                    [0, 0, np.inf, 2, 0], [0, 0, -2, -2, 0]])  # fmt: skip
    out = dkit.ops.box_iou_rotated(a, bad)
    assert out[0, :4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert not np.isfinite(out[0, 4]) or out[0, 4] == 0  # an infinite area: NaN or 0, never a crash
    assert out[0, 5] == pytest.approx(1.0)  # w, h both negative: MMCV's area is positive; same box


# ------------------------------------------------------------------------------------------
# Signatures, returns, refusals


def test_compat_signatures_are_mmcv_s():
    p = inspect.signature(dk_mmcv.nms_rotated).parameters
    assert list(p) == ["dets", "scores", "iou_threshold", "labels", "clockwise"]
    assert p["labels"].default is None and p["clockwise"].default is True
    p = inspect.signature(dk_mmcv.box_iou_rotated).parameters
    assert list(p) == ["bboxes1", "bboxes2", "mode", "aligned", "clockwise"]
    assert [p[k].default for k in ("mode", "aligned", "clockwise")] == ["iou", False, True]
    assert dkit.ops.nms_rotated is not None and dkit.ops.box_iou_rotated is not None


def test_empty_inputs():
    e = torch.zeros(0, 5)
    dets, keep = dk_mmcv.nms_rotated(e, torch.zeros(0), 0.5)
    assert dets is e and keep is None  # MMCV's return for no boxes
    dets, keep = dkit.ops.nms_rotated(e, torch.zeros(0), 0.5)
    assert dets.shape == (0, 6) and keep.shape == (0,) and keep.dtype == torch.int64
    assert dkit.ops.box_iou_rotated(e, torch.zeros(3, 5)).shape == (0, 3)
    assert dkit.ops.box_iou_rotated(torch.zeros(2, 5), e).shape == (2, 0)
    assert dkit.ops.box_iou_rotated(e, e, aligned=True).shape == (0,)


def test_bad_input():
    b = torch.zeros(3, 5)
    with pytest.raises(DkitAssertionError):
        dk_mmcv.box_iou_rotated(b, b, mode="giou")
    with pytest.raises(ValueError, match="mode must be 'iou' or 'iof'"):
        dkit.ops.box_iou_rotated(b, b, mode="giou")
    with pytest.raises(ValueError, match=r"'bboxes2' must have shape \[K, 5\]"):
        dkit.ops.box_iou_rotated(b, torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"'bboxes1' must have shape \[K, 5\]"):
        dkit.ops.box_iou_rotated(torch.zeros(5), b)
    with pytest.raises(TypeError, match="'boxes2' must have the dtype of 'boxes1'"):
        dkit.ops.box_iou_rotated(b, b.double())
    with pytest.raises(TypeError, match="must be float16, bfloat16, float32 or float64|must be a float"):
        dkit.ops.box_iou_rotated(b.long(), b.long())
    with pytest.raises(ValueError, match="aligned needs as many boxes"):
        dkit.ops.box_iou_rotated(b, torch.zeros(2, 5), aligned=True)
    with pytest.raises(TypeError, match="must be a tensor"):
        dkit.ops.box_iou_rotated(b, [[0, 0, 1, 1, 0]])
    with pytest.raises(TypeError, match="aligned must be a bool"):
        dkit.ops.box_iou_rotated(b, b, aligned="yes")
    s = torch.zeros(3)
    with pytest.raises(ValueError, match=r"'dets' must have shape \[K, 5\]"):
        dkit.ops.nms_rotated(torch.zeros(3, 4), s, 0.5)
    with pytest.raises(TypeError, match="'scores' must have the dtype of 'dets'"):
        dkit.ops.nms_rotated(b, s.double(), 0.5)
    with pytest.raises(ValueError, match=r"'scores' must have shape \[3\]"):
        dkit.ops.nms_rotated(b, torch.zeros(4), 0.5)
    with pytest.raises(ValueError, match=r"'labels' must have shape \[3\]"):
        dkit.ops.nms_rotated(b, s, 0.5, labels=torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="iou_threshold must be a number"):
        dkit.ops.nms_rotated(b, s, "0.5")
    with pytest.raises(ValueError, match=r"labels must have shape \[3\]"):
        dk_mmcv.nms_rotated(b, s, 0.5, labels=torch.zeros(2))
    # every dkit error is also a RuntimeError (MMCV's C++ checks raise RuntimeError)
    with pytest.raises(RuntimeError):
        dk_mmcv.nms_rotated(b, s.double(), 0.5)


def test_sizes_past_2_31_are_refused_without_allocating():
    huge_t = torch.zeros(1, 5).expand(2**31, 5)
    huge_n = np.broadcast_to(np.zeros((1, 5), np.float32), (2**31, 5))  # read-only: never copied
    small = torch.zeros(2, 5)
    for huge in (huge_t, huge_n):
        with pytest.raises(ValueError, match="at most 2\\^31 - 1 boxes, got 2147483648"):
            dkit.ops.nms_rotated(huge, huge[:, 0], 0.5)
        with pytest.raises(ValueError, match="at most 2\\^31 - 1 boxes"):
            dkit.ops.box_iou_rotated(huge, small if huge is huge_t else small.numpy())
        with pytest.raises(ValueError, match="at most 2\\^31 - 1 boxes"):
            dkit.ops.box_iou_rotated(small if huge is huge_t else small.numpy(), huge)
    # the core refuses it too, whoever calls it
    with pytest.raises(ValueError, match="'boxes1' may hold at most 2\\^31 - 1 boxes"):
        _C.ops.box_iou_rotated(huge_t, small[:0], torch.empty(0, 0), 0, False, True)


# ------------------------------------------------------------------------------------------
# Quadrilaterals: box_iou_quadri and nms_quadri (Note [Quadrilaterals] in kernels/rotated_math.h)

# MMCV's published vectors (tests/test_ops/test_box_iou_quadri.py, test_nms_quadri.py)
Q1 = np.asarray([[1.0, 1.0, 3.0, 4.0, 4.0, 4.0, 4.0, 1.0], [2.0, 2.0, 3.0, 4.0, 4.0, 2.0, 3.0, 1.0],
                 [7.0, 7.0, 8.0, 8.0, 9.0, 7.0, 8.0, 6.0]], np.float32)  # fmt: skip
Q2 = np.asarray([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0], [2.0, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 1.0],
                 [7.0, 6.0, 7.0, 8.0, 9.0, 8.0, 9.0, 6.0]], np.float32)  # fmt: skip
Q_IOU = np.asarray([[0.0714, 1.0000, 0.0000], [0.0000, 0.5000, 0.0000], [0.0000, 0.0000, 0.5000]], np.float32)
Q_IOF = np.asarray([[0.1111, 1.0000, 0.0000], [0.0000, 1.0000, 0.0000], [0.0000, 0.0000, 1.0000]], np.float32)
# Where MMCV is wrong: Q1[0], the trapezoid (1,1),(3,4),(4,4),(4,1), is not a rectangle, and MMCV's
# "inside" test assumes one. It meets the rectangle Q2[1] = [2,4] x [1,4] in 21/4 (by hand: width 2
# for y in [1, 2.5], then 3 - 2(y - 1)/3 down to 1 at y = 4), of areas 6 and 6.
Q_EXACT = {(0, 1): (21 / 4 / (12 - 21 / 4), 21 / 4 / 6)}
Q_NMS = np.array([[1.0, 1.0, 3.0, 4.0, 4.0, 4.0, 4.0, 1.0, 0.7], [2.0, 2.0, 3.0, 4.0, 4.0, 2.0, 3.0, 1.0, 0.8],
                  [7.0, 7.0, 8.0, 8.0, 9.0, 7.0, 8.0, 6.0, 0.5], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.9]],
                 np.float32)  # fmt: skip
Q_NMS_LABELS = np.array([1, 0, 1, 0], np.float32)


@pytest.mark.parametrize("lib", ["ops", "compat"])
@pytest.mark.parametrize("fw", ["torch", "numpy"])
@pytest.mark.parametrize("mode", ["iou", "iof"])
def test_box_iou_quadri_mmcv_vectors_and_where_mmcv_is_wrong(lib, fw, mode):
    f = dkit.ops.box_iou_quadri if lib == "ops" else dk_mmcv.box_iou_quadri
    if lib == "compat" and fw == "numpy":
        pytest.skip("MMCV's box_iou_quadri takes tensors")
    conv = torch.from_numpy if fw == "torch" else (lambda x: x)
    want = (Q_IOU if mode == "iou" else Q_IOF).astype(np.float64)
    for (i, j), exact in Q_EXACT.items():
        assert want[i, j] == 1.0  # MMCV's published value ...
        want[i, j] = exact[mode == "iof"]  # ... and the exact one, which dkit gives
        assert abs(_exact_quad(Q1[i], Q2[j], mode) - want[i, j]) < 1e-12
    full = _np(f(conv(Q1), conv(Q2), mode))
    np.testing.assert_allclose(full, want, atol=1e-4)
    np.testing.assert_allclose(_np(f(conv(Q1), conv(Q2), mode, aligned=True)), np.diag(want), atol=1e-4)


def test_nms_quadri_mmcv_vectors_and_batched_nms():
    boxes = torch.from_numpy(Q_NMS)
    for labels in (None, torch.from_numpy(Q_NMS_LABELS)):  # MMCV's labels change nothing
        dets, keep = dk_mmcv.nms_quadri(boxes[:, :8], boxes[:, -1], 0.3, labels)
        assert keep.tolist() == [3, 1, 2]
        np.testing.assert_array_equal(dets.numpy(), Q_NMS[[3, 1, 2]])
    # dkit.ops: labels are categories (box 0 is then another category than box 1, which covers it)
    _, keep = dkit.ops.nms_quadri(boxes[:, :8], boxes[:, -1], 0.3, torch.from_numpy(Q_NMS_LABELS))
    assert keep.tolist() == [3, 1, 0, 2]
    cfg = dict(type="nms_quadri", iou_threshold=0.3)
    labels = torch.from_numpy(Q_NMS_LABELS)
    dets, keep = dk_mmcv.batched_nms(boxes[:, :8], boxes[:, -1], labels, cfg, class_agnostic=True)
    assert keep.tolist() == [3, 1, 2] and dets.shape == (3, 9)
    dets, keep = dk_mmcv.batched_nms(boxes[:, :8], boxes[:, -1], labels, cfg, class_agnostic=False)
    assert keep.tolist() == [3, 1, 0, 2]
    np.testing.assert_array_equal(dets[:, :8].numpy(), Q_NMS[[3, 1, 0, 2], :8])


def _quad_area(q):
    from fractions import Fraction as F

    p = [(F(float(q[2 * k])), F(float(q[2 * k + 1]))) for k in range(4)]
    return abs(sum(p[k][0] * p[(k + 1) % 4][1] - p[(k + 1) % 4][0] * p[k][1] for k in range(4))) / 2


def _exact_quad(a, b, mode="iou"):
    """The exact overlap of two convex quadrilaterals as written (rational arithmetic)."""
    pa = [(float(a[2 * k]), float(a[2 * k + 1])) for k in range(4)]
    pb = [(float(b[2 * k]), float(b[2 * k + 1])) for k in range(4)]
    return _exact_polygon_overlap(pa, pb, _quad_area(a), _quad_area(b), mode)


def _random_quads(rng, n, span=60.0, dtype=np.float64):
    """Convex quadrilaterals: four points on an ellipse at sorted angles, turned, from a random
    first vertex, either direction."""
    c = rng.uniform(0, span, (n, 1, 2))
    ax = rng.uniform(1, 25, (n, 1, 2))
    # angles at least 0.3 apart, so that a small perturbation keeps the quadrilateral convex
    t = rng.uniform(0, 2 * np.pi, (n, 1)) + np.cumsum(0.3 + (2 * np.pi - 1.2) * rng.dirichlet(np.ones(4), n), 1)
    t = np.where(rng.random((n, 1)) < 0.5, t, t[:, ::-1])  # counter-clockwise or clockwise
    t = np.roll(t, rng.integers(0, 4), axis=1)
    rot = rng.uniform(-np.pi, np.pi, (n, 1))
    u, v = ax[..., 0] * np.cos(t), ax[..., 1] * np.sin(t)
    x = c[..., 0] + u * np.cos(rot) - v * np.sin(rot)
    y = c[..., 1] + u * np.sin(rot) + v * np.cos(rot)
    return np.stack([x, y], 2).reshape(n, 8).astype(dtype)


def _rewritten(q, rng):
    """The same quadrilaterals written from another first vertex, some in the other direction."""
    p = q.reshape(len(q), 4, 2)
    k = rng.integers(1, 4, len(q))
    out = np.stack([np.roll(p[i], -k[i], axis=0) for i in range(len(q))])
    flip = rng.random(len(q)) < 0.5
    out[flip] = out[flip][:, ::-1]
    return out.reshape(len(q), 8)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 5e-5)])
@pytest.mark.parametrize("mode", ["iou", "iof"])
def test_box_iou_quadri_against_exact_reference(dtype, tol, mode):
    rng = np.random.default_rng(31)
    a, b = _random_quads(rng, 300, span=20.0, dtype=dtype), _random_quads(rng, 300, span=20.0, dtype=dtype)
    a[:20] += 5000  # far from the origin: the centre shift keeps the precision
    b[:20] += 5000
    near = a + (rng.normal(0, 1, a.shape) * 10.0 ** rng.integers(-8, -1, (len(a), 1))).astype(dtype)
    for x, y in ((a, b), (a, near)):
        got = dkit.ops.box_iou_quadri(x, y, mode, aligned=True)
        assert got.min() >= 0 and got.max() <= 1
        want = [_exact_quad(x[i], y[i], mode) for i in range(0, len(x), 2)]
        assert sum(w > 0 for w in want) > 40
        np.testing.assert_allclose(got[::2], want, atol=tol, rtol=0)
    full = dkit.ops.box_iou_quadri(a, np.concatenate([b, near]), mode)
    assert full.min() >= 0 and full.max() <= 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_quadrilateral_in_another_vertex_order_gives_one(dtype):
    rng = np.random.default_rng(32)
    q = _random_quads(rng, 3000, dtype=dtype)
    got = dkit.ops.box_iou_quadri(q, _rewritten(q, rng), aligned=True)
    assert got.max() <= 1 and np.abs(got - 1).max() < (1e-5 if dtype == np.float32 else 1e-12)
    # and a rotated box as its corners gives box_iou_rotated's value
    r1, r2 = _random_boxes(rng, 200, dtype=dtype), _random_boxes(rng, 200, dtype=dtype)
    c1 = np.array([np.ravel(_corners(b)) for b in r1]).astype(dtype)
    c2 = np.array([np.ravel(_corners(b)) for b in r2]).astype(dtype)
    np.testing.assert_allclose(dkit.ops.box_iou_quadri(c1, c2), dkit.ops.box_iou_rotated(r1, r2),
                               atol=2e-4 if dtype == np.float32 else 1e-9)  # fmt: skip


def test_quadri_non_convex_and_hostile_values_are_defined():
    """A non-convex quadrilateral (a dart) and a bow tie: finite, within [0, 1], no error;
    a non-convex second box is clipped by its edge lines (Note [Quadrilaterals]): a against the
    region inside all four lines, smaller than the dart."""
    dart = np.array([[0, 0, 4, 2, 0, 4, 1, 2]], np.float64)  # reflex vertex (1, 2)
    square = np.array([[0, 0, 4, 0, 4, 4, 0, 4]], np.float64)
    bow = np.array([[0, 0, 4, 4, 4, 0, 0, 4]], np.float64)
    for x, y in ((dart, square), (square, dart), (bow, square), (square, bow), (dart, dart)):
        v = dkit.ops.box_iou_quadri(x, y)
        assert np.isfinite(v).all() and 0 <= v.min() and v.max() <= 1
    # the dart's true area is 4 (two triangles of base 4 and heights 2 and 1... minus its notch):
    # inside the square, its iof against the square is 1
    assert dkit.ops.box_iou_quadri(dart, square, "iof")[0, 0] == 1.0
    hostile = np.array([[np.nan, 0, 4, 0, 4, 4, 0, 4], [0, 0, np.inf, 0, 4, 4, 0, 4], [1, 1, 1, 1, 1, 1, 1, 1]])
    v = dkit.ops.box_iou_quadri(hostile, np.concatenate([square, hostile]))
    assert ((v >= 0) & (v <= 1) | np.isnan(v)).all()
    assert v[2, 0] == 0 and v[2, 3] == 0  # a point has no area (against a NaN vertex: NaN, as MMCV's shift)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("thr", [0.1, 0.5, 0.0])
def test_nms_quadri_against_greedy_reference(dtype, thr):
    rng = np.random.default_rng(33)
    n = 300
    dets = _random_quads(rng, n, span=200, dtype=dtype)
    dets[n // 2:] = dets[: n // 2] + rng.normal(0, 2, (n // 2, 8)).astype(dtype)  # near-duplicates
    scores = rng.uniform(0, 1, n).astype(dtype)
    scores[::17] = 0.5  # ties
    labels = rng.integers(0, 3, n)
    for lab in (None, labels):
        out, keep = dkit.ops.nms_quadri(torch.from_numpy(dets), torch.from_numpy(scores), thr,
                                        None if lab is None else torch.from_numpy(lab))  # fmt: skip
        want = ref_nms(dets, scores, thr, lab, dkit.ops.box_iou_quadri)
        assert keep.tolist() == want
        np.testing.assert_array_equal(out.numpy(), np.concatenate([dets[want], scores[want, None]], 1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_quadri_sixteen_bit_and_strided(dtype):
    rng = np.random.default_rng(34)
    q = torch.from_numpy(_random_quads(rng, 50, dtype=np.float32)).to(dtype)
    wide = torch.cat([q, torch.zeros(50, 3, dtype=dtype)], 1)[:, :8]
    got = dkit.ops.box_iou_quadri(wide, q[:20])
    assert got.dtype == dtype
    want = dkit.ops.box_iou_quadri(q.float(), q[:20].float()).to(dtype)
    assert torch.equal(got, want)
    s = torch.rand(50).to(dtype)
    assert dkit.ops.nms_quadri(wide, s, 0.3)[1].tolist() == dkit.ops.nms_quadri(q.float(), s.float(), 0.3)[1].tolist()


def test_quadri_compat_signatures_scripting_empty_and_bad_input():
    p = inspect.signature(dk_mmcv.box_iou_quadri).parameters
    assert list(p) == ["bboxes1", "bboxes2", "mode", "aligned"] and p["mode"].default == "iou"
    p = inspect.signature(dk_mmcv.nms_quadri).parameters
    assert list(p) == ["dets", "scores", "iou_threshold", "labels"] and p["labels"].default is None
    q = torch.from_numpy(Q1)
    scripted = torch.jit.script(dk_mmcv.box_iou_quadri)
    assert torch.equal(scripted(q, q, "iof"), dk_mmcv.box_iou_quadri(q, q, "iof"))
    scripted_nms = torch.jit.script(dk_mmcv.nms_quadri)
    boxes = torch.from_numpy(Q_NMS)
    assert scripted_nms(boxes[:, :8], boxes[:, 8], 0.3)[1].tolist() == [3, 1, 2]
    e = torch.zeros(0, 8)
    dets, keep = dk_mmcv.nms_quadri(e, torch.zeros(0), 0.5)
    assert dets is e and keep is None
    assert dkit.ops.box_iou_quadri(e, q).shape == (0, 3)
    with pytest.raises(DkitAssertionError):
        dk_mmcv.box_iou_quadri(q, q, "giou")
    with pytest.raises(_C.DkitValueError, match=r"'bboxes1' must have shape \[K, 8\] \(x1, y1, ..., x4, y4\)"):
        dkit.ops.box_iou_quadri(torch.zeros(3, 5), q)
    with pytest.raises(_C.DkitValueError, match="aligned needs as many boxes"):
        dkit.ops.box_iou_quadri(q, q[:2], aligned=True)
    with pytest.raises(_C.DkitTypeError):
        dkit.ops.box_iou_quadri(q, q.double())
    with pytest.raises(_C.DkitValueError, match=r"nms_quadri: labels must have shape \[4\]"):
        dk_mmcv.nms_quadri(boxes[:, :8], boxes[:, 8], 0.3, labels=torch.zeros(2))
    with pytest.raises(_C.DkitTypeError):
        dkit.ops.nms_quadri(boxes[:, :8], boxes[:, 8].double(), 0.3)


@pytest.mark.threads
@pytest.mark.parametrize("block", [1, 7, 64])
def test_suppression_in_blocks_keeps_the_greedy_walks_boxes(block):
    """Note [Rotated suppression in blocks]: each block of candidates tested in parallel against the
    boxes kept before it, then in order within it, keeps what the greedy walk keeps, on two and
    three threads, with every block's parallel pass on threads (parallel.min_work 0); under
    `make test-python-tsan` the passes run on pthreads that ThreadSanitizer watches."""
    rng = np.random.default_rng(35)
    n = 300
    boxes = _random_boxes(rng, n, span=200, lo=5, hi=60, dtype=np.float32)
    boxes[n // 2:] = boxes[: n // 2] + rng.normal(0, [2, 2, 3, 3, 0.1], (n // 2, 5)).astype(np.float32)
    boxes[:, 2:4] = np.abs(boxes[:, 2:4])
    quads = _random_quads(rng, n, span=200, dtype=np.float32)
    quads[n // 2:] = quads[: n // 2] + rng.normal(0, 2, (n // 2, 8)).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    labels = rng.integers(0, 2, n)
    cases = (("rotated", boxes, dkit.ops.box_iou_rotated), ("quadri", quads, dkit.ops.box_iou_quadri))
    want = {(kind, lab is None): ref_nms(d, scores, 0.3, lab, iou) for kind, d, iou in cases for lab in (None, labels)}
    prev = (_C.tunable("nms_rotated.block"), _C.tunable("parallel.min_work"))
    try:
        _C.tunable("nms_rotated.block", block)
        _C.tunable("parallel.min_work", 0)
        for threads in (2, 3):
            dkit.set_num_threads(threads)
            for lab in (None, labels):
                t_lab = None if lab is None else torch.from_numpy(lab)
                _, keep = dkit.ops.nms_rotated(torch.from_numpy(boxes), torch.from_numpy(scores), 0.3, labels=t_lab)
                assert keep.tolist() == want[("rotated", lab is None)]
                _, keep = dkit.ops.nms_quadri(torch.from_numpy(quads), torch.from_numpy(scores), 0.3, t_lab)
                assert keep.tolist() == want[("quadri", lab is None)]
    finally:
        _C.tunable("nms_rotated.block", prev[0])
        _C.tunable("parallel.min_work", prev[1])
        dkit.set_num_threads(0)
