"""dkit.compat.torchvision and dkit.compat.mmcv: same signatures, defaults, outputs, exceptions."""

import inspect
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import DkitAssertionError  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

import roi_align_ref  # noqa: E402
from conftest import assert_signature_covers, random_rois  # noqa: E402


def _case(seed=0, n=2, c=4, h=13, w=15, k=20, spatial_scale=0.5, dtype=torch.float32):
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal((n, c, h, w))).to(dtype)
    rois = torch.from_numpy(random_rois(rng, k, n, h, w, spatial_scale)).to(dtype)
    return x, rois


def test_assertion_error_is_every_kind_of_error():
    e = DkitAssertionError("x")
    assert isinstance(e, AssertionError) and isinstance(e, ValueError) and isinstance(e, RuntimeError)
    assert isinstance(e, _C.DkitError)


# ------------------------------------------------------------------------------------------
# torchvision


def test_torchvision_signatures_are_identical():
    tv = pytest.importorskip("torchvision.ops")
    for ours, theirs in ((dk_tv.roi_align, tv.roi_align), (dk_tv.RoIAlign.__init__, tv.RoIAlign.__init__),
                         (dk_tv.RoIAlign.forward, tv.RoIAlign.forward), (dk_tv.RoIAlign, tv.RoIAlign)):  # fmt: skip
        assert_signature_covers(ours, theirs)
        assert_signature_covers(theirs, ours)  # no parameter of dkit's own: the same signature


def test_torchvision_signature_by_hand():
    # The same facts without torchvision installed.
    params = inspect.signature(dk_tv.roi_align).parameters
    assert list(params) == ["input", "boxes", "output_size", "spatial_scale", "sampling_ratio", "aligned"]
    assert [p.default for p in params.values()][3:] == [1.0, -1, False]
    init = inspect.signature(dk_tv.RoIAlign.__init__).parameters
    assert list(init) == ["self", "output_size", "spatial_scale", "sampling_ratio", "aligned"]
    assert init["spatial_scale"].default is inspect.Parameter.empty and init["aligned"].default is False


@pytest.mark.parametrize("aligned", [False, True])
def test_torchvision_outputs_and_grads(aligned):
    tv = pytest.importorskip("torchvision.ops")
    x, rois = _case(seed=1)
    per_image = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    for boxes in (rois, per_image):
        for args in ((3,), ((3, 2), 0.5), (7, 0.5, 2), ((2, 5), 0.5, 0, aligned)):
            xa = x.clone().requires_grad_()
            xb = x.clone().requires_grad_()
            ya = tv.roi_align(xa, boxes, *args)
            yb = dk_tv.roi_align(xb, boxes, *args)
            torch.testing.assert_close(yb, ya, rtol=0, atol=1e-5)
            g = torch.randn_like(ya)
            ya.backward(g)
            yb.backward(g)
            torch.testing.assert_close(xb.grad, xa.grad, rtol=0, atol=1e-5)
    m_tv = tv.RoIAlign((3, 3), 0.5, 2, aligned)
    m_dk = dk_tv.RoIAlign((3, 3), 0.5, 2, aligned)
    assert repr(m_dk) == repr(m_tv)
    assert m_dk.output_size == m_tv.output_size
    torch.testing.assert_close(m_dk(x, rois), m_tv(x, rois), rtol=0, atol=1e-5)


def test_torchvision_defaults_are_torchvision_s():
    x, rois = _case(seed=2, dtype=torch.float64)
    ref = roi_align_ref.roi_align(x.numpy(), rois.numpy(), 3, 1.0, -1, "avg", False)
    np.testing.assert_allclose(dk_tv.roi_align(x, rois, 3).numpy(), ref, rtol=1e-12, atol=1e-12)
    assert repr(dk_tv.RoIAlign(7, 0.25, 2)) == (
        "RoIAlign(output_size=7, spatial_scale=0.25, sampling_ratio=2, aligned=False)"
    )


