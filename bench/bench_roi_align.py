#!/usr/bin/env python3
"""roi_align: dkit against torchvision.ops.roi_align, as ratios (dkit time / torchvision time).

    /usr/bin/python3 bench/bench_roi_align.py [--reps 7] [--threads 1,2] [--quick]

Cases (float32, aligned=True, spatial_scale 0.25, 7x7 output, 1024 random boxes on an
[2, 256, 200, 272] feature map, i.e. an 800x1088 image at stride 4):
  forward sr=2     forward, sampling_ratio 2
  backward sr=2    backward only (grad w.r.t. input through torch.autograd; the forward that
                   builds the graph is not timed)
  forward sr=0     forward, adaptive sampling (MMCV 0 == torchvision <= 0)
  forward sr=2 in a step
                   forward sr=2, each timed call right after `z = x * 2; del z` (an elementwise
                   op over the whole input, as other layers run between two roi_align calls of a
                   training step: the input and the allocator's cache are cold); the rows above
                   take turns with torchvision, so each of their calls follows the other
                   library's call on the same tensors
  scaling          the same three, dkit alone, at 1 thread and at the largest count: end to end
                   (dkit.ops, the output allocated by torch on every call) and kernel (dkit._C.ops
                   into outputs allocated once beforehand; torchvision has no such entry point),
                   each next to the machine's own ceiling at the time (Note [Machine ceiling] in
                   _scaling.py)
  tiny call        [1, 4, 8, 8] input, one box, 2x2 output: per-call time of the Python entry
                   point with torch tensors, i.e. mostly overhead (target: ratio <= 0.5); also
                   per entry point (dkit.ops, dkit.compat.torchvision, dkit.compat.mmcv)

Thread counts: one worker process starts with OMP_NUM_THREADS = the largest count, OpenMP
threads bound to cores (Note [Binding]); before each timed call it sets dkit's count with
dkit.set_num_threads(n). Within each rep every (thread count, library) pair runs once, in turn, on
the same warmed-up tensors, so a shared machine's slow drifts fall on all of them alike; the
median of --reps repetitions is reported. (Separate processes per thread count, as this script
did first, put minutes between the 1- and 2-thread runs, and their ratio moved from 1.3x to
1.8x with the other tenants of the host.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _scaling
from _scaling import fmt_ms, table

from _dkit_path import use_checkout

# ------------------------------------------------------------------------------------------
# Worker: one thread count, one process


def _boxes(torch, k, n, height, width, spatial_scale, seed=0):
    g = torch.Generator().manual_seed(seed)
    ih, iw = height / spatial_scale, width / spatial_scale
    # Detector-like proposals: sizes from 16 px to half the image, centres anywhere.
    wh = torch.exp(torch.empty(k, 2).uniform_(0, 1, generator=g) * torch.log(torch.tensor(min(ih, iw) / 2 / 16.0))) * 16
    cx = torch.rand(k, generator=g) * iw
    cy = torch.rand(k, generator=g) * ih
    idx = torch.randint(0, n, (k,), generator=g).float()
    return torch.stack([idx, cx - wh[:, 0] / 2, cy - wh[:, 1] / 2, cx + wh[:, 0] / 2, cy + wh[:, 1] / 2], 1)


def _interleaved(fns, reps, threads, set_threads, setup=None):
    """Median ms of each fn in fns {name: fn} at each thread count, as {threads: {name: ms}}.
    Each rep runs every (thread count, fn) once, in turn, so slow drifts of a shared machine
    (other tenants, frequency) fall on all of them alike. With `setup`, fn(state) is timed
    after state = setup(name) (e.g. building the graph a backward runs)."""
    times = {(t, name): [] for t in threads for name in fns}
    for _ in range(reps):
        for t in threads:
            set_threads(t)
            for name, fn in fns.items():
                fn(setup(name) if setup else None)  # Note [Warm calls] in _scaling.py
                state = setup(name) if setup else None
                t0 = time.perf_counter()
                fn(state)
                times[(t, name)].append((time.perf_counter() - t0) * 1e3)
    return {t: {name: statistics.median(times[(t, name)]) for name in fns} for t in threads}


def _problem(torch, quick):
    """The benchmark's tensors, the same in every process that builds them."""
    n, c, h, w = (2, 64, 100, 136) if quick else (2, 256, 200, 272)
    k, scale, out = (256 if quick else 1024), 0.25, 7
    torch.manual_seed(0)
    x = torch.randn(n, c, h, w)
    g = torch.randn(k, c, out, out)  # grad_output for the backward cases
    rois = _boxes(torch, k, n, h, w, scale)
    return x, rois, g, scale, out


