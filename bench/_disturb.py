"""What a training step's other ops leave behind between two calls of an op, for the benchmarks'
"interleaved" rows (bench_roi_pool.py, bench_roi_align_rotated.py, bench_focal_loss.py,
bench_deform_conv.py):

    from _disturb import timed
    seconds = timed(fn, disturb=True)   # fn's wall time, after disturb_caches()

disturb_caches() writes 64 MB, reads 64 MB and frees a few small allocations, so that the timed call finds
the caches and torch's allocator as a step's other layers leave them, not warm from the call before.
Its two 64 MB buffers are made once, at the first call, and torch is imported there: a benchmark
may read its cores before torch loads libgomp (Note [Binding] in bench_roi_align.py).

Until 2026-11-29 each benchmark had its own copy, which kept its buffers with dict.setdefault. Python
evaluates setdefault's default on every call, so each call also built and filled a new 64 MB
tensor: 128 MB written, not 64, and some 16K page faults, outside the timed window. Figures in
bench/README.md from before that date were taken so.
"""

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
