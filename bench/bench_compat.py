#!/usr/bin/env python3
"""The compat entries against dkit.ops and torchvision: what switching one import costs.

    /usr/bin/python3 bench/bench_compat.py [--reps 7] [--calls 2000] [--quick]

A migrating user replaces `torchvision.ops` by `dkit.compat.torchvision` and should get
dkit.ops' speed. Each case runs torchvision.ops, dkit.compat.torchvision and dkit.ops in one
process, on the same tensors, one thread (torch.set_num_threads(1), dkit.set_num_threads(1)),
taking turns within every rep, each timed after a call of itself (Note [Each call after
itself]):

  batched_nms 20,000 boxes   in 80 categories, corners uniform in 1000 x 1000, sides 1 .. 101
                             (bench_nms.py's problem), float32 scores uniform in [0, 1), which
                             has a few equal kept scores; median of --reps calls
  ... wide                   the same with sides 1 .. 301 (more suppression)
  ... distinct scores        the first problem with every score different
  roi_align tiny 2x2 / 7x7   [1, 4, 8, 8] input, one box; median over --reps rounds of the
                             per-call time of --calls calls (dkit at most 0.5x torchvision's
                             time is the tiny-call target; bench_roi_align.py)

For batched_nms the compat entry returns torchvision's indices exactly, equal scores in
torchvision's order included, where dkit.ops returns the same kept set with equal scores by
index. torchvision's order of equal scores is that of torch's unstable sort of the kept scores,
which the compat entry computes from dkit's result (_C.torch_sort_ties: Note [torchvision's
order of equal scores] in dkit/compat/torchvision.py), with one pass over the kept scores when
none are equal; the "ties" column says how many kept scores equal the next one. The
bench checks every result against torchvision's (indices equal; roi_align within 1e-5) and
fails otherwise.
"""

import argparse
import itertools
import statistics
import sys
import time

from _dkit_path import use_checkout

use_checkout()


def _boxes(torch, n, seed, side):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 1000
    wh = torch.rand(n, 2, generator=g) * side + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g)


# Note [Each call after itself]
# A call that follows torchvision's batched_nms can run slower than one that follows a dkit
# call (by up to 0.5 ms of 3.5 on 20,000 boxes in some runs here: torchvision's many temporaries
# leave the caches and the allocator in another state), and the entries differ in what they
# leave too. So that no entry is charged for the one before it, each timed round follows an
# untimed call of the same function: every entry is timed as calls back to back, in turns
# within each rep. That untimed call does not absorb all of it: on 20,000 boxes with distinct
# scores the entry that came right after torchvision's measured 0.3 ms slower all the same (the
# compat entry 1.14x dkit.ops' time in that place, 0.98x when dkit.ops took it, one process,
# 30 reps). So each entry must follow each of the others equally often. Rotating one order from
# rep to rep does not do that: the cycle torchvision -> compat -> dkit.ops stays a cycle, and the
# compat entry followed torchvision's call in every rep (measured 1.07-1.11x dkit.ops' time on
# distinct scores, where its extra work is a pass of 10 us). The reps therefore take the orders
# of the entries in turn, every permutation (each ordered pair is adjacent equally often).


def _median_per_call(fns, reps, calls=1):
    """Median over reps of the per-call seconds of `calls` calls in a row of each fn, the fns
    taking turns, each round after an untimed call of its own fn (Note [Each call after
    itself])."""
    for fn in fns:
        for _ in range(max(1, calls // 10)):
            fn()
    times = [[] for _ in fns]
    orders = list(itertools.permutations(range(len(fns))))  # Note [Each call after itself]
    for rep in range(reps):
        for i in orders[rep % len(orders)]:
            fns[i]()
            t = time.perf_counter()
            for _ in range(calls):
                fns[i]()
            times[i].append((time.perf_counter() - t) / calls)
    return [statistics.median(t) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per measurement (median)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per round of the tiny roi_align")
    ap.add_argument("--quick", action="store_true", help="small problems, for a smoke run")
    args = ap.parse_args()

    import torch
    import torchvision

    import dkit
    from dkit.compat import torchvision as dk_tv

    torch.set_num_threads(1)
    dkit.set_num_threads(1)
    tv = torchvision.ops
    n, classes = (5000, 20) if args.quick else (20000, 80)  # quick: still above torchvision's 4000

    rows = []
    for label, side, distinct in (("", 100, False), (" wide", 300, False), (" distinct scores", 100, True)):
        b, s = _boxes(torch, n, 7, side)
        if distinct:
            s = torch.randperm(n, generator=torch.Generator().manual_seed(2)).float() / n
        idxs = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(1))
        ref = tv.batched_nms(b, s, idxs, 0.5)
        got = dk_tv.batched_nms(b, s, idxs, 0.5)
        ours = dkit.ops.batched_nms(b, s, idxs, 0.5)
        if not torch.equal(got, ref):
            sys.exit(f"bench_compat: dkit.compat.torchvision.batched_nms{label} differs from torchvision")
        if set(ours.tolist()) != set(ref.tolist()):
            sys.exit(f"bench_compat: dkit.ops.batched_nms{label} keeps other boxes than torchvision")
        kept = s[ours]
        ties = int((kept[1:] == kept[:-1]).sum())
        t = _median_per_call([lambda: tv.batched_nms(b, s, idxs, 0.5), lambda: dk_tv.batched_nms(b, s, idxs, 0.5),
                              lambda: dkit.ops.batched_nms(b, s, idxs, 0.5)], args.reps)  # fmt: skip
        rows.append((f"batched_nms {n} boxes{label}", f"{len(ref)} kept, {ties} ties", 1e3, "ms", *t))

    x = torch.rand(1, 4, 8, 8, generator=torch.Generator().manual_seed(3))
    box = torch.tensor([[0.0, 1.0, 1.5, 6.0, 5.5]])
    calls = max(1, args.calls // 10) if args.quick else args.calls
    for size in (2, 7):
        ref = tv.roi_align(x, box, size, 1.0, -1, False)
        for name, out in (("compat", dk_tv.roi_align(x, box, size, 1.0, -1, False)),
                          ("dkit.ops", dkit.ops.roi_align(x, box, size, 1.0, -1, "avg", False))):  # fmt: skip
            if not torch.allclose(out, ref, rtol=0, atol=1e-5):
                sys.exit(f"bench_compat: {name} roi_align {size}x{size} differs from torchvision")
        t = _median_per_call([lambda: tv.roi_align(x, box, size, 1.0, -1, False),
                              lambda: dk_tv.roi_align(x, box, size, 1.0, -1, False),
                              lambda: dkit.ops.roi_align(x, box, size, 1.0, -1, "avg", False)],
                             args.reps, calls)  # fmt: skip
        rows.append((f"roi_align tiny {size}x{size}", "1 box", 1e6, "us", *t))

    print(f"{'case':40s} {'':18s} {'torchvision':>12s} {'compat':>12s} {'dkit.ops':>12s} "
          f"{'compat/ops':>10s} {'compat/tv':>9s} {'ops/tv':>7s}")  # fmt: skip
    for case, what, scale, unit, t_tv, t_compat, t_ops in rows:
        times = " ".join(f"{v * scale:9.3f} {unit}" for v in (t_tv, t_compat, t_ops))
        print(f"{case:40s} {what:18s} {times} {t_compat / t_ops:9.3f}x {t_compat / t_tv:8.3f}x {t_ops / t_tv:6.3f}x")


if __name__ == "__main__":
    main()
