"""roi_pool (dkit.ops, dkit.compat.mmcv): torchvision's op as the reference for its bins, values,
argmax and gradients, to the bit; MMCV's published test vectors and a NumPy port of MMCV's kernel
for its bins; 16-bit inputs, NumPy arrays, TorchScript, and the refusals. ps_roi_pool and
ps_roi_align (dkit.ops, dkit.compat.torchvision) likewise against torchvision's ops, and
torchvision's own TestPSRoIAlign checks re-expressed against the compat module."""

import numpy as np
import pytest

import dkit

torch = pytest.importorskip("torch")
tvops = pytest.importorskip("torchvision.ops")

from dkit.compat import DkitAssertionError  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import assert_signature_covers  # noqa: E402


def _rois(n, k, span, seed, dtype=torch.float32):
    """k RoIs over n images: inside, across the edges, outside, reversed, points, half-pixel ties."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * span * 1.2 - 0.2 * span
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * span
    b = torch.cat([torch.randint(0, n, (k, 1), generator=g).double(), xy, xy + wh], 1)
    b[3::9, 3] = b[3::9, 1] - 3  # reversed
    b[4::9, 3:] = b[4::9, 1:3]  # a point
    b[5::9, 1::2] += 4 * span  # outside
    b[7::9, 1:] = torch.tensor([2.5, 0.5, 5.5, 3.5], dtype=torch.float64)  # round() ties
    return b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size, scale", [((2, 2), 1.0), ((7, 7), 0.25), ((3, 5), 0.5), ((1, 4), 1.7)])
def test_equal_to_torchvision(dtype, size, scale):
    g = torch.Generator().manual_seed(size[0] * 10 + size[1])
    x = torch.randn(2, 3, 17, 19, generator=g, dtype=torch.float64).to(dtype)
    x[0, 1, 3, 3] = float("nan")
    x[1, 0, 5, 5] = float("inf")
    rois = _rois(2, 40, 19 / scale, 7, dtype)
    want = tvops.roi_pool(x, rois, size, scale)
    got = dkit.ops.roi_pool(x, rois, size, scale)
    assert got.dtype == dtype and torch.equal(got.nan_to_num(), want.nan_to_num())
    # the gradients: each bin's to its maximum, added in torchvision's CPU order: the same bits
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    gout = torch.randn(want.shape, generator=g, dtype=torch.float64).to(dtype)
    tvops.roi_pool(xa, rois, size, scale).backward(gout)
    dkit.ops.roi_pool(xb, rois, size, scale).backward(gout)
    assert torch.equal(xa.grad, xb.grad)
    # and the module, and boxes as a list per image
    assert torch.equal(tvops.RoIPool(size, scale)(x, rois).nan_to_num(), got.nan_to_num())
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    assert torch.equal(dkit.ops.roi_pool(x, boxes, size, scale).nan_to_num(),
                       tvops.roi_pool(x, boxes, size, scale).nan_to_num())  # fmt: skip


@pytest.mark.parametrize("layout, isa", [(0, 1), (1, 1), (1, 0), (-1, 1)])
def test_both_forward_layouts_equal_torchvision(layout, isa):
    """Note [RoIPool on a CPU]: channel planes and channels-last blocks (with and without AVX2), on
    a map of 35 channels (two whole blocks of 16 and part of one) after a ReLU, so most bins hold
    equal maxima (zeros) and the first of them must win, as in torchvision; one image of small
    integers ties in every bin, across rows too, with -0.0 against 0.0, and the outputs are
    compared bit for bit (a tile that kept a later pixel's index, or the other zero's sign, fails)."""
    _check_forward_path(layout, isa, stream=False)


@pytest.mark.parametrize("isa, stream", [(2, False), (2, True), (1, True)])
def test_avx512_tiles_and_streamed_runs_equal_torchvision(isa, stream):
    """Note [RoIPool tiles]: the AVX-512 tiles, and the runs streamed to the output and argmax
    (large_output.min_bytes 0 makes every output large; runs of 16 x 49 elements start anywhere in a
    64-byte line), on the same map as above. Where the CPU lacks AVX-512 this runs the AVX2 tiles."""
    _check_forward_path(1, isa, stream)


def _check_forward_path(layout, isa, stream):
    from dkit import _C

    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 35, 21, 18, generator=g).relu()
    x[1, 4, 2:6, 3:9] = 1.0  # equal positive maxima too
    x[2, :20, 1::3] = -0.0  # and -0.0 tying with 0.0: the first's sign is kept, compared bit for bit below
    # image 0 small integers, ties in every bin between rows and within them, half their zeros -0.0
    x[0] = torch.randint(-2, 3, x[0].shape, generator=g).float()
    x[0][(x[0] == 0) & (torch.rand(x[0].shape, generator=g) < 0.5)] = -0.0
    rois = _rois(3, 80, 18 / 0.5, 12)
    prev = (_C.tunable("roi_pool.layout"), _C.tunable("roi_pool.isa"), _C.tunable("large_output.min_bytes"))
    try:
        _C.tunable("roi_pool.layout", layout)
        _C.tunable("roi_pool.isa", isa)
        if stream:
            _C.tunable("large_output.min_bytes", 0)
        for size in ((7, 7), (2, 5)):
            want = tvops.roi_pool(x, rois, size, 0.5)
            inferred = dkit.ops.roi_pool(x, rois, size, 0.5)  # inference: no argmax written
            assert torch.equal(inferred.view(torch.int32), want.view(torch.int32))
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            gout = torch.randn(want.shape, generator=g)
            tvops.roi_pool(xa, rois, size, 0.5).backward(gout)
            got = dkit.ops.roi_pool(xb, rois, size, 0.5)  # training: an int16 argmax
            got.backward(gout)
            assert torch.equal(got.detach().view(torch.int32), want.view(torch.int32))  # the values, bit for bit
            assert torch.equal(xa.grad, xb.grad)
    finally:
        _C.tunable("roi_pool.layout", prev[0])
        _C.tunable("roi_pool.isa", prev[1])
        _C.tunable("large_output.min_bytes", prev[2])


def test_argmax_is_the_narrowest_integer_that_indexes_the_plane():
    """The forward on the way to a backward keeps an argmax: int16 on the CPU for a plane of fewer
    than 2^15 pixels (Note [A narrow argmax]), int32 as torchvision's below 2^31, int64 for a plane
    of 2^31 pixels or more (broadcast views here: nothing that large is allocated), which the
    channel-plane forward serves (the blocks index in int32)."""
    from dkit import _frameworks
    from dkit._ops import roi_pool as family

    fw = _frameworks.of(torch.empty(0))
    rois = torch.tensor([[0.0, 10, 10, 20, 30]])
    small = torch.rand(1, 2, 40, 40)
    out, argmax = family._forward(fw, small, rois, 2, 2, 1.0, 0)
    assert argmax.dtype == torch.int16 and torch.equal(out, tvops.roi_pool(small, rois, 2, 1.0))
    edge = torch.rand(1, 2, 1, 1).expand(1, 2, 127, 258)  # 32766 pixels: the last index 32765 fits
    assert family._forward(fw, edge, rois, 2, 2, 1.0, 0)[1].dtype == torch.int16
    mid = torch.rand(1, 2, 1, 1).expand(1, 2, 128, 256)  # 2^15 pixels
    out, argmax = family._forward(fw, mid, rois, 2, 2, 1.0, 0)
    assert argmax.dtype == torch.int32 and torch.equal(out, tvops.roi_pool(mid.contiguous(), rois, 2, 1.0))
    x = torch.full((1, 1, 1, 1), 2.5).expand(1, 1, 65536, 32768)
    out, argmax = family._forward(fw, x, rois, 2, 2, 1.0, 0)
    assert argmax.dtype == torch.int64 and out.flatten().tolist() == [2.5] * 4
    assert argmax.flatten().tolist() == [10 * 32768 + 10, 10 * 32768 + 15, 20 * 32768 + 10, 20 * 32768 + 15]
    v = torch.full((1, 1, 1, 1), 2.5, requires_grad=True)
    assert dkit.ops.roi_pool(v.expand(1, 1, 65536, 32768), rois, 2, 1.0).requires_grad


def test_gradcheck():
    x = torch.rand(1, 2, 10, 10, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1, 1, 7, 8], [0, 0, 3, 9, 5]], dtype=torch.float64)
    for geometry in ("torchvision", "mmcv"):
        assert torch.autograd.gradcheck(lambda t: dkit.ops.roi_pool(t, rois, 3, 1.0, geometry), (x,))


# ------------------------------------------------------------------------------------------
# MMCV's bins

MMCV_INPUTS = [([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.0, 0.0, 1.0, 1.0]]),
               ([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]], [[0.0, 0.0, 0.0, 1.0, 1.0]]),
               ([[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
                [[0.0, 0.0, 0.0, 3.0, 3.0]])]  # fmt: skip
MMCV_OUTPUTS = [
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[[[1.0, 1.0], [1.0, 1.0]]]]),
    ([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]], [[[[1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]]]),
    ([[[[4.0, 8.0], [12.0, 16.0]]]], [[[[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 1.0]]]]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mmcv_published_vectors(dtype):
    # mmcv tests/test_ops/test_roi_pool.py (MMCV runs them on CUDA only; dkit on the CPU too)
    for (x, rois), (out, grad) in zip(MMCV_INPUTS, MMCV_OUTPUTS):
        x = torch.tensor(x, dtype=dtype, requires_grad=True)
        o = dk_mmcv.roi_pool(x, torch.tensor(rois, dtype=dtype), (2, 2), 1.0)
        o.backward(torch.ones_like(o))
        assert o.tolist() == out and x.grad.tolist() == grad


def _mmcv_reference(x, rois, ph_n, pw_n, scale):
    """MMCV's roi_pool_forward_cuda_kernel in NumPy, float32 arithmetic, floorf / ceilf."""
    f = np.float32
    x, rois = x.numpy(), rois.numpy()
    k_n, c_n, h_n, w_n = len(rois), x.shape[1], x.shape[2], x.shape[3]
    out = np.zeros((k_n, c_n, ph_n, pw_n), np.float32)
    for k in range(k_n):
        b, x1, y1, x2, y2 = (f(v) for v in rois[k])
        s = f(scale)
        rx1, ry1, rx2, ry2 = x1 * s, y1 * s, (x2 + f(1)) * s, (y2 + f(1)) * s
        rw, rh = rx2 - rx1, ry2 - ry1
        if rw <= 0 or rh <= 0:
            continue
        bw, bh = rw / f(pw_n), rh / f(ph_n)
        for ph in range(ph_n):
            for pw in range(pw_n):
                ys = min(max(int(np.floor(f(ph) * bh + ry1)), 0), h_n)
                ye = min(max(int(np.ceil(f(ph + 1) * bh + ry1)), 0), h_n)
                xs = min(max(int(np.floor(f(pw) * bw + rx1)), 0), w_n)
                xe = min(max(int(np.ceil(f(pw + 1) * bw + rx1)), 0), w_n)
                if ye <= ys or xe <= xs:
                    continue
                out[k, :, ph, pw] = x[int(b), :, ys:ye, xs:xe].reshape(c_n, -1).max(1).clip(min=-np.finfo(f).max)
    return torch.from_numpy(out)


