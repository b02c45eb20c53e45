#!/usr/bin/env python3
"""box_iou_rotated and nms_rotated, box_iou_quadri and nms_quadri: dkit's times, and ratios to
references (dkit time / reference).

    /usr/bin/python3 bench/bench_rotated.py [--reps 3] [--threads 1,2] [--quick]

MMCV is not installed here, so the references are:
  torch-ref       a vectorised PyTorch rotated IoU written below (Sutherland-Hodgman clipping of
                  every pair's corner polygons, all pairs at once in chunks; float32), i.e. what
                  one writes without a kernel; its results are checked against dkit's
  tv box_iou      torchvision.ops.box_iou on the axis-aligned boxes (angle 0): not the same
                  problem (4 comparisons per pair instead of polygon clipping), for scale only
  tv nms          torchvision.ops.nms on the axis-aligned boxes, for scale only
  dkit matrix     nms the obvious way with dkit's own kernel: the full N x N box_iou_rotated, then
                  the greedy loop over it (torch ops); what nms_rotated's suppression against
                  kept boxes and its bounding-circle reject (Note [Rotated suppression]) save

Cases (float32, detector-like boxes in a 1024 x 1024 image: centres anywhere, sides 8 to 256
px log-uniform, any angle):
  iou NxM          box_iou_rotated of N x M boxes (quick: 150 x 150, full: 600 x 600)
  iou aligned      box_iou_rotated(aligned=True) of N pairs
  nms N            nms_rotated of N scored boxes (quick 500, full 2000), IoU threshold 0.5
  quadri ...       box_iou_quadri and nms_quadri on the same boxes written as their corners
                   (torch-ref clips the quadrilaterals; dkit matrix as above)

Each rep runs every (thread count, library) once, in turn, on the same warmed-up tensors; the
median of --reps is printed. dkit.set_num_threads and torch.set_num_threads set the counts.
"""

import argparse
import math
import statistics
import time

from _threads import set_threads as set_torch_and_dkit_threads

from _dkit_path import use_checkout

use_checkout()


def boxes(torch, n, seed):
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, 5)
    out[:, :2] = torch.rand(n, 2, generator=g) * 1024
    out[:, 2:4] = torch.exp(torch.rand(n, 2, generator=g) * math.log(256 / 8)) * 8
    out[:, 4] = (torch.rand(n, generator=g) * 2 - 1) * math.pi
    return out


# ------------------------------------------------------------------------------------------
# The vectorised torch reference


def _corners(torch, b):
    """[P, 4, 2] corners, MMCV's clockwise convention (R(theta) in y-down coordinates)."""
    c, s = torch.cos(b[:, 4]), torch.sin(b[:, 4])
    u = torch.tensor([-0.5, 0.5, 0.5, -0.5], dtype=b.dtype)[None] * b[:, 2:3]
    v = torch.tensor([-0.5, -0.5, 0.5, 0.5], dtype=b.dtype)[None] * b[:, 3:4]
    x = b[:, 0:1] + c[:, None] * u - s[:, None] * v
    y = b[:, 1:2] + s[:, None] * u + c[:, None] * v
    return torch.stack([x, y], -1)


def _clip_area(torch, poly, mask, clip):
    """Area of polygons poly [P, V, 2] (valid vertices first, mask [P, V]) clipped by the convex
    quadrilaterals clip [P, 4, 2] (counter-clockwise in y-up terms: the corners' order)."""
    for k in range(4):
        a, b = clip[:, k], clip[:, (k + 1) % 4]
        e = (b - a)[:, None]
        count = mask.sum(1, keepdim=True)
        idx = torch.arange(poly.shape[1])[None]
        nxt = torch.where(count > 0, (idx + 1) % count.clamp(min=1), idx)
        q = torch.gather(poly, 1, nxt[..., None].expand(-1, -1, 2))
        side_p = e[..., 0] * (poly[..., 1] - a[:, None, 1]) - e[..., 1] * (poly[..., 0] - a[:, None, 0])
        side_q = e[..., 0] * (q[..., 1] - a[:, None, 1]) - e[..., 1] * (q[..., 0] - a[:, None, 0])
        keep_p = (side_p >= 0) & mask
        cross = ((side_p >= 0) != (side_q >= 0)) & mask
        t = (side_p / torch.where(cross, side_p - side_q, torch.ones_like(side_p)))[..., None]
        inter = poly + t * (q - poly)
        cand = torch.stack([poly, inter], 2).reshape(poly.shape[0], -1, 2)  # p0, x01, p1, x12, ...
        cmask = torch.stack([keep_p, cross], 2).reshape(poly.shape[0], -1)
        order = torch.sort((~cmask).to(torch.int8), dim=1, stable=True)[1][:, :8]  # valid first, in order
        poly = torch.gather(cand, 1, order[..., None].expand(-1, -1, 2))
        mask = torch.gather(cmask, 1, order)
    count = mask.sum(1, keepdim=True)
    idx = torch.arange(poly.shape[1])[None]
    nxt = (idx + 1) % count.clamp(min=1)
    q = torch.gather(poly, 1, nxt[..., None].expand(-1, -1, 2))
    shoelace = (poly[..., 0] * q[..., 1] - q[..., 0] * poly[..., 1]) * mask
    return shoelace.sum(1).abs() / 2


