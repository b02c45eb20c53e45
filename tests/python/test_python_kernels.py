"""Kernels written in Python (dkit.dispatch.kernel; Note [Python kernels] in
csrc/python/dk_pykernel.c): a Python function overrides an op's C kernel at a device's key and is
removed again, by the dispatcher's rules, reached from dkit.ops, torch ops, TorchScript and C
callers on threads of their own; its exceptions and wrong results are clean errors.
"""

import threading

import numpy as np
import pytest

import dkit
from dkit import _C

OP = "roi_align_forward"
# a [1, 2, 5, 5] input and two boxes of image 0 (the second one of image 1 when N = 2)
X = np.arange(2 * 2 * 5 * 5, dtype=np.float32).reshape(2, 2, 5, 5) / 10
BOXES = np.array([[0, 0, 0, 3, 3], [1, 1, 1, 4, 4]], np.float32)


def fake_roi_align(input, rois, output, argmax_y, argmax_x, aligned_height, aligned_width, spatial_scale,
                   sampling_ratio, pool_mode, aligned):  # fmt: skip
    """Not RoIAlign: each box's bins get its image's channel means * spatial_scale + aligned_height,
    which reads every argument kind."""
    x, r, o = np.asarray(input), np.asarray(rois), np.asarray(output)
    for k in range(r.shape[0]):
        o[k] = x[int(r[k, 0])].mean(axis=(1, 2))[:, None, None] * spatial_scale + aligned_height


def fake_expected(x, boxes, size, scale):
    means = x.mean(axis=(2, 3))[boxes[:, 0].astype(int)]
    return np.broadcast_to((means * scale + size)[:, :, None, None], (len(boxes), x.shape[1], size, size))


def cpu_slot(op=OP):
    return next(s for s in dkit.dispatch.table(op) if s.key == "cpu")


def test_a_python_kernel_overrides_the_cpu_kernel_and_is_removed_again():
    before, dump = dkit.dispatch.table(OP), dkit.dispatch.dump(OP)
    c_result = dkit.ops.roi_align(X, BOXES, 2, 0.5)
    calls = []

    @dkit.dispatch.kernel(OP, "cpu")
    def kernel(*args):
        calls.append([(a.name, a.written, a.dtype, a.shape) if isinstance(a, _C.KernelTensor) else a for a in args])
        fake_roi_align(*args)

    try:
        assert dkit.dispatch.table(OP) != before
        assert cpu_slot() == ("cpu", "kernel", f"python: {__name__}.{kernel.__qualname__}", True)
        assert f"python: {__name__}." in dkit.dispatch.dump(OP)
        assert [h.name for h in dkit.dispatch.python_kernels()] == [cpu_slot().kernel]
        got = dkit.ops.roi_align(X, BOXES, 2, 0.5)
        np.testing.assert_allclose(got, fake_expected(X, BOXES, 2, 0.5), rtol=1e-6)
        # the schema's arguments, in order: views of the tensors (None for argmax in avg mode),
        # then Python's ints, floats and bools
        assert calls == [[("input", False, "float32", (2, 2, 5, 5)), ("rois", False, "float32", (2, 5)),
                          ("output", True, "float32", (2, 2, 2, 2)), None, None, 2, 2, 0.5, 0, 1, True]]  # fmt: skip
        assert [type(a) for a in calls[0][5:]] == [int, int, float, int, int, bool]
    finally:
        (handle,) = kernel.dkit_kernels
        handle.remove()
    assert not handle.active and handle.function is kernel
    assert dkit.dispatch.table(OP) == before and dkit.dispatch.dump(OP) == dump
    assert dkit.dispatch.python_kernels() == []
    np.testing.assert_array_equal(dkit.ops.roi_align(X, BOXES, 2, 0.5), c_result)
    assert len(calls) == 1
    handle.remove()  # idempotent


