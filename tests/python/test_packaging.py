"""Packaging: `pip install --no-build-isolation .` into a fresh venv gives a working dkit outside
the source tree: the extension, the core library beside it, the headers a backend builds with,
the GPU backends that were built, and (where torch's C++ headers are installed) the torch reader.

The install itself is `make test-installed`'s (and test-python-noreader's, and the Debian 13
suite's): they install dkit into a fresh venv and run this whole suite against that copy, from
outside the source tree (DKIT_IMPORT_INSTALLED=1). The tests marked installed_only check what
only an installed copy shows; against the in-place build they skip and say where they run.

The others check that the build is described once (Note [One description of the build] in the
Makefile): the Makefile and setup.py compile with dkit_build.py's flags, and neither holds a
copy of them."""

import ast
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile

import pytest

from conftest import INSTALLED, ROOT, load_dkit_build

installed_only = pytest.mark.skipif(
    not INSTALLED, reason="checks an installed copy: make test-installed, test-python-noreader and test-debian13 run it"
)


@installed_only
def test_the_installed_package_is_the_one_under_test():
    import dkit

    here = os.path.dirname(dkit.__file__)
    assert "site-packages" in here, here
    assert not os.path.realpath(here).startswith(os.path.realpath(ROOT) + os.sep + "dkit"), here
    assert sys.prefix != sys.base_prefix, "not a venv"  # the fresh venv make test-installed made


@installed_only
def test_the_headers_and_the_core_library_are_installed():
    import dkit

    here = os.path.dirname(dkit.__file__)
    assert os.path.isfile(os.path.join(dkit.get_include(), "dkit.h"))
    assert os.path.isfile(os.path.join(dkit.get_include(), "kernels", "roi_align_math.h"))
    assert os.path.isfile(os.path.join(dkit.get_include(), "dk_determinism.h"))
    assert dkit.get_library() == os.path.join(here, "libdkit.so") and os.path.isfile(dkit.get_library())
    assert not [h for h in os.listdir(dkit.get_include()) if h.endswith("_private.h")]


@installed_only
def test_the_gpu_backends_built_are_installed():
    import dkit

    here = os.path.dirname(dkit.__file__)
    built = os.environ.get("DKIT_GPU_LIBS_BUILT", "")
    for name in built.split():  # the Makefile says which it built (make test-installed)
        assert os.path.isfile(os.path.join(here, name)), name
        assert any(b.path == os.path.join(here, name) for b in dkit.backends()), (name, dkit.backends())


@installed_only
def test_ops_run_from_the_installed_copy():
    import numpy as np

    import dkit

    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    y = dkit.ops.roi_align(x, np.array([[0, 0, 0, 4, 4]], np.float32), 1, 1.0, 1, "avg", True)
    assert y.shape == (1, 1, 1, 1) and abs(float(y[0, 0, 0, 0]) - 13.5) < 1e-5, y
    torch = pytest.importorskip("torch")
    t = dkit.ops.roi_align(torch.from_numpy(x), torch.tensor([[0.0, 0, 0, 4, 4]]), 1, 1.0, 1)
    assert abs(t.item() - 13.5) < 1e-5


@installed_only
def test_the_torch_reader_is_installed_where_torch_headers_are():
    torch = pytest.importorskip("torch")
    import dkit
    from dkit import _C

    headers = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "autograd", "python_variable.h")
    if not os.path.isfile(headers):
        pytest.skip("torch's C++ headers are not installed: no reader to build")
    here = os.path.dirname(dkit.__file__)
    assert [f for f in os.listdir(here) if f.startswith("_torch_reader")], os.listdir(here)
    state = _C._torch_reader()
    if os.environ.get("DKIT_TORCH_READER") == "0":
        assert state is None  # built, and not loaded (make test-python-noreader)
    else:
        assert state is True


@installed_only
def test_the_build_description_is_not_installed():
    import dkit

    # a build file: the sdist carries it, an installed dkit does not
    site = os.path.dirname(os.path.dirname(dkit.__file__))
    assert not os.path.exists(os.path.join(site, "dkit_build.py"))


# ------------------------------------------------------------------------------------------------
# One description of the build (Note [One description of the build] in the Makefile)


def _makefiles():
    """The Makefile and the rules it includes: the core's and the tests' (which must take every
    flag of the description from it), and the GPU backends' (which have a C++ standard, warnings
    and optimisation of their own, nvcc's and hipcc's)."""
    gpu = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "*", "rules.mk")))
    return ["Makefile", "tests/c/rules.mk", "tests/fuzz/rules.mk"], gpu


