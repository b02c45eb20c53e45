"""The framework protocol (dkit/_frameworks: torch, NumPy, any other DLPack producer) and the
rules each op module writes once (dkit/_ops): every framework gets the same argmax dtypes,
bounds, shapes and forward/backward."""

import importlib

import numpy as np
import pytest
import torch

import dkit
import dkit.nn
from dkit import _C, _frameworks
from dkit._ops import Differentiable
from dkit._ops import roi_align as roi_mod
from dkit.compat import mmcv as dk_mmcv
from dkit.compat import torchvision as dk_tv

from dlpack_ctypes import CtypesProducer

FRAMEWORKS = ["torch", "numpy", "dlpack"]


def _make(name, a):
    """A tensor of framework `name` holding the NumPy array a."""
    a = np.ascontiguousarray(a)
    if name == "torch":
        return torch.from_numpy(a)
    if name == "numpy":
        return a
    return CtypesProducer(a)


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _fw(name):
    return importlib.import_module(f"dkit._frameworks.{name}")


def _like(name, a):
    """A framework's own tensor, as an op has it after as_tensor."""
    fw = _fw(name)
    return fw, fw.as_tensor(_make(name, a), "input", "test")


def _case(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 9, 11)).astype(dtype)
    rois = np.array([[0, 1, 1, 6, 6], [1, 0.5, 2, 9, 7.5], [0, -2, 3, 4, 12]], dtype)
    return x, rois


@pytest.fixture(params=FRAMEWORKS)
def name(request):
    return request.param


# ------------------------------------------------------------------------------------------
# Resolution


def test_each_framework_implements_the_protocol(name):
    fw = _fw(name)
    for attr in _frameworks.PROTOCOL:
        assert hasattr(fw, attr), f"{fw.__name__} lacks {attr}"
    assert fw.NAME == name
    for attr in _frameworks.PROTOCOL[2:]:
        assert callable(getattr(fw, attr)), attr


def test_resolution_is_by_type_and_cached(name):
    x = _make(name, np.zeros((1, 2, 3, 4), np.float32))
    fw = _frameworks.of(x)
    assert fw is _fw(name) and fw.NAME == name and _frameworks.name_of(x) == name
    assert _frameworks.BY_TYPE[type(x)] is fw  # what ops read: one dict lookup per call


def test_resolution_of_subclasses_and_non_tensors():
    assert _frameworks.name_of(torch.nn.Parameter(torch.zeros(2))) == "torch"  # also a DLPack producer
    assert _frameworks.name_of(np.zeros(2).view(np.recarray)) == "numpy"
    for bad in ([[1.0]], "x", None, 3.0):
        with pytest.raises(_C.DkitTypeError,
                           match="expected a torch.Tensor, a numpy.ndarray or an object with __dlpack__"):
            _frameworks.of(bad)
        assert type(bad) not in _frameworks.BY_TYPE


# ------------------------------------------------------------------------------------------
# The primitives


def test_as_tensor(name):
    fw = _fw(name)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = fw.as_tensor(_make(name, a), "input", "op")
    assert fw.dtype_name(t) == "float32" and tuple(t.shape) == (3, 4)
    np.testing.assert_array_equal(_np(t), a)
    assert fw.as_tensor(t, "input", "op") is t  # the framework's own (writable) tensors go as they are
    # another framework's tensor: viewed without copying where the framework can
    foreign = fw.as_tensor(CtypesProducer(a), "boxes", "op")
    np.testing.assert_array_equal(_np(foreign), a)
    if name == "torch":
        assert foreign.data_ptr() == a.ctypes.data
    # not a tensor at all: None, so that the op can say what it wanted
    assert fw.as_tensor([[1.0, 2.0]], "boxes", "op") is None
    assert fw.as_tensor("boxes", "boxes", "op") is None
    # memory the host cannot read (a claimed CUDA producer): refused, naming the op and argument
    with pytest.raises(_C.DkitBufferError, match="op: cannot read boxes|op: boxes .* must be on the CPU"):
        fw.as_tensor(CtypesProducer(a, device=(2, 0)), "boxes", "op")


def test_numpy_read_only_arrays_are_copied_once():
    fw = _fw("numpy")
    a = np.arange(6, dtype=np.float64)
    assert fw.as_tensor(a, "input", "op") is a
    a.flags.writeable = False
    b = fw.as_tensor(a, "input", "op")
    assert b is not a and b.flags.writeable
    np.testing.assert_array_equal(a, b)


def test_allocation(name):
    fw, like = _like(name, np.ones((2, 3), np.float32))
    out = fw.new_empty(like, (4, 5))
    assert type(out) is type(like) and tuple(out.shape) == (4, 5) and fw.dtype_name(out) == "float32"
    for dtype in ("int64", "float32", "float64", "float16"):
        t = fw.empty(like, (2,), dtype)
        assert type(t) is type(like) and fw.dtype_name(t) == dtype and tuple(t.shape) == (2,)
    assert fw.dtype_name(fw.empty(like, (1,))) == "float32"  # None: like's dtype
    assert tuple(fw.empty(like, (), "int64").shape) == ()
    if name == "torch":
        lr = like.clone().requires_grad_()
        for t in (fw.new_empty(lr, (2,)), fw.empty(lr, (2,), "int64")):
            assert t.device == lr.device and not t.requires_grad


