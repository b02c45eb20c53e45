"""The core and the extension are layered: no circles in their include graph or their call graph.

Note [No circles]
Each C file of the core has one job, and the jobs stack: leaves (status, lock, tensors, keys),
then the dispatcher and its readers, then Profile, backends and the registry, then dk_init.c on
top; the CPU runtime and the ops above the core. A circle (A calls B calls A) means two files
share one job or a piece of state sits in the wrong one, so these tests fail on any: the call
graph is read from the objects `make` built (which file defines each symbol another file uses),
the include graph from the sources.
"""

import collections
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, load_dkit_build

CORE_DIRS = load_dkit_build().CORE_DIRS


def _cycles(graph):
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _call_graph(objects):
    defined, used = {}, collections.defaultdict(set)
    for obj in objects:
        text = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind in "TDBRC":
                defined.setdefault(sym, obj)
            elif kind == "U":
                used[obj].add(sym)
    graph = collections.defaultdict(set)
    for obj, syms in used.items():
        for s in syms:
            d = defined.get(s)
            if d and d != obj:
                graph[os.path.relpath(obj, ROOT)].add(os.path.relpath(d, ROOT))
    return graph


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_core_call_graph_has_no_circles():
    sources = [s for d in CORE_DIRS for s in glob.glob(os.path.join(ROOT, d, "**", "*.c"), recursive=True)]
    objects = [os.path.join(ROOT, "build", "obj", os.path.relpath(s, ROOT)[:-2] + ".o") for s in sources]
    missing = [o for o in objects if not os.path.isfile(o)]
    assert not missing, f"`make` has not built {missing}"
    assert _cycles(_call_graph(objects)) == []


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_extension_call_graph_has_no_circles():
    objects = glob.glob(os.path.join(ROOT, "build", "temp*", "csrc", "python", "*.o"))
    assert objects, "the extension's objects (setup.py build_ext) are not in build/temp*"
    assert _cycles(_call_graph(objects)) == []


def _include_graph(dirs):
    files = {}
    for d in dirs:
        for path in glob.glob(os.path.join(ROOT, d, "**", "*.[ch]"), recursive=True):
            files[os.path.basename(path)] = path
    graph = collections.defaultdict(set)
    for name, path in files.items():
        with open(path, encoding="utf-8") as f:
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M):
                base = os.path.basename(inc)
                if base in files and base != name:
                    graph[name].add(base)
    return graph


# Note [Layers]
# Which folders a folder's sources may include from, besides its own: the core (csrc/common)
# stands on nothing; the op definitions (ops) on the core; the CPU backend (csrc/cpu) and the GPU
# kernels (csrc/gpu) on both, and the GPU kernels also on their vendors' runtime headers
# (csrc/cuda, csrc/hip), which stand on the core alone; the extension on everything but the GPU
# code, which it only loads. No library folder includes a test's header: the GPU emulation comes
# in by the tests' own -include (csrc/gpu/rules.mk).
LAYERS = {
    "csrc/common": set(),
    "ops": {"csrc/common"},
    "csrc/cpu": {"csrc/common", "ops"},
    "csrc/cuda": {"csrc/common"},
    "csrc/hip": {"csrc/common"},
    "csrc/gpu": {"csrc/common", "ops", "csrc/cuda", "csrc/hip"},
    "csrc/python": {"csrc/common", "ops", "csrc/cpu"},
}
_HEADER_HOMES = (*LAYERS, "tests/c", "tests/fuzz")


