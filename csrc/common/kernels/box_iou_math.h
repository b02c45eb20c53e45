/*
 * kernels/box_iou_math.h — overlaps of axis-aligned boxes (x1, y1, x2, y2) as box_iou returns
 * them (ops/box_iou.h), written once for every backend (host and device; plain C that also
 * compiles as CUDA/HIP C++). The overlap NMS decides with is kernels/nms_math.h's: the
 * references compute the two differently (scalar code there, tensor code here).
 *
 * Box IoU (torchvision's box_iou, generalized/distance/complete IoU, and MMCV's bbox_overlaps,
 * tensor code): max and min propagate NaN (torch.maximum), widths clamp at 0 keeping NaN, and
 * nothing guards a division by zero. dk_box_iou_pair_* evaluates one pair in the order the
 * tensor expressions do, so that its results are theirs to the bit wherever the references' own
 * arithmetic is correctly rounded (everything but atan, whose vectorised form in torch may differ
 * from the C library's by an ulp). For bbox_overlaps that is MMCV's CPU kernel (tensor code).
 * MMCV's CUDA kernel differs on degenerate and NaN boxes: it divides by max(union, offset) (iof:
 * max(area, offset)) and its fmaxf/fminf drop a NaN operand; on ordinary boxes all agree.
 *
 * Note [16-bit boxes]
 * torchvision's box_iou and generalized_box_iou take the max/min of float16 or bfloat16 boxes in
 * their dtype (exact), subtract in it (rounded to 16 bits), then _upcast the widths and heights
 * to float32, and compute the areas from boxes upcast first: the result is float32 and only
 * those differences are rounded to 16 bits (`narrow`). distance_box_iou and complete_box_iou
 * upcast the boxes before anything else: float32 throughout, narrow 0. MMCV's CPU bbox_overlaps
 * computes every tensor op in the boxes' dtype and returns that dtype: narrow rounds every
 * intermediate result. Rounding each float32 result of an operation on 16-bit values to 16 bits
 * is what computing it in 16 bits gives (float32 has more than twice the precision plus 2 bits,
 * so the double rounding is innocuous for +, -, *, /).
 *
 * Note [Integer boxes]
 * torchvision accepts integer boxes: _upcast keeps int32 and int64 and turns int8, uint8 and
 * int16 into int32, so widths, areas, intersections and unions are integers, computed with the
 * tensor's wrap-around, and only the divisions (true division) and the additions of eps produce
 * float32, converting each integer operand to float32 first. dk_box_iou_pair_int follows that
 * exactly: integer arithmetic modulo 2^64, or 2^32 for the other integer types (`w32`; done in
 * unsigned arithmetic so that C sees no overflow), float32 from the first division on. Two
 * differences come before the upcast in box_iou and generalized_box_iou: the intersection's and
 * the enclosing box's rb - lt are computed in the boxes' own dtype, so for int8, uint8 and int16
 * boxes they wrap around at 8 or 16 bits (an unsigned uint8 difference is never negative:
 * 3 - 5 is 254) before the clamp at 0; `narrow` (dk_box_iou_narrow: DK_BOX_NARROW_I8, _U8,
 * _I16) does that, and distance_box_iou and complete_box_iou, which upcast the boxes first, have
 * none. bool boxes fail in torchvision (no subtraction of bools) and dkit refuses them. MMCV's
 * bbox_overlaps writes into an output of the boxes' dtype, so integer boxes give truncated
 * integers there: dkit refuses them for the MMCV kinds (ops/box_iou.c).
 */
#ifndef DK_KERNELS_BOX_IOU_MATH_H
#define DK_KERNELS_BOX_IOU_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"

/* What a box-overlap kernel computes (dk_box_iou_pair_*). */
typedef enum {
    DK_BOX_IOU = 0,      /* torchvision box_iou: inter / union */
    DK_BOX_GIOU = 1,     /* torchvision generalized_box_iou */
    DK_BOX_DIOU = 2,     /* torchvision distance_box_iou (eps) */
    DK_BOX_CIOU = 3,     /* torchvision complete_box_iou (eps) */
    DK_BOX_MMCV_IOU = 4, /* MMCV bbox_overlaps mode 'iou' (offset) */
    DK_BOX_MMCV_IOF = 5, /* MMCV bbox_overlaps mode 'iof': inter / area of the first box */
    DK_BOX_NKINDS
} dk_box_kind;

#define DK_TEMPLATE "kernels/box_iou_math_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "dk_instantiate.h"

/* `narrow` codes (dk_box_iou_narrow): the dtype a difference is computed in before torchvision's
 * _upcast. Floats round (dk_box_narrow), integers wrap around (dk_box_inarrow). */
enum {
    DK_BOX_NARROW_NONE = 0,
    DK_BOX_NARROW_F16 = 1,
    DK_BOX_NARROW_BF16 = 2,
    DK_BOX_NARROW_I8 = 3,
    DK_BOX_NARROW_U8 = 4,
    DK_BOX_NARROW_I16 = 5
};