def test_torch_tensors_torch_ops_and_torchscript_reach_the_python_kernel():
    torch = pytest.importorskip("torch")
    x, boxes = torch.from_numpy(X), torch.from_numpy(BOXES)
    c_result = dkit.ops.roi_align(x, boxes, 2, 0.5)

    def kernel(input, rois, output, *rest):
        assert type(input) is torch.Tensor and type(output) is torch.Tensor
        output.copy_(torch.from_numpy(fake_expected(input.numpy(), rois.numpy(), 2, 0.5).copy()))

    def scripted(x, boxes):
        return dkit.ops.roi_align(x, boxes, [2, 2], 0.5)

    scripted = torch.jit.script(scripted)
    want = torch.from_numpy(fake_expected(X, BOXES, 2, 0.5).copy())
    with dkit.dispatch.kernel(OP, "cpu", kernel, tensors="torch") as handle:
        assert handle.active and cpu_slot().kernel.endswith(".kernel")
        torch.testing.assert_close(dkit.ops.roi_align(x, boxes, 2, 0.5), want)
        torch.testing.assert_close(torch.ops.dkit.roi_align(x, boxes, [2, 2], 0.5), want)
        torch.testing.assert_close(scripted(x, boxes), want)
        out = torch.empty(2, 2, 2, 2)
        torch.ops.dkit.roi_align_forward.out(x, boxes, out, None, None, 2, 2, 0.5, 0, 1, True)
        torch.testing.assert_close(out, want)
    assert not handle.active
    torch.testing.assert_close(scripted(x, boxes), c_result)


def test_the_newest_kernel_at_a_key_wins_and_removing_it_restores_the_one_below():
    before = dkit.dispatch.table(OP)
    c_result = dkit.ops.roi_align(X, BOXES, 2)

    def filler(value):
        def fill(input, rois, output, *rest):
            np.asarray(output)[...] = value

        fill.__qualname__ = f"fill_{value}"
        return fill

    one = dkit.dispatch.kernel(OP, "cpu", filler(1))
    two = dkit.dispatch.kernel(OP, "cpu", filler(2))
    try:
        assert cpu_slot().kernel == f"python: {__name__}.fill_2"
        assert (dkit.ops.roi_align(X, BOXES, 2) == 2).all()
        two.remove()
        assert cpu_slot().kernel == f"python: {__name__}.fill_1"
        assert (dkit.ops.roi_align(X, BOXES, 2) == 1).all()
        # removed out of order: the older one first, the newer one keeps the slot
        three = dkit.dispatch.kernel(OP, "cpu", filler(3))
        one.remove()
        assert cpu_slot().kernel == f"python: {__name__}.fill_3"
        assert (dkit.ops.roi_align(X, BOXES, 2) == 3).all()
        three.remove()
    finally:
        for h in dkit.dispatch.python_kernels():
            h.remove()
    assert dkit.dispatch.table(OP) == before
    np.testing.assert_array_equal(dkit.ops.roi_align(X, BOXES, 2), c_result)


def test_a_higher_key_runs_first_and_reaches_the_python_kernel_by_redispatch():
    # Profile, a C kernel above every backend key, counts the call and redispatches to cpu,
    # where the Python kernel now serves it. (A C kernel above that serves the call itself wins
    # outright: test_a_vendor_device_and_c_callers_in_a_child below.)
    with dkit.dispatch.kernel(OP, "cpu", fake_roi_align):
        with dkit.profile() as prof:
            got = dkit.ops.roi_align(X, BOXES, 2, 0.5)
    np.testing.assert_allclose(got, fake_expected(X, BOXES, 2, 0.5), rtol=1e-6)
    assert [(r.op, r.backend, r.count) for r in prof.rows] == [(OP, "cpu", 1)], prof.rows


def test_an_op_with_a_data_dependent_output_size_through_a_python_kernel():
    # nms writes its keep bound-sized and the count beside it (Note [Data-dependent output
    # sizes] in ops/nms.h); dkit.ops.nms returns what the kernel counted.
    def nms(boxes, scores, idxs, keep, num, iou_threshold, offset):
        assert keep.written and num.written and not boxes.written and idxs is None
        k, n = np.asarray(keep), np.asarray(num)
        k[:2] = [2, 0]
        n[0] = 2

    boxes = np.array([[0, 0, 1, 1], [0, 0, 2, 2], [5, 5, 6, 6]], np.float32)
    scores = np.array([0.5, 0.4, 0.9], np.float32)
    with dkit.dispatch.kernel("nms", "cpu", nms):
        assert dkit.ops.nms(boxes, scores, 0.5).tolist() == [2, 0]
    assert dkit.ops.nms(boxes, scores, 0.5).tolist() == [2, 0, 1]


