"""bench/bench_gemm.py runs end to end on its quick problems: dk_sgemm's products are checked
against torch.mm in double precision by the script before timing, and every figure is a finite
positive number. Timings are the benchmark's to report, not this test's to judge."""

import math
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")

_ROW = r"^(forward|gcols|gW) Cout=(\d+)\s+(\d+)\s+(\d+)\s+(\d+)((?:\s+\d+\.\d+ms\s+\d+\.\d+|\s+\d+\.\d+x)+)$"


@pytest.mark.slow
def test_bench_gemm_quick():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_gemm.py"), "--quick", "--reps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = re.findall(_ROW, r.stdout, re.M)
    assert [row[0] for row in rows] == ["forward", "gcols", "gW"], r.stdout
    for row in rows:
        numbers = [float(v) for v in re.findall(r"\d+\.\d+", row[5])]
        # torch.mm's and dkit's ms and GF/s and their ratio; oneDNN's and its ratio where torch has it
        assert len(numbers) in (5, 8), row
        assert all(math.isfinite(v) and v > 0 for v in numbers), row
