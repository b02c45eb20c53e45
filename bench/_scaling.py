"""dkit's speed-up with threads, measured next to what the machine allows at that moment.

    import _scaling
    # cases(torch, dkit) -> {name: (setup, run)}: run(setup()) is timed, setup (None: nothing) is not;
    # the same tensors in every process that calls it (seeded)
    _scaling.partner(cpu, cases)                   # the script's --partner CPU mode
    rows = _scaling.measure(script, cases(...), reps, t, set_threads, cores[1:t], partner_args)

The benchmarks that take turns with a peer (torchvision) time dkit at several thread counts in the
same loop; this measures its scaling with dkit alone, each timed call after a warm one (Note [Warm
calls]), and the machine's own ceiling in the same rep (Note [Machine ceiling]). bench_roi_align.py
and bench_roi_pool.py use it; bench/README.md shows the tables.

Note [Warm calls]
Every timed call follows an untimed call of the same function at the same thread count, as in a
training loop, which calls the op at every step. The first call after a switch pays for things no
loop pays for: on this VM (Firecracker, page_reporting_order=11) memory freed in blocks of 8 MB is
handed back to the host within seconds, so a fresh output's first touch becomes a host page fault;
and a vCPU that sat idle (halted) while the other ran a single-threaded call has to be scheduled
again by the host. Both are the same for both libraries, but they fall on dkit's 2-thread calls
as a fixed cost that hid its scaling (1.2x measured without warm calls, 1.9x with, in the same
hour). The second grows with the idle time: on the 2-core AMD EPYC VM (2026-11-28), an OpenMP
region of two threads entered after the pool had been idle found its second thread there after
1-8 us when the pause was 0.1-5 ms, 72 us after 10 ms, 1.8 ms after 30 ms and 3.8 ms after 100 ms
(medians of 60; libgomp's default wait, which spins before it sleeps; with OMP_WAIT_POLICY=passive,
which sleeps at once, 15-17 us after any pause). A peer's single-threaded call of 30-200 ms
between two of dkit's calls, as in the comparison tables, is such a pause.

Note [Machine ceiling]
How much faster t threads can be than one is bounded by the machine as well as by the code, and
on a shared host that bound moves by the minute: each vCPU shares its physical core (its caches
and execution units) with other tenants, and the cores share the memory's bandwidth (on the AMD VM
one thread read 19 GB/s and two 29-30 GB/s; one streamed writes at 19.5 GB/s and two at
20.7-21.4 GB/s: a kernel bound by its stores gains nothing from a second thread there).
Measured on the first host: two independent 1-thread processes running roi_align, each pinned to
its own vCPU and sharing no memory, at moments both ran at full speed and at others one of them
ran 1.3-2x slower than it does alone, the slow one changing from minute to minute; the same held
for the kernel cut down to computation on data in its own L2. dkit cannot do better than that, so
each rep also measures it: with the 1-thread time T1 of the call alone, t - 1 partner processes
(pinned to the team's other cores) run the same 1-thread call at the same time as this process,
with call times P_i, and
    ceiling = T1 * sum_i 1 / P_i
is the speed-up t perfectly parallel threads would reach at that moment: t on an idle host, less
when other tenants or the memory's bandwidth bound it. "of ceiling" = dkit's t-thread speed-up /
ceiling.
"""

import os
import statistics
import subprocess
import sys
import time

from _dkit_path import child_env, use_checkout


def timed(case):
    """ms of run(setup()) for case = (setup, run); setup is not timed."""
    setup, run = case
    state = setup() if setup else None
    t0 = time.perf_counter()
    run(state)
    return (time.perf_counter() - t0) * 1e3


def partner(cpu, cases):
    """A 1-thread runner of cases(torch, dkit) pinned to `cpu`, driven through stdin: a case's name
    in, its time out (Note [Machine ceiling])."""
    os.sched_setaffinity(0, {cpu})
    import torch

    use_checkout()
    import dkit

    dkit.set_num_threads(1)
    mine = cases(torch, dkit)
    for case in mine.values():
        timed(case)
    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name not in mine:
            break
        print(timed(mine[name]), flush=True)


def _partners(script, cores, args):
    env = child_env(dict(os.environ, OMP_NUM_THREADS="1"))
    procs = []
    for cpu in cores:
        cmd = [sys.executable, os.path.abspath(script), "--partner", str(cpu)] + list(args)
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("benchmark partner failed")
        procs.append(p)
    return procs


def _together(case, name, procs):
    """This process's call time and its partners', all running the case at once."""
    for p in procs:
        p.stdin.write(name + "\n")
        p.stdin.flush()
    mine = timed(case)
    return mine, [float(p.stdout.readline()) for p in procs]


def measure(script, cases, reps, t, set_threads, cores, args=()):
    """{name: {one, threads, many, speedup, ceiling, of ceiling}} (medians over reps, ms and
    ratios) for cases {name: (setup, run)}: per rep and case, 1 thread, t threads, then this
    process and t - 1 partners (`script --partner CPU *args`, pinned to `cores`) together on one
    thread each; every timed call after a warm one (Notes [Warm calls], [Machine ceiling])."""
    procs = _partners(script, cores, args)
    rec = {name: {"one": [], "many": [], "speedup": [], "ceiling": []} for name in cases}
    try:
        for _ in range(reps):
            for name, case in cases.items():
                r = rec[name]
                set_threads(1)
                timed(case)  # Note [Warm calls]
                one = timed(case)
                set_threads(t)
                timed(case)
                many = timed(case)
                set_threads(1)
                _together(case, name, procs)  # warm, together
                mine, theirs = _together(case, name, procs)
                r["one"].append(one)
                r["many"].append(many)
                r["speedup"].append(one / many)
                r["ceiling"].append(one * (1 / mine + sum(1 / p for p in theirs)))
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
    out = {}
    for name, r in rec.items():
        fractions = [a / b for a, b in zip(r["speedup"], r["ceiling"])]
        out[name] = {"one": statistics.median(r["one"]), "threads": t, "many": statistics.median(r["many"]),
                     "speedup": statistics.median(r["speedup"]), "ceiling": statistics.median(r["ceiling"]),
                     "of ceiling": statistics.median(fractions)}  # fmt: skip
    return out


def bound_env(t):
    """The environment of a process whose OpenMP pool has t threads bound to cores (Note
    [Binding] in bench_roi_align.py), importing the same dkit as this one."""
    env = dict(os.environ, OMP_NUM_THREADS=str(t))
    env.setdefault("OMP_PROC_BIND", "true")
    env.setdefault("OMP_PLACES", "cores")
    return child_env(env)


def table(head, rows):
    """Prints rows of strings under head, the first column left-aligned."""
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i]) for i in range(len(r)))  # noqa: E731
    print(line(head))
    print("-" * len(line(head)))
    for r in rows:
        print(line(r))


def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.2f} us" if v < 0.1 else f"{v:.2f} ms"


def scaling_row(case, measure_name, r):
    """A row of the scaling table for one result of measure()."""
    return (case, measure_name, fmt_ms(r["one"]), str(r["threads"]), fmt_ms(r["many"]), f"{r['speedup']:.2f}x",
            f"{r['ceiling']:.2f}x", f"{r['of ceiling']:.0%}")  # fmt: skip


SCALING_HEAD = ("case", "measure", "1 thread", "threads", "time", "speed-up", "ceiling", "of ceiling")
