"""dkit_build — the one description of how dkit's C and C++ are compiled.

The Makefile and setup.py both build the core library, the extension dkit._C and the torch
reader (dkit._torch_reader, dkit._torch_kernel); `make python` even hands setup.py the Makefile's
objects (DKIT_CORE_OBJECTS), which is only right while both compile them the same way. So the
folders, the flags and the torch build are written here, once:

  - setup.py imports this module (it sits beside setup.py, which puts this folder on sys.path).
  - The Makefile includes `$(BUILD)/dkit_build.mk`, which `python3 dkit_build.py make-vars`
    writes (again whenever this file changes): CORE_DIRS, INCS, WARN, BASE, OPT, ... Its
    sanitizer builds add their own flags (-O1 -g -fsanitize=...) to these.
  - torch's part depends on the installed torch, so it is asked for when a torch extension is
    built, never on reading the Makefile (importing torch takes seconds): setup.py calls
    torch_cxx(); the Makefile's sanitizer packages run `python3 dkit_build.py torch-flags`.

Standard library only, Python 3.10 on: it runs under every Python that builds dkit (Debian 12's
3.11, Debian 13's 3.13, unstable's 3.14). It is a build file: the sdist carries it (MANIFEST.in),
an installed dkit does not.
tests/python/test_packaging.py checks that the Makefile and setup.py compile with what is here,
and that neither holds a copy of it.
"""

import os
import shlex
import sys

# The core library is every .c file under these folders: adding an op or a kernel file touches
# no list.
CORE_DIRS = ("csrc/common", "csrc/cpu", "ops")
# Its headers sit beside its sources, and everything that builds on the core (the extension,
# the tests, the GPU kernels, a vendor's backend) includes them from these same folders.
INCLUDE_DIRS = CORE_DIRS

# C11, with the GNU and POSIX declarations the core uses (threads, dlopen, mmap and madvise), for
# the core and everything built with it.
C_DIALECT = ("-std=c11", "-D_GNU_SOURCE")
STRICT_WARN = ("-Wall", "-Wextra", "-Werror")
# A kernel or a backend hook has the signature its table gives it, used or not.
WARN = STRICT_WARN + ("-Wno-unused-parameter",)
# Every build of the core, optimised or sanitized: a shared library's code, with OpenMP's
# parallel loops (dk_parallel.c).
BASE = C_DIALECT + ("-fPIC", "-fopenmp") + tuple("-I" + d for d in INCLUDE_DIRS) + WARN
# The optimised build (build/libdkit.so, and the one pip installs): x86-64-v2 (SSE4.2) is the
# baseline the CPU kernels' vectors are written for (dk_vec.h; wider spans are chosen at run time,
# Note [AVX2 spans]), and only the public API (DK_API, dk_export.h) is exported.
OPT = ("-O3", "-march=x86-64-v2", "-fvisibility=hidden")
CORE_CFLAGS = BASE + OPT
CORE_LDLIBS = ("-fopenmp", "-ldl", "-lpthread", "-lm")

# dkit._C, from csrc/python/*.c. No -D_GNU_SOURCE: Python.h comes first in every file
# (test_architecture.py) and its pyconfig.h defines what CPython was built with. setuptools adds
# -fPIC and CPython's own flags; the Makefile's sanitizer builds add -fPIC and theirs.
EXT_INCLUDE_DIRS = INCLUDE_DIRS + ("csrc/python",)
EXT_CFLAGS = ("-std=c11", "-fopenmp") + WARN
EXT_OPT = ("-O2",)
EXT_LDFLAGS = ("-fopenmp",)

# The torch extensions (Note [torch reader] in csrc/python/dk_pytorch.h; Note [Why dkit has its
# own kernel holder] in csrc/python/dk_torch_kernel.cpp): (module, source, the headers it reads
# besides the include folders'). Both are optional: dkit works the same without them.
TORCH_EXTS = (
    ("dkit._torch_reader", "csrc/python/dk_pytorch.cpp", ("csrc/python/dk_pytorch.h", "csrc/common/dk_dlpack.h")),
    ("dkit._torch_kernel", "csrc/python/dk_torch_kernel.cpp", ()),
)
# The folders they include from: the core's (dk_dlpack.h) and the extension's.
TORCH_EXT_INCLUDE_DIRS = ("csrc/common", "csrc/cpu", "csrc/python")
TORCH_EXT_OPT = ("-O2",)
TORCH_LIBS = ("torch_python", "torch_cpu", "c10")


class TorchUnavailable(Exception):
    """No torch extension can be built here; the message says why."""


def torch_cxx_std(cpp_extension_source):
    """The C++ standard torch compiles its own extensions with, given the text of
    torch/utils/cpp_extension.py (the one place torch states it): its headers need it. C++17 up
    to torch 2.11 (older ones say C++14, and dkit's C++ needs 17), C++20 after (torch 2.14's
    headers use <compare> and concepts)."""
    return "c++20" if "-std=c++20" in cpp_extension_source else "c++17"


