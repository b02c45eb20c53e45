"""Packaging for dkit: the core library libdkit.so, the extension dkit._C, the public headers.

    /usr/bin/python3 setup.py build_ext --inplace       # a source checkout (what `make python` runs)
    pip install --no-build-isolation .                  # an installed package

What is compiled, from which folders and with which flags, is dkit_build.py's (beside this
file), which the Makefile reads too (Note [One description of the build] in the Makefile); this
file says only how setuptools runs it. Both build, in this order:
  1. libdkit.so, the core, from every .c file under dkit_build.CORE_DIRS with
     dkit_build.CORE_CFLAGS, the flags of the Makefile's build/libdkit.so; it goes next to the
     extension (dkit/libdkit.so). `make python` sets DKIT_CORE_OBJECTS to the objects it compiled
     for build/libdkit.so, which are then only linked here.
  2. dkit._C from csrc/python/*.c, linked to that libdkit.so with rpath $ORIGIN, so the one
     copy of the registry beside it is the one every part of the process sees; and, where torch's
     C++ headers are installed, dkit._torch_reader and dkit._torch_kernel (optional;
     dkit_build.TORCH_EXTS, compiled with dkit_build.torch_cxx()'s flags).
  3. the GPU backends libdkit_cuda.so and libdkit_hip.so, copied next to _C from the folder
     DKIT_GPU_LIBS names when they are there (`make python` passes build/, where the Makefile
     builds them with nvcc and hipcc: csrc/gpu/rules.mk with csrc/cuda/ and csrc/hip/). setup.py does
     not compile them itself: that takes nvcc or hipcc, their architecture flags and a minute or more per
     backend, which the Makefile already handles with its dependency tracking; a plain
     `pip install .` ships none (`make gpu && DKIT_GPU_LIBS=build pip install .` ships them).
  4. dkit/include/: the public headers (csrc/common/*.h, csrc/cpu/*.h, ops/*.h flat, and
     csrc/common/kernels/*.h under kernels/; never the core's *_private.h), so a backend builds
     with -I$(python -c 'import dkit; print(dkit.get_include())').

setuptools only; nothing else is needed to build (numpy and torch are optional at run time).
dkit_build.py is a build file: the sdist carries it (MANIFEST.in), the installed package does not.
"""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.chdir(ROOT)  # the flags and source lists below are relative to the repository root
# dkit_build.py sits beside this file, whose folder need not be on sys.path: pip runs it in a
# process of its own (setuptools.build_meta) whose sys.path[0] is pip's.
sys.path.insert(0, ROOT)
import dkit_build  # noqa: E402  (the one description of the build)


def _rel(*parts):
    return os.path.join(*parts)


def _read_version():
    with open(os.path.join(ROOT, "csrc", "common", "dk_export.h"), encoding="utf-8") as f:
        m = re.search(r'^#define\s+DK_VERSION_STRING\s+"([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("setup.py: DK_VERSION_STRING not found in csrc/common/dk_export.h")
    return m.group(1)


def _core_sources():
    """Every .c file under dkit_build.CORE_DIRS, sorted, as the Makefile finds them."""
    out = []
    for d in dkit_build.CORE_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, d)):
            out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if f.endswith(".c")]
    return sorted(out)


def _walk_headers(folder):
    out = []
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, folder)):
        out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if f.endswith(".h")]
    return out


def _glob(folder, suffix):
    path = os.path.join(ROOT, folder)
    if not os.path.isdir(path):
        return []
    return sorted(_rel(folder, n) for n in os.listdir(path) if n.endswith(suffix))


