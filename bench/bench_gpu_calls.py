#!/usr/bin/env python3
"""Whole Python calls on GPU tensors: dkit against torchvision, in one process, on the same tensors.

    python3 bench/bench_gpu_calls.py [--device cuda] [--reps 20] [--cold]

The rows of the issue on GPU kernels (roi_align forward, adaptive, backward, deterministic
backward, a tiny call, nms at 1k/10k/100k boxes, batched_nms, box_iou), each timed as a user's
code calls it: dkit.compat.torchvision against torchvision.ops, inputs from torch, autograd on.
The rows that torchvision lacks (soft_nms, nms_rotated, box_iou_rotated) compare dkit's GPU call
with dkit's own CPU call, the only other implementation there is (MMCV runs soft_nms on the CPU
only and torchvision has no rotated ops).

Method: median of --reps calls after 3 warm-ups, each call between two CUDA events on torch's
current stream, so host overhead that delays the launch counts as it would in a training step.
With --cold, a 64 MiB buffer is written between calls, as the other ops of a training step
do, so that no call finds its inputs in the L2 cache of the call before (the H100's is 50 MB).
Speed-up = torchvision's median / dkit's. `--device cpu` runs the same rows on the CPU (a smoke
test where no GPU is): its figures say nothing about a GPU. No figure here is estimated.
"""

import argparse
import sys

from _dkit_path import use_checkout

use_checkout()

import torch  # noqa: E402
import torchvision  # noqa: E402

import dkit  # noqa: E402
import dkit.ops  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import torchvision as dtv  # noqa: E402


