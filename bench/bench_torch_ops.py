#!/usr/bin/env python3
"""What calling dkit through torch's dispatcher costs: the routes of one tiny roi_align call, as
ratios to torchvision's, and the price of registering dkit's ops with torch.

    /usr/bin/python3 bench/bench_torch_ops.py [--reps 7] [--calls 2000]

The call is the tiny one of bench_roi_align.py ([1, 4, 8, 8] input, one box, 2x2 output, one
thread), where per-call overhead is the whole cost:

  torchvision            torchvision.ops.roi_align: Python checks, then its C++ kernel through
                         torch's dispatcher (torch.ops.torchvision.roi_align)
  tv C++ op              torch.ops.torchvision.roi_align called directly: what a C++ kernel
                         registered with torch's dispatcher costs (the "C++ bridge" of
                         Note [dkit ops in torch]: a boxed C++ kernel would cost about this plus
                         the boxing)
  dkit eager             dkit.ops.roi_align, the eager path (Note [The fast path])
  dkit torch op          torch.ops.dkit.roi_align: torch's dispatcher, dkit's kernel holder,
                         then dkit.ops.roi_align (the route of TorchScript)
  dkit scripted          torch.jit.script(dkit.compat.torchvision.roi_align)
  torchvision scripted   torch.jit.script(torchvision.ops.roi_align)

Each rep times --calls calls of every route in turn on the same tensors; the median per-call
time of --reps reps is reported. Registration: `import dkit` after torch in a fresh process,
with the time of dkit's sync() alone (the extension and the GPU backends load either way).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

from _dkit_path import child_env, use_checkout

use_checkout()

# dkit before torch, with dkit's import hook taken out, so that the registration can be timed
# alone: the extension, the op modules and torch are loaded before the clock starts.
_REGISTRATION = r"""
import sys, time
import dkit, dkit._C, dkit.ops
sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "name", None) != "torch"]
import torch, torch.library, torch.fx
t0 = time.perf_counter()
import dkit._torch_library as bridge
t1 = time.perf_counter()
bridge.sync()
t2 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.3f} {(t2 - t1) * 1e3:.3f}")
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()

    import torch
    import torchvision

    import dkit
    from dkit.compat import torchvision as dk_tv

    torch.set_num_threads(1)
    dkit.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1, 4, 8, 8, generator=g)
    rois = torch.tensor([[0.0, 1.0, 1.5, 6.0, 5.5]])
    tv_scripted = torch.jit.script(torchvision.ops.roi_align)
    dk_scripted = torch.jit.script(dk_tv.roi_align)
    tv_op, dk_op = torch.ops.torchvision.roi_align, torch.ops.dkit.roi_align
    routes = {
        "torchvision": lambda: torchvision.ops.roi_align(x, rois, 2, 1.0, 2, False),
        "tv C++ op": lambda: tv_op(x, rois, 1.0, 2, 2, 2, False),
        "dkit eager": lambda: dkit.ops.roi_align(x, rois, 2, 1.0, 2, "avg", False),
        "dkit torch op": lambda: dk_op(x, rois, [2, 2], 1.0, 2, "avg", False),
        "dkit scripted": lambda: dk_scripted(x, rois, 2, 1.0, 2, False),
        "torchvision scripted": lambda: tv_scripted(x, rois, 2, 1.0, 2, False),
    }
    ref = routes["torchvision"]()
    for name, fn in routes.items():  # the same numbers on every route
        if not torch.allclose(fn(), ref, atol=1e-5):
            sys.exit(f"bench_torch_ops: {name} differs from torchvision")
    times = {name: [] for name in routes}
    for _ in range(args.reps):
        for name, fn in routes.items():
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            times[name].append((time.perf_counter() - t0) / args.calls)
    base = statistics.median(times["torchvision"])
    print(f"tiny roi_align call, 1 thread, median of {args.reps} x {args.calls} calls")
    print(f"{'route':<22}{'per call':>12}{'ratio':>9}")
    for name in routes:
        t = statistics.median(times[name])
        print(f"{name:<22}{t * 1e6:>9.2f} us{t / base:>8.2f}x")

    env = child_env()
    samples = []
    for _ in range(3):
        # from bench/, so that `-c`'s first path entry (the working directory) holds no dkit: the
        # child imports the one child_env() names
        r = subprocess.run([sys.executable, "-c", _REGISTRATION], env=env, capture_output=True, text=True, timeout=120,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
        if r.returncode != 0:
            sys.exit(f"bench_torch_ops: registration run failed: {r.stderr}")
        samples.append([float(v) for v in r.stdout.split()])
    ops = len(dkit.dispatch.ops()) + len(dkit.ops.__all__)
    load = statistics.median(s[0] for s in samples)
    sync = statistics.median(s[1] for s in samples)
    print(f"registration of {ops} torch ops: {load + sync:.3f} ms (bridge module {load:.3f} ms, sync() {sync:.3f} ms; "
          f"median of 3 processes)")


if __name__ == "__main__":
    main()