def _scaling_cases(torch, dkit, x, rois, g, scale, out):
    """dkit alone, as {name: (setup, run)}: run(setup()) is timed, setup is not (None: nothing).
    end to end = dkit.ops, allocating the output per call (from dkit's host output cache, Note
    [Host output cache] in csrc/cpu/dk_host_cache.h; backward: the graph is built by
    setup); kernel = dkit._C.ops into outputs allocated (and touched) once, dkit's work only.
    (A fresh output is first touched inside the timed call: on a VM that hands freed memory back
    to its host, bench/README.md, that is host work no thread count speeds up.)"""
    fwd, bwd = dkit._C.ops.roi_align_forward, dkit._C.ops.roi_align_backward
    fwd_out = torch.zeros(rois.shape[0], x.shape[1], out, out)
    grad_in = torch.zeros_like(x)
    xr = x.clone().requires_grad_()

    def graph():
        xr.grad = None
        return dkit.ops.roi_align(xr, rois, out, scale, 2, "avg", True)

    return {
        "end to end forward sr=2": (None, lambda _: dkit.ops.roi_align(x, rois, out, scale, 2, "avg", True)),
        "end to end backward sr=2": (graph, lambda y: y.backward(g)),
        "end to end forward sr=0": (None, lambda _: dkit.ops.roi_align(x, rois, out, scale, 0, "avg", True)),
        "kernel forward sr=2": (None, lambda _: fwd(x, rois, fwd_out, None, None, out, out, scale, 2, 1, True)),
        "kernel backward sr=2": (None, lambda _: bwd(g, rois, None, None, grad_in, out, out, scale, 2, 1, True)),
        "kernel forward sr=0": (None, lambda _: fwd(x, rois, fwd_out, None, None, out, out, scale, 0, 1, True)),
    }  # fmt: skip


