#!/usr/bin/env python3
"""The NMS family: dkit against torchvision.ops.nms / batched_nms, as ratios (dkit / torchvision).

    /usr/bin/python3 bench/bench_nms.py [--reps 5] [--quick] [--full]

Boxes as in the issue: corners uniform in 1000 x 1000, sides uniform in 1 .. 101, float32,
scores uniform; one thread (torch.set_num_threads(1); both NMS kernels are serial).

  nms N            N = 1,000 and 10,000 (and 50,000 with --full: torchvision takes seconds)
  batched_nms      20,000 boxes in 80 categories
  soft_nms         1,000 boxes, linear (MMCV's procedure; MMCV is not installed here, so
                   dkit's time alone)
  ... in a step    the same call, each preceded by what a training step does between two
                   calls of the op: 64 MB allocated and written by torch (other layers'
                   activations), so the op starts with cold caches (Note [Calls in a step])

Within each rep dkit and torchvision run in turn on the same tensors; the median of --reps is
reported, with the kept count checked equal (the bench fails otherwise).
"""

import argparse
import statistics
import sys
import time

# Note [Calls in a step]
# Calls back to back keep the boxes, the scores and the kernel's scratch in cache; a training
# step runs other ops in between, which evict them. A 64 MB buffer written between two timed
# calls (more than this machine's last-level cache) puts each call in that position.
_STEP_BYTES = 64 << 20


def _boxes(torch, n, seed):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 1000
    wh = torch.rand(n, 2, generator=g) * 100 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g)


def _time(fn, disturb):
    if disturb is not None:
        disturb()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _measure(fns, reps, disturb):
    """Median seconds of each fn, the fns run in turn within each rep (after one warm call)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            times[i].append(_time(fn, disturb))
    return [statistics.median(t) for t in times]


def _ms(s):
    return f"{s * 1e3:9.3f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="small problems, for a smoke run")
    ap.add_argument("--full", action="store_true", help="also 50,000 boxes against torchvision (slow)")
    args = ap.parse_args()

    import torch
    import torchvision

    import dkit

    torch.set_num_threads(1)
    dkit.set_num_threads(1)
    sink = torch.empty(_STEP_BYTES // 4)

    def step():
        sink.fill_(1.0)  # other layers' work: 64 MB written

    sizes = [200, 1000] if args.quick else [1000, 10000] + ([50000] if args.full else [])
    rows = []
    for n in sizes:
        b, s = _boxes(torch, n, n)
        ref = torchvision.ops.nms(b, s, 0.5)
        got = dkit.ops.nms(b, s, 0.5)
        if not torch.equal(ref, got):
            sys.exit(f"bench_nms: nms on {n} boxes differs from torchvision")
        for label, disturb in (("", None), (" in a step", step)):
            d, t = _measure([lambda: dkit.ops.nms(b, s, 0.5), lambda: torchvision.ops.nms(b, s, 0.5)], args.reps, disturb)
            rows.append((f"nms {n} boxes ({len(ref)} kept){label}", d, t))

    n, classes = (2000, 20) if args.quick else (20000, 80)
    b, s = _boxes(torch, n, 7)
    idxs = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(1))
    if not torch.equal(dkit.compat.torchvision.batched_nms(b, s, idxs, 0.5), torchvision.ops.batched_nms(b, s, idxs, 0.5)):
        sys.exit("bench_nms: batched_nms differs from torchvision")
    for label, disturb in (("", None), (" in a step", step)):
        d, t = _measure([lambda: dkit.ops.batched_nms(b, s, idxs, 0.5), lambda: torchvision.ops.batched_nms(b, s, idxs, 0.5)],
                        args.reps, disturb)  # fmt: skip
        rows.append((f"batched_nms {n} boxes, {classes} classes{label}", d, t))

    n = 300 if args.quick else 1000
    b, s = _boxes(torch, n, 3)
    (d,) = _measure([lambda: dkit.ops.soft_nms(b, s, 0.3, 0.5, 1e-3, "linear")], args.reps, None)
    rows.append((f"soft_nms {n} boxes, linear (dkit only)", d, None))

    print(f"{'case':52s} {'dkit':>12s} {'torchvision':>12s} {'ratio':>7s} {'speedup':>8s}")
    for name, d, t in rows:
        if t is None:
            print(f"{name:52s} {_ms(d)} {'-':>12s}")
        else:
            print(f"{name:52s} {_ms(d)} {_ms(t)} {d / t:7.3f} {t / d:7.1f}x")


if __name__ == "__main__":
    main()
