#!/usr/bin/env python3
"""roi_align: dkit against torchvision.ops.roi_align, as ratios (dkit time / torchvision time).

    /usr/bin/python3 bench/bench_roi_align.py [--reps 7] [--threads 1,2] [--quick]

Cases (float32, aligned=True, spatial_scale 0.25, 7x7 output, 1024 random boxes on an
[2, 256, 200, 272] feature map, i.e. an 800x1088 image at stride 4):
  forward sr=2     forward, sampling_ratio 2
  backward sr=2    backward only (grad w.r.t. input through torch.autograd; the forward that
                   builds the graph is not timed)
  forward sr=0     forward, adaptive sampling (MMCV 0 == torchvision <= 0)
  tiny call        [1, 4, 8, 8] input, one box, 2x2 output: per-call time of the Python entry
                   point with torch tensors, i.e. mostly overhead (target: ratio <= 0.5)

Thread counts: torch and dkit share libgomp here, and OpenMP reads OMP_NUM_THREADS once, at
start-up; so each thread count runs in its own process with OMP_NUM_THREADS=n, and the worker
also calls torch.set_num_threads(n) (which sets the shared OpenMP default for dkit too), then
checks that dkit reports n threads. Within a worker both libraries see the same tensors, warmed
up, interleaved rep by rep, and the median of --reps repetitions is reported.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------
# Worker: one thread count, one process


def _boxes(torch, k, n, height, width, spatial_scale, seed=0):
    g = torch.Generator().manual_seed(seed)
    ih, iw = height / spatial_scale, width / spatial_scale
    # Detector-like proposals: sizes from 16 px to half the image, centres anywhere.
    wh = torch.exp(torch.empty(k, 2).uniform_(0, 1, generator=g) * (torch.log(torch.tensor(min(ih, iw) / 2 / 16.0)))) * 16
    cx = torch.rand(k, generator=g) * iw
    cy = torch.rand(k, generator=g) * ih
    idx = torch.randint(0, n, (k,), generator=g).float()
    return torch.stack([idx, cx - wh[:, 0] / 2, cy - wh[:, 1] / 2, cx + wh[:, 0] / 2, cy + wh[:, 1] / 2], 1)


def _interleaved(pairs, reps, setup=None):
    """Median ms of each fn in pairs {name: fn}, alternating them rep by rep (fair under noise)."""
    times = {name: [] for name in pairs}
    for _ in range(reps):
        for name, fn in pairs.items():
            state = setup() if setup else None
            t0 = time.perf_counter()
            fn(state)
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def worker(threads, reps, quick):
    import torch

    sys.path.insert(0, ROOT)
    import dkit
    from dkit import _C

    torch.set_num_threads(threads)
    got = _C.config()["openmp_max_threads"]
    if got != threads:
        raise SystemExit(f"dkit runs {got} OpenMP threads, wanted {threads}")
    try:
        from torchvision.ops import roi_align as tv_roi_align
    except ImportError:
        tv_roi_align = None

    n, c, h, w = (2, 64, 100, 136) if quick else (2, 256, 200, 272)
    k, scale, out = (256 if quick else 1024), 0.25, 7
    torch.manual_seed(0)
    x = torch.randn(n, c, h, w)
    rois = _boxes(torch, k, n, h, w, scale)
    results = {"threads": threads, "shape": [n, c, h, w], "boxes": k}

    def dk(sr):
        return lambda _: dkit.ops.roi_align(x, rois, out, scale, sr, "avg", True)

    def tv(sr):
        return lambda _: tv_roi_align(x, rois, out, scale, sr, True)

    for sr in (2, 0):
        fns = {"dkit": dk(sr)}
        if tv_roi_align:
            fns["torchvision"] = tv(sr)
            diff = (fns["dkit"](None) - fns["torchvision"](None)).abs().max().item()
            results[f"forward sr={sr} maxdiff"] = diff
        for f in fns.values():  # warm up
            f(None)
        results[f"forward sr={sr}"] = _interleaved(fns, reps)

    # backward only: build the graph outside the timed region
    g = torch.randn(k, c, out, out)
    xr = x.clone().requires_grad_()

    def graph(fn):
        def setup():
            xr.grad = None
            return fn(xr, rois, out, scale, 2, True)

        return setup

    def run_backward(y):
        y.backward(g)

    dk_fwd = lambda t, r, o, s, sr, a: dkit.ops.roi_align(t, r, o, s, sr, "avg", a)  # noqa: E731
    setups = {"dkit": graph(dk_fwd)}
    if tv_roi_align:
        setups["torchvision"] = graph(tv_roi_align)
    times = {name: [] for name in setups}
    for name, setup in setups.items():  # warm up
        run_backward(setup())
    if tv_roi_align:
        setups["torchvision"]().backward(g)
        ref = xr.grad.clone()
        setups["dkit"]().backward(g)
        results["backward sr=2 maxdiff"] = (xr.grad - ref).abs().max().item()
    for _ in range(reps):
        for name, setup in setups.items():
            y = setup()
            t0 = time.perf_counter()
            run_backward(y)
            times[name].append((time.perf_counter() - t0) * 1e3)
    results["backward sr=2"] = {name: statistics.median(t) for name, t in times.items()}

    # tiny call: per-call time, from Python, torch tensors, no grad
    if threads == 1:
        xt = torch.rand(1, 4, 8, 8)
        bt = torch.tensor([[0.0, 1.0, 1.0, 5.0, 5.0]])
        number = 2000 if quick else 20000
        fns = {"dkit": lambda: dkit.ops.roi_align(xt, bt, 2)}
        if tv_roi_align:
            fns["torchvision"] = lambda: tv_roi_align(xt, bt, 2)
        per_call = {name: [] for name in fns}
        for name, f in fns.items():
            for _ in range(number // 10):
                f()
        for _ in range(max(reps, 5)):
            for name, f in fns.items():
                t0 = time.perf_counter()
                for _ in range(number):
                    f()
                per_call[name].append((time.perf_counter() - t0) / number * 1e3)
        results["tiny call"] = {name: statistics.median(t) for name, t in per_call.items()}
    print(json.dumps(results))


# ------------------------------------------------------------------------------------------
# Driver


def run_worker(threads, reps, quick):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(threads), "--reps", str(reps)]
    if quick:
        cmd.append("--quick")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"worker with {threads} thread(s) failed")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _fmt_ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.2f} us" if v < 0.1 else f"{v:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per measurement (median)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--quick", action="store_true", help="smaller problem, for a smoke run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.worker:
        worker(thread_counts[0], args.reps, args.quick)
        return

    load_before = os.getloadavg()[0]
    runs = {t: run_worker(t, args.reps, args.quick) for t in thread_counts}
    first = runs[thread_counts[0]]
    n, c, h, w = first["shape"]
    print(f"roi_align: dkit vs torchvision.ops.roi_align, float32 input [{n}, {c}, {h}, {w}], {first['boxes']} boxes,")
    print("spatial_scale 0.25, 7x7 output, aligned=True; median of", args.reps, "reps; ratio = dkit / torchvision")
    print("(< 1: dkit is faster). Speedup = dkit time at 1 thread / dkit time at this thread count.")
    print(f"load average before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs "
          "(other processes make the multi-thread rows noisy)")
    print()
    head = ("case", "threads", "torchvision", "dkit", "ratio", "dkit speedup", "max |diff|")
    rows = []
    for case in ("forward sr=2", "backward sr=2", "forward sr=0", "tiny call"):
        base = runs[thread_counts[0]].get(case, {}).get("dkit")
        for t in thread_counts:
            res = runs[t].get(case)
            if res is None:
                continue
            tv, dk = res.get("torchvision"), res["dkit"]
            ratio = f"{dk / tv:.2f}x" if tv else "-"
            speedup = f"{base / dk:.2f}x" if base and t != thread_counts[0] else ""
            diff = runs[t].get(case + " maxdiff")
            rows.append((case, str(t), _fmt_ms(tv), _fmt_ms(dk), ratio, speedup, f"{diff:.1e}" if diff is not None else ""))
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i]) for i in range(len(r)))  # noqa: E731
    print(line(head))
    print("-" * len(line(head)))
    for r in rows:
        print(line(r))
    tiny = first.get("tiny call", {})
    if tiny.get("torchvision"):
        verdict = "met" if tiny["dkit"] <= 0.5 * tiny["torchvision"] else "NOT met"
        print(f"\ntiny-call target (dkit <= 0.5x torchvision per call): {verdict} "
              f"({tiny['dkit'] * 1e3:.2f} us vs {tiny['torchvision'] * 1e3:.2f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