class Custom(Exception):
    pass


@pytest.mark.parametrize(
    "raised, expected",
    [
        (ValueError("boom"), _C.DkitValueError),
        (IndexError("box 3"), _C.DkitIndexError),
        (TypeError("no"), _C.DkitTypeError),
        (NotImplementedError("not yet"), _C.DkitNotImplementedError),
        (Custom("custom"), _C.DkitError),
        (_C.DkitValueError("from dkit"), _C.DkitValueError),
    ],
)
def test_an_exception_in_a_python_kernel_fails_the_call_cleanly(raised, expected):
    def kernel(*args):
        raise raised

    with dkit.dispatch.kernel(OP, "cpu", kernel):
        with pytest.raises(expected) as e:
            dkit.ops.roi_align(X, BOXES, 2)
    assert e.type is expected
    assert str(e.value).startswith(f"roi_align_forward: the Python kernel {__name__}.{kernel.__qualname__} at cpu "
                                   f"raised {type(raised).__name__}: {raised} (")  # fmt: skip
    assert __file__.rstrip("c") in str(e.value)  # where it was raised
    assert e.value.__cause__ is raised  # the original, traceback and all
    assert e.value.__cause__.__traceback__ is not None
    assert cpu_slot().kernel == "dk_roi_align_forward_cpu"


def test_keyboard_interrupt_in_a_python_kernel_stays_a_keyboard_interrupt():
    def kernel(*args):
        raise KeyboardInterrupt

    with dkit.dispatch.kernel(OP, "cpu", kernel):
        with pytest.raises(KeyboardInterrupt):
            dkit.ops.roi_align(X, BOXES, 2)


def test_wrong_results_and_wrong_writes_are_errors():
    def returns_something(*args):
        return 1

    with dkit.dispatch.kernel(OP, "cpu", returns_something):
        with pytest.raises(_C.DkitTypeError, match=r"returned int: a kernel writes its outputs in place and returns"):
            dkit.ops.roi_align(X, BOXES, 2)

    def wrong_shape(input, rois, output, *rest):
        np.asarray(output)[...] = np.zeros(3, np.float32)  # [2, 2, 2, 2] cannot take 3 values

    with dkit.dispatch.kernel(OP, "cpu", wrong_shape):
        with pytest.raises(_C.DkitValueError, match=r"raised ValueError: could not broadcast"):
            dkit.ops.roi_align(X, BOXES, 2)

    def writes_an_input(input, *rest):
        np.asarray(input)[0] = 0  # inputs are read-only arrays

    with dkit.dispatch.kernel(OP, "cpu", writes_an_input):
        with pytest.raises(_C.DkitValueError, match=r"read-only"):
            dkit.ops.roi_align(X, BOXES, 2)

    kept = []

    def keeps_a_view(input, *rest):
        kept.append(input)
        fake_roi_align(input, *rest)

    with dkit.dispatch.kernel(OP, "cpu", keeps_a_view):
        dkit.ops.roi_align(X, BOXES, 2)
    for use in (lambda t: t.shape, lambda t: t.__dlpack__(), lambda t: np.asarray(t), lambda t: t.data_ptr):
        with pytest.raises(_C.DkitBufferError, match=r"parameter 'input' was an argument of a Python kernel call"):
            use(kept[0])
    assert "expired" in repr(kept[0]) and kept[0].name == "input"


def test_torch_writes_of_the_wrong_shape_are_errors():
    torch = pytest.importorskip("torch")

    def kernel(input, rois, output, *rest):
        output.copy_(torch.zeros(3))

    with dkit.dispatch.kernel(OP, "cpu", kernel, tensors="torch"):
        with pytest.raises(_C.DkitError, match=r"the Python kernel .*kernel at cpu raised RuntimeError"):
            dkit.ops.roi_align(torch.from_numpy(X), torch.from_numpy(BOXES), 2)


