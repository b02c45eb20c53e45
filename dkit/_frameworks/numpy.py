"""The NumPy framework (Note [The framework protocol]): numpy.ndarray outputs, no autograd.

Imported on the first NumPy array dkit sees. dkit/_frameworks/dlpack.py borrows all of it.

Note [Read-only arrays]
NumPy (before DLPack 1.0 support) refuses to export a read-only array, because the legacy
protocol cannot say "read-only". The core only reads input and boxes, so a read-only array is
copied once here (AS_IS is None: every array goes through as_tensor); outputs are always fresh,
writable arrays. numpy.from_dlpack's views are read-only too, so another producer's tensor is
copied once as well (with DLPack 1.0, NumPy 2 exports read-only arrays flagged as such, which
the core accepts as inputs, and the copies go away).
"""

import numpy as np

from dkit import _C

NAME = "numpy"
AS_IS = None

_ndarray = np.ndarray


def as_tensor(x, what, op):
    if not isinstance(x, _ndarray):
        if not hasattr(type(x), "__dlpack__"):
            return None
        x = from_dlpack(x, what, op)
    return x if x.flags.writeable else x.copy()  # Note [Read-only arrays]


def new_empty(like, shape):
    return np.empty(shape, like.dtype)


def empty(like, shape, dtype=None):
    return np.empty(shape, like.dtype if dtype is None else dtype)


def dtype_name(x):
    return x.dtype.name


def cat(tensors, dim=0):
    return np.concatenate(tensors, axis=dim)


def rois_from_boxes(boxes, like):
    if not boxes:
        return np.empty((0, 5), like.dtype)
    parts = [np.concatenate((np.full((b.shape[0], 1), i, b.dtype), b), axis=1) for i, b in enumerate(boxes)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def first_rows(x, count):
    # count: an int, or the one-element array an op's kernel wrote. int() of a 1-d array is an
    # error from NumPy 2.4 on (only 0-d arrays convert), so its element is read by index.
    return x[: int(count.reshape(-1)[0]) if isinstance(count, np.ndarray) else int(count)]


def category_codes(x):
    return np.unique(x, return_inverse=True)[1].reshape(x.shape).astype(np.int64)


def wants_grad(x):
    return False


def apply(op, *args):
    raise _C.DkitNotImplementedError(f"{op.name}: NumPy has no autograd")


def autocast(x):
    return x  # NumPy has no mixed-precision mode


def to_dtype(x, dtype):
    return x if x.dtype.name == dtype else x.astype(dtype)


# DLPack device types whose memory the host can read: CPU, CUDA host, ROCm host, CUDA managed.
_HOST_DEVICES = (1, 3, 11, 13)


def from_dlpack(x, what, op):
    """Another framework's tensor as a (read-only) NumPy view, or a DkitBufferError saying why
    dkit cannot serve it. The producer's capsule is accepted by dkit's core first (Note [Checked
    exports] in csrc/python/dk_pychecked.c): NumPy reads only what the core validated, and a
    malformed capsule is refused with an error naming the op and the parameter."""
    device = getattr(x, "__dlpack_device__", None)
    device = tuple(device()) if device is not None else (1, 0)
    if device[0] in _HOST_DEVICES:  # what the producer says, then what its capsule says
        checked = _C.dlpack_checked(x, op, what)
        device = checked.__dlpack_device__()
    if device[0] not in _HOST_DEVICES:
        raise _C.DkitBufferError(
            f"{op}: {what} ({type(x).__name__}) lives on DLPack device {device}; dkit allocates "
            f"outputs with torch for torch tensors and with NumPy otherwise, so other frameworks' tensors "
            f"must be on the CPU, or of a type registered with dkit.register_tensor_type"
        )
    try:
        return np.from_dlpack(checked)
    except (RuntimeError, TypeError, BufferError, ValueError) as e:
        raise _C.DkitBufferError(
            f"{op}: cannot read {what} ({type(x).__name__}) as a CPU array through DLPack: {e}. "
            f"dkit allocates outputs with torch for torch tensors and with NumPy otherwise, "
            f"so other frameworks' tensors must be on the CPU and in a NumPy dtype"
        ) from e
