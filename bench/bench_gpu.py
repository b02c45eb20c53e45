#!/usr/bin/env python3
"""GPU kernels: dkit's against its CPU kernels and, where torch has CUDA, torchvision's (make bench-gpu).

    /usr/bin/python3 bench/bench_gpu.py [--build build]

For every GPU backend that was built (build/libdkit_cuda.so, build/libdkit_hip.so) it runs
build/bench_gpu (bench/bench_gpu.c: the kernels called through the dispatcher on device tensors
made through the backend object, medians of 11 synchronised calls) and prints each case's GPU and
CPU times and their ratio. Where torch has CUDA (or ROCm), the same cases run through
torchvision.ops on the GPU too, and the ratio dkit / torchvision is printed. Cases (float32):
  roi_align_forward / _backward / _backward_deterministic
        [2, 256, 200, 272], 1024 boxes, 7x7, scale 0.25, sampling_ratio 2, aligned
        (torchvision has no deterministic mode: its row compares with its atomic backward)
  nms_10000_boxes / nms_100000_boxes    iou_threshold 0.5
  box_iou_4000x4000                     torchvision's box_iou
  box_iou_rotated_1000x1000, nms_rotated_10000_boxes (threshold 0.5), soft_nms_2000_boxes
        (gaussian, sigma 0.5): MMCV's ops; torchvision has none, and MMCV's soft_nms runs on the
        CPU only, so these rows compare with dkit's CPU kernels alone
Without a GPU it says so and exits 0. No figure here is ever estimated: every number printed was
measured by this run, on this machine.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _median_ms(fn, sync, reps=11):
    for _ in range(2):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[reps // 2]


def torchvision_times():
    """{case: ms} for torchvision's GPU ops, or a reason why there are none."""
    try:
        import torch
        import torchvision
    except ImportError as e:
        return f"torchvision not importable ({e})"
    if not torch.cuda.is_available():
        return "torch has no CUDA/ROCm device here"
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.rand(2, 256, 200, 272, generator=g) * 2 - 1).to(dev).requires_grad_(True)
    k = 1024
    wh = 16 + 400 * torch.rand(k, 2, generator=g)
    c = torch.rand(k, 2, generator=g) * torch.tensor([1088.0, 800.0])
    rois = torch.cat([(torch.arange(k) % 2).float()[:, None], c - wh / 2, c + wh / 2], 1).to(dev)
    sync = torch.cuda.synchronize
    out = {}
    fwd = lambda: torchvision.ops.roi_align(x, rois, 7, 0.25, 2, True)  # noqa: E731
    out["roi_align_forward"] = _median_ms(lambda: fwd().detach(), sync)
    y = fwd()
    grad = torch.ones_like(y)
    out["roi_align_backward"] = _median_ms(lambda: torch.autograd.grad(y, x, grad, retain_graph=True), sync)
    out["roi_align_backward_deterministic"] = out["roi_align_backward"]
    for n in (10000, 100000):
        xy = torch.rand(n, 2, generator=g) * torch.tensor([1000.0, 800.0])
        boxes = torch.cat([xy, xy + 16 + 200 * torch.rand(n, 2, generator=g)], 1).to(dev)
        scores = torch.rand(n, generator=g).to(dev)
        out[f"nms_{n}_boxes"] = _median_ms(lambda: torchvision.ops.nms(boxes, scores, 0.5), sync)
    xy = torch.rand(4000, 2, generator=g) * torch.tensor([1000.0, 800.0])
    boxes = torch.cat([xy, xy + 16 + 200 * torch.rand(4000, 2, generator=g)], 1).to(dev)
    out["box_iou_4000x4000"] = _median_ms(lambda: torchvision.ops.box_iou(boxes, boxes), sync)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench_gpu")
    libs = [(k, os.path.join(args.build, f"libdkit_{k}.so")) for k in ("cuda", "hip")]
    libs = [(k, p) for k, p in libs if os.path.isfile(p)]
    if not libs:
        print("bench-gpu: skipped: no GPU backend was built (no nvcc or hipcc)")
        return 0
    tv = None
    for kind, lib in libs:
        r = subprocess.run([exe, lib, kind], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr, file=sys.stderr)
            return r.returncode
        rows = [line.split() for line in r.stdout.splitlines() if line.startswith("case ")]
        if not rows:
            print(f"bench-gpu ({kind}): {r.stdout.strip()}")
            continue
        if tv is None:
            tv = torchvision_times()
        print(f"{kind}: median ms of 11 calls; ratio < 1: dkit's GPU kernel is faster")
        head = f"  {'case':<36} {'dkit gpu':>10} {'dkit cpu':>10} {'gpu/cpu':>8}"
        print(head + (f" {'tv gpu':>10} {'dkit/tv':>8}" if isinstance(tv, dict) else ""))
        for _, name, _, g_ms, _, c_ms in rows:
            g_ms, c_ms = float(g_ms), float(c_ms)
            ratio = g_ms / c_ms if c_ms else float("nan")  # DKIT_BENCH_GPU_ONLY: no CPU timing
            line = f"  {name:<36} {g_ms:>10.3f} {c_ms:>10.3f} {ratio:>8.3f}"
            if isinstance(tv, dict) and name in tv:
                line += f" {tv[name]:>10.3f} {g_ms / tv[name]:>8.3f}"
            print(line)
        if not isinstance(tv, dict):
            print(f"  torchvision on the GPU: not compared: {tv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