def test_registration_is_checked():
    with pytest.raises(_C.DkitTypeError, match=r"cannot take the 11 arguments of roi_align_forward \(input, rois"):
        dkit.dispatch.kernel(OP, "cpu", lambda input, rois: None)
    with pytest.raises(_C.DkitValueError, match=r"no core op named 'roi_align'"):
        dkit.dispatch.kernel("roi_align", "cpu", fake_roi_align)
    with pytest.raises(_C.DkitValueError, match=r"Profile is not a backend key"):
        dkit.dispatch.kernel(OP, "Profile", fake_roi_align)
    with pytest.raises(_C.DkitValueError):
        dkit.dispatch.kernel(OP, "no-such-device", fake_roi_align)
    with pytest.raises(_C.DkitTypeError, match=r"a kernel is a callable, got int"):
        dkit.dispatch.kernel(OP, "cpu", 3)
    with pytest.raises(_C.DkitValueError, match=r"tensors is one of"):
        dkit.dispatch.kernel(OP, "cpu", fake_roi_align, tensors="jax")
    assert dkit.dispatch.python_kernels() == []
    # an op callable names its op; *args takes any schema
    with dkit.dispatch.kernel(_C.ops.roi_align_forward, dkit.dispatch.key("cpu"), lambda *a: fake_roi_align(*a)):
        np.testing.assert_allclose(dkit.ops.roi_align(X, BOXES, 2), fake_expected(X, BOXES, 2, 1.0), rtol=1e-6)


