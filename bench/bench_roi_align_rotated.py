#!/usr/bin/env python3
"""roi_align_rotated: dkit against a PyTorch reference written from MMCV's definition (MMCV is not
installed; its CUDA/CPU kernels are C++ extensions), in one process, on the same tensors.

    /usr/bin/python3 bench/bench_roi_align_rotated.py [--reps 5] [--threads 1,2] [--quick]

The reference is vectorised PyTorch: every sample point of every bin of a block of RoIs at
once (rotation, bilinear taps and weights as tensors), the four taps read with one gather each
from a channels-last copy of the map (index_select of whole [C] rows, contiguous; gathering
the same taps from channel planes, [C, N H W] with index_select along dim 1, gave the same
bits in 1.3-3x the time), the samples summed and divided, MMCV's rules throughout (the
bilinear edge rules, the count max(gh gw, 1), adaptive grids masked per RoI); its backward is
autograd's (index gathers scatter-add their gradients). It is checked against dkit before
timing.

Cases (float32): an oriented-detection head's feature map [2, 256, 50, 68] (quick: [1, 64, 25,
34]), 512 rotated RoIs (quick: 128) of 16-400 px at scale 1/16, any angle, 7 x 7 bins,
clockwise, MMRotate's RoIAlignRotated settings (sampling_ratio 2):
  forward          the pooled output, what inference runs
  forward+backward a training step's pair: forward with grad, then backward of a random gradient
  interleaved      the forward after 64 MB written and 64 MB read elsewhere and a few allocations
  adaptive forward sampling_ratio 0 (MMCV's default): up to 4 x 4 samples per bin here
Each rep runs every (thread count, library) once, in turn; the median of --reps is printed as
time and as the ratio dkit / reference (below 1: dkit is faster). torch.set_num_threads and
dkit.set_num_threads set the counts.
"""

import argparse
import math

from _threads import set_threads
from _turns import print_ratios, take_turns

from _dkit_path import use_checkout

use_checkout()  # the checkout's dkit where it is built (bench/_dkit_path.py), before importing it

import torch  # noqa: E402

import dkit  # noqa: E402


def reference(x, rois, size, spatial_scale, sampling_ratio=0, aligned=True, clockwise=False, block=64):
    """mmcv.ops.roi_align_rotated from its definition, vectorised PyTorch (differentiable)."""
    n, c, h, w = x.shape
    dev = x.device  # any device: the bench on a GPU runs this reference there
    ph, pw = size
    flat = x.permute(0, 2, 3, 1).reshape(n * h * w, c)  # [N H W, C]: a tap's channels are one row
    parts = []
    for r in rois.split(block):
        k = r.shape[0]
        off = 0.5 if aligned else 0.0
        cx, cy = r[:, 1] * spatial_scale - off, r[:, 2] * spatial_scale - off
        rw, rh = r[:, 3] * spatial_scale, r[:, 4] * spatial_scale
        theta = -r[:, 5] if clockwise else r[:, 5]
        if not aligned:
            rw, rh = rw.clamp(min=1.0), rh.clamp(min=1.0)
        bh, bw = rh / ph, rw / pw
        if sampling_ratio > 0:
            gh = gw = torch.full((k,), sampling_ratio, dtype=torch.long, device=dev)
        else:
            gh, gw = torch.ceil(bh).long().clamp(min=0), torch.ceil(bw).long().clamp(min=0)
        mh, mw = max(int(gh.max()), 1) if k else 1, max(int(gw.max()), 1) if k else 1
        iy = torch.arange(mh, dtype=x.dtype, device=dev)
        ix = torch.arange(mw, dtype=x.dtype, device=dev)
        ghf, gwf = gh.to(x.dtype).clamp(min=1), gw.to(x.dtype).clamp(min=1)
        # box frame: yy [K, PH, mh], xx [K, PW, mw]
        py, px = torch.arange(ph, dtype=x.dtype, device=dev), torch.arange(pw, dtype=x.dtype, device=dev)
        yy = (-rh / 2)[:, None, None] + py[None, :, None] * bh[:, None, None] + (
            iy + 0.5
        )[None, None, :] * bh[:, None, None] / ghf[:, None, None]
        xx = (-rw / 2)[:, None, None] + px[None, :, None] * bw[:, None, None] + (
            ix + 0.5
        )[None, None, :] * bw[:, None, None] / gwf[:, None, None]
        cos, sin = torch.cos(theta)[:, None, None, None, None], torch.sin(theta)[:, None, None, None, None]
        yy5, xx5 = yy[:, :, None, :, None], xx[:, None, :, None, :]  # [K, PH, PW, mh, mw]
        y = yy5 * cos - xx5 * sin + cy[:, None, None, None, None]
        xs = yy5 * sin + xx5 * cos + cx[:, None, None, None, None]
        in_grid_y = (iy[None, :] < gh[:, None])[:, None, None, :, None]
        valid = in_grid_y & (ix[None, :] < gw[:, None])[:, None, None, None, :]
        valid = valid & (y >= -1) & (y <= h) & (xs >= -1) & (xs <= w)
        y, xs = y.clamp(min=0), xs.clamp(min=0)
        y0, x0 = y.floor().long(), xs.floor().long()
        ylast, xlast = y0 >= h - 1, x0 >= w - 1
        y0, x0 = torch.where(ylast, h - 1, y0), torch.where(xlast, w - 1, x0)
        y1, x1 = torch.where(ylast, h - 1, y0 + 1), torch.where(xlast, w - 1, x0 + 1)
        y, xs = torch.where(ylast, y0.to(x.dtype), y), torch.where(xlast, x0.to(x.dtype), xs)
        ly, lx = y - y0, xs - x0
        hy, hx = 1 - ly, 1 - lx
        base = (r[:, 0].long() * (h * w))[:, None, None, None, None]
        count = (gh * gw).clamp(min=1).to(x.dtype)[:, None, None]
        acc = None
        for yi, xi, wt in ((y0, x0, hy * hx), (y0, x1, hy * lx), (y1, x0, ly * hx), (y1, x1, ly * lx)):
            idx = torch.where(valid, base + yi * w + xi, 0).reshape(-1)
            v = flat.index_select(0, idx).reshape(k, ph, pw, mh * mw, c)
            t = (v * torch.where(valid, wt, 0).reshape(k, ph, pw, mh * mw, 1)).sum(-2)
            acc = t if acc is None else acc + t
        parts.append((acc / count[..., None]).permute(0, 3, 1, 2))
    return torch.cat(parts) if parts else x.new_zeros(0, c, ph, pw)