@pytest.mark.parametrize("size, scale", [((2, 2), 1.0), ((7, 7), 0.25), ((3, 5), 0.6)])
def test_mmcv_geometry_against_its_kernel(size, scale):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 15, 13, generator=g)
    rois = _rois(2, 60, 13 / scale, 8)
    got = dkit.ops.roi_pool(x, rois, size, scale, geometry="mmcv")
    assert torch.equal(got, _mmcv_reference(x, rois, *size, scale))
    assert torch.equal(dk_mmcv.roi_pool(x, rois, size, scale), got)
    assert torch.equal(dk_mmcv.RoIPool(size, scale)(x, rois), got)


# ------------------------------------------------------------------------------------------
# Dtypes, frameworks, TorchScript


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bit_inputs(dtype):
    # a maximum is exact in any dtype; bins are computed in float32 (torchvision's CPU kernel
    # takes neither dtype)
    x = torch.randn(1, 3, 12, 12).to(dtype)
    rois = _rois(1, 20, 12, 9).to(dtype)
    got = dkit.ops.roi_pool(x, rois, 3, 1.0)
    assert got.dtype == dtype
    assert torch.equal(got, dkit.ops.roi_pool(x.float(), rois.float(), 3, 1.0).to(dtype))


def test_numpy_in_numpy_out():
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
    rois = np.array([[0, 1, 1, 6, 6], [1, 0, 2, 8, 5]], np.float32)
    got = dkit.ops.roi_pool(x, rois, 2, 1.0)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, tvops.roi_pool(torch.from_numpy(x), torch.from_numpy(rois), 2, 1.0).numpy())


