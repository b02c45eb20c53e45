"""dkit.register_tensor_type and dkit.unload_backend refuse what they cannot serve. What they do
for a real backend is tested with the installed vendor package (test_vendor_package.py) and, for
the C side, in tests/c/test_backend.c."""

import numpy as np
import pytest

import dkit
from dkit import _frameworks


def test_unload_backend_refuses_unknown_and_built_in_backends():
    with pytest.raises(dkit.DkitFileNotFoundError, match="no backend named 'nosuchbackend' is loaded"):
        dkit.unload_backend("nosuchbackend")
    with pytest.raises(dkit.DkitValueError, match="'cpu' is built into libdkit and cannot be unloaded"):
        dkit.unload_backend("cpu")
    assert [s.provenance for s in dkit.dispatch.table("nms") if s.key == "cpu"] == ["kernel"]


class _NoShape:
    def __dlpack__(self, stream=None):
        raise BufferError

    def __dlpack_device__(self):
        return (30, 0)


class _OnAnUnknownDevice(_NoShape):
    shape = (3,)

    @classmethod
    def from_dlpack(cls, x):
        raise AssertionError("never reached: nothing can be allocated on this device")


def test_register_tensor_type_refuses_a_type_that_is_not_a_tensor():
    with pytest.raises(dkit.DkitTypeError, match="expected a type"):
        dkit.register_tensor_type(np.zeros(3))
    with pytest.raises(dkit.DkitTypeError, match="_NoShape has no shape"):
        dkit.register_tensor_type(_NoShape)
    assert _frameworks.BY_TYPE.get(_NoShape) is None


def test_outputs_on_a_device_without_a_backend_object_are_refused_with_the_reason():
    dkit.register_tensor_type(_OnAnUnknownDevice)
    x = _OnAnUnknownDevice()
    assert _frameworks.name_of(x) == "backend"
    fw = _frameworks.of(x)
    with pytest.raises(dkit.DkitNotImplementedError, match=r"cannot allocate on DLPack device \(30, 0\)"):
        fw.empty(x, (3,), "float32")


def test_the_backend_framework_implements_the_protocol():
    from dkit._frameworks import backend

    for attr in _frameworks.PROTOCOL:
        assert hasattr(backend, attr), attr
    assert backend.NAME == "backend" and backend.AS_IS is None
    for attr in _frameworks.PROTOCOL[2:]:
        assert callable(getattr(backend, attr)), attr
