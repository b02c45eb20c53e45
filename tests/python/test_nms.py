"""The NMS family (dkit.ops.nms, batched_nms, soft_nms and their compat entries) against
torchvision 0.14's ops and MMCV's published test vectors."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import mmcv as cmmcv  # noqa: E402
from dkit.compat import torchvision as ctv  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import bench_nms  # noqa: E402

tv_nms = torchvision.ops.nms
tv_batched_nms = torchvision.ops.batched_nms


def random_boxes(n, seed, size=1000.0, side=100.0, dtype=torch.float32):
    """The issue's benchmark distribution: corners uniform in size x size, sides 1 .. side + 1."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * side + 1
    return torch.cat([xy, xy + wh], 1).to(dtype), torch.rand(n, generator=g).to(dtype)


def clustered_boxes(n, objects, seed):
    """Many overlapping proposals around a few objects, as a detector produces (bench_nms')."""
    return bench_nms.clustered_boxes(torch, n, objects, seed)


# ------------------------------------------------------------------------------------------
# nms: the kept set and its order are torchvision's


@pytest.mark.parametrize("iou", [0.2, 0.5, 0.8])
@pytest.mark.parametrize("n", [1, 10, 1000, 5000])
def test_nms_random_boxes_equal_torchvision(n, iou):
    boxes, scores = random_boxes(n, seed=n)
    ref = tv_nms(boxes, scores, iou)
    got = dkit.ops.nms(boxes, scores, iou)
    assert got.dtype == torch.int64 and torch.equal(got, ref)
    assert torch.equal(ctv.nms(boxes, scores, iou), ref)


@pytest.mark.parametrize("iou", [0.2, 0.5, 0.8])
def test_nms_clustered_boxes_equal_torchvision(iou):
    boxes, scores = clustered_boxes(4000, objects=12, seed=1)
    ref = tv_nms(boxes, scores, iou)
    assert len(ref) < 4000  # the clusters really suppress
    assert torch.equal(dkit.ops.nms(boxes, scores, iou), ref)


def test_nms_float64_and_sixteen_bit_boxes():
    boxes, scores = random_boxes(3000, seed=7)
    ref = tv_nms(boxes.double(), scores.double(), 0.5)
    assert torch.equal(dkit.ops.nms(boxes.double(), scores.double(), 0.5), ref)
    # torchvision 0.14 has no 16-bit CPU nms; dkit computes in float32 from the 16-bit values
    for dt in (torch.float16, torch.bfloat16):
        b, s = boxes.to(dt), scores.to(dt)
        assert torch.equal(dkit.ops.nms(b, s, 0.5), tv_nms(b.float(), s.float(), 0.5))


