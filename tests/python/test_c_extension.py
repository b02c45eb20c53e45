"""dkit._C itself: exceptions, DLPack import (producers, capsules, ownership), argument
conversion, the generated op callables and the introspection functions.

DLPack producers that torch and NumPy cannot play (versioned capsules, read-only flags, other
major versions, devices with streams, counting deleters) are built here with ctypes, from the
layouts in csrc/common/dk_dlpack.h.
"""

import ctypes
import ctypes.util
import gc
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dkit
from dkit import _C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FWD = _C.ops.roi_align_forward
BWD = _C.ops.roi_align_backward

# ------------------------------------------------------------------------------------------
# DLPack by hand


from dlpack_ctypes import (  # noqa: E402  (shared with test_roi_align.py)
    DELETER,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackVersion,
    DLTensor,
)

READ_ONLY = 1
IS_COPIED = 2
_NAMES = {True: b"dltensor_versioned", False: b"dltensor"}  # kept alive: capsules point at them

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def capsule_name(cap):
    return _capsule_name(cap).decode()


class Managed:
    """One hand-made managed tensor over a NumPy array, and its capsule. `deleted` counts the
    deleter's calls; everything C points at is kept alive by this object."""

    def __init__(self, arr, versioned=True, flags=0, major=1, device=(1, 0)):
        self.arr = arr
        self.deleted = 0
        self._shape = (ctypes.c_int64 * arr.ndim)(*arr.shape)
        self._strides = (ctypes.c_int64 * arr.ndim)(*(s // arr.itemsize for s in arr.strides))
        code = {"f": 2, "i": 0, "u": 1, "b": 6}[arr.dtype.kind]
        t = DLTensor(
            arr.ctypes.data, DLDevice(*device), arr.ndim, DLDataType(code, arr.itemsize * 8, 1),
            self._shape, self._strides, 0,
        )  # fmt: skip
        self._deleter = DELETER(self._delete)
        if versioned:
            self.m = DLManagedTensorVersioned(DLPackVersion(major, 0), None, self._deleter, flags, t)
        else:
            self.m = DLManagedTensor(t, None, self._deleter)
        self.capsule = _capsule_new(ctypes.addressof(self.m), _NAMES[versioned], None)

    def _delete(self, ptr):
        assert ptr == ctypes.addressof(self.m)
        self.deleted += 1


class Producer:
    """An object with __dlpack__, recording how it was called. legacy=True behaves like a
    producer from before DLPack 1.0: max_version is a TypeError."""

    def __init__(self, arr, legacy=False, device=(1, 0), **kw):
        self.arr, self.legacy, self.device, self.kw = arr, legacy, device, kw
        self.calls = []
        self.made = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, **kwargs):
        self.calls.append(dict(kwargs, stream=stream))
        if self.legacy and "max_version" in kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        m = Managed(self.arr, versioned=not self.legacy, device=self.device, **self.kw)
        self.made.append(m)
        return m.capsule


def run_child(code, *argv, timeout=120, path=()):
    """Runs `code` in a fresh interpreter, with this module importable as `tce` and dkit from
    the tree under test (and the folders `path` first on sys.path); returns its stdout. For
    checks whose failure would be a crash (a NULL or freed pointer dereferenced): pytest then
    reports a failed test, not a dead run."""
    import dkit._paths as p

    prelude = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('tce', sys.argv[1])\n"
        "tce = importlib.util.module_from_spec(spec); spec.loader.exec_module(tce)\n"
    )
    root = os.path.dirname(os.path.dirname(p.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, path), root, os.path.dirname(__file__)]))
    r = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), __file__, *map(str, argv)],
                       env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stdout}{r.stderr}"
    return r.stdout


def case(n=1, c=4, h=8, w=8, k=2, ph=2, pw=2, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    rois = np.array([[0, 1, 1, 6, 6], [0, 0.5, 2, 7, 5.5]][:k], dtype=dtype)
    out = np.full((k, c, ph, pw), np.nan, dtype=dtype)
    return x, rois, out


# (aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned)
AVG = (2, 2, 0.5, 2, 1, False)


def expected(x, rois, params=AVG):
    out = np.zeros((rois.shape[0], x.shape[1], params[0], params[1]), x.dtype)
    FWD(np.ascontiguousarray(x), np.ascontiguousarray(rois), out, None, None, *params)
    return out


# ------------------------------------------------------------------------------------------
# Exceptions


def _status_table():
    with open(os.path.join(ROOT, "csrc", "common", "dk_status.h")) as f:
        return re.findall(r"X\((DK_\w+),\s*(\d+),\s*(\w+),", f.read())


def test_exception_types_follow_the_status_table():
    rows = _status_table()
    assert len(rows) >= 10
    assert issubclass(_C.DkitError, RuntimeError) and _C.DkitError.__module__ == "dkit._C"
    for name, _value, py in rows:
        if py in ("None", "RuntimeError"):
            continue
        exc = getattr(_C, "Dkit" + py)
        base = getattr(__import__("builtins"), py)
        assert exc.__bases__ == (_C.DkitError, base), name
        assert issubclass(exc, RuntimeError) and issubclass(exc, base)
        assert not issubclass(exc, ValueError) or py == "ValueError"


def test_every_listed_exception_exists():
    for name in ("DkitValueError", "DkitTypeError", "DkitIndexError", "DkitNotImplementedError",
                 "DkitBufferError", "DkitMemoryError", "DkitFileNotFoundError", "DkitImportError"):  # fmt: skip
        assert issubclass(getattr(_C, name), _C.DkitError)
    e = _C.DkitFileNotFoundError("x")
    assert isinstance(e, FileNotFoundError) and isinstance(e, OSError)


def test_statuses_map_to_exceptions():
    x, rois, out = case()
    with pytest.raises(_C.DkitValueError, match="pool_mode"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, 7, False)
    with pytest.raises(_C.DkitTypeError, match="'input' must be float16"):
        FWD(x.astype(np.int32), rois.astype(np.int32), np.zeros(out.shape, np.int32), None, None, *AVG)
    bad = rois.copy()
    bad[0, 0] = 3
    with pytest.raises(_C.DkitIndexError, match=r"rois\[0\] has batch index 3"):
        FWD(x, bad, out, None, None, *AVG)
    with pytest.raises(_C.DkitFileNotFoundError):
        _C.load_backend("/nonexistent/libnothing.so")
    assert np.isnan(out).all()  # no failing call wrote anything


def test_no_kernel_is_not_implemented():
    x, rois, out = case()
    token = _C.tls_push_exclude(1 << _C.KEY_CPU)
    try:
        assert _C.tls_get() == (0, 1 << _C.KEY_CPU)
        with pytest.raises(_C.DkitNotImplementedError, match="roi_align_forward"):
            FWD(x, rois, out, None, None, *AVG)
    finally:
        _C.tls_pop(token)
    assert _C.tls_get() == (0, 0)


# ------------------------------------------------------------------------------------------
# Producers: NumPy, torch, capsules


def test_numpy_and_torch_agree_with_torchvision(torch_path):
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    x, rois, out = case()
    FWD(x, rois, out, None, None, *AVG)
    tx, tr = torch.from_numpy(x), torch.from_numpy(rois)
    tout = torch.full(out.shape, float("nan"))
    FWD(tx, tr, tout, None, None, *AVG)
    ref = tv.ops.roi_align(tx, tr, (2, 2), spatial_scale=0.5, sampling_ratio=2, aligned=False)
    np.testing.assert_array_equal(tout.numpy(), out)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, 0)


def test_torch_layouts_offsets_and_dtypes(torch_path):
    torch = pytest.importorskip("torch")
    x, rois, _ = case(n=2, c=3, h=9, w=7)
    want = expected(x, rois)
    tx = torch.from_numpy(x)
    big = torch.zeros(4, 3, 9, 7)
    big[1:3] = tx
    variants = {
        "channels_last": tx.contiguous(memory_format=torch.channels_last),
        "transposed": tx.transpose(2, 3).contiguous().transpose(2, 3),
        "storage offset": big[1:3],
    }
    for name, v in variants.items():
        out = torch.empty(want.shape).transpose(0, 1).contiguous().transpose(0, 1)  # strided output too
        FWD(v, torch.from_numpy(rois), out, None, None, *AVG)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=name)
    out64 = torch.empty(want.shape, dtype=torch.float64)
    FWD(tx.double(), torch.from_numpy(rois).double(), out64, None, None, *AVG)
    np.testing.assert_allclose(out64.numpy(), want, rtol=1e-5, atol=1e-6)


