#!/usr/bin/env python3
"""roi_pool, ps_roi_pool and ps_roi_align: dkit against torchvision.ops, in one process, on the same
tensors.

    /usr/bin/python3 bench/bench_roi_pool.py [--reps 5] [--threads 1,2] [--quick]

Cases (float32): a Faster R-CNN head's feature map [2, 256, 50, 68] (quick: [1, 64, 25, 34]),
512 RoIs (quick: 128) of 16-400 px at scale 1/16, 7 x 7 bins:
  forward          the pooled output (and argmax), what inference runs
  forward+backward a training step's pair: forward with grad, then backward of a random
                   gradient
  interleaved      the forward after 64 MB written and 64 MB read elsewhere and a few
                   allocations, as a training step's other ops leave the caches and the allocator
  fwd+bwd interleaved
                   the training step's pair after the same: issue 22's condition for its speed
                   table ("each call after other memory-heavy work"), as bench_deform_conv.py's
                   and bench_focal_loss.py's interleaved rows are
  ps forward, ps forward+backward, ps interleaved, ps fwd+bwd interleaved
                   ps_roi_pool (R-FCN) on the same RoIs, 7 x 7 bins over a map of 10 x 49 channels
                   (quick: 2 x 49); interleaved as above
  psa forward, psa forward+backward, psa interleaved, psa fwd+bwd interleaved
                   ps_roi_align on the same map and RoIs, adaptive grid (sampling_ratio -1)
Each rep runs every (thread count, library) once, in turn; the median of --reps is printed as
time and as the ratio dkit / torchvision (below 1: dkit is faster). torch.set_num_threads and
dkit.set_num_threads set the counts. The results are checked equal before timing.

Then, unless --scaling 0, dkit's scaling: the forward and forward+backward of each op, dkit alone,
at 1 and --scaling threads (default 2, where the process may use that many cores), each timed call
after a warm one, next to the machine's ceiling measured in the same rep by partner processes
(_scaling.py: Notes [Warm calls] and [Machine ceiling]). It runs in a worker process whose OpenMP
threads are bound to cores, as bench_roi_align.py's (Note [Binding] there). In the comparison
above, every dkit call follows a torchvision call of 20-250 ms on one thread, after which the
pool's second thread comes late (Note [Warm calls]): its two-thread rows show that, these rows
what a second thread gives a training loop that calls dkit's ops back to back.
"""

import argparse
import json
import os
import subprocess
import sys

from _threads import set_threads
from _turns import print_ratios, take_turns

from _dkit_path import use_checkout

# the cores this process may use, read before torch loads libgomp, which may bind this thread to
# one of them (Note [Binding] in bench_roi_align.py)
_CORES = sorted(os.sched_getaffinity(0))
use_checkout()  # the checkout's dkit where it is built (bench/_dkit_path.py), before importing it

import _scaling  # noqa: E402
import torch  # noqa: E402
import torchvision.ops as tvops  # noqa: E402

import dkit  # noqa: E402


def _case(quick, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w, k = (1, 64, 25, 34, 128) if quick else (2, 256, 50, 68, 512)
    x = torch.randn(n, c, h, w, generator=g)
    xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 16.0, h * 16.0])
    wh = 16 + torch.rand(k, 2, generator=g) * 384
    rois = torch.cat([torch.randint(0, n, (k, 1), generator=g).float(), xy, xy + wh], 1)
    return x, rois


