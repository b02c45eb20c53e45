"""Mixed precision (Note [Autocast] in dkit/_ops/__init__.py): under torch.autocast, roi_align and
nms run as torchvision's autocast kernels run them, in float32 with 16-bit arguments cast up and
roi_align's result in the input's dtype, on every path (dkit.ops, the compat modules, the torch
ops, TorchScript). The references are torchvision's float32 ops on explicitly cast tensors:
torchvision 0.14 itself has no CPU autocast kernels (it refuses mixed dtypes there), 0.21 has.
CUDA autocast runs in test_gpu_python.py."""

import warnings

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import torchvision as T  # noqa: E402


def _cpu_autocast_takes(dtype):
    """Whether CPU autocast runs with `dtype` (torch 1.13 disables itself, with a warning, for
    anything but bfloat16; torch 2.x takes float16 too)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autocast("cpu", dtype=dtype):
                return torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == dtype
        except RuntimeError:  # "AutocastCPU only supports ..."
            return False


_CPU_DTYPES = [dt for dt in (torch.bfloat16, torch.float16) if _cpu_autocast_takes(dt)]


def _problem(seed=0, n=2, c=3, h=12, w=14, k=9):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g)
    xy = torch.rand(k, 2, generator=g) * 10
    wh = torch.rand(k, 2, generator=g) * 8 + 0.5
    rois = torch.cat([torch.randint(0, n, (k, 1), generator=g).float(), xy, xy + wh], 1)
    return x, rois


def _expected(x, rois, aligned=True):
    """torchvision's float32 roi_align on the tensors autocast would cast, in x's dtype."""
    y = torchvision.ops.roi_align(x.float(), rois.float(), (3, 4), 0.5, 2, aligned=aligned)
    return y.to(x.dtype)


def _tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("dtype", _CPU_DTYPES)
@pytest.mark.parametrize("which", ["input", "boxes"])
def test_roi_align_mixed_dtypes_under_cpu_autocast(dtype, which):
    x, rois = _problem()
    if which == "input":
        x = x.to(dtype)
    else:
        rois = rois.to(dtype)
    with pytest.raises(_C.DkitTypeError, match="must be"):  # without autocast: refused, as before
        dkit.ops.roi_align(x, rois, (3, 4), 0.5, 2)
    with torch.autocast("cpu", dtype=dtype):
        got = dkit.ops.roi_align(x, rois, (3, 4), 0.5, 2)
        compat = T.roi_align(x, rois, (3, 4), 0.5, 2, aligned=True)
        op = torch.ops.dkit.roi_align(x, rois, [3, 4], 0.5, 2, "avg", True)
    expect = _expected(x, rois)
    for y in (got, compat, op):
        assert y.dtype == x.dtype
        torch.testing.assert_close(y, expect, **_tol(dtype))


@pytest.mark.parametrize("dtype", _CPU_DTYPES)
def test_roi_align_backward_under_cpu_autocast(dtype):
    x, rois = _problem(1)
    x16 = x.to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        y = dkit.ops.roi_align(x16, rois, (3, 4), 0.5, 2)
    assert y.dtype == dtype and y.requires_grad
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    (grad,) = torch.autograd.grad(y, x16, g)
    assert grad.dtype == dtype
    xf = x16.detach().float().requires_grad_()
    ref = torchvision.ops.roi_align(xf, rois, (3, 4), 0.5, 2, aligned=True)
    (expect,) = torch.autograd.grad(ref, xf, g.float())
    torch.testing.assert_close(grad, expect.to(dtype), **_tol(dtype))


@pytest.mark.parametrize("dtype", _CPU_DTYPES)
def test_roi_align_of_one_16_bit_dtype_under_autocast_keeps_it(dtype):
    x, rois = _problem(3)
    x, rois = x.to(dtype), rois.to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        got = dkit.ops.roi_align(x, rois, (3, 4), 0.5, 2)
    assert got.dtype == dtype
    torch.testing.assert_close(got, _expected(x, rois), **_tol(dtype))


@pytest.mark.parametrize("dtype", _CPU_DTYPES)
def test_nms_mixed_dtypes_under_cpu_autocast(dtype):
    g = torch.Generator().manual_seed(4)
    xy = torch.rand(300, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + torch.rand(300, 2, generator=g) * 30 + 1], 1)
    scores = torch.rand(300, generator=g)
    idxs = torch.randint(0, 3, (300,), generator=g)
    b16 = boxes.to(dtype)
    with pytest.raises(_C.DkitTypeError, match="must be"):
        dkit.ops.nms(b16, scores, 0.5)
    expect = torchvision.ops.nms(b16.float(), scores, 0.5)
    expect_batched = torchvision.ops.batched_nms(b16.float(), scores, idxs, 0.5)
    with torch.autocast("cpu", dtype=dtype):
        assert torch.equal(dkit.ops.nms(b16, scores, 0.5), expect)
        assert torch.equal(T.nms(b16, scores, 0.5), expect)
        assert torch.equal(torch.ops.dkit.nms(b16, scores, 0.5), expect)
        assert torch.equal(dkit.ops.batched_nms(b16, scores, idxs, 0.5), expect_batched)
        assert torch.equal(T.batched_nms(b16, scores, idxs, 0.5), expect_batched)


def test_scripted_compat_under_cpu_autocast():
    x, rois = _problem(5)
    x = x.to(torch.bfloat16)
    layer = torch.jit.script(T.RoIAlign((3, 4), 0.5, 2, aligned=True))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layer(x, rois)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, _expected(x, rois), **_tol(torch.bfloat16))


def test_autocast_leaves_other_errors_and_float64_alone():
    x, rois = _problem(6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # float64 is not cast by autocast: float64 features with bfloat16 boxes stay refused
        with pytest.raises(_C.DkitTypeError, match="must be"):
            dkit.ops.roi_align(x.double(), rois.to(torch.bfloat16), 3)
        # an integer input is no autocast matter
        with pytest.raises(_C.DkitTypeError):
            dkit.ops.roi_align(x.int(), rois, 3)
