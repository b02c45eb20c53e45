"""The box-overlap family (dkit/_ops/box_iou.py): torchvision's box_iou, generalized_box_iou,
distance_box_iou and complete_box_iou, and MMCV's bbox_overlaps, through dkit.ops and
dkit.compat, on torch tensors and NumPy arrays: values against torchvision on the same tensors
(random, degenerate, identical, disjoint, NaN and infinite boxes; every dtype torchvision takes),
MMCV's published vectors and its CPU kernel's expressions, and the errors."""

import inspect

import numpy as np
import pytest

import dkit
from dkit import _C

torch = pytest.importorskip("torch")
tvops = pytest.importorskip("torchvision.ops")

from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import assert_signature_covers  # noqa: E402

TV = {
    "box_iou": tvops.box_iou,
    "generalized_box_iou": tvops.generalized_box_iou,
    "distance_box_iou": tvops.distance_box_iou,
    "complete_box_iou": tvops.complete_box_iou,
}


def random_boxes(n, seed, span=100.0, size=40.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * span
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * size + 0.5
    return torch.cat([xy, xy + wh], 1).to(dtype)


def special_boxes(dtype=torch.float32):
    """Degenerate, identical, disjoint, nested, NaN and infinite boxes."""
    inf, nan = float("inf"), float("nan")
    rows = [
        [0, 0, 10, 10],
        [0, 0, 10, 10],  # identical
        [20, 20, 30, 30],  # disjoint
        [10, 0, 20, 10],  # touching
        [2, 2, 5, 5],  # nested
        [5, 5, 5, 5],  # a point
        [3, 0, 3, 10],  # no width
        [8, 8, 2, 2],  # x2 < x1, y2 < y1
        [-5, -5, 0, 0],
        [nan, 0, 10, 10],
        [0, 0, inf, 10],
        [-inf, -inf, inf, inf],
        [0, 0, 1e30, 1e30],
        [1e-30, 1e-30, 2e-30, 2e-30],
    ]
    return torch.tensor(rows, dtype=torch.float64).to(dtype)


def assert_same(got, want, atol=0.0):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=0, equal_nan=True)


@pytest.mark.parametrize("name", list(TV))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_to_torchvision(name, dtype):
    cases = [
        (random_boxes(70, 1, dtype=dtype), random_boxes(90, 2, dtype=dtype)),
        (special_boxes(dtype), special_boxes(dtype)),
        (special_boxes(dtype), random_boxes(30, 3, span=20, dtype=dtype)),
        (random_boxes(5, 4, dtype=dtype), random_boxes(5, 4, dtype=dtype) + 1000),  # disjoint
        (random_boxes(0, 5, dtype=dtype), random_boxes(7, 6, dtype=dtype)),
        (random_boxes(7, 5, dtype=dtype), random_boxes(0, 6, dtype=dtype)),
    ]
    # exact, but for complete IoU's atan (torch's vectorised one against the C library's)
    atol = 0.0 if name != "complete_box_iou" else (1e-6 if dtype == torch.float32 else 1e-12)
    for b1, b2 in cases:
        want = TV[name](b1, b2)
        assert_same(getattr(dkit.ops, name)(b1, b2), want, atol)
        assert_same(getattr(dk_tv, name)(b1, b2), want, atol)


@pytest.mark.parametrize("name", ["distance_box_iou", "complete_box_iou"])
def test_eps(name):
    b1, b2 = special_boxes(), random_boxes(9, 7, span=20)
    for eps in (0.0, 1e-3, 1.0):
        want = TV[name](b1, b2, eps=eps)
        assert_same(getattr(dkit.ops, name)(b1, b2, eps=eps), want, 1e-6)
        assert_same(getattr(dk_tv, name)(b1, b2, eps), want, 1e-6)


@pytest.mark.parametrize("name", list(TV))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bit_boxes_as_torchvision(name, dtype):
    """float32 results, with torchvision's rounding of differences in 16 bits."""
    b1 = random_boxes(40, 8, dtype=dtype)
    b2 = torch.cat([random_boxes(30, 9, dtype=dtype), special_boxes(dtype)])
    want = TV[name](b1, b2)
    assert want.dtype == torch.float32
    assert_same(getattr(dkit.ops, name)(b1, b2), want, 1e-6 if name == "complete_box_iou" else 0.0)


