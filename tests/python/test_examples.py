"""examples/demo.py runs (the NumPy-only path here, fast; `make demo` runs the torch path)."""

import os
import subprocess
import sys

from conftest import ROOT


def test_demo_without_torch(tmp_path):
    # sys.modules["torch"] = None makes `import torch` fail, as on a machine without torch.
    script = (
        "import sys, runpy\n"
        "sys.modules['torch'] = None\n"
        f"runpy.run_path({os.path.join(ROOT, 'examples', 'demo.py')!r}, run_name='__main__')\n"
    )
    # from a folder without dkit in it: the demo picks the dkit to import (the checkout's where it is
    # built, else the installed one)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "forward only" in r.stdout
    assert "roi_align_forward" in r.stdout and "calls" in r.stdout
    assert "roi_align_backward" not in r.stdout.split("dkit.profile()")[1].split("dispatch table")[0]
