"""The focal losses (dkit.ops, dkit.compat.torchvision, dkit.compat.mmcv): torchvision's
sigmoid_focal_loss (the installed one: 0.14 here, 0.21 in the Debian 13 root) as the reference
for values and gradients (inputs and targets); references written here from MMCV's definitions
(its Python wrapper and CUDA kernels) for class-index targets, weights and the softmax loss;
MMCV's published test vectors; the properties torchvision's own TestFocalLoss checks; 16-bit
inputs, NumPy arrays, TorchScript, gradcheck, the sum's bits for any thread count, MMCV's
assertions, and the refusals."""

import numpy as np
import pytest

import dkit

torch = pytest.importorskip("torch")
tvops = pytest.importorskip("torchvision.ops")
F = torch.nn.functional

from dkit.compat import DkitAssertionError  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import assert_signature_covers  # noqa: E402


def _logits_and_targets(shape, seed, dtype=torch.float32, soft=False):
    """Logits of every range torchvision's test draws (probabilities near 0, near 1, anywhere),
    some beyond float32's sigmoid saturation, and 0/1 (or soft) targets."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 4
    x.view(-1)[::11] *= 6  # |x| up to ~100: where 1 - sigmoid(x) rounds to 0
    t = (torch.rand(shape, generator=g, dtype=torch.float64) < 0.3).double()
    if soft:
        t = torch.rand(shape, generator=g, dtype=torch.float64)
    return x.to(dtype), t.to(dtype)


# ---- torchvision ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("alpha, gamma", [(0.25, 2), (-1.0, 2), (0.58, 0), (1.0, 1.5), (0.0, 3)])
def test_equal_to_torchvision(dtype, reduction, alpha, gamma):
    x, t = _logits_and_targets((37, 11), 1, dtype, soft=gamma == 1.5)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ta, tb = t.clone().requires_grad_(), t.clone().requires_grad_()
    want = tvops.sigmoid_focal_loss(xa, ta, alpha, gamma, reduction)
    got = dk_tv.sigmoid_focal_loss(xb, tb, alpha, gamma, reduction)
    assert got.dtype == dtype and got.shape == want.shape
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(got, want, **tol)
    g = torch.randn(want.shape, dtype=dtype, generator=torch.Generator().manual_seed(2))
    want.backward(g), got.backward(g)
    torch.testing.assert_close(xb.grad, xa.grad, **tol)
    # torchvision's autograd also differentiates the targets; so does dkit
    torch.testing.assert_close(tb.grad, ta.grad, **tol)
    # targets without grad: a reduced loss's gradient comes from its forward (Note [The backward
    # in the forward] in ops/focal_loss.h), the same for any grad_output
    xc = x.clone().requires_grad_()
    dk_tv.sigmoid_focal_loss(xc, t, alpha, gamma, reduction).backward(g)
    torch.testing.assert_close(xc.grad, xa.grad, **tol)


@pytest.mark.parametrize("shape", [(), (7,), (3, 0), (0,), (2, 3, 4), (4, 1, 5, 2)])
def test_any_shape_and_layout(shape):
    x, t = _logits_and_targets(shape, 3)
    for reduction in ("none", "mean", "sum"):
        want = tvops.sigmoid_focal_loss(x, t, reduction=reduction)
        got = dk_tv.sigmoid_focal_loss(x, t, reduction=reduction)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-6, equal_nan=True)  # mean of nothing: NaN
    if len(shape) >= 2:  # transposed, strided views
        xs, ts = x.transpose(0, -1), t.transpose(0, -1)
        torch.testing.assert_close(dkit.ops.sigmoid_focal_loss(xs, ts), tvops.sigmoid_focal_loss(xs, ts), rtol=2e-5,
                                   atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_computed_in_float32(dtype):
    x, t = _logits_and_targets((64, 9), 4, dtype)
    xs, ts = x.float().requires_grad_(), t.float()
    want = tvops.sigmoid_focal_loss(xs, ts, reduction="none")
    xh = x.clone().requires_grad_()
    got = dkit.ops.sigmoid_focal_loss(xh, t)
    assert got.dtype == dtype
    tol = dict(rtol=1e-3, atol=1e-4) if dtype == torch.float16 else dict(rtol=8e-3, atol=1e-3)
    torch.testing.assert_close(got.float(), want.to(dtype).float(), **tol)
    g = torch.rand(want.shape, dtype=dtype)
    want.backward(g.float()), got.backward(g)
    assert xh.grad.dtype == dtype
    torch.testing.assert_close(xh.grad.float(), xs.grad.to(dtype).float(), **tol)
    # reduced: the sum in double, rounded once
    total = dkit.ops.sigmoid_focal_loss(x, t, reduction="sum")
    want_total = tvops.sigmoid_focal_loss(xs.detach(), ts, reduction="sum").to(dtype).float()
    torch.testing.assert_close(total.float(), want_total, rtol=tol["rtol"], atol=0)


class TestTorchvisionsProperties:
    """What torchvision's TestFocalLoss asserts of its loss, asserted of dkit's (written anew)."""

    def _pairs(self, seed):
        g = torch.Generator().manual_seed(seed)
        parts = []
        for lo, hi in ((0.0, 0.2), (0.8, 1.0), (0.0, 1.0)):  # probabilities: small, big, anywhere
            p = (lo + (hi - lo) * torch.rand(5, 2, generator=g)).clamp(1e-6, 1 - 1e-6)
            for target in (torch.zeros(5, 2), torch.ones(5, 2), torch.randint(0, 2, (5, 2), generator=g).float()):
                parts.append((torch.log(p / (1 - p)), target))
        return torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])

    @pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.58, 1.0])
    @pytest.mark.parametrize("gamma", [0, 2])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_ratio_to_cross_entropy(self, alpha, gamma, seed):
        # torchvision compares with torch's float32 cross-entropy, which torch 1.13 computes as
        # log(1 + e^-x), 5% off at x = 13.8 (1.0729e-06 for 1.0156e-06; torch 2.6 takes
        # log_sigmoid and is right): the ratio is checked against the exact cross-entropy
        # (float64), and focal <= ce within float32's rounding of it, as dkit's cross-entropy is
        # its own (kernels/focal_loss_math.h)
        x, t = self._pairs(seed)
        focal = dk_tv.sigmoid_focal_loss(x, t, alpha, gamma, "none").double()
        ce = F.binary_cross_entropy_with_logits(x.double(), t.double(), reduction="none")
        assert torch.all(focal <= ce * (1 + 2**-22))
        p = torch.sigmoid(x.double())
        ratio = (1 - (p * t + (1 - p) * (1 - t))) ** gamma
        if alpha >= 0:
            ratio = ratio * (alpha * t + (1 - alpha) * (1 - t))
        torch.testing.assert_close(focal / ce, ratio, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("reduction", ["mean", "sum"])
    def test_cross_entropy_when_alpha_ignored_and_gamma_0(self, reduction):
        x, t = self._pairs(2)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        focal = dk_tv.sigmoid_focal_loss(xa, t, alpha=-1, gamma=0, reduction=reduction)
        ce = F.binary_cross_entropy_with_logits(xb, t, reduction=reduction)
        torch.testing.assert_close(focal, ce, rtol=1e-5, atol=1e-5)
        focal.backward(), ce.backward()
        torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
    def test_scripted(self, reduction):
        x, t = self._pairs(3)
        scripted = torch.jit.script(dk_tv.sigmoid_focal_loss)
        want = dk_tv.sigmoid_focal_loss(x, t, gamma=2, alpha=0.58, reduction=reduction)
        torch.testing.assert_close(scripted(x, t, gamma=2, alpha=0.58, reduction=reduction), want)


def test_more_exact_than_torchvision_where_its_one_minus_p_rounds_to_zero():
    # a negative class at x = 20: the exact loss is 0.75 * (20 + log1p(e^-20)) * sigmoid(20)^2
    x, t = torch.tensor([20.0, -20.0, 40.0]), torch.tensor([0.0, 1.0, 1.0])
    exact = [0.75 * (20 + np.log1p(np.exp(-20.0))) * (1 / (1 + np.exp(-20.0))) ** 2,
             0.25 * (20 + np.log1p(np.exp(-20.0))) * (1 / (1 + np.exp(-20.0))) ** 2,
             0.25 * np.log1p(np.exp(-40.0)) * (np.exp(-40.0) / (1 + np.exp(-40.0))) ** 2]  # fmt: skip
    got = dkit.ops.sigmoid_focal_loss(x, t)
    np.testing.assert_allclose(got.double().numpy(), exact, rtol=1e-6, atol=1e-45)
    # (the last is 1.9e-53, below float32's range: 0, as torchvision's; float64 keeps it)
    got64 = dkit.ops.sigmoid_focal_loss(x.double(), t.double())
    np.testing.assert_allclose(got64.numpy(), exact, rtol=1e-12)


# ---- MMCV ----------------------------------------------------------------------------------


def mmcv_sigmoid_reference(x, labels, gamma, alpha, weight, reduction):
    """MMCV's sigmoid_focal_loss, from its forward kernel (log(max(p, FLT_MIN)), weight[target])
    and its wrapper (mean: the sum over N), in float64 torch ops."""
    x = x.double()
    c = x.shape[1]
    flag_p = (labels[:, None] == torch.arange(c)[None]).double()
    p = 1 / (1 + torch.exp(-x))
    tiny = float(np.finfo(np.float32).tiny)
    term_p = (1 - p) ** gamma * torch.log(p.clamp_min(tiny))
    term_n = p**gamma * torch.log((1 - p).clamp_min(tiny))
    out = -flag_p * alpha * term_p - (1 - flag_p) * (1 - alpha) * term_n
    if weight is not None:
        w = torch.where((labels >= 0) & (labels < c), weight.double()[labels.clamp(0, c - 1)], torch.ones(()).double())
        out = out * w[:, None]
    return {"none": out, "sum": out.sum(), "mean": out.sum() / x.shape[0]}[reduction]


def mmcv_softmax_reference(x, labels, gamma, alpha, weight, reduction):
    """MMCV's softmax_focal_loss, from its wrapper (max-subtracted softmax) and forward kernel."""
    x = x.double()
    s = torch.exp(x - x.max(1, keepdim=True).values)
    s = s / s.sum(1, keepdim=True)
    pred = s.gather(1, labels.clamp_min(0)[:, None]).squeeze(1)
    tiny = float(np.finfo(np.float32).tiny)
    loss = -alpha * (1 - pred) ** gamma * torch.log(pred.clamp_min(tiny))
    out = torch.where(labels >= 0, loss, torch.zeros(()).double())
    if weight is not None:
        out = out * torch.where(labels >= 0, weight.double()[labels.clamp_min(0)], torch.ones(()).double())
    return {"none": out, "sum": out.sum(), "mean": out.sum() / x.shape[0]}[reduction]


