"""dkit's torch ops (dkit/_torch_library.py, csrc/python/dk_torch_kernel.cpp) attacked as a
hostile user would: wrong arguments through torch.ops.dkit and TorchScript, kernels that raise
or return the wrong thing, threads, fork, import orders and reloads, autograd modes. Every case
must end in a clear error (the eager function's own, where there is one), never a crash, a hang
or a silently wrong result."""

import contextlib
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

import dkit  # noqa: E402
import dkit.nn  # noqa: E402
import dkit.ops  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import PKG_ROOT  # noqa: E402

Tensor = torch.Tensor
T = torch.ops.dkit


def _feature(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 12, 12, generator=g, dtype=dtype)
    rois = torch.tensor([[0, 1, 1, 9, 7], [1, 0.5, 2, 11, 11], [0, 3, 3, 4, 5]], dtype=dtype)
    return x, rois


def _boxes(n, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    b = torch.rand(n, 4, generator=g, dtype=dtype) * 50
    b[:, 2:] += b[:, :2] + 1
    return b, torch.rand(n, generator=g, dtype=dtype)


def _outcome(call):
    """(result, None) or (None, (exception type, message))."""
    try:
        return call(), None
    except Exception as e:  # the very thing compared
        return None, (type(e), str(e))


def _python(code, *argv, timeout=180):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


# ------------------------------------------------------------------------------------------
# Arguments: the torch op answers exactly as the eager function


def _argument_cases():
    x, rois = _feature()
    b, s = _boxes(20)
    return [
        ("roi_align", (x, rois, [2**40, 2])),
        ("roi_align", (x, rois, [-1, 2])),
        ("roi_align", (x, rois, [0, 0])),
        ("roi_align", (x, rois, [2, 2, 2])),
        ("roi_align", (x, rois, [2, 2], float("nan"))),
        ("roi_align", (x, rois, [2, 2], float("inf"))),
        ("roi_align", (x, rois, [2, 2], -1.0)),
        ("roi_align", (x, rois, [2, 2], 1.0, -5)),
        ("roi_align", (x, rois, [2, 2], 1.0, 2**40)),
        ("roi_align", (x, rois, [2, 2], 1.0, 0, "median")),
        ("roi_align", (x, rois.long(), [2, 2])),
        ("roi_align", (x, rois.double(), [2, 2])),
        ("roi_align", (x.long(), rois.long(), [2, 2])),
        ("roi_align", (x[0], rois, [2, 2])),
        ("roi_align", (x, rois[:, :4], [2, 2])),
        ("roi_align", (x, rois[0], [2, 2])),
        ("roi_align", (x, torch.zeros(0, 5), [2, 2])),
        ("roi_align", (torch.zeros(0, 3, 4, 4), torch.zeros(0, 5), [2, 2])),
        ("roi_align", (x.to(memory_format=torch.channels_last), rois, [3, 2], 0.5, 2, "max")),
        ("roi_align", (x[:, :, ::2, 1::2], rois, [3, 2])),
        ("roi_align", (x.half(), rois.half(), [2, 2], 1.0, 0, "max")),
        ("roi_align", (x.bfloat16(), rois.bfloat16(), [2, 2])),
        ("roi_align", (x.double(), rois.double(), [2, 2])),
        ("roi_align", (x, torch.tensor([[5.0, 1, 1, 3, 3]]), [2, 2])),
        ("roi_align", (x, torch.tensor([[0.0, float("nan"), 1, 3, 3]]), [2, 2])),
        ("roi_align", (x.to("meta"), rois.to("meta"), [2, 2])),
        ("roi_align", (x, [rois[:2, 1:].double()], [2, 2])),
        ("roi_align", (x, [rois[:1, 1:]] * 3, [2, 2])),
        ("roi_align", (x, [torch.zeros(1, 4, 1)], [2, 2])),
        ("nms", (b, s, float("nan"))),
        ("nms", (b, s, float("inf"))),
        ("nms", (b.long(), s, 0.5)),
        ("nms", (b, s.double(), 0.5)),
        ("nms", (b[:, :3], s, 0.5)),
        ("nms", (b, s[:5], 0.5)),
        ("nms", (torch.tensor(1.0), s, 0.5)),
        ("nms", (torch.zeros(0, 4), torch.zeros(0), 0.5)),
        ("nms", (b.t().contiguous().t(), s, 0.5)),
        ("nms", (b.half(), s.half(), 0.5)),
        ("nms", (b, s, 0.5, s, 0)),
        ("nms", (b, s, 0.5, None, 5)),
        ("nms", (b, s, 0.5, None, 2**62)),
        ("batched_nms", (b, s, torch.zeros(3), 0.5)),
        ("soft_nms", (b, s, 0.3, 0.5, 1e-3, "cubic")),
        ("soft_nms", (b, s, float("nan"), float("nan"), float("nan"))),
        ("box_iou", (b.long(), b.long())),
        ("box_iou", (b[0], b)),
        ("box_iou", (b, b.double())),
        ("bbox_overlaps", (b, b, "dice")),
        ("bbox_overlaps", (b, b, "iou", False, 3)),
        ("nms_rotated", (torch.zeros(4, 4), torch.zeros(4), 0.5)),
        ("box_iou_rotated", (torch.zeros(4, 5), torch.zeros(4, 5), "none")),
    ]


@pytest.mark.parametrize("case", range(len(_argument_cases())))
def test_torch_op_answers_as_the_eager_function(case):
    name, args = _argument_cases()[case]
    expect, expect_error = _outcome(lambda: getattr(dkit.ops, name)(*args))
    got, error = _outcome(lambda: getattr(T, name)(*args))
    assert error == expect_error, (name, error, expect_error)
    if error is None:
        pairs = zip(got, expect) if isinstance(expect, tuple) else [(got, expect)]
        for a, b in pairs:
            if b.is_meta:  # meta tensors have no values to compare (Note [Meta tensors])
                assert a.is_meta and a.shape == b.shape and a.dtype == b.dtype, name
            else:
                assert torch.equal(a, b), name
    else:
        assert issubclass(error[0], RuntimeError) and error[0].__module__ != "builtins", error  # a dkit error


def test_scripted_calls_keep_the_eager_message():
    x, rois = _feature()
    b, s = _boxes(20)
    roi_align = torch.jit.script(dk_tv.roi_align)
    nms = torch.jit.script(dk_tv.nms)
    layer = torch.jit.script(dkit.nn.RoIAlign(2))
    for scripted, eager, args in [
        (roi_align, dk_tv.roi_align, (x, rois, [2**40, 2])),
        (roi_align, dk_tv.roi_align, (x, rois, 2, float("nan"))),
        (roi_align, dk_tv.roi_align, (x, rois.long(), 2)),
        (roi_align, dk_tv.roi_align, (x, torch.tensor([[5.0, 1, 1, 3, 3]]), 2)),
        (layer, dkit.nn.RoIAlign(2), (x, [torch.zeros(1, 4, 1)])),
        (layer, dkit.nn.RoIAlign(2), (x, rois.double())),
        (nms, dk_tv.nms, (b[:, :3], s, 0.5)),
        (nms, dk_tv.nms, (b.long(), s, 0.5)),
    ]:
        _, (etype, message) = _outcome(lambda: eager(*args))
        with pytest.raises(RuntimeError) as info:
            scripted(*args)
        assert str(info.value).rstrip().endswith(message), (str(info.value), message)


def test_torch_op_argument_types_are_refused_by_torch_with_the_schema():
    x, rois = _feature()
    b, s = _boxes(5)
    for call in (
        lambda: T.roi_align(x),
        lambda: T.roi_align(x, rois, "2"),
        lambda: T.roi_align(x, rois, [2, 2], "1.0"),
        lambda: T.nms(b, s, "0.5"),
        lambda: T.nms(b, s, 0.5, None, 0, 1),
    ):
        with pytest.raises(RuntimeError, match="dkit::"):
            call()


def test_none_where_a_tensor_is_required_names_the_op_and_argument():
    x, rois = _feature()
    b, s = _boxes(5)
    for call, op, what in [
        (lambda: T.roi_align(None, rois, [2, 2]), "roi_align", "input"),
        (lambda: dkit.ops.roi_align(None, rois, 2), "roi_align", "input"),
        (lambda: T.roi_align(x, None, [2, 2]), "roi_align", "boxes"),
        (lambda: T.nms(None, s, 0.5), "nms", "boxes"),
        (lambda: dkit.ops.nms(None, s, 0.5), "nms", "boxes"),
        (lambda: T.nms(b, None, 0.5), "nms", "scores"),
        (lambda: T.box_iou(None, b), "box_iou", "boxes1"),
        (lambda: dkit.ops.bbox_overlaps(None, b), "bbox_overlaps", "bboxes1"),
        (lambda: dkit.ops.box_iou_rotated(None, b), "box_iou_rotated", "bboxes1"),
        (lambda: dkit.ops.nms_rotated(None, s, 0.5), "nms_rotated", "dets"),
        (lambda: dkit.ops.roi_align("x", rois, 2), "roi_align", "input"),
    ]:
        with pytest.raises(_C.DkitTypeError, match=rf"^{op}: .*{what}.*NoneType|^{op}: .*{what}.*str"):
            call()


# ------------------------------------------------------------------------------------------
# The kernel holder: exceptions and results of every kind

_TEST_NS = "dkit_hardening_test"
_test_library = []


class _StrFails(Exception):
    def __str__(self):
        raise ValueError("no str")


class _Base(BaseException):
    pass


def _one(x, mode):
    if mode == "ok":
        return x + 1
    if mode == "keyboard":
        raise KeyboardInterrupt("stop")
    if mode == "base":
        raise _Base("base")
    if mode == "str_fails":
        raise _StrFails()
    if mode == "long":
        raise ValueError("m" * 1_000_000 + "end")
    if mode == "surrogate":
        raise ValueError("bad \udcff char")
    if mode == "empty":
        raise StopIteration
    if mode == "runtime":
        raise _C.DkitValueError("dkit_hardening_test: a dkit error")
    return {"none": None, "str": "x", "int": 5, "pair": (x, x)}[mode]


def _two(x, mode):
    return {"ok": (x, x), "tensor": x, "one": (x,), "three": (x, x, x), "list": [x, x], "none": None,
            "bad_item": (x, "s")}[mode]  # fmt: skip


def _holder_ops():
    kernel = pytest.importorskip("dkit._torch_kernel")
    if not _test_library:
        lib = torch.library.Library(_TEST_NS, "DEF")
        lib.define("one(Tensor x, str mode) -> Tensor")
        lib.define("two(Tensor x, str mode) -> (Tensor, Tensor)")
        kernel.impl(_TEST_NS, "one", "CPU", _one)
        kernel.impl(_TEST_NS, "two", "CPU", _two)
        cu = torch.jit.CompilationUnit(
            f"def one(x: Tensor, mode: str):\n    return torch.ops.{_TEST_NS}.one(x, mode)\n"
            f"def two(x: Tensor, mode: str):\n    return torch.ops.{_TEST_NS}.two(x, mode)\n"
        )
        _test_library.append((lib, cu))
    ops = getattr(torch.ops, _TEST_NS)
    return ops, _test_library[0][1]


def _last_line(error):
    return str(error).rstrip().splitlines()[-1]


@pytest.mark.parametrize(
    "mode, eager, scripted",
    [
        ("keyboard", KeyboardInterrupt, "KeyboardInterrupt: stop"),
        ("base", _Base, "_Base: base"),
        ("str_fails", _StrFails, "_StrFails (str() of the exception failed)"),
        ("surrogate", ValueError, "ValueError: bad \\udcff char"),
        ("empty", StopIteration, "StopIteration"),
        ("runtime", _C.DkitValueError, "dkit_hardening_test: a dkit error"),
    ],
)
def test_kernel_exceptions_of_every_kind(mode, eager, scripted):
    ops, cu = _holder_ops()
    x = torch.zeros(2)
    with pytest.raises(eager):  # eager: the original exception object
        ops.one(x, mode)
    with pytest.raises(RuntimeError) as info:  # TorchScript: a message that says what it was
        cu.one(x, mode)
    assert _last_line(info.value) == "RuntimeError: " + scripted
    assert torch.equal(cu.one(x, "ok"), x + 1)  # and the interpreter goes on


def test_kernel_exception_with_a_very_long_message():
    ops, cu = _holder_ops()
    x = torch.zeros(2)
    with pytest.raises(ValueError) as info:
        ops.one(x, "long")
    assert str(info.value).endswith("m" * 100 + "end")
    with pytest.raises(RuntimeError) as info:
        cu.one(x, "long")
    assert str(info.value).rstrip().endswith("m" * 100 + "end")


@pytest.mark.parametrize(
    "op, mode, why",
    [
        ("one", "none", "NoneType, expected Tensor"),
        ("one", "str", "str (Unable to cast x to Tensor), expected Tensor"),
        ("one", "int", "int (Unable to cast 5 to Tensor), expected Tensor"),
        ("one", "pair", "tuple (Unable to cast"),
        ("two", "tensor", "Tensor, expected (Tensor, Tensor)"),
        ("two", "one", "tuple of 1 values, expected (Tensor, Tensor)"),
        ("two", "three", "tuple of 3 values, expected (Tensor, Tensor)"),
        ("two", "list", "list, expected (Tensor, Tensor)"),
        ("two", "none", "NoneType, expected (Tensor, Tensor)"),
        ("two", "bad_item", "str (Unable to cast s to Tensor), expected (Tensor, Tensor)"),
    ],
)
def test_kernel_results_of_the_wrong_type_are_refused(op, mode, why):
    # torch's converters alone would take None as an undefined tensor and a tensor of two rows
    # as a pair of tensors (Note [Checked kernel results] in dk_torch_kernel.cpp)
    ops, cu = _holder_ops()
    x = torch.zeros(2)
    message = f"{_TEST_NS}::{op}: the kernel returned {why}"
    with pytest.raises(TypeError) as info:
        getattr(ops, op)(x, mode)
    assert str(info.value).startswith(message)
    with pytest.raises(RuntimeError) as info:
        getattr(cu, op)(x, mode)
    assert _last_line(info.value).startswith("RuntimeError: TypeError: " + message)
    assert torch.equal(ops.two(x, "ok")[0], x)


# ------------------------------------------------------------------------------------------
# Threads and fork


class _Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = dk_tv.RoIAlign(2, 1.0, 2)

    def forward(self, x: Tensor, rois: Tensor, b: Tensor, s: Tensor):
        return self.pool(x, rois), dk_tv.nms(b, s, 0.5)


@pytest.mark.threads
def test_scripted_dkit_ops_from_eight_threads():
    x, rois = _feature()
    b, s = _boxes(200)
    bad = rois.clone()
    bad[0, 0] = 9
    model = torch.jit.script(_Detector())
    expect = _Detector()(x, rois, b, s)
    failures = []

    def work():
        try:
            for i in range(2000):
                if i % 100 == 7:  # errors cross the interpreter from every thread too
                    try:
                        model(x, bad, b, s)
                        failures.append("no error")
                    except RuntimeError as e:
                        if "batch index 9" not in str(e):
                            failures.append(str(e))
                    continue
                pooled, keep = model(x, rois, b, s)
                if not (torch.equal(pooled, expect[0]) and torch.equal(keep, expect[1])):
                    failures.append("wrong result")
        except BaseException as e:
            failures.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_torch_jit_fork_runs_dkit_ops_on_torch_threads():
    x, rois = _feature()
    b, s = _boxes(200)
    bad = rois.clone()
    bad[0, 0] = 9

    @torch.jit.script
    def parallel(b: Tensor, s: Tensor):
        futures = [torch.jit.fork(torch.ops.dkit.nms, b, s, 0.5, None, 0) for _ in range(4)]
        return [torch.jit.wait(f) for f in futures]

    @torch.jit.script
    def failing(x: Tensor, rois: Tensor):
        return torch.jit.wait(torch.jit.fork(torch.ops.dkit.roi_align, x, rois, [2, 2], 1.0, 0, "avg", True))

    expect = dkit.ops.nms(b, s, 0.5)
    assert all(torch.equal(k, expect) for k in parallel(b, s))
    with pytest.raises(RuntimeError, match="rois\\[0\\] has batch index 9"):
        failing(x, bad)


@pytest.mark.threads
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_calls_torch_ops():
    b, s = _boxes(200)
    expect = dkit.ops.nms(b, s, 0.5)
    model = torch.jit.script(_Detector())
    x, rois = _feature()
    pooled = model(x, rois, b, s)[0]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            ok = torch.equal(torch.ops.dkit.nms(b, s, 0.5), expect)
            ok = ok and torch.equal(model(x, rois, b, s)[0], pooled)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class _Pooled(torch.utils.data.Dataset):
    def __init__(self):
        self.model = torch.jit.script(_Detector())
        self.x, self.rois = _feature()
        self.b, self.s = _boxes(100)

    def __len__(self):
        return 6

    def __getitem__(self, i):
        pooled, keep = self.model(self.x, self.rois, self.b, self.s)
        return pooled.sum() + i, keep.numel()


@pytest.mark.threads
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_dataloader_workers_call_a_scripted_dkit_model():
    data = _Pooled()
    loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, multiprocessing_context="fork")
    got = torch.cat([batch[0] for batch in loader])
    expect = torch.stack([data[i][0] for i in range(len(data))])
    assert torch.equal(got, expect)


