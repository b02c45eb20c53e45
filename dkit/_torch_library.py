"""dkit ops as torch ops: torch.ops.dkit.*, registered with torch's dispatcher from dkit's own
schemas, so that TorchScript, torch.fx, torch.jit.save / load and torch's autograd see them.

Note [dkit ops in torch]
Two kinds of torch op are registered, both without any code written per op:

  torch.ops.dkit.<op>.out   every op of dkit's core (dkit.dispatch.ops(): roi_align_forward,
                            nms, ..., and any op a loaded backend adds), with the core's own
                            schema: inputs, then the outputs the caller allocates, marked
                            Tensor(a!) (Note [Data-dependent output sizes] in ops/nms.h: an
                            output sized to a bound plus a count). The op returns those outputs,
                            as torch's out= overloads do (an optional output, such as avg mode's
                            argmax, is not returned). Its kernel is dkit._C.ops.<op> itself,
                            behind one generic adapter. The overload is named "out" as torch
                            names its out= variants; the core's name is the packet's.
  torch.ops.dkit.<op>       every public function of dkit.ops (roi_align, nms, box_iou, ...),
                            with the schema its module declares with @torch_op (dkit/_ops/):
                            the function's own arguments and defaults, and its results. Its
                            kernel, at the CPU and CUDA keys, and at the Autograd key for plain
                            tensors, is the function itself: the argument checks, the output
                            allocation and (for roi_align) the autograd Function are the ones
                            dkit.ops runs, so a torch op and an eager call cannot disagree. Its
                            fake implementation (Meta, FakeTensors) is the same function with the
                            kernel switched off; tracers' tensors get autograd through the
                            Differentiable's own torch ops (Note [dkit ops under
                            torch.compile]). Autograd is thereby registered with torch once per
                            op, from the op's Differentiable declaration, not written per
                            framework.

TorchScript then compiles calls to these ops: the public functions are registered as TorchScript
builtins of their ops (torch.jit._builtins, the table through which torch.nn.functional's
functions map to aten ops), so a scripted function or module that calls dkit.ops.roi_align
compiles to dkit::roi_align. dkit.compat.torchvision relies on that: its functions call
dkit.ops' functions, so one body runs eagerly and compiles to the torch ops (Note [Compat under
TorchScript] in dkit/compat/torchvision.py); dkit.nn and dkit.compat.mmcv write their
TorchScript branches against torch.ops.dkit directly. torch.fx records dkit.ops' functions as
call_function nodes (they are registered with torch.fx.wrap in dkit.ops' namespace), as it does
for torchvision.ops.roi_align.

Eager calls do not go through these ops, because they cannot and keep the tiny-call figure
(dkit at most half of torchvision's time). bench/bench_torch_ops.py, a [1, 4, 8, 8] input, one
box, one thread (loaded machine): torchvision 10.7 us per call; dkit.ops.roi_align 4.0 us
(0.37x); torch.ops.dkit.roi_align 9.4 us (0.88x: torch's dispatcher boxes the call, converts
every argument to Python and back, and takes the GIL around a Python kernel); scripted
dkit.compat.torchvision.roi_align 13.6 us (1.28x; scripted torchvision 0.93x). Even a C++ kernel
costs 5.4 us through the dispatcher (torch.ops.torchvision.roi_align called directly, 0.50x),
so the C++ bridge that the issue weighed (one boxed C++ kernel converting torch's stack to
dkit's) could not hold the figure either: it would save ~4 us of the torch-op route and serve
TorchScript models run from C++ without Python, at the price of a libtorch-linked kernel per
build of torch. dkit therefore keeps dkit.ops as the eager path and the Python bridge for what
torch runs itself; scripted models pay torch's price for a Python kernel.

Note [When the ops are registered]
Once per process, the first time both dkit and torch are imported: `import dkit` registers them
when torch is already imported, and otherwise arranges for it to happen right after torch's own
import (dkit/__init__.py), so that `import dkit` is all a process needs before torch.jit.load of
a model that calls dkit ops, in either import order, while `import dkit` alone never imports
torch. Ops that a backend adds later are registered by load_backend (sync()). Registering the 19
ops takes ~7 ms (bench/bench_torch_ops.py: 4.4 ms to load this module and the kernel holder,
2.5 ms for the definitions and kernels), paid once per process that imports both. The Library object lives in this
module for the life of the process: torch drops a library's registrations when it is
collected.
"""

