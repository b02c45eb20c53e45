"""dkit.dispatch: look inside the dispatcher, and steer it for the current thread.

    >>> dkit.dispatch.ops()                      # {op name: schema}
    >>> print(dkit.dispatch.table("roi_align_forward"))
    >>> with dkit.dispatch.include("Profile"):   # thread-local; see also dkit.profile()
    ...     ...

Each (op, key) slot is filled from the first of: a kernel registered at that key, the op's
composite kernel (backend keys only), the key's backend fallback, nothing. table() shows, per
key, which one won ("provenance") and the kernel's name.
"""

import contextlib
import operator
import os
from typing import NamedTuple

from dkit import _C, _entry_points

__all__ = [
    "ops",
    "schema",
    "table",
    "dump",
    "Slot",
    "Table",
    "key",
    "include",
    "exclude",
    "tls",
    "stream",
    "backends",
    "Backend",
    "load_backend",
    "unload_backend",
    "kernel",
    "python_kernels",
]


def ops():
    """{name: schema} of every op registered in the core, e.g.
    {'roi_align_forward': 'dkit::roi_align_forward(Tensor input, ...) -> ()', ...}."""
    return {name: _C.schema(name) for name in _C.op_names()}


def schema(name):
    """The op's schema string; DkitValueError for an unknown name."""
    return _C.schema(name)


class Slot(NamedTuple):
    """One (op, key) slot of the computed dispatch table."""

    key: str  # "Profile", "cpu", a vendor backend's name, ...
    provenance: str  # which rule filled the slot (kernel, composite, fallback, fallthrough, missing, ...)
    kernel: str | None  # the kernel's name, None when the slot is empty
    boxed: bool  # True when the kernel takes a boxed stack (fallbacks)


class Table(list):
    """The computed table of one op: a list of Slot, highest priority first. str() is the core's
    own dump (dk_op_dump)."""

    def __init__(self, name, slots):
        super().__init__(slots)
        self.op = name

    def __str__(self):
        return _C.dump(self.op)

    def __repr__(self):
        return f"Table({self.op!r}, {list.__repr__(self)})"


def table(name):
    """The op's computed dispatch table with provenance (a Table of Slot, highest key first)."""
    # _C.table gives one (key, provenance, kernel or None, boxed) tuple per slot
    return Table(name, [Slot(key, prov, kernel, bool(boxed)) for key, prov, kernel, boxed in _C.table(name)])


def dump(name):
    """The core's text dump of the op's table."""
    return _C.dump(name)


def key(name):
    """The id of a dispatch key by name ("cpu", "Profile", a vendor backend's name)."""
    return _C.key(name)


# Key ids are bit positions in a 64-bit key set (csrc/common/dk_keys.h).
_NUM_KEYS = 64


def _keyset(keys, what):
    """The key set of `keys` (names or ids), each checked here: `1 << k` would take -1 to
    Python's "negative shift count" and 64 to a mask the core refuses without naming the key."""
    ks = 0
    for k in keys:
        if isinstance(k, str):
            k = _C.key(k)  # DkitValueError naming an unknown key
        else:
            try:
                if type(k) is bool:
                    raise TypeError
                k = operator.index(k)  # ints, NumPy's integers
            except TypeError:
                raise _C.DkitTypeError(
                    f"dispatch.{what}: keys are names or key ids (int), got {type(k).__name__} {k!r}"
                ) from None
        if not 0 <= k < _NUM_KEYS:
            raise _C.DkitValueError(f"dispatch.{what}: a key id is in [0, {_NUM_KEYS}), got {k}")
        ks |= 1 << k
    return ks


def include(*keys):
    """Add keys (names or ids) to this thread's included set for the block (nests; blocks may
    end in any order, Note [Scopes that end out of order] in csrc/common/dk_tls.h). The keys are
    checked here, at the call, not when the block is entered."""
    return _scope(_keyset(keys, "include"), 0)


def exclude(*keys):
    """Remove keys (names or ids) from every call on this thread for the block (nests;
    exclusion beats inclusion; blocks may end in any order). The keys are checked here, at the
    call."""
    return _scope(0, _keyset(keys, "exclude"))


@contextlib.contextmanager
def _scope(included, excluded):
    scope = _C.tls_scope_enter(included, excluded)
    try:
        yield
    finally:
        _C.tls_scope_exit(scope)


def tls():
    """(included, excluded) key-set bitmasks of the current thread."""
    return tuple(_C.tls_get())


# DLPack device types by name; torch calls ROCm devices "cuda" in its ROCm builds, so "cuda"
# means CUDA here and "hip" / "rocm" mean ROCm.
_DEVICE_TYPES = {"cuda": 2, "hip": 10, "rocm": 10}