class TorchCxx:
    """How to compile and link a C++ extension against the installed torch."""

    def __init__(self, torch_dir, abi, cxx_std):
        # -isystem: dkit's warnings are errors, torch's headers' are not ours to fix.
        self.system_include_dirs = (
            os.path.join(torch_dir, "include"),
            os.path.join(torch_dir, "include", "torch", "csrc", "api", "include"),
        )
        self.library_dir = os.path.join(torch_dir, "lib")  # pip's torch; Debian's libraries are on the default path
        # The compiler flags that depend on torch, the optimisation left to the caller.
        self.cxxflags = (f"-std={cxx_std}", f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}") + STRICT_WARN + tuple(
            a for d in self.system_include_dirs for a in ("-isystem", d)
        )
        self.libraries = TORCH_LIBS
        self.rpath = (f"-Wl,-rpath,{self.library_dir}",)

    def compile_flags(self):
        """Everything a direct compiler command needs before the source (setup.py passes the
        include folders to setuptools instead)."""
        return self.cxxflags + tuple("-I" + d for d in TORCH_EXT_INCLUDE_DIRS)

    def link_flags(self):
        """Everything after the source: libraries last, so that --as-needed keeps them."""
        return ("-L" + self.library_dir,) + self.rpath + tuple("-l" + lib for lib in self.libraries)


def torch_cxx():
    """TorchCxx for the torch this Python imports; TorchUnavailable when there is none or its
    C++ headers are not installed. torch is imported (as its own cpp_extension does) for its
    folder and its C++ ABI; cpp_extension itself is read, not imported, for the standard:
    importing it probes for CUDA and ROCm and says so."""
    try:
        import torch
    except ImportError as e:
        raise TorchUnavailable(f"torch is not importable ({e})") from None
    torch_dir = os.path.dirname(torch.__file__)
    if not os.path.isfile(os.path.join(torch_dir, "include", "torch", "csrc", "autograd", "python_variable.h")):
        raise TorchUnavailable(f"torch {torch.__version__}'s C++ headers are not installed (Debian: libtorch-dev)")
    try:
        with open(os.path.join(torch_dir, "utils", "cpp_extension.py"), encoding="utf-8") as f:
            std = torch_cxx_std(f.read())
    except OSError:
        std = torch_cxx_std("")
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)
    return TorchCxx(torch_dir, abi, std)


# -- for the Makefile ---------------------------------------------------------------------------


def make_vars():
    """The Makefile's variables (name, words), in the order they are written."""
    return (
        ("CORE_DIRS", CORE_DIRS),
        ("INCLUDE_DIRS", INCLUDE_DIRS),
        ("INCS", tuple("-I" + d for d in INCLUDE_DIRS)),
        ("C_DIALECT", C_DIALECT),
        ("WARN", WARN),
        ("BASE", BASE),
        ("OPT", OPT),
        ("CORE_CFLAGS", CORE_CFLAGS),
        ("CORE_LDLIBS", CORE_LDLIBS),
        ("EXT_CFLAGS", EXT_CFLAGS),
        ("EXT_INCS", tuple("-I" + d for d in EXT_INCLUDE_DIRS)),
        ("EXT_LDFLAGS", EXT_LDFLAGS),
        # module:source pairs, and every file they are built from (the sanitizer packages' rule)
        ("TORCH_EXTS", tuple(f"{m.rpartition('.')[2]}:{src}" for m, src, _ in TORCH_EXTS)),
        ("TORCH_EXT_DEPS", tuple(f for _, src, deps in TORCH_EXTS for f in (src, *deps))),
    )


def _make_words(words):
    for w in words:
        if any(c in w for c in " \t$#\\"):
            raise ValueError(f"dkit_build.py: {w!r} cannot be written as one Make word")
    return " ".join(words)


def _main(argv):
    usage = "usage: dkit_build.py make-vars | torch-flags"
    if argv == ["make-vars"]:
        print("# Written by `python3 dkit_build.py make-vars` from dkit_build.py: edit that, not this.")
        for name, words in make_vars():
            print(f"{name} := {_make_words(words)}")
        return 0
    if argv == ["torch-flags"]:
        # Shell assignments for `eval`: empty when there is no torch to build against (and why, on
        # stderr), which the Makefile reads as "no torch extension here".
        try:
            t = torch_cxx()
            cflags, ldflags = t.compile_flags(), t.link_flags()
        except TorchUnavailable as e:
            print(f"dkit_build.py: no torch extensions: {e}", file=sys.stderr)
            cflags = ldflags = ()
        print(f"TORCH_CXXFLAGS={shlex.quote(' '.join(cflags))}")
        print(f"TORCH_LDFLAGS={shlex.quote(' '.join(ldflags))}")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
