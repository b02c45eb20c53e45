"""The torch framework (Note [The framework protocol]): torch outputs, torch.autograd.

Imported on the first torch tensor dkit sees, so `import dkit` never imports torch.

Note [Tensors go to dkit._C as they are]
dkit._C reads a CPU torch.Tensor directly (shape, strides, dtype, data pointer; see Note [torch
fast path] in csrc/python/dk_pydlpack.c), which is cheaper than any DLPack capsule torch 1.13
can make, and accepts inputs that require grad without a .detach(). Other devices go through
the DLPack protocol inside _C. The tensors stay referenced by the calling frame for the whole
call. Outputs are always fresh tensors that do not require grad, so _C may write them.
"""

import sys
import threading
from math import prod as _prod

import torch

from dkit import _C

NAME = "torch"
AS_IS = torch.Tensor

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled

_new_empty = torch.Tensor.new_empty
_element_size = torch.Tensor.element_size
_from_dlpack = torch._C._from_dlpack  # what torch.from_dlpack calls for a capsule

_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {dt: name for name, dt in _DTYPES.items()}
_ITEMSIZE = {name: torch.empty(0, dtype=dt).element_size() for name, dt in _DTYPES.items()}


def as_tensor(x, what, op):
    if isinstance(x, _Tensor):  # subclasses too, e.g. nn.Parameter
        return x
    if hasattr(type(x), "__dlpack__"):
        # Accepted by dkit's core before torch reads it (Note [Checked exports] in
        # csrc/python/dk_pychecked.c); its errors name the op and the parameter.
        checked = _C.dlpack_checked(x, op, what)
        try:
            return torch.from_dlpack(checked)  # zero copy; the core checks its device against the input's
        except Exception as e:  # whatever torch refused (a device or dtype torch lacks, ...)
            raise _C.DkitBufferError(f"{op}: cannot read {what} ({type(x).__name__}) through DLPack: {e}") from e
    return None


# Note [Large outputs from the host cache]
# An output of at least host_cache.min_bytes (256 KiB) for a CPU tensor comes from dkit's host output
# cache (Note [Host output cache] in csrc/cpu/dk_host_cache.h), through a DLPack capsule: a
# training loop then faults its large outputs in once instead of at every call (roi_align's
# forward: 53.7 ms end to end against 43.7 ms into an output allocated once, on one thread). The
# tensor is an ordinary CPU tensor, except that its storage cannot be resized (torch's rule for
# memory it did not allocate). Everything else, and every output of a subclass (whose
# new_empty may be overridden), is torch's own new_empty. The size test is the whole cost on
# the fast path of a tiny call (Note [The fast path] in dkit/_ops/roi_align.py).
_CACHE_MIN = _C.host_cache_stats()["min_bytes"]
_host_empty = _C.host_empty


def _set_cache_min(value):
    global _CACHE_MIN
    _CACHE_MIN = value


_C._tunable_watch("host_cache.min_bytes", _set_cache_min)  # Note [Tunables Python reads]


def new_empty(like, shape):
    if _prod(shape) * _element_size(like) >= _CACHE_MIN and like.is_cpu and type(like) is _Tensor:
        name = _NAMES.get(like.dtype)
        if name is not None:
            return _from_dlpack(_host_empty(tuple(shape), name))
    return _new_empty(like, shape)


def empty(like, shape, dtype=None):
    if dtype is None:
        return new_empty(like, shape)
    dt = _DTYPES[dtype]
    if _prod(shape) * _ITEMSIZE[dtype] >= _CACHE_MIN and like.is_cpu and type(like) is _Tensor:
        return _from_dlpack(_host_empty(tuple(shape), dtype))
    return _new_empty(like, shape, dtype=dt)


def dtype_name(x):
    name = _NAMES.get(x.dtype)
    return name if name is not None else str(x.dtype).rpartition(".")[2]


def cat(tensors, dim=0):
    return torch.cat(tensors, dim)