/* torch's integer arithmetic for integer boxes (Note [Integer boxes]): int64, or int32 when w32,
 * both wrapping around. */
DK_HD DK_INLINE int64_t dk_box_iwrap(uint64_t v, int w32) { return w32 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v; }
DK_HD DK_INLINE int64_t dk_box_isub(int64_t a, int64_t b, int w32)
{
    return dk_box_iwrap((uint64_t)a - (uint64_t)b, w32);
}
DK_HD DK_INLINE int64_t dk_box_iadd(int64_t a, int64_t b, int w32)
{
    return dk_box_iwrap((uint64_t)a + (uint64_t)b, w32);
}
DK_HD DK_INLINE int64_t dk_box_imul(int64_t a, int64_t b, int w32)
{
    return dk_box_iwrap((uint64_t)a * (uint64_t)b, w32);
}
DK_HD DK_INLINE int64_t dk_box_imax(int64_t a, int64_t b) { return a > b ? a : b; }
/* A difference computed in the boxes' own 8- or 16-bit integer dtype (Note [Integer boxes]). */
DK_HD DK_INLINE int64_t dk_box_inarrow(int64_t v, int narrow)
{
    if (narrow == DK_BOX_NARROW_I8) return (int64_t)(int8_t)(uint8_t)(uint64_t)v;
    if (narrow == DK_BOX_NARROW_U8) return (int64_t)(uint8_t)(uint64_t)v;
    if (narrow == DK_BOX_NARROW_I16) return (int64_t)(int16_t)(uint16_t)(uint64_t)v;
    return v;
}
DK_HD DK_INLINE int64_t dk_box_imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* One pair of torchvision's box-IoU family for integer boxes (Note [Integer boxes]): the float32
 * result. kind is DK_BOX_IOU .. DK_BOX_CIOU; eps already rounded to float32 as torch rounds it;
 * narrow is dk_box_iou_narrow's (0 for int32, int64 and the distance kinds). */
DK_HD DK_INLINE float dk_box_iou_pair_int(const int64_t *a, const int64_t *b, int kind, float eps, int w32, int narrow)
{
    const int64_t area1 = dk_box_imul(dk_box_isub(a[2], a[0], w32), dk_box_isub(a[3], a[1], w32), w32);
    const int64_t area2 = dk_box_imul(dk_box_isub(b[2], b[0], w32), dk_box_isub(b[3], b[1], w32), w32);
    const int64_t w = dk_box_imax(
        dk_box_inarrow(dk_box_isub(dk_box_imin(a[2], b[2]), dk_box_imax(a[0], b[0]), w32), narrow), 0);
    const int64_t h = dk_box_imax(
        dk_box_inarrow(dk_box_isub(dk_box_imin(a[3], b[3]), dk_box_imax(a[1], b[1]), w32), narrow), 0);
    const int64_t inter = dk_box_imul(w, h, w32);
    const int64_t uni = dk_box_isub(dk_box_iadd(area1, area2, w32), inter, w32);
    const float iou = (float)inter / (float)uni;
    if (kind == DK_BOX_IOU) return iou;
    const int64_t wi = dk_box_imax(
        dk_box_inarrow(dk_box_isub(dk_box_imax(a[2], b[2]), dk_box_imin(a[0], b[0]), w32), narrow), 0);
    const int64_t hi = dk_box_imax(
        dk_box_inarrow(dk_box_isub(dk_box_imax(a[3], b[3]), dk_box_imin(a[1], b[1]), w32), narrow), 0);
    if (kind == DK_BOX_GIOU) {
        const int64_t areai = dk_box_imul(wi, hi, w32);
        return iou - (float)dk_box_isub(areai, uni, w32) / (float)areai;
    }
    const float diag = (float)dk_box_iadd(dk_box_imul(wi, wi, w32), dk_box_imul(hi, hi, w32), w32) + eps;
    const float xp = (float)dk_box_iadd(a[0], a[2], w32) / 2.0f, yp = (float)dk_box_iadd(a[1], a[3], w32) / 2.0f;
    const float xg = (float)dk_box_iadd(b[0], b[2], w32) / 2.0f, yg = (float)dk_box_iadd(b[1], b[3], w32) / 2.0f;
    const float dx = xp - xg, dy = yp - yg;
    const float diou = iou - (dx * dx + dy * dy) / diag;
    if (kind == DK_BOX_DIOU) return diou;
    const float at = atanf((float)dk_box_isub(a[2], a[0], w32) / (float)dk_box_isub(a[3], a[1], w32)) -
                     atanf((float)dk_box_isub(b[2], b[0], w32) / (float)dk_box_isub(b[3], b[1], w32));
    const float v = (float)0.40528473456935108578 * (at * at);
    const float alpha = v / (1.0f - iou + v + eps);
    return diou - alpha * v;
}

#endif /* DK_KERNELS_BOX_IOU_MATH_H */
