/*
 * ops/box_iou_rotated.c — box_iou_rotated: definition and validation. Values are not checked:
 * every value has a defined result (Note [Rotated boxes out of range] in
 * kernels/rotated_box_math.h).
 */
#include "box_iou_rotated.h"

#include "dk_check.h"
#include "kernels/rotated_box_math.h"

/* [K, 5] boxes of a float dtype, K < 2^31 (MMCV's kernels index boxes with int). */
static dk_status dk__check_rboxes(const char *op, const char *name, const dk_tensor *t)
{
    if (t->ndim != 2 || t->shape[1] != 5 || t->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: '%s' must have shape [K, 5] (cx, cy, w, h, angle), got %d-d%s", op, name,
                        (int)t->ndim, t->ndim != 2 ? "" : t->shape[1] != 5 ? " with a different width" : " with K < 0");
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
