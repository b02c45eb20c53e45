"""dkit.profile(): per-op call counts and times, through the dispatcher's Profile key.

    with dkit.profile() as prof:
        y = dkit.ops.roi_align(x, boxes, 7, 0.25)
        y.sum().backward()
    print(prof)

Note [Profile deltas]
Inside the block the current thread includes the Profile key, so every dkit op called from it
(including torch's CPU backward, which runs on the calling thread) goes first through the
Profile fallback, which times the rest of the dispatch and adds to a process-wide (op, backend)
counter. The counters are never reset by default: the block snapshots them on entry and reports
the difference on exit, so nested profiles and other users of the counters are unaffected.
(Another thread profiling at the same time adds to the same counters; pass reset=True, or
profile one thread at a time, if that matters.)
"""

import contextlib
from typing import NamedTuple

from dkit import _C


class ProfileRow(NamedTuple):
    op: str
    backend: str
    count: int
    total_ns: int

    @property
    def mean_us(self):
        return self.total_ns / self.count / 1e3 if self.count else 0.0


def _snapshot():
    return {(op, backend): (count, ns) for op, backend, count, ns in _C.profile_rows()}


class Profile:
    """The result of one dkit.profile() block: .rows (ProfileRow per (op, backend) called in the
    block) and a readable str(). While the block runs, .rows shows the calls so far."""

    def __init__(self):
        self._before = _snapshot()
        self._rows = None

    def _diff(self):
        rows = []
        for (op, backend), (count, ns) in _snapshot().items():
            c0, n0 = self._before.get((op, backend), (0, 0))
            if count > c0:
                rows.append(ProfileRow(op, backend, count - c0, ns - n0))
        rows.sort(key=lambda r: (-r.total_ns, r.op, r.backend))
        return rows

    def _finish(self):
        self._rows = self._diff()

    @property
    def rows(self):
        return self._rows if self._rows is not None else self._diff()

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, op):
        """The row of an op by name (summed over backends)."""
        matches = [r for r in self.rows if r.op == op]
        if not matches:
            raise KeyError(op)
        return ProfileRow(op, "+".join(r.backend for r in matches), sum(r.count for r in matches),
                          sum(r.total_ns for r in matches))  # fmt: skip

    def total_ns(self):
        return sum(r.total_ns for r in self.rows)

    def __str__(self):
        rows = self.rows
        if not rows:
            return "dkit profile: no dkit ops were called"
        head = ("op", "backend", "calls", "total ms", "mean us", "%")
        total = sum(r.total_ns for r in rows) or 1
        body = [
            (r.op, r.backend, str(r.count), f"{r.total_ns / 1e6:.3f}", f"{r.mean_us:.1f}",
             f"{100.0 * r.total_ns / total:.1f}")
            for r in rows
        ]  # fmt: skip
        body.append(("total", "", str(sum(r.count for r in rows)), f"{total / 1e6:.3f}", "", "100.0"))
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]

        def fmt(row):
            cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
            cells += [c.rjust(w) for c, w in zip(row[2:], widths[2:])]
            return "  ".join(cells).rstrip()

        rule = "-" * len(fmt(head))
        return "\n".join([fmt(head), rule] + [fmt(r) for r in body[:-1]] + [rule, fmt(body[-1])])

    def __repr__(self):
        return f"<dkit.Profile {len(self.rows)} ops, {self.total_ns() / 1e6:.3f} ms>"


@contextlib.contextmanager
def profile(reset=False):
    """Profile the dkit ops called by this thread inside the block.

    Yields a Profile; print it for a per-op table of calls and times. reset=True also clears the
    process-wide counters first (see Note [Profile deltas])."""
    if reset:
        _C.profile_reset()
    prof = Profile()
    # A scope, not a saved state: blocks that exit out of order, or on another thread (a
    # generator finalised elsewhere), still take Profile out (Note [Scopes that end out of order]
    # in csrc/common/dk_tls.h).
    scope = _C.tls_scope_enter(1 << _C.KEY_PROFILE, 0)
    try:
        yield prof
    finally:
        _C.tls_scope_exit(scope)
        prof._finish()