def test_torch_requires_grad_inputs_are_read_outputs_refused(torch_path):
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    xg = torch.from_numpy(x).clone().requires_grad_()
    tout = torch.empty(out.shape)
    FWD(xg, torch.from_numpy(rois), tout, None, None, *AVG)  # read, never written
    np.testing.assert_array_equal(tout.numpy(), expected(x, rois))
    param = torch.nn.Parameter(torch.from_numpy(x).clone())
    FWD(param, torch.from_numpy(rois), tout, None, None, *AVG)
    with pytest.raises(RuntimeError, match="require"):  # torch's own refusal, via __dlpack__
        FWD(torch.from_numpy(x), torch.from_numpy(rois), torch.empty(out.shape, requires_grad=True),
            None, None, *AVG)  # fmt: skip


def test_torch_subclass_with_torch_function_goes_through_the_protocol(torch_path):
    torch = pytest.importorskip("torch")
    seen = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    x, rois, out = case()
    lx = torch.from_numpy(x).as_subclass(Logged)
    tout = torch.empty(out.shape)
    FWD(lx, torch.from_numpy(rois), tout, None, None, *AVG)
    assert any("dlpack" in s for s in seen), seen  # its __dlpack__ ran, not the fast path
    np.testing.assert_array_equal(tout.numpy(), expected(x, rois))


def test_high_rank_torch_tensor_takes_the_capsule_path(torch_path):
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    deep = torch.zeros((1,) * 9 + (4,))
    before = sys.getrefcount(deep)
    with pytest.raises(_C.DkitValueError, match="4-d"):
        FWD(deep, torch.from_numpy(rois), torch.from_numpy(out), None, None, *AVG)
    assert sys.getrefcount(deep) == before


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_torch_layouts_without_storage_take_the_protocol(torch_path):
    # torch 1.13's sparse COO answers stride() with made-up strides; only data_ptr() fails. The
    # fast path must hand such tensors to the protocol, whose __dlpack__ raises torch's error.
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    tr, tout = torch.from_numpy(rois), torch.from_numpy(out)
    for sparse in (torch.from_numpy(x).to_sparse(), torch.from_numpy(x)[0, 0].to_sparse_csr()):
        with pytest.raises(RuntimeError, match="layout other than torch.strided"):
            FWD(sparse, tr, tout, None, None, *AVG)
    assert np.isnan(out).all()