def test_nms_boxes_exactly_at_the_threshold():
    # IoU exactly 1/3 and 1/2: suppressed only when strictly greater than the threshold
    boxes = torch.tensor([[0, 0, 2, 1], [1, 0, 3, 1], [0, 0, 1, 1], [0, 0, 2, 1]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    for thr in (1 / 3, 0.5, np.nextafter(1 / 3, 0), np.nextafter(0.5, 0), np.nextafter(0.5, 1), 1.0, 0.0):
        ref = tv_nms(boxes, scores, float(thr))
        assert torch.equal(dkit.ops.nms(boxes, scores, float(thr)), ref), thr
    # many boxes on a lattice: every IoU is a simple fraction that lands exactly on thresholds
    g = torch.Generator().manual_seed(3)
    xy = torch.randint(0, 40, (3000, 2), generator=g).float()
    wh = torch.randint(1, 6, (3000, 2), generator=g).float()
    lattice = torch.cat([xy, xy + wh], 1)
    s = torch.rand(3000, generator=g)
    for thr in (0.2, 0.25, 1 / 3, 0.5, 0.6, 0.75):
        assert torch.equal(dkit.ops.nms(lattice, s, thr), tv_nms(lattice, s, thr)), thr


def test_nms_ties_in_score_keep_the_lower_index_first():
    boxes, _ = random_boxes(2000, seed=11)
    for scores in (torch.zeros(2000), torch.randint(0, 5, (2000,)).float()):
        assert torch.equal(dkit.ops.nms(boxes, scores, 0.3), tv_nms(boxes, scores, 0.3))


def test_nms_nan_scores_and_nonfinite_or_degenerate_boxes_as_torchvision():
    boxes, scores = random_boxes(500, seed=5, size=100.0, side=30.0)
    boxes[::7, 0] = float("nan")
    boxes[1::11, 2] = float("inf")
    boxes[2::13, 3] = -float("inf")
    boxes[3::17] = boxes[3::17].flip(1)  # x2 < x1, y2 < y1
    scores[::19] = float("nan")
    for thr in (0.0, 0.3, 0.7, float("nan"), -0.5):
        ref = tv_nms(boxes, scores, thr)
        assert torch.equal(dkit.ops.nms(boxes, scores, thr), ref), thr


def test_nms_empty_and_numpy():
    empty = dkit.ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert empty.dtype == torch.int64 and empty.shape == (0,)
    boxes, scores = random_boxes(800, seed=2)
    got = dkit.ops.nms(boxes.numpy(), scores.numpy(), 0.5)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    np.testing.assert_array_equal(got, tv_nms(boxes, scores, 0.5).numpy())


@pytest.mark.parametrize(
    "boxes,scores",
    [
        (torch.rand(4), torch.rand(1)),  # boxes [4]
        (torch.rand(3, 5), torch.rand(3)),  # boxes [3, 5]
        (torch.rand(3, 4), torch.rand(3, 2)),  # scores [3, 2]
        (torch.rand(3, 4), torch.rand(4)),  # length mismatch
    ],
)
def test_nms_wrong_shapes_raise_runtime_errors_as_torchvision(boxes, scores):
    with pytest.raises(RuntimeError):
        tv_nms(boxes, scores, 0.5)
    with pytest.raises(_C.DkitValueError, match=r"nms: '(boxes|scores)' must have shape") as info:
        dkit.ops.nms(boxes, scores, 0.5)
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(RuntimeError):
        ctv.nms(boxes, scores, 0.5)


def test_nms_bad_dtypes_devices_and_sizes():
    with pytest.raises(_C.DkitTypeError, match="nms: 'scores' must be float64"):
        dkit.ops.nms(torch.rand(3, 4, dtype=torch.float64), torch.rand(3), 0.5)
    with pytest.raises(_C.DkitTypeError, match="nms: 'boxes'"):
        dkit.ops.nms(torch.ones(3, 4, dtype=torch.int32), torch.ones(3, dtype=torch.int32), 0.5)
    with pytest.raises(_C.DkitTypeError, match="iou_threshold"):
        dkit.ops.nms(torch.rand(3, 4), torch.rand(3), "0.5")
    # 2^31 boxes (an expanded view: no memory behind it) are refused before anything is allocated
    huge = torch.zeros(1, 4).expand(2**31, 4)
    with pytest.raises(_C.DkitValueError, match="2\\^31"):
        dkit.ops.nms(huge, torch.zeros(1).expand(2**31), 0.5)
    with pytest.raises(_C.DkitValueError, match="2\\^31"):
        dkit.ops.batched_nms(huge, torch.zeros(1).expand(2**31), torch.zeros(1, dtype=torch.int64).expand(2**31), 0.5)


def test_nms_mixed_devices_are_refused_by_the_core():
    # scores that claim to live on CUDA (device type 2), pointing at real host memory
    from dlpack_ctypes import CtypesProducer

    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 1]], np.float32)
    scores = CtypesProducer(np.array([0.5, 0.6], np.float32), device=(2, 0))
    keep, num = np.zeros(2, np.int64), np.zeros(1, np.int64)
    with pytest.raises(_C.DkitError, match=r"(?i)nms.*(cuda|device)"):
        _C.ops.nms(boxes, scores, None, keep, num, 0.5, 0)
    with pytest.raises(_C.DkitError, match=r"(?i)nms.*(cuda|device)"):
        dkit.ops.nms(boxes, scores, 0.5)


# ------------------------------------------------------------------------------------------
# batched_nms


