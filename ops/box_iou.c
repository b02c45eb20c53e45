/*
 * ops/box_iou.c — box_iou: definition and validation (ops/box_iou.h).
 */
#include "box_iou.h"

#include "dk_check.h"

static const char *const dk__box_kind_names[DK_BOX_NKINDS] = {
    "box_iou",          "generalized_box_iou", "distance_box_iou",
    "complete_box_iou", "bbox_overlaps 'iou'", "bbox_overlaps 'iof'",
};

static bool dk__box_kind_is_mmcv(int64_t kind) { return kind == DK_BOX_MMCV_IOU || kind == DK_BOX_MMCV_IOF; }

dk_dtype dk_box_iou_out_dtype(int64_t kind, dk_dtype boxes)
{
    if (kind < 0 || kind >= DK_BOX_NKINDS) return DK_DTYPE_UNSUPPORTED;
    switch (boxes) {
    case DK_FLOAT32:
    case DK_FLOAT64: return boxes;
    case DK_FLOAT16:
    case DK_BFLOAT16: return dk__box_kind_is_mmcv(kind) ? boxes : DK_FLOAT32; /* Note [16-bit boxes] */
    case DK_INT8:
    case DK_UINT8:
    case DK_INT16:
    case DK_INT32:
    case DK_INT64: return dk__box_kind_is_mmcv(kind) ? DK_DTYPE_UNSUPPORTED : DK_FLOAT32; /* Note [Integer boxes] */
    default: return DK_DTYPE_UNSUPPORTED;
    }
}

int dk_box_iou_narrow(int64_t kind, dk_dtype boxes)
{
    if (kind != DK_BOX_IOU && kind != DK_BOX_GIOU && kind != DK_BOX_MMCV_IOU && kind != DK_BOX_MMCV_IOF)
        return DK_BOX_NARROW_NONE; /* distance and complete IoU upcast first */
    switch (boxes) {
    case DK_FLOAT16: return DK_BOX_NARROW_F16;
    case DK_BFLOAT16: return DK_BOX_NARROW_BF16;
    case DK_INT8: return DK_BOX_NARROW_I8;
    case DK_UINT8: return DK_BOX_NARROW_U8;
    case DK_INT16: return DK_BOX_NARROW_I16;
    default: return DK_BOX_NARROW_NONE;
    }
}

static dk_status dk__check_boxes(const char *name, const dk_tensor *t)
{
    if (t->ndim != 2 || t->shape[1] != 4 || t->shape[0] < 0) {
        if (t->ndim != 2)
            return dk_error(DK_EINVAL, "box_iou: '%s' must have shape [N, 4] (x1, y1, x2, y2), got %d dimensions", name,
                            (int)t->ndim);
        return dk_error(DK_EINVAL, "box_iou: '%s' must have shape [N, 4] (x1, y1, x2, y2), got [%lld, %lld]", name,
                        (long long)t->shape[0], (long long)t->shape[1]);
    }
    /* the references index boxes with int (MMCV's kernels) and dkit keeps box indices below 2^31
     * everywhere (ops/nms.h): a row index then fits every backend's int */
    if (t->shape[0] > INT32_MAX)
        return dk_error(DK_EINVAL, "box_iou: at most 2^31 - 1 boxes in '%s', got %lld", name, (long long)t->shape[0]);
    return DK_OK;
}

DK_DEFINE_OP(box_iou, DK_BOX_IOU_ARGS)
{
    dk_status st;
    (void)eps; /* any value: it is the caller's, as in torchvision (NaN gives NaN) */
    if (kind < 0 || kind >= DK_BOX_NKINDS)
        return dk_error(DK_EINVAL, "box_iou: kind must be in [0, %d) (dk_box_kind), got %lld", (int)DK_BOX_NKINDS,
                        (long long)kind);
    const bool mmcv = dk__box_kind_is_mmcv(kind);
    if (offset != 0 && !(mmcv && offset == 1))
        return dk_error(DK_EINVAL, "box_iou: offset must be 0%s, got %lld (kind %s)", mmcv ? " or 1" : "",
                        (long long)offset, dk__box_kind_names[kind]);
    if ((st = dk__check_boxes("boxes1", boxes1)) || (st = dk__check_boxes("boxes2", boxes2))) return st;
    if ((st = dk_check_same_dtype("box_iou", "boxes2", boxes2, "boxes1", boxes1))) return st;
    const dk_dtype want = dk_box_iou_out_dtype(kind, dk_tensor_dtype(boxes1));
    if (want == DK_DTYPE_UNSUPPORTED) {
        char got[64];
        return dk_error(DK_ETYPE, "box_iou: 'boxes1' must be %s for %s, got %s",
                        mmcv ? "float16, bfloat16, float32 or float64"
                             : "float16, bfloat16, float32, float64, int8, uint8, int16, int32 or int64",
                        dk__box_kind_names[kind], dk_dl_dtype_str(boxes1->dtype, got, sizeof got));
    }
    const int64_t n = boxes1->shape[0], m = boxes2->shape[0];
    if (aligned) {
        if (n != m)
            return dk_error(DK_EINVAL,
                            "box_iou: aligned pairs need as many boxes in 'boxes2' as in 'boxes1', got %lld and %lld",
                            (long long)m, (long long)n);
        const int64_t shape[1] = {n};
        if ((st = dk_check_ndim("box_iou", "out", out, 1, "[N]")) ||
            (st = dk_check_shape("box_iou", "out", out, 1, shape)))
            return st;
    } else {
        const int64_t shape[2] = {n, m};
        if ((st = dk_check_ndim("box_iou", "out", out, 2, "[N, M]")) ||
            (st = dk_check_shape("box_iou", "out", out, 2, shape)))
            return st;
    }
    return dk_check_dtype("box_iou", "out", out, want);
}
