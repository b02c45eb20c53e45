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
from dlpack_ctypes import CtypesProducer

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


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_built_backends_have_a_kernel_for_every_op(name):
    """The project's rule: an op is done when every backend dkit builds runs it. Each op with a
    CPU kernel has one of the GPU backend's own (registered at load, without a driver, from the
    kernel's own file: Note [GPU kernels register themselves]), and every composite over such
    ops serves the backend too. Read from the registry: no list of ops here."""
    if not BUILT[name]:
        pytest.skip(f"libdkit_{name}.so was not built (no {'nvcc' if name == 'cuda' else 'hipcc'})")
    own = 0
    for op in dkit.dispatch.ops():
        slots = {s.key: s for s in dkit.dispatch.table(op)}
        cpu, gpu = slots.get("cpu"), slots.get(name)
        assert gpu is not None and gpu.kernel, (op, name, slots)
        if cpu.provenance == "kernel":
            assert gpu.provenance == "kernel" and gpu.kernel == f"dk_{op}_{name}", (op, gpu)
            own += 1
        else:
            assert gpu.provenance == cpu.provenance and gpu.kernel == cpu.kernel, (op, gpu, cpu)
    assert own >= 7  # roi_align's two, nms, soft_nms, box_iou, and the rotated pair at least


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


# ------------------------------------------------------------------------------------------
# The DLPack stream handshake (Note [The consumer's stream] in csrc/python/dk_pystream.c)


class StreamRecorder(CtypesProducer):
    """A producer claiming a GPU device that records the stream each consumer asks for."""

    def __init__(self, array, device):
        super().__init__(array, device)
        self.streams = []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return super().__dlpack__(stream)


def _call_on(device):
    """roi_align_forward with every tensor claiming `device`: the handshake runs, then the call
    fails (no driver here, or the memory is host memory); returns the producers."""
    x = StreamRecorder(np.zeros((1, 2, 4, 4), np.float32), device)
    rois = StreamRecorder(np.array([[0, 0, 0, 3, 3]], np.float32), device)
    out = StreamRecorder(np.zeros((1, 2, 2, 2), np.float32), device)
    with pytest.raises(dkit.DkitError):
        _C.ops.roi_align_forward(x, rois, out, None, None, 2, 2, 1.0, 2, 1, True)
    return x, rois, out


@pytest.mark.parametrize("name, default", [("cuda", 1), ("hip", 0)])
def test_producers_are_asked_for_the_stream_dkit_runs_on(name, default):
    b = _backend(name)
    if b is None or b.available:
        pytest.skip(f"{name}: not built, or a real device is present")
    device = (KDL[name], 0)
    # the device's default stream: CUDA's legacy default stream is 1 in the protocol, ROCm's 0
    assert [p.streams for p in _call_on(device)] == [[default]] * 3
    with dkit.stream((name, 0), 0x5000):
        assert [p.streams for p in _call_on(device)] == [[0x5000]] * 3
        assert [p.streams for p in _call_on((KDL[name], 1))] == [[default]] * 3  # per device
        with dkit.stream(device, 0x6000):  # nests
            assert [p.streams for p in _call_on(device)] == [[0x6000]] * 3
        assert [p.streams for p in _call_on(device)] == [[0x5000]] * 3
    assert [p.streams for p in _call_on(device)] == [[default]] * 3  # restored


def test_stream_bad_arguments():
    class TorchStreamLike:
        cuda_stream = 0x7000

    with dkit.stream(("cuda", 0), TorchStreamLike()):
        pass
    with pytest.raises(dkit.DkitTypeError, match="stream is an int"):
        with dkit.stream(("cuda", 0), "s"):
            pass
    with pytest.raises(dkit.DkitValueError, match="no streams on device type 'cpu'"):
        with dkit.stream(("cpu", 0), 1):
            pass
    with pytest.raises(dkit.DkitValueError, match="cpu has no streams"):
        with dkit.stream((1, 0), 1):
            pass
    with pytest.raises(dkit.DkitTypeError, match="a device is"):
        with dkit.stream(3, 1):
            pass


def test_streams_are_per_thread():
    import threading

    seen = []
    with dkit.stream(("cuda", 0), 0x5000):
        t = threading.Thread(target=lambda: seen.append(_C.set_current_stream(2, 0, 0)))
        t.start()
        t.join()
        assert _C.set_current_stream(2, 0, 0x5000) == 0x5000  # still this thread's
    assert seen == [0]  # the other thread had none


def test_a_frameworks_current_stream_is_used_for_its_tensors():
    """set_stream_getter: what dkit/_torch_library.py registers for torch.Tensor (torch's current
    stream for the device), exercised with a producer type of the test's own."""
    b = _backend("cuda")
    if b is None or b.available:
        pytest.skip("cuda: not built, or a real device is present")
    asked = []

    def current_stream(device_id):
        asked.append(device_id)
        return 0x9000 + device_id

    _C.set_stream_getter(StreamRecorder, current_stream)
    try:
        assert [p.streams for p in _call_on((2, 1))] == [[0x9001]] * 3
        assert asked == [1]  # asked once: the stream is then dkit's current one, for this call
        assert _C.set_current_stream(2, 1, 0) == 0  # and only for the call: restored after it
        with dkit.stream(("cuda", 1), 0x5000):  # dkit's own current stream comes first
            assert [p.streams for p in _call_on((2, 1))] == [[0x5000]] * 3
        assert asked == [1]
        _C.set_stream_getter(StreamRecorder, lambda i: "s")
        with pytest.raises(dkit.DkitTypeError, match="cannot find its framework's current stream"):
            _C.ops.roi_align_forward(StreamRecorder(np.zeros((1, 1, 2, 2), np.float32), (2, 0)), None, None, None,
                                     None, 1, 1, 1.0, 1, 1, True)  # fmt: skip
        assert _C.set_current_stream(2, 0, 0) == 0
    finally:
        _C.set_stream_getter(StreamRecorder, None)
    assert [p.streams for p in _call_on((2, 1))] == [[1]] * 3


def test_torch_tensors_use_torchs_current_stream():
    torch = pytest.importorskip("torch")
    import dkit._torch_library  # registers torch's getter

    getter = dkit._torch_library.current_stream
    assert getter.__name__ == "current_stream"
    raw = dkit._torch_library._raw_current_stream  # torch's C function, which dkit registers
    if not torch.cuda.is_available():  # CPU-only torch: the getter is torch's own call
        with pytest.raises(Exception):  # noqa: B017 - whatever this torch raises without CUDA
            getter(0)
    else:
        assert raw is not None
        assert getter(0) == raw(0) == torch.cuda.current_stream(0).cuda_stream
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            assert getter(0) == raw(0) == side.cuda_stream != 0
