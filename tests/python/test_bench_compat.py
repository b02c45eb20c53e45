"""bench/bench_compat.py runs end to end on its quick problems: every case and entry point, each
figure a finite positive number; the bench itself checks every result against torchvision's and
fails otherwise. The figures are the benchmark's to report, not a test's: nothing here asserts
a time or a ratio."""

import math
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("torchvision")

_NUM = r"(\d+\.\d+)"
_ROW = rf"^(batched_nms \d+ boxes(?: wide| distinct scores)?|roi_align tiny [27]x[27])\s+.*?\s+{_NUM} (?:ms|us)\s+" \
       rf"{_NUM} (?:ms|us)\s+{_NUM} (?:ms|us)\s+{_NUM}x\s+{_NUM}x\s+{_NUM}x$"  # fmt: skip


@pytest.mark.slow
def test_bench_compat_quick():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_compat.py"), "--quick", "--reps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)  # its dkit: bench/_dkit_path.py
    assert r.returncode == 0, r.stderr
    rows = re.findall(_ROW, r.stdout, re.M)
    assert [row[0].split()[0] for row in rows] == ["batched_nms"] * 3 + ["roi_align"] * 2, r.stdout
    for case, *numbers in rows:
        # times are positive; a ratio printed to 3 decimals could round to 0.000
        assert all(math.isfinite(float(v)) and float(v) > 0 for v in numbers[:3]), (case, numbers)
        assert all(math.isfinite(float(v)) and float(v) >= 0 for v in numbers[3:]), (case, numbers)