def _make_lines(path):
    """A makefile's lines, continued lines joined, comment lines left out (a comment may name a
    flag; only what make runs counts)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if not line.lstrip().startswith("#")]


def test_the_makefiles_hold_no_copy_of_the_build_description():
    b = load_dkit_build()
    # Words only dkit_build.py may write: the core's dialect, warnings, optimisation, folders and
    # include folders, and the torch build's standard, ABI and libraries.
    own = set(b.C_DIALECT + b.WARN + b.OPT + b.CORE_DIRS)
    own |= {"-I" + d for d in b.EXT_INCLUDE_DIRS + b.TORCH_EXT_INCLUDE_DIRS} | {"-l" + lib for lib in b.TORCH_LIBS}
    own_prefixes = ("-std=c++", "-D_GLIBCXX_USE_CXX11_ABI")
    # nor any of its lists, written out
    sequences = [" ".join(v) for v in (b.STRICT_WARN, b.CORE_LDLIBS, b.EXT_CFLAGS, b.BASE, b.CORE_CFLAGS)]
    # The GPU builds' own: their warnings and optimisation, and their C++ standard.
    gpu_own = set(b.WARN) | {f for f in b.OPT if not f.startswith("-march=")}
    core, gpu = _makefiles()
    found = []
    for path in core + gpu:
        words = own - gpu_own if path in gpu else own
        prefixes = own_prefixes[1:] if path in gpu else own_prefixes
        for line in _make_lines(path):
            found += [(path, w) for w in line.split() if w in words or w.startswith(prefixes)]
            found += [(path, s) for s in sequences if s in line]
    assert found == [], "dkit_build.py's flags are written here again (use its Make variables)"


def _setup_py_strings():
    """setup.py's string constants (f-strings' text included), docstrings left out."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return [n.value for n in strings if id(n) not in docs]


def test_setup_py_holds_no_copy_of_the_build_description():
    b = load_dkit_build()
    own = set(b.CORE_DIRS + b.EXT_INCLUDE_DIRS + b.TORCH_EXT_INCLUDE_DIRS + b.CORE_CFLAGS + b.CORE_LDLIBS)
    own |= set(b.EXT_CFLAGS + b.EXT_OPT + b.EXT_LDFLAGS + b.TORCH_EXT_OPT + b.TORCH_LIBS)
    own |= {x for name, source, depends in b.TORCH_EXTS for x in (name, source, *depends)}
    prefixes = ("-std=", "-D_GLIBCXX", "-march=", "-O")
    found = [s for s in _setup_py_strings() for w in s.split() if w in own or w.startswith(prefixes)]
    assert found == [], "dkit_build.py's folders or flags are written in setup.py again (use dkit_build)"


def test_the_cxx_standard_is_the_one_torch_states():
    b = load_dkit_build()
    assert b.torch_cxx_std("cflags = ['-fPIC', '-std=c++20']") == "c++20"  # torch 2.14
    assert b.torch_cxx_std("cflags = ['-fPIC', '-std=c++17']") == "c++17"
    assert b.torch_cxx_std("cflags = ['-fPIC', '-std=c++14']") == "c++17"  # torch 1.13: dkit's C++ needs 17


def _child_env():
    """The environment for a make or setup.py of the test's own: no outer make's variables or
    flags, no user CFLAGS, no sanitizer preloaded (nothing of dkit runs there), and the torch
    extensions not switched off (test-python-noreader switches them off at run time only)."""
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CFLAGS", "LD_PRELOAD", "DKIT_TORCH_READER")
    return {k: v for k, v in os.environ.items() if k not in drop}


# setup.py with setuptools.setup recording its arguments, and BuildExt._build_core recording the
# commands it would run instead of running them: what `pip install .` compiles the core with.
_SETUP_PY_PROBE = r"""
import json, os, runpy, sys
import setuptools
from setuptools.dist import Distribution

kwargs = {}
setuptools.setup = lambda **kw: kwargs.update(kw)
ns = runpy.run_path(sys.argv[1], run_name="__main__")
ran = []
build_ext = ns["BuildExt"]
build_ext._build_core.__globals__["_run"] = ran.append
cmd = build_ext(Distribution({"name": "dkit", "ext_modules": kwargs["ext_modules"]}))
cmd.initialize_options()
cmd.build_temp, cmd.force = sys.argv[2], True
os.environ.pop("DKIT_CORE_OBJECTS", None)
cmd._build_core(sys.argv[2])
exts = {e.name: {k: list(getattr(e, k)) for k in ("sources", "include_dirs", "library_dirs", "libraries",
                                                  "extra_compile_args", "extra_link_args")}
        for e in kwargs["ext_modules"]}
print(json.dumps({"commands": ran, "exts": exts}))
"""


