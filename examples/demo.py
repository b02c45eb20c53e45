#!/usr/bin/env python3
"""dkit demo: RoIAlign on a detection-style workload, on synthetic data.

One feature-pyramid level (stride 8 of two 800x1088 images: [2, 256, 100, 136]) and ~1000
proposal boxes are pooled to 7x7 bins, as a Mask R-CNN box head does, then the gradient flows back
to the features. dkit does both through torch.autograd; torchvision's time is shown alongside when
it is installed. The dkit.profile() table at the end shows what the dispatcher ran.

Works with torch (forward + backward) or with NumPy alone (forward only).

    /usr/bin/python3 examples/demo.py
"""

import os
import statistics
import sys
import sysconfig
import time

# The checkout's dkit where `make python` built it for this Python, else the installed one.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("DKIT_IMPORT_INSTALLED") != "1" and os.path.isfile(
    os.path.join(_ROOT, "dkit", "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
):
    sys.path.insert(0, _ROOT)

import dkit  # noqa: E402

N, C, H, W = 2, 256, 100, 136  # P3 of an 800x1088 batch of two
STRIDE = 8
NUM_BOXES = 1000
OUTPUT = 7
SAMPLING = 2
REPS = 5


def proposals(rng, k):
    """Detector-like boxes (x1, y1, x2, y2) in image pixels, 32-400 px, some past the borders."""
    ih, iw = H * STRIDE, W * STRIDE
    size = 32.0 * (400.0 / 32.0) ** rng.random((k, 2))
    cx, cy = rng.random(k) * iw, rng.random(k) * ih
    batch = rng.integers(0, N, k)
    return batch, cx - size[:, 0] / 2, cy - size[:, 1] / 2, cx + size[:, 0] / 2, cy + size[:, 1] / 2


def timed(fn, reps=REPS):
    fn()  # warm up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_torch(np, rng):
    import torch

    try:
        from torchvision.ops import roi_align as tv_roi_align
    except ImportError:
        tv_roi_align = None

    batch, x1, y1, x2, y2 = proposals(rng, NUM_BOXES)
    rois = torch.from_numpy(np.stack([batch, x1, y1, x2, y2], 1).astype(np.float32))
    features = torch.from_numpy(rng.standard_normal((N, C, H, W)).astype(np.float32)).requires_grad_()
    grad = torch.randn(NUM_BOXES, C, OUTPUT, OUTPUT)
    scale = 1.0 / STRIDE

    def dkit_forward():
        return dkit.ops.roi_align(features, rois, OUTPUT, scale, SAMPLING, "avg", True)

    def tv_forward():
        return tv_roi_align(features, rois, OUTPUT, scale, SAMPLING, True)

    def backward_of(forward):
        def run():
            features.grad = None
            y = forward()
            t0 = time.perf_counter()
            y.backward(grad)
            return time.perf_counter() - t0

        return run

    print(f"features [{N}, {C}, {H}, {W}] float32 (stride {STRIDE}), {NUM_BOXES} boxes -> "
          f"[{NUM_BOXES}, {C}, {OUTPUT}, {OUTPUT}], sampling_ratio {SAMPLING}, aligned=True, "
          f"dkit on {dkit.get_num_threads()} thread(s)\n(dkit.set_num_threads(n) sets that; "
          "by default dkit follows OpenMP's default, which torch.set_num_threads(n) sets too)")  # fmt: skip
    with torch.no_grad():
        t_fwd = timed(dkit_forward)
    t_bwd = statistics.median(backward_of(dkit_forward)() * 1e3 for _ in range(REPS))
    rows = [("dkit", t_fwd, t_bwd)]
    if tv_roi_align is not None:
        with torch.no_grad():
            tv_fwd = timed(tv_forward)
            diff = (dkit_forward() - tv_forward()).abs().max().item()
        tv_bwd = statistics.median(backward_of(tv_forward)() * 1e3 for _ in range(REPS))
        rows.append(("torchvision", tv_fwd, tv_bwd))
    print(f"\n{'':12s} {'forward':>10s} {'backward':>10s}")
    for name, f, b in rows:
        print(f"{name:12s} {f:8.2f} ms {b:8.2f} ms")
    if tv_roi_align is not None:
        print(f"{'dkit / tv':12s} {t_fwd / tv_fwd:9.2f}x {t_bwd / tv_bwd:9.2f}x   (max |difference| {diff:.1e})")
    else:
        print("(torchvision is not installed: dkit times only)")

    with dkit.profile() as prof:
        features.grad = None
        y = dkit_forward()
        y.backward(grad)
    return prof, "one training step (forward + backward)"


def run_numpy(np, rng):
    batch, x1, y1, x2, y2 = proposals(rng, NUM_BOXES)
    rois = np.stack([batch, x1, y1, x2, y2], 1).astype(np.float32)
    features = rng.standard_normal((N, C, H, W)).astype(np.float32)
    print(f"features [{N}, {C}, {H}, {W}] float32 NumPy array, {NUM_BOXES} boxes (torch not installed: forward only)")
    t = timed(lambda: dkit.ops.roi_align(features, rois, OUTPUT, 1.0 / STRIDE, SAMPLING, "avg", True))
    print(f"\ndkit forward  {t:8.2f} ms")
    with dkit.profile() as prof:
        dkit.ops.roi_align(features, rois, OUTPUT, 1.0 / STRIDE, SAMPLING, "avg", True)
    return prof, "one forward"


def main():
    import numpy as np

    dkit.show_config()
    print()
    rng = np.random.default_rng(0)
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    prof, what = run_torch(np, rng) if have_torch else run_numpy(np, rng)

    print(f"\ndkit.profile() of {what}:\n")
    print(prof)
    print("\nthe dispatch table that served it:\n")
    print(dkit.dispatch.table("roi_align_forward"))


if __name__ == "__main__":
    main()
