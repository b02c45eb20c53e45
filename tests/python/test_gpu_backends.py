"""The GPU backends as Python sees them: loaded at import when they were built, described by
dkit.backends() and dkit.show_config() with their architectures, and, on a machine without a
driver, a clear error for a tensor that claims their device (a ctypes DLPack producer claiming
CUDA memory: nothing is read through it)."""

import os
import sys

import numpy as np
import pytest

import dkit
from dkit import _C

sys.path.insert(0, os.path.dirname(__file__))
from dlpack_ctypes import CtypesProducer  # noqa: E402

PKG = os.path.dirname(dkit.__file__)
BUILT = {name: os.path.isfile(os.path.join(PKG, f"libdkit_{name}.so")) for name in ("cuda", "hip")}
KDL = {"cuda": 2, "hip": 10}  # DLPack device types: kDLCUDA, kDLROCM


def _backend(name):
    return {b.name: b for b in dkit.backends()}.get(name)


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_built_backends_are_loaded_and_described(name):
    if not BUILT[name]:
        pytest.skip(f"libdkit_{name}.so was not built (no {'nvcc' if name == 'cuda' else 'hipcc'})")
    b = _backend(name)
    assert b is not None, dkit.backends()
    assert b.path == os.path.join(PKG, f"libdkit_{name}.so")
    assert b.build and (b.build.startswith("sm_") if name == "cuda" else b.build.startswith("gfx")), b
    assert f"built for {b.build}" in str(b)
    assert dkit.dispatch.table("roi_align_forward")  # the kernels are registered under its key
    assert name in dkit.show_config(file=open(os.devnull, "w"))["gpu_archs"]
    if not b.available:
        assert b.reason and f"{name}" in str(b) and "unavailable: " + b.reason in str(b)
        assert b.devices == 0


# Every op the GPU backends serve with kernels of their own; the rest of dkit's ops are composites.
GPU_KERNELS = ("roi_align_forward", "roi_align_backward", "nms", "soft_nms", "box_iou", "nms_rotated", "box_iou_rotated")


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_built_backends_have_a_kernel_for_every_op(name):
    """The project's rule: an op is done when every backend dkit builds runs it. Each op with a
    CPU kernel has one of the GPU backend's own (registered at load, without a driver), and
    every composite over such ops serves the backend too."""
    if not BUILT[name]:
        pytest.skip(f"libdkit_{name}.so was not built (no {'nvcc' if name == 'cuda' else 'hipcc'})")
    for op in dkit.dispatch.ops():
        slots = {s.key: s for s in dkit.dispatch.table(op)}
        cpu, gpu = slots.get("cpu"), slots.get(name)
        assert gpu is not None and gpu.kernel, (op, name, slots)
        if cpu.provenance == "kernel":
            assert gpu.provenance == "kernel" and gpu.kernel == f"dk_{op}_{name}", (op, gpu)
            assert op in GPU_KERNELS, op  # a new op: list it above once it has GPU kernels
        else:
            assert gpu.provenance == cpu.provenance and gpu.kernel == cpu.kernel, (op, gpu, cpu)
    assert set(GPU_KERNELS) <= set(dkit.dispatch.ops())


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_a_tensor_on_an_unavailable_backend_gets_its_reason(name):
    b = _backend(name)
    if b is None or b.available:
        pytest.skip(f"{name}: not built, or a real device is present")
    dev = (KDL[name], 0)
    x = CtypesProducer(np.zeros((1, 2, 4, 4), np.float32), dev)
    rois = CtypesProducer(np.array([[0, 0, 0, 3, 3]], np.float32), dev)
    out = CtypesProducer(np.zeros((1, 2, 2, 2), np.float32), dev)
    with pytest.raises(dkit.DkitError) as e:
        _C.ops.roi_align_forward(x, rois, out, None, None, 2, 2, 1.0, 2, 1, True)
    assert f"backend '{name}' is unavailable: {b.reason}" in str(e.value)


def test_gpu_backends_can_be_switched_off():
    import subprocess

    code = "import dkit; print(sorted(b.name for b in dkit.backends()))"
    env = dict(os.environ, DKIT_GPU_BACKENDS="0", PYTHONPATH=os.path.dirname(PKG))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "['cpu']", r.stdout + r.stderr