def _classes(n, c, seed, background=True):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=g, dtype=torch.float64) * 3).float()
    labels = torch.randint(0, c + 1 if background else c, (n,), generator=g)
    return x, labels, torch.rand(c, generator=g) + 0.5


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("gamma, alpha", [(2.0, 0.25), (1.5, 0.5), (0.0, 0.9)])
def test_mmcv_sigmoid(reduction, weighted, gamma, alpha):
    x, labels, weight = _classes(41, 6, 5)
    w = weight if weighted else None
    xa, xb = x.double().requires_grad_(), x.clone().requires_grad_()
    want = mmcv_sigmoid_reference(xa, labels, gamma, alpha, w, reduction)
    got = dk_mmcv.sigmoid_focal_loss(xb, labels, gamma, alpha, w, reduction)
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=1e-6)
    g = torch.rand(want.shape, dtype=torch.float64)
    want.backward(g), got.backward(g.float())
    torch.testing.assert_close(xb.grad.double(), xa.grad, rtol=2e-5, atol=1e-6)
    # the module, with the weight as its buffer
    m = dk_mmcv.SigmoidFocalLoss(gamma, alpha, w, reduction)
    torch.testing.assert_close(m(x, labels), got.detach())
    assert repr(m) == f"SigmoidFocalLoss(gamma={gamma}, alpha={alpha}, reduction={reduction})"


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mmcv_softmax(reduction, weighted, dtype):
    x, labels, weight = _classes(33, 5, 6, background=False)
    labels[::7] = -1  # MMCV's ignored rows
    x, weight = x.to(dtype), weight.to(dtype)
    w = weight if weighted else None
    xa, xb = x.detach().double().clone().requires_grad_(), x.detach().clone().requires_grad_()
    want = mmcv_softmax_reference(xa, labels, 2.0, 0.25, w, reduction)
    got = dk_mmcv.softmax_focal_loss(xb, labels, 2.0, 0.25, w, reduction)
    assert got.dtype == dtype and got.shape == want.shape
    tols = {torch.float32: (2e-5, 1e-6), torch.float64: (1e-11, 1e-13), torch.float16: (2e-3, 1e-4)}
    tol = tols.get(dtype, (1e-2, 1e-3))
    torch.testing.assert_close(got.double(), want, rtol=tol[0], atol=tol[1])
    g = torch.rand(want.shape, dtype=torch.float64)
    want.backward(g), got.backward(g.to(dtype))
    # the gradient of row n scaled by grad_output[n] (MMCV broadcasts a [N] gradient along the
    # classes instead: ops/focal_loss.h)
    torch.testing.assert_close(xb.grad.double(), xa.grad, rtol=tol[0], atol=tol[1])
    m = dk_mmcv.SoftmaxFocalLoss(2.0, 0.25, w, reduction)
    torch.testing.assert_close(m(x, labels), got.detach())
    assert repr(m) == f"SoftmaxFocalLoss(gamma=2.0, alpha=0.25, reduction={reduction})"