def _scaling_cases(torch, dkit, quick):
    """dkit alone, end to end through dkit.ops, as {name: (setup, run)} for _scaling.measure: the
    same tensors in every process (seeded)."""
    x, rois = _case(quick)
    g = torch.Generator().manual_seed(1)
    xps = torch.randn(x.shape[0], (2 if quick else 10) * 49, x.shape[2], x.shape[3], generator=g)
    gout = torch.randn(rois.shape[0], x.shape[1], 7, 7, generator=g)
    gps = torch.randn(rois.shape[0], xps.shape[1] // 49, 7, 7, generator=g)
    ops = {"": (dkit.ops.roi_pool, x, gout, ()), "ps ": (dkit.ops.ps_roi_pool, xps, gps, ()),
           "psa ": (dkit.ops.ps_roi_align, xps, gps, (-1,))}  # fmt: skip
    cases = {}
    for prefix, (op, inp, grad, extra) in ops.items():

        def forward(_, op=op, inp=inp, extra=extra):
            op(inp, rois, 7, 1 / 16, *extra)

        def training(_, op=op, inp=inp, grad=grad, extra=extra):
            op(inp.detach().requires_grad_(), rois, 7, 1 / 16, *extra).backward(grad)

        cases[prefix + "forward"] = (None, forward)
        cases[prefix + "forward+backward"] = (None, training)
    return cases


def _scaling_worker(t, reps, quick):
    """The scaling table's figures as JSON (in the bound worker process, _run_scaling)."""
    res = _scaling.measure(__file__, _scaling_cases(torch, dkit, quick), reps, t, dkit.set_num_threads, _CORES[1:t],
                           ["--quick"] if quick else [])  # fmt: skip
    print(json.dumps(res))


def _run_scaling(t, reps, quick):
    cmd = [sys.executable, os.path.abspath(__file__), "--scaling-worker", "--scaling", str(t), "--reps", str(reps)]
    r = subprocess.run(cmd + (["--quick"] if quick else []), env=_scaling.bound_env(t), capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit("benchmark scaling worker failed")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print("\ndkit's scaling with threads, dkit alone, end to end (dkit.ops), each timed call after a warm one,")
    print("in a process whose OpenMP threads are bound to cores. ceiling = the speed-up of as many 1-thread")
    print("processes running the same call at once, one per core: what perfectly parallel threads would")
    print("reach at that moment (Note [Machine ceiling] in _scaling.py):")
    _scaling.table(_scaling.SCALING_HEAD, [_scaling.scaling_row(name, "end to end", r) for name, r in res.items()])
    print("(medians over reps; each rep's figures are taken within a second of each other)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scaling", type=int, default=2, help="threads of the scaling table (0: none)")
    ap.add_argument("--scaling-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--partner", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.partner is not None:
        _scaling.partner(args.partner, lambda torch, dkit: _scaling_cases(torch, dkit, args.quick))
        return
    if args.scaling_worker:
        _scaling_worker(args.scaling, args.reps, args.quick)
        return
    x, rois = _case(args.quick)
    gout = torch.randn(rois.shape[0], x.shape[1], 7, 7)
    libs = {"torchvision": tvops.roi_pool, "dkit": dkit.ops.roi_pool}
    ref = libs["torchvision"](x, rois, 7, 1 / 16)
    assert torch.equal(libs["dkit"](x, rois, 7, 1 / 16), ref)
    xps = torch.randn(x.shape[0], (2 if args.quick else 10) * 49, x.shape[2], x.shape[3])
    gps = torch.randn(rois.shape[0], xps.shape[1] // 49, 7, 7)
    ps_libs = {"torchvision": tvops.ps_roi_pool, "dkit": dkit.ops.ps_roi_pool}
    assert torch.equal(ps_libs["dkit"](xps, rois, 7, 1 / 16), ps_libs["torchvision"](xps, rois, 7, 1 / 16))
    psa_libs = {"torchvision": tvops.ps_roi_align, "dkit": dkit.ops.ps_roi_align}
    assert torch.equal(psa_libs["dkit"](xps, rois, 7, 1 / 16, -1), psa_libs["torchvision"](xps, rois, 7, 1 / 16, -1))

    def forward(f):
        return lambda: f(x, rois, 7, 1 / 16)

    def training(f):
        def run():
            xg = x.detach().requires_grad_()
            f(xg, rois, 7, 1 / 16).backward(gout)

        return run

    def ps_forward(f):
        return lambda: ps_libs[_name_of(f)](xps, rois, 7, 1 / 16)

    def ps_training(f):
        def run():
            xg = xps.detach().requires_grad_()
            ps_libs[_name_of(f)](xg, rois, 7, 1 / 16).backward(gps)

        return run

    def psa_forward(f):
        return lambda: psa_libs[_name_of(f)](xps, rois, 7, 1 / 16, -1)

    def psa_training(f):
        def run():
            xg = xps.detach().requires_grad_()
            psa_libs[_name_of(f)](xg, rois, 7, 1 / 16, -1).backward(gps)

        return run

    def _name_of(f):
        return "torchvision" if f is libs["torchvision"] else "dkit"

    cases = [("forward", forward, False), ("forward+backward", training, False), ("interleaved", forward, True),
             ("fwd+bwd interleaved", training, True),
             ("ps forward", ps_forward, False), ("ps forward+backward", ps_training, False),
             ("ps interleaved", ps_forward, True), ("ps fwd+bwd interleaved", ps_training, True),
             ("psa forward", psa_forward, False), ("psa forward+backward", psa_training, False),
             ("psa interleaved", psa_forward, True), ("psa fwd+bwd interleaved", psa_training, True)]  # fmt: skip
    cases = [(name, {lib: make(f) for lib, f in libs.items()}, disturb) for name, make, disturb in cases]
    threads = [int(t) for t in args.threads.split(",")]
    # Note [Switching torch's threads] in _threads.py
    times = take_turns(cases, args.reps, threads, lambda t: set_threads(torch, dkit, t))
    shape = "x".join(str(s) for s in x.shape)
    print(f"roi_pool, input {shape}, {rois.shape[0]} RoIs, 7x7 bins, float32, median of {args.reps}")
    print(f"ps_roi_pool and ps_roi_align (psa), input {'x'.join(str(s) for s in xps.shape)}, the same RoIs and bins")
    print_ratios(times, cases, threads, "torchvision")
    if args.scaling > 1 and len(_CORES) >= args.scaling:
        _run_scaling(args.scaling, args.reps, args.quick)


if __name__ == "__main__":
    main()
