"""The host output cache (Note [Host output cache] in csrc/cpu/dk_host_cache.h; Note [Large
outputs from the host cache] in dkit/_frameworks/torch.py): large CPU outputs come from it,
equal what torchvision computes, go back to it when their tensor dies (on any thread), and are
handed out again; small outputs, subclasses and other frameworks keep their own allocation. And
DKIT_TUNE, which sets the cache's bound like any tunable."""

import gc
import importlib
import threading

import pytest

from test_hardening import _child

torch = pytest.importorskip("torch")
tv_ops = pytest.importorskip("torchvision.ops")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402

MIN = _C.host_cache_stats()["min_bytes"]


@pytest.fixture(autouse=True)
def fresh_cache():
    prev = _C.tunable("host_cache.max_bytes")
    gc.collect()
    dkit.empty_cache()
    yield
    _C.tunable("host_cache.max_bytes", prev)
    gc.collect()
    dkit.empty_cache()


def _problem(channels=64):
    # an output of 256 x channels x 7 x 7 float32: 12.8 MB for 256 channels, above MIN
    torch.manual_seed(0)
    x = torch.randn(2, channels, 40, 48)
    k = 256
    xy = torch.rand(k, 2) * torch.tensor([44.0, 36.0])
    wh = torch.rand(k, 2) * 12 + 1
    rois = torch.cat([torch.randint(0, 2, (k, 1)).float(), xy, xy + wh], 1)
    return x, rois


def test_large_outputs_come_from_the_cache_and_go_back_to_it():
    x, rois = _problem(256)
    assert 256 * 256 * 49 * 4 >= MIN
    before = dkit.host_cache_stats()
    y = dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)
    s = dkit.host_cache_stats()
    assert s["live_blocks"] == before["live_blocks"] + 1 and s["misses"] == before["misses"] + 1
    assert type(y) is torch.Tensor and y.is_contiguous() and y.dtype == x.dtype and y.shape == (256, 256, 7, 7)
    torch.testing.assert_close(y, tv_ops.roi_align(x, rois, 7, 1.0, 2, True), rtol=1e-5, atol=1e-5)
    ptr = y.data_ptr()
    del y
    s = dkit.host_cache_stats()
    assert s["live_blocks"] == before["live_blocks"] and s["cached_blocks"] == 1
    # The next call of the same size gets the same memory, and the right values again.
    y = dkit.ops.roi_align(x, rois, 7, 1.0, 0, "avg", True)
    assert y.data_ptr() == ptr and dkit.host_cache_stats()["hits"] == s["hits"] + 1
    torch.testing.assert_close(y, tv_ops.roi_align(x, rois, 7, 1.0, 0, True), rtol=1e-5, atol=1e-5)


def test_outputs_from_the_cache_are_ordinary_tensors_in_autograd():
    x, rois = _problem(256)
    xr = x.clone().requires_grad_()
    y = dkit.ops.roi_align(xr, rois, 7, 1.0, 2, "avg", True)
    g = torch.randn_like(y)
    y.backward(g)
    xt = x.clone().requires_grad_()
    tv_ops.roi_align(xt, rois, 7, 1.0, 2, True).backward(g)
    torch.testing.assert_close(xr.grad, xt.grad, rtol=1e-5, atol=1e-5)
    y2 = y.detach() * 2  # an ordinary tensor: torch ops read and write it
    y.detach().add_(1.0)
    assert torch.equal(y2 / 2 + 1, y.detach())
    # Its storage is not resizable (torch's rule for memory it did not allocate); documented.
    with pytest.raises(RuntimeError):
        y.detach().resize_(10**8)


def test_small_outputs_subclasses_and_numpy_keep_their_own_allocation():
    x, rois = _problem(4)  # 256 x 4 x 49 x 4 bytes: far below MIN
    before = dkit.host_cache_stats()
    dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)

    class Sub(torch.Tensor):
        pass

    xb, rb = _problem(256)
    ys = dkit.ops.roi_align(xb.as_subclass(Sub), rb, 7, 1.0, 2, "avg", True)
    assert isinstance(ys, Sub)
    yn = dkit.ops.roi_align(xb.numpy(), rb.numpy(), 7, 1.0, 2, "avg", True)
    assert yn.shape == (256, 256, 7, 7)
    s = dkit.host_cache_stats()
    assert s["misses"] == before["misses"] and s["hits"] == before["hits"]