def worker(threads, reps, quick):
    cores = sorted(os.sched_getaffinity(0))  # before libgomp binds this thread (Note [Binding])
    import torch

    use_checkout()
    import dkit
    from dkit import _C

    def set_threads(t):
        dkit.set_num_threads(t)  # dkit's own count; torch keeps OMP_NUM_THREADS (Note [Binding])
        got = dkit.get_num_threads()
        if got != t:
            raise SystemExit(f"dkit runs {got} threads, wanted {t}")

    try:
        from torchvision.ops import roi_align as tv_roi_align
    except ImportError:
        tv_roi_align = None

    x, rois, g, scale, out = _problem(torch, quick)
    (n, c, h, w), k = x.shape, rois.shape[0]
    results = {"threads": threads, "shape": [n, c, h, w], "boxes": k, "cases": {}}
    cases = results["cases"]

    def dk(sr):
        return lambda _: dkit.ops.roi_align(x, rois, out, scale, sr, "avg", True)

    def tv(sr):
        return lambda _: tv_roi_align(x, rois, out, scale, sr, True)

    set_threads(max(threads))
    for sr in (2, 0):
        fns = {"dkit": dk(sr)}
        if tv_roi_align:
            fns["torchvision"] = tv(sr)
            diff = (fns["dkit"](None) - fns["torchvision"](None)).abs().max().item()
            results[f"forward sr={sr} maxdiff"] = diff
        for f in fns.values():  # warm up
            f(None)
        cases[f"forward sr={sr}"] = _interleaved(fns, reps, threads, set_threads)

    # in a step: each timed call (and its warm call) right after other memory-heavy work
    def in_a_step(name):
        z = x * 2
        del z

    fns = {"dkit": dk(2)}
    if tv_roi_align:
        fns["torchvision"] = tv(2)
    cases["forward sr=2 in a step"] = _interleaved(fns, reps, threads, set_threads, setup=in_a_step)

    # backward only: the graph is built outside the timed region
    xr = x.clone().requires_grad_()
    dk_fwd = lambda t, r, o, s, sr, a: dkit.ops.roi_align(t, r, o, s, sr, "avg", a)  # noqa: E731
    fwds = {"dkit": dk_fwd}
    if tv_roi_align:
        fwds["torchvision"] = tv_roi_align

    def graph(fwd):
        xr.grad = None
        return fwd(xr, rois, out, scale, 2, True)

    backward = {name: (lambda y: y.backward(g)) for name in fwds}
    for name in fwds:  # warm up
        graph(fwds[name]).backward(g)
    if tv_roi_align:
        graph(tv_roi_align).backward(g)
        ref = xr.grad.clone()
        graph(dk_fwd).backward(g)
        results["backward sr=2 maxdiff"] = (xr.grad - ref).abs().max().item()
    cases["backward sr=2"] = _interleaved(backward, reps, threads, set_threads, setup=lambda name: graph(fwds[name]))

    # dkit alone at 1 and t threads, next to what the machine allows at the time (Note [Machine
    # ceiling]). Separate from the comparison above, where each dkit call follows torchvision
    # calls of 0.4-0.8 s that allocate and free as much memory; on this VM (bench/README.md)
    # that changes what a fresh allocation costs the next call, a cost no thread count speeds up.
    t = max(threads)
    if t > 1 and len(cores) >= t:
        results["scaling"] = _scaling.measure(__file__, _scaling_cases(torch, dkit, x, rois, g, scale, out), reps, t,
                                              set_threads, cores[1:t], ["--quick"] if quick else [])  # fmt: skip

    # tiny call: per-call time, from Python, torch tensors, no grad; one thread (the call is
    # far too small for dkit to start a parallel region). The same work in every entry point:
    # average pooling, sampling_ratio 0 (adaptive), aligned. Code that switches to dkit by one
    # import (dkit.compat) should get dkit.ops' speed (Note [Compat fast path]).
    set_threads(1)
    from dkit.compat import mmcv as dk_mmcv
    from dkit.compat import torchvision as dk_tv

    xt = torch.rand(1, 4, 8, 8)
    bt = torch.tensor([[0.0, 1.0, 1.0, 5.0, 5.0]])
    number = 2000 if quick else 20000
    fns = {
        "dkit": lambda: dkit.ops.roi_align(xt, bt, 2, 1.0, 0, "avg", True),
        "dkit.compat.torchvision": lambda: dk_tv.roi_align(xt, bt, 2, 1.0, 0, True),
        "dkit.compat.mmcv": lambda: dk_mmcv.roi_align(xt, bt, 2, 1.0, 0, "avg", True),
    }
    if tv_roi_align:
        fns["torchvision"] = lambda: tv_roi_align(xt, bt, 2, 1.0, 0, True)
    per_call = {name: [] for name in fns}
    for f in fns.values():
        for _ in range(number // 10):
            f()
    for _ in range(max(reps, 5)):
        for name, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            per_call[name].append((time.perf_counter() - t0) / number * 1e3)
    cases["tiny call"] = {1: {name: statistics.median(per_call[name]) for name in ("dkit", "torchvision")
                              if name in fns}}  # fmt: skip
    results["tiny call by entry point"] = {name: min(t) for name, t in per_call.items()}
    results["tiny call runs"] = [max(reps, 5), number]
    results["reader"] = _C._torch_reader()
    print(json.dumps(results))


# ------------------------------------------------------------------------------------------
# Driver


# Note [Binding]
# The worker binds OpenMP threads to cores (OMP_PROC_BIND=true, OMP_PLACES=cores, unless the
# caller set them), as CPU training jobs usually do. Unbound, this VM's guest scheduler (booted
# with sched_vcpu_pack) wakes the pool thread of a region that follows a single-threaded stretch
# on the vCPU that is already busy, and the 2-thread kernel then ran 17-23 ms instead of 14.6 ms.
# torchvision's roi_align runs on one thread either way. Switching counts with
# torch.set_num_threads cost more still (22.6 ms, bound), so the worker switches dkit's own count.
def run_worker(threads, reps, quick):
    env = _scaling.bound_env(max(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", ",".join(map(str, threads)),
           "--reps", str(reps)]  # fmt: skip
    if quick:
        cmd.append("--quick")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit("benchmark worker failed")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    # JSON keys are strings: back to thread counts
    res["cases"] = {case: {int(t): v for t, v in per.items()} for case, per in res["cases"].items()}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per measurement (median)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--quick", action="store_true", help="smaller problem, for a smoke run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--partner", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.partner is not None:
        _scaling.partner(args.partner, lambda torch, dkit: _scaling_cases(torch, dkit, *_problem(torch, args.quick)))
        return
    if args.worker:
        worker(thread_counts, args.reps, args.quick)
        return

    load_before = os.getloadavg()[0]
    res = run_worker(thread_counts, args.reps, args.quick)
    n, c, h, w = res["shape"]
    print(f"roi_align: dkit vs torchvision.ops.roi_align, float32 input [{n}, {c}, {h}, {w}], {res['boxes']} boxes,")
    print("spatial_scale 0.25, 7x7 output, aligned=True; median of", args.reps, "reps; ratio = dkit / torchvision")
    print("(< 1: dkit is faster). The thread counts take turns within each rep, in one process")
    print("(OMP_NUM_THREADS = the largest, threads bound to cores).")
    print(f"load average before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"torch reader: {res.get('reader')}")  # fmt: skip
    print()

    cases = res["cases"]
    rows = []
    for case in ("forward sr=2", "forward sr=2 in a step", "backward sr=2", "forward sr=0", "tiny call"):
        for t in thread_counts:
            r = cases.get(case, {}).get(t)
            if r is None:
                continue
            tv, dk = r.get("torchvision"), r["dkit"]
            diff = res.get(case + " maxdiff")
            rows.append((case, str(t), fmt_ms(tv), fmt_ms(dk), f"{dk / tv:.2f}x" if tv else "-",
                         f"{diff:.1e}" if diff is not None else ""))  # fmt: skip
    print("against torchvision (taking turns with it):")
    table(("case", "threads", "torchvision", "dkit", "ratio", "max |diff|"), rows)

    scaling = res.get("scaling")
    if scaling:
        rows = []
        for name, r in scaling.items():
            if name.startswith("end to end"):
                measure, case = "end to end", name[len("end to end "):]
            else:
                measure, case = "kernel", name[len("kernel "):]
            rows.append(_scaling.scaling_row(case, measure, r))
        rows.sort(key=lambda row: ("forward sr=2", "backward sr=2", "forward sr=0").index(row[0]))
        print("\ndkit's scaling with threads, dkit alone; end to end = dkit.ops allocating the output per")
        print("call (host output cache); kernel = dkit._C.ops into outputs allocated once. ceiling = the")
        print("speed-up of as many 1-thread processes running the same call at once, one per core: what")
        print("perfectly parallel threads would reach at that moment (Note [Machine ceiling] in _scaling.py):")
        table(_scaling.SCALING_HEAD, rows)
        print("(medians over reps; each rep's figures are taken within a second of each other)")
    tiny = res["cases"].get("tiny call", {}).get(1, {})
    if tiny.get("torchvision"):
        verdict = "met" if tiny["dkit"] <= 0.5 * tiny["torchvision"] else "NOT met"
        print(f"\ntiny-call target (dkit <= 0.5x torchvision per call): {verdict} "
              f"({tiny['dkit'] * 1e3:.2f} us vs {tiny['torchvision'] * 1e3:.2f} us)")  # fmt: skip
    entries = res.get("tiny call by entry point")
    if entries:
        runs, number = res["tiny call runs"]
        print(f"\ntiny call by entry point (best of {runs} runs of {number} calls; + = over dkit.ops):")
        rows = [(name if name != "dkit" else "dkit.ops", fmt_ms(v),
                 f"{(v - entries['dkit']) * 1e3:+.2f} us" if name.startswith("dkit.") else "")
                for name, v in entries.items()]  # fmt: skip
        table(("entry point", "per call", "over dkit.ops"), rows)


if __name__ == "__main__":
    main()
