"""Argument normalisation shared by every op: the slow paths behind each op's exact-type fast
checks, and the errors (every one names the op and the argument).

bool is refused where an int is wanted (True is not a size), and accepted where a bool is:
see to_bool.
"""

import operator

from dkit import _C, _frameworks

_framework_of_type = _frameworks.BY_TYPE.get
_framework_of = _frameworks.of


def to_int(value, name, op):
    if type(value) is bool:
        raise _C.DkitTypeError(f"{op}: {name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise _C.DkitTypeError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r}") from None


def to_float(value, name, op):
    # float("0.5") parses text; a number given as text is a caller's mistake, not a number
    if isinstance(value, (str, bytes, bytearray)):
        raise _C.DkitTypeError(f"{op}: {name} must be a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _C.DkitTypeError(f"{op}: {name} must be a number, got {type(value).__name__}") from None


def to_pair(value, name, op):
    """An int n as (n, n), or a pair of ints (any sequence of two integer-likes)."""
    if type(value) is bool:
        raise _C.DkitTypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    try:
        n = operator.index(value)
        return (n, n)
    except TypeError:
        pass
    try:
        items = tuple(value)
    except TypeError:
        raise _C.DkitTypeError(f"{op}: {name} must be an int or a pair of ints, got {type(value).__name__}") from None
    if len(items) != 2:
        raise _C.DkitValueError(f"{op}: {name} must be an int or a pair (height, width), got {len(items)} values")
    try:
        if type(items[0]) is bool or type(items[1]) is bool:
            raise TypeError
        return (operator.index(items[0]), operator.index(items[1]))
    except TypeError:
        raise _C.DkitTypeError(f"{op}: {name} must hold ints, got {value!r}") from None


def to_bool(value, name, op):
    """True or False; also NumPy's bool and integer-likes equal to 0 or 1 (a 0-d integer or bool
    tensor), which is what torchvision's and MMCV's own bindings accept. Anything else (a
    string, None, a float, 2) is refused rather than read by its truth value: aligned='no' must
    not mean aligned=True."""
    if value is True or value is False:
        return value
    tp = type(value)
    # NumPy's bool: named bool_ before NumPy 2 and bool since; its __index__ was deprecated, and
    # is gone from NumPy 2.4
    if tp.__module__ == "numpy" and tp.__name__ in ("bool_", "bool"):
        return bool(value)
    try:
        n = operator.index(value)
    except TypeError:
        pass
    else:
        if n == 0 or n == 1:
            return n == 1
    raise _C.DkitTypeError(f"{op}: {name} must be a bool, got {tp.__name__} {value!r}")


def tensor(fw, x, what, op, layout=""):
    """x as a tensor of framework fw (as it is when it already is one), or a DkitTypeError naming
    the op and the argument; layout says what was wanted, e.g. " [K, 4]"."""
    t = x if type(x) is fw.AS_IS else fw.as_tensor(x, what, op)
    if t is None:
        raise _C.DkitTypeError(f"{op}: '{what}' must be a tensor{layout}, got {type(x).__name__}")
    return t


def framework(x, what, op):
    """The framework of x's type (the slow path behind BY_TYPE's lookup), or a DkitTypeError
    naming the op and the argument: x is the argument whose framework serves the call, so a
    caller's None there must say which argument it was, as every other check does."""
    try:
        return _framework_of(x)
    except _C.DkitTypeError:
        raise _C.DkitTypeError(
            f"{op}: '{what}': expected a torch.Tensor, a numpy.ndarray or an object with __dlpack__, "
            f"got {type(x).__name__}"
        ) from None


def tensor_pair(op, a, what_a, b, what_b, layout=""):
    """(fw, a, b): a and b as tensors of a's framework, the one that allocates the outputs (one
    dict lookup per call for a known type, Note [The framework protocol])."""
    fw = _framework_of_type(type(a)) or framework(a, what_a, op)
    return fw, tensor(fw, a, what_a, op, layout), tensor(fw, b, what_b, op, layout)
