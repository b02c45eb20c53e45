"""dkit.compat: drop-in replacements for other libraries' RoIAlign (and MMCV's rotated-box ops,
box_iou_rotated and nms_rotated), so existing code switches to dkit by changing one import.

    from torchvision.ops import roi_align, RoIAlign      ->  from dkit.compat.torchvision import roi_align, RoIAlign
    from mmcv.ops import roi_align, RoIAlign             ->  from dkit.compat.mmcv import roi_align, RoIAlign

Each module keeps its library's signatures, defaults, outputs and exception types: malformed
boxes raise AssertionError where the library asserts, and kernel-level checks raise
RuntimeError subclasses (every dkit error derives from RuntimeError). The assertion errors are
DkitAssertionError, which is also a dkit ValueError, so `except AssertionError`,
`except ValueError` and `except RuntimeError` all keep working.

Where the originals read out of bounds or return garbage, dkit raises instead: a batch index
outside [0, N) or not an integer (DkitIndexError), a NaN or infinite coordinate
(DkitValueError), a non-positive output size (DkitValueError; torchvision returns an empty tensor
for 0 and raises RuntimeError for negative sizes). `aligned` must be a bool (NumPy's bool, 0 and
1 are taken too; DkitTypeError otherwise), where torchvision and MMCV read some other values, such
as None, by their truth value. dkit also serves bfloat16 on the CPU, which torchvision 0.14 does
not. torchvision's ps_roi_align divides 0 by a sample count of 0 for a box of no width or height
with the adaptive grid, giving NaN; dkit's gives 0 there (roi_align's rule).
"""

import importlib as _importlib

from dkit import _C


class DkitAssertionError(_C.DkitValueError, AssertionError):
    """A malformed argument where the emulated library raises AssertionError."""


_SUBMODULES = frozenset({"torchvision", "mmcv"})


def __getattr__(name):
    if name in _SUBMODULES:
        return _importlib.import_module(f"dkit.compat.{name}")
    raise AttributeError(f"module 'dkit.compat' has no attribute {name!r}")
