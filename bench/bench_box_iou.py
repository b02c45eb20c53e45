#!/usr/bin/env python3
"""box overlaps: dkit against torchvision.ops (box_iou, generalized_box_iou, distance_box_iou,
complete_box_iou), as ratios (dkit time / torchvision time).

    /usr/bin/python3 bench/bench_box_iou.py [--n 4000] [--reps 3] [--threads 1,2] [--quick]

Every case pairs N x N random float32 boxes (detector-like: sizes 16 px to half of a 1333 x 800
image) into an [N, N] result, which both libraries allocate per call. Both run at each thread
count (torch.set_num_threads and dkit.set_num_threads; torchvision's functions are torch tensor
expressions, which use torch's intra-op threads), in one process, on the same tensors, taking
turns within each rep (as bench/bench_roi_align.py does; the median of --reps is reported).

Two measurements per case:
  warm         the call right after an untimed call of the same function (a loop calling the
               op back to back: caches and the allocator hold what the previous call left)
  interleaved  the call after other memory traffic, as a training step sees between two calls
               of a loss: 64 MB written and 64 MB read elsewhere, and a few allocations freed,
               so the boxes and the allocator's recent blocks are no longer in the caches

--quick runs N = 1000 with 2 reps, for the smoke test (tests/python/test_bench_box_iou.py).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _threads import set_threads as set_torch_and_dkit_threads

from _dkit_path import child_env, use_checkout

CASES = ("box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou")


def _boxes(torch, n, seed):
    g = torch.Generator().manual_seed(seed)
    wh = torch.exp(torch.rand(n, 2, generator=g) * torch.log(torch.tensor(400 / 16.0))) * 16
    cx, cy = torch.rand(n, generator=g) * 1333, torch.rand(n, generator=g) * 800
    return torch.stack([cx - wh[:, 0] / 2, cy - wh[:, 1] / 2, cx + wh[:, 0] / 2, cy + wh[:, 1] / 2], 1)


def worker(threads, reps, n):
    import torch
    import torchvision.ops as tvops

    use_checkout()
    import dkit

    b1, b2 = _boxes(torch, n, 0), _boxes(torch, n, 1)
    # the other memory traffic of a training step (Note in the module docstring: interleaved)
    big_w = torch.empty(16 * 2**20)
    big_r = torch.ones(16 * 2**20)

    def traffic():
        big_w.fill_(1.0)
        big_r.sum()
        for _ in range(4):
            torch.empty(2**20).fill_(0.0)

    def set_threads(t):
        set_torch_and_dkit_threads(torch, dkit, t)  # Note [Switching torch's threads] in _threads.py

    fns = {case: {"torchvision": getattr(tvops, case), "dkit": getattr(dkit.ops, case)} for case in CASES}
    results = {"n": n, "threads": threads, "reps": reps, "maxdiff": {}, "cases": {}}
    set_threads(max(threads))
    for case in CASES:
        want = fns[case]["torchvision"](b1, b2)
        got = fns[case]["dkit"](b1, b2)
        results["maxdiff"][case] = (got - want).abs().nan_to_num(0.0).max().item()
    times = {}
    for _ in range(reps):
        for t in threads:
            set_threads(t)
            for case in CASES:
                for lib, fn in fns[case].items():
                    fn(b1, b2)  # warm
                    t0 = time.perf_counter()
                    fn(b1, b2)
                    warm = time.perf_counter() - t0
                    traffic()
                    t0 = time.perf_counter()
                    fn(b1, b2)
                    inter = time.perf_counter() - t0
                    times.setdefault((case, t, "warm", lib), []).append(warm * 1e3)
                    times.setdefault((case, t, "interleaved", lib), []).append(inter * 1e3)
    for (case, t, mode, lib), v in times.items():
        results["cases"].setdefault(case, {}).setdefault(str(t), {}).setdefault(mode, {})[lib] = statistics.median(v)
    print(json.dumps(results))


def run_worker(threads, reps, n):
    env = dict(os.environ, OMP_NUM_THREADS=str(max(threads)))
    env.setdefault("OMP_PROC_BIND", "true")  # Note [Binding] in bench/bench_roi_align.py
    env.setdefault("OMP_PLACES", "cores")
    env = child_env(env)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", ",".join(map(str, threads)),
           "--reps", str(reps), "--n", str(n)]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit("benchmark worker failed")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4000, help="boxes per set (the result is N x N)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement (median)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--quick", action="store_true", help="N = 1000, 2 reps: a smoke run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    if args.quick:
        args.n, args.reps = 1000, min(args.reps, 2)
    if args.worker:
        worker(threads, args.reps, args.n)
        return
    load = os.getloadavg()[0]
    res = run_worker(threads, args.reps, args.n)
    n = res["n"]
    print(f"box overlaps: dkit vs torchvision.ops, float32 boxes {n} x {n} -> [{n}, {n}] result; median of "
          f"{res['reps']} reps; ratio = dkit / torchvision (< 1: dkit is faster)")  # fmt: skip
    print(f"load average before / after: {load:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print()
    head = ("case", "threads", "measure", "torchvision", "dkit", "ratio", "max |diff|")
    rows = []
    for case in CASES:
        for t in threads:
            for mode in ("warm", "interleaved"):
                r = res["cases"][case][str(t)][mode]
                tv, dk = r["torchvision"], r["dkit"]
                rows.append((case, str(t), mode, f"{tv:.2f} ms", f"{dk:.2f} ms", f"{dk / tv:.3f}x",
                             f"{res['maxdiff'][case]:.1e}"))  # fmt: skip
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(r[i].ljust(widths[i]) if i < 3 else r[i].rjust(widths[i]) for i in range(len(r)))  # noqa: E731
    print(line(head))
    print("-" * len(line(head)))
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
