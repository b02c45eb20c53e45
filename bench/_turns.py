"""dkit against a peer in one process, taking turns on the same tensors: the comparison tables of
bench_roi_pool.py, bench_roi_align_rotated.py, bench_focal_loss.py and bench_deform_conv.py.

    from _turns import print_ratios, take_turns
    cases = [("forward", {"torchvision": tv_call, "dkit": dk_call}, False), ...]
    times = take_turns(cases, reps, threads, lambda t: set_threads(torch, dkit, t))
    print_ratios(times, cases, threads, "torchvision")

Each case is (name, {library: a call of no arguments}, disturb). After one warm-up call of each,
every rep runs every case at every thread count, each library's call in turn, so that the machine's
moods fall on all of them alike; the tables print medians over the reps and the ratio dkit / peer
(below 1: dkit is faster).

A case with disturb set is timed after disturb_caches(): 64 MB written, 64 MB read and a few small
allocations freed, so that the call finds the caches and torch's allocator as a training step's
other layers leave them, not warm from the call before. Its two 64 MB buffers are made once, at
the first call, and torch is imported there: a benchmark may read its cores before torch loads
libgomp (Note [Binding] in bench_roi_align.py). Until 2026-11-29 each benchmark had a copy of its
own, which kept the buffers with dict.setdefault; Python evaluates setdefault's default on every
call, so each call also built and filled a new 64 MB tensor (128 MB written, not 64, and some 16K
page faults, outside the timed window). bench/README.md's "interleaved" figures from before that
date were taken so.
"""

import statistics
import time

_BUFFERS = []


def disturb_caches():
    import torch

    if not _BUFFERS:
        _BUFFERS.extend([torch.empty(16 << 20), torch.ones(16 << 20)])
    written, read = _BUFFERS
    written.fill_(1.0)
    float(read.sum())
    [torch.empty(1 << 16) for _ in range(8)]


def timed(fn, disturb=False):
    """fn()'s wall time in seconds, after disturb_caches() where asked."""
    if disturb:
        disturb_caches()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def take_turns(cases, reps, threads, set_threads):
    """{(case, threads, library): [seconds, one a rep]}; set_threads(t) before the calls at t."""
    for _name, calls, _disturb in cases:
        for fn in calls.values():
            timed(fn)  # warm-up
    times = {}
    for _ in range(reps):
        for name, calls, disturb in cases:
            for t in threads:
                set_threads(t)
                for lib, fn in calls.items():
                    times.setdefault((name, t, lib), []).append(timed(fn, disturb))
    return times


def print_ratios(times, cases, threads, peer):
    """The table: each case and thread count, the peer's and dkit's medians, and dkit / peer."""
    width = max([20] + [len(name) for name, _calls, _disturb in cases])
    print(f"{'case':{width}} {'threads':>7} {peer:>14} {'dkit':>12} {'ratio':>8}")
    for name, _calls, _disturb in cases:
        for t in threads:
            ref = statistics.median(times[(name, t, peer)]) * 1e3
            dk = statistics.median(times[(name, t, "dkit")]) * 1e3
            print(f"{name:{width}} {t:7d} {ref:11.3f} ms {dk:9.3f} ms {dk / ref:7.3f}x")