def _setup_py_build(tmp_path):
    r = subprocess.run([sys.executable, "-c", _SETUP_PY_PROBE, os.path.join(ROOT, "setup.py"), str(tmp_path / "setup")],
                       cwd=ROOT, env=_child_env(), capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def _make_n(tmp_path, *targets):
    """The commands make would run for targets (make -n), in a build folder of the test's own,
    where make writes $(BUILD)/dkit_build.mk first (that it runs)."""
    build = str(tmp_path / "build")
    cmd = ["make", "-n", "--no-print-directory", f"BUILD={build}", f"PYTHON={sys.executable}"]
    r = subprocess.run(
        cmd + [t.format(build=build) for t in targets], cwd=ROOT, env=_child_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.path.isfile(os.path.join(build, "dkit_build.mk"))
    return build, r.stdout.replace("\\\n", " ").splitlines()


def _compile_flags(words, source):
    """The flags of a compiler command before `-c source`, without make's dependency files."""
    return [w for w in words[1 : words.index("-c")] if w not in ("-MMD", "-MP")]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_makefile_and_setup_py_compile_with_the_one_description(tmp_path):
    import sysconfig

    b = load_dkit_build()
    got = _setup_py_build(tmp_path)
    ext_suffix = sysconfig.get_config_var("EXT_SUFFIX")
    build, lines = _make_n(tmp_path, "{build}/libdkit.so", "{build}/asan-py/dkit/.torch_reader")

    # the core: every source compiled with CORE_CFLAGS by both, linked with CORE_LDLIBS by both
    setup_compiles = [c for c in got["commands"] if "-c" in c]
    assert setup_compiles, got["commands"]
    for words in setup_compiles:
        src = words[words.index("-c") + 1]
        assert _compile_flags(words, src) == list(b.CORE_CFLAGS), words
        make_line = [shlex.split(line) for line in lines if f" -c {src} -o {build}/obj/" in line]
        assert len(make_line) == 1, (src, make_line)
        assert _compile_flags(make_line[0], src) == list(b.CORE_CFLAGS), make_line
    [setup_link] = [c for c in got["commands"] if "-shared" in c]
    [make_link] = [shlex.split(line) for line in lines if f"-shared -o {build}/libdkit.so" in line]
    assert setup_link[-len(b.CORE_LDLIBS) :] == list(b.CORE_LDLIBS) == make_link[-len(b.CORE_LDLIBS) :]

    # dkit._C: setup.py's, and the sanitizer package's (-O1 -g and the sanitizer added)
    ext = got["exts"]["dkit._C"]
    assert ext["extra_compile_args"] == [*b.EXT_CFLAGS, *b.EXT_OPT]
    assert ext["include_dirs"] == list(b.EXT_INCLUDE_DIRS)
    [pysan] = [line for line in lines if f"-o {build}/asan-py/dkit/_C{ext_suffix}" in line]
    assert " ".join(b.EXT_CFLAGS) in pysan and all(f" -I{d} " in pysan for d in b.EXT_INCLUDE_DIRS), pysan

    # the torch extensions: the sanitizer package's recipe asks dkit_build.py for torch's flags
    [recipe] = [line for line in lines if "dkit_build.py torch-flags" in line]
    assert all(src in recipe for _, src, _ in b.TORCH_EXTS) and "-std=" not in recipe, recipe
    torch_exts = [got["exts"][name] for name, _, _ in b.TORCH_EXTS if name in got["exts"]]
    if not torch_exts:
        pytest.skip("no torch with C++ headers here: setup.py builds no torch extension to compare")
    script = f'eval "$("{sys.executable}" dkit_build.py torch-flags)"; echo "$TORCH_CXXFLAGS"; echo "$TORCH_LDFLAGS"'
    sh = subprocess.run(["sh", "-c", script], cwd=ROOT, env=_child_env(), capture_output=True, text=True,
                        check=True).stdout.splitlines()  # fmt: skip
    for t in torch_exts:
        compile_args = [a for a in t["extra_compile_args"] if a not in b.TORCH_EXT_OPT]
        assert compile_args + ["-I" + d for d in t["include_dirs"]] == sh[0].split(), (t, sh)
        link = ["-L" + d for d in t["library_dirs"]] + t["extra_link_args"] + ["-l" + lib for lib in t["libraries"]]
        assert link == sh[1].split(), (t, sh)
        assert any(a.startswith("-std=c++") for a in compile_args)
        assert any("_GLIBCXX_USE_CXX11_ABI" in a for a in compile_args)


@pytest.mark.slow
def test_the_sdist_carries_what_setup_py_builds_from(tmp_path):
    """`python -m build` and pip without a source tree build from the sdist: it needs the
    description and every source setup.py finds by folder (MANIFEST.in)."""
    cmd = [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path), "sdist", "-d", str(tmp_path)]
    r = subprocess.run(cmd, cwd=ROOT, env=_child_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    [sdist] = [p for p in os.listdir(tmp_path) if p.endswith(".tar.gz")]
    with tarfile.open(os.path.join(tmp_path, sdist)) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    b = load_dkit_build()
    need = {"setup.py", "dkit_build.py", "pyproject.toml"}
    for d in b.CORE_DIRS + b.EXT_INCLUDE_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, d)):
            need |= {os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if f.endswith((".c", ".h", ".cpp"))}
    need |= {f for _, src, deps in b.TORCH_EXTS for f in (src, *deps)}
    assert sorted(need - names) == []
