"""dkit.ops: the operators, framework-neutral.

    y = dkit.ops.roi_align(x, boxes, 7, spatial_scale=0.25)   # torch, NumPy or any DLPack producer

Each op is written once, in its family's module under dkit/_ops/ (argument normalisation,
bounds, output shapes, forward and backward), against the framework protocol of
dkit/_frameworks/ (allocation, autograd), and re-exported here: these are the very functions,
with no wrapper frame in between.

Note [The public ops are the declared ones]
There is no list to keep: every function of a module of dkit/_ops/ that declares its torch op
with @torch_op is a public op, and appears here (and in __all__) by its own name, module by
module in name order and within a module in the order of definition. An op added by the README's
steps is therefore exported, registered as a torch op, wrapped for torch.fx and polyfilled for
torch.compile without an edit anywhere else.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from dkit import _ops


def _declared():
    found = []
    for info in sorted(_pkgutil.iter_modules(_ops.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue  # helpers (_args)
        module = _importlib.import_module(f"dkit._ops.{info.name}")
        fns = [v for v in vars(module).values()
               if hasattr(v, "__dkit_torch_schemas__") and v.__module__ == module.__name__]  # fmt: skip
        found += sorted(fns, key=lambda f: f.__code__.co_firstlineno)
    return found


_PUBLIC = _declared()
globals().update({fn.__name__: fn for fn in _PUBLIC})
__all__ = [fn.__name__ for fn in _PUBLIC]
del _PUBLIC
