"""deform_conv2d (dkit.ops, dkit.compat.torchvision, dkit.compat.mmcv): torchvision's op as the
reference for values and all five gradients (groups, offset groups, stride, padding, dilation,
with and without mask and bias, the empty batch, every dtype), gradcheck in float64, batch 64,
MMCV's published DCNv1 and DCNv2 test vectors and its modules' definitions, TorchScript, NumPy,
and the refusals."""

import math

import numpy as np
import pytest

import dkit

torch = pytest.importorskip("torch")
tvops = pytest.importorskip("torchvision.ops")

from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import assert_signature_covers  # noqa: E402


def _case(n=2, cin=4, h=7, w=6, cout=6, k=(3, 3), groups=2, og=2, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
          mask=True, bias=True, dtype=torch.float64, seed=0, spread=2.0):  # fmt: skip
    """Random input, offset, weight, bias, mask of one call (float64 made, then cast)."""
    g = torch.Generator().manual_seed(seed)
    ho = (h + 2 * padding[0] - (dilation[0] * (k[0] - 1) + 1)) // stride[0] + 1
    wo = (w + 2 * padding[1] - (dilation[1] * (k[1] - 1) + 1)) // stride[1] + 1
    x = torch.rand(n, cin, h, w, generator=g, dtype=torch.float64)
    off = torch.randn(n, 2 * og * k[0] * k[1], ho, wo, generator=g, dtype=torch.float64) * spread
    off[:, :, ::3] = off[:, :, ::3].round()  # samples on whole pixels, on the edges too
    wt = torch.randn(cout, cin // groups, *k, generator=g, dtype=torch.float64)
    b = torch.randn(cout, generator=g, dtype=torch.float64) if bias else None
    m = torch.rand(n, og * k[0] * k[1], ho, wo, generator=g, dtype=torch.float64) if mask else None
    return tuple(None if t is None else t.to(dtype) for t in (x, off, wt, b, m))


CASES = [
    dict(),
    dict(mask=False, bias=False, groups=1, og=1, stride=(2, 1), padding=(0, 2), dilation=(2, 1)),
    dict(cin=6, cout=4, groups=2, og=3, k=(2, 3), stride=(1, 2), padding=(2, 0), dilation=(1, 2), bias=False),
    dict(n=3, cin=8, cout=8, groups=8, og=4, k=(1, 1), padding=(0, 0), mask=True, bias=True),
    dict(n=1, h=5, w=5, k=(5, 5), padding=(0, 0), groups=1, og=1, spread=6.0),
    # the CPU forward's float64 scratch was sized without its own rounding: 16 bytes past it here
    # (heap corruption, found by the emulated GPU test; the ASan suite runs this case)
    dict(n=3, cin=4, h=9, w=11, cout=6, groups=2, og=2),
]


def _grads(fn, tensors, gout):
    ts = [t.clone().requires_grad_() if t is not None else None for t in tensors]
    out = fn(*ts)
    present = [t for t in ts if t is not None]
    return out, torch.autograd.grad(out, present, gout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_equal_to_torchvision(case, dtype):
    kw = CASES[case]
    x, off, w, b, m = _case(**kw, dtype=dtype, seed=case)
    s, p, d = kw.get("stride", (1, 1)), kw.get("padding", (1, 1)), kw.get("dilation", (1, 1))
    want = tvops.deform_conv2d(x, off, w, b, s, p, d, m)
    got = dkit.ops.deform_conv2d(x, off, w, b, s, p, d, m)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got, want, **tol)
    gout = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9)).to(dtype)
    order = (x, off, w, b, m)  # torchvision's positional order is (input, offset, weight, bias, ..., mask)
    def f_tv(x, o, w, b, m):
        return tvops.deform_conv2d(x, o, w, b, s, p, d, m)

    def f_dk(x, o, w, b, m):
        return dkit.ops.deform_conv2d(x, o, w, b, s, p, d, m)

    _, g_tv = _grads(f_tv, order, gout)
    _, g_dk = _grads(f_dk, order, gout)
    assert len(g_tv) == len(g_dk) == 3 + (b is not None) + (m is not None)
    for a, e in zip(g_dk, g_tv):
        torch.testing.assert_close(a, e, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_computed_in_float32(dtype):
    """torchvision refuses Half on a CPU (detectron2#2502); dkit computes 16-bit in float32 and
    rounds once: within one rounding of torchvision's float32 on the 16-bit inputs."""
    x, off, w, b, m = _case(dtype=dtype, seed=3)
    got = dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 1, m)
    want = tvops.deform_conv2d(*(t.float() for t in (x, off, w, b)), 1, 1, 1, m.float())
    assert got.dtype == dtype
    eps = 2**-8 if dtype == torch.float16 else 2**-7
    torch.testing.assert_close(got.float(), want, rtol=eps, atol=eps * want.abs().max().item())
    xs = [t.clone().requires_grad_() for t in (x, off, w, b, m)]
    dkit.ops.deform_conv2d(xs[0], xs[1], xs[2], xs[3], 1, 1, 1, xs[4]).sum().backward()
    xf = [t.detach().float().requires_grad_() for t in (x, off, w, b, m)]
    tvops.deform_conv2d(xf[0], xf[1], xf[2], xf[3], 1, 1, 1, xf[4]).sum().backward()
    for a, e in zip(xs, xf):
        assert a.grad.dtype == dtype
        scale = e.grad.abs().max().item()
        torch.testing.assert_close(a.grad.float(), e.grad, rtol=4 * eps, atol=4 * eps * scale)