@pytest.mark.parametrize("iou", [0.2, 0.5, 0.8])
@pytest.mark.parametrize("n,classes", [(500, 3), (900, 80), (20000, 80)])
def test_batched_nms_equals_torchvision(n, classes, iou):
    # n <= 1000 takes torchvision's coordinate trick, n > 1000 its loop over categories
    boxes, scores = random_boxes(n, seed=n + classes)
    idxs = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(n))
    ref = tv_batched_nms(boxes, scores, idxs, iou)
    # compat: identical indices, equal scores in torchvision's order included
    assert torch.equal(ctv.batched_nms(boxes, scores, idxs, iou), ref)
    # dkit.ops: the same kept set in decreasing score order, equal scores by index
    ours = dkit.ops.batched_nms(boxes, scores, idxs, iou)
    assert set(ours.tolist()) == set(ref.tolist()) and torch.equal(scores[ours], scores[ref])
    by_index = torch.tensor(sorted(ref.tolist(), key=lambda i: (-scores[i].item(), i)), dtype=torch.int64)
    assert torch.equal(ours, by_index)
    if n <= 1000:  # few boxes: torchvision orders equal scores by index too
        assert torch.equal(ours, ref)
    assert torch.equal(dkit.ops.nms(boxes, scores, iou, idxs=idxs.int()), ours)


@pytest.mark.parametrize("kind", ["coarse", "constant", "nan", "signed zeros", "distinct"])
@pytest.mark.parametrize("n", [999, 1001, 6000])
def test_batched_nms_equal_scores_in_torchvision_order(kind, n):
    # Note [torchvision's order of equal scores]: above 1000 boxes torchvision orders the kept
    # indices with an unstable sort; the compat entry gives that order exactly, eagerly and
    # scripted, however many scores are equal: coarse scores (many ties), one score for all,
    # NaN scores among distinct ones (NaN equals nothing, yet sorts as a tie), 0.0 and -0.0.
    boxes, scores = random_boxes(n, seed=n + 3)
    g = torch.Generator().manual_seed(n)
    distinct = torch.randperm(n, generator=g).float() / n
    scores = {
        "coarse": (scores * 20).round(),
        "constant": torch.full((n,), 0.5),
        "nan": distinct.masked_fill(torch.rand(n, generator=g) < 0.1, float("nan")),
        "signed zeros": torch.where(torch.rand(n, generator=g) < 0.5, torch.tensor(0.0), torch.tensor(-0.0)),
        "distinct": distinct,
    }[kind]
    idxs = torch.randint(0, 4, (n,), generator=g)
    ref = tv_batched_nms(boxes, scores, idxs, 0.5)
    assert torch.equal(ctv.batched_nms(boxes, scores, idxs, 0.5), ref)
    assert torch.equal(torch.jit.script(ctv.batched_nms)(boxes, scores, idxs, 0.5), ref)
    if kind == "distinct":  # nothing to reorder: dkit's own order is torchvision's
        assert torch.equal(dkit.ops.batched_nms(boxes, scores, idxs, 0.5), ref)


def _torch_order(scores, kept):
    """torchvision's steps for many boxes: the kept indices ascending, ordered by torch.sort."""
    ascending = kept.sort()[0]
    return ascending[scores[ascending].sort(descending=True)[1]]


