/*
 * ops/nms_rotated.c — nms_rotated: definition and validation. Values are not checked: every
 * value has a defined result (Note [Rotated boxes out of range] in kernels/rotated_box_math.h;
 * NaN scores sort first, a NaN threshold suppresses nothing).
 */
#include "nms_rotated.h"

#include "dk_check.h"

DK_DEFINE_OP(nms_rotated, DK_NMS_ROTATED_ARGS)
{
    static const char op[] = "nms_rotated";
    dk_status st;
    (void)iou_threshold;
    (void)clockwise;
    if (dets->ndim != 2 || dets->shape[1] != 5 || dets->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: 'dets' must have shape [N, 5] (cx, cy, w, h, angle), got %d-d%s", op,
                        (int)dets->ndim, dets->ndim != 2 ? "" : dets->shape[1] != 5 ? " with a different width" : " with N < 0");
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