# MMCV's tests/test_ops/test_focal_loss.py: inputs, and the loss (mean) and gradient it publishes
_MMCV_INPUTS = [
    ([[1.0, 0], [0, 1.0]], [0, 1]),
    ([[1.0, 0, -1.0], [0, 1.0, 2.0]], [2, 1]),
    ([[1e-6, 2e-6, 3e-6], [4e-6, 5e-5, 6e-4], [7e-3, 8e-2, 9e-1]], [1, 2, 0]),
]
_MMCV_SOFTMAX = [
    (0.00566451, [[-0.00657264, 0.00657264], [0.00657264, -0.00657264]]),
    (0.34956908, [[0.10165970, 0.03739851, -0.13905823], [0.01227554, -0.10298023, 0.09070466]]),
    (0.15754992, [[0.02590877, -0.05181759, 0.02590882], [0.02589641, 0.02589760, -0.05179400],
                  [-0.07307514, 0.02234372, 0.05073142]]),
]  # fmt: skip
_MMCV_SIGMOID = [
    (0.13562961, [[-0.00657264, 0.11185755], [0.11185755, -0.00657264]]),
    (1.10251057, [[0.28808805, 0.11185755, -0.09602935], [0.11185755, -0.00657264, 0.40376765]]),
    (0.42287254, [[0.07457182, -0.02485716, 0.07457201], [0.07457211, 0.07457669, -0.02483728],
                  [-0.02462499, 0.08277918, 0.18050370]]),
]  # fmt: skip