def test_torch_function_mode_answers_are_checked(torch_path):
    # A __torch_function__ mode answers the getters the fast path reads; an answer that is not
    # ndim ints is an error naming the parameter (it was a SystemError: NULL without exception).
    # The reader reads the tensor itself, as torch's own C++ ops do: no mode is asked, so a
    # lying mode changes nothing.
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    class Lying(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            r = func(*args, **(kwargs or {}))
            return r[:-1] if getattr(func, "__name__", "") == "stride" else r

    x, rois, out = case()
    tx, tr, tout = torch.from_numpy(x), torch.from_numpy(rois), torch.from_numpy(out)
    with Lying():
        if torch_path == "getters":
            with pytest.raises(_C.DkitTypeError,
                               match=r"'input': the tensor's stride\(\) is \(256, 64, 8\), not 4 ints"):
                FWD(tx, tr, tout, None, None, *AVG)
            assert np.isnan(out).all()
        else:
            FWD(tx, tr, tout, None, None, *AVG)
            np.testing.assert_array_equal(out, expected(x, rois))
    FWD(tx, tr, tout, None, None, *AVG)  # no mode: fine
    np.testing.assert_array_equal(out, expected(x, rois))


def test_torch_negated_views_are_refused_not_misread(torch_path):
    # A lazily negated view keeps its values un-negated in memory (torch 1.13 exports that memory
    # through DLPack as it is); dkit must refuse it rather than compute with the wrong signs.
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    tx, tr = torch.from_numpy(x), torch.from_numpy(rois)
    neg = tx._neg_view()
    assert neg.is_neg()
    tout = torch.from_numpy(out)
    with pytest.raises(_C.DkitValueError, match=r"'input' is a lazily negated view .*resolve_neg\(\)"):
        FWD(neg, tr, tout, None, None, *AVG)
    assert np.isnan(out).all()
    FWD(neg.resolve_neg(), tr, tout, None, None, *AVG)
    np.testing.assert_allclose(out, -expected(x, rois), rtol=1e-6, atol=1e-6)


def test_torch_reader_reads_what_the_getters_read():
    # Note [torch reader]: the C++ reader is a shortcut, never a different answer. Every layout,
    # offset, dtype and rank the getters accept, read both ways into a NumPy copy via roi_align's
    # own argument checks: same shapes, strides and data pointers means the same results.
    torch = pytest.importorskip("torch")
    if _C._torch_reader() is None:
        pytest.skip("dkit._torch_reader not loaded")
    x, rois, _ = case(n=2, c=5, h=9, w=7)
    tx, tr = torch.from_numpy(x), torch.from_numpy(rois)
    big = torch.zeros(4, 5, 9, 7)
    big[1:3] = tx
    inputs = [tx, tx.contiguous(memory_format=torch.channels_last), big[1:3], tx[:, ::2], tx.transpose(2, 3)]
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        inputs.append(tx.to(dt))
    try:
        for v in inputs:
            r = tr.to(v.dtype)
            outs = []
            for on in (True, False):
                _C._torch_reader(on)
                o = torch.full((r.shape[0], v.shape[1], 2, 2), float("nan"), dtype=v.dtype)
                FWD(v, r, o, None, None, *AVG)
                outs.append(o)
            assert torch.equal(outs[0], outs[1]), (v.dtype, v.stride())
            assert not torch.isnan(outs[0]).any()
        # refusals are the same too: a writable output that requires grad, a non-float input
        for on in (True, False):
            _C._torch_reader(on)
            with pytest.raises(RuntimeError, match="require"):
                FWD(tx, tr, torch.empty(2, 5, 2, 2, requires_grad=True), None, None, *AVG)
            with pytest.raises(_C.DkitTypeError):
                FWD(tx.to(torch.int32), tr, torch.empty(2, 5, 2, 2), None, None, *AVG)
    finally:
        _C._torch_reader(True)


def test_torch_reader_refuses_another_torch():
    # The reader reads torch's C++ objects, whose layout changes between versions: it must not
    # load into a torch other than the one it was built against (then _C uses the getters).
    pytest.importorskip("torch")
    if _C._torch_reader() is None:
        pytest.skip("dkit._torch_reader not loaded")
    out = run_child("""
        import torch
        torch.__version__ = "0.0.1"
        try:
            import dkit._torch_reader
        except ImportError as e:
            print("refused:", e)
        from dkit import _C
        x, rois, out = tce.case()
        tce.FWD(torch.from_numpy(x), torch.from_numpy(rois), torch.from_numpy(out), None, None, *tce.AVG)
        print("reader:", _C._torch_reader())
    """)
    assert "refused: dkit._torch_reader was built for torch" in out and "but torch 0.0.1 is running" in out
    assert "reader: None" in out


@pytest.mark.parametrize("path", ["reader", "getters"])
def test_tensors_without_memory_are_refused(path):
    # Elements but a NULL data pointer: torch's efficient zero tensors (which autograd makes),
    # __torch_dispatch__ wrapper subclasses, any producer's capsule. Each used to reach the
    # kernel, which dereferenced NULL (a segfault); in a child process for that reason.
    pytest.importorskip("torch")
    out = run_child("""
        import ctypes, numpy as np, pytest, torch
        from dkit import _C
        if _C._torch_reader() is not None:
            _C._torch_reader(sys.argv[2] == "reader")
        x, rois, out = tce.case()
        tx, tr, tout = torch.from_numpy(x), torch.from_numpy(rois), torch.from_numpy(out)
        zx, zout = torch._efficientzerotensor(x.shape), torch._efficientzerotensor(out.shape)
        assert zx.data_ptr() == 0 and type(zx) is torch.Tensor
        msg = "has elements but no memory"
        with pytest.raises(_C.DkitBufferError, match="'input' " + msg):
            tce.FWD(zx, tr, tout, None, None, *tce.AVG)
        with pytest.raises(_C.DkitBufferError, match="'output' " + msg):
            tce.FWD(tx, tr, zout, None, None, *tce.AVG)
        cap = torch.utils.dlpack.to_dlpack(zx)  # torch exports it as it is
        with pytest.raises(_C.DkitBufferError, match="'input' " + msg):
            tce.FWD(cap, tr, tout, None, None, *tce.AVG)
        assert tce.capsule_name(cap) == "dltensor"  # refused, not consumed: torch's destructor frees it
        m = tce.Managed(x)
        m.m.dl_tensor.data = None
        with pytest.raises(_C.DkitBufferError, match="'input' " + msg):
            tce.FWD(m.capsule, rois, out, None, None, *tce.AVG)
        assert m.deleted == 0 and tce.capsule_name(m.capsule) == "dltensor_versioned"
        empty = tce.Managed(np.zeros((0, 4, 8, 8), np.float32))
        empty.m.dl_tensor.data = None  # no elements: a NULL pointer is fine
        with pytest.raises(_C.DkitIndexError, match="batch index"):  # the op's own check, later
            tce.FWD(empty.capsule, rois, out, None, None, *tce.AVG)
        assert empty.deleted == 1

        class Wrapper(torch.Tensor):  # the usual __torch_dispatch__ wrapper: its own storage is empty
            __torch_function__ = torch._C._disabled_torch_function_impl
            @staticmethod
            def __new__(cls, elem):
                return torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(),
                                                           dtype=elem.dtype, device=elem.device)
            def __init__(self, elem):
                self.elem = elem
            @classmethod
            def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
                raise NotImplementedError(f"Wrapper: {func}")
        w = Wrapper(tx)
        assert w.data_ptr() == 0
        with pytest.raises((NotImplementedError, _C.DkitBufferError)):  # its dispatch, or dkit: never the kernel
            tce.FWD(w, tr, tout, None, None, *tce.AVG)
        assert np.isnan(out).all()
        print("ok")
    """, path)
    assert out.strip().endswith("ok")


def test_torch_capsules_legacy_and_used_capsules():
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import to_dlpack

    x, rois, out = case()
    tout = torch.empty(out.shape)
    caps = [to_dlpack(torch.from_numpy(x)), to_dlpack(torch.from_numpy(rois)), to_dlpack(tout)]
    FWD(*caps, None, None, *AVG)
    np.testing.assert_array_equal(tout.numpy(), expected(x, rois))
    assert [capsule_name(c) for c in caps] == ["used_dltensor"] * 3
    with pytest.raises(_C.DkitBufferError, match="already consumed"):
        FWD(caps[0], to_dlpack(torch.from_numpy(rois)), to_dlpack(tout), None, None, *AVG)


def test_temporaries_stay_alive_for_the_call():
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import to_dlpack

    x, rois, _ = case()
    want = expected(x, rois)
    tout = torch.empty(want.shape)
    # Nothing but the capsules refers to these tensors: the managed tensors keep them alive.
    FWD(to_dlpack(torch.from_numpy(x.copy())), to_dlpack(torch.from_numpy(rois.copy())), tout, None, None, *AVG)
    np.testing.assert_array_equal(tout.numpy(), want)
    gc.collect()


def test_refcounts_are_unchanged_after_calls():
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    objs = [x, rois, out, torch.from_numpy(x), torch.from_numpy(rois), torch.empty(out.shape)]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(3):
        FWD(objs[0], objs[1], objs[2], None, None, *AVG)
        FWD(objs[3], objs[4], objs[5], None, None, *AVG)
        with pytest.raises(_C.DkitTypeError):  # an error after the tensors were taken
            FWD(objs[3], objs[4], objs[5], None, None, 2, 2, 0.5, 2, 1, "no")
        with pytest.raises(_C.DkitValueError):  # an error inside the op
            FWD(objs[0], objs[1], objs[2], None, None, 2, 2, -1.0, 2, 1, False)
    assert [sys.getrefcount(o) for o in objs] == before


@pytest.mark.slow
def test_many_calls_leak_nothing():
    # Each path, successful and failing, 10,000 times: the arguments' reference counts, the
    # number of live objects and Python's allocated blocks must stay where they were.
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import to_dlpack

    x, rois, out = case()
    tx, tr, tout = torch.from_numpy(x), torch.from_numpy(rois), torch.from_numpy(out)
    deep = torch.zeros((1,) * 9 + (4,))

    class Legacy(Producer):
        pass

    bad_scale = (2, 2, -1.0, 2, 1, False)
    kw = dict(aligned_height=2, aligned_width=2, spatial_scale=0.5, sampling_ratio=2, pool_mode=1, aligned=False)
    paths = {
        "numpy": lambda: FWD(x, rois, out, None, None, *AVG),
        "torch": lambda: FWD(tx, tr, tout, None, None, *AVG),
        "keywords": lambda: FWD(tx, tr, output=tout, **kw),
        "torch capsules": lambda: FWD(to_dlpack(tx), to_dlpack(tr), to_dlpack(tout), None, None, *AVG),
        "legacy producer": lambda: FWD(Legacy(x, legacy=True), rois, out, None, None, *AVG),
        "wrong type after tensors": lambda: FWD(tx, tr, tout, None, None, 2, 2, 0.5, 2, 1, 1),
        "op error": lambda: FWD(x, rois, out, None, None, *bad_scale),
        "int overflow": lambda: FWD(x, rois, out, None, None, 2**70, 2, 0.5, 2, 1, False),
        "rank 10": lambda: FWD(deep, tr, tout, None, None, *AVG),
        "grad output": lambda: FWD(tx, tr, torch.empty(out.shape, requires_grad=True), None, None, *AVG),
        "used capsule": lambda: FWD(x, rois, to_dlpack(tout), None, None, *AVG),
        "binding error": lambda: FWD(x, rois, out, bogus=1),
        "introspection": lambda: (_C.table("roi_align_forward"), _C.dump("roi_align_forward"), _C.config()),
    }
    watched = (x, rois, out, tx, tr, tout, deep)

    def run(f, n):
        for _ in range(n):
            try:
                f()
            except Exception:
                pass

    for name, f in paths.items():
        run(f, 100)  # warm: caches, interned strings, free lists
        gc.collect()
        refs, objs, blocks = [sys.getrefcount(o) for o in watched], len(gc.get_objects()), sys.getallocatedblocks()
        run(f, 10_000)
        gc.collect()
        assert [sys.getrefcount(o) for o in watched] == refs, name
        assert len(gc.get_objects()) - objs <= 10, name
        assert sys.getallocatedblocks() - blocks <= 500, name  # a leak of one block per call is 10,000


# ------------------------------------------------------------------------------------------
# Hand-made producers: versions, flags, deleters, streams, the legacy fallback


def test_versioned_capsules_and_deleters_called_once():
    x, rois, out = case()
    ms = [Managed(x), Managed(rois), Managed(out, versioned=False)]
    FWD(*(m.capsule for m in ms), None, None, *AVG)
    assert [m.deleted for m in ms] == [1, 1, 1]
    assert [capsule_name(m.capsule) for m in ms] == ["used_dltensor_versioned"] * 2 + ["used_dltensor"]
    np.testing.assert_array_equal(out, expected(x, rois))
    gc.collect()
    assert [m.deleted for m in ms] == [1, 1, 1]  # dropping the used capsules calls nothing


def test_deleters_run_on_error_paths():
    x, rois, out = case()
    ms = [Managed(x), Managed(rois), Managed(out)]
    with pytest.raises(_C.DkitTypeError, match="'aligned' must be bool"):
        FWD(*(m.capsule for m in ms), None, None, 2, 2, 0.5, 2, 1, 1)
    # scalars are converted before any tensor (Note [Conversion order]): not taken, still the holders'
    assert [m.deleted for m in ms] == [0, 0, 0]
    assert all(capsule_name(m.capsule) == "dltensor_versioned" for m in ms)
    ms = [Managed(x), Managed(rois), Managed(out)]
    with pytest.raises(_C.DkitValueError, match="spatial_scale"):
        FWD(*(m.capsule for m in ms), None, None, 2, 2, 0.0, 2, 1, False)
    assert [m.deleted for m in ms] == [1, 1, 1]
    assert np.isnan(out).all()
    # The same capsule twice: the second use is refused, the first is still released.
    m = Managed(x)
    with pytest.raises(_C.DkitBufferError, match="'rois'.*already consumed"):
        FWD(m.capsule, m.capsule, Managed(out).capsule, None, None, *AVG)
    assert m.deleted == 1


def test_read_only_output_is_refused_and_untouched():
    x, rois, out = case()
    ro = Managed(out, flags=READ_ONLY)
    ins = [Managed(x, flags=READ_ONLY), Managed(rois, flags=READ_ONLY)]  # read-only inputs are fine
    with pytest.raises(_C.DkitBufferError, match="roi_align_forward: parameter 'output' is read-only"):
        FWD(ins[0].capsule, ins[1].capsule, ro.capsule, None, None, *AVG)
    assert np.isnan(out).all()
    assert capsule_name(ro.capsule) == "dltensor_versioned" and ro.deleted == 0  # not taken: still the holder's
    assert [m.deleted for m in ins] == [1, 1]
    ok = [Managed(x, flags=READ_ONLY), Managed(rois, flags=READ_ONLY), Managed(out)]
    FWD(*(m.capsule for m in ok), None, None, *AVG)
    np.testing.assert_array_equal(out, expected(x, rois))


def test_output_exported_as_a_copy_is_refused():
    # A producer may answer __dlpack__() with a copy; writing results into it would lose them.
    x, rois, out = case()
    cp = Managed(out.copy(), flags=IS_COPIED)
    ins = [Managed(x, flags=IS_COPIED), Managed(rois)]  # copied inputs are fine
    with pytest.raises(_C.DkitBufferError, match="parameter 'output' was exported as a copy"):
        FWD(ins[0].capsule, ins[1].capsule, cp.capsule, None, None, *AVG)
    assert capsule_name(cp.capsule) == "dltensor_versioned" and cp.deleted == 0
    assert np.isnan(cp.arr).all() and np.isnan(out).all()
    assert [m.deleted for m in ins] == [1, 1]
    ok = [Managed(x, flags=IS_COPIED), Managed(rois), Managed(out)]
    FWD(*(m.capsule for m in ok), None, None, *AVG)
    np.testing.assert_array_equal(out, expected(x, rois))


def test_argmax_in_avg_mode_and_negative_k_are_refused():
    # argmax tensors are checked only in max mode, so avg mode refuses them rather than let a
    # kernel see an unchecked one (a 0-d capsule used to crash the CPU kernel).
    x, rois, out = case()
    for amy, amx in [(np.zeros((), np.float32), None), (None, np.zeros(out.shape, np.float32))]:
        with pytest.raises(_C.DkitValueError, match="'argmax_y' and 'argmax_x' are for max pooling"):
            FWD(x, rois, out, amy, amx, *AVG)
        gin = np.full(x.shape, np.nan, np.float32)
        with pytest.raises(_C.DkitValueError, match="'argmax_y' and 'argmax_x' are for max pooling"):
            BWD(out, rois, amy, amx, gin, *AVG)
        assert np.isnan(gin).all()
    assert np.isnan(out).all()
    # K < 0 from a hand-made capsule (NumPy and torch cannot make one)
    m_rois = Managed(rois)
    m_rois._shape[0] = -1
    m_out = Managed(out)
    m_out._shape[0] = -1
    with pytest.raises(_C.DkitValueError, match=r"'rois' must have shape \[K, 5\].*K < 0"):
        FWD(Managed(x).capsule, m_rois.capsule, m_out.capsule, None, None, *AVG)


def test_other_major_version_is_refused():
    x, rois, out = case()
    m2 = Managed(x, major=2)
    with pytest.raises(_C.DkitBufferError, match="DLPack version 2.0"):
        FWD(m2.capsule, Managed(rois).capsule, Managed(out).capsule, None, None, *AVG)
    assert m2.deleted == 0 and capsule_name(m2.capsule) == "dltensor_versioned"


def test_versioned_producer_gets_max_version_and_no_stream_on_cpu():
    x, rois, out = case()
    px, pr, po = Producer(x), Producer(rois), Producer(out)
    FWD(px, pr, po, None, None, *AVG)
    assert px.calls == [{"max_version": (1, 0), "stream": None}]
    assert [m.deleted for p in (px, pr, po) for m in p.made] == [1, 1, 1]
    np.testing.assert_array_equal(out, expected(x, rois))


def test_legacy_producer_fallback_on_type_error():
    class OldProducer(Producer):  # its own type: the answer is cached per type
        pass

    x, rois, out = case()
    px = OldProducer(x, legacy=True)
    FWD(px, Producer(rois), Producer(out), None, None, *AVG)
    assert px.calls == [{"max_version": (1, 0), "stream": None}, {"stream": None}]
    assert [m.deleted for m in px.made] == [1]
    np.testing.assert_array_equal(out, expected(x, rois))
    px2 = OldProducer(x, legacy=True)
    FWD(px2, Producer(rois), Producer(out), None, None, *AVG)
    assert px2.calls == [{"stream": None}]  # learned: no second exception


def test_streams_for_devices_that_have_them():
    x, rois, out = case()
    # a device whose backend has a device here would run the kernel on the producers' fake
    # memory: only devices without one (every device, on a machine without a GPU)
    here = {b.key for b in dkit.backends() if b.available}
    cases = [(d, s) for d, s, key in (((2, 0), 1, "cuda"), ((10, 0), 0, "hip")) if key not in here]
    if not cases:
        pytest.skip("every GPU backend has a device here")
    for device, stream in cases:  # kDLCUDA: legacy default stream; kDLROCM: 0
        ps = [Producer(a, device=device) for a in (x, rois, out)]
        with pytest.raises(_C.DkitNotImplementedError):  # no GPU backend here; data never touched
            FWD(*ps, None, None, *AVG)
        assert ps[0].calls == [{"max_version": (1, 0), "stream": stream}]
        assert [m.deleted for p in ps for m in p.made] == [1, 1, 1]
    assert np.isnan(out).all()


def test_bad_producers():
    x, rois, out = case()

    class NotACapsule:
        def __dlpack__(self, **kw):
            return "nope"

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(_C.DkitTypeError, match="'input'.*not a capsule"):
        FWD(NotACapsule(), rois, out, None, None, *AVG)
    with pytest.raises(_C.DkitTypeError, match="'rois' must be a tensor"):
        FWD(x, [[0, 1, 1, 2, 2]], out, None, None, *AVG)
    other = ctypes.pythonapi.PyCapsule_New
    cap = other(ctypes.c_void_p(1), b"something_else", None)
    with pytest.raises(_C.DkitTypeError, match="capsule named 'something_else'"):
        FWD(x, rois, cap, None, None, *AVG)
    with pytest.raises(_C.DkitTypeError, match="'input' must be a tensor"):
        FWD(None, rois, out, None, None, *AVG)


def test_numpy_producer():
    x, rois, out = case(n=2, c=3, h=5, w=6)
    refs = [sys.getrefcount(a) for a in (x, rois, out)]
    FWD(x, rois, out, None, None, *AVG)
    assert not np.isnan(out).any()
    assert [sys.getrefcount(a) for a in (x, rois, out)] == refs
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(BufferError):  # NumPy < 2 refuses to export read-only arrays at all
        FWD(x, rois, ro, None, None, *AVG)


# ------------------------------------------------------------------------------------------
# Argument conversion


def test_wrong_python_types_name_the_parameter():
    x, rois, out = case()
    bad = {
        "aligned_height": 2.0, "aligned_width": "2", "spatial_scale": "0.5", "sampling_ratio": None,
        "pool_mode": True, "aligned": 1,
    }  # fmt: skip
    names = [a for a in FWD.arg_names]
    for name, value in bad.items():
        args = [x, rois, out, None, None, *AVG]
        args[names.index(name)] = value
        with pytest.raises(_C.DkitTypeError, match=f"roi_align_forward: parameter '{name}' must be"):
            FWD(*args)
    assert np.isnan(out).all()


def test_accepted_python_types():
    x, rois, out = case()
    want = expected(x, rois)
    FWD(x, rois, out, None, None, np.int64(2), np.int32(2), 1, 2, 1, False)  # int for float: widened
    np.testing.assert_array_equal(out, expected(x, rois, (2, 2, 1.0, 2, 1, False)))
    FWD(x, rois, out, None, None, 2, 2, np.float32(0.5), np.int16(2), 1, False)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(_C.DkitValueError, match="'aligned_height' does not fit"):
        FWD(x, rois, out, None, None, 2**70, 2, 0.5, 2, 1, False)
    with pytest.raises(_C.DkitTypeError, match="'aligned' must be bool"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, 1, np.bool_(False))


def test_numbers_out_of_range_are_value_errors():
    # An int beyond a double's range for a float parameter was a bare OverflowError; it is a
    # DkitValueError naming the parameter, like an int beyond int64 for an int parameter.
    x, rois, out = case()
    with pytest.raises(_C.DkitValueError, match="'spatial_scale' does not fit in a double"):
        FWD(x, rois, out, None, None, 2, 2, 10**400, 2, 1, False)
    with pytest.raises(_C.DkitValueError, match="'pool_mode' does not fit in a 64-bit int"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, -(2**63) - 1, False)
    # A huge but finite scale is a value, for inputs computed in float64; float32 ones refuse it
    # (Note [Scale in the compute type] in ops/roi_align.c).
    x, rois, out = case(dtype=np.float64)
    FWD(x, rois, out, None, None, 2, 2, 10**300, 2, 1, False)
    assert np.isfinite(out).all()


def test_keywords_binding_and_arity():
    x, rois, out = case()
    want = expected(x, rois)
    kw = dict(aligned_height=2, aligned_width=2, spatial_scale=0.5, sampling_ratio=2, pool_mode=1, aligned=False)
    out[:] = np.nan
    FWD(input=x, rois=rois, output=out, **kw)  # optional tensors omitted: None
    np.testing.assert_array_equal(out, want)
    out[:] = np.nan
    FWD(x, rois, out, None, argmax_x=None, **kw)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(_C.DkitTypeError, match="unexpected keyword argument 'bogus'"):
        FWD(x, rois, out, bogus=1, **kw)
    with pytest.raises(_C.DkitTypeError, match="multiple values for argument 'input'"):
        FWD(x, rois, out, input=x, **kw)
    with pytest.raises(_C.DkitTypeError, match="missing required argument 'aligned'"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, 1)
    with pytest.raises(_C.DkitTypeError, match="takes 11 arguments but 12 were given"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, 1, False, 0)
    with pytest.raises(TypeError):
        _C.Op()


def test_max_mode_and_backward():
    x, rois, out = case()
    ay = np.zeros_like(out)
    ax = np.zeros_like(out)
    FWD(x, rois, out, ay, ax, 2, 2, 0.5, 2, 0, False)
    avg = expected(x, rois)
    assert (out >= avg - 1e-6).all() and (out > avg + 1e-6).any()
    with pytest.raises(_C.DkitValueError, match="argmax"):
        FWD(x, rois, out, None, None, 2, 2, 0.5, 2, 0, False)
    grad_in = np.full_like(x, np.nan)
    BWD(np.ones_like(out), rois, None, None, grad_in, *AVG)
    assert not np.isnan(grad_in).any() and grad_in.sum() > 0


# ------------------------------------------------------------------------------------------
# Introspection


def test_op_callables_and_schemas():
    names = _C.op_names()
    assert {"roi_align_forward", "roi_align_backward"} <= set(names) and len(set(names)) == len(names)
    for n in names:
        fn = getattr(_C.ops, n)
        assert isinstance(fn, _C.Op) and fn.__name__ == n
        assert fn.schema == fn.__doc__ == _C.schema(n)
        assert fn.schema.startswith(f"dkit::{n}(") and repr(fn) == f"<dkit op {fn.schema}>"
        assert len(fn.args) == len(fn.arg_names)
    assert FWD.schema == (
        "dkit::roi_align_forward(Tensor input, Tensor rois, Tensor(a!) output, Tensor(b!)? argmax_y, "
        "Tensor(c!)? argmax_x, int aligned_height, int aligned_width, float spatial_scale, int sampling_ratio, "
        "int pool_mode, bool aligned) -> ()"
    )
    assert FWD.args[2] == ("output", "Tensor", True) and FWD.args[3] == ("argmax_y", "Tensor?", True)
    assert FWD.args[0] == ("input", "Tensor", False) and FWD.args[7] == ("spatial_scale", "float", False)
    with pytest.raises(_C.DkitValueError, match="no op named 'nope'"):
        _C.schema("nope")
    with pytest.raises(_C.DkitTypeError):
        _C.schema(1)
    _C.refresh_ops()
    assert _C.ops.roi_align_forward is FWD


def test_table_and_dump():
    rows = _C.table("roi_align_forward")
    assert all(len(r) == 4 for r in rows)
    keys = [r[0] for r in rows]
    assert keys.index("Profile") < keys.index("cpu")  # highest priority first
    assert ("cpu", "kernel") == rows[keys.index("cpu")][:2] and rows[keys.index("cpu")][2]
    assert rows[keys.index("Profile")][1:] == ("fallback", "dk_profile", True)
    missing = [r for r in rows if r[1] == "missing"]
    assert all(r[2] is None and r[3] is False for r in missing)
    text = _C.dump("roi_align_forward")
    assert text.startswith(FWD.schema) and "cpu" in text and rows[keys.index("cpu")][2] in text
    with pytest.raises(_C.DkitValueError):
        _C.table("nope")


def test_keys_tls_and_profile():
    assert _C.key("cpu") == _C.KEY_CPU == 1 and _C.key("Profile") == _C.KEY_PROFILE
    assert _C.key_name(_C.KEY_PROFILE) == "Profile" and _C.key_name(40).startswith("key")
    with pytest.raises(_C.DkitValueError, match="no dispatch key named"):
        _C.key("no such key")
    with pytest.raises(_C.DkitIndexError):
        _C.key_name(64)
    with pytest.raises(_C.DkitTypeError):
        _C.tls_push_include("Profile")
    x, rois, out = case()
    _C.profile_reset()
    assert _C.profile_rows() == []
    token = _C.tls_push_include(1 << _C.KEY_PROFILE)
    try:
        inner = _C.tls_push_exclude(1 << 40)
        assert _C.tls_get() == (1 << _C.KEY_PROFILE, 1 << 40)
        _C.tls_pop(inner)
        assert _C.tls_get() == (1 << _C.KEY_PROFILE, 0)
        for _ in range(3):
            FWD(x, rois, out, None, None, *AVG)
    finally:
        _C.tls_pop(token)
    FWD(x, rois, out, None, None, *AVG)  # not profiled
    rows = _C.profile_rows()
    assert [(r[0], r[1], r[2]) for r in rows] == [("roi_align_forward", "cpu", 3)] and rows[0][3] > 0
    assert "roi_align_forward" in _C.profile_format()
    _C.profile_reset()
    assert _C.profile_rows() == []
    with pytest.raises(_C.DkitTypeError):
        _C.tls_pop("token")


def test_names_with_nul_and_keys_out_of_range():
    # C would read a name only up to its NUL and find another op or key than the one asked for.
    for fn in (_C.schema, _C.table, _C.dump):
        with pytest.raises(_C.DkitValueError, match="no op named"):
            fn("roi_align_forward\0junk")
    with pytest.raises(_C.DkitValueError, match="no key named"):
        _C.key("cpu\0")
    assert _C.key("cpu") == _C.KEY_CPU
    for k in (2**70, -(2**70), -1, 64):  # beyond a C long was a bare OverflowError
        with pytest.raises(_C.DkitIndexError, match="outside"):
            _C.key_name(k)


def test_trace_goes_to_stderr(capfd):
    x, rois, out = case()
    _C.set_trace(True)
    try:
        FWD(x, rois, out, None, None, *AVG)
    finally:
        _C.set_trace(False)
    FWD(x, rois, out, None, None, *AVG)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "roi_align_forward" in ln]
    assert len(lines) == 1 and "-> cpu" in lines[0], err