def _case(quick, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w, k = (1, 64, 25, 34, 128) if quick else (2, 256, 50, 68, 512)
    x = torch.randn(n, c, h, w, generator=g)
    xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 16.0, h * 16.0])
    wh = 16 + torch.rand(k, 2, generator=g) * 384
    a = (torch.rand(k, 1, generator=g) - 0.5) * 2 * math.pi
    rois = torch.cat([torch.randint(0, n, (k, 1), generator=g).float(), xy, wh, a], 1)
    return x, rois


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    x, rois = _case(args.quick)
    gout = torch.randn(rois.shape[0], x.shape[1], 7, 7)
    scale = 1 / 16
    libs = {"reference": reference, "dkit": dkit.ops.roi_align_rotated}
    for sr in (2, 0):
        want = reference(x.double(), rois.double(), (7, 7), scale, sr, True, True)
        got = dkit.ops.roi_align_rotated(x, rois, (7, 7), scale, sr, True, True)
        assert torch.allclose(got.double(), want, atol=1e-4), (got.double() - want).abs().max()
        assert torch.allclose(reference(x, rois, (7, 7), scale, sr, True, True), got, atol=1e-4)
    xg = x.double().requires_grad_()
    reference(xg, rois.double(), (7, 7), scale, 2, True, True).backward(gout.double())
    xd = x.detach().requires_grad_()
    dkit.ops.roi_align_rotated(xd, rois, (7, 7), scale, 2, True, True).backward(gout)
    assert torch.allclose(xd.grad.double(), xg.grad, atol=1e-4)

    def forward(f, sr=2):
        return lambda: f(x, rois, (7, 7), scale, sr, True, True)

    def adaptive(f):
        return forward(f, 0)

    def training(f):
        def run():
            xg = x.detach().requires_grad_()
            f(xg, rois, (7, 7), scale, 2, True, True).backward(gout)

        return run

    cases = [("forward", forward, False), ("forward+backward", training, False), ("interleaved", forward, True),
             ("adaptive forward", adaptive, False)]  # fmt: skip
    cases = [(name, {lib: make(f) for lib, f in libs.items()}, disturb) for name, make, disturb in cases]
    threads = [int(t) for t in args.threads.split(",")]
    # Note [Switching torch's threads] in _threads.py
    times = take_turns(cases, args.reps, threads, lambda t: set_threads(torch, dkit, t))
    shape = "x".join(str(s) for s in x.shape)
    print(f"roi_align_rotated, input {shape}, {rois.shape[0]} RoIs, 7x7 bins, clockwise, float32, "
          f"median of {args.reps}")  # fmt: skip
    print_ratios(times, cases, threads, "reference")


if __name__ == "__main__":
    main()
