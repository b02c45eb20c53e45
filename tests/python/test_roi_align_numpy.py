"""dkit.ops.roi_align with NumPy arrays and other DLPack producers (no torch needed)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dkit
from dkit import _C

import roi_align_ref
from conftest import PKG_ROOT, random_rois

roi_align = dkit.ops.roi_align


def _case(seed=0, n=2, c=3, h=9, w=11, k=10, spatial_scale=0.5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    rois = random_rois(rng, k, n, h, w, spatial_scale).astype(dtype)
    return x, rois


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 2])
def test_numpy_matches_reference(pool_mode, aligned, sampling_ratio):
    x, rois = _case(seed=sampling_ratio + 3)
    out = roi_align(x, rois, (3, 2), 0.5, sampling_ratio, pool_mode, aligned)
    assert type(out) is np.ndarray and out.dtype == np.float64 and out.shape == (10, 3, 3, 2)
    ref = roi_align_ref.roi_align(x, rois, (3, 2), 0.5, sampling_ratio, pool_mode, aligned)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_numpy_dtypes(dtype):
    x, rois = _case(seed=1, dtype=dtype)
    for pool_mode in ("avg", "max"):
        out = roi_align(x, rois, 2, 0.5, 2, pool_mode)
        assert out.dtype == dtype and out.shape == (10, 3, 2, 2)
        ref = roi_align_ref.roi_align(x.astype(np.float64), rois.astype(np.float64), 2, 0.5, 2, pool_mode)
        tol = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)


def test_numpy_layouts_and_read_only():
    x, rois = _case(seed=2, c=4)
    ref = roi_align(x, rois, 3, 0.5)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # channels-last view
    big = np.zeros((2, 8, 9, 20))
    big[:, ::2, :, 5:16] = x
    fortran = np.asfortranarray(x)
    for xi in (nhwc, big[:, ::2, :, 5:16], fortran):
        np.testing.assert_allclose(roi_align(xi, rois, 3, 0.5), ref, rtol=1e-12, atol=1e-12)
    ro_x, ro_rois = x.copy(), rois.copy()
    ro_x.flags.writeable = False
    ro_rois.flags.writeable = False
    np.testing.assert_array_equal(roi_align(ro_x, ro_rois, 3, 0.5), ref)
    np.testing.assert_array_equal(roi_align(x, np.asfortranarray(rois), 3, 0.5), ref)
    np.testing.assert_array_equal(roi_align(np.broadcast_to(x[:1], (2, 4, 9, 11)), rois, 3, 0.5),
                                  roi_align(np.concatenate([x[:1], x[:1]]), rois, 3, 0.5))  # fmt: skip


def test_numpy_list_of_boxes_and_empty():
    x, rois = _case(seed=3)
    per_image = [rois[rois[:, 0] == i, 1:] for i in range(2)]
    ordered = np.concatenate([rois[rois[:, 0] == i] for i in range(2)])
    np.testing.assert_array_equal(roi_align(x, per_image, 2, 0.5), roi_align(x, ordered, 2, 0.5))
    assert roi_align(x, [], 2, 0.5).shape == (0, 3, 2, 2)
    assert roi_align(x, np.zeros((0, 5)), 2, 0.5, pool_mode="max").shape == (0, 3, 2, 2)
    assert roi_align(np.zeros((2, 0, 5, 5)), rois, 2, 0.5).shape == (10, 0, 2, 2)


def test_numpy_bad_input():
    x, rois = _case(seed=4)
    with pytest.raises(_C.DkitTypeError, match="'rois' must be float64, got float32"):
        roi_align(x, rois.astype(np.float32), 2)
    with pytest.raises(_C.DkitValueError, match="must be 4-d"):
        roi_align(x[0], rois, 2)
    with pytest.raises(_C.DkitValueError, match=r"must have shape \[K, 5\]"):
        roi_align(x, rois[:, :4], 2)
    r = rois.copy()
    r[0, 0] = 5
    with pytest.raises(_C.DkitIndexError, match="batch index"):
        roi_align(x, r, 2)
    r = rois.copy()
    r[0, 1] = np.nan
    with pytest.raises(_C.DkitValueError, match="non-finite"):
        roi_align(x, r, 2)
    with pytest.raises(_C.DkitTypeError, match="must be float16, bfloat16, float32 or float64"):
        roi_align(x.astype(np.int64), rois.astype(np.int64), 2)


class _Producer:
    """A minimal foreign DLPack producer (not torch, not NumPy)."""

    def __init__(self, array, device=(1, 0)):
        self._a = array
        self._device = device

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._device


def test_generic_dlpack_producer_gives_numpy():
    x, rois = _case(seed=5, dtype=np.float32)
    out = roi_align(_Producer(x), _Producer(rois), 2, 0.5)
    assert type(out) is np.ndarray and out.dtype == np.float32
    np.testing.assert_array_equal(out, roi_align(x, rois, 2, 0.5))
    assert dkit._frameworks.name_of(_Producer(x)) == "dlpack"
    # boxes as a list of producers
    per_image = [_Producer(np.ascontiguousarray(rois[rois[:, 0] == i, 1:])) for i in range(2)]
    assert roi_align(_Producer(x), per_image, 2, 0.5).shape == (10, 3, 2, 2)


def test_generic_dlpack_producer_on_another_device_is_rejected():
    x, rois = _case(seed=6, dtype=np.float32)
    with pytest.raises(_C.DkitBufferError, match="must be on the CPU"):
        roi_align(_Producer(x, device=(2, 0)), rois, 2)


def test_numpy_only_does_not_import_torch():
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import dkit
        x = np.ones((1, 2, 4, 4), np.float32)
        out = dkit.ops.roi_align(x, np.array([[0, 0, 0, 3, 3]], np.float32), 2)
        assert out.shape == (1, 2, 2, 2), out.shape
        with dkit.profile() as p:
            dkit.ops.roi_align(x, np.array([[0, 0, 0, 3, 3]], np.float32), 2)
        str(p)
        print("torch" in sys.modules)
        """
    )
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