# The public headers and where they go under dkit/include/. ops/*.h include "dk_op.h" and the op
# sources include "kernels/<op>.h", so a flat directory plus kernels/ serves both.
def _public_headers():
    """(source, installed name) of every header a backend or an op package may include: those of
    the folders the build includes from (dkit_build.INCLUDE_DIRS: the core's, the CPU runtime's
    and the ops'), flat, and the shared kernel math under kernels/. Headers named *_private.h are
    the core's own and stay out."""
    pairs = []
    for folder in dkit_build.INCLUDE_DIRS:
        pairs += [(h, os.path.basename(h)) for h in _glob(folder, ".h")]
    pairs += [(h, _rel("kernels", os.path.basename(h))) for h in _glob(_rel("csrc", "common", "kernels"), ".h")]
    return [(h, d) for h, d in pairs if not h.endswith("_private.h")]


def _replace(src, dst):
    """Copy by rename: a process that has the old libdkit.so mapped keeps its inode intact
    (copying over it in place would change the code under a running interpreter). Skipped
    only when dst is exactly the copy made last time (copy2 keeps the time to the ns)."""
    if os.path.exists(dst):
        a, b = os.stat(src), os.stat(dst)
        if a.st_mtime_ns == b.st_mtime_ns and a.st_size == b.st_size:
            return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


# Note [No private distutils API]
# The core is compiled with exactly the Makefile's flags (dkit_build.CORE_CFLAGS), not through a
# distutils compiler object: customize_compiler would add Python's own CFLAGS (-O2 -g -fwrapv
# ...), and distutils' new_compiler() is private API whose arguments changed under setuptools
# (its dry_run argument is gone from current releases: "new_compiler() got an unexpected keyword
# argument 'dry_run'"). A compiler command run directly is the same on setuptools 66 (Debian 12),
# 78 (Debian 13) and today's. The same goes for the in-place copy below (no _get_inplace_equivalent).
def _cc():
    return os.environ.get("CC", "gcc")


def _run(cmd):
    print(" ".join(cmd))
    subprocess.run(cmd, check=True)


# The GPU backends the Makefile builds (csrc/gpu/rules.mk), shipped beside
# _C when present.
GPU_LIBS = ("libdkit_cuda.so", "libdkit_hip.so")