def test_torchvision_exceptions():
    x, rois = _case(seed=3, k=3)
    cases = [
        (rois[:, 1:], "The boxes tensor shape is not correct as Tensor[K, 5]"),
        ([rois], "The shape of the tensor in the boxes list is not correct as List[Tensor[L, 4]]"),
        ("boxes", "boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]"),
        (rois.numpy(), "boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]"),
    ]
    for boxes, message in cases:
        with pytest.raises(AssertionError) as info:
            dk_tv.roi_align(x, boxes, 2)
        assert str(info.value) == message
        assert isinstance(info.value, RuntimeError)
    # the same messages as torchvision itself, when it is here
    tv = pytest.importorskip("torchvision.ops")
    for boxes, message in cases:
        with pytest.raises(AssertionError, match=r"^" + message.replace("[", r"\[").replace("]", r"\]") + "$"):
            tv.roi_align(x, boxes, 2)
    # kernel-level checks: RuntimeError in both
    with pytest.raises(RuntimeError):
        tv.roi_align(x, rois.double(), 2)
    with pytest.raises(RuntimeError, match="'rois' must be float32"):
        dk_tv.roi_align(x, rois.double(), 2)
    # where torchvision reads out of bounds, dkit raises (still a RuntimeError)
    r = rois.clone()
    r[0, 0] = 9
    with pytest.raises(RuntimeError, match="batch index"):
        dk_tv.roi_align(x, r, 2)
    with pytest.raises(RuntimeError, match="output size must be positive"):
        dk_tv.roi_align(x, rois, -1)


def test_torchvision_fx_leaf():
    # torchvision's roi_align is torch.fx.wrap'ed (a leaf in traced graphs); so is dkit's.
    class M(torch.nn.Module):
        def forward(self, x, rois):
            return dk_tv.roi_align(x, rois, 2)

    gm = torch.fx.symbolic_trace(M())
    assert "roi_align" in gm.code
    x, rois = _case(seed=4, k=3)
    torch.testing.assert_close(gm(x, rois), dk_tv.roi_align(x, rois, 2))


def test_torchvision_fx_leaf_records_the_function():
    # the module's forward and a direct call both trace to a call_function node of the compat
    # function itself (the fast path did not change what torch.fx.wrap patches)
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = dk_tv.RoIAlign(2, 0.5, 2)

        def forward(self, x, rois):
            return self.pool(x, rois) + dk_tv.roi_align(x, rois, 2, 0.5, 2)

    gm = torch.fx.symbolic_trace(M())
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count(dk_tv.roi_align) == 2, gm.graph
    x, rois = _case(seed=4, k=3)
    torch.testing.assert_close(gm(x, rois), 2 * dk_tv.roi_align(x, rois, 2, 0.5, 2))


def test_assertions_come_first_and_alone():
    # Note [Compat fast path]: malformed boxes raise the library's AssertionError whatever else is
    # wrong, as the library checks them first; and it is not chained to dkit's own error.
    x, rois = _case(seed=10, k=3)
    for args in ((x, rois[:, 1:], -1), (x[0], rois[:, 1:], 2), (x, rois[0], 2, float("nan")),
                 (x.requires_grad_(), rois[:, :4], 2), (x, rois.double()[:, 1:], 2)):  # fmt: skip
        with pytest.raises(AssertionError, match=r"^The boxes tensor shape is not correct as Tensor\[K, 5\]$") as info:
            dk_tv.roi_align(*args)
        assert info.value.__context__ is None and info.value.__cause__ is None
    for args in ((x, rois[:, 1:], -1), (x, rois, 2, 1.0, 0, "mean"), (x, torch.nn.Parameter(rois[:, 1:]), 2)):
        with pytest.raises(AssertionError) as info:
            dk_mmcv.roi_align(*args)
        assert info.value.__context__ is None
    with pytest.raises(AssertionError, match="pool_mode must be 'max' or 'avg'"):
        dk_mmcv.roi_align(x, rois[:, 1:], 2, pool_mode="mean")  # MMCV asserts pool_mode first
    # other errors pass unchanged
    with pytest.raises(_C.DkitValueError, match="output size must be positive") as info:
        dk_tv.roi_align(x, rois, -1)
    assert not isinstance(info.value, AssertionError)
    with pytest.raises(_C.DkitTypeError, match="'rois' must be float32") as info:
        dk_mmcv.roi_align(x, torch.nn.Parameter(rois.double()), 2)
    assert not isinstance(info.value, AssertionError)