class Timer:
    def __init__(self, device, reps, cold):
        self.device, self.reps = torch.device(device), reps
        self.cuda = self.device.type == "cuda"
        self.flush = torch.empty(16 << 20, device=self.device) if cold else None

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def median_ms(self, fn):
        import time

        for _ in range(3):
            fn()
        self._sync()
        times = []
        for _ in range(self.reps):
            if self.flush is not None:
                self.flush.fill_(1.0)
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[len(times) // 2]


class _tunable:
    """A dkit tunable set for a block (dkit._C.tunable), where the loaded dkit has it."""

    def __init__(self, name, value):
        self.name, self.value, self.previous = name, value, None

    def __enter__(self):
        try:
            self.previous = _C.tunable(self.name, self.value)
        except Exception:  # an older dkit: the row measures its only order
            self.previous = None

    def __exit__(self, *exc):
        if self.previous is not None:
            _C.tunable(self.name, self.previous)


def boxes_xyxy(n, g, dev, w=1000.0, h=800.0):
    xy = torch.rand(n, 2, generator=g) * torch.tensor([w, h])
    return torch.cat([xy, xy + 16 + 200 * torch.rand(n, 2, generator=g)], 1).to(dev)


def rois(k, g, dev, batch=2):
    wh = 16 + 400 * torch.rand(k, 2, generator=g)
    c = torch.rand(k, 2, generator=g) * torch.tensor([1088.0, 800.0])
    return torch.cat([(torch.arange(k) % batch).float()[:, None], c - wh / 2, c + wh / 2], 1).to(dev)


def rows(t, dev, small):
    """Yields (case, dkit ms, reference ms, reference name)."""
    g = torch.Generator().manual_seed(0)
    shape = (2, 64, 50, 68) if small else (2, 256, 200, 272)
    k = 128 if small else 1024
    x = (torch.rand(*shape, generator=g) * 2 - 1).to(dev).requires_grad_(True)
    r = rois(k, g, dev)
    desc = f"{list(shape)}, {k} boxes, 7x7"
    for sr in (2, 0):
        fd = lambda: dtv.roi_align(x, r, 7, 0.25, sr, True)  # noqa: E731
        ft = lambda: torchvision.ops.roi_align(x, r, 7, 0.25, sr, True)  # noqa: E731
        with torch.no_grad():
            tv_ms = t.median_ms(ft)
            yield f"roi_align forward, {desc}, sr {sr}", t.median_ms(fd), tv_ms, "tv"
            # Note [The GPU order of roi_align's bins]: the order the default does not take here
            other = "RoI-major" if sr > 0 else "channel-major"
            with _tunable("roi_align.gpu_order", 0 if sr > 0 else 1):
                yield f"  the same, {other} order (tunable)", t.median_ms(fd), tv_ms, "tv"
    yd, yt = dtv.roi_align(x, r, 7, 0.25, 2, True), torchvision.ops.roi_align(x, r, 7, 0.25, 2, True)
    gy = torch.ones_like(yd)
    bd = lambda: torch.autograd.grad(yd, x, gy, retain_graph=True)  # noqa: E731
    bt = lambda: torch.autograd.grad(yt, x, gy, retain_graph=True)  # noqa: E731
    atomic_tv = t.median_ms(bt)
    yield "roi_align backward (autograd.grad), sr 2", t.median_ms(bd), atomic_tv, "tv"
    with _tunable("roi_align.gpu_backward_order", 0):
        yield "  the same, RoI-major order (tunable)", t.median_ms(bd), atomic_tv, "tv"
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        det = t.median_ms(bd)
    finally:
        torch.use_deterministic_algorithms(False)
    yield "roi_align backward, deterministic (vs tv atomic)", det, atomic_tv, "tv"
    xs = torch.rand(1, 4, 8, 8, generator=g).to(dev)
    rs = torch.tensor([[0.0, 1.0, 1.0, 6.0, 6.0]]).to(dev)
    yield "tiny roi_align [1,4,8,8], 1 box, whole call", \
        t.median_ms(lambda: dtv.roi_align(xs, rs, 2, 1.0, 2, True)), \
        t.median_ms(lambda: torchvision.ops.roi_align(xs, rs, 2, 1.0, 2, True)), "tv"  # fmt: skip
    for n in (1000, 10000) if small else (1000, 10000, 100000):
        b, s = boxes_xyxy(n, g, dev), torch.rand(n, generator=g).to(dev)
        yield f"nms {n} boxes", t.median_ms(lambda: dtv.nms(b, s, 0.5)), \
            t.median_ms(lambda: torchvision.ops.nms(b, s, 0.5)), "tv"  # fmt: skip
    n = 2000 if small else 20000
    b, s = boxes_xyxy(n, g, dev), torch.rand(n, generator=g).to(dev)
    c = torch.randint(0, 80, (n,), generator=g).to(dev)
    yield f"batched_nms {n} boxes, 80 classes", t.median_ms(lambda: dtv.batched_nms(b, s, c, 0.5)), \
        t.median_ms(lambda: torchvision.ops.batched_nms(b, s, c, 0.5)), "tv"  # fmt: skip
    n = 1000 if small else 4000
    b = boxes_xyxy(n, g, dev)
    yield f"box_iou {n} x {n}", t.median_ms(lambda: dtv.box_iou(b, b)), \
        t.median_ms(lambda: torchvision.ops.box_iou(b, b)), "tv"  # fmt: skip
    # The rows without a torchvision op: dkit on this device against dkit on the CPU.
    cpu = Timer("cpu", max(3, t.reps // 4), False)
    n = 2000
    b, s = boxes_xyxy(n, g, "cpu"), torch.rand(n, generator=g)
    bg, sg = b.to(dev), s.to(dev)
    yield f"soft_nms {n} boxes, gaussian", \
        t.median_ms(lambda: dkit.ops.soft_nms(bg, sg, 0.3, 0.5, 0.001, "gaussian")), \
        cpu.median_ms(lambda: dkit.ops.soft_nms(b, s, 0.3, 0.5, 0.001, "gaussian")), "dkit cpu"  # fmt: skip
    for n, what in ((1000, "box_iou_rotated {n} x {n}"), (10000, "nms_rotated {n} boxes")):
        xy = torch.rand(n, 2, generator=g) * torch.tensor([1000.0, 800.0])
        rb = torch.cat([xy, 16 + 200 * torch.rand(n, 2, generator=g), torch.rand(n, 1, generator=g) * 3], 1)
        rs = torch.rand(n, generator=g)
        rbg, rsg = rb.to(dev), rs.to(dev)
        if what.startswith("box_iou"):
            fg, fc = (lambda: dkit.ops.box_iou_rotated(rbg, rbg)), (lambda: dkit.ops.box_iou_rotated(rb, rb))
        else:
            fg, fc = (lambda: dkit.ops.nms_rotated(rbg, rsg, 0.5)), (lambda: dkit.ops.nms_rotated(rb, rs, 0.5))
        yield what.format(n=n), t.median_ms(fg), cpu.median_ms(fc), "dkit cpu"
    yield from toolbox_rows(t, dev, small, x, r)


def _training(f, *inputs):
    """One training step's share of an op: its forward and autograd's backward into every input."""
    leaves = [v.detach().requires_grad_() for v in inputs]
    gout = torch.randn_like(f(*leaves))

    def run():
        leaves = [v.detach().requires_grad_() for v in inputs]
        torch.autograd.grad(f(*leaves), leaves, gout)

    return run


def toolbox_rows(t, dev, small, x, r):
    """The ops of the detection toolbox (issue 22's cases, on this device), against torchvision's
    op on the same tensors; roi_align_rotated against bench_roi_align_rotated.reference (torch ops
    written from MMCV's definition: the only other GPU implementation here)."""
    import bench_roi_align_rotated as rar

    g = torch.Generator().manual_seed(1)
    desc = f"{list(x.shape)}, {r.shape[0]} boxes, 7x7"
    xd = x.detach()
    fd, ft = (lambda a: dtv.roi_pool(a, r, 7, 0.25)), (lambda a: torchvision.ops.roi_pool(a, r, 7, 0.25))
    with torch.no_grad():
        yield f"roi_pool forward, {desc}", t.median_ms(lambda: fd(xd)), t.median_ms(lambda: ft(xd)), "tv"
    yield "  roi_pool forward + backward", t.median_ms(_training(fd, xd)), t.median_ms(_training(ft, xd)), "tv"
    shape = (2, 98, 50, 68) if small else (2, 490, 100, 136)
    xps = torch.randn(*shape, generator=g).to(dev)
    for name, extra in (("ps_roi_pool", ()), ("ps_roi_align", (2,))):
        fd = lambda a, name=name, extra=extra: getattr(dtv, name)(a, r, 7, 0.125, *extra)  # noqa: E731
        ft = lambda a, name=name, extra=extra: getattr(torchvision.ops, name)(a, r, 7, 0.125, *extra)  # noqa: E731
        with torch.no_grad():
            yield f"{name} forward, {list(shape)}", t.median_ms(lambda: fd(xps)), t.median_ms(lambda: ft(xps)), "tv"
        yield f"  {name} forward + backward", t.median_ms(_training(fd, xps)), t.median_ms(_training(ft, xps)), "tv"
    n, c, hw = (2, 16, 16) if small else (8, 64, 64)
    xs = torch.randn(n, c, hw, hw, generator=g).to(dev)
    off = (torch.randn(n, 18, hw, hw, generator=g) * 2).to(dev)
    mask = torch.rand(n, 9, hw, hw, generator=g).to(dev)
    w = (torch.randn(c, c, 3, 3, generator=g) * 0.1).to(dev)
    b = torch.randn(c, generator=g).to(dev)
    fd = lambda *a: dtv.deform_conv2d(a[0], a[1], a[2], a[3], padding=(1, 1), mask=a[4])  # noqa: E731
    ft = lambda *a: torchvision.ops.deform_conv2d(a[0], a[1], a[2], a[3], padding=(1, 1), mask=a[4])  # noqa: E731
    args = (xs, off, w, b, mask)
    yield f"deform_conv2d fwd + bwd, [{n},{c},{hw},{hw}], 3x3, mask", \
        t.median_ms(_training(fd, *args)), t.median_ms(_training(ft, *args)), "tv"  # fmt: skip
    n = 10_000 if small else 100_000
    logits = (torch.randn(n, 80, generator=g) * 3).to(dev)
    targets = (torch.rand(n, 80, generator=g) < 0.01).float().to(dev)
    fd = lambda a: dtv.sigmoid_focal_loss(a, targets, reduction="mean")  # noqa: E731
    ft = lambda a: torchvision.ops.sigmoid_focal_loss(a, targets, reduction="mean")  # noqa: E731
    yield f"sigmoid_focal_loss fwd + bwd, {n} x 80, mean", \
        t.median_ms(_training(fd, logits)), t.median_ms(_training(ft, logits)), "tv"  # fmt: skip
    k = r.shape[0]
    a = (torch.rand(k, 1, generator=g) - 0.5).to(dev) * 6.2832
    rr = torch.cat([r[:, :1], (r[:, 1:3] + r[:, 3:5]) / 2, r[:, 3:5] - r[:, 1:3], a], 1)
    fd = lambda v: dkit.ops.roi_align_rotated(v, rr, 7, 0.25, 2, True, True)  # noqa: E731
    ft = lambda v: rar.reference(v, rr, (7, 7), 0.25, 2, True, True)  # noqa: E731
    with torch.no_grad():
        yield f"roi_align_rotated forward, {desc}, sr 2", t.median_ms(lambda: fd(xd)), \
            t.median_ms(lambda: ft(xd)), "torch ref"  # fmt: skip
    yield "  roi_align_rotated forward + backward", t.median_ms(_training(fd, xd)), \
        t.median_ms(_training(ft, xd)), "torch ref"  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cold", action="store_true", help="write 64 MiB between calls")
    ap.add_argument("--small", action="store_true", help="smaller problems (a smoke test)")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench-gpu-calls: skipped: torch has no CUDA device here")
        return 0
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (smoke test, not a GPU figure)"
    print(f"{name}; torch {torch.__version__}, torchvision {torchvision.__version__}; "
          f"median of {args.reps} calls{', L2 flushed between calls' if args.cold else ''}")  # fmt: skip
    print(f"  {'case':<52} {'dkit ms':>9} {'ref ms':>9} {'ref':>8} {'speed-up':>9}")
    for case, d, ref, who in rows(Timer(dev, args.reps, args.cold), dev, args.small):
        print(f"  {case:<52} {d:>9.3f} {ref:>9.3f} {who:>8} {ref / d:>8.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
