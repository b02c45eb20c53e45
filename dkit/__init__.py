"""dkit: vision operators (roi_align, ...) written once in C, served on many devices.

    import dkit
    y = dkit.ops.roi_align(x, boxes, 7, spatial_scale=0.25)   # torch, NumPy or any DLPack producer
    layer = dkit.nn.RoIAlign(7, 0.25)                         # a torch.nn.Module
    with dkit.profile() as prof:
        ...
    print(prof)

Switching existing code over is one import:

    from dkit.compat.torchvision import roi_align, RoIAlign   # torchvision.ops' signatures
    from dkit.compat.mmcv import roi_align, RoIAlign          # mmcv.ops' signatures

Importing dkit is cheap: it imports neither torch nor NumPy nor even the C extension. Every
attribute below is resolved on first use (PEP 562), and torch is imported only when a torch
tensor is passed in or `dkit.nn` / `dkit.compat` is used. Where torch is imported too (before
dkit or after it), dkit's ops become torch ops, torch.ops.dkit.* (Note [When the ops are
registered] in dkit/_torch_library.py).
"""

import importlib as _importlib
import sys as _sys

__version__ = "0.1.0"  # equals dkit._C.config()["version"] (DK_VERSION_STRING); a test checks it

__all__ = [
    "ops",
    "nn",
    "dispatch",
    "compat",
    "profile",
    "backends",
    "load_backend",
    "unload_backend",
    "register_tensor_type",
    "stream",
    "show_config",
    "set_num_threads",
    "get_num_threads",
    "empty_cache",
    "host_cache_stats",
    "get_include",
    "get_library",
    "DkitError",
    "__version__",
]

_SUBMODULES = frozenset({"ops", "nn", "dispatch", "compat"})

# name -> (module, attribute)
_LAZY = {
    "profile": ("dkit._profile", "profile"),
    "backends": ("dkit.dispatch", "backends"),
    "load_backend": ("dkit._entry_points", "load_backend"),  # not dkit.dispatch: see there
    "unload_backend": ("dkit.dispatch", "unload_backend"),
    # Note [Outputs on a backend's device] in dkit/_frameworks/backend.py
    "register_tensor_type": ("dkit._frameworks.backend", "register"),
    "stream": ("dkit.dispatch", "stream"),
    "show_config": ("dkit._config", "show_config"),
    "set_num_threads": ("dkit._C", "set_num_threads"),
    "get_num_threads": ("dkit._C", "get_num_threads"),
    # Note [Host output cache] in csrc/cpu/dk_host_cache.h
    "empty_cache": ("dkit._C", "empty_cache"),
    "host_cache_stats": ("dkit._C", "host_cache_stats"),
    "get_include": ("dkit._paths", "get_include"),
    "get_library": ("dkit._paths", "get_library"),
}

_ERRORS = frozenset(
    {
        "DkitError",
        "DkitValueError",
        "DkitTypeError",
        "DkitIndexError",
        "DkitNotImplementedError",
        "DkitBufferError",
        "DkitMemoryError",
        "DkitFileNotFoundError",
        "DkitImportError",
    }
)


def __getattr__(name):
    if name in _SUBMODULES:
        value = _importlib.import_module("dkit." + name)
    elif name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(_importlib.import_module(module), attr)
    elif name in _ERRORS:
        value = getattr(_importlib.import_module("dkit._C"), name)
    else:
        raise AttributeError(f"module 'dkit' has no attribute {name!r}")
    globals()[name] = value  # resolve once
    return value


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | set(_LAZY) | _ERRORS)


# ------------------------------------------------------------------------------------------
# torch.ops.dkit (Note [When the ops are registered] in dkit/_torch_library.py)


def _register_with_torch():
    from dkit import _torch_library

    _torch_library.sync()


class _AfterImport:
    """A one-shot import hook: lets the import of module `name` run, then calls `callback()`.
    Used for torch (dkit's ops become torch ops) and torch._dynamo (Note [dkit ops under
    torch.compile] in dkit/_torch_library.py), so that `import dkit` imports neither."""

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        _sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RunAfter(spec.loader, self.callback)
        return spec


class _RunAfter:
    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name):  # everything else of the real loader (get_resource_reader, ...)
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback()


def _after_import(name, callback):
    """callback() now if module `name` is imported, else right after its import (once)."""
    if _sys.modules.get(name) is not None:
        callback()
    elif name not in _sys.modules:  # None there means "importing it fails" (tests use it for torch)
        _sys.meta_path.insert(0, _AfterImport(name, callback))


_after_import("torch", _register_with_torch)
