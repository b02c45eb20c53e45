/*
 * ops/rotated.c — box_iou_rotated, nms_rotated, box_iou_quadri and nms_quadri: definitions and
 * validation. Values are not
 * checked: every value has a defined result (Note [Rotated boxes out of range] in
 * kernels/rotated_math.h; NaN scores sort first, a NaN threshold suppresses nothing).
 */
#include "rotated.h"

#include "dk_check.h"
#include "kernels/rotated_math.h"

/* What a box of each kind is: its width and the words that describe it in errors. */
typedef struct {
    int64_t width;
    const char *what;
} dk__rkind;
static const dk__rkind dk__rotated = {5, "(cx, cy, w, h, angle)"}, dk__quadri = {8, "(x1, y1, ..., x4, y4)"};

/* [K, width] boxes of a float dtype, K < 2^31 (MMCV's kernels index boxes with int). */
static dk_status dk__check_rboxes(const char *op, const char *name, const dk_tensor *t, const dk__rkind *k)
{
    if (t->ndim != 2 || t->shape[1] != k->width || t->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: '%s' must have shape [K, %lld] %s, got %d-d%s", op, name, (long long)k->width,
                        k->what, (int)t->ndim,
                        t->ndim != 2              ? ""
                        : t->shape[1] != k->width ? " with a different width"
                                                  : " with K < 0");
    if (t->shape[0] > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: '%s' may hold at most 2^31 - 1 boxes, got %lld", op, name,
                        (long long)t->shape[0]);
    return dk_check_float(op, name, t);
}

/* box_iou_rotated's and box_iou_quadri's checks. */
static dk_status dk__check_box_iou(const char *op, const dk_tensor *boxes1, const dk_tensor *boxes2,
                                   const dk_tensor *ious, int64_t mode, bool aligned, const dk__rkind *k)
{
    dk_status st;
    if (mode != DK_RBOX_IOU && mode != DK_RBOX_IOF)
        return dk_error(DK_EINVAL, "%s: mode must be 0 (iou) or 1 (iof), got %lld", op, (long long)mode);
    if ((st = dk__check_rboxes(op, "boxes1", boxes1, k))) return st;
    if ((st = dk__check_rboxes(op, "boxes2", boxes2, k))) return st;
    if ((st = dk_check_same_dtype(op, "boxes2", boxes2, "boxes1", boxes1))) return st;
    const int64_t n = boxes1->shape[0], m = boxes2->shape[0];
    if (aligned && n != m)
        return dk_error(DK_EINVAL, "%s: aligned needs as many boxes in 'boxes2' as in 'boxes1', got %lld and %lld", op,
                        (long long)m, (long long)n);
    const int64_t shape[2] = {n, m};
    if ((st = dk_check_shape(op, "ious", ious, aligned ? 1 : 2, shape))) return st;
    return dk_check_dtype(op, "ious", ious, dk_tensor_dtype(boxes1));
}

DK_DEFINE_OP(box_iou_rotated, DK_BOX_IOU_ROTATED_ARGS)
{
    (void)clockwise;
    return dk__check_box_iou("box_iou_rotated", boxes1, boxes2, ious, mode, aligned, &dk__rotated);
}

DK_DEFINE_OP(box_iou_quadri, DK_BOX_IOU_QUADRI_ARGS)
{
    return dk__check_box_iou("box_iou_quadri", boxes1, boxes2, ious, mode, aligned, &dk__quadri);
}

/* nms_rotated's and nms_quadri's checks. */
static dk_status dk__check_rnms(const char *op, const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                                const dk_tensor *keep, const dk_tensor *num, const dk__rkind *k)
{
    dk_status st;
    if (dets->ndim != 2 || dets->shape[1] != k->width || dets->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: 'dets' must have shape [N, %lld] %s, got %d-d%s", op, (long long)k->width,
                        k->what, (int)dets->ndim,
                        dets->ndim != 2              ? ""
                        : dets->shape[1] != k->width ? " with a different width"
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

DK_DEFINE_OP(nms_rotated, DK_NMS_ROTATED_ARGS)
{
    (void)iou_threshold;
    (void)clockwise;
    return dk__check_rnms("nms_rotated", dets, scores, labels, keep, num, &dk__rotated);
}

DK_DEFINE_OP(nms_quadri, DK_NMS_QUADRI_ARGS)
{
    (void)iou_threshold;
    return dk__check_rnms("nms_quadri", dets, scores, labels, keep, num, &dk__quadri);
}
