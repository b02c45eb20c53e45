"""Shared helpers for dkit's Python tests.

The tests import dkit from the source tree (built in place by `make python`), from a sanitizer
flavour's copy (DKIT_TEST_PACKAGE_ROOT), or, with DKIT_IMPORT_INSTALLED=1, the copy pip installed
(`make test-installed`, run from outside the source tree); and the naive reference
roi_align_ref.py from this folder.
"""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
# Where the dkit package under test lives: the source tree (built in place), or a sanitizer
# build's own copy (`make test-python-asan`, `make test-python-tsan` set it). Child processes
# the tests start import it from there too.
PKG_ROOT = os.environ.get("DKIT_TEST_PACKAGE_ROOT") or ROOT
# Testing an installed dkit (`make test-installed`): the folder that holds the installed package,
# never the source tree (which may hold an in-place build for another Python, or none). The
# variable stays set for the processes tests start: the checkout's scripts (bench/, examples/)
# then import the installed dkit too.
INSTALLED = os.environ.get("DKIT_IMPORT_INSTALLED") == "1"
if INSTALLED:
    import importlib.util

    _spec = importlib.util.find_spec("dkit")
    if _spec is None or _spec.origin is None:
        raise RuntimeError("DKIT_IMPORT_INSTALLED=1, but no dkit is installed for " + sys.executable)
    PKG_ROOT = os.path.dirname(os.path.dirname(_spec.origin))
    if os.path.realpath(PKG_ROOT) == os.path.realpath(ROOT):
        raise RuntimeError("DKIT_IMPORT_INSTALLED=1, but dkit is imported from the source tree: run from outside it")
# `make test-python-asan` preloads GCC's AddressSanitizer runtime. Its allocator (GCC 12's
# libsanitizer) takes no lock around fork(): a child forked while another thread is inside
# malloc inherits the allocator's region mutex held and waits on it forever (seen in CI: the
# child's stack ends in SizeClassAllocator64::GetFromAllocator; newer LLVM runtimes lock it in
# asan's fork handlers). Tests that fork beside an allocating thread skip there and run in the
# plain and ThreadSanitizer suites, whose allocators survive fork().
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
# A sanitizer's instrumentation slows dkit's code (built at -O1 with checks on every access) and
# not torchvision's, so a speed ratio taken under it measures the sanitizer: the benchmark smoke
# tests still run there, and check their figures, but hold dkit to its speed floors only in the
# plain suites (CI's ASan run once put roi_align's forward at 0.61x torchvision, floor 0.5x).
UNDER_SANITIZER = any(rt in os.environ.get("LD_PRELOAD", "") for rt in ("libasan", "libtsan"))
for p in (PKG_ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)


def load_dkit_build():
    """The source tree's dkit_build.py (the one description of the build), loaded by its path:
    putting the source tree on sys.path would let its dkit shadow the one under test."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dkit_build", os.path.join(ROOT, "dkit_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_rois(rng, k, n, height, width, spatial_scale=1.0, outside=0.25, min_size=0.5):
    """[K, 5] float64 rois (batch_index, x1, y1, x2, y2) in image coordinates (feature size /
    spatial_scale), about `outside` of each box's extent allowed past the image borders."""
    ih, iw = height / spatial_scale, width / spatial_scale
    x1 = rng.uniform(-outside * iw, iw * (1 + outside) - min_size, k)
    y1 = rng.uniform(-outside * ih, ih * (1 + outside) - min_size, k)
    x2 = x1 + rng.uniform(min_size, 0.7 * iw, k)
    y2 = y1 + rng.uniform(min_size, 0.7 * ih, k)
    b = rng.integers(0, n, k).astype(np.float64)
    return np.stack([b, x1, y1, x2, y2], axis=1)


def pytest_configure(config):
    # `make test-python-tsan` runs these under ThreadSanitizer (-m threads)
    config.addinivalue_line("markers", "threads: exercises dkit from several threads or across fork()")
    # `make dev` leaves these out (-m "not slow"): each takes seconds (a subprocess that imports
    # torch, a benchmark's smoke run, a compiler); `make test` runs them all
    config.addinivalue_line("markers", "slow: takes seconds; make dev leaves it out")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(params=["reader", "getters"])
def torch_path(request):
    """Runs a test once per way dkit._C reads torch tensors (Note [torch reader] in
    csrc/python/dk_pytorch.h): through dkit._torch_reader, and through torch's Python getters.
    The reader must be there whenever torch's C++ headers are (make deps installs them), unless
    the build was told DKIT_TORCH_READER=0."""
    torch = pytest.importorskip("torch")
    from dkit import _C

    state = _C._torch_reader()
    if request.param == "reader" and state is None:
        if os.environ.get("DKIT_TORCH_READER") == "0":
            pytest.skip("DKIT_TORCH_READER=0: the reader is not built, or not loaded (make test-python-noreader)")
        headers = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc")
        if os.path.isdir(headers):
            pytest.fail("torch's headers are installed but dkit._torch_reader is not loaded")
        pytest.skip("dkit._torch_reader not built (no torch C++ headers)")
    if state is not None:
        _C._torch_reader(request.param == "reader")
    yield request.param
    if state is not None:
        _C._torch_reader(state)


def _annotation_text(a):
    """An annotation as text, with typing's old generic aliases spelled as the builtins that
    replaced them (torchvision moved from List[Tensor] to list[Tensor]: the same type)."""
    import inspect
    import re

    if a is inspect.Parameter.empty:
        return ""
    text = a if isinstance(a, str) else inspect.formatannotation(a)
    return re.sub(r"\b(?:typing\.)?(List|Tuple|Dict|Set)\[", lambda m: m.group(1).lower() + "[", text)


def assert_signature_covers(ours, theirs):
    """`ours` takes every call `theirs` takes, meaning the same: theirs' parameters, in order, with
    the same names, kinds, defaults and annotations (up to Annotation spelling), then only
    parameters with defaults (a newer release's additions, e.g. torchvision's box_iou fmt)."""
    import inspect

    a, b = inspect.signature(ours), inspect.signature(theirs)
    pa, pb = list(a.parameters.values()), list(b.parameters.values())
    assert len(pa) >= len(pb), (a, b)
    for x, y in zip(pa, pb):
        assert (x.name, x.kind, x.default) == (y.name, y.kind, y.default), (a, b)
        assert _annotation_text(x.annotation) == _annotation_text(y.annotation), (a, b)
    assert all(x.default is not inspect.Parameter.empty for x in pa[len(pb):]), (a, b)
    assert _annotation_text(a.return_annotation) == _annotation_text(b.return_annotation), (a, b)