def test_config_and_backends():
    cfg = _C.config()
    with open(os.path.join(ROOT, "csrc", "common", "dk_export.h")) as f:
        version = re.search(r'DK_VERSION_STRING "([^"]+)"', f.read()).group(1)
    assert cfg["version"] == version == _C.__version__
    assert cfg["abi"] == _C.ABI_VERSION and cfg["openmp"] is True and cfg["openmp_max_threads"] >= 1
    assert "cpu" in cfg["backends"] and cfg["compiler"]
    # the built-in CPU backend: no library, key cpu, available, one device, no reason
    assert ("cpu", None, "cpu", True, None, 1) in _C.backends()
    with pytest.raises(_C.DkitFileNotFoundError, match="no such file") as e:
        _C.load_backend("/nonexistent/libx.so")
    assert isinstance(e.value, FileNotFoundError)
    libm = ctypes.util.find_library("m")
    for path in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", libm):
        if path and os.path.isfile(path):
            with pytest.raises(_C.DkitValueError, match="not a dkit backend"):
                _C.load_backend(path)
            break
    with pytest.raises(TypeError):
        _C.load_backend(3)
    # dlerror() quotes the path's bytes, which need not be UTF-8: the message used to be lost
    with pytest.raises(_C.DkitFileNotFoundError, match=r"nonexistent/\\xff\.so"):
        _C.load_backend(b"/nonexistent/\xff.so")


