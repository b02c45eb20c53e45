"""Frameworks: whose tensor is this, and how does that framework allocate, reshape and differentiate?

An op module (dkit/_ops/) is written once, against the small interface below; one module here
implements it per framework. Adding an op adds no code here; adding a framework adds one module.

Note [Outputs belong to the input's framework]
dkit's C core never allocates: the caller's framework allocates every output, on the input's
device, and the core writes into it through DLPack. So the first question of every call is
"whose tensor is this?":

  torch.Tensor (and subclasses)    -> dkit._frameworks.torch: torch outputs, torch.autograd
  numpy.ndarray (and subclasses)   -> dkit._frameworks.numpy: numpy.ndarray outputs, no autograd
  a type registered with           -> dkit._frameworks.backend: outputs of that type, allocated
  dkit.register_tensor_type           with the device's backend object (Note [Outputs on a
                                      backend's device] in backend.py)
  anything else with __dlpack__    -> dkit._frameworks.dlpack: viewed as a NumPy array with
                                      numpy.from_dlpack (no copy of the producer's memory), after
                                      dkit's core accepted the capsule (_C.dlpack_checked), and
                                      served as NumPy: the output is a numpy.ndarray. dkit cannot
                                      allocate memory for a framework it does not know, so such
                                      inputs must live on the CPU.

The answer depends only on type(input), so it is computed once per type and cached in BY_TYPE:
the hot path is one dict lookup, and neither torch nor NumPy is imported until one of their
tensors actually shows up (we look in sys.modules instead of importing).

The modules are named after the framework they serve, as `name_of(x)` reports it (and as, e.g.,
array_api_compat names its torch/ and numpy/ packages). Absolute imports make `import torch`
inside dkit/_frameworks/torch.py the real torch; only a script run from inside this directory
would see the shadowing.

Note [The framework protocol]
Every framework module defines the names in PROTOCOL (a test checks that each does):

  NAME                        'torch', 'numpy', 'backend' or 'dlpack'.
  AS_IS                       the exact type an op may hand to the core without as_tensor()
                              (torch.Tensor); None where every tensor must go through it
                              (NumPy: read-only arrays are copied, Note [Read-only arrays]).
  as_tensor(x, what, op)      x as a tensor of this framework that the core can read: this
                              framework's own tensors as they are, other DLPack producers
                              without a copy where the framework can; None when x is not a
                              tensor at all, so that the op can say what it wanted.
  new_empty(like, shape)      an uninitialised output with like's dtype and device: the one
                              allocation of every call, so the cheapest form the framework has.
  empty(like, shape, dtype)   the same with a dtype by name ('float32', 'int64', ...; None:
                              like's), e.g. argmax or an int64 count.
  dtype_name(x)               x's dtype by name ('float16', 'bfloat16', 'float32', ...).
  cat(tensors, dim)           concatenation.
  rois_from_boxes(boxes, like)  [K, 5] rois (batch_index, x1, y1, x2, y2) from a list of [L, 4]
                              boxes, list position = batch index (torchvision's
                              convert_boxes_to_roi_format); an empty list gives [0, 5] in
                              like's dtype and device.
  first_rows(x, count)        the first `count` rows of x (count: an int or a one-element
                              integer tensor), as a view: ops whose output size depends on the
                              data write an output sized to an upper bound plus a count.
  category_codes(x)           int64 codes of x's distinct values, same shape (equal values, equal
                              codes): categories of any dtype for kernels that take int64 ones.
  wants_grad(x)               whether autograd must record an op that reads x (an op with
                              several differentiable inputs asks for each). Always False
                              without autograd.
  apply(op, *args)            runs a dkit._ops.Differentiable op so that the framework's
                              autograd records it; built once per op (torch: one
                              torch.autograd.Function per op). Frameworks without autograd
                              raise DkitNotImplementedError (wants_grad never sends them here).
  autocast(x)                 x as the framework's mixed-precision mode hands it to an op that
                              computes in float32 (torch.autocast: a float16 or bfloat16 tensor
                              cast to float32 when autocast is on for its device, Note
                              [Autocast] in dkit/_ops/__init__.py); x itself otherwise, and always
                              in frameworks without such a mode.
  to_dtype(x, dtype)          x converted to dtype (by name); x itself when it has it.
"""

import importlib
import sys

from dkit import _C

PROTOCOL = (
    "NAME",
    "AS_IS",
    "as_tensor",
    "new_empty",
    "empty",
    "dtype_name",
    "cat",
    "rois_from_boxes",
    "first_rows",
    "category_codes",
    "wants_grad",
    "apply",
    "autocast",
    "to_dtype",
)

# type(x) -> framework module. Ops read it directly (one dict lookup per call); of() fills it.
BY_TYPE = {}


def of(x):
    """The framework module serving tensors of type(x); cached per type."""
    tp = type(x)
    fw = BY_TYPE.get(tp)
    if fw is None:
        fw = BY_TYPE[tp] = _resolve(x)
    return fw


def name_of(x):
    """'torch', 'numpy', 'backend' or 'dlpack' (for tests and error messages)."""
    return of(x).NAME


def _resolve(x):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return importlib.import_module("dkit._frameworks.torch")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return importlib.import_module("dkit._frameworks.numpy")
    backend = sys.modules.get("dkit._frameworks.backend")  # imported by a registration
    if backend is not None and backend.registered(type(x)) is not None:
        return backend
    if hasattr(type(x), "__dlpack__"):
        return importlib.import_module("dkit._frameworks.dlpack")
    raise _C.DkitTypeError(
        f"dkit: expected a torch.Tensor, a numpy.ndarray or an object with __dlpack__, "
        f"got {type(x).__module__}.{type(x).__qualname__}"
    )
