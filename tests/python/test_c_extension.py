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

from dkit import _C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FWD = _C.ops.roi_align_forward
BWD = _C.ops.roi_align_backward

# ------------------------------------------------------------------------------------------
# DLPack by hand


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


READ_ONLY = 1
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


def test_numpy_and_torch_agree_with_torchvision():
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


def test_torch_layouts_offsets_and_dtypes():
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


def test_torch_requires_grad_inputs_are_read_outputs_refused():
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


def test_torch_subclass_with_torch_function_goes_through_the_protocol():
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


def test_high_rank_torch_tensor_takes_the_capsule_path():
    torch = pytest.importorskip("torch")
    x, rois, out = case()
    deep = torch.zeros((1,) * 9 + (4,))
    before = sys.getrefcount(deep)
    with pytest.raises(_C.DkitValueError, match="4-d"):
        FWD(deep, torch.from_numpy(rois), torch.from_numpy(out), None, None, *AVG)
    assert sys.getrefcount(deep) == before


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
    assert [m.deleted for m in ms] == [1, 1, 1]
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
    for device, stream in (((2, 0), 1), ((10, 0), 0)):  # kDLCUDA: legacy default stream; kDLROCM: 0
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
    assert "cpu" in cfg["backends"] and cfg["gpu_archs"] == [] and cfg["compiler"]
    assert ("cpu", None) in _C.backends()
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
from dkit import _C
good, bad = sys.argv[2], sys.argv[3]
_C.load_backend(good)
_C.load_backend(good)  # twice: a no-op
assert (("pytestdev", good) in _C.backends()), _C.backends()
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


def test_backend_loading_in_a_child_process(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    import dkit._paths as p

    inc, lib = p.get_include(), p.get_library()
    if not os.path.isfile(os.path.join(inc, "roi_align.h")):
        pytest.skip("headers not built into dkit/include")
    good, bad = tmp_path / "libpytestdev.so", tmp_path / "libbadabi.so"
    (tmp_path / "good.c").write_text(_BACKEND_C)
    (tmp_path / "bad.c").write_text(_BAD_ABI_C)
    for src, dst, extra in (("good.c", good, [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]), ("bad.c", bad, [])):
        cmd = [cc, "-std=c11", "-D_GNU_SOURCE", "-shared", "-fPIC", "-Wall", "-Werror", "-Wno-unused-parameter",
               f"-I{inc}", str(tmp_path / src), "-o", str(dst)] + extra  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(p.__file__)) + os.pathsep + os.path.dirname(__file__))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), __file__, str(good), str(bad)],
                       env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
