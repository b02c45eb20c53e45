"""bench/bench_roi_pool.py runs end to end on its quick problem: dkit's results equal
torchvision's on what is timed (the script asserts it before timing), and every figure is a
finite positive number. Timings are the benchmark's to report, not this test's to judge."""

import math
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("torchvision")

_CASE = (r"(forward|forward\+backward|interleaved|ps forward|ps forward\+backward|ps interleaved|psa forward"
         r"|psa forward\+backward|psa interleaved)")
_ROW = r"^" + _CASE + r"\s+(\d+)\s+(\d+\.\d+) ms\s+(\d+\.\d+) ms\s+(\d+\.\d+)x"


@pytest.mark.slow
def test_bench_roi_pool_quick():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_roi_pool.py"), "--quick", "--reps", "1",
           "--threads", "1,2"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = re.findall(_ROW, r.stdout, re.M)
    assert len(rows) == 18, r.stdout  # 9 cases at 1 and 2 threads
    for case, _threads, tv_ms, dk_ms, ratio in rows:
        numbers = [float(tv_ms), float(dk_ms)]
        assert all(math.isfinite(v) and v > 0 for v in numbers) and float(ratio) >= 0, (case, numbers)