def test_gradcheck():
    x, off, w, b, m = _case(h=4, w=5, n=2, seed=4)
    off[:, :, 1, 1] = -1.5  # off the map
    ts = [t.clone().requires_grad_() for t in (x, off, w, b, m)]
    # offsets away from whole pixels: the sample is not differentiable there
    with torch.no_grad():
        ts[1].copy_(ts[1].round() + 0.3)
    assert torch.autograd.gradcheck(lambda *a: dkit.ops.deform_conv2d(a[0], a[1], a[2], a[3], 1, 1, 1, a[4]), ts)
    x, off, w, _, _ = _case(h=5, w=5, n=1, stride=(2, 1), padding=(0, 1), seed=12)
    ts = [x.requires_grad_(), (off.round() + 0.3).requires_grad_(), w.requires_grad_()]
    assert torch.autograd.gradcheck(
        lambda *a: dkit.ops.deform_conv2d(a[0], a[1], a[2], None, (2, 1), (0, 1), 1, None, geometry="mmcv"), ts
    )


def test_empty_batch():
    x, off, w, b, m = _case(n=0)
    x, off, w, b, m = (t.requires_grad_() for t in (x, off, w, b, m))
    out = dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 1, m)
    want = tvops.deform_conv2d(x, off, w, b, 1, 1, 1, m)
    assert out.shape == want.shape == (0, 6, 7, 6)
    out.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))
    assert x.grad.shape == x.shape and off.grad.shape == off.shape and m.grad.shape == m.shape


def test_batch_64_bounded():
    """Batch 64 (torchvision splits at 32 images, MMCV refuses batches that are not a multiple of
    im2col_step: vision#2817, mmcv#661) runs, forward and backward, equal to torchvision's in
    float64 (where its own path works)."""
    x, off, w, b, m = _case(n=64, cin=4, h=9, w=9, cout=4, seed=5)
    ts = [t.clone().requires_grad_() for t in (x, off, w, b, m)]
    out = dkit.ops.deform_conv2d(ts[0], ts[1], ts[2], ts[3], 1, 1, 1, ts[4])
    out.sum().backward()
    want = tvops.deform_conv2d(x, off, w, b, 1, 1, 1, m)
    torch.testing.assert_close(out, want)
    # batch 33: dkit.ops and the torchvision compat take it; the MMCV compat refuses it with the
    # default im2col_step as MMCV does, and takes batch 64 (a multiple of 32)
    x33, off33, w32 = x[:33].float(), off[:33].float(), w.float()
    want33 = tvops.deform_conv2d(x33, off33, w32, None, 1, 1)
    torch.testing.assert_close(dkit.ops.deform_conv2d(x33, off33, w32, None, 1, 1), want33, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dk_tv.deform_conv2d(x33, off33, w32, None, 1, 1), want33, rtol=1e-4, atol=1e-4)
    with pytest.raises(AssertionError, match="batch size must be divisible by im2col_step"):
        dk_mmcv.deform_conv2d(x33, off33, w32, 1, 1, 1, 2, 2)
    got = dk_mmcv.deform_conv2d(x.float(), off.float(), w32, 1, 1, 1, 2, 2)
    torch.testing.assert_close(got, tvops.deform_conv2d(x.float(), off.float(), w32, None, 1, 1), rtol=1e-4, atol=1e-4)


