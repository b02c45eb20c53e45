"""dkit ops as torch ops (dkit/_torch_library.py): torch.ops.dkit.*, TorchScript, torch.fx,
torch.jit.save / load, autograd through torch's dispatcher, ops added by a backend, quantized
tensors. References: torchvision's own ops (and its roi_align tests' TorchScript scenarios),
and dkit's eager functions, which the torch ops must equal."""

import inspect
import os
import re
import subprocess
import sys
import textwrap
from typing import List

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from torchvision import ops as tv  # noqa: E402

import dkit  # noqa: E402
import dkit.nn  # noqa: E402
import dkit.ops  # noqa: E402
from dkit import _C, _torch_library  # noqa: E402
from dkit.compat import mmcv as dk_mmcv  # noqa: E402
from dkit.compat import torchvision as dk_tv  # noqa: E402

from conftest import PKG_ROOT  # noqa: E402

Tensor = torch.Tensor


def _boxes(n, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    b = torch.rand(n, 4, generator=g, dtype=dtype) * 50
    b[:, 2:] += b[:, :2] + 1
    return b, torch.rand(n, generator=g, dtype=dtype)


def _rotated(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(n, 5, generator=g) * 20
    r[:, 2:4] += 1
    r[:, 4] = r[:, 4] / 10
    return r


def _feature(seed=0, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 3, 12, 12, generator=g, dtype=dtype)
    rois = torch.tensor([[0, 1, 1, 9, 7], [1, 0.5, 2, 11, 11], [0, 3, 3, 4, 5]], dtype=dtype)
    return x.requires_grad_(grad), rois


def _equal(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


# One call of every public op: its declared example (@torch_op(..., example=...) in
# dkit/_ops/), NumPy arrays made torch tensors, with the eager results as the reference.
def _public_calls():
    import numpy as np

    def torched(v):
        if isinstance(v, np.ndarray):
            return torch.from_numpy(v)
        return v

    calls = {}
    for name in dkit.ops.__all__:
        example = getattr(dkit.ops, name).__dkit_example__
        assert example is not None, f"{name}: declare an example call with @torch_op(..., example=...)"
        calls[name] = tuple(torched(v) for v in example(np.random.default_rng(0)))
    return calls


# ------------------------------------------------------------------------------------------
# The op table


def test_every_public_op_is_a_torch_op_with_its_signature():
    calls = _public_calls()
    assert set(calls) == set(dkit.ops.__all__)
    for name in dkit.ops.__all__:
        fn = getattr(dkit.ops, name)
        packet = getattr(torch.ops.dkit, name)
        schema = packet.default._schema
        params = list(inspect.signature(fn).parameters.values())
        assert [a.name for a in schema.arguments] == [p.name for p in params], name
        for a, p in zip(schema.arguments, params):
            if p.default is inspect.Parameter.empty:
                assert a.default_value is None, (name, a.name)
            else:
                assert a.default_value == p.default, (name, a.name)


def test_every_core_op_is_a_torch_out_op():
    core = dkit.dispatch.ops()
    assert {"roi_align_forward", "roi_align_backward", "nms", "batched_nms", "box_iou"} <= set(core)
    for name, schema in core.items():
        op = getattr(torch.ops.dkit, name).out
        expected, outs, names = _torch_library.out_schema(schema)
        assert str(op._schema) == "dkit::" + expected
        args = op._schema.arguments
        assert [a.name for a in args] == names
        assert [args[i].alias_info.is_write for i in outs] == [True] * len(outs)
        assert len(op._schema.returns) == len(outs) and all(r.alias_info.is_write for r in op._schema.returns)


def test_out_op_runs_the_core_and_returns_its_outputs():
    b, s = _boxes(300)
    keep = torch.full((300,), -1, dtype=torch.int64)
    num = torch.zeros(1, dtype=torch.int64)
    k, n = torch.ops.dkit.nms(b, s, None, keep, num, 0.5, 0)
    assert k is keep and n is num
    assert torch.equal(keep[: int(num)], tv.nms(b, s, 0.5))
    x, rois = _feature()
    out = torch.empty(3, 3, 2, 2)
    r = torch.ops.dkit.roi_align_forward.out(x, rois, out, None, None, 2, 2, 1.0, 2, 1, False)
    assert r is out and torch.allclose(out, tv.roi_align(x, rois, 2, 1.0, 2, False))


def test_torch_ops_equal_the_eager_functions():
    for name, args in _public_calls().items():
        expect = getattr(dkit.ops, name)(*args)
        got = getattr(torch.ops.dkit, name)(*args)
        assert _equal(got, expect), name


def test_registration_is_once_and_sync_is_idempotent():
    lib = _torch_library._library
    assert lib is not None
    _torch_library.sync()
    assert _torch_library._library is lib  # no second Library, no second define (torch would raise)
    assert _torch_library._core_done == set(_C.op_names())


def test_the_kernel_holder_is_built_where_torchs_headers_are():
    headers = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "autograd", "python_variable.h")
    if not os.path.isfile(headers):
        pytest.skip("torch's C++ headers are not installed: dkit._torch_kernel is not built")
    assert _torch_library._holder_impl is not None
    cfg = dkit.show_config(file=open(os.devnull, "w"))
    n = len(_C.op_names()) + len(dkit.ops.__all__)
    assert cfg["torch_ops"] == f"{n} ops as torch.ops.dkit.*, kernels by dkit._torch_kernel"


def test_kernels_keep_their_error_messages():
    x, rois = _feature()
    bad = rois.clone()
    bad[0, 0] = 7
    with pytest.raises(_C.DkitIndexError, match="batch index 7"):
        torch.ops.dkit.roi_align(x, bad, [2, 2])  # eager: the original exception object
    if _torch_library._holder_impl is None:
        pytest.skip("dkit._torch_kernel not built: torch's Python kernels lose messages in TorchScript")
    scripted = torch.jit.script(dk_tv.roi_align)
    with pytest.raises(RuntimeError, match="batch index 7"):  # TorchScript: the message survives
        scripted(x, bad, 2)


# ------------------------------------------------------------------------------------------
# TorchScript


def test_script_dkit_ops_compiles_to_the_torch_ops():
    def f(x: Tensor, rois: Tensor, b: Tensor, s: Tensor, idxs: Tensor, r: Tensor):
        return (
            dkit.ops.roi_align(x, rois, [3, 2], 0.5, 2, "max", False),
            dkit.ops.nms(b, s, 0.5),
            dkit.ops.batched_nms(b, s, idxs, 0.5),
            dkit.ops.soft_nms(b, s, 0.3, 0.5, 1e-3, "gaussian"),
            dkit.ops.box_iou(b, b),
            dkit.ops.complete_box_iou(b, b, eps=1e-6),
            dkit.ops.bbox_overlaps(b, b, "iof", offset=1),
            dkit.ops.box_iou_rotated(r, r),
            dkit.ops.nms_rotated(r, s[:40], 0.2),
        )

    scripted = torch.jit.script(f)
    graph = str(scripted.graph)
    for op in ("roi_align", "nms", "batched_nms", "soft_nms", "box_iou", "complete_box_iou", "bbox_overlaps",
               "box_iou_rotated", "nms_rotated"):  # fmt: skip
        assert f"dkit::{op}(" in graph, op
    x, rois = _feature()
    b, s = _boxes(200)
    idxs = torch.randint(0, 4, (200,))
    r = _rotated(40)
    assert _equal(scripted(x, rois, b, s, idxs, r), f(x, rois, b, s, idxs, r))


def test_script_dkit_ops_roi_align_with_a_list_of_boxes():
    def f(x: Tensor, boxes: List[Tensor]):
        return dkit.ops.roi_align(x, boxes, 3, 0.5)

    scripted = torch.jit.script(f)
    x, rois = _feature()
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    assert torch.equal(scripted(x, boxes), dkit.ops.roi_align(x, boxes, 3, 0.5))


def test_script_compat_torchvision_functions():
    x, rois = _feature(dtype=torch.float64)
    b, s = _boxes(3000)
    s = (s * 10).round()  # ties: torchvision's unstable order of equal scores (Note in compat)
    idxs = torch.randint(0, 5, (3000,), generator=torch.Generator().manual_seed(3))
    cases = [
        (dk_tv.roi_align, tv.roi_align, (x, rois, 3)),
        (dk_tv.roi_align, tv.roi_align, (x, rois, [2, 3], 0.5, 2, True)),
        (dk_tv.roi_align, tv.roi_align, (x, [rois[:2, 1:], rois[2:, 1:]], (2, 2), 1.0, -1, False)),
        (dk_tv.nms, tv.nms, (b, s, 0.5)),
        (dk_tv.batched_nms, tv.batched_nms, (b, s, idxs, 0.5)),
        (dk_tv.box_iou, tv.box_iou, (b[:50], b[:70])),
        (dk_tv.generalized_box_iou, tv.generalized_box_iou, (b[:50], b[:70])),
        (dk_tv.distance_box_iou, tv.distance_box_iou, (b[:50], b[:70])),
        (dk_tv.complete_box_iou, tv.complete_box_iou, (b[:50], b[:70], 1e-6)),
    ]
    for fn, ref, args in cases:
        got, expect = torch.jit.script(fn)(*args), ref(*args)
        if got.dtype == torch.int64:
            assert torch.equal(got, expect), fn.__name__
        else:
            torch.testing.assert_close(got, expect, rtol=1e-6, atol=1e-6)


class PoolWrapper(torch.nn.Module):
    """torchvision's test wrapper: boxes as List[Tensor]."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, imgs: Tensor, boxes: List[Tensor]) -> Tensor:
        return self.pool(imgs, boxes)


def test_script_roialign_modules_with_tensor_and_list_boxes():
    x, rois = _feature()
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    order = torch.cat([torch.nonzero(rois[:, 0] == i).view(-1) for i in range(2)])
    for module, ref in [
        (dk_tv.RoIAlign((3, 3), 0.5, -1), tv.RoIAlign((3, 3), 0.5, -1)),
        (dk_tv.RoIAlign(2, 1.0, 2, aligned=True), tv.RoIAlign(2, 1.0, 2, aligned=True)),
        (dkit.nn.RoIAlign((3, 2), 0.5, 2, "max"), None),
        (dk_mmcv.RoIAlign(3, 0.5, 2, "max"), None),
        (dk_mmcv.RoIAlign((2, 3), 0.5, 2, use_torchvision=True), tv.RoIAlign((2, 3), 0.5, 2, aligned=True)),
    ]:
        scripted = torch.jit.script(module)
        expect = module(x, rois)
        assert torch.equal(scripted(x, rois), expect), module
        if ref is not None:
            torch.testing.assert_close(expect, ref(x, rois))
        if not isinstance(module, dk_mmcv.RoIAlign):  # MMCV's takes [K, 5] rois only
            assert torch.equal(torch.jit.script(PoolWrapper(module))(x, boxes), expect[order]), module


def test_torchvision_jit_boxes_list_scenario():
    # torchvision's test_jit_boxes_list: two images, five boxes each, a scripted wrapper
    model = PoolWrapper(dk_tv.RoIAlign(output_size=[3, 3], spatial_scale=1.0, sampling_ratio=-1))
    x = torch.rand(2, 1, 10, 10)
    roi = torch.tensor([[0, 0, 0, 9, 9], [0, 0, 5, 4, 9], [0, 5, 5, 9, 9], [1, 0, 0, 9, 9]], dtype=torch.float).t()
    y = torch.jit.script(model)(x, [roi, roi])
    assert y.shape == (10, 1, 3, 3)
    torch.testing.assert_close(y, PoolWrapper(tv.RoIAlign([3, 3], 1.0, -1))(x, [roi, roi]))


def test_script_torchvision_asserts_on_malformed_boxes():
    scripted = torch.jit.script(dk_tv.roi_align)
    x = torch.linspace(1, 64, 64).reshape(1, 1, 8, 8)
    with pytest.raises(torch.jit.Error, match="Tensor\\[K, 5\\]"):
        scripted(x, torch.tensor([[0, 0, 3, 3.0]]), (2, 2))
    with pytest.raises(torch.jit.Error, match="List\\[Tensor\\[L, 4\\]\\]"):
        scripted(x, [torch.tensor([[0, 0, 3.0]])], (2, 2))


def test_script_compat_mmcv_functions():
    x, rois = _feature()
    b, s = _boxes(300)
    r = _rotated(40)
    cases = [
        (dk_mmcv.roi_align, (x, rois, 3, 0.5, 2, "max", True)),
        (dk_mmcv.nms, (b, s, 0.5)),
        (dk_mmcv.nms, (b, s, 0.5, 1, 0.3, 20)),
        (dk_mmcv.soft_nms, (b, s, 0.3, 0.5, 1e-3, "linear")),
        (dk_mmcv.bbox_overlaps, (b[:10], b[:20], "iof", False, 1)),
        (dk_mmcv.box_iou_rotated, (r, r[:7])),
        (dk_mmcv.nms_rotated, (r, s[:40], 0.2)),
    ]
    for fn, args in cases:
        assert _equal(torch.jit.script(fn)(*args), fn(*args)), fn.__name__
    empty = torch.zeros(0, 5)
    assert torch.jit.script(dk_mmcv.nms_rotated)(empty, torch.zeros(0), 0.5)[1] is None  # MMCV's (dets, None)
    with pytest.raises(torch.jit.Error, match="offset must be 0 or 1"):
        torch.jit.script(dk_mmcv.nms)(b, s, 0.5, 2)


def test_gradcheck_through_the_torch_op_and_script():
    x, rois = _feature(dtype=torch.float64, grad=True)
    for mode in ("avg", "max"):
        assert torch.autograd.gradcheck(lambda z: torch.ops.dkit.roi_align(z, rois, [2, 2], 1.0, 1, mode, True), (x,))
    # plain tensors through the torch op: dkit's own Function, as eagerly; a tracer's tensors go
    # through the forward op, whose backward is the backward op (Note [dkit ops under
    # torch.compile] in dkit/_torch_library.py; test_compile.py), and so does a direct call of it
    y = torch.ops.dkit.roi_align(x, rois, [2, 2])
    assert type(y.grad_fn).__name__ == "RoIAlignFunctionBackward"
    assert type(dkit.ops.roi_align(x, rois, 2).grad_fn).__name__ == "RoIAlignFunctionBackward"
    z = torch.ops.dkit._roi_align_forward(x, rois, 2, 2, 1.0, 1, 1, True)
    assert type(z[0].grad_fn).__name__ == "RoIAlignOpFunctionBackward"
    assert [t.requires_grad for t in z] == [True, False, False]  # the argmax are not differentiable
    (g,) = torch.autograd.grad(z[0].sum(), x)
    (h,) = torch.autograd.grad(dkit.ops.roi_align(x, rois, 2, 1.0, 1).sum(), x)
    assert torch.equal(g, h)
    scripted = torch.jit.script(dk_tv.roi_align)
    assert torch.autograd.gradcheck(lambda z: scripted(z, rois, 2, 1.0, 1), (x,))  # torchvision's test_backward
    module = torch.jit.script(dkit.nn.RoIAlign(2, 1.0, 1, "max"))
    assert torch.autograd.gradcheck(lambda z: module(z, rois), (x,))


# ------------------------------------------------------------------------------------------
# torch.fx


def _call_functions(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_fx_records_dkit_calls_as_call_function_nodes():
    x, rois = _feature()
    b, s = _boxes(100)

    class Ops(torch.nn.Module):
        def forward(self, x, rois, b, s):
            return dkit.ops.roi_align(x, rois, 3), dkit.ops.nms(b, s, 0.5), dkit.ops.box_iou(b, b)

    class Compat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tv_layer = dk_tv.RoIAlign(2, 0.5, 2)
            self.dk_layer = dkit.nn.RoIAlign(2, 0.5, 2)

        def forward(self, x, rois, b, s):
            return (self.tv_layer(x, rois), self.dk_layer(x, rois), dk_tv.nms(b, s, 0.5), dk_mmcv.nms(b, s, 0.5)[1],
                    dk_tv.box_iou(b, b))  # fmt: skip

    for module, targets in [
        (Ops(), [dkit.ops.roi_align, dkit.ops.nms, dkit.ops.box_iou]),
        (Compat(), [dk_tv.roi_align, dkit.ops.roi_align, dk_tv.nms, dk_mmcv.nms, dk_tv.box_iou]),
    ]:
        gm = torch.fx.symbolic_trace(module)
        calls = [t for t in _call_functions(gm) if t is not getattr]
        assert [t for t in calls if t in targets] == targets, calls
        assert _equal(gm(x, rois, b, s), module(x, rois, b, s))
        scripted = torch.jit.script(gm)  # the traced graph compiles too
        assert _equal(scripted(x, rois, b, s), module(x, rois, b, s))


def test_torchvision_is_leaf_node_scenario():
    from torchvision.models.feature_extraction import get_graph_node_names

    class Wrapper(torch.nn.Module):
        def __init__(self, obj):
            super().__init__()
            self.layer = obj
            self.n_inputs = 2

        def forward(self, a, b):
            return self.layer(a, b)

    train, evaluation = get_graph_node_names(Wrapper(dk_tv.RoIAlign((5, 5), 1, -1)))
    assert train == evaluation and len(train) == 3  # the two inputs and one roi_align node


# ------------------------------------------------------------------------------------------
# Saved models, import order, backends, quantized tensors


def _python(code, *argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = dk_tv.RoIAlign(3, 0.5, 2)

    def forward(self, x: Tensor, rois: Tensor, b: Tensor, s: Tensor):
        return self.pool(x, rois).sum(), dk_tv.nms(b, s, 0.5)


@pytest.mark.slow
def test_saved_scripted_model_loads_in_a_fresh_process(tmp_path):
    path, data = str(tmp_path / "model.pt"), str(tmp_path / "data.pt")
    x, rois = _feature()
    b, s = _boxes(300)
    model = Detector()
    torch.jit.script(model).save(path)
    torch.save((x, rois, b, s, model(x, rois, b, s)), data)
    run = """
        import sys, torch
        {imports}
        model = torch.jit.load(sys.argv[1])
        x, rois, b, s, (pooled, keep) = torch.load(sys.argv[2])
        got = model(x, rois, b, s)
        assert torch.equal(got[0], pooled) and torch.equal(got[1], keep)
        print("ok")
    """
    for imports in ("import dkit", "import dkit; import torch", ""):  # either order; then without dkit
        code = run.format(imports=imports)
        if imports == "import dkit; import torch":
            code = code.replace("import sys, torch\n", "import sys\n", 1)  # dkit first, torch after it
        r = _python(code, path, data)
        if imports:
            assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        else:  # torch's own clear message, no crash
            assert r.returncode == 1, (r.returncode, r.stderr)
            assert "Unknown builtin op: dkit::roi_align" in r.stderr, r.stderr


def test_import_dkit_without_torch_installs_only_a_hook():
    r = _python(
        """
        import sys, dkit
        assert "torch" not in sys.modules and "dkit._C" not in sys.modules
        import torch
        assert "dkit._torch_library" in sys.modules and hasattr(torch.ops.dkit, "nms")
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


_NEW_OP_BACKEND = r"""
#include "dkit.h"

/* pyscale(x, out, f): out = x * f (float32, contiguous, on the CPU). */
#define DK_PYSCALE_ARGS(X) X(TENSOR, x) X(TENSOR_OUT, out) X(FLOAT, f)
DK_DECLARE_OP(pyscale, DK_PYSCALE_ARGS)
DK_DEFINE_OP(pyscale, DK_PYSCALE_ARGS)
{
    if (dk_tensor_numel(x) != dk_tensor_numel(out)) return dk_error(DK_EINVAL, "pyscale: sizes differ");
    return DK_OK;
}
static dk_status pyscale_cpu(const dk_tensor *x, dk_tensor *out, double f)
{
    const float *a = (const float *)dk_tensor_data(x);
    float *o = (float *)dk_tensor_data(out);
    for (int64_t i = 0; i < dk_tensor_numel(x); i++) o[i] = (float)(a[i] * f);
    return DK_OK;
}
DK_BACKEND_ENTRY(pyscale)
{
    return dk_register_device_impl(&dk_pyscale_op, DK_KEY_CPU, (dk_fnptr)pyscale_cpu, "pyscale_cpu", NULL);
}
"""


def test_an_op_a_backend_adds_becomes_a_torch_op(tmp_path):
    from test_c_extension import _build_backend

    lib = _build_backend(tmp_path, "pyscale", _NEW_OP_BACKEND)
    r = _python(
        r"""
        import sys, torch, dkit
        assert not hasattr(torch.ops.dkit, "pyscale") or "pyscale" not in dkit.dispatch.ops()
        dkit.load_backend(sys.argv[1])
        assert "pyscale" in dkit.dispatch.ops()
        x, out = torch.arange(6.0), torch.empty(6)
        assert torch.ops.dkit.pyscale.out(x, out, 2.5) is out and torch.equal(out, x * 2.5)

        cu = torch.jit.CompilationUnit("def f(x: Tensor, out: Tensor):\n"
                                       "    return torch.ops.dkit.pyscale(x, out, 3.0)\n")
        assert torch.equal(cu.f(x, out), x * 3)
        print("ok")
        """,
        str(lib),
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_quantized_tensors_are_refused_with_the_ops_name():
    x, rois = _feature()
    q = torch.quantize_per_tensor(x, 0.05, 0, torch.quint8)
    qrois = torch.quantize_per_tensor(rois, 0.1, 0, torch.quint8)
    scripted = torch.jit.script(dk_tv.roi_align)
    for call in (
        lambda: dkit.ops.roi_align(q, rois, 2),
        lambda: dk_tv.roi_align(q, qrois, 2),  # torchvision's qroi_align case
        lambda: torch.ops.dkit.roi_align(q, rois, [2, 2]),
        lambda: dkit.nn.RoIAlign(2)(q, rois),
    ):
        with pytest.raises(_C.DkitTypeError, match="roi_align.*quantized.*dequantize"):
            call()
    with pytest.raises(RuntimeError, match="roi_align.*quantized.*dequantize"):
        scripted(q, rois, 2)
    with torch.inference_mode(), pytest.raises(_C.DkitTypeError, match="quantized"):  # no Autograd kernel runs
        torch.ops.dkit.roi_align(q, rois, [2, 2])


@pytest.mark.slow
def test_bench_torch_ops_runs():
    """bench/bench_torch_ops.py (the figures are the benchmark's to report, not a test's): every
    route runs, agrees with torchvision, and is reported with the registration time."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_torch_ops.py"), "--reps", "1",
                        "--calls", "20"], capture_output=True, text=True, timeout=300, cwd=root)  # fmt: skip
    assert r.returncode == 0, r.stderr
    routes = ["torchvision", "tv C++ op", "dkit eager", "dkit torch op", "dkit scripted", "torchvision scripted"]
    for route in routes:
        assert re.search(rf"^{re.escape(route)}\s+\d+\.\d+ us\s+\d+\.\d+x$", r.stdout, re.M), r.stdout
    assert re.search(r"registration of \d+ torch ops: \d+\.\d+ ms", r.stdout), r.stdout


def test_jit_trace_refuses_eager_calls_and_records_torch_ops():
    """Note [Eager calls under torch.jit.trace] in csrc/python/dk_pytorch.cpp: an eager dkit call
    inside torch.jit.trace would leave an uninitialised output in the trace; it is refused, and
    the torch op is recorded."""
    if _C._torch_reader() is None:
        pytest.skip("dkit._torch_reader not built: the refusal needs it")
    x, rois = _feature()

    class Eager(torch.nn.Module):
        def forward(self, x, rois):
            return dkit.ops.roi_align(x, rois, 2)

    class ThroughTheOp(torch.nn.Module):
        def forward(self, x, rois):
            return torch.ops.dkit.roi_align(x, rois, [2, 2])

    with pytest.raises(_C.DkitNotImplementedError, match="torch.jit.trace cannot record"):
        torch.jit.trace(Eager(), (x, rois))
    traced = torch.jit.trace(ThroughTheOp(), (x, rois))
    assert "dkit::roi_align" in str(traced.graph)
    x2, rois2 = _feature(seed=5)
    assert torch.equal(traced(x2, rois2), dkit.ops.roi_align(x2, rois2, 2))
    assert torch.equal(Eager()(x, rois), traced(x, rois))  # outside the trace, the eager path as ever