# Note [Registration requested while this module loads]
# `import dkit._torch_library` before torch is imported runs dkit's import hook from the
# `import torch` below (dkit/__init__.py), which calls sync() on this module while it is only
# partly loaded. That call is recorded here and served when the module has loaded (at its end).
# On importlib.reload the module's namespace is kept, so the registration state below is kept
# too instead of being reset, and sync() stays idempotent: a second Library and a second round
# of kernels would replace the first ones, with torch's warnings for every op.
_sync_requested = False


def sync():  # replaced by the real sync() below once this module has loaded
    global _sync_requested
    _sync_requested = True


import sys  # noqa: E402

import torch  # noqa: E402
import torch.jit._builtins  # noqa: E402

from dkit import _C  # noqa: E402
from dkit._frameworks import torch as _torch_fw  # noqa: E402

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled

try:  # Note [Why dkit has its own kernel holder] in csrc/python/dk_torch_kernel.cpp
    from dkit._torch_kernel import impl as _holder_impl
except ImportError:  # built without torch's C++ headers: torch's own Python kernels
    _holder_impl = None

NAMESPACE = "dkit"

# torch's way to give an op a fake (shape-only) implementation: register_fake (torch >= 2.4),
# impl_abstract (2.1 to 2.3); None before, where the Meta key serves (Note [Meta tensors]).
_REGISTER_FAKE = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)

# Dispatch keys served by a kernel that is a Python function. CUDA serves the GPU backends'
# tensors (torch's ROCm builds call HIP devices "cuda" too); the kernel finds the backend.
# QuantizedCPU: Note [Quantized tensors].
_BACKEND_KEYS = ("CPU", "CUDA", "QuantizedCPU")
# The .out ops have no Autograd kernel (Note [The .out ops and autograd]); torch 1.13 has no
# autograd fallthrough for meta tensors, so AutogradMeta is served too.
_OUT_KEYS = _BACKEND_KEYS + ("Meta", "AutogradMeta")

# Note [Meta tensors]
# A meta tensor has a shape and a dtype but no memory; torch uses it to ask what an op returns.
# dkit answers as torchvision's meta registrations do: the op's outputs, allocated on the meta
# device by its Python function as usual, with no kernel run (the core's calls take meta tensors
# as shapes only: Note [Meta tensors in the core's calls] in csrc/python/dk_pydlpack.h). That
# holds for dkit.ops and for the torch ops alike. An op whose output size depends on the values
# (nms) cannot answer without them: fw.first_rows raises DkitNotImplementedError for a meta
# count, as torchvision's meta nms raises. Where torch has fake implementations, the fake
# implementation (Note [dkit ops under torch.compile]) serves the Meta key as well; before that,
# the op's function itself does.

# Note [Quantized tensors]
# dkit computes in floating point and refuses quantized tensors with an error that names the op
# and says to dequantize (torchvision's qroi_align, which rounds every bin back to the input's
# quantization, has no counterpart in dkit). The torch ops send quantized tensors to the same
# kernels, so that they meet that refusal in every mode (under inference_mode, where no Autograd
# kernel runs, too) instead of torch's "could not run ... with arguments from the QuantizedCPU
# backend".

# Kept across importlib.reload (Note [Registration requested while this module loads]).
_library = globals().get("_library")
_core_done = globals().get("_core_done", set())  # core op names registered as <name>.out
_public_done = globals().get("_public_done", set())  # public functions registered (by qualified name)
_differentiable_done = globals().get("_differentiable_done", set())  # Differentiable ops registered (by name)
_polyfilled = globals().get("_polyfilled", set())  # public functions given a dynamo polyfill (by qualified name)


def _out_kernel(name, fn, outs, arg_names):
    """The kernel of a core op's .out overload: runs dkit._C.ops.<op> and returns its outputs."""
    single = outs[0] if len(outs) == 1 else None

    def kernel(*args):
        if _grad_enabled():  # Note [The .out ops and autograd]
            for i, a in enumerate(args):
                if isinstance(a, _Tensor) and a.requires_grad:  # nn.Parameter too
                    _refuse_grad(name, arg_names[i])
        fn(*args)
        if single is not None:
            return args[single]
        return tuple(args[i] for i in outs)

    return kernel