def test_the_views_describe_their_tensors():
    seen = {}

    def kernel(input, rois, output, *rest):
        seen.update(input=(input.shape, input.strides, input.dtype, input.device, input.__dlpack_device__()),
                    repr=repr(output), same=np.asarray(input).ctypes.data == input.data_ptr)  # fmt: skip
        fake_roi_align(input, rois, output, *rest)

    x = np.asfortranarray(X)  # any strides, read in place
    with dkit.dispatch.kernel(OP, "cpu", kernel):
        dkit.ops.roi_align(x, BOXES, 2)
    strides = tuple(s // 4 for s in x.strides)
    assert seen["input"] == ((2, 2, 5, 5), strides, "float32", "cpu", (1, 0))
    assert seen["repr"] == "<dkit kernel tensor output (written): float32(2, 2, 2, 2) on cpu>"
    assert seen["same"]


def test_numpy_arrays_and_dlpack_consumers_see_the_same_memory():
    seen = {}

    def kernel(input, rois, output, *rest):
        assert type(input) is np.ndarray and type(output) is np.ndarray  # tensors="numpy"
        seen.update(input=input.flags.writeable, output=output.flags.writeable, values=input.copy())
        output[...] = -1

    with dkit.dispatch.kernel(OP, "cpu", kernel, tensors="numpy"):
        assert (dkit.ops.roi_align(X, BOXES, 2) == -1).all()
    assert seen["input"] is False and seen["output"] is True
    np.testing.assert_array_equal(seen["values"], X)

    def views(input, rois, output, *rest):
        seen.update(dlpack=np.from_dlpack(input).copy())  # any DLPack consumer
        fake_roi_align(input, rois, output, *rest)

    with dkit.dispatch.kernel(OP, "cpu", views):
        dkit.ops.roi_align(X, BOXES, 2)
    np.testing.assert_array_equal(seen["dlpack"], X)


def test_bfloat16_tensors_reach_torch_and_are_refused_by_numpy():
    torch = pytest.importorskip("torch")
    x, boxes = torch.from_numpy(X).bfloat16(), torch.from_numpy(BOXES).bfloat16()

    def kernel(input, rois, output, *rest):
        with pytest.raises(_C.DkitTypeError, match=r"parameter 'input' is bfloat16, which NumPy has no dtype for"):
            np.asarray(input)
        t = torch.from_dlpack(input)
        assert t.dtype == torch.bfloat16 and t.data_ptr() == input.data_ptr
        torch.from_dlpack(output).fill_(2.5)

    with dkit.dispatch.kernel(OP, "cpu", kernel):
        got = dkit.ops.roi_align(x, boxes, 2)
    assert got.dtype == torch.bfloat16 and (got == 2.5).all()


@pytest.mark.threads
def test_python_threads_share_a_python_kernel_and_see_its_removal():
    c_result = dkit.ops.roi_align(X, BOXES, 2, 0.5)
    fake = fake_expected(X, BOXES, 2, 0.5)
    removed, calling = threading.Event(), threading.Event()
    bad, after = [], []

    def work():
        try:
            calls()
        except Exception as e:  # reported by the test, not lost in the thread
            bad.append(e)

    def calls():
        # until 50 calls began after the removal (not a fixed count: on a loaded machine the
        # threads could finish one before the main thread removes the kernel)
        for n in range(200_000):
            was_removed = removed.is_set()  # read before the call starts
            got = dkit.ops.roi_align(X, BOXES, 2, 0.5)
            if n == 20:
                calling.set()
            if np.allclose(got, fake, rtol=1e-6):
                if was_removed:
                    bad.append("the Python kernel ran after remove() returned")
            elif not np.array_equal(got, c_result):
                bad.append(got)
            if was_removed:
                after.append(1)
                if len(after) > 50:
                    return

    handle = dkit.dispatch.kernel(OP, "cpu", fake_roi_align)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        dkit.ops.roi_align(X, BOXES, 2, 0.5)
        assert calling.wait(60), "the threads made no calls"  # removal races calls in flight
    finally:
        handle.remove()
        removed.set()
    for t in threads:
        t.join()
    assert not bad, bad[:3]
    assert after, "no call after the removal"


# ------------------------------------------------------------------------------------------
# A vendor device, a C kernel above the Python one, and C callers, in a child process (a
# backend library, once loaded, stays loaded).

_PYKT_C = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "dkit.h"
#include "roi_align.h"

/* The device keeps its memory on the host: its copies are memcpy. */
static dk_status copy(void *ctx, int32_t device, void *dst, const void *src, size_t n, dk_copy_kind kind, void *stream)
{
    memcpy(dst, src, n);
    return DK_OK;
}
static const dk_backend pyktdev = {.abi = DK_ABI_VERSION, .name = "pyktdev", .device_type = kDLExtDev, .copy = copy};

/* A layer's C kernel at a functionality key: it serves the call itself (42 everywhere). */
static dk_status layer(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output, dk_tensor *ay,
                       dk_tensor *ax, int64_t ph, int64_t pw, double scale, int64_t sr, int64_t mode, bool aligned)
{
    float *o = (float *)dk_tensor_data(output);
    for (int64_t i = 0; i < dk_tensor_numel(output); i++) o[i] = 42.0f;
    return DK_OK;
}

DK_BACKEND_ENTRY(pyktdev)
{
    dk_key key, layer_key;
    dk_status st = dk_backend_register(&pyktdev, &key);
    if (!st) st = dk_register_cpu_fallback(key, NULL);
    if (!st) st = dk_functionality_key_register("pyktlayer", &layer_key);
    if (!st)
        st = dk_op_register(&dk_roi_align_forward_op, layer_key, dk_kernel_unboxed((dk_fnptr)layer, "layer"), NULL);
    return st;
}

/* roi_align_forward of a [1, 2, 5, 5] float32 input and one box into a [1, 2, 2, 2] output,
 * from a thread of its own (one Python never saw), through the typed entry. */
typedef struct {
    float *x, *rois, *out;
    dk_status st;
    char msg[512];
} call;

static void *run(void *p)
{
    call *c = p;
    int64_t xs[4] = {1, 2, 5, 5}, rs[2] = {1, 5}, os[4] = {1, 2, 2, 2};
    DLTensor x = {c->x, {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, xs, NULL, 0};
    DLTensor r = {c->rois, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, rs, NULL, 0};
    DLTensor o = {c->out, {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, os, NULL, 0};
    c->st = dk_roi_align_forward(&x, &r, &o, NULL, NULL, 2, 2, 1.0, 0, 1, true);
    strncpy(c->msg, dk_last_error(), sizeof c->msg - 1);
    return NULL;
}

int call_in_a_thread(float *x, float *rois, float *out, char *msg)
{
    call c = {x, rois, out, DK_OK, {0}};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &c)) return -1;
    pthread_join(t, NULL);
    strcpy(msg, c.msg);
    return (int)c.st;
}

/* One call on a thread of its own, started, waited for and joined apart. */
static call async_call;
static pthread_t async_thread;
static atomic_int async_started;
static void *run_flagged(void *p)
{
    atomic_store(&async_started, 1);
    return run(p);
}

int start_call(float *x, float *rois, float *out)
{
    async_call = (call){x, rois, out, DK_OK, {0}};
    atomic_store(&async_started, 0);
    return pthread_create(&async_thread, NULL, run_flagged, &async_call);
}

/* Called with the GIL held (ctypes.PyDLL): returns once the call has started, and 100 ms more. */
void wait_started(void)
{
    while (!atomic_load(&async_started)) nanosleep(&(struct timespec){0, 1000000}, NULL);
    nanosleep(&(struct timespec){0, 100000000}, NULL);
}

int join_call(char *msg)
{
    pthread_join(async_thread, NULL);
    strcpy(msg, async_call.msg);
    return (int)async_call.st;
}

/* A thread that calls the op until the process ends, on buffers of its own. */
atomic_long calls_made;
static float fx[50], frois[5] = {0, 0, 0, 3, 3}, fout[8];
static void *forever(void *p)
{
    call c = {fx, frois, fout, DK_OK, {0}};
    for (;;) {
        run(&c);
        atomic_fetch_add(&calls_made, 1);
    }
    return NULL;
}

/* At exit(), after Python has finalized: the thread must still be making calls (served by the
 * C kernel again), not be stuck in, or ended by, an attempt to take the GIL of a finalized
 * interpreter. Up to 5 s for two more calls. */
static void still_calling(void)
{
    const long before = atomic_load(&calls_made);
    for (int i = 0; i < 5000 && atomic_load(&calls_made) < before + 2; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (atomic_load(&calls_made) >= before + 2) return;
    fprintf(stderr, "the C thread stopped calling when the interpreter finalized\n");
    _exit(3);
}

int start_calling_forever(void)
{
    pthread_t t;
    atexit(still_calling);
    return pthread_create(&t, NULL, forever, NULL) || pthread_detach(t);
}
"""

_PYKT_CHILD = r"""
import ctypes, sys, threading
import numpy as np
import dkit
from dkit import _C

lib_path = sys.argv[2]
dkit.load_backend(lib_path)
lib = ctypes.CDLL(lib_path)  # ctypes releases the GIL around the calls below
OP = "roi_align_forward"
x = np.arange(50, dtype=np.float32).reshape(1, 2, 5, 5)
rois = np.array([[0, 0, 0, 3, 3]], np.float32)
want_c = dkit.ops.roi_align(x, rois, 2, 1.0, 0, "avg", True)


def slot(op, key):
    return next(tuple(s)[1:3] for s in dkit.dispatch.table(op) if s.key == key)


# 1. A Python kernel at a vendor key: the device's tensors arrive as views on that device.
before = dkit.dispatch.table(OP)
assert slot(OP, "pyktdev") == ("fallback (cpu copy)", "dk_cpu_fallback")
seen = []


def vendor_kernel(input, rois, output, argmax_y, argmax_x, *rest):
    seen.append((input.device, input.__dlpack_device__(), output.written))
    n = int(np.prod(output.shape))
    out = np.ctypeslib.as_array((ctypes.c_float * n).from_address(output.data_ptr))  # the vendor's runtime
    out[:] = 7


h = dkit.dispatch.kernel(OP, "pyktdev", vendor_kernel)
assert slot(OP, "pyktdev") == ("kernel", "python: __main__.vendor_kernel"), slot(OP, "pyktdev")
assert slot("box_iou", "pyktdev") == ("fallback (cpu copy)", "dk_cpu_fallback")
out = np.zeros((1, 2, 2, 2), np.float32)
ms = [tce.Managed(a, device=(12, 0)) for a in (x, rois, out)]
_C.ops.roi_align_forward(*(m.capsule for m in ms), None, None, 2, 2, 1.0, 0, 1, True)
assert (out == 7).all() and seen == [("pyktdev:0", (12, 0), True)], (out, seen)
h.remove()
assert dkit.dispatch.table(OP) == before
out[:] = 0
ms = [tce.Managed(a, device=(12, 0)) for a in (x, rois, out)]
_C.ops.roi_align_forward(*(m.capsule for m in ms), None, None, 2, 2, 1.0, 0, 1, True)
assert np.array_equal(out, want_c) and len(seen) == 1  # the CPU fallback again

# 2. A C kernel at a higher key serves the call itself; the Python kernel serves the rest.
calls = []


def cpu_kernel(input, rois, output, *rest):
    calls.append(threading.current_thread())
    np.asarray(output)[...] = 5


with dkit.dispatch.kernel(OP, "cpu", cpu_kernel):
    with dkit.dispatch.include("pyktlayer"):
        assert (dkit.ops.roi_align(x, rois, 2) == 42).all() and calls == []
    assert (dkit.ops.roi_align(x, rois, 2) == 5).all() and len(calls) == 1

    # 3. C callers: a thread Python never saw calls the typed entry and lands in the kernel,
    # from another Python thread as well as from this one
    msg = ctypes.create_string_buffer(512)
    for from_python_thread in (False, True):
        out = np.zeros((1, 2, 2, 2), np.float32)
        args = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in (x, rois, out)]
        if from_python_thread:
            rc = []
            t = threading.Thread(target=lambda: rc.append(lib.call_in_a_thread(*args, msg)))
            t.start(); t.join()
            rc = rc[0]
        else:
            rc = lib.call_in_a_thread(*args, msg)
        assert rc == 0 and (out == 5).all(), (rc, msg.value, out)
    assert len(calls) == 3 and all(isinstance(t, threading._DummyThread) for t in calls[1:]), calls


def failing(*args):
    raise IndexError("box 3 is outside")


with dkit.dispatch.kernel(OP, "cpu", failing):
    rc = lib.call_in_a_thread(*args, msg)
assert rc == 3, rc  # DK_EINDEX
assert msg.value.decode().startswith(
    "roi_align_forward: the Python kernel __main__.failing at cpu raised IndexError: box 3 is outside ("), msg.value
assert dkit.dispatch.table(OP) == before

# 4. Removed while a call is on its way to it: a C thread has read the slot and waits for the
# GIL, which this thread holds (PyDLL calls keep it; a long switch interval keeps it between
# them) while it removes the kernel. The call then runs as the table says now: the C kernel.
pylib = ctypes.PyDLL(lib_path)
called = []
h = dkit.dispatch.kernel(OP, "cpu", lambda *a: called.append(1))
out = np.zeros((1, 2, 2, 2), np.float32)
args = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in (x, rois, out)]
sys.setswitchinterval(100)
assert pylib.start_call(*args) == 0
pylib.wait_started()
h.remove()
rc = lib.join_call(msg)  # CDLL: the GIL is released, and the waiting call takes it
sys.setswitchinterval(0.005)
assert rc == 0 and called == [] and np.array_equal(out, want_c), (rc, msg.value, called, out)

