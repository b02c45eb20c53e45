#!/usr/bin/env python3
"""Where dkit's GPU time goes: a host-side breakdown of a tiny call, and a workload for Nsight Compute.

    python3 bench/profile_gpu.py calls      # torch.profiler + cProfile of the tiny roi_align call
    ncu -k regex:'ra_gpu|roi_align|nms' python3 bench/profile_gpu.py kernels

`calls`: 200 tiny roi_align calls ([1, 4, 8, 8], one box) of dkit and of torchvision on CUDA
tensors under torch.profiler (CPU and CUDA activity), each table sorted by host time: the rows
name the runtime calls (launches, synchronisations, copies, allocations) that a call makes.
Then cProfile of dkit's calls alone, for the Python frames among them.

`kernels`: each GPU case of bench_gpu_calls.py once, dkit's then torchvision's, after one warm-up,
so that a profiler filtered on kernel names sees one launch of each kernel per case.
"""

import cProfile
import pstats
import sys

from _dkit_path import use_checkout

use_checkout()

import torch  # noqa: E402
import torchvision  # noqa: E402

from dkit.compat import torchvision as dtv  # noqa: E402


def calls():
    from torch.profiler import ProfilerActivity, profile

    xs = torch.rand(1, 4, 8, 8, device="cuda")
    rs = torch.tensor([[0.0, 1.0, 1.0, 6.0, 6.0]], device="cuda")
    for name, fn in (("dkit", dtv.roi_align), ("torchvision", torchvision.ops.roi_align)):
        for _ in range(20):
            fn(xs, rs, 2, 1.0, 2, True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(200):
                fn(xs, rs, 2, 1.0, 2, True)
            torch.cuda.synchronize()
        print(f"== {name}: 200 tiny roi_align calls")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        dtv.roi_align(xs, rs, 2, 1.0, 2, True)
    torch.cuda.synchronize()
    pr.disable()
    print("== dkit: cProfile of 2000 tiny calls")
    pstats.Stats(pr).sort_stats("tottime").print_stats(20)


def kernels():
    sys.argv = sys.argv[:1]
    import bench_gpu_calls as b

    class Once:
        def median_ms(self, fn):
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("profiled")
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            return 1.0

        reps = 4

    for case, *_ in b.rows(Once(), torch.device("cuda"), small=False):
        print("ran", case, flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "calls"
    if not torch.cuda.is_available():
        print("profile_gpu: skipped: torch has no CUDA device here")
        sys.exit(0)
    {"calls": calls, "kernels": kernels}[what]()
