"""Thread counts for the benchmarks that time dkit and a torch peer at several counts in turn.

    from _threads import set_threads
    set_threads(torch, dkit, t)   # before the calls timed at t threads

Note [Switching torch's threads]
torch.set_num_threads is not a cheap switch: on Debian 12's torch 1.13 each call took 4-7 ms, and
for some 20-25 ms after it another thread kept a core busy (measured on a 2-core AMD EPYC VM,
2026-11-28: the process used 30 ms of CPU per call where it slept 50 ms after it), even when the
count did not change. A dkit call on two threads made within that time shares its second core
with it: nms_rotated of 2,000 boxes, 31 parallel passes a call (Note [Rotated suppression in
blocks]), took 25-28 ms on two threads when torch.set_num_threads(2) came right before each call,
against 12.4-13.5 ms when it did not and 24.6-25.3 ms on one thread; a kernel of one parallel loop
loses less, but still its first loop's second thread. So this sets torch's count only when it
changes, and then waits for torch's pool to settle before anything is timed; dkit's own count
(dkit.set_num_threads) is a store and is set every time. (bench_roi_align.py's worker switches
dkit's count alone, Note [Binding] there.)
"""

import time

SETTLE_S = 0.05  # after torch.set_num_threads: twice the busy time measured above


def set_threads(torch, dkit, t, torch_default=None):
    """dkit's and torch's thread counts to t (torch's only if it differs, then SETTLE_S of rest);
    t 0: dkit's default, and torch's torch_default."""
    dkit.set_num_threads(t)
    want = t if t else torch_default
    if want and torch.get_num_threads() != want:
        torch.set_num_threads(want)
        time.sleep(SETTLE_S)