def test_module_instances_are_independent_and_collected():
    # Multi-phase init: each instance has its own state (types, exceptions, caches), reached by
    # the GC, so a dropped instance is freed; a sub-interpreter imports its own.
    import importlib.util
    import weakref

    torch = pytest.importorskip("torch")
    spec = importlib.util.find_spec("dkit._C")
    x, rois, out = case()
    refs = []
    for _ in range(5):
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        assert m.Op is not _C.Op and m.DkitError is not _C.DkitError
        m.ops.roi_align_forward(torch.from_numpy(x), torch.from_numpy(rois), out, None, None, *AVG)  # fills its caches
        with pytest.raises(m.DkitValueError):
            m.ops.roi_align_forward(x, rois, out, None, None, 2, 2, -1.0, 2, 1, False)
        refs.append(weakref.ref(m))
        del m
    gc.collect()
    assert [r() for r in refs] == [None] * 5
    np.testing.assert_array_equal(out, expected(x, rois))
    # In a child process: a sub-interpreter leaves this thread's PyGILState confused for torch's
    # autograd, which then believes the GIL is held during backward().
    # A legacy sub-interpreter, sharing the main one's GIL: dkit._C does not declare support for
    # an interpreter with a GIL of its own (the default of Python 3.12's and 3.13's private
    # modules), whose import refuses such a module. The module is _interpreters from Python 3.13
    # on, _xxsubinterpreters before; 3.13's run_string returns the error instead of raising it.
    out = run_child("""
        try:
            import _interpreters as si
            make = lambda: si.create("legacy")
        except ImportError:
            try:
                import _xxsubinterpreters as si
            except ImportError:
                print("ok: no sub-interpreters module")
                raise SystemExit
            def make():
                try:
                    return si.create(isolated=False)
                except TypeError:  # Python 3.11: every sub-interpreter shares the GIL
                    return si.create()
        code = (
            "import sys\\n"
            f"sys.path[:0] = {sys.path!r}\\n"
            "from dkit import _C\\n"
            "assert 'roi_align_forward' in _C.op_names()\\n"
            "try:\\n"
            "    _C.ops.roi_align_forward(None, None, None, None, None, 1, 1, 1.0, 1, 1, False)\\n"
            "except _C.DkitTypeError:\\n"
            "    pass\\n"
            "else:\\n"
            "    raise AssertionError('no DkitTypeError')\\n"
        )
        interp = make()
        failed = si.run_string(interp, code)
        si.destroy(interp)
        assert failed is None, failed
        print("ok")
    """)
    assert out.strip().startswith("ok")