def _includes_across_layers():
    """(folder, file, included header, the header's folder) for every include that crosses a
    folder, the header found by name as the builds' flat -I paths find it."""
    homes = collections.defaultdict(set)
    for home in _HEADER_HOMES:
        for path in glob.glob(os.path.join(ROOT, home, "**", "*.*"), recursive=True):
            if path.endswith((".h", ".cuh")):
                rel = os.path.relpath(path, os.path.join(ROOT, home))
                homes[rel].add(home)
                homes[os.path.basename(path)].add(home)
    found = []
    for layer in LAYERS:
        for path in glob.glob(os.path.join(ROOT, layer, "**", "*.*"), recursive=True):
            if not path.endswith((".h", ".c", ".cu", ".cuh", ".cpp")):
                continue
            with open(path, encoding="utf-8") as f:
                for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M):
                    own = os.path.exists(os.path.join(os.path.dirname(path), inc))
                    for home in homes.get(inc) or homes.get(os.path.basename(inc)) or ():
                        if home != layer and not own:
                            found.append((layer, os.path.relpath(path, ROOT), inc, home))
    return found


def test_layers_include_only_downwards():
    wrong = [(f, inc, home) for layer, f, inc, home in _includes_across_layers() if home not in LAYERS[layer]]
    assert wrong == [], f"includes against Note [Layers]: {wrong}"
    # the check sees the crossings it allows, so it is not vacuous
    seen = {(layer, home) for layer, _, _, home in _includes_across_layers()}
    assert {("csrc/cpu", "csrc/common"), ("csrc/gpu", "ops"), ("csrc/gpu", "csrc/cuda")} <= seen, seen


def test_include_graphs_have_no_circles():
    assert _cycles(_include_graph(CORE_DIRS)) == []
    assert _cycles(_include_graph(("csrc/python",))) == []


# ------------------------------------------------------------------------------------------
# The extension builds against any CPython, not only Debian's


def _first_include(path):
    with open(path, encoding="utf-8") as f:
        m = re.search(r'^\s*#\s*include\s+([<"][^>"]+[>"])', f.read(), re.M)
    return m.group(1) if m else None


def test_every_extension_source_includes_python_h_first():
    """CPython's rule: Python.h before any system header (it defines _POSIX_C_SOURCE and friends;
    a non-Debian build's pyconfig.h refuses a second definition under -Werror). Each .c file's
    first include is Python.h or one of the extension's headers whose first include leads there."""
    here = os.path.join(ROOT, "csrc", "python")

    def leads_to_python(inc, seen=()):
        if inc == "<Python.h>":
            return True
        name = inc.strip('"')
        path = os.path.join(here, name)
        if not (inc.startswith('"') and os.path.isfile(path)) or name in seen:
            return False
        return leads_to_python(_first_include(path), (*seen, name))

    sources = sorted(glob.glob(os.path.join(here, "*.c"))) + sorted(glob.glob(os.path.join(here, "*.cpp")))
    assert sources
    bad = [os.path.basename(p) for p in sources if not leads_to_python(_first_include(p))]
    assert bad == [], f"these include something before Python.h: {bad}"


def _other_cpythons():
    """Include folders of CPythons other than the one running (pyenv's builds here), 3.10 on."""
    found = []
    for inc in sorted(glob.glob("/root/.pyenv/versions/3.*/include/python3.*")) + sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/include/python3.*"))
    ):
        m = re.search(r"python3\.(\d+)", inc)
        if m and int(m.group(1)) >= 10 and os.path.isfile(os.path.join(inc, "Python.h")) and inc not in found:
            found.append(inc)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
def test_the_extension_compiles_against_other_cpython_builds():
    incs = _other_cpythons()
    if not incs:
        pytest.skip("no other CPython build's headers here (pyenv's)")
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "python", "*.c")))
    # dkit._C's flags, setup.py's and the Makefile's sanitizer builds' (dkit_build.py)
    b = load_dkit_build()
    flags = [*b.EXT_CFLAGS, *b.EXT_OPT] + ["-I" + os.path.join(ROOT, d) for d in b.EXT_INCLUDE_DIRS]
    for inc in incs:
        cmd = ["gcc", *flags, "-I" + inc, "-fsyntax-only", *sources]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"against {inc}:\n{r.stderr[-3000:]}"