def rois_from_boxes(boxes, like):
    if not boxes:
        return like.new_empty((0, 5))
    parts = [torch.cat((torch.full_like(b[:, :1], i), b), 1) for i, b in enumerate(boxes)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def first_rows(x, count):
    # count: an int, or the one-element tensor an op's kernel wrote (of the exact type
    # torch.Tensor, as fw.empty made it) or a FakeTensor in its place
    if type(count) is _Tensor or not isinstance(count, _Tensor):
        try:
            # int() of a device tensor waits for it: the size of a result is host information.
            return x.narrow(0, 0, int(count))
        except (RuntimeError, NotImplementedError):
            if not getattr(count, "is_meta", False):
                raise
        # Note [Meta tensors] in dkit/_torch_library.py
        raise _C.DkitNotImplementedError(
            "the size of this result depends on the values of the inputs, which meta tensors do not have "
            "(torch.compile's FakeTensors give it a symbolic size)"
        )
    # A FakeTensor: a shape-only call under torch.compile (Note [dkit ops under torch.compile] in
    # dkit/_torch_library.py); the size is known when the kernel runs, at most x's rows.
    return x.new_empty((_dynamic_size(x.shape[0]), *x.shape[1:]))


def _dynamic_size(bound):
    ctx = torch.library.get_ctx()
    make = getattr(ctx, "new_dynamic_size", None)
    if make is None:  # torch 2.1 to 2.3
        return ctx.create_unbacked_symint()
    return make(min=0, max=bound) if type(bound) is int else make(min=0)


def category_codes(x):
    return torch.unique(x, return_inverse=True)[1]


def wants_grad(x):
    return x.requires_grad and _grad_enabled()


def _autocast_probe():
    """A function telling whether torch.autocast is on for a tensor's device."""
    try:  # torch >= 2.4: one function for every device type
        torch.is_autocast_enabled("cpu")
    except TypeError:  # torch 1.13: CUDA's and the CPU's own

        def on(x):
            kind = x.device.type
            if kind == "cuda":
                return torch.is_autocast_enabled()
            return kind == "cpu" and torch.is_autocast_cpu_enabled()

        return on

    def on(x):
        try:
            return torch.is_autocast_enabled(x.device.type)
        except RuntimeError:  # a device type autocast does not know (meta, ...)
            return False

    return on


_autocasting = _autocast_probe()
_AUTOCAST_UP = (torch.float16, torch.bfloat16)


def autocast(x):
    # Note [Autocast] in dkit/_ops/__init__.py: as torch's cached_cast to float32 for the ops
    # torchvision runs in float32 (float64 and integer tensors are left as they are)
    if x.dtype in _AUTOCAST_UP and _autocasting(x):
        return x.float()
    return x


def to_dtype(x, dtype):
    dt = _DTYPES[dtype]
    return x if x.dtype == dt else x.to(dt)


# ------------------------------------------------------------------------------------------
# Autograd

# dkit._ops.Differentiable -> its torch.autograd.Function, built on first use.
_FUNCTIONS = {}
_this = sys.modules[__name__]  # the `fw` every op is written against

# Note [Calls inside dkit's torch ops]
# dkit's eager path records autograd with one torch.autograd.Function per op (below): the
# cheapest way torch has. A call made by one of dkit's torch ops instead (torch.ops.dkit.*, which
# TorchScript, torch.compile and torch.fx run) must be made of torch ops all the way down, so that
# a tracer sees the kernel and its backward as ops of its graph rather than as Python code it
# cannot see into: there, apply() calls the Differentiable's forward torch op,
# dkit::_<name>_forward, whose autograd runs dkit::_<name>_backward (Note [dkit ops under
# torch.compile] in dkit/_torch_library.py). The torch ops' kernels set this thread's flag.
ROUTE = threading.local()


def apply(op, *args):
    if getattr(ROUTE, "torch_ops", False):
        results = getattr(torch.ops.dkit, f"_{op.name}_forward")(*args)
        return results[0] if op.results == 1 else tuple(results[: op.results])
    fn = _FUNCTIONS.get(op)
    if fn is None:
        fn = _FUNCTIONS.setdefault(op, _function(op))
    return fn.apply(*args)


# Note [Double backward]
# dkit's backward kernels are not themselves differentiable. With create_graph=True (grad mode
# is on inside backward then), a Function's gradients would silently come out without a graph
# whenever the incoming gradient does not require grad (the seed of .sum() does not), and a
# second backward would fail far away with "element 0 of tensors does not require grad and does
# not have a grad_fn". So in that mode the op's backward runs inside a second Function, applied
# to the incoming gradients and to a fresh empty leaf that requires grad (the "anchor", so that
# the gradients always carry that Function as their grad_fn), whose own backward raises a
# DkitNotImplementedError naming the op. As in torchvision ("double backwards on roi_align not
# supported"), nothing fails until something differentiates those gradients; first-order use of
# create_graph=True (a gradient penalty elsewhere in the model) is unaffected. Without
# create_graph the backward runs directly, at no extra cost.


def double_backward_error(name):
    return _C.DkitNotImplementedError(
        f"{name}: double backward is not supported: the backward of {name} is not differentiable "
        f"(its gradients came from a backward pass with create_graph=True)"
    )


_deterministic_wanted = torch.are_deterministic_algorithms_enabled
_set_deterministic = _C.set_deterministic


def run_backward(backward, *args):
    """backward(torch framework, *args), with this thread asking dkit for deterministic kernels
    exactly when torch.use_deterministic_algorithms(True) asks torch's (Note [Deterministic
    kernels] in csrc/common/dk_determinism.h): a GPU backward then gathers instead of adding
    atomically, and gives the same bits on every run."""
    previous = _set_deterministic(_deterministic_wanted())
    try:
        return backward(_this, *args)
    finally:
        _set_deterministic(previous)


def save(ctx, state):
    """Keeps a Differentiable's saved() state on an autograd context: tensors through
    save_for_backward (autograd checks they were not modified in place), the rest as is."""
    mask = tuple(isinstance(v, _Tensor) for v in state)
    ctx.save_for_backward(*(v for v, t in zip(state, mask) if t))
    ctx.dkit_state = tuple(None if t else v for v, t in zip(state, mask))
    ctx.dkit_mask = mask


def saved(ctx):
    tensors = iter(ctx.saved_tensors)
    return tuple(next(tensors) if t else v for v, t in zip(ctx.dkit_state, ctx.dkit_mask))


def _function(op):
    """The torch.autograd.Function of a Differentiable op (and of its backward, Note [Double
    backward])."""
    forward, backward, name, n = op.forward, op.backward, op.name, op.results
    fw = sys.modules[__name__]  # this module: the `fw` every op is written against

    def double_backward(ctx, *grads):
        raise double_backward_error(name)

    def backward_forward(ctx, fctx, anchor, *grad_outputs):
        return run_backward(backward, *grad_outputs, *saved(fctx))

    backward_fn = type(
        f"{op.title}BackwardFunction",
        (torch.autograd.Function,),
        {"forward": staticmethod(backward_forward), "backward": staticmethod(double_backward)},
    )

    def function_forward(ctx, *args):
        ctx.dkit_nargs = len(args)
        results = forward(fw, *args)
        save(ctx, op.saved(args, results))
        return results[0] if n == 1 else tuple(results[:n])

    def function_backward(ctx, *grad_outputs):
        if _grad_enabled():  # create_graph=True: Note [Double backward]
            anchor = grad_outputs[0].new_empty(0).requires_grad_()
            grads = backward_fn.apply(ctx, anchor, *grad_outputs)
            if not isinstance(grads, tuple):
                grads = (grads,)
        else:
            grads = run_backward(backward, *grad_outputs, *saved(ctx))
        # the op returns gradients for its leading arguments; the rest (rois, sizes, ...) get None
        return (*grads, *((None,) * (ctx.dkit_nargs - len(grads))))

    return type(
        f"{op.title}Function",
        (torch.autograd.Function,),
        {"forward": staticmethod(function_forward), "backward": staticmethod(function_backward)},
    )
