#!/usr/bin/env python3
"""The NMS family: dkit against torchvision.ops.nms / batched_nms, as ratios (dkit / torchvision).

    /usr/bin/python3 bench/bench_nms.py [--reps 5] [--quick] [--full]

Boxes as in the issue: corners uniform in 1000 x 1000, sides uniform in 1 .. 101, float32,
scores uniform; one thread (torch.set_num_threads(1); both NMS kernels are serial).

  nms N            N = 1,000 and 10,000 (and 50,000 with --full: torchvision takes seconds)
  nms clustered    6,000 proposals around 100 objects (jittered copies, as a detector's RPN)
  batched_nms      20,000 boxes in 80 categories
  soft_nms         1,000 boxes, linear and gaussian, against MMCV's algorithm written with
                   NumPy (MMCV is not installed here; its CPU kernel is the same O(N^2) loop in
                   C++, so this ratio says how much of the time is the interpreter's)
  nms_match        2,000 random boxes and 6,000 clustered proposals, against MMCV's loop
                   written with torch (nms_match_reference; MMCV's own kernel is that loop in
                   C++, one overlap per kept box and later box); serial in both, so one thread
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


def clustered_boxes(torch, n, objects, seed):
    """Proposals as a detector makes them: many jittered copies of a few objects (also the
    tests' clustered boxes, tests/python/test_nms.py)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(objects, 2, generator=g) * 800 + 100
    sizes = torch.rand(objects, 2, generator=g) * 150 + 20
    which = torch.randint(0, objects, (n,), generator=g)
    c = centres[which] + torch.randn(n, 2, generator=g) * sizes[which] * 0.1
    wh = sizes[which] * (1 + torch.randn(n, 2, generator=g) * 0.1).clamp(min=0.3)
    return torch.cat([c - wh / 2, c + wh / 2], 1), torch.rand(n, generator=g)


def _soft_nms_numpy(np, boxes, scores, thr, sigma, min_score, method):
    """MMCV's soft_nms procedure (its CPU kernel's loop), vectorised over the remaining boxes
    with NumPy: the reference for soft_nms' speed."""
    b = boxes.astype(np.float32).copy()
    sc = scores.astype(np.float32).copy()
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    ind = np.arange(len(b))
    dets, n, i = [], len(b), 0
    while i < n:
        m = i + int(np.argmax(sc[i:n]))
        for a in (b, sc, area, ind):
            a[[i, m]] = a[[m, i]]
        dets.append(np.append(b[i], sc[i]))
        r = slice(i + 1, n)
        w = np.maximum(0.0, np.minimum(b[i, 2], b[r, 2]) - np.maximum(b[i, 0], b[r, 0]))
        h = np.maximum(0.0, np.minimum(b[i, 3], b[r, 3]) - np.maximum(b[i, 1], b[r, 1]))
        inter = w * h
        ovr = inter / (area[i] + area[r] - inter)
        if method == "linear":
            weight = np.where(ovr >= thr, 1 - ovr, 1.0)
        else:
            weight = np.exp(-(ovr * ovr) / sigma)
        sc[r] *= weight.astype(np.float32)
        low = np.nonzero(sc[i + 1:n] < min_score)[0] + i + 1
        for p in low[::-1]:  # the kernel moves the last box into each dropped place
            n -= 1
            for a in (b, sc, area, ind):
                a[p] = a[n]
        i += 1
    return np.array(dets), ind[:n]


def nms_match_reference(torch, dets, thr):
    """MMCV's nms_match (the loop of nms_match_cpu, mmcv/ops/csrc/pytorch/cpu/nms.cpp): each box
    not yet suppressed, in decreasing score order, is kept and suppresses every later box not
    yet suppressed whose IoU with it (no +1 offset; std::max/std::min, so a NaN coordinate of
    the later box loses to the kept box's) is >= thr; a group is the kept box and the boxes it
    suppressed. Vectorised with torch over the later boxes, in float32 (float64 for float64
    dets), the threshold rounded to the dtype; the order stable on ties, NaN first. Also the
    tests' reference (tests/python/test_nms_match.py). Returns the list of int64 groups."""
    d = dets if dets.dtype == torch.float64 else dets.float()
    x1, y1, x2, y2, s = d.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    t = torch.tensor(thr, dtype=d.dtype)
    alive = torch.sort(s, descending=True, stable=True)[1]
    groups = []
    while len(alive):
        i, rest = alive[0], alive[1:]
        xx1 = torch.where(x1[i] < x1[rest], x1[rest], x1[i])
        yy1 = torch.where(y1[i] < y1[rest], y1[rest], y1[i])
        xx2 = torch.where(x2[rest] < x2[i], x2[rest], x2[i])
        yy2 = torch.where(y2[rest] < y2[i], y2[rest], y2[i])
        w, h = xx2 - xx1, yy2 - yy1
        w = torch.where(0 < w, w, torch.zeros_like(w))
        h = torch.where(0 < h, h, torch.zeros_like(h))
        inter = w * h
        take = inter / (areas[i] + areas[rest] - inter) >= t
        groups.append(torch.cat([i.view(1), rest[take]]))
        alive = rest[~take]
    return groups


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

    from _dkit_path import use_checkout

    use_checkout()
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
            d, t = _measure([lambda: dkit.ops.nms(b, s, 0.5), lambda: torchvision.ops.nms(b, s, 0.5)], args.reps,
                            disturb)
            rows.append((f"nms {n} boxes ({len(ref)} kept){label}", d, t))

    n, objects = (1000, 20) if args.quick else (6000, 100)
    b, s = clustered_boxes(torch, n, objects, 5)
    ref = torchvision.ops.nms(b, s, 0.5)
    if not torch.equal(ref, dkit.ops.nms(b, s, 0.5)):
        sys.exit("bench_nms: nms on clustered boxes differs from torchvision")
    d, t = _measure([lambda: dkit.ops.nms(b, s, 0.5), lambda: torchvision.ops.nms(b, s, 0.5)], args.reps, None)
    rows.append((f"nms {n} clustered around {objects} objects ({len(ref)} kept)", d, t))

    n, classes = (2000, 20) if args.quick else (20000, 80)
    b, s = _boxes(torch, n, 7)
    idxs = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(1))
    if not torch.equal(dkit.compat.torchvision.batched_nms(b, s, idxs, 0.5),
                       torchvision.ops.batched_nms(b, s, idxs, 0.5)):
        sys.exit("bench_nms: batched_nms differs from torchvision")
    for label, disturb in (("", None), (" in a step", step)):
        d, t = _measure([lambda: dkit.ops.batched_nms(b, s, idxs, 0.5),
                         lambda: torchvision.ops.batched_nms(b, s, idxs, 0.5)], args.reps, disturb)  # fmt: skip
        rows.append((f"batched_nms {n} boxes, {classes} classes{label}", d, t))

    import numpy as np

    n = 300 if args.quick else 1000
    b, s = _boxes(torch, n, 3)
    bn, sn = b.numpy(), s.numpy()
    for method in ("linear", "gaussian"):
        _, ref_inds = _soft_nms_numpy(np, bn, sn, 0.3, 0.5, 1e-3, method)
        _, inds = dkit.ops.soft_nms(b, s, 0.3, 0.5, 1e-3, method)
        if len(ref_inds) != len(inds):
            sys.exit(f"bench_nms: soft_nms ({method}) keeps {len(inds)} boxes, MMCV's procedure {len(ref_inds)}")
        d, t = _measure([lambda: dkit.ops.soft_nms(b, s, 0.3, 0.5, 1e-3, method),
                         lambda: _soft_nms_numpy(np, bn, sn, 0.3, 0.5, 1e-3, method)],
                        max(1, args.reps // 2), None)  # fmt: skip
        rows.append((f"soft_nms {n} boxes, {method} (vs MMCV's loop in NumPy)", d, t))

    for n, objects in ((300, 10), (1000, 20)) if args.quick else ((2000, 0), (6000, 100)):
        b, s = clustered_boxes(torch, n, objects, 9) if objects else _boxes(torch, n, 9)
        dets = torch.cat([b, s[:, None]], 1)
        ref = nms_match_reference(torch, dets, 0.5)
        members, starts = dkit.ops.nms_match(b, s, 0.5)
        if len(ref) != len(starts) or not torch.equal(torch.cat(ref), members):
            sys.exit(f"bench_nms: nms_match on {n} boxes differs from MMCV's loop")
        d, t = _measure([lambda: dkit.compat.mmcv.nms_match(dets, 0.5), lambda: nms_match_reference(torch, dets, 0.5)],
                        max(1, args.reps // 2), None)  # fmt: skip
        where = f"around {objects} objects" if objects else "random"
        rows.append((f"nms_match {n} {where} ({len(ref)} groups)", d, t))

    print(f"{'case':52s} {'dkit':>12s} {'torchvision':>12s} {'ratio':>7s} {'speedup':>8s}")
    for name, d, t in rows:
        if t is None:
            print(f"{name:52s} {_ms(d)} {'-':>12s}")
        else:
            print(f"{name:52s} {_ms(d)} {_ms(t)} {d / t:7.3f} {t / d:7.1f}x")


if __name__ == "__main__":
    main()
