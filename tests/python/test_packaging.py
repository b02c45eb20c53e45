"""Packaging: `pip install --no-build-isolation .` into a fresh venv gives a working dkit outside
the source tree: the extension, the core library beside it, the headers a backend builds with,
and (where torch's C++ headers are installed) the torch reader."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

CHECK = textwrap.dedent(
    """
    import os, sys
    import dkit
    from dkit import _C
    here = os.path.dirname(dkit.__file__)
    assert "site-packages" in here, here
    assert os.path.isfile(os.path.join(dkit.get_include(), "dkit.h"))
    assert os.path.isfile(os.path.join(dkit.get_include(), "kernels", "roi_align_math.h"))
    assert dkit.get_library() == os.path.join(here, "libdkit.so") and os.path.isfile(dkit.get_library())
    import numpy as np
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    y = dkit.ops.roi_align(x, np.array([[0, 0, 0, 4, 4]], np.float32), 1, 1.0, 1, "avg", True)
    assert y.shape == (1, 1, 1, 1) and abs(float(y[0, 0, 0, 0]) - 13.5) < 1e-5, y
    try:
        import torch
    except ImportError:
        print("reader: no torch")
    else:
        t = dkit.ops.roi_align(torch.from_numpy(x), torch.tensor([[0.0, 0, 0, 4, 4]]), 1, 1.0, 1)
        assert abs(t.item() - 13.5) < 1e-5
        print("reader:", _C._torch_reader())
    """
)


def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    py = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    if subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("this Python's venv has no pip (Debian: python3-venv / python3-pip)")
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index", ROOT],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # from a directory where the source tree's dkit/ is not importable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([py, "-c", CHECK], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    headers = os.path.join("/usr/include", "torch", "csrc", "autograd", "python_variable.h")
    if "reader: no torch" not in r.stdout and os.path.isfile(headers) and os.environ.get("DKIT_TORCH_READER") != "0":
        assert "reader: True" in r.stdout, r.stdout