# Note [The .out ops and autograd]
# A .out op has no derivative: it writes tensors the caller allocated, as torch's out= variants
# do, and like them it refuses, in grad mode, every tensor argument that requires grad, instead
# of computing a result that is silently cut off from the graph (an output that requires grad
# would otherwise meet only the DLPack export's "Can't export tensors that require gradient").
# The differentiable form of every op is its public function (torch.ops.dkit.roi_align). The
# outputs' versions are bumped by the kernel holder (Note [Outputs written in place] in
# csrc/python/dk_torch_kernel.cpp; not where it is not built, and torch's own Python kernels
# serve).
def _refuse_grad(name, arg):
    raise _C.DkitError(
        f"dkit::{name}.out: functions with out=... arguments don't support automatic differentiation, "
        f"but argument '{arg}' requires grad (the public op, e.g. torch.ops.dkit.roi_align, is "
        f"differentiable; or run it under torch.no_grad())"
    )


def out_schema(core_schema):
    """The .out overload's schema (without namespace) from a core schema, the positions of the
    outputs it returns, and the names of all its arguments."""
    parsed = torch._C.parse_schema(core_schema)
    outs, returns = [], []
    for i, a in enumerate(parsed.arguments):
        info = a.alias_info
        if info is not None and info.is_write and isinstance(a.type, torch.TensorType):
            outs.append(i)
            (alias,) = info.before_set
            returns.append(f"Tensor({alias}!)")
    if not outs or not core_schema.endswith("-> ()"):  # every core op writes outputs, returns none
        raise _C.DkitValueError(f"dkit ops in torch: unexpected core schema {core_schema!r}")
    ret = returns[0] if len(returns) == 1 else "(" + ", ".join(returns) + ")"
    name, rest = core_schema.split("::", 1)[1].split("(", 1)
    return f"{name}.out({rest[: -len('-> ()')]}-> {ret}", outs, [a.name for a in parsed.arguments]


def _impl(lib, overload, kernel, key):
    if _holder_impl is not None:
        _holder_impl(NAMESPACE, overload, key, kernel)
    else:
        lib.impl(overload, kernel, key)


def _register_core_op(lib, name):
    schema, outs, arg_names = out_schema(_C.schema(name))
    lib.define(schema)
    kernel = _out_kernel(name, getattr(_C.ops, name), outs, arg_names)
    for key in _OUT_KEYS:
        _impl(lib, f"{name}.out", kernel, key)


# Note [dkit ops under torch.compile]
# torch.compile traces Python, but a tracer cannot see into dkit's C calls: a graph made from
# dkit.ops' Python code would lose the kernels. So under torch.compile (and torch.export) dkit's
# functions are replaced by their torch ops, which the graph records as one node each, and
# every torch op has what torch needs to trace around it:
#   - A polyfill: torch.compiler.substitute_in_graph (torch >= 2.5) tells dynamo to trace each
#     public function of dkit.ops as a call of its torch op, torch.ops.dkit.<name>. Eager calls
#     do not change. It is registered once torch._dynamo is imported (its import costs ~0.7 s,
#     which `import dkit` must not pay). The compat functions and dkit.nn are plain Python over
#     dkit.ops and are traced through to it.
#   - A fake implementation per op: the op's own Python function, run with this thread's
#     shape-only flag (Note [Shape-only calls] in csrc/python/dk_pyops.c), so that the outputs
#     are sized and allocated as always (as FakeTensors) and no kernel runs. An output whose size
#     depends on the values (nms) gets a size torch names symbolically
#     (torch.library.get_ctx().new_dynamic_size(), fw.first_rows), torch's rule for such ops.
#   - Autograd made of torch ops: each dkit._ops.Differentiable is two torch ops,
#     dkit::_<name>_forward and dkit::_<name>_backward (its forward and backward, with fake
#     implementations as above), and the forward op's Autograd kernel is a torch.autograd.Function
#     whose backward calls the backward op. Inside a torch op's kernel, fw.apply() goes through
#     the forward op (Note [Calls inside dkit's torch ops] in dkit/_frameworks/torch.py), so the
#     graph holds the forward and backward kernels as ops; AOTAutograd partitions them as it does
#     torchvision's roi_align and _roi_align_backward.
# The same structure serves TorchScript and torch.fx, on every torch version: only the polyfill
# and the fake registration need torch 2.x.


def _in_torch_op(fn):
    """fn with this thread's ROUTE flag set (Note [Calls inside dkit's torch ops] in
    dkit/_frameworks/torch.py): its autograd goes through torch ops."""
    route = _torch_fw.ROUTE

    def kernel(*args, **kwargs):
        previous = getattr(route, "torch_ops", False)
        route.torch_ops = True
        try:
            return fn(*args, **kwargs)
        finally:
            route.torch_ops = previous

    kernel.__name__ = kernel.__qualname__ = fn.__name__
    return kernel


