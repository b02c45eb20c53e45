"""Builds dkit-myvendor's two C pieces against the installed dkit (see pyproject.toml):

  myvendor/libdkit_myvendor.so   the backend library dkit loads (csrc/myvendor.c): plain C that
                                 includes dkit's public headers and links libdkit.so, nothing of
                                 Python's, so C programs load it too (check_myvendor.c)
  myvendor/_tensor.*.so          the Python extension with the tensor type (csrc/tensor.c)

Both link the libdkit.so that `import dkit` loads (its directory recorded as rpath): a process
must have one registry.
"""

import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

import dkit

LIBDIR = os.path.dirname(dkit.get_library())
COMMON = dict(
    include_dirs=[dkit.get_include()],
    library_dirs=[LIBDIR],
    libraries=["dkit"],
    runtime_library_dirs=[LIBDIR],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-Wall", "-Wextra"],
)
BACKEND = "myvendor.libdkit_myvendor"


class BuildExt(build_ext):
    def get_ext_filename(self, name):
        # The backend library is no Python module: a plain library name, without the ABI tag.
        # (setuptools asks with the full name or with its last part.)
        filename = super().get_ext_filename(name)
        if name.split(".")[-1] == BACKEND.split(".")[-1]:
            filename = filename[: -len(sysconfig.get_config_var("EXT_SUFFIX"))] + ".so"
        return filename

    def get_export_symbols(self, ext):
        return [] if ext.name == BACKEND else super().get_export_symbols(ext)


setup(
    ext_modules=[
        Extension(BACKEND, ["csrc/myvendor.c"], **COMMON),
        Extension("myvendor._tensor", ["csrc/tensor.c"], **COMMON),
    ],
    cmdclass={"build_ext": BuildExt},
)