def torch_ref_iou(torch, b1, b2, aligned=False, chunk=1 << 16, quadri=False):
    """IoU of every pair (or of aligned pairs), all at once in chunks of pairs: rotated boxes, or
    with quadri=True quadrilaterals [K, 8] whose vertices run counter-clockwise in y-up terms."""
    if aligned:
        i, j = torch.arange(b1.shape[0]), torch.arange(b1.shape[0])
    else:
        i = torch.arange(b1.shape[0]).repeat_interleave(b2.shape[0])
        j = torch.arange(b2.shape[0]).repeat(b1.shape[0])
    out = torch.empty(i.shape[0], dtype=b1.dtype)
    for lo in range(0, i.shape[0], chunk):
        a, b = b1[i[lo:lo + chunk]], b2[j[lo:lo + chunk]]
        pa = a.view(-1, 4, 2) if quadri else _corners(torch, a)
        pb = b.view(-1, 4, 2) if quadri else _corners(torch, b)
        poly = torch.cat([pa, pa.new_zeros(pa.shape[0], 4, 2)], 1)
        mask = torch.zeros(pa.shape[0], 8, dtype=torch.bool)
        mask[:, :4] = True
        inter = _clip_area(torch, poly, mask, pb)
        if quadri:
            area_a, area_b = _clip_area(torch, poly, mask, pa), _clip_area(torch, pb, mask[:, :4], pb)
        else:
            area_a, area_b = a[:, 2] * a[:, 3], b[:, 2] * b[:, 3]
        out[lo:lo + chunk] = inter / (area_a + area_b - inter)
    return out if aligned else out.view(b1.shape[0], b2.shape[0])


def greedy_keep(torch, iou, scores, thr):
    """MMCV's loop over a precomputed IoU matrix (torch ops per kept box)."""
    order = torch.sort(scores, descending=True, stable=True)[1]
    sup = torch.zeros(scores.shape[0], dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if sup[i]:
            continue
        keep.append(i)
        sup |= iou[i] >= thr
    return torch.tensor(keep, dtype=torch.int64)


# ------------------------------------------------------------------------------------------


def _xyxy(torch, b):
    return torch.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], 1)