def test_any_strides():
    x, off, w, b, m = _case(seed=6, dtype=torch.float32)
    want = dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 1, m)
    xs = x.to(memory_format=torch.channels_last)
    offs = torch.stack([off, off], -1)[..., 0]  # a column stride of 2
    ms = m.transpose(2, 3).contiguous().transpose(2, 3)
    torch.testing.assert_close(dkit.ops.deform_conv2d(xs, offs, w, b, 1, 1, 1, ms), want, rtol=0, atol=0)


def test_numpy_inputs():
    x, off, w, b, m = _case(seed=7, dtype=torch.float32)
    got = dkit.ops.deform_conv2d(x.numpy(), off.numpy(), w.numpy(), b.numpy(), 1, 1, 1, m.numpy())
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, tvops.deform_conv2d(x, off, w, b, 1, 1, 1, m).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [6, 21])  # below and above the backward's 16 slots
def test_same_bits_for_any_thread_count(n):
    x, off, w, b, m = _case(n=n, seed=8, dtype=torch.float32)
    before = torch.get_num_threads()
    runs = {}
    try:
        for threads in (1, 2, 1, 2):
            dkit.set_num_threads(threads)
            ts = [t.clone().requires_grad_() for t in (x, off, w, b, m)]
            out = dkit.ops.deform_conv2d(ts[0], ts[1], ts[2], ts[3], 1, 1, 1, ts[4])
            out.backward(torch.ones_like(out))
            res = [out.detach()] + [t.grad for t in ts]
            if threads in runs:
                assert all(torch.equal(a, c) for a, c in zip(res, runs[threads]))
            runs[threads] = res
        assert all(torch.equal(a, c) for a, c in zip(runs[1], runs[2]))  # every result, on any count
    finally:
        dkit.set_num_threads(0)
        torch.set_num_threads(before)


def test_torchscript_and_torch_op():
    x, off, w, b, m = _case(seed=10, dtype=torch.float32)

    def f(x, off, w, b, m):
        return dkit.ops.deform_conv2d(x, off, w, b, [1, 1], [1, 1], [1, 1], m)

    s = torch.jit.script(f)
    torch.testing.assert_close(s(x, off, w, b, m), f(x, off, w, b, m), rtol=0, atol=0)
    direct = torch.ops.dkit.deform_conv2d(x, off, w, b, [1, 1], [1, 1], [1, 1], m)
    torch.testing.assert_close(direct, f(x, off, w, b, m), rtol=0, atol=0)
    xr = x.clone().requires_grad_()
    s(xr, off, w, b, m).sum().backward()
    xe = x.clone().requires_grad_()
    f(xe, off, w, b, m).sum().backward()
    torch.testing.assert_close(xr.grad, xe.grad, rtol=0, atol=0)


# ---- refusals -------------------------------------------------------------------------------


