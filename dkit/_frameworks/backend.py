"""Tensors on a backend's device that no framework owns (Note [The framework protocol]).

Note [Outputs on a backend's device]
dkit's core never allocates (Note [Outputs belong to the input's framework]), and torch and NumPy
cannot allocate on a vendor's device. A vendor that ships a tensor type of its own (a DLPack
producer on its device, e.g. DLPack's kDLExtDev) registers it:

    dkit.register_tensor_type(MyTensor, from_dlpack=my_from_dlpack)

and dkit.ops then take MyTensor inputs and give MyTensor outputs. Every output is allocated with
the device's backend object (dk_backend.h: alloc and free, through _C.device_empty, in the
thread's current stream), and handed to the type by the DLPack standard path:
from_dlpack(producer) receives an object with __dlpack__ and __dlpack_device__ whose capsule
owns the memory; the type takes the capsule (renames it "used_dltensor") and calls its deleter
when it lets go, which frees the memory with the same backend object. So dkit knows nothing of
the vendor's type beyond what the array API standard asks of every array: `shape` (a tuple of
ints), `__dlpack__`, `__dlpack_device__`, and a `from_dlpack`. from_dlpack defaults to the
type's own `from_dlpack` attribute.

The rest of the protocol:
  - first_rows(x, count) is a view (_C.device_rows: the first rows of x's capsule, keeping x's
    managed tensor alive); count, a one-element device tensor an op wrote, is read through the
    backend object's copy (_C.device_read), the one synchronisation of such an op;
  - dtype_name reads the dtype from x's capsule (_C.dlpack_dtype);
  - cat, rois_from_boxes, category_codes and to_dtype, which only argument normalisation needs
    (boxes given as a list, categories of another dtype, autocast's casts), go through the host:
    the tensors are copied to NumPy arrays, computed there, and copied back to the device. That is
    slow for big tensors and correct for every device whose backend object can copy;
  - there is no autograd (wants_grad is False) and no mixed precision mode.
The type decides which framework serves it, once per type (BY_TYPE): a registered type (or a
subclass) is served here, whatever device its tensors are on, and a device whose backend object
cannot allocate says so when the first output is allocated.
"""

import sys

from dkit import _C

NAME = "backend"
AS_IS = None

# registered type -> from_dlpack
_TYPES = {}


def register(cls, from_dlpack=None):
    """Serve tensors of type `cls` (a DLPack producer on a backend's device) with outputs of the
    same type: Note [Outputs on a backend's device]."""
    from dkit import _frameworks

    if not isinstance(cls, type):
        raise _C.DkitTypeError(f"register_tensor_type: expected a type, got {type(cls).__name__}")
    for attr in ("__dlpack__", "__dlpack_device__", "shape"):
        if not hasattr(cls, attr):
            raise _C.DkitTypeError(f"register_tensor_type: {cls.__qualname__} has no {attr}")
    if from_dlpack is None:
        from_dlpack = getattr(cls, "from_dlpack", None)
    if not callable(from_dlpack):
        raise _C.DkitTypeError(
            f"register_tensor_type: {cls.__qualname__} has no from_dlpack; pass from_dlpack=a callable taking a "
            f"DLPack producer"
        )
    _TYPES[cls] = from_dlpack
    # The per-type cache: this type (and subclasses already seen) are served here from now on.
    for tp in list(_frameworks.BY_TYPE):
        if issubclass(tp, cls):
            del _frameworks.BY_TYPE[tp]
    _frameworks.BY_TYPE[cls] = sys.modules[__name__]


def registered(tp):
    """The from_dlpack of tp's registered type (tp or a base), or None."""
    for base in tp.__mro__:
        fn = _TYPES.get(base)
        if fn is not None:
            return fn
    return None


class _Exported:
    """What from_dlpack receives: one capsule that owns the memory, exported once."""

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule, device):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("dkit: this output was already exported")
        return capsule

    def __dlpack_device__(self):
        return self._device


def _wrap(like, capsule):
    return registered(type(like))(_Exported(capsule, tuple(like.__dlpack_device__())))


def as_tensor(x, what, op):
    # Passed as they are: the core reads every DLPack producer, and refuses (naming both devices)
    # a tensor on another device than the input's.
    return x if hasattr(type(x), "__dlpack__") else None


def empty(like, shape, dtype=None):
    device = like.__dlpack_device__()
    capsule = _C.device_empty(device[0], device[1], tuple(shape), dtype or dtype_name(like))
    return _wrap(like, capsule)


def new_empty(like, shape):
    return empty(like, shape, None)


def dtype_name(x):
    return _C.dlpack_dtype(x)


def first_rows(x, count):
    if type(count) is not int:
        count = int.from_bytes(_C.device_read(count)[:8], sys.byteorder, signed=True)
    return _wrap(x, _C.device_rows(x, count))


def _to_host(x):
    import numpy as np

    return np.frombuffer(_C.device_read(x), dtype_name(x)).reshape(tuple(x.shape))


def _to_device(like, array):
    import numpy as np

    array = np.ascontiguousarray(array)
    out = empty(like, array.shape, array.dtype.name)
    _C.device_write(out, array)
    return out


def cat(tensors, dim=0):
    import numpy as np

    return _to_device(tensors[0], np.concatenate([_to_host(t) for t in tensors], axis=dim))


def rois_from_boxes(boxes, like):
    import numpy as np

    from dkit._frameworks import numpy as _numpy

    return _to_device(like, _numpy.rois_from_boxes([_to_host(b) for b in boxes], np.empty(0, dtype_name(like))))


def category_codes(x):
    from dkit._frameworks import numpy as _numpy

    return _to_device(x, _numpy.category_codes(_to_host(x)))


def wants_grad(x):
    return False


def apply(op, *args):
    raise _C.DkitNotImplementedError(f"{op.name}: tensors of a backend's own type have no autograd")


def autocast(x):
    return x


def to_dtype(x, dtype):
    return x if dtype_name(x) == dtype else _to_device(x, _to_host(x).astype(dtype))
