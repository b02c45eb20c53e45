"""torch.compile (Note [dkit ops under torch.compile] in dkit/_torch_library.py): a model that calls
dkit.ops, the compat functions or dkit.nn compiles with fullgraph=True wherever torchvision's
counterpart does, and gives eager's results, forward and backward. Needs torch >= 2.5
(torch.compiler.substitute_in_graph); Debian 13's torch 2.6 runs it in `make test`.

Most cases use the aot_eager backend: it runs dynamo and AOTAutograd (the graph capture, the fake
implementations, the joint forward-backward graph) without compiling C++; one case runs
inductor end to end."""

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
if not hasattr(getattr(torch, "compiler", None), "substitute_in_graph"):
    pytest.skip("torch.compile with dkit ops needs torch >= 2.5", allow_module_level=True)

import torch._dynamo  # noqa: E402

import dkit  # noqa: E402
from dkit.compat import mmcv as M  # noqa: E402
from dkit.compat import torchvision as T  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _feature(seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 4, 16, 16, generator=g).requires_grad_(grad)
    xy = torch.rand(6, 2, generator=g) * 12
    idx = torch.randint(0, 2, (6, 1), generator=g).float()
    rois = torch.cat([idx, xy, xy + torch.rand(6, 2, generator=g) * 8 + 1], 1)
    return x, rois


def _boxes(n=300, seed=1):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    return torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 30 + 1], 1), torch.rand(n, generator=g)


def _same_forward_and_backward(f, x, *args, backend="aot_eager"):
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    got, expect = compiled(x, *args), f(x, *args)
    assert torch.equal(got, expect)
    (g_got,) = torch.autograd.grad(got.sum(), x)
    (g_expect,) = torch.autograd.grad(expect.sum(), x)
    assert torch.equal(g_got, g_expect)


_LAYERS = {"dkit.nn": dkit.nn.RoIAlign(3, 0.5, 2), "compat module": T.RoIAlign(3, 0.5, 2, aligned=True),
           "mmcv module": M.RoIAlign(3, 0.5, 2)}  # fmt: skip

_ROI_ALIGN = {
    "torchvision": lambda x, r: torchvision.ops.roi_align(x, r, 3, 0.5, 2, aligned=True).relu(),
    "dkit.ops": lambda x, r: dkit.ops.roi_align(x, r, 3, 0.5, 2).relu(),
    "dkit.ops max": lambda x, r: dkit.ops.roi_align(x, r, (3, 2), 0.5, 0, "max").relu(),
    "dkit.ops adaptive": lambda x, r: dkit.ops.roi_align(x, r, 3, 0.5, 0, aligned=False).relu(),
    "compat torchvision": lambda x, r: T.roi_align(x, r, 3, 0.5, 2, aligned=True).relu(),
    "compat mmcv": lambda x, r: M.roi_align(x, r, 3, 0.5, 2).relu(),
    **{name: (lambda layer: lambda x, r: layer(x, r).relu())(layer) for name, layer in _LAYERS.items()},
}


@pytest.mark.parametrize("route", list(_ROI_ALIGN))
def test_roi_align_compiles_with_fullgraph(route):
    x, rois = _feature()
    _same_forward_and_backward(_ROI_ALIGN[route], x, rois)


def test_roi_align_graph_holds_the_forward_and_backward_ops():
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    backend = AotEagerAndRecordGraphs()
    x, rois = _feature()
    y = torch.compile(lambda x, r: dkit.ops.roi_align(x, r, 3, 0.5, 2), fullgraph=True, backend=backend)(x, rois)
    y.sum().backward()
    (dynamo_graph,) = backend.graphs
    assert "dkit.roi_align" in dynamo_graph.code
    forward_code = "".join(g.code for g in backend.fw_graphs)
    backward_code = "".join(g.code for g in backend.bw_graphs)
    assert "dkit._roi_align_forward" in forward_code and "dkit._roi_align_backward" in backward_code


def test_boxes_list_and_dynamic_shapes():
    x, rois = _feature(2)
    per_image = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    f = lambda x, boxes: dkit.ops.roi_align(x, boxes, 3, 0.5, 2)  # noqa: E731
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    for k in (3, 5):  # another box count: one graph with a symbolic size
        boxes = [b[:k] for b in per_image]
        assert torch.equal(compiled(x, boxes), f(x, boxes))


def test_inductor_end_to_end():
    x, rois = _feature(3)
    _same_forward_and_backward(lambda x, r: dkit.ops.roi_align(x, r, 3, 0.5, 2).relu() * 2, x, rois, backend="inductor")


_NMS = {
    "nms": (lambda b, s, i: dkit.ops.nms(b, s, 0.5), lambda b, s, i: torchvision.ops.nms(b, s, 0.5)),
    "batched_nms": (
        lambda b, s, i: dkit.ops.batched_nms(b, s, i, 0.5),
        lambda b, s, i: torchvision.ops.batched_nms(b, s, i, 0.5),
    ),
    "compat nms": (lambda b, s, i: T.nms(b, s, 0.5), lambda b, s, i: torchvision.ops.nms(b, s, 0.5)),
    "kept boxes": (lambda b, s, i: b[dkit.ops.nms(b, s, 0.5)].sum(0),
                   lambda b, s, i: b[torchvision.ops.nms(b, s, 0.5)].sum(0)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_NMS))
def test_nms_follows_torchs_rule_for_data_dependent_sizes(case, monkeypatch):
    ours, theirs = _NMS[case]
    b, s = _boxes()
    i = (s * 4).long()
    # like torchvision's nms: where torch's default config does not let dynamo capture a
    # data-dependent size (torch up to 2.6 at least), both refuse fullgraph with torch's message;
    # where it does (torch 2.14), both compile
    outcomes = []
    for f in (ours, theirs):
        try:
            outcomes.append(torch.compile(f, fullgraph=True, backend="aot_eager")(b, s, i))
        except Exception as e:
            assert "dynamic shape operator" in str(e), e
            outcomes.append(None)
        torch._dynamo.reset()
    assert (outcomes[0] is None) == (outcomes[1] is None)
    if outcomes[0] is not None:
        assert torch.equal(outcomes[0], outcomes[1])
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
    got = torch.compile(ours, fullgraph=True, backend="aot_eager")(b, s, i)
    assert torch.equal(got, ours(b, s, i)) and torch.equal(got, theirs(b, s, i))


@pytest.mark.parametrize("name", ["box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou"])
def test_box_overlaps_compile(name):
    b, _ = _boxes(50)
    for f in (lambda b: getattr(dkit.ops, name)(b, b[:7]), lambda b: getattr(T, name)(b, b[:7])):
        assert torch.equal(torch.compile(f, fullgraph=True, backend="aot_eager")(b), f(b))


def test_bad_arguments_fail_at_the_call_under_compile():
    x, rois = _feature(grad=False)
    f = torch.compile(lambda x, r: dkit.ops.roi_align(x, r, 3, 0.5, 2, "median"), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="pool_mode must be 'avg' or 'max'"):
        f(x, rois)


def test_autocast_under_compile():
    x, rois = _feature(4)
    x16 = x.detach().bfloat16().requires_grad_()

    def f(x, r):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return dkit.ops.roi_align(x, r, 3, 0.5, 2)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x16, rois)
    expect = f(x16, rois)
    assert got.dtype == torch.bfloat16 == expect.dtype
    torch.testing.assert_close(got, expect, atol=2e-2, rtol=2e-2)