def test_refusals():
    x, off, w, b, m = _case(dtype=torch.float32)
    with pytest.raises(RuntimeError, match="the shape of the offset tensor at dimension 1 is not valid"):
        dkit.ops.deform_conv2d(x, off[:, :5], w, b, 1, 1, 1, m)
    with pytest.raises(RuntimeError, match=r"offset.shape\[1\] is not valid: got: 35 expected: 18"):
        dkit.ops.deform_conv2d(x, off[:, :35], w, b, 1, 1, 1, m)
    with pytest.raises(RuntimeError, match=r"mask.shape\[1\] is not valid: got: 9 expected: 18"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 1, m[:, :9])
    with pytest.raises(RuntimeError, match="offset output dims"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 0, 1, m)
    with pytest.raises(RuntimeError, match="stride_h: 0"):
        dkit.ops.deform_conv2d(x, off, w, b, 0, 1, 1, m)
    with pytest.raises(RuntimeError, match="pad_h: -1"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, (-1, 1), 1, m)
    with pytest.raises(RuntimeError, match="invalid batch size of offset"):
        dkit.ops.deform_conv2d(x, off[:1], w, b, 1, 1, 1, m)
    with pytest.raises(RuntimeError, match="'input' must have 4 dimensions|input"):
        dkit.ops.deform_conv2d(x[0], off, w, b, 1, 1, 1, m)
    with pytest.raises(TypeError):
        dkit.ops.deform_conv2d(x.double(), off, w, b, 1, 1, 1, m)
    with pytest.raises(TypeError):
        dkit.ops.deform_conv2d(x.int(), off, w, b, 1, 1, 1, m)
    with pytest.raises(TypeError):
        dkit.ops.deform_conv2d(x, off, w, b, 1.5, 1, 1, m)
    with pytest.raises(ValueError, match="geometry"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 1, m, geometry="caffe")
    # huge sizes refused before anything is allocated, cleanly
    with pytest.raises(RuntimeError, match="below 2"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 2**40, 1, m)
    with pytest.raises(RuntimeError, match="Calculated output size too small"):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 1, 2**31 - 1, m)
    huge = r"offset output dims: \(7, 6\) - computed output dims: \(2147483653, 2147483652\)"
    with pytest.raises(RuntimeError, match=huge):
        dkit.ops.deform_conv2d(x, off, w, b, 1, 2**30, 1, m)  # an output of 2^62 elements is never allocated
    # meta tensors (no data): the shape only, as torch.compile's fake tensors need
    meta = dkit.ops.deform_conv2d(x.to("meta"), off.to("meta"), w.to("meta"), None, 1, 1, 1, m.to("meta"))
    assert meta.device.type == "meta" and meta.shape == (2, 6, 7, 6)


# ---- compat torchvision -------------------------------------------------------------------------


def test_torchvision_compat():
    assert_signature_covers(dk_tv.deform_conv2d, tvops.deform_conv2d)
    torch.manual_seed(0)
    ours = dk_tv.DeformConv2d(4, 6, 3, stride=1, padding=1, groups=2)
    torch.manual_seed(0)
    theirs = tvops.DeformConv2d(4, 6, 3, stride=1, padding=1, groups=2)
    assert repr(ours) == repr(theirs)
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)  # the same init
    x, off, _, _, m = _case(dtype=torch.float32, og=2)
    torch.testing.assert_close(ours(x, off, m), theirs(x, off, m), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.jit.script(ours)(x, off, m), ours(x, off, m), rtol=0, atol=0)
    a = dk_tv.DeformConv2d(4, 4, (2, 3), bias=False, dilation=2)
    assert repr(a) == repr(tvops.DeformConv2d(4, 4, (2, 3), bias=False, dilation=2)) and a.bias is None
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        dk_tv.DeformConv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        dk_tv.DeformConv2d(4, 3, 3, groups=2)
    scripted = torch.jit.script(dk_tv.deform_conv2d)
    torch.testing.assert_close(scripted(x, off, ours.weight, ours.bias, (1, 1), (1, 1), (1, 1), m),
                               ours(x, off, m), rtol=0, atol=0)  # fmt: skip
    for fn in (dk_tv.deform_conv2d, tvops.deform_conv2d):
        with pytest.raises(RuntimeError, match="the shape of the offset tensor at dimension 1 is not valid"):
            fn(x, off[:, :5], ours.weight, padding=1)