def _dkit_order(scores, kept):
    """dkit's order of the same kept set: decreasing score (NaN first), equal scores by index."""
    ascending = kept.sort()[0]
    return ascending[scores[ascending].sort(descending=True, stable=True)[1]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_sort_ties_is_torch_sort(dtype):
    # Note [torch's order of equal scores] (csrc/cpu/dk_std_sort.h): _C.torch_sort_ties_ gives
    # the order torch.sort(descending=True) itself gives, on every stack the suite runs on;
    # sizes across the insertion sort's 16 and up to 100,000, few ties to all equal, NaN and
    # signed zeros, sorted, reversed and organ-pipe inputs (other partitions), among scores
    # that are not kept.
    g = torch.Generator().manual_seed(11)
    cases = reordered = 0
    for n in [2, 16, 17, 18, 33, 100, 1000, 5000, 30000, 100000]:
        for kind in ["pairs", "coarse", "constant", "nan", "zeros", "sorted", "reversed", "organ"]:
            if n == 100000 and kind not in ("pairs", "coarse"):
                continue
            v = torch.randperm(n, generator=g).double()
            if kind == "pairs":
                pairs = max(1, n // 1000)
                v[torch.randint(0, n, (pairs,), generator=g)] = v[torch.randint(0, n, (pairs,), generator=g)]
            elif kind == "coarse":
                v = (v / 7).floor()
            elif kind == "constant":
                v = torch.full((n,), 3.0, dtype=torch.float64)
            elif kind == "nan":
                v[torch.rand(n, generator=g) < 0.2] = float("nan")
                v = (v / 3).floor()
            elif kind == "zeros":
                v = torch.where(torch.rand(n, generator=g) < 0.5, torch.tensor(0.0), torch.tensor(-0.0)).double()
                v[: n // 3] = torch.rand(n // 3, generator=g).double()
            else:
                base = torch.arange(n, dtype=torch.float64) // 3
                v = {"sorted": base, "reversed": base.flip(0), "organ": torch.minimum(base, base.flip(0))}[kind]
            total = n + n // 3
            scores = torch.rand(total, generator=g).double()
            kept = torch.randperm(total, generator=g)[:n]
            scores[kept] = v
            scores = scores.to(dtype)  # rounding makes more ties in float16 and bfloat16
            keep = _dkit_order(scores, kept)
            got = keep.clone()
            moved = _C.torch_sort_ties_(got, scores)
            want = _torch_order(scores, kept)
            assert torch.equal(got, want), (n, kind, dtype)
            if dtype == torch.float32:
                # unit stride reads eight at a time (AVX2); any other, one; a strided keep is
                # read and written through its stride, its neighbours untouched
                strided = torch.stack([scores, scores], 1)[:, 0]
                got1 = keep.clone()
                assert _C.torch_sort_ties_(got1, strided) is moved and torch.equal(got1, got), (n, kind)
                pair = torch.stack([keep, keep], 1)
                assert _C.torch_sort_ties_(pair[:, 0], scores) is moved, (n, kind)
                assert torch.equal(pair[:, 0], want) and torch.equal(pair[:, 1], keep), (n, kind)
            reordered += not torch.equal(keep, want)
            # False, keep untouched, exactly when no two kept scores are equal
            kept_scores = scores[keep].double()
            equal = (kept_scores[1:] == kept_scores[:-1]) | (kept_scores[1:].isnan() & kept_scores[:-1].isnan())
            assert moved is bool(equal.any()), (n, kind, dtype)
            cases += 1
    assert cases == 74 and reordered >= 40  # most cases differ from dkit's own order


def test_torch_sort_ties_bad_input():
    # a private helper of dkit.compat, yet never a crash: the core's DLPack checks, then its own
    scores = torch.tensor([0.5, 0.5, 0.25, 0.75])
    keep = torch.tensor([3, 0, 1, 2])
    k = keep.clone()
    assert _C.torch_sort_ties_(k, scores) is True and k.tolist() == [3, 0, 1, 2]
    bad = [
        ((keep, scores, scores), TypeError, "takes two tensors"),
        ((keep.int(), scores), ValueError, "1-D int64"),
        ((keep.view(2, 2), scores), ValueError, "1-D int64"),
        ((keep, scores.int()), ValueError, "float16, bfloat16, float32 or float64"),
        ((keep, scores.view(2, 2)), ValueError, "1-D float16"),
        ((torch.tensor([3, 0, 1, 2, 0]), scores), ValueError, "kept indices of"),
        ((torch.tensor([3, 0, 9]), scores), ValueError, "not an index of scores"),
        ((torch.tensor([3, -1]), scores), ValueError, "not an index of scores"),
        ((torch.tensor([0, 3]), scores), ValueError, "not in decreasing score order"),
        ((torch.tensor([3, 0, 0]), scores), ValueError, "kept twice"),
        ((keep, "scores"), TypeError, ""),
        ((torch.empty(4, dtype=torch.int64, device="meta"), scores), ValueError, "meta tensor"),
    ]
    for args, exc, message in bad:
        with pytest.raises(exc, match=message):
            _C.torch_sort_ties_(*args)
    assert keep.tolist() == [3, 0, 1, 2]  # a refused call writes nothing
    assert _C.torch_sort_ties_(torch.empty(0, dtype=torch.int64), scores) is False
    # keep is written in place, so a read-only one is refused (NumPy without a read-only flag
    # in its DLPack refuses to export it; with one, dkit refuses it)
    frozen = keep.numpy().copy()
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError, TypeError), match="(?i)read.?only"):
        _C.torch_sort_ties_(frozen, scores)
    # any DLPack producer, not only torch (whose tensors are read directly): NumPy's, written
    # through the protocol
    mixed = torch.tensor([0.5, 0.5, 0.5] + [0.25] * 20 + [0.75])  # > 16 kept: equal ones move
    kept = torch.tensor([23] + list(range(23)))
    want = _torch_order(mixed, kept)
    assert not torch.equal(want, kept)
    as_numpy = kept.numpy().copy()
    assert _C.torch_sort_ties_(as_numpy, mixed.numpy()) is True
    assert as_numpy.tolist() == want.tolist()
    # the same checks where float32 scores are read eight at a time (every flaw inside a block
    # of eight, in the first pass and, after a tie, in the second)
    many = torch.arange(24, 0, -1).float()  # distinct, decreasing with the index
    for tie in (False, True):
        s = many.clone()
        if tie:
            s[1] = s[0]
        k = torch.arange(20)
        for at, value, message in ((13, 99, "keep\\[13\\] = 99 is not an index"), (10, -5, "keep\\[10\\] = -5"),
                                   (12, 5, "decreasing score order at 12"), (11, 10, "index 10 is kept twice")):
            k2 = k.clone()
            k2[at] = value
            before = k2.clone()
            with pytest.raises(ValueError, match=message):
                _C.torch_sort_ties_(k2, s)
            assert torch.equal(k2, before)
    # a strided keep and strided scores are read through their strides
    wide = torch.stack([scores, torch.zeros(4)], 1)[:, 0]
    k2 = torch.stack([keep, keep], 1)[:, 0]
    assert _C.torch_sort_ties_(k2, wide) is True and k2.tolist() == [3, 0, 1, 2]


def test_batched_nms_categories_of_any_dtype_and_empty():
    boxes, scores = clustered_boxes(600, objects=5, seed=4)
    idxs = torch.randint(0, 4, (600,), generator=torch.Generator().manual_seed(0))
    ref = tv_batched_nms(boxes, scores, idxs, 0.5)
    for cat in (idxs.float() * 0.5, idxs.to(torch.uint8), idxs.to(torch.int16), idxs.int()):
        assert torch.equal(dkit.ops.batched_nms(boxes, scores, cat, 0.5), ref)
    np.testing.assert_array_equal(dkit.ops.batched_nms(boxes.numpy(), scores.numpy(), idxs.numpy(), 0.5), ref.numpy())
    e = ctv.batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0), 0.5)
    assert e.dtype == torch.int64 and e.shape == (0,)