# ------------------------------------------------------------------------------------------
# Registration: import orders, reloads, torch unavailable


def _run_ok(code):
    r = _python(code)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert "Overriding a previously registered kernel" not in r.stderr, r.stderr
    return r


@pytest.mark.slow
def test_import_dkit_torch_library_before_torch():
    # the import hook fires while dkit._torch_library is itself loading (Note [Registration
    # requested while this module loads])
    for first in ("import dkit._torch_library", "from dkit import _torch_library", "import dkit.nn",
                  "import dkit.compat.torchvision"):  # fmt: skip
        _run_ok(
            f"""
            {first}
            import torch
            b = torch.tensor([[0, 0, 2, 2], [0, 0, 2, 2.1]]); s = torch.tensor([1.0, 0.5])
            assert torch.ops.dkit.nms(b, s, 0.5).tolist() == [0]
            print("ok")
            """
        )


def test_reloads_register_nothing_twice():
    _run_ok(
        """
        import importlib, sys
        import dkit
        importlib.reload(dkit)
        importlib.reload(dkit)  # two import hooks now: torch's import must still register once
        import torch
        import dkit._torch_library as lib
        first = lib._library
        importlib.reload(lib)
        lib.sync()
        importlib.reload(dkit)
        assert lib._library is first
        b = torch.tensor([[0, 0, 2, 2], [0, 0, 2, 2.1]]); s = torch.tensor([1.0, 0.5])
        assert torch.ops.dkit.nms(b, s, 0.5).tolist() == [0]
        assert torch.jit.script(dkit.compat.torchvision.nms)(b, s, 0.5).tolist() == [0]
        print("ok")
        """
    )


