#!/usr/bin/env python3
"""sigmoid_focal_loss and softmax_focal_loss: dkit against torchvision.ops.sigmoid_focal_loss (a
Python composite of torch ops) and against PyTorch references written from MMCV's definitions,
in one process, on the same tensors.

    /usr/bin/python3 bench/bench_focal_loss.py [--reps 5] [--threads 1,2] [--quick]

Cases (float32, RetinaNet's shape: 100,000 anchors x 80 classes; quick: 10,000 x 80; gamma 2,
alpha 0.25):
  forward           torchvision's loss of probability targets (1% positives), reduction "sum"
  forward+backward  the same with grad, then backward: a training step's pair
  interleaved       forward+backward after 64 MB written and 64 MB read elsewhere and a few
                    allocations, as a training step's other ops leave the caches
  mmcv sigmoid      class-index targets (background = 80), reduction "mean", forward+backward,
                    against torch ops computing MMCV's definition (one-hot targets, the
                    composite's steps)
  mmcv softmax      softmax_focal_loss, forward+backward, against log_softmax, gather and the
                    modulating factor in torch ops
Each rep runs every (case, thread count, library) once, in turn; the median of --reps is
printed as time and as the ratio dkit / reference (below 1: dkit is faster). torch.set_num_threads
and dkit.set_num_threads set the counts. The results are checked close before timing.
"""

import argparse

from _threads import set_threads
from _turns import print_ratios, take_turns

from _dkit_path import use_checkout

use_checkout()  # the checkout's dkit where it is built (bench/_dkit_path.py), before importing it

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision.ops as tvops  # noqa: E402

import dkit  # noqa: E402

GAMMA, ALPHA = 2.0, 0.25


def _case(quick, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c = (10_000, 80) if quick else (100_000, 80)
    x = torch.randn(n, c, generator=g) * 3
    targets = (torch.rand(n, c, generator=g) < 0.01).float()
    labels = torch.randint(0, c + 1, (n,), generator=g)  # c: background
    soft_labels = torch.randint(0, c, (n,), generator=g)
    return x, targets, labels, soft_labels


def mmcv_sigmoid_reference(x, labels, gamma=GAMMA, alpha=ALPHA):
    """MMCV's sigmoid_focal_loss (class indices, reduction 'mean': over N) in torch ops."""
    c = x.shape[1]
    t = F.one_hot(labels, c + 1)[:, :c].to(x.dtype)
    p = x.sigmoid()
    pt = (1 - p) * t + p * (1 - t)
    w = (alpha * t + (1 - alpha) * (1 - t)) * pt.pow(gamma)
    return (F.binary_cross_entropy_with_logits(x, t, reduction="none") * w).sum() / x.shape[0]


def mmcv_softmax_reference(x, labels, gamma=GAMMA, alpha=ALPHA):
    """MMCV's softmax_focal_loss (reduction 'mean': over N) in torch ops."""
    logp = x.log_softmax(1).gather(1, labels[:, None]).squeeze(1)
    return (-alpha * (1 - logp.exp()).pow(gamma) * logp).sum() / x.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    x, targets, labels, soft_labels = _case(args.quick)

    def tv_sigmoid(xx):
        return tvops.sigmoid_focal_loss(xx, targets, ALPHA, GAMMA, "sum")

    def dk_sigmoid(xx):
        return dkit.ops.sigmoid_focal_loss(xx, targets, ALPHA, GAMMA, "sum")

    def dk_mmcv_sigmoid(xx):
        return dkit.ops.sigmoid_focal_loss(xx, labels, ALPHA, GAMMA, "mean")

    def dk_softmax(xx):
        return dkit.ops.softmax_focal_loss(xx, soft_labels, GAMMA, ALPHA, None, "mean")

    pairs = {
        "forward": (tv_sigmoid, dk_sigmoid),
        "forward+backward": (tv_sigmoid, dk_sigmoid),
        "interleaved": (tv_sigmoid, dk_sigmoid),
        "mmcv sigmoid": (lambda xx: mmcv_sigmoid_reference(xx, labels), dk_mmcv_sigmoid),
        "mmcv softmax": (lambda xx: mmcv_softmax_reference(xx, soft_labels), dk_softmax),
    }
    for name, (ref, mine) in pairs.items():  # the same values (and gradients) before timing
        xa, xb = x.detach().requires_grad_(), x.detach().requires_grad_()
        a, b = ref(xa), mine(xb)
        a.backward(), b.backward()
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-7, msg=name)

    def run(name, f):
        if name == "forward":
            return lambda: f(x)

        def train():
            xg = x.detach().requires_grad_()
            f(xg).backward()

        return train

    cases = [(name, dict(zip(("reference", "dkit"), (run(name, f) for f in fs))), name == "interleaved")
             for name, fs in pairs.items()]  # fmt: skip
    threads = [int(t) for t in args.threads.split(",")]
    # Note [Switching torch's threads] in _threads.py
    times = take_turns(cases, args.reps, threads, lambda t: set_threads(torch, dkit, t))
    print(f"focal losses, logits {x.shape[0]}x{x.shape[1]}, float32, gamma {GAMMA}, alpha {ALPHA}, "
          f"median of {args.reps}")  # fmt: skip
    print("reference: torchvision.ops.sigmoid_focal_loss; mmcv rows: torch ops from MMCV's definitions")
    print_ratios(times, cases, threads, "reference")


if __name__ == "__main__":
    main()