def test_dtype_names(name):
    fw = _fw(name)
    for dtype in (np.float16, np.float32, np.float64, np.int32, np.int64):
        _, t = _like(name, np.zeros(2, dtype))
        assert fw.dtype_name(t) == np.dtype(dtype).name
    if name == "torch":
        assert fw.dtype_name(torch.zeros(2, dtype=torch.bfloat16)) == "bfloat16"
        assert fw.dtype_name(torch.zeros(2, dtype=torch.complex64)) == "complex64"


def test_cat_rois_and_first_rows(name):
    fw, like = _like(name, np.zeros((1, 2, 3, 3), np.float32))
    b0 = fw.as_tensor(_make(name, np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32)), "b", "op")
    b1 = fw.as_tensor(_make(name, np.zeros((0, 4), np.float32)), "b", "op")
    b2 = fw.as_tensor(_make(name, np.array([[9, 9, 9, 9]], np.float32)), "b", "op")
    np.testing.assert_array_equal(_np(fw.cat([b0, b2], 0)), np.concatenate([_np(b0), _np(b2)]))
    np.testing.assert_array_equal(_np(fw.cat([b0, b0], 1)).shape, (2, 8))
    rois = fw.rois_from_boxes([b0, b1, b2], like)
    assert type(rois) is type(like) and fw.dtype_name(rois) == "float32"
    np.testing.assert_array_equal(_np(rois), [[0, 1, 2, 3, 4], [0, 5, 6, 7, 8], [2, 9, 9, 9, 9]])
    empty = fw.rois_from_boxes([], like)
    assert tuple(empty.shape) == (0, 5) and fw.dtype_name(empty) == "float32"
    # first_rows: by an int, and by an int64 count the way a data-dependent op returns it
    head = fw.first_rows(rois, 2)
    np.testing.assert_array_equal(_np(head), _np(rois)[:2])
    count = fw.empty(like, (1,), "int64")
    _np(count)[...] = 1  # _np shares memory with torch tensors and NumPy arrays
    head = fw.first_rows(rois, count)
    assert tuple(head.shape) == (1, 5)
    assert np.shares_memory(_np(head), _np(rois))  # a view, not a copy


def test_wants_grad_and_apply_without_autograd():
    for name in ("numpy", "dlpack"):
        fw, like = _like(name, np.zeros(3))
        assert fw.wants_grad(like) is False
        with pytest.raises(_C.DkitNotImplementedError, match="roi_align: NumPy has no autograd"):
            fw.apply(roi_mod.ROI_ALIGN, like)


def test_torch_wants_grad():
    fw = _fw("torch")
    plain, leaf = torch.zeros(2), torch.zeros(2, requires_grad=True)
    assert not fw.wants_grad(plain) and fw.wants_grad(leaf)
    with torch.no_grad():
        assert not fw.wants_grad(leaf)


def _double_forward(fw, x, factor):
    out = fw.new_empty(x, x.shape)
    _np(out)[...] = _np(x) * factor
    return (out,)


def _double_backward(fw, grad, factor):
    g = fw.new_empty(grad, grad.shape)
    _np(g)[...] = _np(grad) * factor
    return (g,)


SCALE = Differentiable(
    "scale",
    "Scale",
    forward=_double_forward,
    saved=lambda args, results: (args[1],),
    backward=_double_backward,
    results=1,
    forward_schema="(Tensor x, float factor) -> Tensor",
    backward_schema="(Tensor grad, float factor) -> Tensor",
)


def test_torch_apply_builds_one_function_per_op():
    fw = _fw("torch")
    x = torch.arange(3.0, requires_grad=True)
    y1 = fw.apply(SCALE, x, 2.0)
    y2 = fw.apply(SCALE, x, 3.0)
    assert type(y1.grad_fn) is type(y2.grad_fn) and type(y1.grad_fn).__name__ == "ScaleFunctionBackward"
    assert fw._FUNCTIONS[SCALE] is fw._FUNCTIONS[SCALE]
    (y1.sum() + y2.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 5.0))  # the factor is not differentiated
    # Note [Double backward]: the gradient of a create_graph backward cannot be differentiated
    g, = torch.autograd.grad(fw.apply(SCALE, x, 2.0).sum(), x, create_graph=True)
    torch.testing.assert_close(g, torch.full((3,), 2.0))
    with pytest.raises(_C.DkitNotImplementedError, match="scale: double backward is not supported"):
        g.sum().backward()