def test_compat_aligned_takes_bools_only():
    x, rois = _case(seed=11, k=3)
    for call in (lambda a: dk_tv.roi_align(x, rois, 2, 1.0, 0, a),
                 lambda a: dk_mmcv.roi_align(x, rois, 2, aligned=a),
                 lambda a: dk_mmcv.RoIAlign(2, aligned=a)(x, rois),
                 lambda a: dk_tv.RoIAlign(2, 1.0, 0, a)(x, rois)):  # fmt: skip
        torch.testing.assert_close(call(np.bool_(True)), call(True), rtol=0, atol=0)
        torch.testing.assert_close(call(0), call(False), rtol=0, atol=0)
        with pytest.raises(_C.DkitTypeError, match="roi_align: aligned must be a bool, got str 'no'"):
            call("no")


def test_bfloat16_is_served_where_torchvision_is_not():
    x, rois = _case(seed=5, k=4)
    out = dk_tv.roi_align(x.bfloat16(), rois.bfloat16(), 2)
    assert out.dtype == torch.bfloat16 and out.shape == (4, 4, 2, 2)


# ------------------------------------------------------------------------------------------
# MMCV (not installed here: signatures and numbers from MMCV's definition)


def test_mmcv_signatures():
    sig = inspect.signature(dk_mmcv.roi_align)
    assert list(sig.parameters) == [
        "input", "rois", "output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned",
    ]  # fmt: skip
    assert [p.default for p in sig.parameters.values()][3:] == [1.0, 0, "avg", True]
    init = inspect.signature(dk_mmcv.RoIAlign.__init__)
    assert list(init.parameters) == [
        "self", "output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned", "use_torchvision",
    ]  # fmt: skip
    assert [p.default for p in init.parameters.values()][2:] == [1.0, 0, "avg", True, False]
    assert list(inspect.signature(dk_mmcv.RoIAlign.forward).parameters) == ["self", "input", "rois"]


def test_mmcv_module_attributes_and_repr():
    m = dk_mmcv.RoIAlign(7, 0.25, 2.0)
    assert m.output_size == (7, 7) and m.spatial_scale == 0.25 and m.sampling_ratio == 2
    assert type(m.spatial_scale) is float and type(m.sampling_ratio) is int
    assert repr(m) == (
        "RoIAlign(output_size=(7, 7), spatial_scale=0.25, sampling_ratio=2, pool_mode=avg, aligned=True, "
        "use_torchvision=False)"
    )


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_mmcv_outputs(pool_mode, aligned):
    x, rois = _case(seed=6, dtype=torch.float64, k=8)
    g = torch.randn(8, 4, 2, 3, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    out = dk_mmcv.roi_align(xr, rois, (2, 3), 0.5, 0, pool_mode, aligned)
    out.backward(g)
    ref, ref_grad = roi_align_ref.roi_align(x.numpy(), rois.numpy(), (2, 3), 0.5, 0, pool_mode, aligned,
                                            grad_output=g.numpy())  # fmt: skip
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xr.grad.numpy(), ref_grad, rtol=1e-12, atol=1e-12)
    m = dk_mmcv.RoIAlign((2, 3), 0.5, 0, pool_mode, aligned)
    torch.testing.assert_close(m(x, rois), out.detach())


