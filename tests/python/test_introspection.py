"""The package surface: lazy imports, dkit.profile(), dkit.dispatch, backends, show_config."""

import io
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import dkit
from dkit import _C

from conftest import PKG_ROOT


def _x():
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    return x, np.array([[0, 1, 1, 6, 6], [0, 0, 2, 7, 5]], np.float32)


def test_import_dkit_is_light():
    script = (
        "import sys, dkit\n"
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        "import dkit.ops, dkit.dispatch\n"
        "dkit.show_config(file=open('/dev/null', 'w')); dkit.backends(); dkit.dispatch.ops()\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_version_and_public_names():
    assert dkit.__version__ == _C.config()["version"]
    for name in dkit.__all__:  # dkit.nn imports torch, which the tests always have
        assert getattr(dkit, name) is not None
    assert dkit.DkitError is _C.DkitError
    assert issubclass(dkit.DkitValueError, ValueError) and issubclass(dkit.DkitValueError, RuntimeError)
    with pytest.raises(AttributeError):
        dkit.no_such_thing  # noqa: B018
    assert "roi_align" in dir(dkit.ops) and "profile" in dir(dkit)


def test_paths():
    inc = dkit.get_include()
    assert os.path.isdir(inc)
    assert os.path.exists(dkit.get_library())


def test_dispatch_ops_and_schemas():
    ops = dkit.dispatch.ops()
    assert {"roi_align_forward", "roi_align_backward"} <= set(ops)
    s = ops["roi_align_forward"]
    assert s.startswith("dkit::roi_align_forward(Tensor input, Tensor rois, Tensor(a!) output")
    assert s == dkit.dispatch.schema("roi_align_forward") == _C.ops.roi_align_forward.schema
    assert "int pool_mode" in ops["roi_align_backward"] and "bool aligned" in ops["roi_align_backward"]
    with pytest.raises(_C.DkitValueError):
        dkit.dispatch.schema("no_such_op")


def test_dispatch_table_has_provenance():
    t = dkit.dispatch.table("roi_align_forward")
    assert t.op == "roi_align_forward" and len(t) >= 2
    by_key = {s.key: s for s in t}
    assert by_key["cpu"].provenance == "kernel" and by_key["cpu"].kernel
    assert by_key["Profile"].boxed and by_key["Profile"].provenance == "fallback"
    assert t[0].key == "Profile"  # highest priority first
    assert "cpu" in str(t) and "roi_align_forward" in str(t)
    assert str(t) == dkit.dispatch.dump("roi_align_forward")
    with pytest.raises(_C.DkitValueError):
        dkit.dispatch.table("no_such_op")


def test_include_exclude_nest_and_restore():
    before = dkit.dispatch.tls()
    with dkit.dispatch.include("Profile"):
        inc, _ = dkit.dispatch.tls()
        assert inc & (1 << _C.KEY_PROFILE)
        with dkit.dispatch.exclude("Profile"):
            assert dkit.dispatch.tls()[1] & (1 << _C.KEY_PROFILE)
        assert not dkit.dispatch.tls()[1] & (1 << _C.KEY_PROFILE)
    assert dkit.dispatch.tls() == before


def test_excluding_the_backend_fails_cleanly():
    x, rois = _x()
    with dkit.dispatch.exclude("cpu"):
        with pytest.raises(_C.DkitError, match="roi_align_forward") as info:
            dkit.ops.roi_align(x, rois, 2)
    assert isinstance(info.value, RuntimeError)
    assert dkit.ops.roi_align(x, rois, 2).shape == (2, 3, 2, 2)


def test_profile_counts_calls_in_the_block_only():
    x, rois = _x()
    dkit.ops.roi_align(x, rois, 2)  # outside: not counted
    with dkit.profile() as prof:
        for _ in range(3):
            dkit.ops.roi_align(x, rois, 2)
        dkit.ops.roi_align(x, rois, 2, pool_mode="max")
        live = prof.rows
    dkit.ops.roi_align(x, rois, 2)  # after: not counted
    assert [r.op for r in live] == ["roi_align_forward"] and live[0].count == 4
    row = prof["roi_align_forward"]
    assert row.count == 4 and row.backend == "cpu" and row.total_ns > 0 and row.mean_us > 0
    text = str(prof)
    assert "roi_align_forward" in text and "calls" in text and "mean us" in text
    assert "roi_align_backward" not in text
    assert repr(prof).startswith("<dkit.Profile 1 ops")
    with pytest.raises(KeyError):
        prof["roi_align_backward"]
    assert not dkit.dispatch.tls()[0] & (1 << _C.KEY_PROFILE)  # the block popped its include


def test_profile_nested_and_reset_and_empty():
    x, rois = _x()
    with dkit.profile() as outer:
        dkit.ops.roi_align(x, rois, 2)
        with dkit.profile() as inner:
            dkit.ops.roi_align(x, rois, 2)
    assert outer["roi_align_forward"].count == 2 and inner["roi_align_forward"].count == 1
    with dkit.profile(reset=True) as p:
        pass
    assert len(p) == 0 and "no dkit ops" in str(p)
    assert all(r[2] == 0 for r in _C.profile_rows()) or not _C.profile_rows()


@pytest.mark.threads
def test_profile_is_thread_local():
    x, rois = _x()
    done = threading.Event()

    def other():
        dkit.ops.roi_align(x, rois, 2)
        done.set()

    with dkit.profile() as p:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert done.is_set() and len(p) == 0


def test_profile_sees_torch_backward():
    import torch

    x = torch.rand(1, 3, 8, 8, requires_grad=True)
    rois = torch.tensor([[0, 1.0, 1, 6, 6]])
    with dkit.profile() as prof:
        dkit.ops.roi_align(x, rois, 2).sum().backward()
    assert prof["roi_align_forward"].count == 1 and prof["roi_align_backward"].count == 1


def test_backends_and_load_backend_errors():
    names = [b.name for b in dkit.backends()]
    assert "cpu" in names
    assert dkit.backends()[names.index("cpu")].path is None
    with pytest.raises(_C.DkitError) as info:
        dkit.load_backend("/no/such/libvendor.so")
    assert isinstance(info.value, (OSError, ImportError, RuntimeError))


def test_show_config_prints_and_returns():
    buf = io.StringIO()
    cfg = dkit.show_config(file=buf)
    text = buf.getvalue()
    for key in ("version", "compiler", "openmp", "openmp_max_threads", "num_threads", "backends"):
        assert key in cfg and key in text
    assert cfg["version"] == dkit.__version__ and "cpu" in cfg["backends"]
    assert isinstance(cfg["openmp_max_threads"], int) and cfg["openmp_max_threads"] >= 1


@pytest.mark.threads
def test_set_num_threads_is_dkits_own_and_process_wide():
    # dkit.set_num_threads sets the count for every calling thread (OpenMP's own default is per
    # thread, and torch's ops set it); 0 goes back to OpenMP's default.
    before = dkit.get_num_threads()
    try:
        dkit.set_num_threads(3)
        assert dkit.get_num_threads() == 3 and _C.config()["num_threads"] == 3
        seen = []
        t = threading.Thread(target=lambda: seen.append(dkit.get_num_threads()))
        t.start()
        t.join()
        assert seen == [3]
        # results do not depend on it (Note [Deterministic backward]); the count is used
        x = np.random.default_rng(0).standard_normal((2, 8, 40, 40)).astype(np.float32)
        rois = np.array([[0, 0, 0, 30, 30], [1, 5, 5, 39, 20]] * 200, np.float32)
        outs = []
        for n in (1, 2):
            dkit.set_num_threads(n)
            outs.append(dkit.ops.roi_align(x, rois, 7, 1.0, 2))
        np.testing.assert_array_equal(outs[0], outs[1])
        with pytest.raises(_C.DkitValueError, match="must be >= 0"):
            dkit.set_num_threads(-2)
        with pytest.raises(_C.DkitValueError, match="is outside"):
            dkit.set_num_threads(2**40)
        with pytest.raises(_C.DkitTypeError, match="must be an int, got bool"):
            dkit.set_num_threads(True)
        assert dkit.get_num_threads() == 2  # refused calls change nothing
        dkit.set_num_threads(0)
        assert dkit.get_num_threads() == _C.config()["openmp_max_threads"]
    finally:
        dkit.set_num_threads(0)
    assert dkit.get_num_threads() == before


def test_show_config_prints_to_stdout(capsys):
    dkit.show_config()
    assert "dkit configuration" in capsys.readouterr().out


def test_scopes_that_end_out_of_order_leave_nothing_behind():
    """Two dkit.profile() blocks (or include/exclude blocks) driven by generators can exit
    inner-before-outer or the other way round, or on another thread; every key they added goes
    away with the last of them (Note [Scopes that end out of order])."""
    import threading

    import dkit

    base = dkit.dispatch.tls()

    def block(cm):
        with cm:
            yield

    for make in (lambda: dkit.profile(), lambda: dkit.dispatch.include("Profile"),
                 lambda: dkit.dispatch.exclude("cpu")):  # fmt: skip
        a, b = block(make()), block(make())
        next(a), next(b)
        assert dkit.dispatch.tls() != base
        for g in (a, b):  # the outer one ends first
            next(g, None)
        assert dkit.dispatch.tls() == base
        # a block that ends on another thread takes its keys out of its own thread's sets
        c = block(make())
        next(c)
        t = threading.Thread(target=lambda: next(c, None))
        t.start()
        t.join()
        assert dkit.dispatch.tls() == base


def test_bad_keys_name_the_call():
    import dkit
    from dkit import _C

    with pytest.raises(_C.DkitValueError, match=r"dispatch.include: a key id is in \[0, 64\), got -1"):
        with dkit.dispatch.include(-1):
            pass
    with pytest.raises(_C.DkitTypeError, match="dispatch.exclude: keys are names or key ids"):
        with dkit.dispatch.exclude(1.5):
            pass
    assert isinstance(_C.DkitValueError("x"), RuntimeError)