def test_torchscript_and_torch_op():
    x, rois = torch.randn(1, 2, 8, 8), torch.tensor([[0.0, 1, 1, 6, 6]])
    want = dkit.ops.roi_pool(x, rois, (2, 3), 0.5, "mmcv")
    assert torch.equal(torch.ops.dkit.roi_pool(x, rois, [2, 3], 0.5, "mmcv"), want)
    assert torch.equal(torch.jit.script(dk_mmcv.RoIPool((2, 3), 0.5))(x, rois), want)
    assert torch.equal(torch.jit.script(dk_mmcv.roi_pool)(x, rois, [2, 3], 0.5), want)


def _same_bits_for_any_thread_count(op, x, rois):
    """op(x, rois)'s values and input gradient on 1, 2 and 3 threads: the same bits."""
    x = x.detach().requires_grad_()
    runs = []
    for t in (1, 2, 3):
        dkit.set_num_threads(t)
        try:
            x.grad = None
            out = op(x, rois)
            out.sum().backward()
            runs.append((out.detach(), x.grad.clone()))
        finally:
            dkit.set_num_threads(0)
    assert all(torch.equal(a[0], runs[0][0]) and torch.equal(a[1], runs[0][1]) for a in runs)


def test_same_bits_for_any_thread_count():
    x, rois = torch.randn(2, 64, 32, 32), _rois(2, 200, 32, 10)
    _same_bits_for_any_thread_count(lambda x, r: dkit.ops.roi_pool(x, r, 7, 1.0), x, rois)


# ------------------------------------------------------------------------------------------
# Refusals


def test_bad_input():
    x, rois = torch.randn(1, 2, 8, 8), torch.tensor([[0.0, 1, 1, 6, 6]])
    with pytest.raises(ValueError, match="geometry must be 'torchvision' or 'mmcv', got 'caffe'"):
        dkit.ops.roi_pool(x, rois, 2, 1.0, "caffe")
    with pytest.raises(ValueError, match="output size must be positive"):
        dkit.ops.roi_pool(x, rois, 0, 1.0)
    with pytest.raises(ValueError, match="spatial_scale must be a positive finite number"):
        dkit.ops.roi_pool(x, rois, 2, -1.0)
    with pytest.raises(ValueError, match=r"'rois' must have shape \[K, 5\]"):
        dkit.ops.roi_pool(x, rois[:, :4], 2, 1.0)
    with pytest.raises(ValueError, match=r"'input' must be 4-d"):
        dkit.ops.roi_pool(x[0], rois, 2, 1.0)
    with pytest.raises(TypeError, match="'rois' must be float32, got float64"):
        dkit.ops.roi_pool(x, rois.double(), 2, 1.0)
    with pytest.raises(TypeError, match="must be float16, bfloat16, float32 or float64, got int64"):
        dkit.ops.roi_pool(x.long(), rois.long(), 2, 1.0)
    with pytest.raises(IndexError, match="batch index 3"):
        dkit.ops.roi_pool(x, torch.tensor([[3.0, 1, 1, 6, 6]]), 2, 1.0)
    with pytest.raises(ValueError, match="non-finite coordinate"):
        dkit.ops.roi_pool(x, torch.tensor([[0.0, 1, float("nan"), 6, 6]]), 2, 1.0)
    with pytest.raises(RuntimeError):  # every dkit error is a RuntimeError too, as torchvision's
        dkit.ops.roi_pool(x, rois, 0, 1.0)
    # MMCV's assertion for rois without 5 columns
    with pytest.raises(AssertionError, match=r"RoI must be \(idx, x1, y1, x2, y2\)!"):
        dk_mmcv.roi_pool(x, rois[:, :4], (2, 2))
    assert issubclass(DkitAssertionError, AssertionError)
    # empty: no boxes, no channels
    assert dkit.ops.roi_pool(x, rois[:0], 2, 1.0).shape == (0, 2, 2, 2)
    assert dkit.ops.roi_pool(x[:, :0], rois, 2, 1.0).shape == (1, 0, 2, 2)


def test_signatures():
    import inspect

    assert list(inspect.signature(dk_mmcv.roi_pool).parameters) == ["input", "rois", "output_size", "spatial_scale"]
    assert "roi_pool" in dkit.ops.__all__ and "RoIPool" in dk_mmcv.__all__
    assert repr(dk_mmcv.RoIPool(7, 0.25)) == "RoIPool(output_size=(7, 7), spatial_scale=0.25)"


# ------------------------------------------------------------------------------------------
# ps_roi_pool (torchvision's)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size, scale", [((2, 2), 1.0), ((3, 3), 0.25), ((3, 2), 0.7)])
def test_ps_roi_pool_equal_to_torchvision(dtype, size, scale):
    g = torch.Generator().manual_seed(size[0] * 7 + size[1])
    c = 2 * size[0] * size[1]
    x = torch.randn(2, c, 17, 15, generator=g, dtype=torch.float64).to(dtype)
    rois = _rois(2, 40, 15 / scale, 11, dtype)
    want = tvops.ps_roi_pool(x, rois, size, scale)
    got = dkit.ops.ps_roi_pool(x, rois, size, scale)
    assert got.shape == want.shape and torch.equal(got, want)
    assert torch.equal(tvops.PSRoIPool(size, scale)(x, rois), got)
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    assert torch.equal(dkit.ops.ps_roi_pool(x, boxes, size, scale), tvops.ps_roi_pool(x, boxes, size, scale))