def test_box_iou_output_from_the_cache():
    torch.manual_seed(0)
    a = torch.rand(2000, 4) * 100
    a[:, 2:] += a[:, :2]
    before = dkit.host_cache_stats()
    out = dkit.ops.box_iou(a, a)  # 2000 x 2000 float32: 16 MB
    assert dkit.host_cache_stats()["live_blocks"] == before["live_blocks"] + 1
    torch.testing.assert_close(out, tv_ops.box_iou(a, a), rtol=0, atol=1e-6)


def test_tensors_released_on_other_threads():
    x, rois = _problem(256)
    ys = [dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True) for _ in range(4)]
    assert dkit.host_cache_stats()["live_blocks"] == 4

    def drop(box):
        box.clear()  # the last reference goes here, on this thread

    boxes = [[y] for y in ys]
    del ys
    threads = [threading.Thread(target=drop, args=(b,)) for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = dkit.host_cache_stats()
    assert s["live_blocks"] == 0 and s["cached_blocks"] == 4


def test_the_bound_and_empty_cache():
    x, rois = _problem(256)
    _C.tunable("host_cache.max_bytes", 0)  # off: nothing is kept
    y = dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)
    del y
    assert dkit.host_cache_stats()["cached_bytes"] == 0
    _C.tunable("host_cache.max_bytes", 256 << 20)
    y = dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)
    del y
    assert dkit.host_cache_stats()["cached_bytes"] > 0
    dkit.empty_cache()
    s = dkit.host_cache_stats()
    assert s["cached_bytes"] == 0 and s["cached_blocks"] == 0


def test_a_forked_child_uses_the_cache_it_inherited():
    _child(
        """
        import os, torch, dkit
        x = torch.randn(2, 256, 40, 48)
        rois = torch.tensor([[0, 1.0, 1.0, 20.0, 30.0]] * 256)
        y = dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)
        del y  # the parent caches a block
        pid = os.fork()
        if pid == 0:
            torch.set_num_threads(1)  # for torch's own isfinite (test_hardening._FORK_SETUP's note)
            y = dkit.ops.roi_align(x, rois, 7, 1.0, 2, "avg", True)
            ok = dkit.host_cache_stats()["hits"] >= 1 and bool(torch.isfinite(y).all())
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        """
    )


def test_dkit_tune_sets_tunables_at_load_and_reports_what_it_ignores():
    import os
    import subprocess
    import sys

    from conftest import PKG_ROOT

    env = dict(os.environ, PYTHONPATH=PKG_ROOT, DKIT_TUNE="host_cache.max_bytes=0,no.such=1,roi_align.order=9")
    code = "from dkit import _C; print(_C.tunable('host_cache.max_bytes'), _C.tunable('roi_align.order'))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "-1"]  # set; out of range: the default stays
    assert "no tunable named 'no.such'" in r.stderr
    assert "roi_align.order=9 is outside [-1, 1]" in r.stderr
    # decimal only (Note [DKIT_TUNE]): a leading zero is not octal, and hex is refused
    env["DKIT_TUNE"] = "host_cache.max_bytes=010,roi_align.order=0x1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["10", "-1"], r.stdout + r.stderr
    assert "the value of roi_align.order is not a decimal integer" in r.stderr
    with pytest.raises(dkit.DkitError, match="no tunable named 'nope'"):
        _C.tunable("nope")
    with pytest.raises(ValueError, match="must be in"):
        _C.tunable("host_cache.max_bytes", -1)


def test_the_threshold_set_at_run_time_reaches_torch_outputs():
    # Note [Tunables Python reads] in csrc/python/dk_pytunables.c: Python keeps the threshold in a
    # global, which follows tunable(): an output of 1 MiB comes from torch while the threshold is
    # 2 MiB, from the cache once it is 1 MiB, and from the cache again at the default (256 KiB)
    fw = importlib.import_module("dkit._frameworks.torch")
    old = _C.tunable("host_cache.min_bytes")
    like = torch.empty(0)

    def cached(threshold):
        _C.tunable("host_cache.min_bytes", threshold)
        assert fw._CACHE_MIN == threshold
        before = dkit.host_cache_stats()["live_blocks"]
        y = fw.new_empty(like, (1 << 18,))  # 1 MiB of float32
        got = dkit.host_cache_stats()["live_blocks"] - before
        del y
        return got

    try:
        assert cached(2 << 20) == 0
        assert cached(1 << 20) == 1
    finally:
        _C.tunable("host_cache.min_bytes", old)
    assert fw._CACHE_MIN == old == 256 << 10
    assert cached(old) == 1
    with pytest.raises(_C.DkitError, match="no tunable named"):
        _C._tunable_watch("no.such", print)