def test_import_dkit_with_torch_unavailable():
    _run_ok(
        """
        import sys
        sys.modules["torch"] = None
        import dkit
        import numpy as np
        b = np.array([[0, 0, 2, 2], [0, 0, 2, 2.1]], "f4"); s = np.array([1.0, 0.5], "f4")
        assert dkit.ops.nms(b, s, 0.5).tolist() == [0]
        assert sys.modules["torch"] is None and "dkit._torch_library" not in sys.modules
        try:
            import dkit.nn
        except ImportError:
            pass
        else:
            raise AssertionError("dkit.nn without torch")
        print("ok")
        """
    )


def test_import_dkit_stays_light():
    _run_ok(
        """
        import sys, dkit, dkit.ops
        heavy = {"torch", "numpy", "dkit._torch_library", "dkit._torch_kernel"} & set(sys.modules)
        assert not heavy, heavy
        print("ok")
        """
    )


# ------------------------------------------------------------------------------------------
# Autograd modes through the torch op


def test_autograd_modes_through_the_torch_op():
    x, rois = _feature(torch.float64)
    x.requires_grad_()
    with torch.inference_mode():
        y = T.roi_align(x, rois, [2, 2])
        assert not y.requires_grad and y.is_inference()
        plain = torch.rand(2, 3, 12, 12, dtype=torch.float64)
    assert torch.equal(T.roi_align(plain, rois, [2, 2]), dkit.ops.roi_align(plain, rois, 2))  # an inference tensor
    with torch.no_grad():
        assert not T.roi_align(x, rois, [2, 2]).requires_grad
    boxes = rois.clone().requires_grad_()
    y = T.roi_align(x, boxes, [2, 2])
    assert torch.autograd.grad(y.sum(), boxes, allow_unused=True) == (None,)  # never boxes, as dkit.ops


