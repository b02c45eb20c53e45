"""nms_match (the nms family): dkit.ops.nms_match and dkit.compat.mmcv.nms_match against MMCV's
definition (its CPU kernel's loop, written with torch in bench/bench_nms.py, nms_match_reference)
and MMCV's published test (tests/test_ops/test_nms.py, test_nms_match)."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dkit  # noqa: E402
from dkit import _C  # noqa: E402
from dkit.compat import mmcv as cmmcv  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import bench_nms  # noqa: E402

# MMCV's published case (test_nms_match): IoUs 0.613 (boxes 0, 1) and 0.632 (boxes 2, 3) at 0.6
MMCV_DETS = np.array(
    [[49.1, 32.4, 51.0, 35.9, 0.9], [49.3, 32.9, 51.0, 35.3, 0.9],
     [35.3, 11.5, 39.9, 14.5, 0.4], [35.2, 11.7, 39.7, 15.7, 0.3]],
    dtype=np.float32,
)  # fmt: skip


def reference(dets, thr):
    return [g.tolist() for g in bench_nms.nms_match_reference(torch, dets, thr)]


def groups_of(dets, thr):
    """dkit.ops.nms_match's (members, starts) as lists of lists, checked to be a partition."""
    members, starts = dkit.ops.nms_match(dets[:, :4], dets[:, 4], thr)
    n = dets.shape[0]
    assert members.dtype == torch.int64 and starts.dtype == torch.int64 and members.shape == (n,)
    assert sorted(members.tolist()) == list(range(n))  # every box in exactly one group
    bounds = starts.tolist() + [n]
    return [members[bounds[g]:bounds[g + 1]].tolist() for g in range(len(starts))]


def random_dets(n, seed, size=300.0, side=60.0, levels=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * side + 1
    s = torch.rand(n, generator=g)
    if levels:  # ties
        s = (s * levels).floor()
    return torch.cat([xy, xy + wh, s[:, None]], 1).to(dtype)


# ------------------------------------------------------------------------------------------
# MMCV's published test, through the compat entry


def test_mmcv_published_nms_match():
    iou_thr = 0.6
    assert cmmcv.nms_match(np.array([]), iou_thr) == []
    np_groups = cmmcv.nms_match(MMCV_DETS, iou_thr)
    assert isinstance(np_groups[0], np.ndarray) and len(np_groups) == 2
    tensor_dets = torch.from_numpy(MMCV_DETS)
    nms_keep = cmmcv.nms(tensor_dets[:, :4].contiguous(), tensor_dets[:, 4].contiguous(), iou_thr)[1]
    assert {g[0].item() for g in np_groups} == set(nms_keep.tolist())
    tensor_groups = cmmcv.nms_match(tensor_dets, iou_thr)
    assert isinstance(tensor_groups[0], torch.Tensor)
    for t, a in zip(tensor_groups, np_groups):
        assert np.equal(t.numpy(), a).all()
    with pytest.raises(AssertionError):
        cmmcv.nms_match(np.zeros((2, 3)), iou_thr)
    # and the groups themselves: [0, 1] (boxes 0 and 1 tie: index order) and [2, 3]
    assert [g.tolist() for g in np_groups] == [[0, 1], [2, 3]] == reference(tensor_dets, iou_thr)
    assert all(g.dtype == np.int64 for g in np_groups) and all(g.dtype == torch.int64 for g in tensor_groups)


# ------------------------------------------------------------------------------------------
# MMCV's definition


@pytest.mark.parametrize("thr", [0.0, 0.3, 0.6, 0.9, -0.5, float("nan")])
@pytest.mark.parametrize("n,levels", [(1, 0), (2, 0), (60, 3), (700, 0)])
def test_nms_match_equals_mmcv_definition(n, levels, thr):
    dets = random_dets(n, seed=n + levels, levels=levels)
    assert groups_of(dets, thr) == reference(dets, thr)


@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_match_clustered_proposals(thr):
    b, s = bench_nms.clustered_boxes(torch, 3000, 30, 4)
    dets = torch.cat([b, s[:, None]], 1)
    want = reference(dets, thr)
    assert len(want) < 1000  # real groups
    assert groups_of(dets, thr) == want
    assert [g.tolist() for g in cmmcv.nms_match(dets, thr)] == want


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_nms_match_every_dtype(dtype):
    """float64 in float64 (MMCV refuses it); 16-bit values computed in float32, as MMCV's kernel
    computes dets.float()."""
    dets = random_dets(400, seed=7, dtype=dtype)
    wide = dets if dtype == torch.float64 else dets.float()
    for thr in (0.2, 0.5):
        assert groups_of(dets, thr) == reference(wide, thr)


def test_nms_match_nan_infinite_and_degenerate_values():
    dets = random_dets(300, seed=3, side=-30.0, levels=5)  # many inverted boxes
    g = torch.Generator().manual_seed(5)
    for k in range(40):
        i, c = torch.randint(0, 300, (2,), generator=g).tolist()
        dets[i, c % 5] = [float("nan"), float("inf"), -float("inf"), 1e30][k % 4]
    for thr in (0.0, 0.4, float("nan")):
        assert groups_of(dets, thr) == reference(dets, thr)


def test_nms_match_differs_from_nms_at_the_threshold_and_rounds_it_to_float32():
    """>= (nms: >), and the threshold compared as MMCV's C float."""
    b = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 5]], dtype=torch.float32)
    s = torch.tensor([1.0, 0.5])
    dets = torch.cat([b, s[:, None]], 1)
    assert groups_of(dets, 0.5) == [[0, 1]]  # IoU 0.5 exactly
    assert dkit.ops.nms(b, s, 0.5).tolist() == [0, 1]
    assert groups_of(dets, 0.5 + 1e-12) == [[0, 1]]  # 0.5 in float32
    assert groups_of(dets.double(), 0.5 + 1e-12) == [[0], [1]]  # but not in float64
    assert groups_of(dets, 0.5001) == [[0], [1]]


