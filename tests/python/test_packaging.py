"""Packaging: `pip install --no-build-isolation .` into a fresh venv gives a working dkit outside
the source tree: the extension, the core library beside it, the headers a backend builds with,
the GPU backends that were built, and (where torch's C++ headers are installed) the torch reader.

The install itself is `make test-installed`'s (and test-python-noreader's, and the Debian 13
suite's): they install dkit into a fresh venv and run this whole suite against that copy, from
outside the source tree (DKIT_IMPORT_INSTALLED=1). These tests check what only an installed copy
shows; against the in-place build they skip and say where they run."""

import os
import sys

import pytest

from conftest import INSTALLED, ROOT

pytestmark = pytest.mark.skipif(
    not INSTALLED, reason="checks an installed copy: make test-installed, test-python-noreader and test-debian13 run it"
)


def test_the_installed_package_is_the_one_under_test():
    import dkit

    here = os.path.dirname(dkit.__file__)
    assert "site-packages" in here, here
    assert not os.path.realpath(here).startswith(os.path.realpath(ROOT) + os.sep + "dkit"), here
    assert sys.prefix != sys.base_prefix, "not a venv"  # the fresh venv make test-installed made


def test_the_headers_and_the_core_library_are_installed():
    import dkit

    here = os.path.dirname(dkit.__file__)
    assert os.path.isfile(os.path.join(dkit.get_include(), "dkit.h"))
    assert os.path.isfile(os.path.join(dkit.get_include(), "kernels", "roi_align_math.h"))
    assert os.path.isfile(os.path.join(dkit.get_include(), "dk_determinism.h"))
    assert dkit.get_library() == os.path.join(here, "libdkit.so") and os.path.isfile(dkit.get_library())
    assert not [h for h in os.listdir(dkit.get_include()) if h.endswith("_private.h")]


def test_the_gpu_backends_built_are_installed():
    import dkit

    here = os.path.dirname(dkit.__file__)
    built = os.environ.get("DKIT_GPU_LIBS_BUILT", "")
    for name in built.split():  # the Makefile says which it built (make test-installed)
        assert os.path.isfile(os.path.join(here, name)), name
        assert any(b.path == os.path.join(here, name) for b in dkit.backends()), (name, dkit.backends())


def test_ops_run_from_the_installed_copy():
    import numpy as np

    import dkit

    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    y = dkit.ops.roi_align(x, np.array([[0, 0, 0, 4, 4]], np.float32), 1, 1.0, 1, "avg", True)
    assert y.shape == (1, 1, 1, 1) and abs(float(y[0, 0, 0, 0]) - 13.5) < 1e-5, y
    torch = pytest.importorskip("torch")
    t = dkit.ops.roi_align(torch.from_numpy(x), torch.tensor([[0.0, 0, 0, 4, 4]]), 1, 1.0, 1)
    assert abs(t.item() - 13.5) < 1e-5


def test_the_torch_reader_is_installed_where_torch_headers_are():
    torch = pytest.importorskip("torch")
    import dkit
    from dkit import _C

    headers = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "autograd", "python_variable.h")
    if not os.path.isfile(headers):
        pytest.skip("torch's C++ headers are not installed: no reader to build")
    here = os.path.dirname(dkit.__file__)
    assert [f for f in os.listdir(here) if f.startswith("_torch_reader")], os.listdir(here)
    state = _C._torch_reader()
    if os.environ.get("DKIT_TORCH_READER") == "0":
        assert state is None  # built, and not loaded (make test-python-noreader)
    else:
        assert state is True
