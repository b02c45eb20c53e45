/*
 * ops/nms.h — non-maximum suppression (torchvision's nms and batched_nms, MMCV's nms, soft_nms and
 * nms_match).
 *
 * Boxes (x1, y1, x2, y2) are visited in decreasing score order (a stable sort, NaN scores first,
 * as torch.sort(descending=True)); a box is kept unless a box kept before it overlaps it by more
 * than iou_threshold (the NMS overlap of kernels/nms_math.h, compared in double). With `idxs`,
 * boxes of different categories never suppress each other (torchvision's batched_nms). `offset`
 * is 0 (torchvision) or 1 (MMCV's legacy +1 pixel extents).
 *
 * Note [Data-dependent output sizes]
 * How many boxes survive depends on the values, so the caller passes `keep` sized to the upper
 * bound (N) and `num`, one int64 into which the kernel writes how many entries of keep are
 * filled; the framework layer (dkit's Python) then slices keep[:num]. This is dkit's one
 * convention for outputs whose size depends on the data (nms, soft_nms, nms_rotated, ...), for
 * every backend, because: the bound is always known before the call; kernels never allocate,
 * call back into a framework, or need a second pass; and on a GPU num stays on the device, so a
 * caller that can use padded results (a CUDA graph, a batched pipeline) never synchronises,
 * while one that slices pays the one device-to-host copy every GPU NMS pays.
 *
 * Tensors:
 *   boxes   [N, 4]  float16, bfloat16 (computed in float32), float32 or float64; N < 2^31
 *   scores  [N]     the same dtype
 *   idxs    [N]     int32 or int64 categories, or none
 *   keep    [N]     int64: keep[0:num] are the kept indices, in decreasing score order
 *   num     [1]     int64
 */
#ifndef DK_OPS_NMS_H
#define DK_OPS_NMS_H

#include "dk_op_define.h"
#include "kernels/nms_math.h" /* dk_soft_nms_method */

#define DK_NMS_ARGS(X)      \
    X(TENSOR, boxes)        \
    X(TENSOR, scores)       \
    X(OPT_TENSOR, idxs)     \
    X(TENSOR_OUT, keep)     \
    X(TENSOR_OUT, num)      \
    X(FLOAT, iou_threshold) \
    X(INT, offset)

/* torchvision's batched_nms: nms with categories. A composite (ops/nms.c): every backend with
 * nms serves it. */
#define DK_BATCHED_NMS_ARGS(X) \
    X(TENSOR, boxes)           \
    X(TENSOR, scores)          \
    X(TENSOR, idxs)            \
    X(TENSOR_OUT, keep)        \
    X(TENSOR_OUT, num)         \
    X(FLOAT, iou_threshold)

/*
 * MMCV's soft_nms: instead of dropping a box that overlaps a selected one, its score is decayed
 * (kernels/nms_math.h, dk_box_soft_nms_weight); boxes whose score falls below min_score are
 * dropped. MMCV's exact procedure (Note [Soft-NMS as MMCV runs it] in csrc/cpu/nms/), so that
 * ties and the order of the results are MMCV's too.
 *
 *   boxes   [N, 4], scores [N]   as nms
 *   dets    [N, 5]  the boxes' dtype: dets[0:num] = (x1, y1, x2, y2, decayed score), selected order
 *   inds    [N]     int64: inds[0:num] their indices into boxes
 *   num     [1]     int64
 *   method  0 naive, 1 linear, 2 gaussian (dk_soft_nms_method); sigma > 0 for gaussian
 */
#define DK_SOFT_NMS_ARGS(X) \
    X(TENSOR, boxes)        \
    X(TENSOR, scores)       \
    X(TENSOR_OUT, dets)     \
    X(TENSOR_OUT, inds)     \
    X(TENSOR_OUT, num)      \
    X(FLOAT, iou_threshold) \
    X(FLOAT, sigma)         \
    X(FLOAT, min_score)     \
    X(INT, method)          \
    X(INT, offset)

/*
 * MMCV's nms_match: NMS that reports, for each kept box, the boxes it suppressed. Its rules are
 * MMCV's (mmcv/ops/csrc/pytorch/cpu/nms.cpp, nms_match_cpu), not nms's: no +1 pixel offset, a
 * box suppresses a later one when their overlap is >= iou_threshold (nms: >), and the overlap
 * and the comparison are in the compute type (MMCV: float, its threshold a C float). Visiting the
 * boxes in decreasing score order (as nms), a box not yet suppressed is kept and takes, as its
 * group, every later box not yet suppressed whose overlap with it reaches the threshold. Every
 * box is in exactly one group, so the groups are a permutation of the boxes plus where each
 * group starts (Note [Data-dependent output sizes]: only the number of groups depends on the
 * data):
 *
 *   boxes   [N, 4], scores [N]   as nms (dets[:, :4] and dets[:, 4] of MMCV's [N, 5] dets)
 *   members [N]     int64: the box indices, group after group; each group its kept box first,
 *                   then the boxes it suppressed in score order; groups in score order
 *   starts  [N]     int64: starts[0:num] where each group begins in members (starts[0] = 0; the
 *                   last group ends at N)
 *   num     [1]     int64: the number of groups (the kept boxes)
 */
#define DK_NMS_MATCH_ARGS(X) \
    X(TENSOR, boxes)         \
    X(TENSOR, scores)        \
    X(TENSOR_OUT, members)   \
    X(TENSOR_OUT, starts)    \
    X(TENSOR_OUT, num)       \
    X(FLOAT, iou_threshold)

#ifdef __cplusplus
extern "C" {
#endif
DK_DECLARE_OP(nms, DK_NMS_ARGS)
DK_DECLARE_OP(batched_nms, DK_BATCHED_NMS_ARGS)
DK_DECLARE_OP(soft_nms, DK_SOFT_NMS_ARGS)
DK_DECLARE_OP(nms_match, DK_NMS_MATCH_ARGS)
#ifdef __cplusplus
}
#endif

#endif /* DK_OPS_NMS_H */