# ------------------------------------------------------------------------------------------
# Note [One grain]
# The unit of the source tree is the op family (the nms family is nms, batched_nms and soft_nms;
# the rotated family box_iou_rotated and nms_rotated), and a family has one name in every layer,
# each layer with one file-name pattern (the README's design page has the table):
#   ops/<family>.h, ops/<family>.c                    definitions and checks
#   csrc/common/kernels/<family>_math.h (+ _tmpl.h)    the per-element math, CPU and GPU alike
#   csrc/cpu/<family>/<op>_cpu.c (+ .h, <op>*_tmpl.h) the CPU kernels
#   csrc/gpu/<family>/<op>_gpu.cu (+ .h, *.cuh)        the GPU kernels (CUDA and HIP)
#   dkit/_ops/<family>.py                              the Python functions
#   tests/c/test_kernel_<family>.c, tests/c/gpu/test_gpu_<family>.c, tests/python/test_<family>*.py
#   bench/bench_<family>.py
# The families are the modules of dkit/_ops (those not private); everything else in these folders
# is the layer's own runtime (csrc/cpu/dk_*, csrc/gpu/dk_*, kernels/dk_*).

_CPU_FILE = re.compile(r"^[a-z0-9_]+(_cpu\.[ch]|_tmpl\.h)$")
_GPU_FILE = re.compile(r"^[a-z0-9_]+_gpu(\.cu|\.h|(_[a-z0-9]+)*\.cuh)$")


def _families():
    names = {os.path.splitext(n)[0] for n in os.listdir(os.path.join(ROOT, "dkit", "_ops"))}
    return sorted(n for n in names if not n.startswith("_") and n.isidentifier())


def _listing(*parts):
    path = os.path.join(ROOT, *parts)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _subdirs(*parts):
    return sorted(n for n in _listing(*parts) if os.path.isdir(os.path.join(ROOT, *parts, n)))


def test_every_layer_is_cut_by_op_family():
    families = _families()
    assert {"nms", "roi_align", "rotated"} <= set(families), families  # not vacuous
    wrong = []
    for fam in families:
        for path in (f"ops/{fam}.h", f"ops/{fam}.c", f"csrc/common/kernels/{fam}_math.h", f"bench/bench_{fam}.py",
                     f"tests/c/test_kernel_{fam}.c", f"tests/c/gpu/test_gpu_{fam}.c"):  # fmt: skip
            if not os.path.isfile(os.path.join(ROOT, path)):
                wrong.append(f"family {fam} has no {path}")
        if not glob.glob(os.path.join(ROOT, "tests", "python", f"test_{fam}*.py")):
            wrong.append(f"family {fam} has no tests/python/test_{fam}*.py")
    # nothing in these layers is cut another way
    ops = {os.path.splitext(n)[0] for n in _listing("ops")}
    kernels = {n[: -len("_math.h")] for n in _listing("csrc", "common", "kernels") if n.endswith("_math.h")}
    for layer, names in (("ops", ops), ("csrc/common/kernels/*_math.h", kernels),
                         ("csrc/cpu/*/", set(_subdirs("csrc", "cpu"))),
                         ("csrc/gpu/*/", set(_subdirs("csrc", "gpu")))):  # fmt: skip
        if names != set(families):
            wrong.append(f"{layer} is cut as {sorted(names)}, the families are {families}")
    for layer, pattern in (("cpu", _CPU_FILE), ("gpu", _GPU_FILE)):
        for fam in _subdirs("csrc", layer):
            wrong += [f"csrc/{layer}/{fam}/{n} breaks the layer's file-name pattern"
                      for n in _listing("csrc", layer, fam) if not pattern.match(n)]  # fmt: skip
        # the layer's own runtime sits beside the family folders, named dk_*
        wrong += [f"csrc/{layer}/{n} is neither a family folder nor the runtime's (dk_*)"
                  for n in _listing("csrc", layer)
                  if not os.path.isdir(os.path.join(ROOT, "csrc", layer, n))
                  and not n.startswith("dk_") and n != "rules.mk"]  # fmt: skip
    assert wrong == [], "Note [One grain]:\n" + "\n".join(wrong)