@pytest.mark.parametrize("route", ["torch op", "scripted compat", "scripted layer"])
def test_double_backward_through_the_torch_op_raises_dkits_error(route):
    x, rois = _feature(torch.float64)
    x.requires_grad_()
    fn = {
        "torch op": lambda z: T.roi_align(z, rois, [2, 2]),
        "scripted compat": lambda z: torch.jit.script(dk_tv.roi_align)(z, rois, 2),
        "scripted layer": lambda z: torch.jit.script(dkit.nn.RoIAlign(2, 1.0, 0, "max"))(z, rois),
    }[route]
    (grad,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    with pytest.raises(_C.DkitNotImplementedError, match="roi_align: double backward is not supported"):
        grad.sum().backward()


def test_mmcv_compat_scripted_errors_are_dkits():
    b, s = _boxes(20)
    scripted = torch.jit.script(dk_mmcv.nms)
    _, (_, message) = _outcome(lambda: dk_mmcv.nms(b.long(), s, 0.5))
    with pytest.raises(RuntimeError) as info:
        scripted(b.long(), s, 0.5)
    assert str(info.value).rstrip().endswith(message)


# ------------------------------------------------------------------------------------------
# The .out ops: outputs of every wrong kind


def _roi_out(out, argmax_y=None, argmax_x=None, mode=1, x=None, rois=None):
    fx, frois = _feature()
    x = fx if x is None else x
    rois = frois if rois is None else rois
    return T.roi_align_forward.out(x, rois, out, argmax_y, argmax_x, 2, 2, 1.0, 0, mode, True)


def test_out_ops_refuse_wrong_outputs_with_the_cores_message():
    x, rois = _feature()
    b, s = _boxes(10)
    keep, num = torch.empty(10, dtype=torch.int64), torch.empty(1, dtype=torch.int64)
    square = torch.rand(3, 3, 2, 2)
    for call, error, message in [
        (lambda: _roi_out(torch.empty(3, 3, 2, 3)), _C.DkitValueError, r"'output' must have shape \[3, 3, 2, 2\]"),
        (lambda: _roi_out(torch.empty(1)), _C.DkitValueError, r"'output' must have shape"),
        (lambda: _roi_out(torch.empty(3, 3, 2, 2, dtype=torch.float64)), _C.DkitTypeError, "'output' must be float32"),
        (lambda: _roi_out(torch.empty(1, 3, 2, 2).expand(3, 3, 2, 2)), _C.DkitValueError, "repeats its elements"),
        (lambda: _roi_out(torch.empty(3, 3, 2, 2), mode=0), _C.DkitValueError, "max pooling needs 'argmax_y'"),
        (lambda: _roi_out(square, x=square, rois=rois), _C.DkitValueError, "'output' overlaps argument 'input'"),
        (lambda: _roi_out(rois.view(-1)[:12].view(3, 1, 2, 2), x=x[:, :1], rois=rois),
         _C.DkitValueError, "overlaps argument 'rois'"),
        (lambda: T.nms.out(b, s, None, keep[:3], num, 0.5, 0), _C.DkitValueError, r"'keep' must have shape \[10\]"),
        (lambda: T.nms.out(b, s, None, keep.int(), num, 0.5, 0), _C.DkitTypeError, "'keep' must be int64"),
        (lambda: T.nms.out(b, s, None, keep, keep[:1], 0.5, 0), _C.DkitValueError, "'keep' overlaps output 'num'"),
        (lambda: T.nms.out(b, s, None, keep, num, 0.5, 2), _C.DkitValueError, "offset must be 0 or 1"),
    ]:
        with pytest.raises(error, match=message):
            call()


def test_out_ops_write_strided_and_negated_views_correctly():
    x, rois = _feature()
    expect = dkit.ops.roi_align(x, rois, 2)
    strided = torch.zeros(3, 3, 2, 4)[..., ::2]
    assert _roi_out(strided) is strided and torch.equal(strided, expect)
    negated = torch.zeros(3, 3, 2, 2)._neg_view()  # torch's dispatcher resolves it around the kernel
    _roi_out(negated)
    assert torch.equal(negated, expect)


def test_out_ops_tell_autograd_of_their_writes():
    # Note [Outputs written in place] in dk_torch_kernel.cpp
    q = torch.rand(3, 3, 2, 2, requires_grad=True)
    out = torch.zeros(3, 3, 2, 2)
    y = (q * out).sum()  # mul saves `out` for q's gradient
    version = out._version
    _roi_out(out)
    assert out._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()  # instead of a gradient computed from the overwritten values
    with torch.inference_mode():
        inference = torch.zeros(3, 3, 2, 2)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        _roi_out(inference)
    assert torch.equal(inference, torch.zeros(3, 3, 2, 2))  # refused before anything is written
    with torch.inference_mode():
        assert torch.equal(_roi_out(inference), dkit.ops.roi_align(*_feature(), 2))


def test_out_ops_refuse_arguments_that_require_grad():
    # Note [The .out ops and autograd] in dkit/_torch_library.py
    x, rois = _feature()
    b, s = _boxes(10)
    keep, num = torch.empty(10, dtype=torch.int64), torch.empty(1, dtype=torch.int64)
    for call, arg in [
        (lambda: _roi_out(torch.empty(3, 3, 2, 2), x=x.clone().requires_grad_()), "input"),
        (lambda: _roi_out(torch.empty(3, 3, 2, 2, requires_grad=True)), "output"),
        (lambda: T.nms.out(b, s.clone().requires_grad_(), None, keep, num, 0.5, 0), "scores"),
        (lambda: T.nms.out(torch.nn.Parameter(b), s, None, keep, num, 0.5, 0), "boxes"),
    ]:
        with pytest.raises(_C.DkitError, match=rf"\.out: functions with out=.*argument '{arg}' requires grad"):
            call()
        if arg != "output":  # an output that requires grad is not written even then (dkit._C refuses it)
            with torch.no_grad():
                call()
    cu = torch.jit.CompilationUnit(
        "def f(x: Tensor, rois: Tensor, out: Tensor):\n"
        "    return torch.ops.dkit.roi_align_forward(x, rois, out, None, None, 2, 2, 1.0, 0, 1, True)\n"
    )
    with pytest.raises(RuntimeError, match="argument 'input' requires grad"):
        cu.f(x.clone().requires_grad_(), rois, torch.empty(3, 3, 2, 2))


def test_meta_tensors_are_shapes_in_every_mode():
    # Note [Meta tensors] in dkit/_torch_library.py: outputs of the right shapes, no kernel; what
    # needs values (nms's count) or mixes meta tensors with real ones is refused
    x, rois = _feature()
    mx, mrois = x.to("meta"), rois.to("meta")
    b, s = _boxes(10)
    shaped = [
        (lambda: dkit.ops.roi_align(mx, mrois, 2), (3, 3, 2, 2)),
        (lambda: T.roi_align(mx, mrois, [2, 2]), (3, 3, 2, 2)),
        (lambda: T.roi_align(mx, mrois, [2, 3], 1.0, 0, "max"), (3, 3, 2, 3)),
        (lambda: dkit.ops.box_iou(b.to("meta"), b[:4].to("meta")), (10, 4)),
        (lambda: T.box_iou(b.to("meta"), b[:4].to("meta")), (10, 4)),
        (lambda: _roi_out(torch.empty(3, 3, 2, 2, device="meta"), x=mx, rois=mrois), (3, 3, 2, 2)),
    ]
    refused = [
        (lambda: dkit.ops.nms(b.to("meta"), s.to("meta"), 0.5), _C.DkitNotImplementedError, "meta tensors do not have"),
        (lambda: T.nms(b.to("meta"), s.to("meta"), 0.5), RuntimeError, "meta"),
        (lambda: T.nms.out(b, s, None, torch.empty(10, dtype=torch.int64, device="meta"),
                           torch.empty(1, dtype=torch.int64), 0.5, 0),
         _C.DkitValueError, "parameter 'keep' is a meta tensor"),
        (lambda: _roi_out(torch.empty(3, 3, 2, 2, device="meta")), _C.DkitValueError, "is a meta tensor"),
    ]  # fmt: skip
    for mode in (contextlib.nullcontext, torch.inference_mode, torch.no_grad):
        with mode():
            for call, shape in shaped:
                y = call()
                assert y.is_meta and tuple(y.shape) == shape
            for call, error, match in refused:
                with pytest.raises(error, match=match):
                    call()


# ------------------------------------------------------------------------------------------
# Scripted compat functions fail as their eager branches do (Note [Scripted errors] in
# dkit/compat/mmcv.py)


def _compat_cases():
    x, rois = _feature()
    b, s = _boxes(10)
    r5 = torch.cat([b[:, :2], b[:, 2:] - b[:, :2], torch.rand(10, 1, generator=torch.Generator().manual_seed(2))], 1)
    long_idxs = torch.zeros(10, dtype=torch.int64)
    return [
        (dk_tv.roi_align, (x, rois, [2**40, 2])),
        (dk_tv.roi_align, (x, rois, 2, float("nan"))),
        (dk_tv.roi_align, (x.half(), rois.half(), 2)),
        (dk_tv.roi_align, (x.to(memory_format=torch.channels_last), rois, 2)),
        (dk_tv.roi_align, (x, rois[:, :4], 2)),
        (dk_tv.roi_align, (x, rois[0], 2)),
        (dk_tv.roi_align, (x, [rois[:, 1:3]], 2)),
        (dk_tv.roi_align, (x, rois, 2, 1.0, -2)),
        (dk_tv.roi_align, (x.double(), rois, 2)),
        (dk_tv.roi_align, (x, torch.zeros(0, 5), 2)),
        (dk_tv.nms, (b, s, float("nan"))),
        (dk_tv.nms, (b[:, :3], s, 0.5)),
        (dk_tv.nms, (b.half(), s.half(), 0.5)),
        (dk_tv.nms, (b, s.double(), 0.5)),
        (dk_tv.nms, (torch.zeros(0, 4), torch.zeros(0), 0.5)),
        (dk_tv.batched_nms, (b, s, torch.zeros(10), 0.5)),
        (dk_tv.batched_nms, (b, s, long_idxs[:3], 0.5)),
        (dk_tv.batched_nms, (b[:, :3], s, long_idxs, 0.5)),
        (dk_tv.box_iou, (b[0], b)),
        (dk_tv.box_iou, (b, b[0])),
        (dk_tv.box_iou, (b.long(), b.long())),
        (dk_tv.box_iou, (b, b.double())),
        (dk_tv.generalized_box_iou, (b[0], b)),
        (dk_tv.complete_box_iou, (b, b[0])),
        (dk_tv.distance_box_iou, (torch.tensor(1.0), b)),
        (dk_mmcv.roi_align, (x, rois, 2, 1.0, 0, "median", True)),
        (dk_mmcv.roi_align, (x, rois, [2**40, 2])),
        (dk_mmcv.roi_align, (x, rois[:, :4], 2)),
        (dk_mmcv.nms, (b, s, 0.5, 2)),
        (dk_mmcv.nms, (b[:, :3], s, 0.5)),
        (dk_mmcv.nms, (b, s[:4], 0.5)),
        (dk_mmcv.nms, (b, s, 0.5, 0, float("nan"), 3)),
        (dk_mmcv.soft_nms, (b[:, :3], s)),
        (dk_mmcv.soft_nms, (b, s, 0.3, 0.5, 1e-3, "cubic")),
        (dk_mmcv.bbox_overlaps, (b, b, "dice")),
        (dk_mmcv.bbox_overlaps, (b[:3], b, "iou", True)),
        (dk_mmcv.bbox_overlaps, (b, b, "iou", False, 2)),
        (dk_mmcv.bbox_overlaps, (b[:, :3], b)),
        (dk_mmcv.bbox_overlaps, (b[0], b)),
        (dk_mmcv.box_iou_rotated, (r5[:, :4], r5)),
        (dk_mmcv.nms_rotated, (r5, s, float("nan"))),
        (dk_mmcv.nms_rotated, (r5[:, :4], s, 0.5)),
    ]


@pytest.mark.parametrize("case", range(len(_compat_cases())))
def test_scripted_compat_answers_as_its_eager_branch(case):
    fn, args = _compat_cases()[case]
    expect, expect_error = _outcome(lambda: fn(*args))
    got, error = _outcome(lambda: torch.jit.script(fn)(*args))
    if expect_error is None:
        assert error is None, error
        for a, b in zip(*((v,) if isinstance(v, Tensor) else v for v in (got, expect))):
            assert (a is None and b is None) or (torch.equal(a.isnan(), b.isnan())
                                                 and torch.equal(a.nan_to_num(), b.nan_to_num()))  # fmt: skip
    else:
        assert error is not None, (fn.__name__, expect_error)
        assert error[0] in (RuntimeError, torch.jit.Error), error
        assert _last_line(error[1]).endswith(expect_error[1]), (error[1], expect_error)


# ------------------------------------------------------------------------------------------
# torch.jit.trace, freeze: the routes that record dkit's ops. (Tracing an eager call of
# dkit.ops.roi_align records only its output allocation, as for any Python code torch does not
# see; scripting, or a scripted submodule in the traced model, is the route for dkit's ops.)


def test_trace_records_the_torch_op_and_scripted_submodules():
    x, rois = _feature()
    x2 = torch.rand(2, 3, 12, 12, generator=torch.Generator().manual_seed(5))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = torch.jit.script(dk_tv.RoIAlign(2, 1.0, 2))

        def forward(self, x, rois):
            return self.pool(x, rois) * 2

    traced = torch.jit.trace(Model(), (x, rois))
    assert "dkit::roi_align" in str(traced.inlined_graph)
    assert torch.equal(traced(x2, rois), Model()(x2, rois))  # new values, not the traced ones
    traced = torch.jit.trace(lambda x, r: torch.ops.dkit.roi_align(x, r, [2, 2]) * 2, (x, rois))
    assert "dkit::roi_align" in str(traced.graph)
    assert torch.equal(traced(x2, rois), dkit.ops.roi_align(x2, rois, 2) * 2)


def test_frozen_and_optimized_scripted_models():
    x, rois = _feature()
    b, s = _boxes(50)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 1)
            self.pool = dk_tv.RoIAlign(2, 0.5, 2)

        def forward(self, x: Tensor, rois: Tensor, b: Tensor, s: Tensor):
            return self.pool(self.conv(x), rois), dk_tv.nms(b, s, 0.5), dk_tv.nms(b, s, 0.5)

    model = Model().eval()
    with torch.no_grad():
        expect = model(x, rois, b, s)
        for compiled in (torch.jit.freeze(torch.jit.script(model)),
                         torch.jit.optimize_for_inference(torch.jit.script(model))):  # fmt: skip
            got = compiled(x, rois, b, s)
            torch.testing.assert_close(got[0], expect[0])
            assert torch.equal(got[1], expect[1]) and torch.equal(got[2], expect[2])