@pytest.mark.parametrize("which", ["sigmoid", "softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", range(3))
def test_mmcv_published_vectors(which, dtype, case):
    x = torch.tensor(_MMCV_INPUTS[case][0], dtype=dtype, requires_grad=True)
    y = torch.tensor(_MMCV_INPUTS[case][1])
    loss_want, grad_want = (_MMCV_SIGMOID if which == "sigmoid" else _MMCV_SOFTMAX)[case]
    fn = dk_mmcv.sigmoid_focal_loss if which == "sigmoid" else dk_mmcv.softmax_focal_loss
    loss = fn(x, y, 2.0, 0.25, None, "mean")
    loss.backward()
    # MMCV's own test allows 1e-2; float32 meets its 8 published digits
    tol = dict(rtol=2e-6, atol=1e-8) if dtype == torch.float32 else dict(rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(loss.double(), torch.tensor(loss_want, dtype=torch.float64), **tol)
    torch.testing.assert_close(x.grad.double(), torch.tensor(grad_want, dtype=torch.float64), **tol)


def test_mmcv_gradcheck():
    x, labels, weight = _classes(6, 4, 7)
    x = x.double().requires_grad_()
    for reduction in ("none", "mean", "sum"):
        assert torch.autograd.gradcheck(
            lambda v: dk_mmcv.sigmoid_focal_loss(v, labels, 2.0, 0.25, weight.double(), reduction), (x,))
        assert torch.autograd.gradcheck(
            lambda v: dk_mmcv.softmax_focal_loss(v, labels.clamp_max(3), 1.5, 0.25, weight.double(), reduction), (x,))
    xs, ts = _logits_and_targets((5, 3), 8, torch.float64, soft=True)
    xs.requires_grad_(), ts.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: dkit.ops.sigmoid_focal_loss(a, b, 0.3, 1.5, "sum"), (xs, ts))


def test_mmcv_assertions():
    x, labels, weight = _classes(4, 3, 9)
    for fn in (dk_mmcv.sigmoid_focal_loss, dk_mmcv.softmax_focal_loss):
        for bad in [
            (x, labels.int()),  # target.dtype == torch.long
            (x[0], labels),  # input.dim() == 2
            (x, labels[:, None]),  # target.dim() == 1
            (x, labels[:3]),  # input.size(0) == target.size(0)
            (x, labels, 2.0, 0.25, weight[None]),  # weight.dim() == 1
            (x, labels, 2.0, 0.25, weight[:2]),  # input.size(1) == weight.size(0)
            (x, labels, 2.0, 0.25, None, "avg"),  # reduction in ('none', 'mean', 'sum')
        ]:
            with pytest.raises(AssertionError):
                fn(*bad)
            with pytest.raises(DkitAssertionError):  # also a ValueError and a RuntimeError
                fn(*bad)
    with pytest.raises(Exception, match="reduction must be 'none', 'mean' or 'sum', got 'avg'"):
        torch.jit.script(dk_mmcv.softmax_focal_loss)(x, labels.clamp_max(2), 2.0, 0.25, None, "avg")
    # where MMCV reads beyond the softmax's row, dkit refuses
    with pytest.raises(dkit.DkitIndexError, match=r"targets\[0\] is 3, not a class index in \[0, 3\)"):
        dk_mmcv.softmax_focal_loss(x, torch.tensor([3, 0, 1, 2]))


def test_mmcv_signatures_and_scripting():
    import inspect

    for fn in (dk_mmcv.sigmoid_focal_loss, dk_mmcv.softmax_focal_loss):
        params = inspect.signature(fn).parameters
        assert list(params) == ["input", "target", "gamma", "alpha", "weight", "reduction"]
        assert [params[p].default for p in ("gamma", "alpha", "weight", "reduction")] == [2.0, 0.25, None, "mean"]
    x, labels, weight = _classes(8, 4, 10)
    for module in (dk_mmcv.SigmoidFocalLoss(2.0, 0.25), dk_mmcv.SigmoidFocalLoss(1.5, 0.4, weight, "none"),
                   dk_mmcv.SoftmaxFocalLoss(2.0, 0.25, weight, "sum")):  # fmt: skip
        y = labels.clamp_max(3)
        torch.testing.assert_close(torch.jit.script(module)(x, y), module(x, y))
        assert "weight" in dict(module.named_buffers()) or module.weight is None


# ---- compat torchvision: signature, errors ---------------------------------------------------


def test_torchvision_signature_and_errors():
    assert_signature_covers(dk_tv.sigmoid_focal_loss, tvops.sigmoid_focal_loss)
    x, t = _logits_and_targets((4, 3), 11)
    # torchvision 0.21's ValueError (0.14 returned the unreduced loss)
    msg = "Invalid Value for arg 'reduction': 'avg \n Supported reduction modes: 'none', 'mean', 'sum'"
    with pytest.raises(ValueError) as e:
        dk_tv.sigmoid_focal_loss(x, t, reduction="avg")
    assert str(e.value) == msg
    with pytest.raises(Exception) as e:  # scripted: torch.jit.Error (torch 1.13) or ValueError
        torch.jit.script(dk_tv.sigmoid_focal_loss)(x, t, reduction="avg")
    assert msg in str(e.value)
    # torch's message for targets of another shape
    with pytest.raises(ValueError, match=r"Target size \(torch.Size\(\[2, 3\]\)\) must be the same as input size"):
        dk_tv.sigmoid_focal_loss(x, t[:2])
    # integer targets fail as torchvision's do (RuntimeError)
    with pytest.raises(RuntimeError):
        tvops.sigmoid_focal_loss(x, t.long())
    with pytest.raises(RuntimeError):
        dk_tv.sigmoid_focal_loss(x, t.long())
    # targets of another float dtype: the promoted dtype, as torchvision's composite
    want = tvops.sigmoid_focal_loss(x, t.double(), reduction="sum")
    got = dk_tv.sigmoid_focal_loss(x, t.double(), reduction="sum")
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)


