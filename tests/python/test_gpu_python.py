"""dkit's ops on torch's GPU tensors, as training code calls them (`make gpu-check` runs this on a
GPU machine): autograd through every differentiable op, torch's current stream and a side
stream, torch.use_deterministic_algorithms, TorchScript of the compat modules, autocast, errors
for tensors on two devices.

Every test takes a `device`: "cuda" where torch has a CUDA (or ROCm) device and dkit's GPU
backend is available, and also "cpu", so that the checks themselves run in every `make test`
and cannot rot where no GPU is. The references are torchvision's ops on the same device and
dkit's CPU kernels; nothing here is a timing."""

import os

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import mmcv as M  # noqa: E402
from dkit.compat import torchvision as T  # noqa: E402


def _cuda_reason():
    """Why the CUDA cases do not run here, or None when they do."""
    if not torch.cuda.is_available():
        return "torch has no CUDA device here"
    backend = {b.name: b for b in dkit.backends()}.get("cuda") or {b.name: b for b in dkit.backends()}.get("hip")
    if backend is None:
        return "dkit was built without a GPU backend (make gpu)"
    if not backend.available:
        return f"dkit's {backend.name} backend is unavailable: {backend.reason}"
    return None


CUDA_REASON = _cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON)))]
cuda_only = pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON))