def test_paths():
    import dkit._paths as p

    inc = p.get_include()
    assert os.path.isabs(inc) and os.path.isfile(os.path.join(inc, "dkit.h"))
    if os.path.basename(inc) == "include":  # built: everything a backend needs is there
        for h in ("dk_op.h", "roi_align.h", os.path.join("kernels", "dk_half.h")):
            assert os.path.isfile(os.path.join(inc, h)), h
    lib = p.get_library()
    assert os.path.isabs(lib) and os.path.basename(lib) == "libdkit.so"


# ------------------------------------------------------------------------------------------
# Backends from Python: loading, ABI check, a vendor device, the GIL. In a child process, since
# a loaded backend cannot be unloaded and would change what other tests see.

_BACKEND_C = r"""
#include <time.h>
#include "dkit.h"
#include "roi_align.h"

static dk_status fill(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output, dk_tensor *ay,
                      dk_tensor *ax, int64_t ph, int64_t pw, double scale, int64_t sr, int64_t mode, bool aligned)
{
    float *o = (float *)dk_tensor_data(output);
    for (int64_t i = 0; i < dk_tensor_numel(output); i++) o[i] = 42.0f;
    if (sr == 99) { /* hold the call for a while: Python threads must run meanwhile */
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
    }
    return DK_OK;
}

DK_BACKEND_ENTRY(pytestdev)
{
    dk_key key;
    dk_status st = dk_backend_key_register("pytestdev", kDLExtDev, &key);
    if (st) return st;
    return dk_register_device_impl(&dk_roi_align_forward_op, key, (dk_fnptr)fill, "pytest_fill", NULL);
}
"""

_BAD_ABI_C = r"""
#include <stdint.h>
const uint32_t dk_backend_abi_version = 999;
const char dk_backend_name[] = "badabi";
int dk_backend_init(void) { return 0; }
"""

_CHILD = r"""
import sys, threading, time, importlib.util
import numpy as np
spec = importlib.util.spec_from_file_location("tce", sys.argv[1]); tce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tce)
import dkit
from dkit import _C
good, bad = sys.argv[2], sys.argv[3]
_C.load_backend(good)
_C.load_backend(good)  # twice: a no-op
assert (("pytestdev", good) in [b[:2] for b in _C.backends()]), _C.backends()
key = _C.key("pytestdev")
assert _C.KEY_VENDOR_FIRST <= key <= _C.KEY_VENDOR_LAST
row = [r for r in _C.table("roi_align_forward") if r[0] == "pytestdev"]
assert row == [("pytestdev", "kernel", "pytest_fill", False)], row
x, rois, out = tce.case()
ms = [tce.Managed(a, device=(12, 0)) for a in (x, rois, out)]
tce.FWD(*(m.capsule for m in ms), None, None, *tce.AVG)
assert (out == 42).all() and [m.deleted for m in ms] == [1, 1, 1]
ticks = []
def tick():
    end = time.monotonic() + 0.25
    while time.monotonic() < end:
        ticks.append(1); time.sleep(0.01)
out[:] = 0
ms = [tce.Managed(a, device=(12, 0)) for a in (x, rois, out)]
t = threading.Thread(target=tick); t.start(); time.sleep(0.02)
n0 = len(ticks)
tce.FWD(*(m.capsule for m in ms), None, None, 2, 2, 0.5, 99, 1, False)
n1 = len(ticks)
t.join()
assert n1 - n0 >= 5, (n0, n1)  # the thread ran while the kernel slept: the GIL was released
try:
    _C.load_backend(bad)
except _C.DkitImportError as e:
    assert isinstance(e, ImportError) and "ABI" in str(e), e
else:
    raise AssertionError("ABI mismatch accepted")
print("ok")
"""


def _build_backend(tmp_path, name, source, link=True):
    """Compiles C `source` against dkit's installed headers into tmp_path/lib<name>.so, linked to
    libdkit when `link`, as a vendor would; skips without a C compiler or the headers."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    import dkit._paths as p

    inc, lib = p.get_include(), p.get_library()
    if not os.path.isfile(os.path.join(inc, "roi_align.h")):
        pytest.skip("headers not built into dkit/include")
    src, so = tmp_path / f"{name}.c", tmp_path / f"lib{name}.so"
    src.write_text(source)
    cmd = [cc, "-std=c11", "-D_GNU_SOURCE", "-shared", "-fPIC", "-Wall", "-Werror", "-Wno-unused-parameter",
           f"-I{inc}", str(src), "-o", str(so)]
    if link:
        cmd += [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return so


@pytest.mark.threads
def test_backend_loading_in_a_child_process(tmp_path):
    good = _build_backend(tmp_path, "pytestdev", _BACKEND_C)
    bad = _build_backend(tmp_path, "badabi", _BAD_ABI_C, link=False)
    assert run_child(_CHILD, good, bad).strip().endswith("ok")


_CHILD_ENV = r"""
import sys, warnings
warnings.simplefilter("error")  # a failing backend must not break the import even so
import dkit
good, link, bad = sys.argv[2:5]
rows = {b.path: b for b in dkit.backends()}
g = rows[good]
assert (g.name, g.key, g.available, g.origin) == ("pytestdev", "pytestdev", True, "DKIT_BACKENDS"), g
assert link not in rows, rows  # the same file by a symlink: loaded once (Note [A library loads once])
for path, why in (("/nonexistent/libnone.so", "no such file"), (bad, "ABI")):
    b = rows[path]
    assert (b.available, b.key, b.origin) == (False, None, "DKIT_BACKENDS") and why in b.reason, b
    assert "not loaded" in str(b), str(b)
assert [r[0] for r in dkit.dispatch.table("roi_align_forward")].count("pytestdev") == 1
dkit.load_backend(good)  # loaded already: a no-op that keeps the origin
assert {b.path: b for b in dkit.backends()}[good].origin == "DKIT_BACKENDS"
assert [b for b in dkit.backends() if b.name == "cpu"][0].origin == "built in"
print("ok")
"""


def test_dkit_backends_are_loaded_at_import_and_a_failing_one_is_skipped(tmp_path, monkeypatch):
    # Note [A failing backend never breaks the import] (csrc/python/dk_pybackends_at_import.c):
    # DKIT_BACKENDS loads libraries in order when dkit._C is imported; a missing file and a
    # library built for another ABI are reported by dkit.backends() with their reasons, with
    # warnings turned into errors too; a symlink to a loaded library loads nothing more.
    good = _build_backend(tmp_path, "pytestdev", _BACKEND_C)
    bad = _build_backend(tmp_path, "badabi", _BAD_ABI_C, link=False)
    link = tmp_path / "libalias.so"
    link.symlink_to(good)
    paths = [str(good), "", "/nonexistent/libnone.so", str(bad), str(link)]
    monkeypatch.setenv("DKIT_BACKENDS", os.pathsep.join(paths))
    assert run_child(_CHILD_ENV, good, link, bad).strip().endswith("ok")


_CHILD_ENTRY_POINTS = r"""
import dkit
good = sys.argv[2]
rows = {b.path: b for b in dkit.backends()}
g = rows[good]
assert (g.key, g.available, g.origin) == ("pytestdev", True, "entry point a_good (dkit-test-vendor 0.1)"), g
failed = {b.origin: b for b in dkit.backends() if not b.available and b.origin.startswith("entry point")}
assert set(failed) == {"entry point b_broken (dkit-test-vendor 0.1)", "entry point c_missing (dkit-test-vendor 0.1)",
                       "entry point d_not_a_path (dkit-test-vendor 0.1)"}, failed
