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
                            kernel, at the CPU, CUDA, Meta and Autograd keys, is the function itself:
                            the argument checks, the output allocation and (for roi_align) the
                            autograd Function are the ones dkit.ops runs, so a torch op and an
                            eager call cannot disagree. Autograd is thereby registered with
                            torch once per op, from the op's Differentiable declaration, not
                            written per framework.

TorchScript then compiles calls to these ops: the public functions are registered as TorchScript
builtins of their ops (torch.jit._builtins, the table through which torch.nn.functional's
functions map to aten ops), so a scripted function or module that calls dkit.ops.roi_align
compiles to dkit::roi_align; dkit.nn and dkit.compat write their TorchScript branches against
torch.ops.dkit directly. torch.fx records dkit.ops' functions as call_function nodes (they are
registered with torch.fx.wrap in dkit.ops' namespace), as it does for torchvision.ops.roi_align.

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


import torch  # noqa: E402
import torch.jit._builtins  # noqa: E402

from dkit import _C  # noqa: E402

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled

try:  # Note [Why dkit has its own kernel holder] in csrc/python/dk_torch_kernel.cpp
    from dkit._torch_kernel import impl as _holder_impl
except ImportError:  # built without torch's C++ headers: torch's own Python kernels
    _holder_impl = None

NAMESPACE = "dkit"

# Dispatch keys served by a kernel that is a Python function. CUDA serves the GPU backends'
# tensors (torch's ROCm builds call HIP devices "cuda" too); the kernel finds the backend.
# QuantizedCPU: Note [Quantized tensors].
# Meta: Note [Meta tensors].
_BACKEND_KEYS = ("CPU", "CUDA", "QuantizedCPU", "Meta")
# The .out ops have no Autograd kernel (Note [The .out ops and autograd]); torch 1.13 has no
# autograd fallthrough for meta tensors, so AutogradMeta is served too.
_OUT_KEYS = _BACKEND_KEYS + ("AutogradMeta",)

# Note [Meta tensors]
# dkit has no meta kernels (a meta tensor has no memory; dkit.ops raises DkitNotImplementedError
# for one, as torchvision raises NotImplementedError). The torch ops send meta tensors to the
# same kernels, so that they meet that error in every mode: without a Meta kernel, a call under
# inference_mode (where the Autograd kernel does not run) and every .out call got torch's
# "Could not run 'dkit::roi_align' with arguments from the 'Meta' backend" instead.

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


def _register_public_op(lib, fn):
    schemas = fn.__dkit_torch_schemas__
    for schema in schemas:
        lib.define(schema)
        overload = schema.split("(", 1)[0]
        for key in (*_BACKEND_KEYS, "Autograd"):
            _impl(lib, overload, fn, key)
    # TorchScript compiles a call of fn to the op (all of its overloads)
    torch.jit._builtins._register_builtin(fn, f"{NAMESPACE}::{fn.__name__}")


def _public_functions():
    from dkit import ops

    for name in ops.__all__:
        fn = getattr(ops, name)
        if hasattr(fn, "__dkit_torch_schemas__"):
            yield fn


def current_stream(device_id):
    """torch's current stream on CUDA device `device_id` (a pointer value): the stream dkit's
    kernels run on for torch tensors when dkit has none set for the device (Note [The
    consumer's stream] in csrc/python/dk_pystream.c), so that they are ordered with torch's own
    work as a torch op would be. Called only for tensors on a device with streams."""
    return torch.cuda.current_stream(device_id).cuda_stream


def sync():  # noqa: F811 - the placeholder above, replaced
    """Registers every dkit op not yet registered with torch (all of them the first time; later,
    the ops a loaded backend added). Idempotent and cheap when nothing is new."""
    global _library
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "DEF")
        for fn in _public_functions():
            _register_public_op(_library, fn)
            _public_done.add(fn.__qualname__)
        _fx_wrap_public()
        _C.set_stream_getter(torch.Tensor, current_stream)
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