def _shape_only(fn):
    """fn as a fake implementation: it sizes and allocates every output, and runs no kernel
    (Note [Shape-only calls] in csrc/python/dk_pyops.c); no autograd is recorded."""

    def fake(*args, **kwargs):
        previous = _C._shape_only(True)
        try:
            with torch.no_grad():
                return fn(*args, **kwargs)
        finally:
            _C._shape_only(previous)

    fake.__name__ = fake.__qualname__ = fn.__name__
    return fake


def _register_fake(lib, overload, fn):
    """fn's shape-only form as the fake implementation of dkit::<overload> (torch >= 2.1), or as
    its Meta kernel (torch 1.13 and 2.0: Note [Meta tensors])."""
    fake = _shape_only(fn)
    if _REGISTER_FAKE is not None:
        _REGISTER_FAKE(f"{NAMESPACE}::{overload}", fake, lib=lib)
    else:
        _impl(lib, overload, fake, "Meta")


def _register_public_op(lib, fn):
    schemas = fn.__dkit_torch_schemas__
    for schema in schemas:
        lib.define(schema)
        overload = schema.split("(", 1)[0]
        for key in _BACKEND_KEYS:
            _impl(lib, overload, fn, key)
        _impl(lib, overload, _autograd_kernel(overload, fn), "Autograd")
        if fn.__dkit_autocast__:
            for device, key in (("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")):
                _impl(lib, overload, _autocast_kernel(overload, device), key)
        _register_fake(lib, overload, fn)
    # TorchScript compiles a call of fn to the op (all of its overloads)
    torch.jit._builtins._register_builtin(fn, f"{NAMESPACE}::{fn.__name__}")


def _autograd_kernel(overload, fn):
    """The Autograd kernel of a public op.
      - Plain torch tensors (TorchScript, eager calls of the op): fn itself, as dkit.ops runs it,
        with dkit's own autograd.Function where a gradient is needed: the cheapest way.
      - Anything else is a tracer's or a subclass's tensor (torch.compile's FunctionalTensor and
        FakeTensor, a __torch_dispatch__ wrapper): where autograd must record the call (grad mode,
        a tensor that requires grad, an op declared differentiable), fn runs with its autograd
        routed through the Differentiable's torch ops, which the tracer sees (Note [Calls inside
        dkit's torch ops] in dkit/_frameworks/torch.py); otherwise the call goes below autograd,
        to the backend kernel, the fake implementation, or the subclass's own handling."""
    name, _, variant = overload.partition(".")
    routed = _in_torch_op(fn) if fn.__dkit_differentiable__ else None
    # looked up at the first call: torch.ops.dkit.<name> made during registration would not know
    # the overloads defined after it (the core op's .out, of the same name)
    target = []

    def autograd(*args, **kwargs):
        if _plain(args, kwargs):
            return fn(*args, **kwargs)
        if routed is not None and _grad_enabled() and _any_requires_grad(args, kwargs):
            return routed(*args, **kwargs)
        if not target:
            target.append(getattr(getattr(getattr(torch.ops, NAMESPACE), name), variant or "default"))
        with _BelowAutograd():
            return target[0](*args, **kwargs)

    autograd.__name__ = autograd.__qualname__ = name
    return autograd


def _autocast_kernel(overload, device):
    """The Autocast kernel of a public op that runs in float32 under autocast, as torchvision's
    (Note [Autocast] in dkit/_ops/__init__.py): float16 and bfloat16 tensors cast to float32, the
    op called with autocast off, a floating result given the first tensor's dtype."""
    name, _, variant = overload.partition(".")
    target = []  # looked up at the first call, as in _autograd_kernel

    def cast(a):
        if isinstance(a, _Tensor):
            return a.float() if a.dtype in _AUTOCAST_UP else a
        if isinstance(a, (list, tuple)):
            return type(a)(cast(t) for t in a)
        return a

    def autocast(*args, **kwargs):
        if not target:
            target.append(getattr(getattr(getattr(torch.ops, NAMESPACE), name), variant or "default"))
        first = next(a for a in (*args, *kwargs.values()) if isinstance(a, _Tensor))
        with torch.autocast(device, enabled=False):
            out = target[0](*(cast(a) for a in args), **{k: cast(v) for k, v in kwargs.items()})
        return out.to(first.dtype) if out.is_floating_point() else out

    autocast.__name__ = autocast.__qualname__ = name
    return autocast