def test_batched_nms_is_a_composite_over_nms():
    slots = {slot.key: slot for slot in dkit.dispatch.table("batched_nms")}
    assert slots["cpu"].provenance == "composite" and slots["cpu"].kernel == "batched_nms_via_nms"
    assert {slot.key: slot for slot in dkit.dispatch.table("nms")}["cpu"].provenance == "kernel"


def test_batched_nms_bad_categories():
    boxes, scores = random_boxes(10, seed=0)
    with pytest.raises(_C.DkitValueError, match="batched_nms: 'idxs' must have shape \\[10\\]"):
        dkit.ops.batched_nms(boxes, scores, torch.zeros(9, dtype=torch.int64), 0.5)


# ------------------------------------------------------------------------------------------
# MMCV: nms, soft_nms, batched_nms (tests/test_ops/test_nms.py of MMCV, its numbers)

MMCV_BOXES = np.array([[6.0, 3.0, 8.0, 7.0], [3.0, 6.0, 9.0, 11.0], [3.0, 7.0, 10.0, 12.0], [1.0, 4.0, 13.0, 7.0]],
                      dtype=np.float32)  # fmt: skip
MMCV_SCORES = np.array([0.6, 0.9, 0.7, 0.2], dtype=np.float32)


def test_mmcv_nms_published_vectors():
    np_dets = np.array([[3.0, 6.0, 9.0, 11.0, 0.9], [6.0, 3.0, 8.0, 7.0, 0.6], [1.0, 4.0, 13.0, 7.0, 0.2]])
    dets, inds = cmmcv.nms(torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES), iou_threshold=0.3, offset=0)
    assert isinstance(dets, torch.Tensor)
    assert np.allclose(dets, np_dets) and np.allclose(inds, [1, 0, 3])
    dets, inds = cmmcv.nms(MMCV_BOXES, MMCV_SCORES, 0.3)
    assert isinstance(dets, np.ndarray) and isinstance(inds, np.ndarray)
    assert np.allclose(dets, np_dets) and np.allclose(inds, [1, 0, 3])


