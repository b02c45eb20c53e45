"""Hostile input, threads and forks (the hardening issue): each case here crashed, hung or
corrupted memory before its fix. Cases that could crash run in a child process."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")

from dkit import _C  # noqa: E402


def _child(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=env)  # fmt: skip
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stdout}{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("reader", [True, False])
def test_subclassed_boxes_freeing_the_input_during_dlpack(reader):
    # The review's crash: a boxes subclass whose __torch_function__ (run by its __dlpack__) frees
    # the input's memory. Note [Conversion order]: the input is read after that code ran (with the
    # reader), or checked again after it (without): refused with a clear error either way.
    out = _child(f"""
        import pytest, torch, dkit
        from dkit import _C
        if _C._torch_reader() is not None:
            _C._torch_reader({reader!r})
        # 64 MiB inputs: unmapped when freed, so a stale read crashes (it did, before the fix)
        for free in ("x.storage().resize_(0)", "x.set_(torch.empty(0))"):
            x = torch.randn(1, 16, 1024, 1024)
            class Boxes(torch.Tensor):
                @classmethod
                def __torch_function__(cls, func, types, args=(), kwargs=None):
                    if getattr(func, "__name__", "") == "__dlpack__":  # only while dkit converts it
                        exec(free)
                    return super().__torch_function__(func, types, args, kwargs or {{}})
            boxes = torch.tensor([[0.0, 0, 0, 500, 500]] * 8).as_subclass(Boxes)
            with pytest.raises(_C.DkitError, match="'input'"):
                dkit.ops.roi_align(x, boxes, 7)
        print("ok")
        """)
    assert out.strip().endswith("ok")


@pytest.mark.parametrize("reader", [True, False])
def test_producer_freeing_the_output_during_dlpack(reader):
    # An output whose memory is freed by another argument's producer code: refused, never written.
    out = _child(f"""
        import pytest, torch
        from dkit import _C
        if _C._torch_reader() is not None:
            _C._torch_reader({reader!r})
        x = torch.randn(1, 4, 32, 32)
        out = torch.zeros(64, 4, 128, 128)  # 16 MiB
        class Rois:
            def __init__(self, t):
                self.t = t
            def __dlpack_device__(self):
                return (1, 0)
            def __dlpack__(self, **kw):
                out.storage().resize_(0)
                return self.t.__dlpack__()
        rois = Rois(torch.tensor([[0.0, 0, 0, 20, 20]] * 64))
        with pytest.raises(_C.DkitError, match="'output'"):
            _C.ops.roi_align_forward(x, rois, out, None, None, 128, 128, 1.0, 2, 1, False)
        print("ok")
        """)
    assert out.strip().endswith("ok")


def test_absurd_thread_counts_are_refused_where_set():
    before = _C.get_num_threads()
    for n in (100000, 40000, 1025):
        with pytest.raises(_C.DkitValueError, match="at most 1024 threads"):
            _C.set_num_threads(n)
        assert _C.get_num_threads() == before  # unchanged
    _C.set_num_threads(1024)  # the bound itself is accepted
    _C.set_num_threads(0)


def test_sizes_that_would_wrap_are_refused():
    # The review's crash: an expanded input with H * W = 2^61 + 8 (8 bytes of real memory) made the
    # per-thread scratch size wrap; a tiny buffer was overrun (SIGSEGV in max mode for every dtype).
    # Note [Sizes that cannot wrap]: refused with a clear error, in a child in case it is not.
    out = _child("""
        import pytest, torch, dkit
        from dkit import _C
        for mode in ("max", "avg"):
            for dt in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
                x = torch.zeros(1, 1, 1, 1, dtype=dt).expand(1, 1, 1073807362, 2147352580)
                boxes = torch.tensor([[0, 0.0, 0.0, 10.0, 10.0]], dtype=dt)
                with pytest.raises(_C.DkitValueError, match="sizes too large for the CPU kernel"):
                    dkit.ops.roi_align(x, boxes, 1, pool_mode=mode)
        print("ok")
        """)
    assert out.strip().endswith("ok")


def test_empty_work_returns_at_once_and_reads_each_row_once():
    # roi_align(x with C = 0, boxes.expand(2**34, 5)) walked every box in the check (minutes);
    # torchvision returns at once. No work: nothing read; an expanded row is one row.
    import time

    boxes = torch.tensor([[0, 1.0, 1.0, 5.0, 5.0]])
    t0 = time.perf_counter()
    out = _C_roi(torch.randn(1, 0, 8, 8), boxes.expand(2**34, 5))
    assert out.shape == (2**34, 0, 2, 2)
    # with work, an expanded boxes tensor is checked as its one row (a bad one is still caught)
    bad = torch.tensor([[3, 1.0, 1.0, 5.0, 5.0]]).expand(2**20, 5)
    with pytest.raises(_C.DkitIndexError, match="batch index"):
        _C_roi(torch.randn(1, 1, 8, 8), bad)
    assert time.perf_counter() - t0 < 10


def _C_roi(x, boxes):
    import dkit

    return dkit.ops.roi_align(x, boxes, 2)