class BuildExt(build_ext):
    """build_ext that first builds libdkit.so (and the headers) where _C will be."""

    def build_extensions(self):
        pkg_dir = os.path.dirname(self.get_ext_fullpath("dkit._C"))  # dkit/ in place, build/lib*/dkit otherwise
        os.makedirs(pkg_dir, exist_ok=True)
        lib = self._build_core(pkg_dir)
        self._copy_gpu_libs(pkg_dir)
        self._copy_headers(pkg_dir)
        for ext in self.extensions:
            ext.library_dirs = [os.path.dirname(lib)] + list(ext.library_dirs or [])
            ext.depends = list(ext.depends or []) + [lib]  # relink when the core changed
        super().build_extensions()

    # -- the core library --------------------------------------------------------------------

    def _build_core(self, pkg_dir):
        srcs = _core_sources()
        # `make python` passes the objects it has just compiled for build/libdkit.so, with the
        # same flags, so the core is compiled once; they are only linked here.
        made = os.environ.get("DKIT_CORE_OBJECTS")
        if made:
            objects = [os.path.join(made, os.path.splitext(src)[0] + ".o") for src in srcs]
            absent = [o for o in objects if not os.path.isfile(o)]
            if absent:
                raise RuntimeError(f"setup.py: DKIT_CORE_OBJECTS={made} lacks {absent}")
            return self._link_core(objects, pkg_dir, todo=False)
        obj_dir = os.path.join(self.build_temp, "core")
        headers = [h for folder in dkit_build.CORE_DIRS for h in _walk_headers(folder)]
        newest_header = max((os.path.getmtime(os.path.join(ROOT, h)) for h in headers), default=0)

        def obj_of(src):
            return os.path.join(obj_dir, os.path.splitext(src)[0] + ".o")

        def stale(src):
            o = obj_of(src)
            return (
                self.force
                or not os.path.exists(o)
                or os.path.getmtime(o) < max(os.path.getmtime(os.path.join(ROOT, src)), newest_header)
            )

        todo = [s for s in srcs if stale(s)]

        def compile_one(src):
            obj = obj_of(src)
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            _run([_cc(), *dkit_build.CORE_CFLAGS, "-c", src, "-o", obj])

        # Sources compile in parallel (the kernels dominate).
        if todo:
            with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
                for f in [pool.submit(compile_one, s) for s in todo]:
                    f.result()
        return self._link_core([obj_of(s) for s in srcs], pkg_dir, todo=bool(todo))

    def _link_core(self, objects, pkg_dir, todo):
        lib = os.path.join(pkg_dir, "libdkit.so")
        if (todo or not os.path.exists(lib) or self.force
                or any(os.path.getmtime(o) > os.path.getmtime(lib) for o in objects)):  # fmt: skip
            # -soname: _C records "libdkit.so" as its DT_NEEDED, found through its $ORIGIN rpath.
            _run([_cc(), "-shared", "-o", lib, *objects, "-Wl,-soname,libdkit.so", *dkit_build.CORE_LDLIBS])
        return lib

    # -- GPU backends --------------------------------------------------------------------------

    def _copy_gpu_libs(self, pkg_dir):
        src = os.environ.get("DKIT_GPU_LIBS")
        if not src:
            return
        for name in GPU_LIBS:
            if os.path.isfile(os.path.join(src, name)):
                _replace(os.path.join(src, name), os.path.join(pkg_dir, name))
            elif os.path.isfile(os.path.join(pkg_dir, name)):
                os.remove(os.path.join(pkg_dir, name))  # an earlier build's: not this build's to ship

    # -- headers -----------------------------------------------------------------------------

    def _copy_headers(self, pkg_dir):
        inc = os.path.join(pkg_dir, "include")
        for src, dst in _public_headers():
            target = os.path.join(inc, dst)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            src = os.path.join(ROOT, src)
            if not os.path.exists(target) or os.path.getmtime(target) < os.path.getmtime(src):
                shutil.copy2(src, target)

    def build_extension(self, ext):
        # distutils decides "up to date" on whole seconds (newer_group), so an edit made in the
        # second of the last build would be skipped; compare the exact times instead.
        target = self.get_ext_fullpath(ext.name)
        if os.path.exists(target):
            deps = [d for d in list(ext.sources) + list(ext.depends or []) if os.path.exists(d)]
            if any(os.path.getmtime(d) > os.path.getmtime(target) for d in deps):
                os.remove(target)
        if ext.name not in _OPTIONAL_EXTS:
            return super().build_extension(ext)
        # dkit._torch_reader and dkit._torch_kernel are optional (dkit works the same without
        # them, Note [torch reader]): one that does not build against the installed torch's
        # headers is reported and left out, never a failed install.
        try:
            super().build_extension(ext)
        except Exception as e:  # CompileError, LinkError, a compiler that is not there
            print(f"setup.py: WARNING: {ext.name} did not build against torch {_torch_version()} ({e}); "
                  "dkit works without it, only slower with torch tensors", file=sys.stderr)  # fmt: skip

    def copy_extensions_to_source(self):
        # setuptools builds in build/lib* even for --inplace, then copies into the source tree
        # (on whole-second times too); libdkit.so and the headers must follow _C there.
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            fullname = self.get_ext_fullname(ext.name)
            filename = self.get_ext_filename(fullname)
            package_dir = build_py.get_package_dir(fullname.rpartition(".")[0])
            if ext.name in _OPTIONAL_EXTS and not os.path.exists(os.path.join(self.build_lib, filename)):
                continue  # left out (build_extension said why)
            _replace(os.path.join(self.build_lib, filename), os.path.join(package_dir, os.path.basename(filename)))
        built = os.path.join(self.build_lib, "dkit")
        dest = os.path.dirname(self.get_ext_fullpath("dkit._C"))  # self.inplace is set again here
        _replace(os.path.join(built, "libdkit.so"), os.path.join(dest, "libdkit.so"))
        for name in GPU_LIBS:
            if os.path.isfile(os.path.join(built, name)):
                _replace(os.path.join(built, name), os.path.join(dest, name))
        for _, dst in _public_headers():
            _replace(os.path.join(built, "include", dst), os.path.join(dest, "include", dst))

    def get_outputs(self):
        # Let install/record and bdist know about the files built next to _C.
        outs = super().get_outputs()
        left_out = {self.get_ext_fullpath(n) for n in _OPTIONAL_EXTS}  # unless they were built
        outs = [o for o in outs if o not in left_out or os.path.exists(o)]
        pkg_dir = os.path.dirname(self.get_ext_fullpath("dkit._C"))
        outs.append(os.path.join(pkg_dir, "libdkit.so"))
        outs += [os.path.join(pkg_dir, n) for n in GPU_LIBS if os.path.isfile(os.path.join(pkg_dir, n))]
        outs += [os.path.join(pkg_dir, "include", dst) for _, dst in _public_headers()]
        return outs


