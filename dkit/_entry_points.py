"""Backends that installed packages declare: the entry-point group "dkit.backends".

Note [Backends from entry points]
A vendor's package makes its backend available without the user calling anything, by declaring
it in its metadata:

    [project.entry-points."dkit.backends"]
    myvendor = "myvendor_dkit:LIBRARY"     # an object: a library's path (str or os.PathLike),
                                           # or a callable returning one
    otherdev = "otherdev_dkit"             # a module: importing it registers the backend
                                           # (it calls dkit.load_backend itself)

dkit._C loads them when it is first imported (after DKIT_BACKENDS: Note [A failing backend never
breaks the import] in csrc/python/dk_pybackends_at_import.c), so `import dkit` stays free of
them and of importlib.metadata's scan of the installed packages: the scan runs once, when the
first op or introspection call needs the extension anyway. Entry points load in name order.
Each library records its origin ("entry point myvendor (myvendor-dkit 1.2)"), which
dkit.backends() shows; one that fails (its module raises, its path is no library, an ABI
mismatch) is reported with a RuntimeWarning and a row in dkit.backends() saying why, and the
others load: a broken package never breaks dkit. A library reached both by an entry point and by
DKIT_BACKENDS (or through a symlink) loads once (Note [A library loads once]).
"""

import contextlib
import os
import sys
import types
import warnings

GROUP = "dkit.backends"


def _entry_points():
    from importlib import metadata

    eps = metadata.entry_points()
    if hasattr(eps, "select"):  # Python 3.10+
        return list(eps.select(group=GROUP))
    return list(eps.get(GROUP, ()))


def _origin(ep):
    dist = getattr(ep, "dist", None)
    return f"entry point {ep.name} ({dist.name} {dist.version})" if dist else f"entry point {ep.name}"


def _warn(message):
    with contextlib.suppress(Warning):  # warnings turned into errors must not break the import
        warnings.warn(message, RuntimeWarning, stacklevel=2)


# The origin of backends loaded while a package's entry point runs: a stack, as one entry point's
# module may import another's. Kept here, not in dkit.dispatch: the first import of dkit.dispatch
# imports dkit._C, whose initialisation runs load() below while dkit.dispatch is still half
# imported (its names not yet defined), so load() must not need it.
_ORIGIN = []


@contextlib.contextmanager
def _loading_origin(origin):
    _ORIGIN.append(origin)
    try:
        yield
    finally:
        _ORIGIN.pop()


def load_backend(path):
    """dkit.load_backend and dkit.dispatch.load_backend. Here, and importing dkit._C only when
    called, because a module named by an entry point calls it while dkit._C initialises, which
    may be during dkit.dispatch's own first import, before dkit.dispatch defines anything."""
    from dkit import _C

    return load_library(_C, path)


def load_library(_C, path):
    """dkit.load_backend(path), with the origin of the entry point being loaded, if any."""
    result = _C.load_backend(os.fspath(path), _ORIGIN[-1] if _ORIGIN else None)
    bridge = sys.modules.get("dkit._torch_library")
    if bridge is not None:
        bridge.sync()
    return result


def load(_C):
    """Loads every backend of the group; called by dkit._C at the end of its initialisation."""
    try:
        eps = _entry_points()
    except Exception as e:  # a broken metadata directory: report, go on without entry points
        _warn(f"dkit: the {GROUP} entry points could not be read: {type(e).__name__}: {e}")
        return
    for ep in sorted(eps, key=lambda e: e.name):
        origin = _origin(ep)
        path = ep.value
        try:
            with _loading_origin(origin):
                obj = ep.load()
                if not isinstance(obj, types.ModuleType):
                    path = obj() if callable(obj) else obj
                    if not isinstance(path, (str, bytes, os.PathLike)):
                        raise TypeError(f"{ep.value} gave {type(path).__name__}, not a library's path")
                    load_library(_C, path)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
            where = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ep.value
            _C._backend_failed(where, origin, reason)
            _warn(f"dkit: backend {ep.value} ({origin}) not loaded: {reason}")