def test_mmcv_defaults_equal_dkit_ops():
    x, rois = _case(seed=7)
    torch.testing.assert_close(dk_mmcv.roi_align(x, rois, 3), dkit.ops.roi_align(x, rois, 3), rtol=0, atol=0)
    torch.testing.assert_close(dk_mmcv.RoIAlign(3)(x, rois), dkit.ops.roi_align(x, rois, 3), rtol=0, atol=0)
    torch.testing.assert_close(dk_mmcv.RoIAlignFunction.apply(x, rois, 3), dkit.ops.roi_align(x, rois, 3))


def test_mmcv_use_torchvision():
    x, rois = _case(seed=8)
    m = dk_mmcv.RoIAlign(3, 0.5, 0, "max", aligned=True, use_torchvision=True)
    # torchvision's semantics: average pooling whatever pool_mode says
    torch.testing.assert_close(m(x, rois), dk_tv.roi_align(x, rois, (3, 3), 0.5, 0, True), rtol=0, atol=0)
    tv = pytest.importorskip("torchvision.ops")
    torch.testing.assert_close(m(x, rois), tv.roi_align(x, rois, (3, 3), 0.5, 0, True), rtol=0, atol=1e-5)


def test_module_attributes_can_change_after_construction():
    x, rois = _case(seed=12)
    m = dk_tv.RoIAlign(2, 0.5, 2)
    m.output_size, m.aligned = (3, 2), True
    torch.testing.assert_close(m(x, rois), dk_tv.roi_align(x, rois, (3, 2), 0.5, 2, True), rtol=0, atol=0)
    m = dk_mmcv.RoIAlign(2, 0.5, 2, "max")
    m.use_torchvision = True  # torchvision's semantics: average pooling
    torch.testing.assert_close(m(x, rois), dk_tv.roi_align(x, rois, (2, 2), 0.5, 2, True), rtol=0, atol=0)


def test_mmcv_deprecated_keywords():
    with pytest.warns(DeprecationWarning, match='"out_size" is deprecated in `RoIAlign.__init__`'):
        m = dk_mmcv.RoIAlign(out_size=5, sample_num=3)
    assert m.output_size == (5, 5) and m.sampling_ratio == 3
    with pytest.raises(AssertionError):
        dk_mmcv.RoIAlign(out_size=5, output_size=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dk_mmcv.RoIAlign(output_size=5, sampling_ratio=3)


def test_mmcv_exceptions():
    x, rois = _case(seed=9, k=3)
    with pytest.raises(AssertionError):
        dk_mmcv.roi_align(x, rois, 2, pool_mode="mean")
    with pytest.raises(AssertionError):
        dk_mmcv.RoIAlign(2, pool_mode="sum")(x, rois)
    with pytest.raises(AssertionError, match=r"RoI must be \(idx, x1, y1, x2, y2\)!"):
        dk_mmcv.roi_align(x, rois[:, 1:], 2)
    with pytest.raises(RuntimeError, match="'rois' must be float32"):  # MMCV: RuntimeError from its kernel
        dk_mmcv.roi_align(x, rois.double(), 2)
    r = rois.clone()
    r[1, 0] = -1
    with pytest.raises(RuntimeError, match="batch index"):
        dk_mmcv.roi_align(x, r, 2)


def test_mmcv_published_vectors_through_compat():
    # mmcv/tests/test_ops/test_roi_align.py, third case (see test_roi_align.py for all three)
    x = torch.tensor(
        [[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
        requires_grad=True,
    )
    rois = torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]])
    out = dk_mmcv.roi_align(x, rois, (2, 2), 1.0, 2, "avg", True)
    out.backward(torch.ones_like(out))
    np.testing.assert_allclose(out.detach().numpy(), [[[[1.9375, 4.75], [7.5625, 10.375]]]], atol=1e-3)
    np.testing.assert_allclose(
        x.grad.numpy()[0, 0, 0], [0.47265625, 0.42968750, 0.42968750, 0.04296875], atol=1e-3
    )