@contextlib.contextmanager
def stream(device, stream):
    """Run dkit's kernels for `device` on `stream` in this block, on this thread (Note [The
    current stream] in csrc/common/dk_backend.h): the kernels are queued there, and producers of
    DLPack tensors are asked to make their data ready for it (`__dlpack__(stream=...)`, Note
    [The consumer's stream] in csrc/python/dk_pystream.c). Without it, dkit uses the device's
    default stream.

        with dkit.stream(x.device, torch.cuda.current_stream(x.device)):
            y = dkit.ops.roi_align(x, boxes, 7)

    device: a torch.device (or anything with .type and .index), or (type, index) with type a
    DLPack device type (2 CUDA, 10 ROCm) or 'cuda' / 'hip'. stream: a pointer value (int), or
    an object with .cuda_stream (torch.cuda.Stream); 0 is the default stream. Blocks nest, and
    the previous stream comes back at the end of each."""
    dev_type, dev_id = _device(device)
    handle = getattr(stream, "cuda_stream", stream)
    if type(handle) is not int:
        raise _C.DkitTypeError(f"dispatch.stream: a stream is an int or has .cuda_stream, got {type(stream).__name__}")
    previous = _C.set_current_stream(dev_type, dev_id, handle)
    try:
        yield
    finally:
        _C.set_current_stream(dev_type, dev_id, previous)


def _device(device):
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        dev_type, dev_id = device.type, device.index or 0
    else:
        try:
            dev_type, dev_id = device
        except (TypeError, ValueError):
            raise _C.DkitTypeError(
                f"dispatch.stream: a device is (type, index) or a torch.device, got {device!r}"
            ) from None
    if isinstance(dev_type, str):
        code = _DEVICE_TYPES.get(dev_type)
        if code is None:
            raise _C.DkitValueError(f"dispatch.stream: no streams on device type {dev_type!r} (cuda, hip)")
        dev_type = code
    return dev_type, dev_id


class Backend(NamedTuple):
    name: str
    path: str | None  # the shared library a backend was loaded from; None when built in
    key: str | None  # its dispatch key ("cpu", a vendor's name); None if it claimed none
    available: bool  # whether its kernels can run now
    reason: str | None  # why not, when unavailable (e.g. "no CUDA driver")
    devices: int | None  # devices present now; None when the backend does not say

    build: str | None = None  # what a GPU backend was built for ("sm_80, sm_90 (+ PTX compute_90)")
    # how it came to be loaded: "built in", "shipped with dkit" (the GPU libraries beside dkit._C),
    # "DKIT_BACKENDS" or "dkit.load_backend"
    origin: str | None = None

    def __str__(self):
        where = f" ({self.path}; {self.origin})" if self.path else ""
        built = f" built for {self.build};" if self.build else ""
        if not self.available:
            return f"{self.name}{where}:{built} unavailable: {self.reason}"
        devices = "" if self.devices is None else f", {self.devices} device{'s' if self.devices != 1 else ''}"
        return f"{self.name}{where}:{built} available{devices}"


def _gpu_archs(path):
    """The architectures a GPU backend library was built for (its dk_gpu_archs()), or None for
    a library that does not say (a vendor's). The library is already loaded: RTLD_NOLOAD."""
    if not path:
        return None
    import ctypes

    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        fn = lib.dk_gpu_archs
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    return fn().decode()


def backends():
    """The backends the core knows, built in (path None) or loaded from libraries, each with
    whether it can run now and, if not, why, and where it came from; then each library that
    failed to load when dkit._C was imported (available False, the reason, key None: Note [A
    failing backend never breaks the import] in csrc/python/dk_pybackends_at_import.c)."""
    origins = _C.backend_origins()
    rows = [
        Backend(*b, _gpu_archs(b[1]), origins.get(b[1], "built in" if b[1] is None else None)) for b in _C.backends()
    ]
    for path, origin, reason in _C.backend_failures():
        rows.append(Backend(os.path.basename(path), path, None, False, f"not loaded: {reason}", None, None, origin))
    return rows


def load_backend(path):
    """Load a vendor backend shared library (built against dkit.get_include()) and register its
    kernels. Raises DkitFileNotFoundError if it cannot be opened, DkitImportError on an ABI
    mismatch. Ops the backend defines become torch ops too where torch is in use (Note [When
    the ops are registered] in dkit/_torch_library.py)."""
    return _entry_points.load_backend(path)


def unload_backend(name):
    """Undo what the backend library loaded as `name` (its name in dkit.backends()) registered:
    its kernels, fallbacks, backend object and dispatch key, so that every dkit.dispatch.table()
    is the one before it was loaded. The library stays mapped (a kernel of it may be running;
    memory allocated through it is still freed by it): Note [Unloading a backend] in
    csrc/common/dk_backend_library.c. Loading it again runs its entry point again. Raises
    DkitFileNotFoundError for a name no library was loaded as, DkitValueError for a built-in
    backend."""
    _C.unload_backend(name)