ext = Extension(
    "dkit._C",
    sources=_glob(_rel("csrc", "python"), ".c"),
    include_dirs=list(dkit_build.EXT_INCLUDE_DIRS),
    libraries=["dkit"],
    extra_compile_args=[*dkit_build.EXT_CFLAGS, *dkit_build.EXT_OPT],
    # $ORIGIN: libdkit.so is found next to _C wherever the package is installed. No shell is
    # involved, so the dollar sign reaches the linker as is.
    extra_link_args=["-Wl,-rpath,$ORIGIN", *dkit_build.EXT_LDFLAGS],
    depends=_glob(_rel("csrc", "python"), ".h") + [h for h, _ in _public_headers()],
)


_OPTIONAL_EXTS = tuple(name for name, _, _ in dkit_build.TORCH_EXTS)


def _torch_version():
    try:
        import torch

        return torch.__version__
    except ImportError:
        return "(none)"


def _torch_reader_ext():
    """dkit._torch_reader (Note [torch reader] in csrc/python/dk_pytorch.h) and dkit._torch_kernel
    (Note [Why dkit has its own kernel holder] in csrc/python/dk_torch_kernel.cpp), when torch
    and its C++ headers are installed (dkit_build.torch_cxx() finds them, its C++ standard and
    ABI); dkit works the same without them, only slower with torch tensors and with terser errors
    from scripted models. DKIT_TORCH_READER=0 skips both."""
    if os.environ.get("DKIT_TORCH_READER", "1") == "0":
        return []
    try:
        torch_cxx = dkit_build.torch_cxx()
    except dkit_build.TorchUnavailable as e:
        print(f"setup.py: building without {' and '.join(_OPTIONAL_EXTS)}: {e}")
        return []
    return [
        Extension(
            name,
            sources=[source],
            include_dirs=list(dkit_build.TORCH_EXT_INCLUDE_DIRS),
            library_dirs=[torch_cxx.library_dir],
            libraries=list(torch_cxx.libraries),
            extra_compile_args=[*torch_cxx.cxxflags, *dkit_build.TORCH_EXT_OPT],
            extra_link_args=list(torch_cxx.rpath),
            depends=list(depends),
            language="c++",
        )
        for name, source, depends in dkit_build.TORCH_EXTS
    ]


setup(
    name="dkit",
    version=_read_version(),
    description="Vision operators (roi_align, ...) written once in C11 and served on many devices",
    long_description=open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    if os.path.exists(os.path.join(ROOT, "README.md"))
    else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["dkit", "dkit.*"]),
    ext_modules=[ext] + _torch_reader_ext(),
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.10",
    extras_require={"torch": ["torch"], "numpy": ["numpy"]},
    zip_safe=False,
)