_AUTOCAST_UP = (torch.float16, torch.bfloat16)


def _plain(args, kwargs):
    """Whether every tensor argument (in lists too) is exactly a torch.Tensor. On every call of a
    torch op through TorchScript, so cheap first: isinstance against torch's tensor types goes
    through their metaclass (~70 ns each), so the usual argument types are tested by identity."""
    for a in args:
        tp = type(a)
        if tp is _Tensor or tp in _SCALARS:
            continue
        if tp is list or tp is tuple:
            for t in a:
                tt = type(t)
                if tt is not _Tensor and tt not in _SCALARS and isinstance(t, _Tensor):
                    return False
        elif isinstance(a, _Tensor):
            return False
    return not kwargs or _plain(tuple(kwargs.values()), None)


_SCALARS = frozenset({int, float, bool, str, type(None)})


def _any_requires_grad(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            if a.requires_grad:
                return True
        elif isinstance(a, (list, tuple)) and any(isinstance(t, _Tensor) and t.requires_grad for t in a):
            return True
    return False


def _register_differentiable(lib, op):
    """dkit::_<name>_forward and dkit::_<name>_backward of a Differentiable, with their kernels,
    fake implementations and autograd (Note [dkit ops under torch.compile])."""
    fw = _torch_fw
    forward, backward = f"_{op.name}_forward", f"_{op.name}_backward"
    lib.define(forward + op.forward_schema)
    lib.define(backward + op.backward_schema)

    def forward_kernel(*args):
        return tuple(op.forward(fw, *args))

    def backward_kernel(*args):
        grads = fw.run_backward(op.backward, *args)
        return grads[0] if len(grads) == 1 else tuple(grads)

    forward_kernel.__name__, backward_kernel.__name__ = forward, backward
    for key in _BACKEND_KEYS:
        _impl(lib, forward, forward_kernel, key)
        _impl(lib, backward, backward_kernel, key)
    _register_fake(lib, forward, forward_kernel)
    _register_fake(lib, backward, backward_kernel)
    forward_autograd, backward_autograd = _autograd_kernels(op)
    _impl(lib, forward, forward_autograd, "Autograd")
    _impl(lib, backward, backward_autograd, "Autograd")


class _BelowAutograd:
    """Dispatch below the Autograd keys for the block, as an autograd kernel redispatches: torch's
    guard is active from its construction (torch 1.13 has no context-manager form of it)."""

    __slots__ = ("_guard",)

    def __enter__(self):
        self._guard = torch._C._AutoDispatchBelowAutograd()

    def __exit__(self, *exc):
        del self._guard


def _autograd_kernels(op):
    """The Autograd kernels of a Differentiable's two torch ops: the forward op's records a
    Function whose backward is the backward op; the backward op's records one that refuses to be
    differentiated (Note [Double backward] in dkit/_frameworks/torch.py)."""
    fw = _torch_fw
    n = op.results
    ns = getattr(torch.ops, NAMESPACE)
    below = _BelowAutograd

    def backward_forward(ctx, *args):
        with below():
            return getattr(ns, f"_{op.name}_backward")(*args)

    def anchored_forward(ctx, anchor, *args):
        with below():
            return getattr(ns, f"_{op.name}_backward")(*args)

    def backward_backward(ctx, *grads):
        raise fw.double_backward_error(op.name)

    # the backward op's own Autograd kernel, and the form with the anchor of Note [Double
    # backward] that the forward's backward uses under create_graph=True
    backward_fn = type(
        f"{op.title}OpBackward",
        (torch.autograd.Function,),
        {"forward": staticmethod(backward_forward), "backward": staticmethod(backward_backward)},
    )
    anchored_fn = type(
        f"{op.title}OpBackward",
        (torch.autograd.Function,),
        {"forward": staticmethod(anchored_forward), "backward": staticmethod(backward_backward)},
    )

    def function_forward(ctx, *args):
        with below():
            results = getattr(ns, f"_{op.name}_forward")(*args)
        ctx.dkit_nargs = len(args)
        fw.save(ctx, op.saved(args, results))
        if len(results) > n:
            ctx.mark_non_differentiable(*results[n:])
        return tuple(results)

    def function_backward(ctx, *grads):
        args = (*grads[:n], *fw.saved(ctx))
        if torch.is_grad_enabled():  # create_graph=True: Note [Double backward]
            g = anchored_fn.apply(grads[0].new_empty(0).requires_grad_(), *args)
        else:
            g = getattr(ns, f"_{op.name}_backward")(*args)
        g = g if isinstance(g, tuple) else (g,)
        return (*g, *((None,) * (ctx.dkit_nargs - len(g))))

    function = type(
        f"{op.title}OpFunction",
        (torch.autograd.Function,),
        {"forward": staticmethod(function_forward), "backward": staticmethod(function_backward)},
    )

    def forward_autograd(*args):
        return function.apply(*args)

    def backward_autograd(*args):
        return backward_fn.apply(*args)

    return forward_autograd, backward_autograd


def _register_polyfills():
    """Under torch.compile, each public function of dkit.ops is traced as its torch op (Note
    [dkit ops under torch.compile]); torch >= 2.5, once torch._dynamo is imported."""
    substitute = getattr(torch.compiler, "substitute_in_graph", None) if hasattr(torch, "compiler") else None
    if substitute is None:
        return
    for fn in _public_functions():
        if fn.__qualname__ in _polyfilled:
            continue
        substitute(fn)(_polyfill(getattr(getattr(torch.ops, NAMESPACE), fn.__name__)))
        _polyfilled.add(fn.__qualname__)


def _polyfill(op):
    def polyfill(*args, **kwargs):
        return op(*args, **kwargs)

    return polyfill


def _public_functions():
    from dkit import ops

    for name in ops.__all__:
        fn = getattr(ops, name)
        if hasattr(fn, "__dkit_torch_schemas__"):
            yield fn


def _differentiables():
    """Every dkit._ops.Differentiable of the modules that define dkit.ops' functions."""
    from dkit._ops import Differentiable

    seen = set()
    for fn in _public_functions():
        module = sys.modules[fn.__module__]
        for value in vars(module).values():
            if isinstance(value, Differentiable) and value.name not in seen:
                seen.add(value.name)
                yield value


def current_stream(device_id):
    """torch's current stream on CUDA device `device_id` (a pointer value): the stream dkit's
    kernels run on for torch tensors when dkit has none set for the device (Note [The
    consumer's stream] in csrc/python/dk_pystream.c), so that they are ordered with torch's own
    work as a torch op would be. Called only for tensors on a device with streams."""
    return torch.cuda.current_stream(device_id).cuda_stream


# The same answer from torch's C function, where it has one (torch's CUDA and ROCm builds): it is
# asked once or twice per GPU tensor of every call (Note [torch fast path on a GPU] in
# csrc/python/dk_pydlpack.c), and torch.cuda.current_stream builds a Stream object each time.
_raw_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def sync():  # noqa: F811 - the placeholder above, replaced
    """Registers every dkit op not yet registered with torch (all of them the first time; later,
    the ops a loaded backend added). Idempotent and cheap when nothing is new."""
    global _library
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "DEF")
        for fn in _public_functions():
            _register_public_op(_library, fn)
            _public_done.add(fn.__qualname__)
        for op in _differentiables():
            if op.name not in _differentiable_done:
                _register_differentiable(_library, op)
                _differentiable_done.add(op.name)
        _fx_wrap_public()
        _C.set_stream_getter(torch.Tensor, _raw_current_stream or current_stream)
        import dkit

        dkit._after_import("torch._dynamo", _register_polyfills)
    for name in _C.op_names():
        if name not in _core_done:
            _register_core_op(_library, name)
            _core_done.add(name)


def _fx_wrap_public():
    """torch.fx.wrap of dkit.ops' functions, in dkit.ops' namespace: symbolic tracing then
    records dkit.ops.<name>(...) as one call_function node instead of running it on Proxies.
    torch.fx.wrap must be called from the top level of the module whose global it patches; a
    statement run with that module's namespace as its globals is such a call."""
    from dkit import ops

    code = compile("__import__('torch.fx').fx.wrap(_dkit_name)", "<dkit.ops fx.wrap>", "exec")
    namespace = ops.__dict__
    for fn in _public_functions():
        namespace["_dkit_name"] = fn.__name__
        try:
            exec(code, namespace)
        finally:
            del namespace["_dkit_name"]


if _sync_requested:  # Note [Registration requested while this module loads]
    _sync_requested = False
    sync()