@pytest.mark.parametrize("name", list(TV))
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_boxes_as_torchvision(name, dtype):
    b1 = random_boxes(40, 10, span=300, size=60).round().to(dtype)
    b2 = torch.cat([random_boxes(30, 11, span=300, size=60).round(), special_boxes()[:9]]).to(dtype)
    want = TV[name](b1, b2)
    assert want.dtype == torch.float32
    assert_same(getattr(dkit.ops, name)(b1, b2), want, 1e-6 if name == "complete_box_iou" else 0.0)


@pytest.mark.parametrize("dtype,span", [(torch.int32, 100000), (torch.int32, 2**30), (torch.int64, 2**40)])
def test_integer_wraparound_as_torchvision(dtype, span):
    """Areas past the integer type wrap around in torchvision (int32 boxes stay int32 in its
    _upcast); dkit's integer arithmetic wraps the same way (Note [Integer boxes])."""
    g = torch.Generator().manual_seed(span % 1000)
    xy, wh = torch.randint(-span, span, (50, 2), generator=g), torch.randint(0, span, (50, 2), generator=g)
    b = torch.cat([xy, xy + wh], 1).to(dtype)
    for name in TV:
        want = TV[name](b, b)
        if name == "complete_box_iou":  # atan's ulp, on values that may be large
            torch.testing.assert_close(getattr(dkit.ops, name)(b, b), want, atol=1e-6, rtol=1e-6, equal_nan=True)
        else:
            assert_same(getattr(dkit.ops, name)(b, b), want)


