"""bench/bench_roi_align_rotated.py runs end to end on its quick problem: dkit's results equal its
PyTorch reference's (the script asserts it before timing, forward and backward), and every
figure is a finite positive number. Timings are the benchmark's to report, not this test's to
judge."""

import math
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")

_CASE = r"(forward|forward\+backward|interleaved|adaptive forward)"
_ROW = r"^" + _CASE + r"\s+(\d+)\s+(\d+\.\d+) ms\s+(\d+\.\d+) ms\s+(\d+\.\d+)x"


@pytest.mark.slow
def test_bench_roi_align_rotated_quick():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_roi_align_rotated.py"), "--quick", "--reps", "1",
           "--threads", "1,2"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = re.findall(_ROW, r.stdout, re.M)
    assert len(rows) == 8, r.stdout  # 4 cases at 1 and 2 threads
    for case, _threads, ref_ms, dk_ms, ratio in rows:
        numbers = [float(ref_ms), float(dk_ms)]
        assert all(math.isfinite(v) and v > 0 for v in numbers) and float(ratio) >= 0, (case, numbers)
