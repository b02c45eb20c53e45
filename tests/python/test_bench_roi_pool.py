"""bench/bench_roi_pool.py runs end to end on its quick problem: dkit's results equal
torchvision's on what is timed (the script asserts it before timing), every figure is a finite
positive number, and the scaling table (its bound worker and partner process, bench/_scaling.py)
has a row per case. Timings are the benchmark's to report, not this test's to judge."""

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
_SCALING_CASES = ["forward", "forward+backward", "ps forward", "ps forward+backward", "psa forward",
                  "psa forward+backward"]  # fmt: skip
_MS = r"(\d+\.\d+ (?:ms|us))"
_SCALING_ROW = (r"^(\S+(?: \S+)?)\s+end to end\s+" + _MS + r"\s+2\s+" + _MS + r"\s+(\d+\.\d\d)x\s+(\d+\.\d\d)x"
                r"\s+(\d+)%")  # fmt: skip


def _ms(text):
    value, unit = text.split()
    return float(value) * (1e-3 if unit == "us" else 1.0)


def _bench(*args):
    """The quick problem, one rep, with `args`; the run must succeed."""
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_roi_pool.py"), "--quick", "--reps", "1", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.slow
def test_bench_roi_pool_quick():
    r = _bench("--threads", "1,2")
    rows = re.findall(_ROW, r.stdout, re.M)
    assert len(rows) == 18, r.stdout  # 9 cases at 1 and 2 threads
    for case, _threads, tv_ms, dk_ms, ratio in rows:
        numbers = [float(tv_ms), float(dk_ms)]
        assert all(math.isfinite(v) and v > 0 for v in numbers) and float(ratio) >= 0, (case, numbers)
    # the scaling table (dkit alone, 1 and 2 threads, and the machine's ceiling from a partner
    # process), where this process may use two cores
    scaling = re.findall(_SCALING_ROW, r.stdout, re.M)
    if len(os.sched_getaffinity(0)) < 2:
        assert not scaling, r.stdout
        return
    assert sorted(s[0] for s in scaling) == sorted(_SCALING_CASES), r.stdout
    for case, one, many, speedup, ceiling, of_ceiling in scaling:
        numbers = [_ms(one), _ms(many)] + [float(v) for v in (speedup, ceiling, of_ceiling)]
        assert all(math.isfinite(v) and v > 0 for v in numbers), (case, numbers)
        # one rep: the speed-up is that rep's 1-thread time over its 2-thread time (to the
        # printed times' two decimals), and "of ceiling" the speed-up over the ceiling
        assert abs(numbers[0] / numbers[1] / numbers[2] - 1) < 0.1, (case, numbers)
        assert abs(numbers[2] / numbers[3] * 100 / numbers[4] - 1) < 0.1, (case, numbers)


@pytest.mark.slow
def test_bench_roi_pool_scaling_off():
    """--scaling 0 leaves the table out (and starts no worker or partner)."""
    r = _bench("--scaling", "0")
    assert len(re.findall(_ROW, r.stdout, re.M)) == 9, r.stdout
    assert "ceiling" not in r.stdout, r.stdout
