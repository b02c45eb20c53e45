/*
 * ops/rotated.c — box_iou_rotated and nms_rotated: definitions and validation. Values are not
 * checked: every value has a defined result (Note [Rotated boxes out of range] in
 * kernels/rotated_math.h; NaN scores sort first, a NaN threshold suppresses nothing).
 */
#include "rotated.h"

#include "dk_check.h"
#include "kernels/rotated_math.h"

/* [K, 5] boxes of a float dtype, K < 2^31 (MMCV's kernels index boxes with int). */
static dk_status dk__check_rboxes(const char *op, const char *name, const dk_tensor *t)
{
    if (t->ndim != 2 || t->shape[1] != 5 || t->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: '%s' must have shape [K, 5] (cx, cy, w, h, angle), got %d-d%s", op, name,
                        (int)t->ndim,
                        t->ndim != 2       ? ""
                        : t->shape[1] != 5 ? " with a different width"
                                           : " with K < 0");
    if (t->shape[0] > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: '%s' may hold at most 2^31 - 1 boxes, got %lld", op, name,
                        (long long)t->shape[0]);
    return dk_check_float(op, name, t);
}

DK_DEFINE_OP(box_iou_rotated, DK_BOX_IOU_ROTATED_ARGS)
{
    static const char op[] = "box_iou_rotated";
    dk_status st;
    (void)clockwise;
    if (mode != DK_RBOX_IOU && mode != DK_RBOX_IOF)
        return dk_error(DK_EINVAL, "%s: mode must be 0 (iou) or 1 (iof), got %lld", op, (long long)mode);
    if ((st = dk__check_rboxes(op, "boxes1", boxes1))) return st;
    if ((st = dk__check_rboxes(op, "boxes2", boxes2))) return st;
    if ((st = dk_check_same_dtype(op, "boxes2", boxes2, "boxes1", boxes1))) return st;
    const int64_t n = boxes1->shape[0], m = boxes2->shape[0];
    if (aligned && n != m)
        return dk_error(DK_EINVAL, "%s: aligned needs as many boxes in 'boxes2' as in 'boxes1', got %lld and %lld", op,
                        (long long)m, (long long)n);
    const int64_t shape[2] = {n, m};
    if ((st = dk_check_shape(op, "ious", ious, aligned ? 1 : 2, shape))) return st;
    return dk_check_dtype(op, "ious", ious, dk_tensor_dtype(boxes1));
}

DK_DEFINE_OP(nms_rotated, DK_NMS_ROTATED_ARGS)
{
    static const char op[] = "nms_rotated";
    dk_status st;
    (void)iou_threshold;
    (void)clockwise;
    if (dets->ndim != 2 || dets->shape[1] != 5 || dets->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: 'dets' must have shape [N, 5] (cx, cy, w, h, angle), got %d-d%s", op,
                        (int)dets->ndim,
                        dets->ndim != 2       ? ""
                        : dets->shape[1] != 5 ? " with a different width"
                                              : " with N < 0");
    const int64_t n = dets->shape[0];
    if (n > INT32_MAX) return dk_error(DK_EINVAL, "%s: at most 2^31 - 1 boxes, got %lld", op, (long long)n);
    if ((st = dk_check_float(op, "dets", dets))) return st;
    const int64_t vec[1] = {n};
    if (scores->ndim != 1)
        return dk_error(DK_EINVAL, "%s: 'scores' must be 1-d [N], got %d dimensions", op, (int)scores->ndim);
    if ((st = dk_check_shape(op, "scores", scores, 1, vec))) return st;
    if ((st = dk_check_same_dtype(op, "scores", scores, "dets", dets))) return st;
    if (labels) {
        if (labels->ndim != 1)
            return dk_error(DK_EINVAL, "%s: 'labels' must be 1-d [N], got %d dimensions", op, (int)labels->ndim);
        if ((st = dk_check_shape(op, "labels", labels, 1, vec))) return st;
        const dk_dtype d = dk_tensor_dtype(labels);
        if (d != DK_INT64 && d != DK_INT32 && d != dk_tensor_dtype(dets)) {
            char got[64];
            return dk_error(DK_ETYPE, "%s: 'labels' must be int64, int32 or the dtype of 'dets', got %s", op,
                            dk_dl_dtype_str(labels->dtype, got, sizeof got));
        }
    }
    if ((st = dk_check_shape(op, "keep", keep, 1, vec))) return st;
    if ((st = dk_check_dtype(op, "keep", keep, DK_INT64))) return st;
    const int64_t one[1] = {1};
    if ((st = dk_check_shape(op, "num", num, 1, one))) return st;
    return dk_check_dtype(op, "num", num, DK_INT64);
}