assert "RuntimeError: no driver here" in failed["entry point b_broken (dkit-test-vendor 0.1)"].reason
assert "ModuleNotFoundError" in failed["entry point c_missing (dkit-test-vendor 0.1)"].reason
assert "not a library's path" in failed["entry point d_not_a_path (dkit-test-vendor 0.1)"].reason
assert [r[0] for r in dkit.dispatch.table("roi_align_forward")].count("pytestdev") == 1
# a module that loads its library itself, while dkit.dispatch (whose import began all this) is
# still half imported
m = rows[sys.argv[3]]
assert (m.key, m.available, m.origin) == ("pymoddev", True, "entry point e_module (dkit-test-vendor 0.1)"), m
print("ok")
"""


def test_backends_declared_by_installed_packages_load_with_dkit(tmp_path, monkeypatch):
    # Note [Backends from entry points] (dkit/_entry_points.py): a package's "dkit.backends"
    # entry points load when dkit._C is imported, in name order: a library's path loads; a
    # module that raises, a module that is not there and an object that is no path are each
    # reported with their reasons and skipped, with warnings turned into errors too.
    good = _build_backend(tmp_path, "pytestdev", _BACKEND_C)
    site = tmp_path / "site"
    info = site / "dkit_test_vendor-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dkit-test-vendor\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dkit.backends]\n"
        "a_good = dkit_test_vendor:LIBRARY\n"
        "b_broken = dkit_test_broken\n"
        "c_missing = dkit_test_not_installed\n"
        "d_not_a_path = dkit_test_vendor:NUMBER\n"
        "e_module = dkit_test_module\n"
    )
    (site / "dkit_test_vendor.py").write_text(f"LIBRARY = {str(good)!r}\nNUMBER = 7\n")
    (site / "dkit_test_broken.py").write_text("raise RuntimeError('no driver here')\n")
    other = _build_backend(tmp_path, "pymoddev", _BACKEND_C.replace("pytestdev", "pymoddev").replace("kDLExtDev", "20"))
    (site / "dkit_test_module.py").write_text(f"import dkit\ndkit.load_backend({str(other)!r})\n")
    monkeypatch.setenv("PYTHONWARNINGS", "error::RuntimeWarning")  # errors before dkit._C's import
    assert run_child(_CHILD_ENTRY_POINTS, good, other, path=[site]).strip().endswith("ok")
    # the same with dkit.dispatch imported first, as in `from dkit.dispatch import table`: the
    # module's dkit.load_backend runs while dkit.dispatch is still half imported (run_child's
    # prelude imports dkit._C first, so this child is run bare)
    import dkit._paths as p

    root = os.path.dirname(os.path.dirname(p.__file__))
    code = (
        "import sys\nimport dkit.dispatch\nimport dkit\n"
        "m = {b.path: b for b in dkit.backends()}[sys.argv[1]]\n"
        "assert (m.key, m.available) == ('pymoddev', True), m\nprint('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), root]))
    r = subprocess.run([sys.executable, "-c", code, str(other)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


# A backend with a backend object and nothing else: every op through the CPU fallback (Note
# [The CPU fallback] in csrc/common/dk_cpu_fallback.h). Its device (kDLExtDev) keeps its memory
# on the host, so its copies are memcpy; they count the bytes they move.
_FALLBACK_C = r"""
#include <string.h>
#include "dkit.h"

size_t copied_bytes[3];

static dk_status copy(void *ctx, int32_t device, void *dst, const void *src, size_t n, dk_copy_kind kind, void *stream)
{
    memcpy(dst, src, n);
    copied_bytes[kind] += n;
    return DK_OK;
}

static const dk_backend fbdev = {.abi = DK_ABI_VERSION, .name = "pyfbdev", .device_type = kDLExtDev, .copy = copy};

DK_BACKEND_ENTRY(pyfbdev)
{
    dk_key key;
    dk_status st = dk_backend_register(&fbdev, &key);
    if (st) return st;
    return dk_register_cpu_fallback(key, NULL);
}
"""

_CHILD_FALLBACK = r"""
import ctypes, sys
import numpy as np
import dkit
from dkit import _C
lib = sys.argv[2]
_C.load_backend(lib)
copied = (ctypes.c_size_t * 3).in_dll(ctypes.CDLL(lib), "copied_bytes")
rows = {r[0]: r for r in _C.table("box_iou")}
assert rows["pyfbdev"][1:3] == ("fallback (cpu copy)", "dk_cpu_fallback"), rows
b1 = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], np.float32)
b2 = np.array([[0, 0, 2, 2]], np.float32)
want = np.zeros((2, 1), np.float32)
_C.ops.box_iou(b1, b2, want, 0, False, 1e-7, 0)
out = np.zeros((2, 1), np.float32)
ms = [tce.Managed(a, device=(12, 0)) for a in (b1, b2, out)]
with dkit.profile() as prof:
    _C.ops.box_iou(*(m.capsule for m in ms), 0, False, 1e-7, 0)
assert (out == want).all() and want[0, 0] == 1, (out, want)
# DK_COPY_HOST_TO_DEVICE (0): the output back; DK_COPY_DEVICE_TO_HOST (1): every argument in
assert list(copied) == [out.nbytes, b1.nbytes + b2.nbytes + out.nbytes, 0], list(copied)
assert [(r.op, r.backend, r.count) for r in prof.rows] == [("box_iou", "pyfbdev (cpu copy)", 1)], prof.rows
# nms: a data-dependent output comes back through the fallback
boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
scores = np.array([0.9, 0.8, 0.7], np.float32)
keep, num = np.full(3, -1, np.int64), np.zeros(1, np.int64)
ms = [tce.Managed(a, device=(12, 0)) for a in (boxes, scores, keep, num)]
_C.ops.nms(ms[0].capsule, ms[1].capsule, None, ms[2].capsule, ms[3].capsule, 0.5, 0)
assert num[0] == 2 and keep[:2].tolist() == [0, 2], (keep, num)
print("ok")
"""


def test_a_backend_with_no_kernel_serves_every_op_through_the_cpu_fallback(tmp_path):
    lib = _build_backend(tmp_path, "pyfbdev", _FALLBACK_C)
    out = run_child(_CHILD_FALLBACK, lib)
    assert out.strip().endswith("ok")


# ------------------------------------------------------------------------------------------
# int[] and str arguments, and ops the binding must not call. roi_align has none of these, so a
# backend defines its own ops (in a child process, as above).

_PROBE_C = r"""
#include <string.h>
#include "dkit.h"

/* pyprobe(out, sizes, mode, f): out (float64, 1-d) gets [len(sizes), strlen(mode), f, sizes...]. */
#define DK_PYPROBE_ARGS(X) X(TENSOR_OUT, out) X(INT_LIST, sizes) X(STR, mode) X(FLOAT, f)
DK_DECLARE_OP(pyprobe, DK_PYPROBE_ARGS)
DK_DEFINE_OP(pyprobe, DK_PYPROBE_ARGS)
{
    if (out->ndim != 1 || out->dtype.code != kDLFloat || out->dtype.bits != 64 || dk_tensor_numel(out) < 3 + sizes.size)
        return dk_error(DK_EINVAL, "pyprobe: out must be float64[3 + len(sizes)]");
    return DK_OK;
}
static dk_status pyprobe_cpu(dk_tensor *out, dk_int_list sizes, const char *mode, double f)
{
    double *o = (double *)dk_tensor_data(out);
    o[0] = (double)sizes.size;
    o[1] = (double)strlen(mode);
    o[2] = f;
    for (int64_t k = 0; k < sizes.size; k++) o[3 + k] = (double)sizes.data[k];
    return DK_OK;
}

/* pyprobe32: as many arguments as an op may have (DK_STACK_MAX): out, then 31 int lists whose
 * items out receives in order, after their count. */
#define L(X, n) X(INT_LIST, l##n)
#define DK_PYPROBE32_ARGS(X) X(TENSOR_OUT, out) L(X, 1) L(X, 2) L(X, 3) L(X, 4) L(X, 5) L(X, 6) L(X, 7) \
    L(X, 8) L(X, 9) L(X, 10) L(X, 11) L(X, 12) L(X, 13) L(X, 14) L(X, 15) L(X, 16) L(X, 17) L(X, 18) L(X, 19) \
    L(X, 20) L(X, 21) L(X, 22) L(X, 23) L(X, 24) L(X, 25) L(X, 26) L(X, 27) L(X, 28) L(X, 29) L(X, 30) L(X, 31)
DK_DECLARE_OP(pyprobe32, DK_PYPROBE32_ARGS)
DK_DEFINE_OP(pyprobe32, DK_PYPROBE32_ARGS) { return DK_OK; }
static dk_status pyprobe32_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    dk_value *v = dk_stack_args(stack, op);
    double *o = (double *)dk_tensor_data(v[0].u.t);
    int64_t cap = dk_tensor_numel(v[0].u.t), n = 1;
    for (int a = 1; a < op->nargs; a++)
        for (int64_t k = 0; k < v[a].u.il.size; k++)
            if (n < cap) o[n++] = (double)v[a].u.il.data[k];
    o[0] = (double)(n - 1);
    return DK_OK;
}