# ---- dkit.ops: NumPy, determinism, refusals --------------------------------------------------


def test_numpy_inputs():
    x, t = _logits_and_targets((6, 5), 12)
    got = dkit.ops.sigmoid_focal_loss(x.numpy(), t.numpy(), reduction="none")
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, dkit.ops.sigmoid_focal_loss(x, t).numpy())
    xl, labels, _ = _classes(6, 5, 13, background=False)
    got = dkit.ops.softmax_focal_loss(xl.numpy(), labels.numpy(), reduction="none")
    np.testing.assert_allclose(got, dkit.ops.softmax_focal_loss(xl, labels, reduction="none").numpy())


def test_same_bits_for_any_thread_count():
    x, t = _logits_and_targets((3000, 80), 14)
    xl, labels, _ = _classes(3000, 80, 15)
    results = []
    try:
        for threads in (1, 2, 3):
            dkit.set_num_threads(threads)
            xg = x.clone().requires_grad_()
            s = dkit.ops.sigmoid_focal_loss(xg, t, reduction="sum")
            s.backward()
            results.append((s, xg.grad, dkit.ops.sigmoid_focal_loss(xl, labels, reduction="mean"),
                            dkit.ops.softmax_focal_loss(xl, labels.clamp_max(79))))  # fmt: skip
    finally:
        dkit.set_num_threads(0)
    for r in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(r, results[0]))


