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

from conftest import ROOT

CORE_DIRS = ("csrc/common", "csrc/cpu", "ops")


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


def test_include_graphs_have_no_circles():
    assert _cycles(_include_graph(CORE_DIRS)) == []
    assert _cycles(_include_graph(("csrc/python",))) == []
