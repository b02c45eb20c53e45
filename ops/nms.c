/*
 * ops/nms.c — nms, batched_nms, soft_nms and nms_match: definitions, validation, and batched_nms's
 * composite.
 */
#include "nms.h"

#include <math.h>

#include "dk_check.h"
#include "kernels/nms_math.h"

/* Checks shared by nms and batched_nms. */
static dk_status dk__check_nms(const char *op, const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs,
                               const dk_tensor *keep, const char *keep_name, const dk_tensor *num)
{
    dk_status st;
    const int64_t box[2] = {-1, 4}; /* (x1, y1, x2, y2) rows */
    if ((st = dk_check_shape(op, "boxes", boxes, 2, box))) return st;
    if ((st = dk_check_float(op, "boxes", boxes))) return st;
    const int64_t n = boxes->shape[0];
    /* MMCV's and torchvision's kernels index boxes with int; dkit keeps indices below 2^31 too */
    if (n > INT32_MAX) return dk_error(DK_EINVAL, "%s: at most 2^31 - 1 boxes, got %lld", op, (long long)n);
    const int64_t vec[1] = {n};
    if ((st = dk_check_shape(op, "scores", scores, 1, vec))) return st;
    if ((st = dk_check_dtype(op, "scores", scores, dk_tensor_dtype(boxes)))) return st;
    if (idxs) {
        if ((st = dk_check_shape(op, "idxs", idxs, 1, vec))) return st;
        const dk_dtype d = dk_tensor_dtype(idxs);
        if (d != DK_INT64 && d != DK_INT32) {
            char got[64];
            return dk_error(DK_ETYPE, "%s: 'idxs' must be int64 or int32, got %s", op,
                            dk_dl_dtype_str(idxs->dtype, got, sizeof got));
        }
    }
    if ((st = dk_check_shape(op, keep_name, keep, 1, vec))) return st;
    if ((st = dk_check_dtype(op, keep_name, keep, DK_INT64))) return st;
    const int64_t one[1] = {1};
    if ((st = dk_check_shape(op, "num", num, 1, one))) return st;
    return dk_check_dtype(op, "num", num, DK_INT64);
}

DK_DEFINE_OP(nms, DK_NMS_ARGS)
{
    (void)iou_threshold; /* any value: NaN keeps everything, a negative one suppresses nearly all */
    if (offset != 0 && offset != 1)
        return dk_error(DK_EINVAL, "nms: offset must be 0 or 1, got %lld", (long long)offset);
    return dk__check_nms("nms", boxes, scores, idxs, keep, "keep", num);
}

DK_DEFINE_OP(batched_nms, DK_BATCHED_NMS_ARGS)
{
    (void)iou_threshold;
    return dk__check_nms("batched_nms", boxes, scores, idxs, keep, "keep", num);
}

DK_DEFINE_OP(soft_nms, DK_SOFT_NMS_ARGS)
{
    dk_status st;
    if (offset != 0 && offset != 1)
        return dk_error(DK_EINVAL, "soft_nms: offset must be 0 or 1, got %lld", (long long)offset);
    if (method < DK_SOFT_NMS_NAIVE || method > DK_SOFT_NMS_GAUSSIAN)
        return dk_error(DK_EINVAL, "soft_nms: method must be 0 (naive), 1 (linear) or 2 (gaussian), got %lld",
                        (long long)method);
    /* MMCV divides by sigma; 0 or NaN would turn every overlapping score into NaN or 0 silently */
    if (method == DK_SOFT_NMS_GAUSSIAN && !(sigma > 0))
        return dk_error(DK_EINVAL, "soft_nms: sigma must be positive for the gaussian method, got %g", sigma);
    if ((st = dk__check_nms("soft_nms", boxes, scores, NULL, inds, "inds", num))) return st;
    const int64_t rows[2] = {boxes->shape[0], 5};
    if ((st = dk_check_shape("soft_nms", "dets", dets, 2, rows))) return st;
    return dk_check_dtype("soft_nms", "dets", dets, dk_tensor_dtype(boxes));
}

DK_DEFINE_OP(nms_match, DK_NMS_MATCH_ARGS)
{
    dk_status st;
    (void)iou_threshold; /* any value: NaN keeps every box in a group of its own */
    if ((st = dk__check_nms("nms_match", boxes, scores, NULL, members, "members", num))) return st;
    const int64_t vec[1] = {boxes->shape[0]};
    if ((st = dk_check_shape("nms_match", "starts", starts, 1, vec))) return st;
    return dk_check_dtype("nms_match", "starts", starts, DK_INT64);
}

/*
 * Note [batched_nms is nms with categories]
 * torchvision computes batched_nms by offsetting each category's boxes far apart (or by one nms
 * per category) and calling nms. dkit's nms takes the categories itself (boxes of different
 * categories never suppress each other), which a kernel serves at no extra cost, so batched_nms
 * is a composite over nms: any backend with an nms kernel serves it, and the dispatch table shows
 * it as "composite" there. A backend may still register a dedicated kernel, which then wins.
 */
static dk_status dk__batched_nms_composite(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs,
                                           dk_tensor *keep, dk_tensor *num, double iou_threshold)
{
    return dk_nms(boxes, scores, idxs, keep, num, iou_threshold, 0);
}

DK__CONSTRUCTOR(dk__batched_nms_register)
{
    dk_batched_nms_fn typed = dk__batched_nms_composite;
    if (dk_op_register_composite(&dk_batched_nms_op, dk_kernel_unboxed((dk_fnptr)typed, "batched_nms_via_nms"), NULL))
        dk_warn("%s", dk_last_error());
}
