"""examples/vendor_backend as a vendor ships it (issue 23): the package dkit-myvendor is built in
a clean temporary directory against the dkit under test, installed into a virtual environment
(pip, no index, no network), and a script run there checks what a user of it sees:

  - the backend was found through the package's entry point (dkit.backends() and its origin);
  - roi_align on myvendor.Tensor runs on the package's own kernel (table and profile), with the
    CPU's values, and gives a myvendor.Tensor;
  - nms, soft_nms and box_iou run through dkit's CPU fallback ('fallback (cpu copy)' in the
    table, '(cpu copy)' in the profile, the library's copies counted), with the CPU's results,
    as myvendor.Tensor;
  - dkit.unload_backend restores every op's table to the one of a process without the package,
    tensors made before still free their memory, and loading the library again serves it again.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dkit

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vendor_backend"
DKIT_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(dkit.__file__)))

# Every op's table and the backends, in a process: the baseline (without the package) and after
# unloading (with it).
TABLES = """
def tables():
    import dkit
    return {op: str(dkit.dispatch.table(op)) for op in sorted(dkit.dispatch.ops())}
"""

BASELINE = TABLES + """
import json, dkit
print(json.dumps({"tables": tables(), "backends": sorted(b.name for b in dkit.backends())}))
"""

CHECK = TABLES + textwrap.dedent(
    """
    import json
    import numpy as np
    import dkit

    facts = {}
    row = [b for b in dkit.backends() if b.name == "myvendor"]
    facts["backend"] = row[0]._asdict() if row else None

    import myvendor

    rng = np.random.default_rng(0)

    def slot(op):
        return {s.key: (s.provenance, s.kernel) for s in dkit.dispatch.table(op)}.get("myvendor")

    facts["slots"] = {op: slot(op) for op in ("roi_align_forward", "roi_align_backward", "nms", "soft_nms", "box_iou")}

    def close(a, b):
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-6))

    # roi_align: the package's kernel, every pool mode, float32 and float64, a box that
    # overhangs the map
    x = rng.standard_normal((2, 3, 11, 9))
    boxes = np.array([[0, 0, 0, 8, 10], [1, 1.5, 2.25, 4, 6.5], [0, -2, -1, 12, 13], [1, 3, 1, 3.5, 1.2]])
    calls = [(dtype, mode) for dtype in ("float32", "float64") for mode in ("avg", "max")]
    with dkit.profile() as prof:
        ys = [
            dkit.ops.roi_align(myvendor.tensor(x.astype(d)), myvendor.tensor(boxes.astype(d)), (3, 2), 0.5, 2, m, True)
            for d, m in calls
        ]
    wants = [dkit.ops.roi_align(x.astype(d), boxes.astype(d), (3, 2), 0.5, 2, m, True) for d, m in calls]
    facts["roi_align"] = [(type(y).__name__, y.dtype, close(y.numpy(), w)) for y, w in zip(ys, wants)]
    facts["roi_align_profile"] = sorted({r.backend for r in prof.rows if r.op == "roi_align_forward"})
    # a batch index out of range is refused by the package's kernel, before it reads the input
    bad = boxes.astype("float32").copy()
    bad[1, 0] = 7
    try:
        dkit.ops.roi_align(myvendor.tensor(x.astype("float32")), myvendor.tensor(bad), 2)
        facts["bad_index"] = None
    except dkit.DkitIndexError as e:
        facts["bad_index"] = str(e)

    # nms, soft_nms and box_iou: the CPU fallback, through copies
    xy = rng.uniform(0, 50, (120, 2))
    b = np.concatenate([xy, xy + rng.uniform(1, 20, (120, 2))], 1).astype("float32")
    s = rng.random(120).astype("float32")
    B, S = myvendor.tensor(b), myvendor.tensor(s)
    before = myvendor.counters()
    with dkit.profile() as prof:
        keep = dkit.ops.nms(B, S, 0.5)
        dets, inds = dkit.ops.soft_nms(B, S, 0.3, 0.5, 1e-3, "gaussian")
        iou = dkit.ops.box_iou(B, myvendor.tensor(b[:17]))
    after = myvendor.counters()
    want_keep = dkit.ops.nms(b, s, 0.5)
    want_dets, want_inds = dkit.ops.soft_nms(b, s, 0.3, 0.5, 1e-3, "gaussian")
    want_iou = dkit.ops.box_iou(b, b[:17])
    facts["fallback"] = {
        "types": sorted({type(t).__name__ for t in (keep, dets, inds, iou)}),
        "nms": np.array_equal(keep.numpy(), want_keep),
        "soft_nms": np.array_equal(dets.numpy(), want_dets) and np.array_equal(inds.numpy(), want_inds),
        "box_iou": np.array_equal(iou.numpy(), want_iou),
        "kept": int(keep.shape[0]),
        "profile": sorted({(r.op, r.backend) for r in prof.rows}),
        "h2d": after["h2d"] - before["h2d"],
        "d2h": after["d2h"] - before["d2h"],
    }

    # what argument normalisation computes goes through the host (boxes as a list, categories
    # of another dtype), its results back on the device
    x32, parts = x.astype("float32"), [boxes[:2, 1:].astype("float32"), boxes[2:, 1:].astype("float32")]
    yl = dkit.ops.roi_align(myvendor.tensor(x32), [myvendor.tensor(p) for p in parts], 2)
    cats = rng.integers(0, 3, 120).astype("float32")
    bk = dkit.ops.batched_nms(B, S, myvendor.tensor(cats), 0.5)
    facts["host_paths"] = [
        (type(yl).__name__, close(yl.numpy(), dkit.ops.roi_align(x32, parts, 2))),
        (type(bk).__name__, np.array_equal(bk.numpy(), dkit.ops.batched_nms(b, s, cats, 0.5))),
    ]

    # unloading restores every table; loading again serves the device again
    kept_alive = myvendor.tensor(b)
    frees = myvendor.counters()["free"]
    dkit.unload_backend("myvendor")
    facts["unloaded"] = {"tables": tables(), "backends": sorted(b.name for b in dkit.backends())}
    try:
        dkit.ops.nms(B, S, 0.5)
        facts["call_after_unload"] = None
    except dkit.DkitError as e:
        facts["call_after_unload"] = type(e).__name__
    del kept_alive
    facts["freed_after_unload"] = myvendor.counters()["free"] - frees
    dkit.load_backend(myvendor.library())
    facts["reloaded_slot"] = slot("roi_align_forward")
    facts["reloaded_nms"] = np.array_equal(dkit.ops.nms(B, S, 0.5).numpy(), want_keep)
    dkit.unload_backend("myvendor")
    facts["unloaded_again"] = tables()
    print(json.dumps(facts))
    """
)


def _run(python, script, env, cwd):
    proc = subprocess.run([str(python), "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{python} failed:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(venv python, env): dkit-myvendor built from a clean copy and installed with pip."""
    for module in ("venv", "pip", "setuptools"):
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode:
            pytest.skip(f"{sys.executable} has no {module} (Debian: python3-venv, python3-pip)")
    root = tmp_path_factory.mktemp("vendor")
    pkg = root / "dkit-myvendor"
    shutil.copytree(EXAMPLE, pkg, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    # The dkit under test (a checkout or an install), seen from the venv as from here.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dkit_under_test.pth").write_text(DKIT_PARENT + "\n")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    env.pop("DKIT_BACKENDS", None)
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", str(pkg)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    return python, env, root


def test_the_installed_package_serves_every_op_and_unloads(venv):
    python, env, root = venv
    # the baseline: this interpreter, which has no dkit-myvendor, on the same dkit
    path = os.pathsep.join(p for p in (DKIT_PARENT, env.get("PYTHONPATH")) if p)
    baseline = _run(sys.executable, BASELINE, dict(env, PYTHONPATH=path), root)
    assert "myvendor" not in baseline["backends"]
    facts = _run(python, CHECK, env, root)

    # discovered through the entry point, with its origin
    backend = facts["backend"]
    assert backend is not None, "dkit.backends() has no myvendor"
    assert backend["available"] and backend["key"] == "myvendor"
    assert backend["path"].endswith(os.path.join("myvendor", "libdkit_myvendor.so"))
    assert backend["origin"] == "entry point myvendor (dkit-myvendor 0.1.0)"

    # the package's own kernel for roi_align_forward, the CPU fallback for the rest
    slots = facts["slots"]
    assert slots["roi_align_forward"] == ["kernel", "myvendor_roi_align_forward"]
    for op in ("roi_align_backward", "nms", "soft_nms", "box_iou"):
        assert slots[op][0] == "fallback (cpu copy)", (op, slots[op])

    assert facts["roi_align"] == [
        ["Tensor", "float32", True],
        ["Tensor", "float32", True],
        ["Tensor", "float64", True],
        ["Tensor", "float64", True],
    ]
    assert facts["roi_align_profile"] == ["myvendor"]  # its kernel: no '(cpu copy)' row
    assert facts["bad_index"] is not None and "myvendor" in facts["bad_index"]

    fb = facts["fallback"]
    assert fb["types"] == ["Tensor"]
    assert fb["nms"] and fb["soft_nms"] and fb["box_iou"]
    assert 0 < fb["kept"] < 120
    assert fb["profile"] == [["box_iou", "myvendor (cpu copy)"], ["nms", "myvendor (cpu copy)"],
                             ["soft_nms", "myvendor (cpu copy)"]]  # fmt: skip
    # copied in (boxes and scores) and out (the results), by the library's own copies
    assert fb["h2d"] >= 3 and fb["d2h"] >= 6

    assert facts["host_paths"] == [["Tensor", True], ["Tensor", True]]

    # unloading: every table as in a process without the package, and again after a reload
    assert facts["unloaded"]["backends"] == baseline["backends"]
    assert facts["unloaded"]["tables"] == baseline["tables"]
    assert facts["unloaded_again"] == baseline["tables"]
    assert facts["call_after_unload"] is not None
    assert facts["freed_after_unload"] == 1
    assert facts["reloaded_slot"] == ["kernel", "myvendor_roi_align_forward"]
    assert facts["reloaded_nms"]