def test_refusals():
    x, t = _logits_and_targets((4, 3), 16)
    xl, labels, weight = _classes(4, 3, 17)
    with pytest.raises(dkit.DkitValueError, match="reduction must be 'none', 'mean' or 'sum', got 'avg'"):
        dkit.ops.sigmoid_focal_loss(x, t, reduction="avg")
    with pytest.raises(dkit.DkitValueError, match="needs class-index targets"):
        dkit.ops.sigmoid_focal_loss(x, t, weight=weight)
    with pytest.raises(dkit.DkitTypeError, match="'targets' must be probabilities of the input's dtype"):
        dkit.ops.sigmoid_focal_loss(x, labels.int()[:, None].expand(4, 3))
    with pytest.raises(dkit.DkitValueError, match="gamma must be finite"):
        dkit.ops.sigmoid_focal_loss(x, t, gamma=float("nan"))
    with pytest.raises(dkit.DkitTypeError, match="alpha must be a number"):
        dkit.ops.sigmoid_focal_loss(x, t, alpha="0.25")
    with pytest.raises(dkit.DkitValueError, match="'input' must be 2-d"):
        dkit.ops.sigmoid_focal_loss(x[0], labels)
    with pytest.raises(dkit.DkitTypeError, match="'targets' must be int64"):
        dkit.ops.softmax_focal_loss(x, t)
    with pytest.raises(dkit.DkitTypeError):
        dkit.ops.softmax_focal_loss(x.int(), labels)
    # class indices outside [0, C): the sigmoid's row is all negative, weight 1 (MMCV reads
    # beyond its weight there); the softmax refuses C and more
    far = torch.tensor([3, 100, -5, 0])
    got = dkit.ops.sigmoid_focal_loss(xl, far, reduction="none", weight=weight)
    bg = dkit.ops.sigmoid_focal_loss(xl, torch.full((4,), 3), reduction="none")
    torch.testing.assert_close(got[:3], bg[:3])
    with pytest.raises(dkit.DkitIndexError):
        dkit.ops.softmax_focal_loss(xl, far)
