"""bench/bench_roi_align.py runs end to end on its small problem (the full one is `make
bench-python`): its worker, its partner processes (Note [Machine ceiling]) and its tables, and
the results it times agree with torchvision's."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("torchvision")


def test_bench_quick_smoke():
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_roi_align.py"), "--quick", "--reps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # dkit matches torchvision on what was timed (forward and backward; float32)
    diffs = [float(d) for d in re.findall(r"\s(\d\.\de[-+]\d\d)\s*$", out, re.M)]
    assert len(diffs) == 6, out
    assert max(diffs) < 1e-5, out
    assert "tiny-call target" in out
    if len(os.sched_getaffinity(0)) >= 2:
        # one row per case and measure, each with a speed-up, a ceiling and a fraction of it
        rows = re.findall(r"^(forward sr=2|backward sr=2|forward sr=0)\s+(end to end|kernel)\s.*"
                          r"\s(\d+\.\d\d)x\s+(\d+\.\d\d)x\s+(\d+)%$", out, re.M)  # fmt: skip
        assert len(rows) == 6, out
        for _, _, speedup, ceiling, frac in rows:
            assert float(speedup) > 0 and float(ceiling) > 0 and int(frac) > 0
