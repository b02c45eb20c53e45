"""myvendor: a toy accelerator's tensors, served by dkit.

    import numpy as np, dkit, myvendor
    x = myvendor.tensor(np.random.rand(1, 3, 16, 16).astype(np.float32))   # on the device
    boxes = myvendor.tensor(np.array([[0, 1, 1, 9, 9]], np.float32))
    y = dkit.ops.roi_align(x, boxes, 2)    # a myvendor.Tensor: myvendor's own kernel
    keep = dkit.ops.nms(...)               # any other op: dkit's CPU fallback, through copies
    y.numpy()

The device is DLPack's kDLExtDev; its memory is allocated by the backend library
(libdkit_myvendor.so, which dkit loads through this package's entry point). Tensor registers
with dkit (dkit.register_tensor_type), so dkit's ops return Tensors for Tensor inputs.
"""

import ctypes
import os

import numpy as np

import dkit
from myvendor import _library
from myvendor._tensor import Tensor as _DeviceTensor

__all__ = ["Tensor", "tensor", "from_dlpack", "library", "counters"]


class Tensor(_DeviceTensor):
    """A tensor in the toy device's memory: shape, dtype (a name), ndim, __dlpack__,
    __dlpack_device__ (kDLExtDev, 0), and numpy() for a host copy."""

    __slots__ = ()

    def numpy(self):
        """A NumPy array holding a copy of the tensor (copied through the backend object)."""
        return np.frombuffer(self._read(), self.dtype).reshape(self.shape).copy()

    def __repr__(self):
        return f"myvendor.Tensor(shape={self.shape}, dtype={self.dtype})"


def tensor(array):
    """A Tensor holding a copy of `array` (anything np.asarray takes)."""
    array = np.ascontiguousarray(array)
    t = Tensor._empty(array.shape, array.dtype.name)
    t._write(array)
    return t


def from_dlpack(x):
    """A Tensor that takes over x's memory (x: a DLPack producer on the device)."""
    return Tensor.from_dlpack(x)


library = _library.path


def counters():
    """What the backend library did so far: allocations, frees, host-to-device,
    device-to-host and device-to-device copies."""
    lib = ctypes.CDLL(library(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    out = (ctypes.c_long * 5)()
    lib.myvendor_counters(out)
    return dict(zip(("alloc", "free", "h2d", "d2h", "d2d"), out))


# dkit's ops give Tensors for Tensor inputs, allocated through the backend object. (dkit loads
# the library itself, through the package's entry point; a checkout that is not installed calls
# dkit.load_backend(myvendor.library()).)
dkit.register_tensor_type(Tensor, from_dlpack=Tensor.from_dlpack)