/* Ops made by hand that no binding can call: more arguments than a dk_stack holds, and an
 * argument without a name. */
static const dk_arg_info too_many_args[DK_STACK_MAX + 8] = {{"a", DK_ARG_INT, false}};
static dk_op too_many = {.name = "pyprobe_too_many", .args = too_many_args, .nargs = DK_STACK_MAX + 8};
static const dk_arg_info unnamed_args[1] = {{NULL, DK_ARG_INT, false}};
static dk_op unnamed = {.name = "pyprobe_unnamed_arg", .args = unnamed_args, .nargs = 1};

DK_BACKEND_ENTRY(pyprobe)
{
    dk__op_announce(&too_many);
    dk__op_announce(&unnamed);
    dk_status st = dk_register_device_impl(&dk_pyprobe_op, DK_KEY_CPU, (dk_fnptr)pyprobe_cpu, "pyprobe_cpu", NULL);
    if (st) return st;
    return dk_op_register(&dk_pyprobe32_op, DK_KEY_CPU, dk_kernel_boxed(pyprobe32_boxed, NULL, "pyprobe32"), NULL);
}
"""

_PROBE_CHILD = """
import gc, warnings
import numpy as np, pytest
import dkit
from dkit import _C
_C.load_backend(sys.argv[2])
# Malformed hand-made ops are refused by the core itself (dk__op_validate, with a warning on
# stderr), so the binding never sees them.
assert not {"pyprobe_too_many", "pyprobe_unnamed_arg"} & set(_C.op_names())
assert not hasattr(_C.ops, "pyprobe_too_many") and not hasattr(_C.ops, "pyprobe_unnamed_arg")
P, P32 = _C.ops.pyprobe, _C.ops.pyprobe32
assert P.args[1:] == (("sizes", "int[]", False), ("mode", "str", False), ("f", "float", False))
out = np.zeros(300)

def probe(sizes, mode="abc", f=1.5):
    out[:] = np.nan
    P(out, sizes, mode, f)
    n = int(out[0])
    return out[3:3 + n].astype(np.int64).tolist(), int(out[1]), out[2]

assert probe([1, -2, 2**62, -(2**62)]) == ([1, -2, 2**62, -(2**62)], 3, 1.5)  # exact in the float64 out
assert probe((np.int64(5), np.int32(-6)), "", 2) == ([5, -6], 0, 2.0)
assert probe(range(200))[0] == list(range(200))  # beyond the 64 items kept on the C stack
assert probe(np.arange(7))[0] == list(range(7))
assert probe([])[0] == []
for bad in ("abc", b"ab", 3, [1, 2.0], [True], [None]):
    with pytest.raises(_C.DkitTypeError, match="'sizes' must be"):
        P(out, bad, "m", 1.0)
with pytest.raises(_C.DkitValueError, match="'sizes' does not fit in a 64-bit int"):
    P(out, [1, 2**64], "m", 1.0)
with pytest.raises(_C.DkitValueError, match="'mode' contains a NUL"):
    P(out, [1], "a\\0b", 1.0)
with pytest.raises(_C.DkitTypeError, match="'mode' must be str"):
    P(out, [1], b"abc", 1.0)

# 31 lists, 217 items: the stack buffer fills, then every later list is a heap block.
lists = [list(range(k, k + 7)) for k in range(31)]
out32 = np.zeros(1000)
P32(out32, *lists)
assert out32[0] == 217 and out32[1:218].tolist() == [v for l in lists for v in l]
lists[-1] = list(range(500))  # a long one after 210 items
P32(out32, *lists)
assert out32[0] == 710 and out32[1:711].tolist() == [v for l in lists for v in l]

# An item's __index__ that changes the list being read: its item array is freed or moved under
# the conversion (a use after free); now an error.
class Clears:
    def __init__(self, lst): self.lst = lst
    def __index__(self):
        self.lst.clear()
        gc.collect()
        return 5

class Grows:
    def __init__(self, lst): self.lst = lst
    def __index__(self):
        self.lst.extend(range(10_000))
        return 3

for kind in (Clears, Grows):
    lst = [1, 2]
    lst += [kind(lst)] + [object() for _ in range(3)] + [10**6 + i for i in range(50)]
    with pytest.raises(_C.DkitError, match="'sizes' changed size while it was read"):
        P(out, lst, "m", 1.0)

# Nothing of the int[] and str paths leaks, on success or failure.
def run(n):
    for i in range(n):
        P(out, list(range(100)), "mode", 1.0)
        P(out, (1, 2), "m", 0)
        for bad in ([1, "x"], [1, 2**70]):
            try:
                P(out, bad, "m", 1.0)
            except _C.DkitError:
                pass
run(100)
gc.collect()
objs, blocks = len(gc.get_objects()), sys.getallocatedblocks()
run(5000)
gc.collect()
assert len(gc.get_objects()) - objs <= 10 and sys.getallocatedblocks() - blocks <= 500
print("ok")
"""


def test_int_lists_strings_and_uncallable_ops_in_a_child_process(tmp_path):
    so = _build_backend(tmp_path, "pyprobe", _PROBE_C)
    assert run_child(_PROBE_CHILD, so).strip().endswith("ok")


@pytest.mark.parametrize("reader", [True, False])
def test_torch_memory_freed_during_the_call_is_never_read_or_written(reader):
    # Note [Conversion order] (dk_pydlpack.h): Python code that runs while arguments are converted
    # (here an __index__) gives a tensor other memory and frees the old; the kernel must neither
    # read the freed input nor write 64 MiB into freed output memory (which a new tensor may
    # own). Scalars are converted before any pointer is read, so the tensor is read as it is
    # after that code ran: refused with a clear error, or computed from its new memory. A 64 MiB
    # tensor is mmap'd by the allocator and unmapped when freed, so a dangling access would
    # crash: hence a subprocess.
    pytest.importorskip("torch")
    out = run_child(
        f"""
        import pytest, torch
        from dkit import _C
        if _C._torch_reader() is not None:
            _C._torch_reader({reader!r})
        x = torch.randn(1, 16, 1024, 1024)
        rois = torch.tensor([[0.0, 0, 0, 1000, 1000]] * 64)
        out = torch.zeros(64, 16, 7, 7)
        class EvilInput:
            def __index__(self):
                x.set_(torch.empty(0))  # the only reference to x's storage goes away
                return 7
        with pytest.raises(_C.DkitValueError, match="'input' must be 4-d"):
            _C.ops.roi_align_forward(x, rois, out, None, None, EvilInput(), 7, 1.0, 2, 1, False)
        # the output's storage shrinks to nothing under it: refused, nothing written
        y = torch.randn(1, 16, 64, 64)
        big = torch.zeros(64, 16, 128, 128)  # 64 MiB
        class EvilOutput:
            def __index__(self):
                big.storage().resize_(0)
                return 128
        with pytest.raises(_C.DkitError, match="'output'"):
            _C.ops.roi_align_forward(y, rois, big, None, None, EvilOutput(), 128, 1.0, 2, 1, False)
        print("ok")
        """
    )
    assert out.strip().endswith("ok")


def test_outputs_that_repeat_elements_are_refused():
    # An expanded (stride-0) output would have threads overwrite each other's results: refused
    # before any kernel runs, as torch refuses such an out= tensor.
    torch = pytest.importorskip("torch")
    x, rois, out = (torch.from_numpy(a) for a in case())
    wide = torch.zeros(1, *out.shape[1:]).expand(out.shape)  # every RoI's row is the same memory
    with pytest.raises(_C.DkitValueError, match=r"'output' repeats its elements \(dimension 0 has stride 0"):
        FWD(x, rois, wide, None, None, *AVG)
    assert (wide == 0).all()
    max_params = (AVG[0], AVG[1], AVG[2], AVG[3], 0, AVG[5])
    amy, amx = torch.zeros(out.shape), torch.zeros(1, 1, 1, 1).expand(out.shape)
    with pytest.raises(_C.DkitValueError, match="'argmax_x' repeats its elements"):
        FWD(x, rois, torch.zeros(out.shape), amy, amx, *max_params)
    gin = torch.zeros(1, 1, 1, x.shape[3]).expand(x.shape)
    with pytest.raises(_C.DkitValueError, match=r"'grad_input' repeats its elements \(dimension 1"):
        BWD(torch.ones(out.shape), rois, None, None, gin, *AVG)
    # a stride 0 over a dimension of size 1 repeats nothing and is fine
    k, c = out.shape[:2]
    one = torch.zeros(k * c * 2).as_strided((k, c, 2, 1), (c * 2, 2, 1, 0))
    params = (2, 1) + AVG[2:]
    FWD(x, rois, one, None, None, *params)
    torch.testing.assert_close(one, torch.from_numpy(expected(x.numpy(), rois.numpy(), params)), rtol=0, atol=0)
