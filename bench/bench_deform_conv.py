#!/usr/bin/env python3
"""deform_conv2d: dkit against torchvision.ops.deform_conv2d, in one process, on the same tensors.

    /usr/bin/python3 bench/bench_deform_conv.py [--reps 5] [--threads 1,2] [--quick]

Case (float32, issue 22's): input [8, 64, 64, 64] (quick: [2, 16, 16, 16]), a 3 x 3 kernel,
64 output channels (quick: 16), padding 1, one offset group, with mask and bias, offsets of a
few pixels:
  forward          the output, what inference runs
  forward+backward a training step's pair: forward with grad, then the backward of a random
                   gradient into all five gradients
  interleaved      forward+backward after 64 MB written and 64 MB read elsewhere and a few
                   allocations, as a training step's other ops leave the caches and the allocator
Each rep runs every (thread count, library) once, in turn; the median of --reps is printed as
time and as the ratio dkit / torchvision (below 1: dkit is faster). torch.set_num_threads and
dkit.set_num_threads set the counts. The results are checked close before timing.

Then the share of dkit's forward+backward spent in dk_sgemm (the core's matrix product, called
here through ctypes on products of the kernel's own sizes: Note [Deformable convolution on a
CPU]) and, the rest, in sampling, scattering and storing, one thread.
"""

import argparse
import ctypes
import os
import statistics

from _threads import set_threads
from _turns import print_ratios, take_turns, timed

from _dkit_path import use_checkout

use_checkout()  # the checkout's dkit where it is built (bench/_dkit_path.py), before importing it

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision.ops as tvops  # noqa: E402

import dkit  # noqa: E402


def _case(quick, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c, hw, cout = (2, 16, 16, 16) if quick else (8, 64, 64, 64)
    x = torch.randn(n, c, hw, hw, generator=g)
    off = torch.randn(n, 18, hw, hw, generator=g) * 2
    mask = torch.rand(n, 9, hw, hw, generator=g)
    w = torch.randn(cout, c, 3, 3, generator=g) * 0.1
    b = torch.randn(cout, generator=g)
    return x, off, mask, w, b


def _sgemm():
    """dk_sgemm from the library dkit loaded (Note [dk_sgemm's contract])."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(dkit.__file__), "libdkit.so"))
    f = lib.dk_sgemm
    i64, fp = ctypes.c_int64, ctypes.POINTER(ctypes.c_float)
    f.argtypes = [ctypes.c_bool, ctypes.c_bool, i64, i64, i64, ctypes.c_float, fp, i64, fp, i64, ctypes.c_float, fp,
                  i64]  # fmt: skip
    f.restype = None
    return f


def _gemm_seconds(n, cin, cout, p, reps):
    """One thread's dk_sgemm time for a forward+backward of n images of p output positions: per
    image and block (the kernel's blocks: columns of cin 9 x block floats under 8 MiB), the
    forward's W x columns, the backward's W^T x g and columns x g^T (g transposed first)."""
    f = _sgemm()
    k = cin * 9
    fit = max((8 << 20) // (k * 4), 1)
    blocks = -(-p // fit)
    block = -(-p // blocks)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((cout, k), dtype=np.float32)
    col = rng.standard_normal((k, block), dtype=np.float32)
    g = rng.standard_normal((cout, block), dtype=np.float32)
    gt = np.ascontiguousarray(g.T)
    out = np.empty((cout, block), np.float32)
    gcol = np.empty((k, block), np.float32)
    gw = np.zeros((k, cout), np.float32)

    def ptr(a):
        return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    def one():
        f(False, False, cout, block, k, 1.0, ptr(w), k, ptr(col), block, 0.0, ptr(out), block)
        f(True, False, k, block, cout, 1.0, ptr(w), k, ptr(g), block, 0.0, ptr(gcol), block)
        f(False, False, k, cout, block, 1.0, ptr(col), block, ptr(gt), cout, 1.0, ptr(gw), cout)

    one()
    best = min(timed(one) for _ in range(reps))
    return best * n * blocks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    x, off, mask, w, b = _case(args.quick)
    gout = torch.randn(x.shape[0], w.shape[0], x.shape[2], x.shape[3])
    libs = {"torchvision": tvops.deform_conv2d, "dkit": dkit.ops.deform_conv2d}
    ref = libs["torchvision"](x, off, w, b, 1, 1, 1, mask)
    torch.testing.assert_close(libs["dkit"](x, off, w, b, 1, 1, 1, mask), ref, rtol=1e-4, atol=1e-3)

    def forward(f):
        return lambda: f(x, off, w, b, 1, 1, 1, mask)

    def training(f):
        def run():
            ts = [t.detach().requires_grad_() for t in (x, off, w, b, mask)]
            f(ts[0], ts[1], ts[2], ts[3], 1, 1, 1, ts[4]).backward(gout)

        return run

    cases = [("forward", forward, False), ("forward+backward", training, False), ("interleaved", training, True)]
    cases = [(name, {lib: make(f) for lib, f in libs.items()}, disturb) for name, make, disturb in cases]
    threads = [int(t) for t in args.threads.split(",")]
    # Note [Switching torch's threads] in _threads.py
    times = take_turns(cases, args.reps, threads, lambda t: set_threads(torch, dkit, t))
    shape = "x".join(str(s) for s in x.shape)
    print(f"deform_conv2d, input {shape}, 3x3, {w.shape[0]} out channels, padding 1, with mask and bias, "
          f"float32, median of {args.reps}")  # fmt: skip
    print_ratios(times, cases, threads, "torchvision")
    if 1 in threads:
        total = statistics.median(times[("forward+backward", 1, "dkit")])
        gemm = _gemm_seconds(x.shape[0], x.shape[1], w.shape[0], x.shape[2] * x.shape[3], max(args.reps, 1))
        print(f"dkit forward+backward, 1 thread: dk_sgemm {gemm * 1e3:.3f} ms ({100 * gemm / total:.0f}%), "
              f"sampling and the rest {(total - gemm) * 1e3:.3f} ms ({100 * (total - gemm) / total:.0f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
