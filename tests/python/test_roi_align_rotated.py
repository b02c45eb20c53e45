"""roi_align_rotated (dkit.ops, dkit.compat.mmcv): MMCV's published test vectors (values and
gradients), a naive float64 reference written here from MMCV's definition (its kernels' sample
points and bilinear rule, loop by loop), gradcheck in float64, 16-bit inputs, strides, the same
bits for any thread count, TorchScript, MMCV's module interface, and the refusals."""

import math
import warnings

import numpy as np
import pytest

import dkit

torch = pytest.importorskip("torch")

from dkit import _C  # noqa: E402
from dkit.compat import DkitAssertionError  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402

# MMCV's bilinear read (the same rule as its roi_align's), from the roi_align reference
from roi_align_ref import _bilinear_taps  # noqa: E402

# ------------------------------------------------------------------------------------------
# The reference: MMCV's roi_align_rotated, from its definition, in float64 (the bilinear read
# of each sample point is _bilinear_taps: none outside [-1, H] x [-1, W], clamped at the edges)


def _samples(roi, ph_n, pw_n, scale, ratio, aligned, clockwise, ph, pw):
    """(count, [(y, x)]) of bin (ph, pw) of one rotated RoI (cx, cy, w, h, angle)."""
    cx, cy, w, h, theta = (float(v) for v in roi)
    off = 0.5 if aligned else 0.0
    cx, cy, w, h = cx * scale - off, cy * scale - off, w * scale, h * scale
    if clockwise:
        theta = -theta
    if not aligned:
        w, h = max(w, 1.0), max(h, 1.0)
    bh, bw = h / ph_n, w / pw_n
    gh = ratio if ratio > 0 else math.ceil(h / ph_n)
    gw = ratio if ratio > 0 else math.ceil(w / pw_n)
    pts = []
    for iy in range(max(gh, 0)):
        yy = -h / 2 + ph * bh + (iy + 0.5) * bh / gh
        for ix in range(max(gw, 0)):
            xx = -w / 2 + pw * bw + (ix + 0.5) * bw / gw
            c, s = math.cos(theta), math.sin(theta)
            pts.append((yy * c - xx * s + cy, yy * s + xx * c + cx))
    return max(gh * gw, 1), pts


def reference(x, rois, size, scale, ratio, aligned, clockwise, grad=None):
    """Output [K, C, PH, PW] (grad None) or grad_input [N, C, H, W] for grad_output `grad`."""
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    out = np.zeros((len(rois), c, *size))
    gin = np.zeros_like(x)
    for k, r in enumerate(np.asarray(rois, np.float64)):
        b = int(r[0])
        for ph in range(size[0]):
            for pw in range(size[1]):
                count, pts = _samples(r[1:], size[0], size[1], scale, ratio, aligned, clockwise, ph, pw)
                for y, xx in pts:
                    for row, col, wt in _bilinear_taps(h, w, y, xx):
                        if grad is None:
                            out[k, :, ph, pw] += wt * x[b, :, row, col] / count
                        else:
                            gin[b, :, row, col] += grad[k, :, ph, pw] * wt / count
    return out if grad is None else gin


def _rois(n, k, h, w, seed, dtype=torch.float64):
    """k rotated RoIs over n images of h x w: inside, across the edges, outside, large, tiny,
    negative sizes, any angle."""
    g = torch.Generator().manual_seed(seed)
    c = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor([w, h]) * 1.3 - 2
    s = torch.rand(k, 2, generator=g, dtype=torch.float64) * max(h, w) * 0.8
    a = (torch.rand(k, 1, generator=g, dtype=torch.float64) - 0.5) * 4 * math.pi
    r = torch.cat([torch.randint(0, n, (k, 1), generator=g).double(), c, s, a], 1)
    r[3::7, 3:5] = torch.tensor([0.3, 0.2], dtype=torch.float64)  # smaller than a pixel
    r[4::7, 3] = -2.0  # negative width
    r[5::7, 1:3] += 5 * max(h, w)  # outside
    r[6::7, 5] = 0.0  # axis-aligned
    return r.to(dtype)


# ------------------------------------------------------------------------------------------
# MMCV's published vectors (tests/test_ops/test_roi_align_rotated.py)