@pytest.mark.parametrize("name", list(TV))
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_narrow_integer_boxes_as_torchvision(name, dtype):
    """torchvision takes every integer dtype: _upcast turns int8, uint8 and int16 into int32, but
    the intersection's and the enclosing box's rb - lt are taken in the boxes' own dtype first,
    where they wrap around (uint8: 3 - 5 is 254); dkit's are the same, to the bit (Note [Integer
    boxes]). torchvision's own TestBoxIou runs int16 boxes."""
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(int(info.bits) + int(info.min))
    for lo, hi in ((max(info.min, 0), min(info.max, 100)), (info.min, info.max)):  # small, and wrapping
        xy = torch.randint(lo, hi, (60, 2), generator=g)
        wh = torch.randint(0, max(1, (hi - lo) // 3), (60, 2), generator=g)
        b = torch.cat([xy, (xy + wh).clamp(max=hi)], 1).to(dtype)
        b1, b2 = b[:35], torch.cat([b[35:], b[:5]])
        want = TV[name](b1, b2)
        assert want.dtype == torch.float32
        if lo == info.min and name in ("box_iou", "generalized_box_iou"):  # the wrap-around matters here
            assert not torch.equal(want, TV[name](b1.long(), b2.long()))
        got = getattr(dkit.ops, name)(b1, b2)
        if name == "complete_box_iou":  # atan's ulp
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, equal_nan=True)
        else:
            assert_same(got, want)
        assert_same(getattr(dk_tv, name)(b1, b2), got)  # the compat entries take them too


def test_bool_boxes_are_refused():
    b = random_boxes(3, 12).round()
    with pytest.raises(TypeError, match="Note \\[Box-overlap dtypes\\]"):
        dkit.ops.box_iou(b.bool(), b.bool())
    with pytest.raises(TypeError, match="or bfloat16, got int32"):  # MMCV would truncate into int32
        dkit.ops.bbox_overlaps(b.int(), b.int())


def test_numpy_in_numpy_out():
    b1, b2 = random_boxes(20, 13), torch.cat([random_boxes(10, 14), special_boxes()])
    for name in TV:
        got = getattr(dkit.ops, name)(b1.numpy(), b2.numpy())
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert_same(torch.from_numpy(got), TV[name](b1, b2), 1e-6 if name == "complete_box_iou" else 0.0)
    b2 = b2[:10]  # finite, for the casts
    got = dkit.ops.box_iou(b1.numpy().astype(np.float16), b2.numpy().astype(np.float16))
    assert got.dtype == np.float32
    assert_same(torch.from_numpy(got), tvops.box_iou(b1.half(), b2.half()))
    got = dkit.ops.box_iou(b1.numpy().astype(np.int64), b2.numpy().astype(np.int64))
    assert_same(torch.from_numpy(got), tvops.box_iou(b1.long(), b2.long()))
    got = dkit.ops.bbox_overlaps(b1.double().numpy(), b2.double().numpy(), "iof", False, 1)
    assert got.dtype == np.float64 and got.shape == (20, 10)


def test_strided_inputs():
    b1 = random_boxes(30, 15).t().contiguous().t()  # column-major
    b2 = random_boxes(40, 16)[::2]
    assert not b1.is_contiguous() and not b2.is_contiguous()
    assert_same(dkit.ops.generalized_box_iou(b1, b2), tvops.generalized_box_iou(b1, b2))


def test_same_bits_for_any_thread_count():
    b1, b2 = random_boxes(300, 17), random_boxes(1500, 18)
    prev = dkit.get_num_threads()
    try:
        outs = []
        for n in (1, 2):
            dkit.set_num_threads(n)
            outs.append([getattr(dkit.ops, name)(b1, b2) for name in TV])
    finally:
        dkit.set_num_threads(prev)
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def test_no_backward():
    b1 = random_boxes(4, 19).requires_grad_()
    b2 = random_boxes(5, 20)
    with pytest.raises(NotImplementedError, match="no gradient"):
        dkit.ops.generalized_box_iou(b1, b2)
    with torch.no_grad():
        assert_same(dkit.ops.generalized_box_iou(b1, b2), tvops.generalized_box_iou(b1, b2))
    assert_same(dkit.ops.box_iou(b1.detach(), b2), tvops.box_iou(b1.detach(), b2))


# ------------------------------------------------------------------------------------------
# MMCV's bbox_overlaps (MMCV is not installed here: its test vectors, and its CPU kernel's tensor
# expressions written out below)


def mmcv_cpu(b1, b2, mode="iou", aligned=False, offset=0):
    """What MMCV's CPU kernel computes: lt/rb by maximum/minimum, (rb - lt + offset) clamped to
    [0, 2^31], then overlap over the union (or over the first box's area)."""
    if aligned:
        lt, rb = torch.max(b1[:, :2], b2[:, :2]), torch.min(b1[:, 2:], b2[:, 2:])
        a1 = (b1[:, 2] - b1[:, 0] + offset) * (b1[:, 3] - b1[:, 1] + offset)
        a2 = (b2[:, 2] - b2[:, 0] + offset) * (b2[:, 3] - b2[:, 1] + offset)
    else:
        lt, rb = torch.max(b1[:, None, :2], b2[:, :2]), torch.min(b1[:, None, 2:], b2[:, 2:])
        a1 = ((b1[:, 2] - b1[:, 0] + offset) * (b1[:, 3] - b1[:, 1] + offset))[:, None]
        a2 = (b2[:, 2] - b2[:, 0] + offset) * (b2[:, 3] - b2[:, 1] + offset)
    wh = (rb - lt + offset).clamp(0.0, 2147483648.0)
    overlap = wh[..., 0] * wh[..., 1]
    return overlap / a1 if mode == "iof" else overlap / (a1 + a2 - overlap)


def test_mmcv_published_vectors():
    """mmcv tests/test_ops/test_bbox.py, for both dkit.ops and the compat module."""
    for fn in (dkit.ops.bbox_overlaps, dk_mmcv.bbox_overlaps):
        b1 = torch.tensor([[1.0, 1.0, 3.0, 4.0], [2.0, 2.0, 3.0, 4.0], [7.0, 7.0, 8.0, 8.0]])
        b2 = torch.tensor([[0.0, 2.0, 2.0, 5.0], [2.0, 1.0, 3.0, 3.0]])
        out = fn(b1, b2, offset=1)
        assert np.allclose(out.numpy(), np.array([[0.33333334, 0.5], [0.2, 0.5], [0.0, 0.0]]), 1e-2)
        out = fn(b1[:2], b2, aligned=True, offset=1)
        assert out.shape == (2,) and np.allclose(out.numpy(), np.array([0.33333334, 0.5]), 1e-2)
        assert torch.equal(fn(b1[:2], b2, aligned=True, offset=1), dk_mmcv.bbox_overlaps(b1[:2], b2, "iou", True, True))
        b1 = torch.tensor([[0.0, 0.0, 3.0, 3.0]])
        b2 = torch.tensor([[4.0, 0.0, 5.0, 3.0], [3.0, 0.0, 4.0, 3.0], [2.0, 0.0, 3.0, 3.0], [1.0, 0.0, 2.0, 3.0]])
        out = fn(b1, b2, offset=1)
        assert np.allclose(out.numpy(), np.array([0, 0.2, 0.5, 0.5]), 1e-2)
        # the docstring's example
        b1 = torch.tensor([[0, 0, 10, 10], [10, 10, 20, 20], [32, 32, 38, 42.0]])
        b2 = torch.tensor([[0, 0, 10, 20], [0, 10, 10, 19], [10, 10, 20, 20.0]])
        assert torch.equal(fn(b1, b2), torch.tensor([[0.5, 0, 0], [0, 0, 1], [0, 0, 0.0]]))


def test_mmcv_empty_shapes():
    empty, nonempty = torch.FloatTensor([]), torch.FloatTensor([[0, 0, 10, 9]])
    for fn in (dkit.ops.bbox_overlaps, dk_mmcv.bbox_overlaps):
        assert tuple(fn(empty, nonempty).shape) == (0, 1)
        assert tuple(fn(nonempty, empty).shape) == (1, 0)
        assert tuple(fn(empty, empty).shape) == (0, 0)
        assert tuple(fn(empty, empty, aligned=True).shape) == (0, 1)
        assert fn(torch.zeros(0, 4, dtype=torch.float64), nonempty).dtype == torch.float64


@pytest.mark.parametrize("mode", ["iou", "iof"])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mmcv_cpu_kernel_values(mode, offset, dtype):
    b1 = torch.cat([random_boxes(40, 21, dtype=dtype), special_boxes(dtype)])
    b2 = torch.cat([random_boxes(26, 22, dtype=dtype), special_boxes(dtype)])
    assert_same(dkit.ops.bbox_overlaps(b1, b2, mode, False, offset), mmcv_cpu(b1, b2, mode, False, offset))
    b2 = torch.cat([random_boxes(40, 23, dtype=dtype), special_boxes(dtype).flip(0)])
    assert_same(dk_mmcv.bbox_overlaps(b1, b2, mode, True, offset), mmcv_cpu(b1, b2, mode, True, offset))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mmcv_sixteen_bit(dtype):
    """MMCV's CPU kernel cannot clamp 16-bit tensors in torch 1.13; dkit computes its expressions
    with every operation rounded to 16 bits (the C kernel test checks that exactly): here, close
    to the float32 result, and of the boxes' dtype."""
    b1, b2 = random_boxes(30, 23), random_boxes(20, 24)
    got = dkit.ops.bbox_overlaps(b1.to(dtype), b2.to(dtype), "iou", False, 1)
    assert got.dtype == dtype
    want = mmcv_cpu(b1.to(dtype).float(), b2.to(dtype).float(), "iou", False, 1)
    torch.testing.assert_close(got.float(), want, atol=2e-2 if dtype == torch.bfloat16 else 2e-3, rtol=0)


# ------------------------------------------------------------------------------------------
# Errors


def test_bad_shapes():
    good = random_boxes(3, 25)
    for bad in (torch.zeros(4), torch.zeros(3, 5), torch.zeros(2, 3, 4), torch.zeros(3, 3)):
        for name in TV:
            with pytest.raises(ValueError, match=r"must have shape \[K, 4\]"):
                getattr(dkit.ops, name)(good, bad)
            with pytest.raises(ValueError, match=r"must have shape \[K, 4\]"):
                getattr(dkit.ops, name)(bad, good)
        with pytest.raises(ValueError, match=r"must have shape \[K, 4\]"):
            dkit.ops.bbox_overlaps(good, bad)
    # torchvision up to 0.22 indexes the boxes first: IndexError for fewer than 2 dimensions;
    # later ones broadcast a single box. dkit's compat keeps the IndexError (Note [Batched box
    # overlaps] in dkit/compat/torchvision.py).
    for name in TV:
        if not _tv_batched():
            with pytest.raises(IndexError):
                TV[name](torch.zeros(4), good)
        with pytest.raises(IndexError, match="too many indices"):
            getattr(dk_tv, name)(torch.zeros(4), good)
        with pytest.raises(ValueError):  # torchvision silently reads the first 4 columns
            getattr(dk_tv, name)(torch.zeros(3, 5), torch.zeros(2, 5))
    # MMCV asserts on the last dimension, and its CPU kernel fails to index 1-d boxes
    with pytest.raises(AssertionError):
        dk_mmcv.bbox_overlaps(good, torch.zeros(3, 5))
    with pytest.raises(IndexError):
        dk_mmcv.bbox_overlaps(torch.zeros(4), good)


def _tv_batched():
    """Whether the installed torchvision has the batched box overlaps of 0.23 (box_iou's fmt)."""
    return "fmt" in inspect.signature(tvops.box_iou).parameters


@pytest.mark.parametrize("name", list(TV))
def test_batched_boxes_as_torchvision(name):
    # Note [Batched box overlaps]: [..., N, 4] x [..., M, 4], leading dimensions broadcast
    b1 = torch.stack([random_boxes(5, 40 + i) for i in range(6)]).reshape(2, 3, 5, 4)
    b2 = torch.stack([random_boxes(4, 50 + i) for i in range(3)]).reshape(1, 3, 4, 4)
    ours, scripted = getattr(dk_tv, name), torch.jit.script(getattr(dk_tv, name))
    got = ours(b1, b2)
    # each pair's values are dkit's for that pair, bit for bit, and torchvision's as close as the
    # unbatched functions' (complete_box_iou's atan may differ by an ulp)
    expect = torch.stack([ours(b1[i, j], b2[0, j]) for i in range(2) for j in range(3)]).reshape(2, 3, 5, 4)
    theirs = torch.stack([TV[name](b1[i, j], b2[0, j]) for i in range(2) for j in range(3)]).reshape(2, 3, 5, 4)
    assert got.shape == (2, 3, 5, 4) and torch.equal(got, expect)
    torch.testing.assert_close(got, theirs, rtol=1e-6, atol=1e-6)
    assert torch.equal(scripted(b1, b2), got)
    one = torch.stack([ours(b1[0, 0], b2[0, j]) for j in range(3)])
    assert torch.equal(ours(b1[0, 0], b2[0]), one)  # [N, 4] against a batch
    assert ours(b1[:, :, :0], b2).shape == (2, 3, 0, 4) and ours(b1[:0], b2).shape == (0, 3, 5, 4)
    assert scripted(b1[:0], b2).shape == (0, 3, 5, 4)
    if _tv_batched():
        torch.testing.assert_close(got, TV[name](b1, b2), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError):  # leading dimensions that do not broadcast
        ours(b1, b2.expand(2, 3, 4, 4)[:, :2])


def test_box_iou_formats():
    b = random_boxes(7, 61).double()
    xywh = torch.cat([b[:, :2], b[:, 2:] - b[:, :2]], 1)
    cxcywh = torch.cat([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], 1)
    scripted = torch.jit.script(dk_tv.box_iou)
    for boxes, fmt in ((b, "xyxy"), (xywh, "xywh"), (cxcywh, "cxcywh")):
        for f in (dk_tv.box_iou, scripted):
            torch.testing.assert_close(f(boxes, boxes[:3], fmt), tvops.box_iou(b, b[:3]), rtol=1e-12, atol=1e-12)
        if _tv_batched():  # the corners are converted first: torchvision's values within rounding
            torch.testing.assert_close(dk_tv.box_iou(boxes, boxes[:3], fmt=fmt),
                                       tvops.box_iou(boxes, boxes[:3], fmt=fmt), rtol=1e-12, atol=1e-12)  # fmt: skip
    for f in (dk_tv.box_iou, scripted):
        with pytest.raises(Exception, match="Unsupported Box IoU Calculation for given format xyzw"):
            f(b, b, "xyzw")
    with pytest.raises(ValueError):
        dk_tv.box_iou(b, b, fmt="xyzw")


def test_bad_dtypes_and_arguments():
    b32, b64 = random_boxes(3, 26), random_boxes(2, 27, dtype=torch.float64)
    for name in TV:
        with pytest.raises(TypeError, match="same dtype"):
            getattr(dkit.ops, name)(b32, b64)
    with pytest.raises(TypeError, match="same dtype"):
        dk_mmcv.bbox_overlaps(b32, b64)
    with pytest.raises(TypeError):
        dkit.ops.box_iou(b32, [[0, 0, 1, 1]])
    with pytest.raises(TypeError, match="eps"):
        dkit.ops.distance_box_iou(b32, b32, eps="small")
    with pytest.raises(ValueError, match="mode"):
        dkit.ops.bbox_overlaps(b32, b32, mode="giou")
    with pytest.raises(ValueError, match="offset"):
        dkit.ops.bbox_overlaps(b32, b32, offset=2)
    with pytest.raises(ValueError, match="aligned"):
        dkit.ops.bbox_overlaps(b32, b32[:2], aligned=True)
    with pytest.raises(TypeError, match="aligned"):
        dkit.ops.bbox_overlaps(b32, b32, aligned="yes")
    for kwargs in ({"mode": "giou"}, {"offset": 2}, {"aligned": True}):
        with pytest.raises(AssertionError):
            dk_mmcv.bbox_overlaps(b32, b32[:2], **kwargs)
    # every error is also a RuntimeError, as the rest of dkit's
    with pytest.raises(RuntimeError):
        dkit.ops.bbox_overlaps(b32, b32, mode="giou")


def test_two_to_the_31_boxes_are_refused_before_allocating():
    big = torch.zeros(1, 4).expand(2**31, 4)
    small = random_boxes(2, 28)
    for name in TV:
        with pytest.raises(ValueError, match="2\\^31"):
            getattr(dkit.ops, name)(big, small)
        with pytest.raises(ValueError, match="2\\^31"):
            getattr(dkit.ops, name)(small, big)
    with pytest.raises(ValueError, match="2\\^31"):
        dkit.ops.bbox_overlaps(big, big, aligned=True)
    # and by the core, for callers of _C
    out = torch.empty(1)
    with pytest.raises(ValueError, match="2\\^31"):
        _C.ops.box_iou(big, big, out, 0, True, 0.0, 0)


# ------------------------------------------------------------------------------------------
# Signatures


def test_torchvision_signatures_are_identical():
    for name in TV:
        # torchvision 0.23 added box_iou's fmt; dkit's compat takes it on every torchvision (Note
        # [Batched box overlaps] in dkit/compat/torchvision.py)
        assert_signature_covers(getattr(dk_tv, name), TV[name])
    assert list(inspect.signature(dk_tv.box_iou).parameters) == ["boxes1", "boxes2", "fmt"]
    assert inspect.signature(dk_tv.box_iou).parameters["fmt"].default == "xyxy"


def test_mmcv_signature():
    sig = inspect.signature(dk_mmcv.bbox_overlaps)
    assert list(sig.parameters) == ["bboxes1", "bboxes2", "mode", "aligned", "offset"]
    assert [p.default for p in sig.parameters.values()][2:] == ["iou", False, 0]
    # the same parameters and defaults (the compat function carries MMCV's annotations too)
    plain = [(p.name, p.default) for p in sig.parameters.values()]
    assert [(p.name, p.default) for p in inspect.signature(dkit.ops.bbox_overlaps).parameters.values()] == plain


def test_exported():
    for name in (*TV, "bbox_overlaps"):
        assert name in dkit.ops.__all__ and callable(getattr(dkit.ops, name))
    assert "box_iou" in dk_tv.__all__ and "bbox_overlaps" in dk_mmcv.__all__