# ------------------------------------------------------------------------------------------
# roi_align's rules, the same in every framework


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_argmax_dtype_rule_in_every_framework(name, dtype):
    if dtype == "bfloat16" and name != "torch":
        pytest.skip("NumPy has no bfloat16")
    x, rois = _case(np.float32 if dtype == "bfloat16" else dtype)
    if dtype == "bfloat16":
        fw, xt, rt = _fw("torch"), torch.from_numpy(x).bfloat16(), torch.from_numpy(rois).bfloat16()
    else:
        fw, xt = _like(name, x)
        rt = fw.as_tensor(_make(name, rois), "boxes", "test")
    want = "float32" if dtype in ("float16", "bfloat16") else dtype
    assert roi_mod.argmax_dtype(fw, xt) == (None if want == dtype else want)
    args = (xt, rt, 2, 3, 1.0, 2, 0, True)
    results = roi_mod.ROI_ALIGN.forward(fw, *args)
    out = results[0]
    assert fw.dtype_name(out) == dtype and tuple(out.shape) == (3, 3, 2, 3)
    rois_saved, argmax_y, argmax_x = roi_mod.ROI_ALIGN.saved(args, results)[:3]
    assert fw.dtype_name(argmax_y) == fw.dtype_name(argmax_x) == want
    assert tuple(argmax_y.shape) == tuple(out.shape)
    # with torch, the same in what autograd keeps for backward
    if fw.NAME == "torch":
        y = dkit.ops.roi_align(xt.clone().requires_grad_(), rt, (2, 3), 1.0, 2, "max")
        assert [fw.dtype_name(t) for t in y.grad_fn.saved_tensors[1:]] == [want, want]


def test_the_declared_backward_serves_numpy_too():
    # forward and backward are written once: run by hand with NumPy arrays, they give what
    # torch.autograd gets from them
    x, rois = _case(np.float64)
    g = np.random.default_rng(1).standard_normal((3, 3, 2, 2))
    for mode in (1, 0):
        fw = _fw("numpy")
        args = (x, rois, 2, 2, 0.5, 0, mode, False)
        results = roi_mod.ROI_ALIGN.forward(fw, *args)
        out = results[0]
        (grad,) = roi_mod.ROI_ALIGN.backward(fw, g, *roi_mod.ROI_ALIGN.saved(args, results))
        xt = torch.from_numpy(x).requires_grad_()
        yt = dkit.ops.roi_align(xt, torch.from_numpy(rois), 2, 0.5, 0, ("max", "avg")[mode], False)
        yt.backward(torch.from_numpy(g))
        np.testing.assert_array_equal(out, yt.detach().numpy())
        np.testing.assert_array_equal(grad, xt.grad.numpy())


def test_outputs_in_every_framework(name):
    x, rois = _case()
    want = dkit.ops.roi_align(x, rois, (2, 3), 0.5, 2, "max", True)
    out = dkit.ops.roi_align(_make(name, x), _make(name, rois), (2, 3), 0.5, 2, "max", True)
    assert type(out) is (torch.Tensor if name == "torch" else np.ndarray)
    assert tuple(out.shape) == (3, 3, 2, 3)
    np.testing.assert_array_equal(_np(out), want)
    per_image = [_make(name, np.ascontiguousarray(rois[rois[:, 0] == i, 1:])) for i in range(2)]
    order = np.argsort(rois[:, 0], kind="stable")
    got = _np(dkit.ops.roi_align(_make(name, x), per_image, (2, 3), 0.5, 2, "max"))
    np.testing.assert_array_equal(got, want[order])


def _entry_points(x, rois):
    """Every public way to call roi_align, as f(output_size, sampling_ratio)."""
    return {
        "dkit.ops": lambda size, sr: dkit.ops.roi_align(x, rois, size, 1.0, sr),
        "dkit.ops numpy": lambda size, sr: dkit.ops.roi_align(x.numpy(), rois.numpy(), size, 1.0, sr),
        "dkit.nn": lambda size, sr: dkit.nn.RoIAlign(size, 1.0, sr)(x, rois),
        "compat.torchvision": lambda size, sr: dk_tv.roi_align(x, rois, size, 1.0, sr),
        "compat.mmcv": lambda size, sr: dk_mmcv.roi_align(x, rois, size, 1.0, sr),
        "compat.mmcv module": lambda size, sr: dk_mmcv.RoIAlign(size, 1.0, sr)(x, rois),
    }


@pytest.mark.parametrize("entry", ["dkit.ops", "dkit.ops numpy", "dkit.nn", "compat.torchvision", "compat.mmcv",
                                   "compat.mmcv module"])  # fmt: skip
def test_bounds_are_the_same_everywhere(entry):
    x, rois = (torch.from_numpy(t) for t in _case())
    f = _entry_points(x, rois)[entry]
    for size in (2**31, (2, 2**31), 0, (3, -1)):
        with pytest.raises(_C.DkitValueError, match=r"output size must be positive and below 2\^31"):
            f(size, 0)
    for sr in (2**31, -2):
        with pytest.raises(_C.DkitValueError,
                           match=r"sampling_ratio must be >= -1 \(<= 0 is adaptive\) and below 2\^31"):
            f(2, sr)
    assert tuple(f((2, 3), -1).shape) == (3, 3, 2, 3)
    if entry == "dkit.nn":  # the largest legal size is taken at construction (not run: too big)
        dkit.nn.RoIAlign((2**31 - 1, 1), 1.0, 2**31 - 1)