def test_ps_roi_pool_gradients():
    # where no bin reaches the map's last row or column, torchvision's backward is the forward's
    # gradient, and dkit's equals it to the bit (the same additions in the same order)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 18, 16, 16, generator=g, dtype=torch.float64)
    rois = torch.tensor([[0, 1, 1, 9, 7], [1, 0.5, 2, 11, 11], [0, 3, 3, 4, 5], [1, 2, 2, 13, 12]], dtype=torch.float64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    gout = torch.randn(4, 2, 3, 3, generator=g, dtype=torch.float64)
    tvops.ps_roi_pool(xa, rois, 3, 1.0).backward(gout)
    dkit.ops.ps_roi_pool(xb, rois, 3, 1.0).backward(gout)
    assert torch.equal(xa.grad, xb.grad)
    # everywhere, dkit's is the gradient of its forward (torchvision's also reaches the last row
    # and column, which its forward never reads)
    edge = torch.tensor([[0, 0, 0, 40, 40]], dtype=torch.float64)
    xc = torch.rand(1, 8, 9, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: dkit.ops.ps_roi_pool(t, torch.cat([rois[:1], edge]), 2, 1.0), (xc,))
    dkit.ops.ps_roi_pool(xc, edge, 2, 1.0).sum().backward()
    assert (xc.grad[0, :, -1, :] == 0).all() and (xc.grad[0, :, :, -1] == 0).all()


@pytest.mark.parametrize("layout", [0, 1, -1])
@pytest.mark.parametrize("threads", [1, 2])
def test_ps_roi_pool_every_path_equal_to_torchvision(layout, threads):
    """Note [Position-sensitive RoIPool on a CPU]: channel planes or channels-last blocks (the
    forward's, and float32 and float64's backward), on one and two threads: 18 output channels (a
    block of 16 and a tail of 2), on a dense map, a channels-last one and a strided view, to
    torchvision's bits forward, and backward where no bin reaches the last row or column (which
    torchvision's backward reaches and its forward does not); 16-bit maps computed in float32."""
    from dkit import _C

    g = torch.Generator().manual_seed(31)
    base = torch.randn(3, 18 * 6 + 5, 21, 17, generator=g, dtype=torch.float64)
    rois = _rois(3, 70, 17 / 0.6, 37)
    inner = torch.cat([rois[:, :1], (rois[:, 1:] * 0.6).clamp(0, 14) / 0.6], 1)  # bins inside rows, columns < 16
    prev = (_C.tunable("ps_roi_pool.layout"), dkit.get_num_threads())
    try:
        _C.tunable("ps_roi_pool.layout", layout)
        dkit.set_num_threads(threads)
        for dtype in (torch.float32, torch.float64):
            x = base.to(dtype)[:, 5:]
            for xin in (x.contiguous(), x.contiguous(memory_format=torch.channels_last), x):
                want = tvops.ps_roi_pool(xin, rois.to(dtype), (2, 3), 0.6)
                assert torch.equal(dkit.ops.ps_roi_pool(xin, rois.to(dtype), (2, 3), 0.6), want)
                gout = torch.randn(want.shape, generator=g, dtype=dtype)
                xa, xb = xin.detach().clone().requires_grad_(), xin.detach().clone().requires_grad_()
                tvops.ps_roi_pool(xa, inner.to(dtype), (2, 3), 0.6).backward(gout)
                dkit.ops.ps_roi_pool(xb, inner.to(dtype), (2, 3), 0.6).backward(gout)
                assert torch.equal(xb.grad, xa.grad)
        xh, rh = base[:, 5:].to(torch.bfloat16), rois.to(torch.bfloat16)
        want = dkit.ops.ps_roi_pool(xh.float(), rh.float(), (2, 3), 0.6)
        assert torch.equal(dkit.ops.ps_roi_pool(xh, rh, (2, 3), 0.6), want.to(torch.bfloat16))
    finally:
        _C.tunable("ps_roi_pool.layout", prev[0])
        dkit.set_num_threads(prev[1])


@pytest.mark.parametrize("isa", [0, 2])
@pytest.mark.parametrize("threads", [1, 2])
def test_ps_roi_pool_plane_major_equal_to_torchvision(isa, threads):
    """Note [Position-sensitive RoIPool on a CPU]: the plane-major forward (ps_roi_pool.layout 2),
    its bins gathered with AVX-512 (ps_roi_pool.isa 2, where the CPU has it) or pooled one RoI at a
    time (0), and the backward on buffered planes, through the cases of the test above."""
    from dkit import _C

    prev = _C.tunable("ps_roi_pool.isa")
    try:
        _C.tunable("ps_roi_pool.isa", isa)
        test_ps_roi_pool_every_path_equal_to_torchvision(2, threads)
    finally:
        _C.tunable("ps_roi_pool.isa", prev)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ps_roi_pool_sixteen_bit(dtype):
    x = torch.randn(1, 8, 12, 12)
    rois = _rois(1, 20, 12, 12)
    got = dkit.ops.ps_roi_pool(x.to(dtype), rois.to(dtype), 2, 1.0)
    want = dkit.ops.ps_roi_pool(x.to(dtype).float(), rois.to(dtype).float(), 2, 1.0)
    assert got.dtype == dtype and torch.equal(got, want.to(dtype))  # summed in float32, rounded once


def test_ps_roi_pool_bad_input():
    x, rois = torch.randn(1, 6, 8, 8), torch.tensor([[0.0, 1, 1, 6, 6]])
    with pytest.raises(ValueError, match="input channels must be a multiple of pooling height \\* pooling width"):
        dkit.ops.ps_roi_pool(x, rois, 2, 1.0)
    with pytest.raises(ValueError, match="output size must be positive"):
        dkit.ops.ps_roi_pool(x, rois, (0, 2), 1.0)
    with pytest.raises(IndexError, match="batch index 2"):
        dkit.ops.ps_roi_pool(x, torch.tensor([[2.0, 1, 1, 6, 6]]), (2, 3), 1.0)
    with pytest.raises(TypeError, match="'rois' must be float32, got float64"):
        dkit.ops.ps_roi_pool(x, rois.double(), (2, 3), 1.0)
    assert dkit.ops.ps_roi_pool(x, rois[:0], (2, 3), 1.0).shape == (0, 1, 2, 3)
    assert torch.equal(torch.ops.dkit.ps_roi_pool(x, rois, [2, 3], 0.5), dkit.ops.ps_roi_pool(x, rois, (2, 3), 0.5))


# ------------------------------------------------------------------------------------------
# dkit.compat.torchvision


def test_torchvision_compat_signatures_are_identical():
    for name in ("roi_pool", "ps_roi_pool", "ps_roi_align", "RoIPool", "PSRoIPool", "PSRoIAlign"):
        ours, theirs = getattr(dk_tv, name), getattr(tvops, name)
        pairs = [(ours, theirs)]
        if isinstance(ours, type):
            pairs += [(ours.__init__, theirs.__init__), (ours.forward, theirs.forward)]
        for a, b in pairs:
            assert_signature_covers(a, b)
            assert_signature_covers(b, a)
    assert {"roi_pool", "RoIPool", "ps_roi_pool", "PSRoIPool", "ps_roi_align", "PSRoIAlign"} <= set(dk_tv.__all__)


def test_torchvision_compat_values_scripted_and_errors():
    g = torch.Generator().manual_seed(21)
    x = torch.randn(2, 8, 11, 11, generator=g)
    rois = _rois(2, 12, 11, 21)
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    for ours, theirs, size in ((dk_tv.roi_pool, tvops.roi_pool, (3, 2)), (dk_tv.ps_roi_pool, tvops.ps_roi_pool, 2)):
        want = theirs(x, rois, size, 0.8)
        assert torch.equal(ours(x, rois, size, 0.8).nan_to_num(), want.nan_to_num())
        assert torch.equal(ours(x, boxes, size, 0.8).nan_to_num(), theirs(x, boxes, size, 0.8).nan_to_num())
        assert torch.equal(torch.jit.script(ours)(x, rois, size, 0.8).nan_to_num(), want.nan_to_num())
        # torchvision's AssertionError and message for malformed boxes, eagerly and scripted
        with pytest.raises(AssertionError, match=r"The boxes tensor shape is not correct as Tensor\[K, 5\]"):
            ours(x, rois[:, :4], size)
        with pytest.raises(AssertionError, match="List\\[Tensor\\[L, 4\\]\\]"):
            ours(x, [rois[:, :3]], size)
    assert torch.equal(torch.jit.script(dk_tv.RoIPool((3, 2), 0.8))(x, rois), tvops.RoIPool((3, 2), 0.8)(x, rois))
    assert torch.equal(torch.jit.script(dk_tv.PSRoIPool(2, 0.8))(x, rois), tvops.PSRoIPool(2, 0.8)(x, rois))
    assert repr(dk_tv.RoIPool(7, 0.5)) == repr(tvops.RoIPool(7, 0.5))
    assert repr(dk_tv.PSRoIPool(7, 0.5)) == repr(tvops.PSRoIPool(7, 0.5))


# ------------------------------------------------------------------------------------------
# ps_roi_align (torchvision's)


def _psa_pair(dtype, size, scale, sr, seed):
    """(torchvision's output, dkit's, and both gradients of one random gradient) on _rois."""
    g = torch.Generator().manual_seed(seed)
    c = 2 * size[0] * size[1]
    x = torch.randn(2, c, 17, 15, generator=g, dtype=torch.float64).to(dtype)
    rois = _rois(2, 40, 15 / scale, seed, dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = tvops.ps_roi_align(xa, rois, size, scale, sr)
    got = dkit.ops.ps_roi_align(xb, rois, size, scale, sr)
    gout = torch.randn(want.shape, generator=g, dtype=torch.float64).to(dtype)
    want.backward(gout)
    got.backward(gout)
    return x, rois, want.detach(), got.detach(), xa.grad, xb.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sr", [-1, 0, 1, 2, -3])
@pytest.mark.parametrize("size, scale", [((2, 2), 1.0), ((3, 3), 0.25), ((3, 2), 0.7), ((1, 5), 1.6)])
def test_ps_roi_align_equal_to_torchvision(dtype, sr, size, scale):
    x, rois, want, got, gwant, ggot = _psa_pair(dtype, size, scale, sr, size[0] * 7 + size[1] + sr)
    assert got.shape == want.shape and got.dtype == dtype
    # torchvision divides by a count of 0 for a bin without samples (the adaptive grid of a point
    # box): NaN there, dkit's 0; every other value, and every gradient, to the bit
    nan = want.isnan()
    assert (nan.any() == (sr <= 0)) and (got[nan] == 0).all()
    assert torch.equal(got[~nan], want[~nan])
    assert torch.equal(ggot, gwant)
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    want_list = tvops.ps_roi_align(x, boxes, size, scale, sr).nan_to_num()
    assert torch.equal(dkit.ops.ps_roi_align(x, boxes, size, scale, sr).nan_to_num(), want_list)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("tables", [0, 1])
def test_ps_roi_align_every_path_equal_to_torchvision(layout, tables):
    """Note [RoIAlign's position-sensitive form on a CPU]: channel planes or channels-last blocks,
    taps tabled per call or found per task: 18 output channels (a block of 16 and a tail of 2),
    on a dense map and a channels-last one, forward and backward to torchvision's bits; 16-bit
    maps computed in float32 as the float32 map is."""
    from dkit import _C

    g = torch.Generator().manual_seed(23)
    x = torch.randn(3, 18 * 6, 19, 16, generator=g)
    rois = _rois(3, 60, 16 / 0.7, 29)
    prev = (_C.tunable("ps_roi_align.layout"), _C.tunable("ps_roi_align.tap_tables"))
    try:
        _C.tunable("ps_roi_align.layout", layout)
        _C.tunable("ps_roi_align.tap_tables", tables)
        for xin, sr in ((x, -1), (x.contiguous(memory_format=torch.channels_last), 2)):
            want = tvops.ps_roi_align(xin, rois, (2, 3), 0.7, sr).nan_to_num()
            gout = torch.randn(want.shape, generator=g)
            xa, xb = xin.clone().requires_grad_(), xin.clone().requires_grad_()
            tvops.ps_roi_align(xa, rois, (2, 3), 0.7, sr).backward(gout)
            got = dkit.ops.ps_roi_align(xb, rois, (2, 3), 0.7, sr)
            got.backward(gout)
            assert torch.equal(got, want) and torch.equal(xb.grad, xa.grad)
        xh, rh = x.to(torch.bfloat16), rois.to(torch.bfloat16)
        want = dkit.ops.ps_roi_align(xh.float(), rh.float(), (2, 3), 0.7, 2)
        assert torch.equal(dkit.ops.ps_roi_align(xh, rh, (2, 3), 0.7, 2), want.to(torch.bfloat16))
    finally:
        _C.tunable("ps_roi_align.layout", prev[0])
        _C.tunable("ps_roi_align.tap_tables", prev[1])


@pytest.mark.parametrize("planes", [0, 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_ps_roi_align_grad_planes_equal_to_torchvision(planes, threads):
    """Note [RoIAlign's position-sensitive form on a CPU]: the backward on channels-last blocks
    stored through whole planes (ps_roi_align.grad_planes 1) or a row of four planes at a time
    (0), streamed (large_output.min_bytes 0) or not, on one and two threads: output channels 7 and
    18 (lane tails; a block of 16 and a tail of 2), planes of 19 x 15 (runs that start and end
    anywhere in a 16-byte group), RoIs off the map and across it, to torchvision's bits; float64
    and bfloat16 against float32's path as well."""
    from dkit import _C

    names = ("ps_roi_align.layout", "ps_roi_align.grad_planes", "large_output.min_bytes")
    prev = [_C.tunable(n) for n in names] + [dkit.get_num_threads()]
    g = torch.Generator().manual_seed(31)
    try:
        _C.tunable("ps_roi_align.layout", 1)
        _C.tunable("ps_roi_align.grad_planes", planes)
        dkit.set_num_threads(threads)
        for min_bytes, co in ((0, 7), (8 << 20, 18), (0, 18)):
            _C.tunable("large_output.min_bytes", min_bytes)
            x = torch.randn(3, co * 6, 19, 15, generator=g)
            rois = _rois(3, 50, 15 / 0.7, co)
            want = tvops.ps_roi_align(x, rois, (2, 3), 0.7, -1).nan_to_num()
            gout = torch.randn(want.shape, generator=g)
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            tvops.ps_roi_align(xa, rois, (2, 3), 0.7, -1).backward(gout)
            got = dkit.ops.ps_roi_align(xb, rois, (2, 3), 0.7, -1)
            got.backward(gout)
            assert torch.equal(got, want) and torch.equal(xb.grad, xa.grad)
            xd = x.double().requires_grad_()
            dkit.ops.ps_roi_align(xd, rois.double(), (2, 3), 0.7, 2).backward(gout.double())
            xr = xd.detach().clone().requires_grad_()
            tvops.ps_roi_align(xr, rois.double(), (2, 3), 0.7, 2).backward(gout.double())
            assert torch.equal(xd.grad, xr.grad)
            # bfloat16: summed in float32 as the float32 map is, rounded once
            xh, rh, gh = x.to(torch.bfloat16), rois.to(torch.bfloat16), gout.to(torch.bfloat16)
            xf, xhg = xh.float().requires_grad_(), xh.clone().requires_grad_()
            dkit.ops.ps_roi_align(xf, rh.float(), (2, 3), 0.7, -1).backward(gh.float())
            dkit.ops.ps_roi_align(xhg, rh, (2, 3), 0.7, -1).backward(gh)
            assert torch.equal(xhg.grad, xf.grad.to(torch.bfloat16))
    finally:
        for n, v in zip(names, prev[:3]):
            _C.tunable(n, v)
        dkit.set_num_threads(prev[3])


def test_ps_roi_align_gradcheck():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 12, 9, 8, generator=g, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor(
        [[0, 1, 1, 6.3, 5], [1, -1.5, 0.5, 9.5, 8.7], [0, 3, 3, 4, 5], [1, 7, 6, 2, 1]], dtype=torch.float64
    )
    for sr in (-1, 2, 3):
        assert torch.autograd.gradcheck(lambda t, sr=sr: dkit.ops.ps_roi_align(t, rois, (2, 3), 0.9, sr), (x,))
    xn = x.detach().permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2).requires_grad_()  # NHWC-like strides
    assert torch.autograd.gradcheck(lambda t: dkit.ops.ps_roi_align(t, rois, 2, 1.3, -1), (xn[:, :8],))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ps_roi_align_sixteen_bit(dtype):
    # computed in float32 from the 16-bit values, rounded once; the backward summed in float32
    x = torch.randn(2, 8, 12, 12).to(dtype)
    rois = _rois(2, 20, 12, 12).to(dtype)
    xs, xf = x.clone().requires_grad_(), x.float().requires_grad_()
    got = dkit.ops.ps_roi_align(xs, rois, 2, 0.8, 2)
    want = dkit.ops.ps_roi_align(xf, rois.float(), 2, 0.8, 2)
    assert got.dtype == dtype and torch.equal(got, want.to(dtype))
    gout = torch.randn(got.shape).to(dtype)
    got.backward(gout)
    want.backward(gout.float())
    assert xs.grad.dtype == dtype and torch.equal(xs.grad, xf.grad.to(dtype))
    # and close to torchvision's float32 (its own 16-bit CPU kernels compute in 16 bits, if at all)
    tv = tvops.ps_roi_align(x.float(), rois.float(), 2, 0.8, 2)
    torch.testing.assert_close(got.float(), tv, rtol=1e-2, atol=1e-2)


def test_ps_roi_align_same_bits_for_any_thread_count():
    x, rois = torch.randn(2, 98, 24, 24), _rois(2, 150, 24, 13)
    _same_bits_for_any_thread_count(lambda x, r: dkit.ops.ps_roi_align(x, r, 7, 1.0, -1), x, rois)
    _same_bits_for_any_thread_count(lambda x, r: dkit.ops.ps_roi_align(x.half(), r.half(), 7, 1.0, 2).float(), x, rois)


def test_ps_roi_align_torch_op_and_torchscript():
    x, rois = torch.randn(1, 12, 8, 8), torch.tensor([[0.0, 1, 1, 6, 6]])
    want = dkit.ops.ps_roi_align(x, rois, (2, 3), 0.5, 2)
    assert torch.equal(torch.ops.dkit.ps_roi_align(x, rois, [2, 3], 0.5, 2), want)

    @torch.jit.script
    def scripted(x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return torch.ops.dkit.ps_roi_align(x, rois, [2, 3], 0.5, 2)

    assert torch.equal(scripted(x, rois), want)
    assert torch.equal(torch.ops.dkit.ps_roi_align(x, rois, [2, 3]), dkit.ops.ps_roi_align(x, rois, (2, 3), 1.0, -1))


def test_ps_roi_align_bad_input():
    x, rois = torch.randn(1, 6, 8, 8), torch.tensor([[0.0, 1, 1, 6, 6]])
    with pytest.raises(ValueError, match="input channels must be a multiple of pooling height \\* pooling width"):
        dkit.ops.ps_roi_align(x, rois, 2)
    with pytest.raises(ValueError, match="output size must be positive"):
        dkit.ops.ps_roi_align(x, rois, (0, 2))
    with pytest.raises(ValueError, match="output size must be positive"):
        dkit.ops.ps_roi_align(x, rois, (-2, 3))
    with pytest.raises(ValueError, match="sampling_ratio must fit a 32-bit int"):
        dkit.ops.ps_roi_align(x, rois, (2, 3), 1.0, 2**31)
    with pytest.raises(ValueError, match="sampling_ratio must fit a 32-bit int"):
        dkit.ops.ps_roi_align(x, rois, (2, 3), 1.0, -(2**31) - 1)
    with pytest.raises(ValueError, match="spatial_scale must be a positive finite number"):
        dkit.ops.ps_roi_align(x, rois, (2, 3), -0.5)
    with pytest.raises(ValueError, match="'rois' must have shape \\[K, 5\\]"):
        dkit.ops.ps_roi_align(x, rois[:, :4], (2, 3))
    with pytest.raises(ValueError, match="non-finite"):
        dkit.ops.ps_roi_align(x, torch.tensor([[0.0, 1, float("nan"), 6, 6]]), (2, 3))
    with pytest.raises(IndexError, match="batch index 2"):
        dkit.ops.ps_roi_align(x, torch.tensor([[2.0, 1, 1, 6, 6]]), (2, 3))
    with pytest.raises(TypeError, match="'rois' must be float32, got float64"):
        dkit.ops.ps_roi_align(x, rois.double(), (2, 3))
    with pytest.raises(TypeError):
        dkit.ops.ps_roi_align(x.int(), rois.int(), (2, 3))
    # every sampling_ratio <= 0 is the adaptive grid, as torchvision's
    assert torch.equal(dkit.ops.ps_roi_align(x, rois, (2, 3), 1.0, -9), dkit.ops.ps_roi_align(x, rois, (2, 3), 1.0, 0))
    assert dkit.ops.ps_roi_align(x, rois[:0], (2, 3)).shape == (0, 1, 2, 3)
    # a box far larger than the map: a bounded grid (kernels/roi_align_math.h), finite values
    huge = torch.tensor([[0.0, -1e6, -1e6, 1e6, 1e6]])
    assert dkit.ops.ps_roi_align(x, huge, (2, 3)).isfinite().all()


# torchvision's own TestPSRoIAlign (test/test_ops.py, 0.14 and 0.21: the same checks, 0.21 adding
# float16 forwards and torch.fx), re-expressed against dkit.compat.torchvision: its forward
# against a float64 loop written from the op's definition (bilinear samples snapped to the
# border, zero outside), its gradchecks (eager and scripted, ten seeds, both layouts), its boxes
# shape errors, its torch.fx checks.


def _tv_test_expected(x, rois, ph, pw, scale, sr):
    """The op's definition in float64 loops: (x1 * s - 0.5) ..., ceil(bin) samples when sr <= 0."""
    x = x.double()
    cout = x.shape[1] // (ph * pw)
    out = torch.zeros(rois.shape[0], cout, ph, pw, dtype=torch.float64)
    h, w = x.shape[2:]

    def sample(plane, y, xx):
        if y < -1 or y > h or xx < -1 or xx > w:
            return 0.0
        y, xx = min(max(y, 0.0), h - 1), min(max(xx, 0.0), w - 1)
        y0, x0 = int(np.floor(y)), int(np.floor(xx))
        y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
        ly, lx = y - y0, xx - x0
        return (
            (1 - ly) * (1 - lx) * plane[y0][x0]
            + (1 - ly) * lx * plane[y0][x1]
            + ly * (1 - lx) * plane[y1][x0]
            + ly * lx * plane[y1][x1]
        )

    for r, roi in enumerate(rois.double().tolist()):
        x1, y1, x2, y2 = (v * scale - 0.5 for v in roi[1:])
        bh, bw = (y2 - y1) / ph, (x2 - x1) / pw
        gh, gw = (sr, sr) if sr > 0 else (int(np.ceil(bh)), int(np.ceil(bw)))
        for i in range(ph):
            for j in range(pw):
                for c in range(cout):
                    plane = x[int(roi[0]), (c * ph + i) * pw + j].tolist()
                    acc = sum(
                        sample(plane, y1 + i * bh + (iy + 0.5) * bh / gh, x1 + j * bw + (ix + 0.5) * bw / gw)
                        for iy in range(gh)
                        for ix in range(gw)
                    )
                    out[r, c, i, j] = acc / (gh * gw)
    return out


_TV_TEST_ROIS = [[0, 0, 0, 9, 9], [0, 0, 5, 4, 9], [0, 5, 5, 9, 9], [1, 0, 0, 9, 9]]


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.float32, torch.float64])
def test_torchvision_test_ops_forward(x_dtype, contiguous):
    x = torch.rand(2, 2 * 25, 10, 10, dtype=x_dtype)
    if not contiguous:
        x = x.permute(0, 1, 3, 2)
    rois = torch.tensor(_TV_TEST_ROIS, dtype=x_dtype)
    y = dk_tv.PSRoIAlign((5, 5), spatial_scale=1, sampling_ratio=-1)(x, rois)
    assert y.dtype == x.dtype
    tol = 4e-3 if x_dtype is torch.float16 else 1e-5
    torch.testing.assert_close(_tv_test_expected(x, rois, 5, 5, 1, -1).to(y), y, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("contiguous", [True, False])
def test_torchvision_test_ops_backward(seed, contiguous):
    torch.random.manual_seed(seed)
    x = torch.rand(1, 8, 5, 5, dtype=torch.float64, requires_grad=True)
    if not contiguous:
        x = x.permute(0, 1, 3, 2)
    rois = torch.tensor([[0, 0, 0, 4, 4], [0, 0, 2, 3, 4], [0, 2, 2, 4, 4]], dtype=torch.float64)
    module = dk_tv.PSRoIAlign((2, 2), spatial_scale=1, sampling_ratio=1)
    assert torch.autograd.gradcheck(lambda z: module(z, rois), (x,))
    scripted = torch.jit.script(dk_tv.ps_roi_align)
    assert torch.autograd.gradcheck(lambda z: scripted(z, rois, 2), (x,))


def test_torchvision_test_ops_boxes_shape_and_fx():
    a = torch.linspace(1, 64, 64).reshape(1, 1, 8, 8)
    with pytest.raises(AssertionError):
        dk_tv.ps_roi_align(a, torch.tensor([[0, 0, 3, 3]], dtype=a.dtype), output_size=(2, 2))
    with pytest.raises(AssertionError):
        dk_tv.ps_roi_align(a, [torch.tensor([[0, 0, 3]], dtype=a.dtype)], output_size=(2, 2))
    feature_extraction = pytest.importorskip("torchvision.models.feature_extraction")

    class Wrapper(torch.nn.Module):  # torchvision's RoIOpTesterModuleWrapper
        def __init__(self, obj):
            super().__init__()
            self.layer, self.n_inputs = obj, 2

        def forward(self, a, b):
            self.layer(a, b)

    names = feature_extraction.get_graph_node_names(Wrapper(dk_tv.PSRoIAlign((5, 5), 1, -1)))
    assert len(names) == 2 and len(names[0]) == len(names[1]) == 3  # the op a leaf node
    op = dk_tv.PSRoIAlign((5, 5), 1, -1)
    traced = torch.fx.symbolic_trace(op)
    x, rois = torch.rand(2, 50, 5, 5), torch.tensor(_TV_TEST_ROIS, dtype=torch.float)
    want = op(x, rois)
    assert want.dtype == x.dtype and torch.equal(traced(x, rois), want)


def test_torchvision_compat_ps_roi_align():  # its signatures: test_torchvision_compat_signatures_are_identical
    g = torch.Generator().manual_seed(23)
    x = torch.randn(2, 8, 11, 11, generator=g)
    rois = _rois(2, 12, 11, 23)
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    for sr in (-1, 2):
        want = tvops.ps_roi_align(x, rois, 2, 0.8, sr).nan_to_num()
        assert torch.equal(dk_tv.ps_roi_align(x, rois, 2, 0.8, sr), want)
        want_list = tvops.ps_roi_align(x, boxes, 2, 0.8, sr).nan_to_num()
        assert torch.equal(dk_tv.ps_roi_align(x, boxes, 2, 0.8, sr), want_list)
        assert torch.equal(torch.jit.script(dk_tv.ps_roi_align)(x, rois, 2, 0.8, sr), want)
        assert torch.equal(torch.jit.script(dk_tv.PSRoIAlign(2, 0.8, sr))(x, rois), want)
    assert torch.equal(dk_tv.ps_roi_align(x, rois, 2), tvops.ps_roi_align(x, rois, 2).nan_to_num())  # defaults
    with pytest.raises(AssertionError, match=r"The boxes tensor shape is not correct as Tensor\[K, 5\]"):
        dk_tv.ps_roi_align(x, rois[:, :4], 2)
    # scripted, torch._assert raises torch.jit.Error, as in torchvision's scripted op
    with pytest.raises(torch.jit.Error, match=r"The boxes tensor shape is not correct as Tensor\[K, 5\]"):
        torch.jit.script(dk_tv.ps_roi_align)(x, rois[:, :4], 2)
    with pytest.raises(torch.jit.Error, match=r"The boxes tensor shape is not correct as Tensor\[K, 5\]"):
        torch.jit.script(tvops.ps_roi_align)(x, rois[:, :4], 2)
    with pytest.raises(AssertionError, match="List\\[Tensor\\[L, 4\\]\\]"):
        dk_tv.ps_roi_align(x, [rois[:, :3]], 2)
    with pytest.raises(RuntimeError, match="input channels must be a multiple of pooling height \\* pooling width"):
        dk_tv.ps_roi_align(x, rois, 3)
    with pytest.raises(RuntimeError, match="input channels must be a multiple of pooling height \\* pooling width"):
        tvops.ps_roi_align(x, rois, 3)
    assert repr(dk_tv.PSRoIAlign(7, 0.5, 2)) == repr(tvops.PSRoIAlign(7, 0.5, 2))
    assert repr(dk_tv.PSRoIAlign((7, 3), 0.25, -1)) == repr(tvops.PSRoIAlign((7, 3), 0.25, -1))