# ---- compat mmcv: published vectors and definitions ---------------------------------------------

# mmcv tests/test_ops/test_deform_conv.py
_DCN_INPUT = [[[[1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [3.0, 5.0, 2.0]]]]
_DCN_OFFSET_WEIGHT = [[[0.1, 0.4, 0.6, 0.1]], [[0.3, 0.2, 0.1, 0.3]], [[0.5, 0.5, 0.2, 0.8]], [[0.8, 0.3, 0.9, 0.1]],
                      [[0.3, 0.1, 0.2, 0.5]], [[0.3, 0.7, 0.5, 0.3]], [[0.6, 0.2, 0.5, 0.3]],
                      [[0.4, 0.1, 0.8, 0.4]]]  # fmt: skip
_DCN_OFFSET_BIAS = [0.7, 0.1, 0.8, 0.5, 0.6, 0.5, 0.4, 0.7]
_DCN_WEIGHT = [[[0.4, 0.2, 0.1, 0.9]]]
_DCN_OUT = [[[[1.650, 0.0], [0.000, 0.0]]]]
_DCN_X_GRAD = [[[[-0.666, 0.204, 0.000], [0.030, -0.416, 0.012], [0.000, 0.252, 0.129]]]]
_DCN_OFFSET_WEIGHT_GRAD = [[[[1.44, 2.88], [0.00, 1.44]]], [[[-0.72, -1.44], [0.00, -0.72]]],
                           [[[0.00, 0.00], [0.00, 0.00]]], [[[0.00, 0.00], [0.00, 0.00]]],
                           [[[-0.10, -0.20], [0.00, -0.10]]], [[[-0.08, -0.16], [0.00, -0.08]]],
                           [[[-0.54, -1.08], [0.00, -0.54]]], [[[-0.54, -1.08], [0.00, -0.54]]]]  # fmt: skip
_DCN_OFFSET_BIAS_GRAD = [1.44, -0.72, 0.0, 0.0, -0.10, -0.08, -0.54, -0.54]
_DCN_WEIGHT_GRAD = [[[[3.62, 0.0], [0.40, 0.18]]]]


@pytest.mark.parametrize("dtype, threshold", [(torch.float64, 1e-3), (torch.float32, 1e-1), (torch.float32, 1e-3)])
@pytest.mark.parametrize("batch, im2col_step", [(10, 2), (1, 2), (10, 3)])
def test_mmcv_deform_conv_published(dtype, threshold, batch, im2col_step):
    """MMCV's DeformConv2dPack test, its refusal of batch 10 with im2col_step 3 included (MMCV's
    AssertionError and message, as dkit.compat.mmcv asserts what MMCV asserts)."""
    if batch % min(batch, im2col_step):
        x = torch.tensor(np.repeat(_DCN_INPUT, batch, axis=0), dtype=dtype)
        model = dk_mmcv.DeformConv2dPack(1, 1, kernel_size=2, im2col_step=im2col_step).type(dtype)
        with pytest.raises(AssertionError, match="batch size must be divisible by im2col_step"):
            model(x)
        return
    x = torch.tensor(np.repeat(_DCN_INPUT, batch, axis=0), dtype=dtype, requires_grad=True)
    model = dk_mmcv.DeformConv2dPack(in_channels=1, out_channels=1, kernel_size=2, stride=1, padding=0,
                                     im2col_step=im2col_step)  # fmt: skip
    model.conv_offset.weight.data = torch.tensor(_DCN_OFFSET_WEIGHT).reshape(8, 1, 2, 2)
    model.conv_offset.bias.data = torch.tensor(_DCN_OFFSET_BIAS)
    model.weight.data = torch.tensor(_DCN_WEIGHT).reshape(1, 1, 2, 2)
    model.type(dtype)
    out = model(x)
    out.backward(torch.ones_like(out))
    assert np.allclose(out.detach().numpy(), np.repeat(_DCN_OUT, batch, axis=0), threshold)
    assert np.allclose(x.grad.numpy(), np.repeat(_DCN_X_GRAD, batch, axis=0), threshold)
    assert np.allclose(model.conv_offset.weight.grad.numpy() / batch, _DCN_OFFSET_WEIGHT_GRAD, threshold)
    assert np.allclose(model.conv_offset.bias.grad.numpy() / batch, _DCN_OFFSET_BIAS_GRAD, threshold)
    assert np.allclose(model.weight.grad.numpy() / batch, _DCN_WEIGHT_GRAD, threshold)


def test_mmcv_deform_conv_half_functional():
    """MMCV's half test runs on CUDA only (torch's CPU conv2d has no Half for the Pack's
    conv_offset); the op itself takes half on a CPU."""
    x = torch.tensor(np.repeat(_DCN_INPUT, 4, axis=0), dtype=torch.float32)
    offset = torch.nn.functional.conv2d(x, torch.tensor(_DCN_OFFSET_WEIGHT).reshape(8, 1, 2, 2),
                                        torch.tensor(_DCN_OFFSET_BIAS))  # fmt: skip
    w = torch.tensor(_DCN_WEIGHT).reshape(1, 1, 2, 2)
    out = dk_mmcv.deform_conv2d(x.half(), offset.half(), w.half())
    assert out.dtype == torch.float16
    assert np.allclose(out.float().numpy(), np.repeat(_DCN_OUT, 4, axis=0), 1e-1)


def test_mmcv_deform_conv_asserts():
    model = dk_mmcv.DeformConv2d(1, 1, 2, stride=1, padding=0)
    assert not hasattr(model, "bias")
    with pytest.raises(AssertionError):
        dk_mmcv.DeformConv2d(1, 1, 2, stride=1, padding=0, bias=True)
    with pytest.raises(AssertionError):
        dk_mmcv.DeformConv2d(3, 2, 3, groups=2)
    with pytest.raises(AssertionError):
        dk_mmcv.DeformConv2d(3, 4, 3, groups=3)
    x = torch.rand(1, 1, 3, 3)
    with pytest.raises(AssertionError, match="Only support bias is False"):
        dk_mmcv.deform_conv2d(x, torch.zeros(1, 8, 2, 2), torch.rand(1, 1, 2, 2), bias=True)
    with pytest.raises(ValueError, match="Expected 4D tensor as input, got 3D tensor instead"):
        dk_mmcv.deform_conv2d(x[0], torch.zeros(1, 8, 2, 2), torch.rand(1, 1, 2, 2))
    with pytest.raises(ValueError, match="convolution input is too small"):
        dk_mmcv.deform_conv2d(x, torch.zeros(1, 8, 2, 2), torch.rand(1, 1, 5, 5))
    with pytest.raises(RuntimeError):
        dk_mmcv.deform_conv2d(x, torch.zeros(1, 8, 2, 2), torch.rand(1, 1, 2, 2), deform_groups=2)
    assert repr(model).startswith("DeformConv2d(in_channels=1,\nout_channels=1,\nkernel_size=(2, 2),")
    assert repr(model).endswith("deform_groups=1,\nbias=False)")


def test_mmcv_deform_conv_small_input_padded():
    """MMCV pads an input smaller than the kernel at the bottom and right, and crops the output."""
    torch.manual_seed(1)
    model = dk_mmcv.DeformConv2d(2, 3, 3, padding=1)
    x = torch.rand(2, 2, 2, 2)
    offset = torch.randn(2, 18, 2, 2)
    out = model(x, offset)
    xp = torch.nn.functional.pad(x, [0, 1, 0, 1])
    op = torch.nn.functional.pad(offset, [0, 1, 0, 1])
    want = tvops.deform_conv2d(xp, op, model.weight, None, 1, 1)[:, :, :2, :2]
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


# mmcv tests/test_ops/test_modulated_deform_conv.py
_MD_INPUT = [[[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]]]
_MD_OUTPUT = [[[[0.5, 1.5, 2.5, 1.5], [1.0, 3.0, 5.0, 3.0], [1.0, 3.0, 5.0, 3.0], [0.5, 1.5, 2.5, 1.5]]]]
_MD_INPUT_GRAD = [[[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]]]
_MD_W_GRAD = [[[[9.0, 9.0], [9.0, 9.0]]]]
_MD_OFFSET_W_GRAD = [[[[-7.0, -4.0], [0.0, 0.0]]], [[[-9.0, 7.5], [-6.0, 5.0]]], [[[-4.0, -7.0], [0.0, 0.0]]],
                     [[[-7.5, -9.0], [-5.0, -6.0]]], [[[-7.0, -4.0], [-7.0, -4.0]]], [[[-6.0, 5.0], [-9.0, 7.5]]],
                     [[[-4.0, -7.0], [-4.0, -7.0]]], [[[-5.0, -6.0], [-7.5, -9.0]]], [[[10.5, 6.0], [7.0, 4.0]]],
                     [[[6.0, 10.5], [4.0, 7.0]]], [[[7.0, 4.0], [10.5, 6.0]]], [[[4.0, 7.0], [6.0, 10.5]]]]  # fmt: skip
_MD_OFFSET_B_GRAD = [-3.0, -1.5, -3.0, -1.5, -3.0, -1.5, -3.0, -1.5, 4.5, 4.5, 4.5, 4.5]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mmcv_modulated_published(dtype):
    x = torch.tensor(_MD_INPUT, dtype=dtype, requires_grad=True)
    dcn = dk_mmcv.ModulatedDeformConv2dPack(1, 1, kernel_size=(2, 2), stride=1, padding=1, deform_groups=1,
                                            bias=False)  # fmt: skip
    dcn.weight.data.fill_(1.0)
    dcn.type(dtype)
    out = dcn(x)
    out.sum().backward()
    assert np.allclose(out.detach().numpy(), _MD_OUTPUT, 1e-2)
    assert np.allclose(x.grad.numpy(), _MD_INPUT_GRAD, 1e-2)
    assert np.allclose(dcn.weight.grad.numpy(), _MD_W_GRAD, 1e-2)
    assert np.allclose(dcn.conv_offset.weight.grad.numpy(), _MD_OFFSET_W_GRAD, 1e-2)
    assert np.allclose(dcn.conv_offset.bias.grad.numpy(), _MD_OFFSET_B_GRAD, 1e-2)
    # torchvision's edge rule gives another offset gradient on the -1 edge, which these numbers
    # tell apart (the reason for geometry="mmcv")
    xt = torch.tensor(_MD_INPUT, dtype=dtype)
    off = torch.zeros(1, 8, 4, 4, dtype=dtype, requires_grad=True)
    tvops.deform_conv2d(xt, off, torch.ones(1, 1, 2, 2, dtype=dtype), None, 1, 1, 1,
                        torch.full((1, 4, 4, 4), 0.5, dtype=dtype)).sum().backward()  # fmt: skip
    assert not np.allclose(off.grad.sum((0, 2, 3)).numpy(), _MD_OFFSET_B_GRAD[:8], 1e-2)


def _mmcv_modulated_reference(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg):
    """MMCV's modulated_deform_conv2d from its definition: the sample of each tap at
    (y s - p + i d + dy, x s - p + j d + dx), bilinear with zeros outside, times the mask, convolved
    with the weights: here as grid_sample (align_corners=True, zero padding) per tap."""
    n, cin, h, w = x.shape
    cout, _, kh, kw = weight.shape
    ho, wo = offset.shape[2:]
    cols = []
    for i in range(kh):
        for j in range(kw):
            taps = []
            for d in range(dg):
                t = d * kh * kw + i * kw + j
                ys = (torch.arange(ho, dtype=x.dtype) * stride - padding + i * dilation)[:, None] + offset[:, 2 * t]
                xs = (torch.arange(wo, dtype=x.dtype) * stride - padding + j * dilation)[None, :] + offset[:, 2 * t + 1]
                grid = torch.stack([2 * xs / (w - 1) - 1, 2 * ys / (h - 1) - 1], -1)
                part = x[:, d * cin // dg:(d + 1) * cin // dg]
                sample = torch.nn.functional.grid_sample(part, grid, "bilinear", "zeros", align_corners=True)
                taps.append(sample * mask[:, t:t + 1])
            cols.append(torch.cat(taps, 1))
    col = torch.stack(cols, 2)  # [n, cin, kh kw, ho, wo]
    col = col.reshape(n, groups, cin // groups * kh * kw, ho * wo)
    wg = weight.reshape(groups, cout // groups, -1)
    out = torch.einsum("gok,ngkp->ngop", wg, col).reshape(n, cout, ho, wo)
    return out if bias is None else out + bias[None, :, None, None]


def test_mmcv_modulated_against_definition():
    x, off, w, b, m = _case(n=2, cin=4, h=7, w=6, cout=6, groups=2, og=2, stride=(1, 1), padding=(1, 1),
                            dtype=torch.float64, seed=11)  # fmt: skip
    got = dk_mmcv.modulated_deform_conv2d(x, off, m, w, b, 1, 1, 1, 2, 2)
    want = _mmcv_modulated_reference(x, off, m, w, b, 1, 1, 1, 2, 2)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    got1 = dk_mmcv.deform_conv2d(x, off, w, 1, 1, 1, 2, 2)
    torch.testing.assert_close(got1, _mmcv_modulated_reference(x, off, torch.ones_like(m), w, None, 1, 1, 1, 2, 2),
                               rtol=1e-9, atol=1e-9)  # fmt: skip


def test_mmcv_modules_and_scripting():
    import inspect

    assert list(inspect.signature(dk_mmcv.deform_conv2d).parameters) == [
        "input", "offset", "weight", "stride", "padding", "dilation", "groups", "deform_groups", "bias", "im2col_step",
    ]  # fmt: skip
    assert list(inspect.signature(dk_mmcv.modulated_deform_conv2d).parameters) == [
        "input", "offset", "mask", "weight", "bias", "stride", "padding", "dilation", "groups", "deform_groups",
    ]  # fmt: skip
    torch.manual_seed(2)
    md = dk_mmcv.ModulatedDeformConv2d(4, 6, 3, padding=1, groups=2, deform_groups=2)
    stdv = 1.0 / math.sqrt(4 * 9)
    assert md.weight.abs().max() <= stdv and torch.equal(md.bias, torch.zeros(6))
    pack = dk_mmcv.ModulatedDeformConv2dPack(4, 6, 3, padding=1, deform_groups=2)
    assert pack.conv_offset.out_channels == 2 * 3 * 9 and not pack.conv_offset.weight.any()
    assert not pack.conv_offset.bias.any()
    dpack = dk_mmcv.DeformConv2dPack(4, 6, 3, padding=1, deform_groups=2)
    assert dpack.conv_offset.out_channels == 2 * 2 * 9 and not dpack.conv_offset.weight.any()
    x = torch.rand(2, 4, 7, 6)
    # zero-initialised offsets and sigmoid(0) masks: a plain convolution, halved for DCNv2
    torch.testing.assert_close(dpack(x), torch.nn.functional.conv2d(x, dpack.weight, None, 1, 1), rtol=1e-5, atol=1e-5)
    halved = torch.nn.functional.conv2d(x, pack.weight, None, 1, 1) * 0.5 + pack.bias[None, :, None, None]
    torch.testing.assert_close(pack(x), halved, rtol=1e-5, atol=1e-5)
    off, mask = torch.randn(2, 36, 7, 6), torch.rand(2, 18, 7, 6)
    for module, args in ((md, (x, off, mask)), (pack, (x,)), (dpack, (x,)),
                         (dk_mmcv.DeformConv2d(4, 6, 3, padding=1, deform_groups=2), (x, off))):  # fmt: skip
        torch.testing.assert_close(torch.jit.script(module)(*args), module(*args), rtol=0, atol=0)