# ------------------------------------------------------------------------------------------
# Tensors without memory of their own: functorch's BatchedTensor, wrapper subclasses, fake
# tensors. dkit's readers refuse them with errors that name the op and argument; vmap of the
# torch op runs it per sample (torch's batching fallback).


class _Wrapper(Tensor):
    @staticmethod
    def __new__(cls, elem):
        return Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(), dtype=elem.dtype,
                                             device=elem.device)  # fmt: skip

    def __init__(self, elem):
        self.elem = elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        def unwrap(x):
            return x.elem if isinstance(x, _Wrapper) else x

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda x: _Wrapper(x) if isinstance(x, Tensor) else x, out)


def test_tensors_without_memory_are_refused_clearly():
    b, s = _boxes(10)
    # dkit.ops reads memory: a wrapper subclass (whose own storage is a placeholder) is refused
    for call in (lambda: dkit.ops.nms(_Wrapper(b), _Wrapper(s), 0.5), lambda: dkit.ops.box_iou(_Wrapper(b), b)):
        with pytest.raises(_C.DkitBufferError, match="parameter '(boxes|boxes1)' has elements but no memory"):
            call()
    # the torch ops go through torch's dispatcher, whose Python key hands the call to the
    # subclass's __torch_dispatch__: it unwraps and calls the op again, as for any torch op
    got = T.nms(_Wrapper(b), _Wrapper(s), 0.5)
    assert isinstance(got, _Wrapper) and torch.equal(got.elem, dkit.ops.nms(b, s, 0.5))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fb, fs = torch.rand(10, 4), torch.rand(10)
        with pytest.raises(_C.DkitBufferError, match="nms: parameter 'boxes' "):
            dkit.ops.nms(fb, fs, 0.5)  # eagerly, a FakeTensor has no memory to read
        # through the torch ops, FakeTensors get their fake implementations (Note [dkit ops
        # under torch.compile] in dkit/_torch_library.py)
        assert tuple(T.box_iou(fb, fb[:3]).shape) == (10, 3)
        assert tuple(T.roi_align(torch.rand(1, 2, 8, 8), torch.rand(3, 5), [2, 4]).shape) == (3, 2, 2, 4)
        if hasattr(torch.library, "get_ctx"):  # torch 2.x: nms's size is data-dependent, as torchvision's
            with pytest.raises(Exception, match="nms"):  # torch's DynamicOutputShapeException outside torch.compile
                T.nms(fb, fs, 0.5)


def test_vmap():
    functorch = pytest.importorskip("functorch")
    b = torch.stack([_boxes(10, seed)[0] for seed in range(3)])
    with pytest.raises(_C.DkitBufferError, match="box_iou: parameter 'boxes1'"):
        functorch.vmap(dkit.ops.box_iou)(b, b)
    got = functorch.vmap(T.box_iou)(b, b)
    assert torch.equal(got, torch.stack([dkit.ops.box_iou(x, x) for x in b]))