def test_mmcv_nms_score_threshold_max_num_and_offset():
    boxes, scores = random_boxes(3000, seed=9)
    # MMCV's NMSop: filter by score, nms (threshold compared in float32), first max_num
    valid = (scores > 0.4).nonzero().view(-1)
    thr32 = ctypes.c_float(0.55).value
    ref = valid[tv_nms(boxes[valid], scores[valid], thr32)][:50]
    dets, inds = cmmcv.nms(boxes, scores, 0.55, score_threshold=0.4, max_num=50)
    assert torch.equal(inds, ref)
    assert torch.equal(dets, torch.cat([boxes[ref], scores[ref, None]], 1))
    # offset=1: MMCV's +1 pixel extents, against a literal reference
    small = boxes[:300] / 20
    _, inds1 = cmmcv.nms(small, scores[:300], 0.5, offset=1)
    assert torch.equal(inds1, _greedy_nms(small, scores[:300], 0.5, offset=1))
    with pytest.raises(AssertionError):
        cmmcv.nms(boxes, scores, 0.5, offset=2)
    with pytest.raises(AssertionError):
        cmmcv.nms(boxes[:, :3], scores, 0.5)
    with pytest.raises(AssertionError):
        cmmcv.nms(boxes, scores[:-1], 0.5)
    with pytest.raises(AssertionError):
        cmmcv.nms(boxes.tolist(), scores, 0.5)


def _greedy_nms(boxes, scores, thr, offset=0):
    """The references' loop, literally (float32 arithmetic, float32 threshold as MMCV)."""
    order = torch.sort(scores, descending=True, stable=True)[1].tolist()
    b = boxes.tolist()
    f = lambda v: ctypes.c_float(v).value  # noqa: E731
    area = [f(f(x2 - x1 + offset) * f(y2 - y1 + offset)) for x1, y1, x2, y2 in b]
    keep, thr = [], f(thr)
    for j in order:
        ok = True
        for i in keep:
            w = max(0.0, f(f(min(b[i][2], b[j][2]) - max(b[i][0], b[j][0])) + offset))
            h = max(0.0, f(f(min(b[i][3], b[j][3]) - max(b[i][1], b[j][1])) + offset))
            inter = f(w * h)
            if f(inter / f(f(area[i] + area[j]) - inter)) > thr:
                ok = False
                break
        if ok:
            keep.append(j)
    return torch.tensor(keep, dtype=torch.int64)


MMCV_SOFT = {
    "linear": ([[3.0, 6.0, 9.0, 11.0, 0.9], [6.0, 3.0, 8.0, 7.0, 0.6], [3.0, 7.0, 10.0, 12.0, 0.29024392],
                [1.0, 4.0, 13.0, 7.0, 0.2]], [1, 0, 2, 3]),  # fmt: skip
    "gaussian": ([[3.0, 6.0, 9.0, 11.0, 0.9], [6.0, 3.0, 8.0, 7.0, 0.59630775], [3.0, 7.0, 10.0, 12.0, 0.35275510],
                  [1.0, 4.0, 13.0, 7.0, 0.18650459]], [1, 0, 2, 3]),  # fmt: skip
    "naive": ([[3.0, 6.0, 9.0, 11.0, 0.9], [6.0, 3.0, 8.0, 7.0, 0.6], [1.0, 4.0, 13.0, 7.0, 0.2]], [1, 0, 3]),
}


