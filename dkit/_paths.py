"""Where dkit's headers and core library are, for building backends and op packages against it.

    cc -shared -fPIC my_backend.c -I"$(python -c 'import dkit; print(dkit.get_include())')" \\
       "$(python -c 'import dkit; print(dkit.get_library())')" -o libmy_backend.so

Both work in an installed package (setup.py puts include/ and libdkit.so next to dkit._C) and in
a source checkout after `make python` (setup.py build_ext --inplace does the same there).
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_ROOT = os.path.dirname(_HERE)


def get_include():
    """The directory holding dkit.h and every other public header (core, kernels/, ops)."""
    packaged = os.path.join(_HERE, "include")
    if os.path.isfile(os.path.join(packaged, "dkit.h")):
        return packaged
    # A source checkout that has not been built: csrc/common has dkit.h, but an op's header
    # (ops/*.h) lives elsewhere; building in place (make python) fills dkit/include with both.
    source = os.path.join(_SOURCE_ROOT, "csrc", "common")
    if os.path.isfile(os.path.join(source, "dkit.h")):
        return source
    raise FileNotFoundError(f"dkit's headers are missing: neither {packaged} nor {source} has dkit.h")


def get_library():
    """The absolute path of libdkit.so, the core library every backend links."""
    packaged = os.path.join(_HERE, "libdkit.so")
    if os.path.isfile(packaged):
        return packaged
    built = os.path.join(_SOURCE_ROOT, "build", "libdkit.so")  # `make lib` in a source checkout
    if os.path.isfile(built):
        return built
    raise FileNotFoundError(f"libdkit.so is missing: neither {packaged} nor {built} exists (run `make python`)")