# ------------------------------------------------------------------------------------------
# Kernels written in Python (Note [Python kernels] in csrc/python/dk_pykernel.c)

# How a Python kernel receives its tensor arguments: the KernelTensor views themselves, or each
# converted (zero-copy) for the function (Note [A Python kernel's tensors]).
_TENSORS = {
    "view": None,
    "torch": lambda: __import__("torch").from_dlpack,
    "numpy": lambda: __import__("numpy").asarray,
}


def kernel(op, key, fn=None, *, tensors="view"):
    """Register a Python function as the kernel of core op `op` (a name, or a dkit._C.ops
    callable) at backend key `key` ("cpu", "cuda", a vendor backend's name, or a key id): to
    prototype a backend, or override one kernel. Every call of the op at that key, from Python
    (dkit.ops, torch.ops.dkit, TorchScript) or from C, then runs it, with the GIL taken.

        @dkit.dispatch.kernel("roi_align_forward", "cpu", tensors="torch")
        def roi_align_forward(input, rois, output, argmax_y, argmax_x, aligned_height,
                              aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned):
            output.copy_(...)                  # outputs are written in place; return None

        roi_align_forward.dkit_kernels[-1].remove()   # the C kernel serves again

    The function takes the op's arguments in schema order (dkit.dispatch.schema(op)); the
    tensors as `tensors` says: "view" (dkit._C.KernelTensor: __dlpack__, __array_interface__,
    shape, dtype, device, data_ptr; valid during the call), "torch" (torch.from_dlpack of each)
    or "numpy" (numpy.asarray of each: host memory; outputs writable, inputs read-only). An
    exception it raises fails the call with the DkitError of its class, from it.

    The dispatcher's rules hold (Note [Slot precedence]): the newest kernel at (op, key) wins,
    and removing it restores the one it shadowed; keys above (Profile, a functionality layer)
    still run first. table(op) names the slot's kernel "python: module.qualname".

    With `fn`, registers it and returns its PythonKernel handle: remove() unregisters it, and a
    `with` block removes it at its end. Without, returns a decorator that registers the function
    and returns it, with the handle appended to its `dkit_kernels` list."""
    if tensors not in _TENSORS:
        raise _C.DkitValueError(f"dispatch.kernel: tensors is one of {sorted(_TENSORS)}, got {tensors!r}")
    name = getattr(op, "__name__", op)
    if not isinstance(name, str):
        raise _C.DkitTypeError(f"dispatch.kernel: op is a name or a dkit._C.ops callable, got {type(op).__name__}")
    callable_op = getattr(_C.ops, name, None)
    if type(callable_op) is not _C.Op:
        raise _C.DkitValueError(
            f"dispatch.kernel: no core op named {name!r}; dispatch.ops() lists them (dkit.ops.roi_align, for one, "
            "runs the core ops roi_align_forward and roi_align_backward)"
        )
    args = callable_op.arg_names
    key_id = _keyset((key,), "kernel").bit_length() - 1  # the key checked as include() checks it

    def register(fn):
        if not callable(fn):
            raise _C.DkitTypeError(f"dispatch.kernel: a kernel is a callable, got {type(fn).__name__}")
        _check_signature(fn, name, args)
        module = getattr(fn, "__module__", None) or "?"
        label = f"{module}.{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"
        convert = _TENSORS[tensors]
        target = fn if convert is None else _converting(fn, convert())
        return _C.register_python_kernel(name, key_id, target, label)

    if fn is not None:
        return register(fn)

    def decorator(fn):
        handle = register(fn)
        try:
            fn.__dict__.setdefault("dkit_kernels", []).append(handle)
        except AttributeError:  # no __dict__ (a builtin, a bound method): the handle is in python_kernels()
            pass
        return fn

    return decorator


def python_kernels():
    """The Python kernels registered now (dkit._C.PythonKernel: op, key, name, function,
    remove()), oldest first."""
    return _C.python_kernels()


def _check_signature(fn, op, args):
    """Refuses, at registration, a function that cannot take the op's arguments positionally."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some builtins): checked by the calls
        return
    try:
        sig.bind(*args)
    except TypeError as e:
        raise _C.DkitTypeError(
            f"dispatch.kernel: {getattr(fn, '__qualname__', fn)!s}{sig} cannot take the {len(args)} arguments of "
            f"{op} ({', '.join(args)}): {e}"
        ) from None


def _converting(fn, convert):
    import functools

    kernel_tensor = _C.KernelTensor

    @functools.wraps(fn)
    def call(*args):
        return fn(*[convert(a) if type(a) is kernel_tensor else a for a in args])

    return call