@pytest.mark.parametrize("method", ["linear", "gaussian", "naive"])
def test_mmcv_soft_nms_published_vectors(method):
    want_dets, want_inds = MMCV_SOFT[method]
    for boxes, scores in ((torch.from_numpy(MMCV_BOXES), torch.from_numpy(MMCV_SCORES)), (MMCV_BOXES, MMCV_SCORES)):
        dets, inds = cmmcv.soft_nms(boxes, scores, iou_threshold=0.3, sigma=0.5, min_score=0.01, method=method)
        assert type(dets) is type(boxes) and type(inds) is type(boxes)
        assert np.allclose(np.asarray(dets), want_dets) and np.array_equal(np.asarray(inds), want_inds)
        assert inds.dtype in (torch.int64, np.int64)


def _soft_nms_reference(boxes, scores, thr, sigma, min_score, method, offset=0):
    """MMCV's in-place procedure, literally, in float32 (the reference for ties and order)."""
    f = lambda v: ctypes.c_float(v).value  # noqa: E731
    b = [list(map(f, r)) for r in boxes.tolist()]
    sc = list(map(f, scores.tolist()))
    area = [f(f(r[2] - r[0] + offset) * f(r[3] - r[1] + offset)) for r in b]
    ind = list(range(len(b)))
    n, i, thr, sigma, min_score = len(b), 0, f(thr), f(sigma), f(min_score)
    dets = []
    while i < n:
        best = i
        for p in range(i + 1, n):
            if sc[best] < sc[p]:
                best = p
        for arr in (b, sc, area, ind):
            arr[i], arr[best] = arr[best], arr[i]
        dets.append(b[i] + [sc[i]])
        p = i + 1
        while p < n:
            w = max(0.0, f(f(min(b[i][2], b[p][2]) - max(b[i][0], b[p][0])) + offset))
            h = max(0.0, f(f(min(b[i][3], b[p][3]) - max(b[i][1], b[p][1])) + offset))
            inter = f(w * h)
            ovr = f(inter / f(f(area[i] + area[p]) - inter))
            if method == "naive":
                weight = 0.0 if ovr >= thr else 1.0
            elif method == "linear":
                weight = f(1 - ovr) if ovr >= thr else 1.0
            else:
                weight = float(np.exp(np.float32(-f(ovr * ovr)) / np.float32(sigma)))
            sc[p] = f(sc[p] * weight)
            if sc[p] < min_score:
                n -= 1
                for arr in (b, sc, area, ind):
                    arr[p] = arr[n]
                p -= 1
            p += 1
        i += 1
    return torch.tensor(dets, dtype=torch.float32).view(-1, 5), torch.tensor(ind[:n], dtype=torch.int64)


@pytest.mark.parametrize("method", ["linear", "gaussian", "naive"])
def test_soft_nms_equals_mmcv_procedure_with_ties(method):
    boxes, scores = clustered_boxes(200, objects=4, seed=8)
    scores = (scores * 4).round() / 4  # many exact ties
    for offset in (0, 1):
        want_dets, want_inds = _soft_nms_reference(boxes, scores, 0.3, 0.5, 0.05, method, offset)
        dets, inds = dkit.ops.soft_nms(boxes, scores, 0.3, 0.5, 0.05, method, offset)
        assert torch.equal(inds, want_inds)
        torch.testing.assert_close(dets, want_dets, rtol=1e-6, atol=1e-6)


def test_soft_nms_bad_input_and_empty():
    boxes, scores = random_boxes(5, seed=0)
    with pytest.raises(_C.DkitValueError, match="soft_nms: method"):
        dkit.ops.soft_nms(boxes, scores, method="box")
    with pytest.raises(AssertionError):
        cmmcv.soft_nms(boxes, scores, method="box")
    with pytest.raises(_C.DkitValueError, match="soft_nms: sigma"):
        dkit.ops.soft_nms(boxes, scores, sigma=0.0, method="gaussian")
    with pytest.raises(_C.DkitValueError, match="soft_nms: 'boxes' must have shape"):
        dkit.ops.soft_nms(boxes[:, :3], scores)
    dets, inds = dkit.ops.soft_nms(torch.zeros(0, 4), torch.zeros(0))
    assert dets.shape == (0, 5) and inds.shape == (0,) and inds.dtype == torch.int64
    # NaN and infinite boxes never crash: such a box overlaps nothing (NaN overlaps compare false)
    boxes[0, 0], boxes[1, 2], scores[2] = float("nan"), float("inf"), float("nan")
    want_dets, want_inds = _soft_nms_reference(boxes, scores, 0.3, 0.5, 0.001, "linear")
    dets, inds = dkit.ops.soft_nms(boxes, scores)
    assert torch.equal(inds, want_inds)