def test_nms_match_outputs_and_frameworks():
    dets = random_dets(50, seed=2)
    members, starts = dkit.ops.nms_match(dets[:, :4], dets[:, 4], 0.3)
    np_members, np_starts = dkit.ops.nms_match(dets[:, :4].numpy(), dets[:, 4].numpy(), 0.3)
    assert isinstance(np_members, np.ndarray) and np.array_equal(np_members, members.numpy())
    assert np.array_equal(np_starts, starts.numpy()) and starts[0] == 0
    # strided dets (a column view for the scores) and a requires_grad tensor, as MMCV detaches
    wide = torch.cat([dets, torch.zeros(50, 3)], 1)[:, :5].requires_grad_()
    assert [g.tolist() for g in cmmcv.nms_match(wide, 0.3)] == reference(dets, 0.3)
    empty = dkit.ops.nms_match(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert empty[0].shape == (0,) and empty[1].shape == (0,)
    assert cmmcv.nms_match(torch.zeros(0, 5), 0.5) == [] and cmmcv.nms_match(torch.zeros(0, 3), 0.5) == []


def test_nms_match_under_torchscript():
    scripted = torch.jit.script(cmmcv.nms_match)
    dets = random_dets(200, seed=9)
    want = reference(dets, 0.4)
    assert [g.tolist() for g in scripted(dets, 0.4)] == want
    assert scripted(torch.zeros(0, 5), 0.4) == []
    with pytest.raises(Exception, match=r"inputs dets.shape should be \(N, 5\), but get \[2, 3\]"):
        scripted(torch.zeros(2, 3), 0.4)
    traced_op = torch.ops.dkit.nms_match(dets[:, :4], dets[:, 4], 0.4)
    assert traced_op[1].tolist() == dkit.ops.nms_match(dets[:, :4], dets[:, 4], 0.4)[1].tolist()


def test_nms_match_bad_input():
    with pytest.raises(AssertionError, match=r"inputs dets.shape should be \(N, 5\), but get torch.Size\(\[3, 4\]\)"):
        cmmcv.nms_match(torch.zeros(3, 4), 0.5)
    with pytest.raises(AssertionError):
        cmmcv.nms_match(torch.zeros(5), 0.5)  # 1-d: MMCV's kernel fails on it too
    with pytest.raises(RuntimeError, match="nms_match: 'boxes' must have shape"):
        dkit.ops.nms_match(torch.zeros(3, 5), torch.zeros(3), 0.5)
    with pytest.raises(RuntimeError, match="nms_match: 'scores' must be float32, got float64"):
        dkit.ops.nms_match(torch.zeros(3, 4), torch.zeros(3, dtype=torch.float64), 0.5)
    with pytest.raises(RuntimeError, match="'boxes' must be float16, bfloat16, float32 or float64, got int32"):
        dkit.ops.nms_match(torch.zeros(3, 4, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 0.5)
    with pytest.raises((TypeError, _C.DkitError)):
        dkit.ops.nms_match(torch.zeros(3, 4), torch.zeros(3), "half")