def _median_times(fns, reps, threads, set_threads):
    """{(name, t): median seconds}; every rep runs each (t, name) once after a warm-up call."""
    times = {}
    for _ in range(reps):
        for t in threads:
            set_threads(t)
            for name, fn in fns.items():
                fn()
                t0 = time.perf_counter()
                fn()
                times.setdefault((name, t), []).append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--quick", action="store_true", help="smaller problem, for a smoke run")
    args = ap.parse_args()
    import torch
    import torchvision

    import dkit

    threads = [int(t) for t in args.threads.split(",")]
    torch_threads = torch.get_num_threads()

    def set_threads(t):  # Note [Switching torch's threads] in _threads.py (t 0: the defaults)
        set_torch_and_dkit_threads(torch, dkit, t, torch_threads)

    n, m, n_nms = (150, 150, 500) if args.quick else (600, 600, 2000)
    b1, b2 = boxes(torch, n, 1), boxes(torch, m, 2)
    dets = boxes(torch, n_nms, 3)
    noise = torch.randn(n_nms - n_nms // 2, 5, generator=torch.Generator().manual_seed(5))
    dets[n_nms // 2:] = dets[: n_nms // 2] + noise * torch.tensor([3, 3, 4, 4, 0.1])  # near-duplicates
    dets[:, 2:4] = dets[:, 2:4].abs() + 1
    scores = torch.rand(n_nms, generator=torch.Generator().manual_seed(4))
    flat1, flat2, flatd = b1.clone(), b2.clone(), dets.clone()
    for f in (flat1, flat2, flatd):
        f[:, 4] = 0
    xy1, xy2, xyd = _xyxy(torch, flat1), _xyxy(torch, flat2), _xyxy(torch, flatd)

    # Agreement on what is timed.
    diff_full = (dkit.ops.box_iou_rotated(b1, b2) - torch_ref_iou(torch, b1.double(), b2.double()).float()).abs().max()
    diff_al = (dkit.ops.box_iou_rotated(b1, b2, aligned=True)
               - torch_ref_iou(torch, b1.double(), b2.double(), aligned=True).float()).abs().max()  # fmt: skip
    keep_dk = dkit.ops.nms_rotated(dets, scores, 0.5)[1]
    keep_mat = greedy_keep(torch, dkit.ops.box_iou_rotated(dets, dets), scores, float(torch.tensor(0.5).float()))
    print(f"dkit vs torch-ref, max |iou difference|: NxM {diff_full:.1e}, aligned {diff_al:.1e}")
    same = torch.equal(keep_dk, keep_mat)
    print(f"nms_rotated keeps {keep_dk.numel()} of {n_nms}; the same as the matrix route: {same}")

    cases = [
        (f"iou {n}x{m}", {
            "dkit": lambda: dkit.ops.box_iou_rotated(b1, b2),
            "torch-ref": lambda: torch_ref_iou(torch, b1, b2),
            "tv box_iou": lambda: torchvision.ops.box_iou(xy1, xy2),
        }),
        (f"iou aligned {n}", {
            "dkit": lambda: dkit.ops.box_iou_rotated(b1, b2, aligned=True),
            "torch-ref": lambda: torch_ref_iou(torch, b1, b2, aligned=True),
        }),
        (f"nms {n_nms}", {
            "dkit": lambda: dkit.ops.nms_rotated(dets, scores, 0.5),
            "dkit matrix": lambda: greedy_keep(torch, dkit.ops.box_iou_rotated(dets, dets), scores, 0.5),
            "tv nms": lambda: torchvision.ops.nms(xyd, scores, 0.5),
        }),
    ]
    q1, q2, qd = (_corners(torch, b).reshape(-1, 8) for b in (b1, b2, dets))
    diff_q = (dkit.ops.box_iou_quadri(q1, q2) - torch_ref_iou(torch, q1.double(), q2.double(), quadri=True).float())
    keep_q = dkit.ops.nms_quadri(qd, scores, 0.5)[1]
    same_q = torch.equal(keep_q, greedy_keep(torch, dkit.ops.box_iou_quadri(qd, qd), scores, 0.5))
    print(f"quadri: max |iou difference| {diff_q.abs().max():.1e}; nms_quadri keeps {keep_q.numel()}, "
          f"the same as the matrix route: {same_q}")  # fmt: skip
    cases += [
        (f"quadri iou {n}x{m}", {
            "dkit": lambda: dkit.ops.box_iou_quadri(q1, q2),
            "torch-ref": lambda: torch_ref_iou(torch, q1, q2, quadri=True),
        }),
        (f"quadri nms {n_nms}", {
            "dkit": lambda: dkit.ops.nms_quadri(qd, scores, 0.5),
            "dkit matrix": lambda: greedy_keep(torch, dkit.ops.box_iou_quadri(qd, qd), scores, 0.5),
        }),
    ]
    print(f"\n{'case':<18}{'threads':>8}  {'reference':<12}{'ref time':>12}{'dkit time':>12}{'ratio':>9}")
    for case, fns in cases:
        res = _median_times(fns, args.reps, threads, set_threads)
        for t in threads:
            dk = res[("dkit", t)]
            for ref in fns:
                if ref == "dkit":
                    continue
                r = res[(ref, t)]
                print(f"{case:<18}{t:>8}  {ref:<12}{r * 1e3:>9.3f} ms{dk * 1e3:>9.3f} ms{dk / r:>8.3f}x")
    set_threads(0)


if __name__ == "__main__":
    main()
