"""Which framework owns a tensor, and so which implementation module serves it.

Note [Outputs belong to the input's framework]
dkit's C core never allocates: the caller's framework allocates every output, on the input's
device and in its dtype, and the core writes into it through DLPack. So the first question of
every call is "whose tensor is this?":

  torch.Tensor (and subclasses)    -> dkit._torch_impl: torch.empty outputs, torch.autograd
  numpy.ndarray (and subclasses)   -> dkit._numpy_impl: numpy.empty outputs, no autograd
  anything else with __dlpack__    -> viewed as a NumPy array with numpy.from_dlpack (zero copy),
                                      then served as NumPy: the output is a numpy.ndarray.
                                      dkit cannot allocate memory for a framework it does not
                                      know, so such inputs must live on the CPU.

The answer depends only on type(input), so it is computed once per type and cached: the hot
path is one dict lookup, and neither torch nor NumPy is imported until one of their tensors
actually shows up (we look in sys.modules instead of importing).
"""

import sys

from dkit import _C

# type(input) -> implementation module (or namespace) with one function per op.
_IMPLS = {}


def impl_for(x):
    """The implementation serving tensors of type(x); cached per type."""
    tp = type(x)
    impl = _IMPLS.get(tp)
    if impl is None:
        impl = _resolve(x)
        _IMPLS[tp] = impl
    return impl


def _resolve(x):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        from dkit import _torch_impl

        return _torch_impl
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        from dkit import _numpy_impl

        return _numpy_impl
    if hasattr(type(x), "__dlpack__"):
        from dkit import _numpy_impl

        return _numpy_impl.DLPACK
    raise _C.DkitTypeError(
        f"dkit: expected a torch.Tensor, a numpy.ndarray or an object with __dlpack__, "
        f"got {type(x).__module__}.{type(x).__qualname__}"
    )


def framework_name(x):
    """'torch', 'numpy' or 'dlpack' (for tests and error messages)."""
    impl = impl_for(x)
    return impl.FRAMEWORK