MMCV_INPUTS = [
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, 0]]),
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, np.pi / 2]]),
    ([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, 0]]),
    ([[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
     [[0.0, 1.5, 1.5, 3.0, 3.0, 0]]),
    ([[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
     [[0.0, 1.5, 1.5, 3.0, 3.0, np.pi / 2]]),
]  # fmt: skip
_G4 = [[0.47265625, 0.42968750, 0.42968750, 0.04296875], [0.42968750, 0.39062500, 0.39062500, 0.03906250],
       [0.42968750, 0.39062500, 0.39062500, 0.03906250], [0.04296875, 0.03906250, 0.03906250, 0.00390625]]  # fmt: skip
MMCV_OUTPUTS = [
    ([[[[1.0, 1.25], [1.5, 1.75]]]], [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
    ([[[[1.5, 1], [1.75, 1.25]]]], [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
    ([[[[1.0, 1.25], [1.5, 1.75]], [[4.0, 3.75], [3.5, 3.25]]]],
     [[[[3.0625, 0.4375], [0.4375, 0.0625]], [[3.0625, 0.4375], [0.4375, 0.0625]]]]),
    ([[[[1.9375, 4.75], [7.5625, 10.375]]]], [[_G4]]),
    ([[[[7.5625, 1.9375], [10.375, 4.75]]]], [[_G4]]),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mmcv_published_vectors(dtype):
    for (x, rois), (out, grad) in zip(MMCV_INPUTS, MMCV_OUTPUTS):
        x = torch.tensor(x, dtype=dtype, requires_grad=True)
        o = dk_mmcv.roi_align_rotated(x, torch.tensor(rois, dtype=dtype), (2, 2), 1.0, 2, True)
        o.backward(torch.ones_like(o))
        # MMCV's tolerance; every value here is exact in each dtype, so the results are too
        np.testing.assert_allclose(o.detach().float().numpy(), out, atol=1e-3, rtol=0)
        np.testing.assert_allclose(x.grad.float().numpy(), grad, atol=1e-3, rtol=0)
        assert torch.equal(o.detach().double(), torch.tensor(out, dtype=torch.float64))


def test_mmcv_published_gradcheck():
    for x, rois in MMCV_INPUTS:
        x = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        layer = dk_mmcv.RoIAlignRotated((2, 2), 1.0, 2)
        assert torch.autograd.gradcheck(layer, (x, torch.tensor(rois, dtype=torch.float64)), eps=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Against the reference


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("clockwise", [False, True])
@pytest.mark.parametrize(
    "ratio, size, scale", [(0, (3, 2), 0.5), (2, (2, 2), 1.0), (1, (4, 3), 0.7), (-1, (1, 5), 1.3)]
)
def test_equal_to_reference(aligned, clockwise, ratio, size, scale):
    g = torch.Generator().manual_seed(ratio * 7 + size[0])
    x = torch.randn(2, 3, 9, 11, generator=g, dtype=torch.float64)
    rois = _rois(2, 14, 9 / scale, 11 / scale, seed=size[1] + 3)
    want = reference(x, rois, size, scale, ratio, aligned, clockwise)
    go = torch.randn(len(rois), 3, *size, generator=g, dtype=torch.float64)
    want_grad = reference(x, rois, size, scale, ratio, aligned, clockwise, grad=go.numpy())
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-4)):
        xi = x.detach().to(dtype).requires_grad_()
        o = dkit.ops.roi_align_rotated(xi, rois.to(dtype), size, scale, ratio, aligned, clockwise)
        np.testing.assert_allclose(o.detach().double().numpy(), want, atol=tol, rtol=tol)
        o.backward(go.to(dtype))
        np.testing.assert_allclose(xi.grad.double().numpy(), want_grad, atol=tol, rtol=tol)


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 2, 6, 7, generator=g, dtype=torch.float64, requires_grad=True)
    rois = _rois(2, 6, 6, 7, seed=4)
    for ratio, aligned, clockwise in ((0, True, False), (2, False, True)):
        f = lambda t: dkit.ops.roi_align_rotated(t, rois, (2, 3), 1.0, ratio, aligned, clockwise)  # noqa: E731
        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)


def test_bins_larger_than_the_table():
    """A bin with more samples than the CPU kernel tabulates at once (4096) is computed by the
    per-element math: the same reference, forward and backward."""
    x = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    rois = torch.tensor([[0, 4.0, 3.5, 6.0, 5.0, 0.4], [0, 2.0, 2.0, 3.0, 3.0, -0.2]], dtype=torch.float64)
    go = torch.randn(2, 2, 1, 2, dtype=torch.float64)
    xi = x.clone().requires_grad_()
    o = dkit.ops.roi_align_rotated(xi, rois, (1, 2), 1.0, 70, True, False)  # 4900 samples per bin
    np.testing.assert_allclose(o.detach().numpy(), reference(x, rois, (1, 2), 1.0, 70, True, False), rtol=1e-11)
    o.backward(go)
    want = reference(x, rois, (1, 2), 1.0, 70, True, False, grad=go.numpy())
    np.testing.assert_allclose(xi.grad.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_is_float32_rounded(dtype):
    """16-bit inputs are computed in float32: the float32 result of the same values, rounded."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 10, 9, generator=g).to(dtype)
    rois = _rois(2, 12, 10, 9, seed=6).to(dtype)
    go = torch.randn(12, 3, 3, 3, generator=g).to(dtype)
    xi, x32 = x.clone().requires_grad_(), x.float().requires_grad_()
    o = dkit.ops.roi_align_rotated(xi, rois, 3, 1.0, 0)
    o32 = dkit.ops.roi_align_rotated(x32, rois.float(), 3, 1.0, 0)
    assert o.dtype == dtype and torch.equal(o.detach(), o32.detach().to(dtype))
    o.backward(go)
    o32.backward(go.float())
    assert torch.equal(xi.grad, x32.grad.to(dtype))


def test_strides_and_threads():
    """Channels-last and strided views read in place, expanded gradients, and the same bits for
    1 and 2 threads (the backward has no atomics)."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 20, 24, 26, generator=g)
    rois = _rois(2, 40, 24, 26, seed=9, dtype=torch.float32)
    xs = [x, x.to(memory_format=torch.channels_last), torch.randn(2, 20, 24, 52, generator=g)[..., ::2].copy_(x)]
    results = []
    for t in (1, 2):
        dkit.set_num_threads(t)
        try:
            for xi in xs:
                xi = xi.detach().requires_grad_()
                o = dkit.ops.roi_align_rotated(xi, rois, (7, 7), 0.9, 0, True, t == 2)
                o.sum().backward()
                results.append((o.detach(), xi.grad))
        finally:
            dkit.set_num_threads(0)
    for o, gr in results[1:3]:
        assert torch.equal(o, results[0][0]) and torch.equal(gr, results[0][1])
    for o, gr in results[4:]:
        assert torch.equal(o, results[3][0]) and torch.equal(gr, results[3][1])
    xi = x.detach().requires_grad_()
    o = dkit.ops.roi_align_rotated(xi, rois, (7, 7), 0.9, 0, True, False)
    o.sum().backward()
    assert torch.equal(o.detach(), results[0][0]) and torch.equal(xi.grad, results[0][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_channel_rows_paths_agree(dtype):
    """The CPU kernel's paths between channel planes and its channels-last rows (Note
    [Channels-last copies]): float32 with AVX2 moves them in 8 x 8 tiles (a whole map, or a row
    at a time where the map's rows are apart; output and gradient runs of contiguous bins), the
    baseline ISA (roi_align_rotated.isa 0) and the other dtypes element by element. Odd channel
    counts (tiles and their tails; the AVX2 runs' chunks of 32 and 16 lanes and the loops' rest),
    maps of 9 x 11 and rows 16 apart, 7 x 7 and 1 x 20 bins (one row, dense even where rows are
    apart), sampling_ratio 0 and 2, clockwise or not, 1 and 2 threads: the same bits on every
    path, and the reference's values (float32 and float64)."""
    g = torch.Generator().manual_seed(11)
    prev = _C.tunable("roi_align_rotated.isa")
    try:
        for c, size, ratio, clockwise in ((53, (7, 7), 2, True), (21, (1, 20), 0, False), (6, (7, 7), 0, True)):
            x = torch.randn(2, c, 9, 11, generator=g, dtype=torch.float64)
            rois = _rois(2, 9, 9, 11, seed=c)
            go = torch.randn(9, c, size[0], size[1] + 5, generator=g, dtype=torch.float64)[..., : size[1]]
            want = reference(x, rois, size, 1.0, ratio, True, clockwise)
            want_grad = reference(x, rois, size, 1.0, ratio, True, clockwise, grad=go.numpy())
            results = []
            for isa, threads, layout in ((0, 1, 0), (1, 1, 0), (1, 2, 0), (1, 1, 1), (0, 2, 1)):
                _C.tunable("roi_align_rotated.isa", isa)
                dkit.set_num_threads(threads)
                xi = torch.empty(2, c, 9, 16 if layout else 11, dtype=dtype)[..., :11]  # layout 1: rows 16 apart
                xi = xi.copy_(x).detach().requires_grad_()
                o = dkit.ops.roi_align_rotated(xi, rois.to(dtype), size, 1.0, ratio, True, clockwise)
                o.backward(go.to(dtype) if layout else go.to(dtype).contiguous())
                results.append((o.detach(), xi.grad))
            for o, gr in results[1:]:
                assert torch.equal(o, results[0][0]) and torch.equal(gr, results[0][1])
            if dtype in (torch.float32, torch.float64):  # 16-bit RoIs are other boxes (test_16_bit_...)
                tol = 1e-12 if dtype == torch.float64 else 1e-4
                np.testing.assert_allclose(results[0][0].double().numpy(), want, atol=tol, rtol=tol)
                np.testing.assert_allclose(results[0][1].double().numpy(), want_grad, atol=tol, rtol=tol)
    finally:
        _C.tunable("roi_align_rotated.isa", prev)
        dkit.set_num_threads(0)


def test_clockwise_is_the_negated_angle():
    x = torch.randn(1, 2, 12, 12)
    rois = _rois(1, 10, 12, 12, seed=11, dtype=torch.float32)
    flipped = rois.clone()
    flipped[:, 5] = -flipped[:, 5]
    assert torch.equal(dkit.ops.roi_align_rotated(x, rois, 3, 1.0, 2, True, True),
                       dkit.ops.roi_align_rotated(x, flipped, 3, 1.0, 2, True, False))  # fmt: skip


def test_numpy_and_empty():
    x = np.random.default_rng(0).random((1, 2, 5, 5)).astype(np.float32)
    rois = np.array([[0, 2, 2, 3, 2, 0.5]], np.float32)
    out = dkit.ops.roi_align_rotated(x, rois, 2, 1.0, 2)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, reference(x, rois, (2, 2), 1.0, 2, True, False), rtol=1e-5, atol=1e-6)
    assert dkit.ops.roi_align_rotated(torch.zeros(1, 2, 5, 5), torch.zeros(0, 6), 2).shape == (0, 2, 2, 2)
    assert torch.equal(dkit.ops.roi_align_rotated(torch.zeros(1, 2, 0, 5), torch.zeros(1, 6), 2),
                       torch.zeros(1, 2, 2, 2))  # fmt: skip


# ------------------------------------------------------------------------------------------
# Refusals


def test_bad_inputs():
    x = torch.randn(2, 3, 8, 8)
    good = torch.tensor([[0, 4, 4, 3, 2, 0.5]])
    f = dkit.ops.roi_align_rotated
    with pytest.raises(_C.DkitValueError, match=r"'rois' must have shape \[K, 6\] \(batch_index, cx, cy, w, h, angle"):
        f(x, torch.zeros(1, 5), 2)
    with pytest.raises(_C.DkitValueError, match="non-finite angle"):
        f(x, torch.tensor([[0, 4, 4, 3, 2, float("nan")]]), 2)
    with pytest.raises(_C.DkitValueError, match="non-finite coordinate"):
        f(x, torch.tensor([[0, 4, float("inf"), 3, 2, 0.0]]), 2)
    with pytest.raises(_C.DkitIndexError, match="batch index"):
        f(x, torch.tensor([[2, 4, 4, 3, 2, 0.5]]), 2)
    with pytest.raises(_C.DkitIndexError, match="batch index"):
        f(x, torch.tensor([[0.5, 4, 4, 3, 2, 0.5]]), 2)
    with pytest.raises(_C.DkitTypeError):
        f(x, good.double(), 2)
    with pytest.raises(_C.DkitTypeError):
        f(x.int(), good.int(), 2)
    with pytest.raises(_C.DkitValueError, match="output size"):
        f(x, good, 0)
    with pytest.raises(_C.DkitValueError, match="spatial_scale"):
        f(x, good, 2, 0.0)
    with pytest.raises(_C.DkitValueError, match="spatial_scale"):
        f(x, good, 2, 1e300)
    with pytest.raises(_C.DkitValueError, match="sampling_ratio"):
        f(x, good, 2, 1.0, 2**31)
    with pytest.raises(_C.DkitValueError, match="'input' must be 4-d"):
        f(x[0], good, 2)
    with pytest.raises(_C.DkitValueError, match="overflows float32"):
        f(x, torch.tensor([[0, 4, 4, 3e38, 2, 0.5]]), 2, 4.0)
    # the backward's own checks
    with pytest.raises(_C.DkitValueError, match="'grad_output'"):
        _C.ops.roi_align_rotated_backward(torch.zeros(1, 3, 2), good, torch.empty(2, 3, 8, 8), 1.0, 0, True, False)
    with pytest.raises(_C.DkitValueError, match="'grad_output'"):
        _C.ops.roi_align_rotated_backward(torch.zeros(1, 4, 2, 2), good, torch.empty(2, 3, 8, 8), 1.0, 0, True, False)


# ------------------------------------------------------------------------------------------
# dkit.compat.mmcv


def test_compat_module_and_function():
    x = torch.randn(2, 3, 8, 9)
    rois = _rois(2, 9, 8, 9, seed=12, dtype=torch.float32)
    want = dkit.ops.roi_align_rotated(x, rois, (2, 3), 0.5, 2, False, True)
    layer = dk_mmcv.RoIAlignRotated((2, 3), 0.5, 2, aligned=False, clockwise=True)
    assert repr(layer) == (
        "RoIAlignRotated(output_size=(2, 3), spatial_scale=0.5, sampling_ratio=2, aligned=False, clockwise=True)"
    )
    assert torch.equal(layer(x, rois), want)
    assert torch.equal(dk_mmcv.roi_align_rotated(x, rois, (2, 3), 0.5, 2, False, True), want)
    assert torch.equal(dk_mmcv.RoIAlignRotatedFunction.apply(x, rois, (2, 3), 0.5, 2, False, True), want)
    assert torch.equal(torch.jit.script(layer)(x, rois), want)
    assert torch.equal(torch.jit.script(dk_mmcv.roi_align_rotated)(x, rois, [2, 3], 0.5, 2, False, True), want)
    assert torch.equal(torch.ops.dkit.roi_align_rotated(x, rois, [2, 3], 0.5, 2, False, True), want)
    # defaults: sampling_ratio=0, aligned=True, clockwise=False
    assert torch.equal(dk_mmcv.RoIAlignRotated(2, 0.5)(x, rois), dkit.ops.roi_align_rotated(x, rois, 2, 0.5, 0))
    # MMCV's deprecated names, with its warning
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        old = dk_mmcv.RoIAlignRotated(out_size=(2, 3), spatial_scale=0.5, sample_num=2, aligned=False, clockwise=True)
    assert any(issubclass(i.category, DeprecationWarning) and "out_size" in str(i.message) for i in w)
    assert old.output_size == (2, 3) and old.sampling_ratio == 2 and torch.equal(old(x, rois), want)
    # MMCV's output_size checks and exception types
    with pytest.raises(TypeError, match='"output_size" must be an integer or tuple of integers'):
        dk_mmcv.roi_align_rotated(x, rois, [2, 3], 0.5)
    with pytest.raises(AssertionError):
        dk_mmcv.roi_align_rotated(x, rois, (2, 3, 4), 0.5)
    with pytest.raises(DkitAssertionError):
        dk_mmcv.roi_align_rotated(x, rois, (2, 3.0), 0.5)