def test_mmcv_batched_nms_strategies_agree_and_match_reference():
    boxes, scores = clustered_boxes(3000, objects=30, seed=12)
    idxs = torch.randint(0, 6, (3000,), generator=torch.Generator().manual_seed(1))
    cfg = dict(type="nms", iou_threshold=0.7, score_threshold=0.5, max_num=100)
    dets, keep = cmmcv.batched_nms(boxes, scores, idxs, cfg)
    seq_dets, seq_keep = cmmcv.batched_nms(boxes, scores, idxs, dict(cfg, split_thr=100))
    assert torch.equal(keep, seq_keep) and torch.equal(dets, seq_dets)
    valid = (scores > 0.5).nonzero().view(-1)
    ref = valid[tv_batched_nms(boxes[valid], scores[valid], idxs[valid], ctypes.c_float(0.7).value)][:100]
    assert torch.equal(keep, ref)
    assert torch.equal(dets, torch.cat([boxes[ref], scores[ref, None]], 1))
    # class_agnostic: one category
    _, keep = cmmcv.batched_nms(boxes, scores, idxs, dict(iou_threshold=0.5, class_agnostic=True))
    assert torch.equal(keep, tv_nms(boxes, scores, 0.5))
    # soft_nms through both of MMCV's strategies
    cfg = dict(type="soft_nms", iou_threshold=0.7)
    dets, keep = cmmcv.batched_nms(boxes, scores, idxs, cfg)
    seq_dets, seq_keep = cmmcv.batched_nms(boxes, scores, idxs, dict(cfg, split_thr=100))
    assert torch.equal(keep, seq_keep) and torch.equal(dets, seq_dets)
    # no nms_cfg: every box, by descending score
    dets, keep = cmmcv.batched_nms(boxes, scores, idxs, None)
    assert len(keep) == 3000 and (dets[1:, -1] <= dets[:-1, -1]).all()
    with pytest.raises(_C.DkitNotImplementedError, match="nms_rotated_x"):
        cmmcv.batched_nms(boxes, scores, idxs, dict(type="nms_rotated_x", iou_threshold=0.5))


@pytest.mark.slow
def test_bench_nms_quick_smoke():
    """bench/bench_nms.py runs end to end on its small problems and checks its results against
    torchvision as it goes (the full run is `make bench-python`)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, os.path.join(root, "bench", "bench_nms.py"), "--quick", "--reps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # its dkit: bench/_dkit_path.py
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["case", "dkit", "torchvision"]
    assert sum("nms" in line and line.rstrip().endswith("x") for line in lines) >= 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_soft_nms_every_dtype(dtype):
    # 16-bit boxes are computed in float32 from their own values, dets stored back in their dtype;
    # float64 in float64 (MMCV's kernel is float32 only)
    boxes, scores = clustered_boxes(300, objects=6, seed=21)
    b, s = boxes.to(dtype), scores.to(dtype)
    dets, inds = dkit.ops.soft_nms(b, s, 0.3, 0.5, 0.05, "gaussian")
    assert dets.dtype == dtype and inds.dtype == torch.int64
    if dtype == torch.float64:  # the same procedure in double: MMCV's literal loop, in float64
        d32, i32 = dkit.ops.soft_nms(boxes, scores, 0.3, 0.5, 0.05, "gaussian")
        assert torch.equal(inds, i32)
        torch.testing.assert_close(dets, d32.double(), rtol=1e-5, atol=1e-6)
    else:
        ref_dets, ref_inds = dkit.ops.soft_nms(b.float(), s.float(), 0.3, 0.5, 0.05, "gaussian")
        assert torch.equal(inds, ref_inds)
        assert torch.equal(dets, ref_dets.to(dtype))
    # NumPy arrays give NumPy results
    if dtype != torch.bfloat16:
        nd, ni = dkit.ops.soft_nms(b.numpy(), s.numpy(), 0.3, 0.5, 0.05, "gaussian")
        assert isinstance(nd, np.ndarray) and np.array_equal(ni, inds.numpy()) and np.array_equal(nd, dets.numpy())