# 5. Shutdown: a C thread calls the op, through a Python kernel, until the process ends; the
# exit must neither crash nor hang (Note [Python kernels], Interpreter shutdown).
ran = []
h = dkit.dispatch.kernel(OP, "cpu", lambda *a: ran.append(1) or np.asarray(a[2]).fill(9))
assert lib.start_calling_forever() == 0
calls_made = ctypes.c_long.in_dll(lib, "calls_made")
while len(ran) < 20:
    threading.Event().wait(0.01)
assert calls_made.value > 0
print("ok")
"""


@pytest.mark.threads
def test_a_vendor_device_and_c_callers_in_a_child(tmp_path):
    from test_c_extension import _build_backend, run_child

    so = _build_backend(tmp_path, "pyktdev", _PYKT_C)
    out = run_child(_PYKT_CHILD, so)
    assert out.strip().endswith("ok")


_CLOSE_CHILD = r"""
import numpy as np
import dkit
from dkit import _C

x = np.ones((1, 1, 4, 4), np.float32)
rois = np.array([[0, 0, 0, 2, 2]], np.float32)
before = dkit.dispatch.table("roi_align_forward")
h = dkit.dispatch.kernel("roi_align_forward", "cpu", lambda *a: np.asarray(a[2]).fill(3))
assert (dkit.ops.roi_align(x, rois, 2) == 3).all()
_C._close_python_kernels()  # what atexit runs
assert not h.active and dkit.dispatch.table("roi_align_forward") == before
assert (dkit.ops.roi_align(x, rois, 2) == 1).all()
try:
    dkit.dispatch.kernel("roi_align_forward", "cpu", lambda *a: None)
except _C.DkitError as e:
    assert "shutting down" in str(e), e
else:
    raise AssertionError("registered after the close")
print("ok")
"""


def test_the_exit_handler_removes_every_python_kernel():
    from test_c_extension import run_child

    assert run_child(_CLOSE_CHILD).strip().endswith("ok")