# Forward and gradient tolerances against a float64 reference, per dtype (the GPU sums in
# another order than the CPU; 16-bit values round once at the end).
_TOL = {torch.float32: 1e-4, torch.float64: 1e-10, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _feature(device, dtype=torch.float32, n=2, c=5, h=24, w=28, k=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * torch.tensor([w, h]) * 1.6 - 4
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * 20 + 0.5
    rois = torch.cat([torch.randint(0, n, (k, 1), generator=g).double(), xy, xy + wh], 1)
    return x.to(device, dtype), rois.to(device, dtype)


def _boxes(device, n=500, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 200
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 60 + 1], 1)
    return boxes.to(device, dtype), torch.rand(n, generator=g).to(device, dtype)


# ------------------------------------------------------------------------------------------
# Autograd through every differentiable op (roi_align; inputs that require grad are read
# through DLPack without a .detach() on a GPU: Note [Inputs that require grad])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_forward_and_backward(device, dtype, mode):
    x64, rois64 = _feature("cpu", torch.float64)
    x = x64.to(device, dtype).requires_grad_()
    rois = rois64.to(device, dtype)
    y = dkit.ops.roi_align(x, rois, (3, 4), 0.5, 2, mode, True)
    assert y.device == x.device and y.dtype == dtype and y.requires_grad
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (grad,) = torch.autograd.grad(y, x, g.to(device, dtype))
    # the reference: dkit's float64 CPU kernel on the same (rounded) values
    xr = x.detach().to("cpu", torch.float64).requires_grad_()
    yr = dkit.ops.roi_align(xr, rois.to("cpu", torch.float64), (3, 4), 0.5, 2, mode, True)
    (gr,) = torch.autograd.grad(yr, xr, g.to(torch.float64).to(dtype).double())
    tol = _TOL[dtype]
    torch.testing.assert_close(y.double().cpu(), yr.detach(), atol=tol, rtol=tol)
    torch.testing.assert_close(grad.double().cpu(), gr, atol=8 * tol, rtol=8 * tol)
    if mode == "avg" and dtype in (torch.float32, torch.float64):  # torchvision on the same device
        # (its 16-bit kernels compute in 16 bits, and 0.14's CPU has no bfloat16: not a reference)
        ref = torchvision.ops.roi_align(x.detach(), rois, (3, 4), 0.5, 2, aligned=True)
        torch.testing.assert_close(y.detach(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x, rois = _feature(device, torch.float64, c=2, h=8, w=9, k=5)
    x.requires_grad_()
    for mode in ("avg", "max"):
        assert torch.autograd.gradcheck(lambda z: dkit.ops.roi_align(z, rois, 2, 0.5, 2, mode, False), (x,))
        assert torch.autograd.gradcheck(lambda z: T.roi_align(z, rois, 2, 0.5, 2) if mode == "avg" else
                                        M.roi_align(z, rois, 2, 0.5, 2, "max"), (x,))  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
def test_a_training_step(device):
    """Features from a layer that requires grad, pooled through every entry point, a loss, one
    SGD step: the gradient reaches the layer's weights."""
    x, rois = _feature(device)
    conv = torch.nn.Conv2d(5, 5, 3, padding=1).to(device)
    heads = [lambda f: dkit.ops.roi_align(f, rois, 7, 0.5, 0), lambda f: T.roi_align(f, rois, 7, 0.5, 2),
             dkit.nn.RoIAlign(7, 0.5, 2, "max").to(device), T.RoIAlign(7, 0.5, 2).to(device)]  # fmt: skip
    for head in heads:
        conv.zero_grad()
        if isinstance(head, torch.nn.Module):
            loss = head(conv(x), rois).square().mean()
        else:
            loss = head(conv(x)).square().mean()
        loss.backward()
        assert conv.weight.grad is not None and torch.isfinite(conv.weight.grad).all()
        assert conv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
def test_every_op_takes_inputs_that_require_grad(device):
    boxes, scores = _boxes(device)
    b, s = boxes.clone().requires_grad_(), scores.clone().requires_grad_()
    with torch.no_grad():
        expect = dkit.ops.nms(boxes, scores, 0.5)
    assert torch.equal(dkit.ops.nms(b, s, 0.5), expect)
    assert torch.equal(T.nms(b, s, 0.5), expect)
    assert torch.equal(dkit.ops.batched_nms(b, s, (scores * 4).long(), 0.5),
                       T.batched_nms(boxes, scores, (scores * 4).long(), 0.5))
    dets, inds = dkit.ops.soft_nms(b, s)
    assert dets.shape[1] == 5 and dets.shape[0] == inds.shape[0]
    with torch.no_grad():
        assert torch.equal(dkit.ops.box_iou(b, b[:9]), dkit.ops.box_iou(boxes, boxes[:9]))
    # box overlaps have no backward (Note [No backward] in dkit/_ops/box_iou.py): refused in grad mode
    with pytest.raises(_C.DkitNotImplementedError, match="no gradient of box overlaps"):
        dkit.ops.box_iou(b, b[:9])


# ------------------------------------------------------------------------------------------
# Results on the GPU are the CPU kernels' (and torchvision's)


@cuda_only
def test_gpu_results_match_the_cpu_and_torchvision():
    boxes, scores = _boxes("cuda", n=3000)
    idxs = (scores * 7).long()
    cpu = (boxes.cpu(), scores.cpu())
    assert torch.equal(dkit.ops.nms(boxes, scores, 0.5).cpu(), dkit.ops.nms(*cpu, 0.5))
    assert torch.equal(dkit.ops.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))
    assert torch.equal(dkit.ops.batched_nms(boxes, scores, idxs, 0.5),
                       torchvision.ops.batched_nms(boxes, scores, idxs, 0.5))
    for name in ("box_iou", "generalized_box_iou", "distance_box_iou"):
        got = getattr(dkit.ops, name)(boxes, boxes[:700])
        assert torch.equal(got.cpu(), getattr(dkit.ops, name)(cpu[0], cpu[0][:700])), name
        torch.testing.assert_close(got, getattr(torchvision.ops, name)(boxes, boxes[:700]), atol=1e-6, rtol=1e-6)
    dets, inds = dkit.ops.soft_nms(boxes, scores, method="gaussian")
    cdets, cinds = dkit.ops.soft_nms(*cpu, method="gaussian")
    assert torch.equal(inds.cpu(), cinds)
    torch.testing.assert_close(dets.cpu(), cdets, atol=1e-5, rtol=1e-5)
    rb = torch.cat([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2], scores[:, None]], 1)
    dets, keep = dkit.ops.nms_rotated(rb, scores, 0.5)
    cdets, ckeep = dkit.ops.nms_rotated(rb.cpu(), cpu[1], 0.5)
    assert keep.device == rb.device and torch.equal(keep.cpu(), ckeep)
    assert torch.equal(dets.cpu(), cdets)


# ------------------------------------------------------------------------------------------
# Streams: dkit runs on torch's current stream, as a torch op would


@cuda_only
def test_kernels_run_on_torchs_current_stream():
    """On a side stream, the input is written after a long sleep; dkit's kernel, called on that
    stream, must see the written values. Run on any other stream, it would read them before they
    are written."""
    x, rois = _feature("cuda")
    side = torch.cuda.Stream()
    expect = dkit.ops.roi_align(x, rois, 3, 0.5, 2)
    target = torch.zeros_like(x)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU cycles
        target.copy_(x)
        got = dkit.ops.roi_align(target, rois, 3, 0.5, 2)
        keep = dkit.ops.nms(rois[:, 1:], rois[:, 0], 0.5)
    side.synchronize()
    assert torch.equal(got, expect)
    assert torch.equal(keep, dkit.ops.nms(rois[:, 1:], rois[:, 0], 0.5))
    # the default stream again, after the side stream's work
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(dkit.ops.roi_align(target, rois, 3, 0.5, 2), expect)


@cuda_only
def test_gpu_tensors_are_read_directly_on_torchs_current_stream(monkeypatch):
    # Note [torch fast path on a GPU]: no __dlpack__ where the kernel runs on torch's current
    # stream; the protocol, with its handshake, under a dkit.stream() for another stream
    x, rois = _feature("cuda")
    expect = dkit.ops.roi_align(x, rois, 3, 0.5, 2)
    exported = []
    dlpack = torch.Tensor.__dlpack__
    monkeypatch.setattr(torch.Tensor, "__dlpack__", lambda t, *a, **k: exported.append(1) or dlpack(t, *a, **k))
    assert torch.equal(dkit.ops.roi_align(x, rois, 3, 0.5, 2), expect)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch's current stream is now `side`: read directly still
        y = dkit.ops.roi_align(x, rois, 3, 0.5, 2)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(y, expect)
    assert exported == []
    with dkit.stream(x.device, side):  # dkit's stream is not torch's: exported, side waits
        z = dkit.ops.roi_align(x, rois, 3, 0.5, 2)
    torch.cuda.current_stream().wait_stream(side)
    assert len(exported) >= 2 and torch.equal(z, expect)


@cuda_only
def test_backward_runs_on_the_streams_autograd_uses():
    x, rois = _feature("cuda")
    x.requires_grad_()
    side = torch.cuda.Stream()
    (expect,) = torch.autograd.grad(dkit.ops.roi_align(x, rois, 3, 0.5, 2).sum(), x)
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        y = dkit.ops.roi_align(x * 1.0, rois, 3, 0.5, 2)
        (got,) = torch.autograd.grad(y.sum(), x)
    side.synchronize()
    torch.testing.assert_close(got, expect, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# torch.use_deterministic_algorithms (Note [Deterministic kernels] in csrc/common/dk_determinism.h)


@pytest.mark.parametrize("shape", [(8, 16, 16, 600), (19, 70, 90, 300)], ids=["one tile", "many tiles"])
@pytest.mark.parametrize("device", DEVICES)
def test_use_deterministic_algorithms_gives_the_same_bits(device, shape):
    # many overlapping boxes on a small map: every input element gets many atomic additions; on a
    # larger one, RoIs cross the deterministic backward's tiles (Note [Deterministic backward on a
    # GPU]) and channels are not a multiple of its chunk
    c, h, w, k = shape
    x, rois = _feature(device, c=c, h=h, w=w, k=k)
    x.requires_grad_()
    g = torch.randn(k, c, 7, 7, generator=torch.Generator().manual_seed(5)).to(device)

    def grad():
        (r,) = torch.autograd.grad(dkit.ops.roi_align(x, rois, 7, 0.5, 2), x, g)
        return r

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [grad() for _ in range(3)]
        op_runs = [torch.autograd.grad(T.roi_align(x, rois, 7, 0.5, 2, aligned=True), x, g)[0] for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(before)
    assert all(torch.equal(r, runs[0]) for r in runs[1:])
    assert torch.equal(op_runs[0], op_runs[1])
    assert not _C.set_deterministic(False)  # the request ended with the backward
    torch.testing.assert_close(grad(), runs[0], atol=1e-4, rtol=1e-4)  # the default: same values
    xc = x.detach().cpu().requires_grad_()
    (expect,) = torch.autograd.grad(dkit.ops.roi_align(xc, rois.cpu(), 7, 0.5, 2), xc, g.cpu())
    torch.testing.assert_close(runs[0].cpu(), expect, atol=1e-4, rtol=1e-4)  # and the CPU's values


# ------------------------------------------------------------------------------------------
# TorchScript, autocast, torch.compile


@pytest.mark.parametrize("device", DEVICES)
def test_scripted_compat_modules(device):
    x, rois = _feature(device)
    boxes, scores = _boxes(device)
    for eager in (T.RoIAlign((3, 4), 0.5, 2, aligned=True), M.RoIAlign(3, 0.5, 2), dkit.nn.RoIAlign(3, 0.5, 2, "max")):
        scripted = torch.jit.script(eager)
        assert torch.equal(scripted(x, rois), eager(x, rois))
    scripted_nms = torch.jit.script(T.nms)
    assert torch.equal(scripted_nms(boxes, scores, 0.5), T.nms(boxes, scores, 0.5))
    xg = x.clone().requires_grad_()
    layer = torch.jit.script(T.RoIAlign(3, 0.5, 2, aligned=True))
    (g1,) = torch.autograd.grad(layer(xg, rois).sum(), xg)
    (g2,) = torch.autograd.grad(T.roi_align(xg, rois, 3, 0.5, 2, aligned=True).sum(), xg)
    torch.testing.assert_close(g1, g2, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["input", "boxes"])
def test_autocast_as_torchvision(device, which):
    """torchvision's TestRoIAlign.test_autocast: float16 (CUDA) or bfloat16 (CPU) features with
    float32 boxes, or the reverse, under torch.autocast; the result in the features' dtype."""
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    x, rois = _feature(device)
    if which == "input":
        x = x.to(dtype)
    else:
        rois = rois.to(dtype)
    with torch.autocast(device, dtype=dtype):
        got = dkit.ops.roi_align(x, rois, 5, 0.5, 2)
        compat = T.roi_align(x, rois, 5, 0.5, 2, aligned=True)
        keep = dkit.ops.nms(rois[:, 1:], rois[:, 0].float(), 0.5)
    expect = torchvision.ops.roi_align(x.float(), rois.float(), 5, 0.5, 2, aligned=True).to(x.dtype)
    tol = _TOL[dtype]
    for y in (got, compat):
        assert y.dtype == x.dtype
        torch.testing.assert_close(y, expect, atol=tol, rtol=tol)
    assert torch.equal(keep, torchvision.ops.nms(rois[:, 1:].float(), rois[:, 0].float(), 0.5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile(device):
    if not hasattr(getattr(torch, "compiler", None), "substitute_in_graph"):
        pytest.skip("torch.compile with dkit ops needs torch >= 2.5")
    from torch import _dynamo

    _dynamo.reset()
    x, rois = _feature(device)
    x.requires_grad_()
    f = lambda x, r: T.roi_align(x, r, 5, 0.5, 2, aligned=True).relu()  # noqa: E731
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y, ref = compiled(x, rois), f(x, rois)
    assert torch.equal(y, ref)
    # On a GPU the default backward adds with atomics, in an order that varies from run to run
    # (Note [Deterministic backward on a GPU]): its bits are compared in deterministic mode, which
    # torch.use_deterministic_algorithms selects through a compiled graph as in eager mode.
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(device == "cuda")
    try:
        got = torch.autograd.grad(compiled(x, rois).sum(), x)[0]
        expect = torch.autograd.grad(f(x, rois).sum(), x)[0]
    finally:
        torch.use_deterministic_algorithms(before)
    assert torch.equal(got, expect)
    _dynamo.reset()


# ------------------------------------------------------------------------------------------
# Errors


@cuda_only
def test_tensors_on_two_devices_are_refused_naming_both():
    x, rois = _feature("cuda")
    boxes, scores = _boxes("cuda")
    for call, names in (
        (lambda: dkit.ops.roi_align(x, rois.cpu(), 2), ("input", "rois")),
        (lambda: T.roi_align(x, rois.cpu(), 2), ("input", "rois")),
        (lambda: dkit.ops.nms(boxes, scores.cpu(), 0.5), ("boxes", "scores")),
        (lambda: dkit.ops.box_iou(boxes, boxes.cpu()), ("boxes1", "boxes2")),
    ):
        with pytest.raises(_C.DkitError) as e:
            call()
        message = str(e.value)
        assert all(n in message for n in names) and "cuda" in message and "cpu" in message, message
    if torch.cuda.device_count() > 1:
        with pytest.raises(_C.DkitError, match="cuda"):
            dkit.ops.roi_align(x, rois.to("cuda:1"), 2)


@cuda_only
def test_big_inputs_and_no_boxes():
    x, rois = _feature("cuda", c=64, h=100, w=136, k=0)
    y = dkit.ops.roi_align(x.requires_grad_(), rois, 7, 0.125, 2)
    assert y.shape == (0, 64, 7, 7)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.count_nonzero(g) == 0
    assert dkit.ops.nms(torch.zeros(0, 4, device="cuda"), torch.zeros(0, device="cuda"), 0.5).shape == (0,)


# ------------------------------------------------------------------------------------------
# The ops added after the first GPU run (roi_pool family, roi_align_rotated, deform_conv2d,
# the focal losses, nms_match, quadrilaterals): on torch's CUDA tensors, autograd on, against
# torchvision's CUDA op where there is one and against dkit's CPU kernel. The C GPU tests
# compare the kernels alone; these take the whole path a user's call takes.


def _grads(fn, inputs, gout):
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*inputs)
    return (y, *torch.autograd.grad(y, inputs, gout.to(y.device, y.dtype)))


def _close(got, want, dtype, what):
    tol = _TOL[dtype] if dtype != torch.float32 else 2e-5
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.cpu(), b.cpu(), atol=tol, rtol=tol, msg=lambda m: f"{what}[{i}]: {m}")


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("op", ["roi_pool", "ps_roi_pool", "ps_roi_align"])
def test_roi_pooling_family_on_the_gpu(op, dtype):
    x, rois = _feature("cuda", dtype, c=18, k=60)
    size = 3
    args = (size, 0.5) if op != "ps_roi_align" else (size, 0.5, 2)
    fd, ft = getattr(T, op), getattr(torchvision.ops, op)
    g = torch.Generator().manual_seed(3)
    gout = torch.randn(rois.shape[0], 18 if op == "roi_pool" else 2, size, size, generator=g)
    got = _grads(lambda a: fd(a, rois, *args), [x], gout)
    want_tv = _grads(lambda a: ft(a, rois, *args), [x], gout)
    want_cpu = _grads(lambda a: fd(a, rois.cpu(), *args), [x.cpu()], gout)
    assert got[0].device == x.device and got[1].device == x.device
    if dtype != torch.float16:  # torchvision's CUDA kernels accumulate half in half
        # ps_roi_pool's gradient is its forward's own, where torchvision's reaches a last row and
        # column its forward never reads (dkit.ops.ps_roi_pool): only the values compare
        _close(got[:1] if op == "ps_roi_pool" else got, want_tv, dtype, f"{op} against torchvision")
    _close(got, want_cpu, dtype, f"{op} against dkit's CPU kernel")
    if op == "roi_pool":  # a maximum and its argmax: the same values as torchvision's, exactly
        assert torch.equal(got[0], want_tv[0])


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_roi_align_rotated_on_the_gpu(dtype):
    x, rois = _feature("cuda", dtype, c=6, k=50)
    g = torch.Generator().manual_seed(4)
    rot = torch.cat([rois[:, :1], (rois[:, 1:3] + rois[:, 3:5]) / 2, rois[:, 3:5] - rois[:, 1:3],
                     (torch.rand(rois.shape[0], 1, generator=g, dtype=torch.float64) * 7 - 3.5).to(rois)], 1)
    gout = torch.randn(rot.shape[0], 6, 4, 4, generator=g)
    for sr, aligned, clockwise in ((0, True, False), (2, False, True)):
        fn = lambda a, r: M.roi_align_rotated(a, r, 4, 0.5, sr, aligned, clockwise)  # noqa: E731
        got = _grads(lambda a: fn(a, rot), [x], gout)
        want = _grads(lambda a: fn(a, rot.cpu()), [x.cpu()], gout)
        _close(got, want, dtype, f"roi_align_rotated sr {sr}")


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_deform_conv2d_on_the_gpu(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 9, 11, generator=g, dtype=torch.float64)
    w = torch.randn(6, 2, 3, 3, generator=g, dtype=torch.float64) * 0.3
    off = torch.randn(3, 2 * 2 * 9, 9, 11, generator=g, dtype=torch.float64) * 2  # 2 offset groups
    mask = torch.rand(3, 2 * 9, 9, 11, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    t = [v.to("cuda", dtype) for v in (x, off, w, b, mask)]
    gout = torch.randn(3, 6, 9, 11, generator=g)

    def run(lib):
        return lambda x, o, w, b, m: lib.deform_conv2d(x, o, w, b, padding=(1, 1), mask=m)

    got = _grads(run(T), t, gout)
    _close(got, _grads(run(torchvision.ops), t, gout), dtype, "deform_conv2d against torchvision")
    _close(got, _grads(run(T), [v.cpu() for v in t], gout), dtype, "deform_conv2d against dkit's CPU kernel")
    # MMCV's DCNv1 entry, no mask: the same as torchvision's without one
    got1 = _grads(lambda x, o, w: M.deform_conv2d(x, o, w, 1, 1, 1, 2, 2), [t[0], t[1], t[2]], gout)
    want1 = _grads(lambda x, o, w: torchvision.ops.deform_conv2d(x, o, w, padding=(1, 1)), [t[0], t[1], t[2]], gout)
    _close(got1, want1, dtype, "mmcv deform_conv2d against torchvision")


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_focal_losses_on_the_gpu(dtype):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(300, 11, generator=g) * 3).to("cuda", dtype)
    targets = (torch.rand(300, 11, generator=g) < 0.1).to("cuda", dtype)
    for reduction in ("none", "mean", "sum"):
        gout = torch.randn(300, 11, generator=g) if reduction == "none" else torch.tensor(1.5)
        fn = lambda lib: lambda a: lib.sigmoid_focal_loss(a, targets, 0.25, 2.0, reduction)  # noqa: E731
        got = _grads(fn(T), [x], gout)
        want = _grads(lambda a: torchvision.ops.sigmoid_focal_loss(a.float(), targets.float(), 0.25, 2.0, reduction),
                      [x], gout)
        _close([v.to(dtype) for v in got], [v.to(dtype) for v in want], dtype, f"sigmoid_focal_loss {reduction}")
    labels = torch.randint(0, 12, (300,), generator=g).cuda()  # 11: background
    wt = torch.rand(11, generator=g).cuda()  # MMCV: a weight per class
    for name in ("sigmoid_focal_loss", "softmax_focal_loss"):
        lab = labels if name == "sigmoid_focal_loss" else labels.clamp(max=10)
        fn = lambda a, lab=lab, name=name: getattr(M, name)(a, lab, 2.0, 0.25, wt.to(a), "mean")  # noqa: E731
        got = _grads(fn, [x.float()], torch.tensor(1.0))
        want = _grads(lambda a, lab=lab, name=name: getattr(M, name)(a, lab.cpu(), 2.0, 0.25, wt.cpu(), "mean"),
                      [x.float().cpu()], torch.tensor(1.0))
        _close(got, want, torch.float32, f"mmcv {name}")


@cuda_only
def test_nms_match_and_quadrilaterals_on_the_gpu():
    boxes, scores = _boxes("cuda", n=700)
    dets = torch.cat([boxes, scores[:, None]], 1)
    got, want = M.nms_match(dets, 0.4), M.nms_match(dets.cpu(), 0.4)
    assert len(got) == len(want) and all(torch.equal(a.cpu(), b) for a, b in zip(got, want))
    x1, y1, x2, y2 = boxes.unbind(1)
    q = torch.stack([x1, y1, x2, y1 + 3, x2 - 2, y2, x1 + 1, y2 - 4], 1)  # convex, not rectangles
    torch.testing.assert_close(M.box_iou_quadri(q, q[:90]).cpu(), M.box_iou_quadri(q.cpu(), q[:90].cpu()),
                               atol=1e-6, rtol=1e-6)
    d, k = M.nms_quadri(q, scores, 0.3)
    dc, kc = M.nms_quadri(q.cpu(), scores.cpu(), 0.3)
    assert torch.equal(k.cpu(), kc) and torch.equal(d.cpu(), dc)


def test_the_gpu_cases_run_where_a_gpu_is():
    """On a machine with CUDA, these tests must not skip their CUDA cases quietly: a GPU that
    dkit cannot use is a failure there (DKIT_EXPECT_GPU=1, which `make gpu-check` sets)."""
    if os.environ.get("DKIT_EXPECT_GPU") == "1":
        assert CUDA_REASON is None, CUDA_REASON
